//! The connector-independent catalog-access SPI.
//!
//! A Catalog Integration names a [`CatalogProtocol`], a [`CatalogConnectionConfig`] (URI and
//! non-secret properties) and a [`CatalogAuthentication`] scheme; the secret half of the
//! authentication arrives separately as [`ResolvedCatalogCredentials`], resolved from the
//! credential store at call time. A [`crate::factory::CatalogClientFactory`] picks the registered
//! [`CatalogClientProvider`] for the protocol, which builds a [`CatalogClient`].
//!
//! Two credential boundaries are kept apart on purpose (see `docs/catalog-access.md`):
//! the integration credentials authorize calls to the catalog API; the catalog then vends
//! short-lived storage credentials ([`VendedCredentials`]) for the table's files. Vended
//! credentials are process-local: they have a redacted `Debug`, no `Serialize`, and no
//! provider may fall back to the catalog credentials or ambient credentials for storage.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use url::Url;

pub use crate::error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
pub use crate::http::HttpPolicy;
pub use crate::protocol::CatalogProtocol;
pub use crate::secret::SecretString;

// ---------------------------------------------------------------------------------------
// Connection configuration
// ---------------------------------------------------------------------------------------

/// Where the catalog is and its non-secret, protocol-specific properties (e.g. the Iceberg
/// REST `warehouse`, `delta.sharing.strict-access-modes`). This is persisted on the
/// Integration resource, so [`CatalogConnectionConfig::validate`] refuses anything that
/// could carry a secret; secrets travel only in [`ResolvedCatalogCredentials`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CatalogConnectionConfig {
    /// Base URI of the catalog API (http or https).
    pub uri: String,
    /// Non-secret connection properties. Keys prefixed `header.` name extra request headers.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// Property keys that contain a secret-looking word but are known to be non-secret.
const NON_SECRET_KEYS: &[&str] = &[
    "token-refresh-enabled",
    "oauth2-server-uri",
    "delta.sharing.strict-access-modes",
];

/// Words that make a property key, query parameter or header secret-bearing. Matched
/// against the key lower-cased with `_` and `.` folded to `-`.
const SECRET_KEY_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "authorization",
    "auth-header",
    "api-key",
    "apikey",
    "private-key",
    "access-key",
    "session-key",
    "signature",
    "cookie",
    "bearer",
    "sas",
    "sig",
];

/// Whether a property key, query parameter name or header name looks secret-bearing.
pub fn is_secret_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    if NON_SECRET_KEYS.contains(&lower.as_str()) {
        return false;
    }
    let folded: String = lower
        .chars()
        .map(|c| if c == '_' || c == '.' { '-' } else { c })
        .collect();
    // Short words (`sas`, `sig`) only count as a whole segment, so `signing-name` passes.
    folded.split('-').any(|seg| seg == "sas" || seg == "sig")
        || SECRET_KEY_WORDS
            .iter()
            .filter(|w| w.len() > 3)
            .any(|w| folded.contains(w))
}

/// Values that are references into a secret store; a handle is as sensitive as the secret
/// for our purposes (it must not be persisted on the Integration either).
fn is_credential_handle(value: &str) -> bool {
    let lower = value.trim().to_ascii_lowercase();
    lower.starts_with("arn:aws:secretsmanager:")
        || lower.starts_with("arn:aws:ssm:")
        || lower.starts_with("secret://")
        || lower.starts_with("vault:")
}

impl CatalogConnectionConfig {
    /// A configuration with no properties.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            properties: BTreeMap::new(),
        }
    }

    /// Builder-style property setter.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// A property value.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(String::as_str)
    }

    /// Extra request headers named by `header.NAME` properties.
    pub fn extra_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.properties.iter().filter_map(|(k, v)| {
            k.strip_prefix("header.")
                .map(|name| (name, v.as_str()))
                .filter(|(name, _)| !name.is_empty())
        })
    }

    /// The validated URI (see [`CatalogConnectionConfig::validate`]) without its query, as
    /// the base a provider joins its routes to.
    pub fn base_url(&self) -> Result<Url> {
        let mut base = self.validate()?;
        base.set_query(None);
        Ok(base)
    }

    /// Validates structure and refuses secrets: a user-info or fragment in the URI, a
    /// secret-bearing query parameter, a secret-bearing property key or `header.` name, or
    /// a credential-store handle as a value. Returns the parsed URI. Address policy (which
    /// hosts may be reached) is enforced separately, at connect time, by
    /// [`crate::http::AddressPolicy`].
    pub fn validate(&self) -> Result<Url> {
        let url = Url::parse(self.uri.trim())
            .map_err(|e| CatalogAccessError::config(format!("catalog URI is not a URL: {e}")))?;
        match url.scheme() {
            "http" | "https" => {}
            other => {
                return Err(CatalogAccessError::config(format!(
                    "catalog URI scheme `{other}` is not http or https"
                )));
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(CatalogAccessError::config("catalog URI has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(CatalogAccessError::config(
                "catalog URI must not carry user-info; supply credentials as authentication",
            ));
        }
        if url.fragment().is_some() {
            return Err(CatalogAccessError::config(
                "catalog URI must not carry a fragment",
            ));
        }
        for (name, _) in url.query_pairs() {
            if is_secret_key(&name) {
                return Err(CatalogAccessError::config(format!(
                    "catalog URI query parameter `{name}` looks secret-bearing; supply \
                     credentials as authentication"
                )));
            }
        }
        for (key, value) in &self.properties {
            if let Some(header) = key.strip_prefix("header.") {
                if header.is_empty() || http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(CatalogAccessError::config(format!(
                        "property `{key}` does not name a valid header"
                    )));
                }
                if is_secret_key(header) || header.eq_ignore_ascii_case("x-api-key") {
                    return Err(CatalogAccessError::config(format!(
                        "header property `{key}` is secret-bearing; supply credentials as \
                         authentication"
                    )));
                }
                if http::HeaderValue::from_str(value).is_err() {
                    return Err(CatalogAccessError::config(format!(
                        "property `{key}` is not a valid header value"
                    )));
                }
            } else if is_secret_key(key) {
                return Err(CatalogAccessError::config(format!(
                    "property `{key}` is secret-bearing; connection properties must not hold \
                     secrets"
                )));
            }
            if is_credential_handle(value) {
                return Err(CatalogAccessError::config(format!(
                    "property `{key}` holds a credential-store reference; connection \
                     properties must not reference secrets"
                )));
            }
        }
        Ok(url)
    }
}

// ---------------------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------------------

/// The non-secret half of the integration authentication, persisted on the Integration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CatalogAuthentication {
    /// OAuth2 client credentials grant against `token_uri`; the client secret is resolved.
    OauthClientCredentials {
        /// Token endpoint (for Lakekeeper: an external OpenID provider).
        token_uri: String,
        /// OAuth2 client id.
        client_id: String,
        /// Requested scopes, joined with spaces in the `scope` form field.
        #[serde(default)]
        scopes: Vec<String>,
    },
    /// A static bearer token; the token is resolved.
    Bearer,
    /// AWS SigV4 request signing. The keys are resolved: static access keys
    /// ([`ResolvedCatalogCredentials::AwsAccessKeys`]) or a renewable source
    /// ([`ResolvedCatalogCredentials::AwsSource`]: an assumed role, the deployment's ambient
    /// chain). The service maps every AWS authentication type onto this scheme.
    AwsSigV4 {
        /// Signing region, e.g. `us-east-1`.
        region: String,
        /// Signing service name, e.g. `glue`, `s3tables`, `execute-api`.
        signing_name: String,
    },
    /// Legacy shape of role assumption, refused by providers with
    /// [`CatalogAccessError::Unsupported`]: an assumed role is expressed as
    /// [`CatalogAuthentication::AwsSigV4`] with a [`ResolvedCatalogCredentials::AwsSource`].
    AwsAssumeRole {
        /// Role to assume.
        role_arn: String,
        /// Optional external id.
        #[serde(default)]
        external_id: Option<String>,
        /// Signing region.
        region: String,
    },
    /// Legacy shape of access keys without a signing service, refused by providers: access
    /// keys are expressed as [`CatalogAuthentication::AwsSigV4`] with resolved keys.
    AwsAccessKeys {
        /// Region.
        region: String,
    },
}

impl CatalogAuthentication {
    /// Stable scheme name for messages.
    pub fn scheme_name(&self) -> &'static str {
        match self {
            Self::OauthClientCredentials { .. } => "OAUTH_CLIENT_CREDENTIALS",
            Self::Bearer => "BEARER",
            Self::AwsSigV4 { .. } => "AWS_SIGV4",
            Self::AwsAssumeRole { .. } => "AWS_ASSUME_ROLE",
            Self::AwsAccessKeys { .. } => "AWS_ACCESS_KEYS",
        }
    }
}

/// The secret half of the integration authentication, resolved from the credential store
/// (or, for AWS sources, from the deployment's own identity) for the duration of a client.
/// Never persisted by this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedCatalogCredentials {
    /// No secret (only valid for schemes that need none).
    None,
    /// OAuth2 client secret.
    ClientSecret(SecretString),
    /// Static bearer token.
    Token(SecretString),
    /// AWS access keys for SigV4.
    AwsAccessKeys {
        /// Access key id.
        access_key_id: SecretString,
        /// Secret access key.
        secret_access_key: SecretString,
        /// Session token for temporary keys.
        session_token: Option<SecretString>,
    },
    /// A renewable AWS key source for SigV4: STS `AssumeRole` with the deployment's identity,
    /// or the deployment's ambient chain (explicitly chosen). Its keys stay in process memory.
    AwsSource(crate::sigv4::AwsCredentialHandle),
}

impl ResolvedCatalogCredentials {
    /// Stable kind name for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::ClientSecret(_) => "CLIENT_SECRET",
            Self::Token(_) => "TOKEN",
            Self::AwsAccessKeys { .. } => "AWS_ACCESS_KEYS",
            Self::AwsSource(_) => "AWS_CREDENTIAL_SOURCE",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Discovery and metadata
// ---------------------------------------------------------------------------------------

/// What a connected client can do. Validation uses it to mark checks `NOT_RUN` with an
/// "unsupported" issue rather than reporting success for something it did not test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CatalogCapabilities {
    /// Namespaces (or their protocol equivalent) can be listed.
    pub list_namespaces: bool,
    /// Tables can be listed.
    pub list_tables: bool,
    /// Views can be listed.
    pub list_views: bool,
    /// View definitions can be loaded.
    pub load_views: bool,
    /// The provider can vend storage credentials.
    pub vend_storage_credentials: bool,
    /// Tables (and views) carry a stable upstream id that survives renames.
    pub stable_ids: bool,
}

impl CatalogCapabilities {
    /// What a Delta-table catalog (Unity Catalog, Delta Sharing) offers: listings, credential
    /// vending and stable table ids (per table, where the upstream sends one), no views.
    pub const DELTA_TABLES: Self = Self {
        list_namespaces: true,
        list_tables: true,
        list_views: false,
        load_views: false,
        vend_storage_credentials: true,
        stable_ids: true,
    };
}

/// A namespace path as an upstream catalog names it, e.g. `["sales", "eu"]`.
///
/// Not Flotilla's own `flotilla_domain::names::NamespacePath`: an upstream path is taken as
/// the upstream answers it, so it may be the root (no levels, the parent of a top-level
/// listing), any depth, and any level text. The reconciler's discovery validates it into a
/// domain path before anything of it is published.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UpstreamNamespace(pub Vec<String>);

impl UpstreamNamespace {
    /// A path from levels.
    pub fn new<I, S>(levels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(levels.into_iter().map(Into::into).collect())
    }

    /// The levels.
    pub fn levels(&self) -> &[String] {
        &self.0
    }

    /// Whether this is the root (no levels).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This path extended by one level.
    pub fn child(&self, level: impl Into<String>) -> Self {
        let mut levels = self.0.clone();
        levels.push(level.into());
        Self(levels)
    }
}

impl fmt::Display for UpstreamNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// A table or view name within a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TableIdent {
    /// Containing namespace.
    pub namespace: UpstreamNamespace,
    /// Relation name.
    pub name: String,
}

impl TableIdent {
    /// An identifier.
    pub fn new(namespace: UpstreamNamespace, name: impl Into<String>) -> Self {
        Self {
            namespace,
            name: name.into(),
        }
    }
}

impl fmt::Display for TableIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}.{}", self.namespace, self.name)
        }
    }
}

/// One page of a listing. `next_page_token` is `None` on the last page; servers may also
/// ignore the requested page size and answer everything with no token (both legal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// Items on this page.
    pub items: Vec<T>,
    /// Opaque upstream token for the next page.
    pub next_page_token: Option<String>,
}

/// A table's format as the provider determined it (table-owned metadata, not an
/// integration-wide property).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TableFormat {
    /// Apache Iceberg.
    Iceberg,
    /// Delta Lake.
    Delta,
    /// Plain Parquet files.
    Parquet,
    /// CSV files.
    Csv,
    /// JSON files.
    Json,
    /// Avro files.
    Avro,
    /// ORC files.
    Orc,
    /// Any other upstream format name, upper-cased.
    Other(String),
}

impl TableFormat {
    /// Parses an upstream format name case-insensitively.
    pub fn parse(name: &str) -> Self {
        match name.trim().to_ascii_uppercase().as_str() {
            "ICEBERG" => Self::Iceberg,
            "DELTA" | "DELTA_LAKE" | "DELTASHARING" | "DELTA_SHARING" => Self::Delta,
            "PARQUET" => Self::Parquet,
            "CSV" => Self::Csv,
            "JSON" => Self::Json,
            "AVRO" => Self::Avro,
            "ORC" => Self::Orc,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Canonical upper-case name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Iceberg => "ICEBERG",
            Self::Delta => "DELTA",
            Self::Parquet => "PARQUET",
            Self::Csv => "CSV",
            Self::Json => "JSON",
            Self::Avro => "AVRO",
            Self::Orc => "ORC",
            Self::Other(s) => s,
        }
    }
}

impl Serialize for TableFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TableFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

/// Provider-neutral table metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableMetadata {
    /// Upstream identifier.
    pub identifier: TableIdent,
    /// Table format.
    pub format: TableFormat,
    /// Schema as an Iceberg-style JSON schema value
    /// (`{"type":"struct","schema-id":..,"fields":[{"id","name","required","type"}]}`).
    pub schema: serde_json::Value,
    /// Table root location, when known.
    pub location: Option<String>,
    /// Location of the current metadata file (Iceberg), when known.
    pub metadata_location: Option<String>,
    /// Stable upstream id (Iceberg table-uuid, Unity table_id, Delta Sharing table id).
    pub stable_id: Option<String>,
    /// Non-secret table properties.
    pub properties: BTreeMap<String, String>,
}

/// One SQL representation of a view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewDefinition {
    /// SQL dialect, e.g. `spark`, `trino`.
    pub dialect: String,
    /// SQL text.
    pub sql: String,
}

/// Provider-neutral view metadata. The provider does not resolve the SQL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewMetadata {
    /// Upstream identifier.
    pub identifier: TableIdent,
    /// Output schema as an Iceberg-style JSON schema value.
    pub schema: serde_json::Value,
    /// SQL representations, one per dialect.
    pub definitions: Vec<ViewDefinition>,
    /// Namespace unqualified names in the SQL resolve against.
    pub default_namespace: Option<UpstreamNamespace>,
    /// Non-secret view properties.
    pub properties: BTreeMap<String, String>,
    /// Stable upstream id (Iceberg view-uuid).
    pub stable_id: Option<String>,
}

/// The answer to a conditional table load.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadTableOutcome {
    /// The table metadata, and the upstream entity tag to send as `if_none_match` next time.
    Loaded {
        /// Metadata.
        metadata: Box<TableMetadata>,
        /// Entity tag, if the upstream sent one.
        etag: Option<String>,
    },
    /// The upstream confirmed the caller's entity tag is current (HTTP 304).
    NotModified,
}

// ---------------------------------------------------------------------------------------
// Vended storage credentials
// ---------------------------------------------------------------------------------------

/// Storage credentials of one kind. Secret parts are [`SecretString`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageCredential {
    /// S3 (or S3-compatible) temporary keys.
    S3 {
        /// Access key id.
        access_key_id: SecretString,
        /// Secret access key.
        secret_access_key: SecretString,
        /// Session token; temporary credentials without one are incomplete.
        session_token: Option<SecretString>,
    },
    /// Azure SAS token.
    AzureSas {
        /// SAS token.
        sas_token: SecretString,
    },
    /// GCS OAuth2 access token.
    GcsOauthToken {
        /// Access token.
        token: SecretString,
    },
}

impl StorageCredential {
    /// Stable kind name for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::S3 { .. } => "S3",
            Self::AzureSas { .. } => "AZURE_SAS",
            Self::GcsOauthToken { .. } => "GCS_OAUTH_TOKEN",
        }
    }
}

/// Short-lived, storage-scoped credentials vended by the catalog for one table.
///
/// Process-local runtime material: `Debug` redacts secrets (through [`SecretString`]),
/// there is deliberately no `Serialize`, and nothing in this crate persists or logs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendedCredentials {
    /// Storage prefix the credentials are scoped to (e.g. `s3://bucket/wh/ns/t`), when the
    /// upstream stated one.
    pub prefix: Option<String>,
    /// The credential.
    pub credential: StorageCredential,
    /// Expiry, when the upstream stated one.
    pub expires_at: Option<SystemTime>,
    /// Non-secret storage settings (region, endpoint, path-style access), upstream keys.
    pub settings: BTreeMap<String, String>,
}

impl VendedCredentials {
    /// Whether the credentials expire within `margin` of `now` (or already have).
    pub fn expires_within(&self, now: SystemTime, margin: Duration) -> bool {
        self.expires_at.is_some_and(|at| at <= now + margin)
    }

    /// Whether these credentials cover `location` (by prefix; credentials without a prefix
    /// cover the table they were vended for).
    pub fn covers(&self, location: &str) -> bool {
        self.prefix
            .as_deref()
            .is_none_or(|p| location_has_prefix(location, p))
    }

    /// The S3 settings of these credentials, read one way for every user (the capture's
    /// object store, the Iceberg endpoint's engine configuration). Upstreams name the
    /// region differently: `s3.region`, else `client.region`, else `region`. Empty values
    /// count as absent.
    pub fn s3_settings(&self) -> S3Settings {
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| self.settings.get(*k))
                .filter(|v| !v.is_empty())
                .cloned()
        };
        S3Settings {
            region: get(&["s3.region", "client.region", "region"]),
            endpoint: get(&["s3.endpoint"]),
            path_style_access: get(&["s3.path-style-access"]),
        }
    }
}

/// Non-secret S3 settings of vended credentials ([`VendedCredentials::s3_settings`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Settings {
    pub region: Option<String>,
    /// An S3-compatible endpoint (`http://` only for local emulators).
    pub endpoint: Option<String>,
    /// The upstream's `s3.path-style-access` value, as it stated it.
    pub path_style_access: Option<String>,
}

/// Whether `location` lies under `prefix`, on a path-segment boundary.
pub fn location_has_prefix(location: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    location == prefix
        || (location.starts_with(prefix) && location.as_bytes().get(prefix.len()) == Some(&b'/'))
}

// ---------------------------------------------------------------------------------------
// Delta Sharing file listings (capture of shared Delta tables)
// ---------------------------------------------------------------------------------------

/// One data file of a shared Delta table, as a Delta Sharing table query lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaSharedFile {
    /// A short-lived presigned URL reading the file: a bearer secret (never stored, never
    /// logged; [`SecretString`] redacts it).
    pub url: SecretString,
    /// The server's stable id of the file.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
    /// The `stats` JSON string (`numRecords`, `minValues`, `maxValues`, `nullCount`), when
    /// the server sends it.
    pub stats: Option<String>,
    /// Partition values by partition column (`None`: null).
    pub partition_values: BTreeMap<String, Option<String>>,
    /// Whether the file carries a deletion vector (not supported by capture).
    pub deletion_vector: bool,
}

impl DeltaSharedFile {
    /// The file's URL without its query (no signature): what may be recorded and shown.
    pub fn display_path(&self) -> String {
        let raw = self.url.expose();
        match Url::parse(raw) {
            Ok(mut u) => {
                u.set_query(None);
                u.set_fragment(None);
                u.to_string()
            }
            Err(_) => raw.split('?').next().unwrap_or_default().to_owned(),
        }
    }
}

/// The answer to a Delta Sharing table query: the table version, its `protocol` and
/// `metaData` actions as the server sent them, and the live data files.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaFileListing {
    /// The table version the listing is of (`Delta-Table-Version`).
    pub version: i64,
    /// The `protocol` line.
    pub protocol: serde_json::Value,
    /// The `metaData` line (`schemaString`, `partitionColumns`, `configuration`, ...).
    pub metadata: serde_json::Value,
    /// The live files.
    pub files: Vec<DeltaSharedFile>,
}

// ---------------------------------------------------------------------------------------
// Client and provider (the registry is `crate::factory`)
// ---------------------------------------------------------------------------------------

/// The clock for token and credential expiry: Flotilla's one clock, so that refresh and
/// vended-credential expiry follow the same (injectable) time as the rest of the service.
pub use flotilla_domain::clock::{Clock, SystemClock};

/// Everything a provider needs besides the integration's own configuration.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// HTTP hardening policy (address policy, timeouts, size caps, retries).
    pub http: HttpPolicy,
    /// Clock for token and credential expiry.
    pub clock: Arc<dyn Clock>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            http: HttpPolicy::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl ConnectOptions {
    /// Options with this HTTP policy and the system clock.
    pub fn with_http(http: HttpPolicy) -> Self {
        Self {
            http,
            clock: Arc::new(SystemClock),
        }
    }
}

/// A connected catalog client. All operations are reads: they may be retried freely.
///
/// Listing methods take an opaque upstream `page_token` from a previous [`Page`] and an
/// optional `page_size` hint the upstream may ignore.
#[async_trait]
pub trait CatalogClient: Send + Sync {
    /// The protocol this client speaks.
    fn protocol(&self) -> CatalogProtocol;

    /// What this client (and, where discoverable, the upstream) supports. May contact the
    /// upstream (e.g. Iceberg REST `GET /v1/config` advertises endpoints).
    async fn capabilities(&self) -> Result<CatalogCapabilities>;

    /// Proves the endpoint is reachable and accepts the authentication, with a cheap
    /// non-mutating request (a top-level namespace listing).
    async fn check_connection(&self) -> Result<()>;

    /// Lists namespaces directly under `parent` (top level when `None`).
    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<UpstreamNamespace>>;

    /// Lists tables in a namespace.
    async fn list_tables(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>>;

    /// Lists views in a namespace. Providers without views answer `Unsupported`.
    async fn list_views(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        let _ = (namespace, page_token, page_size);
        Err(CatalogAccessError::unsupported(
            "this catalog protocol has no views",
        ))
    }

    /// The properties of one namespace (secret-like keys withheld). Providers without
    /// namespace properties answer `Unsupported`, which callers treat as "none".
    async fn load_namespace_properties(
        &self,
        namespace: &UpstreamNamespace,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let _ = namespace;
        Err(CatalogAccessError::unsupported(
            "this catalog protocol has no namespace properties",
        ))
    }

    /// Loads a table. With `if_none_match` set to a previous entity tag, an unchanged table
    /// answers [`LoadTableOutcome::NotModified`].
    async fn load_table(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
        if_none_match: Option<&str>,
    ) -> Result<LoadTableOutcome>;

    /// Loads a view definition. Providers without views answer `Unsupported`.
    async fn load_view(&self, namespace: &UpstreamNamespace, name: &str) -> Result<ViewMetadata> {
        let _ = (namespace, name);
        Err(CatalogAccessError::unsupported(
            "this catalog protocol has no views",
        ))
    }

    /// Obtains storage credentials for a table through the provider protocol, renewing them
    /// when cached ones are near expiry. Never falls back to other credentials.
    async fn vend_storage_credentials(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> Result<VendedCredentials>;

    /// Lists the live files of a shared Delta table at its current version (the Delta
    /// Sharing table query). Other protocols answer `Unsupported`.
    async fn query_delta_files(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> Result<DeltaFileListing> {
        let _ = (namespace, name);
        Err(CatalogAccessError::unsupported(
            "this catalog protocol has no file listing",
        ))
    }

    /// Reads bytes `range` of a file a [`DeltaFileListing`] named, through its presigned URL
    /// (a ranged `GET` under the provider's address policy, without the integration's
    /// credentials). Other protocols answer `Unsupported`.
    async fn read_shared_file_range(
        &self,
        file: &DeltaSharedFile,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes> {
        let _ = (file, range);
        Err(CatalogAccessError::unsupported(
            "this catalog protocol shares no files",
        ))
    }
}

/// Builds clients for one protocol.
pub trait CatalogClientProvider: Send + Sync {
    /// The protocol served.
    fn protocol(&self) -> CatalogProtocol;

    /// Validates the configuration and authentication combination and builds a client.
    /// Performs no I/O; unsupported authentication schemes fail here with `Unsupported`.
    fn connect(
        &self,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Box<dyn CatalogClient>>;
}

/// Implements [`CatalogClientProvider`] for a provider whose client is built by one
/// constructor taking `(config, auth, credentials, options)`: the one `connect` every
/// provider shares.
macro_rules! client_provider {
    ($provider:ty, $protocol:expr, $build:path) => {
        impl $crate::spi::CatalogClientProvider for $provider {
            fn protocol(&self) -> $crate::spi::CatalogProtocol {
                $protocol
            }

            fn connect(
                &self,
                config: &$crate::spi::CatalogConnectionConfig,
                auth: &$crate::spi::CatalogAuthentication,
                credentials: $crate::spi::ResolvedCatalogCredentials,
                options: &$crate::spi::ConnectOptions,
            ) -> $crate::error::Result<Box<dyn $crate::spi::CatalogClient>> {
                Ok(Box::new($build(config, auth, credentials, options)?))
            }
        }
    };
}
pub(crate) use client_provider;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_recognised() {
        for key in [
            "token",
            "credential",
            "client_secret",
            "s3.secret-access-key",
            "s3.access-key-id",
            "password",
            "X-Api-Key",
            "apikey",
            "Authorization",
            "sas",
            "azure.sas-token.account",
            "gcs.oauth2.token",
            "sig",
        ] {
            assert!(is_secret_key(key), "{key} should be secret");
        }
        for key in [
            "warehouse",
            "prefix",
            "signing-name",
            "region",
            "token-refresh-enabled",
            "delta.sharing.strict-access-modes",
            "scope",
        ] {
            assert!(!is_secret_key(key), "{key} should not be secret");
        }
    }

    fn err_of(cfg: CatalogConnectionConfig) -> String {
        match cfg.validate() {
            Err(CatalogAccessError::Config(t)) => t.as_str().to_owned(),
            other => panic!("expected Config error, got {other:?}"),
        }
    }

    #[test]
    fn validate_refuses_secret_bearing_configuration() {
        assert!(err_of(CatalogConnectionConfig::new("https://u:p@h/")).contains("user-info"));
        assert!(err_of(CatalogConnectionConfig::new("https://u@h/")).contains("user-info"));
        assert!(err_of(CatalogConnectionConfig::new("https://h/#x")).contains("fragment"));
        assert!(err_of(CatalogConnectionConfig::new("https://h/?token=a")).contains("token"));
        assert!(
            err_of(CatalogConnectionConfig::new("https://h/?X-Amz-Signature=a"))
                .contains("X-Amz-Signature")
        );
        assert!(
            err_of(CatalogConnectionConfig::new("https://h/").with_property("credential", "x"))
                .contains("credential")
        );
        assert!(
            err_of(
                CatalogConnectionConfig::new("https://h/")
                    .with_property("header.Authorization", "Bearer x")
            )
            .contains("header.Authorization")
        );
        assert!(
            err_of(
                CatalogConnectionConfig::new("https://h/").with_property("header.X-Api-Key", "x")
            )
            .contains("header.X-Api-Key")
        );
        assert!(
            err_of(
                CatalogConnectionConfig::new("https://h/")
                    .with_property("warehouse", "arn:aws:secretsmanager:us-east-1:1:secret:x")
            )
            .contains("credential-store reference")
        );
        assert!(err_of(CatalogConnectionConfig::new("ftp://h/")).contains("scheme"));
    }

    #[test]
    fn validate_accepts_plain_configuration() {
        let cfg = CatalogConnectionConfig::new("https://catalog.example.com/api/catalog?x=1")
            .with_property("warehouse", "wh")
            .with_property("header.X-Iceberg-Access-Delegation", "vended-credentials");
        let url = cfg.validate().unwrap();
        assert_eq!(url.host_str(), Some("catalog.example.com"));
        assert_eq!(cfg.extra_headers().count(), 1);
    }

    #[test]
    fn debug_of_credentials_is_redacted() {
        let c = ResolvedCatalogCredentials::AwsAccessKeys {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI".into(),
            session_token: Some("sess-tok".into()),
        };
        let s = format!("{c:?}");
        assert!(
            !s.contains("AKIA") && !s.contains("wJal") && !s.contains("sess-tok"),
            "{s}"
        );
        let v = VendedCredentials {
            prefix: Some("s3://b/p".into()),
            credential: StorageCredential::S3 {
                access_key_id: "AKIAEXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI".into(),
                session_token: None,
            },
            expires_at: None,
            settings: BTreeMap::new(),
        };
        let s = format!("{v:?}");
        assert!(!s.contains("AKIA") && !s.contains("wJal"), "{s}");
    }

    #[test]
    fn location_prefix_matches_on_segment_boundary() {
        assert!(location_has_prefix("s3://b/wh/t1/data", "s3://b/wh/t1"));
        assert!(location_has_prefix("s3://b/wh/t1", "s3://b/wh/t1/"));
        assert!(!location_has_prefix("s3://b/wh/t10", "s3://b/wh/t1"));
    }
}
