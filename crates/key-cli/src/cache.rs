//! salt-key's side effects on the master's cache directory after a reject or delete:
//! dropping the minion data cache of ids that no longer have a key
//! (`Key.check_minion_cache`, `localfs` cache layout `<cachedir>/<bank>/<id>.p`) and asking
//! the master to rotate its AES key (`salt.crypt.dropfile`, `<cachedir>/.dfn`).

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Removes `<cachedir>/{grains,pillar}/<id>.p` for every id not in `keep`. A pillar entry
/// `<id>:<pillarenv>.p` is kept when `<id>` is.
pub fn drop_minion_data(cachedir: &Path, keep: &HashSet<String>) -> io::Result<()> {
    for bank in ["grains", "pillar"] {
        let dir = cachedir.join(bank);
        let entries = match fs::read_dir(&dir) {
            Ok(it) => it,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Some(minion) = name.strip_suffix(".p") else {
                continue;
            };
            if keep.contains(minion)
                || minion
                    .split_once(':')
                    .is_some_and(|(id, _)| keep.contains(id))
            {
                continue;
            }
            if entry.file_type()?.is_file() {
                fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

/// Writes `<cachedir>/.dfn` holding `master_id` (mode 0400) unless a rotation is already
/// requested. The file is written as `.dfn-next` and renamed, as Salt does.
pub fn request_aes_rotation(
    cachedir: &Path,
    master_id: &str,
) -> Result<(), (std::path::PathBuf, io::Error)> {
    let dfn = cachedir.join(".dfn");
    if dfn.is_file() {
        return Ok(());
    }
    let next = cachedir.join(".dfn-next");
    let write = || -> io::Result<()> {
        // A stale `.dfn-next` from an interrupted run is 0400; start afresh.
        match fs::remove_file(&next) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&next)?;
        f.write_all(master_id.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(0o400))?;
        Ok(())
    };
    write().map_err(|e| (next.clone(), e))?;
    fs::rename(&next, &dfn).map_err(|e| (dfn.clone(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_of_ids_without_keys_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        for (bank, name) in [
            ("grains", "keep.p"),
            ("grains", "gone.p"),
            ("pillar", "keep:base.p"),
            ("pillar", "gone:base.p"),
            ("pillar", "other"),
        ] {
            fs::create_dir_all(dir.path().join(bank)).unwrap();
            fs::write(dir.path().join(bank).join(name), "x").unwrap();
        }
        let keep: HashSet<String> = ["keep".to_string()].into();
        drop_minion_data(dir.path(), &keep).unwrap();
        let left = |bank: &str| {
            let mut v: Vec<String> = fs::read_dir(dir.path().join(bank))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(left("grains"), ["keep.p"]);
        assert_eq!(left("pillar"), ["keep:base.p", "other"]);
    }

    #[test]
    fn rotation_dropfile_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        request_aes_rotation(dir.path(), "m_master").unwrap();
        let dfn = dir.path().join(".dfn");
        assert_eq!(fs::read_to_string(&dfn).unwrap(), "m_master");
        assert_eq!(
            fs::metadata(&dfn).unwrap().permissions().mode() & 0o777,
            0o400
        );
        request_aes_rotation(dir.path(), "other").unwrap();
        assert_eq!(fs::read_to_string(&dfn).unwrap(), "m_master");
    }

    #[test]
    fn missing_cachedir_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = request_aes_rotation(&dir.path().join("nope"), "m").unwrap_err();
        assert_eq!(path, dir.path().join("nope/.dfn-next"));
    }
}
