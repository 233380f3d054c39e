//! The bus over real sockets: delivery, backpressure, bad input, shutdown.

mod common;

use common::{start, wait_subscribers, within};
use halite_bus::{
    frame_limit, BusAddr, BusClient, BusSockets, DEFAULT_MAX_EVENT_SIZE, EVENT_OVERHEAD, GAP_TAG,
    SUBSCRIBER_BACKLOG_BYTES,
};
use halite_proto::event::{frame_pub, frame_pull, pack_event};
use halite_proto::{value, Value};
use std::os::unix::fs::PermissionsExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

fn path(addr: &BusAddr) -> &std::path::Path {
    match addr {
        BusAddr::Unix(p) => p,
        BusAddr::Tcp(_) => panic!("not a unix socket"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_fire_reaches_every_socket_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let client = BusClient::default();
    let mut a = client.listen(&bus.pub_addr, "").await.unwrap();
    let mut b = client.listen(&bus.pub_addr, "salt/").await.unwrap();
    wait_subscribers(&bus.handle, 2).await;

    bus.handle
        .fire(
            "salt/job/1/new",
            value::map([("fun", value::s("test.ping"))]),
        )
        .unwrap();

    let ea = within("a", a.recv()).await.unwrap().unwrap();
    let eb = within("b", b.recv()).await.unwrap().unwrap();
    assert_eq!(ea.tag(), "salt/job/1/new");
    assert_eq!(value::get_str(ea.data(), "fun"), Some("test.ping"));
    assert!(value::get_str(ea.data(), "_stamp").is_some_and(|s| s.ends_with("+00:00")));
    assert_eq!(ea.frame(), eb.frame());
    assert_eq!(ea.frame(), frame_pub(&pack_event(ea.tag(), ea.data())));
    assert_eq!(bus.handle.published_events(), 1);
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_events_reach_socket_and_in_process_subscribers() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut inproc = bus.handle.subscribe();
    let mut sock = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 2).await;

    let data = value::map([
        ("id", value::s("m1")),
        ("blob", value::bin(vec![0, 159, 255])),
    ]);
    BusClient::default()
        .fire(&bus.pull_addr, "salt/job/2/ret/m1", data)
        .await
        .unwrap();

    let e1 = within("in-process", inproc.recv()).await.unwrap();
    let e2 = within("socket", sock.recv()).await.unwrap().unwrap();
    assert_eq!(e1.tag(), "salt/job/2/ret/m1");
    assert_eq!(
        value::get_bytes(e1.data(), "blob"),
        Some(&[0, 159, 255][..])
    );
    assert_eq!(e1.frame(), e2.frame());
    assert_eq!(e1.body(), pack_event(e1.tag(), e1.data()));
    assert_eq!(bus.handle.published_events(), 1, "pull events are counted");
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_skips_tags_without_its_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "salt/job/7")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;
    for tag in [
        "salt/auth",
        "salt/job/8/new",
        "salt/job/7/new",
        "salt/job/70/new",
    ] {
        bus.handle
            .fire(tag, value::map([("t", value::s(tag))]))
            .unwrap();
    }
    assert_eq!(
        within("7", l.recv()).await.unwrap().unwrap().tag(),
        "salt/job/7/new"
    );
    let (tag, data) = within("70", l.recv()).await.unwrap().unwrap().into_parts();
    assert_eq!(tag, "salt/job/70/new");
    assert_eq!(value::get_str(&data, "t"), Some("salt/job/70/new"));
    bus.stop().await;
}

/// Reads `l` until the event numbered `total - 1`: events must come in increasing order, and
/// every run of missing numbers must be announced by a gap event with its exact length
/// right before the event after it. Returns (events received, events the gaps announced).
async fn read_to_the_end(l: &mut halite_bus::Listener, total: i64) -> (u64, u64) {
    let (mut received, mut gaps) = (0u64, 0u64);
    let mut last = -1i64;
    let mut announced = 0i64;
    while last != total - 1 {
        let ev = within("slow subscriber", l.recv()).await.unwrap().unwrap();
        if ev.tag() == GAP_TAG {
            let n = value::get_i64(ev.data(), "dropped").expect("a count");
            assert!(n > 0, "an empty gap");
            announced += n;
            gaps += n as u64;
            continue;
        }
        let i = value::get_i64(ev.data(), "i").unwrap();
        assert!(i > last, "events out of order: {i} after {last}");
        assert_eq!(
            i - last - 1,
            announced,
            "event {i} after {last}: gap announced {announced}"
        );
        announced = 0;
        last = i;
        received += 1;
    }
    (received, gaps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscriber_does_not_block_others_and_its_drops_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let client = BusClient::default();
    // Never read until the end: the kernel buffer fills, then its queue.
    let mut slow = client.listen(&bus.pub_addr, "").await.unwrap();
    let mut fast = client.listen(&bus.pub_addr, "").await.unwrap();
    wait_subscribers(&bus.handle, 2).await;

    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Ok(Some(ev)) = fast.recv().await {
            tx.send(value::get_i64(ev.data(), "i").unwrap()).unwrap();
        }
    });

    // Three budgets' worth of 2 KiB events.
    let batch = 1024;
    let pad = value::s("x".repeat(2048));
    let per_budget = SUBSCRIBER_BACKLOG_BYTES / (2048 + EVENT_OVERHEAD);
    let total = (3 * per_budget / batch) * batch;
    for start in (0..total).step_by(batch) {
        for i in start..start + batch {
            bus.handle
                .fire(
                    "load/test",
                    value::map([("i", Value::from(i)), ("pad", pad.clone())]),
                )
                .unwrap();
        }
        // The fast subscriber gets every event, in order, while the slow one is stuck.
        for i in start..start + batch {
            assert_eq!(within("fast subscriber", seen.recv()).await, Some(i as i64));
        }
    }

    // Let the slow one catch up: it sees increasing events ending with the last, every
    // event it missed is counted, and its stream says where and how many (gap events).
    let (received, gaps) = read_to_the_end(&mut slow, total as i64).await;
    assert!(received < total as u64);
    assert_eq!(received + bus.handle.dropped_events(), total as u64);
    assert_eq!(
        gaps,
        bus.handle.dropped_events(),
        "gap events report every lost event"
    );
    reader.abort();
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_by_more_than_the_byte_limit_loses_its_oldest_events() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut slow = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;

    // 90 MB of events: far fewer events than a subscriber may fall behind, far more bytes.
    let total = 100;
    let pad = value::s("x".repeat(900 << 10));
    for i in 0..total {
        bus.handle
            .fire(
                "big/test",
                value::map([("i", Value::from(i)), ("pad", pad.clone())]),
            )
            .unwrap();
    }
    let (received, gaps) = read_to_the_end(&mut slow, total).await;
    assert_eq!(
        gaps,
        total as u64 - received,
        "gap events report every lost event"
    );
    println!(
        "MEASURED a subscriber {total} events of 900 KiB behind received {received} \
         (backlog limit {SUBSCRIBER_BACKLOG_BYTES} bytes)"
    );
    assert!(received < total as u64, "nothing was dropped");
    assert_eq!(received + bus.handle.dropped_events(), total as u64);
    bus.stop().await;
}

/// Writes `bytes` on a fresh pull connection and reports whether the bus then closed it.
async fn send_raw(pull: &BusAddr, bytes: &[u8], then_close: bool) -> UnixStream {
    let mut s = UnixStream::connect(path(pull)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    if then_close {
        s.shutdown().await.unwrap();
    }
    s
}

async fn closed_by_bus(s: &mut UnixStream) -> bool {
    let mut b = [0u8; 16];
    matches!(
        within("bus to close the connection", s.read(&mut b)).await,
        Ok(0) | Err(_)
    )
}

/// The bus still delivers an event fired through its pull socket.
async fn still_serving(bus: &common::Running, l: &mut halite_bus::Listener, n: i64) {
    BusClient::default()
        .fire(
            &bus.pull_addr,
            "still/serving",
            value::map([("n", Value::from(n))]),
        )
        .await
        .unwrap();
    let ev = within("event after bad input", l.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.tag(), "still/serving");
    assert_eq!(value::get_i64(ev.data(), "n"), Some(n));
}

fn wrapper(v: &Value) -> Vec<u8> {
    let body = value::encode(v);
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_that_sender_and_the_bus_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "still/")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;

    let over = (frame_limit(DEFAULT_MAX_EVENT_SIZE) as u32 + 1).to_be_bytes();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage bytes",
            b"\xde\xad\xbe\xef and then some garbage".to_vec(),
        ),
        (
            "declared length over the limit, no body sent",
            over.to_vec(),
        ),
        ("wrapper is not msgpack", vec![0, 0, 0, 3, 0xc1, 0xc1, 0xc1]),
        ("wrapper is not a map", wrapper(&Value::from(7))),
        (
            "wrapper without body",
            wrapper(&value::map([("head", Value::Map(vec![]))])),
        ),
        ("wrapper with trailing bytes", {
            let mut f = frame_pull(b"t\n\n\x80");
            f[3] += 1;
            f.push(0);
            f
        }),
    ];
    for (n, (what, bytes)) in cases.into_iter().enumerate() {
        let mut s = send_raw(&bus.pull_addr, &bytes, false).await;
        assert!(closed_by_bus(&mut s).await, "{what}: connection left open");
        still_serving(&bus, &mut l, n as i64).await;
    }
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_event_bodies_drop_only_that_event() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;

    let cases: [(&str, &[u8]); 4] = [
        ("no tag separator", b"salt/job/1 no separator"),
        ("data is not one msgpack value", b"salt/job/1\n\n\x01\x02"),
        ("truncated data", b"salt/job/1\n\n\x82\xa1a"),
        ("empty tag", b"\n\n\x80"),
    ];
    for (what, body) in cases {
        // On one connection: the bad event, then a good one.
        let mut bytes = frame_pull(body);
        bytes.extend(frame_pull(&pack_event(
            "good/after",
            &value::map([("case", value::s(what))]),
        )));
        let _s = send_raw(&bus.pull_addr, &bytes, false).await;
        let ev = within(what, l.recv()).await.unwrap().unwrap();
        assert_eq!(ev.tag(), "good/after", "{what}");
        assert_eq!(value::get_str(ev.data(), "case"), Some(what));
    }
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_that_close_mid_frame_are_plain_disconnects() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;
    let whole = frame_pull(&pack_event(
        "half/sent",
        &value::map([("k", value::s("v"))]),
    ));
    for cut in [1, 3, 4, 10, whole.len() - 1] {
        send_raw(&bus.pull_addr, &whole[..cut], true).await;
    }
    still_serving(&bus, &mut l, 1).await;
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_send_data_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut chatty = UnixStream::connect(path(&bus.pub_addr)).await.unwrap();
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 2).await;
    chatty
        .write_all(b"\xc1 not a subscriber protocol \x00\xff")
        .await
        .unwrap();
    bus.handle
        .fire("after/chatter", value::map([("k", Value::from(1))]))
        .unwrap();
    assert_eq!(
        within("listener", l.recv()).await.unwrap().unwrap().tag(),
        "after/chatter"
    );
    let want = frame_pub(&pack_event("after/chatter", &Value::Nil));
    let mut got = vec![0u8; 4];
    within("chatty subscriber", chatty.read_exact(&mut got))
        .await
        .unwrap();
    assert_eq!(got, want[..4]);
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_get_salt_modes_and_are_removed_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let sockets = BusSockets::minion(dir.path(), "sha256", "minion1").unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let minion = start(&sockets).await;
    let mode = |a: &BusAddr| std::fs::metadata(path(a)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&bus.pub_addr), 0o660);
    assert_eq!(mode(&bus.pull_addr), 0o600);
    assert_eq!(mode(&minion.pub_addr), 0o600);
    assert_eq!(mode(&minion.pull_addr), 0o600);
    let files = [
        bus.pub_addr.clone(),
        bus.pull_addr.clone(),
        minion.pub_addr.clone(),
        minion.pull_addr.clone(),
    ];
    let _connected = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    bus.stop().await;
    minion.stop().await;
    for f in &files {
        assert!(!path(f).exists(), "{f} left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_mode_carries_events_both_ways() {
    let bus = start(&BusSockets::tcp(0, 0)).await;
    let mut inproc = bus.handle.subscribe();
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 2).await;
    BusClient::default()
        .fire(
            &bus.pull_addr,
            "over/tcp",
            value::map([("k", Value::from(1))]),
        )
        .await
        .unwrap();
    assert_eq!(
        within("in-process", inproc.recv()).await.unwrap().tag(),
        "over/tcp"
    );
    assert_eq!(
        within("socket", l.recv()).await.unwrap().unwrap().tag(),
        "over/tcp"
    );
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_sees_a_clean_close_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;
    bus.stop().await;
    assert!(within("close", l.recv()).await.unwrap().is_none());
}

#[tokio::test]
async fn firing_to_a_missing_bus_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let addr = BusAddr::Unix(dir.path().join("nothing.ipc"));
    let r = BusClient::default()
        .fire(&addr, "t", value::map([("k", Value::from(1))]))
        .await;
    assert!(matches!(r, Err(halite_bus::Error::Connect { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_events_cross_many_reads_and_oversized_data_is_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut l = BusClient::default()
        .listen(&bus.pub_addr, "")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 1).await;
    let client = BusClient::default();

    let near = value::s("n".repeat(DEFAULT_MAX_EVENT_SIZE - 4096));
    client
        .fire(
            &bus.pull_addr,
            "big/near",
            value::map([("v", near.clone())]),
        )
        .await
        .unwrap();
    let ev = within("near-limit event", l.recv()).await.unwrap().unwrap();
    assert_eq!(value::get(ev.data(), "v"), Some(&near));

    let over = value::s("o".repeat(2 * DEFAULT_MAX_EVENT_SIZE));
    let data = value::map([("v", over), ("keep", value::s("small"))]);
    client.fire(&bus.pull_addr, "big/over", data).await.unwrap();
    let ev = within("trimmed event", l.recv()).await.unwrap().unwrap();
    assert_eq!(value::get_str(ev.data(), "v"), Some("VALUE_TRIMMED"));
    assert_eq!(value::get_str(ev.data(), "keep"), Some("small"));
    bus.stop().await;
}

/// Salt's clients connect to the pub socket, then publish a job and wait for its events.
/// `connect` returns once the kernel queued the connection, before the bus accepted it; an
/// event fired after that must reach the new subscriber all the same. The runtime has one
/// thread and the test does not yield between connecting and firing, so the bus's accept
/// loop cannot have run: only a bus that takes queued connections in before it publishes
/// passes.
#[tokio::test(flavor = "current_thread")]
async fn an_event_fired_right_after_a_subscriber_connects_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    for sockets in [BusSockets::master(dir.path()), BusSockets::tcp(0, 0)] {
        let bus = start(&sockets).await;
        for i in 0..20 {
            let tag = format!("race/{i}");
            let mut conn: Box<dyn tokio::io::AsyncRead + Unpin> = match &bus.pub_addr {
                BusAddr::Unix(p) => {
                    let s = std::os::unix::net::UnixStream::connect(p).unwrap();
                    s.set_nonblocking(true).unwrap();
                    Box::new(UnixStream::from_std(s).unwrap())
                }
                BusAddr::Tcp(port) => {
                    let s = std::net::TcpStream::connect(("127.0.0.1", *port)).unwrap();
                    s.set_nonblocking(true).unwrap();
                    Box::new(tokio::net::TcpStream::from_std(s).unwrap())
                }
            };
            bus.handle
                .fire(&tag, value::map([("i", Value::from(i))]))
                .unwrap();
            assert!(
                reads_tag(&mut conn, &tag).await,
                "{:?}: event {i}, fired after its subscriber connected, was lost",
                bus.pub_addr
            );
        }
        bus.stop().await;
    }
}

/// Reads from `s` until `tag` has been seen, or fails after a while.
async fn reads_tag(s: &mut (impl tokio::io::AsyncRead + Unpin), tag: &str) -> bool {
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !buf.windows(tag.len()).any(|w| w == tag.as_bytes()) {
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
    true
}
