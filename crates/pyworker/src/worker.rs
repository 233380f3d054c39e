//! One child Python process with a framed stdin/stdout pipe.

use crate::frame::{read_frame, write_frame};
use crate::Error;
use rmpv::Value;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest script text (with [`PRELUDE`]) one `-c` argument may carry: Linux's
/// `MAX_ARG_STRLEN` (32 pages) less the terminating NUL.
pub(crate) const MAX_SCRIPT: usize = 32 * 4096 - 1;

/// Run before the script: `-c` puts the current directory first on `sys.path`; it is
/// removed so nothing is imported from the daemon's working directory.
const PRELUDE: &str =
    "import sys as _hw_sys\nif _hw_sys.path and _hw_sys.path[0] == '':\n    del _hw_sys.path[0]\ndel _hw_sys\n";

/// A stderr line longer than this is logged in pieces.
const MAX_LOG_LINE: u64 = 16 * 1024;

/// A child Python process running a script (given as text) with stdin/stdout piped for
/// frames and stderr logged through `tracing` line by line under its name. Dropping it
/// kills its process group (`SIGKILL`) and reaps the child.
///
/// The child is the leader of a new process group, so whatever it starts is killed with
/// it, and a terminal's Ctrl-C reaches the owner, which decides.
#[derive(Debug)]
pub struct Worker {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    broken: bool,
}

impl Worker {
    /// Starts `python -c <script> <args...>` with `env` added to the inherited
    /// environment. `name` labels its log lines and errors. The script reads frames from
    /// stdin and writes frames to stdout (see [`crate::FRAMING_PY`]).
    pub fn spawn(
        python: &Path,
        name: &str,
        script: &str,
        args: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<Worker, Error> {
        let text = format!("{PRELUDE}{script}");
        if text.len() > MAX_SCRIPT {
            return Err(Error::ScriptTooLong(text.len()));
        }
        let mut child = Command::new(python)
            .arg("-c")
            .arg(text)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(Error::io(format!(
                "starting {name} with {}",
                python.display()
            )))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_and_reap(&mut child);
            return Err(Error::Io {
                what: format!("starting {name}"),
                source: std::io::Error::other("the child's pipes are missing"),
            });
        };
        let pid = child.id();
        let log_name = name.to_owned();
        let logger = std::thread::Builder::new()
            .name(format!("{name}-stderr"))
            .spawn(move || log_stderr(&log_name, pid, stderr));
        if let Err(e) = logger {
            kill_and_reap(&mut child);
            return Err(Error::io(format!("starting the log thread of {name}"))(e));
        }
        tracing::debug!(worker = name, pid, "Started {}", python.display());
        Ok(Worker {
            name: name.to_owned(),
            child,
            stdin,
            stdout,
            broken: false,
        })
    }

    /// The child's process id (valid, never reused, while this `Worker` exists).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at [`Worker::spawn`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second writer on the child's stdin, for a multiplexed protocol: other threads
    /// send frames with [`write_frame`] through it while one thread waits in
    /// [`Worker::recv`]. The caller keeps frames whole (one writer at a time). The child
    /// sees the end of its stdin only once this handle and the `Worker` are both gone.
    pub fn stdin_writer(&self) -> Result<std::fs::File, Error> {
        use std::os::fd::AsFd;
        let fd = self
            .stdin
            .as_fd()
            .try_clone_to_owned()
            .map_err(Error::io(format!("duplicating the stdin of {}", self.name)))?;
        Ok(std::fs::File::from(fd))
    }

    /// Sends one frame.
    pub fn send(&mut self, v: &Value) -> Result<(), Error> {
        if self.broken {
            return Err(Error::Broken(self.name.clone()));
        }
        write_frame(&mut self.stdin, v).map_err(|e| {
            self.broken = true;
            Error::io(format!("sending to {}", self.name))(e)
        })
    }

    /// Receives one frame of at most `max` bytes, waiting as long as it takes; `Ok(None)`
    /// when the child closed its stdout (it exited) between frames.
    pub fn recv(&mut self, max: usize) -> Result<Option<Value>, Error> {
        self.receive(max, None)
    }

    /// [`Worker::recv`] with a deadline: [`Error::Timeout`] when no complete frame arrived
    /// within `timeout` (the worker is then unusable: drop it).
    pub fn recv_timeout(&mut self, max: usize, timeout: Duration) -> Result<Option<Value>, Error> {
        self.receive(max, Some(timeout))
    }

    fn receive(&mut self, max: usize, timeout: Option<Duration>) -> Result<Option<Value>, Error> {
        if self.broken {
            return Err(Error::Broken(self.name.clone()));
        }
        let mut reader = DeadlineReader {
            inner: &mut self.stdout,
            deadline: timeout.map(|t| Instant::now() + t),
        };
        match read_frame(&mut reader, max) {
            Ok(v) => Ok(v),
            Err(Error::Io { source, .. }) if source.kind() == ErrorKind::TimedOut => {
                self.broken = true;
                Err(Error::Timeout(timeout.unwrap_or_default()))
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// Kills the child's process group, then the child (should the group be gone), and waits.
fn kill_and_reap(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) has no memory-safety preconditions. The child is not yet reaped,
        // so its pid (the group id) cannot have been reused.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    if let Err(e) = child.wait() {
        tracing::warn!(pid = child.id(), "A Python worker could not be reaped: {e}");
    }
}

/// A reader that fails with `TimedOut` once its deadline passes (no deadline: plain reads).
struct DeadlineReader<'a> {
    inner: &'a mut ChildStdout,
    deadline: Option<Instant>,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(deadline) = self.deadline {
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::Error::new(ErrorKind::TimedOut, "deadline passed"));
                }
                let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
                let mut pfd = libc::pollfd {
                    fd: self.inner.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, the count says one.
                let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
                if rc > 0 {
                    break;
                }
                if rc < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        self.inner.read(buf)
    }
}

/// Logs the child's stderr line by line until it closes. Lines in Salt's console format
/// (`[ERROR   ] message`) are logged at their level, and the lines that follow one without
/// such a prefix (a traceback logged with the record) at the same level; anything before
/// the first record (a print, an interpreter error) at `warn`.
fn log_stderr(name: &str, pid: u32, stderr: ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut level = Level::Warn;
    loop {
        line.clear();
        match reader
            .by_ref()
            .take(MAX_LOG_LINE)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(worker = name, pid, "stderr: {e}");
                return;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            continue;
        }
        let message = match salt_level(text) {
            Some((named, message)) => {
                level = named;
                message
            }
            None => text,
        };
        match level {
            Level::Error => tracing::error!(worker = name, pid, "{message}"),
            Level::Warn => tracing::warn!(worker = name, pid, "{message}"),
            Level::Info => tracing::info!(worker = name, pid, "{message}"),
            Level::Debug => tracing::debug!(worker = name, pid, "{message}"),
            Level::Trace => tracing::trace!(worker = name, pid, "{message}"),
        }
    }
}

/// The `tracing` level of a Salt log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// Splits Salt's console prefix `[LEVEL   ] ` off a line: its level and the message.
fn salt_level(text: &str) -> Option<(Level, &str)> {
    let rest = text.strip_prefix('[')?;
    let (inside, message) = rest.split_once(']')?;
    let level = match inside.trim_end() {
        "CRITICAL" | "ERROR" => Level::Error,
        "WARNING" => Level::Warn,
        "INFO" => Level::Info,
        "DEBUG" | "PROFILE" => Level::Debug,
        "TRACE" | "GARBAGE" | "ALL" => Level::Trace,
        _ => return None,
    };
    Some((level, message.strip_prefix(' ').unwrap_or(message)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FRAMING_PY;
    use halite_proto::value::{bin, map, s};
    use std::path::PathBuf;

    fn python() -> PathBuf {
        halite_testkit::salt_venv().join("bin").join("python3")
    }

    /// A script that answers every frame with `{"echo": frame, "argv": sys.argv[1:]}`.
    fn echo_script() -> String {
        format!(
            "{FRAMING_PY}\nimport sys\ninp, out = take_frame_streams()\n\
             print('a stray print goes to stderr')\n\
             while True:\n    v = read_frame(inp)\n    if v is None:\n        break\n    \
             write_frame(out, {{'echo': v, 'argv': sys.argv[1:]}})\n"
        )
    }

    fn pid_alive(pid: u32) -> bool {
        // A reaped child's /proc entry is gone; a zombie's state is Z.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    #[test]
    fn a_worker_answers_frames_with_strings_bytes_and_arguments_intact() {
        let mut w = Worker::spawn(
            &python(),
            "echo",
            &echo_script(),
            &[OsString::from("--flag"), OsString::from("x")],
            &[],
        )
        .unwrap();
        for v in [
            map([("text", s("héllo")), ("blob", bin(vec![0u8, 255, 1]))]),
            Value::Array(vec![Value::from(1), Value::Nil, Value::from(2.5)]),
        ] {
            w.send(&v).unwrap();
            let back = w
                .recv_timeout(1 << 20, Duration::from_secs(30))
                .unwrap()
                .unwrap();
            assert_eq!(halite_proto::value::get(&back, "echo"), Some(&v));
            assert_eq!(
                halite_proto::value::get(&back, "argv"),
                Some(&Value::Array(vec![s("--flag"), s("x")]))
            );
        }
    }

    #[test]
    fn frames_sent_through_a_second_stdin_writer_from_another_thread_are_answered() {
        let mut w = Worker::spawn(&python(), "echo", &echo_script(), &[], &[]).unwrap();
        let mut writer = w.stdin_writer().unwrap();
        let sender = std::thread::spawn(move || {
            for n in 0..3 {
                write_frame(&mut writer, &Value::from(n)).unwrap();
            }
        });
        for n in 0..3 {
            let back = w
                .recv_timeout(1 << 20, Duration::from_secs(30))
                .unwrap()
                .unwrap();
            assert_eq!(
                halite_proto::value::get(&back, "echo"),
                Some(&Value::from(n))
            );
        }
        sender.join().unwrap();
    }

    #[test]
    fn a_str_that_is_not_utf8_reaches_python_as_its_bytes_and_comes_back_as_them() {
        // As Salt's own decoding makes it (`decode_embedded_strs` keeps such a str bytes).
        let mut w = Worker::spawn(&python(), "echo", &echo_script(), &[], &[]).unwrap();
        let odd = halite_proto::value::decode(&[0xa2, b'a', 0xff]).unwrap();
        w.send(&odd).unwrap();
        let back = w
            .recv_timeout(1 << 20, Duration::from_secs(30))
            .unwrap()
            .unwrap();
        let echo = halite_proto::value::get(&back, "echo").unwrap();
        assert_eq!(halite_proto::value::bytes_of(echo), Some(&b"a\xff"[..]));
    }

    #[test]
    fn the_environment_given_reaches_the_script() {
        let script = format!(
            "{FRAMING_PY}\nimport os\ninp, out = take_frame_streams()\n\
             write_frame(out, os.environ.get('HALITE_TEST_VALUE'))\n"
        );
        let mut w = Worker::spawn(
            &python(),
            "env",
            &script,
            &[],
            &[(OsString::from("HALITE_TEST_VALUE"), OsString::from("42"))],
        )
        .unwrap();
        assert_eq!(w.recv(64).unwrap(), Some(s("42")));
        assert_eq!(w.recv(64).unwrap(), None, "then the script exits: EOF");
    }

    #[test]
    fn a_worker_that_dies_gives_eof_then_refuses_to_send() {
        let script = "import os\nos._exit(7)\n";
        let mut w = Worker::spawn(&python(), "dies", script, &[], &[]).unwrap();
        assert_eq!(w.recv(64).unwrap(), None);
        // The pipe is closed: sending fails (EPIPE), never panics.
        let mut failed = false;
        for _ in 0..4 {
            if w.send(&bin(vec![0u8; 1 << 16])).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
        assert!(matches!(w.send(&Value::Nil), Err(Error::Broken(_))));
    }

    #[test]
    fn a_silent_worker_times_out_and_is_killed_and_reaped_on_drop() {
        let script =
            "import time, subprocess\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)\n";
        let mut w = Worker::spawn(&python(), "silent", script, &[], &[]).unwrap();
        let pid = w.pid();
        let err = w.recv_timeout(64, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert!(matches!(w.recv(64), Err(Error::Broken(_))));
        assert!(pid_alive(pid));
        drop(w);
        assert!(!pid_alive(pid), "the worker is gone after drop");
        // Its child (same process group) is killed too; the signal to the group is
        // delivered asynchronously, so the child may take a moment to die.
        let group_alive = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                        let fields: Vec<&str> = stat
                            .rsplit_once(')')
                            .map(|(_, r)| r.split_whitespace().collect())
                            .unwrap_or_default();
                        fields.get(2) == Some(&pid.to_string().as_str())
                            && fields.first() != Some(&"Z")
                    })
                })
                .count()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut group_left = group_alive();
        while group_left > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            group_left = group_alive();
        }
        assert_eq!(
            group_left, 0,
            "nothing of the worker's process group survives"
        );
    }

    #[test]
    fn garbage_on_stdout_is_a_frame_error_not_a_panic() {
        let script = "import sys\nsys.stdout.buffer.write(b'\\x00\\x00\\x00\\x02\\xc1\\xc1')\nsys.stdout.flush()\nimport time\ntime.sleep(30)\n";
        let mut w = Worker::spawn(&python(), "garbage", script, &[], &[]).unwrap();
        let err = w.recv_timeout(64, Duration::from_secs(30)).unwrap_err();
        assert!(matches!(err, Error::BadFrame(_)), "{err}");
        let script = "import sys\nsys.stdout.buffer.write(b'\\x7f\\xff\\xff\\xff')\nsys.stdout.flush()\nimport time\ntime.sleep(30)\n";
        let mut w = Worker::spawn(&python(), "huge", script, &[], &[]).unwrap();
        let err = w.recv_timeout(1024, Duration::from_secs(30)).unwrap_err();
        assert!(matches!(err, Error::FrameTooLarge { .. }), "{err}");
    }

    #[test]
    fn a_missing_interpreter_is_an_io_error_naming_it() {
        let err = Worker::spawn(Path::new("/nonexistent/python3"), "w", "", &[], &[]).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/python3"), "{err}");
    }

    #[test]
    fn an_overlong_script_is_refused() {
        let script = "#".repeat(MAX_SCRIPT);
        let err = Worker::spawn(&python(), "long", &script, &[], &[]).unwrap_err();
        assert!(matches!(err, Error::ScriptTooLong(_)), "{err}");
    }

    #[test]
    fn salt_console_prefixes_give_the_level() {
        assert_eq!(
            salt_level("[ERROR   ] it broke"),
            Some((Level::Error, "it broke"))
        );
        assert_eq!(
            salt_level("[CRITICAL] Pillar render error: x"),
            Some((Level::Error, "Pillar render error: x"))
        );
        assert_eq!(salt_level("[DEBUG   ] d"), Some((Level::Debug, "d")));
        assert_eq!(salt_level("Traceback (most recent call last):"), None);
        assert_eq!(salt_level("[1, 2]"), None);
    }
}
