//! Vended storage credentials: the per-table cache entry, the renewal request, and the
//! choice of a credential from `storage-credentials` and `config`.

use super::EP_CREDENTIALS;
use super::client::IcebergRestClient;
use super::parsing::{
    as_object, get_field, metadata_object, opt_str, reject_variant, req_str, string_map,
};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::{CatalogAccessError, Result, VendingErrorKind};
use crate::spi::{
    SecretString, StorageCredential, UpstreamNamespace, VendedCredentials, is_secret_key,
    location_has_prefix,
};

#[derive(Debug, Clone)]
pub(super) struct CachedVend {
    pub(super) location: Option<String>,
    pub(super) credentials: VendedCredentials,
}

impl IcebergRestClient {
    pub(super) async fn vend_fresh(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
        previous: Option<&CachedVend>,
    ) -> Result<CachedVend> {
        let now = self.clock.now();
        if let Some(prev) = previous
            && self.settings().await?.supports(EP_CREDENTIALS)
        {
            let ns = self.encode_namespace(namespace).await?;
            let url = self
                .catalog_url(&["namespaces", &ns, "tables", name, "credentials"])
                .await?;
            let response = self.get(url, &[]).await?;
            let body = response.ok_json("load credentials")?;
            let obj = as_object(&body, "<credentials>")?;
            let entries =
                match obj.get("storage-credentials") {
                    Some(v) => parse_storage_credentials(v)?,
                    None => {
                        return Err(reject_variant(obj, "storage-credentials").unwrap_or_else(
                            || CatalogAccessError::protocol("storage-credentials", "missing"),
                        ));
                    }
                };
            // An empty answer renews nothing: reload the table instead (same protocol,
            // same catalog authentication; not a fallback to other credentials).
            if !entries.is_empty() {
                let credentials = select_vended_credentials(
                    prev.location.as_deref(),
                    &entries,
                    &BTreeMap::new(),
                    false,
                    now,
                )?;
                return Ok(CachedVend {
                    location: prev.location.clone(),
                    credentials,
                });
            }
        }
        let response = self.load_table_raw(namespace, name, None, true).await?;
        let body = response.json_value()?;
        let result = as_object(&body, "<load table result>")?;
        let metadata = metadata_object(result)?;
        let location = opt_str(metadata, "location", "metadata.location")?.map(str::to_owned);
        let config = string_map(result.get("config"), "config")?;
        let entries = match get_field(result, "storage-credentials", "storage-credentials")? {
            Some(v) => parse_storage_credentials(v)?,
            None => Vec::new(),
        };
        let remote_signing = result
            .get("remote-signing-config")
            .is_some_and(|v| !v.is_null());
        let credentials =
            select_vended_credentials(location.as_deref(), &entries, &config, remote_signing, now)?;
        Ok(CachedVend {
            location,
            credentials,
        })
    }
}

pub(super) fn parse_storage_credentials(
    v: &Value,
) -> Result<Vec<(String, BTreeMap<String, String>)>> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => {
            return Err(CatalogAccessError::protocol(
                "storage-credentials",
                "expected an array",
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("storage-credentials[{i}]");
        let obj = as_object(item, &field)?;
        let prefix = req_str(obj, "prefix", &format!("{field}.prefix"))?.to_owned();
        let config = match obj.get("config") {
            Some(c) => string_map(Some(c), &format!("{field}.config"))?,
            None => {
                return Err(CatalogAccessError::protocol(
                    format!("{field}.config"),
                    "missing",
                ));
            }
        };
        out.push((prefix, config));
    }
    Ok(out)
}

pub(super) const REMOTE_SIGNING_KEYS: &[&str] = &[
    "s3.signer.uri",
    "s3.signer.endpoint",
    "signer.uri",
    "signer.endpoint",
];

pub(super) fn parse_expiry_ms(
    config: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<SystemTime>> {
    match config.get(key) {
        None => Ok(None),
        Some(v) => {
            let ms: u64 = v
                .trim()
                .parse()
                .map_err(|_| CatalogAccessError::protocol(key, "expected epoch milliseconds"))?;
            Ok(Some(UNIX_EPOCH + Duration::from_millis(ms)))
        }
    }
}

pub(super) fn non_empty(config: &BTreeMap<String, String>, key: &str) -> Option<SecretString> {
    config
        .get(key)
        .filter(|v| !v.trim().is_empty())
        .map(|v| SecretString::new(v.clone()))
}

/// Reads one storage credential out of a config map; `Ok(None)` when it holds none.
pub(super) fn credential_from_config(
    config: &BTreeMap<String, String>,
) -> Result<Option<(StorageCredential, Option<SystemTime>)>> {
    let key = non_empty(config, "s3.access-key-id");
    let secret = non_empty(config, "s3.secret-access-key");
    let session = non_empty(config, "s3.session-token");
    let s3_expiry = parse_expiry_ms(config, "s3.session-token-expires-at-ms")?;
    if key.is_some() || secret.is_some() || session.is_some() {
        let Some(access_key_id) = key else {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials lack s3.access-key-id",
            ));
        };
        let Some(secret_access_key) = secret else {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials lack s3.secret-access-key",
            ));
        };
        if s3_expiry.is_some() && session.is_none() {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials state an expiry but lack s3.session-token",
            ));
        }
        return Ok(Some((
            StorageCredential::S3 {
                access_key_id,
                secret_access_key,
                session_token: session,
            },
            s3_expiry,
        )));
    }
    if let Some(token) = non_empty(config, "gcs.oauth2.token") {
        let expiry = parse_expiry_ms(config, "gcs.oauth2.token-expires-at")?;
        return Ok(Some((StorageCredential::GcsOauthToken { token }, expiry)));
    }
    if let Some((k, v)) = config
        .iter()
        .find(|(k, v)| k.starts_with("adls.sas-token.") && !v.trim().is_empty())
    {
        let account = &k["adls.sas-token.".len()..];
        let expiry = parse_expiry_ms(config, &format!("adls.sas-token-expires-at-ms.{account}"))?;
        return Ok(Some((
            StorageCredential::AzureSas {
                sas_token: SecretString::new(v.clone()),
            },
            expiry,
        )));
    }
    Ok(None)
}

pub(super) fn settings_from(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    config
        .iter()
        .filter(|(k, _)| !is_secret_key(k) && !k.contains("expires-at"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Chooses the vended credential for a table at `location` (spec, `LoadTableResult`):
/// `storage-credentials` first, by longest prefix covering the location, then `config`.
/// Remote signing without keys is "vending unsupported"; incomplete or already expired
/// credentials are refused.
pub fn select_vended_credentials(
    location: Option<&str>,
    storage_credentials: &[(String, BTreeMap<String, String>)],
    config: &BTreeMap<String, String>,
    remote_signing_config: bool,
    now: SystemTime,
) -> Result<VendedCredentials> {
    let (prefix, chosen) = if storage_credentials.is_empty() {
        (None, config)
    } else {
        let best = match location {
            Some(loc) => storage_credentials
                .iter()
                .filter(|(p, _)| location_has_prefix(loc, p))
                .max_by_key(|(p, _)| p.trim_end_matches('/').len()),
            None if storage_credentials.len() == 1 => storage_credentials.first(),
            None => None,
        };
        match best {
            Some((p, c)) => (Some(p.clone()), c),
            None => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Scope,
                    "no vended storage credential covers the table location",
                ));
            }
        }
    };
    let Some((credential, expires_at)) = credential_from_config(chosen)? else {
        let remote = remote_signing_config
            || config
                .get("s3.remote-signing-enabled")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || REMOTE_SIGNING_KEYS.iter().any(|k| config.contains_key(*k));
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Unsupported,
            if remote {
                "the catalog offers remote signing only; it vended no storage credentials"
            } else {
                "the catalog vended no storage credentials for this table"
            },
        ));
    };
    if expires_at.is_some_and(|at| at <= now) {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Expired,
            "the catalog vended storage credentials that have already expired",
        ));
    }
    let mut settings = settings_from(config);
    settings.extend(settings_from(chosen));
    let credentials = VendedCredentials {
        prefix,
        credential,
        expires_at,
        settings,
    };
    if let Some(loc) = location
        && !credentials.covers(loc)
    {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Scope,
            "vended storage credentials do not cover the table location",
        ));
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn s3(key: &str) -> BTreeMap<String, String> {
        map(&[
            ("s3.access-key-id", key),
            ("s3.secret-access-key", "secret"),
            ("s3.session-token", "tok"),
        ])
    }

    fn key_of(c: &VendedCredentials) -> String {
        match &c.credential {
            StorageCredential::S3 { access_key_id, .. } => access_key_id.expose().to_owned(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn storage_credentials_win_by_longest_prefix() {
        let entries = vec![
            ("s3://b/".to_owned(), s3("short")),
            ("s3://b/wh/ns/t".to_owned(), s3("long")),
            ("s3://b/wh".to_owned(), s3("mid")),
            ("s3://b/wh/ns/t2".to_owned(), s3("other")),
        ];
        let c = select_vended_credentials(
            Some("s3://b/wh/ns/t"),
            &entries,
            &s3("config"),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "long");
        assert_eq!(c.prefix.as_deref(), Some("s3://b/wh/ns/t"));
        let c = select_vended_credentials(
            Some("s3://b/wh/other"),
            &entries,
            &BTreeMap::new(),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "mid");
    }

    #[test]
    fn config_is_used_when_no_storage_credentials() {
        let c = select_vended_credentials(
            Some("s3://b/t"),
            &[],
            &s3("config"),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "config");
    }

    #[test]
    fn incomplete_expired_scope_and_remote_signing_are_refused() {
        let now = SystemTime::now();
        let kind = |r: Result<VendedCredentials>| match r {
            Err(CatalogAccessError::CredentialVending { kind, .. }) => kind,
            other => panic!("expected vending error, got {other:?}"),
        };
        let no_secret = map(&[("s3.access-key-id", "k")]);
        assert_eq!(
            kind(select_vended_credentials(None, &[], &no_secret, false, now)),
            VendingErrorKind::Incomplete
        );
        let no_session = map(&[
            ("s3.access-key-id", "k"),
            ("s3.secret-access-key", "s"),
            ("s3.session-token-expires-at-ms", "99999999999999"),
        ]);
        assert_eq!(
            kind(select_vended_credentials(
                None,
                &[],
                &no_session,
                false,
                now
            )),
            VendingErrorKind::Incomplete
        );
        let mut expired = s3("k");
        expired.insert("s3.session-token-expires-at-ms".into(), "1000".into());
        assert_eq!(
            kind(select_vended_credentials(None, &[], &expired, false, now)),
            VendingErrorKind::Expired
        );
        let remote = map(&[("s3.signer.uri", "https://signer"), ("s3.endpoint", "x")]);
        let e = select_vended_credentials(None, &[], &remote, false, now).unwrap_err();
        assert!(e.to_string().contains("remote signing"), "{e}");
        let entries = vec![("s3://other/".to_owned(), s3("k"))];
        assert_eq!(
            kind(select_vended_credentials(
                Some("s3://b/t"),
                &entries,
                &BTreeMap::new(),
                false,
                now
            )),
            VendingErrorKind::Scope
        );
        assert_eq!(
            kind(select_vended_credentials(
                None,
                &[],
                &BTreeMap::new(),
                false,
                now
            )),
            VendingErrorKind::Unsupported
        );
    }
}
