use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use halite_target::*;
fn conv(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => if let Some(i) = n.as_i64() { Value::from(i) } else { Value::F64(n.as_f64().unwrap()) },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::Array(a.iter().map(conv).collect()),
        serde_json::Value::Object(o) => Value::Map(o.iter().map(|(k, v)| (Value::from(k.as_str()), conv(v))).collect()),
    }
}
struct Cache { grains: BTreeMap<String, Value>, pillar: BTreeMap<String, Value> }
impl MinionDataCache for Cache {
    fn has_grains(&self, id: &str) -> bool { self.grains.contains_key(id) }
    fn fetch(&self, bank: Bank, id: &str) -> Option<Cow<'_, Value>> {
        match bank { Bank::Grains => self.grains.get(id), Bank::Pillar => self.pillar.get(id) }.map(Cow::Borrowed)
    }
}
fn main() {
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string("/tmp/salth/fixture.json").unwrap()).unwrap();
    let accepted: BTreeSet<String> = fx["accepted"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let cache = Cache {
        grains: fx["grains"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), conv(v))).collect(),
        pillar: fx["pillar"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), conv(v))).collect(),
    };
    let ng = conv(&fx["nodegroups"]);
    let regexes = RegexCache::default();
    let ck = CkMinions { accepted: &accepted, cache: &cache, regexes: &regexes, minion_data_cache: std::env::var("MDC").map(|v| v == "1").unwrap_or(true), nodegroups: Some(&ng) };
    let expected: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap()).unwrap();
    let mut bad = 0;
    for case in &expected {
        let c = case.as_array().unwrap();
        let r = ck.check_minions(&conv(&c[0]), c[1].as_str().unwrap(), c[2].as_str().unwrap(), c[3].as_bool().unwrap());
        let want_m: Vec<&str> = c[4].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let want_missing: Vec<String> = c[5].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
        if r.minions != want_m || r.missing != want_missing {
            bad += 1;
            println!("MISMATCH {:?} {} greedy={}: got {:?} {:?} want {:?} {:?}", c[0], c[1], c[3], r.minions, r.missing, want_m, want_missing);
        }
    }
    println!("{} cases, {} mismatches", expected.len(), bad);
}
