//! `salt/returners/syslog_return.py`: the return dict as JSON in one record to the local
//! syslog socket, written as Python's `syslog` module writes it through glibc's
//! `syslog(3)`.
//!
//! Options (`syslog.<option>`, the `syslog` dict, `alternative.syslog.<option>` with
//! `--return_config`, `--return_kwargs`): `level` (default `LOG_INFO`), `facility`
//! (default `LOG_USER`), `tag` (default [`DEFAULT_TAG`]), `options` (a list such as
//! `[LOG_PID]`, default none). Names are the integer constants of Python's `syslog`
//! module ([`CONSTANTS`]), each usable in any of the three places, as in Salt. Salt's
//! checks and messages are kept: an unknown name logs "syslog has no attribute NAME", a
//! name that is not an integer "NAME is not a valid syslog level" (or `facility`,
//! `option`), a tag that is not a string "tag must be a string", a tag of more than 32
//! characters "tag size is limited to 32 characters"; the record is then not sent and the
//! returner does not fail.
//!
//! The record is glibc's: `<PRI>Mmm dd hh:mm:ss TAG[PID]: MESSAGE` (`[PID]` with
//! `LOG_PID`; local time; `PRI` = facility | level, `LOG_USER` when that has no facility
//! bits), one datagram to [`DEV_LOG`] (a stream socket there gets the record and a NUL);
//! a failed send is tried once more on a new connection, then, with `LOG_CONS`, written
//! to `/dev/console`. `LOG_PERROR` also writes `TAG[PID]: MESSAGE` to stderr. As with
//! glibc, a syslog that cannot be reached loses the record silently (a debug line here).
//!
//! Deviation: the default tag is `salt-minion`, what Salt documents; Salt's Python takes
//! the base name of the minion's `argv[0]`, which is `salt-minion` for the stock daemon.

use crate::options::{get_returner_options, Options};
use crate::{json, Error, Host, Returner};
use chrono::{DateTime, TimeZone};
use halite_output::py_type_name;
use halite_proto::value::{self, s};
use halite_proto::Value;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;

/// The local syslog socket (glibc's `_PATH_LOG`).
pub const DEV_LOG: &str = "/dev/log";

/// The tag when none is configured.
pub const DEFAULT_TAG: &str = "salt-minion";

/// Python `syslog`'s integer constants.
pub const CONSTANTS: &[(&str, i32)] = &[
    ("LOG_ALERT", 1),
    ("LOG_AUTH", 32),
    ("LOG_AUTHPRIV", 80),
    ("LOG_CONS", 2),
    ("LOG_CRIT", 2),
    ("LOG_CRON", 72),
    ("LOG_DAEMON", 24),
    ("LOG_DEBUG", 7),
    ("LOG_EMERG", 0),
    ("LOG_ERR", 3),
    ("LOG_INFO", 6),
    ("LOG_KERN", 0),
    ("LOG_LOCAL0", 128),
    ("LOG_LOCAL1", 136),
    ("LOG_LOCAL2", 144),
    ("LOG_LOCAL3", 152),
    ("LOG_LOCAL4", 160),
    ("LOG_LOCAL5", 168),
    ("LOG_LOCAL6", 176),
    ("LOG_LOCAL7", 184),
    ("LOG_LPR", 48),
    ("LOG_MAIL", 16),
    ("LOG_NDELAY", 8),
    ("LOG_NEWS", 56),
    ("LOG_NOTICE", 5),
    ("LOG_NOWAIT", 16),
    ("LOG_ODELAY", 4),
    ("LOG_PERROR", 32),
    ("LOG_PID", 1),
    ("LOG_SYSLOG", 40),
    ("LOG_USER", 8),
    ("LOG_UUCP", 64),
    ("LOG_WARNING", 4),
];

/// The other attributes of Python's `syslog` module (functions and module data).
const NOT_INTEGERS: &[&str] = &[
    "LOG_MASK",
    "LOG_UPTO",
    "closelog",
    "openlog",
    "setlogmask",
    "syslog",
    "__doc__",
    "__file__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
];

const LOG_PID: i32 = 1;
const LOG_CONS: i32 = 2;
const LOG_PERROR: i32 = 32;
const LOG_USER: i32 = 8;
const LOG_FACMASK: i32 = 0x3f8;

pub(crate) const RETURNER: Returner = Returner {
    name: "syslog",
    returner,
};

/// One record to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `facility | level`, with `LOG_USER` when that has no facility bits.
    pub priority: i32,
    /// The ident.
    pub tag: String,
    /// The OR of the `options`.
    pub logoption: i32,
    /// The JSON of the return.
    pub message: String,
}

impl Record {
    /// The bytes glibc sends at time `now` for process `pid`, and where the part after
    /// the timestamp starts (what `LOG_PERROR` and `LOG_CONS` print).
    pub fn encode<Tz: TimeZone>(&self, now: &DateTime<Tz>, pid: u32) -> (Vec<u8>, usize)
    where
        Tz::Offset: std::fmt::Display,
    {
        let head = format!("<{}>{}", self.priority, now.format("%b %e %H:%M:%S "));
        let pid = if self.logoption & LOG_PID != 0 {
            format!("[{pid}]")
        } else {
            String::new()
        };
        let text = format!("{head}{}{pid}: {}", self.tag, self.message);
        (text.into_bytes(), head.len())
    }
}

fn returner(host: &dyn Host, ret: &Value) -> Result<(), Error> {
    let opts = get_returner_options(
        host,
        "syslog",
        ret,
        &["level", "facility", "tag", "options"],
        &[
            ("level", s("LOG_INFO")),
            ("facility", s("LOG_USER")),
            ("options", Value::Array(Vec::new())),
        ],
    )?;
    let Some(mut record) = verify(&opts)? else {
        return Ok(());
    };
    record.message = json::dumps(ret)?;
    send(Path::new(DEV_LOG), &record, &chrono::Local::now());
    Ok(())
}

/// The integer constant `name` (an option value) stands for; `Ok(None)` after logging
/// Salt's message for a name that is none; an error where Python's `hasattr` raises.
fn constant(name: &Value, what: &str) -> Result<Option<i32>, Error> {
    let Some(name) = value::str_of(name) else {
        return Err(Error::Options(format!(
            "attribute name must be string, not '{}'",
            py_type_name(name)
        )));
    };
    if let Some((_, v)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
        return Ok(Some(*v));
    }
    if NOT_INTEGERS.contains(&name) {
        tracing::error!("{name} is not a valid syslog {what}");
    } else {
        tracing::error!("syslog has no attribute {name}");
    }
    Ok(None)
}

/// The items `for x in options` visits (a list's items, a string's characters, a dict's
/// keys), or Python's `TypeError`.
fn iterate(v: &Value) -> Result<Vec<Value>, Error> {
    match v {
        Value::Array(items) => Ok(items.clone()),
        Value::Map(entries) => Ok(entries.iter().map(|(k, _)| k.clone()).collect()),
        Value::String(text) => Ok(String::from_utf8_lossy(text.as_bytes())
            .chars()
            .map(|c| s(c.to_string()))
            .collect()),
        Value::Binary(bytes) => Ok(bytes.iter().map(|b| Value::from(*b)).collect()),
        other => Err(Error::Options(format!(
            "'{}' object is not iterable",
            py_type_name(other)
        ))),
    }
}

/// `_verify_options` and the record's settings: `Ok(None)` when Salt's checks refuse the
/// options (logged with its messages).
fn verify(opts: &Options) -> Result<Option<Record>, Error> {
    let nil = Value::Nil;
    // Python lists the option names before it checks anything.
    let options = iterate(opts.get("options").unwrap_or(&nil))?;
    let Some(level) = constant(opts.get("level").unwrap_or(&nil), "level")? else {
        return Ok(None);
    };
    let Some(facility) = constant(opts.get("facility").unwrap_or(&nil), "facility")? else {
        return Ok(None);
    };
    let mut logoption = 0;
    for option in options {
        let Some(v) = constant(&option, "option")? else {
            return Ok(None);
        };
        logoption |= v;
    }
    let tag = match opts.get("tag") {
        None => DEFAULT_TAG.to_owned(),
        Some(t) => {
            let Some(t) = value::str_of(t) else {
                tracing::error!("tag must be a string");
                return Ok(None);
            };
            if t.chars().count() > 32 {
                tracing::error!("tag size is limited to 32 characters");
                return Ok(None);
            }
            if t.contains('\0') {
                return Err(Error::Options("embedded null character".to_owned()));
            }
            t.to_owned()
        }
    };
    let mut priority = facility | level;
    if priority & LOG_FACMASK == 0 {
        priority |= LOG_USER;
    }
    Ok(Some(Record {
        priority,
        tag,
        logoption,
        message: String::new(),
    }))
}

/// Sends `record` to the syslog socket at `path` as glibc's `syslog(3)` does; what cannot
/// be delivered is lost (logged at debug level).
pub fn send<Tz: TimeZone>(path: &Path, record: &Record, now: &DateTime<Tz>)
where
    Tz::Offset: std::fmt::Display,
{
    let (bytes, msgoff) = record.encode(now, std::process::id());
    let tail = bytes.get(msgoff..).unwrap_or_default();
    if record.logoption & LOG_PERROR != 0 {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(tail);
        if !tail.ends_with(b"\n") {
            let _ = err.write_all(b"\n");
        }
    }
    let sent = deliver(path, &bytes).or_else(|_| deliver(path, &bytes));
    if let Err(e) = sent {
        tracing::debug!("syslog returner: cannot send to {}: {e}", path.display());
        if record.logoption & LOG_CONS != 0 {
            let console = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open("/dev/console");
            if let Ok(mut console) = console {
                let _ = console.write_all(tail);
                let _ = console.write_all(b"\r\n");
            }
        }
    }
}

/// One connection and one send: a datagram, or, when the socket is a stream socket, the
/// record and a NUL.
fn deliver(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match socket.connect(path) {
        Ok(()) => socket.send(bytes).map(drop),
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => {
            let mut stream = UnixStream::connect(path)?;
            let mut framed = Vec::with_capacity(bytes.len() + 1);
            framed.extend_from_slice(bytes);
            framed.push(0);
            stream.write_all(&framed)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use halite_proto::value::map;

    fn opts(pairs: Vec<(&str, Value)>) -> Options {
        let host = crate::testing::FakeHost::with_opts(Value::Map(Vec::new()));
        let kwargs = Value::Map(pairs.into_iter().map(|(k, v)| (s(k), v)).collect());
        get_returner_options(
            &host,
            "syslog",
            &map([("ret_kwargs", kwargs)]),
            &["level", "facility", "tag", "options"],
            &[
                ("level", s("LOG_INFO")),
                ("facility", s("LOG_USER")),
                ("options", Value::Array(Vec::new())),
            ],
        )
        .unwrap()
    }

    #[test]
    fn records_are_glibcs_priority_timestamp_tag_pid_and_message() {
        let now = Utc.with_ymd_and_hms(2026, 3, 5, 9, 4, 7).unwrap();
        let rec = verify(&opts(vec![])).unwrap().unwrap();
        assert_eq!(
            (rec.priority, rec.tag.as_str(), rec.logoption),
            (14, "salt-minion", 0)
        );
        let rec = Record {
            message: "{\"a\": 1}".into(),
            ..rec
        };
        let (bytes, off) = rec.encode(&now, 77);
        assert_eq!(bytes, b"<14>Mar  5 09:04:07 salt-minion: {\"a\": 1}");
        assert_eq!(&bytes[off..], b"salt-minion: {\"a\": 1}");
        let rec = verify(&opts(vec![
            ("level", s("LOG_ERR")),
            ("facility", s("LOG_DAEMON")),
            ("tag", s("mysalt")),
            ("options", Value::Array(vec![s("LOG_PID"), s("LOG_NDELAY")])),
        ]))
        .unwrap()
        .unwrap();
        let rec = Record {
            message: "x".into(),
            ..rec
        };
        assert_eq!(rec.encode(&now, 77).0, b"<27>Mar  5 09:04:07 mysalt[77]: x");
        // LOG_KERN has no facility bits: glibc puts LOG_USER in.
        let rec = verify(&opts(vec![
            ("facility", s("LOG_KERN")),
            ("level", s("LOG_DEBUG")),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(rec.priority, 15);
    }

    #[test]
    fn bad_names_and_tags_are_refused_with_salts_messages_and_send_nothing() {
        for bad in [
            vec![("level", s("LOG_WARN"))],
            vec![("facility", s("openlog"))],
            vec![("options", s("LOG_PID"))],
            vec![("tag", Value::from(5))],
            vec![("tag", s("t".repeat(33)))],
        ] {
            assert_eq!(verify(&opts(bad.clone())), Ok(None), "{bad:?}");
        }
        assert!(verify(&opts(vec![("tag", s("t".repeat(32)))]))
            .unwrap()
            .is_some());
        assert_eq!(
            verify(&opts(vec![("options", Value::from(1))])),
            Err(Error::Options("'int' object is not iterable".into()))
        );
        assert_eq!(
            verify(&opts(vec![("level", Value::Nil)])),
            Err(Error::Options(
                "attribute name must be string, not 'NoneType'".into()
            ))
        );
    }

    #[test]
    fn a_record_is_one_datagram_on_the_socket_or_a_nul_terminated_write_on_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let server = UnixDatagram::bind(&path).unwrap();
        let rec = Record {
            priority: 14,
            tag: "t".into(),
            logoption: 0,
            message: "{\"x\": \"é\"}".into(),
        };
        let now = Utc.with_ymd_and_hms(2026, 12, 25, 23, 59, 0).unwrap();
        send(&path, &rec, &now);
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            "<14>Dec 25 23:59:00 t: {\"x\": \"é\"}".as_bytes()
        );

        let path = dir.path().join("stream");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        send(&path, &rec, &now);
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut conn, &mut got).unwrap();
        assert_eq!(got, "<14>Dec 25 23:59:00 t: {\"x\": \"é\"}\0".as_bytes());
    }
}
