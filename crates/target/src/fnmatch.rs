//! Python's `fnmatch.fnmatch` on POSIX, without regular expressions.
//!
//! Salt matches minion ids (`glob` targets, `Key.glob_match`) and grain/pillar values
//! (`subdict_match`) with `fnmatch.fnmatch`. On POSIX, `os.path.normcase` is the identity, so
//! this is `fnmatch.fnmatchcase`: case-sensitive, and `/`, leading dots and newlines are
//! ordinary characters.
//!
//! Syntax, exactly as CPython 3.11's `fnmatch.translate` reads it:
//! - `*` matches any run of characters (consecutive stars are one star), `?` any single
//!   character;
//! - `[seq]` matches one character of `seq`, `[!seq]` one character not in it; a `]` right
//!   after `[` or `[!` is a member; `a-z` is a range, but a `-` first or last is literal, and
//!   the character after a range cannot start another range (`[a-c-e]` is `a..c`, `-`, `e`);
//! - a reversed range is dropped together with its endpoints (`[z-a]` never matches,
//!   `[!z-a]` matches any character, `[a--]` never matches);
//! - a `[` with no closing `]` is a literal `[`; there is no escape character (a backslash is
//!   literal, also inside brackets).
//!
//! Matching is a linear scan with one backtracking point per `*`, so it runs in
//! O(pattern × name) time on any input.

/// Python `fnmatch.fnmatch(name, pattern)` on POSIX.
pub fn fnmatch(name: &str, pattern: &str) -> bool {
    Pattern::new(pattern).matches(name)
}

/// A glob compiled once and matched many times (the master matches one pattern against
/// every accepted minion id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
    Class(Class),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Class {
    negated: bool,
    /// Inclusive ranges; single characters are ranges of one.
    ranges: Vec<(char, char)>,
}

impl Class {
    fn contains(&self, c: char) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }
}

impl Pattern {
    /// Compiles a glob. Every string is a valid glob.
    pub fn new(pattern: &str) -> Self {
        let pat: Vec<char> = pattern.chars().collect();
        let n = pat.len();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < n {
            let c = pat[i];
            i += 1;
            match c {
                '*' => {
                    if tokens.last() != Some(&Token::Star) {
                        tokens.push(Token::Star);
                    }
                }
                '?' => tokens.push(Token::AnyChar),
                '[' => {
                    let mut j = i;
                    if j < n && pat[j] == '!' {
                        j += 1;
                    }
                    if j < n && pat[j] == ']' {
                        j += 1;
                    }
                    while j < n && pat[j] != ']' {
                        j += 1;
                    }
                    if j >= n {
                        tokens.push(Token::Literal('['));
                    } else {
                        tokens.push(Token::Class(bracket(&pat[i..j])));
                        i = j + 1;
                    }
                }
                c => tokens.push(Token::Literal(c)),
            }
        }
        Self { tokens }
    }

    /// Whether `name` matches the whole glob.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        let tokens = &self.tokens;
        let (mut t, mut s) = (0, 0);
        // Where to resume after the last star: (token after the star, name position).
        let mut resume: Option<(usize, usize)> = None;
        loop {
            if t < tokens.len() {
                let step = match &tokens[t] {
                    Token::Star => {
                        resume = Some((t + 1, s));
                        t += 1;
                        continue;
                    }
                    Token::Literal(c) => name.get(s) == Some(c),
                    Token::AnyChar => s < name.len(),
                    Token::Class(class) => name.get(s).is_some_and(|&c| class.contains(c)),
                };
                if step {
                    t += 1;
                    s += 1;
                    continue;
                }
            } else if s == name.len() {
                return true;
            }
            match resume {
                Some((rt, rs)) if rs < name.len() => {
                    resume = Some((rt, rs + 1));
                    t = rt;
                    s = rs + 1;
                }
                _ => return false,
            }
        }
    }
}

/// The set a bracket expression stands for; `stuff` is everything between `[` and `]`.
///
/// This follows `fnmatch.translate` step by step: split into chunks at the hyphens that
/// form ranges, drop reversed ranges with their endpoints, then read the chunks back with
/// every character literal and a range between neighbouring chunks.
fn bracket(stuff: &[char]) -> Class {
    let negated = stuff.first() == Some(&'!');
    let body_start = usize::from(negated);
    let mut chunks: Vec<Vec<char>> = Vec::new();
    if stuff.contains(&'-') {
        let j = stuff.len();
        let mut i = 0;
        let mut k = body_start + 1;
        loop {
            let Some(found) = (k..j).find(|&p| stuff[p] == '-') else {
                break;
            };
            chunks.push(stuff[i..found].to_vec());
            i = found + 1;
            k = found + 3;
        }
        let last = &stuff[i..j];
        if last.is_empty() {
            if let Some(prev) = chunks.last_mut() {
                prev.push('-');
            }
        } else {
            chunks.push(last.to_vec());
        }
        // Remove empty ranges, walking from the end as Python does.
        let mut k = chunks.len().saturating_sub(1);
        while k > 0 {
            let reversed = match (chunks[k - 1].last(), chunks[k].first()) {
                (Some(lo), Some(hi)) => lo > hi,
                _ => false,
            };
            if reversed {
                let tail: Vec<char> = chunks[k][1..].to_vec();
                chunks[k - 1].pop();
                chunks[k - 1].extend(tail);
                chunks.remove(k);
            }
            k -= 1;
        }
    } else {
        chunks.push(stuff.to_vec());
    }
    // The negation marker, if any, is still the first character of the first chunk.
    if negated {
        if let Some(first) = chunks.first_mut() {
            first.remove(0);
        }
    }
    let mut ranges = Vec::new();
    for (idx, chunk) in chunks.iter().enumerate() {
        let start = usize::from(idx > 0);
        let end = if idx + 1 < chunks.len() {
            chunk.len().saturating_sub(1)
        } else {
            chunk.len()
        };
        for &c in chunk.get(start..end).unwrap_or(&[]) {
            ranges.push((c, c));
        }
        if idx + 1 < chunks.len() {
            if let (Some(&lo), Some(&hi)) = (chunk.last(), chunks[idx + 1].first()) {
                ranges.push((lo, hi));
            }
        }
    }
    Class { negated, ranges }
}
