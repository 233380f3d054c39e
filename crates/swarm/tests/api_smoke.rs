//! `halite-bench api` works, correctness only (no timings): against a tiny Halite fleet —
//! a Halite master, 2 swarm minions and `halite-api` — a 2 s run prints a `RESULT post`
//! line with good replies and no errors, and a `RESULT events` line where every stream got
//! every event; the JSON record and the table carry the same figures.

use halite_testkit::{
    free_ports, halite_bin, run_command, start_halite_master, wait_for_log, wait_for_port, Proc,
    TempRoot, TIMEOUT,
};
use serde_json::Value as Json;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn keys_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("swarm-keys")
}

/// The value of `key=` in a `RESULT` line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn the_api_load_generator_reports_a_clean_run_against_halite_api() {
    let root = TempRoot::new();
    let api_port = free_ports(1)[0];
    let users = root.path().join("eauth-users");
    std::fs::write(&users, "bench:bench\n").expect("eauth users");
    let run = root.master_root().join("run");
    root.write_master_config(&format!(
        "auto_accept: true\n\
         external_auth:\n  file:\n    ^filename: {}\n    ^filetype: text\n    bench:\n      - 'test.*'\n\
         netapi_enable_clients: [local]\n\
         api_pidfile: {}\n\
         rest_cherrypy:\n  port: {api_port}\n  host: 127.0.0.1\n  disable_ssl: true\n",
        users.display(),
        run.join("salt-api.pid").display(),
    ));
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), TIMEOUT);
    let mut swarm = Command::new(env!("CARGO_BIN_EXE_halite-swarm"));
    swarm
        .args([
            "--count",
            "2",
            "--id-prefix",
            "apismoke-",
            "--key-bits",
            "1024",
        ])
        .args(["--master", &format!("127.0.0.1:{}", root.ret_port())])
        .arg("--keys-dir")
        .arg(keys_dir());
    let swarm = Proc::spawn(swarm, &root.procs_dir(), "halite-swarm");
    wait_for_log(swarm.stdout_path(), r#""type":"ready""#, TIMEOUT);
    let mut api = Command::new(halite_bin("halite-api"));
    api.arg("-c")
        .arg(root.master_config_dir())
        .args(["-l", "warning"]);
    let api = Proc::spawn(api, &root.procs_dir(), "halite-api");

    let results = root.path().join("results.jsonl");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_halite-bench"));
    bench
        .args(["api", "--url", &format!("http://127.0.0.1:{api_port}")])
        .args([
            "--label",
            "halite",
            "--minions",
            "2",
            "--ready-timeout",
            "60",
        ])
        .args(["--clients", "4", "--post-secs", "2", "--warmup-secs", "0.5"])
        .args([
            "--sse-clients",
            "3",
            "--events-per-sec",
            "200",
            "--event-secs",
            "2",
        ])
        .args(["--drain-secs", "10", "--subscribe-timeout", "30"])
        .arg("--sock-dir")
        .arg(root.master_root().join("sock"))
        .args(["--watch", &format!("api={}", api.pid())])
        .arg("--out")
        .arg(&results);
    let out = run_command(bench, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");

    let post = stdout
        .lines()
        .find(|l| l.starts_with("RESULT post label=halite "))
        .unwrap_or_else(|| panic!("no RESULT post line: {stdout}\n{stderr}"));
    assert_eq!(field(post, "errors"), Some("0"), "{post}");
    let ok: u64 = field(post, "ok").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(ok > 0, "{post}");
    let events = stdout
        .lines()
        .find(|l| l.starts_with("RESULT events label=halite "))
        .unwrap_or_else(|| panic!("no RESULT events line: {stdout}\n{stderr}"));
    for (k, v) in [
        ("streams", "3"),
        ("subscribed", "3"),
        ("fired", "400"),
        ("delivered_worst_pct", "100"),
        ("missing_max", "0"),
        ("duplicates", "0"),
        ("stream_errors", "0"),
    ] {
        assert_eq!(field(events, k), Some(v), "{k} in {events}");
    }

    let text = std::fs::read_to_string(&results).expect("results file");
    let record: Json = serde_json::from_str(text.trim()).expect("one JSON record");
    assert_eq!(record["post"]["ok"].as_u64(), Some(ok));
    assert_eq!(record["events"]["bus"]["received"].as_u64(), Some(400));
    assert!(
        record["events"]["procs"]["api"]["hwm_mib"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );
    assert!(record["post"]["procs"]["api"]["cpu_secs"]
        .as_f64()
        .is_some());

    let mut table = Command::new(env!("CARGO_BIN_EXE_halite-bench"));
    table.args(["api", "--table"]).arg(&results);
    let out = run_command(table, Duration::from_secs(30));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{md}");
    assert!(md.starts_with("| measure | halite |\n"), "{md}");
    assert!(
        md.contains("delivered by the end, worst stream | 100.0 % |"),
        "{md}"
    );
}
