//! The AWS deployment: DynamoDB metastore and configuration from the environment the SAM
//! template sets (`docs/deploy.md` lists every variable).
//!
//! A function wires only the backends it runs, chosen by this crate's features:
//! `secrets-manager` (integration credentials in Secrets Manager; without it the state keeps
//! the core's "no credential store") and `object-stores` (index warehouses on S3, honouring
//! `FLOTILLA_S3_ENDPOINT`; without it the core's default stores).

use std::sync::Arc;

use flotilla_base::clock::SystemClock;
use flotilla_metastore::dynamo::{DynamoMetastore, connect};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_services::auth::{Authenticator, Principal};
use flotilla_services::{AppState, Config};

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
    /// `FLOTILLA_CAPTURE_QUEUE_URL`: where capture messages go (the capture function's
    /// queue); without it they go to the reconcile queue.
    pub capture_queue_url: Option<String>,
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
            capture_queue_url: var("FLOTILLA_CAPTURE_QUEUE_URL"),
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

/// What every function's `main` starts with: JSON log lines, the settings from the
/// environment, and the state built from them.
pub async fn start() -> Result<(AwsSettings, AppState), AwsConfigError> {
    crate::telemetry::init(true);
    let settings = AwsSettings::from_env()?;
    let state = build_state(&settings).await;
    Ok((settings, state))
}

pub async fn build_state(settings: &AwsSettings) -> AppState {
    let client = connect(settings.endpoint.as_deref()).await;
    let counting = CountingMetastore::new(DynamoMetastore::new(client, settings.table.clone()));
    let counters = counting.counters();
    let state = AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config {
            reconcile: flotilla_base::limits::Limits::from_env(),
            capture_wait_ms: flotilla_services::state::capture_wait_ms_from_env(),
            ..Config::default()
        },
    );
    // Index warehouses on S3 (`FLOTILLA_S3_ENDPOINT` only for emulators).
    #[cfg(feature = "object-stores")]
    let state = state
        .with_index_stores(flotilla_services::service::index_catalogs::warehouse_stores_from_env());
    #[cfg(feature = "secrets-manager")]
    let state = state.with_credentials(secrets_store(settings).await);
    // The queues, for the routes that enqueue work (on-demand capture, revalidation) and the
    // reconciler's capture jobs: without `FLOTILLA_RECONCILE_QUEUE_URL` the routes answer
    // that no queue is configured.
    #[cfg(feature = "sqs")]
    let state = match queue(settings).await {
        Some(q) => state.with_work_sender(Arc::new(q)),
        None => state,
    };
    state.with_metric_source(counters)
}

/// The deployment's queues: reconcile messages to `FLOTILLA_RECONCILE_QUEUE_URL`, capture
/// messages to `FLOTILLA_CAPTURE_QUEUE_URL` when it is set. `None` without a reconcile queue.
#[cfg(feature = "sqs")]
pub async fn queue(settings: &AwsSettings) -> Option<crate::queue::SqsQueue> {
    let url = settings.reconcile_queue_url.clone()?;
    Some(
        crate::queue::SqsQueue::new(
            crate::queue::sqs_client(settings.endpoint.as_deref()).await,
            url,
        )
        .with_capture_queue(settings.capture_queue_url.clone()),
    )
}

/// Secrets Manager under `FLOTILLA_SECRET_PREFIX` (sent to `FLOTILLA_AWS_ENDPOINT` when set).
/// A malformed prefix is a deployment error: it is logged at cold start and every credential
/// operation then fails explicitly rather than writing secrets elsewhere.
#[cfg(feature = "secrets-manager")]
async fn secrets_store(settings: &AwsSettings) -> Arc<dyn flotilla_secrets::CredentialStore> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(e) = settings.endpoint.as_deref() {
        loader = loader.endpoint_url(e);
    }
    let client = aws_sdk_secretsmanager::Client::new(&loader.load().await);
    match flotilla_secrets::aws::SecretsManagerStore::new(client, settings.secret_prefix.clone()) {
        Ok(store) => Arc::new(store),
        Err(e) => {
            tracing::error!(error = %e, "FLOTILLA_SECRET_PREFIX is invalid; credential operations will fail");
            Arc::new(flotilla_secrets::NoCredentialStore::Unusable)
        }
    }
}
