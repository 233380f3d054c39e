//! `salt/returners/rawfile_json.py`: the return dict as one line of JSON appended to a
//! file on the minion.
//!
//! Option `filename` (`rawfile_json.filename`, default [`DEFAULT_FILENAME`]). The line is
//! `json.dumps(ret)` (see [`crate::json`]) and `\n`, appended under an exclusive
//! `flock` as Salt's `flopen` takes it, so lines of concurrent jobs (and of a stock
//! minion writing the same file) never interleave. A file that cannot be opened or
//! written logs Salt's "Could not write to rawdata_json file %s" (sic) and fails the
//! returner with Python's `OSError` text.
//!
//! Deviation: the line is built before the file is opened and written with one `write`
//! of the whole line, so a return JSON cannot hold (bytes) leaves no partial line behind
//! (Salt's streaming `json.dump` can leave one).

use crate::error::os_error_text;
use crate::options::get_returner_options;
use crate::{json, Error, Host, Returner};
use halite_output::py_type_name;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The file when none is configured.
pub const DEFAULT_FILENAME: &str = "/var/log/salt/events";

pub(crate) const RETURNER: Returner = Returner {
    name: "rawfile_json",
    returner,
};

fn returner(host: &dyn Host, ret: &Value) -> Result<(), Error> {
    let opts = get_returner_options(
        host,
        "rawfile_json",
        ret,
        &["filename"],
        &[("filename", s(DEFAULT_FILENAME))],
    )?;
    let filename = match opts.get("filename") {
        Some(f) => value::str_of(f).ok_or_else(|| {
            Error::Options(format!(
                "rawfile_json filename must be a string, not {}",
                py_type_name(f)
            ))
        })?,
        None => DEFAULT_FILENAME,
    };
    let written = json::dumps(ret).and_then(|mut line| {
        line.push('\n');
        append_locked(Path::new(filename), line.as_bytes())
            .map_err(|e| Error::Io(os_error_text(&e, filename)))
    });
    if written.is_err() {
        tracing::error!("Could not write to rawdata_json file {filename}");
    }
    written
}

/// Appends `bytes` to `path` (created `0666 & ~umask` if missing) under an exclusive
/// `flock`, in one write.
pub fn append_locked(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new().append(true).create(true).open(path)?;
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    // The lock goes with the descriptor when `file` is dropped.
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;
    use halite_proto::value::{bin, map};

    fn ret() -> Value {
        map([
            ("success", Value::Boolean(true)),
            ("return", s("héllo")),
            ("retcode", Value::from(0)),
            ("jid", s("20260101000000000001")),
            ("fun", s("test.echo")),
            ("fun_args", Value::Array(vec![s("héllo")])),
            ("id", s("m1")),
        ])
    }

    #[test]
    fn each_return_is_one_json_line_appended_to_the_configured_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let host = FakeHost::with_opts(map([("rawfile_json.filename", s(path.to_str().unwrap()))]));
        returner(&host, &ret()).unwrap();
        returner(&host, &ret()).unwrap();
        let line = "{\"success\": true, \"return\": \"héllo\", \"retcode\": 0, \"jid\": \"20260101000000000001\", \"fun\": \"test.echo\", \"fun_args\": [\"héllo\"], \"id\": \"m1\"}\n";
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{line}{line}")
        );
    }

    #[test]
    fn ret_kwargs_choose_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kw");
        let host = FakeHost::with_opts(map([("rawfile_json.filename", s("/nonexistent/x"))]));
        let mut r = ret();
        value::set(
            &mut r,
            "ret_kwargs",
            map([("filename", s(path.to_str().unwrap()))]),
        );
        returner(&host, &r).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("}\n"));
    }

    #[test]
    fn an_unwritable_file_or_unencodable_return_fails_and_writes_nothing_partial() {
        let host = FakeHost::with_opts(map([("rawfile_json.filename", s("/nonexistent/x"))]));
        assert_eq!(
            returner(&host, &ret()),
            Err(Error::Io(
                "[Errno 2] No such file or directory: '/nonexistent/x'".into()
            ))
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let host = FakeHost::with_opts(map([("rawfile_json.filename", s(path.to_str().unwrap()))]));
        let mut r = ret();
        value::set(&mut r, "return", bin(vec![0u8, 1]));
        assert_eq!(
            returner(&host, &r),
            Err(Error::Json(
                "Object of type bytes is not JSON serializable".into()
            ))
        );
        assert!(!path.exists());
    }

    #[test]
    fn concurrent_appends_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let big = "x".repeat(100_000);
        std::thread::scope(|scope| {
            for n in 0..8 {
                let (path, line) = (&path, format!("{n}{big}\n"));
                scope.spawn(move || {
                    for _ in 0..10 {
                        append_locked(path, line.as_bytes()).unwrap();
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 80);
        assert!(lines
            .iter()
            .all(|l| l.len() == big.len() + 1 && l[1..] == big));
    }
}
