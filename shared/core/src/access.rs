//! The adapter from a persisted CatalogIntegration to a connected catalog-access client
//! (seed 004, "Catalog access boundary": "The service adapter translates OAuth client
//! credentials, bearer tokens, and explicit static AWS SigV4 credentials ... onto the SPI's
//! authentication schemes. Ambient and assume-role AWS resolution are not yet wired into this
//! adapter and fail explicitly.").
//!
//! This is the only module that reads secret bytes from the credential store. It resolves
//! exactly the generation the integration record references, turns the JSON fields into the
//! SPI's [`ResolvedCatalogCredentials`] (whose `Debug` prints `***`) and hands them to the
//! provider; the bytes never leave this function in any other form. Errors name the
//! integration's authentication type and fields, never values.
//!
//! Used by validation and upstream listings (`service::validation`, `service::upstream`)
//! and by overlay reconciliation.

pub mod upstream;
pub mod validation;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogClient, CatalogConnectionConfig,
    CatalogProtocol, ConnectOptions, ResolvedCatalogCredentials, SecretString,
};
use flotilla_domain::model::{AuthConfig, IntegrationRecord, IntegrationType};
use flotilla_secrets::{SecretRef, SecretStoreError};
use serde_json::{Map, Value};

use crate::error::{ApiError, Code};
use crate::state::AppState;

/// Why an integration could not be turned into a client. Every message is ours and names at
/// most a field or an authentication type.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The authentication type is modeled but not wired to the SPI (assume-role, ambient AWS,
    /// access keys): refused explicitly, never resolved from ambient credentials.
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

impl AccessError {
    /// True when nothing is wrong with the integration itself but the credential store was
    /// unavailable: a caller should answer `503` rather than report the integration broken.
    pub fn is_retryable(&self) -> bool {
        matches!(self, AccessError::Store(e) if e.is_retryable() || e.is_outcome_unknown())
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> Self {
        match &e {
            AccessError::Store(s) if s.is_retryable() || s.is_outcome_unknown() => {
                ApiError::unavailable(e.to_string())
            }
            AccessError::Store(SecretStoreError::NotFound(_)) => ApiError::new(
                Code::FailedPrecondition,
                "the integration's credentials are missing from the credential store; rotate them with PUT .../authentication",
            ),
            AccessError::Store(_) => ApiError::internal(e.to_string()),
            AccessError::Unsupported(m) | AccessError::Credentials(m) => {
                ApiError::new(Code::FailedPrecondition, m.clone())
            }
            AccessError::Catalog(c) => upstream_error(c),
        }
    }
}

/// Maps a catalog-access failure of an API operation (listing, reconciliation) onto the API
/// error contract. The SPI's messages are bounded and withhold credential-bearing upstream
/// text (`BoundedText`), so they may be shown; retryable failures answer `503` and keep the
/// detail in the log only.
pub fn upstream_error(e: &CatalogAccessError) -> ApiError {
    match e {
        CatalogAccessError::Connection(_) | CatalogAccessError::Retryable { .. } => {
            ApiError::unavailable(format!("upstream catalog: {e}"))
        }
        CatalogAccessError::NotFound(_) => {
            ApiError::new(Code::NotFound, format!("upstream catalog: {e}"))
        }
        CatalogAccessError::Authentication { .. } => ApiError::new(
            Code::FailedPrecondition,
            format!("the upstream catalog refused the integration's authentication: {e}"),
        ),
        CatalogAccessError::Config(_)
        | CatalogAccessError::Unsupported(_)
        | CatalogAccessError::Protocol { .. }
        | CatalogAccessError::CredentialVending { .. }
        | CatalogAccessError::UnexpectedStatus { .. } => {
            ApiError::new(Code::FailedPrecondition, format!("upstream catalog: {e}"))
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

/// The SPI's clock over the service clock, so token refresh and vended-credential expiry
/// follow the same (injectable) time as the rest of the service.
struct ServiceClock(Arc<dyn crate::clock::Clock>);

impl std::fmt::Debug for ServiceClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceClock")
    }
}

impl flotilla_catalog_access::Clock for ServiceClock {
    fn now(&self) -> SystemTime {
        system_time(self.0.now_ms())
    }
}

/// Milliseconds since the epoch as a `SystemTime` (negative values clamp to the epoch).
pub fn system_time(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Connect options for `state`: its HTTP policy and its clock.
pub fn connect_options(state: &AppState) -> ConnectOptions {
    ConnectOptions {
        http: http_policy(state),
        clock: Arc::new(ServiceClock(state.clock.clone())),
    }
}

/// The persistable half of the connection: URI and non-secret properties.
pub fn connection_config(record: &IntegrationRecord) -> CatalogConnectionConfig {
    CatalogConnectionConfig {
        uri: record.uri.clone(),
        properties: record.properties.clone(),
    }
}

/// The SPI authentication scheme of a record (no secrets involved).
pub fn authentication(record: &IntegrationRecord) -> Result<CatalogAuthentication, AccessError> {
    match &record.authentication {
        AuthConfig::OauthClientCredentials { token_uri, client_id, scopes } => {
            let token_uri = match (token_uri, record.kind) {
                (Some(u), _) => u.clone(),
                // The Iceberg REST spec's (deprecated) catalog-hosted token endpoint.
                (None, IntegrationType::IcebergRest) => format!("{}/v1/oauth/tokens", record.uri.trim_end_matches('/')),
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
        AuthConfig::AwsSigv4 { region, signing_name, credential_source, .. } if credential_source == "STATIC" => {
            Ok(CatalogAuthentication::AwsSigV4 { region: region.clone(), signing_name: signing_name.clone() })
        }
        AuthConfig::AwsSigv4 { .. } => Err(AccessError::Unsupported(
            "AWS_SIGV4 with credential_source AMBIENT is not supported yet; use STATIC keys".into(),
        )),
        AuthConfig::AwsAssumeRole { .. } => {
            Err(AccessError::Unsupported("AWS_ASSUME_ROLE authentication is not supported yet".into()))
        }
        AuthConfig::AwsAccessKeys { .. } => Err(AccessError::Unsupported(
            "AWS_ACCESS_KEYS authentication is not supported for catalog access yet; use AWS_SIGV4 with STATIC keys".into(),
        )),
    }
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
        AuthConfig::AwsSigv4 { .. } => Err(AccessError::Credentials(
            "AWS_SIGV4 STATIC authentication needs authentication.access_key_id".into(),
        )),
        // `authentication` refused these already.
        AuthConfig::AwsAssumeRole { .. } | AuthConfig::AwsAccessKeys { .. } => Err(
            AccessError::Unsupported(format!("{auth} authentication is not supported yet")),
        ),
    }
}

/// Connects a client for a persisted integration: protocol from its type, authentication
/// from its configuration plus the credential generation it references, the HTTP policy of
/// this deployment. No upstream I/O happens here (`connect` only validates); the first call
/// on the client does the network work. A client is bound to the credential generation read
/// here: after a rotation, connect again.
pub async fn connect(
    state: &AppState,
    record: &IntegrationRecord,
) -> Result<Box<dyn CatalogClient>, AccessError> {
    let protocol = protocol_of(record.kind);
    let auth = authentication(record)?;
    let config = connection_config(record);
    // Refuse a bad configuration before any secret is read.
    config.validate().map_err(AccessError::Catalog)?;
    let credentials = resolve_credentials(state, record).await?;
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

/// Loads the integration `id` of `account` and connects it (`404` when absent).
pub async fn connect_integration(
    state: &AppState,
    account: &str,
    id: &str,
) -> Result<(IntegrationRecord, Box<dyn CatalogClient>), ApiError> {
    let record = crate::service::integrations::load(state.store.as_ref(), account, id)
        .await?
        .value;
    let client = connect(state, &record).await?;
    Ok((record, client))
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
        match authentication(&record(IntegrationType::IcebergRest, auth.clone())) {
            Ok(CatalogAuthentication::OauthClientCredentials { token_uri, .. }) => {
                assert_eq!(token_uri, "https://catalog.example.com/v1/oauth/tokens");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            authentication(&record(IntegrationType::Unity, auth)),
            Err(AccessError::Credentials(_))
        ));
    }

    #[test]
    fn assume_role_access_keys_and_ambient_sigv4_are_refused_explicitly() {
        for auth in [
            AuthConfig::AwsAssumeRole {
                role_arn: "arn:aws:iam::1:role/r".into(),
                external_id: None,
                session_name: None,
                region: None,
            },
            AuthConfig::AwsAccessKeys {
                access_key_id: "AKIA".into(),
                region: None,
            },
            AuthConfig::AwsSigv4 {
                region: "us-east-1".into(),
                signing_name: "glue".into(),
                credential_source: "AMBIENT".into(),
                access_key_id: None,
            },
        ] {
            let r = record(IntegrationType::IcebergRest, auth);
            assert!(matches!(
                authentication(&r),
                Err(AccessError::Unsupported(_))
            ));
        }
    }
}
