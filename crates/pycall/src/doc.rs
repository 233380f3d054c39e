//! Docstrings as `sys.doc` and `salt-run -d` show them.

/// `salt.utils.doc.strip_rst` on one docstring: `.. code-block:: <lang>` lines go (with
/// the blank line after them), and the `note`, `warning`, `versionadded` and
/// `versionchanged` directives become plain words.
pub fn strip_rst(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(pos) = rest.find(".. code-block:: ") {
        let after = &rest[pos + ".. code-block:: ".len()..];
        let word = after.find(char::is_whitespace).unwrap_or(after.len());
        if word == 0 || !after[word..].starts_with('\n') {
            out.push_str(&rest[..pos + 1]);
            rest = &rest[pos + 1..];
            continue;
        }
        let start = rest[..pos].trim_end_matches(' ').len();
        out.push_str(&rest[..start]);
        let mut tail = &after[word..];
        for _ in 0..2 {
            match tail.strip_prefix('\n') {
                Some(t) => tail = t,
                None => break,
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out.replace(".. note::", "Note:")
        .replace(".. warning::", "Warning:")
        .replace(".. versionadded::", "New in version")
        .replace(".. versionchanged::", "Changed in version")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_rst_drops_code_blocks_and_renames_directives() {
        let doc = "\n    Intro\n\n    .. code-block:: bash\n\n        salt '*' x\n    .. versionadded:: 1\n    .. note::\n";
        assert_eq!(
            strip_rst(doc),
            "\n    Intro\n\n        salt '*' x\n    New in version 1\n    Note:\n"
        );
        assert_eq!(strip_rst("a .. code-block:: \nb"), "a .. code-block:: \nb");
        assert_eq!(
            strip_rst(".. warning:: x\n.. versionchanged:: 2"),
            "Warning: x\nChanged in version 2"
        );
    }
}
