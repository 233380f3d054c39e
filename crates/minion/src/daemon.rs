//! The minion's control thread: connect to the master (sign in, subscribe, fetch the
//! pillar, announce the start), then serve publishes until the master goes away, and
//! connect again — `Minion.connect_master`, `tune_in` and the `__master_disconnected`
//! handler of `salt/minion.py`, on one blocking thread.
//!
//! Publishes are handled here in arrival order: verify (with `sign_pub_messages`),
//! decrypt (re-authenticating once when the AES key changed), drop replays and duplicate
//! jids, decide targeting, and hand matching jobs to [`Runner::spawn`]. Nothing a job does
//! can block this thread.

use crate::auth::{Auth, Session};
use crate::channel::Channel;
use crate::forward::Forwarder;
use crate::jobs::{jid_text, Jobs, Runner};
use crate::keys::MinionKeys;
use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::transport::{resolve_master, MasterAddr, PubEvent, ReqSocket, Subscription};
use crate::Error;
use halite_bus::BusHandle;
use halite_config::{MasterType, MinionConfig};
use halite_exec::Registry;
use halite_proto::minion::{PublishError, PublishFrame, PublishKey};
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_target::{minion_match, MinionFacts, RegexCache};
use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long the control thread waits on the publish socket before checking for shutdown.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Why the control thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Shutdown was requested.
    Stopped,
    /// The master rejected the minion's key (Salt exits with `EX_NOPERM`, 77).
    Rejected,
}

/// Why serving one connection ended.
enum End {
    Stopped,
    Rejected,
    /// The master went away; holds the generation of the session that stopped working.
    Lost(u64),
}

/// Everything the control thread owns.
pub struct Daemon {
    /// The configuration (`__opts__` for functions).
    pub cfg: Arc<MinionConfig>,
    /// Settings read from it.
    pub settings: Arc<Settings>,
    /// The minion's keys.
    pub keys: Arc<MinionKeys>,
    /// The grains.
    pub grains: Arc<Value>,
    /// The functions jobs run.
    pub registry: Arc<Registry>,
    /// The minion's own event bus.
    pub bus: BusHandle,
    /// The queue of `fire_master` events; its sender starts with the first master link.
    pub forwarder: Arc<Forwarder>,
    /// The stop signal.
    pub stop: Arc<Shutdown>,
}

/// The per-master objects of one run.
struct Link {
    master: MasterAddr,
    ctx: zmq::Context,
    auth: Arc<Auth>,
    channel: Arc<Channel>,
    runner: Arc<Runner>,
}

/// Publish handling state that survives reconnects.
struct Seen {
    jids: VecDeque<String>,
    regexes: RegexCache,
}

impl Daemon {
    /// Runs until shutdown or a rejected key.
    pub fn run(self) -> Exit {
        match self.cfg.master_type {
            MasterType::Disable => {
                tracing::info!("master_type is disable: not connecting to a master");
                while !self.stop.sleep(Duration::from_secs(3600)) {}
                return Exit::Stopped;
            }
            MasterType::Str if self.cfg.master.addresses().len() == 1 => {}
            _ => tracing::warn!(
                "Halite connects to one master only; using {} (master_type and the other masters are ignored)",
                self.settings.master
            ),
        }
        let Some(master) = resolve_master(&self.settings, &self.stop) else {
            return Exit::Stopped;
        };
        let ctx = zmq::Context::new();
        let uri = master.uri(master.ret_port);
        let auth = Arc::new(Auth::new(
            self.settings.clone(),
            self.keys.clone(),
            &ctx,
            uri.clone(),
            &self.grains,
            false,
            self.stop.clone(),
        ));
        let channel = Arc::new(Channel::new(
            auth.clone(),
            ReqSocket::new(&ctx, uri.clone(), &self.settings),
        ));
        self.start_forwarding(Channel::new(
            auth.clone(),
            ReqSocket::new(&ctx, uri, &self.settings),
        ));
        let runner = Arc::new(Runner {
            settings: self.settings.clone(),
            opts: self.cfg.clone(),
            registry: self.registry.clone(),
            grains: self.grains.clone(),
            pillar: Arc::new(RwLock::new(Arc::new(Value::Map(Vec::new())))),
            jobs: Arc::new(Jobs::new()),
            channel: channel.clone(),
            proc_dir: self.cfg.cachedir.join("proc"),
        });
        let link = Link {
            master,
            ctx,
            auth,
            channel,
            runner,
        };
        let mut seen = Seen {
            jids: VecDeque::new(),
            regexes: RegexCache::new(64),
        };

        let base = self.settings.acceptance_wait_time;
        let max_wait = if self.settings.acceptance_wait_time_max.is_zero() {
            base
        } else {
            self.settings.acceptance_wait_time_max
        };
        let mut auth_wait = base;
        let mut generation = 0;
        let mut reconnect = false;
        loop {
            match self.connect(&link, generation, reconnect) {
                Ok((session, sub)) => {
                    auth_wait = base;
                    match self.serve(&link, session, &sub, &mut seen) {
                        End::Stopped => return Exit::Stopped,
                        End::Rejected => return self.rejected(),
                        End::Lost(gen) => {
                            self.forwarder.set_connected(false);
                            tracing::info!("Connection to master {} lost", self.settings.master);
                            self.fire("__master_disconnected");
                            generation = gen;
                            reconnect = true;
                        }
                    }
                }
                Err(Error::Stopped) => return Exit::Stopped,
                Err(Error::Rejected) => return self.rejected(),
                Err(e) => {
                    tracing::error!(
                        "Error while bringing up minion for multi-master. Is master at {} responding? The error message was {e}",
                        self.settings.master
                    );
                    if auth_wait < max_wait {
                        auth_wait += base;
                    }
                    if self.stop.sleep(auth_wait) {
                        return Exit::Stopped;
                    }
                }
            }
        }
    }

    /// Starts the thread that sends forwarded events over `channel` (its own request
    /// socket, so job returns never wait behind a batch of events).
    fn start_forwarding(&self, channel: Channel) {
        let (forwarder, stop) = (self.forwarder.clone(), self.stop.clone());
        let started = std::thread::Builder::new()
            .name("fire_master".into())
            .spawn(move || forwarder.run_sender(&channel, &stop));
        if let Err(e) = started {
            tracing::error!("Cannot start the fire_master sender thread; events fired with fire_master stay queued: {e}");
        }
    }

    /// Salt sleeps 10 to 20 seconds before exiting on a rejected key, so a service manager
    /// restarting it at once does not hammer the master.
    fn rejected(&self) -> Exit {
        let wait = Duration::from_secs(10 + crate::random_below(11));
        if self.stop.sleep(wait) {
            Exit::Stopped
        } else {
            Exit::Rejected
        }
    }

    fn fire(&self, tag: &str) {
        if let Err(e) = self
            .bus
            .fire(tag, map([("master", s(self.settings.master.as_str()))]))
        {
            tracing::debug!("Cannot fire {tag} on the minion bus: {e}");
        }
    }

    /// `connect_master` + `_post_master_init` + the start of `tune_in`.
    fn connect(
        &self,
        link: &Link,
        generation: u64,
        reconnect: bool,
    ) -> Result<(Arc<Session>, Subscription), Error> {
        let session = link.auth.reauthenticate(generation)?;
        let port = match self.settings.publish_port {
            Some(p) if p != 4506 => p,
            _ => session.publish_port,
        };
        let sub = Subscription::connect(&link.ctx, &link.master.uri(port), &self.settings)?;
        self.fire("__master_connected");

        let st = &self.settings;
        let pillar_load = map([
            ("id", s(st.id.as_str())),
            ("grains", (*self.grains).clone()),
            ("saltenv", st.saltenv.clone()),
            ("pillarenv", st.pillarenv.clone()),
            ("pillar_override", Value::Map(Vec::new())),
            ("extra_minion_data", Value::Map(Vec::new())),
            ("ver", s("2")),
            ("cmd", s("_pillar")),
        ]);
        let pillar = link
            .channel
            .pillar(&pillar_load, st.request_timeout, st.request_tries)
            .map_err(|e| {
                tracing::error!("Exception getting pillar: {e}");
                e
            })?;
        *link
            .runner
            .pillar
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(pillar);
        if reconnect {
            tracing::info!("Re-initialising subsystems for new master {}", st.master);
        }
        self.announce(&link.channel);
        self.forwarder.set_connected(true);
        tracing::info!("Minion is ready to receive requests!");
        Ok((session, sub))
    }

    /// `_fire_master_minion_start` and `_register_resources_with_master`; failures are
    /// logged, as Salt does, and do not stop the minion.
    fn announce(&self, channel: &Channel) {
        let st = &self.settings;
        let started = format!(
            "Minion {} started at {}",
            st.id,
            chrono::Local::now().format("%a %b %e %H:%M:%S %Y")
        );
        let mut tags = Vec::new();
        if st.legacy_startup_events {
            tags.push("minion_start".to_owned());
        }
        tags.push(format!("salt/minion/{}/start", st.id));
        let tok = bin(channel.auth().keys().tok.clone());
        for tag in tags {
            let load = map([
                ("id", s(st.id.as_str())),
                ("cmd", s("_minion_event")),
                ("pretag", Value::Nil),
                ("tok", tok.clone()),
                ("data", s(started.as_str())),
                ("tag", s(tag.as_str())),
            ]);
            if let Err(e) = channel.send(&load, Duration::from_secs(60), st.return_retry_tries) {
                tracing::info!("fire_master failed: master could not be contacted. Request timed out. ({tag}: {e})");
            }
        }
        let load = map([
            ("cmd", s("_register_resources")),
            ("id", s(st.id.as_str())),
            ("resources", st.resources.clone()),
            ("resource_grains", Value::Map(Vec::new())),
            ("tok", tok),
        ]);
        match channel.send(&load, st.random_return_timer(), st.return_retry_tries) {
            Ok(_) => tracing::debug!("Registered resources with master"),
            Err(e) => tracing::warn!("Unable to register resources with master: {e}"),
        }
    }

    fn serve(
        &self,
        link: &Link,
        session: Arc<Session>,
        sub: &Subscription,
        seen: &mut Seen,
    ) -> End {
        let mut session = session;
        let mut key = PublishKey::new(session.aes.clone());
        loop {
            if self.stop.is_stopped() {
                return End::Stopped;
            }
            let events = match sub.poll(POLL_INTERVAL) {
                Ok(events) => events,
                Err(e) => {
                    tracing::error!("The publish socket failed: {e}");
                    return End::Lost(session.generation);
                }
            };
            for event in events {
                match event {
                    PubEvent::Disconnected => return End::Lost(session.generation),
                    PubEvent::Frame(frame) => {
                        if let Some(end) = self.on_frame(link, &frame, &mut session, &mut key, seen)
                        {
                            return end;
                        }
                    }
                }
            }
        }
    }

    /// Brings `session` and `key` up to date after another thread signed in again.
    fn refresh(link: &Link, session: &mut Arc<Session>, key: &mut PublishKey) {
        if let Some(current) = link.auth.current() {
            if current.generation != session.generation {
                if current.aes.key_string() != key.key_string() {
                    *key = PublishKey::new(current.aes.clone());
                }
                *session = current;
            }
        }
    }

    /// `AsyncPubChannel._decode_payload` + `Minion._handle_payload` for one frame.
    fn on_frame(
        &self,
        link: &Link,
        raw: &[u8],
        session: &mut Arc<Session>,
        key: &mut PublishKey,
        seen: &mut Seen,
    ) -> Option<End> {
        let frame = match PublishFrame::parse(raw) {
            Ok(f) => f,
            Err(e @ PublishError::NotAes(_)) => {
                tracing::debug!("{e}");
                return None;
            }
            Err(e) => {
                tracing::warn!(
                    "Dropping a publish that is not a Salt payload ({} bytes): {e}",
                    raw.len()
                );
                return None;
            }
        };
        Self::refresh(link, session, key);
        if self.settings.sign_pub_messages {
            if let Err(e) = frame.verify(&session.master) {
                tracing::error!("Dropping a publish from master {}: {e}", link.master.ip);
                return None;
            }
        }
        let load = match key.open(&frame) {
            Ok(load) => load,
            Err(PublishError::Decrypt) => {
                match link.auth.reauthenticate(session.generation) {
                    Ok(_) => {}
                    Err(Error::Stopped) => return Some(End::Stopped),
                    Err(Error::Rejected) => return Some(End::Rejected),
                    Err(e) => {
                        tracing::error!(
                            "Re-authentication after a publish decryption failure failed: {e}"
                        );
                        return None;
                    }
                }
                Self::refresh(link, session, key);
                match key.open(&frame) {
                    Ok(load) => load,
                    Err(PublishError::Decrypt) => {
                        tracing::error!(
                            "Payload decryption failed even after re-authenticating with master {}",
                            link.master.ip
                        );
                        return None;
                    }
                    Err(e) => {
                        log_dropped(&e, &link.master);
                        return None;
                    }
                }
            }
            Err(e) => {
                log_dropped(&e, &link.master);
                return None;
            }
        };
        self.on_load(link, load, seen);
        None
    }

    /// `_target_load` + `_handle_decoded_payload`.
    fn on_load(&self, link: &Link, mut load: Value, seen: &mut Seen) {
        let field = |k: &str| value::get(&load, k);
        let (Some(tgt), Some(jid), Some(fun), Some(arg)) =
            (field("tgt"), field("jid"), field("fun"), field("arg"))
        else {
            tracing::debug!("Ignoring a publish without tgt, jid, fun and arg");
            return;
        };
        let pillar = link
            .runner
            .pillar
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let facts = MinionFacts {
            id: &self.settings.id,
            grains: &self.grains,
            pillar: &pillar,
            nodegroups: self.cfg.get("nodegroups"),
        };
        let tgt_type = value::get_str(&load, "tgt_type");
        if value::get(&load, "tgt_type").is_some() && tgt_type.is_none() {
            // No matcher is named by a non-string tgt_type: not for this minion.
            return;
        }
        if !minion_match(
            &facts,
            tgt,
            tgt_type,
            value::get_str(&load, "delimiter"),
            &seen.regexes,
        ) {
            tracing::trace!("Publish {} is not for this minion", jid);
            return;
        }
        let Some(jid_str) = jid_text(jid) else {
            tracing::warn!("Dropping a publish with a malformed jid {jid}");
            return;
        };
        if let Some(problem) = malformed(fun, arg) {
            tracing::warn!("Dropping job {jid_str}: {problem}");
            return;
        }
        let fun_text = value::str_of(fun).map_or_else(|| fun.to_string(), str::to_owned);
        match value::get_str(&load, "user") {
            Some(user) => {
                tracing::info!("User {user} Executing command {fun_text} with jid {jid_str}")
            }
            None => tracing::info!("Executing command {fun_text} with jid {jid_str}"),
        }
        if seen.jids.contains(&jid_str) {
            tracing::debug!("Job {jid_str} was already started; duplicate publish dropped");
            return;
        }
        seen.jids.push_back(jid_str.clone());
        if seen.jids.len() > self.settings.jid_queue_hwm {
            seen.jids.pop_front();
        }
        // What Salt 3008's resource-aware `_target_load` adds; functions see them as
        // `__pub_*` keyword arguments.
        value::set(&mut load, "resource_targets", Value::Array(Vec::new()));
        value::set(&mut load, "pure_resource_target", Value::Boolean(false));
        value::set(&mut load, "minion_is_target", Value::Boolean(true));
        link.runner.spawn(jid_str, load);
    }
}

/// Why a targeted load cannot become a job: `fun` must be a name or a list of names and
/// `arg` a list. Deviation: Salt would start such a job and return an exception text;
/// Halite drops it with a log line.
fn malformed(fun: &Value, arg: &Value) -> Option<String> {
    let fun_ok = match fun {
        Value::Array(funs) => !funs.is_empty() && funs.iter().all(|f| value::str_of(f).is_some()),
        other => value::str_of(other).is_some(),
    };
    if !fun_ok {
        return Some(format!("fun {fun} is not a function name"));
    }
    if !matches!(arg, Value::Array(_)) {
        return Some(format!("arg {arg} is not a list"));
    }
    None
}

fn log_dropped(e: &PublishError, master: &MasterAddr) {
    match e {
        PublishError::Replay { serial, last } => tracing::error!(
            "CRITICAL A message with an invalid serial was received.\nthis serial: {serial}\nlast serial: {last}\nThe minion will not honor this request."
        ),
        other => tracing::error!("Discarding load from master {} because it could not be decrypted: {other}", master.ip),
    }
}
