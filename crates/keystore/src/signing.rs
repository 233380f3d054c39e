//! The files of signed master public keys (`master_sign_pubkey`): the signing pair
//! `<master_sign_key_name>.pem/.pub` ([`KeyStore::find_or_create_pair`]) and the signature
//! file `master_pubkey_signature` (default `<master id>_pubkey_signature`) that
//! `salt-key --gen-signature` writes and a master with `master_use_pubkey_signature` reads.
//!
//! Salt stores the signature through its `master_keys` cache bank (`localfs_key`): a regular
//! file (a symlink does not count), mode 0400, holding `b2a_base64(signature)` with its
//! trailing newline; it is read back in `clean_key` form. The name may be a relative path
//! below the directory (Salt's `clean_path(..., subdir=True)`), never an absolute one or one
//! with `..`.

use crate::fsio::{ensure_dir, read_key_file, write_atomic, Replace};
use crate::{Error, KeyStore, Result};
use halite_proto::pem::clean_key;
use std::path::{Component, Path, PathBuf};

/// Mode of the signature file (the `master_keys` bank's `chmod 0400`).
const SIGNATURE_MODE: u32 = 0o400;
/// Mode of directories created for it (`os.makedirs` under umask 022).
const SIGNATURE_DIR_MODE: u32 = 0o755;

impl KeyStore {
    /// Where the signature file `name` lives in this directory.
    pub fn pubkey_signature_path(&self, name: &str) -> Result<PathBuf> {
        Ok(self.pki_dir.join(relative_name(name)?))
    }

    /// The signature file's text in `clean_key` form, or `None` when there is no such
    /// regular file.
    pub fn read_pubkey_signature(&self, name: &str) -> Result<Option<String>> {
        let path = self.pubkey_signature_path(name)?;
        Ok(read_key_file(&path)?.map(|text| clean_key(&text)))
    }

    /// Writes the signature file `name` (mode 0400), creating missing directories (0755).
    /// An existing file is kept: answers `false` and writes nothing.
    pub fn write_pubkey_signature(&self, name: &str, text: &str) -> Result<bool> {
        let path = self.pubkey_signature_path(name)?;
        let (Some(dir), Some(file)) = (path.parent(), path.file_name()) else {
            return Err(Error::InvalidName(name.to_owned()));
        };
        let file = file
            .to_str()
            .ok_or_else(|| Error::InvalidName(name.to_owned()))?;
        ensure_dir(dir, SIGNATURE_DIR_MODE)?;
        write_atomic(dir, file, text.as_bytes(), SIGNATURE_MODE, Replace::Never)
    }
}

/// `name` as a path that stays inside the directory: relative, only plain components.
fn relative_name(name: &str) -> Result<&Path> {
    let path = Path::new(name);
    let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
    if name.is_empty() || !plain || name.contains('\0') {
        return Err(Error::InvalidName(name.to_owned()));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn signature_file_is_written_0400_once_and_read_back_clean() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::at(dir.path().join("sigs"));
        assert_eq!(
            store.read_pubkey_signature("m_pubkey_signature").unwrap(),
            None
        );
        assert!(store
            .write_pubkey_signature("m_pubkey_signature", "QUJD\n")
            .unwrap());
        let path = dir.path().join("sigs/m_pubkey_signature");
        assert_eq!(fs::read_to_string(&path).unwrap(), "QUJD\n");
        assert_eq!(mode(&path), 0o400);
        assert_eq!(mode(&dir.path().join("sigs")), 0o755);
        assert!(
            !store
                .write_pubkey_signature("m_pubkey_signature", "REVG\n")
                .unwrap(),
            "an existing signature is kept"
        );
        assert_eq!(
            store.read_pubkey_signature("m_pubkey_signature").unwrap(),
            Some("QUJD".to_owned())
        );
    }

    #[test]
    fn signature_names_stay_inside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::at(dir.path());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "."] {
            assert!(
                matches!(store.read_pubkey_signature(bad), Err(Error::InvalidName(_))),
                "{bad:?}"
            );
        }
        assert!(store.write_pubkey_signature("sub/sig", "QUJD\n").unwrap());
        assert_eq!(
            store.read_pubkey_signature("sub/sig").unwrap().as_deref(),
            Some("QUJD")
        );
    }

    #[test]
    fn a_symlinked_signature_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("elsewhere"), "QUJD\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("sig")).unwrap();
        let store = KeyStore::at(dir.path());
        assert_eq!(store.read_pubkey_signature("sig").unwrap(), None);
    }
}
