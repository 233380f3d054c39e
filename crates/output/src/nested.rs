//! `salt/output/nested.py` and `salt/output/no_return.py`.

use crate::color::Colors;
use crate::py::{python_sorted, splitlines, Py};

/// Renders like `nested.output()`: the lines joined with `\n`, no trailing newline.
pub(crate) fn nested(
    data: &Py,
    colors: &Colors,
    retcode: i64,
    base_indent: usize,
    strip_colors: bool,
) -> String {
    let nest = Nest {
        colors,
        retcode,
        strip_colors,
    };
    let mut lines = Vec::new();
    nest.display(data, base_indent, "", &mut lines);
    lines.join("\n")
}

struct Nest<'a> {
    colors: &'a Colors,
    retcode: i64,
    strip_colors: bool,
}

impl Nest<'_> {
    fn ustring(&self, indent: usize, color: &str, msg: &str, prefix: &str, suffix: &str) -> String {
        format!(
            "{}{color}{prefix}{msg}{}{suffix}",
            " ".repeat(indent),
            self.colors.endc
        )
    }

    /// Keys, lists and dict separators turn red when the minion returned non-zero.
    fn structure_color(&self, normal: &'static str) -> &'static str {
        if self.retcode != 0 {
            self.colors.red
        } else {
            normal
        }
    }

    fn display(&self, ret: &Py, indent: usize, prefix: &str, out: &mut Vec<String>) {
        let c = self.colors;
        match ret {
            Py::None | Py::Bool(_) | Py::Int(_) | Py::Float(_) => {
                out.push(self.ustring(indent, c.light_yellow, &ret.repr(), prefix, ""));
            }
            Py::Str(s) => {
                for (i, line) in splitlines(s, false).into_iter().enumerate() {
                    let pad;
                    let line_prefix = if i == 0 {
                        prefix
                    } else {
                        pad = " ".repeat(prefix.chars().count());
                        &pad
                    };
                    let line = if self.strip_colors {
                        line.replace('\u{1b}', "?")
                    } else {
                        line.to_owned()
                    };
                    out.push(self.ustring(indent, c.green, &line, line_prefix, ""));
                }
            }
            Py::List(items) => {
                let color = self.structure_color(c.green);
                for item in items {
                    match item {
                        Py::List(_) | Py::Dict(_) => {
                            out.push(self.ustring(indent, color, "|_", "", ""));
                            let inner = if matches!(item, Py::Dict(_)) {
                                ""
                            } else {
                                "- "
                            };
                            self.display(item, indent + 2, inner, out);
                        }
                        _ => self.display(item, indent, "- ", out),
                    }
                }
            }
            Py::Dict(items) => {
                let color = self.structure_color(c.cyan);
                if indent != 0 {
                    out.push(self.ustring(indent, color, "----------", "", ""));
                }
                let stringified;
                let sorted = match python_sorted(items) {
                    Some(sorted) => sorted,
                    None => {
                        // Salt retries with `{str(k): v}` when the keys are unorderable.
                        stringified = stringify_keys(items);
                        let Py::Dict(items) = &stringified else {
                            return;
                        };
                        python_sorted(items).unwrap_or_default()
                    }
                };
                for (key, value) in sorted {
                    out.push(self.ustring(indent, color, &key.to_str(), prefix, ":"));
                    self.display(value, indent + 4, "", out);
                }
            }
            // Undecodable bytes and datetimes match none of nested.py's branches.
            Py::Bytes(_) | Py::DateTime(_) => {}
        }
    }
}

fn stringify_keys(items: &[(Py, Py)]) -> Py {
    Py::dict_from_pairs(items.iter().map(|(k, v)| (Py::Str(k.to_str()), v.clone())))
}

/// Renders like `no_return.output()`; `None` when Salt raises (unorderable keys), which
/// makes `try_printout` fall back to nested.
pub(crate) fn no_return(data: &Py, colors: &Colors) -> Option<String> {
    let mut out = String::new();
    no_return_display(data, 0, colors, &mut out)?;
    Some(out)
}

fn no_return_display(ret: &Py, indent: usize, c: &Colors, out: &mut String) -> Option<()> {
    match ret {
        Py::Str(s) => {
            for line in s.split('\n') {
                out.push_str(&format!(
                    "{}{}{line}{}\n",
                    c.red,
                    " ".repeat(indent),
                    c.endc
                ));
            }
        }
        Py::Dict(items) => {
            for (key, value) in python_sorted(items)? {
                out.push_str(&format!(
                    "{}{}{}{}:\n",
                    c.cyan,
                    " ".repeat(indent),
                    key.to_str(),
                    c.endc
                ));
                no_return_display(value, indent + 4, c, out)?;
            }
        }
        _ => {}
    }
    Some(())
}
