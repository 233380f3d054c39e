//! Where things are: the repository, the stock Salt venv and the workspace binaries.

use std::path::{Path, PathBuf};

/// Environment variable that points the kit at a stock Salt venv other than
/// `<repo>/.salt-venv`.
pub const SALT_VENV_ENV: &str = "HALITE_SALT_VENV";

/// The workspace root (the directory holding the top-level `Cargo.toml`).
///
/// Derived at compile time from this crate's manifest directory (`<repo>/crates/testkit`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("{} has no grandparent directory", manifest.display()))
}

/// Where `scripts/setup-tests` makes the stock venv when it runs as root (other local users
/// must be able to run it, which a checkout under `/root` does not allow).
pub const ROOT_SALT_VENV: &str = "/opt/halite/salt-venv-3008.3";

/// The venv holding stock Salt 3008.3: `$HALITE_SALT_VENV` if set, else `<repo>/.salt-venv`
/// when it exists, else [`ROOT_SALT_VENV`] when that exists (`scripts/setup-tests` makes one
/// of the two).
///
/// # Panics
/// When the venv (or its `bin/salt-master`) is missing. Tests that need stock Salt must fail,
/// never skip, on a machine without it.
pub fn salt_venv() -> PathBuf {
    let venv = std::env::var_os(SALT_VENV_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(default_venv);
    checked_venv(venv)
}

fn default_venv() -> PathBuf {
    let local = repo_root().join(".salt-venv");
    if !local.exists() && Path::new(ROOT_SALT_VENV).join("bin").is_dir() {
        return PathBuf::from(ROOT_SALT_VENV);
    }
    local
}

/// `venv` if it holds `bin/salt-master`; panics with the set-up hint otherwise.
fn checked_venv(venv: PathBuf) -> PathBuf {
    if !venv.join("bin").join("salt-master").is_file() {
        panic!(
            "stock Salt venv missing at {}: run scripts/setup-tests (or `python3 -m venv \
             .salt-venv && .salt-venv/bin/pip install salt==3008.3`)",
            venv.display()
        );
    }
    venv
}

/// Path of a stock Salt program (`salt-master`, `salt`, `salt-call`, ...) in [`salt_venv`].
///
/// # Panics
/// When the venv or the program is missing.
pub fn stock_bin(name: &str) -> PathBuf {
    let path = salt_venv().join("bin").join(name);
    if !path.is_file() {
        panic!("stock Salt program {} not found", path.display());
    }
    path
}

/// Path of a workspace binary (`halite-master`, `halite`, `halite-key`, `halite-minion`)
/// built into the same target directory and profile as the running test.
///
/// A test executable lives at `target/<profile>/deps/<test>-<hash>`; binaries live at
/// `target/<profile>/<name>`.
///
/// # Panics
/// When the binary has not been built.
pub fn halite_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot find the running test executable: {e}"));
    let dir = exe
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent directory", exe.display()));
    let profile_dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let path = profile_dir.join(name);
    if !path.is_file() {
        panic!(
            "Halite binary {} does not exist: run `cargo build --workspace --bins` first \
             (with the same profile and target dir as the tests)",
            path.display()
        );
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_root_holds_the_workspace_manifest() {
        let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"));
    }

    #[test]
    fn missing_venv_panics_with_setup_hint() {
        let err = std::panic::catch_unwind(|| checked_venv(PathBuf::from("/nonexistent/venv")))
            .unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(
            msg.contains("stock Salt venv missing at /nonexistent/venv"),
            "{msg}"
        );
        assert!(msg.contains("pip install salt==3008.3"), "{msg}");
    }

    #[test]
    fn missing_halite_binary_panics_with_build_hint() {
        let err = std::panic::catch_unwind(|| halite_bin("no-such-halite-binary")).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("cargo build --workspace --bins"), "{msg}");
    }
}
