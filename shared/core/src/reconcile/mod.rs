//! Overlay metadata reconciliation (seed 004, "Materialized metadata and deferred capture",
//! "Reconciliation publication and failure semantics", "Refresh and reconciliation
//! ownership").
//!
//! A run materializes an overlay's selection into its target catalog in the seed's
//! publication order, which gives a monotonic safety contract without one atomic
//! transaction over an unbounded catalog:
//!
//! 1. **Discovery** ([`discovery`]): breadth-first over the selected upstream namespaces,
//!    writing nothing. A branch whose listing (or a load inside it) failed is reported as
//!    skipped; nothing at or below it is ever classified as absent.
//! 2. **Preflight** ([`plan`]): the complete desired inventory is checked against the target
//!    catalog. Destination paths held by a local relation or another overlay, a name that is
//!    both a table and a view upstream, two upstream objects with one stable identity, and a
//!    provider answering for another object than asked are `MAPPING_CONFLICT`s; those paths
//!    are not published (and not retired).
//! 3. **Publication** ([`publish`]): namespace claims (creating namespaces where needed),
//!    then tables and views. Every transaction carries the run's [`publish::Fence`]: the
//!    overlay and integration items at the versions observed at the start, and the absence of
//!    the account, integration and overlay deletion fences and of the target catalog's delete
//!    guard. A run whose fence fails stops publishing and answers [`ReconcileError::FenceLost`],
//!    a retryable outcome. Every relation create, delete, move and schema change replaces the
//!    catalog's directory generation in the same transaction (seed 000).
//! 4. **Retirement**, only after every desired resource was published: relations this overlay
//!    manages that the complete walk observed absent, then claims no longer needed, then
//!    overlay-created namespaces left empty and unclaimed.
//!
//! Idempotence: every write is preceded by a comparison with what is stored, so a run with no
//! upstream change writes nothing but the overlay's status item (the summary). Tables whose
//! stored upstream ETag is still current cost one conditional load answered `304`.

pub mod discovery;
pub mod plan;
pub mod publish;
pub mod work;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use flotilla_catalog_access::spi::{CatalogAccessError, CatalogClient};
use flotilla_domain::keys;
use flotilla_domain::model::{IntegrationRecord, OverlayRecord, OverlayStatus};
use flotilla_domain::selection::Selection;
use flotilla_metastore::{Condition, Consistency, MetastoreError, Op, Transaction};
use serde::Serialize;
use serde_json::Value;

use crate::error::{ApiError, Code};
use crate::service::{key, read, to_body};
use crate::state::AppState;

/// Counts of one kind of resource in a run's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub retired: u64,
}

/// A destination path that was not published because of a mapping conflict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// Namespace segments followed by the relation name.
    pub path: Vec<String>,
    pub code: &'static str,
    pub reason: String,
}

impl Conflict {
    pub fn new(path: Vec<String>, reason: impl Into<String>) -> Self {
        Self {
            path,
            code: "MAPPING_CONFLICT",
            reason: reason.into(),
        }
    }
}

/// An upstream branch whose discovery failed: nothing at or below `path` was retired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub path: Vec<String>,
    pub reason: String,
}

/// What one run did; stored in the overlay's status item and answered by the RPC.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReconcileSummary {
    pub namespaces: KindCounts,
    pub tables: KindCounts,
    pub views: KindCounts,
    pub conflicts: Vec<Conflict>,
    pub skipped: Vec<Skipped>,
    pub duration_ms: u64,
    /// The overlay generation the run observed and published under.
    pub observed_generation: u64,
    /// The integration generation the run observed and published under.
    pub integration_generation: u64,
    /// When the run started (RFC 3339).
    pub started_at: String,
}

impl ReconcileSummary {
    /// Whether the run published or retired anything in the catalog.
    pub fn wrote_catalog(&self) -> bool {
        [self.namespaces, self.tables, self.views]
            .iter()
            .any(|k| k.created + k.updated + k.retired > 0)
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Why a run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The overlay does not exist (deleted, or never existed).
    #[error("overlay not found")]
    NotFound,
    /// The overlay or its integration is paused: no upstream work is started.
    #[error("{0} is paused")]
    Paused(&'static str),
    /// A resource the run depends on is being deleted.
    #[error("{0} is being deleted")]
    Deleting(String),
    /// A publication failed its fence: the overlay or integration changed (or a deletion
    /// fence appeared) after the run observed them. Retryable: a new run observes the new
    /// state.
    #[error("the overlay or its integration changed during reconciliation; retry")]
    FenceLost,
    /// Discovery could not start or could not complete its root listing; nothing was
    /// published.
    #[error("upstream discovery failed: {0}")]
    Upstream(CatalogAccessError),
    /// Some desired resources could not be published (lost races that did not converge,
    /// retryable backend failures); nothing was retired.
    #[error("{failed} publications did not complete; nothing was retired")]
    Incomplete { failed: usize },
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<MetastoreError> for ReconcileError {
    fn from(e: MetastoreError) -> Self {
        ReconcileError::Api(e.into())
    }
}

impl ReconcileError {
    /// Whether running again later may succeed (the SQS worker reports these as batch item
    /// failures so the queue redelivers them).
    pub fn is_retryable(&self) -> bool {
        match self {
            ReconcileError::FenceLost
            | ReconcileError::Incomplete { .. }
            | ReconcileError::Deleting(_) => true,
            ReconcileError::Upstream(e) => e.is_retryable(),
            ReconcileError::Api(e) => matches!(e.code, Code::Unavailable | Code::Internal),
            ReconcileError::NotFound | ReconcileError::Paused(_) => false,
        }
    }
}

impl From<ReconcileError> for ApiError {
    fn from(e: ReconcileError) -> Self {
        match e {
            ReconcileError::NotFound => ApiError::not_found("overlay"),
            ReconcileError::Paused(what) => ApiError::new(
                Code::FailedPrecondition,
                format!("{what} is paused; unpause it to reconcile"),
            ),
            ReconcileError::Deleting(what) => ApiError::deleting(&what),
            ReconcileError::FenceLost => {
                ApiError::new(Code::Conflict, e_text(&ReconcileError::FenceLost))
                    .with_detail("retryable", true)
            }
            ReconcileError::Upstream(err) => crate::access::upstream_error(&err),
            ReconcileError::Incomplete { failed } => ApiError::unavailable(format!(
                "{failed} reconciliation publications did not complete"
            )),
            ReconcileError::Api(e) => e,
        }
    }
}

fn e_text(e: &ReconcileError) -> String {
    e.to_string()
}

/// Builds a connected catalog client for an integration. The production connector resolves
/// the integration's credentials through the catalog-access adapter; tests inject clients
/// (for example, decorators that misbehave on purpose).
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(
        &self,
        state: &AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError>;
}

pub type DynConnector = Arc<dyn Connector>;

/// The connector of the deployed service: the integration's persisted configuration and
/// credentials through the catalog-access adapter ([`crate::access`]).
pub struct AdapterConnector;

#[async_trait]
impl Connector for AdapterConnector {
    async fn connect(
        &self,
        state: &AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        connect_with_adapter(state, integration).await
    }
}

async fn connect_with_adapter(
    state: &AppState,
    integration: &IntegrationRecord,
) -> Result<Box<dyn CatalogClient>, ReconcileError> {
    crate::access::connect(state, integration)
        .await
        .map_err(|e| ReconcileError::Api(e.into()))
}

/// Tunables of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Concurrent upstream requests during discovery.
    pub upstream_concurrency: usize,
    /// Relations published per transaction (each transaction also carries the fence).
    pub relations_per_transaction: usize,
    /// When set, the run refuses to start unless the overlay is at this generation (the
    /// SQS worker passes the generation its message observed).
    pub expect_generation: Option<u64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            upstream_concurrency: 16,
            relations_per_transaction: 25,
            expect_generation: None,
        }
    }
}

/// What a run observed at its start: the records and the item versions its fence asserts.
pub struct Observed {
    pub overlay: OverlayRecord,
    pub overlay_version: u64,
    pub integration: IntegrationRecord,
    pub integration_version: u64,
}

/// Reads the overlay and its integration strongly and refuses a run that must not start.
pub async fn observe(
    state: &AppState,
    account: &str,
    overlay_id: &str,
) -> Result<Observed, ReconcileError> {
    let store = state.store.as_ref();
    if flotilla_domain::names::validate_resource_id(overlay_id).is_err() {
        return Err(ReconcileError::NotFound);
    }
    if let Some(err) = crate::service::account_guard_error(store, account).await? {
        return Err(if err.code == Code::NotFound {
            ReconcileError::NotFound
        } else {
            ReconcileError::Deleting("the account".into())
        });
    }
    let Some(ov) = read::<OverlayRecord>(
        store,
        keys::overlay(account, overlay_id),
        Consistency::Strong,
    )
    .await?
    else {
        return Err(ReconcileError::NotFound);
    };
    if store
        .get(
            &key(keys::overlay_fence(account, overlay_id)),
            Consistency::Strong,
        )
        .await?
        .is_some()
    {
        return Err(ReconcileError::Deleting("the overlay".into()));
    }
    let integration_id = ov.value.integration_id.clone();
    let Some(int) = read::<IntegrationRecord>(
        store,
        keys::integration(account, &integration_id),
        Consistency::Strong,
    )
    .await?
    else {
        return Err(ReconcileError::Deleting("the integration".into()));
    };
    if store
        .get(
            &key(keys::integration_fence(account, &integration_id)),
            Consistency::Strong,
        )
        .await?
        .is_some()
    {
        return Err(ReconcileError::Deleting("the integration".into()));
    }
    if ov.value.paused {
        return Err(ReconcileError::Paused("the overlay"));
    }
    if int.value.paused {
        return Err(ReconcileError::Paused("the integration"));
    }
    Ok(Observed {
        overlay: ov.value,
        overlay_version: ov.version,
        integration: int.value,
        integration_version: int.version,
    })
}

/// Runs one reconciliation of `overlay_id`, connecting through `connector`.
pub async fn reconcile(
    state: &AppState,
    connector: &dyn Connector,
    account: &str,
    overlay_id: &str,
    opts: &RunOptions,
) -> Result<ReconcileSummary, ReconcileError> {
    let observed = observe(state, account, overlay_id).await?;
    if let Some(g) = opts.expect_generation
        && observed.overlay.generation != g
    {
        return Err(ReconcileError::FenceLost);
    }
    let client = connector.connect(state, &observed.integration).await?;
    run_observed(state, account, observed, client.as_ref(), opts).await
}

/// Runs one reconciliation against an already connected client.
pub async fn run(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    client: &dyn CatalogClient,
    opts: &RunOptions,
) -> Result<ReconcileSummary, ReconcileError> {
    let observed = observe(state, account, overlay_id).await?;
    run_observed(state, account, observed, client, opts).await
}

async fn run_observed(
    state: &AppState,
    account: &str,
    observed: Observed,
    client: &dyn CatalogClient,
    opts: &RunOptions,
) -> Result<ReconcileSummary, ReconcileError> {
    let started = Instant::now();
    let started_ms = state.clock.now_ms();
    let overlay = observed.overlay.clone();
    let selection = Selection::normalize(
        overlay.include_namespaces.clone(),
        overlay.exclude_namespaces.clone(),
    )
    .map_err(ApiError::from)?;
    let fence = publish::Fence::establish(state, account, &observed).await?;
    // Reads only: what the catalog holds, so unchanged tables can be loaded conditionally.
    let target = plan::TargetState::load(state.store.as_ref(), &overlay).await?;
    let discovered = discovery::discover(client, &selection, &target, &overlay.id, opts).await?;
    let desired = plan::preflight(&discovered, &target, &overlay);
    let mut summary = ReconcileSummary {
        conflicts: desired.conflicts.clone(),
        skipped: discovered.skipped.clone(),
        observed_generation: overlay.generation,
        integration_generation: observed.integration.generation,
        started_at: crate::clock::rfc3339_from_ms(started_ms),
        ..ReconcileSummary::default()
    };
    let publisher = publish::Publisher::new(state, &overlay, &observed.integration, fence, opts);
    publisher
        .publish_namespaces(&desired, &target, &mut summary)
        .await?;
    let failed = publisher
        .publish_relations(&desired, &target, &mut summary)
        .await?;
    if failed > 0 {
        return Err(ReconcileError::Incomplete { failed });
    }
    publisher
        .retire(&desired, &discovered, &target, &mut summary)
        .await?;
    summary.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    write_status(state, account, &overlay.id, &summary, started_ms).await?;
    Ok(summary)
}

/// Records the summary in the overlay's status item: the one write of a no-op run. It
/// asserts that the overlay exists and is not being deleted, so a run finishing after an
/// overlay delete cannot leave an orphan status item behind.
async fn write_status(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    summary: &ReconcileSummary,
    started_ms: i64,
) -> Result<(), ReconcileError> {
    let status = OverlayStatus {
        last_reconcile: Some(summary.to_json()),
        last_started_ms: Some(started_ms),
    };
    let tx = Transaction::new()
        .with(Op::put(
            key(keys::overlay_status(account, overlay_id)),
            to_body(&status)?,
        ))
        .with(Op::check(
            key(keys::overlay(account, overlay_id)),
            Condition::Exists,
        ))
        .with(Op::check(
            key(keys::overlay_fence(account, overlay_id)),
            Condition::Absent,
        ));
    for attempt in 0..crate::service::MAX_ATTEMPTS {
        match state.store.transact(tx.clone()).await {
            Ok(()) => return Ok(()),
            // The put is idempotent, so an unknown outcome is simply written again.
            Err(e) if e.is_retryable() || e.is_outcome_unknown() => {
                crate::service::backoff(attempt).await
            }
            Err(MetastoreError::ConditionFailed { .. }) => return Err(ReconcileError::FenceLost),
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::unavailable("status write did not converge").into())
}
