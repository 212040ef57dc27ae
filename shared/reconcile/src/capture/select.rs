//! Which tables a capture job captures, decided from stored state alone (`docs/capture.md`):
//! the overlay observed and fenced as a reconciliation observes it, the target catalog's
//! relations and capture pointers read strongly, and no upstream request. Every host
//! compiles it, capture runner or not: the reconciler plans a job after each reconciliation
//! and queues it for the capture workers only when some table needs them.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flotilla_base::store::{Versioned, read};
use flotilla_domain::keys;
use flotilla_domain::model::{CatalogRecord, RelationKind, RelationRecord};
use flotilla_metastore::{Consistency, Query, query_all};

use super::record::{CapturePointer, ValidationState};
use crate::publish::Fence;
use crate::{ObservedRecords, ReconcileError, observe};
use flotilla_services::state::AppState;

/// A table's time budget: a table not captured within it fails `CAPTURE_DEADLINE`
/// (retryable; `docs/reliability.md`, "Capture has time budgets").
pub const TABLE_BUDGET: Duration = Duration::from_secs(120);

/// A job's time budget (the service clock from the job's start): once spent, the job starts
/// no further table and leaves the rest to the next run.
pub const JOB_BUDGET: Duration = Duration::from_secs(600);

/// The error code of a table whose capture ran out of time, or was not started because the
/// job's budget was spent.
pub const DEADLINE: &str = "CAPTURE_DEADLINE";

/// What ends a table's time budget: a future that completes after the duration (tokio's
/// timer; tests inject one they fire themselves).
#[derive(Clone)]
pub struct Timer(
    #[allow(clippy::type_complexity)]
    pub  Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>,
);

impl Default for Timer {
    fn default() -> Self {
        Self(Arc::new(|d| Box::pin(tokio::time::sleep(d))))
    }
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Timer")
    }
}

/// Tunables of one capture job.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Validate every table again, changed or not (describing an integration may ask for it).
    pub revalidate: bool,
    /// Parquet footers read concurrently per table.
    pub file_concurrency: usize,
    /// Data files of one snapshot a capture accepts.
    pub max_files: usize,
    /// When set, the job refuses to start unless the overlay is at this generation.
    pub expect_generation: Option<u64>,
    /// A test seam: runs once a table's attempt marker is durable, before its files are read
    /// ([`FaultHook`](super::attempt::FaultHook)). `None` outside tests.
    pub fault: Option<super::attempt::FaultHook>,
    /// Time one table may take ([`TABLE_BUDGET`]).
    pub table_budget: Duration,
    /// Time one job may take before it stops starting tables ([`JOB_BUDGET`]).
    pub job_budget: Duration,
    /// What measures a table's budget.
    pub timer: Timer,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        Self {
            revalidate: false,
            file_concurrency: 16,
            max_files: 100_000,
            expect_generation: None,
            fault: None,
            table_budget: TABLE_BUDGET,
            job_budget: JOB_BUDGET,
            timer: Timer::default(),
        }
    }
}

/// One table a job will capture: the relation as the plan read it and its pointer.
pub struct PlannedTable {
    pub relation: Versioned<RelationRecord>,
    pub pointer: Option<Versioned<CapturePointer>>,
}

/// What a job observed and decided before any upstream request.
pub struct CapturePlan {
    pub account: String,
    pub observed: ObservedRecords,
    pub fence: Fence,
    pub catalog: CatalogRecord,
    /// Tables whose upstream metadata location changed (or every table, on revalidation).
    pub tables: Vec<PlannedTable>,
    /// Tables whose capture is current: no upstream request, no write.
    pub unchanged: u64,
    /// Pointers of this overlay whose relation is gone.
    pub orphans: Vec<Versioned<CapturePointer>>,
}

impl CapturePlan {
    /// Whether running the plan would do anything: a table to capture or a pointer to retire.
    pub fn has_work(&self) -> bool {
        !self.tables.is_empty() || !self.orphans.is_empty()
    }
}

/// The relation format capture reads as Delta.
pub const DELTA: &str = "DELTA";

/// The relation property the Delta Sharing provider records the table version in.
pub use crate::plan::SHARING_VERSION_PROPERTY;

/// Whether a relation is a Delta table this overlay manages (capture reads its log or its
/// sharing query).
pub fn delta_kind(rec: &RelationRecord, overlay_id: &str) -> bool {
    rec.kind == RelationKind::Table
        && rec.format.as_deref() == Some(DELTA)
        && rec
            .managed_by
            .as_ref()
            .is_some_and(|m| m.overlay_id == overlay_id)
}

/// The Delta version a relation states (Delta Sharing records it at reconciliation).
pub fn stated_version(rec: &RelationRecord) -> Option<i64> {
    rec.properties
        .get(SHARING_VERSION_PROPERTY)
        .and_then(|v| v.trim().parse().ok())
}

/// Whether a pointer captured the version the relation states. A relation that states no
/// version (Unity) is never current by the plan alone: its log is probed.
pub fn is_current(rec: &RelationRecord, p: &CapturePointer) -> bool {
    p.format == DELTA && stated_version(rec).is_some_and(|v| p.snapshot_id == Some(v))
}

/// Whether a relation is something capture records: an Iceberg table this overlay manages.
pub fn iceberg_kind(rec: &RelationRecord, overlay_id: &str) -> bool {
    rec.kind == RelationKind::Table
        && rec.format.as_deref() == Some("ICEBERG")
        && rec.metadata_location.is_some()
        && rec
            .managed_by
            .as_ref()
            .is_some_and(|m| m.overlay_id == overlay_id)
}

/// Plans a job: observes the overlay (refusing a paused, missing or fenced one, as a
/// reconciliation does) and decides, from stored state only, which tables need capture.
pub async fn plan(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    opts: &CaptureOptions,
) -> Result<CapturePlan, ReconcileError> {
    let observed = observe(state, account, overlay_id).await?;
    if let Some(g) = opts.expect_generation
        && observed.overlay.generation != g
    {
        return Err(ReconcileError::FenceLost);
    }
    let fence = Fence::establish(state, account, &observed).await?;
    let store = state.store.as_ref();
    let catalog_id = observed.overlay.catalog_id.clone();
    let Some(catalog) = read::<CatalogRecord>(
        store,
        keys::catalog(account, &catalog_id),
        Consistency::Strong,
    )
    .await?
    else {
        return Err(ReconcileError::Deleting("the target catalog".into()));
    };
    let pk = keys::catalog_pk(&catalog_id);
    let mut pointers: HashMap<String, Versioned<CapturePointer>> = HashMap::new();
    for item in query_all(
        store,
        Query::new(pk.clone(), keys::CAPTURE_PREFIX, Consistency::Strong),
    )
    .await?
    {
        let p: CapturePointer = item.json()?;
        if p.overlay_id == observed.overlay.id {
            pointers.insert(
                p.relation_id.clone(),
                Versioned {
                    value: p,
                    version: item.version,
                },
            );
        }
    }
    let mut tables = Vec::new();
    let mut unchanged = 0;
    for item in query_all(
        store,
        Query::new(pk, keys::RELATION_PREFIX, Consistency::Strong),
    )
    .await?
    {
        let rec: RelationRecord = item.json()?;
        let is_delta = delta_kind(&rec, &observed.overlay.id);
        if !iceberg_kind(&rec, &observed.overlay.id) && !is_delta {
            continue;
        }
        let pointer = pointers.remove(&rec.id);
        let current = if is_delta {
            // A Delta table whose relation states its version (Delta Sharing) is current when
            // the pointer captured that version; one that states none (Unity) is probed.
            pointer.as_ref().is_some_and(|p| is_current(&rec, &p.value))
        } else {
            // A table reported not readable is tried again by every job: what made it
            // unreadable (vending, the host's flags, storage) may have changed without a new
            // metadata file.
            pointer.as_ref().is_some_and(|p| {
                Some(&p.value.metadata_location) == rec.metadata_location.as_ref()
                    && p.value.validation != ValidationState::NotReadable
            })
        };
        if current && !opts.revalidate {
            unchanged += 1;
            continue;
        }
        tables.push(PlannedTable {
            relation: Versioned {
                value: rec,
                version: item.version,
            },
            pointer,
        });
    }
    let mut orphans: Vec<_> = pointers.into_values().collect();
    orphans.sort_by(|a, b| a.value.relation_id.cmp(&b.value.relation_id));
    Ok(CapturePlan {
        account: account.to_owned(),
        observed,
        fence,
        catalog: catalog.value,
        tables,
        unchanged,
        orphans,
    })
}
