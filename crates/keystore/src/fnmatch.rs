//! Python's `fnmatch.fnmatch` on POSIX (case-sensitive), as salt-key uses it for key globs.
//!
//! Syntax: `*` matches any run of characters (including none), `?` one character, `[seq]` one
//! character in `seq`, `[!seq]` one character not in it. Inside a class a `-` between two
//! characters is a range, a leading `]` is literal, and a range whose bounds are reversed
//! matches nothing (Python drops it). A `[` with no closing `]` is a literal `[`. There is no
//! escape character. The whole name must match.

/// One element of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// Whether `name` matches the shell-style `pattern` (Python's `fnmatch.fnmatch` on POSIX).
pub fn fnmatch(name: &str, pattern: &str) -> bool {
    let tokens = compile(pattern);
    let name: Vec<char> = name.chars().collect();
    matches(&tokens, &name)
}

fn compile(pattern: &str) -> Vec<Token> {
    let pat: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < pat.len() {
        let c = pat[i];
        i += 1;
        match c {
            '*' => {
                if out.last() != Some(&Token::AnyRun) {
                    out.push(Token::AnyRun);
                }
            }
            '?' => out.push(Token::AnyOne),
            '[' => {
                let mut j = i;
                if j < pat.len() && pat[j] == '!' {
                    j += 1;
                }
                if j < pat.len() && pat[j] == ']' {
                    j += 1;
                }
                while j < pat.len() && pat[j] != ']' {
                    j += 1;
                }
                if j >= pat.len() {
                    out.push(Token::Literal('['));
                    continue;
                }
                let mut body = &pat[i..j];
                i = j + 1;
                let negated = body.first() == Some(&'!');
                if negated {
                    body = &body[1..];
                }
                out.push(Token::Class {
                    negated,
                    ranges: class_ranges(body),
                });
            }
            other => out.push(Token::Literal(other)),
        }
    }
    out
}

/// Ranges of a class body: `x-y` is a range unless the `-` is the last character.
fn class_ranges(body: &[char]) -> Vec<(char, char)> {
    let mut ranges = Vec::new();
    let mut k = 0;
    while k < body.len() {
        if k + 2 < body.len() && body[k + 1] == '-' {
            // A reversed range matches nothing; Python removes it.
            if body[k] <= body[k + 2] {
                ranges.push((body[k], body[k + 2]));
            }
            k += 3;
        } else {
            ranges.push((body[k], body[k]));
            k += 1;
        }
    }
    ranges
}

/// Iterative wildcard matching with single-star backtracking (linear in practice).
fn matches(tokens: &[Token], name: &[char]) -> bool {
    let (mut t, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match tokens.get(t) {
            Some(Token::AnyRun) => {
                star = Some((t, n));
                t += 1;
                continue;
            }
            Some(tok) if single(tok, name[n]) => {
                t += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((st, sn)) => {
                t = st + 1;
                n = sn + 1;
                star = Some((st, sn + 1));
            }
            None => return false,
        }
    }
    tokens[t..].iter().all(|tok| *tok == Token::AnyRun)
}

fn single(tok: &Token, c: char) -> bool {
    match tok {
        Token::Literal(l) => *l == c,
        Token::AnyOne => true,
        Token::AnyRun => false,
        Token::Class { negated, ranges } => {
            ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    macro_rules! case {
        ($name:ident: $subject:expr, $pattern:expr => $want:expr) => {
            #[test]
            fn $name() {
                assert_eq!(
                    fnmatch($subject, $pattern),
                    $want,
                    "{:?} ~ {:?}",
                    $subject,
                    $pattern
                );
            }
        };
    }

    // Expected values were checked against CPython 3.11 `fnmatch.fnmatch`.
    case!(star_matches_everything: "web1", "*" => true);
    case!(star_matches_empty: "", "*" => true);
    case!(literal_must_match_whole_name: "web1", "web" => false);
    case!(matching_is_case_sensitive: "Web1", "web*" => false);
    case!(question_mark_is_one_char: "web1", "web?" => true);
    case!(question_mark_needs_a_char: "web", "web?" => false);
    case!(star_in_middle_backtracks: "a.b.c.example", "a*.example" => true);
    case!(star_does_not_cross_required_suffix: "a.b.c.exampl", "a*.example" => false);
    case!(class_range: "web5", "web[0-9]" => true);
    case!(negated_class: "web5", "web[!0-9]" => false);
    case!(negated_class_matches_outside: "webx", "web[!0-9]" => true);
    case!(leading_bracket_in_class_is_literal: "]", "[]]" => true);
    case!(unclosed_bracket_is_literal: "a[b", "a[b" => true);
    case!(trailing_dash_is_literal: "-", "[a-]" => true);
    case!(reversed_range_matches_nothing: "b", "[z-a]" => false);
    case!(dash_after_range_is_literal: "-", "[a-c-e]" => true);
    case!(char_after_range_dash: "e", "[a-c-e]" => true);
    case!(d_is_not_in_split_range: "d", "[a-c-e]" => false);
    case!(dot_is_literal: "axb", "a.b" => false);
    case!(backslash_is_literal: "a\\b", "a\\b" => true);
    case!(star_matches_newline: "a\nb", "a*b" => true);
    case!(unicode_is_one_char: "é", "?" => true);
    case!(negated_class_with_literal_bracket_and_dash: "-", "[!]-]" => false);
    case!(negated_class_with_literal_bracket_admits_others: "x", "[!]-]" => true);
    case!(range_ending_in_dash_reversed_is_empty: "b", "[a--]" => false);
    case!(range_starting_at_dash: "-", "[--a]" => true);
}
