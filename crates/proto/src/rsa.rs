//! The three RSA schemes Salt mixes (`salt/crypt.py`), on OpenSSL:
//!
//! - RSA-OAEP with SHA-1 (or SHA-224) for OAEP and MGF1: key transport ([`PublicKey::encrypt`]).
//! - RSASSA-PKCS#1 v1.5 with SHA-1 (or SHA-224): signatures ([`PrivateKey::sign`]).
//! - Raw RSA with ANSI X9.31 padding, "private encrypt" / "public decrypt": the `tok` that
//!   proves a minion's identity and the auth-reply `sig` ([`PrivateKey::x931_sign`]).
//!
//! Keys are written as Salt writes them: private keys PKCS#1 (`BEGIN RSA PRIVATE KEY`),
//! public keys SubjectPublicKeyInfo (`BEGIN PUBLIC KEY`). All private-key operations run in
//! OpenSSL (constant-time, blinded).

use crate::{Error, Result};
use openssl::encrypt::{Decrypter, Encrypter};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private, Public};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{Signer, Verifier};

/// OpenSSL's `RSA_X931_PADDING`.
fn x931_padding() -> Padding {
    Padding::from_raw(5)
}

/// Key-transport algorithm named in `_auth` requests (`enc_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncAlgo {
    /// `OAEP-SHA1`, Salt's default.
    OaepSha1,
    /// `OAEP-SHA224`, Salt's FIPS choice.
    OaepSha224,
}

/// Signature algorithm named in requests (`sig_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlgo {
    /// `PKCS1v15-SHA1`, Salt's default.
    Pkcs1v15Sha1,
    /// `PKCS1v15-SHA224`, Salt's FIPS choice.
    Pkcs1v15Sha224,
}

impl EncAlgo {
    /// Parses Salt's algorithm name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "OAEP-SHA1" => Ok(Self::OaepSha1),
            "OAEP-SHA224" => Ok(Self::OaepSha224),
            other => Err(Error::UnsupportedAlgorithm(other.into())),
        }
    }
    /// Salt's name for the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            Self::OaepSha1 => "OAEP-SHA1",
            Self::OaepSha224 => "OAEP-SHA224",
        }
    }
    fn md(self) -> MessageDigest {
        match self {
            Self::OaepSha1 => MessageDigest::sha1(),
            Self::OaepSha224 => MessageDigest::sha224(),
        }
    }
}

impl SigAlgo {
    /// Parses Salt's algorithm name.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "PKCS1v15-SHA1" => Ok(Self::Pkcs1v15Sha1),
            "PKCS1v15-SHA224" => Ok(Self::Pkcs1v15Sha224),
            other => Err(Error::UnsupportedAlgorithm(other.into())),
        }
    }
    /// Salt's name for the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pkcs1v15Sha1 => "PKCS1v15-SHA1",
            Self::Pkcs1v15Sha224 => "PKCS1v15-SHA224",
        }
    }
    fn md(self) -> MessageDigest {
        match self {
            Self::Pkcs1v15Sha1 => MessageDigest::sha1(),
            Self::Pkcs1v15Sha224 => MessageDigest::sha224(),
        }
    }
}

/// An RSA private key.
#[derive(Clone)]
pub struct PrivateKey {
    pkey: PKey<Private>,
}

/// An RSA public key.
#[derive(Clone)]
pub struct PublicKey {
    pkey: PKey<Public>,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey({} bits)", self.pkey.bits())
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({} bits)", self.pkey.bits())
    }
}

impl PrivateKey {
    /// Generates a key with `e = 65537`, as `salt.crypt.gen_keys`.
    pub fn generate(bits: u32) -> Result<Self> {
        let rsa = Rsa::generate(bits)?;
        Ok(Self {
            pkey: PKey::from_rsa(rsa)?,
        })
    }

    /// Reads a PEM private key (PKCS#1 or PKCS#8, unencrypted).
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        // The RSA-specific reader first: OpenSSL 3's generic PEM decoder tries every
        // provider's decoders and costs ~70x more per key.
        let pkey = match Rsa::private_key_from_pem(pem) {
            Ok(rsa) => PKey::from_rsa(rsa)?,
            Err(_) => PKey::private_key_from_pem(pem)?,
        };
        pkey.rsa()?;
        Ok(Self { pkey })
    }

    /// The key as Salt writes `*.pem`: PKCS#1 `BEGIN RSA PRIVATE KEY`.
    pub fn to_pem(&self) -> Result<String> {
        let pem = self.pkey.rsa()?.private_key_to_pem()?;
        String::from_utf8(pem).map_err(|e| Error::Rsa(e.to_string()))
    }

    /// The matching public key.
    pub fn public_key(&self) -> Result<PublicKey> {
        let der = self.pkey.public_key_to_der()?;
        PublicKey::from_der(&der)
    }

    /// Key size in bits.
    pub fn bits(&self) -> u32 {
        self.pkey.bits()
    }

    /// RSA-OAEP decryption (`PrivateKey.decrypt`).
    pub fn decrypt(&self, ciphertext: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let mut d = Decrypter::new(&self.pkey)?;
        d.set_rsa_padding(Padding::PKCS1_OAEP)?;
        d.set_rsa_oaep_md(algo.md())?;
        d.set_rsa_mgf1_md(algo.md())?;
        let mut out = vec![0u8; d.decrypt_len(ciphertext)?];
        let n = d.decrypt(ciphertext, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// PKCS#1 v1.5 signature over `data` (`PrivateKey.sign`).
    pub fn sign(&self, data: &[u8], algo: SigAlgo) -> Result<Vec<u8>> {
        let mut s = Signer::new(algo.md(), &self.pkey)?;
        s.set_rsa_padding(Padding::PKCS1)?;
        s.update(data)?;
        Ok(s.sign_to_vec()?)
    }

    /// X9.31 "private encrypt" of `msg` (no hashing), as `salt.utils.rsax931.RSAX931Signer`.
    pub fn x931_sign(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let rsa = self.pkey.rsa()?;
        let k = rsa.size() as usize;
        if msg.len() + 2 > k {
            return Err(Error::Rsa(format!(
                "X9.31 message of {} bytes too long",
                msg.len()
            )));
        }
        let mut out = vec![0u8; k];
        let n = rsa.private_encrypt(msg, &mut out, x931_padding())?;
        out.truncate(n);
        Ok(out)
    }
}

impl PublicKey {
    /// Reads a PEM public key: SubjectPublicKeyInfo, or PKCS#1 `BEGIN RSA PUBLIC KEY`.
    pub fn from_pem(pem: &[u8]) -> Result<Self> {
        // RSA-specific readers (SubjectPublicKeyInfo, then PKCS#1): OpenSSL 3's generic
        // `PEM_read_bio_PUBKEY` tries every provider's decoders and costs ~70x more per key,
        // which an auth storm pays once per minion.
        let rsa = match Rsa::public_key_from_pem(pem) {
            Ok(k) => k,
            Err(_) => Rsa::public_key_from_pem_pkcs1(pem)?,
        };
        let pkey = PKey::from_rsa(rsa)?;
        pkey.rsa()?;
        Ok(Self { pkey })
    }

    fn from_der(der: &[u8]) -> Result<Self> {
        Ok(Self {
            pkey: PKey::from_rsa(Rsa::public_key_from_der(der)?)?,
        })
    }

    /// The key as Salt writes `*.pub`: SubjectPublicKeyInfo PEM with a trailing newline.
    pub fn to_pem(&self) -> Result<String> {
        let pem = self.pkey.public_key_to_pem()?;
        String::from_utf8(pem).map_err(|e| Error::Rsa(e.to_string()))
    }

    /// RSA-OAEP encryption (`PublicKey.encrypt`).
    pub fn encrypt(&self, plaintext: &[u8], algo: EncAlgo) -> Result<Vec<u8>> {
        let mut e = Encrypter::new(&self.pkey)?;
        e.set_rsa_padding(Padding::PKCS1_OAEP)?;
        e.set_rsa_oaep_md(algo.md())?;
        e.set_rsa_mgf1_md(algo.md())?;
        let mut out = vec![0u8; e.encrypt_len(plaintext)?];
        let n = e.encrypt(plaintext, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Verifies a PKCS#1 v1.5 signature. A malformed signature is `false`, not an error.
    pub fn verify(&self, data: &[u8], sig: &[u8], algo: SigAlgo) -> bool {
        let Ok(mut v) = Verifier::new(algo.md(), &self.pkey) else {
            return false;
        };
        if v.set_rsa_padding(Padding::PKCS1).is_err() || v.update(data).is_err() {
            return false;
        }
        v.verify(sig).unwrap_or(false)
    }

    /// X9.31 "public decrypt": recovers the message signed by [`PrivateKey::x931_sign`].
    pub fn x931_recover(&self, sig: &[u8]) -> Result<Vec<u8>> {
        let rsa = self.pkey.rsa()?;
        let k = rsa.size() as usize;
        if sig.len() != k {
            return Err(Error::BadSignature);
        }
        let mut out = vec![0u8; k];
        let n = rsa
            .public_decrypt(sig, &mut out, x931_padding())
            .map_err(|_| Error::BadSignature)?;
        out.truncate(n);
        Ok(out)
    }

    /// True when `sig` is the X9.31 signature of exactly `expected`.
    pub fn x931_verify(&self, sig: &[u8], expected: &[u8]) -> bool {
        self.x931_recover(sig)
            .map(|m| m.len() == expected.len() && openssl::memcmp::eq(&m, expected))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    pub(crate) fn key() -> &'static PrivateKey {
        static K: OnceLock<PrivateKey> = OnceLock::new();
        K.get_or_init(|| PrivateKey::generate(2048).unwrap())
    }

    #[test]
    fn pem_formats_are_the_ones_salt_writes() {
        let k = key();
        assert!(k
            .to_pem()
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
        assert!(k
            .public_key()
            .unwrap()
            .to_pem()
            .unwrap()
            .starts_with("-----BEGIN PUBLIC KEY-----\n"));
        let again = PrivateKey::from_pem(k.to_pem().unwrap().as_bytes()).unwrap();
        assert_eq!(again.to_pem().unwrap(), k.to_pem().unwrap());
    }

    #[test]
    fn oaep_round_trips_for_both_hashes() {
        let k = key();
        let p = k.public_key().unwrap();
        for algo in [EncAlgo::OaepSha1, EncAlgo::OaepSha224] {
            let ct = p.encrypt(b"secret", algo).unwrap();
            assert_eq!(ct.len(), 256);
            assert_eq!(k.decrypt(&ct, algo).unwrap(), b"secret");
        }
    }

    #[test]
    fn pkcs1v15_signatures_verify_and_reject_tampering() {
        let k = key();
        let p = k.public_key().unwrap();
        let sig = k.sign(b"load", SigAlgo::Pkcs1v15Sha1).unwrap();
        assert!(p.verify(b"load", &sig, SigAlgo::Pkcs1v15Sha1));
        assert!(!p.verify(b"lOad", &sig, SigAlgo::Pkcs1v15Sha1));
        assert!(!p.verify(b"load", &sig, SigAlgo::Pkcs1v15Sha224));
        assert!(!p.verify(b"load", b"garbage", SigAlgo::Pkcs1v15Sha1));
    }

    #[test]
    fn x931_round_trips_and_is_deterministic() {
        let k = key();
        let p = k.public_key().unwrap();
        let a = k.x931_sign(b"salt").unwrap();
        assert_eq!(a, k.x931_sign(b"salt").unwrap());
        assert!(p.x931_verify(&a, b"salt"));
        assert!(!p.x931_verify(&a, b"salz"));
        assert!(!p.x931_verify(b"short", b"salt"));
        let hex64 = [b'a'; 64];
        assert_eq!(
            p.x931_recover(&k.x931_sign(&hex64).unwrap()).unwrap(),
            hex64
        );
    }

    #[test]
    fn algorithm_names_parse() {
        assert_eq!(EncAlgo::parse("OAEP-SHA1").unwrap(), EncAlgo::OaepSha1);
        assert_eq!(
            SigAlgo::parse("PKCS1v15-SHA224").unwrap().name(),
            "PKCS1v15-SHA224"
        );
        assert!(EncAlgo::parse("RSA-NONE").is_err());
    }
}
