//! AWS SigV4 request signing for catalog calls, and where the signing keys come from.
//!
//! A [`SigV4Signer`] signs with the keys an [`AwsCredentialSource`] answers:
//!
//! - [`StaticAwsCredentials`]: an access key id, secret and optional session token from the
//!   credential store (`AWS_ACCESS_KEYS`, `AWS_SIGV4` with `STATIC` keys);
//! - [`AssumedRoleCredentials`]: STS `AssumeRole` called with the deployment's own identity
//!   (`AWS_ASSUME_ROLE`);
//! - [`AmbientAwsCredentials`]: the deployment's default credential chain itself
//!   (`AWS_SIGV4` with `AMBIENT`, an explicit choice, never a fallback).
//!
//! The deployment's identity and endpoints come from the standard SDK configuration
//! ([`AwsDeployment::from_environment`]: environment, profile, container or instance role,
//! per-service endpoint overrides such as `AWS_ENDPOINT_URL_STS`).
//!
//! Temporary keys are process-local: cached in the source, renewed ahead of their expiry by
//! the injected clock, never serialized (no `Serialize`, redacted `Debug`) and never put in
//! an error or a log line. A source belongs to one connected client, so a new credential
//! generation (a new client) never reuses an older session.
//!
//! The signing time comes from the injected clock so signatures are reproducible in tests;
//! the header form is used (not presigned query parameters), so no signature ever lands in
//! a URL that might be logged.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use reqwest::header::{HeaderName, HeaderValue};
use tokio::sync::{Mutex, OnceCell};

use crate::error::{BoundedText, CatalogAccessError, Result};
use crate::secret::SecretString;

/// Renew temporary keys this long before they expire (capped at half their lifetime).
pub const AWS_RENEW_MARGIN: Duration = Duration::from_secs(300);

/// Signing keys, possibly temporary. `Debug` prints no key material.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// Access key id.
    pub access_key_id: SecretString,
    /// Secret access key.
    pub secret_access_key: SecretString,
    /// Session token of temporary keys.
    pub session_token: Option<SecretString>,
    /// When temporary keys expire.
    pub expires_at: Option<SystemTime>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("temporary", &self.session_token.is_some())
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Where a signer's keys come from.
#[async_trait]
pub trait AwsCredentialSource: Send + Sync + fmt::Debug {
    /// Stable kind name for messages (`STATIC`, `ASSUME_ROLE`, `AMBIENT`).
    fn kind(&self) -> &'static str;

    /// Keys usable at `now`: cached ones unless they are due for renewal.
    async fn credentials(&self, now: SystemTime) -> Result<AwsCredentials>;

    /// Forgets cached temporary keys after the upstream refused a signature made with
    /// `refused`, so the next [`AwsCredentialSource::credentials`] renews them. Answers
    /// whether a renewal is possible (static keys: never).
    async fn invalidate(&self, refused: &AwsCredentials) -> bool {
        let _ = refused;
        false
    }
}

/// Keys from the credential store, used as they are.
#[derive(Debug)]
pub struct StaticAwsCredentials(AwsCredentials);

impl StaticAwsCredentials {
    /// Static keys; an empty id or secret is a `Config` error.
    pub fn new(
        access_key_id: SecretString,
        secret_access_key: SecretString,
        session_token: Option<SecretString>,
    ) -> Result<Self> {
        if access_key_id.is_empty() || secret_access_key.is_empty() {
            return Err(CatalogAccessError::config(
                "AWS access keys need an access key id and a secret access key",
            ));
        }
        Ok(Self(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: session_token.filter(|t| !t.is_empty()),
            expires_at: None,
        }))
    }
}

#[async_trait]
impl AwsCredentialSource for StaticAwsCredentials {
    fn kind(&self) -> &'static str {
        "STATIC"
    }

    async fn credentials(&self, _now: SystemTime) -> Result<AwsCredentials> {
        Ok(self.0.clone())
    }
}

/// A shared handle on a credential source (compared by identity).
#[derive(Clone)]
pub struct AwsCredentialHandle(pub Arc<dyn AwsCredentialSource>);

impl fmt::Debug for AwsCredentialHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AwsCredentialHandle({})", self.0.kind())
    }
}

impl PartialEq for AwsCredentialHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AwsCredentialHandle {}

// ---------------------------------------------------------------------------------------
// The deployment's own AWS configuration
// ---------------------------------------------------------------------------------------

/// The deployment's own AWS identity and endpoints: the standard SDK configuration, loaded
/// once, on first use (a deployment that never signs with AWS never loads it).
pub struct AwsDeployment {
    config: OnceCell<aws_config::SdkConfig>,
}

impl fmt::Debug for AwsDeployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsDeployment")
            .field("loaded", &self.config.initialized())
            .finish()
    }
}

impl Default for AwsDeployment {
    fn default() -> Self {
        Self::from_environment()
    }
}

impl AwsDeployment {
    /// The standard chain: environment, shared config and credentials files, web identity,
    /// container and instance roles; endpoints from `AWS_ENDPOINT_URL` /
    /// `AWS_ENDPOINT_URL_STS` and the config file. Loaded lazily.
    pub fn from_environment() -> Self {
        Self {
            config: OnceCell::new(),
        }
    }

    /// A configuration built by the caller (tests that need a second identity).
    pub fn from_config(config: aws_config::SdkConfig) -> Self {
        Self {
            config: OnceCell::new_with(Some(config)),
        }
    }

    /// The loaded configuration.
    pub async fn sdk_config(&self) -> &aws_config::SdkConfig {
        self.config
            .get_or_init(|| aws_config::defaults(aws_config::BehaviorVersion::latest()).load())
            .await
    }
}

// ---------------------------------------------------------------------------------------
// Renewing sources
// ---------------------------------------------------------------------------------------

/// Cached temporary keys and when to renew them.
#[derive(Debug, Clone)]
struct Cached {
    credentials: AwsCredentials,
    renew_at: Option<SystemTime>,
}

fn renew_at(now: SystemTime, expires_at: Option<SystemTime>) -> Option<SystemTime> {
    let at = expires_at?;
    let lifetime = at.duration_since(now).unwrap_or_default();
    Some(at - AWS_RENEW_MARGIN.min(lifetime / 2))
}

/// One renewal at a time (the mutex is held across the fetch), others wait and reuse.
#[derive(Debug, Default)]
struct RenewingCache {
    slot: Mutex<Option<Cached>>,
    fetches: std::sync::atomic::AtomicU64,
}

impl RenewingCache {
    async fn get<F, Fut>(&self, now: SystemTime, fetch: F) -> Result<AwsCredentials>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<AwsCredentials>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some(c) = slot.as_ref()
            && c.renew_at.is_none_or(|at| now < at)
        {
            return Ok(c.credentials.clone());
        }
        // Drop the old session before asking for a new one: a failed renewal must not
        // leave expired keys to be used again.
        *slot = None;
        let fresh = fetch().await?;
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *slot = Some(Cached {
            renew_at: renew_at(now, fresh.expires_at),
            credentials: fresh.clone(),
        });
        Ok(fresh)
    }

    async fn invalidate(&self, refused: &AwsCredentials) -> bool {
        let mut slot = self.slot.lock().await;
        if slot
            .as_ref()
            .is_some_and(|c| c.credentials.access_key_id == refused.access_key_id)
        {
            *slot = None;
        }
        true
    }
}

/// What `AssumeRole` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRoleParams {
    /// Role to assume.
    pub role_arn: String,
    /// External id the role's trust policy demands, if any.
    pub external_id: Option<String>,
    /// Session name (appears in the role's CloudTrail records).
    pub session_name: String,
    /// Requested session lifetime in seconds (STS default, one hour, when absent).
    pub duration_secs: Option<u32>,
    /// STS region when the deployment configures none.
    pub fallback_region: String,
}

/// Keys from STS `AssumeRole`, signed by the deployment's own identity. Cached in process
/// memory and renewed [`AWS_RENEW_MARGIN`] (at most half the lifetime) before expiry.
pub struct AssumedRoleCredentials {
    deployment: Arc<AwsDeployment>,
    params: AssumeRoleParams,
    sts: OnceCell<aws_sdk_sts::Client>,
    cache: RenewingCache,
}

impl fmt::Debug for AssumedRoleCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssumedRoleCredentials")
            .field("role_arn", &self.params.role_arn)
            .field("session_name", &self.params.session_name)
            .finish_non_exhaustive()
    }
}

impl AssumedRoleCredentials {
    /// A source assuming `params.role_arn` with `deployment`'s identity (no I/O yet).
    pub fn new(deployment: Arc<AwsDeployment>, params: AssumeRoleParams) -> Result<Self> {
        if !params.role_arn.starts_with("arn:") || !params.role_arn.contains(":role/") {
            return Err(CatalogAccessError::config(
                "AWS_ASSUME_ROLE needs an IAM role ARN",
            ));
        }
        Ok(Self {
            deployment,
            params,
            sts: OnceCell::new(),
            cache: RenewingCache::default(),
        })
    }

    /// How many times STS was asked (tests prove reuse and renewal with it).
    pub fn sts_calls(&self) -> u64 {
        self.cache
            .fetches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn client(&self) -> &aws_sdk_sts::Client {
        self.sts
            .get_or_init(|| async {
                let sdk = self.deployment.sdk_config().await;
                let mut conf = aws_sdk_sts::config::Builder::from(sdk);
                if sdk.region().is_none() {
                    conf = conf.region(aws_sdk_sts::config::Region::new(
                        self.params.fallback_region.clone(),
                    ));
                }
                aws_sdk_sts::Client::from_conf(conf.build())
            })
            .await
    }

    async fn assume(&self) -> Result<AwsCredentials> {
        let out = self
            .client()
            .await
            .assume_role()
            .role_arn(&self.params.role_arn)
            .role_session_name(&self.params.session_name)
            .set_external_id(self.params.external_id.clone())
            .set_duration_seconds(
                self.params
                    .duration_secs
                    .map(|d| i32::try_from(d).unwrap_or(i32::MAX)),
            )
            .send()
            .await
            .map_err(|e| sts_error(&e))?;
        let c = out.credentials().ok_or_else(|| {
            CatalogAccessError::protocol("Credentials", "AWS STS answered AssumeRole without keys")
        })?;
        let expires_at = SystemTime::try_from(*c.expiration()).map_err(|_| {
            CatalogAccessError::protocol("Expiration", "AWS STS answered an unusable expiry")
        })?;
        Ok(AwsCredentials {
            access_key_id: SecretString::new(c.access_key_id()),
            secret_access_key: SecretString::new(c.secret_access_key()),
            session_token: Some(SecretString::new(c.session_token())),
            expires_at: Some(expires_at),
        })
    }
}

/// Prefix of the detail of every STS refusal (see [`is_sts_refusal`]).
const STS_REFUSAL: &str = "AWS STS AssumeRole";

/// Whether `e` is STS refusing to issue a session (before any catalog call was made).
pub fn is_sts_refusal(e: &CatalogAccessError) -> bool {
    matches!(e, CatalogAccessError::Authentication { detail, .. } if detail.as_str().starts_with(STS_REFUSAL))
}

/// An STS failure as a catalog-access error: refusals are `Authentication` with STS's own
/// code and message (bounded and scrubbed), transport failures `Connection`, throttling and
/// 5xx `Retryable`.
fn sts_error<E>(
    e: &aws_sdk_sts::error::SdkError<E, aws_sdk_sts::config::http::HttpResponse>,
) -> CatalogAccessError
where
    E: aws_sdk_sts::error::ProvideErrorMetadata + std::error::Error,
{
    use aws_sdk_sts::error::SdkError;
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            // The SDK reads `ErrorResponse/Error/Code`; some STS implementations (moto) nest
            // it one level deeper, so fall back to the error-type header and a tolerant scan.
            let raw = se.raw();
            let body = raw
                .body()
                .bytes()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let code = err
                .code()
                .map(str::to_owned)
                .or_else(|| raw.headers().get("x-amzn-errortype").map(str::to_owned))
                .or_else(|| xml_element(&body, "Code"))
                .unwrap_or_else(|| format!("HTTP{}", raw.status().as_u16()));
            let message = err
                .message()
                .map(str::to_owned)
                .or_else(|| xml_element(&body, "Message"))
                .unwrap_or_default();
            let message = message.as_str();
            // The code is an identifier; the message is STS's text and goes through the
            // scrubber on its own, so the prefix survives even when the message is withheld.
            let code: String = code
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(64)
                .collect();
            let detail = BoundedText::ours(&format!(
                "{STS_REFUSAL}: {code}: {}",
                BoundedText::new(message)
            ));
            let throttled = matches!(
                code.as_str(),
                "Throttling" | "ThrottlingException" | "RequestLimitExceeded"
            );
            if throttled || code.starts_with("InternalFailure") || code == "ServiceUnavailable" {
                CatalogAccessError::Retryable {
                    status: None,
                    detail,
                }
            } else {
                CatalogAccessError::Authentication {
                    status: None,
                    detail,
                }
            }
        }
        SdkError::TimeoutError(_) => CatalogAccessError::Retryable {
            status: None,
            detail: BoundedText::ours("AWS STS did not answer in time"),
        },
        SdkError::DispatchFailure(_) => {
            CatalogAccessError::Connection(BoundedText::ours("cannot reach AWS STS"))
        }
        // Typically: the deployment has no AWS identity to sign the STS call with.
        SdkError::ConstructionFailure(_) => CatalogAccessError::Authentication {
            status: None,
            detail: BoundedText::ours(&format!(
                "{STS_REFUSAL} could not be signed: the deployment has no usable AWS identity"
            )),
        },
        _ => CatalogAccessError::protocol("<sts>", "AWS STS answered something unreadable"),
    }
}

/// The text of the first `<name>` element of an XML error body (no entity decoding needed
/// for codes; messages are shown as STS wrote them, bounded and scrubbed).
fn xml_element(body: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = body.find(&open)? + open.len();
    let len = body[start..].find(&format!("</{name}>"))?;
    Some(body[start..start + len].trim().to_owned()).filter(|s| !s.is_empty())
}

#[async_trait]
impl AwsCredentialSource for AssumedRoleCredentials {
    fn kind(&self) -> &'static str {
        "ASSUME_ROLE"
    }

    async fn credentials(&self, now: SystemTime) -> Result<AwsCredentials> {
        self.cache.get(now, || self.assume()).await
    }

    async fn invalidate(&self, refused: &AwsCredentials) -> bool {
        self.cache.invalidate(refused).await
    }
}

/// The deployment's own default credential chain, chosen explicitly by the integration.
pub struct AmbientAwsCredentials {
    deployment: Arc<AwsDeployment>,
    cache: RenewingCache,
}

impl fmt::Debug for AmbientAwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AmbientAwsCredentials")
    }
}

impl AmbientAwsCredentials {
    /// A source over `deployment`'s credential chain (no I/O yet).
    pub fn new(deployment: Arc<AwsDeployment>) -> Self {
        Self {
            deployment,
            cache: RenewingCache::default(),
        }
    }

    async fn fetch(&self) -> Result<AwsCredentials> {
        let provider = self
            .deployment
            .sdk_config()
            .await
            .credentials_provider()
            .ok_or_else(|| CatalogAccessError::Authentication {
                status: None,
                detail: BoundedText::ours("the deployment has no AWS credential chain"),
            })?;
        let c = provider.provide_credentials().await.map_err(|_| {
            CatalogAccessError::Authentication {
                status: None,
                detail: BoundedText::ours(
                    "the deployment's AWS credential chain provided no credentials",
                ),
            }
        })?;
        Ok(AwsCredentials {
            access_key_id: SecretString::new(c.access_key_id()),
            secret_access_key: SecretString::new(c.secret_access_key()),
            session_token: c.session_token().map(SecretString::new),
            expires_at: c.expiry(),
        })
    }
}

#[async_trait]
impl AwsCredentialSource for AmbientAwsCredentials {
    fn kind(&self) -> &'static str {
        "AMBIENT"
    }

    async fn credentials(&self, now: SystemTime) -> Result<AwsCredentials> {
        self.cache.get(now, || self.fetch()).await
    }

    async fn invalidate(&self, refused: &AwsCredentials) -> bool {
        self.cache.invalidate(refused).await
    }
}

// ---------------------------------------------------------------------------------------
// Signing
// ---------------------------------------------------------------------------------------

/// Signs catalog requests for one client.
#[derive(Debug, Clone)]
pub struct SigV4Signer {
    region: String,
    signing_name: String,
    source: Arc<dyn AwsCredentialSource>,
}

impl SigV4Signer {
    /// A signer for `region` / `signing_name` with static keys.
    pub fn new(
        region: impl Into<String>,
        signing_name: impl Into<String>,
        access_key_id: SecretString,
        secret_access_key: SecretString,
        session_token: Option<SecretString>,
    ) -> Self {
        Self {
            region: region.into(),
            signing_name: signing_name.into(),
            source: Arc::new(StaticAwsCredentials(AwsCredentials {
                access_key_id,
                secret_access_key,
                session_token,
                expires_at: None,
            })),
        }
    }

    /// A signer for `region` / `signing_name` with keys from `source`.
    pub fn with_source(
        region: impl Into<String>,
        signing_name: impl Into<String>,
        source: Arc<dyn AwsCredentialSource>,
    ) -> Self {
        Self {
            region: region.into(),
            signing_name: signing_name.into(),
            source,
        }
    }

    /// The key source.
    pub fn source(&self) -> &Arc<dyn AwsCredentialSource> {
        &self.source
    }

    /// Signs `request` at `time` with the source's current keys; answers the keys used (to
    /// [`AwsCredentialSource::invalidate`] them should the upstream refuse the signature).
    pub async fn sign(
        &self,
        request: &mut reqwest::Request,
        time: SystemTime,
    ) -> Result<AwsCredentials> {
        let keys = self.source.credentials(time).await?;
        self.sign_with(&keys, request, time)?;
        Ok(keys)
    }

    /// Signs `request` in place at `time` with `keys`: adds `x-amz-date`, `authorization`
    /// and, for temporary keys, `x-amz-security-token`. The body must be buffered (catalog
    /// calls are small JSON or form bodies).
    pub fn sign_with(
        &self,
        keys: &AwsCredentials,
        request: &mut reqwest::Request,
        time: SystemTime,
    ) -> Result<()> {
        let identity: Identity = Credentials::new(
            keys.access_key_id.expose(),
            keys.secret_access_key.expose(),
            keys.session_token.as_ref().map(|t| t.expose().to_owned()),
            None,
            "flotilla-integration",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.signing_name)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| CatalogAccessError::config(format!("cannot sign request: {e}")))?
            .into();
        let body: &[u8] = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .unwrap_or(&[]);
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                v.to_str()
                    .ok()
                    .map(|v| (k.as_str().to_owned(), v.to_owned()))
            })
            .collect();
        let url = request.url().as_str().to_owned();
        let signable = SignableRequest::new(
            request.method().as_str(),
            url.as_str(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(body),
        )
        .map_err(|e| CatalogAccessError::config(format!("cannot sign request: {e}")))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| CatalogAccessError::config(format!("cannot sign request: {e}")))?
            .into_parts();
        let (new_headers, _params) = instructions.into_parts();
        for header in new_headers {
            let name = HeaderName::from_static(header.name());
            let mut value = HeaderValue::from_str(header.value()).map_err(|_| {
                CatalogAccessError::config("signing produced an invalid header value")
            })?;
            value.set_sensitive(header.sensitive());
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// `get-vanilla` from the AWS SigV4 test suite: GET / on example.amazonaws.com at
    /// 2015-08-30T12:36:00Z, region us-east-1, service `service`.
    #[tokio::test]
    async fn signs_the_published_get_vanilla_vector() {
        let signer = SigV4Signer::new(
            "us-east-1",
            "service",
            "AKIDEXAMPLE".into(),
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            None,
        );
        let client = reqwest::Client::new();
        let mut req = client
            .get("https://example.amazonaws.com/")
            .build()
            .unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        signer.sign(&mut req, t).await.unwrap();
        assert_eq!(req.headers()["x-amz-date"], "20150830T123600Z");
        assert_eq!(
            req.headers()["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn renewal_is_ahead_of_expiry_and_capped_at_half_the_lifetime() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = now + Duration::from_secs(3600);
        assert_eq!(renew_at(now, Some(hour)), Some(hour - AWS_RENEW_MARGIN));
        let short = now + Duration::from_secs(120);
        assert_eq!(
            renew_at(now, Some(short)),
            Some(now + Duration::from_secs(60))
        );
        assert_eq!(renew_at(now, None), None);
    }

    #[tokio::test]
    async fn the_cache_renews_when_due_and_after_a_refusal() {
        let cache = RenewingCache::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let n = std::sync::atomic::AtomicU32::new(0);
        let fetch = || async {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(AwsCredentials {
                access_key_id: SecretString::new(format!("ASIA{i}")),
                secret_access_key: "s".into(),
                session_token: Some("t".into()),
                expires_at: Some(t0 + Duration::from_secs(3600)),
            })
        };
        let a = cache.get(t0, fetch).await.unwrap();
        let b = cache
            .get(t0 + Duration::from_secs(3000), fetch)
            .await
            .unwrap();
        assert_eq!(a, b, "reused before the renewal point");
        let c = cache
            .get(t0 + Duration::from_secs(3301), fetch)
            .await
            .unwrap();
        assert_ne!(a.access_key_id, c.access_key_id, "renewed ahead of expiry");
        assert!(cache.invalidate(&c).await);
        let d = cache
            .get(t0 + Duration::from_secs(3302), fetch)
            .await
            .unwrap();
        assert_ne!(c.access_key_id, d.access_key_id, "renewed after a refusal");
        assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(!format!("{d:?}").contains("ASIA"));
    }
}
