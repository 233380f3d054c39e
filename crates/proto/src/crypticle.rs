//! Salt's Crypticle: AES-192-CBC + HMAC-SHA256 authenticated encryption
//! (`salt/crypt.py:Crypticle`).
//!
//! Key string: base64 of 56 random bytes (76 characters); the first 24 bytes are the AES key,
//! the last 32 the HMAC key. Blob: `iv(16) || AES-CBC(PKCS#7-padded plaintext) ||
//! HMAC-SHA256(iv || ciphertext)`. Serialised payloads are `b"pickle::" [|| nonce] ||
//! msgpack(obj)`; nothing is pickled despite the name.
//!
//! Deviation from Salt for safety: Salt strips the padding length from the last byte without
//! checking it; Halite also strips it unchecked (the HMAC already authenticated the data) but
//! never reads out of bounds.

use crate::{value, Error, Result, Value};
use base64::Engine as _;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::sign::Signer;
use openssl::symm::{Cipher, Crypter, Mode};

const AES_LEN: usize = 24;
const HMAC_LEN: usize = 32;
const IV_LEN: usize = 16;
/// Prefix of every serialised Crypticle plaintext.
pub const PICKLE_PREFIX: &[u8] = b"pickle::";
/// Length of a request nonce (`uuid4().hex`).
pub const NONCE_LEN: usize = 32;

/// A Crypticle key: the AES and HMAC halves of a Salt key string.
#[derive(Clone)]
pub struct Crypticle {
    aes: [u8; AES_LEN],
    /// The HMAC-SHA256 key, made into an OpenSSL key once: building it per message cost
    /// as much as the MAC itself.
    hmac: PKey<Private>,
    key_string: String,
}

impl std::fmt::Debug for Crypticle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Crypticle(<secret>)")
    }
}

/// A fresh random key string (base64 of 56 random bytes), as `Crypticle.generate_key_string`.
pub fn generate_key_string() -> String {
    let mut raw = [0u8; AES_LEN + HMAC_LEN];
    openssl::rand::rand_bytes(&mut raw).expect("the OpenSSL RNG does not fail once seeded");
    base64::engine::general_purpose::STANDARD.encode(raw)
}

impl Crypticle {
    /// Parses a key string (surrounding whitespace ignored).
    pub fn new(key_string: &str) -> Result<Self> {
        let key_string = key_string.trim();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(key_string)
            .map_err(|_| Error::BadKeyString)?;
        if raw.len() != AES_LEN + HMAC_LEN {
            return Err(Error::BadKeyString);
        }
        let mut aes = [0u8; AES_LEN];
        let mut hmac = [0u8; HMAC_LEN];
        aes.copy_from_slice(&raw[..AES_LEN]);
        hmac.copy_from_slice(&raw[AES_LEN..]);
        Ok(Self {
            aes,
            hmac: PKey::hmac(&hmac)?,
            key_string: key_string.to_owned(),
        })
    }

    /// A Crypticle with a fresh random key.
    pub fn generate() -> Self {
        Self::new(&generate_key_string()).expect("a generated key string is valid")
    }

    /// The key string this Crypticle was made from.
    pub fn key_string(&self) -> &str {
        &self.key_string
    }

    fn mac(&self, data: &[u8]) -> Result<Vec<u8>> {
        let mut signer = Signer::new(MessageDigest::sha256(), &self.hmac)?;
        signer.update(data)?;
        Ok(signer.sign_to_vec()?)
    }

    /// Encrypts raw bytes into `iv || ciphertext || hmac`.
    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut iv = [0u8; IV_LEN];
        openssl::rand::rand_bytes(&mut iv)?;
        self.encrypt_with_iv(plaintext, &iv)
    }

    fn encrypt_with_iv(&self, plaintext: &[u8], iv: &[u8; IV_LEN]) -> Result<Vec<u8>> {
        let cipher = Cipher::aes_192_cbc();
        let mut c = Crypter::new(cipher, Mode::Encrypt, &self.aes, Some(iv))?;
        c.pad(true);
        let mut out = vec![0u8; IV_LEN + plaintext.len() + 2 * cipher.block_size()];
        out[..IV_LEN].copy_from_slice(iv);
        let mut n = c.update(plaintext, &mut out[IV_LEN..])?;
        n += c.finalize(&mut out[IV_LEN + n..])?;
        out.truncate(IV_LEN + n);
        let tag = self.mac(&out)?;
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// Verifies and decrypts a blob produced by [`encrypt`](Self::encrypt) or by Salt.
    pub fn decrypt(&self, blob: &[u8]) -> Result<Vec<u8>> {
        if blob.len() < IV_LEN + 16 + HMAC_LEN
            || !(blob.len() - HMAC_LEN - IV_LEN).is_multiple_of(16)
        {
            return Err(Error::BadHmac);
        }
        let (body, tag) = blob.split_at(blob.len() - HMAC_LEN);
        let expected = self.mac(body)?;
        if !openssl::memcmp::eq(&expected, tag) {
            return Err(Error::BadHmac);
        }
        let (iv, ct) = body.split_at(IV_LEN);
        let mut c = Crypter::new(Cipher::aes_192_cbc(), Mode::Decrypt, &self.aes, Some(iv))?;
        c.pad(false);
        let mut out = vec![0u8; ct.len() + 16];
        let mut n = c.update(ct, &mut out)?;
        n += c.finalize(&mut out[n..])?;
        out.truncate(n);
        let pad = out.last().copied().unwrap_or(0) as usize;
        out.truncate(out.len().saturating_sub(pad));
        Ok(out)
    }

    /// `Crypticle.dumps`: encrypts `pickle:: [nonce] msgpack(obj)`.
    pub fn dumps(&self, obj: &Value, nonce: Option<&str>) -> Result<Vec<u8>> {
        let body = value::encode(obj);
        let mut pt = Vec::with_capacity(PICKLE_PREFIX.len() + NONCE_LEN + body.len());
        pt.extend_from_slice(PICKLE_PREFIX);
        if let Some(n) = nonce {
            pt.extend_from_slice(n.as_bytes());
        }
        pt.extend_from_slice(&body);
        self.encrypt(&pt)
    }

    /// `Crypticle.loads` without the serial bookkeeping: decrypts, checks the prefix and the
    /// nonce when one is expected, and decodes the msgpack body.
    pub fn loads(&self, blob: &[u8], nonce: Option<&str>) -> Result<Value> {
        let pt = self.decrypt(blob)?;
        let rest = pt
            .strip_prefix(PICKLE_PREFIX)
            .ok_or_else(|| Error::BadPayload("missing pickle:: prefix".into()))?;
        let rest = match nonce {
            Some(n) => rest
                .strip_prefix(n.as_bytes())
                .ok_or_else(|| Error::BadPayload("nonce mismatch".into()))?,
            None => rest,
        };
        value::decode(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_string_is_76_base64_chars() {
        let k = generate_key_string();
        assert_eq!(k.len(), 76);
        assert!(Crypticle::new(&k).is_ok());
    }

    #[test]
    fn bad_key_strings_are_rejected() {
        assert!(Crypticle::new("short").is_err());
        assert!(Crypticle::new("!!!!").is_err());
    }

    #[test]
    fn dumps_loads_round_trip_with_and_without_nonce() {
        let c = Crypticle::generate();
        let v = value::map([("a", Value::from(1)), ("b", value::s("x"))]);
        assert_eq!(c.loads(&c.dumps(&v, None).unwrap(), None).unwrap(), v);
        let n = "0123456789abcdef0123456789abcdef";
        let blob = c.dumps(&v, Some(n)).unwrap();
        assert_eq!(c.loads(&blob, Some(n)).unwrap(), v);
        assert!(c
            .loads(&blob, Some("ffffffffffffffffffffffffffffffff"))
            .is_err());
    }

    #[test]
    fn wrong_key_fails_hmac() {
        let a = Crypticle::generate();
        let b = Crypticle::generate();
        let blob = a.encrypt(b"hello").unwrap();
        assert!(matches!(b.decrypt(&blob), Err(Error::BadHmac)));
    }

    #[test]
    fn garbage_and_short_blobs_are_errors() {
        let c = Crypticle::generate();
        for blob in [&b""[..], b"bad load", &[0u8; 63], &[7u8; 80]] {
            assert!(c.decrypt(blob).is_err());
        }
    }

    #[test]
    fn every_plaintext_length_pads_to_blocks() {
        let c = Crypticle::generate();
        for len in 0..40 {
            let pt = vec![0x41u8; len];
            let blob = c.encrypt(&pt).unwrap();
            assert!((blob.len() - IV_LEN - HMAC_LEN).is_multiple_of(16));
            assert_eq!(c.decrypt(&blob).unwrap(), pt);
        }
    }
}
