//! One simulated minion: a tokio task that signs in, subscribes, decrypts publishes,
//! decides targeting, answers jobs and fires events, with the real Salt 3008 messages
//! (`halite_proto::minion`).
//!
//! Per minion: one TCP connection to the publish port (its own reader task) and a share of
//! the request pool. What a stock minion also does and this one does not: fetch pillar
//! (`_pillar`), fire `minion_start` / `salt/minion/<id>/start`, register resources, run the
//! scheduler, verify publish signatures (a stock minion verifies only when its own
//! `sign_pub_messages` is on; the default is off), or fork per job.

use crate::exec::{self, JobReturn, Plan};
use crate::keys::MinionKey;
use crate::pool::{ReqPool, CONNECT_TIMEOUT};
use crate::states::{self, Request};
use crate::stats::{emit, inc, Stats};
use crate::zmtp::{Conn, SocketType};
use crate::Error;
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{
    aes_request, auth_request, new_nonce, new_token, open_auth_reply, open_pillar_reply,
    open_reply, AuthError, AuthOutcome, Creds, PrivateReplyKeys, PublishError, PublishFrame,
    PublishKey, ReplyError, Requester, SignIn, SignInState,
};
use halite_proto::rsa::{EncAlgo, PublicKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_target::{minion_match, MinionFacts, RegexCache};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::time::{Interval, MissedTickBehavior};

/// Tag prefix of the events the swarm fires: `halite-swarm/event/<id>`.
pub const EVENT_TAG_PREFIX: &str = "halite-swarm/event/";

/// Salt's `recon_default`: pause before reconnecting a lost subscription.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Salt's `auth_tries`: sign-in attempts in a row before waiting `acceptance_wait`.
const AUTH_TRIES: u32 = 7;

const ENC: EncAlgo = EncAlgo::OaepSha1;
const SIG: SigAlgo = SigAlgo::Pkcs1v15Sha1;

/// Timing settings of every minion.
#[derive(Debug, Clone)]
pub struct Timing {
    /// One `_auth` attempt (Salt's `auth_timeout`, 5 s).
    pub auth_timeout: Duration,
    /// Any other request.
    pub request_timeout: Duration,
    /// Wait after a pending sign-in or [`AUTH_TRIES`] failed ones (`acceptance_wait_time`).
    pub acceptance_wait: Duration,
    /// Attempts per return (`return_retry_tries`).
    pub return_tries: u32,
}

/// What all minions of a swarm share.
pub struct Shared {
    /// Master host (name or address) for both ports.
    pub master_host: String,
    /// Timing settings.
    pub timing: Timing,
    /// Answer `state.apply` with a stock minion's requests ([`crate::states`]).
    pub simulate_states: bool,
    /// The request connections.
    pub pool: ReqPool,
    /// Counters.
    pub stats: Stats,
    /// Bounds the sign-ins in flight (`--auth-concurrency`).
    pub auth_permits: Semaphore,
    /// Compiled target regexes.
    pub regexes: RegexCache,
    /// Events per second per minion (0: none).
    pub event_rate: watch::Receiver<f64>,
    /// Number of minions.
    pub count: u64,
    /// When the minion tasks started.
    pub started: Instant,
    /// Time from `started` until every minion was subscribed.
    pub ready_after: OnceLock<Duration>,
    /// Woken when `ready_after` is set.
    pub ready: Notify,
    /// The publish connections, shared by groups of minions.
    pub subscriptions: Subscriptions,
}

/// A publish frame as the subscription received it, shared by the minions of a group.
type Frame = Arc<Vec<u8>>;

/// Publish connections shared by groups of `per` consecutive minions
/// (`--minions-per-subscription`): a process, the master included, may hold fewer file
/// descriptors than a large swarm has minions. Every minion of a group gets every frame
/// its group's connection receives, as if it had its own (a publish to all minions is sent
/// the same bytes on every connection). With `per` above 1 the master has fewer
/// subscribers to send each publish to than there are minions; everything else (sign-ins,
/// returns, events) is still one per minion.
pub struct Subscriptions {
    per: usize,
    groups: std::sync::Mutex<HashMap<usize, Arc<std::sync::Mutex<Group>>>>,
}

/// One shared connection's minions.
#[derive(Default)]
struct Group {
    minions: Vec<mpsc::Sender<Frame>>,
    /// The connection has subscribed once (its minions count as subscribed on joining).
    subscribed: bool,
}

impl Subscriptions {
    /// Groups of `per` minions (1: a connection per minion, as stock minions).
    pub fn new(per: usize) -> Self {
        Subscriptions {
            per: per.max(1),
            groups: Default::default(),
        }
    }

    /// Minion `index`'s publish frames: joins its group, starting the group's connection
    /// to `addr` if it is the first to join.
    fn join(&self, shared: &Arc<Shared>, index: usize, addr: String) -> mpsc::Receiver<Frame> {
        let (tx, rx) = mpsc::channel(64);
        let (group, first) = {
            let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            let mut first = false;
            let group = groups
                .entry(index / self.per)
                .or_insert_with(|| {
                    first = true;
                    Default::default()
                })
                .clone();
            (group, first)
        };
        let mut g = group.lock().unwrap_or_else(|e| e.into_inner());
        g.minions.push(tx);
        if g.subscribed {
            shared.mark_subscribed();
        }
        drop(g);
        if first {
            tokio::spawn(subscriber(shared.clone(), addr, group));
        }
        rx
    }
}

impl Shared {
    fn mark_subscribed(&self) {
        let n = self.stats.subscribed.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.count && self.ready_after.set(self.started.elapsed()).is_ok() {
            self.ready.notify_one();
        }
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Sends one encrypted request; the reply (still sealed) and the nonce it must carry.
async fn exchange(
    shared: &Shared,
    key: &MinionKey,
    session: &Crypticle,
    load: Value,
) -> Result<(Value, String), Error> {
    let nonce = new_nonce();
    let who = Requester {
        id: &key.id,
        tok: &key.tok,
        enc_algo: ENC,
        sig_algo: SIG,
    };
    let body = aes_request(session, &who, load, &nonce, unix_now() as i64)?;
    let reply = shared
        .pool
        .request(value::encode(&body), shared.timing.request_timeout)
        .await?;
    Ok((value::decode(&reply)?, nonce))
}

/// The swarm's error for a reply that cannot be opened.
fn reply_error(e: ReplyError) -> Error {
    match e {
        ReplyError::Reauth(why) => Error::Reauth(why),
        ReplyError::Invalid(e) => Error::Proto(e),
    }
}

/// Sends one encrypted request and opens the reply.
async fn send_aes(
    shared: &Shared,
    key: &MinionKey,
    session: &Crypticle,
    load: Value,
) -> Result<Value, Error> {
    let (reply, nonce) = exchange(shared, key, session, load).await?;
    open_reply(session, &reply, &nonce).map_err(reply_error)
}

/// Sends a `_pillar` request and opens its master-signed private reply.
async fn send_pillar(
    shared: &Shared,
    key: &MinionKey,
    session: &Crypticle,
    master_pub: &str,
    load: Value,
) -> Result<(), Error> {
    let (reply, nonce) = exchange(shared, key, session, load).await?;
    let master = PublicKey::from_pem(master_pub.as_bytes())?;
    let keys = PrivateReplyKeys {
        key: &key.key,
        master: &master,
        enc_algo: ENC,
        sig_algo: SIG,
    };
    open_pillar_reply(&reply, &keys, &nonce)
        .map(drop)
        .map_err(reply_error)
}

/// Runs minion `index` until its key is refused or the swarm stops.
pub async fn run(shared: Arc<Shared>, key: Arc<MinionKey>, index: usize) {
    let creds = match authenticate(&shared, &key, None).await {
        Ok(c) => c,
        Err(e) => {
            inc(&shared.stats.auth_failed);
            tracing::warn!("Minion {} gave up signing in: {e}", key.id);
            return;
        }
    };
    inc(&shared.stats.authenticated);
    let (session, publish) = match keys_of(&creds) {
        Ok(k) => k,
        Err(e) => {
            inc(&shared.stats.auth_failed);
            tracing::warn!("Minion {}: unusable keys from the master: {e}", key.id);
            return;
        }
    };
    let sub_addr = format!("{}:{}", shared.master_host, creds.publish_port);
    let sub_rx = shared.subscriptions.join(&shared, index, sub_addr);
    let grains = map([
        ("id", s(key.id.as_str())),
        ("os", s("HaliteSwarm")),
        ("os_family", s("HaliteSwarm")),
        ("kernel", s("Linux")),
        ("swarm_index", Value::from(index as u64)),
    ]);
    let mut m = Minion {
        rate: shared.event_rate.clone(),
        shared,
        key,
        index,
        grains,
        session,
        publish,
        master_pub: creds.master_pub,
        running: HashMap::new(),
        event_seq: 0,
    };
    m.serve(sub_rx).await;
}

fn keys_of(creds: &Creds) -> Result<(Crypticle, PublishKey), Error> {
    Ok((
        Crypticle::new(&creds.session)?,
        PublishKey::new(Crypticle::new(&creds.aes)?),
    ))
}

/// Signs in until accepted: `pinned` is the master key pinned by an earlier sign-in.
async fn authenticate(
    shared: &Shared,
    key: &MinionKey,
    pinned: Option<&str>,
) -> Result<Creds, Error> {
    let master = pinned
        .map(|p| PublicKey::from_pem(p.as_bytes()))
        .transpose()?;
    let mut failures = 0;
    loop {
        let permit = shared
            .auth_permits
            .acquire()
            .await
            .map_err(|_| Error::Closed)?;
        let nonce = new_nonce();
        let token = master.as_ref().map(|_| new_token());
        let body = auth_request(&SignIn {
            id: &key.id,
            pub_clean: &key.pub_clean,
            nonce: &nonce,
            enc_algo: ENC,
            sig_algo: SIG,
            autosign_grains: None,
            token: master.as_ref().zip(token.as_deref()),
        })?;
        inc(&shared.stats.auth_requests);
        let reply = shared
            .pool
            .request(value::encode(&body), shared.timing.auth_timeout)
            .await;
        let outcome = reply.and_then(|r| Ok(value::decode(&r)?)).map(|reply| {
            open_auth_reply(
                &reply,
                &SignInState {
                    key: &key.key,
                    nonce: &nonce,
                    pinned,
                    token: token.as_deref(),
                    enc_algo: ENC,
                    sig_algo: SIG,
                },
            )
        });
        drop(permit);
        let wait = match outcome {
            Ok(Ok(AuthOutcome::Accepted(creds))) => return Ok(creds),
            Ok(Ok(AuthOutcome::Pending | AuthOutcome::Full)) => {
                inc(&shared.stats.auth_pending);
                failures = 0;
                true
            }
            Ok(Ok(AuthOutcome::Rejected)) => {
                return Err(Error::Refused(format!(
                    "the master rejected the key of {}",
                    key.id
                )))
            }
            Ok(Ok(AuthOutcome::BadEncAlgo | AuthOutcome::BadSigAlgo)) => {
                return Err(Error::Refused(
                    "the master does not support OAEP-SHA1 / PKCS1v15-SHA1".into(),
                ))
            }
            Ok(Err(AuthError::NotSigned(why))) => {
                tracing::debug!("Minion {}: sign-in not answered ({why}); retrying", key.id);
                inc(&shared.stats.auth_retries);
                failures += 1;
                failures >= AUTH_TRIES
            }
            Ok(Err(e)) => return Err(Error::Refused(e.to_string())),
            Err(e) => {
                tracing::debug!("Minion {}: sign-in failed ({e}); retrying", key.id);
                inc(&shared.stats.auth_retries);
                failures += 1;
                failures >= AUTH_TRIES
            }
        };
        if wait {
            failures = 0;
            tokio::time::sleep(shared.timing.acceptance_wait).await;
        }
    }
}

/// Keeps a group's subscription up and hands every publish (its last frame) to each of
/// the group's minions.
async fn subscriber(shared: Arc<Shared>, addr: String, group: Arc<std::sync::Mutex<Group>>) {
    let minions =
        |g: &std::sync::Mutex<Group>| g.lock().unwrap_or_else(|e| e.into_inner()).minions.clone();
    let mut first = true;
    loop {
        match Conn::connect(&addr, SocketType::Sub, b"", CONNECT_TIMEOUT).await {
            Ok(mut conn) => {
                if let Err(e) = conn.subscribe_all().await {
                    tracing::debug!("Subscribing at {addr} failed: {e}");
                } else {
                    if first {
                        first = false;
                        let mut g = group.lock().unwrap_or_else(|e| e.into_inner());
                        g.subscribed = true;
                        g.minions.iter().for_each(|_| shared.mark_subscribed());
                    } else {
                        inc(&shared.stats.resubscribes);
                    }
                    loop {
                        match conn.recv().await {
                            Ok(mut frames) => {
                                let Some(last) = frames.pop() else { continue };
                                let frame = Arc::new(last);
                                for tx in minions(&group) {
                                    // A minion that ended has dropped its receiver.
                                    let _ = tx.send(frame.clone()).await;
                                }
                            }
                            Err(e) => {
                                tracing::debug!("Subscription at {addr} lost: {e}");
                                break;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::debug!("Connecting to the publish port {addr} failed: {e}"),
        }
        if minions(&group).iter().all(mpsc::Sender::is_closed) {
            return;
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

struct Minion {
    shared: Arc<Shared>,
    key: Arc<MinionKey>,
    index: usize,
    grains: Value,
    session: Crypticle,
    publish: PublishKey,
    master_pub: String,
    /// `test.sleep` jobs still sleeping, by jid (for `saltutil.find_job`).
    running: HashMap<String, Value>,
    rate: watch::Receiver<f64>,
    event_seq: u64,
}

/// Waits for the next tick of an optional interval (forever without one).
async fn tick(t: &mut Option<Interval>) -> tokio::time::Instant {
    match t {
        Some(i) => i.tick().await,
        None => std::future::pending().await,
    }
}

impl Minion {
    async fn serve(&mut self, mut sub_rx: mpsc::Receiver<Frame>) {
        let (done_tx, mut done_rx) = mpsc::channel::<(Value, JobReturn)>(16);
        let mut ticker = self.ticker();
        loop {
            tokio::select! {
                frame = sub_rx.recv() => match frame {
                    Some(f) => self.on_publish(&f, &done_tx).await,
                    None => return,
                },
                Some((job, ret)) = done_rx.recv() => {
                    if let Some(jid) = value::get_str(&job, "jid") {
                        self.running.remove(jid);
                    }
                    self.send_return(&job, &ret).await;
                }
                at = tick(&mut ticker) => self.fire_event(at),
                changed = self.rate.changed() => match changed {
                    Ok(()) => ticker = self.ticker(),
                    Err(_) => ticker = None,
                },
            }
        }
    }

    /// The event interval for the current rate; minions' first ticks are spread evenly
    /// over one period so the swarm fires at a steady rate.
    fn ticker(&mut self) -> Option<Interval> {
        let rate = *self.rate.borrow_and_update();
        if !(rate.is_finite() && rate > 0.0) {
            return None;
        }
        let period = Duration::from_secs_f64(1.0 / rate);
        let offset = period.mul_f64(self.index as f64 / self.shared.count.max(1) as f64);
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
        i.set_missed_tick_behavior(MissedTickBehavior::Burst);
        Some(i)
    }

    /// Fires one `_minion_event`; `at` is when it was due, so a late send shows as latency.
    fn fire_event(&mut self, at: tokio::time::Instant) {
        self.event_seq += 1;
        let due = unix_now() - at.elapsed().as_secs_f64();
        let load = map([
            ("id", s(self.key.id.as_str())),
            ("cmd", s("_minion_event")),
            ("pretag", Value::Nil),
            (
                "data",
                map([("t", Value::F64(due)), ("seq", Value::from(self.event_seq))]),
            ),
            ("tag", s(format!("{EVENT_TAG_PREFIX}{}", self.key.id))),
        ]);
        let (shared, key, session) = (self.shared.clone(), self.key.clone(), self.session.clone());
        tokio::spawn(async move {
            match send_aes(&shared, &key, &session, load).await {
                Ok(_) => inc(&shared.stats.events),
                Err(e) => {
                    tracing::debug!("Minion {}: event failed: {e}", key.id);
                    inc(&shared.stats.event_failures);
                }
            }
        });
    }

    async fn reauth(&mut self) -> bool {
        inc(&self.shared.stats.reauths);
        match authenticate(&self.shared, &self.key, Some(&self.master_pub)).await {
            Ok(creds) => match keys_of(&creds) {
                Ok((session, publish)) => {
                    self.session = session;
                    if publish.key_string() != self.publish.key_string() {
                        self.publish = publish;
                    }
                    true
                }
                Err(e) => {
                    tracing::warn!("Minion {}: unusable keys from the master: {e}", self.key.id);
                    false
                }
            },
            Err(e) => {
                tracing::warn!("Minion {}: re-authentication failed: {e}", self.key.id);
                false
            }
        }
    }

    async fn on_publish(&mut self, bytes: &[u8], done: &mpsc::Sender<(Value, JobReturn)>) {
        inc(&self.shared.stats.publishes);
        let frame = match PublishFrame::parse(bytes) {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!("Minion {}: {e}", self.key.id);
                return;
            }
        };
        let job = match self.publish.open(&frame) {
            Ok(job) => job,
            // The master may have rotated the AES key: sign in again and retry once.
            Err(PublishError::Decrypt) if self.reauth().await => match self.publish.open(&frame) {
                Ok(job) => job,
                Err(e) => {
                    tracing::debug!("Minion {}: {e}", self.key.id);
                    return;
                }
            },
            Err(e) => {
                tracing::debug!("Minion {}: {e}", self.key.id);
                return;
            }
        };
        let Some(tgt) = value::get(&job, "tgt") else {
            return;
        };
        let pillar = Value::Map(Vec::new());
        let facts = MinionFacts {
            id: &self.key.id,
            grains: &self.grains,
            pillar: &pillar,
            nodegroups: None,
        };
        let tgt_type = value::get_str(&job, "tgt_type");
        let delimiter = value::get_str(&job, "delimiter");
        if !minion_match(&facts, tgt, tgt_type, delimiter, &self.shared.regexes) {
            return;
        }
        inc(&self.shared.stats.jobs);
        let Some(fun) = value::get_str(&job, "fun") else {
            tracing::debug!(
                "Minion {}: multi-function jobs are not simulated",
                self.key.id
            );
            return;
        };
        let arg = value::get(&job, "arg")
            .cloned()
            .unwrap_or(Value::Array(Vec::new()));
        match exec::plan(fun, &arg, self.shared.simulate_states) {
            Plan::Now(ret) => self.send_return(&job, &ret).await,
            Plan::Sleep(d) => {
                if let Some(jid) = value::get_str(&job, "jid") {
                    self.running.insert(jid.to_owned(), job.clone());
                }
                let done = done.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let ret = JobReturn {
                        ret: Value::Boolean(true),
                        retcode: 0,
                        success: true,
                        out: None,
                    };
                    let _ = done.send((job, ret)).await;
                });
            }
            Plan::StateApply => {
                if let Some(jid) = value::get_str(&job, "jid") {
                    self.running.insert(jid.to_owned(), job.clone());
                }
                let (shared, key, session) =
                    (self.shared.clone(), self.key.clone(), self.session.clone());
                let (grains, master_pub, done) =
                    (self.grains.clone(), self.master_pub.clone(), done.clone());
                tokio::spawn(async move {
                    for req in states::requests(&key.id, &grains) {
                        let sent = match req {
                            Request::Aes(load) => {
                                send_aes(&shared, &key, &session, load).await.map(drop)
                            }
                            Request::Pillar(load) => {
                                send_pillar(&shared, &key, &session, &master_pub, load).await
                            }
                        };
                        match sent {
                            Ok(()) => inc(&shared.stats.state_requests),
                            Err(e) => {
                                tracing::debug!("Minion {}: state request failed: {e}", key.id);
                                inc(&shared.stats.state_request_failures);
                            }
                        }
                    }
                    let _ = done.send((job, states::highstate_return())).await;
                });
            }
            Plan::FindJob(jid) => {
                let info = self
                    .running
                    .get(&jid)
                    .map(exec::running_job_info)
                    .unwrap_or(Value::Map(Vec::new()));
                let ret = JobReturn {
                    ret: info,
                    retcode: 0,
                    success: true,
                    out: None,
                };
                self.send_return(&job, &ret).await;
            }
        }
    }

    async fn send_return(&mut self, job: &Value, ret: &JobReturn) {
        let stamp = halite_proto::event::stamp(chrono::Utc::now());
        let load = exec::return_load(&self.key.id, job, ret, stamp);
        for _ in 0..self.shared.timing.return_tries.max(1) {
            match send_aes(&self.shared, &self.key, &self.session, load.clone()).await {
                Ok(_) => {
                    inc(&self.shared.stats.returns);
                    return;
                }
                Err(Error::Reauth(why)) => {
                    tracing::debug!(
                        "Minion {}: return refused ({why}); signing in again",
                        self.key.id
                    );
                    if !self.reauth().await {
                        break;
                    }
                }
                Err(e) => tracing::debug!("Minion {}: return failed: {e}", self.key.id),
            }
        }
        inc(&self.shared.stats.return_failures);
    }
}

/// Prints `progress` lines once a second while counters change, and the `ready` line as
/// soon as every minion is subscribed.
pub async fn reporter(shared: Arc<Shared>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let mut last = serde_json::Value::Null;
    let mut ready_printed = false;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = shared.ready.notified() => {}
        }
        if !ready_printed {
            if let Some(t) = shared.ready_after.get() {
                ready_printed = true;
                emit(
                    "ready",
                    json!({"count": shared.count, "secs": t.as_secs_f64()}),
                );
            }
        }
        let snap = shared.stats.snapshot();
        if snap != last {
            let mut line = snap.clone();
            line["secs"] = json!(shared.started.elapsed().as_secs_f64());
            emit("progress", line);
            last = snap;
        }
    }
}
