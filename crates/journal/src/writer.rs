//! Moving events from the bus into the journal.
//!
//! One thread reads the journal's in-process bus subscription (lossless: a pull-socket
//! sender waits while the journal is a budget behind, see `halite_bus::Subscription`),
//! takes everything queued, appends it in one durable transaction, and then announces the
//! committed batch to the replay sessions. The subscription is the queue: while a batch
//! commits, the next one gathers there, and a batch is not committed sooner than
//! [`COMMIT_INTERVAL`] after the one before it, so events arriving a few at a time (a
//! sign-in storm fires one per sign-in) share a transaction instead of paying one each.

use crate::store::Journal;
use halite_bus::{Event, RecvError, Subscription, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

/// Events appended in one transaction at most.
pub const MAX_BATCH_EVENTS: usize = 16_384;

/// Body bytes appended in one transaction at most (one event may exceed it alone).
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The least time from one commit to the next. Each transaction costs a synchronous disk
/// write whatever it holds; waiting this long for the next lets events that arrive at a
/// steady few thousand per second share it (in a 5,000-minion auth storm the journal
/// thread's CPU fell by a fifth to a half). Replay clients get events at most this much later; the live bus is not
/// delayed. Lone events are committed at once.
pub(crate) const COMMIT_INTERVAL: Duration = Duration::from_millis(2);

/// How often an idle journal applies its age limit.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// Committed batches held for replay sessions; a session further behind reads the journal.
/// A batch is freed once every session took it, so this bounds what one stuck client pins:
/// at most this many batches of [`MAX_BATCH_BYTES`].
pub(crate) const LIVE_CAPACITY: usize = 64;

/// Why events are missing after a failed append.
const APPEND_FAILED: &str = "appending to the journal failed";

/// Why events are missing when the bus refused them to the journal.
const REFUSED: &str = "the journal writer was too far behind the daemon's own events";

/// Events not journaled are logged at most this often.
const LOSS_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Tag of the entry the journal stores where it missed events: `{"missed": N, "reason": ...}`.
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
    write: std::thread::JoinHandle<()>,
}

impl Writer {
    /// Starts journaling what `bus` receives until `stop` is cancelled.
    ///
    /// The writer runs on its own thread (with a one-thread runtime) rather than on the
    /// daemon's runtime: appends block on the disk, and under a flood the daemon's workers
    /// are busy reading and writing bus sockets.
    pub(crate) fn spawn(
        journal: Arc<Journal>,
        bus: Subscription,
        live: broadcast::Sender<Arc<Committed>>,
        stop: CancellationToken,
    ) -> crate::Result<Writer> {
        let path = journal.path().to_owned();
        let io = |source| crate::Error::Io {
            what: "cannot start a thread for",
            path: path.clone(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(io)?;
        let write = std::thread::Builder::new()
            .name("journal-write".into())
            .spawn(move || {
                runtime.block_on(write_loop(&journal, bus, &live, stop, COMMIT_INTERVAL))
            })
            .map_err(io)?;
        Ok(Writer { write })
    }

    /// Waits until every event taken from the bus is committed.
    pub(crate) async fn join(self) {
        let write = self.write;
        let _ = tokio::task::spawn_blocking(move || write.join()).await;
    }
}

/// Only bus events count against a batch's size.
fn body_len(e: &Entry) -> usize {
    match e {
        Entry::Bus(ev) => ev.body().len(),
        Entry::Gap(_) => 0,
    }
}

/// Appends what `bus` delivers in batches until `stop`; then stops the subscription,
/// appends what it still holds, and returns.
async fn write_loop(
    journal: &Journal,
    mut bus: Subscription,
    live: &broadcast::Sender<Arc<Committed>>,
    stop: CancellationToken,
    commit_interval: Duration,
) {
    let mut loss = LossLog::new();
    let mut last_commit: Option<Instant> = None;
    // Events lost to failed appends, not yet marked in the journal.
    let mut failed = 0u64;
    let prune = || match journal.prune(now_us()) {
        Ok(0) => {}
        Ok(n) => debug!(events = n, "Event journal pruned"),
        Err(e) => error!(error = %e, "Event journal prune failed"),
    };
    // Events that aged out while the master was stopped go at once.
    prune();
    let mut stopping = false;
    loop {
        let first = if stopping {
            None
        } else {
            tokio::select! {
                biased;
                r = bus.recv() => Some(r),
                _ = stop.cancelled() => {
                    // Nothing more is queued for the journal; what is queued is appended.
                    bus.close();
                    stopping = true;
                    None
                }
                _ = tokio::time::sleep(PRUNE_INTERVAL) => {
                    prune();
                    continue;
                }
            }
        };
        let mut batch = Vec::new();
        if failed > 0 {
            batch.push(Entry::gap(failed, APPEND_FAILED));
        }
        let mut size = 0;
        let mut more = true;
        match first {
            Some(Ok(event)) => batch.push(Entry::Bus(event)),
            Some(Err(RecvError::Lagged(n))) => {
                loss.add(n, REFUSED);
                batch.push(Entry::gap(n, REFUSED));
            }
            Some(Err(RecvError::Closed)) => more = false,
            None => {}
        }
        if let Some(e) = batch.last() {
            size += body_len(e);
        }
        if let Some(wait) = last_commit
            .map(|t| commit_interval.saturating_sub(t.elapsed()))
            .filter(|w| more && !stopping && !w.is_zero())
        {
            tokio::select! {
                biased;
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        while more && batch.len() < MAX_BATCH_EVENTS && size < MAX_BATCH_BYTES {
            let entry = match bus.try_recv() {
                Ok(event) => Entry::Bus(event),
                Err(TryRecvError::Lagged(n)) => {
                    loss.add(n, REFUSED);
                    Entry::gap(n, REFUSED)
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            };
            size += body_len(&entry);
            batch.push(entry);
        }
        if batch.is_empty() {
            if stopping || !more {
                break;
            }
            continue;
        }
        let appended = journal.append(batch.iter().map(Entry::body), now_us());
        last_commit = Some(Instant::now());
        match appended {
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
                if stopping {
                    break;
                }
            }
        }
    }
    if loss.total > 0 {
        error!(
            total = loss.total,
            "Event journal stopping; events were missed while it ran"
        );
    }
    debug!("Event journal writer stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Retention;
    use halite_bus::{BusServer, BusSockets, EVENT_OVERHEAD, SUBSCRIBER_BACKLOG_BYTES};
    use halite_proto::value::{self, map};
    use halite_proto::Value;
    use std::path::Path;

    /// A master bus in `dir`.
    async fn bus_in(dir: &Path) -> BusServer {
        BusServer::bind(&BusSockets::master(dir), 1 << 20)
            .await
            .unwrap()
    }

    /// A journal in `dir` that keeps everything.
    fn journal_in(dir: &Path) -> Journal {
        let retention = Retention {
            max_bytes: 1 << 30,
            max_age: None,
        };
        Journal::open(dir.join("events.redb"), retention).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_arriving_within_the_commit_interval_share_one_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let server = bus_in(dir.path()).await;
        let bus = server.handle();
        let sub = bus.subscribe();
        let journal = Arc::new(journal_in(dir.path()));
        let (live, mut committed) = broadcast::channel(LIVE_CAPACITY);
        let stop = CancellationToken::new();
        let writer = tokio::spawn({
            let (journal, stop) = (journal.clone(), stop.clone());
            async move {
                write_loop(&journal, sub, &live, stop, Duration::from_millis(500)).await;
            }
        });
        let fire = |i: i64| bus.fire("t", map([("i", Value::from(i))])).unwrap();
        fire(0);
        // The first event after a quiet spell is committed alone, at once.
        let first = committed.recv().await.unwrap();
        assert_eq!(first.events.len(), 1);
        // Events trickling in right after a commit wait for the interval and share the next.
        for i in 1..=3 {
            fire(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let batch = committed.recv().await.unwrap();
        assert_eq!((batch.first_id, batch.events.len()), (first.end_id(), 3));
        stop.cancel();
        writer.await.unwrap();
        assert_eq!(journal.next_id().unwrap(), batch.end_id());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_the_bus_refused_to_a_stuck_journal_leave_a_gap_entry_in_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let server = bus_in(dir.path()).await;
        let bus = server.handle();
        let sub = bus.subscribe();
        // In-process fires never wait: past two budgets, the journal is refused some.
        let pad = value::s("x".repeat(900 << 10));
        let per_event = (900 << 10) + EVENT_OVERHEAD;
        let total = 2 * SUBSCRIBER_BACKLOG_BYTES / per_event + 5;
        for i in 0..total {
            bus.fire("big", map([("i", Value::from(i)), ("pad", pad.clone())]))
                .unwrap();
        }
        let refused = bus.dropped_events();
        assert!(refused > 0, "nothing was refused");
        let journal = journal_in(dir.path());
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let stop = CancellationToken::new();
        stop.cancel();
        write_loop(&journal, sub, &live, stop, COMMIT_INTERVAL).await;
        let kept = total as u64 - refused;
        assert_eq!(journal.next_id().unwrap(), kept + 2);
        let records = journal.read(0, u64::MAX, usize::MAX, usize::MAX).unwrap();
        for (k, r) in records.iter().take(kept as usize).enumerate() {
            let (_, data) = halite_proto::event::unpack_event(&r.body).unwrap();
            assert_eq!(value::get_i64(&data, "i"), Some(k as i64));
        }
        let gap = &records.last().unwrap().body;
        let (tag, data) = halite_proto::event::unpack_event(gap).unwrap();
        assert_eq!(tag, GAP_TAG);
        assert_eq!(value::get_i64(&data, "missed"), Some(refused as i64));
        assert_eq!(value::get_str(&data, "reason"), Some(REFUSED));
    }
}
