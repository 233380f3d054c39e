//! Real local users for access-control tests (`publisher_acl`, `sudo_acl`): create them,
//! run programs as them, and open a [`TempRoot`] to them.
//!
//! What it does: [`LocalUser::ensure`] looks a user up and, when it is missing, creates it
//! with `useradd` (a system user with its own group, no home directory, no login shell),
//! serialised across threads and test processes by an exclusive `flock` on
//! `/tmp/halite-testkit-useradd.lock` (`useradd` fails rather than waits when another one
//! holds the user database). [`LocalUser::command`] builds a [`Command`] that
//! runs as that user; [`open_to_local_users`] makes a root's directory traversable by them;
//! [`LocalUser::home_in`] gives each user a home of its own inside the root;
//! [`sudo_command`] runs a program as root the way `sudo` leaves it (`SUDO_USER` set), and
//! [`root_command`] as plain root. [`ThrowawayUser`] is a user of one test, with a
//! password (for PAM), that the test may lock or expire and that is deleted when dropped.
//!
//! What it does not do: delete the users [`LocalUser::ensure`] makes (they are harmless, no
//! login, and other test processes may be using them), change a user that exists already,
//! or skip anything:
//! [`running_as_root`] only answers the question, the test decides (and says why it
//! returns early).
//!
//! Invariants:
//! - A command built here never inherits `SUDO_USER` unless it is [`sudo_command`], so a
//!   test suite started under `sudo` does not turn root's commands into `sudo_<name>` ones.
//! - A [`LocalUser::command`] runs with the user's uid and primary gid and no supplementary
//!   groups (std drops them when a root parent sets the uid), its own `HOME`, `USER` and
//!   `LOGNAME`, and that home as its working directory.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::process::{run_command, run_command_with_input};
use crate::root::TempRoot;

/// Lock file serialising `useradd` between threads and test processes.
const USERADD_LOCK: &str = "/tmp/halite-testkit-useradd.lock";
/// `useradd` exit status: the user name is taken (someone else created it meanwhile).
const USERADD_NAME_IN_USE: i32 = 9;
/// Environment variables that would point a user's program at the test runner's files.
const RUNNER_ENV: [&str; 4] = [
    "SUDO_USER",
    "XDG_CONFIG_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CACHE_HOME",
];

/// Whether the tests run as root (effective uid 0): only root can create users and run
/// programs as them.
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A local user of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalUser {
    name: String,
    uid: u32,
    gid: u32,
}

impl LocalUser {
    /// The user `name` from the user database (`getent passwd`), `None` when it has none.
    ///
    /// # Panics
    /// When `getent` cannot run or prints an entry that is not a passwd line.
    pub fn lookup(name: &str) -> Option<LocalUser> {
        let mut getent = Command::new("getent");
        getent.args(["passwd", name]);
        let output = run_command(getent, Duration::from_secs(30));
        if !output.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&output.stdout);
        Some(
            parse_passwd_line(text.lines().next().unwrap_or("")).unwrap_or_else(|| {
                panic!("getent passwd {name} printed an unexpected line: {text:?}")
            }),
        )
    }

    /// The user `name`, created with `useradd` when it does not exist (a system user with a
    /// group of its own, no home directory and no login shell).
    ///
    /// # Panics
    /// When not running as root, when `name` is not a plain user name, or when `useradd`
    /// fails (other than because someone else created the user meanwhile).
    pub fn ensure(name: &str) -> LocalUser {
        check_name(name);
        if let Some(user) = LocalUser::lookup(name) {
            return user;
        }
        assert!(
            running_as_root(),
            "creating user {name} needs root; the tests run as uid {}",
            // SAFETY: geteuid has no preconditions and cannot fail.
            unsafe { libc::geteuid() }
        );
        let _lock = lock_useradd();
        if let Some(user) = LocalUser::lookup(name) {
            return user;
        }
        let mut cmd = Command::new("useradd");
        cmd.args([
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "halite test user",
            name,
        ]);
        let output = run_command(cmd, Duration::from_secs(60));
        if !(output.status.success() || output.status.code() == Some(USERADD_NAME_IN_USE)) {
            panic!(
                "useradd {name} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        LocalUser::lookup(name)
            .unwrap_or_else(|| panic!("useradd {name} succeeded but getent passwd finds no {name}"))
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user's uid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The user's primary gid.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// `program` to be run as this user, with `home` as its `HOME` and working directory.
    /// Run it with [`crate::run_command`] or [`crate::Proc::spawn`].
    pub fn command(&self, program: impl AsRef<OsStr>, home: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.uid(self.uid)
            .gid(self.gid)
            .current_dir(home)
            .env("HOME", home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name);
        for var in RUNNER_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `DIR/home/<name>`, created as this user's private home (0700, owned by it) on first
    /// use. Programs that write to `~` (stock `salt` falls back to `~/.salt/master.log` when
    /// it cannot write the master's `log_file`) write here, inside the root.
    ///
    /// # Panics
    /// When the directory cannot be created, chowned or chmodded.
    pub fn home_in(&self, root: &TempRoot) -> PathBuf {
        let homes = root.path().join("home");
        mkdir_mode(&homes, 0o755);
        let home = homes.join(&self.name);
        mkdir_mode(&home, 0o700);
        std::os::unix::fs::chown(&home, Some(self.uid), Some(self.gid))
            .unwrap_or_else(|e| panic!("cannot chown {} to {}: {e}", home.display(), self.name));
        home
    }

    /// Panics with a hint unless this user can run `program --version` (the program and
    /// everything it needs, e.g. a script's interpreter, is reachable by the user).
    pub fn assert_can_run(&self, program: &Path, home: &Path) {
        let mut cmd = self.command(program, home);
        cmd.arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let why = match cmd.status() {
            Ok(status) if status.success() => return,
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        };
        panic!(
            "user {} cannot run {} --version ({why}): every directory above it (and above a \
             script's interpreter) must be searchable by other users; for stock Salt, point \
             {} at a venv made from a Python outside /root",
            self.name,
            program.display(),
            crate::paths::SALT_VENV_ENV,
        );
    }
}

/// A local user made for one test, with a password, deleted (with its group) when dropped.
///
/// Its name is `<prefix><pid>x<n>`, unique to the test process; it is a system user with a
/// group of its own, no home directory and no login shell, made, changed and deleted under
/// the same lock as [`LocalUser::ensure`]. A test process that is killed leaves it behind
/// (`userdel` it by hand).
#[derive(Debug)]
pub struct ThrowawayUser {
    name: String,
}

impl ThrowawayUser {
    /// Creates a fresh user whose password is `password`.
    ///
    /// # Panics
    /// When not running as root, when the name would not be a plain user name (keep
    /// `prefix` short, lowercase), when `password` contains `:` or a newline, or when
    /// `useradd` or `chpasswd` fails.
    pub fn create(prefix: &str, password: &str) -> ThrowawayUser {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        assert!(running_as_root(), "creating user {prefix}… needs root");
        let name = format!(
            "{prefix}{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        check_name(&name);
        {
            let _lock = lock_useradd();
            let mut cmd = Command::new("useradd");
            cmd.args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--comment",
                "halite throwaway test user",
                &name,
            ]);
            check_admin_tool("useradd", &run_command(cmd, Duration::from_secs(60)));
        }
        let user = ThrowawayUser { name };
        user.set_password(password);
        user
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the password (`chpasswd`).
    ///
    /// # Panics
    /// When `password` contains `:` or a newline, or `chpasswd` fails.
    pub fn set_password(&self, password: &str) {
        assert!(
            !password.contains([':', '\n', '\r']),
            "chpasswd cannot set a password containing ':' or a newline"
        );
        let _lock = lock_useradd();
        let input = format!("{}:{password}\n", self.name);
        let output = run_command_with_input(
            Command::new("chpasswd"),
            input.as_bytes(),
            Duration::from_secs(60),
        );
        check_admin_tool("chpasswd", &output);
    }

    /// Locks the password (`usermod -L`: the hash gets a `!`, so no password matches).
    pub fn lock_password(&self) {
        self.admin("usermod", &["-L"]);
    }

    /// Removes the password (`passwd -d`: the account has an empty password).
    pub fn delete_password(&self) {
        self.admin("passwd", &["-d"]);
    }

    /// Expires the account (`usermod -e 1`: it expired on 2 January 1970).
    pub fn expire_account(&self) {
        self.admin("usermod", &["-e", "1"]);
    }

    /// Lifts the account's expiry (`usermod -e ''`).
    pub fn unexpire_account(&self) {
        self.admin("usermod", &["-e", ""]);
    }

    /// Runs `tool args… <name>` under the user-database lock.
    fn admin(&self, tool: &str, args: &[&str]) {
        let _lock = lock_useradd();
        let mut cmd = Command::new(tool);
        cmd.args(args).arg(&self.name);
        check_admin_tool(tool, &run_command(cmd, Duration::from_secs(60)));
    }
}

impl Drop for ThrowawayUser {
    fn drop(&mut self) {
        let _lock = lock_useradd();
        let mut cmd = Command::new("userdel");
        cmd.arg(&self.name);
        let output = run_command(cmd, Duration::from_secs(60));
        if !output.status.success() {
            eprintln!(
                "userdel {} failed ({}): {}",
                self.name,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// Panics with the tool's stderr unless it succeeded.
fn check_admin_tool(tool: &str, output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{tool} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `program` run as root the way `sudo -u root` by `sudo_user` leaves it: `SUDO_USER` set,
/// which Salt's `get_specific_user` turns into the publish user `sudo_<sudo_user>`.
pub fn sudo_command(program: impl AsRef<OsStr>, sudo_user: &str) -> Command {
    let mut cmd = Command::new(program);
    for var in RUNNER_ENV {
        cmd.env_remove(var);
    }
    cmd.env("SUDO_USER", sudo_user);
    cmd
}

/// `program` run as root with none of the runner's `SUDO_USER` (so a suite started under
/// `sudo` still publishes as `root`).
pub fn root_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for var in RUNNER_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// Makes `root`'s directory searchable and readable by every local user (0755, whatever
/// mode the umask gave it), so other users can read the configs and reach the sockets and
/// files the daemons open to them. What is inside keeps its own modes.
///
/// # Panics
/// When the mode cannot be changed, or a directory above the root is not searchable by
/// others (set `HALITE_TEMP_BASE` to a directory that is).
pub fn open_to_local_users(root: &TempRoot) {
    let path = root.path();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot chmod 0755 {}: {e}", path.display()));
    for dir in path.ancestors().skip(1) {
        let mode = std::fs::metadata(dir)
            .unwrap_or_else(|e| panic!("cannot stat {}: {e}", dir.display()))
            .permissions()
            .mode();
        assert!(
            mode & 0o001 != 0,
            "{} (mode {mode:o}) is not searchable by other users, so they cannot reach {}: \
             set {} to a directory that is",
            dir.display(),
            path.display(),
            crate::root::TEMP_BASE_ENV
        );
    }
}

/// `program` where every local user can run it: the path itself when every directory above
/// it is searchable by others, else a copy in a shared 0755 directory under the system temp
/// directory (a checkout under `/root` is out of other users' reach). The copy is made once
/// per build of the program.
///
/// # Panics
/// When the program cannot be read or copied.
pub fn runnable_by_all(program: &Path) -> PathBuf {
    let reachable = program
        .ancestors()
        .skip(1)
        .all(|dir| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    let meta = std::fs::metadata(program)
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", program.display()));
    if reachable && meta.permissions().mode() & 0o001 != 0 {
        return program.to_owned();
    }
    let stamp = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let shared = std::env::temp_dir().join("halite-testkit-bin");
    mkdir_mode(&shared, 0o755);
    let name = program
        .file_name()
        .unwrap_or_else(|| panic!("{} has no file name", program.display()))
        .to_string_lossy();
    let copy = shared.join(format!("{name}-{stamp}-{}", meta.len()));
    if !copy.exists() {
        // Copied under a temporary name and renamed, so parallel tests never run a half copy.
        let tmp = shared.join(format!(".{name}-{}", std::process::id()));
        std::fs::copy(program, &tmp)
            .unwrap_or_else(|e| panic!("cannot copy {}: {e}", program.display()));
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", tmp.display()));
        std::fs::rename(&tmp, &copy)
            .unwrap_or_else(|e| panic!("cannot place {}: {e}", copy.display()));
    }
    copy
}

/// Holds the `useradd` lock until dropped.
fn lock_useradd() -> File {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(USERADD_LOCK)
        .unwrap_or_else(|e| panic!("cannot open {USERADD_LOCK}: {e}"));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {USERADD_LOCK}: {e}"));
    file
}

/// `name:x:uid:gid:...` → the user.
fn parse_passwd_line(line: &str) -> Option<LocalUser> {
    let mut fields = line.split(':');
    let name = fields.next().filter(|n| !n.is_empty())?;
    let _password = fields.next()?;
    let uid = fields.next()?.parse().ok()?;
    let gid = fields.next()?.parse().ok()?;
    Some(LocalUser {
        name: name.to_owned(),
        uid,
        gid,
    })
}

/// A name `useradd` takes as it is: lowercase letters, digits, `_`, `-`, starting with a
/// letter or `_`, at most 32 bytes.
fn check_name(name: &str) {
    let plain = name.len() <= 32
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'));
    assert!(plain, "{name:?} is not a plain user name");
}

fn mkdir_mode(path: &Path, mode: u32) {
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("cannot create {}: {e}", path.display()),
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("cannot chmod {mode:o} {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_give_name_uid_and_gid() {
        assert_eq!(
            parse_passwd_line("fred:x:1001:1002:halite test user:/nonexistent:/bin/false"),
            Some(LocalUser {
                name: "fred".into(),
                uid: 1001,
                gid: 1002
            })
        );
        for bad in ["", "fred", "fred:x:abc:1", ":x:1:1:::"] {
            assert_eq!(parse_passwd_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn root_is_looked_up_and_unknown_users_are_none() {
        let root = LocalUser::lookup("root").unwrap();
        assert_eq!((root.uid(), root.gid()), (0, 0));
        assert_eq!(LocalUser::lookup("no-such-user-halite"), None);
    }

    #[test]
    fn user_names_must_be_plain() {
        for bad in ["", "Fred", "1fred", "fr ed", "fred;rm", &"a".repeat(33)] {
            assert!(
                std::panic::catch_unwind(|| check_name(bad)).is_err(),
                "{bad:?} accepted"
            );
        }
        check_name("sudo_fred-2");
    }

    #[test]
    fn an_existing_user_is_returned_without_useradd() {
        assert_eq!(LocalUser::ensure("root").uid(), 0);
    }

    #[test]
    fn a_throwaway_user_exists_until_dropped() {
        if !running_as_root() {
            eprintln!("not root: cannot create users");
            return;
        }
        let user = ThrowawayUser::create("haltk", "pw-1");
        let name = user.name().to_owned();
        assert!(name.starts_with("haltk"));
        let found = LocalUser::lookup(&name).expect("the user exists");
        user.set_password("pw-2");
        user.lock_password();
        user.expire_account();
        user.unexpire_account();
        user.delete_password();
        drop(user);
        assert_eq!(LocalUser::lookup(&name), None, "{found:?} was deleted");
    }

    #[test]
    fn a_program_in_an_unopened_root_is_out_of_reach_until_the_root_is_opened() {
        if !running_as_root() {
            eprintln!("not root: cannot run a command as another user");
            return;
        }
        let root = TempRoot::new();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let program = root.path().join("prog");
        std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let nobody = LocalUser::ensure("nobody");
        let home = Path::new("/");
        let err = std::panic::catch_unwind(|| nobody.assert_can_run(&program, home)).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains(crate::paths::SALT_VENV_ENV), "{msg}");
        open_to_local_users(&root);
        nobody.assert_can_run(&program, home);
    }

    #[test]
    fn commands_run_as_the_user_with_its_home_and_without_sudo_user() {
        if !running_as_root() {
            eprintln!("not root: cannot run a command as another user");
            return;
        }
        let root = TempRoot::new();
        open_to_local_users(&root);
        let nobody = LocalUser::ensure("nobody");
        let home = nobody.home_in(&root);
        let mut cmd = nobody.command("sh", &home);
        cmd.args([
            "-c",
            "id -u; id -G; echo \"$HOME\"; pwd; echo \"${SUDO_USER-unset}\"",
        ]);
        let out = crate::assert_success("sh as nobody", &run_command(cmd, crate::TIMEOUT));
        let lines: Vec<&str> = out.lines().collect();
        let home_text = home.display().to_string();
        assert_eq!(
            lines,
            [
                nobody.uid().to_string().as_str(),
                nobody.gid().to_string().as_str(),
                &home_text,
                &home_text,
                "unset"
            ]
        );
        let mut sudo = sudo_command("sh", "fred");
        sudo.args(["-c", "id -u; echo $SUDO_USER"]);
        let out = crate::assert_success("sh with SUDO_USER", &run_command(sudo, crate::TIMEOUT));
        assert_eq!(out, "0\nfred\n");
    }
}
