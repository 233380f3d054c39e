//! The benchmark runner behind `halite-bench`: for each minion count, a Halite master and
//! then a stock salt-master, each under a fresh `halite-swarm`, measured phase by phase.
//!
//! Phases (each capped by the same time budget; a phase over budget is reported as "did
//! not finish in T"; an unfinished auth storm ends the run for that master and count):
//! 1. auth storm: swarm start → every minion authenticated and subscribed (the swarm's
//!    `ready` line); the master's CPU-seconds over the phase.
//! 2. publish → returns: `publishes` sequential `test.ping` jobs to `*`, published over the
//!    request port with the root key (`halite-client`'s `LocalClient`, which speaks to a
//!    stock master too); each measured from the publish request to the last of the N
//!    `salt/job/<jid>/ret/<id>` events on the master bus.
//! 3. sustained events: the swarm fires `events_per_sec` `_minion_event`s per second in all,
//!    spread evenly over its minions, for `event_secs`; events counted on the master bus,
//!    latency = arrival − the time the event was due (so queueing in the swarm counts
//!    against the master).
//!
//! Throughout, a sampler thread sums the RSS and PSS of the master's process tree every
//! 100 ms (the peaks of each phase are reported) and CPU-seconds come from
//! `/proc/<pid>/stat` (utime + stime of every process of the tree). Everything listens on
//! 127.0.0.1.

use crate::minion::EVENT_TAG_PREFIX;
use crate::Error;
use halite_bus::{BusClient, BusSockets};
use halite_client::{LocalClient, PublishRequest};
use halite_config::MasterConfig;
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_testkit::{start_halite_master, start_stock_master, Proc, TempRoot};
use serde_json::{json, Value as Json};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Which master a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterKind {
    /// `halite-master` from the same target directory as `halite-bench`.
    Halite,
    /// Stock `salt-master` 3008.3 from the venv.
    Stock,
}

impl MasterKind {
    /// `halite` or `stock`.
    pub fn name(self) -> &'static str {
        match self {
            MasterKind::Halite => "halite",
            MasterKind::Stock => "stock",
        }
    }

    /// Parses `halite` or `stock`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "halite" => Some(MasterKind::Halite),
            "stock" => Some(MasterKind::Stock),
            _ => None,
        }
    }
}

/// What to measure and how.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Minion counts.
    pub counts: Vec<usize>,
    /// Masters, in order, for every count.
    pub masters: Vec<MasterKind>,
    /// `test.ping` publishes per run.
    pub publishes: usize,
    /// Events per second offered by the whole swarm in the events phase (spread evenly over
    /// the minions).
    pub events_per_sec: f64,
    /// Length of the events phase.
    pub event_secs: f64,
    /// Time budget of each phase.
    pub budget: Duration,
    /// The `halite-swarm` binary.
    pub swarm_bin: PathBuf,
    /// Minion key cache.
    pub keys_dir: PathBuf,
    /// RSA size of the swarm's minion keys (`halite-swarm --key-bits`).
    pub swarm_key_bits: u32,
    /// `--auth-concurrency` of the swarm.
    pub auth_concurrency: usize,
    /// `--connections` of the swarm.
    pub connections: usize,
    /// `--minions-per-subscription` of the swarm.
    pub minions_per_subscription: usize,
    /// `--threads` of the swarm.
    pub swarm_threads: usize,
    /// Master config merged over the test defaults (YAML mapping).
    pub master_yaml: String,
}

/// The master config both masters get: Salt's scale guidance (more request workers,
/// larger HWMs and listen backlog, many open files), `auto_accept`, and file logging at
/// `warning` so neither master spends the run writing debug lines.
pub fn scale_config(worker_threads: u32) -> String {
    format!(
        "auto_accept: true\n\
         worker_threads: {worker_threads}\n\
         pub_hwm: 10000\n\
         zmq_backlog: 4096\n\
         max_open_files: 100000\n\
         log_level: warning\n\
         log_level_logfile: warning\n"
    )
}

/// Nearest-rank percentile (`q` in 0..=1) of unsorted samples; `None` when empty.
pub fn percentile(samples: &[f64], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Every process of the tree rooted at `pid` (following `/proc/<pid>/task/*/children`).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        out.push(p);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// Sum of the RSS of `pids`, in KiB.
pub fn rss_kib(pids: &[u32]) -> u64 {
    memory_kib(pids).0
}

/// Sums of `Rss` and `Pss` (from `smaps_rollup`) of `pids`, in KiB. PSS divides pages
/// shared between processes (a stock master's forked workers share most of theirs), so the
/// PSS sum is the tree's real footprint and the RSS sum an overcount.
pub fn memory_kib(pids: &[u32]) -> (u64, u64) {
    let field = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .unwrap_or(0)
    };
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .map(|t| (field(&t, "Rss:"), field(&t, "Pss:")))
        .fold((0, 0), |(r, p), (r2, p2)| (r + r2, p + p2))
}

/// utime + stime of `pids`, in seconds.
pub fn cpu_secs(pids: &[u32]) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|stat| {
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ut: u64 = fields.get(11)?.parse().ok()?;
            let st: u64 = fields.get(12)?.parse().ok()?;
            Some((ut + st) as f64 / tck)
        })
        .sum()
}

/// Samples the RSS and PSS of a process tree every 100 ms and keeps the peaks since the
/// last [`Sampler::take_peak`].
pub struct Sampler {
    peak_rss: Arc<AtomicU64>,
    peak_pss: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling the tree rooted at `pid`.
    pub fn start(pid: u32) -> Sampler {
        let peak_rss = Arc::new(AtomicU64::new(0));
        let peak_pss = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (rss, pss, halt) = (peak_rss.clone(), peak_pss.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let (r, p) = memory_kib(&process_tree(pid));
                rss.fetch_max(r, Ordering::Relaxed);
                pss.fetch_max(p, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler {
            peak_rss,
            peak_pss,
            stop,
            thread: Some(thread),
        }
    }

    /// The peak RSS and PSS sums (MiB) since the previous call; starts a new period at the
    /// current values.
    pub fn take_peak(&self, pid: u32) -> (f64, f64) {
        let (r, p) = memory_kib(&process_tree(pid));
        let rss = self.peak_rss.swap(r, Ordering::Relaxed).max(r);
        let pss = self.peak_pss.swap(p, Ordering::Relaxed).max(p);
        (rss as f64 / 1024.0, pss as f64 / 1024.0)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A running `halite-swarm`: its JSON lines arrive on a channel; stopped on drop.
struct Swarm {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Json>,
}

impl Swarm {
    fn spawn(opts: &BenchOptions, n: usize, ret_port: u16, log: &Path) -> Result<Swarm, Error> {
        let stderr = std::fs::File::create(log).map_err(|e| Error::Io {
            what: format!("creating {}", log.display()),
            source: e,
        })?;
        let mut child = Command::new(&opts.swarm_bin)
            .args(["--count", &n.to_string()])
            .args(["--master", &format!("127.0.0.1:{ret_port}")])
            .arg("--keys-dir")
            .arg(&opts.keys_dir)
            .args(["--key-bits", &opts.swarm_key_bits.to_string()])
            .args(["--auth-concurrency", &opts.auth_concurrency.to_string()])
            .args(["--connections", &opts.connections.to_string()])
            .args([
                "--minions-per-subscription",
                &opts.minions_per_subscription.to_string(),
            ])
            .args(["--threads", &opts.swarm_threads.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| Error::Io {
                what: format!("starting {}", opts.swarm_bin.display()),
                source: e,
            })?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Bench("the swarm has no stdout".into()))?;
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Json>(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Swarm {
            stdin: child.stdin.take(),
            child,
            lines,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, line: &str) -> Result<(), Error> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::Bench("the swarm's stdin is closed".into()))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| Error::Io {
                what: "writing to the swarm".into(),
                source: e,
            })
    }

    /// Asks for the swarm's counters until at least `wanted` returns have ended
    /// (acknowledged or given up) or `deadline` passes; the acknowledged count then.
    async fn returns_done(&mut self, wanted: u64, deadline: tokio::time::Instant) -> Option<u64> {
        let mut progress = Json::Null;
        loop {
            self.send("stats").ok()?;
            let stats = self.wait_for("stats", deadline, &mut progress).await?;
            let count = |k: &str| stats[k].as_u64().unwrap_or(0);
            if count("returns") + count("return_failures") >= wanted
                || tokio::time::Instant::now() >= deadline
            {
                return Some(count("returns"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a line of type `kind` until `deadline`, keeping the last `progress` line.
    async fn wait_for(
        &mut self,
        kind: &str,
        deadline: tokio::time::Instant,
        last_progress: &mut Json,
    ) -> Option<Json> {
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    if line["type"] == kind {
                        return Some(line);
                    }
                    if line["type"] == "progress" {
                        *last_progress = line;
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        let _ = self.send("quit");
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One master, one count: the figures of every phase, as JSON.
///
/// The run's directory is handed to `spent` instead of being deleted: on ext4 without a
/// journal, deleting tens of thousands of files makes every file creation of the next few
/// minutes scan the recently freed inodes (`recently_deleted`), which would tax the next
/// master's key and session writes with the previous run's clean-up. The caller deletes
/// them when every run is over.
pub async fn run_one(
    opts: &BenchOptions,
    kind: MasterKind,
    n: usize,
    spent: &mut Vec<TempRoot>,
) -> Result<Json, Error> {
    let root = TempRoot::with_master_extra(&opts.master_yaml);
    let master = match kind {
        MasterKind::Halite => start_halite_master(&root),
        MasterKind::Stock => start_stock_master(&root),
    };
    let result = measure(opts, kind, n, &root, &master).await;
    drop(master);
    spent.push(root);
    result
}

fn wait_ready(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Result<(), Error> {
    if halite_testkit::wait_until(timeout, &mut cond) {
        Ok(())
    } else {
        Err(Error::Bench(format!("{what} not ready after {timeout:?}")))
    }
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_ok()
}

async fn measure(
    opts: &BenchOptions,
    kind: MasterKind,
    n: usize,
    root: &TempRoot,
    master: &Proc,
) -> Result<Json, Error> {
    let start_timeout = Duration::from_secs(180);
    let (ret_port, pub_port) = (root.ret_port(), root.publish_port());
    wait_ready("the request port", start_timeout, || port_open(ret_port))?;
    wait_ready("the publish port", start_timeout, || port_open(pub_port))?;
    let cfg = MasterConfig::load(root.master_config_dir())
        .map_err(|e| Error::Bench(format!("master config: {e}")))?;
    let key_file = cfg.cachedir.join(format!(".{}_key", cfg.user));
    let bus = BusSockets::master(&cfg.sock_dir).pub_addr;
    let bus_path = cfg.sock_dir.join(halite_bus::MASTER_PUB);
    wait_ready("the root key and the event bus", start_timeout, || {
        key_file.is_file() && bus_path.exists()
    })?;
    let pid = master.pid();
    // A stock master keeps loading modules in its workers after binding its ports: wait
    // until the tree is idle (under 5% of a core for a second) so the auth storm does not
    // pay for start-up.
    let settle_end = Instant::now() + Duration::from_secs(60);
    loop {
        let before = cpu_secs(&process_tree(pid));
        tokio::time::sleep(Duration::from_secs(1)).await;
        if cpu_secs(&process_tree(pid)) - before < 0.05 || Instant::now() > settle_end {
            break;
        }
    }
    let sampler = Sampler::start(pid);
    let (idle_rss, idle_pss) = sampler.take_peak(pid);
    let mut out = json!({
        "master": kind.name(),
        "minions": n,
        "master_processes": process_tree(pid).len(),
        "idle_rss_mib": idle_rss,
        "idle_pss_mib": idle_pss,
        "budget_secs": opts.budget.as_secs_f64(),
    });

    // 1. Auth storm.
    let cpu0 = cpu_secs(&process_tree(pid));
    let mut swarm = Swarm::spawn(opts, n, ret_port, &root.procs_dir().join("swarm.stderr"))?;
    let mut progress = Json::Null;
    let keys_deadline = tokio::time::Instant::now() + Duration::from_secs(3600);
    let keys = swarm.wait_for("keys", keys_deadline, &mut progress).await;
    if keys.is_none() {
        return Err(Error::Bench(format!(
            "the swarm did not load its keys (see {})",
            root.procs_dir().join("swarm.stderr").display()
        )));
    }
    let swarm_cpu0 = cpu_secs(&[swarm.pid()]);
    let cpu_after_keys = cpu_secs(&process_tree(pid));
    let deadline = tokio::time::Instant::now() + opts.budget;
    let ready = swarm.wait_for("ready", deadline, &mut progress).await;
    let cpu1 = cpu_secs(&process_tree(pid));
    let swarm_cpu1 = cpu_secs(&[swarm.pid()]);
    let peak = sampler.take_peak(pid);
    out["auth"] = json!({
        "secs": ready.as_ref().map(|r| r["secs"].clone()),
        "did_not_finish": ready.is_none(),
        "progress_at_end": progress,
        "master_cpu_secs": cpu1 - cpu_after_keys,
        "master_cpu_secs_incl_swarm_start": cpu1 - cpu0,
        "swarm_cpu_secs": swarm_cpu1 - swarm_cpu0,
        "peak_rss_mib": peak.0,
        "peak_pss_mib": peak.1,
    });
    eprintln!("[{} N={n}] auth: {}", kind.name(), out["auth"]);
    if ready.is_none() {
        return Ok(out);
    }

    // 2. Publish → all returns.
    let client = LocalClient::new(&cfg);
    let mut listener = client
        .listen_jobs()
        .await
        .map_err(|e| Error::Bench(format!("master bus: {e}")))?;
    let returns0 = swarm
        .returns_done(0, tokio::time::Instant::now() + Duration::from_secs(10))
        .await
        .unwrap_or(0);
    let cpu0 = cpu_secs(&process_tree(pid));
    let swarm_cpu0 = cpu_secs(&[swarm.pid()]);
    let phase_start = Instant::now();
    let phase_deadline = tokio::time::Instant::now() + opts.budget;
    let mut samples = Vec::new();
    let mut incomplete: Option<Json> = None;
    for i in 0..opts.publishes {
        let req = PublishRequest {
            tgt: s("*"),
            tgt_type: "glob".into(),
            fun: s("test.ping"),
            arg: Value::Array(Vec::new()),
            ret: String::new(),
            kwargs: Vec::new(),
        };
        let t = Instant::now();
        let publish = tokio::time::timeout_at(phase_deadline, client.publish(&req)).await;
        let reply = match publish {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(Error::Bench(format!("publish {i}: {e}"))),
            Err(_) => {
                incomplete = Some(json!({"publish": i, "returns": 0, "stage": "publish request"}));
                break;
            }
        };
        let Some(jid) = reply.jid else {
            return Err(Error::Bench(format!(
                "publish {i}: no jid (the master expected {:?})",
                reply.minions.len()
            )));
        };
        if reply.minions.len() != n {
            eprintln!(
                "[{} N={n}] publish {i}: the master expects {} minions",
                kind.name(),
                reply.minions.len()
            );
        }
        let prefix = format!("salt/job/{jid}/ret/");
        let mut seen = HashSet::with_capacity(n);
        while seen.len() < n {
            match tokio::time::timeout_at(phase_deadline, listener.recv()).await {
                Ok(Ok(Some(ev))) => {
                    if let Some(id) = ev.tag().strip_prefix(&prefix) {
                        seen.insert(id.to_owned());
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    return Err(Error::Bench("the master bus closed".into()))
                }
                Err(_) => break,
            }
        }
        if seen.len() < n {
            incomplete = Some(json!({"publish": i, "returns": seen.len(), "stage": "returns"}));
            break;
        }
        samples.push(t.elapsed().as_secs_f64());
    }
    // The master's CPU counts until the swarm has every return of the phase acknowledged
    // (a master answers a return once it is in its job cache): otherwise the writes still
    // queued would be billed to the next phase.
    let ack_start = Instant::now();
    let acked = swarm
        .returns_done(returns0 + (n * samples.len()) as u64, phase_deadline)
        .await
        .map(|r| r.saturating_sub(returns0));
    let ack_wait = ack_start.elapsed().as_secs_f64();
    let cpu1 = cpu_secs(&process_tree(pid));
    let swarm_cpu1 = cpu_secs(&[swarm.pid()]);
    let phase_secs = phase_start.elapsed().as_secs_f64();
    let peak = sampler.take_peak(pid);
    // The swarm's own footprint, once every minion has answered jobs.
    let swarm_rss_kib = rss_kib(&[swarm.pid()]) as f64;
    out["publish"] = json!({
        "completed": samples.len(),
        "requested": opts.publishes,
        "did_not_finish": incomplete,
        "p50_secs": percentile(&samples, 0.50),
        "p99_secs": percentile(&samples, 0.99),
        "max_secs": percentile(&samples, 1.0),
        "samples_secs": samples,
        "phase_secs": phase_secs,
        "master_cpu_secs": cpu1 - cpu0,
        "master_cpu_secs_per_publish": (cpu1 - cpu0) / (samples.len().max(1) as f64),
        "swarm_rss_mib": swarm_rss_kib / 1024.0,
        "swarm_rss_kib_per_minion": swarm_rss_kib / n.max(1) as f64,
        "returns_acknowledged": acked,
        "ack_wait_secs": ack_wait,
        "swarm_cpu_secs": swarm_cpu1 - swarm_cpu0,
        "peak_rss_mib": peak.0,
        "peak_pss_mib": peak.1,
    });
    eprintln!(
        "[{} N={n}] publish: p50 {:?} p99 {:?} ({} of {})",
        kind.name(),
        out["publish"]["p50_secs"],
        out["publish"]["p99_secs"],
        out["publish"]["completed"],
        opts.publishes
    );
    drop(listener);

    // 3. Sustained events.
    let mut events = BusClient::new(cfg.max_event_size as usize)
        .listen(&bus, EVENT_TAG_PREFIX)
        .await
        .map_err(|e| Error::Bench(format!("master bus: {e}")))?;
    let cpu0 = cpu_secs(&process_tree(pid));
    let swarm_cpu0 = cpu_secs(&[swarm.pid()]);
    let per_minion = opts.events_per_sec / n.max(1) as f64;
    swarm.send(&format!("events {per_minion}"))?;
    let window = Duration::from_secs_f64(opts.event_secs);
    let start = Instant::now();
    let end = tokio::time::Instant::now() + window;
    let mut latencies = Vec::new();
    let mut in_window = 0u64;
    let mut stopped = false;
    let drain_end = end + Duration::from_secs(10);
    loop {
        let now = tokio::time::Instant::now();
        if !stopped && now >= end {
            swarm.send("events 0")?;
            stopped = true;
        }
        let until = if stopped { drain_end } else { end };
        match tokio::time::timeout_at(until, events.recv()).await {
            // A gap event says events were lost; it is not one of the swarm's.
            Ok(Ok(Some(ev))) if ev.tag() == halite_bus::GAP_TAG => {}
            Ok(Ok(Some(ev))) => {
                let arrived = unix_now();
                if !stopped {
                    in_window += 1;
                }
                if let Some(t) = event_due(ev.data()) {
                    latencies.push(arrived - t);
                }
            }
            Ok(Ok(None)) | Ok(Err(_)) => return Err(Error::Bench("the master bus closed".into())),
            Err(_) if stopped => break,
            Err(_) => {}
        }
    }
    let cpu1 = cpu_secs(&process_tree(pid));
    let swarm_cpu1 = cpu_secs(&[swarm.pid()]);
    let elapsed = start.elapsed().as_secs_f64();
    swarm.send("stats")?;
    let mut last = Json::Null;
    let stats = swarm
        .wait_for(
            "stats",
            tokio::time::Instant::now() + Duration::from_secs(10),
            &mut last,
        )
        .await;
    let peak = sampler.take_peak(pid);
    out["events"] = json!({
        "offered_per_sec": opts.events_per_sec,
        "per_minion_rate": per_minion,
        "window_secs": opts.event_secs,
        "delivered_in_window": in_window,
        "delivered_per_sec": in_window as f64 / opts.event_secs,
        "delivered_total": latencies.len(),
        "p50_latency_secs": percentile(&latencies, 0.50),
        "p99_latency_secs": percentile(&latencies, 0.99),
        "max_latency_secs": percentile(&latencies, 1.0),
        "phase_secs": elapsed,
        "master_cpu_secs": cpu1 - cpu0,
        "swarm_cpu_secs": swarm_cpu1 - swarm_cpu0,
        "peak_rss_mib": peak.0,
        "peak_pss_mib": peak.1,
        "swarm_stats": stats,
    });
    eprintln!("[{} N={n}] events: {}", kind.name(), out["events"]);
    Ok(out)
}

/// When the event was due: `data.t` (Halite and Salt put the minion's load, holding the
/// event's `data`, in the bus event) or `t`.
fn event_due(data: &Value) -> Option<f64> {
    let t = value::get(data, "data")
        .and_then(|d| value::get(d, "t"))
        .or_else(|| value::get(data, "t"))?;
    match t {
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        Value::Integer(i) => i.as_f64(),
        _ => None,
    }
}

/// Formats seconds for the table, or "DNF in T".
fn fmt_secs(v: &Json) -> String {
    match v.as_f64() {
        Some(x) if x < 1.0 => format!("{:.1} ms", x * 1000.0),
        Some(x) => format!("{x:.2} s"),
        None => "–".into(),
    }
}

/// The largest `key` over the three phases of a result.
fn max_peak(r: &Json, key: &str) -> Json {
    let peak = ["auth", "publish", "events"]
        .iter()
        .filter_map(|p| r[*p][key].as_f64())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    json!(peak)
}

/// How a cell's value came out.
enum Cell {
    /// A figure.
    Value(Json),
    /// The phase ran out of budget; `partial` is the figure over what did finish, if any,
    /// with how much finished.
    DidNotFinish { partial: Option<(Json, String)> },
}

fn publish_cell(r: &Json, key: &str) -> Cell {
    let p = &r["publish"];
    if p["did_not_finish"] == Json::Null {
        return Cell::Value(p[key].clone());
    }
    let done = p["completed"].as_u64().unwrap_or(0);
    let partial = (done > 0).then(|| {
        (
            p[key].clone(),
            format!("{done} of {}", p["requested"].as_u64().unwrap_or(0)),
        )
    });
    Cell::DidNotFinish { partial }
}

/// The Markdown table of a set of results: one row per measure and count, Halite, stock,
/// and the ratio in Halite's favour (stock ÷ Halite for times, CPU and memory; Halite ÷
/// stock for rates). When stock ran out of budget, the ratio uses what it finished and is
/// marked `≥`.
pub fn table(results: &[Json]) -> String {
    let find = |kind: &str, n: u64| {
        results
            .iter()
            .find(|r| r["master"] == kind && r["minions"].as_u64() == Some(n))
    };
    let mut counts: Vec<u64> = results
        .iter()
        .filter_map(|r| r["minions"].as_u64())
        .collect();
    counts.sort_unstable();
    counts.dedup();
    type Getter = fn(&Json) -> Cell;
    let rows: Vec<(&str, Getter, bool)> = vec![
        (
            "auth storm, wall",
            |r| {
                if r["auth"]["did_not_finish"] == true {
                    Cell::DidNotFinish { partial: None }
                } else {
                    Cell::Value(r["auth"]["secs"].clone())
                }
            },
            true,
        ),
        (
            "auth storm, master CPU",
            |r| Cell::Value(r["auth"]["master_cpu_secs"].clone()),
            true,
        ),
        (
            "publish → all returns p50",
            |r| publish_cell(r, "p50_secs"),
            true,
        ),
        (
            "publish → all returns p99",
            |r| publish_cell(r, "p99_secs"),
            true,
        ),
        (
            "master CPU per publish",
            |r| Cell::Value(r["publish"]["master_cpu_secs_per_publish"].clone()),
            true,
        ),
        (
            "events delivered /s",
            |r| Cell::Value(r["events"]["delivered_per_sec"].clone()),
            false,
        ),
        (
            "event latency p99",
            |r| Cell::Value(r["events"]["p99_latency_secs"].clone()),
            true,
        ),
        (
            "master peak RSS (MiB)",
            |r| Cell::Value(max_peak(r, "peak_rss_mib")),
            true,
        ),
        (
            "master peak PSS (MiB)",
            |r| Cell::Value(max_peak(r, "peak_pss_mib")),
            true,
        ),
    ];
    let mut md = String::from(
        "| N | measure | Halite | stock Salt | ratio for Halite |\n|---|---|---|---|---|\n",
    );
    for n in counts {
        for (name, get, lower_is_better) in &rows {
            let fmt = |v: &Json| -> String {
                if name.contains("SS (MiB)") || name.contains("/s") {
                    v.as_f64().map_or("–".into(), |x| format!("{x:.0}"))
                } else if name.contains("CPU") {
                    v.as_f64().map_or("–".into(), |x| format!("{x:.3} s"))
                } else {
                    fmt_secs(v)
                }
            };
            // (text, value, value is a lower bound of the real figure)
            let cell = |r: Option<&Json>| -> (String, Option<f64>, bool) {
                let Some(r) = r else {
                    return ("not run".into(), None, false);
                };
                let budget = r["budget_secs"].as_f64().unwrap_or(0.0);
                match get(r) {
                    Cell::Value(v) => (fmt(&v), v.as_f64(), false),
                    Cell::DidNotFinish { partial: None } => {
                        (format!("did not finish in {budget:.0} s"), None, false)
                    }
                    Cell::DidNotFinish {
                        partial: Some((v, done)),
                    } => (
                        format!(
                            "{} ({done} done, then out of the {budget:.0} s budget)",
                            fmt(&v)
                        ),
                        v.as_f64(),
                        true,
                    ),
                }
            };
            let (h, hv, _) = cell(find("halite", n));
            let (st, sv, stock_partial) = cell(find("stock", n));
            let ratio = match (hv, sv) {
                (Some(h), Some(s)) if h > 0.0 && s > 0.0 => {
                    let r = if *lower_is_better { s / h } else { h / s };
                    let ge = if stock_partial { "≥ " } else { "" };
                    format!("{ge}{r:.1}×")
                }
                _ => "–".into(),
            };
            md.push_str(&format!("| {n} | {name} | {h} | {st} | {ratio} |\n"));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::map;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn this_process_has_rss_and_cpu() {
        let me = std::process::id();
        assert!(process_tree(me).contains(&me));
        assert!(rss_kib(&[me]) > 0);
        assert!(cpu_secs(&[me]) >= 0.0);
        assert_eq!(rss_kib(&[u32::MAX]), 0);
    }

    #[test]
    fn event_due_reads_the_minion_load_or_bare_data() {
        let salt = map([("id", s("m")), ("data", map([("t", Value::F64(1.5))]))]);
        assert_eq!(event_due(&salt), Some(1.5));
        assert_eq!(event_due(&map([("t", Value::from(2))])), Some(2.0));
        assert_eq!(event_due(&map([("x", s("y"))])), None);
    }

    #[test]
    fn table_has_ratios_and_did_not_finish_cells() {
        let halite = json!({"master": "halite", "minions": 100, "budget_secs": 60.0,
            "auth": {"secs": 0.5, "did_not_finish": false, "master_cpu_secs": 0.2, "peak_rss_mib": 20.0, "peak_pss_mib": 19.0},
            "publish": {"p50_secs": 0.01, "p99_secs": 0.02, "did_not_finish": null, "completed": 20, "requested": 20,
                        "master_cpu_secs_per_publish": 0.001, "peak_rss_mib": 22.0, "peak_pss_mib": 21.0},
            "events": {"delivered_per_sec": 100.0, "p99_latency_secs": 0.005, "peak_rss_mib": 21.0}});
        let stock = json!({"master": "stock", "minions": 100, "budget_secs": 60.0,
            "auth": {"secs": 5.0, "did_not_finish": false, "master_cpu_secs": 30.0, "peak_rss_mib": 900.0},
            "publish": {"p50_secs": 2.0, "p99_secs": 3.0, "did_not_finish": {"publish": 3}, "completed": 3, "requested": 20},
            "events": {"delivered_per_sec": 50.0}});
        let slow = json!({"master": "stock", "minions": 200, "budget_secs": 60.0,
            "auth": {"secs": null, "did_not_finish": true}});
        let md = table(&[halite, stock, slow]);
        for row in [
            "| 100 | auth storm, wall | 500.0 ms | 5.00 s | 10.0× |",
            "| 100 | auth storm, master CPU | 0.200 s | 30.000 s | 150.0× |",
            "| 100 | publish → all returns p50 | 10.0 ms | 2.00 s (3 of 20 done, then out of the 60 s budget) | ≥ 200.0× |",
            "| 100 | events delivered /s | 100 | 50 | 2.0× |",
            "| 100 | master peak RSS (MiB) | 22 | 900 | 40.9× |",
            "| 100 | master peak PSS (MiB) | 21 | – | – |",
            "| 200 | auth storm, wall | not run | did not finish in 60 s | – |",
        ] {
            assert!(md.contains(row), "missing {row} in\n{md}");
        }
    }
}
