//! Job returns kept on disk while the minion stops, and sent at the next start (a Halite
//! extension: Salt loses a return its master did not take before the minion exited).
//!
//! A return that could not be sent during the shutdown wait ([`crate::jobs`]) is written
//! to `cachedir/halite_returns/<jid>` (mode 0600: returns may hold secrets), as msgpack
//! `{"master": <master entry as configured>, "load": <the _return load>}`. When the
//! minion next connects to that master, a thread sends the kept returns in jid order and
//! removes each one the master took; the first failure ends the round (the rest wait for
//! the next connection). Returns kept for a master no longer configured stay where they
//! are.
//!
//! Only plain job ids become file names; a file that does not decode is left alone and
//! logged.

use crate::Error;
use halite_proto::value::{self, map, s};
use halite_proto::Value;
use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The directory under `cachedir` that holds kept returns.
pub const SPOOL_DIR: &str = "halite_returns";

/// Kept job returns.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// Masters whose kept returns are being sent now.
    sending: Mutex<HashSet<String>>,
}

/// Marks `master` as being sent to until dropped.
struct Sending<'a> {
    spool: &'a Spool,
    master: String,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.spool
            .sending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.master);
    }
}

impl Spool {
    /// The spool of the minion whose cache is `cachedir`.
    pub fn new(cachedir: &Path) -> Spool {
        Spool {
            dir: cachedir.join(SPOOL_DIR),
            sending: Mutex::new(HashSet::new()),
        }
    }

    /// Keeps the `_return` `load` of job `jid` for `master`; returns the file written.
    pub fn keep(&self, jid: &str, master: &str, load: &Value) -> Result<PathBuf, Error> {
        if !halite_proto::auth::valid_id(jid) {
            return Err(Error::Io {
                what: "cannot keep the return of job",
                path: PathBuf::from(jid),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the job id is not a plain name",
                ),
            });
        }
        let io = |what: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| Error::Io { what, path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("cannot create", &self.dir))?;
        let path = self.dir.join(jid);
        let tmp = self.dir.join(format!(".{jid}.tmp"));
        let body = value::encode(&map([("master", s(master)), ("load", load.clone())]));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("cannot write", &tmp))?;
        file.write_all(&body)
            .and_then(|()| file.sync_all())
            .map_err(io("cannot write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("cannot write", &path))?;
        Ok(path)
    }

    /// The returns kept for `master`, in jid order: file and `_return` load.
    pub fn kept(&self, master: &str) -> Vec<(PathBuf, Value)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut kept = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let decoded = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| value::decode(&b).map_err(|e| e.to_string()));
            let doc = match decoded {
                Ok(doc) => doc,
                Err(e) => {
                    tracing::warn!("Cannot read the kept return {}: {e}", path.display());
                    continue;
                }
            };
            match (value::get_str(&doc, "master"), value::get(&doc, "load")) {
                (Some(m), Some(load @ Value::Map(_))) if m == master => {
                    kept.push((path, load.clone()))
                }
                (Some(_), Some(Value::Map(_))) => {}
                _ => tracing::warn!("The kept return {} is not one", path.display()),
            }
        }
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        kept
    }

    /// Sends the returns kept for `master` with `send`, removing each one sent; stops at
    /// the first failure. Does nothing while another thread sends to `master`. Returns
    /// how many were sent.
    pub fn send_kept(&self, master: &str, send: &dyn Fn(&Value) -> Result<(), Error>) -> usize {
        let _sending = {
            let mut sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
            if !sending.insert(master.to_owned()) {
                return 0;
            }
            Sending {
                spool: self,
                master: master.to_owned(),
            }
        };
        let mut sent = 0;
        for (path, load) in self.kept(master) {
            let jid = value::get(&load, "jid").and_then(crate::jobs::jid_text);
            let jid = jid.as_deref().unwrap_or("?");
            match send(&load) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&path);
                    tracing::info!(
                        "Returned job {jid}, kept since the last shutdown, to master {master}"
                    );
                    sent += 1;
                }
                Err(e) => {
                    tracing::info!("Kept returns for master {master} wait for the next connection: job {jid}: {e}");
                    break;
                }
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn ret(jid: &str) -> Value {
        map([
            ("cmd", s("_return")),
            ("jid", s(jid)),
            ("return", s("done")),
        ])
    }

    #[test]
    fn kept_returns_are_private_and_sent_to_their_master_in_order_once() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        assert!(spool.kept("m1").is_empty(), "no directory yet");
        let p2 = spool.keep("20260101000000000002", "m1", &ret("2")).unwrap();
        spool.keep("20260101000000000001", "m1", &ret("1")).unwrap();
        spool.keep("20260101000000000003", "m2", &ret("3")).unwrap();
        assert_eq!(
            std::fs::metadata(&p2).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let loads: Vec<Value> = spool.kept("m1").into_iter().map(|(_, l)| l).collect();
        assert_eq!(loads, [ret("1"), ret("2")]);

        // The first failure ends the round; nothing is lost.
        let failing = |_: &Value| -> Result<(), Error> { Err(Error::Stopped) };
        assert_eq!(spool.send_kept("m1", &failing), 0);
        assert_eq!(spool.kept("m1").len(), 2);

        let got = Mutex::new(Vec::new());
        let record = |l: &Value| -> Result<(), Error> {
            got.lock().unwrap().push(l.clone());
            Ok(())
        };
        assert_eq!(spool.send_kept("m1", &record), 2);
        assert_eq!(*got.lock().unwrap(), [ret("1"), ret("2")]);
        assert!(spool.kept("m1").is_empty());
        assert_eq!(spool.send_kept("m1", &record), 0, "sent twice");
        // Another master's return stays for it.
        assert_eq!(spool.kept("m2").len(), 1);
    }

    #[test]
    fn only_plain_job_ids_name_files_and_bad_files_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        assert!(spool.keep("../evil", "m1", &ret("x")).is_err());
        assert!(spool.keep("..", "m1", &ret("x")).is_err());
        std::fs::create_dir_all(dir.path().join(SPOOL_DIR)).unwrap();
        std::fs::write(dir.path().join(SPOOL_DIR).join("garbage"), b"\xc1").unwrap();
        spool.keep("1", "m1", &ret("1")).unwrap();
        assert_eq!(spool.kept("m1").len(), 1);
    }

    #[test]
    fn a_master_is_sent_to_by_one_thread_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        spool.keep("1", "m1", &ret("1")).unwrap();
        let nested = |_: &Value| -> Result<(), Error> {
            // A second round for the same master while this one runs does nothing.
            assert_eq!(spool.send_kept("m1", &|_| Ok(())), 0);
            Ok(())
        };
        assert_eq!(spool.send_kept("m1", &nested), 1);
    }
}
