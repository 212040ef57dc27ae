//! ParqDB index catalogs as a product resource: the glue between the
//! `flotilla-parqdb` service and the rest of the control plane.
//!
//! - Every index catalog mutation carries the account guards ([`super::account_guards`]: the
//!   account exists and its deletion fence is absent) *inside its own transaction*, through the
//!   crate's [`TransactionGuard`] hook. An index can therefore not be published behind an
//!   account delete's cleanup: either it commits before the fence (and the cleanup sees it) or
//!   its transaction fails.
//! - Account delete removes each index catalog's partition and warehouse registration, and
//!   releases the account's warehouse prefix claims ([`cleanup_account_item`], called by the
//!   account delete's cleanup for every item of the account partition). Warehouse objects are
//!   the customer's and are never deleted by an account delete.
//! - [`IndexCatalogError`] becomes a service error through its one `From` impl, next to the
//!   type (`flotilla_parqdb::error_kind`); the HTTP status of each kind is decided in
//!   `flotilla-http` like everywhere else.

use std::future::Future;
use std::sync::Arc;

use flotilla_metastore::{Consistency, DynMetastore, Item, Metastore, Op, Query};
use flotilla_parqdb::catalog::{IndexCatalogService, IndexChange, TransactionGuard};
use flotilla_parqdb::error::IndexCatalogError;
use flotilla_parqdb::keys as ixkeys;
use flotilla_parqdb::store::{DefaultWarehouseStores, WarehouseStores};
use serde::{Deserialize, Serialize};

/// Garbage collection of index warehouses, for the operator tooling (`flotilla index gc`)
/// that runs against the metastore directly.
pub use flotilla_parqdb::gc;

use super::delete_items;
use super::idempotency::{self, IdempotencyRequest, RecordedResponse};
use crate::clock::ManualClock;
use crate::error::{Error, Result};
use crate::state::AppState;

/// Environment variable naming an S3-compatible endpoint (moto, MinIO) for `s3://` index
/// warehouses. Unset on AWS.
pub const S3_ENDPOINT_ENV: &str = "FLOTILLA_S3_ENDPOINT";

/// The warehouse object stores of a host without local warehouses (AWS): `s3://` only,
/// through the default AWS credential chain, sent to `FLOTILLA_S3_ENDPOINT` when that is set
/// (emulators). Read once by the host at start-up.
pub fn warehouse_stores_from_env() -> Arc<dyn WarehouseStores> {
    Arc::new(s3_stores_from_env())
}

/// The warehouse object stores of `flotilla serve`: `s3://` as on AWS, and `file://`
/// warehouses below `policy`'s root (see [`flotilla_parqdb::warehouse`]).
pub fn local_warehouse_stores(
    policy: flotilla_parqdb::warehouse::WarehousePolicy,
) -> Arc<dyn WarehouseStores> {
    Arc::new(s3_stores_from_env().with_policy(policy))
}

fn s3_stores_from_env() -> DefaultWarehouseStores {
    match std::env::var(S3_ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.trim().is_empty() => {
            DefaultWarehouseStores::new().with_s3_endpoint(endpoint.trim())
        }
        _ => DefaultWarehouseStores::new(),
    }
}

/// Adds the account guards to every mutating transaction of the index catalog service, for
/// an idempotent create the success receipt, so that receipt and resource are published in
/// one transaction (docs/api.md "Idempotency"), and with the application state the change's
/// event in the account's log (docs/events.md).
struct Guard {
    receipt: Option<Op>,
    /// The host whose events log the changes (`None`: operator tooling, no events).
    state: Option<AppState>,
}

impl TransactionGuard for Guard {
    fn conditions(&self, account: &str) -> Vec<Op> {
        let mut ops = super::account_guards(account);
        ops.extend(self.receipt.clone());
        ops
    }

    fn record(&self, account: &str, change: &IndexChange<'_>) -> Vec<Op> {
        let Some(state) = &self.state else {
            return Vec::new();
        };
        match super::events::account_op(state, account, index_event(change)) {
            Ok(op) => op.into_iter().collect(),
            // Encoding an event cannot fail in practice; a change is never refused for it.
            Err(e) => {
                tracing::error!(error = %e, account, "index catalog event not recorded");
                Vec::new()
            }
        }
    }
}

/// The event of an index catalog change: about the index catalog (the resource), naming
/// the index by namespace and name.
fn index_event(change: &IndexChange<'_>) -> super::events::Operation {
    use super::events::{ObjectName, Operation, Resource};
    let about = |kind: &str, catalog: &str| {
        Operation::account(
            &format!("x-flotilla-{kind}"),
            Some(Resource::new("index-catalog", None, Some(catalog))),
        )
    };
    let index =
        |kind: &str, catalog: &str, id: &flotilla_parqdb::types::IndexIdentifier| Operation {
            namespace: id.namespace.clone(),
            name: Some(id.name.clone()),
            ..about(kind, catalog)
        };
    match *change {
        IndexChange::CatalogCreated { catalog, warehouse } => {
            about("index-catalog-created", catalog)
                .with_details(serde_json::json!({ "warehouse": warehouse }))
        }
        IndexChange::NamespaceCreated { catalog, path } => Operation {
            namespace: path.to_vec(),
            ..about("index-namespace-created", catalog)
        },
        IndexChange::NamespaceDropped { catalog, path } => Operation {
            namespace: path.to_vec(),
            ..about("index-namespace-dropped", catalog)
        },
        IndexChange::Registered {
            catalog,
            index: id,
            metadata_location,
        } => index("index-registered", catalog, id).with_metadata_location(Some(metadata_location)),
        IndexChange::Committed {
            catalog,
            index: id,
            metadata_location,
        } => index("index-committed", catalog, id).with_metadata_location(Some(metadata_location)),
        IndexChange::Renamed {
            catalog,
            index: id,
            destination,
        } => Operation {
            destination: Some(ObjectName {
                namespace: destination.namespace.clone(),
                name: destination.name.clone(),
            }),
            ..index("index-renamed", catalog, id)
        },
        IndexChange::Dropped { catalog, index: id } => index("index-dropped", catalog, id),
    }
}

/// An index catalog service over `store`, guarded by the account fence. Cheap: a few `Arc`s.
pub fn open(
    store: DynMetastore,
    stores: Arc<dyn WarehouseStores>,
    clock: Arc<dyn crate::clock::Clock>,
) -> IndexCatalogService {
    IndexCatalogService::new(store, stores, clock).with_guard(Arc::new(Guard {
        receipt: None,
        state: None,
    }))
}

/// The index catalog service of the application state (its changes write events).
pub fn service(state: &AppState) -> IndexCatalogService {
    IndexCatalogService::new(
        state.store.clone(),
        state.index_stores.clone(),
        state.clock.clone(),
    )
    .with_guard(Arc::new(Guard {
        receipt: None,
        state: Some(state.clone()),
    }))
}

/// Runs one create (index catalog, namespace, register) and answers `201` with what it
/// created, under the receipt protocol when `idem` is given:
/// 1. [`idempotency::reserve`]: a replay answers the recorded response, a different request
///    under the key is `409 IDEMPOTENCY_KEY_REUSED`;
/// 2. the operation runs on a service whose guard adds the success receipt (conditioned on
///    the pending receipt's version) to the operation's own transaction. The response is
///    known beforehand: `expected(now)` is what the operation answers when its clock reads
///    `now` (the service runs on a clock stopped at `now`).
/// 3. On failure the receipt decides first (a concurrent request with the key may have
///    won); a receipt moved by such a request means another attempt; otherwise the error,
///    recorded in the receipt when it is final ([`idempotency::settle_failure`]).
pub async fn create<T, F, Fut>(
    state: &AppState,
    account: &str,
    idem: Option<IdempotencyRequest>,
    expected: impl Fn(i64) -> T,
    op: F,
) -> Result<RecordedResponse>
where
    T: Serialize,
    F: Fn(IndexCatalogService) -> Fut,
    Fut: Future<Output = Result<T, IndexCatalogError>>,
{
    let now = state.clock.now_ms();
    let service = |receipt: Option<Op>| {
        IndexCatalogService::new(
            state.store.clone(),
            state.index_stores.clone(),
            // Stopped at the start of the request, so that an idempotent create knows the
            // response it will answer (its `create_time`) before the transaction recording it.
            Arc::new(ManualClock::new(now)),
        )
        .with_guard(Arc::new(Guard {
            receipt,
            state: Some(state.clone()),
        }))
    };
    let Some(idem) = idem else {
        return match op(service(None)).await {
            Ok(created) => Ok(RecordedResponse::created(to_value(&created)?)),
            Err(e) => Err(explain(state, account, e).await),
        };
    };
    let response = RecordedResponse::created(to_value(&expected(now))?);
    for _ in 0..super::MAX_ATTEMPTS {
        let reservation = match idempotency::reserve(state, &idem).await? {
            Err(recorded) => return Ok(recorded),
            Ok(reservation) => reservation,
        };
        let receipt = idempotency::success_op(
            state,
            &idem,
            reservation.version,
            &reservation.reserved_id,
            &response,
        )?;
        let e = match op(service(Some(receipt))).await {
            Ok(_) => return Ok(response),
            Err(e) => e,
        };
        // The receipt decides first: moved by a concurrent request with the key (which also
        // fails our guard's receipt operation), the next attempt reads what it records;
        // otherwise it records the error when that is final.
        let error = explain(state, account, e).await;
        match idempotency::settle_failure(
            state,
            &idem,
            reservation.version,
            &reservation.reserved_id,
            error,
        )
        .await?
        {
            idempotency::Settled::Answer(answer) => return answer,
            idempotency::Settled::Moved => continue,
        }
    }
    Err(Error::unavailable(
        "idempotent index catalog create did not converge",
    ))
}

fn to_value<T: Serialize>(v: &T) -> Result<serde_json::Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("encode: {e}")))
}

/// Maps an error of an operation in `account`. The crate reports a failed account guard as
/// `NOT_FOUND` (it cannot tell the fence from a missing account); a `NOT_FOUND` is therefore
/// explained with strong reads: `409 DELETING` while the account is being deleted, `404` for
/// a missing account, else the crate's own `NOT_FOUND` (a missing index catalog).
pub async fn explain(state: &AppState, account: &str, e: IndexCatalogError) -> Error {
    if matches!(e, IndexCatalogError::NotFound { .. }) {
        match super::account_guard_error(state.store.as_ref(), account).await {
            Ok(Some(guard)) => return guard,
            Ok(None) => {}
            Err(read) => return read,
        }
    }
    Error::from(e)
}

/// The part of an index catalog record the cleanup needs.
#[derive(Deserialize)]
struct CatalogWarehouse {
    warehouse: String,
}

/// Account delete's cleanup of index catalogs, called for each item of the account
/// partition: a warehouse prefix claim is released; for an `IXC#{name}` item, the catalog's
/// partition (namespaces, mappings, reachability records) and its warehouse registration are
/// deleted. Other items are left alone. The account cleanup deletes the item itself
/// afterwards, so a retry after a failure finds the record again and repeats this
/// (idempotent) work.
pub async fn cleanup_account_item(store: &dyn Metastore, account: &str, item: &Item) -> Result<()> {
    // A warehouse prefix claim of the account: released, so the prefix is free again.
    let release = flotilla_parqdb::warehouse::release_ops(store, account, &item.key.sk)
        .await
        .map_err(Error::from)?;
    for op in release {
        // Only at the version read: losing that race means the claim changed hands or
        // was released already; either way it is no longer ours to delete.
        let _ = flotilla_metastore::put_one(store, op).await;
    }
    let Some(name) = item.key.sk.strip_prefix(ixkeys::INDEX_CATALOG_PREFIX) else {
        return Ok(());
    };
    let pk = ixkeys::catalog_partition(account, name);
    loop {
        let page = store
            .query(&Query::new(pk.clone(), "", Consistency::Strong).limit(100))
            .await?;
        if page.items.is_empty() {
            break;
        }
        delete_items(store, page.items.into_iter().map(|i| i.key).collect()).await?;
    }
    let record: CatalogWarehouse = super::decode(item)?;
    delete_items(
        store,
        vec![ixkeys::warehouse_registration(
            &record.warehouse,
            account,
            name,
        )],
    )
    .await
}
