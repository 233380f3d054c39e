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

/// Why events are missing after a failed append.
const APPEND_FAILED: &str = "appending to the journal failed";

/// Events not journaled are logged at most this often.
const LOSS_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Tag of the entry the journal stores where it missed events (see [`Entry::Gap`]).
pub const GAP_TAG: &str = "halite/journal/gap";

/// One journal entry: an event from the bus, or a gap marker.
pub(crate) enum Entry {
    /// An event from the bus.
    Bus(Arc<Event>),
    /// The packed [`GAP_TAG`] event `{"missed": N, "reason": "...", "_stamp": ...}` stored
    /// where the journal missed `N` events, so a replaying client learns of the loss.
    Gap(Vec<u8>),
}

impl Entry {
    fn gap(missed: u64, reason: &str) -> Entry {
        let data = halite_proto::value::map([
            ("missed", halite_proto::Value::from(missed)),
            ("reason", halite_proto::Value::from(reason)),
            (
                "_stamp",
                halite_proto::Value::from(halite_proto::event::stamp(chrono::Utc::now())),
            ),
        ]);
        Entry::Gap(halite_proto::event::pack_event(GAP_TAG, &data))
    }

    /// The packed event.
    pub(crate) fn body(&self) -> &[u8] {
        match self {
            Entry::Bus(e) => e.body(),
            Entry::Gap(body) => body,
        }
    }

    /// The tag.
    pub(crate) fn tag(&self) -> &str {
        match self {
            Entry::Bus(e) => e.tag(),
            Entry::Gap(_) => GAP_TAG,
        }
    }
}

/// One committed batch: ids `first_id..first_id + events.len()`, in order.
pub(crate) struct Committed {
    pub(crate) first_id: u64,
    pub(crate) time_us: i64,
    pub(crate) events: Vec<Entry>,
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
/// subscription still holds and closes the queue. Events it misses are replaced by one
/// [`Entry::Gap`] per loss.
async fn forward(
    mut bus: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Entry>,
    queued: Arc<AtomicUsize>,
    stop: CancellationToken,
) {
    const LAGGED: &str = "the journal fell behind the event bus";
    const FULL: &str = "the journal writer is behind and its queue is full";
    let mut loss = LossLog::new();
    // Events dropped because the queue was full, not yet marked in the journal.
    let mut dropped = 0u64;
    // The receiver lives as long as the writer thread, which outlives this forwarder.
    let mut push = |event: Arc<Event>, loss: &mut LossLog| {
        let size = event.body().len();
        if queued.load(Ordering::Relaxed) + size > MAX_QUEUED_BYTES {
            loss.add(1, FULL);
            dropped += 1;
            return;
        }
        if dropped > 0 {
            let _ = tx.send(Entry::gap(std::mem::take(&mut dropped), FULL));
        }
        queued.fetch_add(size, Ordering::Relaxed);
        let _ = tx.send(Entry::Bus(event));
    };
    let lagged = |n: u64, loss: &mut LossLog| {
        loss.add(n, LAGGED);
        let _ = tx.send(Entry::gap(n, LAGGED));
    };
    loop {
        tokio::select! {
            biased;
            r = bus.recv() => match r {
                Ok(event) => push(event, &mut loss),
                Err(RecvError::Lagged(n)) => lagged(n, &mut loss),
                Err(RecvError::Closed) => break,
            },
            _ = stop.cancelled() => {
                loop {
                    match bus.try_recv() {
                        Ok(event) => push(event, &mut loss),
                        Err(TryRecvError::Lagged(n)) => lagged(n, &mut loss),
                        Err(_) => break,
                    }
                }
                break;
            }
        }
    }
    if dropped > 0 {
        let _ = tx.send(Entry::gap(dropped, FULL));
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
    rx: &mpsc::Receiver<Entry>,
    queued: &AtomicUsize,
    live: &broadcast::Sender<Arc<Committed>>,
) {
    let mut loss = LossLog::new();
    // Events lost to failed appends, not yet marked in the journal.
    let mut failed = 0u64;
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
        let mut batch = Vec::new();
        if failed > 0 {
            batch.push(Entry::gap(failed, APPEND_FAILED));
        }
        // Only bus events count against the queue limit.
        let queued_size = |e: &Entry| match e {
            Entry::Bus(ev) => ev.body().len(),
            Entry::Gap(_) => 0,
        };
        let mut size = queued_size(&first);
        batch.push(first);
        while batch.len() < MAX_BATCH_EVENTS && size < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(e) => {
                    size += queued_size(&e);
                    batch.push(e);
                }
                Err(_) => break,
            }
        }
        queued.fetch_sub(size, Ordering::Relaxed);
        match journal.append(batch.iter().map(Entry::body), now_us()) {
            Ok(done) => {
                failed = 0;
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
                let lost = batch.iter().filter(|e| matches!(e, Entry::Bus(_))).count() as u64;
                // A gap marker in the failed batch is re-counted by the next one.
                failed += lost;
                loss.add(lost, APPEND_FAILED);
            }
        }
    }
    debug!("Event journal writer stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_bus::{BusServer, BusSockets, SUBSCRIBER_QUEUE_CAPACITY};
    use halite_proto::value::{self, map};

    #[tokio::test]
    async fn events_lost_to_a_lagging_forwarder_leave_a_gap_entry() {
        let dir = tempfile::tempdir().unwrap();
        let server = BusServer::bind(&BusSockets::master(dir.path()), 1 << 20)
            .await
            .unwrap();
        let bus = server.handle();
        let rx = bus.subscribe();
        let extra = 808;
        for i in 0..SUBSCRIBER_QUEUE_CAPACITY + extra {
            bus.fire("t", map([("i", halite_proto::Value::from(i))]))
                .unwrap();
        }
        let (tx, queue) = mpsc::channel();
        let stop = CancellationToken::new();
        stop.cancel();
        forward(rx, tx, Arc::new(AtomicUsize::new(0)), stop).await;
        let entries: Vec<Entry> = queue.try_iter().collect();
        assert_eq!(entries.len(), 1 + SUBSCRIBER_QUEUE_CAPACITY);
        let Entry::Gap(body) = &entries[0] else {
            panic!("the first entry is not a gap marker")
        };
        let (tag, data) = halite_proto::event::unpack_event(body).unwrap();
        assert_eq!(tag, GAP_TAG);
        assert_eq!(value::get_i64(&data, "missed"), Some(extra as i64));
        assert_eq!(
            value::get_str(&data, "reason"),
            Some("the journal fell behind the event bus")
        );
        // What is left starts with the oldest event the ring still held.
        let Entry::Bus(first) = &entries[1] else {
            panic!("not a bus event")
        };
        assert_eq!(value::get_i64(first.data(), "i"), Some(extra as i64));
    }
}
