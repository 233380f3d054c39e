//! The job-cache writer: one thread that owns every write to the job store and to the
//! `local_cache` tree, so request workers never wait on disk for returns.
//!
//! Back-pressure, not loss: the queue is bounded ([`QUEUE_CAPACITY`]); when it is full a
//! worker waits, which slows the minions that are returning — a return the master accepted
//! is never dropped. Returns waiting in the queue are written in one redb transaction.
//! The writer also applies `keep_jobs_seconds` retention every [`CLEAN_INTERVAL`].

use halite_jobcache::{JobStore, LocalCacheWriter, NewReturn, Value};
use halite_proto::value;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Pending job-cache operations before workers wait.
pub const QUEUE_CAPACITY: usize = 65_536;
/// How often expired jobs are removed.
pub const CLEAN_INTERVAL: Duration = Duration::from_secs(60);
const MAX_BATCH: usize = 1024;
/// The writer thread's nice value. Its work (one `local_cache` directory and file per
/// return) is off the request path, so when the cores are busy the request workers and the
/// publisher go first; the writer is never starved (a nice-10 thread still gets about a
/// tenth of a contended core), and a full queue makes the workers wait for it.
pub const WRITER_NICE: i32 = 10;

/// One write for the job cache.
pub enum JobOp {
    /// A job's load went out; the `local_cache` copy was already written synchronously.
    Load {
        /// Job id.
        jid: String,
        /// The saved load.
        load: Value,
        /// Expected minions.
        minions: Vec<String>,
    },
    /// A minion returned.
    Return {
        /// Job id.
        jid: String,
        /// Minion id.
        id: String,
        /// The full return load, msgpack-encoded: when the writer falls behind (a
        /// 10,000-minion publish is 10,000 `local_cache` directories), the queue holds these
        /// few hundred bytes per return instead of a tree of small allocations (heaptrack:
        /// ~57 MiB for a backlog at 10,000 minions).
        packed: Vec<u8>,
    },
}

/// Where the request handlers put jobs and returns. The daemon's is [`JobCache`] (the
/// writer thread plus `local_cache`); tests record.
pub trait JobSink: Send + Sync {
    /// A job went out: its load and expected minions. Salt's `local_cache` copy of the load
    /// must exist when this returns (the stock `salt` CLI reads `.load.p` right after the
    /// publish reply); the rest may be written later.
    fn save_load(&self, jid: &str, load: Value, minions: Vec<String>);
    /// A minion returned; `packed` is the msgpack of its full return load.
    fn add_return(&self, jid: String, id: String, packed: Vec<u8>);
}

/// The daemon's job sink: the `local_cache` load written at once, everything else queued
/// for the writer thread.
pub struct JobCache {
    /// The writer thread's queue.
    pub writer: JobWriter,
    /// Salt's `local_cache` tree.
    pub local: LocalCacheWriter,
}

impl JobSink for JobCache {
    fn save_load(&self, jid: &str, load: Value, minions: Vec<String>) {
        if let Err(e) = self.local.write_load(jid, &load, &minions) {
            tracing::warn!(%jid, "Could not write the job load to local_cache: {e}");
        }
        self.writer.send(JobOp::Load {
            jid: jid.to_owned(),
            load,
            minions,
        });
    }

    fn add_return(&self, jid: String, id: String, packed: Vec<u8>) {
        self.writer.send(JobOp::Return { jid, id, packed });
    }
}

/// Handle to the writer thread; dropping every handle stops it after it drains the queue.
#[derive(Clone)]
pub struct JobWriter {
    tx: Sender<JobOp>,
    room: Arc<Room>,
}

/// The queue's bound, counted beside an unbounded channel: `sync_channel` allocates and
/// touches all [`QUEUE_CAPACITY`] slots up front (6.3 MiB resident for an idle master,
/// heaptrack), while this holds only what is queued.
struct Room {
    capacity: usize,
    state: Mutex<RoomState>,
    freed: Condvar,
}

#[derive(Default)]
struct RoomState {
    queued: usize,
    /// The writer thread has ended: no sender waits for it any longer.
    closed: bool,
}

impl Room {
    fn new(capacity: usize) -> Self {
        Room {
            capacity,
            state: Mutex::default(),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RoomState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until an op fits and counts it; `false` when the writer is gone.
    fn take(&self) -> bool {
        let mut st = self.lock();
        while st.queued >= self.capacity && !st.closed {
            st = self.freed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.closed {
            return false;
        }
        st.queued += 1;
        true
    }

    /// `n` ops left the queue.
    fn give_back(&self, n: usize) {
        let mut st = self.lock();
        st.queued = st.queued.saturating_sub(n);
        drop(st);
        self.freed.notify_all();
    }
}

/// Marks the room closed when the writer thread ends, however it ends.
struct CloseOnDrop(Arc<Room>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.freed.notify_all();
    }
}

/// Unix seconds now (the writer's only clock).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl JobWriter {
    /// Starts the writer thread.
    pub fn spawn(
        store: Arc<dyn JobStore>,
        local: LocalCacheWriter,
        keep_jobs_seconds: u64,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = channel();
        let room = Arc::new(Room::new(QUEUE_CAPACITY));
        let closer = CloseOnDrop(room.clone());
        let h = std::thread::Builder::new()
            .name("job-cache".into())
            .spawn(move || {
                let closer = closer;
                if let Err(e) = halite_daemon::lower_thread_priority(WRITER_NICE) {
                    tracing::debug!("Job cache writer keeps the master's CPU priority: {e}");
                }
                writer_loop(rx, &closer.0, store.as_ref(), &local, keep_jobs_seconds)
            })
            .expect("spawning the job-cache thread");
        (Self { tx, room }, h)
    }

    /// Queues a write, waiting while the queue is full.
    pub fn send(&self, op: JobOp) {
        if !self.room.take() || self.tx.send(op).is_err() {
            tracing::error!("Job cache writer has stopped; a job cache write was lost");
        }
    }
}

fn writer_loop(
    rx: Receiver<JobOp>,
    room: &Room,
    store: &dyn JobStore,
    local: &LocalCacheWriter,
    keep: u64,
) {
    let mut last_clean = Instant::now();
    clean(store, local, keep);
    loop {
        let first = match rx.recv_timeout(CLEAN_INTERVAL) {
            Ok(op) => Some(op),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut batch: Vec<JobOp> = first.into_iter().collect();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        write_batch(store, local, &batch);
        room.give_back(batch.len());
        if last_clean.elapsed() >= CLEAN_INTERVAL {
            clean(store, local, keep);
            last_clean = Instant::now();
        }
    }
}

fn write_batch(store: &dyn JobStore, local: &LocalCacheWriter, batch: &[JobOp]) {
    let now = unix_now();
    let mut loads = Vec::new();
    // The job directory of the last return's jid: a batch is mostly returns of one job.
    let mut job_dir: Option<(&str, PathBuf)> = None;
    for op in batch {
        match op {
            JobOp::Load { jid, load, minions } => {
                if let Err(e) = store.save_load(jid, load, minions, now) {
                    tracing::error!(%jid, error = %e, "Could not save the job load");
                }
            }
            JobOp::Return { jid, id, packed } => match value::decode(packed) {
                Ok(load) => {
                    let dir = match &job_dir {
                        Some((last, dir)) if *last == jid.as_str() => Ok(dir),
                        _ => local
                            .jid_dir(jid)
                            .map(|dir| &job_dir.insert((jid.as_str(), dir)).1),
                    };
                    let written = dir.and_then(|dir| local.write_return_in(dir, jid, id, &load));
                    if let Err(e) = written {
                        tracing::warn!(%jid, minion = %id, error = %e, "Could not write the return to local_cache");
                    }
                    loads.push((jid, id, load));
                }
                // Encoded by this process from a decoded value: cannot happen short of a bug.
                Err(e) => {
                    tracing::error!(%jid, minion = %id, error = %e, "Queued return does not decode; not stored")
                }
            },
        }
    }
    let returns: Vec<NewReturn<'_>> = loads
        .iter()
        .map(|(jid, id, load)| NewReturn {
            jid,
            minion_id: id,
            load,
        })
        .collect();
    if !returns.is_empty() {
        if let Err(e) = store.add_returns(&returns, now) {
            tracing::error!(error = %e, count = returns.len(), "Could not store returns in the job cache");
        }
    }
}

fn clean(store: &dyn JobStore, local: &LocalCacheWriter, keep: u64) {
    let now = unix_now();
    match store.clean_expired(now, keep) {
        Ok(0) => {}
        Ok(n) => tracing::info!(removed = n, "Removed expired jobs from the job cache"),
        Err(e) => tracing::error!(error = %e, "Job cache retention failed"),
    }
    if let Err(e) = local.clean_expired(now, keep) {
        tracing::warn!(error = %e, "local_cache retention failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_full_queue_makes_senders_wait_until_the_writer_frees_room() {
        let room = Arc::new(Room::new(2));
        assert!(room.take() && room.take());
        let waiting = {
            let room = room.clone();
            std::thread::spawn(move || room.take())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !waiting.is_finished(),
            "a third op waits while two are queued"
        );
        room.give_back(1);
        assert!(waiting.join().unwrap());
        assert_eq!(room.lock().queued, 2);
    }

    #[test]
    fn senders_waiting_on_a_full_queue_give_up_when_the_writer_ends() {
        let room = Arc::new(Room::new(1));
        assert!(room.take());
        let waiting = {
            let room = room.clone();
            std::thread::spawn(move || room.take())
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(CloseOnDrop(room.clone()));
        assert!(!waiting.join().unwrap());
    }
}
