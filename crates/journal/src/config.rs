//! The journal's options: Halite extensions read from the master config's raw map.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `event_journal` | `True` | keep the journal and serve replay |
//! | `event_journal_max_bytes` | `268435456` (256 MiB) | accounted size kept (event bodies plus 16 bytes each) |
//! | `event_journal_max_age` | `86400` (s) | events older than this are removed; `0` keeps them whatever their age |
//!
//! The journal file is `cachedir/events.redb`, the replay socket `sock_dir/halite_journal.ipc`.
//! Stock Salt ignores these options (it logs nothing for unknown keys), so a config using them
//! still works with a stock master.

use crate::store::Retention;
use crate::{Error, Result};
use halite_config::MasterConfig;
use halite_proto::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Journal file name in `cachedir`.
pub const JOURNAL_FILE: &str = "events.redb";
/// Replay socket name in `sock_dir`.
pub const JOURNAL_SOCKET: &str = "halite_journal.ipc";
/// Default `event_journal_max_bytes`: 256 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Default `event_journal_max_age`: one day.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(86_400);
/// The smallest `event_journal_max_bytes` accepted: room for at least one event of Salt's
/// default `max_event_size`.
pub const MIN_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// Where the journal lives and what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// `event_journal`: whether the master keeps a journal at all.
    pub enabled: bool,
    /// The journal file.
    pub path: PathBuf,
    /// The replay socket.
    pub socket: PathBuf,
    /// Size and age limits.
    pub retention: Retention,
}

impl JournalConfig {
    /// The journal of a master with this configuration.
    ///
    /// Errors: [`Error::Config`] naming the option when a value has the wrong type or is
    /// out of range.
    pub fn from_master(cfg: &MasterConfig) -> Result<JournalConfig> {
        let bad = |option: &'static str, expected: &'static str, got: &Value| Error::Config {
            option,
            file: cfg.conf_file.clone(),
            expected,
            got: got.to_string(),
        };
        let enabled = match cfg.get("event_journal") {
            None => true,
            Some(Value::Boolean(b)) => *b,
            Some(v) => return Err(bad("event_journal", "a boolean", v)),
        };
        let int = |option: &'static str, expected: &'static str| -> Result<Option<u64>> {
            match cfg.get(option) {
                None => Ok(None),
                Some(v @ Value::Integer(i)) => {
                    i.as_u64().map(Some).ok_or_else(|| bad(option, expected, v))
                }
                Some(v) => Err(bad(option, expected, v)),
            }
        };
        const BYTES: &str = "an integer number of bytes of at least 2097152";
        let max_bytes = int("event_journal_max_bytes", BYTES)?.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes < MIN_MAX_BYTES {
            return Err(bad(
                "event_journal_max_bytes",
                BYTES,
                &Value::from(max_bytes),
            ));
        }
        let max_age = match int(
            "event_journal_max_age",
            "a non-negative integer number of seconds",
        )? {
            None => Some(DEFAULT_MAX_AGE),
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
        };
        Ok(JournalConfig {
            enabled,
            path: cfg.cachedir.join(JOURNAL_FILE),
            socket: socket_path(&cfg.sock_dir),
            retention: Retention { max_bytes, max_age },
        })
    }
}

/// The replay socket of a master whose `sock_dir` is this.
pub fn socket_path(sock_dir: &Path) -> PathBuf {
    sock_dir.join(JOURNAL_SOCKET)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<JournalConfig> {
        let cfg = MasterConfig::from_yaml_str(
            &format!("cachedir: /c\nsock_dir: /s\n{yaml}"),
            Path::new("/etc/salt/master"),
        )
        .unwrap();
        JournalConfig::from_master(&cfg)
    }

    #[test]
    fn defaults_keep_a_day_and_256_mib() {
        let c = load("").unwrap();
        assert!(c.enabled);
        assert_eq!(c.path, Path::new("/c/events.redb"));
        assert_eq!(c.socket, Path::new("/s/halite_journal.ipc"));
        assert_eq!(
            c.retention,
            Retention {
                max_bytes: 256 * 1024 * 1024,
                max_age: Some(Duration::from_secs(86_400)),
            }
        );
    }

    #[test]
    fn options_are_read_and_zero_age_means_no_age_limit() {
        let c =
            load("event_journal: no\nevent_journal_max_bytes: 4194304\nevent_journal_max_age: 0\n")
                .unwrap();
        assert!(!c.enabled);
        assert_eq!(
            c.retention,
            Retention {
                max_bytes: 4_194_304,
                max_age: None,
            }
        );
    }

    #[test]
    fn bad_values_name_the_option() {
        let cases = [
            ("event_journal: maybe\n", "event_journal"),
            ("event_journal_max_bytes: 1MiB\n", "event_journal_max_bytes"),
            ("event_journal_max_bytes: 1000\n", "event_journal_max_bytes"),
            ("event_journal_max_bytes: -5\n", "event_journal_max_bytes"),
            ("event_journal_max_age: 1.5\n", "event_journal_max_age"),
            ("event_journal_max_age: -1\n", "event_journal_max_age"),
        ];
        for (yaml, option) in cases {
            let err = load(yaml).unwrap_err();
            assert!(
                matches!(&err, Error::Config { option: o, .. } if *o == option),
                "{yaml}: {err}"
            );
            assert!(err.to_string().contains("/etc/salt/master"), "{err}");
        }
    }
}
