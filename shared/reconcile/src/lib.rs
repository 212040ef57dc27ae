#![forbid(unsafe_code)]
//! Overlay metadata reconciliation (`docs/reconciliation.md`).
//!
//! A run materializes an overlay's selection into its target catalog in a fixed publication
//! order, which gives a monotonic safety contract without one atomic transaction over an
//! unbounded catalog:
//!
//! 0. **Target** ([`target`]): what the target catalog holds, read strongly (reads only; the
//!    stored upstream ETags make unchanged tables conditional loads).
//! 1. **Discovery** ([`discover`]): breadth-first over the selected upstream namespaces,
//!    writing nothing, within the run's [`bounds`]. Any failure fails the run: nothing is
//!    published and nothing retired.
//! 2. **Plan and preflight** ([`plan`], [`preflight`]): the complete desired inventory is checked against the target
//!    catalog. Destination paths held by a local relation or another overlay, a name that is
//!    both a table and a view upstream, two upstream objects with one stable identity, and a
//!    provider answering for another object than asked are mapping conflicts; any conflict
//!    fails the run (`409 MAPPING_CONFLICT` listing every one), as does an upstream object
//!    too large to be stored. Nothing is published.
//! 3. **Publication** ([`publish`]): namespace claims (creating namespaces where needed),
//!    then tables and views. Every transaction carries the run's [`publish::Fence`]: the
//!    overlay and integration items at the versions observed at the start, and the absence of
//!    the account, integration and overlay deletion fences and of the target catalog's delete
//!    guard. A run whose fence fails stops publishing and answers [`ReconcileError::FenceLost`],
//!    a retryable outcome. Every relation create, delete, move and schema change replaces the
//!    catalog's directory generation in the same transaction.
//! 4. **Retirement** ([`retire`]), only after every desired resource was published: relations this overlay
//!    manages that the complete walk observed absent, then claims no longer needed, then
//!    overlay-created namespaces left empty and unclaimed.
//!
//! Every run that starts (after the overlay was observed) leaves its outcome in the overlay's
//! status item, failures included ([`status`]), and is counted by outcome ([`metrics`]).
//!
//! Idempotence: every write is preceded by a comparison with what is stored, so a run with no
//! upstream change writes nothing but the overlay's status item. Tables whose stored upstream
//! ETag is still current cost one conditional load answered `304`.

pub mod bounds;
#[cfg(feature = "capture")]
pub mod capture;
pub mod chain;
pub mod message;
/// Without the capture runner (feature `capture`): what capture stores, what the API answers
/// about it (validation state, error records, the visibility override) and which tables a job
/// would capture, all of which need only the metastore. The api and the reconciler compile
/// this, and queue capture jobs for the capture workers instead of running them.
#[cfg(not(feature = "capture"))]
pub mod capture {
    #[path = "record.rs"]
    pub mod record;
    #[path = "select.rs"]
    pub mod select;
    #[path = "service.rs"]
    pub mod service;

    pub use select::{CaptureOptions, CapturePlan, PlannedTable, plan};
}
pub mod discover;
pub mod freshness;
pub mod metrics;
pub mod plan;
pub mod preflight;
pub mod publish;
pub mod retire;
pub mod schedule;
pub mod share;
pub mod status;
pub mod target;
pub mod work;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use flotilla_catalog_access::spi::{CatalogAccessError, CatalogClient};
use flotilla_domain::keys;
use flotilla_domain::model::{IntegrationRecord, OverlayRecord};
use flotilla_domain::selection::Selection;
use flotilla_metastore::{Consistency, MetastoreError};
use serde::Serialize;
use serde_json::Value;

pub use bounds::{Exceeded, Limits};
pub use discover::Dropped;
pub use status::{Outcome, RunError, Stage};

use flotilla_base::error::{Error, ErrorKind};
use flotilla_base::store::read;
use flotilla_services::state::AppState;

/// Counts of one kind of resource in a run's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct KindCounts {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub retired: u64,
}

/// What holds a destination path a run wanted, or `UPSTREAM` when the upstream itself is
/// inconsistent (a name listed twice, identities shared, a load answering for another object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Holder {
    Upstream,
    /// A directly managed relation of this kind.
    Local {
        kind: &'static str,
    },
    /// A relation of this kind another overlay manages.
    Overlay {
        overlay_id: String,
        kind: &'static str,
    },
}

/// A destination path that cannot be published because of a mapping conflict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// Namespace segments followed by the relation name.
    pub path: Vec<String>,
    /// The upstream object's kind: `TABLE`, `VIEW` or `NAMESPACE`.
    pub kind: &'static str,
    pub holder: Holder,
    pub code: &'static str,
    pub reason: String,
}

impl Conflict {
    pub fn new(
        path: Vec<String>,
        kind: &'static str,
        holder: Holder,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            path,
            kind,
            holder,
            code: "MAPPING_CONFLICT",
            reason: reason.into(),
        }
    }
}

/// One run's record: answered by the RPC on success and stored in the overlay's status item
/// (`last_reconcile`) whatever the outcome.
#[derive(Clone, Debug, Serialize)]
pub struct ReconcileSummary {
    pub outcome: Outcome,
    /// Why the run failed (`null` when it succeeded).
    pub error: Option<RunError>,
    /// What the run wrote (a run that failed while publishing may have written some).
    pub namespaces: KindCounts,
    pub tables: KindCounts,
    pub views: KindCounts,
    /// The mapping conflicts that failed the run (at most [`status::MAX_STATUS_CONFLICTS`]
    /// in the stored record; `conflicts_total` counts them all).
    pub conflicts: Vec<Conflict>,
    pub conflicts_total: usize,
    /// Always empty: discovery is all or nothing, so no branch is ever skipped. Kept for
    /// clients of the earlier summary shape.
    pub skipped: Vec<Value>,
    /// Listing entries dropped because they were not direct children of what was listed.
    pub dropped: Dropped,
    pub duration_ms: u64,
    /// The overlay generation the run observed and published under.
    pub observed_generation: u64,
    /// The integration generation the run observed and published under.
    pub integration_generation: u64,
    /// When the run started and finished (RFC 3339).
    pub started_at: String,
    pub finished_at: String,
    /// Failed runs since the last successful one (this one included).
    pub consecutive_failures: u64,
    /// When the last successful run finished (this one, when it succeeded).
    pub last_success_time: Option<String>,
}

impl Default for ReconcileSummary {
    fn default() -> Self {
        Self {
            outcome: Outcome::Succeeded,
            error: None,
            namespaces: KindCounts::default(),
            tables: KindCounts::default(),
            views: KindCounts::default(),
            conflicts: Vec::new(),
            conflicts_total: 0,
            skipped: Vec::new(),
            dropped: Dropped::default(),
            duration_ms: 0,
            observed_generation: 0,
            integration_generation: 0,
            started_at: String::new(),
            finished_at: String::new(),
            consecutive_failures: 0,
            last_success_time: None,
        }
    }
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
#[derive(Clone, Debug, thiserror::Error)]
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
    /// An upstream request of discovery failed; nothing was published.
    #[error("{what} at {} failed: {error}", display_path(path))]
    Upstream {
        /// The namespace (or relation) the request was about; empty for the catalog root.
        path: Vec<String>,
        what: &'static str,
        error: CatalogAccessError,
    },
    /// A namespace the walk listed vanished before its content was listed: the upstream
    /// changed during discovery (retryable).
    #[error("namespace {} vanished upstream during discovery", display_path(path))]
    UpstreamChanged { path: Vec<String> },
    /// The preflight found mapping conflicts; nothing was published.
    #[error("{} destination paths conflict; nothing was published", .0.len())]
    Conflicts(Vec<Conflict>),
    /// The run hit one of its bounds; nothing was published.
    #[error("{0}")]
    Exceeded(Exceeded),
    /// An upstream object whose record would exceed the metastore's item limit.
    #[error(
        "upstream {} {} cannot be stored: its record would be {size} bytes; the limit is {limit}",
        kind.to_ascii_lowercase(),
        display_path(path)
    )]
    Unstorable {
        path: Vec<String>,
        kind: &'static str,
        size: usize,
        limit: usize,
    },
    /// Some desired resources could not be published (lost races that did not converge,
    /// retryable backend failures); nothing was retired.
    #[error("{failed} publications did not complete; nothing was retired")]
    Incomplete { failed: usize },
    #[error(transparent)]
    Api(#[from] Error),
}

fn display_path(path: &[String]) -> String {
    if path.is_empty() {
        "the catalog root".to_owned()
    } else {
        format!("`{}`", path.join("."))
    }
}

impl From<MetastoreError> for ReconcileError {
    fn from(e: MetastoreError) -> Self {
        ReconcileError::Api(e.into())
    }
}

impl From<Exceeded> for ReconcileError {
    fn from(e: Exceeded) -> Self {
        ReconcileError::Exceeded(e)
    }
}

impl ReconcileError {
    /// Whether running again soon may succeed. The SQS worker reports these as batch item
    /// failures so the queue redelivers them; the others are recorded and acknowledged.
    ///
    /// The run's own outcomes are classified here; a wrapped service error or upstream
    /// failure is retryable exactly when [`flotilla_error::Error::is_retryable`] says so
    /// (its kind, or an explicit override): `UNAVAILABLE` is, `INTERNAL` and client errors
    /// are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ReconcileError::FenceLost
            | ReconcileError::Incomplete { .. }
            | ReconcileError::UpstreamChanged { .. }
            | ReconcileError::Deleting(_) => true,
            ReconcileError::Upstream { error, .. } => Error::from(error).is_retryable(),
            ReconcileError::Api(e) => e.is_retryable(),
            ReconcileError::NotFound
            | ReconcileError::Paused(_)
            | ReconcileError::Conflicts(_)
            | ReconcileError::Exceeded(_)
            | ReconcileError::Unstorable { .. } => false,
        }
    }

    /// The code recorded in the overlay's status for a failed run.
    pub fn code(&self) -> &'static str {
        match self {
            ReconcileError::NotFound => "NOT_FOUND",
            ReconcileError::Paused(_) => "FAILED_PRECONDITION",
            ReconcileError::Deleting(_) => "DELETING",
            ReconcileError::FenceLost => "FENCE_LOST",
            ReconcileError::Upstream { error, .. } => match error {
                CatalogAccessError::Authentication { .. } => "UPSTREAM_AUTHENTICATION",
                e if Error::from(e).is_retryable() => "UPSTREAM_UNAVAILABLE",
                _ => "UPSTREAM_ERROR",
            },
            ReconcileError::UpstreamChanged { .. } => "UPSTREAM_CHANGED",
            ReconcileError::Conflicts(_) => "MAPPING_CONFLICT",
            ReconcileError::Exceeded(e) => e.code(),
            ReconcileError::Unstorable { .. } => "UPSTREAM_OBJECT_TOO_LARGE",
            ReconcileError::Incomplete { .. } => "INCOMPLETE",
            ReconcileError::Api(e) => e.kind.as_str(),
        }
    }

    /// The upstream object the failure is about, when there is one.
    pub fn object(&self) -> Option<&[String]> {
        match self {
            ReconcileError::Upstream { path, .. }
            | ReconcileError::UpstreamChanged { path }
            | ReconcileError::Unstorable { path, .. } => Some(path),
            _ => None,
        }
    }

    /// A bounded, secret-free explanation. Upstream text arrives bounded and scrubbed from
    /// catalog-access; a backend failure shows only its public message.
    /// Whether the work no longer applies: the overlay moved on, is paused, gone or being
    /// deleted, so a newer message (or none) takes over and this one is acknowledged.
    pub fn no_longer_applies(&self) -> bool {
        matches!(
            self,
            ReconcileError::FenceLost
                | ReconcileError::NotFound
                | ReconcileError::Paused(_)
                | ReconcileError::Deleting(_)
        )
    }

    pub fn cause(&self) -> String {
        let text = match self {
            ReconcileError::Api(e) => e.message.clone(),
            other => other.to_string(),
        };
        status::bound_text(&text)
    }
}

impl From<ReconcileError> for Error {
    fn from(e: ReconcileError) -> Self {
        let code = e.code();
        let cause = e.cause();
        let object = e.object().map(<[String]>::to_vec);
        match e {
            ReconcileError::NotFound => Error::not_found("overlay"),
            ReconcileError::Paused(what) => {
                Error::failed_precondition(format!("{what} is paused; unpause it to reconcile"))
            }
            ReconcileError::Deleting(what) => Error::deleting(&what),
            ReconcileError::FenceLost => {
                Error::new(ErrorKind::Conflict, cause).with_detail("retryable", true)
            }
            ReconcileError::Conflicts(list) => {
                let conflicts = serde_json::to_value(&list).unwrap_or(Value::Null);
                Error::new(ErrorKind::MappingConflict, cause)
                    .with_detail("conflicts", conflicts)
                    .with_detail("retryable", false)
            }
            ref err if err.is_retryable() => {
                // 5xx answers carry no detail: the cause is in the overlay's `last_reconcile`.
                let mut api = Error::unavailable(format!("reconciliation failed: {cause}"));
                api.message = "the reconciliation failed for a transient reason; its cause is \
                               recorded in the overlay's last_reconcile; retry"
                    .into();
                api
            }
            ReconcileError::Api(api) => api,
            _ => {
                let mut api = Error::failed_precondition(cause)
                    .with_detail("reason", code)
                    .with_detail("retryable", false);
                if let Some(path) = object {
                    api = api.with_detail("object", path);
                }
                api
            }
        }
    }
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
/// credentials through the catalog-access adapter ([`flotilla_services::access`]).
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
    flotilla_services::access::connect(state, integration)
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
    /// Namespaces whose content a queued run discovers per batch ([`chain`]).
    pub namespaces_per_batch: usize,
    /// When set (epoch ms), a queued run's budget ends no later than this: the reconciler
    /// shares one invocation's budget among the records of its batch.
    pub deadline_ms: Option<i64>,
    /// Where the capture job of a reconciled overlay runs.
    pub capture: CaptureRun,
}

/// Where the capture job that follows a reconciliation runs (`docs/capture.md`, "Capture
/// jobs").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureRun {
    /// In the same message, right after the reconciliation: a host that compiles the
    /// capture runner (feature `capture`), such as `flotilla serve`.
    Inline,
    /// Planned from stored state after the reconciliation and, when some table needs it (or
    /// a pointer is to be retired), sent as a capture message through the host's work
    /// sender ([`AppState::work`](flotilla_services::state::AppState)) to the capture
    /// workers: the reconciler function, which does not link the capture runner.
    Queue,
}

impl Default for CaptureRun {
    /// Inline where the runner is compiled, queued where it is not.
    fn default() -> Self {
        if cfg!(feature = "capture") {
            CaptureRun::Inline
        } else {
            CaptureRun::Queue
        }
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            upstream_concurrency: 16,
            relations_per_transaction: 25,
            expect_generation: None,
            namespaces_per_batch: chain::NAMESPACES_PER_BATCH,
            deadline_ms: None,
            capture: CaptureRun::default(),
        }
    }
}

/// What a run observed at its start: the records and the item versions its fence asserts.
/// (Not the directory's `ObservedGeneration`, an opaque directory-change token.)
pub struct ObservedRecords {
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
) -> Result<ObservedRecords, ReconcileError> {
    let store = state.store.as_ref();
    if flotilla_domain::names::validate_resource_id(overlay_id).is_err() {
        return Err(ReconcileError::NotFound);
    }
    if let Some(err) = flotilla_services::service::account_guard_error(store, account).await? {
        return Err(if err.kind == ErrorKind::NotFound {
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
            &keys::overlay_fence(account, overlay_id),
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
            &keys::integration_fence(account, &integration_id),
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
    Ok(ObservedRecords {
        overlay: ov.value,
        overlay_version: ov.version,
        integration: int.value,
        integration_version: int.version,
    })
}

/// Where a run gets its catalog client.
enum Source<'a> {
    Connector(&'a dyn Connector),
    Client(&'a dyn CatalogClient),
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
    run_observed(state, account, observed, Source::Connector(connector), opts).await
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
    run_observed(state, account, observed, Source::Client(client), opts).await
}

/// Runs an observed overlay and records the outcome, whatever it is, in the overlay's status.
async fn run_observed(
    state: &AppState,
    account: &str,
    observed: ObservedRecords,
    source: Source<'_>,
    opts: &RunOptions,
) -> Result<ReconcileSummary, ReconcileError> {
    let started = Instant::now();
    let started_ms = state.clock.now_ms();
    let mut summary = new_summary(&observed, started_ms);
    let result = attempt(
        state,
        account,
        &observed,
        source,
        opts,
        started_ms,
        &mut summary,
    )
    .await;
    finish(
        state,
        account,
        &observed.overlay.id,
        summary,
        started,
        started_ms,
        result,
    )
    .await
}

/// The summary a run of `observed` starts with.
pub(crate) fn new_summary(observed: &ObservedRecords, started_ms: i64) -> ReconcileSummary {
    ReconcileSummary {
        observed_generation: observed.overlay.generation,
        integration_generation: observed.integration.generation,
        started_at: flotilla_base::clock::rfc3339_from_ms(started_ms),
        ..ReconcileSummary::default()
    }
}

/// Completes a run's summary and records it in the overlay's status, whatever the outcome.
pub(crate) async fn finish(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    mut summary: ReconcileSummary,
    started: Instant,
    started_ms: i64,
    result: Result<(), (Stage, ReconcileError)>,
) -> Result<ReconcileSummary, ReconcileError> {
    summary.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    summary.finished_at = state.clock.now_rfc3339();
    match result {
        Ok(()) => {
            summary.outcome = Outcome::Succeeded;
            match status::record(state, account, overlay_id, &mut summary, started_ms).await {
                Ok(()) => {
                    metrics::record_run(Outcome::Succeeded, false);
                    Ok(summary)
                }
                Err(e) => {
                    metrics::record_run(Outcome::Failed, e.is_retryable());
                    Err(e)
                }
            }
        }
        Err((stage, e)) => {
            summary.outcome = Outcome::Failed;
            summary.error = Some(RunError::new(&e, stage));
            if let ReconcileError::Conflicts(list) = &e {
                summary.conflicts_total = list.len();
                summary.conflicts = list
                    .iter()
                    .take(status::MAX_STATUS_CONFLICTS)
                    .cloned()
                    .collect();
            }
            tracing::warn!(
                overlay_id,
                stage = stage.as_str(),
                code = e.code(),
                cause = %e.cause(),
                "reconciliation failed"
            );
            if let Err(w) =
                status::record(state, account, overlay_id, &mut summary, started_ms).await
            {
                tracing::warn!(overlay_id, error = %w, "the failed run's outcome was not recorded");
            }
            metrics::record_run(Outcome::Failed, e.is_retryable());
            Err(e)
        }
    }
}

/// The overlay's normalized selection.
pub(crate) fn selection_of(overlay: &OverlayRecord) -> Result<Selection, (Stage, ReconcileError)> {
    Selection::normalize(
        overlay.include_namespaces.clone(),
        overlay.exclude_namespaces.clone(),
    )
    .map_err(|e| (Stage::Connect, ReconcileError::Api(Error::from(e))))
}

/// The run itself; a failure names the stage it happened in.
async fn attempt(
    state: &AppState,
    account: &str,
    observed: &ObservedRecords,
    source: Source<'_>,
    opts: &RunOptions,
    started_ms: i64,
    summary: &mut ReconcileSummary,
) -> Result<(), (Stage, ReconcileError)> {
    let at = |stage: Stage| move |e: ReconcileError| (stage, e);
    let overlay = &observed.overlay;
    let selection = selection_of(overlay)?;
    let fence = publish::Fence::establish(state, account, observed)
        .await
        .map_err(at(Stage::Connect))?;
    let owned;
    let client: &dyn CatalogClient = match source {
        Source::Client(c) => c,
        Source::Connector(c) => {
            owned = c
                .connect(state, &observed.integration)
                .await
                .map_err(at(Stage::Connect))?;
            owned.as_ref()
        }
    };
    let budget = bounds::Budget::new(
        state.clock.clone(),
        started_ms,
        state.config.reconcile.clone(),
    );
    // Reads only: what the catalog holds, so unchanged tables can be loaded conditionally.
    let target = target::TargetState::load(state.store.as_ref(), overlay)
        .await
        .map_err(|e| (Stage::Discovery, ReconcileError::Api(e)))?;
    let discovered = discover::discover(client, &selection, &target, &overlay.id, opts, &budget)
        .await
        .map_err(at(Stage::Discovery))?;
    materialize(
        state,
        observed,
        fence,
        &target,
        &discovered,
        &budget,
        opts,
        summary,
    )
    .await
}

/// Everything after a complete discovery: preflight, publication under `fence`, retirement.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn materialize(
    state: &AppState,
    observed: &ObservedRecords,
    fence: publish::Fence,
    target: &target::TargetState,
    discovered: &discover::Discovered,
    budget: &bounds::Budget,
    opts: &RunOptions,
    summary: &mut ReconcileSummary,
) -> Result<(), (Stage, ReconcileError)> {
    let at = |stage: Stage| move |e: ReconcileError| (stage, e);
    let overlay = &observed.overlay;
    summary.dropped = discovered.dropped;
    let desired = preflight::preflight(discovered, target, overlay);
    if !desired.conflicts.is_empty() {
        let mut list = desired.conflicts;
        list.sort_by(|a, b| a.path.cmp(&b.path));
        return Err((Stage::Preflight, ReconcileError::Conflicts(list)));
    }
    let ctx = plan::Ctx {
        overlay,
        integration: &observed.integration,
        now: state.clock.now_rfc3339(),
    };
    preflight::check_storable(&desired, discovered, &ctx).map_err(at(Stage::Preflight))?;
    budget
        .check_time()
        .map_err(|e| (Stage::Preflight, ReconcileError::Exceeded(e)))?;
    let publisher = publish::Publisher::new(state, overlay, &observed.integration, fence, opts);
    publisher
        .publish_namespaces(&desired, discovered, target, summary)
        .await
        .map_err(at(Stage::Publication))?;
    let failed = publisher
        .publish_relations(&desired, target, summary)
        .await
        .map_err(at(Stage::Publication))?;
    if failed > 0 {
        return Err((Stage::Publication, ReconcileError::Incomplete { failed }));
    }
    publisher
        .retire(&desired, target, summary)
        .await
        .map_err(at(Stage::Retirement))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use flotilla_catalog_access::BoundedText;

    use super::*;

    fn upstream(error: CatalogAccessError) -> ReconcileError {
        ReconcileError::Upstream {
            path: vec!["sales".into()],
            what: "listing",
            error,
        }
    }

    /// A wrapped service error is retried exactly when the error kind (or its override)
    /// says so; `INTERNAL` is not, whatever status code it would answer over HTTP.
    #[test]
    fn wrapped_errors_are_retried_by_their_kind_only() {
        for kind in ErrorKind::ALL {
            let e = ReconcileError::Api(Error::new(*kind, "m"));
            assert_eq!(e.is_retryable(), *kind == ErrorKind::Unavailable, "{kind}");
        }
        assert!(!ReconcileError::Api(Error::internal("corrupt item")).is_retryable());
        assert!(ReconcileError::Api(Error::unavailable("throttled")).is_retryable());
        // An explicit override wins over the kind.
        assert!(ReconcileError::Api(Error::internal("x").with_retryable(true)).is_retryable());
        assert!(!ReconcileError::Api(Error::unavailable("x").with_retryable(false)).is_retryable());
    }

    #[test]
    fn upstream_failures_are_retried_by_their_service_error_kind() {
        let transient = [
            CatalogAccessError::Connection(BoundedText::ours("refused")),
            CatalogAccessError::Retryable {
                status: Some(503),
                detail: BoundedText::ours("down"),
            },
        ];
        for e in transient {
            assert_eq!(Error::from(&e).kind, ErrorKind::Unavailable);
            let r = upstream(e);
            assert!(r.is_retryable(), "{r}");
            assert_eq!(r.code(), "UPSTREAM_UNAVAILABLE");
        }
        let permanent = [
            CatalogAccessError::Authentication {
                status: Some(401),
                detail: BoundedText::ours("refused"),
            },
            CatalogAccessError::protocol("name", "not a string"),
            CatalogAccessError::NotFound(BoundedText::ours("namespace `sales`")),
        ];
        for e in permanent {
            assert!(!Error::from(&e).is_retryable());
            let r = upstream(e);
            assert!(!r.is_retryable(), "{r}");
            assert_ne!(r.code(), "UPSTREAM_UNAVAILABLE");
        }
    }

    #[test]
    fn run_outcomes_keep_their_own_classification() {
        for e in [
            ReconcileError::FenceLost,
            ReconcileError::Incomplete { failed: 1 },
            ReconcileError::UpstreamChanged { path: vec![] },
            ReconcileError::Deleting("the overlay".into()),
        ] {
            assert!(e.is_retryable(), "{e}");
        }
        for e in [
            ReconcileError::NotFound,
            ReconcileError::Paused("the overlay"),
            ReconcileError::Conflicts(vec![]),
        ] {
            assert!(!e.is_retryable(), "{e}");
        }
    }

    /// Over HTTP an internal failure stays `INTERNAL`; only a retryable one becomes the
    /// generic `UNAVAILABLE` answer pointing at `last_reconcile`.
    #[test]
    fn the_rpc_answer_follows_the_same_decision() {
        let internal = Error::from(ReconcileError::Api(Error::internal("corrupt")));
        assert_eq!(internal.kind, ErrorKind::Internal);
        assert!(!internal.is_retryable());
        let unavailable = Error::from(ReconcileError::Api(Error::unavailable("throttled")));
        assert_eq!(unavailable.kind, ErrorKind::Unavailable);
        assert!(unavailable.is_retryable());
    }
}
