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

    /// Whether `name` matches the whole glob. Allocates nothing.
    pub fn matches(&self, name: &str) -> bool {
        let tokens = &self.tokens;
        // `t` indexes tokens, `s` is a byte offset into `name` (always a char boundary).
        let (mut t, mut s) = (0, 0);
        // Where to resume after the last star: (token after the star, name position).
        let mut resume: Option<(usize, usize)> = None;
        loop {
            let next = name.get(s..).and_then(|rest| rest.chars().next());
            match tokens.get(t) {
                Some(Token::Star) => {
                    resume = Some((t + 1, s));
                    t += 1;
                    continue;
                }
                Some(token) => {
                    let step = match (token, next) {
                        (Token::Literal(c), Some(n)) => *c == n,
                        (Token::AnyChar, Some(_)) => true,
                        (Token::Class(class), Some(n)) => class.contains(n),
                        _ => false,
                    };
                    if let (true, Some(n)) = (step, next) {
                        t += 1;
                        s += n.len_utf8();
                        continue;
                    }
                }
                None if s == name.len() => return true,
                None => {}
            }
            // Let the last star take one more character, or fail.
            let Some((rt, rs)) = resume else {
                return false;
            };
            let Some(c) = name.get(rs..).and_then(|rest| rest.chars().next()) else {
                return false;
            };
            resume = Some((rt, rs + c.len_utf8()));
            t = rt;
            s = rs + c.len_utf8();
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
        while let Some(found) = (k..j).find(|&p| stuff[p] == '-') {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `(name, pattern, fnmatch.fnmatch(name, pattern))`, captured from CPython 3.11.7 on
    /// Linux.
    const FNMATCH_CASES: &[(&str, &str, bool)] = &[
        ("web1", "web*", true),
        ("Web1", "web*", false),
        ("web1", "WEB*", false),
        ("web1", "web?", true),
        ("web10", "web?", false),
        ("web1", "web[0-9]", true),
        ("weba", "web[!0-9]", true),
        ("web1", "web[!0-9]", false),
        ("a/b", "a*b", true),
        (".hidden", "*", true),
        ("a\nb", "a*b", true),
        ("\n", "?", true),
        ("[", "[", true),
        ("[a", "[a", true),
        ("a", "[a", false),
        ("]", "[]]", true),
        ("a", "[]a]", true),
        ("!", "[!]", false),
        ("[!]", "[!]", true),
        ("b", "[!]a]", true),
        ("]", "[!]a]", false),
        ("-", "[a-]", true),
        ("-", "[-a]", true),
        ("b", "[a-c]", true),
        ("-", "[a-c-e]", true),
        ("d", "[a-c-e]", false),
        ("e", "[a-c-e]", true),
        ("a", "[z-a]", false),
        ("x", "[!z-a]", true),
        ("a", "[a--]", false),
        ("-", "[a--]", false),
        ("\\", "[\\]", true),
        ("\\", "\\", true),
        ("a", "\\a", false),
        ("^", "[^]", true),
        ("a", "[^a]", true),
        ("&", "[a&&b]", true),
        ("~", "[~~]", true),
        ("|", "[||]", true),
        ("\u{e9}", "?", true),
        ("\u{c9}", "[\u{e9}]", false),
        ("x", "", false),
        ("", "", true),
        ("", "*", true),
        ("abc", "a**c", true),
        ("abc", "*b*", true),
        ("aXbXc", "*X*X*", true),
        ("aaa", "a*a*a", true),
        ("aa", "a*a*a", false),
        ("web1,db1", "web1,db1", true),
        ("web1", "web1,db1", false),
        ("x", "[!]", false),
        ("ab", "[a-b][a-b]", true),
        ("c", "[a-bd-e]", false),
        ("d", "[a-bd-e]", true),
        ("-", "[!-]", false),
        ("b", "[!a-]", true),
        ("*", "[*]", true),
        ("?", "[?]", true),
        ("a", "[[]a]", false),
        ("[a]", "[[]a]", true),
        ("\u{e9}", "[\u{e0}-\u{ea}]", true),
        ("other.example.com", "*.example.com", true),
    ];

    #[test]
    fn agrees_with_python_fnmatch() {
        let failures: Vec<String> = FNMATCH_CASES
            .iter()
            .filter(|&&(name, pattern, want)| fnmatch(name, pattern) != want)
            .map(|(name, pattern, want)| format!("{name:?} ~ {pattern:?}: Python says {want}"))
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    macro_rules! glob {
        ($name:ident, $pattern:expr, $text:expr, $want:expr) => {
            #[test]
            fn $name() {
                assert_eq!(fnmatch($text, $pattern), $want);
            }
        };
    }

    glob!(glob_is_case_sensitive, "WEB*", "web1", false);
    glob!(star_crosses_slashes_and_newlines, "a*b", "a/\nb", true);
    glob!(comma_is_an_ordinary_character, "web1,db1", "web1", false);
    glob!(unclosed_bracket_is_literal, "[ab", "[ab", true);
    glob!(reversed_range_never_matches, "[z-a]", "a", false);
    glob!(negated_reversed_range_matches_anything, "[!z-a]", "q", true);
    glob!(backslash_is_literal_inside_brackets, r"[\]", r"\", true);

    #[test]
    fn star_and_question_mark_step_over_whole_multibyte_characters() {
        assert!(fnmatch("\u{e9}x", "?x"));
        assert!(fnmatch("h\u{e9}\u{1f600}llo", "h*llo"));
        assert!(fnmatch("\u{e9}\u{e9}\u{e9}", "*\u{e9}"));
        assert!(fnmatch("a\u{1f600}", "a[\u{1f600}]"));
        assert!(!fnmatch("\u{e9}", "??"));
        assert!(!fnmatch("\u{e9}\u{e9}", "*x"));
    }

    #[test]
    fn many_stars_do_not_blow_up() {
        let pattern = "*a".repeat(50) + "b";
        let text = "a".repeat(10_000);
        assert!(!fnmatch(&text, &pattern));
    }
}
