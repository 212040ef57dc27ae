//! The API error type and its single mapping to HTTP.
//!
//! Every handler returns `Result<_, ApiError>`. A 5xx answer carries only an `error_id`; the
//! detail is logged under that id and never sent to the caller.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flotilla_metastore::MetastoreError;
use serde_json::{Map, Value, json};

/// Error codes of the API contract (docs/api.md, "Errors").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    InvalidIndexMetadata,
    UnsupportedFormatVersion,
    IdempotencyKeyNotAllowed,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    NamespaceNotFound,
    IndexNotFound,
    AlreadyExists,
    CommitConflict,
    IndexUuidMismatch,
    HasDependents,
    ManagedByOverlay,
    MappingConflict,
    IdempotencyKeyReused,
    Deleting,
    Conflict,
    AuthorityNotEnabled,
    FailedPrecondition,
    PreconditionFailed,
    PreconditionRequired,
    PayloadTooLarge,
    UriTooLong,
    HeadersTooLarge,
    UnsupportedMediaType,
    MethodNotAllowed,
    Unavailable,
    Internal,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::InvalidIndexMetadata => "INVALID_INDEX_METADATA",
            Code::UnsupportedFormatVersion => "UNSUPPORTED_FORMAT_VERSION",
            Code::IdempotencyKeyNotAllowed => "IDEMPOTENCY_KEY_NOT_ALLOWED",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::NotFound => "NOT_FOUND",
            Code::NamespaceNotFound => "NAMESPACE_NOT_FOUND",
            Code::IndexNotFound => "INDEX_NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::CommitConflict => "COMMIT_CONFLICT",
            Code::IndexUuidMismatch => "INDEX_UUID_MISMATCH",
            Code::HasDependents => "HAS_DEPENDENTS",
            Code::ManagedByOverlay => "MANAGED_BY_OVERLAY",
            Code::MappingConflict => "MAPPING_CONFLICT",
            Code::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Code::Deleting => "DELETING",
            Code::Conflict => "CONFLICT",
            Code::AuthorityNotEnabled => "AUTHORITY_NOT_ENABLED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::PreconditionFailed => "PRECONDITION_FAILED",
            Code::PreconditionRequired => "PRECONDITION_REQUIRED",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::UriTooLong => "URI_TOO_LONG",
            Code::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "INTERNAL",
        }
    }

    /// The code named `name` (the inverse of [`Code::as_str`]).
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == name)
    }

    const ALL: [Code; 27] = [
        Code::InvalidArgument,
        Code::InvalidIndexMetadata,
        Code::UnsupportedFormatVersion,
        Code::IdempotencyKeyNotAllowed,
        Code::Unauthenticated,
        Code::PermissionDenied,
        Code::NotFound,
        Code::NamespaceNotFound,
        Code::IndexNotFound,
        Code::AlreadyExists,
        Code::CommitConflict,
        Code::IndexUuidMismatch,
        Code::HasDependents,
        Code::ManagedByOverlay,
        Code::MappingConflict,
        Code::IdempotencyKeyReused,
        Code::Deleting,
        Code::Conflict,
        Code::AuthorityNotEnabled,
        Code::FailedPrecondition,
        Code::PreconditionFailed,
        Code::PreconditionRequired,
        Code::PayloadTooLarge,
        Code::UnsupportedMediaType,
        Code::MethodNotAllowed,
        Code::Unavailable,
        Code::Internal,
    ];

    pub fn status(self) -> StatusCode {
        match self {
            Code::InvalidArgument
            | Code::InvalidIndexMetadata
            | Code::UnsupportedFormatVersion
            | Code::IdempotencyKeyNotAllowed => StatusCode::BAD_REQUEST,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::NotFound | Code::NamespaceNotFound | Code::IndexNotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists
            | Code::CommitConflict
            | Code::IndexUuidMismatch
            | Code::HasDependents
            | Code::ManagedByOverlay
            | Code::MappingConflict
            | Code::IdempotencyKeyReused
            | Code::Deleting
            | Code::Conflict
            | Code::AuthorityNotEnabled
            | Code::FailedPrecondition => StatusCode::CONFLICT,
            Code::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            Code::PreconditionRequired => StatusCode::PRECONDITION_REQUIRED,
            Code::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::UriTooLong => StatusCode::URI_TOO_LONG,
            Code::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answered to an API caller.
///
/// `message` and `details` are shown to the caller for 4xx; for 5xx only an `error_id` is,
/// and `internal` (never shown) goes to the log.
#[derive(Debug)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Map<String, Value>,
    internal: Option<String>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Map::new(),
            internal: None,
        }
    }

    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(Code::NotFound, format!("{what} not found"))
    }

    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(Code::AlreadyExists, message)
    }

    pub fn deleting(what: &str) -> Self {
        Self::new(Code::Deleting, format!("{what} is being deleted"))
    }

    pub fn precondition_failed() -> Self {
        Self::new(
            Code::PreconditionFailed,
            "the If-Match etag does not match the current resource",
        )
    }

    /// `428`: the change needs an `If-Match` etag (read the resource, then send its etag).
    pub fn precondition_required(what: &str) -> Self {
        Self::new(
            Code::PreconditionRequired,
            format!(
                "{what} needs an If-Match header with the etag of the version you read; \
                 read the resource and send its etag (or `*` to override)"
            ),
        )
    }

    /// A retryable failure of a backend; `detail` goes to the log only.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self {
            code: Code::Unavailable,
            message: "the service is temporarily unavailable; retry".into(),
            details: Map::new(),
            internal: Some(detail.into()),
        }
    }

    /// An unexpected failure; `detail` goes to the log only.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self {
            code: Code::Internal,
            message: "internal error".into(),
            details: Map::new(),
            internal: Some(detail.into()),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.code.status()
    }

    /// The JSON body and status this error answers with, logging 5xx detail under a fresh
    /// error id.
    pub fn to_parts(&self) -> (StatusCode, Value) {
        let status = self.status();
        if status.is_server_error() {
            let error_id = flotilla_domain::names::new_id();
            tracing::error!(
                error_id = %error_id,
                code = self.code.as_str(),
                detail = self.internal.as_deref().unwrap_or(&self.message),
                "request failed"
            );
            let body = json!({"error": {
                "code": self.code.as_str(),
                "message": self.message,
                "details": {"error_id": error_id},
            }});
            (status, body)
        } else {
            let body = json!({"error": {
                "code": self.code.as_str(),
                "message": self.message,
                "details": Value::Object(self.details.clone()),
            }});
            (status, body)
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.to_parts();
        let mut resp = (status, axum::Json(body)).into_response();
        if self.code == Code::Unavailable {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

impl From<MetastoreError> for ApiError {
    fn from(e: MetastoreError) -> Self {
        match &e {
            MetastoreError::Retryable { .. } | MetastoreError::OutcomeUnknown { .. } => {
                ApiError::unavailable(e.to_string())
            }
            MetastoreError::ItemTooLarge { .. } => {
                ApiError::invalid("the resource is too large to store (400 KB item limit)")
            }
            MetastoreError::TooManyOperations { .. } => {
                ApiError::invalid("the request touches too many items for one atomic change")
            }
            MetastoreError::KeyTooLong { .. } => ApiError::invalid("a name is too long to store"),
            MetastoreError::BadPageToken => ApiError::invalid("malformed page_token"),
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl From<flotilla_domain::names::NameError> for ApiError {
    fn from(e: flotilla_domain::names::NameError) -> Self {
        ApiError::invalid(e.0)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
