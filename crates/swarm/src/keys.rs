//! The simulated minions' identities: ids and RSA keys, cached on disk.
//!
//! Layout of the keys directory: `<id>.pem` (the private key as Salt writes `minion.pem`,
//! PKCS#1 PEM, mode 0600) and `<id>.tok` (the key's X9.31 signature of `b"salt"`, the `tok`
//! every request carries: deterministic, so it is computed once). A 2048-bit key takes
//! about 50 ms to generate; a rerun with the same ids and directory generates none.

use crate::Error;
use halite_proto::pem::clean_key;
use halite_proto::rsa::PrivateKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Key size of generated minion keys (Salt's `keysize` default).
pub const KEY_BITS: u32 = 2048;

/// What a simulated minion needs to sign in and send requests.
#[derive(Debug)]
pub struct MinionKey {
    /// The minion id.
    pub id: String,
    /// The private key.
    pub key: PrivateKey,
    /// The public key in `clean_key` form (what `_auth` carries).
    pub pub_clean: String,
    /// X9.31 signature of `b"salt"` (`AsyncAuth.gen_token`).
    pub tok: Vec<u8>,
}

/// The ids of a swarm: `<prefix><index>` for index `0..count`.
///
/// # Errors
/// [`Error::Usage`] when an id would not be a valid Salt minion id.
pub fn minion_ids(prefix: &str, count: usize) -> Result<Vec<String>, Error> {
    let ids: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    if let Some(bad) = ids.iter().find(|id| !halite_proto::auth::valid_id(id)) {
        return Err(Error::Usage(format!(
            "{bad:?} is not a valid minion id (check --id-prefix)"
        )));
    }
    Ok(ids)
}

/// How many keys were read and how many generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyCounts {
    /// Keys found in the directory.
    pub loaded: usize,
    /// Keys generated (and written) now.
    pub generated: usize,
}

/// Where keys of `bits` bits are cached under `base`: `base` itself for [`KEY_BITS`] (Salt's
/// `keysize`), `base/rsa<bits>` for any other size.
pub fn cache_dir(base: &Path, bits: u32) -> PathBuf {
    if bits == KEY_BITS {
        base.to_owned()
    } else {
        base.join(format!("rsa{bits}"))
    }
}

/// Loads the key of every id from `dir`, generating (and caching) the missing ones, on
/// `threads` OS threads. The result is in the order of `ids`.
pub fn load_or_generate(
    dir: &Path,
    ids: &[String],
    bits: u32,
    threads: usize,
) -> Result<(Vec<MinionKey>, KeyCounts), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        what: format!("creating {}", dir.display()),
        source: e,
    })?;
    let next = AtomicUsize::new(0);
    let generated = AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<MinionKey, Error>>> = Vec::new();
    slots.resize_with(ids.len(), || None);
    let results = std::sync::Mutex::new(slots);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else { break };
                let r = load_one(dir, id, bits, &generated);
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(r);
                }
            });
        }
    });
    let slots = results
        .into_inner()
        .map_err(|_| Error::Usage("key loader panicked".into()))?;
    let mut keys = Vec::with_capacity(ids.len());
    for slot in slots {
        keys.push(slot.ok_or_else(|| Error::Usage("key loader stopped early".into()))??);
    }
    let generated = generated.into_inner();
    Ok((
        keys,
        KeyCounts {
            loaded: ids.len() - generated,
            generated,
        },
    ))
}

fn load_one(dir: &Path, id: &str, bits: u32, generated: &AtomicUsize) -> Result<MinionKey, Error> {
    let pem_path = dir.join(format!("{id}.pem"));
    let tok_path = dir.join(format!("{id}.tok"));
    let key = match std::fs::read(&pem_path) {
        Ok(pem) => PrivateKey::from_pem(&pem).map_err(|e| Error::Key {
            path: pem_path.clone(),
            source: e,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = PrivateKey::generate(bits).map_err(|e| Error::Key {
                path: pem_path.clone(),
                source: e,
            })?;
            let pem = key.to_pem().map_err(|e| Error::Key {
                path: pem_path.clone(),
                source: e,
            })?;
            write_atomic(&pem_path, pem.as_bytes())?;
            generated.fetch_add(1, Ordering::Relaxed);
            key
        }
        Err(e) => {
            return Err(Error::Io {
                what: format!("reading {}", pem_path.display()),
                source: e,
            })
        }
    };
    let public = key.public_key().map_err(|e| Error::Key {
        path: pem_path.clone(),
        source: e,
    })?;
    let pub_pem = public.to_pem().map_err(|e| Error::Key {
        path: pem_path.clone(),
        source: e,
    })?;
    let cached = std::fs::read(&tok_path)
        .ok()
        .filter(|t| public.x931_verify(t, b"salt"));
    let tok = match cached {
        Some(t) => t,
        None => {
            let t = key.x931_sign(b"salt").map_err(|e| Error::Key {
                path: pem_path.clone(),
                source: e,
            })?;
            write_atomic(&tok_path, &t)?;
            t
        }
    };
    Ok(MinionKey {
        id: id.to_owned(),
        key,
        pub_clean: clean_key(&pub_pem),
        tok,
    })
}

/// Writes `path` through a temporary file and a rename, mode 0600, so a reader (or a
/// concurrent swarm) never sees half a key.
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), Error> {
    let tmp: PathBuf = path.with_extension(format!("tmp{}", std::process::id()));
    let err = |e| Error::Io {
        what: format!("writing {}", path.display()),
        source: e,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(data).map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefix_and_index_and_must_be_valid() {
        assert_eq!(minion_ids("m-", 3).unwrap(), ["m-0", "m-1", "m-2"]);
        assert!(minion_ids("", 1).is_ok());
        assert!(matches!(minion_ids("../x", 1), Err(Error::Usage(_))));
    }

    #[test]
    fn keys_are_generated_once_then_loaded_with_a_valid_tok() {
        let dir = tempfile::tempdir().unwrap();
        let ids = minion_ids("k", 2).unwrap();
        let (first, counts) = load_or_generate(dir.path(), &ids, KEY_BITS, 2).unwrap();
        assert_eq!(
            counts,
            KeyCounts {
                loaded: 0,
                generated: 2
            }
        );
        let (again, counts) = load_or_generate(dir.path(), &ids, KEY_BITS, 1).unwrap();
        assert_eq!(
            counts,
            KeyCounts {
                loaded: 2,
                generated: 0
            }
        );
        for (a, b) in first.iter().zip(&again) {
            assert_eq!(a.id, b.id);
            assert_eq!(a.pub_clean, b.pub_clean);
            assert_eq!(a.tok, b.tok);
            assert!(a.key.public_key().unwrap().x931_verify(&a.tok, b"salt"));
        }
        assert_ne!(first[0].pub_clean, first[1].pub_clean);
        let pem = std::fs::read_to_string(dir.path().join("k0.pem")).unwrap();
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    }

    #[test]
    fn a_corrupt_tok_is_recomputed_and_a_corrupt_key_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let ids = minion_ids("c", 1).unwrap();
        let (keys, _) = load_or_generate(dir.path(), &ids, KEY_BITS, 1).unwrap();
        std::fs::write(dir.path().join("c0.tok"), b"junk").unwrap();
        let (again, _) = load_or_generate(dir.path(), &ids, KEY_BITS, 1).unwrap();
        assert_eq!(again[0].tok, keys[0].tok);
        std::fs::write(dir.path().join("c0.pem"), b"not a key").unwrap();
        assert!(matches!(
            load_or_generate(dir.path(), &ids, KEY_BITS, 1),
            Err(Error::Key { .. })
        ));
    }
}
