//! Salt's `local_cache` returner layout, written so stock Salt tools read Halite's jobs.
//!
//! For a jid, `h = hashlib.<hash_type>(jid).hexdigest()` and the job directory is
//! `cachedir/jobs/<h[:2]>/<h[2:]>/` holding:
//!
//! * `jid` — the jid as text; its mtime is the job's age for `clean_old_jobs`;
//! * `.load.p` — msgpack of the publish load;
//! * `.minions.p` — msgpack of the sorted expected-minion list;
//! * `<minion id>/return.p` — msgpack `{return, retcode, success}` (the keys present);
//! * `<minion id>/out.p` — msgpack of the return's `out` (outputter), when present.
//!
//! msgpack is Salt's `payload.dump` (`use_bin_type=True`). Every file is written to a
//! `.___atomic_write*` temporary in the same directory, fsynced and renamed over the target,
//! as `salt.utils.atomicfile.atomic_open` does; files get `0o666 & ~umask` (or the replaced
//! file's mode) and directories `0o777 & ~umask`, as Salt's. Salt also chowns the temporary
//! to the replaced file's owner; this writer does not (it runs as the cache's owner).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::UNIX_EPOCH;

use openssl::hash::MessageDigest;
use rmpv::Value;

use crate::value::{decode, encode, get, text};
use crate::{Error, Result, ReturnStatus};

const LOAD_P: &str = ".load.p";
const MINIONS_P: &str = ".minions.p";
const RETURN_P: &str = "return.p";
const OUT_P: &str = "out.p";
const JID_FILE: &str = "jid";
const TEMP_PREFIX: &str = ".___atomic_write";

/// The master's `hash_type`, which names job directories. Salt's default is `sha256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashType {
    /// `md5`
    Md5,
    /// `sha1`
    Sha1,
    /// `sha224`
    Sha224,
    /// `sha256` (Salt's default)
    #[default]
    Sha256,
    /// `sha384`
    Sha384,
    /// `sha512`
    Sha512,
}

impl HashType {
    /// The name Salt's config uses (`hashlib` name).
    pub fn name(self) -> &'static str {
        match self {
            HashType::Md5 => "md5",
            HashType::Sha1 => "sha1",
            HashType::Sha224 => "sha224",
            HashType::Sha256 => "sha256",
            HashType::Sha384 => "sha384",
            HashType::Sha512 => "sha512",
        }
    }

    fn digest(self) -> MessageDigest {
        match self {
            HashType::Md5 => MessageDigest::md5(),
            HashType::Sha1 => MessageDigest::sha1(),
            HashType::Sha224 => MessageDigest::sha224(),
            HashType::Sha256 => MessageDigest::sha256(),
            HashType::Sha384 => MessageDigest::sha384(),
            HashType::Sha512 => MessageDigest::sha512(),
        }
    }
}

impl FromStr for HashType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        [
            HashType::Md5,
            HashType::Sha1,
            HashType::Sha224,
            HashType::Sha256,
            HashType::Sha384,
            HashType::Sha512,
        ]
        .into_iter()
        .find(|h| h.name() == s)
        .ok_or_else(|| Error::UnsupportedHashType(s.to_string()))
    }
}

/// Writes jobs into Salt's `local_cache` tree under a master `cachedir`.
///
/// It holds no state besides the paths, so any number of writers (threads or processes)
/// may share one tree, as Salt's own processes do.
#[derive(Debug, Clone)]
pub struct LocalCacheWriter {
    jobs_dir: PathBuf,
    hash_type: HashType,
}

impl LocalCacheWriter {
    /// A writer for `cachedir/jobs`, naming job directories with `hash_type`.
    pub fn new(cachedir: impl AsRef<Path>, hash_type: HashType) -> Self {
        LocalCacheWriter {
            jobs_dir: cachedir.as_ref().join("jobs"),
            hash_type,
        }
    }

    /// `cachedir/jobs`.
    pub fn jobs_dir(&self) -> &Path {
        &self.jobs_dir
    }

    /// The job directory of `jid` (Salt's `salt.utils.jid.jid_dir`).
    pub fn jid_dir(&self, jid: &str) -> Result<PathBuf> {
        let digest = openssl::hash::hash(self.hash_type.digest(), jid.as_bytes())?;
        let hex = hex::encode(digest);
        let (head, tail) = hex.split_at(2);
        Ok(self.jobs_dir.join(head).join(tail))
    }

    /// Writes a published job: Salt's `prep_jid` (`jid` file, only if absent so the job's
    /// age is kept) then `save_load` (`.load.p`, and `.minions.p` merged with any existing
    /// list).
    ///
    /// Deviation: Salt writes `.minions.p` only when the load has a non-empty `tgt`, and its
    /// own `get_load` then raises on the missing file; this always writes it (possibly
    /// empty), so stock tools can read every job written here.
    pub fn write_load(&self, jid: &str, load: &Value, minions: &[String]) -> Result<()> {
        let dir = self.prep_jid(jid)?;
        write_atomic(&dir.join(LOAD_P), &encode(load)?)?;
        self.merge_minions(&dir, minions)
    }

    /// Salt's `prep_jid` for a known jid: the job directory and its `jid` file (written
    /// only if absent, so the job's age is kept). Answers the directory.
    pub fn prep_jid(&self, jid: &str) -> Result<PathBuf> {
        let dir = self.jid_dir(jid)?;
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let jid_file = dir.join(JID_FILE);
        if !jid_file.exists() {
            write_atomic(&jid_file, jid.as_bytes())?;
        }
        Ok(dir)
    }

    /// Salt's `save_minions`: the sorted union of the existing `.minions.p` (ignored when
    /// unreadable, as Salt does) and `minions`.
    fn merge_minions(&self, dir: &Path, minions: &[String]) -> Result<()> {
        let path = dir.join(MINIONS_P);
        let mut all: Vec<Value> = match fs::read(&path) {
            Ok(bytes) => match decode(&bytes, &|| path.display().to_string()) {
                Ok(Value::Array(items)) => items
                    .into_iter()
                    .filter(|v| matches!(v, Value::String(_)))
                    .collect(),
                Ok(_) | Err(_) => {
                    tracing::warn!(path = %path.display(), "Ignoring unreadable minion list");
                    Vec::new()
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_at(&path)(e)),
        };
        all.extend(minions.iter().map(|m| text(m)));
        // Python sorts str by code point, which is the byte order of UTF-8.
        all.sort_by(|a, b| {
            a.as_str()
                .map(str::as_bytes)
                .cmp(&b.as_str().map(str::as_bytes))
        });
        all.dedup();
        write_atomic(&path, &encode(&Value::Array(all))?)
    }

    /// Writes one minion's return as Salt's `local_cache.returner`: `return.p` with the
    /// `return`, `retcode` and `success` of `ret_load`, and `out.p` when it has `out`.
    ///
    /// If the minion already has a directory for this jid the return is a
    /// [`ReturnStatus::Duplicate`] and nothing is written (the first return is kept). A jid
    /// that was never written still gets the return, as in Salt. Allocating a jid for a
    /// minion's `"req"` jid is the caller's job. A minion id that Salt's `valid_id` would
    /// refuse is [`Error::InvalidMinionId`].
    pub fn write_return(
        &self,
        jid: &str,
        minion_id: &str,
        ret_load: &Value,
    ) -> Result<ReturnStatus> {
        self.write_return_in(&self.jid_dir(jid)?, jid, minion_id, ret_load)
    }

    /// [`write_return`](Self::write_return) into `dir`, which must be
    /// [`jid_dir(jid)`](Self::jid_dir): a caller writing many returns of one job hashes its
    /// jid once.
    pub fn write_return_in(
        &self,
        dir: &Path,
        jid: &str,
        minion_id: &str,
        ret_load: &Value,
    ) -> Result<ReturnStatus> {
        if !is_valid_minion_dir(minion_id) {
            return Err(Error::InvalidMinionId(minion_id.to_string()));
        }
        let minion_dir = dir.join(minion_id);
        // The job directory nearly always exists (its load was written at publish): try
        // the minion's directory first and make the job's only when that says it is
        // missing, one `mkdir` per return instead of three system calls. A job made here
        // (a return for a jid with no load) gets its `jid` file, as Salt's `prep_jid` with
        // the passed jid gives it: without one, `clean_old_jobs` takes the directory for a
        // half-written entry and removes it.
        let created = match fs::create_dir(&minion_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.prep_jid(jid)?;
                fs::create_dir(&minion_dir)
            }
            other => other,
        };
        match created {
            Ok(()) => {}
            // A directory without a whole `return.p` is a return cut short (the master
            // died while writing it): it is written again.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && cut_short(&minion_dir) => {
                fs::remove_dir_all(&minion_dir).map_err(io_at(&minion_dir))?;
                fs::create_dir(&minion_dir).map_err(io_at(&minion_dir))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                tracing::debug!(jid, minion_id, "Duplicate return ignored");
                return Ok(ReturnStatus::Duplicate);
            }
            Err(e) => return Err(io_at(&minion_dir)(e)),
        }
        let record: Vec<(Value, Value)> = ["return", "retcode", "success"]
            .into_iter()
            .filter_map(|key| get(ret_load, key).map(|v| (text(key), v.clone())))
            .collect();
        // The minion directory was created just now by this call, so nobody else writes
        // in it: the files are written in place, as Salt's `local_cache.returner` does (no
        // temporary and rename, which cost a third of a 10,000-minion publish here).
        let written = encode(&Value::Map(record))
            .and_then(|bytes| write_new(&minion_dir.join(RETURN_P), &bytes))
            .and_then(|()| match get(ret_load, "out") {
                Some(out) => write_new(&minion_dir.join(OUT_P), &encode(out)?),
                None => Ok(()),
            });
        if let Err(e) = written {
            // Half a return would read as a duplicate next time: take the directory away
            // so the same return can be written again once the file system takes it.
            if let Err(rm) = fs::remove_dir_all(&minion_dir) {
                tracing::warn!(path = %minion_dir.display(), error = %rm, "Cannot remove a half-written return");
            }
            return Err(e);
        }
        Ok(ReturnStatus::Stored)
    }

    /// Salt's `clean_old_jobs`: removes each job directory whose `jid` file is older than
    /// `keep_jobs_seconds` at `now` (`now - mtime > keep`), every job directory without a
    /// `jid` file (a half-written or corrupt entry), and empty hash-prefix directories older
    /// than `keep_jobs_seconds`. `keep_jobs_seconds == 0` keeps everything. Answers how many
    /// job directories were removed.
    ///
    /// As in Salt, an entry that cannot be inspected or removed is logged and skipped; only
    /// an unreadable `cachedir/jobs` is an error. Stray files where directories belong are
    /// left alone (Salt's `listdir` on them would raise).
    pub fn clean_expired(&self, now: u64, keep_jobs_seconds: u64) -> Result<usize> {
        if keep_jobs_seconds == 0 {
            return Ok(0);
        }
        let tops = match fs::read_dir(&self.jobs_dir) {
            Ok(tops) => tops,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_at(&self.jobs_dir)(e)),
        };
        let expired = |path: &Path| -> Option<bool> {
            let mtime = fs::metadata(path).and_then(|m| m.modified()).ok()?;
            let secs = mtime.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            Some(now.saturating_sub(secs) > keep_jobs_seconds)
        };
        let mut removed = 0;
        let mut empty_tops = Vec::new();
        for top in tops {
            let Ok(top) = top.map(|t| t.path()) else {
                continue;
            };
            if !top.is_dir() {
                continue;
            }
            let finals = match fs::read_dir(&top) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .collect::<Vec<_>>(),
                Err(e) => {
                    tracing::warn!(path = %top.display(), error = %e, "Cannot list job directory");
                    continue;
                }
            };
            if finals.is_empty() {
                empty_tops.push(top);
                continue;
            }
            for job_dir in finals {
                if !job_dir.is_dir() {
                    continue;
                }
                let jid_file = job_dir.join(JID_FILE);
                let remove = !jid_file.is_file() || expired(&jid_file) == Some(true);
                if remove && remove_dir_logged(&job_dir) {
                    removed += 1;
                }
            }
        }
        for top in empty_tops {
            if expired(&top) == Some(true) {
                remove_dir_logged(&top);
            }
        }
        Ok(removed)
    }
}

/// Salt's `valid_id` path rules: the id must be one plain path component.
fn is_valid_minion_dir(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\\', '\0'])
}

fn remove_dir_logged(path: &Path) -> bool {
    match fs::remove_dir_all(path) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "Unable to remove job directory");
            false
        }
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `path` (which must not exist) holding `bytes`.
/// Whether the return in `minion_dir` was cut short: no `return.p`, or one that does not
/// decode (the writer died between creating and filling it).
fn cut_short(minion_dir: &Path) -> bool {
    let path = minion_dir.join(RETURN_P);
    match fs::read(&path) {
        Ok(bytes) => decode(&bytes, &|| path.display().to_string()).is_err(),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(io_at(path))
}

/// Writes `bytes` to `path` through a temporary in the same directory and a rename, so
/// readers see the old file or the whole new one. Not fsynced: this tree is the copy kept
/// for Salt's tools (Salt does not fsync it either); the redb job store is the durable one,
/// and a sync per return was the largest cost of a 5,000-minion publish.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (tmp, mut file) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!("{TEMP_PREFIX}{:x}_{n:x}", std::process::id()));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_at(&tmp)(e)),
        }
    };
    let result = (|| {
        file.write_all(bytes)?;
        drop(file);
        if let Ok(existing) = fs::metadata(path) {
            fs::set_permissions(&tmp, existing.permissions())?;
        }
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_at(path)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, SystemTime};

    const JID: &str = "20240101120000123456";

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(pairs.iter().map(|(k, v)| (text(k), v.clone())).collect())
    }

    fn writer() -> (tempfile::TempDir, LocalCacheWriter) {
        let dir = tempfile::tempdir().unwrap();
        let w = LocalCacheWriter::new(dir.path(), HashType::Sha256);
        (dir, w)
    }

    fn read(path: &Path) -> Value {
        decode(&fs::read(path).unwrap(), &|| path.display().to_string()).unwrap()
    }

    fn set_mtime(path: &Path, unix: u64) {
        // A read-only handle works for files and directories alike (the owner may set times).
        let f = fs::File::open(path).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(unix))
            .unwrap();
    }

    fn load(tgt: Value) -> Value {
        map(&[("fun", text("test.ping")), ("tgt", tgt), ("jid", text(JID))])
    }

    #[test]
    fn jid_dir_matches_salt_example() {
        // sha256(jid), as salt.utils.jid.jid_dir computes it.
        let (dir, w) = writer();
        let got = w.jid_dir(JID).unwrap();
        let want = dir
            .path()
            .join("jobs/58/5273daa2f3a52f4806744200f8c49c6e24511b2516d8647c7f2c0a1e12df00");
        assert_eq!(got, want);
    }

    #[test]
    fn hash_type_names_round_trip() {
        for name in ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"] {
            assert_eq!(name.parse::<HashType>().unwrap().name(), name);
        }
        assert!(matches!(
            "blake2b".parse::<HashType>(),
            Err(Error::UnsupportedHashType(_))
        ));
        let md5 = LocalCacheWriter::new("/c", HashType::Md5)
            .jid_dir("x")
            .unwrap();
        // md5("x") = 9dd4e461268c8034f5c8564e155c67a6
        assert_eq!(md5, Path::new("/c/jobs/9d/d4e461268c8034f5c8564e155c67a6"));
    }

    #[test]
    fn write_load_writes_jid_load_and_sorted_minions() {
        let (_dir, w) = writer();
        let l = load(text("*"));
        w.write_load(JID, &l, &["b".into(), "a".into()]).unwrap();
        let d = w.jid_dir(JID).unwrap();
        assert_eq!(fs::read(d.join("jid")).unwrap(), JID.as_bytes());
        assert_eq!(read(&d.join(".load.p")), l);
        assert_eq!(
            read(&d.join(".minions.p")),
            Value::Array(vec![text("a"), text("b")])
        );
        // A second save merges minions and keeps the jid file's age.
        set_mtime(&d.join("jid"), 1000);
        w.write_load(JID, &l, &["c".into(), "a".into()]).unwrap();
        assert_eq!(
            read(&d.join(".minions.p")),
            Value::Array(vec![text("a"), text("b"), text("c")])
        );
        let mtime = fs::metadata(d.join("jid")).unwrap().modified().unwrap();
        assert_eq!(mtime, SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        // No temporaries are left behind.
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(TEMP_PREFIX)),
            "{names:?}"
        );
    }

    #[test]
    fn a_return_for_a_job_without_a_load_gets_the_jid_file_and_survives_retention() {
        let (_dir, w) = writer();
        let ret = map(&[("return", Value::Boolean(true))]);
        let d = w.jid_dir(JID).unwrap();
        let _ = w.write_return_in(&d, JID, "m1", &ret).unwrap();
        assert_eq!(fs::read(d.join("jid")).unwrap(), JID.as_bytes());
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(w.clean_expired(now, 3600).unwrap(), 0);
        assert!(d.join("m1").join("return.p").is_file());
    }

    #[test]
    fn a_return_cut_short_is_written_again_and_a_whole_one_is_a_duplicate() {
        let (_dir, w) = writer();
        let ret = map(&[("return", Value::Boolean(true))]);
        w.write_load(JID, &load(text("*")), &[]).unwrap();
        let d = w.jid_dir(JID).unwrap();
        fs::create_dir_all(d.join("m1")).unwrap();
        fs::create_dir_all(d.join("m2")).unwrap();
        fs::write(d.join("m2").join("return.p"), [0x83]).unwrap();
        assert_eq!(
            w.write_return_in(&d, JID, "m2", &ret).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(read(&d.join("m2").join("return.p")), ret);
        assert_eq!(
            w.write_return_in(&d, JID, "m1", &ret).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(read(&d.join("m1").join("return.p")), ret);
        assert_eq!(
            w.write_return_in(&d, JID, "m1", &ret).unwrap(),
            ReturnStatus::Duplicate
        );
    }

    #[test]
    fn minion_list_is_written_even_without_a_target() {
        for l in [load(text("")), map(&[("fun", text("test.ping"))])] {
            let (_dir, w) = writer();
            w.write_load(JID, &l, &[]).unwrap();
            let d = w.jid_dir(JID).unwrap();
            assert_eq!(read(&d.join(".minions.p")), Value::Array(vec![]));
        }
    }

    #[test]
    fn unreadable_minion_list_is_replaced() {
        let (_dir, w) = writer();
        let d = w.jid_dir(JID).unwrap();
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join(".minions.p"), [0xc1, 0x00]).unwrap();
        w.write_load(JID, &load(text("*")), &["z".into()]).unwrap();
        assert_eq!(read(&d.join(".minions.p")), Value::Array(vec![text("z")]));
    }

    #[test]
    fn write_return_writes_salt_subset_and_out() {
        let (_dir, w) = writer();
        let ret = map(&[
            ("id", text("web1")),
            ("jid", text(JID)),
            ("fun", text("state.apply")),
            ("return", map(&[("k", Value::from(1))])),
            ("retcode", Value::from(0)),
            ("success", Value::Boolean(true)),
            ("out", text("highstate")),
        ]);
        assert_eq!(
            w.write_return(JID, "web1", &ret).unwrap(),
            ReturnStatus::Stored
        );
        let md = w.jid_dir(JID).unwrap().join("web1");
        assert_eq!(
            read(&md.join("return.p")),
            map(&[
                ("return", map(&[("k", Value::from(1))])),
                ("retcode", Value::from(0)),
                ("success", Value::Boolean(true)),
            ])
        );
        assert_eq!(read(&md.join("out.p")), text("highstate"));

        let bare = map(&[("return", Value::Boolean(true))]);
        assert_eq!(
            w.write_return(JID, "web2", &bare).unwrap(),
            ReturnStatus::Stored
        );
        let md = w.jid_dir(JID).unwrap().join("web2");
        assert_eq!(read(&md.join("return.p")), bare);
        assert!(!md.join("out.p").exists());
    }

    #[test]
    fn duplicate_return_keeps_the_first() {
        let (_dir, w) = writer();
        let first = map(&[("return", text("first"))]);
        let second = map(&[("return", text("second")), ("out", text("txt"))]);
        assert_eq!(
            w.write_return(JID, "m", &first).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(
            w.write_return(JID, "m", &second).unwrap(),
            ReturnStatus::Duplicate
        );
        let md = w.jid_dir(JID).unwrap().join("m");
        assert_eq!(read(&md.join("return.p")), first);
        assert!(!md.join("out.p").exists());
    }

    #[test]
    fn a_return_that_failed_half_way_leaves_nothing_and_can_be_written_again() {
        let (_dir, w) = writer();
        let mut deep = Value::Nil;
        for _ in 0..=crate::value::MAX_NESTING {
            deep = Value::Array(vec![deep]);
        }
        // `return.p` is written, then `out.p` cannot be.
        let bad = map(&[("return", text("r")), ("out", deep)]);
        assert!(w.write_return(JID, "m", &bad).is_err());
        let md = w.jid_dir(JID).unwrap().join("m");
        assert!(!md.exists(), "no half-written return is left behind");
        let good = map(&[("return", text("r")), ("out", text("txt"))]);
        assert_eq!(
            w.write_return(JID, "m", &good).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(read(&md.join("return.p")), map(&[("return", text("r"))]));
    }

    #[test]
    fn io_errors_name_the_path_that_failed() {
        let (dir, w) = writer();
        // A file where the jobs directory belongs: every write under it fails.
        fs::write(dir.path().join("jobs"), b"").unwrap();
        let e = w.write_load(JID, &load(text("*")), &[]).unwrap_err();
        assert!(e.is_retryable(), "{e}");
        let job_dir = w.jid_dir(JID).unwrap();
        assert!(
            matches!(&e, Error::Io { path, .. } if *path == job_dir),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}: ", job_dir.display())),
            "{e}"
        );
    }

    #[test]
    fn unsafe_minion_ids_are_refused() {
        let (dir, w) = writer();
        for id in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b"] {
            let got = w.write_return(JID, id, &Value::Nil);
            assert!(matches!(got, Err(Error::InvalidMinionId(_))), "{id:?}");
        }
        assert!(!dir.path().join("jobs").exists());
        // Leading dots and odd characters are valid Salt ids.
        assert_eq!(
            w.write_return(JID, ".hidden", &Value::Nil).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(
            w.write_return(JID, "wéb 1", &Value::Nil).unwrap(),
            ReturnStatus::Stored
        );
    }

    #[test]
    fn files_get_umask_modes_and_keep_a_replaced_files_mode() {
        let (_dir, w) = writer();
        w.write_load(JID, &load(text("*")), &[]).unwrap();
        let d = w.jid_dir(JID).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // The process umask decides a new file's mode; a plain write shows it.
        let probe = d.join("probe");
        fs::write(&probe, b"").unwrap();
        assert_eq!(mode(&d.join(".load.p")), mode(&probe));
        fs::set_permissions(d.join(".load.p"), fs::Permissions::from_mode(0o600)).unwrap();
        w.write_load(JID, &load(text("*")), &[]).unwrap();
        assert_eq!(mode(&d.join(".load.p")), 0o600);
    }

    #[test]
    fn clean_expired_follows_jid_file_age() {
        // (jid mtime, now, keep, removed?)
        let cases = [
            (1_000, 2_000, 500, true),
            (1_000, 1_500, 500, false),
            (1_000, 1_501, 500, true),
            (1_000, 99_999, 0, false),
            (1_000, 500, 100, false),
        ];
        for (mtime, now, keep, removed) in cases {
            let (_dir, w) = writer();
            w.write_load(JID, &load(text("*")), &["m".into()]).unwrap();
            let _ = w
                .write_return(JID, "m", &map(&[("return", Value::Boolean(true))]))
                .unwrap();
            let d = w.jid_dir(JID).unwrap();
            set_mtime(&d.join("jid"), mtime);
            assert_eq!(w.clean_expired(now, keep).unwrap(), usize::from(removed));
            assert_eq!(!d.exists(), removed, "case {mtime} {now} {keep}");
        }
    }

    #[test]
    fn clean_expired_scrubs_malformed_entries() {
        let (_dir, w) = writer();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // A fresh job stays.
        w.write_load(JID, &load(text("*")), &[]).unwrap();
        // A job directory without its `jid` file (half-written): removed, as in Salt.
        fs::create_dir_all(w.jid_dir("orphan").unwrap().join("m")).unwrap();
        // An empty old prefix directory goes; a stray file is left alone.
        let empty = w.jobs_dir().join("zz");
        fs::create_dir_all(&empty).unwrap();
        set_mtime(&empty, 1);
        fs::write(w.jobs_dir().join("stray"), b"x").unwrap();
        let stray_in_prefix = w.jid_dir(JID).unwrap().parent().unwrap().join("stray");
        fs::write(&stray_in_prefix, b"x").unwrap();

        assert_eq!(w.clean_expired(now, 3600).unwrap(), 1);
        assert!(w.jid_dir(JID).unwrap().exists());
        assert!(!w.jid_dir("orphan").unwrap().exists());
        assert!(!empty.exists());
        assert!(w.jobs_dir().join("stray").exists());
        assert!(stray_in_prefix.exists());
    }

    #[test]
    fn clean_expired_without_a_jobs_dir_is_a_no_op() {
        let (_dir, w) = writer();
        assert_eq!(w.clean_expired(10, 1).unwrap(), 0);
    }
}
