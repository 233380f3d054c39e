//! File primitives with Salt's rules: key files are regular files read as text with universal
//! newlines; symlinks are never followed when reading; writes are atomic: an unnamed file
//! linked in, or a dot-prefixed temporary file in the same directory renamed into place.

use crate::{Error, Result};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Prefix of temporary files. Listings skip dot-prefixed names, so a half-written key never
/// shows up as an id.
const TMP_PREFIX: &str = ".halite-";

pub(crate) fn io_err(path: &Path, source: io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads a key file the way `localfs_key.fetch` does: only a regular file that is not a
/// symlink counts, its text is UTF-8 and `\r\n`/`\r` become `\n` (Python text mode).
/// Returns `None` when there is no such file.
pub(crate) fn read_key_file(path: &Path) -> Result<Option<String>> {
    // O_NOFOLLOW: a symlink fails with ELOOP instead of being followed; O_NONBLOCK keeps a
    // FIFO planted in the directory from blocking the open.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let mut file = match file {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    let meta = file.metadata().map_err(|e| io_err(path, e))?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(meta.len().try_into().unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(|e| io_err(path, e))?;
    let text = String::from_utf8(bytes).map_err(|_| Error::NotUtf8(path.to_path_buf()))?;
    Ok(Some(universal_newlines(text)))
}

/// Errors that mean "no key file here": missing, a symlink (ELOOP with O_NOFOLLOW), or a
/// missing directory component.
fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

fn universal_newlines(text: String) -> String {
    if text.contains('\r') {
        text.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        text
    }
}

/// How [`write_atomic`] treats an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replace {
    /// Replace whatever is there (a symlink is replaced, not followed).
    Always,
    /// Keep an existing destination and report `false`.
    Never,
}

/// Writes `data` to `dir/name` with `mode`, atomically and durably: the data is synced
/// before the name appears, so a crash never leaves an empty or partial key under the
/// final name (the next sign-in would take it for a changed key and deny the minion).
/// Returns whether the destination was written.
///
/// A new file is written unnamed (`O_TMPFILE`) and linked in: one directory entry instead
/// of a temporary name created and renamed, which in a directory of tens of thousands of
/// keys is most of what an auth storm's key writes cost besides the fsync. Replacing a file,
/// or a file system without `O_TMPFILE`, takes the rename path.
pub(crate) fn write_atomic(
    dir: &Path,
    name: &str,
    data: &[u8],
    mode: u32,
    replace: Replace,
) -> Result<bool> {
    match link_new(dir, name, data, mode)? {
        Linked::Written => {}
        Linked::Exists if replace == Replace::Never => return Ok(false),
        Linked::Exists | Linked::Unsupported => {
            return write_via_rename(dir, name, data, mode, replace)
        }
    }
    sync_dir(dir);
    Ok(true)
}

/// What [`link_new`] did.
enum Linked {
    /// The file is in place.
    Written,
    /// Something is already at the name; nothing was changed.
    Exists,
    /// `O_TMPFILE` or `/proc/self/fd` is not available here; nothing was changed.
    Unsupported,
}

/// Writes `data` to an unnamed file in `dir` (`O_TMPFILE`), syncs it and links it in as
/// `name`, which must not exist.
fn link_new(dir: &Path, name: &str, data: &[u8], mode: u32) -> Result<Linked> {
    let opened = OpenOptions::new()
        .write(true)
        .mode(mode)
        .custom_flags(libc::O_TMPFILE)
        .open(dir);
    let mut file = match opened {
        Ok(f) => f,
        // The file system has no O_TMPFILE (EOPNOTSUPP; EISDIR or EINVAL on old kernels).
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            return Ok(Linked::Unsupported)
        }
        Err(e) => return Err(io_err(dir, e)),
    };
    file.write_all(data).map_err(|e| io_err(dir, e))?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(dir, e))?;
    file.sync_all().map_err(|e| io_err(dir, e))?;
    let dest = dir.join(name);
    let cstr =
        |p: &[u8]| CString::new(p).map_err(|_| io_err(&dest, io::ErrorKind::InvalidInput.into()));
    let from = cstr(format!("/proc/self/fd/{}", file.as_raw_fd()).as_bytes())?;
    let to = cstr(dest.as_os_str().as_bytes())?;
    // linkat(2) of an O_TMPFILE file through /proc (AT_EMPTY_PATH would need
    // CAP_DAC_READ_SEARCH).
    // SAFETY: both paths are NUL-terminated and live across the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(Linked::Written);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => Ok(Linked::Exists),
        // No /proc: the rename path reports a missing directory properly.
        Some(libc::ENOENT) if !Path::new("/proc/self/fd").is_dir() => Ok(Linked::Unsupported),
        _ => Err(io_err(&dest, e)),
    }
}

/// [`write_atomic`] through a temporary file renamed into place.
fn write_via_rename(
    dir: &Path,
    name: &str,
    data: &[u8],
    mode: u32,
    replace: Replace,
) -> Result<bool> {
    let dest = dir.join(name);
    let mut tmp = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .tempfile_in(dir)
        .map_err(|e| io_err(dir, e))?;
    tmp.write_all(data).map_err(|e| io_err(tmp.path(), e))?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(tmp.path(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_err(tmp.path(), e))?;
    match replace {
        Replace::Always => {
            tmp.persist(&dest).map_err(|e| io_err(&dest, e.error))?;
        }
        Replace::Never => match tmp.persist_noclobber(&dest) {
            Ok(_) => {}
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(io_err(&dest, e.error)),
        },
    }
    sync_dir(dir);
    Ok(true)
}

/// Best-effort fsync of a directory so a rename survives a crash.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Removes `path` unless it is a directory. Returns whether something was removed.
pub(crate) fn remove_entry(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(false),
        Ok(_) => match fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(path, e)),
        },
        Err(e) if is_absent(&e) => Ok(false),
        Err(e) => Err(io_err(path, e)),
    }
}

/// Creates `dir` (and missing parents) with `mode` if it does not exist.
pub(crate) fn ensure_dir(dir: &Path, mode: u32) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| io_err(dir, e))?;
    // The umask may have narrowed the mode; Salt creates these under umask 022.
    fs::set_permissions(dir, fs::Permissions::from_mode(mode)).map_err(|e| io_err(dir, e))
}

/// Names of the regular (non-symlink) files in `dir` that are UTF-8; a missing directory
/// has none.
pub(crate) fn regular_files(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(it) => it,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        // DirEntry::file_type does not follow symlinks.
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if let (true, Ok(name)) = (is_file, entry.file_name().into_string()) {
            names.push(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_normalises_line_endings_like_python_text_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        fs::write(&p, "a\r\nb\rc\n").unwrap();
        assert_eq!(read_key_file(&p).unwrap().as_deref(), Some("a\nb\nc\n"));
    }

    #[test]
    fn symlinks_and_directories_are_not_key_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("real"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(read_key_file(&dir.path().join("link")).unwrap(), None);
        assert_eq!(read_key_file(&dir.path().join("sub")).unwrap(), None);
        assert_eq!(read_key_file(&dir.path().join("missing")).unwrap(), None);
        assert_eq!(regular_files(dir.path()).unwrap(), vec!["real".to_string()]);
    }

    /// Every name in `dir`, dot-files included.
    fn all_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn mode_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn atomic_write_sets_mode_and_can_refuse_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_atomic(dir.path(), "k", b"one", 0o400, Replace::Never).unwrap());
        assert!(!write_atomic(dir.path(), "k", b"two", 0o400, Replace::Never).unwrap());
        let p = dir.path().join("k");
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(mode_of(&p), 0o400);
        assert!(write_atomic(dir.path(), "k", b"three", 0o600, Replace::Always).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(mode_of(&p), 0o600);
        assert_eq!(all_names(dir.path()), ["k"], "no temporary file left");
    }

    #[test]
    fn a_new_file_is_linked_in_without_a_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            link_new(dir.path(), "k", b"key", 0o644).unwrap(),
            Linked::Written
        ));
        let p = dir.path().join("k");
        assert_eq!(
            (fs::read(&p).unwrap(), mode_of(&p)),
            (b"key".to_vec(), 0o644)
        );
        assert!(matches!(
            link_new(dir.path(), "k", b"other", 0o644).unwrap(),
            Linked::Exists
        ));
        assert_eq!(fs::read(&p).unwrap(), b"key");
        assert_eq!(all_names(dir.path()), ["k"]);
        assert!(link_new(&dir.path().join("missing"), "k", b"key", 0o644).is_err());
    }

    #[test]
    fn the_rename_path_writes_replaces_and_refuses_to_clobber_alike() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        assert!(write_via_rename(dir.path(), "k", b"one", 0o400, Replace::Never).unwrap());
        assert!(!write_via_rename(dir.path(), "k", b"two", 0o400, Replace::Never).unwrap());
        assert_eq!(
            (fs::read(&p).unwrap(), mode_of(&p)),
            (b"one".to_vec(), 0o400)
        );
        assert!(write_via_rename(dir.path(), "k", b"three", 0o600, Replace::Always).unwrap());
        assert_eq!(
            (fs::read(&p).unwrap(), mode_of(&p)),
            (b"three".to_vec(), 0o600)
        );
        assert_eq!(all_names(dir.path()), ["k"]);
    }

    #[test]
    fn a_symlink_at_the_name_is_replaced_or_kept_but_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, "keep").unwrap();
        let link = dir.path().join("k");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(!write_atomic(dir.path(), "k", b"new", 0o600, Replace::Never).unwrap());
        assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
        assert!(write_atomic(dir.path(), "k", b"new", 0o600, Replace::Always).unwrap());
        assert!(!fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(fs::read(&link).unwrap(), b"new");
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }
}
