//! Record reads that several protocols share, below every service that uses them: an
//! overlay create reads the integration it binds, and the integration service reads its own
//! records, without the two services depending on each other (an integration's cascade
//! delete calls the overlay service, one way).

use flotilla_domain::keys;
use flotilla_domain::model::{CatalogRecord, IntegrationRecord};
use flotilla_domain::names::validate_resource_id;
use flotilla_metastore::{Consistency, Metastore};

use super::{Versioned, read};
use crate::error::{Error, Result};

/// An integration by id, strongly read; `404` when the id is malformed or names nothing.
pub async fn integration(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<IntegrationRecord>> {
    validate_resource_id(id).map_err(|_| Error::not_found("integration"))?;
    read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
        .await?
        .ok_or_else(|| Error::not_found("integration"))
}

/// A catalog by id, strongly read; `404` when the id is malformed or names nothing (the
/// catalog service's own load, and the event readers' existence check, which the catalog
/// service records events through).
pub async fn catalog(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<CatalogRecord>> {
    validate_resource_id(id).map_err(|_| Error::not_found("catalog"))?;
    read::<CatalogRecord>(store, keys::catalog(account, id), Consistency::Strong)
        .await?
        .ok_or_else(|| Error::not_found("catalog"))
}
