//! The AWS deployment: DynamoDB metastore and configuration from the environment the SAM
//! template sets (`docs/deploy.md` lists every variable).

use std::sync::Arc;

use flotilla_core::auth::{Authenticator, Principal};
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::dynamo::{DynamoMetastore, connect};
use flotilla_metastore::metrics::CountingMetastore;

#[derive(Debug, thiserror::Error)]
pub enum AwsConfigError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
}

/// Settings read once at cold start.
#[derive(Clone, Debug)]
pub struct AwsSettings {
    pub table: String,
    pub reconcile_queue_url: Option<String>,
    pub secret_prefix: String,
    /// `FLOTILLA_AWS_ENDPOINT`: an emulator endpoint (tests and `cargo lambda watch`).
    pub endpoint: Option<String>,
}

impl AwsSettings {
    pub fn from_env() -> Result<Self, AwsConfigError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Ok(Self {
            table: var("FLOTILLA_TABLE").ok_or(AwsConfigError::Missing("FLOTILLA_TABLE"))?,
            reconcile_queue_url: var("FLOTILLA_RECONCILE_QUEUE_URL"),
            secret_prefix: var("FLOTILLA_SECRET_PREFIX").unwrap_or_else(|| "flotilla/dev".into()),
            endpoint: var("FLOTILLA_AWS_ENDPOINT"),
        })
    }
}

/// On AWS the API Gateway JWT authorizer authenticates; the Lambda host inserts the
/// principal from the claims. A bearer token reaching the function by any other path is
/// refused.
pub struct ClaimsOnly;

impl Authenticator for ClaimsOnly {
    fn authenticate(&self, _bearer: &str) -> Option<Principal> {
        None
    }
}

pub async fn build_state(settings: &AwsSettings) -> AppState {
    let client = connect(settings.endpoint.as_deref()).await;
    let counting = CountingMetastore::new(DynamoMetastore::new(client, settings.table.clone()));
    let counters = counting.counters();
    AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config::default(),
    )
    .with_metrics(Arc::new(move || counters.render_prometheus()))
    // Index warehouses on S3 (`FLOTILLA_S3_ENDPOINT` only for emulators).
    .with_index_stores(flotilla_core::service::index_catalogs::warehouse_stores_from_env())
}
