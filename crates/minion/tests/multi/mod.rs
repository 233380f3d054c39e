//! Shared steps of the multi-master tests (`failover.rs`, `hot_hot.rs`): masters on their
//! own addresses (loopback aliases, or lab hosts), a master key pair or a signing pair
//! shared between them, publishing a job straight to a master's request port (with a
//! chosen jid when asked, as `LocalClient` may), a publisher that keeps a job going out,
//! and the time until a minion's return shows up on a master's bus.

#![allow(dead_code)]

use crate::common::seed::BusTap;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::{
    current_user, free_ports, halite_bin, stock_bin, wait_until, Host, Proc, TempRoot,
    STOCK_STOP_GRACE, TIMEOUT,
};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which master program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `halite-master`.
    Halite,
    /// Stock `salt-master` 3008.3.
    Stock,
}

/// Where a master takes requests, and the key to publish with.
#[derive(Debug, Clone)]
pub struct Publisher {
    endpoint: String,
    key_file: PathBuf,
    host: Option<Host>,
}

impl Publisher {
    /// Publishes `fun` with `arg` to `tgt` (a glob), with `jid` when given; returns the
    /// jid, or `None` when the master did not answer or published nothing.
    pub fn publish(
        &self,
        tgt: &str,
        fun: &str,
        arg: Vec<Value>,
        jid: Option<&str>,
    ) -> Option<String> {
        let key = std::fs::read_to_string(&self.key_file).ok()?;
        let load = map([
            ("cmd", s("publish")),
            ("tgt", s(tgt)),
            ("fun", s(fun)),
            ("arg", Value::Array(arg)),
            ("key", s(key.trim_end())),
            ("tgt_type", s("glob")),
            ("ret", s("")),
            ("jid", s(jid.unwrap_or(""))),
            ("user", s(current_user())),
        ]);
        let body = value::encode(&map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]));
        let endpoint = self.endpoint.clone();
        let send = move || request(&endpoint, &body, Duration::from_secs(5));
        let reply = match &self.host {
            Some(host) => host.within(send),
            None => send(),
        }?;
        let reply = value::decode(&reply).ok()?;
        let load = value::get(&reply, "load").unwrap_or(&reply);
        value::get_str(load, "jid").map(str::to_owned)
    }
}

/// One REQ exchange on a context of its own (so that, inside a lab host, its sockets are
/// made in the host's namespace).
fn request(endpoint: &str, body: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let ctx = zmq::Context::new();
    let sock = ctx.socket(zmq::REQ).ok()?;
    sock.set_linger(0).ok()?;
    sock.connect(endpoint).ok()?;
    sock.send(body, 0).ok()?;
    let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    if sock.poll(zmq::POLLIN, ms).ok()? == 0 {
        return None;
    }
    sock.recv_bytes(0).ok()
}

/// A master in a root of its own, listening on `ip` with its own or given ports.
pub struct Master {
    /// The running master (declared before `root`: it stops before the root goes).
    pub proc: Option<Proc>,
    /// Its config and data.
    pub root: TempRoot,
    /// Which program.
    pub kind: Kind,
    /// Its address.
    pub ip: Ipv4Addr,
    /// `publish_port`.
    pub publish_port: u16,
    /// `ret_port`.
    pub ret_port: u16,
    /// The lab host it runs in, if any.
    pub host: Option<Host>,
}

impl Master {
    /// A master of `kind` on `ip` with `ports` (`publish_port`, `ret_port`; fresh ones
    /// when `None`), `extra` merged into its config. Not started.
    pub fn new(kind: Kind, ip: Ipv4Addr, ports: Option<(u16, u16)>, extra: &str) -> Master {
        let (publish_port, ret_port) = ports.unwrap_or_else(|| {
            let p = free_ports(2);
            (p[0], p[1])
        });
        let root = TempRoot::with_master_extra(&format!(
            "interface: {ip}\npublish_port: {publish_port}\nret_port: {ret_port}\n{extra}"
        ));
        Master {
            proc: None,
            root,
            kind,
            ip,
            publish_port,
            ret_port,
            host: None,
        }
    }

    /// A master of `kind` on lab host `host` (Salt's default ports), `extra` merged into
    /// its config. Not started.
    pub fn in_lab(kind: Kind, host: &Host, extra: &str) -> Master {
        let root = TempRoot::for_lab_host(host.ip(), extra);
        Master {
            proc: None,
            kind,
            ip: host.ip(),
            publish_port: root.publish_port(),
            ret_port: root.ret_port(),
            root,
            host: Some(host.clone()),
        }
    }

    /// The `master` list entry for it: `ip:ret_port`.
    pub fn entry(&self) -> String {
        format!("{}:{}", self.ip, self.ret_port)
    }

    /// Starts the master and waits until it takes requests and its bus is up.
    pub fn start(&mut self) {
        let name = match self.kind {
            Kind::Halite => "halite-master",
            Kind::Stock => "salt-master",
        };
        let program = match self.kind {
            Kind::Halite => halite_bin("halite-master"),
            Kind::Stock => stock_bin("salt-master"),
        };
        let mut cmd = Command::new(program);
        cmd.arg("-c").arg(self.root.master_config_dir());
        let proc = match &self.host {
            Some(host) => host.spawn(cmd, &self.root.procs_dir(), name),
            None => Proc::spawn(cmd, &self.root.procs_dir(), name),
        };
        self.proc = Some(match self.kind {
            Kind::Halite => proc,
            Kind::Stock => proc.with_stop_grace(STOCK_STOP_GRACE),
        });
        self.wait_ready();
    }

    /// Waits until the request port accepts connections and the bus socket exists.
    pub fn wait_ready(&self) {
        let addr = SocketAddr::from((self.ip, self.ret_port));
        let up = wait_until(TIMEOUT, || {
            let open = match &self.host {
                Some(host) => host.connects(addr, Duration::from_secs(1)),
                None => TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok(),
            };
            open && self.bus_sock().exists() && self.key_file().exists()
        });
        assert!(up, "master {} never came up", self.entry());
    }

    fn bus_sock(&self) -> PathBuf {
        self.root
            .master_root()
            .join("sock")
            .join("master_event_pub.ipc")
    }

    fn key_file(&self) -> PathBuf {
        self.root
            .master_root()
            .join("cache")
            .join(format!(".{}_key", current_user()))
    }

    /// What publishes to it.
    pub fn publisher(&self) -> Publisher {
        Publisher {
            endpoint: format!("tcp://{}:{}", self.ip, self.ret_port),
            key_file: self.key_file(),
            host: self.host.clone(),
        }
    }

    /// Publishes `fun` to `tgt` (see [`Publisher::publish`]).
    pub fn publish(
        &self,
        tgt: &str,
        fun: &str,
        arg: Vec<Value>,
        jid: Option<&str>,
    ) -> Option<String> {
        self.publisher().publish(tgt, fun, arg, jid)
    }

    /// A tap on its bus.
    pub fn tap(&self) -> BusTap {
        BusTap::master(&self.root)
    }

    /// SIGKILL to the whole master (a crash).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// SIGSTOP to the whole master (a hang: connections stay open).
    pub fn freeze(&self) {
        if let Some(p) = &self.proc {
            p.freeze();
        }
    }

    /// SIGCONT after [`Master::freeze`].
    pub fn thaw(&self) {
        if let Some(p) = &self.proc {
            p.thaw();
        }
    }

    /// Its `pki_dir`.
    pub fn pki(&self) -> PathBuf {
        self.root.master_pki_dir()
    }

    /// Accepts minion `id` whose key pair is in `minion_pki`.
    pub fn accept(&self, id: &str, minion_pki: &Path) {
        let public = std::fs::read(minion_pki.join("minion.pub"))
            .unwrap_or_else(|e| panic!("minion {id} has no key yet: {e}"));
        let dir = self.pki().join("minions");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(id), public).unwrap();
    }
}

/// Copies `files` (followed through symlinks) from `from`'s pki dir into `to`'s, as plain
/// files; `to` must not be running.
pub fn copy_pki(from: &Master, to: &Master, files: &[&str]) {
    for f in files {
        let text = std::fs::read(from.pki().join(f))
            .unwrap_or_else(|e| panic!("{} has no {f}: {e}", from.entry()));
        std::fs::create_dir_all(to.pki()).unwrap();
        let target = to.pki().join(f);
        let _ = std::fs::remove_file(&target);
        std::fs::write(&target, text).unwrap();
    }
}

/// Makes `b` serve with `a`'s master key pair (`a` started once, so the pair exists).
pub fn share_master_key(a: &Master, b: &Master) {
    copy_pki(a, b, &["master.pem", "master.pub"]);
}

/// Makes `b` sign with `a`'s signing pair (`master_sign.*`, created by `a` at its start
/// with `master_sign_pubkey: True`), and gives minion pki dir `minion_pki` the public
/// half, as seed 004 says.
pub fn share_signing_pair(a: &Master, b: &Master, minion_pki: &Path) {
    copy_pki(a, b, &["master_sign.pem", "master_sign.pub"]);
    std::fs::create_dir_all(minion_pki).unwrap();
    std::fs::copy(
        a.pki().join("master_sign.pub"),
        minion_pki.join("master_sign.pub"),
    )
    .unwrap();
}

/// Returns of minion `id` seen on `tap`.
pub fn returns(tap: &BusTap, id: &str) -> Vec<(String, Value)> {
    let suffix = format!("/ret/{id}");
    tap.with_prefix("salt/job/")
        .into_iter()
        .filter(|(tag, _)| tag.ends_with(&suffix))
        .collect()
}

/// Waits up to `timeout` until `tap` saw more than `before` returns of `id`; the time
/// from `since` when it did.
pub fn next_return(
    tap: &BusTap,
    id: &str,
    before: usize,
    since: Instant,
    timeout: Duration,
) -> Option<Duration> {
    loop {
        if returns(tap, id).len() > before {
            return Some(since.elapsed());
        }
        if since.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Publishes `test.ping` to a minion every `every` until dropped.
pub struct Pinger {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pinger {
    /// Starts publishing through `publisher` to `tgt`.
    pub fn start(publisher: Publisher, tgt: &str, every: Duration) -> Pinger {
        let stop = Arc::new(AtomicBool::new(false));
        let (st, tgt) = (stop.clone(), tgt.to_owned());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let started = Instant::now();
                let _ = publisher.publish(&tgt, "test.ping", vec![], None);
                std::thread::sleep(every.saturating_sub(started.elapsed()));
            }
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

/// Waits until minion `id` answers `test.ping` published by `master`; panics after
/// [`TIMEOUT`].
pub fn wait_answering(master: &Master, id: &str) {
    let tap = master.tap();
    let answered = wait_until(TIMEOUT, || {
        master.publish(id, "test.ping", vec![], None);
        wait_until(Duration::from_secs(2), || !returns(&tap, id).is_empty())
    });
    assert!(
        answered,
        "minion {id} never answered through {}",
        master.entry()
    );
}

/// Python-style YAML list of `entries`.
pub fn yaml_list(entries: &[String]) -> String {
    let quoted: Vec<String> = entries.iter().map(|e| format!("'{e}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Prints a measured figure so that CI logs keep it (`cargo test -- --nocapture`, or the
/// harness's captured output of a failing test).
pub fn report(what: &str, took: Duration) {
    eprintln!("MEASURED {what}: {:.3} s", took.as_secs_f64());
}
