//! The API's only ways to the master: clear requests on its request port (the same loads
//! Salt's `Resolver`, `LocalClient`, `RunnerClient` and `WheelClient` send, so a stock
//! salt-master answers them too) and its event bus ([`MasterBus`]). Nothing here reads the
//! master's stores.

use halite_client::{Credentials, LocalClient};
use halite_config::MasterConfig;
use halite_journal::MasterBus;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// How long a clear request may take before the master counts as not answering.
pub const REQUEST_TIMEOUT: std::time::Duration = halite_client::local::PUBLISH_TIMEOUT;

/// The master one API serves.
pub struct MasterLink {
    cfg: Arc<MasterConfig>,
    endpoint: String,
    ctx: zmq::Context,
    bus: MasterBus,
    marker: PathBuf,
}

impl MasterLink {
    /// The master configured by `cfg` (its `interface`, `ret_port`, `sock_dir`).
    pub fn new(cfg: Arc<MasterConfig>) -> MasterLink {
        let host = match cfg.interface.as_str() {
            "0.0.0.0" => "127.0.0.1".to_owned(),
            "::" => "[::1]".to_owned(),
            h if h.contains(':') => format!("[{h}]"),
            h => h.to_owned(),
        };
        // Halite's config refuses any transport but zeromq, whose marker this is.
        let marker = cfg.sock_dir.join("workers.ipc");
        MasterLink {
            endpoint: format!("tcp://{host}:{}", cfg.ret_port),
            ctx: zmq::Context::new(),
            bus: MasterBus::from_config(&cfg),
            marker,
            cfg,
        }
    }

    /// `NetapiClient._is_master_running`: whether the master's `workers.ipc` exists in
    /// `sock_dir` (zeromq transport).
    pub fn is_running(&self) -> bool {
        self.marker.exists()
    }

    /// The master's event bus.
    pub fn bus(&self) -> &MasterBus {
        &self.bus
    }

    /// The master's config.
    pub fn config(&self) -> &MasterConfig {
        &self.cfg
    }

    /// A local client of the master authenticating with `credentials` (a token or an
    /// eauth login; never the API process's own key).
    pub fn client(&self, credentials: Credentials) -> LocalClient {
        let mut client = LocalClient::new(&self.cfg);
        client.set_credentials(credentials);
        client
    }

    /// Sends `load` as a clear request and returns the decoded reply.
    pub async fn clear(&self, load: Value) -> Result<Value, halite_client::Error> {
        let body = value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]));
        let (ctx, endpoint) = (self.ctx.clone(), self.endpoint.clone());
        let reply = tokio::task::spawn_blocking(move || {
            halite_transport::client::request(&ctx, &endpoint, &body, REQUEST_TIMEOUT)
        })
        .await
        .map_err(|e| halite_client::Error::BadReply(e.to_string()))?;
        let reply = match reply {
            Ok(r) => r,
            Err(halite_transport::Error::Timeout(_)) => return Err(halite_client::Error::Timeout),
            Err(e) => return Err(e.into()),
        };
        value::decode(&reply).map_err(|e| halite_client::Error::BadReply(e.to_string()))
    }

    /// `Resolver.mk_token(creds)`: every field of `creds` (a map) goes to the master with
    /// `cmd: mk_token`, as salt-api forwards the whole login body. The token data, or
    /// [`halite_client::Error::Authentication`] when the master refuses.
    pub async fn mk_token(&self, creds: &Value) -> Result<Value, halite_client::Error> {
        let mut load = match creds {
            Value::Map(m) => Value::Map(m.clone()),
            _ => Value::Map(vec![]),
        };
        value::set(&mut load, "cmd", s("mk_token"));
        halite_client::token::parse_mk_token_reply(&self.clear(load).await?)
    }

    /// `Resolver.get_token(token)`: the token's data, `None` when the master has no such
    /// token or it expired.
    pub async fn get_token(&self, token: &str) -> Result<Option<Value>, halite_client::Error> {
        let load = map([("token", s(token)), ("cmd", s("get_token"))]);
        halite_client::token::parse_get_token_reply(&self.clear(load).await?)
    }

    /// `Resolver.rm_token(token)`: asks the master to remove the token (`{"token", "cmd":
    /// "rm_token"}`). A master without that command answers `{}`; the answer is not looked
    /// at, as Salt's `Resolver.rm_token` does not look at it.
    pub async fn rm_token(&self, token: &str) -> Result<(), halite_client::Error> {
        let load = map([("token", s(token)), ("cmd", s("rm_token"))]);
        self.clear(load).await.map(|_| ())
    }
}
