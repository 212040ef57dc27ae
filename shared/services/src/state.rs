//! What every handler and worker shares: the stores, the clock, the authenticator and the
//! configuration, built once by the host (Lambda `main` or `flotilla serve`).

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_metastore::{DynMetastore, Item};

use crate::auth::Authenticator;
use crate::clock::Clock;
use crate::error::Result;
use flotilla_secrets::{CredentialStore, NoCredentialStore};

/// Deployment settings that change behaviour.
#[derive(Clone, Debug)]
pub struct Config {
    /// Allow loopback, private-range and plain-http upstream URIs (local mode only).
    pub allow_insecure_upstreams: bool,
    /// `flotilla serve --upstream-files-root`: the only directory below which capture reads
    /// `file://` locations an upstream names; `None` (and on AWS): never.
    pub upstream_files_root: Option<std::path::PathBuf>,
    /// How long an idempotency receipt answers replays.
    pub idempotency_ttl_secs: i64,
    /// How long a delete's emptiness guard blocks creates before a writer may clear it as
    /// abandoned (its deleter crashed).
    pub guard_lease_ms: i64,
    /// Bounds of a reconciliation run (listing and run sizes, time budget).
    pub reconcile: flotilla_base::limits::Limits,
    /// Write a change event with every change (`service::events`). Off only to measure
    /// what events cost (the events benchmark).
    pub events: bool,
    /// How long change events are kept: readers skip and sweep older ones (a pending event
    /// also carries the DynamoDB TTL).
    pub event_retention_secs: i64,
    /// This host delivers event sinks (`flotilla serve` runs the deliverer); elsewhere (AWS,
    /// where events go to EventBridge) creating a sink answers `409 FAILED_PRECONDITION`.
    pub event_sinks: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            allow_insecure_upstreams: false,
            upstream_files_root: None,
            idempotency_ttl_secs: 24 * 3600,
            guard_lease_ms: 30_000,
            reconcile: flotilla_base::limits::Limits::default(),
            events: true,
            event_retention_secs: 7 * 24 * 3600,
            event_sinks: false,
        }
    }
}

/// Extra cleanup for account-partition items owned by something the account delete does not
/// know (a host's own resources), registered in [`AppState::account_cleanups`]. Called for
/// each item of the account partition before the item itself is deleted, after the built-in
/// cleanups (catalogs, integrations with their credentials, index catalogs with their
/// partitions); must be idempotent.
#[async_trait]
pub trait AccountCleanup: Send + Sync {
    async fn cleanup_item(&self, account: &str, item: &Item) -> Result<()>;
}

/// Where the API hands work to the reconcile workers: the reconcile queue (SQS on AWS, the
/// in-process queue of `flotilla serve`). The HTTP layer only enqueues through it; the workers
/// (the reconciler function, `flotilla serve`'s worker) parse and run the messages. Each body
/// is one queue message, already serialized by its kind (`flotilla_reconcile::work`).
#[async_trait]
pub trait WorkSender: Send + Sync {
    /// Queues every body, or fails (`UNAVAILABLE`) without a guarantee about which were
    /// queued; a duplicate of a message still waiting may be dropped by the queue.
    async fn send_bodies(&self, bodies: &[String]) -> Result<()>;
}

/// Renders one block of Prometheus text for `/v1/admin/metrics`.
pub use flotilla_base::MetricsRenderer;

/// Holds catalogue metrics (`flotilla_telemetry::catalog`): rendered on `/v1/admin/metrics`
/// and, on Lambda, flushed as CloudWatch EMF lines.
pub type MetricSource = Arc<dyn flotilla_telemetry::Source>;

/// Shared application state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: DynMetastore,
    pub clock: Arc<dyn Clock>,
    pub auth: Arc<dyn Authenticator>,
    pub config: Config,
    /// Extra Prometheus text blocks (anything not in the metric catalogue).
    pub metrics: Vec<MetricsRenderer>,
    /// The catalogue metrics of this state: the directory replica, the process-wide registry
    /// (upstream calls, reconcile outcomes, API requests, latencies) and what the host adds
    /// (the metastore decorator's counters).
    pub metric_sources: Vec<MetricSource>,
    /// Cleanups of account-partition items registered by the host, run by account delete
    /// after the built-in ones (none by default).
    pub account_cleanups: Vec<Arc<dyn AccountCleanup>>,
    /// Where integration credentials live (Secrets Manager on AWS, the local encrypted store
    /// under `flotilla serve`). Secrets never enter the metastore.
    pub credentials: Arc<dyn CredentialStore>,
    /// The query replica of catalog directories, kept across requests and warm
    /// Lambda invocations; its refresh counters are one of `metrics`.
    pub directory: Arc<flotilla_directory::DirectoryCache>,
    /// Object stores of ParqDB index catalog warehouses, cached per warehouse. The
    /// host chooses endpoints and credentials once
    /// (`service::index_catalogs::warehouse_stores_from_env`); tests inject faults.
    #[cfg(feature = "index-catalogs")]
    pub index_stores: Arc<dyn flotilla_parqdb::store::WarehouseStores>,
    #[cfg(feature = "upstream")]
    /// Catalog-access providers by protocol (the `access` module connects integrations through
    /// it); tests swap in decorated providers with [`AppState::with_catalog_access`].
    pub catalog_access: Arc<flotilla_catalog_access::CatalogClientFactory>,
    #[cfg(feature = "upstream")]
    /// Connected upstream clients (with their OAuth tokens, assumed-role sessions and vended
    /// credentials) per integration and generation, for the life of the process.
    pub sessions: Arc<crate::sessions::SessionCache>,
    #[cfg(feature = "upstream")]
    /// The deployment's own AWS identity and endpoints (the standard SDK configuration),
    /// which assume-role and ambient integrations sign with.
    pub aws: Arc<flotilla_catalog_access::sigv4::AwsDeployment>,
    /// The reconcile queue, for routes that enqueue work (on-demand capture, revalidation);
    /// `None` when the host has no queue (those routes then answer `UNAVAILABLE`).
    pub work: Option<Arc<dyn WorkSender>>,
    /// The accounts' grants as this host last saw them (`acl`), validated per request.
    pub acl: Arc<crate::acl::AclCache>,
    /// Signs service principals' access tokens, on hosts that verify tokens themselves
    /// (`flotilla serve`). `None` (AWS, where the JWT authorizer verifies every token): service
    /// principals cannot be created and the `/v1` token route has nothing to issue.
    pub token_signer: Option<Arc<crate::auth::TokenSigner>>,
    /// Failed exchanges of the OAuth2 token routes, per client and source (per process: on
    /// AWS, per Lambda instance).
    pub token_limiter: Arc<crate::token_limit::TokenLimiter>,
    /// Refused requests per account, principal and minute, bounding the audit records they
    /// write (per process: on AWS, per Lambda instance).
    pub refusals: Arc<crate::refusal_limit::RefusalCounter>,
}

impl AppState {
    pub fn new(
        store: DynMetastore,
        clock: Arc<dyn Clock>,
        auth: Arc<dyn Authenticator>,
        config: Config,
    ) -> Self {
        let directory = Arc::new(flotilla_directory::DirectoryCache::new());
        Self {
            store,
            clock,
            auth,
            config,
            metrics: Vec::new(),
            // Upstream, reconcile and API metrics are process-wide; every host shows them.
            metric_sources: vec![
                directory.clone() as MetricSource,
                Arc::new(flotilla_telemetry::Global),
            ],
            account_cleanups: Vec::new(),
            credentials: Arc::new(NoCredentialStore::NotConfigured),
            directory,
            #[cfg(feature = "index-catalogs")]
            index_stores: Arc::new(flotilla_parqdb::store::DefaultWarehouseStores::new()),
            #[cfg(feature = "upstream")]
            catalog_access: Arc::new(
                flotilla_catalog_access::CatalogClientFactory::with_builtin_providers(),
            ),
            #[cfg(feature = "upstream")]
            sessions: Arc::new(crate::sessions::SessionCache::default()),
            #[cfg(feature = "upstream")]
            aws: Arc::new(flotilla_catalog_access::sigv4::AwsDeployment::from_environment()),
            work: None,
            acl: Arc::new(crate::acl::AclCache::new()),
            token_signer: None,
            token_limiter: Arc::new(crate::token_limit::TokenLimiter::default()),
            refusals: Arc::new(crate::refusal_limit::RefusalCounter::default()),
        }
    }

    /// The operations that remove the grants naming `securable` (or anything below it), for
    /// the transaction that deletes it ([`crate::acl::cascade_ops`]).
    pub async fn grant_cascade(
        &self,
        account: &str,
        securable: &crate::acl::Securable,
    ) -> Result<Vec<flotilla_metastore::Op>> {
        crate::acl::cascade_ops(self.store.as_ref(), &self.acl, account, securable).await
    }

    /// The token routes limited by `limits` (fresh counters).
    pub fn with_token_limits(mut self, limits: crate::token_limit::TokenLimits) -> Self {
        self.token_limiter = Arc::new(crate::token_limit::TokenLimiter::new(limits));
        self
    }

    /// Service principals' access tokens signed and verified under `signer`.
    pub fn with_token_signer(mut self, signer: Arc<crate::auth::TokenSigner>) -> Self {
        self.token_signer = Some(signer);
        self
    }

    /// The principal a bearer token authenticates: a service principal's access token (when
    /// this host signs them and it is unexpired), else the configured authenticator.
    pub fn authenticate(&self, bearer: &str) -> Option<crate::auth::Principal> {
        if crate::auth::TokenSigner::is_service_token(bearer) {
            let signer = self.token_signer.as_ref()?;
            return signer
                .verify(bearer, self.clock.now_secs())
                .map(|c| c.principal());
        }
        self.auth.authenticate(bearer)
    }

    /// The reconcile queue the routes that enqueue work send to.
    pub fn with_work_sender(mut self, sender: Arc<dyn WorkSender>) -> Self {
        self.work = Some(sender);
        self
    }

    #[cfg(feature = "upstream")]
    /// Another AWS configuration for the deployment's own identity (tests that need a second
    /// identity); drops every cached session.
    pub fn with_aws(mut self, aws: Arc<flotilla_catalog_access::sigv4::AwsDeployment>) -> Self {
        self.aws = aws;
        self.sessions = Arc::new(crate::sessions::SessionCache::default());
        self
    }

    #[cfg(feature = "upstream")]
    pub fn with_catalog_access(
        mut self,
        factory: Arc<flotilla_catalog_access::CatalogClientFactory>,
    ) -> Self {
        self.catalog_access = factory;
        self.sessions = Arc::new(crate::sessions::SessionCache::default());
        self
    }

    #[cfg(feature = "index-catalogs")]
    pub fn with_index_stores(
        mut self,
        stores: Arc<dyn flotilla_parqdb::store::WarehouseStores>,
    ) -> Self {
        self.index_stores = stores;
        self
    }

    pub fn with_credentials(mut self, store: Arc<dyn CredentialStore>) -> Self {
        self.credentials = store;
        self
    }

    pub fn with_metrics(mut self, renderer: MetricsRenderer) -> Self {
        self.metrics.push(renderer);
        self
    }

    pub fn with_metric_source(mut self, source: MetricSource) -> Self {
        self.metric_sources.push(source);
        self
    }

    /// The sources as the borrowed list the renderers take.
    pub fn metric_source_refs(&self) -> Vec<&dyn flotilla_telemetry::Source> {
        self.metric_sources.iter().map(|s| s.as_ref()).collect()
    }

    /// The `/v1/admin/metrics` page: the catalogue metrics, then any extra blocks.
    pub fn render_metrics(&self) -> String {
        let mut text = flotilla_telemetry::prometheus::render(&self.metric_source_refs());
        for render in &self.metrics {
            text.push_str(&render());
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        text
    }
}
