#![forbid(unsafe_code)]
//! Catalog directory generations, the authority marker and the query replica.
//!
//! A query replica (a warm `functions/query` container, or the cache inside `flotilla serve`)
//! keeps the complete table-name/schema directory of a catalog. Two reserved items let it
//! refresh with one strongly consistent point read while nothing changed:
//!
//! - the catalog's **directory generation** (`CAT#{id}` / `DIRGEN`): an opaque random value
//!   that every create, exact delete, rename/move and schema change of a table or view
//!   replaces in the *same transaction* as the conditional mutation ([`directory_bump`]).
//!   A failed condition therefore changes neither. Metadata-location and property updates
//!   do not signal, because they cannot change names or schemas;
//! - the deployment-wide **authority marker** (`SYSTEM` / `DIRECTORY_AUTHORITY`), written
//!   once by [`finalize`] after the operator acknowledged that every writer bumps the
//!   generation and that writes are quiescent. It is put-if-absent; nothing deletes it.
//!
//! Before the marker exists a writer that does not bump the generation may still be running,
//! so every refresh scans. After it exists, the generation is authoritative: equal means the
//! directory did not change. The generation is control data: it never leaves this module
//! (private fields with redacted `Debug`), so it cannot reach API results, logs or metrics.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use flotilla_domain::keys;
use flotilla_domain::model::{RelationKind, RelationRecord, ViewDefinition};
use flotilla_metastore::{Consistency, MAX_PAGE_SIZE, Metastore, MetastoreError, Op, Query};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flotilla_base::MetricsRenderer;
use flotilla_base::clock::{Clock, rfc3339_from_ms};
use flotilla_base::error::{Error, Result};
use flotilla_base::store::to_body;

/// How many times one refresh retries its full scan because directory DDL moved the
/// generation underneath it: a first scan plus up to three retries, so at most
/// [`MAX_SCAN_ATTEMPTS`] scans before it gives up.
pub const MAX_SCAN_RETRIES: usize = 3;
/// The scans one refresh may spend: the first and [`MAX_SCAN_RETRIES`] retries.
pub const MAX_SCAN_ATTEMPTS: usize = 1 + MAX_SCAN_RETRIES;

// ---- the generation ---------------------------------------------------------------------

/// The body of a directory generation item: opaque, replaced (never incremented) on every
/// directory change, so equality is the only question a replica can ask of it. The field is
/// private and `Debug` is redacted so the value cannot be logged by accident.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryGeneration {
    value: String,
}

impl DirectoryGeneration {
    /// A fresh random value (128 bits): a generation never repeats, so no ABA is possible.
    fn fresh() -> Self {
        use rand::RngCore;
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        Self {
            value: hex::encode(bytes),
        }
    }
}

impl fmt::Debug for DirectoryGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DirectoryGeneration(<redacted>)")
    }
}

/// The operation that replaces a catalog's directory generation. Writers add it to the same
/// transaction as the conditional table/view mutation it signals.
pub fn directory_bump(catalog_id: &str) -> Result<Op> {
    Ok(Op::put(
        keys::directory_generation(catalog_id),
        to_body(&DirectoryGeneration::fresh())?,
    ))
}

/// A generation as a replica observed it: the raw item body, or absent (no directory DDL
/// since the catalog was created, or only legacy writers). Compared, never decoded or shown.
/// (Not the reconciler's `ObservedRecords`, the records a reconcile run fences on.)
#[derive(Clone, PartialEq, Eq)]
struct ObservedGeneration(Option<Vec<u8>>);

impl fmt::Debug for ObservedGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ObservedGeneration(<redacted>)")
    }
}

async fn read_generation(
    store: &dyn Metastore,
    catalog_id: &str,
) -> Result<ObservedGeneration, MetastoreError> {
    let item = store
        .get(&keys::directory_generation(catalog_id), Consistency::Strong)
        .await?;
    Ok(ObservedGeneration(item.map(|i| i.body)))
}

// ---- the authority marker ---------------------------------------------------------------

/// Body of the authority marker.
#[derive(Serialize, Deserialize)]
pub struct AuthorityRecord {
    pub enabled_at: String,
    pub acknowledged_writer_rollout: bool,
    pub acknowledged_quiescent_writes: bool,
}

/// Input of catalog-finalize (HTTP body and `functions/finalize` event). Both default to
/// `false`, so an omitted acknowledgement is refused like a `false` one.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalizeRequest {
    #[serde(default)]
    pub acknowledge_writer_rollout: bool,
    #[serde(default)]
    pub acknowledge_quiescent_writes: bool,
}

/// What catalog-finalize answers: the same body on the first and on every later call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthorityStatus {
    /// Always `"ENABLED"`: finalize either enables authority or refuses.
    pub authority: &'static str,
    /// When the marker was first written (RFC 3339).
    pub enabled_at: String,
}

impl AuthorityStatus {
    pub fn from_record(rec: &AuthorityRecord) -> Self {
        Self {
            authority: "ENABLED",
            enabled_at: rec.enabled_at.clone(),
        }
    }
}

/// Reads the authority marker strongly: its absence decides whether replicas must scan.
pub async fn authority_enabled(store: &dyn Metastore) -> Result<bool, MetastoreError> {
    Ok(store
        .get(&keys::directory_authority(), Consistency::Strong)
        .await?
        .is_some())
}

// ---- snapshots --------------------------------------------------------------------------

/// One table or view as a query engine needs it to resolve a name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DirectoryEntry {
    pub namespace: Vec<String>,
    pub name: String,
    pub kind: RelationKind,
    pub id: String,
    pub schema: Value,
    /// Tables: the table format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Views: SQL per dialect.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub definitions: Vec<ViewDefinition>,
    /// Views: the namespace unqualified names in the SQL resolve in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<Vec<String>>,
    /// An overlay manages the relation (the Iceberg endpoint lists such tables only when
    /// their capture made them query-visible). Not part of the directory's answers.
    #[serde(skip)]
    pub managed: bool,
}

impl DirectoryEntry {
    fn from_record(rec: RelationRecord) -> Self {
        Self {
            namespace: rec.namespace.segments().to_vec(),
            name: rec.name,
            kind: rec.kind,
            id: rec.id,
            schema: rec.schema,
            format: rec.format,
            definitions: rec.definitions,
            default_namespace: rec.default_namespace,
            managed: rec.managed_by.is_some(),
        }
    }
}

/// What a snapshot's freshness rests on.
#[derive(Clone, PartialEq, Eq)]
enum Basis {
    /// Taken before the replica saw the authority marker: a later refresh must scan.
    Legacy,
    /// Taken after it, between two equal reads of this generation.
    Authoritative(ObservedGeneration),
}

impl fmt::Debug for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Basis::Legacy => f.write_str("Legacy"),
            Basis::Authoritative(_) => f.write_str("Authoritative(<redacted>)"),
        }
    }
}

/// An immutable, complete directory of one catalog as of one instant. Replicas publish a new
/// `Arc` on every reload and never modify a published one, so a reader holding a snapshot
/// never sees a mixture of two directory states.
#[derive(Debug)]
pub struct DirectorySnapshot {
    /// Every table and view, ordered by namespace then name.
    pub entries: Vec<DirectoryEntry>,
    /// When the scan that produced it completed (epoch ms).
    pub taken_at_ms: i64,
    basis: Basis,
}

impl DirectorySnapshot {
    /// Whether the snapshot was taken in authoritative mode (safe to reuse while the
    /// generation is unchanged).
    pub fn authoritative(&self) -> bool {
        matches!(self.basis, Basis::Authoritative(_))
    }
}

// ---- the replica ------------------------------------------------------------------------

/// How a successful refresh went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// Authoritative and the generation was equal: no scan.
    Unchanged,
    /// A full scan published a new snapshot.
    Reloaded,
}

/// Why a refresh failed. The replica keeps serving its last-good snapshot.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// Directory DDL moved the generation during every one of the allowed scans.
    #[error("the directory changed during {attempts} consecutive scans")]
    GenerationMoving { attempts: usize },
    /// A metastore read failed (including an undecodable relation item).
    #[error("directory refresh failed: {0}")]
    Store(#[from] MetastoreError),
}

impl RefreshError {
    /// A short, identifier-free code for health output.
    pub fn code(&self) -> &'static str {
        match self {
            RefreshError::GenerationMoving { .. } => "GENERATION_MOVING",
            RefreshError::Store(e) if e.is_retryable() || e.is_outcome_unknown() => "UNAVAILABLE",
            RefreshError::Store(_) => "STORE_ERROR",
        }
    }
}

impl From<RefreshError> for Error {
    fn from(e: RefreshError) -> Self {
        match e {
            RefreshError::GenerationMoving { .. } => Error::unavailable(e.to_string()),
            RefreshError::Store(s) => s.into(),
        }
    }
}

/// Refresh mode of a replica, shown in health output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplicaMode {
    /// No authority marker seen yet: every refresh scans.
    LegacyScan,
    /// The snapshot rests on the generation: steady refreshes are one point read.
    Authoritative,
}

/// The replica's local health for one catalog, never mixed into the entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaHealth {
    pub mode: ReplicaMode,
    /// When the snapshot's scan completed.
    pub taken_at: String,
    /// The last time a refresh confirmed (or produced) the served snapshot.
    pub refreshed_at: String,
    /// Milliseconds since `refreshed_at`: grows while refreshes fail.
    pub age_ms: i64,
    /// The latest refresh failed; the entries are the last-good snapshot.
    pub stale: bool,
    pub consecutive_failures: u32,
    /// Code of the latest failure while stale (`GENERATION_MOVING`, `UNAVAILABLE`, ...).
    pub last_error: Option<&'static str>,
}

/// A snapshot and the health of the replica that serves it.
#[derive(Clone, Debug)]
pub struct DirectoryView {
    pub snapshot: Arc<DirectorySnapshot>,
    pub health: ReplicaHealth,
}

impl DirectoryView {
    /// The API representation (`GET {A}/catalogs/{id}/directory`, `functions/query`).
    pub fn to_api(&self, catalog_id: &str) -> Value {
        json!({
            "catalog_id": catalog_id,
            "entries": self.snapshot.entries,
            "health": self.health,
        })
    }
}

#[derive(Default)]
struct Replica {
    snapshot: Option<Arc<DirectorySnapshot>>,
    refreshed_at_ms: i64,
    consecutive_failures: u32,
    last_error: Option<&'static str>,
}

#[derive(Default)]
struct RefreshCounters {
    unchanged: AtomicU64,
    reloaded: AtomicU64,
    failed: AtomicU64,
    stale_catalogs: AtomicI64,
}

/// The query replica: per catalog, the last-good immutable snapshot and its health.
///
/// Refreshes of one catalog are serialized (one in flight per catalog), so an older scan can
/// never overwrite a newer snapshot. Readers of different catalogs do not contend.
pub struct DirectoryCache {
    /// The authority marker is monotonic: once seen, never read again.
    authority_seen: AtomicBool,
    replicas: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<Replica>>>>,
    counters: RefreshCounters,
    page_size: usize,
}

impl Default for DirectoryCache {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for DirectoryCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryCache")
            .field(
                "authority_seen",
                &self.authority_seen.load(Ordering::Relaxed),
            )
            .field("page_size", &self.page_size)
            .finish_non_exhaustive()
    }
}

impl DirectoryCache {
    /// Whether this replica has seen the authority marker (monotonic: once seen, never
    /// read again).
    pub fn authority_seen(&self) -> bool {
        self.authority_seen.load(Ordering::Acquire)
    }

    pub fn new() -> Self {
        Self {
            authority_seen: AtomicBool::new(false),
            replicas: StdMutex::new(HashMap::new()),
            counters: RefreshCounters::default(),
            page_size: MAX_PAGE_SIZE,
        }
    }

    /// Scans in pages of `n` items (1..=1000); small pages let tests interleave DDL between
    /// the pages of one scan.
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = n.clamp(1, MAX_PAGE_SIZE);
        self
    }

    fn replica(&self, catalog_id: &str) -> Arc<tokio::sync::Mutex<Replica>> {
        let mut map = self.replicas.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(catalog_id.to_owned()).or_default())
    }

    async fn authoritative(&self, store: &dyn Metastore) -> Result<bool, MetastoreError> {
        if self.authority_seen.load(Ordering::Acquire) {
            return Ok(true);
        }
        let seen = authority_enabled(store).await?;
        if seen {
            self.authority_seen.store(true, Ordering::Release);
        }
        Ok(seen)
    }

    /// Brings the replica of `catalog_id` up to date (see the module docs for the protocol).
    /// On error the last-good snapshot stays published and is reported stale.
    pub async fn refresh(
        &self,
        store: &dyn Metastore,
        clock: &dyn Clock,
        catalog_id: &str,
    ) -> Result<RefreshOutcome, RefreshError> {
        self.refresh_with(store, clock, catalog_id, None).await
    }

    /// [`refresh`](Self::refresh) starting from reads the caller already made (in the same
    /// round trip as its own), so a warm, unchanged refresh reads nothing more.
    async fn refresh_with(
        &self,
        store: &dyn Metastore,
        clock: &dyn Clock,
        catalog_id: &str,
        pre: Option<Prefetched>,
    ) -> Result<RefreshOutcome, RefreshError> {
        let replica = self.replica(catalog_id);
        let mut r = replica.lock().await;
        let result = self
            .refresh_locked(&mut r, store, clock, catalog_id, pre)
            .await;
        let was_stale = r.last_error.is_some();
        match &result {
            Ok(outcome) => {
                r.refreshed_at_ms = clock.now_ms();
                r.consecutive_failures = 0;
                r.last_error = None;
                if was_stale {
                    self.counters.stale_catalogs.fetch_sub(1, Ordering::Relaxed);
                }
                let counter = match outcome {
                    RefreshOutcome::Unchanged => &self.counters.unchanged,
                    RefreshOutcome::Reloaded => &self.counters.reloaded,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(catalog_id, outcome = ?outcome, "directory refreshed");
            }
            Err(e) => {
                r.consecutive_failures = r.consecutive_failures.saturating_add(1);
                r.last_error = Some(e.code());
                if !was_stale {
                    self.counters.stale_catalogs.fetch_add(1, Ordering::Relaxed);
                }
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    catalog_id,
                    code = e.code(),
                    error = %e,
                    consecutive_failures = r.consecutive_failures,
                    serving_last_good = r.snapshot.is_some(),
                    "directory refresh failed"
                );
            }
        }
        result
    }

    async fn refresh_locked(
        &self,
        r: &mut Replica,
        store: &dyn Metastore,
        clock: &dyn Clock,
        catalog_id: &str,
        pre: Option<Prefetched>,
    ) -> Result<RefreshOutcome, RefreshError> {
        if pre.as_ref().is_some_and(|p| p.authority == Some(true)) {
            self.authority_seen.store(true, Ordering::Release);
        }
        let authoritative = self.authoritative(store).await?;
        let mut start = match pre {
            Some(p) => p.generation,
            None => read_generation(store, catalog_id).await?,
        };
        // Warm and authoritative: an equal generation proves nothing listed changed.
        if authoritative
            && let Some(Basis::Authoritative(current)) = r.snapshot.as_ref().map(|s| &s.basis)
            && *current == start
        {
            return Ok(RefreshOutcome::Unchanged);
        }
        // Changed, cold, or legacy mode: a full scan between two equal generation reads. Any
        // directory DDL committed during the scan replaced the generation in the same
        // transaction, so an equal second read proves the scan saw one directory state.
        for _ in 0..MAX_SCAN_ATTEMPTS {
            let entries = self.scan(store, catalog_id).await?;
            let end = read_generation(store, catalog_id).await?;
            if end == start {
                let basis = if authoritative {
                    Basis::Authoritative(end)
                } else {
                    Basis::Legacy
                };
                r.snapshot = Some(Arc::new(DirectorySnapshot {
                    entries,
                    taken_at_ms: clock.now_ms(),
                    basis,
                }));
                return Ok(RefreshOutcome::Reloaded);
            }
            // The candidate may mix two states: discard it. The later read starts the retry.
            start = end;
        }
        Err(RefreshError::GenerationMoving {
            attempts: MAX_SCAN_ATTEMPTS,
        })
    }

    async fn scan(
        &self,
        store: &dyn Metastore,
        catalog_id: &str,
    ) -> Result<Vec<DirectoryEntry>, MetastoreError> {
        let mut q = Query::new(
            keys::catalog_pk(catalog_id),
            keys::RELATION_PREFIX,
            Consistency::Strong,
        )
        .limit(self.page_size);
        let mut entries = Vec::new();
        loop {
            let page = store.query(&q).await?;
            for item in &page.items {
                entries.push(DirectoryEntry::from_record(item.json::<RelationRecord>()?));
            }
            match page.next {
                Some(next) => q.start_after = Some(next),
                None => return Ok(entries),
            }
        }
    }

    /// The published snapshot of `catalog_id` and the replica's health, without touching
    /// the store. `None` before the first successful refresh.
    pub async fn view(&self, catalog_id: &str, now_ms: i64) -> Option<DirectoryView> {
        let replica = self.replica(catalog_id);
        let r = replica.lock().await;
        let snapshot = Arc::clone(r.snapshot.as_ref()?);
        let health = ReplicaHealth {
            mode: if snapshot.authoritative() {
                ReplicaMode::Authoritative
            } else {
                ReplicaMode::LegacyScan
            },
            taken_at: rfc3339_from_ms(snapshot.taken_at_ms),
            refreshed_at: rfc3339_from_ms(r.refreshed_at_ms),
            age_ms: now_ms.saturating_sub(r.refreshed_at_ms).max(0),
            stale: r.last_error.is_some(),
            consecutive_failures: r.consecutive_failures,
            last_error: r.last_error,
        };
        Some(DirectoryView { snapshot, health })
    }

    /// Refreshes, then answers the snapshot. A failed refresh still answers the last-good
    /// snapshot (marked stale); only a replica that never loaded answers the error.
    pub async fn read(
        &self,
        store: &dyn Metastore,
        clock: &dyn Clock,
        catalog_id: &str,
    ) -> Result<DirectoryView, RefreshError> {
        self.read_with(store, clock, catalog_id, None).await
    }

    pub async fn read_with(
        &self,
        store: &dyn Metastore,
        clock: &dyn Clock,
        catalog_id: &str,
        pre: Option<Prefetched>,
    ) -> Result<DirectoryView, RefreshError> {
        let refreshed = self.refresh_with(store, clock, catalog_id, pre).await;
        match (self.view(catalog_id, clock.now_ms()).await, refreshed) {
            (Some(view), _) => Ok(view),
            (None, Err(e)) => Err(e),
            (None, Ok(_)) => Err(RefreshError::Store(MetastoreError::Invalid(
                "a successful refresh published no snapshot".into(),
            ))),
        }
    }

    /// Refresh outcome counts and the number of stale catalogs, as Prometheus text. Labels
    /// carry only the outcome: never a catalog, a name or a generation.
    pub fn render_prometheus(&self) -> String {
        flotilla_telemetry::prometheus::render(&[self])
    }

    /// A renderer for `AppState::with_metrics`.
    pub fn metrics_renderer(self: &Arc<Self>) -> MetricsRenderer {
        let me = Arc::clone(self);
        Arc::new(move || me.render_prometheus())
    }
}

/// The replica's counters as catalogue metrics (Prometheus page and EMF lines).
impl flotilla_telemetry::Source for DirectoryCache {
    fn families(&self) -> Vec<&'static flotilla_telemetry::catalog::MetricDef> {
        use flotilla_telemetry::catalog::{DIRECTORY_REFRESHES, DIRECTORY_STALE};
        vec![&DIRECTORY_REFRESHES, &DIRECTORY_STALE]
    }

    fn collect(&self, out: &mut Vec<flotilla_telemetry::Sample>, _drain: bool) {
        use flotilla_telemetry::catalog::{DIRECTORY_REFRESHES, DIRECTORY_STALE};
        use flotilla_telemetry::{Sample, Value as V};
        let c = &self.counters;
        for (outcome, n) in [
            ("unchanged", &c.unchanged),
            ("reloaded", &c.reloaded),
            ("failed", &c.failed),
        ] {
            out.push(Sample {
                def: &DIRECTORY_REFRESHES,
                labels: vec![outcome],
                value: V::Counter(n.load(Ordering::Relaxed)),
            });
        }
        out.push(Sample {
            def: &DIRECTORY_STALE,
            labels: vec![],
            value: V::Gauge(c.stale_catalogs.load(Ordering::Relaxed).max(0)),
        });
    }
}

// ---- the service ------------------------------------------------------------------------

/// Strong reads a caller made before refreshing: the generation and, when it asked, whether
/// the authority marker exists. Both are only ever read strongly, so starting a refresh from
/// them is the same as reading them first inside it.
pub struct Prefetched {
    generation: ObservedGeneration,
    authority: Option<bool>,
}

impl Prefetched {
    /// The generation item's body as read (`None`: absent) and, when the caller asked,
    /// whether the authority marker exists.
    pub fn new(generation: Option<Vec<u8>>, authority: Option<bool>) -> Self {
        Self {
            generation: ObservedGeneration(generation),
            authority,
        }
    }
}
