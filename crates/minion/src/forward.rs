//! Minion → master event forwarding: events fired on the minion bus with a tag starting
//! with `fire_master` are sent to the master as `_minion_event` requests over the
//! encrypted request channel (`Minion.handle_event`, `_fire_master_main` and
//! `_fire_master_prepare` in `salt/minion.py`).
//!
//! Salt's minion sends each such event as one request while it is connected and drops it
//! (with a debug line) while it is not. Halite keeps them instead in one ordered queue of
//! `fire_master_queue_size` events (a Halite option, default
//! [`DEFAULT_FIRE_MASTER_QUEUE_SIZE`](crate::settings::DEFAULT_FIRE_MASTER_QUEUE_SIZE);
//! the one request out to the master comes on top), delivered in order once the master
//! is back — or, with failover, to the next master: the control thread attaches each new
//! master link ([`Forwarder::attach`]), and a request left unanswered on the old one is sent
//! again on the new one; when the queue is full the oldest events are dropped, counted
//! and logged. A minion on several masters at once (hot-hot) has a forwarder per master,
//! and every one of them gets each event ([`offer`]), as Salt fires to every master.
//!
//! The two event shapes Salt accepts on the bus, both with the four keys `data`, `tag`,
//! `events` and `pretag` (Salt's minion fails on a missing one, and so does Halite's, with
//! a warning that names it):
//! - the single form `{"data": d, "tag": t, "events": None, "pretag": None}` (what
//!   `event.fire_master` fires): a stock master fires the whole request load
//!   `{id, cmd, pretag, data, tag, ts}` on its bus with tag `t`;
//! - the list form `{"events": [{"tag": t, "data": d} | {"tag": t, ...}, ...], "pretag": p,
//!   ...}` (beacons, seed 002): the master fires each element's `data` (or the element
//!   itself) with the element's tag, plus a copy tagged `p/t` when `p` is set.
//!
//! Batching. A request is sent as soon as the previous one is answered, carrying what
//! queued up meanwhile: alone, an event is sent exactly as Salt sends it; under load,
//! consecutive events share one request in the list form. A single-form event joins a
//! list as `{"tag": t, "data": {id, cmd, pretag, data, tag, ts}}`, so the master fires
//! the very data it fires for the single form. Events that a master treats differently in
//! the two forms are never batched: single-form events whose tag is on the master's
//! `MINION_EVENT_BLACKLIST` (fired only in the single form) or is `_salt_error`, and list
//! events with a `pretag` (batched only with events of the same `pretag`).
//!
//! Deviations from Salt, for safety (each logged when it applies): a single-form event
//! whose tag is not a non-empty string without `"\n\n"`, a list element that is not a map
//! with such a tag or whose `data` is not a map, and an `events` value that is not a list
//! are dropped on the minion, where a stock master would fail on them part-way through a
//! request. Delivery is in order and at least once: a request whose reply did not come is
//! sent again, so a master that handled it but whose reply was lost sees it twice.
//!
//! Cost. Each event is encoded to msgpack once, when it is queued; a request is built by
//! concatenating those bytes ([`EncodedLoad`]), so the sender allocates nothing per event.

use crate::channel::{Channel, EncodedLoad};
use crate::shutdown::Shutdown;
use crate::Error;
use halite_bus::{Event, RecvError, Subscription};
use halite_proto::event::MINION_EVENT_BLACKLIST;
use halite_proto::value;
use halite_proto::Value;
use halite_target::fnmatch::fnmatch;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Events on the minion bus whose tag starts with this are forwarded.
pub const FIRE_MASTER_TAG: &str = "fire_master";

/// Most events in one request.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// Most bytes of events in one request; a larger single event still goes, alone.
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// How long one request waits for the master's reply (Salt's `_fire_master_main`
/// `timeout=60`); it is abandoned at once when the link to the master drops.
pub const FIRE_MASTER_TIMEOUT: Duration = Duration::from_secs(60);

/// Pause after a failed request before the next attempt.
pub const RETRY_WAIT: Duration = Duration::from_secs(1);

/// Requests the master answered unusably in a row before their events are dropped.
pub const MAX_REPLY_FAILURES: u32 = 3;

/// Drops are logged at most once per this interval (and when the sender next runs).
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// How often the sender looks at the stop signal while it waits.
const WAIT_SLICE: Duration = Duration::from_millis(250);

/// One event waiting for the master, its parts already msgpack-encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Pending {
    /// A single-form event: the master fires the request load with `tag`.
    Single {
        /// The tag.
        tag: String,
        /// The encoded data (`{}` when Salt would send `{}` for a falsy value).
        data: Vec<u8>,
        /// Must go in its own single-form request (blacklisted tag or `_salt_error`).
        alone: bool,
    },
    /// One element of a list-form event, sent unchanged with the list's `pretag`.
    Listed {
        /// The list's `pretag`.
        pretag: Option<String>,
        /// The encoded element (a map with a `tag`).
        event: Vec<u8>,
    },
}

impl Pending {
    /// Which events may share a request with this one: `None` for a single-form event
    /// that must go alone, else the `pretag` of the request.
    fn batch_key(&self) -> Option<Option<&str>> {
        match self {
            Pending::Single { alone: true, .. } => None,
            Pending::Single { .. } => Some(None),
            Pending::Listed { pretag, .. } => Some(pretag.as_deref()),
        }
    }

    /// Roughly how many bytes the event adds to a request.
    fn size(&self) -> usize {
        match self {
            Pending::Single { tag, data, .. } => data.len() + 2 * tag.len() + 64,
            Pending::Listed { event, .. } => event.len(),
        }
    }
}

/// A `fire_master` bus event read into what is to be sent.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// The events to queue, in order.
    pub events: Vec<Pending>,
    /// Why list elements were left out, one line each.
    pub skipped: Vec<String>,
}

fn valid_tag(tag: &str) -> bool {
    !tag.is_empty() && !tag.contains("\n\n")
}

fn blacklisted(tag: &str) -> bool {
    // Every pattern starts with "salt/": most tags are decided without matching.
    tag.starts_with("salt/") && MINION_EVENT_BLACKLIST.iter().any(|b| fnmatch(tag, b))
}

/// Reads the data of a `fire_master` bus event as Salt's minion does (`handle_event` and
/// `_fire_master_prepare`); an error says why nothing of it can be sent.
pub fn parse(data: &Value) -> Result<Parsed, Error> {
    let bad = |why: String| Err(Error::BadEvent(why));
    let missing: Vec<&str> = ["data", "tag", "events", "pretag"]
        .into_iter()
        .filter(|k| value::get(data, k).is_none())
        .collect();
    if !missing.is_empty() {
        return bad(format!(
            "the event lacks {} (Salt's minion needs data, tag, events and pretag)",
            missing.join(", ")
        ));
    }
    let field = |k: &str| value::get(data, k).unwrap_or(&Value::Nil);
    let events = field("events");
    if value::truthy(events) {
        let Value::Array(list) = events else {
            return bad(format!("events is not a list: {events}"));
        };
        let pretag = match field("pretag") {
            Value::Nil => None,
            p => match value::str_of(p) {
                Some(p) => Some(p.to_owned()),
                None => return bad(format!("pretag is not a string: {p}")),
            },
        };
        let mut parsed = Parsed::default();
        for (i, event) in list.iter().enumerate() {
            match check_listed(event) {
                Ok(()) => parsed.events.push(Pending::Listed {
                    pretag: pretag.clone(),
                    event: value::encode(event),
                }),
                Err(why) => parsed.skipped.push(format!("events[{i}] {why}")),
            }
        }
        return Ok(parsed);
    }
    let tag = field("tag");
    if !value::truthy(tag) {
        return bad("it has neither events nor a tag: nothing to send".to_owned());
    }
    let Some(tag) = value::str_of(tag).filter(|t| valid_tag(t)) else {
        return bad(format!("tag {tag} is not a string without \"\\n\\n\""));
    };
    let data = field("data");
    let data = if value::truthy(data) {
        value::encode(data)
    } else {
        value::encode(&Value::Map(Vec::new()))
    };
    Ok(Parsed {
        events: vec![Pending::Single {
            alone: blacklisted(tag) || tag == "_salt_error",
            tag: tag.to_owned(),
            data,
        }],
        skipped: Vec::new(),
    })
}

/// What a stock master needs of a list element: a map with a usable tag and map data.
fn check_listed(event: &Value) -> Result<(), String> {
    if !matches!(event, Value::Map(_)) {
        return Err(format!("is not a map: {event}"));
    }
    match value::get(event, "tag") {
        Some(t) if value::str_of(t).is_some_and(valid_tag) => {}
        Some(t) => return Err(format!("has tag {t}, not a string without \"\\n\\n\"")),
        None => return Err("has no tag".to_owned()),
    }
    match value::get(event, "data") {
        None | Some(Value::Map(_)) => Ok(()),
        Some(d) => Err(format!("has data that is not a map: {d}")),
    }
}

// Writing msgpack to a Vec cannot fail; the results of rmp's writers are ignored.
fn put_str(out: &mut Vec<u8>, text: &str) {
    let _ = rmp::encode::write_str(out, text);
}

fn put_map(out: &mut Vec<u8>, len: u32) {
    let _ = rmp::encode::write_map_len(out, len);
}

/// The `_minion_event` load for `events` (one request's worth, as the sender cuts
/// them): Salt's single form for one single-form event, else the list form, in which a
/// single-form event becomes `{"tag": t, "data": {id, cmd, pretag, data, tag, ts}}`.
/// `ts` is the request time in seconds, as the channel stamps it.
pub fn encode_request(id: &str, events: &[Pending], ts: i64) -> EncodedLoad {
    let mut out = Vec::with_capacity(events.iter().map(Pending::size).sum::<usize>() + 128);
    put_str(&mut out, "id");
    put_str(&mut out, id);
    put_str(&mut out, "cmd");
    put_str(&mut out, "_minion_event");
    put_str(&mut out, "pretag");
    if let [Pending::Single { tag, data, .. }] = events {
        let _ = rmp::encode::write_nil(&mut out);
        put_str(&mut out, "data");
        out.extend_from_slice(data);
        put_str(&mut out, "tag");
        put_str(&mut out, tag);
        return EncodedLoad {
            len: 5,
            entries: out,
        };
    }
    match events.first() {
        Some(Pending::Listed {
            pretag: Some(p), ..
        }) => put_str(&mut out, p),
        _ => {
            let _ = rmp::encode::write_nil(&mut out);
        }
    }
    put_str(&mut out, "events");
    let _ = rmp::encode::write_array_len(&mut out, events.len() as u32);
    for event in events {
        match event {
            Pending::Single { tag, data, .. } => {
                put_map(&mut out, 2);
                put_str(&mut out, "tag");
                put_str(&mut out, tag);
                put_str(&mut out, "data");
                put_map(&mut out, 6);
                put_str(&mut out, "id");
                put_str(&mut out, id);
                put_str(&mut out, "cmd");
                put_str(&mut out, "_minion_event");
                put_str(&mut out, "pretag");
                let _ = rmp::encode::write_nil(&mut out);
                put_str(&mut out, "data");
                out.extend_from_slice(data);
                put_str(&mut out, "tag");
                put_str(&mut out, tag);
                put_str(&mut out, "ts");
                let _ = rmp::encode::write_sint(&mut out, ts);
            }
            Pending::Listed { event, .. } => out.extend_from_slice(event),
        }
    }
    EncodedLoad {
        len: 4,
        entries: out,
    }
}

/// Takes from the front of `queue` the longest run of events that can share one
/// request: at most `max_events` and `max_bytes` (but at least one event), all with the
/// same batch key; an event that must go alone goes alone.
fn take_batch(queue: &mut VecDeque<Pending>, max_events: usize, max_bytes: usize) -> Vec<Pending> {
    let Some(first) = queue.pop_front() else {
        return Vec::new();
    };
    let mut bytes = first.size();
    let key = first.batch_key().map(|k| k.map(str::to_owned));
    let mut batch = vec![first];
    let Some(key) = key else {
        return batch;
    };
    while let Some(next) = queue.front() {
        let same = next.batch_key().is_some_and(|k| k == key.as_deref());
        if !same || batch.len() >= max_events || bytes.saturating_add(next.size()) > max_bytes {
            break;
        }
        bytes = bytes.saturating_add(next.size());
        if let Some(next) = queue.pop_front() {
            batch.push(next);
        }
    }
    batch
}

/// Counters of the forwarder, for logs and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Events waiting in the queue (the request out to the master not counted).
    pub queued: usize,
    /// Events the master acknowledged.
    pub delivered: u64,
    /// Events dropped: the oldest when the queue was full, events the master kept
    /// refusing, and events the bus lost before the forwarder read them.
    pub dropped: u64,
}

struct State {
    queue: VecDeque<Pending>,
    /// The request channel of the master link, while it is up.
    link: Option<Arc<Channel>>,
    /// Changes whenever the link is attached or detached: a request sent on one link is
    /// abandoned when the link changes.
    epoch: u64,
    /// Events of the request out to the master (or waiting to be sent again).
    in_flight: usize,
    delivered: u64,
    dropped: u64,
    /// Dropped for a full queue since the last log line.
    unlogged: u64,
    last_log: Option<Instant>,
}

/// The queue between the minion bus and the master, with its sender.
pub struct Forwarder {
    id: String,
    capacity: usize,
    state: Mutex<State>,
    cv: Condvar,
}

impl Forwarder {
    /// A forwarder for minion `id` holding at most `capacity` (at least 1) events.
    pub fn new(id: &str, capacity: usize) -> Forwarder {
        Forwarder {
            id: id.to_owned(),
            capacity: capacity.max(1),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                link: None,
                epoch: 0,
                in_flight: 0,
                delivered: 0,
                dropped: 0,
                unlogged: 0,
                last_log: None,
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        let st = self.lock();
        Stats {
            queued: st.queue.len(),
            delivered: st.delivered,
            dropped: st.dropped,
        }
    }

    /// Whether a master link is attached.
    pub fn connected(&self) -> bool {
        self.lock().link.is_some()
    }

    /// The master link is up (after its start events): queued events go over `channel`,
    /// a request its own socket so job returns never wait behind a batch of events. A
    /// request left unanswered on the previous link is sent again on this one.
    pub fn attach(&self, channel: Arc<Channel>) {
        let mut st = self.lock();
        st.link = Some(channel);
        st.epoch += 1;
        drop(st);
        self.cv.notify_all();
    }

    /// The master link is down: events wait (and the request out is abandoned) until the
    /// next [`attach`](Self::attach).
    pub fn detach(&self) {
        let mut st = self.lock();
        st.link = None;
        st.epoch += 1;
        drop(st);
        self.cv.notify_all();
    }

    fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Queues `events` (already parsed).
    fn enqueue(&self, events: &[Pending]) {
        let mut st = self.lock();
        st.queue.extend(events.iter().cloned());
        self.trim(&mut st);
        drop(st);
        self.cv.notify_one();
    }

    /// Drops the oldest events beyond the capacity, counting and (rate-limited) logging.
    fn trim(&self, st: &mut State) {
        let over = st.queue.len().saturating_sub(self.capacity);
        if over == 0 {
            return;
        }
        st.queue.drain(..over);
        st.dropped += over as u64;
        st.unlogged += over as u64;
        if st.last_log.is_none_or(|t| t.elapsed() >= DROP_LOG_INTERVAL) {
            self.log_drops(st);
        }
    }

    fn log_drops(&self, st: &mut State) {
        if st.unlogged > 0 {
            tracing::warn!(
                "The fire_master queue is full (fire_master_queue_size: {}): dropped the {} oldest events waiting for the master ({} dropped in all)",
                self.capacity,
                st.unlogged,
                st.dropped
            );
            st.unlogged = 0;
            st.last_log = Some(Instant::now());
        }
    }

    /// Counts events the bus lost before they were read.
    fn lost(&self, n: u64) {
        self.lock().dropped += n;
    }

    /// Waits until a link is up and, unless `resend`, events are queued; then takes one
    /// request's worth (nothing when `resend`), with the link and its epoch. `None` when
    /// `stop` fired.
    fn next_batch(&self, stop: &Shutdown, resend: bool) -> Option<Batch> {
        let mut st = self.lock();
        loop {
            if stop.is_stopped() {
                return None;
            }
            if let Some(link) = st.link.clone().filter(|_| resend || !st.queue.is_empty()) {
                if st.unlogged > 0 {
                    self.log_drops(&mut st);
                }
                let events = if resend {
                    Vec::new()
                } else {
                    take_batch(&mut st.queue, MAX_BATCH_EVENTS, MAX_BATCH_BYTES)
                };
                if !resend {
                    st.in_flight = events.len();
                }
                return Some(Batch {
                    events,
                    link,
                    epoch: st.epoch,
                });
            }
            st = self
                .cv
                .wait_timeout(st, WAIT_SLICE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Sends queued events over the attached link until `stop` fires: one request at a
    /// time, in order, each carrying what queued up while the previous one was out. A
    /// request that was not answered is sent again (on the next link when the link
    /// changed: after a failover, the new master gets it); one the master answered
    /// unusably [`MAX_REPLY_FAILURES`] times is dropped.
    pub fn run_sender(&self, stop: &Shutdown) {
        let mut pending: Option<EncodedLoad> = None;
        let mut reply_failures = 0;
        while let Some(batch) = self.next_batch(stop, pending.is_some()) {
            let load = match pending.take() {
                Some(load) => load,
                None => encode_request(&self.id, &batch.events, chrono::Utc::now().timestamp()),
            };
            let n = self.lock().in_flight;
            tracing::debug!("Forwarding {n} events to the master");
            let abort = || stop.is_stopped() || self.epoch() != batch.epoch;
            match batch
                .link
                .send_encoded_until(&load, FIRE_MASTER_TIMEOUT, 1, &abort)
            {
                Ok(_) => {
                    reply_failures = 0;
                    let mut st = self.lock();
                    st.delivered += n as u64;
                    st.in_flight = 0;
                }
                Err(Error::Interrupted | Error::Stopped) => pending = Some(load),
                Err(e @ Error::Reply(_)) => {
                    reply_failures += 1;
                    if reply_failures >= MAX_REPLY_FAILURES {
                        reply_failures = 0;
                        let mut st = self.lock();
                        st.dropped += n as u64;
                        st.in_flight = 0;
                        tracing::error!("The master answered {MAX_REPLY_FAILURES} requests carrying {n} forwarded events unusably ({e}); these events are dropped");
                    } else {
                        pending = Some(load);
                        self.pause(stop, batch.epoch);
                    }
                }
                Err(e) => {
                    tracing::info!("fire_master failed: master could not be contacted ({e}); the request with {n} events will be sent again");
                    pending = Some(load);
                    self.pause(stop, batch.epoch);
                }
            }
        }
    }

    /// Waits [`RETRY_WAIT`] after a failed request, or less when `stop` fires or the link
    /// changes from the one of `epoch` (a new master is worth trying at once).
    fn pause(&self, stop: &Shutdown, epoch: u64) {
        let deadline = Instant::now() + RETRY_WAIT;
        let mut st = self.lock();
        while st.epoch == epoch && !stop.is_stopped() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = self
                .cv
                .wait_timeout(st, left.min(WAIT_SLICE))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Logs what is still queued when the minion stops (the queue lives in memory).
    pub fn abandon(&self) {
        let st = self.lock();
        let left = st.queue.len() + st.in_flight;
        if left > 0 {
            tracing::warn!(
                "{left} events forwarded with fire_master never reached the master and are lost at shutdown"
            );
        }
    }
}

/// One request's worth of events and the link to send it on.
struct Batch {
    events: Vec<Pending>,
    link: Arc<Channel>,
    epoch: u64,
}

/// Queues what a `fire_master` bus event holds on every one of `forwarders` (one per
/// master the minion is connected to at once: every master gets the event); a malformed
/// event is logged and dropped.
pub fn offer(forwarders: &[Arc<Forwarder>], event: &Event) {
    let parsed = match parse(event.data()) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("Not forwarding {} event to the master: {e}", event.tag());
            return;
        }
    };
    for why in &parsed.skipped {
        tracing::warn!(
            "Not forwarding an event of {} to the master: {why}",
            event.tag()
        );
    }
    if parsed.events.is_empty() {
        return;
    }
    for forwarder in forwarders {
        forwarder.enqueue(&parsed.events);
    }
}

/// Queues the data of a `fire_master` event ([`parse`]'s forms) on every one of
/// `forwarders`, as [`offer`] queues one read off the minion bus: the way the minion's
/// own code (the `master_bus` returner) fires to the master(s). The error says why
/// nothing of it can be sent.
pub fn offer_data(forwarders: &[Arc<Forwarder>], data: &Value) -> Result<(), Error> {
    let parsed = parse(data)?;
    for forwarder in forwarders {
        forwarder.enqueue(&parsed.events);
    }
    Ok(())
}

/// Starts the thread that reads the minion bus until `cancel`, queueing every
/// `fire_master` event on each of `forwarders`.
///
/// `rx` is lossless (a sender flooding the minion's pull socket waits for this thread), so
/// no event is lost before it is queued. It runs on its own thread (with its own small
/// runtime) rather than beside the bus on the daemon's runtime, so a flood that keeps that
/// runtime busy does not hold the senders back further.
pub fn start_collector(
    forwarders: Vec<Arc<Forwarder>>,
    rx: Subscription,
    cancel: CancellationToken,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("fire_master-bus".into())
        .spawn(move || rt.block_on(collect(forwarders, rx, cancel)))
}

/// Reads the minion bus until `cancel`, queueing every `fire_master` event.
async fn collect(forwarders: Vec<Arc<Forwarder>>, mut rx: Subscription, cancel: CancellationToken) {
    loop {
        let got = tokio::select! {
            _ = cancel.cancelled() => return,
            got = rx.recv() => got,
        };
        match got {
            Ok(event) if event.tag().starts_with(FIRE_MASTER_TAG) => offer(&forwarders, &event),
            Ok(_) => {}
            Err(RecvError::Lagged(n)) => {
                tracing::warn!("The minion bus outran the fire_master forwarder: {n} events were lost before they could be queued");
                for forwarder in &forwarders {
                    forwarder.lost(n);
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{map, s};

    fn single(data: Value, tag: Value) -> Value {
        map([
            ("data", data),
            ("tag", tag),
            ("events", Value::Nil),
            ("pretag", Value::Nil),
        ])
    }

    fn listed(events: Vec<Value>, pretag: Value) -> Value {
        map([
            ("id", s("m1")),
            ("events", Value::Array(events)),
            ("tag", Value::Nil),
            ("pretag", pretag),
            ("data", Value::Nil),
        ])
    }

    fn one(tag: &str) -> Pending {
        Pending::Single {
            tag: tag.into(),
            data: value::encode(&map([("n", s(tag))])),
            alone: false,
        }
    }

    /// The load as a value: the entries of an [`EncodedLoad`] decoded into a map.
    fn decoded(load: &EncodedLoad) -> Value {
        let mut bytes = Vec::new();
        let _ = rmp::encode::write_map_len(&mut bytes, load.len);
        bytes.extend_from_slice(&load.entries);
        value::decode(&bytes).unwrap()
    }

    #[test]
    fn single_form_is_read_as_salts_fire_master_prepare() {
        let enc = |v: Value| value::encode(&v);
        for (data, tag, want) in [
            (
                map([("k", s("v"))]),
                s("mytag"),
                Pending::Single {
                    tag: "mytag".into(),
                    data: enc(map([("k", s("v"))])),
                    alone: false,
                },
            ),
            (
                s("message"),
                s("t"),
                Pending::Single {
                    tag: "t".into(),
                    data: enc(s("message")),
                    alone: false,
                },
            ),
            (
                Value::Nil,
                s("t"),
                Pending::Single {
                    tag: "t".into(),
                    data: enc(Value::Map(vec![])),
                    alone: false,
                },
            ),
            (
                s(""),
                s("salt/job/1/new"),
                Pending::Single {
                    tag: "salt/job/1/new".into(),
                    data: enc(Value::Map(vec![])),
                    alone: true,
                },
            ),
            (
                map([("message", s("boom"))]),
                s("_salt_error"),
                Pending::Single {
                    tag: "_salt_error".into(),
                    data: enc(map([("message", s("boom"))])),
                    alone: true,
                },
            ),
        ] {
            let parsed = parse(&single(data, tag)).unwrap();
            assert_eq!(parsed.events, [want]);
        }
    }

    #[test]
    fn list_form_keeps_good_elements_and_names_the_bad_ones() {
        let good = map([("message", s("a drop")), ("tag", s("mytag"))]);
        let with_data = map([("tag", s("t2")), ("data", map([("x", Value::from(1))]))]);
        let parsed = parse(&listed(
            vec![
                good.clone(),
                s("not a map"),
                map([("message", s("no tag"))]),
                map([("tag", s(""))]),
                map([("tag", s("t")), ("data", s("not a map"))]),
                with_data.clone(),
            ],
            s("pre"),
        ))
        .unwrap();
        assert_eq!(
            parsed.events,
            [
                Pending::Listed {
                    pretag: Some("pre".into()),
                    event: value::encode(&good)
                },
                Pending::Listed {
                    pretag: Some("pre".into()),
                    event: value::encode(&with_data)
                },
            ]
        );
        assert_eq!(parsed.skipped.len(), 4);
        assert!(parsed.skipped[0].starts_with("events[1] is not a map"));
        assert!(parsed.skipped[1].starts_with("events[2] has no tag"));
    }

    #[test]
    fn events_salt_cannot_send_are_refused() {
        for (data, why) in [
            (
                map([("tag", s("t")), ("data", s("x"))]),
                "lacks events, pretag",
            ),
            (single(Value::Nil, Value::Nil), "neither events nor a tag"),
            (single(s("x"), Value::from(5)), "is not a string"),
            (single(s("x"), s("a\n\nb")), "is not a string"),
            (
                map([
                    ("events", map([("tag", s("t"))])),
                    ("tag", Value::Nil),
                    ("data", Value::Nil),
                    ("pretag", Value::Nil),
                ]),
                "events is not a list",
            ),
            (
                listed(vec![map([("tag", s("t"))])], Value::from(1)),
                "pretag",
            ),
        ] {
            let err = parse(&data).unwrap_err().to_string();
            assert!(err.contains(why), "{err} (wanted {why})");
        }
    }

    #[test]
    fn an_empty_events_list_falls_back_to_the_single_form() {
        let mut data = single(s("x"), s("t"));
        value::set(&mut data, "events", Value::Array(vec![]));
        assert_eq!(parse(&data).unwrap().events.len(), 1);
    }

    #[test]
    fn one_single_event_is_sent_exactly_as_salt_sends_it() {
        let load = encode_request("m1", &[one("mytag")], 7);
        assert_eq!(
            decoded(&load),
            map([
                ("id", s("m1")),
                ("cmd", s("_minion_event")),
                ("pretag", Value::Nil),
                ("data", map([("n", s("mytag"))])),
                ("tag", s("mytag")),
            ])
        );
    }

    #[test]
    fn batched_single_events_carry_the_data_a_master_fires_for_the_single_form() {
        let listed_event = map([("message", s("m")), ("tag", s("l"))]);
        let load = encode_request(
            "m1",
            &[
                one("a"),
                Pending::Listed {
                    pretag: None,
                    event: value::encode(&listed_event),
                },
            ],
            1_795_341_446,
        );
        assert_eq!(
            decoded(&load),
            map([
                ("id", s("m1")),
                ("cmd", s("_minion_event")),
                ("pretag", Value::Nil),
                (
                    "events",
                    Value::Array(vec![
                        map([
                            ("tag", s("a")),
                            (
                                "data",
                                map([
                                    ("id", s("m1")),
                                    ("cmd", s("_minion_event")),
                                    ("pretag", Value::Nil),
                                    ("data", map([("n", s("a"))])),
                                    ("tag", s("a")),
                                    ("ts", Value::from(1_795_341_446)),
                                ])
                            ),
                        ]),
                        listed_event,
                    ])
                ),
            ])
        );
    }

    #[test]
    fn a_pretagged_list_keeps_its_pretag() {
        let ev = Pending::Listed {
            pretag: Some("syndic/x".into()),
            event: value::encode(&map([("tag", s("t"))])),
        };
        let load = decoded(&encode_request("m1", &[ev], 1));
        assert_eq!(value::get_str(&load, "pretag"), Some("syndic/x"));
        assert_eq!(
            value::get(&load, "events"),
            Some(&Value::Array(vec![map([("tag", s("t"))])]))
        );
    }

    #[test]
    fn batches_stop_at_limits_and_at_events_that_cannot_share_a_request() {
        let pre = |p: &str| Pending::Listed {
            pretag: Some(p.into()),
            event: value::encode(&map([("tag", s("t"))])),
        };
        let none = Pending::Listed {
            pretag: None,
            event: value::encode(&map([("tag", s("t"))])),
        };
        let alone = Pending::Single {
            tag: "salt/key".into(),
            data: value::encode(&Value::Map(vec![])),
            alone: true,
        };
        let lens = |events: Vec<Pending>, max_events: usize, max_bytes: usize| {
            let mut q: VecDeque<Pending> = events.into();
            let mut lens = Vec::new();
            while !q.is_empty() {
                lens.push(take_batch(&mut q, max_events, max_bytes).len());
            }
            lens
        };
        let size = one("a").size();
        // Single events and unpretagged list events share requests.
        assert_eq!(
            lens(vec![one("a"), none.clone(), one("b")], 10, 1 << 20),
            [3]
        );
        assert_eq!(lens(vec![one("a"); 5], 2, 1 << 20), [2, 2, 1]);
        assert_eq!(lens(vec![one("a"); 5], 10, 2 * size + 1), [2, 2, 1]);
        // An event larger than the byte limit still goes.
        assert_eq!(lens(vec![one("a")], 10, 5), [1]);
        assert_eq!(
            lens(vec![one("a"), alone.clone(), alone, one("b")], 10, 1 << 20),
            [1, 1, 1, 1]
        );
        assert_eq!(
            lens(
                vec![pre("x"), pre("x"), pre("y"), one("a"), none],
                10,
                1 << 20
            ),
            [2, 1, 2]
        );
    }

    #[test]
    fn only_salt_tags_are_matched_against_the_blacklist() {
        for (tag, want) in [
            ("salt/job/20240101/new", true),
            ("salt/key", true),
            ("salt/run/1/ret", true),
            ("salt/minion/m1/start", false),
            ("mytag", false),
            ("salt/job/1/ret/m1", false),
        ] {
            assert_eq!(blacklisted(tag), want, "{tag}");
        }
    }

    fn bus_event(tag: &str, data: Value) -> Event {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let sockets = halite_bus::BusSockets::minion(dir.path(), "sha256", "m1").unwrap();
            let server = halite_bus::BusServer::bind(&sockets, 1 << 20)
                .await
                .unwrap();
            let bus = server.handle();
            let mut rx = bus.subscribe();
            bus.fire(tag, data).unwrap();
            let ev = rx.recv().await.unwrap();
            (*ev).clone()
        })
    }

    #[test]
    fn a_full_queue_drops_the_oldest_events_and_counts_them() {
        let fwd = Arc::new(Forwarder::new("m1", 3));
        for i in 0..5 {
            offer(
                std::slice::from_ref(&fwd),
                &bus_event("fire_master", single(map([("i", Value::from(i))]), s("t"))),
            );
        }
        assert_eq!(
            fwd.stats(),
            Stats {
                queued: 3,
                delivered: 0,
                dropped: 2
            }
        );
        let mut st = fwd.lock();
        let kept: Vec<Value> = take_batch(&mut st.queue, 10, usize::MAX)
            .iter()
            .map(|p| match p {
                Pending::Single { data, .. } => value::decode(data).unwrap(),
                Pending::Listed { .. } => Value::Nil,
            })
            .collect();
        assert_eq!(
            kept,
            (2..5)
                .map(|i| map([("i", Value::from(i))]))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn malformed_bus_events_are_not_queued() {
        let fwd = Arc::new(Forwarder::new("m1", 10));
        let both = [fwd.clone(), fwd.clone()];
        offer(&both, &bus_event("fire_master", map([("tag", s("t"))])));
        offer(
            &both,
            &bus_event("fire_master", listed(vec![s("bad")], Value::Nil)),
        );
        assert_eq!(fwd.stats().queued, 0);
    }

    /// A request channel to a port nothing answers on.
    fn idle_channel(dir: &std::path::Path) -> Arc<Channel> {
        let cfg =
            halite_config::MinionConfig::from_yaml_str("id: m1\n", &dir.join("minion")).unwrap();
        let settings = Arc::new(crate::settings::Settings::from_config(&cfg).unwrap());
        let keys = Arc::new(crate::keys::MinionKeys::load_or_create(dir, 2048).unwrap());
        let ctx = zmq::Context::new();
        let uri = "tcp://127.0.0.1:9".to_owned();
        let auth = Arc::new(crate::auth::Auth::new(
            settings.clone(),
            keys,
            &ctx,
            uri.clone(),
            &Value::Map(vec![]),
            false,
            Arc::new(Shutdown::new()),
        ));
        let req = crate::transport::ReqSocket::new(&ctx, uri, &settings);
        Arc::new(Channel::new(auth, req))
    }

    #[test]
    fn the_sender_waits_for_a_link_and_for_events() {
        let dir = tempfile::tempdir().unwrap();
        let fwd = Arc::new(Forwarder::new("m1", 10));
        let stop = Arc::new(Shutdown::new());
        let (f, st) = (fwd.clone(), stop.clone());
        let waiter = std::thread::spawn(move || f.next_batch(&st, false).map(|b| b.events.len()));
        offer(
            std::slice::from_ref(&fwd),
            &bus_event("fire_master", single(s("x"), s("t"))),
        );
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "sent while disconnected");
        fwd.attach(idle_channel(dir.path()));
        assert_eq!(waiter.join().unwrap(), Some(1));
        // A request to send again needs only the link; it carries the link's epoch.
        let again = fwd.next_batch(&stop, true).unwrap();
        assert!(again.events.is_empty());
        assert_eq!(again.epoch, fwd.epoch());
        fwd.detach();
        assert!(!fwd.connected());
        assert_ne!(
            again.epoch,
            fwd.epoch(),
            "a request on the old link is abandoned"
        );
        stop.stop();
        assert!(fwd.next_batch(&stop, false).is_none());
    }

    #[test]
    fn a_failed_request_waits_less_when_the_link_changes() {
        let dir = tempfile::tempdir().unwrap();
        let fwd = Arc::new(Forwarder::new("m1", 10));
        let stop = Shutdown::new();
        let epoch = fwd.epoch();
        let f = fwd.clone();
        let channel = idle_channel(dir.path());
        let switch = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            f.attach(channel);
        });
        let start = Instant::now();
        fwd.pause(&stop, epoch);
        assert!(start.elapsed() < RETRY_WAIT, "{:?}", start.elapsed());
        switch.join().unwrap();
        let start = Instant::now();
        fwd.pause(&stop, fwd.epoch());
        assert!(start.elapsed() >= RETRY_WAIT);
    }

    #[test]
    fn every_forwarder_gets_each_event_once() {
        let (a, b) = (
            Arc::new(Forwarder::new("m1", 10)),
            Arc::new(Forwarder::new("m1", 10)),
        );
        offer(
            &[a.clone(), b.clone()],
            &bus_event(
                "fire_master",
                listed(
                    vec![map([("tag", s("t1"))]), map([("tag", s("t2"))])],
                    Value::Nil,
                ),
            ),
        );
        assert_eq!(a.stats().queued, 2);
        assert_eq!(b.stats().queued, 2);
    }
}
