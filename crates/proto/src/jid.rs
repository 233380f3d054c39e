//! Job ids: 20 digits `%Y%m%d%H%M%S%f` in UTC (`salt/utils/jid.py:gen_jid`).
//!
//! Invariant: a [`JidGenerator`] never hands out the same jid twice and its jids strictly
//! increase, even when the clock stands still or steps back (Salt's `unique_jid` logic,
//! without the pid suffix).

use chrono::{DateTime, Duration, Utc};

/// Formats a time as a jid.
pub fn format_jid(t: DateTime<Utc>) -> String {
    t.format("%Y%m%d%H%M%S%6f").to_string()
}

/// `salt.utils.jid.is_jid`: 20 digits, optionally followed by `_suffix`.
///
/// Deviation: Salt accepts any suffix; here it is ASCII letters, digits, `_`, `-` and `.`
/// (Salt's own suffix is `_<pid>`), so a client-chosen jid cannot add segments to the
/// `salt/job/<jid>/...` event tags or hold a path separator.
pub fn is_jid(s: &str) -> bool {
    let bytes = s.as_bytes();
    let ok_len = bytes.len() == 20 || (bytes.len() > 21 && bytes.get(20) == Some(&b'_'));
    ok_len
        && bytes[..20].iter().all(u8::is_ascii_digit)
        && bytes[20..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Hands out strictly increasing jids from the times it is given.
#[derive(Debug, Default)]
pub struct JidGenerator {
    last: Option<DateTime<Utc>>,
}

impl JidGenerator {
    /// A new jid for `now`, bumped by a microsecond past the last one if needed.
    pub fn next(&mut self, now: DateTime<Utc>) -> String {
        let t = match self.last {
            Some(last) if last >= now => last + Duration::microseconds(1),
            _ => now,
        };
        self.last = Some(t);
        format_jid(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn jid_has_twenty_digits() {
        let t = Utc.with_ymd_and_hms(2026, 11, 22, 7, 5, 9).unwrap() + Duration::microseconds(42);
        assert_eq!(format_jid(t), "20261122070509000042");
        assert!(is_jid("20261122070509000042"));
        assert!(is_jid("20261122070509000042_123"));
        assert!(!is_jid("2026112207050900004"));
        assert!(!is_jid("20261122070509000042_"));
        assert!(!is_jid("2026112207050900004x"));
    }

    #[test]
    fn jid_suffixes_cannot_hold_tag_segments_or_paths() {
        assert!(is_jid("20261122070509000042_web-1.example_7"));
        for bad in [
            "20261122070509000042_/../../etc",
            "20261122070509000042_a/ret/forged",
            "20261122070509000042_a b",
            "20261122070509000042_\\x",
        ] {
            assert!(!is_jid(bad), "{bad}");
        }
    }

    #[test]
    fn generator_is_strictly_increasing_when_clock_stalls_or_steps_back() {
        let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut g = JidGenerator::default();
        let a = g.next(t);
        let b = g.next(t);
        let c = g.next(t - Duration::seconds(5));
        assert!(a < b && b < c);
    }
}
