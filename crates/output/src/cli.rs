//! The output flags of Salt's `OutputOptionsMixIn`, shared by the `halite`, `halite-call`
//! and `halite-run` command lines, and how they merge with the configuration.

use std::io::IsTerminal;

use crate::py::Py;
use crate::{HighstateOptions, OutputIndent, OutputOptions};

/// `--out`, `--out-indent`, `--no-color`, `--force-color`, `--state-output` and
/// `--state-verbose` (with Salt's aliases), for a CLI's `#[command(flatten)]`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputArgs {
    /// Outputter: nested, highstate, json, yaml, txt, raw, pprint, quiet, no_return.
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
    /// Override the configured `state_output`: full, terse, mixed, changes or filter,
    /// each optionally with `_id` (the state ID instead of its name).
    #[arg(
        long = "state-output",
        visible_alias = "state_output",
        value_name = "STATE_OUTPUT"
    )]
    pub state_output: Option<String>,
    /// Override the configured `state_verbose`: False hides states that succeeded
    /// without changes.
    #[arg(
        long = "state-verbose",
        visible_alias = "state_verbose",
        value_name = "STATE_VERBOSE"
    )]
    pub state_verbose: Option<String>,
}

impl OutputArgs {
    /// `--out quiet`: Salt prints nothing at all.
    pub fn quiet(&self) -> bool {
        self.out.as_deref() == Some("quiet")
    }

    /// The options these flags give over Salt's defaults: color with `--force-color`,
    /// else unless `--no-color` when stdout is a terminal (Salt's rule), `--out-indent`
    /// as an integer indent, and the highstate flags.
    pub fn options(&self) -> OutputOptions {
        OutputOptions {
            color: self.color(None),
            indent: self
                .out_indent
                .map(OutputIndent::Spaces)
                .unwrap_or_default(),
            highstate: self.highstate(HighstateOptions::default()),
            ..OutputOptions::default()
        }
    }

    /// The options of a configuration (`get` looks an option up in the master config for
    /// `halite`, the minion config for `halite-call`) with these flags over it, as Salt
    /// merges its parser's options into `opts`: `color` (when set, it replaces the tty
    /// test), `output_indent`, `nested_indent`, `strip_colors` and the `state_*` options.
    pub fn options_from_config<'a>(
        &self,
        get: impl Fn(&str) -> Option<&'a rmpv::Value>,
    ) -> OutputOptions {
        let indent = match (self.out_indent, get("output_indent")) {
            (Some(n), _) => OutputIndent::Spaces(n),
            (None, None) => OutputIndent::Unset,
            (None, Some(rmpv::Value::Nil)) => OutputIndent::Null,
            (None, Some(rmpv::Value::String(s))) if s.as_str() == Some("pretty") => {
                OutputIndent::Pretty
            }
            (None, Some(v)) => v.as_i64().map_or(OutputIndent::Unset, OutputIndent::Spaces),
        };
        OutputOptions {
            color: self.color(get("color").map(|v| Py::from_msgpack(v).truthy())),
            indent,
            nested_indent: get("nested_indent")
                .and_then(rmpv::Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0),
            strip_colors: get("strip_colors").is_none_or(|v| Py::from_msgpack(v).truthy()),
            highstate: self.highstate(HighstateOptions::from_config(get)),
            ..OutputOptions::default()
        }
    }

    /// `get_printout`'s color rule; `configured` is the config's `color`, if set.
    fn color(&self, configured: Option<bool>) -> bool {
        self.force_color
            || (!self.no_color && configured.unwrap_or_else(|| std::io::stdout().is_terminal()))
    }

    /// `--state-output` and `--state-verbose` over `base`. Salt turns `True`/`true` and
    /// `False`/`false` into booleans and keeps any other text, which is true unless empty.
    pub fn highstate(&self, mut base: HighstateOptions) -> HighstateOptions {
        if let Some(output) = &self.state_output {
            base.state_output = Some(output.clone());
        }
        if let Some(verbose) = &self.state_verbose {
            base.state_verbose = !matches!(verbose.as_str(), "False" | "false" | "");
        }
        base
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
            state_output: Some("terse".to_owned()),
            state_verbose: Some("False".to_owned()),
        };
        assert_eq!(
            parse(&[
                "--out",
                "json",
                "--out-indent",
                "-1",
                "--no-color",
                "--force-color",
                "--state-output",
                "terse",
                "--state-verbose",
                "False",
            ]),
            all
        );
        assert_eq!(
            parse(&[
                "--output=json",
                "--output-indent=-1",
                "--no-colour",
                "--force-colour",
                "--state_output=terse",
                "--state_verbose=False",
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

    #[test]
    fn state_flags_override_the_config_as_salt_merges_them() {
        use rmpv::Value as V;
        let config = V::Map(vec![
            (V::from("state_output"), V::from("mixed")),
            (V::from("state_verbose"), V::Boolean(true)),
            (V::from("state_output_profile"), V::Boolean(true)),
            (V::from("state_tabular"), V::Boolean(true)),
            (V::from("strip_colors"), V::Boolean(false)),
            (V::from("nested_indent"), V::from(2)),
            (V::from("output_indent"), V::from("pretty")),
            (V::from("color"), V::Boolean(true)),
        ]);
        let get = |name: &str| {
            config
                .as_map()
                .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(name)))
                .map(|(_, v)| v)
        };
        let opts = parse(&[]).options_from_config(get);
        assert_eq!(opts.highstate.state_output.as_deref(), Some("mixed"));
        assert!(opts.highstate.state_verbose && opts.highstate.state_output_profile);
        assert_eq!(opts.highstate.state_tabular, crate::StateTabular::Aligned);
        assert!(opts.color, "the config's color replaces the tty test");
        assert!(!opts.strip_colors);
        assert_eq!((opts.nested_indent, opts.indent), (2, OutputIndent::Pretty));
        let opts = parse(&[
            "--state-output",
            "terse_id",
            "--state-verbose",
            "false",
            "--no-color",
        ])
        .options_from_config(get);
        assert_eq!(opts.highstate.state_output.as_deref(), Some("terse_id"));
        assert!(!opts.highstate.state_verbose);
        assert!(!opts.color);
        // Any other text stays a (true) string in Salt; an empty one is false.
        assert!(
            parse(&["--state-verbose", "no"])
                .options()
                .highstate
                .state_verbose
        );
        assert!(
            !parse(&["--state-verbose="])
                .options()
                .highstate
                .state_verbose
        );
        // Without a config: Salt's defaults.
        assert_eq!(parse(&[]).options().highstate, HighstateOptions::default());
    }
}
