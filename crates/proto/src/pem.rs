//! PEM text as Salt stores, sends and fingerprints it.

use crate::{Error, Result};
use openssl::hash::{hash, MessageDigest};

/// `salt.crypt.clean_key`: strip surrounding whitespace and normalise line endings to `\n`,
/// with no trailing newline. Keys are compared and transmitted in this form.
pub fn clean_key(pem: &str) -> String {
    splitlines(pem.trim()).join("\n")
}

/// Python's `str.splitlines()`: splits on every Unicode line boundary, `\r\n` counting once.
pub fn splitlines(s: &str) -> Vec<&str> {
    const BREAKS: &[char] = &[
        '\n', '\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\u{85}', '\u{2028}', '\u{2029}',
    ];
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        match rest.find(BREAKS) {
            Some(i) => {
                out.push(&rest[..i]);
                let c = rest[i..].chars().next().unwrap_or('\n');
                let mut skip = c.len_utf8();
                if c == '\r' && rest[i + 1..].starts_with('\n') {
                    skip += 1;
                }
                rest = &rest[i + skip..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// `salt.utils.crypt.pem_finger` for a key file's contents: hash of the non-blank lines
/// between the first and the last (line endings kept, `\r\n` normalised), as colon-separated
/// hex pairs. `hash_type` is Salt's `hash_type` option (sha256 by default).
pub fn pem_finger(file_contents: &[u8], hash_type: &str) -> Result<String> {
    let lines: Vec<&[u8]> = file_contents
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    let body: Vec<u8> = if lines.len() >= 2 {
        lines[1..lines.len() - 1].concat()
    } else {
        Vec::new()
    };
    let body = replace_crlf(&body);
    let md = MessageDigest::from_name(hash_type)
        .ok_or_else(|| Error::UnsupportedAlgorithm(hash_type.to_owned()))?;
    let digest = hash(md, &body)?;
    Ok(digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":"))
}

fn replace_crlf(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\r' && b.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_key_strips_trailing_newline_and_crlf() {
        assert_eq!(
            clean_key("\n-----BEGIN X-----\r\nAAA\r\n-----END X-----\n\n"),
            "-----BEGIN X-----\nAAA\n-----END X-----"
        );
    }

    #[test]
    fn finger_hashes_body_lines_with_their_newlines() {
        // sha256("AAA\nBBB\n"), computed with Python's hashlib.
        let f = pem_finger(b"-----BEGIN X-----\nAAA\nBBB\n-----END X-----", "sha256").unwrap();
        let expect = hash(MessageDigest::sha256(), b"AAA\nBBB\n").unwrap();
        assert_eq!(
            f.replace(':', ""),
            expect
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        assert_eq!(f.len(), 64 + 31);
        let crlf = pem_finger(
            b"-----BEGIN X-----\r\nAAA\r\nBBB\r\n-----END X-----\r\n",
            "sha256",
        )
        .unwrap();
        assert_eq!(crlf, f);
    }

    #[test]
    fn splitlines_matches_python() {
        assert_eq!(splitlines("a\rb\r\nc\n"), ["a", "b", "c"]);
        assert_eq!(splitlines("a\n\nb"), ["a", "", "b"]);
        assert_eq!(splitlines(""), Vec::<&str>::new());
    }

    #[test]
    fn unknown_hash_type_is_an_error() {
        assert!(pem_finger(b"a\nb\nc", "nope").is_err());
    }
}
