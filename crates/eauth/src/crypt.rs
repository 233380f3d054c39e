//! Secrets: constant-time comparison, hex digests, and the `htpasswd` hash schemes
//! (bcrypt, SHA-crypt, Apache's `$apr1$` MD5-crypt, `{SHA}`).

use base64::Engine as _;
use openssl::hash::{hash, Hasher, MessageDigest};
use sha_crypt::{PasswordVerifier as _, ShaCrypt};

use crate::Error;

/// Whether `a == b`, in time that depends on neither content nor length: both are hashed
/// with SHA-256 and the digests compared with `CRYPTO_memcmp`.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    match (
        hash(MessageDigest::sha256(), a),
        hash(MessageDigest::sha256(), b),
    ) {
        (Ok(a), Ok(b)) => openssl::memcmp::eq(&a, &b),
        _ => false,
    }
}

/// The lowercase hex digest of `data` (Salt's `hashutil.*_digest`).
pub(crate) fn hex_digest(
    md: MessageDigest,
    algorithm: &'static str,
    data: &[u8],
) -> Result<String, Error> {
    hash(md, data).map(hex::encode).map_err(|e| Error::Digest {
        algorithm,
        message: e.to_string(),
    })
}

/// Why an `htpasswd` hash could not be checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HashTrouble {
    /// No scheme Halite accepts (the message says which scheme it looks like).
    Unsupported(&'static str),
    /// The scheme is known but the hash is malformed.
    Malformed(String),
    /// A digest failed.
    Digest(String),
}

/// Whether `password` matches the `htpasswd` hash `stored`.
pub(crate) fn verify_htpasswd(password: &str, stored: &str) -> Result<bool, HashTrouble> {
    if let Some(rest) = stored.strip_prefix("$apr1$") {
        return apr1_verify(password, rest, stored);
    }
    if stored.starts_with("$2a$") || stored.starts_with("$2b$") || stored.starts_with("$2y$") {
        return bcrypt::verify(password, stored).map_err(|e| HashTrouble::Malformed(e.to_string()));
    }
    if stored.starts_with("$2x$") || stored.starts_with("$2$") {
        return Err(HashTrouble::Unsupported(
            "a $2x$/$2$ bcrypt hash (crypt_blowfish's buggy variants)",
        ));
    }
    if stored.starts_with("$5$") || stored.starts_with("$6$") {
        return match ShaCrypt::default().verify_password(password.as_bytes(), stored) {
            Ok(()) => Ok(true),
            Err(sha_crypt::password_hash::Error::PasswordInvalid) => Ok(false),
            Err(e) => Err(HashTrouble::Malformed(e.to_string())),
        };
    }
    if let Some(encoded) = stored.strip_prefix("{SHA}") {
        let expected = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| HashTrouble::Malformed(format!("{{SHA}} is not base64: {e}")))?;
        let got = hash(MessageDigest::sha1(), password.as_bytes())
            .map_err(|e| HashTrouble::Digest(e.to_string()))?;
        return Ok(ct_eq(&got, &expected));
    }
    if stored.starts_with('$') {
        return Err(HashTrouble::Unsupported("an unknown $-scheme"));
    }
    if stored.len() == 13 && stored.bytes().all(is_crypt64) {
        return Err(HashTrouble::Unsupported(
            "a traditional DES crypt(3) hash (it keeps only 8 characters of a password)",
        ));
    }
    Err(HashTrouble::Unsupported("a plaintext password"))
}

fn is_crypt64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'/'
}

/// The alphabet of crypt's base-64 encoding.
const CRYPT64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `rest` is what follows `$apr1$` in `stored`: `salt$checksum`.
fn apr1_verify(password: &str, rest: &str, stored: &str) -> Result<bool, HashTrouble> {
    let Some((salt, checksum)) = rest.split_once('$') else {
        return Err(HashTrouble::Malformed(
            "an $apr1$ hash needs a salt and a checksum".to_owned(),
        ));
    };
    if salt.len() > 8 || checksum.len() != 22 || !checksum.bytes().all(is_crypt64) {
        return Err(HashTrouble::Malformed(
            "an $apr1$ hash has a salt of at most 8 characters and a 22-character checksum"
                .to_owned(),
        ));
    }
    let computed = md5_crypt(password.as_bytes(), salt.as_bytes(), b"$apr1$")
        .map_err(|e| HashTrouble::Digest(e.to_string()))?;
    Ok(ct_eq(computed.as_bytes(), stored.as_bytes()))
}

/// Poul-Henning Kamp's MD5-crypt with `magic` (`$apr1$` is Apache's variant, `$1$` the
/// original): the full `magic salt $ checksum` string.
fn md5_crypt(
    password: &[u8],
    salt: &[u8],
    magic: &[u8],
) -> Result<String, openssl::error::ErrorStack> {
    let md5 = MessageDigest::md5();
    let alternate = {
        let mut h = Hasher::new(md5)?;
        h.update(password)?;
        h.update(salt)?;
        h.update(password)?;
        h.finish()?
    };
    let mut h = Hasher::new(md5)?;
    h.update(password)?;
    h.update(magic)?;
    h.update(salt)?;
    for chunk in password.chunks(16) {
        h.update(alternate.get(..chunk.len()).unwrap_or(&alternate))?;
    }
    let mut bits = password.len();
    let first = password.get(..1).unwrap_or(&[]);
    while bits > 0 {
        h.update(if bits & 1 == 1 { &[0u8][..] } else { first })?;
        bits >>= 1;
    }
    let mut digest = h.finish()?;
    for round in 0..1000 {
        let mut h = Hasher::new(md5)?;
        if round % 2 == 1 {
            h.update(password)?;
        } else {
            h.update(&digest)?;
        }
        if round % 3 != 0 {
            h.update(salt)?;
        }
        if round % 7 != 0 {
            h.update(password)?;
        }
        if round % 2 == 1 {
            h.update(&digest)?;
        } else {
            h.update(password)?;
        }
        digest = h.finish()?;
    }
    let d: Vec<u32> = digest.iter().map(|&b| u32::from(b)).collect();
    let at = |i: usize| d.get(i).copied().unwrap_or(0);
    let mut out = String::with_capacity(magic.len() + salt.len() + 23);
    out.push_str(&String::from_utf8_lossy(magic));
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        push_crypt64(&mut out, (at(a) << 16) | (at(b) << 8) | at(c), 4);
    }
    push_crypt64(&mut out, at(11), 2);
    Ok(out)
}

fn push_crypt64(out: &mut String, mut value: u32, chars: usize) {
    for _ in 0..chars {
        let index = (value & 0x3f) as usize;
        out.push(char::from(CRYPT64.get(index).copied().unwrap_or(b'.')));
        value >>= 6;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_compares_content_of_any_length() {
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secret", b"secreT"));
        assert!(!ct_eq(b"secret", b"secret "));
        assert!(ct_eq(b"", b""));
    }

    /// Vectors made with `openssl passwd -apr1 -salt <salt> <password>` (OpenSSL 3.0).
    const APR1: &[(&str, &str)] = &[
        ("secret", "$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/"),
        ("", "$apr1$xyz$Pix4eE3fQHxJjb6LqtyMK1"),
        (
            "a much longer password, past sixteen bytes",
            "$apr1$Q1w2E3r4$/IoInkJP0UIGX1KYcPtvv1",
        ),
        ("pässwörd", "$apr1$s$/KuNgW0uqd2rn.Rw0X7rH."),
    ];

    #[test]
    fn apr1_matches_openssl_vectors() {
        for (password, stored) in APR1 {
            assert_eq!(verify_htpasswd(password, stored), Ok(true), "{stored}");
            assert_eq!(verify_htpasswd("wrong", stored), Ok(false), "{stored}");
        }
    }

    #[test]
    fn md5_crypt_with_the_original_magic_matches_openssl() {
        // `openssl passwd -1 -salt saltsalt secret`
        let got = md5_crypt(b"secret", b"saltsalt", b"$1$").unwrap();
        assert_eq!(got, "$1$saltsalt$9xy1btjgzLYfb7hivXtC//");
    }

    #[test]
    fn bcrypt_variants_2a_2b_2y_verify_and_2x_is_refused() {
        // Python's `crypt.crypt("secret", "$2b$05$" + 22 * "a")` (libxcrypt), and the same
        // hash under the other prefixes.
        let b = "$2b$05$aaaaaaaaaaaaaaaaaaaaaOjOHCcGZ1ZydhnG2lX11qSmiRJbsbsA.";
        for prefix in ["$2a$", "$2b$", "$2y$"] {
            let stored = format!("{prefix}{}", &b[4..]);
            assert_eq!(verify_htpasswd("secret", &stored), Ok(true), "{stored}");
            assert_eq!(verify_htpasswd("Secret", &stored), Ok(false), "{stored}");
        }
        let x = format!("$2x${}", &b[4..]);
        assert!(matches!(
            verify_htpasswd("secret", &x),
            Err(HashTrouble::Unsupported(_))
        ));
        assert!(matches!(
            verify_htpasswd("secret", "$2y$05$tooshort"),
            Err(HashTrouble::Malformed(_))
        ));
    }

    #[test]
    fn sha_crypt_256_and_512_verify_with_and_without_rounds() {
        // `openssl passwd -5|-6 -salt abcdefgh secret`; libxcrypt's `rounds=` form.
        let cases = [
            "$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.",
            "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.",
            "$5$rounds=1000$abcdefgh$XIppta5rT8zJUu4vAOKQXrwq9uY4Ijlz6VjyOmkx5i4",
        ];
        for stored in cases {
            assert_eq!(verify_htpasswd("secret", stored), Ok(true), "{stored}");
            assert_eq!(verify_htpasswd("secreT", stored), Ok(false), "{stored}");
        }
        assert!(matches!(
            verify_htpasswd("secret", "$6$abc$not*base64"),
            Err(HashTrouble::Malformed(_))
        ));
    }

    #[test]
    fn ldap_sha1_verifies() {
        // `printf secret | openssl dgst -sha1 -binary | base64`
        let stored = "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=";
        assert_eq!(verify_htpasswd("secret", stored), Ok(true));
        assert_eq!(verify_htpasswd("secret2", stored), Ok(false));
        assert!(matches!(
            verify_htpasswd("secret", "{SHA}@@@"),
            Err(HashTrouble::Malformed(_))
        ));
    }

    #[test]
    fn plaintext_des_and_unknown_schemes_are_refused() {
        for stored in [
            "secret",
            "abNANd1rDfiNc",
            "$1$saltsalt$9xy1btjgzLYfb7hivXtC//",
            "",
        ] {
            assert!(
                matches!(
                    verify_htpasswd("secret", stored),
                    Err(HashTrouble::Unsupported(_))
                ),
                "{stored}"
            );
        }
    }

    #[test]
    fn hex_digest_is_lowercase_hex() {
        assert_eq!(
            hex_digest(MessageDigest::md5(), "md5", b"secret").unwrap(),
            "5ebe2294ecd0e0f08eab7690d2a6ee69"
        );
    }
}
