//! Child processes that cannot outlive their test, and polling helpers.
//!
//! Every child is spawned in a new process group (`process_group(0)`) with stdin from
//! `/dev/null` (or from a file holding the input given to [`run_command_with_input`]) and
//! stdout/stderr sent to files, never to the test's own pipes (a daemon
//! grandchild holding the test's stdout would make nextest report a leak and wait). Stock
//! `salt-minion` and `salt-master` fork helpers, so stopping means signalling the whole group
//! plus any descendant that moved to a group of its own; the tree is frozen with SIGSTOP
//! first, so a process cannot fork or call `setsid` between the scan and the signal.
//!
//! The leader is reaped only after its group has been killed: while the leader is an
//! unreaped zombie its pid cannot be reused, so signalling `-pgid` can never reach an
//! unrelated process group.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Time a process group gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Time allowed for processes to vanish after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// Interval between polls of a condition, a log file or the process table.
const POLL: Duration = Duration::from_millis(50);

/// A spawned child process (and everything it forks), stopped on drop.
///
/// Drop freezes the tree (SIGSTOP, so nothing forks or leaves the group meanwhile), sends
/// SIGTERM and SIGCONT to every process of it, waits up to [`STOP_GRACE`] for all to exit,
/// (or the time set with [`Proc::with_stop_grace`]) for all to exit, then kills what is
/// left with SIGKILL. Declare a `Proc` after the [`crate::TempRoot`] it
/// runs in, so it is dropped (stopped) before the directory is removed.
pub struct Proc {
    name: String,
    group: Group,
    grace: Duration,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

impl Proc {
    /// Spawns `cmd` in a new process group, its stdout and stderr going to
    /// `<out_dir>/<name>.stdout` and `.stderr` (`<name>-2.stdout` and so on if those exist,
    /// so a restarted program keeps the first run's output).
    ///
    /// # Panics
    /// When the output files cannot be created or the program cannot be started.
    pub fn spawn(cmd: Command, out_dir: &Path, name: &str) -> Proc {
        let (stdout_path, stdout) = create_unique(out_dir, name, "stdout");
        let stderr_path = stdout_path.with_extension("stderr");
        let stderr = File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr_path.display()));
        let desc = format!("{cmd:?}");
        let group = Group::spawn(cmd, Stdio::null(), stdout, stderr)
            .unwrap_or_else(|e| panic!("cannot start {name} ({desc}): {e}"));
        Proc {
            name: name.to_owned(),
            group,
            grace: STOP_GRACE,
            stdout_path,
            stderr_path,
        }
    }

    /// Sets the time between SIGTERM and SIGKILL when stopping (default [`STOP_GRACE`]).
    pub fn with_stop_grace(mut self, grace: Duration) -> Proc {
        self.grace = grace;
        self
    }

    /// The name given to [`Proc::spawn`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Process id of the direct child (also its process group id).
    pub fn pid(&self) -> u32 {
        self.group.child.id()
    }

    /// File receiving the child's stdout.
    pub fn stdout_path(&self) -> &Path {
        &self.stdout_path
    }

    /// File receiving the child's stderr.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// Everything the child has written to stdout so far (lossy UTF-8).
    pub fn stdout(&self) -> String {
        read_lossy(&self.stdout_path)
    }

    /// Everything the child has written to stderr so far (lossy UTF-8).
    pub fn stderr(&self) -> String {
        read_lossy(&self.stderr_path)
    }

    /// Whether the direct child is still running (not exited, not a zombie).
    pub fn is_running(&self) -> bool {
        !self.group.leader_exited()
    }

    /// Pids of the live processes of this child's tree: its process group, every descendant
    /// of a process seen before (even one that left the group), but no zombie.
    pub fn pids(&self) -> Vec<u32> {
        self.group.track().iter().map(|s| s.pid as u32).collect()
    }

    /// Waits up to `timeout` for the child to exit on its own. On exit, kills whatever it
    /// left behind and returns its status; returns `None` (child still running) on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if !wait_until(timeout, || {
            self.group.track();
            self.group.leader_exited()
        }) {
            return None;
        }
        Some(
            self.group
                .kill()
                .unwrap_or_else(|e| panic!("cannot reap {}: {e}", self.name)),
        )
    }

    /// Stops the child like drop does (SIGTERM, grace period, SIGKILL) and returns its
    /// status.
    pub fn stop(&mut self) -> ExitStatus {
        self.group
            .stop(self.grace)
            .unwrap_or_else(|e| panic!("cannot reap {}: {e}", self.name))
    }

    /// Freezes the child and its whole tree with SIGSTOP (a hung daemon: its sockets stay
    /// open and the kernel still queues what peers send, but nothing is read or answered)
    /// and returns once every process of the tree is stopped (or, inside `vfork`, waits for
    /// a stopped child). [`Proc::thaw`] resumes it;
    /// dropping or stopping a frozen `Proc` works as usual.
    pub fn freeze(&self) {
        self.group.freeze();
    }

    /// Resumes a tree frozen with [`Proc::freeze`]: SIGCONT to every live process of it.
    pub fn thaw(&self) {
        for s in self.group.track() {
            send_signal(s.pid, libc::SIGCONT);
        }
    }

    /// SIGKILL to the direct child at once, without walking its tree first (as
    /// [`Proc::kill`] does, which takes milliseconds a test that crashes a daemon mid-work
    /// cannot give it); reap it with [`Proc::kill`] afterwards.
    pub fn sigkill_now(&self) {
        send_signal(self.group.child.id() as i32, libc::SIGKILL);
    }

    /// Kills the child and its whole tree at once with SIGKILL (a crash, not a shutdown)
    /// and returns its status.
    pub fn kill(&mut self) -> ExitStatus {
        self.group
            .kill()
            .unwrap_or_else(|e| panic!("cannot reap {}: {e}", self.name))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Errors here only mean the child was already reaped; nothing is left to clean up.
        let _ = self.group.stop(self.grace);
    }
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("name", &self.name)
            .field("pid", &self.pid())
            .field("stdout", &self.stdout_path)
            .finish()
    }
}

/// Runs `program` with `args` to completion and returns its output.
///
/// See [`run_command`].
pub fn run<I, S>(program: impl AsRef<std::ffi::OsStr>, args: I, timeout: Duration) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args);
    run_command(cmd, timeout)
}

/// Runs `cmd` to completion in its own process group and returns its output. Whatever the
/// command leaves running after it exits is killed.
///
/// Output is captured through files, not pipes, so a forked grandchild cannot hold the read
/// side open.
///
/// # Panics
/// When the command cannot be started, or when it is still running after `timeout` (it is
/// killed first; the message carries its output so far).
pub fn run_command(cmd: Command, timeout: Duration) -> Output {
    run_with_stdin(cmd, Stdio::null(), timeout)
}

/// [`run_command`] with `input` on the command's stdin (read from a file, so the command
/// may read it at its own pace).
///
/// # Panics
/// As [`run_command`]; also when the input cannot be written to a temporary file.
pub fn run_command_with_input(cmd: Command, input: &[u8], timeout: Duration) -> Output {
    let mut file = tempfile::tempfile().unwrap_or_else(|e| panic!("temp file: {e}"));
    file.write_all(input)
        .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
        .unwrap_or_else(|e| panic!("cannot write the input of {cmd:?}: {e}"));
    run_with_stdin(cmd, Stdio::from(file), timeout)
}

/// [`run_command`] with `stdin` as the command's stdin.
fn run_with_stdin(cmd: Command, stdin: Stdio, timeout: Duration) -> Output {
    let desc = format!("{cmd:?}");
    let mut stdout = tempfile::tempfile().unwrap_or_else(|e| panic!("temp file: {e}"));
    let mut stderr = tempfile::tempfile().unwrap_or_else(|e| panic!("temp file: {e}"));
    let clone = |f: &File| {
        f.try_clone()
            .unwrap_or_else(|e| panic!("dup temp file: {e}"))
    };
    let mut group = Group::spawn(cmd, stdin, clone(&stdout), clone(&stderr))
        .unwrap_or_else(|e| panic!("cannot start {desc}: {e}"));
    let exited = wait_until(timeout, || {
        group.track();
        group.leader_exited()
    });
    let status = group
        .kill()
        .unwrap_or_else(|e| panic!("cannot reap {desc}: {e}"));
    let read_all = |f: &mut File| {
        let mut buf = Vec::new();
        f.seek(SeekFrom::Start(0))
            .and_then(|_| f.read_to_end(&mut buf))
            .unwrap_or_else(|e| panic!("cannot read output of {desc}: {e}"));
        buf
    };
    let output = Output {
        status,
        stdout: read_all(&mut stdout),
        stderr: read_all(&mut stderr),
    };
    if !exited {
        panic!(
            "{desc} still running after {timeout:?}; killed.\n--- stdout ---\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

/// Polls `cond` until it returns true (→ `true`) or `timeout` passes (→ `false`). `cond` is
/// checked once more at the deadline, so a slow machine never turns success into failure.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until the file at `path` contains `needle` and returns the byte offset just past
/// the first match. The file may not exist yet.
///
/// # Panics
/// On timeout, with the last lines of the file.
pub fn wait_for_log(path: &Path, needle: &str, timeout: Duration) -> u64 {
    wait_for_log_from(path, 0, needle, timeout)
}

/// Like [`wait_for_log`], but only looks at bytes from `offset` on: pass [`file_len`] taken
/// before an action (a restart, a command) to wait for what that action logs.
///
/// # Panics
/// On timeout, with the last lines of the file.
pub fn wait_for_log_from(path: &Path, offset: u64, needle: &str, timeout: Duration) -> u64 {
    let mut found = None;
    wait_until(timeout, || {
        found = find_from(path, offset, needle.as_bytes());
        found.is_some()
    });
    found.unwrap_or_else(|| {
        panic!(
            "{needle:?} not found in {} (from byte {offset}) within {timeout:?}; last lines:\n{}",
            path.display(),
            log_tail(path, 40)
        )
    })
}

/// Current length of a file in bytes (0 if it does not exist).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The last `lines` lines of a file (lossy UTF-8), or a note that it cannot be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

fn find_from(path: &Path, offset: u64, needle: &[u8]) -> Option<u64> {
    let mut file = File::open(path).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).ok()?;
    if needle.is_empty() {
        return Some(offset);
    }
    buf.windows(needle.len())
        .position(|w| w == needle)
        .map(|at| offset + (at + needle.len()) as u64)
}

fn read_lossy(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Creates `<dir>/<name>.<ext>`, or `<name>-2.<ext>`, `<name>-3.<ext>`... if taken.
fn create_unique(dir: &Path, name: &str, ext: &str) -> (PathBuf, File) {
    for n in 1u32.. {
        let stem = if n == 1 {
            name.to_owned()
        } else {
            format!("{name}-{n}")
        };
        let path = dir.join(format!("{stem}.{ext}"));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return (path, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create {}: {e}", path.display()),
        }
    }
    unreachable!("u32 range exhausted naming output files for {name}")
}

/// A child leading its own process group, and every process seen in its tree.
///
/// A watchdog (`/bin/sh`, in a process group of its own) kills the group with SIGKILL when
/// this test process dies without dropping the `Group`: it blocks reading a pipe whose only
/// write end is held here, so any death of the test process (a nextest timeout kills the
/// test's process group, which the daemons left) gives it end-of-file.
struct Group {
    child: Child,
    pgid: i32,
    status: Option<ExitStatus>,
    watchdog: Option<(Child, std::io::PipeWriter)>,
    /// Processes seen in the tree, by pid with start time (a recycled pid has another), so
    /// a descendant that left the group and was orphaned is still found once seen.
    seen: RefCell<HashMap<i32, u64>>,
}

impl Group {
    fn spawn(mut cmd: Command, stdin: Stdio, stdout: File, stderr: File) -> std::io::Result<Group> {
        cmd.stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        let child = cmd.spawn()?;
        let pgid = i32::try_from(child.id()).map_err(std::io::Error::other)?;
        let mut group = Group {
            child,
            pgid,
            status: None,
            watchdog: None,
            seen: RefCell::new(HashMap::new()),
        };
        group.track();
        // If the watchdog cannot start, drop kills the child again.
        group.watchdog = Some(spawn_watchdog(pgid)?);
        Ok(group)
    }

    /// The leader has exited (it is a zombie, or already reaped). Never reaps.
    fn leader_exited(&self) -> bool {
        self.status.is_some() || read_stat(self.pgid).is_none_or(|s| s.is_dead())
    }

    /// Scans the process table, records the group's members and the descendants of every
    /// process seen so far, and returns the live (non-zombie) ones.
    fn track(&self) -> Vec<Stat> {
        if self.status.is_some() {
            return Vec::new();
        }
        let table = process_table();
        let by_pid: HashMap<i32, &Stat> = table.iter().map(|s| (s.pid, s)).collect();
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for s in &table {
            children.entry(s.ppid).or_default().push(s.pid);
        }
        let mut seen = self.seen.borrow_mut();
        let mut todo: Vec<i32> = seen
            .iter()
            .filter(|(pid, start)| by_pid.get(pid).is_some_and(|s| s.start == **start))
            .map(|(pid, _)| *pid)
            .collect();
        todo.extend(table.iter().filter(|s| s.pgrp == self.pgid).map(|s| s.pid));
        let mut visited = HashSet::new();
        while let Some(pid) = todo.pop() {
            if !visited.insert(pid) {
                continue;
            }
            if let Some(s) = by_pid.get(&pid) {
                seen.insert(pid, s.start);
            }
            todo.extend(children.get(&pid).into_iter().flatten());
        }
        seen.iter()
            .filter_map(|(pid, start)| by_pid.get(pid).filter(|s| s.start == *start))
            .filter(|s| !s.is_dead())
            .map(|s| **s)
            .collect()
    }

    /// Stops (SIGSTOP) every live process of the tree and rescans until all are
    /// [`frozen`], so nothing can fork or leave the group while it is being signalled.
    /// Returns the frozen processes. Gives up after [`KILL_WAIT`] (a process in
    /// uninterruptible sleep stops only when it leaves the kernel).
    fn freeze(&self) -> Vec<Stat> {
        let mut live = Vec::new();
        wait_until(KILL_WAIT, || {
            live = self.track();
            for s in live.iter().filter(|s| !s.is_stopped()) {
                send_signal(s.pid, libc::SIGSTOP);
            }
            frozen(&live)
        });
        live
    }

    fn stop(&mut self, grace: Duration) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let live = self.freeze();
        for s in &live {
            send_signal(s.pid, libc::SIGTERM);
        }
        for s in &live {
            send_signal(s.pid, libc::SIGCONT);
        }
        if !wait_until(grace, || self.track().is_empty()) {
            return self.kill();
        }
        self.reap()
    }

    fn kill(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        wait_until(KILL_WAIT, || {
            for s in self.freeze() {
                send_signal(s.pid, libc::SIGKILL);
            }
            self.track().is_empty()
        });
        self.reap()
    }

    /// Reaps the leader, which must be dead with its whole tree. The watchdog goes first:
    /// until the leader is reaped its pid cannot be reused, so the watchdog can never hit
    /// another process group.
    fn reap(&mut self) -> std::io::Result<ExitStatus> {
        if let Some((mut watchdog, _write_end)) = self.watchdog.take() {
            watchdog.kill()?;
            watchdog.wait()?;
        }
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(status)
    }
}

/// Starts the watchdog of process group `pgid` (see [`Group`]).
fn spawn_watchdog(pgid: i32) -> std::io::Result<(Child, std::io::PipeWriter)> {
    let (read_end, write_end) = std::io::pipe()?;
    let watchdog = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("read _; kill -KILL -{pgid}"))
        .stdin(read_end)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    Ok((watchdog, write_end))
}

/// Whether a tree whose live processes are `live`, each sent SIGSTOP unless stopped, is
/// frozen: every process is stopped, or is in uninterruptible sleep with a stopped child.
/// The latter is a parent inside `vfork` (dash runs commands so, Python's `subprocess`
/// too) whose child was stopped before it could `exec`: the parent shows `D` until the
/// child execs, which a stopped child never does, and then takes its pending SIGSTOP before
/// it runs again.
fn frozen(live: &[Stat]) -> bool {
    live.iter().all(|s| {
        s.is_stopped() || (s.state == 'D' && live.iter().any(|c| c.ppid == s.pid && c.is_stopped()))
    })
}

fn send_signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) takes two integers and touches no memory of ours. Failure (ESRCH: the
    // process is already gone) is expected and ignored.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The fields of `/proc/<pid>/stat` the kit needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    state: char,
    ppid: i32,
    pgrp: i32,
    /// Start time in clock ticks since boot: with the pid, identifies a process.
    start: u64,
}

impl Stat {
    /// Zombie or dead: exited, holding at most a pid until reaped.
    fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Stopped by a signal or a tracer.
    fn is_stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }
}

/// Parses a `/proc/<pid>/stat` line. The command name is in parentheses and may itself
/// contain spaces and parentheses, so the fields are taken after the last `)`.
fn parse_stat(line: &str) -> Option<Stat> {
    let (head, tail) = line.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let fields: Vec<&str> = tail.split_whitespace().collect();
    // Fields 3 (state), 4 (ppid), 5 (pgrp) and 22 (starttime) of proc(5).
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Start time (clock ticks since boot) of the live, non-zombie process `pid`: with the pid,
/// it names one process for good, as a pid alone may be reused.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = read_stat(i32::try_from(pid).ok()?)?;
    (!stat.is_dead()).then_some(stat.start)
}

fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn process_table() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_stat_takes_fields_after_the_last_parenthesis() {
        let rest = "0 0 -1 4194304 1 0 0 0 0 0 0 0 20 0 1 0 777 1000 10";
        let cases = [
            (format!("42 (sleep) S 1 42 {rest}"), Some(('S', 1, 42, 777))),
            (
                format!("7 (salt-minion (x) y) Z 3 5 {rest}"),
                Some(('Z', 3, 5, 777)),
            ),
            (format!("9 (a b) T 2 9 {rest}"), Some(('T', 2, 9, 777))),
            ("9 (a) R 2 9 0".to_owned(), None),
            ("garbage".to_owned(), None),
            (format!("9 (a) R x 9 {rest}"), None),
        ];
        for (line, want) in cases {
            let got = parse_stat(&line).map(|s| (s.state, s.ppid, s.pgrp, s.start));
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn read_stat_sees_this_process() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(!me.is_dead());
    }

    #[test]
    fn run_captures_output_and_status() {
        let out = run(
            "sh",
            ["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn run_with_input_feeds_it_on_stdin_and_run_gives_none() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat; echo end"]);
        let out = run_command_with_input(cmd, b"in\n", Duration::from_secs(30));
        assert_eq!(out.stdout, b"in\nend\n");
        let out = run("sh", ["-c", "cat; echo end"], Duration::from_secs(30));
        assert_eq!(out.stdout, b"end\n");
    }

    #[test]
    fn run_kills_and_panics_on_timeout() {
        let err = std::panic::catch_unwind(|| {
            run(
                "sh",
                ["-c", "echo started; sleep 600"],
                Duration::from_millis(300),
            )
        })
        .unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("still running"), "{msg}");
        assert!(msg.contains("started"), "{msg}");
    }

    #[test]
    fn run_does_not_wait_for_background_grandchildren() {
        // The grandchild keeps the output file open; a pipe-based capture would hang here.
        let out = run(
            "sh",
            ["-c", "sleep 600 & echo done"],
            Duration::from_secs(30),
        );
        assert!(out.status.success());
        assert_eq!(out.stdout, b"done\n");
    }

    #[test]
    fn dropping_a_proc_kills_its_whole_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        // One child in the group, one that escapes into its own session.
        cmd.args(["-c", "sleep 600 & setsid sleep 600 & echo up; wait"]);
        let proc = Proc::spawn(cmd, dir.path(), "tree");
        wait_for_log(proc.stdout_path(), "up", Duration::from_secs(30));
        assert!(wait_until(Duration::from_secs(30), || proc.pids().len() >= 3));
        let before = proc.group.track();
        drop(proc);
        for s in before {
            let now = read_stat(s.pid);
            assert!(
                now.is_none_or(|n| n.is_dead() || n.start != s.start),
                "{now:?} survived"
            );
        }
    }

    #[test]
    fn stop_escalates_to_sigkill_when_sigterm_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; echo up; while :; do sleep 1; done"]);
        let file = File::create(&out).unwrap();
        let mut group = Group::spawn(cmd, Stdio::null(), file.try_clone().unwrap(), file).unwrap();
        wait_for_log(&out, "up", Duration::from_secs(30));
        let pids = group.track();
        let status = group.stop(Duration::from_millis(200)).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        for s in pids {
            assert!(read_stat(s.pid).is_none_or(|now| now.is_dead() || now.start != s.start));
        }
    }

    #[test]
    fn watchdog_kills_the_group_when_the_test_process_dies() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo up; sleep 600"]);
        let mut proc = Proc::spawn(cmd, dir.path(), "orphan");
        wait_for_log(proc.stdout_path(), "up", Duration::from_secs(30));
        let before = proc.group.track();
        // Closing the write end is what the kernel does when this process dies.
        let (mut watchdog, write_end) = proc.group.watchdog.take().unwrap();
        drop(write_end);
        assert!(watchdog.wait().unwrap().success());
        // SIGKILL is delivered asynchronously: the processes die shortly after.
        for s in before {
            let gone = || read_stat(s.pid).is_none_or(|n| n.is_dead() || n.start != s.start);
            assert!(wait_until(Duration::from_secs(30), gone), "{s:?} survived");
        }
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(proc.stop().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn freeze_stops_the_whole_tree_and_thaw_resumes_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 600 & echo up; wait"]);
        let proc = Proc::spawn(cmd, dir.path(), "frozen");
        wait_for_log(proc.stdout_path(), "up", Duration::from_secs(30));
        assert!(wait_until(Duration::from_secs(30), || proc.pids().len() >= 2));
        proc.freeze();
        let tree = proc.group.track();
        assert!(tree.len() >= 2, "{tree:?}");
        assert!(tree.iter().all(Stat::is_stopped), "{tree:?}");
        proc.thaw();
        let resumed = wait_until(Duration::from_secs(30), || {
            proc.group.track().iter().all(|s| !s.is_stopped())
        });
        assert!(resumed, "{:?}", proc.group.track());
        assert!(proc.is_running());
    }

    #[test]
    fn a_tree_is_frozen_when_all_are_stopped_but_a_vfork_parent_of_a_stopped_child() {
        let stat = |pid, state, ppid| Stat {
            pid,
            state,
            ppid,
            pgrp: 10,
            start: 1,
        };
        assert!(frozen(&[stat(10, 'T', 1), stat(11, 'T', 10)]));
        assert!(frozen(&[]));
        // A parent blocked in vfork while its child was stopped before exec.
        assert!(frozen(&[stat(10, 'D', 1), stat(11, 'T', 10)]));
        assert!(!frozen(&[stat(10, 'D', 1), stat(11, 'R', 10)]));
        assert!(!frozen(&[stat(10, 'D', 1), stat(11, 'T', 12)]));
        assert!(!frozen(&[stat(10, 'S', 1), stat(11, 'T', 10)]));
        assert!(!frozen(&[stat(10, 'T', 1), stat(11, 'R', 10)]));
    }

    #[test]
    fn start_time_names_live_processes_only() {
        let me = start_time(std::process::id()).unwrap();
        assert_eq!(Some(me), start_time(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not reaped: a zombie has no start time here.
        assert!(wait_until(Duration::from_secs(30), || start_time(pid).is_none()));
        child.wait().unwrap();
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn wait_exit_returns_status_of_a_finished_child() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 7"]);
        let mut proc = Proc::spawn(cmd, dir.path(), "short");
        let status = proc.wait_exit(Duration::from_secs(30)).unwrap();
        assert_eq!(status.code(), Some(7));
        assert!(!proc.is_running());
    }

    #[test]
    fn spawn_keeps_output_of_earlier_runs() {
        let dir = tempfile::tempdir().unwrap();
        let start = |word: &str| {
            let mut cmd = Command::new("echo");
            cmd.arg(word);
            let mut p = Proc::spawn(cmd, dir.path(), "echo");
            p.wait_exit(Duration::from_secs(30)).unwrap();
            p.stdout()
        };
        assert_eq!(start("one"), "one\n");
        assert_eq!(start("two"), "two\n");
        assert!(dir.path().join("echo.stdout").is_file());
        assert!(dir.path().join("echo-2.stdout").is_file());
    }

    #[test]
    fn wait_for_log_from_skips_earlier_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "ready\n").unwrap();
        let first = wait_for_log(&path, "ready", Duration::from_secs(5));
        assert_eq!(first, 5);
        let err = std::panic::catch_unwind(|| {
            wait_for_log_from(&path, first, "ready", Duration::from_millis(100))
        })
        .unwrap_err();
        assert!(err.downcast_ref::<String>().unwrap().contains("last lines"));
        std::fs::write(&path, "ready\nready again\n").unwrap();
        assert_eq!(
            wait_for_log_from(&path, first, "ready", Duration::from_secs(5)),
            11
        );
    }

    #[test]
    fn wait_until_reports_timeout_as_false() {
        assert!(!wait_until(Duration::from_millis(100), || false));
        let mut n = 0;
        assert!(wait_until(Duration::from_secs(5), || {
            n += 1;
            n == 3
        }));
    }
}
