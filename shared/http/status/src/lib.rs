//! The HTTP status and JSON body of a service error ([`flotilla_error::Error`]): the one
//! table. `flotilla-http` re-exports it (its `error` module adds the response, `HttpError`
//! and `Retry-After`); the idempotency receipts record what [`to_parts`] answers.
//!
//! A server-side answer (`UNAVAILABLE`, `INTERNAL`) carries only an `error_id`; the detail is
//! logged under that id and never sent to the caller.
#![forbid(unsafe_code)]

use flotilla_error::{Error, ErrorKind};
use http::StatusCode;
use serde_json::{Value, json};

/// The HTTP status of an error kind (`docs/api.md`, "Errors").
pub fn status_of(kind: ErrorKind) -> StatusCode {
    use ErrorKind as K;
    match kind {
        K::InvalidArgument
        | K::InvalidIndexMetadata
        | K::UnsupportedFormatVersion
        | K::IdempotencyKeyNotAllowed => StatusCode::BAD_REQUEST,
        K::Unauthenticated => StatusCode::UNAUTHORIZED,
        K::PermissionDenied => StatusCode::FORBIDDEN,
        K::NotFound | K::NamespaceNotFound | K::IndexNotFound => StatusCode::NOT_FOUND,
        K::AlreadyExists
        | K::CommitConflict
        | K::IndexUuidMismatch
        | K::HasDependents
        | K::ManagedByOverlay
        | K::MappingConflict
        | K::IdempotencyKeyReused
        | K::Deleting
        | K::Conflict
        | K::AuthorityNotEnabled
        | K::FailedPrecondition => StatusCode::CONFLICT,
        K::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
        K::PreconditionRequired => StatusCode::PRECONDITION_REQUIRED,
        K::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        K::UriTooLong => StatusCode::URI_TOO_LONG,
        K::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        K::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        K::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        K::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The status and JSON body an error answers with. A server-side error is logged under a
/// fresh error id and its body carries only that id; any other error shows its message and
/// details.
pub fn to_parts(e: &Error) -> (StatusCode, Value) {
    let status = status_of(e.kind);
    if status.is_server_error() {
        let error_id = flotilla_domain::names::new_id();
        tracing::error!(
            error_id = %error_id,
            code = e.kind.as_str(),
            detail = e.log_detail(),
            "request failed"
        );
        let body = json!({"error": {
            "code": e.kind.as_str(),
            "message": e.message,
            "details": {"error_id": error_id},
        }});
        (status, body)
    } else {
        let body = json!({"error": {
            "code": e.kind.as_str(),
            "message": e.message,
            "details": Value::Object(e.details.clone()),
        }});
        (status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_contract_status() {
        use ErrorKind as K;
        let expected: &[(ErrorKind, u16)] = &[
            (K::InvalidArgument, 400),
            (K::InvalidIndexMetadata, 400),
            (K::UnsupportedFormatVersion, 400),
            (K::IdempotencyKeyNotAllowed, 400),
            (K::Unauthenticated, 401),
            (K::PermissionDenied, 403),
            (K::NotFound, 404),
            (K::NamespaceNotFound, 404),
            (K::IndexNotFound, 404),
            (K::AlreadyExists, 409),
            (K::CommitConflict, 409),
            (K::IndexUuidMismatch, 409),
            (K::HasDependents, 409),
            (K::ManagedByOverlay, 409),
            (K::MappingConflict, 409),
            (K::IdempotencyKeyReused, 409),
            (K::Deleting, 409),
            (K::Conflict, 409),
            (K::AuthorityNotEnabled, 409),
            (K::FailedPrecondition, 409),
            (K::PreconditionFailed, 412),
            (K::PreconditionRequired, 428),
            (K::PayloadTooLarge, 413),
            (K::UriTooLong, 414),
            (K::HeadersTooLarge, 431),
            (K::UnsupportedMediaType, 415),
            (K::MethodNotAllowed, 405),
            (K::Unavailable, 503),
            (K::Internal, 500),
        ];
        assert_eq!(expected.len(), ErrorKind::ALL.len());
        for (kind, status) in expected {
            assert_eq!(status_of(*kind).as_u16(), *status, "{kind}");
        }
    }

    #[test]
    fn server_errors_are_exactly_the_server_side_kinds() {
        for kind in ErrorKind::ALL {
            assert_eq!(
                status_of(*kind).is_server_error(),
                kind.is_server_side(),
                "{kind}"
            );
            assert!(status_of(*kind).is_client_error() != kind.is_server_side());
        }
    }
}
