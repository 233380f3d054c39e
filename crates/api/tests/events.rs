//! `GET /events` on `halite-api` in front of a Halite master: salt-api's record format with
//! journal ids, resume with `Last-Event-ID` with no gap and no duplicate, a client that
//! stops reading and catches up, the `?tag=` filter, keep-alive comments, and the end of
//! the stream at logout.

mod common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Reads events until one tagged `end`, returning the ids and `n` fields of those before
/// it, and the id of `end`.
fn read_until(sse: &mut Sse, end: &str) -> (Vec<(u64, i64)>, u64) {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (id, tag, data) = sse
            .next_event(left)
            .unwrap_or_else(|| panic!("the stream ended or stalled after {} events", got.len()));
        let id = id.unwrap_or_else(|| panic!("no id on {tag}"));
        if tag == end {
            return (got, id);
        }
        got.push((id, data["data"]["n"].as_i64().unwrap_or(-1)));
    }
}

/// Events `<prefix>/<n>` with data `{"n": n}`, then the marker `end`, to fire in order.
fn numbered(
    prefix: &str,
    range: std::ops::Range<i64>,
    end: &str,
) -> Vec<(String, serde_json::Value)> {
    range
        .map(|n| (format!("{prefix}/{n}"), json!({ "n": n })))
        .chain([(end.to_owned(), json!({}))])
        .collect()
}

#[test]
fn a_client_resuming_with_last_event_id_gets_exactly_what_it_missed() {
    let fleet = Fleet::start(&["m1"], "");
    let token = fleet.login("alice", "alicepw");
    let headers = [("X-Auth-Token", token.as_str())];
    let sock = fleet.sock_dir();

    // Read 100 events.
    let mut sse = Sse::open(fleet.port, "/events?tag=test/resume/*", &headers);
    assert_eq!(sse.status, 200, "{}", sse.head);
    assert!(sse
        .head
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream"));
    fire(&sock, numbered("test/resume/a", 0..100, "test/resume/end1"));
    let (first, last) = read_until(&mut sse, "test/resume/end1");
    assert_eq!(
        first.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    assert!(first.windows(2).all(|w| w[0].0 < w[1].0), "ids increase");
    drop(sse);

    // 1,000 fired while away; "end1" was the last seen.
    fire(
        &sock,
        numbered("test/resume/b", 0..1000, "test/resume/end2"),
    );
    let start = Instant::now();
    let mut sse = Sse::open(
        fleet.port,
        "/events?tag=test/resume/*",
        &[
            ("X-Auth-Token", token.as_str()),
            ("Last-Event-ID", &last.to_string()),
        ],
    );
    let (missed, _) = read_until(&mut sse, "test/resume/end2");
    println!(
        "MEASURED resume of 1000 events: {:.3} s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        missed.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        (0..1000).collect::<Vec<_>>(),
        "exactly the 1,000 missed events, in order"
    );
    assert!(
        missed.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "contiguous ids"
    );
    assert!(missed[0].0 > last);
    // Then live, without a duplicate.
    fire(&sock, numbered("test/resume/c", 0..3, "test/resume/end3"));
    let (live, _) = read_until(&mut sse, "test/resume/end3");
    assert_eq!(live.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [0, 1, 2]);
}

#[test]
fn a_client_that_stops_reading_catches_up_without_losing_events() {
    let fleet = Fleet::start(&["m1"], "");
    let token = fleet.login("alice", "alicepw");
    let sock = fleet.sock_dir();
    let mut sse = Sse::open(
        fleet.port,
        "/events?tag=test/lag/*",
        &[("X-Auth-Token", token.as_str())],
    );
    assert_eq!(sse.status, 200);
    // More than the broadcast ring holds, and more bytes than the socket buffers take,
    // while the client reads nothing.
    let n = 3 * halite_api::events::RING as i64;
    let pad = "x".repeat(4000);
    let mut events = numbered("test/lag/x", 0..n, "test/lag/end");
    for (_, data) in events.iter_mut() {
        data["pad"] = json!(pad);
    }
    // A second client sees the end marker only once the whole burst went through the
    // shared broadcast; the first starts reading after that.
    let mut watcher = Sse::open(
        fleet.port,
        "/events?tag=test/lag/end",
        &[("X-Auth-Token", token.as_str())],
    );
    fire(&sock, events);
    let (_, end) = read_until(&mut watcher, "test/lag/end");
    let (got, end_again) = read_until(&mut sse, "test/lag/end");
    assert_eq!(end, end_again);
    assert_eq!(got.len() as i64, n);
    assert!(
        got.iter().enumerate().all(|(i, (_, v))| *v == i as i64),
        "every event once, in order"
    );
    // It did fall behind the broadcast and caught up from the journal.
    assert!(
        fleet.api_log().contains("catching up from the journal"),
        "{}",
        fleet.api_log()
    );
}

#[test]
fn streams_filter_keep_alive_and_end_at_logout() {
    let fleet = Fleet::start(&["m1"], "  sse_keepalive: 1\n");
    let token = fleet.login("alice", "alicepw");
    let headers = [("X-Auth-Token", token.as_str())];

    // Without a filter: salt-api's records for a job, with ids.
    let mut all = Sse::open(fleet.port, "/events", &headers);
    let mut quiet = Sse::open(fleet.port, "/events?tag=nothing/matches", &headers);
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "m1", "fun": "test.ping"}]),
        &headers,
    );
    let jid = r.json()["return"][0]["m1"].clone();
    assert_eq!(jid, json!(true), "{}", r.body);
    let mut tags = Vec::new();
    while let Some((id, tag, data)) = all.next_event(WAIT) {
        assert!(id.is_some(), "{tag} has no id");
        assert_eq!(data["tag"], tag.as_str());
        assert!(data["data"]["_stamp"].is_string(), "{data}");
        let done = tag.starts_with("salt/job/") && tag.ends_with("/ret/m1");
        tags.push(tag);
        if done {
            break;
        }
    }
    assert!(tags.iter().any(|t| t.ends_with("/new")), "{tags:?}");

    // A filter that matches nothing still gets keep-alives.
    match quiet.next(WAIT) {
        Some(Record::Comment(c)) if c == "retry 400" || c == "keepalive" => {}
        other => panic!("expected a keep-alive, got {other:?}"),
    }
    let mut saw_keepalive = false;
    for _ in 0..3 {
        if let Some(Record::Comment(c)) = quiet.next(WAIT) {
            saw_keepalive |= c == "keepalive";
        }
    }
    assert!(saw_keepalive);

    // Logout ends the streams of that token.
    let r = fleet
        .http
        .post("/logout", "application/json", b"", &headers);
    assert_eq!(r.status, 200);
    assert!(
        all.ends_within(WAIT),
        "the stream of a logged-out token goes on"
    );
    let again = Sse::open(fleet.port, "/events", &headers);
    assert_eq!(again.status, 401);
}
