//! What capture leaves in a catalog's warehouse when the catalog goes (`docs/capture.md`,
//! "Deleting a catalog"). Capture keeps each overlay table's captured state as an object
//! below `_flotilla/capture/` of the catalog's warehouse; its pointer and error records are
//! items of the catalog partition, which the catalog's deletion purges. The objects are swept
//! here: the deletion's own transaction records the sweep (`SYSTEM` / `CAPSWEEP#{catalog}`),
//! the deleting request then deletes every object below the prefix and the record. A sweep
//! that fails (storage unavailable, the request's process gone) leaves the record, and the
//! next catalog deletion on the host, or [`sweep_pending`], completes it.

use flotilla_base::error::{Error, Result};
use flotilla_base::store::{read, to_body};
use flotilla_domain::keys;
use flotilla_domain::model::CatalogRecord;
use flotilla_metastore::{Consistency, Op, Query, Transaction};
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::state::AppState;

/// The directory of captured state below a catalog's warehouse.
pub const CAPTURE_DIR: &str = "_flotilla/capture";

/// Sweeps a pass of [`sweep_pending`] takes at most.
pub const SWEEPS_PER_PASS: usize = 8;

/// A deleted catalog's captured objects still to be deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSweep {
    pub account_id: String,
    pub catalog_id: String,
    /// The catalog's warehouse URI (with its trailing `/`).
    pub warehouse: String,
}

/// The op recording the sweep of a catalog about to be deleted, when capture published
/// anything in it (a pointer in its partition) and it has a warehouse. Goes into the
/// deletion's final transaction, so a catalog that stays is never swept.
pub async fn sweep_op(state: &AppState, catalog: &CatalogRecord) -> Result<Option<Op>> {
    let captured = state
        .store
        .count(
            &keys::catalog_pk(&catalog.id),
            keys::CAPTURE_PREFIX,
            Consistency::Strong,
        )
        .await?;
    if captured == 0 {
        return Ok(None);
    }
    let Some(warehouse) = catalog.warehouse_uri(state.index_stores.policy().file_root()) else {
        return Ok(None);
    };
    let sweep = CaptureSweep {
        account_id: catalog.account_id.clone(),
        catalog_id: catalog.id.clone(),
        warehouse,
    };
    Ok(Some(Op::put(
        keys::capture_sweep(&catalog.id),
        to_body(&sweep)?,
    )))
}

/// Deletes every captured object of a deleted catalog, then its sweep record. Answers how
/// many objects were deleted (`0` when there was no record). Idempotent.
pub async fn sweep(state: &AppState, catalog_id: &str) -> Result<usize> {
    let store = state.store.as_ref();
    let Some(rec) =
        read::<CaptureSweep>(store, keys::capture_sweep(catalog_id), Consistency::Strong).await?
    else {
        return Ok(0);
    };
    let unavailable = |e: &dyn std::fmt::Display| {
        Error::unavailable(format!("sweeping captured state of {catalog_id}: {e}"))
    };
    let deleted = match flotilla_parqdb::location::Warehouse::parse(&rec.value.warehouse) {
        // A warehouse the host can no longer open holds nothing it could sweep.
        Err(_) => 0,
        Ok(warehouse) => {
            let objects = state
                .index_stores
                .open(&warehouse)
                .map_err(|e| unavailable(&e))?;
            let prefix = object_store::path::Path::from(CAPTURE_DIR);
            let listed: Vec<object_store::ObjectMeta> =
                ObjectStore::list(objects.as_ref(), Some(&prefix))
                    .try_collect()
                    .await
                    .map_err(|e| unavailable(&e))?;
            for meta in &listed {
                match objects.delete(&meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(unavailable(&e)),
                }
            }
            listed.len()
        }
    };
    store
        .transact(
            Transaction::new().with(Op::delete_at(keys::capture_sweep(catalog_id), rec.version)),
        )
        .await?;
    if deleted > 0 {
        tracing::info!(
            catalog_id,
            objects = deleted,
            "captured state of a deleted catalog swept"
        );
    }
    Ok(deleted)
}

/// Sweeps left by earlier deletions, at most [`SWEEPS_PER_PASS`]; answers how many completed.
/// Failures are logged and stay recorded for the next pass.
pub async fn sweep_pending(state: &AppState) -> usize {
    let q = Query::new(
        keys::SYSTEM_PK,
        keys::CAPTURE_SWEEP_PREFIX,
        Consistency::Strong,
    )
    .limit(SWEEPS_PER_PASS);
    let page = match state.store.query(&q).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "listing pending capture sweeps failed");
            return 0;
        }
    };
    let mut done = 0;
    for item in page.items {
        let Some(catalog_id) = item.key.sk.strip_prefix(keys::CAPTURE_SWEEP_PREFIX) else {
            continue;
        };
        match sweep(state, catalog_id).await {
            Ok(_) => done += 1,
            Err(e) => {
                tracing::warn!(catalog_id, error = %e, "capture sweep failed; kept for the next pass")
            }
        }
    }
    done
}
