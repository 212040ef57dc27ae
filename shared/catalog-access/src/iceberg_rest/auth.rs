//! Authentication: OAuth2 client credentials (cached, refreshed before expiry and once
//! on a 401/419), bearer tokens, and SigV4 (keys renewed once on a 401/403).

use super::TOKEN_REFRESH_MARGIN;
use super::client::IcebergRestClient;
use super::parsing::as_object;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::Method;
use serde_json::Value;
use tokio::sync::Mutex;
use url::Url;

use crate::error::{BoundedText, CatalogAccessError, Result};
use crate::http::{HttpResponse, RetryMode, classify_status};
use crate::sigv4::{AwsCredentialSource, AwsCredentials, SigV4Signer, StaticAwsCredentials};
use crate::spi::{CatalogAuthentication, ResolvedCatalogCredentials, SecretString, is_secret_key};

#[derive(Debug, Clone)]
pub(super) struct CachedToken {
    pub(super) value: SecretString,
    pub(super) refresh_at: Option<SystemTime>,
}

#[derive(Debug)]
pub(super) struct OAuthState {
    pub(super) token_uri: Url,
    pub(super) client_id: String,
    pub(super) client_secret: SecretString,
    pub(super) scopes: Vec<String>,
    /// Held across the token request: one refresh at a time, the others wait and reuse it.
    pub(super) token: Mutex<Option<CachedToken>>,
}

#[derive(Debug)]
pub(super) enum AuthScheme {
    OAuth(Box<OAuthState>),
    Bearer(SecretString),
    SigV4(SigV4Signer),
}

impl IcebergRestClient {
    /// Sends an authenticated GET; on 401/419 with OAuth, refreshes the token once and
    /// retries once (another task may already have refreshed it). With SigV4 keys from a
    /// renewable source (an assumed role, the ambient chain), a 401/403 renews the keys once
    /// and retries once; static keys are not retried.
    pub(super) async fn get(
        &self,
        url: Url,
        headers: &[(&'static str, String)],
    ) -> Result<HttpResponse> {
        let mut retried_auth = false;
        loop {
            let mut builder = self
                .http
                .request(Method::GET, url.clone())
                .header(reqwest::header::ACCEPT, "application/json")
                .headers(self.extra_headers.clone());
            for (k, v) in headers {
                builder = builder.header(*k, v.as_str());
            }
            let used_token = match &self.auth {
                AuthScheme::OAuth(o) => {
                    let t = self.oauth_token(o, None).await?;
                    builder = builder.bearer_auth(t.expose());
                    Some(t)
                }
                AuthScheme::Bearer(t) => {
                    builder = builder.bearer_auth(t.expose());
                    None
                }
                AuthScheme::SigV4(_) => None,
            };
            let mut request = builder.build().map_err(|e| {
                CatalogAccessError::config(format!("cannot build request: {}", e.without_url()))
            })?;
            let mut used_keys: Option<AwsCredentials> = None;
            if let AuthScheme::SigV4(signer) = &self.auth {
                used_keys = Some(signer.sign(&mut request, self.clock.now()).await?);
            }
            let response = self
                .http
                .execute(request, RetryMode::IdempotentRead)
                .await?;
            if matches!(response.status, 401 | 419)
                && !retried_auth
                && let (AuthScheme::OAuth(o), Some(stale)) = (&self.auth, used_token)
            {
                retried_auth = true;
                self.oauth_token(o, Some(&stale)).await?;
                continue;
            }
            if matches!(response.status, 401 | 403)
                && !retried_auth
                && let (AuthScheme::SigV4(signer), Some(keys)) = (&self.auth, used_keys)
                && signer.source().invalidate(&keys).await
            {
                retried_auth = true;
                continue;
            }
            return Ok(response);
        }
    }

    /// The current token, fetching a new one when there is none, it is due for refresh, or
    /// it equals `stale` (the upstream just refused it).
    pub(super) async fn oauth_token(
        &self,
        oauth: &OAuthState,
        stale: Option<&SecretString>,
    ) -> Result<SecretString> {
        let mut guard = oauth.token.lock().await;
        let now = self.clock.now();
        if let Some(current) = guard.as_ref() {
            let due = current.refresh_at.is_some_and(|at| now >= at);
            let refused = stale.is_some_and(|s| s == &current.value);
            if !due && !refused {
                return Ok(current.value.clone());
            }
        }
        let fresh = self.fetch_token(oauth, now).await?;
        let value = fresh.value.clone();
        *guard = Some(fresh);
        Ok(value)
    }

    pub(super) async fn fetch_token(
        &self,
        oauth: &OAuthState,
        now: SystemTime,
    ) -> Result<CachedToken> {
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", "client_credentials"),
            ("client_id", oauth.client_id.as_str()),
            ("client_secret", oauth.client_secret.expose()),
        ];
        let scope = oauth.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", scope.as_str()));
        }
        let request = self
            .http
            .request(Method::POST, oauth.token_uri.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .build()
            .map_err(|_| CatalogAccessError::config("cannot build the token request"))?;
        let response = self.http.execute(request, RetryMode::Once).await?;
        match response.status {
            200 => {}
            400 | 401 | 403 => {
                // OAuth error bodies name the error (`invalid_client`); the description is
                // upstream text and goes through the scrubber.
                return Err(CatalogAccessError::Authentication {
                    status: Some(response.status),
                    detail: BoundedText::new(&format!(
                        "token endpoint refused the client credentials: {}",
                        response.upstream_message()
                    )),
                });
            }
            _ => return Err(classify_status(&response, "token endpoint")),
        }
        let body = response.json_value()?;
        let obj = as_object(&body, "<token response>")?;
        let token = match obj.get("access_token") {
            Some(Value::String(s)) if !s.is_empty() => SecretString::new(s.clone()),
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "access_token",
                    "expected a non-empty string",
                ));
            }
            None => {
                return Err(CatalogAccessError::protocol("access_token", "missing"));
            }
        };
        match obj.get("token_type") {
            Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
            Some(Value::String(t)) if t.eq_ignore_ascii_case("N_A") => {}
            Some(Value::String(_)) => {
                return Err(CatalogAccessError::protocol(
                    "token_type",
                    "only bearer tokens are supported",
                ));
            }
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "token_type",
                    "expected a string",
                ));
            }
            None => return Err(CatalogAccessError::protocol("token_type", "missing")),
        }
        let refresh_at = match obj.get("expires_in") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let secs = n.as_u64().ok_or_else(|| {
                    CatalogAccessError::protocol("expires_in", "expected a non-negative integer")
                })?;
                let lifetime = Duration::from_secs(secs);
                let margin = TOKEN_REFRESH_MARGIN.min(lifetime / 2);
                Some(now + lifetime - margin)
            }
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "expires_in",
                    "expected an integer number of seconds",
                ));
            }
        };
        Ok(CachedToken {
            value: token,
            refresh_at,
        })
    }
}

pub(super) fn build_auth(
    auth: &CatalogAuthentication,
    credentials: ResolvedCatalogCredentials,
) -> Result<AuthScheme> {
    match (auth, credentials) {
        (
            CatalogAuthentication::OauthClientCredentials {
                token_uri,
                client_id,
                scopes,
            },
            ResolvedCatalogCredentials::ClientSecret(secret),
        ) => {
            let token_uri = Url::parse(token_uri)
                .map_err(|_| CatalogAccessError::config("OAuth token_uri is not a URL"))?;
            if !token_uri.username().is_empty()
                || token_uri.password().is_some()
                || token_uri.fragment().is_some()
                || token_uri.query_pairs().any(|(k, _)| is_secret_key(&k))
            {
                return Err(CatalogAccessError::config(
                    "OAuth token_uri must not carry user-info, a fragment or secret parameters",
                ));
            }
            if client_id.trim().is_empty() || secret.is_empty() {
                return Err(CatalogAccessError::config(
                    "OAuth client credentials need a client id and a client secret",
                ));
            }
            Ok(AuthScheme::OAuth(Box::new(OAuthState {
                token_uri,
                client_id: client_id.clone(),
                client_secret: secret,
                scopes: scopes.clone(),
                token: Mutex::new(None),
            })))
        }
        (CatalogAuthentication::Bearer, ResolvedCatalogCredentials::Token(token)) => {
            if token.is_empty() {
                return Err(CatalogAccessError::config("bearer token is empty"));
            }
            Ok(AuthScheme::Bearer(token))
        }
        (
            CatalogAuthentication::AwsSigV4 {
                region,
                signing_name,
            },
            creds @ (ResolvedCatalogCredentials::AwsAccessKeys { .. }
            | ResolvedCatalogCredentials::AwsSource(_)),
        ) => {
            if region.trim().is_empty() || signing_name.trim().is_empty() {
                return Err(CatalogAccessError::config(
                    "SigV4 needs a region and a signing name",
                ));
            }
            let source: Arc<dyn AwsCredentialSource> = match creds {
                ResolvedCatalogCredentials::AwsAccessKeys {
                    access_key_id,
                    secret_access_key,
                    session_token,
                } => Arc::new(StaticAwsCredentials::new(
                    access_key_id,
                    secret_access_key,
                    session_token,
                )?),
                ResolvedCatalogCredentials::AwsSource(handle) => handle.0,
                _ => unreachable!("matched above"),
            };
            Ok(AuthScheme::SigV4(SigV4Signer::with_source(
                region.clone(),
                signing_name.clone(),
                source,
            )))
        }
        (
            CatalogAuthentication::AwsAssumeRole { .. }
            | CatalogAuthentication::AwsAccessKeys { .. },
            _,
        ) => Err(CatalogAccessError::unsupported(format!(
            "{} authentication is not wired for Iceberg REST; use AWS_SIGV4 with access keys",
            auth.scheme_name()
        ))),
        (auth, creds) => Err(CatalogAccessError::config(format!(
            "{} authentication needs different credentials than {}",
            auth.scheme_name(),
            creds.kind_name()
        ))),
    }
}
