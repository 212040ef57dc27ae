//! Freshness of overlay tables (`docs/reconciliation.md`, "Freshness"): the capture that
//! follows a synchronous run (`POST .../reconcile`), and the bounded wait for it
//! (`?wait_for_capture=true`) that read-your-reconcile scripts use.
//!
//! A synchronous run plans its overlay's capture job from stored state exactly as a queued
//! run does ([`crate::work`]) and sends it through the host's work sender (the capture queue
//! on AWS, the in-process worker under `flotilla serve`). The tables it *awaits* are those
//! whose upstream version the catalog now states and no capture pointer records yet: a new
//! Iceberg metadata location, a new Delta Sharing version, or a table never captured. Tables
//! a job tries again at the same version (not readable, a Unity table's log probe) are in
//! the job but not awaited: their outcome does not depend on what the run changed.

use std::time::{Duration, Instant};

use flotilla_base::error::Error;
use flotilla_domain::keys;
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Consistency, Key};
use serde_json::{Value, json};

use crate::capture::record::CapturePointer;
use crate::capture::select::{CapturePlan, delta_kind, stated_version};
use crate::message::ReconcileMessage;
use crate::{ReconcileError, ReconcileSummary};
use flotilla_services::state::AppState;

/// Tables a wait lists as pending in its answer, at most.
pub const MAX_PENDING_LISTED: usize = 100;

/// What a table's capture must reach for the wait to be over.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// An Iceberg table: a pointer at this metadata location.
    Location(String),
    /// A Delta Sharing table: a pointer at this version.
    Version(i64),
}

/// One table whose new upstream version awaits capture.
#[derive(Clone, Debug)]
pub struct Awaited {
    relation_id: String,
    namespace: Vec<String>,
    name: String,
    /// The pointer's item version when the job was planned (`None`: no pointer).
    pointer_version: Option<u64>,
    target: Target,
}

impl Awaited {
    /// Whether `pointer` (the table's current pointer and its item version) records the
    /// awaited version, or a capture published since the plan (a later version).
    fn done(&self, pointer: Option<(&CapturePointer, u64)>) -> bool {
        let Some((p, version)) = pointer else {
            return false;
        };
        if Some(version) != self.pointer_version && self.pointer_version.is_some() {
            return true;
        }
        match &self.target {
            Target::Location(l) => &p.metadata_location == l,
            Target::Version(v) => p.snapshot_id == Some(*v),
        }
    }

    fn describe(&self) -> Value {
        json!({"namespace": self.namespace, "name": self.name})
    }
}

/// The tables of `plan` whose upstream version no pointer records yet.
pub fn awaited(plan: &CapturePlan) -> Vec<Awaited> {
    let overlay = &plan.observed.overlay.id;
    plan.tables
        .iter()
        .filter_map(|t| {
            let rec = &t.relation.value;
            let target = if delta_kind(rec, overlay) {
                Target::Version(stated_version(rec)?)
            } else {
                Target::Location(rec.metadata_location.clone()?)
            };
            let recorded = t.pointer.as_ref().is_some_and(|p| match &target {
                Target::Location(l) => &p.value.metadata_location == l,
                Target::Version(v) => p.value.snapshot_id == Some(*v),
            });
            (!recorded).then(|| Awaited {
                relation_id: rec.id.clone(),
                namespace: rec.namespace.segments().to_vec(),
                name: rec.name.clone(),
                pointer_version: t.pointer.as_ref().map(|p| p.version),
                target,
            })
        })
        .collect()
}

/// The awaited tables whose capture has not published yet, read strongly.
async fn still_pending(
    state: &AppState,
    catalog_id: &str,
    awaited: &[Awaited],
) -> Result<Vec<Awaited>, ReconcileError> {
    let store = state.store.as_ref();
    let mut pointers = std::collections::HashMap::new();
    for chunk in awaited.chunks(100) {
        let keys: Vec<Key> = chunk
            .iter()
            .map(|a| keys::capture_pointer(catalog_id, &a.relation_id))
            .collect();
        for item in store.batch_get(&keys, Consistency::Strong).await? {
            let p: CapturePointer = item.json()?;
            pointers.insert(p.relation_id.clone(), (p, item.version));
        }
    }
    Ok(awaited
        .iter()
        .filter(|a| {
            !a.done(
                pointers
                    .get(&a.relation_id)
                    .map(|(p, v): &(CapturePointer, u64)| (p, *v)),
            )
        })
        .cloned()
        .collect())
}

/// Waits, polling the awaited tables' pointers (strong reads, backing off from 100 ms to
/// 1 s), until every one is captured or `bound` has passed. Answers what is still pending.
pub async fn wait_for(
    state: &AppState,
    catalog_id: &str,
    mut awaited: Vec<Awaited>,
    bound: Duration,
) -> Result<Vec<Awaited>, ReconcileError> {
    let deadline = Instant::now() + bound;
    let mut pause = Duration::from_millis(100);
    loop {
        awaited = still_pending(state, catalog_id, &awaited).await?;
        let now = Instant::now();
        if awaited.is_empty() || now >= deadline {
            return Ok(awaited);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// After a successful synchronous run of `overlay_id`: plans its capture job from stored
/// state and queues it when it has work (as a queued run does), then, when `wait`, waits at
/// most [`Config::capture_wait_ms`](flotilla_services::state::Config) for the capture of the
/// tables whose new upstream version no pointer records (the bound counts from the run's
/// start). Answers the `capture` part of the
/// RPC's answer: `state` is `NONE` (nothing to capture), `QUEUED` (not waited for),
/// `CAPTURED` (every awaited table captured), `PENDING` (the bound passed first; `pending`
/// lists what is not captured yet) or `NOT_QUEUED` (the host has no queue).
pub async fn capture_after_run(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    summary: &ReconcileSummary,
    wait: bool,
) -> Result<Value, ReconcileError> {
    let Some(work) = state.work.as_deref() else {
        return Ok(json!({
            "state": "NOT_QUEUED",
            "reason": "this host has no queue for capture jobs; the next queued run captures \
                       what changed",
        }));
    };
    let m = ReconcileMessage {
        account_id: account.to_owned(),
        overlay_id: overlay_id.to_owned(),
        observed_generation: summary.observed_generation,
    };
    let Some(plan) = crate::work::plan_and_queue_capture(state, work, &m).await? else {
        return Ok(json!({"state": "NONE", "tables": 0}));
    };
    let awaited = awaited(&plan);
    let tables = awaited.len();
    if !wait {
        return Ok(json!({"state": "QUEUED", "tables": tables}));
    }
    let started = Instant::now();
    // Counted from the run's start: the whole request stays within the bound (API Gateway's
    // 29 s on AWS) however long the run took.
    let bound = Duration::from_millis(
        state
            .config
            .capture_wait_ms
            .saturating_sub(summary.duration_ms),
    );
    let pending = wait_for(state, &plan.observed.overlay.catalog_id, awaited, bound).await?;
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if pending.is_empty() {
        return Ok(json!({"state": "CAPTURED", "tables": tables, "waited_ms": waited_ms}));
    }
    Ok(json!({
        "state": "PENDING",
        "tables": tables,
        "waited_ms": waited_ms,
        "pending_total": pending.len(),
        "pending": pending.iter().take(MAX_PENDING_LISTED).map(Awaited::describe).collect::<Vec<_>>(),
        "message": format!(
            "the capture of {} of {tables} changed tables did not complete within {} ms of the \
             run's start; it goes on in the background (each table's GET .../validation shows \
             its state)",
            pending.len(),
            state.config.capture_wait_ms
        ),
    }))
}

/// A table's upstream version as its relation states it: the metadata location and, for a
/// Delta Sharing table, the shared version.
struct Version<'a> {
    metadata_location: Option<&'a str>,
    stated: Option<i64>,
}

impl Version<'_> {
    /// Whether `pointer` records this version: the same metadata location for an Iceberg
    /// table; for a Delta table the stated version (a Unity table states none: its pointer is
    /// its latest probe).
    fn recorded_by(&self, pointer: &CapturePointer) -> bool {
        if pointer.format == crate::capture::select::DELTA {
            return self.stated.is_none_or(|v| pointer.snapshot_id == Some(v));
        }
        self.metadata_location == Some(pointer.metadata_location.as_str())
    }
}

/// The staleness times of one overlay table (`docs/reconciliation.md`, "Freshness").
struct Times {
    /// When Flotilla last confirmed the table's upstream state: the latest of the start of
    /// its overlay's last successful run, a targeted refresh that confirmed it since, and
    /// `changed_at`.
    checked_ms: Option<i64>,
    /// When it first saw the current upstream version (the relation's update time for tables
    /// last changed before that was recorded).
    changed_at: Option<String>,
    /// When that version became query-visible (`None` while it is not).
    visible_at: Option<String>,
}

impl Times {
    fn of(
        relation_id: &str,
        changed_at: Option<&str>,
        update_time: Option<&str>,
        version: &Version<'_>,
        pointer: Option<&CapturePointer>,
        status: Option<&flotilla_domain::model::OverlayStatus>,
    ) -> Self {
        let changed_at = changed_at.or(update_time).map(str::to_owned);
        let changed_ms = changed_at
            .as_deref()
            .and_then(flotilla_domain::clock::ms_from_rfc3339);
        let checked_ms = [
            status.and_then(|s| s.last_success_started_ms),
            status.and_then(|s| s.confirmed.get(relation_id).copied()),
            changed_ms,
        ]
        .into_iter()
        .flatten()
        .max();
        Self {
            checked_ms,
            changed_at,
            visible_at: pointer
                .filter(|p| version.recorded_by(p))
                .and_then(|p| p.visible_at.clone()),
        }
    }

    fn changed_ms(&self) -> Option<i64> {
        self.changed_at
            .as_deref()
            .and_then(flotilla_domain::clock::ms_from_rfc3339)
    }

    fn to_json(&self) -> Value {
        json!({
            "checked_at": self.checked_ms.map(flotilla_domain::clock::rfc3339_from_ms),
            "changed_at": self.changed_at,
            "visible_at": self.visible_at,
        })
    }
}

/// The `upstream` times of one overlay table from its `/v1` rendering.
fn upstream_times(
    relation: &Value,
    pointer: Option<&CapturePointer>,
    status: Option<&flotilla_domain::model::OverlayStatus>,
) -> Value {
    let version = Version {
        metadata_location: relation["metadata_location"].as_str(),
        stated: relation["properties"][crate::plan::SHARING_VERSION_PROPERTY]
            .as_str()
            .and_then(|v| v.trim().parse().ok()),
    };
    Times::of(
        relation["id"].as_str().unwrap_or_default(),
        relation["managed_by"]["upstream_changed_at"].as_str(),
        relation["update_time"].as_str(),
        &version,
        pointer,
        status,
    )
    .to_json()
}

/// The relation id and overlay id of an overlay table's `/v1` rendering (`None` for views
/// and directly managed tables).
fn overlay_table(r: &Value) -> Option<(&str, &str)> {
    (r["kind"].as_str() == Some("TABLE"))
        .then(|| Some((r["id"].as_str()?, r["managed_by"]["overlay_id"].as_str()?)))
        .flatten()
}

/// Adds `upstream` ([`upstream_times`]) to every overlay table among `relations` (their
/// `/v1` renderings, of catalog `catalog_id` in `account`): one batched read of their
/// capture pointers and their overlays' status items. Other relations are left as they are.
pub async fn annotate(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    relations: &mut [Value],
) -> flotilla_base::error::Result<()> {
    use std::collections::{BTreeMap, HashMap};
    let mut wanted: Vec<Key> = Vec::new();
    let mut status_keys: BTreeMap<Key, String> = BTreeMap::new();
    for r in relations.iter() {
        let Some((id, overlay)) = overlay_table(r) else {
            continue;
        };
        wanted.push(keys::capture_pointer(catalog_id, id));
        status_keys.insert(keys::overlay_status(account, overlay), overlay.to_owned());
    }
    if wanted.is_empty() {
        return Ok(());
    }
    wanted.extend(status_keys.keys().cloned());
    let mut pointers: HashMap<String, CapturePointer> = HashMap::new();
    let mut statuses: HashMap<String, flotilla_domain::model::OverlayStatus> = HashMap::new();
    for chunk in wanted.chunks(100) {
        for item in state.store.batch_get(chunk, Consistency::Eventual).await? {
            if let Some(overlay) = status_keys.get(&item.key) {
                statuses.insert(overlay.clone(), item.json()?);
            } else {
                let p: CapturePointer = item.json()?;
                pointers.insert(p.relation_id.clone(), p);
            }
        }
    }
    for r in relations.iter_mut() {
        let Some((id, overlay)) = overlay_table(r) else {
            continue;
        };
        let times = upstream_times(r, pointers.get(id), statuses.get(overlay));
        r["upstream"] = times;
    }
    Ok(())
}

/// Failures an overlay's status lists, at most (`failures_total` counts them all).
pub const MAX_STATUS_FAILURES: usize = 100;

/// Consecutive failed runs from which a transient failure makes an overlay `FAILING`.
pub const FAILING_AFTER_RUNS: u64 = 3;

/// The nearest-rank percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[i64], p: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// One table failure of a status: its latest capture failed.
fn table_failure(p: &CapturePointer) -> Value {
    use crate::capture::record::ValidationState;
    let (code, message) = match p.validation {
        ValidationState::Invalid => (
            "VALIDATION_FAILED",
            format!("{} captured file(s) failed validation", p.errors),
        ),
        ValidationState::NotReadable => ("NOT_READABLE", p.reason.clone().unwrap_or_default()),
        // `capture::attempt::QUARANTINED` (not compiled without the capture runner).
        ValidationState::Quarantined => {
            ("CAPTURE_QUARANTINED", p.reason.clone().unwrap_or_default())
        }
        ValidationState::Valid => ("VALID", String::new()),
    };
    let mut object = p.namespace.clone();
    object.push(p.name.clone());
    json!({
        "object": object,
        "kind": "TABLE",
        "code": code,
        "message": crate::status::bound_text(&message),
        "since": p.failing_since.as_deref().unwrap_or(p.captured_at.as_str()),
        "attempts": p.failed_attempts.max(1),
    })
}

/// `GET {A}/overlays/{id}/status`: the overlay's health (`state`), its last run, its current
/// failures (the last run's, and each table whose latest capture failed; bounded), its tables
/// by state and the staleness of the visible and pending ones. Reads only: the overlay, its
/// integration and status items, and two prefix reads of the target catalog (relations and
/// capture pointers).
pub async fn overlay_status(
    state: &AppState,
    account: &str,
    overlay_id: &str,
) -> flotilla_base::error::Result<Value> {
    use crate::capture::record::{ValidationState, Visibility};
    use flotilla_base::store::read;
    use flotilla_domain::model::{IntegrationRecord, OverlayStatus, RelationRecord};
    use flotilla_metastore::{Query, query_all};

    let store = state.store.as_ref();
    let overlay = flotilla_services::service::overlays::load(store, account, overlay_id)
        .await?
        .value;
    let integration_paused = read::<IntegrationRecord>(
        store,
        keys::integration(account, &overlay.integration_id),
        Consistency::Eventual,
    )
    .await?
    .is_some_and(|i| i.value.paused);
    let status = read::<OverlayStatus>(
        store,
        keys::overlay_status(account, overlay_id),
        Consistency::Eventual,
    )
    .await?
    .map(|s| s.value);
    let pk = keys::catalog_pk(&overlay.catalog_id);
    let mut pointers = std::collections::HashMap::new();
    for item in query_all(
        store,
        Query::new(pk.clone(), keys::CAPTURE_PREFIX, Consistency::Eventual),
    )
    .await?
    {
        let p: CapturePointer = item.json()?;
        if p.overlay_id == overlay.id {
            pointers.insert(p.relation_id.clone(), p);
        }
    }
    let now = state.clock.now_ms();
    let (mut visible, mut pending, mut invalid, mut not_readable) = (0u64, 0u64, 0u64, 0u64);
    let mut staleness = Vec::new();
    let mut failures = Vec::new();
    for item in query_all(
        store,
        Query::new(pk, keys::RELATION_PREFIX, Consistency::Eventual),
    )
    .await?
    {
        let rec: RelationRecord = item.json()?;
        let Some(m) = rec.managed_by.as_ref().filter(|m| {
            m.overlay_id == overlay.id && rec.kind == flotilla_domain::model::RelationKind::Table
        }) else {
            continue;
        };
        let version = Version {
            metadata_location: rec.metadata_location.as_deref(),
            stated: stated_version(&rec),
        };
        let pointer = pointers.get(&rec.id);
        let times = Times::of(
            &rec.id,
            m.upstream_changed_at.as_deref(),
            Some(rec.update_time.as_str()),
            &version,
            pointer,
            status.as_ref(),
        );
        if let Some(p) = pointer.filter(|p| p.failed()) {
            failures.push(table_failure(p));
        }
        match pointer.filter(|p| version.recorded_by(p)) {
            None => {
                pending += 1;
                staleness.extend(times.changed_ms().map(|c| (now - c).max(0)));
            }
            Some(p) if Visibility::of(Some(p)).visible => {
                visible += 1;
                staleness.extend(times.checked_ms.map(|c| (now - c).max(0)));
            }
            Some(p) if p.validation == ValidationState::Invalid => invalid += 1,
            Some(_) => not_readable += 1,
        }
    }
    failures.sort_by(|a, b| a["object"].to_string().cmp(&b["object"].to_string()));
    let run = status.as_ref().and_then(|s| s.last_reconcile.clone());
    let run_failed = run
        .as_ref()
        .is_some_and(|r| r["outcome"].as_str() == Some("FAILED"));
    let consecutive = status.as_ref().map_or(0, |s| s.consecutive_failures);
    if run_failed && let Some(r) = &run {
        failures.insert(
            0,
            json!({
                "object": r["error"]["object"],
                "kind": "RUN",
                "code": r["error"]["code"],
                "message": r["error"]["message"],
                "since": status.as_ref().and_then(|s| s.failing_since.clone())
                    .or_else(|| r["started_at"].as_str().map(str::to_owned)),
                "attempts": consecutive.max(1),
            }),
        );
    }
    let retryable = run
        .as_ref()
        .is_some_and(|r| r["error"]["retryable"].as_bool() == Some(true));
    let health = if overlay.paused || integration_paused {
        "PAUSED"
    } else if run_failed && (!retryable || consecutive >= FAILING_AFTER_RUNS) {
        "FAILING"
    } else if !failures.is_empty() {
        "DEGRADED"
    } else {
        "HEALTHY"
    };
    staleness.sort_unstable();
    let total = failures.len();
    failures.truncate(MAX_STATUS_FAILURES);
    Ok(json!({
        "state": health,
        "last_reconcile": run,
        "failures": failures,
        "failures_total": total,
        "tables": {
            "total": visible + pending + invalid + not_readable,
            "visible": visible,
            "pending": pending,
            "invalid": invalid,
            "not_readable": not_readable,
        },
        "staleness_ms": {
            "p50": percentile(&staleness, 50),
            "p99": percentile(&staleness, 99),
            "max": staleness.last(),
        },
    }))
}

/// Tables one targeted refresh may name, at most.
pub const MAX_NOTIFY_TABLES: usize = 100;
/// Upstream namespaces one targeted refresh may name, at most.
pub const MAX_NOTIFY_NAMESPACES: usize = 10;

/// One upstream table a targeted refresh names.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTable {
    pub namespace: Vec<String>,
    pub name: String,
}

/// The body of `POST {A}/overlays/{id}/notify`: upstream tables and namespaces to refresh.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    #[serde(default)]
    pub tables: Vec<NotifyTable>,
    #[serde(default)]
    pub namespaces: Vec<Vec<String>>,
}

/// What a targeted refresh names, checked: namespaces and tables Flotilla can hold, within
/// the bounds, none twice.
/// Upstream namespaces and tables a targeted refresh names.
type Named = (Vec<NamespacePath>, Vec<(NamespacePath, String)>);

fn checked(req: &Notify) -> Result<Named, Error> {
    if req.tables.is_empty() && req.namespaces.is_empty() {
        return Err(Error::invalid(
            "name at least one upstream table (`tables`) or namespace (`namespaces`)",
        ));
    }
    if req.tables.len() > MAX_NOTIFY_TABLES || req.namespaces.len() > MAX_NOTIFY_NAMESPACES {
        return Err(Error::invalid(format!(
            "a refresh names at most {MAX_NOTIFY_TABLES} tables and {MAX_NOTIFY_NAMESPACES} \
             namespaces; refresh the whole overlay with POST .../reconcile instead"
        )));
    }
    let path = |levels: &[String]| {
        NamespacePath::new(levels.to_vec())
            .map_err(|e| Error::invalid(format!("namespace {levels:?}: {e}")))
    };
    let mut namespaces = Vec::new();
    for n in &req.namespaces {
        let p = path(n)?;
        if !namespaces.contains(&p) {
            namespaces.push(p);
        }
    }
    let mut tables = Vec::new();
    for t in &req.tables {
        let ns = path(&t.namespace)?;
        flotilla_domain::names::validate_segment("table name", &t.name)
            .map_err(|e| Error::invalid(format!("table {:?}: {e}", t.name)))?;
        let entry = (ns, t.name.clone());
        if !tables.contains(&entry) {
            tables.push(entry);
        }
    }
    Ok((namespaces, tables))
}

/// `POST {A}/overlays/{id}/notify`: refreshes only the upstream tables and namespaces named
/// (no walk of the namespace tree): the capabilities, each named namespace's listing and
/// loads, conditional loads of the named tables, then publication of what changed under the
/// overlay's fences and generation, exactly as a run publishes it, and the capture job of
/// what changed, queued. Nothing is retired (a table dropped upstream is retired by the next
/// full run). A name outside the overlay's selection is refused (`400`, nothing loaded).
/// The tables confirmed are recorded as such (their `upstream.checked_at`).
pub async fn notify(
    state: &AppState,
    connector: &dyn crate::Connector,
    account: &str,
    overlay_id: &str,
    req: &Notify,
) -> Result<Value, ReconcileError> {
    let (namespaces, tables) = checked(req)?;
    let observed = crate::observe(state, account, overlay_id).await?;
    let overlay = &observed.overlay;
    let selection = crate::selection_of(overlay).map_err(|(_, e)| e)?;
    let outside: Vec<Value> = namespaces
        .iter()
        .chain(tables.iter().map(|(ns, _)| ns))
        .filter(|ns| !selection.selects(ns))
        .map(|ns| json!(ns.segments()))
        .collect();
    if !outside.is_empty() {
        return Err(Error::invalid(
            "these upstream namespaces are outside the overlay's selection",
        )
        .with_detail("outside", Value::Array(outside))
        .into());
    }
    let started_ms = state.clock.now_ms();
    let fence = crate::publish::Fence::establish(state, account, &observed).await?;
    let client = connector.connect(state, &observed.integration).await?;
    let budget = crate::bounds::Budget::new(
        state.clock.clone(),
        started_ms,
        state.config.reconcile.clone(),
    );
    let target = crate::target::TargetState::load(state.store.as_ref(), overlay).await?;
    let hints = crate::discover::OverlayHints {
        target: &target,
        overlay_id: &overlay.id,
    };
    let opts = crate::RunOptions::default();
    let found = crate::discover::targeted(
        client.as_ref(),
        &namespaces,
        &tables,
        &hints,
        &opts,
        &budget,
    )
    .await?;
    let desired = crate::preflight::preflight(&found, &target, overlay);
    if !desired.conflicts.is_empty() {
        let mut list = desired.conflicts;
        list.sort_by(|a, b| a.path.cmp(&b.path));
        return Err(ReconcileError::Conflicts(list));
    }
    let ctx = crate::plan::Ctx {
        overlay,
        integration: &observed.integration,
        now: state.clock.now_rfc3339(),
    };
    crate::preflight::check_storable(&desired, &found, &ctx)?;
    let mut summary = crate::new_summary(&observed, started_ms);
    let publisher =
        crate::publish::Publisher::new(state, overlay, &observed.integration, fence, &opts);
    publisher
        .publish_namespaces(&desired, &found, &target, &mut summary)
        .await?;
    let failed = publisher
        .publish_relations(&desired, &target, &mut summary)
        .await?;
    if failed > 0 {
        return Err(ReconcileError::Incomplete { failed });
    }
    // The tables this overlay already held and the upstream answered for are confirmed now.
    let confirmed: Vec<String> = found
        .tables
        .iter()
        .filter_map(|t| target.relations.get(&(t.namespace.clone(), t.name.clone())))
        .filter(|r| {
            r.value
                .managed_by
                .as_ref()
                .is_some_and(|m| m.overlay_id == overlay.id)
        })
        .map(|r| r.value.id.clone())
        .collect();
    crate::status::confirm(state, account, &overlay.id, &confirmed, started_ms).await?;
    let capture = capture_after_run(state, account, &overlay.id, &summary, false).await?;
    Ok(json!({
        "namespaces": summary.namespaces,
        "tables": summary.tables,
        "views": summary.views,
        "loaded": found.tables.len(),
        "capture": capture,
    }))
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[7], 99), Some(7));
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50), Some(50));
        assert_eq!(percentile(&v, 99), Some(99));
        assert_eq!(percentile(&[1, 2, 3], 50), Some(2));
    }
}
