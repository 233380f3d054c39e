//! One running worker: its frames in and out, the jobs waiting on it, and the master
//! requests its jobs make.
//!
//! A reader thread owns the [`Worker`] and reads its frames; jobs and request threads
//! write through a second handle on its stdin, one frame at a time. When the worker's
//! output ends (it exited, was told to leave, or wrote something that is not a frame),
//! every job still waiting gets the reason, and the `Worker` is dropped (killed and
//! reaped).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use halite_exec::{JobHandle, MasterChannel};
use halite_pyworker::{write_frame, Worker};
use rmpv::Value;

use crate::protocol::{self, FromWorker};
use crate::Error;

/// The largest frame the worker may send (a job's return, a request load).
pub(crate) const MAX_FRAME: usize = 256 << 20;

/// What a waiting job hears.
#[derive(Debug)]
pub(crate) enum Event {
    /// The return dict (a Salt payload).
    Ret(Vec<u8>),
    /// The function list.
    Functions(Vec<String>),
    /// The job cannot finish: why.
    Lost(String),
}

/// A job waiting on the worker.
pub(crate) struct Pending {
    /// Where its [`Event`] goes.
    pub tx: mpsc::Sender<Event>,
    /// The channel its master requests go through.
    pub master: Option<Arc<dyn MasterChannel>>,
    /// Its cancellation (a killed job's requests are given up).
    pub handle: Arc<JobHandle>,
}

#[derive(Default)]
struct State {
    jobs: HashMap<u64, Pending>,
    /// Why the worker is gone, once it is.
    ended: Option<String>,
    /// The worker said it is warm.
    ready: bool,
    /// What the worker said when warming up failed.
    fatal: Option<String>,
    /// The function list, once asked for.
    functions: Option<Vec<String>>,
}

/// What runs on the reader thread once the worker is gone.
pub(crate) type OnEnd = Box<dyn FnOnce(&Arc<Conn>) + Send>;

/// A running worker.
pub(crate) struct Conn {
    pid: u32,
    started: Instant,
    writer: Mutex<std::fs::File>,
    state: Mutex<State>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    /// Starts `python` running `script` with `args`; `on_end` runs on the reader thread
    /// once the worker is gone.
    pub(crate) fn start(
        python: &Path,
        script: &str,
        args: &[OsString],
        on_end: OnEnd,
    ) -> Result<Arc<Conn>, Error> {
        let worker = Worker::spawn(python, "salt-fallback", script, args, &[])?;
        let conn = Arc::new(Conn {
            pid: worker.pid(),
            started: Instant::now(),
            writer: Mutex::new(worker.stdin_writer()?),
            state: Mutex::new(State::default()),
        });
        let reader = conn.clone();
        std::thread::Builder::new()
            .name("salt-fallback".into())
            .spawn(move || {
                read_frames(&reader, worker);
                on_end(&reader);
            })
            .map_err(|e| Error::Thread(e.to_string()))?;
        Ok(conn)
    }

    /// The worker's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the worker said it is warm.
    pub(crate) fn is_ready(&self) -> bool {
        lock(&self.state).ready
    }

    /// Whether the worker is gone.
    pub(crate) fn has_ended(&self) -> bool {
        lock(&self.state).ended.is_some()
    }

    /// How long ago the worker was started.
    pub(crate) fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// The function list, if it was asked for already.
    pub(crate) fn functions(&self) -> Option<Vec<String>> {
        lock(&self.state).functions.clone()
    }

    /// Sends one frame.
    pub(crate) fn send(&self, frame: &Value) -> Result<(), Error> {
        write_frame(&mut *lock(&self.writer), frame).map_err(|e| {
            Error::Worker(format!(
                "the Salt fallback worker cannot be written to: {e}"
            ))
        })
    }

    /// Registers job `job` and sends its first frame.
    pub(crate) fn submit(&self, job: u64, pending: Pending, frame: &Value) -> Result<(), Error> {
        {
            let mut st = lock(&self.state);
            if let Some(why) = &st.ended {
                return Err(Error::Worker(why.clone()));
            }
            st.jobs.insert(job, pending);
        }
        self.send(frame).inspect_err(|_| {
            lock(&self.state).jobs.remove(&job);
        })
    }

    /// Stops waiting for job `job`.
    pub(crate) fn forget(&self, job: u64) {
        lock(&self.state).jobs.remove(&job);
    }

    /// Tells the worker to leave (it kills any job still running).
    pub(crate) fn stop(&self) {
        if let Err(e) = self.send(&protocol::exit_frame()) {
            tracing::debug!(
                "The Salt fallback worker {} did not take the exit: {e}",
                self.pid
            );
        }
    }

    /// Kills the worker, unless it is already gone (then its pid may belong to another
    /// process: the reader marks it ended before the `Worker` is reaped).
    pub(crate) fn kill(&self, why: &str) {
        let st = lock(&self.state);
        if st.ended.is_some() {
            return;
        }
        tracing::error!("Killing the Salt fallback worker {}: {why}", self.pid);
        if let Ok(pid) = libc::pid_t::try_from(self.pid) {
            // SAFETY: kill(2) has no memory-safety preconditions; the worker is not
            // reaped while `ended` is unset (checked under the same lock), so the process
            // group is still the worker's.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }

    /// Handles one checked frame.
    fn handle(self: &Arc<Self>, msg: FromWorker) {
        match msg {
            FromWorker::Ready { salt, seconds } => {
                tracing::info!(
                    "The Salt fallback worker {} is ready (Salt {salt}, warm in {seconds:.2} s)",
                    self.pid
                );
                lock(&self.state).ready = true;
            }
            FromWorker::Fatal(traceback) => {
                tracing::error!(
                    "The Salt fallback worker {} could not start:\n{traceback}",
                    self.pid
                );
                lock(&self.state).fatal = Some(traceback);
            }
            FromWorker::Result { job, ret } => self.finish(job, Event::Ret(ret)),
            FromWorker::Functions { job, names } => {
                lock(&self.state).functions = Some(names.clone());
                self.finish(job, Event::Functions(names));
            }
            FromWorker::Crashed { job, error } => self.finish(job, Event::Lost(error)),
            FromWorker::Request {
                job,
                req,
                kind,
                load,
            } => {
                let found = lock(&self.state)
                    .jobs
                    .get(&job)
                    .map(|p| (p.master.clone(), p.handle.clone()));
                let Some((master, handle)) = found else {
                    tracing::debug!(
                        "A master request of fallback job {job}, which is not waited for"
                    );
                    let _ = self.send(&protocol::reply(
                        req,
                        Err(protocol::Refused {
                            timeout: false,
                            message: "the job is no longer running".to_owned(),
                        }),
                    ));
                    return;
                };
                let conn = self.clone();
                let serve = move || {
                    let answer = protocol::serve_request(master.as_deref(), kind, &load, &|| {
                        handle.is_cancelled()
                    });
                    if let Err(e) = conn.send(&protocol::reply(req, answer)) {
                        tracing::debug!("Cannot answer a fallback master request: {e}");
                    }
                };
                if let Err(e) = std::thread::Builder::new()
                    .name("salt-fallback-req".into())
                    .spawn(serve)
                {
                    tracing::error!("Cannot start a thread for a fallback master request: {e}");
                }
            }
        }
    }

    fn finish(&self, job: u64, event: Event) {
        match lock(&self.state).jobs.remove(&job) {
            Some(pending) => {
                let _ = pending.tx.send(event);
            }
            None => tracing::debug!("A result for fallback job {job}, which is not waited for"),
        }
    }

    /// The worker is gone: every waiting job hears why.
    fn end(&self, why: String) {
        let jobs = {
            let mut st = lock(&self.state);
            let why = match &st.fatal {
                Some(traceback) => format!(
                    "the Salt fallback worker could not start: {}",
                    traceback
                        .trim_end()
                        .lines()
                        .last()
                        .unwrap_or("no reason given")
                ),
                None => why,
            };
            st.ended = Some(why.clone());
            std::mem::take(&mut st.jobs)
                .into_values()
                .map(|p| (p, why.clone()))
                .collect::<Vec<_>>()
        };
        for (pending, why) in jobs {
            let _ = pending.tx.send(Event::Lost(why));
        }
    }
}

/// The reader thread: frames until the worker's output ends, then [`Conn::end`] and the
/// worker killed and reaped.
fn read_frames(conn: &Arc<Conn>, mut worker: Worker) {
    let why = loop {
        match worker.recv(MAX_FRAME) {
            Ok(Some(frame)) => match protocol::parse(&frame) {
                Ok(msg) => conn.handle(msg),
                Err(e) => break format!("the Salt fallback worker sent a bad frame ({e})"),
            },
            Ok(None) => break "the Salt fallback worker exited".to_owned(),
            Err(e) => break format!("the Salt fallback worker's output is broken ({e})"),
        }
    };
    tracing::debug!("Salt fallback worker {}: {why}", conn.pid);
    conn.end(why);
    drop(worker);
}
