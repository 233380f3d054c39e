//! The bus daemon side: Salt's `PublishServer` / `PubServer` / `TCPPuller`
//! (`salt/transport/tcp.py`) used as the event publisher.
//!
//! Every event — read from the pull socket or fired in-process — goes into one
//! `tokio::sync::broadcast` channel of [`SUBSCRIBER_QUEUE_CAPACITY`] shared `Arc<Event>`s.
//! Each pub-socket subscriber is a task holding a receiver and writing
//! [`Event::frame`] to its socket; in-process subscribers hold receivers directly.
//!
//! Backpressure choice: load shedding, per subscriber. Sending into the channel never
//! waits, so neither the pull readers nor [`BusHandle::fire`] can be stalled by a
//! subscriber. A subscriber whose backlog exceeds the capacity loses its *oldest* pending
//! events (the broadcast channel overwrites them) and keeps receiving from the oldest one
//! still held. Salt instead queues up to 10000 writes per subscriber and disconnects one
//! whose writes stall for 60 s; Halite never disconnects a slow reader, and a reader that
//! catches up sees the newest events rather than stale ones.

use crate::event::{frame_limit, prepare, Event};
use crate::socket::{Bound, Conn};
use crate::{BusAddr, BusSockets, Error, Result};
use chrono::Utc;
use halite_proto::event::{unpack_event, Frame, PullFrame};
use halite_proto::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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

/// Bytes asked of the kernel per read on a pull connection.
const READ_CHUNK: usize = 64 * 1024;

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Shared {
    tx: broadcast::Sender<Arc<Event>>,
    max_event_size: usize,
    dropped: AtomicU64,
}

impl Shared {
    fn publish(&self, event: Event) {
        // An error only means nobody is subscribed; the event is then dropped, as in Salt.
        let _ = self.tx.send(Arc::new(event));
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
}

/// A bound bus: the pub and pull sockets, ready to [`run`](Self::run).
pub struct BusServer {
    pub_sock: Bound,
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
        let (tx, _) = broadcast::channel(SUBSCRIBER_QUEUE_CAPACITY);
        let shared = Arc::new(Shared {
            tx,
            max_event_size,
            dropped: AtomicU64::new(0),
        });
        Ok(BusServer {
            pub_sock,
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
            accept_loop(
                &self.pub_sock,
                &self.pub_addr,
                Role::Pub,
                shared,
                &cancel,
                &tracker
            ),
            accept_loop(
                &self.pull_sock,
                &self.pull_addr,
                Role::Pull,
                shared,
                &cancel,
                &tracker
            ),
        );
        tracker.close();
        tracker.wait().await;
        debug!(publish = %self.pub_addr, pull = %self.pull_addr, "Event bus stopped");
    }
}

#[derive(Clone, Copy)]
enum Role {
    Pub,
    Pull,
}

async fn accept_loop(
    sock: &Bound,
    addr: &BusAddr,
    role: Role,
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
        match role {
            Role::Pub => {
                let rx = shared.tx.subscribe();
                debug!(socket = %addr, %peer, "Event bus subscriber connected");
                tracker.spawn(serve_subscriber(conn, rx, peer, shared, cancel, permit));
            }
            Role::Pull => {
                debug!(socket = %addr, %peer, "Event bus sender connected");
                tracker.spawn(serve_sender(conn, peer, shared, cancel, permit));
            }
        }
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
        loop {
            match rx.recv().await {
                Ok(event) => wr.write_all(event.frame()).await?,
                Err(RecvError::Lagged(n)) => {
                    unreported.fetch_add(n, Ordering::Relaxed);
                    total.fetch_add(n, Ordering::Relaxed);
                    shared.dropped.fetch_add(n, Ordering::Relaxed);
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
    loop {
        // Publish every whole frame buffered, then shift the rest down once.
        let mut pos = 0;
        loop {
            match PullFrame::check(&buf[pos..], limit) {
                Ok(Frame::Incomplete) => break,
                Ok(Frame::Complete { event, consumed }) => {
                    pos += consumed;
                    match unpack_event(&event) {
                        Ok((tag, data)) => shared.publish(Event::from_body(tag, data, &event)),
                        Err(e) => {
                            warn!(%peer, error = %e, "Dropping malformed event from event bus sender")
                        }
                    }
                }
                Err(e) => {
                    warn!(%peer, error = %e, "Closing event bus sender connection: bad frame");
                    return;
                }
            }
        }
        buf.drain(..pos);
        if buf.is_empty() && buf.capacity() > 4 * READ_CHUNK {
            // Give back the memory of a large frame once it is published.
            buf = Vec::new();
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
