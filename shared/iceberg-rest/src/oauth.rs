//! `POST /iceberg/v1/oauth/tokens`: the OAuth2 client-credentials exchange that engines
//! configured with a `credential` (pyiceberg, Spark, Trino) or an OAuth2 secret (DuckDB) call
//! before anything else.
//!
//! Who can answer it depends on who verifies tokens:
//! - `flotilla serve` verifies Flotilla tokens itself: the client secret is a Flotilla token
//!   (the access token is that same token) or a service principal's secret (a signed access
//!   token), as on `/v1/oauth/tokens` ([`TokenExchange::Verify`], `flotilla_http::oauth`).
//! - Behind API Gateway the JWT authorizer verifies every other route against the identity
//!   provider, and this function never sees a secret it could check. The route is public
//!   there and the exchange is relayed to the identity provider's token endpoint
//!   ([`TokenExchange::Relay`]): the client credentials are an app client of that provider,
//!   and the access token the engine gets back is a JWT the authorizer accepts.
//!
//! Secrets are never logged, echoed in an error, or forwarded anywhere but the configured
//! token endpoint.
//!
//! Failed exchanges are rate limited per client and source as on `/v1/oauth/tokens`
//! (`flotilla_http::oauth::limited`, one limiter for both doors): `429` with `Retry-After`
//! and the OAuth2 error shape this route answers every refusal in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine;
use flotilla_http::oauth::{
    ClientCredentials, Source, check_grant_type, exchange_verified, limited, no_store, oauth_error,
};
use flotilla_services::state::AppState;
use serde_json::Value;

/// The identity provider's token endpoint the `iceberg` Lambda function relays the exchange
/// to (deployment setting, e.g. a Cognito domain's `/oauth2/token`). Unset: the route tells
/// engines to send a bearer token instead.
pub const TOKEN_URL_ENV: &str = "FLOTILLA_ICEBERG_TOKEN_URL";

/// How long a relayed exchange may take before the engine gets `503`.
const RELAY_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest identity-provider answer relayed (a token answer is a few KB).
const RELAY_MAX_BODY: usize = 64 * 1024;

/// Who answers the token route.
#[derive(Clone, Debug, Default)]
pub enum TokenExchange {
    /// The host verifies Flotilla tokens (`flotilla serve`): the secret is a Flotilla token,
    /// and the access token is the same token, so the exchange grants nothing new.
    #[default]
    Verify,
    /// The exchange is forwarded to the identity provider's token endpoint.
    Relay(Relay),
    /// Nobody can answer: the host trusts an authorizer and no token endpoint is configured.
    Unconfigured,
}

impl TokenExchange {
    /// The Lambda setting: relay to [`TOKEN_URL_ENV`] when it is set, else unconfigured. A
    /// malformed URL is an error, so a bad deployment fails at start rather than per request.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(TOKEN_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Relay::new(url.trim()).map(Self::Relay),
            _ => Ok(Self::Unconfigured),
        }
    }
}

/// A relay to one token endpoint.
#[derive(Clone)]
pub struct Relay {
    url: reqwest::Url,
    http: reqwest::Client,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("url", &self.url.as_str())
            .finish()
    }
}

impl Relay {
    /// A relay to `url`: `https://`, or `http://` to a loopback address (tests, local
    /// identity providers). The client follows no redirects, so credentials reach only `url`.
    pub fn new(url: &str) -> Result<Self, String> {
        let url =
            reqwest::Url::parse(url).map_err(|e| format!("{TOKEN_URL_ENV}: not a URL ({e})"))?;
        let loopback = matches!(
            url.host(),
            Some(url::Host::Ipv4(ip)) if ip.is_loopback()
        ) || matches!(url.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback())
            || url.host_str() == Some("localhost");
        match url.scheme() {
            "https" => {}
            "http" if loopback => {}
            other => {
                return Err(format!(
                    "{TOKEN_URL_ENV}: the token endpoint must be https:// (got {other}://)"
                ));
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "{TOKEN_URL_ENV}: the URL must not carry credentials"
            ));
        }
        let http = reqwest::Client::builder()
            .timeout(RELAY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("{TOKEN_URL_ENV}: HTTP client: {e}"))?;
        Ok(Self { url, http })
    }

    /// Forwards the exchange with the credentials as HTTP Basic (RFC 6749 section 2.3.1,
    /// the method every provider must accept) and answers what the provider answered.
    async fn exchange(&self, creds: &ClientCredentials) -> Response {
        let Some(id) = creds.id.as_deref().filter(|id| !id.is_empty()) else {
            return oauth_error(
                StatusCode::UNAUTHORIZED,
                "invalid_client",
                "client_id is required: it names the identity provider's app client",
            );
        };
        let basic = format!("{}:{}", form_encode(id), form_encode(&creds.secret));
        let basic = base64::engine::general_purpose::STANDARD.encode(basic);
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = creds.scope.as_deref() {
            form.push(("scope", scope));
        }
        let sent = self
            .http
            .post(self.url.clone())
            .header(AUTHORIZATION, format!("Basic {basic}"))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .send()
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(e) => {
                // Without the URL: none of its query is secret, but errors stay lean.
                tracing::warn!(error = %e.without_url(), "oauth relay: the token endpoint did not answer");
                return oauth_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "the identity provider's token endpoint did not answer; retry later",
                );
            }
        };
        let status = answer.status();
        let body = match read_limited(answer).await {
            Some(body) => body,
            None => {
                return oauth_error(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "the identity provider's token answer could not be read",
                );
            }
        };
        let json = serde_json::from_slice::<Value>(&body)
            .ok()
            .filter(Value::is_object);
        match (status.as_u16(), json) {
            // A token, or the provider's OAuth2 error (bad client, bad scope): relayed as is.
            (200 | 400 | 401 | 403, Some(json)) => no_store(
                (
                    StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
                    Json(json),
                )
                    .into_response(),
            ),
            (code, _) => {
                tracing::warn!(
                    status = code,
                    "oauth relay: unexpected token endpoint answer"
                );
                oauth_error(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    &format!("the identity provider's token endpoint answered HTTP {code}"),
                )
            }
        }
    }
}

async fn read_limited(mut answer: reqwest::Response) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.ok()? {
        if body.len() + chunk.len() > RELAY_MAX_BODY {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body)
}

/// `POST /iceberg/v1/oauth/tokens` (client credentials only).
pub async fn oauth_tokens(
    State(state): State<AppState>,
    Extension(exchange): Extension<Arc<TokenExchange>>,
    Source(source): Source,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    if let Some(refusal) = check_grant_type(&form) {
        return refusal;
    }
    if let TokenExchange::Unconfigured = *exchange {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "this deployment has no OAuth2 token exchange: send the identity provider's \
             access token as a bearer token, or point the engine's OAuth2 server URI at the \
             provider's token endpoint",
        );
    }
    let Some(creds) = ClientCredentials::from_request(&form, &headers) else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client credentials are required",
        );
    };
    // The same limiter as `/v1/oauth/tokens`: one budget per client and source in the
    // process, whichever door is knocked on.
    let answer = async {
        match exchange.as_ref() {
            TokenExchange::Relay(relay) => relay.exchange(&creds).await,
            TokenExchange::Verify | TokenExchange::Unconfigured => {
                exchange_verified(&state, &creds).await
            }
        }
    };
    limited(&state, source, &creds, answer).await
}

fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
