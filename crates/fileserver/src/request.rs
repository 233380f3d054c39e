//! What a request names: the file path (with Salt's `?saltenv=` query and `|` escape) and
//! the saltenv, checked before anything touches the file system.

/// A path relative to a root: at least one component, none empty, `.` or `..`, no NUL.
/// Joining it to a root can only name something below that root (symlinks aside, see
/// [`crate::Roots`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath(String);

impl RelPath {
    /// Checks a requested path as `Fileserver.find_file` and `roots.find_file` do, only
    /// stricter: absolute paths, any `..` component (Salt refuses `../` anywhere and then
    /// `os.path.normpath`s) and NUL bytes are refused; empty and `.` components are
    /// dropped, as `normpath` drops them.
    pub fn parse(path: &str) -> Option<RelPath> {
        if path.starts_with('/') || path.contains('\0') || path.contains("../") {
            return None;
        }
        let mut parts = Vec::new();
        for part in path.split('/') {
            match part {
                "" | "." => {}
                ".." => return None,
                p => parts.push(p),
            }
        }
        if parts.is_empty() {
            return None;
        }
        Some(RelPath(parts.join("/")))
    }

    /// The normalised path (`a/b/c`), which replies carry as `dest` and `rel`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path itself and each directory above it: `a`, `a/b`, `a/b/c` for `a/b/c`.
    pub fn prefixes(&self) -> impl Iterator<Item = &str> {
        self.0
            .match_indices('/')
            .map(|(i, _)| &self.0[..i])
            .chain(std::iter::once(self.0.as_str()))
    }
}

/// A requested file: the path part of Salt's `path?saltenv=x&index=n` form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRequest {
    /// The path, not yet checked.
    pub path: String,
    /// The saltenv: the query's `saltenv` when given, else the load's.
    pub saltenv: String,
    /// The query's `index` (which root of the saltenv), as given.
    pub index: Option<String>,
}

impl FileRequest {
    /// `Fileserver.find_file`'s reading of `path`: a path starting with `|` is escaped (the
    /// bars are stripped and a `?` is part of the name); otherwise everything after the
    /// first `?` up to the next is a query of `key=value` pairs joined by `&`, of which
    /// `saltenv` and `index` count.
    pub fn parse(path: &str, saltenv: &str) -> FileRequest {
        let mut req = FileRequest {
            path: path.to_owned(),
            saltenv: saltenv.to_owned(),
            index: None,
        };
        if path.starts_with('|') {
            req.path = path.trim_start_matches('|').to_owned();
            return req;
        }
        let mut parts = path.split('?');
        let Some(head) = parts.next() else {
            return req;
        };
        let query = parts.next().unwrap_or("");
        req.path = head.to_owned();
        for comp in query.split('&') {
            if let Some((key, value)) = comp.split_once('=') {
                match key {
                    "saltenv" => req.saltenv = value.to_owned(),
                    "index" => req.index = Some(value.to_owned()),
                    _ => {}
                }
            }
        }
        req
    }
}

/// The longest saltenv name a request may map onto `__env__`.
pub const MAX_SALTENV_LEN: usize = 255;

/// Whether `saltenv` may be substituted for `__env__` in a root path: not empty, at most
/// [`MAX_SALTENV_LEN`] bytes, no `/`, no NUL, no `..`, not `.`. Salt substitutes any name,
/// so `saltenv: ../../etc` with `__env__: [/srv/envs/__env__]` serves `/etc`; Halite treats
/// such a saltenv as unknown.
pub fn safe_env_name(saltenv: &str) -> bool {
    !saltenv.is_empty()
        && saltenv.len() <= MAX_SALTENV_LEN
        && saltenv != "."
        && !saltenv.contains(['/', '\0'])
        && !saltenv.contains("..")
}

/// Python's `int()` of an `index` query value, as a position in a list of `len` roots
/// (negative counts from the end, as Python indexing does).
pub fn root_index(index: &str, len: usize) -> Option<usize> {
    let n: i64 = index.trim().replace('_', "").parse().ok()?;
    let len = i64::try_from(len).ok()?;
    let i = if n < 0 { n.checked_add(len)? } else { n };
    if (0..len).contains(&i) {
        usize::try_from(i).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_absolute_paths_and_nul_bytes_are_refused() {
        for bad in [
            "../etc/passwd",
            "../../etc/passwd",
            "a/../../etc/passwd",
            "a/..",
            "..",
            "/etc/passwd",
            "//etc/passwd",
            "top.sls\0.txt",
            "foo../bar",
            "",
            ".",
            "./",
            "//",
        ] {
            assert_eq!(RelPath::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn paths_are_normalised_like_normpath() {
        for (given, rel) in [
            ("top.sls", "top.sls"),
            ("a//b/./c", "a/b/c"),
            ("./a/b/", "a/b"),
            ("..a/b..", "..a/b.."),
            ("a\\..\\b", "a\\..\\b"),
        ] {
            assert_eq!(RelPath::parse(given).unwrap().as_str(), rel, "{given:?}");
        }
    }

    #[test]
    fn prefixes_are_each_directory_then_the_path() {
        let p = RelPath::parse("a/b/c").unwrap();
        assert_eq!(p.prefixes().collect::<Vec<_>>(), ["a", "a/b", "a/b/c"]);
        let p = RelPath::parse("top.sls").unwrap();
        assert_eq!(p.prefixes().collect::<Vec<_>>(), ["top.sls"]);
    }

    #[test]
    fn the_query_overrides_the_saltenv_and_an_escaped_path_keeps_its_question_mark() {
        let r = FileRequest::parse("files/x?saltenv=dev&index=1&junk&k=v", "base");
        assert_eq!(r.path, "files/x");
        assert_eq!(r.saltenv, "dev");
        assert_eq!(r.index.as_deref(), Some("1"));
        let r = FileRequest::parse("||what?saltenv=dev", "base");
        assert_eq!(r.path, "what?saltenv=dev");
        assert_eq!(r.saltenv, "base");
        let r = FileRequest::parse("a?b?saltenv=dev", "base");
        assert_eq!((r.path.as_str(), r.saltenv.as_str()), ("a", "base"));
    }

    #[test]
    fn saltenv_names_that_could_leave_a_root_are_not_safe() {
        for bad in ["", ".", "..", "../etc", "a/b", "/etc", "a..b", "x\0y"] {
            assert!(!safe_env_name(bad), "{bad:?}");
        }
        assert!(!safe_env_name(&"e".repeat(256)));
        for good in [
            "dev",
            "feature-1",
            "prod.eu",
            "__env__",
            "e".repeat(255).as_str(),
        ] {
            assert!(safe_env_name(good), "{good:?}");
        }
    }

    #[test]
    fn root_index_is_python_indexing() {
        assert_eq!(root_index("0", 2), Some(0));
        assert_eq!(root_index(" 1 ", 2), Some(1));
        assert_eq!(root_index("-1", 2), Some(1));
        assert_eq!(root_index("-3", 2), None);
        assert_eq!(root_index("2", 2), None);
        assert_eq!(root_index("x", 2), None);
        assert_eq!(root_index("1_0", 20), Some(10));
    }
}
