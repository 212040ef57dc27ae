//! Integrations: reads.

use super::*;

/// An integration by id (the read lives in `service::records`, below the overlay service
/// that also needs it).
pub use crate::service::records::integration as load;

pub async fn get(state: &AppState, account: &str, id: &str) -> Result<Value> {
    Ok(load(state.store.as_ref(), account, id)
        .await?
        .value
        .to_api())
}

/// The integrations the caller may see.
pub async fn list(
    state: &AppState,
    access: &crate::acl::Access,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let (items, next) = crate::service::list_page(
        state.store.as_ref(),
        &keys::account_pk(&access.account),
        keys::INTEGRATION_PREFIX,
        "integrations",
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            let rec = crate::service::decode::<IntegrationRecord>(item)?;
            Ok(access
                .visible(&crate::acl::Securable::integration(&rec.id))
                .then(|| rec.to_api()))
        },
    )
    .await?;
    Ok(crate::service::page_body(items, next))
}
