//! A fake master for the tests: scripted minions on a virtual clock, an in-memory key
//! list, a real job store on a temp file, and a log of what was published and fired.
//!
//! Time is virtual: a `wait_returns` call advances the clock to the last awaited answer,
//! or by the time left until its deadline, and `sleep` by its length, without sleeping. Every minion answers
//! `saltutil.find_job` at once (unless down) and every other job after its delay.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use halite_config::MasterConfig;
use halite_jobcache::{JobStore, RedbJobStore};
use rmpv::Value;

use crate::pyval::{get, map, py_str};
use crate::{PublishJob, Published, RunnerHost};

/// How a scripted minion behaves.
#[derive(Debug, Clone)]
pub(crate) enum Minion {
    /// Answers every job `delay` seconds after it was published; `saltutil.running`
    /// answers `running`.
    Up { delay: u64, running: Value },
    /// Never answers.
    Down,
    /// Answers `saltutil.find_job` with `{}` at once, never returns anything else.
    Forgot,
}

impl Minion {
    pub fn up_after(delay: u64) -> Minion {
        Minion::Up {
            delay,
            running: Value::Array(Vec::new()),
        }
    }

    pub fn running(jobs: Value) -> Minion {
        Minion::Up {
            delay: 0,
            running: jobs,
        }
    }

    pub fn forgot_job() -> Minion {
        Minion::Forgot
    }
}

struct Job {
    jid: String,
    job: PublishJob,
    minions: Vec<String>,
    at: Duration,
}

#[derive(Default)]
struct State {
    clock: Duration,
    jobs: Vec<Job>,
    events: Vec<(String, Value)>,
    deleted: Vec<String>,
}

pub(crate) struct FakeHost {
    pub opts: MasterConfig,
    pub minions: Vec<(String, Minion)>,
    pub accepted: Vec<String>,
    pub connected: Vec<(String, Option<String>)>,
    pub refuse_publish: Option<String>,
    /// Minions targeted at publish time whose keys are gone when the probe is sent.
    pub keys_gone: Vec<String>,
    store: RedbJobStore,
    _dir: tempfile::TempDir,
    state: Mutex<State>,
}

impl FakeHost {
    /// A master with these minions, all accepted, none connected, default options.
    pub fn new(minions: &[(&str, Minion)]) -> FakeHost {
        FakeHost::with_config(minions, "")
    }

    /// Like [`FakeHost::new`] with a master configuration file's text.
    pub fn with_config(minions: &[(&str, Minion)], config: &str) -> FakeHost {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "id: master1_master\nroot_dir: {}\n{config}",
            dir.path().display()
        );
        let opts =
            MasterConfig::from_yaml_str(&text, &dir.path().join("master")).expect("test config");
        let store = RedbJobStore::open(dir.path().join("jobs.redb")).expect("job store");
        let mut accepted: Vec<String> = minions.iter().map(|(id, _)| (*id).to_owned()).collect();
        accepted.sort();
        FakeHost {
            opts,
            minions: minions
                .iter()
                .map(|(id, m)| ((*id).to_owned(), m.clone()))
                .collect(),
            accepted,
            connected: Vec::new(),
            refuse_publish: None,
            keys_gone: Vec::new(),
            store,
            _dir: dir,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Virtual time spent waiting.
    pub fn elapsed(&self) -> Duration {
        self.state().clock
    }

    /// The functions published, in order.
    pub fn published_funs(&self) -> Vec<String> {
        self.state()
            .jobs
            .iter()
            .map(|j| j.job.fun.clone())
            .collect()
    }

    /// The `n`th published job.
    pub fn published(&self, n: usize) -> PublishJob {
        self.state().jobs[n].job.clone()
    }

    /// Events fired, in order.
    pub fn events(&self) -> Vec<(String, Value)> {
        self.state().events.clone()
    }

    /// Keys deleted, in order.
    pub fn deleted(&self) -> Vec<String> {
        self.state().deleted.clone()
    }

    /// The minions a target names among the accepted ones.
    fn expected(&self, job: &PublishJob) -> Vec<String> {
        let names: Vec<String> = match (&job.tgt, job.tgt_type.as_str()) {
            (Value::Array(items), "list") => items.iter().map(py_str).collect(),
            (tgt, "glob") => {
                let pattern = py_str(tgt);
                self.accepted
                    .iter()
                    .filter(|id| halite_target::fnmatch::fnmatch(id, &pattern))
                    .cloned()
                    .collect()
            }
            _ => Vec::new(),
        };
        names
            .into_iter()
            .filter(|n| self.accepted.contains(n))
            .collect()
    }

    /// When (virtual) and what `minion` answers to `job`, if ever.
    fn answer(&self, state: &State, job: &Job, minion: &str) -> Option<(Duration, Value)> {
        if !job.minions.iter().any(|m| m == minion) {
            return None;
        }
        let behaviour = self.minions.iter().find(|(id, _)| id == minion)?.1.clone();
        if job.job.fun == "saltutil.find_job" {
            let target = job.job.arg.first().map(py_str).unwrap_or_default();
            let entry = match behaviour {
                Minion::Down => return None,
                Minion::Forgot => Value::Map(Vec::new()),
                Minion::Up { delay, .. } => {
                    let orig = state.jobs.iter().find(|j| j.jid == target);
                    match orig {
                        Some(o) if o.at + Duration::from_secs(delay) > job.at => map([
                            ("jid", Value::from(target.as_str())),
                            ("fun", Value::from(o.job.fun.as_str())),
                            ("pid", Value::from(4242)),
                        ]),
                        _ => Value::Map(Vec::new()),
                    }
                }
            };
            return Some((job.at, entry));
        }
        match behaviour {
            Minion::Up { delay, running } => {
                let ret = match job.job.fun.as_str() {
                    "saltutil.running" => running,
                    _ => Value::Boolean(true),
                };
                Some((job.at + Duration::from_secs(delay), ret))
            }
            Minion::Down | Minion::Forgot => None,
        }
    }
}

impl RunnerHost for FakeHost {
    fn publish(&self, job: &PublishJob) -> Result<Published, String> {
        if let Some(err) = &self.refuse_publish {
            return Err(err.clone());
        }
        let minions = self.expected(job);
        let mut state = self.state();
        let jid = format!("2024010112000000{:04}", state.jobs.len());
        let at = state.clock;
        state.jobs.push(Job {
            jid: jid.clone(),
            job: job.clone(),
            minions: minions.clone(),
            at,
        });
        Ok(Published { jid, minions })
    }

    fn wait_returns(
        &self,
        jid: &str,
        minions: &[String],
        deadline: Instant,
    ) -> Vec<(String, Value)> {
        let left = deadline.saturating_duration_since(Instant::now());
        // Deadlines are whole seconds from now: round the microseconds spent away.
        let left = Duration::from_secs(left.as_secs_f64().round() as u64);
        let mut state = self.state();
        let Some(job) = state.jobs.iter().find(|j| j.jid == jid) else {
            return Vec::new();
        };
        let horizon = state.clock + left;
        let awaited: Option<Vec<Duration>> = minions
            .iter()
            .map(|m| self.answer(&state, job, m).map(|(at, _)| at))
            .collect();
        let end = match awaited {
            Some(times) if times.iter().all(|t| *t <= horizon) => times
                .into_iter()
                .max()
                .unwrap_or(state.clock)
                .max(state.clock),
            _ => horizon,
        };
        let mut got: Vec<(Duration, String, Value)> = job
            .minions
            .iter()
            .filter_map(|m| {
                let (at, ret) = self.answer(&state, job, m)?;
                (at <= end).then(|| {
                    let load = map([
                        ("id", Value::from(m.as_str())),
                        ("jid", Value::from(jid)),
                        ("fun", Value::from(job.job.fun.as_str())),
                        ("return", ret),
                        ("retcode", Value::from(0)),
                        ("success", Value::Boolean(true)),
                    ]);
                    (at, m.clone(), load)
                })
            })
            .collect();
        got.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        state.clock = end;
        got.into_iter().map(|(_, id, load)| (id, load)).collect()
    }

    fn jobs(&self) -> &dyn JobStore {
        &self.store
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.accepted
            .iter()
            .filter(|id| !self.keys_gone.contains(id))
            .cloned()
            .collect()
    }

    fn connected(&self) -> Vec<(String, Option<String>)> {
        self.connected.clone()
    }

    fn delete_key(&self, id: &str) -> Result<(), String> {
        if !self.accepted.iter().any(|a| a == id) {
            return Err(format!("no key for {id}"));
        }
        self.state().deleted.push(id.to_owned());
        Ok(())
    }

    fn fire(&self, tag: &str, data: Value) {
        self.state().events.push((tag.to_owned(), data));
    }

    fn opts(&self) -> &MasterConfig {
        &self.opts
    }

    fn sleep(&self, duration: Duration) {
        self.state().clock += duration;
    }

    fn acl_check(
        &self,
        user: &str,
        tgt: &Value,
        tgt_type: &str,
        fun: &Value,
        arg: &Value,
    ) -> Value {
        map([
            ("user", Value::from(user)),
            ("tgt", tgt.clone()),
            ("tgt_type", Value::from(tgt_type)),
            ("fun", fun.clone()),
            ("arg", arg.clone()),
        ])
    }
}

/// The field `key` of the event data fired with `tag`.
pub(crate) fn event_field(host: &FakeHost, tag: &str, key: &str) -> Option<Value> {
    host.events()
        .into_iter()
        .find(|(t, _)| t == tag)
        .and_then(|(_, data)| get(&data, key).cloned())
}
