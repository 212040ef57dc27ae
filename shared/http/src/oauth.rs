//! The OAuth2 client-credentials exchange of hosts that verify tokens themselves: the `/v1`
//! token route (`POST /v1/oauth/tokens`) and the Iceberg endpoint's
//! (`POST /iceberg/v1/oauth/tokens`) share the credential parsing and the answer, so a
//! limiter or a policy wrapping either route (or [`exchange_verified`]) covers both.
//!
//! Two kinds of credentials are exchanged: a service principal's client id and secret
//! (`flotilla_services::service::access_control::principals::exchange`: a signed access
//! token for an hour), and, as before access control, a Flotilla bearer token given as the
//! client secret (answered as the access token itself: the exchange grants nothing new).
//! Secrets are never logged, echoed in an error or stored.
//!
//! Both routes run their exchange through [`limited`]: failed exchanges are counted per
//! client id and source address, per source address and (looser) per client id
//! (`flotilla_services::token_limit`), and an attempt over any of those limits is answered
//! `429` with `Retry-After` before its secret is checked. The source address is the
//! connection's peer on `flotilla serve` and the address API Gateway saw on AWS
//! ([`SourceAddr`]); a client-supplied `X-Forwarded-For` is never read.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use flotilla_services::service::access_control::principals::{self, Exchanged};
use flotilla_services::state::AppState;
use serde_json::json;

pub use flotilla_services::token_limit::SourceAddr;

/// The extractor of a request's source address: the [`SourceAddr`] the host inserted (the
/// Lambda adapter's), else the connection's peer (`ConnectInfo`, `flotilla serve`); `None`
/// when the host knows neither.
#[derive(Clone, Copy, Debug)]
pub struct Source(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Source {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let ext = &parts.extensions;
        let ip = ext
            .get::<SourceAddr>()
            .map(|s| s.0)
            .or_else(|| {
                ext.get::<ConnectInfo<crate::wire::Peer>>()
                    .map(|c| c.0.0.ip())
            })
            .or_else(|| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
            .map(|ip| ip.to_canonical());
        Ok(Self(ip))
    }
}

/// Runs `exchange` under the token routes' limiter: refused with `429` and `Retry-After`
/// when the client id or the source is over its limit; else its answer, counted as a failure
/// when it refused the credentials (`400`, `401`, `403`).
pub async fn limited(
    state: &AppState,
    source: Option<IpAddr>,
    creds: &ClientCredentials,
    exchange: impl Future<Output = Response>,
) -> Response {
    let limiter = &state.token_limiter;
    let attempt = match limiter.admit(creds.id.as_deref(), source, state.clock.now_ms()) {
        Ok(attempt) => attempt,
        Err(retry_after_secs) => {
            tracing::warn!(
                source = ?source,
                retry_after_secs,
                "oauth: token requests over the failure limit"
            );
            let mut resp = oauth_error(
                StatusCode::TOO_MANY_REQUESTS,
                "slow_down",
                &format!(
                    "too many failed token requests for this client or from this address; \
                     retry in {retry_after_secs} s"
                ),
            );
            resp.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
            // Audited in the client's account (by the request context layer).
            if let Some(id) = &creds.id {
                resp.extensions_mut()
                    .insert(crate::request_context::RefusedClient(id.clone()));
            }
            return resp;
        }
    };
    let resp = exchange.await;
    match resp.status().as_u16() {
        200..=299 => limiter.succeeded(attempt),
        400 | 401 | 403 => limiter.failed(attempt),
        _ => limiter.released(attempt),
    }
    resp
}

/// What the client sent: from the form, else from HTTP Basic (as DuckDB sends it).
pub struct ClientCredentials {
    pub id: Option<String>,
    pub secret: String,
    pub scope: Option<String>,
}

impl ClientCredentials {
    pub fn from_request(form: &BTreeMap<String, String>, headers: &HeaderMap) -> Option<Self> {
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

/// The grant type check every token route starts with: `None` when it is
/// `client_credentials`, else the OAuth2 error to answer.
pub fn check_grant_type(form: &BTreeMap<String, String>) -> Option<Response> {
    match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => None,
        Some(_) => Some(oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only grant_type=client_credentials is supported",
        )),
        None => Some(oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "grant_type is required",
        )),
    }
}

/// The exchange on a host that verifies tokens: a Flotilla token as the secret answers
/// itself; otherwise the client id names a service principal whose secret is checked.
pub async fn exchange_verified(state: &AppState, creds: &ClientCredentials) -> Response {
    if state.authenticate(&creds.secret).is_some() {
        return no_store(
            Json(json!({
                "access_token": creds.secret,
                "token_type": "bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "expires_in": 3600,
            }))
            .into_response(),
        );
    }
    let refused = || {
        oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "the client credentials are not valid",
        )
    };
    let Some(id) = creds.id.as_deref().filter(|id| !id.is_empty()) else {
        return refused();
    };
    match principals::exchange(state, id, &creds.secret).await {
        Ok(Exchanged::Token(v)) => no_store(Json(v).into_response()),
        Ok(Exchanged::Refused {
            status,
            error,
            description,
        }) => oauth_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::UNAUTHORIZED),
            error,
            &description,
        ),
        Err(e) => {
            let (status, _) = crate::error::to_parts(&e);
            oauth_error(
                status,
                "temporarily_unavailable",
                "the token could not be issued; retry later",
            )
        }
    }
}

/// `POST /v1/oauth/tokens` (client credentials, form-encoded or HTTP Basic).
pub async fn oauth_tokens(
    State(state): State<AppState>,
    Source(source): Source,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form: BTreeMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    if let Some(refusal) = check_grant_type(&form) {
        return refusal;
    }
    let Some(creds) = ClientCredentials::from_request(&form, &headers) else {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client credentials are required",
        );
    };
    limited(&state, source, &creds, exchange_verified(&state, &creds)).await
}

pub fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut()
        .entry(CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("application/json"));
    resp
}

pub fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
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
