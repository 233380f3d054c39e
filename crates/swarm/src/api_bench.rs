//! `halite-bench api`: the load generator for an HTTP API in front of a master —
//! `halite-api` or stock `salt-api` (`rest_cherrypy`) — and the table that puts two runs
//! side by side. `bench/api.sh` starts the masters, minions and APIs and calls it.
//!
//! What it measures, against one API (`--url`):
//! 1. **Ready**: logs in (`POST /login`, eauth) and sends `POST /` `local` `test.ping` until
//!    one reply holds all `--minions` minions' `true` (bounded by `--ready-timeout`).
//! 2. **`POST /`**: `--clients` clients, each on its own keep-alive connection, send
//!    `[{"client": "local", "tgt": "*", "fun": "test.ping"}]` with `X-Auth-Token` one after
//!    another for `--warmup-secs` (not counted; the connections stay open), then for
//!    `--post-secs` (requests started in that window are counted). A reply counts as
//!    good when it is 200 and holds exactly `--minions` minions, all `true`; non-200
//!    replies, replies missing a minion, connection failures and requests over
//!    `--request-timeout` are counted apart. Requests/s = good replies ÷ the phase's wall
//!    time (from the end of the warm-up until the last client's last reply); latency
//!    percentiles are over every reply received, good or not.
//! 3. **`/events`**: `--sse-clients` streams (`GET /events`, `X-Auth-Token`, each on its own
//!    connection). Probes (`halite/bench/api/probe`) are fired every 200 ms until every
//!    stream has received one (bounded by `--subscribe-timeout`), so firing starts only
//!    once the streams are known to be subscribed. Then `--events-per-sec` × `--event-secs`
//!    events are fired into the master's bus (its `master_event_pull.ipc` in `--sock-dir`,
//!    through one persistent connection, in batches every millisecond), each tagged
//!    `halite/bench/api/<seq>/<due µs>`: its sequence number and the time it was due, so a
//!    firer that falls behind is charged to the system, not hidden. Each stream records
//!    distinct events, duplicates, events out of order, and fire-to-receipt latency
//!    (receipt clock − due time); it reads only the `tag:` lines, so the client's cost does
//!    not depend on the JSON. Streams read until they have every event or `--drain-secs`
//!    after firing ended; an event a stream has not received by then is *missing* (lost,
//!    or still on its way: a resumable stream may deliver it later, but not within the
//!    bounded run). A listener on the master bus itself counts what the master published,
//!    which tells the master's share of the delay and losses from the API's.
//!
//! Throughout, the process trees named by `--watch NAME=PID` (`api`, `master`, `swarm`)
//! are sampled ([`procs`]): peak `VmRSS` and `Pss` sums, `VmHWM` at the end of each phase,
//! CPU-seconds per phase; and this process's own CPU. Each run prints `RESULT` lines on
//! stdout and appends one JSON record to `--out`; `--table FILE` prints the Markdown table
//! of such a file.
//!
//! What it does not do: HTTPS, other clients than `local`, or any timing assertion.
//! Everything it connects to is where `--url` and `--sock-dir` say; `bench/api.sh` only
//! uses 127.0.0.1.
//!
//! Invariants:
//! - Every phase is bounded in time (requests by `--request-timeout`, firing and reading by
//!   the window plus `--drain-secs`), so a stalled API or master cannot hang a run.
//! - What the API sends never panics the generator: replies are parsed with `serde_json`,
//!   SSE lines are scanned with a bounded line buffer ([`sse::TagLines`]), and sequence
//!   numbers outside the run are ignored.

pub mod hist;
pub mod http;
pub mod procs;
pub mod sse;

use crate::Error;
use halite_bus::{BusClient, BusSockets, Listener};
use halite_journal::{EventSender, MasterBus};
use halite_proto::value::map;
use halite_proto::Value;
use hist::Histogram;
use http::{all_true, login, ping_lowstate, post_json, Conn, Target};
use procs::Watch;
use serde_json::{json, Value as Json};
use sse::{event_tag, parse_tag, unix_us, BenchTag, Plan, Shared, Stream, PROBE_TAG, TAG_PREFIX};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Options of `halite-bench api`.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiArgs {
    /// Base URL of the API: http://IP:PORT[/prefix].
    #[arg(long, required_unless_present = "table")]
    pub url: Option<String>,
    /// Name of this run in the results (e.g. halite, stock).
    #[arg(long, default_value = "api")]
    pub label: String,
    /// eauth user.
    #[arg(long, default_value = "bench")]
    pub username: String,
    /// eauth password.
    #[arg(long, default_value = "bench")]
    pub password: String,
    /// eauth backend.
    #[arg(long, default_value = "file")]
    pub eauth: String,
    /// Minions every `local` reply must hold, all `true`.
    #[arg(long, default_value_t = 20)]
    pub minions: usize,
    /// Seconds to wait for the API to log in and answer with every minion.
    #[arg(long, default_value_t = 180.0)]
    pub ready_timeout: f64,
    /// Concurrent `POST /` clients.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Seconds of the measured `POST /` phase (0 skips it).
    #[arg(long, default_value_t = 20.0)]
    pub post_secs: f64,
    /// Seconds of `POST /` load before the measured phase (not counted).
    #[arg(long, default_value_t = 3.0)]
    pub warmup_secs: f64,
    /// Seconds after which a `POST /` counts as timed out (its connection is dropped).
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// `/events` streams (0 skips the events phase).
    #[arg(long, default_value_t = 100)]
    pub sse_clients: usize,
    /// Events fired per second.
    #[arg(long, default_value_t = 10_000.0)]
    pub events_per_sec: f64,
    /// Seconds of firing.
    #[arg(long, default_value_t = 10.0)]
    pub event_secs: f64,
    /// Seconds the streams may keep reading after firing ended.
    #[arg(long, default_value_t = 5.0)]
    pub drain_secs: f64,
    /// Seconds to wait for every stream to receive a probe.
    #[arg(long, default_value_t = 30.0)]
    pub subscribe_timeout: f64,
    /// The master's sock_dir (its event bus), required for the events phase.
    #[arg(long)]
    pub sock_dir: Option<PathBuf>,
    /// The master's max_event_size.
    #[arg(long, default_value_t = 1_048_576)]
    pub max_event_size: usize,
    /// A process tree to sample, NAME=PID (repeatable): api, master, swarm.
    #[arg(long = "watch", value_name = "NAME=PID")]
    pub watch: Vec<String>,
    /// Append the run's JSON record to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Tokio worker threads of the generator.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print the Markdown table of a results file (JSON lines, as --out writes) and exit.
    #[arg(long, value_name = "RESULTS_JSONL")]
    pub table: Option<PathBuf>,
}

fn secs(what: &str, v: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(v).map_err(|_| format!("--{what}: expected seconds, got {v}"))
}

/// Runs `halite-bench api`.
pub fn main(args: ApiArgs) -> Result<(), String> {
    if let Some(path) = &args.table {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let records = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<Json>(l).map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        println!("{}", table(&records));
        return Ok(());
    }
    for (name, v) in [
        ("ready-timeout", args.ready_timeout),
        ("post-secs", args.post_secs),
        ("warmup-secs", args.warmup_secs),
        ("request-timeout", args.request_timeout),
        ("event-secs", args.event_secs),
        ("drain-secs", args.drain_secs),
        ("subscribe-timeout", args.subscribe_timeout),
    ] {
        secs(name, v)?;
    }
    if !(args.events_per_sec.is_finite() && args.events_per_sec > 0.0) {
        return Err("--events-per-sec: expected a positive rate".into());
    }
    // Each stream keeps one bit per event fired.
    if args.events_per_sec * args.event_secs > MAX_EVENTS as f64 {
        return Err(format!(
            "--events-per-sec × --event-secs: at most {MAX_EVENTS} events per run"
        ));
    }
    if args.sse_clients > 0 && args.sock_dir.is_none() {
        return Err("--sock-dir (the master's event bus) is needed for the events phase".into());
    }
    let watched = args
        .watch
        .iter()
        .map(|w| procs::parse_watch(w))
        .collect::<Result<Vec<_>, _>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let record = rt
        .block_on(run(&args, Watch::start(watched)))
        .map_err(|e| e.to_string())?;
    for line in result_lines(&record) {
        println!("{line}");
    }
    if let Some(out) = &args.out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .map_err(|e| format!("opening {}: {e}", out.display()))?;
        writeln!(f, "{record}").map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    Ok(())
}

async fn run(args: &ApiArgs, watch: Watch) -> Result<Json, Error> {
    let url = args.url.as_deref().unwrap_or_default();
    let target = Target::parse(url)?;
    let t0 = Instant::now();
    let token = wait_ready(&target, args).await?;
    eprintln!(
        "[{}] ready after {:.1} s: logged in, every one of {} minions answers",
        args.label,
        t0.elapsed().as_secs_f64(),
        args.minions
    );
    let mut record = json!({
        "label": args.label,
        "url": url,
        "minions": args.minions,
        "date": chrono::Utc::now().to_rfc3339(),
    });
    if args.post_secs > 0.0 && args.clients > 0 {
        let post = post_phase(&target, &token, args, &watch).await;
        eprintln!("[{}] POST /: {post}", args.label);
        record["post"] = post;
    }
    if args.sse_clients > 0 {
        let events = events_phase(&target, &token, args, &watch).await?;
        eprintln!("[{}] /events: {events}", args.label);
        record["events"] = events;
    }
    Ok(record)
}

/// Logs in and sends `POST /` until a reply holds every minion; the token.
async fn wait_ready(target: &Target, args: &ApiArgs) -> Result<String, Error> {
    let timeout = Duration::from_secs_f64(args.ready_timeout);
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing tried");
    let mut token: Option<String> = None;
    while Instant::now() < deadline {
        let step = async {
            let t = match &token {
                Some(t) => t.clone(),
                None => login(target, &args.username, &args.password, &args.eauth).await?,
            };
            let mut conn = Conn::open(target).await?;
            let req = post_json(target, "/", Some(&t), ping_lowstate())?;
            let (status, body) = conn.exchange(req).await?;
            Ok::<_, Error>((t, status, body))
        };
        match tokio::time::timeout_at(deadline.into(), step).await {
            Ok(Ok((t, status, body))) => {
                if status == 200 && all_true(&body, args.minions) {
                    return Ok(t);
                }
                last = format!(
                    "{status} {}",
                    String::from_utf8_lossy(&body)
                        .chars()
                        .take(300)
                        .collect::<String>()
                );
                token = Some(t);
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(Error::Bench(format!(
        "{} not ready after {timeout:?}: {last}",
        target.addr
    )))
}

/// What the `POST /` clients saw.
#[derive(Debug, Default)]
struct PostStats {
    ok: u64,
    incomplete: u64,
    status_errors: u64,
    timeouts: u64,
    failures: u64,
    first_error: Option<String>,
    latency: Histogram,
}

impl PostStats {
    fn note(&mut self, e: impl FnOnce() -> String) {
        if self.first_error.is_none() {
            self.first_error = Some(e());
        }
    }

    fn merge(&mut self, o: PostStats) {
        self.ok += o.ok;
        self.incomplete += o.incomplete;
        self.status_errors += o.status_errors;
        self.timeouts += o.timeouts;
        self.failures += o.failures;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.latency.merge(&o.latency);
    }
}

/// One client: requests one after another on its own connection until `deadline`;
/// only requests started at or after `measure_from` are counted (the warm-up before it
/// runs on the same connections).
async fn post_client(
    target: Target,
    token: String,
    measure_from: Instant,
    deadline: Instant,
    timeout: Duration,
    minions: usize,
) -> PostStats {
    let body = ping_lowstate();
    let mut st = PostStats::default();
    let mut conn: Option<Conn> = None;
    while Instant::now() < deadline {
        let counted = Instant::now() >= measure_from;
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::open(&target).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    if counted {
                        st.failures += 1;
                        st.note(|| e.to_string());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let req = match post_json(&target, "/", Some(&token), body.clone()) {
            Ok(r) => r,
            Err(e) => {
                st.failures += 1;
                st.note(|| e.to_string());
                break;
            }
        };
        let t = Instant::now();
        let counted = t >= measure_from;
        let outcome = tokio::time::timeout(timeout, c.exchange(req)).await;
        if matches!(outcome, Ok(Err(_)) | Err(_)) {
            conn = None;
        }
        if !counted {
            continue;
        }
        match outcome {
            Ok(Ok((status, reply))) => {
                st.latency.record(t.elapsed().as_micros() as u64);
                if status != 200 {
                    st.status_errors += 1;
                    st.note(|| format!("status {status}: {}", String::from_utf8_lossy(&reply)));
                } else if all_true(&reply, minions) {
                    st.ok += 1;
                } else {
                    st.incomplete += 1;
                    st.note(|| format!("incomplete reply: {}", String::from_utf8_lossy(&reply)));
                }
            }
            Ok(Err(e)) => {
                st.failures += 1;
                st.note(|| e.to_string());
            }
            Err(_) => {
                st.timeouts += 1;
                st.note(|| format!("no reply within {timeout:?}"));
            }
        }
    }
    st
}

fn ms(us: Option<u64>) -> Json {
    json!(us.map(|u| u as f64 / 1000.0))
}

async fn post_phase(target: &Target, token: &str, args: &ApiArgs, watch: &Watch) -> Json {
    let measure_from = Instant::now() + Duration::from_secs_f64(args.warmup_secs);
    let deadline = measure_from + Duration::from_secs_f64(args.post_secs);
    let timeout = Duration::from_secs_f64(args.request_timeout);
    let handles: Vec<_> = (0..args.clients)
        .map(|_| {
            tokio::spawn(post_client(
                target.clone(),
                token.to_owned(),
                measure_from,
                deadline,
                timeout,
                args.minions,
            ))
        })
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let mark = watch.begin();
    let mut st = PostStats::default();
    for h in handles {
        match h.await {
            Ok(c) => st.merge(c),
            Err(e) => {
                st.failures += 1;
                st.note(|| format!("client task: {e}"));
            }
        }
    }
    // From the end of the warm-up until the last counted reply.
    let elapsed = measure_from.elapsed().as_secs_f64();
    let procs = watch.end(&mark);
    json!({
        "clients": args.clients,
        "secs": args.post_secs,
        "warmup_secs": args.warmup_secs,
        "elapsed_secs": elapsed,
        "ok": st.ok,
        "incomplete": st.incomplete,
        "status_errors": st.status_errors,
        "timeouts": st.timeouts,
        "failures": st.failures,
        "first_error": st.first_error.map(|e| e.chars().take(300).collect::<String>()),
        "requests_per_sec": st.ok as f64 / elapsed.max(1e-9),
        "replies": st.latency.count(),
        "p50_ms": ms(st.latency.percentile(0.50)),
        "p99_ms": ms(st.latency.percentile(0.99)),
        "max_ms": ms(st.latency.max()),
        "procs": procs,
    })
}

/// Most events fired in one run (each stream keeps a bit per event: 1.25 MB at most).
const MAX_EVENTS: u64 = 10_000_000;

/// Most events in one write to the bus.
const MAX_BATCH: u64 = 1000;

/// Fires the plan's events at `rate`, each stamped with the time it was due; stops early
/// (with what was fired) when a write does not finish by `give_up`.
async fn fire(
    sender: &mut EventSender,
    plan: &Plan,
    rate: f64,
    give_up: Instant,
) -> Result<(u64, f64, bool), Error> {
    let due_us = |seq: u64| plan.start_us + (seq as f64 * 1e6 / rate) as u64;
    let wait = plan.start_us.saturating_sub(unix_us());
    tokio::time::sleep(Duration::from_micros(wait)).await;
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next = 0u64;
    while next < plan.total {
        let now = unix_us();
        let due = if now < plan.start_us {
            0
        } else {
            ((now - plan.start_us) as f64 * rate / 1e6) as u64 + 1
        }
        .min(plan.total);
        if due <= next {
            tick.tick().await;
            continue;
        }
        let upto = due.min(next + MAX_BATCH);
        let tags: Vec<String> = (next..upto).map(|s| event_tag(s, due_us(s))).collect();
        let data = (next..upto).map(|s| {
            map([
                ("seq", Value::from(s)),
                ("t", Value::F64(due_us(s) as f64 / 1e6)),
            ])
        });
        let batch = tags.iter().map(String::as_str).zip(data);
        match tokio::time::timeout_at(give_up.into(), sender.send_all(batch)).await {
            Ok(r) => r.map_err(|e| Error::Bench(format!("firing into the master bus: {e}")))?,
            Err(_) => return Ok((next, t0.elapsed().as_secs_f64(), true)),
        }
        next = upto;
    }
    Ok((next, t0.elapsed().as_secs_f64(), false))
}

/// Counts the measured events the master's bus published.
async fn bus_listen(
    mut listener: Listener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    complete: Arc<AtomicBool>,
) -> (Stream, Option<String>) {
    let mut s = Stream::default();
    loop {
        let ev = tokio::select! {
            ev = listener.recv() => ev,
            _ = stop.wait_for(|v| *v) => return (s, None),
        };
        let ev = match ev {
            Ok(Some(ev)) => ev,
            Ok(None) => return (s, Some("the master bus closed".into())),
            Err(e) => return (s, Some(format!("master bus: {e}"))),
        };
        if let (Some(BenchTag::Event { seq, due_us }), Some(plan)) =
            (parse_tag(ev.tag().as_bytes()), shared.plan.get())
        {
            if s.on_event(seq, due_us, plan, unix_us()) {
                complete.store(true, Ordering::Relaxed);
            }
        }
    }
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied()
}

async fn events_phase(
    target: &Target,
    token: &str,
    args: &ApiArgs,
    watch: &Watch,
) -> Result<Json, Error> {
    let sock_dir = args
        .sock_dir
        .clone()
        .ok_or_else(|| Error::Usage("--sock-dir is needed for the events phase".into()))?;
    let bus_err = |e: halite_journal::Error| Error::Bench(format!("master bus: {e}"));
    let mut sender = MasterBus::new(&sock_dir, args.max_event_size)
        .sender()
        .await
        .map_err(bus_err)?;
    let listener = BusClient::new(args.max_event_size)
        .listen(&BusSockets::master(&sock_dir).pub_addr, TAG_PREFIX)
        .await
        .map_err(|e| Error::Bench(format!("master bus: {e}")))?;
    let shared = Arc::new(Shared::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let bus_complete = Arc::new(AtomicBool::new(false));
    let bus_task = tokio::spawn(bus_listen(
        listener,
        shared.clone(),
        stop_rx.clone(),
        bus_complete.clone(),
    ));
    let streams: Vec<_> = (0..args.sse_clients)
        .map(|_| {
            tokio::spawn(sse::client(
                target.clone(),
                token.to_owned(),
                shared.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();
    let m = args.sse_clients;
    let t_sub = Instant::now();
    let sub_deadline = t_sub + Duration::from_secs_f64(args.subscribe_timeout);
    loop {
        let subscribed = shared.subscribed.load(Ordering::Relaxed);
        let finished = shared.finished.load(Ordering::Relaxed);
        if subscribed + finished >= m || Instant::now() >= sub_deadline {
            break;
        }
        sender
            .send(PROBE_TAG, map([("probe", Value::from(true))]))
            .await
            .map_err(bus_err)?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let subscribed = shared.subscribed.load(Ordering::Relaxed);
    eprintln!(
        "[{}] {subscribed} of {m} streams receive events after {:.1} s; firing {} events/s for {} s",
        args.label,
        t_sub.elapsed().as_secs_f64(),
        args.events_per_sec,
        args.event_secs
    );
    let total = (args.events_per_sec * args.event_secs).round() as u64;
    let start_us = unix_us() + 50_000;
    let plan = Plan {
        total,
        start_us,
        end_us: start_us + (args.event_secs * 1e6) as u64,
    };
    // Set once, here; the streams only read it.
    let _ = shared.plan.set(plan);
    let mark = watch.begin();
    let window = Duration::from_secs_f64(args.event_secs);
    let drain = Duration::from_secs_f64(args.drain_secs);
    let give_up = Instant::now() + Duration::from_millis(50) + window + drain;
    let (fired, fire_secs, cut_short) =
        fire(&mut sender, &plan, args.events_per_sec, give_up).await?;
    drop(sender);
    let stop_at = (Instant::now() + drain).min(give_up + drain);
    while Instant::now() < stop_at {
        let all_streams = shared.finished.load(Ordering::Relaxed) >= m;
        if all_streams && bus_complete.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    let procs = watch.end(&mark);
    let mut results = Vec::with_capacity(m);
    for h in streams {
        results.push(h.await.unwrap_or_else(|e| {
            let mut s = Stream::default();
            s.error = Some(format!("stream task: {e}"));
            s
        }));
    }
    let (bus, bus_error) = bus_task
        .await
        .unwrap_or_else(|e| (Stream::default(), Some(format!("bus task: {e}"))));
    Ok(events_record(
        args, &plan, fired, fire_secs, cut_short, subscribed, &results, &bus, bus_error, procs,
    ))
}

#[allow(clippy::too_many_arguments)]
fn events_record(
    args: &ApiArgs,
    plan: &Plan,
    fired: u64,
    fire_secs: f64,
    cut_short: bool,
    subscribed: usize,
    streams: &[Stream],
    bus: &Stream,
    bus_error: Option<String>,
    procs: Json,
) -> Json {
    let window = plan.end_us.saturating_sub(plan.start_us) as f64 / 1e6;
    let connected: Vec<&Stream> = streams.iter().filter(|s| s.status == Some(200)).collect();
    let received: Vec<u64> = connected.iter().map(|s| s.received).collect();
    let in_window: Vec<u64> = connected.iter().map(|s| s.in_window).collect();
    let mut latency = Histogram::default();
    for s in &connected {
        latency.merge(&s.latency);
    }
    let mut errors: Vec<(String, u64)> = Vec::new();
    for e in streams.iter().filter_map(|s| s.error.as_ref()) {
        match errors.iter_mut().find(|(k, _)| k == e) {
            Some((_, n)) => *n += 1,
            None => errors.push((e.clone(), 1)),
        }
    }
    let worst = received.iter().min().copied();
    let pct = |n: Option<u64>| {
        json!(n.map(|n| if fired == 0 {
            0.0
        } else {
            100.0 * n as f64 / fired as f64
        }))
    };
    json!({
        "clients": args.sse_clients,
        "connected": connected.len(),
        "subscribed": subscribed,
        "offered_per_sec": args.events_per_sec,
        "window_secs": window,
        "drain_secs": args.drain_secs,
        "fired": fired,
        "fire_secs": fire_secs,
        "fired_per_sec": fired as f64 / fire_secs.max(window).max(1e-9),
        "firing_cut_short": cut_short,
        "delivered_min": worst,
        "delivered_median": median(received.clone()),
        "delivered_max": received.iter().max(),
        "delivered_worst_pct": pct(worst),
        "delivered_per_sec_median": median(in_window.clone()).map(|n| n as f64 / window),
        "delivered_per_sec_total": in_window.iter().sum::<u64>() as f64 / window,
        "missing_max": worst.map(|w| fired.saturating_sub(w)),
        "missing_total": received.iter().map(|r| fired.saturating_sub(*r)).sum::<u64>(),
        "duplicates": connected.iter().map(|s| s.duplicates).sum::<u64>(),
        "out_of_order": connected.iter().map(|s| s.out_of_order).sum::<u64>(),
        "p50_ms": ms(latency.percentile(0.50)),
        "p99_ms": ms(latency.percentile(0.99)),
        "max_ms": ms(latency.max()),
        "stream_errors": errors.iter().map(|(e, n)| json!({"error": e, "streams": n})).collect::<Vec<_>>(),
        "bus": {
            "received": bus.received,
            "in_window": bus.in_window,
            "p50_ms": ms(bus.latency.percentile(0.50)),
            "p99_ms": ms(bus.latency.percentile(0.99)),
            "error": bus_error,
        },
        "procs": procs,
    })
}

fn num(v: &Json) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
        Some(x) => format!("{x:.2}"),
        None => "-".into(),
    }
}

/// The `RESULT` lines of a record (one per phase), `key=value` separated by spaces.
pub fn result_lines(r: &Json) -> Vec<String> {
    let label = r["label"].as_str().unwrap_or("?");
    let mut out = Vec::new();
    let p = &r["post"];
    if p.is_object() {
        let errors = ["status_errors", "timeouts", "failures"]
            .iter()
            .filter_map(|k| p[*k].as_u64())
            .sum::<u64>();
        out.push(format!(
            "RESULT post label={label} clients={} secs={} ok={} requests_per_sec={} p50_ms={} p99_ms={} errors={errors} incomplete={}",
            num(&p["clients"]),
            num(&p["secs"]),
            num(&p["ok"]),
            num(&p["requests_per_sec"]),
            num(&p["p50_ms"]),
            num(&p["p99_ms"]),
            num(&p["incomplete"]),
        ));
    }
    let e = &r["events"];
    if e.is_object() {
        let errors = e["stream_errors"].as_array().map_or(0, Vec::len);
        out.push(format!(
            "RESULT events label={label} streams={} subscribed={} fired={} fired_per_sec={} delivered_per_sec_median={} delivered_worst_pct={} missing_max={} duplicates={} p50_ms={} p99_ms={} stream_errors={errors}",
            num(&e["clients"]),
            num(&e["subscribed"]),
            num(&e["fired"]),
            num(&e["fired_per_sec"]),
            num(&e["delivered_per_sec_median"]),
            num(&e["delivered_worst_pct"]),
            num(&e["missing_max"]),
            num(&e["duplicates"]),
            num(&e["p50_ms"]),
            num(&e["p99_ms"]),
        ));
    }
    out
}

/// How a row's figures compare.
#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
    /// Context, no ratio.
    Neither,
}

/// How a row's figures are printed.
#[derive(Clone, Copy)]
enum Unit {
    Rate,
    Ms,
    Mib,
    Count,
    Pct,
    Secs,
}

fn fmt(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Rate | Unit::Count => format!("{v:.0}"),
        Unit::Ms if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Unit::Ms if v >= 100.0 => format!("{v:.0} ms"),
        Unit::Ms => format!("{v:.1} ms"),
        Unit::Mib => format!("{v:.1}"),
        Unit::Pct => format!("{v:.1} %"),
        Unit::Secs => format!("{v:.2} s"),
    }
}

type Getter = fn(&Json) -> Option<f64>;

/// Events latency rows: over what was delivered; marked when that is under 99 %.
fn partial_note(r: &Json) -> Option<String> {
    let pct = r["events"]["delivered_worst_pct"].as_f64()?;
    (pct < 99.0).then(|| format!("over what arrived; worst stream got {pct:.1} %"))
}

fn per_request(r: &Json, proc_name: &str) -> Option<f64> {
    let ok = r["post"]["ok"].as_f64().filter(|n| *n > 0.0)?;
    Some(r["post"]["procs"][proc_name]["cpu_secs"].as_f64()? * 1000.0 / ok)
}

/// The Markdown table of a set of records: one column per label (in order of appearance),
/// and "ratio for Halite" when labels `halite` and `stock` are both there (stock ÷ Halite
/// for times and memory, Halite ÷ stock for rates; `≥` where stock's figure covers only
/// the events it delivered).
pub fn table(records: &[Json]) -> String {
    let mut labels: Vec<&str> = Vec::new();
    for r in records {
        if let Some(l) = r["label"].as_str() {
            if !labels.contains(&l) {
                labels.push(l);
            }
        }
    }
    // The last record of each label.
    let rec = |l: &str| records.iter().rev().find(|r| r["label"] == l);
    let ratio = labels.contains(&"halite") && labels.contains(&"stock");
    let first = records.first().cloned().unwrap_or(Json::Null);
    let clients = num(&first["post"]["clients"]);
    let streams = num(&first["events"]["clients"]);
    let offered = num(&first["events"]["offered_per_sec"]);
    let post = format!("`POST /` local test.ping, {clients} clients:");
    let ev = format!("`/events`, {streams} streams, {offered} events/s offered:");
    #[rustfmt::skip]
    let rows: Vec<(String, Getter, Unit, Better, bool)> = vec![
        (format!("{post} requests/s"), |r| r["post"]["requests_per_sec"].as_f64(), Unit::Rate, Better::Higher, false),
        (format!("{post} latency p50"), |r| r["post"]["p50_ms"].as_f64(), Unit::Ms, Better::Lower, false),
        (format!("{post} latency p99"), |r| r["post"]["p99_ms"].as_f64(), Unit::Ms, Better::Lower, false),
        (format!("{post} failed (errors, timeouts, incomplete)"), |r| {
            let p = &r["post"];
            p.is_object().then(|| ["status_errors", "timeouts", "failures", "incomplete"].iter().filter_map(|k| p[*k].as_f64()).sum())
        }, Unit::Count, Better::Neither, false),
        (format!("{post} API CPU per request"), |r| per_request(r, "api"), Unit::Ms, Better::Lower, false),
        (format!("{post} master CPU per request"), |r| per_request(r, "master"), Unit::Ms, Better::Lower, false),
        (format!("{post} API peak RSS (MiB)"), |r| r["post"]["procs"]["api"]["rss_peak_mib"].as_f64(), Unit::Mib, Better::Lower, false),
        (format!("{ev} streams receiving"), |r| r["events"]["subscribed"].as_f64(), Unit::Count, Better::Neither, false),
        (format!("{ev} fired /s (what the master's bus took)"), |r| r["events"]["fired_per_sec"].as_f64(), Unit::Rate, Better::Neither, false),
        (format!("{ev} a direct listener on the master bus: events /s"), |r| {
            Some(r["events"]["bus"]["in_window"].as_f64()? / r["events"]["window_secs"].as_f64().filter(|w| *w > 0.0)?)
        }, Unit::Rate, Better::Neither, false),
        (format!("{ev} a direct listener on the master bus: latency p99"), |r| r["events"]["bus"]["p99_ms"].as_f64(), Unit::Ms, Better::Neither, false),
        (format!("{ev} delivered /s per stream (median)"), |r| r["events"]["delivered_per_sec_median"].as_f64(), Unit::Rate, Better::Higher, false),
        (format!("{ev} delivered /s, all streams"), |r| r["events"]["delivered_per_sec_total"].as_f64(), Unit::Rate, Better::Higher, false),
        (format!("{ev} delivered by the end, worst stream"), |r| r["events"]["delivered_worst_pct"].as_f64(), Unit::Pct, Better::Higher, false),
        (format!("{ev} latency p50"), |r| r["events"]["p50_ms"].as_f64(), Unit::Ms, Better::Lower, true),
        (format!("{ev} latency p99"), |r| r["events"]["p99_ms"].as_f64(), Unit::Ms, Better::Lower, true),
        (format!("{ev} latency max"), |r| r["events"]["max_ms"].as_f64(), Unit::Ms, Better::Lower, true),
        (format!("{ev} API CPU"), |r| r["events"]["procs"]["api"]["cpu_secs"].as_f64(), Unit::Secs, Better::Neither, false),
        (format!("{ev} API peak RSS (MiB)"), |r| r["events"]["procs"]["api"]["rss_peak_mib"].as_f64(), Unit::Mib, Better::Lower, false),
        ("API VmHWM at the end of the run (MiB)".into(), |r| {
            r["events"]["procs"]["api"]["hwm_mib"].as_f64().or_else(|| r["post"]["procs"]["api"]["hwm_mib"].as_f64())
        }, Unit::Mib, Better::Lower, false),
        ("API peak PSS, either phase (MiB)".into(), |r| {
            let a = r["post"]["procs"]["api"]["pss_peak_mib"].as_f64();
            let b = r["events"]["procs"]["api"]["pss_peak_mib"].as_f64();
            match (a, b) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        }, Unit::Mib, Better::Lower, false),
        ("load generator CPU, `POST /` phase".into(), |r| r["post"]["procs"]["generator"]["cpu_secs"].as_f64(), Unit::Secs, Better::Neither, false),
        ("load generator CPU, `/events` phase".into(), |r| r["events"]["procs"]["generator"]["cpu_secs"].as_f64(), Unit::Secs, Better::Neither, false),
    ];
    let mut md = format!("| measure | {} |", labels.join(" | "));
    if ratio {
        md.push_str(" ratio for Halite |");
    }
    md.push('\n');
    md.push_str(&"|---".repeat(labels.len() + 1 + usize::from(ratio)));
    md.push_str("|\n");
    for (name, get, unit, better, partial) in &rows {
        let cells: Vec<String> = labels
            .iter()
            .map(|l| {
                let Some(r) = rec(l) else {
                    return "-".into();
                };
                match get(r) {
                    Some(v) => match partial.then(|| partial_note(r)).flatten() {
                        Some(note) => format!("{} ({note})", fmt(*unit, v)),
                        None => fmt(*unit, v),
                    },
                    None => "-".into(),
                }
            })
            .collect();
        md.push_str(&format!("| {name} | {} |", cells.join(" | ")));
        if ratio {
            let h = rec("halite").and_then(get);
            let s = rec("stock").and_then(get);
            let cell = match (h, s, better) {
                (Some(h), Some(s), Better::Higher) if h > 0.0 && s > 0.0 => {
                    format!("{:.1}×", h / s)
                }
                (Some(h), Some(_), Better::Higher) if h > 0.0 => "∞ (stock: 0)".into(),
                (Some(h), Some(s), Better::Lower) if h > 0.0 && s > 0.0 => {
                    let ge = *partial && rec("stock").and_then(partial_note).is_some();
                    format!("{}{:.1}×", if ge { "≥ " } else { "" }, s / h)
                }
                _ => "-".into(),
            };
            md.push_str(&format!(" {cell} |"));
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(label: &str, rps: f64, p99: f64, worst_pct: f64, ev_p99: f64) -> Json {
        json!({
            "label": label,
            "post": {"clients": 50, "secs": 20.0, "ok": 1000, "incomplete": 0, "status_errors": 0,
                     "timeouts": 1, "failures": 0, "requests_per_sec": rps, "p50_ms": 5.0, "p99_ms": p99,
                     "procs": {"api": {"cpu_secs": 2.0, "rss_peak_mib": 12.3}, "master": {"cpu_secs": 4.0},
                               "generator": {"cpu_secs": 1.0}}},
            "events": {"clients": 100, "offered_per_sec": 10000.0, "subscribed": 100, "fired_per_sec": 9990.0,
                       "delivered_per_sec_median": 9990.0, "delivered_per_sec_total": 999000.0,
                       "delivered_worst_pct": worst_pct, "p50_ms": 2.0, "p99_ms": ev_p99, "max_ms": 1500.0,
                       "stream_errors": [],
                       "procs": {"api": {"cpu_secs": 3.5, "rss_peak_mib": 20.0, "hwm_mib": 21.0, "pss_peak_mib": 19.0}}},
        })
    }

    #[test]
    fn the_table_puts_labels_side_by_side_with_ratios_for_halite() {
        let md = table(&[
            record("halite", 500.0, 20.0, 100.0, 10.0),
            record("stock", 50.0, 400.0, 3.0, 4000.0),
        ]);
        for row in [
            "| measure | halite | stock | ratio for Halite |",
            "| `POST /` local test.ping, 50 clients: requests/s | 500 | 50 | 10.0× |",
            "| `POST /` local test.ping, 50 clients: latency p99 | 20.0 ms | 400 ms | 20.0× |",
            "| `POST /` local test.ping, 50 clients: failed (errors, timeouts, incomplete) | 1 | 1 | - |",
            "| `POST /` local test.ping, 50 clients: API CPU per request | 2.0 ms | 2.0 ms | 1.0× |",
            "| `POST /` local test.ping, 50 clients: API peak RSS (MiB) | 12.3 | 12.3 | 1.0× |",
            "| `/events`, 100 streams, 10000 events/s offered: latency p99 | 10.0 ms | 4.00 s (over what arrived; worst stream got 3.0 %) | ≥ 400.0× |",
            "| `/events`, 100 streams, 10000 events/s offered: delivered by the end, worst stream | 100.0 % | 3.0 % | 33.3× |",
            "| API VmHWM at the end of the run (MiB) | 21.0 | 21.0 | 1.0× |",
        ] {
            assert!(md.contains(row), "missing {row} in\n{md}");
        }
    }

    #[test]
    fn a_single_label_has_no_ratio_column_and_missing_phases_show_dashes() {
        let md =
            table(&[json!({"label": "halite", "post": {"clients": 2, "requests_per_sec": 3.0}})]);
        assert!(md.starts_with("| measure | halite |\n|---|---|\n"), "{md}");
        assert!(
            md.contains("| `POST /` local test.ping, 2 clients: requests/s | 3 |"),
            "{md}"
        );
        assert!(md.contains("latency p99 | - |"), "{md}");
    }

    #[test]
    fn result_lines_report_errors_per_phase() {
        let lines = result_lines(&record("halite", 512.5, 20.0, 100.0, 10.0));
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("RESULT post label=halite clients=50 secs=20 ok=1000 requests_per_sec=512.50 p50_ms=5 p99_ms=20 errors=1 incomplete=0"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("RESULT events label=halite streams=100 subscribed=100"),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with("stream_errors=0"), "{}", lines[1]);
        assert!(result_lines(&json!({"label": "x"})).is_empty());
    }

    #[test]
    fn medians_take_the_lower_middle() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3, 1, 2]), Some(2));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
    }
}
