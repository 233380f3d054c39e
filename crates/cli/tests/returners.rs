//! `halite --return`, `--return_config` and `--return_kwargs` reach the job as stock
//! `salt`'s do: the same command lines, sent by both clients to one Halite master, give
//! publish loads with the same `ret`, `ret_config` and `ret_kwargs` (read back from the
//! master's event journal, `salt/job/<jid>/publish`).

mod common;

use common::{halite, stock, JOIN};
use halite_testkit::{
    run_halite, start_halite_master, start_halite_minion, wait_for_log, wait_until, TempRoot,
};
use serde_json::{json, Value as Json};

/// `--async` output: the job id.
fn jid_of(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("Executed command with job ID: "))
        .map(|j| j.trim().to_owned())
        .unwrap_or_else(|| panic!("no job id in {out:?}"))
}

/// The publish load of job `jid`, from the master's journal.
fn publish_of(root: &TempRoot, jid: &str) -> Json {
    let tag = format!("salt/job/{jid}/publish");
    let out = run_halite(
        root,
        [
            "event", "listen", "--since", "0", "--json", "--tag", &tag, "-n", "1",
        ],
    );
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let event: Json = serde_json::from_str(line.trim())
        .unwrap_or_else(|e| panic!("no publish event for {jid} ({e}): {line:?}"));
    event["data"].clone()
}

/// The returner fields of a publish load (`null` when absent).
fn returner_fields(load: &Json) -> [(&'static str, Option<&Json>); 3] {
    [
        ("ret", load.get("ret")),
        ("ret_config", load.get("ret_config")),
        ("ret_kwargs", load.get("ret_kwargs")),
    ]
}

#[test]
fn returner_flags_reach_the_publish_as_salts_do() {
    let root = TempRoot::with_master_extra("auto_accept: true\n");
    let _master = start_halite_master(&root);
    wait_for_log(&root.master_log(), "The Salt Master is ready", JOIN);
    root.add_minion("m1");
    let _minion = start_halite_minion(&root, "m1");
    let up = wait_until(JOIN, || {
        halite(&root, &["m1", "test.ping", "--out", "json", "-t", "10"])
            .out
            .contains("\"m1\": true")
    });
    assert!(up, "minion m1 never answered");

    let cases: &[&[&str]] = &[
        &[
            "--return",
            "master_bus,syslog",
            "--return_config",
            "alternative",
            "--return_kwargs",
            r#"{"tag": "monitoring", "n": 1, "f": [1.5, null]}"#,
        ],
        // Not in braces: kept as the string it is.
        &["--return", "syslog", "--return_kwargs", "tag: x"],
        &["--return_kwargs", "[1, 2]"],
        &["--return_kwargs", "5"],
        // Empty values are not sent.
        &["--return", "", "--return_config", "", "--return_kwargs", ""],
        &[
            "--return=rawfile_json",
            r#"--return_kwargs={"filename": "/tmp/x"}"#,
        ],
    ];
    for flags in cases {
        let mut args = vec!["--async"];
        args.extend_from_slice(flags);
        args.extend(["m1", "test.ping"]);
        let (h, s) = (halite(&root, &args), stock(&root, &args));
        let (h_load, s_load) = (
            publish_of(&root, &jid_of(&h.out)),
            publish_of(&root, &jid_of(&s.out)),
        );
        assert_eq!(
            returner_fields(&h_load),
            returner_fields(&s_load),
            "{flags:?}\nhalite: {h_load}\nsalt:   {s_load}"
        );
    }
    let mut args = vec!["--async"];
    args.extend_from_slice(cases[0]);
    args.extend(["m1", "test.ping"]);
    let load = publish_of(&root, &jid_of(&halite(&root, &args).out));
    assert_eq!(load["ret"], json!("master_bus,syslog"));
    assert_eq!(load["ret_config"], json!("alternative"));
    assert_eq!(
        load["ret_kwargs"],
        json!({"tag": "monitoring", "n": 1, "f": [1.5, null]})
    );
}
