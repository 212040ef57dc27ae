#![forbid(unsafe_code)]
//! The metastore: Flotilla's one durable store, modeled on DynamoDB.
//!
//! Items are keyed by `(pk, sk)` and carry an opaque body, a server-managed version and an
//! optional expiry. Every invariant that spans items is expressed as one [`Transaction`] of
//! up to [`MAX_TRANSACTION_OPS`] operations, each guarded by an optional [`Condition`]; the
//! transaction either applies every operation or none. Reads state their [`Consistency`]
//! explicitly, because a read whose *absence* is load-bearing (dependency checks, cascades,
//! fences, generation items) must never be served from a lagging replica.
//!
//! Backends, each behind a feature of its own so a host compiles only the one it runs:
//! `redb_store::RedbMetastore` (embedded, `flotilla serve`, feature `redb`) and
//! `dynamo::DynamoMetastore` (AWS, feature `dynamodb`). Decorator:
//! [`metrics::CountingMetastore`] (request and item counters).
//!
//! Test doubles, compiled only with the `testing` feature (which dev-dependencies enable, so
//! no release binary carries them): `fault::FaultInjectingMetastore` (injected failures and
//! crashes), `stale::StaleReadsMetastore` (eventual reads that lag),
//! `metrics::RoundTripMetastore` (sequential requests) and `contract`, the behavioural suite
//! every backend passes.

#[cfg(any(test, feature = "testing"))]
pub mod contract;
#[cfg(feature = "dynamodb")]
pub mod dynamo;
#[cfg(any(test, feature = "testing"))]
pub mod fault;
pub mod metrics;
#[cfg(feature = "redb")]
pub mod redb_store;
#[cfg(any(test, feature = "testing"))]
pub mod stale;

// The validation and condition helpers the backends share.
#[cfg_attr(not(any(feature = "redb", feature = "dynamodb")), allow(dead_code))]
mod codec;
mod error_kind;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

/// The most operations one transaction may hold (DynamoDB's `TransactWriteItems` limit).
pub const MAX_TRANSACTION_OPS: usize = 100;
/// The largest item, key and body included (DynamoDB's 400 KB item limit).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// The longest partition key in bytes (DynamoDB's limit).
pub const MAX_PK_BYTES: usize = 2048;
/// The longest sort key in bytes (DynamoDB's limit).
pub const MAX_SK_BYTES: usize = 1024;
/// Fixed per-item overhead counted towards [`MAX_ITEM_BYTES`] for attribute names and the
/// version and expiry attributes, so that both backends refuse the same items.
pub const ITEM_OVERHEAD_BYTES: usize = 64;
/// Most keys one [`Metastore::batch_get`] names (DynamoDB's `BatchGetItem` limit).
pub const MAX_BATCH_GET_KEYS: usize = 100;
/// Most items one query page returns: the largest API page (1,000 items) and one more, so
/// that a listing learns in the same query whether another page follows (a full page of
/// 1,000 would otherwise cost a second query). DynamoDB bounds a page by its 1 MB, not by a
/// count, so both backends serve this limit alike.
pub const MAX_PAGE_SIZE: usize = 1001;

/// The primary key of an item.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

impl Key {
    pub fn new(pk: impl Into<String>, sk: impl Into<String>) -> Self {
        Self {
            pk: pk.into(),
            sk: sk.into(),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.pk, self.sk)
    }
}

/// A stored item. `version` starts at 1 on creation and advances by exactly one on every
/// write of the item, so `Condition::Version` is a compare-and-swap.
#[derive(Clone, PartialEq, Eq)]
pub struct Item {
    pub key: Key,
    pub version: u64,
    pub body: Vec<u8>,
    /// Epoch seconds after which the item may be reclaimed (DynamoDB TTL attribute `ttl`).
    /// Readers treat an expired item as present until it is actually removed; protocols that
    /// care compare the expiry themselves.
    pub expires_at: Option<i64>,
}

impl fmt::Debug for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Bodies are never printed: they may be large and are not for logs.
        f.debug_struct("Item")
            .field("key", &self.key)
            .field("version", &self.version)
            .field("body_len", &self.body.len())
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl Item {
    /// The body decoded as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, MetastoreError> {
        serde_json::from_slice(&self.body).map_err(|e| MetastoreError::Corrupt {
            key: self.key.clone(),
            message: e.to_string(),
        })
    }
}

/// Which replica a read may be served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Sees every transaction committed before the read started. Required wherever the
    /// absence of an item decides something.
    Strong,
    /// May lag recent commits (DynamoDB's default read). Only for ordinary listings.
    Eventual,
}

/// A guard on one operation of a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// The item must not exist (`attribute_not_exists`): the "create" verb.
    Absent,
    /// The item must exist.
    Exists,
    /// The item must exist at exactly this version: the "replace" verb.
    Version(u64),
}

/// One operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write the whole item. The new version is the old version plus one, or 1.
    Put {
        key: Key,
        body: Vec<u8>,
        expires_at: Option<i64>,
        condition: Option<Condition>,
    },
    /// Remove the item. Deleting an absent item without a condition is not an error.
    Delete {
        key: Key,
        condition: Option<Condition>,
    },
    /// Only assert a condition; writes nothing.
    Check { key: Key, condition: Condition },
}

impl Op {
    pub fn key(&self) -> &Key {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } | Op::Check { key, .. } => key,
        }
    }

    /// Create: put only if absent.
    pub fn create(key: Key, body: Vec<u8>) -> Self {
        Op::Put {
            key,
            body,
            expires_at: None,
            condition: Some(Condition::Absent),
        }
    }

    /// Replace: put only if the item is at `version`.
    pub fn replace(key: Key, version: u64, body: Vec<u8>) -> Self {
        Op::Put {
            key,
            body,
            expires_at: None,
            condition: Some(Condition::Version(version)),
        }
    }

    /// Unconditional put.
    pub fn put(key: Key, body: Vec<u8>) -> Self {
        Op::Put {
            key,
            body,
            expires_at: None,
            condition: None,
        }
    }

    /// Delete only if the item is at `version`.
    pub fn delete_at(key: Key, version: u64) -> Self {
        Op::Delete {
            key,
            condition: Some(Condition::Version(version)),
        }
    }

    /// Unconditional delete.
    pub fn delete(key: Key) -> Self {
        Op::Delete {
            key,
            condition: None,
        }
    }

    pub fn check(key: Key, condition: Condition) -> Self {
        Op::Check { key, condition }
    }

    pub fn with_expiry(mut self, at: Option<i64>) -> Self {
        if let Op::Put { expires_at, .. } = &mut self {
            *expires_at = at;
        }
        self
    }
}

/// An atomic group of operations: all apply, or none does. No two operations may name the
/// same key (DynamoDB refuses that too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    pub ops: Vec<Op>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    pub fn with(mut self, op: Op) -> Self {
        self.ops.push(op);
        self
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Checks the limits every backend enforces identically, before anything is sent.
    pub fn validate(&self) -> Result<(), MetastoreError> {
        if self.ops.is_empty() {
            return Err(MetastoreError::Invalid(
                "a transaction needs at least one operation".into(),
            ));
        }
        if self.ops.len() > MAX_TRANSACTION_OPS {
            return Err(MetastoreError::TooManyOperations {
                count: self.ops.len(),
            });
        }
        let mut seen = std::collections::HashSet::with_capacity(self.ops.len());
        for op in &self.ops {
            validate_key(op.key())?;
            if !seen.insert(op.key()) {
                return Err(MetastoreError::Invalid(format!(
                    "two operations in one transaction name the same key {:?}",
                    op.key()
                )));
            }
            if let Op::Put { key, body, .. } = op {
                let size = item_size(key, body);
                if size > MAX_ITEM_BYTES {
                    return Err(MetastoreError::ItemTooLarge {
                        key: key.clone(),
                        size,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The size an item counts against [`MAX_ITEM_BYTES`].
pub fn item_size(key: &Key, body: &[u8]) -> usize {
    key.pk.len() + key.sk.len() + body.len() + ITEM_OVERHEAD_BYTES
}

/// Keys must be non-empty and within DynamoDB's key length limits.
pub fn validate_key(key: &Key) -> Result<(), MetastoreError> {
    if key.pk.is_empty() || key.sk.is_empty() {
        return Err(MetastoreError::Invalid(
            "partition and sort keys must be non-empty".into(),
        ));
    }
    if key.pk.len() > MAX_PK_BYTES || key.sk.len() > MAX_SK_BYTES {
        return Err(MetastoreError::KeyTooLong { key: key.clone() });
    }
    Ok(())
}

/// Why one operation's condition failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// `Absent` was required but the item exists (its current version is given).
    Exists { version: u64 },
    /// `Exists` or `Version` was required but the item is absent.
    Missing,
    /// `Version(expected)` was required but the item is at `actual`.
    VersionMismatch { expected: u64, actual: u64 },
}

/// The per-operation outcome of a cancelled transaction, in operation order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpOutcome {
    /// This operation's condition held (or it had none).
    Ok,
    /// This operation's condition failed.
    Failed(FailureReason),
}

/// Typed errors at the store boundary. Retryability and "outcome unknown" are data here, so
/// protocols decide what to keep without parsing messages.
#[derive(Debug, thiserror::Error)]
pub enum MetastoreError {
    /// At least one condition failed; nothing was written. `reasons[i]` is operation `i`.
    #[error("transaction condition failed: {}", describe_failures(.reasons))]
    ConditionFailed { reasons: Vec<OpOutcome> },
    /// The request was refused before any effect (throttling, transaction conflict, a
    /// transient service error). Safe to retry as is.
    #[error("retryable metastore failure: {message}")]
    Retryable { message: String },
    /// The request may or may not have been applied (timeout or 5xx after sending). The
    /// caller must re-read before deciding anything that depends on the effect.
    #[error("metastore outcome unknown: {message}")]
    OutcomeUnknown { message: String },
    #[error("transaction has {count} operations; the limit is {MAX_TRANSACTION_OPS}")]
    TooManyOperations { count: usize },
    #[error("item {key:?} is {size} bytes; the limit is {MAX_ITEM_BYTES}")]
    ItemTooLarge { key: Key, size: usize },
    #[error("key {key:?} exceeds the key length limits")]
    KeyTooLong { key: Key },
    #[error("invalid metastore request: {0}")]
    Invalid(String),
    #[error("malformed page token")]
    BadPageToken,
    #[error("item {key:?} is corrupt: {message}")]
    Corrupt { key: Key, message: String },
    /// A permanent backend failure (configuration, permissions, missing table).
    #[error("metastore backend failure: {0}")]
    Backend(String),
}

fn describe_failures(reasons: &[OpOutcome]) -> String {
    let failed: Vec<String> = reasons
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            OpOutcome::Ok => None,
            OpOutcome::Failed(reason) => Some(format!("op {i}: {reason:?}")),
        })
        .collect();
    failed.join(", ")
}

impl MetastoreError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, MetastoreError::Retryable { .. })
    }

    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, MetastoreError::OutcomeUnknown { .. })
    }

    /// The failure reason of operation `index`, when this is a condition failure.
    pub fn failure_at(&self, index: usize) -> Option<&FailureReason> {
        match self {
            MetastoreError::ConditionFailed { reasons } => match reasons.get(index) {
                Some(OpOutcome::Failed(r)) => Some(r),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A prefix query: items of one partition whose sort key begins with `sk_prefix`, in
/// ascending sort-key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub pk: String,
    pub sk_prefix: String,
    /// Most items to return in this page (1..=[`MAX_PAGE_SIZE`]).
    pub limit: usize,
    /// Continue after this token (from a previous page's `next`).
    pub start_after: Option<PageToken>,
    pub consistency: Consistency,
}

impl Query {
    pub fn new(
        pk: impl Into<String>,
        sk_prefix: impl Into<String>,
        consistency: Consistency,
    ) -> Self {
        Self {
            pk: pk.into(),
            sk_prefix: sk_prefix.into(),
            limit: MAX_PAGE_SIZE,
            start_after: None,
            consistency,
        }
    }

    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub fn after(mut self, token: Option<PageToken>) -> Self {
        self.start_after = token;
        self
    }
}

/// An opaque continuation: the last sort key returned. Pages continue strictly after it,
/// so items added concurrently before it are not repeated and after it are seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageToken(pub String);

impl PageToken {
    /// A token that continues strictly after sort key `sk`, for callers that stop part-way
    /// through a page (e.g. a filtered listing that filled its own page).
    pub fn after_sort_key(sk: &str) -> Self {
        codec::encode_token(sk)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Page {
    pub items: Vec<Item>,
    /// Present when more items may follow.
    pub next: Option<PageToken>,
}

/// The store every Flotilla component writes through.
///
/// Contract (proved for every backend by the `contract` suite, feature `testing`):
/// - `transact` is atomic and isolated: a failed condition anywhere writes nothing;
/// - versions advance by exactly one per write of an item;
/// - `Strong` reads see every transaction that committed before the read started;
/// - query pages are complete and duplicate-free across page boundaries.
#[async_trait]
pub trait Metastore: Send + Sync + 'static {
    /// Point read.
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError>;

    /// Point reads of up to 100 keys; absent keys are omitted. Order is unspecified.
    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError>;

    /// One page of a prefix query.
    async fn query(&self, query: &Query) -> Result<Page, MetastoreError>;

    /// Number of items in a partition whose sort key begins with `sk_prefix`.
    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError>;

    /// Applies every operation atomically, or none.
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError>;
}

pub type DynMetastore = Arc<dyn Metastore>;

/// A host's shared store as a store value, so the decorators (counting, faults), which are
/// generic over a concrete store, can wrap the `DynMetastore` a host already holds. A named
/// wrapper rather than an implementation for `Arc` itself, which would turn every method
/// call on an `Arc<dyn Metastore>` into a second boxed future.
pub struct SharedStore(pub DynMetastore);

#[async_trait]
impl Metastore for SharedStore {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.0.as_ref().get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.0.as_ref().batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.0.as_ref().query(q).await
    }
    async fn count(&self, pk: &str, sk: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.0.as_ref().count(pk, sk, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.0.as_ref().transact(tx).await
    }
}

/// Reads every page of a prefix query.
pub async fn query_all(store: &dyn Metastore, query: Query) -> Result<Vec<Item>, MetastoreError> {
    let mut out = Vec::new();
    let mut q = query;
    loop {
        let page = store.query(&q).await?;
        out.extend(page.items);
        match page.next {
            Some(next) => q.start_after = Some(next),
            None => return Ok(out),
        }
    }
}

/// Single-item conveniences built on [`Metastore::transact`].
pub async fn put_one(store: &dyn Metastore, op: Op) -> Result<(), MetastoreError> {
    store.transact(Transaction::new().with(op)).await
}
