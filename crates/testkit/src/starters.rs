//! One-line starters for stock Salt and Halite programs running in a [`TempRoot`].
//!
//! Daemons come back as a [`Proc`] (stopped on drop) and return at once: they are not ready
//! yet. Wait for readiness with [`wait_for_port`], [`crate::wait_for_log`] or by retrying a
//! command under [`crate::wait_until`]. Commands run to completion under [`TIMEOUT`].

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::paths::{halite_bin, stock_bin};
use crate::process::{run, run_command, run_command_with_input, wait_until, Proc};
use crate::root::TempRoot;

/// Generous default limit for anything expected to take seconds: daemon start-up, one CLI
/// command. Reaching it fails the test; it is not a pacing delay.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// Stop grace of stock daemons started here. Their orderly shutdown takes about 6 s
/// (connected `salt-minion`) or never ends (a `salt-minion` still looking for its master),
/// and it is not what Halite's tests examine, so they get SIGKILL after this.
pub const STOCK_STOP_GRACE: Duration = Duration::from_secs(3);

/// `<venv>/bin/<program> -c <master config dir>`: a stock master-side program (`salt`,
/// `salt-key`, `salt-run`, `salt-master`) ready for more arguments.
pub fn stock_command(root: &TempRoot, program: &str) -> Command {
    let mut cmd = Command::new(stock_bin(program));
    cmd.arg("-c").arg(root.master_config_dir());
    cmd
}

/// Starts stock `salt-master -c DIR`.
pub fn start_stock_master(root: &TempRoot) -> Proc {
    spawn_stock(stock_command(root, "salt-master"), root, "salt-master")
}

/// Starts stock `salt-minion -c DIR/minion-<id>`, writing a default minion config first if
/// [`TempRoot::add_minion`] was not called for `id`.
pub fn start_stock_minion(root: &TempRoot, id: &str) -> Proc {
    spawn_stock(
        minion_command(root, id, &stock_bin("salt-minion")),
        root,
        &format!("salt-minion-{id}"),
    )
}

/// Spawns a stock daemon's command as a [`Proc`] with [`STOCK_STOP_GRACE`].
pub(crate) fn spawn_stock(cmd: Command, root: &TempRoot, name: &str) -> Proc {
    Proc::spawn(cmd, &root.procs_dir(), name).with_stop_grace(STOCK_STOP_GRACE)
}

/// `<program> -c DIR/minion-<id>`, writing a default minion config first if needed.
pub(crate) fn minion_command(root: &TempRoot, id: &str, program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg("-c").arg(minion_dir(root, id));
    cmd
}

/// Runs stock `salt -c DIR <args>`.
pub fn run_stock_salt<I, S>(root: &TempRoot, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_stock(root, "salt", args)
}

/// Runs stock `salt-key -c DIR <args>`.
pub fn run_stock_salt_key<I, S>(root: &TempRoot, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_stock(root, "salt-key", args)
}

/// Runs a stock master-side program: `<program> -c DIR <args>`.
pub fn run_stock<I, S>(root: &TempRoot, program: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = stock_command(root, program);
    cmd.args(args);
    run_command(cmd, TIMEOUT)
}

/// Runs stock `salt-call -c DIR/minion-<id> <args>` (writing a default minion config first
/// if needed).
pub fn run_stock_salt_call<I, S>(root: &TempRoot, id: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(stock_bin("salt-call"));
    cmd.arg("-c").arg(minion_dir(root, id)).args(args);
    run_command(cmd, TIMEOUT)
}

/// Starts `halite-master -c DIR`.
pub fn start_halite_master(root: &TempRoot) -> Proc {
    Proc::spawn(
        halite_command(root, "halite-master"),
        &root.procs_dir(),
        "halite-master",
    )
}

/// Starts `halite-minion -c DIR/minion-<id>` (writing a default minion config first if
/// needed).
pub fn start_halite_minion(root: &TempRoot, id: &str) -> Proc {
    Proc::spawn(
        minion_command(root, id, &halite_bin("halite-minion")),
        &root.procs_dir(),
        &format!("halite-minion-{id}"),
    )
}

/// Runs `halite -c DIR <args>` (the `salt` counterpart).
pub fn run_halite<I, S>(root: &TempRoot, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_halite_program(root, "halite", args)
}

/// Runs `halite-key -c DIR <args>` (the `salt-key` counterpart).
pub fn run_halite_key<I, S>(root: &TempRoot, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_halite_program(root, "halite-key", args)
}

fn run_halite_program<I, S>(root: &TempRoot, program: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = halite_command(root, program);
    cmd.args(args);
    run_command(cmd, TIMEOUT)
}

/// `<halite program> -c <master config dir>`: a Halite master-side program (`halite`,
/// `halite-key`, `halite-run`, `halite-master`) ready for more arguments.
pub(crate) fn halite_command(root: &TempRoot, program: &str) -> Command {
    let mut cmd = Command::new(halite_bin(program));
    cmd.arg("-c").arg(root.master_config_dir());
    cmd
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
///
/// # Panics
/// On timeout.
pub fn wait_for_port(port: u16, timeout: Duration) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let open = wait_until(timeout, || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    });
    if !open {
        panic!("nothing listens on {addr} after {timeout:?}");
    }
}

/// Parses output holding one or more concatenated JSON documents (`salt --out json` prints
/// one document per minion unless `--static` is given).
///
/// # Panics
/// When the text is not a sequence of JSON documents; the message shows the text.
pub fn json_documents(output: &[u8]) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_slice(output)
        .into_iter::<serde_json::Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| {
            panic!(
                "output is not a sequence of JSON documents ({e}):\n{}",
                String::from_utf8_lossy(output)
            )
        })
}

/// Merges the top-level objects of [`json_documents`] into one map (`{minion: return}`).
///
/// # Panics
/// When a document is not a JSON object.
pub fn json_returns(output: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    let mut merged = serde_json::Map::new();
    for doc in json_documents(output) {
        match doc {
            serde_json::Value::Object(map) => merged.extend(map),
            other => panic!("expected a JSON object per document, got {other}"),
        }
    }
    merged
}

fn minion_dir(root: &TempRoot, id: &str) -> std::path::PathBuf {
    if !root.has_minion(id) {
        root.add_minion(id);
    }
    root.minion_config_dir(id)
}

/// Panics with a command's output unless it exited with status 0; returns its stdout.
pub fn assert_success(what: &str, output: &Output) -> String {
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs a test's own stock-Salt harness `script` (a Python program) with the stock venv's
/// Python and `args`, `input` on its stdin as JSON, and returns what it prints, as JSON.
///
/// # Panics
/// When the harness fails, runs past [`TIMEOUT`], or prints something that is not JSON.
pub fn run_stock_harness<I, S>(
    script: &Path,
    args: I,
    input: &serde_json::Value,
) -> serde_json::Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(stock_bin("python"));
    cmd.arg(script).args(args);
    let output = run_command_with_input(cmd, input.to_string().as_bytes(), TIMEOUT);
    let printed = assert_success(&script.display().to_string(), &output);
    serde_json::from_str(&printed)
        .unwrap_or_else(|e| panic!("{} did not print JSON: {e}", script.display()))
}

/// Asserts that `generated` (a committed source file, `include_str!`-ed by the caller) is
/// exactly what the generator `script` prints when the stock venv's Python
/// ([`crate::salt_venv`]) runs it: the file is current with the stock sources it was
/// generated from.
///
/// # Panics
/// When the generator fails, or prints anything else.
pub fn assert_generated_from_stock(script: &Path, generated: &str) {
    let output = run(stock_bin("python"), [script], TIMEOUT);
    let printed = assert_success(&script.display().to_string(), &output);
    assert!(
        printed == generated,
        "the file generated by {} is stale: regenerate it with that script",
        script.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_returns_merges_one_document_per_minion() {
        let out = b"{\n  \"m1\": true\n}\n{\n  \"m2\": true\n}\n";
        let merged = json_returns(out);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged["m1"], serde_json::Value::Bool(true));
        assert_eq!(json_documents(b"").len(), 0);
    }

    #[test]
    fn json_documents_rejects_non_json_with_the_text() {
        let err =
            std::panic::catch_unwind(|| json_documents(b"Minion did not return")).unwrap_err();
        assert!(err
            .downcast_ref::<String>()
            .unwrap()
            .contains("Minion did not return"));
    }

    #[test]
    fn wait_for_port_sees_a_listener() {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        wait_for_port(
            listener.local_addr().unwrap().port(),
            Duration::from_secs(10),
        );
    }

    #[test]
    fn assert_success_shows_output_of_a_failed_command() {
        let out = crate::run("sh", ["-c", "echo why >&2; exit 1"], TIMEOUT);
        let err = std::panic::catch_unwind(|| assert_success("probe", &out)).unwrap_err();
        assert!(err.downcast_ref::<String>().unwrap().contains("why"));
    }

    #[test]
    fn minion_dir_writes_a_default_config_only_once() {
        let root = TempRoot::new();
        let dir = minion_dir(&root, "m1");
        std::fs::write(dir.join("minion"), "id: m1\n").unwrap();
        assert_eq!(minion_dir(&root, "m1"), dir);
        assert_eq!(
            std::fs::read_to_string(dir.join("minion")).unwrap(),
            "id: m1\n"
        );
    }
}
