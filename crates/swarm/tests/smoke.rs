//! The swarm against real masters, correctness only (no timings): against a Halite master,
//! 50 simulated minions authenticate, subscribe, and each answers one `test.ping` publish,
//! and a targeted `test.echo` is answered by its target alone; against a stock salt-master,
//! 5 minions sign in and answer `test.ping` (the swarm speaks the wire protocol only, so it
//! needs no change for either).

use halite_client::{LocalClient, PublishRequest};
use halite_config::MasterConfig;
use halite_proto::value::{self, s};
use halite_proto::Value;
use halite_testkit::{
    start_halite_master, start_stock_master, wait_for_log, wait_for_port, wait_until, Proc,
    TempRoot, TIMEOUT,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

const COUNT: usize = 50;

/// Keys survive between test runs in the target directory, so reruns skip key generation.
fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("swarm-keys")
}

fn start_swarm(root: &TempRoot, count: usize) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halite-swarm"));
    cmd.args(["--count", &count.to_string()])
        .args(["--id-prefix", "smoke-"])
        .args(["--master", &format!("127.0.0.1:{}", root.ret_port())])
        .arg("--keys-dir")
        .arg(keys_dir())
        .args(["--auth-concurrency", "16", "--connections", "16"]);
    Proc::spawn(cmd, &root.procs_dir(), "halite-swarm")
}

fn ping_like(fun: &str, arg: Vec<Value>, tgt: &str) -> PublishRequest {
    PublishRequest {
        tgt: s(tgt),
        tgt_type: "glob".into(),
        fun: s(fun),
        arg: Value::Array(arg),
        ret: String::new(),
        kwargs: Vec::new(),
    }
}

/// Publishes `req` and collects `{minion: return}` until `expect` minions returned.
async fn returns(
    client: &LocalClient,
    req: &PublishRequest,
    expect: usize,
) -> BTreeMap<String, Value> {
    let mut listener = client.listen_jobs().await.expect("master bus");
    let reply = client.publish(req).await.expect("publish");
    // The master's expected-minion list is not checked: minions decide targeting, and what
    // this test checks is that every one of them answers.
    let jid = reply.jid.expect("a jid");
    let prefix = format!("salt/job/{jid}/ret/");
    let mut got = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while got.len() < expect {
        let ev = tokio::time::timeout_at(deadline, listener.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {expect} returns: {got:?}", got.len()))
            .expect("bus")
            .expect("bus open");
        if let Some(id) = ev.tag().strip_prefix(&prefix) {
            let ret = value::get(ev.data(), "return")
                .cloned()
                .unwrap_or(Value::Nil);
            assert_eq!(
                value::get_i64(ev.data(), "retcode"),
                Some(0),
                "{}",
                ev.data()
            );
            got.insert(id.to_owned(), ret);
        }
    }
    got
}

#[test]
fn fifty_swarm_minions_authenticate_and_answer_a_halite_master() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), TIMEOUT);
    let swarm = start_swarm(&root, COUNT);
    wait_for_log(swarm.stdout_path(), r#""type":"ready""#, TIMEOUT);
    let ready = swarm.stdout();
    assert!(ready.contains(&format!(r#""count":{COUNT}"#)), "{ready}");

    let accepted = std::fs::read_dir(root.master_pki_dir().join("minions"))
        .expect("accepted keys")
        .count();
    assert_eq!(accepted, COUNT);

    let cfg = MasterConfig::load(root.master_config_dir()).expect("master config");
    let client = LocalClient::new(&cfg);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let pings = returns(&client, &ping_like("test.ping", vec![], "*"), COUNT).await;
        let want: Vec<String> = (0..COUNT).map(|i| format!("smoke-{i}")).collect();
        assert_eq!(pings.keys().cloned().collect::<Vec<_>>().len(), COUNT);
        for id in &want {
            assert_eq!(pings.get(id), Some(&Value::Boolean(true)), "{id}");
        }
        let echo = returns(
            &client,
            &ping_like("test.echo", vec![s("hello")], "smoke-7"),
            1,
        )
        .await;
        assert_eq!(echo.get("smoke-7"), Some(&s("hello")));
    });
}

#[test]
fn swarm_minions_answer_a_stock_salt_master() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_stock_master(&root);
    wait_for_port(root.ret_port(), TIMEOUT);
    let cfg = MasterConfig::load(root.master_config_dir()).expect("master config");
    let key = cfg.cachedir.join(format!(".{}_key", cfg.user));
    let bus = cfg.sock_dir.join(halite_bus::MASTER_PUB);
    assert!(
        wait_until(TIMEOUT, || key.is_file() && bus.exists()),
        "the stock master never wrote its root key and bus socket"
    );
    let swarm = start_swarm(&root, 5);
    wait_for_log(swarm.stdout_path(), r#""type":"ready""#, TIMEOUT);
    let client = LocalClient::new(&cfg);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let pings = rt.block_on(returns(&client, &ping_like("test.ping", vec![], "*"), 5));
    assert_eq!(pings.len(), 5);
    assert!(
        pings.values().all(|v| *v == Value::Boolean(true)),
        "{pings:?}"
    );
}
