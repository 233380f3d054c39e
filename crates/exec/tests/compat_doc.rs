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
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

use halite_exec::Registry;

const BEGIN: &str = "<!-- generated: execution functions -->";
const END: &str = "<!-- end generated -->";
const REFRESH: &str = "HALITE_BLESS=1 cargo test -p halite-exec --test compat_doc";

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

fn page_path() -> PathBuf {
    halite_testkit::repo_root().join("docs/compatibility.md")
}

/// The generated section, markers included: one table row per module.
fn generated(names: &[String]) -> String {
    let mut modules: BTreeMap<&str, BTreeSet<&str>> = SALT
        .iter()
        .map(|(module, _)| (*module, BTreeSet::new()))
        .collect();
    for name in names {
        let (module, fun) = name.split_once('.').unwrap_or((name, ""));
        modules.entry(module).or_default().insert(fun);
    }
    let mut out = format!(
        "{BEGIN}\n| module | Halite offers | Salt 3008.3 has, Halite does not yet |\n|---|---|---|\n"
    );
    for (module, offered) in &modules {
        let salt = SALT.iter().find(|(m, _)| m == module).map(|(_, f)| *f);
        let label = match salt {
            Some(salt) => format!(
                "`{module}` ({} of {})",
                offered.iter().filter(|f| salt.contains(f)).count(),
                salt.len()
            ),
            None => format!("`{module}` (Halite only)"),
        };
        let offered_cell = if offered.is_empty() {
            "–".to_owned()
        } else {
            offered
                .iter()
                .map(|f| match salt {
                    Some(salt) if !salt.contains(f) => format!("`{f}` (Halite only)"),
                    _ => format!("`{f}`"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let missing: Vec<String> = salt
            .unwrap_or_default()
            .iter()
            .filter(|f| !offered.contains(*f))
            .map(|f| format!("`{f}`"))
            .collect();
        let missing_cell = if missing.is_empty() {
            "–".to_owned()
        } else {
            missing.join(", ")
        };
        out.push_str(&format!("| {label} | {offered_cell} | {missing_cell} |\n"));
    }
    // A blank line ends the table before the closing marker.
    out.push('\n');
    out.push_str(END);
    out
}

/// Where the generated section is in `page`: from the start of [`BEGIN`] to the end of the
/// first [`END`] after it.
fn section(page: &str) -> Option<std::ops::Range<usize>> {
    let start = page.find(BEGIN)?;
    let end = start + page[start..].find(END)? + END.len();
    Some(start..end)
}

/// The `module.function` names a section lists: the backticked words of each table row's
/// second cell, under the module named in its first.
fn listed(section: &str) -> BTreeSet<String> {
    let backticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut names = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').collect();
        let (Some(module_cell), Some(offered_cell)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some(module) = backticked(module_cell).into_iter().next() else {
            continue;
        };
        for fun in backticked(offered_cell) {
            names.insert(format!("{module}.{fun}"));
        }
    }
    names
}

/// Opens the page for reading and writing, locked so that two blessing tests (this crate's
/// and halite-runner's, which rewrites another section) do not overwrite each other.
fn open_locked() -> (File, String) {
    let path = page_path();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    let mut text = String::new();
    file.read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    (file, text)
}

#[test]
fn page_lists_every_execution_function() {
    let names = Registry::builtin().names();
    let expected = generated(&names);
    let (mut file, page) = open_locked();
    let Some(range) = section(&page) else {
        panic!(
            "docs/compatibility.md has no `{BEGIN}` ... `{END}` section: put the two markers \
             where the execution functions belong, then run {REFRESH}"
        );
    };
    if page[range.clone()] == expected {
        return;
    }
    if std::env::var_os("HALITE_BLESS").is_some() {
        let refreshed = format!("{}{expected}{}", &page[..range.start], &page[range.end..]);
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(refreshed.as_bytes()))
            .unwrap_or_else(|e| panic!("cannot rewrite {}: {e}", page_path().display()));
        eprintln!("docs/compatibility.md: execution functions rewritten");
        return;
    }
    let on_page = listed(&page[range]);
    let offered: BTreeSet<String> = names.into_iter().collect();
    let missing: Vec<&String> = offered.difference(&on_page).collect();
    let extra: Vec<&String> = on_page.difference(&offered).collect();
    let what = if missing.is_empty() && extra.is_empty() {
        "it lists the same functions, but not as generated (layout or Salt's lists)".to_owned()
    } else {
        format!("offered but missing from the page: {missing:?}; on the page but not offered: {extra:?}")
    };
    panic!(
        "docs/compatibility.md: the execution functions are out of date: {what}.\n\
         Refresh the section with:\n    {REFRESH}\nExpected section:\n{expected}"
    );
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
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("root dir");
    std::fs::write(
        dir.path().join("minion"),
        format!(
            "id: compat-doc\nroot_dir: {root}\nuser: {user}\nlog_file: {root}/minion.log\n",
            root = root.display(),
            user = halite_testkit::current_user()
        ),
    )
    .expect("write minion config");
    let modules: Vec<&str> = SALT.iter().map(|(m, _)| *m).collect();
    let mut args = vec![
        "-c".to_owned(),
        dir.path().display().to_string(),
        "--local".to_owned(),
        "--out".to_owned(),
        "json".to_owned(),
        "sys.list_functions".to_owned(),
    ];
    args.extend(modules.iter().map(|m| (*m).to_owned()));
    let output = halite_testkit::run(
        halite_testkit::stock_bin("salt-call"),
        &args,
        halite_testkit::TIMEOUT,
    );
    let stdout = halite_testkit::assert_success("salt-call sys.list_functions", &output);
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("salt-call prints JSON");
    let stock: BTreeSet<String> = json["local"]
        .as_array()
        .expect("a list of functions")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let ours: BTreeSet<String> = SALT
        .iter()
        .flat_map(|(m, funs)| funs.iter().map(move |f| format!("{m}.{f}")))
        .collect();
    assert_eq!(
        ours, stock,
        "SALT in this file must be what stock salt-call lists for {modules:?}"
    );
}

#[test]
fn listed_reads_the_offered_column_only() {
    let section = format!(
        "{BEGIN}\n| module | a | b |\n|---|---|---|\n\
         | `test` (2 of 3) | `ping`, `echo` (Halite only) | `stack` |\n{END}"
    );
    let names: Vec<String> = listed(&section).into_iter().collect();
    assert_eq!(names, ["test.echo", "test.ping"]);
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
