//! Test harness for Halite's integration tests: real processes on loopback.
//!
//! What it does: lays out a temporary master/minion tree with Salt-compatible configs
//! ([`TempRoot`]), hands out free loopback ports that parallel test processes will not share
//! ([`free_ports`]), spawns daemons that cannot outlive their test ([`Proc`]), runs commands
//! with a timeout ([`run`], [`run_command`]), polls for conditions and log lines
//! ([`wait_until`], [`wait_for_log`], [`wait_for_port`]), and starts stock Salt 3008.3 (from
//! the venv at [`salt_venv`]) or Halite binaries ([`halite_bin`]) against a root, and runs
//! programs as real local users it creates ([`LocalUser`]) for access-control tests, and
//! builds network labs ([`Lab`]): hosts in network namespaces, on addresses of their own,
//! that masters and minions run in, with cut links, packet loss and frozen processes as
//! faults.
//!
//! What it does not do: decide when a daemon is "ready" (that is protocol knowledge; tests
//! wait for a port, a log line or a successful command), retry or pace anything by sleeping,
//! or skip a test when stock Salt or a binary is missing.
//!
//! Invariants:
//! - Everything listens on 127.0.0.1 only, on ports from [`free_ports`], except in a lab,
//!   where each host has its own namespace and ports.
//! - Every process started here runs in its own process group with stdin from `/dev/null`
//!   (or a file holding its given input) and output in files, and is killed with all its
//!   descendants when its [`Proc`] drops or its [`run`] returns; nothing leaks past a test.
//! - Timeouts only turn hangs into failures: they are generous ([`TIMEOUT`]) and no test
//!   outcome depends on them when the machine is slow.
//! - Setup problems panic with the step, the path and a hint (this is a test harness: a
//!   panic is the failure report), so the crate has no error type.

pub mod compat_doc;
mod netns;
mod panic_note;
mod paths;
mod ping;
mod ports;
mod process;
mod root;
mod starters;
mod users;

pub use netns::{Host, Lab, LabError};
pub use paths::{halite_bin, repo_root, salt_venv, stock_bin, SALT_VENV_ENV};
pub use ports::free_ports;
pub use process::{
    file_len, log_tail, run, run_command, run_command_with_input, wait_for_log, wait_for_log_from,
    wait_until, Proc, STOP_GRACE,
};
pub use root::{
    current_user, TempRoot, KEEP_TEMP_ENV, SALT_PUBLISH_PORT, SALT_RET_PORT, TEMP_BASE_ENV,
};
pub use starters::{
    assert_generated_from_stock, assert_success, json_documents, json_returns, run_halite,
    run_halite_key, run_stock, run_stock_harness, run_stock_salt, run_stock_salt_call,
    run_stock_salt_key, start_halite_master, start_halite_minion, start_stock_master,
    start_stock_minion, stock_command, wait_for_port, STOCK_STOP_GRACE, TIMEOUT,
};
pub use users::{
    open_to_local_users, root_command, runnable_by_all, running_as_root, sudo_command, LocalUser,
    ThrowawayUser,
};
