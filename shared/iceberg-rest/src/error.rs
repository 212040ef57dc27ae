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
