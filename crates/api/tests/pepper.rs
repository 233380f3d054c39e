//! pepper (PyPI `salt-pepper`, the salt-api CLI most scripts use) against `halite-api` in
//! front of a Halite master, and against stock `salt-api` in front of a stock master, with
//! `external_auth` users of the `file` and `pam` backends: `pepper '*' test.ping`,
//! `pepper --client runner manage.up` and `pepper --client wheel key.list_all` print the
//! same output and exit 0 on both, and a denied function gives the same error and exit
//! code on both.
//!
//! pepper is run from the stock venv (`HALITE_SALT_VENV`, where CI pip-installs
//! `salt-pepper==0.7.6`) with `SALTAPI_URL`, `SALTAPI_USER`, `SALTAPI_PASS` and
//! `SALTAPI_EAUTH` and a `HOME` of its own (no `~/.pepperrc`, no `~/.peppercache`). The
//! `pam` user is a throwaway local user, so the test needs root; without root it says so
//! and returns.

mod common;

use common::*;
use halite_testkit::*;
use std::path::Path;
use std::process::{Command, Output};

/// The throwaway PAM user's password.
const PAM_PASSWORD: &str = "Pepper-pass1";

/// What pepper printed and how it exited.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Printed {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl From<Output> for Printed {
    fn from(out: Output) -> Printed {
        Printed {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Printed {
    /// The output with lines sorted (minions answer in any order).
    fn sorted(&self) -> (Option<i32>, Vec<String>, String) {
        let mut lines: Vec<String> = self.stdout.lines().map(str::to_owned).collect();
        lines.sort();
        (self.code, lines, self.stderr.clone())
    }
}

/// `pepper <args>` as `user` of `eauth` against the API on `port`, with `HOME` at `home`.
fn pepper(
    port: u16,
    home: &Path,
    (user, password, eauth): (&str, &str, &str),
    args: &[&str],
) -> Printed {
    let mut cmd = Command::new(stock_bin("pepper"));
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .env("SALTAPI_URL", format!("http://127.0.0.1:{port}"))
        .env("SALTAPI_USER", user)
        .env("SALTAPI_PASS", password)
        .env("SALTAPI_EAUTH", eauth)
        .args(args);
    let printed = Printed::from(run_command(cmd, TIMEOUT));
    println!("pepper {args:?} as {user} ({eauth}): {printed:?}");
    printed
}

/// The fleets' master config: the common one, plus `pam_user` allowed `test.*`, runners
/// and wheel functions.
///
/// Stock Salt runs its PAM check in a `python3` subprocess that must import `salt`:
/// `/usr/bin/python3` by default, else `auth.pam.python`, which it resolves first, so the
/// venv's `python3` (a symlink to the system interpreter) loses the venv. A script that
/// runs the venv's `python3` by its venv path keeps it. (Halite calls PAM in-process and
/// does not read the option.)
fn config(root: &TempRoot, port: u16, pam_user: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let python = root.path().join("pam-python");
    let venv_python = salt_venv().join("bin").join("python3");
    std::fs::write(
        &python,
        format!("#!/bin/sh\nexec {} \"$@\"\n", venv_python.display()),
    )
    .unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let extra = format!("auth.pam.python: {}\n", python.display());
    let yaml = master_yaml(root, port, ENABLED, "", &extra);
    let pam = format!(
        "external_auth:\n  pam:\n    {pam_user}:\n      - 'test.*'\n      - '@runner'\n      \
         - '@wheel'\n"
    );
    assert!(yaml.contains("external_auth:\n"));
    yaml.replacen("external_auth:\n", &pam, 1)
}

/// What every pepper call of the session printed, by name.
fn session(kind: Kind, pam_user: &str) -> Vec<(String, Printed)> {
    let fleet = Fleet::start_custom(kind, kind, &["m1", "m2"], |root, port| {
        config(root, port, pam_user)
    });
    let home = fleet.root.path().join("pepper-home");
    std::fs::create_dir_all(&home).unwrap();
    let alice = ("alice", "alicepw", "file");
    let pam = (pam_user, PAM_PASSWORD, "pam");
    let bob = ("bob", "bobpw", "file");
    let mut out = Vec::new();
    for (name, who, args) in [
        ("file test.ping", alice, &["*", "test.ping"][..]),
        ("pam test.ping", pam, &["*", "test.ping"][..]),
        (
            "pam manage.up",
            pam,
            &["--client", "runner", "manage.up"][..],
        ),
        (
            "file manage.up",
            alice,
            &["--client", "runner", "manage.up"][..],
        ),
        (
            "pam key.list_all",
            pam,
            &["--client", "wheel", "key.list_all"][..],
        ),
        ("denied local", bob, &["*", "test.echo", "hi"][..]),
        (
            "denied runner",
            bob,
            &["--client", "runner", "manage.up"][..],
        ),
        ("denied pam", pam, &["*", "cmd.run", "id"][..]),
    ] {
        out.push((name.to_owned(), pepper(fleet.port, &home, who, args)));
    }
    out
}

#[test]
fn pepper_prints_the_same_for_halite_api_as_for_stock_salt_api() {
    if !running_as_root() {
        eprintln!(
            "pepper_prints_the_same_for_halite_api_as_for_stock_salt_api: not run: it \
             creates a local PAM user, which needs root"
        );
        return;
    }
    let user = ThrowawayUser::create("hlpep", PAM_PASSWORD);
    let halite = session(Kind::Halite, user.name());
    let get = |s: &[(String, Printed)], name: &str| {
        s.iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .unwrap()
    };
    // What must hold whatever stock does.
    for name in ["file test.ping", "pam test.ping"] {
        let p = get(&halite, name);
        assert_eq!(p.code, Some(0), "{name}: {p:?}");
        assert_eq!(
            p.sorted().1,
            ["    True", "    True", "m1:", "m2:"],
            "{name}"
        );
    }
    for name in ["pam manage.up", "file manage.up"] {
        let p = get(&halite, name);
        assert_eq!(
            (p.code, p.stdout.as_str()),
            (Some(0), "- m1\n- m2\n"),
            "{name}"
        );
    }
    let keys = get(&halite, "pam key.list_all");
    assert_eq!(keys.code, Some(0), "{keys:?}");
    assert!(
        keys.stdout.contains("minions:\n    - m1\n    - m2\n"),
        "{keys:?}"
    );
    for name in ["denied local", "denied runner", "denied pam"] {
        let p = get(&halite, name);
        assert_eq!(
            (p.code, p.stdout.as_str(), p.stderr.as_str()),
            (Some(1), "", "Pepper error: Authentication denied\n"),
            "{name}"
        );
    }

    let stock = session(Kind::Stock, user.name());
    let mut diffs = Vec::new();
    for ((name, s), (_, h)) in stock.iter().zip(&halite) {
        if s.sorted() != h.sorted() {
            diffs.push(format!("{name}:\n  stock  {s:?}\n  halite {h:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "pepper prints differently:\n{}",
        diffs.join("\n")
    );
}
