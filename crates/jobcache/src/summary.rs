//! Job summaries as Salt's `jobs.list_jobs` shows them (`salt/utils/jid.py`).

use crate::value::{get, text};
use rmpv::Value;

/// A job's summary, the fields of Salt's `format_jid_instance`.
///
/// Fields keep whatever msgpack type the load had (`fun` is a list for compound jobs,
/// `tgt` a list for list targets); absent fields get Salt's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSummary {
    /// The job id.
    pub jid: String,
    /// When the job was first written (caller's clock, Unix seconds).
    pub created: u64,
    /// `fun`, default `"unknown-function"`.
    pub function: Value,
    /// `arg`, default empty. Salt calls `list()` on it; a non-list `arg` (which Salt never
    /// publishes) becomes a one-element list here rather than Python's per-item split.
    pub arguments: Vec<Value>,
    /// `tgt`, default `"unknown-target"`.
    pub target: Value,
    /// `tgt_type`, default `"list"`.
    pub target_type: Value,
    /// `user`, default `"root"`.
    pub user: Value,
    /// `metadata`, else `kwargs.metadata`, else the `metadata` of a `__kwarg__` dict in
    /// `arg`.
    pub metadata: Option<Value>,
}

impl JobSummary {
    /// Summarises a publish load as Salt's `format_job_instance` does.
    pub fn from_load(jid: &str, created: u64, load: &Value) -> Self {
        let or = |key: &str, default: &str| get(load, key).cloned().unwrap_or(text(default));
        let arguments = match get(load, "arg") {
            None | Some(Value::Nil) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(other) => vec![other.clone()],
        };
        JobSummary {
            jid: jid.to_string(),
            created,
            function: or("fun", "unknown-function"),
            arguments,
            target: or("tgt", "unknown-target"),
            target_type: or("tgt_type", "list"),
            user: or("user", "root"),
            metadata: metadata_of(load),
        }
    }

    /// Salt's `StartTime` for this job ([`jid_to_time`]).
    pub fn start_time(&self) -> String {
        jid_to_time(&self.jid)
    }

    /// The summary as the map `local_cache.get_jids` gives per jid: `Function`, `Arguments`,
    /// `Target`, `Target-type`, `User`, `Metadata` (when known), `StartTime`.
    pub fn to_salt_value(&self) -> Value {
        let mut entries = vec![
            (text("Function"), self.function.clone()),
            (text("Arguments"), Value::Array(self.arguments.clone())),
            (text("Target"), self.target.clone()),
            (text("Target-type"), self.target_type.clone()),
            (text("User"), self.user.clone()),
        ];
        if let Some(metadata) = &self.metadata {
            entries.push((text("Metadata"), metadata.clone()));
        }
        entries.push((text("StartTime"), text(&self.start_time())));
        Value::Map(entries)
    }
}

fn metadata_of(load: &Value) -> Option<Value> {
    if let Some(m) = get(load, "metadata") {
        return Some(m.clone());
    }
    if let Some(kwargs) = get(load, "kwargs") {
        if let Some(m) = get(kwargs, "metadata") {
            return Some(m.clone());
        }
    }
    let Some(Value::Array(args)) = get(load, "arg") else {
        return None;
    };
    args.iter()
        .find(|arg| get(arg, "__kwarg__") == Some(&Value::Boolean(true)))
        .and_then(|arg| get(arg, "metadata"))
        .cloned()
}

/// Salt's `jid_to_time`: `"2024, Jan 01 12:00:00.123456"` for a jid
/// `20240101120000123456[_pid]`, `""` when the jid does not have that shape.
///
/// Salt raises on a non-numeric or out-of-range month; this answers `""` instead.
pub fn jid_to_time(jid: &str) -> String {
    const MONTHS: [&str; 13] = [
        "", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let chars: Vec<char> = jid.chars().collect();
    if chars.len() != 20 && (chars.len() <= 21 || chars[20] != '_') {
        return String::new();
    }
    let part = |from: usize, to: usize| chars[from..to].iter().collect::<String>();
    let month = part(4, 6);
    let Some(abbr) = month
        .parse::<usize>()
        .ok()
        .filter(|_| month.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|m| MONTHS.get(m))
    else {
        return String::new();
    };
    format!(
        "{}, {} {} {}:{}:{}.{}",
        part(0, 4),
        abbr,
        part(6, 8),
        part(8, 10),
        part(10, 12),
        part(12, 14),
        part(14, 20)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jid_to_time_matches_salt() {
        let cases = [
            ("20240101120000123456", "2024, Jan 01 12:00:00.123456"),
            ("20241231235959000001_4242", "2024, Dec 31 23:59:59.000001"),
            ("20240001120000123456", "2024,  01 12:00:00.123456"),
            ("2024010112000012345", ""),
            ("20240101120000123456_", ""),
            ("20240101120000123456x1", ""),
            ("20241301120000123456", ""),
            ("2024ab01120000123456", ""),
            ("req", ""),
        ];
        for (jid, want) in cases {
            assert_eq!(jid_to_time(jid), want, "jid {jid}");
        }
    }

    #[test]
    fn summary_uses_salt_defaults_for_missing_fields() {
        let s = JobSummary::from_load("20240101120000123456", 5, &Value::Map(vec![]));
        assert_eq!(s.function, text("unknown-function"));
        assert!(s.arguments.is_empty());
        assert_eq!(s.target, text("unknown-target"));
        assert_eq!(s.target_type, text("list"));
        assert_eq!(s.user, text("root"));
        assert_eq!(s.metadata, None);
        assert_eq!(s.created, 5);
    }

    #[test]
    fn summary_finds_metadata_in_load_kwargs_or_kwarg_dict() {
        let md = Value::Map(vec![(text("k"), text("v"))]);
        let top = Value::Map(vec![(text("metadata"), md.clone())]);
        let kwargs = Value::Map(vec![(
            text("kwargs"),
            Value::Map(vec![(text("metadata"), md.clone())]),
        )]);
        let in_arg = Value::Map(vec![(
            text("arg"),
            Value::Array(vec![
                text("x"),
                Value::Map(vec![
                    (text("__kwarg__"), Value::Boolean(true)),
                    (text("metadata"), md.clone()),
                ]),
            ]),
        )]);
        for load in [top, kwargs, in_arg] {
            assert_eq!(
                JobSummary::from_load("j", 0, &load).metadata,
                Some(md.clone())
            );
        }
    }

    #[test]
    fn salt_value_has_salt_keys_in_order() {
        let load = Value::Map(vec![
            (text("fun"), text("test.ping")),
            (text("arg"), Value::Array(vec![text("a")])),
            (text("tgt"), text("*")),
            (text("tgt_type"), text("glob")),
            (text("user"), text("sudo_bob")),
        ]);
        let v = JobSummary::from_load("20240101120000123456", 0, &load).to_salt_value();
        let Value::Map(entries) = v else {
            panic!("not a map")
        };
        let keys: Vec<_> = entries.iter().map(|(k, _)| k.as_str().unwrap()).collect();
        assert_eq!(
            keys,
            [
                "Function",
                "Arguments",
                "Target",
                "Target-type",
                "User",
                "StartTime"
            ]
        );
        assert_eq!(entries[4].1, text("sudo_bob"));
        assert_eq!(entries[5].1, text("2024, Jan 01 12:00:00.123456"));
    }
}
