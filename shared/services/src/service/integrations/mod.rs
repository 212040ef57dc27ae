//! CatalogIntegration ("Catalog integration", "Authentication and credentials",
//! "Durability contract", "Lifecycle and garbage collection").
//!
//! Credential publication, for create and rotation alike:
//! 1. a `CREDGEN` record for the new generation is *created* (put-if-absent) first: whoever
//!    creates it owns that generation, and no secret can exist without a durable trace the
//!    sweep can find;
//! 2. the secret is reserved with put-if-absent under `(account, integration, generation)`;
//! 3. the resource CAS publishes the generation and deletes the `CREDGEN` record at the
//!    version its owner created, in the same transaction (a rotation also records a `retiring`
//!    record for the old generation there);
//! 4. only then is the old generation deleted (and its record with it).
//!
//! A definite failure of step 3 deletes the prepared secret and its record; an
//! outcome-unknown failure keeps both, because the CAS may have published them. The sweep
//! (`flotilla admin sweep-credentials`) claims a record by bumping its version before it
//! decides, so a generation it reclaims can never be published afterwards, and it never
//! deletes the generation a published integration references.

use std::collections::BTreeMap;

#[cfg(feature = "upstream")]
use flotilla_catalog_access::http::AddressPolicy;
#[cfg(feature = "upstream")]
use flotilla_catalog_access::spi::{CatalogConnectionConfig, is_secret_key};
use flotilla_domain::keys;
use flotilla_domain::model::{
    AuthConfig, CredentialGenerationRecord, IntegrationRecord, IntegrationType, etag_for,
};
use flotilla_domain::names::validate_resource_id;
use flotilla_metastore::{Condition, Consistency, Op, Transaction};
use flotilla_secrets::SecretRef;
use serde::Deserialize;
use serde_json::Value;

use super::events::{Operation, record_account};
use super::{
    GuardRecord, GuardState, GuardedOutcome, MAX_ATTEMPTS, backoff, check_if_match, guard_state,
    guarded_delete, read, to_body,
};
use super::{delete_items, strong_scan};
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;
// What only the integration writes use (`create`, `patch`, `generations`).
#[cfg(feature = "upstream")]
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create};
#[cfg(feature = "upstream")]
use super::{OnConflict, Versioned, account_guard_error, account_guards};
#[cfg(feature = "upstream")]
use flotilla_domain::model::NameIndexRecord;
#[cfg(feature = "upstream")]
use flotilla_domain::names::validate_display_name;
#[cfg(feature = "upstream")]
use flotilla_metastore::Metastore;
#[cfg(feature = "upstream")]
use flotilla_secrets::{PutOutcome, SecretBytes};
#[cfg(feature = "upstream")]
use serde_json::Map;

// Integration writes check a connection's address and properties: hosts with upstream access.
#[cfg(feature = "upstream")]
mod create;
mod delete;
#[cfg(feature = "upstream")]
mod generations;
#[cfg(feature = "upstream")]
mod patch;
mod reads;
mod scheduled;
mod sweep;
#[cfg(feature = "upstream")]
mod validation;

#[cfg(feature = "upstream")]
pub use create::*;
pub use delete::*;
#[cfg(feature = "upstream")]
use generations::*;
// Event sinks keep their signing secret through the same generation protocol.
#[cfg(feature = "upstream")]
pub(crate) use generations::{
    discard_prepared as discard_secret, prepare_generation as prepare_secret,
    publish_record_op as publish_secret_op,
};
#[cfg(feature = "upstream")]
pub use patch::*;
pub use reads::*;
pub use scheduled::*;
pub use sweep::*;
#[cfg(feature = "upstream")]
pub use validation::*;

/// Write-only credential fields accepted on create and rotation.
pub const CREDENTIAL_FIELDS: &[&str] = &[
    "client_secret",
    "token",
    "secret_access_key",
    "session_token",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIntegration {
    pub display_name: String,
    #[serde(rename = "type")]
    pub kind: IntegrationType,
    pub uri: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    pub authentication: AuthConfig,
    /// Write-only; never stored in the metastore or echoed. Taken as any JSON value so that
    /// a malformed one is refused by [`validate_credentials`], whose messages name fields only
    /// (serde's type errors quote the offending value, which here is a secret).
    #[serde(default)]
    pub credentials: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchIntegration {
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub uri: Option<String>,
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub paused: Option<bool>,
    /// Present only to give a precise error: the type is immutable.
    #[serde(default, rename = "type")]
    pub kind: Option<Value>,
    /// Present only to give a precise error: use `PUT .../authentication`.
    #[serde(default)]
    pub authentication: Option<Value>,
    #[serde(default)]
    pub credentials: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateAuthentication {
    #[serde(default)]
    pub authentication: Option<AuthConfig>,
    /// Write-only (see [`CreateIntegration::credentials`]).
    #[serde(default)]
    pub credentials: Option<Value>,
}

/// The canonical request body with the secret bytes removed, for idempotency fingerprints
/// ("Secret bytes are not part of the request fingerprint").
pub fn fingerprint_body(canonical: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(canonical) {
        Ok(Value::Object(mut m)) => {
            match m.get_mut("credentials") {
                Some(Value::Object(c)) => {
                    for v in c.values_mut() {
                        *v = Value::Null;
                    }
                }
                Some(other) => *other = Value::Null,
                None => {}
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        }
        _ => canonical.to_vec(),
    }
}

/// Where a credential generation's secret lives in the credential store.
fn secret_ref(account: &str, integration: &str, generation: u64) -> Result<SecretRef> {
    SecretRef::new(account, integration, generation).map_err(|e| Error::internal(e.to_string()))
}
