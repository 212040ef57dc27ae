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

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use flotilla_services::service::access_control::principals::{self, Exchanged};
use flotilla_services::state::AppState;
use serde_json::json;

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
    exchange_verified(&state, &creds).await
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
