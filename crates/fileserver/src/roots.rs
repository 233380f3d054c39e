//! The `roots` backend: finding, hashing and reading files, and listing saltenvs.

use crate::ignore::Ignore;
use crate::listing::{ListCache, Listing, WalkRules};
use crate::options::Options;
use crate::request::{root_index, safe_env_name, FileRequest, RelPath};
use crate::Error;
use halite_config::MasterConfig;
use std::collections::HashMap;
use std::fs::{File, Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The most file hashes kept in memory; past it the cache starts over.
pub const MAX_CACHED_HASHES: usize = 100_000;

/// How much of a file one read takes while hashing.
const HASH_READ_SIZE: usize = 64 << 10;

/// The name `__env__`, whose roots serve any saltenv not configured by name.
pub const ENV_WILDCARD: &str = "__env__";

/// A file found in a saltenv, opened: every later step (stat, hash, read) uses this open
/// file, so a path swapped after the checks cannot change what is served.
#[derive(Debug)]
pub struct Found {
    file: File,
    rel: RelPath,
    full: PathBuf,
    meta: Metadata,
}

impl Found {
    /// The path relative to its root (`dest` and `rel` in replies).
    pub fn rel(&self) -> &str {
        self.rel.as_str()
    }

    /// The root joined with the relative path, as configured (not resolved).
    pub fn full_path(&self) -> &Path {
        &self.full
    }

    /// `fstat` of the open file.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// `list(os.stat(path))`: mode, inode, device, links, uid, gid, size, and the access,
    /// modification and change times in whole seconds.
    pub fn stat_list(&self) -> [i64; 10] {
        let m = &self.meta;
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            i64::from(m.mode()),
            int(m.ino()),
            int(m.dev()),
            int(m.nlink()),
            i64::from(m.uid()),
            i64::from(m.gid()),
            int(m.size()),
            m.atime(),
            m.mtime(),
            m.ctime(),
        ]
    }
}

/// What a cached hash is valid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(m: &Metadata) -> FileStamp {
        FileStamp {
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The `roots` file server backend.
pub struct Roots {
    opts: Options,
    warnings: Vec<String>,
    ignore: Ignore,
    lists: ListCache,
    hashes: Mutex<HashMap<(u64, u64), (FileStamp, String)>>,
}

impl std::fmt::Debug for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roots").field("opts", &self.opts).finish()
    }
}

impl Roots {
    /// A backend with these options.
    pub fn new(opts: Options) -> Roots {
        Roots {
            ignore: Ignore::new(opts.ignore_regex.clone(), &opts.ignore_glob),
            lists: ListCache::new(opts.list_check_interval),
            hashes: Mutex::new(HashMap::new()),
            warnings: Vec::new(),
            opts,
        }
    }

    /// The backend a master configuration describes ([`Options::from_master`]); its
    /// warnings are kept for the caller to log ([`Roots::warnings`]).
    pub fn from_master(cfg: &MasterConfig) -> Result<Roots, Error> {
        let (opts, warnings) = Options::from_master(cfg)?;
        Ok(Roots {
            warnings,
            ..Roots::new(opts)
        })
    }

    /// The options in use.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// What the configuration deserves a warning for.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Directory walks made so far (each listing cache miss is one).
    pub fn walks(&self) -> u64 {
        self.lists.walks()
    }

    /// `envs()`: the configured saltenvs, sorted (`__env__` included when configured).
    pub fn envs(&self) -> Vec<String> {
        if !self.opts.enabled {
            return Vec::new();
        }
        let mut envs: Vec<String> = self
            .opts
            .file_roots
            .iter()
            .map(|(e, _)| e.clone())
            .collect();
        envs.sort();
        envs.dedup();
        envs
    }

    /// The directories serving `saltenv`: its own, or those of `__env__` with the name
    /// substituted when it is a safe name ([`safe_env_name`]); `None` for an unknown
    /// saltenv.
    pub fn env_roots(&self, saltenv: &str) -> Option<Vec<PathBuf>> {
        if !self.opts.enabled {
            return None;
        }
        let named = |name: &str| {
            self.opts
                .file_roots
                .iter()
                .find(|(e, _)| e == name)
                .map(|(_, dirs)| dirs)
        };
        if let Some(dirs) = named(saltenv) {
            return Some(dirs.clone());
        }
        let dirs = named(ENV_WILDCARD)?;
        if !safe_env_name(saltenv) {
            tracing::warn!("Refused saltenv {saltenv:?}: not a name __env__ can stand for");
            return None;
        }
        Some(
            dirs.iter()
                .map(|d| PathBuf::from(d.to_string_lossy().replace(ENV_WILDCARD, saltenv)))
                .collect(),
        )
    }

    /// `Fileserver.find_file` + `roots.find_file`: the file `path` names in `saltenv`
    /// (Salt's `?saltenv=`/`?index=` query and `|` escape honoured), opened, or `None`.
    ///
    /// Refused: a path that is absolute, has a `..` component or a NUL byte; an unknown
    /// saltenv; an ignored file or one below an ignored directory; anything but a regular
    /// file (a FIFO, a device); with `fileserver_followsymlinks: False`, a file that
    /// resolves outside its root; with `fileserver_ignoresymlinks: True`, a path through
    /// a symlink below the root.
    pub fn find(&self, path: &str, saltenv: &str) -> Option<Found> {
        let req = FileRequest::parse(path, saltenv);
        let Some(rel) = RelPath::parse(&req.path) else {
            if !req.path.is_empty() {
                tracing::warn!("Refused fileserver path {:?}", req.path);
            }
            return None;
        };
        let roots = self.env_roots(&req.saltenv)?;
        if let Some(index) = req.index {
            let root = roots.get(root_index(&index, roots.len())?)?;
            return self.open_in(root, rel);
        }
        roots
            .iter()
            .find_map(|root| self.open_in(root, rel.clone()))
    }

    fn open_in(&self, root: &Path, rel: RelPath) -> Option<Found> {
        if self.ignore.file(root, rel.prefixes()) {
            return None;
        }
        let full = root.join(rel.as_str());
        // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&full)
        {
            Ok(f) => f,
            Err(e) => {
                if e.kind() != ErrorKind::NotFound {
                    tracing::debug!("roots: cannot open {}: {e}", full.display());
                }
                return None;
            }
        };
        let meta = file.metadata().ok().filter(Metadata::is_file)?;
        if !self.opts.follow_symlinks || self.opts.ignore_symlinks {
            // Where the open file really is, not where the path pointed when checked.
            let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
            let real_root = std::fs::canonicalize(root).ok()?;
            if !self.opts.follow_symlinks && !real.starts_with(&real_root) {
                tracing::warn!(
                    "Refused {}: it resolves to {}, outside its root (fileserver_followsymlinks is off)",
                    full.display(),
                    real.display()
                );
                return None;
            }
            if self.opts.ignore_symlinks && real != real_root.join(rel.as_str()) {
                tracing::debug!(
                    "roots: {} goes through a symlink (fileserver_ignoresymlinks)",
                    full.display()
                );
                return None;
            }
        }
        Some(Found {
            file,
            rel,
            full,
            meta,
        })
    }

    /// The file's hash in the configured `hash_type`, as lower-case hex. Kept in memory per
    /// file (device, inode) while its size, mtime and ctime stay the same.
    pub fn hash(&self, found: &Found) -> Result<String, Error> {
        let key = (found.meta.dev(), found.meta.ino());
        let stamp = FileStamp::of(&found.meta);
        if let Some((s, h)) = self
            .hashes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            if *s == stamp {
                return Ok(h.clone());
            }
        }
        let io = |source| Error::Io {
            what: "cannot hash",
            path: found.full.clone(),
            source,
        };
        let mut hasher = self.opts.hash_type.hasher().map_err(Error::Crypto)?;
        let mut buf = vec![0u8; HASH_READ_SIZE];
        let mut offset = 0u64;
        loop {
            let n = match found.file.read_at(&mut buf, offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(e)),
            };
            hasher
                .update(buf.get(..n).unwrap_or_default())
                .map_err(Error::Crypto)?;
            offset += n as u64;
        }
        let hsum = hex::encode(hasher.finish().map_err(Error::Crypto)?);
        let mut hashes = self.hashes.lock().unwrap_or_else(PoisonError::into_inner);
        if hashes.len() >= MAX_CACHED_HASHES {
            hashes.clear();
        }
        hashes.insert(key, (stamp, hsum.clone()));
        Ok(hsum)
    }

    /// At most `file_buffer_size` bytes of the file from byte `loc` (none at or past the
    /// end).
    pub fn read_chunk(&self, found: &Found, loc: u64) -> Result<Vec<u8>, Error> {
        let left = found.meta.size().saturating_sub(loc);
        let want = usize::try_from(left).map_or(self.opts.file_buffer_size, |l| {
            l.min(self.opts.file_buffer_size)
        });
        let mut buf = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            let Some(rest) = buf.get_mut(filled..) else {
                break;
            };
            match found.file.read_at(rest, loc + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Error::Io {
                        what: "cannot read",
                        path: found.full.clone(),
                        source,
                    })
                }
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    /// The listing of `saltenv` (cached, see [`crate::listing`]), `None` for an unknown
    /// saltenv.
    pub fn listing(&self, saltenv: &str) -> Option<Arc<Listing>> {
        let roots = self.env_roots(saltenv)?;
        let rules = WalkRules {
            ignore: &self.ignore,
            follow_symlinks: self.opts.follow_symlinks,
            ignore_symlinks: self.opts.ignore_symlinks,
        };
        Some(self.lists.get(saltenv, &roots, &rules))
    }
}
