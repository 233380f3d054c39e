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

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (children inherit it);
/// the limit.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an initialised struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Established connections to local `port` with bytes in their send queue, and those bytes.
fn queued_sends(port: u16) -> (usize, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let mut stuck = (0, 0);
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state), Some(queues)) =
            (fields.get(1), fields.get(3), fields.get(4))
        else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        let tx = queues
            .split_once(':')
            .and_then(|(tx, _)| u64::from_str_radix(tx, 16).ok())
            .unwrap_or(0);
        if local_port == Some(port) && *state == "01" && tx > 0 {
            stuck.0 += 1;
            stuck.1 += tx;
        }
    }
    stuck
}

/// `/events` clients that send their request and never read: a tiny receive buffer and
/// segment size, so that the API's socket buffers for them fill after a few tens of KiB.
fn silent_clients(port: u16, token: &str, n: usize) -> Vec<std::net::TcpStream> {
    use socket2::{Domain, Socket, Type};
    use std::io::Write;
    let request =
        format!("GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Auth-Token: {token}\r\n\r\n");
    (0..n)
        .map(|i| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
            s.set_recv_buffer_size(4096).expect("SO_RCVBUF");
            s.set_tcp_mss(536).expect("TCP_MAXSEG");
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            s.connect(&addr.into())
                .unwrap_or_else(|e| panic!("silent client {i}: {e}"));
            let mut tcp: std::net::TcpStream = s.into();
            tcp.write_all(request.as_bytes()).expect("request");
            tcp
        })
        .collect()
}

/// The API's count of open event streams.
fn open_streams(fleet: &Fleet, token: &str) -> u64 {
    let r = fleet.http.get("/stats", &[("X-Auth-Token", token)]);
    r.json()["Halite API"]["Event Streams"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}", r.body))
}

/// A login, a `local` job and a fresh reader's events all work.
fn api_and_master_serve(fleet: &Fleet, marker: &str) {
    let token = fleet.login("alice", "alicepw");
    let auth = [("X-Auth-Token", token.as_str())];
    let r = fleet.http.post_json(
        "/",
        &json!([{"client": "local", "tgt": "m1", "fun": "test.ping"}]),
        &auth,
    );
    assert_eq!(r.json()["return"][0]["m1"], json!(true), "{}", r.body);
    let filter = format!("/events?tag=test/silent/{marker}/*");
    let mut reader = Sse::open(fleet.port, &filter, &auth);
    assert_eq!(reader.status, 200);
    let end = format!("test/silent/{marker}/end");
    fire(
        &fleet.sock_dir(),
        numbered(&format!("test/silent/{marker}/x"), 0..3, &end),
    );
    let (got, _) = read_until(&mut reader, &end);
    assert_eq!(got.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [0, 1, 2]);
}

#[test]
fn a_thousand_sse_clients_that_never_read_do_not_stop_the_api_or_the_master() {
    const CLIENTS: usize = 1000;
    let limit = raise_fd_limit();
    assert!(
        limit >= 2 * CLIENTS as u64 + 200,
        "RLIMIT_NOFILE's hard limit ({limit}) is too low for this test"
    );
    let fleet = Fleet::start(&["m1"], "");
    let token = fleet.login("alice", "alicepw");
    let pid: u32 = std::fs::read_to_string(fleet.root.master_root().join("run/salt-api.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let before = rss_kib(pid);

    let silent = silent_clients(fleet.port, &token, CLIENTS);
    assert!(
        halite_testkit::wait_until(halite_testkit::TIMEOUT, || open_streams(&fleet, &token)
            >= CLIENTS as u64),
        "the silent clients' streams did not all start"
    );
    let connected = rss_kib(pid);

    // Twice the broadcast ring, so a stream that held every frame it fell behind on would
    // keep all of them; 2 KiB each.
    let n = 2 * halite_api::events::RING as i64;
    let pad = "x".repeat(2048);
    let mut burst = numbered("test/silent/burst", 0..n, "test/silent/burst/end");
    for (_, data) in burst.iter_mut() {
        data["pad"] = json!(pad);
    }
    let mut watcher = Sse::open(
        fleet.port,
        "/events?tag=test/silent/burst/end",
        &[("X-Auth-Token", token.as_str())],
    );
    fire(&fleet.sock_dir(), burst);
    read_until(&mut watcher, "test/silent/burst/end");
    // The API's sends to the silent clients are stuck: their socket buffers are full.
    let mut stuck = (0, 0);
    let all_stuck = halite_testkit::wait_until(halite_testkit::TIMEOUT, || {
        stuck = queued_sends(fleet.port);
        stuck.0 >= CLIENTS
    });
    println!(
        "MEASURED silent clients: {} connections with a full send queue, {} KiB queued in the kernel",
        stuck.0,
        stuck.1 / 1024
    );
    assert!(all_stuck, "only {} silent connections are stuck", stuck.0);

    // During: the API and the master serve.
    api_and_master_serve(&fleet, "during");
    let peak = rss_kib(pid);
    println!(
        "MEASURED halite-api RSS: {before} KiB idle, {connected} KiB with {CLIENTS} silent \
         /events clients, {peak} KiB after {n} events of 2 KiB"
    );
    // Bounded: a silent client costs its connection and task, and holds a few frames
    // that are shared with the ring; the ring holds RING frames. A client keeping the
    // frames it fell behind on would keep all n, and n references per client.
    let per_client = connected.saturating_sub(before) / CLIENTS as u64;
    assert!(per_client <= 64, "{per_client} KiB per idle silent client");
    // Twice that, for the allocator's slack (per-thread arenas, fragmentation): what this
    // guards against grows with events × clients (a queue of 1<<20 frames per client grew
    // 185 MB here), orders of magnitude above.
    let ring_kib = halite_api::events::RING as u64 * 4;
    let budget_kib = 2 * (ring_kib + 8 * CLIENTS as u64);
    let grown = peak.saturating_sub(connected);
    assert!(
        grown <= budget_kib,
        "RSS grew by {grown} KiB while the clients were stuck (budget {budget_kib} KiB)"
    );

    // After: the silent clients go, their streams end, and everything still works.
    drop(silent);
    assert!(
        halite_testkit::wait_until(halite_testkit::TIMEOUT, || open_streams(&fleet, &token)
            <= 1),
        "streams of closed connections linger"
    );
    api_and_master_serve(&fleet, "after");
    println!(
        "MEASURED halite-api RSS after the silent clients left: {} KiB",
        rss_kib(pid)
    );
}
