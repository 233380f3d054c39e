//! `publisher_acl` with real local users (seed 003; salt-semantics.md §2.1–§2.5, §2.10):
//! the seed's ACL for `fred`, `dave` and `steve` on stock and Halite minions, the CLIs run
//! as those users, `publisher_acl_blacklist` and `sudo_acl` with `sudo` callers, and the
//! `halite/acl/deny` events.
//!
//! These tests need root: they create the local users `fred`, `dave`, `steve` and `eve`
//! (kept afterwards; a second run reuses them) and run `halite` and stock `salt` as them.
//! Not running as root, each test says so and returns at once (the only skip).
//!
//! The expected outcomes are written down case by case and hold for stock Salt 3008.3:
//! every case is also run with stock `salt` against a stock `salt-master` with the same
//! config, and a Halite master must give the stock CLI the same answers. The stock master
//! needs the manual step Salt's docs give for `publisher_acl` users: its
//! `master_event_pub.ipc` is created 0660 for the master's user, so the test opens it to
//! everyone, as an administrator would. The Halite master must open what ACL users need by
//! itself, so nothing is changed for it.
//!
//! Minions: `web1`, `log1` and `db1` are stock, `web2` and `mongo1` Halite; `db1` and
//! `mongo1` carry the static grain `os: RedHat` (minion config `grains:`), so dave's
//! `G@os:RedHat` entry allows `kmod.*` on exactly those two, while every other minion here
//! has `os: Debian`. Functions a Halite minion lacks still give a return from it ("... is
//! not available."): an allowed call reaches exactly the targeted minions either way.

mod common;

use common::{wait_for_pings, JOIN};
use halite_testkit::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use Expect::{Denied, Returns, Unauthenticated};
use Who::{Eauth, Root, Sudo, User};

/// The ACL of seed 003, exactly.
const SEED_ACL: &str = "\
publisher_acl:
  fred:
    - web*:
      - test.*
      - pkg.*
      - apache.*
  dave:
    - test.version
    - mongo*:
      - network.*
    - log*:
      - network.*
      - pkg.*
    - 'G@os:RedHat':
      - kmod.*
  steve:
    - .*
auto_accept: true
";

/// The seed's ACL under `external_auth`'s `file` backend, whose password file (`PATH`)
/// knows fred, dave and steve (each with the password `<name>-pw`), not eve.
fn seed_eauth_config(passwords: &std::path::Path) -> String {
    let acl: String = SEED_ACL
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .map(|l| format!("  {l}\n"))
        .collect();
    format!(
        "auto_accept: true\nexternal_auth:\n  file:\n    ^filename: {}\n{acl}",
        passwords.display()
    )
}

/// [`SEED_CASES`] with each local user logging in through `external_auth` instead, plus a
/// wrong password.
fn seed_eauth_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = SEED_CASES
        .iter()
        .map(|&(who, args, expect)| match who {
            User(name) => (Eauth(name), args, expect),
            other => (other, args, expect),
        })
        .collect();
    cases.push((Eauth("mallory"), &["web1", "test.ping"], Unauthenticated));
    cases
}

/// Salt's example blacklist (salt-semantics.md §2.4): root and every user not starting
/// with `sudo_` are refused, and so is `cmd.*` for everyone.
const BLACKLIST: &str = "\
publisher_acl_blacklist:
  users:
    - root
    - '^(?!sudo_).*$'
  modules:
    - 'cmd.*'
";

/// The users the tests run the CLIs as: the seed's three and one the ACL does not name.
const USERS: [&str; 4] = ["fred", "dave", "steve", "eve"];

const AUTHORIZATION_ERROR: &str = "Authorization error occurred.";
const AUTHENTICATION_ERROR: &str = "Authentication error occurred.";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stock,
    Halite,
}

/// The seed's minions: id, kind, whether it has the static grain `os: RedHat`.
const FLEET: [(&str, Kind, bool); 5] = [
    ("web1", Kind::Stock, false),
    ("web2", Kind::Halite, false),
    ("mongo1", Kind::Halite, true),
    ("log1", Kind::Stock, false),
    ("db1", Kind::Stock, true),
];

/// Who runs the CLI.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// A local user (one of [`USERS`]).
    User(&'static str),
    /// Root, with no `SUDO_USER`.
    Root,
    /// Root with `SUDO_USER=<name>`: the publish user is `sudo_<name>`.
    Sudo(&'static str),
    /// Root logging in as `<name>` through `external_auth`'s `file` backend
    /// (`-a file --username <name> --password <name>-pw`).
    Eauth(&'static str),
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::User(n) => write!(f, "{n}"),
            Who::Root => write!(f, "root"),
            Who::Sudo(n) => write!(f, "sudo_{n}"),
            Who::Eauth(n) => write!(f, "-a file {n}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    Halite,
    Stock,
}

/// What a case must give.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Returns from exactly these minions, and this exit code.
    Returns(&'static [&'static str], i32),
    /// "Authorization error occurred.", exit 0.
    Denied,
    /// "Authentication error occurred.", exit 0.
    Unauthenticated,
}

/// Who runs the CLI, its arguments, and what it must give.
type Case = (Who, &'static [&'static str], Expect);

const ALL: &[&str] = &["db1", "log1", "mongo1", "web1", "web2"];

/// Every allowed and denied case of the seed, per user.
#[rustfmt::skip]
const SEED_CASES: &[Case] = &[
    // fred: test.*, pkg.*, apache.* on web* only.
    (User("fred"), &["web*", "test.ping"], Returns(&["web1", "web2"], 0)),
    (User("fred"), &["web1", "test.version"], Returns(&["web1"], 0)),
    // web2 (Halite) has no pkg module: a return saying so, and exit 1.
    (User("fred"), &["web*", "pkg.version"], Returns(&["web1", "web2"], 1)),
    (User("fred"), &["*", "test.ping"], Denied),
    (User("fred"), &["log1", "test.ping"], Denied),
    (User("fred"), &["web1", "cmd.run", "id"], Denied),
    // Every targeted minion must be inside the ACL target.
    (User("fred"), &["-L", "web1,log1", "test.ping"], Denied),
    // dave: test.version anywhere, network.* on mongo*, network.* and pkg.* on log*, kmod.*
    // on G@os:RedHat (mongo1 and db1).
    (User("dave"), &["*", "test.version"], Returns(ALL, 0)),
    (User("dave"), &["*", "test.ping"], Denied),
    (User("dave"), &["mongo*", "network.ipaddrs"], Returns(&["mongo1"], 1)),
    (User("dave"), &["log*", "pkg.version"], Returns(&["log1"], 0)),
    (User("dave"), &["log1", "network.ipaddrs"], Returns(&["log1"], 0)),
    (User("dave"), &["mongo1", "pkg.version"], Denied),
    (User("dave"), &["web1", "network.ipaddrs"], Denied),
    (User("dave"), &["-G", "os:RedHat", "kmod.lsmod"], Returns(&["db1", "mongo1"], 1)),
    (User("dave"), &["mongo1", "kmod.lsmod"], Returns(&["mongo1"], 1)),
    (User("dave"), &["-G", "os:Debian", "kmod.lsmod"], Denied),
    (User("dave"), &["log1", "kmod.lsmod"], Denied),
    // Two entries cannot be combined to cover one target.
    (User("dave"), &["-L", "mongo1,log1", "network.ipaddrs"], Denied),
    // steve: everything.
    (User("steve"), &["*", "test.version"], Returns(ALL, 0)),
    (User("steve"), &["log1", "cmd.run", "echo hi"], Returns(&["log1"], 0)),
    (User("steve"), &["web2", "cmd.run", "echo hi"], Returns(&["web2"], 0)),
    // eve: not in publisher_acl, so the master made her no key.
    (User("eve"), &["*", "test.ping"], Unauthenticated),
    (User("eve"), &["web1", "test.version"], Unauthenticated),
];

/// The blacklist with `sudo_acl` off: sudo means full rights, except `cmd.*`.
#[rustfmt::skip]
const BLACKLIST_CASES: &[Case] = &[
    (Root, &["*", "test.ping"], Denied),
    (User("fred"), &["web2", "test.ping"], Denied),
    (User("steve"), &["web2", "test.ping"], Denied),
    // The blacklist comes before authentication: eve (no key) is refused as blacklisted.
    (User("eve"), &["web2", "test.ping"], Denied),
    (Sudo("fred"), &["web2", "test.ping"], Returns(&["web2"], 0)),
    (Sudo("fred"), &["mongo1", "test.ping"], Returns(&["mongo1"], 0)),
    (Sudo("fred"), &["*", "test.version"], Returns(&["mongo1", "web2"], 0)),
    (Sudo("fred"), &["web2", "cmd.run", "id"], Denied),
    (Sudo("steve"), &["web2", "cmd.run", "id"], Denied),
];

/// The blacklist with `sudo_acl: true`: `sudo_<name>` gets `<name>`'s entries only.
#[rustfmt::skip]
const SUDO_ACL_CASES: &[Case] = &[
    (Root, &["*", "test.ping"], Denied),
    (Sudo("fred"), &["web2", "test.ping"], Returns(&["web2"], 0)),
    (Sudo("fred"), &["mongo1", "test.ping"], Denied),
    (Sudo("fred"), &["*", "test.version"], Denied),
    (Sudo("fred"), &["web2", "cmd.run", "id"], Denied),
    (Sudo("steve"), &["*", "test.version"], Returns(&["mongo1", "web2"], 0)),
    (Sudo("eve"), &["web2", "test.ping"], Unauthenticated),
];

/// What a CLI printed with `--out json`, and its exit code.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    exit: Option<i32>,
    printed: Printed,
}

#[derive(Debug, Clone, PartialEq)]
enum Printed {
    /// One JSON object per minion, merged.
    Returns(BTreeMap<String, Value>),
    /// One JSON string: an error message.
    Message(String),
    /// Anything else, as printed (and what it said on stderr).
    Other(String),
}

impl Outcome {
    fn of(output: &Output) -> Outcome {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let docs: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(&stdout)
            .into_iter::<Value>()
            .collect();
        let printed = match docs.as_deref() {
            Ok([Value::String(message)]) => Printed::Message(message.clone()),
            Ok(docs) if !docs.is_empty() && docs.iter().all(Value::is_object) => Printed::Returns(
                docs.iter()
                    .filter_map(Value::as_object)
                    .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())))
                    .collect(),
            ),
            _ => Printed::Other(format!(
                "{}{}",
                stdout.trim_end(),
                stderr_note(&output.stderr)
            )),
        };
        Outcome {
            exit: output.status.code(),
            printed,
        }
    }

    /// Whether this is what `expect` says.
    fn meets(&self, expect: Expect) -> bool {
        match (expect, &self.printed) {
            (Returns(ids, exit), Printed::Returns(returns)) => {
                self.exit == Some(exit)
                    && returns.keys().map(String::as_str).collect::<BTreeSet<_>>()
                        == ids.iter().copied().collect()
            }
            (Denied, Printed::Message(m)) => m == AUTHORIZATION_ERROR && self.exit == Some(0),
            (Unauthenticated, Printed::Message(m)) => {
                m == AUTHENTICATION_ERROR && self.exit == Some(0)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.exit {
            Some(code) => write!(f, "exit {code}, ")?,
            None => write!(f, "killed by a signal, ")?,
        }
        match &self.printed {
            Printed::Returns(r) => write!(f, "returns {}", serde_json::json!(r)),
            Printed::Message(m) => write!(f, "{m:?}"),
            Printed::Other(text) => write!(f, "printed {text:?}"),
        }
    }
}

fn stderr_note(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(" [stderr: {}]", text.lines().last().unwrap_or(text))
    }
}

fn expected(expect: Expect) -> String {
    match expect {
        Returns(ids, exit) => format!("exit {exit}, returns from exactly {ids:?}"),
        Denied => format!("exit 0, {AUTHORIZATION_ERROR:?}"),
        Unauthenticated => format!("exit 0, {AUTHENTICATION_ERROR:?}"),
    }
}

/// `true` when running as root; otherwise says why `test` returns early.
fn root_or_explain(test: &str) -> bool {
    if running_as_root() {
        return true;
    }
    eprintln!(
        "{test}: not run: it creates local users and runs the CLIs as them, which needs \
         root (CI runs as root)"
    );
    false
}

/// The local users of a root, each with a home inside it.
struct Callers<'a> {
    root: &'a TempRoot,
    users: BTreeMap<&'static str, (LocalUser, PathBuf)>,
}

impl<'a> Callers<'a> {
    /// Creates [`USERS`] (if missing), opens `root` to them and gives each a home.
    fn new(root: &'a TempRoot) -> Callers<'a> {
        open_to_local_users(root);
        let users = USERS
            .iter()
            .map(|name| {
                let user = LocalUser::ensure(name);
                let home = user.home_in(root);
                (*name, (user, home))
            })
            .collect();
        Callers { root, users }
    }

    fn user(&self, name: &str) -> &(LocalUser, PathBuf) {
        self.users
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not one of the test users {USERS:?}"))
    }

    /// Panics with a hint unless every test user can run `cli`.
    fn assert_can_run(&self, cli: Cli) {
        for (user, home) in self.users.values() {
            user.assert_can_run(&program(cli), home);
        }
    }

    /// `cli -c DIR` as `who`.
    fn command(&self, cli: Cli, who: Who) -> Command {
        let mut cmd = match who {
            Who::User(name) => {
                let (user, home) = self.user(name);
                user.command(program(cli), home)
            }
            Who::Root => root_command(program(cli)),
            Who::Sudo(name) => sudo_command(program(cli), name),
            Who::Eauth(name) => {
                let mut cmd = root_command(program(cli));
                cmd.env("HOME", self.root.path()).args([
                    "-a",
                    "file",
                    "--username",
                    name,
                    "--password",
                    &format!("{name}-pw"),
                ]);
                cmd
            }
        };
        cmd.arg("-c").arg(self.root.master_config_dir());
        cmd
    }

    /// `cli -c DIR <args> --out json` as `who`.
    fn run(&self, cli: Cli, who: Who, args: &[&str]) -> Outcome {
        let mut cmd = self.command(cli, who);
        cmd.args(args).args(["--out", "json"]);
        Outcome::of(&run_command(cmd, TIMEOUT))
    }

    /// `cli -c DIR <args>` as `who` with Salt's default (nested) output: stdout and exit.
    fn run_nested(&self, cli: Cli, who: Who, args: &[&str]) -> (String, Option<i32>) {
        let mut cmd = self.command(cli, who);
        cmd.args(args);
        let out = run_command(cmd, TIMEOUT);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    }

    /// Runs `cases` with `cli` and returns one line per case that does not meet its
    /// expectation, and every outcome (for comparisons).
    fn run_cases(&self, cli: Cli, what: &str, cases: &[Case]) -> (Vec<String>, Vec<Outcome>) {
        let mut wrong = Vec::new();
        let mut outcomes = Vec::new();
        for &(who, args, expect) in cases {
            let got = self.run(cli, who, args);
            if !got.meets(expect) {
                wrong.push(format!(
                    "{what}: {} {}: expected {}, got {got}",
                    who,
                    args.join(" "),
                    expected(expect)
                ));
            }
            outcomes.push(got);
        }
        (wrong, outcomes)
    }

    /// Waits until `who` gets returns from exactly `ids` for `args` (e.g. a ping).
    fn wait_for_returns(&self, cli: Cli, who: Who, args: &[&str], ids: &[&str]) {
        let want: BTreeSet<&str> = ids.iter().copied().collect();
        let mut last = None;
        let ok = wait_until(JOIN, || {
            let got = self.run(cli, who, args);
            let done = matches!(&got.printed, Printed::Returns(r)
                if r.keys().map(String::as_str).collect::<BTreeSet<_>>() == want);
            last = Some(got);
            done
        });
        if !ok {
            let last = last.map_or_else(String::new, |o| o.to_string());
            panic!(
                "{who} {args:?} with the {cli:?} CLI never returned from exactly {ids:?}; \
                 last: {last}"
            );
        }
    }
}

fn program(cli: Cli) -> PathBuf {
    match cli {
        Cli::Halite => runnable_by_all(&halite_bin("halite")),
        Cli::Stock => stock_bin("salt"),
    }
}

/// Writes the configs of `ids` from [`FLEET`] and starts them.
fn start_fleet(root: &TempRoot, ids: &[&str]) -> Vec<Proc> {
    FLEET
        .iter()
        .filter(|(id, _, _)| ids.contains(id))
        .map(|&(id, kind, redhat)| {
            root.add_minion_with(
                id,
                if redhat {
                    "grains:\n  os: RedHat\n"
                } else {
                    ""
                },
            );
            match kind {
                Kind::Stock => start_stock_minion(root, id),
                Kind::Halite => start_halite_minion(root, id),
            }
        })
        .collect()
}

/// Starts the master of `kind` and waits for its request port. For a stock master, also
/// opens its event socket to every user once it exists (Salt's documented manual step).
///
/// Each master starts on an empty `sock_dir`: a stock master stopped at the end of its
/// grace leaves its sockets behind, and its event socket must not be mistaken for the new
/// master's.
fn start_master(root: &TempRoot, kind: Kind) -> Proc {
    let sock_dir = root.master_root().join("sock");
    for entry in std::fs::read_dir(&sock_dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", sock_dir.display()))
        .flatten()
    {
        let path = entry.path();
        std::fs::remove_file(&path)
            .unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
    }
    let sock = sock_dir.join("master_event_pub.ipc");
    match kind {
        Kind::Halite => {
            let master = start_halite_master(root);
            wait_for_port(root.ret_port(), JOIN);
            master
        }
        Kind::Stock => {
            let master = start_stock_master(root);
            wait_for_port(root.ret_port(), JOIN);
            assert!(
                wait_until(JOIN, || sock.exists()),
                "stock salt-master made no {}",
                sock.display()
            );
            std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666))
                .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", sock.display()));
            master
        }
    }
}

/// The master's `cachedir/.<user>_key` files: mode and owner, `None` when missing.
fn key_file(root: &TempRoot, user: &str) -> Option<(u32, u32)> {
    let path = root
        .master_root()
        .join("cache")
        .join(format!(".{user}_key"));
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.permissions().mode() & 0o7777, m.uid()))
}

#[test]
fn seed_acl_allows_and_denies_each_case_for_users_of_the_halite_cli() {
    if !root_or_explain("seed_acl_allows_and_denies_each_case_for_users_of_the_halite_cli") {
        return;
    }
    let root = TempRoot::with_master_extra(SEED_ACL);
    let callers = Callers::new(&root);
    callers.assert_can_run(Cli::Halite);
    let _master = start_master(&root, Kind::Halite);
    let _fleet = start_fleet(&root, ALL);
    wait_for_pings(&root, ALL);
    // Both kinds of minion honour the static grain, and the master targets with it.
    callers.wait_for_returns(
        Cli::Halite,
        Root,
        &["-G", "os:RedHat", "test.ping"],
        &["db1", "mongo1"],
    );

    // Keys: one per existing ACL user, 0600 and owned by that user; none for eve.
    for name in ["fred", "dave", "steve"] {
        let uid = callers.user(name).0.uid();
        assert_eq!(
            key_file(&root, name),
            Some((0o600, uid)),
            "cachedir/.{name}_key: (mode, owner uid)"
        );
    }
    assert_eq!(key_file(&root, "root"), Some((0o600, 0)), ".root_key");
    assert_eq!(key_file(&root, "eve"), None, "eve is not in publisher_acl");
    // What ACL users need is open to them: the cachedir to traverse, the event stream to
    // connect to; firing events stays the master's.
    let mode = |path: PathBuf| {
        std::fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let master_root = root.master_root();
    assert_eq!(
        mode(master_root.join("cache")) & 0o001,
        0o001,
        "cachedir o+x"
    );
    let sock = master_root.join("sock");
    assert_eq!(
        mode(sock.join("master_event_pub.ipc")) & 0o006,
        0o006,
        "master_event_pub.ipc connectable by others"
    );
    assert_eq!(
        mode(sock.join("master_event_pull.ipc")) & 0o002,
        0,
        "master_event_pull.ipc not writable by others"
    );

    let (mut wrong, _) = callers.run_cases(Cli::Halite, "halite CLI", SEED_CASES);
    // `--static` for a user who may not run test.ping: stock 3008's `--static` goes through
    // its batch mode, which publishes test.ping first and is refused.
    wrong.extend(
        callers
            .run_cases(
                Cli::Halite,
                "halite CLI",
                &[(
                    User("dave"),
                    &["--static", "log*", "pkg.version"],
                    Returns(&["log1"], 0),
                )],
            )
            .0,
    );
    // The nested outputter prints the bare message, as stock `salt` does, and exits 0.
    for (who, args, message) in [
        (User("fred"), &["log1", "test.ping"], AUTHORIZATION_ERROR),
        (User("eve"), &["*", "test.ping"], AUTHENTICATION_ERROR),
    ] {
        let got = callers.run_nested(Cli::Halite, who, args);
        let want = (format!("{message}\n"), Some(0));
        if got != want {
            wrong.push(format!(
                "halite CLI, nested output: {who} {}: expected {want:?}, got {got:?}",
                args.join(" ")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn stock_salt_cli_users_get_the_same_answers_from_halite_as_from_a_stock_master() {
    if !root_or_explain(
        "stock_salt_cli_users_get_the_same_answers_from_halite_as_from_a_stock_master",
    ) {
        return;
    }
    let root = TempRoot::with_master_extra(SEED_ACL);
    let callers = Callers::new(&root);
    callers.assert_can_run(Cli::Stock);
    let _fleet = start_fleet(&root, ALL);

    // Stock master first: it validates the expectations.
    let mut master = start_master(&root, Kind::Stock);
    callers.wait_for_returns(Cli::Stock, Root, &["*", "test.ping"], ALL);
    callers.wait_for_returns(
        Cli::Stock,
        Root,
        &["-G", "os:RedHat", "test.ping"],
        &["db1", "mongo1"],
    );
    let (stock_wrong, stock) = callers.run_cases(Cli::Stock, "stock master", SEED_CASES);
    for line in &stock_wrong {
        eprintln!("{line}");
    }
    master.stop();
    drop(master);

    // The same minions and keys with a Halite master.
    let _master = start_master(&root, Kind::Halite);
    wait_for_pings(&root, ALL);
    // Stock minions sent their grains to the stock master; have them send them again.
    let refresh = callers.run(
        Cli::Halite,
        Root,
        &["-L", "web1,log1,db1", "saltutil.refresh_pillar"],
    );
    assert!(
        matches!(refresh.printed, Printed::Returns(_)),
        "saltutil.refresh_pillar: {refresh}"
    );
    callers.wait_for_returns(
        Cli::Stock,
        Root,
        &["-G", "os:RedHat", "test.ping"],
        &["db1", "mongo1"],
    );
    let (halite_wrong, halite) = callers.run_cases(Cli::Stock, "Halite master", SEED_CASES);

    let mut wrong = stock_wrong;
    wrong.extend(halite_wrong);
    for (((who, args, _), s), h) in SEED_CASES.iter().zip(&stock).zip(&halite) {
        if s != h {
            wrong.push(format!(
                "{} {}: stock master gave {s}, Halite master gave {h}",
                who,
                args.join(" ")
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn seed_acl_through_eauth_file_gives_each_case_with_both_clis_on_both_masters() {
    if !root_or_explain(
        "seed_acl_through_eauth_file_gives_each_case_with_both_clis_on_both_masters",
    ) {
        return;
    }
    let root = TempRoot::new();
    let passwords = root.path().join("eauth-passwords");
    std::fs::write(&passwords, "fred:fred-pw\ndave:dave-pw\nsteve:steve-pw\n").unwrap();
    root.write_master_config(&seed_eauth_config(&passwords));
    let callers = Callers::new(&root);
    let cases = seed_eauth_cases();
    let _fleet = start_fleet(&root, ALL);

    let mut wrong = Vec::new();
    for kind in [Kind::Stock, Kind::Halite] {
        let mut master = start_master(&root, kind);
        wait_for_pings(&root, ALL);
        if kind == Kind::Halite {
            // Stock minions sent their grains to the stock master; have them send them again.
            let refresh = callers.run(
                Cli::Halite,
                Root,
                &["-L", "web1,log1,db1", "saltutil.refresh_pillar"],
            );
            assert!(
                matches!(refresh.printed, Printed::Returns(_)),
                "saltutil.refresh_pillar: {refresh}"
            );
        }
        callers.wait_for_returns(
            Cli::Stock,
            Root,
            &["-G", "os:RedHat", "test.ping"],
            &["db1", "mongo1"],
        );
        wrong.extend(
            callers
                .run_cases(Cli::Stock, &format!("{kind:?} master, stock CLI"), &cases)
                .0,
        );
        if kind == Kind::Halite {
            wrong.extend(
                callers
                    .run_cases(Cli::Halite, "Halite master, halite CLI", &cases)
                    .0,
            );
        }
        master.stop();
    }
    assert!(
        wrong.is_empty(),
        "{} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn blacklist_refuses_root_plain_users_and_cmd_and_sudo_acl_limits_sudo_users() {
    if !root_or_explain("blacklist_refuses_root_plain_users_and_cmd_and_sudo_acl_limits_sudo_users")
    {
        return;
    }
    let ids = ["mongo1", "web2"];
    let root = TempRoot::with_master_extra(SEED_ACL);
    let callers = Callers::new(&root);
    callers.assert_can_run(Cli::Stock);
    callers.assert_can_run(Cli::Halite);
    let _fleet = start_fleet(&root, &ids);

    let mut wrong = Vec::new();
    for kind in [Kind::Stock, Kind::Halite] {
        for (sudo_acl, cases) in [(false, BLACKLIST_CASES), (true, SUDO_ACL_CASES)] {
            root.write_master_config(&format!("{SEED_ACL}{BLACKLIST}sudo_acl: {sudo_acl}\n"));
            let mut master = start_master(&root, kind);
            // Root is blacklisted; sudo_steve may ping everything in both configs.
            let cli = match kind {
                Kind::Stock => Cli::Stock,
                Kind::Halite => Cli::Halite,
            };
            callers.wait_for_returns(cli, Sudo("steve"), &["*", "test.ping"], &ids);
            let what = format!("{kind:?} master, sudo_acl {sudo_acl}, stock CLI");
            wrong.extend(callers.run_cases(Cli::Stock, &what, cases).0);
            if kind == Kind::Halite {
                let what = format!("Halite master, sudo_acl {sudo_acl}, halite CLI");
                wrong.extend(callers.run_cases(Cli::Halite, &what, cases).0);
            }
            master.stop();
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_refused_publish_fires_halite_acl_deny_with_user_fun_target_and_reason() {
    if !root_or_explain(
        "every_refused_publish_fires_halite_acl_deny_with_user_fun_target_and_reason",
    ) {
        return;
    }
    let ids = ["mongo1", "web2"];
    let root = TempRoot::with_master_extra(&format!(
        "{SEED_ACL}publisher_acl_blacklist:\n  modules:\n    - 'cmd.*'\n"
    ));
    let callers = Callers::new(&root);
    callers.assert_can_run(Cli::Halite);
    let _master = start_master(&root, Kind::Halite);
    let _fleet = start_fleet(&root, &ids);
    wait_for_pings(&root, &ids);

    // An allowed publish first (it must fire nothing), then three refusals (nested output:
    // what is checked here is the events, not the JSON form of the message).
    let allowed = callers.run(Cli::Halite, User("fred"), &["web2", "test.ping"]);
    assert!(
        allowed.meets(Returns(&["web2"], 0)),
        "fred web2 test.ping: {allowed}"
    );
    let refused: [(Who, &[&str]); 3] = [
        (User("fred"), &["mongo1", "test.ping"]),
        (User("dave"), &["web2", "kmod.lsmod"]),
        (User("steve"), &["web2", "cmd.run", "id"]),
    ];
    for (who, args) in refused {
        assert_eq!(
            callers.run_nested(Cli::Halite, who, args),
            (format!("{AUTHORIZATION_ERROR}\n"), Some(0)),
            "{who} {args:?}"
        );
    }
    // The end of what this test did, in the journal's order.
    let end_tag = "halite/acl/test-end";
    let mut fire = callers.command(Cli::Halite, Root);
    fire.args(["event", "fire", end_tag, "{}"]);
    assert_success("halite event fire", &run_command(fire, TIMEOUT));

    let mut listen = callers.command(Cli::Halite, Root);
    listen.args([
        "event",
        "listen",
        "--since",
        "0",
        "--json",
        "--tag",
        "halite/acl/*",
    ]);
    let listener = Proc::spawn(listen, &root.procs_dir(), "event-listen");
    let events = || -> Vec<Value> {
        listener
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let ended = wait_until(Duration::from_secs(60), || {
        events().iter().any(|e| e["tag"] == end_tag)
    });
    assert!(
        ended,
        "halite event listen did not replay {end_tag}; it printed:\n{}\n{}",
        listener.stdout(),
        listener.stderr()
    );
    let denials: Vec<Value> = events()
        .into_iter()
        .take_while(|e| e["tag"] != end_tag)
        .collect();
    let seen: Vec<(String, String, String, String)> = denials
        .iter()
        .map(|e| {
            let field = |k: &str| e["data"][k].as_str().unwrap_or("<missing>").to_owned();
            (field("user"), field("fun"), field("tgt"), field("tgt_type"))
        })
        .collect();
    let want: Vec<(String, String, String, String)> = [
        ("fred", "test.ping", "mongo1"),
        ("dave", "kmod.lsmod", "web2"),
        ("steve", "cmd.run", "web2"),
    ]
    .iter()
    .map(|(u, f, t)| (u.to_string(), f.to_string(), t.to_string(), "glob".into()))
    .collect();
    assert_eq!(
        seen, want,
        "halite/acl/deny events (user, fun, tgt, tgt_type): {denials:?}"
    );
    for e in &denials {
        assert_eq!(e["tag"], "halite/acl/deny", "{e}");
    }
    let reason = |i: usize| {
        denials
            .get(i)
            .and_then(|e| e["data"]["reason"].as_str())
            .unwrap_or("")
            .to_lowercase()
    };
    for i in 0..2 {
        assert!(
            !reason(i).is_empty() && !reason(i).contains("blacklist"),
            "an ACL refusal names its reason: {:?}",
            denials.get(i)
        );
    }
    assert!(
        reason(2).contains("blacklist"),
        "a blacklist refusal says so: {:?}",
        denials.get(2)
    );
}
