//! The Halite minion: Salt 3008's minion protocol on ZeroMQ, driven by a stock or a Halite
//! master, with Halite's execution modules and a Salt-format local event bus.
//!
//! [`run`] starts everything and serves until shutdown:
//! - the control threads ([`daemon`]) sign in ([`auth`]), subscribe to the publish port,
//!   fetch the pillar, announce the start, then verify, decrypt, de-duplicate and target
//!   every publish, and connect again (to the next master, with failover) when the master
//!   goes away — noticed on the connection itself, by ZMTP heartbeats
//!   ([`transport::Heartbeat`]);
//! - the masters: `master` and `master_type` make a [`topology::Plan`]: one master, every
//!   listed master at once (hot-hot: a thread and a connection per master, one shared jid
//!   queue), or one at a time over the list (failover, with `master_failback`), or none
//!   (`disable`); `func` takes the address from a function;
//! - each targeted job runs on its own thread ([`jobs`]) and sends its `_return` over the
//!   encrypted request channel ([`channel`]) of the master that published it; a function
//!   Halite lacks runs in Salt's own loader on the host's Salt (`halite-fallback`, started
//!   on first use, gone when idle; its master requests go through that channel); a job that
//!   panics returns Salt's exception text and the minion goes on; a publish that is stale
//!   (it waited on the minion longer than `publish_max_age`, or it is from before the
//!   minion's last sign-in) is logged and dropped ([`daemon`]);
//! - the minion bus (`minion_event_<hash>_pub/pull.ipc`) is served on a small tokio
//!   runtime, so local programs can listen and fire as with Salt;
//! - events fired there with a `fire_master` tag are queued and sent to the master as
//!   `_minion_event` requests by a sender thread with its own request socket
//!   ([`forward`]; a queue per master connected at once, so hot-hot masters all get
//!   them), batched under load and held while the master is away, then sent to the next
//!   one (at most `fire_master_queue_size` events, a Halite option, default 10,000; the
//!   oldest go).
//!
//! Stopping (SIGTERM, SIGINT): no publish is read any more; running jobs get
//! `shutdown_job_timeout` (a Halite option, default 5 s, Salt's wait) to finish and send
//! their returns, then get SIGTERM; a return that cannot be sent meanwhile is kept under
//! `cachedir/halite_returns` and sent at the next start ([`spool`]). Salt's minion runs
//! publishes for 5 s more, always waits the 5 s, and loses returns its master did not take.
//!
//! A request whose connection closes before the reply (a master stopping) fails at once
//! and is sent again ([`transport::ReqSocket`]), instead of waiting out its timeout as
//! Salt's does; a timeout names the master's address after Salt's wording.
//!
//! `halite-call` reuses [`auth`], [`channel`], [`keys`] and [`settings`] to return a local
//! call to the master.
//!
//! Trust in the master's key ([`auth`]): trust on first use in `minion_master.pub`, or
//! `verify_master_pubkey_sign` with `pki_dir/<master_sign_key_name>.pub` (checked on every
//! sign-in, unlike Salt: salt#55523), and `master_finger` (a mismatch ends the minion with
//! status 42, [`EX_MASTER_FINGER`]).
//!
//! What it does not do: the TCP/websocket transports, beacons, the scheduler (so no
//! `__master_alive` schedule job: liveness is the heartbeat), `ping_interval`, returners,
//! `start_event`, `open_mode`, `minion_sign_messages`, SSDP master discovery.
//!
//! Deviations from Salt's multi-master, each fixing a measured failure (see [`daemon`],
//! [`topology`]): a hung master (SIGSTOP, connections open) or one cut off the network is
//! detected within `master_alive_interval` (Salt never detects one); masters sharing an IP
//! on different ports fail over and stay put (Salt retries the dead one first and then
//! flaps); `fire_master` events fired without a master are delivered to the next one
//! (Salt drops them).
//!
//! Invariants:
//! - Nothing received from the network panics the minion: every publish is parsed,
//!   verified and decrypted by `halite_proto::minion` and dropped with a log line when it
//!   fails; a job's failure stays in its thread.
//! - A master key, once pinned in `minion_master.pub`, is replaced only by a key whose
//!   signature verified with the verification key (`verify_master_pubkey_sign`): any other
//!   master with another key is refused with Salt's critical message, and nothing it
//!   publishes runs. A key that fails a check is never written.
//! - A publish runs at most once: serials must increase per AES key, jids are remembered
//!   (`minion_jid_queue_hwm`) across all masters; a stale one never runs.
//! - A job's table entry is removed whatever happens to the job, a panic included.

pub mod auth;
pub mod channel;
pub mod daemon;
pub mod forward;
pub mod jobs;
pub mod keys;
pub mod settings;
pub mod shutdown;
pub mod spool;
pub mod topology;
pub mod transport;

pub use halite_exec::SALT_VERSION;

use daemon::{Daemon, Exit};
use halite_config::{IdSource, IpcMode, MasterType, MinionConfig};
use halite_proto::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit status Salt uses when the master rejected the key (`EX_NOPERM`).
pub const EX_NOPERM: u8 = 77;

/// Exit status Salt means to use when the master's key does not match `master_finger`
/// (`sys.exit(42)` in `AsyncAuth._finger_fail`).
pub const EX_MASTER_FINGER: u8 = 42;

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
    /// The master did not answer in time. Salt's wording starts the message; the rest
    /// names the address (Salt's does not).
    #[error("SaltReqTimeoutError: Message timed out: no reply from {uri} within {} s", crate::auth::secs(*.after))]
    Timeout {
        /// Where the request went (`tcp://host:port`).
        uri: String,
        /// How long the reply was waited for.
        after: std::time::Duration,
    },
    /// The connection carrying a request closed before the reply came (the master
    /// stopped or restarted): the request is lost and may be sent again at once.
    #[error("the connection to {uri} closed before the reply came")]
    Disconnected {
        /// Where the request went (`tcp://host:port`).
        uri: String,
    },
    /// Signing in failed (changed master key, bad signature, bad nonce, unsupported
    /// algorithm, refused reply...); the message is Salt's.
    #[error("{0}")]
    Auth(String),
    /// The master rejected this minion's key.
    #[error("The Salt Master has rejected this minion's public key")]
    Rejected,
    /// The master's key does not match `master_finger`.
    #[error("The master's public key does not match master_finger")]
    MasterFinger,
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
    /// No master of the list could be resolved or reached (`eval_master`'s
    /// `SaltClientError`).
    #[error("{0}")]
    NoMaster(String),
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
    /// The master's key does not match `master_finger`; exit with [`EX_MASTER_FINGER`].
    MasterFinger,
    /// The `master` option cannot be used (an empty address, or `master_type: func`
    /// failed); Salt's message was logged. Exit with this status (42 or 1, as Salt).
    BadMaster(u8),
}

/// The context `master_type: func` runs its function in: no job, no master.
fn func_context(cfg: Arc<MinionConfig>, grains: Arc<Value>) -> halite_exec::Context {
    halite_exec::Context {
        id: cfg.id.clone(),
        opts: cfg,
        grains,
        pillar: Arc::new(Value::Map(Vec::new())),
        jid: None,
        pub_data: None,
        jobs: Arc::new(jobs::Jobs::new()),
        job: halite_exec::JobHandle::new(),
        master: None,
    }
}

/// Runs the minion until `shutdown` is cancelled, the master rejects the key or its key
/// does not match `master_finger`. `ready` is called once its control loop runs (keys
/// loaded, local bus bound; signing in may still be under way, so that a key waiting for
/// acceptance does not hold up the service manager).
pub async fn run(
    cfg: MinionConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> Result<Outcome, Error> {
    let settings = Arc::new(settings::Settings::from_config(&cfg)?);
    let fallback = halite_fallback::Options::from_config(&cfg)?;
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
    let registry = Arc::new(if fallback.enabled {
        halite_exec::Registry::builtin()
            .with_fallback(Arc::new(halite_fallback::Executor::new(fallback)))
    } else {
        halite_exec::Registry::builtin()
    });
    let plan = {
        let masters = if cfg.master_type == MasterType::Func {
            let (cfg, grains, registry) = (cfg.clone(), grains.clone(), registry.clone());
            let name = settings.master.clone();
            tokio::task::spawn_blocking(move || {
                topology::eval_master_func(&registry, &func_context(cfg, grains), &name)
            })
            .await
            .map_err(|e| Error::NoMaster(format!("master_type func: {e}")))?
        } else {
            Ok(settings.masters.clone())
        };
        match masters.and_then(|masters| topology::plan(&settings, &masters)) {
            Ok(plan) => plan,
            Err(bad) => return Ok(Outcome::BadMaster(bad.status)),
        }
    };
    let forwarders: Vec<Arc<forward::Forwarder>> = (0..plan.concurrent())
        .map(|_| {
            Arc::new(forward::Forwarder::new(
                &cfg.id,
                settings.fire_master_queue_size,
            ))
        })
        .collect();
    let collector = forward::start_collector(forwarders.clone(), bus.subscribe(), bus_stop.clone())
        .map_err(|source| Error::Io {
            what: "cannot start the fire_master collector thread in",
            path: cfg.cachedir.clone(),
            source,
        })?;
    let bus_task = tokio::spawn(bus_server.run(bus_stop.clone()));

    let stop = Arc::new(shutdown::Shutdown::new());
    let jobs = Arc::new(jobs::Jobs::new());
    for forwarder in &forwarders {
        let (forwarder, stop) = (forwarder.clone(), stop.clone());
        std::thread::Builder::new()
            .name("fire_master".into())
            .spawn(move || forwarder.run_sender(&stop))
            .map_err(|source| Error::Io {
                what: "cannot start the fire_master sender thread in",
                path: cfg.cachedir.clone(),
                source,
            })?;
    }
    let daemon = Daemon {
        cfg: cfg.clone(),
        settings,
        plan,
        keys: Arc::new(keys),
        grains,
        registry,
        bus,
        forwarders: forwarders.clone(),
        stop: stop.clone(),
        jobs: jobs.clone(),
        spool: Arc::new(spool::Spool::new(&cfg.cachedir)),
    };
    let shutdown_job_timeout = daemon.settings.shutdown_job_timeout;
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
    ready();

    let exit = tokio::select! {
        _ = shutdown.cancelled() => Exit::Stopped,
        exit = done_rx => exit.unwrap_or(Exit::Stopped),
    };
    tracing::info!("The Salt Minion is shutting down");
    // No publish is read any more; running jobs finish and return (the bus stays up
    // for them), or are signalled once the wait is over.
    stop.stop();
    let _ =
        tokio::task::spawn_blocking(move || jobs.drain(shutdown_job_timeout, jobs::SHUTDOWN_GRACE))
            .await;
    bus_stop.cancel();
    let _ = bus_task.await;
    let _ = tokio::task::spawn_blocking(move || collector.join()).await;
    for forwarder in &forwarders {
        forwarder.abandon();
    }
    Ok(match exit {
        Exit::Stopped => Outcome::Stopped,
        Exit::Rejected => Outcome::Rejected,
        Exit::MasterFinger => Outcome::MasterFinger,
    })
}
