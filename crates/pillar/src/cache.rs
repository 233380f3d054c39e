//! The pillar cache (`pillar_cache: True`): compiled pillars per minion and pillarenv,
//! in memory.

use halite_proto::value;
use halite_proto::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most entries kept; at the limit, inserting drops the oldest (a minion can send any
/// `pillarenv`, so the key space is the minions' to choose).
pub const MAX_ENTRIES: usize = 65_536;

/// Stock's `PillarCache.pillar_key`: the minion id, or `id:pillarenv` with a pillarenv.
/// `pillarenv` is the request's, else with `pillarenv_from_saltenv` the request's
/// `saltenv` (or `env`), else the master's. `None` when the load's pillarenv is not a
/// string (such a request is compiled and not cached).
pub fn pillar_key(
    id: &str,
    load: &Value,
    master_pillarenv: Option<&str>,
    pillarenv_from_saltenv: bool,
) -> Option<String> {
    let given = |name: &str| value::get(load, name).filter(|v| !v.is_nil());
    let env = match given("pillarenv") {
        Some(v) => Some(value::str_of(v)?.to_owned()),
        None if pillarenv_from_saltenv => match given("saltenv").or_else(|| given("env")) {
            Some(v) => Some(value::str_of(v)?.to_owned()),
            None => None,
        },
        None => master_pillarenv.map(str::to_owned),
    };
    Some(match env.filter(|e| !e.is_empty()) {
        Some(env) => format!("{id}:{env}"),
        None => id.to_owned(),
    })
}

/// Compiled pillars (without `pillar_override`), each with when it was compiled.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Value)>>,
}

impl Cache {
    /// An empty cache whose entries expire after `ttl`.
    pub fn new(ttl: Duration) -> Cache {
        Cache {
            ttl,
            entries: Mutex::default(),
        }
    }

    /// The pillar cached under `key`, unless it is older than the ttl or empty (stock
    /// recompiles on an empty cached pillar).
    pub fn get(&self, key: &str, now: Instant) -> Option<Value> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let (at, pillar) = entries.get(key)?;
        let fresh = now.saturating_duration_since(*at) < self.ttl;
        (fresh && value::truthy(pillar)).then(|| pillar.clone())
    }

    /// Stores `pillar` under `key` as compiled at `at`.
    pub fn insert(&self, key: String, pillar: Value, at: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            let ttl = self.ttl;
            entries.retain(|_, (t, _)| at.saturating_duration_since(*t) < ttl);
            if entries.len() >= MAX_ENTRIES {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key, (at, pillar));
    }

    /// Drops `key` (`clean_cache`, sent by `saltutil.refresh_pillar`).
    pub fn flush(&self, key: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// How many pillars are cached.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{map, s};

    #[test]
    fn the_key_is_stocks_pillar_key() {
        let load = map([("id", s("m1"))]);
        assert_eq!(pillar_key("m1", &load, None, false).as_deref(), Some("m1"));
        assert_eq!(
            pillar_key("m1", &load, Some("prod"), false).as_deref(),
            Some("m1:prod")
        );
        let load = map([("pillarenv", s("dev")), ("saltenv", s("qa"))]);
        assert_eq!(
            pillar_key("m1", &load, Some("prod"), true).as_deref(),
            Some("m1:dev")
        );
        let load = map([("pillarenv", Value::Nil), ("saltenv", s("qa"))]);
        assert_eq!(
            pillar_key("m1", &load, Some("prod"), true).as_deref(),
            Some("m1:qa")
        );
        assert_eq!(
            pillar_key("m1", &load, Some("prod"), false).as_deref(),
            Some("m1:prod")
        );
        let load = map([("pillarenv", Value::from(3))]);
        assert_eq!(pillar_key("m1", &load, None, false), None);
    }

    #[test]
    fn an_entry_is_served_until_its_ttl_then_not() {
        let cache = Cache::new(Duration::from_secs(10));
        let t0 = Instant::now();
        cache.insert("m1".into(), map([("a", s("1"))]), t0);
        assert_eq!(
            cache.get("m1", t0 + Duration::from_secs(9)),
            Some(map([("a", s("1"))]))
        );
        assert_eq!(cache.get("m1", t0 + Duration::from_secs(10)), None);
        assert_eq!(cache.get("m2", t0), None);
    }

    #[test]
    fn flush_drops_one_minions_entry_only() {
        let cache = Cache::new(Duration::from_secs(10));
        let t0 = Instant::now();
        cache.insert("m1".into(), map([("a", s("1"))]), t0);
        cache.insert("m2".into(), map([("a", s("2"))]), t0);
        cache.flush("m1");
        assert_eq!(cache.get("m1", t0), None);
        assert!(cache.get("m2", t0).is_some());
    }

    #[test]
    fn an_empty_cached_pillar_is_a_miss_as_in_stock() {
        let cache = Cache::new(Duration::from_secs(10));
        let t0 = Instant::now();
        cache.insert("m1".into(), Value::Map(vec![]), t0);
        assert_eq!(cache.get("m1", t0), None);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_limit() {
        let cache = Cache::new(Duration::from_secs(3600));
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            let at = t0 + Duration::from_millis(u64::try_from(i).unwrap());
            cache.insert(format!("m{i}"), map([("i", s("x"))]), at);
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert!(cache.get("m0", t0).is_none(), "the oldest went first");
        assert!(cache.get(&format!("m{}", MAX_ENTRIES + 9), t0).is_some());
    }
}
