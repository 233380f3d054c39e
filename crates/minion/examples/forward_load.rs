//! Load tool for `bench/forward.py`: fires `fire_master` events onto a minion bus and
//! measures what reaches the master bus.
//!
//! ```text
//! forward_load --master-sock DIR [--minion-pull PATH] [--n N] [--rate R] [--idle SECS]
//! ```
//!
//! It subscribes to the master bus in `DIR` (and waits until a probe fired there comes
//! back), prints `ready`, then — with `--minion-pull` — writes `N` single-form
//! `fire_master` events to that pull socket over one connection (as a Salt program's
//! `fire_event` does), as fast as it can or paced at `R` events/s. Each event's data
//! carries its send time (`t_sent`, seconds since the epoch), so a listener can compute
//! the latency. Without `--minion-pull` another program sends (with the same data).
//! It stops after `N` events tagged `bench/fwd/*` arrived or `--idle` seconds passed
//! without one, and prints one JSON line with the counts, rates and latency percentiles.

use halite_bus::{BusClient, BusSockets};
use halite_proto::event::{frame_pull, pack_event, stamp};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Args {
    master_sock: PathBuf,
    minion_pull: Option<PathBuf>,
    n: usize,
    rate: Option<f64>,
    idle: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        master_sock: PathBuf::new(),
        minion_pull: None,
        n: 10_000,
        rate: None,
        idle: Duration::from_secs(20),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--master-sock" => args.master_sock = PathBuf::from(value()?),
            "--minion-pull" => args.minion_pull = Some(PathBuf::from(value()?)),
            "--n" => args.n = value()?.parse().map_err(|e| format!("--n: {e}"))?,
            "--rate" => args.rate = Some(value()?.parse().map_err(|e| format!("--rate: {e}"))?),
            "--idle" => {
                args.idle =
                    Duration::from_secs(value()?.parse().map_err(|e| format!("--idle: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.master_sock.as_os_str().is_empty() {
        return Err("--master-sock is required".into());
    }
    Ok(args)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Writes `n` events to the pull socket; returns (first send, last send) in epoch seconds.
fn fire(path: PathBuf, n: usize, rate: Option<f64>) -> std::io::Result<(f64, f64)> {
    let mut conn = UnixStream::connect(path)?;
    let start = Instant::now();
    let t0 = now();
    let mut buf = Vec::new();
    for i in 0..n {
        if let Some(rate) = rate {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            let wait = due.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                conn.write_all(&buf)?;
                buf.clear();
                std::thread::sleep(wait);
            }
        }
        let t = now();
        let data = map([
            (
                "data",
                map([("i", Value::from(i as u64)), ("t_sent", Value::F64(t))]),
            ),
            ("tag", s(format!("bench/fwd/{i}"))),
            ("events", Value::Nil),
            ("pretag", Value::Nil),
            ("_stamp", s(stamp(chrono::Utc::now()))),
        ]);
        buf.extend_from_slice(&frame_pull(&pack_event("fire_master", &data)));
        if buf.len() > 64 * 1024 {
            conn.write_all(&buf)?;
            buf.clear();
        }
    }
    conn.write_all(&buf)?;
    Ok((t0, now()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i] * 1000.0
}

async fn run(args: Args) -> Result<String, String> {
    let sockets = BusSockets::master(&args.master_sock);
    let client = BusClient::new(1 << 20);
    let mut listener = client
        .listen(&sockets.pub_addr, "")
        .await
        .map_err(|e| e.to_string())?;
    // Subscribed once a probe fired into the master bus comes back.
    loop {
        client
            .fire(
                &sockets.pull_addr,
                "bench/probe",
                map([("p", Value::Boolean(true))]),
            )
            .await
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_millis(200), listener.recv()).await {
            Ok(Ok(Some(ev))) if ev.tag() == "bench/probe" => break,
            Ok(Err(e)) => return Err(e.to_string()),
            _ => {}
        }
    }
    println!("ready");
    let sender = args.minion_pull.clone().map(|path| {
        let (n, rate) = (args.n, args.rate);
        std::thread::spawn(move || fire(path, n, rate))
    });
    let mut latencies = Vec::with_capacity(args.n);
    let mut seen = vec![false; args.n];
    let (mut first, mut last, mut duplicates) = (f64::NAN, f64::NAN, 0u64);
    while latencies.len() < args.n {
        let ev = match tokio::time::timeout(args.idle, listener.recv()).await {
            Ok(Ok(Some(ev))) => ev,
            Ok(Ok(None)) | Err(_) => break,
            Ok(Err(e)) => return Err(e.to_string()),
        };
        if !ev.tag().starts_with("bench/fwd/") {
            continue;
        }
        let t = now();
        let inner = value::get(ev.data(), "data").unwrap_or(ev.data());
        let (Some(i), Some(Value::F64(sent))) =
            (value::get_i64(inner, "i"), value::get(inner, "t_sent"))
        else {
            continue;
        };
        match seen.get_mut(i as usize) {
            Some(flag) if !*flag => *flag = true,
            Some(_) => {
                duplicates += 1;
                continue;
            }
            None => continue,
        }
        if first.is_nan() {
            first = t;
        }
        last = t;
        latencies.push(t - sent);
    }
    let (t0, t1) = match sender {
        Some(h) => h
            .join()
            .map_err(|_| "the sender panicked".to_owned())?
            .map_err(|e| e.to_string())?,
        None => (f64::NAN, f64::NAN),
    };
    let received = latencies.len();
    latencies.sort_by(f64::total_cmp);
    let span = last - if t0.is_nan() { first } else { t0 };
    Ok(format!(
        "{{\"n\": {}, \"received\": {received}, \"duplicates\": {duplicates}, \"fire_s\": {:.3}, \"fire_rate\": {:.0}, \"end_to_end_s\": {span:.3}, \"delivered_rate\": {:.0}, \"p50_ms\": {:.2}, \"p99_ms\": {:.2}, \"max_ms\": {:.2}}}",
        args.n,
        t1 - t0,
        args.n as f64 / (t1 - t0),
        received as f64 / span,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().map_or(f64::NAN, |l| l * 1000.0),
    ))
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("forward_load: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("forward_load: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("forward_load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
