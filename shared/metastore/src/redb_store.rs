//! The embedded metastore on redb, used by `flotilla serve` and by tests.
//!
//! One metastore transaction is one redb write transaction: redb admits a single writer at a
//! time, so conditions are evaluated and operations applied with no other writer in between
//! (serializable), and a commit is either wholly on disk or not at all. redb's default
//! durability (`Immediate`) fsyncs before `commit` returns, so a committed transaction
//! survives a process crash. It is the embedded equivalent of one atomic batch.
//!
//! Group commit: concurrent writers hand their transactions to a queue, and whichever of
//! them takes the commit lock first applies every queued transaction, in arrival order, inside
//! one redb write transaction, then commits (and fsyncs) once for all of them. Each metastore
//! transaction keeps its own all-or-nothing conditions: its conditions are evaluated against
//! the state the earlier transactions of the group left, and one whose condition fails writes
//! nothing and fails alone. The fsync, which dominates a small write, is paid once per group
//! instead of once per writer (see `docs/performance.md`, "Group commit").
//!
//! Layout: one table, `items`. The redb key is `pk ‖ 0x00 ‖ sk` (pk may not contain NUL, see
//! `codec::check_key`), so all items of a partition are contiguous and ordered by the bytes
//! of their sort key, exactly as DynamoDB orders string sort keys; a prefix query is one
//! range scan that stops at the first key outside `pk ‖ 0x00 ‖ prefix`. The redb value is a
//! fixed header (format byte, version, expiry) followed by the body.

use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex};

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

/// Most metastore transactions one redb commit carries (a bound on the group's latency and
/// on the size of one redb write transaction: at most 100 operations each).
const MAX_GROUP: usize = 64;

/// The embedded metastore. Cheap to clone; clones share one database.
#[derive(Clone)]
pub struct RedbMetastore {
    db: Arc<Database>,
    group: Arc<GroupCommit>,
}

impl GroupCommit {
    fn new(max: usize) -> Self {
        Self {
            max,
            queue: Mutex::default(),
            commit: Mutex::default(),
            commits: Default::default(),
        }
    }
}

/// A transaction waiting for the next group commit, with where to send its outcome.
struct Queued {
    tx: Transaction,
    done: tokio::sync::oneshot::Sender<Result<(), MetastoreError>>,
}

/// Writers queue their transactions in `queue`; the holder of `commit` drains it. A writer
/// pushes first and then takes the lock, so every queued transaction is drained by its own
/// writer or by one that held the lock after the push.
struct GroupCommit {
    /// Most transactions one commit carries ([`MAX_GROUP`]; 1 commits each alone).
    max: usize,
    queue: Mutex<Vec<Queued>>,
    commit: Mutex<()>,
    /// redb write transactions committed (each carrying one or more metastore transactions).
    commits: std::sync::atomic::AtomicU64,
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
        Ok(Self {
            db: Arc::new(db),
            group: Arc::new(GroupCommit::new(MAX_GROUP)),
        })
    }

    /// The same database, committing at most `max` transactions together (at least 1; 1
    /// commits every transaction alone, as a store without group commit would: what the
    /// benchmarks compare against). For a store not yet in use.
    pub fn with_max_group(self, max: usize) -> Self {
        Self {
            db: self.db,
            group: Arc::new(GroupCommit::new(max.max(1))),
        }
    }

    /// redb write transactions committed since open: at most the number of metastore
    /// transactions that wrote something, fewer when concurrent writers shared commits.
    pub fn commits(&self) -> u64 {
        self.group
            .commits
            .load(std::sync::atomic::Ordering::Relaxed)
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

/// Applies one metastore transaction inside an open redb write transaction: every condition
/// is evaluated first (against the state the write transaction holds so far), and nothing is
/// written unless all hold; the reasons cover every operation, not just the first.
/// `Err(ConditionFailed)` leaves the write transaction as it was; any other error may leave
/// it partly written, and the caller must abort it.
fn apply_one(
    table: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    tx: &Transaction,
) -> Result<(), MetastoreError> {
    let keys: Vec<Vec<u8>> = tx.ops.iter().map(|op| encode_key(op.key())).collect();

    // Phase 1: read every current version and evaluate every condition.
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
    Ok(())
}

/// Commits a group of queued transactions in one redb write transaction and answers each.
/// A transaction whose conditions fail is answered `ConditionFailed` and the rest go on. A
/// transaction that fails otherwise mid-apply (a corrupt item, a redb error) may have left
/// the write transaction partly written: the whole write transaction is aborted (dropped),
/// that transaction is answered with its error, and the others of the group, of which nothing
/// was written, are handed back to be committed again. A failed commit is answered to every
/// transaction of the group that had applied.
fn commit_group(
    db: &Database,
    commits: &std::sync::atomic::AtomicU64,
    group: Vec<Queued>,
) -> Vec<Queued> {
    let txn = match db.begin_write() {
        Ok(txn) => txn,
        Err(e) => return answer_all(group, Err(backend(e).to_string())),
    };
    let mut applied: Vec<Queued> = Vec::with_capacity(group.len());
    {
        let mut table = match txn.open_table(ITEMS) {
            Ok(table) => table,
            Err(e) => return answer_all(group, Err(backend(e).to_string())),
        };
        let mut rest = group.into_iter();
        while let Some(queued) = rest.next() {
            match apply_one(&mut table, &queued.tx) {
                Ok(()) => applied.push(queued),
                Err(e @ MetastoreError::ConditionFailed { .. }) => {
                    let _ = queued.done.send(Err(e));
                }
                Err(e) => {
                    // Dropping the write transaction aborts it: nothing of the group is
                    // written, so the others are retried in a group of their own.
                    let _ = queued.done.send(Err(e));
                    applied.extend(rest);
                    return applied;
                }
            }
        }
    }
    if applied.is_empty() {
        // Only failed conditions: nothing to write, nothing to fsync.
        let _ = txn.abort();
        return Vec::new();
    }
    let result = txn.commit().map_err(|e| backend(e).to_string());
    if result.is_ok() {
        commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    answer_all(applied, result)
}

/// Answers every transaction of `group` with `result` (a failure as a backend error, which
/// is not `MetastoreError: Clone`, by its message); nothing is handed back.
fn answer_all(group: Vec<Queued>, result: Result<(), String>) -> Vec<Queued> {
    for queued in group {
        let _ = queued
            .done
            .send(result.clone().map_err(MetastoreError::Backend));
    }
    Vec::new()
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
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.group
            .queue
            .lock()
            .map_err(|_| MetastoreError::Backend("metastore queue poisoned".into()))?
            .push(Queued { tx, done });
        let group = Arc::clone(&self.group);
        self.blocking(move |db| {
            // Whoever holds the lock commits what is queued; a writer whose transaction a
            // previous holder already took finds less (or nothing) to do.
            let _commit = group
                .commit
                .lock()
                .map_err(|_| MetastoreError::Backend("metastore commit lock poisoned".into()))?;
            loop {
                let mut batch: Vec<Queued> = {
                    let mut queue = group
                        .queue
                        .lock()
                        .map_err(|_| MetastoreError::Backend("metastore queue poisoned".into()))?;
                    let n = queue.len().min(group.max);
                    queue.drain(..n).collect()
                };
                if batch.is_empty() {
                    return Ok(());
                }
                while !batch.is_empty() {
                    batch = commit_group(db, &group.commits, batch);
                }
            }
        })
        .await?;
        outcome
            .await
            .map_err(|_| MetastoreError::Backend("metastore writer stopped".into()))?
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

    /// Holds the commit lock while `n` transactions queue up behind it, so that releasing it
    /// commits them as one group.
    // Holding the (blocking) commit lock across the awaits is the point: the writers' blocking
    // threads wait on it while the test waits for their pushes.
    #[allow(clippy::await_holding_lock)]
    async fn queue_behind_lock(
        store: &RedbMetastore,
        txs: Vec<Transaction>,
    ) -> Vec<Result<(), MetastoreError>> {
        let guard = store.group.commit.lock().expect("commit lock");
        let n = txs.len();
        let tasks: Vec<_> = txs
            .into_iter()
            .map(|tx| {
                let store = store.clone();
                tokio::spawn(async move { store.transact(tx).await })
            })
            .collect();
        // Every writer pushes before it waits for the lock: wait for all pushes.
        while store.group.queue.lock().expect("queue").len() < n {
            tokio::task::yield_now().await;
        }
        drop(guard);
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("writer task"));
        }
        out
    }

    fn body(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_group_commits_once_and_keeps_each_transaction_all_or_nothing() {
        let store = RedbMetastore::in_memory().expect("redb");
        let before = store.commits();
        let shared = Key::new("p", "shared");
        // Eight writers, each creating a key of its own; the first four also race to create
        // one shared key, so exactly one of those four may commit.
        let txs = (0..8)
            .map(|i| {
                let mut ops = vec![Op::create(Key::new("p", format!("own-{i}")), body("x"))];
                if i < 4 {
                    ops.push(Op::create(shared.clone(), body(&format!("writer {i}"))));
                }
                Transaction { ops }
            })
            .collect();
        let results = queue_behind_lock(&store, txs).await;
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 5, "{results:?}");
        assert!(results[4..].iter().all(Result::is_ok), "{results:?}");
        for (i, r) in results.iter().enumerate() {
            let own = store
                .get(&Key::new("p", format!("own-{i}")), Consistency::Strong)
                .await
                .expect("get");
            match r {
                Ok(()) => assert!(own.is_some(), "the winner's own key is written"),
                Err(MetastoreError::ConditionFailed { .. }) => {
                    assert!(own.is_none(), "a loser wrote nothing")
                }
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert_eq!(store.commits() - before, 1, "one redb commit for the group");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_transaction_failing_mid_group_fails_alone() {
        let store = RedbMetastore::in_memory().expect("redb");
        let bad = Key::new("p", "corrupt");
        {
            let txn = store.db.begin_write().expect("write");
            {
                let mut table = txn.open_table(ITEMS).expect("table");
                table
                    .insert(encode_key(&bad).as_slice(), [9u8, 9].as_slice())
                    .expect("insert");
            }
            txn.commit().expect("commit");
        }
        let before = store.commits();
        let txs = vec![
            Transaction {
                ops: vec![Op::create(Key::new("p", "a"), body("a"))],
            },
            Transaction {
                ops: vec![
                    Op::create(Key::new("p", "b"), body("b")),
                    Op::put(bad.clone(), body("overwrite")),
                ],
            },
            Transaction {
                ops: vec![Op::create(Key::new("p", "c"), body("c"))],
            },
        ];
        let results = queue_behind_lock(&store, txs).await;
        let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
        assert_eq!(failed.len(), 1, "{results:?}");
        assert!(matches!(failed[0], Err(MetastoreError::Corrupt { .. })));
        for (sk, written) in [("a", true), ("b", false), ("c", true)] {
            let item = store
                .get(&Key::new("p", sk), Consistency::Strong)
                .await
                .expect("get");
            assert_eq!(item.is_some(), written, "{sk}");
        }
        assert!(store.commits() - before <= 2);
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
