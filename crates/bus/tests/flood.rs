//! A 200,000-event flood from one sender on the pull socket: a raw listener that keeps up
//! gets every event, a stalled one gets a gap event with the exact count it lost, and an
//! in-process subscriber that stalls holds the sender back and loses nothing. Outcomes are
//! asserted; rates are printed as `MEASURED` lines.

mod common;

use common::{start, wait_subscribers, within};
use halite_bus::{
    BusAddr, BusClient, BusSockets, Listener, EVENT_OVERHEAD, GAP_TAG, SUBSCRIBER_BACKLOG_BYTES,
};
use halite_proto::event::{frame_pub, frame_pull, pack_event};
use halite_proto::{value, Value};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::watch;

const TOTAL: u64 = 200_000;

/// Events per write of the sender (as `bench/master_bus.py`'s sender).
const PER_WRITE: u64 = 256;

fn data(i: u64) -> Value {
    value::map([
        ("i", Value::from(i)),
        ("pad", value::s("flood-test-payload-of-forty-bytes-------")),
    ])
}

/// What event `i` counts against a subscriber's budget.
fn cost(i: u64) -> usize {
    frame_pub(&pack_event("flood", &data(i))).len() + EVENT_OVERHEAD
}

/// Sends events `0..TOTAL` over one pull connection, `PER_WRITE` per write; before each
/// write, waits until `acked` (events some reader has taken) is at most `window` behind.
async fn flood(pull: BusAddr, acked: Option<watch::Receiver<u64>>, window: u64) {
    let BusAddr::Unix(path) = pull else {
        panic!("not a unix socket")
    };
    let mut conn = UnixStream::connect(path).await.unwrap();
    let mut acked = acked;
    for start in (0..TOTAL).step_by(PER_WRITE as usize) {
        if let Some(rx) = &mut acked {
            within(
                "the reader to keep up",
                rx.wait_for(|&n| n + window >= start),
            )
            .await
            .unwrap();
        }
        let mut bytes = Vec::new();
        for i in start..(start + PER_WRITE).min(TOTAL) {
            bytes.extend(frame_pull(&pack_event("flood", &data(i))));
        }
        conn.write_all(&bytes).await.unwrap();
    }
    conn.shutdown().await.unwrap();
}

fn i_of(data: &Value) -> u64 {
    value::get_i64(data, "i").expect("an event number") as u64
}

/// Reads `l` to the last event. Returns the gap events' counts, checking that events come
/// in order and that each run of missing events is announced, with its exact length, right
/// before the event after it.
async fn read_all(l: &mut Listener, acked: Option<&watch::Sender<u64>>) -> Vec<u64> {
    let (mut next, mut announced, mut gaps) = (0u64, 0u64, Vec::new());
    while next < TOTAL {
        let ev = within("the flood", l.recv()).await.unwrap().unwrap();
        if ev.tag() == GAP_TAG {
            let n = value::get_i64(ev.data(), "dropped").expect("a count") as u64;
            announced += n;
            gaps.push(n);
            continue;
        }
        let i = i_of(ev.data());
        assert_eq!(
            i,
            next + announced,
            "event {i}: expected {next} after a gap of {announced}"
        );
        announced = 0;
        next = i + 1;
        if let Some(tx) = acked {
            if next % PER_WRITE == 0 || next == TOTAL {
                tx.send_replace(next);
            }
        }
    }
    gaps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200k_flood_reaches_a_fast_raw_listener_whole_and_a_stalled_one_with_an_exact_gap() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let client = BusClient::default();
    let mut fast = client.listen(&bus.pub_addr, "flood").await.unwrap();
    let mut stalled = client.listen(&bus.pub_addr, "flood").await.unwrap();
    wait_subscribers(&bus.handle, 2).await;

    // The fast listener keeps up: the sender never gets more than WINDOW events ahead of
    // it, far fewer than its backlog holds, so however the machine schedules the tasks it
    // cannot lose one. The stalled one reads nothing until the flood is over.
    const WINDOW: u64 = 16_384;
    assert!(WINDOW as usize * cost(TOTAL) < SUBSCRIBER_BACKLOG_BYTES / 2);
    let (acked, acked_rx) = watch::channel(0u64);
    let t0 = Instant::now();
    let sender = tokio::spawn(flood(bus.pull_addr.clone(), Some(acked_rx), WINDOW));
    let gaps = read_all(&mut fast, Some(&acked)).await;
    let secs = t0.elapsed().as_secs_f64();
    sender.await.unwrap();
    assert_eq!(gaps, Vec::<u64>::new(), "the fast listener lost events");
    println!(
        "MEASURED fast raw listener: {TOTAL} of {TOTAL} events in {secs:.2} s, {:.0} events/s delivered (debug build)",
        TOTAL as f64 / secs
    );

    // Every event is published; the stalled listener's backlog overflowed long ago.
    within("the last publish", async {
        while bus.handle.published_events() < TOTAL {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let gaps = read_all(&mut stalled, None).await;
    let lost = gaps.iter().sum::<u64>();
    println!(
        "MEASURED stalled raw listener: {} of {TOTAL} events, one gap event of {lost}",
        TOTAL - lost
    );
    assert_eq!(gaps.len(), 1, "one run of losses, one gap event: {gaps:?}");
    // It lost what neither its backlog nor the socket buffers and one write batch (a few
    // thousand events; 50,000 is a wide margin) could hold.
    let held = SUBSCRIBER_BACKLOG_BYTES / cost(0) + 50_000;
    assert!(lost as usize >= TOTAL as usize - held, "lost only {lost}");
    assert_eq!(
        bus.handle.dropped_events(),
        lost,
        "only the stalled one lost events"
    );
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_subscriber_that_stalls_holds_the_sender_back_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bus = start(&BusSockets::master(dir.path())).await;
    let mut sub = bus.handle.subscribe();
    let t0 = Instant::now();
    let sender = tokio::spawn(flood(bus.pull_addr.clone(), None, 0));

    // While the subscriber takes nothing, the bus publishes no more than its budget holds:
    // the sender waits (its connection is not read), it is not dropped.
    let most = (SUBSCRIBER_BACKLOG_BYTES / cost(0)) as u64;
    // It stops within one pull read (at most 128 KiB: ~1,400 of these events) of that.
    within("the budget to fill", async {
        while bus.handle.published_events() < most - 4096 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = bus.handle.published_events();
    assert!(
        held <= most,
        "{held} events published past a budget of {most}"
    );
    assert!(!sender.is_finished(), "the sender was not held back");

    for want in 0..TOTAL {
        let ev = within("the flood", sub.recv()).await.expect("no loss");
        assert_eq!(i_of(ev.data()), want);
    }
    let secs = t0.elapsed().as_secs_f64();
    sender.await.unwrap();
    assert_eq!(bus.handle.dropped_events(), 0);
    println!(
        "MEASURED stalled in-process subscriber: held the sender at {held} events, then all {TOTAL} in order in {secs:.2} s (debug build)"
    );
    bus.stop().await;
}
