//! Finding the Python interpreter that has Salt.

use crate::Error;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The check [`find_salt_python`] runs with `<python> -c`: Salt and msgpack import, with
/// the current directory left off `sys.path`.
pub const IMPORT_CHECK: &str =
    "import sys\nif sys.path and sys.path[0] == '':\n    del sys.path[0]\nimport salt, msgpack\n";

/// How much of a script is read to find its `#!` line (and pip's `sh` trampoline).
const HEAD_BYTES: u64 = 4096;

/// Where Salt's Python is: `configured` (an interpreter path, or a `salt-call`/`salt-master`
/// script whose `#!` line names the interpreter) or else `salt-call` found on `PATH` (its
/// shebang interpreter), checked by running `<python> -c "import salt, msgpack"`.
///
/// A configured name without a `/` is looked up on `PATH`. A configured file is taken as a
/// script when its `#!` line names a Python (directly, through `/usr/bin/env`, or through
/// pip's `/bin/sh` trampoline for long paths); any other file is the interpreter itself
/// (a binary, or a wrapper such as a pyenv shim). Paths are kept as named, never
/// canonicalized: a venv's `bin/python` finds its venv through the path it is run by.
///
/// Errors: [`Error::NotFound`] naming what was looked for and where, [`Error::NotSalt`]
/// when the interpreter cannot import Salt and msgpack, [`Error::Io`] when it cannot be
/// run.
pub fn find_salt_python(configured: Option<&Path>) -> Result<PathBuf, Error> {
    let path_var = std::env::var_os("PATH");
    let python = locate(configured, path_var.as_deref())?;
    check(&python)?;
    Ok(python)
}

/// The interpreter `configured` names, or `salt-call`'s on `path_var`, without the import
/// check.
fn locate(configured: Option<&Path>, path_var: Option<&OsStr>) -> Result<PathBuf, Error> {
    match configured {
        Some(given) => {
            let file = if given.as_os_str().as_encoded_bytes().contains(&b'/') {
                given.to_path_buf()
            } else {
                which(given.as_os_str(), path_var).ok_or_else(|| Error::NotFound {
                    looked_for: format!(
                        "the configured Salt Python {:?} is not on PATH ({})",
                        given,
                        show_path(path_var)
                    ),
                })?
            };
            if !file.is_file() {
                return Err(Error::NotFound {
                    looked_for: format!(
                        "the configured Salt Python {} does not exist or is not a file",
                        file.display()
                    ),
                });
            }
            Ok(interpreter_with_path(&file, path_var)?.unwrap_or(file))
        }
        None => {
            let script =
                which(OsStr::new("salt-call"), path_var).ok_or_else(|| Error::NotFound {
                    looked_for: format!(
                        "salt-call is not on PATH ({}); set the Salt Python path in the config",
                        show_path(path_var)
                    ),
                })?;
            interpreter_with_path(&script, path_var)?.ok_or_else(|| Error::NotFound {
                looked_for: format!(
                    "{} has no #! line naming a Python interpreter",
                    script.display()
                ),
            })
        }
    }
}

/// The Python interpreter a script's `#!` line names: `#!/path/python3`, `#!/usr/bin/env
/// python3` (looked up on `PATH`), or pip's trampoline for paths too long for a `#!` line
/// (`#!/bin/sh` then `'''exec' "/path/python" "$0" "$@"`). `Ok(None)` when the file has no
/// `#!` line or it names something other than a Python.
pub fn interpreter_of_script(script: &Path) -> Result<Option<PathBuf>, Error> {
    let path_var = std::env::var_os("PATH");
    interpreter_with_path(script, path_var.as_deref())
}

fn interpreter_with_path(
    script: &Path,
    path_var: Option<&OsStr>,
) -> Result<Option<PathBuf>, Error> {
    let mut head = Vec::new();
    std::fs::File::open(script)
        .and_then(|f| f.take(HEAD_BYTES).read_to_end(&mut head))
        .map_err(Error::io(format!("reading {}", script.display())))?;
    let Some(rest) = head.strip_prefix(b"#!") else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(rest);
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let mut words = first.split_whitespace();
    let Some(program) = words.next() else {
        return Ok(None);
    };
    if is_python(program) {
        return Ok(Some(PathBuf::from(program)));
    }
    if base_name(program) == "env" {
        // `env [-S] [NAME=value...] python3 ...`
        let named = words.find(|w| !w.starts_with('-') && !w.contains('='));
        return Ok(named
            .filter(|w| is_python(w))
            .and_then(|w| which(OsStr::new(w), path_var)));
    }
    if matches!(base_name(program), "sh" | "bash" | "dash") {
        // pip's trampoline: `'''exec' "/long/path/bin/python" "$0" "$@"`.
        for line in lines {
            if let Some(after) = line.trim_start().strip_prefix("'''exec' ") {
                let quoted = after.trim_start();
                let python = quoted
                    .strip_prefix('"')
                    .and_then(|q| q.split('"').next())
                    .or_else(|| quoted.split_whitespace().next());
                return Ok(python.filter(|p| is_python(p)).map(PathBuf::from));
            }
        }
    }
    Ok(None)
}

/// Whether a program name is a Python interpreter's (`python`, `python3`, `python3.11`).
fn is_python(program: &str) -> bool {
    base_name(program).starts_with("python")
}

fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// The first executable regular file `name` on `path_var`.
fn which(name: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn show_path(path_var: Option<&OsStr>) -> String {
    match path_var {
        Some(p) => format!("PATH={}", p.to_string_lossy()),
        None => "PATH is not set".to_owned(),
    }
}

/// Runs `<python> -c IMPORT_CHECK`.
fn check(python: &Path) -> Result<(), Error> {
    let out = Command::new(python)
        .args(["-c", IMPORT_CHECK])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(Error::io(format!("running {}", python.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(Error::NotSalt {
        python: python.to_path_buf(),
        why: format!("{}: {}", out.status, tail.join(" | ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    /// The stock venv's interpreter (CI provides it; tests fail, never skip, without it).
    fn venv_python() -> PathBuf {
        halite_testkit::salt_venv().join("bin").join("python3")
    }

    fn write_exec(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn salt_call_on_path_gives_its_shebang_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let py = venv_python();
        write_exec(
            &dir.path().join("salt-call"),
            &format!("#!{}\nimport salt.scripts\n", py.display()),
        );
        let path_var = std::env::join_paths([dir.path()]).unwrap();
        let found = locate(None, Some(&path_var)).unwrap();
        assert_eq!(found, py);
        check(&found).expect("the stock venv imports salt and msgpack");
    }

    #[test]
    fn a_missing_salt_call_names_what_was_looked_for_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let path_var = std::env::join_paths([dir.path()]).unwrap();
        let err = locate(None, Some(&path_var)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::NotFound { .. }), "{msg}");
        assert!(msg.contains("salt-call"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        let err = locate(None, None).unwrap_err();
        assert!(err.to_string().contains("PATH is not set"), "{err}");
    }

    #[test]
    fn a_configured_interpreter_is_used_as_is_and_checked() {
        let py = venv_python();
        assert_eq!(find_salt_python(Some(&py)).unwrap(), py);
    }

    #[test]
    fn a_configured_script_gives_its_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let py = venv_python();
        let script = dir.path().join("salt-master");
        write_exec(&script, &format!("#!{} -E\nimport salt\n", py.display()));
        assert_eq!(find_salt_python(Some(&script)).unwrap(), py);
    }

    #[test]
    fn a_configured_missing_file_is_not_found_with_its_path() {
        let err = locate(Some(Path::new("/nonexistent/bin/python3")), None).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }));
        assert!(
            err.to_string().contains("/nonexistent/bin/python3"),
            "{err}"
        );
        let err = locate(
            Some(Path::new("no-such-python")),
            Some(OsStr::new("/nonexistent")),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no-such-python"), "{err}");
    }

    #[test]
    fn env_shebangs_are_looked_up_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        write_exec(&bin.join("python3"), "#!/bin/sh\n");
        write_exec(
            &dir.path().join("salt-call"),
            "#!/usr/bin/env -S python3 -E\nimport salt\n",
        );
        let path_var: OsString = std::env::join_paths([&bin]).unwrap();
        assert_eq!(
            interpreter_with_path(&dir.path().join("salt-call"), Some(&path_var)).unwrap(),
            Some(bin.join("python3"))
        );
    }

    #[test]
    fn pips_sh_trampoline_names_the_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("salt-call");
        write_exec(
            &script,
            "#!/bin/sh\n'''exec' \"/very/long/venv/bin/python3\" \"$0\" \"$@\"\n' '''\nimport salt\n",
        );
        assert_eq!(
            interpreter_with_path(&script, None).unwrap(),
            Some(PathBuf::from("/very/long/venv/bin/python3"))
        );
    }

    #[test]
    fn a_wrapper_that_is_not_a_python_script_is_the_interpreter_itself() {
        let dir = tempfile::tempdir().unwrap();
        let shim = dir.path().join("python3");
        write_exec(&shim, "#!/usr/bin/env bash\nexec real-python \"$@\"\n");
        assert_eq!(interpreter_with_path(&shim, None).unwrap(), None);
        assert_eq!(locate(Some(&shim), None).unwrap(), shim);
    }

    #[test]
    fn an_interpreter_without_salt_is_refused_with_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python3");
        write_exec(
            &fake,
            "#!/bin/sh\necho 'No module named salt' >&2\nexit 3\n",
        );
        let script = dir.path().join("salt-call");
        write_exec(&script, &format!("#!{}\n", fake.display()));
        let err = find_salt_python(Some(&script)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::NotSalt { .. }), "{msg}");
        assert!(msg.contains("No module named salt"), "{msg}");
        assert!(msg.contains(&fake.display().to_string()), "{msg}");
    }
}
