//! Pillar on a Halite master (issue 18, item 2): `_pillar` compiled by Salt's own Python
//! (`halite-pillar`) for stock minions. Two minions see only their own pillar; a pillar
//! render error reaches the `halite` CLI exactly as stock `salt` prints it against a stock
//! master with the same tree; `saltutil.refresh_pillar` brings a changed pillar.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// The pillar tree: each minion has its own secret, `bad` includes an sls that does not
/// render, everyone gets values from grains.
fn write_pillar(root: &TempRoot) {
    let dir = root.master_root().join("srv/pillar");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        (
            "top.sls",
            "base:\n  'm1':\n    - m1\n  'm2':\n    - m2\n  'bad':\n    - broken\n  '*':\n    - common\n",
        ),
        (
            "common.sls",
            "who: {{ grains['id'] }}\nkernel: {{ grains['kernel'] }}\n",
        ),
        ("m1.sls", "secret: one\n"),
        ("m2.sls", "secret: two\n"),
        ("broken.sls", "x: {{ foo.bar( }}\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// The master config: auto-accept, and Salt's Python (stock ignores the option).
fn master_yaml() -> String {
    format!(
        "auto_accept: true\nhalite_salt_python: {}\n",
        salt_venv().join("bin/python3").display()
    )
}

/// Starts the master (stock or Halite) and stock minions `ids`, and waits until each
/// answers `test.ping` through the matching CLI.
fn start(root: &TempRoot, stock: bool, ids: &[&str]) -> (Proc, Vec<Proc>) {
    let master = if stock {
        start_stock_master(root)
    } else {
        start_halite_master(root)
    };
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let minions = ids.iter().map(|id| start_stock_minion(root, id)).collect();
    for id in ids {
        let ok = wait_until(JOIN, || {
            let out = cli(root, stock, &[id, "test.ping", "--out", "json", "-t", "5"]);
            serde_json::from_slice::<Value>(&out.stdout)
                .is_ok_and(|v| v.get(*id) == Some(&Value::Bool(true)))
        });
        assert!(ok, "{id} never answered test.ping (stock master: {stock})");
    }
    (master, minions)
}

/// `halite <args>`, or stock `salt <args>` when `stock`.
fn cli(root: &TempRoot, stock: bool, args: &[&str]) -> Output {
    if stock {
        run_stock_salt(root, args)
    } else {
        run_halite(root, args)
    }
}

/// What a CLI printed and its exit code, for comparing two CLIs.
fn printed(out: &Output) -> (String, Option<i32>) {
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    (lines.join("\n"), out.status.code())
}

/// `VmRSS` of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The children of `pid` (the pillar workers of a Halite master).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                        stat.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                            == Some(pid.to_string().as_str())
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The compile times the master logged (`... compiled in X ms by worker N (cold|warm)`).
fn compile_times(log: &Path) -> (Vec<f64>, Vec<f64>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(" compiled in ") else {
            continue;
        };
        let Some((ms, _)) = rest.split_once(" ms ") else {
            continue;
        };
        let Ok(ms) = ms.parse::<f64>() else { continue };
        if line.ends_with("(cold)") {
            cold.push(ms);
        } else if line.ends_with("(warm)") {
            warm.push(ms);
        }
    }
    (cold, warm)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[test]
fn two_minions_see_only_their_own_pillar_are_targeted_by_it_and_refresh_brings_changes() {
    let root = TempRoot::new();
    write_pillar(&root);
    root.write_master_config(&master_yaml());
    let (master, _minions) = start(&root, false, &["m1", "m2"]);

    // 3008.3 masks pillar values in `pillar.items` unless asked not to.
    let items = halite_json(&root, &["*", "pillar.items", "unmask=True", "-t", "60"]);
    assert_eq!(
        items.get("m1"),
        Some(&json!({"who": "m1", "kernel": "Linux", "secret": "one"})),
        "{items:?}"
    );
    assert_eq!(
        items.get("m2"),
        Some(&json!({"who": "m2", "kernel": "Linux", "secret": "two"})),
        "{items:?}"
    );

    // Pillar targeting: the master expects the minions whose compiled pillar matches
    // (stock's minion data cache), so `-I` waits for m1 and only m1.
    let targeted = halite_json(&root, &["-I", "secret:one", "test.ping", "-t", "60"]);
    assert_eq!(
        Value::Object(targeted.clone()),
        json!({"m1": true}),
        "{targeted:?}"
    );

    // A changed pillar reaches the minion's in-memory pillar after refresh_pillar.
    std::fs::write(
        root.master_root().join("srv/pillar/m1.sls"),
        "secret: changed\n",
    )
    .unwrap();
    let refreshed = halite_json(
        &root,
        &["m1", "saltutil.refresh_pillar", "wait=True", "-t", "60"],
    );
    assert_eq!(
        refreshed.get("m1"),
        Some(&Value::Bool(true)),
        "{refreshed:?}"
    );
    let got = halite_json(
        &root,
        &["m1", "pillar.get", "secret", "unmask=True", "-t", "60"],
    );
    assert_eq!(got.get("m1"), Some(&json!("changed")), "{got:?}");

    // A few more compilations for the warm figure.
    for _ in 0..5 {
        let items = halite_json(&root, &["m2", "pillar.items", "unmask=True", "-t", "60"]);
        assert_eq!(items["m2"]["secret"], json!("two"));
    }
    let (cold, warm) = compile_times(&root.master_root().join("log/master"));
    let workers = children(master.pid());
    let rss: Vec<String> = workers
        .iter()
        .filter_map(|p| rss_kib(*p))
        .map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .collect();
    assert!(!warm.is_empty(), "the master logged no warm compilation");
    println!(
        "MEASURED pillar compile per request (halite master, Salt's Python worker, small tree): \
         cold median {:.1} ms ({} samples), warm median {:.1} ms ({} samples); worker RSS {}; \
         master RSS {:.1} MiB",
        median(cold.clone()),
        cold.len(),
        median(warm.clone()),
        warm.len(),
        rss.join(", "),
        rss_kib(master.pid()).unwrap_or(0) as f64 / 1024.0
    );
}

/// The same tree against a stock master and stock `salt`, then a Halite master and
/// `halite`: `pillar.items` and `state.apply` for a minion whose pillar does not render
/// print the same text and exit with the same code (`state.apply` in the `nested` and
/// `json` outputters).
#[test]
fn a_pillar_render_error_reaches_the_cli_as_salt_prints_it() {
    let mut results = Vec::new();
    for stock in [true, false] {
        let root = TempRoot::new();
        write_pillar(&root);
        root.write_master_config(&master_yaml());
        let (_master, _minions) = start(&root, stock, &["bad"]);
        let mut outputs = Vec::new();
        for args in [
            &["bad", "pillar.items", "-t", "60"][..],
            &[
                "bad",
                "pillar.items",
                "unmask=True",
                "--out",
                "json",
                "-t",
                "60",
            ][..],
            // `--out nested`: the `highstate` outputter is issue 18's item 4.
            &["bad", "state.apply", "--out", "nested", "-t", "60"][..],
            &["bad", "state.apply", "--out", "json", "-t", "60"][..],
        ] {
            outputs.push((args.join(" "), printed(&cli(&root, stock, args))));
        }
        results.push(outputs);
    }
    let (stock, halite) = (&results[0], &results[1]);
    for ((what, expected), (_, got)) in stock.iter().zip(halite) {
        assert_eq!(
            got, expected,
            "{what}: halite printed\n{}\n--- stock salt printed ---\n{}",
            got.0, expected.0
        );
    }
    assert!(
        stock[1].1 .0.contains("Rendering SLS 'broken' failed"),
        "stock reported the render error: {}",
        stock[1].1 .0
    );
}
