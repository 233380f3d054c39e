//! Salt's security history against a running `halite-master` (issue 16): the cases that
//! need real processes — a stock minion, the `local_cache` writer, the master's log. The
//! request→reply cases are unit tests (`src/cve_tests.rs`).

mod common;

use common::*;
use halite_proto::minion::{aes_request, Requester};
use halite_proto::minion::{
    auth_request, new_nonce, open_auth_reply, AuthOutcome, SignIn, SignInState,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{EncAlgo, PrivateKey, SigAlgo};
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One request on the request port, answered within 30 s.
fn request(port: u16, body: &Value) -> Value {
    let ctx = zmq::Context::new();
    let reply = halite_transport::client::request(
        &ctx,
        &format!("tcp://127.0.0.1:{port}"),
        &value::encode(body),
        Duration::from_secs(30),
    )
    .expect("the master answers within 30 s");
    value::decode(&reply).expect("the reply is msgpack")
}

fn pub_of(key: &PrivateKey) -> String {
    clean_key(&key.public_key().unwrap().to_pem().unwrap())
}

/// Signs `id` in with `key` and opens the reply as that minion would, with the master's
/// key (read from its pki directory) pinned, so the reply's signature is checked.
fn sign_in(root: &TempRoot, id: &str, key: &PrivateKey) -> AuthOutcome {
    let nonce = new_nonce();
    let body = auth_request(&SignIn {
        id,
        pub_clean: &pub_of(key),
        nonce: &nonce,
        enc_algo: EncAlgo::OaepSha1,
        sig_algo: SigAlgo::Pkcs1v15Sha1,
        autosign_grains: None,
        token: None,
    })
    .unwrap();
    let reply = request(root.ret_port(), &body);
    let master_pub = std::fs::read_to_string(root.master_pki_dir().join("master.pub")).unwrap();
    open_auth_reply(
        &reply,
        &SignInState {
            key,
            nonce: &nonce,
            pinned: Some(&master_pub),
            token: None,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        },
    )
    .unwrap_or_else(|e| panic!("the reply to {id}'s sign-in does not open: {e}"))
}

fn count(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// Every path under `dir`.
fn paths_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

/// CVE-2016-9639 with a stock minion: reinstalled with a new key pair under an id whose
/// key is accepted, it gets Salt's denied reply (it logs that the master rejected its key)
/// instead of taking the id over; the master logs Salt's "the public keys did not match",
/// keeps the accepted key file as it was and records the new key in `minions_denied`.
#[test]
fn cve_2016_9639_a_stock_minion_with_a_new_key_for_an_accepted_id_is_denied() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let mut minion = start_stock_minion(&root, "s1");
    wait_for_pings(&root, &["s1"]);
    let accepted_path = root.master_pki_dir().join("minions/s1");
    let accepted = std::fs::read_to_string(&accepted_path).unwrap();
    minion.stop();

    // Reinstalled: the same id with a new key pair (a minion directory of its own).
    root.add_minion_with("reinstalled", "id: s1\n");
    let master_log = root.master_log();
    let offset = file_len(&master_log);
    let _minion = start_stock_minion(&root, "reinstalled");
    wait_for_log(
        &root.minion_log("reinstalled"),
        "The Salt Master has rejected this minion's public key",
        JOIN,
    );
    wait_for_log_from(
        &master_log,
        offset,
        "Authentication attempt from s1 failed, the public keys did not match",
        Duration::from_secs(30),
    );
    assert_eq!(
        std::fs::read_to_string(&accepted_path).unwrap(),
        accepted,
        "the accepted key was replaced"
    );
    let new_pub =
        std::fs::read_to_string(root.minion_pki_dir("reinstalled").join("minion.pub")).unwrap();
    assert_ne!(clean_key(&new_pub), clean_key(&accepted));
    assert_eq!(
        std::fs::read_to_string(root.master_pki_dir().join("minions_denied/s1")).unwrap(),
        clean_key(&new_pub)
    );
    assert!(!root.master_pki_dir().join("minions_pre/s1").exists());
}

/// Issue 16, pending-key surface: with `max_pending_keys: 2`, the first two new ids are
/// pending and every further one is answered `full` and stored nowhere; the master logs
/// the limit once (at WARNING) however many sign-ins it refuses. Once `halite-key -d`
/// removes a pending key, a new id is taken again; reaching the limit again is logged again.
#[test]
fn issue16_max_pending_keys_refuses_new_keys_and_is_logged_once_when_reached() {
    const REACHED: &str = "keys are pending (max_pending_keys): new keys are refused";
    let root = TempRoot::with_master_extra("max_pending_keys: 2\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let key = PrivateKey::generate(2048).unwrap();
    for id in ["p0", "p1"] {
        assert!(
            matches!(sign_in(&root, id, &key), AuthOutcome::Pending),
            "{id}"
        );
    }
    for n in 2..8 {
        let id = format!("p{n}");
        assert!(
            matches!(sign_in(&root, &id, &key), AuthOutcome::Full),
            "{id}"
        );
    }
    let log = root.master_log();
    wait_for_log(&log, REACHED, Duration::from_secs(30));
    assert_eq!(
        count(&log, REACHED),
        1,
        "the limit was logged more than once"
    );
    assert_eq!(ids_in(&key_lists(&root), "minions_pre"), ["p0", "p1"]);

    let out = run_halite_key(&root, ["-d", "p0", "-y"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The master sees the key directory change on its next refresh.
    let mut last = None;
    let taken = wait_until(Duration::from_secs(30), || {
        let outcome = sign_in(&root, "p2", &key);
        let pending = matches!(outcome, AuthOutcome::Pending);
        last = Some(outcome);
        pending
    });
    assert!(taken, "a freed place was never taken: {last:?}");
    assert!(matches!(sign_in(&root, "p3", &key), AuthOutcome::Full));
    wait_until(Duration::from_secs(10), || count(&log, REACHED) == 2);
    assert_eq!(
        count(&log, REACHED),
        2,
        "reaching the limit again is logged again"
    );
    assert_eq!(ids_in(&key_lists(&root), "minions_pre"), ["p1", "p2"]);
}

/// CVE-2020-11652 through the job cache: jids that `is_jid` accepts but that hold a path
/// (`<20 digits>_/../..`) and traversal ids in `_auth` leave no
/// file outside the master's root. Salt's `local_cache` names a job's directory after a
/// hash of its jid and a return's after the verified minion id, so both land inside
/// `cachedir/jobs`.
#[test]
fn cve_2020_11652_jids_and_ids_write_nothing_outside_the_job_cache() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), Duration::from_secs(30));
    let marker = format!("halite-cve-2020-11652-{}", std::process::id());
    let climb = format!("{}tmp/{marker}", "../".repeat(12));
    let key = PrivateKey::generate(2048).unwrap();

    for id in [climb.clone(), format!("/tmp/{marker}"), "..".to_owned()] {
        assert!(
            matches!(sign_in(&root, &id, &key), AuthOutcome::Rejected),
            "_auth as {id:?}"
        );
    }
    let AuthOutcome::Accepted(creds) = sign_in(&root, "m1", &key) else {
        panic!("m1 not accepted");
    };
    let session = halite_proto::crypticle::Crypticle::new(&creds.session).unwrap();
    let tok = key.x931_sign(b"salt").unwrap();
    let who = Requester {
        id: "m1",
        tok: &tok,
        enc_algo: EncAlgo::OaepSha1,
        sig_algo: SigAlgo::Pkcs1v15Sha1,
    };
    let jid = format!("20200430000000000000_/{climb}");
    // (The `id` inside an encrypted load is the sender's: `aes_request` writes it, and the
    // master refuses any other before a handler sees it.)
    for jid in [jid.as_str(), climb.as_str(), "20200430000000000001"] {
        let load = map([
            ("cmd", s("_return")),
            ("id", s("m1")),
            ("jid", s(jid)),
            ("fun", s("test.ping")),
            ("return", Value::Boolean(true)),
        ]);
        let body = aes_request(&session, &who, load, &new_nonce(), 0).unwrap();
        request(root.ret_port(), &body);
    }
    // A client-chosen jid holding a path.
    let root_key = std::fs::read_to_string(root.master_root().join("cache/.root_key")).unwrap();
    let reply = clear_request(
        root.ret_port(),
        map([
            ("cmd", s("publish")),
            ("tgt", s("m1")),
            ("tgt_type", s("glob")),
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("jid", s(format!("20200430000000000002_/{climb}"))),
            ("user", s("root")),
            ("key", s(root_key)),
        ]),
    );
    assert!(value::get(&reply, "load").is_some(), "{reply}");

    // The good return and the load (under a jid of the master's: a jid holding a path is
    // not a jid, `halite_proto::jid::is_jid`) reach the job cache, inside it; the return
    // whose jid holds a path is dropped.
    let jobs = root.master_root().join("cache/jobs");
    let written = wait_until(Duration::from_secs(30), || {
        let files = paths_under(&jobs);
        let returns = files.iter().filter(|p| p.ends_with("m1/return.p")).count();
        let loads = files.iter().filter(|p| p.ends_with(".load.p")).count();
        returns == 1 && loads >= 1
    });
    assert!(written, "job cache: {:#?}", paths_under(&jobs));
    for path in paths_under(root.path()) {
        assert!(
            !path.to_string_lossy().contains(&marker),
            "a traversal name became a path: {}",
            path.display()
        );
    }
    assert!(!Path::new("/tmp").join(&marker).exists());
}
