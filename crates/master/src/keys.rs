//! The master's in-memory view of accepted keys, kept current without scanning on hot paths.
//!
//! Invariants:
//! - The auth path reads one id's key from disk ([`KeyStore::get`]); it never lists a
//!   directory. The request path uses the index and falls back to that same single read.
//! - The publish path reads [`KeyIndex::accepted_ids`], a shared snapshot.
//! - Directory listings happen only in [`KeyIndex::refresh`], driven by a timer, and only
//!   when a state directory's mtime changed (a key was added, moved or deleted by
//!   `halite-key`, stock `salt-key` or by hand).
//! - The number of pending keys (`max_pending_keys`) is the count of `minions_pre/` taken by
//!   the last refresh plus the keys the auth path stored since ([`KeyIndex::reserve_pending`]);
//!   a reservation and its check are one step under a lock, so concurrent sign-ins cannot
//!   both take the last place. A refresh replaces the count with its listing plus the places
//!   taken while it listed (whose files it may or may not have seen), so the cap is never
//!   passed; for a moment, until the next refresh (the directory changed, so it is listed
//!   again), a key may be counted twice and a sign-in refused one place early.

use halite_keystore::KeyStore;
use halite_proto::auth::KeyState;
use halite_proto::pem::clean_key;
use halite_proto::rsa::PublicKey;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

/// An accepted minion key: its text, checked to parse when indexed.
///
/// The parsed form is made when needed ([`AcceptedKey::public`]: a sign-in, a pillar
/// reply, a `tok` not seen before) rather than kept: OpenSSL's RSA and EVP objects are
/// ~1.5 KiB per key (heaptrack: 15-19 MiB of the master's heap at 10,000 minions), while
/// parsing costs ~5 µs next to the sign-in's 0.66 ms signature.
pub struct AcceptedKey {
    /// The PEM text (clean form).
    pub pem: String,
    /// The accepted file's mtime and length when the index read it (`None`: indexed by the
    /// auth path, which read the file itself).
    stamp: Mutex<Option<FileStamp>>,
    /// The last `tok` that verified: X9.31 is deterministic, so a repeat is compared
    /// byte-for-byte instead of doing the RSA operation again.
    verified_tok: Mutex<Option<Vec<u8>>>,
}

impl AcceptedKey {
    /// The entry for `pem` and the key it parsed to; `None` when the clean text does not
    /// parse.
    fn new(pem: &str) -> Option<(Self, PublicKey)> {
        let pem = clean_key(pem);
        let public = PublicKey::from_pem(pem.as_bytes()).ok()?;
        let key = Self {
            pem,
            stamp: Mutex::new(None),
            verified_tok: Mutex::new(None),
        };
        Some((key, public))
    }

    /// The parsed key. `None` cannot happen short of a bug: the clean text parsed when the
    /// key was indexed, and OpenSSL parses the same text the same way.
    pub fn public(&self) -> Option<PublicKey> {
        PublicKey::from_pem(self.pem.as_bytes()).ok()
    }

    /// True when `tok` is this key's X9.31 signature of `b"salt"`.
    pub fn verify_tok(&self, tok: &[u8]) -> bool {
        if let Ok(cache) = self.verified_tok.lock() {
            if cache.as_deref() == Some(tok) {
                return true;
            }
        }
        let ok = self
            .public()
            .is_some_and(|public| public.x931_verify(tok, b"salt"));
        if ok {
            if let Ok(mut cache) = self.verified_tok.lock() {
                *cache = Some(tok.to_vec());
            }
        }
        ok
    }
}

/// How long a key directory must be unchanged before its mtime is trusted to cover it.
const SETTLE_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// What identifies one version of a key file without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    modified: SystemTime,
    len: u64,
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
    /// A sorted snapshot of the accepted ids; `None` once the index changed.
    ids: RwLock<Option<Arc<BTreeSet<String>>>>,
    mtimes: Mutex<Vec<Option<SystemTime>>>,
    /// The ids the last directory listing found in `minions/`: `salt/key` accept events
    /// come from this listing, whatever path (auth or refresh) filled the index first.
    listed: Mutex<BTreeSet<String>>,
    /// Keys in `minions_pre/`: the last refresh's count plus the auth path's reservations.
    pending: Mutex<PendingCount>,
    /// Keys in `minions_rejected/` and `minions_denied/` at the last refresh (metrics).
    others: Mutex<(usize, usize)>,
}

/// The pending keys counted by a [`KeyIndex`].
#[derive(Debug, Default)]
struct PendingCount {
    /// Keys in `minions_pre/`.
    keys: usize,
    /// A reservation was refused since the last one that succeeded.
    refusing: bool,
    /// Places ever taken: a refresh adds those taken while it counted the directory, whose
    /// files its count may have missed (a count that is stale by the time it is stored
    /// would let more than `max` keys in).
    taken: u64,
}

/// What [`KeyIndex::reserve_pending`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingPlace {
    /// A place was taken: store the key, or give the place back.
    Taken,
    /// The limit is reached. `first` for the first refusal since a place was last taken
    /// (the one worth a log line).
    Full {
        /// First refusal since the last place taken.
        first: bool,
    },
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
            ids: RwLock::new(None),
            mtimes: Mutex::new(vec![None; WATCHED.len()]),
            listed: Mutex::new(BTreeSet::new()),
            pending: Mutex::new(PendingCount::default()),
            others: Mutex::new((0, 0)),
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
            Ok(Some((KeyState::Accepted, pem))) => self.insert(id, &pem).map(|(key, _)| key),
            _ => None,
        }
    }

    /// Records a key the auth path just accepted, so the minion's next request finds it,
    /// and answers its entry with the parsed key (one parse for a new key). `None` when the
    /// PEM does not parse.
    pub fn insert(&self, id: &str, pem: &str) -> Option<(Arc<AcceptedKey>, PublicKey)> {
        if let Some(k) = self.accepted.read().ok()?.get(id) {
            if k.pem == clean_key(pem) {
                return Some((k.clone(), k.public()?));
            }
        }
        let (key, public) = AcceptedKey::new(pem)?;
        let key = Arc::new(key);
        let mut map = self.accepted.write().unwrap_or_else(|e| e.into_inner());
        if map.insert(id.to_owned(), key.clone()).is_none() {
            // The snapshot is rebuilt when next read: copying it per sign-in made an auth
            // storm quadratic.
            *self.ids.write().unwrap_or_else(|e| e.into_inner()) = None;
        }
        Some((key, public))
    }

    /// Takes a place for one more pending key when fewer than `max` are pending (`0`: no
    /// limit). The caller stores the key next, or gives the place back with
    /// [`KeyIndex::release_pending`] when it could not.
    pub fn reserve_pending(&self, max: u64) -> PendingPlace {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if max > 0 && u64::try_from(pending.keys).unwrap_or(u64::MAX) >= max {
            let first = !pending.refusing;
            pending.refusing = true;
            return PendingPlace::Full { first };
        }
        pending.keys += 1;
        pending.taken += 1;
        pending.refusing = false;
        PendingPlace::Taken
    }

    /// Gives back a place taken by [`KeyIndex::reserve_pending`] whose key was not stored.
    pub fn release_pending(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.keys = pending.keys.saturating_sub(1);
    }

    /// Sets the pending count from `count` (of `minions_pre/`). Places taken while it
    /// counts are added whether or not it saw their files: too many for a moment (until the
    /// next refresh) rather than too few, which would let more than `max` keys in.
    fn recount_pending(&self, count: impl FnOnce() -> halite_keystore::Result<usize>) {
        let taken_before = self.pending.lock().unwrap_or_else(|e| e.into_inner()).taken;
        match count() {
            Ok(n) => {
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let during = usize::try_from(pending.taken.saturating_sub(taken_before))
                    .unwrap_or(usize::MAX);
                pending.keys = n.saturating_add(during);
            }
            Err(e) => tracing::warn!("Cannot count the pending keys: {e}"),
        }
    }

    /// Counts `minions_rejected/` and `minions_denied/` (in a refresh: a directory changed).
    fn recount_others(&self) {
        let count = |state| {
            self.store.count(state).unwrap_or_else(|e| {
                tracing::debug!("Cannot count the {state:?} keys: {e}");
                0
            })
        };
        let counts = (count(KeyState::Rejected), count(KeyState::Denied));
        *self.others.lock().unwrap_or_else(|e| e.into_inner()) = counts;
    }

    /// Keys by state, for the metrics: accepted as indexed, pending as counted for
    /// `max_pending_keys`, rejected and denied as the last refresh counted them.
    pub fn counts(&self) -> halite_metrics::KeyCounts {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let accepted = self
            .accepted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner()).keys;
        let (rejected, denied) = *self.others.lock().unwrap_or_else(|e| e.into_inner());
        halite_metrics::KeyCounts {
            accepted: wide(accepted),
            pending: wide(pending),
            rejected: wide(rejected),
            denied: wide(denied),
        }
    }

    /// The ids of accepted minions.
    pub fn accepted_ids(&self) -> Arc<BTreeSet<String>> {
        if let Some(ids) = &*self.ids.read().unwrap_or_else(|e| e.into_inner()) {
            return ids.clone();
        }
        let map = self.accepted.read().unwrap_or_else(|e| e.into_inner());
        let ids = Arc::new(map.keys().cloned().collect::<BTreeSet<String>>());
        *self.ids.write().unwrap_or_else(|e| e.into_inner()) = Some(ids.clone());
        ids
    }

    /// Rescans the state directories if any changed since the last call and returns what
    /// changed in `minions/`.
    ///
    /// Runs beside the auth path, which writes and indexes keys while the listing is taken:
    /// an indexed id missing from the listing is only reported removed after a read of its
    /// file says it is no longer accepted, and only new or rewritten files are read.
    pub fn refresh(&self) -> Vec<KeyChange> {
        let dirs: Vec<Option<SystemTime>> = WATCHED
            .iter()
            .map(|s| {
                std::fs::metadata(self.store.pki_dir().join(s.dir_name()))
                    .and_then(|m| m.modified())
                    .ok()
            })
            .collect();
        {
            let mut last = self.mtimes.lock().unwrap_or_else(|e| e.into_inner());
            if *last == dirs && dirs.iter().all(Option::is_some) {
                return Vec::new();
            }
            // Directory mtimes come from a coarse clock: a key written in the same tick as
            // this listing would leave the mtime unchanged, so a directory changed within
            // the last second is listed again on the next call.
            let now = SystemTime::now();
            let settled = dirs
                .iter()
                .flatten()
                .all(|t| now.duration_since(*t).is_ok_and(|age| age >= SETTLE_TIME));
            *last = if settled {
                dirs
            } else {
                vec![None; WATCHED.len()]
            };
        }
        self.recount_pending(|| self.store.count(KeyState::Pending));
        self.recount_others();
        let on_disk: BTreeSet<String> = self
            .store
            .list(KeyState::Accepted)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let still_accepted =
            |id: &str| matches!(self.store.get(id), Ok(Some((KeyState::Accepted, _))));

        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        let indexed: Vec<(String, Arc<AcceptedKey>)> = self
            .accepted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(id, k)| (id.clone(), k.clone()))
            .collect();
        let unlisted: BTreeSet<&str> = listed
            .iter()
            .map(String::as_str)
            .chain(indexed.iter().map(|(id, _)| id.as_str()))
            .filter(|id| !on_disk.contains(*id))
            .collect();
        let removed: Vec<String> = unlisted
            .into_iter()
            .filter(|id| !still_accepted(id))
            .map(str::to_owned)
            .collect();
        let accepted_events: Vec<String> = on_disk
            .iter()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        *listed = on_disk.clone();
        drop(listed);

        // Files that are new to the index or were rewritten since it read them. Keys the
        // auth path indexed are read once more, to learn their stamp; the PEM is only
        // parsed when its text differs from the index's.
        let indexed: HashMap<&str, &Arc<AcceptedKey>> =
            indexed.iter().map(|(id, k)| (id.as_str(), k)).collect();
        let mut fresh = Vec::new();
        for id in &on_disk {
            let stamp = self.stamp(id);
            let known = indexed.get(id.as_str());
            if stamp.is_some()
                && known
                    .is_some_and(|k| *k.stamp.lock().unwrap_or_else(|e| e.into_inner()) == stamp)
            {
                continue;
            }
            let Ok(Some((KeyState::Accepted, pem))) = self.store.get(id) else {
                continue;
            };
            match known {
                Some(k) if k.pem == clean_key(&pem) => {
                    *k.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
                }
                _ => match AcceptedKey::new(&pem).map(|(key, _)| key) {
                    Some(k) => {
                        *k.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
                        fresh.push((id.clone(), k));
                    }
                    None => tracing::error!("Corrupt or missing public key \"{id}\""),
                },
            }
        }

        let mut map = self.accepted.write().unwrap_or_else(|e| e.into_inner());
        for id in &removed {
            map.remove(id);
        }
        for (id, k) in fresh {
            map.insert(id, Arc::new(k));
        }
        *self.ids.write().unwrap_or_else(|e| e.into_inner()) = None;
        drop(map);

        let mut changes: Vec<KeyChange> = removed.into_iter().map(KeyChange::Removed).collect();
        changes.extend(accepted_events.into_iter().map(KeyChange::Accepted));
        changes
    }

    fn stamp(&self, id: &str) -> Option<FileStamp> {
        let path = self
            .store
            .pki_dir()
            .join(KeyState::Accepted.dir_name())
            .join(id);
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            modified: meta.modified().ok()?,
            len: meta.len(),
        })
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
    fn an_indexed_key_parses_on_demand_and_verifies_its_token() {
        let private = PrivateKey::generate(2048).unwrap();
        let text = private.public_key().unwrap().to_pem().unwrap();
        // As a Windows editor or Salt's own writer may leave it: CRLF, trailing blank line.
        let stored = format!("{}\r\n\r\n", text.trim().replace('\n', "\r\n"));
        let (key, _) = AcceptedKey::new(&stored).expect("a valid key is indexed");
        assert_eq!(key.pem, clean_key(&text));
        assert!(key.public().is_some());
        let tok = private.x931_sign(b"salt").unwrap();
        assert!(key.verify_tok(&tok));
        assert!(
            key.verify_tok(&tok),
            "a repeated token verifies from the cache"
        );
        assert!(!key.verify_tok(b"not a signature"));
        assert!(
            AcceptedKey::new("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----")
                .is_none()
        );
    }

    #[test]
    fn keys_accepted_while_a_refresh_lists_the_directory_are_never_reported_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let idx = Arc::new(KeyIndex::load(KeyStore::open(dir.path()).unwrap()));
        let pems: Vec<String> = (0..4).map(|_| pem()).collect();
        // A long directory listing widens the window in which the auth path can add keys.
        for n in 0..3000 {
            store
                .put(
                    &format!("old{n}"),
                    KeyState::Accepted,
                    &pems[n % pems.len()],
                )
                .unwrap();
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refresher = {
            let (idx, done) = (idx.clone(), done.clone());
            std::thread::spawn(move || {
                let mut changes = Vec::new();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    *idx.mtimes.lock().unwrap() = vec![None; WATCHED.len()];
                    changes.extend(idx.refresh());
                }
                changes
            })
        };
        // The auth path: store the key file, then index it, like `accept` does.
        for n in 0..300 {
            let id = format!("m{n}");
            store
                .put(&id, KeyState::Accepted, &pems[n % pems.len()])
                .unwrap();
            idx.insert(&id, &pems[n % pems.len()]).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let changes = refresher.join().unwrap();
        let removed: Vec<_> = changes
            .iter()
            .filter(|c| matches!(c, KeyChange::Removed(_)))
            .collect();
        assert!(removed.is_empty(), "{removed:?}");
        *idx.mtimes.lock().unwrap() = vec![None; WATCHED.len()];
        idx.refresh();
        assert_eq!(idx.accepted_ids().len(), 3300);
    }

    #[test]
    fn pending_places_are_capped_and_recounted_from_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let key = pem();
        for id in ["a", "b"] {
            store.put(id, KeyState::Pending, &key).unwrap();
        }
        store.put("c", KeyState::Accepted, &key).unwrap();
        let idx = KeyIndex::load(KeyStore::open(dir.path()).unwrap());
        let full = |first| PendingPlace::Full { first };
        assert_eq!(idx.reserve_pending(3), PendingPlace::Taken, "2 of 3 taken");
        assert_eq!(idx.reserve_pending(3), full(true), "3 of 3 taken");
        assert_eq!(idx.reserve_pending(3), full(false), "reported once");
        idx.release_pending();
        assert_eq!(idx.reserve_pending(3), PendingPlace::Taken, "given back");
        assert_eq!(
            idx.reserve_pending(3),
            full(true),
            "full again: reported again"
        );
        assert_eq!(idx.reserve_pending(0), PendingPlace::Taken, "0: no limit");
        // salt-key deleted a pending key (and nothing was written for the reservations):
        // the next refresh counts the directory again.
        store.delete("a").unwrap();
        *idx.mtimes.lock().unwrap() = vec![None; WATCHED.len()];
        idx.refresh();
        assert_eq!(idx.reserve_pending(2), PendingPlace::Taken, "1 of 2 taken");
        assert_eq!(idx.reserve_pending(2), full(true));
    }

    #[test]
    fn a_place_taken_while_the_directory_is_counted_is_not_lost_by_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let idx = KeyIndex::load(KeyStore::open(dir.path()).unwrap());
        // A sign-in takes the only place and writes its key after the listing was read:
        // the count (0) is stale by the time it is stored.
        idx.recount_pending(|| {
            let n = store.count(KeyState::Pending);
            assert_eq!(idx.reserve_pending(1), PendingPlace::Taken);
            store.put("late", KeyState::Pending, &pem()).unwrap();
            n
        });
        assert_eq!(
            idx.reserve_pending(1),
            PendingPlace::Full { first: true },
            "a second key would wait beside the first"
        );
        // The next count sees the file, and the place taken before it is not added again.
        idx.recount_pending(|| store.count(KeyState::Pending));
        assert_eq!(idx.reserve_pending(2), PendingPlace::Taken);
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
