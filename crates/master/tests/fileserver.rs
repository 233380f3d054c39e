//! A stock salt-minion 3008.3 runs states from a Halite master's `roots` file server
//! (issue 18, item 1) and pillar (item 2): top file, `file.directory`, a `file.managed`
//! rendered by the minion from a `salt://` Jinja template using a pillar value (compiled
//! on the master by Salt's Python, `halite-pillar`) and grains, a `cmd.run` with
//! `onchanges`; files larger than `file_buffer_size`; listings; and requests that try to
//! leave the roots.

mod common;

use common::*;
use halite_testkit::*;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// More than two `file_buffer_size` chunks (1 MiB), and not a multiple of one.
const BIG_LEN: usize = (5 << 20) / 2 + 77;

/// Writes the state tree into `srv` (`srv/salt` is `base`, `srv/envs/__env__` serves any
/// other saltenv, `srv/secret` is outside every root, `srv/pillar` is the pillar root);
/// the states write below `out`.
fn write_tree(srv: &Path, out: &Path) {
    let pillar = srv.join("pillar");
    std::fs::create_dir_all(&pillar).unwrap();
    std::fs::write(pillar.join("top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    std::fs::write(pillar.join("web.sls"), "web:\n  owner: ops-team\n").unwrap();
    let salt = srv.join("salt");
    std::fs::create_dir_all(salt.join("web/files")).unwrap();
    std::fs::create_dir_all(salt.join("web/empty")).unwrap();
    std::fs::create_dir_all(srv.join("envs/dev")).unwrap();
    std::fs::write(salt.join("top.sls"), "base:\n  '*':\n    - web\n").unwrap();
    let out = out.display();
    std::fs::write(
        salt.join("web/init.sls"),
        format!(
            "web-dir:\n  file.directory:\n    - name: {out}/site\n    - makedirs: True\n\n\
             web-motd:\n  file.managed:\n    - name: {out}/site/motd\n    \
             - source: salt://web/files/motd.j2\n    - template: jinja\n    \
             - require:\n      - file: web-dir\n\n\
             web-reload:\n  cmd.run:\n    - name: echo reloaded >> {out}/reloads\n    \
             - onchanges:\n      - file: web-motd\n"
        ),
    )
    .unwrap();
    std::fs::write(
        salt.join("web/files/motd.j2"),
        "Welcome to {{ grains['id'] }} running {{ grains['kernel'] }}, \
         kept by {{ pillar['web']['owner'] }}\n",
    )
    .unwrap();
    std::fs::write(salt.join("web/files/big.bin"), big_content()).unwrap();
    std::fs::write(srv.join("envs/dev/dev.txt"), "dev\n").unwrap();
    std::fs::write(srv.join("secret"), "outside every root\n").unwrap();
}

/// Deterministic bytes that do not compress to nothing.
fn big_content() -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..BIG_LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// The master config lines for the tree under `srv`, with Salt's Python for pillar
/// (`halite_salt_python`, which a stock master ignores).
fn roots_yaml(srv: &Path) -> String {
    format!(
        "auto_accept: true\nfile_roots:\n  base: [{}]\n  __env__: [{}]\n\
         pillar_roots:\n  base: [{}]\nhalite_salt_python: {}\n",
        srv.join("salt").display(),
        srv.join("envs/__env__").display(),
        srv.join("pillar").display(),
        salt_venv().join("bin/python3").display()
    )
}

/// `halite <args> --out json` (or stock `salt` when `stock`), the return of `m1`;
/// panics with the output when there is none.
fn call(root: &TempRoot, stock: bool, args: &[&str]) -> Value {
    let mut all = vec!["m1"];
    all.extend_from_slice(args);
    all.extend(["--out", "json", "-t", "90"]);
    let out = if stock {
        run_stock_salt(root, &all)
    } else {
        run_halite(root, &all)
    };
    let mut merged = Map::new();
    for doc in serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>() {
        if let Ok(Value::Object(m)) = doc {
            merged.extend(m);
        }
    }
    merged.remove("m1").unwrap_or_else(|| {
        panic!(
            "no return from m1 for {args:?}:\n--- stdout ---\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The states of a `state.apply` return, by id (`web-dir`, ...), asserting each succeeded.
fn states(ret: &Value) -> Map<String, Value> {
    let Some(all) = ret.as_object() else {
        panic!("state.apply did not return states: {ret}");
    };
    let mut by_id = Map::new();
    for (key, state) in all {
        assert_eq!(state["result"], Value::Bool(true), "{key} failed: {state}");
        by_id.insert(
            state["__id__"].as_str().unwrap_or(key).to_owned(),
            state.clone(),
        );
    }
    by_id
}

fn apply_and_check_first_then_second_run(root: &TempRoot, stock_cli: bool, out: &Path) {
    let first = states(&call(root, stock_cli, &["state.apply"]));
    let mut ids: Vec<&str> = first.keys().map(String::as_str).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["web-dir", "web-motd", "web-reload"], "{first:?}");
    for id in ids {
        assert_ne!(
            first[id]["changes"],
            serde_json::json!({}),
            "{id} changed nothing"
        );
    }
    assert_eq!(
        std::fs::read_to_string(out.join("site/motd")).unwrap(),
        "Welcome to m1 running Linux, kept by ops-team\n",
        "the template rendered with the minion's grains and pillar"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("reloads")).unwrap(),
        "reloaded\n"
    );

    let second = states(&call(root, stock_cli, &["state.apply"]));
    assert_eq!(second.len(), 3);
    for (id, state) in &second {
        assert_eq!(
            state["changes"],
            serde_json::json!({}),
            "{id} changed again: {state}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(out.join("reloads")).unwrap(),
        "reloaded\n",
        "onchanges did not fire without a change"
    );
}

fn start(root: &TempRoot, stock_master: bool) -> (Proc, Proc) {
    let master = if stock_master {
        start_stock_master(root)
    } else {
        start_halite_master(root)
    };
    wait_for_port(root.ret_port(), Duration::from_secs(60));
    let minion = start_stock_minion(root, "m1");
    let ok = wait_until(JOIN, || {
        call_quietly(root, stock_master, &["test.ping"]) == Some(Value::Bool(true))
    });
    assert!(ok, "m1 never answered test.ping");
    (master, minion)
}

fn call_quietly(root: &TempRoot, stock: bool, args: &[&str]) -> Option<Value> {
    let mut all = vec!["m1"];
    all.extend_from_slice(args);
    all.extend(["--out", "json", "-t", "5"]);
    let out = if stock {
        run_stock_salt(root, &all)
    } else {
        run_halite(root, &all)
    };
    serde_json::from_slice::<Map<String, Value>>(&out.stdout)
        .ok()
        .and_then(|mut m| m.remove("m1"))
}

#[test]
fn stock_minion_applies_states_and_fetches_files_from_halite_roots() {
    let root = TempRoot::new();
    let srv = root.master_root().join("srv");
    let out = root.path().join("out");
    write_tree(&srv, &out);
    root.write_master_config(&roots_yaml(&srv));
    let (_master, _minion) = start(&root, false);

    apply_and_check_first_then_second_run(&root, false, &out);

    // A file of three chunks, plain and gzip-compressed, arrives intact.
    for (name, extra) in [("big-plain", None), ("big-gzip", Some("gzip=6"))] {
        let dest = root.path().join(name);
        let dest_s = dest.display().to_string();
        let mut args = vec!["cp.get_file", "salt://web/files/big.bin", dest_s.as_str()];
        args.extend(extra);
        assert_eq!(call(&root, false, &args), Value::String(dest_s.clone()));
        let got = std::fs::read(&dest).unwrap();
        assert_eq!(got.len(), BIG_LEN, "{name}");
        assert!(got == big_content(), "{name}: the content differs");
    }

    // Listings match the roots.
    let strings = |v: Value| -> Vec<String> {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
    };
    assert_eq!(
        strings(call(&root, false, &["cp.list_master"])),
        [
            "top.sls",
            "web/files/big.bin",
            "web/files/motd.j2",
            "web/init.sls"
        ]
    );
    assert_eq!(
        strings(call(&root, false, &["cp.list_master_dirs"])),
        ["web", "web/empty", "web/files"]
    );
    assert_eq!(
        strings(call(&root, false, &["cp.list_master", "saltenv=dev"])),
        ["dev.txt"]
    );
    let envs = strings(call(&root, false, &["cp.list_states", "saltenv=base"]));
    assert!(envs.contains(&"web".to_owned()), "{envs:?}");

    // Nothing outside the roots: traversal, absolute paths, saltenvs that would move the
    // `__env__` root onto `srv` (where `secret` is).
    for (url, saltenv) in [
        ("salt://../../etc/passwd", "base"),
        ("salt://../secret", "base"),
        ("salt://web/../../secret", "base"),
        ("salt:///etc/passwd", "base"),
        ("salt://secret", ".."),
        ("salt://secret?saltenv=..", "base"),
    ] {
        let dest = root.path().join("stolen");
        let dest_s = dest.display().to_string();
        let env = format!("saltenv={saltenv}");
        let got = call(
            &root,
            false,
            &["cp.get_file", url, dest_s.as_str(), env.as_str()],
        );
        assert!(
            got == Value::Bool(false) || got == Value::String(String::new()),
            "{url} in {saltenv}: {got}"
        );
        assert!(!dest.exists(), "{url} in {saltenv} was written");
        let hashed = call(&root, false, &["cp.hash_file", url, env.as_str()]);
        assert!(
            hashed.as_str().is_some_and(str::is_empty)
                || hashed == Value::Bool(false)
                || hashed.as_object().is_some_and(Map::is_empty),
            "{url} in {saltenv} hashed: {hashed}"
        );
    }
    assert_eq!(
        call(&root, false, &["cp.list_master", "saltenv=.."]),
        serde_json::json!([])
    );
}

/// CPU seconds (user + system) the live processes `pids` have used, from `/proc/<pid>/stat`
/// (in USER_HZ ticks, 100 per second on Linux).
fn cpu_secs(pids: &[u32]) -> f64 {
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let mut fields = rest.split_whitespace().skip(11);
            let utime: u64 = fields.next()?.parse().ok()?;
            let stime: u64 = fields.next()?.parse().ok()?;
            Some(utime + stime)
        })
        .sum();
    ticks as f64 / 100.0
}

/// The same tree, minion and stock `salt` CLI against a stock master: the same states
/// succeed with the same changes. The wall time of warm `state.apply` runs and the master
/// CPU they cost are printed for each master (never asserted: the machine may be loaded).
#[test]
fn state_apply_beside_a_stock_master_gives_the_same_result() {
    const RUNS: usize = 3;
    let mut figures = Vec::new();
    for stock_master in [false, true] {
        let root = TempRoot::new();
        let srv = root.master_root().join("srv");
        let out: PathBuf = root.path().join("out");
        write_tree(&srv, &out);
        root.write_master_config(&roots_yaml(&srv));
        let (master, _minion) = start(&root, stock_master);
        apply_and_check_first_then_second_run(&root, true, &out);
        let cpu_before = cpu_secs(&master.pids());
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let ret = states(&call(&root, true, &["state.apply"]));
            runs.push(t.elapsed());
            assert_eq!(ret.len(), 3);
        }
        let cpu = (cpu_secs(&master.pids()) - cpu_before) / RUNS as f64;
        runs.sort();
        figures.push((runs[RUNS / 2].as_secs_f64(), cpu));
    }
    println!(
        "MEASURED fileserver state.apply (3 states, stock minion, stock salt CLI, warm, \
         {RUNS} runs): wall median halite master {:.3} s, stock master {:.3} s; master CPU \
         per run halite {:.3} s, stock {:.3} s",
        figures[0].0, figures[1].0, figures[0].1, figures[1].1
    );
}
