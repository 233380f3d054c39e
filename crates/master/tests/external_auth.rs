//! `external_auth` with PAM and eauth tokens on a Halite master (salt-semantics.md §2.6,
//! §2.7; issue: access control): a real local user with a password logs in with `halite -a
//! pam`, is refused with a wrong password and once `usermod -L` has locked the account;
//! tokens made with `-T` authenticate until they expire (then they are refused and
//! deleted), carry their ACL with `keep_acl_in_token` for the `file` and `pam` backends
//! alike (Salt stores an empty ACL for both and then denies everything), and survive a
//! master restart.
//!
//! These tests need root (they create a throwaway local user with `useradd`, deleted
//! afterwards); not running as root, each says so and returns at once.

mod common;

use common::*;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use halite_testkit::*;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);
const AUTHENTICATION_ERROR: &str = "Authentication error occurred.\n";
const AUTHORIZATION_ERROR: &str = "Authorization error occurred.\n";

fn root_or_explain(test: &str) -> bool {
    if running_as_root() {
        return true;
    }
    eprintln!("{test}: not run: it creates a local user with a password, which needs root");
    false
}

/// `halite -c DIR <args>` as root, with `HOME` inside the root (where `-T` writes
/// `salt_token`).
fn halite(root: &TempRoot, args: &[&str]) -> Output {
    let mut cmd = root_command(halite_bin("halite"));
    cmd.env("HOME", root.path())
        .arg("-c")
        .arg(root.master_config_dir())
        .args(args);
    run_command(cmd, TIMEOUT)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The token `-T` saved in `HOME/salt_token`.
fn saved_token(root: &TempRoot) -> String {
    let path = root.path().join("salt_token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no token file {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// A clear publish of `fun` to `tgt` authenticated by `token` alone.
fn token_publish(root: &TempRoot, token: &str, tgt: &str, fun: &str) -> Value {
    clear_request(
        root.ret_port(),
        map([
            ("cmd", s("publish")),
            ("tgt", s(tgt)),
            ("tgt_type", s("glob")),
            ("fun", s(fun)),
            ("arg", Value::Array(vec![])),
            ("ret", s("")),
            ("jid", s("")),
            ("user", s("nobody")),
            ("kwargs", map([("token", s(token))])),
        ]),
    )
}

/// `Some(error name)` of a refused publish, `None` for a published one.
fn refusal(reply: &Value) -> Option<String> {
    if let Some(err) = value::get(reply, "error") {
        return Some(value::get_str(err, "name").unwrap_or("?").to_owned());
    }
    assert!(
        value::get(reply, "load")
            .and_then(|l| value::get_str(l, "jid"))
            .is_some(),
        "neither published nor refused: {reply}"
    );
    None
}

fn get_token(root: &TempRoot, token: &str) -> Value {
    clear_request(
        root.ret_port(),
        map([("cmd", s("get_token")), ("token", s(token))]),
    )
}

/// A master with `external_auth` `extra`, and the Halite minions `ids` answering.
fn start(root: &TempRoot, ids: &[&str]) -> (Proc, Vec<Proc>) {
    let master = start_halite_master(root);
    wait_for_port(root.ret_port(), JOIN);
    let minions = ids.iter().map(|id| start_halite_minion(root, id)).collect();
    wait_for_pings(root, ids);
    (master, minions)
}

fn passwords_file(root: &TempRoot) -> std::path::PathBuf {
    let path = root.path().join("eauth-passwords");
    std::fs::write(&path, "alice:wonderland\n").unwrap();
    path
}

fn file_backend(passwords: &Path) -> String {
    format!(
        "  file:\n    ^filename: {}\n    alice:\n      - 'web*':\n        - test.*\n",
        passwords.display()
    )
}

#[test]
fn pam_logs_a_local_user_in_and_refuses_wrong_passwords_and_locked_accounts() {
    if !root_or_explain("pam_logs_a_local_user_in_and_refuses_wrong_passwords_and_locked_accounts")
    {
        return;
    }
    let user = ThrowawayUser::create("hlpam", "Corr3ct-horse");
    let name = user.name().to_owned();
    // The user's own key allows test.* on web*; its private group allows test.version
    // everywhere (group keys match the OS groups PAM reports).
    let root = TempRoot::with_master_extra(&format!(
        "auto_accept: true\nexternal_auth:\n  pam:\n    {name}:\n      - 'web*':\n        - \
         test.*\n    {name}%:\n      - test.version\n"
    ));
    let (_master, _minions) = start(&root, &["web1", "db1"]);
    let login = |password: &str, args: &[&str]| {
        let mut all = vec!["-a", "pam", "--username", &name, "--password", password];
        all.extend(args);
        halite(&root, &all)
    };

    let ok = login("Corr3ct-horse", &["web*", "test.ping", "--out", "json"]);
    assert_eq!(
        json_returns(&ok.stdout).keys().collect::<Vec<_>>(),
        ["web1"],
        "pam login: {}",
        stdout(&ok)
    );
    let by_group = login("Corr3ct-horse", &["*", "test.version", "--out", "json"]);
    assert_eq!(
        json_returns(&by_group.stdout).len(),
        2,
        "group entry: {}",
        stdout(&by_group)
    );
    let denied = login("Corr3ct-horse", &["db1", "test.ping"]);
    assert_eq!(stdout(&denied), AUTHORIZATION_ERROR);
    let wrong = login("wrong-horse", &["web*", "test.ping"]);
    assert_eq!(stdout(&wrong), AUTHENTICATION_ERROR);
    assert_eq!(wrong.status.code(), Some(0));

    user.lock_password();
    let locked = login("Corr3ct-horse", &["web*", "test.ping"]);
    assert_eq!(
        stdout(&locked),
        AUTHENTICATION_ERROR,
        "after usermod -L the same password is refused"
    );
}

#[test]
fn an_expired_token_is_refused_and_deleted() {
    if !root_or_explain("an_expired_token_is_refused_and_deleted") {
        return;
    }
    let root = TempRoot::new();
    let passwords = passwords_file(&root);
    root.write_master_config(&format!(
        "auto_accept: true\ntoken_expire: 3\nexternal_auth:\n{}",
        file_backend(&passwords)
    ));
    let (_master, _minions) = start(&root, &["web1"]);
    let made = halite(
        &root,
        &[
            "-a",
            "file",
            "--username",
            "alice",
            "--password",
            "wonderland",
            "-T",
            "web1",
            "test.ping",
        ],
    );
    assert!(made.status.success(), "{}", stdout(&made));
    let token = saved_token(&root);
    assert_eq!(
        refusal(&token_publish(&root, &token, "web1", "test.ping")),
        None
    );
    assert_eq!(
        refusal(&token_publish(&root, &token, "web1", "cmd.run")).as_deref(),
        Some("AuthorizationError")
    );

    let log = root.master_log();
    let offset = file_len(&log);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        refusal(&token_publish(&root, &token, "web1", "test.ping")).as_deref(),
        Some("AuthenticationError"),
        "an expired token is refused"
    );
    wait_for_log_from(&log, offset, "removing it from the store", TIMEOUT);
    assert_eq!(get_token(&root, &token), Value::Map(vec![]), "and deleted");
}

#[test]
fn keep_acl_in_token_carries_the_acl_for_file_and_pam_and_tokens_survive_a_restart() {
    if !root_or_explain(
        "keep_acl_in_token_carries_the_acl_for_file_and_pam_and_tokens_survive_a_restart",
    ) {
        return;
    }
    let user = ThrowawayUser::create("hltok", "Pam-pass1");
    let name = user.name().to_owned();
    let root = TempRoot::new();
    let passwords = passwords_file(&root);
    root.write_master_config(&format!(
        "auto_accept: true\nkeep_acl_in_token: True\nexternal_auth:\n{}  pam:\n    {name}:\n      \
         - test.version\n",
        file_backend(&passwords)
    ));
    let (mut master, _minions) = start(&root, &["web1", "db1"]);

    let mut tokens = Vec::new();
    for (eauth, who, password) in [
        ("file", "alice", "wonderland"),
        ("pam", name.as_str(), "Pam-pass1"),
    ] {
        let made = halite(
            &root,
            &[
                "-a",
                eauth,
                "--username",
                who,
                "--password",
                password,
                "-T",
                "web1",
                "test.version",
            ],
        );
        assert!(made.status.success(), "{eauth}: {}", stdout(&made));
        let token = saved_token(&root);
        // While a saved token is valid, the CLI uses it and ignores `-a` (as stock does).
        std::fs::remove_file(root.path().join("salt_token")).unwrap();
        let data = get_token(&root, &token);
        assert!(
            matches!(value::get(&data, "auth_list"), Some(Value::Array(a)) if !a.is_empty()),
            "{eauth}: the token keeps the ACL: {data}"
        );
        tokens.push((eauth, token));
    }
    let check = |what: &str| {
        let (file, pam) = (&tokens[0].1, &tokens[1].1);
        assert_eq!(
            refusal(&token_publish(&root, file, "web1", "test.ping")),
            None,
            "{what}"
        );
        assert_eq!(
            refusal(&token_publish(&root, file, "db1", "test.ping")).as_deref(),
            Some("AuthorizationError"),
            "{what}"
        );
        assert_eq!(
            refusal(&token_publish(&root, pam, "*", "test.version")),
            None,
            "{what}"
        );
        assert_eq!(
            refusal(&token_publish(&root, pam, "*", "test.ping")).as_deref(),
            Some("AuthorizationError"),
            "{what}"
        );
    };
    check("before the restart");

    master.stop();
    drop(master);
    let _master = start_halite_master(&root);
    wait_for_port(root.ret_port(), JOIN);
    wait_for_pings(&root, &["web1", "db1"]);
    check("after the restart");
}
