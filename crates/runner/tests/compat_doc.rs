//! The compatibility page, `docs/compatibility.md`, cannot drift from the runners.
//!
//! Its section between `<!-- generated: runner functions -->` and `<!-- end generated -->`
//! is a table generated from [`Registry::builtin`]: per runner module, the functions Halite
//! offers and the functions stock Salt 3008.3 has in that module that Halite does not
//! ([`SALT`]). `page_lists_every_runner_function` fails, naming the functions that are
//! missing or extra, when the page differs; `HALITE_BLESS=1 cargo test -p halite-runner
//! --test compat_doc` rewrites the section. [`SALT`] is checked against the stock venv's
//! `salt-call --local sys.list_runner_functions`. (halite-exec's `compat_doc` test does
//! the same for the execution functions, and checks the page's links.)

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

use halite_runner::Registry;

const BEGIN: &str = "<!-- generated: runner functions -->";
const END: &str = "<!-- end generated -->";
const REFRESH: &str = "HALITE_BLESS=1 cargo test -p halite-runner --test compat_doc";

/// Stock Salt 3008.3's runner functions in the runner modules Halite implements, as
/// `salt-call --local sys.list_runner_functions <module>` lists them
/// (`salt_lists_are_what_stock_salt_call_lists` checks them). Salt has no `acl` runner.
const SALT: &[(&str, &[&str])] = &[
    (
        "jobs",
        &[
            "active",
            "exit_success",
            "last_run",
            "list_job",
            "list_jobs",
            "list_jobs_filter",
            "lookup_jid",
            "master",
            "print_job",
        ],
    ),
    (
        "manage",
        &[
            "alived",
            "allowed",
            "bootstrap",
            "bootstrap_psexec",
            "down",
            "joined",
            "key_regen",
            "list_not_state",
            "list_state",
            "not_alived",
            "not_allowed",
            "not_joined",
            "not_present",
            "not_reaped",
            "present",
            "reaped",
            "safe_accept",
            "status",
            "up",
            "versions",
        ],
    ),
    (
        "test",
        &[
            "arg",
            "get_opts",
            "metasyntactic",
            "raw_arg",
            "sleep",
            "stdout_print",
            "stream",
        ],
    ),
];

fn page_path() -> PathBuf {
    halite_testkit::repo_root().join("docs/compatibility.md")
}

/// The generated section, markers included: one table row per runner module.
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
        "{BEGIN}\n| runner module | Halite offers | Salt 3008.3 has, Halite does not yet |\n\
         |---|---|---|\n"
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
/// and halite-exec's, which rewrites another section) do not overwrite each other.
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
fn page_lists_every_runner_function() {
    let names = Registry::builtin().names();
    let expected = generated(&names);
    let (mut file, page) = open_locked();
    let Some(range) = section(&page) else {
        panic!(
            "docs/compatibility.md has no `{BEGIN}` ... `{END}` section: put the two markers \
             where the runner functions belong, then run {REFRESH}"
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
        eprintln!("docs/compatibility.md: runner functions rewritten");
        return;
    }
    let on_page = listed(&page[range]);
    let offered: BTreeSet<String> = names.into_iter().collect();
    let missing: Vec<&String> = offered.difference(&on_page).collect();
    let extra: Vec<&String> = on_page.difference(&offered).collect();
    let what = if missing.is_empty() && extra.is_empty() {
        "it lists the same runners, but not as generated (layout or Salt's lists)".to_owned()
    } else {
        format!("offered but missing from the page: {missing:?}; on the page but not offered: {extra:?}")
    };
    panic!(
        "docs/compatibility.md: the runner functions are out of date: {what}.\n\
         Refresh the section with:\n    {REFRESH}\nExpected section:\n{expected}"
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
        "sys.list_runner_functions".to_owned(),
    ];
    args.extend(modules.iter().map(|m| (*m).to_owned()));
    let output = halite_testkit::run(
        halite_testkit::stock_bin("salt-call"),
        &args,
        halite_testkit::TIMEOUT,
    );
    let stdout = halite_testkit::assert_success("salt-call sys.list_runner_functions", &output);
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("salt-call prints JSON");
    let stock: BTreeSet<String> = json["local"]
        .as_array()
        .expect("a list of runner functions")
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
        "{BEGIN}\n| runner module | a | b |\n|---|---|---|\n\
         | `acl` (Halite only) | `check` | – |\n\
         | `jobs` (1 of 2) | `active` | `master` |\n{END}"
    );
    let names: Vec<String> = listed(&section).into_iter().collect();
    assert_eq!(names, ["acl.check", "jobs.active"]);
}
