//! The client API for the master bus: fire, and listen live or from the journal.

use crate::client::ReplayStream;
use crate::config::socket_path;
use crate::wire::{Request, Start};
use crate::{Error, Result};
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use halite_bus::{frame_limit, BusAddr, BusClient, Listener, MASTER_PUB, MASTER_PULL};
use halite_config::MasterConfig;
use halite_proto::event::{frame_pull, pack_event, stamp, unpack_event};
use halite_proto::Value;
use halite_target::fnmatch::Pattern;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tracing::{debug, warn};

/// Pause between attempts while a reconnecting [`EventStream`] waits for the master.
pub const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Which tags a listener keeps.
#[derive(Debug, Clone)]
pub enum TagFilter {
    /// Every event.
    All,
    /// Tags starting with this (Salt's default `get_event` match).
    Prefix(String),
    /// Tags matching this glob, with Python `fnmatch` rules (case-sensitive, `*` crosses `/`).
    Glob {
        /// The glob as given.
        text: String,
        /// It compiled.
        pattern: Pattern,
    },
}

impl TagFilter {
    /// A glob filter; `*` alone is [`TagFilter::All`].
    pub fn glob(glob: &str) -> TagFilter {
        if glob == "*" {
            return TagFilter::All;
        }
        TagFilter::Glob {
            text: glob.to_owned(),
            pattern: Pattern::new(glob),
        }
    }

    /// Whether `tag` passes.
    pub fn matches(&self, tag: &str) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Prefix(p) => tag.starts_with(p.as_str()),
            TagFilter::Glob { pattern, .. } => pattern.matches(tag),
        }
    }

    /// A prefix every passing tag has, so the server can drop the rest early: for a glob,
    /// the text before its first wildcard (`fnmatch` has no escape character).
    fn prefix(&self) -> &str {
        match self {
            TagFilter::All => "",
            TagFilter::Prefix(p) => p,
            TagFilter::Glob { text, .. } => {
                let end = text.find(['*', '?', '[']).unwrap_or(text.len());
                &text[..end]
            }
        }
    }
}

/// Where a listener starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Events from now on: through the journal (with ids; nothing is lost however slowly
    /// they are read, and a reconnecting stream resumes after its last event), or, where
    /// the journal cannot be reached, from the bus's pub socket (no ids; a listener that
    /// falls too far behind gets a `halite/bus/gap` event with the count it lost).
    Live,
    /// From this journal id (inclusive; `0` is the oldest event held), then live.
    Id(u64),
    /// From the first event the journal stored at or after this time, then live.
    Time(DateTime<Utc>),
}

/// Parses a `--since` value: an event id (`1234`), an age (`90s`, `15m`, `2h`, `7d`), or a
/// time: ISO 8601 with an offset (`2026-11-22T09:37:30.6+00:00`, `...Z`), without one (read
/// as UTC, like Salt's `_stamp`), or `@` and Unix seconds (`@1795000000.5`).
pub fn parse_since(text: &str, now: DateTime<Utc>) -> Result<Since> {
    let bad = || Error::BadSince(text.to_owned());
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map(Since::Id).map_err(|_| bad());
    }
    if let Some(unit) = t.chars().last().filter(|c| "smhd".contains(*c)) {
        if let Ok(n) = t[..t.len() - 1].parse::<u64>() {
            let secs = match unit {
                's' => n,
                'm' => n.saturating_mul(60),
                'h' => n.saturating_mul(3600),
                _ => n.saturating_mul(86_400),
            };
            let age = chrono::Duration::seconds(i64::try_from(secs).map_err(|_| bad())?);
            return now.checked_sub_signed(age).map(Since::Time).ok_or_else(bad);
        }
    }
    if let Some(unix) = t.strip_prefix('@') {
        let secs: f64 = unix.parse().map_err(|_| bad())?;
        if !secs.is_finite() {
            return Err(bad());
        }
        let micros = (secs * 1e6).round() as i64;
        return Utc
            .timestamp_micros(micros)
            .single()
            .map(Since::Time)
            .ok_or_else(bad);
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return Ok(Since::Time(dt.with_timezone(&Utc)));
    }
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(t, fmt) {
            return Ok(Since::Time(Utc.from_utc_datetime(&dt)));
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return Ok(Since::Time(Utc.from_utc_datetime(&dt)));
        }
    }
    Err(bad())
}

/// One event as a listener gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct BusEvent {
    /// The journal id (events read from the journal only).
    pub id: Option<u64>,
    /// When the journal stored it (events read from the journal only).
    pub time: Option<DateTime<Utc>>,
    /// The tag.
    pub tag: String,
    /// The data (a map, with `_stamp`, for every event fired through Salt's API).
    pub data: Value,
}

/// The master bus of one master: where to fire and where to listen.
///
/// ```no_run
/// # async fn demo() -> halite_journal::Result<()> {
/// use halite_journal::{MasterBus, Since, TagFilter};
/// let bus = MasterBus::new("/var/run/salt/master", 1_048_576);
/// bus.fire("myapp/deploy/done", halite_proto::value::map([("ok", true.into())])).await?;
/// let mut events = bus.listen(TagFilter::glob("salt/job/*/ret/*"), Since::Live).await?;
/// while let Some(ev) = events.recv().await? {
///     println!("{} {:?}", ev.tag, ev.data);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MasterBus {
    pub_addr: BusAddr,
    pull: PathBuf,
    journal: PathBuf,
    max_event_size: usize,
}

impl MasterBus {
    /// The bus of the master whose `sock_dir` and `max_event_size` are these.
    pub fn new(sock_dir: impl AsRef<Path>, max_event_size: usize) -> MasterBus {
        let dir = sock_dir.as_ref();
        MasterBus {
            pub_addr: BusAddr::Unix(dir.join(MASTER_PUB)),
            pull: dir.join(MASTER_PULL),
            journal: socket_path(dir),
            max_event_size,
        }
    }

    /// The pull socket's address.
    fn pull_addr(&self) -> BusAddr {
        BusAddr::Unix(self.pull.clone())
    }

    /// The bus of the master configured by `cfg`.
    pub fn from_config(cfg: &MasterConfig) -> MasterBus {
        MasterBus::new(
            &cfg.sock_dir,
            usize::try_from(cfg.max_event_size).unwrap_or(usize::MAX),
        )
    }

    /// Fires one event into the master bus, as `salt.utils.event` `fire_event` does: `data`
    /// must be a map; `_stamp` is set and data trimmed to `max_event_size`.
    pub async fn fire(&self, tag: &str, data: Value) -> Result<()> {
        BusClient::new(self.max_event_size)
            .fire(&self.pull_addr(), tag, data)
            .await
            .map_err(Error::from)
    }

    /// Opens a persistent connection to the pull socket for firing many events in order,
    /// as a stock `SaltEvent` object keeps its push connection. ([`fire`](Self::fire) uses
    /// one connection per event, and the bus serves connections concurrently, so events
    /// fired one after another that way may be published in another order.)
    pub async fn sender(&self) -> Result<EventSender> {
        let io = |source| {
            Error::Bus(halite_bus::Error::Connect {
                addr: self.pull_addr(),
                source,
            })
        };
        let conn = UnixStream::connect(&self.pull).await.map_err(io)?;
        Ok(EventSender {
            conn,
            addr: self.pull_addr(),
            limit: frame_limit(self.max_event_size),
            buf: Vec::new(),
        })
    }

    /// Starts listening from now, an id or a time, then live, with no gap and no duplicate
    /// (see [`Since`]). Connects before returning, so a master that is not running is an
    /// error here; every event published after it returns is received.
    pub async fn listen(&self, filter: TagFilter, since: Since) -> Result<EventStream> {
        let resume = match since {
            Since::Live => None,
            Since::Id(id) => Some(Start::Id(id)),
            Since::Time(t) => Some(Start::Time(t.timestamp_micros())),
        };
        let mut stream = EventStream {
            bus: self.clone(),
            filter,
            resume,
            source: None,
            reconnect: false,
        };
        stream.source = Some(stream.connect().await?);
        Ok(stream)
    }
}

/// A persistent connection to the master bus's pull socket ([`MasterBus::sender`]).
pub struct EventSender {
    conn: UnixStream,
    addr: BusAddr,
    limit: usize,
    buf: Vec<u8>,
}

impl EventSender {
    /// Sends one event: the tag must be non-empty without `"\n\n"`, data a map; `_stamp`
    /// is set. Unlike [`MasterBus::fire`], data is not trimmed: an event larger than the bus
    /// accepts is refused with [`halite_bus::Error::EventTooLarge`].
    pub async fn send(&mut self, tag: &str, data: Value) -> Result<()> {
        self.buf.clear();
        self.push(tag, data)?;
        self.write().await
    }

    /// Sends several events with one write, in order.
    pub async fn send_all<'a>(
        &mut self,
        events: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> Result<()> {
        self.buf.clear();
        for (tag, data) in events {
            self.push(tag, data)?;
        }
        self.write().await
    }

    fn push(&mut self, tag: &str, mut data: Value) -> Result<()> {
        if tag.is_empty() || tag.contains("\n\n") {
            return Err(halite_bus::Error::BadTag(tag.to_owned()).into());
        }
        if !matches!(data, Value::Map(_)) {
            return Err(halite_bus::Error::DataNotAMap.into());
        }
        halite_proto::value::set(&mut data, "_stamp", Value::from(stamp(Utc::now())));
        let frame = frame_pull(&pack_event(tag, &data));
        if frame.len() - 4 > self.limit {
            return Err(halite_bus::Error::EventTooLarge {
                size: frame.len() - 4,
                limit: self.limit,
            }
            .into());
        }
        self.buf.extend_from_slice(&frame);
        Ok(())
    }

    async fn write(&mut self) -> Result<()> {
        let io = |source| {
            Error::Bus(halite_bus::Error::Io {
                addr: self.addr.clone(),
                source,
            })
        };
        self.conn.write_all(&self.buf).await.map_err(io)?;
        self.conn.flush().await.map_err(io)
    }
}

enum Source {
    Live(Listener),
    Journal(ReplayStream),
}

/// Events from [`MasterBus::listen`], filtered by tag.
pub struct EventStream {
    bus: MasterBus,
    filter: TagFilter,
    /// Where a journal replay (re)starts; `None` for a live listener not connected to the
    /// journal yet (or reading the pub socket without one).
    resume: Option<Start>,
    source: Option<Source>,
    reconnect: bool,
}

impl EventStream {
    /// Whether to reconnect, every [`RECONNECT_DELAY`], when the master goes away (as Salt's
    /// `get_event(auto_reconnect=True)`). A stream reading the journal resumes after the
    /// last event it returned, so nothing is missed or repeated across a master restart; one
    /// reading the pub socket misses what was fired while it was disconnected.
    pub fn reconnecting(mut self, on: bool) -> EventStream {
        self.reconnect = on;
        self
    }

    /// The next event that passes the filter; `Ok(None)` when the master closed the
    /// connection and the stream does not reconnect.
    pub async fn recv(&mut self) -> Result<Option<BusEvent>> {
        loop {
            let source = match &mut self.source {
                Some(s) => s,
                None => {
                    let s = self.reconnect_loop().await;
                    self.source.insert(s)
                }
            };
            let got = match source {
                Source::Live(l) => l.recv().await.map_err(Error::from).map(|o| {
                    o.map(|e| {
                        let (tag, data) = e.into_parts();
                        BusEvent {
                            id: None,
                            time: None,
                            tag,
                            data,
                        }
                    })
                }),
                Source::Journal(j) => match j.recv().await {
                    Ok(Some((id, time_us, body))) => {
                        self.resume = Some(Start::Id(id + 1));
                        match unpack_event(&body) {
                            Ok((tag, data)) => Ok(Some(BusEvent {
                                id: Some(id),
                                time: Utc.timestamp_micros(time_us).single(),
                                tag,
                                data,
                            })),
                            Err(e) => {
                                warn!(id, error = %e, "Skipping malformed journal event");
                                continue;
                            }
                        }
                    }
                    Ok(None) => Ok(None),
                    Err(e) => Err(e),
                },
            };
            match got {
                // The pub socket's word that this listener lost events passes any filter.
                Ok(Some(ev))
                    if self.filter.matches(&ev.tag)
                        || (ev.id.is_none() && ev.tag == halite_bus::GAP_TAG) =>
                {
                    return Ok(Some(ev))
                }
                Ok(Some(_)) => {}
                Ok(None) if self.reconnect => {
                    warn!("The master closed the event connection; reconnecting");
                    self.source = None;
                }
                Ok(None) => return Ok(None),
                Err(e) if self.reconnect && is_disconnect(&e) => {
                    warn!(error = %e, "Event connection lost; reconnecting");
                    self.source = None;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn connect(&mut self) -> Result<Source> {
        let prefix = self.filter.prefix().to_owned();
        match self.resume {
            None => match self.replay(Start::Now, prefix.clone()).await {
                Ok(source) => Ok(source),
                Err(e) => {
                    debug!(error = %e, "No event journal; listening to the bus's pub socket");
                    let listener = BusClient::new(self.bus.max_event_size)
                        .listen(&self.bus.pub_addr, &prefix)
                        .await?;
                    Ok(Source::Live(listener))
                }
            },
            Some(start) => self.replay(start, prefix).await,
        }
    }

    /// Connects to the journal socket for events from `start`.
    async fn replay(&mut self, start: Start, prefix: String) -> Result<Source> {
        let request = Request {
            start,
            tag_prefix: prefix,
        };
        let stream =
            ReplayStream::connect(&self.bus.journal, &request, self.bus.max_event_size).await?;
        if let Start::Id(id) = start {
            if id > 0 && id < stream.first_id() {
                warn!(
                    requested = id,
                    oldest = stream.first_id(),
                    "Events before the oldest journal id were removed by retention"
                );
            }
        }
        // Every event of this connection has an id at or after the journal's next id.
        if start == Start::Now {
            self.resume = Some(Start::Id(stream.next_id()));
        }
        Ok(Source::Journal(stream))
    }

    async fn reconnect_loop(&mut self) -> Source {
        loop {
            tokio::time::sleep(RECONNECT_DELAY).await;
            match self.connect().await {
                Ok(s) => {
                    warn!("Event connection re-established");
                    return s;
                }
                Err(e) => debug!(error = %e, "Reconnecting to the master bus"),
            }
        }
    }
}

/// Errors a reconnect can cure.
fn is_disconnect(e: &Error) -> bool {
    matches!(
        e,
        Error::Connect { .. }
            | Error::Connection { .. }
            | Error::Bus(
                halite_bus::Error::Connect { .. }
                    | halite_bus::Error::Io { .. }
                    | halite_bus::Error::Truncated { .. }
            )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap()
    }

    fn at(s: &str) -> Since {
        Since::Time(DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc))
    }

    #[test]
    fn since_accepts_ids_ages_and_times() {
        let cases = [
            ("0", Since::Id(0)),
            ("123", Since::Id(123)),
            ("90s", at("2026-11-22T11:58:30Z")),
            ("15m", at("2026-11-22T11:45:00Z")),
            ("2h", at("2026-11-22T10:00:00Z")),
            ("1d", at("2026-11-21T12:00:00Z")),
            (
                "2026-11-22T09:37:30.645860+00:00",
                at("2026-11-22T09:37:30.645860Z"),
            ),
            ("2026-11-22T10:37:30+01:00", at("2026-11-22T09:37:30Z")),
            ("2026-11-22T09:37:30Z", at("2026-11-22T09:37:30Z")),
            ("2026-11-22T09:37:30.5", at("2026-11-22T09:37:30.5Z")),
            ("2026-11-22 09:37:30", at("2026-11-22T09:37:30Z")),
            ("2026-11-22 09:37", at("2026-11-22T09:37:00Z")),
            ("2026-11-22", at("2026-11-22T00:00:00Z")),
            ("@1795000000.5", at("2026-11-18T11:06:40.5Z")),
        ];
        for (text, want) in cases {
            assert_eq!(parse_since(text, now()).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn since_refuses_anything_else() {
        for text in [
            "",
            "-1",
            "x",
            "10y",
            "99999999999999999999999",
            "@nan",
            "2026-13-01",
            "s",
        ] {
            assert!(
                matches!(parse_since(text, now()), Err(Error::BadSince(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn glob_filters_follow_fnmatch_and_give_the_literal_prefix() {
        let cases = [
            ("*", "", "anything", true),
            ("salt/job/*/ret/*", "salt/job/", "salt/job/1/ret/m1", true),
            ("salt/job/*/ret/*", "salt/job/", "salt/job/1/new", false),
            ("salt/auth", "salt/auth", "salt/auth", true),
            ("salt/auth", "salt/auth", "salt/auth/x", false),
            ("te?t/[ab]", "te", "test/a", true),
            ("Salt/*", "Salt/", "salt/x", false),
        ];
        for (glob, prefix, tag, want) in cases {
            let f = TagFilter::glob(glob);
            assert_eq!(f.prefix(), prefix, "{glob}");
            assert_eq!(f.matches(tag), want, "{glob} {tag}");
        }
    }
}
