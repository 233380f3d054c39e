//! The Halite minion: Salt 3008's minion protocol on ZeroMQ, driven by a stock or a Halite
//! master, with Halite's execution modules and a Salt-format local event bus.
//!
//! [`run`] starts everything and serves until shutdown:
//! - the control thread ([`daemon`]) signs in ([`auth`]), subscribes to the publish port,
//!   fetches the pillar, announces the start, then verifies, decrypts, de-duplicates and
//!   targets every publish and re-connects when the master goes away;
//! - each targeted job runs on its own thread ([`jobs`]) and sends its `_return` over the
//!   shared encrypted request channel ([`channel`]);
//! - the minion bus (`minion_event_<hash>_pub/pull.ipc`) is served on a small tokio
//!   runtime, so local programs can listen and fire as with Salt;
//! - events fired there with a `fire_master` tag are queued and sent to the master as
//!   `_minion_event` requests by a sender thread with its own request socket
//!   ([`forward`]), batched under load and held while the master is away (at most
//!   `fire_master_queue_size` events, a Halite option, default 10,000; the oldest go).
//!
//! `halite-call` reuses [`auth`], [`channel`], [`keys`] and [`settings`] to return a local
//! call to the master.
//!
//! What it does not do: multi-master (only the first `master` is used), failover, the
//! TCP/websocket transports, beacons, the scheduler,
//! returners, `start_event`, `master_finger`, `verify_master_pubkey_sign` (a master that
//! sends `pub_sig` is refused), `minion_sign_messages`.
//!
//! Invariants:
//! - Nothing received from the network panics the minion: every publish is parsed,
//!   verified and decrypted by `halite_proto::minion` and dropped with a log line when it
//!   fails; a job's failure stays in its thread.
//! - A master key, once pinned in `minion_master.pub`, is never replaced: a master with
//!   another key is refused with Salt's critical message, and nothing it publishes runs.
//! - A publish runs at most once: serials must increase per AES key, jids are remembered
//!   (`minion_jid_queue_hwm`).

pub mod auth;
pub mod channel;
pub mod daemon;
pub mod forward;
pub mod jobs;
pub mod keys;
pub mod settings;
pub mod shutdown;
pub mod transport;

pub use halite_exec::SALT_VERSION;

use daemon::{Daemon, Exit};
use halite_config::{IdSource, IpcMode, MinionConfig};
use halite_proto::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit status Salt uses when the master rejected the key (`EX_NOPERM`).
pub const EX_NOPERM: u8 = 77;

/// Every way the minion, or a call to its master, can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration holds an invalid value.
    #[error(transparent)]
    Config(#[from] halite_config::ConfigError),
    /// The minion's or the pinned master's key cannot be read or written.
    #[error("keys: {0}")]
    Keys(String),
    /// A file or directory the minion needs is not usable.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A ZeroMQ call failed.
    #[error("ZeroMQ {op}: {source}")]
    Zmq {
        /// What was being done.
        op: String,
        /// The libzmq error.
        source: zmq::Error,
    },
    /// The master did not answer in time.
    #[error("SaltReqTimeoutError: Message timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// Signing in failed (changed master key, bad signature, bad nonce, unsupported
    /// algorithm, refused reply...); the message is Salt's.
    #[error("{0}")]
    Auth(String),
    /// The master rejected this minion's key.
    #[error("The Salt Master has rejected this minion's public key")]
    Rejected,
    /// The key is not accepted yet (reported instead of waiting by `halite-call`).
    #[error("Minion failed to authenticate with the master, has the minion key been accepted?")]
    Pending,
    /// A reply from the master could not be used.
    #[error(transparent)]
    Reply(#[from] halite_proto::minion::ReplyError),
    /// The event bus could not be bound.
    #[error("event bus: {0}")]
    Bus(#[from] halite_bus::Error),
    /// Shutdown was requested while waiting.
    #[error("the minion is shutting down")]
    Stopped,
    /// A `fire_master` event on the minion bus cannot be forwarded; the text says why.
    #[error("{0}")]
    BadEvent(String),
    /// A request was abandoned while waiting for the reply because its caller gave up
    /// (the forwarder does when the link to the master drops).
    #[error("the request was abandoned: the link to the master dropped")]
    Interrupted,
}

/// A random number in `0..n` (0 when `n` is 0).
pub(crate) fn random_below(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut raw = [0u8; 8];
    if openssl::rand::rand_bytes(&mut raw).is_err() {
        return 0;
    }
    u64::from_le_bytes(raw) % n
}

fn make_dir(path: &Path, mode: u32) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(|source| Error::Io {
        what: "cannot create",
        path: path.to_owned(),
        source,
    })?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    Ok(())
}

/// Salt's `verify_env` for a minion: `pki_dir` (0700), `cachedir` with `proc/`, `sock_dir`.
pub fn prepare_dirs(cfg: &MinionConfig) -> Result<(), Error> {
    make_dir(&cfg.pki_dir, 0o700)?;
    make_dir(&cfg.cachedir, 0o755)?;
    make_dir(&cfg.cachedir.join("proc"), 0o755)?;
    make_dir(&cfg.sock_dir, 0o750)?;
    Ok(())
}

/// Caches a generated id in `<root_dir>/<config dir>/minion_id`, as Salt does with
/// `minion_id_caching` (default on), so the id survives a host rename.
fn cache_generated_id(cfg: &MinionConfig) {
    if cfg.id_source != IdSource::Generated
        || cfg.get("minion_id_caching") == Some(&Value::Boolean(false))
    {
        return;
    }
    let Some(conf_dir) = cfg.conf_file.parent() else {
        return;
    };
    let rel = conf_dir.strip_prefix("/").unwrap_or(conf_dir);
    let path = cfg.root_dir.join(rel).join("minion_id");
    match std::fs::write(&path, cfg.id.as_bytes()) {
        Ok(()) => tracing::debug!("Caching minion id to {}", path.display()),
        Err(e) => tracing::debug!("Cannot cache the minion id in {}: {e}", path.display()),
    }
}

/// How [`run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Shutdown was requested.
    Stopped,
    /// The master rejected the key; exit with [`EX_NOPERM`].
    Rejected,
}

/// Runs the minion until `shutdown` is cancelled or the master rejects the key.
pub async fn run(cfg: MinionConfig, shutdown: CancellationToken) -> Result<Outcome, Error> {
    let settings = Arc::new(settings::Settings::from_config(&cfg)?);
    prepare_dirs(&cfg)?;
    cache_generated_id(&cfg);
    let (pki_dir, keysize) = (cfg.pki_dir.clone(), cfg.keysize);
    let keys =
        tokio::task::spawn_blocking(move || keys::MinionKeys::load_or_create(&pki_dir, keysize))
            .await
            .map_err(|e| Error::Keys(e.to_string()))??;
    let cfg = Arc::new(cfg);
    let grains = Arc::new(halite_exec::core_grains(&cfg));

    let sockets = match cfg.ipc_mode {
        IpcMode::Ipc => {
            let hash_id = cfg
                .get("hash_id")
                .and_then(Value::as_str)
                .unwrap_or(&cfg.id);
            halite_bus::BusSockets::minion(&cfg.sock_dir, &cfg.hash_type, hash_id)?
        }
        IpcMode::Tcp => halite_bus::BusSockets::tcp(cfg.tcp_pub_port, cfg.tcp_pull_port),
    };
    let max_event_size = usize::try_from(cfg.max_event_size).unwrap_or(usize::MAX);
    let bus_server = halite_bus::BusServer::bind(&sockets, max_event_size).await?;
    let bus = bus_server.handle();
    let bus_stop = CancellationToken::new();
    let forwarder = Arc::new(forward::Forwarder::new(
        &cfg.id,
        settings.fire_master_queue_size,
    ));
    let collector = forwarder
        .clone()
        .start_collector(bus.subscribe(), bus_stop.clone())
        .map_err(|source| Error::Io {
            what: "cannot start the fire_master collector thread in",
            path: cfg.cachedir.clone(),
            source,
        })?;
    let bus_task = tokio::spawn(bus_server.run(bus_stop.clone()));

    let stop = Arc::new(shutdown::Shutdown::new());
    let daemon = Daemon {
        cfg: cfg.clone(),
        settings,
        keys: Arc::new(keys),
        grains,
        registry: Arc::new(halite_exec::Registry::builtin()),
        bus,
        forwarder: forwarder.clone(),
        stop: stop.clone(),
    };
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("minion".into())
        .spawn(move || {
            let _ = done_tx.send(daemon.run());
        })
        .map_err(|source| Error::Io {
            what: "cannot start the minion thread in",
            path: cfg.cachedir.clone(),
            source,
        })?;

    let exit = tokio::select! {
        _ = shutdown.cancelled() => {
            stop.stop();
            Exit::Stopped
        }
        exit = done_rx => exit.unwrap_or(Exit::Stopped),
    };
    tracing::info!("The Salt Minion is shutting down");
    bus_stop.cancel();
    let _ = bus_task.await;
    let _ = tokio::task::spawn_blocking(move || collector.join()).await;
    forwarder.abandon();
    Ok(match exit {
        Exit::Stopped => Outcome::Stopped,
        Exit::Rejected => Outcome::Rejected,
    })
}
