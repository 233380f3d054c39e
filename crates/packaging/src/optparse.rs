//! A clap command rebuilt from a Python `optparse` `--help` text, for `halite-key`, which
//! parses its command line with optparse's rules by hand (crates/key-cli) and has no clap
//! definition: its help text is its definition, and the one it prints.
//!
//! Understood: `Usage: ...`, the description paragraph, `Options:`, group headings
//! (`  Name:`) and their description lines, option lines (`  -c DIR, --config-dir=DIR  help`)
//! with continuation lines, and a final unindented paragraph (kept as the text after the
//! options). Options with a metavar take a value; the others are flags. Choices listed in
//! the help prose are not turned into completion values.

use crate::Error;
use clap::{Arg, ArgAction, Command};

/// One option line with its continuation lines.
#[derive(Debug, Default)]
struct Opt {
    shorts: Vec<char>,
    longs: Vec<String>,
    metavar: Option<String>,
    help: String,
    heading: Option<String>,
}

impl Opt {
    /// Parses an option spec: `-c CONFIG_DIR, --config-dir=CONFIG_DIR` or `-V, --versions-report`.
    fn from_spec(spec: &str, heading: Option<String>) -> Result<Opt, Error> {
        let mut opt = Opt {
            heading,
            ..Opt::default()
        };
        for form in spec.split(", ") {
            let (flag, metavar) = match form.split_once(['=', ' ']) {
                Some((flag, metavar)) => (flag, Some(metavar)),
                None => (form, None),
            };
            if let Some(long) = flag.strip_prefix("--") {
                opt.longs.push(long.to_owned());
            } else {
                let mut chars = flag.strip_prefix('-').unwrap_or("").chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => opt.shorts.push(c),
                    _ => return Err(Error::Help(format!("bad option form {form:?}"))),
                }
            }
            if let Some(m) = metavar {
                opt.metavar = Some(m.to_owned());
            }
        }
        Ok(opt)
    }

    /// Appends a wrapped line of help, re-joining words optparse split at a hyphen
    /// (`--include-` / `rejected`).
    fn push_help(&mut self, text: &str) {
        if !self.help.is_empty() && !self.help.ends_with('-') {
            self.help.push(' ');
        }
        self.help.push_str(text);
    }

    fn into_arg(self) -> Result<Arg, Error> {
        let id = self
            .longs
            .first()
            .cloned()
            .or_else(|| self.shorts.first().map(char::to_string))
            .ok_or_else(|| Error::Help("an option without a name".to_owned()))?;
        let mut arg = Arg::new(id).help(self.help);
        if let Some((first, rest)) = self.longs.split_first() {
            arg = arg.long(first.clone()).visible_aliases(rest.to_vec());
        }
        if let Some((first, rest)) = self.shorts.split_first() {
            arg = arg.short(*first).visible_short_aliases(rest.to_vec());
        }
        arg = match self.metavar {
            Some(m) => arg.value_name(m).action(ArgAction::Set),
            None => arg.action(ArgAction::SetTrue),
        };
        if let Some(h) = self.heading {
            arg = arg.help_heading(h);
        }
        Ok(arg)
    }
}

/// The clap command `help` describes, named `name`, at `version`.
///
/// # Errors
/// [`Error::Help`] when the text has no `Options:` section or an option line cannot be
/// read.
pub fn command(name: &str, version: &str, help: &str) -> Result<Command, Error> {
    let mut lines = help.lines();
    let mut usage = None;
    let mut about = Vec::new();
    for line in lines.by_ref() {
        if line == "Options:" {
            break;
        }
        match line.strip_prefix("Usage: ") {
            Some(u) => usage = Some(u.trim().to_owned()),
            None if !line.trim().is_empty() => about.push(line.trim()),
            None => {}
        }
    }
    let usage = usage.ok_or_else(|| Error::Help("no `Usage:` line".to_owned()))?;

    let mut opts: Vec<Opt> = Vec::new();
    let mut current: Option<Opt> = None;
    let mut heading: Option<String> = None;
    let mut epilogue = Vec::new();
    let mut saw_option = false;
    for line in lines {
        let text = line.trim();
        let indent = line.len() - line.trim_start().len();
        if text.is_empty() {
            opts.extend(current.take());
        } else if indent == 0 {
            opts.extend(current.take());
            epilogue.push(text);
        } else if text.starts_with('-') {
            opts.extend(current.take());
            let (spec, first_help) = match text.split_once("  ") {
                Some((spec, rest)) => (spec, rest.trim()),
                None => (text, ""),
            };
            let mut opt = Opt::from_spec(spec, heading.clone())?;
            if !first_help.is_empty() {
                opt.push_help(first_help);
            }
            current = Some(opt);
            saw_option = true;
        } else if let Some(name) = text.strip_suffix(':').filter(|_| indent == 2) {
            opts.extend(current.take());
            heading = Some(name.to_owned());
        } else if let Some(opt) = current.as_mut() {
            opt.push_help(text);
        }
        // Anything else is a group's description, which a man page's option list has no
        // place for.
    }
    opts.extend(current.take());
    if !saw_option {
        return Err(Error::Help("no options after `Options:`".to_owned()));
    }

    let mut cmd = Command::new(name.to_owned())
        .version(version.to_owned())
        .about(about.join(" "))
        .override_usage(usage)
        .disable_help_flag(true)
        .disable_version_flag(true);
    if !epilogue.is_empty() {
        cmd = cmd.after_help(epilogue.join("\n"));
    }
    for opt in opts {
        cmd = cmd.arg(opt.into_arg()?);
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "\
Usage: halite-key [options]

halite-key (a Rust salt-key 3008.3) is used to manage Salt authentication keys

Options:
  --version             show program's version number and exit
  -V, --versions-report
                        Show program's dependencies version number and exit.
  -c CONFIG_DIR, --config-dir=CONFIG_DIR
                        Pass in an alternative configuration directory.

  Output Options:
    Configure your preferred output format.

    --out=OUTPUT, --output=OUTPUT
                        Print the output using the
                        specified outputter.

  Actions:
    -l ARG, --list=ARG  List the public keys.
    -a ACCEPT, --accept=ACCEPT
                        Accept the specified public key (use --include-
                        rejected to match rejected keys).

Not supported by halite-key: --saltfile.
";

    fn arg<'a>(cmd: &'a Command, id: &str) -> &'a Arg {
        cmd.get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("no {id}"))
    }

    #[test]
    fn usage_description_and_trailing_paragraph_are_kept() {
        let cmd = command("halite-key", "0.1.0", HELP).unwrap();
        assert_eq!(cmd.get_name(), "halite-key");
        assert_eq!(
            cmd.get_about().unwrap().to_string(),
            "halite-key (a Rust salt-key 3008.3) is used to manage Salt authentication keys"
        );
        assert_eq!(
            cmd.get_after_help().unwrap().to_string(),
            "Not supported by halite-key: --saltfile."
        );
    }

    #[test]
    fn option_with_metavar_takes_a_value_and_keeps_its_spellings() {
        let cmd = command("halite-key", "0.1.0", HELP).unwrap();
        let c = arg(&cmd, "config-dir");
        assert_eq!(c.get_short(), Some('c'));
        assert_eq!(c.get_long(), Some("config-dir"));
        assert_eq!(
            c.get_value_names().unwrap()[0].as_str(),
            "CONFIG_DIR",
            "metavar"
        );
        let out = arg(&cmd, "out");
        assert_eq!(out.get_visible_aliases().unwrap(), vec!["output"]);
        assert_eq!(out.get_help_heading(), Some("Output Options"));
        assert_eq!(
            out.get_help().unwrap().to_string(),
            "Print the output using the specified outputter."
        );
    }

    #[test]
    fn flags_take_no_value() {
        let cmd = command("halite-key", "0.1.0", HELP).unwrap();
        let v = arg(&cmd, "versions-report");
        assert_eq!(v.get_short(), Some('V'));
        assert!(matches!(v.get_action(), ArgAction::SetTrue));
        assert!(arg(&cmd, "version").get_help_heading().is_none());
    }

    #[test]
    fn help_on_the_option_line_and_hyphen_wraps_are_joined() {
        let cmd = command("halite-key", "0.1.0", HELP).unwrap();
        assert_eq!(
            arg(&cmd, "list").get_help().unwrap().to_string(),
            "List the public keys."
        );
        assert_eq!(
            arg(&cmd, "accept").get_help().unwrap().to_string(),
            "Accept the specified public key (use --include-rejected to match rejected keys)."
        );
        assert_eq!(arg(&cmd, "accept").get_help_heading(), Some("Actions"));
    }

    #[test]
    fn rebuilt_command_parses_like_the_original() {
        let cmd = command("halite-key", "0.1.0", HELP).unwrap();
        let m = cmd
            .try_get_matches_from(["halite-key", "-c", "/srv", "--output=json", "-V"])
            .unwrap();
        assert_eq!(m.get_one::<String>("config-dir").unwrap(), "/srv");
        assert_eq!(m.get_one::<String>("out").unwrap(), "json");
        assert!(m.get_flag("versions-report"));
    }

    #[test]
    fn text_without_usage_or_options_is_an_error() {
        assert!(matches!(
            command("x", "1", "no usage here"),
            Err(Error::Help(_))
        ));
        assert!(matches!(
            command("x", "1", "Usage: x\n\nOptions:\n"),
            Err(Error::Help(_))
        ));
        assert!(matches!(
            command("x", "1", "Usage: x\nOptions:\n  -xy  two letters\n"),
            Err(Error::Help(_))
        ));
    }
}
