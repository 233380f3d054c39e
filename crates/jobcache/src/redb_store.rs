//! [`JobStore`] on one redb file.
//!
//! Tables (schema version [`SCHEMA_VERSION`], recorded in `meta`):
//!
//! | table     | key                 | value                                        |
//! |-----------|---------------------|----------------------------------------------|
//! | `jobs`    | jid                 | msgpack `[created, has_load, load, minions]` |
//! | `returns` | (jid, minion id)    | msgpack `[arrival seq, return load]`         |
//! | `expiry`  | (created, jid)      | `()` — retention index                       |
//! | `meta`    | name                | `u64` (`schema_version`, `next_seq`)         |
//!
//! Keying returns by (jid, minion id) makes the duplicate check one lookup and a job's
//! returns one range scan; the global `next_seq` counter gives arrival order.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard};

use redb::{Database, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction};
use rmpv::Value;

use crate::value::{decode, encode};
use crate::{Error, Job, JobStore, JobSummary, MinionReturn, NewReturn, Result, ReturnStatus};

const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const RETURNS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("returns");
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Returns stored but still owed to the `local_cache` tree ([`NewReturn::owed`]).
const OWED: TableDefinition<(&str, &str), ()> = TableDefinition::new("owed_to_tree");

/// The on-disk layout version this code reads and writes.
const SCHEMA_VERSION: u64 = 1;
const META_SCHEMA: &str = "schema_version";
const META_NEXT_SEQ: &str = "next_seq";

/// Opens the database file (the daemon's: the file at the store's path).
type Opener = Box<dyn Fn() -> Result<Database> + Send + Sync>;

/// The master's job cache in a redb database (normally `cachedir/jobs.redb`).
///
/// Every write is one durable transaction (fsync on commit), so a store reopened after a
/// crash or restart holds every job and return whose call returned `Ok`. Readers use MVCC
/// snapshots and never block the writer. One process at a time may open the file.
///
/// After an I/O error redb refuses every later transaction until the database is opened
/// again, so the store then closes it and reopens it on the next call: once the file
/// system is fixed (space freed, made writable again), the same write succeeds. Every
/// error names the file.
pub struct RedbJobStore {
    /// `None` after an I/O error, until the next call reopens it.
    db: RwLock<Option<Database>>,
    path: PathBuf,
    open: Opener,
}

/// A decoded `jobs` record.
struct JobRecord {
    created: u64,
    load: Option<Value>,
    minions: Vec<String>,
}

/// redb's page cache for this file. redb's default (1 GiB) keeps growing with what is
/// written: at 10,000 minions the job store's pages were ~30 MiB of the master's heap after ten
/// publishes, and more with each (heaptrack). Reads here are mostly of recent entries and
/// the OS page cache holds the file anyway; 4 MiB instead of 16 took the master's peak RSS
/// at 10,000 minions from ~150 to 128 MiB with the same CPU per publish.
const CACHE_BYTES: usize = 4 << 20;

impl RedbJobStore {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// The whole file is integrity-checked on open, so a damaged or foreign file is an
    /// [`Error::Db`] rather than a later panic; this reads the file once at startup.
    /// A database written with another schema version is [`Error::UnsupportedSchema`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = path.clone();
        Self::open_with(
            path,
            Box::new(move || {
                Ok(Database::builder()
                    .set_check_integrity_on_open(true)
                    .set_cache_size(CACHE_BYTES)
                    .create(&file)?)
            }),
        )
    }

    /// A store on the database `open` opens, reported as `path`.
    fn open_with(path: PathBuf, open: Opener) -> Result<Self> {
        let db = open_schema(&open).map_err(|e| e.at(&path))?;
        Ok(RedbJobStore {
            db: RwLock::new(Some(db)),
            path,
            open,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_db(&self) -> RwLockReadGuard<'_, Option<Database>> {
        self.db.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the open database (reopening it first after an I/O error). An error
    /// leaves with the file's path; an I/O error closes the database for the next call to
    /// reopen.
    fn with_db<T>(&self, f: impl FnOnce(&Database) -> Result<T>) -> Result<T> {
        if self.read_db().is_none() {
            let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
            if db.is_none() {
                *db = Some(open_schema(&self.open).map_err(|e| e.at(&self.path))?);
                tracing::info!(path = %self.path.display(), "Job database reopened");
            }
        }
        let out = match self.read_db().as_ref() {
            Some(db) => f(db),
            // Closed by another thread's I/O error in between: this call fails like it.
            None => Err(Error::from(redb::Error::PreviousIo)),
        };
        out.map_err(|e| {
            let e = e.at(&self.path);
            if matches!(
                e,
                Error::Db {
                    source: redb::Error::Io(_) | redb::Error::PreviousIo,
                    ..
                }
            ) {
                *self.db.write().unwrap_or_else(|e| e.into_inner()) = None;
            }
            e
        })
    }
}

impl Error {
    /// Names the database file `path` in an error of a call on it: a database error or a
    /// schema mismatch (made without their file), a corrupt record (made with its table
    /// and key only).
    fn at(self, path: &Path) -> Error {
        match self {
            Error::Db { path: p, source } if p.as_os_str().is_empty() => Error::Db {
                path: path.to_path_buf(),
                source,
            },
            Error::UnsupportedSchema {
                path: p,
                found,
                expected,
            } if p.as_os_str().is_empty() => Error::UnsupportedSchema {
                path: path.to_path_buf(),
                found,
                expected,
            },
            Error::Corrupt { what, reason } => Error::Corrupt {
                what: format!("{} {what}", path.display()),
                reason,
            },
            other => other,
        }
    }
}

/// Opens the database and checks (or records) its schema version.
fn open_schema(open: &Opener) -> Result<Database> {
    let db = open()?;
    let txn = db.begin_write()?;
    {
        txn.open_table(JOBS)?;
        txn.open_table(RETURNS)?;
        txn.open_table(EXPIRY)?;
        txn.open_table(OWED)?;
        let mut meta = txn.open_table(META)?;
        let found = meta.get(META_SCHEMA)?.map(|g| g.value());
        match found {
            None => {
                meta.insert(META_SCHEMA, SCHEMA_VERSION)?;
            }
            Some(SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(Error::UnsupportedSchema {
                    path: PathBuf::new(),
                    found,
                    expected: SCHEMA_VERSION,
                })
            }
        }
    }
    txn.commit()?;
    Ok(db)
}

/// The tables one return write touches, opened once per transaction.
struct ReturnTables<'t> {
    jobs: Table<'t, &'static str, &'static [u8]>,
    returns: Table<'t, (&'static str, &'static str), &'static [u8]>,
    expiry: Table<'t, (u64, &'static str), ()>,
    owed: Table<'t, (&'static str, &'static str), ()>,
    next_seq: u64,
    /// Jobs known to have a record in this transaction: a batch holds many returns of the
    /// same job, and reading its record (which lists every targeted minion, ~150 KB at
    /// 10,000 minions) once per return cost more than storing the return.
    known_jobs: HashSet<String>,
}

impl<'t> ReturnTables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self> {
        let next_seq = txn
            .open_table(META)?
            .get(META_NEXT_SEQ)?
            .map_or(0, |g| g.value());
        Ok(ReturnTables {
            jobs: txn.open_table(JOBS)?,
            returns: txn.open_table(RETURNS)?,
            expiry: txn.open_table(EXPIRY)?,
            owed: txn.open_table(OWED)?,
            next_seq,
            known_jobs: HashSet::new(),
        })
    }

    fn add(&mut self, r: &NewReturn<'_>, now: u64) -> Result<ReturnStatus> {
        let status = self.add_row(r.jid, r.minion_id, r.load, now)?;
        if r.owed && status == ReturnStatus::Stored {
            self.owed.insert((r.jid, r.minion_id), ())?;
        }
        Ok(status)
    }

    fn add_row(
        &mut self,
        jid: &str,
        minion_id: &str,
        load: &Value,
        now: u64,
    ) -> Result<ReturnStatus> {
        if self.returns.get((jid, minion_id))?.is_some() {
            return Ok(ReturnStatus::Duplicate);
        }
        if !self.known_jobs.contains(jid) {
            if self.jobs.get(jid)?.is_none() {
                let record = JobRecord {
                    created: now,
                    load: None,
                    minions: Vec::new(),
                };
                self.jobs.insert(jid, encode_job(&record)?.as_slice())?;
                self.expiry.insert((now, jid), ())?;
            }
            self.known_jobs.insert(jid.to_owned());
        }
        let seq = self.next_seq;
        self.next_seq = seq.checked_add(1).ok_or_else(|| Error::Corrupt {
            what: format!("meta[{META_NEXT_SEQ}]"),
            reason: "return sequence counter exhausted".into(),
        })?;
        let bytes = encode(&Value::Array(vec![Value::from(seq), load.clone()]))?;
        self.returns.insert((jid, minion_id), bytes.as_slice())?;
        Ok(ReturnStatus::Stored)
    }

    fn finish(self, txn: &WriteTransaction) -> Result<()> {
        txn.open_table(META)?.insert(META_NEXT_SEQ, self.next_seq)?;
        Ok(())
    }
}

impl JobStore for RedbJobStore {
    fn save_load(&self, jid: &str, load: &Value, minions: &[String], now: u64) -> Result<()> {
        self.with_db(|db| {
            let txn = db.begin_write()?;
            {
                let mut jobs = txn.open_table(JOBS)?;
                let existing = match jobs.get(jid)? {
                    Some(g) => Some(decode_job(jid, g.value())?),
                    None => None,
                };
                let record = match existing {
                    Some(old) => JobRecord {
                        created: old.created,
                        load: Some(load.clone()),
                        minions: merge_minions(old.minions, minions),
                    },
                    None => {
                        txn.open_table(EXPIRY)?.insert((now, jid), ())?;
                        JobRecord {
                            created: now,
                            load: Some(load.clone()),
                            minions: merge_minions(Vec::new(), minions),
                        }
                    }
                };
                jobs.insert(jid, encode_job(&record)?.as_slice())?;
            }
            txn.commit()?;
            Ok(())
        })
    }

    fn add_return(
        &self,
        jid: &str,
        minion_id: &str,
        load: &Value,
        now: u64,
    ) -> Result<ReturnStatus> {
        self.with_db(|db| {
            let txn = db.begin_write()?;
            let mut tables = ReturnTables::open(&txn)?;
            let row = NewReturn {
                jid,
                minion_id,
                load,
                owed: false,
            };
            let status = tables.add(&row, now)?;
            tables.finish(&txn)?;
            txn.commit()?;
            Ok(status)
        })
    }

    /// One transaction (one fsync) for the whole batch.
    fn add_returns(&self, returns: &[NewReturn<'_>], now: u64) -> Result<Vec<ReturnStatus>> {
        self.with_db(|db| {
            let txn = db.begin_write()?;
            let mut tables = ReturnTables::open(&txn)?;
            let statuses = returns
                .iter()
                .map(|r| tables.add(r, now))
                .collect::<Result<Vec<_>>>()?;
            tables.finish(&txn)?;
            txn.commit()?;
            Ok(statuses)
        })
    }

    fn owed(&self) -> Result<Vec<(String, MinionReturn)>> {
        self.with_db(|db| {
            let txn = db.begin_read()?;
            let owed = txn.open_table(OWED)?;
            let returns = txn.open_table(RETURNS)?;
            let mut out = Vec::new();
            for entry in owed.iter()? {
                let (key, _) = entry?;
                let (jid, minion_id) = key.value();
                // A job removed by retention owes nothing any more.
                if let Some(value) = returns.get((jid, minion_id))? {
                    let (_, load) = decode_return(jid, minion_id, value.value())?;
                    out.push((
                        jid.to_string(),
                        MinionReturn {
                            minion_id: minion_id.to_string(),
                            load,
                        },
                    ));
                }
            }
            Ok(out)
        })
    }

    fn settle_owed(&self, done: &[(&str, &str)]) -> Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        self.with_db(|db| {
            let mut txn = db.begin_write()?;
            txn.set_durability(redb::Durability::None)?;
            {
                let mut owed = txn.open_table(OWED)?;
                for key in done {
                    owed.remove(*key)?;
                }
            }
            txn.commit()?;
            Ok(())
        })
    }

    fn get_load(&self, jid: &str) -> Result<Option<Job>> {
        self.with_db(|db| {
            let txn = db.begin_read()?;
            let jobs = txn.open_table(JOBS)?;
            let Some(guard) = jobs.get(jid)? else {
                return Ok(None);
            };
            let record = decode_job(jid, guard.value())?;
            Ok(record.load.map(|load| Job {
                jid: jid.to_string(),
                load,
                minions: record.minions,
                created: record.created,
            }))
        })
    }

    fn get_returns(&self, jid: &str) -> Result<Vec<MinionReturn>> {
        self.with_db(|db| {
            let txn = db.begin_read()?;
            let returns = txn.open_table(RETURNS)?;
            let mut out = Vec::new();
            for entry in returns.range((jid, "")..)? {
                let (key, value) = entry?;
                let (key_jid, minion_id) = key.value();
                if key_jid != jid {
                    break;
                }
                let (seq, load) = decode_return(jid, minion_id, value.value())?;
                out.push((
                    seq,
                    MinionReturn {
                        minion_id: minion_id.to_string(),
                        load,
                    },
                ));
            }
            out.sort_by_key(|(seq, _)| *seq);
            Ok(out.into_iter().map(|(_, r)| r).collect())
        })
    }

    fn list_jobs(&self) -> Result<Vec<JobSummary>> {
        self.with_db(|db| {
            let txn = db.begin_read()?;
            let jobs = txn.open_table(JOBS)?;
            let mut out = Vec::new();
            for entry in jobs.iter()? {
                let (key, value) = entry?;
                let jid = key.value();
                let record = decode_job(jid, value.value())?;
                if let Some(load) = &record.load {
                    out.push(JobSummary::from_load(jid, record.created, load));
                }
            }
            Ok(out)
        })
    }

    fn clean_expired(&self, now: u64, keep_jobs_seconds: u64) -> Result<usize> {
        if keep_jobs_seconds == 0 {
            return Ok(0);
        }
        // Expired means `now - created > keep`, i.e. `created < now - keep`.
        let Some(cutoff) = now.checked_sub(keep_jobs_seconds) else {
            return Ok(0);
        };
        self.with_db(|db| {
            let txn = db.begin_write()?;
            let removed;
            {
                let mut expiry = txn.open_table(EXPIRY)?;
                let mut jobs = txn.open_table(JOBS)?;
                let mut returns = txn.open_table(RETURNS)?;
                let mut owed = txn.open_table(OWED)?;
                let mut expired = Vec::new();
                for entry in expiry.range(..(cutoff, ""))? {
                    let (key, _) = entry?;
                    let (created, jid) = key.value();
                    expired.push((created, jid.to_string()));
                }
                for (created, jid) in &expired {
                    expiry.remove((*created, jid.as_str()))?;
                    jobs.remove(jid.as_str())?;
                    let mut minions = Vec::new();
                    for entry in returns.range((jid.as_str(), "")..)? {
                        let (key, _) = entry?;
                        let (key_jid, minion_id) = key.value();
                        if key_jid != jid {
                            break;
                        }
                        minions.push(minion_id.to_string());
                    }
                    for minion_id in &minions {
                        returns.remove((jid.as_str(), minion_id.as_str()))?;
                        owed.remove((jid.as_str(), minion_id.as_str()))?;
                    }
                }
                removed = expired.len();
            }
            txn.commit()?;
            Ok(removed)
        })
    }
}

/// Sorted union of `old` and `new`, as Salt's `save_minions`.
fn merge_minions(mut old: Vec<String>, new: &[String]) -> Vec<String> {
    old.extend(new.iter().cloned());
    old.sort();
    old.dedup();
    old
}

fn encode_job(record: &JobRecord) -> Result<Vec<u8>> {
    encode(&Value::Array(vec![
        Value::from(record.created),
        Value::Boolean(record.load.is_some()),
        record.load.clone().unwrap_or(Value::Nil),
        Value::Array(
            record
                .minions
                .iter()
                .map(|m| Value::from(m.as_str()))
                .collect(),
        ),
    ]))
}

fn decode_job(jid: &str, bytes: &[u8]) -> Result<JobRecord> {
    let what = || format!("jobs[{jid}]");
    let corrupt = |reason: &str| Error::Corrupt {
        what: what(),
        reason: reason.to_string(),
    };
    let Value::Array(items) = decode(bytes, &what)? else {
        return Err(corrupt("record is not an array"));
    };
    let [created, has_load, load, minions]: [Value; 4] = items
        .try_into()
        .map_err(|_| corrupt("record does not have 4 fields"))?;
    let created = created
        .as_u64()
        .ok_or_else(|| corrupt("creation time is not an unsigned integer"))?;
    let load = match has_load {
        Value::Boolean(true) => Some(load),
        Value::Boolean(false) => None,
        _ => return Err(corrupt("load flag is not a boolean")),
    };
    let Value::Array(minions) = minions else {
        return Err(corrupt("minion list is not an array"));
    };
    let minions = minions
        .into_iter()
        .map(|m| match m {
            Value::String(s) => s
                .into_str()
                .ok_or_else(|| corrupt("minion id is not UTF-8")),
            _ => Err(corrupt("minion id is not a string")),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(JobRecord {
        created,
        load,
        minions,
    })
}

fn decode_return(jid: &str, minion_id: &str, bytes: &[u8]) -> Result<(u64, Value)> {
    let what = || format!("returns[{jid}, {minion_id}]");
    let corrupt = |reason: &str| Error::Corrupt {
        what: what(),
        reason: reason.to_string(),
    };
    let Value::Array(items) = decode(bytes, &what)? else {
        return Err(corrupt("record is not an array"));
    };
    let [seq, load]: [Value; 2] = items
        .try_into()
        .map_err(|_| corrupt("record does not have 2 fields"))?;
    let seq = seq
        .as_u64()
        .ok_or_else(|| corrupt("sequence number is not an unsigned integer"))?;
    Ok((seq, load))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::text;
    use std::sync::Arc;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(pairs.iter().map(|(k, v)| (text(k), v.clone())).collect())
    }

    fn pub_load(jid: &str, fun: &str) -> Value {
        map(&[
            ("jid", text(jid)),
            ("fun", text(fun)),
            ("arg", Value::Array(vec![])),
            ("tgt", text("*")),
            ("tgt_type", text("glob")),
            ("user", text("root")),
        ])
    }

    fn ret_load(jid: &str, id: &str, ret: Value) -> Value {
        map(&[
            ("id", text(id)),
            ("jid", text(jid)),
            ("fun", text("test.ping")),
            ("return", ret),
            ("retcode", Value::from(0)),
            ("success", Value::Boolean(true)),
        ])
    }

    fn minions(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn store() -> (tempfile::TempDir, RedbJobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbJobStore::open(dir.path().join("jobs.redb")).unwrap();
        (dir, store)
    }

    const JID: &str = "20240101120000123456";

    #[test]
    fn load_and_returns_round_trip() {
        let (_dir, store) = store();
        let load = pub_load(JID, "test.ping");
        store
            .save_load(JID, &load, &minions(&["web2", "web1"]), 100)
            .unwrap();
        let job = store.get_load(JID).unwrap().unwrap();
        assert_eq!(job.load, load);
        assert_eq!(job.minions, minions(&["web1", "web2"]));
        assert_eq!(job.created, 100);

        // Arrival order is kept, not minion-id order.
        for id in ["web2", "web1"] {
            let status = store.add_return(JID, id, &ret_load(JID, id, Value::Boolean(true)), 101);
            assert_eq!(status.unwrap(), ReturnStatus::Stored);
        }
        let rets = store.get_returns(JID).unwrap();
        let ids: Vec<_> = rets.iter().map(|r| r.minion_id.as_str()).collect();
        assert_eq!(ids, ["web2", "web1"]);
        assert_eq!(rets[0].load, ret_load(JID, "web2", Value::Boolean(true)));
    }

    #[test]
    fn unknown_jid_has_no_load_and_no_returns() {
        let (_dir, store) = store();
        assert_eq!(store.get_load("nope").unwrap(), None);
        assert!(store.get_returns("nope").unwrap().is_empty());
        assert!(store.list_jobs().unwrap().is_empty());
    }

    #[test]
    fn returns_of_one_jid_do_not_leak_into_a_prefix_jid() {
        let (_dir, store) = store();
        let a = "2024010112000012345";
        let b = "20240101120000123456";
        let _ = store.add_return(b, "m", &Value::from(1), 0).unwrap();
        let _ = store.add_return(a, "m", &Value::from(2), 0).unwrap();
        assert_eq!(store.get_returns(a).unwrap()[0].load, Value::from(2));
        assert_eq!(store.get_returns(b).unwrap().len(), 1);
    }

    #[test]
    fn duplicate_return_keeps_the_first() {
        let (_dir, store) = store();
        let first = ret_load(JID, "web1", text("first"));
        let second = ret_load(JID, "web1", text("second"));
        assert_eq!(
            store.add_return(JID, "web1", &first, 1).unwrap(),
            ReturnStatus::Stored
        );
        assert_eq!(
            store.add_return(JID, "web1", &second, 2).unwrap(),
            ReturnStatus::Duplicate
        );
        let rets = store.get_returns(JID).unwrap();
        assert_eq!(rets.len(), 1);
        assert_eq!(rets[0].load, first);
    }

    #[test]
    fn owed_returns_are_listed_until_settled_or_expired_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.redb");
        let store = RedbJobStore::open(&path).unwrap();
        let (one, two) = (Value::from(1), Value::from(2));
        let rows = [
            NewReturn {
                jid: JID,
                minion_id: "a",
                load: &one,
                owed: true,
            },
            NewReturn {
                jid: JID,
                minion_id: "b",
                load: &two,
                owed: false,
            },
            // A duplicate owes nothing: its first copy was owed already.
            NewReturn {
                jid: JID,
                minion_id: "a",
                load: &two,
                owed: true,
            },
            NewReturn {
                jid: "20240101120000999999",
                minion_id: "c",
                load: &two,
                owed: true,
            },
        ];
        store.add_returns(&rows, 100).unwrap();
        drop(store);
        let store = RedbJobStore::open(&path).unwrap();
        let owed = |store: &RedbJobStore| -> Vec<(String, String, Value)> {
            let mut v: Vec<_> = store
                .owed()
                .unwrap()
                .into_iter()
                .map(|(jid, r)| (jid, r.minion_id, r.load))
                .collect();
            v.sort_by(|a, b| a.1.cmp(&b.1));
            v
        };
        assert_eq!(
            owed(&store),
            [
                (JID.to_string(), "a".to_string(), one.clone()),
                ("20240101120000999999".to_string(), "c".to_string(), two)
            ]
        );
        store.settle_owed(&[("20240101120000999999", "c")]).unwrap();
        assert_eq!(owed(&store), [(JID.to_string(), "a".to_string(), one)]);
        store.clean_expired(1_000, 10).unwrap();
        assert!(owed(&store).is_empty(), "retention takes what a job owed");
    }

    #[test]
    fn batch_returns_report_duplicates_within_and_across_batches() {
        let (_dir, store) = store();
        let v = Value::from(1);
        let r = |minion_id| NewReturn {
            jid: JID,
            minion_id,
            load: &v,
            owed: false,
        };
        let got = store.add_returns(&[r("a"), r("b"), r("a")], 5).unwrap();
        use ReturnStatus::{Duplicate, Stored};
        assert_eq!(got, [Stored, Stored, Duplicate]);
        let got = store.add_returns(&[r("b"), r("c")], 6).unwrap();
        assert_eq!(got, [Duplicate, Stored]);
        let ids: Vec<_> = store
            .get_returns(JID)
            .unwrap()
            .into_iter()
            .map(|r| r.minion_id)
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn saving_a_load_again_merges_minions_and_keeps_created() {
        let (_dir, store) = store();
        store
            .save_load(JID, &pub_load(JID, "a.b"), &minions(&["m2", "m1"]), 10)
            .unwrap();
        let load2 = pub_load(JID, "c.d");
        store
            .save_load(JID, &load2, &minions(&["m3", "m1"]), 20)
            .unwrap();
        let job = store.get_load(JID).unwrap().unwrap();
        assert_eq!(job.load, load2);
        assert_eq!(job.minions, minions(&["m1", "m2", "m3"]));
        assert_eq!(job.created, 10);
    }

    #[test]
    fn return_before_load_is_kept_and_load_fills_in_later() {
        let (_dir, store) = store();
        let _ = store.add_return(JID, "m1", &Value::from(1), 50).unwrap();
        assert_eq!(store.get_load(JID).unwrap(), None);
        assert!(store.list_jobs().unwrap().is_empty());
        store
            .save_load(JID, &pub_load(JID, "x.y"), &minions(&["m1"]), 60)
            .unwrap();
        let job = store.get_load(JID).unwrap().unwrap();
        assert_eq!(job.created, 50);
        assert_eq!(store.get_returns(JID).unwrap().len(), 1);
    }

    #[test]
    fn list_jobs_summarises_jobs_in_jid_order() {
        let (_dir, store) = store();
        let j1 = "20240101120000000001";
        let j2 = "20240101120000000002";
        store
            .save_load(j2, &pub_load(j2, "cmd.run"), &[], 1)
            .unwrap();
        store
            .save_load(j1, &pub_load(j1, "test.ping"), &[], 2)
            .unwrap();
        let jobs = store.list_jobs().unwrap();
        let got: Vec<_> = jobs
            .iter()
            .map(|s| (s.jid.as_str(), s.function.clone()))
            .collect();
        assert_eq!(got, [(j1, text("test.ping")), (j2, text("cmd.run"))]);
        assert_eq!(jobs[0].created, 2);
    }

    #[test]
    fn clean_expired_follows_keep_jobs_seconds() {
        // (created, now, keep, removed?) — removed when now - created > keep; keep 0 = forever.
        let cases = [
            (100, 200, 50, true),
            (100, 150, 50, false),
            (100, 151, 50, true),
            (100, 10_000, 0, false),
            (100, 40, 50, false),
            (100, 90, 5, false),
        ];
        for (created, now, keep, removed) in cases {
            let (_dir, store) = store();
            store
                .save_load(JID, &pub_load(JID, "f.f"), &minions(&["m"]), created)
                .unwrap();
            let _ = store
                .add_return(JID, "m", &Value::from(1), created + 1)
                .unwrap();
            let n = store.clean_expired(now, keep).unwrap();
            assert_eq!(n, usize::from(removed), "case {created} {now} {keep}");
            assert_eq!(store.get_load(JID).unwrap().is_none(), removed);
            assert_eq!(store.get_returns(JID).unwrap().is_empty(), removed);
        }
    }

    #[test]
    fn clean_expired_removes_only_old_jobs() {
        let (_dir, store) = store();
        let old = "20240101000000000001";
        let new = "20240101000000000002";
        store
            .save_load(old, &pub_load(old, "a.a"), &[], 1_000)
            .unwrap();
        store
            .save_load(new, &pub_load(new, "b.b"), &[], 5_000)
            .unwrap();
        for jid in [old, new] {
            let _ = store.add_return(jid, "m1", &Value::from(1), 5_000).unwrap();
            let _ = store.add_return(jid, "m2", &Value::from(2), 5_000).unwrap();
        }
        // An orphan return (no load) ages from its own arrival.
        let _ = store
            .add_return("orphan", "m1", &Value::from(3), 1_500)
            .unwrap();
        assert_eq!(store.clean_expired(6_000, 3_000).unwrap(), 2);
        assert!(store.get_load(old).unwrap().is_none());
        assert!(store.get_returns(old).unwrap().is_empty());
        assert!(store.get_returns("orphan").unwrap().is_empty());
        assert!(store.get_load(new).unwrap().is_some());
        assert_eq!(store.get_returns(new).unwrap().len(), 2);
        assert_eq!(store.clean_expired(6_000, 3_000).unwrap(), 0);
        // A re-created jid starts a fresh clock.
        let _ = store.add_return(old, "m1", &Value::from(9), 6_000).unwrap();
        assert_eq!(store.get_returns(old).unwrap().len(), 1);
    }

    #[test]
    fn store_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.redb");
        let load = pub_load(JID, "state.apply");
        {
            let store = RedbJobStore::open(&path).unwrap();
            store
                .save_load(JID, &load, &minions(&["a", "b"]), 7)
                .unwrap();
            let _ = store.add_return(JID, "b", &Value::from("rb"), 8).unwrap();
            let _ = store.add_return(JID, "a", &Value::from("ra"), 9).unwrap();
        }
        let store = RedbJobStore::open(&path).unwrap();
        assert_eq!(store.path(), path);
        let job = store.get_load(JID).unwrap().unwrap();
        assert_eq!(
            (job.load, job.minions, job.created),
            (load, minions(&["a", "b"]), 7)
        );
        let rets: Vec<_> = store
            .get_returns(JID)
            .unwrap()
            .into_iter()
            .map(|r| (r.minion_id, r.load))
            .collect();
        assert_eq!(
            rets,
            [
                ("b".to_string(), Value::from("rb")),
                ("a".to_string(), Value::from("ra"))
            ]
        );
        // Arrival order continues across the reopen.
        let _ = store.add_return(JID, "c", &Value::from("rc"), 10).unwrap();
        assert_eq!(store.get_returns(JID).unwrap()[2].minion_id, "c");
        assert_eq!(store.clean_expired(100, 10).unwrap(), 1);
    }

    #[test]
    fn non_utf8_strings_survive_the_store() {
        let (_dir, store) = store();
        let raw = decode(&[0xa3, 0xff, 0xfe, b'x'], &|| "raw".into()).unwrap();
        assert!(raw.as_str().is_none(), "test value must not be UTF-8");
        let bin = Value::Binary(vec![0, 1, 2]);
        let load = map(&[("return", raw.clone()), ("blob", bin.clone())]);
        let _ = store.add_return(JID, "m", &load, 0).unwrap();
        assert_eq!(store.get_returns(JID).unwrap()[0].load, load);
    }

    #[test]
    fn unstorable_values_are_refused_and_leave_nothing_behind() {
        let (_dir, store) = store();
        let mut deep = Value::Nil;
        for _ in 0..200 {
            deep = Value::Array(vec![deep]);
        }
        let got = store.add_return(JID, "m", &deep, 0);
        assert!(matches!(got, Err(Error::Unstorable(_))), "{got:?}");
        let got = store.save_load(JID, &deep, &[], 0);
        assert!(matches!(got, Err(Error::Unstorable(_))), "{got:?}");
        assert!(store.get_returns(JID).unwrap().is_empty());
        assert_eq!(store.get_load(JID).unwrap(), None);
        // The failed calls did not even leave a load-less job behind.
        assert_eq!(store.clean_expired(10, 1).unwrap(), 0);
    }

    #[test]
    fn readers_run_alongside_a_writer() {
        let (_dir, store) = store();
        let store = Arc::new(store);
        store.save_load(JID, &pub_load(JID, "t.t"), &[], 0).unwrap();
        let writer = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..50 {
                    let id = format!("m{i:02}");
                    let _ = store.add_return(JID, &id, &Value::from(i), 1).unwrap();
                }
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..50 {
                        let n = store.get_returns(JID).unwrap().len();
                        assert!(n >= last, "a reader went backwards");
                        last = n;
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(store.get_returns(JID).unwrap().len(), 50);
    }

    /// Writes raw bytes into a table behind the store's back.
    fn poke<K: redb::Key + 'static>(
        path: &Path,
        table: TableDefinition<K, &[u8]>,
        key: K::SelfType<'_>,
        bytes: &[u8],
    ) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(table).unwrap().insert(key, bytes).unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn malformed_records_are_errors() {
        let bad_jobs: &[&[u8]] = &[
            b"",
            &[0xc1],                                     // never-used msgpack byte
            &[0x93, 0x01, 0xc3, 0xc0],                   // 3 fields
            &[0x94, 0xff, 0xc3, 0xc0, 0x90],             // negative created
            &[0x94, 0x01, 0x01, 0xc0, 0x90],             // flag not bool
            &[0x94, 0x01, 0xc3, 0xc0, 0x01],             // minions not array
            &[0x94, 0x01, 0xc3, 0xc0, 0x91, 0x01],       // minion not string
            &[0x94, 0x01, 0xc3, 0xc0, 0x91, 0xa1, 0xff], // minion not UTF-8
            &[0x94, 0x01, 0xc3, 0xc0, 0x90, 0x00],       // trailing byte
            &[0xa3, b'a', b'b', b'c'],                   // not an array
        ];
        for bytes in bad_jobs {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("jobs.redb");
            drop(RedbJobStore::open(&path).unwrap());
            poke(&path, JOBS, JID, bytes);
            let store = RedbJobStore::open(&path).unwrap();
            let got = store.get_load(JID);
            let file = path.display().to_string();
            assert!(
                matches!(&got, Err(Error::Corrupt { what, .. }) if *what == format!("{file} jobs[{JID}]")),
                "{bytes:?}: {got:?}"
            );
            assert!(matches!(store.list_jobs(), Err(Error::Corrupt { .. })));
            let got = store.save_load(JID, &Value::Nil, &[], 0);
            assert!(matches!(got, Err(Error::Corrupt { .. })), "{bytes:?}");
        }

        let bad_returns: &[&[u8]] = &[b"", &[0x91, 0x01], &[0x92, 0xa1, b'x', 0xc0], &[0x01]];
        for bytes in bad_returns {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("jobs.redb");
            drop(RedbJobStore::open(&path).unwrap());
            poke(&path, RETURNS, (JID, "m"), bytes);
            let store = RedbJobStore::open(&path).unwrap();
            let got = store.get_returns(JID);
            assert!(
                matches!(got, Err(Error::Corrupt { .. })),
                "{bytes:?}: {got:?}"
            );
        }
    }

    #[test]
    fn foreign_or_damaged_files_fail_to_open() {
        let dir = tempfile::tempdir().unwrap();

        let garbage = dir.path().join("garbage.redb");
        std::fs::write(&garbage, vec![0x5a; 64 * 1024]).unwrap();
        assert!(matches!(
            RedbJobStore::open(&garbage),
            Err(Error::Db { .. })
        ));

        // A good database with its tail cut off, then one with bytes flipped in the middle.
        let good = dir.path().join("good.redb");
        {
            let store = RedbJobStore::open(&good).unwrap();
            for i in 0..200 {
                let jid = format!("2024010112000000{i:04}");
                store
                    .save_load(&jid, &pub_load(&jid, "x.y"), &[], 1)
                    .unwrap();
            }
        }
        let bytes = std::fs::read(&good).unwrap();
        let truncated = dir.path().join("truncated.redb");
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
        assert!(RedbJobStore::open(&truncated).is_err());
        let flipped = dir.path().join("flipped.redb");
        let mut damaged = bytes.clone();
        let mid = damaged.len() / 2;
        for b in &mut damaged[mid..mid + 4096] {
            *b ^= 0xa5;
        }
        std::fs::write(&flipped, &damaged).unwrap();
        if let Ok(store) = RedbJobStore::open(&flipped) {
            // Damage that only hit free pages is harmless; every read must still not panic.
            let _ = store.list_jobs();
        }
    }

    #[test]
    fn database_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.redb");
        std::fs::write(&garbage, vec![0x5a; 64 * 1024]).unwrap();
        let Err(e) = RedbJobStore::open(&garbage) else {
            panic!("a garbage file opened as a job database");
        };
        assert!(
            e.to_string()
                .starts_with(&format!("job database {}: ", garbage.display())),
            "{e}"
        );
    }

    /// Storage that fails every write while `broken` is set, as a full or read-only file
    /// system does.
    #[derive(Debug)]
    struct Flaky {
        inner: Arc<redb::backends::InMemoryBackend>,
        broken: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Flaky {
        fn check(&self) -> std::io::Result<()> {
            if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(EROFS));
            }
            Ok(())
        }
    }

    /// Linux's "Read-only file system".
    const EROFS: i32 = 30;

    impl redb::StorageBackend for Flaky {
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.check()?;
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.check()?;
            self.inner.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write(offset, data)
        }
    }

    #[test]
    fn a_write_refused_by_the_storage_succeeds_once_the_storage_takes_writes_again() {
        let inner = Arc::new(redb::backends::InMemoryBackend::new());
        let broken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (i, b) = (inner.clone(), broken.clone());
        let store = RedbJobStore::open_with(
            PathBuf::from("/srv/cache/jobs.redb"),
            Box::new(move || {
                Ok(Database::builder().create_with_backend(Flaky {
                    inner: i.clone(),
                    broken: b.clone(),
                })?)
            }),
        )
        .unwrap();
        store.save_load(JID, &pub_load(JID, "t.t"), &[], 1).unwrap();

        broken.store(true, std::sync::atomic::Ordering::SeqCst);
        let ret = ret_load(JID, "m", Value::Boolean(true));
        let batch = [NewReturn {
            jid: JID,
            minion_id: "m",
            load: &ret,
            owed: false,
        }];
        let e = store.add_returns(&batch, 2).unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!(
            e.to_string()
                .starts_with("job database /srv/cache/jobs.redb: "),
            "{e}"
        );
        // Still refused, and still retryable, while the storage is broken.
        assert!(store.add_returns(&batch, 2).unwrap_err().is_retryable());

        broken.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            store.add_returns(&batch, 3).unwrap(),
            [ReturnStatus::Stored]
        );
        assert_eq!(store.get_returns(JID).unwrap()[0].load, ret);
        assert!(store.get_load(JID).unwrap().is_some(), "the load survived");
    }

    #[test]
    fn only_io_failures_are_retryable() {
        let (_dir, store) = store();
        let mut deep = Value::Nil;
        for _ in 0..200 {
            deep = Value::Array(vec![deep]);
        }
        assert!(!store
            .add_return(JID, "m", &deep, 0)
            .unwrap_err()
            .is_retryable());
        let io = Error::Io {
            path: PathBuf::from("/x"),
            source: std::io::Error::from_raw_os_error(EROFS),
        };
        assert!(io.is_retryable());
        assert!(!Error::InvalidMinionId("..".into()).is_retryable());
    }

    #[test]
    fn wrong_table_types_or_schema_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("typed.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            let other: TableDefinition<u64, u64> = TableDefinition::new("jobs");
            txn.open_table(other).unwrap().insert(1, 2).unwrap();
            txn.commit().unwrap();
        }
        assert!(matches!(RedbJobStore::open(&path), Err(Error::Db { .. })));

        let path = dir.path().join("future.redb");
        drop(RedbJobStore::open(&path).unwrap());
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META)
                .unwrap()
                .insert(META_SCHEMA, 99)
                .unwrap();
            txn.commit().unwrap();
        }
        assert!(matches!(
            RedbJobStore::open(&path),
            Err(Error::UnsupportedSchema {
                path: p,
                found: 99,
                expected: 1,
            }) if p == path
        ));
    }
}
