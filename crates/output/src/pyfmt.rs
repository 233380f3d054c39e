//! Python 3.11's `str.format()` and `format(value, spec)`, for the templates the highstate
//! outputter fills: a `state_tabular` template from the config, and the terse templates
//! into which Salt splices a state's warnings before formatting (so a warning's braces are
//! format fields, as in Salt).
//!
//! Implemented: literal text with `{{`/`}}`, positional fields (numbered or automatic,
//! not mixed), `[index]` lookups into dicts, lists, strings and bytes, the `!s`, `!r`
//! and `!a` conversions, nested fields in a format spec (one level), and the whole
//! format-spec mini-language for `str`, `int`/`bool` and `float` (fill, alignment, sign,
//! `z`, `#`, `0`, width, `,`/`_` grouping, precision, every presentation type). Other
//! objects format as `str()` with an empty spec.
//!
//! Deviations, each where Python raises in practice or cannot be followed: keyword
//! fields always fail (Salt passes none); `.attribute` lookups fail (Python would print
//! a bound method's address or an attribute's value); a `datetime` with a non-empty
//! spec fails (Python calls `strftime`); only ASCII digits count as digits in field
//! names and specs; widths and precisions above [`MAX_WIDTH`] fail, so a template cannot
//! make Halite build a huge string. A failure is [`Raised`]; the outputter then does what
//! Salt does when formatting raises.

use crate::py::{float_repr, py_len, Py};

/// Python raised while formatting (any exception: the caller treats them alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raised;

type Res<T> = Result<T, Raised>;

/// Largest width or precision honoured.
pub(crate) const MAX_WIDTH: usize = 10_000;

/// `template.format(*args)`.
pub(crate) fn format(template: &str, args: &[Py]) -> Res<String> {
    let mut numbering = Numbering::Unset;
    render(template, args, &mut numbering, 2)
}

/// `format(value, spec)`.
pub(crate) fn format_value(value: &Py, spec: &str) -> Res<String> {
    let chars: Vec<char> = spec.chars().collect();
    match value {
        _ if chars.is_empty() => Ok(value.to_str()),
        Py::Str(s) => format_str(s, &parse_spec(&chars, 's', '<')?),
        Py::Int(i) => format_int(*i, &parse_spec(&chars, 'd', '>')?),
        Py::Bool(b) => format_int(i128::from(*b), &parse_spec(&chars, 'd', '>')?),
        Py::Float(f) => format_float(*f, &parse_spec(&chars, '\0', '>')?),
        _ => Err(Raised),
    }
}

/// `f"{value:.{precision}f}"` for a float.
pub(crate) fn fixed(value: f64, precision: usize) -> String {
    let spec = Spec {
        precision: Some(precision),
        ty: 'f',
        ..Spec::new('\0', '>')
    };
    format_float(value, &spec).unwrap_or_default()
}

/// Automatic or manual field numbering, which one template cannot mix.
enum Numbering {
    Unset,
    Auto(usize),
    Manual,
}

fn render(template: &str, args: &[Py], numbering: &mut Numbering, depth: u32) -> Res<String> {
    if depth == 0 {
        // "Max string recursion exceeded".
        return Err(Raised);
    }
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        if c != '{' && c != '}' {
            out.push(c);
            continue;
        }
        if chars.get(i) == Some(&c) {
            out.push(c);
            i += 1;
            continue;
        }
        if c == '}' || i >= chars.len() {
            // A single '}', or a '{' ending the template.
            return Err(Raised);
        }
        let field = parse_field(&chars, &mut i)?;
        let value = resolve(&field.name, args, numbering)?;
        let value = match field.conversion {
            None => value,
            Some('s') => Py::Str(value.to_str()),
            Some('r') => Py::Str(value.repr()),
            Some('a') => Py::Str(ascii(&value.repr())),
            Some(_) => return Err(Raised),
        };
        let spec: String = field.spec.iter().collect();
        let spec = if field.spec_has_fields {
            render(&spec, args, numbering, depth - 1)?
        } else {
            spec
        };
        out.push_str(&format_value(&value, &spec)?);
    }
    Ok(out)
}

struct Field {
    name: Vec<char>,
    conversion: Option<char>,
    spec: Vec<char>,
    spec_has_fields: bool,
}

/// CPython's `parse_field`: from just after the `{` to just after the matching `}`.
fn parse_field(chars: &[char], i: &mut usize) -> Res<Field> {
    let start = *i;
    let mut end_char = None;
    while let Some(&c) = chars.get(*i) {
        *i += 1;
        match c {
            '{' => return Err(Raised),
            '[' => {
                while chars.get(*i).is_some_and(|&c| c != ']') {
                    *i += 1;
                }
            }
            '}' | ':' | '!' => {
                end_char = Some(c);
                break;
            }
            _ => {}
        }
    }
    let name_end = if end_char.is_some() { *i - 1 } else { *i };
    let name = chars.get(start..name_end).unwrap_or_default().to_vec();
    let mut field = Field {
        name,
        conversion: None,
        spec: Vec::new(),
        spec_has_fields: false,
    };
    match end_char {
        Some('}') => return Ok(field),
        Some('!') => {
            let Some(&conv) = chars.get(*i) else {
                return Err(Raised);
            };
            *i += 1;
            field.conversion = Some(conv);
            if let Some(&c) = chars.get(*i) {
                *i += 1;
                if c == '}' {
                    return Ok(field);
                }
                if c != ':' {
                    return Err(Raised);
                }
            }
        }
        Some(_) => {}
        None => return Err(Raised),
    }
    let spec_start = *i;
    let mut count = 1;
    while let Some(&c) = chars.get(*i) {
        *i += 1;
        match c {
            '{' => {
                field.spec_has_fields = true;
                count += 1;
            }
            '}' => {
                count -= 1;
                if count == 0 {
                    field.spec = chars.get(spec_start..*i - 1).unwrap_or_default().to_vec();
                    return Ok(field);
                }
            }
            _ => {}
        }
    }
    Err(Raised)
}

/// CPython's `get_integer`: `Some` when every character is a digit, `None` otherwise
/// (and for the empty string); too many digits raise.
fn integer(chars: &[char]) -> Res<Option<usize>> {
    if chars.is_empty() || !chars.iter().all(char::is_ascii_digit) {
        return Ok(None);
    }
    let mut n: usize = 0;
    for c in chars {
        let digit = c.to_digit(10).map_or(0, |d| d as usize);
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(digit))
            .ok_or(Raised)?;
    }
    Ok(Some(n))
}

/// Looks the field's object up: the argument, then each `[key]`.
fn resolve(name: &[char], args: &[Py], numbering: &mut Numbering) -> Res<Py> {
    let first_len = name
        .iter()
        .position(|&c| c == '.' || c == '[')
        .unwrap_or(name.len());
    let (first, mut rest) = name.split_at(first_len);
    let index = integer(first)?;
    let auto = first.is_empty();
    let index = match (index, auto) {
        (None, false) => return Err(Raised), // a keyword field: Salt passes no keywords
        (Some(n), _) => {
            if matches!(numbering, Numbering::Auto(_)) {
                return Err(Raised);
            }
            *numbering = Numbering::Manual;
            n
        }
        (None, true) => match numbering {
            Numbering::Manual => return Err(Raised),
            Numbering::Unset => {
                *numbering = Numbering::Auto(1);
                0
            }
            Numbering::Auto(next) => {
                let n = *next;
                *next += 1;
                n
            }
        },
    };
    let mut value = args.get(index).cloned().ok_or(Raised)?;
    while let Some((&c, tail)) = rest.split_first() {
        if c != '[' {
            // `.attribute` (see the module notes), or text after `]`.
            return Err(Raised);
        }
        let close = tail.iter().position(|&c| c == ']').ok_or(Raised)?;
        let (key, after) = tail.split_at(close);
        if key.is_empty() {
            return Err(Raised);
        }
        value = getitem(&value, key)?;
        rest = after.get(1..).unwrap_or_default();
    }
    Ok(value)
}

/// `obj[key]`, the key an integer when it is all digits and a string otherwise.
fn getitem(obj: &Py, key: &[char]) -> Res<Py> {
    let index = integer(key)?;
    match (obj, index) {
        (Py::Dict(items), Some(n)) => lookup(items, &Py::Int(n as i128)),
        (Py::Dict(items), None) => lookup(items, &Py::Str(key.iter().collect())),
        (Py::List(items), Some(n)) => items.get(n).cloned().ok_or(Raised),
        (Py::Str(s), Some(n)) => s
            .chars()
            .nth(n)
            .map(|c| Py::Str(c.to_string()))
            .ok_or(Raised),
        (Py::Bytes(b), Some(n)) => b.get(n).map(|&b| Py::Int(i128::from(b))).ok_or(Raised),
        _ => Err(Raised),
    }
}

fn lookup(items: &[(Py, Py)], key: &Py) -> Res<Py> {
    items
        .iter()
        .find(|(k, _)| k.same_key(key))
        .map(|(_, v)| v.clone())
        .ok_or(Raised)
}

/// `ascii()` of a repr: non-ASCII characters escaped.
fn ascii(repr: &str) -> String {
    let mut out = String::with_capacity(repr.len());
    for c in repr.chars() {
        let cp = u32::from(c);
        match cp {
            0..=0x7f => out.push(c),
            0x80..=0xff => out.push_str(&format!("\\x{cp:02x}")),
            0x100..=0xffff => out.push_str(&format!("\\u{cp:04x}")),
            _ => out.push_str(&format!("\\U{cp:08x}")),
        }
    }
    out
}

/// A parsed format spec (`parse_internal_render_format_spec`).
#[derive(Debug, Clone)]
struct Spec {
    fill: char,
    align: char,
    sign: Option<char>,
    no_neg_0: bool,
    alternate: bool,
    width: Option<usize>,
    grouping: Option<char>,
    precision: Option<usize>,
    ty: char,
}

impl Spec {
    fn new(default_type: char, default_align: char) -> Spec {
        Spec {
            fill: ' ',
            align: default_align,
            sign: None,
            no_neg_0: false,
            alternate: false,
            width: None,
            grouping: None,
            precision: None,
            ty: default_type,
        }
    }
}

fn is_align(c: char) -> bool {
    matches!(c, '<' | '>' | '=' | '^')
}

fn parse_spec(spec: &[char], default_type: char, default_align: char) -> Res<Spec> {
    let mut s = Spec::new(default_type, default_align);
    let mut pos = 0;
    let at = |pos: usize| spec.get(pos).copied();
    let mut fill_given = false;
    let mut align_given = false;
    if let (Some(fill), Some(align)) = (at(0), at(1).filter(|&c| is_align(c))) {
        s.fill = fill;
        s.align = align;
        fill_given = true;
        align_given = true;
        pos = 2;
    } else if let Some(align) = at(0).filter(|&c| is_align(c)) {
        s.align = align;
        align_given = true;
        pos = 1;
    }
    if let Some(sign) = at(pos).filter(|&c| matches!(c, '+' | '-' | ' ')) {
        s.sign = Some(sign);
        pos += 1;
    }
    if at(pos) == Some('z') {
        s.no_neg_0 = true;
        pos += 1;
    }
    if at(pos) == Some('#') {
        s.alternate = true;
        pos += 1;
    }
    if !fill_given && at(pos) == Some('0') {
        s.fill = '0';
        if !align_given && default_align == '>' {
            s.align = '=';
        }
        pos += 1;
    }
    let digits = |pos: &mut usize| -> Res<Option<usize>> {
        let start = *pos;
        while spec.get(*pos).is_some_and(char::is_ascii_digit) {
            *pos += 1;
        }
        match integer(spec.get(start..*pos).unwrap_or_default())? {
            Some(n) if n > MAX_WIDTH => Err(Raised),
            other => Ok(other),
        }
    };
    s.width = digits(&mut pos)?;
    if at(pos) == Some(',') {
        s.grouping = Some(',');
        pos += 1;
    }
    if at(pos) == Some('_') {
        if s.grouping.is_some() {
            return Err(Raised);
        }
        s.grouping = Some('_');
        pos += 1;
    }
    if at(pos) == Some(',') && s.grouping == Some('_') {
        return Err(Raised);
    }
    if at(pos) == Some('.') {
        pos += 1;
        s.precision = Some(digits(&mut pos)?.ok_or(Raised)?);
    }
    match spec.len().saturating_sub(pos) {
        0 => {}
        1 => s.ty = at(pos).ok_or(Raised)?,
        _ => return Err(Raised),
    }
    if let Some(sep) = s.grouping {
        match s.ty {
            'd' | 'e' | 'f' | 'g' | 'E' | 'G' | '%' | 'F' | '\0' => {}
            'b' | 'o' | 'x' | 'X' if sep == '_' => {}
            _ => return Err(Raised),
        }
    }
    Ok(s)
}

/// Pads `body` (already laid out) to the width: `<`, `>` or `^`.
fn pad(body: &str, spec: &Spec) -> String {
    let len = py_len(body);
    let total = spec.width.unwrap_or(0).max(len);
    let left = match spec.align {
        '>' => total - len,
        '^' => (total - len) / 2,
        _ => 0,
    };
    let right = total - len - left;
    let fill = |n: usize| spec.fill.to_string().repeat(n);
    format!("{}{body}{}", fill(left), fill(right))
}

fn format_str(s: &str, spec: &Spec) -> Res<String> {
    if spec.ty != 's' || spec.sign.is_some() || spec.no_neg_0 || spec.alternate {
        return Err(Raised);
    }
    if spec.align == '=' {
        return Err(Raised);
    }
    let body: String = match spec.precision {
        Some(p) => s.chars().take(p).collect(),
        None => s.to_owned(),
    };
    Ok(pad(&body, spec))
}

fn format_int(i: i128, spec: &Spec) -> Res<String> {
    let base = match spec.ty {
        'b' => 2,
        'o' => 8,
        'x' | 'X' => 16,
        'd' | 'n' | 'c' => 10,
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | '%' => return format_float(i as f64, spec),
        _ => return Err(Raised),
    };
    if spec.precision.is_some() || spec.no_neg_0 {
        return Err(Raised);
    }
    if spec.ty == 'c' {
        if spec.sign.is_some() || spec.alternate {
            return Err(Raised);
        }
        let c = u32::try_from(i)
            .ok()
            .and_then(char::from_u32)
            .ok_or(Raised)?;
        // CPython lays the character out as "remainder" text: no digits to group.
        return Ok(layout(false, "", "", false, &c.to_string(), spec));
    }
    let magnitude = i.unsigned_abs();
    let digits = match base {
        2 => format!("{magnitude:b}"),
        8 => format!("{magnitude:o}"),
        16 if spec.ty == 'X' => format!("{magnitude:X}"),
        16 => format!("{magnitude:x}"),
        _ => magnitude.to_string(),
    };
    let prefix = match (spec.alternate, spec.ty) {
        (true, 'b') => "0b",
        (true, 'o') => "0o",
        (true, 'x') => "0x",
        (true, 'X') => "0X",
        _ => "",
    };
    Ok(layout(i < 0, prefix, &digits, false, "", spec))
}

/// CPython's `calc_number_widths` and `fill_number`: sign, prefix, padding, grouped
/// digits, decimal point and the rest.
fn layout(
    negative: bool,
    prefix: &str,
    digits: &str,
    has_decimal: bool,
    remainder: &str,
    spec: &Spec,
) -> String {
    let sign = match (spec.sign, negative) {
        (_, true) => "-",
        (Some('+'), false) => "+",
        (Some(' '), false) => " ",
        _ => "",
    };
    let width = spec.width.map_or(-1, |w| w as i64);
    let non_digits =
        (sign.len() + prefix.len() + usize::from(has_decimal)) as i64 + py_len(remainder) as i64;
    let min_width = if spec.fill == '0' && spec.align == '=' {
        width - non_digits
    } else {
        0
    };
    let group_size = match (spec.grouping, spec.ty) {
        (None, _) => None,
        (Some('_'), 'b' | 'o' | 'x' | 'X') => Some(('_', 4)),
        (Some(sep), _) => Some((sep, 3)),
    };
    let grouped = if digits.is_empty() {
        String::new()
    } else {
        group(digits, min_width, group_size)
    };
    let padding = width - (non_digits + py_len(&grouped) as i64);
    let padding = usize::try_from(padding).unwrap_or(0);
    let (left, middle, right) = match spec.align {
        '<' => (0, 0, padding),
        '^' => (padding / 2, 0, padding - padding / 2),
        '=' => (0, padding, 0),
        _ => (padding, 0, 0),
    };
    let fill = |n: usize| spec.fill.to_string().repeat(n);
    let decimal = if has_decimal { "." } else { "" };
    format!(
        "{}{sign}{prefix}{}{grouped}{decimal}{remainder}{}",
        fill(left),
        fill(middle),
        fill(right)
    )
}

/// `_PyUnicode_InsertThousandsGrouping`: the digits with separators every `size` digits
/// from the right, padded with zeros (and separators) up to `min_width`.
fn group(digits: &str, min_width: i64, sep: Option<(char, usize)>) -> String {
    let digits: Vec<char> = digits.chars().collect();
    let mut remaining = digits.len() as i64;
    let mut min_width = min_width;
    let mut end = digits.len();
    // Pieces from the right: each is zeros, digits, then the separator after them.
    let mut pieces: Vec<String> = Vec::new();
    let mut piece = |len: i64, remaining: i64, use_sep: bool| {
        let zeros = (len - remaining).max(0) as usize;
        let n_chars = remaining.min(len).max(0) as usize;
        let start = end.saturating_sub(n_chars);
        let mut text: String = "0".repeat(zeros);
        text.extend(digits.get(start..end).unwrap_or_default());
        if use_sep {
            if let Some((c, _)) = sep {
                text.push(c);
            }
        }
        end = start;
        pieces.push(text);
        n_chars as i64
    };
    match sep {
        Some((_, size)) => {
            let size = size as i64;
            let mut use_sep = false;
            loop {
                let len = size.min(remaining.max(min_width).max(1));
                remaining -= piece(len, remaining, use_sep);
                use_sep = true;
                min_width -= len;
                if remaining <= 0 && min_width <= 0 {
                    break;
                }
                min_width -= 1;
            }
        }
        None => {
            let len = remaining.max(min_width).max(1);
            piece(len, remaining, false);
        }
    }
    pieces.iter().rev().map(String::as_str).collect()
}

fn format_float(value: f64, spec: &Spec) -> Res<String> {
    if !matches!(
        spec.ty,
        '\0' | 'e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'n' | '%'
    ) {
        return Err(Raised);
    }
    let upper = matches!(spec.ty, 'E' | 'F' | 'G');
    let mut code = spec.ty.to_ascii_lowercase();
    let mut add_dot_0 = false;
    let mut default_precision = 6;
    if code == '\0' {
        add_dot_0 = true;
        code = 'r';
        default_precision = 0;
    }
    if code == 'n' {
        code = 'g';
    }
    let mut value = value;
    let percent = code == '%';
    if percent {
        code = 'f';
        value *= 100.0;
    }
    let precision = match spec.precision {
        None => default_precision,
        Some(p) => {
            if code == 'r' {
                code = 'g';
            }
            p
        }
    };
    let (negative, mut body) = if value.is_nan() {
        (false, "nan".to_owned())
    } else if value.is_infinite() {
        (value < 0.0, "inf".to_owned())
    } else {
        let body = float_body(value.abs(), code, precision, spec.alternate, add_dot_0);
        let mantissa = body.split('e').next().unwrap_or_default();
        let zero = !mantissa.chars().any(|c| c.is_ascii_digit() && c != '0');
        (value.is_sign_negative() && !(spec.no_neg_0 && zero), body)
    };
    if upper {
        body = body.to_ascii_uppercase();
    }
    if percent {
        body.push('%');
    }
    let digits_end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    let (digits, rest) = body.split_at(digits_end);
    let (has_decimal, remainder) = match rest.strip_prefix('.') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    Ok(layout(negative, "", digits, has_decimal, remainder, spec))
}

/// `PyOS_double_to_string` of a finite, non-negative value, without the sign.
fn float_body(value: f64, code: char, precision: usize, alt: bool, add_dot_0: bool) -> String {
    match code {
        'f' => {
            let mut s = format!("{value:.precision$}");
            if alt && precision == 0 {
                s.push('.');
            }
            s
        }
        'e' => {
            let s = format!("{value:.precision$e}");
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let exp: i64 = exp.parse().unwrap_or(0);
            let dot = if alt && !mantissa.contains('.') {
                "."
            } else {
                ""
            };
            format!("{mantissa}{dot}e{exp:+03}")
        }
        'g' => {
            let p = precision.max(1);
            let s = format!("{value:.prec$e}", prec = p - 1);
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let exp: i64 = exp.parse().unwrap_or(0);
            let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
            let digits = digits.trim_end_matches('0');
            let digits = if digits.is_empty() { "0" } else { digits };
            let decpt = exp + 1;
            let limit = if add_dot_0 { p as i64 - 1 } else { p as i64 };
            let use_exp = decpt <= -4 || decpt > limit;
            let vdigits_end = if alt { p as i64 } else { digits.len() as i64 };
            build_float(digits, decpt, use_exp, vdigits_end, alt, add_dot_0)
        }
        _ => {
            // 'r': repr, where `#` keeps a lone digit's point before the exponent.
            let s = float_repr(value);
            match s.split_once('e') {
                Some((mantissa, exp)) if alt && !mantissa.contains('.') => {
                    format!("{mantissa}.e{exp}")
                }
                _ => s,
            }
        }
    }
}

/// The tail of CPython's `format_float_short`: `digits` (no trailing zeros) with the
/// decimal point after `decpt` digits, padded with zeros up to `vdigits_end`.
fn build_float(
    digits: &str,
    decpt: i64,
    use_exp: bool,
    vdigits_end: i64,
    alt: bool,
    add_dot_0: bool,
) -> String {
    let digits_len = digits.len() as i64;
    let (decpt, exp) = if use_exp { (1, decpt - 1) } else { (decpt, 0) };
    let vdigits_start = if decpt <= 0 { decpt - 1 } else { 0 };
    let vdigits_end = if !use_exp && add_dot_0 {
        vdigits_end.max(decpt + 1)
    } else {
        vdigits_end.max(decpt)
    };
    let zeros = |n: i64| "0".repeat(usize::try_from(n).unwrap_or(0));
    let mut s = String::new();
    if decpt <= 0 {
        s.push_str(&zeros(decpt - vdigits_start));
        s.push('.');
        s.push_str(&zeros(-decpt));
    } else {
        s.push_str(&zeros(-vdigits_start));
    }
    if 0 < decpt && decpt <= digits_len {
        let (int, frac) = digits.split_at(decpt as usize);
        s.push_str(int);
        s.push('.');
        s.push_str(frac);
    } else {
        s.push_str(digits);
    }
    if digits_len < decpt {
        s.push_str(&zeros(decpt - digits_len));
        s.push('.');
        s.push_str(&zeros(vdigits_end - decpt));
    } else {
        s.push_str(&zeros(vdigits_end - digits_len));
    }
    if s.ends_with('.') && !alt {
        s.pop();
    }
    if use_exp {
        s.push_str(&format!("e{exp:+03}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(template: &str, args: &[Py]) -> Option<String> {
        format(template, args).ok()
    }

    fn s(text: &str) -> Py {
        Py::Str(text.to_owned())
    }

    #[test]
    fn fields_conversions_and_escapes_follow_python() {
        let ret = Py::Dict(vec![
            (s("duration"), Py::Float(1.5)),
            (Py::Int(3), s("three")),
            (s("list"), Py::List(vec![s("a"), Py::None])),
        ]);
        let args = [s("c"), s("na\u{e9}me"), ret];
        assert_eq!(fmt("{{{0}}}", &args).as_deref(), Some("{c}"));
        assert_eq!(fmt("{}-{}", &args).as_deref(), Some("c-na\u{e9}me"));
        assert_eq!(
            fmt("{1!r} {1!a} {2[duration]!s:>7}", &args).as_deref(),
            Some("'na\u{e9}me' 'na\\xe9me'     1.5")
        );
        assert_eq!(
            fmt("{2[3]} {2[list][1]}", &args).as_deref(),
            Some("three None")
        );
        // The nested field formats to "", leaving the spec ">".
        assert_eq!(fmt("{0:>{2[3]!s:.0}}", &args).as_deref(), Some("c"));
        assert_eq!(
            fmt("{1:>{0[0]}}", &[s("5"), s("x")]).as_deref(),
            Some("    x")
        );
        for bad in [
            "{",
            "}",
            "{0",
            "{0!}",
            "{0!x}",
            "{x}",
            "{9}",
            "{0.upper}",
            "{}{0}",
            "{0}{}",
            "{2[missing]}",
            "{2[list][5]}",
            "{0[",
            "{2]}",
            "{0:{1:{0}}}",
        ] {
            assert_eq!(fmt(bad, &args), None, "{bad}");
        }
    }

    #[test]
    fn string_specs_pad_truncate_and_refuse_numeric_options() {
        let cases = [
            ("<5", "ab   "),
            (">5", "   ab"),
            ("^5", " ab  "),
            ("*^6", "**ab**"),
            ("05", "ab000"),
            (".1", "a"),
            ("7.1", "a      "),
            ("s", "ab"),
        ];
        for (spec, want) in cases {
            assert_eq!(
                format_value(&s("ab"), spec).ok().as_deref(),
                Some(want),
                "{spec}"
            );
        }
        for bad in ["+5", "=5", "#5", ",", "d", "5x", ".", "z"] {
            assert_eq!(format_value(&s("ab"), bad), Err(Raised), "{bad}");
        }
    }

    #[test]
    fn numbers_format_like_python() {
        let int_cases: [(i128, &str, &str); 12] = [
            (1234567, ",", "1,234,567"),
            (1234, "010,", "00,001,234"),
            (1234, "09,", "0,001,234"),
            (-42, "=+8", "-     42"),
            (42, "+08", "+0000042"),
            (255, "#x", "0xff"),
            (255, "#012_b", "0b0_1111_1111"),
            (65, "c", "A"),
            (5, ".2f", "5.00"),
            (7, "^7", "   7   "),
            (1, "%", "100.000000%"),
            (-3, " d", "-3"),
        ];
        for (value, spec, want) in int_cases {
            assert_eq!(
                format_value(&Py::Int(value), spec).ok().as_deref(),
                Some(want),
                "{value} {spec}"
            );
        }
        assert_eq!(
            format_value(&Py::Bool(true), "").ok().as_deref(),
            Some("True")
        );
        assert_eq!(
            format_value(&Py::Bool(true), ">3").ok().as_deref(),
            Some("  1")
        );
        let float_cases: [(f64, &str, &str); 16] = [
            (1.5, ">7", "    1.5"),
            (100.0, ".3", "1e+02"),
            (10.0, ".3", "10.0"),
            (0.0001234, "g", "0.0001234"),
            (0.00001234, "g", "1.234e-05"),
            (1.0, "#g", "1.00000"),
            (123456.789, ",.2f", "123,456.79"),
            (1e16, "#", "1.e+16"),
            (f64::INFINITY, "010", "0000000inf"),
            (f64::NAN, "+F", "+NAN"),
            (-0.0001, "z.2f", "0.00"),
            (-0.0, "", "-0.0"),
            (2.5, ".0f", "2"),
            (0.125, ".2%", "12.50%"),
            (1234.5, "E", "1.234500E+03"),
            (9.9996, ".4g", "10"),
        ];
        for (value, spec, want) in float_cases {
            assert_eq!(
                format_value(&Py::Float(value), spec).ok().as_deref(),
                Some(want),
                "{value} {spec}"
            );
        }
        assert_eq!(fixed(0.0, 3), "0.000");
        assert_eq!(fixed(f64::NAN, 3), "nan");
        assert_eq!(format_value(&Py::Int(1), ".2"), Err(Raised));
        assert_eq!(format_value(&Py::None, ">3"), Err(Raised));
        assert_eq!(format_value(&Py::None, "").ok().as_deref(), Some("None"));
        assert_eq!(format_value(&Py::Int(1), "99999999"), Err(Raised));
    }
}
