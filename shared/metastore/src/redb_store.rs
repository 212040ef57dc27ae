//! The embedded metastore on redb, used by `flotilla serve` and by tests.
//!
//! One metastore transaction is one redb write transaction: redb admits a single writer at a
//! time, so conditions are evaluated and operations applied with no other writer in between
//! (serializable), and a commit is either wholly on disk or not at all. redb's default
//! durability (`Immediate`) fsyncs before `commit` returns, so a committed transaction
//! survives a process crash. It is the embedded equivalent of one atomic batch.
//!
//! Layout: one table, `items`. The redb key is `pk ‖ 0x00 ‖ sk` (pk may not contain NUL, see
//! `codec::check_key`), so all items of a partition are contiguous and ordered by the bytes
//! of their sort key, exactly as DynamoDB orders string sort keys; a prefix query is one
//! range scan that stops at the first key outside `pk ‖ 0x00 ‖ prefix`. The redb value is a
//! fixed header (format byte, version, expiry) followed by the body.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec::{self, encode_token, evaluate, op_condition};
use crate::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, OpOutcome, Page, Query, Transaction,
};

const ITEMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("items");

/// Value format version, so that a future layout change can be recognised on open.
const FORMAT_V1: u8 = 1;
/// format (1) + version (8) + has-expiry (1) + expiry (8).
const HEADER_LEN: usize = 18;

/// The embedded metastore. Cheap to clone; clones share one database.
#[derive(Clone)]
pub struct RedbMetastore {
    db: Arc<Database>,
}

impl std::fmt::Debug for RedbMetastore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbMetastore").finish_non_exhaustive()
    }
}

impl RedbMetastore {
    /// Opens the database file at `path`, creating it if it does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MetastoreError> {
        let db = Database::create(path.as_ref()).map_err(backend)?;
        Self::init(db)
    }

    /// A fresh database held in memory only, for tests and benchmarks.
    pub fn in_memory() -> Result<Self, MetastoreError> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(backend)?;
        Self::init(db)
    }

    fn init(db: Database) -> Result<Self, MetastoreError> {
        // Create the table up front so that reads of an empty store find it.
        let txn = db.begin_write().map_err(backend)?;
        txn.open_table(ITEMS).map_err(backend)?;
        txn.commit().map_err(backend)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Runs blocking redb work off the async runtime's worker threads.
    async fn blocking<T, F>(&self, work: F) -> Result<T, MetastoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, MetastoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || work(&db))
            .await
            .map_err(|e| MetastoreError::Backend(format!("metastore worker failed: {e}")))?
    }
}

fn backend(e: impl Into<redb::Error>) -> MetastoreError {
    MetastoreError::Backend(format!("redb: {}", e.into()))
}

fn encode_key(key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.pk.len() + 1 + key.sk.len());
    out.extend_from_slice(key.pk.as_bytes());
    out.push(0);
    out.extend_from_slice(key.sk.as_bytes());
    out
}

fn partition_prefix(pk: &str, sk_prefix: &str) -> Vec<u8> {
    encode_key(&Key::new(pk, sk_prefix))
}

fn encode_value(version: u64, expires_at: Option<i64>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(FORMAT_V1);
    out.extend_from_slice(&version.to_be_bytes());
    out.push(u8::from(expires_at.is_some()));
    out.extend_from_slice(&expires_at.unwrap_or(0).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn corrupt(key: &Key, message: &str) -> MetastoreError {
    MetastoreError::Corrupt {
        key: key.clone(),
        message: message.to_string(),
    }
}

fn decode_version(key: &Key, raw: &[u8]) -> Result<u64, MetastoreError> {
    if raw.len() < HEADER_LEN || raw[0] != FORMAT_V1 {
        return Err(corrupt(key, "unrecognised value header"));
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&raw[1..9]);
    Ok(u64::from_be_bytes(v))
}

fn decode_item(key: Key, raw: &[u8]) -> Result<Item, MetastoreError> {
    let version = decode_version(&key, raw)?;
    let expires_at = match raw[9] {
        0 => None,
        1 => {
            let mut e = [0u8; 8];
            e.copy_from_slice(&raw[10..18]);
            Some(i64::from_be_bytes(e))
        }
        _ => return Err(corrupt(&key, "unrecognised expiry flag")),
    };
    Ok(Item {
        key,
        version,
        body: raw[HEADER_LEN..].to_vec(),
        expires_at,
    })
}

fn apply(db: &Database, tx: &Transaction) -> Result<(), MetastoreError> {
    let txn = db.begin_write().map_err(backend)?;
    {
        let mut table = txn.open_table(ITEMS).map_err(backend)?;
        let keys: Vec<Vec<u8>> = tx.ops.iter().map(|op| encode_key(op.key())).collect();

        // Phase 1: read every current version and evaluate every condition. Nothing is
        // written unless all hold, and the reasons cover every operation, not just the first.
        let mut current = Vec::with_capacity(tx.ops.len());
        let mut outcomes = Vec::with_capacity(tx.ops.len());
        for (op, raw_key) in tx.ops.iter().zip(&keys) {
            let version = match table.get(raw_key.as_slice()).map_err(backend)? {
                Some(guard) => Some(decode_version(op.key(), guard.value())?),
                None => None,
            };
            outcomes.push(evaluate(op_condition(op), version));
            current.push(version);
        }
        if outcomes.iter().any(|o| *o != OpOutcome::Ok) {
            drop(table);
            txn.abort().map_err(backend)?;
            return Err(MetastoreError::ConditionFailed { reasons: outcomes });
        }

        // Phase 2: apply.
        for ((op, raw_key), version) in tx.ops.iter().zip(&keys).zip(current) {
            match op {
                Op::Put {
                    body, expires_at, ..
                } => {
                    let next = version.map_or(1, |v| v + 1);
                    let value = encode_value(next, *expires_at, body);
                    table
                        .insert(raw_key.as_slice(), value.as_slice())
                        .map_err(backend)?;
                }
                Op::Delete { .. } => {
                    table.remove(raw_key.as_slice()).map_err(backend)?;
                }
                Op::Check { .. } => {}
            }
        }
    }
    txn.commit().map_err(backend)
}

/// Scans one prefix page. Returns the items and whether more matching items follow.
fn scan(db: &Database, query: &Query, after: Option<String>) -> Result<Page, MetastoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let table = txn.open_table(ITEMS).map_err(backend)?;
    let prefix = partition_prefix(&query.pk, &query.sk_prefix);
    let start = match &after {
        Some(sk) => Bound::Excluded(partition_prefix(&query.pk, sk)),
        None => Bound::Included(prefix.clone()),
    };
    let start_ref = match &start {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    };
    let range = table
        .range::<&[u8]>((start_ref, Bound::Unbounded))
        .map_err(backend)?;
    let sk_offset = query.pk.len() + 1;
    let mut items = Vec::new();
    let mut more = false;
    for entry in range {
        let (k, v) = entry.map_err(backend)?;
        let raw_key = k.value();
        if !raw_key.starts_with(&prefix) {
            break;
        }
        if items.len() == query.limit {
            more = true;
            break;
        }
        let sk = std::str::from_utf8(&raw_key[sk_offset..]).map_err(|_| {
            corrupt(
                &Key::new(query.pk.clone(), String::new()),
                "sort key is not UTF-8",
            )
        })?;
        items.push(decode_item(Key::new(query.pk.clone(), sk), v.value())?);
    }
    let next = match (more, items.last()) {
        (true, Some(last)) => Some(encode_token(&last.key.sk)),
        _ => None,
    };
    Ok(Page { items, next })
}

fn count_prefix(db: &Database, pk: &str, sk_prefix: &str) -> Result<u64, MetastoreError> {
    let txn = db.begin_read().map_err(backend)?;
    let table = txn.open_table(ITEMS).map_err(backend)?;
    let prefix = partition_prefix(pk, sk_prefix);
    let mut n = 0u64;
    for entry in table.range::<&[u8]>(prefix.as_slice()..).map_err(backend)? {
        let (k, _) = entry.map_err(backend)?;
        if !k.value().starts_with(&prefix) {
            break;
        }
        n += 1;
    }
    Ok(n)
}

/// Every read here is strong: redb has one copy of the data, and a read transaction begun
/// after a commit returned sees that commit. `Consistency::Eventual` is therefore served
/// exactly like `Strong`, which satisfies its (weaker) promise.
#[async_trait]
impl Metastore for RedbMetastore {
    async fn get(
        &self,
        key: &Key,
        _consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        codec::check_key(key)?;
        let key = key.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(backend)?;
            let table = txn.open_table(ITEMS).map_err(backend)?;
            match table.get(encode_key(&key).as_slice()).map_err(backend)? {
                Some(guard) => decode_item(key, guard.value()).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        _consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        let keys = codec::check_batch(keys)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.blocking(move |db| {
            // One read transaction: the batch is a consistent snapshot.
            let txn = db.begin_read().map_err(backend)?;
            let table = txn.open_table(ITEMS).map_err(backend)?;
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(guard) = table.get(encode_key(&key).as_slice()).map_err(backend)? {
                    out.push(decode_item(key, guard.value())?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        let after = codec::check_query(query)?;
        let query = query.clone();
        self.blocking(move |db| scan(db, &query, after)).await
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        _consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        codec::check_prefix(pk, sk_prefix)?;
        let (pk, sk_prefix) = (pk.to_string(), sk_prefix.to_string());
        self.blocking(move |db| count_prefix(db, &pk, &sk_prefix))
            .await
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        codec::check_transaction(&tx)?;
        self.blocking(move |db| apply(db, &tx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_do_not_interleave() {
        // "a" < "a!" in pk order, but every key of partition "a" sorts before any of "a!".
        let a_high = encode_key(&Key::new("a", "\u{10FFFF}"));
        let a_bang_low = encode_key(&Key::new("a!", "0"));
        assert!(a_high < a_bang_low);
    }

    #[test]
    fn value_round_trips() {
        let key = Key::new("p", "s");
        let raw = encode_value(7, Some(-5), b"body");
        let item = decode_item(key.clone(), &raw).ok();
        assert_eq!(
            item,
            Some(Item {
                key,
                version: 7,
                body: b"body".to_vec(),
                expires_at: Some(-5)
            })
        );
    }

    #[test]
    fn corrupt_value_is_reported() {
        let key = Key::new("p", "s");
        assert!(matches!(
            decode_item(key, &[9, 9]),
            Err(MetastoreError::Corrupt { .. })
        ));
    }
}
