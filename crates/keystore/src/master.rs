//! The master's own key pair in Salt 3008's layout (`salt/crypt.py:MasterKeys._setup_keys`).
//!
//! Salt 3008 keeps the pair as `<master_id>.pem`/`<master_id>.pub` (`master_id` is the `id`
//! option without its `_master` suffix) with `master.pem`/`master.pub` symlinks to them, so
//! older tooling still finds `master.pem`. Both files are mode 0400; the private key is PKCS#1
//! PEM, the public key SubjectPublicKeyInfo PEM with a trailing newline.

use crate::fsio::{read_key_file, remove_entry, write_atomic, Replace};
use crate::{Error, KeyStore, Result};
use halite_proto::auth::valid_id;
use halite_proto::pem::clean_key;
use halite_proto::rsa::{PrivateKey, PublicKey};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Mode of both halves of a key pair Salt writes through its `master_keys` bank.
const KEY_PAIR_MODE: u32 = 0o400;

impl KeyStore {
    /// Loads the master key pair, creating it on first start, and returns the private key with
    /// the public key in `clean_key` form (what the master sends to minions).
    ///
    /// Order: `<master_id>.pem`; else a legacy `master.pem`, which is migrated to the 3008
    /// layout (`<master_id>.*` files plus `master.*` symlinks); else a new `keysize`-bit pair.
    /// A missing `<master_id>.pub` is rewritten from the private key.
    ///
    /// Deviation from Salt, for safety: when `master.pem` is a symlink to another id's key
    /// (the `id` option changed), Salt generates a brand-new key and every minion that pinned
    /// the old one stops trusting the master; Halite migrates the existing key instead.
    pub fn load_or_create_master_keys(
        &self,
        master_id: &str,
        keysize: u32,
    ) -> Result<(PrivateKey, String)> {
        if !valid_id(master_id) {
            return Err(Error::InvalidId(master_id.to_owned()));
        }
        if master_id == "master" {
            // The id-named pair is `master.pem` itself: no migration, no symlinks.
            let key = self.find_or_create_pair(master_id, keysize)?;
            let public = self.public_for(master_id, &key)?;
            return Ok((key, public));
        }
        if let Some((key, public)) = self.load_pair(master_id)? {
            return Ok((key, public));
        }
        if let Some(key) = self.migrate_legacy(master_id)? {
            let public = self.public_for(master_id, &key)?;
            return Ok((key, public));
        }
        let key = self.find_or_create_pair(master_id, keysize)?;
        self.link_legacy_names(master_id)?;
        let public = self.public_for(master_id, &key)?;
        Ok((key, public))
    }

    /// `MasterKeys.find_or_create_keys`: loads `<name>.pem` from the pki directory, or
    /// generates a `keysize`-bit pair and writes `<name>.pem` and `<name>.pub` (both 0400).
    /// If another process creates the pair concurrently, its key wins and is returned.
    pub fn find_or_create_pair(&self, name: &str, keysize: u32) -> Result<PrivateKey> {
        if !valid_id(name) {
            return Err(Error::InvalidId(name.to_owned()));
        }
        let pem_path = self.pki_dir.join(format!("{name}.pem"));
        if let Some(text) = read_key_file(&pem_path)? {
            return parse_private(&pem_path, &text);
        }
        crate::fsio::ensure_dir(&self.pki_dir, 0o700)?;
        tracing::info!("Generating key-pair for {}", pem_path.display());
        let key = PrivateKey::generate(keysize).map_err(|source| Error::Key {
            path: pem_path.clone(),
            source,
        })?;
        let private = key.to_pem().map_err(|source| Error::Key {
            path: pem_path.clone(),
            source,
        })?;
        let written = write_atomic(
            &self.pki_dir,
            &format!("{name}.pem"),
            private.as_bytes(),
            KEY_PAIR_MODE,
            Replace::Never,
        )?;
        if !written {
            let text = read_key_file(&pem_path)?.ok_or_else(|| missing(&pem_path))?;
            return parse_private(&pem_path, &text);
        }
        self.write_public(name, &key)?;
        Ok(key)
    }

    /// The `<id>.pem` pair if present (the public half is recreated when missing).
    fn load_pair(&self, master_id: &str) -> Result<Option<(PrivateKey, String)>> {
        let pem_path = self.pki_dir.join(format!("{master_id}.pem"));
        let Some(text) = read_key_file(&pem_path)? else {
            return Ok(None);
        };
        let key = parse_private(&pem_path, &text)?;
        let public = self.public_for(master_id, &key)?;
        Ok(Some((key, public)))
    }

    /// Moves a `master.pem` (regular file or symlink) to `<master_id>.pem` and links the old
    /// names to the new files.
    fn migrate_legacy(&self, master_id: &str) -> Result<Option<PrivateKey>> {
        let legacy = self.pki_dir.join("master.pem");
        let text = match fs::read_to_string(&legacy) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(crate::fsio::io_err(&legacy, e)),
        };
        let key = parse_private(&legacy, &text)?;
        let legacy_pub = self.pki_dir.join("master.pub");
        let public = match fs::read_to_string(&legacy_pub) {
            Ok(public) => {
                check_pair(&legacy, &legacy_pub, &key, &public)?;
                Some(public)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(crate::fsio::io_err(&legacy_pub, e)),
        };
        let pem_name = format!("{master_id}.pem");
        write_atomic(
            &self.pki_dir,
            &pem_name,
            text.as_bytes(),
            KEY_PAIR_MODE,
            Replace::Always,
        )?;
        match public {
            Some(public) => {
                let pub_name = format!("{master_id}.pub");
                write_atomic(
                    &self.pki_dir,
                    &pub_name,
                    public.as_bytes(),
                    KEY_PAIR_MODE,
                    Replace::Always,
                )?;
            }
            None => {
                self.write_public(master_id, &key)?;
            }
        }
        self.link_legacy_names(master_id)?;
        tracing::info!(pki_dir = %self.pki_dir.display(), master_id, "Migrated master.pem to the id-named key pair");
        Ok(Some(key))
    }

    /// Points `master.pem`/`master.pub` at `<master_id>.pem`/`.pub` (absolute targets when the
    /// pki directory is absolute, as Salt writes them).
    fn link_legacy_names(&self, master_id: &str) -> Result<()> {
        for ext in ["pem", "pub"] {
            let link = self.pki_dir.join(format!("master.{ext}"));
            let target_name = format!("{master_id}.{ext}");
            let target = if self.pki_dir.is_absolute() {
                self.pki_dir.join(&target_name)
            } else {
                PathBuf::from(&target_name)
            };
            if fs::read_link(&link).is_ok_and(|t| t == target) {
                continue;
            }
            remove_entry(&link)?;
            std::os::unix::fs::symlink(&target, &link)
                .map_err(|e| crate::fsio::io_err(&link, e))?;
        }
        Ok(())
    }

    /// The clean public key of the pair named `name`, rewriting `<name>.pub` from the private
    /// key when it is missing (`MasterKeys.get_pub_str`).
    fn public_for(&self, name: &str, key: &PrivateKey) -> Result<String> {
        let pub_path = self.pki_dir.join(format!("{name}.pub"));
        let public = match read_key_file(&pub_path)? {
            Some(p) => p,
            None => self.write_public(name, key)?,
        };
        check_pair(
            &self.pki_dir.join(format!("{name}.pem")),
            &pub_path,
            key,
            &public,
        )?;
        Ok(clean_key(&public))
    }

    fn write_public(&self, name: &str, key: &PrivateKey) -> Result<String> {
        let pub_path = self.pki_dir.join(format!("{name}.pub"));
        let public = key
            .public_key()
            .and_then(|p| p.to_pem())
            .map_err(|source| Error::Key {
                path: pub_path.clone(),
                source,
            })?;
        write_atomic(
            &self.pki_dir,
            &format!("{name}.pub"),
            public.as_bytes(),
            KEY_PAIR_MODE,
            Replace::Always,
        )?;
        Ok(public)
    }
}

fn parse_private(path: &Path, text: &str) -> Result<PrivateKey> {
    PrivateKey::from_pem(text.as_bytes()).map_err(|source| Error::Key {
        path: path.to_path_buf(),
        source,
    })
}

fn missing(path: &Path) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::NotFound),
    }
}

/// Refuses a public key file that does not belong to the private key: minions would pin a key
/// the master cannot decrypt with.
fn check_pair(pem_path: &Path, pub_path: &Path, key: &PrivateKey, public: &str) -> Result<()> {
    let on_disk = PublicKey::from_pem(public.as_bytes())
        .and_then(|p| p.to_pem())
        .map_err(|source| Error::Key {
            path: pub_path.to_path_buf(),
            source,
        })?;
    let derived = key
        .public_key()
        .and_then(|p| p.to_pem())
        .map_err(|source| Error::Key {
            path: pem_path.to_path_buf(),
            source,
        })?;
    if on_disk != derived {
        return Err(Error::MasterKeyMismatch {
            private: pem_path.to_path_buf(),
            public: pub_path.to_path_buf(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn first_start_writes_id_named_pair_and_master_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (key, public) = store.load_or_create_master_keys("mm", 2048).unwrap();
        assert_eq!(key.bits(), 2048);
        let pki = dir.path();
        let pem = fs::read_to_string(pki.join("mm.pem")).unwrap();
        assert!(
            pem.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"),
            "PKCS#1 like Salt"
        );
        let pub_text = fs::read_to_string(pki.join("mm.pub")).unwrap();
        assert!(
            pub_text.starts_with("-----BEGIN PUBLIC KEY-----\n") && pub_text.ends_with("-----\n")
        );
        assert_eq!(public, clean_key(&pub_text));
        assert_eq!(mode(&pki.join("mm.pem")), 0o400);
        assert_eq!(mode(&pki.join("mm.pub")), 0o400);
        assert_eq!(
            fs::read_link(pki.join("master.pem")).unwrap(),
            pki.join("mm.pem")
        );
        assert_eq!(
            fs::read_link(pki.join("master.pub")).unwrap(),
            pki.join("mm.pub")
        );
    }

    #[test]
    fn second_start_loads_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, first) = store.load_or_create_master_keys("mm", 2048).unwrap();
        let (_, second) = store.load_or_create_master_keys("mm", 2048).unwrap();
        assert_eq!(first, second);
    }

    #[test]
    fn legacy_master_pem_is_migrated_not_regenerated() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path();
        let key = PrivateKey::generate(2048).unwrap();
        fs::write(pki.join("master.pem"), key.to_pem().unwrap()).unwrap();
        fs::write(
            pki.join("master.pub"),
            key.public_key().unwrap().to_pem().unwrap(),
        )
        .unwrap();
        let store = KeyStore::open(pki).unwrap();
        let (_, public) = store.load_or_create_master_keys("mm", 2048).unwrap();
        assert_eq!(
            public,
            clean_key(&key.public_key().unwrap().to_pem().unwrap())
        );
        assert!(fs::symlink_metadata(pki.join("master.pem"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_to_string(pki.join("mm.pem")).unwrap(),
            key.to_pem().unwrap()
        );
    }

    #[test]
    fn changed_id_keeps_the_key_master_pem_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, old) = store.load_or_create_master_keys("old", 2048).unwrap();
        let (_, new) = store.load_or_create_master_keys("new", 2048).unwrap();
        assert_eq!(old, new);
        assert_eq!(
            fs::read_link(dir.path().join("master.pub")).unwrap(),
            dir.path().join("new.pub")
        );
    }

    #[test]
    fn missing_public_half_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, public) = store.load_or_create_master_keys("mm", 2048).unwrap();
        fs::remove_file(dir.path().join("mm.pub")).unwrap();
        let (_, again) = store.load_or_create_master_keys("mm", 2048).unwrap();
        assert_eq!(public, again);
        assert!(dir.path().join("mm.pub").is_file());
    }

    #[test]
    fn mismatched_public_half_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        store.load_or_create_master_keys("mm", 2048).unwrap();
        let other = PrivateKey::generate(2048)
            .unwrap()
            .public_key()
            .unwrap()
            .to_pem()
            .unwrap();
        fs::remove_file(dir.path().join("mm.pub")).unwrap();
        fs::write(dir.path().join("mm.pub"), other).unwrap();
        assert!(matches!(
            store.load_or_create_master_keys("mm", 2048),
            Err(Error::MasterKeyMismatch { .. })
        ));
    }

    #[test]
    fn master_id_must_be_a_plain_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        for bad in ["", "..", "a/b"] {
            assert!(
                matches!(
                    store.load_or_create_master_keys(bad, 2048),
                    Err(Error::InvalidId(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn master_id_master_uses_master_pem_without_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, first) = store.load_or_create_master_keys("master", 2048).unwrap();
        assert!(fs::symlink_metadata(dir.path().join("master.pem"))
            .unwrap()
            .is_file());
        let (_, again) = store.load_or_create_master_keys("master", 2048).unwrap();
        assert_eq!(first, again);
    }

    #[test]
    fn existing_pair_is_loaded_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::at(dir.path());
        let a = store.find_or_create_pair("foo", 2048).unwrap();
        let b = store.find_or_create_pair("foo", 2048).unwrap();
        assert_eq!(a.to_pem().unwrap(), b.to_pem().unwrap());
    }
}
