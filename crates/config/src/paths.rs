//! Path arithmetic on option strings, as Python's `posixpath` and Salt's
//! `salt.utils.path.join` / `prepend_root_dir` do it (lexically, without touching disk).

/// `posixpath.normpath`.
pub(crate) fn normpath(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    // POSIX keeps exactly two leading slashes; three or more collapse to one.
    let leading = if path.starts_with("//") && !path.starts_with("///") {
        "//"
    } else if path.starts_with('/') {
        "/"
    } else {
        ""
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if !leading.is_empty() && parts.is_empty() {
                    continue;
                }
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = format!("{leading}{}", parts.join("/"));
    if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// `os.path.join(a, b)`: `b` wins if absolute.
pub(crate) fn py_join(a: &str, b: &str) -> String {
    if b.starts_with('/') || a.is_empty() {
        b.to_owned()
    } else if a.ends_with('/') {
        format!("{a}{b}")
    } else {
        format!("{a}/{b}")
    }
}

/// `os.path.split`: (directory, last component).
pub(crate) fn py_split(path: &str) -> (String, String) {
    let cut = path.rfind('/').map_or(0, |i| i + 1);
    let (head, tail) = path.split_at(cut);
    let trimmed = head.trim_end_matches('/');
    let head = if trimmed.is_empty() { head } else { trimmed };
    (head.to_owned(), tail.to_owned())
}

/// `os.path.abspath`.
pub(crate) fn abspath(path: &str) -> String {
    if path.starts_with('/') {
        return normpath(path);
    }
    let cwd = std::env::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".to_owned());
    normpath(&py_join(&cwd, path))
}

/// `salt.utils.path.join(root, path)`: `path` is always nested under `root`.
pub(crate) fn salt_join(root: &str, path: &str) -> String {
    let root = normpath(root);
    let rest = normpath(path);
    normpath(&py_join(&root, rest.trim_start_matches('/')))
}

/// Salt's `should_prepend_root_dir` test for one value: not a URI such as
/// `udp://host:514` or `file:///dev/log` (Python's `urlsplit` scheme rule).
pub(crate) fn is_uri(value: &str) -> bool {
    let Some(colon) = value.find(':') else {
        return false;
    };
    let scheme = &value[..colon];
    scheme
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// Salt's `prepend_root_dir` for one path, with `salt.syspaths.ROOT_DIR` being `/`.
///
/// A path already under `root_dir` keeps its place under it; any other path, absolute or
/// relative, is re-rooted below `root_dir`.
pub(crate) fn prepend_root(root_dir: &str, path: &str) -> String {
    let root = abspath(root_dir);
    // The default root dir, "/" with the trailing separator removed.
    let def_root = "";
    let tmp_def = (path == def_root || path.starts_with('/')).then(|| path.to_owned());
    let tmp_root = (!root.is_empty() && (path == root || path.starts_with(&format!("{root}/"))))
        .then(|| path[root.len()..].to_owned());
    // Python tests these strings for truthiness: an empty remainder counts as no match.
    let tmp_def = tmp_def.filter(|p| !p.is_empty());
    let tmp_root = tmp_root.filter(|p| !p.is_empty());
    let rest = match (tmp_def, tmp_root) {
        (Some(def), None) => def,
        (None, Some(under_root)) => under_root,
        // Both matched: "" is in every root_dir, so the root_dir remainder wins.
        (Some(_), Some(under_root)) => under_root,
        (None, None) => path.to_owned(),
    };
    salt_join(&root, &rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normpath_matches_posixpath() {
        let cases = [
            ("", "."),
            ("/", "/"),
            ("//", "//"),
            ("///a//b/", "/a/b"),
            ("//a", "//a"),
            ("a/./b/../c", "a/c"),
            ("../a", "../a"),
            ("/../a", "/a"),
            ("a/..", "."),
        ];
        for (path, want) in cases {
            assert_eq!(normpath(path), want, "{path:?}");
        }
    }

    /// Expectations captured from Salt 3008.3's `prepend_root_dir` in the venv.
    #[test]
    fn prepend_root_follows_salt() {
        let cases = [
            ("/tmp/x/root", "relpki", "/tmp/x/root/relpki"),
            (
                "/tmp/x/root",
                "/var/cache/salt/master",
                "/tmp/x/root/var/cache/salt/master",
            ),
            ("/tmp/x/root", "/tmp/x/root/sock", "/tmp/x/root/sock"),
            ("/tmp/x/root", "/tmp/x/root", "/tmp/x/root/tmp/x/root"),
            (
                "/tmp/x/root",
                "/tmp/x/rootless",
                "/tmp/x/root/tmp/x/rootless",
            ),
            ("/", "/etc/salt/pki/master", "/etc/salt/pki/master"),
            ("/", "rel", "/rel"),
            ("/tmp/r/", "/etc/salt", "/tmp/r/etc/salt"),
            ("/tmp/r", "", "/tmp/r"),
            ("/tmp/r", "../x", "/tmp/x"),
            ("/tmp/r", "//x", "/tmp/r/x"),
        ];
        for (root, path, want) in cases {
            assert_eq!(prepend_root(root, path), want, "{root} + {path}");
        }
    }

    #[test]
    fn uris_are_not_paths() {
        assert!(is_uri("udp://localhost:514"));
        assert!(is_uri("file:///dev/log"));
        assert!(!is_uri("/var/log/salt/master"));
        assert!(!is_uri("relative/log"));
        assert!(!is_uri("1abc://x"));
    }
}
