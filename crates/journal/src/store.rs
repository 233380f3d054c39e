//! The journal file: events by id in one redb database, pruned by size and age.
//!
//! Layout (schema 1):
//! - `events`: `u64` id → `time_us (i64, little-endian) || body`, where `body` is the event as
//!   the bus packs it (`tag\n\n msgpack(data)`) and `time_us` the journal's clock, in
//!   microseconds since the Unix epoch, when the batch holding it was appended.
//! - `meta`: `schema_version`, `next_id`, `bytes` (the accounted size of what `events` holds),
//!   `last_time_us`.
//!
//! Invariants, kept by every write transaction:
//! - ids are assigned in append order, starting at 1, and never reused (`next_id` survives
//!   pruning and restarts);
//! - pruning only removes the oldest events, so the ids held are one contiguous run
//!   `first_id..next_id`;
//! - times never decrease with the id (a clock that steps back is clamped to the last time),
//!   so the first event at or after a time can be found by bisection.

use crate::{Error, Result};
use redb::{Database, ReadableDatabase, ReadableTable, Table, TableDefinition};
use std::path::{Path, PathBuf};
use std::time::Duration;

const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const SCHEMA_VERSION: u64 = 1;
const META_SCHEMA: &str = "schema_version";
const META_NEXT_ID: &str = "next_id";
const META_BYTES: &str = "bytes";
const META_LAST_TIME: &str = "last_time_us";

/// Bytes accounted for each event on top of its body: the key and the time.
pub const ENTRY_OVERHEAD: u64 = 16;

/// How much the journal keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Accounted bytes kept at most (bodies plus [`ENTRY_OVERHEAD`] each); the oldest
    /// events are removed beyond it. The file itself is larger by redb's page overhead.
    pub max_bytes: u64,
    /// Events older than this are removed; `None` keeps events whatever their age.
    pub max_age: Option<Duration>,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its id.
    pub id: u64,
    /// When it was appended, in microseconds since the Unix epoch.
    pub time_us: i64,
    /// The packed event, `tag\n\n msgpack(data)`.
    pub body: Vec<u8>,
}

/// What one append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The id given to the first event of the batch (the others follow in order).
    pub first_id: u64,
    /// The time stored with every event of the batch.
    pub time_us: i64,
    /// Old events removed by retention in the same transaction.
    pub pruned: u64,
}

/// The journal database. Appends and prunes take `&self` (redb serializes write
/// transactions); reads use snapshots and never wait for a write.
pub struct Journal {
    db: Database,
    path: PathBuf,
    retention: Retention,
}

/// The meta counters, read and written once per transaction.
struct Meta {
    next_id: u64,
    bytes: u64,
    last_time_us: i64,
}

impl Meta {
    fn load(table: &Table<'_, &'static str, u64>) -> Result<Meta> {
        let get = |k| -> Result<Option<u64>> { Ok(table.get(k)?.map(|g| g.value())) };
        Ok(Meta {
            next_id: get(META_NEXT_ID)?.unwrap_or(1),
            bytes: get(META_BYTES)?.unwrap_or(0),
            last_time_us: get(META_LAST_TIME)?.map_or(0, |t| t as i64),
        })
    }

    fn store(&self, table: &mut Table<'_, &'static str, u64>) -> Result<()> {
        table.insert(META_NEXT_ID, self.next_id)?;
        table.insert(META_BYTES, self.bytes)?;
        table.insert(META_LAST_TIME, self.last_time_us as u64)?;
        Ok(())
    }
}

fn time_of(value: &[u8]) -> Result<i64> {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_le_bytes)
        .ok_or_else(|| Error::Corrupt("event record shorter than its timestamp".into()))
}

fn record(id: u64, value: &[u8]) -> Result<Record> {
    Ok(Record {
        id,
        time_us: time_of(value)?,
        body: value[8..].to_vec(),
    })
}

/// redb's page cache for this file. redb's default (1 GiB) keeps growing with what is
/// written: at 10,000 minions the journal's pages were ~30 MiB of the master's heap after ten
/// publishes, and more with each (heaptrack). Reads here are mostly of recent entries and
/// the OS page cache holds the file anyway; 4 MiB instead of 16 took the master's peak RSS
/// at 10,000 minions from ~150 to 128 MiB with the same CPU per publish.
const CACHE_BYTES: usize = 4 << 20;

impl Journal {
    /// Opens (creating if needed) the journal at `path`. The file is integrity-checked on
    /// open; a file of another schema is [`Error::UnsupportedSchema`].
    pub fn open(path: impl AsRef<Path>, retention: Retention) -> Result<Journal> {
        let path = path.as_ref().to_path_buf();
        let db = open_db(&path).map_err(|e| e.at(&path))?;
        Ok(Journal {
            db,
            path,
            retention,
        })
    }

    /// Runs `f`; a database error leaves it naming the journal file.
    fn named<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        f().map_err(|e| e.at(&self.path))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The retention limits in force.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Appends a batch of event bodies in one durable transaction, giving them consecutive
    /// ids, then applies retention at `now_us`. An empty batch only prunes.
    pub fn append<'a>(
        &self,
        bodies: impl IntoIterator<Item = &'a [u8]>,
        now_us: i64,
    ) -> Result<Appended> {
        self.named(|| {
            let txn = self.db.begin_write()?;
            let out = {
                let mut meta_table = txn.open_table(META)?;
                let mut events = txn.open_table(EVENTS)?;
                let mut meta = Meta::load(&meta_table)?;
                let time_us = now_us.max(meta.last_time_us);
                let first_id = meta.next_id;
                let mut value = Vec::new();
                for body in bodies {
                    value.clear();
                    value.extend_from_slice(&time_us.to_le_bytes());
                    value.extend_from_slice(body);
                    events.insert(meta.next_id, value.as_slice())?;
                    meta.next_id += 1;
                    meta.bytes += ENTRY_OVERHEAD + body.len() as u64;
                }
                meta.last_time_us = time_us;
                let pruned = self.prune_in(&mut events, &mut meta, now_us)?;
                meta.store(&mut meta_table)?;
                Appended {
                    first_id,
                    time_us,
                    pruned,
                }
            };
            txn.commit()?;
            Ok(out)
        })
    }

    /// Applies retention at `now_us` without appending; returns how many events went.
    pub fn prune(&self, now_us: i64) -> Result<u64> {
        Ok(self.append(std::iter::empty(), now_us)?.pruned)
    }

    /// Removes the oldest events while the journal is over its size or holds events older
    /// than its age limit.
    fn prune_in(
        &self,
        events: &mut Table<'_, u64, &'static [u8]>,
        meta: &mut Meta,
        now_us: i64,
    ) -> Result<u64> {
        let cutoff = self
            .retention
            .max_age
            .map(|age| now_us.saturating_sub(i64::try_from(age.as_micros()).unwrap_or(i64::MAX)));
        let mut pruned = 0;
        loop {
            let expired = match (cutoff, events.first()?) {
                (_, None) => break,
                (Some(cutoff), Some((_, v))) => time_of(v.value())? < cutoff,
                (None, Some(_)) => false,
            };
            if !expired && meta.bytes <= self.retention.max_bytes {
                break;
            }
            let Some((_, v)) = events.pop_first()? else {
                break;
            };
            let size = ENTRY_OVERHEAD + (v.value().len() as u64).saturating_sub(8);
            meta.bytes = meta.bytes.saturating_sub(size);
            pruned += 1;
        }
        if events.first()?.is_none() {
            meta.bytes = 0;
        }
        Ok(pruned)
    }

    /// The id the next appended event will get.
    pub fn next_id(&self) -> Result<u64> {
        self.named(|| {
            let txn = self.db.begin_read()?;
            let meta = txn.open_table(META)?;
            Ok(meta.get(META_NEXT_ID)?.map_or(1, |g| g.value()))
        })
    }

    /// The oldest id held, or [`next_id`](Self::next_id) when the journal is empty.
    pub fn first_id(&self) -> Result<u64> {
        self.named(|| {
            let txn = self.db.begin_read()?;
            let events = txn.open_table(EVENTS)?;
            let first = events.first()?.map(|(k, _)| k.value());
            match first {
                Some(id) => Ok(id),
                None => Ok(txn
                    .open_table(META)?
                    .get(META_NEXT_ID)?
                    .map_or(1, |g| g.value())),
            }
        })
    }

    /// The accounted size of what the journal holds (see [`Retention::max_bytes`]).
    pub fn bytes(&self) -> Result<u64> {
        self.named(|| {
            let txn = self.db.begin_read()?;
            let meta = txn.open_table(META)?;
            Ok(meta.get(META_BYTES)?.map_or(0, |g| g.value()))
        })
    }

    /// Up to `max_events` events with ids from `from_id` up to (not including) `to_id`,
    /// stopping early once `max_bytes` of bodies are collected (at least one event is
    /// returned when any is in range).
    pub fn read(
        &self,
        from_id: u64,
        to_id: u64,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>> {
        self.named(|| {
            let mut out = Vec::new();
            if from_id >= to_id {
                return Ok(out);
            }
            let txn = self.db.begin_read()?;
            let events = txn.open_table(EVENTS)?;
            let mut size = 0;
            for entry in events.range(from_id..to_id)? {
                let (k, v) = entry?;
                let rec = record(k.value(), v.value())?;
                size += rec.body.len();
                out.push(rec);
                if out.len() >= max_events || size >= max_bytes {
                    break;
                }
            }
            Ok(out)
        })
    }

    /// The first id whose time is at or after `time_us`, or the next id when every held
    /// event is older.
    pub fn id_at_time(&self, time_us: i64) -> Result<u64> {
        self.named(|| {
            let txn = self.db.begin_read()?;
            let events = txn.open_table(EVENTS)?;
            let next_id = txn
                .open_table(META)?
                .get(META_NEXT_ID)?
                .map_or(1, |g| g.value());
            let Some(first) = events.first()?.map(|(k, _)| k.value()) else {
                return Ok(next_id);
            };
            // Bisect over the contiguous ids first..next_id: times are non-decreasing.
            let (mut lo, mut hi) = (first, next_id);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let t = match events.get(mid)? {
                    Some(v) => time_of(v.value())?,
                    None => return Err(Error::Corrupt(format!("journal id {mid} missing"))),
                };
                if t < time_us {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            Ok(lo)
        })
    }
}

/// Opens the database at `path` and checks (or records) its schema version.
fn open_db(path: &Path) -> Result<Database> {
    let db = Database::builder()
        .set_check_integrity_on_open(true)
        .set_cache_size(CACHE_BYTES)
        .create(path)?;
    let txn = db.begin_write()?;
    {
        txn.open_table(EVENTS)?;
        let mut meta = txn.open_table(META)?;
        let found = meta.get(META_SCHEMA)?.map(|g| g.value());
        match found {
            None => {
                meta.insert(META_SCHEMA, SCHEMA_VERSION)?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(Error::UnsupportedSchema {
                    path: path.to_path_buf(),
                    found,
                    expected: SCHEMA_VERSION,
                })
            }
        }
    }
    txn.commit()?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000;

    fn open(dir: &tempfile::TempDir, max_bytes: u64, max_age: Option<u64>) -> Journal {
        Journal::open(
            dir.path().join("events.redb"),
            Retention {
                max_bytes,
                max_age: max_age.map(Duration::from_secs),
            },
        )
        .unwrap()
    }

    fn body(i: usize) -> Vec<u8> {
        format!("t/{i}\n\n\u{80}").into_bytes()
    }

    fn ids(j: &Journal) -> Vec<u64> {
        j.read(0, u64::MAX, usize::MAX, usize::MAX)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect()
    }

    #[test]
    fn ids_start_at_one_and_follow_append_order() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, None);
        assert_eq!((j.first_id().unwrap(), j.next_id().unwrap()), (1, 1));
        let a = j.append([b"a\n\n\x80".as_slice()], 10).unwrap();
        let b = j
            .append([b"b\n\n\x80".as_slice(), b"c\n\n\x80".as_slice()], 20)
            .unwrap();
        assert_eq!((a.first_id, b.first_id), (1, 2));
        let recs = j.read(1, 100, 100, usize::MAX).unwrap();
        let got: Vec<_> = recs
            .iter()
            .map(|r| (r.id, r.time_us, r.body.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 10, b"a\n\n\x80".to_vec()),
                (2, 20, b"b\n\n\x80".to_vec()),
                (3, 20, b"c\n\n\x80".to_vec()),
            ]
        );
        assert_eq!(j.next_id().unwrap(), 4);
    }

    #[test]
    fn reopening_keeps_events_and_counters() {
        let dir = tempfile::tempdir().unwrap();
        {
            let j = open(&dir, u64::MAX, None);
            for i in 0..5 {
                j.append([body(i).as_slice()], i as i64).unwrap();
            }
        }
        let j = open(&dir, u64::MAX, None);
        assert_eq!(ids(&j), vec![1, 2, 3, 4, 5]);
        assert_eq!(j.append([body(9).as_slice()], 9).unwrap().first_id, 6);
        assert_eq!(
            j.bytes().unwrap(),
            6 * (ENTRY_OVERHEAD + body(0).len() as u64)
        );
    }

    #[test]
    fn size_limit_drops_the_oldest_events() {
        let dir = tempfile::tempdir().unwrap();
        let each = ENTRY_OVERHEAD + body(0).len() as u64;
        let j = open(&dir, 3 * each, None);
        for i in 0..5 {
            j.append([body(i).as_slice()], 0).unwrap();
        }
        assert_eq!(ids(&j), vec![3, 4, 5]);
        assert_eq!(j.bytes().unwrap(), 3 * each);
        assert_eq!(j.first_id().unwrap(), 3);
        // One batch larger than the limit keeps only its newest events.
        let batch: Vec<Vec<u8>> = (0..10).map(body).collect();
        let out = j.append(batch.iter().map(Vec::as_slice), 0).unwrap();
        assert_eq!(out.pruned, 10);
        assert_eq!(ids(&j), vec![13, 14, 15]);
    }

    #[test]
    fn age_limit_drops_events_older_than_max_age() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, Some(60));
        j.append([body(1).as_slice()], 0).unwrap();
        j.append([body(2).as_slice()], 30 * SEC).unwrap();
        j.append([body(3).as_slice()], 60 * SEC).unwrap();
        assert_eq!(ids(&j), vec![1, 2, 3], "nothing is older than 60 s yet");
        assert_eq!(j.prune(61 * SEC).unwrap(), 1);
        assert_eq!(ids(&j), vec![2, 3]);
        assert_eq!(j.prune(200 * SEC).unwrap(), 2);
        assert!(ids(&j).is_empty());
        assert_eq!(j.bytes().unwrap(), 0);
        // Ids are never reused once everything is pruned.
        assert_eq!(
            j.append([body(4).as_slice()], 200 * SEC).unwrap().first_id,
            4
        );
        assert_eq!(j.first_id().unwrap(), 4);
    }

    #[test]
    fn no_age_limit_keeps_old_events() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, None);
        j.append([body(1).as_slice()], 0).unwrap();
        assert_eq!(j.prune(i64::MAX).unwrap(), 0);
        assert_eq!(ids(&j), vec![1]);
    }

    #[test]
    fn time_lookup_finds_the_first_event_at_or_after() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, None);
        for t in [10, 20, 20, 30, 40] {
            j.append([body(0).as_slice()], t).unwrap();
        }
        let cases = [(0, 1), (10, 1), (11, 2), (20, 2), (21, 4), (40, 5), (41, 6)];
        for (t, want) in cases {
            assert_eq!(j.id_at_time(t).unwrap(), want, "time {t}");
        }
    }

    #[test]
    fn a_clock_stepping_back_is_clamped() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, None);
        j.append([body(0).as_slice()], 50).unwrap();
        let out = j.append([body(1).as_slice()], 10).unwrap();
        assert_eq!(out.time_us, 50);
        assert_eq!(j.id_at_time(50).unwrap(), 1);
    }

    #[test]
    fn reads_stop_at_the_count_byte_and_id_limits() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir, u64::MAX, None);
        let batch: Vec<Vec<u8>> = (0..10).map(body).collect();
        j.append(batch.iter().map(Vec::as_slice), 0).unwrap();
        assert_eq!(j.read(3, 100, 4, usize::MAX).unwrap().len(), 4);
        assert_eq!(j.read(3, 5, 100, usize::MAX).unwrap().len(), 2);
        assert_eq!(j.read(1, 100, 100, 1).unwrap().len(), 1);
        assert!(j.read(11, 100, 100, usize::MAX).unwrap().is_empty());
        assert!(j.read(5, 5, 100, usize::MAX).unwrap().is_empty());
    }

    #[test]
    fn a_file_that_is_not_a_journal_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.redb");
        std::fs::write(&path, b"not a database at all").unwrap();
        let r = Journal::open(
            &path,
            Retention {
                max_bytes: 1,
                max_age: None,
            },
        );
        let Err(e) = r else {
            panic!("a file that is not a journal opened as one");
        };
        assert!(
            matches!(&e, Error::Db { path: p, .. } if *p == path),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("event journal database {}: ", path.display())),
            "the error names the file: {e}"
        );
    }
}
