//! The minion's control threads: connect to the master (sign in, subscribe, fetch the
//! pillar, announce the start), serve publishes until the master goes away, and connect
//! again — `MinionManager._connect_minion`, `Minion.eval_master`, `connect_master`,
//! `tune_in` and the `__master_disconnected`/`__master_failback` handlers of
//! `salt/minion.py`, on blocking threads.
//!
//! The topologies ([`Plan`]):
//! - one master: one thread keeps the connection up, re-connecting after a loss;
//! - hot-hot (`master_type: str` with a list): a thread per master, each keeping its own
//!   connection (sign-in, publish subscription, request channel) up; the jid queue is
//!   shared, so a job two masters publish with the same jid runs once, and its return
//!   goes to the master that published it first; `fire_master` events go to every master
//!   (a forwarding queue per master);
//! - failover: one thread walks the list (`master_tries` rounds, `acceptance_wait_time`
//!   between rounds), moves a master that failed to the end, and with `master_failback`
//!   pings the first master every `master_failback_interval` while on another and goes
//!   back once it answers.
//!
//! A master counts as lost when its publish connection closes or its ZMTP heartbeat goes
//! unanswered ([`Heartbeat`](crate::transport::Heartbeat): within `master_alive_interval`),
//! whatever the OS socket table says; masters are told apart by their list entry, so
//! masters sharing an IP on different ports fail over correctly.
//!
//! Publishes are handled in arrival order per connection: verify (with
//! `sign_pub_messages`), decrypt (re-authenticating once when the AES key changed), drop
//! replays and duplicate jids, decide targeting, and hand matching jobs to
//! [`Runner::spawn`]. Nothing a job does can block a control thread.
//!
//! Stale publishes (a Halite rule; Salt runs whatever reaches it, however late). After a
//! graceful master restart a minion sat ~60 s on a request the dying master
//! took, while its publish socket, already connected to the new master, queued jobs; it
//! then ran 29 of them within 2 ms, up to 44 s late, some of which the CLI had already
//! reported as not returned. A publish for this minion is dropped, with an INFO line
//! naming its jid and the reason, when:
//! - it may have waited on the minion longer than `publish_max_age` (a Halite option,
//!   default 5 s, Salt's CLI `timeout`; 0 turns the rule off), or longer than the `to`
//!   timeout the publish carries (syndics) if that is longer. The wait is measured on the
//!   minion's own monotonic clock, from the last moment the publish queue was seen empty
//!   (the subscription's creation, or the end of the previous read; after a read that
//!   overran its timeout — the process was stopped or starved, and libzmq may not have
//!   read the kernel's buffers yet — from that read's start): publishes that queued while
//!   the minion connected, signed in again or was stopped (SIGSTOP) count as old as that
//!   wait, since the minion cannot tell when in it they came;
//! - it is encrypted with the AES key the minion's last sign-in replaced: it is from
//!   before that sign-in (Salt signs in again for it and then drops it as undecryptable;
//!   Halite drops it at once, without the needless sign-in).
//!
//! Jids are not used to judge age: they are the master's local time, in a time zone the
//! minion does not know, on a clock that may differ from the minion's or step, so a jid
//! rule would need an allowance of more than a day to be safe. Delays before the minion
//! (TCP buffers on a cut link) are bounded instead by the ZMTP heartbeat, which drops a
//! silent connection.
//!
//! Log lines are Salt's ("Connection to master %s lost", "Trying to tune in to next master
//! from master-list", "Moving possibly failed master %s to the end of the list of
//! masters", "Master %s could not be reached, trying next master (if any)", "Re-initialising
//! subsystems for new master %s", "Minion is ready to receive requests!"). Deviation: a
//! failback logs "Master %s answers again, failing back to it" where Salt logs its "lost"
//! line for the master it leaves, which is not lost.

use crate::auth::{Auth, Session};
use crate::channel::Channel;
use crate::forward::Forwarder;
use crate::jobs::{jid_text, Jobs, Runner};
use crate::keys::MinionKeys;
use crate::settings::Settings;
use crate::shutdown::Shutdown;
use crate::spool::Spool;
use crate::topology::{settings_for, FailoverOrder, MasterEntry, Plan};
use crate::transport::{
    ping_master, resolve, unresolvable_message, MasterAddr, PubEvent, Readiness, ReqSocket,
    Resolved, Subscription,
};
use crate::Error;
use halite_bus::BusHandle;
use halite_config::MinionConfig;
use halite_exec::Registry;
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{PublishError, PublishFrame, PublishKey};
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_target::{minion_match, MinionFacts, RegexCache};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long a control thread waits on the publish socket before checking for shutdown.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How far a poll of the publish socket may overrun [`POLL_INTERVAL`] before the control
/// thread counts itself as having been stopped meanwhile (the stale-publish rule).
const STALL: Duration = Duration::from_secs(1);

/// How long a minion waits for its publish connection before announcing itself: on a
/// working network the handshake takes milliseconds; a publish port that cannot be
/// reached only delays the start event by this much.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(3);

/// Fires `tag` with `{"master": master}` on the minion bus, as Salt's `master_event`s.
fn fire(bus: &BusHandle, tag: &str, master: &str) {
    if let Err(e) = bus.fire(tag, map([("master", s(master))])) {
        tracing::debug!("Cannot fire {tag} on the minion bus: {e}");
    }
}

/// Why the control threads ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Shutdown was requested.
    Stopped,
    /// The master rejected the minion's key (Salt exits with `EX_NOPERM`, 77).
    Rejected,
    /// The master's key does not match `master_finger` (Salt exits with 42).
    MasterFinger,
}

/// Why serving one connection ended.
enum End {
    Stopped,
    Rejected,
    MasterFinger,
    /// The master went away (its connection closed or stopped answering heartbeats).
    Lost,
    /// The preferred master answers again (`master_failback`).
    Failback,
}

/// Everything the control threads work with.
pub struct Daemon {
    /// The configuration (`__opts__` for functions).
    pub cfg: Arc<MinionConfig>,
    /// Settings read from it.
    pub settings: Arc<Settings>,
    /// How to connect.
    pub plan: Plan,
    /// The minion's keys.
    pub keys: Arc<MinionKeys>,
    /// The grains.
    pub grains: Arc<Value>,
    /// The functions jobs run.
    pub registry: Arc<Registry>,
    /// The minion's own event bus.
    pub bus: BusHandle,
    /// The queues of `fire_master` events, one per master connected at once
    /// ([`Plan::concurrent`]); each is attached to its master's link while it is up.
    pub forwarders: Vec<Arc<Forwarder>>,
    /// The stop signal.
    pub stop: Arc<Shutdown>,
    /// The live jobs (`saltutil.running`), drained at shutdown.
    pub jobs: Arc<Jobs>,
    /// Returns kept from the last shutdown, sent as their masters come up.
    pub spool: Arc<Spool>,
}

/// What every connection shares.
struct Shared {
    ctx: zmq::Context,
    /// Recently started jids (`jid_queue`, at most `minion_jid_queue_hwm`), whichever
    /// master published them.
    jids: Mutex<VecDeque<String>>,
    /// The live jobs (`saltutil.running`).
    jobs: Arc<Jobs>,
}

/// A master to connect to.
struct Target<'a> {
    /// Position of the master in the configured list.
    index: usize,
    entry: &'a MasterEntry,
    /// Where its name resolved to.
    master: MasterAddr,
    /// The settings of its connection ([`settings_for`]).
    settings: &'a Arc<Settings>,
}

/// One connection to one master.
struct Link {
    /// Position of the master in the configured list.
    index: usize,
    entry: MasterEntry,
    master: MasterAddr,
    auth: Arc<Auth>,
    runner: Arc<Runner>,
    sub: Subscription,
    /// When the subscription was made: nothing read from it was received before.
    subscribed_at: Instant,
    session: Arc<Session>,
}

/// What serving one link keeps from frame to frame.
struct Serving<'a> {
    link: &'a Link,
    regexes: &'a RegexCache,
    /// The session whose publish key is in use.
    session: Arc<Session>,
    keys: PubKeys,
    /// The frames being handled were received after this moment: the last time the
    /// publish queue was seen empty.
    received_after: Instant,
}

/// The publish keys of a link: the current one, and the one the last sign-in replaced.
struct PubKeys {
    current: PublishKey,
    previous: Option<PublishKey>,
}

impl PubKeys {
    fn new(aes: Crypticle) -> PubKeys {
        PubKeys {
            current: PublishKey::new(aes),
            previous: None,
        }
    }

    /// A sign-in brought `aes`; the current key becomes the previous one if it changed.
    fn replace(&mut self, aes: &Crypticle) {
        if aes.key_string() != self.current.key_string() {
            let old = std::mem::replace(&mut self.current, PublishKey::new(aes.clone()));
            self.previous = Some(old);
        }
    }
}

/// Why a publish is stale and dropped.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stale {
    /// It may have waited on the minion for `waited`, more than `max`.
    Waited { waited: Duration, max: Duration },
    /// It is encrypted with the AES key the minion's last sign-in replaced.
    OldKey,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Waited { waited, max } => write!(
                f,
                "it may have waited {:.1} s on this minion (while it was connecting, signing in again or not running), more than the {} s a publish may wait (publish_max_age, or the publish's `to` if longer)",
                waited.as_secs_f64(),
                crate::auth::secs(*max)
            ),
            Stale::OldKey => f.write_str(
                "it was published under the AES key of before the minion's last sign-in",
            ),
        }
    }
}

impl Daemon {
    /// Runs until shutdown, a rejected key or a `master_finger` mismatch.
    pub fn run(self) -> Exit {
        let shared = Arc::new(Shared {
            ctx: zmq::Context::new(),
            jids: Mutex::new(VecDeque::new()),
            jobs: self.jobs.clone(),
        });
        let me = Arc::new(self);
        let exit = match me.plan.clone() {
            Plan::Disabled => None,
            Plan::Each(entries) => match (entries.as_slice(), me.forwarders.first()) {
                ([one], Some(forwarder)) => me.keep_up(&shared, one, forwarder),
                _ => me.hot_hot(&shared, entries),
            },
            Plan::Failover(entries) => Some(me.failover(&shared, entries)),
        };
        match exit {
            Some(exit) => exit,
            // No connection to keep up (disabled, or no master name resolved): Salt's
            // minion stays up without a master.
            None => {
                while !me.stop.sleep(Duration::from_secs(3600)) {}
                Exit::Stopped
            }
        }
    }

    /// Hot-hot: a thread per master, each keeping its connection up. A rejected key or a
    /// `master_finger` mismatch on any master ends the minion, as in Salt, where either
    /// exits the process. `None` when every thread gave up without that.
    fn hot_hot(self: &Arc<Self>, shared: &Arc<Shared>, entries: Vec<MasterEntry>) -> Option<Exit> {
        let (tx, rx) = mpsc::channel();
        let mut threads = Vec::new();
        for (entry, forwarder) in entries.into_iter().zip(self.forwarders.iter().cloned()) {
            let (me, shared, tx) = (self.clone(), shared.clone(), tx.clone());
            let name = format!("minion-{}", entry.text);
            let started = std::thread::Builder::new().name(name).spawn(move || {
                let _ = tx.send(me.keep_up(&shared, &entry, &forwarder));
            });
            match started {
                Ok(t) => threads.push(t),
                Err(e) => tracing::error!("Cannot start a thread for a master: {e}"),
            }
        }
        drop(tx);
        let mut exit = None;
        for ended in rx {
            match ended {
                Some(Exit::Stopped) => exit = exit.or(Some(Exit::Stopped)),
                Some(fatal) => {
                    if exit.is_none_or(|e| e == Exit::Stopped) {
                        exit = Some(fatal);
                    }
                    self.stop.stop();
                }
                None => {}
            }
        }
        for t in threads {
            let _ = t.join();
        }
        exit
    }

    /// One master kept connected (`_connect_minion`, and the reconnection after a loss):
    /// failed attempts wait `acceptance_wait_time`, growing by it up to
    /// `acceptance_wait_time_max`. `None` when the name could not be resolved
    /// (`retry_dns_count` ran out): Salt's minion gives that master up.
    fn keep_up(&self, shared: &Shared, entry: &MasterEntry, forwarder: &Forwarder) -> Option<Exit> {
        let settings = Arc::new(settings_for(&self.settings, entry, false));
        let regexes = RegexCache::new(64);
        let (base, max_wait) = self.auth_waits();
        let mut auth_wait = base;
        let mut reconnect = false;
        loop {
            let master = match resolve(&entry.host, entry.port, &settings, &self.stop, true) {
                Resolved::Found(m) => m,
                Resolved::Stopped => return Some(Exit::Stopped),
                Resolved::Unresolvable => {
                    tracing::error!("{}", unresolvable_message(&entry.host));
                    return None;
                }
            };
            let target = Target {
                index: 0,
                entry,
                master,
                settings: &settings,
            };
            let connected = self.connect(shared, target, forwarder, reconnect);
            match connected {
                Ok(link) => {
                    auth_wait = base;
                    match self.serve(shared, &link, forwarder, &regexes, None) {
                        End::Stopped => return Some(Exit::Stopped),
                        End::Rejected => return Some(self.rejected()),
                        End::MasterFinger => return Some(Exit::MasterFinger),
                        End::Lost | End::Failback => self.lost(&link),
                    }
                    reconnect = true;
                }
                Err(Error::Stopped) => return Some(Exit::Stopped),
                Err(Error::Rejected) => return Some(self.rejected()),
                Err(Error::MasterFinger) => return Some(Exit::MasterFinger),
                Err(e) => {
                    tracing::error!(
                        "Error while bringing up minion for multi-master. Is master at {} responding? The error message was {e}",
                        entry.host
                    );
                    if auth_wait < max_wait {
                        auth_wait += base;
                    }
                    if self.stop.sleep(auth_wait) {
                        return Some(Exit::Stopped);
                    }
                }
            }
        }
    }

    /// Failover: one connection at a time over the list; a lost master goes to the end
    /// of it; with `master_failback` (which, as in Salt, needs `master_alive_interval`)
    /// the first master is pinged while the minion is on another.
    fn failover(&self, shared: &Shared, entries: Vec<MasterEntry>) -> Exit {
        let Some(forwarder) = self.forwarders.first() else {
            return Exit::Stopped;
        };
        let st = &self.settings;
        let failback = st.master_failback
            && !st.master_alive_interval.is_zero()
            && !st.master_failback_interval.is_zero();
        let mut order = FailoverOrder::new(entries, st.random_master, failback);
        let regexes = RegexCache::new(64);
        let mut last_ip = None;
        let (base, max_wait) = self.auth_waits();
        let mut auth_wait = base;
        let mut reconnect = false;
        loop {
            let link = match self.eval_master(shared, &order, forwarder, &mut last_ip, reconnect) {
                Ok(link) => link,
                Err(Error::Stopped) => return Exit::Stopped,
                Err(Error::Rejected) => return self.rejected(),
                Err(Error::MasterFinger) => return Exit::MasterFinger,
                Err(e) => {
                    let masters: Vec<&str> =
                        order.entries().map(|(_, e)| e.text.as_str()).collect();
                    tracing::error!(
                        "Error while bringing up minion for multi-master. Is master at {} responding? The error message was {e}",
                        masters.join(", ")
                    );
                    if auth_wait < max_wait {
                        auth_wait += base;
                    }
                    if self.stop.sleep(auth_wait) {
                        return Exit::Stopped;
                    }
                    continue;
                }
            };
            auth_wait = base;
            reconnect = true;
            let back = Arc::new(AtomicBool::new(false));
            let done = Arc::new(Shutdown::new());
            let pinger = match order.preferred() {
                Some(first) if failback && !order.is_preferred(link.index) => {
                    self.start_failback(shared, first.clone(), back.clone(), done.clone())
                }
                _ => None,
            };
            let end = self.serve(shared, &link, forwarder, &regexes, Some(&back));
            done.stop();
            if let Some(p) = pinger {
                let _ = p.join();
            }
            match end {
                End::Stopped => return Exit::Stopped,
                End::Rejected => return self.rejected(),
                End::MasterFinger => return Exit::MasterFinger,
                End::Lost => {
                    self.lost(&link);
                    tracing::info!(
                        "Moving possibly failed master {} to the end of the list of masters",
                        link.entry.host
                    );
                    order.failed(link.index);
                }
                End::Failback => {
                    if let Some(first) = order.preferred() {
                        tracing::info!("Master {} answers again, failing back to it", first.host);
                    }
                    tracing::info!("Trying to tune in to next master from master-list");
                    order.reset();
                }
            }
        }
    }

    /// `eval_master` for a list: rounds over the masters in `order` until one accepts
    /// the minion, `acceptance_wait_time` between rounds, at most `master_tries` rounds.
    fn eval_master(
        &self,
        shared: &Shared,
        order: &FailoverOrder,
        forwarder: &Forwarder,
        last_ip: &mut Option<IpAddr>,
        reconnect: bool,
    ) -> Result<Link, Error> {
        let tries = self.settings.master_tries;
        let mut attempts = 0u32;
        loop {
            if attempts != 0 && self.stop.sleep(self.settings.acceptance_wait_time) {
                return Err(Error::Stopped);
            }
            attempts = attempts.saturating_add(1);
            match tries {
                Some(t) => tracing::debug!("Connecting to master. Attempt {attempts} of {t}"),
                None => {
                    tracing::debug!("Connecting to master. Attempt {attempts} (infinite attempts)")
                }
            }
            let mut resolved = false;
            for (index, entry) in order.entries() {
                if self.stop.is_stopped() {
                    return Err(Error::Stopped);
                }
                let settings = Arc::new(settings_for(&self.settings, entry, true));
                let master = match resolve(&entry.host, entry.port, &settings, &self.stop, false) {
                    Resolved::Found(m) => m,
                    Resolved::Stopped => return Err(Error::Stopped),
                    Resolved::Unresolvable => continue,
                };
                resolved = true;
                if let Some(previous) = last_ip.replace(master.ip).filter(|ip| *ip != master.ip) {
                    tracing::warn!("Master ip address changed from {previous} to {}", master.ip);
                }
                let target = Target {
                    index,
                    entry,
                    master,
                    settings: &settings,
                };
                match self.connect(shared, target, forwarder, reconnect) {
                    Ok(link) => return Ok(link),
                    Err(e @ (Error::Stopped | Error::Rejected | Error::MasterFinger)) => {
                        return Err(e)
                    }
                    Err(e) => {
                        tracing::info!(
                            "Master {} could not be reached, trying next master (if any)",
                            entry.host
                        );
                        tracing::debug!("Connecting to master {} failed: {e}", entry.text);
                    }
                }
            }
            if !resolved {
                tracing::error!("No master could be resolved");
                return Err(Error::NoMaster("No master could be resolved".into()));
            }
            if tries == Some(attempts) {
                tracing::error!("No master could be reached or all masters denied the minion's connection attempt.");
                return Err(Error::NoMaster("No master could be reached".into()));
            }
        }
    }

    /// Pings `first` every `master_failback_interval` (`status.ping_master`, a clear
    /// `ping` with one try of `auth_timeout`); once it answers, fires `__master_failback`
    /// on the minion bus and raises `back`. Ends when `done` fires.
    fn start_failback(
        &self,
        shared: &Shared,
        first: MasterEntry,
        back: Arc<AtomicBool>,
        done: Arc<Shutdown>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let settings = settings_for(&self.settings, &first, true);
        let (ctx, bus) = (shared.ctx.clone(), self.bus.clone());
        let interval = self.settings.master_failback_interval;
        let started = std::thread::Builder::new()
            .name("master_failback".into())
            .spawn(move || {
                let never = Shutdown::new();
                while !done.sleep(interval) {
                    let Resolved::Found(master) =
                        resolve(&first.host, first.port, &settings, &never, false)
                    else {
                        continue;
                    };
                    let uri = master.uri(master.ret_port);
                    let abort = || done.is_stopped();
                    if ping_master(&ctx, uri, &settings, settings.auth_timeout, &abort) {
                        tracing::debug!("Master {} answered a ping", first.text);
                        fire(&bus, "__master_failback", &first.text);
                        back.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            });
        match started {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::error!("Cannot start the master_failback thread: {e}");
                None
            }
        }
    }

    /// `acceptance_wait_time` and the most it grows to.
    fn auth_waits(&self) -> (Duration, Duration) {
        let base = self.settings.acceptance_wait_time;
        let max = if self.settings.acceptance_wait_time_max.is_zero() {
            base
        } else {
            self.settings.acceptance_wait_time_max
        };
        (base, max)
    }

    /// The `__master_disconnected` handler's first steps.
    fn lost(&self, link: &Link) {
        tracing::info!("Connection to master {} lost", link.entry.host);
        fire(&self.bus, "__master_disconnected", &link.entry.host);
        tracing::info!("Trying to tune in to next master from master-list");
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

    /// `connect_master` + `_post_master_init` + the start of `tune_in`, for `target`.
    fn connect(
        &self,
        shared: &Shared,
        target: Target<'_>,
        forwarder: &Forwarder,
        reconnect: bool,
    ) -> Result<Link, Error> {
        let Target {
            index,
            entry,
            master,
            settings,
        } = target;
        let uri = master.uri(master.ret_port);
        let auth = Arc::new(Auth::new(
            settings.clone(),
            self.keys.clone(),
            &shared.ctx,
            uri.clone(),
            &self.grains,
            false,
            self.stop.clone(),
        ));
        let session = auth.session()?;
        let port = match settings.publish_port {
            Some(p) if p != 4506 => p,
            _ => session.publish_port,
        };
        let subscribed_at = Instant::now();
        let sub = Subscription::connect(&shared.ctx, &master.uri(port), settings)?;
        if sub.wait_ready(SUBSCRIBE_WAIT) == Readiness::Unknown {
            tracing::debug!(
                "The publish connection to {} is not known to be up after {} s; going on",
                entry.host,
                crate::auth::secs(SUBSCRIBE_WAIT)
            );
        }
        fire(&self.bus, "__master_connected", &entry.host);

        let channel = Arc::new(Channel::new(
            auth.clone(),
            ReqSocket::new(&shared.ctx, uri.clone(), settings),
        ));
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
        let pillar = channel
            .pillar(&pillar_load, st.request_timeout, st.request_tries)
            .map_err(|e| {
                tracing::error!("Exception getting pillar: {e}");
                e
            })?;
        let runner = Arc::new(Runner {
            settings: settings.clone(),
            opts: self.cfg.clone(),
            registry: self.registry.clone(),
            grains: self.grains.clone(),
            pillar: Arc::new(RwLock::new(Arc::new(pillar))),
            jobs: shared.jobs.clone(),
            channel: channel.clone(),
            master: entry.text.clone(),
            spool: self.spool.clone(),
            proc_dir: self.cfg.cachedir.join("proc"),
            forwarders: self.forwarders.clone(),
        });
        if reconnect {
            tracing::info!("Re-initialising subsystems for new master {}", entry.host);
        }
        self.announce(&channel);
        // Forwarded events get a request socket of their own, so job returns never wait
        // behind a batch of them.
        forwarder.attach(Arc::new(Channel::new(
            auth.clone(),
            ReqSocket::new(&shared.ctx, uri, settings),
        )));
        tracing::info!("Minion is ready to receive requests!");
        self.send_kept_returns(&runner);
        Ok(Link {
            index,
            entry: entry.clone(),
            master,
            auth,
            runner,
            sub,
            subscribed_at,
            session,
        })
    }

    /// Sends the returns kept from the last shutdown for the master of `runner`, on a
    /// thread of its own (the link serves publishes meanwhile).
    fn send_kept_returns(&self, runner: &Arc<Runner>) {
        if runner.spool.kept(&runner.master).is_empty() {
            return;
        }
        let runner = runner.clone();
        let started = std::thread::Builder::new()
            .name("kept-returns".into())
            .spawn(move || {
                let s = &runner.settings;
                runner.spool.send_kept(&runner.master, &|load| {
                    runner
                        .channel
                        .send(load, s.return_timeout(), s.return_retry_tries)
                        .map(|_| ())
                });
            });
        if let Err(e) = started {
            tracing::error!("Cannot start the thread sending kept returns: {e}");
        }
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

    /// Serves `link` until its master is lost, `back` is raised (failback), or shutdown.
    fn serve(
        &self,
        shared: &Shared,
        link: &Link,
        forwarder: &Forwarder,
        regexes: &RegexCache,
        back: Option<&AtomicBool>,
    ) -> End {
        let mut st = Serving {
            link,
            regexes,
            session: link.session.clone(),
            keys: PubKeys::new(link.session.aes.clone()),
            received_after: link.subscribed_at,
        };
        let end = loop {
            if self.stop.is_stopped() {
                break End::Stopped;
            }
            if back.is_some_and(|b| b.load(Ordering::SeqCst)) {
                break End::Failback;
            }
            let poll_started = Instant::now();
            let events = match link.sub.poll(POLL_INTERVAL) {
                Ok(events) => events,
                // A signal (the SIGTERM that stops the minion) interrupted the wait.
                Err(Error::Zmq {
                    source: zmq::Error::EINTR,
                    ..
                }) => Vec::new(),
                Err(e) => {
                    tracing::error!("The publish socket failed: {e}");
                    break End::Lost;
                }
            };
            // The poll read the queue empty: what the next one reads arrives after now —
            // unless the poll overran its timeout: then the process did not run (SIGSTOP,
            // starved), data may still sit in the kernel's buffers unread by libzmq, and
            // what the next poll reads may have come any time since this one started.
            let drained_at = Instant::now();
            let next_after = if drained_at.duration_since(poll_started) > POLL_INTERVAL + STALL {
                poll_started
            } else {
                drained_at
            };
            let mut ended = None;
            for event in events {
                let end = match event {
                    PubEvent::Disconnected => Some(End::Lost),
                    PubEvent::Frame(frame) => self.on_frame(shared, &mut st, &frame),
                };
                if end.is_some() {
                    ended = end;
                    break;
                }
            }
            if let Some(end) = ended {
                break end;
            }
            st.received_after = next_after;
        };
        forwarder.detach();
        end
    }

    /// Brings the session and keys of `st` up to date after another thread signed in
    /// again.
    fn refresh(st: &mut Serving<'_>) {
        if let Some(current) = st.link.auth.current() {
            if current.generation != st.session.generation {
                st.keys.replace(&current.aes);
                st.session = current;
            }
        }
    }

    /// `AsyncPubChannel._decode_payload` + `Minion._handle_payload` for one frame.
    fn on_frame(&self, shared: &Shared, st: &mut Serving<'_>, raw: &[u8]) -> Option<End> {
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
        Self::refresh(st);
        let link = st.link;
        if self.settings.sign_pub_messages {
            if let Err(e) = frame.verify(&st.session.master) {
                tracing::error!("Dropping a publish from master {}: {e}", link.master.ip);
                return None;
            }
        }
        let load = match st.keys.current.open(&frame) {
            Ok(load) => load,
            Err(PublishError::Decrypt) => {
                match st.keys.previous.as_mut().map(|k| k.open(&frame)) {
                    // Published under the key the last sign-in replaced: from before it.
                    Some(Ok(load)) => {
                        self.on_load(shared, st, load, Some(Stale::OldKey));
                        return None;
                    }
                    Some(Err(e @ PublishError::Replay { .. })) => {
                        log_dropped(&e, &link.master);
                        return None;
                    }
                    _ => {}
                }
                match link.auth.reauthenticate(st.session.generation) {
                    Ok(_) => {}
                    Err(Error::Stopped) => return Some(End::Stopped),
                    Err(Error::Rejected) => return Some(End::Rejected),
                    Err(Error::MasterFinger) => return Some(End::MasterFinger),
                    Err(e) => {
                        tracing::error!(
                            "Re-authentication after a publish decryption failure failed: {e}"
                        );
                        return None;
                    }
                }
                Self::refresh(st);
                match st.keys.current.open(&frame) {
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
        let stale = self.too_old(&load, st.received_after);
        self.on_load(shared, st, load, stale);
        None
    }

    /// The age rule: `Some` when the publish may have waited on this minion longer than
    /// `publish_max_age` (or the `to` timeout it carries, if longer). It was received
    /// after `received_after`, the last moment the publish queue was seen empty.
    fn too_old(&self, load: &Value, received_after: Instant) -> Option<Stale> {
        let to = match value::get(load, "to") {
            Some(Value::Integer(i)) => i.as_f64(),
            Some(Value::F64(f)) => Some(*f),
            _ => None,
        }
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map_or(Duration::ZERO, Duration::from_secs_f64);
        let max = self.settings.publish_max_age;
        if max.is_zero() {
            return None;
        }
        let waited = received_after.elapsed();
        (waited > max.max(to)).then_some(Stale::Waited {
            waited,
            max: max.max(to),
        })
    }

    /// `_target_load` + `_handle_decoded_payload`; a publish for this minion that is
    /// `stale` is logged and dropped instead.
    fn on_load(&self, shared: &Shared, st: &Serving<'_>, mut load: Value, stale: Option<Stale>) {
        let link = st.link;
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
            st.regexes,
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
        if let Some(stale) = stale {
            tracing::info!(
                "Dropping stale job {jid_str} ({fun_text}) from master {}: {stale}",
                link.entry.host
            );
            return;
        }
        match value::get_str(&load, "user") {
            Some(user) => {
                tracing::info!("User {user} Executing command {fun_text} with jid {jid_str}")
            }
            None => tracing::info!("Executing command {fun_text} with jid {jid_str}"),
        }
        {
            let mut jids = shared.jids.lock().unwrap_or_else(|e| e.into_inner());
            if jids.contains(&jid_str) {
                tracing::debug!("Job {jid_str} was already started; duplicate publish dropped");
                return;
            }
            jids.push_back(jid_str.clone());
            if jids.len() > self.settings.jid_queue_hwm {
                jids.pop_front();
            }
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
            critical = true,
            "A message with an invalid serial was received.\nthis serial: {serial}\nlast serial: {last}\nThe minion will not honor this request."
        ),
        other => tracing::error!("Discarding load from master {} because it could not be decrypted: {other}", master.ip),
    }
}
