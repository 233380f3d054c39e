//! The job-cache writer: one thread that owns every write to the job store and to the
//! `local_cache` tree, so request workers never wait on disk for returns.
//!
//! Back-pressure, not loss: the queue is bounded ([`QUEUE_CAPACITY`] writes,
//! [`QUEUE_BYTES`] bytes of them); when it is full a worker waits, which slows the minions that are returning — a return the master accepted
//! is never dropped. Returns waiting in the queue are written in one redb transaction.
//!
//! A return is acknowledged to its minion only once it is written: the request handler
//! holds the reply and hands it to the writer ([`Ack`]), which sends it once the batch
//! holding the return is committed to redb; the `local_cache` files (with `job_cache` on)
//! are written after the replies went out. Such a return is recorded in redb as owed to the
//! tree in the same transaction and settled once its file exists; a master that died in
//! between writes what is still owed when it starts again.
//! So a crash of the master process loses no return a minion was told the master has
//! (redb is fsynced at each commit, so a power loss does not lose them from redb either;
//! the tree's return files are written in place without fsync, as they are only Salt's
//! copy); a minion whose return was not acknowledged sends it again (`return_retry_tries`).
//! Group commit: one redb commit (one `fsync`) acknowledges every return of the batch.
//! While the job cache cannot be written (below), a return is acknowledged once it is
//! kept in memory for retrying, so minions do not resend it over and over; a crash during
//! such an outage loses those.
//!
//! `job_cache: False` (Salt's option: the master keeps no returns in its job cache) keeps
//! the returns out of the `local_cache` tree, as a stock master does; Halite still stores
//! them in redb, where `halite-run jobs.*`, `find_job` and peer publishing read them. The
//! loads are written either way (the stock `salt` CLI reads `.load.p`).
//! The writer also applies `keep_jobs_seconds` retention every [`CLEAN_INTERVAL`].
//!
//! When the job cache cannot be written (a read-only or full file system, a permission
//! taken away), writes that failed on I/O stay in memory, still counted in the queue's
//! bound, and are retried every [`RETRY_INTERVAL`] in their order until they succeed; the
//! first failure is logged with the path, then a reminder every [`FAILING_LOG_INTERVAL`],
//! and the recovery. Meanwhile [`JobSink::save_load`] refuses new jobs with that error, as
//! Salt refuses to publish when `prep_jid` cannot store a jid. A write that can never
//! succeed (a value too deep to store) is logged and dropped; a write that panics is
//! retried alone and dropped if it panics again, so one bad return never stops the writer.
//! Writes still failing when the master stops are logged as lost, with the path.

use crate::boundary::{self, Stats};
use halite_jobcache::{JobStore, LocalCacheWriter, NewReturn, Value};
use halite_proto::value;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Pending job-cache operations before workers wait.
pub const QUEUE_CAPACITY: usize = 65_536;
/// Bytes of pending job-cache writes before workers wait (a return counts its packed size;
/// a load [`LOAD_BYTES`] plus its minion list). One write larger than this is taken when
/// the queue is empty.
pub const QUEUE_BYTES: usize = 128 << 20;
/// What a queued load counts for in [`QUEUE_BYTES`] besides its minion list (a publish
/// load is a clear request's load: usually far smaller).
const LOAD_BYTES: usize = 64 << 10;
/// How often expired jobs are removed.
pub const CLEAN_INTERVAL: Duration = Duration::from_secs(60);
/// How often writes that failed on I/O are tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// How often a job cache that still cannot be written is logged again.
pub const FAILING_LOG_INTERVAL: Duration = Duration::from_secs(60);
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
        /// Sends the minion its reply once the return is written (taken when sent).
        ack: Option<Ack>,
    },
}

/// Acknowledges a return to its minion (sends the held `_return` reply).
pub type Ack = Box<dyn FnOnce() + Send>;

impl JobOp {
    /// What this write counts for in [`QUEUE_BYTES`].
    fn bytes(&self) -> usize {
        match self {
            JobOp::Load { minions, .. } => {
                LOAD_BYTES + minions.iter().map(|m| m.len() + 32).sum::<usize>()
            }
            JobOp::Return {
                jid, id, packed, ..
            } => packed.len() + jid.len() + id.len() + 64,
        }
    }
}

/// Where the request handlers put jobs and returns. The daemon's is [`JobCache`] (the
/// writer thread plus `local_cache`); tests record.
pub trait JobSink: Send + Sync {
    /// A job is about to go out: its load and expected minions. Salt's `local_cache` copy
    /// of the load must exist when this returns `Ok` (the stock `salt` CLI reads `.load.p`
    /// right after the publish reply); the rest may be written later. `Err` (naming the
    /// path that failed) when the job cache cannot take a new job: the job must not go out.
    fn save_load(&self, jid: &str, load: Value, minions: Vec<String>) -> Result<(), String>;
    /// A minion returned; `packed` is the msgpack of its full return load. `ack` is called
    /// once the return is written (or kept in memory while the job cache cannot be
    /// written); never for a return that is lost.
    fn add_return(&self, jid: String, id: String, packed: Vec<u8>, ack: Ack);
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
    fn save_load(&self, jid: &str, load: Value, minions: Vec<String>) -> Result<(), String> {
        if let Some(e) = self.writer.failing() {
            return Err(e);
        }
        self.local
            .write_load(jid, &load, &minions)
            .map_err(|e| e.to_string())?;
        self.writer.send(JobOp::Load {
            jid: jid.to_owned(),
            load,
            minions,
        });
        Ok(())
    }

    fn add_return(&self, jid: String, id: String, packed: Vec<u8>, ack: Ack) {
        self.writer.send(JobOp::Return {
            jid,
            id,
            packed,
            ack: Some(ack),
        });
    }
}

/// Handle to the writer thread; dropping every handle stops it after it drains the queue.
#[derive(Clone)]
pub struct JobWriter {
    tx: Sender<JobOp>,
    room: Arc<Room>,
    health: Arc<Health>,
}

/// What the writer last saw: `None` while writes succeed; the error (naming the path) of a
/// write kept for retrying while the job cache cannot be written.
#[derive(Default)]
struct Health(Mutex<Option<String>>);

impl Health {
    fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, failing: Option<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = failing;
    }
}

/// The queue's bound, counted beside an unbounded channel: `sync_channel` allocates and
/// touches all [`QUEUE_CAPACITY`] slots up front (6.3 MiB resident for an idle master,
/// heaptrack), while this holds only what is queued.
struct Room {
    capacity: usize,
    max_bytes: usize,
    state: Mutex<RoomState>,
    freed: Condvar,
}

#[derive(Default)]
struct RoomState {
    queued: usize,
    /// [`JobOp::bytes`] of the queued writes.
    bytes: usize,
    /// The writer thread has ended: no sender waits for it any longer.
    closed: bool,
}

impl Room {
    fn new(capacity: usize, max_bytes: usize) -> Self {
        Room {
            capacity,
            max_bytes,
            state: Mutex::default(),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RoomState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until an op of `bytes` fits (any op fits an empty queue) and counts it;
    /// `false` when the writer is gone.
    fn take(&self, bytes: usize) -> bool {
        let mut st = self.lock();
        while (st.queued >= self.capacity
            || (st.queued > 0 && st.bytes.saturating_add(bytes) > self.max_bytes))
            && !st.closed
        {
            st = self.freed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.closed {
            return false;
        }
        st.queued += 1;
        st.bytes = st.bytes.saturating_add(bytes);
        true
    }

    /// `n` ops of `bytes` in all left the queue.
    fn give_back(&self, n: usize, bytes: usize) {
        let mut st = self.lock();
        st.queued = st.queued.saturating_sub(n);
        st.bytes = st.bytes.saturating_sub(bytes);
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
    /// Starts the writer thread; panics in it are counted in `stats`.
    /// Returns go into the `local_cache` tree when `returns_in_tree` (Salt's `job_cache`).
    pub fn spawn(
        store: Arc<dyn JobStore>,
        local: LocalCacheWriter,
        returns_in_tree: bool,
        keep_jobs_seconds: u64,
        stats: Arc<Stats>,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = channel();
        let room = Arc::new(Room::new(QUEUE_CAPACITY, QUEUE_BYTES));
        let health = Arc::new(Health::default());
        let closer = CloseOnDrop(room.clone());
        let writer = Writer {
            store,
            local,
            returns_in_tree,
            keep: keep_jobs_seconds,
            health: health.clone(),
            stats,
        };
        let h = std::thread::Builder::new()
            .name("job-cache".into())
            .spawn(move || {
                let closer = closer;
                if let Err(e) = halite_daemon::lower_thread_priority(WRITER_NICE) {
                    tracing::debug!("Job cache writer keeps the master's CPU priority: {e}");
                }
                writer.run(rx, &closer.0)
            })
            .expect("spawning the job-cache thread");
        (Self { tx, room, health }, h)
    }

    /// Queues a write, waiting while the queue is full.
    pub fn send(&self, op: JobOp) {
        if !self.room.take(op.bytes()) || self.tx.send(op).is_err() {
            tracing::error!("Job cache writer has stopped; a job cache write was lost");
        }
    }

    /// The error (naming the path) that keeps the job cache from being written now, if any.
    pub fn failing(&self) -> Option<String> {
        self.health.get()
    }

    /// A view of the queue for the metrics; unlike a `JobWriter`, it does not keep the
    /// writer thread running.
    pub fn depth(&self) -> QueueDepth {
        QueueDepth {
            room: self.room.clone(),
            health: self.health.clone(),
        }
    }
}

/// What waits in the job-cache writer's queue (see [`JobWriter::depth`]).
pub struct QueueDepth {
    room: Arc<Room>,
    health: Arc<Health>,
}

impl QueueDepth {
    /// Writes queued, their bytes, and whether the job cache is failing, now.
    pub fn get(&self) -> halite_metrics::JobCacheQueue {
        let (queued, bytes) = {
            let st = self.room.lock();
            (st.queued, st.bytes)
        };
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        halite_metrics::JobCacheQueue {
            depth: wide(queued),
            bytes: wide(bytes),
            failing: self.health.get().is_some(),
        }
    }
}

/// One queued write and which of its parts are done.
struct Pending {
    op: JobOp,
    /// The `local_cache` part (a load's was written before it was queued).
    local_done: bool,
    /// The redb part.
    stored: bool,
    /// Why the last try failed on I/O.
    error: Option<String>,
}

impl Pending {
    /// A queued write; a return's `local_cache` part is done from the start unless
    /// `returns_in_tree`.
    fn new(op: JobOp, returns_in_tree: bool) -> Self {
        let local_done = matches!(op, JobOp::Load { .. }) || !returns_in_tree;
        Pending {
            op,
            local_done,
            stored: false,
            error: None,
        }
    }

    fn done(&self) -> bool {
        self.local_done && self.stored
    }

    /// Sends a return's held reply (once).
    fn acknowledge(&mut self) {
        if let JobOp::Return { ack, .. } = &mut self.op {
            if let Some(ack) = ack.take() {
                ack();
            }
        }
    }

    fn describe(&self) -> String {
        match &self.op {
            JobOp::Load { jid, .. } => format!("the load of job {jid}"),
            JobOp::Return { jid, id, .. } => format!("the return of {id} for job {jid}"),
        }
    }
}

/// What the writer thread owns.
struct Writer {
    store: Arc<dyn JobStore>,
    local: LocalCacheWriter,
    /// Salt's `job_cache`: returns are written to the `local_cache` tree too.
    returns_in_tree: bool,
    keep: u64,
    health: Arc<Health>,
    stats: Arc<Stats>,
}

/// Whether the job cache is failing, and since when it was last logged.
struct Failing {
    since_logged: Instant,
}

impl Writer {
    fn run(&self, rx: Receiver<JobOp>, room: &Room) {
        let mut last_clean = Instant::now();
        boundary::isolate(
            &self.stats,
            "writing the returns local_cache is owed",
            || recover_owed(self.store.as_ref(), &self.local),
        );
        self.clean();
        // Writes not done yet, oldest first: after a failure, the ones kept for retrying
        // come before newer ones.
        let mut pending: Vec<Pending> = Vec::new();
        let mut failing: Option<Failing> = None;
        let mut last_try = Instant::now();
        loop {
            let wait = if failing.is_some() {
                RETRY_INTERVAL.saturating_sub(last_try.elapsed())
            } else {
                CLEAN_INTERVAL
            };
            match rx.recv_timeout(wait) {
                Ok(op) => pending.push(Pending::new(op, self.returns_in_tree)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            for _ in 0..MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => pending.push(Pending::new(op, self.returns_in_tree)),
                    Err(_) => break,
                }
            }
            // While the cache is failing, new writes wait with the others for the next try.
            if failing.is_none() || last_try.elapsed() >= RETRY_INTERVAL {
                let before = pending.len();
                let bytes = |p: &[Pending]| p.iter().map(|p| p.op.bytes()).sum::<usize>();
                let bytes_before = bytes(&pending[..]);
                pending = self.write(pending);
                last_try = Instant::now();
                let bytes_left = bytes(&pending[..]);
                room.give_back(
                    before - pending.len(),
                    bytes_before.saturating_sub(bytes_left),
                );
                self.report(&pending, &mut failing);
            }
            if last_clean.elapsed() >= CLEAN_INTERVAL {
                self.clean();
                last_clean = Instant::now();
            }
        }
        if !pending.is_empty() {
            let lost = self.write(pending);
            if let Some(first) = lost.first() {
                tracing::error!(
                    "The job cache cannot be written ({}); {} writes kept in memory are lost at shutdown, the first being {}",
                    first.error.as_deref().unwrap_or("unknown error"),
                    lost.len(),
                    first.describe()
                );
            }
        }
    }

    /// Writes `batch`; answers what failed on I/O, to try again. A batch that panics is
    /// written again one write at a time, and a write that panics alone is dropped.
    /// Every return of the batch is acknowledged by then ([`write_batch`] does it once redb
    /// has them; here for those whose batch panicked first): it is stored, or kept in
    /// memory to retry (the job cache failing), or can never be stored (logged).
    fn write(&self, mut batch: Vec<Pending>) -> Vec<Pending> {
        let written = boundary::isolate(&self.stats, "the job-cache writer", || {
            write_batch(self.store.as_ref(), &self.local, &mut batch);
        });
        if written.is_none() {
            for p in &mut batch {
                let what = p.describe();
                let alone = boundary::isolate(&self.stats, format!("writing {what}"), || {
                    write_batch(self.store.as_ref(), &self.local, std::slice::from_mut(p));
                });
                if alone.is_none() {
                    tracing::error!("Dropped {what}: writing it panics");
                    p.local_done = true;
                    p.stored = true;
                }
            }
        }
        batch.iter_mut().for_each(Pending::acknowledge);
        batch.retain(|p| !p.done());
        batch
    }

    /// Logs the job cache failing, still failing (now and then) and recovering, and keeps
    /// [`Health`] for [`JobWriter::failing`].
    fn report(&self, pending: &[Pending], failing: &mut Option<Failing>) {
        let error = pending.iter().find_map(|p| p.error.clone());
        match (&error, failing.as_mut()) {
            (Some(e), None) => {
                tracing::error!(
                    "The job cache cannot be written: {e}; {} writes are kept in memory and retried every {}s, and new jobs are refused until it can",
                    pending.len(),
                    RETRY_INTERVAL.as_secs()
                );
                *failing = Some(Failing {
                    since_logged: Instant::now(),
                });
            }
            (Some(e), Some(f)) if f.since_logged.elapsed() >= FAILING_LOG_INTERVAL => {
                tracing::error!(
                    "The job cache still cannot be written: {e}; {} writes are waiting",
                    pending.len()
                );
                f.since_logged = Instant::now();
            }
            (None, Some(_)) => {
                tracing::info!(
                    "The job cache can be written again; the writes kept in memory are stored"
                );
                *failing = None;
            }
            _ => {}
        }
        self.health.set(error);
    }

    fn clean(&self) {
        boundary::isolate(&self.stats, "job cache retention", || {
            clean(self.store.as_ref(), &self.local, self.keep)
        });
    }
}

/// One try at every part of `batch` not done yet: loads and returns into redb (the returns
/// in one transaction, or one at a time when it fails for something other than I/O, so one
/// unstorable return does not hold back the others), then every return of the batch is
/// acknowledged, then the returns go into the `local_cache` tree. A return owed to the
/// tree is recorded as owed in its redb transaction and settled once its file is written,
/// so a crash between the two leaves it for [`recover_owed`]. Each part that succeeds, or
/// fails in a way no retry can fix (logged), is marked done; one that fails on I/O keeps
/// its error.
fn write_batch(store: &dyn JobStore, local: &LocalCacheWriter, batch: &mut [Pending]) {
    let now = unix_now();
    let mut returns: Vec<(usize, Value)> = Vec::new();
    for (i, p) in batch.iter_mut().enumerate() {
        p.error = None;
        match &p.op {
            JobOp::Load { jid, load, minions } => {
                if !p.stored {
                    let saved = store.save_load(jid, load, minions, now);
                    settle(&mut p.stored, &mut p.error, saved, || {
                        format!("Could not save the load of job {jid}")
                    });
                }
            }
            JobOp::Return {
                jid, id, packed, ..
            } => {
                if p.stored && p.local_done {
                    continue;
                }
                match value::decode(packed) {
                    Ok(load) => returns.push((i, load)),
                    // Encoded by this process from a decoded value: cannot happen short of a bug.
                    Err(e) => {
                        tracing::error!(%jid, minion = %id, error = %e, "Queued return does not decode; not stored");
                        p.local_done = true;
                        p.stored = true;
                    }
                }
            }
        }
    }
    store_returns(store, batch, &returns, now);
    batch.iter_mut().for_each(Pending::acknowledge);
    write_tree(store, local, batch, &returns);
}

/// The redb part of the returns of `batch` not stored yet (`returns`: their index and load).
fn store_returns(
    store: &dyn JobStore,
    batch: &mut [Pending],
    returns: &[(usize, Value)],
    now: u64,
) {
    let unstored: Vec<&(usize, Value)> =
        returns.iter().filter(|(i, _)| !batch[*i].stored).collect();
    if unstored.is_empty() {
        return;
    }
    let all = {
        let rows: Vec<NewReturn<'_>> = unstored
            .iter()
            .filter_map(|(i, load)| new_return(&batch[*i], load))
            .collect();
        store.add_returns(&rows, now)
    };
    match all {
        Ok(_) => unstored.iter().for_each(|(i, _)| batch[*i].stored = true),
        Err(e) if e.is_retryable() => {
            let e = e.to_string();
            unstored
                .iter()
                .for_each(|(i, _)| batch[*i].error = Some(e.clone()));
        }
        // Something in the batch can never be stored: one at a time, so only it is dropped.
        Err(_) => {
            for (i, load) in unstored {
                let Some(stored) =
                    new_return(&batch[*i], load).map(|r| store.add_returns(&[r], now))
                else {
                    continue;
                };
                let p = &mut batch[*i];
                let what = p.describe();
                settle(&mut p.stored, &mut p.error, stored, || {
                    format!("Could not store {what} in the job cache")
                });
            }
        }
    }
}

/// The `local_cache` part of the stored returns of `batch` (`returns`: their index and
/// load), then what they owed is settled in redb.
fn write_tree(
    store: &dyn JobStore,
    local: &LocalCacheWriter,
    batch: &mut [Pending],
    returns: &[(usize, Value)],
) {
    // The job directory of the last return's jid: a batch is mostly returns of one job.
    let mut job_dir: Option<(String, PathBuf)> = None;
    let mut written: Vec<usize> = Vec::new();
    for (i, load) in returns {
        let p = &mut batch[*i];
        let JobOp::Return { jid, id, .. } = &p.op else {
            continue;
        };
        // Written only once stored: what the tree holds, redb holds.
        if p.local_done || !p.stored {
            continue;
        }
        let dir = match &job_dir {
            Some((last, dir)) if last == jid => Ok(dir.clone()),
            _ => local.jid_dir(jid).inspect(|dir| {
                job_dir = Some((jid.clone(), dir.clone()));
            }),
        };
        let outcome = dir.and_then(|dir| local.write_return_in(&dir, jid, id, load));
        let what = || format!("Could not write the return of {id} for job {jid} to local_cache");
        let mut error = None;
        settle(&mut p.local_done, &mut error, outcome, what);
        if error.is_some() {
            p.error = error;
        } else {
            written.push(*i);
        }
    }
    let done: Vec<(&str, &str)> = written
        .iter()
        .filter_map(|i| match &batch[*i].op {
            JobOp::Return { jid, id, .. } => Some((jid.as_str(), id.as_str())),
            JobOp::Load { .. } => None,
        })
        .collect();
    settle_written(store, &done);
}

/// Writes the `local_cache` files of returns stored but not written when the master last
/// stopped (it died between the two), as the writer starts.
fn recover_owed(store: &dyn JobStore, local: &LocalCacheWriter) {
    let owed = match store.owed() {
        Ok(owed) => owed,
        Err(e) => {
            tracing::error!("Cannot read which returns local_cache is owed: {e}");
            return;
        }
    };
    if owed.is_empty() {
        return;
    }
    let mut done = Vec::new();
    for (jid, ret) in &owed {
        // The job directory may be the one thing the crash left, without its `jid` file.
        let written = local
            .prep_jid(jid)
            .and_then(|dir| local.write_return_in(&dir, jid, &ret.minion_id, &ret.load));
        match written {
            Ok(_) => done.push((jid.as_str(), ret.minion_id.as_str())),
            Err(e) => tracing::error!(
                "Could not write the return of {} for job {jid} to local_cache: {e}",
                ret.minion_id
            ),
        }
    }
    tracing::info!(
        "Wrote {} of {} returns the last run left out of local_cache",
        done.len(),
        owed.len()
    );
    settle_written(store, &done);
}

/// Records `done` (`(jid, minion)`) as written to `local_cache`. On failure they stay
/// owed: the next start writes them again, and a whole file already there is skipped.
fn settle_written(store: &dyn JobStore, done: &[(&str, &str)]) {
    if let Err(e) = store.settle_owed(done) {
        tracing::warn!(
            "Could not record {} local_cache returns as written: {e}",
            done.len()
        );
    }
}

/// The store's row for a queued return.
fn new_return<'a>(p: &'a Pending, load: &'a Value) -> Option<NewReturn<'a>> {
    match &p.op {
        JobOp::Return { jid, id, .. } => Some(NewReturn {
            jid,
            minion_id: id,
            load,
            owed: !p.local_done,
        }),
        JobOp::Load { .. } => None,
    }
}

/// Records the outcome of one part of a write: done when it worked or can never work
/// (logged), kept with its error when it failed on I/O.
fn settle<T>(
    done: &mut bool,
    error: &mut Option<String>,
    outcome: Result<T, halite_jobcache::Error>,
    what: impl FnOnce() -> String,
) {
    match outcome {
        Ok(_) => *done = true,
        Err(e) if e.is_retryable() => *error = Some(e.to_string()),
        Err(e) => {
            tracing::error!("{}: {e}; it cannot be stored and is dropped", what());
            *done = true;
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
    use halite_jobcache::{Job, JobSummary, MinionReturn, RedbJobStore, ReturnStatus};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A redb store that fails on demand: every call while `broken` (an I/O error, as a
    /// read-only file system gives), returns of `poison` always (a value it cannot store),
    /// and it panics on returns of `panics`.
    struct Faulty {
        inner: RedbJobStore,
        broken: AtomicBool,
        poison: Option<&'static str>,
        panics: Option<&'static str>,
    }

    const STORE_PATH: &str = "/srv/cache/jobs.redb";

    impl Faulty {
        fn check(&self) -> halite_jobcache::Result<()> {
            if self.broken.load(Ordering::SeqCst) {
                return Err(halite_jobcache::Error::Io {
                    path: STORE_PATH.into(),
                    source: std::io::Error::from_raw_os_error(30),
                });
            }
            Ok(())
        }
    }

    impl JobStore for Faulty {
        fn save_load(
            &self,
            jid: &str,
            load: &Value,
            minions: &[String],
            now: u64,
        ) -> halite_jobcache::Result<()> {
            self.check()?;
            self.inner.save_load(jid, load, minions, now)
        }

        fn add_return(
            &self,
            jid: &str,
            minion_id: &str,
            load: &Value,
            now: u64,
        ) -> halite_jobcache::Result<ReturnStatus> {
            let row = NewReturn {
                jid,
                minion_id,
                load,
                owed: false,
            };
            Ok(self.add_returns(&[row], now)?[0])
        }

        fn add_returns(
            &self,
            returns: &[NewReturn<'_>],
            now: u64,
        ) -> halite_jobcache::Result<Vec<ReturnStatus>> {
            self.check()?;
            let has = |id: Option<&str>| returns.iter().any(|r| Some(r.minion_id) == id);
            if has(self.panics) {
                panic!("the store panics on this return");
            }
            if has(self.poison) {
                return Err(halite_jobcache::Error::Unstorable("poisoned".into()));
            }
            self.inner.add_returns(returns, now)
        }

        fn get_load(&self, jid: &str) -> halite_jobcache::Result<Option<Job>> {
            self.inner.get_load(jid)
        }

        fn get_returns(&self, jid: &str) -> halite_jobcache::Result<Vec<MinionReturn>> {
            self.inner.get_returns(jid)
        }

        fn list_jobs(&self) -> halite_jobcache::Result<Vec<JobSummary>> {
            self.inner.list_jobs()
        }

        fn owed(&self) -> halite_jobcache::Result<Vec<(String, MinionReturn)>> {
            self.inner.owed()
        }

        fn settle_owed(&self, done: &[(&str, &str)]) -> halite_jobcache::Result<()> {
            self.inner.settle_owed(done)
        }

        fn clean_expired(&self, now: u64, keep: u64) -> halite_jobcache::Result<usize> {
            self.inner.clean_expired(now, keep)
        }
    }

    const JID: &str = "20260101120000000001";

    struct Rig {
        store: Arc<Faulty>,
        cache: JobCache,
        stats: Arc<Stats>,
        thread: Option<JoinHandle<()>>,
        _dir: tempfile::TempDir,
    }

    impl Rig {
        fn new(poison: Option<&'static str>, panics: Option<&'static str>) -> Rig {
            Rig::with_tree(poison, panics, true)
        }

        fn with_tree(
            poison: Option<&'static str>,
            panics: Option<&'static str>,
            returns_in_tree: bool,
        ) -> Rig {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(Faulty {
                inner: RedbJobStore::open(dir.path().join("jobs.redb")).unwrap(),
                broken: AtomicBool::new(false),
                poison,
                panics,
            });
            let local = LocalCacheWriter::new(dir.path(), Default::default());
            let stats = Arc::new(Stats::default());
            let (writer, thread) = JobWriter::spawn(
                store.clone(),
                local.clone(),
                returns_in_tree,
                0,
                stats.clone(),
            );
            Rig {
                store,
                cache: JobCache { writer, local },
                stats,
                thread: Some(thread),
                _dir: dir,
            }
        }

        fn ret(&self, id: &str) {
            self.ret_then(id, Box::new(|| {}));
        }

        fn ret_then(&self, id: &str, ack: Ack) {
            let load = value::map([("id", value::s(id)), ("return", Value::from(true))]);
            self.cache
                .add_return(JID.into(), id.into(), value::encode(&load), ack);
        }

        fn return_file(&self, id: &str) -> PathBuf {
            self.cache
                .local
                .jid_dir(JID)
                .unwrap()
                .join(id)
                .join("return.p")
        }

        fn stored(&self) -> Vec<String> {
            let mut ids: Vec<String> = self
                .store
                .get_returns(JID)
                .unwrap()
                .into_iter()
                .map(|r| r.minion_id)
                .collect();
            ids.sort();
            ids
        }

        /// Stops the writer (it drains first).
        fn stop(mut self) -> Arc<Faulty> {
            let store = self.store.clone();
            drop(self.cache);
            if let Some(t) = self.thread.take() {
                t.join().unwrap();
            }
            store
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn returns_accepted_while_the_store_fails_are_stored_once_it_works_again() {
        let rig = Rig::new(None, None);
        let load = value::map([("fun", value::s("test.ping"))]);
        rig.cache
            .save_load(JID, load.clone(), vec!["a".into()])
            .unwrap();
        rig.store.broken.store(true, Ordering::SeqCst);
        rig.ret("a");
        wait_for("the writer to report the failure", || {
            rig.cache.writer.failing().is_some()
        });
        let refusal = rig
            .cache
            .save_load("20260101120000000002", load, vec!["a".into()])
            .unwrap_err();
        assert!(
            refusal.contains(STORE_PATH),
            "the refusal names the path: {refusal}"
        );
        rig.ret("b");
        assert!(rig.stored().is_empty());

        rig.store.broken.store(false, Ordering::SeqCst);
        wait_for("the kept returns to be stored", || {
            rig.stored() == ["a", "b"]
        });
        wait_for("the writer to recover", || {
            rig.cache.writer.failing().is_none()
        });
        assert!(rig.store.get_load(JID).unwrap().is_some());
        let local = rig.cache.local.jid_dir(JID).unwrap();
        assert!(local.join("a").join("return.p").is_file());
        assert!(local.join("b").join("return.p").is_file());
    }

    #[test]
    fn a_return_is_acknowledged_once_in_redb_and_its_local_cache_file_follows() {
        let rig = Rig::new(None, None);
        let (tx, rx) = channel();
        for id in ["a", "b", "c"] {
            let (store, tx) = (rig.store.clone(), tx.clone());
            let id = id.to_owned();
            rig.ret_then(
                &id.clone(),
                Box::new(move || {
                    let stored = store
                        .get_returns(JID)
                        .unwrap()
                        .iter()
                        .any(|r| r.minion_id == id);
                    tx.send((id, stored)).unwrap();
                }),
            );
        }
        for _ in 0..3 {
            let (id, stored) = rx.recv_timeout(ROOM_WAIT).unwrap();
            assert!(stored, "{id} was acknowledged before redb had it");
        }
        wait_for("the local_cache files", || {
            ["a", "b", "c"]
                .iter()
                .all(|id| rig.return_file(id).is_file())
        });
        wait_for("nothing left owed to the tree", || {
            rig.store.owed().unwrap().is_empty()
        });
    }

    #[test]
    fn returns_a_crash_left_out_of_local_cache_are_written_when_the_writer_starts() {
        let dir = tempfile::tempdir().unwrap();
        let load = value::map([("id", value::s("a")), ("return", Value::from(7))]);
        {
            let store = RedbJobStore::open(dir.path().join("jobs.redb")).unwrap();
            let row = NewReturn {
                jid: JID,
                minion_id: "a",
                load: &load,
                owed: true,
            };
            let _ = store.add_returns(&[row], unix_now()).unwrap();
        }
        let store = Arc::new(RedbJobStore::open(dir.path().join("jobs.redb")).unwrap());
        let local = LocalCacheWriter::new(dir.path(), Default::default());
        let (writer, thread) = JobWriter::spawn(
            store.clone(),
            local.clone(),
            true,
            0,
            Arc::new(Stats::default()),
        );
        drop(writer);
        thread.join().unwrap();
        let file = local.jid_dir(JID).unwrap().join("a").join("return.p");
        let written = value::decode(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(value::get(&written, "return"), Some(&Value::from(7)));
        assert!(store.owed().unwrap().is_empty());
    }

    #[test]
    fn without_job_cache_returns_stay_out_of_the_tree_and_go_to_redb_with_the_loads_in_both() {
        let rig = Rig::with_tree(None, None, false);
        let load = value::map([("fun", value::s("test.ping"))]);
        rig.cache.save_load(JID, load, vec!["a".into()]).unwrap();
        let (tx, rx) = channel();
        rig.ret_then("a", Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(ROOM_WAIT)
            .expect("the return is acknowledged");
        assert_eq!(rig.stored(), ["a"]);
        let dir = rig.cache.local.jid_dir(JID).unwrap();
        assert!(dir.join(".load.p").is_file() && dir.join(".minions.p").is_file());
        assert!(!dir.join("a").exists(), "no return directory in the tree");
    }

    #[test]
    fn a_return_kept_in_memory_while_the_store_fails_is_acknowledged() {
        let rig = Rig::new(None, None);
        rig.store.broken.store(true, Ordering::SeqCst);
        let (tx, rx) = channel();
        rig.ret_then("a", Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(ROOM_WAIT)
            .expect("acknowledged: accepted and retried, the minion need not resend it");
        assert!(rig.stored().is_empty());
        rig.store.broken.store(false, Ordering::SeqCst);
        wait_for("the kept return to be stored", || rig.stored() == ["a"]);
    }

    #[test]
    fn a_return_the_store_can_never_take_is_dropped_and_the_others_of_its_batch_are_stored() {
        let rig = Rig::new(Some("bad"), None);
        for id in ["a", "bad", "c"] {
            rig.ret(id);
        }
        let store = rig.stop();
        let mut ids: Vec<String> = store
            .get_returns(JID)
            .unwrap()
            .into_iter()
            .map(|r| r.minion_id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["a", "c"]);
    }

    #[test]
    fn a_write_that_panics_is_dropped_and_the_writer_goes_on() {
        let rig = Rig::new(None, Some("boom"));
        for id in ["a", "boom", "c"] {
            rig.ret(id);
        }
        wait_for("a panic to be caught", || rig.stats.background_panics() > 0);
        rig.ret("d");
        wait_for("the returns after the panic", || {
            rig.stored() == ["a", "c", "d"]
        });
        assert!(rig.cache.writer.failing().is_none());
    }

    /// Long enough for a loaded machine to schedule a woken thread; only a failing test
    /// waits this long.
    const ROOM_WAIT: Duration = Duration::from_secs(30);

    /// Whether the thread at `/proc/<pid>/task/<tid>` is asleep (`S`): for a thread in
    /// `Room::take` on a full room, asleep on the condition variable.
    fn asleep(task: &std::path::Path) -> bool {
        std::fs::read_to_string(task.join("stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                Some(rest.trim_start().starts_with('S'))
            })
            .unwrap_or(false)
    }

    /// Calls `room.take(1)` on a new thread and returns once that thread is asleep in it
    /// (not merely started: acting before the sender waits proves nothing about waking
    /// it), with the channel its result arrives on.
    fn sender_waiting_on(room: &Arc<Room>) -> Receiver<bool> {
        let (task_tx, task_rx) = channel();
        let (result_tx, result_rx) = channel();
        let room = room.clone();
        std::thread::spawn(move || {
            let task = std::fs::read_link("/proc/thread-self").unwrap();
            task_tx.send(PathBuf::from("/proc").join(task)).unwrap();
            let _ = result_tx.send(room.take(1));
        });
        let task: PathBuf = task_rx.recv().unwrap();
        let deadline = Instant::now() + ROOM_WAIT;
        while !asleep(&task) {
            assert!(
                result_rx.try_recv().is_err(),
                "take() returned on a full room instead of waiting"
            );
            assert!(Instant::now() < deadline, "the sender never went to sleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        result_rx
    }

    #[test]
    fn a_queue_full_in_bytes_makes_senders_wait_and_one_big_write_fits_an_empty_queue() {
        let room = Arc::new(Room::new(10, 100));
        assert!(room.take(100), "one write up to the budget fits");
        let waiting = sender_waiting_on(&room);
        room.give_back(1, 100);
        assert_eq!(waiting.recv_timeout(ROOM_WAIT), Ok(true));
        let empty = Room::new(10, 100);
        assert!(
            empty.take(1_000),
            "a write over the whole budget fits an empty queue"
        );
        assert_eq!(empty.lock().bytes, 1_000);
    }

    #[test]
    fn a_full_queue_makes_senders_wait_until_the_writer_frees_room() {
        let room = Arc::new(Room::new(2, usize::MAX));
        assert!(room.take(1) && room.take(1));
        let waiting = sender_waiting_on(&room);
        room.give_back(1, 1);
        assert_eq!(
            waiting.recv_timeout(ROOM_WAIT),
            Ok(true),
            "freed room wakes the sender"
        );
        assert_eq!(room.lock().queued, 2);
    }

    #[test]
    fn senders_waiting_on_a_full_queue_give_up_when_the_writer_ends() {
        let room = Arc::new(Room::new(1, usize::MAX));
        assert!(room.take(1));
        let waiting = sender_waiting_on(&room);
        drop(CloseOnDrop(room.clone()));
        assert_eq!(
            waiting.recv_timeout(ROOM_WAIT),
            Ok(false),
            "the writer's end wakes the sender, which gives up"
        );
    }
}
