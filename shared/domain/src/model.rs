//! Stored records of the core resources. What is stored is what the API shows, minus the
//! derived `etag` (from `revision`, which survives renames so an old etag never matches a
//! renamed resource) and minus control data such as directory generations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::names::NamespacePath;

pub type Properties = BTreeMap<String, String>;

/// RFC 3339 timestamp string.
pub type Timestamp = String;

/// The strong etag of a resource at `revision`.
pub fn etag_for(id: &str, revision: u64) -> String {
    // The id is part of the tag so that a tag taken from one resource never matches another
    // that happens to share a revision number (e.g. after `replace` reused a name).
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{id}:{revision}").as_bytes());
    format!("\"{}\"", hex::encode(&digest[..10]))
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AccountRecord {
    pub id: String,
    #[serde(default)]
    pub display_name: Option<String>,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl AccountRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "display_name": self.display_name,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CatalogRecord {
    pub id: String,
    pub account_id: String,
    pub display_name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub properties: Properties,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl CatalogRecord {
    /// The one rule for where a catalog's table files (and captured state) live: its
    /// `warehouse` property, as a directory URI (a trailing `/`), else, on a host with a local
    /// warehouse root (`flotilla serve`), `file://<root>/<account>/<catalog id>/`. `None` when
    /// neither applies (AWS, no property).
    pub fn warehouse_uri(&self, local_root: Option<&str>) -> Option<String> {
        match self.properties.get("warehouse") {
            Some(w) => {
                let w = w.trim();
                Some(if w.ends_with('/') {
                    w.to_owned()
                } else {
                    format!("{w}/")
                })
            }
            None => local_root.map(|root| {
                format!(
                    "file://{}/{}/{}/",
                    root.trim_end_matches('/'),
                    self.account_id,
                    self.id
                )
            }),
        }
    }

    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "display_name": self.display_name,
            "description": self.description,
            "properties": self.properties,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

/// The body of a name-index item: which resource holds the name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct NameIndexRecord {
    pub id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NamespaceRecord {
    pub id: String,
    pub catalog_id: String,
    pub path: NamespacePath,
    #[serde(default)]
    pub properties: Properties,
    /// True when overlay materialization created this namespace (claim state).
    #[serde(default)]
    pub created_by_overlay: bool,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl NamespaceRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "path": self.path,
            "properties": self.properties,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RelationKind {
    Table,
    View,
}

/// Provenance of an overlay-materialized relation ("UpstreamRef").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ManagedBy {
    pub integration_id: String,
    pub overlay_id: String,
    /// The provider's identity of the upstream object: a stable id when the provider has
    /// one, else the normalized full upstream path.
    pub external_id: String,
    /// Whether `external_id` survives an upstream rename or move.
    pub stable: bool,
    /// The upstream namespace and name the object was last seen at.
    pub upstream_namespace: Vec<String>,
    pub upstream_name: String,
    /// Change detector for the upstream object (ETag or a content fingerprint).
    #[serde(default)]
    pub upstream_fingerprint: Option<String>,
    /// When Flotilla first saw the table's current upstream version (its metadata location,
    /// or its Delta Sharing version), RFC 3339. `None` for views, and for tables last changed
    /// before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_changed_at: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ViewDefinition {
    pub dialect: String,
    pub sql: String,
}

/// A table or a view. Both share one name slot per namespace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RelationRecord {
    pub id: String,
    pub catalog_id: String,
    pub kind: RelationKind,
    pub namespace: NamespacePath,
    pub name: String,
    /// Iceberg-style schema JSON.
    pub schema: Value,
    /// Tables: table format (ICEBERG, DELTA, PARQUET, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_location: Option<String>,
    /// Tables: the table root (storage location).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Views: SQL per dialect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub definitions: Vec<ViewDefinition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_namespace: Option<Vec<String>>,
    #[serde(default)]
    pub properties: Properties,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<ManagedBy>,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl RelationRecord {
    pub fn to_api(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "schema": self.schema,
            "properties": self.properties,
            "managed_by": self.managed_by,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        });
        let obj = v.as_object_mut().expect("json! object");
        match self.kind {
            RelationKind::Table => {
                obj.insert("format".into(), json!(self.format));
                obj.insert("metadata_location".into(), json!(self.metadata_location));
                obj.insert("location".into(), json!(self.location));
            }
            RelationKind::View => {
                obj.insert("definitions".into(), json!(self.definitions));
                obj.insert("default_namespace".into(), json!(self.default_namespace));
            }
        }
        v
    }
}

/// The upstream protocol of an integration. Immutable after create.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IntegrationType {
    IcebergRest,
    Unity,
    DeltaSharing,
}

/// The authentication type names, in their canonical spelling.
pub const AUTH_TYPE_NAMES: [&str; 5] = [
    "OAUTH_CLIENT_CREDENTIALS",
    "BEARER",
    "AWS_ASSUME_ROLE",
    "AWS_ACCESS_KEYS",
    "AWS_SIGV4",
];

/// The one case rule for authentication type names, shared by the server and the CLI: a name
/// matches ASCII case-insensitively, with `-` and `_` interchangeable (`bearer`, `BEARER`,
/// `aws-sigv4`). Answers the canonical spelling, or `None` for an unknown type.
pub fn canonical_auth_type(name: &str) -> Option<&'static str> {
    AUTH_TYPE_NAMES.into_iter().find(|canonical| {
        canonical.len() == name.len()
            && canonical.bytes().zip(name.bytes()).all(|(c, n)| {
                let n = if n == b'-' { b'_' } else { n };
                c == n.to_ascii_uppercase()
            })
    })
}

/// Non-secret authentication configuration ("Authentication and credentials").
/// Secret values live only in the credential store. The `type` tag follows
/// [`canonical_auth_type`]; it is always written canonically.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    deny_unknown_fields,
    remote = "Self"
)]
pub enum AuthConfig {
    OauthClientCredentials {
        /// Token endpoint; for Iceberg REST the catalog's `/v1/oauth/tokens` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_uri: Option<String>,
        client_id: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        scopes: Vec<String>,
    },
    Bearer {},
    AwsAssumeRole {
        role_arn: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        external_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_name: Option<String>,
        /// Requested session lifetime (900..=43200 seconds; STS's default when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_secs: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<String>,
    },
    AwsAccessKeys {
        access_key_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<String>,
    },
    AwsSigv4 {
        region: String,
        #[serde(default = "default_signing_name")]
        signing_name: String,
        /// `STATIC` (access key id here, secret in credentials) or `AMBIENT` (the service's
        /// own AWS identity, from the standard SDK credential chain).
        #[serde(default = "default_credential_source")]
        credential_source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        access_key_id: Option<String>,
    },
}

impl Serialize for AuthConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The derived (remote) implementation.
        AuthConfig::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for AuthConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        if let Some(tag) = value.get_mut("type")
            && let Some(canonical) = tag.as_str().and_then(canonical_auth_type)
        {
            *tag = Value::String(canonical.to_owned());
        }
        AuthConfig::deserialize(value).map_err(serde::de::Error::custom)
    }
}

fn default_signing_name() -> String {
    "execute-api".into()
}

fn default_credential_source() -> String {
    "STATIC".into()
}

impl AuthConfig {
    pub fn type_name(&self) -> &'static str {
        match self {
            AuthConfig::OauthClientCredentials { .. } => "OAUTH_CLIENT_CREDENTIALS",
            AuthConfig::Bearer {} => "BEARER",
            AuthConfig::AwsAssumeRole { .. } => "AWS_ASSUME_ROLE",
            AuthConfig::AwsAccessKeys { .. } => "AWS_ACCESS_KEYS",
            AuthConfig::AwsSigv4 { .. } => "AWS_SIGV4",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IntegrationRecord {
    pub id: String,
    pub account_id: String,
    pub display_name: String,
    #[serde(rename = "type")]
    pub kind: IntegrationType,
    pub uri: String,
    #[serde(default)]
    pub properties: Properties,
    pub authentication: AuthConfig,
    pub credentials_configured: bool,
    /// The credential generation the resource references (0 = none).
    pub credential_generation: u64,
    /// Advances with every change that must fence older work (URI, properties,
    /// authentication, credentials, pause).
    pub generation: u64,
    #[serde(default)]
    pub paused: bool,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

impl IntegrationRecord {
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "display_name": self.display_name,
            "type": self.kind,
            "uri": self.uri,
            "properties": self.properties,
            "authentication": self.authentication,
            "credentials_configured": self.credentials_configured,
            "credential_generation": self.credential_generation,
            "generation": self.generation,
            "paused": self.paused,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

/// A credential generation that may exist in the credential store without (yet) being the
/// one a published integration references: written before the secret is prepared, removed
/// in the publishing transaction, and otherwise left for `sweep-credentials`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CredentialGenerationRecord {
    pub integration_id: String,
    pub generation: u64,
    /// `prepared` (before publication) or `retiring` (superseded by a published rotation).
    pub state: String,
    pub created_ms: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OverlayRecord {
    pub id: String,
    pub account_id: String,
    pub display_name: String,
    pub integration_id: String,
    pub catalog_id: String,
    pub include_namespaces: Vec<Vec<String>>,
    pub exclude_namespaces: Vec<Vec<String>>,
    /// Advances with every change that must fence older reconciliation runs.
    pub generation: u64,
    #[serde(default)]
    pub paused: bool,
    /// How often the scheduler enqueues a reconciliation (seconds).
    #[serde(default = "default_refresh_interval")]
    pub refresh_interval_secs: u64,
    pub revision: u64,
    pub create_time: Timestamp,
    pub update_time: Timestamp,
}

pub fn default_refresh_interval() -> u64 {
    3600
}

impl OverlayRecord {
    /// The API representation; `last_reconcile` comes from the overlay's status item.
    pub fn to_api(&self, last_reconcile: Option<&Value>) -> Value {
        json!({
            "id": self.id,
            "display_name": self.display_name,
            "integration_id": self.integration_id,
            "catalog_id": self.catalog_id,
            "include_namespaces": self.include_namespaces,
            "exclude_namespaces": self.exclude_namespaces,
            "generation": self.generation,
            "paused": self.paused,
            "refresh_interval_secs": self.refresh_interval_secs,
            "last_reconcile": last_reconcile,
            "etag": etag_for(&self.id, self.revision),
            "create_time": self.create_time,
            "update_time": self.update_time,
        })
    }
}

/// An overlay's use of a namespace path in its target catalog.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClaimRecord {
    pub overlay_id: String,
    pub path: NamespacePath,
    /// Whether this overlay's materialization created the namespace.
    pub created_namespace: bool,
}

/// Dependency record body (overlay -> integration, overlay -> catalog).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DependencyRecord {
    pub overlay_id: String,
}

/// The overlay's last reconciliation and scheduling state (one item, rewritten per run).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct OverlayStatus {
    #[serde(default)]
    pub last_reconcile: Option<Value>,
    /// When the last run started (epoch ms); the scheduler compares the refresh interval.
    #[serde(default)]
    pub last_started_ms: Option<i64>,
    /// Failed runs since the last successful one.
    #[serde(default)]
    pub consecutive_failures: u64,
    /// When the last successful run finished (RFC 3339).
    #[serde(default)]
    pub last_success_time: Option<String>,
    /// When the last successful run started (epoch ms): every table it kept was confirmed
    /// upstream after this (a table's `upstream.checked_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_started_ms: Option<i64>,
    /// When the first of the failed runs in a row started (RFC 3339; `None` after a
    /// success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<String>,
    /// Tables a targeted refresh (`POST .../notify`) confirmed after the last successful
    /// run started: relation id -> epoch ms. Bounded; a later successful run supersedes them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub confirmed: std::collections::BTreeMap<String, i64>,
}

/// One overlay's demand on its integration's effective plan.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OverlayDemand {
    /// The refresh interval the overlay asks for.
    pub interval_secs: u64,
    /// A paused overlay contributes no demand.
    #[serde(default)]
    pub paused: bool,
}

/// The scheduler's state of one integration (`SCHED#{integration}`): the demand of its
/// overlays, the plan generation that fences scheduled work, where the due-time index holds
/// it, and the lease and attempts of the current job. Operational state only: it is never
/// part of the integration or overlay resources the API shows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct SchedulerState {
    pub integration_id: String,
    /// Bumped by every change that invalidates scheduled work: an overlay created, deleted,
    /// replaced, paused, resumed or given another selection; the integration's URI,
    /// properties, credentials or pause changed.
    pub plan_generation: u64,
    #[serde(default)]
    pub integration_paused: bool,
    /// Overlay id -> its demand.
    #[serde(default)]
    pub demand: BTreeMap<String, OverlayDemand>,
    /// The due time of the one index entry that exists for this integration (`None`: no
    /// entry, because there is no demand).
    #[serde(default)]
    pub due_ms: Option<i64>,
    /// Until when the job the last tick enqueued holds the integration.
    #[serde(default)]
    pub lease_until_ms: Option<i64>,
    /// Jobs enqueued since the last completed one.
    #[serde(default)]
    pub attempts: u64,
    #[serde(default)]
    pub last_enqueued_ms: Option<i64>,
    #[serde(default)]
    pub last_completed_ms: Option<i64>,
}

impl SchedulerState {
    /// The overlays whose demand counts: none when the integration is paused.
    pub fn active_overlays(&self) -> impl Iterator<Item = (&String, &OverlayDemand)> {
        let paused = self.integration_paused;
        self.demand
            .iter()
            .filter(move |(_, d)| !paused && !d.paused)
    }

    /// The effective refresh interval: the shortest any active overlay asks for, `None` when
    /// nothing is demanded.
    pub fn effective_interval_secs(&self) -> Option<u64> {
        self.active_overlays().map(|(_, d)| d.interval_secs).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_types_follow_one_case_rule() {
        for spelling in ["BEARER", "bearer", "Bearer"] {
            assert_eq!(canonical_auth_type(spelling), Some("BEARER"));
            let auth: AuthConfig = serde_json::from_value(json!({"type": spelling})).unwrap();
            assert_eq!(auth, AuthConfig::Bearer {});
            assert_eq!(
                serde_json::to_value(&auth).unwrap(),
                json!({"type": "BEARER"})
            );
        }
        assert_eq!(canonical_auth_type("aws-sigv4"), Some("AWS_SIGV4"));
        assert_eq!(
            canonical_auth_type("oauth_client_credentials"),
            Some("OAUTH_CLIENT_CREDENTIALS")
        );
        for bad in ["BEARE", "BEARER ", "bearer\u{0}", "", "OAUTH"] {
            assert_eq!(canonical_auth_type(bad), None, "{bad:?}");
        }
        let auth: AuthConfig =
            serde_json::from_value(json!({"type": "oauth-client-credentials", "client_id": "c"}))
                .unwrap();
        assert_eq!(auth.type_name(), "OAUTH_CLIENT_CREDENTIALS");
        assert!(serde_json::from_value::<AuthConfig>(json!({"type": "nope"})).is_err());
        assert!(serde_json::from_value::<AuthConfig>(json!({"type": "bearer", "x": 1})).is_err());
    }
}
