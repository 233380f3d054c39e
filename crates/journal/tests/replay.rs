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

/// Most events a test lets the bus hold ahead of the journal: well below the ring the bus
/// keeps per subscriber, so the journal never misses one.
const IN_FLIGHT: u64 = 1000;
const _: () = assert!((IN_FLIGHT as usize) < halite_bus::SUBSCRIBER_QUEUE_CAPACITY / 4);

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
        if i % IN_FLIGHT == IN_FLIGHT - 1 {
            // Wait for the journal to store what was fired: with at most IN_FLIGHT events
            // on the bus, its ring cannot overflow however late the journal's threads run.
            m.wait_stored(i + 2).await;
        }
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
    let journal = std::sync::Arc::clone(m.journal.as_ref().unwrap().journal());
    let firing = tokio::spawn(async move {
        for i in 0..TOTAL {
            bus.fire("flow", map([("i", Value::from(i))])).unwrap();
            if i % 64 == 0 {
                tokio::time::sleep(Duration::from_micros(200)).await;
                // Events flow while clients join, but never more than about IN_FLIGHT
                // ahead of the journal, so the bus ring cannot overflow on a loaded
                // machine (fired: i + 1; stored: next_id - 1).
                while i + 1 >= journal.next_id().unwrap() - 1 + IN_FLIGHT {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
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
async fn live_listening_and_firing_go_through_the_bus_sockets() {
    let m = Master::start().await;
    let client = m.client();
    let mut live = client
        .listen(TagFilter::glob("myapp/*"), Since::Live)
        .await
        .unwrap();
    client
        .fire("other/x", map([("n", Value::from(0))]))
        .await
        .unwrap();
    client
        .fire("myapp/deploy", map([("ok", Value::from(true))]))
        .await
        .unwrap();
    let ev = recv(&mut live).await;
    assert_eq!((ev.id, ev.tag.as_str()), (None, "myapp/deploy"));
    assert!(value::get_str(&ev.data, "_stamp").is_some());
    assert!(client.fire("bad", Value::from(1)).await.is_err());
    m.stop().await;
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
