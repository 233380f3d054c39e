//! `GET /metrics` on loopback: a Halite master, a Halite minion and `halite-api`; the
//! exposition is parsed by the official Python client's strict OpenMetrics parser
//! (`prometheus_client`, which stock Salt 3008.3 installs in its venv).

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::process::Command;

/// One sample as the OpenMetrics parser read it.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses `text` with `prometheus_client.openmetrics.parser` (which refuses anything that
/// is not a valid OpenMetrics exposition, `# EOF` included) and answers every sample.
fn parse(text: &str) -> Vec<Sample> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scrape.txt");
    std::fs::write(&file, text).unwrap();
    let script = "import json, sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = []\n\
        for f in text_string_to_metric_families(open(sys.argv[1]).read()):\n\
        \x20   for s in f.samples:\n\
        \x20       out.append({'name': s.name, 'labels': s.labels, 'value': s.value})\n\
        print(json.dumps(out))\n";
    let out = Command::new(salt_venv().join("bin").join("python"))
        .args(["-c", script])
        .arg(&file)
        .output()
        .expect("the stock venv's python");
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Json = serde_json::from_slice(&out.stdout).expect("the parser's JSON");
    parsed
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| Sample {
            name: s["name"].as_str().unwrap_or_default().to_owned(),
            labels: s["labels"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default(),
            value: s["value"].as_f64().unwrap_or(f64::NAN),
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// What every answer of `/metrics` must look like.
fn check_exposition(r: &Reply) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("Content-Type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(r.body.ends_with("# EOF\n"), "{}", r.body);
    assert!(
        r.body.contains("# TYPE halite_master_up gauge\n"),
        "{}",
        r.body
    );
}

#[test]
fn a_job_and_a_failed_login_are_counted_and_served_to_sessions_only() {
    let fleet = Fleet::start(&["m1"], "");
    let http = &fleet.http;

    // A failed login: the master refuses the eauth credentials (after its padded delay).
    let r = http.post_json(
        "/login",
        &json!({"username": "alice", "password": "wrong", "eauth": "file"}),
        &[],
    );
    assert_eq!(r.status, 401, "{}", r.body);
    let token = fleet.login("alice", "alicepw");
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "m1", "fun": "test.ping"}]),
        &[("X-Auth-Token", &token)],
    );
    assert_eq!(r.json(), json!({"return": [{"m1": true}]}));

    // No session: 401, as /stats.
    let r = http.get("/metrics", &[]);
    assert_eq!(r.status, 401, "{}", r.body);

    // The connected-minions gauge needs the minion's grains (its first pillar request):
    // scrape until it shows, then check everything on that scrape.
    let mut samples = Vec::new();
    let mut last = String::new();
    let connected = wait_until(TIMEOUT, || {
        let r = http.get("/metrics", &[("X-Auth-Token", &token)]);
        check_exposition(&r);
        samples = parse(&r.body);
        last = r.body;
        value(&samples, "halite_master_connected_minions", &[]) == Some(1.0)
    });
    assert!(connected, "never one connected minion:\n{last}");
    let at_least = |name: &str, labels: &[(&str, &str)], min: f64| {
        let v = value(&samples, name, labels);
        assert!(
            v.is_some_and(|v| v >= min),
            "{name}{labels:?} = {v:?}, expected >= {min}\n{last}"
        );
    };
    at_least("halite_master_up", &[], 1.0);
    at_least("halite_master_publishes_total", &[], 2.0);
    at_least("halite_master_returns_total", &[], 2.0);
    at_least("halite_master_auth_requests_total", &[], 1.0);
    at_least(
        "halite_master_client_auth_failures_total",
        &[("auth", "eauth")],
        1.0,
    );
    at_least(
        "halite_master_request_duration_seconds_count",
        &[("cmd", "publish")],
        2.0,
    );
    at_least(
        "halite_master_request_duration_seconds_bucket",
        &[("cmd", "_return"), ("le", "+Inf")],
        2.0,
    );
    at_least("halite_master_bus_events_total", &[], 1.0);
    at_least(
        "halite_api_http_requests_total",
        &[("handler", "metrics"), ("code", "401"), ("method", "GET")],
        1.0,
    );
    at_least(
        "halite_api_http_request_duration_seconds_count",
        &[("handler", "login")],
        3.0,
    );
    assert_eq!(
        value(&samples, "halite_master_keys", &[("state", "accepted")]),
        Some(1.0),
        "{last}"
    );
    assert_eq!(
        value(&samples, "halite_master_keys", &[("state", "pending")]),
        Some(0.0),
        "{last}"
    );
    assert_eq!(
        value(&samples, "halite_master_job_cache_failing", &[]),
        Some(0.0),
        "{last}"
    );
    assert!(
        value(&samples, "halite_master_job_cache_queue_depth", &[]).is_some(),
        "{last}"
    );
    let p99_bucket = value(
        &samples,
        "halite_master_request_duration_seconds_bucket",
        &[("cmd", "publish"), ("le", "0.1")],
    );
    println!(
        "MEASURED publishes answered within 100 ms on the master: {p99_bucket:?} of {:?}",
        value(
            &samples,
            "halite_master_request_duration_seconds_count",
            &[("cmd", "publish")]
        )
    );

    // The trailing slash is the same page.
    check_exposition(&http.get("/metrics/", &[("X-Auth-Token", &token)]));
}

#[test]
fn scrapers_need_no_session_with_metrics_disable_auth_and_see_up_0_without_a_master() {
    let root = TempRoot::new();
    let port = free_ports(1)[0];
    root.write_master_config(&master_yaml(
        &root,
        port,
        ENABLED,
        "  metrics_disable_auth: true\n",
        "",
    ));
    let _api = start_api(&root, Kind::Halite);
    wait_for_port(port, TIMEOUT);
    let http = Http::new(port);

    let r = http.get("/metrics", &[]);
    check_exposition(&r);
    let samples = parse(&r.body);
    assert_eq!(
        value(&samples, "halite_master_up", &[]),
        Some(0.0),
        "{}",
        r.body
    );
    assert_eq!(
        value(&samples, "halite_api_event_streams", &[]),
        Some(0.0),
        "{}",
        r.body
    );
    assert!(
        samples
            .iter()
            .all(|s| !s.name.starts_with("halite_master_") || s.name == "halite_master_up"),
        "no master, no master metrics: {}",
        r.body
    );
    // The scrape counted itself only after answering; the next one shows it.
    let samples = parse(&http.get("/metrics", &[]).body);
    assert_eq!(
        value(
            &samples,
            "halite_api_http_requests_total",
            &[("handler", "metrics"), ("code", "200")]
        ),
        Some(1.0)
    );
}
