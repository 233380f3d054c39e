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
fn main() {
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string("/tmp/salth/fixture.json").unwrap()).unwrap();
    let ids: Vec<String> = fx["accepted"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let empty = serde_json::json!({});
    let regexes = RegexCache::default();
    let expected: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap()).unwrap();
    let mut bad = 0;
    for case in &expected {
        let c = case.as_array().unwrap();
        let tgt = conv(&c[0]);
        let mut got = vec![];
        for id in &ids {
            let grains = conv(fx["grains"].get(id).unwrap_or(&empty));
            let pillar = conv(fx["pillar"].get(id).unwrap_or(&empty));
            let facts = MinionFacts { id, grains: &grains, pillar: &pillar, nodegroups: None };
            if minion_match(&facts, &tgt, c[1].as_str(), c[2].as_str(), &regexes) { got.push(id.as_str()); }
        }
        let want: Vec<&str> = c[3].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        if got != want { bad += 1; println!("MISMATCH {:?} {:?} {:?}: got {:?} want {:?}", c[0], c[1], c[2], got, want); }
    }
    println!("{} cases, {} mismatches", expected.len(), bad);
}
