//! `POST /iceberg/v1/oauth/tokens`: the OAuth2 client-credentials exchange that engines
//! configured with a `credential` (pyiceberg, Spark, Trino) or an OAuth2 secret (DuckDB) call
//! before anything else.
//!
//! Who can answer it depends on who verifies tokens:
//! - `flotilla serve` verifies Flotilla tokens itself, so the client secret is a Flotilla
//!   token and the access token is that same token ([`TokenExchange::Verify`]).
//! - Behind API Gateway the JWT authorizer verifies every other route against the identity
//!   provider, and this function never sees a secret it could check. The route is public
//!   there and the exchange is relayed to the identity provider's token endpoint
//!   ([`TokenExchange::Relay`]): the client credentials are an app client of that provider,
//!   and the access token the engine gets back is a JWT the authorizer accepts.
//!
//! Secrets are never logged, echoed in an error, or forwarded anywhere but the configured
//! token endpoint.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::Engine;
use flotilla_services::state::AppState;
use serde_json::{Value, json};

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

/// What the engine sent: from the form, else the secret from HTTP Basic (as DuckDB sends it).
struct ClientCredentials {
    id: Option<String>,
    secret: String,
    scope: Option<String>,
}

impl ClientCredentials {
    fn from_request(form: &BTreeMap<String, String>, headers: &HeaderMap) -> Option<Self> {
        let basic = headers
            .get(AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| {
                h.strip_prefix("Basic ")
                    .or_else(|| h.strip_prefix("basic "))
            })
            .and_then(|b64| {
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok()
            })
            .and_then(|raw| String::from_utf8(raw).ok())
            .and_then(|text| {
                let (id, secret) = text.split_once(':')?;
                Some((form_decode(id), form_decode(secret)))
            });
        let (basic_id, basic_secret) = basic.unzip();
        let secret = form
            .get("client_secret")
            .cloned()
            .or(basic_secret)
            .filter(|s| !s.is_empty())?;
        Some(Self {
            id: form.get("client_id").cloned().or(basic_id),
            secret,
            scope: form.get("scope").cloned().filter(|s| !s.is_empty()),
        })
    }
}

/// `POST /iceberg/v1/oauth/tokens` (client credentials only).
pub async fn oauth_tokens(
    State(state): State<AppState>,
    Extension(exchange): Extension<Arc<TokenExchange>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {}
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only grant_type=client_credentials is supported",
            );
        }
        None => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type is required",
            );
        }
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
    match exchange.as_ref() {
        TokenExchange::Relay(relay) => relay.exchange(&creds).await,
        TokenExchange::Verify | TokenExchange::Unconfigured => verify(&state, &creds.secret),
    }
}

/// The access token is the credential itself: it authenticates as the same principal on
/// every route, so the exchange grants nothing the client did not already hold.
fn verify(state: &AppState, secret: &str) -> Response {
    if state.auth.authenticate(secret).is_none() {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the client credentials are not valid",
        );
    }
    no_store(
        Json(json!({
            "access_token": secret,
            "token_type": "bearer",
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "expires_in": 3600,
        }))
        .into_response(),
    )
}

fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut()
        .entry(CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("application/json"));
    resp
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    no_store(
        (
            status,
            Json(json!({"error": error, "error_description": description})),
        )
            .into_response(),
    )
}

/// Basic credentials are form-encoded before base64 (RFC 6749 section 2.3.1).
fn form_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
