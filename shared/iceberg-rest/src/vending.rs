//! Temporary storage credentials for engines (`X-Iceberg-Access-Delegation:
//! vended-credentials`). A deployment plugs in a [`Vending`] for its `s3://` warehouses; a
//! `file://` warehouse needs none and is answered without credentials.
//!
//! On AWS (and moto) the vendor is [`StsVending`]: an STS `AssumeRole` of the role the
//! deployment names in [`ROLE_ARN_ENV`], with a session policy that narrows the role to one
//! table location (objects below the prefix, listing only with that prefix). The effective
//! permissions are the intersection of the role's own policy (the warehouse bucket) and the
//! session policy, so an engine never holds more than one table's prefix and never holds a
//! long-lived key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::error::{IcebergError, IcebergResult};

/// The IAM role the endpoint assumes to vend credentials (deployment setting). Unset: no
/// vending; engines then need their own storage access.
pub const ROLE_ARN_ENV: &str = "FLOTILLA_ICEBERG_VENDING_ROLE_ARN";
/// Lifetime of vended credentials in seconds (900..=43200, capped by the role's maximum
/// session duration). Default [`DEFAULT_DURATION_SECS`].
pub const DURATION_ENV: &str = "FLOTILLA_ICEBERG_VENDING_DURATION_SECS";
/// The S3 endpoint engines should use (an S3-compatible store such as moto or MinIO); the
/// same variable the host's own warehouse stores read. Unset on AWS.
pub const S3_ENDPOINT_ENV: &str = "FLOTILLA_S3_ENDPOINT";
pub const DEFAULT_DURATION_SECS: u32 = 3600;

/// What the vended credentials may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read, write and delete objects below the prefix (the engine commits through the
    /// catalog; the credentials only reach the table's files).
    ReadWrite,
    /// Read and list only: relations an overlay manages, and callers whose grants allow
    /// reading but not writing the table.
    ReadOnly,
}

/// Short-lived credentials scoped to one table location.
#[derive(Clone)]
pub struct Vended {
    /// The location prefix the credentials are limited to.
    pub prefix: String,
    /// Engine configuration keys (`s3.access-key-id`, `s3.secret-access-key`,
    /// `s3.session-token`, ...). Never logged.
    pub config: BTreeMap<String, String>,
    /// When the credentials expire.
    pub expires_at: Option<SystemTime>,
}

impl std::fmt::Debug for Vended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vended")
            .field("prefix", &self.prefix)
            .field("config", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

#[async_trait::async_trait]
pub trait Vending: Send + Sync + 'static {
    /// Credentials for `location` (an `s3://` table root), or `None` when this vendor does
    /// not serve that location. `fresh`: never answer cached credentials (the renewal
    /// route).
    async fn vend(
        &self,
        location: &str,
        access: Access,
        fresh: bool,
    ) -> IcebergResult<Option<Vended>>;

    /// Non-secret client settings for `s3://` warehouses (`s3.endpoint`,
    /// `s3.path-style-access`, `s3.region`), answered in `config` and in every load result.
    fn client_config(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

/// Whether the client asked for vended credentials.
pub fn wants_vended(headers: &HeaderMap) -> bool {
    headers
        .get_all("x-iceberg-access-delegation")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case("vended-credentials"))
}

/// The `config` and `storage-credentials` members of a load result. `client` (endpoint
/// settings) goes into both, so that engines that build their storage client from the
/// credential alone (DuckDB) reach the same endpoint.
pub fn render(client: &BTreeMap<String, String>, vended: Option<&Vended>) -> (Value, Value) {
    match vended {
        None => (json!(client), json!([])),
        Some(v) => {
            let mut config = client.clone();
            config.extend(v.config.iter().map(|(k, v)| (k.clone(), v.clone())));
            (
                json!(config),
                json!([{"prefix": v.prefix, "config": config}]),
            )
        }
    }
}

/// The vendor a host configured through the environment, if any: [`StsVending`] when
/// [`ROLE_ARN_ENV`] names a role.
pub fn from_env() -> Option<std::sync::Arc<dyn Vending>> {
    let role = std::env::var(ROLE_ARN_ENV).ok()?;
    let role = role.trim();
    if role.is_empty() {
        return None;
    }
    let duration = std::env::var(DURATION_ENV)
        .ok()
        .and_then(|d| d.trim().parse::<u32>().ok())
        .unwrap_or(DEFAULT_DURATION_SECS);
    let endpoint = std::env::var(S3_ENDPOINT_ENV)
        .ok()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty());
    match StsVending::new(role, duration, endpoint) {
        Ok(v) => Some(std::sync::Arc::new(v)),
        Err(e) => {
            // A misconfigured role is a deployment error: say so once, vend nothing.
            tracing::error!(error = %e.message, "iceberg credential vending disabled");
            None
        }
    }
}

// ---- STS ------------------------------------------------------------------------------

/// `s3://bucket/key/prefix/` split into the bucket and the key prefix (with its trailing
/// `/`, so that `t1/` never covers `t10/`).
pub fn split_s3(location: &str) -> Option<(&str, String)> {
    let rest = location.strip_prefix("s3://")?;
    let (bucket, key) = rest.split_once('/')?;
    let key = key.trim_end_matches('/');
    if bucket.is_empty() || key.is_empty() {
        return None;
    }
    Some((bucket, format!("{key}/")))
}

/// The session policy for one table prefix: objects below it (read, or read/write/delete),
/// and `ListBucket` only with that prefix. `GetBucketLocation` lets clients find the region.
pub fn session_policy(bucket: &str, key_prefix: &str, access: Access) -> Value {
    let mut object_actions = vec!["s3:GetObject", "s3:GetObjectVersion"];
    if access == Access::ReadWrite {
        object_actions.extend([
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:ListMultipartUploadParts",
        ]);
    }
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": object_actions,
                "Resource": [format!("arn:aws:s3:::{bucket}/{key_prefix}*")],
            },
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [format!("arn:aws:s3:::{bucket}")],
                "Condition": {"StringLike": {"s3:prefix": [
                    format!("{key_prefix}*"),
                    key_prefix.trim_end_matches('/'),
                ]}},
            },
            {
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation"],
                "Resource": [format!("arn:aws:s3:::{bucket}")],
            },
        ],
    })
}

/// STS caps a packed session policy at 2048 characters.
const MAX_SESSION_POLICY: usize = 2048;

struct CacheEntry {
    vended: Vended,
    renew_at: SystemTime,
}

/// Vends by `AssumeRole` of one deployment role, narrowed per table by a session policy.
/// Credentials are cached per (prefix, access) and reused until half their lifetime is
/// gone, so an engine that reloads a table often costs no STS call each time; the
/// credentials route always assumes afresh.
pub struct StsVending {
    role_arn: String,
    duration_secs: u32,
    client_config: BTreeMap<String, String>,
    sdk: OnceCell<aws_sdk_sts::Client>,
    region: OnceCell<String>,
    cache: Mutex<HashMap<(String, Access), CacheEntry>>,
    sts_calls: AtomicU64,
}

impl std::fmt::Debug for StsVending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StsVending")
            .field("role_arn", &self.role_arn)
            .field("duration_secs", &self.duration_secs)
            .finish_non_exhaustive()
    }
}

impl StsVending {
    /// A vendor assuming `role_arn` with the host's own AWS identity (the SDK's default
    /// chain; `AWS_ENDPOINT_URL_STS` reaches a non-AWS STS such as moto). `s3_endpoint`: the
    /// S3-compatible endpoint engines are told to use (path-style), if not AWS.
    pub fn new(
        role_arn: &str,
        duration_secs: u32,
        s3_endpoint: Option<String>,
    ) -> IcebergResult<Self> {
        if !role_arn.starts_with("arn:") || !role_arn.contains(":role/") {
            return Err(IcebergError::internal(format!(
                "{ROLE_ARN_ENV} must be an IAM role ARN"
            )));
        }
        let mut client_config = BTreeMap::new();
        if let Some(e) = s3_endpoint {
            client_config.insert("s3.endpoint".to_owned(), e);
            client_config.insert("s3.path-style-access".to_owned(), "true".to_owned());
        }
        Ok(Self {
            role_arn: role_arn.to_owned(),
            duration_secs: duration_secs.clamp(900, 43_200),
            client_config,
            sdk: OnceCell::new(),
            region: OnceCell::new(),
            cache: Mutex::new(HashMap::new()),
            sts_calls: AtomicU64::new(0),
        })
    }

    /// How many times STS was asked (tests prove caching and renewal with it).
    pub fn sts_calls(&self) -> u64 {
        self.sts_calls.load(Ordering::Relaxed)
    }

    async fn client(&self) -> &aws_sdk_sts::Client {
        self.sdk
            .get_or_init(|| async {
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .load()
                    .await;
                let region = sdk
                    .region()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "us-east-1".to_owned());
                let _ = self.region.set(region.clone());
                let mut conf = aws_sdk_sts::config::Builder::from(&sdk);
                if sdk.region().is_none() {
                    conf = conf.region(aws_sdk_sts::config::Region::new(region));
                }
                aws_sdk_sts::Client::from_conf(conf.build())
            })
            .await
    }

    fn cached(&self, key: &(String, Access), now: SystemTime) -> Option<Vended> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(key)
            .filter(|e| e.renew_at > now)
            .map(|e| e.vended.clone())
    }

    async fn assume(&self, location: &str, access: Access) -> IcebergResult<Option<Vended>> {
        let Some((bucket, key_prefix)) = split_s3(location) else {
            return Ok(None);
        };
        let policy = session_policy(bucket, &key_prefix, access).to_string();
        if policy.len() > MAX_SESSION_POLICY {
            return Err(IcebergError::bad_request(
                "the table location is too long to scope credentials to it",
            ));
        }
        let client = self.client().await;
        self.sts_calls.fetch_add(1, Ordering::Relaxed);
        let out = client
            .assume_role()
            .role_arn(&self.role_arn)
            .role_session_name(format!(
                "flotilla-iceberg-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..16]
            ))
            .policy(policy)
            .duration_seconds(i32::try_from(self.duration_secs).unwrap_or(3600))
            .send()
            .await
            .map_err(|e| {
                IcebergError::unavailable(format!(
                    "STS AssumeRole for credential vending failed: {}",
                    aws_sdk_sts::error::DisplayErrorContext(&e)
                ))
            })?;
        let c = out.credentials().ok_or_else(|| {
            IcebergError::unavailable("STS answered AssumeRole without credentials")
        })?;
        let expires_at = SystemTime::try_from(*c.expiration()).ok();
        let mut config = self.client_config.clone();
        config.insert("s3.access-key-id".to_owned(), c.access_key_id().to_owned());
        config.insert(
            "s3.secret-access-key".to_owned(),
            c.secret_access_key().to_owned(),
        );
        config.insert("s3.session-token".to_owned(), c.session_token().to_owned());
        if let Some(region) = self.region.get() {
            config.insert("s3.region".to_owned(), region.clone());
            config.insert("client.region".to_owned(), region.clone());
        }
        if let Some(at) = expires_at
            && let Ok(ms) = at.duration_since(UNIX_EPOCH)
        {
            config.insert(
                "s3.session-token-expires-at-ms".to_owned(),
                ms.as_millis().to_string(),
            );
        }
        Ok(Some(Vended {
            prefix: format!("s3://{bucket}/{key_prefix}"),
            config,
            expires_at,
        }))
    }
}

#[async_trait::async_trait]
impl Vending for StsVending {
    async fn vend(
        &self,
        location: &str,
        access: Access,
        fresh: bool,
    ) -> IcebergResult<Option<Vended>> {
        let key = (location.trim_end_matches('/').to_owned(), access);
        let now = SystemTime::now();
        if !fresh && let Some(v) = self.cached(&key, now) {
            return Ok(Some(v));
        }
        let vended = self.assume(location, access).await?;
        if let Some(v) = &vended {
            let lifetime = v
                .expires_at
                .and_then(|at| at.duration_since(now).ok())
                .unwrap_or_default();
            if let Ok(mut cache) = self.cache.lock() {
                // Bounded: a host serving many tables forgets the oldest state wholesale.
                if cache.len() > 10_000 {
                    cache.clear();
                }
                cache.insert(
                    key,
                    CacheEntry {
                        vended: v.clone(),
                        renew_at: now + lifetime / 2,
                    },
                );
            }
        }
        Ok(vended)
    }

    fn client_config(&self) -> BTreeMap<String, String> {
        let mut c = self.client_config.clone();
        if let Some(region) = self.region.get() {
            c.insert("s3.region".to_owned(), region.clone());
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_into_bucket_and_a_slash_terminated_prefix() {
        assert_eq!(
            split_s3("s3://b/acme/lake/ns/t1"),
            Some(("b", "acme/lake/ns/t1/".to_owned()))
        );
        assert_eq!(
            split_s3("s3://b/acme/t/"),
            Some(("b", "acme/t/".to_owned()))
        );
        assert_eq!(split_s3("s3://b/"), None);
        assert_eq!(split_s3("file:///x/y"), None);
    }

    #[test]
    fn the_session_policy_reaches_only_the_table_prefix() {
        let p = session_policy("bucket", "acme/lake/ns/t1/", Access::ReadWrite);
        let s = &p["Statement"];
        assert_eq!(
            s[0]["Resource"],
            json!(["arn:aws:s3:::bucket/acme/lake/ns/t1/*"])
        );
        assert!(
            s[0]["Action"]
                .as_array()
                .unwrap()
                .contains(&json!("s3:PutObject"))
        );
        assert_eq!(s[1]["Action"], json!(["s3:ListBucket"]));
        assert_eq!(
            s[1]["Condition"]["StringLike"]["s3:prefix"],
            json!(["acme/lake/ns/t1/*", "acme/lake/ns/t1"])
        );
        // Nothing grants a bucket-wide object action.
        for st in s.as_array().unwrap() {
            for r in st["Resource"].as_array().unwrap() {
                let r = r.as_str().unwrap();
                assert!(
                    r == "arn:aws:s3:::bucket"
                        || r.starts_with("arn:aws:s3:::bucket/acme/lake/ns/t1/"),
                    "{r}"
                );
            }
        }
        let ro = session_policy("bucket", "acme/t/", Access::ReadOnly);
        let actions = ro["Statement"][0]["Action"].as_array().unwrap();
        assert!(!actions.contains(&json!("s3:PutObject")));
        assert!(!actions.contains(&json!("s3:DeleteObject")));
    }

    #[test]
    fn only_role_arns_configure_a_vendor() {
        assert!(StsVending::new("not-an-arn", 3600, None).is_err());
        let v = StsVending::new(
            "arn:aws:iam::123456789012:role/vend",
            60,
            Some("http://127.0.0.1:5000".into()),
        )
        .unwrap();
        assert_eq!(v.duration_secs, 900);
        assert_eq!(v.client_config()["s3.endpoint"], "http://127.0.0.1:5000");
        assert_eq!(v.client_config()["s3.path-style-access"], "true");
    }
}
