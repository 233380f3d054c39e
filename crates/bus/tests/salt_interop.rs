//! Stock Salt's `salt.utils.event` against a Halite bus, both directions, byte for byte.

mod common;

use common::{start, wait_subscribers, within, Running};
use halite_bus::{BusAddr, BusClient, BusSockets};
use halite_proto::event::{frame_pub, pack_event};
use halite_proto::{value, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use tokio::sync::mpsc;

/// Subscribes with `get_event`, waits for the event Rust fires, prints it (without its
/// `_stamp`, which must parse as ISO 8601), then fires one back with `fire_event`.
const SCRIPT: &str = r#"
import datetime, json, sys
import salt.utils.event

node, sock_dir, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with salt.utils.event.get_event(node, sock_dir=sock_dir, opts=opts, listen=True) as ev:
    print("listening", flush=True)
    got = ev.get_event(wait=60, tag="halite/test/from-rust", full=True)
    if got is None:
        print("timeout", flush=True)
        sys.exit(1)
    data = got["data"]
    datetime.datetime.fromisoformat(data.pop("_stamp"))
    print("received", repr(got["tag"]), repr(data), flush=True)
    ok = ev.fire_event(
        {"str": "h\u00e9llo", "int": -5, "big": 2**40, "bytes": b"\x00\xff",
         "list": [1, "a", None, True], "nested": {"f": 1.5}},
        "halite/test/from-python",
    )
    print("fired", ok, flush=True)
"#;

fn salt_python() -> PathBuf {
    halite_testkit::salt_venv().join("bin/python")
}

struct Python {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Python {
    fn spawn(node: &str, sock_dir: &str, opts: &str) -> Python {
        let mut child = Command::new(salt_python())
            .args(["-c", SCRIPT, node, sock_dir, opts])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the venv python");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Python { child, lines }
    }

    async fn line(&mut self) -> String {
        match within("a line from python", self.lines.recv()).await {
            Some(l) => l,
            None => panic!("python exited early; stderr:\n{}", self.stderr()),
        }
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    fn finish(mut self) {
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "python failed: {status}; stderr:\n{}",
            self.stderr()
        );
    }
}

/// The data Rust fires and the `repr` Python must print for it.
fn rust_event() -> (Value, &'static str) {
    let data = value::map([
        ("str", value::s("héllo")),
        ("int", Value::from(-5)),
        ("bytes", value::bin(vec![0, 255])),
        (
            "list",
            Value::Array(vec![
                Value::from(1),
                value::s("a"),
                Value::Nil,
                Value::Boolean(true),
            ]),
        ),
        ("nested", value::map([("f", Value::F64(1.5))])),
    ]);
    let repr = "received 'halite/test/from-rust' \
        {'str': 'héllo', 'int': -5, 'bytes': b'\\x00\\xff', 'list': [1, 'a', None, True], 'nested': {'f': 1.5}}";
    (data, repr)
}

/// Runs the script against a bus bound at `sockets`; `opts` gives Salt's opts for the bus
/// actually bound.
async fn round_trip(
    sockets: BusSockets,
    node: &str,
    sock_dir: &str,
    opts: impl FnOnce(&Running) -> String,
) {
    let bus = start(&sockets).await;
    let opts = opts(&bus);
    let mut inproc = bus.handle.subscribe();
    let mut sock = BusClient::default()
        .listen(&bus.pub_addr, "halite/test/from-python")
        .await
        .unwrap();
    wait_subscribers(&bus.handle, 2).await;

    let mut py = Python::spawn(node, sock_dir, &opts);
    assert_eq!(py.line().await, "listening");
    wait_subscribers(&bus.handle, 3).await;

    // (a) Rust fires, stock get_event receives.
    let (data, repr) = rust_event();
    bus.handle.fire("halite/test/from-rust", data).unwrap();
    assert_eq!(py.line().await, repr);

    // (b) stock fire_event sends, Rust receives in-process and over the pub socket.
    assert_eq!(py.line().await, "fired True");
    let ev = loop {
        let ev = within("event from python", inproc.recv()).await.unwrap();
        if ev.tag() == "halite/test/from-python" {
            break ev;
        }
    };
    let d = ev.data();
    assert_eq!(value::get_str(d, "str"), Some("héllo"));
    assert_eq!(value::get_i64(d, "int"), Some(-5));
    assert_eq!(value::get_i64(d, "big"), Some(1 << 40));
    assert_eq!(value::get(d, "bytes"), Some(&value::bin(vec![0, 255])));
    assert_eq!(
        value::get(d, "list"),
        Some(&Value::Array(vec![
            Value::from(1),
            value::s("a"),
            Value::Nil,
            Value::Boolean(true)
        ]))
    );
    assert_eq!(
        value::get(d, "nested"),
        Some(&value::map([("f", Value::F64(1.5))]))
    );
    assert!(value::get_str(d, "_stamp").is_some_and(|s| s.ends_with("+00:00")));
    // Python's bytes, re-encoded by Halite, are identical.
    assert_eq!(ev.body(), pack_event(ev.tag(), d));
    assert_eq!(ev.frame(), frame_pub(ev.body()));
    let over_socket = within("socket listener", sock.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(over_socket.frame(), ev.frame());

    py.finish();
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_salt_talks_to_a_master_bus() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().to_str().unwrap();
    round_trip(BusSockets::master(dir.path()), "master", sock_dir, |_| {
        "{}".into()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_salt_talks_to_a_minion_bus() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().to_str().unwrap();
    let sockets = BusSockets::minion(dir.path(), "sha256", "halite-m1").unwrap();
    let opts = |_: &Running| r#"{"id": "halite-m1", "hash_type": "sha256"}"#.to_owned();
    round_trip(sockets, "minion", sock_dir, opts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_salt_talks_to_a_master_bus_in_tcp_mode() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().to_str().unwrap();
    let opts = |bus: &Running| match (&bus.pub_addr, &bus.pull_addr) {
        (BusAddr::Tcp(pub_port), BusAddr::Tcp(pull_port)) => format!(
            r#"{{"ipc_mode": "tcp", "tcp_master_pub_port": {pub_port}, "tcp_master_pull_port": {pull_port}}}"#
        ),
        other => panic!("not tcp: {other:?}"),
    };
    round_trip(BusSockets::tcp(0, 0), "master", sock_dir, opts).await;
}
