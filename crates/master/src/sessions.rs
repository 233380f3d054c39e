//! Per-minion session keys (`cachedir/sessions/<id>`, salt-protocol.md §3.10).
//!
//! A session key is made at a minion's first accepted `_auth`, written to its file (0600)
//! so it survives a master restart, and replaced once older than `publish_session`. Requests
//! from a minion without a fresh session key get "bad load", which makes the minion
//! re-authenticate.

use halite_proto::crypticle::Crypticle;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// Session keys by minion id, backed by files.
pub struct Sessions {
    dir: PathBuf,
    ttl: Duration,
    map: RwLock<HashMap<String, (Arc<Crypticle>, SystemTime)>>,
}

impl Sessions {
    /// Session keys under `cachedir/sessions`, valid for `publish_session` seconds.
    pub fn new(cachedir: &Path, publish_session: u64) -> std::io::Result<Self> {
        let dir = cachedir.join("sessions");
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            ttl: Duration::from_secs(publish_session.max(1)),
            map: RwLock::new(HashMap::new()),
        })
    }

    fn fresh(&self, made: SystemTime, now: SystemTime) -> bool {
        now.duration_since(made)
            .map(|age| age < self.ttl)
            .unwrap_or(true)
    }

    /// The current session key of `id`, if it has a fresh one (memory, then its file).
    pub fn get(&self, id: &str, now: SystemTime) -> Option<Arc<Crypticle>> {
        if let Some((c, made)) = self.map.read().ok()?.get(id) {
            if self.fresh(*made, now) {
                return Some(c.clone());
            }
            return None;
        }
        let mut file = std::fs::File::open(self.dir.join(id)).ok()?;
        let made = file.metadata().and_then(|m| m.modified()).ok()?;
        if !self.fresh(made, now) {
            return None;
        }
        let mut text = String::new();
        file.read_to_string(&mut text).ok()?;
        let c = Arc::new(Crypticle::new(&text).ok()?);
        self.map
            .write()
            .ok()?
            .insert(id.to_owned(), (c.clone(), made));
        Some(c)
    }

    /// The session key to hand `id` in an auth reply: the current one, or a new one.
    ///
    /// The file is written in place, as stock's `Crypticle.write_key` does, without a
    /// temporary name and a rename per first sign-in: a file cut short by a crash does not
    /// decode, so the minion's next request gets "bad load" and it signs in again, the same
    /// as a missing file.
    pub fn get_or_create(&self, id: &str, now: SystemTime) -> std::io::Result<Arc<Crypticle>> {
        if let Some(c) = self.get(id, now) {
            return Ok(c);
        }
        let c = Arc::new(Crypticle::generate());
        let path = self.dir.join(id);
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        let mut f = match open() {
            // A symlink in its place is replaced, never followed.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                std::fs::remove_file(&path)?;
                open()?
            }
            r => r?,
        };
        f.write_all(c.key_string().as_bytes())?;
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned(), (c.clone(), now));
        Ok(c)
    }

    /// Forgets `id`'s session key (its key was deleted or rejected).
    pub fn remove(&self, id: &str) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        let _ = std::fs::remove_file(self.dir.join(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_key_survives_a_restart_and_expires() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let a = Sessions::new(dir.path(), 60).unwrap();
        let k = a.get_or_create("m1", now).unwrap();
        let b = Sessions::new(dir.path(), 60).unwrap();
        assert_eq!(b.get("m1", now).unwrap().key_string(), k.key_string());
        assert!(b.get("m1", now + Duration::from_secs(120)).is_none());
        assert!(b.get("other", now).is_none());
        b.remove("m1");
        assert!(Sessions::new(dir.path(), 60)
            .unwrap()
            .get("m1", now)
            .is_none());
    }

    #[test]
    fn a_session_file_cut_short_by_a_crash_is_replaced_by_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let k = Sessions::new(dir.path(), 60)
            .unwrap()
            .get_or_create("m1", now)
            .unwrap()
            .key_string()
            .to_owned();
        let path = dir.path().join("sessions").join("m1");
        std::fs::write(&path, &k[..k.len() / 2]).unwrap();
        let after = Sessions::new(dir.path(), 60).unwrap();
        assert!(after.get("m1", now).is_none());
        let new = after
            .get_or_create("m1", now)
            .unwrap()
            .key_string()
            .to_owned();
        assert_ne!(new, k);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), new);
    }

    #[test]
    fn a_symlink_in_place_of_a_session_file_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let s = Sessions::new(dir.path(), 60).unwrap();
        let path = dir.path().join("sessions").join("m1");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let k = s.get_or_create("m1", SystemTime::now()).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), k.key_string());
    }
}
