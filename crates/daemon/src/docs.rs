//! Shell completions and man pages generated from a binary's own clap definition, so they
//! cannot drift from what it parses.
//!
//! A binary prints one [`Document`] for its command line instead of running when
//! [`GENERATE_ENV`] names it (`HALITE_GENERATE=bash halite > halite.bash`): [`parse_cli`]
//! does this for every CLI that parses through it, and the daemons' `main` call
//! [`document_from_env`] themselves. The package build (`halite-docgen`, run by
//! `scripts/package`) collects them. An environment variable rather than a flag, because
//! the CLIs take Salt's command lines, where any word may be an argument to a function.
//!
//! [`parse_cli`]: crate::parse_cli

use std::io::Write;
use std::process::ExitCode;

/// The environment variable naming the [`Document`] to print: `bash`, `zsh`, `fish` or
/// `man`.
pub const GENERATE_ENV: &str = "HALITE_GENERATE";

/// A document generated from a clap command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Document {
    /// A bash-completion script.
    Bash,
    /// A zsh completion function (`_<name>`).
    Zsh,
    /// A fish completion script.
    Fish,
    /// A man page (roff, section 1).
    Man,
}

impl Document {
    /// Every document, in the order the package build writes them.
    pub const ALL: [Document; 4] = [Document::Bash, Document::Zsh, Document::Fish, Document::Man];

    /// The name [`GENERATE_ENV`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Document::Bash => "bash",
            Document::Zsh => "zsh",
            Document::Fish => "fish",
            Document::Man => "man",
        }
    }

    /// The document [`Document::name`] names.
    pub fn from_name(name: &str) -> Option<Document> {
        Document::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The file name it is installed under for the program `bin`: `bin` (bash), `_bin`
    /// (zsh), `bin.fish`, `bin.1`.
    pub fn file_name(self, bin: &str) -> String {
        match self {
            Document::Bash => bin.to_owned(),
            Document::Zsh => format!("_{bin}"),
            Document::Fish => format!("{bin}.fish"),
            Document::Man => format!("{bin}.1"),
        }
    }
}

/// Writes `doc` for `cmd`. The program name is `cmd`'s name; for a man page, spaces in it
/// become `-` in the title (`halite event` is documented as `halite-event(1)`).
///
/// # Errors
/// When writing to `out` fails.
pub fn write_document(
    mut cmd: clap::Command,
    doc: Document,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_owned();
    let shell = match doc {
        Document::Bash => clap_complete::Shell::Bash,
        Document::Zsh => clap_complete::Shell::Zsh,
        Document::Fish => clap_complete::Shell::Fish,
        Document::Man => {
            return clap_mangen::Man::new(cmd)
                .title(name.replace(' ', "-"))
                .render(out);
        }
    };
    // `clap_complete::generate`, without its panic on a failed write.
    cmd.set_bin_name(name);
    cmd.build();
    clap_complete::Generator::try_generate(&shell, &cmd, out)
}

/// When [`GENERATE_ENV`] is set: prints that document for `cmd()` to stdout and returns
/// the exit status to end with (0, or 2 with a message on stderr for an unknown document
/// name or a failed write). `None` when the variable is unset: the program runs as usual.
pub fn document_from_env(cmd: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let wanted = std::env::var_os(GENERATE_ENV)?;
    let Some(doc) = wanted.to_str().and_then(Document::from_name) else {
        eprintln!("{GENERATE_ENV}={wanted:?}: expected one of bash, zsh, fish, man");
        return Some(ExitCode::from(2));
    };
    let mut stdout = std::io::stdout().lock();
    match write_document(cmd(), doc, &mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("cannot write the {} document: {e}", doc.name());
            Some(ExitCode::from(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> clap::Command {
        clap::Command::new("halite-sample")
            .version("1.2.3")
            .about("Samples things")
            .arg(
                clap::Arg::new("timeout")
                    .short('t')
                    .long("timeout")
                    .help("Seconds to wait"),
            )
    }

    fn render(cmd: clap::Command, doc: Document) -> String {
        let mut out = Vec::new();
        write_document(cmd, doc, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn document_names_round_trip_and_unknown_names_are_refused() {
        for doc in Document::ALL {
            assert_eq!(Document::from_name(doc.name()), Some(doc));
        }
        assert_eq!(Document::from_name("powershell"), None);
        assert_eq!(Document::from_name("BASH"), None);
    }

    #[test]
    fn completions_offer_the_commands_long_options() {
        for doc in [Document::Bash, Document::Zsh, Document::Fish] {
            let text = render(sample(), doc);
            assert!(text.contains("timeout"), "{doc:?}: {text}");
            assert!(text.contains("halite-sample"), "{doc:?}: {text}");
        }
        assert!(render(sample(), Document::Bash).contains("complete -F _halite__sample"));
        assert!(render(sample(), Document::Zsh).starts_with("#compdef halite-sample"));
    }

    #[test]
    fn man_page_has_title_section_and_option_help() {
        let text = render(sample(), Document::Man);
        assert!(text.contains(".TH halite-sample 1"), "{text}");
        assert!(text.contains("Seconds to wait"), "{text}");
        assert!(text.contains("Samples things"), "{text}");
    }

    #[test]
    fn man_page_title_of_a_two_word_command_uses_a_dash() {
        let text = render(clap::Command::new("halite event"), Document::Man);
        assert!(text.contains(".TH halite-event 1"), "{text}");
    }

    #[test]
    fn install_file_names_follow_each_shells_convention() {
        assert_eq!(Document::Bash.file_name("halite"), "halite");
        assert_eq!(Document::Zsh.file_name("halite"), "_halite");
        assert_eq!(Document::Fish.file_name("halite"), "halite.fish");
        assert_eq!(Document::Man.file_name("halite"), "halite.1");
    }
}
