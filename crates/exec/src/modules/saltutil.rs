//! `salt/modules/saltutil.py`: the job-control functions, over the minion's
//! [`crate::JobTable`].
//!
//! As in Salt, a job never sees itself: `running()` leaves out the calling job (Salt's
//! job process skips its own proc file).

use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{py_eq, py_int, py_str, text};
use crate::registry::{Export, Invocation};

pub(crate) const EXPORTS: &[Export] = &[
    ("saltutil.find_job", find_job, None),
    ("saltutil.is_running", is_running, None),
    ("saltutil.kill_all_jobs", kill_all_jobs, None),
    ("saltutil.kill_job", kill_job, None),
    ("saltutil.running", running, None),
    ("saltutil.signal_job", signal_job, None),
    ("saltutil.term_all_jobs", term_all_jobs, None),
    ("saltutil.term_job", term_job, None),
];

/// `salt_SIGKILL` on POSIX.
const SIGKILL: i64 = 9;
/// `signal.SIGTERM`.
const SIGTERM: i64 = 15;

fn field<'v>(data: &'v Value, key: &str) -> Option<&'v Value> {
    halite_proto::value::get(data, key)
}

/// The live jobs other than the caller.
fn live_jobs(inv: &Invocation<'_>) -> Vec<Value> {
    let own = inv.ctx.jid.as_deref();
    inv.ctx
        .jobs
        .running()
        .into_iter()
        .filter(|data| own.is_none() || field(data, "jid").and_then(text).as_deref() != own)
        .collect()
}

fn running(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    Ok(Value::Array(live_jobs(inv)))
}

fn find_job(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let jid = inv.arg("jid").clone();
    Ok(live_jobs(inv)
        .into_iter()
        .find(|data| field(data, "jid").is_some_and(|j| py_eq(j, &jid)))
        .unwrap_or_else(|| Value::Map(Vec::new())))
}

fn is_running(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let pattern = inv.arg("fun");
    let Some(pattern) = text(pattern).map(|p| p.into_owned()) else {
        return Err(ExecError::TypeError(format!(
            "expected str, bytes or os.PathLike object, not {}",
            crate::pyval::py_type_name(pattern)
        )));
    };
    Ok(Value::Array(
        live_jobs(inv)
            .into_iter()
            .filter(|data| {
                let fun = field(data, "fun").map(py_str).unwrap_or_default();
                halite_target::fnmatch::fnmatch(&fun, &pattern)
            })
            .collect(),
    ))
}

/// `saltutil.signal_job(jid, sig)`: the status text Salt returns. The signal is only
/// read (`int(sig)`) once the job is found, as in Salt.
fn signal(inv: &Invocation<'_>, jid: &Value, sig: &Value) -> Result<Value, ExecError> {
    let Some(data) = live_jobs(inv)
        .into_iter()
        .find(|data| field(data, "jid").is_some_and(|j| py_eq(j, jid)))
    else {
        return Ok(Value::from(""));
    };
    let sig = py_int(sig)?;
    let jid_text = py_str(jid);
    let sent = i32::try_from(sig).is_ok_and(|s| inv.ctx.jobs.signal(&jid_text, s));
    Ok(if sent {
        let pid = field(&data, "pid").map(py_str).unwrap_or_default();
        Value::from(format!("Signal {sig} sent to job {jid_text} at pid {pid}"))
    } else {
        Value::from(format!(
            "Job {jid_text} was not running and job data has been cleaned up"
        ))
    })
}

fn signal_job(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    signal(inv, inv.arg("jid"), inv.arg("sig"))
}

fn kill_job(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    signal(inv, inv.arg("jid"), &Value::from(SIGKILL))
}

fn term_job(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    signal(inv, inv.arg("jid"), &Value::from(SIGTERM))
}

fn signal_all(inv: &Invocation<'_>, sig: i64) -> Result<Value, ExecError> {
    live_jobs(inv)
        .iter()
        .filter_map(|data| field(data, "jid"))
        .map(|jid| signal(inv, jid, &Value::from(sig)))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn kill_all_jobs(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    signal_all(inv, SIGKILL)
}

fn term_all_jobs(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    signal_all(inv, SIGTERM)
}
