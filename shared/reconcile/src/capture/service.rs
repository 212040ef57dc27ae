//! The API's view of capture: a table's capture state and visibility, the current
//! validation-error records, and the per-table visibility override.

use flotilla_base::error::{Error, ErrorKind, Result};
use flotilla_base::store::{Versioned, read, to_body};
use flotilla_domain::keys;
use flotilla_domain::model::{RelationKind, RelationRecord};
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Query, Transaction, query_all};
use serde_json::{Value, json};

use super::record::{CapturePointer, ValidationErrorRecord, Visibility};
use flotilla_services::state::AppState;

/// The capture pointer of one relation.
pub async fn pointer(
    store: &dyn Metastore,
    catalog_id: &str,
    relation_id: &str,
    consistency: Consistency,
) -> Result<Option<Versioned<CapturePointer>>> {
    read(
        store,
        keys::capture_pointer(catalog_id, relation_id),
        consistency,
    )
    .await
}

/// Every capture pointer of a catalog, by relation id.
pub async fn pointers(
    store: &dyn Metastore,
    catalog_id: &str,
) -> Result<std::collections::HashMap<String, CapturePointer>> {
    let mut out = std::collections::HashMap::new();
    for item in query_all(
        store,
        Query::new(
            keys::catalog_pk(catalog_id),
            keys::CAPTURE_PREFIX,
            Consistency::Eventual,
        ),
    )
    .await?
    {
        let p: CapturePointer = item.json()?;
        out.insert(p.relation_id.clone(), p);
    }
    Ok(out)
}

/// The current error records of one table (those of the validation its pointer names).
pub async fn current_errors(
    store: &dyn Metastore,
    catalog_id: &str,
    p: &CapturePointer,
) -> Result<Vec<ValidationErrorRecord>> {
    if p.errors == 0 {
        return Ok(Vec::new());
    }
    let prefix = format!(
        "{}{}#",
        keys::validation_errors_prefix(&p.relation_id),
        p.validation_id
    );
    let mut out = Vec::new();
    for item in query_all(
        store,
        Query::new(keys::catalog_pk(catalog_id), prefix, Consistency::Strong),
    )
    .await?
    {
        out.push(item.json()?);
    }
    Ok(out)
}

async fn table(
    store: &dyn Metastore,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
) -> Result<Versioned<RelationRecord>> {
    read::<RelationRecord>(
        store,
        keys::relation(catalog_id, ns, name),
        Consistency::Strong,
    )
    .await?
    .filter(|r| r.value.kind == RelationKind::Table)
    .ok_or_else(|| Error::not_found("table"))
}

async fn require_catalog(state: &AppState, account: &str, catalog_id: &str) -> Result<()> {
    if state
        .store
        .get(&keys::catalog(account, catalog_id), Consistency::Eventual)
        .await?
        .is_none()
    {
        return Err(Error::not_found("catalog"));
    }
    Ok(())
}

/// The visibility document of a table: state, counts and its current errors.
pub fn describe(p: Option<&CapturePointer>, errors: &[ValidationErrorRecord]) -> Value {
    let v = Visibility::of(p);
    json!({
        "visible": v.visible,
        "state": v.state,
        "errors": v.errors,
        "visibility_override": v.visibility_override,
        "reason": v.reason,
        "snapshot_id": p.and_then(|p| p.snapshot_id),
        "metadata_location": p.map(|p| p.metadata_location.clone()),
        "validation_generation": p.map(|p| p.validation_generation),
        "files": p.map(|p| p.files),
        "records": p.map(|p| p.records),
        "captured_at": p.map(|p| p.captured_at.clone()),
        "validation_errors": errors,
    })
}

/// `GET .../tables/{t}/validation`.
pub async fn get_table(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
) -> Result<Value> {
    require_catalog(state, account, catalog_id).await?;
    let store = state.store.as_ref();
    let rel = table(store, catalog_id, ns, name).await?;
    let p = pointer(store, catalog_id, &rel.value.id, Consistency::Strong).await?;
    let errors = match &p {
        Some(p) => current_errors(store, catalog_id, &p.value).await?,
        None => Vec::new(),
    };
    Ok(describe(p.as_ref().map(|p| &p.value), &errors))
}

/// `GET .../catalogs/{c}/validation-errors`: every current error record of the catalog, one
/// per failing file, ordered by table path then file.
pub async fn list_errors(state: &AppState, account: &str, catalog_id: &str) -> Result<Value> {
    require_catalog(state, account, catalog_id).await?;
    let store = state.store.as_ref();
    let mut ptrs: Vec<CapturePointer> = pointers(store, catalog_id)
        .await?
        .into_values()
        .filter(|p| p.errors > 0)
        .collect();
    ptrs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut items = Vec::new();
    for p in &ptrs {
        let mut errs = current_errors(store, catalog_id, p).await?;
        errs.sort_by(|a, b| a.file_path.cmp(&b.file_path));
        for e in errs {
            let mut v = serde_json::to_value(&e).unwrap_or(Value::Null);
            v["visibility_override"] = json!(p.visibility_override);
            items.push(v);
        }
    }
    Ok(json!({"items": items}))
}

/// `PUT .../tables/{t}/visibility` `{"override": bool}`: makes a table query-visible despite
/// current file errors (the records stay listable), or withdraws that.
pub async fn set_override(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    visible: bool,
) -> Result<Value> {
    require_catalog(state, account, catalog_id).await?;
    let store = state.store.as_ref();
    let rel = table(store, catalog_id, ns, name).await?;
    if rel.value.managed_by.is_none() {
        return Err(Error::new(
            ErrorKind::FailedPrecondition,
            "only overlay tables have a capture state and a visibility override",
        ));
    }
    for _ in 0..8 {
        let Some(mut p) = pointer(store, catalog_id, &rel.value.id, Consistency::Strong).await?
        else {
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                "the table has not been captured yet; its visibility follows its first validation",
            ));
        };
        if p.value.visibility_override != visible {
            let before = p.value.clone();
            p.value.visibility_override = visible;
            p.value
                .settle_visible_at(Some(&before), &state.clock.now_rfc3339());
            let tx = Transaction::new()
                .with(Op::check(
                    keys::relation(catalog_id, ns, name),
                    Condition::Exists,
                ))
                .with(Op::replace(
                    keys::capture_pointer(catalog_id, &rel.value.id),
                    p.version,
                    to_body(&p.value)?,
                ));
            match store.transact(tx).await {
                Ok(()) => {}
                Err(flotilla_metastore::MetastoreError::ConditionFailed { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let errors = current_errors(store, catalog_id, &p.value).await?;
        return Ok(describe(Some(&p.value), &errors));
    }
    Err(Error::unavailable(
        "the visibility override did not converge",
    ))
}

/// The reconcile queue the API enqueues capture jobs on, or why there is none.
fn work_sender(state: &AppState) -> Result<&dyn flotilla_services::state::WorkSender> {
    state.work.as_deref().ok_or_else(|| {
        Error::failed_precondition(
            "this host has no reconcile queue (FLOTILLA_RECONCILE_QUEUE_URL is not set), so \
             capture jobs cannot be queued",
        )
        .with_detail("reason", "NO_QUEUE")
    })
}

/// The capture message of an overlay as a job would observe it now: refused (as the job
/// would refuse it) when the overlay is unknown, paused, being deleted, or its integration is.
async fn capture_message(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    revalidate: bool,
) -> Result<crate::message::CaptureMessage> {
    match crate::observe(state, account, overlay_id).await {
        Ok(o) => {
            if revalidate {
                // An operator's revalidation lifts the overlay's quarantines
                // (`capture::attempt`): the job it queues reads those tables again.
                let lifted = super::attempt::lift(
                    state.store.as_ref(),
                    &o.overlay.catalog_id,
                    &o.overlay.id,
                )
                .await?;
                if lifted > 0 {
                    tracing::info!(overlay_id = %o.overlay.id, lifted, "capture quarantine lifted");
                }
            }
            Ok(crate::message::CaptureMessage {
                account_id: account.to_owned(),
                overlay_id: o.overlay.id.clone(),
                observed_generation: o.overlay.generation,
                revalidate,
            })
        }
        Err(crate::ReconcileError::Paused(what)) => Err(Error::failed_precondition(format!(
            "{what} is paused; unpause it to capture its tables"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// `POST .../overlays/{id}/capture[?revalidate=true]`: checks the overlay (`404` unknown,
/// `409` paused or being deleted) and queues one capture job at its current generation for
/// the workers (`docs/capture.md`). Answers the message queued.
pub async fn enqueue_capture(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    revalidate: bool,
) -> Result<Value> {
    let m = capture_message(state, account, overlay_id, revalidate).await?;
    work_sender(state)?.send_bodies(&[m.to_body()]).await?;
    Ok(json!({"queued": m.to_json()}))
}

/// Describing an integration with `revalidate=true`: one revalidation job queued per active
/// overlay of the integration. Answers one entry per overlay: the message queued, or why none
/// was (paused, being deleted).
pub async fn enqueue_revalidation(
    state: &AppState,
    account: &str,
    integration_id: &str,
) -> Result<Value> {
    let prefix = keys::integration_dependency_prefix(integration_id);
    let deps = query_all(
        state.store.as_ref(),
        Query::new(
            keys::account_pk(account),
            prefix.as_str(),
            Consistency::Strong,
        ),
    )
    .await?;
    let mut out = Vec::new();
    let mut bodies = Vec::new();
    for item in deps {
        let Some(overlay_id) = item.key.sk.strip_prefix(prefix.as_str()) else {
            continue;
        };
        match capture_message(state, account, overlay_id, true).await {
            Ok(m) => {
                bodies.push(m.to_body());
                out.push(json!({"overlay_id": overlay_id, "queued": m.to_json()}));
            }
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => out.push(json!({
                "overlay_id": overlay_id,
                "error": {"code": e.kind.as_str(), "message": e.message},
            })),
        }
    }
    if !bodies.is_empty() {
        work_sender(state)?.send_bodies(&bodies).await?;
    }
    Ok(Value::Array(out))
}
