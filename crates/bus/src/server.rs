//! The bus daemon side: Salt's `PublishServer` / `PubServer` / `TCPPuller`
//! (`salt/transport/tcp.py`) used as the event publisher.
//!
//! Every event — read from the pull socket or fired in-process — is published once, as a
//! shared `Arc<Event>`, into one queue per subscriber (`fanout.rs`), in publish order:
//! pub-socket subscribers (a task each, writing [`Event::frame`]s to the socket) and
//! in-process [`Subscription`]s.
//!
//! No event is lost to a subscriber that has just connected. A client's `connect` returns
//! once the kernel has queued the connection, before the bus accepts it, and Salt's
//! clients (`LocalClient`, salt-api) connect, then publish a job and wait for its events:
//! if the bus sent the job's return before it accepted the connection, the client would
//! miss it. So publishing first takes in every queued pub-socket connection (a
//! non-blocking `accept` under the lock the publish holds) and subscribes it, then sends;
//! the accept task only wakes for connections that arrive while nothing is published.
//!
//! Pub-socket subscribers: each one's writer takes every frame queued for it (up to
//! [`WRITE_BATCH_BYTES`]) and writes them with one `write`, so a subscriber costs a copy
//! per event, not a system call. Back-pressure choice: load shedding, per subscriber, never
//! silent. A subscriber more than [`SUBSCRIBER_BACKLOG_BYTES`] behind (each event counting
//! its frame plus [`EVENT_OVERHEAD`]: at most [`SUBSCRIBER_QUEUE_CAPACITY`] events, at most
//! that many bytes of frames) loses its *oldest* events, and gets a [`GAP_TAG`] event with
//! their count right before the next event it does get. Salt instead queues up to 10000
//! writes per subscriber and disconnects one whose writes stall for 60 s, silently; Halite
//! never disconnects a slow reader, and a reader that catches up sees the newest events
//! rather than stale ones.
//!
//! In-process subscribers ([`BusHandle::subscribe`]: the journal writer, the minion's
//! `fire_master` forwarder) lose nothing: their queue has the same budget, but a pull
//! sender reserves its batch in it before the batch is published and waits while the
//! subscriber is a budget behind — back-pressure to the senders' pull connections, never
//! to other subscribers. [`BusHandle::fire`] never waits (it runs on the daemon's request
//! threads): it is admitted up to one more budget; only a subscriber that far behind has
//! events refused, and they are reported in its stream ([`RecvError::Lagged`]).
//!
//! Memory is bounded in bytes as well as in events:
//! - The events held are those some subscriber has not taken yet: at most a budget per
//!   pub-socket subscriber and two per in-process one (the budget is raised to two
//!   [`frame_limit`]s when those are larger). An idle bus holds none.
//! - Pull senders buffer at most 64 KiB each without a share of
//!   [`PULL_BUFFER_BYTES`] (or one [`frame_limit`], if larger), shared by all of them: a
//!   sender whose frame needs more waits for its share before its frame is read, so many
//!   senders of large frames at once see back-pressure instead of growing the daemon.
//!   A frame's declared length is checked against [`frame_limit`] first.

use crate::event::{frame_limit, prepare, Event};
use crate::fanout::{cost, Queue, Subscription, EVENT_OVERHEAD};
use crate::socket::{Bound, Conn, SyncConn, SyncListener};
use crate::{BusAddr, BusSockets, Error, Result};
use chrono::Utc;
use halite_proto::event::{unpack_event, Frame, PullFrame};
use halite_proto::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// How far (in bytes) a subscriber may fall behind: every event it has not taken counts
/// its frame's length plus [`EVENT_OVERHEAD`]. A pub-socket subscriber further behind
/// loses its oldest events; an in-process one holds pull senders back. Raised to two
/// [`frame_limit`]s (plus overhead) for buses whose `max_event_size` makes that larger.
pub const SUBSCRIBER_BACKLOG_BYTES: usize = 64 << 20;

/// The most events a subscriber may fall behind: [`SUBSCRIBER_BACKLOG_BYTES`] of the
/// smallest events (131,072).
pub const SUBSCRIBER_QUEUE_CAPACITY: usize = SUBSCRIBER_BACKLOG_BYTES / EVENT_OVERHEAD;

/// Frame bytes a pub-socket subscriber's writer takes from its queue and writes at once
/// (a larger single frame is written alone).
pub const WRITE_BATCH_BYTES: usize = 256 * 1024;

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

/// The tag of the event a pub-socket subscriber gets in place of the events it lost (a
/// Halite extension): data `{"dropped": <count>}`, sent right before the next event it
/// does get, so a reader that fell behind knows how many it missed and where.
pub const GAP_TAG: &str = "halite/bus/gap";

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Shared {
    max_event_size: usize,
    /// Every subscriber's budget ([`SUBSCRIBER_BACKLOG_BYTES`] or two frame limits).
    budget: usize,
    /// Events dropped or refused, over all subscribers.
    dropped: AtomicU64,
    /// Events published so far.
    events: AtomicU64,
    /// Shares of [`PULL_BUFFER_BYTES`] for pull frames larger than [`READ_CHUNK`].
    pull_bytes: Arc<Semaphore>,
    /// The permits `pull_bytes` started with.
    pull_total: usize,
    /// The subscribers, and the pub socket's intake; locked by every publish.
    hub: Mutex<Hub>,
}

struct Hub {
    /// Every subscriber's queue, in no particular order.
    queues: Vec<Arc<Queue>>,
    /// The pub socket's queued connections, taken in before each publish; `None` once
    /// the bus has stopped.
    intake: Option<Intake>,
}

/// Takes in pub-socket connections: subscribes each and hands it to the accept task.
struct Intake {
    listener: SyncListener,
    addr: BusAddr,
    slots: Arc<Semaphore>,
    joined: mpsc::UnboundedSender<Joined>,
}

/// A subscriber taken in: its connection, its queue (subscribed when it was taken in, so
/// it holds every event published since), and its connection slot.
struct Joined {
    conn: SyncConn,
    queue: Arc<Queue>,
    permit: OwnedSemaphorePermit,
}

impl Hub {
    /// Takes in every queued pub-socket connection; ends with `WouldBlock` once none is
    /// left, or with the error `accept` gave.
    fn take_in(&mut self, budget: usize) -> std::io::Error {
        let Some(intake) = &self.intake else {
            return std::io::ErrorKind::WouldBlock.into();
        };
        loop {
            let conn = match intake.listener.accept_now() {
                Ok(c) => c,
                Err(e) => return e,
            };
            let Ok(permit) = intake.slots.clone().try_acquire_owned() else {
                warn!(socket = %intake.addr, limit = MAX_CONNECTIONS, "Event bus connection limit reached; closing new connection");
                continue;
            };
            let queue = Queue::raw(budget);
            self.queues.push(queue.clone());
            // The accept task is gone only when the bus stops; the connection then closes.
            let _ = intake.joined.send(Joined {
                conn,
                queue,
                permit,
            });
        }
    }
}

impl Shared {
    fn new(max_event_size: usize, pull_total: usize) -> Arc<Shared> {
        let two_frames = 2 * (frame_limit(max_event_size) + EVENT_OVERHEAD);
        Arc::new(Shared {
            max_event_size,
            budget: SUBSCRIBER_BACKLOG_BYTES
                .max(two_frames)
                .min(u32::MAX as usize),
            dropped: AtomicU64::new(0),
            events: AtomicU64::new(0),
            pull_bytes: Arc::new(Semaphore::new(pull_total)),
            pull_total,
            hub: Mutex::new(Hub {
                queues: Vec::new(),
                intake: None,
            }),
        })
    }

    fn hub(&self) -> MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in the pub socket's queued connections; see [`Hub::take_in`].
    fn take_in(&self) -> std::io::Error {
        self.hub().take_in(self.budget)
    }

    /// A new in-process subscriber.
    fn subscribe(&self) -> Subscription {
        let queue = Queue::lossless(self.budget);
        self.hub().queues.push(queue.clone());
        Subscription::new(queue)
    }

    /// The in-process subscribers' queues.
    fn lossless_queues(&self) -> Vec<Arc<Queue>> {
        self.hub()
            .queues
            .iter()
            .filter(|q| q.is_lossless() && !q.has_left())
            .cloned()
            .collect()
    }

    /// Publishes `events` in order, taking in queued subscribers once for all of them.
    /// `prepaid` is what the publisher reserved in in-process subscribers' queues.
    fn publish_all(&self, events: Vec<Event>, prepaid: &[(Arc<Queue>, usize)]) {
        let events: Vec<Arc<Event>> = events.into_iter().map(Arc::new).collect();
        // Subscribers whose `connect` returned before this publish get the events: take
        // them in first, holding the lock until the events are queued (a concurrent
        // publish cannot take one in after this one's intake and queue before it is
        // subscribed). An `accept` error is left to the accept task, which logs it.
        let mut hub = self.hub();
        hub.take_in(self.budget);
        hub.queues.retain(|q| !q.has_left());
        let mut lost = 0;
        for q in &hub.queues {
            let paid = prepaid
                .iter()
                .find(|(p, _)| Arc::ptr_eq(p, q))
                .map_or(0, |(_, n)| *n);
            lost += q.push(&events, paid);
        }
        drop(hub);
        self.events
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        for q in &self.hub().queues {
            q.close();
        }
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
        self.shared.publish_all(vec![event], &[]);
        Ok(())
    }

    /// Every event published from now on, in order, none dropped (see [`Subscription`]:
    /// pull-socket senders wait for it, so it must be read or dropped).
    pub fn subscribe(&self) -> Subscription {
        self.shared.subscribe()
    }

    /// Live subscribers: pub-socket connections plus in-process subscriptions.
    pub fn subscriber_count(&self) -> usize {
        let hub = self.shared.hub();
        hub.queues.iter().filter(|q| !q.has_left()).count()
    }

    /// Events lost so far, summed over all subscribers: dropped for pub-socket subscribers
    /// that fell behind, refused to in-process ones (see [`Subscription`]).
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
        shared.hub().intake = Some(Intake {
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
        drop(shared.hub().intake.take());
        tracker.close();
        tracker.wait().await;
        // Subscribers taken in but never served are gone too: nothing is queued for them.
        for q in &shared.hub().queues {
            if !q.is_lossless() {
                q.leave();
            }
        }
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
                    tracker.spawn(serve_subscriber(conn, j.queue, peer, shared, cancel, j.permit));
                }
                Err(e) => {
                    j.queue.leave();
                    debug!(socket = %addr, error = %e, "Event bus subscriber lost before it was served");
                }
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

/// Leaves the queue when the subscriber's task ends, however it ends.
struct Leave(Arc<Queue>);

impl Drop for Leave {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Writes every event to one pub-socket subscriber until it disconnects, batching what is
/// queued into writes of up to [`WRITE_BATCH_BYTES`]. Bytes the subscriber sends are read
/// and ignored (Salt's `PubServer` does the same with them).
async fn serve_subscriber(
    conn: Conn,
    queue: Arc<Queue>,
    peer: String,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let queue = Leave(queue);
    let (mut rd, mut wr) = tokio::io::split(conn);
    let total = AtomicU64::new(0);
    let writer = async {
        let mut taken = Vec::new();
        let mut buf = Vec::with_capacity(WRITE_BATCH_BYTES);
        while let Some(gap) = queue.0.take_frames(&mut taken, WRITE_BATCH_BYTES).await {
            if gap > 0 {
                let data = halite_proto::value::map([("dropped", Value::from(gap))]);
                // A tag and a one-key map always make a valid event.
                if let Ok(g) = prepare(GAP_TAG, data, Utc::now(), shared.max_event_size) {
                    buf.extend_from_slice(g.frame());
                }
            }
            for event in taken.drain(..) {
                if event.frame().len() >= WRITE_BATCH_BYTES {
                    // A large frame goes out alone, without a copy.
                    if !buf.is_empty() {
                        wr.write_all(&buf).await?;
                        buf.clear();
                    }
                    wr.write_all(event.frame()).await?;
                } else {
                    buf.extend_from_slice(event.frame());
                }
            }
            if !buf.is_empty() {
                wr.write_all(&buf).await?;
                buf.clear();
            }
        }
        Ok::<(), std::io::Error>(())
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
            let n = queue.0.take_unlogged();
            if n > 0 {
                total.fetch_add(n, Ordering::Relaxed);
                warn!(%peer, dropped = n, backlog_bytes = shared.budget, "Event bus subscriber is too slow; dropped its oldest events");
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => {}
        r = writer => match r {
            Err(e) => debug!(%peer, error = %e, "Event bus subscriber write failed; disconnecting"),
            Ok(()) => debug!(%peer, "Event bus closed; disconnecting subscriber"),
        },
        r = reader => match r {
            None => debug!(%peer, "Event bus subscriber disconnected"),
            Some(e) => debug!(%peer, error = %e, "Event bus subscriber read failed; disconnecting"),
        },
        _ = reporter => {}
    }
    let total = total.load(Ordering::Relaxed) + queue.0.take_unlogged();
    if total > 0 {
        warn!(%peer, dropped = total, "Event bus subscriber gone after dropping events");
    }
}

/// Reads length-prefixed frames from one sender and publishes each event.
///
/// Every whole frame of one read is published as one batch, once the in-process
/// subscribers' queues have room for it (the sender waits, not the bus).
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
            let charge = events.iter().map(cost).sum();
            let mut prepaid = Vec::new();
            for q in shared.lossless_queues() {
                let paid = tokio::select! {
                    _ = cancel.cancelled() => return,
                    n = q.reserve(charge) => n,
                };
                prepaid.push((q, paid));
            }
            shared.publish_all(events, &prepaid);
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
        let mut events = shared.subscribe();
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
