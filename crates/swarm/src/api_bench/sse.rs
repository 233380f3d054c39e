//! The `/events` side of the API benchmark: the tags the benchmark fires (each carries its
//! sequence number and the time it was due), a scanner that finds `tag:` lines in an SSE
//! byte stream without parsing the JSON of `data:` lines, and one SSE client.

use super::hist::Histogram;
use super::http::{Conn, Target};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{header, Method};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Every event the benchmark fires has a tag under this prefix.
pub const TAG_PREFIX: &str = "halite/bench/api/";

/// The tag of the probes fired until every stream is known to receive events.
pub const PROBE_TAG: &str = "halite/bench/api/probe";

/// What a benchmark tag says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchTag {
    /// A probe.
    Probe,
    /// Measured event `seq`, due at `due_us` (Unix time, microseconds).
    Event {
        /// 0-based sequence number.
        seq: u64,
        /// When it was due to be fired.
        due_us: u64,
    },
}

/// The tag of measured event `seq` due at `due_us`.
pub fn event_tag(seq: u64, due_us: u64) -> String {
    format!("{TAG_PREFIX}{seq}/{due_us}")
}

/// Reads a benchmark tag; `None` for any other tag.
pub fn parse_tag(tag: &[u8]) -> Option<BenchTag> {
    let rest = tag.strip_prefix(TAG_PREFIX.as_bytes())?;
    if rest == b"probe" {
        return Some(BenchTag::Probe);
    }
    let text = std::str::from_utf8(rest).ok()?;
    let (seq, due) = text.split_once('/')?;
    Some(BenchTag::Event {
        seq: seq.parse().ok()?,
        due_us: due.parse().ok()?,
    })
}

/// Unix time in microseconds.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Finds `tag: ` lines in SSE bytes arriving in arbitrary pieces. Only the start of a line
/// is kept until its end; a line that does not start with `tag: `, or a tag line longer
/// than [`TagLines::LONGEST`], is skipped without copying.
#[derive(Debug, Default)]
pub struct TagLines {
    line: Vec<u8>,
    skipping: bool,
}

impl TagLines {
    /// The longest tag line reported.
    pub const LONGEST: usize = 512;
    const MARK: &'static [u8] = b"tag: ";

    /// Scans `chunk`, calling `on_tag` with the value of every complete `tag:` line.
    pub fn feed(&mut self, mut chunk: &[u8], mut on_tag: impl FnMut(&[u8])) {
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let (part, rest) = chunk.split_at(i);
                    self.push(part);
                    if !self.skipping {
                        if let Some(tag) = self.line.strip_prefix(Self::MARK) {
                            on_tag(tag.strip_suffix(b"\r").unwrap_or(tag));
                        }
                    }
                    self.line.clear();
                    self.skipping = false;
                    chunk = rest.get(1..).unwrap_or_default();
                }
                None => {
                    self.push(chunk);
                    return;
                }
            }
        }
    }

    fn push(&mut self, part: &[u8]) {
        if self.skipping {
            return;
        }
        self.line.extend_from_slice(part);
        let n = self.line.len().min(Self::MARK.len());
        let not_a_tag = self.line.get(..n) != Self::MARK.get(..n);
        if not_a_tag || self.line.len() > Self::LONGEST {
            self.skipping = true;
            self.line.clear();
        }
    }
}

/// The firing plan, set once the streams are subscribed.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Events fired in all.
    pub total: u64,
    /// When the first is due (Unix µs).
    pub start_us: u64,
    /// When firing is due to end (Unix µs).
    pub end_us: u64,
}

/// What the streams share: counters and the plan.
#[derive(Debug, Default)]
pub struct Shared {
    /// Streams that got their 200.
    pub connected: AtomicUsize,
    /// Streams that received a probe.
    pub subscribed: AtomicUsize,
    /// Streams that received every measured event.
    pub complete: AtomicUsize,
    /// Streams that ended (error, or the end of the phase).
    pub finished: AtomicUsize,
    /// The plan (set before the first measured event is fired).
    pub plan: OnceLock<Plan>,
}

/// What one stream saw.
#[derive(Debug, Default)]
pub struct Stream {
    /// The response status (`None`: no response).
    pub status: Option<u16>,
    /// Whether a probe arrived.
    pub subscribed: bool,
    /// Distinct measured events received.
    pub received: u64,
    /// Measured events received by the planned end of firing.
    pub in_window: u64,
    /// Measured events received more than once.
    pub duplicates: u64,
    /// Measured events received after one with a higher sequence number.
    pub out_of_order: u64,
    /// Fire-to-receipt latency of every distinct event (µs).
    pub latency: Histogram,
    /// Why the stream ended early (connection, status, end of stream).
    pub error: Option<String>,
    seen: Vec<u64>,
    highest: Option<u64>,
}

impl Stream {
    fn on_tag(&mut self, tag: &[u8], now_us: u64, shared: &Shared) {
        match parse_tag(tag) {
            Some(BenchTag::Probe) if !self.subscribed => {
                self.subscribed = true;
                shared.subscribed.fetch_add(1, Ordering::Relaxed);
            }
            Some(BenchTag::Event { seq, due_us }) => {
                let Some(plan) = shared.plan.get() else {
                    return;
                };
                if self.on_event(seq, due_us, plan, now_us) {
                    shared.complete.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    /// Counts measured event `seq` (due at `due_us`) received at `now_us`; true when it
    /// was the last one missing.
    pub fn on_event(&mut self, seq: u64, due_us: u64, plan: &Plan, now_us: u64) -> bool {
        if seq >= plan.total {
            return false;
        }
        if self.seen.is_empty() {
            self.seen = vec![0; plan.total.div_ceil(64) as usize];
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        let Some(w) = self.seen.get_mut(word) else {
            return false;
        };
        if *w & bit != 0 {
            self.duplicates += 1;
            return false;
        }
        *w |= bit;
        if self.highest.is_some_and(|h| h > seq) {
            self.out_of_order += 1;
        }
        self.highest = self.highest.max(Some(seq));
        self.received += 1;
        if now_us <= plan.end_us {
            self.in_window += 1;
        }
        self.latency.record(now_us.saturating_sub(due_us));
        self.received == plan.total
    }

    /// Whether every measured event arrived.
    pub fn done(&self, shared: &Shared) -> bool {
        shared.plan.get().is_some_and(|p| self.received == p.total)
    }
}

/// One `/events` client: reads until it has every measured event, the stream ends, or
/// `stop` turns true.
pub async fn client(
    target: Target,
    token: String,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Stream {
    let mut out = Stream::default();
    let resp = async {
        let mut conn = Conn::open(&target).await?;
        let req = target
            .request(Method::GET, "/events")
            .header("X-Auth-Token", &token)
            .header(header::ACCEPT, "text/event-stream")
            .body(Full::new(Bytes::new()))
            .map_err(|e| crate::Error::Bench(format!("building a request: {e}")))?;
        conn.send(req).await
    };
    let resp = tokio::select! {
        r = resp => r,
        _ = stop.wait_for(|v| *v) => {
            out.error = Some("no response before the end of the phase".into());
            shared.finished.fetch_add(1, Ordering::Relaxed);
            return out;
        }
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(e.to_string());
            shared.finished.fetch_add(1, Ordering::Relaxed);
            return out;
        }
    };
    let status = resp.status().as_u16();
    out.status = Some(status);
    if status != 200 {
        out.error = Some(format!("status {status}"));
        shared.finished.fetch_add(1, Ordering::Relaxed);
        return out;
    }
    shared.connected.fetch_add(1, Ordering::Relaxed);
    let mut body = resp.into_body();
    let mut lines = TagLines::default();
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stop.wait_for(|v| *v) => break,
        };
        match frame {
            None => {
                out.error = Some("the stream ended".into());
                break;
            }
            Some(Err(e)) => {
                out.error = Some(format!("the stream failed: {e}"));
                break;
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    // Everything in one piece arrived at the same time.
                    let now_us = unix_us();
                    lines.feed(&data, |tag| out.on_tag(tag, now_us, &shared));
                }
            }
        }
        if out.done(&shared) {
            break;
        }
    }
    shared.finished.fetch_add(1, Ordering::Relaxed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_carry_sequence_and_due_time() {
        let t = event_tag(42, 1_700_000_000_123_456);
        assert_eq!(
            parse_tag(t.as_bytes()),
            Some(BenchTag::Event {
                seq: 42,
                due_us: 1_700_000_000_123_456
            })
        );
        assert_eq!(parse_tag(PROBE_TAG.as_bytes()), Some(BenchTag::Probe));
        for other in [
            "salt/job/1/new",
            "halite/bench/api/1",
            "halite/bench/api/x/2",
            "",
        ] {
            assert_eq!(parse_tag(other.as_bytes()), None, "{other}");
        }
    }

    fn tags_of(pieces: &[&[u8]]) -> Vec<String> {
        let mut s = TagLines::default();
        let mut out = Vec::new();
        for p in pieces {
            s.feed(p, |t| out.push(String::from_utf8_lossy(t).into_owned()));
        }
        out
    }

    #[test]
    fn tag_lines_are_found_across_piece_boundaries() {
        let stream = b"retry: 400\ntag: a/b\ndata: {\"tag\": \"a/b\", \"x\": \"tag: no\"}\n\nid: 7\ntag: c\r\ndata: {}\n\n";
        let whole = tags_of(&[stream]);
        assert_eq!(whole, ["a/b", "c"]);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(tags_of(&[a, b]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(tags_of(&bytes), whole);
    }

    #[test]
    fn long_and_unterminated_lines_are_skipped() {
        let long = format!("tag: {}\ntag: ok\n", "x".repeat(TagLines::LONGEST));
        assert_eq!(tags_of(&[long.as_bytes()]), ["ok"]);
        assert_eq!(tags_of(&[b"tag: half"]), Vec::<String>::new());
        assert_eq!(tags_of(&[b"ta", b"g: split\n"]), ["split"]);
        assert_eq!(tags_of(&[b"tagx: no\n: comment\n\n"]), Vec::<String>::new());
    }

    #[test]
    fn a_stream_counts_distinct_late_duplicate_and_reordered_events() {
        let plan = Plan {
            total: 100,
            start_us: 1_000,
            end_us: 2_000,
        };
        let mut s = Stream::default();
        assert!(!s.on_event(0, 1_000, &plan, 1_500));
        assert!(!s.on_event(5, 1_050, &plan, 1_900));
        assert!(!s.on_event(3, 1_030, &plan, 2_500));
        assert!(!s.on_event(3, 1_030, &plan, 2_600));
        assert!(!s.on_event(100, 1_030, &plan, 2_600));
        assert_eq!(s.received, 3);
        assert_eq!(s.in_window, 2);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.out_of_order, 1);
        assert_eq!(s.latency.max(), Some(1_470));
        let completions = (0..100)
            .filter(|seq| s.on_event(*seq, 1_000, &plan, 1_200))
            .count();
        assert_eq!((s.received, completions), (100, 1));
    }
}
