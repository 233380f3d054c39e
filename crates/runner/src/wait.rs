//! Publishing a job and gathering its returns the way Salt's `LocalClient` does for the
//! CLI (`client/__init__.py · run_job` + `get_cli_event_returns` / `get_iter_returns`),
//! built on [`RunnerHost::publish`] and [`RunnerHost::wait_returns`].
//!
//! 1. Publish; nothing matched means no job (`run_job` answers `{}`).
//! 2. Wait up to `timeout` for the expected minions, returning at once when all have
//!    answered.
//! 3. Ask the silent minions that still have an accepted key whether they still run the
//!    job (`saltutil.find_job <jid>`, target type `list`) and wait up to
//!    `gather_job_timeout` for their answers, returning at once when all have answered.
//! 4. A minion whose answer is a non-empty job entry is still running it: wait another
//!    `timeout` for those minions and probe again. Every other silent minion is given up.
//!
//! Unlike Salt, which always waits out the whole probe window and every minion's own
//! deadline, a wait here ends as soon as nobody is left to wait for: a job all minions
//! answer ends at the last answer, and a minion that is down is reported after `timeout`
//! plus one probe round at most. Returns from minions that were given up still count if
//! they arrived before the wait ended, as in Salt.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rmpv::Value;

use crate::error::RunnerError;
use crate::pyval::{get, truthy};
use crate::{PublishJob, RunnerHost};

/// The longest single wait: Salt's integer timeouts can be absurdly large, and an
/// `Instant` cannot be pushed arbitrarily far.
const MAX_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How long to wait for a job's returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Seconds to wait for returns before probing (Salt's `timeout`).
    pub timeout: u64,
    /// Seconds to wait for `saltutil.find_job` answers (Salt's `gather_job_timeout`).
    pub gather_job_timeout: u64,
}

/// A published job and what came back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Gathered {
    /// The minions the master expected, sorted.
    pub expected: Vec<String>,
    /// The returns that arrived, first per minion, in arrival order: (minion id, return
    /// load).
    pub returns: Vec<(String, Value)>,
}

impl Gathered {
    /// Whether `id` returned.
    pub fn returned(&self, id: &str) -> bool {
        self.returns.iter().any(|(m, _)| m == id)
    }
}

/// `Instant::now() + secs`, bounded by [`MAX_WAIT`].
fn deadline_after(secs: u64) -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(secs).min(MAX_WAIT))
        .unwrap_or(now)
}

/// Publishes `job` and gathers its returns; `None` when no minion matched (Salt's empty
/// `pub_data`). A refused publish is Salt's `SaltClientError`.
pub(crate) fn publish_and_gather(
    host: &dyn RunnerHost,
    job: &PublishJob,
    timeouts: Timeouts,
) -> Result<Option<Gathered>, RunnerError> {
    let published = host
        .publish(job)
        .map_err(|e| RunnerError::exception("salt.exceptions.SaltClientError", e))?;
    if published.minions.is_empty() {
        return Ok(None);
    }
    let expected: BTreeSet<String> = published.minions.iter().cloned().collect();
    tracing::debug!(
        "jid {} published to {}",
        published.jid,
        expected.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let jid = published.jid;
    let mut returns: Vec<(String, Value)> = Vec::new();
    let mut waiting = expected.clone();
    let mut deadline = deadline_after(timeouts.timeout);
    loop {
        let list: Vec<String> = waiting.iter().cloned().collect();
        record(&mut returns, host.wait_returns(&jid, &list, deadline));
        waiting.retain(|id| !returns.iter().any(|(m, _)| m == id));
        if waiting.is_empty() {
            break;
        }
        let running = probe(host, &jid, &waiting, timeouts.gather_job_timeout);
        // Returns that came in while the probe ran.
        let list: Vec<String> = waiting.iter().cloned().collect();
        record(&mut returns, host.wait_returns(&jid, &list, Instant::now()));
        waiting = running
            .into_iter()
            .filter(|id| !returns.iter().any(|(m, _)| m == id))
            .collect();
        if waiting.is_empty() {
            break;
        }
        tracing::debug!(
            "jid {} still running on {}",
            jid,
            waiting.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        deadline = deadline_after(timeouts.timeout);
    }
    Ok(Some(Gathered {
        expected: expected.into_iter().collect(),
        returns,
    }))
}

/// Adds the first return of each minion in `got` that has not returned yet.
fn record(returns: &mut Vec<(String, Value)>, got: Vec<(String, Value)>) {
    for (id, load) in got {
        if !returns.iter().any(|(m, _)| *m == id) {
            returns.push((id, load));
        }
    }
}

/// `gather_job_info`: asks the accepted minions among `silent` whether they still run
/// `jid`; answers those that do.
fn probe(
    host: &dyn RunnerHost,
    jid: &str,
    silent: &BTreeSet<String>,
    gather_job_timeout: u64,
) -> BTreeSet<String> {
    let accepted: BTreeSet<String> = host.accepted_ids().into_iter().collect();
    let targets: Vec<String> = silent.intersection(&accepted).cloned().collect();
    if targets.is_empty() {
        return BTreeSet::new();
    }
    let job = PublishJob {
        tgt: Value::Array(targets.iter().map(|t| Value::from(t.as_str())).collect()),
        tgt_type: "list".to_owned(),
        fun: "saltutil.find_job".to_owned(),
        arg: vec![Value::from(jid)],
        timeout: Some(gather_job_timeout),
    };
    let published = match host.publish(&job) {
        Ok(p) if !p.minions.is_empty() => p,
        Ok(_) => return BTreeSet::new(),
        Err(e) => {
            tracing::warn!("saltutil.find_job for jid {} was not published: {}", jid, e);
            return BTreeSet::new();
        }
    };
    host.wait_returns(
        &published.jid,
        &published.minions,
        deadline_after(gather_job_timeout),
    )
    .into_iter()
    .filter(|(id, load)| silent.contains(id) && still_running(load))
    .map(|(id, _)| id)
    .collect()
}

/// Whether a `saltutil.find_job` return says the job still runs: a non-empty job entry
/// (not `{}`, not a string, not `{"return": {}}`) from a call that did not fail.
fn still_running(load: &Value) -> bool {
    let failed = matches!(get(load, "retcode"), Some(Value::Integer(code)) if code.as_i64().is_none_or(|c| c > 0));
    let busy = match get(load, "return") {
        Some(entry @ Value::Map(_)) => {
            truthy(entry) && !matches!(get(entry, "return"), Some(Value::Map(m)) if m.is_empty())
        }
        _ => false,
    };
    busy && !failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testhost::{FakeHost, Minion};

    fn ping() -> PublishJob {
        PublishJob {
            tgt: Value::from("*"),
            tgt_type: "glob".to_owned(),
            fun: "test.ping".to_owned(),
            arg: vec![],
            timeout: Some(5),
        }
    }

    const T: Timeouts = Timeouts {
        timeout: 5,
        gather_job_timeout: 10,
    };

    fn ids(g: &Gathered) -> Vec<&str> {
        g.returns.iter().map(|(m, _)| m.as_str()).collect()
    }

    #[test]
    fn a_job_nobody_matches_is_no_job() {
        let host = FakeHost::new(&[]);
        assert_eq!(publish_and_gather(&host, &ping(), T), Ok(None));
        assert_eq!(host.elapsed(), Duration::ZERO);
    }

    #[test]
    fn all_answers_end_the_wait_at_the_last_answer() {
        let host = FakeHost::new(&[("a", Minion::up_after(0)), ("b", Minion::up_after(2))]);
        let long = Timeouts {
            timeout: 3600,
            gather_job_timeout: 3600,
        };
        let started = Instant::now();
        let got = publish_and_gather(&host, &ping(), long).unwrap().unwrap();
        assert_eq!(ids(&got), ["a", "b"]);
        assert_eq!(got.expected, ["a", "b"]);
        assert_eq!(host.elapsed(), Duration::from_secs(2));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(host.published_funs(), ["test.ping"], "no probe was needed");
    }

    #[test]
    fn a_down_minion_is_given_up_after_timeout_plus_one_probe_round() {
        let host = FakeHost::new(&[("a", Minion::up_after(0)), ("dead", Minion::Down)]);
        let got = publish_and_gather(&host, &ping(), T).unwrap().unwrap();
        assert_eq!(ids(&got), ["a"]);
        assert!(!got.returned("dead"));
        assert_eq!(host.elapsed(), Duration::from_secs(5 + 10));
        assert_eq!(host.published_funs(), ["test.ping", "saltutil.find_job"]);
        let probe = host.published(1);
        assert_eq!(probe.tgt, Value::Array(vec![Value::from("dead")]));
        assert_eq!(probe.tgt_type, "list");
        assert_eq!(probe.timeout, Some(10));
    }

    #[test]
    fn a_minion_still_running_the_job_gets_more_time() {
        let host = FakeHost::new(&[("slow", Minion::up_after(12))]);
        let got = publish_and_gather(&host, &ping(), T).unwrap().unwrap();
        assert_eq!(ids(&got), ["slow"]);
        // Probe at 5 (answered at once: running), wait to 10, probe again, return at 12.
        assert_eq!(host.elapsed(), Duration::from_secs(12));
        assert_eq!(
            host.published_funs(),
            ["test.ping", "saltutil.find_job", "saltutil.find_job"]
        );
    }

    #[test]
    fn a_minion_that_answers_the_probe_with_nothing_is_given_up_at_once() {
        let host = FakeHost::new(&[("lost", Minion::forgot_job())]);
        let got = publish_and_gather(&host, &ping(), T).unwrap().unwrap();
        assert!(got.returns.is_empty());
        assert_eq!(host.elapsed(), Duration::from_secs(5));
    }

    #[test]
    fn silent_minions_without_an_accepted_key_are_not_probed() {
        let mut host = FakeHost::new(&[("gone", Minion::Down)]);
        host.keys_gone.push("gone".to_owned());
        let got = publish_and_gather(&host, &ping(), T).unwrap().unwrap();
        assert!(got.returns.is_empty());
        assert_eq!(host.elapsed(), Duration::from_secs(5));
        assert_eq!(host.published_funs(), ["test.ping"]);
    }

    #[test]
    fn a_refused_publish_is_a_salt_client_error() {
        let mut host = FakeHost::new(&[("a", Minion::up_after(0))]);
        host.refuse_publish = Some("Salt request timed out.".to_owned());
        assert_eq!(
            publish_and_gather(&host, &ping(), T),
            Err(RunnerError::exception(
                "salt.exceptions.SaltClientError",
                "Salt request timed out."
            ))
        );
    }

    #[test]
    fn find_job_answers_are_read_as_salt_reads_them() {
        let load = |ret: Value, retcode: i64| {
            Value::Map(vec![
                (Value::from("return"), ret),
                (Value::from("retcode"), Value::from(retcode)),
            ])
        };
        let job = Value::Map(vec![(Value::from("jid"), Value::from("1"))]);
        assert!(still_running(&load(job.clone(), 0)));
        assert!(!still_running(&load(job, 1)), "a failed find_job");
        assert!(!still_running(&load(Value::Map(vec![]), 0)));
        assert!(!still_running(&load(
            Value::from("'saltutil.find_job' is not available."),
            0
        )));
        assert!(!still_running(&load(
            Value::Map(vec![(Value::from("return"), Value::Map(vec![]))]),
            0
        )));
        assert!(!still_running(&Value::Nil));
    }
}
