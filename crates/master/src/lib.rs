//! The Halite master: Salt 3008's master protocol on ZeroMQ, with an embedded job cache and
//! a Salt-format event bus.
//!
//! [`run`] binds everything and serves until the shutdown token is cancelled:
//! - request workers (`worker_threads` OS threads) answer the request port through the
//!   handler tables in [`dispatch`];
//! - the [`publisher::Publisher`] owns the AES key and the publish serial;
//! - the [`jobs::JobWriter`] thread writes the job cache (redb) and Salt's `local_cache`;
//! - a maintenance task refreshes the [`keys::KeyIndex`] when key directories change and
//!   rotates the AES key when a key is removed (so a deleted minion can no longer read
//!   publishes, as Salt's `rotate_aes_key` does);
//! - the metrics socket `sock_dir/master_metrics.ipc` ([`metrics`], a Halite extension)
//!   serves snapshots of what the workers count to `halite-api`'s `GET /metrics`.
//!
//! A panic while handling one request, or one item of a background thread, is caught,
//! logged and counted ([`boundary`], [`Master::stats`]); the thread goes on.
//!
//! Shutdown order: the request port stops first (no minion signs in to a master that is
//! going away), the workers handle what was already queued, then the publisher closes, the
//! job-cache writer drains its queue and the event journal commits.
//!
//! What it does not do: targeting decisions on minions (minions decide), execution, or
//! anything on the minion bus.

pub mod access;
pub mod boundary;
pub mod credentials;
#[cfg(test)]
mod cve_tests;
pub mod dispatch;
pub mod events;
pub mod handlers;
pub mod jobs;
pub mod keys;
pub mod logins;
pub mod metrics;
pub mod publisher;
pub mod sessions;
#[cfg(test)]
mod testing;
pub mod watch;

use boundary::Stats;
use events::EventSink;
use halite_config::MasterConfig;
use halite_eauth::ExternalAuth;
use halite_jobcache::{HashType, JobStore, LocalCacheWriter, RedbJobStore};
use halite_keystore::KeyStore;
use halite_proto::jid::JidGenerator;
use halite_proto::rsa::{PrivateKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_token::{RedbTokenStore, TokenStore};
use halite_transport::zeromq::{ZmqServer, ZmqServerConfig};
use halite_transport::{Incoming, PeerId, ServerTransport};
use jobs::{JobCache, JobSink, JobWriter};
use keys::{KeyChange, KeyIndex};
use logins::Authenticator;
use publisher::Publisher;
use sessions::Sessions;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use watch::JobWatch;

/// How often the key directories are checked for changes.
pub const KEY_REFRESH_INTERVAL: Duration = Duration::from_millis(500);

/// Errors that stop the master from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A directory or file the master needs could not be created or read.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The pki directory or the master keys are unusable.
    #[error("keys: {0}")]
    Keys(String),
    /// The job cache could not be opened.
    #[error("job cache: {0}")]
    JobCache(#[from] halite_jobcache::Error),
    /// A socket could not be bound.
    #[error("transport: {0}")]
    Transport(#[from] halite_transport::Error),
    /// The event bus could not be bound.
    #[error("event bus: {0}")]
    Bus(#[from] halite_bus::Error),
    /// A configuration value is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// The event journal (a Halite extension) could not be configured or started.
    #[error("event journal: {0}")]
    Journal(#[from] halite_journal::Error),
    /// The eauth token store could not be opened.
    #[error("eauth tokens: {0}")]
    Tokens(#[from] halite_token::Error),
    /// The metrics socket (a Halite extension) could not be bound.
    #[error("metrics: {0}")]
    Metrics(#[from] halite_metrics::Error),
    /// `master_use_pubkey_signature` is on but the signature file is missing or empty.
    #[error("no usable master public-key signature at {}", .0.display())]
    PubkeySignature(std::path::PathBuf),
}

/// The master's shared state, used by every request worker.
pub struct Master {
    cfg: MasterConfig,
    key: PrivateKey,
    pub_clean: String,
    /// `pub_sig` for auth replies when `master_sign_pubkey` is on.
    pub_sig: Option<halite_proto::signing::PubKeySignature>,
    keys: KeyIndex,
    sessions: Sessions,
    publisher: Publisher,
    transport: Arc<dyn ServerTransport>,
    events: Arc<dyn EventSink>,
    jobs: Arc<dyn JobSink>,
    job_store: Arc<dyn JobStore>,
    watch: JobWatch,
    jids: Mutex<JidGenerator>,
    grains: RwLock<HashMap<String, Value>>,
    /// The pillars compiled for minions (with `minion_data_cache`, as stock's cache keeps
    /// them), for `-I`/`-J` targeting; written from the pillar pool's thread.
    pillars: Arc<RwLock<HashMap<String, Value>>>,
    client_keys: Vec<(String, String)>,
    regex: halite_target::RegexCache,
    acl: handlers::peer::PeerAcls,
    access: access::AccessControl,
    runners: halite_runner::Registry,
    running_runners: AtomicUsize,
    /// This master, for the runner threads it starts.
    me: Weak<Master>,
    /// The user the master process runs as, looked up once at start.
    run_user: Option<String>,
    /// `external_auth`.
    eauth: Arc<ExternalAuth>,
    /// Runs `external_auth` logins off the request workers.
    logins: Authenticator,
    /// Eauth tokens.
    tokens: Arc<dyn TokenStore>,
    /// `token_expire`, seconds.
    token_expire: f64,
    /// `keep_acl_in_token`.
    keep_acl_in_token: bool,
    /// The `roots` file server (`halite-fileserver`).
    fileserver: halite_fileserver::Roots,
    /// `_pillar`, compiled by Salt's Python when pillar is configured (`halite-pillar`).
    pillar: halite_pillar::Pillars,
    /// Panics survived (see [`boundary`]).
    stats: Arc<Stats>,
    /// What the workers count (see [`metrics`]).
    metrics: halite_metrics::MasterMetrics,
}

/// What a [`Master`] is built from besides its config: where replies and publishes go,
/// where events go, where jobs are written and read. The daemon ([`run`]) passes its
/// sockets, bus and job cache; tests pass recorders.
pub struct Parts {
    /// Replies (held ones too) and publishes.
    pub transport: Arc<dyn ServerTransport>,
    /// The master bus.
    pub events: Arc<dyn EventSink>,
    /// Job loads and returns, written.
    pub jobs: Arc<dyn JobSink>,
    /// The job store, read by runners and `pub_ret`.
    pub job_store: Arc<dyn JobStore>,
    /// Eauth tokens.
    pub tokens: Arc<dyn TokenStore>,
}

impl Master {
    /// A master from its config and parts: opens the pki directory (making the master key
    /// pair, and with `master_sign_pubkey` the signing pair, when missing, or reading the
    /// precomputed signature), the session keys, and writes the local users' client keys.
    /// The directories of [`prepare_dirs`] must exist.
    pub fn new(cfg: MasterConfig, parts: Parts) -> Result<Arc<Master>, Error> {
        Master::with_stats(cfg, parts, Arc::default())
    }

    /// [`Master::new`], counting panics in `stats` (shared with the job-cache writer).
    fn with_stats(
        cfg: MasterConfig,
        parts: Parts,
        stats: Arc<Stats>,
    ) -> Result<Arc<Master>, Error> {
        let store = KeyStore::open(&cfg.pki_dir).map_err(|e| Error::Keys(e.to_string()))?;
        let master_id = cfg.id.strip_suffix("_master").unwrap_or(&cfg.id).to_owned();
        let (key, pub_clean) = store
            .load_or_create_master_keys(&master_id, cfg.keysize)
            .map_err(|e| Error::Keys(e.to_string()))?;
        let pub_sig = handlers::auth::pub_key_signature(&cfg, &store, &pub_clean)?;
        let signer = cfg.sign_pub_messages.then(|| {
            let algo = SigAlgo::parse(cfg.publish_signing_algorithm.as_str())
                .unwrap_or(SigAlgo::Pkcs1v15Sha1);
            (key.clone(), algo)
        });
        let publisher = Publisher::new(parts.transport.clone(), key.clone(), signer);
        let acl = handlers::peer::PeerAcls::from_config(&cfg)?;
        let access = access::AccessControl::from_config(&cfg)?;
        let eauth = Arc::new(external_auth(&cfg)?);
        let fileserver = halite_fileserver::Roots::from_master(&cfg)
            .map_err(|e| Error::Config(e.to_string()))?;
        for w in fileserver.warnings() {
            tracing::warn!("{w}");
        }
        let pillar =
            halite_pillar::Pillars::from_master(&cfg).map_err(|e| Error::Config(e.to_string()))?;
        let token_expire = cfg
            .get("token_expire")
            .and_then(|v| match v {
                Value::Integer(i) => i.as_f64(),
                Value::F64(f) => Some(*f),
                _ => None,
            })
            .unwrap_or(halite_token::DEFAULT_TOKEN_EXPIRE);
        let keep_acl_in_token = cfg.get("keep_acl_in_token").is_some_and(value::truthy);
        let run_user = halite_config::current_user();
        let client_keys = write_client_keys(&cfg, run_user.as_deref(), access.key_users())?;
        let sessions = Sessions::new(&cfg.cachedir, cfg.publish_session)
            .map_err(io_err("cannot create sessions in", &cfg.cachedir))?;
        Ok(Arc::new_cyclic(|me| Master {
            client_keys,
            sessions,
            keys: KeyIndex::load(store),
            key,
            pub_clean,
            pub_sig,
            publisher,
            transport: parts.transport,
            events: parts.events,
            jobs: parts.jobs,
            job_store: parts.job_store,
            watch: JobWatch::new(stats.clone()),
            jids: Mutex::new(JidGenerator::default()),
            grains: RwLock::new(HashMap::new()),
            pillars: Arc::new(RwLock::new(HashMap::new())),
            regex: halite_target::RegexCache::new(256),
            acl,
            access,
            runners: halite_runner::Registry::builtin(),
            running_runners: AtomicUsize::new(0),
            me: me.clone(),
            run_user,
            logins: Authenticator::new(eauth.clone(), logins::LOGIN_THREADS, stats.clone()),
            eauth,
            tokens: parts.tokens,
            token_expire,
            keep_acl_in_token,
            fileserver,
            pillar,
            stats,
            metrics: halite_metrics::MasterMetrics::new(dispatch::command_names()),
            cfg,
        }))
    }

    /// The panics this master survived.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Minions connected now, as Salt's `CkMinions.connected_ids` finds them: accepted
    /// minions one of whose `ipv4` grains is the address of a live publish-port
    /// connection, with that address.
    pub fn connected_minions(&self) -> Vec<(String, Option<String>)> {
        let peers = self.transport.publish_peers();
        if peers.is_empty() {
            return Vec::new();
        }
        let ids = self.keys.accepted_ids();
        let grains = self.grains.read().unwrap_or_else(|e| e.into_inner());
        ids.iter()
            .filter_map(|id| {
                let ipv4 = grains.get(id).and_then(|g| value::get(g, "ipv4"))?;
                let Value::Array(addrs) = ipv4 else {
                    return None;
                };
                addrs
                    .iter()
                    .filter_map(value::str_of)
                    .find(|a| {
                        a.parse::<std::net::IpAddr>()
                            .is_ok_and(|ip| peers.contains(&ip))
                    })
                    .map(|a| (id.clone(), Some(a.to_owned())))
            })
            .collect()
    }

    /// The configuration the master runs with.
    pub fn config(&self) -> &MasterConfig {
        &self.cfg
    }

    fn next_jid(&self) -> String {
        self.jids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next(chrono::Utc::now())
    }

    /// The minions a publish is expected to reach, and listed ids that have no key
    /// (`CkMinions.check_minions` over the accepted keys and the grains cache).
    fn expected_minions(
        &self,
        tgt: &Value,
        tgt_type: &str,
        delimiter: &str,
    ) -> (Vec<String>, Vec<String>) {
        let ids = self.keys.accepted_ids();
        let r = self.with_data_cache(|cache| {
            let ck = halite_target::CkMinions {
                accepted: &ids,
                cache,
                regexes: &self.regex,
                minion_data_cache: self.cfg.minion_data_cache,
                nodegroups: self.cfg.get("nodegroups"),
            };
            let r = ck.check_minions(tgt, tgt_type, delimiter, true);
            (
                r.minions.into_iter().map(str::to_owned).collect::<Vec<_>>(),
                r.missing,
            )
        });
        r
    }

    /// Runs `f` with the minion data the targeting code reads: the grains minions sent
    /// and the pillars compiled for them.
    fn with_data_cache<R>(&self, f: impl FnOnce(&MinionData<'_>) -> R) -> R {
        let grains = self.grains.read().unwrap_or_else(|e| e.into_inner());
        let pillars = self.pillars.read().unwrap_or_else(|e| e.into_inner());
        f(&MinionData {
            grains: &grains,
            pillars: &pillars,
        })
    }

    /// Applies key-directory changes: drops session keys of removed minions, rotates the
    /// AES key when an accepted key went away, fires `salt/key`.
    fn apply_key_changes(&self, changes: Vec<KeyChange>) {
        let mut rotate = false;
        for change in changes {
            match change {
                KeyChange::Accepted(id) => {
                    self.events.fire(
                        "salt/key",
                        map([
                            ("result", Value::from(true)),
                            ("act", s("accept")),
                            ("id", s(id)),
                        ]),
                    );
                }
                KeyChange::Removed(id) => {
                    tracing::info!("Key for minion {id} is no longer accepted");
                    self.sessions.remove(&id);
                    // Its cached data goes with its key, as `salt-key -d` flushes it.
                    self.grains
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                    self.pillars
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&id);
                    rotate = true;
                    let act = match self.keys.store().get(&id) {
                        Ok(Some((halite_proto::auth::KeyState::Rejected, _))) => "reject",
                        _ => "delete",
                    };
                    self.events.fire(
                        "salt/key",
                        map([
                            ("result", Value::from(true)),
                            ("act", s(act)),
                            ("id", s(id)),
                        ]),
                    );
                }
            }
        }
        if rotate {
            tracing::info!("Rotating AES key");
            self.publisher.rotate();
            self.metrics.count_aes_rotation();
            self.events
                .fire("key", map([("rotate_aes_key", Value::from(true))]));
        }
    }
}

/// The grains minions sent with their pillar requests and the pillars compiled for them,
/// seen by the targeting code.
struct MinionData<'a> {
    grains: &'a HashMap<String, Value>,
    pillars: &'a HashMap<String, Value>,
}

impl halite_target::MinionDataCache for MinionData<'_> {
    fn has_grains(&self, id: &str) -> bool {
        self.grains.contains_key(id)
    }

    fn fetch(&self, bank: halite_target::Bank, id: &str) -> Option<std::borrow::Cow<'_, Value>> {
        match bank {
            halite_target::Bank::Grains => self.grains.get(id).map(std::borrow::Cow::Borrowed),
            halite_target::Bank::Pillar => Some(self.pillars.get(id).map_or_else(
                || std::borrow::Cow::Owned(Value::Map(vec![])),
                std::borrow::Cow::Borrowed,
            )),
        }
    }
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Writes a fresh `cachedir/.<user>_key` for each local user allowed to publish, as
/// `salt.daemons.masterapi.access_keys` does: the master's user, root, the user it runs
/// as, and `acl_users` (existing users of `publisher_acl`). Each file is 0600 and, when the
/// master runs as root, owned by its user. Answers `(user, key)` pairs.
fn write_client_keys(
    cfg: &MasterConfig,
    run_user: Option<&str>,
    acl_users: Vec<String>,
) -> Result<Vec<(String, String)>, Error> {
    let mut users = vec![cfg.user.clone(), "root".to_owned()];
    users.extend(run_user.map(str::to_owned));
    users.extend(acl_users);
    users.sort();
    users.dedup();
    let as_root = run_user == Some("root");
    let mut out = Vec::new();
    for user in users {
        // A name that cannot be a file name component never gets a key.
        if user.is_empty() || user.contains('/') || user.starts_with('.') {
            tracing::warn!("No client key for user {user:?}: not a valid user name");
            continue;
        }
        let path = cfg.cachedir.join(format!(".{user}_key"));
        let _ = std::fs::remove_file(&path);
        let key = halite_proto::crypticle::generate_key_string();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("cannot write", &path))?;
        f.write_all(key.as_bytes())
            .map_err(io_err("cannot write", &path))?;
        if as_root && user != "root" {
            if let Some((uid, gid)) = halite_config::user_ids(&user) {
                std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
                    .map_err(io_err("cannot hand over", &path))?;
            }
        }
        out.push((user, key));
    }
    Ok(out)
}

/// Opens what local ACL users need (see [`access`]): `sock_dir` traversable, the event
/// stream and the journal replay socket connectable. The pull socket stays owner-only.
fn open_bus_to_acl_users(cfg: &MasterConfig) {
    let _ = std::fs::set_permissions(&cfg.sock_dir, std::fs::Permissions::from_mode(0o755));
    for name in ["master_event_pub.ipc", "halite_journal.ipc"] {
        let path = cfg.sock_dir.join(name);
        if path.exists() {
            if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            {
                tracing::warn!("Could not open {} to ACL users: {e}", path.display());
            }
        }
    }
}

fn make_dir(path: &Path, mode: u32) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(io_err("cannot create", path))?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    Ok(())
}

/// The master's transport, bound once the master is built (see [`run`]); the master
/// sends nothing while it is built, and until then this answers [`halite_transport::Error::Closed`].
#[derive(Default)]
struct BoundLater(std::sync::OnceLock<Arc<ZmqServer>>);

impl ServerTransport for BoundLater {
    fn reply(&self, peer: PeerId, body: Vec<u8>) -> Result<(), halite_transport::Error> {
        let t = self.0.get().ok_or(halite_transport::Error::Closed)?;
        t.reply(peer, body)
    }

    fn publish(&self, frame: Vec<u8>) -> Result<(), halite_transport::Error> {
        let t = self.0.get().ok_or(halite_transport::Error::Closed)?;
        t.publish(frame)
    }

    fn publish_peers(&self) -> Vec<std::net::IpAddr> {
        self.0.get().map(|t| t.publish_peers()).unwrap_or_default()
    }
}

/// The transport's socket options from the ZeroMQ options Salt reads: `pub_hwm`,
/// `zmq_backlog`, and `zmq_heartbeat_ivl` / `zmq_heartbeat_timeout` (ms; Salt reads these
/// two with `opts.get` outside its option table). Unset heartbeats: Salt's 10 s on the
/// publish port, none on the request port (see `halite_transport::zeromq` for why).
fn zmq_config(cfg: &MasterConfig) -> ZmqServerConfig {
    let mut z = ZmqServerConfig::new(&cfg.interface, cfg.ipv6, cfg.ret_port, cfg.publish_port);
    // One limit for the request port: libzmq refuses what `dispatch` would.
    z.max_msg_size = i64::try_from(cfg.max_request_size).unwrap_or(i64::MAX);
    let int = |name: &str| {
        cfg.get(name)
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .filter(|v| *v >= 0)
    };
    if let Some(v) = int("pub_hwm") {
        z.pub_hwm = v;
    }
    if let Some(v) = int("zmq_backlog") {
        z.backlog = v;
    }
    if let Some(v) = int("zmq_heartbeat_ivl") {
        z.heartbeat_ivl_ms = Some(v);
    }
    if let Some(v) = int("zmq_heartbeat_timeout") {
        z.heartbeat_timeout_ms = v;
    }
    z
}

/// Creates the directories Salt's `verify_env` creates (stock `salt-run` writes its proc
/// files under `cachedir/proc`).
pub fn prepare_dirs(cfg: &MasterConfig) -> Result<(), Error> {
    make_dir(&cfg.cachedir, 0o755)?;
    for sub in ["jobs", "proc", "sessions"] {
        make_dir(&cfg.cachedir.join(sub), 0o755)?;
    }
    make_dir(&cfg.sock_dir, 0o750)
}

/// `loop_interval`: how often maintenance (expired tokens) runs; Salt's default is 60 s.
fn loop_interval(cfg: &MasterConfig) -> Duration {
    let secs = match cfg.get("loop_interval") {
        Some(Value::Integer(i)) => i.as_f64(),
        Some(Value::F64(f)) => Some(*f),
        _ => None,
    };
    secs.filter(|s| s.is_finite() && *s >= 1.0)
        .map_or(Duration::from_secs(60), Duration::from_secs_f64)
}

/// Parses `external_auth` (with `acl_regex_match` and `permissive_acl`); a malformed
/// option is a startup error naming the key.
fn external_auth(cfg: &MasterConfig) -> Result<ExternalAuth, Error> {
    let settings = halite_eauth::Settings::from_master_options(&cfg.raw)
        .map_err(|e| Error::Config(e.to_string()))?;
    let option = cfg.get("external_auth").unwrap_or(&Value::Nil);
    let auth =
        ExternalAuth::from_config(option, &settings).map_err(|e| Error::Config(e.to_string()))?;
    for w in auth.warnings() {
        tracing::warn!("{w}");
    }
    access::log_mode_notes("external_auth", &auth.differing_patterns());
    Ok(auth)
}

/// A request worker: takes requests off the shared queue until it is closed and empty,
/// and serves each ([`serve_one`]). Requests are never dropped here; the queue's sender
/// closes it when the request port stops.
fn serve_requests(
    master: &Master,
    queue: &Mutex<tokio::sync::mpsc::Receiver<Incoming>>,
    transport: &dyn ServerTransport,
) {
    loop {
        let next = queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .blocking_recv();
        let Some(req) = next else { return };
        serve_one(master, transport, &req.peer, &req.body);
    }
}

/// One request of a worker: handled (a panic in its handling is caught, logged, counted
/// and answered as Salt answers an exception, see [`Master::handle_request`]), and the
/// reply sent unless a handler holds it. A reply that cannot be sent (the peer left, the
/// request port is stopping) is logged; the worker goes on either way.
fn serve_one(master: &Master, transport: &dyn ServerTransport, peer: &PeerId, body: &[u8]) {
    if let Some(reply) = master.handle_request(body, peer) {
        if let Err(e) = transport.reply(peer.clone(), reply) {
            tracing::debug!(?peer, "A reply could not be sent: {e}");
        }
    }
}

/// Runs the master until `shutdown` is cancelled. `ready` is called once the sockets are
/// bound and the workers started (the binary tells systemd then).
pub async fn run(
    cfg: MasterConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(),
) -> Result<(), Error> {
    prepare_dirs(&cfg)?;
    // The pki directory and master keys are checked before any socket is bound.
    KeyStore::open(&cfg.pki_dir).map_err(|e| Error::Keys(e.to_string()))?;

    let bus_server = halite_bus::BusServer::bind(
        &halite_bus::BusSockets::master(&cfg.sock_dir),
        cfg.max_event_size as usize,
    )
    .await?;
    let bus = bus_server.handle();
    // Halite extension: the durable event journal and its replay socket (halite-journal).
    // It subscribes before the bus serves, so it sees every event.
    let journal = halite_journal::JournalService::start(
        &halite_journal::JournalConfig::from_master(&cfg)?,
        &bus,
    )
    .await?;
    let bus_task = tokio::spawn(bus_server.run(shutdown.child_token()));

    // Stock clients look for a socket before they talk to a master: `salt` (LocalClient)
    // refuses to publish unless `publish_pull.ipc` exists, and salt-api answers "503 Salt
    // Master is not available" unless `workers.ipc` does (`NetapiClient._is_master_running`).
    // Halite takes both kinds of request on the request port, so the paths are markers.
    let markers: Vec<PathBuf> = ["publish_pull.ipc", "workers.ipc"]
        .iter()
        .map(|name| cfg.sock_dir.join(name))
        .collect();
    for marker in &markers {
        // A stock master leaves a socket there, which cannot be written as a file.
        let _ = std::fs::remove_file(marker);
        std::fs::write(marker, b"").map_err(io_err("cannot write", marker))?;
    }

    let job_store = Arc::new(RedbJobStore::open(cfg.cachedir.join("jobs.redb"))?);
    let hash_type: HashType = cfg.hash_type.parse().unwrap_or_default();
    let stats = Arc::new(Stats::default());
    let (writer, jobs_thread) = JobWriter::spawn(
        job_store.clone(),
        LocalCacheWriter::new(&cfg.cachedir, hash_type),
        cfg.job_cache,
        cfg.keep_jobs_seconds,
        stats.clone(),
    );
    let job_queue = writer.depth();

    let zcfg = zmq_config(&cfg);
    let local = LocalCacheWriter::new(&cfg.cachedir, hash_type);
    let tokens = Arc::new(RedbTokenStore::open(
        cfg.cachedir.join(halite_token::TOKEN_FILE),
    )?);
    let late = Arc::new(BoundLater::default());
    let master = Master::with_stats(
        cfg,
        Parts {
            transport: late.clone(),
            events: Arc::new(bus.clone()),
            jobs: Arc::new(JobCache { writer, local }),
            job_store,
            tokens,
        },
        stats,
    )?;

    // The ports open only now that the local users' client keys are written (as stock
    // writes them before its request server starts): a client that finds the request port
    // open finds its key too.
    let (transport, incoming) = ZmqServer::bind(&zcfg)?;
    let transport = Arc::new(transport);
    let _ = late.0.set(transport.clone());

    if master.access.has_acl() || !master.eauth.enabled().is_empty() {
        open_bus_to_acl_users(&master.cfg);
    }
    // Halite extension: the metrics socket halite-api reads (see [`metrics`]).
    let metrics_task = metrics::serve(&master, bus.clone(), job_queue, shutdown.child_token())?;

    // Request workers: OS threads, like Salt's MWorkers, sharing one queue.
    let incoming = Arc::new(Mutex::new(incoming));
    let mut workers = Vec::new();
    for n in 0..master.cfg.worker_threads.max(1) {
        let (m, rx, t) = (master.clone(), incoming.clone(), transport.clone());
        workers.push(
            std::thread::Builder::new()
                .name(format!("mworker-{n}"))
                .spawn(move || serve_requests(&m, &rx, t.as_ref()))
                .map_err(io_err("cannot start worker threads in", Path::new("/")))?,
        );
    }

    tracing::info!(
        "The Salt Master is ready: request port {}, publish port {}",
        master.cfg.ret_port,
        master.cfg.publish_port
    );
    ready();
    let mut tick = tokio::time::interval(KEY_REFRESH_INTERVAL);
    let mut maintenance = tokio::time::interval(loop_interval(&master.cfg));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = maintenance.tick() => {
                let m = master.clone();
                let _ = tokio::task::spawn_blocking(move || m.clean_expired_tokens()).await;
            }
            _ = tick.tick() => {
                let m = master.clone();
                let changes = tokio::task::spawn_blocking(move || m.keys.refresh()).await.unwrap_or_default();
                if !changes.is_empty() {
                    master.apply_key_changes(changes);
                }
            }
        }
    }
    tracing::info!("The Salt Master is shutting down");
    // Requests first: from now on no minion signs in to, or hears from, a master whose
    // publisher is about to close (the request port's connections close, so its requests
    // fail at once and it goes looking for the next master). What was already queued is
    // still handled — an accepted return is stored — but its replies go nowhere.
    transport.stop_requests();
    // Runner threads waiting for minions and held replies end now.
    master.watch.stop();
    master.logins.stop();
    // The workers end when the queue they drain is empty and closed.
    for w in workers {
        let _ = w.join();
    }
    let _ = metrics_task.await;
    // Then the publisher: minions see their publish connection close.
    transport.shutdown();
    drop(master);
    let _ = tokio::task::spawn_blocking(move || jobs_thread.join()).await;
    // Halite extension: commit what the bus carried, close the replay socket.
    if let Some(journal) = journal {
        journal.shutdown().await;
    }
    for marker in markers {
        let _ = std::fs::remove_file(marker);
    }
    let _ = bus_task.await;
    Ok(())
}
