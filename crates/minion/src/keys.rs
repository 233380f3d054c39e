//! The minion's key files in `pki_dir`: its own pair (`minion.pem` PKCS#1 and `minion.pub`
//! SubjectPublicKeyInfo, both 0400 as Salt 3008 writes them through its `master_keys` bank),
//! the pinned master key `minion_master.pub` (trust on first use, replaced only by a key
//! whose signature verified), and the verification key `<master_sign_key_name>.pub` copied
//! from the master for `verify_master_pubkey_sign`.

use crate::Error;
use halite_keystore::KeyStore;
use halite_proto::pem::clean_key;
use halite_proto::rsa::PrivateKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Name of the pinned master key file (`AsyncAuth.mpub`).
pub const MASTER_PUB_FILE: &str = "minion_master.pub";

/// The minion's identity: its private key and derived values used on every request.
pub struct MinionKeys {
    /// The private key.
    pub key: PrivateKey,
    /// The public key, `clean_key` form (sent in `_auth`).
    pub pub_clean: String,
    /// X9.31 signature of `b"salt"` (`tok`, deterministic so computed once).
    pub tok: Vec<u8>,
    pki_dir: PathBuf,
}

impl std::fmt::Debug for MinionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MinionKeys")
            .field("pki_dir", &self.pki_dir)
            .finish_non_exhaustive()
    }
}

impl MinionKeys {
    /// Loads `pki_dir/minion.pem`, generating a `keysize`-bit pair on first start.
    pub fn load_or_create(pki_dir: &Path, keysize: u32) -> Result<MinionKeys, Error> {
        if !pki_dir.join("minion.pem").exists() {
            tracing::info!("Generating keys: {}", pki_dir.display());
        }
        let key = KeyStore::at(pki_dir)
            .find_or_create_pair("minion", keysize)
            .map_err(|e| Error::Keys(e.to_string()))?;
        let public = key
            .public_key()
            .and_then(|p| p.to_pem())
            .map_err(|e| Error::Keys(e.to_string()))?;
        let tok = key
            .x931_sign(b"salt")
            .map_err(|e| Error::Keys(e.to_string()))?;
        Ok(MinionKeys {
            key,
            pub_clean: clean_key(&public),
            tok,
            pki_dir: pki_dir.to_owned(),
        })
    }

    /// Path of `minion_master.pub`.
    pub fn master_pub_path(&self) -> PathBuf {
        self.pki_dir.join(MASTER_PUB_FILE)
    }

    /// The pinned master key text, if any.
    pub fn pinned_master(&self) -> Result<Option<String>, Error> {
        let path = self.master_pub_path();
        match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| Error::Keys(format!("{}: not a PEM text file", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io {
                what: "cannot read",
                path,
                source: e,
            }),
        }
    }

    /// The verification key file `<name>.pub` (`master_sign_key_name`): its name, and its
    /// bytes, or `None` when there is no such file (Salt's `os.path.isfile` test: a
    /// directory counts as missing). Read on every sign-in, so a key copied in while the
    /// minion runs is used at the next attempt.
    pub fn sign_key(&self, name: &str) -> Result<(String, Option<Vec<u8>>), Error> {
        let file = format!("{name}.pub");
        let path = self.pki_dir.join(&file);
        if !path.is_file() {
            return Ok((file, None));
        }
        match std::fs::read(&path) {
            Ok(bytes) => Ok((file, Some(bytes))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((file, None)),
            Err(source) => Err(Error::Io {
                what: "cannot read the verification public key",
                path,
                source,
            }),
        }
    }

    /// Pins the master key: writes `minion_master.pub` (clean_key form, as Salt 3008 stores
    /// it) atomically, mode 0644.
    pub fn pin_master(&self, master_clean: &str) -> Result<(), Error> {
        let path = self.master_pub_path();
        let tmp = self
            .pki_dir
            .join(format!(".{MASTER_PUB_FILE}.{}", std::process::id()));
        let io = |source| Error::Io {
            what: "cannot write",
            path: path.clone(),
            source,
        };
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(master_clean.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn key_pair_is_created_once_in_salts_formats_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let keys = MinionKeys::load_or_create(dir.path(), 2048).unwrap();
        let pem = std::fs::read_to_string(dir.path().join("minion.pem")).unwrap();
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let public = std::fs::read_to_string(dir.path().join("minion.pub")).unwrap();
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_eq!(clean_key(&public), keys.pub_clean);
        let mode = std::fs::metadata(dir.path().join("minion.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o400);
        let again = MinionKeys::load_or_create(dir.path(), 2048).unwrap();
        assert_eq!(again.pub_clean, keys.pub_clean);
        assert!(keys
            .key
            .public_key()
            .unwrap()
            .x931_verify(&keys.tok, b"salt"));
    }

    #[test]
    fn master_key_is_pinned_in_clean_form() {
        let dir = tempfile::tempdir().unwrap();
        let keys = MinionKeys::load_or_create(dir.path(), 2048).unwrap();
        assert_eq!(keys.pinned_master().unwrap(), None);
        keys.pin_master("-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----")
            .unwrap();
        let pinned = keys.pinned_master().unwrap().unwrap();
        assert!(pinned.ends_with("-----END PUBLIC KEY-----"));
        let mode = std::fs::metadata(keys.master_pub_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn verification_key_is_read_from_its_name_and_a_directory_counts_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let keys = MinionKeys::load_or_create(dir.path(), 2048).unwrap();
        assert_eq!(
            keys.sign_key("master_sign").unwrap(),
            ("master_sign.pub".to_owned(), None)
        );
        std::fs::write(dir.path().join("signer.pub"), b"PEM").unwrap();
        assert_eq!(
            keys.sign_key("signer").unwrap(),
            ("signer.pub".to_owned(), Some(b"PEM".to_vec()))
        );
        std::fs::create_dir(dir.path().join("master_sign.pub")).unwrap();
        assert_eq!(keys.sign_key("master_sign").unwrap().1, None);
    }
}
