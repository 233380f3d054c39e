//! Shared by the table and fuzz tests: the Salt-generated table, its fixture as a
//! `halite_target` minion data cache, and running one case under one mode.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use halite_acl::{Acl, Decision, Matching, PeerAcl, Request, RunnerAcl, SpecForm, Value};
use halite_target::{Bank, CkMinions, MinionDataCache, RegexCache};

/// The table written by `tools/gen_auth_table.py`.
pub const TABLE: &str = include_str!("../salt_auth_table.json");

/// A JSON value as msgpack (objects keep their order).
pub fn to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::Array(a.iter().map(to_value).collect()),
        serde_json::Value::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), to_value(v)))
                .collect(),
        ),
    }
}

/// The accepted minions, grains, pillar and nodegroups Salt expanded targets with.
pub struct Fixture {
    pub accepted: BTreeSet<String>,
    pub grains: BTreeMap<String, Value>,
    pub pillar: BTreeMap<String, Value>,
    pub nodegroups: Value,
    pub regexes: RegexCache,
}

impl Fixture {
    pub fn from_table(table: &serde_json::Value) -> Self {
        let fixture = &table["fixture"];
        let map = |name: &str| -> BTreeMap<String, Value> {
            fixture[name]
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.clone(), to_value(v))).collect())
                .unwrap_or_default()
        };
        Self {
            accepted: fixture["accepted"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            grains: map("grains"),
            pillar: map("pillar"),
            nodegroups: to_value(&fixture["nodegroups"]),
            regexes: RegexCache::default(),
        }
    }

    /// The master's targeting over this fixture.
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

/// One case of the table, as values.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub kind: String,
    /// `acl`, `peer` or `peer_run`, by kind.
    pub config: Value,
    pub id: String,
    pub fun: Value,
    pub arg: Value,
    pub tgt: Value,
    pub tgt_type: String,
    pub minions: Option<BTreeSet<String>>,
    pub publish_validate: bool,
    pub whitelist: Vec<String>,
    pub form: String,
    pub kwarg: Value,
    pub salt: bool,
    pub salt_error: Option<String>,
    pub full: bool,
    pub prefix: bool,
    pub note: Option<String>,
}

pub fn load() -> (Fixture, Vec<Case>) {
    let table: serde_json::Value = serde_json::from_str(TABLE).expect("table is JSON");
    let fixture = Fixture::from_table(&table);
    let text = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap_or_default().to_owned();
    let cases = table["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let kind = text(c, "kind");
            let config = match kind.as_str() {
                "peer" => &c["peer"],
                "runner" => &c["peer_run"],
                _ => &c["acl"],
            };
            Case {
                name: text(c, "name"),
                config: to_value(config),
                id: text(c, "id"),
                fun: to_value(&c["fun"]),
                arg: to_value(&c["arg"]),
                tgt: to_value(&c["tgt"]),
                tgt_type: text(c, "tgt_type"),
                minions: c["minions"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                }),
                publish_validate: c["publish_validate"].as_bool().unwrap_or(false),
                whitelist: c["whitelist"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
                form: text(c, "form"),
                kwarg: to_value(&c["kwarg"]),
                salt: c["salt"].as_bool().expect("salt result"),
                salt_error: c["salt_error"].as_str().map(str::to_owned),
                full: c["full"].as_bool().expect("full result"),
                prefix: c["prefix"].as_bool().expect("prefix result"),
                note: c["note"].as_str().map(str::to_owned),
                kind,
            }
        })
        .collect();
    (fixture, cases)
}

/// Halite's decision for `case` under `matching`.
pub fn decide(fixture: &Fixture, case: &Case, matching: Matching) -> Decision {
    let ck = fixture.ck();
    let whitelist: Vec<&str> = case.whitelist.iter().map(String::as_str).collect();
    match case.kind.as_str() {
        "runner" => RunnerAcl::parse(&case.config, matching)
            .0
            .allows(&case.id, case.fun.as_str().unwrap_or_default()),
        "spec" => {
            let form = match case.form.as_str() {
                "wheel" => SpecForm::Wheel,
                "cloud" => SpecForm::Cloud,
                _ => SpecForm::Runner,
            };
            Acl::parse(&case.config, matching, "acl").0.check_spec(
                case.fun.as_str().unwrap_or_default(),
                form,
                &case.kwarg,
            )
        }
        kind => {
            let mut req = Request::new(&case.fun, &case.arg, &case.tgt, &case.tgt_type);
            if kind == "peer" {
                return PeerAcl::parse(&case.config, matching)
                    .0
                    .check(&case.id, &req, &ck);
            }
            req.minions = case.minions.as_ref();
            req.publish_validate = case.publish_validate;
            Acl::parse(&case.config, matching, "acl")
                .0
                .check(&req, &ck, &whitelist)
        }
    }
}
