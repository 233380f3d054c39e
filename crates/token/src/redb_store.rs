//! [`TokenStore`] on one redb file (`cachedir/tokens.redb`).
//!
//! One table, `tokens`: key = token id, value = msgpack of the token dict
//! ([`Token::to_value`]). A record is trusted only after it decodes to a token whose
//! `token` field is its key.

use std::fs::{File, OpenOptions, Permissions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use halite_proto::value::{decode, encode};
use redb::backends::FileBackend;
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};

use crate::{is_token_id, Error, Result, Token, TokenStore};

/// The token database's file name inside the master's `cachedir`.
pub const TOKEN_FILE: &str = "tokens.redb";

const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");

/// redb's page cache for this file: tokens are small and few; the OS caches the file.
const CACHE_BYTES: usize = 1 << 20;

/// The master's eauth tokens in a redb database (normally `cachedir/`[`TOKEN_FILE`]).
///
/// Every write is one durable transaction, so a restarted master keeps every token whose
/// `put` returned `Ok`. Readers use MVCC snapshots and never wait for the writer. One
/// process at a time may open the file.
pub struct RedbTokenStore {
    db: Database,
    path: PathBuf,
}

impl RedbTokenStore {
    /// Opens (creating if needed) the store at `path`. The file is created with mode 0600,
    /// and an existing file that group or others may access is set to 0600: it holds bearer
    /// credentials. The whole file is integrity-checked on open, so a damaged or foreign file
    /// is an [`Error::Db`] rather than a later panic.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        restrict_mode(&file).map_err(io)?;
        let db = Database::builder()
            .set_check_integrity_on_open(true)
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(FileBackend::new(file)?)?;
        let txn = db.begin_write()?;
        txn.open_table(TOKENS)?;
        txn.commit()?;
        Ok(RedbTokenStore { db, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored token, `Ok(Err(reason))` when it is missing, expired or undecodable
    /// (`reason` as Salt's log shows the exception).
    /// The token stored under `id`: `Ok(None)` when there is none, `Err(reason)` when the
    /// record is expired or unreadable (the caller removes it).
    fn lookup(&self, id: &str, now: f64) -> Result<Result<Option<Token>, String>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TOKENS)?;
        let Some(record) = table.get(id)? else {
            return Ok(Ok(None));
        };
        Ok(match decode_record(id, record.value()) {
            Ok(token) if !token.is_expired(now) => Ok(Some(token)),
            Ok(_) => Err(EXPIRED.into()),
            Err(e) => Err(format!("SaltDeserializationError('{e}')")),
        })
    }
}

/// How Salt's log shows the exception `get_tok` raises for a missing or expired token.
const EXPIRED: &str = "TokenExpiredError('')";

fn restrict_mode(file: &File) -> std::io::Result<()> {
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// A stored record as a token: it must decode and carry its own key as `token`.
fn decode_record(id: &str, bytes: &[u8]) -> Result<Token> {
    let value = decode(bytes).map_err(|e| Error::Malformed(e.to_string()))?;
    let token = Token::from_value(&value)?;
    if token.token != id {
        return Err(Error::Malformed("stored under another token's id".into()));
    }
    Ok(token)
}

impl TokenStore for RedbTokenStore {
    fn put(&self, token: &Token) -> Result<()> {
        if !is_token_id(&token.token) {
            return Err(Error::InvalidTokenId);
        }
        let bytes = encode(&token.to_value());
        decode(&bytes).map_err(|e| Error::Unstorable(e.to_string()))?;
        let txn = self.db.begin_write()?;
        txn.open_table(TOKENS)?
            .insert(token.token.as_str(), bytes.as_slice())?;
        txn.commit()?;
        Ok(())
    }

    fn get(&self, id: &str, now: f64) -> Result<Option<Token>> {
        if !is_token_id(id) {
            return Ok(None);
        }
        let reason = match self.lookup(id, now) {
            Ok(Ok(Some(token))) => return Ok(Some(token)),
            Ok(Ok(None)) => {
                // Salt's line, but nothing to remove: anyone may present an unknown id, so
                // it must not cost a write.
                tracing::warn!(
                    "Token '{id}' could not be loaded ({EXPIRED}); removing it from the store."
                );
                return Ok(None);
            }
            Ok(Err(reason)) => reason,
            Err(e) => {
                tracing::warn!(
                    "Token store transient error reading '{id}' ({e}); treating as \
                     not-authenticated for this request without removing the token from the \
                     store."
                );
                return Err(e);
            }
        };
        tracing::warn!("Token '{id}' could not be loaded ({reason}); removing it from the store.");
        self.remove(id)?;
        Ok(None)
    }

    fn remove(&self, id: &str) -> Result<bool> {
        if !is_token_id(id) {
            return Ok(false);
        }
        let txn = self.db.begin_write()?;
        let removed = txn.open_table(TOKENS)?.remove(id)?.is_some();
        txn.commit()?;
        Ok(removed)
    }

    fn clean_expired(&self, now: f64) -> Result<usize> {
        let txn = self.db.begin_write()?;
        let mut removed = 0usize;
        txn.open_table(TOKENS)?.retain(|id, bytes| {
            let keep = decode_record(id, bytes).is_ok_and(|t| !t.is_expired(now));
            if !keep {
                removed += 1;
            }
            keep
        })?;
        txn.commit()?;
        if removed > 0 {
            tracing::debug!("Removed {removed} expired or unreadable eauth tokens");
        }
        Ok(removed)
    }

    fn len(&self) -> Result<usize> {
        let txn = self.db.begin_read()?;
        let n = txn.open_table(TOKENS)?.len()?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::new_token_id;
    use crate::Value;
    use halite_proto::value::s;

    const NOW: f64 = 1_700_000_000.5;

    fn token(expire: f64) -> Token {
        Token {
            token: new_token_id("sha256").unwrap(),
            name: "fred".into(),
            eauth: "pam".into(),
            start: NOW,
            expire,
            groups: Some(vec!["wheel".into()]),
            auth_list: Some(Value::Array(vec![s("test.*")])),
        }
    }

    fn store() -> (tempfile::TempDir, RedbTokenStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbTokenStore::open(dir.path().join(TOKEN_FILE)).unwrap();
        (dir, store)
    }

    /// Writes raw bytes under `id`, as a damaged or foreign record would be.
    fn put_raw(store: &RedbTokenStore, id: &str, bytes: &[u8]) {
        let txn = store.db.begin_write().unwrap();
        txn.open_table(TOKENS).unwrap().insert(id, bytes).unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn put_then_get_returns_the_same_token() {
        let (_d, store) = store();
        let t = token(NOW + 60.0);
        store.put(&t).unwrap();
        assert_eq!(store.get(&t.token, NOW).unwrap(), Some(t));
        assert_eq!(store.len().unwrap(), 1);
    }

    #[test]
    fn unknown_token_is_none() {
        let (_d, store) = store();
        assert_eq!(
            store.get(&new_token_id("sha256").unwrap(), NOW).unwrap(),
            None
        );
    }

    #[test]
    fn put_replaces_a_token_with_the_same_id() {
        let (_d, store) = store();
        let t = token(NOW + 60.0);
        store.put(&t).unwrap();
        let renewed = Token {
            expire: NOW + 120.0,
            ..t.clone()
        };
        store.put(&renewed).unwrap();
        assert_eq!(store.get(&t.token, NOW).unwrap(), Some(renewed));
        assert_eq!(store.len().unwrap(), 1);
    }

    #[test]
    fn expired_token_is_none_and_removed_on_get() {
        let (_d, store) = store();
        let t = token(NOW - 1.0);
        store.put(&t).unwrap();
        assert_eq!(store.get(&t.token, NOW).unwrap(), None);
        assert_eq!(store.len().unwrap(), 0);
    }

    #[test]
    fn token_is_valid_up_to_its_expire_time() {
        let (_d, store) = store();
        let t = token(NOW);
        store.put(&t).unwrap();
        assert!(store.get(&t.token, NOW).unwrap().is_some());
        assert!(store.get(&t.token, NOW + 0.5).unwrap().is_none());
    }

    #[test]
    fn remove_answers_whether_a_token_was_there() {
        let (_d, store) = store();
        let t = token(NOW + 60.0);
        store.put(&t).unwrap();
        assert!(store.remove(&t.token).unwrap());
        assert!(!store.remove(&t.token).unwrap());
        assert_eq!(store.get(&t.token, NOW).unwrap(), None);
    }

    #[test]
    fn clean_expired_removes_and_counts_only_expired_tokens() {
        let (_d, store) = store();
        let live: Vec<_> = (0..3).map(|_| token(NOW + 60.0)).collect();
        for t in &live {
            store.put(t).unwrap();
        }
        for _ in 0..2 {
            store.put(&token(NOW - 60.0)).unwrap();
        }
        assert_eq!(store.len().unwrap(), 5);
        assert_eq!(store.clean_expired(NOW).unwrap(), 2);
        assert_eq!(store.len().unwrap(), 3);
        for t in &live {
            assert_eq!(store.get(&t.token, NOW).unwrap().as_ref(), Some(t));
        }
        assert_eq!(store.clean_expired(NOW).unwrap(), 0);
        assert_eq!(store.clean_expired(NOW + 61.0).unwrap(), 3);
        assert!(store.is_empty().unwrap());
    }

    #[test]
    fn clean_expired_removes_corrupt_records() {
        let (_d, store) = store();
        let keep = token(NOW + 60.0);
        store.put(&keep).unwrap();
        put_raw(&store, "abcd", b"\xc1garbage");
        assert_eq!(store.clean_expired(NOW).unwrap(), 1);
        assert_eq!(store.len().unwrap(), 1);
    }

    #[test]
    fn reopened_store_keeps_its_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let t = token(NOW + 60.0);
        {
            let store = RedbTokenStore::open(&path).unwrap();
            store.put(&t).unwrap();
        }
        let store = RedbTokenStore::open(&path).unwrap();
        assert_eq!(store.get(&t.token, NOW).unwrap(), Some(t));
        assert_eq!(store.path(), path);
    }

    #[test]
    fn corrupt_record_is_none_and_removed_on_get() {
        let (_d, store) = store();
        let not_msgpack = "aa";
        let not_a_token = "bb";
        let wrong_key = "cc";
        put_raw(&store, not_msgpack, b"\xc1\xff\x00");
        put_raw(&store, not_a_token, &encode(&s("just a string")));
        let other = token(NOW + 60.0);
        put_raw(&store, wrong_key, &encode(&other.to_value()));
        for id in [not_msgpack, not_a_token, wrong_key] {
            assert_eq!(store.get(id, NOW).unwrap(), None, "{id}");
        }
        assert_eq!(store.len().unwrap(), 0);
    }

    #[test]
    fn non_hex_ids_are_refused_and_never_found() {
        let (_d, store) = store();
        let bad = Token {
            token: "../../x".into(),
            ..token(NOW + 60.0)
        };
        assert!(matches!(store.put(&bad), Err(Error::InvalidTokenId)));
        assert_eq!(store.len().unwrap(), 0);
        // Even a record planted under such a key is neither returned nor touched by get.
        put_raw(&store, "../../x", &encode(&bad.to_value()));
        assert_eq!(store.get("../../x", NOW).unwrap(), None);
        assert!(!store.remove("../../x").unwrap());
        assert_eq!(store.len().unwrap(), 1);
    }

    #[test]
    fn token_too_deep_to_read_back_is_refused() {
        let (_d, store) = store();
        let mut acl = Value::Nil;
        for _ in 0..200 {
            acl = Value::Array(vec![acl]);
        }
        let t = Token {
            auth_list: Some(acl),
            ..token(NOW + 60.0)
        };
        assert!(matches!(store.put(&t), Err(Error::Unstorable(_))));
        assert_eq!(store.len().unwrap(), 0);
    }

    #[test]
    fn store_file_is_created_private() {
        let (d, _store) = store();
        let mode = std::fs::metadata(d.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn existing_store_file_open_to_others_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        drop(RedbTokenStore::open(&path).unwrap());
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        let _store = RedbTokenStore::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn file_that_is_not_a_database_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        std::fs::write(&path, b"not a redb file at all, just some text").unwrap();
        assert!(matches!(RedbTokenStore::open(&path), Err(Error::Db(_))));
    }
}
