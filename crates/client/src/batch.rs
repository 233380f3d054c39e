//! `salt --batch` (and `--static`, which is a quiet batch of 100%): Salt's `salt.cli.batch`
//! with its state machine (`salt.utils.batch_state`), over [`LocalClient`].
//!
//! A batch first pings the target (`test.ping` with the same target, waiting as any job
//! waits, find_job probes included); the minions that answer are run, at most
//! [`BatchSize`] at a time, each sub-batch published as a `list` target under one jid
//! chosen by the client. A slot frees when its minion returns or is given up, and stays
//! taken `--batch-wait` seconds more. With `--failhard` a return with a retcode above 0
//! stops the batch: nothing more is published.
//!
//! What it does not do: fire Salt 3008's `salt/batch/<jid>/*` visibility events, or hand
//! an `--async` batch to a master-side batch manager (a Halite master has none).
//!
//! Deviations from Salt, on purpose:
//! - Minions run in sorted order of their ids (Salt's order is a Python set's).
//! - When one wake-up brings several returns and one of them trips `--failhard`, Salt
//!   reports only the first of them (possibly a good one, leaving the exit code 0); here
//!   the returns are reported in order up to and including the one that tripped it.

use crate::local::{JobEvent, JobWatch, LocalClient, PublishRequest};
use crate::Error;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// `--batch`: how many minions run at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchSize {
    /// A number of minions.
    Count(i64),
    /// A percentage of the minions that answered the ping.
    Percent(f64),
}

impl BatchSize {
    /// Parses `--batch` as `get_batch_size` does: a spec holding `%` is a percentage (the
    /// `%` signs at either end stripped: `10%` and `%10` alike), anything else an integer.
    /// `None` is Salt's "Invalid batch specification".
    pub fn parse(spec: &str) -> Option<BatchSize> {
        if spec.contains('%') {
            let number = spec.trim_matches('%').trim();
            number
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite())
                .map(BatchSize::Percent)
        } else {
            spec.trim().parse::<i64>().ok().map(BatchSize::Count)
        }
    }

    /// Whether every minion runs in one sub-batch whatever their number (100 % or more).
    pub fn is_everyone(self) -> bool {
        matches!(self, BatchSize::Percent(p) if p >= 100.0)
    }

    /// Minions per sub-batch out of `minions`: at least 1 (`get_batch_size`; a percentage
    /// rounds down, and up when below 1).
    pub fn of(self, minions: usize) -> usize {
        match self {
            BatchSize::Count(n) => usize::try_from(n).unwrap_or(0).max(1),
            BatchSize::Percent(p) => {
                let res = p / 100.0 * minions as f64;
                if res < 1.0 {
                    1
                } else {
                    // Finite and at least 1; `as` saturates at usize::MAX.
                    res as usize
                }
            }
        }
    }
}

/// How a batch runs.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// Minions at once.
    pub size: BatchSize,
    /// `--batch-wait`: how long a slot stays taken after its minion finished.
    pub wait: Duration,
    /// `--failhard`: stop at the first return with a retcode above 0.
    pub failhard: bool,
    /// The job's `timeout`.
    pub timeout: Duration,
    /// `gather_job_timeout`, for find_job probes.
    pub gather_job_timeout: Duration,
}

/// What happened in a batch, in the order `salt` prints it.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    /// The target matched no minion: the master assigned no jid to the ping.
    NoMatch,
    /// A minion did not answer the ping: no job is sent to it.
    Down(String),
    /// A sub-batch is published to these minions.
    Start(Vec<String>),
    /// A minion returned: its id, its return load and the load's retcode.
    Return(String, Value, i64),
    /// A minion did not return in time.
    Timeout(String),
    /// `--failhard` stopped the batch.
    Halted,
}

/// A return load's retcode as Salt reads it (`_collapse_retcode`): `retcode`, the highest
/// of a dict of them, 0 when missing or not a number.
pub fn return_retcode(load: &Value) -> i64 {
    match value::get(load, "retcode") {
        Some(Value::Integer(i)) => {
            i.as_i64()
                .unwrap_or(if i.as_u64().is_some() { i64::MAX } else { 0 })
        }
        Some(Value::Map(entries)) => entries
            .iter()
            .filter_map(|(_, v)| v.as_i64())
            .max()
            .unwrap_or(0),
        _ => 0,
    }
}

/// The batch state machine (`salt.utils.batch_state`): minions pending, running, finished,
/// and the slots `--batch-wait` holds.
#[derive(Debug)]
pub struct BatchState {
    pending: VecDeque<String>,
    active: BTreeMap<String, Instant>,
    size: usize,
    failhard: bool,
    wait: Duration,
    /// When each slot held by `--batch-wait` frees.
    cooldowns: Vec<Instant>,
    halted: bool,
}

/// What [`BatchState::progress`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Publish to these minions now.
    pub publish: Vec<String>,
    /// How many of the returns given to report (all of them unless `--failhard` tripped).
    pub report: usize,
}

impl BatchState {
    /// A batch over `minions` (in this order) with `opts`' size, wait and failhard.
    pub fn new(minions: Vec<String>, opts: &BatchOptions) -> Self {
        let size = opts.size.of(minions.len());
        BatchState {
            pending: minions.into(),
            active: BTreeMap::new(),
            size,
            failhard: opts.failhard,
            wait: opts.wait,
            cooldowns: Vec::new(),
            halted: false,
        }
    }

    /// `progress_batch`: takes the returns (id, retcode) and the minions given up since
    /// the last call, and says whom to publish to next.
    pub fn progress(
        &mut self,
        returns: &[(String, i64)],
        timed_out: &[String],
        now: Instant,
    ) -> Progress {
        let mut report = returns.len();
        for (i, (id, retcode)) in returns.iter().enumerate() {
            self.finish(id, now);
            if self.failhard && *retcode > 0 {
                self.halted = true;
                report = i + 1;
                break;
            }
        }
        for id in timed_out {
            self.finish(id, now);
        }
        self.cooldowns.retain(|end| *end > now);
        let mut publish = Vec::new();
        if !self.halted {
            let taken = self.active.len() + self.cooldowns.len();
            let free = self.size.saturating_sub(taken);
            while publish.len() < free {
                let Some(id) = self.pending.pop_front() else {
                    break;
                };
                self.active.insert(id.clone(), now);
                publish.push(id);
            }
        }
        Progress { publish, report }
    }

    fn finish(&mut self, id: &str, now: Instant) {
        if self.active.remove(id).is_some() && !self.wait.is_zero() {
            self.cooldowns.push(now + self.wait);
        }
    }

    /// Whether `--failhard` stopped the batch.
    pub fn halted(&self) -> bool {
        self.halted
    }

    /// Whether the batch is over: halted, or nobody pending or running.
    pub fn is_done(&self) -> bool {
        self.halted || (self.pending.is_empty() && self.active.is_empty())
    }

    /// When the next slot held by `--batch-wait` frees.
    pub fn next_cooldown_end(&self) -> Option<Instant> {
        self.cooldowns.iter().min().copied()
    }
}

impl LocalClient {
    /// A batch of everyone without the ping (see [`LocalClient::run_batch`]): `req` is
    /// published to its own target, and each return is reported as it arrives; minions
    /// that do not return are not reported.
    async fn run_unpinged(
        &self,
        req: &PublishRequest,
        opts: &BatchOptions,
        mut on_event: impl FnMut(BatchEvent),
    ) -> Result<usize, Error> {
        let mut listener = self.listen_jobs().await?;
        let reply = self.publish(req).await?;
        let Some(jid) = reply.jid else {
            on_event(BatchEvent::NoMatch);
            return Ok(0);
        };
        on_event(BatchEvent::Start(reply.minions.clone()));
        let mut watch = JobWatch::new(&jid, opts.timeout, opts.gather_job_timeout);
        watch.expect(&reply.minions, Instant::now());
        let mut ran = 0;
        while let Some(events) = watch.next(self, &mut listener, None).await? {
            for event in events {
                if let JobEvent::Return(id, load) = event {
                    let retcode = return_retcode(&load);
                    ran += 1;
                    on_event(BatchEvent::Return(id, load, retcode));
                    if opts.failhard && retcode > 0 {
                        on_event(BatchEvent::Halted);
                        return Ok(ran);
                    }
                }
            }
        }
        Ok(ran)
    }

    /// Runs `req` as a batch (module docs), handing each [`BatchEvent`] to `on_event` as it
    /// happens. Returns how many minions the job was sent to (0: nothing ran, which `salt`
    /// reports as "No return received").
    pub async fn run_batch(
        &self,
        req: &PublishRequest,
        opts: &BatchOptions,
        mut on_event: impl FnMut(BatchEvent),
    ) -> Result<usize, Error> {
        let mut listener = self.listen_jobs().await?;

        // The ping (`Batch.gather_minions`).
        let ping = PublishRequest {
            fun: s("test.ping"),
            arg: Value::Array(vec![]),
            ret: String::new(),
            ..req.clone()
        };
        let reply = match self.publish(&ping).await {
            Ok(reply) => reply,
            // A caller whose ACL allows the job but not `test.ping` (a `publisher_acl` or
            // eauth user): Salt's batch stops here with "Authorization error occurred.".
            // A batch of everyone (`--static`) needs no ping to split the target: the job
            // itself is published to the whole target, and minions that do not return
            // are left out as the ping would have left them out.
            Err(Error::Authorization) if opts.size.is_everyone() => {
                return self.run_unpinged(req, opts, on_event).await;
            }
            Err(e) => return Err(e),
        };
        let Some(ping_jid) = reply.jid else {
            on_event(BatchEvent::NoMatch);
            return Ok(0);
        };
        let mut watch = JobWatch::new(&ping_jid, opts.timeout, opts.gather_job_timeout);
        watch.expect(&reply.minions, Instant::now());
        let mut up = Vec::new();
        let mut down = Vec::new();
        while let Some(events) = watch.next(self, &mut listener, None).await? {
            for event in events {
                match event {
                    JobEvent::Return(id, _) => up.push(id),
                    JobEvent::NoReturn(id) => down.push(id),
                }
            }
        }
        if up.is_empty() {
            return Ok(0);
        }
        down.sort();
        for id in down {
            on_event(BatchEvent::Down(id));
        }
        up.sort();
        let count = up.len();

        let jid = halite_proto::jid::format_jid(chrono::Utc::now());
        let mut state = BatchState::new(up, opts);
        let mut watch = JobWatch::new(&jid, opts.timeout, opts.gather_job_timeout);
        let mut returns: Vec<(String, Value, i64)> = Vec::new();
        let mut timed_out: Vec<String> = Vec::new();
        loop {
            let codes: Vec<(String, i64)> = returns
                .iter()
                .map(|(id, _, rc)| (id.clone(), *rc))
                .collect();
            let progress = state.progress(&codes, &timed_out, Instant::now());
            if !progress.publish.is_empty() {
                on_event(BatchEvent::Start(progress.publish.clone()));
                let sub = PublishRequest {
                    tgt: Value::Array(progress.publish.iter().map(|m| s(m.clone())).collect()),
                    tgt_type: "list".into(),
                    kwargs: vec![],
                    ..req.clone()
                };
                self.publish_with_jid(&sub, &jid).await?;
                watch.expect(&progress.publish, Instant::now());
            }
            for (id, load, retcode) in returns.drain(..).take(progress.report) {
                on_event(BatchEvent::Return(id, load, retcode));
            }
            if state.halted() {
                on_event(BatchEvent::Halted);
                break;
            }
            for id in timed_out.drain(..) {
                on_event(BatchEvent::Timeout(id));
            }
            if state.is_done() {
                break;
            }
            let until = state.next_cooldown_end();
            match watch.next(self, &mut listener, until).await? {
                Some(events) => {
                    for event in events {
                        match event {
                            JobEvent::Return(id, load) => {
                                let retcode = return_retcode(&load);
                                returns.push((id, load, retcode));
                            }
                            JobEvent::NoReturn(id) => timed_out.push(id),
                        }
                    }
                }
                // Nobody runs: only `--batch-wait` holds the next sub-batch back.
                None => match until {
                    Some(until) => tokio::time::sleep_until(until.into()).await,
                    None => break,
                },
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(size: BatchSize, wait: u64, failhard: bool) -> BatchOptions {
        BatchOptions {
            size,
            wait: Duration::from_secs(wait),
            failhard,
            timeout: Duration::from_secs(5),
            gather_job_timeout: Duration::from_secs(10),
        }
    }

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn batch_sizes_are_read_and_applied_as_salts_get_batch_size() {
        assert_eq!(BatchSize::parse("3"), Some(BatchSize::Count(3)));
        assert_eq!(BatchSize::parse(" 2 "), Some(BatchSize::Count(2)));
        assert_eq!(BatchSize::parse("50%"), Some(BatchSize::Percent(50.0)));
        assert_eq!(BatchSize::parse("%10"), Some(BatchSize::Percent(10.0)));
        for bad in ["abc", "", "1.5", "x%", "inf%", "%"] {
            assert_eq!(BatchSize::parse(bad), None, "{bad:?}");
        }
        assert_eq!(BatchSize::Count(2).of(3), 2);
        assert_eq!(BatchSize::Count(0).of(3), 1);
        assert_eq!(BatchSize::Count(-4).of(3), 1);
        assert_eq!(BatchSize::Percent(50.0).of(3), 1, "1.5 rounds down");
        assert_eq!(BatchSize::Percent(10.0).of(3), 1, "0.3 rounds up to 1");
        assert_eq!(BatchSize::Percent(0.0).of(3), 1);
        assert_eq!(BatchSize::Percent(100.0).of(20), 20);
        assert_eq!(BatchSize::Percent(25.0).of(10), 2);
        assert!(BatchSize::Percent(100.0).is_everyone());
        assert!(!BatchSize::Percent(99.0).is_everyone() && !BatchSize::Count(1000).is_everyone());
    }

    #[test]
    fn a_slot_frees_when_its_minion_returns_or_is_given_up() {
        let t0 = Instant::now();
        let mut st = BatchState::new(
            ids(&["a", "b", "c", "d"]),
            &opts(BatchSize::Count(2), 0, false),
        );
        assert_eq!(st.progress(&[], &[], t0).publish, ids(&["a", "b"]));
        assert_eq!(st.progress(&[], &[], t0).publish, Vec::<String>::new());
        let p = st.progress(&[("a".into(), 0)], &[], t0);
        assert_eq!(
            p,
            Progress {
                publish: ids(&["c"]),
                report: 1
            }
        );
        assert_eq!(st.progress(&[], &ids(&["b"]), t0).publish, ids(&["d"]));
        assert!(!st.is_done());
        st.progress(&[("c".into(), 3), ("d".into(), 0)], &[], t0);
        assert!(st.is_done());
        assert!(!st.halted());
    }

    #[test]
    fn batch_wait_holds_a_finished_slot() {
        let t0 = Instant::now();
        let mut st = BatchState::new(ids(&["a", "b"]), &opts(BatchSize::Count(1), 2, false));
        assert_eq!(st.progress(&[], &[], t0).publish, ids(&["a"]));
        let t1 = t0 + Duration::from_secs(1);
        assert!(st.progress(&[("a".into(), 0)], &[], t1).publish.is_empty());
        assert_eq!(st.next_cooldown_end(), Some(t1 + Duration::from_secs(2)));
        assert!(st
            .progress(&[], &[], t1 + Duration::from_secs(1))
            .publish
            .is_empty());
        let t3 = t1 + Duration::from_secs(2);
        assert_eq!(st.progress(&[], &[], t3).publish, ids(&["b"]));
        assert_eq!(st.next_cooldown_end(), None);
    }

    #[test]
    fn failhard_stops_at_the_first_return_above_zero_and_reports_up_to_it() {
        let t0 = Instant::now();
        let mut st = BatchState::new(
            ids(&["a", "b", "c", "d"]),
            &opts(BatchSize::Count(3), 0, true),
        );
        st.progress(&[], &[], t0);
        // A negative retcode does not trip it; 2 does.
        let p = st.progress(
            &[("a".into(), -1), ("b".into(), 2), ("c".into(), 0)],
            &[],
            t0,
        );
        assert_eq!(
            p,
            Progress {
                publish: vec![],
                report: 2
            }
        );
        assert!(st.halted());
        assert!(st.is_done());
        // Without failhard the same returns go on to the next sub-batch.
        let mut st = BatchState::new(
            ids(&["a", "b", "c", "d"]),
            &opts(BatchSize::Count(3), 0, false),
        );
        st.progress(&[], &[], t0);
        let p = st.progress(&[("a".into(), 0), ("b".into(), 2)], &[], t0);
        assert_eq!(
            p,
            Progress {
                publish: ids(&["d"]),
                report: 2
            }
        );
    }

    #[test]
    fn retcodes_are_collapsed_as_salt_does() {
        use halite_proto::value::map;
        assert_eq!(return_retcode(&map([("retcode", Value::from(3))])), 3);
        assert_eq!(
            return_retcode(&map([(
                "retcode",
                map([("a", Value::from(1)), ("b", Value::from(4))])
            )])),
            4
        );
        assert_eq!(return_retcode(&map([("retcode", Value::Map(vec![]))])), 0);
        assert_eq!(return_retcode(&map([("retcode", s("x"))])), 0);
        assert_eq!(return_retcode(&map([("return", Value::Boolean(true))])), 0);
    }
}
