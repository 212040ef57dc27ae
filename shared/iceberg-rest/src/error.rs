//! Errors in the Iceberg REST error model: `{"error": {"message", "type", "code"}}` with the
//! exception type names engines switch on (`NoSuchTableException`, `CommitFailedException`).
//! A 5xx answer carries only an error id; the detail goes to the log under it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use flotilla_base::error::{Error, ErrorKind};
use serde_json::json;

/// What a `404` from a shared service is about, when its message does not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Namespace,
    Table,
    View,
    Catalog,
}

#[derive(Debug)]
pub struct IcebergError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
}

pub type IcebergResult<T> = Result<T, IcebergError>;

impl IcebergError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestException", message)
    }

    pub fn unauthenticated() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "NotAuthorizedException",
            "a valid bearer token is required",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "ForbiddenException", message)
    }

    pub fn no_such(what: Missing, message: impl Into<String>) -> Self {
        let kind = match what {
            Missing::Namespace => "NoSuchNamespaceException",
            Missing::Table => "NoSuchTableException",
            Missing::View => "NoSuchViewException",
            Missing::Catalog => "NoSuchWarehouseException",
        };
        Self::new(StatusCode::NOT_FOUND, kind, message)
    }

    pub fn commit_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "CommitFailedException", message)
    }

    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "AlreadyExistsException", message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_ACCEPTABLE,
            "UnsupportedOperationException",
            message,
        )
    }

    /// The commit may or may not have been published: the client must not assume either.
    pub fn commit_state_unknown(detail: impl std::fmt::Display) -> Self {
        let id = log_server_error("commit state unknown", &detail);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "CommitStateUnknownException",
            format!(
                "the commit outcome is unknown; reload the table before retrying (error id {id})"
            ),
        )
    }

    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        let id = log_server_error("storage unavailable", &detail);
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableException",
            format!("the service is temporarily unavailable; retry (error id {id})"),
        )
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        let id = log_server_error("internal error", &detail);
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            format!("internal error (error id {id})"),
        )
    }

    /// Maps an error of the shared services; `missing` names what a bare `404` is about.
    pub fn from_api(e: Error, missing: Missing) -> Self {
        let status = flotilla_http::error::status_of(e.kind);
        if status.is_server_error() {
            // `to_parts` logs the detail under a fresh id and answers only that id.
            let (_, body) = flotilla_http::error::to_parts(&e);
            let id = body["error"]["details"]["error_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (kind, text) = if e.kind == ErrorKind::Unavailable {
                (
                    "ServiceUnavailableException",
                    "the service is temporarily unavailable; retry",
                )
            } else {
                ("InternalServerError", "internal error")
            };
            return Self::new(status, kind, format!("{text} (error id {id})"));
        }
        let message = e.message.clone();
        let kind = match e.kind {
            ErrorKind::Unauthenticated => "NotAuthorizedException",
            ErrorKind::PermissionDenied => "ForbiddenException",
            ErrorKind::ManagedByOverlay => {
                let overlay = e
                    .details
                    .get("overlay_id")
                    .and_then(|v| v.as_str())
                    .unwrap_or("unknown");
                return Self::forbidden(format!(
                    "{message} (managed by overlay {overlay}); read-only through this endpoint"
                ));
            }
            ErrorKind::NotFound | ErrorKind::NamespaceNotFound => {
                let about = if message.starts_with("namespace") {
                    Missing::Namespace
                } else if message.starts_with("catalog") || message.starts_with("account") {
                    Missing::Catalog
                } else {
                    missing
                };
                return Self::no_such(about, message);
            }
            ErrorKind::AlreadyExists => "AlreadyExistsException",
            ErrorKind::HasDependents => "NamespaceNotEmptyException",
            ErrorKind::CommitConflict | ErrorKind::PreconditionFailed => "CommitFailedException",
            ErrorKind::PayloadTooLarge
            | ErrorKind::UnsupportedMediaType
            | ErrorKind::MethodNotAllowed => "BadRequestException",
            ErrorKind::Deleting | ErrorKind::Conflict | ErrorKind::FailedPrecondition => {
                "ConflictException"
            }
            _ if status == StatusCode::CONFLICT => "ConflictException",
            _ => "BadRequestException",
        };
        Self::new(status, kind, message)
    }
}

fn log_server_error(what: &str, detail: &dyn std::fmt::Display) -> String {
    let id = flotilla_domain::names::new_id();
    tracing::error!(error_id = %id, detail = %detail, "iceberg endpoint: {what}");
    id
}

impl IntoResponse for IcebergError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "code": self.status.as_u16(),
        }});
        (self.status, axum::Json(body)).into_response()
    }
}

impl std::fmt::Display for IcebergError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.kind,
            self.message
        )
    }
}

/// The token route answers OAuth's own error shape (`{"error", "error_description"}`), which
/// OAuth clients parse; every other route of the door answers the Iceberg shape.
const OAUTH_TOKENS: &str = "/iceberg/v1/oauth/tokens";

/// Most bytes of an error body [`iceberg_errors`] reads to reshape it; every error body this
/// API or axum answers is far smaller, and a larger one keeps only its status.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The Iceberg exception type of a status the door answers outside a handler (fallbacks,
/// body limits, extractor rejections, transport limits).
fn kind_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "NotAuthorizedException",
        StatusCode::FORBIDDEN => "ForbiddenException",
        StatusCode::NOT_FOUND => "NotFoundException",
        StatusCode::NOT_ACCEPTABLE => "UnsupportedOperationException",
        StatusCode::CONFLICT => "ConflictException",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableException",
        s if s.is_server_error() => "InternalServerError",
        _ => "BadRequestException",
    }
}

/// Whether `v` already is an Iceberg error answer for `status`.
fn is_iceberg_shape(v: &serde_json::Value, status: StatusCode) -> bool {
    let e = &v["error"];
    e["message"].is_string() && e["type"].is_string() && e["code"] == status.as_u16()
}

/// Whether a request's body is declared JSON or not declared at all (engines that send no
/// body, or one without a `Content-Type`, are served as before).
fn json_or_untyped(headers: &axum::http::HeaderMap) -> bool {
    match headers.get(axum::http::header::CONTENT_TYPE) {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        }),
    }
}

/// A middleware of the whole router: a request under `/iceberg/` (the token route aside)
/// whose body is declared as anything but JSON is `415`; every error answer under `/iceberg/` that is not
/// already in the Iceberg shape (the API's `404`/`405` fallbacks, the `413` body limit, the
/// `414`/`431` request limits, axum's text rejections of a path, a query or a body) is
/// answered as `{"error": {"message", "type", "code"}}` with the same status, keeping the
/// message and the headers that tell the client what to do (`Allow`, `Retry-After`,
/// `WWW-Authenticate`).
pub async fn iceberg_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path();
    let ours = (path == "/iceberg" || path.starts_with("/iceberg/")) && path != OAUTH_TOKENS;
    if ours && !json_or_untyped(req.headers()) {
        return IcebergError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "BadRequestException",
            "request bodies must be application/json",
        )
        .into_response();
    }
    let resp = next.run(req).await;
    let status = resp.status();
    if !ours || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BODY_BYTES)
        .await
        .unwrap_or_default();
    let value = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    if value.as_ref().is_some_and(|v| is_iceberg_shape(v, status)) {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    let message = match &value {
        Some(v) if v["error"]["message"].is_string() => {
            let text = v["error"]["message"].as_str().unwrap_or_default();
            match v["error"]["details"]["error_id"].as_str() {
                Some(id) if !text.contains(id) => format!("{text} (error id {id})"),
                _ => text.to_owned(),
            }
        }
        _ => std::str::from_utf8(&bytes)
            .ok()
            .map(str::trim)
            .filter(|t| !t.is_empty() && !status.is_server_error())
            .map(str::to_owned)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_lowercase()),
    };
    let mut out = IcebergError::new(status, kind_of(status), message).into_response();
    for name in [
        axum::http::header::ALLOW,
        axum::http::header::RETRY_AFTER,
        axum::http::header::WWW_AUTHENTICATE,
    ] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}
