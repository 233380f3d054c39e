//! Python's `glob.glob` for include patterns such as `/etc/salt/master.d/*.conf`.
//!
//! Supports `*`, `?`, `[seq]` and `[!seq]` in any path component, matches case-sensitively,
//! and skips names starting with `.` unless the pattern component does, as Python does.
//! Results are unsorted; callers sort them as Salt does.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn has_magic(s: &[u8]) -> bool {
    s.iter().any(|b| matches!(b, b'*' | b'?' | b'['))
}

/// `os.path.split`: (head without trailing slashes unless all slashes, tail).
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    let cut = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let (head, tail) = path.split_at(cut);
    let trimmed = head.len() - head.iter().rev().take_while(|&&b| b == b'/').count();
    if trimmed == 0 {
        (head, tail)
    } else {
        (&head[..trimmed], tail)
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = dir.to_vec();
    if !out.is_empty() && out.last() != Some(&b'/') {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

fn lexists(path: &[u8]) -> bool {
    Path::new(OsStr::from_bytes(path))
        .symlink_metadata()
        .is_ok()
}

/// All paths matching `pattern`.
pub(crate) fn glob(pattern: &Path) -> Vec<PathBuf> {
    glob_bytes(pattern.as_os_str().as_bytes())
        .into_iter()
        .map(|p| PathBuf::from(OsStr::from_bytes(&p)))
        .collect()
}

fn glob_bytes(pattern: &[u8]) -> Vec<Vec<u8>> {
    if !has_magic(pattern) {
        return if lexists(pattern) {
            vec![pattern.to_vec()]
        } else {
            Vec::new()
        };
    }
    let (dir, base) = split(pattern);
    let dirs: Vec<Vec<u8>> = if dir.is_empty() {
        vec![Vec::new()]
    } else if dir != pattern && has_magic(dir) {
        glob_bytes(dir)
    } else {
        vec![dir.to_vec()]
    };
    let mut out = Vec::new();
    for d in dirs {
        if has_magic(base) {
            let listing = if d.is_empty() {
                Path::new(".").read_dir()
            } else {
                Path::new(OsStr::from_bytes(&d)).read_dir()
            };
            let Ok(entries) = listing else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.as_bytes();
                if name.first() == Some(&b'.') && base.first() != Some(&b'.') {
                    continue;
                }
                if fnmatch(name, base) {
                    out.push(join(&d, name));
                }
            }
        } else {
            let candidate = join(&d, base);
            if lexists(&candidate) {
                out.push(candidate);
            }
        }
    }
    out
}

/// `fnmatch.fnmatchcase(name, pattern)`.
pub(crate) fn fnmatch(name: &[u8], pattern: &[u8]) -> bool {
    // Iterative wildcard matching with backtracking to the last `*`.
    let (mut n, mut p) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(b'?') => Some(1),
            Some(b'[') => match class(&pattern[p..], name[n]) {
                Some((true, len)) => Some(len),
                Some((false, _)) => None,
                // An unterminated `[` is a literal character.
                None => (name[n] == b'[').then_some(1),
            },
            Some(&c) => (c == name[n]).then_some(1),
            None => None,
        };
        match step {
            Some(len) => {
                p += len;
                n += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Matches `c` against the bracket expression at the start of `pattern`; returns whether
/// it matched and the expression's length, or `None` if the bracket is unterminated.
fn class(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(pattern.get(i), Some(b'!'));
    if negate {
        i += 1;
    }
    // A `]` right after `[` or `[!` is a member, not the end.
    let start = i;
    let end = start + 1 + pattern.get(start + 1..)?.iter().position(|&b| b == b']')?;
    let members = &pattern[start..end];
    let mut matched = false;
    let mut j = 0;
    while j < members.len() {
        if j + 2 < members.len() && members[j + 1] == b'-' {
            if members[j] <= c && c <= members[j + 2] {
                matched = true;
            }
            j += 3;
        } else {
            if members[j] == c {
                matched = true;
            }
            j += 1;
        }
    }
    Some((matched != negate, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnmatch_follows_python_rules() {
        let cases: &[(&str, &str, bool)] = &[
            ("10.conf", "*.conf", true),
            ("10.conf.bak", "*.conf", false),
            ("a.conf", "?.conf", true),
            ("ab.conf", "?.conf", false),
            ("b.conf", "[a-c].conf", true),
            ("d.conf", "[!a-c].conf", true),
            ("a.conf", "[!a-c].conf", false),
            ("]", "[]]", true),
            ("[x", "[x", true),
            ("", "*", true),
            ("abc", "a*b*c", true),
            ("abbbc", "a*c", true),
            ("ABC.conf", "*.CONF", false),
        ];
        for &(name, pattern, want) in cases {
            assert_eq!(
                fnmatch(name.as_bytes(), pattern.as_bytes()),
                want,
                "{name} ~ {pattern}"
            );
        }
    }

    #[test]
    fn glob_skips_hidden_files_and_walks_magic_dirs() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a/x.conf", "b/y.conf", "a/.hidden.conf", "a/z.txt"] {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let mut found = glob(&dir.path().join("*/*.conf"));
        found.sort();
        assert_eq!(
            found,
            vec![dir.path().join("a/x.conf"), dir.path().join("b/y.conf")]
        );
        assert_eq!(
            glob(&dir.path().join("a/z.txt")),
            vec![dir.path().join("a/z.txt")]
        );
        assert!(glob(&dir.path().join("missing/*.conf")).is_empty());
    }
}
