//! The master's expectation: which accepted minions a target should reach
//! (`salt.utils.minions.CkMinions.check_minions`).
//!
//! The result is used for waiting and for "did not return" reports; the publish itself
//! goes to every connected minion, and each minion decides for itself ([`crate::minion`]).
//! The two can disagree, and Salt's disagreements are kept: a glob is comma-split here but
//! not on the minion, an unclosed `(` in a compound target is auto-closed here but invalid
//! on the minion, and minions without cached grains are dropped from grain/pillar results
//! but kept in `ipcidr` results.
//!
//! Only **accepted** keys are candidates. The caller owns the accepted set and the minion
//! data cache ([`MinionDataCache`]); a check borrows both, walks the accepted ids once per
//! engine, fetches cached data only for the minions an engine needs, and returns ids
//! borrowed from the accepted set.
//!
//! [`CkMinions::check_among`] answers the same question for a few candidates (which of
//! a request's minions an ACL entry's target reaches) at the cost of the candidates, not
//! of every accepted minion: the engines walk the candidates instead of the accepted ids.
//!
//! Differences from Salt 3008.3, all deliberate:
//! - Salt 3008's resource extensions are absent: glob targets are not augmented with
//!   resource ids, `-L` does not resolve bare resource ids, a `T@` word expects nobody
//!   (Salt expects the resource id it names) and the `resource` target type fails.
//!   `M@`/`managing_minion` is a glob over minion ids, as in Salt.
//! - With `greedy=false`, Salt's candidates are all ids listed in the grains cache, even
//!   ids whose key is no longer accepted; here they are limited to accepted ids.
//! - Results are deduplicated and sorted case-insensitively (Salt returns set order, and
//!   duplicates when several comma-separated globs or list items name the same minion).
//!   `missing` keeps Salt's order and duplicates.
//! - A regex that exceeds [`crate::pyre::BACKTRACK_LIMIT`] fails the check like an invalid
//!   one (Python would keep going).

use std::borrow::Cow;
use std::collections::{btree_set, BTreeSet, HashSet};

use rmpv::Value;

use crate::compound::{self, SetTok};
use crate::fnmatch;
use crate::ipcidr::IpTarget;
use crate::nodegroup::nodegroup_comp;
use crate::pyre::{Anchor, RegexCache};
use crate::pyvalue;
use crate::subdict::{MatchMode, SubdictMatcher};

/// A bank of the master's minion data cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bank {
    /// `grains/<id>`: written when the minion asks for its pillar.
    Grains,
    /// `pillar/<id>`.
    Pillar,
}

/// The master's minion data cache, as targeting reads it.
pub trait MinionDataCache {
    /// Whether the grains bank lists `id` (Salt's `cache.list("grains")`). Called once per
    /// accepted minion for grain, pillar and ipcidr targets, so it should be cheap.
    fn has_grains(&self, id: &str) -> bool;
    /// The cached grains or pillar of `id`, `None` when there is no entry. Borrow when the
    /// data is in memory; return an owned value when it had to be loaded.
    fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>>;
}

/// A cache with nothing in it: every grain and pillar target expects no minion, `ipcidr`
/// expects every accepted minion.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyCache;

impl MinionDataCache for EmptyCache {
    fn has_grains(&self, _id: &str) -> bool {
        false
    }

    fn fetch(&self, _bank: Bank, _id: &str) -> Option<Cow<'_, Value>> {
        None
    }
}

/// What the master expects from a publish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckResult<'a> {
    /// Expected minion ids, deduplicated, sorted case-insensitively.
    pub minions: Vec<&'a str>,
    /// List-target ids without an accepted key (Salt's `missing`), in target order.
    pub missing: Vec<String>,
}

/// Salt's `CkMinions`: everything `check_minions` reads, borrowed for one or more checks.
#[derive(Clone, Copy)]
pub struct CkMinions<'a> {
    /// Ids with an accepted key.
    pub accepted: &'a BTreeSet<String>,
    /// The minion data cache.
    pub cache: &'a dyn MinionDataCache,
    /// Compiled-regex cache for `pcre`, `grain_pcre` and `pillar_pcre`.
    pub regexes: &'a RegexCache,
    /// The master's `minion_data_cache` option (Salt's default is `true`). When off, grain
    /// and pillar targets expect every accepted minion and compound targets expect none.
    pub minion_data_cache: bool,
    /// The master's `nodegroups` option, for `N@` words and the `nodegroup` target type.
    pub nodegroups: Option<&'a Value>,
}

impl std::fmt::Debug for CkMinions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CkMinions")
            .field("accepted", &self.accepted.len())
            .field("minion_data_cache", &self.minion_data_cache)
            .field("nodegroups", &self.nodegroups)
            .finish_non_exhaustive()
    }
}

/// Salt raised inside `check_minions`; the whole check yields nothing.
struct Raised;

/// One engine's answer.
#[derive(Default)]
struct Part<'a> {
    minions: Vec<&'a str>,
    missing: Vec<String>,
}

impl<'a> Part<'a> {
    fn of(minions: Vec<&'a str>) -> Self {
        Self {
            minions,
            missing: Vec::new(),
        }
    }
}

impl<'a> CkMinions<'a> {
    /// `check_minions(expr, tgt_type, delimiter, greedy)`.
    ///
    /// `delimiter` applies to the top-level `grain`, `grain_pcre` and `pillar*` types
    /// (compound words carry their own). Every publish in Salt uses `greedy=true`; the mine
    /// uses `false`. Failures are logged as Salt logs them and give an empty result.
    pub fn check_minions(
        &self,
        tgt: &Value,
        tgt_type: &str,
        delimiter: &str,
        greedy: bool,
    ) -> CheckResult<'a> {
        let eval = Eval {
            ck: *self,
            ids: Universe::Accepted(self.accepted),
        };
        match eval.run(tgt, tgt_type, delimiter, greedy) {
            Some(part) => {
                let mut minions = part.minions;
                minions.sort_by_cached_key(|id| (id.to_lowercase(), *id));
                minions.dedup();
                CheckResult {
                    minions,
                    missing: part.missing,
                }
            }
            None => CheckResult::default(),
        }
    }

    /// [`CkMinions::check_minions`] with `candidates` in place of the accepted ids: which
    /// of `candidates` the target reaches, in no particular order, each at most as often
    /// as it is a candidate (once when the candidates are distinct). Nothing is sorted and
    /// `missing` is not computed.
    ///
    /// `candidates` must be accepted ids (typically a target's expected minions); a
    /// candidate that is not accepted is evaluated as if it were. Every engine decides a
    /// minion from that minion alone, and a compound `not` is relative to the candidates,
    /// so for every candidate the answer is the one `check_minions` gives, at the cost of
    /// the candidates only, with one difference: an engine failure caused by a minion that
    /// is not a candidate (a regex over the backtracking limit on its id, an `ipv4` grain
    /// that is not an address under `S@`) does not empty the result. A failure caused by a
    /// candidate empties it, as in `check_minions`.
    pub fn check_among<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        delimiter: &str,
        greedy: bool,
        candidates: &'c [String],
    ) -> Vec<&'c str> {
        let eval = Eval {
            ck: *self,
            ids: Universe::Among(candidates),
        };
        eval.run(tgt, tgt_type, delimiter, greedy)
            .map(|part| part.minions)
            .unwrap_or_default()
    }
}

/// The ids an evaluation considers.
#[derive(Clone, Copy)]
enum Universe<'u> {
    /// Every accepted id ([`CkMinions::check_minions`]).
    Accepted(&'u BTreeSet<String>),
    /// The caller's candidates ([`CkMinions::check_among`]).
    Among(&'u [String]),
}

impl<'u> Universe<'u> {
    fn iter(self) -> Ids<'u> {
        match self {
            Self::Accepted(set) => Ids::Set(set.iter()),
            Self::Among(list) => Ids::List(list.iter()),
        }
    }
}

/// The ids of a [`Universe`], in its order.
enum Ids<'u> {
    Set(btree_set::Iter<'u, String>),
    List(std::slice::Iter<'u, String>),
}

impl<'u> Iterator for Ids<'u> {
    type Item = &'u str;

    fn next(&mut self) -> Option<&'u str> {
        match self {
            Self::Set(it) => it.next().map(String::as_str),
            Self::List(it) => it.next().map(String::as_str),
        }
    }
}

/// One evaluation: what a check reads (`ck`) and the ids it considers (`ids`); every id
/// it answers is borrowed from `ids`.
struct Eval<'a, 'u> {
    ck: CkMinions<'a>,
    ids: Universe<'u>,
}

impl<'u> Eval<'_, 'u> {
    /// The engines' answer, or `None` (logged as Salt logs it) when Salt would raise.
    fn run(&self, tgt: &Value, tgt_type: &str, delimiter: &str, greedy: bool) -> Option<Part<'u>> {
        let empty = Value::from("");
        let expr = if matches!(tgt, Value::Nil) {
            &empty
        } else {
            tgt
        };
        let result = match tgt_type {
            "glob" | "managing_minion" => self.glob(expr).map(Part::of),
            "pcre" => self.pcre(expr).map(Part::of),
            "list" => self.list(expr, false),
            "grain" => self.cache_match(expr, delimiter, greedy, Bank::Grains, MatchMode::Glob),
            "grain_pcre" => {
                self.cache_match(expr, delimiter, greedy, Bank::Grains, MatchMode::Regex)
            }
            "pillar" => self.cache_match(expr, delimiter, greedy, Bank::Pillar, MatchMode::Glob),
            "pillar_pcre" => {
                self.cache_match(expr, delimiter, greedy, Bank::Pillar, MatchMode::Regex)
            }
            "pillar_exact" => {
                self.cache_match(expr, delimiter, greedy, Bank::Pillar, MatchMode::Exact)
            }
            "ipcidr" => self.ipcidr(expr, greedy).map(Part::of),
            "compound" => self.compound(expr, greedy, false),
            "compound_pillar_exact" => self.compound(expr, greedy, true),
            "nodegroup" => self.nodegroup(expr, greedy),
            "range" => {
                tracing::error!(
                    "Range matcher unavailable (unable to import seco.range, module most likely not installed)"
                );
                Err(Raised)
            }
            _ => Err(Raised),
        };
        match result {
            Ok(part) => Some(part),
            Err(Raised) => {
                tracing::error!(
                    "Failed matching available minions with {} pattern: {}",
                    tgt_type,
                    pyvalue::to_str(expr)
                );
                None
            }
        }
    }

    /// `_check_glob_minions` via `Key.glob_match`: the pattern is comma-split.
    fn glob(&self, expr: &Value) -> Result<Vec<&'u str>, Raised> {
        let patterns: Vec<&str> = match expr {
            Value::Array(items) => {
                let mut patterns = Vec::with_capacity(items.len());
                for item in items {
                    patterns.push(pyvalue::text(item).ok_or(Raised)?);
                }
                patterns
            }
            other => {
                let s = pyvalue::text(other).ok_or(Raised)?;
                if s.contains(',') {
                    s.split(',').collect()
                } else {
                    vec![s]
                }
            }
        };
        let globs: Vec<fnmatch::Pattern> =
            patterns.iter().map(|p| fnmatch::Pattern::new(p)).collect();
        Ok(self
            .ids
            .iter()
            .filter(|id| globs.iter().any(|g| g.matches(id)))
            .collect())
    }

    /// `_check_pcre_minions`: `re.match` over accepted ids.
    fn pcre(&self, expr: &Value) -> Result<Vec<&'u str>, Raised> {
        let pattern = pyvalue::text(expr).ok_or(Raised)?;
        let regex = self.ck.regexes.get(pattern, Anchor::Match).map_err(|err| {
            tracing::error!("{}", err);
            Raised
        })?;
        let mut out = Vec::new();
        for id in self.ids.iter() {
            match regex.is_match(id) {
                Ok(true) => out.push(id),
                Ok(false) => {}
                Err(err) => {
                    tracing::error!("{}", err);
                    return Err(Raised);
                }
            }
        }
        Ok(out)
    }

    /// `_check_list_minions`: a string is split on commas (empty items dropped, no
    /// stripping); listed ids without an accepted key are `missing` (not computed over
    /// candidates).
    fn list(&self, expr: &Value, ignore_missing: bool) -> Result<Part<'u>, Raised> {
        // Each listed name, and whether it is a `str` (only strings can be accepted ids).
        let names: Vec<(Cow<'_, str>, bool)> = match expr {
            Value::Array(items) => items
                .iter()
                .map(|v| (pyvalue::to_str(v), pyvalue::text(v).is_some()))
                .collect(),
            Value::Map(entries) => pyvalue::dict_entries(entries)
                .map(|(k, _)| (pyvalue::to_str(k), pyvalue::text(k).is_some()))
                .collect(),
            other => pyvalue::text(other)
                .ok_or(Raised)?
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| (Cow::Borrowed(n), true))
                .collect(),
        };
        let accepted = match self.ids {
            Universe::Accepted(accepted) => accepted,
            Universe::Among(candidates) => {
                // Only strings can be ids; one pass over the candidates.
                let listed: HashSet<&str> = names
                    .iter()
                    .filter(|(_, is_text)| *is_text)
                    .map(|(name, _)| name.as_ref())
                    .collect();
                let minions = candidates
                    .iter()
                    .map(String::as_str)
                    .filter(|id| listed.contains(id))
                    .collect();
                return Ok(Part::of(minions));
            }
        };
        let mut part = Part::default();
        for (name, is_text) in names {
            match accepted.get(name.as_ref()).filter(|_| is_text) {
                Some(id) => part.minions.push(id.as_str()),
                None if !ignore_missing => part.missing.push(name.into_owned()),
                None => {}
            }
        }
        Ok(part)
    }

    /// The candidates of a cache-based engine: every id considered when greedy, else
    /// those the grains cache lists; `None` when there are none to consider.
    fn candidates(&self, greedy: bool) -> Option<impl Iterator<Item = &'u str> + '_> {
        let cache = self.ck.cache;
        if greedy || self.ck.minion_data_cache {
            Some(
                self.ids
                    .iter()
                    .filter(move |id| greedy || cache.has_grains(id)),
            )
        } else {
            None
        }
    }

    /// `_check_cache_minions`: grain and pillar targets.
    fn cache_match(
        &self,
        expr: &Value,
        delimiter: &str,
        greedy: bool,
        bank: Bank,
        mode: MatchMode,
    ) -> Result<Part<'u>, Raised> {
        let Some(candidates) = self.candidates(greedy) else {
            return Ok(Part::default());
        };
        if !self.ck.minion_data_cache {
            return Ok(Part::of(candidates.collect()));
        }
        let mut matcher: Option<SubdictMatcher<'_>> = None;
        let mut out = Vec::new();
        for id in candidates {
            if !self.ck.cache.has_grains(id) {
                continue;
            }
            let Some(data) = self.ck.cache.fetch(bank, id) else {
                continue;
            };
            let matcher = match &matcher {
                Some(m) => m,
                None => {
                    // Python fails here, on the first minion it evaluates.
                    let text = pyvalue::text(expr).ok_or(Raised)?;
                    if delimiter.is_empty() {
                        return Err(Raised);
                    }
                    matcher.insert(SubdictMatcher::new(text, delimiter, mode, self.ck.regexes))
                }
            };
            if matcher.matches(&data) {
                out.push(id);
            }
        }
        Ok(Part::of(out))
    }

    /// `_check_ipcidr_minions`: minions without cached grains are kept (when greedy).
    fn ipcidr(&self, expr: &Value, greedy: bool) -> Result<Vec<&'u str>, Raised> {
        let Some(candidates) = self.candidates(greedy) else {
            return Ok(Vec::new());
        };
        if !self.ck.minion_data_cache {
            return Ok(candidates.collect());
        }
        let Some(target) = IpTarget::parse(expr) else {
            tracing::error!("Invalid IP/CIDR target: {}", pyvalue::to_str(expr));
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for id in candidates {
            if !self.ck.cache.has_grains(id) {
                out.push(id);
                continue;
            }
            let keep = match self.ck.cache.fetch(Bank::Grains, id) {
                None => greedy,
                Some(grains) => target.matches_grains(&grains).map_err(|_| Raised)?,
            };
            if keep {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// `_check_nodegroup_minions`.
    fn nodegroup(&self, expr: &Value, greedy: bool) -> Result<Part<'u>, Raised> {
        let name = pyvalue::to_str(expr);
        let empty = Value::Map(Vec::new());
        let words = nodegroup_comp(&name, self.ck.nodegroups.unwrap_or(&empty));
        let words: Vec<Value> = words.into_iter().map(Value::from).collect();
        self.compound(&Value::Array(words), greedy, false)
    }

    /// `_check_compound_minions`: each engine is evaluated on its own, then the words
    /// become set algebra over the ids considered.
    fn compound(&self, expr: &Value, greedy: bool, pillar_exact: bool) -> Result<Part<'u>, Raised> {
        if !self.ck.minion_data_cache {
            // Salt returns `list(minions)` with `minions=None`: a TypeError.
            return Err(Raised);
        }
        let mut words: Vec<String> = match expr {
            Value::Array(items) => {
                let mut words = Vec::with_capacity(items.len());
                for item in items {
                    words.push(pyvalue::text(item).ok_or(Raised)?.to_owned());
                }
                words
            }
            other => match pyvalue::text(other) {
                Some(s) => s.split_whitespace().map(str::to_owned).collect(),
                None => {
                    tracing::error!("Compound target that is neither string, list nor tuple");
                    return Ok(Part::default());
                }
            },
        };
        words.reverse();
        let shown = pyvalue::to_str(expr);
        let empty = Value::Map(Vec::new());
        let nodegroups = self.ck.nodegroups.unwrap_or(&empty);

        let mut results: Vec<SetTok<'u>> = Vec::new();
        // Open parentheses: `(` for a group, `-` for a pending `not`.
        let mut unmatched: Vec<char> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        while let Some(word) = words.pop() {
            if let Some(op) = ["and", "or", "not", "(", ")"].iter().find(|o| **o == word) {
                if results.is_empty() {
                    match *op {
                        "not" => {
                            results.extend([SetTok::Open, SetTok::All, SetTok::Minus]);
                            unmatched.push('-');
                        }
                        "(" => {
                            results.push(SetTok::Open);
                            unmatched.push('(');
                        }
                        _ => {
                            tracing::error!("Expression may begin with binary operator: {}", word);
                            return Ok(Part::default());
                        }
                    }
                    continue;
                }
                if results.last() == Some(&SetTok::Open) && matches!(*op, "and" | "or") {
                    tracing::error!("Invalid beginning operator after \"(\": {}", word);
                    return Ok(Part::default());
                }
                match *op {
                    "not" => {
                        if !matches!(
                            results.last(),
                            Some(SetTok::And | SetTok::Or | SetTok::Open)
                        ) {
                            results.push(SetTok::And);
                        }
                        results.extend([SetTok::Open, SetTok::All, SetTok::Minus]);
                        unmatched.push('-');
                    }
                    "and" => results.push(SetTok::And),
                    "or" => results.push(SetTok::Or),
                    "(" => {
                        results.push(SetTok::Open);
                        unmatched.push('(');
                    }
                    _ => {
                        if unmatched.last() != Some(&'(') {
                            tracing::error!(
                                "Invalid compound expr (unexpected right parenthesis): {}",
                                shown
                            );
                            return Ok(Part::default());
                        }
                        results.push(SetTok::Close);
                        unmatched.pop();
                        if unmatched.last() == Some(&'-') {
                            results.push(SetTok::Close);
                            unmatched.pop();
                        }
                    }
                }
                continue;
            }

            let target = compound::parse_target(&word);
            let part = match target.engine {
                None => Part::of(self.glob(&Value::from(word.as_str()))?),
                Some('N') => {
                    let expanded = nodegroup_comp(target.pattern, nodegroups);
                    words.extend(expanded.into_iter().rev());
                    continue;
                }
                Some(letter) => {
                    let mut buf = [0u8; 4];
                    let delimiter = match target.delimiter {
                        Some(d) => &*d.encode_utf8(&mut buf),
                        None => crate::DEFAULT_DELIMITER,
                    };
                    let pattern = Value::from(target.pattern);
                    let exact = |mode| if pillar_exact { MatchMode::Exact } else { mode };
                    match letter {
                        'G' => self.cache_match(
                            &pattern,
                            delimiter,
                            greedy,
                            Bank::Grains,
                            MatchMode::Glob,
                        )?,
                        'P' => self.cache_match(
                            &pattern,
                            delimiter,
                            greedy,
                            Bank::Grains,
                            MatchMode::Regex,
                        )?,
                        'I' => self.cache_match(
                            &pattern,
                            delimiter,
                            greedy,
                            Bank::Pillar,
                            exact(MatchMode::Glob),
                        )?,
                        'J' => self.cache_match(
                            &pattern,
                            delimiter,
                            greedy,
                            Bank::Pillar,
                            exact(MatchMode::Regex),
                        )?,
                        'L' => self.list(&pattern, results.last() == Some(&SetTok::Minus))?,
                        'S' => Part::of(self.ipcidr(&pattern, greedy)?),
                        'E' => Part::of(self.pcre(&pattern)?),
                        'M' => Part::of(self.glob(&pattern)?),
                        // `_all_minions` is called with one argument too many: TypeError.
                        'R' => return Err(Raised),
                        'T' => {
                            tracing::warn!(
                                "T@{}: resource targeting is not supported; no resource ids are expected",
                                target.pattern
                            );
                            Part::default()
                        }
                        _ => {
                            tracing::error!(
                                "Unrecognized target engine \"{}\" for target expression \"{}\"",
                                letter,
                                word
                            );
                            return Ok(Part::default());
                        }
                    }
                }
            };
            results.push(SetTok::Set(part.minions.into_iter().collect()));
            missing.extend(part.missing);
            if unmatched.last() == Some(&'-') {
                results.push(SetTok::Close);
                unmatched.pop();
            }
        }
        results.extend(unmatched.iter().map(|_| SetTok::Close));
        if tracing::enabled!(tracing::Level::DEBUG) {
            let rendered: Vec<String> = results.iter().map(SetTok::text).collect();
            tracing::debug!(
                "Evaluating final compound matching expr: {}",
                rendered.join(" ")
            );
        }

        let ids = self.ids;
        let all = move || ids.iter().collect::<BTreeSet<&'u str>>();
        match compound::eval_sets(&results, &all) {
            Some(minions) => Ok(Part {
                minions: minions.into_iter().collect(),
                missing,
            }),
            None => {
                tracing::error!("Invalid compound target: {}", shown);
                Ok(Part::default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::testutil::{json, Fixture};

    /// `(tgt as JSON, tgt_type, delimiter, greedy, minions, missing)`.
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        bool,
        &'static [&'static str],
        &'static [&'static str],
    );

    /// `(tgt as JSON, tgt_type, delimiter, greedy, minions, missing)` from Salt 3008.3's
    /// `CkMinions.check_minions` over the fixture (localfs key and data caches, nodegroups
    /// from the fixture, `minion_data_cache: True`).
    const MASTER_CASES: &[Case] = &[
        ("\"WEB*\"", "glob", ":", true, &[], &[]),
        ("\"web*\"", "glob", ":", true, &["web1", "web2"], &[]),
        (
            "\"*\"",
            "glob",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        ("\"web1,db1\"", "glob", ":", true, &["db1", "web1"], &[]),
        (
            "\"web*,*1\"",
            "glob",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        ("\"pend1\"", "glob", ":", true, &[], &[]),
        ("\"\"", "glob", ":", true, &[], &[]),
        (
            "\"[wW]eb?\"",
            "glob",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"*.example.com\"",
            "glob",
            ":",
            true,
            &["other.example.com"],
            &[],
        ),
        (
            "\"(?i)web\"",
            "pcre",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        ("\"web\"", "pcre", ":", true, &["web1", "web2"], &[]),
        ("\"web\\\\d$\"", "pcre", ":", true, &["web1", "web2"], &[]),
        ("\"(\"", "pcre", ":", true, &[], &[]),
        ("\".*1\"", "pcre", ":", true, &["db1", "web1"], &[]),
        ("\"web1,db1\"", "list", ":", true, &["db1", "web1"], &[]),
        ("\"web1, db1\"", "list", ":", true, &["web1"], &[" db1"]),
        ("\"web1,,nope\"", "list", ":", true, &["web1"], &["nope"]),
        (
            "[\"web1\", \"nope\", \"db1\"]",
            "list",
            ":",
            true,
            &["db1", "web1"],
            &["nope"],
        ),
        ("\"pend1\"", "list", ":", true, &[], &["pend1"]),
        ("\"os:redhat\"", "grain", ":", true, &["web1", "Web3"], &[]),
        ("\"os:Red*\"", "grain", ":", true, &["web1", "Web3"], &[]),
        (
            "\"role:web\"",
            "grain",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        ("\"nested:a:b\"", "grain", ":", true, &["web1", "web2"], &[]),
        ("\"nested:a:b:1\"", "grain", ":", true, &["web1"], &[]),
        (
            "\"*:web\"",
            "grain",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        ("\"colon:x:y\"", "grain", ":", true, &["web1"], &[]),
        ("\"num:5\"", "grain", ":", true, &["web1"], &[]),
        ("\"flag:true\"", "grain", ":", true, &["web1"], &[]),
        ("\"flag:False\"", "grain", ":", true, &["web2"], &[]),
        ("\"none:none\"", "grain", ":", true, &["web1"], &[]),
        ("\"os\"", "grain", ":", true, &[], &[]),
        ("\"os|RedHat\"", "grain", "|", true, &["web1", "Web3"], &[]),
        ("\"ports:80\"", "grain", ":", true, &["web1"], &[]),
        ("\"ports:80:http\"", "grain", ":", true, &["web1"], &[]),
        ("\"lst:k:v\"", "grain", ":", true, &["web1"], &[]),
        ("\"lst:k\"", "grain", ":", true, &["db1", "web1"], &[]),
        ("\"lst:0:k:v\"", "grain", ":", true, &["web1"], &[]),
        ("\"lst:plain\"", "grain", ":", true, &["web1"], &[]),
        ("\"lst:-1:plain\"", "grain", ":", true, &["web1"], &[]),
        ("\"empty:*\"", "grain", ":", true, &[], &[]),
        ("\"nested:*\"", "grain", ":", true, &["web1", "web2"], &[]),
        ("\"ver:3.5\"", "grain", ":", true, &["web1"], &[]),
        ("\"ver:1e+20\"", "grain", ":", true, &["web2"], &[]),
        (
            "\"ipv4:10.0.0.*\"",
            "grain",
            ":",
            true,
            &["web1", "web2"],
            &[],
        ),
        (
            "\"os:(RedHat|CentOS)\"",
            "grain_pcre",
            ":",
            true,
            &["db1", "web1", "Web3"],
            &[],
        ),
        ("\"os:\\\\S+\"", "grain_pcre", ":", true, &[], &[]),
        ("\"os:\\\\D+\"", "grain_pcre", ":", true, &[], &[]),
        (
            "\"os:red\"",
            "grain_pcre",
            ":",
            true,
            &["web1", "Web3"],
            &[],
        ),
        ("\"os:(\"", "grain_pcre", ":", true, &[], &[]),
        (
            "\"role:w.b\"",
            "grain_pcre",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"env:prod*\"",
            "pillar",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        ("\"env:prod*\"", "pillar_exact", ":", true, &["db1"], &[]),
        ("\"env:PROD\"", "pillar_exact", ":", true, &["web1"], &[]),
        (
            "\"app:tier:front\"",
            "pillar",
            ":",
            true,
            &["web1", "web2"],
            &[],
        ),
        ("\"app:list:a\"", "pillar", ":", true, &["web1"], &[]),
        ("\"env:^prod$\"", "pillar_pcre", ":", true, &["web1"], &[]),
        (
            "\"app:tier\"",
            "pillar",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        (
            "\"10.0.0.0/24\"",
            "ipcidr",
            ":",
            true,
            &["other.example.com", "web1", "web2"],
            &[],
        ),
        (
            "\"10.0.0.11\"",
            "ipcidr",
            ":",
            true,
            &["other.example.com", "web1"],
            &[],
        ),
        ("\"10.0.0.1/24\"", "ipcidr", ":", true, &[], &[]),
        ("\"nonsense\"", "ipcidr", ":", true, &[], &[]),
        (
            "\"192.168.1.3\"",
            "ipcidr",
            ":",
            true,
            &["other.example.com", "Web3"],
            &[],
        ),
        (
            "\"192.168.1.0/24\"",
            "ipcidr",
            ":",
            true,
            &["other.example.com", "Web3"],
            &[],
        ),
        (
            "\"2001:db8::/32\"",
            "ipcidr",
            ":",
            true,
            &["db1", "other.example.com"],
            &[],
        ),
        (
            "\"::1\"",
            "ipcidr",
            ":",
            true,
            &["other.example.com", "web1"],
            &[],
        ),
        (
            "\"0.0.0.0/0\"",
            "ipcidr",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"* and not G@os:RedHat\"",
            "compound",
            ":",
            true,
            &["db1", "other.example.com", "web2"],
            &[],
        ),
        ("\"L@nope and web1\"", "compound", ":", true, &[], &["nope"]),
        (
            "\"web1 or db1\"",
            "compound",
            ":",
            true,
            &["db1", "web1"],
            &[],
        ),
        ("\"(web1 or db1)\"", "compound", ":", true, &[], &[]),
        (
            "\"( web1 or db1 )\"",
            "compound",
            ":",
            true,
            &["db1", "web1"],
            &[],
        ),
        (
            "\"web1 or ( db1\"",
            "compound",
            ":",
            true,
            &["db1", "web1"],
            &[],
        ),
        ("\"web1 )\"", "compound", ":", true, &[], &[]),
        ("\"and web1\"", "compound", ":", true, &[], &[]),
        ("\"web1 and\"", "compound", ":", true, &[], &[]),
        ("\"not not web1\"", "compound", ":", true, &[], &[]),
        (
            "\"not web1\"",
            "compound",
            ":",
            true,
            &["db1", "other.example.com", "web2", "Web3"],
            &[],
        ),
        ("\"web1 not db1\"", "compound", ":", true, &["web1"], &[]),
        (
            "\"G|@os|RedHat\"",
            "compound",
            ":",
            true,
            &["web1", "Web3"],
            &[],
        ),
        ("\"foo@bar\"", "compound", ":", true, &[], &[]),
        ("\"X@foo\"", "compound", ":", true, &[], &[]),
        ("\"R@foo\"", "compound", ":", true, &[], &[]),
        ("\"( and web1 )\"", "compound", ":", true, &[], &[]),
        (
            "\"not L@nope\"",
            "compound",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"not ( L@nope )\"",
            "compound",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &["nope"],
        ),
        (
            "\"E@web\\\\d and not E@web1\"",
            "compound",
            ":",
            true,
            &["web2"],
            &[],
        ),
        (
            "\"S@10.0.0.0/24 and G@os:Ubuntu\"",
            "compound",
            ":",
            true,
            &["web2"],
            &[],
        ),
        (
            "\"I@env:prod*\"",
            "compound",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        (
            "\"I@env:prod*\"",
            "compound_pillar_exact",
            ":",
            true,
            &["db1"],
            &[],
        ),
        (
            "\"J@env:prod.*\"",
            "compound_pillar_exact",
            ":",
            true,
            &[],
            &[],
        ),
        ("\"N@web\"", "compound", ":", true, &["web1", "web2"], &[]),
        (
            "\"N@webdb\"",
            "compound",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        ("\"N@lst\"", "compound", ":", true, &["db1", "web1"], &[]),
        ("\"N@rx\"", "compound", ":", true, &["web1", "web2"], &[]),
        ("\"N@bad or web1\"", "compound", ":", true, &[], &[]),
        ("\"N@nope or web1\"", "compound", ":", true, &[], &[]),
        (
            "\"not N@expr\"",
            "compound",
            ":",
            true,
            &["db1", "other.example.com", "web1", "Web3"],
            &[],
        ),
        ("\"web1 ( db1 )\"", "compound", ":", true, &[], &[]),
        ("\"( )\"", "compound", ":", true, &[], &[]),
        (
            "\"web*,db1 and not web2\"",
            "compound",
            ":",
            true,
            &["db1", "web1"],
            &[],
        ),
        ("\"M@web*\"", "compound", ":", true, &["web1", "web2"], &[]),
        (
            "\"P@os:red.* and I@app:tier:front\"",
            "compound",
            ":",
            true,
            &["web1"],
            &[],
        ),
        ("\"E@( or web1\"", "compound", ":", true, &[], &[]),
        ("\"\"", "compound", ":", true, &[], &[]),
        (
            "[\"web1\", \"or\", \"db1\"]",
            "compound",
            ":",
            true,
            &["db1", "web1"],
            &[],
        ),
        ("\"web\"", "nodegroup", ":", true, &["web1", "web2"], &[]),
        (
            "\"webdb\"",
            "nodegroup",
            ":",
            true,
            &["db1", "web1", "web2"],
            &[],
        ),
        ("\"lst\"", "nodegroup", ":", true, &["db1", "web1"], &[]),
        ("\"rx\"", "nodegroup", ":", true, &["web1", "web2"], &[]),
        ("\"nope\"", "nodegroup", ":", true, &[], &[]),
        ("\"bad\"", "nodegroup", ":", true, &[], &[]),
        ("\"os:redhat\"", "grain", ":", false, &["web1", "Web3"], &[]),
        (
            "\"10.0.0.0/24\"",
            "ipcidr",
            ":",
            false,
            &["web1", "web2"],
            &[],
        ),
        ("\"env:prod\"", "pillar", ":", false, &["web1"], &[]),
        ("\"web*\"", "range", ":", true, &[], &[]),
        ("\"web*\"", "bogus", ":", true, &[], &[]),
        ("\"web1\"", "managing_minion", ":", true, &["web1"], &[]),
    ];

    /// The same checks with `minion_data_cache: False` (one row per target type).
    const MASTER_CASES_WITHOUT_DATA_CACHE: &[Case] = &[
        ("\"WEB*\"", "glob", ":", true, &[], &[]),
        (
            "\"(?i)web\"",
            "pcre",
            ":",
            true,
            &["web1", "web2", "Web3"],
            &[],
        ),
        ("\"web1,db1\"", "list", ":", true, &["db1", "web1"], &[]),
        (
            "\"os:redhat\"",
            "grain",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"os:(RedHat|CentOS)\"",
            "grain_pcre",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"env:prod*\"",
            "pillar",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"env:prod*\"",
            "pillar_exact",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"env:^prod$\"",
            "pillar_pcre",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        (
            "\"10.0.0.0/24\"",
            "ipcidr",
            ":",
            true,
            &["db1", "other.example.com", "web1", "web2", "Web3"],
            &[],
        ),
        ("\"* and not G@os:RedHat\"", "compound", ":", true, &[], &[]),
        (
            "\"I@env:prod*\"",
            "compound_pillar_exact",
            ":",
            true,
            &[],
            &[],
        ),
        ("\"web\"", "nodegroup", ":", true, &[], &[]),
        ("\"os:redhat\"", "grain", ":", false, &[], &[]),
        ("\"10.0.0.0/24\"", "ipcidr", ":", false, &[], &[]),
        ("\"env:prod\"", "pillar", ":", false, &[], &[]),
        ("\"web*\"", "range", ":", true, &[], &[]),
        ("\"web*\"", "bogus", ":", true, &[], &[]),
        ("\"web1\"", "managing_minion", ":", true, &["web1"], &[]),
    ];

    fn disagreements(cases: &[Case], minion_data_cache: bool) -> Vec<String> {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &fx,
            regexes: &regexes,
            minion_data_cache,
            nodegroups: Some(&fx.nodegroups),
        };
        cases
            .iter()
            .filter_map(|&(tgt, tgt_type, delimiter, greedy, minions, missing)| {
                let got = ck.check_minions(&json(tgt), tgt_type, delimiter, greedy);
                (got.minions != minions || got.missing != missing).then(|| {
                    format!(
                        "{tgt} {tgt_type} greedy={greedy}: got {:?} {:?}, Salt {minions:?} {missing:?}",
                        got.minions, got.missing
                    )
                })
            })
            .collect()
    }

    /// Over every subset of the fixture's accepted ids as candidates, `check_among` gives
    /// `check_minions` restricted to the candidates, for every case of `cases`.
    fn among_disagreements(cases: &[Case], minion_data_cache: bool) -> Vec<String> {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &fx,
            regexes: &regexes,
            minion_data_cache,
            nodegroups: Some(&fx.nodegroups),
        };
        let ids: Vec<&String> = fx.accepted.iter().collect();
        let mut failures = Vec::new();
        for &(tgt, tgt_type, delimiter, greedy, _, _) in cases {
            let tgt = json(tgt);
            let all = ck.check_minions(&tgt, tgt_type, delimiter, greedy).minions;
            for mask in 0..1u32 << ids.len() {
                // Reversed, so the candidates' order is not the accepted set's.
                let candidates: Vec<String> = (0..ids.len())
                    .rev()
                    .filter(|i| mask & (1 << i) != 0)
                    .filter_map(|i| ids.get(i).map(|id| (*id).clone()))
                    .collect();
                let mut got = ck.check_among(&tgt, tgt_type, delimiter, greedy, &candidates);
                got.sort_unstable();
                let mut want: Vec<&str> = all
                    .iter()
                    .copied()
                    .filter(|id| candidates.iter().any(|c| c == id))
                    .collect();
                want.sort_unstable();
                if got != want {
                    failures.push(format!(
                        "{tgt} {tgt_type} among {candidates:?}: got {got:?}, want {want:?}"
                    ));
                }
            }
        }
        failures
    }

    #[test]
    fn check_among_is_check_minions_restricted_to_the_candidates() {
        let mut failures = among_disagreements(MASTER_CASES, true);
        failures.extend(among_disagreements(MASTER_CASES_WITHOUT_DATA_CACHE, false));
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn check_among_answers_with_the_candidates_strings() {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &fx,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        let candidates = ["web2".to_owned(), "db1".to_owned()];
        for (tgt, tgt_type) in [("web2,db1", "list"), ("*", "glob"), ("not L@x", "compound")] {
            let got = ck.check_among(&Value::from(tgt), tgt_type, ":", true, &candidates);
            assert_eq!(got.len(), 2, "{tgt}");
            for id in got {
                assert!(candidates.iter().any(|c| std::ptr::eq(c.as_str(), id)));
            }
        }
    }

    #[test]
    fn expectations_agree_with_salt() {
        let failures = disagreements(MASTER_CASES, true);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn expectations_without_data_cache_agree_with_salt() {
        let failures = disagreements(MASTER_CASES_WITHOUT_DATA_CACHE, false);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    fn check(tgt: &str, tgt_type: &str) -> (Vec<String>, Vec<String>) {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &fx,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: Some(&fx.nodegroups),
        };
        let r = ck.check_minions(&Value::from(tgt), tgt_type, crate::DEFAULT_DELIMITER, true);
        (
            r.minions.into_iter().map(str::to_owned).collect(),
            r.missing,
        )
    }

    macro_rules! expects {
        ($name:ident, $tgt:expr, $tgt_type:expr, [$($id:expr),*]) => {
            expects!($name, $tgt, $tgt_type, [$($id),*], []);
        };
        ($name:ident, $tgt:expr, $tgt_type:expr, [$($id:expr),*], [$($miss:expr),*]) => {
            #[test]
            fn $name() {
                let want: (Vec<String>, Vec<String>) =
                    (vec![$($id.to_owned()),*], vec![$($miss.to_owned()),*]);
                assert_eq!(check($tgt, $tgt_type), want);
            }
        };
    }

    // salt-semantics.md §3.7, verified examples.
    expects!(glob_is_case_sensitive, "WEB*", "glob", []);
    expects!(
        pcre_inline_flags_work,
        "(?i)web",
        "pcre",
        ["web1", "web2", "Web3"]
    );
    expects!(
        grain_is_case_insensitive,
        "os:redhat",
        "grain",
        ["web1", "Web3"]
    );
    expects!(
        grain_glob_is_lowercased,
        "os:Red*",
        "grain",
        ["web1", "Web3"]
    );
    expects!(
        grain_matches_list_members,
        "role:web",
        "grain",
        ["web1", "web2", "Web3"]
    );
    expects!(
        grain_key_existence_matches,
        "nested:a:b",
        "grain",
        ["web1", "web2"]
    );
    expects!(
        grain_pcre_alternation,
        "os:(RedHat|CentOS)",
        "grain_pcre",
        ["db1", "web1", "Web3"]
    );
    expects!(pillar_glob, "env:prod*", "pillar", ["db1", "web1", "web2"]);
    expects!(
        pillar_exact_takes_star_literally,
        "env:prod*",
        "pillar_exact",
        ["db1"]
    );
    expects!(
        compound_not_keeps_uncached_minions,
        "* and not G@os:RedHat",
        "compound",
        ["db1", "other.example.com", "web2"]
    );
    expects!(
        compound_reports_missing_list_ids,
        "L@nope and web1",
        "compound",
        [],
        ["nope"]
    );
    // §3.2 and §3.4.
    expects!(
        glob_is_comma_split_on_the_master,
        "web1,db1",
        "glob",
        ["db1", "web1"]
    );
    expects!(pending_keys_are_never_candidates, "pend1", "glob", []);
    expects!(
        list_items_are_not_stripped,
        "web1, db1",
        "list",
        ["web1"],
        [" db1"]
    );
    expects!(
        uncached_minions_are_dropped_from_grain_results,
        "os:*",
        "grain",
        ["db1", "web1", "web2", "Web3"]
    );
    expects!(
        uncached_minions_are_kept_in_ipcidr_results,
        "10.0.0.0/24",
        "ipcidr",
        ["other.example.com", "web1", "web2"]
    );
    expects!(invalid_ipcidr_expects_nobody, "10.0.0.1/24", "ipcidr", []);
    expects!(
        glued_parenthesis_is_invalid,
        "(web1 or db1)",
        "compound",
        []
    );
    expects!(
        unclosed_parenthesis_is_auto_closed,
        "web1 or ( db1",
        "compound",
        ["db1", "web1"]
    );
    expects!(
        unexpected_right_parenthesis_is_invalid,
        "web1 )",
        "compound",
        []
    );
    expects!(trailing_operator_is_invalid, "web1 and", "compound", []);
    expects!(double_not_is_invalid, "not not web1", "compound", []);
    expects!(
        missing_is_suppressed_right_after_not,
        "not L@nope",
        "compound",
        ["db1", "other.example.com", "web1", "web2", "Web3"]
    );
    expects!(
        range_in_compound_fails_everything,
        "R@foo or web1",
        "compound",
        []
    );
    expects!(
        nested_nodegroups_expand_in_parentheses,
        "N@webdb",
        "compound",
        ["db1", "web1", "web2"]
    );
    expects!(
        top_level_nodegroup_words_are_not_parenthesised,
        "not N@expr",
        "compound",
        ["db1", "other.example.com", "web1", "Web3"]
    );
    expects!(
        cyclic_nodegroup_yields_nothing,
        "N@bad or web1",
        "compound",
        []
    );
    expects!(
        resource_engine_expects_nobody,
        "T@x:y or web1",
        "compound",
        ["web1"]
    );

    /// Counts what a check reads from the cache.
    struct CountingCache<'f> {
        inner: &'f Fixture,
        fetches: Cell<usize>,
    }

    impl MinionDataCache for CountingCache<'_> {
        fn has_grains(&self, id: &str) -> bool {
            self.inner.has_grains(id)
        }

        fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>> {
            self.fetches.set(self.fetches.get() + 1);
            self.inner.fetch(bank, id)
        }
    }

    #[test]
    fn data_is_fetched_only_for_cached_minions_and_only_when_needed() {
        let fx = Fixture::load();
        let cache = CountingCache {
            inner: &fx,
            fetches: Cell::new(0),
        };
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &cache,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        ck.check_minions(&Value::from("web*"), "glob", ":", true);
        ck.check_minions(&Value::from("web1,nope"), "list", ":", true);
        assert_eq!(cache.fetches.get(), 0);
        ck.check_minions(&Value::from("os:redhat"), "grain", ":", true);
        assert_eq!(cache.fetches.get(), 4);
    }

    #[test]
    fn expected_ids_borrow_from_the_accepted_set() {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &EmptyCache,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        let result = ck.check_minions(&Value::from("db1"), "glob", ":", true);
        let stored = fx.accepted.get("db1").map(String::as_str);
        assert!(std::ptr::eq(result.minions[0], stored.unwrap_or_default()));
    }

    #[test]
    fn non_greedy_candidates_are_cached_accepted_minions() {
        let fx = Fixture::load();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &fx.accepted,
            cache: &fx,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        let r = ck.check_minions(&Value::from("0.0.0.0/0"), "ipcidr", ":", false);
        assert_eq!(r.minions, ["db1", "web1", "web2", "Web3"]);
    }

    #[test]
    fn catastrophic_pcre_fails_the_check_instead_of_hanging() {
        // "b" matches, but evaluating the pattern against the long id exceeds the limit, and
        // like any regex failure that fails the whole check.
        let accepted: BTreeSet<String> = ["a".repeat(5000), "b".to_owned()].into_iter().collect();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &accepted,
            cache: &EmptyCache,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        let r = ck.check_minions(&Value::from(r"(a*)*\1b"), "pcre", ":", true);
        assert!(r.minions.is_empty());
    }

    #[test]
    fn check_among_fails_only_on_a_candidate_that_fails_the_engine() {
        let long = "a".repeat(5000);
        let accepted: BTreeSet<String> = [long.clone(), "b".to_owned()].into_iter().collect();
        let regexes = RegexCache::default();
        let ck = CkMinions {
            accepted: &accepted,
            cache: &EmptyCache,
            regexes: &regexes,
            minion_data_cache: true,
            nodegroups: None,
        };
        let tgt = Value::from(r"E@(a*)*\1b or b");
        let only_b = ["b".to_owned()];
        assert_eq!(ck.check_among(&tgt, "compound", ":", true, &only_b), ["b"]);
        let both = [long, "b".to_owned()];
        assert!(ck
            .check_among(&tgt, "compound", ":", true, &both)
            .is_empty());
    }
}
