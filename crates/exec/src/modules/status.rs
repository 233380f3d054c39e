//! `salt/modules/status.py`: system status, Linux only (other kernels get Salt's
//! "unsupported" text or error).

use std::time::{SystemTime, UNIX_EPOCH};

use rmpv::Value;

use crate::error::ExecError;
use crate::pyval::{py_type_name, text};
use crate::registry::{Export, Invocation};

pub(crate) const EXPORTS: &[Export] = &[
    ("status.cpuinfo", cpuinfo, None),
    ("status.diskusage", diskusage, None),
    ("status.loadavg", loadavg, None),
    ("status.meminfo", meminfo, None),
    ("status.nproc", nproc, None),
    ("status.uptime", uptime, None),
    ("status.version", version, None),
];

const UNSUPPORTED: &str = "This method is unsupported on the current operating system!";

fn is_linux(inv: &Invocation<'_>) -> bool {
    halite_proto::value::get_str(&inv.ctx.grains, "kernel") == Some("Linux")
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

/// `datetime.utcfromtimestamp(ts).isoformat()`.
fn utc_isoformat(ts: f64) -> String {
    let micros = (ts * 1e6).round() as i64;
    let Some(dt) = chrono::DateTime::from_timestamp_micros(micros) else {
        return String::new();
    };
    let base = dt.format("%Y-%m-%dT%H:%M:%S").to_string();
    match micros.rem_euclid(1_000_000) {
        0 => base,
        frac => format!("{base}.{frac:06}"),
    }
}

fn uptime(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    if !is_linux(inv) {
        return Err(ExecError::CommandExecution(UNSUPPORTED.to_owned()));
    }
    let raw = std::fs::read_to_string("/proc/uptime")
        .map_err(|_| ExecError::CommandExecution("File /proc/uptime was not found.".to_owned()))?;
    let seconds = raw
        .split_whitespace()
        .next()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| {
            ExecError::exception(
                "ValueError",
                format!("could not convert string to float: {raw:?}"),
            )
        })?
        .trunc() as i64;
    let boot = now - seconds as f64;
    let day_secs = seconds.rem_euclid(86_400);
    let mut ret = vec![
        ("seconds", Value::from(seconds)),
        ("since_iso", Value::from(utc_isoformat(boot))),
        ("since_t", Value::from(boot.trunc() as i64)),
        ("days", Value::from(seconds.div_euclid(86_400))),
        (
            "time",
            Value::from(format!("{}:{}", day_secs / 3600, day_secs % 3600 / 60)),
        ),
    ];
    if super::which("who").is_some() {
        let out = std::process::Command::new("who")
            .arg("-s")
            .stdin(std::process::Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_owned())
            .unwrap_or_default();
        ret.push(("users", Value::from(out.split('\n').count())));
    }
    Ok(map(ret))
}

fn loadavg(_: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let avg = crate::os::loadavg().ok_or_else(|| {
        ExecError::CommandExecution("status.loadavag is not available on your platform".to_owned())
    })?;
    Ok(map(vec![
        ("1-min", Value::F64(avg[0])),
        ("5-min", Value::F64(avg[1])),
        ("15-min", Value::F64(avg[2])),
    ]))
}

fn index_error() -> ExecError {
    ExecError::exception("IndexError", "list index out of range")
}

fn cpuinfo(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    if !is_linux(inv) {
        return Ok(Value::from(UNSUPPORTED));
    }
    let Ok(stats) = std::fs::read("/proc/cpuinfo") else {
        return Ok(Value::Map(Vec::new()));
    };
    let mut ret: Vec<(Value, Value)> = Vec::new();
    for line in String::from_utf8_lossy(&stats).lines() {
        if line.is_empty() {
            continue;
        }
        let comps: Vec<&str> = line.split(':').collect();
        let key = comps[0].trim();
        let val = comps.get(1).ok_or_else(index_error)?;
        let value = if key == "flags" {
            Value::Array(val.split_whitespace().map(Value::from).collect())
        } else {
            Value::from(val.trim())
        };
        crate::args::dict_set(&mut ret, Value::from(key), value);
    }
    Ok(Value::Map(ret))
}

fn meminfo(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    if !is_linux(inv) {
        return Ok(Value::from(UNSUPPORTED));
    }
    let Ok(stats) = std::fs::read("/proc/meminfo") else {
        return Ok(Value::Map(Vec::new()));
    };
    let mut ret: Vec<(Value, Value)> = Vec::new();
    for line in String::from_utf8_lossy(&stats).lines() {
        if line.is_empty() {
            continue;
        }
        let comps: Vec<&str> = line.split_whitespace().collect();
        let key = comps.first().ok_or_else(index_error)?.replace(':', "");
        let mut entry = vec![(
            Value::from("value"),
            Value::from(*comps.get(1).ok_or_else(index_error)?),
        )];
        if let Some(unit) = comps.get(2) {
            entry.push((Value::from("unit"), Value::from(*unit)));
        }
        crate::args::dict_set(&mut ret, Value::from(key), Value::Map(entry));
    }
    Ok(Value::Map(ret))
}

fn diskusage(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    let mut selected: Vec<String> = Vec::new();
    let mut fstypes: Vec<String> = Vec::new();
    if inv.call.varargs.is_empty() {
        fstypes.push("*".to_owned());
    }
    for arg in &inv.call.varargs {
        let Some(arg) = text(arg) else {
            return Err(ExecError::exception(
                "AttributeError",
                format!(
                    "'{}' object has no attribute 'startswith'",
                    py_type_name(arg)
                ),
            ));
        };
        if arg.starts_with('/') {
            selected.push(arg.into_owned());
        } else {
            fstypes.push(arg.into_owned());
        }
    }
    if !fstypes.is_empty() {
        if !is_linux(inv) {
            return Err(ExecError::CommandExecution(
                "status.diskusage not yet supported on this platform".to_owned(),
            ));
        }
        let Ok(mounts) = std::fs::read("/proc/mounts") else {
            return Ok(Value::Map(Vec::new()));
        };
        for line in String::from_utf8_lossy(&mounts).lines() {
            let comps: Vec<&str> = line.split_whitespace().collect();
            if let [_, mntpt, fstype, ..] = comps.as_slice() {
                if fstypes
                    .iter()
                    .any(|p| halite_target::fnmatch::fnmatch(fstype, p))
                {
                    selected.push((*mntpt).to_owned());
                }
            }
        }
    }
    selected.sort();
    selected.dedup();
    let mut ret = Vec::new();
    for path in selected {
        if !std::path::Path::new(&path).exists() {
            continue;
        }
        let usage = match crate::os::statvfs(&path) {
            Ok((bsize, bavail, blocks)) => map(vec![
                ("available", Value::from(bavail.saturating_mul(bsize))),
                ("total", Value::from(blocks.saturating_mul(bsize))),
            ]),
            Err(err) => {
                tracing::warn!("Cannot get stats from '{}': {}", path, err);
                map(vec![("available", Value::Nil), ("total", Value::Nil)])
            }
        };
        ret.push((Value::from(path), usage));
    }
    Ok(Value::Map(ret))
}

/// `status._number`: an int for digits, else a float, else the text.
fn number(text: &str) -> Value {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        if let Ok(n) = text.parse::<u64>() {
            return Value::from(n);
        }
    }
    match text.trim().parse::<f64>() {
        Ok(f) => Value::F64(f),
        Err(_) => Value::from(text),
    }
}

fn nproc(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    if !is_linux(inv) {
        return Ok(Value::from(UNSUPPORTED));
    }
    let out = std::process::Command::new("nproc")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            ExecError::CommandExecution(format!("Unable to run command 'nproc', reason: {e}"))
        })?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(number(text.trim()))
}

fn version(inv: &mut Invocation<'_>) -> Result<Value, ExecError> {
    if !is_linux(inv) {
        return Ok(Value::from(UNSUPPORTED));
    }
    Ok(match std::fs::read("/proc/version") {
        Ok(raw) => Value::from(String::from_utf8_lossy(&raw).trim()),
        Err(_) => Value::Map(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pyval::py_str;

    #[test]
    fn isoformat_shows_microseconds_only_when_present() {
        assert_eq!(utc_isoformat(0.0), "1970-01-01T00:00:00");
        assert_eq!(utc_isoformat(1.5), "1970-01-01T00:00:01.500000");
    }

    #[test]
    fn numbers_parse_like_status_number() {
        assert_eq!(number("4"), Value::from(4u64));
        assert_eq!(number("1.5"), Value::F64(1.5));
        assert_eq!(number("n/a"), Value::from("n/a"));
        assert_eq!(py_str(&number("")), "");
    }
}
