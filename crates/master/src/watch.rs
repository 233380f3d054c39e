//! Jobs someone on the master is waiting for: peer publishes (`minion_pub` then `pub_ret`),
//! `minion_publish`, and the jobs runners publish (`manage.up`, `jobs.active`).
//!
//! A job is registered with its expected minions *before* it is published, so no return can
//! slip past. Each return of a watched job is kept here (the job-cache writer may still be
//! behind), and whoever waits is woken the moment the last expected minion has returned —
//! this is what lets `publish.publish` and `manage.up` answer in milliseconds instead of
//! polling or waiting out a timeout, as Salt does.
//!
//! Two ways to wait:
//! - [`JobWatch::wait`] blocks the calling thread (runner threads);
//! - [`JobWatch::notify`] takes a callback run once, on completion or at a deadline, so a
//!   request worker can hand off a held reply (`pub_ret` with `wait`) and move on. One timer
//!   thread serves every deadline.
//!
//! Bounds: at most [`MAX_WATCHED`] jobs (the oldest is dropped first), each forgotten
//! [`RETENTION`] after it was registered; at most [`MAX_WAITERS`] held callbacks (beyond it a
//! callback runs at once with what is there, which a poller handles). A callback that
//! panics is logged and counted ([`crate::boundary`]); the other waiters still get their
//! answer and the timer thread goes on.

use crate::boundary::{self, Stats};
use halite_proto::Value;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Most jobs watched at once.
pub const MAX_WATCHED: usize = 4096;
/// How long a watched job's returns are kept in memory.
pub const RETENTION: Duration = Duration::from_secs(3600);
/// Most callbacks held at once.
pub const MAX_WAITERS: usize = 4096;

/// What a waiter is handed: the job's expected minions and the returns so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The minion that published the job (peer jobs), if any.
    pub owner: Option<String>,
    /// The minions the master expects to return.
    pub expected: BTreeSet<String>,
    /// `(minion id, return load)` in arrival order, one per minion.
    pub returns: Vec<(String, Value)>,
}

impl Snapshot {
    /// Every expected minion has returned.
    pub fn complete(&self) -> bool {
        self.expected
            .iter()
            .all(|m| self.returns.iter().any(|(id, _)| id == m))
    }
}

type Callback = Box<dyn FnOnce(Snapshot) + Send>;

struct Job {
    snap: Snapshot,
    registered: Instant,
    /// `pub_ret` polls answered so far.
    polls: u32,
    waiters: Vec<(u64, Callback)>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<String, Job>,
    /// Registration order, for eviction.
    order: VecDeque<String>,
    /// Deadlines of held callbacks: (deadline, jid, waiter id), earliest first.
    deadlines: BinaryHeap<std::cmp::Reverse<(Instant, String, u64)>>,
    held: usize,
    next_waiter: u64,
    stopped: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes blocking waiters and the timer thread.
    changed: Condvar,
    /// Where a panicking callback is counted.
    stats: Arc<Stats>,
}

/// The watched jobs. Cheap to clone; the timer thread stops when the last clone is dropped.
pub struct JobWatch {
    shared: Arc<Shared>,
    timer: Option<std::thread::JoinHandle<()>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs a waiter's callback (it sends a held reply). A panic in it is logged and counted
/// in `stats`, and the other waiters and the timer thread go on.
fn call(stats: &Stats, cb: Callback, snap: Snapshot) {
    boundary::isolate(stats, "a held reply of the job watch", move || cb(snap));
}

impl JobWatch {
    /// A watch with its timer thread; panics in callbacks are counted in `stats`.
    pub fn new(stats: Arc<Stats>) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stats,
        });
        let s = shared.clone();
        let timer = std::thread::Builder::new()
            .name("job-watch".into())
            .spawn(move || timer_loop(&s))
            .ok();
        if timer.is_none() {
            tracing::error!("Could not start the job-watch timer; held replies answer at once");
        }
        JobWatch { shared, timer }
    }

    /// Starts watching `jid`, expecting `expected`; `owner` is the minion that published it.
    /// Registering a jid again merges the expected minions (a `find_job` round re-targets).
    pub fn register(&self, jid: &str, expected: &[String], owner: Option<&str>) {
        let mut st = self.shared.lock();
        let now = Instant::now();
        expire(&self.shared.stats, &mut st, now);
        if let Some(job) = st.jobs.get_mut(jid) {
            job.snap.expected.extend(expected.iter().cloned());
            return;
        }
        while st.jobs.len() >= MAX_WATCHED {
            let Some(old) = st.order.pop_front() else {
                break;
            };
            if let Some(job) = st.jobs.remove(&old) {
                fire_all(&self.shared.stats, &mut st, job);
            }
        }
        st.order.push_back(jid.to_owned());
        st.jobs.insert(
            jid.to_owned(),
            Job {
                snap: Snapshot {
                    owner: owner.map(str::to_owned),
                    expected: expected.iter().cloned().collect(),
                    returns: Vec::new(),
                },
                registered: now,
                polls: 0,
                waiters: Vec::new(),
            },
        );
    }

    /// Records a return; wakes waiters when it completes the job. Returns of jobs nobody
    /// watches cost one map lookup.
    pub fn on_return(&self, jid: &str, id: &str, load: &Value) {
        let mut st = self.shared.lock();
        let Some(job) = st.jobs.get_mut(jid) else {
            return;
        };
        if job.snap.returns.iter().any(|(m, _)| m == id) {
            return;
        }
        job.snap.returns.push((id.to_owned(), load.clone()));
        if !job.snap.complete() {
            drop(st);
            self.shared.changed.notify_all();
            return;
        }
        let waiters = std::mem::take(&mut job.waiters);
        let snap = job.snap.clone();
        st.held -= waiters.len();
        drop(st);
        self.shared.changed.notify_all();
        for (_, cb) in waiters {
            call(&self.shared.stats, cb, snap.clone());
        }
    }

    /// Counts a poll of `jid`'s results and answers how many came before it (`None` if the
    /// job is not watched).
    pub fn poll(&self, jid: &str) -> Option<u32> {
        let mut st = self.shared.lock();
        let job = st.jobs.get_mut(jid)?;
        job.polls = job.polls.saturating_add(1);
        Some(job.polls - 1)
    }

    /// The job's current state, if it is watched.
    pub fn snapshot(&self, jid: &str) -> Option<Snapshot> {
        self.shared.lock().jobs.get(jid).map(|j| j.snap.clone())
    }

    /// Blocks until `jid` is complete or `deadline` passes; answers its state then (`None`
    /// if it is not watched).
    pub fn wait(&self, jid: &str, deadline: Instant) -> Option<Snapshot> {
        let mut st = self.shared.lock();
        loop {
            let job = st.jobs.get(jid)?;
            let now = Instant::now();
            if job.snap.complete() || now >= deadline || st.stopped {
                return Some(job.snap.clone());
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Runs `cb` once: at once if `jid` is complete (or unwatched: `None`), else when it
    /// completes or at `deadline`, whichever comes first.
    pub fn notify(
        &self,
        jid: &str,
        deadline: Instant,
        cb: impl FnOnce(Option<Snapshot>) + Send + 'static,
    ) {
        let mut st = self.shared.lock();
        let full = st.held >= MAX_WAITERS || st.stopped;
        let Some(job) = st.jobs.get_mut(jid) else {
            drop(st);
            return cb(None);
        };
        if job.snap.complete() || full || deadline <= Instant::now() {
            let snap = job.snap.clone();
            drop(st);
            return cb(Some(snap));
        }
        let id = st.next_waiter;
        st.next_waiter += 1;
        st.held += 1;
        if let Some(job) = st.jobs.get_mut(jid) {
            job.waiters.push((id, Box::new(move |s| cb(Some(s)))));
        }
        st.deadlines
            .push(std::cmp::Reverse((deadline, jid.to_owned(), id)));
        drop(st);
        self.shared.changed.notify_all();
    }
}

/// Hands every waiter of a job that is going away what there is.
fn fire_all(stats: &Stats, st: &mut State, mut job: Job) {
    st.held -= job.waiters.len();
    let snap = job.snap.clone();
    for (_, cb) in job.waiters.drain(..) {
        call(stats, cb, snap.clone());
    }
}

fn expire(stats: &Stats, st: &mut State, now: Instant) {
    while let Some(jid) = st.order.front() {
        let old = st
            .jobs
            .get(jid)
            .is_none_or(|j| now.duration_since(j.registered) >= RETENTION);
        if !old {
            break;
        }
        if let Some(jid) = st.order.pop_front() {
            if let Some(job) = st.jobs.remove(&jid) {
                fire_all(stats, st, job);
            }
        }
    }
}

fn timer_loop(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            // Whoever still waits gets what there is; the jobs stay readable.
            let mut held = Vec::new();
            for job in st.jobs.values_mut() {
                for (_, cb) in job.waiters.drain(..) {
                    held.push((cb, job.snap.clone()));
                }
            }
            st.held = 0;
            drop(st);
            for (cb, snap) in held {
                call(&shared.stats, cb, snap);
            }
            return;
        }
        let now = Instant::now();
        let next = st.deadlines.peek().map(|r| r.0 .0);
        match next {
            Some(at) if at <= now => {
                let Some(std::cmp::Reverse((_, jid, id))) = st.deadlines.pop() else {
                    continue;
                };
                let Some(job) = st.jobs.get_mut(&jid) else {
                    continue;
                };
                let Some(pos) = job.waiters.iter().position(|(w, _)| *w == id) else {
                    continue;
                };
                let (_, cb) = job.waiters.swap_remove(pos);
                let snap = job.snap.clone();
                st.held -= 1;
                drop(st);
                call(&shared.stats, cb, snap);
                st = shared.lock();
            }
            Some(at) => {
                st = shared
                    .changed
                    .wait_timeout(st, at - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            None => {
                st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

impl JobWatch {
    /// Ends every wait: blocked waiters return what there is, held callbacks run, and later
    /// waits answer at once (the master is shutting down).
    pub fn stop(&self) {
        self.shared.lock().stopped = true;
        self.shared.changed.notify_all();
    }
}

impl Drop for JobWatch {
    fn drop(&mut self) {
        self.stop();
        if let Some(t) = self.timer.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_blocking_wait_ends_when_the_last_expected_minion_returns() {
        let watch = Arc::new(JobWatch::new(Arc::default()));
        watch.register("j1", &ids(&["a", "b"]), None);
        let w = watch.clone();
        let t = std::thread::spawn(move || w.wait("j1", Instant::now() + Duration::from_secs(30)));
        watch.on_return("j1", "a", &Value::from(true));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished(), "one of two returned: still waiting");
        let started = Instant::now();
        watch.on_return("j1", "b", &Value::from(true));
        let snap = t.join().unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(snap.complete());
        assert_eq!(snap.returns.len(), 2);
    }

    #[test]
    fn a_blocking_wait_gives_partial_returns_at_the_deadline() {
        let watch = JobWatch::new(Arc::default());
        watch.register("j1", &ids(&["a", "b"]), None);
        watch.on_return("j1", "a", &Value::from(1));
        let snap = watch
            .wait("j1", Instant::now() + Duration::from_millis(50))
            .unwrap();
        assert!(!snap.complete());
        assert_eq!(snap.returns, vec![("a".to_string(), Value::from(1))]);
        assert!(watch.wait("unknown", Instant::now()).is_none());
    }

    #[test]
    fn a_held_callback_runs_once_on_completion() {
        let watch = JobWatch::new(Arc::default());
        watch.register("j1", &ids(&["a"]), Some("pub"));
        let (tx, rx) = mpsc::channel();
        watch.notify("j1", Instant::now() + Duration::from_secs(30), move |s| {
            tx.send(s).unwrap()
        });
        assert!(rx.try_recv().is_err());
        watch.on_return("j1", "a", &Value::from(true));
        let snap = rx.recv_timeout(Duration::from_secs(1)).unwrap().unwrap();
        assert_eq!(snap.owner.as_deref(), Some("pub"));
        assert!(snap.complete());
        // A duplicate return neither adds a return nor calls anything again.
        watch.on_return("j1", "a", &Value::from(false));
        assert_eq!(watch.snapshot("j1").unwrap().returns.len(), 1);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    }

    #[test]
    fn polls_of_a_watched_job_are_counted() {
        let watch = JobWatch::new(Arc::default());
        assert_eq!(watch.poll("j1"), None);
        watch.register("j1", &ids(&["a"]), None);
        assert_eq!(watch.poll("j1"), Some(0));
        assert_eq!(watch.poll("j1"), Some(1));
    }

    #[test]
    fn a_held_callback_runs_at_its_deadline_with_what_is_there() {
        let watch = JobWatch::new(Arc::default());
        watch.register("j1", &ids(&["a", "b"]), None);
        watch.on_return("j1", "b", &Value::from(true));
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        watch.notify("j1", started + Duration::from_millis(80), move |s| {
            tx.send(s).unwrap()
        });
        let snap = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(80));
        assert_eq!(snap.returns.len(), 1);
    }

    #[test]
    fn an_unwatched_or_complete_job_answers_a_callback_at_once() {
        let watch = JobWatch::new(Arc::default());
        let (tx, rx) = mpsc::channel();
        let t = tx.clone();
        watch.notify("nope", Instant::now() + Duration::from_secs(30), move |s| {
            t.send(s).unwrap()
        });
        assert_eq!(rx.try_recv().unwrap(), None);
        watch.register("j2", &[], None);
        watch.notify("j2", Instant::now() + Duration::from_secs(30), move |s| {
            tx.send(s).unwrap()
        });
        assert!(rx.try_recv().unwrap().unwrap().complete());
    }

    #[test]
    fn the_oldest_job_is_dropped_past_the_bound_and_its_waiters_answered() {
        let watch = JobWatch::new(Arc::default());
        watch.register("first", &ids(&["a"]), None);
        let (tx, rx) = mpsc::channel();
        watch.notify(
            "first",
            Instant::now() + Duration::from_secs(60),
            move |s| tx.send(s).unwrap(),
        );
        for n in 0..MAX_WATCHED {
            watch.register(&format!("j{n}"), &ids(&["a"]), None);
        }
        assert!(watch.snapshot("first").is_none());
        assert!(!rx.try_recv().unwrap().unwrap().complete());
    }

    #[test]
    fn stopping_the_watch_ends_blocking_waits_at_once() {
        let watch = Arc::new(JobWatch::new(Arc::default()));
        watch.register("j1", &ids(&["a"]), None);
        let w = watch.clone();
        let t = std::thread::spawn(move || w.wait("j1", Instant::now() + Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        watch.stop();
        assert!(!t.join().unwrap().unwrap().complete());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_panicking_callback_is_counted_and_the_other_waiters_still_answered() {
        let stats = Arc::new(Stats::default());
        let watch = JobWatch::new(stats.clone());
        watch.register("j1", &ids(&["a"]), None);
        let deadline = Instant::now() + Duration::from_secs(60);
        watch.notify("j1", deadline, |_| panic!("a held reply panics"));
        let (tx, rx) = mpsc::channel();
        watch.notify("j1", deadline, move |s| tx.send(s).unwrap());
        watch.on_return("j1", "a", &Value::from(true));
        assert!(rx.try_recv().unwrap().unwrap().complete());
        assert_eq!(stats.background_panics(), 1);
        // The timer thread survives a panic at a deadline too.
        let (tx, rx) = mpsc::channel();
        watch.register("j3", &ids(&["a"]), None);
        watch.notify("j3", Instant::now() + Duration::from_millis(20), |_| {
            panic!("at the deadline")
        });
        watch.notify("j3", Instant::now() + Duration::from_millis(40), move |s| {
            tx.send(s).unwrap()
        });
        assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap().is_some());
        assert_eq!(stats.background_panics(), 2);
    }

    #[test]
    fn dropping_the_watch_answers_held_callbacks() {
        let watch = JobWatch::new(Arc::default());
        watch.register("j1", &ids(&["a"]), None);
        let (tx, rx) = mpsc::channel();
        watch.notify("j1", Instant::now() + Duration::from_secs(60), move |s| {
            tx.send(s).unwrap()
        });
        drop(watch);
        assert!(rx.try_recv().unwrap().is_some());
    }
}
