//! The bus daemon side: Salt's `PublishServer` / `PubServer` / `TCPPuller`
//! (`salt/transport/tcp.py`) used as the event publisher.
//!
//! Every event — read from the pull socket or fired in-process — goes into one
//! `tokio::sync::broadcast` channel of [`SUBSCRIBER_QUEUE_CAPACITY`] shared `Arc<Event>`s.
//! Each pub-socket subscriber is a task holding a receiver and writing
//! [`Event::frame`] to its socket; in-process subscribers hold receivers directly.
//!
//! No event is lost to a subscriber that has just connected. A client's `connect` returns
//! once the kernel has queued the connection, before the bus accepts it, and Salt's
//! clients (`LocalClient`, salt-api) connect, then publish a job and wait for its events:
//! if the bus sent the job's return before it accepted the connection, the client would
//! miss it. So publishing first takes in every queued pub-socket connection (a
//! non-blocking `accept` under the lock the publish holds) and subscribes it, then sends;
//! the accept task only wakes for connections that arrive while nothing is published.
//!
//! Backpressure choice: load shedding, per subscriber, never silent: a pub-socket
//! subscriber that lost events gets a [`GAP_TAG`] event with their count right before the
//! next event it does get. Sending into the channel never
//! waits, so neither the pull readers nor [`BusHandle::fire`] can be stalled by a
//! subscriber. A subscriber whose backlog exceeds the capacity loses its *oldest* pending
//! events (the broadcast channel overwrites them) and keeps receiving from the oldest one
//! still held. Salt instead queues up to 10000 writes per subscriber and disconnects one
//! whose writes stall for 60 s; Halite never disconnects a slow reader, and a reader that
//! catches up sees the newest events rather than stale ones.
//!
//! Memory is bounded in bytes as well as in events:
//! - A pub-socket subscriber that falls more than [`SUBSCRIBER_BACKLOG_BYTES`] of frames
//!   behind (or twice [`frame_limit`], if larger) loses its oldest pending events until the
//!   rest fits; they are counted and logged as dropped, like the events the ring
//!   overwrites. The ring then
//!   holds at most that much for such subscribers (in-process subscribers, the daemon's own
//!   fast consumers, are bounded by the ring's count alone).
//! - Pull senders buffer at most 64 KiB each without a share of
//!   [`PULL_BUFFER_BYTES`] (or one [`frame_limit`], if larger), shared by all of them: a
//!   sender whose frame needs more waits for its share before its frame is read, so many
//!   senders of large frames at once see back-pressure instead of growing the daemon.
//!   A frame's declared length is checked against [`frame_limit`] first.

use crate::event::{frame_limit, prepare, Event};
use crate::socket::{Bound, Conn, SyncConn, SyncListener};
use crate::{BusAddr, BusSockets, Error, Result};
use chrono::Utc;
use halite_proto::event::{unpack_event, Frame, PullFrame};
use halite_proto::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// How many events a subscriber may fall behind before it loses the oldest.
///
/// All subscribers share one ring of this many `Arc<Event>`s, so the memory held is at
/// most this many events (each up to [`frame_limit`] bytes) whatever the number of
/// subscribers; an event is freed once every subscriber has taken it.
pub const SUBSCRIBER_QUEUE_CAPACITY: usize = 8192;

/// Connections allowed at once on each of the two sockets; beyond that, new connections
/// are closed at once with a warning. Salt has no limit.
pub const MAX_CONNECTIONS: usize = 4096;

/// A subscriber's dropped events are logged at most once per this interval.
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Bytes asked of the kernel per read on a pull connection; also what a pull connection
/// may buffer without a share of [`PULL_BUFFER_BYTES`].
const READ_CHUNK: usize = 64 * 1024;

/// Bytes of partly received pull frames larger than 64 KiB, over all senders.
pub const PULL_BUFFER_BYTES: usize = 64 << 20;

/// Frame bytes a pub-socket subscriber may fall behind before it skips to the newest event.
pub const SUBSCRIBER_BACKLOG_BYTES: u64 = 32 << 20;

/// The tag of the event a pub-socket subscriber gets in place of the events it lost (a
/// Halite extension): data `{"dropped": <count>}`, sent right before the next event it
/// does get, so a reader that fell behind knows how many it missed and where.
pub const GAP_TAG: &str = "halite/bus/gap";

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Shared {
    tx: broadcast::Sender<Arc<Event>>,
    max_event_size: usize,
    dropped: AtomicU64,
    /// Frame bytes of every event published so far.
    published: AtomicU64,
    /// Events published so far.
    events: AtomicU64,
    /// Shares of [`PULL_BUFFER_BYTES`] for pull frames larger than [`READ_CHUNK`].
    pull_bytes: Arc<Semaphore>,
    /// The permits `pull_bytes` started with.
    pull_total: usize,
    /// The pub socket's queued connections, taken in before each publish; `None` once
    /// the bus has stopped.
    intake: Mutex<Option<Intake>>,
}

/// Takes in pub-socket connections: subscribes each and hands it to the accept task.
struct Intake {
    listener: SyncListener,
    addr: BusAddr,
    slots: Arc<Semaphore>,
    joined: mpsc::UnboundedSender<Joined>,
}

/// A subscriber taken in: its connection, its receiver (subscribed when it was taken in,
/// so it holds every event published since), and its connection slot.
struct Joined {
    conn: SyncConn,
    rx: broadcast::Receiver<Arc<Event>>,
    permit: OwnedSemaphorePermit,
}

impl Intake {
    /// Takes in every queued connection; ends with `WouldBlock` once none is left, or with
    /// the error `accept` gave.
    fn take_in(&self, tx: &broadcast::Sender<Arc<Event>>) -> std::io::Error {
        loop {
            let conn = match self.listener.accept_now() {
                Ok(c) => c,
                Err(e) => return e,
            };
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                warn!(socket = %self.addr, limit = MAX_CONNECTIONS, "Event bus connection limit reached; closing new connection");
                continue;
            };
            // The accept task is gone only when the bus stops; the connection then closes.
            let _ = self.joined.send(Joined {
                conn,
                rx: tx.subscribe(),
                permit,
            });
        }
    }
}

impl Shared {
    fn new(max_event_size: usize, pull_total: usize) -> Arc<Shared> {
        let (tx, _) = broadcast::channel(SUBSCRIBER_QUEUE_CAPACITY);
        Arc::new(Shared {
            tx,
            max_event_size,
            dropped: AtomicU64::new(0),
            published: AtomicU64::new(0),
            events: AtomicU64::new(0),
            pull_bytes: Arc::new(Semaphore::new(pull_total)),
            pull_total,
            intake: Mutex::new(None),
        })
    }

    /// Takes in the pub socket's queued connections; see [`Intake::take_in`].
    fn take_in(&self) -> std::io::Error {
        match &*self.intake.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(intake) => intake.take_in(&self.tx),
            None => std::io::ErrorKind::WouldBlock.into(),
        }
    }

    fn publish(&self, event: Event) {
        self.publish_all(std::iter::once(event));
    }

    /// Publishes `events` in order, taking in queued subscribers once for all of them.
    fn publish_all(&self, events: impl IntoIterator<Item = Event>) {
        // Subscribers whose `connect` returned before this publish get the events: take
        // them in first, holding the lock until the events are sent (a concurrent publish
        // cannot take one in after this one's intake and send before it is subscribed).
        // An `accept` error is left to the accept task, which logs it.
        let intake = self.intake.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(intake) = &*intake {
            intake.take_in(&self.tx);
        }
        for mut event in events {
            let len = event.frame().len() as u64;
            event.published_end = self.published.fetch_add(len, Ordering::Relaxed) + len;
            self.events.fetch_add(1, Ordering::Relaxed);
            // An error only means nobody is subscribed; the event is then dropped, as in Salt.
            let _ = self.tx.send(Arc::new(event));
        }
    }

    /// Frame bytes published after `event` (approximately: concurrent publishers may
    /// interleave their counts), i.e. how far behind a subscriber that just got it is.
    fn backlog_after(&self, event: &Event) -> u64 {
        self.published
            .load(Ordering::Relaxed)
            .saturating_sub(event.published_end)
    }

    /// How far behind a pub-socket subscriber may fall.
    fn backlog_limit(&self) -> u64 {
        SUBSCRIBER_BACKLOG_BYTES.max(2 * frame_limit(self.max_event_size) as u64)
    }
}

/// In-process access to a bus: fire events into it and subscribe to it. Cheap to clone.
#[derive(Clone)]
pub struct BusHandle {
    shared: Arc<Shared>,
}

impl BusHandle {
    /// Publishes an event, as Salt's `fire_event`: the tag must be non-empty (and, unlike
    /// Salt, must not contain `"\n\n"`), data must be a map; `_stamp` is set to the current
    /// UTC time and data is trimmed to `max_event_size`. Never waits for subscribers.
    pub fn fire(&self, tag: &str, data: Value) -> Result<()> {
        let event = prepare(tag, data, Utc::now(), self.shared.max_event_size)?;
        let limit = frame_limit(self.shared.max_event_size);
        if event.frame().len() > limit {
            return Err(Error::EventTooLarge {
                size: event.frame().len(),
                limit,
            });
        }
        self.shared.publish(event);
        Ok(())
    }

    /// A receiver of every event published from now on. A receiver that falls more than
    /// [`SUBSCRIBER_QUEUE_CAPACITY`] events behind gets [`RecvError::Lagged`] with the
    /// number it lost (these are not counted in [`dropped_events`](Self::dropped_events)).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.shared.tx.subscribe()
    }

    /// Live subscribers: pub-socket connections plus in-process receivers.
    pub fn subscriber_count(&self) -> usize {
        self.shared.tx.receiver_count()
    }

    /// Events dropped so far for pub-socket subscribers that fell behind, summed over all
    /// of them.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Events published so far (fired in-process or read from the pull socket), whether or
    /// not anyone was subscribed.
    pub fn published_events(&self) -> u64 {
        self.shared.events.load(Ordering::Relaxed)
    }
}

/// A bound bus: the pub and pull sockets, ready to [`run`](Self::run).
pub struct BusServer {
    /// The pub socket (itself in the shared intake), to wait on for connections.
    pub_watch: std::os::fd::OwnedFd,
    joined: mpsc::UnboundedReceiver<Joined>,
    pull_sock: Bound,
    pub_addr: BusAddr,
    pull_addr: BusAddr,
    handle: BusHandle,
}

impl BusServer {
    /// Binds both sockets (replacing stale socket files, setting their modes). Events larger
    /// than [`frame_limit`]`(max_event_size)` are refused.
    pub async fn bind(sockets: &BusSockets, max_event_size: usize) -> Result<Self> {
        let (pub_sock, pub_addr) = Bound::bind(&sockets.pub_addr, sockets.pub_mode).await?;
        let (pull_sock, pull_addr) = Bound::bind(&sockets.pull_addr, sockets.pull_mode).await?;
        let err = |source| Error::Bind {
            addr: pub_addr.clone(),
            source,
        };
        let listener = pub_sock.into_sync().map_err(err)?;
        let pub_watch = listener.watcher().map_err(err)?;
        let shared = Shared::new(
            max_event_size,
            PULL_BUFFER_BYTES.max(frame_limit(max_event_size)),
        );
        let (joined_tx, joined) = mpsc::unbounded_channel();
        *shared.intake.lock().unwrap_or_else(PoisonError::into_inner) = Some(Intake {
            listener,
            addr: pub_addr.clone(),
            slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            joined: joined_tx,
        });
        Ok(BusServer {
            pub_watch,
            joined,
            pull_sock,
            pub_addr,
            pull_addr,
            handle: BusHandle { shared },
        })
    }

    /// A handle to fire into and subscribe to this bus; it stays usable after `run` ends.
    pub fn handle(&self) -> BusHandle {
        self.handle.clone()
    }

    /// The pub socket's address (with the real port if bound to port 0).
    pub fn pub_addr(&self) -> &BusAddr {
        &self.pub_addr
    }

    /// The pull socket's address (with the real port if bound to port 0).
    pub fn pull_addr(&self) -> &BusAddr {
        &self.pull_addr
    }

    /// Serves both sockets until `cancel` is cancelled, then closes every connection and
    /// removes the socket files.
    pub async fn run(self, cancel: CancellationToken) {
        info!(publish = %self.pub_addr, pull = %self.pull_addr, "Event bus listening");
        let tracker = TaskTracker::new();
        let shared = &self.handle.shared;
        tokio::join!(
            intake_loop(
                self.pub_watch,
                self.joined,
                &self.pub_addr,
                shared,
                &cancel,
                &tracker
            ),
            accept_loop(&self.pull_sock, &self.pull_addr, shared, &cancel, &tracker),
        );
        // Closes the pub socket (removing its file); queued connections close with it.
        drop(
            shared
                .intake
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        tracker.close();
        tracker.wait().await;
        debug!(publish = %self.pub_addr, pull = %self.pull_addr, "Event bus stopped");
    }
}

/// Serves the subscribers the intake takes in, and takes in connections that arrive while
/// nothing is published.
async fn intake_loop(
    watch: std::os::fd::OwnedFd,
    mut joined: mpsc::UnboundedReceiver<Joined>,
    addr: &BusAddr,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
    tracker: &TaskTracker,
) {
    // SAFETY: an `OwnedFd` is an open descriptor that it keeps, unchanged, until dropped.
    let watch = match unsafe { AsyncFd::register_with_interest(watch, Interest::READABLE) } {
        Ok(w) => w,
        Err(e) => {
            let e = e.into_parts().1;
            warn!(socket = %addr, error = %e, "Event bus cannot wait for subscribers; they are taken in only when an event is published");
            cancel.cancelled().await;
            return;
        }
    };
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            Some(j) = joined.recv() => match j.conn.into_conn() {
                Ok((conn, peer)) => {
                    debug!(socket = %addr, %peer, "Event bus subscriber connected");
                    let (shared, cancel) = (shared.clone(), cancel.clone());
                    tracker.spawn(serve_subscriber(conn, j.rx, peer, shared, cancel, j.permit));
                }
                Err(e) => debug!(socket = %addr, error = %e, "Event bus subscriber lost before it was served"),
            },
            ready = watch.readable() => {
                let failed = match ready {
                    // `try_io` clears the readiness when the intake ends with WouldBlock.
                    Ok(mut guard) => guard.try_io(|_| Err::<(), _>(shared.take_in())).ok().and_then(Result::err),
                    Err(e) => Some(e),
                };
                if let Some(e) = failed {
                    warn!(socket = %addr, error = %e, "Event bus accept failed");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            }
        }
    }
}

/// Accepts pull-socket connections (event senders).
async fn accept_loop(
    sock: &Bound,
    addr: &BusAddr,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
    tracker: &TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            r = sock.accept() => r,
        };
        let (conn, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                warn!(socket = %addr, error = %e, "Event bus accept failed");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            warn!(socket = %addr, %peer, limit = MAX_CONNECTIONS, "Event bus connection limit reached; closing new connection");
            continue;
        };
        let (shared, cancel) = (shared.clone(), cancel.clone());
        debug!(socket = %addr, %peer, "Event bus sender connected");
        tracker.spawn(serve_sender(conn, peer, shared, cancel, permit));
    }
}

/// Writes every event to one pub-socket subscriber until it disconnects. Bytes the
/// subscriber sends are read and ignored (Salt's `PubServer` does the same with them).
async fn serve_subscriber(
    conn: Conn,
    mut rx: broadcast::Receiver<Arc<Event>>,
    peer: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let (mut rd, mut wr) = tokio::io::split(conn);
    let unreported = AtomicU64::new(0);
    let total = AtomicU64::new(0);
    let writer = async {
        // Events lost since the last one written, reported before the next.
        let mut gap = 0u64;
        loop {
            match rx.recv().await {
                Ok(mut event) => {
                    // Too far behind in bytes: the oldest go until the rest fits.
                    let mut skipped = 0u64;
                    while shared.backlog_after(&event) > shared.backlog_limit() {
                        match rx.try_recv() {
                            Ok(newer) => {
                                event = newer;
                                skipped += 1;
                            }
                            Err(TryRecvError::Lagged(n)) => skipped += n,
                            Err(_) => break,
                        }
                    }
                    if skipped > 0 {
                        unreported.fetch_add(skipped, Ordering::Relaxed);
                        total.fetch_add(skipped, Ordering::Relaxed);
                        shared.dropped.fetch_add(skipped, Ordering::Relaxed);
                        gap += skipped;
                    }
                    if gap > 0 {
                        let data = halite_proto::value::map([("dropped", Value::from(gap))]);
                        // A tag and a two-key map always make a valid event.
                        if let Ok(g) = prepare(GAP_TAG, data, Utc::now(), shared.max_event_size) {
                            wr.write_all(g.frame()).await?;
                        }
                        gap = 0;
                    }
                    wr.write_all(event.frame()).await?
                }
                Err(RecvError::Lagged(n)) => {
                    unreported.fetch_add(n, Ordering::Relaxed);
                    total.fetch_add(n, Ordering::Relaxed);
                    shared.dropped.fetch_add(n, Ordering::Relaxed);
                    gap += n;
                }
                Err(RecvError::Closed) => return Ok::<(), std::io::Error>(()),
            }
        }
    };
    let reader = async {
        let mut scratch = [0u8; 1024];
        loop {
            match rd.read(&mut scratch).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(e),
            }
        }
    };
    let reporter = async {
        let mut tick = tokio::time::interval(DROP_LOG_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let n = unreported.swap(0, Ordering::Relaxed);
            if n > 0 {
                warn!(%peer, dropped = n, capacity = SUBSCRIBER_QUEUE_CAPACITY, "Event bus subscriber is too slow; dropped its oldest events");
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => {}
        r = writer => if let Err(e) = r {
            debug!(%peer, error = %e, "Event bus subscriber write failed; disconnecting");
        },
        r = reader => match r {
            None => debug!(%peer, "Event bus subscriber disconnected"),
            Some(e) => debug!(%peer, error = %e, "Event bus subscriber read failed; disconnecting"),
        },
        _ = reporter => {}
    }
    let total = total.load(Ordering::Relaxed);
    if total > 0 {
        warn!(%peer, dropped = total, "Event bus subscriber gone after dropping events");
    }
}

/// Reads length-prefixed frames from one sender and publishes each event.
///
/// A frame that cannot be parsed (over the size limit, wrapper not msgpack, no `body`)
/// ends the connection; once the wrapper is parsed the next frame's start is known, so a
/// body that is not an event (no `"\n\n"`, data not msgpack) only drops that event.
async fn serve_sender(
    mut conn: Conn,
    peer: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let limit = frame_limit(shared.max_event_size);
    let mut buf: Vec<u8> = Vec::new();
    // This connection's share of the pull buffer budget, for a frame over READ_CHUNK.
    let mut share: Option<OwnedSemaphorePermit> = None;
    loop {
        // Publish every whole frame buffered (in one go), then shift the rest down once.
        let mut pos = 0;
        let mut events = Vec::new();
        let bad_frame = loop {
            match PullFrame::check(&buf[pos..], limit) {
                Ok(Frame::Incomplete) => break None,
                Ok(Frame::Complete { event, consumed }) => {
                    pos += consumed;
                    match unpack_event(&event) {
                        Ok((tag, data)) => events.push(Event::from_body(tag, data, &event)),
                        Err(e) => {
                            warn!(%peer, error = %e, "Dropping malformed event from event bus sender")
                        }
                    }
                }
                Err(e) => break Some(e),
            }
        };
        if !events.is_empty() {
            shared.publish_all(events);
        }
        if let Some(e) = bad_frame {
            warn!(%peer, error = %e, "Closing event bus sender connection: bad frame");
            return;
        }
        buf.drain(..pos);
        if buf.is_empty() && buf.capacity() > 4 * READ_CHUNK {
            // Give back the memory of a large frame once it is published.
            buf = Vec::new();
        }
        // The frame being received (its length is known and within the limit, or
        // `PullFrame::check` refused it) needs this much buffered.
        let need = buf.get(..4).map_or(0, |l| {
            4 + u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize
        });
        let want = need.min(shared.pull_total);
        if want <= READ_CHUNK {
            share = None;
        } else if share.as_ref().map_or(0, |p| p.num_permits()) < want {
            // Give back a smaller share before waiting for this frame's.
            drop(share.take());
            let n = u32::try_from(want).unwrap_or(u32::MAX);
            let acquired = tokio::select! {
                _ = cancel.cancelled() => return,
                p = shared.pull_bytes.clone().acquire_many_owned(n) => p,
            };
            match acquired {
                Ok(p) => share = Some(p),
                Err(_) => return,
            }
        }
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            _ = cancel.cancelled() => return,
            r = conn.read_buf(&mut buf) => r,
        };
        match read {
            Ok(0) if buf.is_empty() => {
                debug!(%peer, "Event bus sender disconnected");
                return;
            }
            Ok(0) => {
                debug!(%peer, pending = buf.len(), "Event bus sender disconnected mid-frame");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                debug!(%peer, error = %e, "Event bus sender read failed; disconnecting");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::event::{frame_pull, pack_event};
    use halite_proto::value;
    use std::future::Future;
    use tokio::net::UnixStream;

    async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), f)
            .await
            .unwrap_or_else(|_| panic!("{what}: nothing after 30 s"))
    }

    /// Waits until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        within(what, async {
            while !cond() {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await
    }

    /// A pull connection served as the bus serves one; returns the sender's end.
    fn sender(shared: &Arc<Shared>, cancel: &CancellationToken) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let slot = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        tokio::spawn(serve_sender(
            Conn::Unix(theirs),
            "test".into(),
            shared.clone(),
            cancel.clone(),
            slot,
        ));
        ours
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pull_frames_over_64_kib_share_one_byte_budget_and_wait_for_room() {
        let frame = |tag: &str| {
            let data = value::map([("pad", value::s("x".repeat(150 << 10)))]);
            frame_pull(&pack_event(tag, &data))
        };
        let (a_frame, b_frame) = (frame("a"), frame("b"));
        let total = 200 << 10;
        let shared = Shared::new(1 << 20, total);
        let mut events = shared.tx.subscribe();
        let cancel = CancellationToken::new();
        let (mut a, mut b) = (sender(&shared, &cancel), sender(&shared, &cancel));
        let free = || shared.pull_bytes.available_permits();

        // A sends most of its frame: it holds a share the size of that frame.
        a.write_all(&a_frame[..100 << 10]).await.unwrap();
        until("A's share", || free() == total - a_frame.len()).await;
        // B's whole frame is sent, but it does not fit beside A's: B reads no more than
        // 64 KiB of it and waits for its share (holding, as the semaphore is fair, what is
        // left of the budget so no later frame gets ahead of it).
        b.write_all(&b_frame).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            events.try_recv().is_err(),
            "B's frame was read without a share"
        );
        assert_eq!(free(), 0);

        // A finishes: its event goes out, its share comes back, B takes one and finishes.
        a.write_all(&a_frame[100 << 10..]).await.unwrap();
        assert_eq!(within("A's event", events.recv()).await.unwrap().tag(), "a");
        assert_eq!(within("B's event", events.recv()).await.unwrap().tag(), "b");
        until("every share back", || free() == total).await;
        cancel.cancel();
    }
}
