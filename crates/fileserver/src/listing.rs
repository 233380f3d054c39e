//! Listings of a saltenv (`_file_lists` of `roots.py`) and their cache.
//!
//! A listing is one walk of the saltenv's roots. The cache keeps it with a stamp (device,
//! inode, mtime) of every directory the walk read, taken before reading it, and of every
//! root (a missing root too). A request within the check interval of the last check gets
//! the cached listing; after it, one request re-stats the recorded directories — creating,
//! removing or renaming an entry changes its directory's mtime — and walks again only when
//! a stamp changed. Requests for the same saltenv meanwhile wait for that one check or
//! walk, so any number of minions asking at once cost at most one walk per change.
//! A directory whose mtime is within a second of the walk is "racy" (a change in the
//! same clock tick would keep its mtime): such a listing is walked again at the next check.

use crate::ignore::Ignore;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most saltenvs whose listings are cached at once; past it, the least recently used
/// is dropped (with `__env__`, minions can name any number of saltenvs).
pub const MAX_CACHED_ENVS: usize = 256;

/// What one saltenv holds, as Salt's `roots` backend lists it: relative paths with `/`
/// separators, sorted, each root's entries merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Everything that is not a directory (files, symlinks to files, broken symlinks).
    pub files: Vec<String>,
    /// Directories, and symlinks to directories.
    pub dirs: Vec<String>,
    /// Directories with no entries at all.
    pub empty_dirs: Vec<String>,
    /// Symlinks and what they point to (the link's text), for links that resolve inside
    /// their root, and with `fileserver_followsymlinks: False` for every link.
    pub links: Vec<(String, String)>,
}

/// How a walk treats symlinks and ignored entries.
pub(crate) struct WalkRules<'a> {
    pub(crate) ignore: &'a Ignore,
    pub(crate) follow_symlinks: bool,
    pub(crate) ignore_symlinks: bool,
}

/// A directory as the cache last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl DirStamp {
    fn of(meta: &Metadata) -> DirStamp {
        DirStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }

    /// The stamp of the directory at `path` (symlinks followed), `None` when there is none.
    fn read(path: &Path) -> Option<DirStamp> {
        fs::metadata(path)
            .ok()
            .filter(Metadata::is_dir)
            .map(|m| DirStamp::of(&m))
    }
}

type Stamps = Vec<(PathBuf, Option<DirStamp>)>;

/// Walks `roots` as `os.walk` does for `_file_lists` (see [`Listing`]), returning the
/// listing and the stamps of the directories it read.
///
/// Deviations, all to keep the listing equal to what can be served: an ignored directory
/// is not walked into (Salt lists what is below it), a symlink skipped by
/// `fileserver_ignoresymlinks` is not walked into either, and a followed symlink to a
/// directory above it is listed but not walked again (Salt walks such a loop until the
/// path is too long). Names that are not UTF-8 are left out (a minion could not ask for
/// them).
fn walk(roots: &[PathBuf], rules: &WalkRules<'_>) -> (Listing, Stamps) {
    let mut files = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    let mut empty = BTreeSet::new();
    let mut links = BTreeMap::new();
    let mut stamps = Vec::new();
    for root in roots {
        let Some(top) = DirStamp::read(root) else {
            stamps.push((root.clone(), None));
            continue;
        };
        stamps.push((root.clone(), Some(top)));
        let real_root = realpath(root);
        let mut stack = vec![(root.clone(), String::new(), vec![(top.dev, top.ino)])];
        while let Some((dir, rel, ancestors)) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                tracing::debug!("roots: unable to list dir {}", dir.display());
                continue;
            };
            let mut count = 0usize;
            for entry in entries.flatten() {
                count += 1;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    tracing::debug!(
                        "roots: skipping a name that is not UTF-8 in {}",
                        dir.display()
                    );
                    continue;
                };
                let abs = dir.join(name);
                let rel_entry = if rel.is_empty() {
                    name.to_owned()
                } else {
                    format!("{rel}/{name}")
                };
                let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
                if is_link && rules.ignore_symlinks {
                    continue;
                }
                if rules.ignore.entry(root, &rel_entry) {
                    continue;
                }
                let target = fs::metadata(&abs).ok();
                let is_dir = target.as_ref().is_some_and(Metadata::is_dir);
                if is_link {
                    if let Some(dest) = link_entry(&abs, &dir, &real_root, rules.follow_symlinks) {
                        links.insert(rel_entry.clone(), dest);
                    }
                }
                let Some(meta) = target.filter(|_| is_dir) else {
                    files.insert(rel_entry);
                    continue;
                };
                dirs.insert(rel_entry.clone());
                let key = (meta.dev(), meta.ino());
                if (!is_link || rules.follow_symlinks) && !ancestors.contains(&key) {
                    stamps.push((abs.clone(), Some(DirStamp::of(&meta))));
                    let mut chain = ancestors.clone();
                    chain.push(key);
                    stack.push((abs, rel_entry, chain));
                } else if fs::read_dir(&abs).is_ok_and(|mut r| r.next().is_none()) {
                    empty.insert(rel_entry);
                }
            }
            if count == 0 && !rel.is_empty() {
                empty.insert(rel);
            }
        }
    }
    let listing = Listing {
        files: files.into_iter().collect(),
        dirs: dirs.into_iter().collect(),
        empty_dirs: empty.into_iter().collect(),
        links: links.into_iter().collect(),
    };
    (listing, stamps)
}

/// The `links` entry of the symlink `abs` in `dir`: its text, when it resolves inside the
/// root or symlinks are not followed. Salt resolves a text starting with `..` from the
/// link itself (as if it were a directory) and any other from the link's directory; kept.
fn link_entry(abs: &Path, dir: &Path, real_root: &Path, follow: bool) -> Option<String> {
    let dest = fs::read_link(abs).ok()?;
    let text = dest.to_str()?.to_owned();
    let joined = if text.starts_with("..") {
        abs.join(&dest)
    } else {
        dir.join(&dest)
    };
    let inside = realpath(&normpath(&joined)).starts_with(real_root);
    (inside || !follow).then_some(text)
}

/// `os.path.normpath` of an absolute or relative path: `.` dropped, `..` folded lexically.
fn normpath(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && !path.is_absolute() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `os.path.realpath` (non-strict): symlinks resolved as far as the path exists.
fn realpath(path: &Path) -> PathBuf {
    if let Ok(real) = fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => realpath(parent).join(name),
        _ => path.to_path_buf(),
    }
}

/// A cached listing.
struct Snapshot {
    listing: Arc<Listing>,
    stamps: Stamps,
    racy: bool,
    checked: Instant,
}

/// One saltenv's cache entry.
#[derive(Default)]
struct Slot {
    snapshot: Mutex<Option<Snapshot>>,
    used: AtomicU64,
}

/// The listings of every saltenv asked for (at most [`MAX_CACHED_ENVS`]).
pub(crate) struct ListCache {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    interval: Duration,
    tick: AtomicU64,
    walks: AtomicU64,
}

impl ListCache {
    pub(crate) fn new(interval: Duration) -> ListCache {
        ListCache {
            slots: Mutex::new(HashMap::new()),
            interval,
            tick: AtomicU64::new(0),
            walks: AtomicU64::new(0),
        }
    }

    /// Walks made so far.
    pub(crate) fn walks(&self) -> u64 {
        self.walks.load(Ordering::Relaxed)
    }

    fn slot(&self, saltenv: &str) -> Arc<Slot> {
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(saltenv) {
            slot.used.store(tick, Ordering::Relaxed);
            return slot.clone();
        }
        if slots.len() >= MAX_CACHED_ENVS {
            let oldest = slots
                .iter()
                .min_by_key(|(_, s)| s.used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                slots.remove(&oldest);
            }
        }
        let slot = Arc::new(Slot::default());
        slot.used.store(tick, Ordering::Relaxed);
        slots.insert(saltenv.to_owned(), slot.clone());
        slot
    }

    /// The listing of `saltenv`, whose directories are `roots`.
    pub(crate) fn get(
        &self,
        saltenv: &str,
        roots: &[PathBuf],
        rules: &WalkRules<'_>,
    ) -> Arc<Listing> {
        let slot = self.slot(saltenv);
        let mut snapshot = slot.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some(s) = snapshot.as_mut() {
            if now.duration_since(s.checked) < self.interval {
                return s.listing.clone();
            }
            if !s.racy && s.stamps.iter().all(|(p, st)| DirStamp::read(p) == *st) {
                s.checked = now;
                return s.listing.clone();
            }
        }
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let (listing, stamps) = walk(roots, rules);
        self.walks.fetch_add(1, Ordering::Relaxed);
        let racy = stamps
            .iter()
            .any(|(_, st)| st.is_some_and(|st| st.mtime >= started.saturating_sub(1)));
        let listing = Arc::new(listing);
        *snapshot = Some(Snapshot {
            listing: listing.clone(),
            stamps,
            racy,
            checked: now,
        });
        listing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn rules(ignore: &Ignore, follow: bool, ignore_symlinks: bool) -> WalkRules<'_> {
        WalkRules {
            ignore,
            follow_symlinks: follow,
            ignore_symlinks,
        }
    }

    /// A tree whose directories' mtimes are an hour old, so they are not racy.
    fn settle(dir: &Path) {
        let old = SystemTime::now() - Duration::from_secs(3600);
        for entry in [dir.to_path_buf()].into_iter().chain(all_dirs(dir)) {
            fs::File::open(&entry).unwrap().set_modified(old).unwrap();
        }
    }

    fn all_dirs(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.push(e.path());
                out.extend(all_dirs(&e.path()));
            }
        }
        out
    }

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("web/files")).unwrap();
        fs::create_dir_all(r.join("empty")).unwrap();
        fs::write(r.join("top.sls"), "base: {}\n").unwrap();
        fs::write(r.join("web/init.sls"), "").unwrap();
        fs::write(r.join("web/files/motd"), "hi").unwrap();
        t
    }

    #[test]
    fn a_walk_lists_files_dirs_and_empty_dirs_sorted() {
        let t = tree();
        let (l, stamps) = walk(
            &[t.path().to_path_buf()],
            &rules(&Ignore::default(), true, false),
        );
        assert_eq!(l.files, ["top.sls", "web/files/motd", "web/init.sls"]);
        assert_eq!(l.dirs, ["empty", "web", "web/files"]);
        assert_eq!(l.empty_dirs, ["empty"]);
        assert!(l.links.is_empty());
        assert_eq!(stamps.len(), 4, "the root and three directories");
    }

    #[test]
    fn several_roots_merge_and_a_missing_root_is_stamped_as_missing() {
        let a = tree();
        let b = tempfile::tempdir().unwrap();
        fs::write(b.path().join("other.sls"), "").unwrap();
        fs::write(b.path().join("top.sls"), "").unwrap();
        let missing = b.path().join("nope");
        let (l, stamps) = walk(
            &[
                a.path().to_path_buf(),
                missing.clone(),
                b.path().to_path_buf(),
            ],
            &rules(&Ignore::default(), true, false),
        );
        assert_eq!(
            l.files,
            ["other.sls", "top.sls", "web/files/motd", "web/init.sls"]
        );
        assert!(stamps.contains(&(missing, None)));
    }

    #[test]
    fn symlinks_inside_the_root_are_links_and_outside_ones_only_without_following() {
        let t = tree();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        let r = t.path();
        symlink("files/motd", r.join("web/motd-link")).unwrap();
        symlink(outside.path(), r.join("out-dir")).unwrap();
        symlink(outside.path().join("secret"), r.join("out-file")).unwrap();
        symlink("nowhere", r.join("broken")).unwrap();

        let ignore = Ignore::default();
        let (l, _) = walk(&[r.to_path_buf()], &rules(&ignore, true, false));
        assert_eq!(
            l.links,
            [
                ("broken".to_owned(), "nowhere".to_owned()),
                ("web/motd-link".to_owned(), "files/motd".to_owned())
            ]
        );
        assert!(
            l.files.contains(&"out-dir/secret".to_owned()),
            "followed: {:?}",
            l.files
        );
        assert!(l.dirs.contains(&"out-dir".to_owned()));

        let (l, _) = walk(&[r.to_path_buf()], &rules(&ignore, false, false));
        let names: Vec<&str> = l.links.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["broken", "out-dir", "out-file", "web/motd-link"]);
        assert!(
            !l.files.contains(&"out-dir/secret".to_owned()),
            "not followed"
        );
        assert!(l.dirs.contains(&"out-dir".to_owned()));

        let (l, _) = walk(&[r.to_path_buf()], &rules(&ignore, true, true));
        assert!(l.links.is_empty());
        assert!(!l
            .files
            .iter()
            .any(|f| f.starts_with("out-") || f == "broken"));
        assert!(!l.dirs.contains(&"out-dir".to_owned()));
    }

    #[test]
    fn a_symlink_loop_is_listed_once_not_walked_forever() {
        let t = tree();
        symlink("..", t.path().join("web/up")).unwrap();
        let (l, _) = walk(
            &[t.path().to_path_buf()],
            &rules(&Ignore::default(), true, false),
        );
        assert!(l.dirs.contains(&"web/up".to_owned()));
        assert!(
            !l.files.iter().any(|f| f.starts_with("web/up/")),
            "{:?}",
            l.files
        );
    }

    #[test]
    fn ignored_directories_are_not_walked() {
        let t = tree();
        fs::create_dir(t.path().join(".git")).unwrap();
        fs::write(t.path().join(".git/config"), "").unwrap();
        let ignore = Ignore::new(Vec::new(), &["*.git".to_owned()]);
        let (l, _) = walk(&[t.path().to_path_buf()], &rules(&ignore, true, false));
        assert!(!l.files.iter().any(|f| f.contains(".git")), "{:?}", l.files);
        assert!(!l.dirs.iter().any(|f| f.contains(".git")));
    }

    #[test]
    fn many_requests_cost_one_walk_while_nothing_changes() {
        let t = tree();
        settle(t.path());
        let ignore = Ignore::default();
        let roots = [t.path().to_path_buf()];
        let cache = ListCache::new(Duration::ZERO);
        for _ in 0..1000 {
            cache.get("base", &roots, &rules(&ignore, true, false));
        }
        assert_eq!(
            cache.walks(),
            1,
            "unchanged directories are re-stated, not re-walked"
        );
    }

    #[test]
    fn a_new_file_shows_up_at_the_next_check() {
        let t = tree();
        settle(t.path());
        let ignore = Ignore::default();
        let roots = [t.path().to_path_buf()];
        let cache = ListCache::new(Duration::ZERO);
        let before = cache.get("base", &roots, &rules(&ignore, true, false));
        assert!(!before.files.contains(&"web/files/new".to_owned()));
        fs::write(t.path().join("web/files/new"), "x").unwrap();
        let after = cache.get("base", &roots, &rules(&ignore, true, false));
        assert!(
            after.files.contains(&"web/files/new".to_owned()),
            "{:?}",
            after.files
        );
        fs::create_dir(t.path().join("empty/sub")).unwrap();
        let after = cache.get("base", &roots, &rules(&ignore, true, false));
        assert!(after.dirs.contains(&"empty/sub".to_owned()));
        assert!(!after.empty_dirs.contains(&"empty".to_owned()));
    }

    #[test]
    fn a_created_root_is_noticed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("later");
        let ignore = Ignore::default();
        let cache = ListCache::new(Duration::ZERO);
        assert!(cache
            .get(
                "base",
                std::slice::from_ref(&root),
                &rules(&ignore, true, false)
            )
            .files
            .is_empty());
        fs::create_dir(&root).unwrap();
        fs::write(root.join("top.sls"), "").unwrap();
        let l = cache.get(
            "base",
            std::slice::from_ref(&root),
            &rules(&ignore, true, false),
        );
        assert_eq!(l.files, ["top.sls"]);
    }

    #[test]
    fn within_the_check_interval_the_cached_listing_is_served() {
        let t = tree();
        let ignore = Ignore::default();
        let roots = [t.path().to_path_buf()];
        let cache = ListCache::new(Duration::from_secs(3600));
        cache.get("base", &roots, &rules(&ignore, true, false));
        fs::write(t.path().join("new"), "x").unwrap();
        let l = cache.get("base", &roots, &rules(&ignore, true, false));
        assert!(!l.files.contains(&"new".to_owned()));
        assert_eq!(cache.walks(), 1);
    }

    #[test]
    fn the_number_of_cached_saltenvs_is_bounded() {
        let ignore = Ignore::default();
        let cache = ListCache::new(Duration::from_secs(3600));
        for n in 0..(MAX_CACHED_ENVS + 10) {
            cache.get(&format!("e{n}"), &[], &rules(&ignore, true, false));
        }
        assert_eq!(cache.slots.lock().unwrap().len(), MAX_CACHED_ENVS);
    }

    #[test]
    fn normpath_folds_dots_lexically() {
        assert_eq!(
            normpath(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normpath(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(normpath(Path::new("../x")), PathBuf::from("../x"));
    }
}
