#![forbid(unsafe_code)]
//! ParqDB index catalog (`docs/parqdb.md`).
//!
//! - [`metadata`]: the strict validator of index metadata documents (the format rules: `docs/parqdb.md`, "Metadata validation").
//! - [`location`]: warehouse URIs, warehouse-relative locations, "inside the warehouse".
//! - [`catalog`]: [`IndexCatalogService`], the catalog operations over the metastore.
//! - [`gc`]: garbage collection of objects that lost catalog reachability.
//! - [`keys`]: the metastore keys of index catalogs, defined with every other storage key in
//!   `flotilla_domain::keys` (re-exported here).
//! - [`types`]: the request and response shapes of the `index-catalogs` routes.
//! - [`warehouse`]: which warehouses a host and an account may use (reused by every
//!   resource that names a warehouse).

pub mod catalog;
pub use flotilla_domain::clock;
pub mod error;
mod error_kind;
pub mod gc;
pub mod location;
pub mod metadata;
pub mod store;
pub mod types;
pub use flotilla_domain::keys::index_catalog as keys;
pub mod warehouse;

pub use catalog::{IndexCatalogService, TransactionGuard};
pub use error::IndexCatalogError;
pub use metadata::{IndexMetadata, MetadataError, Rule, validate_bytes, validate_successor};
