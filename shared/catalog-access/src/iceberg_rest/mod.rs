//! Iceberg REST catalog provider, from the Apache Iceberg REST catalog OpenAPI spec.
//!
//! - `GET /v1/config?warehouse=` is fetched once, lazily; the effective configuration is
//!   defaults, then the integration's connection properties, then overrides (spec order).
//!   `prefix` may arrive in `defaults` (Lakekeeper) or `overrides`. `overrides.uri` is
//!   deliberately ignored: the integration URI is the one the operator configured and the
//!   address policy was asked about, and a catalog must not be able to retarget us.
//! - Advertised `endpoints` gate views and the credentials endpoint; without the field the
//!   spec's default set (no views) applies.
//! - Listings send `pageToken=` (empty) on the first page when a page size is requested,
//!   which is how the spec asks a paginating server to paginate; servers that ignore it and
//!   send no `next-page-token` are legal.
//! - Answers are read as JSON values and checked field by field, so a non-conforming server
//!   (`metadataLocation`, namespaces as objects) is refused with the field named.
//! - OAuth2 tokens are cached, refreshed before expiry by one task at a time (a tokio mutex
//!   held across the token request), and refreshed once more on a 401/419.
//! - Vended credentials are requested with `X-Iceberg-Access-Delegation:
//!   vended-credentials`, cached per table in process memory, and renewed near expiry.

mod auth;
mod client;
mod parsing;
mod vending;

use std::time::Duration;

use crate::spi::CatalogProtocol;

pub use client::IcebergRestClient;
pub use parsing::{parse_load_table, parse_load_view};
pub use vending::select_vended_credentials;

/// Refresh an OAuth token this long before it expires (capped at half its lifetime).
pub const TOKEN_REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Renew cached vended credentials this long before they expire.
pub const CREDENTIAL_RENEW_MARGIN: Duration = Duration::from_secs(300);
/// Header asking for delegated storage access.
pub const ACCESS_DELEGATION_HEADER: &str = "x-iceberg-access-delegation";

pub(super) const EP_LIST_NAMESPACES: &str = "GET /v1/{prefix}/namespaces";
pub(super) const EP_LOAD_NAMESPACE: &str = "GET /v1/{prefix}/namespaces/{namespace}";
pub(super) const EP_LIST_TABLES: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables";
pub(super) const EP_LOAD_TABLE: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}";
pub(super) const EP_LIST_VIEWS: &str = "GET /v1/{prefix}/namespaces/{namespace}/views";
pub(super) const EP_LOAD_VIEW: &str = "GET /v1/{prefix}/namespaces/{namespace}/views/{view}";
pub(super) const EP_CREDENTIALS: &str =
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials";

/// The endpoints a server supports when it does not send `endpoints` (spec, `/v1/config`),
/// restricted to the reads this provider makes.
pub(super) const DEFAULT_ENDPOINTS: &[&str] = &[EP_LIST_NAMESPACES, EP_LIST_TABLES, EP_LOAD_TABLE];

/// Provider for [`CatalogProtocol::IcebergRest`].
#[derive(Debug, Clone, Copy, Default)]
pub struct IcebergRestProvider;

crate::spi::client_provider!(
    IcebergRestProvider,
    CatalogProtocol::IcebergRest,
    IcebergRestClient::new
);
