//! Salt 3008.3's outputters, reproduced byte for byte.
//!
//! The `salt` and `salt-call` CLIs print every return through `salt.output.display_output`:
//! pick an outputter (`get_printout`), run it, `rstrip()` the text, and `print()` it
//! unless it is empty. [`render`] does all of that for one call and returns exactly the
//! bytes Salt writes to stdout, trailing newline included. The CLI calls it once per
//! minion with `{minion_id: return}`, as Salt does.
//!
//! Implemented outputters: `nested` (the default), `highstate` (state runs, with every
//! `state_*` option: [`HighstateOptions`]), `json`, `yaml`, `txt` (alias `text`), `raw`,
//! `pprint` and `no_return`, with Salt's colors for `nested`/`highstate`/`no_return`, the
//! `--out-indent`/`output_indent` handling of `json`, `yaml` and `pprint`, and Salt's
//! fallback to `nested` when an outputter raises `TypeError` (e.g. `yaml` with
//! `output_indent: pretty`).
//!
//! This crate does not write files or log: the caller logs [`Error::UnknownOutputter`]
//! before falling back to nested, and decides `color`; [`OutputArgs`], the output flags
//! the CLIs share, applies Salt's rule (`--force-color`, `--no-color`, else the config's
//! `color`, else "stdout is a tty") and carries `--state-output`/`--state-verbose`. The
//! `table`, `key` and `progress` outputters and color themes are not implemented.
//! `quiet` is not a Salt 3008.3 outputter either: Salt logs the invalid-outputter error
//! for it and prints nested, and so does [`Outputter::from_name`].
//!
//! Deviations from Salt, each where Python cannot be followed safely or at all: a map
//! key that is a list or map (Salt drops the whole message as "unhashable") renders as
//! its repr string; dict keys that are NaN sort as equal to everything; json and
//! pprint indents are capped at [`MAX_INDENT`]; where stock's highstate outputter raises
//! an exception `display_output` does not catch (a state key without four `_|-` parts, a
//! malformed format string in a warning: `salt` dies with a traceback), Halite prints
//! the return with nested, and the `str.format` templates it fills refuse widths and
//! precisions above 10,000 (the `highstate` and `pyfmt` modules list the details).
//!
//! The Python `repr()`/`str()` of a value that the outputters build on is exported too
//! ([`py_repr`], [`py_str`], [`str_repr`], with [`py_type_name`]), for the crates that
//! quote values in Salt's messages.
//!
//! Invariants: rendering never fails and never panics, whatever the data; the data is
//! first decoded exactly as `salt.payload.loads` decodes a msgpack return (see the
//! `py` module), so non-UTF-8 strings render as Python `bytes`; with `color` off the
//! output contains no escape sequence that the crate itself added.

#![deny(missing_docs)]

mod cli;
mod color;
mod highstate;
mod json;
mod nested;
mod pprint;
mod py;
mod pyfmt;
mod text;
mod textwrap;
mod unicode_tables;
mod yaml;

use std::fmt;
use std::str::FromStr;

pub use cli::OutputArgs;
pub use highstate::{HighstateOptions, StateFilter, StateTabular};
use py::Py;
pub use py::{py_repr, py_str, py_type_name, str_repr};

/// Errors from naming an outputter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The name is not a Salt outputter. Salt logs this message at ERROR level and
    /// renders with `nested`.
    #[error("Invalid outputter {0} specified, fall back to nested")]
    UnknownOutputter(String),
    /// A stock Salt outputter (`table`, `key`, `progress`) that Halite does not
    /// implement.
    #[error("the {0} outputter is not implemented")]
    NotImplemented(String),
}

/// One of Salt's outputters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outputter {
    /// `nested`: indented key/value tree, the default.
    Nested,
    /// `highstate`: the state run report.
    Highstate,
    /// `json`: one JSON document per call.
    Json,
    /// `yaml`: PyYAML block style.
    Yaml,
    /// `txt` (alias `text`): `key: line` per line of each value.
    Txt,
    /// `raw`: Python `str()` of the data.
    Raw,
    /// `pprint`: Python `pprint.pformat`.
    Pprint,
    /// `no_return`: the red "did not return" notice.
    NoReturn,
}

impl Outputter {
    /// Looks up an outputter by the name given to `--out` or carried in a return's
    /// `out` field. `text` is an alias of `txt`. `grains` maps to nested without an
    /// error, as `get_printout` does for old minions that still ask for it.
    pub fn from_name(name: &str) -> Result<Outputter, Error> {
        Ok(match name {
            "nested" | "grains" => Outputter::Nested,
            "highstate" => Outputter::Highstate,
            "json" => Outputter::Json,
            "yaml" => Outputter::Yaml,
            "txt" | "text" => Outputter::Txt,
            "raw" => Outputter::Raw,
            "pprint" => Outputter::Pprint,
            "no_return" => Outputter::NoReturn,
            "table" | "key" | "progress" => return Err(Error::NotImplemented(name.to_owned())),
            other => return Err(Error::UnknownOutputter(other.to_owned())),
        })
    }

    /// Salt's name for the outputter.
    pub fn name(self) -> &'static str {
        match self {
            Outputter::Nested => "nested",
            Outputter::Highstate => "highstate",
            Outputter::Json => "json",
            Outputter::Yaml => "yaml",
            Outputter::Txt => "txt",
            Outputter::Raw => "raw",
            Outputter::Pprint => "pprint",
            Outputter::NoReturn => "no_return",
        }
    }
}

impl FromStr for Outputter {
    type Err = Error;

    fn from_str(name: &str) -> Result<Outputter, Error> {
        Outputter::from_name(name)
    }
}

impl fmt::Display for Outputter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outputter name `get_printout` settles on, before looking it up.
///
/// * `cli_output` is `--out` (Salt's `opts["output"]`); it overrides the return's own
///   `out` unless it is `highstate`.
/// * With `--static` and no name yet, `--out` is used if given, and `state.*`
///   functions get `highstate`.
/// * `text` becomes `txt`; no name at all becomes `nested`.
///
/// Pass the result to [`Outputter::from_name`].
pub fn outputter_name(
    cli_output: Option<&str>,
    return_out: Option<&str>,
    static_: bool,
    fun: &str,
) -> String {
    let mut out = return_out.unwrap_or("");
    if let Some(cli) = cli_output.filter(|cli| *cli != "highstate") {
        out = cli;
    }
    if out.is_empty() && static_ {
        match cli_output {
            Some(cli) if !cli.is_empty() => out = cli,
            _ if fun.split('.').next() == Some("state") => out = "highstate",
            _ => {}
        }
    }
    match out {
        "text" => "txt".to_owned(),
        "" => "nested".to_owned(),
        other => other.to_owned(),
    }
}

/// `output_indent` as Salt sees it: absent, `null`, `pretty`, or an integer
/// (`--out-indent N` always gives an integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputIndent {
    /// Not configured: json indents by 4, yaml uses block style, pprint indents by 1.
    #[default]
    Unset,
    /// `output_indent: null` in the config: compact json; yaml and pprint raise
    /// `TypeError` in Salt and fall back to nested.
    Null,
    /// `output_indent: pretty`: json indents by 4 with sorted keys; yaml and pprint
    /// fall back to nested.
    Pretty,
    /// An integer; negative means compact json, flow-style yaml and default pprint.
    Spaces(i64),
}

/// Largest indent honoured for json and pprint. Deviation: Salt accepts any integer and
/// builds correspondingly huge strings; Halite caps it so a typo cannot exhaust memory.
pub const MAX_INDENT: usize = 1024;

fn indent_width(n: i64) -> Option<usize> {
    usize::try_from(n).ok().map(|n| n.min(MAX_INDENT))
}

/// Settings that change what an outputter prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputOptions {
    /// Emit ANSI colors (nested and no_return only).
    pub color: bool,
    /// `--out-indent` / `output_indent`.
    pub indent: OutputIndent,
    /// The minion's retcode (`_retcode`); non-zero turns nested's keys and lists red.
    pub retcode: i64,
    /// `nested_indent`: left margin for nested output.
    pub nested_indent: usize,
    /// `strip_colors` (default true): nested replaces ESC in strings with `?`, highstate
    /// in minion ids and errors.
    pub strip_colors: bool,
    /// The `state_*` options of the highstate outputter.
    pub highstate: HighstateOptions,
}

impl Default for OutputOptions {
    fn default() -> OutputOptions {
        OutputOptions {
            color: false,
            indent: OutputIndent::Unset,
            retcode: 0,
            nested_indent: 0,
            strip_colors: true,
            highstate: HighstateOptions::default(),
        }
    }
}

/// Renders `data` exactly as `salt.output.display_output(data, out, opts)` prints it:
/// the outputter's text with trailing whitespace removed and one `\n` appended, or
/// nothing at all when that text is empty.
pub fn render(out: Outputter, data: &rmpv::Value, opts: &OutputOptions) -> String {
    let data = Py::from_msgpack(data);
    let text = printout(out, &data, opts).unwrap_or_else(|| nested_printout(&data, opts));
    let text = py::rstrip(&text);
    if text.is_empty() {
        String::new()
    } else {
        format!("{text}\n")
    }
}

/// One outputter call; `None` where Salt's outputter raises `TypeError` and
/// `try_printout` falls back to nested.
fn printout(out: Outputter, data: &Py, opts: &OutputOptions) -> Option<String> {
    match out {
        Outputter::Nested => Some(nested_printout(data, opts)),
        // It falls back to nested itself: Salt's fallback prints the data as the highstate
        // outputter left it.
        Outputter::Highstate => Some(highstate::highstate(data, opts)),
        Outputter::NoReturn => nested::no_return(data, color::colors(opts.color)),
        Outputter::Txt => Some(text::txt(data)),
        Outputter::Raw => Some(text::raw(data)),
        Outputter::Json => {
            let (indent, sort_keys) = match opts.indent {
                OutputIndent::Unset => (Some(4), false),
                OutputIndent::Null => (None, false),
                OutputIndent::Pretty => (Some(4), true),
                OutputIndent::Spaces(n) => (indent_width(n), false),
            };
            Some(json::dumps(data, indent, sort_keys))
        }
        Outputter::Yaml => match opts.indent {
            OutputIndent::Unset => Some(yaml::safe_dump(data, false, None)),
            OutputIndent::Spaces(n) if n >= 0 => Some(yaml::safe_dump(data, false, Some(n))),
            OutputIndent::Spaces(_) => Some(yaml::safe_dump(data, true, Some(0))),
            OutputIndent::Null | OutputIndent::Pretty => None,
        },
        Outputter::Pprint => match opts.indent {
            OutputIndent::Unset => Some(pprint::pformat(data, 1)),
            OutputIndent::Spaces(n) => Some(pprint::pformat(data, indent_width(n).unwrap_or(1))),
            OutputIndent::Null | OutputIndent::Pretty => None,
        },
    }
}

fn nested_printout(data: &Py, opts: &OutputOptions) -> String {
    nested::nested(
        data,
        color::colors(opts.color),
        opts.retcode,
        opts.nested_indent,
        opts.strip_colors,
    )
}

/// Converts a msgpack value to the JSON that Salt's `json` outputter would print for
/// it (after Salt's string decoding): undecodable strings, datetimes and other
/// non-JSON values become their Python repr, dict keys become strings the way
/// `json.dumps` converts them.
///
/// Deviations, because `serde_json::Value` cannot hold them: NaN and infinities
/// become `null`; a bytes or datetime key becomes its repr (Python raises instead);
/// keys that collide after conversion keep the last value.
pub fn to_json(value: &rmpv::Value) -> serde_json::Value {
    json::to_value(&Py::from_msgpack(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value as V;

    /// Every implemented outputter.
    const ALL: [Outputter; 8] = [
        Outputter::Nested,
        Outputter::Highstate,
        Outputter::Json,
        Outputter::Yaml,
        Outputter::Txt,
        Outputter::Raw,
        Outputter::Pprint,
        Outputter::NoReturn,
    ];

    fn minion(id: &str, ret: V) -> V {
        V::Map(vec![(V::from(id), ret)])
    }

    #[test]
    fn outputter_names_follow_salt() {
        assert_eq!(Outputter::from_name("text"), Ok(Outputter::Txt));
        assert_eq!(Outputter::from_name("grains"), Ok(Outputter::Nested));
        assert_eq!(
            Outputter::from_name("quiet").map_err(|e| e.to_string()),
            Err("Invalid outputter quiet specified, fall back to nested".to_owned())
        );
        assert_eq!(
            Outputter::from_name("table"),
            Err(Error::NotImplemented("table".to_owned()))
        );
        assert_eq!(Outputter::from_name("highstate"), Ok(Outputter::Highstate));
        for out in ALL {
            assert_eq!(out.name().parse::<Outputter>(), Ok(out));
        }
    }

    #[test]
    fn cli_out_overrides_return_out_except_highstate() {
        // (--out, return's out, --static, fun, expected name)
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            bool,
            &'static str,
            &'static str,
        );
        let cases: &[Case] = &[
            (None, None, false, "test.ping", "nested"),
            (None, Some("no_return"), false, "test.ping", "no_return"),
            (Some("json"), Some("no_return"), false, "test.ping", "json"),
            (Some("highstate"), Some("txt"), false, "test.ping", "txt"),
            (Some("text"), None, false, "test.ping", "txt"),
            (None, Some(""), true, "state.apply", "highstate"),
            (Some("highstate"), Some(""), true, "test.ping", "highstate"),
            (None, Some(""), true, "test.ping", "nested"),
        ];
        for (cli, ret, static_, fun, want) in cases {
            assert_eq!(
                outputter_name(*cli, *ret, *static_, fun),
                *want,
                "{cli:?} {ret:?}"
            );
        }
    }

    #[test]
    fn empty_output_prints_nothing() {
        let opts = OutputOptions::default();
        assert_eq!(render(Outputter::Nested, &V::Map(vec![]), &opts), "");
        assert_eq!(
            render(Outputter::Nested, &minion("m", V::from("")), &opts),
            "m:\n"
        );
    }

    #[test]
    fn yaml_with_pretty_indent_falls_back_to_nested() {
        let opts = OutputOptions {
            indent: OutputIndent::Pretty,
            ..OutputOptions::default()
        };
        assert_eq!(
            render(Outputter::Yaml, &minion("m", V::from(1)), &opts),
            "m:\n    1\n"
        );
    }

    #[test]
    fn hostile_values_render_without_panicking() {
        let mut deep = V::from("leaf");
        for _ in 0..200 {
            deep = V::Array(vec![V::Map(vec![(V::from("k"), deep)])]);
        }
        let hostile = V::Map(vec![
            (V::Array(vec![V::from(1)]), V::from("list key")),
            (V::Map(vec![]), V::from("map key")),
            (
                V::Ext(78, b"20241301T99:99:99.x".to_vec()),
                V::Ext(78, b"\xff".to_vec()),
            ),
            (V::from(u64::MAX), V::Ext(5, vec![0xff, 0xfe])),
            (V::F32(f32::NAN), V::F64(f64::NAN)),
            (V::Nil, deep),
            (
                V::Binary(vec![0xc3]),
                rmpv::decode::read_value(&mut &[0xa3, 0xe9, b'\n', 0xff][..]).unwrap_or(V::Nil),
            ),
        ]);
        let indents = [
            OutputIndent::Unset,
            OutputIndent::Null,
            OutputIndent::Pretty,
            OutputIndent::Spaces(-1),
            OutputIndent::Spaces(0),
            OutputIndent::Spaces(i64::MAX),
            OutputIndent::Spaces(i64::MIN),
        ];
        for out in ALL {
            for indent in indents {
                let opts = OutputOptions {
                    indent,
                    retcode: -1,
                    ..OutputOptions::default()
                };
                assert!(!render(out, &minion("m", hostile.clone()), &opts).is_empty());
            }
        }
    }

    #[test]
    fn unhashable_map_keys_render_as_their_repr() {
        let value = minion(
            "m",
            V::Map(vec![(V::Array(vec![V::from(1), V::from("a")]), V::from(2))]),
        );
        let opts = OutputOptions::default();
        assert_eq!(
            render(Outputter::Raw, &value, &opts),
            "{'m': {\"[1, 'a']\": 2}}\n"
        );
    }

    #[test]
    fn to_json_renders_bytes_as_python_repr() {
        let value = V::Map(vec![
            (V::from("bin"), V::Binary(vec![0xff, 0x01])),
            (V::from(1), V::F64(1.5)),
            (V::from("nan"), V::F64(f64::NAN)),
        ]);
        assert_eq!(
            to_json(&value),
            serde_json::json!({"bin": "b'\\xff\\x01'", "1": 1.5, "nan": null})
        );
    }
}
