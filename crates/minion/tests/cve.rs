//! Salt's security history against a running `halite-minion` (issue 16): a fake master
//! made of `halite_proto`'s master-side functions answers each sign-in as the test
//! chooses — genuinely, or as a man in the middle without the master's private key, or
//! with a genuine answer captured earlier — and publishes what the test asks for.
//!
//! CVE-2022-22935 (auth replies are signed and the minion checks them) and CVE-2022-22936
//! (replayed auth replies and publishes are refused), plus CVE-2020-11652 on the minion
//! (a jid that holds a path writes nothing outside the minion's cache).

mod common;

use common::JOIN;
use halite_proto::crypticle::{self, Crypticle};
use halite_proto::envelope::{
    accept_reply, aes_key_sig, open_aes_request, pillar_reply, publish_frame, ret_reply,
    seal_reply, signed_clear, AcceptKeys, AuthRequest, Request,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PrivateKey, PublicKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long to wait for something that must not happen (a return of a dropped publish).
const QUIET: Duration = Duration::from_secs(3);

/// How the fake master answers a sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The genuine master: accepted.
    Genuine,
    /// A rejection signed with another key than the master's (a man in the middle).
    ForgedReject,
    /// A rejection with no signature at all (the pre-3004.1 reply).
    UnsignedReject,
    /// An acceptance that names the genuine master key but whose AES key and load are
    /// signed by the man in the middle.
    ForgedAccept,
    /// A genuine, signed rejection captured for an earlier sign-in, replayed.
    ReplayedReject,
}

struct State {
    real: PrivateKey,
    forger: PrivateKey,
    real_pub: String,
    publish_port: u16,
    aes: Mutex<String>,
    session: Crypticle,
    minion_pub: Mutex<Option<PublicKey>>,
    answer: Mutex<Answer>,
    /// The answer each sign-in got, in order.
    auths: Mutex<Vec<Answer>>,
    /// The nonce of the first sign-in, for the replayed rejection.
    first_nonce: Mutex<Option<String>>,
    stop: AtomicBool,
}

struct Master {
    state: Arc<State>,
    xpub: zmq::Socket,
    _ctx: zmq::Context,
    returns: mpsc::Receiver<Value>,
    thread: Option<std::thread::JoinHandle<()>>,
    serial: i64,
    /// Every frame published, for replays.
    frames: Vec<Vec<u8>>,
}

impl Master {
    fn start(root: &TempRoot, answer: Answer) -> Master {
        let real = PrivateKey::generate(2048).unwrap();
        let real_pub = clean_key(&real.public_key().unwrap().to_pem().unwrap());
        let state = Arc::new(State {
            forger: PrivateKey::generate(2048).unwrap(),
            real,
            real_pub,
            publish_port: root.publish_port(),
            aes: Mutex::new(crypticle::generate_key_string()),
            session: Crypticle::generate(),
            minion_pub: Mutex::new(None),
            answer: Mutex::new(answer),
            auths: Mutex::new(Vec::new()),
            first_nonce: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_linger(0).unwrap();
        router
            .bind(&format!("tcp://127.0.0.1:{}", root.ret_port()))
            .unwrap();
        let xpub = ctx.socket(zmq::XPUB).unwrap();
        xpub.set_linger(0).unwrap();
        xpub.bind(&format!("tcp://127.0.0.1:{}", root.publish_port()))
            .unwrap();
        let (tx, returns) = mpsc::channel();
        let st = state.clone();
        let thread = std::thread::spawn(move || serve(&st, &router, &tx));
        Master {
            state,
            xpub,
            _ctx: ctx,
            returns,
            thread: Some(thread),
            serial: 0,
            frames: Vec::new(),
        }
    }

    fn answer(&self, answer: Answer) {
        *self.state.answer.lock().unwrap() = answer;
    }

    /// How many sign-ins got `answer`.
    fn auths(&self, answer: Answer) -> usize {
        let auths = self.state.auths.lock().unwrap();
        auths.iter().filter(|a| **a == answer).count()
    }

    fn job(jid: &str, fun: &str, arg: Vec<Value>) -> Value {
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

    /// Replaces the publish AES key (and restarts the serial): the minion must sign in
    /// again to read the next publish.
    fn rotate_aes(&mut self) {
        *self.state.aes.lock().unwrap() = crypticle::generate_key_string();
        self.serial = 0;
    }

    /// Publishes `load` with the next serial, signed by the genuine master.
    fn publish(&mut self, load: &Value) {
        self.serial += 1;
        let mut load = load.clone();
        value::set(&mut load, "serial", Value::from(self.serial));
        let aes = Crypticle::new(&self.state.aes.lock().unwrap()).unwrap();
        let frame =
            publish_frame(&aes, &load, Some((&self.state.real, SigAlgo::Pkcs1v15Sha1))).unwrap();
        self.xpub.send(frame.clone(), 0).unwrap();
        self.frames.push(frame);
    }

    /// Sends a frame again, byte for byte.
    fn replay(&self, n: usize) {
        self.xpub.send(self.frames[n].clone(), 0).unwrap();
    }

    fn next_return(&self, timeout: Duration) -> Option<Value> {
        self.returns.recv_timeout(timeout).ok()
    }

    /// The return of `jid`, if it arrives within `timeout` (returns of other jobs, such as
    /// late answers to [`Master::ping_until_return`], are skipped).
    fn return_of(&self, jid: &str, timeout: Duration) -> Option<Value> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ret = self.next_return(left)?;
            if value::get_str(&ret, "jid") == Some(jid) {
                return Some(ret);
            }
        }
    }

    /// Publishes `test.ping` jobs with fresh jids (`<prefix>-<n>`) until one returns: the
    /// minion may be signing in again and not yet subscribed.
    fn ping_until_return(&mut self, prefix: &str) -> Value {
        for n in 0..30 {
            self.publish(&Master::job(&format!("{prefix}-{n}"), "test.ping", vec![]));
            if let Some(ret) = self.next_return(Duration::from_secs(3)) {
                return ret;
            }
        }
        panic!("the minion never returned a {prefix} job");
    }
}

impl Drop for Master {
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

fn sign_in_reply(st: &State, req: &AuthRequest) -> Value {
    let answer = *st.answer.lock().unwrap();
    st.auths.lock().unwrap().push(answer);
    {
        let mut first = st.first_nonce.lock().unwrap();
        if first.is_none() {
            *first = Some(req.nonce.clone());
        }
    }
    let minion_pub = PublicKey::from_pem(req.pub_pem.as_bytes()).unwrap();
    *st.minion_pub.lock().unwrap() = Some(minion_pub.clone());
    let aes = st.aes.lock().unwrap().clone();
    let accept = |signer: &PrivateKey| {
        accept_reply(
            signer,
            &minion_pub,
            req,
            &AcceptKeys {
                master_pub: &st.real_pub,
                publish_port: st.publish_port,
                aes: &aes,
                session: st.session.key_string(),
                aes_sig: &aes_key_sig(signer, &aes).unwrap(),
            },
        )
        .unwrap()
    };
    match answer {
        Answer::Genuine => accept(&st.real),
        Answer::ForgedAccept => accept(&st.forger),
        Answer::ForgedReject => ret_reply(&st.forger, req, Value::Boolean(false)).unwrap(),
        Answer::UnsignedReject => map([
            ("enc", s("clear")),
            (
                "load",
                map([
                    ("ret", Value::Boolean(false)),
                    ("nonce", s(req.nonce.clone())),
                ]),
            ),
        ]),
        Answer::ReplayedReject => {
            let old = st.first_nonce.lock().unwrap().clone().unwrap_or_default();
            signed_clear(
                &st.real,
                &map([("ret", Value::Boolean(false)), ("nonce", s(old))]),
                req.sig_algo,
            )
            .unwrap()
        }
    }
}

fn answer(st: &State, body: &[u8], returns: &mpsc::Sender<Value>) -> Value {
    match Request::parse(body, usize::MAX) {
        Ok(Request::Clear { load, .. }) => match AuthRequest::parse(&load) {
            Ok(req) => sign_in_reply(st, &req),
            Err(e) => e.reply(),
        },
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
                    let minion_pub = st.minion_pub.lock().unwrap().clone().unwrap();
                    pillar_reply(
                        &st.real,
                        &minion_pub,
                        enc_algo,
                        sig_algo,
                        &Value::Map(vec![]),
                        &nonce,
                    )
                    .unwrap()
                }
                Some("_return") => {
                    let _ = returns.send(req.load.clone());
                    seal_reply(&st.session, &Value::Nil, Some(&nonce)).unwrap()
                }
                _ => seal_reply(&st.session, &Value::Boolean(true), Some(&nonce)).unwrap(),
            }
        }
        Err(_) => s("bad load"),
    }
}

/// Writes `id`'s config and pins `master_pub` in its pki directory, as a minion that
/// signed in to the genuine master before has it.
fn pinned_minion(root: &TempRoot, id: &str, master_pub: &str) {
    root.add_minion(id);
    let pki = root.minion_pki_dir(id);
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::write(pki.join("minion_master.pub"), master_pub).unwrap();
}

/// Waits until `count()` reaches `n` while `minion` runs; fails at once if it exits.
fn wait_for_count(minion: &Proc, what: &str, n: usize, count: impl Fn() -> usize) {
    let reached = wait_until(JOIN, || count() >= n || !minion.is_running());
    assert!(minion.is_running(), "the minion exited during {what}");
    assert!(reached, "{what}: {} of {n}", count());
}

/// CVE-2022-22935: a minion that knows its master's key refuses sign-in replies the master
/// did not sign — a rejection signed by another key, an unsigned rejection, an acceptance
/// whose keys are signed by another key — and neither exits (a forged rejection must not
/// take it off the network), nor replaces the pinned key, nor uses the forged AES key. The
/// genuine master is accepted afterwards and its job runs.
#[test]
fn cve_2022_22935_minion_refuses_unsigned_or_wrongly_signed_auth_replies() {
    let root = TempRoot::new();
    let mut master = Master::start(&root, Answer::ForgedReject);
    let real_pub = master.state.real_pub.clone();
    pinned_minion(&root, "c1", &real_pub);
    let mut minion = start_halite_minion(&root, "c1");
    let log = root.minion_log("c1");

    let stages = [
        (
            Answer::ForgedReject,
            "The payload signature did not validate.",
        ),
        (Answer::UnsignedReject, "Sign-in attempt failed"),
        (
            Answer::ForgedAccept,
            "The AES key signature from the master did not validate",
        ),
    ];
    for (answer, line) in stages {
        let offset = file_len(&log);
        master.answer(answer);
        let seen = master.auths(answer);
        wait_for_count(&minion, &format!("{answer:?} sign-ins"), seen + 2, || {
            master.auths(answer)
        });
        wait_for_log_from(&log, offset, line, JOIN);
        assert!(
            minion.wait_exit(Duration::from_millis(100)).is_none(),
            "the minion exited on a {answer:?} reply: {}",
            log_tail(&log, 20)
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.minion_pki_dir("c1").join("minion_master.pub")).unwrap(),
        real_pub,
        "the pinned master key was replaced"
    );

    master.answer(Answer::Genuine);
    let ret = master.ping_until_return("genuine");
    assert_eq!(value::get(&ret, "return"), Some(&Value::Boolean(true)));
}

/// CVE-2022-22936 on the minion: a publish frame sent again byte for byte is dropped (its
/// serial is not above the last), a genuine rejection captured for an earlier sign-in and
/// replayed later is refused (its nonce is not the request's) without the minion exiting,
/// and after the minion signed in again a job id it already ran is not run twice.
#[test]
fn cve_2022_22936_minion_refuses_replayed_publishes_and_auth_replies() {
    let root = TempRoot::new();
    let mut master = Master::start(&root, Answer::Genuine);
    root.add_minion("r1");
    let mut minion = start_halite_minion(&root, "r1");
    let log = root.minion_log("r1");

    master.ping_until_return("ready");
    master.publish(&Master::job("1", "test.ping", vec![]));
    let first = master.return_of("1", JOIN).expect("job 1 returned");
    assert_eq!(value::get(&first, "return"), Some(&Value::Boolean(true)));
    let job1 = master.frames.len() - 1;

    // The same frame again.
    let offset = file_len(&log);
    master.replay(job1);
    wait_for_log_from(
        &log,
        offset,
        "A message with an invalid serial was received.",
        JOIN,
    );
    assert!(
        master.return_of("1", QUIET).is_none(),
        "a replayed publish ran"
    );

    // A genuine rejection of an earlier sign-in, replayed at the next one (the minion signs
    // in again when a publish does not decrypt with its AES key).
    let offset = file_len(&log);
    master.answer(Answer::ReplayedReject);
    master.rotate_aes();
    master.publish(&Master::job("2", "test.ping", vec![]));
    wait_for_log_from(&log, offset, "The payload nonce did not validate.", JOIN);
    assert!(
        minion.wait_exit(Duration::from_millis(100)).is_none(),
        "the minion exited on a replayed rejection: {}",
        log_tail(&log, 20)
    );
    master.answer(Answer::Genuine);
    let back = master.ping_until_return("back");
    assert_eq!(value::get(&back, "return"), Some(&Value::Boolean(true)));

    // Job 1 again with a fresh serial: the minion remembers the jid.
    let offset = file_len(&log);
    master.publish(&Master::job("1", "test.ping", vec![]));
    wait_for_log_from(
        &log,
        offset,
        "Job 1 was already started; duplicate publish dropped",
        JOIN,
    );
    assert!(master.return_of("1", QUIET).is_none(), "job 1 ran twice");
}

/// CVE-2020-11652 on the minion: a jid that Salt's `is_jid` accepts but that holds a path
/// runs its job and returns, and no file is written outside the minion's directories
/// (Salt writes `proc/<jid>` as is).
#[test]
fn cve_2020_11652_a_jid_holding_a_path_writes_nothing_outside_the_minion_cache() {
    let root = TempRoot::new();
    let mut master = Master::start(&root, Answer::Genuine);
    root.add_minion("t1");
    let _minion = start_halite_minion(&root, "t1");
    master.ping_until_return("ready");
    let marker = format!("halite-cve-2020-11652-minion-{}", std::process::id());
    // A jid is any string to the minion; this one resolves from `proc/` whatever exists
    // there (a prefix naming a missing directory would make the write fail anyway).
    let jid = format!("{}tmp/{marker}", "../".repeat(12));
    master.publish(&Master::job(&jid, "test.sleep", vec![Value::from(4)]));
    // While the job runs (Salt keeps `proc/<jid>` until it ends), and after.
    let outside = std::path::Path::new("/tmp").join(&marker);
    assert!(
        !wait_until(Duration::from_secs(4), || outside.exists()),
        "{} was written",
        outside.display()
    );
    let ret = master.return_of(&jid, JOIN).expect("the job returned");
    assert_eq!(value::get(&ret, "return"), Some(&Value::Boolean(true)));
    assert!(!outside.exists());
    let mut dirs = vec![root.path().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            assert!(
                !path.to_string_lossy().contains(&marker),
                "{} was written",
                path.display()
            );
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            }
        }
    }
}
