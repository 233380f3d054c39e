//! The master's metrics (a Halite extension; see `halite-metrics`): where the counts come
//! from and the socket `halite-api` reads them on.
//!
//! Request workers count as things happen, each a line where it happens: publishes
//! (`handlers/publish.rs`, once the job is on the publish port), returns
//! (`handlers/minion.rs`), sign-ins and why they failed (`handlers/auth.rs`), refused client
//! credentials (`access.rs`, `credentials.rs`), encrypted requests refused before a
//! handler and the request-latency histogram by `cmd` (`dispatch.rs`: from the request's
//! bytes to the handler's answer, a held reply's wait excluded), AES key rotations
//! (`lib.rs`). Gauges are read when a snapshot is taken, here: keys by state from the key
//! index, connected minions (what `max_minions` counts), the event bus's counters, the
//! job-cache writer's queue, survived panics.
//!
//! The socket is `<sock_dir>/master_metrics.ipc`, mode `0600`, started with the other
//! sockets and stopped with the master; it holds the master weakly, so it never keeps the
//! master (and the job-cache writer behind it) alive at shutdown.

use crate::jobs::QueueDepth;
use crate::Master;
use halite_metrics::{
    AuthFailure, BusCounts, MasterMetrics, MetricsServer, Panics, Sampled, Snapshot,
};
use halite_proto::auth::Decision;
use std::sync::{Arc, Weak};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

impl Master {
    /// What this master counted so far.
    pub fn metrics(&self) -> &MasterMetrics {
        &self.metrics
    }

    /// Counts a sign-in `decision` that did not accept the key.
    pub(crate) fn count_auth_decision(&self, decision: Decision) {
        let reason = match decision {
            Decision::Accept { .. } => return,
            Decision::Pend { .. } => AuthFailure::Pending,
            Decision::Reject { .. } => AuthFailure::Rejected,
            Decision::Deny => AuthFailure::Denied,
            Decision::Full => AuthFailure::Full,
        };
        self.metrics.count_auth_failure(reason);
    }

    /// Everything a snapshot reads besides the counters.
    fn sampled(&self, bus: &halite_bus::BusHandle, job_queue: &QueueDepth) -> Sampled {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        Sampled {
            keys: self.keys.counts(),
            connected_minions: wide(self.connected_minions().len()),
            bus: BusCounts {
                published: bus.published_events(),
                dropped: bus.dropped_events(),
                subscribers: wide(bus.subscriber_count()),
            },
            job_cache: job_queue.get(),
            panics: Panics {
                request: self.stats.request_panics(),
                background: self.stats.background_panics(),
            },
        }
    }
}

/// A snapshot of `master` now, or of an empty metric set once it is gone.
fn snapshot(master: &Weak<Master>, bus: &halite_bus::BusHandle, queue: &QueueDepth) -> Snapshot {
    match master.upgrade() {
        Some(m) => m.metrics.snapshot(&m.sampled(bus, queue)),
        None => Snapshot::new(vec![]),
    }
}

/// Binds `<sock_dir>/master_metrics.ipc` and serves snapshots of `master` until `cancel`.
pub(crate) fn serve(
    master: &Arc<Master>,
    bus: halite_bus::BusHandle,
    job_queue: QueueDepth,
    cancel: CancellationToken,
) -> Result<JoinHandle<()>, crate::Error> {
    let server = MetricsServer::bind(&halite_metrics::socket_path(&master.cfg.sock_dir))?;
    let weak = Arc::downgrade(master);
    let source = move || snapshot(&weak, &bus, &job_queue);
    Ok(tokio::spawn(server.run(source, cancel)))
}

#[cfg(test)]
mod tests {
    use crate::testing::TestMaster;
    use halite_metrics::{AuthFailure, ClientAuth, SampleValue, Sampled, Snapshot};
    use halite_proto::rsa::PrivateKey;
    use halite_proto::value::{self, map, s};
    use halite_proto::Value;
    use halite_transport::PeerId;

    /// Signs `id` in with a key of its own (not the test minions' key).
    fn sign_in_with_another_key(tm: &TestMaster, id: &str) {
        let key = PrivateKey::generate(2048).unwrap();
        let pem = key.public_key().unwrap().to_pem().unwrap();
        let body = map([
            ("enc", s("clear")),
            (
                "load",
                map([
                    ("cmd", s("_auth")),
                    ("id", s(id)),
                    ("nonce", s("0".repeat(32))),
                    ("enc_algo", s("OAEP-SHA1")),
                    ("sig_algo", s("PKCS1v15-SHA1")),
                    ("pub", s(halite_proto::pem::clean_key(&pem))),
                ]),
            ),
            ("version", Value::from(3)),
        ]);
        tm.master
            .handle_request(&value::encode(&body), &PeerId(id.as_bytes().to_vec()))
            .expect("_auth is answered at once");
    }

    fn counter(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
        let want: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let sample = snap
            .family(name)
            .and_then(|f| f.samples.iter().find(|x| x.labels == want))
            .unwrap_or_else(|| panic!("no {name} {labels:?}"));
        match sample.value {
            SampleValue::Counter(n) => n,
            ref other => panic!("{name} is {other:?}"),
        }
    }

    #[test]
    fn sign_ins_publishes_and_returns_are_counted_where_they_happen() {
        let tm = TestMaster::new("");
        let m1 = tm.minion("m1");
        sign_in_with_another_key(&tm, "m1");
        sign_in_with_another_key(&tm, "bad/id");
        let root_key = tm.client_key("root");
        let publish = |key: &str| {
            tm.clear(map([
                ("cmd", s("publish")),
                ("tgt", s("m1")),
                ("fun", s("test.ping")),
                ("arg", Value::Array(vec![])),
                ("key", s(key)),
                ("user", s("root")),
            ]))
        };
        let reply = publish(&root_key);
        let jid = value::get(&reply, "load")
            .and_then(|l| value::get_str(l, "jid"))
            .expect("published")
            .to_owned();
        publish("not-a-key");
        m1.return_job(&tm, &jid, "test.ping", Value::Boolean(true));

        let m = tm.master.metrics();
        assert_eq!(m.publishes(), 1);
        assert_eq!(m.returns(), 1);
        assert_eq!(m.auth_failures(AuthFailure::Denied), 1);
        assert_eq!(m.auth_failures(AuthFailure::InvalidId), 1);
        let snap = m.snapshot(&Sampled::default());
        assert_eq!(counter(&snap, "halite_master_auth_requests", &[]), 3);
        assert_eq!(
            counter(
                &snap,
                "halite_master_client_auth_failures",
                &[("auth", ClientAuth::User.label())]
            ),
            1
        );
    }

    #[test]
    fn every_handler_has_a_latency_series_and_requests_are_timed() {
        let tm = TestMaster::new("");
        tm.minion("m1");
        let snap = tm.master.metrics().snapshot(&Sampled::default());
        let f = snap.family("halite_master_request_duration").unwrap();
        let cmds: Vec<&str> = f
            .samples
            .iter()
            .filter_map(|x| x.labels.first().map(|(_, v)| v.as_str()))
            .collect();
        for cmd in ["_auth", "publish", "_return", "pub_ret"] {
            assert!(cmds.contains(&cmd), "{cmd} missing from {cmds:?}");
        }
        let auth = f
            .samples
            .iter()
            .find(|x| x.labels == [("cmd".to_owned(), "_auth".to_owned())])
            .unwrap();
        let SampleValue::Histogram(h) = &auth.value else {
            panic!("a histogram");
        };
        assert_eq!(h.count, 1);
    }

    #[test]
    fn a_request_from_a_minion_without_a_session_is_counted_as_refused() {
        let tm = TestMaster::new("");
        let m1 = tm.minion("m1");
        let (body, _) = m1.request(map([("cmd", s("_pillar"))]));
        let other = TestMaster::new("");
        assert!(other.master.handle_request(&body, &m1.peer()).is_some());
        let snap = other.master.metrics().snapshot(&Sampled::default());
        assert_eq!(
            counter(
                &snap,
                "halite_master_request_refusals",
                &[("reason", "no_session")]
            ),
            1
        );
    }
}
