//! Master-bus throughput and latency with a Rust sender and a Rust listener (driven by
//! `bench/master_bus.py`; see there).
//!
//! ```text
//! bus_bench SOCK_DIR send N [RATE] [--raw]   listen live, fire N events `bench/rs/<i>` over
//!                                     one pull connection (as fast as possible, or RATE per
//!                                     second), then replay what the journal stored (if
//!                                     there is one)
//! bus_bench SOCK_DIR listen N PREFIX [--raw]  only listen: count N events whose tag starts
//!                                     with PREFIX (fired by someone else); 3 s idle ends it
//! ```
//! The listener is `MasterBus::listen(.., Since::Live)` (the journal from now, or the pub
//! socket without one); `--raw` makes it a plain pub-socket `halite_bus::Listener`, which
//! counts the events its `halite/bus/gap` events say it lost (`gap_dropped`).
//! Each event's data carries `t_sent` (Unix seconds, float) and the listener records
//! `now - t_sent`. Prints one JSON object.

use halite_bus::{BusAddr, BusClient, Listener, GAP_TAG, MASTER_PUB};
use halite_journal::{EventStream, MasterBus, Since, TagFilter};
use halite_proto::value::{self, map};
use halite_proto::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const MAX_EVENT_SIZE: usize = 1_048_576;
const IDLE: Duration = Duration::from_secs(3);

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

struct Heard {
    count: usize,
    /// Events the raw listener's gap events said it lost.
    gap_dropped: u64,
    first: f64,
    last: f64,
    lat: Vec<f64>,
}

/// Where a listener reads.
enum Source {
    Bus(EventStream),
    Raw(Listener),
}

impl Source {
    async fn open(bus: &MasterBus, dir: &str, prefix: &str, raw: bool) -> Source {
        if raw {
            let addr = BusAddr::Unix(std::path::Path::new(dir).join(MASTER_PUB));
            let l = BusClient::new(MAX_EVENT_SIZE).listen(&addr, prefix).await;
            Source::Raw(l.expect("listen"))
        } else {
            let s = bus
                .listen(TagFilter::Prefix(prefix.into()), Since::Live)
                .await;
            Source::Bus(s.expect("listen"))
        }
    }

    /// The next event's tag and data; `None` at the end.
    async fn next(&mut self) -> Option<(String, Value)> {
        match self {
            Source::Bus(s) => s.recv().await.ok().flatten().map(|e| (e.tag, e.data)),
            Source::Raw(l) => l.recv().await.ok().flatten().map(|e| e.into_parts()),
        }
    }
}

async fn hear(mut source: Source, n: usize) -> Heard {
    let mut h = Heard {
        count: 0,
        gap_dropped: 0,
        first: 0.0,
        last: 0.0,
        lat: Vec::with_capacity(n),
    };
    while h.count + (h.gap_dropped as usize) < n {
        let Ok(Some((tag, data))) = tokio::time::timeout(IDLE, source.next()).await else {
            break;
        };
        if tag == GAP_TAG {
            h.gap_dropped += value::get_i64(&data, "dropped").unwrap_or(0) as u64;
            continue;
        }
        let t = now();
        if h.count == 0 {
            h.first = t;
        }
        h.last = t;
        h.count += 1;
        if let Some(Value::F64(sent)) = value::get(&data, "t_sent") {
            h.lat.push(t - sent);
        }
    }
    h
}

fn stats(lat: &mut [f64]) -> String {
    if lat.is_empty() {
        return "null".into();
    }
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)] * 1000.0;
    format!(
        "{{\"p50_ms\": {:.3}, \"p99_ms\": {:.3}, \"max_ms\": {:.3}}}",
        at(0.5),
        at(0.99),
        lat[lat.len() - 1] * 1000.0
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let raw = args.iter().any(|a| a == "--raw");
    args.retain(|a| a != "--raw");
    let usage = || -> ! {
        eprintln!("usage: bus_bench SOCK_DIR send N [RATE] [--raw] | bus_bench SOCK_DIR listen N PREFIX [--raw]");
        std::process::exit(2)
    };
    let (Some(dir), Some(mode), Some(n)) = (args.get(1), args.get(2), args.get(3)) else {
        usage()
    };
    let n: usize = n.parse().unwrap_or_else(|_| usage());
    let bus = MasterBus::new(dir, MAX_EVENT_SIZE);
    match mode.as_str() {
        "listen" => {
            let prefix = args.get(4).cloned().unwrap_or_default();
            let source = Source::open(&bus, dir, &prefix, raw).await;
            println!("ready");
            let mut h = hear(source, n).await;
            println!(
                "{{\"received\": {}, \"gap_dropped\": {}, \"first\": {:.6}, \"last\": {:.6}, \"latency\": {}}}",
                h.count,
                h.gap_dropped,
                h.first,
                h.last,
                stats(&mut h.lat)
            );
        }
        "send" => {
            let rate: Option<f64> = args.get(4).map(|r| r.parse().unwrap_or_else(|_| usage()));
            let source = Source::open(&bus, dir, "bench/rs/", raw).await;
            let since = chrono::Utc::now();
            let listener = tokio::spawn(hear(source, n));
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut sender = bus.sender().await.expect("connect to the pull socket");
            let tags: Vec<String> = (0..n).map(|i| format!("bench/rs/{i}")).collect();
            let t0 = now();
            let start = Instant::now();
            match rate {
                None => {
                    for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
                        let t = now();
                        let batch = chunk.iter().map(|&i| {
                            (
                                tags[i].as_str(),
                                map([("i", Value::from(i)), ("t_sent", Value::F64(t))]),
                            )
                        });
                        sender.send_all(batch).await.expect("send");
                    }
                }
                Some(rate) => {
                    for (i, tag) in tags.iter().enumerate() {
                        let due = start + Duration::from_secs_f64(i as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                        let data = map([("i", Value::from(i)), ("t_sent", Value::F64(now()))]);
                        sender.send(tag, data).await.expect("send");
                    }
                }
            }
            let t1 = now();
            let mut h = listener.await.expect("listener");
            // How many of the events the journal stored, and how fast they replay.
            let journaled = match bus
                .listen(TagFilter::Prefix("bench/rs/".into()), Since::Time(since))
                .await
            {
                Ok(mut j) => {
                    let (start, mut seen, mut done) = (now(), 0usize, now());
                    while seen < n {
                        match tokio::time::timeout(Duration::from_secs(3), j.recv()).await {
                            Ok(Ok(Some(_))) => {
                                seen += 1;
                                done = now();
                            }
                            _ => break,
                        }
                    }
                    format!(
                        "{{\"stored\": {seen}, \"replay_s\": {:.3}, \"replay_rate_per_s\": {:.0}}}",
                        done - start,
                        seen as f64 / (done - start)
                    )
                }
                Err(_) => "null".into(),
            };
            let span = h.last - t0;
            println!(
                "{{\"N\": {n}, \"listener\": \"{}\", \"rate\": {}, \"fire_s\": {:.3}, \"fire_rate_per_s\": {:.0}, \"received\": {}, \"gap_dropped\": {}, \"end_to_end_s\": {:.3}, \"delivered_rate_per_s\": {:.0}, \"latency\": {}, \"journal\": {journaled}}}",
                if raw { "raw" } else { "live" },
                rate.map_or("null".into(), |r| r.to_string()),
                t1 - t0,
                n as f64 / (t1 - t0),
                h.count,
                h.gap_dropped,
                span,
                h.count as f64 / span,
                stats(&mut h.lat)
            );
        }
        _ => usage(),
    }
}
