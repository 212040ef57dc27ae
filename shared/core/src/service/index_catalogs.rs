//! ParqDB index catalogs (seed 002) as a product resource: the glue between the
//! `flotilla-parqdb` service and the rest of the control plane.
//!
//! - Every index catalog mutation carries the account guards ([`super::account_guards`]: the
//!   account exists and its deletion fence is absent) *inside its own transaction*, through the
//!   crate's [`TransactionGuard`] hook. An index can therefore not be published behind an
//!   account delete's cleanup: either it commits before the fence (and the cleanup sees it) or
//!   its transaction fails.
//! - Account delete removes each index catalog's partition and warehouse registration
//!   ([`IndexCatalogCleanup`], registered by [`AppState::new`](crate::AppState::new)). Warehouse
//!   objects are the customer's and are never deleted by an account delete.
//! - [`api_error`] is the one mapping of [`IndexCatalogError`] to the API's codes; the status of
//!   each code is decided by [`Code::status`] like everywhere else.

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_metastore::{Consistency, DynMetastore, Item, Metastore, Op, Query};
use flotilla_parqdb::catalog::{IndexCatalogService, TransactionGuard};
use flotilla_parqdb::error::IndexCatalogError;
use flotilla_parqdb::keys as ixkeys;
use flotilla_parqdb::store::{DefaultWarehouseStores, WarehouseStores};
use serde::Deserialize;

/// Garbage collection of index warehouses, for the operator tooling (`flotilla index gc`)
/// that runs against the metastore directly.
pub use flotilla_parqdb::gc;

use super::accounts::{AccountCleanup, delete_items};
use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;

/// Environment variable naming an S3-compatible endpoint (moto, MinIO) for `s3://` index
/// warehouses. Unset on AWS.
pub const S3_ENDPOINT_ENV: &str = "FLOTILLA_S3_ENDPOINT";

/// The warehouse object stores a host uses: `file://` locally, `s3://` through the default
/// AWS credential chain, sent to `FLOTILLA_S3_ENDPOINT` when that is set (emulators). Read
/// once by the host at start-up.
pub fn warehouse_stores_from_env() -> Arc<dyn WarehouseStores> {
    let stores = match std::env::var(S3_ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.trim().is_empty() => {
            DefaultWarehouseStores::new().with_s3_endpoint(endpoint.trim())
        }
        _ => DefaultWarehouseStores::new(),
    };
    Arc::new(stores)
}

/// The core clock seen through the ParqDB clock trait, so that reachability times and
/// garbage collection follow the same (injectable) clock as every other timestamp.
struct CoreClock(Arc<dyn crate::clock::Clock>);

impl flotilla_parqdb::clock::Clock for CoreClock {
    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }
}

/// Adds the account guards to every mutating transaction of the index catalog service.
struct AccountFence;

impl TransactionGuard for AccountFence {
    fn conditions(&self, account: &str) -> Vec<Op> {
        super::account_guards(account)
    }
}

/// An index catalog service over `store`, guarded by the account fence. Cheap: a few `Arc`s.
pub fn open(
    store: DynMetastore,
    stores: Arc<dyn WarehouseStores>,
    clock: Arc<dyn crate::clock::Clock>,
) -> IndexCatalogService {
    IndexCatalogService::new(store, stores, Arc::new(CoreClock(clock)))
        .with_guard(Arc::new(AccountFence))
}

/// The index catalog service of the application state.
pub fn service(state: &AppState) -> IndexCatalogService {
    open(
        state.store.clone(),
        state.index_stores.clone(),
        state.clock.clone(),
    )
}

/// The one mapping of the catalog's typed errors to API errors. Exhaustive on purpose: a new
/// error kind in the crate must be given a code here. 5xx kinds keep their detail for the log
/// only ([`ApiError::unavailable`], [`ApiError::internal`]).
pub fn api_error(e: IndexCatalogError) -> ApiError {
    use IndexCatalogError as E;
    match e {
        E::NamespaceNotFound { message } => ApiError::new(Code::NamespaceNotFound, message),
        E::IndexNotFound { message } => ApiError::new(Code::IndexNotFound, message),
        E::AlreadyExists { message } => ApiError::new(Code::AlreadyExists, message),
        E::InvalidIndexMetadata { rule, message } => {
            ApiError::new(Code::InvalidIndexMetadata, format!("{rule}: {message}"))
                .with_detail("rule", rule.as_str())
        }
        E::UnsupportedFormatVersion { message } => {
            ApiError::new(Code::UnsupportedFormatVersion, message)
        }
        E::IndexUuidMismatch { message } => ApiError::new(Code::IndexUuidMismatch, message),
        E::CommitConflict { message } => ApiError::new(Code::CommitConflict, message),
        E::NotFound { message } => ApiError::new(Code::NotFound, message),
        E::HasDependents { message } => ApiError::new(Code::HasDependents, message),
        E::InvalidArgument { message } => ApiError::new(Code::InvalidArgument, message),
        E::Unavailable { message } => ApiError::unavailable(message),
        E::Internal { message } => ApiError::internal(message),
    }
}

impl From<IndexCatalogError> for ApiError {
    fn from(e: IndexCatalogError) -> Self {
        api_error(e)
    }
}

/// Maps an error of an operation in `account`. The crate reports a failed account guard as
/// `NOT_FOUND` (it cannot tell the fence from a missing account); a `NOT_FOUND` is therefore
/// explained with strong reads: `409 DELETING` while the account is being deleted, `404` for
/// a missing account, else the crate's own `NOT_FOUND` (a missing index catalog).
pub async fn explain(state: &AppState, account: &str, e: IndexCatalogError) -> ApiError {
    if matches!(e, IndexCatalogError::NotFound { .. }) {
        match super::account_guard_error(state.store.as_ref(), account).await {
            Ok(Some(guard)) => return guard,
            Ok(None) => {}
            Err(read) => return read,
        }
    }
    api_error(e)
}

/// The part of an index catalog record the cleanup needs.
#[derive(Deserialize)]
struct CatalogWarehouse {
    warehouse: String,
}

/// Account delete's cleanup of index catalogs: for each `IXC#{name}` item of the account
/// partition, deletes the catalog's partition (namespaces, mappings, reachability records) and
/// its warehouse registration. The account cleanup deletes the record itself afterwards, so a
/// retry after a failure finds the record again and repeats this (idempotent) work.
pub struct IndexCatalogCleanup {
    store: DynMetastore,
}

impl IndexCatalogCleanup {
    pub fn new(store: DynMetastore) -> Self {
        Self { store }
    }
}

#[async_trait]
impl AccountCleanup for IndexCatalogCleanup {
    async fn cleanup_item(&self, account: &str, item: &Item) -> ApiResult<()> {
        let Some(name) = item.key.sk.strip_prefix(ixkeys::INDEX_CATALOG_PREFIX) else {
            return Ok(());
        };
        let store: &dyn Metastore = self.store.as_ref();
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
}
