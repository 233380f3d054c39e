//! Salt's returners on the Halite minion: after a job's return went to the master, the
//! returners the job names (`salt --return a,b`) get the return too, as
//! `Minion._thread_return` hands it to `returners["<name>.returner"](ret)`.
//!
//! What it does:
//! - [`run`]: Salt's returner step of `_thread_return` (and `_thread_multi_return`): the
//!   names are the publish's `ret` split on `,` (plus the minion option `return`, a
//!   string or a list, for single-function jobs), each run once; every returner gets
//!   the return dict Salt builds ([`returner_ret`]: `success`, `return`, `retcode`,
//!   `jid`, `fun`, `fun_args`, ..., `ret_config`, `ret_kwargs`, `id`). A returner that
//!   fails is logged with Salt's message ("The return failed for job %s: %s"), an unknown
//!   one with "Returner %s could not be loaded: '%s' is not available."; neither stops
//!   the others.
//! - The registry ([`RETURNERS`]): one file per returner; adding one is its file and one
//!   line in the table. [`names`] and [`functions`] are what `sys.list_returners` and
//!   `sys.list_returner_functions` report.
//! - [`options::get_returner_options`]: Salt's option lookup (`<returner>.<option>`, the
//!   `<returner>` dict, `alternative.<returner>.<option>` with `--return_config`,
//!   `--return_kwargs` overriding).
//! - The returners: [`master_bus`] (Halite's: the return as an event on the master bus,
//!   under a tag of the caller's choosing, through the minion's `fire_master` queue),
//!   [`syslog`] and [`rawfile_json`] (Salt's, writing Salt's bytes).
//!
//! What it does not do: no I/O of its own beyond what a returner is for (the syslog socket,
//! the JSON file). The minion lends each run a [`Host`]: its configuration lookup and its
//! `fire_master` queue. No master-side returner functions (`event_return`, `save_load`,
//! `get_jid`, ...): a Halite master keeps its own job cache. `salt-call --return` is
//! not wired to it.
//!
//! Deviations from Salt:
//! - Returner names run in the order given, each once (Salt iterates a Python `set`, in
//!   no fixed order).
//! - Only Halite's returners exist: Salt's other returners (mysql, redis, ...) and
//!   custom `_returners` modules are unknown names here.
//! - In the return of a function that raised, `out` comes after `retcode` (Salt puts it
//!   before); the other keys are in Salt's order.
//! - `config.option`'s built-in defaults (`mongo.db`, `redis.host`, ...) are not
//!   consulted: no Halite returner reads them.
//!
//! Invariants: nothing here panics on what a publish or a job carries; a returner runs on
//! the job's own thread after the normal return was sent, so it can neither lose nor
//! delay it.

pub mod json;
pub mod master_bus;
pub mod options;
pub mod rawfile_json;
pub mod syslog;

mod error;
#[cfg(test)]
mod testing;

pub use error::Error;

use halite_output::py_str;
use halite_proto::value::{self, s};
use halite_proto::Value;

/// What the minion lends a returner.
pub trait Host {
    /// Salt's `config.option(key)` without its default: the minion config, else the
    /// grains, else the pillar, else the pillar's `master` dict (see [`config_option`]).
    fn config_option(&self, key: &str) -> Option<Value>;

    /// Queues `data` for the master(s) as an event tagged `tag`, as `event.fire_master`
    /// does (the single form: a master fires `{id, cmd, data, tag, ...}` under `tag`).
    /// The error says why it was not queued.
    fn fire_master(&self, tag: &str, data: Value) -> Result<(), String>;
}

/// `config.option(key)`'s lookup order over a minion's `__opts__` (looked up by `opts`),
/// `__grains__` and `__pillar__`: the first that has `key`.
pub fn config_option(
    key: &str,
    opts: impl FnOnce(&str) -> Option<Value>,
    grains: &Value,
    pillar: &Value,
) -> Option<Value> {
    opts(key)
        .or_else(|| value::get(grains, key).cloned())
        .or_else(|| value::get(pillar, key).cloned())
        .or_else(|| {
            value::get(pillar, "master")
                .filter(|m| matches!(m, Value::Map(_)))
                .and_then(|m| value::get(m, key))
                .cloned()
        })
}

/// A returner's `returner(ret)`.
pub type ReturnerFn = fn(&dyn Host, &Value) -> Result<(), Error>;

/// One returner module.
#[derive(Debug, Clone, Copy)]
pub struct Returner {
    /// Its name (`--return <name>`).
    pub name: &'static str,
    /// Its `returner` function.
    pub returner: ReturnerFn,
}

/// Every returner, sorted by name.
pub static RETURNERS: &[Returner] = &[
    master_bus::RETURNER,
    rawfile_json::RETURNER,
    syslog::RETURNER,
];

/// The returner called `name`.
pub fn find(name: &str) -> Option<&'static Returner> {
    RETURNERS.iter().find(|r| r.name == name)
}

/// The returner names, sorted (`sys.list_returners`).
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = RETURNERS.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names
}

/// The returner functions, sorted (`sys.list_returner_functions`): `<name>.returner`.
pub fn functions() -> Vec<String> {
    names()
        .into_iter()
        .map(|n| format!("{n}.returner"))
        .collect()
}

/// A finished job, as `_thread_return` holds it when its returners run.
#[derive(Debug, Clone)]
pub struct Finished<'a> {
    /// The publish load (`jid`, `fun`, `arg`, `ret`, `ret_config`, `ret_kwargs`, `user`,
    /// `master_id`, `metadata`).
    pub load: &'a Value,
    /// `return`.
    pub ret: Value,
    /// `retcode` (per function for a multi-function job).
    pub retcode: Value,
    /// `success` (per function for a multi-function job).
    pub success: Value,
    /// `out`, when the job failed in a way that makes Salt set it (`nested`).
    pub out: Option<String>,
    /// A multi-function job (`_thread_multi_return`).
    pub multi: bool,
}

/// What became of one returner.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It ran.
    Done,
    /// No returner has that name.
    Unknown,
    /// It failed.
    Failed(Error),
}

/// The returner names of a job, in order, each once: the publish's `ret` (a string,
/// split on `,`), then, for a single-function job, the minion option `return` (a string,
/// or a list joined with `,` as Salt's config loader joins it).
pub fn requested(job: &Finished<'_>, opts_return: Option<&Value>) -> Vec<String> {
    let mut spec = value::get(job.load, "ret")
        .and_then(value::str_of)
        .unwrap_or("")
        .to_owned();
    if !job.multi {
        let default = match opts_return {
            Some(Value::String(text)) => text.as_str().map(str::to_owned),
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .filter_map(value::str_of)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        };
        if let Some(default) = default {
            spec = if spec.is_empty() {
                default
            } else {
                format!("{spec},{default}")
            };
        }
    }
    if spec.is_empty() {
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    for name in spec.split(',') {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names
}

/// The return dict Salt hands every returner of minion `id`'s job: `success`, `return`,
/// `retcode`, `out` (when set), `jid`, `fun`, `fun_args`, then when the publish had them
/// `user`, `master_id`, `metadata` (a dict), `ret_config`, `ret_kwargs`, and last `id`.
/// For a multi-function job: `return`, `retcode`, `success`, `jid`, `fun`, `fun_args`,
/// `user`, `metadata` (any), `ret_config`, `ret_kwargs`, `id`.
pub fn returner_ret(id: &str, job: &Finished<'_>) -> Value {
    let load = job.load;
    let field = |k: &str| value::get(load, k).cloned();
    let mut out = if job.multi {
        vec![
            (s("return"), job.ret.clone()),
            (s("retcode"), job.retcode.clone()),
            (s("success"), job.success.clone()),
        ]
    } else {
        vec![
            (s("success"), job.success.clone()),
            (s("return"), job.ret.clone()),
            (s("retcode"), job.retcode.clone()),
        ]
    };
    if let (Some(o), false) = (&job.out, job.multi) {
        out.push((s("out"), s(o.as_str())));
    }
    out.push((s("jid"), field("jid").unwrap_or(Value::Nil)));
    out.push((s("fun"), field("fun").unwrap_or(Value::Nil)));
    out.push((s("fun_args"), field("arg").unwrap_or(Value::Nil)));
    if let Some(user) = field("user") {
        out.push((s("user"), user));
    }
    if !job.multi {
        if let Some(master_id) = field("master_id") {
            out.push((s("master_id"), master_id));
        }
    }
    match field("metadata") {
        Some(meta @ Value::Map(_)) => out.push((s("metadata"), meta)),
        Some(meta) if job.multi => out.push((s("metadata"), meta)),
        _ => {}
    }
    for k in ["ret_config", "ret_kwargs"] {
        if let Some(v) = field(k) {
            out.push((s(k), v));
        }
    }
    out.push((s("id"), s(id)));
    Value::Map(out)
}

/// Runs the returners job `job` of minion `id` names ([`requested`]) with its return
/// ([`returner_ret`]), logging each failure with Salt's message; says what became of each.
pub fn run(
    host: &dyn Host,
    id: &str,
    job: &Finished<'_>,
    opts_return: Option<&Value>,
) -> Vec<(String, Outcome)> {
    let names = requested(job, opts_return);
    if names.is_empty() {
        return Vec::new();
    }
    let ret = returner_ret(id, job);
    let jid = value::get(job.load, "jid").map(py_str).unwrap_or_default();
    names
        .into_iter()
        .map(|name| {
            let function = format!("{name}.returner");
            let outcome = match find(&name) {
                None => {
                    if job.multi {
                        // `returners[...]` raising KeyError, caught and logged.
                        tracing::error!("The return failed for job {jid}: '{function}'");
                    } else {
                        tracing::error!(
                            "Returner {function} could not be loaded: '{function}' is not available."
                        );
                    }
                    Outcome::Unknown
                }
                Some(returner) => match (returner.returner)(host, &ret) {
                    Ok(()) => Outcome::Done,
                    Err(e) => {
                        tracing::error!("The return failed for job {jid}: {e}");
                        Outcome::Failed(e)
                    }
                },
            };
            (name, outcome)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;
    use halite_proto::value::map;

    fn load(ret: &str) -> Value {
        map([
            ("fun", s("cmd.run_all")),
            ("arg", Value::Array(vec![s("echo ok; exit 2")])),
            ("tgt", s("*")),
            ("jid", s("20260101000000000001")),
            ("ret", s(ret)),
            ("tgt_type", s("glob")),
            ("ret_kwargs", map([("tag", s("monitoring"))])),
            ("user", s("root")),
        ])
    }

    fn finished(load: &Value) -> Finished<'_> {
        Finished {
            load,
            ret: map([("retcode", Value::from(2)), ("stdout", s("ok"))]),
            retcode: Value::from(2),
            success: Value::Boolean(false),
            out: None,
            multi: false,
        }
    }

    #[test]
    fn the_registry_lists_each_returner_sorted_with_its_returner_function() {
        assert_eq!(names(), ["master_bus", "rawfile_json", "syslog"]);
        assert_eq!(
            functions(),
            [
                "master_bus.returner",
                "rawfile_json.returner",
                "syslog.returner"
            ]
        );
        assert!(RETURNERS.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(find("syslog").map(|r| r.name), Some("syslog"));
        assert!(find("mysql").is_none());
    }

    #[test]
    fn names_come_from_ret_then_the_minion_option_each_once_in_order() {
        let l = load("syslog,master_bus,syslog");
        let job = finished(&l);
        assert_eq!(requested(&job, None), ["syslog", "master_bus"]);
        assert_eq!(
            requested(&job, Some(&s("rawfile_json"))),
            ["syslog", "master_bus", "rawfile_json"]
        );
        let l = load("");
        let job = finished(&l);
        assert!(requested(&job, None).is_empty());
        assert_eq!(
            requested(&job, Some(&Value::Array(vec![s("a"), s("b")]))),
            ["a", "b"]
        );
        // Multi-function jobs ignore the minion option, as Salt's do.
        let multi = Finished {
            multi: true,
            ..finished(&l)
        };
        assert!(requested(&multi, Some(&s("syslog"))).is_empty());
    }

    #[test]
    fn the_returners_ret_has_salts_keys_in_salts_order() {
        let mut l = load("master_bus");
        value::set(&mut l, "master_id", s("mm"));
        value::set(&mut l, "metadata", s("not a dict"));
        value::set(&mut l, "ret_config", s("alternative"));
        let ret = returner_ret("m1", &finished(&l));
        let keys: Vec<&str> = ret
            .as_map()
            .unwrap()
            .iter()
            .filter_map(|(k, _)| value::str_of(k))
            .collect();
        assert_eq!(
            keys,
            [
                "success",
                "return",
                "retcode",
                "jid",
                "fun",
                "fun_args",
                "user",
                "master_id",
                "ret_config",
                "ret_kwargs",
                "id"
            ]
        );
        assert_eq!(value::get(&ret, "fun_args"), value::get(&l, "arg"));
        let failed = Finished {
            out: Some("nested".into()),
            ..finished(&l)
        };
        let ret = returner_ret("m1", &failed);
        assert_eq!(value::get_str(&ret, "out"), Some("nested"));
        let multi = Finished {
            multi: true,
            ..finished(&l)
        };
        let ret = returner_ret("m1", &multi);
        let keys: Vec<&str> = ret
            .as_map()
            .unwrap()
            .iter()
            .filter_map(|(k, _)| value::str_of(k))
            .collect();
        assert_eq!(
            keys,
            [
                "return",
                "retcode",
                "success",
                "jid",
                "fun",
                "fun_args",
                "user",
                "metadata",
                "ret_config",
                "ret_kwargs",
                "id"
            ]
        );
    }

    #[test]
    fn unknown_and_failing_returners_are_reported_and_do_not_stop_the_others() {
        let l = load("nope,master_bus,rawfile_json");
        let mut host = FakeHost::with_opts(map([(
            "rawfile_json.filename",
            s("/nonexistent-dir/x/events"),
        )]));
        host.fire_error = None;
        let got = run(&host, "m1", &finished(&l), None);
        assert_eq!(got[0], ("nope".to_owned(), Outcome::Unknown));
        assert_eq!(got[1], ("master_bus".to_owned(), Outcome::Done));
        assert_eq!(
            got[2],
            (
                "rawfile_json".to_owned(),
                Outcome::Failed(Error::Io(
                    "[Errno 2] No such file or directory: '/nonexistent-dir/x/events'".into()
                ))
            )
        );
        assert_eq!(host.fired().len(), 1);
    }

    #[test]
    fn config_option_looks_in_opts_grains_pillar_then_the_pillars_master_dict() {
        let grains = map([("a", s("grain")), ("b", s("grain"))]);
        let pillar = map([
            ("b", s("pillar")),
            ("c", s("pillar")),
            ("master", map([("d", s("master"))])),
        ]);
        let opts = |k: &str| (k == "a").then(|| s("opts"));
        assert_eq!(config_option("a", opts, &grains, &pillar), Some(s("opts")));
        assert_eq!(config_option("b", opts, &grains, &pillar), Some(s("grain")));
        assert_eq!(
            config_option("c", opts, &grains, &pillar),
            Some(s("pillar"))
        );
        assert_eq!(
            config_option("d", opts, &grains, &pillar),
            Some(s("master"))
        );
        assert_eq!(config_option("e", opts, &grains, &pillar), None);
    }
}
