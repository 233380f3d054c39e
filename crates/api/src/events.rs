//! `GET /events`: the master's event bus as Server-Sent Events, in salt-api's wire format
//! (`retry: 400`, then `tag: <tag>` and `data: {"data", "tag"}` per event, the keys in the
//! order stock's `iter_events(full=True)` gives them) with Halite's additions. The same
//! streams feed `/ws` ([`crate::ws`]), framed as salt-api's WebSocket messages ([`Wire`]).
//!
//!
//! * **Ids and resume.** Each event carries `id: <journal id>` from the master's event
//!   journal (a Halite master; `cachedir/events.redb`). A client that reconnects with
//!   `Last-Event-ID: N` (what `EventSource` does by itself) first gets every event after
//!   `N` from the journal, then the live stream, with no gap and no duplicate.
//! * **`?tag=<glob>`** keeps only the events whose tag matches (Python `fnmatch`; without
//!   it, every event, as stock). salt-api refuses every query parameter (400); this one is
//!   the only one accepted, and a token in the query is still refused.
//! * **Keep-alive** comments (`: keepalive`) every `sse_keepalive` seconds, so proxies keep
//!   quiet streams open.
//! * The stream ends when the token expires, is logged out through this API, or the master
//!   stops knowing it (asked every [`TOKEN_RECHECK`]); salt-api asks the master before
//!   every event.
//!
//! How: one upstream subscription (the [`Hub`]) reads the journal live from the time the
//! first client came, renders each event once, and broadcasts it; it disconnects when the
//! last client leaves. A client that falls behind the broadcast ring, or that resumes,
//! reads the journal itself from the id after its last until it meets the broadcast again,
//! then switches back: ids are contiguous, so "the next broadcast frame is my last id + 1"
//! proves nothing was skipped. In front of a stock master (no journal, or a journal socket
//! this process may not open) the hub reads the bus live and frames carry no `id:`.
//!
//! Deviation: a newline inside a tag (Salt refuses only `\n\n`) would break the `tag:`
//! line, so it is written there as a space; the `data` JSON carries the exact tag.
//!
//! # Events filtered by the caller's ACL (`rest_cherrypy: events_acl: true`)
//!
//! A Halite extension, off by default (stock shows every event to every valid token). When
//! on, a stream drops the events of jobs its session could not have started, decided by
//! `halite-acl` with the ACL the master applies to the session's token: the token's
//! `auth_list` when the master keeps ACLs in tokens (`keep_acl_in_token`), else the
//! `external_auth` entries of the token's backend for its `name` and `groups`
//! ([`halite_acl::EauthAcl::for_identity`], with `acl_regex_match` and `permissive_acl`);
//! a token whose backend is not configured gets an empty ACL. The rule ([`JobFilter`]):
//!
//! * `salt/job/<jid>/...` is shown when the ACL allows the job's function (`fun`, with its
//!   arguments: `arg`, else `fun_args`) on every minion the event is about: the minion id
//!   of the tag (`.../ret/<id>`, `.../prog/<id>/...`, any fifth tag part), else the event's
//!   `minions` list (`new`), else its `id`. This is [`halite_acl::Acl::check`] with those
//!   minions as the job's targets, no whitelist. A `new` event whose target reached no
//!   minion is shown when some entry allows the function (Salt's subset rule is then
//!   vacuously true).
//! * `salt/run/<jid>/...` and `salt/wheel/<jid>/...` are shown when the ACL allows the
//!   runner or wheel function (`fun` without its `runner.`/`wheel.` prefix) with its
//!   arguments (`fun_args`: the positional ones, and a trailing mapping as keywords), as
//!   [`halite_acl::Acl::check_spec`] decides for `@runner`, `@wheel` and `@<module>`
//!   entries.
//! * An event of these three families that names no function, or (`salt/job`) no minion,
//!   takes them from the `new` event of its jid that this stream saw (the last
//!   [`REMEMBERED_JOBS`] jobs); when that is unknown too it is dropped (fail closed).
//! * Every other event passes.
//!
//! The API has no minion data, so an entry whose target depends on grains, pillar or
//! addresses (`G@`, `P@`, `I@`, `J@`, `S@`, `R@`; and every `N@` once some nodegroup is
//! defined with such words) reaches no minion here, even negated: such entries show
//! nothing (fail closed), even where the master would allow the job. Globs, `E@`, `L@` and
//! nodegroups are otherwise decided from the minion id, as the master decides them. A dropped event still advances the stream's journal position,
//! so a resume does not send it either.

use crate::render::Format;
use crate::session::{unix_now, Session, Sessions};
use axum::body::Bytes;
use halite_acl::{Acl, EauthAcl, Matching, Request, SpecForm, Targets};
use halite_journal::{BusEvent, EventStream, MasterBus, Since, TagFilter};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_target::{CkMinions, EmptyCache, RegexCache};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// How often a stream asks the master whether its token is still valid.
pub const TOKEN_RECHECK: Duration = Duration::from_secs(30);

/// Frames the broadcast ring holds; a client further behind catches up from the journal.
pub const RING: usize = 4096;

/// Events a journal replay reads ahead of its stream.
const REPLAY_QUEUE: usize = 64;

/// Frames queued between a stream's task and its connection (the `out` channel of
/// [`serve`]): a client that stops reading holds at most this many frames here, plus what
/// the connection's own write buffer takes, and its task waits; the frames are shared with
/// the broadcast ring, not copies.
pub const CLIENT_QUEUE: usize = 16;

/// Jobs whose `new` event a filtering stream remembers (see the module docs).
pub const REMEMBERED_JOBS: usize = 1024;

/// How often an idle hub checks whether anybody still listens.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// Pause before the hub tries the master again.
const RETRY: Duration = Duration::from_secs(1);

/// The first bytes of every stream (salt-api's, joined to the first record).
pub const PREAMBLE: &str = "retry: 400\n";

/// The keep-alive comment.
pub const KEEPALIVE: &str = ": keepalive\n\n";

/// One event, rendered once for every client.
#[derive(Debug)]
pub struct Frame {
    /// The journal id, when the event came from the journal.
    pub id: Option<u64>,
    /// The tag (for `?tag=` filters).
    pub tag: String,
    /// `id: ...\n` (when known), `tag: ...\n`, `data: ...\n\n`.
    pub bytes: Bytes,
    /// Where `data: ` starts in `bytes`.
    data_at: usize,
    /// What the event says about its job, when it is a job event and the hub reads jobs
    /// (for [`JobFilter`]).
    pub job: Option<JobEvent>,
}

impl Frame {
    /// Renders a bus event; `jobs` also reads what it says about its job ([`JobEvent`]).
    pub fn of(ev: BusEvent, jobs: bool) -> Frame {
        let BusEvent { id, tag, data, .. } = ev;
        let job = if jobs {
            JobEvent::of(&tag, &data)
        } else {
            None
        };
        let doc = map([("data", data), ("tag", s(tag.clone()))]);
        let json = Format::Json.serialize(&doc);
        let json = String::from_utf8_lossy(&json);
        let id_line = id.map(|id| format!("id: {id}\n")).unwrap_or_default();
        // Exactly the record's size: the ring keeps thousands of these.
        let mut text = String::with_capacity(
            id_line.len() + "tag: \ndata: \n\n".len() + tag.len() + json.len(),
        );
        text.push_str(&id_line);
        text.push_str("tag: ");
        text.extend(
            tag.chars()
                .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
        );
        text.push('\n');
        let data_at = text.len();
        text.push_str("data: ");
        text.push_str(&json);
        text.push_str("\n\n");
        Frame {
            id,
            tag,
            bytes: Bytes::from(text),
            data_at,
            job,
        }
    }

    /// salt-api's WebSocket message for this event, `data: <json>\n\n`, after an
    /// `id: <journal id>\n` line when `ids` is asked for and the id is known.
    pub fn ws_text(&self, ids: bool) -> Bytes {
        let data = self.bytes.slice(self.data_at.min(self.bytes.len())..);
        match (ids, self.id) {
            (true, Some(id)) => {
                let mut text = format!("id: {id}\n").into_bytes();
                text.extend_from_slice(&data);
                Bytes::from(text)
            }
            _ => data,
        }
    }

    /// The bytes of this event on `wire`.
    fn on(&self, wire: Wire) -> Bytes {
        match wire {
            Wire::Sse => self.bytes.clone(),
            Wire::Ws { ids } => self.ws_text(ids),
        }
    }
}

/// How a stream frames its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `/events`: [`PREAMBLE`] first, then SSE records ([`Frame::bytes`]), keep-alive
    /// comments.
    Sse,
    /// `/ws`: one message per event ([`Frame::ws_text`]), nothing else; `ids` adds the
    /// `id:` lines (a Halite extension).
    Ws {
        /// Whether messages start with `id: <journal id>`.
        ids: bool,
    },
}

/// The shared upstream subscription (module docs).
pub struct Hub {
    bus: MasterBus,
    tx: broadcast::Sender<Arc<Frame>>,
    wake: Notify,
    journal: AtomicBool,
    jobs: bool,
    /// Connected upstream now.
    connected: AtomicBool,
    /// When the first stream subscribed while the hub was not connected: the hub then
    /// reads the journal from that moment, not from when its connection is made, so an
    /// event fired after a client's stream opened (its preamble sent) is never missed.
    wanted_since: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
}

impl Hub {
    /// A hub for `bus`; [`Hub::run`] drives it. With `jobs`, frames carry what their events
    /// say about jobs ([`Frame::job`]), for streams that filter by ACL.
    pub fn new(bus: MasterBus, jobs: bool) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(RING);
        Arc::new(Hub {
            bus,
            tx,
            wake: Notify::new(),
            journal: AtomicBool::new(false),
            jobs,
            connected: AtomicBool::new(false),
            wanted_since: std::sync::Mutex::new(None),
        })
    }

    /// A receiver of the frames from now on; wakes the hub if it sleeps.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Frame>> {
        let rx = self.tx.subscribe();
        if !self.connected.load(Ordering::Acquire) {
            self.wanted_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(chrono::Utc::now);
        }
        self.wake.notify_one();
        rx
    }

    /// The master bus the hub reads.
    pub fn bus(&self) -> &MasterBus {
        &self.bus
    }

    /// Whether the hub currently reads the journal (its frames have ids).
    pub fn has_ids(&self) -> bool {
        self.journal.load(Ordering::Relaxed)
    }

    /// Connects upstream while anybody listens, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            while self.tx.receiver_count() == 0 {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = shutdown.cancelled() => return,
                }
            }
            let since = self
                .wanted_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(chrono::Utc::now);
            let Some(mut stream) = self.connect(since).await else {
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => continue,
                    () = shutdown.cancelled() => return,
                }
            };
            self.connected.store(true, Ordering::Release);
            self.wanted_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            loop {
                tokio::select! {
                    ev = stream.recv() => match ev {
                        Ok(Some(ev)) => {
                            if self.tx.receiver_count() == 0 {
                                break;
                            }
                            let _ = self.tx.send(Arc::new(Frame::of(ev, self.jobs)));
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!("Event stream from the master failed: {e}");
                            break;
                        }
                    },
                    () = tokio::time::sleep(IDLE_CHECK) => {
                        if self.tx.receiver_count() == 0 {
                            break;
                        }
                    }
                    () = shutdown.cancelled() => return,
                }
            }
            self.connected.store(false, Ordering::Release);
            self.journal.store(false, Ordering::Relaxed);
        }
    }

    /// The journal from `since` (ids), else the bus live; `None` when neither answers.
    async fn connect(&self, since: chrono::DateTime<chrono::Utc>) -> Option<EventStream> {
        match self.bus.listen(TagFilter::All, Since::Time(since)).await {
            Ok(stream) => {
                self.journal.store(true, Ordering::Relaxed);
                return Some(stream.reconnecting(true));
            }
            Err(e) => tracing::debug!("No event journal ({e}); reading the bus live"),
        }
        match self.bus.listen(TagFilter::All, Since::Live).await {
            Ok(stream) => {
                self.journal.store(false, Ordering::Relaxed);
                Some(stream.reconnecting(true))
            }
            Err(e) => {
                tracing::debug!("Cannot listen to the master bus: {e}");
                None
            }
        }
    }
}

/// What one `/events` or `/ws` stream serves.
pub struct StreamSpec {
    /// `?tag=`.
    pub filter: TagFilter,
    /// `Last-Event-ID`: resume after this id.
    pub after: Option<u64>,
    /// The session the stream belongs to.
    pub session: Session,
    /// Keep-alive interval (SSE comments; `/ws` pings on its own).
    pub keepalive: Option<Duration>,
    /// The framing.
    pub wire: Wire,
    /// The ACL filter (`events_acl`), when on.
    pub acl: Option<JobFilter>,
}

/// Where a stream reads from.
enum Mode {
    /// The hub's broadcast.
    Live,
    /// Its own journal replay, until it meets the broadcast; `pending` is the first
    /// broadcast frame after a hole the replay must fill first.
    CatchUp {
        replay: Replay,
        pending: Option<Arc<Frame>>,
    },
}

/// A journal replay read by a task of its own, so that waiting for its next event can be
/// abandoned (for a keep-alive) without losing half a message; the task ends when this
/// is dropped.
struct Replay {
    rx: mpsc::Receiver<BusEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Replay {
    fn spawn(mut stream: EventStream) -> Replay {
        let (tx, rx) = mpsc::channel(REPLAY_QUEUE);
        let task = tokio::spawn(async move {
            while let Ok(Some(ev)) = stream.recv().await {
                if tx.send(ev).await.is_err() {
                    break;
                }
            }
        });
        Replay { rx, task }
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a stream's source gave.
enum Item {
    Broadcast(Result<Arc<Frame>, broadcast::error::RecvError>),
    /// The next replayed event; `None` when the replay ended.
    Replayed(Option<BusEvent>),
}

/// Why a stream task stops.
struct Stop;

/// What woke a stream task.
enum Wake {
    Item(Item),
    KeepAlive,
    Recheck,
    Stop,
}

/// One client's stream: frames go to `out` until the client goes, its token ends or
/// `shutdown`.
pub async fn serve(
    hub: Arc<Hub>,
    sessions: Arc<Sessions>,
    spec: StreamSpec,
    out: mpsc::Sender<Bytes>,
    shutdown: CancellationToken,
) {
    let mut task = Stream {
        rx: hub.subscribe(),
        hub,
        sessions,
        filter: spec.filter,
        last: spec.after,
        token: spec.session.token.clone(),
        out,
        wire: spec.wire,
        acl: spec.acl,
    };
    if spec.wire == Wire::Sse
        && task
            .send(Bytes::from_static(PREAMBLE.as_bytes()))
            .await
            .is_err()
    {
        return;
    }
    let mut mode = match spec.after {
        Some(id) => task.replay_from(id.saturating_add(1), None).await,
        None => Mode::Live,
    };
    let left = (spec.session.expire() - unix_now()).clamp(0.0, 1e9);
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(left);
    let mut keepalive = spec.keepalive.map(|every| {
        let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + TOKEN_RECHECK, TOKEN_RECHECK);
    let mut revocations = task.sessions.revocations();
    // Made once, not per event: a timer registered and cancelled for every event is a
    // measurable share of a busy stream's cost.
    let expiry = tokio::time::sleep_until(deadline);
    let stopping = shutdown.cancelled();
    tokio::pin!(expiry, stopping);
    loop {
        // Only cancel-safe waits in here; what they give is handled below.
        let wake = tokio::select! {
            item = next_item(&mut task.rx, &mut mode) => Wake::Item(item),
            () = tick(&mut keepalive) => Wake::KeepAlive,
            _ = recheck.tick() => Wake::Recheck,
            () = &mut expiry => Wake::Stop,
            () = &mut stopping => Wake::Stop,
        };
        let step = match wake {
            Wake::Item(item) => task.handle(item, &mut mode).await,
            Wake::KeepAlive => task.send(Bytes::from_static(KEEPALIVE.as_bytes())).await,
            Wake::Recheck => {
                task.sessions.forget(&task.token);
                match task.sessions.check(&task.token).await {
                    Ok(None) => Err(Stop),
                    _ => Ok(()),
                }
            }
            Wake::Stop => Err(Stop),
        };
        if step.is_err() {
            return;
        }
        let now = task.sessions.revocations();
        if now != revocations {
            revocations = now;
            if task.sessions.is_revoked(&task.token) {
                return;
            }
        }
    }
}

/// The next keep-alive tick; never, without keep-alives.
async fn tick(keepalive: &mut Option<tokio::time::Interval>) {
    match keepalive {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The next item of the stream's source (cancel-safe).
async fn next_item(rx: &mut broadcast::Receiver<Arc<Frame>>, mode: &mut Mode) -> Item {
    match mode {
        Mode::Live => Item::Broadcast(rx.recv().await),
        Mode::CatchUp { replay, .. } => Item::Replayed(replay.rx.recv().await),
    }
}

struct Stream {
    hub: Arc<Hub>,
    rx: broadcast::Receiver<Arc<Frame>>,
    sessions: Arc<Sessions>,
    filter: TagFilter,
    /// The last journal id handled (sent or filtered out).
    last: Option<u64>,
    token: String,
    out: mpsc::Sender<Bytes>,
    wire: Wire,
    acl: Option<JobFilter>,
}

impl Stream {
    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        self.out.send(bytes).await.map_err(|_| Stop)
    }

    /// Sends `frame` if it passes the filters; it is handled either way.
    async fn deliver(&mut self, frame: &Frame) -> Result<(), Stop> {
        if let Some(id) = frame.id {
            self.last = Some(id);
        }
        if let (Some(acl), Some(job)) = (&mut self.acl, &frame.job) {
            acl.observe(job);
        }
        if !self.filter.matches(&frame.tag) {
            return Ok(());
        }
        if let (Some(acl), Some(job)) = (&self.acl, &frame.job) {
            if !acl.allows(job) {
                return Ok(());
            }
        }
        self.send(frame.on(self.wire)).await
    }

    /// Catch-up from journal id `from`, or live when the journal cannot be read.
    async fn replay_from(&mut self, from: u64, pending: Option<Arc<Frame>>) -> Mode {
        match self.hub.bus().listen(TagFilter::All, Since::Id(from)).await {
            Ok(stream) => Mode::CatchUp {
                replay: Replay::spawn(stream),
                pending,
            },
            Err(e) => {
                tracing::warn!("Cannot replay events from id {from}: {e}; streaming live");
                Mode::Live
            }
        }
    }

    /// Handles what the source gave.
    async fn handle(&mut self, item: Item, mode: &mut Mode) -> Result<(), Stop> {
        match item {
            Item::Broadcast(Ok(frame)) => {
                if let (Some(id), Some(last)) = (frame.id, self.last) {
                    if id <= last {
                        return Ok(());
                    }
                    if id > last + 1 {
                        *mode = self.replay_from(last + 1, Some(frame)).await;
                        return Ok(());
                    }
                }
                self.deliver(&frame).await
            }
            Item::Broadcast(Err(broadcast::error::RecvError::Lagged(missed))) => {
                match self.last.filter(|_| self.hub.has_ids()) {
                    Some(last) => {
                        tracing::info!(
                            "An /events client fell {missed} events behind; catching up from \
                             the journal at id {}",
                            last + 1
                        );
                        *mode = self.replay_from(last + 1, None).await;
                    }
                    None => tracing::warn!("An /events client missed {missed} events"),
                }
                Ok(())
            }
            Item::Broadcast(Err(broadcast::error::RecvError::Closed)) => Err(Stop),
            Item::Replayed(None) => {
                tracing::warn!("Event journal replay ended; streaming live");
                let held = match std::mem::replace(mode, Mode::Live) {
                    Mode::CatchUp { pending, .. } => pending,
                    Mode::Live => None,
                };
                match held {
                    Some(frame) => self.deliver(&frame).await,
                    None => Ok(()),
                }
            }
            Item::Replayed(Some(ev)) => {
                if let (Some(id), Some(last)) = (ev.id, self.last) {
                    if id <= last {
                        return Ok(());
                    }
                }
                self.deliver(&Frame::of(ev, self.hub.jobs)).await?;
                self.meet_broadcast(mode).await
            }
        }
    }

    /// After a replayed event: switches to the broadcast when its next frame is the one
    /// right after the last handled (ids are contiguous, so nothing was skipped).
    async fn meet_broadcast(&mut self, mode: &mut Mode) -> Result<(), Stop> {
        let Some(last) = self.last else {
            return Ok(());
        };
        let Mode::CatchUp { pending, .. } = mode else {
            return Ok(());
        };
        loop {
            let next = match pending.take() {
                Some(p) => p,
                None => match self.rx.try_recv() {
                    Ok(f) => f,
                    Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => return Ok(()),
                },
            };
            match next.id {
                Some(id) if id <= last => {}
                Some(id) if id == last + 1 => {
                    *mode = Mode::Live;
                    return self.deliver(&next).await;
                }
                Some(_) => {
                    *pending = Some(next);
                    return Ok(());
                }
                None => return Ok(()),
            }
        }
    }
}

/// The three families of job events [`JobFilter`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobKind {
    /// `salt/job/<jid>/...`: jobs published to minions.
    Job,
    /// `salt/run/<jid>/...`: runners.
    Run,
    /// `salt/wheel/<jid>/...`: wheel functions.
    Wheel,
}

/// What an event of a job family says about its job, read once by the hub.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEvent {
    /// The family.
    pub kind: JobKind,
    /// The tag's third part (may be empty on a malformed tag).
    pub jid: String,
    /// Whether the tag is `<family>/<jid>/new`.
    pub new: bool,
    /// `fun` (a string or a list of strings), without the `runner.`/`wheel.` prefix.
    pub fun: Option<Value>,
    /// `arg`, else `fun_args`, when a list.
    pub arg: Option<Value>,
    /// (`salt/job` only) the minions the event is about: the tag's fifth part, else the
    /// `minions` list, else `id`.
    pub minions: Option<Vec<String>>,
}

impl JobEvent {
    /// The job information of an event, `None` when its tag is not of a job family.
    pub fn of(tag: &str, data: &Value) -> Option<JobEvent> {
        let mut parts = tag.split('/');
        if parts.next() != Some("salt") {
            return None;
        }
        let kind = match parts.next() {
            Some("job") => JobKind::Job,
            Some("run") => JobKind::Run,
            Some("wheel") => JobKind::Wheel,
            _ => return None,
        };
        let jid = parts.next()?.to_owned();
        let new = parts.next() == Some("new") && parts.clone().next().is_none();
        let fourth_part_minion = tag.split('/').nth(4).filter(|p| !p.is_empty());
        let prefix = match kind {
            JobKind::Job => "",
            JobKind::Run => "runner.",
            JobKind::Wheel => "wheel.",
        };
        let fun = value::get(data, "fun").map(|f| match value::str_of(f) {
            Some(text) => s(text.strip_prefix(prefix).unwrap_or(text)),
            None => f.clone(),
        });
        let arg = ["arg", "fun_args"]
            .iter()
            .filter_map(|k| value::get(data, k))
            .find(|v| matches!(v, Value::Array(_)))
            .cloned();
        let minions = match kind {
            JobKind::Job => match (fourth_part_minion, value::get(data, "minions")) {
                (Some(id), _) => Some(vec![id.to_owned()]),
                (None, Some(Value::Array(ids))) => ids
                    .iter()
                    .map(|i| value::str_of(i).map(str::to_owned))
                    .collect(),
                (None, _) => value::get_str(data, "id").map(|id| vec![id.to_owned()]),
            },
            JobKind::Run | JobKind::Wheel => None,
        };
        Some(JobEvent {
            kind,
            jid,
            new,
            fun,
            arg,
            minions,
        })
    }
}

/// What the ACL filter needs from the master config, read once (see the module docs).
pub struct AclSettings {
    matching: Matching,
    keep_acl_in_token: bool,
    backends: Vec<(String, EauthAcl)>,
    nodegroups: Option<Value>,
    /// Whether some nodegroup is defined with a data-dependent word.
    data_nodegroups: bool,
    regexes: RegexCache,
}

impl AclSettings {
    /// Reads `external_auth`, `acl_regex_match`, `permissive_acl`, `keep_acl_in_token` and
    /// `nodegroups` from the master config.
    ///
    /// # Errors
    /// A message naming the option when `acl_regex_match` or `permissive_acl` has a value
    /// the master refuses too.
    pub fn from_master(cfg: &halite_config::MasterConfig) -> Result<AclSettings, String> {
        let matching =
            Matching::from_config_value(cfg.get("acl_regex_match").unwrap_or(&Value::Nil))
                .map_err(|e| e.to_string())?;
        let flag = |name: &str| match cfg.get(name) {
            None | Some(Value::Nil) => Ok(false),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(format!("{name} must be True or False, not {other}")),
        };
        let permissive = flag("permissive_acl")?;
        let keep_acl_in_token = flag("keep_acl_in_token")?;
        let mut backends = Vec::new();
        if let Some(Value::Map(entries)) = cfg.get("external_auth") {
            for (name, acl) in entries {
                let Some(name) = value::str_of(name) else {
                    continue;
                };
                let label = format!("external_auth['{name}']");
                let (acl, _warnings) = EauthAcl::parse(acl, matching, &label);
                backends.push((name.to_owned(), acl.permissive(permissive)));
            }
        }
        let nodegroups = cfg.get("nodegroups").cloned();
        let data_nodegroups = nodegroups.as_ref().is_some_and(|groups| {
            let Value::Map(entries) = groups else {
                return false;
            };
            entries
                .iter()
                .any(|(_, words)| words_of(words).any(data_word))
        });
        Ok(AclSettings {
            matching,
            keep_acl_in_token,
            backends,
            nodegroups,
            data_nodegroups,
            regexes: RegexCache::default(),
        })
    }

    /// Settings that give every session an empty ACL (every job event dropped): what the
    /// API uses when the master config cannot be read for the filter.
    pub fn deny_all() -> AclSettings {
        AclSettings {
            matching: Matching::default(),
            keep_acl_in_token: false,
            backends: Vec::new(),
            nodegroups: None,
            data_nodegroups: false,
            regexes: RegexCache::default(),
        }
    }

    /// The ACL the master applies to a token with this data (`get_token`'s answer).
    pub fn acl_for(&self, token: &Value) -> Acl {
        if self.keep_acl_in_token {
            if let Some(list @ Value::Array(_)) = value::get(token, "auth_list") {
                return Acl::parse(list, self.matching, "token auth_list").0;
            }
        }
        let eauth = value::get_str(token, "eauth").unwrap_or("");
        let name = value::get(token, "name")
            .and_then(value::str_of)
            .unwrap_or("");
        let groups: Vec<&str> = match value::get(token, "groups") {
            Some(Value::Array(g)) => g.iter().filter_map(value::str_of).collect(),
            _ => Vec::new(),
        };
        match self.backends.iter().find(|(n, _)| n == eauth) {
            Some((_, acl)) => acl.for_identity(name, &groups),
            None => Acl::parse(&Value::Array(vec![]), self.matching, "").0,
        }
    }
}

/// The words of a compound target (a string split on whitespace, or a list of strings).
fn words_of(expr: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match expr {
        Value::Array(items) => Box::new(items.iter().filter_map(value::str_of)),
        other => Box::new(value::str_of(other).unwrap_or("").split_whitespace()),
    }
}

/// Whether a compound word matches on minion data the API does not have.
fn data_word(word: &str) -> bool {
    matches!(
        halite_target::parse_target(word).engine,
        Some('G' | 'P' | 'I' | 'J' | 'S' | 'R')
    )
}

/// Entry targets evaluated on minion ids alone (see the module docs).
struct IdTargets<'a> {
    settings: &'a AclSettings,
}

impl Targets for IdTargets<'_> {
    /// Never needed: the filter always gives a request's minions.
    fn expand(&self, _tgt: &Value, _tgt_type: &str) -> Vec<String> {
        Vec::new()
    }

    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        let nodegroup = |w: &str| halite_target::parse_target(w).engine == Some('N');
        if words_of(tgt).any(|w| data_word(w) || (self.settings.data_nodegroups && nodegroup(w))) {
            return candidates.first().map(String::as_str);
        }
        let accepted = BTreeSet::new();
        let ck = CkMinions {
            accepted: &accepted,
            cache: &EmptyCache,
            regexes: &self.settings.regexes,
            minion_data_cache: true,
            nodegroups: self.settings.nodegroups.as_ref(),
        };
        ck.first_outside(tgt, tgt_type, candidates)
    }
}

/// What a filtering stream remembers of a job's `new` event.
struct Remembered {
    fun: Option<Value>,
    arg: Option<Value>,
    minions: Option<Vec<String>>,
}

/// One stream's ACL filter (see the module docs for the rule).
pub struct JobFilter {
    settings: Arc<AclSettings>,
    acl: Acl,
    jobs: HashMap<(JobKind, String), Remembered>,
    order: VecDeque<(JobKind, String)>,
}

impl JobFilter {
    /// The filter of `session`.
    pub fn new(settings: Arc<AclSettings>, session: &Session) -> JobFilter {
        JobFilter {
            acl: settings.acl_for(&session.data),
            settings,
            jobs: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Remembers the job of a `new` event (every event is observed, shown or not).
    pub fn observe(&mut self, job: &JobEvent) {
        if !job.new {
            return;
        }
        let key = (job.kind, job.jid.clone());
        let remembered = Remembered {
            fun: job.fun.clone(),
            arg: job.arg.clone(),
            minions: job.minions.clone(),
        };
        if self.jobs.insert(key.clone(), remembered).is_none() {
            self.order.push_back(key);
            if self.order.len() > REMEMBERED_JOBS {
                if let Some(old) = self.order.pop_front() {
                    self.jobs.remove(&old);
                }
            }
        }
    }

    /// Whether the session may see this job event.
    pub fn allows(&self, job: &JobEvent) -> bool {
        let known = self.jobs.get(&(job.kind, job.jid.clone()));
        let Some(fun) = job.fun.as_ref().or(known.and_then(|k| k.fun.as_ref())) else {
            return false;
        };
        let empty = Value::Array(vec![]);
        let arg = job
            .arg
            .as_ref()
            .or(known.and_then(|k| k.arg.as_ref()))
            .unwrap_or(&empty);
        match job.kind {
            JobKind::Job => {
                let Some(minions) = job
                    .minions
                    .as_ref()
                    .or(known.and_then(|k| k.minions.as_ref()))
                else {
                    return false;
                };
                let tgt = Value::Array(minions.iter().map(|m| s(m.clone())).collect());
                let mut req = Request::new(fun, arg, &tgt, "list");
                req.minions = Some(minions);
                let targets = IdTargets {
                    settings: &self.settings,
                };
                self.acl.check(&req, &targets, &[]).allowed
            }
            JobKind::Run | JobKind::Wheel => {
                let Some(fun) = value::str_of(fun) else {
                    return false;
                };
                let form = if job.kind == JobKind::Run {
                    SpecForm::Runner
                } else {
                    SpecForm::Wheel
                };
                self.acl.check_spec(fun, form, &spec_kwarg(arg)).allowed
            }
        }
    }
}

/// `fun_args` as the `kwarg` of a spec check: `{"arg": positional, "kwarg": keywords}`,
/// the keywords being a trailing mapping.
fn spec_kwarg(fun_args: &Value) -> Value {
    let items: &[Value] = match fun_args {
        Value::Array(items) => items,
        _ => &[],
    };
    let (positional, keywords) = match items.split_last() {
        Some((last @ Value::Map(_), rest)) => (rest, last.clone()),
        _ => (items, Value::Map(vec![])),
    };
    map([
        ("arg", Value::Array(positional.to_vec())),
        ("kwarg", keywords),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: Option<u64>, tag: &str, data: Value) -> Frame {
        Frame::of(
            BusEvent {
                id,
                time: None,
                tag: tag.into(),
                data,
            },
            true,
        )
    }

    #[test]
    fn frames_are_salt_apis_records_with_an_id_line() {
        let f = frame(Some(7), "salt/job/1/new", map([("jid", s("1"))]));
        assert_eq!(
            std::str::from_utf8(&f.bytes).unwrap(),
            "id: 7\ntag: salt/job/1/new\ndata: {\"data\": {\"jid\": \"1\"}, \"tag\": \"salt/job/1/new\"}\n\n"
        );
        let f = frame(None, "a\nb", Value::Map(vec![]));
        assert_eq!(
            std::str::from_utf8(&f.bytes).unwrap(),
            "tag: a b\ndata: {\"data\": {}, \"tag\": \"a\\nb\"}\n\n"
        );
    }

    #[test]
    fn websocket_messages_are_the_data_line_with_an_optional_id_line() {
        let f = frame(Some(7), "t/1", map([("n", Value::from(1))]));
        let plain = "data: {\"data\": {\"n\": 1}, \"tag\": \"t/1\"}\n\n";
        assert_eq!(f.ws_text(false), plain.as_bytes());
        assert_eq!(f.ws_text(true), format!("id: 7\n{plain}").as_bytes());
        assert_eq!(f.on(Wire::Ws { ids: false }), plain.as_bytes());
        assert_eq!(f.on(Wire::Sse), f.bytes);
        let no_id = frame(None, "t/1", map([("n", Value::from(1))]));
        assert_eq!(no_id.ws_text(true), plain.as_bytes(), "no id, no id line");
    }

    #[test]
    fn job_events_name_their_function_arguments_and_minions() {
        let ret = frame(
            None,
            "salt/job/20240101/ret/web1",
            map([
                ("fun", s("test.arg")),
                ("fun_args", Value::Array(vec![s("x")])),
                ("id", s("other")),
            ]),
        );
        let job = ret.job.unwrap();
        assert_eq!(job.kind, JobKind::Job);
        assert_eq!(job.jid, "20240101");
        assert!(!job.new);
        assert_eq!(job.fun, Some(s("test.arg")));
        assert_eq!(job.arg, Some(Value::Array(vec![s("x")])));
        assert_eq!(job.minions, Some(vec!["web1".to_owned()]), "the tag wins");
        let new = JobEvent::of(
            "salt/job/1/new",
            &map([
                ("fun", s("test.ping")),
                ("arg", Value::Array(vec![])),
                ("minions", Value::Array(vec![s("a"), s("b")])),
            ]),
        )
        .unwrap();
        assert!(new.new);
        assert_eq!(new.minions, Some(vec!["a".to_owned(), "b".to_owned()]));
        let run = JobEvent::of("salt/run/2/ret", &map([("fun", s("runner.manage.up"))])).unwrap();
        assert_eq!((run.kind, run.fun), (JobKind::Run, Some(s("manage.up"))));
        let wheel =
            JobEvent::of("salt/wheel/3/new", &map([("fun", s("wheel.key.list_all"))])).unwrap();
        assert_eq!(wheel.fun, Some(s("key.list_all")));
        assert_eq!(JobEvent::of("salt/auth", &Value::Nil), None);
        assert_eq!(JobEvent::of("salt/key", &Value::Nil), None);
        assert_eq!(JobEvent::of("other/job/1/new", &Value::Nil), None);
        assert_eq!(JobEvent::of("salt/job", &Value::Nil), None);
    }

    /// A filter for a session of `user` under `external_auth: {file: <eauth>}`, with `extra`
    /// master options.
    fn filter(eauth: &str, extra: &str, token: Value) -> JobFilter {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("master"),
            format!("external_auth:\n  file:\n{eauth}{extra}"),
        )
        .unwrap();
        let cfg = halite_config::MasterConfig::load(dir.path()).unwrap();
        let settings = Arc::new(AclSettings::from_master(&cfg).unwrap());
        let session = Session {
            token: "ab".into(),
            data: token,
        };
        JobFilter::new(settings, &session)
    }

    fn token(name: &str) -> Value {
        map([
            ("name", s(name)),
            ("eauth", s("file")),
            ("expire", Value::F64(1e12)),
        ])
    }

    fn job(tag: &str, data: Value) -> JobEvent {
        JobEvent::of(tag, &data).unwrap()
    }

    const EAUTH: &str = "    alice: ['test.*', {'web*': ['cmd.run']}, '@jobs', {'@wheel': ['key.list_all']}]\n    bob: [test.ping]\n";

    #[test]
    fn returns_are_shown_when_the_acl_allows_their_function_on_their_minion() {
        let alice = filter(EAUTH, "", token("alice"));
        let bob = filter(EAUTH, "", token("bob"));
        let ret = |fun: &str, id: &str| {
            job(
                &format!("salt/job/1/ret/{id}"),
                map([("fun", s(fun)), ("fun_args", Value::Array(vec![]))]),
            )
        };
        assert!(alice.allows(&ret("test.version", "db1")));
        assert!(!bob.allows(&ret("test.version", "db1")));
        assert!(bob.allows(&ret("test.ping", "db1")));
        assert!(
            alice.allows(&ret("cmd.run", "web1")),
            "a target entry on its id"
        );
        assert!(
            !alice.allows(&ret("cmd.run", "db1")),
            "outside the entry's target"
        );
        let new = |minions: &[&str]| {
            job(
                "salt/job/2/new",
                map([
                    ("fun", s("cmd.run")),
                    ("arg", Value::Array(vec![s("ls")])),
                    (
                        "minions",
                        Value::Array(minions.iter().map(|m| s(*m)).collect()),
                    ),
                ]),
            )
        };
        assert!(alice.allows(&new(&["web1", "web2"])));
        assert!(
            !alice.allows(&new(&["web1", "db1"])),
            "every minion must be covered"
        );
        assert!(!bob.allows(&new(&["web1"])));
    }

    #[test]
    fn runner_and_wheel_events_follow_the_spec_entries() {
        let alice = filter(EAUTH, "", token("alice"));
        let bob = filter(EAUTH, "", token("bob"));
        let run = |fun: &str| job("salt/run/9/new", map([("fun", s(fun))]));
        assert!(alice.allows(&run("runner.jobs.list_jobs")), "@jobs");
        assert!(!alice.allows(&run("runner.manage.up")));
        assert!(!bob.allows(&run("runner.jobs.list_jobs")));
        let wheel = |fun: &str| job("salt/wheel/9/ret", map([("fun", s(fun))]));
        assert!(alice.allows(&wheel("wheel.key.list_all")));
        assert!(!alice.allows(&wheel("wheel.key.delete")));
    }

    #[test]
    fn events_without_a_function_take_it_from_the_remembered_new_event_or_are_dropped() {
        let mut bob = filter(EAUTH, "", token("bob"));
        let prog = job("salt/job/5/prog/m1/0", map([("return", s("x"))]));
        assert!(!bob.allows(&prog), "unknown job: dropped");
        let new = job(
            "salt/job/5/new",
            map([
                ("fun", s("test.ping")),
                ("minions", Value::Array(vec![s("m1")])),
            ]),
        );
        bob.observe(&new);
        assert!(bob.allows(&prog));
        let other = job(
            "salt/job/6/new",
            map([
                ("fun", s("cmd.run")),
                ("minions", Value::Array(vec![s("m1")])),
            ]),
        );
        bob.observe(&other);
        assert!(!bob.allows(&job("salt/job/6/prog/m1/0", Value::Map(vec![]))));
        for n in 0..REMEMBERED_JOBS {
            bob.observe(&job(
                &format!("salt/job/x{n}/new"),
                map([("fun", s("test.ping"))]),
            ));
        }
        assert!(!bob.allows(&prog), "the oldest job is forgotten");
        assert_eq!(bob.jobs.len(), REMEMBERED_JOBS);
    }

    #[test]
    fn entries_on_minion_data_show_nothing_and_nodegroups_of_ids_work() {
        let eauth = "    carol: [{'G@os:Debian': [test.ping]}, {'not G@role:db': [test.echo]}, \
                     {'N@webs': [test.arg]}, {'N@debs': [test.true]}]\n";
        let extra = "nodegroups:\n  webs: 'L@web1,web2'\n  debs: 'G@os:Debian'\n";
        let carol = filter(eauth, extra, token("carol"));
        let ret =
            |fun: &str, id: &str| job(&format!("salt/job/1/ret/{id}"), map([("fun", s(fun))]));
        assert!(!carol.allows(&ret("test.ping", "web1")));
        assert!(
            !carol.allows(&ret("test.echo", "web1")),
            "a negated grain fails closed"
        );
        assert!(
            !carol.allows(&ret("test.arg", "web1")),
            "some nodegroup uses grains"
        );
        let carol = filter(
            "    carol: [{'N@webs': [test.arg]}]\n",
            "nodegroups:\n  webs: 'L@web1,web2'\n",
            token("carol"),
        );
        assert!(carol.allows(&ret("test.arg", "web1")));
        assert!(!carol.allows(&ret("test.arg", "db1")));
    }

    #[test]
    fn the_token_auth_list_is_used_when_the_master_keeps_acls_in_tokens() {
        let mut data = token("bob");
        if let Value::Map(m) = &mut data {
            m.push((s("auth_list"), Value::Array(vec![s("grains.*")])));
        }
        let ret = job("salt/job/1/ret/m1", map([("fun", s("grains.items"))]));
        assert!(!filter(EAUTH, "", data.clone()).allows(&ret));
        assert!(filter(EAUTH, "keep_acl_in_token: true\n", data).allows(&ret));
        let stranger = map([("name", s("x")), ("eauth", s("pam"))]);
        assert!(!filter(EAUTH, "", stranger).allows(&ret), "no such backend");
        assert!(!JobFilter::new(
            Arc::new(AclSettings::deny_all()),
            &Session {
                token: "ab".into(),
                data: token("alice"),
            }
        )
        .allows(&ret));
    }
}
