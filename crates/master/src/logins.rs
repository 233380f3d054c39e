//! `external_auth` logins off the request workers: [`LOGIN_THREADS`] threads run the
//! backends (PAM blocks, a bcrypt hash takes tens of milliseconds), and one timer thread
//! answers each failure once its padded delay ([`FailureDelay`]) is over, so a flood of
//! failed logins holds no thread while it waits and the request workers keep serving
//! everyone else.
//!
//! Bounds: at most [`MAX_WAITING_LOGINS`] logins wait for a login thread; beyond that a
//! login is refused without running its backend (answered after the padded delay like any
//! failure, and logged). A login's answer is handed to its callback exactly once, also
//! when the master stops. A backend that panics fails that login (after its delay); a
//! callback that panics is logged and counted; neither stops a thread.

use crate::boundary::{self, Stats};
use halite_eauth::{ExternalAuth, FailureDelay, Identity};
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Threads that run backends.
pub const LOGIN_THREADS: usize = 4;
/// Logins waiting for a login thread beyond which new ones are refused.
pub const MAX_WAITING_LOGINS: usize = 1024;

/// Why a login gave no identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// No backend of that name is enabled (answered at once, as Salt does).
    NotEnabled,
    /// Wrong user or password, or the backend could not decide.
    Failed,
    /// Too many logins were waiting.
    Busy,
}

/// What a login's caller is handed, once.
pub type Done = Box<dyn FnOnce(Result<Identity, LoginError>) + Send>;

struct Login {
    eauth: String,
    username: String,
    password: String,
    done: Done,
}

/// A failure waiting out its delay.
struct Delayed {
    at: Instant,
    seq: u64,
    error: LoginError,
    done: Done,
}

impl PartialEq for Delayed {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Delayed {
    /// Earliest first in a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Login>,
    delayed: BinaryHeap<Delayed>,
    seq: u64,
    stopped: bool,
}

struct Shared {
    auth: Arc<ExternalAuth>,
    state: Mutex<State>,
    /// Wakes login threads.
    work: Condvar,
    /// Wakes the timer thread.
    timer: Condvar,
    delay: Mutex<FailureDelay>,
    /// Where a panicking backend or reply is counted.
    stats: Arc<Stats>,
}

/// Hands a login's answer to its caller (which sends a held reply). A panic in it is
/// logged and counted, and the thread goes on.
fn answer(stats: &Stats, done: Done, result: Result<Identity, LoginError>) {
    boundary::isolate(stats, "the reply to an eauth login", move || done(result));
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers `error` after the padded delay of a failure that took `elapsed`.
    fn fail_later(&self, error: LoginError, elapsed: Duration, done: Done) {
        let wait = self
            .delay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pad(elapsed, random_fraction());
        let mut st = self.lock();
        if st.stopped {
            drop(st);
            answer(&self.stats, done, Err(error));
            return;
        }
        st.seq += 1;
        let seq = st.seq;
        st.delayed.push(Delayed {
            at: Instant::now() + wait,
            seq,
            error,
            done,
        });
        drop(st);
        self.timer.notify_one();
    }
}

/// The login pool. Stops (answering everything pending) on [`Authenticator::stop`] or drop.
pub struct Authenticator {
    shared: Arc<Shared>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Authenticator {
    /// A pool of `threads` login threads and a timer thread. A thread that cannot be
    /// started is logged; with none, every login fails (after its delay). A backend or a
    /// reply that panics is counted in `stats`: that login fails, the thread goes on.
    pub fn new(auth: Arc<ExternalAuth>, threads: usize, stats: Arc<Stats>) -> Authenticator {
        let shared = Arc::new(Shared {
            auth,
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            timer: Condvar::new(),
            delay: Mutex::new(FailureDelay::default()),
            stats,
        });
        let mut handles = Vec::new();
        for n in 0..threads.max(1) {
            let s = shared.clone();
            match std::thread::Builder::new()
                .name(format!("eauth-{n}"))
                .spawn(move || login_loop(&s))
            {
                Ok(h) => handles.push(h),
                Err(e) => tracing::error!("Cannot start an eauth login thread: {e}"),
            }
        }
        let s = shared.clone();
        match std::thread::Builder::new()
            .name("eauth-timer".into())
            .spawn(move || timer_loop(&s))
        {
            Ok(h) => handles.push(h),
            Err(e) => tracing::error!("Cannot start the eauth timer thread: {e}"),
        }
        Authenticator {
            shared,
            threads: Mutex::new(handles),
        }
    }

    /// Logs `username` in with backend `eauth`; `done` gets the identity or the error.
    pub fn login(&self, eauth: &str, username: &str, password: &str, done: Done) {
        if !self.shared.auth.is_enabled(eauth) {
            done(Err(LoginError::NotEnabled));
            return;
        }
        let mut st = self.shared.lock();
        if st.stopped || st.queue.len() >= MAX_WAITING_LOGINS {
            drop(st);
            self.shared
                .fail_later(LoginError::Busy, Duration::ZERO, done);
            return;
        }
        st.queue.push_back(Login {
            eauth: eauth.to_owned(),
            username: username.to_owned(),
            password: password.to_owned(),
            done,
        });
        drop(st);
        self.shared.work.notify_one();
    }

    /// Answers every waiting login as failed and ends the threads.
    pub fn stop(&self) {
        let (queue, delayed) = {
            let mut st = self.shared.lock();
            st.stopped = true;
            (
                std::mem::take(&mut st.queue),
                std::mem::take(&mut st.delayed),
            )
        };
        self.shared.work.notify_all();
        self.shared.timer.notify_all();
        for login in queue {
            answer(&self.shared.stats, login.done, Err(LoginError::Failed));
        }
        for d in delayed {
            answer(&self.shared.stats, d.done, Err(d.error));
        }
        let handles = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.join();
        }
    }
}

impl Drop for Authenticator {
    fn drop(&mut self) {
        self.stop();
    }
}

fn login_loop(shared: &Shared) {
    loop {
        let login = {
            let mut st = shared.lock();
            loop {
                if st.stopped {
                    return;
                }
                if let Some(l) = st.queue.pop_front() {
                    break l;
                }
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        let started = Instant::now();
        let outcome = boundary::isolate(
            &shared.stats,
            format_args!("the eauth backend {}", login.eauth),
            || {
                shared
                    .auth
                    .authenticate(&login.eauth, &login.username, &login.password)
            },
        );
        match outcome {
            Some(Ok(Some(identity))) => answer(&shared.stats, login.done, Ok(identity)),
            Some(Ok(None)) | None => {
                shared.fail_later(LoginError::Failed, started.elapsed(), login.done)
            }
            Some(Err(e)) => {
                tracing::error!("eauth backend {}: {e}", login.eauth);
                shared.fail_later(LoginError::Failed, started.elapsed(), login.done);
            }
        }
    }
}

fn timer_loop(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        let now = Instant::now();
        match st.delayed.peek().map(|d| d.at) {
            Some(at) if at <= now => {
                if let Some(d) = st.delayed.pop() {
                    drop(st);
                    answer(&shared.stats, d.done, Err(d.error));
                    st = shared.lock();
                }
            }
            Some(at) => {
                st = shared
                    .timer
                    .wait_timeout(st, at - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            None => st = shared.timer.wait(st).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// A uniform fraction in `[0, 1)` from OpenSSL's CSPRNG (0.5 if it fails).
fn random_fraction() -> f64 {
    let mut b = [0u8; 8];
    if openssl::rand::rand_bytes(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}
