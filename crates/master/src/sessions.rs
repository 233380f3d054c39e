//! Per-minion session keys (`cachedir/sessions/<id>`, salt-protocol.md §3.10).
//!
//! A session key is made at a minion's first accepted `_auth`, written to its file (0600)
//! so it survives a master restart, and replaced once older than `publish_session`. Requests
//! from a minion without a fresh session key get "bad load", which makes the minion
//! re-authenticate.

use halite_proto::crypticle::Crypticle;
use std::collections::HashMap;
use std::io::Write;
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
        let path = self.dir.join(id);
        let made = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
        if !self.fresh(made, now) {
            return None;
        }
        let c = Arc::new(Crypticle::new(&std::fs::read_to_string(&path).ok()?).ok()?);
        self.map
            .write()
            .ok()?
            .insert(id.to_owned(), (c.clone(), made));
        Some(c)
    }

    /// The session key to hand `id` in an auth reply: the current one, or a new one.
    pub fn get_or_create(&self, id: &str, now: SystemTime) -> std::io::Result<Arc<Crypticle>> {
        if let Some(c) = self.get(id, now) {
            return Ok(c);
        }
        let c = Arc::new(Crypticle::generate());
        let path = self.dir.join(id);
        let tmp = self.dir.join(format!(".{id}.tmp"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(c.key_string().as_bytes())?;
        std::fs::rename(&tmp, &path)?;
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
}
