//! The minion's own decision: is this publish for me? (`Minion._target_load` and the
//! `salt/matchers/*_match.py` modules.)
//!
//! The minion's answer is what counts: a minion that does not match never runs the job,
//! whatever the master expected. A matcher that would raise in Salt (a non-string target,
//! an invalid regex, grains that break `in_subnet`) makes the publish "not for me"; Salt's
//! exception escapes `_target_load` and the job is dropped, which has the same effect.

use rmpv::Value;

use crate::compound::{self, BoolTok};
use crate::ipcidr::IpTarget;
use crate::nodegroup::nodegroup_comp;
use crate::pyre::RegexCache;
use crate::subdict::{MatchMode, SubdictMatcher};
use crate::{fnmatch, pyvalue, DEFAULT_DELIMITER};

/// What a minion knows about itself when it decides.
#[derive(Debug, Clone, Copy)]
pub struct MinionFacts<'a> {
    /// The minion id (`opts["id"]`).
    pub id: &'a str,
    /// The minion's grains (a map).
    pub grains: &'a Value,
    /// The minion's pillar (a map; an empty or non-map pillar matches nothing).
    pub pillar: &'a Value,
    /// The minion's `nodegroups` option, used by `N@` in a compound target. Minions normally
    /// have none (the CLI expands nodegroups before publishing).
    pub nodegroups: Option<&'a Value>,
}

/// `Minion._target_load`'s matching step: does the publish (`tgt`, `tgt_type`, `delimiter`
/// from the load) target this minion?
///
/// - `tgt_type: None` (no `tgt_type` key) is a glob.
/// - An unknown `tgt_type` — including `range`, `nodegroup` and Salt 3008's resource types,
///   which Halite does not implement — is not for this minion.
/// - `delimiter` is honoured only for `grain`, `grain_pcre` and `pillar`, as in Salt;
///   `pillar_pcre` and `pillar_exact` always use `:`.
pub fn minion_match(
    facts: &MinionFacts<'_>,
    tgt: &Value,
    tgt_type: Option<&str>,
    delimiter: Option<&str>,
    regexes: &RegexCache,
) -> bool {
    let tgt_type = tgt_type.unwrap_or("glob");
    let delimiter = match tgt_type {
        "grain" | "grain_pcre" | "pillar" => delimiter.unwrap_or(DEFAULT_DELIMITER),
        _ => DEFAULT_DELIMITER,
    };
    match tgt_type {
        "compound" => compound_match(facts, tgt, regexes),
        other => match Engine::from_tgt_type(other) {
            Some(engine) => engine.matches(facts, tgt, delimiter, regexes).truthy(),
            None => false,
        },
    }
}

/// The single-engine matchers, by compound letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Glob,
    Pcre,
    List,
    Grain,
    GrainPcre,
    Pillar,
    PillarPcre,
    PillarExact,
    Ipcidr,
    ManagingMinion,
    /// `T@`: a Halite minion manages no Salt resources, so `resource_match` is false.
    Resource,
}

/// A matcher's return value as the compound evaluator renders it with `str()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Bool(bool),
    /// `ipcidr_match` returns `[]` for an invalid target.
    EmptyList,
    /// The matcher raised.
    Raised,
}

impl Outcome {
    fn truthy(self) -> bool {
        self == Outcome::Bool(true)
    }
}

impl Engine {
    fn from_tgt_type(tgt_type: &str) -> Option<Self> {
        Some(match tgt_type {
            "glob" => Engine::Glob,
            "pcre" => Engine::Pcre,
            "list" => Engine::List,
            "grain" => Engine::Grain,
            "grain_pcre" => Engine::GrainPcre,
            "pillar" => Engine::Pillar,
            "pillar_pcre" => Engine::PillarPcre,
            "pillar_exact" => Engine::PillarExact,
            "ipcidr" => Engine::Ipcidr,
            "managing_minion" => Engine::ManagingMinion,
            _ => return None,
        })
    }

    /// The minion-side engine for a compound letter (`compound_match`'s `ref` table, minus
    /// `N`, which is expanded, and `R`, which needs `seco.range`).
    fn from_letter(letter: char) -> Option<Self> {
        Some(match letter {
            'G' => Engine::Grain,
            'P' => Engine::GrainPcre,
            'I' => Engine::Pillar,
            'J' => Engine::PillarPcre,
            'L' => Engine::List,
            'S' => Engine::Ipcidr,
            'E' => Engine::Pcre,
            'M' => Engine::ManagingMinion,
            'T' => Engine::Resource,
            _ => return None,
        })
    }

    fn matches(
        self,
        facts: &MinionFacts<'_>,
        tgt: &Value,
        delimiter: &str,
        regexes: &RegexCache,
    ) -> Outcome {
        match self {
            Engine::Glob => Outcome::Bool(
                pyvalue::text(tgt).is_some_and(|pattern| fnmatch::fnmatch(facts.id, pattern)),
            ),
            Engine::Pcre => match pyvalue::text(tgt) {
                Some(pattern) => match regexes.re_match(pattern, facts.id) {
                    Ok(b) => Outcome::Bool(b),
                    Err(err) => {
                        tracing::error!("pcre target {:?} failed: {}", pattern, err);
                        Outcome::Raised
                    }
                },
                None => Outcome::Raised,
            },
            Engine::List => list_match(facts.id, tgt),
            Engine::ManagingMinion => Outcome::Bool(pyvalue::text(tgt) == Some(facts.id)),
            Engine::Resource => Outcome::Bool(false),
            Engine::Grain => subdict_engine(
                facts.grains,
                tgt,
                delimiter,
                MatchMode::Glob,
                "grains",
                regexes,
            ),
            Engine::GrainPcre => subdict_engine(
                facts.grains,
                tgt,
                delimiter,
                MatchMode::Regex,
                "grains pcre",
                regexes,
            ),
            Engine::Pillar => subdict_engine(
                facts.pillar,
                tgt,
                delimiter,
                MatchMode::Glob,
                "pillar",
                regexes,
            ),
            Engine::PillarPcre => subdict_engine(
                facts.pillar,
                tgt,
                delimiter,
                MatchMode::Regex,
                "pillar PCRE",
                regexes,
            ),
            Engine::PillarExact => subdict_engine(
                facts.pillar,
                tgt,
                delimiter,
                MatchMode::Exact,
                "pillar",
                regexes,
            ),
            Engine::Ipcidr => match IpTarget::parse(tgt) {
                None => {
                    tracing::error!("Invalid IP/CIDR target: {}", pyvalue::to_str(tgt));
                    Outcome::EmptyList
                }
                Some(target) => match target.matches_grains(facts.grains) {
                    Ok(b) => Outcome::Bool(b),
                    Err(_) => Outcome::Raised,
                },
            },
        }
    }
}

/// `list_match.match`.
fn list_match(id: &str, tgt: &Value) -> Outcome {
    if let Some(list) = pyvalue::text(tgt) {
        let hit = list.contains(&format!(",{id},"))
            || list
                .strip_prefix(id)
                .is_some_and(|rest| rest.starts_with(','))
            || list
                .strip_suffix(id)
                .is_some_and(|rest| rest.ends_with(','))
            || list == id;
        return Outcome::Bool(hit);
    }
    Outcome::Bool(match tgt {
        Value::Array(items) => items.iter().any(|i| pyvalue::text(i) == Some(id)),
        // `",id," in dict` and then `id in dict`: key membership.
        Value::Map(entries) => {
            pyvalue::dict_get(entries, &format!(",{id},")).is_some()
                || pyvalue::dict_get(entries, id).is_some()
        }
        _ => false,
    })
}

/// `grain_match` / `pillar_match` and friends: the delimiter must occur in the target.
fn subdict_engine(
    data: &Value,
    tgt: &Value,
    delimiter: &str,
    mode: MatchMode,
    what: &str,
    regexes: &RegexCache,
) -> Outcome {
    let Some(expr) = pyvalue::text(tgt) else {
        return Outcome::Raised;
    };
    tracing::debug!("{} target: {}", what, expr);
    if !expr.contains(delimiter) {
        tracing::error!(
            "Got insufficient arguments for {} match statement from master",
            what
        );
        return Outcome::Bool(false);
    }
    if delimiter.is_empty() {
        // Python: `expr.split("")` raises ValueError.
        return Outcome::Raised;
    }
    Outcome::Bool(SubdictMatcher::new(expr, delimiter, mode, regexes).matches(data))
}

/// `compound_match.match`.
fn compound_match(facts: &MinionFacts<'_>, tgt: &Value, regexes: &RegexCache) -> bool {
    let mut words: Vec<String> = match tgt {
        Value::Array(items) => {
            let mut words = Vec::with_capacity(items.len());
            for item in items {
                match pyvalue::text(item) {
                    Some(w) => words.push(w.to_owned()),
                    // `parse_target` on a non-string raises.
                    None => return false,
                }
            }
            words
        }
        other => match pyvalue::text(other) {
            Some(s) => s.split_whitespace().map(str::to_owned).collect(),
            None => {
                tracing::error!("Compound target received that is neither string, list nor tuple");
                return false;
            }
        },
    };
    words.reverse();
    let shown = pyvalue::to_str(tgt);
    tracing::debug!("compound_match: {} ? {}", facts.id, shown);
    let empty = Value::Map(Vec::new());
    let nodegroups = facts.nodegroups.unwrap_or(&empty);

    let mut results: Vec<BoolTok> = Vec::new();
    while let Some(word) = words.pop() {
        let op = match word.as_str() {
            "and" => Some(BoolTok::And),
            "or" => Some(BoolTok::Or),
            "not" => Some(BoolTok::Not),
            "(" => Some(BoolTok::Open),
            ")" => Some(BoolTok::Close),
            _ => None,
        };
        if let Some(op) = op {
            match results.last() {
                Some(last) => {
                    if *last == BoolTok::Open && matches!(op, BoolTok::And | BoolTok::Or) {
                        tracing::error!("Invalid beginning operator after \"(\": {}", word);
                        return false;
                    }
                    if op == BoolTok::Not
                        && !matches!(last, BoolTok::And | BoolTok::Or | BoolTok::Open)
                    {
                        results.push(BoolTok::And);
                    }
                    results.push(op);
                }
                None => {
                    if !matches!(op, BoolTok::Open | BoolTok::Not) {
                        tracing::error!("Invalid beginning operator: {}", word);
                        return false;
                    }
                    results.push(op);
                }
            }
            continue;
        }
        let target = compound::parse_target(&word);
        let Some(letter) = target.engine else {
            results.push(render(Outcome::Bool(fnmatch::fnmatch(facts.id, &word))));
            continue;
        };
        if letter == 'N' {
            let expanded = nodegroup_comp(target.pattern, nodegroups);
            words.extend(expanded.into_iter().rev());
            continue;
        }
        let Some(engine) = Engine::from_letter(letter) else {
            tracing::error!(
                "Unrecognized target engine \"{}\" for target expression \"{}\"",
                letter,
                word
            );
            return false;
        };
        let mut delim_buf = [0u8; 4];
        let delimiter = match target.delimiter {
            Some(d) => &*d.encode_utf8(&mut delim_buf),
            None => DEFAULT_DELIMITER,
        };
        let outcome = engine.matches(facts, &Value::from(target.pattern), delimiter, regexes);
        if outcome == Outcome::Raised {
            return false;
        }
        results.push(render(outcome));
    }
    let rendered: Vec<&str> = results.iter().map(|t| t.text()).collect();
    let rendered = rendered.join(" ");
    tracing::debug!(
        "compound_match {} ? \"{}\" => \"{}\"",
        facts.id,
        shown,
        rendered
    );
    match compound::eval_bool(&results) {
        Ok(b) => b,
        Err(_) => {
            tracing::error!(
                "Invalid compound target: {} for results: {}",
                shown,
                rendered
            );
            false
        }
    }
}

fn render(outcome: Outcome) -> BoolTok {
    match outcome {
        Outcome::Bool(true) => BoolTok::Value(true, "True"),
        Outcome::Bool(false) | Outcome::Raised => BoolTok::Value(false, "False"),
        Outcome::EmptyList => BoolTok::Value(false, "[]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{json, Fixture};

    /// `(tgt as JSON, tgt_type, delimiter, accepting minions)`.
    type Case = (
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        &'static [&'static str],
    );

    /// `(tgt as JSON, tgt_type, delimiter, minions that accept)`, from Salt 3008.3's
    /// matchers loaded with each fixture minion's opts.
    const MINION_CASES: &[Case] = &[
        ("\"web*\"", Some("glob"), None, &["web1", "web2"]),
        ("\"web1,db1\"", Some("glob"), None, &[]),
        ("\"WEB*\"", None, None, &[]),
        ("5", Some("glob"), None, &[]),
        ("\"web\\\\d\"", Some("pcre"), None, &["web1", "web2"]),
        ("\"(\"", Some("pcre"), None, &[]),
        ("\"(?i)WEB\"", Some("pcre"), None, &["web1", "web2", "Web3"]),
        ("\"web1,db1\"", Some("list"), None, &["web1", "db1"]),
        ("\"xweb1,db1\"", Some("list"), None, &["db1"]),
        ("\"db1,web1\"", Some("list"), None, &["web1", "db1"]),
        ("\"a,web1,b\"", Some("list"), None, &["web1"]),
        ("\"web1\"", Some("list"), None, &["web1"]),
        ("[\"web1\", \"db1\"]", Some("list"), None, &["web1", "db1"]),
        ("\"web1, db1\"", Some("list"), None, &["web1"]),
        ("\"os:redhat\"", Some("grain"), None, &["web1", "Web3"]),
        ("\"os\"", Some("grain"), None, &[]),
        ("\"os|RedHat\"", Some("grain"), Some("|"), &["web1", "Web3"]),
        ("\"os:RedHat\"", Some("grain"), Some("|"), &[]),
        (
            "\"role:web\"",
            Some("grain"),
            None,
            &["web1", "web2", "Web3"],
        ),
        (
            "\"os:(RedHat|CentOS)\"",
            Some("grain_pcre"),
            None,
            &["web1", "db1", "Web3"],
        ),
        ("\"os:\\\\D+\"", Some("grain_pcre"), None, &[]),
        (
            "\"env:prod*\"",
            Some("pillar"),
            None,
            &["web1", "web2", "db1"],
        ),
        ("\"env:prod*\"", Some("pillar_exact"), None, &["db1"]),
        ("\"env|prod*\"", Some("pillar_exact"), Some("|"), &[]),
        ("\"env:^prod$\"", Some("pillar_pcre"), None, &["web1"]),
        ("\"env|^prod$\"", Some("pillar_pcre"), Some("|"), &[]),
        ("\"env|prod\"", Some("pillar"), Some("|"), &["web1"]),
        ("\"10.0.0.0/24\"", Some("ipcidr"), None, &["web1", "web2"]),
        ("\"10.0.0.11\"", Some("ipcidr"), None, &["web1"]),
        ("\"nonsense\"", Some("ipcidr"), None, &[]),
        ("\"192.168.1.0/24\"", Some("ipcidr"), None, &["Web3"]),
        ("\"192.168.1.3\"", Some("ipcidr"), None, &["Web3"]),
        ("\"2001:db8::/32\"", Some("ipcidr"), None, &["db1"]),
        ("\"10.0.0.1/24\"", Some("ipcidr"), None, &[]),
        (
            "\"* and not G@os:RedHat\"",
            Some("compound"),
            None,
            &["web2", "db1", "other.example.com"],
        ),
        ("\"L@nope and web1\"", Some("compound"), None, &[]),
        ("\"web1 or db1\"", Some("compound"), None, &["web1", "db1"]),
        ("\"(web1 or db1)\"", Some("compound"), None, &[]),
        (
            "\"( web1 or db1 )\"",
            Some("compound"),
            None,
            &["web1", "db1"],
        ),
        ("\"web1 or ( db1\"", Some("compound"), None, &[]),
        ("\"web1 )\"", Some("compound"), None, &[]),
        ("\"and web1\"", Some("compound"), None, &[]),
        ("\"web1 and\"", Some("compound"), None, &[]),
        ("\"not not web1\"", Some("compound"), None, &[]),
        (
            "\"not web1\"",
            Some("compound"),
            None,
            &["web2", "db1", "Web3", "other.example.com"],
        ),
        ("\"web1 not db1\"", Some("compound"), None, &["web1"]),
        (
            "\"G|@os|RedHat\"",
            Some("compound"),
            None,
            &["web1", "Web3"],
        ),
        ("\"foo@bar\"", Some("compound"), None, &[]),
        ("\"X@foo\"", Some("compound"), None, &[]),
        ("\"R@foo\"", Some("compound"), None, &[]),
        ("\"( and web1 )\"", Some("compound"), None, &[]),
        ("\"web1 or db1 ( x )\"", Some("compound"), None, &["web1"]),
        ("\"web1 and db1 ( x )\"", Some("compound"), None, &[]),
        ("\"web1 ( db1 )\"", Some("compound"), None, &[]),
        ("\"( )\"", Some("compound"), None, &[]),
        (
            "\"not ( )\"",
            Some("compound"),
            None,
            &["web1", "web2", "db1", "Web3", "other.example.com"],
        ),
        ("\"S@nonsense or web1\"", Some("compound"), None, &["web1"]),
        ("\"S@nonsense\"", Some("compound"), None, &[]),
        ("\"N@web or db1\"", Some("compound"), None, &[]),
        ("\"E@( or web1\"", Some("compound"), None, &[]),
        (
            "\"E@web\\\\d and not E@web1\"",
            Some("compound"),
            None,
            &["web2"],
        ),
        (
            "\"P@os:red.* and I@app:tier:front\"",
            Some("compound"),
            None,
            &["web1"],
        ),
        ("\"M@web1\"", Some("compound"), None, &["web1"]),
        ("\"T@x:y or web1\"", Some("compound"), None, &["web1"]),
        ("\"\"", Some("compound"), None, &[]),
        (
            "[\"web1\", \"or\", \"db1\"]",
            Some("compound"),
            None,
            &["web1", "db1"],
        ),
        ("5", Some("compound"), None, &[]),
        ("\"web1,db1\"", Some("compound"), None, &[]),
        (
            "\"L@web1,db1 and not G@os:CentOS\"",
            Some("compound"),
            None,
            &["web1"],
        ),
        (
            "\"J@env:prod.* or I@env:dev\"",
            Some("compound"),
            None,
            &["web1", "web2", "db1", "Web3"],
        ),
        (
            "\"G@nested:a:b\"",
            Some("compound"),
            None,
            &["web1", "web2"],
        ),
        ("\"G@os\"", Some("compound"), None, &[]),
        (
            "\"S@10.0.0.0/24 or S@192.168.1.3\"",
            Some("compound"),
            None,
            &["web1", "web2", "Web3"],
        ),
        ("\"web1\"", Some("range"), None, &[]),
        ("\"web1\"", Some("nodegroup"), None, &[]),
        ("\"web1\"", Some("bogus"), None, &[]),
    ];

    fn accepting(
        fx: &Fixture,
        tgt: &Value,
        tgt_type: Option<&str>,
        delimiter: Option<&str>,
    ) -> Vec<String> {
        let regexes = RegexCache::default();
        let none = Value::Map(Vec::new());
        ["web1", "web2", "db1", "Web3", "other.example.com"]
            .into_iter()
            .filter(|id| {
                let facts = MinionFacts {
                    id,
                    grains: fx.grains.get(*id).unwrap_or(&none),
                    pillar: fx.pillar.get(*id).unwrap_or(&none),
                    nodegroups: None,
                };
                minion_match(&facts, tgt, tgt_type, delimiter, &regexes)
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn decisions_agree_with_salt_matchers() {
        let fx = Fixture::load();
        let failures: Vec<String> = MINION_CASES
            .iter()
            .filter_map(|&(tgt, tgt_type, delimiter, want)| {
                let got = accepting(&fx, &json(tgt), tgt_type, delimiter);
                (got != want).then(|| {
                    format!("{tgt} {tgt_type:?} {delimiter:?}: got {got:?}, Salt {want:?}")
                })
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    macro_rules! decides {
        ($name:ident, $tgt:expr, $tgt_type:expr, [$($id:expr),*]) => {
            #[test]
            fn $name() {
                let fx = Fixture::load();
                let want: Vec<String> = vec![$($id.to_owned()),*];
                assert_eq!(accepting(&fx, &Value::from($tgt), Some($tgt_type), None), want);
            }
        };
    }

    decides!(
        glob_is_not_comma_split_on_the_minion,
        "web1,db1",
        "glob",
        []
    );
    decides!(
        parenthesis_glued_to_a_word_is_invalid,
        "(web1 or db1)",
        "compound",
        []
    );
    decides!(
        separate_parentheses_work,
        "( web1 or db1 )",
        "compound",
        ["web1", "db1"]
    );
    decides!(
        unclosed_parenthesis_is_invalid_on_the_minion,
        "web1 or ( db1",
        "compound",
        []
    );
    decides!(
        not_after_a_term_implies_and,
        "web1 not db1",
        "compound",
        ["web1"]
    );
    decides!(double_not_is_invalid, "not not web1", "compound", []);
    decides!(
        leading_binary_operator_is_invalid,
        "and web1",
        "compound",
        []
    );
    decides!(
        custom_grain_delimiter_in_compound,
        "G|@os|RedHat",
        "compound",
        ["web1", "Web3"]
    );
    decides!(
        word_with_unknown_engine_letter_is_a_glob,
        "foo@bar",
        "compound",
        []
    );
    decides!(
        range_engine_is_unrecognised,
        "R@foo or web1",
        "compound",
        []
    );
    decides!(
        resource_engine_matches_nothing,
        "T@x:y or web1",
        "compound",
        ["web1"]
    );
    decides!(
        invalid_ipcidr_is_falsy_but_not_an_error,
        "S@nonsense or web1",
        "compound",
        ["web1"]
    );
    decides!(grain_without_delimiter_never_matches, "os", "grain", []);
    decides!(unknown_target_type_is_not_for_me, "web1", "range", []);

    #[test]
    fn delimiter_applies_to_grain_and_pillar_but_not_pillar_pcre() {
        let fx = Fixture::load();
        assert_eq!(
            accepting(&fx, &Value::from("os|RedHat"), Some("grain"), Some("|")),
            ["web1", "Web3"]
        );
        assert_eq!(
            accepting(&fx, &Value::from("env|prod"), Some("pillar"), Some("|")),
            ["web1"]
        );
        assert!(accepting(
            &fx,
            &Value::from("env|^prod$"),
            Some("pillar_pcre"),
            Some("|")
        )
        .is_empty());
    }

    #[test]
    fn missing_tgt_type_is_a_glob() {
        let fx = Fixture::load();
        assert_eq!(
            accepting(&fx, &Value::from("web*"), None, None),
            ["web1", "web2"]
        );
    }

    #[test]
    fn nodegroups_in_minion_config_expand() {
        let grains = Value::Map(Vec::new());
        let nodegroups = json(r#"{"web": "L@web1,web2"}"#);
        let facts = MinionFacts {
            id: "web2",
            grains: &grains,
            pillar: &grains,
            nodegroups: Some(&nodegroups),
        };
        let regexes = RegexCache::default();
        assert!(minion_match(
            &facts,
            &Value::from("N@web"),
            Some("compound"),
            None,
            &regexes
        ));
        let bare = MinionFacts {
            nodegroups: None,
            ..facts
        };
        assert!(!minion_match(
            &bare,
            &Value::from("N@web"),
            Some("compound"),
            None,
            &regexes
        ));
    }
}
