//! Python 3.11's `textwrap.TextWrapper(width, initial_indent, subsequent_indent).fill()`
//! with the other options at their defaults (tabs expanded to 8, whitespace replaced,
//! long words broken, hyphenated words split, whitespace dropped at line ends), which the
//! highstate outputter uses for a state's warnings.
//!
//! Deviation: Python's `\w` is "alphanumeric or `_`" by `str.isalnum()`; here it is a
//! Unicode letter, number or `_` (the same for every character that has a numeric value
//! in a letter or number category, which is all but a handful of CJK ideographs).

use std::sync::OnceLock;

use fancy_regex::Regex;

use crate::py::{is_space, py_len};

/// `TextWrapper.wordsep_re`, with Python's `\w`, `\d` and `\Z` spelled out.
fn wordsep() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        let wp = r#"[\p{L}\p{N}_!"'&.,?]"#;
        let lt = r"[\p{L}\p{Nl}\p{No}_]";
        let ws = r"[\t\n\x0b\x0c\r ]";
        let nws = r"[^\t\n\x0b\x0c\r ]";
        let word = r"[\p{L}\p{N}_]";
        let pattern = format!(
            "({ws}+|(?<={wp})-{{2,}}(?={word})|{nws}+?(?:-(?:(?<={lt}{{2}}-)|(?<={lt}-{lt}-))(?={lt}-?{lt})|(?={ws}|\\z)|(?<={wp})(?=-{{2,}}{word})))"
        );
        Regex::new(&pattern).ok()
    })
    .as_ref()
}

/// `str.expandtabs(8)` followed by replacing each ASCII whitespace character with a space.
fn munge_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut column = 0usize;
    for c in text.chars() {
        match c {
            '\t' => {
                let n = 8 - column % 8;
                out.push_str(&" ".repeat(n));
                column += n;
            }
            '\n' | '\r' => {
                out.push(' ');
                column = 0;
            }
            '\u{0b}' | '\u{0c}' => {
                out.push(' ');
                column += 1;
            }
            c => {
                out.push(c);
                column += 1;
            }
        }
    }
    out
}

/// `wordsep_re.split(text)` without the empty strings; `None` if the regex engine fails
/// (its backtrack limit), which Python's engine has no equivalent of.
fn split(text: &str) -> Option<Vec<String>> {
    let re = wordsep()?;
    let mut chunks = Vec::new();
    let mut last = 0;
    for m in re.find_iter(text) {
        let m = m.ok()?;
        chunks.push(text.get(last..m.start())?.to_owned());
        chunks.push(m.as_str().to_owned());
        last = m.end();
    }
    chunks.push(text.get(last..)?.to_owned());
    chunks.retain(|c| !c.is_empty());
    Some(chunks)
}

fn is_blank(chunk: &str) -> bool {
    chunk.chars().all(is_space)
}

/// Splits off the first `n` characters.
fn split_chars(s: &str, n: usize) -> (String, String) {
    let at = s.char_indices().nth(n).map_or(s.len(), |(i, _)| i);
    (s[..at].to_owned(), s[at..].to_owned())
}

/// `TextWrapper(width=width, initial_indent=indent, subsequent_indent=indent).fill(text)`;
/// `None` when the text cannot be split (see [`split`]).
pub(crate) fn fill(text: &str, width: usize, indent: &str) -> Option<String> {
    let mut chunks = split(&munge_whitespace(text))?;
    chunks.reverse();
    let mut lines: Vec<String> = Vec::new();
    let line_width = width as i64 - py_len(indent) as i64;
    while !chunks.is_empty() {
        let mut cur_line: Vec<String> = Vec::new();
        let mut cur_len: i64 = 0;
        if !lines.is_empty() && chunks.last().is_some_and(|c| is_blank(c)) {
            chunks.pop();
        }
        while let Some(chunk) = chunks.last() {
            let len = py_len(chunk) as i64;
            if cur_len + len > line_width {
                break;
            }
            cur_len += len;
            cur_line.extend(chunks.pop());
        }
        if chunks.last().is_some_and(|c| py_len(c) as i64 > line_width) {
            handle_long_word(&mut chunks, &mut cur_line, cur_len, line_width);
        }
        if cur_line.last().is_some_and(|c| is_blank(c)) {
            cur_line.pop();
        }
        if !cur_line.is_empty() {
            lines.push(format!("{indent}{}", cur_line.concat()));
        }
    }
    Some(lines.join("\n"))
}

/// `TextWrapper._handle_long_word` with `break_long_words` and `break_on_hyphens`.
fn handle_long_word(chunks: &mut [String], cur_line: &mut Vec<String>, cur_len: i64, width: i64) {
    let space_left = if width < 1 { 1 } else { width - cur_len };
    let space_left = usize::try_from(space_left).unwrap_or(0);
    let Some(chunk) = chunks.last_mut() else {
        return;
    };
    let mut end = space_left;
    if py_len(chunk) > space_left {
        // The last hyphen before `space_left`, if non-hyphens come before it.
        let hyphen = chunk
            .chars()
            .take(space_left)
            .enumerate()
            .filter(|&(_, c)| c == '-')
            .map(|(i, _)| i)
            .last();
        if let Some(h) = hyphen {
            if h > 0 && chunk.chars().take(h).any(|c| c != '-') {
                end = h + 1;
            }
        }
    }
    let (head, tail) = split_chars(chunk, end);
    cur_line.push(head);
    *chunk = tail;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_words_hyphens_and_dashes_like_python() {
        let chunks = split("Look, goof-ball -- use the -b option!").unwrap_or_default();
        assert_eq!(
            chunks,
            [
                "Look,", " ", "goof-", "ball", " ", "--", " ", "use", " ", "the", " ", "-b", " ",
                "option!"
            ]
        );
    }

    #[test]
    fn fill_indents_wraps_and_breaks_long_words() {
        let indent = " ".repeat(14);
        let text = "State 'pkg.installed' uses a deprecated argument.\n\tIt will be removed in a future release of Salt, please update your states.";
        let want = format!(
            "{indent}State 'pkg.installed' uses a deprecated argument.         It will\n\
             {indent}be removed in a future release of Salt, please update your states."
        );
        assert_eq!(fill(text, 80, &indent).as_deref(), Some(want.as_str()));
        let long = "x".repeat(70);
        assert_eq!(
            fill(&long, 20, "  ").as_deref(),
            Some(format!("  {0}\n  {0}\n  {0}\n  {1}", "x".repeat(18), "x".repeat(16)).as_str())
        );
        assert_eq!(fill("", 80, "  ").as_deref(), Some(""));
    }
}
