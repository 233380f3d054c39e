//! Test helpers: JSON-written values (`halite_target`'s), a [`Targets`] over a fixed set
//! of minions, and mode notes as text.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use halite_target::{Bank, CkMinions, MinionDataCache, RegexCache};
use rmpv::Value;

use crate::{ModeNote, Targets};

pub(crate) use halite_target::testutil::json;

/// Each note as `location=pattern`.
pub(crate) fn note_texts(notes: &[ModeNote]) -> Vec<String> {
    notes
        .iter()
        .map(|n| format!("{}={}", n.location, n.pattern))
        .collect()
}

/// Accepted minions with grains and pillar, expanded by `halite_target`'s `CkMinions`;
/// records every expansion and evaluation (`first_outside`) asked for.
pub(crate) struct FakeTargets {
    accepted: BTreeSet<String>,
    data: BTreeMap<(String, bool), Value>,
    regexes: RegexCache,
    seen: RefCell<Vec<(String, String)>>,
}

impl FakeTargets {
    /// `web1` (Debian, pillar env prod), `web2` (RedHat, production), `db1` (Debian, prod),
    /// `web.example.com` (Debian) and `web.example.com.evil.org` (no cached data).
    pub(crate) fn standard() -> Self {
        let mut data = BTreeMap::new();
        for (id, os, env) in [
            ("web1", "Debian", Some("prod")),
            ("web2", "RedHat", Some("production")),
            ("db1", "Debian", Some("prod")),
            ("web.example.com", "Debian", None),
        ] {
            let grains = Value::Map(vec![(Value::from("os"), Value::from(os))]);
            data.insert((id.to_owned(), true), grains);
            if let Some(env) = env {
                let pillar = Value::Map(vec![(Value::from("env"), Value::from(env))]);
                data.insert((id.to_owned(), false), pillar);
            }
        }
        Self {
            accepted: [
                "web1",
                "web2",
                "db1",
                "web.example.com",
                "web.example.com.evil.org",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            data,
            regexes: RegexCache::default(),
            seen: RefCell::new(Vec::new()),
        }
    }

    /// How many expansions and evaluations were asked for.
    pub(crate) fn calls(&self) -> usize {
        self.seen.borrow().len()
    }

    /// The expansions and evaluations asked for, as `(tgt, tgt_type)`.
    pub(crate) fn seen(&self) -> Vec<(String, String)> {
        self.seen.borrow().clone()
    }
}

impl MinionDataCache for FakeTargets {
    fn has_grains(&self, id: &str) -> bool {
        self.data.contains_key(&(id.to_owned(), true))
    }

    fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>> {
        self.data
            .get(&(id.to_owned(), bank == Bank::Grains))
            .map(Cow::Borrowed)
    }
}

impl FakeTargets {
    /// `CkMinions` over the accepted minions and their data, recording the target asked.
    fn ck(&self, tgt: &Value, tgt_type: &str) -> CkMinions<'_> {
        let shown = tgt.as_str().unwrap_or("?").to_owned();
        self.seen.borrow_mut().push((shown, tgt_type.to_owned()));
        CkMinions {
            accepted: &self.accepted,
            cache: self,
            regexes: &self.regexes,
            minion_data_cache: true,
            nodegroups: None,
        }
    }
}

impl Targets for FakeTargets {
    fn expand(&self, tgt: &Value, tgt_type: &str) -> Vec<String> {
        self.ck(tgt, tgt_type).expand(tgt, tgt_type)
    }

    fn first_outside<'c>(
        &self,
        tgt: &Value,
        tgt_type: &str,
        candidates: &'c [String],
    ) -> Option<&'c str> {
        self.ck(tgt, tgt_type)
            .first_outside(tgt, tgt_type, candidates)
    }
}
