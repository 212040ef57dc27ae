//! What every handler and worker shares: the stores, the clock, the authenticator and the
//! configuration, built once by the host (Lambda `main` or `flotilla serve`).

use std::sync::Arc;

use flotilla_metastore::DynMetastore;

use crate::auth::Authenticator;
use crate::clock::Clock;
use crate::service::accounts::AccountCleanup;

/// Deployment settings that change behaviour.
#[derive(Clone, Debug)]
pub struct Config {
    /// Allow loopback, private-range and plain-http upstream URIs (local mode only).
    pub allow_insecure_upstreams: bool,
    /// How long an idempotency receipt answers replays.
    pub idempotency_ttl_secs: i64,
    /// How long a delete's emptiness guard blocks creates before a writer may clear it as
    /// abandoned (its deleter crashed).
    pub guard_lease_ms: i64,
}

impl Default for Config {
    fn default() -> Self {
        Self { allow_insecure_upstreams: false, idempotency_ttl_secs: 24 * 3600, guard_lease_ms: 30_000 }
    }
}

/// Renders one block of Prometheus text for `/v1/admin/metrics`.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// Shared application state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: DynMetastore,
    pub clock: Arc<dyn Clock>,
    pub auth: Arc<dyn Authenticator>,
    pub config: Config,
    pub metrics: Vec<MetricsRenderer>,
    /// Cleanup of account-partition items owned by other modules, run by account delete.
    pub account_cleanups: Vec<Arc<dyn AccountCleanup>>,
}

impl AppState {
    pub fn new(store: DynMetastore, clock: Arc<dyn Clock>, auth: Arc<dyn Authenticator>, config: Config) -> Self {
        Self { store, clock, auth, config, metrics: Vec::new(), account_cleanups: Vec::new() }
    }

    pub fn with_metrics(mut self, renderer: MetricsRenderer) -> Self {
        self.metrics.push(renderer);
        self
    }
}
