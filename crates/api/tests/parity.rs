//! The same scripted HTTP session against stock `salt-api` in front of a stock
//! `salt-master`, against `halite-api` in front of `halite-master`, and against stock
//! `salt-api` in front of `halite-master`, and against `halite-api` in front of a stock
//! `salt-master` (Halite minions in all four): the same status
//! codes and the same JSON shapes, ids, tokens and times aside.
//!
//! Needs CherryPy in the stock venv (`pip install cherrypy`), which stock `salt-api`
//! imports. The `wheel` client and `/keys` are compared separately
//! (`wheel_and_keys_reach_the_wheel_of_stock_and_halite_masters`).

mod common;

use common::*;
use serde_json::{json, Value as Json};
use std::time::Duration;

/// What one step of the session gave: its name, the status, and the body reduced to what
/// must match (see [`shape`]).
type Step = (&'static str, u16, Json);

/// `v` with every string replaced by `"<str>"` and every number by `0`, object keys kept:
/// the JSON shape of a body.
fn shape(v: &Json) -> Json {
    match v {
        Json::String(_) => json!("<str>"),
        Json::Number(_) => json!(0),
        Json::Array(a) => Json::Array(a.iter().map(shape).collect()),
        Json::Object(o) => Json::Object(o.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        other => other.clone(),
    }
}

/// The keys of an object, sorted.
fn keys(v: &Json) -> Json {
    let mut k: Vec<&String> = v
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    k.sort();
    json!(k)
}

fn session(master: Kind, api: Kind) -> Vec<Step> {
    let fleet = Fleet::start_mixed(master, api, &["m1", "m2"], "", "");
    let http = &fleet.http;
    let mut steps: Vec<Step> = Vec::new();

    let r = http.get("/", &[]);
    steps.push(("welcome", r.status, r.json()));

    let r = http.post_json(
        "/login",
        &json!({"username": "alice", "password": "alicepw", "eauth": "file"}),
        &[],
    );
    let login = r.json()["return"][0].clone();
    steps.push((
        "login",
        r.status,
        json!([keys(&login), login["perms"].clone()]),
    ));
    let token = login["token"].as_str().unwrap().to_owned();
    let auth = [("X-Auth-Token", token.as_str())];

    let r = http.post_json(
        "/login",
        &json!({"username": "alice", "password": "wrong", "eauth": "file"}),
        &[],
    );
    steps.push(("bad login", r.status, json!(null)));

    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "*", "fun": "test.ping"}]),
        &auth,
    );
    steps.push(("local", r.status, r.json()));

    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "m1", "fun": "test.echo", "arg": ["x"], "full_return": true}]),
        &auth,
    );
    steps.push((
        "local full_return",
        r.status,
        json!(keys(&r.json()["return"][0]["m1"])),
    ));

    let r = http.post_json(
        "/",
        &json!([{"client": "local_async", "tgt": "*", "fun": "test.ping"}]),
        &auth,
    );
    let job = r.json();
    steps.push(("local_async", r.status, shape(&job)));
    let jid = job["return"][0]["jid"].as_str().unwrap().to_owned();
    let mut last = json!(null);
    halite_testkit::wait_until(Duration::from_secs(60), || {
        last = http.get(&format!("/jobs/{jid}"), &auth).json();
        last["return"] == json!([{"m1": true, "m2": true}])
    });
    steps.push((
        "job",
        200,
        json!([keys(&last), keys(&last["info"][0]), last["return"].clone()]),
    ));

    let r = http.post_json(
        "/",
        &json!([{"client": "runner", "fun": "manage.up"}]),
        &auth,
    );
    let mut up = r.json()["return"][0].clone();
    if let Some(a) = up.as_array_mut() {
        a.sort_by_key(|v| v.to_string());
    }
    steps.push(("runner", r.status, up));

    let r = http.post_json(
        "/",
        &json!([{"client": "runner_async", "fun": "manage.up"}]),
        &auth,
    );
    steps.push((
        "runner_async",
        r.status,
        json!(keys(&r.json()["return"][0])),
    ));

    let mut sse = Sse::open(fleet.port, "/events", &auth);
    steps.push(("events", sse.status, json!(null)));
    let r = http.post("/hook/parity", "application/json", br#"{"a": 1}"#, &auth);
    steps.push(("hook", r.status, r.json()));
    let mut hook = json!(null);
    while let Some((_, tag, data)) = sse.next_event(Duration::from_secs(60)) {
        if tag == "salt/netapi/hook/parity" {
            hook = json!([
                keys(&data),
                keys(&data["data"]),
                data["data"]["post"].clone()
            ]);
            break;
        }
    }
    steps.push(("hook event", 200, hook));

    for (what, body) in [
        (
            "invalid client",
            json!([{"client": "nope", "tgt": "*", "fun": "test.ping"}]),
        ),
        (
            "disabled client",
            json!([{"client": "wheel_async", "fun": "key.list_all"}]),
        ),
        ("not a list", json!("x")),
    ] {
        let r = http.post_json("/", &body, &auth);
        steps.push((what, r.status, json!(null)));
    }
    let r = http.post("/", "application/json", b"[{", &auth);
    steps.push(("bad JSON", r.status, json!(null)));
    let r = http.post("/", "text/csv", b"a", &auth);
    steps.push(("bad content type", r.status, json!(null)));
    let r = http.get("/", &[("Accept", "text/csv")]);
    steps.push(("bad accept", r.status, json!(null)));
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "*", "fun": "test.ping"}]),
        &[],
    );
    steps.push(("no session", r.status, json!(null)));
    let r = http.post_json(
        "/run",
        &json!([{"client": "local", "tgt": "m1", "fun": "test.ping", "username": "alice", "password": "alicepw", "eauth": "file"}]),
        &[],
    );
    steps.push(("run", r.status, r.json()));
    let r = http.get("/nope", &[]);
    steps.push(("not found", r.status, json!(null)));

    let r = http.post("/logout", "application/json", b"", &auth);
    steps.push(("logout", r.status, r.json()));
    let r = http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "*", "fun": "test.ping"}]),
        &auth,
    );
    steps.push(("after logout", r.status, json!(null)));
    steps
}

/// The steps of `other` that differ from `stock`'s, printed side by side.
fn differences(stock: &[Step], other: &[Step], name: &str) -> Vec<String> {
    assert_eq!(stock.len(), other.len());
    let mut diffs = Vec::new();
    for (s, o) in stock.iter().zip(other) {
        println!(
            "{:<18} stock {} {}\n{:<18} {name} {} {}",
            s.0, s.1, s.2, "", o.1, o.2
        );
        if s != o {
            diffs.push(format!(
                "{}: stock {} {} / {name} {} {}",
                s.0, s.1, s.2, o.1, o.2
            ));
        }
    }
    diffs
}

#[test]
fn the_same_session_gives_the_same_codes_and_shapes_as_stock_salt_api() {
    let stock = session(Kind::Stock, Kind::Stock);
    // halite-api in front of halite-master.
    let halite = session(Kind::Halite, Kind::Halite);
    let diffs = differences(&stock, &halite, "halite");
    assert!(
        diffs.is_empty(),
        "halite-api differs:\n{}",
        diffs.join("\n")
    );
    // Stock salt-api in front of halite-master: the master side of the HTTP path.
    let mixed = session(Kind::Halite, Kind::Stock);
    let diffs = differences(&stock, &mixed, "salt-api+halite-master");
    assert!(
        diffs.is_empty(),
        "stock salt-api in front of halite-master differs:\n{}",
        diffs.join("\n")
    );
    // halite-api in front of a stock salt-master (no event journal there).
    let reverse = session(Kind::Stock, Kind::Halite);
    let diffs = differences(&stock, &reverse, "halite-api+salt-master");
    assert!(
        diffs.is_empty(),
        "halite-api in front of salt-master differs:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn wheel_and_keys_reach_the_wheel_of_stock_and_halite_masters() {
    for master in [Kind::Stock, Kind::Halite] {
        wheel_and_keys_through_halite_api(master);
    }
}

fn wheel_and_keys_through_halite_api(master: Kind) {
    let fleet = Fleet::start_mixed(master, Kind::Halite, &["m1"], "", "");
    let token = fleet.login("alice", "alicepw");
    let auth = [("X-Auth-Token", token.as_str())];
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "wheel", "fun": "key.list_all"}]),
        &auth,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ret = &r.json()["return"][0];
    assert_eq!(ret["data"]["fun"], "wheel.key.list_all", "{ret}");
    assert_eq!(ret["data"]["return"]["minions"], json!(["m1"]), "{ret}");
    assert!(ret["tag"].as_str().unwrap().starts_with("salt/wheel/"));
    let r = fleet.http.get("/keys", &auth);
    assert_eq!(r.json()["return"]["minions"], json!(["m1"]), "{}", r.body);
    let r = fleet.http.get("/keys/m1", &auth);
    assert!(
        r.json()["return"]["minions"]["m1"].is_string(),
        "{}",
        r.body
    );
    // Without a session the wheel chunk has no credentials.
    assert_eq!(fleet.http.get("/keys", &[]).status, 401);
}
