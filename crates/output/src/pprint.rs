//! Python 3.11's `pprint.pformat(data, indent=N)` (width 80, sorted dicts), used by the
//! `pprint` outputter and by `txt` for non-dict data. Widths count code points, as
//! Python's `len()` does.

use crate::py::{bytes_repr, is_space, pprint_sorted, py_len, splitlines, str_repr, Py};

const WIDTH: i64 = 80;

/// `pprint.pformat(data, indent=indent)`.
pub(crate) fn pformat(data: &Py, indent: usize) -> String {
    let printer = Printer {
        indent_per_level: indent as i64,
    };
    let mut out = String::new();
    printer.format(data, &mut out, 0, 0, 0);
    out
}

struct Printer {
    indent_per_level: i64,
}

fn spaces(n: i64) -> String {
    " ".repeat(usize::try_from(n).unwrap_or(0))
}

impl Printer {
    fn format(&self, obj: &Py, out: &mut String, indent: i64, allowance: i64, level: u32) {
        let rep = obj.sorted_repr();
        let max_width = WIDTH - indent - allowance;
        if py_len(&rep) as i64 > max_width {
            match obj {
                Py::Dict(items) => {
                    return self.pprint_dict(items, out, indent, allowance, level + 1)
                }
                Py::List(items) => {
                    return self.pprint_list(items, out, indent, allowance, level + 1)
                }
                Py::Str(s) => return self.pprint_str(s, out, indent, allowance, level + 1),
                Py::Bytes(b) => return self.pprint_bytes(b, out, indent, allowance, level + 1),
                _ => {}
            }
        }
        out.push_str(&rep);
    }

    fn pprint_dict(
        &self,
        items: &[(Py, Py)],
        out: &mut String,
        indent: i64,
        allowance: i64,
        level: u32,
    ) {
        out.push('{');
        if self.indent_per_level > 1 {
            out.push_str(&spaces(self.indent_per_level - 1));
        }
        if !items.is_empty() {
            let sorted = pprint_sorted(items);
            self.format_dict_items(&sorted, out, indent, allowance + 1, level);
        }
        out.push('}');
    }

    fn format_dict_items(
        &self,
        items: &[&(Py, Py)],
        out: &mut String,
        indent: i64,
        allowance: i64,
        level: u32,
    ) {
        let indent = indent + self.indent_per_level;
        let delimnl = format!(",\n{}", spaces(indent));
        let last_index = items.len().saturating_sub(1);
        for (i, (key, value)) in items.iter().enumerate() {
            let last = i == last_index;
            let rep = key.sorted_repr();
            out.push_str(&rep);
            out.push_str(": ");
            let width = indent + py_len(&rep) as i64 + 2;
            self.format(value, out, width, if last { allowance } else { 1 }, level);
            if !last {
                out.push_str(&delimnl);
            }
        }
    }

    fn pprint_list(&self, items: &[Py], out: &mut String, indent: i64, allowance: i64, level: u32) {
        out.push('[');
        self.format_items(items, out, indent, allowance + 1, level);
        out.push(']');
    }

    fn format_items(
        &self,
        items: &[Py],
        out: &mut String,
        indent: i64,
        allowance: i64,
        level: u32,
    ) {
        let indent = indent + self.indent_per_level;
        if self.indent_per_level > 1 {
            out.push_str(&spaces(self.indent_per_level - 1));
        }
        let delimnl = format!(",\n{}", spaces(indent));
        for (i, item) in items.iter().enumerate() {
            let last = i + 1 == items.len();
            if i > 0 {
                out.push_str(&delimnl);
            }
            self.format(item, out, indent, if last { allowance } else { 1 }, level);
        }
    }

    fn pprint_str(
        &self,
        s: &str,
        out: &mut String,
        mut indent: i64,
        mut allowance: i64,
        level: u32,
    ) {
        if s.is_empty() {
            out.push_str(&str_repr(s));
            return;
        }
        let lines = splitlines(s, true);
        if level == 1 {
            indent += 1;
            allowance += 1;
        }
        let max_width = WIDTH - indent;
        let mut max_width1 = max_width;
        let mut chunks: Vec<String> = Vec::new();
        let mut rep = String::new();
        for (i, line) in lines.iter().enumerate() {
            let last_line = i + 1 == lines.len();
            rep = str_repr(line);
            if last_line {
                max_width1 -= allowance;
            }
            if py_len(&rep) as i64 <= max_width1 {
                chunks.push(rep.clone());
                continue;
            }
            let parts = word_parts(line);
            let mut max_width2 = max_width;
            let mut current = String::new();
            for (j, part) in parts.iter().enumerate() {
                let candidate = format!("{current}{part}");
                if j + 1 == parts.len() && last_line {
                    max_width2 -= allowance;
                }
                if py_len(&str_repr(&candidate)) as i64 > max_width2 {
                    if !current.is_empty() {
                        chunks.push(str_repr(&current));
                    }
                    current = (*part).to_owned();
                } else {
                    current = candidate;
                }
            }
            if !current.is_empty() {
                chunks.push(str_repr(&current));
            }
        }
        if chunks.len() == 1 {
            out.push_str(&rep);
            return;
        }
        if level == 1 {
            out.push('(');
        }
        for (i, chunk) in chunks.iter().enumerate() {
            if i > 0 {
                out.push('\n');
                out.push_str(&spaces(indent));
            }
            out.push_str(chunk);
        }
        if level == 1 {
            out.push(')');
        }
    }

    fn pprint_bytes(
        &self,
        b: &[u8],
        out: &mut String,
        mut indent: i64,
        mut allowance: i64,
        level: u32,
    ) {
        if b.len() <= 4 {
            out.push_str(&bytes_repr(b));
            return;
        }
        let parens = level == 1;
        if parens {
            indent += 1;
            allowance += 1;
            out.push('(');
        }
        for (i, rep) in wrap_bytes_repr(b, WIDTH - indent, allowance)
            .iter()
            .enumerate()
        {
            if i > 0 {
                out.push('\n');
                out.push_str(&spaces(indent));
            }
            out.push_str(rep);
        }
        if parens {
            out.push(')');
        }
    }
}

/// `re.findall(r'\S*\s*', line)` without the trailing empty match.
fn word_parts(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let word_end = rest.find(is_space).unwrap_or(rest.len());
        let space_end = rest[word_end..]
            .find(|c: char| !is_space(c))
            .map_or(rest.len(), |n| word_end + n);
        parts.push(&rest[..space_end]);
        rest = &rest[space_end..];
    }
    parts
}

/// `pprint._wrap_bytes_repr`.
fn wrap_bytes_repr(b: &[u8], mut width: i64, allowance: i64) -> Vec<String> {
    let mut reps = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    let last = b.len() / 4 * 4;
    for (n, part) in b.chunks(4).enumerate() {
        let mut candidate = current.clone();
        candidate.extend_from_slice(part);
        if n * 4 == last {
            width -= allowance;
        }
        if bytes_repr(&candidate).len() as i64 > width {
            if !current.is_empty() {
                reps.push(bytes_repr(&current));
            }
            current = part.to_vec();
        } else {
            current = candidate;
        }
    }
    if !current.is_empty() {
        reps.push(bytes_repr(&current));
    }
    reps
}
