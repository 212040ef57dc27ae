#![forbid(unsafe_code)]
//! Connector-independent catalog access: the SPI ([`spi`]), the provider registry
//! ([`factory`]), shared HTTP hardening
//! ([`http`], and [`object_storage`] for the object stores capture opens), and the providers for Iceberg REST ([`iceberg_rest`]), Unity Catalog
//! ([`unity`]) and Delta Sharing ([`delta_sharing`]). See `docs/catalog-access.md`.

mod common;
pub mod delta_sharing;
pub mod error;
mod error_kind;
pub mod factory;
pub mod field_ids;
pub mod http;
pub mod iceberg_rest;
pub mod object_storage;
pub mod protocol;
pub mod secret;
pub mod sigv4;
pub mod spi;
pub mod unity;

pub use error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
pub use error_kind::RETRY_AFTER_DETAIL;
pub use factory::CatalogClientFactory;
pub use spi::*;
