//! The seed 002 scripts (`tests/seed002/`) run with the venv's Python, and a Rust tap on
//! an event bus that records what goes by.

use halite_bus::{BusAddr, BusClient};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::{assert_success, run_command, salt_venv, wait_until, Proc, TempRoot, TIMEOUT};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where a seed script finds its bus: a minion config file (`SALT_MINION_CONFIG`, read by
/// `salt.config.minion_config`) or a master `sock_dir` (`SALT_MASTER_SOCK_DIR`).
#[derive(Debug, Clone)]
pub enum Side {
    /// The minion whose config file this is.
    Minion(PathBuf),
    /// The master whose `sock_dir` this is.
    Master(PathBuf),
}

impl Side {
    /// The Halite or stock minion `id` of `root`.
    pub fn minion(root: &TempRoot, id: &str) -> Side {
        Side::Minion(root.minion_config_dir(id).join("minion"))
    }

    /// The master of `root`.
    pub fn master(root: &TempRoot) -> Side {
        Side::Master(root.master_root().join("sock"))
    }
}

fn seed_command(script: &str, side: &Side) -> Command {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/seed002")
        .join(script);
    assert!(path.is_file(), "no seed script {}", path.display());
    let mut cmd = Command::new(salt_venv().join("bin").join("python"));
    cmd.arg(path).env("PYTHONUNBUFFERED", "1");
    match side {
        Side::Minion(conf) => cmd.env("SALT_MINION_CONFIG", conf),
        Side::Master(sock) => cmd.env("SALT_MASTER_SOCK_DIR", sock),
    };
    cmd
}

/// Starts a seed script that runs until stopped (a listener).
pub fn start_seed(root: &TempRoot, script: &str, side: &Side) -> Proc {
    Proc::spawn(seed_command(script, side), &root.procs_dir(), script)
}

/// Runs a seed script to completion and checks it succeeded.
pub fn run_seed(script: &str, side: &Side) {
    let out = run_command(seed_command(script, side), TIMEOUT);
    assert_success(script, &out);
}

/// Runs `emit` until `listener` printed `needle` (the listener subscribes in the
/// background, so the first events may come before it listens). Panics after [`TIMEOUT`].
pub fn emit_until_heard(listener: &Proc, needle: &str, emit: impl Fn()) {
    let heard = wait_until(TIMEOUT, || {
        emit();
        wait_until(Duration::from_secs(3), || {
            listener.stdout().contains(needle)
        })
    });
    assert!(
        heard,
        "{} never printed {needle:?}; stdout:\n{}\nstderr tail:\n{}",
        listener.name(),
        listener.stdout(),
        tail(&listener.stderr(), 30)
    );
}

/// Waits until `listener` printed every one of `needles`.
pub fn wait_heard(listener: &Proc, needles: &[&str]) {
    let all = wait_until(TIMEOUT, || {
        let out = listener.stdout();
        needles.iter().all(|n| out.contains(n))
    });
    assert!(
        all,
        "{} did not print all of {needles:?}; stdout:\n{}",
        listener.name(),
        listener.stdout()
    );
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The tag the tap fires to learn that it is subscribed.
const PROBE: &str = "halite/test/tap-probe";

/// A Rust subscriber on a bus, recording every event but its own probes.
pub struct BusTap {
    events: Arc<Mutex<Vec<(String, Value)>>>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BusTap {
    /// Subscribes to `pub_addr` (retrying until the bus exists) and returns once an event
    /// fired into `pull_addr` came back, so nothing fired afterwards is missed.
    pub fn start(pub_addr: BusAddr, pull_addr: BusAddr) -> BusTap {
        let events = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (ev, st) = (events.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(tap(pub_addr, pull_addr, ev, st, ready_tx));
        });
        ready_rx
            .recv_timeout(TIMEOUT)
            .expect("the bus tap never subscribed");
        BusTap {
            events,
            stop,
            thread: Some(thread),
        }
    }

    /// The master bus of `root`.
    pub fn master(root: &TempRoot) -> BusTap {
        let sockets = halite_bus::BusSockets::master(&root.master_root().join("sock"));
        BusTap::start(sockets.pub_addr, sockets.pull_addr)
    }

    /// The bus of minion `id` of `root`.
    pub fn minion(root: &TempRoot, id: &str) -> BusTap {
        let sockets = minion_bus(root, id);
        BusTap::start(sockets.pub_addr, sockets.pull_addr)
    }

    /// What was recorded so far with a tag starting with `prefix`.
    pub fn with_prefix(&self, prefix: &str) -> Vec<(String, Value)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Waits until `n` events with a tag starting with `prefix` were recorded; returns
    /// them all.
    pub fn wait_for(&self, prefix: &str, n: usize) -> Vec<(String, Value)> {
        let mut got = Vec::new();
        let ok = wait_until(TIMEOUT, || {
            got = self.with_prefix(prefix);
            got.len() >= n
        });
        assert!(
            ok,
            "{} of {n} events tagged {prefix}* arrived: {:?}",
            got.len(),
            got.iter().map(|(t, _)| t).collect::<Vec<_>>()
        );
        got
    }
}

impl Drop for BusTap {
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
    events: Arc<Mutex<Vec<(String, Value)>>>,
    stop: CancellationToken,
    ready: std::sync::mpsc::Sender<()>,
) {
    let client = BusClient::new(1 << 20);
    let mut listener = loop {
        match client.listen(&pub_addr, "").await {
            Ok(l) => break l,
            Err(_) => tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(1)) => {}
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
                    let (tag, data) = event.into_parts();
                    events.lock().unwrap().push((tag, data));
                }
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// The sockets of minion `id`'s bus.
pub fn minion_bus(root: &TempRoot, id: &str) -> halite_bus::BusSockets {
    halite_bus::BusSockets::minion(&root.minion_config_dir(id).join("sock"), "sha256", id).unwrap()
}

/// Waits until the socket files of minion `id`'s bus exist.
pub fn wait_for_minion_bus(root: &TempRoot, id: &str) {
    let sockets = minion_bus(root, id);
    let up = wait_until(TIMEOUT, || {
        [&sockets.pub_addr, &sockets.pull_addr]
            .iter()
            .all(|a| matches!(a, BusAddr::Unix(p) if p.exists()))
    });
    assert!(up, "the bus of minion {id} never appeared");
}

/// Fires events on minion `id`'s bus from Rust, one connection each, as programs do.
pub fn fire_on_minion(root: &TempRoot, id: &str, events: Vec<(String, Value)>) {
    let pull = minion_bus(root, id).pull_addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = BusClient::new(1 << 20);
        for (tag, data) in events {
            client.fire(&pull, &tag, data).await.unwrap();
        }
    });
}

/// The single-form `fire_master` payload `event.fire_master` fires.
pub fn fire_master_single(data: Value, tag: &str) -> (String, Value) {
    (
        "fire_master".to_owned(),
        map([
            ("data", data),
            ("tag", s(tag)),
            ("events", Value::Nil),
            ("pretag", Value::Nil),
        ]),
    )
}

/// An event's data without its `_stamp`.
pub fn unstamped(data: &Value) -> Value {
    let mut d = data.clone();
    value::remove(&mut d, "_stamp");
    d
}
