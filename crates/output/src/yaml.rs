//! `salt.utils.yaml.safe_dump(data, default_flow_style=..., allow_unicode=True)`.
//!
//! Salt's PyYAML is built with libyaml, so `SafeOrderedDumper` is PyYAML's Python
//! representer and resolver in front of libyaml 0.2.5's C emitter. This module ports
//! the three pieces that shape the text:
//!
//! * the `SafeRepresenter` (dict keys sorted when orderable, floats as `.nan`/`1.0e+20`,
//!   undecodable bytes as `!!binary` literal blocks, datetimes as timestamps);
//! * the YAML 1.1 implicit resolver, which decides whether a string may stay plain
//!   (`'yes'`, `'123'` and `''` must be quoted);
//! * libyaml's emitter: scalar analysis, style selection, the plain/single/double
//!   quoted and literal writers with their 80-column folding, block and flow
//!   collections, and complex (`? `) keys longer than 128 bytes.
//!
//! Anchors, explicit documents and folded scalars are never produced by Salt's dump
//! of msgpack data and are not implemented.

use std::sync::OnceLock;

use base64::Engine as _;
use fancy_regex::Regex;

use crate::py::{float_repr, python_sorted, Py};

/// Dumps `data` as `yaml.dump` would; `flow` selects `default_flow_style=True`.
pub(crate) fn safe_dump(data: &Py, flow: bool, indent: Option<i64>) -> String {
    let node = represent(data, flow);
    let mut emitter = Emitter::new(indent.unwrap_or(2));
    emitter.emit_document(&node);
    emitter.out
}

/// libyaml's scalar styles, restricted to those the representer can request or the
/// emitter can choose.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

struct Scalar {
    value: String,
    /// The tag's suffix under `tag:yaml.org,2002:`.
    tag: &'static str,
    plain_implicit: bool,
    quoted_implicit: bool,
    /// The style the representer asked for (`None` = any).
    style: Option<Style>,
}

enum Node {
    Scalar(Scalar),
    Seq {
        flow: bool,
        items: Vec<Node>,
    },
    Map {
        flow: bool,
        pairs: Vec<(Node, Node)>,
    },
}

fn scalar(tag: &'static str, value: String, style: Option<Style>) -> Node {
    // Serializer.serialize_node: implicit = (tag == detected, tag == default).
    let plain_implicit = resolve(&value) == tag;
    let quoted_implicit = tag == "str";
    Node::Scalar(Scalar {
        value,
        tag,
        plain_implicit,
        quoted_implicit,
        style,
    })
}

/// `SafeRepresenter.represent_data` for the types a return can hold.
fn represent(data: &Py, flow: bool) -> Node {
    match data {
        Py::None => scalar("null", "null".to_owned(), None),
        Py::Bool(b) => scalar("bool", if *b { "true" } else { "false" }.to_owned(), None),
        Py::Int(i) => scalar("int", i.to_string(), None),
        Py::Float(f) => scalar("float", represent_float(*f), None),
        Py::Str(s) => scalar("str", s.clone(), None),
        Py::Bytes(b) => scalar("binary", encodebytes(b), Some(Style::Literal)),
        Py::DateTime(d) => scalar("timestamp", d.isoformat(), None),
        Py::List(items) => Node::Seq {
            flow,
            items: items.iter().map(|i| represent(i, flow)).collect(),
        },
        Py::Dict(items) => {
            let ordered: Vec<&(Py, Py)> =
                python_sorted(items).unwrap_or_else(|| items.iter().collect());
            Node::Map {
                flow,
                pairs: ordered
                    .into_iter()
                    .map(|(k, v)| (represent(k, flow), represent(v, flow)))
                    .collect(),
            }
        }
    }
}

fn represent_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.to_owned();
    }
    let value = float_repr(f).to_lowercase();
    if !value.contains('.') && value.contains('e') {
        value.replacen('e', ".0e", 1)
    } else {
        value
    }
}

/// `base64.encodebytes`: 76-character lines, each ending in a newline.
fn encodebytes(data: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(data);
    let mut out = String::with_capacity(encoded.len() + encoded.len() / 76 + 1);
    for line in encoded.as_bytes().chunks(76) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out
}

/// PyYAML's implicit resolvers, in registration order, keyed by allowed first characters.
/// Python's `$` also matches before a final newline, hence `\n?\z`.
const RESOLVERS: &[(&str, &str, &str)] = &[
    (
        "bool",
        "yYnNtTfFoO",
        r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)\n?\z",
    ),
    (
        "float",
        "-+0123456789.",
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\n?\z",
    ),
    (
        "int",
        "-+0123456789",
        r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)\n?\z",
    ),
    ("merge", "<", r"^(?:<<)\n?\z"),
    ("null", "~nN", r"^(?:~|null|Null|NULL|)\n?\z"),
    (
        "timestamp",
        "0123456789",
        r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)\n?\z",
    ),
    ("value", "=", r"^(?:=)\n?\z"),
    ("yaml", "!&*", r"^(?:!|&|\*)\n?\z"),
];

fn compiled_resolvers() -> &'static [(&'static str, &'static str, Option<Regex>)] {
    static COMPILED: OnceLock<Vec<(&'static str, &'static str, Option<Regex>)>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        RESOLVERS
            .iter()
            .map(|(tag, first, pattern)| (*tag, *first, Regex::new(pattern).ok()))
            .collect()
    })
}

/// `Resolver.resolve(ScalarNode, value, (True, False))`: the tag suffix a plain scalar
/// would be read back as.
fn resolve(value: &str) -> &'static str {
    let first = value.chars().next();
    for (tag, firsts, regex) in compiled_resolvers() {
        // Only the null resolver is registered for the empty string.
        let applies = match first {
            None => *tag == "null",
            Some(c) => firsts.contains(c),
        };
        if applies
            && regex
                .as_ref()
                .is_some_and(|r| r.is_match(value).unwrap_or(false))
        {
            return tag;
        }
    }
    "str"
}

/// What `yaml_emitter_analyze_scalar` learns about a value.
struct Analysis {
    multiline: bool,
    flow_plain_allowed: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `IS_BLANKZ`; the end of the value reads as NUL, which counts.
fn is_blankz(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || c == '\0' || is_break(c),
    }
}

/// libyaml's `IS_PRINTABLE`: LF, printable ASCII, and the BMP outside C1 controls,
/// surrogates, the BOM and U+FFFE/U+FFFF. Characters beyond the BMP are not printable.
fn yaml_printable(c: char) -> bool {
    let cp = u32::from(c);
    cp == 0x0A
        || (0x20..=0x7E).contains(&cp)
        || (0xA0..=0xD7FF).contains(&cp)
        || ((0xE000..=0xFFFD).contains(&cp) && cp != 0xFEFF)
}

fn analyze(value: &str) -> Analysis {
    if value.is_empty() {
        return Analysis {
            multiline: false,
            flow_plain_allowed: false,
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = value.chars().collect();
    let mut block_indicators = value.starts_with("---") || value.starts_with("...");
    let mut flow_indicators = block_indicators;
    let mut line_breaks = false;
    let mut special_characters = false;
    let mut leading_space = false;
    let mut leading_break = false;
    let mut trailing_space = false;
    let mut trailing_break = false;
    let mut break_space = false;
    let mut space_break = false;
    let mut preceded_by_whitespace = true;
    let mut previous_space = false;
    let mut previous_break = false;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = is_blankz(chars.get(i + 1).copied());
        let first = i == 0;
        let last = i + 1 == chars.len();
        if first {
            if "#,[]{}&*!|>'\"%@`".contains(c) {
                flow_indicators = true;
                block_indicators = true;
            }
            if c == '?' || c == ':' {
                flow_indicators = true;
                if followed_by_whitespace {
                    block_indicators = true;
                }
            }
            if c == '-' && followed_by_whitespace {
                flow_indicators = true;
                block_indicators = true;
            }
        } else {
            if ",?[]{}".contains(c) {
                flow_indicators = true;
            }
            if c == ':' {
                flow_indicators = true;
                if followed_by_whitespace {
                    block_indicators = true;
                }
            }
            if c == '#' && preceded_by_whitespace {
                flow_indicators = true;
                block_indicators = true;
            }
        }
        if !yaml_printable(c) {
            special_characters = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            leading_space |= first;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            leading_break |= first;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blankz(Some(c));
    }
    let mut a = Analysis {
        multiline: line_breaks,
        flow_plain_allowed: true,
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special_characters {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks {
        a.flow_plain_allowed = false;
        a.block_plain_allowed = false;
    }
    if flow_indicators {
        a.flow_plain_allowed = false;
    }
    if block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// The writer state of libyaml's `yaml_emitter_t` that affects the text.
struct Emitter {
    out: String,
    best_indent: i64,
    best_width: i64,
    indent: i64,
    indents: Vec<i64>,
    flow_level: u32,
    column: i64,
    whitespace: bool,
    indention: bool,
    open_ended: u8,
    mapping_context: bool,
    simple_key_context: bool,
}

impl Emitter {
    fn new(indent: i64) -> Emitter {
        let best_indent = if (2..=9).contains(&indent) { indent } else { 2 };
        Emitter {
            out: String::new(),
            best_indent,
            // libyaml's default width; it is only reset when <= 2 * indent (never here).
            best_width: 80,
            indent: -1,
            indents: Vec::new(),
            flow_level: 0,
            column: 0,
            whitespace: true,
            indention: true,
            open_ended: 0,
            mapping_context: false,
            simple_key_context: false,
        }
    }

    fn emit_document(&mut self, root: &Node) {
        self.emit_node(root, false, false);
        // DOCUMENT-END (implicit), then STREAM-END.
        self.write_indent();
        if self.open_ended == 0 {
            self.open_ended = 1;
        }
        if self.open_ended == 2 {
            self.write_indicator("...", true, false, false);
            self.open_ended = 0;
            self.write_indent();
        }
    }

    fn increase_indent(&mut self, flow: bool, indentless: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { self.best_indent } else { 0 };
        } else if !indentless {
            self.indent += self.best_indent;
        }
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn emit_node(&mut self, node: &Node, mapping: bool, simple_key: bool) {
        self.mapping_context = mapping;
        self.simple_key_context = simple_key;
        match node {
            Node::Scalar(s) => self.emit_scalar(s),
            Node::Seq { flow, items } => {
                if self.flow_level > 0 || *flow || items.is_empty() {
                    self.emit_flow_sequence(items);
                } else {
                    self.emit_block_sequence(items);
                }
            }
            Node::Map { flow, pairs } => {
                if self.flow_level > 0 || *flow || pairs.is_empty() {
                    self.emit_flow_mapping(pairs);
                } else {
                    self.emit_block_mapping(pairs);
                }
            }
        }
    }

    fn emit_flow_sequence(&mut self, items: &[Node]) {
        self.write_indicator("[", true, true, false);
        self.increase_indent(true, false);
        self.flow_level += 1;
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.write_indicator(",", false, false, false);
            }
            if self.column > self.best_width {
                self.write_indent();
            }
            self.emit_node(item, false, false);
        }
        self.flow_level -= 1;
        self.pop_indent();
        self.write_indicator("]", false, false, false);
    }

    fn emit_flow_mapping(&mut self, pairs: &[(Node, Node)]) {
        self.write_indicator("{", true, true, false);
        self.increase_indent(true, false);
        self.flow_level += 1;
        for (i, (key, value)) in pairs.iter().enumerate() {
            if i > 0 {
                self.write_indicator(",", false, false, false);
            }
            if self.column > self.best_width {
                self.write_indent();
            }
            if check_simple_key(key) {
                self.emit_node(key, true, true);
                self.write_indicator(":", false, false, false);
            } else {
                self.write_indicator("?", true, false, false);
                self.emit_node(key, true, false);
                if self.column > self.best_width {
                    self.write_indent();
                }
                self.write_indicator(":", true, false, false);
            }
            self.emit_node(value, true, false);
        }
        self.flow_level -= 1;
        self.pop_indent();
        self.write_indicator("}", false, false, false);
    }

    fn emit_block_sequence(&mut self, items: &[Node]) {
        let indentless = self.mapping_context && !self.indention;
        self.increase_indent(false, indentless);
        for item in items {
            self.write_indent();
            self.write_indicator("-", true, false, true);
            self.emit_node(item, false, false);
        }
        self.pop_indent();
    }

    fn emit_block_mapping(&mut self, pairs: &[(Node, Node)]) {
        self.increase_indent(false, false);
        for (key, value) in pairs {
            self.write_indent();
            if check_simple_key(key) {
                self.emit_node(key, true, true);
                self.write_indicator(":", false, false, false);
            } else {
                self.write_indicator("?", true, false, true);
                self.emit_node(key, true, false);
                self.write_indent();
                self.write_indicator(":", true, false, true);
            }
            self.emit_node(value, true, false);
        }
        self.pop_indent();
    }

    fn emit_scalar(&mut self, s: &Scalar) {
        let analysis = analyze(&s.value);
        // The tag is written only when neither implicit flag holds (e.g. `!!binary`).
        let tagged = !s.plain_implicit && !s.quoted_implicit;
        let style = self.select_style(s, &analysis, tagged);
        if tagged {
            self.write_tag_handle("!!");
            self.write_tag_content(s.tag);
        } else if !s.quoted_implicit && style != Style::Plain {
            // A non-string scalar that cannot stay plain gets the non-specific tag.
            self.write_tag_handle("!");
        }
        self.increase_indent(true, false);
        let allow_breaks = !self.simple_key_context;
        match style {
            Style::Plain => self.write_plain(&s.value, allow_breaks),
            Style::SingleQuoted => self.write_single_quoted(&s.value, allow_breaks),
            Style::DoubleQuoted => self.write_double_quoted(&s.value, allow_breaks),
            Style::Literal => self.write_literal(&s.value),
        }
        self.pop_indent();
    }

    /// `yaml_emitter_select_scalar_style`.
    fn select_style(&self, s: &Scalar, a: &Analysis, tagged: bool) -> Style {
        let no_tag = !tagged;
        let mut style = s.style.unwrap_or(Style::Plain);
        if self.simple_key_context && a.multiline {
            style = Style::DoubleQuoted;
        }
        if style == Style::Plain {
            let flow = self.flow_level > 0;
            if (flow && !a.flow_plain_allowed) || (!flow && !a.block_plain_allowed) {
                style = Style::SingleQuoted;
            }
            if s.value.is_empty() && (flow || self.simple_key_context) {
                style = Style::SingleQuoted;
            }
            if no_tag && !s.plain_implicit {
                style = Style::SingleQuoted;
            }
        }
        if style == Style::SingleQuoted && !a.single_quoted_allowed {
            style = Style::DoubleQuoted;
        }
        if style == Style::Literal
            && (!a.block_allowed || self.flow_level > 0 || self.simple_key_context)
        {
            style = Style::DoubleQuoted;
        }
        style
    }

    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn write_break(&mut self, c: char) {
        if c == '\n' {
            self.put_break();
        } else {
            self.out.push(c);
            self.column = 0;
        }
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(
        &mut self,
        indicator: &str,
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in indicator.chars() {
            self.put(c);
        }
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    fn write_tag_handle(&mut self, handle: &str) {
        if !self.whitespace {
            self.put(' ');
        }
        for c in handle.chars() {
            self.put(c);
        }
        self.whitespace = false;
        self.indention = false;
    }

    /// Tag suffixes here are plain ASCII words, which libyaml copies unescaped.
    fn write_tag_content(&mut self, suffix: &str) {
        for c in suffix.chars() {
            self.put(c);
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn write_plain(&mut self, value: &str, allow_breaks: bool) {
        let chars: Vec<char> = value.chars().collect();
        let mut spaces = false;
        let mut breaks = false;
        if !self.whitespace && (!value.is_empty() || self.flow_level > 0) {
            self.put(' ');
        }
        for (i, &c) in chars.iter().enumerate() {
            let next = chars.get(i + 1).copied();
            if c == ' ' {
                if allow_breaks && !spaces && self.column > self.best_width && next != Some(' ') {
                    self.write_indent();
                } else {
                    self.put(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn write_single_quoted(&mut self, value: &str, allow_breaks: bool) {
        let chars: Vec<char> = value.chars().collect();
        let mut spaces = false;
        let mut breaks = false;
        self.write_indicator("'", true, false, false);
        for (i, &c) in chars.iter().enumerate() {
            let next = chars.get(i + 1).copied();
            let inner = i != 0 && i + 1 != chars.len();
            if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > self.best_width
                    && inner
                    && next != Some(' ')
                {
                    self.write_indent();
                } else {
                    self.put(c);
                }
                spaces = true;
            } else if is_break(c) {
                if !breaks && c == '\n' {
                    self.put_break();
                }
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                spaces = false;
                breaks = false;
            }
        }
        if breaks {
            self.write_indent();
        }
        self.write_indicator("'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_double_quoted(&mut self, value: &str, allow_breaks: bool) {
        let chars: Vec<char> = value.chars().collect();
        let mut spaces = false;
        self.write_indicator("\"", true, false, false);
        for (i, &c) in chars.iter().enumerate() {
            let next = chars.get(i + 1).copied();
            if !yaml_printable(c) || c == '\u{feff}' || is_break(c) || c == '"' || c == '\\' {
                self.put('\\');
                let cp = u32::from(c);
                let short = match cp {
                    0x00 => Some('0'),
                    0x07 => Some('a'),
                    0x08 => Some('b'),
                    0x09 => Some('t'),
                    0x0A => Some('n'),
                    0x0B => Some('v'),
                    0x0C => Some('f'),
                    0x0D => Some('r'),
                    0x1B => Some('e'),
                    0x22 => Some('"'),
                    0x5C => Some('\\'),
                    0x85 => Some('N'),
                    0xA0 => Some('_'),
                    0x2028 => Some('L'),
                    0x2029 => Some('P'),
                    _ => None,
                };
                match short {
                    Some(e) => self.put(e),
                    None => {
                        let escaped = if cp <= 0xFF {
                            format!("x{cp:02X}")
                        } else if cp <= 0xFFFF {
                            format!("u{cp:04X}")
                        } else {
                            format!("U{cp:08X}")
                        };
                        for e in escaped.chars() {
                            self.put(e);
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                let inner = i != 0 && i + 1 != chars.len();
                if allow_breaks && !spaces && self.column > self.best_width && inner {
                    self.write_indent();
                    if next == Some(' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.write_indicator("\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_block_scalar_hints(&mut self, value: &str) {
        let mut chars = value.chars();
        if chars.next().is_some_and(|c| c == ' ' || is_break(c)) {
            let hint = self.best_indent.to_string();
            self.write_indicator(&hint, false, false, false);
        }
        self.open_ended = 0;
        let mut rev = value.chars().rev();
        let chomp = match (rev.next(), rev.next()) {
            (None, _) => Some("-"),
            (Some(last), _) if !is_break(last) => Some("-"),
            (Some(_), None) => {
                self.open_ended = 2;
                Some("+")
            }
            (Some(_), Some(prev)) if is_break(prev) => {
                self.open_ended = 2;
                Some("+")
            }
            _ => None,
        };
        if let Some(chomp) = chomp {
            self.write_indicator(chomp, false, false, false);
        }
    }

    fn write_literal(&mut self, value: &str) {
        let mut breaks = true;
        self.write_indicator("|", true, false, false);
        self.write_block_scalar_hints(value);
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        for c in value.chars() {
            if is_break(c) {
                self.write_break(c);
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.put(c);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

/// `yaml_emitter_check_simple_key`: short single-line scalars and empty collections.
fn check_simple_key(node: &Node) -> bool {
    let length = match node {
        Node::Scalar(s) => {
            if analyze(&s.value).multiline {
                return false;
            }
            let tag_len = if !s.plain_implicit && !s.quoted_implicit {
                2 + s.tag.len()
            } else {
                0
            };
            tag_len + s.value.len()
        }
        Node::Seq { items, .. } if items.is_empty() => 0,
        Node::Map { pairs, .. } if pairs.is_empty() => 0,
        _ => return false,
    };
    length <= 128
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_flags_strings_that_read_back_as_other_types() {
        let cases = [
            ("yes", "bool"),
            ("Off", "bool"),
            ("123", "int"),
            ("0x1F", "int"),
            ("1_000", "int"),
            ("1:30", "int"),
            ("1.5", "float"),
            (".inf", "float"),
            ("1e5", "str"),
            ("", "null"),
            ("~", "null"),
            ("2024-01-02", "timestamp"),
            ("2024-1-2 3:04:05.5 +01:00", "timestamp"),
            ("<<", "merge"),
            ("=", "value"),
            ("hello", "str"),
            ("yes please", "str"),
        ];
        for (value, tag) in cases {
            assert_eq!(resolve(value), tag, "{value:?}");
        }
    }

    #[test]
    fn encodebytes_wraps_at_76_columns() {
        let encoded = encodebytes(&[0xff; 60]);
        let lines: Vec<&str> = encoded.lines().collect();
        assert_eq!(lines.iter().map(|l| l.len()).collect::<Vec<_>>(), [76, 4]);
        assert!(encoded.ends_with('\n'));
    }

    #[test]
    fn float_representation_always_carries_a_dot() {
        assert_eq!(represent_float(1e20), "1.0e+20");
        assert_eq!(represent_float(2.5), "2.5");
        assert_eq!(represent_float(f64::NEG_INFINITY), "-.inf");
    }
}
