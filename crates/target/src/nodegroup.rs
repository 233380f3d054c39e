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

use crate::{pyvalue, Error};

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

/// `LocalClient._prep_pub`'s nodegroup resolution, so that minions never have to know the
/// master's nodegroups: a `nodegroup` target becomes the compound expression of its group,
/// and in a `compound` target every word `N@<name>` (longer than `N@`) is replaced by the
/// words of its group. Words are split on whitespace (a list target gives its items) and
/// joined with single spaces, as Salt joins them.
///
/// `Ok(None)`: nothing to resolve (another target type); `Ok(Some(expr))`: publish `expr`
/// as a `compound` target. A group `nodegroups` does not define is
/// [`Error::UnknownNodegroup`] (Salt's client raises `SaltInvocationError`); a group that
/// is defined but cannot be expanded gives no words, as `nodegroup_comp` logs and does.
pub fn resolve_nodegroups(
    tgt: &Value,
    tgt_type: &str,
    nodegroups: &Value,
) -> Result<Option<String>, Error> {
    let known = |name: &str| -> Result<(), Error> {
        match nodegroups {
            Value::Map(entries) if pyvalue::dict_get(entries, name).is_some() => Ok(()),
            _ => Err(Error::UnknownNodegroup(name.to_owned())),
        }
    };
    let words: Vec<String> = match tgt_type {
        "nodegroup" => {
            let name = pyvalue::to_str(tgt);
            known(&name)?;
            nodegroup_comp(&name, nodegroups)
        }
        "compound" => match tgt {
            Value::Array(items) => items
                .iter()
                .map(|w| pyvalue::to_str(w).into_owned())
                .collect(),
            other => pyvalue::to_str(other)
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        },
        _ => return Ok(None),
    };
    let mut resolved = Vec::with_capacity(words.len());
    for word in words {
        match word.strip_prefix("N@").filter(|name| !name.is_empty()) {
            Some(name) => {
                known(name)?;
                resolved.extend(nodegroup_comp(name, nodegroups));
            }
            None => resolved.push(word),
        }
    }
    Ok(Some(resolved.join(" ")))
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
    fn a_nodegroup_target_resolves_to_its_compound_expression() {
        let nodegroups = json(NODEGROUPS);
        let resolve = |tgt: &str, tgt_type: &str| {
            resolve_nodegroups(&Value::from(tgt), tgt_type, &nodegroups)
        };
        assert_eq!(resolve("web", "nodegroup"), Ok(Some("L@web1,web2".into())));
        assert_eq!(
            resolve("expr", "nodegroup"),
            Ok(Some("G@os:Ubuntu or db1".into()))
        );
        assert_eq!(
            resolve("webdb", "nodegroup"),
            Ok(Some("( ( L@web1,web2 ) or ( G@role:db ) )".into()))
        );
        // A group whose expansion fails is known: it resolves to nothing, as in Salt.
        assert_eq!(resolve("bad", "nodegroup"), Ok(Some(String::new())));
        assert_eq!(
            resolve("nope", "nodegroup"),
            Err(Error::UnknownNodegroup("nope".into()))
        );
    }

    #[test]
    fn n_at_words_of_a_compound_target_are_replaced_by_their_groups() {
        let nodegroups = json(NODEGROUPS);
        let resolve = |tgt: &Value| resolve_nodegroups(tgt, "compound", &nodegroups);
        assert_eq!(
            resolve(&Value::from("N@web  or\tdb1")),
            Ok(Some("L@web1,web2 or db1".into()))
        );
        assert_eq!(
            resolve(&Value::from("N@lst and not N@rx")),
            Ok(Some("L@web1,db1 and not E@web[0-9]+".into()))
        );
        // Only whole words: `(N@web` and a bare `N@` stay as written.
        assert_eq!(
            resolve(&Value::from("(N@web) or N@")),
            Ok(Some("(N@web) or N@".into()))
        );
        let list = Value::Array(vec![
            Value::from("N@web"),
            Value::from("or"),
            Value::from("x"),
        ]);
        assert_eq!(resolve(&list), Ok(Some("L@web1,web2 or x".into())));
        assert_eq!(
            resolve(&Value::from("web1 or N@nope")),
            Err(Error::UnknownNodegroup("nope".into()))
        );
        assert_eq!(
            resolve_nodegroups(&Value::from("N@web"), "glob", &nodegroups),
            Ok(None)
        );
        assert_eq!(
            resolve_nodegroups(&Value::from("N@web"), "compound", &Value::Nil),
            Err(Error::UnknownNodegroup("web".into()))
        );
    }

    #[test]
    fn non_map_option_has_no_groups() {
        assert!(nodegroup_comp("web", &Value::Nil).is_empty());
    }
}
