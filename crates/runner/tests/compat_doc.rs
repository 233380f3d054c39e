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

use halite_runner::Registry;
use halite_testkit::compat_doc::FunctionTable;

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

const TABLE: FunctionTable = FunctionTable {
    begin: "<!-- generated: runner functions -->",
    what: "runner functions",
    module_heading: "runner module",
    refresh: "HALITE_BLESS=1 cargo test -p halite-runner --test compat_doc",
    salt: SALT,
    salt_lister: "sys.list_runner_functions",
};

#[test]
fn page_lists_every_runner_function() {
    TABLE.check_page(&Registry::builtin().names());
}

#[test]
fn salt_lists_are_what_stock_salt_call_lists() {
    TABLE.check_salt_lists();
}
