//! Integrations: reads.

use super::*;

pub async fn load(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<IntegrationRecord>> {
    validate_resource_id(id).map_err(|_| Error::not_found("integration"))?;
    read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
        .await?
        .ok_or_else(|| Error::not_found("integration"))
}

pub async fn get(state: &AppState, account: &str, id: &str) -> Result<Value> {
    Ok(load(state.store.as_ref(), account, id)
        .await?
        .value
        .to_api())
}

pub async fn list(
    state: &AppState,
    account: &str,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let (items, next) = crate::service::list_page(
        state.store.as_ref(),
        &keys::account_pk(account),
        keys::INTEGRATION_PREFIX,
        "integrations",
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            Ok(Some(
                crate::service::decode::<IntegrationRecord>(item)?.to_api(),
            ))
        },
    )
    .await?;
    Ok(crate::service::page_body(items, next))
}
