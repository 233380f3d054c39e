//! `salt/runners/manage.py`: which minions are up, down, connected.
//!
//! `up`, `down` and `status` ping the target with `test.ping` and the CLI's wait (see the
//! `wait` module): up are the minions that returned, down the expected minions that did
//! not (both sorted); nothing matched means both empty. The presence lists send nothing:
//! they read the host's connected minions and accepted keys.
//!
//! Deviations: `down removekeys=True` deletes exactly each down minion's key (Salt's
//! `key.delete match=<id>` reads the id as a glob); a string `subset` is a
//! comma-separated list of ids (Salt iterates over its characters).

use std::collections::BTreeSet;

use rmpv::Value;

use crate::error::RunnerError;
use crate::pyval::{map, py_int, py_str, text, truthy};
use crate::registry::{Export, Invocation};
use crate::wait::{publish_and_gather, Timeouts};
use crate::PublishJob;

pub(crate) const EXPORTS: &[Export] = &[
    ("manage.alived", list_state),
    ("manage.allowed", list_state),
    ("manage.down", down),
    ("manage.joined", list_state),
    ("manage.list_not_state", list_not_state),
    ("manage.list_state", list_state),
    ("manage.not_alived", list_not_state),
    ("manage.not_allowed", list_not_state),
    ("manage.not_joined", list_not_state),
    ("manage.not_present", list_not_state),
    ("manage.not_reaped", list_not_state),
    ("manage.present", list_state),
    ("manage.reaped", list_state),
    ("manage.status", status),
    ("manage.up", up),
];

/// `LocalClient._get_timeout`: an int (negative ones wait not at all), a string holding
/// one, else the master's `timeout`.
fn client_timeout(v: &Value, default: u64) -> u64 {
    let int = match v {
        Value::Integer(_) | Value::Boolean(_) | Value::String(_) => py_int(v).ok(),
        _ => None,
    };
    match int {
        Some(n) => u64::try_from(n).unwrap_or(0),
        None => default,
    }
}

/// `status`'s defaults (`timeout` / `gather_job_timeout` from the master when falsy),
/// then the client's conversions (`_get_timeout`, `int(gather_job_timeout)`).
fn timeouts(inv: &Invocation<'_>) -> Result<Timeouts, RunnerError> {
    let opts = inv.host.opts();
    let timeout = match inv.arg("timeout") {
        v if truthy(v) => client_timeout(v, opts.timeout),
        _ => opts.timeout,
    };
    let gather_job_timeout = match inv.arg("gather_job_timeout") {
        v if truthy(v) => u64::try_from(py_int(v)?).unwrap_or(0),
        _ => opts.gather_job_timeout,
    };
    Ok(Timeouts {
        timeout,
        gather_job_timeout,
    })
}

/// `_ping`: (up, down), both sorted.
fn ping(inv: &Invocation<'_>) -> Result<(Vec<String>, Vec<String>), RunnerError> {
    let timeouts = timeouts(inv)?;
    let job = PublishJob {
        tgt: inv.arg("tgt").clone(),
        tgt_type: py_str(inv.arg("tgt_type")),
        fun: "test.ping".to_owned(),
        arg: Vec::new(),
        timeout: Some(timeouts.timeout),
    };
    let Some(gathered) = publish_and_gather(inv.host, &job, timeouts)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let up: BTreeSet<String> = gathered.returns.iter().map(|(id, _)| id.clone()).collect();
    let down = gathered
        .expected
        .iter()
        .filter(|id| !up.contains(*id))
        .cloned()
        .collect();
    Ok((up.into_iter().collect(), down))
}

fn ids(list: Vec<String>) -> Value {
    Value::Array(list.into_iter().map(Value::from).collect())
}

fn status(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let (up, down) = ping(inv)?;
    Ok(map([("up", ids(up)), ("down", ids(down))]))
}

fn up(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    Ok(ids(ping(inv)?.0))
}

fn down(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let (_, down) = ping(inv)?;
    if truthy(inv.arg("removekeys")) {
        for id in &down {
            if let Err(err) = inv.host.delete_key(id) {
                tracing::warn!("Could not delete the key of down minion {}: {}", id, err);
            }
        }
    }
    Ok(ids(down))
}

/// The ids a `subset` names: a list's items, a dict's keys, a string's comma-separated
/// parts, or the value itself.
fn subset_ids(subset: &Value) -> BTreeSet<String> {
    match subset {
        Value::Array(items) => items.iter().map(py_str).collect(),
        Value::Map(entries) => entries.iter().map(|(k, _)| py_str(k)).collect(),
        Value::String(_) => text(subset)
            .unwrap_or_default()
            .split(',')
            .map(|part| part.trim().to_owned())
            .collect(),
        other => BTreeSet::from([py_str(other)]),
    }
}

/// The connected minions (within a non-empty `subset`), first IP per id, sorted by id.
fn connected(inv: &Invocation<'_>, subset: &Value) -> Vec<(String, Option<String>)> {
    let wanted = truthy(subset).then(|| subset_ids(subset));
    let mut seen = BTreeSet::new();
    let mut minions: Vec<(String, Option<String>)> = inv
        .host
        .connected()
        .into_iter()
        .filter(|(id, _)| wanted.as_ref().is_none_or(|w| w.contains(id)))
        .filter(|(id, _)| seen.insert(id.clone()))
        .collect();
    minions.sort();
    minions
}

fn list_state(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let minions = connected(inv, inv.arg("subset"));
    Ok(if truthy(inv.arg("show_ip")) {
        Value::Map(
            minions
                .into_iter()
                .map(|(id, ip)| (Value::from(id), ip.map_or(Value::Nil, Value::from)))
                .collect(),
        )
    } else {
        ids(minions.into_iter().map(|(id, _)| id).collect())
    })
}

fn list_not_state(inv: &Invocation<'_>) -> Result<Value, RunnerError> {
    let connected: BTreeSet<String> = connected(inv, &Value::Nil)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let subset = inv.arg("subset");
    let wanted = (!subset.is_nil()).then(|| subset_ids(subset));
    Ok(ids(inv
        .host
        .accepted_ids()
        .into_iter()
        .filter(|id| !connected.contains(id))
        .filter(|id| wanted.as_ref().is_none_or(|w| w.contains(id)))
        .collect()))
}
