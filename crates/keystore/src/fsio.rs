//! File primitives with Salt's rules: key files are regular files read as text with universal
//! newlines; symlinks are never followed when reading; writes are atomic renames of a
//! dot-prefixed temporary file in the same directory.

use crate::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
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

/// Writes `data` to `dir/name` through a temporary file renamed into place, with `mode`.
/// Returns whether the destination was written.
pub(crate) fn write_atomic(
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

    #[test]
    fn atomic_write_sets_mode_and_can_refuse_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_atomic(dir.path(), "k", b"one", 0o400, Replace::Never).unwrap());
        assert!(!write_atomic(dir.path(), "k", b"two", 0o400, Replace::Never).unwrap());
        let p = dir.path().join("k");
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o400
        );
        assert!(write_atomic(dir.path(), "k", b"three", 0o600, Replace::Always).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(
            regular_files(dir.path()).unwrap(),
            vec!["k".to_string()],
            "no temporary file left"
        );
    }
}
