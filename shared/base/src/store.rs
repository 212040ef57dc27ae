//! The low-level store helpers every protocol shares: bounded retry with jittered backoff,
//! the condition-failure test, key and body codecs, point-read batches and API page tokens.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use flotilla_metastore::{
    Consistency, FailureReason, Item, Key, Metastore, MetastoreError, Op, PageToken, Query,
    Transaction, query_all,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// How many times a protocol re-reads and retries after losing a race or a retryable
/// backend failure before answering `503`/`409`.
pub const MAX_ATTEMPTS: usize = 8;

pub fn to_body<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::internal(format!("encode: {e}")))
}

/// A decoded item and its storage version.
pub struct Versioned<T> {
    pub value: T,
    pub version: u64,
}

pub async fn read<T: DeserializeOwned>(
    store: &dyn Metastore,
    parts: Key,
    consistency: Consistency,
) -> Result<Option<Versioned<T>>> {
    match store.get(&parts, consistency).await? {
        None => Ok(None),
        Some(item) => Ok(Some(Versioned {
            value: item.json()?,
            version: item.version,
        })),
    }
}

pub fn decode<T: DeserializeOwned>(item: &Item) -> Result<T> {
    Ok(item.json()?)
}

/// Items read together in one round trip, looked up by key afterwards. A protocol that knows
/// its keys before reading (a create: the account, its fence, the parents, their delete
/// guards, the slot) fetches them with one [`fetch`] and decides from the result exactly as
/// it would from the same point reads one after another; every decision it publishes is
/// still asserted by a condition of its own transaction, so reading earlier proves nothing
/// less.
#[derive(Default)]
pub struct Reads {
    items: std::collections::HashMap<Key, Item>,
}

impl Reads {
    /// The item at `key`, when it was read and exists.
    pub fn item(&self, key: &Key) -> Option<&Item> {
        self.items.get(key)
    }

    /// Removes and answers the item at `key`.
    pub fn take(&mut self, key: &Key) -> Option<Item> {
        self.items.remove(key)
    }

    /// The decoded item at `parts`, like [`read`] on the store.
    pub fn read<T: DeserializeOwned>(&self, parts: Key) -> Result<Option<Versioned<T>>> {
        match self.items.get(&parts) {
            None => Ok(None),
            Some(item) => Ok(Some(Versioned {
                value: item.json()?,
                version: item.version,
            })),
        }
    }
}

/// Strong point reads of `keys` in one round trip (`BatchGetItem` on DynamoDB, one read
/// transaction on redb). Duplicates are read once.
pub async fn fetch(store: &dyn Metastore, keys: &[Key]) -> Result<Reads> {
    let mut reads = Reads::default();
    for chunk in keys.chunks(flotilla_metastore::MAX_BATCH_GET_KEYS) {
        for item in store.batch_get(chunk, Consistency::Strong).await? {
            reads.items.insert(item.key.clone(), item);
        }
    }
    Ok(reads)
}

/// Backoff before retry `attempt` (0-based): jittered, bounded.
pub async fn backoff(attempt: usize) {
    use rand::Rng;
    let base = 5u64 << attempt.min(6);
    let seeded = JITTER.with(|j| {
        j.borrow_mut()
            .as_mut()
            .map(|rng| rng.random_range(0..=base))
    });
    let jitter = seeded.unwrap_or_else(|| rand::rng().random_range(0..=base));
    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
}

thread_local! {
    /// Seeded jitter source of the calling thread, when a test installed one.
    static JITTER: std::cell::RefCell<Option<rand::rngs::StdRng>> = const { std::cell::RefCell::new(None) };
}

/// Makes retry jitter on the calling thread a function of `seed` (`None` restores OS
/// randomness). The deterministic simulation runs every request of a seed on one
/// current-thread runtime with a paused clock: jitter decides which of two racing requests
/// wakes first, so it must come from the seed for a failing seed to replay exactly.
pub fn seed_retry_jitter(seed: Option<u64>) {
    use rand::SeedableRng;
    JITTER.with(|j| *j.borrow_mut() = seed.map(rand::rngs::StdRng::seed_from_u64));
}

/// True when a transaction failed only because of conditions (lost a race): the caller
/// re-reads and decides again.
pub fn is_condition_failure(e: &MetastoreError) -> bool {
    matches!(e, MetastoreError::ConditionFailed { .. })
}

/// Whether operation `index` of a cancelled transaction failed.
pub fn op_failed(e: &MetastoreError, index: usize) -> bool {
    e.failure_at(index).is_some()
}

pub fn failure_is_exists(e: &MetastoreError, index: usize) -> bool {
    matches!(e.failure_at(index), Some(FailureReason::Exists { .. }))
}

// ---- pagination ------------------------------------------------------------------------

/// Default and maximum API page sizes (docs/api.md, "Pagination").
/// Deletes keys unconditionally in transactions of at most 100 (idempotent).
pub async fn delete_items(store: &dyn Metastore, keys: Vec<Key>) -> Result<()> {
    for chunk in keys.chunks(flotilla_metastore::MAX_TRANSACTION_OPS) {
        let tx = Transaction {
            ops: chunk.iter().cloned().map(Op::delete).collect(),
        };
        let mut attempt = 0;
        loop {
            match store.transact(tx.clone()).await {
                Ok(()) => break,
                Err(e)
                    if (e.is_retryable() || e.is_outcome_unknown()) && attempt < MAX_ATTEMPTS =>
                {
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Reads every item of a partition with a strong read (for cascades).
pub async fn strong_scan(store: &dyn Metastore, pk: &str, prefix: &str) -> Result<Vec<Item>> {
    Ok(query_all(store, Query::new(pk, prefix, Consistency::Strong)).await?)
}

pub const DEFAULT_PAGE_SIZE: usize = 100;
pub const MAX_API_PAGE_SIZE: usize = 1000;
// A listing asks the store for one item more than its page (`list_page`).
const _: () = assert!(MAX_API_PAGE_SIZE < flotilla_metastore::MAX_PAGE_SIZE);

pub fn page_size(requested: Option<usize>) -> Result<usize> {
    match requested {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(n) if (1..=MAX_API_PAGE_SIZE).contains(&n) => Ok(n),
        Some(_) => Err(Error::invalid(format!(
            "page_size must be between 1 and {MAX_API_PAGE_SIZE}"
        ))),
    }
}

/// API page tokens are bound to the listing they came from (`scope`): the partition, the
/// prefix and any filter. A token from another listing, or a forged one, is `400`.
pub fn encode_page_token(scope: &str, last_sk: &str) -> String {
    let body = serde_json::json!({"s": scope_tag(scope), "k": last_sk});
    URL_SAFE_NO_PAD.encode(body.to_string())
}

fn scope_tag(scope: &str) -> String {
    hex::encode(&Sha256::digest(scope.as_bytes())[..8])
}

pub fn decode_page_token(scope: &str, prefix: &str, token: &str) -> Result<String> {
    let bad = || Error::invalid("malformed or foreign page_token");
    let raw = URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let s = v.get("s").and_then(Value::as_str).ok_or_else(bad)?;
    let k = v.get("k").and_then(Value::as_str).ok_or_else(bad)?;
    if s != scope_tag(scope) || !k.starts_with(prefix) {
        return Err(bad());
    }
    Ok(k.to_owned())
}

/// One API page of a prefix listing, keeping items `select` maps to `Some`. Each query asks
/// for one item more than the page, so a full page learns whether another follows from the
/// same query (one query per page while `select` keeps every item), and the last page of a
/// listing carries no token.
#[allow(clippy::too_many_arguments)]
pub async fn list_page(
    store: &dyn Metastore,
    pk: &str,
    prefix: &str,
    scope: &str,
    consistency: Consistency,
    size: usize,
    token: Option<&str>,
    mut select: impl FnMut(&Item) -> Result<Option<Value>>,
) -> Result<(Vec<Value>, Option<String>)> {
    let scope = format!("{scope}|{pk}|{prefix}");
    let mut after = match token {
        Some(t) => Some(PageToken::after_sort_key(&decode_page_token(
            &scope, prefix, t,
        )?)),
        None => None,
    };
    let mut out = Vec::new();
    let mut last_sk: Option<String> = None;
    loop {
        let q = Query::new(pk, prefix, consistency)
            .limit((size + 1).min(flotilla_metastore::MAX_PAGE_SIZE))
            .after(after.clone());
        let page = store.query(&q).await?;
        let exhausted = page.next.is_none();
        for item in &page.items {
            if out.len() == size {
                // There is at least one more candidate: continue after the last one shown.
                let k = last_sk.clone().unwrap_or_else(|| item.key.sk.clone());
                return Ok((out, Some(encode_page_token(&scope, &k))));
            }
            last_sk = Some(item.key.sk.clone());
            if let Some(v) = select(item)? {
                out.push(v);
            }
        }
        if exhausted {
            return Ok((out, None));
        }
        after = page
            .items
            .last()
            .map(|i| PageToken::after_sort_key(&i.key.sk))
            .or(page.next);
    }
}

/// The standard `{"items": [...], "next_page_token": ...}` body.
pub fn page_body(items: Vec<Value>, next: Option<String>) -> Value {
    serde_json::json!({"items": items, "next_page_token": next})
}

/// The page body of a plain listing (eventual reads): every record under `pk` and `prefix`,
/// decoded as `R` and shown by `show`.
pub async fn list_records<R: DeserializeOwned>(
    store: &dyn Metastore,
    pk: &str,
    prefix: &str,
    scope: &str,
    size: usize,
    token: Option<&str>,
    show: impl Fn(&R) -> Value,
) -> Result<Value> {
    let (items, next) = list_page(
        store,
        pk,
        prefix,
        scope,
        Consistency::Eventual,
        size,
        token,
        |item| Ok(Some(show(&decode::<R>(item)?))),
    )
    .await?;
    Ok(page_body(items, next))
}

#[cfg(test)]
mod tests {
    use flotilla_metastore::metrics::CountingMetastore;
    use flotilla_metastore::redb_store::RedbMetastore;

    use super::*;

    async fn store_with(n: usize) -> CountingMetastore<RedbMetastore> {
        let store = CountingMetastore::new(RedbMetastore::in_memory().unwrap());
        let ops: Vec<Op> = (0..n)
            .map(|i| Op::put(Key::new("p", format!("x/{i:05}")), b"{}".to_vec()))
            .collect();
        for chunk in ops.chunks(100) {
            store
                .transact(Transaction {
                    ops: chunk.to_vec(),
                })
                .await
                .unwrap();
        }
        store
    }

    async fn page(
        store: &CountingMetastore<RedbMetastore>,
        size: usize,
        token: Option<&str>,
    ) -> (usize, Option<String>, u64) {
        let before = store.snapshot().query;
        let (items, next) = list_page(
            store,
            "p",
            "x/",
            "test",
            Consistency::Eventual,
            size,
            token,
            |i| Ok(Some(Value::String(i.key.sk.clone()))),
        )
        .await
        .unwrap();
        (items.len(), next, store.snapshot().query - before)
    }

    /// A full page of the largest size costs one query, not a second one to learn whether
    /// more follows; the page that ends the listing carries no token.
    #[tokio::test]
    async fn a_full_page_costs_one_query_and_the_last_page_has_no_token() {
        let store = store_with(MAX_API_PAGE_SIZE + 1).await;
        let (n, next, queries) = page(&store, MAX_API_PAGE_SIZE, None).await;
        assert_eq!((n, queries), (MAX_API_PAGE_SIZE, 1));
        let (n, next, queries) = page(&store, MAX_API_PAGE_SIZE, next.as_deref()).await;
        assert_eq!((n, next, queries), (1, None, 1));

        let store = store_with(MAX_API_PAGE_SIZE).await;
        let (n, next, queries) = page(&store, MAX_API_PAGE_SIZE, None).await;
        assert_eq!((n, next, queries), (MAX_API_PAGE_SIZE, None, 1));
        let (n, next, queries) = page(&store, DEFAULT_PAGE_SIZE, None).await;
        assert_eq!((n, queries), (DEFAULT_PAGE_SIZE, 1));
        assert!(next.is_some());
    }
}
