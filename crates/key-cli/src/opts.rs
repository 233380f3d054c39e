//! salt-key's command line, parsed with Python `optparse` rules (`SaltKeyOptionParser`):
//! long options take `--opt=value` or `--opt value` and may be abbreviated to any unique
//! prefix, short options cluster (`-yA`) and take their value attached or from the next
//! argument (even one starting with `-`), `--` ends the options, and positional arguments
//! may appear anywhere. Errors carry optparse's wording.

use std::collections::HashMap;

/// How an option consumes arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `store_true`.
    Flag,
    /// Takes a string.
    Value,
    /// Takes an integer (`type=int`).
    Int,
    /// Takes one of a fixed set of strings (`type="choice"`), listed in Salt's order.
    Choice(&'static [&'static str]),
}

/// One option: its short and long spellings, kind and destination.
struct Spec {
    shorts: &'static [char],
    longs: &'static [&'static str],
    kind: Kind,
    dest: &'static str,
}

const fn spec(
    shorts: &'static [char],
    longs: &'static [&'static str],
    kind: Kind,
    dest: &'static str,
) -> Spec {
    Spec {
        shorts,
        longs,
        kind,
        dest,
    }
}

use Kind::{Choice, Flag, Int, Value};

/// `--log-level` choices, in the order salt-key's error message lists them.
const CONSOLE_LEVELS: &[&str] = &[
    "all", "debug", "error", "critical", "garbage", "info", "profile", "quiet", "trace", "warning",
];
/// `--log-file-level` choices, in the order salt-key's error message lists them.
const LOGFILE_LEVELS: &[&str] = &[
    "all", "garbage", "trace", "debug", "profile", "info", "warning", "error", "critical", "quiet",
];

/// Every option salt-key 3008.3 accepts, in its `--help` order.
const SPECS: &[Spec] = &[
    spec(&[], &["--version"], Flag, "version"),
    spec(&['V'], &["--versions-report"], Flag, "versions_report"),
    spec(&['h'], &["--help"], Flag, "help"),
    spec(&[], &["--saltfile"], Value, "saltfile"),
    spec(&['c'], &["--config-dir"], Value, "config_dir"),
    spec(&['u'], &["--user"], Value, "user"),
    spec(&[], &["--hard-crash"], Flag, "hard_crash"),
    spec(&['q'], &["--quiet"], Flag, "quiet"),
    spec(&['y'], &["--yes"], Flag, "yes"),
    spec(&[], &["--rotate-aes-key"], Value, "rotate_aes_key"),
    spec(&[], &["--preserve-minions"], Value, "preserve_minions"),
    spec(
        &[],
        &["--auth", "--eauth", "--external-auth"],
        Value,
        "eauth",
    ),
    spec(&['T'], &["--make-token"], Flag, "mktoken"),
    spec(&[], &["--username"], Value, "username"),
    spec(&[], &["--password"], Value, "password"),
    spec(&[], &["--out", "--output"], Value, "output"),
    spec(
        &[],
        &["--out-indent", "--output-indent"],
        Int,
        "output_indent",
    ),
    spec(&[], &["--out-file", "--output-file"], Value, "output_file"),
    spec(
        &[],
        &["--out-file-append", "--output-file-append"],
        Flag,
        "output_file_append",
    ),
    spec(&[], &["--no-color", "--no-colour"], Flag, "no_color"),
    spec(
        &[],
        &["--force-color", "--force-colour"],
        Flag,
        "force_color",
    ),
    spec(
        &[],
        &["--state-output", "--state_output"],
        Value,
        "state_output",
    ),
    spec(
        &[],
        &["--state-verbose", "--state_verbose"],
        Value,
        "state_verbose",
    ),
    spec(&['l'], &["--list"], Value, "list"),
    spec(&['L'], &["--list-all"], Flag, "list_all"),
    spec(&['a'], &["--accept"], Value, "accept"),
    spec(&['A'], &["--accept-all"], Flag, "accept_all"),
    spec(&['r'], &["--reject"], Value, "reject"),
    spec(&['R'], &["--reject-all"], Flag, "reject_all"),
    spec(&[], &["--include-all"], Flag, "include_all"),
    spec(&[], &["--include-accepted"], Flag, "include_accepted"),
    spec(&[], &["--include-rejected"], Flag, "include_rejected"),
    spec(&[], &["--include-denied"], Flag, "include_denied"),
    spec(&['p'], &["--print"], Value, "print"),
    spec(&['P'], &["--print-all"], Flag, "print_all"),
    spec(&['d'], &["--delete"], Value, "delete"),
    spec(&['D'], &["--delete-all"], Flag, "delete_all"),
    spec(&['f'], &["--finger"], Value, "finger"),
    spec(&['F'], &["--finger-all"], Flag, "finger_all"),
    spec(&[], &["--gen-keys"], Value, "gen_keys"),
    spec(&[], &["--gen-keys-dir"], Value, "gen_keys_dir"),
    spec(&[], &["--keysize"], Int, "keysize"),
    spec(&[], &["--gen-signature"], Flag, "gen_signature"),
    spec(&[], &["--priv"], Value, "priv"),
    spec(&[], &["--signature-path"], Value, "signature_path"),
    spec(&[], &["--pub"], Value, "pub"),
    spec(&[], &["--auto-create"], Flag, "auto_create"),
    spec(&[], &["--log-level"], Choice(CONSOLE_LEVELS), "log_level"),
    spec(&[], &["--log-file"], Value, "key_logfile"),
    spec(
        &[],
        &["--log-file-level"],
        Choice(LOGFILE_LEVELS),
        "log_level_logfile",
    ),
];

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Val {
    Flag,
    Str(String),
    Int(i64),
}

/// The parsed command line: the options given explicitly, plus positional arguments.
#[derive(Debug, Clone, Default)]
pub struct Options {
    given: HashMap<&'static str, Val>,
    /// Positional arguments (salt-key ignores them, except that `-D` refuses any).
    pub args: Vec<String>,
}

impl Options {
    /// Parses `argv` (without the program name). The error is optparse's message.
    pub fn parse(argv: &[String]) -> Result<Options, String> {
        let mut opts = Options::default();
        let mut i = 0;
        while i < argv.len() {
            let arg = &argv[i];
            i += 1;
            if arg == "--" {
                opts.args.extend(argv[i..].iter().cloned());
                break;
            }
            if let Some(body) = arg.strip_prefix("--") {
                let (name, attached) = match body.split_once('=') {
                    Some((n, v)) => (format!("--{n}"), Some(v.to_owned())),
                    None => (arg.clone(), None),
                };
                let (spec, long) = match_long(&name)?;
                let value = match (spec.kind, attached) {
                    (Flag, Some(_)) => return Err(format!("{long} option does not take a value")),
                    (Flag, None) => None,
                    (_, Some(v)) => Some(v),
                    (_, None) => match argv.get(i) {
                        Some(v) => {
                            i += 1;
                            Some(v.clone())
                        }
                        None => return Err(format!("{long} option requires 1 argument")),
                    },
                };
                opts.store(spec, long, value)?;
            } else if arg.len() > 1 && arg.starts_with('-') {
                let chars: Vec<char> = arg.chars().skip(1).collect();
                let mut k = 0;
                while k < chars.len() {
                    let c = chars[k];
                    k += 1;
                    let spec = SPECS
                        .iter()
                        .find(|s| s.shorts.contains(&c))
                        .ok_or_else(|| format!("no such option: -{c}"))?;
                    let shown = format!("-{c}");
                    if spec.kind == Flag {
                        opts.store(spec, &shown, None)?;
                        continue;
                    }
                    let value = if k < chars.len() {
                        let rest: String = chars[k..].iter().collect();
                        k = chars.len();
                        rest
                    } else {
                        match argv.get(i) {
                            Some(v) => {
                                i += 1;
                                v.clone()
                            }
                            None => return Err(format!("{shown} option requires 1 argument")),
                        }
                    };
                    opts.store(spec, &shown, Some(value))?;
                }
            } else {
                opts.args.push(arg.clone());
            }
        }
        Ok(opts)
    }

    fn store(&mut self, spec: &Spec, shown: &str, value: Option<String>) -> Result<(), String> {
        let val = match (spec.kind, value) {
            (Flag, _) => Val::Flag,
            (Value, Some(v)) => Val::Str(v),
            (Choice(choices), Some(v)) => {
                if !choices.contains(&v.as_str()) {
                    let listed: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
                    return Err(format!(
                        "option {shown}: invalid choice: '{v}' (choose from {})",
                        listed.join(", ")
                    ));
                }
                Val::Str(v)
            }
            (Int, Some(v)) => Val::Int(
                parse_int(&v)
                    .ok_or_else(|| format!("option {shown}: invalid integer value: '{v}'"))?,
            ),
            (_, None) => return Err(format!("{shown} option requires 1 argument")),
        };
        self.given.insert(spec.dest, val);
        Ok(())
    }

    /// Whether a flag was given.
    pub fn flag(&self, dest: &str) -> bool {
        self.given.get(dest) == Some(&Val::Flag)
    }

    /// A string option if given (possibly empty).
    pub fn string(&self, dest: &str) -> Option<&str> {
        match self.given.get(dest) {
            Some(Val::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// A string option's value with optparse's default `""`; empty means "not selected".
    pub fn text(&self, dest: &str) -> &str {
        self.string(dest).unwrap_or("")
    }

    /// An integer option if given.
    pub fn int(&self, dest: &str) -> Option<i64> {
        match self.given.get(dest) {
            Some(Val::Int(n)) => Some(*n),
            _ => None,
        }
    }

    /// Whether the option with destination `dest` was given at all.
    pub fn given(&self, dest: &str) -> bool {
        self.given.contains_key(dest)
    }

    /// The long spelling of `dest`, for messages.
    pub fn long_name(dest: &str) -> &'static str {
        SPECS
            .iter()
            .find(|s| s.dest == dest)
            .map(|s| s.longs[0])
            .unwrap_or("--")
    }
}

/// optparse's `_match_abbrev`: an exact long option, else the only one starting with `name`.
fn match_long(name: &str) -> Result<(&'static Spec, &'static str), String> {
    let mut candidates: Vec<(&'static Spec, &'static str)> = Vec::new();
    for spec in SPECS {
        for long in spec.longs {
            if *long == name {
                return Ok((spec, long));
            }
            if long.starts_with(name) {
                candidates.push((spec, long));
            }
        }
    }
    match candidates.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!("no such option: {name}")),
        many => {
            let mut names: Vec<&str> = many.iter().map(|(_, l)| *l).collect();
            names.sort_unstable();
            Err(format!("ambiguous option: {name} ({}?)", names.join(", ")))
        }
    }
}

/// optparse's `_parse_num` with `int`: optional sign, then `0x`, `0b`, `0` (octal) prefixes.
fn parse_int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let lower = digits.to_ascii_lowercase();
    let parsed = if let Some(h) = lower.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(b) = lower.strip_prefix("0b") {
        i64::from_str_radix(b, 2).ok()
    } else if lower.len() > 1 && lower.starts_with('0') {
        i64::from_str_radix(&lower[1..], 8).ok()
    } else {
        lower.parse::<i64>().ok()
    }?;
    Some(if neg { -parsed } else { parsed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn long_options_take_attached_or_next_values() {
        let o = parse(&["--accept=web*", "--config-dir", "/tmp/c"]).unwrap();
        assert_eq!(o.string("accept"), Some("web*"));
        assert_eq!(o.string("config_dir"), Some("/tmp/c"));
    }

    #[test]
    fn short_options_cluster_and_take_attached_values() {
        let o = parse(&["-yaweb1", "-c", "/x"]).unwrap();
        assert!(o.flag("yes"));
        assert_eq!(o.string("accept"), Some("web1"));
        assert_eq!(o.string("config_dir"), Some("/x"));
    }

    #[test]
    fn value_may_look_like_an_option() {
        let o = parse(&["-a", "-L"]).unwrap();
        assert_eq!(o.string("accept"), Some("-L"));
        assert!(!o.flag("list_all"));
    }

    #[test]
    fn unique_prefixes_abbreviate_long_options() {
        let o = parse(&["--include-den", "--gen-keys-d", "/k"]).unwrap();
        assert!(o.flag("include_denied"));
        assert_eq!(o.string("gen_keys_dir"), Some("/k"));
    }

    #[test]
    fn errors_use_optparse_wording() {
        let cases: &[(&[&str], &str)] = &[
            (&["--bogus"], "no such option: --bogus"),
            (&["-Z"], "no such option: -Z"),
            (&["-a"], "-a option requires 1 argument"),
            (&["--accept"], "--accept option requires 1 argument"),
            (
                &["--keysize", "abc"],
                "option --keysize: invalid integer value: 'abc'",
            ),
            (&["--yes=1"], "--yes option does not take a value"),
            (
                &["--acc", "x"],
                "ambiguous option: --acc (--accept, --accept-all?)",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args).unwrap_err(), *want, "{args:?}");
        }
    }

    #[test]
    fn positional_arguments_and_double_dash() {
        let o = parse(&["x", "-D", "--", "-y"]).unwrap();
        assert_eq!(o.args, ["x", "-y"]);
        assert!(o.flag("delete_all"));
        assert!(!o.flag("yes"));
    }

    #[test]
    fn integers_follow_optparse_prefixes() {
        for (text, want) in [
            ("2048", Some(2048)),
            ("0x800", Some(2048)),
            ("04000", Some(2048)),
            ("-1", Some(-1)),
            ("1.5", None),
        ] {
            assert_eq!(parse_int(text), want, "{text}");
        }
    }
}
