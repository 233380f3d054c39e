//! Salt's log line formats, so operators' greps and habits keep working.
//!
//! - Console (`log_fmt_console`'s default): `[LEVEL   ] message`, no timestamp and no colour.
//!   (Salt colours the level on a terminal; Halite never does.)
//! - Log file (`log_fmt_logfile`'s default):
//!   `YYYY-MM-DD HH:MM:SS,mmm [name             :line][LEVEL   ][pid] message`, local time,
//!   `name` being the event's target with `::` written as `.` (Salt's logger names are
//!   dotted module paths).
//!
//! Level names are Salt's: `TRACE`, `DEBUG`, `INFO`, `WARNING`, `ERROR`, and `CRITICAL` for
//! an `error` event carrying [`CRITICAL_FIELD`]. Fields other than the message and the
//! marker follow it as ` key=value`.

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The field that makes an `error` event one of Salt's CRITICAL lines:
/// `tracing::error!(critical = true, "...")`.
pub const CRITICAL_FIELD: &str = "critical";

/// One of Salt's two line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaltFormat {
    /// `[LEVEL   ] message`.
    Console,
    /// `date time,ms [name:line][LEVEL   ][pid] message`.
    LogFile,
}

/// Salt's name for an event's level.
fn level_name(level: Level, critical: bool) -> &'static str {
    match level {
        Level::ERROR if critical => "CRITICAL",
        Level::ERROR => "ERROR",
        Level::WARN => "WARNING",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// The message, the marker, and the other fields of one event.
#[derive(Default)]
struct Fields {
    message: String,
    critical: bool,
    rest: String,
}

impl Visit for Fields {
    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == CRITICAL_FIELD {
            self.critical = value;
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

impl<S, N> FormatEvent<S, N> for SaltFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = level_name(*meta.level(), fields.critical);
        match self {
            SaltFormat::Console => write!(writer, "[{level:<8}] ")?,
            SaltFormat::LogFile => {
                let name = meta.target().replace("::", ".");
                write!(
                    writer,
                    "{} [{name:<17}:{:<4}][{level:<8}][{}] ",
                    local_time(),
                    meta.line().unwrap_or(0),
                    std::process::id()
                )?;
            }
        }
        writeln!(writer, "{}{}", fields.message, fields.rest)
    }
}

/// Now as Salt's log files print it: `YYYY-MM-DD HH:MM:SS,mmm` in local time.
fn local_time() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = libc::time_t::try_from(now.as_secs()).unwrap_or(0);
    // SAFETY: `tm` is plain old data for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the reentrant form and
    // writes only into `tm`.
    let ok = !unsafe { libc::localtime_r(&secs, &mut tm) }.is_null();
    if !ok {
        return format!("@{secs},{:03}", now.subsec_millis());
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02},{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    /// A writer collecting everything into a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the events `emit` logs print at the Salt level `level` in `format`.
    fn logged(format: SaltFormat, level: &str, emit: impl FnOnce()) -> String {
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .event_format(format)
                .with_filter(crate::level_filter(level)),
        );
        tracing::subscriber::with_default(subscriber, emit);
        let out = buf.0.lock().unwrap().clone();
        String::from_utf8(out).unwrap()
    }

    fn all_levels() {
        tracing::error!(
            critical = true,
            "The Salt Master has rejected this minion's public key!"
        );
        tracing::error!("The Salt Master has cached the public key for this node");
        tracing::warn!(size = 12, "Request larger than the limit refused");
        tracing::info!("Authentication accepted from mn-1");
    }

    #[test]
    fn console_lines_have_salts_level_column_and_no_timestamp() {
        assert_eq!(
            logged(SaltFormat::Console, "info", all_levels),
            "[CRITICAL] The Salt Master has rejected this minion's public key!\n\
             [ERROR   ] The Salt Master has cached the public key for this node\n\
             [WARNING ] Request larger than the limit refused size=12\n\
             [INFO    ] Authentication accepted from mn-1\n"
        );
    }

    #[test]
    fn critical_level_hides_error_lines_and_shows_critical_ones() {
        assert_eq!(
            logged(SaltFormat::Console, "critical", all_levels),
            "[CRITICAL] The Salt Master has rejected this minion's public key!\n"
        );
        assert_eq!(
            logged(SaltFormat::Console, "error", all_levels)
                .lines()
                .count(),
            2
        );
    }

    #[test]
    fn quiet_level_prints_nothing() {
        assert_eq!(logged(SaltFormat::Console, "quiet", all_levels), "");
    }

    #[test]
    fn log_file_lines_carry_time_name_line_level_and_pid() {
        let out = logged(SaltFormat::LogFile, "critical", all_levels);
        let line = out.lines().next().unwrap();
        // 2026-11-24 11:30:00,123 [halite_daemon.format.tests:173 ][CRITICAL][4242] ...
        let (date, rest) = line.split_at(23);
        assert!(
            date.as_bytes()[4] == b'-' && date.as_bytes()[19] == b',',
            "{date}"
        );
        assert!(rest.starts_with(" [halite_daemon.format.tests:"), "{rest}");
        assert!(
            rest.ends_with(&format!(
                "][CRITICAL][{}] The Salt Master has rejected this minion's public key!",
                std::process::id()
            )),
            "{rest}"
        );
    }
}
