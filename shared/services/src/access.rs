//! The adapter from a persisted CatalogIntegration to a connected catalog-access client
//! (`docs/catalog-access.md`, "Service adapter"). OAuth client credentials and bearer tokens
//! map onto their SPI schemes; every AWS type maps onto SigV4 with its key source: static
//! keys from the credential store (`AWS_ACCESS_KEYS`, `AWS_SIGV4` `STATIC`), STS
//! `AssumeRole` signed by the deployment's own identity (`AWS_ASSUME_ROLE`), or the
//! deployment's default chain when chosen explicitly (`AWS_SIGV4` `AMBIENT`). The signing
//! region and name come from the connection properties `rest.signing-region` and
//! `rest.signing-name` (the names Iceberg's own REST clients use), else from the
//! authentication configuration.
//!
//! Connected clients are kept in a process-wide [`SessionCache`] per integration and
//! generation: their OAuth tokens, assumed-role sessions and vended credentials are reused
//! across requests (a warm Lambda container, `flotilla serve`) and renewed by the client
//! before expiry; a rotation, URI or property change (all advance the integration's
//! `generation`) or a delete drops them.
//!
//! This is the only module that reads secret bytes from the credential store. It resolves
//! exactly the generation the integration record references, turns the JSON fields into the
//! SPI's [`ResolvedCatalogCredentials`] (whose `Debug` prints `***`) and hands them to the
//! provider; the bytes never leave this function in any other form. Errors name the
//! integration's authentication type and fields, never values.
//!
//! Used by validation and upstream listings ([`validation`], [`upstream`]) and by overlay
//! reconciliation. The session cache ([`crate::sessions`]) and the AWS signing rules
//! ([`crate::signing`]) live below this module and are re-exported here: the state holds the
//! cache and integration validation checks the signing rules without depending on `access`.

pub mod upstream;
pub mod validation;

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::sigv4::{
    AmbientAwsCredentials, AssumeRoleParams, AssumedRoleCredentials, AwsCredentialHandle,
};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogCapabilities, CatalogClient,
    CatalogConnectionConfig, CatalogProtocol, ConnectOptions, LoadTableOutcome, Page,
    ResolvedCatalogCredentials, SecretString, TableIdent, UpstreamNamespace, VendedCredentials,
    ViewMetadata,
};
use flotilla_domain::model::{AuthConfig, IntegrationRecord, IntegrationType};
use flotilla_secrets::{SecretRef, SecretStoreError};
use serde_json::{Map, Value};

use crate::error::Error;
use crate::state::AppState;

pub use crate::sessions::{SESSION_CAPACITY, SESSION_MAX_AGE_MS, SessionCache};
pub use crate::signing::{
    AwsSigning, DEFAULT_SIGNING_NAME, SIGNING_NAME_PROPERTY, SIGNING_REGION_PROPERTY, aws_signing,
};

/// Why an integration could not be turned into a client. Every message is ours and names at
/// most a field or an authentication type.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The authentication type cannot be used for this integration: refused explicitly,
    /// never resolved from other credentials.
    #[error("{0}")]
    Unsupported(String),
    /// The record and its stored credentials do not fit together (a field is missing, the
    /// record says credentials are configured but none are stored, ...).
    #[error("{0}")]
    Credentials(String),
    /// The credential store failed; retryable failures become `503`.
    #[error("credential store: {0}")]
    Store(#[source] SecretStoreError),
    /// The SPI refused the configuration (URI, properties, token URI) or the scheme.
    #[error(transparent)]
    Catalog(CatalogAccessError),
}

impl From<AccessError> for Error {
    fn from(e: AccessError) -> Self {
        match &e {
            AccessError::Store(s) if s.is_retryable() || s.is_outcome_unknown() => {
                Error::unavailable(e.to_string())
            }
            AccessError::Store(SecretStoreError::NotFound(_)) => Error::failed_precondition(
                "the integration's credentials are missing from the credential store; rotate them with PUT .../authentication",
            ),
            AccessError::Store(_) => Error::internal(e.to_string()),
            AccessError::Unsupported(m) | AccessError::Credentials(m) => {
                Error::failed_precondition(m.clone())
            }
            // Classified once, next to the type (`flotilla_catalog_access::error_kind`).
            AccessError::Catalog(c) => Error::from(c),
        }
    }
}

/// The SPI protocol of an integration type.
pub fn protocol_of(kind: IntegrationType) -> CatalogProtocol {
    match kind {
        IntegrationType::IcebergRest => CatalogProtocol::IcebergRest,
        IntegrationType::Unity => CatalogProtocol::Unity,
        IntegrationType::DeltaSharing => CatalogProtocol::DeltaSharing,
    }
}

/// The HTTP hardening for upstream calls: strict on AWS, loopback/private/plain-http allowed
/// only in local mode (`--allow-insecure-upstreams`).
pub fn http_policy(state: &AppState) -> HttpPolicy {
    if state.config.allow_insecure_upstreams {
        HttpPolicy::local()
    } else {
        HttpPolicy::default()
    }
}

/// Connect options for `state`: its HTTP policy and its clock.
pub fn connect_options(state: &AppState) -> ConnectOptions {
    ConnectOptions {
        http: http_policy(state),
        clock: state.clock.clone(),
    }
}

/// The persistable half of the connection: URI and non-secret properties.
pub fn connection_config(record: &IntegrationRecord) -> CatalogConnectionConfig {
    CatalogConnectionConfig {
        uri: record.uri.clone(),
        properties: record.properties.clone(),
    }
}

/// The SPI authentication scheme of a record (no secrets involved). `default_region` is the
/// deployment's own region, the signing region of an AWS integration that names none (as
/// Iceberg's REST clients default `rest.signing-region` to the client's region).
pub fn authentication(
    record: &IntegrationRecord,
    default_region: Option<&str>,
) -> Result<CatalogAuthentication, AccessError> {
    match &record.authentication {
        AuthConfig::OauthClientCredentials {
            token_uri,
            client_id,
            scopes,
        } => {
            let token_uri = match (token_uri, record.kind) {
                (Some(u), _) => u.clone(),
                // The Iceberg REST spec's (deprecated) catalog-hosted token endpoint.
                (None, IntegrationType::IcebergRest) => {
                    format!("{}/v1/oauth/tokens", record.uri.trim_end_matches('/'))
                }
                (None, _) => {
                    return Err(AccessError::Credentials(format!(
                        "{} OAuth client credentials need authentication.token_uri",
                        protocol_of(record.kind)
                    )));
                }
            };
            Ok(CatalogAuthentication::OauthClientCredentials {
                token_uri,
                client_id: client_id.clone(),
                scopes: scopes.clone(),
            })
        }
        AuthConfig::Bearer {} => Ok(CatalogAuthentication::Bearer),
        AuthConfig::AwsAssumeRole { .. }
        | AuthConfig::AwsAccessKeys { .. }
        | AuthConfig::AwsSigv4 { .. } => {
            let signing = aws_signing(&record.authentication, &record.properties)
                .map_err(AccessError::Credentials)?
                .ok_or_else(|| {
                    AccessError::Credentials("AWS authentication needs signing parameters".into())
                })?;
            let region = signing.region.or(default_region.map(str::to_owned)).ok_or_else(|| {
                AccessError::Credentials(format!(
                    "{} authentication needs a signing region: set the property {SIGNING_REGION_PROPERTY} (the deployment has no AWS region)",
                    record.authentication.type_name()
                ))
            })?;
            Ok(CatalogAuthentication::AwsSigV4 {
                region,
                signing_name: signing.signing_name,
            })
        }
    }
}

/// The STS session name of an integration without one: `flotilla-<id>`, cut to STS's limit.
fn default_session_name(record: &IntegrationRecord) -> String {
    let id: String = record
        .id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(*c))
        .collect();
    let mut name = format!("flotilla-{id}");
    name.truncate(64);
    name
}

fn field(fields: &Map<String, Value>, name: &str, auth: &str) -> Result<SecretString, AccessError> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(SecretString::new(s.clone())),
        _ => Err(AccessError::Credentials(format!(
            "{auth} authentication needs credentials.{name}"
        ))),
    }
}

fn optional_field(fields: &Map<String, Value>, name: &str) -> Option<SecretString> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(SecretString::new(s.clone())),
        _ => None,
    }
}

/// Reads the referenced credential generation and shapes it for the SPI.
async fn resolve_credentials(
    state: &AppState,
    record: &IntegrationRecord,
) -> Result<ResolvedCatalogCredentials, AccessError> {
    let auth = record.authentication.type_name();
    if !record.credentials_configured || record.credential_generation == 0 {
        return Err(AccessError::Credentials(format!(
            "{auth} authentication needs credentials; set them with PUT .../authentication"
        )));
    }
    let reference = SecretRef::new(&record.account_id, &record.id, record.credential_generation)
        .map_err(AccessError::Store)?;
    let secret = state
        .credentials
        .resolve(&reference)
        .await
        .map_err(AccessError::Store)?;
    let fields = secret.fields().map_err(AccessError::Store)?;
    match &record.authentication {
        AuthConfig::OauthClientCredentials { .. } => Ok(ResolvedCatalogCredentials::ClientSecret(
            field(&fields, "client_secret", auth)?,
        )),
        AuthConfig::Bearer {} => Ok(ResolvedCatalogCredentials::Token(field(
            &fields, "token", auth,
        )?)),
        AuthConfig::AwsSigv4 {
            access_key_id: Some(id),
            ..
        } if !id.trim().is_empty() => Ok(ResolvedCatalogCredentials::AwsAccessKeys {
            access_key_id: SecretString::new(id.clone()),
            secret_access_key: field(&fields, "secret_access_key", auth)?,
            session_token: optional_field(&fields, "session_token"),
        }),
        AuthConfig::AwsAccessKeys { access_key_id, .. } if !access_key_id.trim().is_empty() => {
            Ok(ResolvedCatalogCredentials::AwsAccessKeys {
                access_key_id: SecretString::new(access_key_id.clone()),
                secret_access_key: field(&fields, "secret_access_key", auth)?,
                session_token: optional_field(&fields, "session_token"),
            })
        }
        AuthConfig::AwsAccessKeys { .. } => Err(AccessError::Credentials(
            "AWS_ACCESS_KEYS authentication needs authentication.access_key_id".into(),
        )),
        AuthConfig::AwsSigv4 { .. } => Err(AccessError::Credentials(
            "AWS_SIGV4 STATIC authentication needs authentication.access_key_id".into(),
        )),
        // Handled before any secret is read.
        AuthConfig::AwsAssumeRole { .. } => Err(AccessError::Credentials(
            "AWS_ASSUME_ROLE authentication reads no stored credentials".into(),
        )),
    }
}

/// The key source of authentication types that sign with the deployment's own identity
/// (`AWS_ASSUME_ROLE`, `AWS_SIGV4` `AMBIENT`); `None` for types whose secret is stored.
fn deployment_source(
    state: &AppState,
    record: &IntegrationRecord,
    signing: &CatalogAuthentication,
) -> Result<Option<ResolvedCatalogCredentials>, AccessError> {
    let region = match signing {
        CatalogAuthentication::AwsSigV4 { region, .. } => region.clone(),
        _ => return Ok(None),
    };
    match &record.authentication {
        AuthConfig::AwsAssumeRole {
            role_arn,
            external_id,
            session_name,
            duration_secs,
            ..
        } => {
            let params = AssumeRoleParams {
                role_arn: role_arn.clone(),
                external_id: external_id.clone(),
                session_name: session_name
                    .clone()
                    .unwrap_or_else(|| default_session_name(record)),
                duration_secs: *duration_secs,
                fallback_region: region,
            };
            let source = AssumedRoleCredentials::new(state.aws.clone(), params)
                .map_err(AccessError::Catalog)?;
            Ok(Some(ResolvedCatalogCredentials::AwsSource(
                AwsCredentialHandle(Arc::new(source)),
            )))
        }
        AuthConfig::AwsSigv4 {
            credential_source, ..
        } if credential_source == "AMBIENT" => Ok(Some(ResolvedCatalogCredentials::AwsSource(
            AwsCredentialHandle(Arc::new(AmbientAwsCredentials::new(state.aws.clone()))),
        ))),
        _ => Ok(None),
    }
}

/// Connects a client for a persisted integration: protocol from its type, authentication
/// from its configuration plus the credential generation it references (or the deployment's
/// identity), the HTTP policy of this deployment. A client for the same integration,
/// generation and credential generation is reused from [`AppState::sessions`]; otherwise no
/// upstream I/O happens here (`connect` only validates) and the first call on the client does
/// the network work.
pub async fn connect(
    state: &AppState,
    record: &IntegrationRecord,
) -> Result<Box<dyn CatalogClient>, AccessError> {
    Ok(Box::new(SharedClient(connect_shared(state, record).await?)))
}

/// [`connect`], answering the shared client itself.
pub async fn connect_shared(
    state: &AppState,
    record: &IntegrationRecord,
) -> Result<Arc<dyn CatalogClient>, AccessError> {
    let now = state.clock.now_ms();
    if let Some(client) = state.sessions.get(record, now) {
        return Ok(client);
    }
    let client: Arc<dyn CatalogClient> = Arc::from(connect_new(state, record).await?);
    Ok(state.sessions.insert(record, client, now))
}

/// Builds a new client (reads the credential generation; no upstream I/O).
async fn connect_new(
    state: &AppState,
    record: &IntegrationRecord,
) -> Result<Box<dyn CatalogClient>, AccessError> {
    let protocol = protocol_of(record.kind);
    let is_aws = matches!(
        record.authentication,
        AuthConfig::AwsAssumeRole { .. }
            | AuthConfig::AwsAccessKeys { .. }
            | AuthConfig::AwsSigv4 { .. }
    );
    let default_region = if is_aws {
        state.aws.sdk_config().await.region().map(|r| r.to_string())
    } else {
        None
    };
    let auth = authentication(record, default_region.as_deref())?;
    let config = connection_config(record);
    // Refuse a bad configuration before any secret is read.
    config.validate().map_err(AccessError::Catalog)?;
    let credentials = match deployment_source(state, record, &auth)? {
        Some(source) => source,
        None => resolve_credentials(state, record).await?,
    };
    state
        .catalog_access
        .connect(
            protocol,
            &config,
            &auth,
            credentials,
            &connect_options(state),
        )
        .map_err(AccessError::Catalog)
}

/// A cached client handed out as the `Box<dyn CatalogClient>` callers hold.
struct SharedClient(Arc<dyn CatalogClient>);

#[async_trait]
impl CatalogClient for SharedClient {
    fn protocol(&self) -> CatalogProtocol {
        self.0.protocol()
    }
    async fn capabilities(&self) -> flotilla_catalog_access::Result<CatalogCapabilities> {
        self.0.capabilities().await
    }
    async fn check_connection(&self) -> flotilla_catalog_access::Result<()> {
        self.0.check_connection().await
    }
    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> flotilla_catalog_access::Result<Page<UpstreamNamespace>> {
        self.0.list_namespaces(parent, page_token, page_size).await
    }
    async fn list_tables(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> flotilla_catalog_access::Result<Page<TableIdent>> {
        self.0.list_tables(namespace, page_token, page_size).await
    }
    async fn list_views(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> flotilla_catalog_access::Result<Page<TableIdent>> {
        self.0.list_views(namespace, page_token, page_size).await
    }
    async fn load_table(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
        if_none_match: Option<&str>,
    ) -> flotilla_catalog_access::Result<LoadTableOutcome> {
        self.0.load_table(namespace, name, if_none_match).await
    }
    async fn load_view(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> flotilla_catalog_access::Result<ViewMetadata> {
        self.0.load_view(namespace, name).await
    }
    async fn vend_storage_credentials(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> flotilla_catalog_access::Result<VendedCredentials> {
        self.0.vend_storage_credentials(namespace, name).await
    }
    async fn load_namespace_properties(
        &self,
        namespace: &UpstreamNamespace,
    ) -> flotilla_catalog_access::Result<std::collections::BTreeMap<String, String>> {
        self.0.load_namespace_properties(namespace).await
    }
    async fn query_delta_files(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> flotilla_catalog_access::Result<flotilla_catalog_access::DeltaFileListing> {
        self.0.query_delta_files(namespace, name).await
    }
    async fn read_shared_file_range(
        &self,
        file: &flotilla_catalog_access::DeltaSharedFile,
        range: std::ops::Range<u64>,
    ) -> flotilla_catalog_access::Result<bytes::Bytes> {
        self.0.read_shared_file_range(file, range).await
    }
}

/// Loads the integration `id` of `account` and connects it (`404` when absent).
pub async fn connect_integration(
    state: &AppState,
    account: &str,
    id: &str,
) -> Result<(IntegrationRecord, Box<dyn CatalogClient>), Error> {
    let record = crate::service::integrations::load(state.store.as_ref(), account, id)
        .await?
        .value;
    refuse_paused(&record)?;
    let client = connect(state, &record).await?;
    Ok((record, client))
}

/// A paused integration starts no new upstream work: listings and validation are refused
/// (`409 FAILED_PRECONDITION`) before anything connects.
pub fn refuse_paused(record: &IntegrationRecord) -> Result<(), Error> {
    if record.paused {
        return Err(Error::new(
            crate::error::ErrorKind::FailedPrecondition,
            "the integration is paused; unpause it to reach its upstream",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: IntegrationType, auth: AuthConfig) -> IntegrationRecord {
        IntegrationRecord {
            id: "i1".into(),
            account_id: "acme".into(),
            display_name: "x".into(),
            kind,
            uri: "https://catalog.example.com/".into(),
            properties: Default::default(),
            authentication: auth,
            credentials_configured: true,
            credential_generation: 1,
            generation: 1,
            paused: false,
            revision: 1,
            create_time: String::new(),
            update_time: String::new(),
        }
    }

    #[test]
    fn oauth_without_token_uri_uses_the_iceberg_catalog_endpoint_only_for_iceberg() {
        let auth = AuthConfig::OauthClientCredentials {
            token_uri: None,
            client_id: "c".into(),
            scopes: vec![],
        };
        match authentication(&record(IntegrationType::IcebergRest, auth.clone()), None) {
            Ok(CatalogAuthentication::OauthClientCredentials { token_uri, .. }) => {
                assert_eq!(token_uri, "https://catalog.example.com/v1/oauth/tokens");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            authentication(&record(IntegrationType::Unity, auth), None),
            Err(AccessError::Credentials(_))
        ));
    }

    #[test]
    fn every_aws_type_signs_with_properties_winning_and_contradictions_refused() {
        let mut r = record(
            IntegrationType::IcebergRest,
            AuthConfig::AwsAssumeRole {
                role_arn: "arn:aws:iam::1:role/r".into(),
                external_id: None,
                session_name: None,
                duration_secs: None,
                region: None,
            },
        );
        // No region anywhere.
        assert!(matches!(
            authentication(&r, None),
            Err(AccessError::Credentials(_))
        ));
        assert_eq!(
            authentication(&r, Some("ap-south-1")).unwrap(),
            CatalogAuthentication::AwsSigV4 {
                region: "ap-south-1".into(),
                signing_name: DEFAULT_SIGNING_NAME.into()
            }
        );
        r.properties
            .insert(SIGNING_REGION_PROPERTY.into(), "eu-west-1".into());
        r.properties
            .insert(SIGNING_NAME_PROPERTY.into(), "glue".into());
        assert_eq!(
            authentication(&r, Some("ap-south-1")).unwrap(),
            CatalogAuthentication::AwsSigV4 {
                region: "eu-west-1".into(),
                signing_name: "glue".into()
            }
        );
        let keys = AuthConfig::AwsAccessKeys {
            access_key_id: "AKIA".into(),
            region: Some("us-east-1".into()),
        };
        let r2 = record(IntegrationType::IcebergRest, keys.clone());
        assert_eq!(
            authentication(&r2, None).unwrap(),
            CatalogAuthentication::AwsSigV4 {
                region: "us-east-1".into(),
                signing_name: DEFAULT_SIGNING_NAME.into()
            }
        );
        let mut props = std::collections::BTreeMap::new();
        props.insert(SIGNING_REGION_PROPERTY.to_owned(), "eu-west-1".to_owned());
        assert!(
            aws_signing(&keys, &props)
                .unwrap_err()
                .contains("contradicts")
        );
        props.insert(SIGNING_REGION_PROPERTY.to_owned(), "US EAST".to_owned());
        assert!(aws_signing(&keys, &props).is_err());
        let ambient = AuthConfig::AwsSigv4 {
            region: "us-east-1".into(),
            signing_name: "execute-api".into(),
            credential_source: "AMBIENT".into(),
            access_key_id: None,
        };
        let mut props = std::collections::BTreeMap::new();
        props.insert(SIGNING_NAME_PROPERTY.to_owned(), "s3tables".to_owned());
        assert_eq!(
            aws_signing(&ambient, &props).unwrap().unwrap().signing_name,
            "s3tables"
        );
        assert!(aws_signing(&AuthConfig::Bearer {}, &props).is_err());
        let bad_duration = AuthConfig::AwsAssumeRole {
            role_arn: "arn:aws:iam::1:role/r".into(),
            external_id: None,
            session_name: None,
            duration_secs: Some(60),
            region: Some("us-east-1".into()),
        };
        assert!(aws_signing(&bad_duration, &Default::default()).is_err());
    }
}
