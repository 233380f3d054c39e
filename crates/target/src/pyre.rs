//! Python `re` compatibility on top of `fancy-regex`.
//!
//! Salt evaluates regular expressions with Python's `re` module: `E@`/`-E` minion-id
//! targets, `P@`/`J@` grain and pillar targets, and (later in Halite) the `peer`,
//! `publisher_acl` and `external_auth` evaluators. The patterns come from configuration
//! files, the command line and the network, so this module has two jobs:
//!
//! 1. **Speak Python's dialect.** [`translate`] parses a pattern with the rules of CPython
//!    3.11's `re._parser` and writes an equivalent `fancy-regex` pattern in which every
//!    construct is spelled explicitly: `\Z` becomes `\z`, a bare `$` becomes "end, or before
//!    a final newline", a `{` that is not a quantifier becomes a literal, `(?P<name>…)` and
//!    `(?P=name)` become numbered groups and back-references, verbose-mode whitespace and
//!    comments are dropped, octal and `\x`/`\u`/`\U` escapes become code points, and so on.
//!    Patterns that Python rejects are rejected here with Python's message
//!    ([`Error::InvalidRegex`]).
//! 2. **Never hang.** Every compiled pattern runs with a backtracking limit
//!    ([`BACKTRACK_LIMIT`]) and bounded compiled sizes. A catastrophic pattern fails with
//!    [`Error::BacktrackLimit`] instead of spinning; Python would spin.
//!
//! The three entry points mirror Python: [`Anchor::Match`] is `re.match` (anchored at the
//! start only), [`Anchor::FullMatch`] is `re.fullmatch`, [`Anchor::Search`] is `re.search`.
//! [`RegexCache`] keeps compiled patterns in a small LRU owned by the caller, like Python's
//! internal `re` cache; there is no global state.
//!
//! Known differences from Python (each is narrow, and each is documented where it lives):
//! - `\w` is `[\p{L}\p{N}_]` (Python: `str.isalnum()` or `_`, which is the same up to a few
//!   numeric ideographs); `\b`/`\B` use the engine's Unicode word definition, which also
//!   counts combining marks as word characters.
//! - Case-insensitive matching uses Unicode simple case folding even under the `a` (ASCII)
//!   flag, where Python folds ASCII letters only.
//! - `\N{NAME}` escapes, the `t` flag, and escapes naming surrogate code points are refused
//!   with [`Error::UnsupportedRegex`].
//! - A quantified look-around (`(?=a)*`, legal but useless in Python) is refused by the
//!   engine, and look-behind width rules are the engine's (it is more permissive).
//! - Patterns nested deeper than [`MAX_NESTING`] groups are refused (CPython would hit its
//!   recursion limit somewhat later).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::Error;

/// Backtracking steps allowed for one match attempt before [`Error::BacktrackLimit`].
///
/// Patterns without back-references or look-around run on the linear-time engine and never
/// count steps; the limit only guards the backtracking VM.
pub const BACKTRACK_LIMIT: usize = 1_000_000;

/// Maximum compiled size of the linear-time parts of a pattern, in bytes.
///
/// Kept well below the engine default (10 MiB) because patterns arrive from the network and
/// a [`RegexCache`] may hold many of them.
const DELEGATE_SIZE_LIMIT: usize = 1 << 20;

/// Maximum lazy-DFA cache per compiled pattern, in bytes.
const DELEGATE_DFA_SIZE_LIMIT: usize = 1 << 21;

/// Deepest group nesting [`translate`] accepts; deeper patterns are refused so that the
/// recursive parser cannot exhaust the stack on hostile input.
pub const MAX_NESTING: usize = 200;

/// Python's `MAXREPEAT` on 64-bit builds; quantifier bounds must stay below it.
const MAXREPEAT: u64 = 4_294_967_295;

/// How a pattern is anchored, mirroring Python's three matching functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    /// `re.match`: the match must start at the beginning of the text; it may end anywhere.
    Match,
    /// `re.fullmatch`: the match must cover the whole text.
    FullMatch,
    /// `re.search`: the match may start anywhere.
    Search,
}

/// A compiled Python pattern with its anchoring.
#[derive(Debug)]
pub struct PyRegex {
    pattern: String,
    regex: fancy_regex::Regex,
}

impl PyRegex {
    /// Compiles a Python-syntax `pattern` for the given anchoring.
    ///
    /// Errors: [`Error::InvalidRegex`] when Python would raise `re.error`,
    /// [`Error::UnsupportedRegex`] for the few valid constructs this crate does not
    /// translate, [`Error::RegexCompile`] when the engine refuses the translation (size
    /// limits, quantified look-around).
    pub fn new(pattern: &str, anchor: Anchor) -> Result<Self, Error> {
        // Only a match that must reach the end of the text cares where a trailing `$` stops.
        let body = translate_with(pattern, anchor != Anchor::FullMatch)?;
        let anchored = match anchor {
            Anchor::Match => format!(r"\A(?:{body})"),
            Anchor::FullMatch => format!(r"\A(?:{body})\z"),
            Anchor::Search => body,
        };
        let regex = fancy_regex::RegexBuilder::new(&anchored)
            .backtrack_limit(BACKTRACK_LIMIT)
            .delegate_size_limit(DELEGATE_SIZE_LIMIT)
            .delegate_dfa_size_limit(DELEGATE_DFA_SIZE_LIMIT)
            .build()
            .map_err(|e| Error::RegexCompile {
                pattern: pattern.to_owned(),
                message: e.to_string(),
            })?;
        Ok(Self {
            pattern: pattern.to_owned(),
            regex,
        })
    }

    /// The Python pattern this was compiled from.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern matches `text` (with this regex's anchoring).
    ///
    /// Errors: [`Error::BacktrackLimit`] when the attempt needs more than
    /// [`BACKTRACK_LIMIT`] steps, [`Error::RegexRuntime`] for the engine's other runtime
    /// failures.
    pub fn is_match(&self, text: &str) -> Result<bool, Error> {
        self.regex.is_match(text).map_err(|e| match e {
            fancy_regex::Error::RuntimeError(fancy_regex::RuntimeError::BacktrackLimitExceeded) => {
                Error::BacktrackLimit {
                    pattern: self.pattern.clone(),
                }
            }
            other => Error::RegexRuntime {
                pattern: self.pattern.clone(),
                message: other.to_string(),
            },
        })
    }
}

/// A bounded least-recently-used cache of compiled patterns.
///
/// Owned by the caller (the master keeps one per process, a minion one per matcher), shared
/// by reference: lookups take `&self` and lock an internal mutex for the map operation only,
/// never while matching. Failed compilations are cached too, so a bad pattern evaluated
/// against every minion is parsed once.
#[derive(Debug)]
pub struct RegexCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

type CacheEntry = Result<Arc<PyRegex>, Error>;

#[derive(Debug, Default)]
struct CacheInner {
    tick: u64,
    map: HashMap<(Anchor, String), (u64, CacheEntry)>,
}

impl Default for RegexCache {
    /// A cache of 64 patterns.
    fn default() -> Self {
        Self::new(64)
    }
}

impl RegexCache {
    /// A cache holding at most `capacity` compiled patterns (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner::default()),
        }
    }

    /// The compiled form of `pattern` with `anchor`, compiling it on a miss.
    pub fn get(&self, pattern: &str, anchor: Anchor) -> Result<Arc<PyRegex>, Error> {
        let key = (anchor, pattern.to_owned());
        {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.tick += 1;
            let tick = inner.tick;
            if let Some((used, entry)) = inner.map.get_mut(&key) {
                *used = tick;
                return entry.clone();
            }
        }
        let entry = PyRegex::new(pattern, anchor).map(Arc::new);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.map.len() >= self.capacity {
            if let Some(oldest) = inner
                .map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone())
            {
                inner.map.remove(&oldest);
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.map.insert(key, (tick, entry.clone()));
        entry
    }

    /// Python `bool(re.match(pattern, text))`.
    pub fn re_match(&self, pattern: &str, text: &str) -> Result<bool, Error> {
        self.get(pattern, Anchor::Match)?.is_match(text)
    }

    /// Python `bool(re.fullmatch(pattern, text))`.
    pub fn re_fullmatch(&self, pattern: &str, text: &str) -> Result<bool, Error> {
        self.get(pattern, Anchor::FullMatch)?.is_match(text)
    }

    /// Python `bool(re.search(pattern, text))`.
    pub fn re_search(&self, pattern: &str, text: &str) -> Result<bool, Error> {
        self.get(pattern, Anchor::Search)?.is_match(text)
    }
}

/// Translates a Python `re` pattern into an equivalent, unanchored `fancy-regex` pattern.
///
/// The output spells out every construct and never relies on engine defaults that differ
/// from Python's; group numbers are preserved (named groups become numbered ones).
pub fn translate(pattern: &str) -> Result<String, Error> {
    translate_with(pattern, false)
}

/// [`translate`], optionally letting a `$` that ends a top-level branch consume the final
/// newline (`\n?\z` instead of the look-ahead `(?=\n?\z)`). Whether a match exists does
/// not change, and without the look-ahead the engine can run the pattern in linear time.
fn translate_with(pattern: &str, consume_final_dollar: bool) -> Result<String, Error> {
    let mut parser = Parser {
        consume_final_dollar,
        tok: Tokenizer::new(pattern),
        pattern,
        global: Flags::default(),
        groups: 1,
        closed: vec![true],
        names: HashMap::new(),
        forward_refs: Vec::new(),
        depth: 0,
    };
    let (body, _) = parser.parse_sub(Flags::default(), 0)?;
    if parser.tok.next.is_some() {
        return Err(parser.error("unbalanced parenthesis"));
    }
    if let Some(&(group, pos)) = parser
        .forward_refs
        .iter()
        .find(|(group, _)| *group >= parser.groups)
    {
        return Err(Error::InvalidRegex {
            pattern: pattern.to_owned(),
            message: format!("invalid group reference {group}"),
            position: pos,
        });
    }
    if parser.global.unicode && parser.global.ascii {
        return Err(parser.error("ASCII and UNICODE flags are incompatible"));
    }
    if parser.global.ignorecase {
        Ok(format!("(?i){body}"))
    } else {
        Ok(body)
    }
}

/// The inline flags that change how a pattern is translated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flags {
    ignorecase: bool,
    multiline: bool,
    dotall: bool,
    verbose: bool,
    ascii: bool,
    unicode: bool,
}

impl Flags {
    fn set(&mut self, flag: char, on: bool) {
        match flag {
            'i' => self.ignorecase = on,
            'm' => self.multiline = on,
            's' => self.dotall = on,
            'x' => self.verbose = on,
            'a' => self.ascii = on,
            _ => self.unicode = on,
        }
    }
}

/// One token of Python's `re` tokenizer: a plain character or a backslash escape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Char(char),
    Escape(char),
}

/// Python's `re._parser.Tokenizer`: a backslash and the character after it form one token.
struct Tokenizer {
    chars: Vec<char>,
    index: usize,
    next: Option<Tok>,
    /// A trailing lone backslash, reported when it is reached.
    trailing_backslash: bool,
}

impl Tokenizer {
    fn new(pattern: &str) -> Self {
        let mut tok = Self {
            chars: pattern.chars().collect(),
            index: 0,
            next: None,
            trailing_backslash: false,
        };
        tok.advance();
        tok
    }

    fn advance(&mut self) {
        let Some(&c) = self.chars.get(self.index) else {
            self.next = None;
            return;
        };
        if c == '\\' {
            match self.chars.get(self.index + 1) {
                Some(&e) => {
                    self.next = Some(Tok::Escape(e));
                    self.index += 2;
                }
                None => {
                    self.next = None;
                    self.trailing_backslash = true;
                    self.index += 1;
                }
            }
        } else {
            self.next = Some(Tok::Char(c));
            self.index += 1;
        }
    }

    fn get(&mut self) -> Option<Tok> {
        let this = self.next;
        self.advance();
        this
    }

    /// Consumes the next token when it is the plain character `c`.
    fn eat(&mut self, c: char) -> bool {
        if self.next == Some(Tok::Char(c)) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn next_char(&self) -> Option<char> {
        match self.next {
            Some(Tok::Char(c)) => Some(c),
            _ => None,
        }
    }

    /// Up to `n` plain characters accepted by `accept`.
    fn get_while(&mut self, n: usize, accept: impl Fn(char) -> bool) -> String {
        let mut out = String::new();
        for _ in 0..n {
            match self.next_char() {
                Some(c) if accept(c) => {
                    out.push(c);
                    self.advance();
                }
                _ => break,
            }
        }
        out
    }

    /// Position of the next token, in characters.
    fn tell(&self) -> usize {
        match self.next {
            None => self.index,
            Some(Tok::Char(_)) => self.index - 1,
            Some(Tok::Escape(_)) => self.index - 2,
        }
    }

    fn seek(&mut self, index: usize) {
        self.index = index;
        self.advance();
    }
}

/// What kind of item a translated piece is; Python refuses to quantify some kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A zero-width position test (`^`, `$`, `\A`, `\Z`, `\b`, `\B`).
    At,
    /// An item that already carries a quantifier.
    Repeat,
    /// Anything else: literals, classes, groups, look-arounds, back-references.
    Other,
}

struct Item {
    text: String,
    kind: Kind,
    /// Whether the item can only ever match the empty string (assertions, look-arounds,
    /// groups of those). The engine refuses to quantify some of these, so quantifiers on
    /// them are rewritten.
    zero_width: bool,
}

impl Item {
    fn other(text: String) -> Self {
        Self {
            text,
            kind: Kind::Other,
            zero_width: false,
        }
    }

    fn at(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            kind: Kind::At,
            zero_width: true,
        }
    }

    /// A look-around or a group that matches only the empty string.
    fn empty_width(text: String) -> Self {
        Self {
            text,
            kind: Kind::Other,
            zero_width: true,
        }
    }
}

struct Parser<'p> {
    tok: Tokenizer,
    pattern: &'p str,
    global: Flags,
    /// Python's `state.groups`: one more than the number of groups opened so far.
    groups: usize,
    /// Whether group `n` has been closed (index 0 is the whole match).
    closed: Vec<bool>,
    names: HashMap<String, usize>,
    /// Conditional references to groups that may be defined later, with their position.
    forward_refs: Vec<(usize, usize)>,
    depth: usize,
    /// See [`translate_with`].
    consume_final_dollar: bool,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> Error {
        Error::InvalidRegex {
            pattern: self.pattern.to_owned(),
            message: message.into(),
            position: self.tok.tell(),
        }
    }

    fn unsupported(&self, feature: impl Into<String>) -> Error {
        Error::UnsupportedRegex {
            pattern: self.pattern.to_owned(),
            feature: feature.into(),
        }
    }

    fn end_of_pattern(&self) -> Error {
        if self.tok.trailing_backslash {
            self.error("bad escape (end of pattern)")
        } else {
            self.error("unexpected end of pattern")
        }
    }

    /// `_parse_sub`: an alternation `a|b|c`.
    ///
    /// Returns the translation and whether it can only match the empty string.
    fn parse_sub(&mut self, flags: Flags, nested: usize) -> Result<(String, bool), Error> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error("pattern too deeply nested"));
        }
        let mut branches: Vec<String> = Vec::new();
        let mut zero_width = true;
        loop {
            let first = nested == 0 && branches.is_empty();
            let branch_flags = if nested == 0 { self.global } else { flags };
            let mut items = self.parse_seq(branch_flags, nested + 1, first)?;
            if nested == 0 && self.consume_final_dollar {
                if let Some(last) = items.last_mut().filter(|i| i.text == DOLLAR) {
                    last.text = r"\n?\z".to_owned();
                }
            }
            zero_width &= items.iter().all(|i| i.zero_width);
            branches.push(items.into_iter().map(|i| i.text).collect());
            if !self.tok.eat('|') {
                break;
            }
        }
        self.depth -= 1;
        Ok((branches.join("|"), zero_width))
    }

    /// `_parse`: a sequence of items up to `|`, `)` or the end.
    fn parse_seq(
        &mut self,
        mut flags: Flags,
        nested: usize,
        first: bool,
    ) -> Result<Vec<Item>, Error> {
        let mut items: Vec<Item> = Vec::new();
        loop {
            let Some(this) = self.tok.next else {
                if self.tok.trailing_backslash {
                    return Err(self.error("bad escape (end of pattern)"));
                }
                break;
            };
            if this == Tok::Char('|') || this == Tok::Char(')') {
                break;
            }
            let here = self.tok.tell();
            self.tok.advance();
            if flags.verbose {
                if let Tok::Char(c) = this {
                    if matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c') {
                        continue;
                    }
                    if c == '#' {
                        while let Some(t) = self.tok.get() {
                            if t == Tok::Char('\n') {
                                break;
                            }
                        }
                        continue;
                    }
                }
            }
            match this {
                Tok::Escape(e) => items.push(self.escape(e, flags)?),
                Tok::Char('[') => items.push(Item::other(self.class(flags)?)),
                Tok::Char(c @ ('*' | '+' | '?' | '{')) => {
                    let (min, max) = match c {
                        '?' => (0, Some(1)),
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => {
                            if self.tok.next == Some(Tok::Char('}')) {
                                items.push(literal_item('{'));
                                continue;
                            }
                            match self.brace_quantifier()? {
                                Some(bounds) => bounds,
                                None => {
                                    items.push(literal_item('{'));
                                    self.tok.seek(here + 1);
                                    continue;
                                }
                            }
                        }
                    };
                    let Some(last) = items.last_mut() else {
                        return Err(self.error("nothing to repeat"));
                    };
                    match last.kind {
                        Kind::At => return Err(self.error("nothing to repeat")),
                        Kind::Repeat => return Err(self.error("multiple repeat")),
                        Kind::Other => {}
                    }
                    let lazy = self.tok.eat('?');
                    let possessive = !lazy && self.tok.eat('+');
                    last.text = if last.zero_width {
                        quantify_empty_width(&last.text, min, max, lazy, possessive)
                    } else {
                        let mut quant = match (min, max) {
                            (0, None) => "*".to_owned(),
                            (1, None) => "+".to_owned(),
                            (0, Some(1)) => "?".to_owned(),
                            (m, None) => format!("{{{m},}}"),
                            (m, Some(n)) if m == n => format!("{{{m}}}"),
                            (m, Some(n)) => format!("{{{m},{n}}}"),
                        };
                        if lazy {
                            quant.push('?');
                        } else if possessive {
                            quant.push('+');
                        }
                        format!("{}{quant}", last.text)
                    };
                    last.kind = Kind::Repeat;
                }
                Tok::Char('.') => items.push(Item::other(
                    if flags.dotall { "(?s:.)" } else { "." }.to_owned(),
                )),
                Tok::Char('^') => {
                    items.push(Item::at(if flags.multiline { "(?m:^)" } else { "^" }))
                }
                Tok::Char('$') => {
                    items.push(Item::at(if flags.multiline { "(?m:$)" } else { DOLLAR }))
                }
                Tok::Char('(') => {
                    if let Some(item) = self.group(&mut flags, nested, first && items.is_empty())? {
                        items.push(item);
                    }
                }
                Tok::Char(c) => items.push(literal_item(c)),
            }
        }
        Ok(items)
    }

    /// The body of `{m,n}` after the `{`; `None` when it is not a quantifier.
    fn brace_quantifier(&mut self) -> Result<Option<(u64, Option<u64>)>, Error> {
        let lo = self.tok.get_while(usize::MAX, |c| c.is_ascii_digit());
        let hi = if self.tok.eat(',') {
            Some(self.tok.get_while(usize::MAX, |c| c.is_ascii_digit()))
        } else {
            None
        };
        if !self.tok.eat('}') {
            return Ok(None);
        }
        let parse = |s: &str| -> Result<u64, Error> {
            match s.parse::<u64>() {
                Ok(n) if n < MAXREPEAT => Ok(n),
                _ => Err(self.error("the repetition number is too large")),
            }
        };
        let min = if lo.is_empty() { 0 } else { parse(&lo)? };
        let max = match hi {
            None => Some(min),
            Some(h) if h.is_empty() => None,
            Some(h) => Some(parse(&h)?),
        };
        if let Some(max) = max {
            if max < min {
                return Err(self.error("min repeat greater than max repeat"));
            }
        }
        Ok(Some((min, max)))
    }

    /// `_escape`: a backslash escape outside a class.
    fn escape(&mut self, e: char, flags: Flags) -> Result<Item, Error> {
        let at = Item::at;
        let other = Item::other;
        Ok(match e {
            'A' => at(r"\A"),
            'Z' => at(r"\z"),
            'b' if flags.ascii => at(ASCII_BOUNDARY),
            'B' if flags.ascii => at(ASCII_NON_BOUNDARY),
            'b' => at(r"\b"),
            // Python's `\B` never matches in an empty string.
            'B' => at(r"(?:\B(?!\A\z))"),
            'd' | 'D' | 's' | 'S' | 'w' | 'W' => other(category(e, flags.ascii, false)),
            '1'..='9' => {
                let mut digits = e.to_string();
                if let Some(d) = self.tok.next_char().filter(char::is_ascii_digit) {
                    self.tok.advance();
                    digits.push(d);
                    let third = self.tok.next_char().filter(|c| is_octal(*c));
                    if is_octal(e) && is_octal(d) {
                        if let Some(t) = third {
                            self.tok.advance();
                            digits.push(t);
                            return Ok(literal_item(self.octal(&digits)?));
                        }
                    }
                }
                let group: usize = digits.parse().unwrap_or(usize::MAX);
                if group < self.groups {
                    if !self.closed.get(group).copied().unwrap_or(false) {
                        return Err(self.error("cannot refer to an open group"));
                    }
                    other(format!(r"(?:\{group})"))
                } else {
                    return Err(self.error(format!("invalid group reference {group}")));
                }
            }
            '0' => {
                let rest = self.tok.get_while(2, is_octal);
                literal_item(self.octal(&format!("0{rest}"))?)
            }
            _ => literal_item(self.common_escape(e)?),
        })
    }

    /// The escapes shared by patterns and classes: `\a \f \n \r \t \v \\`, `\x`, `\u`,
    /// `\U`, `\N{…}` and escaped punctuation.
    fn common_escape(&mut self, e: char) -> Result<char, Error> {
        match e {
            'a' => Ok('\x07'),
            'f' => Ok('\x0c'),
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            't' => Ok('\t'),
            'v' => Ok('\x0b'),
            'x' => self.hex_escape('x', 2),
            'u' => self.hex_escape('u', 4),
            'U' => self.hex_escape('U', 8),
            'N' => {
                if !self.tok.eat('{') {
                    return Err(self.error("missing {"));
                }
                self.get_until('}', "character name")?;
                Err(self.unsupported(r"\N{...} named character escapes"))
            }
            c if c.is_ascii_alphanumeric() => Err(self.error(format!("bad escape \\{c}"))),
            c => Ok(c),
        }
    }

    fn hex_escape(&mut self, letter: char, width: usize) -> Result<char, Error> {
        let digits = self.tok.get_while(width, |c| c.is_ascii_hexdigit());
        if digits.len() != width {
            return Err(self.error(format!("incomplete escape \\{letter}{digits}")));
        }
        let value = u32::from_str_radix(&digits, 16)
            .map_err(|_| self.error(format!("bad escape \\{letter}{digits}")))?;
        self.code_point(value, || format!("\\{letter}{digits}"))
    }

    fn octal(&self, digits: &str) -> Result<char, Error> {
        let value = u32::from_str_radix(digits, 8).unwrap_or(u32::MAX);
        if value > 0o377 {
            return Err(self.error(format!(
                "octal escape value \\{digits} outside of range 0-0o377"
            )));
        }
        self.code_point(value, || format!("\\{digits}"))
    }

    fn code_point(&self, value: u32, spelled: impl Fn() -> String) -> Result<char, Error> {
        match char::from_u32(value) {
            Some(c) => Ok(c),
            None if (0xD800..=0xDFFF).contains(&value) => {
                Err(self.unsupported(format!("surrogate code point {}", spelled())))
            }
            None => Err(self.error(format!("bad escape {}", spelled()))),
        }
    }

    /// A character class, after its `[`.
    fn class(&mut self, flags: Flags) -> Result<String, Error> {
        let negate = self.tok.eat('^');
        let mut items: Vec<String> = Vec::new();
        loop {
            let Some(this) = self.tok.get() else {
                if self.tok.trailing_backslash {
                    return Err(self.error("bad escape (end of pattern)"));
                }
                return Err(self.error("unterminated character set"));
            };
            if this == Tok::Char(']') && !items.is_empty() {
                break;
            }
            let first = self.class_member(this, flags)?;
            if self.tok.eat('-') {
                let Some(that) = self.tok.get() else {
                    if self.tok.trailing_backslash {
                        return Err(self.error("bad escape (end of pattern)"));
                    }
                    return Err(self.error("unterminated character set"));
                };
                if that == Tok::Char(']') {
                    items.push(first.text());
                    items.push(literal('-'));
                    break;
                }
                let second = self.class_member(that, flags)?;
                match (first, second) {
                    (ClassMember::Char(lo), ClassMember::Char(hi)) if lo <= hi => {
                        items.push(format!("{}-{}", literal(lo), literal(hi)));
                    }
                    _ => {
                        return Err(self.error(format!(
                            "bad character range {}-{}",
                            tok_text(this),
                            tok_text(that)
                        )))
                    }
                }
            } else {
                items.push(first.text());
            }
        }
        let body: String = items.concat();
        Ok(if negate {
            format!("[^{body}]")
        } else {
            format!("[{body}]")
        })
    }

    fn class_member(&mut self, tok: Tok, flags: Flags) -> Result<ClassMember, Error> {
        match tok {
            Tok::Char(c) => Ok(ClassMember::Char(c)),
            Tok::Escape(e @ ('d' | 'D' | 's' | 'S' | 'w' | 'W')) => {
                Ok(ClassMember::Category(category(e, flags.ascii, true)))
            }
            Tok::Escape('b') => Ok(ClassMember::Char('\x08')),
            Tok::Escape(e @ '0'..='7') => {
                let rest = self.tok.get_while(2, is_octal);
                Ok(ClassMember::Char(self.octal(&format!("{e}{rest}"))?))
            }
            Tok::Escape(e @ ('8' | '9')) => Err(self.error(format!("bad escape \\{e}"))),
            Tok::Escape(e) => Ok(ClassMember::Char(self.common_escape(e)?)),
        }
    }

    /// A group, after its `(`. Returns `None` for items that vanish: comments and global
    /// flags.
    fn group(
        &mut self,
        flags: &mut Flags,
        nested: usize,
        at_start: bool,
    ) -> Result<Option<Item>, Error> {
        let mut capture = true;
        let mut atomic = false;
        let mut name: Option<String> = None;
        let mut inner_flags = *flags;
        if self.tok.eat('?') {
            let Some(t) = self.tok.get() else {
                return Err(self.end_of_pattern());
            };
            let Tok::Char(c) = t else {
                return Err(self.error(format!("unknown extension ?{}", tok_text(t))));
            };
            match c {
                'P' => {
                    if self.tok.eat('<') {
                        let n = self.get_until('>', "group name")?;
                        self.check_group_name(&n)?;
                        name = Some(n);
                    } else if self.tok.eat('=') {
                        let n = self.get_until(')', "group name")?;
                        self.check_group_name(&n)?;
                        let Some(&gid) = self.names.get(&n) else {
                            return Err(self.error(format!("unknown group name '{n}'")));
                        };
                        if !self.closed.get(gid).copied().unwrap_or(false) {
                            return Err(self.error("cannot refer to an open group"));
                        }
                        return Ok(Some(Item::other(format!(r"(?:\{gid})"))));
                    } else {
                        return match self.tok.get() {
                            None => Err(self.end_of_pattern()),
                            Some(t) => {
                                Err(self.error(format!("unknown extension ?P{}", tok_text(t))))
                            }
                        };
                    }
                }
                ':' => capture = false,
                '#' => {
                    loop {
                        match self.tok.get() {
                            None => {
                                return Err(self.error("missing ), unterminated comment"));
                            }
                            Some(Tok::Char(')')) => break,
                            Some(_) => {}
                        }
                    }
                    return Ok(None);
                }
                '=' | '!' | '<' => {
                    let mut kind = c;
                    let mut behind = false;
                    if c == '<' {
                        match self.tok.get() {
                            None => return Err(self.end_of_pattern()),
                            Some(Tok::Char(k @ ('=' | '!'))) => {
                                kind = k;
                                behind = true;
                            }
                            Some(t) => {
                                return Err(
                                    self.error(format!("unknown extension ?<{}", tok_text(t)))
                                )
                            }
                        }
                    }
                    let (body, _) = self.parse_sub(*flags, nested + 1)?;
                    if !self.tok.eat(')') {
                        return Err(self.error("missing ), unterminated subpattern"));
                    }
                    let open = match (behind, kind) {
                        (false, '=') => "(?=",
                        (false, _) => "(?!",
                        (true, '=') => "(?<=",
                        (true, _) => "(?<!",
                    };
                    return Ok(Some(Item::empty_width(format!("{open}{body})"))));
                }
                '(' => return self.conditional(*flags, nested).map(Some),
                '>' => {
                    capture = false;
                    atomic = true;
                }
                c if "aiLmsuxt-".contains(c) => match self.parse_flags(c)? {
                    ParsedFlags::Global(on) => {
                        if !at_start {
                            return Err(
                                self.error("global flags not at the start of the expression")
                            );
                        }
                        for f in on.chars() {
                            self.global.set(f, true);
                            flags.set(f, true);
                        }
                        return Ok(None);
                    }
                    ParsedFlags::Scoped(on, off) => {
                        for f in on.chars() {
                            inner_flags.set(f, true);
                        }
                        for f in off.chars() {
                            inner_flags.set(f, false);
                        }
                        capture = false;
                    }
                },
                c => return Err(self.error(format!("unknown extension ?{c}"))),
            }
        }
        let group = if capture {
            let gid = self.groups;
            if let Some(n) = name {
                if let Some(&old) = self.names.get(&n) {
                    return Err(self.error(format!(
                        "redefinition of group name '{n}' as group {gid}; was group {old}"
                    )));
                }
                self.names.insert(n, gid);
            }
            self.groups += 1;
            self.closed.push(false);
            Some(gid)
        } else {
            None
        };
        let (body, zero_width) = self.parse_sub(inner_flags, nested + 1)?;
        if !self.tok.eat(')') {
            return Err(self.error("missing ), unterminated subpattern"));
        }
        if let Some(gid) = group {
            if let Some(slot) = self.closed.get_mut(gid) {
                *slot = true;
            }
        }
        let text = if group.is_some() {
            format!("({body})")
        } else if atomic {
            format!("(?>{body})")
        } else if inner_flags.ignorecase != flags.ignorecase {
            if inner_flags.ignorecase {
                format!("(?i:{body})")
            } else {
                format!("(?-i:{body})")
            }
        } else {
            format!("(?:{body})")
        };
        Ok(Some(Item {
            text,
            kind: Kind::Other,
            zero_width,
        }))
    }

    /// `(?(id)yes|no)`, after `(?(`.
    fn conditional(&mut self, flags: Flags, nested: usize) -> Result<Item, Error> {
        let pos = self.tok.tell();
        let cond = self.get_until(')', "group name")?;
        let group = if is_identifier(&cond) {
            match self.names.get(&cond) {
                Some(&gid) => gid,
                None => return Err(self.error(format!("unknown group name '{cond}'"))),
            }
        } else {
            match parse_python_int(&cond) {
                Some(n) if n > 0 => match usize::try_from(n) {
                    Ok(n) => {
                        self.forward_refs.push((n, pos));
                        n
                    }
                    Err(_) => return Err(self.error(format!("invalid group reference {n}"))),
                },
                Some(0) => return Err(self.error("bad group number")),
                _ => return Err(self.error(format!("bad character in group name '{cond}'"))),
            }
        };
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error("pattern too deeply nested"));
        }
        let yes: String = self
            .parse_seq(flags, nested + 1, false)?
            .into_iter()
            .map(|i| i.text)
            .collect();
        let no = if self.tok.eat('|') {
            let no: String = self
                .parse_seq(flags, nested + 1, false)?
                .into_iter()
                .map(|i| i.text)
                .collect();
            if self.tok.next == Some(Tok::Char('|')) {
                return Err(self.error("conditional backref with more than two branches"));
            }
            Some(no)
        } else {
            None
        };
        self.depth -= 1;
        if !self.tok.eat(')') {
            return Err(self.error("missing ), unterminated subpattern"));
        }
        let text = match no {
            Some(no) => format!("(?({group})(?:{yes})|(?:{no}))"),
            None => format!("(?({group})(?:{yes}))"),
        };
        Ok(Item::other(text))
    }

    /// `_parse_flags`, with the first flag character already read.
    fn parse_flags(&mut self, first: char) -> Result<ParsedFlags, Error> {
        let mut on = String::new();
        let mut c = first;
        if c != '-' {
            loop {
                match c {
                    'L' => {
                        return Err(
                            self.error("bad inline flags: cannot use 'L' flag with a str pattern")
                        )
                    }
                    't' => return Err(self.unsupported("the TEMPLATE (t) flag")),
                    _ => {}
                }
                on.push(c);
                if on.contains('a') && on.contains('u') {
                    return Err(
                        self.error("bad inline flags: flags 'a', 'u' and 'L' are incompatible")
                    );
                }
                c = match self.tok.get() {
                    None => return Err(self.error("missing -, : or )")),
                    Some(Tok::Char(c)) => c,
                    Some(Tok::Escape(_)) => return Err(self.error("missing -, : or )")),
                };
                if matches!(c, ')' | '-' | ':') {
                    break;
                }
                if !"aiLmsuxt".contains(c) {
                    return Err(self.error(if c.is_alphabetic() {
                        "unknown flag"
                    } else {
                        "missing -, : or )"
                    }));
                }
            }
        }
        if c == ')' {
            return Ok(ParsedFlags::Global(on));
        }
        let mut off = String::new();
        if c == '-' {
            c = match self.tok.get() {
                None => return Err(self.error("missing flag")),
                Some(Tok::Char(c)) => c,
                Some(Tok::Escape(_)) => return Err(self.error("missing flag")),
            };
            if !"aiLmsuxt".contains(c) {
                return Err(self.error(if c.is_alphabetic() {
                    "unknown flag"
                } else {
                    "missing flag"
                }));
            }
            loop {
                if matches!(c, 'a' | 'u' | 'L') {
                    return Err(
                        self.error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'")
                    );
                }
                if c == 't' {
                    return Err(self.error("bad inline flags: cannot turn off global flag"));
                }
                off.push(c);
                c = match self.tok.get() {
                    None => return Err(self.error("missing :")),
                    Some(Tok::Char(c)) => c,
                    Some(Tok::Escape(_)) => return Err(self.error("missing :")),
                };
                if c == ':' {
                    break;
                }
                if !"aiLmsuxt".contains(c) {
                    return Err(self.error(if c.is_alphabetic() {
                        "unknown flag"
                    } else {
                        "missing :"
                    }));
                }
            }
        }
        if on.chars().any(|f| off.contains(f)) {
            return Err(self.error("bad inline flags: flag turned on and off"));
        }
        Ok(ParsedFlags::Scoped(on, off))
    }

    /// `Tokenizer.getuntil`.
    fn get_until(&mut self, terminator: char, what: &str) -> Result<String, Error> {
        let mut out = String::new();
        loop {
            match self.tok.get() {
                None => {
                    return Err(self.error(if out.is_empty() {
                        format!("missing {what}")
                    } else {
                        format!("missing {terminator}, unterminated name")
                    }))
                }
                Some(Tok::Char(c)) if c == terminator => {
                    if out.is_empty() {
                        return Err(self.error(format!("missing {what}")));
                    }
                    return Ok(out);
                }
                Some(t) => out.push_str(&tok_text(t)),
            }
        }
    }

    fn check_group_name(&self, name: &str) -> Result<(), Error> {
        if is_identifier(name) {
            Ok(())
        } else {
            Err(self.error(format!("bad character in group name '{name}'")))
        }
    }
}

enum ParsedFlags {
    /// `(?flags)`: applies to the whole pattern.
    Global(String),
    /// `(?on-off:…)`.
    Scoped(String, String),
}

enum ClassMember {
    Char(char),
    /// A category escape, already rendered for use inside a class.
    Category(String),
}

impl ClassMember {
    fn text(&self) -> String {
        match self {
            ClassMember::Char(c) => literal(*c),
            ClassMember::Category(s) => s.clone(),
        }
    }
}

/// Python's `$` without MULTILINE: the end, or just before a newline that ends the text.
const DOLLAR: &str = r"(?=\n?\z)";

/// ASCII word boundary for the `a` flag, spelled with look-around because the engine
/// cannot switch Unicode off inside a pattern.
const ASCII_BOUNDARY: &str =
    r"(?:(?<=[0-9A-Za-z_])(?![0-9A-Za-z_])|(?<![0-9A-Za-z_])(?=[0-9A-Za-z_]))";
const ASCII_NON_BOUNDARY: &str =
    r"(?:(?!\A\z)(?:(?<=[0-9A-Za-z_])(?=[0-9A-Za-z_])|(?<![0-9A-Za-z_])(?![0-9A-Za-z_])))";

/// The class that Python's `\d \D \s \S \w \W` stand for; `in_class` renders it as a
/// member of an enclosing class.
fn category(e: char, ascii: bool, in_class: bool) -> String {
    // Python's `\s` is `str.isspace()`, which adds the four ASCII separators U+001C..U+001F
    // to Unicode White_Space.
    let (set, negated) = match (e, ascii) {
        ('d', false) => (r"\d", false),
        ('D', false) => (r"\d", true),
        ('s', false) => (r"\s\x{1c}-\x{1f}", false),
        ('S', false) => (r"\s\x{1c}-\x{1f}", true),
        ('w', false) => (r"\p{L}\p{N}_", false),
        ('W', false) => (r"\p{L}\p{N}_", true),
        ('d', true) => ("0-9", false),
        ('D', true) => ("0-9", true),
        ('s', true) => (r"\t\n\x0b\x0c\r\x20", false),
        ('S', true) => (r"\t\n\x0b\x0c\r\x20", true),
        ('w', true) => ("0-9A-Za-z_", false),
        _ => ("0-9A-Za-z_", true),
    };
    match (negated, in_class) {
        (false, true) => set.to_owned(),
        (false, false) => format!("[{set}]"),
        (true, _) => format!("[^{set}]"),
    }
}

fn literal_item(c: char) -> Item {
    Item::other(literal(c))
}

/// A quantifier on an item that only matches the empty string, which the engine refuses
/// to quantify: with a minimum of one or more it is the item itself, with a minimum of zero
/// it is "the item, or nothing" in the quantifier's preference order, and with a maximum
/// of zero it never runs (the item stays in place so group numbers do not shift).
fn quantify_empty_width(
    text: &str,
    min: u64,
    max: Option<u64>,
    lazy: bool,
    possessive: bool,
) -> String {
    if max == Some(0) {
        format!("(?:(?!){text}|)")
    } else if min > 0 {
        text.to_owned()
    } else if lazy {
        format!("(?:|{text})")
    } else if possessive {
        format!("(?>{text}|)")
    } else {
        format!("(?:{text}|)")
    }
}

/// A literal character, escaped so the engine reads it literally in or out of a class.
///
/// Punctuation is backslash-escaped, except `<` and `>`: the engine reads `\<` and `\>`
/// as word boundaries, so those (like controls and spaces) are written as `\x{..}`.
fn literal(c: char) -> String {
    if c.is_ascii_alphanumeric() || c == '_' || (!c.is_ascii() && !c.is_control()) {
        c.to_string()
    } else if c.is_ascii_graphic() && c != '<' && c != '>' {
        format!("\\{c}")
    } else {
        format!("\\x{{{:x}}}", u32::from(c))
    }
}

fn tok_text(t: Tok) -> String {
    match t {
        Tok::Char(c) => c.to_string(),
        Tok::Escape(c) => format!("\\{c}"),
    }
}

fn is_octal(c: char) -> bool {
    matches!(c, '0'..='7')
}

/// Python's `str.isidentifier()`, approximated with Rust's alphabetic/alphanumeric tests.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_alphabetic() => {}
        _ => return false,
    }
    chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// Python's `int(s)` for ASCII input: surrounding whitespace, an optional sign, decimal
/// digits with single underscores between them. `None` when Python raises `ValueError`
/// (or when the value does not fit in an `i128`).
pub(crate) fn parse_python_int(s: &str) -> Option<i128> {
    let t = s.trim_matches(|c: char| c.is_whitespace());
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars().filter(char::is_ascii_digit) {
        value = value
            .checked_mul(10)?
            .checked_add(i128::from(c as u8 - b'0'))?;
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(pattern, text, outcome)`: outcome letters are Python's `re.match`, `re.fullmatch`
    /// and `re.search` results (`T`rue, `F`alse, `E`rror), captured from CPython 3.11.7.
    const RE_CASES: &[(&str, &str, &str)] = &[
        ("web\\d+", "web12", "TTT"),
        ("web\\d+$", "web12\n", "TFT"),
        ("web\\d+$", "web12\n\n", "FFF"),
        ("a$", "a\n", "TFT"),
        ("a\\Z", "a\n", "FFF"),
        ("a\\Z", "a", "TTT"),
        ("(?i)WEB", "web1", "TFT"),
        ("(?i)web", "Web3", "TFT"),
        ("a{", "a{", "TTT"),
        ("a{1", "a{1", "TTT"),
        ("a{,2}", "aa", "TTT"),
        ("a{2,}", "aaa", "TTT"),
        ("{1}", "x", "EEE"),
        ("x{}", "x{}", "TTT"),
        ("a{3,2}", "aaa", "EEE"),
        ("(?P<n>a)(?P=n)", "aa", "TTT"),
        ("(a)\\1", "aa", "TTT"),
        ("(a)\\10", "a\u{8}", "EEE"),
        ("\\0", "\u{0}", "TTT"),
        ("\\07", "\u{7}", "TTT"),
        ("\\101", "A", "TTT"),
        ("[\\101-\\103]", "B", "TTT"),
        ("(a)|b\\2", "b", "EEE"),
        ("[]a]", "]", "TTT"),
        ("[^]a]", "b", "TTT"),
        ("[a-]", "-", "TTT"),
        ("[-a]", "-", "TTT"),
        ("[\\d-z]", "-", "EEE"),
        ("[z-a]", "a", "EEE"),
        ("[[]", "[", "TTT"),
        ("[a&&b]", "&", "TTT"),
        ("[a--b]", "-", "EEE"),
        ("[a~~b]", "~", "TTT"),
        ("[\\b]", "\u{8}", "TTT"),
        ("\\bfoo\\b", "foo bar", "TFT"),
        ("(?x) a b # comment\\n c", "abc", "TFT"),
        ("(?x) a b # comment\n c", "abc", "TTT"),
        ("(?x)[ ]", " ", "TTT"),
        ("(?x)a\\ b", "a b", "TTT"),
        ("a(?#comm)b", "ab", "TTT"),
        ("(?s).", "\n", "TTT"),
        (".", "\n", "FFF"),
        ("(?m)^b", "a\nb", "FFT"),
        ("^b", "a\nb", "FFF"),
        ("(?m)a$", "a\nb", "TFT"),
        ("a(?i:B)c", "abc", "TTT"),
        ("a(?i:B)c", "aBC", "FFF"),
        ("(?i)a(?-i:B)c", "AbC", "FFF"),
        ("(?i)a(?-i:B)c", "ABC", "TTT"),
        ("a(?=b)", "ab", "TFT"),
        ("(?<=a)b", "ab", "FFT"),
        ("(?<!a)b", "ab", "FFF"),
        ("(?!a)b", "b", "TTT"),
        ("(?>a+)b", "aab", "TTT"),
        ("a++b", "aab", "TTT"),
        ("a*?b", "aab", "TTT"),
        ("(a)?(?(1)b|c)", "ab", "TTT"),
        ("(a)?(?(1)b|c)", "c", "TTT"),
        ("(?P<x>a)?(?(x)b|c)", "c", "TTT"),
        ("\\w+", "\u{e9}t\u{e9}", "TTT"),
        ("\\w", "\u{b2}", "TTT"),
        ("\\s", "\u{1c}", "TTT"),
        ("\\s", "\u{a0}", "TTT"),
        ("(?a)\\w", "\u{e9}", "FFF"),
        ("(?a)\\s", "\u{1c}", "FFF"),
        ("(?a)\\b\u{e9}", "\u{e9}", "FFF"),
        ("\\x41", "A", "TTT"),
        ("\\x4", "A", "EEE"),
        ("\\u00e9", "\u{e9}", "TTT"),
        ("\\U0001F600", "\u{1f600}", "TTT"),
        ("\\U00110000", "x", "EEE"),
        ("\\q", "q", "EEE"),
        ("\\-", "-", "TTT"),
        ("\\\u{e9}", "\u{e9}", "TTT"),
        ("*a", "a", "EEE"),
        ("a**", "a", "EEE"),
        ("a*+", "a", "TTT"),
        ("^*", "", "EEE"),
        ("(?:)*", "", "TTT"),
        ("(", "", "EEE"),
        (")", "", "EEE"),
        ("a)", "a", "EEE"),
        ("[a", "a", "EEE"),
        ("\\", "", "EEE"),
        ("(?i)", "x", "TFT"),
        ("a(?i)b", "ab", "EEE"),
        ("(?i)(?m)a", "A", "TTT"),
        ("(?L)a", "a", "EEE"),
        ("(?au)a", "a", "EEE"),
        ("(?i-i:a)", "a", "EEE"),
        ("(?-a:a)", "a", "EEE"),
        ("(?P<1>a)", "a", "EEE"),
        ("(?P<a>a)(?P<a>b)", "ab", "EEE"),
        ("(?P=zz)", "", "EEE"),
        ("(a\\1)", "aa", "EEE"),
        ("(?(2)a|b)", "b", "EEE"),
        ("(?(1)a|b|c)", "a", "EEE"),
        ("os:\\S+", "redhat", "FFF"),
        ("\\D+", "debian", "TTT"),
        ("(RedHat|CentOS)", "redhat", "FFF"),
        ("web[0-9]+", "web10", "TTT"),
        ("[\\w.-]+", "a.b-c", "TTT"),
        ("a|", "b", "TFT"),
        ("|a", "b", "TFT"),
        ("a{1,2}{3}", "a", "EEE"),
        ("a{1}?", "a", "TTT"),
        ("\\$", "$", "TTT"),
        ("[\\s\\S]", "\n", "TTT"),
        ("[^\\s]", " ", "FFF"),
        ("[\\W]", "a", "FFF"),
        ("ab$", "ab", "TTT"),
        ("(ab)$", "ab\n", "TFT"),
        ("a$b", "a\nb", "FFF"),
        ("a$\\n", "a\n", "TTT"),
        ("(?m)a$\\n", "a\n", "TTT"),
        ("\\Aa", "a", "TTT"),
        ("a\\Z", "a\n", "FFF"),
        ("[a-\\d]", "a", "EEE"),
        ("[\\d-a]", "a", "EEE"),
        ("(?x)a{1, 2}", "a{1,2}", "TTT"),
        ("a{ 1}", "a{ 1}", "TTT"),
        ("x*", "", "TTT"),
        ("(?i)stra\u{df}e", "STRASSE", "FFF"),
        ("(?i)k", "\u{212a}", "TTT"),
        ("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\\10", "abcdefghijj", "TTT"),
        ("\\8", "8", "EEE"),
        ("[\\8]", "8", "EEE"),
        ("(?P<\u{e9}>a)", "a", "TTT"),
        ("(?:(?=a))*b", "b", "TTT"),
        ("(?=a)+a", "a", "TTT"),
        ("(?=a){0}b", "b", "TTT"),
        ("(?=a)*?b", "b", "TTT"),
        ("\\B", "", "FFF"),
        ("(?a)\\B", "", "FFF"),
        ("a>b", "a>b", "TTT"),
        ("[<>]", ">", "TTT"),
        ("(a|ab)(?=c)", "abc", "TFT"),
        ("\\N", "N", "EEE"),
        ("(?x) [ ] ", " ", "TTT"),
        ("(?x)a # c\\nb", "ab", "TFT"),
        ("(?i)[a-c]", "B", "TTT"),
        ("[^\\W\\d]", "_", "TTT"),
        ("\\d", "\u{663}", "TTT"),
        ("(?a)\\d", "\u{663}", "FFF"),
        ("^web\\d+$", "web01", "TTT"),
        ("^web\\d+$", "web01\n", "TFT"),
        ("web\\d+\\Z", "web01\n", "FFF"),
        ("(?m)^db", "web\ndb", "FFT"),
        ("a.c", "a\nc", "FFF"),
        ("(?s)a.c", "a\nc", "TTT"),
        ("(?P<x>a)(?P<y>b)(?P=x)", "aba", "TTT"),
        ("(?P<x>a)|(?P=x)", "b", "FFF"),
        ("((a)b)\\2", "aba", "TTT"),
        ("(a)(?(1)b)", "ab", "TTT"),
        ("\\x20", " ", "TTT"),
        ("[\\x20-\\x22]", "!", "TTT"),
        ("[\\u00e0-\\u00ff]", "\u{e9}", "TTT"),
        ("a{1,3}?", "aaa", "TTT"),
        ("a{2}", "a", "FFF"),
        ("a{,}", "aaa", "TTT"),
        ("a{1,2}b", "aab", "TTT"),
        ("\\{", "{", "TTT"),
        ("}", "}", "TTT"),
        ("]", "]", "TTT"),
        ("[]-a]", "^", "TTT"),
        ("[a-a]", "a", "TTT"),
        ("[\\w-]", "-", "TTT"),
        ("[-\\w]", "\u{e9}", "TTT"),
        ("(?-i:a)", "a", "TTT"),
        ("(?i)(?-i:a)A", "aA", "TTT"),
        ("(?ms)^a.$", "b\na\n\n", "FFT"),
        ("(?u)\u{e9}", "\u{e9}", "TTT"),
        ("(?a)(?u)x", "x", "EEE"),
        ("(?P<a>x)(?P<a>y)", "xy", "EEE"),
        ("(?P", "", "EEE"),
        ("(?Px)", "", "EEE"),
        ("(?<x>a)", "a", "EEE"),
        ("(?", "", "EEE"),
        ("(?z)", "", "EEE"),
        ("(?i-:a)", "a", "EEE"),
        ("(?-i)", "", "EEE"),
        ("\\u12", "", "EEE"),
        ("\\x4g", "", "EEE"),
        ("[\\q]", "q", "EEE"),
        ("[\\A]", "A", "EEE"),
        ("\\400", "", "EEE"),
        ("[\\400]", "", "EEE"),
        ("\\377", "\u{ff}", "TTT"),
        ("(?#unterminated", "", "EEE"),
    ];

    fn outcome(result: Result<bool, Error>) -> char {
        match result {
            Ok(true) => 'T',
            Ok(false) => 'F',
            Err(Error::InvalidRegex { .. }) => 'E',
            Err(other) => panic!("unexpected error: {other}"),
        }
    }

    #[test]
    fn match_fullmatch_and_search_agree_with_python() {
        let cache = RegexCache::new(8);
        let failures: Vec<String> = RE_CASES
            .iter()
            .filter_map(|&(pattern, text, want)| {
                let got: String = [
                    outcome(cache.re_match(pattern, text)),
                    outcome(cache.re_fullmatch(pattern, text)),
                    outcome(cache.re_search(pattern, text)),
                ]
                .iter()
                .collect();
                (got != want).then(|| format!("{pattern:?} on {text:?}: got {got}, Python {want}"))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    macro_rules! translates {
        ($name:ident, $python:expr, $engine:expr) => {
            #[test]
            fn $name() {
                assert_eq!(translate($python).unwrap(), $engine);
            }
        };
    }

    translates!(backslash_big_z_is_end_of_text, r"a\Z", r"a\z");
    translates!(dollar_is_end_or_before_final_newline, "a$", r"a(?=\n?\z)");
    translates!(
        multiline_dollar_is_engine_multiline_dollar,
        "(?m)a$",
        "a(?m:$)"
    );
    translates!(lone_brace_is_literal, "a{", r"a\{");
    translates!(named_groups_become_numbered, "(?P<n>a)(?P=n)", r"(a)(?:\1)");
    translates!(global_ignorecase_is_a_prefix, "(?i)ab", "(?i)ab");
    translates!(scoped_ignorecase_wraps_the_group, "a(?i:b)", "a(?i:b)");
    translates!(
        verbose_whitespace_and_comments_vanish,
        "(?x) a  b # c\n",
        "ab"
    );
    translates!(octal_escape_is_a_code_point, r"\101", "A");
    translates!(
        angle_brackets_are_not_word_boundaries,
        "<a>",
        r"\x{3c}a\x{3e}"
    );
    translates!(
        quantified_lookahead_becomes_optional,
        "(?=a)*",
        "(?:(?=a)|)"
    );
    translates!(
        python_space_class_includes_separators,
        r"\s",
        r"[\s\x{1c}-\x{1f}]"
    );
    translates!(ascii_flag_uses_ascii_classes, r"(?a)\d", "[0-9]");

    macro_rules! rejects {
        ($name:ident, $python:expr, $message:expr) => {
            #[test]
            fn $name() {
                match translate($python) {
                    Err(Error::InvalidRegex { message, .. }) => assert_eq!(message, $message),
                    other => panic!("expected InvalidRegex, got {other:?}"),
                }
            }
        };
    }

    rejects!(
        unclosed_group_is_rejected,
        "(a",
        "missing ), unterminated subpattern"
    );
    rejects!(unbalanced_close_is_rejected, "a)", "unbalanced parenthesis");
    rejects!(repeat_of_nothing_is_rejected, "*a", "nothing to repeat");
    rejects!(repeat_of_anchor_is_rejected, "^*", "nothing to repeat");
    rejects!(double_repeat_is_rejected, "a**", "multiple repeat");
    rejects!(unknown_letter_escape_is_rejected, r"\q", r"bad escape \q");
    rejects!(
        late_global_flags_are_rejected,
        "a(?i)",
        "global flags not at the start of the expression"
    );
    rejects!(
        reference_to_open_group_is_rejected,
        r"(a\1)",
        "cannot refer to an open group"
    );
    rejects!(
        reversed_range_is_rejected,
        "[z-a]",
        "bad character range z-a"
    );
    rejects!(
        locale_flag_is_rejected,
        "(?L)a",
        "bad inline flags: cannot use 'L' flag with a str pattern"
    );

    #[test]
    fn named_unicode_escape_is_unsupported() {
        assert!(matches!(
            translate(r"\N{EM DASH}"),
            Err(Error::UnsupportedRegex { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_refused_instead_of_overflowing_the_stack() {
        let pattern = format!("{}a{}", "(".repeat(5000), ")".repeat(5000));
        assert!(matches!(
            translate(&pattern),
            Err(Error::InvalidRegex { ref message, .. }) if message == "pattern too deeply nested"
        ));
    }

    #[test]
    fn catastrophic_backtracking_fails_with_backtrack_limit() {
        let cache = RegexCache::default();
        let text = "a".repeat(5000);
        assert!(matches!(
            cache.re_search(r"(a*)*\1b", &text),
            Err(Error::BacktrackLimit { .. })
        ));
    }

    #[test]
    fn nested_quantifiers_without_backreferences_run_in_linear_time() {
        let cache = RegexCache::default();
        let text = format!("{}c", "a".repeat(100_000));
        assert_eq!(cache.re_match("(a+)+b", &text), Ok(false));
        assert_eq!(cache.re_match("^(a|aa)+$", &text), Ok(false));
    }

    #[test]
    fn cache_evicts_the_least_recently_used_pattern() {
        let cache = RegexCache::new(2);
        cache.re_match("a", "a").unwrap();
        cache.re_match("b", "b").unwrap();
        cache.re_match("a", "a").unwrap();
        cache.re_match("c", "c").unwrap();
        let inner = cache.inner.lock().unwrap();
        let mut kept: Vec<&str> = inner.map.keys().map(|(_, p)| p.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["a", "c"]);
    }

    #[test]
    fn cache_keeps_compile_errors() {
        let cache = RegexCache::new(4);
        assert!(cache.re_match("(", "x").is_err());
        assert!(cache.re_match("(", "x").is_err());
        assert_eq!(cache.inner.lock().unwrap().map.len(), 1);
    }

    #[test]
    fn anchors_are_cached_separately() {
        let cache = RegexCache::new(4);
        assert_eq!(cache.re_match("b", "ab"), Ok(false));
        assert_eq!(cache.re_search("b", "ab"), Ok(true));
        assert_eq!(cache.re_fullmatch("ab", "ab"), Ok(true));
    }

    #[test]
    fn python_int_accepts_what_int_accepts() {
        for (s, want) in [
            ("7", Some(7)),
            (" -3 ", Some(-3)),
            ("+1_000", Some(1000)),
            ("007", Some(7)),
            ("1__0", None),
            ("_1", None),
            ("0x10", None),
            ("", None),
        ] {
            assert_eq!(parse_python_int(s), want, "{s:?}");
        }
    }
}
