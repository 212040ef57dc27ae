//! A test decorator whose eventually consistent reads lag: after [`StaleReadsMetastore::freeze`]
//! every `Eventual` read answers the state as it was at the freeze, while `Strong` reads and
//! writes go to the live store. A path that must read strongly (a dependency check, a cascade,
//! a fence) and reads eventually instead then decides on stale data, and the test that drives
//! it through this decorator fails; a path that reads strongly is unaffected.
//!
//! The lag is computed, not replicated: the first write of each key after the freeze records
//! the key's pre-image (read strongly from the inner store just before), and eventual reads
//! answer pre-images for those keys. Queries and counts read the live partition and patch it
//! with the pre-images, so they are meant for test-sized data.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;

use crate::{
    Consistency, Item, Key, MAX_PAGE_SIZE, Metastore, MetastoreError, Page, PageToken, Query,
    Transaction, query_all,
};

/// See the module documentation.
pub struct StaleReadsMetastore<M> {
    inner: M,
    frozen: AtomicBool,
    /// Key -> the item before the first write after the freeze (`None`: it did not exist).
    before: Mutex<BTreeMap<Key, Option<Item>>>,
    stale_answers: AtomicU64,
}

impl<M: Metastore> StaleReadsMetastore<M> {
    pub fn new(inner: M) -> Self {
        Self {
            inner,
            frozen: AtomicBool::new(false),
            before: Mutex::new(BTreeMap::new()),
            stale_answers: AtomicU64::new(0),
        }
    }

    /// From now on, eventual reads answer the state as of this call.
    pub fn freeze(&self) {
        self.lock().clear();
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Eventual reads see the live state again.
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
        self.lock().clear();
    }

    /// Eventual reads that answered something other than the live state.
    pub fn stale_answers(&self) -> u64 {
        self.stale_answers.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Option<Item>>> {
        self.before.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lagging(&self, consistency: Consistency) -> bool {
        consistency == Consistency::Eventual && self.frozen.load(Ordering::SeqCst)
    }

    /// The stale view of one key: `Some(answer)` when it was written since the freeze.
    fn stale(&self, key: &Key) -> Option<Option<Item>> {
        self.lock().get(key).cloned()
    }

    /// The partition `pk` under `prefix` as of the freeze, in sort-key order.
    async fn stale_partition(&self, pk: &str, prefix: &str) -> Result<Vec<Item>, MetastoreError> {
        let live = query_all(&self.inner, Query::new(pk, prefix, Consistency::Strong)).await?;
        let mut by_sk: BTreeMap<String, Item> =
            live.into_iter().map(|i| (i.key.sk.clone(), i)).collect();
        let before = self.lock().clone();
        let mut changed = false;
        for (key, old) in before {
            if key.pk != pk || !key.sk.starts_with(prefix) {
                continue;
            }
            changed = true;
            match old {
                Some(item) => by_sk.insert(key.sk.clone(), item),
                None => by_sk.remove(&key.sk),
            };
        }
        if changed {
            self.stale_answers.fetch_add(1, Ordering::SeqCst);
        }
        Ok(by_sk.into_values().collect())
    }
}

#[async_trait]
impl<M: Metastore> Metastore for StaleReadsMetastore<M> {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        if self.lagging(consistency)
            && let Some(old) = self.stale(key)
        {
            self.stale_answers.fetch_add(1, Ordering::SeqCst);
            return Ok(old);
        }
        self.inner.get(key, consistency).await
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        let live = self.inner.batch_get(keys, consistency).await?;
        if !self.lagging(consistency) {
            return Ok(live);
        }
        let mut out = Vec::with_capacity(live.len());
        let before = self.lock().clone();
        for key in keys {
            match before.get(key) {
                Some(old) => {
                    self.stale_answers.fetch_add(1, Ordering::SeqCst);
                    out.extend(old.clone());
                }
                None => out.extend(live.iter().find(|i| &i.key == key).cloned()),
            }
        }
        Ok(out)
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        if !self.lagging(query.consistency) {
            return self.inner.query(query).await;
        }
        let items = self.stale_partition(&query.pk, &query.sk_prefix).await?;
        let after = match &query.start_after {
            Some(t) => Some(crate::codec::decode_token(t, &query.sk_prefix)?),
            None => None,
        };
        let limit = query.limit.clamp(1, MAX_PAGE_SIZE);
        let rest: Vec<Item> = items
            .into_iter()
            .filter(|i| after.as_ref().is_none_or(|a| i.key.sk > *a))
            .collect();
        let more = rest.len() > limit;
        let page: Vec<Item> = rest.into_iter().take(limit).collect();
        let next = if more {
            page.last().map(|i| PageToken::after_sort_key(&i.key.sk))
        } else {
            None
        };
        Ok(Page { items: page, next })
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        if !self.lagging(consistency) {
            return self.inner.count(pk, sk_prefix, consistency).await;
        }
        Ok(self.stale_partition(pk, sk_prefix).await?.len() as u64)
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        if self.frozen.load(Ordering::SeqCst) {
            for op in &tx.ops {
                let key = op.key();
                if self.lock().contains_key(key) {
                    continue;
                }
                let old = self.inner.get(key, Consistency::Strong).await?;
                self.lock().entry(key.clone()).or_insert(old);
            }
        }
        self.inner.transact(tx).await
    }
}
