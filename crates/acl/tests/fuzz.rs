//! Hostile input never panics: random configuration values through every parser, and
//! randomly mutated table cases through every check (a deterministic fuzz loop).

// Not every field of the shared case type is read here.
#[allow(dead_code)]
mod common;

use halite_acl::{Acl, Blacklist, Matching, PeerAcl, Request, RunnerAcl, UserAcl, Value};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }
}

const WORDS: &[&str] = &[
    "",
    "*",
    ".*",
    "test.*",
    "test.ping",
    "cmd.run",
    "cmd.run$",
    "(",
    ")",
    "[",
    "]",
    "a|b",
    "@runner",
    "@wheel",
    "@manage",
    "@runners",
    "web*",
    "web1",
    "db1",
    "G@os:Debian",
    "web* and G@os:Debian",
    "L@web1,db1",
    "E@web[0-9]+",
    "N@webs",
    "I@env:prod*",
    "not",
    "args",
    "kwargs",
    "arg",
    "__kwarg__",
    "a=1",
    "\\Z",
    "$",
    "(?x)",
    "(?P<n>a)(?P=n)",
    "\u{e9}",
    "manage.up",
    "jobs.*",
    "saltutil.find_job",
    ".*example.com",
    "glob",
    "list",
    "compound",
    "pillar",
    "pillar_pcre",
    "grain",
    "pcre",
    "nodegroup",
    "bogus",
    "full",
    "prefix",
];

fn word(rng: &mut Rng) -> Value {
    Value::from(WORDS[rng.below(WORDS.len())])
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let choice = if depth == 0 {
        rng.below(7)
    } else {
        rng.below(11)
    };
    match choice {
        0 => Value::Nil,
        1 => Value::Boolean(rng.below(2) == 0),
        2 => Value::from(i64::try_from(rng.next() % 2001).unwrap_or(0) - 1000),
        3 => Value::from(u64::MAX - rng.next() % 3),
        4 => Value::F64([0.5, -1.0, 1e20, f64::NAN, f64::INFINITY][rng.below(5)]),
        5 => Value::Binary(vec![0xff, 0xfe, b'a']),
        6 => word(rng),
        7 | 8 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => Value::Map(
            (0..rng.below(4))
                .map(|_| {
                    let key = if rng.below(4) == 0 {
                        random_value(rng, 0)
                    } else {
                        word(rng)
                    };
                    (key, random_value(rng, depth - 1))
                })
                .collect(),
        ),
    }
}

/// Replaces one random subtree of `v` (possibly `v` itself) with a random value.
fn mutate(rng: &mut Rng, v: &mut Value) {
    let descend = rng.below(3) != 0;
    match v {
        Value::Array(items) if descend && !items.is_empty() => {
            let n = rng.below(items.len());
            if let Some(item) = items.get_mut(n) {
                mutate(rng, item);
            }
        }
        Value::Map(entries) if descend && !entries.is_empty() => {
            let n = rng.below(entries.len());
            if let Some((key, value)) = entries.get_mut(n) {
                if rng.below(4) == 0 {
                    mutate(rng, key);
                } else {
                    mutate(rng, value);
                }
            }
        }
        _ => *v = random_value(rng, 3),
    }
}

#[test]
fn random_configuration_values_never_panic_any_parser() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let v = random_value(&mut rng, 5);
        for m in [Matching::Full, Matching::Prefix] {
            let (acl, warnings) = Acl::parse(&v, m, "acl");
            let _ = (acl.differing_patterns(), acl.len());
            for w in &warnings {
                assert!(!w.to_string().is_empty());
            }
            let (peer, _) = PeerAcl::parse(&v, m);
            let _ = peer.differing_patterns();
            let _ = peer.for_minion("web1");
            let (runner, _) = RunnerAcl::parse(&v, m);
            let _ = runner.differing_patterns();
            let _ = runner.allows("web1", "manage.up").to_string();
            let (users, _) = UserAcl::parse(&v, m);
            let _ = (users.differing_patterns(), users.users());
            let _ = users.for_user("web1");
            let _ = users.check_runner("web1", "manage.up", &v).to_string();
            let (blacklist, _) = Blacklist::parse(&v, m);
            let _ = blacklist.differing_patterns();
            let _ = blacklist.user_is_blacklisted("web1").map(|h| h.to_string());
            let _ = blacklist.cmd_is_blacklisted(&v).map(|h| h.to_string());
        }
        let _ = Matching::from_config_value(&v);
    }
}

#[test]
fn mutated_table_cases_never_panic_and_full_stays_stricter() {
    let (fixture, cases) = common::load();
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for case in &cases {
        for _ in 0..40 {
            let mut c = case.clone();
            match rng.below(7) {
                0 => mutate(&mut rng, &mut c.config),
                1 => mutate(&mut rng, &mut c.fun),
                2 => mutate(&mut rng, &mut c.arg),
                3 => mutate(&mut rng, &mut c.tgt),
                4 => mutate(&mut rng, &mut c.kwarg),
                5 => c.user = WORDS[rng.below(WORDS.len())].to_owned(),
                _ => c.tgt_type = WORDS[rng.below(WORDS.len())].to_owned(),
            }
            let full = common::decide(&fixture, &c, Matching::Full);
            let prefix = common::decide(&fixture, &c, Matching::Prefix);
            assert!(!full.to_string().is_empty() && !prefix.to_string().is_empty());
            assert!(
                !full.allowed || prefix.allowed,
                "{}: full allowed what prefix denied: {c:?}",
                case.name
            );
        }
    }
}

#[test]
fn deeply_nested_and_huge_arguments_are_denied_not_rendered() {
    let (acl, _) = Acl::parse(
        &common::from_json(
            &serde_json::json!([{"*": [{"test.arg": {"args": [".*"], "kwargs": {"k": ".*"}}}]}]),
        ),
        Matching::Full,
        "acl",
    );
    let fixture = common::load().0;
    let ck = fixture.ck();
    let mut deep = Value::from("x");
    for _ in 0..200 {
        deep = Value::Array(vec![deep]);
    }
    let (fun, tgt) = (Value::from("test.arg"), Value::from("*"));
    let arg = Value::Array(vec![deep]);
    let d = acl.check(&Request::new(&fun, &arg, &tgt, "glob"), &ck, &[]);
    assert!(!d.allowed);
    assert!(d.to_string().contains("too deep or large"), "{d}");
    let wide = Value::Array(vec![Value::from(1); 100_000]);
    let arg = Value::Array(vec![wide]);
    assert!(
        !acl.check(&Request::new(&fun, &arg, &tgt, "glob"), &ck, &[])
            .allowed
    );
    let kwargs = Value::Map(
        std::iter::once((Value::from("__kwarg__"), Value::from(true)))
            .chain((0..5000).map(|n| (Value::from(format!("k{n}")), Value::from(n))))
            .collect(),
    );
    let arg = Value::Array(vec![Value::from("a"), kwargs]);
    let d = acl.check(&Request::new(&fun, &arg, &tgt, "glob"), &ck, &[]);
    assert!(d.to_string().contains("too many keyword arguments"), "{d}");
}
