//! Token ids: `hashlib.<hash_type>(os.urandom(512)).hexdigest()` and the shape check.

use openssl::hash::MessageDigest;

use crate::{Error, Result};

/// How many random bytes are hashed into a token id (Salt's `os.urandom(512)`).
pub const RANDOM_BYTES: usize = 512;

/// The longest token id: a sha512 hex digest.
pub const MAX_TOKEN_ID_LEN: usize = 128;

/// A new token id: the lowercase hex digest, under the master's `hash_type` (Salt's default
/// `sha256`; also `md5`, `sha1`, `sha224`, `sha384`, `sha512`; the name is matched without
/// regard to case, as Salt lower-cases it when loading the config), of 512 bytes from
/// OpenSSL's CSPRNG.
pub fn new_token_id(hash_type: &str) -> Result<String> {
    let digest = match hash_type.to_ascii_lowercase().as_str() {
        "md5" => MessageDigest::md5(),
        "sha1" => MessageDigest::sha1(),
        "sha224" => MessageDigest::sha224(),
        "sha256" => MessageDigest::sha256(),
        "sha384" => MessageDigest::sha384(),
        "sha512" => MessageDigest::sha512(),
        _ => return Err(Error::UnsupportedHashType(hash_type.to_owned())),
    };
    let mut random = [0u8; RANDOM_BYTES];
    openssl::rand::rand_bytes(&mut random)?;
    let hashed = openssl::hash::hash(digest, &random)?;
    Ok(hex::encode(hashed))
}

/// Whether `s` has the shape of a token id: 1 to [`MAX_TOKEN_ID_LEN`] characters, each a
/// digit or `a`-`f` (what `hexdigest()` produces). Anything else — a path such as `../../x`,
/// upper case, spaces, an empty string — is refused before a store is consulted.
pub fn is_token_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOKEN_ID_LEN
        && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_id_length_is_the_hex_digest_length_of_each_hash_type() {
        for (hash_type, len) in [
            ("md5", 32),
            ("sha1", 40),
            ("sha224", 56),
            ("sha256", 64),
            ("sha384", 96),
            ("sha512", 128),
        ] {
            let id = new_token_id(hash_type).unwrap();
            assert_eq!(id.len(), len, "{hash_type}");
            assert!(is_token_id(&id), "{hash_type}: {id}");
        }
    }

    #[test]
    fn hash_type_name_is_matched_without_case() {
        assert_eq!(new_token_id("SHA512").unwrap().len(), 128);
    }

    #[test]
    fn unknown_hash_type_is_an_error() {
        for bad in ["", "sha3_256", "shake_128", "crc32"] {
            assert!(
                matches!(new_token_id(bad), Err(Error::UnsupportedHashType(h)) if h == bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn successive_token_ids_differ() {
        let a = new_token_id("sha256").unwrap();
        let b = new_token_id("sha256").unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn hex_ids_up_to_128_chars_are_token_ids() {
        assert!(is_token_id("0"));
        assert!(is_token_id("deadbeef0123456789"));
        assert!(is_token_id(&"f".repeat(MAX_TOKEN_ID_LEN)));
    }

    #[test]
    fn non_hex_empty_and_overlong_ids_are_refused() {
        for bad in [
            "",
            "../../x",
            "../../../etc/passwd",
            "deadbeef/",
            "DEADBEEF",
            "dead beef",
            "deadbeef\n",
            "deadbeef\0",
            "g00d",
            "é",
            "０",
        ] {
            assert!(!is_token_id(bad), "{bad:?}");
        }
        assert!(!is_token_id(&"f".repeat(MAX_TOKEN_ID_LEN + 1)));
    }
}
