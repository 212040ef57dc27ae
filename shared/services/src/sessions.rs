//! The process-wide cache of connected upstream clients ([`SessionCache`]), one per
//! integration, held by the state (`AppState::sessions`) and filled by the `access` module.
//! It knows records and clients only, so the state that holds it depends on nothing above it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flotilla_catalog_access::CatalogClient;
use flotilla_domain::model::{AuthConfig, IntegrationRecord};

/// Most integrations whose clients one process keeps (least recently used go first).
pub const SESSION_CAPACITY: usize = 512;
/// A client is rebuilt after this long even when nothing changed, so upstream configuration
/// (`GET /v1/config`) is re-read now and then.
pub const SESSION_MAX_AGE_MS: i64 = 3_600_000;

/// What a cached client was built from: any difference makes it unusable.
#[derive(Clone, PartialEq)]
struct SessionStamp {
    generation: u64,
    credential_generation: u64,
    uri: String,
    properties: std::collections::BTreeMap<String, String>,
    authentication: AuthConfig,
}

impl SessionStamp {
    fn of(record: &IntegrationRecord) -> Self {
        Self {
            generation: record.generation,
            credential_generation: record.credential_generation,
            uri: record.uri.clone(),
            properties: record.properties.clone(),
            authentication: record.authentication.clone(),
        }
    }
}

struct Session {
    stamp: SessionStamp,
    client: Arc<dyn CatalogClient>,
    created_ms: i64,
    used_ms: i64,
}

/// Connected clients per integration, for the life of the process. One entry per
/// integration: the newest generation seen replaces older ones (dropping their tokens and
/// sessions); a caller holding an older record gets a client of its own, never cached.
#[derive(Default)]
pub struct SessionCache {
    entries: Mutex<HashMap<(String, String), Session>>,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache")
            .field("entries", &self.len())
            .finish()
    }
}

impl SessionCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Session>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key(record: &IntegrationRecord) -> (String, String) {
        (record.account_id.clone(), record.id.clone())
    }

    /// The cached client for exactly this record's configuration, if fresh.
    pub(crate) fn get(
        &self,
        record: &IntegrationRecord,
        now_ms: i64,
    ) -> Option<Arc<dyn CatalogClient>> {
        let mut entries = self.lock();
        let session = entries.get_mut(&Self::key(record))?;
        if session.stamp != SessionStamp::of(record)
            || now_ms.saturating_sub(session.created_ms) >= SESSION_MAX_AGE_MS
        {
            return None;
        }
        session.used_ms = now_ms;
        Some(session.client.clone())
    }

    /// Caches `client` unless a newer generation is cached; answers the client to use (the
    /// cached one when a concurrent caller got there first with the same configuration).
    pub(crate) fn insert(
        &self,
        record: &IntegrationRecord,
        client: Arc<dyn CatalogClient>,
        now_ms: i64,
    ) -> Arc<dyn CatalogClient> {
        let stamp = SessionStamp::of(record);
        let mut entries = self.lock();
        if let Some(existing) = entries.get(&Self::key(record)) {
            if existing.stamp == stamp
                && now_ms.saturating_sub(existing.created_ms) < SESSION_MAX_AGE_MS
            {
                return existing.client.clone();
            }
            if existing.stamp.generation > stamp.generation {
                return client;
            }
        }
        if entries.len() >= SESSION_CAPACITY
            && !entries.contains_key(&Self::key(record))
            && let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, s)| s.used_ms)
                .map(|(k, _)| k.clone())
        {
            entries.remove(&oldest);
        }
        entries.insert(
            Self::key(record),
            Session {
                stamp,
                client: client.clone(),
                created_ms: now_ms,
                used_ms: now_ms,
            },
        );
        client
    }

    /// Drops the cached client of an integration (delete).
    pub fn forget(&self, account: &str, integration: &str) {
        self.lock()
            .remove(&(account.to_owned(), integration.to_owned()));
    }

    /// Drops every cached client of an account (account delete).
    pub fn forget_account(&self, account: &str) {
        self.lock().retain(|(a, _), _| a != account);
    }

    /// How many integrations have a cached client.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
