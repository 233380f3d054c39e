//! Bounded cost for unauthenticated input (issue 16): bodies of 16 MB and 60 MB sent to the
//! request port by anyone, without a key, cost the master about their own size once and
//! are answered at once, and minions keep answering while a hundred of them arrive eight at
//! a time.
//!
//! The issue measured, before: a msgpack array of 16,000,000 zero bytes took the master
//! from 34 MB to a 700 MB peak RSS; one of 60,000,000 bytes to 2.49 GB, holding a worker
//! for 4.4 s before the reply `bad load`.

mod common;

use common::*;
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far above its idle RSS one request may take the master (the bound).
const RSS_BOUND_KIB: u64 = 64 * 1024;
/// How long one refusal may take on a loaded 2-core machine (the goal is 100 ms,
/// printed as MEASURED).
const REPLY_BOUND: Duration = Duration::from_secs(2);
const MINIONS: [&str; 3] = ["bi-0", "bi-1", "bi-2"];

/// A `/proc/<pid>/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("master alive");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Resets the peak RSS (`VmHWM`) to the current RSS (Linux ≥ 4.0, `clear_refs` 5).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset VmHWM");
}

/// The body: a msgpack array of `len - 5` zero bytes (`len` bytes in all).
fn zeros_array(len: usize) -> Vec<u8> {
    let mut body = vec![0xdd];
    body.extend_from_slice(&u32::try_from(len - 5).unwrap().to_be_bytes());
    body.resize(len, 0);
    body
}

/// A clear request whose load holds such an array: a map, so only its size refuses it.
fn clear_with_zeros(len: usize) -> Vec<u8> {
    let head = value::encode(&map([("enc", s("clear")), ("version", Value::from(3))]));
    // Replace the fixmap count 2 by 3 and append "load": {"x": [0; n]}.
    let mut body = vec![0x83];
    body.extend_from_slice(&head[1..]);
    body.extend_from_slice(&value::encode(&s("load")));
    body.extend_from_slice(&[0x81, 0xa1, b'x']);
    let n = len - body.len() - 5;
    body.push(0xdd);
    body.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
    body.resize(len, 0);
    body
}

/// An encrypted request from an id without a session: the blob is the body.
fn aes_blob(len: usize) -> Vec<u8> {
    value::encode(&map([
        ("enc", s("aes")),
        ("load", bin(vec![0x5a; len - 38])),
        ("version", Value::from(3)),
        ("id", s("nobody")),
    ]))
}

/// Builds a body of the given length.
type Builder = fn(usize) -> Vec<u8>;

/// One REQ exchange; the reply and how long it took.
fn exchange(port: u16, body: &[u8]) -> (Option<Vec<u8>>, Duration) {
    let ctx = zmq::Context::new();
    let start = Instant::now();
    let reply = halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{port}"),
        body,
        Duration::from_secs(60),
    )
    .ok();
    (reply, start.elapsed())
}

fn refused(reply: &[u8]) -> bool {
    let v = value::decode(reply).expect("reply is msgpack");
    value::str_of(&v).is_some_and(|t| t.starts_with("bad load"))
        || value::get_str(&v, "msg") == Some("bad load")
}

#[test]
fn huge_unauthenticated_bodies_cost_their_size_once_and_minions_keep_answering() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let _minions: Vec<Proc> = MINIONS
        .iter()
        .map(|id| start_halite_minion(&root, id))
        .collect();
    wait_for_pings(&root, &MINIONS);
    let pid = master.pid();
    let port = root.ret_port();

    // Each body alone: peak RSS over idle and reply time.
    let bodies: [(&str, Builder); 3] = [
        ("array of zeros", zeros_array),
        ("clear map holding zeros", clear_with_zeros),
        ("aes blob from an unknown id", aes_blob),
    ];
    for size in [16_000_000, 60_000_000] {
        for (kind, make) in bodies {
            let body = make(size);
            assert_eq!(body.len(), size, "{kind}");
            // Twice: the first request of a size also pays for libzmq's and the
            // allocator's first use of such a buffer; the second shows the steady cost.
            for round in 0..2 {
                reset_peak(pid);
                let idle = status_kib(pid, "VmRSS");
                let (reply, took) = exchange(port, &body);
                let above = status_kib(pid, "VmHWM").saturating_sub(idle);
                println!(
                    "MEASURED {kind} of {size} bytes (round {round}): reply in {took:?}, \
                     peak RSS {above} KiB above idle ({idle} KiB)"
                );
                let reply = reply.unwrap_or_else(|| panic!("{kind} of {size}: no reply"));
                assert!(
                    refused(&reply),
                    "{kind} of {size}: {:?}",
                    value::decode(&reply)
                );
                assert!(took < REPLY_BOUND, "{kind} of {size}: reply after {took:?}");
                assert!(
                    above < RSS_BOUND_KIB,
                    "{kind} of {size}: peak RSS {above} KiB above idle"
                );
            }
        }
    }

    // A hundred such requests, eight at a time, while minions are asked to answer.
    let flood: Arc<Vec<Vec<u8>>> = Arc::new(vec![zeros_array(16_000_000), zeros_array(60_000_000)]);
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    reset_peak(pid);
    let idle = status_kib(pid, "VmRSS");
    let started = Instant::now();
    let senders: Vec<_> = (0..8)
        .map(|_| {
            let (flood, next) = (flood.clone(), next.clone());
            std::thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= 100 {
                        return slowest;
                    }
                    let (reply, took) = exchange(port, &flood[n % 2]);
                    let reply = reply.unwrap_or_else(|| panic!("flood request {n}: no reply"));
                    assert!(refused(&reply), "flood request {n}");
                    slowest = slowest.max(took);
                }
            })
        })
        .collect();
    let waiter = {
        let done = done.clone();
        std::thread::spawn(move || {
            let slowest: Vec<Duration> = senders.into_iter().map(|h| h.join().unwrap()).collect();
            done.store(true, Ordering::Relaxed);
            slowest.into_iter().max().unwrap_or_default()
        })
    };
    let mut rounds = Vec::new();
    while !done.load(Ordering::Relaxed) || rounds.is_empty() {
        let t = Instant::now();
        let got = halite_json(&root, &["*", "test.ping", "-t", "30"]);
        rounds.push((t.elapsed(), got));
    }
    let slowest_refusal = waiter.join().unwrap();
    let flood_time = started.elapsed();
    let above = status_kib(pid, "VmHWM").saturating_sub(idle);
    println!(
        "MEASURED flood of 100 bodies (16/60 MB, 8 at a time): {flood_time:?}, slowest \
         reply {slowest_refusal:?}, peak RSS {above} KiB above idle ({idle} KiB); {} ping \
         rounds, slowest {:?}",
        rounds.len(),
        rounds.iter().map(|(t, _)| *t).max().unwrap_or_default()
    );
    for (took, got) in &rounds {
        for id in MINIONS {
            assert_eq!(
                got.get(id),
                Some(&serde_json::Value::Bool(true)),
                "{id} did not answer test.ping during the flood (round of {took:?}): {got:?}"
            );
        }
    }
    // The master is still serving.
    wait_for_pings(&root, &MINIONS);
}

#[test]
fn a_body_over_max_request_size_ends_its_connection_and_nothing_else() {
    let root = TempRoot::with_master_extra(
        "auto_accept: true\nmax_request_size: 1048576\nmax_clear_request_size: 65536\n",
    );
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let port = root.ret_port();
    let log = root.master_log();

    // Over max_request_size: libzmq drops the connection before reading it; no reply.
    let ctx = zmq::Context::new();
    let over = halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{port}"),
        &aes_blob(2 << 20),
        Duration::from_secs(3),
    );
    assert!(over.is_err(), "a 2 MiB body got a reply: {over:?}");

    // Between the clear limit and the request limit: a clear request is refused by size,
    // with a reply saying so; an encrypted one goes through to its (failing) session check.
    let offset = file_len(&log);
    let (reply, _) = exchange(port, &clear_with_zeros(512 << 10));
    let reply = value::decode(&reply.expect("a reply")).unwrap();
    let text = value::str_of(&reply).unwrap_or_default().to_owned();
    assert!(
        text.starts_with("bad load: 524288 bytes is over")
            && text.contains("max_clear_request_size (65536 bytes)"),
        "{text}"
    );
    wait_for_log_from(
        &log,
        offset,
        "Unencrypted request larger than max_clear_request_size refused",
        Duration::from_secs(20),
    );
    let (reply, _) = exchange(port, &aes_blob(512 << 10));
    assert_eq!(
        value::decode(&reply.expect("a reply")).unwrap(),
        s("bad load")
    );

    // A real minion still signs in and answers.
    let _minion = start_halite_minion(&root, "small-0");
    wait_for_pings(&root, &["small-0"]);
}
