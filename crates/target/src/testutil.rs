//! Test helpers: JSON-written values and the shared targeting fixture.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use rmpv::Value;

use crate::{Bank, MinionDataCache};

/// A msgpack value written as JSON (objects keep their order).
pub(crate) fn json(text: &str) -> Value {
    fn conv(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Boolean(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::from(i),
                None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::from(s.as_str()),
            serde_json::Value::Array(a) => Value::Array(a.iter().map(conv).collect()),
            serde_json::Value::Object(o) => Value::Map(
                o.iter()
                    .map(|(k, v)| (Value::from(k.as_str()), conv(v)))
                    .collect(),
            ),
        }
    }
    conv(&serde_json::from_str(text).expect("test JSON"))
}

/// The minions of `salt-semantics.md` §3.7 (plus a few grains for edge cases), used by
/// both the master and the minion tests. `other.example.com` has no cached data; `pend1`
/// is pending.
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

/// The fixture, split into its parts.
pub(crate) struct Fixture {
    pub(crate) accepted: BTreeSet<String>,
    pub(crate) grains: BTreeMap<String, Value>,
    pub(crate) pillar: BTreeMap<String, Value>,
    pub(crate) nodegroups: Value,
}

fn map_of(v: &Value) -> BTreeMap<String, Value> {
    match v {
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v.clone()))
            .collect(),
        _ => BTreeMap::new(),
    }
}

fn field<'v>(v: &'v Value, name: &str) -> &'v Value {
    match v {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
            .expect("fixture field"),
        _ => panic!("fixture is a map"),
    }
}

impl Fixture {
    pub(crate) fn load() -> Self {
        let all = json(FIXTURE);
        let accepted = match field(&all, "accepted") {
            Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => BTreeSet::new(),
        };
        Self {
            accepted,
            grains: map_of(field(&all, "grains")),
            pillar: map_of(field(&all, "pillar")),
            nodegroups: field(&all, "nodegroups").clone(),
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
