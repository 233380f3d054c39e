//! `halite-run state.event` beside stock `salt-run state.event` on a Halite master: the same
//! events, fired by stock Python, print the same bytes; the runner's own events match.

use halite_journal::{BusEvent, MasterBus, Since, TagFilter};
use halite_proto::value::map;
use halite_proto::Value;
use halite_testkit::{
    assert_success, halite_bin, salt_venv, start_halite_master, stock_command, wait_for_log,
    wait_until, Proc, TempRoot,
};
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// Fires a varied set of events over one stock `SaltEvent`, in order.
const PY_FIRE: &str = r#"
import sys
import salt.config, salt.utils.event
opts = salt.config.master_config(sys.argv[1])
ev = salt.utils.event.get_event("master", sock_dir=opts["sock_dir"], opts=opts, listen=False)
events = [
    ("cmp/a/1", {"s": "plain", "u": "h\u00e9llo \u2713", "n": 1, "big": 2**63, "neg": -5,
                 "f": 1.5, "f2": 1e-07, "f3": 3.0, "t": True, "none": None,
                 "l": [1, "two", [3]], "nested": {"z": 1, "a": {"b": []}}}),
    ("cmp/x/2", {"raw": b"\xff\x00raw", "text": "ok".encode()}),
    ("cmp/b/3", {"k": "v", "q": "quote\"back\\slash\ttab\nnl", "ctl": "\x01"}),
    ("cmp/c/4", {}),
    ("cmp/d/5", {1: "one", "list": [], "empty": {}}),
    ("cmp/e/6", {"tuple": (1, 2), "key \u00e9": 1}),
]
for tag, data in events:
    assert ev.fire_event(data, tag)
"#;

struct Pair {
    stock: Proc,
    halite: Proc,
}

fn start_pair(root: &TempRoot, name: &str, args: &[&str]) -> Pair {
    let mut stock = stock_command(root, "salt-run");
    stock.args(["-l", "debug", "state.event"]).args(args);
    let mut halite = Command::new(halite_bin("halite-run"));
    halite
        .arg("-c")
        .arg(root.master_config_dir())
        .args(["-l", "debug", "state.event"])
        .args(args);
    Pair {
        stock: Proc::spawn(stock, &root.procs_dir(), &format!("salt-run-{name}")),
        halite: Proc::spawn(halite, &root.procs_dir(), &format!("halite-run-{name}")),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn halite_run_prints_exactly_what_salt_run_prints() {
    let root = TempRoot::new();
    let _master = start_halite_master(&root);
    wait_for_log(&root.master_log(), "The Salt Master is ready", WAIT);
    let bus = MasterBus::new(root.master_root().join("sock"), 1_048_576);
    let rt = runtime();

    let mut compact = start_pair(&root, "compact", &["cmp/*", "count=6"]);
    let mut pretty = start_pair(
        &root,
        "pretty",
        &[r"cmp/(a|b)/\d+", "count=2", "pretty=True"],
    );
    // Both runners log non-matching tags at debug: once all four have skipped a probe, all
    // four are listening.
    let all = [
        &compact.stock,
        &compact.halite,
        &pretty.stock,
        &pretty.halite,
    ];
    let listening = wait_until(WAIT, || {
        rt.block_on(bus.fire("probe/x", map([("p", Value::from(1))])))
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        all.iter()
            .all(|p| p.stderr().contains("Skipping event tag: probe/x"))
    });
    assert!(listening, "not every runner started listening");

    let out = Command::new(salt_venv().join("bin").join("python"))
        .args(["-c", PY_FIRE])
        .arg(root.master_config_file())
        .output()
        .unwrap();
    assert_success("firing from stock Python", &out);

    for p in [
        &mut compact.stock,
        &mut compact.halite,
        &mut pretty.stock,
        &mut pretty.halite,
    ] {
        let status = p
            .wait_exit(WAIT)
            .unwrap_or_else(|| panic!("{} did not stop", p.name()));
        assert!(status.success(), "{}: {status}\n{}", p.name(), p.stderr());
    }
    let stock = compact.stock.stdout();
    assert_eq!(
        stock.lines().count(),
        7,
        "six events and the return:\n{stock}"
    );
    assert!(stock.ends_with("\nNone\n"), "{stock}");
    assert_eq!(compact.halite.stdout(), stock);
    let stock = pretty.stock.stdout();
    assert!(stock.starts_with("cmp/a/1\t{\n    \"_stamp\": "), "{stock}");
    assert!(
        stock.contains("\n    \"big\": 9223372036854775808,\n"),
        "{stock}"
    );
    assert_eq!(pretty.halite.stdout(), stock);

    // The runner's own events: `new` then `ret`, with Salt's keys in Salt's order.
    let runs: Vec<BusEvent> = rt.block_on(async {
        let mut events = bus
            .listen(TagFilter::glob("salt/run/*"), Since::Id(0))
            .await
            .unwrap();
        let mut out = Vec::new();
        while out.len() < 8 {
            out.push(
                tokio::time::timeout(WAIT, events.recv())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap(),
            );
        }
        out
    });
    let shape = |ev: &BusEvent| -> (String, Vec<String>, String) {
        let Value::Map(m) = &ev.data else {
            panic!("not a map: {ev:?}")
        };
        let keys = m
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect();
        let fun_args = halite_proto::value::get(&ev.data, "fun_args")
            .unwrap()
            .to_string();
        (
            ev.tag.rsplit('/').next().unwrap().to_owned(),
            keys,
            fun_args,
        )
    };
    let mut shapes: Vec<_> = runs.iter().map(shape).collect();
    shapes.sort();
    shapes.dedup();
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let new_keys = keys(&["fun", "jid", "user", "fun_args", "_stamp"]);
    let ret_keys = keys(&[
        "fun", "jid", "user", "fun_args", "_stamp", "return", "success",
    ]);
    // Stock and Halite runs of one pair collapse into one shape each.
    assert_eq!(shapes.len(), 4, "{shapes:#?}");
    for (what, k, _) in &shapes {
        assert_eq!(k, if what == "new" { &new_keys } else { &ret_keys });
    }
}

#[test]
fn bad_state_event_calls_are_reported() {
    let root = TempRoot::new();
    let out = Command::new(halite_bin("halite-run"))
        .arg("-c")
        .arg(root.master_config_dir())
        .args(["state.event", "a", "b", "c", "d", "e", "f", "g"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(
        "Passed invalid arguments: event() takes from 0 to 6 positional arguments but 7 were given"
    ));
}
