//! Nodegroup expansion: Salt's `nodegroup_comp` and `_nodegroup_regex`.
//!
//! `nodegroups: {name: "compound words" | [words]}` in the master config. Expanding a group
//! gives compound words:
//! - `N@other` inside a definition is expanded recursively and wrapped in `( … )`; a cycle
//!   logs 'Failed nodegroup expansion: illegal nested nodegroup "x"' and an unknown name
//!   'Failed nodegroup expansion: unknown nodegroup "x"', and each yields nothing.
//! - A definition with no operators, no `X@` prefix and no `*` is a plain list of names:
//!   it becomes `E@w1,w2,…` when a word holds a regex character (`( [ { \ ? } ] )`), else
//!   `L@w1,w2,…`.
//! - At the top level, a definition without nested groups comes back as written (not
//!   wrapped in parentheses): `N@grp` in a compound target is replaced by its bare words.

use std::collections::BTreeSet;

use rmpv::Value;

use crate::pyvalue;

const OPERATORS: [&str; 5] = ["and", "or", "not", "(", ")"];

/// Salt's `nodegroup_comp(name, nodegroups)`: the compound words `name` stands for, or an
/// empty list (after logging) when it cannot be expanded. `nodegroups` is the master's
/// `nodegroups` option (a map); anything else has no groups.
pub fn nodegroup_comp(name: &str, nodegroups: &Value) -> Vec<String> {
    let mut skip = BTreeSet::new();
    expand(name, nodegroups, &mut skip, true)
}

fn expand(
    name: &str,
    nodegroups: &Value,
    skip: &mut BTreeSet<String>,
    first_call: bool,
) -> Vec<String> {
    if skip.contains(name) {
        tracing::error!(
            "Failed nodegroup expansion: illegal nested nodegroup \"{}\"",
            name
        );
        return Vec::new();
    }
    let definition = match nodegroups {
        Value::Map(entries) => pyvalue::dict_get(entries, name),
        _ => None,
    };
    let Some(definition) = definition else {
        tracing::error!("Failed nodegroup expansion: unknown nodegroup \"{}\"", name);
        return Vec::new();
    };
    let words: Vec<String> = match definition {
        Value::Array(items) => items
            .iter()
            .map(|w| pyvalue::to_str(w).into_owned())
            .collect(),
        other => match pyvalue::text(other) {
            Some(s) => s.split_whitespace().map(str::to_owned).collect(),
            None => {
                let mut shown = String::new();
                pyvalue::repr(other, &mut shown);
                tracing::error!(
                    "Nodegroup '{}' ({}) is neither a string, list nor tuple",
                    name,
                    shown
                );
                return Vec::new();
            }
        },
    };

    skip.insert(name.to_owned());
    let mut expanded = false;
    let mut ret: Vec<String> = Vec::new();
    for word in &words {
        if OPERATORS.contains(&word.as_str()) {
            ret.push(word.clone());
        } else if word.chars().count() >= 3 && word.starts_with("N@") {
            expanded = true;
            ret.extend(expand(&word[2..], nodegroups, skip, false));
        } else {
            ret.push(word.clone());
        }
    }
    if !ret.is_empty() {
        ret.insert(0, "(".to_owned());
        ret.push(")".to_owned());
    }
    skip.remove(name);
    tracing::debug!("nodegroup_comp({}) => {:?}", name, ret);

    if expanded || !first_call {
        if !first_call {
            if let Some(joined) = plain_list(&words) {
                return vec![joined];
            }
        }
        ret
    } else {
        match plain_list(&words) {
            Some(joined) => vec![joined],
            None => {
                tracing::debug!(
                    "No nested nodegroups detected. Using original nodegroup definition: {:?}",
                    words
                );
                words
            }
        }
    }
}

/// `_nodegroup_regex`: the `E@`/`L@` word for a definition that is a plain list of names.
fn plain_list(words: &[String]) -> Option<String> {
    if words.iter().any(|w| OPERATORS.contains(&w.as_str())) {
        return None;
    }
    let typed = |w: &str| {
        let mut c = w.chars();
        matches!((c.next(), c.next()), (Some(l), Some('@')) if l.is_ascii_uppercase())
    };
    if words.iter().any(|w| w.contains('*') || typed(w)) {
        return None;
    }
    let regex_chars = ['(', '[', '{', '\\', '?', '}', ']', ')'];
    let prefix = if words.iter().any(|w| w.contains(regex_chars)) {
        "E@"
    } else {
        "L@"
    };
    Some(format!("{prefix}{}", words.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::json;

    // Expansions from Salt 3008.3's `nodegroup_comp`.
    const NODEGROUPS: &str = "{\"web\": \"L@web1,web2\", \"dbs\": \"G@role:db\", \"webdb\": \"N@web or N@dbs\", \"lst\": [\"web1\", \"db1\"], \"rx\": \"web[0-9]+\", \"bad\": \"N@bad\", \"expr\": \"G@os:Ubuntu or db1\", \"nested_list\": [\"N@lst\", \"or\", \"N@rx\"], \"empty\": \"\", \"star\": \"web*\", \"num\": 5, \"typed\": \"G@os:x web1\", \"deep\": \"N@webdb and not N@expr\", \"plain2\": \"a b c\"}";
    const EXPANSIONS: &[(&str, &[&str])] = &[
        ("web", &["L@web1,web2"]),
        ("dbs", &["G@role:db"]),
        (
            "webdb",
            &[
                "(",
                "(",
                "L@web1,web2",
                ")",
                "or",
                "(",
                "G@role:db",
                ")",
                ")",
            ],
        ),
        ("lst", &["L@web1,db1"]),
        ("rx", &["E@web[0-9]+"]),
        ("bad", &[]),
        ("expr", &["G@os:Ubuntu", "or", "db1"]),
        (
            "nested_list",
            &["(", "L@web1,db1", "or", "E@web[0-9]+", ")"],
        ),
        ("empty", &["L@"]),
        ("star", &["web*"]),
        ("num", &[]),
        ("typed", &["G@os:x", "web1"]),
        (
            "deep",
            &[
                "(",
                "(",
                "(",
                "L@web1,web2",
                ")",
                "or",
                "(",
                "G@role:db",
                ")",
                ")",
                "and",
                "not",
                "(",
                "G@os:Ubuntu",
                "or",
                "db1",
                ")",
                ")",
            ],
        ),
        ("plain2", &["L@a,b,c"]),
        ("missing", &[]),
    ];

    #[test]
    fn expansions_agree_with_salt() {
        let nodegroups = json(NODEGROUPS);
        for &(name, want) in EXPANSIONS {
            assert_eq!(nodegroup_comp(name, &nodegroups), want, "{name}");
        }
    }

    #[test]
    fn non_map_option_has_no_groups() {
        assert!(nodegroup_comp("web", &Value::Nil).is_empty());
    }
}
