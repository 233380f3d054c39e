//! `halite event listen|fire`: the Rust-native way into the master bus (a Halite extension;
//! stock `salt` has no such subcommand).
//!
//! - `halite event listen [--tag GLOB] [--json] [--since ID|TIME] [-n N]`: prints events as
//!   `tag<TAB>json` (what `salt-run state.event` prints) or, with `--json`, one JSON object
//!   per line. It reads the master's event journal from now, or with `--since` from that id
//!   or time, then live, with no gap and no duplicate however slowly its output is read
//!   (where the journal cannot be reached, the bus's pub socket live). It reconnects when
//!   the master restarts (a journal reader resumes after its last event).
//! - `halite event fire TAG JSON [--master]`: fires one event into the master bus.
//!
//! `main` hands over to [`dispatch`] only when the first words (after `-c DIR` / `-l LEVEL`)
//! are `event listen` or `event fire`: a Salt function name always has a dot, so no
//! `salt`-style command line (target `event`, function `x.y`) is taken away.

use chrono::Utc;
use clap::{Parser, Subcommand};
use halite_config::MasterConfig;
use halite_journal::{parse_since, state_event_line, BusEvent, MasterBus, Since, TagFilter};
use halite_proto::Value;
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Usage errors, as the `halite` command reports them.
const EX_USAGE: u8 = 42;

/// Watch and fire events on the master bus.
#[derive(Parser, Debug)]
#[command(name = "halite event", version)]
struct EventCli {
    /// Directory holding the `master` config file.
    #[arg(
        short = 'c',
        long = "config-dir",
        default_value = "/etc/salt",
        global = true
    )]
    config_dir: PathBuf,
    /// Console log level.
    #[arg(
        short = 'l',
        long = "log-level",
        default_value = "warning",
        global = true
    )]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print master-bus events as they arrive.
    Listen {
        /// Only tags matching this glob (Python fnmatch rules).
        #[arg(long = "tag")]
        tag: Option<String>,
        /// One JSON object per line: {"tag", "data"}, plus "id" and "time" from the journal.
        #[arg(long = "json")]
        json: bool,
        /// Replay from the journal first: an event id (0 = the oldest kept), an ISO 8601 time
        /// (UTC unless it has an offset), `@UNIX_SECONDS`, or an age such as 90s, 15m, 2h, 1d.
        #[arg(long = "since")]
        since: Option<String>,
        /// Exit after this many events.
        #[arg(short = 'n', long = "count")]
        count: Option<u64>,
        /// Indent the JSON of `tag<TAB>json` lines over several lines, keys sorted
        /// (`state.event pretty=True`).
        #[arg(long = "pretty", conflicts_with = "json")]
        pretty: bool,
    },
    /// Fire one event: TAG and its data as a JSON object.
    Fire {
        /// The event tag.
        tag: String,
        /// The event data, a JSON object.
        data: String,
        /// Fire on the master bus. This is what `fire` does when run next to a master; the
        /// flag is accepted so scripts can say so explicitly (on a minion host it is meant to
        /// forward the event through the minion, as `event.fire_master`).
        #[arg(long = "master")]
        master: bool,
    },
}

/// Runs `halite event ...` when the command line asks for it; `None` leaves the command line
/// to the `salt`-style parser.
pub fn dispatch() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let words: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    let at = subcommand_at(&words)?;
    let mut rest = vec![OsString::from("halite event")];
    rest.extend(args[1..at].iter().cloned());
    rest.extend(args[at + 1..].iter().cloned());
    let cli: EventCli = match halite_daemon::parse_cli(rest, EX_USAGE) {
        Ok(c) => c,
        Err(status) => return Some(status),
    };
    Some(ExitCode::from(run(cli)))
}

/// Where the word `event` is when the command line is `halite [-c DIR] [-l LEVEL] event
/// listen|fire ...`.
fn subcommand_at(words: &[&str]) -> Option<usize> {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        match *w {
            "-c" | "--config-dir" | "-l" | "--log-level" => i += 2,
            w if w.starts_with("--config-dir=") || w.starts_with("--log-level=") => i += 1,
            w if (w.starts_with("-c") || w.starts_with("-l")) && w.len() > 2 => i += 1,
            "event" => {
                return matches!(words.get(i + 1), Some(&"listen" | &"fire")).then_some(i);
            }
            _ => return None,
        }
    }
    None
}

fn run(cli: EventCli) -> u8 {
    halite_daemon::init_cli_logging(&cli.log_level);
    let cfg = match MasterConfig::load(&cli.config_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return EX_USAGE;
        }
    };
    let Some(rt) = halite_daemon::cli_runtime() else {
        return 2;
    };
    let bus = MasterBus::from_config(&cfg);
    match cli.command {
        Command::Listen {
            tag,
            json,
            since,
            count,
            pretty,
        } => {
            let since = match since.as_deref().map(|s| parse_since(s, Utc::now())) {
                None => Since::Live,
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    eprintln!("{e}");
                    return EX_USAGE;
                }
            };
            let filter = tag.as_deref().map_or(TagFilter::All, TagFilter::glob);
            let style = if json {
                Style::Json
            } else {
                Style::Salt { pretty }
            };
            rt.block_on(listen(&bus, filter, since, count, style))
        }
        Command::Fire { tag, data, .. } => {
            let data = match parse_data(&data) {
                Ok(d) => d,
                Err(msg) => {
                    eprintln!("{msg}");
                    return EX_USAGE;
                }
            };
            match rt.block_on(bus.fire(&tag, data)) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Style {
    Salt { pretty: bool },
    Json,
}

async fn listen(
    bus: &MasterBus,
    filter: TagFilter,
    since: Since,
    count: Option<u64>,
    style: Style,
) -> u8 {
    let mut stream = match bus.listen(filter, since).await {
        Ok(s) => s.reconnecting(true),
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let mut left = count;
    while left != Some(0) {
        let ev = match stream.recv().await {
            Ok(Some(ev)) => ev,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("{e}");
                return 1;
            }
        };
        let line = match style {
            Style::Salt { pretty } => state_event_line(&ev.tag, &ev.data, pretty),
            Style::Json => json_line(&ev),
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // The reader went away (a closed pipe): nothing more to do.
            return 0;
        }
        left = left.map(|n| n - 1);
    }
    0
}

/// `{"tag": ..., "data": ...}`, with `"id"` and `"time"` first for journal events.
fn json_line(ev: &BusEvent) -> String {
    let mut obj = serde_json::Map::new();
    if let Some(id) = ev.id {
        obj.insert("id".into(), id.into());
    }
    if let Some(t) = ev.time {
        obj.insert("time".into(), halite_proto::event::stamp(t).into());
    }
    obj.insert("tag".into(), ev.tag.clone().into());
    obj.insert("data".into(), halite_output::to_json(&ev.data));
    serde_json::Value::Object(obj).to_string()
}

/// Event data from the command line: a JSON object.
fn parse_data(text: &str) -> Result<Value, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("event data is not valid JSON: {e}"))?;
    if !json.is_object() {
        return Err("event data must be a JSON object".into());
    }
    Ok(to_value(&json))
}

fn to_value(j: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match j {
        J::Null => Value::Nil,
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            (None, None, Some(f)) => Value::F64(f),
            (None, None, None) => Value::Nil,
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        J::Object(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (Value::from(k.as_str()), to_value(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_proto::value::{map, s};

    #[test]
    fn only_event_listen_or_fire_is_taken_from_the_salt_parser() {
        let cases: &[(&[&str], Option<usize>)] = &[
            (&["halite", "event", "listen"], Some(1)),
            (
                &["halite", "-c", "/etc/salt", "event", "fire", "t", "{}"],
                Some(3),
            ),
            (
                &[
                    "halite",
                    "--config-dir=/d",
                    "-l",
                    "debug",
                    "event",
                    "listen",
                ],
                Some(4),
            ),
            (&["halite", "-c/d", "event", "listen"], Some(2)),
            (&["halite", "event", "test.ping"], None),
            (&["halite", "event"], None),
            (&["halite", "-E", "event", "listen"], None),
            (&["halite", "web*", "event", "fire"], None),
            (&["halite"], None),
        ];
        for (words, want) in cases {
            assert_eq!(subcommand_at(words), *want, "{words:?}");
        }
    }

    #[test]
    fn fire_data_must_be_a_json_object() {
        let d = parse_data(
            r#"{"a": 1, "b": [true, null, 1.5, "x"], "c": {"d": 18446744073709551615}}"#,
        )
        .unwrap();
        assert_eq!(
            d,
            map([
                ("a", Value::from(1)),
                (
                    "b",
                    Value::Array(vec![Value::from(true), Value::Nil, Value::F64(1.5), s("x")])
                ),
                ("c", map([("d", Value::from(u64::MAX))])),
            ])
        );
        for bad in ["[1]", "3", "{", "\"x\""] {
            assert!(parse_data(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_lines_carry_journal_ids_first() {
        let ev = BusEvent {
            id: Some(7),
            time: chrono::DateTime::parse_from_rfc3339("2026-11-22T09:37:30.5Z")
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            tag: "t/x".into(),
            data: map([("k", s("v"))]),
        };
        assert_eq!(
            json_line(&ev),
            r#"{"id":7,"time":"2026-11-22T09:37:30.500000+00:00","tag":"t/x","data":{"k":"v"}}"#
        );
        let live = BusEvent {
            id: None,
            time: None,
            ..ev
        };
        assert_eq!(json_line(&live), r#"{"tag":"t/x","data":{"k":"v"}}"#);
    }
}
