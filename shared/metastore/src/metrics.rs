//! Request and item counters for any metastore.
//!
//! The directory design promises that a warm query replica's steady refresh costs one point read; these
//! counters are how that promise (and the cost of every other path) is observed. The counters
//! live behind an `Arc`, so the router's metrics endpoint can render them while the store is
//! in use. Labels are only the operation name: never keys, tenants or generations.
//!
//! The families are defined once in `flotilla_telemetry::catalog`; the same counters feed the
//! Prometheus page and, on Lambda, the CloudWatch EMF lines. Failure kinds and latencies go
//! to the process-wide registry, and every transaction runs in a `metastore.transact` span.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use flotilla_telemetry::catalog::{
    METASTORE_ERRORS, METASTORE_FAILURES, METASTORE_ITEMS_READ, METASTORE_ITEMS_WRITTEN,
    METASTORE_LATENCY, METASTORE_REQUESTS, MetricDef,
};
use flotilla_telemetry::{Sample, Source, Value};
use tracing::Instrument as _;

use crate::{Consistency, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction};

/// Shared counters. All counts are monotonic.
#[derive(Debug, Default)]
pub struct MetastoreCounters {
    get: AtomicU64,
    batch_get: AtomicU64,
    query: AtomicU64,
    count: AtomicU64,
    transact: AtomicU64,
    errors: AtomicU64,
    items_read: AtomicU64,
    items_written: AtomicU64,
}

/// A point-in-time copy of [`MetastoreCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub get: u64,
    pub batch_get: u64,
    pub query: u64,
    pub count: u64,
    pub transact: u64,
    /// Requests of any kind that returned an error.
    pub errors: u64,
    /// Items returned to callers by `get`, `batch_get` and `query`.
    pub items_read: u64,
    /// Puts and deletes of committed transactions (condition checks write nothing).
    pub items_written: u64,
}

impl MetricsSnapshot {
    /// Every request, of any operation.
    pub fn requests(&self) -> u64 {
        self.get + self.batch_get + self.query + self.count + self.transact
    }
}

impl MetastoreCounters {
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            get: load(&self.get),
            batch_get: load(&self.batch_get),
            query: load(&self.query),
            count: load(&self.count),
            transact: load(&self.transact),
            errors: load(&self.errors),
            items_read: load(&self.items_read),
            items_written: load(&self.items_written),
        }
    }

    /// The counters in the Prometheus text exposition format.
    pub fn render_prometheus(&self) -> String {
        flotilla_telemetry::prometheus::render(&[self])
    }

    fn record<T>(
        &self,
        request: &AtomicU64,
        op: &'static str,
        started: Instant,
        result: &Result<T, MetastoreError>,
        read: impl FnOnce(&T) -> usize,
    ) {
        request.fetch_add(1, Ordering::Relaxed);
        METASTORE_LATENCY.observe(&[op], started.elapsed());
        match result {
            Ok(value) => {
                self.items_read
                    .fetch_add(read(value) as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                METASTORE_FAILURES.inc(&[failure_kind(e)]);
            }
        }
    }
}

/// The `kind` label of a metastore error.
pub fn failure_kind(e: &MetastoreError) -> &'static str {
    match e {
        MetastoreError::ConditionFailed { .. } => "condition_failed",
        MetastoreError::Retryable { .. } => "retryable",
        MetastoreError::OutcomeUnknown { .. } => "outcome_unknown",
        MetastoreError::Corrupt { .. } => "corrupt",
        MetastoreError::Backend(_) => "backend",
        MetastoreError::TooManyOperations { .. }
        | MetastoreError::ItemTooLarge { .. }
        | MetastoreError::KeyTooLong { .. }
        | MetastoreError::Invalid(_)
        | MetastoreError::BadPageToken => "refused",
    }
}

impl Source for MetastoreCounters {
    fn families(&self) -> Vec<&'static MetricDef> {
        vec![
            &METASTORE_REQUESTS,
            &METASTORE_ERRORS,
            &METASTORE_ITEMS_READ,
            &METASTORE_ITEMS_WRITTEN,
        ]
    }

    fn collect(&self, out: &mut Vec<Sample>, _drain: bool) {
        let s = self.snapshot();
        let mut push = |def: &'static MetricDef, labels: Vec<&'static str>, n: u64| {
            out.push(Sample {
                def,
                labels,
                value: Value::Counter(n),
            });
        };
        for (op, n) in [
            ("get", s.get),
            ("batch_get", s.batch_get),
            ("query", s.query),
            ("count", s.count),
            ("transact", s.transact),
        ] {
            push(&METASTORE_REQUESTS, vec![op], n);
        }
        push(&METASTORE_ERRORS, vec![], s.errors);
        push(&METASTORE_ITEMS_READ, vec![], s.items_read);
        push(&METASTORE_ITEMS_WRITTEN, vec![], s.items_written);
    }
}

/// A metastore that counts what passes through it.
#[derive(Debug)]
pub struct CountingMetastore<M> {
    inner: M,
    counters: Arc<MetastoreCounters>,
}

impl<M: Metastore> CountingMetastore<M> {
    pub fn new(inner: M) -> Self {
        Self::with_counters(inner, Arc::new(MetastoreCounters::default()))
    }

    /// Counts into existing counters (e.g. one set shared by several stores).
    pub fn with_counters(inner: M, counters: Arc<MetastoreCounters>) -> Self {
        Self { inner, counters }
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The shared handle, for a metrics endpoint.
    pub fn counters(&self) -> Arc<MetastoreCounters> {
        Arc::clone(&self.counters)
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        self.counters.snapshot()
    }

    pub fn render_prometheus(&self) -> String {
        self.counters.render_prometheus()
    }
}

#[async_trait]
impl<M: Metastore> Metastore for CountingMetastore<M> {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        let started = Instant::now();
        let result = self.inner.get(key, consistency).await;
        self.counters
            .record(&self.counters.get, "get", started, &result, |item| {
                usize::from(item.is_some())
            });
        result
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        let started = Instant::now();
        let result = self.inner.batch_get(keys, consistency).await;
        self.counters.record(
            &self.counters.batch_get,
            "batch_get",
            started,
            &result,
            Vec::len,
        );
        result
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        let started = Instant::now();
        let result = self.inner.query(query).await;
        self.counters
            .record(&self.counters.query, "query", started, &result, |page| {
                page.items.len()
            });
        result
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        let started = Instant::now();
        let result = self.inner.count(pk, sk_prefix, consistency).await;
        self.counters
            .record(&self.counters.count, "count", started, &result, |_| 0);
        result
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let writes = tx
            .ops
            .iter()
            .filter(|op| !matches!(op, Op::Check { .. }))
            .count() as u64;
        let span = tracing::info_span!(
            "metastore.transact",
            ops = tx.ops.len(),
            writes,
            outcome = tracing::field::Empty
        );
        let started = Instant::now();
        let result = self.inner.transact(tx).instrument(span.clone()).await;
        span.record(
            "outcome",
            result.as_ref().map_or_else(failure_kind, |()| "committed"),
        );
        self.counters
            .record(&self.counters.transact, "transact", started, &result, |_| 0);
        if result.is_ok() {
            self.counters
                .items_written
                .fetch_add(writes, Ordering::Relaxed);
        }
        result
    }
}

/// Counts *round trips*: requests that had to wait for no other request of this store, i.e.
/// a request that starts while another is in flight overlaps it and adds no round trip. For
/// one API call measured alone this is its number of sequential metastore requests, the
/// latency floor on DynamoDB. Not meaningful across concurrent calls (it then undercounts).
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub struct RoundTripMetastore<M> {
    inner: M,
    in_flight: std::sync::atomic::AtomicUsize,
    trips: Arc<AtomicU64>,
}

#[cfg(any(test, feature = "testing"))]
impl<M: Metastore> RoundTripMetastore<M> {
    pub fn new(inner: M) -> Self {
        Self {
            inner,
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            trips: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The shared count, readable while the store is in use.
    pub fn trips(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.trips)
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    async fn timed<T>(&self, request: impl std::future::Future<Output = T>) -> T {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            self.trips.fetch_add(1, Ordering::SeqCst);
        }
        let out = request.await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

#[cfg(any(test, feature = "testing"))]
#[async_trait]
impl<M: Metastore> Metastore for RoundTripMetastore<M> {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        self.timed(self.inner.get(key, consistency)).await
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        self.timed(self.inner.batch_get(keys, consistency)).await
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        self.timed(self.inner.query(query)).await
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        self.timed(self.inner.count(pk, sk_prefix, consistency))
            .await
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.timed(self.inner.transact(tx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redb_store::RedbMetastore;
    use crate::{Condition, Query};

    const STRONG: Consistency = Consistency::Strong;

    fn store() -> CountingMetastore<RedbMetastore> {
        match RedbMetastore::in_memory() {
            Ok(s) => CountingMetastore::new(s),
            Err(e) => panic!("in-memory redb: {e}"),
        }
    }

    #[tokio::test]
    async fn counts_requests_and_items_per_operation() {
        let s = store();
        let handle = s.counters();
        let tx = Transaction::new()
            .with(Op::create(Key::new("m", "a"), vec![]))
            .with(Op::create(Key::new("m", "b"), vec![]))
            .with(Op::check(Key::new("m", "c"), Condition::Absent));
        assert!(s.transact(tx).await.is_ok());
        let refused = Transaction::new().with(Op::create(Key::new("m", "a"), vec![]));
        assert!(s.transact(refused).await.is_err());
        assert!(matches!(
            s.get(&Key::new("m", "a"), STRONG).await,
            Ok(Some(_))
        ));
        assert!(matches!(
            s.get(&Key::new("m", "zz"), STRONG).await,
            Ok(None)
        ));
        let keys = [Key::new("m", "a"), Key::new("m", "b"), Key::new("m", "c")];
        assert_eq!(
            s.batch_get(&keys, STRONG).await.map(|v| v.len()).ok(),
            Some(2)
        );
        assert_eq!(
            s.query(&Query::new("m", "", STRONG))
                .await
                .map(|p| p.items.len())
                .ok(),
            Some(2)
        );
        assert_eq!(s.count("m", "", STRONG).await.ok(), Some(2));

        let snap = handle.snapshot();
        assert_eq!(
            snap,
            MetricsSnapshot {
                get: 2,
                batch_get: 1,
                query: 1,
                count: 1,
                transact: 2,
                errors: 1,
                items_read: 1 + 2 + 2,
                items_written: 2,
            }
        );
        assert_eq!(snap.requests(), 7);
    }

    #[tokio::test]
    async fn renders_prometheus_text() {
        let s = store();
        assert!(s.get(&Key::new("m", "a"), STRONG).await.is_ok());
        let text = s.render_prometheus();
        for line in [
            "flotilla_metastore_requests_total{op=\"get\"} 1",
            "flotilla_metastore_requests_total{op=\"transact\"} 0",
            "flotilla_metastore_items_read_total 0",
            "flotilla_metastore_items_written_total 0",
            "# TYPE flotilla_metastore_requests_total counter",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    #[tokio::test]
    async fn round_trips_count_sequential_requests() {
        let s = match RedbMetastore::in_memory() {
            Ok(s) => RoundTripMetastore::new(s),
            Err(e) => panic!("in-memory redb: {e}"),
        };
        let trips = s.trips();
        let a = Key::new("m", "a");
        assert!(s.get(&a, STRONG).await.is_ok());
        assert!(s.batch_get(std::slice::from_ref(&a), STRONG).await.is_ok());
        assert!(
            s.transact(Transaction::new().with(Op::put(a, vec![])))
                .await
                .is_ok()
        );
        assert_eq!(trips.load(Ordering::SeqCst), 3, "three in sequence");
    }
}
