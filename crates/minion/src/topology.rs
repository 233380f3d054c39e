//! Which masters the minion connects to, and in what order: `master` (one address or a
//! list) under `master_type` (`str`, `failover`, `distributed`, `func`, `disable`) with
//! `random_master`/`master_shuffle` and `master_failback` — `MinionManager._spawn_minions`
//! and the list handling of `Minion.eval_master` in `salt/minion.py`, without the I/O.
//!
//! - `str` with one master, or `func` returning a string: one connection, kept up.
//! - `str` with a list, or `func` returning a list (hot-hot): a connection per master,
//!   each kept up on its own ([`Plan::Each`]).
//! - `failover` (and `distributed`, which 3008.3 runs as failover because its `crc32`
//!   call fails): one connection at a time, walking a [`FailoverOrder`].
//! - `disable`: no connection.
//!
//! Deviations from Salt, each safer: a master that failed is moved to the end of the list
//! by its list entry, not by its host name (Salt compares the host with entries that carry
//! a port, finds nothing when masters share an IP on different ports, and tries the dead
//! master first again); an empty `master` entry in a list stops the minion with Salt's
//! message and status 42 as a single empty `master` does (Salt dies on it with the same
//! status only when it reaches it).

use crate::settings::Settings;
use crate::transport::{split_master, unresolvable_message};
use halite_config::MasterType;
use halite_exec::{Context, Registry};
use halite_proto::{value, Value};

/// Exit status of `SaltSystemExit(code=42)` for a master address that cannot be used.
pub const EX_BAD_MASTER_ADDRESS: u8 = 42;

/// Exit status Salt uses when `master_type: func` fails (`EX_GENERIC`).
pub const EX_GENERIC: u8 = 1;

/// One `master` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterEntry {
    /// The entry as configured (`host`, `host:port`, `[v6]:port`).
    pub text: String,
    /// The host part: what Salt's log lines name (`opts["master"]`).
    pub host: String,
    /// The request port (`master_port` unless the entry carries one).
    pub port: u16,
}

impl MasterEntry {
    /// Parses `text` as Salt's `prep_ip_port` does, with `default_port` when it has none.
    pub fn parse(text: &str, default_port: u16) -> MasterEntry {
        let (host, port) = split_master(text, default_port);
        MasterEntry {
            text: text.to_owned(),
            host,
            port,
        }
    }
}

/// How the minion connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `master_type: disable`.
    Disabled,
    /// A connection per master, each kept up on its own (one master, or hot-hot).
    Each(Vec<MasterEntry>),
    /// One connection at a time over the list (`failover`, `distributed`).
    Failover(Vec<MasterEntry>),
}

impl Plan {
    /// How many masters the minion is connected to at once (each gets its own copy of
    /// forwarded events).
    pub fn concurrent(&self) -> usize {
        match self {
            Plan::Disabled => 0,
            Plan::Each(masters) => masters.len(),
            Plan::Failover(_) => 1,
        }
    }
}

/// The master setting cannot be used; Salt's message was logged and the minion exits with
/// `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadMaster {
    /// The exit status.
    pub status: u8,
}

/// Decides the plan for `settings`, `masters` being the addresses to use (the `master`
/// option, or what the `func` function returned). Logs Salt's start-up lines for the
/// master type.
pub fn plan(settings: &Settings, masters: &[String]) -> Result<Plan, BadMaster> {
    if settings.master_type == MasterType::Disable {
        tracing::warn!("Master is set to disable, skipping connection");
        return Ok(Plan::Disabled);
    }
    let entries: Vec<MasterEntry> = masters
        .iter()
        .map(|m| MasterEntry::parse(m, settings.master_port))
        .collect();
    if entries.is_empty() || entries.iter().any(|e| e.host.is_empty()) {
        tracing::error!("{}", unresolvable_message(""));
        return Err(BadMaster {
            status: EX_BAD_MASTER_ADDRESS,
        });
    }
    match settings.master_type {
        MasterType::Str | MasterType::Func | MasterType::Disable => {
            if settings.random_master && entries.len() == 1 {
                tracing::warn!(
                    "random_master is True but there is only one master specified. Ignoring."
                );
            }
            Ok(Plan::Each(entries))
        }
        MasterType::Failover | MasterType::Distributed => {
            tracing::info!(
                "Got list of available master addresses: {}",
                py_list(masters)
            );
            if settings.master_type == MasterType::Distributed {
                if entries.len() > 1 {
                    tracing::warn!("Failed to distribute to a specific master.");
                } else {
                    tracing::warn!("master_type = distributed needs more than 1 master.");
                }
            }
            if settings.master_shuffle {
                tracing::warn!("Use of 'master_shuffle' detected. 'master_shuffle' is deprecated in favor of 'random_master'. Please update your minion config file.");
            }
            if !settings.retry_dns.is_zero() && settings.master_type == MasterType::Failover {
                tracing::error!(critical = true,"'master_type' set to 'failover' but 'retry_dns' is not 0. Setting 'retry_dns' to 0 to failover to the next master on DNS errors.");
            }
            Ok(Plan::Failover(entries))
        }
    }
}

/// The settings one connection of `plan` runs with: `master` is `entry`; with failover a
/// sign-in is tried once and a timeout is an error (Salt forces `auth_tries` to 0, and
/// its default `auth_safemode: False` makes a timed-out sign-in raise), and a name that does not resolve
/// is skipped (`retry_dns` forced to 0).
pub fn settings_for(settings: &Settings, entry: &MasterEntry, failover: bool) -> Settings {
    let mut s = settings.clone();
    s.master = entry.text.clone();
    if failover {
        s.auth_tries = 1;
        s.sign_in_timeout_is_error = true;
        s.retry_dns = std::time::Duration::ZERO;
    }
    s
}

/// `eval_master_func`: `master` names a function (`module.function`) that is called once,
/// with no arguments, and must return the master address or a list of them. Failures log
/// Salt's messages and give status 1, as Salt exits.
pub fn eval_master_func(
    registry: &Registry,
    ctx: &Context,
    name: &str,
) -> Result<Vec<String>, BadMaster> {
    let bad = BadMaster { status: EX_GENERIC };
    let well_formed = name.split('.').count() == 2;
    if !well_formed || !registry.has(name) {
        tracing::error!("Failed to load module {name}");
        return Err(bad);
    }
    let ret = registry.execute(ctx, &Value::from(name), &Value::Array(Vec::new()));
    if !ret.success {
        tracing::error!(
            "An error occured while setting up the minion manager: {name} failed: {}",
            ret.ret
        );
        return Err(bad);
    }
    let masters = match &ret.ret {
        Value::String(_) => value::str_of(&ret.ret).map(|m| vec![m.to_owned()]),
        Value::Array(items) => items
            .iter()
            .map(|i| value::str_of(i).map(str::to_owned))
            .collect(),
        _ => None,
    };
    match masters {
        Some(masters) => {
            tracing::info!("Evaluated master from module: {name}");
            Ok(masters)
        }
        None => {
            tracing::error!("{} returned from {name} is not a string", py_str(&ret.ret));
            Err(bad)
        }
    }
}

/// Python's `str` of the scalars a function may return instead of an address (Salt's
/// message shows it); other values in their msgpack text.
fn py_str(v: &Value) -> String {
    match v {
        Value::Nil => "None".to_owned(),
        Value::Boolean(true) => "True".to_owned(),
        Value::Boolean(false) => "False".to_owned(),
        other => other.to_string(),
    }
}

/// Python's `repr` of a list of strings (Salt logs the master list that way).
fn py_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|i| format!("'{}'", i.replace('\\', "\\\\").replace('\'', "\\'")))
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// The order in which failover tries the masters (`opts["local_masters"]`), and the list
/// as configured (`opts["master_list"]`).
#[derive(Debug, Clone)]
pub struct FailoverOrder {
    list: Vec<MasterEntry>,
    order: Vec<usize>,
    random: bool,
    failback: bool,
}

impl FailoverOrder {
    /// The first order: as configured, shuffled with `random` (all but the first entry
    /// when `failback` is on, as Salt does, so the preferred master stays first).
    pub fn new(list: Vec<MasterEntry>, random: bool, failback: bool) -> FailoverOrder {
        let mut order = FailoverOrder {
            order: (0..list.len()).collect(),
            list,
            random,
            failback,
        };
        order.reset();
        order
    }

    /// The masters in the order to try them.
    pub fn entries(&self) -> impl Iterator<Item = (usize, &MasterEntry)> {
        self.order
            .iter()
            .filter_map(|i| Some((*i, self.list.get(*i)?)))
    }

    /// The preferred master (`master_list[0]`), which failback returns to.
    pub fn preferred(&self) -> Option<&MasterEntry> {
        self.list.first()
    }

    /// Whether `index` is the preferred master.
    pub fn is_preferred(&self, index: usize) -> bool {
        index == 0
    }

    /// The master at `index` failed: it goes to the end, the others keep their order
    /// (shuffled again with `random_master`).
    pub fn failed(&mut self, index: usize) {
        let mut rest: Vec<usize> = self.order.iter().copied().filter(|i| *i != index).collect();
        if self.random {
            shuffle(&mut rest);
        }
        if index < self.list.len() {
            rest.push(index);
        }
        self.order = rest;
    }

    /// Failback: back to the configured order (the preferred master first).
    pub fn reset(&mut self) {
        self.order = (0..self.list.len()).collect();
        if self.random {
            let skip = usize::from(self.failback).min(self.order.len());
            shuffle(&mut self.order[skip..]);
        }
    }
}

/// Fisher–Yates with the minion's random source.
fn shuffle(items: &mut [usize]) {
    for i in (1..items.len()).rev() {
        let j = crate::random_below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn settings(yaml: &str) -> Settings {
        let cfg = halite_config::MinionConfig::from_yaml_str(
            &format!("id: m1\n{yaml}"),
            Path::new("/tmp/halite-test/minion"),
        )
        .unwrap();
        Settings::from_config(&cfg).unwrap()
    }

    fn entries(texts: &[&str]) -> Vec<MasterEntry> {
        texts.iter().map(|t| MasterEntry::parse(t, 4506)).collect()
    }

    fn hosts(order: &FailoverOrder) -> Vec<String> {
        order.entries().map(|(_, e)| e.text.clone()).collect()
    }

    #[test]
    fn master_types_make_salts_plans() {
        let s = settings("master: [a, 'b:4606']\n");
        assert_eq!(
            plan(&s, &s.masters),
            Ok(Plan::Each(vec![
                MasterEntry {
                    text: "a".into(),
                    host: "a".into(),
                    port: 4506
                },
                MasterEntry {
                    text: "b:4606".into(),
                    host: "b".into(),
                    port: 4606
                },
            ]))
        );
        for kind in ["failover", "distributed"] {
            let s = settings(&format!("master: [a, b]\nmaster_type: {kind}\n"));
            let p = plan(&s, &s.masters).unwrap();
            assert_eq!(p, Plan::Failover(entries(&["a", "b"])));
            assert_eq!(p.concurrent(), 1);
        }
        // A single master under failover is a one-entry list, as Salt converts it.
        let s = settings("master: a\nmaster_type: failover\n");
        assert_eq!(plan(&s, &s.masters), Ok(Plan::Failover(entries(&["a"]))));
        let s = settings("master_type: disable\n");
        assert_eq!(plan(&s, &s.masters).map(|p| p.concurrent()), Ok(0));
        let s = settings("master: [a, b, c]\n");
        assert_eq!(plan(&s, &s.masters).map(|p| p.concurrent()), Ok(3));
    }

    #[test]
    fn an_empty_master_address_stops_the_minion_with_status_42() {
        for yaml in ["master: ''\n", "master: [a, '']\nmaster_type: failover\n"] {
            let s = settings(yaml);
            assert_eq!(
                plan(&s, &s.masters),
                Err(BadMaster { status: 42 }),
                "{yaml}"
            );
        }
        let s = settings("master: a\n");
        assert_eq!(plan(&s, &[]), Err(BadMaster { status: 42 }));
    }

    #[test]
    fn failover_connections_try_a_master_once_and_skip_bad_names() {
        let s = settings("master: [a, b]\nmaster_type: failover\n");
        let entry = MasterEntry::parse("b:4606", 4506);
        let f = settings_for(&s, &entry, true);
        assert_eq!(f.master, "b:4606");
        assert_eq!((f.auth_tries, f.sign_in_timeout_is_error), (1, true));
        assert!(f.retry_dns.is_zero());
        let hot = settings_for(&s, &entry, false);
        assert_eq!((hot.auth_tries, hot.sign_in_timeout_is_error), (7, false));
        assert_eq!(hot.retry_dns, std::time::Duration::from_secs(30));
    }

    #[test]
    fn a_failed_master_goes_to_the_end_by_entry_even_on_one_ip() {
        let mut order = FailoverOrder::new(
            entries(&["127.0.0.1:4506", "127.0.0.1:4516", "127.0.0.1:4526"]),
            false,
            false,
        );
        order.failed(0);
        assert_eq!(
            hosts(&order),
            ["127.0.0.1:4516", "127.0.0.1:4526", "127.0.0.1:4506"]
        );
        order.failed(1);
        assert_eq!(
            hosts(&order),
            ["127.0.0.1:4526", "127.0.0.1:4506", "127.0.0.1:4516"]
        );
        order.reset();
        assert_eq!(
            hosts(&order),
            ["127.0.0.1:4506", "127.0.0.1:4516", "127.0.0.1:4526"]
        );
        assert_eq!(order.preferred().map(|e| e.port), Some(4506));
        assert!(order.is_preferred(0) && !order.is_preferred(2));
    }

    #[test]
    fn random_master_shuffles_but_failback_keeps_the_preferred_master_first() {
        let names: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
        let list = entries(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let mut moved = false;
        for _ in 0..20 {
            let order = FailoverOrder::new(list.clone(), true, true);
            let got = hosts(&order);
            assert_eq!(got[0], "m0");
            let mut sorted = got.clone();
            sorted.sort();
            assert_eq!(sorted, names, "every master stays in the list once");
            moved |= got != names;
        }
        assert!(moved, "20 shuffles of 7 masters never changed the order");
        let mut order = FailoverOrder::new(list.clone(), true, false);
        order.failed(3);
        assert_eq!(hosts(&order).last().map(String::as_str), Some("m3"));
    }

    #[test]
    fn master_lists_are_logged_as_python_lists() {
        assert_eq!(
            py_list(&["127.0.0.1".into(), "it's".into()]),
            r"['127.0.0.1', 'it\'s']"
        );
    }

    #[test]
    fn master_type_func_takes_the_address_a_function_returns() {
        let registry = Registry::builtin();
        let cfg = std::sync::Arc::new(
            halite_config::MinionConfig::from_yaml_str(
                "id: m1\nmaster_type: func\n",
                Path::new("/tmp/halite-test/minion"),
            )
            .unwrap(),
        );
        let ctx = crate::func_context(cfg, std::sync::Arc::new(Value::Map(vec![])));
        assert_eq!(
            eval_master_func(&registry, &ctx, "test.version"),
            Ok(vec![crate::SALT_VERSION.to_owned()])
        );
        for bad in ["test.ping", "nosuch.func", "test", "a.b.c", "test.echo"] {
            assert_eq!(
                eval_master_func(&registry, &ctx, bad),
                Err(BadMaster { status: 1 }),
                "{bad}"
            );
        }
        assert_eq!(py_str(&Value::Boolean(true)), "True");
        assert_eq!(py_str(&Value::Nil), "None");
    }
}
