//! Moving events from the bus into the journal without slowing the bus.
//!
//! Two threads: a forwarder that takes each event from the journal's bus subscription and
//! pushes the shared `Arc<Event>` into a queue (it only moves pointers, so it keeps up with
//! the bus), and a writer that takes everything queued, appends it in one durable
//! transaction, and then announces the committed batch to the replay sessions.

use crate::store::Journal;
use halite_bus::Event;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

/// Events appended in one transaction at most.
pub const MAX_BATCH_EVENTS: usize = 16_384;

/// Body bytes appended in one transaction at most (one event may exceed it alone).
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// Body bytes waiting for the writer at most; beyond this, new events are not journaled
/// (counted and logged). With events of at most `max_event_size`, this is the memory the
/// journal may hold on top of the bus's own ring.
pub const MAX_QUEUED_BYTES: usize = 256 * 1024 * 1024;

/// How often an idle journal applies its age limit.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// Committed batches held for replay sessions; a session further behind reads the journal.
/// A batch is freed once every session took it, so this bounds what one stuck client pins:
/// at most this many batches of [`MAX_BATCH_BYTES`].
pub(crate) const LIVE_CAPACITY: usize = 64;

/// Events not journaled are logged at most this often.
const LOSS_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// One committed batch: ids `first_id..first_id + events.len()`, in order.
pub(crate) struct Committed {
    pub(crate) first_id: u64,
    pub(crate) time_us: i64,
    pub(crate) events: Vec<Arc<Event>>,
}

impl Committed {
    /// The id after the batch's last one.
    pub(crate) fn end_id(&self) -> u64 {
        self.first_id + self.events.len() as u64
    }
}

/// Microseconds since the Unix epoch by the wall clock.
pub(crate) fn now_us() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// Counts events the journal missed and logs them at most once per [`LOSS_LOG_INTERVAL`].
struct LossLog {
    pending: u64,
    total: u64,
    last: Option<Instant>,
}

impl LossLog {
    fn new() -> Self {
        LossLog {
            pending: 0,
            total: 0,
            last: None,
        }
    }

    fn add(&mut self, n: u64, why: &'static str) {
        self.pending += n;
        self.total += n;
        if self.last.is_none_or(|t| t.elapsed() >= LOSS_LOG_INTERVAL) {
            error!(
                events = self.pending,
                total = self.total,
                "Events missing from the event journal: {why}"
            );
            self.pending = 0;
            self.last = Some(Instant::now());
        }
    }
}

pub(crate) struct Writer {
    forward: std::thread::JoinHandle<()>,
    write: std::thread::JoinHandle<()>,
}

impl Writer {
    /// Starts journaling what `bus` receives until `stop` is cancelled.
    ///
    /// The forwarder runs on its own thread (with a one-thread runtime) rather than on the
    /// daemon's runtime: under a flood the daemon's workers are busy reading and writing bus
    /// sockets, and a forwarder queued behind them would fall more than the bus's ring
    /// behind and lose events.
    pub(crate) fn spawn(
        journal: Arc<Journal>,
        bus: broadcast::Receiver<Arc<Event>>,
        live: broadcast::Sender<Arc<Committed>>,
        stop: CancellationToken,
    ) -> crate::Result<Writer> {
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let path = journal.path().to_owned();
        let io = |source| crate::Error::Io {
            what: "cannot start a thread for",
            path: path.clone(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(io)?;
        let writer_queued = queued.clone();
        let write = std::thread::Builder::new()
            .name("journal-write".into())
            .spawn(move || write_loop(&journal, &rx, &writer_queued, &live))
            .map_err(io)?;
        let forward = std::thread::Builder::new()
            .name("journal-forward".into())
            .spawn(move || runtime.block_on(forward(bus, tx, queued, stop)))
            .map_err(io)?;
        Ok(Writer { forward, write })
    }

    /// Waits until every event taken from the bus is committed.
    pub(crate) async fn join(self) {
        let Writer { forward, write } = self;
        let _ = tokio::task::spawn_blocking(move || {
            let _ = forward.join();
            let _ = write.join();
        })
        .await;
    }
}

/// Moves events from the bus subscription to the writer queue; on `stop`, moves what the
/// subscription still holds and closes the queue.
async fn forward(
    mut bus: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Arc<Event>>,
    queued: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    let mut loss = LossLog::new();
    let push = |event: Arc<Event>, loss: &mut LossLog| {
        let size = event.body().len();
        if queued.load(Ordering::Relaxed) + size > MAX_QUEUED_BYTES {
            loss.add(1, "the journal writer is behind and its queue is full");
            return;
        }
        queued.fetch_add(size, Ordering::Relaxed);
        // The receiver lives as long as the writer thread, which outlives this task.
        let _ = tx.send(event);
    };
    loop {
        tokio::select! {
            biased;
            r = bus.recv() => match r {
                Ok(event) => push(event, &mut loss),
                Err(RecvError::Lagged(n)) => loss.add(n, "the journal fell behind the event bus"),
                Err(RecvError::Closed) => break,
            },
            _ = stop.cancelled() => {
                loop {
                    match bus.try_recv() {
                        Ok(event) => push(event, &mut loss),
                        Err(TryRecvError::Lagged(n)) => loss.add(n, "the journal fell behind the event bus"),
                        Err(_) => break,
                    }
                }
                break;
            }
        }
    }
    if loss.total > 0 {
        error!(
            total = loss.total,
            "Event journal stopping; events were missed while it ran"
        );
    }
}

/// Appends queued events in batches until the queue is closed and empty.
fn write_loop(
    journal: &Journal,
    rx: &mpsc::Receiver<Arc<Event>>,
    queued: &AtomicUsize,
    live: &broadcast::Sender<Arc<Committed>>,
) {
    let mut loss = LossLog::new();
    let prune = || match journal.prune(now_us()) {
        Ok(0) => {}
        Ok(n) => debug!(events = n, "Event journal pruned"),
        Err(e) => error!(error = %e, "Event journal prune failed"),
    };
    // Events that aged out while the master was stopped go at once.
    prune();
    loop {
        let first = match rx.recv_timeout(PRUNE_INTERVAL) {
            Ok(e) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                prune();
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut size = first.body().len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_EVENTS && size < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(e) => {
                    size += e.body().len();
                    batch.push(e);
                }
                Err(_) => break,
            }
        }
        queued.fetch_sub(size, Ordering::Relaxed);
        match journal.append(batch.iter().map(|e| e.body()), now_us()) {
            Ok(done) => {
                if done.pruned > 0 {
                    debug!(events = done.pruned, "Event journal pruned");
                }
                // An error only means no replay session is connected.
                let _ = live.send(Arc::new(Committed {
                    first_id: done.first_id,
                    time_us: done.time_us,
                    events: batch,
                }));
            }
            Err(e) => {
                error!(error = %e, events = batch.len(), "Event journal append failed");
                loss.add(batch.len() as u64, "appending to the journal failed");
            }
        }
    }
    debug!("Event journal writer stopped");
}
