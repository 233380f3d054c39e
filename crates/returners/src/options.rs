//! `salt.returners.get_returner_options` as a minion job runs it (`__salt__` holds
//! `config.option`, so every lookup goes through [`Host::config_option`]: the minion
//! config, then grains, pillar, and the pillar's `master` dict).
//!
//! For each option of a returner `R`, the first of these that is set and neither `None`
//! nor `""` wins, else the returner's default:
//! - without `ret_config`: the `R` dict's key (`R: {option: ...}`), else `R.option`;
//! - with `ret_config: A` (`--return_config A`): the `A.R` dict's key, else `A.R.option`,
//!   when truthy; else as without `ret_config`.
//!
//! Then every key of `ret_kwargs` (`--return_kwargs`) overrides, options the returner does
//! not read included. Lookups are flat, as `config.option`'s are: `A: {R: {...}}` nested
//! three deep is not found, `A.R: {...}` is.
//!
//! Deviation: a `ret_kwargs` that is not a dict (nor empty) fails the returner with
//! "ret_kwargs must be a dict, not `<type>`", where Python's `dict.update` fails with its
//! own text or, for a list of pairs, uses it.

use crate::{Error, Host};
use halite_output::{py_str, py_type_name};
use halite_proto::value::{self, s};
use halite_proto::Value;

/// A returner's options, in the order they were set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options(Vec<(String, Value)>);

impl Options {
    /// The option `name`, if set.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Whether `name` is set (Python's `name in options`).
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name` in place, or at the end when new (a Python dict's assignment).
    fn set(&mut self, name: &str, v: Value) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = v,
            None => self.0.push((name.to_owned(), v)),
        }
    }
}

/// `get_returner_options(virtualname, ret, attrs, defaults=defaults)` for the return `ret`
/// (carrying `ret_config`/`ret_kwargs` when the job had them).
pub fn get_returner_options(
    host: &dyn Host,
    virtualname: &str,
    ret: &Value,
    attrs: &[&str],
    defaults: &[(&str, Value)],
) -> Result<Options, Error> {
    // `_fetch_ret_config`: `str(ret["ret_config"])` when present.
    let ret_config = value::get(ret, "ret_config")
        .map(py_str)
        .unwrap_or_default();
    let mut options = Options::default();
    for attr in attrs {
        let found = fetch_option(host, &ret_config, virtualname, attr)?;
        if !matches!(&found, Value::Nil) && value::str_of(&found) != Some("") {
            options.set(attr, found);
        } else if let Some((_, default)) = defaults.iter().find(|(k, _)| k == attr) {
            options.set(attr, default.clone());
        }
    }
    if let Some(kwargs) = value::get(ret, "ret_kwargs") {
        match kwargs {
            Value::Map(entries) => {
                for (k, v) in entries {
                    if let Some(k) = value::str_of(k) {
                        options.set(k, v.clone());
                    }
                }
            }
            // `dict.update("")` and `dict.update([])` change nothing.
            Value::String(_) | Value::Array(_) if !value::truthy(kwargs) => {}
            other => {
                return Err(Error::Options(format!(
                    "ret_kwargs must be a dict, not {}",
                    py_type_name(other)
                )))
            }
        }
    }
    Ok(options)
}

/// `config.option(key, default)`.
fn option(host: &dyn Host, key: &str, default: Value) -> Value {
    host.config_option(key).unwrap_or(default)
}

/// `d.get(key, default)` on a value that must be a dict (Python raises `AttributeError`
/// otherwise).
fn dict_get(d: &Value, key: &str, default: Value) -> Result<Value, Error> {
    match d {
        Value::Map(_) => Ok(value::get(d, key).cloned().unwrap_or(default)),
        other => Err(Error::Options(format!(
            "'{}' object has no attribute 'get'",
            py_type_name(other)
        ))),
    }
}

/// `_fetch_option(cfg, ret_config, virtualname, attr_name)` with `cfg` being
/// `config.option`.
fn fetch_option(
    host: &dyn Host,
    ret_config: &str,
    virtualname: &str,
    attr: &str,
) -> Result<Value, Error> {
    let c_cfg = option(host, virtualname, Value::Map(Vec::new()));
    let default_key = format!("{virtualname}.{attr}");
    if !ret_config.is_empty() {
        let ret_cfg = option(
            host,
            &format!("{ret_config}.{virtualname}"),
            Value::Map(Vec::new()),
        );
        let override_default = option(host, &format!("{ret_config}.{default_key}"), s(""));
        let found = dict_get(&ret_cfg, attr, override_default)?;
        if value::truthy(&found) {
            return Ok(found);
        }
    }
    dict_get(&c_cfg, attr, option(host, &default_key, s("")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;
    use halite_proto::value::map;

    const ATTRS: &[&str] = &["level", "facility", "tag"];

    fn defaults() -> Vec<(&'static str, Value)> {
        vec![("level", s("LOG_INFO")), ("facility", s("LOG_USER"))]
    }

    fn opts(host: &FakeHost, ret: &Value) -> Result<Options, Error> {
        get_returner_options(host, "syslog", ret, ATTRS, &defaults())
    }

    #[test]
    fn defaults_fill_what_the_config_does_not_set() {
        let host = FakeHost::with_opts(map([("syslog.tag", s("mysalt"))]));
        let got = opts(&host, &map([("id", s("m1"))])).unwrap();
        assert_eq!(
            got,
            Options(vec![
                ("level".into(), s("LOG_INFO")),
                ("facility".into(), s("LOG_USER")),
                ("tag".into(), s("mysalt")),
            ])
        );
    }

    #[test]
    fn the_nested_dict_wins_over_the_dotted_key_and_empty_values_fall_back() {
        let host = FakeHost::with_opts(map([
            ("syslog", map([("level", s("LOG_ERR")), ("tag", s(""))])),
            ("syslog.level", s("LOG_DEBUG")),
            ("syslog.facility", Value::Nil),
            ("syslog.tag", s("never read: the dict has the key")),
        ]));
        let got = opts(&host, &map([("id", s("m1"))])).unwrap();
        assert_eq!(got.get("level"), Some(&s("LOG_ERR")));
        assert_eq!(got.get("facility"), Some(&s("LOG_USER")));
        assert!(!got.contains("tag"), "{got:?}");
    }

    #[test]
    fn ret_config_reads_the_alternative_first_and_falls_back_to_the_default_place() {
        let host = FakeHost::with_opts(map([
            ("alternative.syslog.level", s("LOG_WARNING")),
            ("alternative.syslog", map([("tag", s("alt"))])),
            ("syslog.facility", s("LOG_DAEMON")),
            ("syslog.tag", s("plain")),
        ]));
        let ret = map([("ret_config", s("alternative"))]);
        let got = opts(&host, &ret).unwrap();
        assert_eq!(got.get("level"), Some(&s("LOG_WARNING")));
        assert_eq!(got.get("facility"), Some(&s("LOG_DAEMON")));
        assert_eq!(got.get("tag"), Some(&s("alt")));
        // An empty ret_config is no ret_config.
        let got = opts(&host, &map([("ret_config", s(""))])).unwrap();
        assert_eq!(got.get("tag"), Some(&s("plain")));
    }

    #[test]
    fn ret_kwargs_override_every_option_and_add_new_ones() {
        let host = FakeHost::with_opts(map([("syslog.tag", s("conf"))]));
        let ret = map([(
            "ret_kwargs",
            map([("tag", s("kw")), ("extra", Value::from(1))]),
        )]);
        let got = opts(&host, &ret).unwrap();
        assert_eq!(got.get("tag"), Some(&s("kw")));
        assert_eq!(got.get("extra"), Some(&Value::from(1)));
        let bad = map([("ret_kwargs", s("tag=kw"))]);
        assert_eq!(
            opts(&host, &bad),
            Err(Error::Options("ret_kwargs must be a dict, not str".into()))
        );
        assert!(opts(&host, &map([("ret_kwargs", s(""))])).is_ok());
    }

    #[test]
    fn grains_then_pillar_then_the_pillars_master_dict_are_consulted_after_the_config() {
        let mut host = FakeHost::with_opts(map([("id", s("m1"))]));
        host.grains = map([("syslog.level", s("LOG_ALERT"))]);
        host.pillar = map([
            ("syslog.level", s("LOG_CRIT")),
            ("master", map([("syslog.tag", s("from-master"))])),
        ]);
        let got = opts(&host, &map([("id", s("m1"))])).unwrap();
        assert_eq!(got.get("level"), Some(&s("LOG_ALERT")));
        assert_eq!(got.get("tag"), Some(&s("from-master")));
    }

    #[test]
    fn a_returner_section_that_is_not_a_dict_fails_as_python_does() {
        let host = FakeHost::with_opts(map([("syslog", s("LOG_ERR"))]));
        assert_eq!(
            opts(&host, &map([("id", s("m1"))])),
            Err(Error::Options("'str' object has no attribute 'get'".into()))
        );
    }
}
