//! The master's pki directory in Salt 3008's on-disk layout (`salt/cache/localfs_key.py`).
//!
//! One file per minion id, named after the id, in the directory of its state:
//! `minions/` (accepted), `minions_pre/` (pending), `minions_rejected/` (rejected) and
//! `minions_denied/` (a key that was presented for an id whose key differs). The file holds
//! the PEM public key in `clean_key` form (no trailing newline), mode 0600. The master's own
//! pair is `<master_id>.pem`/`.pub` with `master.pem`/`master.pub` symlinks
//! ([`KeyStore::load_or_create_master_keys`]). With `master_sign_pubkey` the directory also
//! holds the signing pair `<master_sign_key_name>.pem/.pub` ([`KeyStore::find_or_create_pair`])
//! and the signature file `salt-key --gen-signature` writes
//! ([`KeyStore::write_pubkey_signature`], [`KeyStore::read_pubkey_signature`]). A stock
//! salt-master or salt-key can work on the same directory.
//!
//! What this crate does not do: keep an index, cache, watch the directory or fire events. Every
//! call goes to the file system; the master layers its in-memory index on top and re-reads on
//! demand. It does not decide who is accepted (`halite_proto::auth::decide` does).
//!
//! Invariants:
//! - An id is used as a path only after `halite_proto::auth::valid_id` accepted it, so a key
//!   file is always a direct child of its state directory.
//! - Reads never follow symlinks and only count regular files (Salt's `is_file() and not
//!   is_symlink()`); listings also skip dot-files, which is where temporary files live.
//! - Writes are atomic: a temporary file in the same directory renamed over the destination.
//! - An id has one key across accepted/pending/rejected: [`KeyStore::put`] writes the new
//!   state before removing the others, so a crash in between leaves the key in two states
//!   ([`KeyStore::get`] then answers with Salt's priority), never in none. Denied keys are kept
//!   apart and never count as "the" key of an id.
//! - Every key written is in `clean_key` form. Deviation: stock salt-key moves a key's text
//!   as stored, so a hand-placed key with a trailing newline keeps it (and its fingerprint)
//!   there, while Halite normalises it.

mod fnmatch;
mod fsio;
mod master;
mod select;
mod signing;

pub use fnmatch::fnmatch;
pub use halite_proto::auth::KeyState;
pub use select::{Action, Applied, Include, Matches};

use fsio::{ensure_dir, io_err, read_key_file, regular_files, remove_entry, write_atomic, Replace};
use halite_proto::auth::valid_id;
use halite_proto::pem::clean_key;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Every way a key-store operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The id is not a valid minion id (`valid_id`), so it is not used as a path.
    #[error("{0:?} is not a valid minion id")]
    InvalidId(String),
    /// A file name (the signature file's) that is not a relative path inside its directory.
    #[error("{0:?} is not a file name inside the key directory")]
    InvalidName(String),
    /// A file-system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A key file holds bytes that are not UTF-8 text.
    #[error("{}: key file is not UTF-8 text", .0.display())]
    NotUtf8(PathBuf),
    /// A key could not be read, generated or serialised.
    #[error("{}: {source}", path.display())]
    Key {
        /// The key file concerned.
        path: PathBuf,
        /// The RSA/PEM error.
        #[source]
        source: halite_proto::Error,
    },
    /// The master's public key file does not belong to its private key.
    #[error("{} does not match the private key {}", public.display(), private.display())]
    MasterKeyMismatch {
        /// The private key file.
        private: PathBuf,
        /// The public key file.
        public: PathBuf,
    },
    /// `hash_type` names a digest that is not available.
    #[error("unsupported hash_type {0:?}")]
    UnsupportedHash(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Mode of minion key files (`tempfile.mkstemp` in `localfs_key.store`).
const KEY_FILE_MODE: u32 = 0o600;
/// Mode of the state directories (created under umask 022 by `verify_env`).
const STATE_DIR_MODE: u32 = 0o755;
/// Sub-directories the master creates in its pki directory (`verify_env` in
/// `salt/cli/daemons.py`); `minions_autosign` is not a key state but belongs to the layout.
const PKI_SUBDIRS: [&str; 5] = [
    "minions",
    "minions_pre",
    "minions_denied",
    "minions_autosign",
    "minions_rejected",
];
/// The states that hold "the" key of an id, in `localfs_key.fetch` priority order.
const KEY_STATES: [KeyState; 3] = [KeyState::Rejected, KeyState::Pending, KeyState::Accepted];

/// The ids in every state, each list sorted like salt-key sorts ([`sort_ignorecase`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLists {
    /// `minions/`.
    pub accepted: Vec<String>,
    /// `minions_pre/`.
    pub pending: Vec<String>,
    /// `minions_rejected/`.
    pub rejected: Vec<String>,
    /// `minions_denied/`.
    pub denied: Vec<String>,
}

impl KeyLists {
    /// The list for `state`.
    pub fn get(&self, state: KeyState) -> &[String] {
        match state {
            KeyState::Accepted => &self.accepted,
            KeyState::Pending => &self.pending,
            KeyState::Rejected => &self.rejected,
            KeyState::Denied => &self.denied,
        }
    }
}

/// A master pki directory.
#[derive(Debug, Clone)]
pub struct KeyStore {
    pki_dir: PathBuf,
}

impl KeyStore {
    /// A store on `pki_dir` without touching the disk (salt-key does not create the layout;
    /// state directories are created on the first write into them).
    pub fn at(pki_dir: impl Into<PathBuf>) -> Self {
        KeyStore {
            pki_dir: pki_dir.into(),
        }
    }

    /// Opens `pki_dir` as the master does at start-up: creates it (mode 0700; an existing
    /// directory that is neither 0700 nor 0750 is set to 0700, as `verify_env` does) and the
    /// state directories (0755).
    pub fn open(pki_dir: impl Into<PathBuf>) -> Result<Self> {
        let store = Self::at(pki_dir);
        let dir = &store.pki_dir;
        ensure_dir(dir, 0o700)?;
        let mode = fs::metadata(dir)
            .map_err(|e| io_err(dir, e))?
            .permissions()
            .mode()
            & 0o777;
        if mode != 0o700 && mode != 0o750 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| io_err(dir, e))?;
        }
        for sub in PKI_SUBDIRS {
            ensure_dir(&dir.join(sub), STATE_DIR_MODE)?;
        }
        Ok(store)
    }

    /// The pki directory.
    pub fn pki_dir(&self) -> &Path {
        &self.pki_dir
    }

    /// The path of `id`'s key file in `state`, for a valid id.
    pub fn key_path(&self, state: KeyState, id: &str) -> Result<PathBuf> {
        if !valid_id(id) {
            return Err(Error::InvalidId(id.to_owned()));
        }
        Ok(self.pki_dir.join(state.dir_name()).join(id))
    }

    /// The key of `id` and its state among accepted, pending and rejected (denied keys are
    /// separate: [`KeyStore::get_denied`]). Costs one open per state directory; if an id is in
    /// several (only possible through outside edits), rejected wins over pending over
    /// accepted, as in `localfs_key.fetch`. The text is returned as stored.
    pub fn get(&self, id: &str) -> Result<Option<(KeyState, String)>> {
        for state in KEY_STATES {
            if let Some(pem) = read_key_file(&self.key_path(state, id)?)? {
                return Ok(Some((state, pem)));
            }
        }
        Ok(None)
    }

    /// The denied key recorded for `id`, if any.
    pub fn get_denied(&self, id: &str) -> Result<Option<String>> {
        read_key_file(&self.key_path(KeyState::Denied, id)?)
    }

    /// Stores `pem` (in `clean_key` form) as `id`'s key in `state`, removing it from the other
    /// two of accepted/pending/rejected. With [`KeyState::Denied`] it replaces the id's denied
    /// key and leaves the other states alone. Creates the state directory if needed.
    pub fn put(&self, id: &str, state: KeyState, pem: &str) -> Result<()> {
        let path = self.key_path(state, id)?;
        let dir = self.pki_dir.join(state.dir_name());
        ensure_dir(&dir, STATE_DIR_MODE)?;
        write_atomic(
            &dir,
            id,
            clean_key(pem).as_bytes(),
            KEY_FILE_MODE,
            Replace::Always,
        )?;
        tracing::debug!(path = %path.display(), "Stored key");
        if state != KeyState::Denied {
            for other in KEY_STATES.into_iter().filter(|s| *s != state) {
                remove_entry(&self.key_path(other, id)?)?;
            }
        }
        Ok(())
    }

    /// Records `pem` as a denied key of `id`. The localfs layout holds one denied key per id
    /// and Salt's master keeps the first one (it stores element 0 of the growing list), so an
    /// existing denied key is kept. Returns whether `pem` was written.
    pub fn add_denied(&self, id: &str, pem: &str) -> Result<bool> {
        self.key_path(KeyState::Denied, id)?;
        let dir = self.pki_dir.join(KeyState::Denied.dir_name());
        ensure_dir(&dir, STATE_DIR_MODE)?;
        write_atomic(
            &dir,
            id,
            clean_key(pem).as_bytes(),
            KEY_FILE_MODE,
            Replace::Never,
        )
    }

    /// Removes `id`'s key from accepted, pending and rejected (`flush("keys", id)`; denied is
    /// untouched). Returns whether a file was removed.
    pub fn delete(&self, id: &str) -> Result<bool> {
        let mut removed = false;
        for state in KEY_STATES {
            removed |= remove_entry(&self.key_path(state, id)?)?;
        }
        Ok(removed)
    }

    /// Removes `id`'s denied key. Returns whether a file was removed.
    pub fn delete_denied(&self, id: &str) -> Result<bool> {
        remove_entry(&self.key_path(KeyState::Denied, id)?)
    }

    /// The ids in `state`, sorted like salt-key ([`sort_ignorecase`]). A missing directory is
    /// empty; invalid ids, dot-files, symlinks and non-UTF-8 names are skipped.
    pub fn list(&self, state: KeyState) -> Result<Vec<String>> {
        let mut ids: Vec<String> = regular_files(&self.pki_dir.join(state.dir_name()))?
            .into_iter()
            .filter(|n| !n.starts_with('.') && valid_id(n))
            .collect();
        sort_ignorecase(&mut ids);
        Ok(ids)
    }

    /// How many ids are in `state`: the length [`KeyStore::list`] would answer, without
    /// sorting the names (the master recounts `minions_pre/` for `max_pending_keys`).
    pub fn count(&self, state: KeyState) -> Result<usize> {
        Ok(regular_files(&self.pki_dir.join(state.dir_name()))?
            .iter()
            .filter(|n| !n.starts_with('.') && valid_id(n))
            .count())
    }

    /// Every state's ids (`Key.list_keys`).
    pub fn list_all(&self) -> Result<KeyLists> {
        Ok(KeyLists {
            accepted: self.list(KeyState::Accepted)?,
            pending: self.list(KeyState::Pending)?,
            rejected: self.list(KeyState::Rejected)?,
            denied: self.list(KeyState::Denied)?,
        })
    }

    /// The master's own key files salt-key shows as "Local Keys" (`Key.local_keys`): regular
    /// files (not the `master.*` symlinks) in the pki directory ending in `.pem` or `.pub`.
    pub fn local_keys(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = regular_files(&self.pki_dir)?
            .into_iter()
            .filter(|n| n.ends_with(".pem") || n.ends_with(".pub"))
            .collect();
        sort_ignorecase(&mut names);
        Ok(names)
    }

    /// The text of a file listed by [`KeyStore::local_keys`].
    pub fn read_local(&self, name: &str) -> Result<Option<String>> {
        if !valid_id(name) {
            return Err(Error::InvalidId(name.to_owned()));
        }
        read_key_file(&self.pki_dir.join(name))
    }
}

/// `salt.utils.data.sorted_ignorecase`: sorts by lower-cased text. Salt keeps directory order
/// for names equal up to case; Halite orders those by their original text so the output does
/// not depend on the file system.
pub fn sort_ignorecase(names: &mut [String]) {
    names.sort_by_cached_key(|n| (n.to_lowercase(), n.clone()));
}

/// The fingerprint salt-key prints (`Key.finger`, which calls `pem_finger(key=...)`): the
/// `hash_type` digest of the whole stored text, as colon-separated hex pairs. Unlike the
/// minion's `master_finger` (`halite_proto::pem::pem_finger`), the PEM armour lines are hashed
/// too.
pub fn key_fingerprint(text: &str, hash_type: &str) -> Result<String> {
    let md = openssl::hash::MessageDigest::from_name(hash_type)
        .ok_or_else(|| Error::UnsupportedHash(hash_type.to_owned()))?;
    let digest = openssl::hash::hash(md, text.as_bytes())
        .map_err(|_| Error::UnsupportedHash(hash_type.to_owned()))?;
    Ok(digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use halite_proto::rsa::PrivateKey;
    use std::sync::OnceLock;
    use KeyState::*;

    /// A distinct valid public key per `n` (generated once per test binary).
    pub(crate) fn pubkey(n: usize) -> String {
        static KEYS: OnceLock<Vec<String>> = OnceLock::new();
        KEYS.get_or_init(|| {
            (0..8)
                .map(|_| {
                    PrivateKey::generate(1024)
                        .unwrap()
                        .public_key()
                        .unwrap()
                        .to_pem()
                        .unwrap()
                })
                .collect()
        })[n % 8]
            .clone()
    }

    pub(crate) fn store_with(keys: &[(KeyState, &str)]) -> (tempfile::TempDir, KeyStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path().join("pki")).unwrap();
        for (i, (state, id)) in keys.iter().enumerate() {
            store.put(id, *state, &pubkey(i)).unwrap();
        }
        (dir, store)
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn open_creates_salt_layout_with_modes() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        KeyStore::open(&pki).unwrap();
        assert_eq!(mode(&pki), 0o700);
        for sub in PKI_SUBDIRS {
            assert_eq!(mode(&pki.join(sub)), 0o755, "{sub}");
        }
        fs::set_permissions(&pki, fs::Permissions::from_mode(0o777)).unwrap();
        KeyStore::open(&pki).unwrap();
        assert_eq!(mode(&pki), 0o700, "a world-writable pki dir is tightened");
    }

    #[test]
    fn put_writes_clean_key_with_mode_0600() {
        let (dir, s) = store_with(&[]);
        s.put("m1", Pending, &format!("{}\n\n", pubkey(0))).unwrap();
        let p = dir.path().join("pki/minions_pre/m1");
        assert_eq!(fs::read_to_string(&p).unwrap(), clean_key(&pubkey(0)));
        assert_eq!(mode(&p), 0o600);
        assert_eq!(s.get("m1").unwrap(), Some((Pending, clean_key(&pubkey(0)))));
    }

    #[test]
    fn put_moves_the_key_out_of_other_states() {
        let (dir, s) = store_with(&[(Pending, "m1")]);
        s.put("m1", Accepted, &pubkey(0)).unwrap();
        assert!(!dir.path().join("pki/minions_pre/m1").exists());
        assert_eq!(s.get("m1").unwrap().map(|(st, _)| st), Some(Accepted));
        s.put("m1", Rejected, &pubkey(0)).unwrap();
        assert_eq!(s.list_all().unwrap().accepted, Vec::<String>::new());
        assert_eq!(s.get("m1").unwrap().map(|(st, _)| st), Some(Rejected));
    }

    #[test]
    fn put_denied_leaves_the_accepted_key() {
        let (_d, s) = store_with(&[(Accepted, "m1")]);
        s.put("m1", Denied, &pubkey(5)).unwrap();
        assert_eq!(s.get("m1").unwrap().map(|(st, _)| st), Some(Accepted));
        assert_eq!(s.get_denied("m1").unwrap(), Some(clean_key(&pubkey(5))));
    }

    #[test]
    fn first_denied_key_is_kept_like_salt() {
        let (_d, s) = store_with(&[(Accepted, "m1")]);
        assert!(s.add_denied("m1", &pubkey(5)).unwrap());
        assert!(!s.add_denied("m1", &pubkey(6)).unwrap());
        assert_eq!(s.get_denied("m1").unwrap(), Some(clean_key(&pubkey(5))));
        assert!(
            s.get("m1").unwrap().is_some(),
            "denied keys are not the id's key"
        );
    }

    #[test]
    fn rejected_wins_when_an_id_is_in_several_states() {
        let (dir, s) = store_with(&[(Accepted, "m1")]);
        fs::write(dir.path().join("pki/minions_rejected/m1"), pubkey(3)).unwrap();
        assert_eq!(s.get("m1").unwrap().map(|(st, _)| st), Some(Rejected));
    }

    #[test]
    fn invalid_ids_are_refused_everywhere() {
        let (_d, s) = store_with(&[]);
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b"] {
            assert!(matches!(s.get(bad), Err(Error::InvalidId(_))), "{bad:?}");
            assert!(
                matches!(s.put(bad, Accepted, &pubkey(0)), Err(Error::InvalidId(_))),
                "{bad:?}"
            );
            assert!(
                matches!(s.add_denied(bad, &pubkey(0)), Err(Error::InvalidId(_))),
                "{bad:?}"
            );
            assert!(matches!(s.delete(bad), Err(Error::InvalidId(_))), "{bad:?}");
        }
    }

    /// Every file under `root` outside `skip`, relative to `root`, with its content.
    fn files_outside(root: &Path, skip: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.starts_with(skip) {
                    continue;
                }
                let meta = fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(root).unwrap().to_path_buf();
                    out.push((rel, fs::read(&path).unwrap_or_default()));
                }
            }
        }
        out.sort();
        out
    }

    /// CVE-2020-11652: no name that reaches the key store (a minion id from `_auth` or an
    /// encrypted request, a key name given to salt-key or halite-key, a signing-pair or
    /// signature-file name) reads, writes, moves or deletes anything outside the pki
    /// directory, and a symlink planted in a state directory is neither followed nor
    /// written through.
    #[test]
    fn cve_2020_11652_no_key_name_reaches_outside_the_pki_directory() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("a/b/pki");
        let s = KeyStore::open(&pki).unwrap();
        let victim = dir.path().join("a/b/victim");
        fs::write(&victim, pubkey(1)).unwrap();
        let before = files_outside(dir.path(), &pki);
        let absolute = victim.to_str().unwrap().to_owned();
        let names = [
            "../../victim",
            "../victim",
            "x/../../../victim",
            "minions/../../victim",
            absolute.as_str(),
            "..",
            ".",
            "",
            "..\\victim",
            "victim\0",
        ];
        for name in names {
            let refused = |r: Result<()>, op: &str| {
                assert!(
                    matches!(r, Err(Error::InvalidId(_) | Error::InvalidName(_))),
                    "{op}({name:?}) was not refused"
                );
            };
            refused(s.get(name).map(drop), "get");
            refused(s.get_denied(name).map(drop), "get_denied");
            for state in [Accepted, Pending, Rejected, Denied] {
                refused(s.put(name, state, &pubkey(2)), "put");
                refused(s.key_path(state, name).map(drop), "key_path");
            }
            refused(s.add_denied(name, &pubkey(2)).map(drop), "add_denied");
            refused(s.delete(name).map(drop), "delete");
            refused(s.delete_denied(name).map(drop), "delete_denied");
            refused(s.read_local(name).map(drop), "read_local");
            refused(
                s.find_or_create_pair(name, 1024).map(drop),
                "find_or_create_pair",
            );
            refused(
                s.load_or_create_master_keys(name, 1024).map(drop),
                "load_or_create_master_keys",
            );
            // What salt-key's accept, reject and delete do with a selection naming it.
            for action in [Action::Accept, Action::Reject, Action::Delete] {
                let selected = Matches::from_groups([(Pending, vec![name.to_owned()])]);
                refused(
                    s.apply(action, &selected, Include::default()).map(drop),
                    "apply",
                );
            }
        }
        // Signature file names may hold sub-directories, but only inside the pki directory.
        for name in [
            "../victim",
            "sub/../../victim",
            "./../victim",
            absolute.as_str(),
            "",
            ".",
            "..",
        ] {
            assert!(
                matches!(
                    s.write_pubkey_signature(name, "sig"),
                    Err(Error::InvalidName(_))
                ),
                "write_pubkey_signature({name:?}) was not refused"
            );
            assert!(
                matches!(s.read_pubkey_signature(name), Err(Error::InvalidName(_))),
                "read_pubkey_signature({name:?}) was not refused"
            );
        }
        // A symlink to the victim planted as a key file.
        std::os::unix::fs::symlink(&victim, pki.join("minions/evil")).unwrap();
        assert_eq!(s.get("evil").unwrap(), None, "a symlink is not a key");
        s.put("evil", Accepted, &pubkey(3)).unwrap();
        assert!(s.delete("evil").unwrap());
        assert_eq!(
            files_outside(dir.path(), &pki),
            before,
            "something outside the pki directory changed"
        );
    }

    #[test]
    fn delete_removes_accepted_pending_rejected_but_not_denied() {
        let (_d, s) = store_with(&[(Accepted, "m1"), (Denied, "m1")]);
        assert!(s.delete("m1").unwrap());
        assert!(!s.delete("m1").unwrap());
        assert_eq!(s.get("m1").unwrap(), None);
        assert!(s.get_denied("m1").unwrap().is_some());
        assert!(s.delete_denied("m1").unwrap());
    }

    #[test]
    fn list_sorts_ignoring_case_and_skips_junk() {
        let (dir, s) = store_with(&[
            (Accepted, "beta"),
            (Accepted, "Alpha"),
            (Accepted, "gamma"),
            (Accepted, "alpha"),
        ]);
        let acc = dir.path().join("pki/minions");
        fs::write(acc.join(".hidden"), "x").unwrap();
        fs::create_dir(acc.join("subdir")).unwrap();
        std::os::unix::fs::symlink(acc.join("beta"), acc.join("link")).unwrap();
        assert_eq!(
            s.list(Accepted).unwrap(),
            ["Alpha", "alpha", "beta", "gamma"]
        );
    }

    #[test]
    fn missing_state_dirs_list_empty_and_are_created_on_write() {
        let dir = tempfile::tempdir().unwrap();
        let s = KeyStore::at(dir.path().join("nope"));
        assert_eq!(s.list_all().unwrap(), KeyLists::default());
        assert_eq!(s.get("m").unwrap(), None);
        s.put("m", Pending, &pubkey(0)).unwrap();
        assert_eq!(s.list(Pending).unwrap(), ["m"]);
    }

    #[test]
    fn local_keys_are_regular_pem_and_pub_files() {
        let (dir, s) = store_with(&[]);
        s.load_or_create_master_keys("mm", 2048).unwrap();
        fs::write(dir.path().join("pki/notes.txt"), "x").unwrap();
        assert_eq!(s.local_keys().unwrap(), ["mm.pem", "mm.pub"]);
        assert!(s
            .read_local("mm.pub")
            .unwrap()
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_eq!(
            s.read_local("master.pub").unwrap(),
            None,
            "symlinks are not read"
        );
    }

    #[test]
    fn fingerprint_hashes_the_whole_text() {
        // sha256("abc"), from Python's hashlib.
        assert_eq!(
            key_fingerprint("abc", "sha256").unwrap(),
            "ba:78:16:bf:8f:01:cf:ea:41:41:40:de:5d:ae:22:23:b0:03:61:a3:96:17:7a:9c:b4:10:ff:61:f2:00:15:ad"
        );
        assert!(matches!(
            key_fingerprint("abc", "nope"),
            Err(Error::UnsupportedHash(_))
        ));
    }
}
