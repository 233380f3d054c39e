//! `salt/runners/jobs.py`: the job cache seen from the master, and the jobs minions are
//! running now.
//!
//! The cache is the host's job store, read as Salt's `local_cache` returner reads its
//! tree: `get_load` is the saved load plus `Minions` (the expected minions, sorted, when
//! there are any), `get_jid` is `{minion: {return, retcode, success, out}}` with the keys
//! each return has, `get_jids` is every job's summary (`JobSummary`), in jid order.
//!
//! The returner the functions read is the first of `ext_job_cache`, `ext_source` and
//! `master_job_cache` that is set, as in Salt; the only one Halite can read is the
//! master's own (`master_job_cache`, `local_cache` by default). Naming another fails as
//! Salt fails for a returner it cannot load (`KeyError: '<returner>.get_load'`).
//!
//! Deviations (each a case where Salt raises and the whole call fails):
//! * `list_jobs`: a multi-function job (`Function` a list) matches `search_function` when
//!   one of its functions does; a `Target` that is neither a string nor a list, and
//!   non-string targets in a list, never match; a job whose jid has no time never matches
//!   a time filter; a time filter with a time zone is compared in UTC (job times are UTC).
//! * `last_run outputter=X` wraps the last job in `{"outputter": X, "data": ...}` as its
//!   docstring says; Salt passes the outputter on to `list_jobs` and then looks up a job
//!   named `"outputter"`.
//! * `active` skips job entries without a `jid`.

use chrono::{NaiveDateTime, Utc};
use halite_jobcache::JobSummary;
use rmpv::Value;

use crate::dates;
use crate::error::RunnerError;
use crate::pyval::{
    dict_set, get, has_key, lookup, map, py_eq, py_repr, py_str, py_type_name, split_input, text,
    truthy,
};
use crate::registry::{Export, Invocation};
use crate::wait::{publish_and_gather, Timeouts};
use crate::PublishJob;

pub(crate) const EXPORTS: &[Export] = &[
    ("jobs.active", active),
    ("jobs.exit_success", exit_success),
    ("jobs.last_run", last_run),
    ("jobs.list_job", list_job),
    ("jobs.list_jobs", list_jobs),
    ("jobs.list_jobs_filter", list_jobs_filter),
    ("jobs.lookup_jid", lookup_jid),
    ("jobs.print_job", print_job),
];

type Dict = Vec<(Value, Value)>;

fn s(text: &str) -> Value {
    Value::from(text)
}

/// A job-cache failure, as the returner's exception.
fn cache_error(err: halite_jobcache::Error) -> RunnerError {
    RunnerError::exception("salt.exceptions.SaltCacheError", err.to_string())
}

/// `_get_returner`: the first of `ext_job_cache`, `ext_source` (when given) and
/// `master_job_cache` that is set.
fn returner(inv: &Invocation<'_>, ext_source: Option<&Value>) -> String {
    let opts = inv.host.opts();
    [
        opts.get("ext_job_cache"),
        ext_source,
        opts.get("master_job_cache"),
    ]
    .into_iter()
    .flatten()
    .find(|v| truthy(v))
    .map_or_else(|| "local_cache".to_owned(), py_str)
}

/// `mminion.returners["<returner>.<function>"]`: only the master's own job cache loads.
fn check_returner(inv: &Invocation<'_>, returner: &str, function: &str) -> Result<(), RunnerError> {
    let own = inv
        .host
        .opts()
        .get("master_job_cache")
        .map_or_else(|| "local_cache".to_owned(), py_str);
    if returner == own || returner == "local_cache" {
        Ok(())
    } else {
        Err(RunnerError::exception(
            "KeyError",
            halite_output::str_repr(&format!("{returner}.{function}")),
        ))
    }
}

/// `<returner>.get_load(jid)`: the saved load plus `Minions`, or `{}`.
fn get_load(inv: &Invocation<'_>, jid: &str) -> Result<Value, RunnerError> {
    let Some(job) = inv.host.jobs().get_load(jid).map_err(cache_error)? else {
        return Ok(Value::Map(Vec::new()));
    };
    let mut load = match job.load {
        Value::Map(entries) => entries,
        _ => Vec::new(),
    };
    if !job.minions.is_empty() {
        dict_set(
            &mut load,
            s("Minions"),
            Value::Array(job.minions.into_iter().map(Value::from).collect()),
        );
    }
    Ok(Value::Map(load))
}

/// `<returner>.get_jid(jid)`: `{minion: {return, retcode, success, out}}`, each with the
/// keys its return load has.
fn get_jid(inv: &Invocation<'_>, jid: &str) -> Result<Dict, RunnerError> {
    let returns = inv.host.jobs().get_returns(jid).map_err(cache_error)?;
    Ok(returns
        .into_iter()
        .map(|r| {
            let fields: Dict = ["return", "retcode", "success", "out"]
                .into_iter()
                .filter_map(|key| get(&r.load, key).map(|v| (s(key), v.clone())))
                .collect();
            (Value::from(r.minion_id), Value::Map(fields))
        })
        .collect())
}

/// `_format_jid_instance(jid, job)` of `runners/jobs.py`: Salt's job summary, plus
/// `Minions` when the job has them, or the error for a missing job; then `StartTime`.
fn format_jid_instance(jid: &str, job: &Value) -> Dict {
    let start = s(&halite_jobcache::jid_to_time(jid));
    if !truthy(job) {
        return vec![
            (
                s("Error"),
                s("Cannot contact returner or no job with this jid"),
            ),
            (s("StartTime"), start),
        ];
    }
    let mut out = match JobSummary::from_load(jid, 0, job).to_salt_value() {
        Value::Map(entries) => entries,
        _ => Vec::new(),
    };
    if let Some(minions) = get(job, "Minions") {
        let at = out.len().saturating_sub(1);
        out.insert(at, (s("Minions"), minions.clone()));
    }
    out
}

/// `{"outputter": X, "data": data}` when `outputter` is set, else `data`.
fn with_outputter(outputter: &Value, data: Value) -> Value {
    if truthy(outputter) {
        Value::Map(vec![(s("outputter"), outputter.clone()), (s("data"), data)])
    } else {
        data
    }
}

/// The body of `list_job`: `{jid, <job>, StartTime, Result}`.
fn job_listing(
    inv: &Invocation<'_>,
    jid: &Value,
    ext_source: &Value,
    display_progress: bool,
) -> Result<Dict, RunnerError> {
    let jid_text = py_str(jid);
    let returner = returner(inv, Some(ext_source));
    if display_progress {
        inv.progress(format!("Querying returner: {returner}"));
    }
    check_returner(inv, &returner, "get_load")?;
    let mut ret = vec![(s("jid"), jid.clone())];
    let job = get_load(inv, &jid_text)?;
    ret.extend(format_jid_instance(&jid_text, &job));
    ret.push((s("Result"), Value::Map(get_jid(inv, &jid_text)?)));
    Ok(ret)
}

fn list_job(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    job_listing(
        inv,
        inv.arg("jid"),
        inv.arg("ext_source"),
        truthy(inv.arg("display_progress")),
    )
    .map(Value::Map)
}

fn lookup_jid(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let data = Value::Map(job_listing(
        inv,
        inv.arg("jid"),
        inv.arg("ext_source"),
        truthy(inv.arg("display_progress")),
    )?);
    let returned = truthy(inv.arg("returned"));
    let empty = Value::Map(Vec::new());
    let returns = get(&data, "Result").unwrap_or(&empty);
    let mut ret: Dict = Vec::new();
    if let Value::Map(entries) = returns {
        for (minion, result) in entries {
            if truthy(inv.arg("display_progress")) {
                inv.progress(py_str(minion));
            }
            if returned {
                dict_set(
                    &mut ret,
                    minion.clone(),
                    get(result, "return").cloned().unwrap_or(Value::Nil),
                );
            }
        }
    }
    if truthy(inv.arg("missing")) {
        if let Some(Value::Array(targeted)) = get(&data, "Minions") {
            for minion in targeted.iter().filter(|m| !has_key(returns, m)) {
                dict_set(&mut ret, minion.clone(), s("Minion did not return"));
            }
        }
    }
    let outputter = match returns {
        Value::Map(entries) => entries
            .first()
            .and_then(|(_, first)| get(first, "out"))
            .cloned(),
        _ => None,
    };
    Ok(with_outputter(
        &outputter.unwrap_or(Value::Nil),
        Value::Map(ret),
    ))
}

fn print_job(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let jid = inv.arg("jid");
    let jid_text = py_str(jid);
    let returner = returner(inv, Some(inv.arg("ext_source")));
    check_returner(inv, &returner, "get_load")?;
    let mut job = format_jid_instance(&jid_text, &get_load(inv, &jid_text)?);
    job.push((s("Result"), Value::Map(get_jid(inv, &jid_text)?)));
    Ok(Value::Map(vec![(jid.clone(), Value::Map(job))]))
}

fn exit_success(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let data = Value::Map(job_listing(
        inv,
        inv.arg("jid"),
        inv.arg("ext_source"),
        false,
    )?);
    let empty = Value::Map(Vec::new());
    let result = get(&data, "Result").unwrap_or(&empty);
    let returned = |minion: &Value| lookup(result, minion).and_then(|r| get(r, "return"));
    let mut ret: Dict = Vec::new();
    if let Some(Value::Array(minions)) = get(&data, "Minions") {
        for minion in minions {
            let ok = returned(minion).is_some_and(truthy);
            dict_set(&mut ret, minion.clone(), Value::Boolean(ok));
        }
    }
    if let Value::Map(entries) = result {
        for (minion, _) in entries {
            if returned(minion).is_some_and(truthy) {
                dict_set(&mut ret, minion.clone(), Value::Boolean(true));
            }
        }
    }
    Ok(Value::Map(ret))
}

/// The filters of `list_jobs`.
struct Filters<'a> {
    metadata: &'a Value,
    function: &'a Value,
    target: &'a Value,
    start_time: &'a Value,
    end_time: &'a Value,
}

/// `dateutil.parser.parse(value)` for a time filter.
fn filter_time(value: &Value) -> Result<NaiveDateTime, RunnerError> {
    match text(value) {
        Some(t) if matches!(value, Value::String(_)) => dates::parse(&t, Utc::now().date_naive()),
        _ => Err(RunnerError::TypeError(format!(
            "Parser must be a string or character stream, not {}",
            py_type_name(value)
        ))),
    }
}

impl Filters<'_> {
    /// Whether `job` passes every filter that is set. A time filter is parsed (and its
    /// error raised) only once a job reaches it, as in Salt.
    fn pass(&self, job: &JobSummary) -> Result<bool, RunnerError> {
        if truthy(self.metadata) {
            let Value::Map(wanted) = self.metadata else {
                tracing::info!(
                    "The search_metadata parameter must be specified as a dictionary.  Ignoring."
                );
                return Ok(false);
            };
            let Some(metadata @ Value::Map(_)) = &job.metadata else {
                return Ok(false);
            };
            if !wanted
                .iter()
                .any(|(k, v)| lookup(metadata, k).is_some_and(|have| py_eq(have, v)))
            {
                return Ok(false);
            }
        }
        if truthy(self.target) {
            let patterns = split_input(self.target);
            let targets: Vec<&Value> = match &job.target {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            let hit = targets.iter().filter_map(|t| text(t)).any(|t| {
                patterns
                    .iter()
                    .any(|p| halite_target::fnmatch::fnmatch(&t, p))
            });
            if !hit {
                return Ok(false);
            }
        }
        if truthy(self.function) {
            let patterns = split_input(self.function);
            let funs: Vec<&Value> = match &job.function {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            let hit = funs.iter().filter_map(|f| text(f)).any(|f| {
                patterns
                    .iter()
                    .any(|p| halite_target::fnmatch::fnmatch(&f, p))
            });
            if !hit {
                return Ok(false);
            }
        }
        if truthy(self.start_time) {
            let since = filter_time(self.start_time)?;
            if dates::jid_time(&job.jid).is_none_or(|t| t < since) {
                return Ok(false);
            }
        }
        if truthy(self.end_time) {
            let until = filter_time(self.end_time)?;
            if dates::jid_time(&job.jid).is_none_or(|t| t > until) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// `list_jobs` without the outputter: `{jid: summary}` of the jobs passing `filters`.
fn matching_jobs(
    inv: &Invocation<'_>,
    ext_source: &Value,
    filters: &Filters<'_>,
    display_progress: bool,
) -> Result<Dict, RunnerError> {
    let returner = returner(inv, Some(ext_source));
    if display_progress {
        inv.progress(format!("Querying returner {returner} for jobs."));
    }
    check_returner(inv, &returner, "get_jids")?;
    let mut out = Vec::new();
    for job in inv.host.jobs().list_jobs().map_err(cache_error)? {
        if filters.pass(&job)? {
            out.push((Value::from(job.jid.as_str()), job.to_salt_value()));
        }
    }
    Ok(out)
}

fn list_jobs(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let filters = Filters {
        metadata: inv.arg("search_metadata"),
        function: inv.arg("search_function"),
        target: inv.arg("search_target"),
        start_time: inv.arg("start_time"),
        end_time: inv.arg("end_time"),
    };
    let jobs = matching_jobs(
        inv,
        inv.arg("ext_source"),
        &filters,
        truthy(inv.arg("display_progress")),
    )?;
    Ok(with_outputter(inv.arg("outputter"), Value::Map(jobs)))
}

fn last_run(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let metadata = inv.arg("metadata");
    if truthy(metadata) && !matches!(metadata, Value::Map(_)) {
        tracing::info!("The metadata parameter must be specified as a dictionary");
        return Ok(Value::Boolean(false));
    }
    let nil = Value::Nil;
    let filters = Filters {
        metadata,
        function: inv.arg("function"),
        target: inv.arg("target"),
        start_time: &nil,
        end_time: &nil,
    };
    let ext_source = inv.arg("ext_source");
    let jobs = matching_jobs(
        inv,
        ext_source,
        &filters,
        truthy(inv.arg("display_progress")),
    )?;
    let Some(last) = jobs.iter().filter_map(|(jid, _)| text(jid)).max() else {
        return Ok(Value::Boolean(false));
    };
    let last = last.into_owned();
    let returner = returner(inv, Some(ext_source));
    check_returner(inv, &returner, "get_load")?;
    let mut job = format_jid_instance(&last, &get_load(inv, &last)?);
    job.push((s("Result"), Value::Map(get_jid(inv, &last)?)));
    Ok(with_outputter(
        inv.arg("outputter"),
        Value::Map(vec![(Value::from(last), Value::Map(job))]),
    ))
}

/// How many of the newest jobs `get_jids_filter(count)` keeps: Python compares `count`
/// with list lengths, so a float keeps its floor, NaN and infinity keep everything, and
/// anything else is a `TypeError` (raised once a job is considered).
fn keep_count(count: &Value) -> Result<Option<usize>, RunnerError> {
    let as_float = match count {
        Value::Integer(i) => i.as_f64(),
        Value::Boolean(b) => Some(f64::from(u8::from(*b))),
        Value::F32(f) => Some(f64::from(*f)),
        Value::F64(f) => Some(*f),
        _ => None,
    };
    match as_float {
        Some(c) if c.is_nan() || c == f64::INFINITY => Ok(None),
        Some(c) if c <= 0.0 => Ok(Some(0)),
        // Saturating: a count past usize keeps everything anyway.
        Some(c) => Ok(Some(c.floor() as usize)),
        None => Err(RunnerError::TypeError(format!(
            "'>' not supported between instances of 'int' and '{}'",
            py_type_name(count)
        ))),
    }
}

fn list_jobs_filter(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let returner = returner(inv, Some(inv.arg("ext_source")));
    if truthy(inv.arg("display_progress")) {
        inv.progress(format!("Querying returner {returner} for jobs."));
    }
    let fun = format!("{returner}.get_jids_filter");
    if check_returner(inv, &returner, "get_jids_filter").is_err() {
        return Err(RunnerError::exception(
            "NotImplementedError",
            format!("'{fun}' returner function not implemented yet."),
        ));
    }
    let skip_find_job = truthy(inv.arg("filter_find_job"));
    let jobs: Vec<JobSummary> = inv
        .host
        .jobs()
        .list_jobs()
        .map_err(cache_error)?
        .into_iter()
        .filter(|job| !(skip_find_job && py_eq(&job.function, &Value::from("saltutil.find_job"))))
        .collect();
    let keep = if jobs.is_empty() {
        Some(0)
    } else {
        keep_count(inv.arg("count"))?
    };
    let first = keep.map_or(0, |k| jobs.len().saturating_sub(k));
    let listed = jobs
        .iter()
        .skip(first)
        .map(|job| {
            let mut entry = match job.to_salt_value() {
                Value::Map(entries) => entries,
                _ => Vec::new(),
            };
            let at = entry.len().saturating_sub(1);
            entry.insert(at, (s("JID"), Value::from(job.jid.as_str())));
            Value::Map(entry)
        })
        .collect();
    Ok(with_outputter(inv.arg("outputter"), Value::Array(listed)))
}

fn active(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let opts = inv.host.opts();
    let timeouts = Timeouts {
        timeout: opts.timeout,
        gather_job_timeout: opts.gather_job_timeout,
    };
    let job = PublishJob {
        tgt: s("*"),
        tgt_type: "glob".to_owned(),
        fun: "saltutil.running".to_owned(),
        arg: Vec::new(),
        timeout: Some(timeouts.timeout),
    };
    let gathered = match publish_and_gather(inv.host, &job, timeouts) {
        Ok(gathered) => gathered,
        Err(err) => {
            tracing::warn!("{}", err);
            return Ok(Value::Map(Vec::new()));
        }
    };
    // `cmd` answers every expected minion: the returns, then the silent ones.
    let mut replies: Vec<(String, Option<Value>)> = Vec::new();
    if let Some(gathered) = &gathered {
        for (id, load) in &gathered.returns {
            replies.push((
                id.clone(),
                Some(get(load, "return").cloned().unwrap_or(Value::Nil)),
            ));
        }
        for id in gathered.expected.iter().filter(|id| !gathered.returned(id)) {
            replies.push((id.clone(), None));
        }
    }
    let display_progress = truthy(inv.arg("display_progress"));
    if display_progress {
        let names: Vec<Value> = replies
            .iter()
            .map(|(id, _)| Value::from(id.as_str()))
            .collect();
        inv.progress(format!(
            "Attempting to contact minions: {}",
            py_repr(&Value::Array(names))
        ));
    }
    let mut ret: Dict = Vec::new();
    for (minion, data) in &replies {
        if display_progress {
            inv.progress(format!("Received reply from minion {minion}"));
        }
        let Some(Value::Array(jobs)) = data else {
            continue;
        };
        for job in jobs {
            let Some(jid) = get(job, "jid") else {
                continue;
            };
            let running = map([(
                minion.as_str(),
                get(job, "pid").cloned().unwrap_or(Value::Nil),
            )]);
            match ret.iter_mut().find(|(k, _)| py_eq(k, jid)) {
                Some((_, Value::Map(entry))) => {
                    if let Some((_, Value::Array(list))) = entry
                        .iter_mut()
                        .find(|(k, _)| text(k).as_deref() == Some("Running"))
                    {
                        list.push(running);
                    }
                }
                _ => {
                    let mut entry = format_jid_instance(&py_str(jid), job);
                    entry.push((s("Running"), Value::Array(vec![running])));
                    entry.push((s("Returned"), Value::Array(Vec::new())));
                    ret.push((jid.clone(), Value::Map(entry)));
                }
            }
        }
    }
    if !ret.is_empty() {
        let returner = returner(inv, None);
        check_returner(inv, &returner, "get_jid")?;
    }
    for (jid, entry) in &mut ret {
        let returned: Vec<Value> = get_jid(inv, &py_str(jid))?
            .into_iter()
            .map(|(minion, _)| minion)
            .collect();
        if let Value::Map(fields) = entry {
            if let Some((_, Value::Array(list))) = fields
                .iter_mut()
                .find(|(k, _)| text(k).as_deref() == Some("Returned"))
            {
                for minion in returned {
                    if !list.iter().any(|m| py_eq(m, &minion)) {
                        list.push(minion);
                    }
                }
            }
        }
    }
    Ok(Value::Map(ret))
}
