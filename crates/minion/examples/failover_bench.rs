//! Failover benchmark for `bench/failover.sh` (issue 12): how long a minion with
//! `master_type: failover` takes to answer through the other master after its master is
//! killed, frozen or cut off the network, over many faults, for a Halite minion and a
//! stock `salt-minion`, between two Halite masters and between two stock `salt-master`s,
//! with the masters on two IPs or on one IP with two ports; and whether the `fire_master`
//! events fired on the minion during the outage reach the new master, once each.
//!
//! ```text
//! failover_bench run [--out FILE] [--logs DIR] [--faults 20] [--stock-faults N]
//!                    [--event-faults 5] [--events 10] [--give-up-after 3] [--cap 60]
//!                    [--alive 2] [--ping-every-ms 50] [--minions halite,stock]
//!                    [--masters halite,stock] [--topologies two-ips,one-ip]
//!                    [--kinds kill,freeze,cut] [--bin-dir DIR]
//! failover_bench table FILE
//! ```
//!
//! What `run` does, for each combination of minion program, master program and topology
//! (a "setup", all in a fresh [`Lab`] of network namespaces; needs root):
//! - two IPs: master A on host `m1`, B on host `m2`, both on Salt's default ports; one IP:
//!   A and B both on host `m1`, A on 4505/4506 and B on 4515/4516. The minion runs on host
//!   `node` with `master: [A, B]`, `master_type: failover`, `master_alive_interval: <alive>`,
//!   `retry_dns: 0`, and Salt's defaults for everything else (the test kit's minion config
//!   shortens `acceptance_wait_time`, `random_reauth_delay` and the `recon_*` delays for
//!   tests; they are set back to Salt's values here). Both masters serve with one master key
//!   pair (B gets A's `master.pem` before it first starts, as Salt's multi-master docs say)
//!   and have the minion's key accepted; `auto_accept`, log files at `info`, Salt's
//!   defaults otherwise.
//! - then, for each fault kind in turn, `--faults` timed faults (`--stock-faults` when the
//!   minion or the masters are stock): the fault hits the master the minion is on and the
//!   time is measured to the other one. One fault: a tap subscribes to the other master's
//!   event bus and a pinger on its host publishes `test.ping` to the minion every
//!   `--ping-every-ms` through its request port (a clear `publish` with root's key, what
//!   `salt` sends); the clock starts and the fault is applied; the failover time is the
//!   arrival on the other master's bus of the minion's first `salt/job/<jid>/ret/<id>`, or
//!   "not detected" after `--cap` seconds. The fault is then undone (kill: the master is
//!   started again, and waited for until its processes are idle, as a master that has been
//!   up for a while is: a stock master goes on starting workers and loading modules for
//!   seconds after its port opens, and a minion failing over to it meanwhile waits ~0.7 s
//!   longer; freeze: SIGCONT; cut: the link back) and the minion is found answering a
//!   `test.ping` again; the next fault hits whichever master it answers through. A minion
//!   that answers through neither master 30 s after the fault was undone is restarted
//!   (the fault's line says so).
//! - then, when the minion failed over at least once, `--event-faults` more faults of the
//!   kind with events in flight: right after the fault, `--events` `fire_master` events
//!   (single form, as `event.fire_master` in a minion job fires them, tag
//!   `bench/failover/<setup>/<fault>/<n>`, data `{seq}`) are written to the minion's bus,
//!   and the events that reached the other master by the time the minion answers again
//!   are counted (once, repeated, missing). These faults are timed apart: a stock minion
//!   with events on the way to a dead master fails over up to 5 s later (it waits for its
//!   request channel to close), which is not the failover time of an idle minion.
//! - Faults: kill = SIGKILL to the master's whole process tree; freeze = SIGSTOP to it (a
//!   hung master: its sockets stay open); cut = on two IPs the master host's link goes down
//!   ([`Lab::cut_link`]); on one IP, where both masters share the host and its link, every
//!   packet to or from the master's two ports is dropped silently on the host's interface
//!   (a classic-BPF `tc` filter on `clsact`, both directions), which is the same fault for
//!   that master alone (checked when the setup starts: the minion's host cannot reach the
//!   cut ports and still reaches the others).
//! - A fault kind stops after `--give-up-after` faults in a row were not detected (a minion
//!   that does not notice that fault at all), so such rows have that many faults.
//!
//! Every fault is one JSON line in `--out`; `table` turns the file into the markdown
//! tables of BENCHMARKS.md (p50 and p99 by nearest rank: with 20 faults the p99 is the
//! slowest; a fault not detected counts as slower than any detected one).
//!
//! What it does not do: measure failback, hot-hot, or signed master keys (the failover
//! tests in `crates/minion/tests/failover.rs` cover those); time anything below the ping
//! interval (a figure includes the wait for the next `test.ping`, on average half an
//! interval); count events that reach the old master once it is back; go on with a setup
//! whose minion answers through neither master even after a restart (the setup's
//! remaining faults are skipped and the line says why).

use halite_bus::{BusAddr, BusClient, BusSockets};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::{
    current_user, file_len, stock_bin, wait_until, Host, Lab, Proc, TempRoot, STOCK_STOP_GRACE,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a master may take to start, and a minion to first answer.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the events of a detected failover may take to arrive after it.
const EVENT_WAIT: Duration = Duration::from_secs(10);
/// How long a minion may take to answer again once a fault is undone, before it is
/// restarted.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A master is idle below this share of one core...
const IDLE_SHARE: f64 = 0.05;
/// ...over two samples this long in a row...
const IDLE_SAMPLE: Duration = Duration::from_millis(250);
/// ...waited for at most this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;
/// The one-IP topology's second master's ports (the first has Salt's defaults).
const B_PORTS_ONE_IP: (u16, u16) = (4515, 4516);
/// Salt's default ports.
const DEFAULT_PORTS: (u16, u16) = (4505, 4506);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Halite,
    Stock,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Halite => "halite",
            Kind::Stock => "stock",
        }
    }

    fn parse(text: &str) -> Result<Kind, String> {
        match text {
            "halite" => Ok(Kind::Halite),
            "stock" => Ok(Kind::Stock),
            other => Err(format!("unknown program kind {other:?} (halite, stock)")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Topology {
    TwoIps,
    OneIp,
}

impl Topology {
    fn name(self) -> &'static str {
        match self {
            Topology::TwoIps => "two-ips",
            Topology::OneIp => "one-ip",
        }
    }

    fn parse(text: &str) -> Result<Topology, String> {
        match text {
            "two-ips" => Ok(Topology::TwoIps),
            "one-ip" => Ok(Topology::OneIp),
            other => Err(format!("unknown topology {other:?} (two-ips, one-ip)")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Freeze,
    Cut,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Freeze => "freeze",
            Fault::Cut => "cut",
        }
    }

    fn parse(text: &str) -> Result<Fault, String> {
        match text {
            "kill" => Ok(Fault::Kill),
            "freeze" => Ok(Fault::Freeze),
            "cut" => Ok(Fault::Cut),
            other => Err(format!("unknown fault {other:?} (kill, freeze, cut)")),
        }
    }
}

struct RunArgs {
    out: PathBuf,
    logs: Option<PathBuf>,
    faults: usize,
    stock_faults: Option<usize>,
    give_up_after: usize,
    cap: Duration,
    events: usize,
    event_faults: usize,
    alive: u64,
    ping_every: Duration,
    minions: Vec<Kind>,
    masters: Vec<Kind>,
    topologies: Vec<Topology>,
    kinds: Vec<Fault>,
    bin_dir: Option<PathBuf>,
}

fn list<T>(text: &str, parse: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',').map(parse).collect()
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag}: expected a non-negative integer, got {text:?}"))
}

fn parse_run(args: &[String]) -> Result<RunArgs, String> {
    let mut run = RunArgs {
        out: PathBuf::from("failover.jsonl"),
        logs: None,
        faults: 20,
        stock_faults: None,
        give_up_after: 3,
        cap: Duration::from_secs(60),
        events: 10,
        event_faults: 5,
        alive: 2,
        ping_every: Duration::from_millis(50),
        minions: vec![Kind::Halite, Kind::Stock],
        masters: vec![Kind::Halite, Kind::Stock],
        topologies: vec![Topology::TwoIps, Topology::OneIp],
        kinds: vec![Fault::Kill, Fault::Freeze, Fault::Cut],
        bin_dir: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--out" => run.out = PathBuf::from(value),
            "--logs" => run.logs = Some(PathBuf::from(value)),
            "--faults" => run.faults = number(flag, value)?,
            "--stock-faults" => run.stock_faults = Some(number(flag, value)?),
            "--give-up-after" => run.give_up_after = number(flag, value)?,
            "--cap" => run.cap = Duration::from_secs(number(flag, value)?),
            "--events" => run.events = number(flag, value)?,
            "--event-faults" => run.event_faults = number(flag, value)?,
            "--alive" => run.alive = number(flag, value)?,
            "--ping-every-ms" => run.ping_every = Duration::from_millis(number(flag, value)?),
            "--minions" => run.minions = list(value, Kind::parse)?,
            "--masters" => run.masters = list(value, Kind::parse)?,
            "--topologies" => run.topologies = list(value, Topology::parse)?,
            "--kinds" => run.kinds = list(value, Fault::parse)?,
            "--bin-dir" => run.bin_dir = Some(PathBuf::from(value)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if run.give_up_after == 0 || run.alive == 0 || run.ping_every.is_zero() || run.cap.is_zero() {
        return Err(
            "--give-up-after, --alive, --ping-every-ms and --cap must be positive".to_owned(),
        );
    }
    Ok(run)
}

/// The programs under test.
struct Bins {
    halite_master: PathBuf,
    halite_minion: PathBuf,
    salt_master: PathBuf,
    salt_minion: PathBuf,
}

impl Bins {
    /// Halite's binaries from `dir`, or from the profile directory this example was built
    /// into (`target/<profile>/examples/<it>` → `target/<profile>/`); stock Salt's from the
    /// venv (`HALITE_SALT_VENV`).
    fn find(dir: Option<&Path>) -> Result<Bins, String> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find this program: {e}"))?
                .parent()
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .ok_or("this program is not in target/<profile>/examples")?,
        };
        let halite = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!(
                    "{} is missing: build it (cargo build -p {name}) or pass --bin-dir",
                    path.display()
                ))
            }
        };
        Ok(Bins {
            halite_master: halite("halite-master")?,
            halite_minion: halite("halite-minion")?,
            salt_master: stock_bin("salt-master"),
            salt_minion: stock_bin("salt-minion"),
        })
    }
}

// ------------------------------------------------------------------------------ masters

/// A master on a lab host, in a root of its own.
struct Master {
    /// The running master (declared before `root`: it stops before the root goes).
    proc: Option<Proc>,
    root: TempRoot,
    kind: Kind,
    host: Host,
    name: &'static str,
    publish_port: u16,
    ret_port: u16,
}

impl Master {
    fn new(kind: Kind, host: &Host, name: &'static str, ports: (u16, u16)) -> Master {
        let root = TempRoot::for_lab_host(
            host.ip(),
            &format!(
                "publish_port: {}\nret_port: {}\nauto_accept: true\nlog_level_logfile: info\n",
                ports.0, ports.1
            ),
        );
        Master {
            proc: None,
            root,
            kind,
            host: host.clone(),
            name,
            publish_port: ports.0,
            ret_port: ports.1,
        }
    }

    fn ret_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host.ip(), self.ret_port))
    }

    fn sock_dir(&self) -> PathBuf {
        self.root.master_root().join("sock")
    }

    fn key_file(&self) -> PathBuf {
        self.root
            .master_root()
            .join("cache")
            .join(format!(".{}_key", current_user()))
    }

    fn pki(&self) -> PathBuf {
        self.root.master_pki_dir()
    }

    /// Starts the master and waits until its request port takes connections, its bus
    /// socket exists and root's key file was written by this run.
    fn start(&mut self, bins: &Bins) -> Result<(), String> {
        let program = match self.kind {
            Kind::Halite => &bins.halite_master,
            Kind::Stock => &bins.salt_master,
        };
        let key = self.key_file();
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(self.sock_dir().join("master_event_pub.ipc"));
        let mut cmd = Command::new(program);
        cmd.arg("-c").arg(self.root.master_config_dir());
        let name = format!("{}-master-{}", self.kind.name(), self.name);
        let proc = self.host.spawn(cmd, &self.root.procs_dir(), &name);
        self.proc = Some(match self.kind {
            Kind::Halite => proc,
            Kind::Stock => proc.with_stop_grace(STOCK_STOP_GRACE),
        });
        let addr = self.ret_addr();
        let bus = self.sock_dir().join("master_event_pub.ipc");
        let up = wait_until(START_TIMEOUT, || {
            bus.exists() && key.exists() && self.host.connects(addr, Duration::from_secs(1))
        });
        if up {
            Ok(())
        } else {
            Err(format!("master {} ({addr}) never came up", self.name))
        }
    }

    /// Accepts minion `id` whose key pair is in `minion_pki`.
    fn accept(&self, id: &str, minion_pki: &Path) -> Result<(), String> {
        let public = std::fs::read(minion_pki.join("minion.pub"))
            .map_err(|e| format!("minion {id} has no key yet: {e}"))?;
        let dir = self.pki().join("minions");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join(id), public).map_err(|e| e.to_string())
    }

    fn publisher(&self) -> Publisher {
        Publisher {
            endpoint: format!("tcp://{}", self.ret_addr()),
            key_file: self.key_file(),
        }
    }
}

/// Copies `a`'s master key pair into `b`'s pki dir (`b` not started yet).
fn share_master_key(a: &Master, b: &Master) -> Result<(), String> {
    std::fs::create_dir_all(b.pki()).map_err(|e| e.to_string())?;
    for f in ["master.pem", "master.pub"] {
        std::fs::copy(a.pki().join(f), b.pki().join(f))
            .map_err(|e| format!("cannot copy {f} from master A to B: {e}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------- publisher

/// Where a master takes requests, and the key to publish with.
#[derive(Clone)]
struct Publisher {
    endpoint: String,
    key_file: PathBuf,
}

impl Publisher {
    /// Publishes `test.ping` to `tgt` as `salt` does (a clear `publish` with the user's
    /// key, read each time: a restarted stock master writes a new one). Call it on a
    /// thread inside the master's host, with a context made there.
    fn ping(&self, ctx: &zmq::Context, tgt: &str) {
        let Ok(key) = std::fs::read_to_string(&self.key_file) else {
            return;
        };
        let load = map([
            ("cmd", s("publish")),
            ("tgt", s(tgt)),
            ("fun", s("test.ping")),
            ("arg", Value::Array(Vec::new())),
            ("key", s(key.trim_end())),
            ("tgt_type", s("glob")),
            ("ret", s("")),
            ("jid", s("")),
            ("user", s(current_user())),
        ]);
        let body = value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]));
        let Ok(sock) = ctx.socket(zmq::REQ) else {
            return;
        };
        if sock.set_linger(0).is_err() || sock.connect(&self.endpoint).is_err() {
            return;
        }
        if sock.send(body, 0).is_ok() && sock.poll(zmq::POLLIN, 1000).unwrap_or(0) > 0 {
            let _ = sock.recv_bytes(0);
        }
    }
}

/// Publishes `test.ping` to a minion every interval from a master's host until dropped.
struct Pinger {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pinger {
    fn start(host: &Host, publisher: Publisher, tgt: &str, every: Duration) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let (st, tgt, host) = (stop.clone(), tgt.to_owned(), host.clone());
        let thread = std::thread::spawn(move || {
            host.within(|| {
                // Made in the host's namespace, so its I/O thread is there too.
                let ctx = zmq::Context::new();
                while !st.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    publisher.ping(&ctx, &tgt);
                    std::thread::sleep(every.saturating_sub(started.elapsed()));
                }
            })
        });
        Pinger {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------- tap

/// The tag the tap fires to learn that it is subscribed.
const PROBE: &str = "bench/failover/tap-probe";

type Seen = Arc<Mutex<Vec<(Instant, String, Value)>>>;

/// A subscriber on a master's event bus recording every event with its arrival time.
struct Tap {
    events: Seen,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tap {
    /// Subscribes to the master bus in `sock_dir` and returns once an event fired there
    /// came back, so nothing fired afterwards is missed.
    fn start(sock_dir: &Path) -> Result<Tap, String> {
        let sockets = BusSockets::master(sock_dir);
        let events: Seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (ev, st) = (events.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(tap(sockets.pub_addr, sockets.pull_addr, ev, st, ready_tx));
        });
        let tap = Tap {
            events,
            stop,
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => Ok(tap),
            Err(_) => Err(format!("no bus to listen on in {}", sock_dir.display())),
        }
    }

    /// Arrival of the first event after `since` for which `matches` holds.
    fn first(&self, since: Instant, matches: impl Fn(&str, &Value) -> bool) -> Option<Instant> {
        let events = self.events.lock().ok()?;
        events
            .iter()
            .find(|(at, tag, data)| *at >= since && matches(tag, data))
            .map(|(at, _, _)| *at)
    }

    /// `seq` of every event tagged `tag` so far.
    fn seqs(&self, tag: &str) -> Vec<i64> {
        let Ok(events) = self.events.lock() else {
            return Vec::new();
        };
        events
            .iter()
            .filter(|(_, t, _)| t == tag)
            .map(|(_, _, d)| {
                value::get(d, "data")
                    .and_then(|inner| value::get_i64(inner, "seq"))
                    .unwrap_or(-1)
            })
            .collect()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn tap(
    pub_addr: BusAddr,
    pull_addr: BusAddr,
    events: Seen,
    stop: CancellationToken,
    ready: std::sync::mpsc::Sender<()>,
) {
    let client = BusClient::new(1 << 20);
    let mut listener = loop {
        match client.listen(&pub_addr, "").await {
            Ok(l) => break l,
            Err(_) => tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            },
        }
    };
    let mut ready = Some(ready);
    let mut probe = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = probe.tick(), if ready.is_some() => {
                let _ = client.fire(&pull_addr, PROBE, map([("probe", s("x"))])).await;
            }
            got = listener.recv() => match got {
                Ok(Some(event)) if event.tag() == PROBE => {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                Ok(Some(event)) => {
                    let at = Instant::now();
                    let (tag, data) = event.into_parts();
                    if let Ok(mut e) = events.lock() {
                        e.push((at, tag, data));
                    }
                }
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// Whether `tag`/`data` is a return of minion `id`.
fn is_return_of(id: &str, tag: &str) -> bool {
    tag.starts_with("salt/job/") && tag.ends_with(&format!("/ret/{id}"))
}

/// Whether `tag`/`data` is the master accepting minion `id`'s sign-in.
fn is_accepted_auth(id: &str, tag: &str, data: &Value) -> bool {
    tag == "salt/auth"
        && value::get_str(data, "id") == Some(id)
        && value::get_str(data, "act") == Some("accept")
}

// -------------------------------------------------------------------------------- setup

/// The minion's bus: where the benchmark writes its `fire_master` events.
fn fire_events(sock_dir: &Path, id: &str, tag: &str, n: usize) -> Result<(), String> {
    let sockets = BusSockets::minion(sock_dir, "sha256", id).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = BusClient::new(1 << 20);
        for seq in 0..n {
            let data = map([
                ("data", map([("seq", Value::from(seq as u64))])),
                ("tag", s(tag)),
                ("events", Value::Nil),
                ("pretag", Value::Nil),
            ]);
            client
                .fire(&sockets.pull_addr, "fire_master", data)
                .await
                .map_err(|e| format!("cannot fire on the minion bus: {e}"))?;
        }
        Ok(())
    })
}

/// One setup: a lab, two masters, a minion.
struct Setup<'b> {
    /// The minion (declared first: it stops before the masters and roots go).
    minion: Option<Proc>,
    minion_kind: Kind,
    masters: [Master; 2],
    minions: TempRoot,
    id: String,
    minion_host: Host,
    topology: Topology,
    bins: &'b Bins,
    /// Declared last: the namespaces go after every process in them.
    lab: Lab,
}

impl<'b> Setup<'b> {
    fn new(
        bins: &'b Bins,
        minion_kind: Kind,
        master_kind: Kind,
        topology: Topology,
        alive: u64,
    ) -> Result<Setup<'b>, String> {
        let mut lab = Lab::new().map_err(|e| e.to_string())?;
        let m1 = lab.add_host("m1");
        let (host_b, ports_b) = match topology {
            Topology::TwoIps => (lab.add_host("m2"), DEFAULT_PORTS),
            Topology::OneIp => (m1.clone(), B_PORTS_ONE_IP),
        };
        let node = lab.add_host("node");
        let mut a = Master::new(master_kind, &m1, "A", DEFAULT_PORTS);
        a.start(bins)?;
        let mut b = Master::new(master_kind, &host_b, "B", ports_b);
        share_master_key(&a, &b)?;
        b.start(bins)?;
        let id = format!(
            "fo-{}-{}-{}",
            minion_kind.name(),
            master_kind.name(),
            topology.name()
        );
        let minions = TempRoot::new();
        let entries = match topology {
            Topology::TwoIps => format!("['{}', '{}']", a.host.ip(), b.host.ip()),
            Topology::OneIp => format!("['{}', '{}']", a.ret_addr(), b.ret_addr()),
        };
        // Salt's defaults where the test kit's minion config tunes them for tests.
        minions.add_minion_with(
            &id,
            &format!(
                "master: {entries}\nmaster_port: {}\nmaster_type: failover\n\
                 master_alive_interval: {alive}\nretry_dns: 0\nlog_level_logfile: info\n\
                 acceptance_wait_time: 10\nrandom_reauth_delay: 10\nrecon_default: 1000\n\
                 recon_max: 10000\nrecon_randomize: true\n",
                DEFAULT_PORTS.1
            ),
        );
        let mut setup = Setup {
            minion: None,
            minion_kind,
            masters: [a, b],
            minions,
            id,
            minion_host: node,
            topology,
            bins,
            lab,
        };
        setup.start_minion();
        if !setup.answers(0, START_TIMEOUT) {
            return Err(format!("minion {} never answered through A", setup.id));
        }
        setup.masters[1].accept(&setup.id, &setup.minions.minion_pki_dir(&setup.id))?;
        setup.wait_idle(0);
        setup.wait_idle(1);
        Ok(setup)
    }

    /// Starts the minion (stopping a running one first).
    fn start_minion(&mut self) {
        if let Some(mut old) = self.minion.take() {
            old.stop();
        }
        // A stock minion refuses to start ("An instance is already running") while its
        // `process_responsibility_salt-minion.pid` names a process that psutil still finds,
        // and the old minion's worker may linger as a zombie until init reaps it. The old
        // minion is stopped, so its claims go.
        let dir = self.minions.minion_config_dir(&self.id);
        for file in ["salt-minion.pid", "process_responsibility_salt-minion.pid"] {
            let _ = std::fs::remove_file(dir.join("run").join(file));
        }
        let program = match self.minion_kind {
            Kind::Halite => &self.bins.halite_minion,
            Kind::Stock => &self.bins.salt_minion,
        };
        let mut cmd = Command::new(program);
        cmd.arg("-c").arg(dir);
        let name = format!("{}-minion", self.minion_kind.name());
        let minion = self
            .minion_host
            .spawn(cmd, &self.minions.procs_dir(), &name);
        self.minion = Some(match self.minion_kind {
            Kind::Halite => minion,
            Kind::Stock => minion.with_stop_grace(STOCK_STOP_GRACE),
        });
    }

    fn minion_sock_dir(&self) -> PathBuf {
        self.minions.minion_config_dir(&self.id).join("sock")
    }

    /// Whether the minion answers a `test.ping` published through master `m` within
    /// `timeout` (published every half second meanwhile).
    fn answers(&self, m: usize, timeout: Duration) -> bool {
        let master = &self.masters[m];
        if master.proc.is_none() {
            return false;
        }
        let Ok(tap) = Tap::start(&master.sock_dir()) else {
            return false;
        };
        let since = Instant::now();
        let _pings = Pinger::start(
            &master.host,
            master.publisher(),
            &self.id,
            Duration::from_millis(500),
        );
        wait_until(timeout, || {
            tap.first(since, |tag, _| is_return_of(&self.id, tag))
                .is_some()
        })
    }

    /// The master the minion answers through (`guess` asked first), or `None` when it
    /// answers through neither within [`SETTLE_TIMEOUT`].
    fn current(&self, guess: usize) -> Option<usize> {
        let started = Instant::now();
        while started.elapsed() < SETTLE_TIMEOUT {
            for m in [guess, 1 - guess] {
                if self.answers(m, Duration::from_secs(3)) {
                    return Some(m);
                }
            }
        }
        None
    }

    /// Self-check of the one-IP cut: with A's ports cut, the minion's host reaches B's
    /// request port and not A's; afterwards A's again.
    fn check_port_cut(&self) -> Result<(), String> {
        let (a, b) = (self.masters[0].ret_addr(), self.masters[1].ret_addr());
        self.port_cut(0, true)?;
        let short = Duration::from_millis(700);
        let cut_a = !self.minion_host.connects(a, short);
        let reach_b = self.minion_host.connects(b, Duration::from_secs(2));
        self.port_cut(0, false)?;
        let back_a = self.minion_host.connects(a, Duration::from_secs(2));
        if cut_a && reach_b && back_a {
            Ok(())
        } else {
            Err(format!(
                "the port filter does not work: A cut {cut_a}, B reached {reach_b}, A back {back_a}"
            ))
        }
    }

    /// Drops (`on`) or lets through again every packet to or from master `m`'s ports on
    /// its host's `eth0`.
    fn port_cut(&self, m: usize, on: bool) -> Result<(), String> {
        let master = &self.masters[m];
        let tc = |args: &[&str]| -> Result<(), String> {
            let mut cmd = Command::new("tc");
            cmd.args(args);
            let out = master.host.run(cmd, Duration::from_secs(30));
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "tc {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        if !on {
            return tc(&["qdisc", "del", "dev", "eth0", "clsact"]);
        }
        tc(&["qdisc", "replace", "dev", "eth0", "clsact"])?;
        let program = port_drop_program(master.publish_port, master.ret_port);
        for direction in ["ingress", "egress"] {
            tc(&[
                "filter", "replace", "dev", "eth0", direction, "pref", "1", "handle", "1", "bpf",
                "da", "bytecode", &program,
            ])?;
        }
        Ok(())
    }

    /// Applies `fault` to master `m`.
    fn apply(&mut self, fault: Fault, m: usize) -> Result<(), String> {
        match fault {
            Fault::Kill => {
                if let Some(mut p) = self.masters[m].proc.take() {
                    p.kill();
                }
                Ok(())
            }
            Fault::Freeze => {
                if let Some(p) = &self.masters[m].proc {
                    p.freeze();
                }
                Ok(())
            }
            Fault::Cut => match self.topology {
                Topology::TwoIps => {
                    self.lab.cut_link(&self.masters[m].host);
                    Ok(())
                }
                Topology::OneIp => self.port_cut(m, true),
            },
        }
    }

    /// Waits until master `m`'s processes are idle: under [`IDLE_SHARE`] of a core over
    /// two [`IDLE_SAMPLE`]s in a row (a master just started, stock Salt's above all, goes on
    /// starting workers and loading modules for seconds after its port opens), at most
    /// [`IDLE_TIMEOUT`]. Returns how long it took.
    fn wait_idle(&self, m: usize) -> Duration {
        let started = Instant::now();
        let Some(proc) = &self.masters[m].proc else {
            return Duration::ZERO;
        };
        let mut last = tree_cpu(proc);
        let mut quiet = 0;
        while quiet < 2 && started.elapsed() < IDLE_TIMEOUT {
            std::thread::sleep(IDLE_SAMPLE);
            let now = tree_cpu(proc);
            let busy = now.saturating_sub(last);
            last = now;
            if busy.as_secs_f64() < IDLE_SHARE * IDLE_SAMPLE.as_secs_f64() {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
        started.elapsed()
    }

    /// Undoes `fault` on master `m`.
    fn undo(&mut self, fault: Fault, m: usize) -> Result<(), String> {
        match fault {
            Fault::Kill => self.masters[m].start(self.bins),
            Fault::Freeze => {
                if let Some(p) = &self.masters[m].proc {
                    p.thaw();
                }
                Ok(())
            }
            Fault::Cut => match self.topology {
                Topology::TwoIps => {
                    self.lab.restore_link(&self.masters[m].host);
                    Ok(())
                }
                Topology::OneIp => self.port_cut(m, false),
            },
        }
    }

    /// Copies the logs and process outputs under `to`.
    fn keep_logs(&self, to: &Path) {
        let _ = std::fs::create_dir_all(to);
        let mut files = vec![(self.minions.minion_log(&self.id), "minion.log".to_owned())];
        for m in &self.masters {
            files.push((m.root.master_log(), format!("master-{}.log", m.name)));
        }
        for dir in [self.minions.procs_dir()]
            .into_iter()
            .chain(self.masters.iter().map(|m| m.root.procs_dir()))
        {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    files.push((e.path(), name));
                }
            }
        }
        for (from, name) in files {
            if file_len(&from) > 0 {
                let _ = std::fs::copy(&from, to.join(name));
            }
        }
    }
}

/// CPU time (user + system) used so far by the live processes of `proc`'s tree.
fn tree_cpu(proc: &Proc) -> Duration {
    let ticks: u64 = proc
        .pids()
        .into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .sum();
    Duration::from_secs_f64(ticks as f64 / USER_HZ)
}

/// Classic BPF for `tc ... bpf da bytecode`: drop (`TC_ACT_SHOT`) an IPv4 TCP packet whose
/// source or destination port is `p1` or `p2`, let everything else through (`TC_ACT_OK`).
/// The program sees the Ethernet header first (`cls_bpf` pushes it back at ingress).
fn port_drop_program(p1: u16, p2: u16) -> String {
    const LDH_ABS: u16 = 0x28;
    const LDB_ABS: u16 = 0x30;
    const LDXB_MSH: u16 = 0xb1;
    const LDH_IND: u16 = 0x48;
    const JEQ: u16 = 0x15;
    const RET: u16 = 0x06;
    let program: [(u16, u8, u8, u32); 13] = [
        (LDH_ABS, 0, 0, 12),        // 0: ethertype
        (JEQ, 0, 9, 0x0800),        // 1: IPv4, else pass (11)
        (LDB_ABS, 0, 0, 23),        // 2: IP protocol
        (JEQ, 0, 7, 6),             // 3: TCP, else pass (11)
        (LDXB_MSH, 0, 0, 14),       // 4: X = IP header length
        (LDH_IND, 0, 0, 14),        // 5: source port
        (JEQ, 5, 0, u32::from(p1)), // 6: drop (12)
        (JEQ, 4, 0, u32::from(p2)), // 7: drop (12)
        (LDH_IND, 0, 0, 16),        // 8: destination port
        (JEQ, 2, 0, u32::from(p1)), // 9: drop (12)
        (JEQ, 1, 0, u32::from(p2)), // 10: drop (12)
        (RET, 0, 0, 0),             // 11: TC_ACT_OK
        (RET, 0, 0, 2),             // 12: TC_ACT_SHOT
    ];
    let mut text = program.len().to_string();
    for (code, jt, jf, k) in program {
        text.push_str(&format!(",{code} {jt} {jf} {k}"));
    }
    text
}

// ---------------------------------------------------------------------------------- run

/// One fault's outcome.
struct Outcome {
    from: usize,
    /// How long the faulted master took to be idle once the fault was undone.
    settled: Duration,
    /// The master the minion answered through once the fault was undone.
    now_on: usize,
    /// Whether the minion had to be restarted to answer again.
    restarted: bool,
    took: Option<Duration>,
    auth: Option<Duration>,
    events_once: usize,
    events_repeated: usize,
    events_missing: usize,
    /// Events that arrived on the other master though the minion never answered there.
    events_seen: usize,
}

/// Applies `fault` to the minion's master `cur` and measures the failover to the other.
fn one_fault(
    setup: &mut Setup<'_>,
    run: &RunArgs,
    fault: Fault,
    cur: usize,
    tag: &str,
    events: usize,
) -> Result<Outcome, String> {
    let other = 1 - cur;
    let tap = Tap::start(&setup.masters[other].sock_dir())?;
    let pinger = Pinger::start(
        &setup.masters[other].host,
        setup.masters[other].publisher(),
        &setup.id,
        run.ping_every,
    );
    let t0 = Instant::now();
    setup.apply(fault, cur)?;
    if events > 0 {
        fire_events(&setup.minion_sock_dir(), &setup.id, tag, events)?;
    }
    let id = setup.id.clone();
    let mut got = None;
    wait_until(run.cap, || {
        got = tap.first(t0, |t, _| is_return_of(&id, t));
        got.is_some()
    });
    drop(pinger);
    let took = got.map(|at| at.duration_since(t0));
    let auth = tap
        .first(t0, |t, d| is_accepted_auth(&id, t, d))
        .map(|at| at.duration_since(t0));
    if took.is_some() && events > 0 {
        wait_until(EVENT_WAIT, || tap.seqs(tag).len() >= events);
    }
    setup.undo(fault, cur)?;
    let settled = if fault == Fault::Kill {
        setup.wait_idle(cur)
    } else {
        Duration::ZERO
    };
    let guess = if took.is_some() { other } else { cur };
    let mut restarted = false;
    let mut now_on = setup.current(guess);
    if now_on.is_none() {
        eprintln!(
            "minion {} answers through neither master {} s after the fault was undone: \
             restarting it",
            setup.id,
            SETTLE_TIMEOUT.as_secs()
        );
        setup.start_minion();
        restarted = true;
        now_on = setup.current(0);
    }
    let Some(now_on) = now_on else {
        return Err(format!(
            "minion {} answers through neither master, even after a restart",
            setup.id
        ));
    };
    let seqs = tap.seqs(tag);
    let mut counts = BTreeMap::new();
    for q in &seqs {
        *counts.entry(*q).or_insert(0usize) += 1;
    }
    let once = (0..events as i64)
        .filter(|q| counts.get(q) == Some(&1))
        .count();
    let repeated = counts.values().filter(|c| **c > 1).count();
    let missing = (0..events as i64)
        .filter(|q| !counts.contains_key(q))
        .count();
    Ok(Outcome {
        from: cur,
        settled,
        now_on,
        restarted,
        took,
        auth,
        events_once: once,
        events_repeated: repeated,
        events_missing: missing,
        events_seen: seqs.len(),
    })
}

fn secs(d: Option<Duration>) -> serde_json::Value {
    d.map_or(serde_json::Value::Null, |d| {
        json!((d.as_secs_f64() * 1000.0).round() / 1000.0)
    })
}

fn run_setup(
    bins: &Bins,
    run: &RunArgs,
    out: &mut std::fs::File,
    minion: Kind,
    masters: Kind,
    topology: Topology,
) -> Result<(), String> {
    let label = format!("{}-{}-{}", minion.name(), masters.name(), topology.name());
    let base = json!({
        "minion": minion.name(),
        "masters": masters.name(),
        "topology": topology.name(),
        "alive": run.alive,
        "cap": run.cap.as_secs(),
        "ping_every_ms": run.ping_every.as_millis() as u64,
    });
    let record = |out: &mut std::fs::File, extra: serde_json::Value| -> Result<(), String> {
        let mut line = base.clone();
        if let (Some(l), serde_json::Value::Object(e)) = (line.as_object_mut(), extra) {
            l.extend(e);
        }
        writeln!(out, "{line}").map_err(|e| format!("cannot write the results: {e}"))
    };
    let started = Instant::now();
    eprintln!("[{label}] setting up");
    let mut setup = match Setup::new(bins, minion, masters, topology, run.alive) {
        Ok(s) => s,
        Err(why) => {
            record(out, json!({"error": format!("set-up failed: {why}")}))?;
            return Err(why);
        }
    };
    eprintln!(
        "[{label}] minion answers through A after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let faults = if minion == Kind::Stock || masters == Kind::Stock {
        run.stock_faults.unwrap_or(run.faults)
    } else {
        run.faults
    };
    let mut cur = 0;
    let mut result = Ok(());
    'kinds: for &fault in &run.kinds {
        if fault == Fault::Cut && topology == Topology::OneIp {
            if let Err(why) = setup.check_port_cut() {
                record(out, json!({"fault": "cut", "error": why.clone()}))?;
                result = Err(why);
                continue;
            }
        }
        // The timed faults, then (when the minion failed over at all) the faults with
        // events in flight.
        let mut missed_in_a_row = 0;
        let mut any_detected = false;
        let mut n = 0;
        while n < faults + if any_detected { run.event_faults } else { 0 } {
            let events = if n < faults { 0 } else { run.events };
            let tag = format!("bench/failover/{label}/{}/{n}", fault.name());
            let outcome = match one_fault(&mut setup, run, fault, cur, &tag, events) {
                Ok(o) => o,
                Err(why) => {
                    record(
                        out,
                        json!({"fault": fault.name(), "n": n, "error": why.clone()}),
                    )?;
                    eprintln!("[{label}] {} #{n}: {why}; the setup stops", fault.name());
                    result = Err(why);
                    break 'kinds;
                }
            };
            let detected = outcome.took.is_some();
            let from = if outcome.from == 0 { "A" } else { "B" };
            record(
                out,
                json!({
                    "fault": fault.name(),
                    "n": n,
                    "from": from,
                    "detected": detected,
                    "seconds": secs(outcome.took),
                    "auth_seconds": secs(outcome.auth),
                    "events_fired": events,
                    "events_once": outcome.events_once,
                    "events_repeated": outcome.events_repeated,
                    "events_missing": outcome.events_missing,
                    "events_seen": outcome.events_seen,
                    "minion_restarted": outcome.restarted,
                    "settle_seconds": secs(Some(outcome.settled)),
                }),
            )?;
            let events_note = if events > 0 {
                format!(
                    " (events: {} once, {} repeated, {} missing)",
                    outcome.events_once, outcome.events_repeated, outcome.events_missing
                )
            } else {
                String::new()
            };
            eprintln!(
                "[{label}] {} #{n} on {from}: {}{events_note}{}",
                fault.name(),
                outcome.took.map_or(
                    format!("not detected within {} s", run.cap.as_secs()),
                    |d| format!("{:.3} s", d.as_secs_f64())
                ),
                if outcome.restarted {
                    " (minion restarted)"
                } else {
                    ""
                },
            );
            cur = outcome.now_on;
            n += 1;
            if detected {
                any_detected = true;
                missed_in_a_row = 0;
            } else {
                missed_in_a_row += 1;
                if missed_in_a_row >= run.give_up_after {
                    eprintln!(
                        "[{label}] {}: {missed_in_a_row} faults in a row not detected; next",
                        fault.name()
                    );
                    break;
                }
            }
        }
    }
    if let Some(dir) = &run.logs {
        setup.keep_logs(&dir.join(&label));
    }
    eprintln!("[{label}] done in {:.0} s", started.elapsed().as_secs_f64());
    result
}

fn run_all(run: &RunArgs) -> Result<(), String> {
    let bins = Bins::find(run.bin_dir.as_deref())?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&run.out)
        .map_err(|e| format!("cannot open {}: {e}", run.out.display()))?;
    let mut failed = Vec::new();
    for &topology in &run.topologies {
        for &masters in &run.masters {
            for &minion in &run.minions {
                let what = format!("{}-{}-{}", minion.name(), masters.name(), topology.name());
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_setup(&bins, run, &mut out, minion, masters, topology)
                }));
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => failed.push(format!("{what}: {why}")),
                    Err(_) => {
                        let _ = writeln!(
                            out,
                            "{}",
                            json!({"minion": minion.name(), "masters": masters.name(),
                                   "topology": topology.name(), "error": "panicked"})
                        );
                        failed.push(format!("{what}: panicked"));
                    }
                }
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

// -------------------------------------------------------------------------------- table

/// One fault as read back from the results file.
struct Row {
    took: Option<f64>,
    auth: Option<f64>,
    once: u64,
    repeated: u64,
    missing: u64,
    fired: u64,
    restarted: bool,
}

type Key = (Fault, Topology, Kind, Kind);

/// The nearest-rank percentile `q` (0 < q <= 1) of `sorted`, `None` standing for "not
/// detected" (slower than any figure).
fn percentile(sorted: &[Option<f64>], q: f64) -> Option<f64> {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(rank - 1).copied().flatten()
}

fn sort_times(rows: &[Row]) -> Vec<Option<f64>> {
    let mut t: Vec<Option<f64>> = rows.iter().map(|r| r.took).collect();
    t.sort_by(|a, b| match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    t
}

fn cell(rows: Option<&Vec<Row>>, cap: u64) -> String {
    let Some(rows) = rows.filter(|r| !r.is_empty()) else {
        return "—".to_owned();
    };
    let t = sort_times(rows);
    let detected = t.iter().filter(|x| x.is_some()).count();
    if detected == 0 {
        return format!("not detected within {cap} s (n={})", t.len());
    }
    let show = |v: Option<f64>| v.map_or(format!("> {cap}"), |x| format!("{x:.2}"));
    let mut text = format!(
        "{} / {} (n={})",
        show(percentile(&t, 0.5)),
        show(percentile(&t, 0.99)),
        t.len()
    );
    if detected < t.len() {
        text.push_str(&format!(", {} not detected", t.len() - detected));
    }
    text
}

fn ratio(halite: Option<&Vec<Row>>, stock: Option<&Vec<Row>>) -> String {
    let p50 = |rows: Option<&Vec<Row>>| rows.and_then(|r| percentile(&sort_times(r), 0.5));
    match (p50(halite), p50(stock)) {
        (Some(h), Some(s)) if h > 0.0 => format!("{:.1}×", s / h),
        (Some(_), None) if stock.is_some_and(|r| !r.is_empty()) => "∞ (stock never)".to_owned(),
        _ => "—".to_owned(),
    }
}

fn table(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Faults without events (the failover times), and faults with events in flight.
    let mut rows: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    let mut with_events: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    let mut errors = Vec::new();
    let (mut cap, mut alive, mut every) = (60, 2, 100);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad line {line:?}: {e}"))?;
        let get = |k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
        if let Some(e) = v.get("error").and_then(serde_json::Value::as_str) {
            errors.push(format!(
                "{} minion, {} masters, {}, {}: {e}",
                get("minion"),
                get("masters"),
                get("topology"),
                get("fault")
            ));
            continue;
        }
        let key = (
            Fault::parse(get("fault"))?,
            Topology::parse(get("topology"))?,
            Kind::parse(get("minion"))?,
            Kind::parse(get("masters"))?,
        );
        let num = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        cap = num("cap");
        alive = num("alive");
        every = num("ping_every_ms");
        let fired = num("events_fired");
        let into = if fired > 0 {
            &mut with_events
        } else {
            &mut rows
        };
        into.entry(key).or_default().push(Row {
            took: v.get("seconds").and_then(serde_json::Value::as_f64),
            auth: v.get("auth_seconds").and_then(serde_json::Value::as_f64),
            once: num("events_once"),
            repeated: num("events_repeated"),
            missing: num("events_missing"),
            fired,
            restarted: v
                .get("minion_restarted")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        });
    }
    let (h, st) = (Kind::Halite, Kind::Stock);
    let mut md = format!(
        "Failover time in seconds, p50 / p99 (nearest rank; n = faults), from the fault to \
         the minion's first `test.ping` return on the other master's bus \
         (`master_alive_interval: {alive}`, a ping every {every} ms, cap {cap} s):\n\n\
         | fault | topology | Halite minion, Halite masters | stock minion, stock masters \
         | stock ÷ Halite (p50) | Halite minion, stock masters | stock minion, Halite masters |\n\
         |---|---|---|---|---|---|---|\n"
    );
    let mut keys: Vec<(Fault, Topology)> = rows.keys().map(|k| (k.0, k.1)).collect();
    keys.dedup();
    for (fault, topo) in &keys {
        let at = |mi: Kind, ma: Kind| rows.get(&(*fault, *topo, mi, ma));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            fault.name(),
            topo.name(),
            cell(at(h, h), cap),
            cell(at(st, st), cap),
            ratio(at(h, h), at(st, st)),
            cell(at(h, st), cap),
            cell(at(st, h), cap),
        ));
    }
    md.push_str(
        "\nSign-in accepted by the other master (its `salt/auth` event), p50 in seconds from \
         the fault, where the minion failed over:\n\n\
         | fault | topology | Halite minion, Halite masters | stock minion, stock masters \
         | Halite minion, stock masters | stock minion, Halite masters |\n|---|---|---|---|---|---|\n",
    );
    for (fault, topo) in &keys {
        let at = |mi: Kind, ma: Kind| {
            let Some(r) = rows.get(&(*fault, *topo, mi, ma)) else {
                return "—".to_owned();
            };
            let mut a: Vec<f64> = r.iter().filter_map(|x| x.auth).collect();
            a.sort_by(f64::total_cmp);
            let a: Vec<Option<f64>> = a.into_iter().map(Some).collect();
            percentile(&a, 0.5).map_or("—".to_owned(), |x| format!("{x:.2}"))
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            fault.name(),
            topo.name(),
            at(h, h),
            at(st, st),
            at(h, st),
            at(st, h)
        ));
    }
    md.push_str(&format!(
        "\nEvents: after the timed faults, more faults of each kind with {} `fire_master` \
         events written to the minion's bus right after the fault; counted on the other \
         master's bus (over the faults where the minion failed over), and the failover time \
         of these faults, p50 / p99:\n\n\
         | minion | masters | topology | fault | fired | arrived once | repeated | missing \
         | failover with events in flight |\n|---|---|---|---|---|---|---|---|---|\n",
        with_events
            .values()
            .flatten()
            .map(|r| r.fired)
            .max()
            .unwrap_or(0)
    ));
    for ((fault, topo, mi, ma), timed) in &rows {
        let names = format!(
            "| {} | {} | {} | {} ",
            mi.name(),
            ma.name(),
            topo.name(),
            fault.name()
        );
        let r = with_events.get(&(*fault, *topo, *mi, *ma));
        let over: Vec<&Row> = r
            .map(|r| r.iter().filter(|x| x.took.is_some()).collect())
            .unwrap_or_default();
        if over.is_empty() {
            let why = if timed.iter().all(|x| x.took.is_none()) {
                "no failover"
            } else {
                "not run"
            };
            md.push_str(&format!("{names}| — ({why}) | | | | |\n"));
            continue;
        }
        let sum = |f: fn(&Row) -> u64| over.iter().map(|x| f(x)).sum::<u64>();
        md.push_str(&format!(
            "{names}| {} | {} | {} | {} | {} |\n",
            sum(|x| x.fired),
            sum(|x| x.once),
            sum(|x| x.repeated),
            sum(|x| x.missing),
            cell(r, cap)
        ));
    }
    let mut restart_counts: BTreeMap<&Key, (usize, usize)> = BTreeMap::new();
    for (key, r) in rows.iter().chain(with_events.iter()) {
        let c = restart_counts.entry(key).or_default();
        c.0 += r.iter().filter(|x| x.restarted).count();
        c.1 += r.len();
    }
    let restarts: Vec<String> = restart_counts
        .iter()
        .filter(|(_, (n, _))| *n > 0)
        .map(|((fault, topo, mi, ma), (n, of))| {
            format!(
                "- {} minion, {} masters, {}, {}: the minion answered through neither master \
                 {} s after the fault was undone and was restarted, after {n} of {of} faults",
                mi.name(),
                ma.name(),
                topo.name(),
                fault.name(),
                SETTLE_TIMEOUT.as_secs(),
            )
        })
        .collect();
    if !restarts.is_empty() {
        md.push_str("\nRestarts:\n\n");
        md.push_str(&restarts.join("\n"));
        md.push('\n');
    }
    if !errors.is_empty() {
        md.push_str("\nErrors:\n\n");
        for e in errors {
            md.push_str(&format!("- {e}\n"));
        }
    }
    Ok(md)
}

const USAGE: &str = "usage: failover_bench run [options] | failover_bench table FILE \
                     (see the header of crates/minion/examples/failover_bench.rs)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.split_first() {
        Some((cmd, rest)) if cmd == "run" => parse_run(rest).and_then(|r| run_all(&r)),
        Some((cmd, [file])) if cmd == "table" => table(Path::new(file)).map(|md| print!("{md}")),
        _ => Err(USAGE.to_owned()),
    };
    if let Err(why) = outcome {
        eprintln!("failover_bench: {why}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_p99_of_twenty_is_the_slowest_and_misses_rank_last() {
        let mut t: Vec<Option<f64>> = (1..=20).map(|i| Some(f64::from(i))).collect();
        assert_eq!(percentile(&t, 0.5), Some(10.0));
        assert_eq!(percentile(&t, 0.99), Some(20.0));
        t[0] = None;
        let rows: Vec<Row> = t
            .iter()
            .map(|x| Row {
                took: *x,
                auth: None,
                once: 0,
                repeated: 0,
                missing: 0,
                fired: 0,
                restarted: false,
            })
            .collect();
        let sorted = sort_times(&rows);
        assert_eq!(percentile(&sorted, 0.99), None);
        assert_eq!(percentile(&sorted, 0.5), Some(11.0));
    }

    #[test]
    fn port_drop_program_jumps_land_on_pass_and_drop() {
        let text = port_drop_program(4505, 4506);
        let parts: Vec<&str> = text.split(',').collect();
        assert_eq!(parts[0], "13");
        assert_eq!(parts.len(), 14);
        // Every jump from instruction i lands on 11 (pass) or 12 (drop).
        for (i, ins) in parts[1..].iter().enumerate() {
            let f: Vec<u32> = ins.split(' ').map(|x| x.parse().unwrap()).collect();
            if f[0] == 0x15 {
                for off in [f[1], f[2]] {
                    if off > 0 {
                        let to = i + 1 + off as usize;
                        assert!(to == 11 || to == 12, "instruction {i} jumps to {to}");
                    }
                }
            }
        }
        assert!(text.contains(",21 5 0 4505,21 4 0 4506,"));
        assert!(text.ends_with(",6 0 0 0,6 0 0 2"));
    }
}
