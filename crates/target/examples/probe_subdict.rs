use halite_target::*;
fn conv(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        serde_json::Value::Number(n) => if let Some(i) = n.as_i64() { Value::from(i) } else { Value::F64(n.as_f64().unwrap()) },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => {
            let tag = a[0].as_str().unwrap();
            if tag == "L" { Value::Array(a[1..].iter().map(conv).collect()) }
            else { Value::Map(a[1..].iter().map(|p| { let p = p.as_array().unwrap(); (conv(&p[0]), conv(&p[1])) }).collect()) }
        }
        serde_json::Value::Object(_) => unreachable!(),
    }
}
fn main() {
    let regexes = RegexCache::default();
    let cases: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap()).unwrap();
    let mut bad = 0;
    for c in &cases {
        let c = c.as_array().unwrap();
        let data = conv(&c[0]);
        let expr = c[1].as_str().unwrap();
        let mode = match c[2].as_str().unwrap() { "glob" => MatchMode::Glob, "regex" => MatchMode::Regex, _ => MatchMode::Exact };
        let got = subdict_match(&data, expr, ":", mode, &regexes);
        let want = c[3].as_bool().unwrap_or(false);
        if got != want { bad += 1; if bad < 15 { println!("MISMATCH {} {:?} {:?}: got {} want {}", c[0], expr, c[2], got, c[3]); } }
    }
    println!("{} cases, {} mismatches", cases.len(), bad);
}
