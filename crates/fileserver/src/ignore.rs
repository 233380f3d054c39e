//! `file_ignore_regex` and `file_ignore_glob` (Salt's `is_file_ignored`).

use halite_target::fnmatch::Pattern;
use halite_target::pyre::PyRegex;
use std::path::Path;
use std::sync::Arc;

/// The ignore rules, compiled once.
#[derive(Debug, Default)]
pub(crate) struct Ignore {
    regexes: Vec<Arc<PyRegex>>,
    globs: Vec<Pattern>,
}

impl Ignore {
    pub(crate) fn new(regexes: Vec<Arc<PyRegex>>, globs: &[String]) -> Ignore {
        Ignore {
            regexes,
            globs: globs.iter().map(|g| Pattern::new(g)).collect(),
        }
    }

    /// `is_file_ignored(opts, text)`: a regex `re.search`es or a glob `fnmatch`es. A regex
    /// that fails at run time (the backtracking limit) counts as a match: an ignore rule
    /// fails closed.
    fn matches(&self, text: &str) -> bool {
        self.regexes.iter().any(|re| {
            re.is_match(text).unwrap_or_else(|e| {
                tracing::warn!("file_ignore_regex failed on {text:?}, ignoring the file: {e}");
                true
            })
        }) || self.globs.iter().any(|g| g.matches(text))
    }

    /// Whether the entry `rel` below `root` is ignored on its own: its relative path (what
    /// Salt checks when listing) or its full path (what Salt checks when serving) matches.
    pub(crate) fn entry(&self, root: &Path, rel: &str) -> bool {
        if self.regexes.is_empty() && self.globs.is_empty() {
            return false;
        }
        self.matches(rel) || root.join(rel).to_str().is_some_and(|f| self.matches(f))
    }

    /// Whether a file is ignored: it, or a directory above it below the root, is ignored
    /// ([`Ignore::entry`]), so what is listed and what is served agree.
    pub(crate) fn file<'a>(
        &self,
        root: &Path,
        mut prefixes: impl Iterator<Item = &'a str>,
    ) -> bool {
        prefixes.any(|p| self.entry(root, p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_target::pyre::Anchor;

    fn rules(regexes: &[&str], globs: &[&str]) -> Ignore {
        Ignore::new(
            regexes
                .iter()
                .map(|r| Arc::new(PyRegex::new(r, Anchor::Search).unwrap()))
                .collect(),
            &globs.iter().map(|g| (*g).to_owned()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_rule_matching_either_the_relative_or_the_full_path_ignores() {
        let root = Path::new("/srv/salt");
        // Salt's documented example only matches full paths at the top level.
        let i = rules(&[r"/\.git($|/)"], &["*.swp"]);
        assert!(i.entry(root, ".git"));
        assert!(i.entry(root, "a/.git"));
        assert!(i.entry(root, "x.swp"));
        assert!(!i.entry(root, "top.sls"));
        let i = rules(&[], &["secret/*"]);
        assert!(i.entry(root, "secret/key"));
    }

    #[test]
    fn files_below_an_ignored_directory_are_ignored() {
        let root = Path::new("/srv/salt");
        let i = rules(&[], &["*.git"]);
        assert!(i.file(root, ["a", "a/.git", "a/.git/config"].into_iter()));
        assert!(!i.file(root, ["a", "a/b.sls"].into_iter()));
    }

    #[test]
    fn no_rules_ignore_nothing() {
        assert!(!Ignore::default().entry(Path::new("/r"), "anything"));
    }
}
