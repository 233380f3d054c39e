//! Salt's security history as named regression tests (issue 16), request→reply against the
//! in-memory master of [`crate::testing`]: bytes in, bytes out, and a look at everything
//! the master could have changed (events, publishes, held replies, the job store, every
//! file under its root).
//!
//! Each test's name carries the CVE or issue it guards against; each was seen to fail with
//! its guard removed (the issue 16 report lists the break and the failure line). Cases that
//! need real processes are in `tests/cve.rs` (and the minion's in its own `tests/cve.rs`).

use crate::testing::{Events, StoreSink, TestMaster, TestMinion, Wire};
use crate::{Master, Parts};
use halite_config::MasterConfig;
use halite_jobcache::{JobStore, RedbJobStore};
use halite_proto::auth::KeyState;
use halite_proto::crypticle::Crypticle;
use halite_proto::minion::{
    aes_request, auth_request, new_nonce, open_auth_reply, open_reply, AuthError, AuthOutcome,
    PublishError, PublishFrame, PublishKey, Requester, SignIn, SignInState,
};
use halite_proto::pem::clean_key;
use halite_proto::rsa::{EncAlgo, PrivateKey, SigAlgo};
use halite_proto::value::{self, bin, map, s};
use halite_proto::Value;
use halite_transport::PeerId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

// ------------------------------------------------------------------------------ helpers

/// A key of the attacker or of a reinstalled minion (the test minions of `testing` share
/// another one).
fn other_key() -> &'static PrivateKey {
    static KEY: OnceLock<PrivateKey> = OnceLock::new();
    KEY.get_or_init(|| PrivateKey::generate(2048).unwrap())
}

/// The key the minions of these tests sign in with (not the one of [`TestMaster::minion`]).
fn minion_key() -> &'static PrivateKey {
    static KEY: OnceLock<PrivateKey> = OnceLock::new();
    KEY.get_or_init(|| PrivateKey::generate(2048).unwrap())
}

fn pub_of(key: &PrivateKey) -> String {
    clean_key(&key.public_key().unwrap().to_pem().unwrap())
}

/// Every file under `root`: its length, modification time and, for small files, content.
fn tree(root: &Path) -> BTreeMap<PathBuf, (u64, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path.clone());
            }
            out.insert(path, (meta.len(), meta.modified().ok()));
        }
    }
    out
}

/// A snapshot of everything a request could change on a master.
#[derive(Debug, PartialEq)]
struct Effects {
    events: Vec<String>,
    publishes: usize,
    held_replies: usize,
    jobs: usize,
    tokens: usize,
    files: BTreeMap<PathBuf, (u64, Option<SystemTime>)>,
}

/// What a request changed. The token store is compared by its number of tokens, not by
/// its file: looking up an unknown token commits a (no-op) removal, which touches it.
fn effects(master: &Master, events: &Events, wire: &Wire, store: &dyn JobStore) -> Effects {
    let mut files = tree(&master.cfg.root_dir);
    files.retain(|path, _| !path.ends_with("tokens.redb"));
    Effects {
        events: events
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect(),
        publishes: wire.publishes.lock().unwrap().len(),
        held_replies: wire.replies.lock().unwrap().len(),
        jobs: store.list_jobs().unwrap().len(),
        tokens: master.tokens.len().unwrap(),
        files,
    }
}

fn tm_effects(tm: &TestMaster) -> Effects {
    effects(&tm.master, &tm.events, &tm.wire, &*tm.store)
}

/// An `_auth` request body for `id` presenting `pub_pem`, and its nonce.
fn auth_body(id: &str, pub_pem: &str) -> (Vec<u8>, String) {
    let nonce = new_nonce();
    let body = auth_request(&SignIn {
        id,
        pub_clean: pub_pem,
        nonce: &nonce,
        enc_algo: EncAlgo::OaepSha1,
        sig_algo: SigAlgo::Pkcs1v15Sha1,
        autosign_grains: None,
        token: None,
    })
    .unwrap();
    (value::encode(&body), nonce)
}

/// Sends `body` from `peer` and decodes the reply, which must come at once.
fn send(master: &Master, body: &[u8], peer: &str) -> Value {
    let reply = master
        .handle_request(body, &PeerId(peer.as_bytes().to_vec()))
        .expect("answered at once");
    value::decode(&reply).unwrap()
}

/// Signs `id` in with `key` and opens the reply as that minion would, with the master's
/// key pinned (so the reply's signature is checked).
fn sign_in(master: &Master, id: &str, key: &PrivateKey) -> Result<AuthOutcome, AuthError> {
    let (body, nonce) = auth_body(id, &pub_of(key));
    let reply = send(master, &body, id);
    open_auth_reply(
        &reply,
        &SignInState {
            key,
            nonce: &nonce,
            pinned: Some(&master.pub_clean),
            token: None,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        },
    )
}

/// What an `_auth` reply says (`ret`), read from the signed load without opening it.
fn auth_ret(reply: &Value) -> Option<Value> {
    let inner = value::decode(value::get_bytes(reply, "load")?).ok()?;
    value::get(&inner, "ret").cloned()
}

/// A master on its own root with `extra` and without `auto_accept`, for what
/// [`TestMaster`] (which auto-accepts) cannot show.
struct Manual {
    master: Arc<Master>,
    events: Arc<Events>,
    wire: Arc<Wire>,
    store: Arc<RedbJobStore>,
    _dir: tempfile::TempDir,
}

impl Manual {
    fn new(extra: &str) -> Manual {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let yaml = format!("root_dir: {}\nkeysize: 2048\n{extra}", root.display());
        let cfg = MasterConfig::from_yaml_str(&yaml, &root.join("master")).unwrap();
        crate::prepare_dirs(&cfg).unwrap();
        let wire = Arc::new(Wire::default());
        let events = Arc::new(Events::default());
        let store = Arc::new(RedbJobStore::open(root.join("jobs.redb")).unwrap());
        let master = Master::new(
            cfg,
            Parts {
                transport: wire.clone(),
                events: events.clone(),
                jobs: Arc::new(StoreSink(store.clone())),
                job_store: store.clone(),
                tokens: Arc::new(
                    halite_token::RedbTokenStore::open(root.join("tokens.redb")).unwrap(),
                ),
            },
        )
        .unwrap();
        Manual {
            master,
            events,
            wire,
            store,
            _dir: dir,
        }
    }

    fn effects(&self) -> Effects {
        effects(&self.master, &self.events, &self.wire, &*self.store)
    }

    fn key_file(&self, state: KeyState, id: &str) -> Option<String> {
        std::fs::read_to_string(self.master.cfg.pki_dir.join(state.dir_name()).join(id)).ok()
    }
}

fn key_file(tm: &TestMaster, state: KeyState, id: &str) -> Option<String> {
    std::fs::read_to_string(tm.master.cfg.pki_dir.join(state.dir_name()).join(id)).ok()
}

/// Sends `load` as an encrypted request of `minion` with request timestamp `ts`; answers
/// the raw reply and the nonce to open it with.
fn aes_call(tm: &TestMaster, minion: &TestMinion, load: Value, ts: i64) -> (Value, String) {
    let nonce = new_nonce();
    let who = Requester {
        id: &minion.id,
        tok: &minion.tok,
        enc_algo: EncAlgo::OaepSha1,
        sig_algo: SigAlgo::Pkcs1v15Sha1,
    };
    let body = aes_request(&minion.session, &who, load, &nonce, ts).unwrap();
    (send(&tm.master, &value::encode(&body), &minion.id), nonce)
}

fn error_name(reply: &Value) -> Option<&str> {
    value::get(reply, "error").and_then(|e| value::get_str(e, "name"))
}

fn unix_now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

// --------------------------------------------------------------------- CVE-2020-11651

/// Every method name of stock Salt 3008.3's `ClearFuncs`, `AESFuncs`, `AuthFuncs` and
/// `MWorker`, plus Python's own attributes and name-mangled privates. In 2020 Salt looked a
/// clear `cmd` up with `getattr`, so `_prep_auth_info` handed out the root key and
/// `_send_pub` published as root, without credentials.
const STOCK_METHODS: &[&str] = &[
    // ClearFuncs
    "__init__",
    "runner",
    "wheel",
    "mk_token",
    "get_token",
    "publish",
    "_prep_auth_info",
    "_prep_jid",
    "_send_pub",
    "ssh_client",
    "_send_ssh_pub",
    "_prep_pub",
    "ping",
    "_sync_ping",
    "_sync_mk_token",
    "_sync_get_token",
    "_sync_runner",
    "_sync_wheel",
    "destroy",
    "connect",
    "get_method",
    "expose_methods",
    "async_methods",
    "_ClearFuncs__setup_fileserver",
    // AESFuncs
    "_install_sync_handlers",
    "__setup_fileserver",
    "_AESFuncs__setup_fileserver",
    "_serve_file",
    "_file_find",
    "_file_hash",
    "_file_hash_and_stat",
    "_file_list",
    "_file_list_emptydirs",
    "_dir_list",
    "_symlink_list",
    "_file_envs",
    "__verify_minion",
    "_AESFuncs__verify_minion",
    "verify_minion",
    "__verify_minion_publish",
    "_AESFuncs__verify_minion_publish",
    "__verify_load",
    "_AESFuncs__verify_load",
    "_master_tops",
    "_master_opts",
    "_mine_get",
    "_mine",
    "_mine_delete",
    "_mine_flush",
    "__register_resources_sync",
    "_register_resources",
    "_file_recv",
    "_file_recv_write",
    "_pillar",
    "_minion_event",
    "_handle_minion_event",
    "_return",
    "_syndic_return",
    "_write_syndic_cache_marker",
    "minion_runner",
    "pub_ret",
    "minion_pub",
    "minion_publish",
    "revoke_auth",
    "run_func",
    "_run_func_async",
    "_wrap_run_func_return",
    "_sync_verify_minion",
    "_sync_master_tops",
    "_sync_master_opts",
    "_sync_mine_get",
    "_sync_mine",
    "_sync_mine_delete",
    "_sync_mine_flush",
    "_sync_register_resources",
    "_sync_file_recv",
    "_sync_pillar",
    "_sync_return",
    "_sync_syndic_return",
    "_sync_minion_runner",
    "_sync_pub_ret",
    "_sync_minion_pub",
    "_sync_minion_publish",
    "_sync_revoke_auth",
    // AuthFuncs and MWorker
    "_auth",
    "_auth_impl",
    "_auth_impl_sync",
    "_clear_signed",
    "_clear_signed_sync",
    "_handle_clear",
    "_handle_aes",
    "_handle_payload",
    "_post_stats",
    // Python
    "__class__",
    "__dict__",
    "__getattribute__",
    "__getattr__",
    "__reduce__",
    "__del__",
    "",
];

/// The clear commands a Halite master answers (`ClearFuncs.expose_methods` without
/// `wheel`, plus `_auth`); `tests` below checks each without credentials.
const CLEAR_COMMANDS: &[&str] = &[
    "_auth",
    "publish",
    "runner",
    "wheel",
    "mk_token",
    "get_token",
    "ping",
];

/// The encrypted commands a Halite master answers (`AESFuncs.expose_methods` it
/// implements): only accepted minions reach them.
const AES_COMMANDS: &[&str] = &[
    "_return",
    "_pillar",
    "_minion_event",
    "_register_resources",
    "_master_opts",
    "minion_pub",
    "minion_publish",
    "pub_ret",
    "minion_runner",
    "_serve_file",
    "_file_find",
    "_file_hash",
    "_file_hash_and_stat",
    "_file_list",
    "_file_list_emptydirs",
    "_dir_list",
    "_symlink_list",
    "_file_envs",
    "_master_tops",
];

/// A load that would do harm wherever it was honoured: a root publish of `cmd.run`, a file
/// write through a traversal, a key to leak.
fn hostile(cmd: &str) -> Value {
    map([
        ("cmd", s(cmd)),
        ("tgt", s("*")),
        ("tgt_type", s("glob")),
        ("fun", s("cmd.run")),
        (
            "arg",
            Value::Array(vec![s("touch /tmp/halite-cve-2020-11651")]),
        ),
        ("ret", s("")),
        ("user", s("root")),
        ("key", s("")),
        ("id", s("m1")),
        (
            "path",
            s("../../../../../../../../tmp/halite-cve-2020-11652"),
        ),
        ("loc", Value::from(0)),
        ("data", bin(b"pwned".to_vec())),
        ("saltenv", s("base")),
        ("kwarg", map([("fun", s("key.accept")), ("match", s("*"))])),
    ])
}

/// CVE-2020-11651: the clear channel reaches only `_auth`, `publish`, `runner`, `wheel`,
/// `mk_token`, `get_token` and `ping`. Every other name stock Salt ever exposed or kept
/// private — `_prep_auth_info` (the root key), `_send_pub` (a root publish),
/// the `AESFuncs` methods, Python attributes — is answered `{}`, and the whole sweep,
/// whitelisted commands included (none carries credentials), changes nothing: no event,
/// publish, job, held reply or file.
#[test]
fn cve_2020_11651_only_whitelisted_clear_commands_are_reachable() {
    let tm = TestMaster::new("");
    let _m1 = tm.minion("m1");
    let before = tm_effects(&tm);
    for name in STOCK_METHODS {
        let reply = tm.clear(hostile(name));
        if CLEAR_COMMANDS.contains(name) {
            continue;
        }
        assert_eq!(
            reply,
            Value::Map(vec![]),
            "clear command {name:?} was not answered {{}}"
        );
    }
    for name in CLEAR_COMMANDS {
        let reply = tm.clear(hostile(name));
        assert_ne!(
            reply,
            Value::Map(vec![]),
            "whitelisted clear command {name:?} is not answered"
        );
    }
    assert_eq!(
        tm_effects(&tm),
        before,
        "a clear command without credentials did something"
    );
    assert!(!Path::new("/tmp/halite-cve-2020-11652").exists());
}

/// CVE-2020-11651, the other direction: a signed-in minion reaches only the encrypted
/// commands of `AESFuncs` Halite implements. The clear commands (`publish`, `runner`,
/// `wheel`, `mk_token`, `_auth`), `_file_recv` and the rest are answered `{}` and change
/// nothing.
#[test]
fn cve_2020_11651_only_whitelisted_encrypted_commands_are_reachable() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let before = tm_effects(&tm);
    for name in STOCK_METHODS.iter().filter(|n| !AES_COMMANDS.contains(n)) {
        let reply = m1.call_now(&tm, hostile(name));
        assert_eq!(
            reply,
            Value::Map(vec![]),
            "encrypted command {name:?} was not answered {{}}"
        );
    }
    assert_eq!(
        tm_effects(&tm),
        before,
        "an encrypted command did something"
    );
}

/// CVE-2020-11651: `publish`, `runner`, `wheel` and the token commands without valid
/// credentials are refused — no key, an empty or wrong key, a key that is not a string,
/// `user: root` claimed, a made-up token, an eauth backend that is not configured — and
/// nothing is published, run or stored.
#[test]
fn cve_2020_11651_publish_runner_wheel_and_tokens_need_credentials() {
    let tm = TestMaster::new("");
    let _m1 = tm.minion("m1");
    let before = tm_effects(&tm);
    let root = tm.client_key("root");
    let wrong_keys = [
        None,
        Some(s("")),
        Some(s("x")),
        Some(s(format!("{}x", &root[1..]))),
        Some(s(root.to_uppercase())),
        Some(Value::from(0)),
        Some(Value::Array(vec![s(root.clone())])),
        Some(Value::Nil),
    ];
    let with_key = |mut load: Value, key: &Option<Value>| {
        if let Some(k) = key {
            value::set(&mut load, "key", k.clone());
        }
        load
    };
    let publish = map([
        ("cmd", s("publish")),
        ("tgt", s("*")),
        ("tgt_type", s("glob")),
        ("fun", s("cmd.run")),
        ("arg", Value::Array(vec![s("id")])),
        ("ret", s("")),
        ("user", s("root")),
    ]);
    let runner = map([
        ("cmd", s("runner")),
        ("fun", s("manage.up")),
        ("kwarg", Value::Map(vec![])),
        ("user", s("root")),
    ]);
    for key in &wrong_keys {
        for load in [&publish, &runner] {
            let reply = tm.clear(with_key(load.clone(), key));
            assert_eq!(
                error_name(&reply),
                Some("AuthenticationError"),
                "{load} with key {key:?}: {reply}"
            );
        }
    }
    let token = "ab".repeat(32);
    let eauth = map([
        ("eauth", s("pam")),
        ("username", s("root")),
        ("password", s("x")),
    ]);
    for creds in [map([("token", s(token.clone()))]), eauth.clone()] {
        let mut load = publish.clone();
        value::set(&mut load, "kwargs", creds.clone());
        let reply = tm.clear(load);
        assert_eq!(error_name(&reply), Some("AuthenticationError"), "{reply}");
    }
    let wheel = map([
        ("cmd", s("wheel")),
        ("fun", s("key.delete")),
        ("match", s("*")),
        ("user", s("root")),
    ]);
    for key in &wrong_keys {
        let reply = tm.clear(with_key(wheel.clone(), key));
        assert_eq!(
            error_name(&reply),
            Some("UserAuthenticationError"),
            "wheel with key {key:?}: {reply}"
        );
    }
    // Runner and wheel take the credentials as top-level fields of the load.
    for (what, base) in [("runner", &runner), ("wheel", &wheel)] {
        for creds in [map([("token", s(token.clone()))]), eauth.clone()] {
            let mut load = base.clone();
            for (k, v) in creds.as_map().unwrap() {
                value::set(&mut load, value::str_of(k).unwrap(), v.clone());
            }
            let reply = tm.clear(load);
            assert!(
                error_name(&reply).is_some_and(|n| n.ends_with("AuthenticationError")),
                "{what} with {creds}: {reply}"
            );
        }
    }
    // mk_token needs a login of an enabled backend; get_token knows no such token.
    for login in [Value::Map(vec![]), eauth] {
        let mut load = login;
        value::set(&mut load, "cmd", s("mk_token"));
        assert_eq!(tm.clear(load), s(""));
    }
    assert_eq!(
        tm.clear(map([("cmd", s("get_token"))])),
        Value::Boolean(false)
    );
    for token in [token.as_str(), "../../../../etc/passwd", ""] {
        let reply = tm.clear(map([("cmd", s("get_token")), ("token", s(token))]));
        assert_eq!(reply, Value::Map(vec![]), "get_token {token:?}");
    }
    assert_eq!(tm_effects(&tm), before, "a refused request did something");
}

// --------------------------------------------------------------------- CVE-2020-11652

/// Names that would leave their directory if used as paths: relative climbs from any depth
/// up to ten to `/tmp/<marker>`, absolute paths, and the special names `valid_id` refuses.
fn traversals(marker: &str) -> Vec<String> {
    vec![
        format!("{}tmp/{marker}", "../".repeat(10)),
        format!("m1/{}tmp/{marker}", "../".repeat(10)),
        format!("/tmp/{marker}"),
        format!("..\\..\\{marker}"),
        "..".to_owned(),
        ".".to_owned(),
        format!("{marker}\0"),
    ]
}

/// CVE-2020-11652 through minion ids: `_auth` with an id that is not one plain path
/// component gets a signed `ret: False` and writes nothing (no key in any state, no
/// session key, no event); an encrypted request whose outer or inner id is such a name is
/// answered "bad load" before any key or session file is looked up.
#[test]
fn cve_2020_11652_ids_never_become_paths_outside_their_directories() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let marker = format!("halite-cve-2020-11652-id-{}", std::process::id());
    let before = tm_effects(&tm);
    for id in traversals(&marker) {
        let (body, _) = auth_body(&id, &pub_of(minion_key()));
        let reply = send(&tm.master, &body, "attacker");
        assert_eq!(
            auth_ret(&reply),
            Some(Value::Boolean(false)),
            "_auth as {id:?}"
        );

        // m1's session, but the request names the traversal as its outer id.
        let nonce = new_nonce();
        let who = Requester {
            id: &id,
            tok: &m1.tok,
            enc_algo: EncAlgo::OaepSha1,
            sig_algo: SigAlgo::Pkcs1v15Sha1,
        };
        let body = aes_request(&m1.session, &who, hostile("_return"), &nonce, 0).unwrap();
        assert_eq!(
            send(&tm.master, &value::encode(&body), "attacker"),
            s("bad load"),
            "outer id {id:?}"
        );
        // Outer id m1, inner id the traversal.
        let mut body = body;
        value::set(&mut body, "id", s("m1"));
        assert_eq!(
            send(&tm.master, &value::encode(&body), "attacker"),
            s("bad load"),
            "inner id {id:?}"
        );
    }
    assert_eq!(tm_effects(&tm), before);
    assert!(!Path::new("/tmp").join(&marker).exists());
}

/// CVE-2020-11652 through jids, file names and tags from an accepted minion: a return
/// with a jid that is not a jid is dropped (an `id` inside an encrypted load other than
/// the sender's is refused before any handler: `cve_2020_11652_ids_never_become_paths_
/// outside_their_directories`), `_file_recv` is not served and file-server paths find
/// nothing, a `pub_ret` for a traversal jid answers `{}`, and event tags are only ever
/// tags. The runner `jobs.lookup_jid` with a traversal jid finds nothing. No file is
/// written or changed except the job store taking the one valid return.
#[test]
fn cve_2020_11652_jids_paths_and_tags_never_become_paths() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let marker = format!("halite-cve-2020-11652-jid-{}", std::process::id());
    let before = tm_effects(&tm);
    for bad in traversals(&marker).into_iter().chain([
        format!("20200430000000000000/../../{marker}"),
        String::new(),
    ]) {
        let ret = map([
            ("cmd", s("_return")),
            ("id", s("m1")),
            ("jid", s(bad.clone())),
            ("fun", s("test.ping")),
            ("return", Value::Boolean(true)),
        ]);
        assert_eq!(m1.call_now(&tm, ret), Value::Nil, "_return jid {bad:?}");
        let pub_ret = map([("cmd", s("pub_ret")), ("jid", s(bad.clone()))]);
        assert_eq!(
            m1.call_now(&tm, pub_ret),
            Value::Map(vec![]),
            "pub_ret {bad:?}"
        );
        let mut load = hostile("_file_recv");
        value::set(&mut load, "path", s(bad.clone()));
        assert_eq!(
            m1.call_now(&tm, load),
            Value::Map(vec![]),
            "_file_recv {bad:?}"
        );
        // The file server refuses the path: Salt's replies for a file that is not there.
        for (cmd, nothing) in [
            ("_serve_file", map([("data", s("")), ("dest", s(""))])),
            ("_file_find", map([("path", s("")), ("rel", s(""))])),
            ("_file_hash", s("")),
            ("_file_hash_and_stat", Value::Array(vec![s(""), Value::Nil])),
        ] {
            let mut load = hostile(cmd);
            value::set(&mut load, "path", s(bad.clone()));
            assert_eq!(m1.call_now(&tm, load), nothing, "{cmd} {bad:?}");
        }
        let event = map([
            ("cmd", s("_minion_event")),
            ("tag", s(bad.clone())),
            ("data", map([("x", Value::from(1))])),
        ]);
        assert_eq!(m1.call_now(&tm, event), Value::Boolean(true));
    }
    let mut after = tm_effects(&tm);
    // Tags are names on the bus, nothing else.
    let fired: Vec<String> = after.events.drain(before.events.len()..).collect();
    assert_eq!(fired.len(), traversals(&marker).len() + 2, "{fired:?}");
    assert_eq!(after, before, "a traversal changed something");

    // jobs.lookup_jid with a traversal jid: nothing found.
    let reply = tm.clear(map([
        ("cmd", s("runner")),
        ("fun", s("jobs.lookup_jid")),
        (
            "kwarg",
            map([("jid", s(format!("../../../../tmp/{marker}")))]),
        ),
        ("key", s(tm.client_key("root"))),
        ("user", s("root")),
    ]));
    let run = value::get_str(&reply, "jid")
        .expect("the runner started")
        .to_owned();
    let tag = format!("salt/run/{run}/ret");
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        if let Some(d) = tm.events.data(&tag) {
            break d;
        }
        assert!(Instant::now() < deadline, "no {tag}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        value::get(&done, "return"),
        Some(&Value::Map(vec![])),
        "{done}"
    );
    assert!(!Path::new("/tmp").join(&marker).exists());
}

// --------------------------------------------------------------------- CVE-2016-9639

/// CVE-2016-9639: a new key presented for an id whose key is accepted is denied, not
/// swapped — even with `auto_accept`. The minion with the new key gets Salt's signed
/// `ret: False` (a stock minion reads it as "rejected"), the accepted key file is unchanged,
/// the new key is recorded once in `minions_denied/`, `salt/auth` says `denied`, and the
/// minion holding the accepted key keeps its session.
#[test]
fn cve_2016_9639_a_new_key_for_an_accepted_id_is_denied_not_swapped() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let accepted = key_file(&tm, KeyState::Accepted, "m1").expect("m1 accepted");
    for _ in 0..2 {
        let outcome = sign_in(&tm.master, "m1", other_key());
        assert!(
            matches!(outcome, Ok(AuthOutcome::Rejected)),
            "the new key was not denied: {outcome:?}"
        );
    }
    assert_eq!(key_file(&tm, KeyState::Accepted, "m1"), Some(accepted));
    assert_eq!(
        key_file(&tm, KeyState::Denied, "m1"),
        Some(pub_of(other_key()))
    );
    assert_eq!(key_file(&tm, KeyState::Pending, "m1"), None);
    let auth = tm.events.0.lock().unwrap().clone();
    let acts: Vec<&str> = auth
        .iter()
        .filter(|(t, _)| t == "salt/auth")
        .filter_map(|(_, d)| value::get_str(d, "act"))
        .collect();
    assert_eq!(acts, ["accept", "denied", "denied"]);
    // The genuine minion is untouched.
    let event = map([
        ("cmd", s("_minion_event")),
        ("tag", s("still/here")),
        ("data", Value::Map(vec![])),
    ]);
    assert_eq!(m1.call_now(&tm, event), Value::Boolean(true));
}

/// CVE-2016-9639 for a key still waiting: a different key for a pending id is denied and
/// the pending key stays as it was.
#[test]
fn cve_2016_9639_a_new_key_for_a_pending_id_is_denied_not_swapped() {
    let m = Manual::new("");
    assert!(matches!(
        sign_in(&m.master, "p1", minion_key()),
        Ok(AuthOutcome::Pending)
    ));
    let pending = m.key_file(KeyState::Pending, "p1").expect("p1 pending");
    assert!(matches!(
        sign_in(&m.master, "p1", other_key()),
        Ok(AuthOutcome::Rejected)
    ));
    assert_eq!(m.key_file(KeyState::Pending, "p1"), Some(pending));
    assert_eq!(
        m.key_file(KeyState::Denied, "p1"),
        Some(pub_of(other_key()))
    );
}

// ----------------------------------------------------------- issue 16: pending-key surface

/// Issue 16 (Halite deviates from Salt, which stores any text as a pending key): a public
/// key that does not parse is refused with a signed `ret: False` and stored nowhere — not
/// as pending, not as the denied key of a known id — and fires no event.
#[test]
fn issue16_a_public_key_that_does_not_parse_is_refused_not_stored() {
    let m = Manual::new("");
    assert!(matches!(
        sign_in(&m.master, "known", minion_key()),
        Ok(AuthOutcome::Pending)
    ));
    let before = m.effects();
    let garbage = [
        String::new(),
        "not a key".to_owned(),
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----".to_owned(),
        pub_of(minion_key()).replace('M', "N"),
        "-----BEGIN PUBLIC KEY-----\n".repeat(1000),
    ];
    for (n, text) in garbage.iter().enumerate() {
        for id in [format!("new{n}"), "known".to_owned()] {
            let (body, _) = auth_body(&id, text);
            let reply = send(&m.master, &body, "attacker");
            assert_eq!(
                auth_ret(&reply),
                Some(Value::Boolean(false)),
                "{text:?} as {id}"
            );
        }
    }
    assert_eq!(
        m.effects(),
        before,
        "an unparseable key was stored or announced"
    );
}

/// Issue 16: at most `max_pending_keys` keys wait. Past it, a sign-in that would store a
/// new pending key is answered `full` (what Salt answers at `max_minions`) and stores
/// nothing; ids already pending keep being answered "pending", and once salt-key removes
/// a pending key a new id is taken again.
#[test]
fn issue16_pending_keys_are_capped_by_max_pending_keys() {
    let m = Manual::new("max_pending_keys: 3\n");
    for id in ["p1", "p2", "p3"] {
        assert!(matches!(
            sign_in(&m.master, id, minion_key()),
            Ok(AuthOutcome::Pending)
        ));
    }
    for id in ["p4", "p5"] {
        assert!(matches!(
            sign_in(&m.master, id, minion_key()),
            Ok(AuthOutcome::Full)
        ));
        assert_eq!(m.key_file(KeyState::Pending, id), None);
    }
    let full = m.events.0.lock().unwrap().last().cloned().unwrap();
    assert_eq!(full.0, "salt/auth");
    assert_eq!(value::get_str(&full.1, "act"), Some("full"));
    assert_eq!(value::get_str(&full.1, "id"), Some("p5"));
    assert!(matches!(
        sign_in(&m.master, "p1", minion_key()),
        Ok(AuthOutcome::Pending)
    ));
    // salt-key -d p1, seen by the key-directory refresh.
    std::fs::remove_file(m.master.cfg.pki_dir.join("minions_pre/p1")).unwrap();
    m.master.keys.refresh();
    assert!(matches!(
        sign_in(&m.master, "p4", minion_key()),
        Ok(AuthOutcome::Pending)
    ));
    assert!(matches!(
        sign_in(&m.master, "p5", minion_key()),
        Ok(AuthOutcome::Full)
    ));
    let mut pending = halite_keystore::KeyStore::at(&m.master.cfg.pki_dir)
        .list(KeyState::Pending)
        .unwrap();
    pending.sort();
    assert_eq!(pending, ["p2", "p3", "p4"]);
}

// --------------------------------------------------------------------- CVE-2022-22936

/// CVE-2022-22936, publishes: every publish carries a serial above the last, so the
/// minion's check (`halite_proto::minion::PublishKey`, fed the master's own frames) drops
/// a replayed frame and runs each job once.
#[test]
fn cve_2022_22936_publishes_carry_increasing_serials_and_replays_are_dropped() {
    let tm = TestMaster::new("");
    let _m1 = tm.minion("m1");
    let root = tm.client_key("root");
    for _ in 0..3 {
        let reply = tm.clear(map([
            ("cmd", s("publish")),
            ("tgt", s("m1")),
            ("tgt_type", s("glob")),
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("user", s("root")),
            ("key", s(root.clone())),
        ]));
        assert!(value::get(&reply, "load").is_some(), "{reply}");
    }
    let frames = tm.wire.publishes.lock().unwrap().clone();
    assert_eq!(frames.len(), 3);
    let (aes, _) = tm.master.publisher.auth_keys().unwrap();
    let mut key = PublishKey::new(Crypticle::new(aes.key_string()).unwrap());
    let parsed: Vec<PublishFrame> = frames
        .iter()
        .map(|f| PublishFrame::parse(f).unwrap())
        .collect();
    for frame in &parsed {
        key.open(frame).expect("a fresh publish opens");
    }
    assert_eq!(key.last_serial(), 3);
    for frame in &parsed {
        assert!(
            matches!(key.open(frame), Err(PublishError::Replay { .. })),
            "a replayed publish was accepted"
        );
    }
}

/// CVE-2022-22936, replies: a reply is sealed with the nonce of its request, so a
/// captured reply cannot answer another request (the minion's `open_reply` refuses it).
#[test]
fn cve_2022_22936_replies_are_bound_to_their_request_nonce() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let load = map([("cmd", s("_master_opts"))]);
    let (reply, nonce) = aes_call(&tm, &m1, load.clone(), 0);
    assert!(open_reply(&m1.session, &reply, &nonce).is_ok());
    let (_, other_nonce) = aes_call(&tm, &m1, load, 0);
    assert!(
        open_reply(&m1.session, &reply, &other_nonce).is_err(),
        "a reply opened as the answer to another request"
    );
}

/// CVE-2022-22936, requests: with `request_server_ttl` set (Salt's protection, off by
/// default as in Salt), an encrypted request whose `ts` is older than the ttl, or that
/// carries none, is answered "bad load" and does nothing; a fresh one is served. With the
/// default (0) the timestamp is not checked, as in Salt: a replay inside the session is
/// then what Salt allows too.
#[test]
fn cve_2022_22936_requests_older_than_request_server_ttl_are_refused() {
    let tm = TestMaster::new("request_server_ttl: 60\n");
    let m1 = tm.minion("m1");
    let event = |tag: &str| {
        map([
            ("cmd", s("_minion_event")),
            ("tag", s(tag)),
            ("data", Value::Map(vec![])),
        ])
    };
    let (reply, nonce) = aes_call(&tm, &m1, event("fresh"), unix_now());
    assert_eq!(
        open_reply(&m1.session, &reply, &nonce).unwrap(),
        Value::Boolean(true)
    );
    let (reply, _) = aes_call(&tm, &m1, event("stale"), unix_now() - 3600);
    assert_eq!(reply, s("bad load"));
    let (reply, _) = aes_call(&tm, &m1, event("epoch"), 0);
    assert_eq!(reply, s("bad load"));
    assert!(tm.events.data("stale").is_none() && tm.events.data("epoch").is_none());
    assert!(tm.events.data("fresh").is_some());

    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let (reply, nonce) = aes_call(&tm, &m1, event("old"), 0);
    assert_eq!(
        open_reply(&m1.session, &reply, &nonce).unwrap(),
        Value::Boolean(true)
    );
}

/// CVE-2022-22936, `_auth`: replaying a captured sign-in is harmless by design, so the
/// master answers it again. The answer carries the AES and session keys encrypted to the
/// key in the request, so only that key's owner can read them (another key cannot open
/// it), and it is bound to the captured nonce, so it cannot answer the owner's next sign-in
/// either.
#[test]
fn cve_2022_22936_a_replayed_sign_in_yields_a_reply_only_the_key_owner_can_read() {
    let tm = TestMaster::new("");
    let (body, nonce) = auth_body("m1", &pub_of(minion_key()));
    let first = send(&tm.master, &body, "m1");
    let replayed = send(&tm.master, &body, "attacker");
    let open = |reply: &Value, key: &PrivateKey, nonce: &str| {
        open_auth_reply(
            reply,
            &SignInState {
                key,
                nonce,
                pinned: None,
                token: None,
                enc_algo: EncAlgo::OaepSha1,
                sig_algo: SigAlgo::Pkcs1v15Sha1,
            },
        )
    };
    for reply in [&first, &replayed] {
        let Ok(AuthOutcome::Accepted(creds)) = open(reply, minion_key(), &nonce) else {
            panic!("the key owner could not read its sign-in reply");
        };
        // Nothing in the reply gives the keys away to whoever replayed the sign-in: they
        // travel sealed for the key owner only, never in the clear.
        let raw = value::encode(reply);
        for (what, secret) in [("AES key", &creds.aes), ("session key", &creds.session)] {
            assert!(
                !raw.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "the {what} is readable in the reply"
            );
        }
        assert!(
            open(reply, other_key(), &nonce).is_err(),
            "another key read the keys of a replayed sign-in"
        );
        assert!(matches!(
            open(reply, minion_key(), &new_nonce()),
            Err(AuthError::BadNonce)
        ));
    }
}

// ---------------------------------------------------------------- issue 16 item 3: identity

/// Issue 16 item 3 (identity): a local user's key authenticates that user only. With
/// `daemon`'s key and `user: root` in the load, the job's user — in `salt/job/<jid>/new`,
/// in the publish, and in the load kept in the job store — is `daemon`, and `daemon`'s
/// `publisher_acl` entries apply (a function they do not allow is refused). The key
/// comparison itself is constant-time (`access::key_owner`: `openssl::memcmp::eq` over
/// every stored key, no early exit); `access.rs` tests the rest of the ACL.
#[test]
fn issue16_the_job_user_is_the_key_owner_never_the_user_the_client_names() {
    let tm = TestMaster::new("publisher_acl:\n  daemon:\n    - 'm*':\n      - test.ping\n");
    let _m1 = tm.minion("m1");
    let key = tm.client_key("daemon");
    let publish = |fun: &str| {
        tm.clear(map([
            ("cmd", s("publish")),
            ("tgt", s("m1")),
            ("tgt_type", s("glob")),
            ("fun", s(fun)),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("user", s("root")),
            ("key", s(key.clone())),
        ]))
    };
    let reply = publish("test.ping");
    let jid = value::get(&reply, "load")
        .and_then(|l| value::get_str(l, "jid"))
        .unwrap_or_else(|| panic!("not published: {reply}"))
        .to_owned();
    let new = tm.events.data(&format!("salt/job/{jid}/new")).unwrap();
    assert_eq!(value::get_str(&new, "user"), Some("daemon"));
    let published = tm.events.data(&format!("salt/job/{jid}/publish")).unwrap();
    assert_eq!(value::get_str(&published, "user"), Some("daemon"));
    let saved = tm.store.get_load(&jid).unwrap().expect("the job is stored");
    assert_eq!(
        value::get_str(&saved.load, "user"),
        Some("daemon"),
        "the job store records the user the client named: {}",
        saved.load
    );
    assert_eq!(
        error_name(&publish("cmd.run")),
        Some("AuthorizationError"),
        "daemon's ACL did not apply"
    );
}

// --------------------------------------------------- issue 16 item 7: bad input per handler

/// The clear `_auth` command with unusable loads: missing or mistyped fields get
/// "bad load", an unknown algorithm Salt's unsigned `bad enc algo`/`bad sig algo`; nothing
/// is stored or fired, and the next good sign-in is served.
#[test]
fn issue16_bad_auth_loads_get_salts_answers_and_store_nothing() {
    let m = Manual::new("");
    let before = m.effects();
    let good = || {
        map([
            ("cmd", s("_auth")),
            ("id", s("b1")),
            ("nonce", s(new_nonce())),
            ("pub", s(pub_of(minion_key()))),
        ])
    };
    let clear = |load: Value| {
        let body = map([
            ("enc", s("clear")),
            ("load", load),
            ("version", Value::from(3)),
        ]);
        send(&m.master, &value::encode(&body), "b1")
    };
    let unsigned = |ret: &str| map([("enc", s("clear")), ("load", map([("ret", s(ret))]))]);
    let mut cases: Vec<(Value, Value)> = Vec::new();
    for field in ["id", "nonce", "pub"] {
        let mut load = good();
        value::remove(&mut load, field);
        cases.push((load, s("bad load")));
        for wrong in [
            Value::from(1),
            Value::Nil,
            Value::Array(vec![]),
            map([("a", s("b"))]),
        ] {
            let mut load = good();
            value::set(&mut load, field, wrong);
            cases.push((load, s("bad load")));
        }
    }
    let mut load = good();
    value::set(&mut load, "enc_algo", s("ROT13"));
    cases.push((load, unsigned("bad enc algo")));
    let mut load = good();
    value::set(&mut load, "sig_algo", s("MD5"));
    cases.push((load, unsigned("bad sig algo")));
    for (load, want) in cases {
        assert_eq!(clear(load.clone()), want, "{load}");
    }
    assert_eq!(m.effects(), before, "a bad _auth load did something");
    let reply = clear(good());
    assert_eq!(auth_ret(&reply), Some(Value::Boolean(true)), "pending");
}

/// The clear `publish` command from root with unusable loads: no `fun`, targets that are
/// not strings or name no minion, an unknown target type, arguments that are not a list,
/// a huge argument list. Each gets an answer (never a panic), a load without `fun` or a
/// target matching nobody publishes nothing, and the master keeps serving.
#[test]
fn issue16_bad_publish_loads_are_answered_and_publish_nothing_unusable() {
    let tm = TestMaster::new("");
    let _m1 = tm.minion("m1");
    let root = tm.client_key("root");
    let publish = |edit: &dyn Fn(&mut Value)| {
        let mut load = map([
            ("cmd", s("publish")),
            ("tgt", s("m1")),
            ("tgt_type", s("glob")),
            ("fun", s("test.ping")),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("user", s("root")),
            ("key", s(root.clone())),
        ]);
        edit(&mut load);
        tm.clear(load)
    };
    let reply = publish(&|l| {
        value::remove(l, "fun");
    });
    assert_eq!(
        value::get_str(&reply, "error"),
        Some("publish without fun"),
        "{reply}"
    );
    for tgt in [
        Value::from(5),
        Value::Nil,
        map([("a", s("b"))]),
        s("nobody"),
    ] {
        let reply = publish(&|l| value::set(l, "tgt", tgt.clone()));
        let load = value::get(&reply, "load").unwrap_or_else(|| panic!("{reply}"));
        assert_eq!(
            value::get(load, "jid"),
            Some(&Value::Nil),
            "tgt {tgt}: {reply}"
        );
    }
    assert!(tm.wire.publishes.lock().unwrap().is_empty());
    for tgt_type in [s("no_such_type"), Value::from(3)] {
        let reply = publish(&|l| value::set(l, "tgt_type", tgt_type.clone()));
        assert!(
            matches!(reply, Value::Map(_)),
            "tgt_type {tgt_type}: {reply}"
        );
    }
    for arg in [
        s("not a list"),
        Value::Array((0..10_000).map(Value::from).collect()),
    ] {
        // Published as is (the minion drops what it cannot run), or refused by the
        // request decoder's budget: answered either way.
        let reply = publish(&|l| value::set(l, "arg", arg.clone()));
        assert!(matches!(reply, Value::Map(_)), "{reply}");
    }
    let reply = publish(&|_| {});
    let load = value::get(&reply, "load").unwrap();
    assert!(
        value::get_str(load, "jid").is_some(),
        "still serving: {reply}"
    );
}

/// The encrypted commands of `AESFuncs` with unusable loads, from an accepted minion:
/// `_return` without `jid` or `return` or with a jid that is not one is dropped (`None`),
/// `_minion_event` without a tag or with data that is not a map fires nothing, odd grains
/// in `_pillar` are kept without breaking grain targeting, `_master_opts` and
/// `_register_resources` take any load, `pub_ret` without a usable jid answers `{}`, and
/// `minion_publish` / `minion_runner` without `peer` configuration answer `{}`.
#[test]
fn issue16_bad_encrypted_loads_get_empty_answers_and_the_master_keeps_serving() {
    let tm = TestMaster::new("");
    let m1 = tm.minion("m1");
    let cmd = |name: &str, fields: Vec<(&str, Value)>| {
        let mut load = map([("cmd", s(name))]);
        for (k, v) in fields {
            value::set(&mut load, k, v);
        }
        load
    };
    let env_only = m1.call_now(
        &tm,
        cmd("_master_opts", vec![("env_only", Value::Boolean(true))]),
    );
    let before = tm_effects(&tm);
    let empty = Value::Map(vec![]);
    let cases = [
        (
            cmd("_return", vec![("return", Value::Boolean(true))]),
            Value::Nil,
        ),
        (
            cmd("_return", vec![("jid", s("20200430000000000000"))]),
            Value::Nil,
        ),
        (
            cmd(
                "_return",
                vec![("jid", Value::from(7)), ("return", Value::Nil)],
            ),
            Value::Nil,
        ),
        (cmd("_minion_event", vec![]), Value::Boolean(false)),
        (
            cmd(
                "_minion_event",
                vec![("tag", Value::from(1)), ("data", empty.clone())],
            ),
            Value::Boolean(false),
        ),
        (
            cmd(
                "_minion_event",
                vec![(
                    "events",
                    Value::Array(vec![
                        Value::from(1),
                        map([("tag", Value::Nil)]),
                        map([("tag", s("x")), ("data", s("not a map"))]),
                    ]),
                )],
            ),
            Value::Boolean(true),
        ),
        (
            cmd("_master_opts", vec![("env_only", s("maybe"))]),
            env_only,
        ),
        (
            cmd("_register_resources", vec![("resources", Value::from(3))]),
            Value::Boolean(true),
        ),
        (cmd("pub_ret", vec![]), empty.clone()),
        (
            cmd("pub_ret", vec![("jid", map([("a", Value::Nil)]))]),
            empty.clone(),
        ),
        (
            cmd(
                "pub_ret",
                vec![("jid", s("20200430000000000000")), ("wait", s("NaN"))],
            ),
            empty.clone(),
        ),
        (
            cmd("minion_publish", vec![("tmo", s("soon"))]),
            empty.clone(),
        ),
        (
            cmd(
                "minion_publish",
                vec![("fun", s("test.ping")), ("tgt", s("*"))],
            ),
            empty.clone(),
        ),
        (
            cmd("minion_runner", vec![("fun", Value::from(1))]),
            empty.clone(),
        ),
        (
            cmd(
                "minion_runner",
                vec![("fun", s("manage.up")), ("arg", Value::Array(vec![]))],
            ),
            empty.clone(),
        ),
    ];
    for (load, want) in cases {
        assert_eq!(m1.call_now(&tm, load.clone()), want, "{load}");
    }
    assert_eq!(
        tm_effects(&tm),
        before,
        "a bad encrypted load did something"
    );

    // Grains that are not a map are kept, and grain targeting over them answers.
    let pillar = cmd("_pillar", vec![("grains", s("not a map"))]);
    let (reply, _) = aes_call(&tm, &m1, pillar, 0);
    assert!(value::get(&reply, "pillar").is_some(), "{reply}");
    let reply = tm.clear(map([
        ("cmd", s("publish")),
        ("tgt", s("os:Linux")),
        ("tgt_type", s("grain")),
        ("fun", s("test.ping")),
        ("arg", Value::Array(vec![])),
        ("ret", s("")),
        ("user", s("root")),
        ("key", s(tm.client_key("root"))),
    ]));
    assert!(matches!(reply, Value::Map(_)), "{reply}");
    let event = cmd("_minion_event", vec![("tag", s("ok")), ("data", empty)]);
    assert_eq!(
        m1.call_now(&tm, event),
        Value::Boolean(true),
        "still serving"
    );
}
