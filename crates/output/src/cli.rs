//! The output flags of Salt's `OutputOptionsMixIn`, shared by the `halite`, `halite-call`
//! and `halite-run` command lines.

use std::io::IsTerminal;

use crate::{OutputIndent, OutputOptions};

/// `--out`, `--out-indent`, `--no-color` and `--force-color` (with Salt's aliases), for a
/// CLI's `#[command(flatten)]`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputArgs {
    /// Outputter: nested, json, yaml, txt, raw, pprint, quiet, no_return.
    #[arg(long = "out", visible_alias = "output")]
    pub out: Option<String>,
    /// Indentation for json, yaml and pprint; negative means compact.
    #[arg(
        long = "out-indent",
        visible_alias = "output-indent",
        allow_hyphen_values = true
    )]
    pub out_indent: Option<i64>,
    /// Never color the output.
    #[arg(long = "no-color", visible_alias = "no-colour")]
    pub no_color: bool,
    /// Always color the output.
    #[arg(long = "force-color", visible_alias = "force-colour")]
    pub force_color: bool,
}

impl OutputArgs {
    /// `--out quiet`: Salt prints nothing at all.
    pub fn quiet(&self) -> bool {
        self.out.as_deref() == Some("quiet")
    }

    /// The options these flags give: color with `--force-color`, else unless `--no-color`
    /// when stdout is a terminal (Salt's rule), and `--out-indent` as an integer indent.
    pub fn options(&self) -> OutputOptions {
        OutputOptions {
            color: self.force_color || (!self.no_color && std::io::stdout().is_terminal()),
            indent: self
                .out_indent
                .map(OutputIndent::Spaces)
                .unwrap_or_default(),
            ..OutputOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        output: OutputArgs,
    }

    fn parse(words: &[&str]) -> OutputArgs {
        Cli::try_parse_from(std::iter::once("cli").chain(words.iter().copied()))
            .map(|c| c.output)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    }

    #[test]
    fn flags_and_salts_aliases_parse() {
        assert_eq!(parse(&[]), OutputArgs::default());
        let all = OutputArgs {
            out: Some("json".to_owned()),
            out_indent: Some(-1),
            no_color: true,
            force_color: true,
        };
        assert_eq!(
            parse(&[
                "--out",
                "json",
                "--out-indent",
                "-1",
                "--no-color",
                "--force-color"
            ]),
            all
        );
        assert_eq!(
            parse(&[
                "--output=json",
                "--output-indent=-1",
                "--no-colour",
                "--force-colour"
            ]),
            all
        );
    }

    #[test]
    fn options_follow_the_flags() {
        let args = parse(&["--out-indent", "2", "--force-color", "--no-color"]);
        let opts = args.options();
        assert!(opts.color, "--force-color wins over --no-color");
        assert_eq!(opts.indent, OutputIndent::Spaces(2));
        let opts = parse(&["--no-color"]).options();
        assert!(!opts.color);
        assert_eq!(opts.indent, OutputIndent::Unset);
        assert!(parse(&["--out", "quiet"]).quiet());
        assert!(!parse(&["--out", "json"]).quiet());
    }
}
