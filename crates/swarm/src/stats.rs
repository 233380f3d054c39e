//! Counters of a running swarm and the JSON lines it prints on stdout.
//!
//! Every line is one JSON object with a `type`: `keys` (keys ready), `started` (minion tasks
//! running), `progress` (counters, at most once a second and only when they changed), `ready`
//! (every minion authenticated and subscribed; `secs` since `started`), `stats` (counters,
//! on request and at exit). The benchmark runner reads them; people can too.

use serde_json::{json, Value as Json};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters, updated by every minion task.
#[derive(Debug, Default)]
pub struct Stats {
    /// Minions that finished their first sign-in.
    pub authenticated: AtomicU64,
    /// Minions whose subscription is on the wire (first time).
    pub subscribed: AtomicU64,
    /// `_auth` requests sent (first sign-ins and re-authentications).
    pub auth_requests: AtomicU64,
    /// `_auth` requests that failed or timed out and were retried.
    pub auth_retries: AtomicU64,
    /// Sign-ins answered "pending" (key not accepted yet) or "full".
    pub auth_pending: AtomicU64,
    /// Minions that gave up: key rejected or denied, or an unusable master reply.
    pub auth_failed: AtomicU64,
    /// Re-authentications (the master forgot the session or rotated the AES key).
    pub reauths: AtomicU64,
    /// Publish frames received (all minions together).
    pub publishes: AtomicU64,
    /// Publishes that targeted the receiving minion.
    pub jobs: AtomicU64,
    /// Returns the master acknowledged.
    pub returns: AtomicU64,
    /// Returns given up after every retry.
    pub return_failures: AtomicU64,
    /// Events the master acknowledged.
    pub events: AtomicU64,
    /// Events that failed (timeout, error reply).
    pub event_failures: AtomicU64,
    /// Subscriptions lost and re-established.
    pub resubscribes: AtomicU64,
    /// Requests of simulated `state.apply` runs the master answered.
    pub state_requests: AtomicU64,
    /// Requests of simulated `state.apply` runs that failed.
    pub state_request_failures: AtomicU64,
}

/// Increments a counter.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Stats {
    /// The counters as a JSON object.
    pub fn snapshot(&self) -> Json {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "authenticated": g(&self.authenticated),
            "subscribed": g(&self.subscribed),
            "auth_requests": g(&self.auth_requests),
            "auth_retries": g(&self.auth_retries),
            "auth_pending": g(&self.auth_pending),
            "auth_failed": g(&self.auth_failed),
            "reauths": g(&self.reauths),
            "publishes": g(&self.publishes),
            "jobs": g(&self.jobs),
            "returns": g(&self.returns),
            "return_failures": g(&self.return_failures),
            "events": g(&self.events),
            "event_failures": g(&self.event_failures),
            "resubscribes": g(&self.resubscribes),
            "state_requests": g(&self.state_requests),
            "state_request_failures": g(&self.state_request_failures),
        })
    }
}

/// Prints one report line: `{"type": kind, ...fields}` on stdout, flushed.
pub fn emit(kind: &str, fields: Json) {
    let mut obj = serde_json::Map::new();
    obj.insert("type".into(), Json::from(kind));
    if let Json::Object(extra) = fields {
        obj.extend(extra);
    }
    let line = Json::Object(obj).to_string();
    let mut out = std::io::stdout().lock();
    // A closed stdout (the reader went away) must not stop the swarm.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reports_every_counter() {
        let s = Stats::default();
        inc(&s.returns);
        inc(&s.returns);
        let snap = s.snapshot();
        assert_eq!(snap["returns"], 2);
        assert_eq!(snap["authenticated"], 0);
        assert_eq!(snap.as_object().unwrap().len(), 16);
    }
}
