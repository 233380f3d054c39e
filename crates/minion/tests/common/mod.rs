//! Shared steps of the minion's integration tests: CLI helpers for stock Salt and Halite,
//! and a tiny fake master built from `halite_proto`'s master-side functions.

#![allow(dead_code)]

pub mod seed;

use halite_proto::crypticle::{self, Crypticle};
use halite_proto::envelope::{
    accept_reply, aes_key_sig, open_aes_request, pillar_reply, publish_frame, ret_reply,
    seal_reply, AcceptKeys, AuthRequest, Request,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PrivateKey, PublicKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::{
    run_halite, run_stock_salt, run_stock_salt_key, start_halite_minion, wait_for_log, wait_until,
    Proc, TempRoot,
};
use serde_json::Map;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a minion may take to start, authenticate and answer.
pub const JOIN: Duration = Duration::from_secs(90);

/// Merges the JSON documents of a CLI's `--out json` output into `{minion: return}`;
/// anything that is not JSON gives an empty map.
pub fn returns(stdout: &[u8]) -> Map<String, serde_json::Value> {
    let mut merged = Map::new();
    for doc in serde_json::Deserializer::from_slice(stdout).into_iter::<serde_json::Value>() {
        match doc {
            Ok(serde_json::Value::Object(m)) => merged.extend(m),
            _ => return Map::new(),
        }
    }
    merged
}

/// Which command-line client drives the minions.
#[derive(Clone, Copy, Debug)]
pub enum Cli {
    /// Stock `salt` from the venv.
    Stock,
    /// Halite's `halite`.
    Halite,
}

impl Cli {
    /// Runs `<cli> <args> --out json` and returns `{minion: return}`.
    pub fn json(self, root: &TempRoot, args: &[&str]) -> Map<String, serde_json::Value> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--out", "json"]);
        let out = match self {
            Cli::Stock => run_stock_salt(root, all),
            Cli::Halite => run_halite(root, all),
        };
        returns(&out.stdout)
    }

    /// Waits until `'*' test.ping` gets `true` from every id in `ids`.
    pub fn wait_for_pings(self, root: &TempRoot, ids: &[&str]) {
        let mut last = Map::new();
        let ok = wait_until(JOIN, || {
            last = self.json(root, &["*", "test.ping", "-t", "10"]);
            ids.iter()
                .all(|id| last.get(*id) == Some(&serde_json::Value::Bool(true)))
        });
        assert!(
            ok,
            "minions {ids:?} did not all answer test.ping through {self:?}; last answer: {last:?}"
        );
    }
}

/// `salt-key -L --out json` of the stock key tool (it reads the same pki dir either way).
pub fn pending_keys(root: &TempRoot) -> Vec<String> {
    let out = run_stock_salt_key(root, ["-L", "--out", "json"]);
    let lists: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    lists["minions_pre"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Starts a Halite minion for each of `ids` against the master of `root`, and waits until
/// all their keys are pending and each minion has logged that the master cached its key.
pub fn start_minions_until_pending(root: &TempRoot, ids: &[&str]) -> Vec<Proc> {
    let minions = ids.iter().map(|id| start_halite_minion(root, id)).collect();
    let arrived = wait_until(JOIN, || {
        let mut pending = pending_keys(root);
        pending.sort();
        pending == ids
    });
    assert!(arrived, "keys never all pending: {:?}", pending_keys(root));
    for id in ids {
        wait_for_log(
            &root.minion_log(id),
            "The Salt Master has cached the public key for this node",
            JOIN,
        );
    }
    minions
}

// ----------------------------------------------------------------------------- fake master

/// What the fake master's request thread shares with the test.
struct State {
    key: PrivateKey,
    pub_clean: String,
    publish_port: u16,
    aes: Mutex<String>,
    session: Crypticle,
    minion_pub: Mutex<Option<PublicKey>>,
    /// `_auth` requests answered "pending" before the key is accepted.
    pending: AtomicU32,
    /// `_auth` requests seen.
    auths: AtomicU32,
    /// `_return` requests to answer with "bad load".
    bad_loads: AtomicU32,
    /// Answer every sign-in with "rejected".
    reject: AtomicBool,
    /// How long the next `_pillar` reply is held back.
    hold_pillar: Mutex<Duration>,
    stop: AtomicBool,
}

/// A master made of `halite_proto`'s master-side functions: it accepts one minion's
/// `_auth`, serves an empty pillar, records `_return` loads, and publishes whatever the
/// test asks for, signed or not, on an XPUB socket (which tells when the minion subscribed).
pub struct FakeMaster {
    state: Arc<State>,
    xpub: zmq::Socket,
    _ctx: zmq::Context,
    returns: mpsc::Receiver<Value>,
    thread: Option<std::thread::JoinHandle<()>>,
    serial: i64,
}

impl FakeMaster {
    /// Binds 127.0.0.1:`ret_port` and 127.0.0.1:`publish_port`; `pending` sign-ins are
    /// answered "pending" before the minion is accepted.
    pub fn start(ret_port: u16, publish_port: u16, pending: u32) -> FakeMaster {
        let key = PrivateKey::generate(2048).unwrap();
        let pub_clean = clean_key(&key.public_key().unwrap().to_pem().unwrap());
        let state = Arc::new(State {
            key,
            pub_clean,
            publish_port,
            aes: Mutex::new(crypticle::generate_key_string()),
            session: Crypticle::generate(),
            minion_pub: Mutex::new(None),
            pending: AtomicU32::new(pending),
            auths: AtomicU32::new(0),
            bad_loads: AtomicU32::new(0),
            reject: AtomicBool::new(false),
            hold_pillar: Mutex::new(Duration::ZERO),
            stop: AtomicBool::new(false),
        });
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_linger(0).unwrap();
        router.bind(&format!("tcp://127.0.0.1:{ret_port}")).unwrap();
        let xpub = ctx.socket(zmq::XPUB).unwrap();
        xpub.set_linger(0).unwrap();
        xpub.bind(&format!("tcp://127.0.0.1:{publish_port}"))
            .unwrap();
        let (tx, returns) = mpsc::channel();
        let st = state.clone();
        let thread = std::thread::spawn(move || serve(&st, &router, &tx));
        FakeMaster {
            state,
            xpub,
            _ctx: ctx,
            returns,
            thread: Some(thread),
            serial: 0,
        }
    }

    /// The master's private key.
    pub fn key(&self) -> &PrivateKey {
        &self.state.key
    }

    /// Sign-ins seen so far.
    pub fn auths(&self) -> u32 {
        self.state.auths.load(Ordering::SeqCst)
    }

    /// Answers the next `n` `_return` requests with `"bad load"`.
    pub fn bad_load_next(&self, n: u32) {
        self.state.bad_loads.store(n, Ordering::SeqCst);
    }

    /// Rejects every sign-in from now on.
    pub fn reject_all(&self) {
        self.state.reject.store(true, Ordering::SeqCst);
    }

    /// Holds the next `_pillar` reply back for `d` (a master slow to answer a connecting
    /// minion); nothing else is answered meanwhile.
    pub fn hold_next_pillar(&self, d: Duration) {
        *self.state.hold_pillar.lock().unwrap() = d;
    }

    /// The current publish AES key.
    pub fn aes_key(&self) -> String {
        self.state.aes.lock().unwrap().clone()
    }

    /// Publishes `load` with `serial` under the AES key `aes` (an old one, say), signed
    /// by this master.
    pub fn publish_under(&self, aes: &str, load: &Value, serial: i64) {
        let mut load = load.clone();
        value::set(&mut load, "serial", Value::from(serial));
        let aes = Crypticle::new(aes).unwrap();
        let frame =
            publish_frame(&aes, &load, Some((&self.state.key, SigAlgo::Pkcs1v15Sha1))).unwrap();
        self.xpub.send(frame, 0).unwrap();
    }

    /// Replaces the publish AES key (the minion must sign in again to read publishes).
    pub fn rotate_aes(&mut self) {
        *self.state.aes.lock().unwrap() = crypticle::generate_key_string();
        self.serial = 0;
    }

    /// Waits until the minion subscribed to the publish port.
    pub fn wait_for_subscriber(&self, timeout: Duration) {
        let ms = i64::try_from(timeout.as_millis()).unwrap();
        assert!(
            self.xpub.poll(zmq::POLLIN, ms).unwrap() > 0,
            "the minion never subscribed"
        );
        let sub = self.xpub.recv_bytes(0).unwrap();
        assert_eq!(sub, [1], "unexpected subscription message {sub:?}");
    }

    /// A publish load for `fun` with `arg`, targeted at every minion.
    pub fn job(jid: &str, fun: &str, arg: Vec<Value>) -> Value {
        map([
            ("fun", s(fun)),
            ("arg", Value::Array(arg)),
            ("tgt", s("*")),
            ("jid", s(jid)),
            ("ret", s("")),
            ("tgt_type", s("glob")),
            ("user", s("root")),
        ])
    }

    /// The next serial.
    pub fn next_serial(&mut self) -> i64 {
        self.serial += 1;
        self.serial
    }

    /// Publishes `load` with `serial`, signed by `signer` when given.
    pub fn publish_with(&self, load: &Value, serial: i64, signer: Option<&PrivateKey>) {
        let mut load = load.clone();
        value::set(&mut load, "serial", Value::from(serial));
        let aes = Crypticle::new(&self.state.aes.lock().unwrap()).unwrap();
        let frame = publish_frame(&aes, &load, signer.map(|k| (k, SigAlgo::Pkcs1v15Sha1))).unwrap();
        self.xpub.send(frame, 0).unwrap();
    }

    /// Publishes `load` with the next serial, signed by this master.
    pub fn publish(&mut self, load: &Value) {
        let serial = self.next_serial();
        self.publish_with(load, serial, Some(&self.state.key.clone()));
    }

    /// Sends raw bytes on the publish port.
    pub fn publish_raw(&self, frames: &[&[u8]]) {
        self.xpub.send_multipart(frames, 0).unwrap();
    }

    /// The next `_return` load, if one arrives within `timeout`.
    pub fn next_return(&self, timeout: Duration) -> Option<Value> {
        self.returns.recv_timeout(timeout).ok()
    }

    /// Every `_return` that arrives within `timeout`.
    pub fn drain_returns(&self, timeout: Duration) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(r) = self.next_return(timeout) {
            out.push(r);
        }
        out
    }
}

impl Drop for FakeMaster {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(st: &State, router: &zmq::Socket, returns: &mpsc::Sender<Value>) {
    while !st.stop.load(Ordering::SeqCst) {
        if router.poll(zmq::POLLIN, 100).unwrap_or(0) == 0 {
            continue;
        }
        let Ok(parts) = router.recv_multipart(0) else {
            continue;
        };
        let (Some(peer), Some(body)) = (parts.first(), parts.last()) else {
            continue;
        };
        let reply = answer(st, body, returns);
        let _ = router.send_multipart([peer.as_slice(), b"", &value::encode(&reply)], 0);
    }
}

fn answer(st: &State, body: &[u8], returns: &mpsc::Sender<Value>) -> Value {
    match Request::parse(body, usize::MAX) {
        Ok(Request::Clear { load, .. }) => {
            st.auths.fetch_add(1, Ordering::SeqCst);
            let req = AuthRequest::parse(&load).unwrap();
            if st.reject.load(Ordering::SeqCst) {
                return ret_reply(&st.key, &req, Value::Boolean(false)).unwrap();
            }
            if st.pending.load(Ordering::SeqCst) > 0 {
                st.pending.fetch_sub(1, Ordering::SeqCst);
                return ret_reply(&st.key, &req, Value::Boolean(true)).unwrap();
            }
            let minion_pub = PublicKey::from_pem(req.pub_pem.as_bytes()).unwrap();
            let aes = st.aes.lock().unwrap().clone();
            let reply = accept_reply(
                &st.key,
                &minion_pub,
                &req,
                &AcceptKeys {
                    master_pub: &st.pub_clean,
                    publish_port: st.publish_port,
                    aes: &aes,
                    session: st.session.key_string(),
                    aes_sig: &aes_key_sig(&st.key, &aes).unwrap(),
                },
            )
            .unwrap();
            *st.minion_pub.lock().unwrap() = Some(minion_pub);
            reply
        }
        Ok(Request::Aes {
            id,
            blob,
            enc_algo,
            sig_algo,
            ..
        }) => {
            let Ok(req) = open_aes_request(&st.session, id, blob) else {
                return s("bad load");
            };
            let nonce = req.nonce.unwrap_or_default();
            match value::get_str(&req.load, "cmd") {
                Some("_pillar") => {
                    let hold = std::mem::take(&mut *st.hold_pillar.lock().unwrap());
                    std::thread::sleep(hold);
                    let minion_pub = st.minion_pub.lock().unwrap().clone().unwrap();
                    pillar_reply(
                        &st.key,
                        &minion_pub,
                        enc_algo,
                        sig_algo,
                        &map([("role", s("fake"))]),
                        &nonce,
                    )
                    .unwrap()
                }
                Some("_return") => {
                    if st.bad_loads.load(Ordering::SeqCst) > 0 {
                        st.bad_loads.fetch_sub(1, Ordering::SeqCst);
                        return s("bad load");
                    }
                    let _ = returns.send(req.load.clone());
                    seal_reply(&st.session, &Value::Nil, Some(&nonce)).unwrap()
                }
                _ => seal_reply(&st.session, &Value::Boolean(true), Some(&nonce)).unwrap(),
            }
        }
        Err(_) => s("bad load"),
    }
}

// ----------------------------------------------------------------------- shared job checks

/// The checks both masters must pass with Halite minions `ids` (two of them): arguments,
/// commands, grains, every target type the issue names, and a running job seen by
/// `saltutil.running`.
pub fn check_jobs(root: &TempRoot, cli: Cli, ids: [&str; 2]) {
    use serde_json::json;
    let [a, b] = ids;
    let r = cli.json(root, &[a, "test.arg", "1", "two", "k=v"]);
    assert_eq!(r[a]["args"], json!([1, "two"]), "test.arg: {r:?}");
    assert_eq!(r[a]["kwargs"]["k"], json!("v"), "test.arg: {r:?}");
    assert_eq!(
        r[a]["kwargs"]["__pub_fun"],
        json!("test.arg"),
        "test.arg: {r:?}"
    );

    let r = cli.json(root, &["*", "cmd.run", "echo hi"]);
    for id in ids {
        assert_eq!(r[id], json!("hi"), "cmd.run on {id}: {r:?}");
    }
    let r = cli.json(root, &[a, "cmd.run_all", "echo out; echo err >&2; exit 3"]);
    assert_eq!(r[a]["retcode"], json!(3), "cmd.run_all: {r:?}");
    assert_eq!(r[a]["stdout"], json!("out"), "cmd.run_all: {r:?}");
    assert_eq!(r[a]["stderr"], json!("err"), "cmd.run_all: {r:?}");

    let r = cli.json(root, &[a, "grains.items"]);
    assert_eq!(r[a]["id"], json!(a), "grains.items: {r:?}");
    let os = r[a]["os"]
        .as_str()
        .unwrap_or_else(|| panic!("no os grain: {r:?}"))
        .to_owned();

    let keys = |r: &Map<String, serde_json::Value>| {
        let mut k: Vec<String> = r.keys().cloned().collect();
        k.sort();
        k
    };
    let r = cli.json(root, &["-G", &format!("os:{os}"), "test.ping"]);
    assert_eq!(keys(&r), [a, b], "-G os:{os}: {r:?}");
    let r = cli.json(root, &["-G", "os:NoSuchOs", "test.ping", "-t", "3"]);
    assert!(
        r.values().all(|v| v != &json!(true)),
        "-G os:NoSuchOs: {r:?}"
    );
    let r = cli.json(
        root,
        &["-C", &format!("G@os:{os} and L@{a},{b}"), "test.ping"],
    );
    assert_eq!(keys(&r), [a, b], "-C: {r:?}");
    let r = cli.json(root, &["-C", &format!("G@os:{os} and L@{a}"), "test.ping"]);
    assert_eq!(keys(&r), [a], "-C: {r:?}");
    let r = cli.json(root, &["-E", &format!("{}$", regex_escape(b)), "test.ping"]);
    assert_eq!(keys(&r), [b], "-E: {r:?}");

    // A job longer than the CLI timeout: the master's find_job probes see it running, so
    // the CLI keeps waiting and gets the return.
    let r = cli.json(root, &[a, "test.sleep", "6", "-t", "2"]);
    assert_eq!(r[a], json!(true), "test.sleep past the timeout: {r:?}");

    // A job that runs for a while is listed by saltutil.running.
    let all = [a, "test.sleep", "10", "--async"];
    let out = match cli {
        Cli::Stock => run_stock_salt(root, all),
        Cli::Halite => run_halite(root, all),
    };
    assert!(
        out.status.success(),
        "--async failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut last = Map::new();
    let seen = wait_until(Duration::from_secs(8), || {
        last = cli.json(root, &[a, "saltutil.running"]);
        last[a]
            .as_array()
            .is_some_and(|jobs| jobs.iter().any(|j| j["fun"] == json!("test.sleep")))
    });
    assert!(seen, "saltutil.running never showed test.sleep: {last:?}");
}

fn regex_escape(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}
