//! The master options pillar reads, and whether pillar is configured at all.

use crate::Error;
use halite_config::MasterConfig;
use halite_proto::value;
use halite_proto::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Option: the Python interpreter (or a `salt-call`/`salt-master` script) with Salt.
pub const OPT_PYTHON: &str = "halite_salt_python";
/// Option: how many pillar worker processes (default `min(2, cores)`).
pub const OPT_WORKERS: &str = "halite_pillar_workers";
/// Option: seconds one compilation may take before its worker is killed (default 60).
pub const OPT_TIMEOUT: &str = "halite_pillar_timeout";

/// The default of [`OPT_TIMEOUT`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Salt's `pillar_cache_ttl` default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(3600);
/// Most workers [`OPT_WORKERS`] may ask for.
pub const MAX_WORKERS: usize = 64;

/// What the pillar service reads from the master config.
#[derive(Debug, Clone)]
pub struct Options {
    /// The master config file the Python side loads (`salt.config.master_config`).
    pub conf_file: PathBuf,
    /// [`OPT_PYTHON`]; `None`: `salt-call` on `PATH`.
    pub python: Option<PathBuf>,
    /// [`OPT_WORKERS`].
    pub workers: usize,
    /// [`OPT_TIMEOUT`].
    pub timeout: Duration,
    /// The Python side's log level: the more verbose of `log_level` and
    /// `log_level_logfile` (the master's own filter decides what is written).
    pub log_level: String,
    /// Compiled pillars are served from the cache: `pillar_cache` on (and
    /// `master_async_mworker` off, with which stock never uses the cache).
    pub pillar_cache: bool,
    /// `pillar_cache_ttl`.
    pub pillar_cache_ttl: Duration,
    /// The master's `pillarenv` (a string, or none).
    pub pillarenv: Option<String>,
    /// `pillarenv_from_saltenv`.
    pub pillarenv_from_saltenv: bool,
    /// `pillar_source_merging_strategy` as `salt.utils.dictupdate.merge` resolves it with
    /// the master's `renderer` (`smart` becomes `recurse` or `aggregate`).
    pub merge_strategy: String,
    /// Something besides the top files needs Python: `ext_pillar`, `pillar_opts` or
    /// `decrypt_pillar` is set.
    pub always_python: bool,
    /// Where a pillar top file may be: `<root>/<state_top>` for every `pillar_roots`
    /// directory. A root with `__env__` in it counts as configured.
    pub top_files: Vec<PathBuf>,
}

impl Options {
    /// Reads the options from the master config. A malformed [`OPT_WORKERS`] or
    /// [`OPT_TIMEOUT`] is an error naming it.
    pub fn from_master(cfg: &MasterConfig) -> Result<Options, Error> {
        let python = match cfg.get(OPT_PYTHON) {
            None | Some(Value::Nil) => None,
            Some(v) => match value::str_of(v) {
                Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
                _ => {
                    return Err(Error::Config {
                        option: OPT_PYTHON,
                        message: "must be a path".into(),
                    })
                }
            },
        };
        let workers = match cfg.get(OPT_WORKERS) {
            None | Some(Value::Nil) => default_workers(),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| (1..=MAX_WORKERS).contains(n))
                .ok_or_else(|| Error::Config {
                    option: OPT_WORKERS,
                    message: format!("must be a whole number from 1 to {MAX_WORKERS}"),
                })?,
        };
        let timeout = match cfg.get(OPT_TIMEOUT) {
            None | Some(Value::Nil) => DEFAULT_TIMEOUT,
            Some(v) => seconds(v).ok_or_else(|| Error::Config {
                option: OPT_TIMEOUT,
                message: "must be a positive number of seconds".into(),
            })?,
        };
        let log_level = match cfg.log_level_logfile {
            Some(file) if level_rank(file.as_str()) < level_rank(cfg.log_level.as_str()) => {
                file.as_str()
            }
            _ => cfg.log_level.as_str(),
        }
        .to_owned();
        let truthy = |name: &str| cfg.get(name).is_some_and(value::truthy);
        let pillar_cache = truthy("pillar_cache") && !truthy("master_async_mworker");
        let pillar_cache_ttl = cfg
            .get("pillar_cache_ttl")
            .and_then(seconds)
            .unwrap_or(DEFAULT_CACHE_TTL);
        let pillarenv = cfg
            .get("pillarenv")
            .and_then(value::str_of)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let strategy = cfg
            .get("pillar_source_merging_strategy")
            .and_then(value::str_of)
            .filter(|s| !s.is_empty())
            .unwrap_or("smart");
        let renderer = cfg
            .get("renderer")
            .and_then(value::str_of)
            .unwrap_or("jinja|yaml");
        let merge_strategy = resolve_strategy(strategy, renderer).to_owned();
        let ext_pillar = match cfg.get("ext_pillar") {
            None | Some(Value::Nil) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            // Malformed: Python reports it as stock does.
            Some(_) => true,
        };
        let always_python = ext_pillar || truthy("pillar_opts") || truthy("decrypt_pillar");
        let top = cfg
            .get("state_top")
            .and_then(value::str_of)
            .unwrap_or("top.sls");
        let top = top.strip_prefix("salt://").unwrap_or(top);
        let top = top.trim_start_matches('/');
        let top_files = cfg
            .roots("pillar_roots")
            .into_iter()
            .flat_map(|(_, dirs)| dirs)
            .map(|dir| Path::new(&dir).join(top))
            .collect();
        Ok(Options {
            conf_file: cfg.conf_file.clone(),
            python,
            workers,
            timeout,
            log_level,
            pillar_cache,
            pillar_cache_ttl,
            pillarenv,
            pillarenv_from_saltenv: truthy("pillarenv_from_saltenv"),
            merge_strategy,
            always_python,
            top_files,
        })
    }

    /// Whether pillar is configured now: [`Options::always_python`], or a top file in a
    /// `pillar_roots` directory (or a root templated with `__env__`). Without any of these
    /// stock compiles nothing but the request's `pillar_override`.
    pub fn configured(&self) -> bool {
        self.always_python
            || self
                .top_files
                .iter()
                .any(|f| f.to_str().is_some_and(|s| s.contains("__env__")) || f.is_file())
    }
}

/// `min(2, cores)`.
fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(2)
}

/// A positive number of seconds.
fn seconds(v: &Value) -> Option<Duration> {
    let secs = match v {
        Value::Integer(i) => i.as_f64(),
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        _ => None,
    }?;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

/// Verbosity order of Salt's level names (lower is more verbose).
fn level_rank(name: &str) -> usize {
    [
        "all", "garbage", "trace", "debug", "profile", "info", "warning", "error", "critical",
        "quiet",
    ]
    .iter()
    .position(|n| *n == name)
    .unwrap_or(6)
}

/// `salt.utils.dictupdate.merge`'s choice: `smart` is `aggregate` with a `yamlex` renderer,
/// `recurse` otherwise.
fn resolve_strategy<'a>(strategy: &'a str, renderer: &str) -> &'a str {
    if strategy != "smart" {
        return strategy;
    }
    let last = renderer.rsplit('|').next().unwrap_or(renderer);
    if last == "yamlex" || renderer.starts_with("yamlex_") {
        "aggregate"
    } else {
        "recurse"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(yaml: &str) -> MasterConfig {
        MasterConfig::from_yaml_str(yaml, Path::new("/etc/salt/master")).unwrap()
    }

    #[test]
    fn defaults_are_salts_and_halites() {
        let o = Options::from_master(&cfg("{}")).unwrap();
        assert_eq!(o.python, None);
        assert!((1..=2).contains(&o.workers));
        assert_eq!(o.timeout, DEFAULT_TIMEOUT);
        assert!(!o.pillar_cache);
        assert_eq!(o.pillar_cache_ttl, DEFAULT_CACHE_TTL);
        assert_eq!(o.merge_strategy, "recurse");
        assert!(!o.always_python);
        assert_eq!(o.conf_file, Path::new("/etc/salt/master"));
        assert_eq!(
            o.top_files,
            [
                PathBuf::from("/srv/pillar/top.sls"),
                PathBuf::from("/srv/spm/pillar/top.sls")
            ]
        );
    }

    #[test]
    fn halite_options_are_read_and_bad_values_name_the_option() {
        let o = Options::from_master(&cfg(
            "halite_salt_python: /opt/salt/bin/python3\nhalite_pillar_workers: 3\nhalite_pillar_timeout: 2.5\n",
        ))
        .unwrap();
        assert_eq!(
            o.python.as_deref(),
            Some(Path::new("/opt/salt/bin/python3"))
        );
        assert_eq!(o.workers, 3);
        assert_eq!(o.timeout, Duration::from_millis(2500));
        for bad in [
            "halite_pillar_workers: 0",
            "halite_pillar_workers: many",
            "halite_pillar_timeout: -1",
            "halite_salt_python: [a]",
        ] {
            let err = Options::from_master(&cfg(bad)).unwrap_err();
            let option = bad.split(':').next().unwrap();
            assert!(err.to_string().contains(option), "{bad}: {err}");
        }
    }

    #[test]
    fn the_cache_is_on_only_with_pillar_cache_and_the_sync_workers() {
        let o = Options::from_master(&cfg("pillar_cache: true\npillar_cache_ttl: 5")).unwrap();
        assert!(o.pillar_cache);
        assert_eq!(o.pillar_cache_ttl, Duration::from_secs(5));
        let o =
            Options::from_master(&cfg("pillar_cache: true\nmaster_async_mworker: true")).unwrap();
        assert!(
            !o.pillar_cache,
            "stock's async _pillar never reads the cache"
        );
    }

    #[test]
    fn pillar_is_configured_by_a_top_file_or_options_that_need_python() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display();
        let o = Options::from_master(&cfg(&format!("pillar_roots: {{base: [{root}]}}"))).unwrap();
        assert!(!o.configured(), "an empty pillar root compiles to nothing");
        std::fs::write(dir.path().join("top.sls"), "base: {}\n").unwrap();
        assert!(o.configured());
        for yaml in [
            "ext_pillar: [{cmd_yaml: echo}]",
            "ext_pillar: malformed",
            "pillar_opts: true",
            "decrypt_pillar: [secret: gpg]",
            "pillar_roots: {__env__: [/srv/__env__/pillar]}",
        ] {
            let o = Options::from_master(&cfg(&format!(
                "{yaml}\n{}",
                if yaml.starts_with("pillar_roots") {
                    String::new()
                } else {
                    "pillar_roots: {base: [/nonexistent]}".to_owned()
                }
            )))
            .unwrap();
            assert!(o.configured(), "{yaml}");
        }
        let o = Options::from_master(&cfg("ext_pillar: []\npillar_roots: {base: [/nonexistent]}"))
            .unwrap();
        assert!(!o.configured());
    }

    #[test]
    fn state_top_names_the_top_file() {
        let o = Options::from_master(&cfg(
            "state_top: salt://tops/main.sls\npillar_roots: {base: [/p]}",
        ))
        .unwrap();
        assert_eq!(o.top_files, [PathBuf::from("/p/tops/main.sls")]);
    }

    #[test]
    fn smart_merging_resolves_like_dictupdate() {
        assert_eq!(resolve_strategy("smart", "jinja|yaml"), "recurse");
        assert_eq!(resolve_strategy("smart", "jinja|yamlex"), "aggregate");
        assert_eq!(resolve_strategy("smart", "yamlex_jinja"), "aggregate");
        assert_eq!(resolve_strategy("list", "jinja|yaml"), "list");
    }

    #[test]
    fn the_python_log_level_is_the_more_verbose_of_the_two() {
        let o = Options::from_master(&cfg("log_level: warning\nlog_level_logfile: debug")).unwrap();
        assert_eq!(o.log_level, "debug");
        let o = Options::from_master(&cfg("log_level: info\nlog_level_logfile: error")).unwrap();
        assert_eq!(o.log_level, "info");
    }
}
