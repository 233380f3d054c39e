//! Test support, for this crate's tests and (with the `test-util` feature) the tests of
//! crates that build on targeting: msgpack values written as JSON, and a [`Fixture`] of
//! accepted minions with grains, pillar and nodegroups that serves as the master's minion
//! data cache. Not for production code: it panics on bad test input.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use rmpv::Value;

use crate::{Bank, CkMinions, MinionDataCache, RegexCache};

/// A JSON value as msgpack: objects keep their order, integers stay integers (unsigned
/// ones beyond `i64` included), other numbers are floats.
pub fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| n.as_u64().map(Value::from))
            .unwrap_or_else(|| Value::F64(n.as_f64().unwrap_or(f64::NAN))),
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::Array(a.iter().map(from_json).collect()),
        serde_json::Value::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), from_json(v)))
                .collect(),
        ),
    }
}

/// A msgpack value written as JSON text.
///
/// # Panics
/// When `text` is not JSON.
pub fn json(text: &str) -> Value {
    from_json(&serde_json::from_str(text).expect("test JSON"))
}

/// The strings of a JSON list (`None` when it is not a list; other items are skipped).
pub fn strings<C: FromIterator<String>>(list: &serde_json::Value) -> Option<C> {
    list.as_array().map(|items| {
        items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    })
}

/// The minions of `salt-semantics.md` §3.7 (plus a few grains for edge cases), used by
/// both the master and the minion tests. `other.example.com` has no cached data; `pend1`
/// is pending.
#[cfg(test)]
pub(crate) const FIXTURE: &str = r#"{
 "accepted": ["web1", "web2", "db1", "Web3", "other.example.com"],
 "pending": ["pend1"],
 "grains": {
  "web1": {"os": "RedHat", "role": ["web", "frontend"], "nested": {"a": {"b": 1}}, "ipv4": ["10.0.0.11", "127.0.0.1"], "ipv6": ["::1", "fe80::1"], "num": 5, "flag": true, "none": null, "colon": "x:y", "ports": {"80": "http"}, "lst": [{"k": "v"}, "plain"], "ver": 3.5},
  "web2": {"os": "Ubuntu", "role": "web", "nested": {"a": {"b": 2}}, "ipv4": ["10.0.0.12"], "num": 6, "flag": false, "ver": 1e20},
  "db1": {"os": "CentOS", "role": ["db"], "ipv4": ["10.0.1.5"], "ipv6": ["2001:db8::5"], "empty": {}, "lst": [{"k": "w"}]},
  "Web3": {"os": "redhat", "role": ["web"], "ipv4": "192.168.1.3", "nested": {}}
 },
 "pillar": {
  "web1": {"env": "prod", "app": {"tier": "front", "list": ["a", "b"]}},
  "web2": {"env": "production", "app": {"tier": "front"}},
  "db1": {"env": "prod*", "app": {"tier": "back"}},
  "Web3": {"env": "dev"}
 },
 "nodegroups": {"web": "L@web1,web2", "dbs": "G@role:db", "webdb": "N@web or N@dbs", "lst": ["web1", "db1"], "rx": "web[0-9]+", "bad": "N@bad", "expr": "G@os:Ubuntu or db1"}
}"#;

/// Accepted minions with their cached grains and pillar, and the master's nodegroups.
pub struct Fixture {
    /// The accepted minion ids.
    pub accepted: BTreeSet<String>,
    /// Cached grains by minion id.
    pub grains: BTreeMap<String, Value>,
    /// Cached pillar by minion id.
    pub pillar: BTreeMap<String, Value>,
    /// The `nodegroups` option.
    pub nodegroups: Value,
    /// The regex cache [`Fixture::ck`] uses.
    pub regexes: RegexCache,
}

impl Fixture {
    /// A fixture written as JSON: `{"accepted": [id, ...], "grains": {id: {...}},
    /// "pillar": {id: {...}}, "nodegroups": {...}}`; a missing part is empty.
    pub fn from_json(fixture: &serde_json::Value) -> Fixture {
        let by_id = |name: &str| -> BTreeMap<String, Value> {
            fixture[name]
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.clone(), from_json(v))).collect())
                .unwrap_or_default()
        };
        Fixture {
            accepted: strings(&fixture["accepted"]).unwrap_or_default(),
            grains: by_id("grains"),
            pillar: by_id("pillar"),
            nodegroups: from_json(&fixture["nodegroups"]),
            regexes: RegexCache::default(),
        }
    }

    /// The minions of [`FIXTURE`].
    #[cfg(test)]
    pub(crate) fn load() -> Fixture {
        Fixture::from_json(&serde_json::from_str(FIXTURE).expect("fixture JSON"))
    }

    /// The master's targeting over this fixture: every accepted minion, the minion data
    /// cache on, the fixture's nodegroups.
    pub fn ck(&self) -> CkMinions<'_> {
        CkMinions {
            accepted: &self.accepted,
            cache: self,
            regexes: &self.regexes,
            minion_data_cache: true,
            nodegroups: Some(&self.nodegroups),
        }
    }
}

impl MinionDataCache for Fixture {
    fn has_grains(&self, id: &str) -> bool {
        self.grains.contains_key(id)
    }

    fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>> {
        match bank {
            Bank::Grains => self.grains.get(id),
            Bank::Pillar => self.pillar.get(id),
        }
        .map(Cow::Borrowed)
    }
}
