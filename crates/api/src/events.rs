//! `GET /events`: the master's event bus as Server-Sent Events, in salt-api's wire format
//! (`retry: 400`, then `tag: <tag>` and `data: {"tag", "data"}` per event) with Halite's
//! additions:
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

use crate::render::Format;
use crate::session::{unix_now, Session, Sessions};
use axum::body::Bytes;
use halite_journal::{BusEvent, EventStream, MasterBus, Since, TagFilter};
use halite_proto::value::{map, s};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// How often a stream asks the master whether its token is still valid.
pub const TOKEN_RECHECK: Duration = Duration::from_secs(30);

/// Frames the broadcast ring holds; a client further behind catches up from the journal.
pub const RING: usize = 4096;

/// Frames queued for one client's connection before its task waits for the socket.
const CLIENT_QUEUE: usize = 64;

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
}

impl Frame {
    /// Renders a bus event.
    pub fn of(ev: BusEvent) -> Frame {
        let BusEvent { id, tag, data, .. } = ev;
        let mut text = String::with_capacity(tag.len() * 2 + 64);
        if let Some(id) = id {
            text.push_str(&format!("id: {id}\n"));
        }
        text.push_str("tag: ");
        text.extend(
            tag.chars()
                .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
        );
        text.push_str("\ndata: ");
        let doc = map([("tag", s(tag.clone())), ("data", data)]);
        text.push_str(&String::from_utf8_lossy(&Format::Json.serialize(&doc)));
        text.push_str("\n\n");
        Frame {
            id,
            tag,
            bytes: Bytes::from(text),
        }
    }
}

/// The shared upstream subscription (module docs).
pub struct Hub {
    bus: MasterBus,
    tx: broadcast::Sender<Arc<Frame>>,
    wake: Notify,
    journal: AtomicBool,
}

impl Hub {
    /// A hub for `bus`; [`Hub::run`] drives it.
    pub fn new(bus: MasterBus) -> Arc<Hub> {
        let (tx, _) = broadcast::channel(RING);
        Arc::new(Hub {
            bus,
            tx,
            wake: Notify::new(),
            journal: AtomicBool::new(false),
        })
    }

    /// A receiver of the frames from now on; wakes the hub if it sleeps.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Frame>> {
        let rx = self.tx.subscribe();
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
            let Some(mut stream) = self.connect().await else {
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => continue,
                    () = shutdown.cancelled() => return,
                }
            };
            loop {
                tokio::select! {
                    ev = stream.recv() => match ev {
                        Ok(Some(ev)) => {
                            if self.tx.receiver_count() == 0 {
                                break;
                            }
                            let _ = self.tx.send(Arc::new(Frame::of(ev)));
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
            self.journal.store(false, Ordering::Relaxed);
        }
    }

    /// The journal from now (ids), else the bus live; `None` when neither answers.
    async fn connect(&self) -> Option<EventStream> {
        match self
            .bus
            .listen(TagFilter::All, Since::Time(chrono::Utc::now()))
            .await
        {
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

/// What one `/events` stream serves.
pub struct StreamSpec {
    /// `?tag=`.
    pub filter: TagFilter,
    /// `Last-Event-ID`: resume after this id.
    pub after: Option<u64>,
    /// The session the stream belongs to.
    pub session: Session,
    /// Keep-alive interval.
    pub keepalive: Option<Duration>,
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
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
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
    };
    if task
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
    loop {
        // Only cancel-safe waits in here; what they give is handled below.
        let wake = tokio::select! {
            item = next_item(&mut task.rx, &mut mode) => Wake::Item(item),
            () = tick(&mut keepalive) => Wake::KeepAlive,
            _ = recheck.tick() => Wake::Recheck,
            () = tokio::time::sleep_until(deadline) => Wake::Stop,
            () = shutdown.cancelled() => Wake::Stop,
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
}

impl Stream {
    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        self.out.send(bytes).await.map_err(|_| Stop)
    }

    /// Sends `frame` if it passes the filter; it is handled either way.
    async fn deliver(&mut self, frame: &Frame) -> Result<(), Stop> {
        if let Some(id) = frame.id {
            self.last = Some(id);
        }
        if self.filter.matches(&frame.tag) {
            self.send(frame.bytes.clone()).await?;
        }
        Ok(())
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
                self.deliver(&Frame::of(ev)).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::Value;

    #[test]
    fn frames_are_salt_apis_records_with_an_id_line() {
        let f = Frame::of(BusEvent {
            id: Some(7),
            time: None,
            tag: "salt/job/1/new".into(),
            data: map([("jid", s("1"))]),
        });
        assert_eq!(
            std::str::from_utf8(&f.bytes).unwrap(),
            "id: 7\ntag: salt/job/1/new\ndata: {\"tag\": \"salt/job/1/new\", \"data\": {\"jid\": \"1\"}}\n\n"
        );
        let f = Frame::of(BusEvent {
            id: None,
            time: None,
            tag: "a\nb".into(),
            data: Value::Map(vec![]),
        });
        assert_eq!(
            std::str::from_utf8(&f.bytes).unwrap(),
            "tag: a b\ndata: {\"tag\": \"a\\nb\", \"data\": {}}\n\n"
        );
    }
}
