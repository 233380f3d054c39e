//! A master killed in the middle of a flood of returns loses none it acknowledged (issue 15,
//! item 1): a minion's `_return` is answered only once the return is written (redb, and
//! with `job_cache: True` its `local_cache` file), so whatever a minion was told the master
//! has is on disk when the master dies with SIGKILL.
//!
//! Simulated minions (the real sign-in and encrypted requests of `halite_proto::minion`,
//! one ZeroMQ REQ socket per sending thread) flood a real `halite-master` with `_return`s,
//! one per (jid, minion), each with its own `return` value, and record every one whose
//! reply arrived and opened (the encrypted `Nil`). After a few hundred acknowledgements the
//! master gets SIGKILL (kill(2) straight from the test, so it dies within microseconds of
//! the moment noted) while the flood goes on. Returns sent before that moment and never
//! answered were in flight at the kill; a flood whose kill found none proves nothing and is
//! run again on a fresh root (at most [`ATTEMPTS`] times). The test then opens
//! `cachedir/jobs.redb` itself and finds every acknowledged return there with its value
//! (and, with `job_cache: True`, its `return.p` in the tree; with `job_cache: False`, none),
//! restarts the master on the files the crash left, and asks `halite-run jobs.lookup_jid`
//! for one.
//!
//! Run against a master from before acknowledgements waited for the write, every flood
//! failed: hundreds of acknowledged returns, a handful of them in `jobs.redb`.
//!
//! The jids are plain 20-digit counters with no published load behind them: the master
//! keeps such returns, as Salt does.

mod common;

use common::halite_run_json;
use halite_jobcache::{JobStore, LocalCacheWriter, RedbJobStore};
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{
    aes_request, auth_request, new_nonce, open_auth_reply, open_reply, AuthOutcome, Requester,
    SignIn, SignInState,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{EncAlgo, PrivateKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Simulated minions.
const MINIONS: usize = 4;
/// Sending threads (each with one request in flight at a time), spread over the minions.
const SENDERS: usize = 8;
/// Acknowledged returns before the master is killed.
const KILL_AFTER: usize = 300;
/// The first 14 digits of every jid; a 6-digit counter completes it.
const JID_PREFIX: &str = "20261124120000";
/// Floods tried before giving up on a kill that lands while returns are in flight.
const ATTEMPTS: usize = 3;
/// How long a request may wait for its reply while the master runs (a failure, not pacing).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a sender still reads after the kill: replies the master sent before it died are
/// already in this machine's socket buffers.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);
const ENC: EncAlgo = EncAlgo::OaepSha1;
const SIG: SigAlgo = SigAlgo::Pkcs1v15Sha1;

/// A signed-in simulated minion.
struct Minion {
    id: String,
    session: Crypticle,
    tok: Vec<u8>,
}

/// One `_return` sent.
#[derive(Debug, Clone)]
struct Sent {
    jid: String,
    minion: String,
    value: String,
}

/// What the senders saw, shared with the test thread. Times are microseconds since the
/// flood started.
#[derive(Default)]
struct Flood {
    acked: Mutex<Vec<Sent>>,
    acked_count: AtomicUsize,
    sent: Mutex<Vec<Sent>>,
    /// When each request that never got a reply was sent.
    unanswered: Mutex<Vec<u64>>,
    /// Replies that were not the encrypted `Nil` a stored return gets, and replies that
    /// did not come while the master ran.
    unexpected: Mutex<Vec<String>>,
    /// Set once the master is dead: senders stop.
    killed: AtomicBool,
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Signs `id` in with a new key (the master auto-accepts) and checks the reply as a minion
/// does, with the master's key pinned.
fn sign_in(root: &TempRoot, id: &str) -> Minion {
    let key = PrivateKey::generate(2048).expect("an RSA key");
    let pub_clean = clean_key(&key.public_key().unwrap().to_pem().unwrap());
    let nonce = new_nonce();
    let body = auth_request(&SignIn {
        id,
        pub_clean: &pub_clean,
        nonce: &nonce,
        enc_algo: ENC,
        sig_algo: SIG,
        autosign_grains: None,
        token: None,
    })
    .unwrap();
    let ctx = zmq::Context::new();
    let reply = halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{}", root.ret_port()),
        &value::encode(&body),
        Duration::from_secs(30),
    )
    .expect("the master answers _auth within 30 s");
    let reply = value::decode(&reply).expect("the _auth reply is msgpack");
    let master_pub = std::fs::read_to_string(root.master_pki_dir().join("master.pub")).unwrap();
    let outcome = open_auth_reply(
        &reply,
        &SignInState {
            key: &key,
            nonce: &nonce,
            pinned: Some(&master_pub),
            token: None,
            enc_algo: ENC,
            sig_algo: SIG,
        },
    );
    let Ok(AuthOutcome::Accepted(creds)) = outcome else {
        panic!("{id} was not accepted: {outcome:?}");
    };
    Minion {
        id: id.to_owned(),
        session: Crypticle::new(&creds.session).expect("a session key"),
        tok: key.x931_sign(b"salt").unwrap(),
    }
}

/// The reply to one request, read in slices so the kill is noticed: `None` when none came
/// within [`REPLY_TIMEOUT`], or within [`DRAIN_AFTER_KILL`] of the kill.
fn await_reply(sock: &zmq::Socket, flood: &Flood) -> Option<Vec<u8>> {
    let asked = Instant::now();
    let mut kill_seen: Option<Instant> = None;
    loop {
        if sock.poll(zmq::POLLIN, 100).expect("zmq poll") > 0 {
            return Some(sock.recv_bytes(0).expect("zmq recv"));
        }
        if flood.killed.load(Ordering::SeqCst) {
            let seen = *kill_seen.get_or_insert_with(Instant::now);
            if seen.elapsed() >= DRAIN_AFTER_KILL {
                return None;
            }
        } else if asked.elapsed() >= REPLY_TIMEOUT {
            return None;
        }
    }
}

/// One sender: `_return`s for `minion`, each under the next jid of `counter`, one at a time,
/// until a reply does not come (the master was killed).
fn send_returns(
    ctx: &zmq::Context,
    port: u16,
    minion: &Minion,
    counter: &AtomicUsize,
    flood: &Flood,
    start: Instant,
) {
    let sock = ctx.socket(zmq::REQ).expect("a REQ socket");
    sock.set_linger(0).unwrap();
    sock.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();
    let who = Requester {
        id: &minion.id,
        tok: &minion.tok,
        enc_algo: ENC,
        sig_algo: SIG,
    };
    while !flood.killed.load(Ordering::SeqCst) {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let sent = Sent {
            jid: format!("{JID_PREFIX}{n:06}"),
            minion: minion.id.clone(),
            value: format!("return {n} of {}", minion.id),
        };
        let load = map([
            ("cmd", s("_return")),
            ("id", s(minion.id.as_str())),
            ("jid", s(sent.jid.as_str())),
            ("fun", s("test.echo")),
            ("fun_args", Value::Array(vec![s(sent.value.as_str())])),
            ("return", s(sent.value.as_str())),
            ("retcode", Value::from(0)),
            ("success", Value::Boolean(true)),
        ]);
        let nonce = new_nonce();
        let body = aes_request(&minion.session, &who, load, &nonce, unix_now()).unwrap();
        let sent_at = start.elapsed().as_micros() as u64;
        flood.sent.lock().unwrap().push(sent.clone());
        sock.send(value::encode(&body), 0).expect("zmq send");
        let Some(reply) = await_reply(&sock, flood) else {
            if flood.killed.load(Ordering::SeqCst) {
                flood.unanswered.lock().unwrap().push(sent_at);
            } else {
                flood.unexpected.lock().unwrap().push(format!(
                    "no reply within {REPLY_TIMEOUT:?} to the return for {}",
                    sent.jid
                ));
            }
            return;
        };
        // Acknowledged: the reply is the encrypted `Nil` bound to this request's nonce.
        let opened = value::decode(&reply)
            .ok()
            .filter(|r| value::bytes_of(r).is_some())
            .map(|r| open_reply(&minion.session, &r, &nonce));
        match opened {
            Some(Ok(Value::Nil)) => {
                flood.acked.lock().unwrap().push(sent);
                flood.acked_count.fetch_add(1, Ordering::SeqCst);
            }
            other => {
                flood
                    .unexpected
                    .lock()
                    .unwrap()
                    .push(format!("reply to the return for {}: {other:?}", sent.jid));
                return;
            }
        }
    }
}

/// The `return` in a `local_cache` `return.p`.
fn return_in_tree(file: &std::path::Path) -> Option<Value> {
    let bytes = std::fs::read(file).ok()?;
    value::get(&value::decode(&bytes).ok()?, "return").cloned()
}

/// What one flood left when the master was killed.
struct Crash {
    acked: Vec<Sent>,
    sent: Vec<Sent>,
    /// Returns sent before SIGKILL and never acknowledged.
    in_flight_at_kill: usize,
}

/// Signs the minions in, floods `master` with returns from [`SENDERS`] threads and kills it
/// with SIGKILL after [`KILL_AFTER`] acknowledgements, while the flood goes on.
fn flood_then_kill(root: &TempRoot, mut master: Proc) -> Crash {
    let minions: Vec<Minion> = (0..MINIONS)
        .map(|i| sign_in(root, &format!("crash-{i}")))
        .collect();
    let flood = Flood::default();
    let counter = AtomicUsize::new(0);
    let ctx = zmq::Context::new();
    let start = Instant::now();
    let kill_started = std::thread::scope(|scope| {
        for t in 0..SENDERS {
            let (ctx, flood, counter) = (&ctx, &flood, &counter);
            let minion = &minions[t % MINIONS];
            let port = root.ret_port();
            scope.spawn(move || send_returns(ctx, port, minion, counter, flood, start));
        }
        let enough = wait_until(REPLY_TIMEOUT, || {
            flood.acked_count.load(Ordering::SeqCst) >= KILL_AFTER
                || !flood.unexpected.lock().unwrap().is_empty()
        });
        let kill_started = start.elapsed().as_micros() as u64;
        master.sigkill_now();
        master.kill();
        flood.killed.store(true, Ordering::SeqCst);
        assert!(
            enough,
            "the flood did not reach {KILL_AFTER} acknowledged returns in {REPLY_TIMEOUT:?} ({} so far)",
            flood.acked_count.load(Ordering::SeqCst)
        );
        kill_started
    });
    let unexpected = flood.unexpected.into_inner().unwrap();
    assert!(unexpected.is_empty(), "unexpected replies: {unexpected:?}");
    let unanswered = flood.unanswered.into_inner().unwrap();
    Crash {
        acked: flood.acked.into_inner().unwrap(),
        sent: flood.sent.into_inner().unwrap(),
        // Later ones went out while the master was dying or dead.
        in_flight_at_kill: unanswered.iter().filter(|&&t| t < kill_started).count(),
    }
}

/// Every acknowledged return is in `jobs.redb` with its value; with `job_cache`, each is
/// in the `local_cache` tree or recorded in redb as owed to it; without, none is there.
fn assert_nothing_acknowledged_was_lost(root: &TempRoot, job_cache: bool, crash: &Crash) {
    let cachedir = root.master_root().join("cache");
    let store = RedbJobStore::open(cachedir.join("jobs.redb")).expect("the job store opens");
    let stored_value = |r: &Sent| -> Option<Value> {
        let returns = store.get_returns(&r.jid).expect("the job store reads");
        returns
            .into_iter()
            .find(|ret| ret.minion_id == r.minion)
            .and_then(|ret| value::get(&ret.load, "return").cloned())
    };
    let stored = crash
        .sent
        .iter()
        .filter(|r| stored_value(r).is_some())
        .count();
    println!(
        "MEASURED job_cache={job_cache} acknowledged={} stored={stored} sent={} in_flight_at_kill={}",
        crash.acked.len(),
        crash.sent.len(),
        crash.in_flight_at_kill
    );
    let lost: Vec<&Sent> = crash
        .acked
        .iter()
        .filter(|r| stored_value(r) != Some(s(r.value.as_str())))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged returns are not in jobs.redb with their value, e.g. {:?}",
        lost.len(),
        lost.first()
    );

    let tree = LocalCacheWriter::new(&cachedir, Default::default());
    let minion_dir = |r: &Sent| tree.jid_dir(&r.jid).unwrap().join(&r.minion);
    if job_cache {
        // Replies go out once redb has the batch; the tree's files follow, each recorded
        // in redb as owed until written. So what the kill left out of the tree is owed.
        let owed: std::collections::HashSet<(String, String)> = store
            .owed()
            .expect("the job store reads")
            .into_iter()
            .map(|(jid, r)| (jid, r.minion_id))
            .collect();
        let missing: Vec<&Sent> = not_in_tree(&tree, &crash.acked)
            .into_iter()
            .filter(|r| !owed.contains(&(r.jid.clone(), r.minion.clone())))
            .collect();
        println!(
            "MEASURED owed_to_the_tree_at_the_kill={} of them acknowledged={}",
            owed.len(),
            not_in_tree(&tree, &crash.acked).len()
        );
        assert!(
            missing.is_empty(),
            "{} acknowledged returns are neither in local_cache nor owed to it, e.g. {:?}",
            missing.len(),
            missing.first()
        );
    } else {
        let written: Vec<&Sent> = crash
            .acked
            .iter()
            .filter(|r| minion_dir(r).exists())
            .collect();
        assert!(
            written.is_empty(),
            "job_cache: False, yet returns are in local_cache, e.g. {:?}",
            written.first()
        );
    }
}

/// The returns of `sent` without a `return.p` holding their value in the tree.
fn not_in_tree<'a>(tree: &LocalCacheWriter, sent: &'a [Sent]) -> Vec<&'a Sent> {
    sent.iter()
        .filter(|r| {
            let file = tree
                .jid_dir(&r.jid)
                .unwrap()
                .join(&r.minion)
                .join("return.p");
            return_in_tree(&file) != Some(s(r.value.as_str()))
        })
        .collect()
}

fn crash_loses_no_acknowledged_return(job_cache: bool) {
    for attempt in 1..=ATTEMPTS {
        let root = TempRoot::with_master_extra(&format!(
            "auto_accept: True\njob_cache: {}\n",
            if job_cache { "True" } else { "False" }
        ));
        let master = start_halite_master(&root);
        wait_for_port(root.ret_port(), Duration::from_secs(30));
        let crash = flood_then_kill(&root, master);
        assert_nothing_acknowledged_was_lost(&root, job_cache, &crash);
        // A kill that came when every return sent had been acknowledged proves nothing.
        if crash.in_flight_at_kill == 0 {
            println!("attempt {attempt}: no return was waiting for its acknowledgement at the kill; flooding again");
            continue;
        }

        // The master starts again on the files the crash left, and serves what it
        // acknowledged.
        let _master = start_halite_master(&root);
        wait_for_port(root.ret_port(), Duration::from_secs(30));
        let last = crash.acked.last().expect("acknowledged returns");
        let found = halite_run_json(&root, &["jobs.lookup_jid", &last.jid]);
        assert_eq!(found, json!({ &last.minion: &last.value }));
        if job_cache {
            // The writer writes what the tree was owed as it starts.
            let tree = LocalCacheWriter::new(root.master_root().join("cache"), Default::default());
            assert!(
                wait_until(Duration::from_secs(30), || not_in_tree(&tree, &crash.acked)
                    .is_empty()),
                "{} acknowledged returns are still not in local_cache after the restart: {:?}",
                not_in_tree(&tree, &crash.acked).len(),
                not_in_tree(&tree, &crash.acked).first().map(|r| {
                    let dir = tree.jid_dir(&r.jid).unwrap();
                    let file = dir.join(&r.minion).join("return.p");
                    (
                        r,
                        std::fs::read_dir(&dir).map(|d| d.count()).ok(),
                        std::fs::read(file).ok(),
                    )
                })
            );
        }
        return;
    }
    panic!(
        "in {ATTEMPTS} floods the kill never came while a return waited for its acknowledgement"
    );
}

#[test]
fn sigkill_during_a_return_flood_loses_no_acknowledged_return_with_job_cache_on() {
    crash_loses_no_acknowledged_return(true);
}

#[test]
fn sigkill_during_a_return_flood_loses_no_acknowledged_return_with_job_cache_off() {
    crash_loses_no_acknowledged_return(false);
}
