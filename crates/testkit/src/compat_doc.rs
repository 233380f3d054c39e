//! Generated function tables in the compatibility page, `docs/compatibility.md`.
//!
//! A crate with a registry of Salt functions (halite-exec's execution functions,
//! halite-runner's runners) keeps a section of the page between its own `<!-- generated:
//! ... -->` marker and [`END`]: per module, the functions Halite offers and the functions
//! stock Salt 3008.3 has in that module that Halite does not. [`FunctionTable::check_page`]
//! fails, naming the functions missing or extra, when the page differs from what the
//! registry generates, and rewrites the section under `HALITE_BLESS=1`;
//! [`FunctionTable::check_salt_lists`] checks the table's idea of Salt's functions against
//! the stock venv's `salt-call --local sys.list_*functions`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

/// The marker that ends every generated section.
pub const END: &str = "<!-- end generated -->";

/// One generated section of the page.
pub struct FunctionTable {
    /// Its opening marker, e.g. `<!-- generated: runner functions -->`.
    pub begin: &'static str,
    /// What the section lists, for messages ("execution functions").
    pub what: &'static str,
    /// The first column's heading ("module", "runner module").
    pub module_heading: &'static str,
    /// The command that rewrites the section.
    pub refresh: &'static str,
    /// Stock Salt's functions in each module Halite implements.
    pub salt: &'static [(&'static str, &'static [&'static str])],
    /// The stock `salt-call` function that lists them (`sys.list_functions`).
    pub salt_lister: &'static str,
}

/// `docs/compatibility.md` in this checkout.
pub fn page_path() -> PathBuf {
    crate::repo_root().join("docs/compatibility.md")
}

impl FunctionTable {
    /// The generated section, markers included: one table row per module.
    pub fn generated(&self, names: &[String]) -> String {
        let mut modules: BTreeMap<&str, BTreeSet<&str>> = self
            .salt
            .iter()
            .map(|(module, _)| (*module, BTreeSet::new()))
            .collect();
        for name in names {
            let (module, fun) = name.split_once('.').unwrap_or((name, ""));
            modules.entry(module).or_default().insert(fun);
        }
        let mut out = format!(
            "{}\n| {} | Halite offers | Salt 3008.3 has, Halite does not yet |\n|---|---|---|\n",
            self.begin, self.module_heading
        );
        for (module, offered) in &modules {
            let salt = self.salt.iter().find(|(m, _)| m == module).map(|(_, f)| *f);
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

    /// Where the section is in `page`: from the start of its marker to the end of the
    /// first [`END`] after it.
    fn section(&self, page: &str) -> Option<std::ops::Range<usize>> {
        let start = page.find(self.begin)?;
        let end = start + page[start..].find(END)? + END.len();
        Some(start..end)
    }

    /// Panics unless the page's section is what `names` (the registry's `module.function`
    /// names) generate; with `HALITE_BLESS` set, rewrites the section instead.
    pub fn check_page(&self, names: &[String]) {
        let expected = self.generated(names);
        let (mut file, page) = open_locked();
        let Some(range) = self.section(&page) else {
            panic!(
                "docs/compatibility.md has no `{}` ... `{END}` section: put the two markers \
                 where the {} belong, then run {}",
                self.begin, self.what, self.refresh
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
            eprintln!("docs/compatibility.md: {} rewritten", self.what);
            return;
        }
        let on_page = listed(&page[range]);
        let offered: BTreeSet<String> = names.iter().cloned().collect();
        let missing: Vec<&String> = offered.difference(&on_page).collect();
        let extra: Vec<&String> = on_page.difference(&offered).collect();
        let what = if missing.is_empty() && extra.is_empty() {
            "it lists the same functions, but not as generated (layout or Salt's lists)".to_owned()
        } else {
            format!(
                "offered but missing from the page: {missing:?}; on the page but not offered: {extra:?}"
            )
        };
        panic!(
            "docs/compatibility.md: the {} are out of date: {what}.\n\
             Refresh the section with:\n    {}\nExpected section:\n{expected}",
            self.what, self.refresh
        );
    }

    /// Panics unless [`FunctionTable::salt`] is what stock `salt-call --local` lists for
    /// its modules.
    pub fn check_salt_lists(&self) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("root dir");
        std::fs::write(
            dir.path().join("minion"),
            format!(
                "id: compat-doc\nroot_dir: {root}\nuser: {user}\nlog_file: {root}/minion.log\n",
                root = root.display(),
                user = crate::current_user()
            ),
        )
        .expect("write minion config");
        let modules: Vec<&str> = self.salt.iter().map(|(m, _)| *m).collect();
        let mut args = vec![
            "-c".to_owned(),
            dir.path().display().to_string(),
            "--local".to_owned(),
            "--out".to_owned(),
            "json".to_owned(),
            self.salt_lister.to_owned(),
        ];
        args.extend(modules.iter().map(|m| (*m).to_owned()));
        let output = crate::run(crate::stock_bin("salt-call"), &args, crate::TIMEOUT);
        let stdout = crate::assert_success(&format!("salt-call {}", self.salt_lister), &output);
        let json: serde_json::Value = serde_json::from_str(&stdout).expect("salt-call prints JSON");
        let stock: BTreeSet<String> = json["local"]
            .as_array()
            .expect("a list of functions")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let ours: BTreeSet<String> = self
            .salt
            .iter()
            .flat_map(|(m, funs)| funs.iter().map(move |f| format!("{m}.{f}")))
            .collect();
        assert_eq!(
            ours, stock,
            "the table's Salt lists must be what stock salt-call lists for {modules:?}"
        );
    }
}

/// The `module.function` names a section lists: the backticked words of each table row's
/// second cell, under the module named in its first.
pub fn listed(section: &str) -> BTreeSet<String> {
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

/// Opens the page for reading and writing, locked so that two blessing tests (each
/// rewriting its own section) do not overwrite each other.
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

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: FunctionTable = FunctionTable {
        begin: "<!-- generated: test functions -->",
        what: "test functions",
        module_heading: "module",
        refresh: "true",
        salt: &[("test", &["echo", "ping", "stack"])],
        salt_lister: "sys.list_functions",
    };

    #[test]
    fn listed_reads_the_offered_column_only() {
        let section = format!(
            "{}\n| module | a | b |\n|---|---|---|\n\
             | `acl` (Halite only) | `check` | – |\n\
             | `test` (2 of 3) | `ping`, `echo` (Halite only) | `stack` |\n{END}",
            TABLE.begin
        );
        let names: Vec<String> = listed(&section).into_iter().collect();
        assert_eq!(names, ["acl.check", "test.echo", "test.ping"]);
    }

    #[test]
    fn generated_rows_count_what_salt_has_and_read_back_as_the_registry() {
        let names: Vec<String> = ["test.ping", "test.extra", "acl.check"]
            .map(str::to_owned)
            .to_vec();
        let section = TABLE.generated(&names);
        assert!(
            section.contains("| `acl` (Halite only) | `check` | – |\n"),
            "{section}"
        );
        assert!(
            section.contains(
                "| `test` (1 of 3) | `extra` (Halite only), `ping` | `echo`, `stack` |\n"
            ),
            "{section}"
        );
        assert_eq!(listed(&section), names.into_iter().collect());
        assert_eq!(
            TABLE.section(&format!("x\n{section}\ny")),
            Some(2..2 + section.len())
        );
    }
}
