//! Master-bus throughput and latency with a Rust sender and a Rust listener (driven by
//! `bench/master_bus.py`; see there).
//!
//! ```text
//! bus_bench SOCK_DIR send N [RATE]   listen live, fire N events `bench/rs/<i>` over one pull
//!                                     connection (as fast as possible, or RATE per second),
//!                                     then replay what the journal stored (if there is one)
//! bus_bench SOCK_DIR listen N PREFIX  only listen: count N events whose tag starts with
//!                                     PREFIX (fired by someone else); 3 s idle ends it
//! ```
//! Each event's data carries `t_sent` (Unix seconds, float) and the listener records
//! `now - t_sent`. Prints one JSON object.

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
    first: f64,
    last: f64,
    lat: Vec<f64>,
}

async fn hear(mut stream: EventStream, n: usize) -> Heard {
    let mut h = Heard {
        count: 0,
        first: 0.0,
        last: 0.0,
        lat: Vec::with_capacity(n),
    };
    while h.count < n {
        let ev = match tokio::time::timeout(IDLE, stream.recv()).await {
            Ok(Ok(Some(ev))) => ev,
            _ => break,
        };
        let t = now();
        if h.count == 0 {
            h.first = t;
        }
        h.last = t;
        h.count += 1;
        if let Some(Value::F64(sent)) = value::get(&ev.data, "t_sent") {
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
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: bus_bench SOCK_DIR send N [RATE] | bus_bench SOCK_DIR listen N PREFIX");
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
            let stream = bus
                .listen(TagFilter::Prefix(prefix), Since::Live)
                .await
                .expect("listen");
            println!("ready");
            let mut h = hear(stream, n).await;
            println!(
                "{{\"received\": {}, \"first\": {:.6}, \"last\": {:.6}, \"latency\": {}}}",
                h.count,
                h.first,
                h.last,
                stats(&mut h.lat)
            );
        }
        "send" => {
            let rate: Option<f64> = args.get(4).map(|r| r.parse().unwrap_or_else(|_| usage()));
            let stream = bus
                .listen(TagFilter::Prefix("bench/rs/".into()), Since::Live)
                .await
                .expect("listen");
            let since = chrono::Utc::now();
            let listener = tokio::spawn(hear(stream, n));
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
                "{{\"N\": {n}, \"rate\": {}, \"fire_s\": {:.3}, \"fire_rate_per_s\": {:.0}, \"received\": {}, \"end_to_end_s\": {:.3}, \"delivered_rate_per_s\": {:.0}, \"latency\": {}, \"journal\": {journaled}}}",
                rate.map_or("null".into(), |r| r.to_string()),
                t1 - t0,
                n as f64 / (t1 - t0),
                h.count,
                span,
                h.count as f64 / span,
                stats(&mut h.lat)
            );
        }
        _ => usage(),
    }
}
