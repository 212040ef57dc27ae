//! Durable capture (`docs/capture.md`): what lies beneath the tables an overlay
//! materializes. For every Iceberg table of the overlay whose upstream metadata location
//! changed since its last capture (or that was never captured), a capture job reads the
//! upstream's metadata, manifest list and manifests through the credentials the upstream
//! vends for that table, records the current snapshot (schema, partition spec, data files
//! with their statistics) as one object in the catalog's storage, validates every Parquet
//! file's footer against the table's schema, and publishes a small pointer item
//! (`CAPTURE#{relation id}`) together with the validation's error records.
//!
//! Fencing: a job observes the overlay and its integration at its start exactly as a
//! reconciliation does, and every transaction it commits starts with the same
//! [`Fence`](crate::publish::Fence) (overlay and integration at the observed item versions,
//! no account, integration or overlay deletion fence, the target catalog present and not
//! being deleted), plus the relation at the version the plan read. A job planned before a
//! URI, credential, selection, pause or delete change therefore publishes nothing after it.
//!
//! Cost: a table whose relation still names the captured metadata location costs nothing
//! beyond the plan's two strong prefix reads of the catalog partition: no upstream request
//! and no write.

pub mod attempt;
pub mod avro;
pub mod delta;
pub mod footer_bounds;
pub mod iceberg;
pub mod local_files;
pub mod record;
pub mod select;
pub mod service;
pub mod storage;
pub mod validate;

use std::time::Instant;

use flotilla_base::error::Error;
use flotilla_base::store::{Versioned, to_body};
use flotilla_catalog_access::spi::{CatalogClient, UpstreamNamespace as UpNs};
use flotilla_domain::keys;
use flotilla_metastore::{
    Condition, Consistency, MetastoreError, Op, OpOutcome, Query, Transaction, query_all,
};
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::Serialize;

use crate::{Connector, ReconcileError};
use flotilla_services::service::events;
use flotilla_services::state::AppState;
use record::{CapturePointer, CapturedFile, CapturedTable, ValidationErrorRecord, ValidationState};
use storage::{CatalogFiles, StorageError, UpstreamFiles};

pub use select::{
    CaptureOptions, CapturePlan, DEADLINE, JOB_BUDGET, PlannedTable, TABLE_BUDGET, Timer, plan,
};

/// A table the job could not capture this time.
#[derive(Clone, Debug, Serialize)]
pub struct TableFailure {
    pub path: Vec<String>,
    pub retryable: bool,
    /// The failure's code when it has one (`CAPTURE_QUARANTINED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    pub reason: String,
}

/// One job's record.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CaptureSummary {
    /// Tables captured and published (any validation outcome).
    pub captured: u64,
    pub unchanged: u64,
    /// Of the captured: tables with file errors, and tables whose files cannot be read.
    pub invalid: u64,
    pub not_readable: u64,
    /// Tables not started because the job's time budget was spent (also listed in
    /// `failed`, `CAPTURE_DEADLINE`, retryable: the next run captures them).
    pub deferred: u64,
    /// Tables quarantined: capture did not finish at their upstream version
    /// [`attempt::MAX_UNFINISHED_ATTEMPTS`] times (also listed in `failed`).
    pub quarantined: u64,
    /// Data files recorded and Parquet footers checked.
    pub files: u64,
    pub files_validated: u64,
    pub file_errors: u64,
    /// Pointers of relations that no longer exist, removed.
    pub retired: u64,
    pub failed: Vec<TableFailure>,
    pub duration_ms: u64,
}

impl CaptureSummary {
    pub fn has_retryable_failure(&self) -> bool {
        self.failed.iter().any(|f| f.retryable)
    }
}

fn up_ns(levels: &[String]) -> UpNs {
    UpNs::new(levels.iter().cloned())
}

fn dotted(ns: &[String], name: &str) -> String {
    let mut s = ns.join(".");
    if !s.is_empty() {
        s.push('.');
    }
    s.push_str(name);
    s
}

/// Plans and runs one job, connecting to the upstream only when some table needs capture.
pub async fn capture(
    state: &AppState,
    connector: &dyn Connector,
    account: &str,
    overlay_id: &str,
    opts: &CaptureOptions,
) -> Result<CaptureSummary, ReconcileError> {
    let plan = plan(state, account, overlay_id, opts).await?;
    if plan.tables.is_empty() {
        return execute(state, &plan, None, opts).await;
    }
    let client = connector.connect(state, &plan.observed.integration).await?;
    execute(state, &plan, Some(client.as_ref()), opts).await
}

/// The capture job a reconcile message carries: after the overlay's reconciliation
/// published, every table whose upstream metadata location changed is captured, at the
/// generation the message observed. `None` when the job completed (or had nothing to do, or
/// its message is superseded); otherwise the outcome the message reports: a transient
/// failure is delivered again (the reconciliation then is a no-op run, and the capture
/// retries the tables that failed).
pub async fn after_reconcile(
    state: &AppState,
    connector: &dyn Connector,
    m: &crate::message::ReconcileMessage,
) -> Option<crate::message::MessageOutcome> {
    let opts = CaptureOptions {
        expect_generation: Some(m.observed_generation),
        ..CaptureOptions::default()
    };
    let result = capture(state, connector, &m.account_id, &m.overlay_id, &opts).await;
    match result {
        Ok(s) => {
            tracing::info!(
                captured = s.captured,
                unchanged = s.unchanged,
                invalid = s.invalid,
                not_readable = s.not_readable,
                failed = s.failed.len(),
                "capture"
            );
            s.has_retryable_failure()
                .then(|| crate::message::MessageOutcome::capture_incomplete(s.failed.len()))
        }
        // Superseded, paused, gone or being deleted: a newer message or none applies.
        Err(e) if e.no_longer_applies() => None,
        Err(e) => {
            tracing::warn!(code = e.code(), cause = %e.cause(), "capture failed");
            // A permanent failure is logged and acknowledged (the reconciliation it rode
            // on succeeded); a transient one is delivered again.
            e.is_retryable()
                .then(|| crate::message::MessageOutcome::failed(&e))
        }
    }
}

/// Runs a planned job. `client` may be `None` only when no table needs capture.
pub async fn execute(
    state: &AppState,
    plan: &CapturePlan,
    client: Option<&dyn CatalogClient>,
    opts: &CaptureOptions,
) -> Result<CaptureSummary, ReconcileError> {
    let started = Instant::now();
    let mut summary = CaptureSummary {
        unchanged: plan.unchanged,
        ..CaptureSummary::default()
    };
    let job = Job {
        state,
        plan,
        opts,
        inflate: avro::InflateBudget::default(),
        open: std::sync::atomic::AtomicBool::new(false),
    };
    if !plan.tables.is_empty() {
        let client = client.ok_or_else(|| {
            ReconcileError::Api(Error::internal("capture needs an upstream client"))
        })?;
        let files = CatalogFiles::open(state, &plan.catalog)
            .map_err(|e| format!("captured state cannot be stored: {e}"));
        // The job's budget, on the service clock from its start.
        let budget_ms = i64::try_from(opts.job_budget.as_millis()).unwrap_or(i64::MAX);
        let deadline_ms = state.clock.now_ms().saturating_add(budget_ms);
        for table in &plan.tables {
            let rel = &table.relation.value;
            let path = [rel.namespace.segments().to_vec(), vec![rel.name.clone()]].concat();
            let left_ms = deadline_ms.saturating_sub(state.clock.now_ms());
            if left_ms <= 0 {
                // Spent: no further table is started; the next run resumes here (the
                // tables captured so far are current for its plan).
                summary.deferred += 1;
                summary.failed.push(TableFailure {
                    path,
                    retryable: true,
                    code: Some(DEADLINE),
                    reason: format!(
                        "{DEADLINE}: the capture job's time budget of {} s was spent before \
                         the table was started; the next run captures it",
                        opts.job_budget.as_secs()
                    ),
                });
                continue;
            }
            let limit = opts
                .table_budget
                .min(std::time::Duration::from_millis(left_ms.unsigned_abs()));
            let result = match &files {
                Ok(files) => {
                    let work = job.attempt(client, files, table);
                    tokio::select! {
                        biased;
                        r = work => r,
                        () = (opts.timer.0)(limit) => {
                            // The table's work is dropped where it stood: an ordinary
                            // failure, so its attempt ends (no quarantine) and the next
                            // run tries it again.
                            job.end_attempt(&rel.id).await;
                            Err(TableError::Failed {
                                retryable: true,
                                reason: format!(
                                    "{DEADLINE}: the table was not captured within its time \
                                     budget of {} s; the next run tries again",
                                    limit.as_secs()
                                ),
                            })
                        }
                    }
                }
                Err(reason) => Err(TableError::Failed {
                    retryable: false,
                    reason: reason.clone(),
                }),
            };
            match result {
                Ok(p) if p.unchanged => summary.unchanged += 1,
                Ok(p) => {
                    summary.captured += 1;
                    summary.files += p.files;
                    summary.file_errors += p.errors;
                    summary.files_validated += p.validated;
                    match p.state {
                        ValidationState::Valid => {}
                        ValidationState::Invalid => summary.invalid += 1,
                        ValidationState::NotReadable => summary.not_readable += 1,
                        ValidationState::Quarantined => {
                            summary.quarantined += 1;
                            summary.failed.push(TableFailure {
                                path,
                                retryable: false,
                                code: Some(attempt::QUARANTINED),
                                reason: p.reason.unwrap_or_default(),
                            });
                        }
                    }
                }
                Err(TableError::Fence) => return Err(ReconcileError::FenceLost),
                Err(TableError::Quarantined { .. }) => {
                    return Err(ReconcileError::Api(Error::internal(
                        "a quarantine was not published",
                    )));
                }
                Err(TableError::Failed { retryable, reason }) => {
                    tracing::warn!(table = %dotted(rel.namespace.segments(), &rel.name), %reason, "capture failed");
                    let code = reason.starts_with(DEADLINE).then_some(DEADLINE);
                    summary.failed.push(TableFailure {
                        path,
                        retryable,
                        code,
                        reason: crate::status::bound_text(&reason),
                    })
                }
            }
        }
    }
    for orphan in &plan.orphans {
        match job.retire(orphan).await {
            Ok(()) => summary.retired += 1,
            Err(TableError::Fence) => return Err(ReconcileError::FenceLost),
            Err(TableError::Failed { .. } | TableError::Quarantined { .. }) => {}
        }
    }
    summary.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(summary)
}

/// Checks one data file: `Ok(Some(message))` is a validation error, `Err` a transient
/// storage failure.
async fn check_file(
    upstream: &UpstreamFiles,
    schema: &::iceberg::spec::Schema,
    f: &CapturedFile,
) -> Result<Option<String>, String> {
    let at = match upstream.locate(&f.path) {
        Ok(at) => at,
        Err(e) => return Ok(Some(e.to_string())),
    };
    match validate::read_footer(at.store.as_ref(), &at.path, f.size).await {
        Ok(meta) => Ok(validate::check(&meta, schema, f).err()),
        Err(validate::FooterError::Transient(m)) => Err(m),
        Err(validate::FooterError::Invalid(m)) => Ok(Some(m)),
    }
}

enum TableError {
    Fence,
    Failed {
        retryable: bool,
        reason: String,
    },
    /// The table's attempt marker says capture died at this version often enough: nothing
    /// of it is read, it is published quarantined.
    Quarantined {
        version: String,
        attempts: u32,
    },
}

impl From<MetastoreError> for TableError {
    fn from(e: MetastoreError) -> Self {
        TableError::Failed {
            retryable: e.is_retryable() || e.is_outcome_unknown(),
            reason: e.to_string(),
        }
    }
}

impl From<flotilla_base::error::Error> for TableError {
    fn from(e: flotilla_base::error::Error) -> Self {
        TableError::Failed {
            retryable: matches!(
                e.kind,
                flotilla_base::error::ErrorKind::Unavailable
                    | flotilla_base::error::ErrorKind::Internal
            ),
            reason: e.message,
        }
    }
}

/// What publishing one table came to.
struct Published {
    /// A probed table (Delta without a stated version) found at its captured version:
    /// nothing was read beyond the probe and nothing written.
    unchanged: bool,
    state: ValidationState,
    files: u64,
    validated: u64,
    errors: u64,
    /// Why (`QUARANTINED` only).
    reason: Option<String>,
}

/// Writes one captured state object below the catalog's capture directory; answers its
/// warehouse-relative path.
async fn store_object(
    files: &CatalogFiles,
    relation_id: &str,
    validation_id: &str,
    object: &CapturedTable,
) -> Result<String, TableError> {
    let rel_path = CatalogFiles::object_path(relation_id, validation_id);
    let body = serde_json::to_vec(object).map_err(|e| TableError::Failed {
        retryable: false,
        reason: e.to_string(),
    })?;
    let path = object_store::path::Path::parse(&rel_path).map_err(|e| TableError::Failed {
        retryable: false,
        reason: e.to_string(),
    })?;
    files
        .store
        .put(&path, PutPayload::from(body))
        .await
        .map_err(|e| TableError::Failed {
            // Refused access does not heal by itself; anything else may.
            retryable: !matches!(
                e,
                object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
                    | object_store::Error::NotSupported { .. }
            ),
            reason: format!("writing the captured state failed: {e}"),
        })?;
    Ok(rel_path)
}

/// Ops per transaction besides the fence (the store's limit is 100).
const OPS_PER_TX: usize = 80;

struct Job<'a> {
    state: &'a AppState,
    plan: &'a CapturePlan,
    opts: &'a CaptureOptions,
    /// The inflated bytes the job's Avro objects may still take, over all its tables.
    inflate: avro::InflateBudget,
    /// Whether the table being captured has an attempt marker this job wrote.
    open: std::sync::atomic::AtomicBool,
}

impl Job<'_> {
    fn catalog_id(&self) -> &str {
        &self.plan.catalog.id
    }

    /// Commits `ops` behind the job's fence. `Ok(false)`: a non-fence condition failed.
    async fn commit(&self, ops: Vec<Op>) -> Result<bool, TableError> {
        let fence = self.plan.fence.ops();
        let mut tx = Transaction {
            ops: fence.to_vec(),
        };
        tx.ops.extend(ops);
        match self.state.store.transact(tx).await {
            Ok(()) => Ok(true),
            Err(MetastoreError::ConditionFailed { reasons }) => {
                if reasons
                    .iter()
                    .take(fence.len())
                    .any(|r| !matches!(r, OpOutcome::Ok))
                {
                    Err(TableError::Fence)
                } else {
                    Ok(false)
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Captures one table as one attempt: its marker first (a Delta table whose version is
    /// known only from its log or its query marks itself once that is read), then the work,
    /// then the marker removed (with the publication, or after a failure). A table whose
    /// marker says it is poison is published quarantined instead, and keeps its marker.
    async fn attempt(
        &self,
        client: &dyn CatalogClient,
        files: &CatalogFiles,
        table: &PlannedTable,
    ) -> Result<Published, TableError> {
        let rel = &table.relation.value;
        let probed =
            rel.format.as_deref() == Some(select::DELTA) && select::stated_version(rel).is_none();
        let begun = if probed {
            Ok(())
        } else {
            self.begin_attempt(rel, &attempt::upstream_version(rel))
                .await
        };
        let result = match begun {
            Ok(()) => self.table(client, files, table).await,
            Err(e) => Err(e),
        };
        let result = match result {
            Err(TableError::Quarantined { version, attempts }) => {
                self.open.store(false, std::sync::atomic::Ordering::SeqCst);
                return self.quarantine(table, files, &version, attempts).await;
            }
            other => other,
        };
        // Ended without publishing (a failure, an unchanged probe): the marker goes.
        self.end_attempt(&rel.id).await;
        result
    }

    /// Removes the marker of an attempt that ended without publishing (best effort: a
    /// marker left behind counts one unfinished attempt).
    async fn end_attempt(&self, relation_id: &str) {
        if self.open.swap(false, std::sync::atomic::Ordering::SeqCst) {
            let _ = self
                .state
                .store
                .transact(Transaction::new().with(Op::delete(keys::capture_attempt(
                    self.catalog_id(),
                    relation_id,
                ))))
                .await;
        }
    }

    /// Records, fenced, that the table is about to be read at `version` (`docs/capture.md`,
    /// "Poison tables"), or answers that it is quarantined. Then the fault seam runs.
    async fn begin_attempt(
        &self,
        rel: &flotilla_domain::model::RelationRecord,
        version: &str,
    ) -> Result<(), TableError> {
        if self.open.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let overlay_id = &self.plan.observed.overlay.id;
        let previous =
            attempt::marker(self.state.store.as_ref(), self.catalog_id(), &rel.id).await?;
        let next = match attempt::next(
            previous.as_ref().map(|p| &p.value),
            &rel.id,
            overlay_id,
            version,
            self.state.clock.now_rfc3339(),
        ) {
            Ok(next) => next,
            Err(attempts) => {
                return Err(TableError::Quarantined {
                    version: version.to_owned(),
                    attempts,
                });
            }
        };
        let op = attempt::write_op(self.catalog_id(), previous.as_ref(), &next)?;
        if !self.commit(vec![op]).await? {
            return Err(TableError::Failed {
                retryable: true,
                reason: "another capture job is capturing the table; the next run captures it"
                    .into(),
            });
        }
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(hook) = &self.opts.fault {
            let path = [rel.namespace.segments().to_vec(), vec![rel.name.clone()]].concat();
            (hook.0)(&path).await;
        }
        Ok(())
    }

    /// Publishes a poison table: `QUARANTINED`, not query-visible, one error record coded
    /// `CAPTURE_QUARANTINED` against the version. Nothing of the table is read. Already
    /// quarantined at this version: nothing is written.
    async fn quarantine(
        &self,
        table: &PlannedTable,
        files: &CatalogFiles,
        version: &str,
        attempts: u32,
    ) -> Result<Published, TableError> {
        let rel = &table.relation.value;
        let reason = format!(
            "{}: capture of the table did not finish {attempts} times at upstream version \
             {version} (the process stopped while reading it); its files are not read again \
             until the upstream version changes or a revalidation is requested",
            attempt::QUARANTINED
        );
        let is_delta = rel.format.as_deref() == Some(select::DELTA);
        let previous = table.pointer.as_ref().map(|p| &p.value);
        if let Some(p) = previous
            && p.validation == ValidationState::Quarantined
            && p.reason.as_deref() == Some(reason.as_str())
        {
            return Ok(Published {
                unchanged: true,
                state: ValidationState::Quarantined,
                files: 0,
                validated: 0,
                errors: 0,
                reason: p.reason.clone(),
            });
        }
        let Some(m) = rel.managed_by.as_ref() else {
            return Err(TableError::Failed {
                retryable: false,
                reason: "not an overlay table".into(),
            });
        };
        let pointer = CapturePointer {
            relation_id: rel.id.clone(),
            overlay_id: m.overlay_id.clone(),
            integration_id: m.integration_id.clone(),
            namespace: rel.namespace.segments().to_vec(),
            name: rel.name.clone(),
            format: if is_delta { select::DELTA } else { "ICEBERG" }.into(),
            // What the plan compares with: a quarantined version is current for it.
            snapshot_id: if is_delta {
                select::stated_version(rel)
            } else {
                None
            },
            metadata_location: if is_delta {
                version.to_owned()
            } else {
                rel.metadata_location.clone().unwrap_or_default()
            },
            object: None,
            files: 0,
            records: 0,
            bytes: 0,
            validation_generation: previous.map_or(0, |p| p.validation_generation) + 1,
            validation_id: flotilla_domain::names::new_id(),
            validation: ValidationState::Quarantined,
            errors: 0,
            reason: Some(reason.clone()),
            visibility_override: previous.is_some_and(|p| p.visibility_override),
            captured_at: self.state.clock.now_rfc3339(),
            overlay_generation: self.plan.observed.overlay.generation,
            integration_generation: self.plan.observed.integration.generation,
            visible_at: None,
            failing_since: None,
            failed_attempts: 0,
        };
        self.publish(table, files, pointer, vec![(version.to_owned(), reason)], 0)
            .await
    }

    async fn table(
        &self,
        client: &dyn CatalogClient,
        files: &CatalogFiles,
        table: &PlannedTable,
    ) -> Result<Published, TableError> {
        let rel = &table.relation.value;
        if rel.format.as_deref() == Some(select::DELTA) {
            return self.delta_table(client, files, table).await;
        }
        let Some(m) = rel.managed_by.as_ref() else {
            return Err(TableError::Failed {
                retryable: false,
                reason: "not an overlay table".into(),
            });
        };
        let location = rel.metadata_location.clone().unwrap_or_default();
        let validation_id = flotilla_domain::names::new_id();
        let now = self.state.clock.now_rfc3339();
        let generation = table
            .pointer
            .as_ref()
            .map_or(0, |p| p.value.validation_generation)
            + 1;
        let mut pointer = CapturePointer {
            relation_id: rel.id.clone(),
            overlay_id: m.overlay_id.clone(),
            integration_id: m.integration_id.clone(),
            namespace: rel.namespace.segments().to_vec(),
            name: rel.name.clone(),
            format: "ICEBERG".into(),
            snapshot_id: None,
            metadata_location: location.clone(),
            object: None,
            files: 0,
            records: 0,
            bytes: 0,
            validation_generation: generation,
            validation_id: validation_id.clone(),
            validation: ValidationState::Valid,
            errors: 0,
            reason: None,
            visibility_override: table
                .pointer
                .as_ref()
                .is_some_and(|p| p.value.visibility_override),
            captured_at: now.clone(),
            overlay_generation: self.plan.observed.overlay.generation,
            integration_generation: self.plan.observed.integration.generation,
            visible_at: None,
            failing_since: None,
            failed_attempts: 0,
        };
        let mut errors: Vec<(String, String)> = Vec::new();
        let mut validated = 0;

        // Storage credentials: the upstream's vending for this table, or nothing (file://).
        let vended = if UpstreamFiles::needs_credentials(&location) {
            match client
                .vend_storage_credentials(&up_ns(&m.upstream_namespace), &m.upstream_name)
                .await
            {
                Ok(v) => Some(v),
                Err(e) if e.is_retryable() => {
                    return Err(TableError::Failed {
                        retryable: true,
                        reason: format!("credential vending failed: {e}"),
                    });
                }
                Err(e) => {
                    pointer.validation = ValidationState::NotReadable;
                    pointer.reason = Some(format!(
                        "the upstream vends no storage credentials for the table ({e})"
                    ));
                    None
                }
            }
        } else {
            None
        };
        let upstream = UpstreamFiles::for_host(vended, &self.state.config);
        if pointer.validation != ValidationState::NotReadable {
            match iceberg::read_snapshot(&upstream, &location, self.opts.max_files, &self.inflate)
                .await
            {
                Err(iceberg::ReadError::Storage(StorageError::NotReadable(r))) => {
                    pointer.validation = ValidationState::NotReadable;
                    pointer.reason = Some(r);
                }
                Err(iceberg::ReadError::Storage(e @ StorageError::Invalid { .. })) => {
                    pointer.validation = ValidationState::NotReadable;
                    pointer.reason = Some(e.to_string());
                }
                Err(e @ iceberg::ReadError::Unavailable { .. }) => {
                    return Err(TableError::Failed {
                        retryable: true,
                        reason: e.to_string(),
                    });
                }
                // Refused for its size (UPSTREAM_OBJECT_TOO_LARGE, naming the object):
                // nothing is published, and reading it again would be refused again.
                Err(e @ iceberg::ReadError::TooLarge { .. }) => {
                    return Err(TableError::Failed {
                        retryable: false,
                        reason: e.to_string(),
                    });
                }
                Err(iceberg::ReadError::Corrupt { location, message }) => {
                    // The table's own metadata cannot be interpreted: one error against it.
                    errors.push((location, message));
                }
                Ok(snap) => {
                    let schema = snap.metadata.current_schema().clone();
                    let (checked, file_errors) =
                        self.validate(&upstream, &schema, &snap.files).await?;
                    validated = checked;
                    errors.extend(file_errors);
                    pointer.snapshot_id = snap.metadata.current_snapshot_id();
                    pointer.files = snap.files.len() as u64;
                    pointer.records = snap.files.iter().map(|f| f.record_count).sum();
                    pointer.bytes = snap.files.iter().map(|f| f.size).sum();
                    let object = CapturedTable {
                        catalog_id: self.catalog_id().to_owned(),
                        relation_id: rel.id.clone(),
                        namespace: pointer.namespace.clone(),
                        name: rel.name.clone(),
                        upstream_namespace: m.upstream_namespace.clone(),
                        upstream_name: m.upstream_name.clone(),
                        format: "ICEBERG".into(),
                        snapshot_id: pointer.snapshot_id,
                        metadata_location: location.clone(),
                        location: snap.metadata.location().to_owned(),
                        schema: serde_json::to_value(snap.metadata.current_schema())
                            .unwrap_or_default(),
                        partition_spec: serde_json::to_value(
                            snap.metadata.default_partition_spec(),
                        )
                        .unwrap_or_default(),
                        files: snap.files,
                        delete_files: snap.delete_files,
                        metadata: snap.raw,
                        captured_at: now.clone(),
                    };
                    pointer.object =
                        Some(store_object(files, &rel.id, &validation_id, &object).await?);
                }
            }
        }
        self.publish(table, files, pointer, errors, validated).await
    }

    /// Publishes one table's validation: its error records, then the pointer (fenced, with
    /// the relation at the version the plan read), then retires the previous validation.
    async fn publish(
        &self,
        table: &PlannedTable,
        files: &CatalogFiles,
        mut pointer: CapturePointer,
        errors: Vec<(String, String)>,
        validated: u64,
    ) -> Result<Published, TableError> {
        let rel = &table.relation.value;
        let validation_id = pointer.validation_id.clone();
        let generation = pointer.validation_generation;
        if !errors.is_empty() {
            if pointer.validation != ValidationState::Quarantined {
                pointer.validation = ValidationState::Invalid;
            }
            pointer.errors = errors.len() as u64;
        }
        let code = (pointer.validation == ValidationState::Quarantined)
            .then(|| attempt::QUARANTINED.to_owned());
        let display_path = dotted(&pointer.namespace, &rel.name);
        // The error records first: invisible until the pointer names their validation id.
        let records: Vec<Op> = errors
            .iter()
            .enumerate()
            .map(|(i, (file, message))| {
                let rec = ValidationErrorRecord {
                    catalog_id: self.catalog_id().to_owned(),
                    relation_id: rel.id.clone(),
                    namespace: pointer.namespace.clone(),
                    name: rel.name.clone(),
                    display_path: display_path.clone(),
                    format: pointer.format.clone(),
                    file_path: file.clone(),
                    message: crate::status::bound_text(message),
                    code: code.clone(),
                    validation_id: validation_id.clone(),
                    validation_generation: generation,
                };
                to_body(&rec).map(|b| {
                    Op::put(
                        keys::validation_error(self.catalog_id(), &rel.id, &validation_id, i),
                        b,
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        for chunk in records.chunks(OPS_PER_TX) {
            if !self.commit(chunk.to_vec()).await? {
                return Err(TableError::Failed {
                    retryable: true,
                    reason: "the error records could not be written".into(),
                });
            }
        }
        // The pointer: atomically the new validation generation, its error count and state.
        let now = self.state.clock.now_rfc3339();
        pointer.settle_times(table.pointer.as_ref().map(|p| &p.value), &now);
        let key = keys::capture_pointer(self.catalog_id(), &rel.id);
        let body = to_body(&pointer)?;
        let op = match &table.pointer {
            Some(p) => Op::replace(key, p.version, body),
            None => Op::create(key, body),
        };
        let rel_key = keys::relation(self.catalog_id(), &rel.namespace, &rel.name);
        let mut ops = vec![
            Op::check(rel_key, Condition::Version(table.relation.version)),
            op,
        ];
        // The attempt ends with its publication (a quarantine keeps its marker).
        // A capture whose outcome changes what the table shows writes its event (actor: the
        // overlay) in the pointer's transaction; a recapture in the same state writes none.
        let previous_state = table.pointer.as_ref().map(|p| p.value.validation);
        if previous_state != Some(pointer.validation) {
            let kind = match pointer.validation {
                ValidationState::Valid => "x-flotilla-capture-visible",
                ValidationState::Invalid => "x-flotilla-capture-invalid",
                ValidationState::NotReadable => "x-flotilla-capture-not-readable",
                ValidationState::Quarantined => "x-flotilla-capture-quarantined",
            };
            let operation =
                events::Operation::relation(kind, self.catalog_id(), &rel.namespace, &rel.name)
                    .with_metadata_location(rel.metadata_location.as_deref())
                    .with_details(serde_json::json!({
                        "validation": pointer.validation.as_str(),
                        "previous": previous_state.map(ValidationState::as_str),
                        "errors": pointer.errors,
                    }));
            ops.extend(events::event_op_by(
                self.state,
                &self.plan.account,
                Some(events::Actor::overlay(&pointer.overlay_id)),
                operation,
            )?);
        }
        let closing = pointer.validation != ValidationState::Quarantined
            && self.open.load(std::sync::atomic::Ordering::SeqCst);
        if closing {
            ops.push(Op::delete(keys::capture_attempt(
                self.catalog_id(),
                &rel.id,
            )));
        }
        let applied = self.commit(ops).await;
        match applied {
            Ok(true) => {
                if closing {
                    self.open.store(false, std::sync::atomic::Ordering::SeqCst);
                }
                // A version that became visible now: its lag since Flotilla first saw it.
                if pointer.visible_at.as_deref() == Some(now.as_str())
                    && let Some(seen) = rel
                        .managed_by
                        .as_ref()
                        .and_then(|m| m.upstream_changed_at.as_deref())
                        .and_then(flotilla_domain::clock::ms_from_rfc3339)
                {
                    let lag = self.state.clock.now_ms().saturating_sub(seen).max(0);
                    flotilla_telemetry::catalog::CAPTURE_VISIBLE_LAG.observe_ms(&[], lag as f64);
                }
            }
            other => {
                self.discard(&rel.id, &validation_id, pointer.object.as_deref(), files)
                    .await;
                return match other {
                    Ok(_) => Err(TableError::Failed {
                        retryable: true,
                        reason: "the table changed during capture; the next run captures it".into(),
                    }),
                    Err(e) => Err(e),
                };
            }
        }
        // Retire the previous generation's records and object (readers already ignore them).
        self.retire_records(&rel.id, Some(&validation_id)).await;
        if let Some(old) = table
            .pointer
            .as_ref()
            .and_then(|p| p.value.object.as_deref())
            && let Ok(p) = object_store::path::Path::parse(old)
        {
            let _ = files.store.delete(&p).await;
        }
        Ok(Published {
            unchanged: false,
            state: pointer.validation,
            files: pointer.files,
            validated,
            errors: pointer.errors,
            reason: pointer.reason,
        })
    }

    /// Reads and checks every Parquet file's footer, `file_concurrency` at a time. Answers
    /// how many were checked and one (path, message) per failing file; a transient storage
    /// failure fails the table (nothing is published, the next run tries again).
    async fn validate(
        &self,
        upstream: &UpstreamFiles,
        schema: &::iceberg::spec::Schema,
        files: &[CapturedFile],
    ) -> Result<(u64, Vec<(String, String)>), TableError> {
        let checks: Vec<_> = files
            .iter()
            .filter(|f| f.format == "PARQUET")
            .map(|f| check_file(upstream, schema, f))
            .collect();
        let results: Vec<Result<Option<String>, String>> = futures::stream::iter(checks)
            .buffered(self.opts.file_concurrency.max(1))
            .collect()
            .await;
        let mut errors = Vec::new();
        let mut checked = 0;
        for (f, r) in files.iter().filter(|f| f.format == "PARQUET").zip(results) {
            checked += 1;
            match r {
                Ok(None) => {}
                Ok(Some(message)) => errors.push((f.path.clone(), message)),
                Err(m) => {
                    return Err(TableError::Failed {
                        retryable: true,
                        reason: format!("reading {} failed: {m}", f.path),
                    });
                }
            }
        }
        Ok((checked, errors))
    }

    /// Removes what a job that did not publish wrote (best effort; readers ignore it).
    async fn discard(
        &self,
        relation_id: &str,
        validation_id: &str,
        object: Option<&str>,
        files: &CatalogFiles,
    ) {
        let prefix = format!(
            "{}{validation_id}#",
            keys::validation_errors_prefix(relation_id)
        );
        if let Ok(items) = query_all(
            self.state.store.as_ref(),
            Query::new(
                keys::catalog_pk(self.catalog_id()),
                prefix,
                Consistency::Strong,
            ),
        )
        .await
        {
            for chunk in items.chunks(OPS_PER_TX) {
                let tx = Transaction {
                    ops: chunk.iter().map(|i| Op::delete(i.key.clone())).collect(),
                };
                let _ = self.state.store.transact(tx).await;
            }
        }
        if let Some(o) = object
            && let Ok(p) = object_store::path::Path::parse(o)
        {
            let _ = files.store.delete(&p).await;
        }
    }

    /// Deletes a table's error records of every validation but `keep` (best effort).
    async fn retire_records(&self, relation_id: &str, keep: Option<&str>) {
        let Ok(items) = query_all(
            self.state.store.as_ref(),
            Query::new(
                keys::catalog_pk(self.catalog_id()),
                keys::validation_errors_prefix(relation_id),
                Consistency::Strong,
            ),
        )
        .await
        else {
            return;
        };
        let keep = keep.map(|k| format!("{}{k}#", keys::validation_errors_prefix(relation_id)));
        let stale: Vec<Op> = items
            .iter()
            .filter(|i| {
                keep.as_ref()
                    .is_none_or(|k| !i.key.sk.starts_with(k.as_str()))
            })
            .map(|i| Op::delete(i.key.clone()))
            .collect();
        for chunk in stale.chunks(OPS_PER_TX) {
            let _ = self
                .state
                .store
                .transact(Transaction {
                    ops: chunk.to_vec(),
                })
                .await;
        }
    }

    /// Removes the pointer of a relation that no longer exists, then its records.
    async fn retire(&self, orphan: &Versioned<CapturePointer>) -> Result<(), TableError> {
        let key = keys::capture_pointer(self.catalog_id(), &orphan.value.relation_id);
        if self
            .commit(vec![Op::delete_at(key, orphan.version)])
            .await?
        {
            self.retire_records(&orphan.value.relation_id, None).await;
            if let (Some(o), Ok(files)) = (
                orphan.value.object.as_deref(),
                CatalogFiles::open(self.state, &self.plan.catalog),
            ) && let Ok(p) = object_store::path::Path::parse(o)
            {
                let _ = files.store.delete(&p).await;
            }
        }
        Ok(())
    }
}
