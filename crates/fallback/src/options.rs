//! The minion options of the fallback executor (Halite's own; stock Salt has none).

use std::path::PathBuf;
use std::time::Duration;

use halite_config::{ConfigError, MinionConfig};
use rmpv::Value;

/// Default of `fallback_idle_timeout`: a worker with no job for this long exits.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest `fallback_idle_timeout` accepted (a day).
pub const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(86_400);

/// How the fallback executor runs, from the minion configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `fallback` (default `true`): `false` turns it off, and functions Halite lacks are
    /// Salt's "not available".
    pub enabled: bool,
    /// `fallback_python`: Salt's interpreter, or a `salt-call` script whose `#!` line
    /// names it; unset, `salt-call` is looked for on the minion's `PATH`.
    pub python: Option<PathBuf>,
    /// `fallback_idle_timeout` in seconds (default [`DEFAULT_IDLE_TIMEOUT`]): the worker
    /// exits once no job used it for this long.
    pub idle_timeout: Duration,
    /// The minion's configuration file, which the worker loads with Salt's
    /// `minion_config` (so Salt's modules see the same options).
    pub config_file: PathBuf,
    /// The minion id (the worker's `opts["id"]`).
    pub id: String,
}

impl Options {
    /// Reads the options from `cfg`; a value of the wrong type or range is an error
    /// naming the option.
    pub fn from_config(cfg: &MinionConfig) -> Result<Options, ConfigError> {
        let invalid = |option: &str, expected: &str, got: &Value| ConfigError::InvalidValue {
            option: option.to_owned(),
            origin: cfg.origin(option),
            expected: expected.to_owned(),
            got: got.to_string(),
        };
        let enabled = match cfg.get("fallback") {
            None | Some(Value::Nil) => true,
            Some(Value::Boolean(b)) => *b,
            Some(other) => return Err(invalid("fallback", "true or false", other)),
        };
        let python = match cfg.get("fallback_python") {
            None | Some(Value::Nil) => None,
            Some(v) => match halite_proto::value::str_of(v) {
                Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
                _ => {
                    return Err(invalid(
                        "fallback_python",
                        "the path of Salt's Python or of salt-call",
                        v,
                    ))
                }
            },
        };
        let idle_timeout = match cfg.get("fallback_idle_timeout") {
            None | Some(Value::Nil) => DEFAULT_IDLE_TIMEOUT,
            Some(v) => {
                let secs = match v {
                    Value::Integer(i) => i.as_f64(),
                    Value::F64(f) => Some(*f),
                    Value::F32(f) => Some(f64::from(*f)),
                    _ => None,
                };
                secs.filter(|s| *s > 0.0 && *s <= MAX_IDLE_TIMEOUT.as_secs_f64())
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        invalid(
                            "fallback_idle_timeout",
                            "a number of seconds above 0, at most 86400",
                            v,
                        )
                    })?
            }
        };
        Ok(Options {
            enabled,
            python,
            idle_timeout,
            config_file: cfg.conf_file.clone(),
            id: cfg.id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(yaml: &str) -> Result<Options, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("minion");
        let cfg = MinionConfig::from_yaml_str(&format!("id: m1\n{yaml}"), &file).unwrap();
        Options::from_config(&cfg)
    }

    #[test]
    fn defaults_are_on_with_discovery_and_a_five_minute_idle_timeout() {
        let o = options("").unwrap();
        assert!(o.enabled);
        assert_eq!(o.python, None);
        assert_eq!(o.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        assert_eq!(o.id, "m1");
        assert!(o.config_file.ends_with("minion"));
    }

    #[test]
    fn options_are_read_and_bad_values_name_the_option() {
        let o = options(
            "fallback: false\nfallback_python: /opt/salt/bin/salt-call\nfallback_idle_timeout: 2.5\n",
        )
        .unwrap();
        assert!(!o.enabled);
        assert_eq!(o.python, Some(PathBuf::from("/opt/salt/bin/salt-call")));
        assert_eq!(o.idle_timeout, Duration::from_millis(2500));
        for (yaml, option) in [
            ("fallback: maybe\n", "fallback"),
            ("fallback_python: ''\n", "fallback_python"),
            ("fallback_python: [a]\n", "fallback_python"),
            ("fallback_idle_timeout: 0\n", "fallback_idle_timeout"),
            ("fallback_idle_timeout: -3\n", "fallback_idle_timeout"),
            ("fallback_idle_timeout: 100000\n", "fallback_idle_timeout"),
            ("fallback_idle_timeout: soon\n", "fallback_idle_timeout"),
        ] {
            match options(yaml) {
                Err(ConfigError::InvalidValue { option: o, .. }) => assert_eq!(o, option, "{yaml}"),
                other => panic!("{yaml}: {other:?}"),
            }
        }
    }
}
