//! The directory operations that need the application state: catalog-finalize (the
//! authority marker) and a catalog's directory read from the state's replica. The replica
//! itself, the generation and the marker's format are `flotilla_directory`.

use flotilla_directory::{AuthorityRecord, AuthorityStatus, DirectoryView, Prefetched};
use flotilla_domain::keys;
use flotilla_metastore::{Consistency, Op, Transaction};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::service::{MAX_ATTEMPTS, backoff, catalogs, is_condition_failure, to_body};
use crate::state::AppState;

/// `catalog-finalize`: makes the directory generation authoritative for the deployment.
///
/// Refused with `409 FAILED_PRECONDITION` (details name the missing acknowledgements) unless
/// the operator acknowledges both that every writer now bumps the generation
/// (`acknowledge_writer_rollout`) and that write admission is quiescent
/// (`acknowledge_quiescent_writes`): a replica that trusts the generation while an old writer
/// still runs would miss that writer's tables forever. The marker is written put-if-absent,
/// so the operation is idempotent (a later call answers the first call's `enabled_at`) and
/// monotonic (nothing deletes the marker; no API reverts it).
pub async fn finalize(
    state: &AppState,
    acknowledge_writer_rollout: bool,
    acknowledge_quiescent_writes: bool,
) -> Result<AuthorityStatus> {
    let mut missing = Vec::new();
    if !acknowledge_writer_rollout {
        missing.push("acknowledge_writer_rollout");
    }
    if !acknowledge_quiescent_writes {
        missing.push("acknowledge_quiescent_writes");
    }
    if !missing.is_empty() {
        return Err(Error::failed_precondition("catalog-finalize requires both a complete writer rollout and quiescent write admission to be acknowledged",
        )
        .with_detail("missing_acknowledgements", json!(missing)));
    }
    let store = state.store.as_ref();
    let marker = keys::directory_authority();
    for attempt in 0..MAX_ATTEMPTS {
        if let Some(item) = store.get(&marker, Consistency::Strong).await? {
            let rec: AuthorityRecord = item.json()?;
            return Ok(AuthorityStatus::from_record(&rec));
        }
        let rec = AuthorityRecord {
            enabled_at: state.clock.now_rfc3339(),
            acknowledged_writer_rollout: true,
            acknowledged_quiescent_writes: true,
        };
        match store
            .transact(Transaction::new().with(Op::create(marker.clone(), to_body(&rec)?)))
            .await
        {
            Ok(()) => {
                tracing::info!(enabled_at = %rec.enabled_at, "directory authority enabled by catalog-finalize");
                return Ok(AuthorityStatus::from_record(&rec));
            }
            // Someone else finalized first, or our write may have applied: re-read.
            Err(e) if is_condition_failure(&e) || e.is_outcome_unknown() => {}
            Err(e) if e.is_retryable() => backoff(attempt).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable("catalog-finalize did not converge"))
}

/// The directory of a catalog of `account` from the state's replica: checks the catalog
/// belongs to the account (404 otherwise), refreshes, and answers the snapshot with its
/// health. Shared by the HTTP route and `functions/query`.
///
/// The catalog, its generation and (until a replica has seen it) the authority marker are
/// read in one round trip, so a warm, unchanged directory costs one strong read.
///
/// The entries are those the caller may read: a reader of one namespace sees that
/// namespace's tables and views only.
pub async fn get(state: &AppState, access: &crate::acl::Access, catalog_id: &str) -> Result<Value> {
    let view = get_view(state, &access.account, catalog_id).await?;
    if access.is_admin() {
        return Ok(view.to_api(catalog_id));
    }
    let entries: Vec<&flotilla_directory::DirectoryEntry> = view
        .snapshot
        .entries
        .iter()
        .filter(|e| {
            let ns = flotilla_domain::names::NamespacePath::new(e.namespace.clone());
            ns.is_ok_and(|ns| {
                access.allows(
                    crate::acl::Action::Read,
                    &crate::acl::Securable::relation(catalog_id, &ns, &e.name, e.kind),
                )
            })
        })
        .collect();
    Ok(serde_json::json!({
        "catalog_id": catalog_id,
        "entries": entries,
        "health": view.health,
    }))
}

/// [`get`] without rendering: the published snapshot and its health, for callers that take
/// part of the entries (the Iceberg endpoint's table listings). Same reads as [`get`].
pub async fn get_view(state: &AppState, account: &str, catalog_id: &str) -> Result<DirectoryView> {
    let generation = keys::directory_generation(catalog_id);
    let authority = keys::directory_authority();
    let mut wanted = vec![generation.clone()];
    let ask_authority = !state.directory.authority_seen();
    if ask_authority {
        wanted.push(authority.clone());
    }
    let reads = catalogs::fetch_with(state.store.as_ref(), account, catalog_id, wanted).await?;
    catalogs::load_from(&reads, account, catalog_id)?;
    let pre = Prefetched::new(
        reads.item(&generation).map(|i| i.body.clone()),
        ask_authority.then(|| reads.item(&authority).is_some()),
    );
    let view = state
        .directory
        .read_with(
            state.store.as_ref(),
            state.clock.as_ref(),
            catalog_id,
            Some(pre),
        )
        .await?;
    Ok(view)
}
