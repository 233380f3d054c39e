//! Halite's packaging: the `.deb` metadata (`[package.metadata.deb]` in this crate's
//! `Cargo.toml`, built by `scripts/package` with cargo-deb) and `halite-docgen`, which
//! collects every packaged program's shell completions (bash, zsh, fish) and man page.
//!
//! The documents come from each program's own definition, so they cannot drift from what
//! it parses: the clap-based programs print them when asked through
//! [`halite_daemon::docs::GENERATE_ENV`]; `halite-key`, which parses with optparse's rules
//! by hand, is described by the `--help` text it prints ([`optparse`]).
//!
//! The output tree mirrors `/usr/share` ([`Document`] → [`install_dir`]), so the package's
//! assets are globs over it.
//!
//! What it does not do: build binaries or packages (`scripts/package` does), or compress
//! man pages (`scripts/package` gzips them, as Debian policy asks).

pub mod optparse;

use halite_daemon::docs::{write_document, Document, GENERATE_ENV};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The programs the `halite` package installs, in `/usr/bin`.
pub const PROGRAMS: [&str; 7] = [
    "halite-master",
    "halite-minion",
    "halite",
    "halite-key",
    "halite-call",
    "halite-run",
    "halite-api",
];

/// Man pages for subcommands with a clap definition of their own: the page's name, the
/// program and the arguments that reach that definition.
const SUBCOMMAND_PAGES: [(&str, &str, &[&str]); 1] =
    [("halite-event", "halite", &["event", "listen"])];

/// What can go wrong while generating.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program could not be started.
    #[error("cannot run {}: {source}", program.display())]
    Run {
        /// The program.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A program failed or printed nothing.
    #[error("{} {what} failed ({status}): {stderr}", program.display())]
    Failed {
        /// The program.
        program: PathBuf,
        /// What it was asked for.
        what: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its stderr.
        stderr: String,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An optparse help text could not be read.
    #[error("unreadable optparse help: {0}")]
    Help(String),
}

/// Where `doc` files go, relative to the output root (and to `/usr/share`).
pub fn install_dir(doc: Document) -> &'static str {
    match doc {
        Document::Bash => "bash-completion/completions",
        Document::Zsh => "zsh/vendor-completions",
        Document::Fish => "fish/vendor_completions.d",
        Document::Man => "man/man1",
    }
}

/// Writes every [`PROGRAMS`] document, and the subcommands' man pages, for the programs in
/// `bin_dir` under `out`. Returns the files written.
///
/// # Errors
/// When a program cannot be run, fails or prints nothing, or a file cannot be written.
pub fn generate(bin_dir: &Path, out: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut written = Vec::new();
    for program in PROGRAMS {
        let path = bin_dir.join(program);
        // halite-key has no clap definition: its --help text stands in for one.
        let described = match program {
            "halite-key" => Some(optparse::command(
                program,
                env!("CARGO_PKG_VERSION"),
                &run(&path, &["--help"], None)?,
            )?),
            _ => None,
        };
        for doc in Document::ALL {
            let text = match &described {
                Some(cmd) => {
                    let mut buf = Vec::new();
                    write_document(cmd.clone(), doc, &mut buf).map_err(|source| Error::Write {
                        path: out.to_path_buf(),
                        source,
                    })?;
                    String::from_utf8_lossy(&buf).into_owned()
                }
                None => run(&path, &[], Some(doc))?,
            };
            written.push(write(out, doc, program, &text)?);
        }
    }
    for (page, program, args) in SUBCOMMAND_PAGES {
        let text = run(&bin_dir.join(program), args, Some(Document::Man))?;
        written.push(write(out, Document::Man, page, &text)?);
    }
    Ok(written)
}

/// Runs `program args` (with [`GENERATE_ENV`] set to `doc` if given) and returns its
/// stdout, which must be non-empty.
fn run(program: &Path, args: &[&str], doc: Option<Document>) -> Result<String, Error> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove(GENERATE_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(doc) = doc {
        cmd.env(GENERATE_ENV, doc.name());
    }
    let output = cmd.output().map_err(|source| Error::Run {
        program: program.to_path_buf(),
        source,
    })?;
    let what = match doc {
        Some(doc) => format!("{GENERATE_ENV}={}", doc.name()),
        None => args.join(" "),
    };
    if !output.status.success() || output.stdout.is_empty() {
        return Err(Error::Failed {
            program: program.to_path_buf(),
            what,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn write(out: &Path, doc: Document, program: &str, text: &str) -> Result<PathBuf, Error> {
    let dir = out.join(install_dir(doc));
    std::fs::create_dir_all(&dir).map_err(|source| Error::Write {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(doc.file_name(program));
    std::fs::write(&path, text).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Fake programs in a temporary directory: the clap ones print `<name> <document>`
    /// when asked through GENERATE_ENV, halite-key prints an optparse help text.
    fn fake_bin_dir(broken: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for program in PROGRAMS {
            let script = if program == "halite-key" {
                "#!/bin/sh\nprintf 'Usage: halite-key [options]\\n\\nKeys.\\n\\nOptions:\\n  -A, --accept-all  Accept all.\\n'\n".to_owned()
            } else if Some(program) == broken {
                "#!/bin/sh\nexit 3\n".to_owned()
            } else {
                format!("#!/bin/sh\necho \"{program} $*\" \"${GENERATE_ENV}\"\n")
            };
            let path = dir.path().join(program);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    #[test]
    fn every_program_gets_every_document_in_the_usr_share_layout() {
        let bins = fake_bin_dir(None);
        let out = tempfile::tempdir().unwrap();
        let written = generate(bins.path(), out.path()).unwrap();
        assert_eq!(written.len(), PROGRAMS.len() * Document::ALL.len() + 1);
        let read = |rel: &str| std::fs::read_to_string(out.path().join(rel)).unwrap();
        assert_eq!(read("bash-completion/completions/halite"), "halite  bash\n");
        assert_eq!(
            read("zsh/vendor-completions/_halite-run"),
            "halite-run  zsh\n"
        );
        assert_eq!(
            read("fish/vendor_completions.d/halite-master.fish"),
            "halite-master  fish\n"
        );
        assert_eq!(read("man/man1/halite-minion.1"), "halite-minion  man\n");
        assert_eq!(read("man/man1/halite-api.1"), "halite-api  man\n");
        assert_eq!(read("man/man1/halite-event.1"), "halite event listen man\n");
        let key_page = read("man/man1/halite-key.1");
        assert!(key_page.contains(".TH halite-key 1"), "{key_page}");
        assert!(key_page.contains("Accept all."), "{key_page}");
        assert!(read("bash-completion/completions/halite-key").contains("--accept-all"));
    }

    #[test]
    fn a_failing_program_fails_the_generation_naming_it() {
        let bins = fake_bin_dir(Some("halite-call"));
        let out = tempfile::tempdir().unwrap();
        match generate(bins.path(), out.path()) {
            Err(Error::Failed { program, .. }) => assert!(program.ends_with("halite-call")),
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_program_is_a_run_error() {
        let out = tempfile::tempdir().unwrap();
        assert!(matches!(
            generate(out.path(), out.path()),
            Err(Error::Run { .. })
        ));
    }
}
