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
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;
use openssl::sha::Sha256;
use std::sync::LazyLock;

const AES_LEN: usize = 24;
const HMAC_LEN: usize = 32;
const IV_LEN: usize = 16;
/// Prefix of every serialised Crypticle plaintext.
pub const PICKLE_PREFIX: &[u8] = b"pickle::";
/// Length of a request nonce (`uuid4().hex`).
pub const NONCE_LEN: usize = 32;

/// SHA-256's block size: HMAC pads its key to it.
const SHA256_BLOCK: usize = 64;

/// AES-192-CBC fetched from OpenSSL's provider once. A legacy `EVP_aes_192_cbc()` handed to
/// every cipher init makes OpenSSL 3 look the algorithm up again each time (a hash-table
/// walk and string compares, a fifth of a request worker's time with the HMAC below).
static AES_192_CBC: LazyLock<Option<Cipher>> =
    LazyLock::new(|| Cipher::fetch(None, "AES-192-CBC", None).ok());

fn aes_192_cbc() -> &'static CipherRef {
    AES_192_CBC.as_deref().unwrap_or(Cipher::aes_192_cbc())
}

/// HMAC-SHA256 (RFC 2104) with the key's inner and outer pad blocks hashed once: a tag
/// costs two copies of a SHA-256 state and no allocation. OpenSSL's `EVP_DigestSign` HMAC
/// re-initialised a provider context per message, which was a third of a request
/// worker's time at 10,000 minions.
#[derive(Clone)]
struct Hmac {
    inner: Sha256,
    outer: Sha256,
}

impl Hmac {
    fn new(key: &[u8; HMAC_LEN]) -> Self {
        let mut ipad = [0x36u8; SHA256_BLOCK];
        let mut opad = [0x5cu8; SHA256_BLOCK];
        for (i, k) in key.iter().enumerate() {
            ipad[i] ^= k;
            opad[i] ^= k;
        }
        let mut inner = Sha256::new();
        inner.update(&ipad);
        let mut outer = Sha256::new();
        outer.update(&opad);
        Self { inner, outer }
    }

    fn tag(&self, data: &[u8]) -> [u8; HMAC_LEN] {
        let mut inner = self.inner.clone();
        inner.update(data);
        let mut outer = self.outer.clone();
        outer.update(&inner.finish());
        outer.finish()
    }
}

/// A Crypticle key: the AES and HMAC halves of a Salt key string.
#[derive(Clone)]
pub struct Crypticle {
    aes: [u8; AES_LEN],
    hmac: Hmac,
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
            hmac: Hmac::new(&hmac),
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

    /// Encrypts raw bytes into `iv || ciphertext || hmac`.
    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut iv = [0u8; IV_LEN];
        openssl::rand::rand_bytes(&mut iv)?;
        self.encrypt_with_iv(plaintext, &iv)
    }

    fn encrypt_with_iv(&self, plaintext: &[u8], iv: &[u8; IV_LEN]) -> Result<Vec<u8>> {
        let mut c = CipherCtx::new()?;
        c.encrypt_init(Some(aes_192_cbc()), Some(&self.aes), Some(iv))?;
        c.set_padding(true);
        // PKCS#7 adds 1 to 16 bytes.
        let mut out = Vec::with_capacity(IV_LEN + plaintext.len() + 16 + HMAC_LEN);
        out.extend_from_slice(iv);
        c.cipher_update_vec(plaintext, &mut out)?;
        c.cipher_final_vec(&mut out)?;
        let tag = self.hmac.tag(&out);
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
        if !openssl::memcmp::eq(&self.hmac.tag(body), tag) {
            return Err(Error::BadHmac);
        }
        let (iv, ct) = body.split_at(IV_LEN);
        let mut c = CipherCtx::new()?;
        c.decrypt_init(Some(aes_192_cbc()), Some(&self.aes), Some(iv))?;
        c.set_padding(false);
        let mut out = Vec::with_capacity(ct.len() + 16);
        c.cipher_update_vec(ct, &mut out)?;
        c.cipher_final_vec(&mut out)?;
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
    fn precomputed_hmac_equals_openssls_hmac_sha256() {
        use openssl::{hash::MessageDigest, pkey::PKey, sign::Signer};
        for seed in 0u8..4 {
            let key: [u8; HMAC_LEN] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ seed);
            let ours = Hmac::new(&key);
            let pkey = PKey::hmac(&key).unwrap();
            // Lengths around SHA-256's 64-byte block and the 55/56-byte padding boundary.
            for len in (0..140).chain([1000, 4096]) {
                let data: Vec<u8> = (0..len)
                    .map(|i| (i * 7 + usize::from(seed)) as u8)
                    .collect();
                let mut signer = Signer::new(MessageDigest::sha256(), &pkey).unwrap();
                signer.update(&data).unwrap();
                assert_eq!(
                    ours.tag(&data).to_vec(),
                    signer.sign_to_vec().unwrap(),
                    "len {len}"
                );
            }
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
