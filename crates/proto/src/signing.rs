//! Signed master public keys (`master_sign_pubkey`, salt-protocol.md §3.7): the `pub_sig`
//! a master adds to its auth replies and the signature file `salt-key --gen-signature` writes.
//!
//! The signed message is the master's public key in `clean_key` form — exactly the text of the
//! reply's `pub_key` — signed with RSASSA-PKCS#1 v1.5 by the *signing* key pair
//! (`master_sign.pem`), not by the master key. A minion with `verify_master_pubkey_sign`
//! base64-decodes `pub_sig` and verifies it with its copy of `master_sign.pub`
//! (`AsyncAuth.verify_pubkey_sig`); [`verify_master_pub`] is that check.
//!
//! Formats, as Salt produces them:
//! - signature text: `binascii.b2a_base64(sig)`, standard alphabet with padding, one line
//!   ending in `\n` ([`b2a_base64`]);
//! - computed `pub_sig` (`AuthFuncs._auth_impl`): that text as *bytes* (msgpack `bin`), signed
//!   with the algorithm the minion named in its request (`sig_algo`);
//! - precomputed `pub_sig` (`master_use_pubkey_signature`): the signature file's text in
//!   `clean_key` form (no trailing newline) as a *string*, the same whatever the minion asked.
//!
//! What this module does not do: read or write files (halite-keystore does) or decide whether
//! signing is on (the master's configuration does).
//!
//! Invariant: a [`PubKeySignature`] signs at most once per algorithm; auth requests only
//! copy the cached value.

use crate::pem::clean_key;
use crate::rsa::{PrivateKey, PublicKey, SigAlgo};
use crate::value::{bin, s};
use crate::{Error, Result, Value};
use base64::Engine as _;
use std::sync::OnceLock;

/// The PKCS#1 v1.5 signature of `clean_key(master_pub)` with `sign_key`
/// (`PrivateKey.sign(pub_key_str, algorithm)`).
pub fn sign_master_pub(sign_key: &PrivateKey, master_pub: &str, algo: SigAlgo) -> Result<Vec<u8>> {
    sign_key.sign(clean_key(master_pub).as_bytes(), algo)
}

/// `binascii.b2a_base64`: standard base64 with padding and a trailing newline.
pub fn b2a_base64(data: &[u8]) -> String {
    let mut text = base64::engine::general_purpose::STANDARD.encode(data);
    text.push('\n');
    text
}

/// `binascii.a2b_base64` as minions call it: ASCII whitespace (the trailing newline, a file's
/// line breaks) is ignored; anything else that is not standard base64 is an error.
pub fn a2b_base64(text: &[u8]) -> Result<Vec<u8>> {
    let compact: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|e| Error::Malformed(format!("signature is not base64: {e}")))
}

/// The contents of the signature file `salt-key --gen-signature` writes
/// (`MasterKeys.gen_signature`): `b2a_base64(sign(clean_key(master_pub)))`.
pub fn signature_file_text(
    sign_key: &PrivateKey,
    master_pub: &str,
    algo: SigAlgo,
) -> Result<String> {
    Ok(b2a_base64(&sign_master_pub(sign_key, master_pub, algo)?))
}

/// The minion's check (`verify_pubkey_sig`): `pub_sig` (base64 text, `str` or `bin`) is a
/// valid signature of the offered `master_pub` by the holder of `verify_key`.
pub fn verify_master_pub(
    verify_key: &PublicKey,
    master_pub: &str,
    pub_sig: &[u8],
    algo: SigAlgo,
) -> bool {
    match a2b_base64(pub_sig) {
        Ok(sig) => verify_key.verify(master_pub.as_bytes(), &sig, algo),
        Err(_) => false,
    }
}

/// What a signing master attaches to its auth replies as `pub_sig`.
#[derive(Debug)]
pub struct PubKeySignature {
    source: Source,
}

#[derive(Debug)]
enum Source {
    /// `master_sign_pubkey` with the signing pair on the master: signed per algorithm,
    /// once each.
    Computed {
        sign_key: PrivateKey,
        master_pub: String,
        sha1: OnceLock<Value>,
        sha224: OnceLock<Value>,
    },
    /// `master_use_pubkey_signature`: the signature file's text, sent as is.
    Precomputed(Value),
}

impl PubKeySignature {
    /// Signs `master_pub` (the text sent as `pub_key`) with `sign_key`, lazily and once per
    /// algorithm a minion asks for.
    pub fn computed(sign_key: PrivateKey, master_pub: &str) -> Self {
        PubKeySignature {
            source: Source::Computed {
                sign_key,
                master_pub: clean_key(master_pub),
                sha1: OnceLock::new(),
                sha224: OnceLock::new(),
            },
        }
    }

    /// Sends the signature file's text (in `clean_key` form) to every minion. `None` when the
    /// text is empty (Salt then has nothing to send).
    pub fn precomputed(file_text: &str) -> Option<Self> {
        let text = clean_key(file_text);
        (!text.is_empty()).then(|| PubKeySignature {
            source: Source::Precomputed(s(text)),
        })
    }

    /// Whether this is a precomputed signature.
    pub fn is_precomputed(&self) -> bool {
        matches!(self.source, Source::Precomputed(_))
    }

    /// The `pub_sig` value for a minion that asked for `algo`.
    pub fn value(&self, algo: SigAlgo) -> Result<Value> {
        match &self.source {
            Source::Precomputed(v) => Ok(v.clone()),
            Source::Computed {
                sign_key,
                master_pub,
                sha1,
                sha224,
            } => {
                let cell = match algo {
                    SigAlgo::Pkcs1v15Sha1 => sha1,
                    SigAlgo::Pkcs1v15Sha224 => sha224,
                };
                if let Some(v) = cell.get() {
                    return Ok(v.clone());
                }
                let text = signature_file_text(sign_key, master_pub, algo)?;
                // Two first requests racing both sign; either result is the same signature.
                Ok(cell.get_or_init(|| bin(text.into_bytes())).clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{bytes_of, str_of};
    use std::io::Write;
    use std::process::Command;
    use std::sync::OnceLock as Once;

    fn keys() -> &'static (PrivateKey, PrivateKey) {
        static K: Once<(PrivateKey, PrivateKey)> = Once::new();
        K.get_or_init(|| {
            (
                PrivateKey::generate(2048).unwrap(),
                PrivateKey::generate(2048).unwrap(),
            )
        })
    }

    /// The master key as the master sends it (`clean_key` of the `.pub` file).
    fn master_pub() -> String {
        clean_key(&keys().0.public_key().unwrap().to_pem().unwrap())
    }

    #[test]
    fn base64_is_pythons_b2a_base64_and_a2b_ignores_whitespace() {
        // binascii.b2a_base64(b"\x00\xffsalt") == b"AP9zYWx0\n"
        assert_eq!(b2a_base64(b"\x00\xffsalt"), "AP9zYWx0\n");
        assert_eq!(a2b_base64(b"AP9z\r\nYWx0\n").unwrap(), b"\x00\xffsalt");
        assert!(a2b_base64(b"AP9z*YWx0").is_err());
    }

    #[test]
    fn signature_verifies_with_the_signing_pub_for_each_algorithm() {
        let (master, signer) = keys();
        let verify = signer.public_key().unwrap();
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            let text = signature_file_text(signer, &master_pub(), algo).unwrap();
            assert!(text.ends_with('\n') && text.len() == 345, "{text:?}");
            assert!(verify_master_pub(
                &verify,
                &master_pub(),
                text.as_bytes(),
                algo
            ));
            let other = match algo {
                SigAlgo::Pkcs1v15Sha1 => SigAlgo::Pkcs1v15Sha224,
                SigAlgo::Pkcs1v15Sha224 => SigAlgo::Pkcs1v15Sha1,
            };
            assert!(!verify_master_pub(
                &verify,
                &master_pub(),
                text.as_bytes(),
                other
            ));
            let by_master = master.public_key().unwrap();
            assert!(!verify_master_pub(
                &by_master,
                &master_pub(),
                text.as_bytes(),
                algo
            ));
        }
    }

    #[test]
    fn the_signed_message_is_the_clean_key_not_the_file_text() {
        let (master, signer) = keys();
        let file_text = master.public_key().unwrap().to_pem().unwrap();
        assert!(file_text.ends_with('\n'));
        let text = signature_file_text(signer, &file_text, SigAlgo::Pkcs1v15Sha1).unwrap();
        let verify = signer.public_key().unwrap();
        assert!(verify_master_pub(
            &verify,
            &master_pub(),
            text.as_bytes(),
            SigAlgo::Pkcs1v15Sha1
        ));
        assert!(!verify_master_pub(
            &verify,
            &file_text,
            text.as_bytes(),
            SigAlgo::Pkcs1v15Sha1
        ));
    }

    /// What a stock minion runs, in OpenSSL terms: the clean key, the decoded signature and
    /// `master_sign.pub` through `openssl dgst -verify`.
    #[test]
    fn openssl_verifies_the_signature_of_the_clean_key() {
        let (_, signer) = keys();
        let dir = std::env::temp_dir().join(format!("halite-signing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, data: &[u8]| {
            let path = dir.join(name);
            std::fs::File::create(&path)
                .unwrap()
                .write_all(data)
                .unwrap();
            path
        };
        let sign_pub = write(
            "master_sign.pub",
            signer.public_key().unwrap().to_pem().unwrap().as_bytes(),
        );
        let message = write("master.pub.clean", master_pub().as_bytes());
        for (algo, digest) in [
            (SigAlgo::Pkcs1v15Sha1, "-sha1"),
            (SigAlgo::Pkcs1v15Sha224, "-sha224"),
        ] {
            let sig = PubKeySignature::computed(signer.clone(), &master_pub())
                .value(algo)
                .unwrap();
            let sig = a2b_base64(bytes_of(&sig).unwrap()).unwrap();
            let sig_path = write("sig.bin", &sig);
            let out = Command::new("openssl")
                .args(["dgst", digest, "-verify"])
                .arg(&sign_pub)
                .arg("-signature")
                .arg(&sig_path)
                .arg(&message)
                .output()
                .expect("openssl is installed");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "Verified OK",
                "{digest}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn computed_value_is_base64_bytes_cached_per_algorithm() {
        let (_, signer) = keys();
        let sig = PubKeySignature::computed(signer.clone(), &master_pub());
        assert!(!sig.is_precomputed());
        let sha1 = sig.value(SigAlgo::Pkcs1v15Sha1).unwrap();
        assert!(matches!(sha1, Value::Binary(_)), "Salt sends bytes");
        assert_eq!(sig.value(SigAlgo::Pkcs1v15Sha1).unwrap(), sha1);
        let sha224 = sig.value(SigAlgo::Pkcs1v15Sha224).unwrap();
        assert_ne!(sha1, sha224);
        assert!(bytes_of(&sha1).unwrap().ends_with(b"\n"));
    }

    #[test]
    fn precomputed_value_is_the_clean_file_text_as_a_string() {
        let sig = PubKeySignature::precomputed("QUJD\nREVG\n\n").unwrap();
        assert!(sig.is_precomputed());
        for algo in [SigAlgo::Pkcs1v15Sha1, SigAlgo::Pkcs1v15Sha224] {
            let v = sig.value(algo).unwrap();
            assert_eq!(str_of(&v), Some("QUJD\nREVG"));
        }
        assert!(PubKeySignature::precomputed(" \n").is_none());
    }
}
