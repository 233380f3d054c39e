//! The compound grammar shared by the master and the minion.
//!
//! Salt turns a compound target into a Python expression and `eval`s it: the minion builds
//! `True and not False`, the master builds `{'web1'} & ( set(all_minions()) - {'db1'} )`.
//! Whether an expression is valid is therefore decided by Python's grammar, and this
//! module re-implements exactly the slice of it those strings can reach:
//!
//! ```text
//! minion:  expr := and ('or' and)*     and := not ('and' not)*     not := 'not' not | primary
//! master:  expr := and ('|' and)*      and := sub ('&' sub)*       sub := primary ('-' primary)*
//! both:    primary := atom ('(' [expr] ')')*                       atom := VALUE | '(' [expr] ')'
//! ```
//!
//! A `(` right after a value is a call, which Python accepts and then fails on at run time
//! (`TypeError: 'bool' object is not callable`); `( )` is an empty tuple. On the minion,
//! `and`/`or` short-circuit, so a call in a branch that is never evaluated does no harm
//! (`web1 or db1 ( x )` matches on `web1`), exactly as in Python. Parentheses nest at most
//! [`MAX_PARENS`] deep, Python's tokenizer limit.

use std::collections::BTreeSet;

/// Python's tokenizer refuses more nested parentheses than this ("too many nested
/// parentheses").
pub const MAX_PARENS: usize = 200;

/// One compound word split into engine, delimiter and pattern by Salt's `TARGET_REX`:
/// `^((G|P|I|J|L|N|S|E|R|T|M)((?<=G|P|I|J).)?@)?(.+)$`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetWord<'w> {
    /// The engine letter, `None` for a bare glob.
    pub engine: Option<char>,
    /// A one-character delimiter (only after `G`, `P`, `I` or `J`, as in `G|@os|RedHat`).
    pub delimiter: Option<char>,
    /// What follows `@` (the whole word for a bare glob).
    pub pattern: &'w str,
}

/// Salt's `parse_target(word)`. A word the regex cannot match at all (empty, or with a
/// newline that is not the last character) logs 'Unable to parse target' and is a glob.
pub fn parse_target(word: &str) -> TargetWord<'_> {
    let mut chars = word.char_indices();
    if let Some((_, engine)) = chars.next() {
        if "GPIJLNSERTM".contains(engine) {
            let after_engine = engine.len_utf8();
            let rest = &word[after_engine..];
            if "GPIJ".contains(engine) {
                let mut rc = rest.chars();
                if let (Some(delim), Some('@')) = (rc.next(), rc.next()) {
                    if delim != '\n' {
                        let start = after_engine + delim.len_utf8() + 1;
                        if let Some(pattern) = dot_plus_dollar(&word[start..]) {
                            return TargetWord {
                                engine: Some(engine),
                                delimiter: Some(delim),
                                pattern,
                            };
                        }
                    }
                }
            }
            if let Some(after_at) = rest.strip_prefix('@') {
                if let Some(pattern) = dot_plus_dollar(after_at) {
                    return TargetWord {
                        engine: Some(engine),
                        delimiter: None,
                        pattern,
                    };
                }
            }
        }
    }
    match dot_plus_dollar(word) {
        Some(pattern) => TargetWord {
            engine: None,
            delimiter: None,
            pattern,
        },
        None => {
            tracing::warn!("Unable to parse target \"{}\"", word);
            TargetWord {
                engine: None,
                delimiter: None,
                pattern: word,
            }
        }
    }
}

/// Python's `(.+)$` at the start of `s`: a non-empty run without newlines that reaches the
/// end or stops at a final newline.
fn dot_plus_dollar(s: &str) -> Option<&str> {
    let end = s.find('\n').unwrap_or(s.len());
    (end > 0 && (end == s.len() || end + 1 == s.len())).then(|| &s[..end])
}

/// A token of the minion's boolean expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolTok {
    /// A matcher result rendered by `str()`: `True`, `False`, or `[]` (ipcidr's invalid
    /// target), which is falsy.
    Value(bool, &'static str),
    And,
    Or,
    Not,
    Open,
    Close,
}

impl BoolTok {
    pub(crate) fn text(self) -> &'static str {
        match self {
            BoolTok::Value(_, text) => text,
            BoolTok::And => "and",
            BoolTok::Or => "or",
            BoolTok::Not => "not",
            BoolTok::Open => "(",
            BoolTok::Close => ")",
        }
    }
}

/// Why Python's `eval` raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EvalError;

/// `eval(" ".join(results))` on the minion: `Ok(truthiness)` or the exception.
pub(crate) fn eval_bool(tokens: &[BoolTok]) -> Result<bool, EvalError> {
    let mut parser = BoolParser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let expr = parser.expr()?;
    if parser.pos != tokens.len() {
        return Err(EvalError);
    }
    expr.eval()
}

#[derive(Debug)]
enum BoolExpr {
    Value(bool),
    /// `()`: falsy.
    EmptyTuple,
    Not(Box<BoolExpr>),
    And(Vec<BoolExpr>),
    Or(Vec<BoolExpr>),
    /// `callee(arg)`: always a `TypeError` once evaluated.
    Call(Box<BoolExpr>, Option<Box<BoolExpr>>),
}

impl BoolExpr {
    fn eval(&self) -> Result<bool, EvalError> {
        match self {
            BoolExpr::Value(b) => Ok(*b),
            BoolExpr::EmptyTuple => Ok(false),
            BoolExpr::Not(e) => e.eval().map(|b| !b),
            BoolExpr::And(items) => {
                for item in items {
                    if !item.eval()? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            BoolExpr::Or(items) => {
                for item in items {
                    if item.eval()? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            BoolExpr::Call(callee, arg) => {
                callee.eval()?;
                if let Some(arg) = arg {
                    arg.eval()?;
                }
                Err(EvalError)
            }
        }
    }
}

struct BoolParser<'t> {
    tokens: &'t [BoolTok],
    pos: usize,
    depth: usize,
}

impl BoolParser<'_> {
    fn peek(&self) -> Option<BoolTok> {
        self.tokens.get(self.pos).copied()
    }

    fn eat(&mut self, tok: BoolTok) -> bool {
        if self.peek() == Some(tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Result<BoolExpr, EvalError> {
        let mut items = vec![self.and()?];
        while self.eat(BoolTok::Or) {
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            BoolExpr::Or(items)
        })
    }

    fn and(&mut self) -> Result<BoolExpr, EvalError> {
        let mut items = vec![self.not()?];
        while self.eat(BoolTok::And) {
            items.push(self.not()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            BoolExpr::And(items)
        })
    }

    fn not(&mut self) -> Result<BoolExpr, EvalError> {
        let mut count = 0;
        while self.eat(BoolTok::Not) {
            count += 1;
        }
        let mut expr = self.primary()?;
        for _ in 0..count {
            expr = BoolExpr::Not(Box::new(expr));
        }
        Ok(expr)
    }

    fn primary(&mut self) -> Result<BoolExpr, EvalError> {
        let mut expr = match self.peek() {
            Some(BoolTok::Value(b, _)) => {
                self.pos += 1;
                BoolExpr::Value(b)
            }
            Some(BoolTok::Open) => {
                self.pos += 1;
                self.parenthesized()?.unwrap_or(BoolExpr::EmptyTuple)
            }
            _ => return Err(EvalError),
        };
        while self.eat(BoolTok::Open) {
            let arg = self.parenthesized()?.map(Box::new);
            expr = BoolExpr::Call(Box::new(expr), arg);
        }
        Ok(expr)
    }

    /// After a `(`: an optional expression and the `)`.
    fn parenthesized(&mut self) -> Result<Option<BoolExpr>, EvalError> {
        self.depth += 1;
        if self.depth > MAX_PARENS {
            return Err(EvalError);
        }
        let inner = if self.eat(BoolTok::Close) {
            None
        } else {
            let e = self.expr()?;
            if !self.eat(BoolTok::Close) {
                return Err(EvalError);
            }
            Some(e)
        };
        self.depth -= 1;
        Ok(inner)
    }
}

/// A token of the master's set expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetTok<'a> {
    /// `str(set(result))` of one engine.
    Set(BTreeSet<&'a str>),
    /// `set(all_minions())`.
    All,
    /// `&` (and).
    And,
    /// `|` (or).
    Or,
    /// `-` (the difference that `not` becomes).
    Minus,
    Open,
    Close,
}

impl SetTok<'_> {
    /// The text Salt puts in the expression (for logs).
    pub(crate) fn text(&self) -> String {
        match self {
            SetTok::Set(s) if s.is_empty() => "set()".to_owned(),
            SetTok::Set(s) => {
                let items: Vec<String> = s.iter().map(|m| format!("'{m}'")).collect();
                format!("{{{}}}", items.join(", "))
            }
            SetTok::All => "set(all_minions())".to_owned(),
            SetTok::And => "&".to_owned(),
            SetTok::Or => "|".to_owned(),
            SetTok::Minus => "-".to_owned(),
            SetTok::Open => "(".to_owned(),
            SetTok::Close => ")".to_owned(),
        }
    }
}

/// `list(eval(" ".join(results)))` on the master, with `all` as `set(all_minions())`.
/// `None` when Python raises (syntax error, set operation on a tuple, a call).
pub(crate) fn eval_sets<'a>(
    tokens: &[SetTok<'a>],
    all: &dyn Fn() -> BTreeSet<&'a str>,
) -> Option<BTreeSet<&'a str>> {
    let mut parser = SetParser {
        tokens,
        pos: 0,
        depth: 0,
        all,
    };
    let value = parser.expr().ok()?;
    if parser.pos != tokens.len() {
        return None;
    }
    match value? {
        SetValue::Set(s) => Some(s),
        SetValue::EmptyTuple => Some(BTreeSet::new()),
    }
}

/// A value of the set expression. Evaluation errors only matter as "the whole expression
/// raised", so they are carried as `None` through the parse, which Python would also have
/// completed first (syntax errors win over run-time errors).
enum SetValue<'a> {
    Set(BTreeSet<&'a str>),
    EmptyTuple,
}

type Evaluated<'a> = Option<SetValue<'a>>;

struct SetParser<'t, 'a> {
    tokens: &'t [SetTok<'a>],
    pos: usize,
    depth: usize,
    all: &'t dyn Fn() -> BTreeSet<&'a str>,
}

impl<'a> SetParser<'_, 'a> {
    fn eat(&mut self, tok: &SetTok<'_>) -> bool {
        if self.tokens.get(self.pos) == Some(tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn binary(
        &mut self,
        op: &SetTok<'static>,
        operand: fn(&mut Self) -> Result<Evaluated<'a>, EvalError>,
        combine: fn(&BTreeSet<&'a str>, &BTreeSet<&'a str>) -> BTreeSet<&'a str>,
    ) -> Result<Evaluated<'a>, EvalError> {
        let mut acc = operand(self)?;
        while self.eat(op) {
            let rhs = operand(self)?;
            acc = match (acc, rhs) {
                (Some(SetValue::Set(a)), Some(SetValue::Set(b))) => {
                    Some(SetValue::Set(combine(&a, &b)))
                }
                _ => None,
            };
        }
        Ok(acc)
    }

    fn expr(&mut self) -> Result<Evaluated<'a>, EvalError> {
        self.binary(&SetTok::Or, Self::and, |a, b| a.union(b).copied().collect())
    }

    fn and(&mut self) -> Result<Evaluated<'a>, EvalError> {
        self.binary(&SetTok::And, Self::sub, |a, b| {
            a.intersection(b).copied().collect()
        })
    }

    fn sub(&mut self) -> Result<Evaluated<'a>, EvalError> {
        self.binary(&SetTok::Minus, Self::primary, |a, b| {
            a.difference(b).copied().collect()
        })
    }

    fn primary(&mut self) -> Result<Evaluated<'a>, EvalError> {
        let mut value = match self.tokens.get(self.pos) {
            Some(SetTok::Set(s)) => {
                self.pos += 1;
                Some(SetValue::Set(s.clone()))
            }
            Some(SetTok::All) => {
                self.pos += 1;
                Some(SetValue::Set((self.all)()))
            }
            Some(SetTok::Open) => {
                self.pos += 1;
                match self.parenthesized()? {
                    Some(inner) => inner,
                    None => Some(SetValue::EmptyTuple),
                }
            }
            _ => return Err(EvalError),
        };
        while self.eat(&SetTok::Open) {
            self.parenthesized()?;
            // Calling a set (or a tuple) raises TypeError.
            value = None;
        }
        Ok(value)
    }

    /// After a `(`: `None` for `()`, else the inner value.
    fn parenthesized(&mut self) -> Result<Option<Evaluated<'a>>, EvalError> {
        self.depth += 1;
        if self.depth > MAX_PARENS {
            return Err(EvalError);
        }
        let inner = if self.eat(&SetTok::Close) {
            None
        } else {
            let e = self.expr()?;
            if !self.eat(&SetTok::Close) {
                return Err(EvalError);
            }
            Some(e)
        };
        self.depth -= 1;
        Ok(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(word, engine, delimiter, pattern)` from Salt 3008.3's `parse_target`.
    const TARGET_WORDS: &[(&str, Option<char>, Option<char>, &str)] = &[
        ("web1", None, None, "web1"),
        ("G@os:RedHat", Some('G'), None, "os:RedHat"),
        ("G|@os|RedHat", Some('G'), Some('|'), "os|RedHat"),
        ("P@os:red.*", Some('P'), None, "os:red.*"),
        ("I@env:prod", Some('I'), None, "env:prod"),
        ("J@x:y", Some('J'), None, "x:y"),
        ("L@a,b", Some('L'), None, "a,b"),
        ("E@web\\d", Some('E'), None, "web\\d"),
        ("S@10.0.0.0/8", Some('S'), None, "10.0.0.0/8"),
        ("N@grp", Some('N'), None, "grp"),
        ("R@%foo", Some('R'), None, "%foo"),
        ("T@type:id", Some('T'), None, "type:id"),
        ("M@web*", Some('M'), None, "web*"),
        ("X@foo", None, None, "X@foo"),
        ("foo@bar", None, None, "foo@bar"),
        ("G@", None, None, "G@"),
        ("G|@", None, None, "G|@"),
        ("G@@", Some('G'), None, "@"),
        ("G@@x", Some('G'), Some('@'), "x"),
        ("L|@a", None, None, "L|@a"),
        ("E|@x", None, None, "E|@x"),
        ("G||@x", None, None, "G||@x"),
        ("g@os:x", None, None, "g@os:x"),
        ("@", None, None, "@"),
        ("G@a\n", Some('G'), None, "a"),
        ("G@a\nb", None, None, "G@a\nb"),
        ("a\nb", None, None, "a\nb"),
        ("", None, None, ""),
        ("\n", None, None, "\n"),
        ("G\u{e9}@x", Some('G'), Some('\u{e9}'), "x"),
        ("\u{e9}@x", None, None, "\u{e9}@x"),
        ("G:@os:x", Some('G'), Some(':'), "os:x"),
    ];

    #[test]
    fn parse_target_agrees_with_salt() {
        for &(word, engine, delimiter, pattern) in TARGET_WORDS {
            assert_eq!(
                parse_target(word),
                TargetWord {
                    engine,
                    delimiter,
                    pattern
                },
                "{word:?}"
            );
        }
    }

    const T: BoolTok = BoolTok::Value(true, "True");
    const F: BoolTok = BoolTok::Value(false, "False");
    const EMPTY: BoolTok = BoolTok::Value(false, "[]");
    use BoolTok::{And, Close, Not, Open, Or};

    macro_rules! boolean {
        ($name:ident, [$($tok:expr),*], $want:expr) => {
            #[test]
            fn $name() {
                assert_eq!(eval_bool(&[$($tok),*]), $want);
            }
        };
    }

    boolean!(and_binds_tighter_than_or, [T, Or, F, And, F], Ok(true));
    boolean!(not_binds_tighter_than_and, [Not, F, And, T], Ok(true));
    boolean!(empty_list_is_falsy, [EMPTY, Or, F], Ok(false));
    boolean!(
        parentheses_group,
        [Open, T, Or, F, Close, And, F],
        Ok(false)
    );
    boolean!(empty_expression_is_a_syntax_error, [], Err(EvalError));
    boolean!(
        trailing_operator_is_a_syntax_error,
        [T, And],
        Err(EvalError)
    );
    boolean!(
        not_and_is_a_syntax_error,
        [Not, And, Not, T],
        Err(EvalError)
    );
    boolean!(
        unclosed_parenthesis_is_a_syntax_error,
        [T, Or, Open, F],
        Err(EvalError)
    );
    boolean!(
        call_raises_when_evaluated,
        [T, Open, F, Close],
        Err(EvalError)
    );
    boolean!(
        call_is_skipped_by_short_circuit,
        [T, Or, F, Open, F, Close],
        Ok(true)
    );
    boolean!(empty_tuple_is_falsy, [Not, Open, Close], Ok(true));

    #[test]
    fn too_many_nested_parentheses_are_a_syntax_error() {
        let mut tokens = vec![Open; MAX_PARENS + 1];
        tokens.push(T);
        tokens.extend(vec![Close; MAX_PARENS + 1]);
        assert_eq!(eval_bool(&tokens), Err(EvalError));
        assert_eq!(eval_bool(&tokens[1..tokens.len() - 1]), Ok(true));
    }

    fn set<'a>(ids: &[&'a str]) -> SetTok<'a> {
        SetTok::Set(ids.iter().copied().collect())
    }

    fn sets(tokens: &[SetTok<'static>]) -> Option<Vec<&'static str>> {
        let all = || ["a", "b", "c"].into_iter().collect();
        eval_sets(tokens, &all).map(|s| s.into_iter().collect())
    }

    #[test]
    fn difference_binds_tighter_than_intersection_and_union() {
        use SetTok::{All, And, Close, Minus, Open, Or};
        // a | ( all - b ) & c  ==  a | ((all - b) & c)
        let tokens = [
            set(&["a"]),
            Or,
            Open,
            All,
            Minus,
            set(&["b"]),
            Close,
            And,
            set(&["c"]),
        ];
        assert_eq!(sets(&tokens), Some(vec!["a", "c"]));
    }

    #[test]
    fn empty_tuple_alone_is_an_empty_result_but_fails_in_an_operation() {
        use SetTok::{Close, Open, Or};
        assert_eq!(sets(&[Open, Close]), Some(vec![]));
        assert_eq!(sets(&[set(&["a"]), Or, Open, Close]), None);
    }

    #[test]
    fn calling_a_set_raises() {
        use SetTok::{Close, Open};
        assert_eq!(sets(&[set(&["a"]), Open, set(&["b"]), Close]), None);
    }

    #[test]
    fn set_text_is_what_salt_logs() {
        assert_eq!(set(&[]).text(), "set()");
        assert_eq!(set(&["a", "b"]).text(), "{'a', 'b'}");
    }
}
