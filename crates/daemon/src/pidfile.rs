//! The daemons' pidfile: Salt's `pidfile` option (`/var/run/salt-master.pid`,
//! `/var/run/salt-minion.pid` under `root_dir`), or `--pid-file`.
//!
//! As Salt (`salt.utils.process.set_pidfile`): the parent directory is created, the file
//! holds the decimal pid with no newline, and it is removed when the daemon exits.
//!
//! Deviations, both safer than Salt:
//! - the file is held under an exclusive `flock` for the daemon's life, and a second
//!   daemon given the same pidfile refuses to start ([`Error::Running`]) before it writes
//!   anything. Salt's minion refuses too, but judges by whether the pid in the file is
//!   alive, so a stale file whose pid was reused blocks it; a lock dies with its holder.
//!   Salt's master does not check at all, and a second master overwrote the first one's
//!   pidfile, then removed it when it failed to bind the ports;
//! - on exit the file is removed only if it still holds this process's pid, so a file
//!   another program rewrote meanwhile is left alone.
//!
//! Not done: `chown` to the configured `user` (Halite's daemons do not switch user, so the
//! file belongs to the user running them).

use crate::Error;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A written, locked pidfile; removed on drop (see the module docs).
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
    /// Holds the `flock` until the daemon exits (never read).
    _lock: File,
}

impl PidFile {
    /// Creates `path`'s directory, locks the file and writes this process's pid into it.
    ///
    /// # Errors
    /// [`Error::Running`] when another live process holds the file's lock (that process
    /// is untouched); [`Error::PidFile`] when the directory or file cannot be created,
    /// locked or written.
    pub fn create(path: &Path) -> Result<PidFile, Error> {
        let io = |source| Error::PidFile {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(io)?;
        // SAFETY: flock reads its two integer arguments only; the descriptor is open.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(Error::Running {
                    path: path.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            return Err(io(err));
        }
        let pid = std::process::id();
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(pid.to_string().as_bytes()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
            _lock: file,
        })
    }

    /// The pidfile's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let mine = std::fs::read_to_string(&self.path)
            .is_ok_and(|text| text.trim() == self.pid.to_string());
        if mine {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::info!("PIDfile({}) could not be deleted: {e}", self.path.display());
            }
        }
        // `_lock` drops after this, releasing the lock once the file is gone.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pidfile_holds_the_pid_without_newline_in_a_created_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/deeper/salt-minion.pid");
        let pidfile = PidFile::create(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            std::process::id().to_string()
        );
        assert_eq!(pidfile.path(), path);
    }

    #[test]
    fn pidfile_is_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("salt-master.pid");
        drop(PidFile::create(&path).unwrap());
        assert!(!path.exists());
    }

    #[test]
    fn stale_pidfile_of_a_dead_process_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("salt-master.pid");
        std::fs::write(&path, "999999999\nleftover").unwrap();
        let _pidfile = PidFile::create(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            std::process::id().to_string()
        );
    }

    #[test]
    fn second_holder_is_refused_and_the_first_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("salt-minion.pid");
        let _first = PidFile::create(&path).unwrap();
        // flock locks belong to the open file description, so a second open in the same
        // process conflicts just as another process would.
        match PidFile::create(&path) {
            Err(Error::Running { pid, path: p }) => {
                assert_eq!(pid, Some(std::process::id()));
                assert_eq!(p, path);
            }
            other => panic!("expected Running, got {other:?}"),
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            std::process::id().to_string()
        );
    }

    #[test]
    fn pidfile_rewritten_by_another_program_is_left_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("salt-master.pid");
        let pidfile = PidFile::create(&path).unwrap();
        std::fs::write(&path, "12345").unwrap();
        drop(pidfile);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "12345");
    }

    #[test]
    fn unwritable_location_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        let path = blocker.join("salt-master.pid");
        match PidFile::create(&path) {
            Err(Error::PidFile { path: p, .. }) => assert_eq!(p, path),
            other => panic!("expected PidFile error, got {other:?}"),
        }
    }
}
