//! The master's in-memory view of accepted keys, kept current without scanning on hot paths.
//!
//! Invariants:
//! - The auth path reads one id's key from disk ([`KeyStore::get`]); it never lists a
//!   directory. The request path uses the index and falls back to that same single read.
//! - The publish path reads [`KeyIndex::accepted_ids`], a shared snapshot.
//! - Directory listings happen only in [`KeyIndex::refresh`], driven by a timer, and only
//!   when a state directory's mtime changed (a key was added, moved or deleted by
//!   `halite-key`, stock `salt-key` or by hand).

use halite_keystore::KeyStore;
use halite_proto::auth::KeyState;
use halite_proto::pem::clean_key;
use halite_proto::rsa::PublicKey;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

/// An accepted minion key, parsed once.
pub struct AcceptedKey {
    /// The PEM text (clean form).
    pub pem: String,
    /// The parsed key.
    pub public: PublicKey,
    /// The last `tok` that verified: X9.31 is deterministic, so a repeat is compared
    /// byte-for-byte instead of doing the RSA operation again.
    verified_tok: Mutex<Option<Vec<u8>>>,
}

impl AcceptedKey {
    fn new(pem: &str) -> Option<Self> {
        let public = PublicKey::from_pem(pem.as_bytes()).ok()?;
        Some(Self {
            pem: clean_key(pem),
            public,
            verified_tok: Mutex::new(None),
        })
    }

    /// True when `tok` is this key's X9.31 signature of `b"salt"`.
    pub fn verify_tok(&self, tok: &[u8]) -> bool {
        if let Ok(cache) = self.verified_tok.lock() {
            if cache.as_deref() == Some(tok) {
                return true;
            }
        }
        let ok = self.public.x931_verify(tok, b"salt");
        if ok {
            if let Ok(mut cache) = self.verified_tok.lock() {
                *cache = Some(tok.to_vec());
            }
        }
        ok
    }
}

/// A change seen by [`KeyIndex::refresh`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// An id's key appeared in `minions/`.
    Accepted(String),
    /// An id's key left `minions/` (deleted, rejected, ...).
    Removed(String),
}

/// Accepted keys by id, plus a sorted snapshot of the ids for targeting.
pub struct KeyIndex {
    store: KeyStore,
    accepted: RwLock<HashMap<String, Arc<AcceptedKey>>>,
    ids: RwLock<Arc<BTreeSet<String>>>,
    mtimes: Mutex<Vec<Option<SystemTime>>>,
    /// The ids the last directory listing found in `minions/`: `salt/key` accept events
    /// come from this listing, whatever path (auth or refresh) filled the index first.
    listed: Mutex<BTreeSet<String>>,
}

const WATCHED: [KeyState; 4] = [
    KeyState::Accepted,
    KeyState::Pending,
    KeyState::Rejected,
    KeyState::Denied,
];

impl KeyIndex {
    /// Builds the index from the accepted keys on disk.
    pub fn load(store: KeyStore) -> Self {
        let idx = Self {
            store,
            accepted: RwLock::new(HashMap::new()),
            ids: RwLock::new(Arc::new(BTreeSet::new())),
            mtimes: Mutex::new(vec![None; WATCHED.len()]),
            listed: Mutex::new(BTreeSet::new()),
        };
        idx.refresh();
        idx
    }

    /// The key store underneath.
    pub fn store(&self) -> &KeyStore {
        &self.store
    }

    /// The accepted key of `id`: from the index, else one read from disk.
    pub fn accepted(&self, id: &str) -> Option<Arc<AcceptedKey>> {
        if let Some(k) = self.accepted.read().ok()?.get(id) {
            return Some(k.clone());
        }
        match self.store.get(id) {
            Ok(Some((KeyState::Accepted, pem))) => self.insert(id, &pem),
            _ => None,
        }
    }

    /// Records a key the auth path just accepted, so the minion's next request finds it.
    /// `None` when the PEM does not parse.
    pub fn insert(&self, id: &str, pem: &str) -> Option<Arc<AcceptedKey>> {
        let key = Arc::new(AcceptedKey::new(pem)?);
        let mut map = self.accepted.write().unwrap_or_else(|e| e.into_inner());
        let is_new = map.insert(id.to_owned(), key.clone()).is_none();
        drop(map);
        if is_new {
            let mut ids = self.ids.write().unwrap_or_else(|e| e.into_inner());
            let mut v = (**ids).clone();
            v.insert(id.to_owned());
            *ids = Arc::new(v);
        }
        Some(key)
    }

    /// The ids of accepted minions.
    pub fn accepted_ids(&self) -> Arc<BTreeSet<String>> {
        self.ids.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Rescans the state directories if any changed since the last call and returns what
    /// changed in `minions/`.
    pub fn refresh(&self) -> Vec<KeyChange> {
        let now: Vec<Option<SystemTime>> = WATCHED
            .iter()
            .map(|s| {
                std::fs::metadata(self.store.pki_dir().join(s.dir_name()))
                    .and_then(|m| m.modified())
                    .ok()
            })
            .collect();
        {
            let mut last = self.mtimes.lock().unwrap_or_else(|e| e.into_inner());
            if *last == now && now.iter().all(Option::is_some) {
                return Vec::new();
            }
            *last = now;
        }
        let on_disk: Vec<String> = self.store.list(KeyState::Accepted).unwrap_or_default();
        let mut changes = Vec::new();
        let mut map = self.accepted.write().unwrap_or_else(|e| e.into_inner());
        let disk_set: std::collections::HashSet<&str> =
            on_disk.iter().map(String::as_str).collect();
        let gone: Vec<String> = map
            .keys()
            .filter(|k| !disk_set.contains(k.as_str()))
            .cloned()
            .collect();
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let mut removed: BTreeSet<String> = listed
            .iter()
            .filter(|k| !disk_set.contains(k.as_str()))
            .cloned()
            .collect();
        for id in gone {
            map.remove(&id);
            removed.insert(id);
        }
        changes.extend(removed.into_iter().map(KeyChange::Removed));
        changes.extend(
            on_disk
                .iter()
                .filter(|id| !listed.contains(*id))
                .cloned()
                .map(KeyChange::Accepted),
        );
        *listed = on_disk.iter().cloned().collect();
        drop(listed);
        for id in &on_disk {
            let pem = match self.store.get(id) {
                Ok(Some((KeyState::Accepted, pem))) => pem,
                _ => continue,
            };
            let changed = map
                .get(id)
                .map(|k| k.pem != clean_key(&pem))
                .unwrap_or(true);
            if changed {
                if let Some(k) = AcceptedKey::new(&pem) {
                    map.insert(id.clone(), Arc::new(k));
                } else {
                    tracing::error!("Corrupt or missing public key \"{id}\"");
                }
            }
        }
        let ids: BTreeSet<String> = map.keys().cloned().collect();
        drop(map);
        *self.ids.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ids);
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::rsa::PrivateKey;

    fn pem() -> String {
        PrivateKey::generate(2048)
            .unwrap()
            .public_key()
            .unwrap()
            .to_pem()
            .unwrap()
    }

    #[test]
    fn key_file_changes_are_reported_whoever_indexed_the_key_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        store.put("a", KeyState::Accepted, &pem()).unwrap();
        let idx = KeyIndex::load(KeyStore::open(dir.path()).unwrap());
        assert!(idx.accepted_ids().contains("a"));

        // The auth path indexes `b` before the timer sees its file: still one accept event.
        let b = pem();
        store.put("b", KeyState::Accepted, &b).unwrap();
        assert!(idx.insert("b", &b).is_some());
        // Directory mtimes have a coarse clock; force the next refresh to look.
        *idx.mtimes.lock().unwrap() = vec![None; WATCHED.len()];
        assert_eq!(idx.refresh(), vec![KeyChange::Accepted("b".into())]);

        store.delete("a").unwrap();
        *idx.mtimes.lock().unwrap() = vec![None; WATCHED.len()];
        assert_eq!(idx.refresh(), vec![KeyChange::Removed("a".into())]);
        assert!(idx.accepted("a").is_none());
        assert_eq!(idx.accepted_ids().iter().collect::<Vec<_>>(), ["b"]);
    }
}
