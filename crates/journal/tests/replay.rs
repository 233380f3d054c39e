//! The journal service in-process: a real bus, a real journal file, a real replay socket.

use halite_bus::{BusHandle, BusServer, BusSockets, DEFAULT_MAX_EVENT_SIZE};
use halite_journal::{
    wire, BusEvent, Journal, JournalConfig, JournalService, MasterBus, Retention, Since, TagFilter,
};
use halite_proto::value::{self, map};
use halite_proto::Value;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

struct Master {
    dir: tempfile::TempDir,
    bus: BusHandle,
    bus_stop: CancellationToken,
    bus_task: tokio::task::JoinHandle<()>,
    journal: Option<JournalService>,
}

fn config(dir: &Path) -> JournalConfig {
    JournalConfig {
        enabled: true,
        path: dir.join("events.redb"),
        socket: halite_journal::socket_path(dir),
        retention: Retention {
            max_bytes: 256 * 1024 * 1024,
            max_age: None,
        },
    }
}

impl Master {
    async fn start_in(dir: tempfile::TempDir) -> Master {
        let server = BusServer::bind(&BusSockets::master(dir.path()), DEFAULT_MAX_EVENT_SIZE)
            .await
            .unwrap();
        let bus = server.handle();
        let journal = JournalService::start(&config(dir.path()), &bus)
            .await
            .unwrap()
            .unwrap();
        let bus_stop = CancellationToken::new();
        let bus_task = tokio::spawn(server.run(bus_stop.clone()));
        Master {
            dir,
            bus,
            bus_stop,
            bus_task,
            journal: Some(journal),
        }
    }

    async fn start() -> Master {
        Master::start_in(tempfile::tempdir().unwrap()).await
    }

    async fn stop(mut self) -> tempfile::TempDir {
        if let Some(j) = self.journal.take() {
            j.shutdown().await;
        }
        self.bus_stop.cancel();
        let _ = (&mut self.bus_task).await;
        self.dir
    }

    fn client(&self) -> MasterBus {
        MasterBus::new(self.dir.path(), DEFAULT_MAX_EVENT_SIZE)
    }

    fn fire(&self, tag: &str, i: u64) {
        self.bus.fire(tag, map([("i", Value::from(i))])).unwrap();
    }

    fn journal(&self) -> &Journal {
        self.journal.as_ref().unwrap().journal()
    }

    /// Waits until the journal has stored every id below `next`.
    async fn wait_stored(&self, next: u64) {
        tokio::time::timeout(WAIT, async {
            while self.journal().next_id().unwrap() < next {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("journal did not store the events in time");
    }
}

async fn recv(stream: &mut halite_journal::EventStream) -> BusEvent {
    tokio::time::timeout(WAIT, stream.recv())
        .await
        .expect("no event in time")
        .unwrap()
        .expect("stream closed")
}

fn i_of(ev: &BusEvent) -> i64 {
    value::get_i64(&ev.data, "i").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_stored_events_replay_in_order_then_live_follows() {
    let m = Master::start().await;
    for i in 0..10_000 {
        m.fire("bench/ev", i);
    }
    m.wait_stored(10_001).await;
    let mut stream = m
        .client()
        .listen(TagFilter::All, Since::Id(0))
        .await
        .unwrap();
    for want in 1..=10_000u64 {
        let ev = recv(&mut stream).await;
        assert_eq!(ev.id, Some(want));
        assert_eq!(i_of(&ev), want as i64 - 1);
        assert!(ev.time.is_some());
    }
    for i in 0..5 {
        m.fire("live/ev", i);
    }
    for want in 10_001..=10_005u64 {
        let ev = recv(&mut stream).await;
        assert_eq!((ev.id, ev.tag.as_str()), (Some(want), "live/ev"));
    }
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_joining_while_events_flow_see_every_id_once() {
    let m = Master::start().await;
    const TOTAL: u64 = 30_000;
    let bus = m.bus.clone();
    let firing = tokio::spawn(async move {
        for i in 0..TOTAL {
            bus.fire("flow", map([("i", Value::from(i))])).unwrap();
            if i % 64 == 0 {
                // Events flow while clients join.
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    });
    let mut readers = Vec::new();
    for (k, since) in [0u64, 0, 500, 5_000, 12_345].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(40 * k as u64)).await;
        let client = m.client();
        readers.push(tokio::spawn(async move {
            let mut stream = client
                .listen(TagFilter::All, Since::Id(since))
                .await
                .unwrap();
            let mut want = since.max(1);
            while want <= TOTAL {
                let ev = recv(&mut stream).await;
                assert_eq!(ev.id, Some(want), "reader from {since}");
                assert_eq!(i_of(&ev), want as i64 - 1);
                want += 1;
            }
        }));
    }
    // A reader that starts "now" sees a contiguous run up to the end.
    let mut now_stream = m
        .client()
        .listen(TagFilter::All, Since::Time(chrono::Utc::now()))
        .await
        .unwrap();
    let first = recv(&mut now_stream).await.id.unwrap();
    for want in first + 1..=TOTAL {
        assert_eq!(recv(&mut now_stream).await.id, Some(want));
    }
    firing.await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_survives_a_restart_and_ids_continue() {
    let m = Master::start().await;
    for i in 0..100 {
        m.fire("before", i);
    }
    // Shutdown journals what is already on the bus.
    let dir = m.stop().await;
    let m = Master::start_in(dir).await;
    assert_eq!(m.journal().next_id().unwrap(), 101);
    m.fire("after", 100);
    let mut stream = m
        .client()
        .listen(TagFilter::All, Since::Id(0))
        .await
        .unwrap();
    for want in 1..=101u64 {
        let ev = recv(&mut stream).await;
        assert_eq!(ev.id, Some(want));
        assert_eq!(ev.tag, if want <= 100 { "before" } else { "after" });
    }
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_filters_and_time_starts_select_events() {
    let m = Master::start().await;
    for (i, tag) in ["salt/job/1/new", "salt/auth", "salt/job/1/ret/m1", "other"]
        .into_iter()
        .enumerate()
    {
        m.fire(tag, i as u64);
    }
    m.wait_stored(5).await;
    let mut jobs = m
        .client()
        .listen(TagFilter::glob("salt/job/*/ret/*"), Since::Id(0))
        .await
        .unwrap();
    let ev = recv(&mut jobs).await;
    assert_eq!((ev.id, ev.tag.as_str()), (Some(3), "salt/job/1/ret/m1"));
    let mut prefixed = m
        .client()
        .listen(TagFilter::Prefix("salt/".into()), Since::Id(2))
        .await
        .unwrap();
    assert_eq!(recv(&mut prefixed).await.id, Some(2));
    assert_eq!(recv(&mut prefixed).await.id, Some(3));
    // A time after every stored event starts with the next one.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut later = m
        .client()
        .listen(TagFilter::All, Since::Time(chrono::Utc::now()))
        .await
        .unwrap();
    m.fire("new", 9);
    assert_eq!(recv(&mut later).await.id, Some(5));
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_listening_reads_the_journal_from_now_and_firing_goes_through_the_pull_socket() {
    let m = Master::start().await;
    m.fire("before", 0);
    m.wait_stored(2).await;
    let client = m.client();
    let mut live = client
        .listen(TagFilter::glob("myapp/*"), Since::Live)
        .await
        .unwrap();
    client
        .fire("other/x", map([("n", Value::from(0))]))
        .await
        .unwrap();
    // One connection per `fire`, served concurrently: without this wait the bus may take
    // the next event in first.
    m.wait_stored(3).await;
    client
        .fire("myapp/deploy", map([("ok", Value::from(true))]))
        .await
        .unwrap();
    let ev = recv(&mut live).await;
    assert_eq!((ev.id, ev.tag.as_str()), (Some(3), "myapp/deploy"));
    assert!(ev.time.is_some());
    assert!(value::get_str(&ev.data, "_stamp").is_some());
    assert!(client.fire("bad", Value::from(1)).await.is_err());
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_live_listening_reads_the_pub_socket_and_shows_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let server = BusServer::bind(&BusSockets::master(dir.path()), DEFAULT_MAX_EVENT_SIZE)
        .await
        .unwrap();
    let bus = server.handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(server.run(stop.clone()));
    let client = MasterBus::new(dir.path(), DEFAULT_MAX_EVENT_SIZE);
    let mut live = client
        .listen(TagFilter::glob("myapp/*"), Since::Live)
        .await
        .unwrap();
    bus.fire("other/x", map([("n", Value::from(0))])).unwrap();
    bus.fire("myapp/deploy", map([("ok", Value::from(true))]))
        .unwrap();
    let ev = recv(&mut live).await;
    assert_eq!((ev.id, ev.tag.as_str()), (None, "myapp/deploy"));
    // The listener falls more than its backlog behind: the bus's gap event passes the
    // filter, with the count of what was lost right there.
    let pad = value::s("x".repeat(900 << 10));
    let total = 100;
    for i in 0..total {
        bus.fire(
            "myapp/big",
            map([("i", Value::from(i)), ("pad", pad.clone())]),
        )
        .unwrap();
    }
    let (mut got, mut lost, mut last) = (0, 0, -1);
    while last != total - 1 {
        let ev = recv(&mut live).await;
        if ev.tag == halite_bus::GAP_TAG {
            lost += value::get_i64(&ev.data, "dropped").unwrap();
            continue;
        }
        last = i_of(&ev);
        got += 1;
    }
    assert!(lost > 0, "nothing was lost");
    assert_eq!(got + lost, total);
    stop.cancel();
    task.await.unwrap();
}

async fn raw_exchange(socket: &Path, request: &[u8]) -> Vec<u8> {
    let mut conn = tokio::net::UnixStream::connect(socket).await.unwrap();
    conn.write_all(request).await.unwrap();
    let _ = conn.shutdown().await;
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, conn.read_to_end(&mut out))
        .await
        .expect("server did not close the connection")
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_an_error_and_the_server_keeps_serving() {
    let m = Master::start().await;
    m.fire("t", 0);
    m.wait_stored(2).await;
    let socket = halite_journal::socket_path(m.dir.path());
    let garbage: &[&[u8]] = &[
        b"\0\0\0\x05hello",
        b"GET / HTTP/1.1\r\n\r\n",
        b"\0\0\0\x02\x81\xa1",
        b"\0\0",
    ];
    for bytes in garbage {
        let out = raw_exchange(&socket, bytes).await;
        let (range, used) = wire::check_frame(&out, 1 << 16).unwrap().unwrap();
        assert_eq!(used, out.len(), "only the error message, then close");
        assert!(
            matches!(
                wire::Reply::decode(&out[range]).unwrap(),
                wire::Reply::Error(_)
            ),
            "{bytes:?}"
        );
    }
    let mut stream = m
        .client()
        .listen(TagFilter::All, Since::Id(0))
        .await
        .unwrap();
    assert_eq!(recv(&mut stream).await.tag, "t");
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_replay_resumes_after_a_restart_without_repeats() {
    let m = Master::start().await;
    for i in 0..3 {
        m.fire("a", i);
    }
    let mut stream = m
        .client()
        .listen(TagFilter::All, Since::Id(0))
        .await
        .unwrap()
        .reconnecting(true);
    for want in 1..=3u64 {
        assert_eq!(recv(&mut stream).await.id, Some(want));
    }
    let dir = m.stop().await;
    let m = Master::start_in(dir).await;
    m.fire("b", 3);
    let ev = recv(&mut stream).await;
    assert_eq!((ev.id, ev.tag.as_str()), (Some(4), "b"));
    m.stop().await;
}

#[tokio::test]
async fn a_disabled_journal_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = BusServer::bind(&BusSockets::master(dir.path()), DEFAULT_MAX_EVENT_SIZE)
        .await
        .unwrap();
    let mut cfg = config(dir.path());
    cfg.enabled = false;
    assert!(JournalService::start(&cfg, &server.handle())
        .await
        .unwrap()
        .is_none());
    assert!(!cfg.path.exists());
    assert!(!cfg.socket.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_still_gets_every_id_once() {
    let m = Master::start().await;
    let mut stream = m
        .client()
        .listen(TagFilter::All, Since::Id(0))
        .await
        .unwrap();
    // 150 batches of one 64 KiB event (each fire waits for the previous commit): more
    // batches than the live channel holds and more bytes than the socket buffers hold while
    // the client does not read, so the session lags and fills the hole from the journal.
    let blob = halite_proto::value::bin(vec![7u8; 64 * 1024]);
    for i in 0..150u64 {
        m.bus
            .fire("big", map([("i", Value::from(i)), ("blob", blob.clone())]))
            .unwrap();
        m.wait_stored(i + 2).await;
    }
    for want in 1..=150u64 {
        let ev = recv(&mut stream).await;
        assert_eq!(ev.id, Some(want));
        assert_eq!(i_of(&ev), want as i64 - 1);
    }
    m.fire("after", 150);
    assert_eq!(recv(&mut stream).await.id, Some(151));
    m.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_listener_slow_at_first_gets_all_of_a_200k_flood_in_order_and_the_journal_keeps_them(
) {
    const TOTAL: u64 = 200_000;
    let m = Master::start().await;
    let client = m.client();
    let mut live = client.listen(TagFilter::All, Since::Live).await.unwrap();
    // One Rust sender on the pull socket, 256 events per write, as fast as it can.
    let t0 = std::time::Instant::now();
    let sender = tokio::spawn(async move {
        let mut sender = client.sender().await.unwrap();
        for start in (0..TOTAL).step_by(256) {
            let batch =
                (start..(start + 256).min(TOTAL)).map(|i| ("flood", map([("i", Value::from(i))])));
            sender.send_all(batch).await.unwrap();
        }
    });
    let first = recv(&mut live).await;
    assert_eq!(i_of(&first), 0);
    let base = first.id.expect("a journal id");
    // Deliberately slow at first: it reads nothing more until the whole flood is stored,
    // and then 100 more events, each committed alone. Its session, blocked writing to it,
    // falls more batches behind than the live channel holds, and fills what it missed from
    // the journal.
    m.wait_stored(base + TOTAL).await;
    const AFTER: u64 = 100;
    for i in TOTAL..TOTAL + AFTER {
        m.fire("after", i);
        m.wait_stored(base + i + 1).await;
    }
    for i in 1..TOTAL + AFTER {
        let ev = recv(&mut live).await;
        let tag = if i < TOTAL { "flood" } else { "after" };
        assert_eq!(
            (ev.id, ev.tag.as_str(), i_of(&ev)),
            (Some(base + i), tag, i as i64),
            "event {i}"
        );
    }
    let secs = t0.elapsed().as_secs_f64();
    sender.await.unwrap();
    // The journal stored every one of them, after the ids the listener saw, and nothing else.
    assert_eq!(m.journal().next_id().unwrap(), base + TOTAL + AFTER);
    assert_eq!(m.bus.dropped_events(), 0);
    println!(
        "MEASURED journal-backed listener, stalled until the flood was stored: {TOTAL} of {TOTAL} and {AFTER} more in order in {secs:.2} s, {:.0} events/s delivered (debug build)",
        (TOTAL + AFTER) as f64 / secs
    );
    m.stop().await;
}
