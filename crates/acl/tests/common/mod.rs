//! Shared by the table and fuzz tests: the Salt-generated table, its fixture as a
//! `halite_target` minion data cache, and running one case under one mode.

use std::fmt;

use halite_acl::{
    Acl, Blacklist, Decision, Matching, PeerAcl, Reason, Request, RunnerAcl, SpecForm, UserAcl,
    Value,
};
use halite_target::testutil::strings;
pub use halite_target::testutil::{from_json, Fixture};

/// The table written by `tools/gen_auth_table.py`.
pub const TABLE: &str = include_str!("../salt_auth_table.json");

/// One case of the table, as values.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub kind: String,
    /// `acl`, `peer`, `peer_run`, `publisher_acl` or `blacklist`, by kind.
    pub config: Value,
    pub id: String,
    /// The local user (`user`, `user_runner`, `blacklist` kinds).
    pub user: String,
    pub fun: Value,
    pub arg: Value,
    pub tgt: Value,
    pub tgt_type: String,
    pub minions: Option<Vec<String>>,
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
    let fixture = Fixture::from_json(&table["fixture"]);
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
                "user" | "user_runner" => &c["publisher_acl"],
                "blacklist" => &c["blacklist"],
                _ => &c["acl"],
            };
            Case {
                name: text(c, "name"),
                config: from_json(config),
                id: text(c, "id"),
                user: text(c, "user"),
                fun: from_json(&c["fun"]),
                arg: from_json(&c["arg"]),
                tgt: from_json(&c["tgt"]),
                tgt_type: text(c, "tgt_type"),
                minions: strings(&c["minions"]),
                publish_validate: c["publish_validate"].as_bool().unwrap_or(false),
                whitelist: strings(&c["whitelist"]).unwrap_or_default(),
                form: text(c, "form"),
                kwarg: from_json(&c["kwarg"]),
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

/// Halite's answer to one case: a [`Decision`], or the blacklist's verdict.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub allowed: bool,
    /// The decision's reason; `None` for a blacklist case.
    pub reason: Option<Reason>,
    text: String,
}

impl From<Decision> for Outcome {
    fn from(d: Decision) -> Self {
        Self {
            allowed: d.allowed,
            text: d.to_string(),
            reason: Some(d.reason),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Halite's answer for `case` under `matching`.
pub fn decide(fixture: &Fixture, case: &Case, matching: Matching) -> Outcome {
    if case.kind == "blacklist" {
        let (blacklist, _) = Blacklist::parse(&case.config, matching);
        let hit = blacklist
            .user_is_blacklisted(&case.user)
            .or_else(|| blacklist.cmd_is_blacklisted(&case.fun));
        return Outcome {
            allowed: hit.is_none(),
            reason: None,
            text: hit.map_or_else(|| "not blacklisted".to_owned(), |h| format!("blocked: {h}")),
        };
    }
    decide_acl(fixture, case, matching).into()
}

fn decide_acl(fixture: &Fixture, case: &Case, matching: Matching) -> Decision {
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
        "user_runner" => UserAcl::parse(&case.config, matching).0.check_runner(
            &case.user,
            case.fun.as_str().unwrap_or_default(),
            &case.kwarg,
        ),
        kind => {
            let mut req = Request::new(&case.fun, &case.arg, &case.tgt, &case.tgt_type);
            if kind == "user" {
                return UserAcl::parse(&case.config, matching)
                    .0
                    .check(&case.user, &req, &ck, &whitelist);
            }
            if kind == "peer" {
                return PeerAcl::parse(&case.config, matching)
                    .0
                    .check(&case.id, &req, &ck);
            }
            req.minions = case.minions.as_deref();
            req.publish_validate = case.publish_validate;
            Acl::parse(&case.config, matching, "acl")
                .0
                .check(&req, &ck, &whitelist)
        }
    }
}
