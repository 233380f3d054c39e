//! The compatibility page, `docs/compatibility.md`, cannot drift from the execution modules.
//!
//! Its section between `<!-- generated: execution functions -->` and `<!-- end generated -->`
//! is a table generated from [`Registry::builtin`]: per module, the functions Halite offers
//! and the functions stock Salt 3008.3 has in that module that Halite does not ([`SALT`]).
//! `page_lists_every_execution_function` fails, naming the functions that are missing or
//! extra, when the page differs; `HALITE_BLESS=1 cargo test -p halite-exec --test
//! compat_doc` rewrites the section. [`SALT`] is checked against the stock venv's
//! `salt-call --local sys.list_functions`, and every `BENCHMARKS.md#anchor` link on the
//! page against BENCHMARKS.md's headings, so neither can go stale either.

use std::collections::{BTreeMap, BTreeSet};

use halite_exec::Registry;
use halite_testkit::compat_doc::{page_path, FunctionTable};

/// Stock Salt 3008.3's functions in the modules Halite implements, as
/// `salt-call --local sys.list_functions <module>` lists them on Linux
/// (`salt_lists_are_what_stock_salt_call_lists` checks them).
const SALT: &[(&str, &[&str])] = &[
    (
        "cmd",
        &[
            "exec_code",
            "exec_code_all",
            "has_exec",
            "powershell",
            "powershell_all",
            "retcode",
            "run",
            "run_all",
            "run_bg",
            "run_chroot",
            "run_stderr",
            "run_stdout",
            "script",
            "script_retcode",
            "shell",
            "shell_info",
            "shells",
            "tty",
            "which",
            "which_bin",
        ],
    ),
    ("event", &["fire", "fire_master", "send"]),
    (
        "grains",
        &[
            "append",
            "delkey",
            "delval",
            "equals",
            "fetch",
            "filter_by",
            "get",
            "has_value",
            "item",
            "items",
            "ls",
            "remove",
            "set",
            "setval",
            "setvals",
        ],
    ),
    ("publish", &["full_data", "publish", "runner"]),
    (
        "saltutil",
        &[
            "clear_cache",
            "clear_job_cache",
            "cmd",
            "cmd_iter",
            "find_cached_job",
            "find_job",
            "is_running",
            "kill_all_jobs",
            "kill_job",
            "list_extmods",
            "mmodule",
            "pillar_refresh",
            "refresh_beacons",
            "refresh_grains",
            "refresh_matchers",
            "refresh_modules",
            "refresh_pillar",
            "refresh_resources",
            "regen_keys",
            "revoke_auth",
            "runner",
            "running",
            "signal_job",
            "sync_all",
            "sync_beacons",
            "sync_clouds",
            "sync_engines",
            "sync_executors",
            "sync_grains",
            "sync_log_handlers",
            "sync_matchers",
            "sync_modules",
            "sync_output",
            "sync_outputters",
            "sync_pillar",
            "sync_proxymodules",
            "sync_renderers",
            "sync_resources",
            "sync_returners",
            "sync_sdb",
            "sync_serializers",
            "sync_states",
            "sync_thorium",
            "sync_tops",
            "sync_utils",
            "sync_wrapper",
            "term_all_jobs",
            "term_job",
            "update",
            "wheel",
        ],
    ),
    (
        "status",
        &[
            "all_status",
            "cpuinfo",
            "cpustats",
            "custom",
            "diskstats",
            "diskusage",
            "loadavg",
            "master",
            "meminfo",
            "netdev",
            "netstats",
            "nproc",
            "pid",
            "ping_master",
            "procs",
            "proxy_reconnect",
            "time",
            "uptime",
            "version",
            "vmstats",
            "w",
        ],
    ),
    (
        "sys",
        &[
            "argspec",
            "doc",
            "list_functions",
            "list_modules",
            "list_renderers",
            "list_returner_functions",
            "list_returners",
            "list_runner_functions",
            "list_runners",
            "list_state_functions",
            "list_state_modules",
            "reload_modules",
            "renderer_doc",
            "returner_argspec",
            "returner_doc",
            "runner_argspec",
            "runner_doc",
            "state_argspec",
            "state_doc",
            "state_schema",
        ],
    ),
    (
        "test",
        &[
            "arg",
            "arg_clean",
            "arg_repr",
            "arg_type",
            "assertion",
            "attr_call",
            "collatz",
            "conf_test",
            "cross_test",
            "deprecation_warning",
            "echo",
            "exception",
            "false",
            "fib",
            "get_opts",
            "kwarg",
            "module_report",
            "not_loaded",
            "opts_pkg",
            "outputter",
            "ping",
            "provider",
            "providers",
            "raise_exception",
            "rand_sleep",
            "rand_str",
            "random_hash",
            "retcode",
            "sleep",
            "stack",
            "true",
            "try",
            "tty",
            "version",
            "versions",
            "versions_information",
            "versions_report",
        ],
    ),
];

const TABLE: FunctionTable = FunctionTable {
    begin: "<!-- generated: execution functions -->",
    what: "execution functions",
    module_heading: "module",
    refresh: "HALITE_BLESS=1 cargo test -p halite-exec --test compat_doc",
    salt: SALT,
    salt_lister: "sys.list_functions",
};

#[test]
fn page_lists_every_execution_function() {
    TABLE.check_page(&Registry::builtin().names());
}

/// GitHub's anchor for a heading: lower case, without punctuation, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor GitHub gives BENCHMARKS.md's headings (repeats get `-1`, `-2`, ...).
fn benchmark_anchors() -> BTreeSet<String> {
    let path = halite_testkit::repo_root().join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if in_code {
            continue;
        }
        let base = slug(heading.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

#[test]
fn links_into_benchmarks_name_its_headings() {
    let page = std::fs::read_to_string(page_path()).expect("read docs/compatibility.md");
    let anchors = benchmark_anchors();
    let links: Vec<&str> = page
        .split("BENCHMARKS.md#")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .collect();
    assert!(!links.is_empty(), "the page links no BENCHMARKS.md section");
    let broken: Vec<&&str> = links.iter().filter(|a| !anchors.contains(**a)).collect();
    assert!(
        broken.is_empty(),
        "docs/compatibility.md links to BENCHMARKS.md sections that do not exist: {broken:?}; \
         the headings' anchors are {anchors:?}"
    );
}

#[test]
fn salt_lists_are_what_stock_salt_call_lists() {
    TABLE.check_salt_lists();
}

#[test]
fn slug_drops_punctuation_as_github_does() {
    assert_eq!(
        slug(" Peer communication: `publish.publish` and `publish.runner manage.up`"),
        "peer-communication-publishpublish-and-publishrunner-manageup"
    );
    assert_eq!(
        slug(" Failover time, p50 / p99 in seconds"),
        "failover-time-p50--p99-in-seconds"
    );
}
