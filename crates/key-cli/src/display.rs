//! What salt-key prints through `salt.output.display_output`: the `key` outputter
//! (`salt/output/key.py`) by default, any other outputter with `--out`, to stdout or to
//! `--out-file`.

use halite_output::{OutputOptions, Outputter};
use halite_proto::Value;
use std::io::{self, Write};
use std::path::PathBuf;

/// The section of the master's own key files in `-f`/`-F` output.
pub const LOCAL: &str = "local";

/// One section of salt-key's result: a list of ids (`-L`, the change previews) or ids with
/// a text each (`-p` keys, `-f` fingerprints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Section {
    /// Ids, possibly repeated.
    Ids(Vec<String>),
    /// `(id, text)` in insertion order, ids unique.
    Texts(Vec<(String, String)>),
}

/// salt-key's result dict, in insertion order.
pub type KeyData = Vec<(&'static str, Section)>;

/// Which outputter prints, and how.
#[derive(Debug, Clone)]
pub struct Display {
    /// `None`: the `key` outputter; otherwise one of halite-output's.
    pub outputter: Option<Outputter>,
    /// Output options (color, indent) for both.
    pub options: OutputOptions,
    /// `--out-file`: append each output there instead of printing it.
    pub file: Option<PathBuf>,
}

impl Display {
    /// Prints `data` as `display_output(data, "key", opts)` does.
    pub fn key_data(&self, data: &KeyData) -> io::Result<()> {
        let text = match self.outputter {
            None => finish(&key_outputter(data, self.options.color)),
            Some(out) => halite_output::render(out, &to_value(data), &self.options),
        };
        self.emit(&text)
    }

    /// Prints a command's non-dict result as `display_output({"return": ret}, "key", opts)`
    /// does: the `key` outputter cannot show it, so Salt falls back to `nested`
    /// (`return:` then the value indented), unless `--out` chose another outputter.
    pub fn returned(&self, ret: Value) -> io::Result<()> {
        let out = self.outputter.unwrap_or(Outputter::Nested);
        let data = Value::Map(vec![(Value::from("return"), ret)]);
        self.emit(&halite_output::render(out, &data, &self.options))
    }

    /// Prints an error string the way salt-key shows a `SaltException` (the nested
    /// outputter, unless `--out` chose another).
    pub fn message(&self, text: &str) -> io::Result<()> {
        let out = self.outputter.unwrap_or(Outputter::Nested);
        self.emit(&halite_output::render(
            out,
            &Value::from(text),
            &self.options,
        ))
    }

    fn emit(&self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        match &self.file {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?
                .write_all(text.as_bytes()),
            None => {
                let mut out = io::stdout().lock();
                out.write_all(text.as_bytes())?;
                out.flush()
            }
        }
    }
}

/// `display_output`'s `rstrip()` plus `print()`: nothing for empty text.
fn finish(text: &str) -> String {
    let t = text.trim_end();
    if t.is_empty() {
        String::new()
    } else {
        format!("{t}\n")
    }
}

/// `salt.utils.color` codes for the key outputter's palette, or empty strings.
struct Palette {
    red: &'static str,
    light_red: &'static str,
    green: &'static str,
    light_green: &'static str,
    blue: &'static str,
    light_blue: &'static str,
    magenta: &'static str,
    light_magenta: &'static str,
    endc: &'static str,
}

const COLORS: Palette = Palette {
    red: "\x1b[0;31m",
    light_red: "\x1b[0;1;31m",
    green: "\x1b[0;32m",
    light_green: "\x1b[0;1;32m",
    blue: "\x1b[0;34m",
    light_blue: "\x1b[0;1;34m",
    magenta: "\x1b[0;35m",
    light_magenta: "\x1b[0;1;35m",
    endc: "\x1b[0;0m",
};

const PLAIN: Palette = Palette {
    red: "",
    light_red: "",
    green: "",
    light_green: "",
    blue: "",
    light_blue: "",
    magenta: "",
    light_magenta: "",
    endc: "",
};

/// `salt/output/key.py:output`: sections sorted by name, each a header then its ids sorted,
/// `id` or `id:  text` per line. Ids have ESC replaced by `?` (`strip_colors`).
pub fn key_outputter(data: &KeyData, color: bool) -> String {
    let c = if color { &COLORS } else { &PLAIN };
    let mut sections: Vec<&(&'static str, Section)> = data.iter().collect();
    sections.sort_by_key(|(name, _)| *name);
    let mut lines = Vec::new();
    for (name, section) in sections {
        let (item_color, header_color, title) = match *name {
            "minions_pre" => (c.red, c.light_red, "Unaccepted Keys:"),
            "minions" => (c.green, c.light_green, "Accepted Keys:"),
            "minions_denied" => (c.magenta, c.light_magenta, "Denied Keys:"),
            "minions_rejected" => (c.blue, c.light_blue, "Rejected Keys:"),
            _ => (c.magenta, c.light_magenta, "Local Keys:"),
        };
        lines.push(format!("{header_color}{title}{}", c.endc));
        match section {
            Section::Ids(ids) => {
                let mut ids: Vec<&String> = ids.iter().collect();
                ids.sort();
                for id in ids {
                    lines.push(format!("{item_color}{}{}", id.replace('\x1b', "?"), c.endc));
                }
            }
            Section::Texts(items) => {
                let mut items: Vec<&(String, String)> = items.iter().collect();
                items.sort_by(|a, b| a.0.cmp(&b.0));
                for (id, text) in items {
                    lines.push(format!(
                        "{item_color}{}:  {text}{}",
                        id.replace('\x1b', "?"),
                        c.endc
                    ));
                }
            }
        }
    }
    lines.join("\n")
}

/// The result dict as a msgpack map for halite-output.
pub fn to_value(data: &KeyData) -> Value {
    Value::Map(
        data.iter()
            .map(|(name, section)| {
                let v = match section {
                    Section::Ids(ids) => {
                        Value::Array(ids.iter().map(|i| Value::from(i.as_str())).collect())
                    }
                    Section::Texts(items) => Value::Map(
                        items
                            .iter()
                            .map(|(k, t)| (Value::from(k.as_str()), Value::from(t.as_str())))
                            .collect(),
                    ),
                };
                (Value::from(*name), v)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Section {
        Section::Ids(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn sections_sort_by_name_and_ids_by_codepoint() {
        let data: KeyData = vec![
            ("minions_pre", ids(&["gamma", "Zed"])),
            ("minions_rejected", ids(&[])),
            ("minions", ids(&["beta", "Alpha"])),
            ("minions_denied", ids(&["beta"])),
        ];
        assert_eq!(
            key_outputter(&data, false),
            "Accepted Keys:\nAlpha\nbeta\nDenied Keys:\nbeta\nUnaccepted Keys:\nZed\ngamma\nRejected Keys:"
        );
    }

    #[test]
    fn texts_are_separated_by_two_spaces_and_local_comes_first() {
        let data: KeyData = vec![
            (
                "minions",
                Section::Texts(vec![("m1".into(), "aa:bb".into())]),
            ),
            (LOCAL, Section::Texts(vec![("x.pub".into(), "cc".into())])),
        ];
        assert_eq!(
            key_outputter(&data, false),
            "Local Keys:\nx.pub:  cc\nAccepted Keys:\nm1:  aa:bb"
        );
    }

    #[test]
    fn colors_match_salt_text_format() {
        let data: KeyData = vec![("minions", ids(&["m1"]))];
        assert_eq!(
            key_outputter(&data, true),
            "\x1b[0;1;32mAccepted Keys:\x1b[0;0m\n\x1b[0;32mm1\x1b[0;0m"
        );
    }

    #[test]
    fn escape_characters_in_ids_are_neutralised() {
        let data: KeyData = vec![("minions", ids(&["a\x1b[31mb"]))];
        assert_eq!(key_outputter(&data, false), "Accepted Keys:\na?[31mb");
    }
}
