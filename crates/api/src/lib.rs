//! `halite-api`: a drop-in for salt-api's `rest_cherrypy` module, so pepper, SaltGUI and
//! curl scripts work unchanged, in front of a Halite master or a stock salt-master.
//!
//! # What it does
//!
//! * Reads the master config's `rest_cherrypy:` section and the master options salt-api
//!   uses ([`config`]), serves HTTP (or HTTPS through OpenSSL) on axum/hyper ([`server`]),
//!   with salt-api's URL map, status codes, bodies, content negotiation and CORS
//!   ([`app`], [`body`], [`render`]).
//! * Talks to the master only through the master's own interfaces ([`link`]): clear
//!   requests on its request port (`mk_token`, `get_token`, `publish`, `runner`, `wheel`,
//!   authenticated with the caller's eauth token or login, never with a key of this
//!   process) and its event bus, plus, for `/metrics`, a Halite master's read-only metrics
//!   socket. So it works in front of a stock salt-master too, where only the event
//!   journal's ids and the master's metrics are missing.
//! * Runs lowstates with salt-api's clients and validation order ([`lowstate`]);
//!   `netapi_enable_clients` is empty by default, so nothing runs until the admin enables
//!   clients, as in Salt 3008.
//! * Streams the event bus as Server-Sent Events ([`events`]) and over a WebSocket
//!   (`/ws`, [`ws`]), with salt-api's framing, `websocket client ready` handshake and
//!   `format_events` view.
//! * `POST /keys` answers the key-pair tarball of wheel `key.gen_accept` ([`keys`]).
//!
//! # Beyond salt-api (each documented where it is implemented)
//!
//! * A session token is the master's eauth token ([`session`]): sessions survive restarts
//!   of `halite-api` and of a Halite master (salt#49993), and end with the token
//!   (salt#42622).
//! * `/events` frames carry `id:` lines from the master's event journal, and a client
//!   reconnecting with `Last-Event-ID` gets every event it missed, none twice; `?tag=`
//!   filters by glob; keep-alive comments keep proxies from cutting quiet streams. `/ws`
//!   has the same (`?tag=`, `?ids`, `?last_event_id=`, Pings) and ends with the token.
//! * `rest_cherrypy: events_acl: true` (default off) drops from `/events` and `/ws` the
//!   job, runner and wheel events of jobs the session's ACL does not cover, decided by
//!   `halite-acl` (rule in [`events`]).
//! * `/hook` leaves `X-Auth-Token` and `Cookie` out of the event it fires.
//! * CORS preflights are answered 200 (salt#55087) and `X-Auth-Token` is exposed.
//! * The session cookie is `HttpOnly; SameSite=Lax` (and `Secure` over HTTPS).
//! * `GET /metrics` ([`metrics`]): Prometheus metrics in the OpenMetrics text format,
//!   encoded by `prometheus-client`: the master's, read per scrape from a Halite master's
//!   metrics socket (`halite_master_up 0` without one, e.g. a stock master), and the API's
//!   own (requests, durations, event streams). A session is needed unless
//!   `rest_cherrypy: metrics_disable_auth: true`.
//!
//! # What it does not do (yet)
//!
//! The `ssh` client. `wheel`, `wheel_async` and `GET /keys` send
//! the master's clear `wheel` command (Halite and stock masters answer it; one that
//! answers `{}` gives 400 "Client unavailable"). `/logout` sends the clear `rm_token`
//! command (what Salt's `Resolver.rm_token` sends), which a Halite master answers by
//! removing the token for every client; this process refuses the token from then on
//! whatever the master answers, and a stock 3008.3 master (which lacks the command) keeps
//! it valid elsewhere until it expires.
//!
//! # Invariants
//!
//! * Nothing a client sends panics the API: bodies, headers, tokens and lowstates are
//!   untrusted and every failure is an HTTP status.
//! * A request never reaches the master without credentials the caller gave (a token or
//!   an eauth login): the executor refuses a chunk without them (401) before anything is
//!   sent.
//! * Event streams never block each other or the bus: one upstream subscription is
//!   shared, a slow client falls behind on its own and catches up from the journal.

pub mod app;
pub mod body;
pub mod config;
pub mod events;
pub mod keys;
pub mod link;
pub mod lowstate;
pub mod metrics;
pub mod render;
pub mod server;
pub mod session;
pub mod ws;

pub use app::Api;
pub use config::ApiConfig;
pub use link::MasterLink;
pub use server::Server;

use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why `halite-api` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option of the master config is missing or wrong.
    #[error("{file}: {message}")]
    Config {
        /// The master config file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The certificate or key cannot be used.
    #[error("TLS: {message}")]
    Tls {
        /// What failed, naming the file.
        message: String,
    },
    /// The listening address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Runs the API for the master configured by `master` until `shutdown`; `ready` is called
/// once it listens.
pub async fn run(
    master: halite_config::MasterConfig,
    cfg: ApiConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), Error> {
    let link = MasterLink::new(Arc::new(master));
    let api = Api::new(cfg, link, shutdown.clone());
    let server = Server::bind(api).await?;
    if let Ok(addr) = server.local_addr() {
        ready(addr);
    }
    server.serve(shutdown).await;
    Ok(())
}
