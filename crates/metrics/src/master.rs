//! The master's metric set: what request workers count as things happen (atomics), and
//! what the master reads at snapshot time ([`Sampled`]).

use crate::snapshot::{Family, HistogramSample, Kind, Sample, SampleValue, Snapshot, Unit};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A counter: one relaxed atomic add per event.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Counts one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds of the latency buckets, in nanoseconds: 100 µs to 10 s (a `+Inf` bucket
/// follows). Request-port handlers take from tens of microseconds (`_return`) to a few
/// milliseconds (a sign-in's RSA work); held replies are not timed here.
pub const LATENCY_BUCKETS_NANOS: [u64; 16] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A latency histogram with the [`LATENCY_BUCKETS_NANOS`] bounds: an observation is two
/// relaxed atomic adds (its bucket, the sum); the count is the buckets' total.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS_NANOS.len() + 1],
    /// Sum of the observations, nanoseconds (wraps after 584 years of handling).
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Records one duration.
    pub fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let i = LATENCY_BUCKETS_NANOS.partition_point(|bound| *bound < nanos);
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The histogram now, in seconds.
    pub fn sample(&self) -> HistogramSample {
        let bounds = LATENCY_BUCKETS_NANOS
            .iter()
            .map(|n| *n as f64 / 1e9)
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds
            .zip(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let count = buckets
            .iter()
            .fold(0u64, |total, (_, n)| total.saturating_add(*n));
        HistogramSample {
            buckets,
            sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            count,
        }
    }
}

/// Why a minion's sign-in (`_auth`) did not end with its key accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// The load is not a sign-in request.
    Malformed,
    /// The id is not a valid minion id.
    InvalidId,
    /// The presented public key does not parse.
    BadKey,
    /// The key waits in `minions_pre/` (new or still pending).
    Pending,
    /// The key is rejected (or autorejected).
    Rejected,
    /// Another key is stored for the id (`minions_denied/`).
    Denied,
    /// `max_minions` or `max_pending_keys` is reached.
    Full,
    /// The master failed to read or store the key, or to build the reply.
    Error,
}

impl AuthFailure {
    /// Every reason, in label order.
    pub const ALL: [AuthFailure; 8] = [
        AuthFailure::Malformed,
        AuthFailure::InvalidId,
        AuthFailure::BadKey,
        AuthFailure::Pending,
        AuthFailure::Rejected,
        AuthFailure::Denied,
        AuthFailure::Full,
        AuthFailure::Error,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::Malformed => "malformed",
            AuthFailure::InvalidId => "invalid_id",
            AuthFailure::BadKey => "bad_key",
            AuthFailure::Pending => "pending",
            AuthFailure::Rejected => "rejected",
            AuthFailure::Denied => "denied",
            AuthFailure::Full => "full",
            AuthFailure::Error => "error",
        }
    }
}

/// How a client (a CLI, `halite-api`) failed to authenticate a clear request: Salt's
/// "Authentication failure of type ... occurred".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A local user's key (`cachedir/.<user>_key`) that is not one.
    User,
    /// An `external_auth` login (wrong password, backend not enabled, too many waiting).
    Eauth,
    /// An eauth token (unknown, expired, not hexadecimal).
    Token,
}

impl ClientAuth {
    /// Every kind, in label order.
    pub const ALL: [ClientAuth; 3] = [ClientAuth::User, ClientAuth::Eauth, ClientAuth::Token];

    /// The `auth` label.
    pub fn label(self) -> &'static str {
        match self {
            ClientAuth::User => "user",
            ClientAuth::Eauth => "eauth",
            ClientAuth::Token => "token",
        }
    }
}

/// Why an encrypted request was refused before a handler saw it (each is answered
/// `"bad load"`, which makes a genuine minion sign in again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRefusal {
    /// The id is not a valid minion id.
    InvalidId,
    /// No current session key for the id (e.g. after a master restart).
    NoSession,
    /// The request did not decrypt with the session key.
    Undecryptable,
    /// `request_server_ttl`: too old.
    Expired,
    /// The id has no accepted key.
    NotAccepted,
    /// The minion's `tok` signature did not verify.
    BadToken,
}

impl RequestRefusal {
    /// Every reason, in label order.
    pub const ALL: [RequestRefusal; 6] = [
        RequestRefusal::InvalidId,
        RequestRefusal::NoSession,
        RequestRefusal::Undecryptable,
        RequestRefusal::Expired,
        RequestRefusal::NotAccepted,
        RequestRefusal::BadToken,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            RequestRefusal::InvalidId => "invalid_id",
            RequestRefusal::NoSession => "no_session",
            RequestRefusal::Undecryptable => "undecryptable",
            RequestRefusal::Expired => "expired",
            RequestRefusal::NotAccepted => "not_accepted",
            RequestRefusal::BadToken => "bad_token",
        }
    }
}

/// Minion keys by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyCounts {
    /// `minions/`.
    pub accepted: u64,
    /// `minions_pre/`.
    pub pending: u64,
    /// `minions_rejected/`.
    pub rejected: u64,
    /// `minions_denied/`.
    pub denied: u64,
}

/// The master event bus's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusCounts {
    /// Events published since the start.
    pub published: u64,
    /// Events subscribers that fell behind lost.
    pub dropped: u64,
    /// Subscribers now.
    pub subscribers: u64,
}

/// The job-cache writer's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCacheQueue {
    /// Writes waiting.
    pub depth: u64,
    /// What they count for in the queue's byte bound.
    pub bytes: u64,
    /// Whether the job cache cannot be written now (writes kept for retrying).
    pub failing: bool,
}

/// Panics the master survived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Panics {
    /// In request handling.
    pub request: u64,
    /// In background work (held replies, logins, job-cache writes, timers).
    pub background: u64,
}

/// What the master reads when a snapshot is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sampled {
    /// Keys by state.
    pub keys: KeyCounts,
    /// Minions connected now (what `max_minions` counts).
    pub connected_minions: u64,
    /// The event bus.
    pub bus: BusCounts,
    /// The job-cache writer's queue.
    pub job_cache: JobCacheQueue,
    /// Panics survived.
    pub panics: Panics,
}

/// What the master counts as things happen. One per master, shared by every worker.
#[derive(Debug)]
pub struct MasterMetrics {
    /// Unix seconds of the start.
    started: i64,
    publishes: Counter,
    returns: Counter,
    auth_requests: Counter,
    auth_failures: [Counter; AuthFailure::ALL.len()],
    client_auth_failures: [Counter; ClientAuth::ALL.len()],
    request_refusals: [Counter; RequestRefusal::ALL.len()],
    aes_rotations: Counter,
    /// One histogram per request-port command, in registration order.
    requests: Box<[(&'static str, LatencyHistogram)]>,
}

impl MasterMetrics {
    /// Metrics for a master whose request port answers `commands` (the `cmd` label values
    /// of the latency histogram; duplicates are kept once).
    pub fn new(commands: impl IntoIterator<Item = &'static str>) -> MasterMetrics {
        let mut names: Vec<&'static str> = Vec::new();
        for c in commands {
            if !names.contains(&c) {
                names.push(c);
            }
        }
        MasterMetrics {
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            publishes: Counter::default(),
            returns: Counter::default(),
            auth_requests: Counter::default(),
            auth_failures: Default::default(),
            client_auth_failures: Default::default(),
            request_refusals: Default::default(),
            aes_rotations: Counter::default(),
            requests: names
                .into_iter()
                .map(|n| (n, LatencyHistogram::default()))
                .collect(),
        }
    }

    /// A job went out on the publish port.
    pub fn count_publish(&self) {
        self.publishes.inc();
    }

    /// A minion's return was accepted.
    pub fn count_return(&self) {
        self.returns.inc();
    }

    /// A minion sent `_auth`.
    pub fn count_auth_request(&self) {
        self.auth_requests.inc();
    }

    /// A sign-in ended without the key accepted, for `reason`.
    pub fn count_auth_failure(&self, reason: AuthFailure) {
        self.auth_failures[reason as usize].inc();
    }

    /// A client's credentials were refused.
    pub fn count_client_auth_failure(&self, kind: ClientAuth) {
        self.client_auth_failures[kind as usize].inc();
    }

    /// An encrypted request was refused before a handler saw it.
    pub fn count_refusal(&self, reason: RequestRefusal) {
        self.request_refusals[reason as usize].inc();
    }

    /// The AES key was rotated.
    pub fn count_aes_rotation(&self) {
        self.aes_rotations.inc();
    }

    /// A request of `cmd` took `elapsed` on a worker. A command that was not registered
    /// is not timed (its label would come from the client).
    pub fn observe_request(&self, cmd: &str, elapsed: Duration) {
        if let Some((_, h)) = self.requests.iter().find(|(name, _)| *name == cmd) {
            h.observe(elapsed);
        }
    }

    /// Publishes counted so far.
    pub fn publishes(&self) -> u64 {
        self.publishes.get()
    }

    /// Returns counted so far.
    pub fn returns(&self) -> u64 {
        self.returns.get()
    }

    /// Sign-in failures counted so far for `reason`.
    pub fn auth_failures(&self, reason: AuthFailure) -> u64 {
        self.auth_failures[reason as usize].get()
    }

    /// Every family now: the counters, and the gauges in `sampled`.
    pub fn snapshot(&self, sampled: &Sampled) -> Snapshot {
        let gauge = |v: u64| SampleValue::Gauge(i64::try_from(v).unwrap_or(i64::MAX));
        let by = |label: &str, values: Vec<(&'static str, SampleValue)>| -> Vec<Sample> {
            values
                .into_iter()
                .map(|(v, value)| Sample {
                    labels: vec![(label.to_owned(), v.to_owned())],
                    value,
                })
                .collect()
        };
        let one = |value: SampleValue| {
            vec![Sample {
                labels: vec![],
                value,
            }]
        };
        let count = |c: &Counter| SampleValue::Counter(c.get());
        let k = sampled.keys;
        let mut families = vec![
            family(
                "halite_master_start_time",
                "Unix time the master started.",
                Kind::Gauge,
                Some(Unit::Seconds),
                one(SampleValue::Gauge(self.started)),
            ),
            family(
                "halite_master_keys",
                "Minion keys by state (the pki directory as the master indexed it).",
                Kind::Gauge,
                None,
                by(
                    "state",
                    vec![
                        ("accepted", gauge(k.accepted)),
                        ("pending", gauge(k.pending)),
                        ("rejected", gauge(k.rejected)),
                        ("denied", gauge(k.denied)),
                    ],
                ),
            ),
            family(
                "halite_master_connected_minions",
                "Accepted minions connected to the publish port now (what max_minions counts).",
                Kind::Gauge,
                None,
                one(gauge(sampled.connected_minions)),
            ),
            family(
                "halite_master_publishes",
                "Jobs published to minions.",
                Kind::Counter,
                None,
                one(count(&self.publishes)),
            ),
            family(
                "halite_master_returns",
                "Minion returns accepted.",
                Kind::Counter,
                None,
                one(count(&self.returns)),
            ),
            family(
                "halite_master_auth_requests",
                "Minion sign-in (_auth) requests.",
                Kind::Counter,
                None,
                one(count(&self.auth_requests)),
            ),
            family(
                "halite_master_auth_failures",
                "Minion sign-ins that did not end with the key accepted, by reason.",
                Kind::Counter,
                None,
                by(
                    "reason",
                    AuthFailure::ALL
                        .iter()
                        .map(|r| (r.label(), count(&self.auth_failures[*r as usize])))
                        .collect(),
                ),
            ),
            family(
                "halite_master_client_auth_failures",
                "Client credentials refused on clear requests (user key, eauth login, eauth token).",
                Kind::Counter,
                None,
                by(
                    "auth",
                    ClientAuth::ALL
                        .iter()
                        .map(|a| (a.label(), count(&self.client_auth_failures[*a as usize])))
                        .collect(),
                ),
            ),
            family(
                "halite_master_request_refusals",
                "Encrypted requests refused before a handler saw them, by reason.",
                Kind::Counter,
                None,
                by(
                    "reason",
                    RequestRefusal::ALL
                        .iter()
                        .map(|r| (r.label(), count(&self.request_refusals[*r as usize])))
                        .collect(),
                ),
            ),
            family(
                "halite_master_aes_key_rotations",
                "AES key rotations (a minion key was removed).",
                Kind::Counter,
                None,
                one(count(&self.aes_rotations)),
            ),
            family(
                "halite_master_bus_events",
                "Events published on the master event bus.",
                Kind::Counter,
                None,
                one(SampleValue::Counter(sampled.bus.published)),
            ),
            family(
                "halite_master_bus_dropped_events",
                "Events lost by event bus subscribers that fell behind.",
                Kind::Counter,
                None,
                one(SampleValue::Counter(sampled.bus.dropped)),
            ),
            family(
                "halite_master_bus_subscribers",
                "Event bus subscribers now.",
                Kind::Gauge,
                None,
                one(gauge(sampled.bus.subscribers)),
            ),
            family(
                "halite_master_job_cache_queue_depth",
                "Job-cache writes waiting for the writer thread.",
                Kind::Gauge,
                None,
                one(gauge(sampled.job_cache.depth)),
            ),
            family(
                "halite_master_job_cache_queue",
                "Bytes the waiting job-cache writes count for in the queue's bound.",
                Kind::Gauge,
                Some(Unit::Bytes),
                one(gauge(sampled.job_cache.bytes)),
            ),
            family(
                "halite_master_job_cache_failing",
                "1 while the job cache cannot be written (new publishes are refused).",
                Kind::Gauge,
                None,
                one(gauge(u64::from(sampled.job_cache.failing))),
            ),
            family(
                "halite_master_panics",
                "Panics caught and survived (a bug), by where.",
                Kind::Counter,
                None,
                by(
                    "where",
                    vec![
                        ("request", SampleValue::Counter(sampled.panics.request)),
                        ("background", SampleValue::Counter(sampled.panics.background)),
                    ],
                ),
            ),
        ];
        families.push(family(
            "halite_master_request_duration",
            "Time a request worker spent on a request-port request, by command (a held reply's wait excluded).",
            Kind::Histogram,
            Some(Unit::Seconds),
            self.requests
                .iter()
                .map(|(cmd, h)| Sample {
                    labels: vec![("cmd".to_owned(), (*cmd).to_owned())],
                    value: SampleValue::Histogram(h.sample()),
                })
                .collect(),
        ));
        Snapshot::new(families)
    }
}

fn family(name: &str, help: &str, kind: Kind, unit: Option<Unit>, samples: Vec<Sample>) -> Family {
    Family {
        name: name.to_owned(),
        help: help.to_owned(),
        kind,
        unit,
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(s: &'a Snapshot, name: &str, labels: &[(&str, &str)]) -> &'a SampleValue {
        let f = s.family(name).unwrap_or_else(|| panic!("no family {name}"));
        let want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        &f.samples
            .iter()
            .find(|x| x.labels == want)
            .unwrap_or_else(|| panic!("no sample {labels:?} in {name}"))
            .value
    }

    #[test]
    fn counts_reach_the_snapshot_with_their_labels() {
        let m = MasterMetrics::new(["publish", "_return"]);
        m.count_publish();
        m.count_publish();
        m.count_return();
        m.count_auth_request();
        m.count_auth_failure(AuthFailure::Denied);
        m.count_client_auth_failure(ClientAuth::Eauth);
        m.count_refusal(RequestRefusal::BadToken);
        m.count_aes_rotation();
        let s = m.snapshot(&Sampled::default());
        s.validate().unwrap();
        assert_eq!(
            value(&s, "halite_master_publishes", &[]),
            &SampleValue::Counter(2)
        );
        assert_eq!(
            value(&s, "halite_master_returns", &[]),
            &SampleValue::Counter(1)
        );
        assert_eq!(
            value(&s, "halite_master_auth_failures", &[("reason", "denied")]),
            &SampleValue::Counter(1)
        );
        assert_eq!(
            value(&s, "halite_master_auth_failures", &[("reason", "pending")]),
            &SampleValue::Counter(0)
        );
        assert_eq!(
            value(
                &s,
                "halite_master_client_auth_failures",
                &[("auth", "eauth")]
            ),
            &SampleValue::Counter(1)
        );
        assert_eq!(
            value(
                &s,
                "halite_master_request_refusals",
                &[("reason", "bad_token")]
            ),
            &SampleValue::Counter(1)
        );
        assert_eq!(
            value(&s, "halite_master_aes_key_rotations", &[]),
            &SampleValue::Counter(1)
        );
        assert_eq!(m.publishes(), 2);
        assert_eq!(m.returns(), 1);
        assert_eq!(m.auth_failures(AuthFailure::Denied), 1);
    }

    #[test]
    fn sampled_gauges_reach_the_snapshot() {
        let m = MasterMetrics::new([]);
        let sampled = Sampled {
            keys: KeyCounts {
                accepted: 3,
                pending: 2,
                rejected: 1,
                denied: 4,
            },
            connected_minions: 3,
            bus: BusCounts {
                published: 10,
                dropped: 1,
                subscribers: 2,
            },
            job_cache: JobCacheQueue {
                depth: 5,
                bytes: 500,
                failing: true,
            },
            panics: Panics {
                request: 1,
                background: 0,
            },
        };
        let s = m.snapshot(&sampled);
        s.validate().unwrap();
        assert_eq!(
            value(&s, "halite_master_keys", &[("state", "pending")]),
            &SampleValue::Gauge(2)
        );
        assert_eq!(
            value(&s, "halite_master_keys", &[("state", "denied")]),
            &SampleValue::Gauge(4)
        );
        assert_eq!(
            value(&s, "halite_master_connected_minions", &[]),
            &SampleValue::Gauge(3)
        );
        assert_eq!(
            value(&s, "halite_master_bus_events", &[]),
            &SampleValue::Counter(10)
        );
        assert_eq!(
            value(&s, "halite_master_job_cache_queue_depth", &[]),
            &SampleValue::Gauge(5)
        );
        assert_eq!(
            value(&s, "halite_master_job_cache_failing", &[]),
            &SampleValue::Gauge(1)
        );
        assert_eq!(
            value(&s, "halite_master_panics", &[("where", "request")]),
            &SampleValue::Counter(1)
        );
    }

    #[test]
    fn latencies_land_in_the_first_bucket_that_holds_them() {
        let m = MasterMetrics::new(["publish", "publish", "_auth"]);
        m.observe_request("publish", Duration::from_micros(100));
        m.observe_request("publish", Duration::from_micros(101));
        m.observe_request("publish", Duration::from_secs(60));
        m.observe_request("not-registered", Duration::from_millis(1));
        let s = m.snapshot(&Sampled::default());
        s.validate().unwrap();
        let f = s.family("halite_master_request_duration").unwrap();
        assert_eq!(f.samples.len(), 2, "one series per registered command");
        let SampleValue::Histogram(h) =
            value(&s, "halite_master_request_duration", &[("cmd", "publish")])
        else {
            panic!("a histogram");
        };
        assert_eq!(h.count, 3);
        assert_eq!(
            h.buckets[0],
            (0.0001, 1),
            "100 µs is in the le=0.0001 bucket"
        );
        assert_eq!(h.buckets[1], (0.00025, 1));
        assert_eq!(h.buckets.last(), Some(&(f64::INFINITY, 1)));
        assert!((h.sum - 60.000201).abs() < 1e-9, "{}", h.sum);
        let SampleValue::Histogram(auth) =
            value(&s, "halite_master_request_duration", &[("cmd", "_auth")])
        else {
            panic!("a histogram");
        };
        assert_eq!(auth.count, 0);
    }

    #[test]
    fn a_huge_duration_is_counted_in_the_infinite_bucket() {
        let h = LatencyHistogram::default();
        h.observe(Duration::MAX);
        let s = h.sample();
        assert_eq!(s.buckets.last(), Some(&(f64::INFINITY, 1)));
        assert_eq!(s.count, 1);
    }
}
