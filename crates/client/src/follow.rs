//! Whom a job still waits for, and when to ask or give up: the timing half of
//! `LocalClient.get_iter_returns`, without I/O or a clock of its own (the caller passes
//! `now` and does the publishing and listening).
//!
//! Every expected minion gets `timeout` from when it was expected. A minion still silent
//! at its deadline is asked with `saltutil.find_job` (one probe at a time, for all the
//! minions overdue then). The probe ends when every minion asked has answered, or after
//! `gather_job_timeout`:
//! - a minion that says it runs the job gets `timeout` more;
//! - a minion that says it does not run it is given up at once;
//! - a minion that did not answer is given up, unless another minion asked said it runs
//!   the job, in which case it waits with it (as Salt waits while any minion runs it).
//!
//! Deviation from Salt (issue 14, item 4): Salt always waits out `gather_job_timeout`
//! after a probe, even when every minion has answered "not running" long before; here the
//! probe ends with the last answer, so such a job costs `timeout` plus one find_job round
//! trip. A minion that answers "not running" is given up at once even while others still
//! run the job (Salt keeps waiting for it until they finish, and then reports it the same
//! way).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The longest `timeout` or `gather_job_timeout` honoured (ten years): deadlines stay
/// representable whatever `-t` says.
pub const MAX_WAIT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nobody is left to wait for.
    Done,
    /// These minions will not return: report them.
    GiveUp(Vec<String>),
    /// Publish `saltutil.find_job` to these minions, then call [`Tracker::probe_sent`].
    Probe(Vec<String>),
    /// Wait for events until this time, then call [`Tracker::step`] again.
    Wait(Instant),
}

/// A find_job probe in flight.
#[derive(Debug)]
struct Probe {
    jid: String,
    ends: Instant,
    asked: BTreeSet<String>,
    running: BTreeSet<String>,
    idle: BTreeSet<String>,
}

/// The minions one job waits for (see the module docs).
#[derive(Debug)]
pub struct Tracker {
    timeout: Duration,
    gather_job_timeout: Duration,
    /// Minions not heard from, with their deadlines.
    pending: BTreeMap<String, Instant>,
    /// Minions that returned or were given up: never waited for again.
    finished: BTreeSet<String>,
    probe: Option<Probe>,
    /// Minions given up and not yet handed to the caller.
    given_up: Vec<String>,
}

impl Tracker {
    /// A tracker with nobody to wait for yet. Both durations are capped at [`MAX_WAIT`].
    pub fn new(timeout: Duration, gather_job_timeout: Duration) -> Self {
        Tracker {
            timeout: timeout.min(MAX_WAIT),
            gather_job_timeout: gather_job_timeout.min(MAX_WAIT),
            pending: BTreeMap::new(),
            finished: BTreeSet::new(),
            probe: None,
            given_up: Vec::new(),
        }
    }

    /// Waits for `ids` (those not already returned or waited for) until `now + timeout`.
    pub fn expect<'a>(&mut self, ids: impl IntoIterator<Item = &'a String>, now: Instant) {
        for id in ids {
            if !self.finished.contains(id) {
                self.pending.entry(id.clone()).or_insert(now + self.timeout);
            }
        }
    }

    /// A minion returned the job: `true` when this return is news, `false` for a duplicate
    /// or a minion already given up (its late return is not reported).
    pub fn returned(&mut self, id: &str) -> bool {
        if !self.finished.insert(id.to_owned()) {
            return false;
        }
        self.pending.remove(id);
        true
    }

    /// Whether a minion is still waited for.
    pub fn is_pending(&self, id: &str) -> bool {
        self.pending.contains_key(id)
    }

    /// The jid of the probe in flight, whose answers go to [`Tracker::probe_answer`].
    pub fn probe_jid(&self) -> Option<&str> {
        self.probe.as_ref().map(|p| p.jid.as_str())
    }

    /// The find_job publish asked by [`Step::Probe`] for `asked` went out as `jid`, to
    /// the minions of `reached` (the master's expected minions for it). A minion the
    /// master could not reach (no accepted key) cannot answer and is given up at once, as
    /// are all of them when the publish failed (`jid` is `None`).
    pub fn probe_sent(
        &mut self,
        jid: Option<String>,
        asked: Vec<String>,
        reached: &[String],
        now: Instant,
    ) {
        let (asked, unreachable): (BTreeSet<String>, BTreeSet<String>) = asked
            .into_iter()
            .filter(|m| self.pending.contains_key(m))
            .partition(|m| jid.is_some() && reached.contains(m));
        self.give_up(unreachable);
        if let Some(jid) = jid.filter(|_| !asked.is_empty()) {
            self.probe = Some(Probe {
                jid,
                ends: now + self.gather_job_timeout,
                asked,
                running: BTreeSet::new(),
                idle: BTreeSet::new(),
            });
        }
    }

    /// `id` answered the probe `jid`: it still runs the job (`running`) or not. Answers to
    /// another probe, or from minions not asked, are ignored.
    pub fn probe_answer(&mut self, jid: &str, id: &str, running: bool) {
        let Some(probe) = self.probe.as_mut().filter(|p| p.jid == jid) else {
            return;
        };
        if !probe.asked.contains(id) {
            return;
        }
        if running {
            probe.idle.remove(id);
            probe.running.insert(id.to_owned());
        } else if !probe.running.contains(id) {
            probe.idle.insert(id.to_owned());
        }
    }

    /// What to do at `now`.
    pub fn step(&mut self, now: Instant) -> Step {
        if !self.given_up.is_empty() {
            return Step::GiveUp(std::mem::take(&mut self.given_up));
        }
        if self.pending.is_empty() {
            self.probe = None;
            return Step::Done;
        }
        if let Some(probe) = &self.probe {
            let unanswered = probe
                .asked
                .iter()
                .filter(|m| self.pending.contains_key(*m))
                .any(|m| !probe.running.contains(m) && !probe.idle.contains(m));
            if unanswered && now < probe.ends {
                return Step::Wait(probe.ends);
            }
            self.end_probe(now);
            return self.step(now);
        }
        let overdue: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        if !overdue.is_empty() {
            return Step::Probe(overdue);
        }
        match self.pending.values().min() {
            Some(deadline) => Step::Wait(*deadline),
            None => Step::Done,
        }
    }

    /// Applies the probe's answers (module docs).
    fn end_probe(&mut self, now: Instant) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        let someone_runs = !probe.running.is_empty();
        let mut stop = BTreeSet::new();
        for id in probe.asked {
            let Some(deadline) = self.pending.get_mut(&id) else {
                continue;
            };
            if probe.running.contains(&id) || (someone_runs && !probe.idle.contains(&id)) {
                *deadline = now + self.timeout;
            } else {
                stop.insert(id);
            }
        }
        self.give_up(stop);
    }

    fn give_up(&mut self, ids: BTreeSet<String>) {
        for id in ids {
            if self.pending.remove(&id).is_some() {
                self.finished.insert(id.clone());
                self.given_up.push(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);
    const G: Duration = Duration::from_secs(10);

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn tracker(names: &[&str], t0: Instant) -> Tracker {
        let mut t = Tracker::new(T, G);
        t.expect(&ids(names), t0);
        t
    }

    #[test]
    fn waits_for_the_timeout_then_probes_the_silent_minions() {
        let t0 = Instant::now();
        let mut t = tracker(&["a", "b", "c"], t0);
        assert_eq!(t.step(t0), Step::Wait(t0 + T));
        assert!(t.returned("b"));
        assert!(!t.returned("b"), "a duplicate return is not new");
        assert_eq!(t.step(t0 + T), Step::Probe(ids(&["a", "c"])));
    }

    #[test]
    fn a_job_whose_silent_minions_all_say_not_running_ends_with_the_last_answer() {
        let t0 = Instant::now();
        let mut t = tracker(&["a", "b"], t0);
        let at = t0 + T;
        assert_eq!(t.step(at), Step::Probe(ids(&["a", "b"])));
        t.probe_sent(Some("P".into()), ids(&["a", "b"]), &ids(&["a", "b"]), at);
        t.probe_answer("P", "a", false);
        assert_eq!(t.step(at), Step::Wait(at + G), "b has not answered yet");
        t.probe_answer("P", "b", false);
        // Not `gather_job_timeout` later: at once.
        assert_eq!(t.step(at), Step::GiveUp(ids(&["a", "b"])));
        assert_eq!(t.step(at), Step::Done);
    }

    #[test]
    fn a_minion_still_running_gets_more_time_and_the_silent_wait_with_it() {
        let t0 = Instant::now();
        let mut t = tracker(&["busy", "idle", "mute"], t0);
        let at = t0 + T;
        t.probe_sent(
            Some("P".into()),
            ids(&["busy", "idle", "mute"]),
            &ids(&["busy", "idle", "mute"]),
            at,
        );
        t.probe_answer("P", "busy", true);
        t.probe_answer("P", "idle", false);
        let end = at + G;
        assert_eq!(t.step(at), Step::Wait(end), "mute may still answer");
        assert_eq!(t.step(end), Step::GiveUp(ids(&["idle"])));
        assert_eq!(t.step(end), Step::Wait(end + T));
        assert!(t.is_pending("mute"));
        assert!(t.returned("busy"));
        assert_eq!(t.step(end + T), Step::Probe(ids(&["mute"])));
    }

    #[test]
    fn silent_minions_are_given_up_when_the_probe_window_ends_and_nobody_runs_the_job() {
        let t0 = Instant::now();
        let mut t = tracker(&["a", "mute"], t0);
        let at = t0 + T;
        t.probe_sent(
            Some("P".into()),
            ids(&["a", "mute"]),
            &ids(&["a", "mute"]),
            at,
        );
        t.probe_answer("P", "a", false);
        t.probe_answer("OTHER", "mute", true);
        t.probe_answer("P", "stranger", true);
        assert_eq!(
            t.step(at + G - Duration::from_millis(1)),
            Step::Wait(at + G)
        );
        assert_eq!(t.step(at + G), Step::GiveUp(ids(&["a", "mute"])));
        assert_eq!(t.step(at + G), Step::Done);
    }

    #[test]
    fn a_return_during_the_probe_counts_and_ends_the_job_when_it_is_the_last() {
        let t0 = Instant::now();
        let mut t = tracker(&["a"], t0);
        t.probe_sent(Some("P".into()), ids(&["a"]), &ids(&["a"]), t0 + T);
        assert_eq!(t.probe_jid(), Some("P"));
        assert!(t.returned("a"));
        assert_eq!(t.step(t0 + T), Step::Done);
        assert_eq!(t.probe_jid(), None);
    }

    #[test]
    fn a_minion_the_probe_cannot_reach_is_given_up_at_once() {
        let t0 = Instant::now();
        let mut t = tracker(&["a", "nokey"], t0);
        let at = t0 + T;
        t.probe_sent(Some("P".into()), ids(&["a", "nokey"]), &ids(&["a"]), at);
        assert_eq!(t.step(at), Step::GiveUp(ids(&["nokey"])));
        assert_eq!(t.step(at), Step::Wait(at + G));
        t.probe_answer("P", "nokey", true);
        t.probe_answer("P", "a", false);
        assert_eq!(t.step(at), Step::GiveUp(ids(&["a"])));
    }

    #[test]
    fn a_probe_the_master_did_not_publish_gives_the_minions_up() {
        let t0 = Instant::now();
        let mut t = tracker(&["a"], t0);
        t.probe_sent(None, ids(&["a"]), &ids(&["a"]), t0 + T);
        assert_eq!(t.step(t0 + T), Step::GiveUp(ids(&["a"])));
        assert_eq!(t.step(t0 + T), Step::Done);
    }

    #[test]
    fn an_absurd_timeout_is_capped_instead_of_overflowing_the_clock() {
        let t0 = Instant::now();
        let mut t = Tracker::new(Duration::MAX, Duration::MAX);
        t.expect(&ids(&["a"]), t0);
        assert_eq!(t.step(t0), Step::Wait(t0 + MAX_WAIT));
    }

    #[test]
    fn minions_expected_later_get_their_own_deadline() {
        let t0 = Instant::now();
        let mut t = tracker(&["a"], t0);
        let later = t0 + Duration::from_secs(3);
        t.expect(&ids(&["a", "b"]), later);
        assert_eq!(t.step(t0 + T), Step::Probe(ids(&["a"])));
        t.probe_sent(Some("P".into()), ids(&["a"]), &ids(&["a"]), t0 + T);
        t.probe_answer("P", "a", false);
        assert_eq!(t.step(t0 + T), Step::GiveUp(ids(&["a"])));
        assert_eq!(t.step(t0 + T), Step::Wait(later + T));
        // A minion given up or returned is not waited for again.
        t.expect(&ids(&["a"]), later);
        assert!(!t.is_pending("a"));
    }
}
