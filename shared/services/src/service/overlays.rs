//! CatalogOverlay ("Resource and ownership model", "Catalog overlay",
//! "Namespace selection", overlay rows of "Lifecycle and garbage collection").
//!
//! An overlay binds one integration and one existing catalog by id. Create publishes the
//! overlay with dependency records on both in one transaction that also asserts both exist
//! and neither is being deleted, so a concurrent integration or catalog delete cannot slip
//! beneath it. Delete installs a durable overlay fence, retires only what this overlay
//! manages (relations, namespace claims, overlay-created empty namespaces), then removes the
//! dependencies, the record and the fence; every step is idempotent, so a retry resumes.

use flotilla_domain::keys;
use flotilla_domain::model::{
    ClaimRecord, DependencyRecord, NameIndexRecord, NamespaceRecord, OverlayRecord, OverlayStatus,
    RelationRecord, default_refresh_interval, etag_for,
};
use flotilla_domain::names::{NamespacePath, validate_display_name, validate_resource_id};
use flotilla_domain::selection::Selection;
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Transaction};
use serde::Deserialize;
use serde_json::Value;

use super::events::{Operation, record_account};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create};
use super::relations::directory_bump;
use super::{
    MAX_ATTEMPTS, Versioned, account_guard_error, account_guards, backoff, check_if_match,
    guard_op, guard_state, read, to_body,
};
use super::{OnConflict, strong_scan};
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;

pub const MIN_REFRESH_INTERVAL_SECS: u64 = 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateOverlay {
    pub display_name: String,
    pub integration_id: String,
    pub catalog_id: String,
    #[serde(default)]
    pub include_namespaces: Vec<Vec<String>>,
    #[serde(default)]
    pub exclude_namespaces: Vec<Vec<String>>,
    #[serde(default)]
    pub refresh_interval_secs: Option<u64>,
    #[serde(default)]
    pub paused: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchOverlay {
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub include_namespaces: Option<Vec<Vec<String>>>,
    #[serde(default)]
    pub exclude_namespaces: Option<Vec<Vec<String>>>,
    #[serde(default)]
    pub refresh_interval_secs: Option<u64>,
    #[serde(default)]
    pub paused: Option<bool>,
    /// Present only to give a precise error: bindings are immutable.
    #[serde(default)]
    pub integration_id: Option<Value>,
    #[serde(default)]
    pub catalog_id: Option<Value>,
}

fn validate_interval(v: Option<u64>) -> Result<u64> {
    match v {
        None => Ok(default_refresh_interval()),
        Some(s) if (MIN_REFRESH_INTERVAL_SECS..=30 * 86_400).contains(&s) => Ok(s),
        Some(_) => Err(Error::invalid(format!(
            "refresh_interval_secs must be between {MIN_REFRESH_INTERVAL_SECS} and 2592000"
        ))),
    }
}

pub async fn load(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<OverlayRecord>> {
    validate_resource_id(id).map_err(|_| Error::not_found("overlay"))?;
    read::<OverlayRecord>(store, keys::overlay(account, id), Consistency::Strong)
        .await?
        .ok_or_else(|| Error::not_found("overlay"))
}

pub async fn status(
    store: &dyn Metastore,
    account: &str,
    id: &str,
    consistency: Consistency,
) -> Result<Option<Versioned<OverlayStatus>>> {
    read::<OverlayStatus>(store, keys::overlay_status(account, id), consistency).await
}

async fn to_api(store: &dyn Metastore, account: &str, rec: &OverlayRecord) -> Result<Value> {
    let st = status(store, account, &rec.id, Consistency::Eventual).await?;
    Ok(rec.to_api(st.as_ref().and_then(|s| s.value.last_reconcile.as_ref())))
}

pub async fn get(state: &AppState, account: &str, id: &str) -> Result<Value> {
    let store = state.store.as_ref();
    let cur = load(store, account, id).await?;
    to_api(store, account, &cur.value).await
}

/// The overlays the caller may see (of one integration, when given).
pub async fn list(
    state: &AppState,
    access: &crate::acl::Access,
    integration: Option<&str>,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let account = access.account.as_str();
    let store = state.store.as_ref();
    let scope = format!("overlays|{}", integration.unwrap_or(""));
    let (items, next) = super::list_page(
        store,
        &keys::account_pk(account),
        keys::OVERLAY_PREFIX,
        &scope,
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            let rec: OverlayRecord = super::decode(item)?;
            let wanted = integration.is_none_or(|i| rec.integration_id == i)
                && access.visible(&crate::acl::Securable::overlay(&rec.id));
            Ok(wanted.then_some(rec))
                .map(|r| r.map(|r| serde_json::to_value(&r).unwrap_or(Value::Null)))
        },
    )
    .await?;
    let mut out = Vec::with_capacity(items.len());
    for v in items {
        let rec: OverlayRecord =
            serde_json::from_value(v).map_err(|e| Error::internal(e.to_string()))?;
        out.push(to_api(store, account, &rec).await?);
    }
    Ok(super::page_body(out, next))
}

/// The ids of an integration's overlays, read strongly (cascades rely on it).
pub async fn ids_for_integration(
    store: &dyn Metastore,
    account: &str,
    integration: &str,
) -> Result<Vec<String>> {
    let deps = strong_scan(
        store,
        &keys::account_pk(account),
        &keys::integration_dependency_prefix(integration),
    )
    .await?;
    deps.iter()
        .map(|d| Ok(d.json::<DependencyRecord>()?.overlay_id))
        .collect()
}

/// The integration an overlay binds: a missing one is the caller's mistake (`400`), a
/// failed read is not.
async fn load_integration(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<flotilla_domain::model::IntegrationRecord>> {
    super::records::integration(store, account, id)
        .await
        .map_err(|e| match e.kind {
            ErrorKind::NotFound => {
                Error::invalid("integration_id names no integration of this account")
            }
            _ => e,
        })
}

async fn load_catalog(store: &dyn Metastore, account: &str, id: &str) -> Result<()> {
    super::catalogs::load(store, account, id)
        .await
        .map(|_| ())
        .map_err(|e| match e.kind {
            ErrorKind::NotFound => Error::invalid("catalog_id names no catalog of this account"),
            _ => e,
        })
}

pub async fn create(
    state: &AppState,
    account: &str,
    req: CreateOverlay,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_display_name(&req.display_name)?;
    validate_resource_id(&req.integration_id)
        .map_err(|_| Error::invalid("malformed integration_id"))?;
    validate_resource_id(&req.catalog_id).map_err(|_| Error::invalid("malformed catalog_id"))?;
    let selection = Selection::normalize(
        req.include_namespaces.clone(),
        req.exclude_namespaces.clone(),
    )?;
    let interval = validate_interval(req.refresh_interval_secs)?;
    let store = state.store.as_ref();
    // The overlay a replace superseded, for its cleanup after the swap committed.
    let superseded: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let response = run_create(state, idem, |id| {
        let (req, selection, superseded) = (&req, &selection, &superseded);
        async move {
            *superseded.lock().unwrap_or_else(|p| p.into_inner()) = None;
            if let Some(err) = account_guard_error(store, account).await? {
                return Err(err);
            }
            let name_key = keys::overlay_name(account, &req.display_name);
            let mut name_op = Op::create(
                name_key.clone(),
                to_body(&NameIndexRecord { id: id.clone() })?,
            );
            let mut retire_ops = Vec::new();
            if let Some(idx) =
                read::<NameIndexRecord>(store, name_key.clone(), Consistency::Strong).await?
            {
                let old = load(store, account, &idx.value.id).await?;
                match on_conflict {
                    OnConflict::ReturnExisting => {
                        return Ok(Plan::Respond(RecordedResponse::ok(
                            to_api(store, account, &old.value).await?,
                        )));
                    }
                    OnConflict::Error => {
                        return Err(Error::already_exists(format!(
                            "an overlay named {:?} already exists",
                            req.display_name
                        )));
                    }
                    OnConflict::Replace => {
                        // The swap: the name moves to the new overlay and the old one is
                        // fenced (it publishes nothing more) in the transaction that creates
                        // the new one, so the name is never absent and a replace that fails
                        // leaves the old overlay as it was. Its contributions are retired
                        // after the swap, by the old overlay's own resumable delete.
                        let fence = keys::overlay_fence(account, &old.value.id);
                        if store.get(&fence, Consistency::Strong).await?.is_some() {
                            return Err(Error::deleting("the overlay being replaced"));
                        }
                        name_op = Op::replace(
                            name_key.clone(),
                            idx.version,
                            to_body(&NameIndexRecord { id: id.clone() })?,
                        );
                        retire_ops.push(Op::check(
                            keys::overlay(account, &old.value.id),
                            Condition::Version(old.version),
                        ));
                        retire_ops.push(Op::create(
                            fence,
                            to_body(&OverlayFence {
                                installed_ms: state.clock.now_ms(),
                                owner: flotilla_domain::names::new_id(),
                                durable: true,
                                catalog_id: old.value.catalog_id.clone(),
                                prune: Vec::new(),
                            })?,
                        ));
                        *superseded.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(old.value.id.clone());
                    }
                }
            }
            let integration = load_integration(store, account, &req.integration_id).await?;
            load_catalog(store, account, &req.catalog_id).await?;
            let now = state.clock.now_ms();
            let lease = state.config.guard_lease_ms;
            let mut ops = account_guards(account);
            ops.push(Op::check(
                keys::integration(account, &req.integration_id),
                Condition::Exists,
            ));
            let ig = guard_state(
                store,
                keys::integration_fence(account, &req.integration_id),
                now,
                lease,
            )
            .await?;
            ops.push(
                guard_op(keys::integration_fence(account, &req.integration_id), &ig)
                    .ok_or_else(|| Error::deleting("the integration"))?,
            );
            ops.push(Op::check(
                keys::catalog(account, &req.catalog_id),
                Condition::Exists,
            ));
            let cg = guard_state(store, keys::catalog_guard(&req.catalog_id), now, lease).await?;
            ops.push(
                guard_op(keys::catalog_guard(&req.catalog_id), &cg)
                    .ok_or_else(|| Error::deleting("the catalog"))?,
            );
            let dep = to_body(&DependencyRecord {
                overlay_id: id.clone(),
            })?;
            ops.push(Op::create(
                keys::integration_dependency(account, &req.integration_id, &id),
                dep.clone(),
            ));
            ops.push(Op::create(
                keys::catalog_dependency(account, &req.catalog_id, &id),
                dep,
            ));
            ops.push(name_op);
            ops.extend(retire_ops);
            let ts = state.clock.now_rfc3339();
            let rec = OverlayRecord {
                id: id.clone(),
                account_id: account.to_owned(),
                display_name: req.display_name.clone(),
                integration_id: integration.value.id.clone(),
                catalog_id: req.catalog_id.clone(),
                include_namespaces: selection.include_segments(),
                exclude_namespaces: selection.exclude_segments(),
                generation: 1,
                paused: req.paused,
                refresh_interval_secs: interval,
                revision: 1,
                create_time: ts.clone(),
                update_time: ts,
            };
            ops.push(Op::create(keys::overlay(account, &id), to_body(&rec)?));
            record_account(
                state,
                &mut ops,
                account,
                Operation::of_resource("created", "overlay", Some(&id), Some(&rec.display_name))
                    .with_details(serde_json::json!({
                        "integration_id": rec.integration_id,
                        "catalog_id": rec.catalog_id,
                    })),
            )?;
            // The new overlay's demand, in the same transaction (a replaced overlay's demand
            // stays until its own delete removes it; it is fenced meanwhile).
            let demand = super::schedule::demand(interval, req.paused);
            ops.extend(
                super::schedule::update_ops(store, account, &req.integration_id, now, |s| {
                    s.demand.insert(id.clone(), demand);
                    s.integration_paused = integration.value.paused;
                    super::schedule::Effect {
                        bump: true,
                        run_now: !req.paused,
                    }
                })
                .await?,
            );
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api(None)),
                probe: keys::overlay(account, &id),
            })
        }
    })
    .await?;
    let old = superseded.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(old) = old
        && response.status == 201
    {
        // The replace has committed: retire the superseded overlay under its fence. A
        // failure here leaves it fenced (publishing nothing) and listed under its own id;
        // `DELETE .../overlays/{old id}` resumes the retirement.
        if let Err(e) = delete(state, account, &old, None).await
            && e.kind != ErrorKind::NotFound
        {
            tracing::warn!(
                overlay_id = %old,
                code = e.kind.as_str(),
                "retiring the overlay superseded by a replace did not finish; \
                 DELETE it by id to resume"
            );
        }
    }
    Ok(response)
}

pub async fn patch(
    state: &AppState,
    account: &str,
    id: &str,
    req: PatchOverlay,
    if_match: Option<&str>,
) -> Result<Value> {
    if req.integration_id.is_some() || req.catalog_id.is_some() {
        return Err(Error::invalid(
            "integration_id and catalog_id are immutable; create with on_conflict=replace to rebind",
        ));
    }
    if let Some(n) = &req.display_name {
        validate_display_name(n)?;
    }
    if req.refresh_interval_secs.is_some() {
        validate_interval(req.refresh_interval_secs)?;
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load(store, account, id).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        super::refuse_if_fenced(store, &keys::overlay_fence(account, id), "the overlay").await?;
        let mut next = cur.value.clone();
        if let Some(n) = &req.display_name {
            next.display_name = n.clone();
        }
        if req.include_namespaces.is_some() || req.exclude_namespaces.is_some() {
            let sel = Selection::normalize(
                req.include_namespaces
                    .clone()
                    .unwrap_or_else(|| cur.value.include_namespaces.clone()),
                req.exclude_namespaces
                    .clone()
                    .unwrap_or_else(|| cur.value.exclude_namespaces.clone()),
            )?;
            next.include_namespaces = sel.include_segments();
            next.exclude_namespaces = sel.exclude_segments();
            if next.include_namespaces != cur.value.include_namespaces
                || next.exclude_namespaces != cur.value.exclude_namespaces
            {
                super::require_if_match(if_match, "changing an overlay's namespace selection")?;
            }
        }
        if let Some(s) = req.refresh_interval_secs {
            next.refresh_interval_secs = s;
        }
        if let Some(p) = req.paused {
            next.paused = p;
        }
        if next.include_namespaces != cur.value.include_namespaces
            || next.exclude_namespaces != cur.value.exclude_namespaces
            || next.paused != cur.value.paused
        {
            next.generation += 1;
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::overlay(account, id),
            cur.version,
            to_body(&next)?,
        ));
        // Demand and plan generation move with the overlay, in its transaction.
        let selection_changed = next.include_namespaces != cur.value.include_namespaces
            || next.exclude_namespaces != cur.value.exclude_namespaces;
        let resumed = cur.value.paused && !next.paused;
        let demand = super::schedule::demand(next.refresh_interval_secs, next.paused);
        tx.ops.extend(
            super::schedule::update_ops(
                store,
                account,
                &cur.value.integration_id,
                state.clock.now_ms(),
                |s| {
                    s.demand.insert(id.to_owned(), demand);
                    super::schedule::Effect {
                        bump: next.generation != cur.value.generation,
                        run_now: !next.paused && (selection_changed || resumed),
                    }
                },
            )
            .await?,
        );
        let fields = [
            ("display_name", next.display_name != cur.value.display_name),
            ("namespaces", selection_changed),
            (
                "refresh_interval_secs",
                next.refresh_interval_secs != cur.value.refresh_interval_secs,
            ),
            ("paused", next.paused != cur.value.paused),
        ];
        record_account(
            state,
            &mut tx.ops,
            account,
            Operation::resource_update(
                "overlay",
                id,
                &next.display_name,
                (cur.value.paused, next.paused),
                &fields,
            ),
        )?;
        let name = super::NameChange {
            key: keys::overlay_name,
            what: "an overlay",
            old: &cur.value.display_name,
            new: &next.display_name,
        };
        if super::commit_renamable(store, tx, account, id, name, attempt).await? {
            return to_api(store, account, &next).await;
        }
    }
    Err(Error::unavailable("overlay update did not converge"))
}

/// The durable overlay deletion fence. Besides fencing reconciliation and updates, it
/// records the namespace paths this delete must prune: the claims are released part-way
/// through, so after a crash the claims no longer say which namespaces may need pruning, but
/// the fence still does.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct OverlayFence {
    installed_ms: i64,
    owner: String,
    #[serde(default)]
    durable: bool,
    #[serde(default)]
    catalog_id: String,
    #[serde(default)]
    prune: Vec<NamespacePath>,
}

/// How many namespace paths an overlay fence records for pruning after a crash. The list
/// only matters when a delete is interrupted between releasing claims and pruning (the
/// uninterrupted path prunes inline); the bound keeps the fence far below the 400 KB item
/// limit. Beyond it, an interrupted delete may leave some empty overlay-created namespaces,
/// never delete anything else.
const MAX_RECORDED_PRUNE_PATHS: usize = 2000;

/// Deletes an overlay and only its contributions. Resumable: a retry under an existing
/// fence continues where the previous attempt stopped.
pub async fn delete(
    state: &AppState,
    account: &str,
    id: &str,
    if_match: Option<&str>,
) -> Result<()> {
    validate_resource_id(id).map_err(|_| Error::not_found("overlay"))?;
    let store = state.store.as_ref();
    let fence_key = keys::overlay_fence(account, id);
    let fence = store.get(&fence_key, Consistency::Strong).await?;
    let cur = match read::<OverlayRecord>(store, keys::overlay(account, id), Consistency::Strong)
        .await?
    {
        Some(c) => c,
        None => {
            let Some(item) = fence else {
                return Err(Error::not_found("overlay"));
            };
            // The record went in an earlier attempt: finish pruning, then drop the fence.
            let f: OverlayFence = item.json()?;
            prune_recorded(state, account, &f.catalog_id, &f.prune).await?;
            store
                .transact(Transaction::new().with(Op::delete(fence_key)))
                .await?;
            return Ok(());
        }
    };
    let o = &cur.value;
    if fence.is_none() {
        check_if_match(if_match, &etag_for(&o.id, o.revision))?;
        let body = to_body(&OverlayFence {
            installed_ms: state.clock.now_ms(),
            owner: flotilla_domain::names::new_id(),
            durable: true,
            catalog_id: o.catalog_id.clone(),
            prune: Vec::new(),
        })?;
        match store
            .transact(Transaction::new().with(Op::create(fence_key.clone(), body)))
            .await
        {
            Ok(()) => {}
            // A concurrent delete installed it: continue under it.
            Err(e) if super::is_condition_failure(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Record the namespaces to prune before any claim is released.
    let pk = keys::catalog_pk(&o.catalog_id);
    let mut claimed: Vec<NamespacePath> = Vec::new();
    for item in strong_scan(store, &pk, keys::CLAIM_PREFIX).await? {
        let c: ClaimRecord = item.json()?;
        if c.overlay_id == o.id {
            claimed.push(c.path);
        }
    }
    let Some(item) = store.get(&fence_key, Consistency::Strong).await? else {
        return Err(Error::unavailable(
            "the overlay deletion fence disappeared; retry",
        ));
    };
    let mut f: OverlayFence = item.json()?;
    let mut prune = f.prune.clone();
    for p in claimed {
        if prune.len() < MAX_RECORDED_PRUNE_PATHS && !prune.contains(&p) {
            prune.push(p);
        }
    }
    if prune != f.prune {
        f.prune = prune;
        f.catalog_id = o.catalog_id.clone();
        f.durable = true;
        store
            .transact(Transaction::new().with(Op::replace(
                fence_key.clone(),
                item.version,
                to_body(&f)?,
            )))
            .await
            .map_err(concurrent_delete)?;
    }
    retire_contributions(state, o, |_| false).await?;
    prune_recorded(state, account, &o.catalog_id, &f.prune).await?;
    for attempt in 0..MAX_ATTEMPTS {
        // Read again on every attempt: a rename that committed meanwhile moved the name.
        let Some(now) =
            read::<OverlayRecord>(store, keys::overlay(account, id), Consistency::Strong).await?
        else {
            return Ok(());
        };
        let o = &now.value;
        let mut tx = Transaction::new()
            .with(Op::delete_at(keys::overlay(account, id), now.version))
            .with(Op::delete(keys::integration_dependency(
                account,
                &o.integration_id,
                id,
            )))
            .with(Op::delete(keys::catalog_dependency(
                account,
                &o.catalog_id,
                id,
            )))
            .with(Op::delete(keys::overlay_status(account, id)));
        let name_key = keys::overlay_name(account, &o.display_name);
        if let Some(idx) =
            read::<NameIndexRecord>(store, name_key.clone(), Consistency::Strong).await?
            && idx.value.id == id
        {
            tx.push(Op::delete_at(name_key, idx.version));
        }
        // The overlay's demand leaves its integration's plan with it.
        tx.ops.extend(
            super::schedule::update_ops(
                store,
                account,
                &o.integration_id,
                state.clock.now_ms(),
                |s| {
                    let had = s.demand.remove(id).is_some();
                    super::schedule::Effect {
                        bump: had,
                        run_now: false,
                    }
                },
            )
            .await?,
        );
        // The fence goes with the record: once the record is gone nothing is left to fence,
        // and a cascade that resumes finds no dependency record leading it back to this
        // overlay.
        tx.push(Op::delete(fence_key.clone()));
        // Its grants go with it.
        tx.ops.extend(
            state
                .grant_cascade(account, &crate::acl::Securable::overlay(id))
                .await?,
        );
        record_account(
            state,
            &mut tx.ops,
            account,
            Operation::of_resource("deleted", "overlay", Some(id), Some(&o.display_name)),
        )?;
        match store.transact(tx).await {
            Ok(()) => return Ok(()),
            // Two deletes of one overlay (two cascades, or a cascade and a direct delete) ran
            // under the same fence and the other one finished first: the overlay is gone,
            // which is what this delete was asked for. Otherwise the scheduler state moved
            // (a tick leased the integration): decide again.
            Err(e) if super::is_condition_failure(&e) => {
                match read::<OverlayRecord>(store, keys::overlay(account, id), Consistency::Strong)
                    .await?
                {
                    None => return Ok(()),
                    Some(_) if attempt + 1 < MAX_ATTEMPTS => backoff(attempt).await,
                    Some(_) => return Err(concurrent_delete(e)),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable("overlay delete did not converge"))
}

/// A lost race with a concurrent delete of the same overlay: retryable (`503`), and a retry
/// resumes under the fence. Both used to surface as `500` (found by the deterministic
/// simulation: two cascades of one integration).
fn concurrent_delete(e: flotilla_metastore::MetastoreError) -> Error {
    if super::is_condition_failure(&e) {
        Error::unavailable(format!("a concurrent delete of this overlay moved on: {e}"))
    } else {
        e.into()
    }
}

/// Prunes each recorded path and its overlay-created ancestors, deepest first. Idempotent.
/// A namespace blocked by another delete's live guard fails the call (`409 DELETING`), so
/// the overlay delete stays resumable rather than finishing with a prunable namespace left.
async fn prune_recorded(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    paths: &[NamespacePath],
) -> Result<()> {
    if catalog_id.is_empty() {
        return Ok(());
    }
    let mut paths = paths.to_vec();
    paths.sort_by(|a, b| b.depth().cmp(&a.depth()).then(a.cmp(b)));
    for p in paths {
        let mut path = Some(p);
        while let Some(p) = path {
            match prune(state, account, catalog_id, &p).await? {
                Pruned::Deleted => path = p.parent(),
                Pruned::Kept => break,
                Pruned::Blocked => {
                    return Err(Error::deleting("a namespace of the target catalog"));
                }
            }
        }
    }
    Ok(())
}

/// Cascade entry point for integration deletion.
pub async fn delete_for_cascade(state: &AppState, account: &str, id: &str) -> Result<()> {
    match delete(state, account, id, None).await {
        Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes the relations this overlay manages (except those `keep` retains) and releases its
/// namespace claims for paths no kept relation needs, pruning overlay-created empty
/// namespaces. Each relation is deleted with a version condition and a directory bump.
pub async fn retire_contributions(
    state: &AppState,
    overlay: &OverlayRecord,
    keep: impl Fn(&RelationRecord) -> bool,
) -> Result<RetireCounts> {
    let store = state.store.as_ref();
    let pk = keys::catalog_pk(&overlay.catalog_id);
    let mut counts = RetireCounts::default();
    let relations = strong_scan(store, &pk, keys::RELATION_PREFIX).await?;
    let mut still_used: std::collections::BTreeSet<NamespacePath> = Default::default();
    for item in relations {
        let rec: RelationRecord = item.json()?;
        let Some(m) = &rec.managed_by else { continue };
        if m.overlay_id != overlay.id {
            continue;
        }
        if keep(&rec) {
            still_used.insert(rec.namespace.clone());
            continue;
        }
        let mut tx = Transaction::new()
            .with(Op::delete_at(item.key.clone(), item.version))
            .with(directory_bump(&overlay.catalog_id)?);
        let securable = crate::acl::Securable::relation(
            &overlay.catalog_id,
            &rec.namespace,
            &rec.name,
            rec.kind,
        );
        tx.ops
            .extend(state.grant_cascade(&overlay.account_id, &securable).await?);
        match store.transact(tx).await {
            Ok(()) => counts.relations += 1,
            Err(e) if super::is_condition_failure(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Claims: release those whose path keeps no relation of this overlay (deepest first, so
    // children are pruned before parents).
    let claims = strong_scan(store, &pk, keys::CLAIM_PREFIX).await?;
    let mut mine: Vec<(flotilla_metastore::Item, ClaimRecord)> = Vec::new();
    for item in claims {
        let c: ClaimRecord = item.json()?;
        if c.overlay_id == overlay.id {
            mine.push((item, c));
        }
    }
    mine.sort_by(|a, b| {
        b.1.path
            .depth()
            .cmp(&a.1.path.depth())
            .then(a.1.path.cmp(&b.1.path))
    });
    let needed = |p: &NamespacePath| still_used.iter().any(|u| p.is_prefix_of(u));
    for (item, claim) in mine {
        if needed(&claim.path) {
            continue;
        }
        store
            .transact(Transaction::new().with(Op::delete(item.key.clone())))
            .await?;
        counts.claims += 1;
        // The claimed namespace, then its overlay-created ancestors that became empty
        // (materialization may create parents it does not claim separately). Each prune
        // proves its own conditions, so a directly managed or still used ancestor stops it.
        let mut path = Some(claim.path.clone());
        while let Some(p) = path {
            if needed(&p)
                || !prune_namespace(state, &overlay.account_id, &overlay.catalog_id, &p).await?
            {
                break;
            }
            counts.namespaces += 1;
            path = p.parent();
        }
    }
    Ok(counts)
}

#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct RetireCounts {
    pub relations: u64,
    pub claims: u64,
    pub namespaces: u64,
}

/// What [`prune`] did.
enum Pruned {
    Deleted,
    /// Not eligible (directly managed, claimed, not empty) or already gone.
    Kept,
    /// Another delete's guard is live on the namespace; try again after its lease.
    Blocked,
}

/// Deletes a namespace only when overlay materialization created it, no overlay claims it,
/// and it holds no relations or child namespaces (all proven under its delete guard).
/// Answers whether it deleted it.
pub async fn prune_namespace(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<bool> {
    Ok(matches!(
        prune(state, account, catalog_id, path).await?,
        Pruned::Deleted
    ))
}

async fn prune(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Pruned> {
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let Some(ns) = read::<NamespaceRecord>(
            store,
            keys::namespace(catalog_id, path),
            Consistency::Strong,
        )
        .await?
        else {
            return Ok(Pruned::Kept);
        };
        if !ns.value.created_by_overlay {
            return Ok(Pruned::Kept);
        }
        let deps =
            || async {
                let deps = super::namespaces::count_dependents(store, catalog_id, path).await?;
                Ok((!deps.is_empty())
                    .then(|| Error::new(ErrorKind::HasDependents, "namespace in use")))
            };
        // The grants naming the namespace go with it.
        let grants = state
            .grant_cascade(account, &crate::acl::Securable::namespace(catalog_id, path))
            .await?;
        match super::guarded_delete(
            state,
            keys::namespace_guard(catalog_id, path),
            keys::namespace(catalog_id, path),
            ns.version,
            "namespace",
            deps,
            grants,
        )
        .await
        {
            Ok(super::GuardedOutcome::Deleted) => return Ok(Pruned::Deleted),
            // Lost a race with a writer: re-read and decide again.
            Ok(super::GuardedOutcome::Retry) => backoff(attempt).await,
            Err(e) if e.kind == ErrorKind::HasDependents => return Ok(Pruned::Kept),
            Err(e) if e.kind == ErrorKind::Deleting => return Ok(Pruned::Blocked),
            Err(e) => return Err(e),
        }
    }
    Ok(Pruned::Blocked)
}
