//! The services' one error type: an [`ErrorKind`] (the API's error codes), a message and
//! details a caller may see, a detail for the log only, and whether retrying may help.
//!
//! Foreign errors (metastore, credential store, index catalog, catalog access, names) are
//! classified once, next to their own type, by a `From<...> for Error` in their crate. This
//! crate knows nothing of transports: the HTTP status of a kind, the response body and the
//! `Retry-After` header belong to the HTTP layer. Workers decide retries from
//! [`Error::is_retryable`], never from a status code.

use std::fmt;

use serde_json::{Map, Value};

/// Declares [`ErrorKind`], its wire names and [`ErrorKind::ALL`] from one list, so the list
/// of every kind cannot miss one.
macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// The kind of an error: the API contract's error codes (`docs/api.md`, "Errors").
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorKind {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$variant,)*];

            /// The kind's wire name (`INVALID_ARGUMENT`, ...).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorKind::$variant => $name,)*
                }
            }
        }
    };
}

kinds! {
    InvalidArgument => "INVALID_ARGUMENT",
    InvalidIndexMetadata => "INVALID_INDEX_METADATA",
    UnsupportedFormatVersion => "UNSUPPORTED_FORMAT_VERSION",
    IdempotencyKeyNotAllowed => "IDEMPOTENCY_KEY_NOT_ALLOWED",
    Unauthenticated => "UNAUTHENTICATED",
    PermissionDenied => "PERMISSION_DENIED",
    NotFound => "NOT_FOUND",
    NamespaceNotFound => "NAMESPACE_NOT_FOUND",
    IndexNotFound => "INDEX_NOT_FOUND",
    AlreadyExists => "ALREADY_EXISTS",
    CommitConflict => "COMMIT_CONFLICT",
    IndexUuidMismatch => "INDEX_UUID_MISMATCH",
    HasDependents => "HAS_DEPENDENTS",
    ManagedByOverlay => "MANAGED_BY_OVERLAY",
    MappingConflict => "MAPPING_CONFLICT",
    IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
    Deleting => "DELETING",
    Conflict => "CONFLICT",
    AuthorityNotEnabled => "AUTHORITY_NOT_ENABLED",
    FailedPrecondition => "FAILED_PRECONDITION",
    PreconditionFailed => "PRECONDITION_FAILED",
    PreconditionRequired => "PRECONDITION_REQUIRED",
    PayloadTooLarge => "PAYLOAD_TOO_LARGE",
    UriTooLong => "URI_TOO_LONG",
    HeadersTooLarge => "HEADERS_TOO_LARGE",
    UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
    MethodNotAllowed => "METHOD_NOT_ALLOWED",
    /// A backend failed transiently: retrying may succeed.
    Unavailable => "UNAVAILABLE",
    /// An unexpected failure; not the caller's fault, and not retried by workers unless the
    /// error says so ([`Error::with_retryable`]).
    Internal => "INTERNAL",
}

impl ErrorKind {
    /// The kind named `name` (the inverse of [`ErrorKind::as_str`]).
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }

    /// Whether an error of this kind is retryable unless it says otherwise: only
    /// [`ErrorKind::Unavailable`].
    pub fn is_retryable_by_default(self) -> bool {
        matches!(self, ErrorKind::Unavailable)
    }

    /// Whether the failure is ours rather than the caller's: [`ErrorKind::Unavailable`] and
    /// [`ErrorKind::Internal`]. Their message is generic and their detail is for the log only;
    /// every other kind is an answer about the request itself.
    pub fn is_server_side(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Internal)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of a service operation.
///
/// `message` and `details` may be shown to the caller (for server-side kinds the HTTP layer
/// shows only an error id); `internal` is never shown and goes to the log.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub details: Map<String, Value>,
    internal: Option<String>,
    /// `None`: the kind's default ([`ErrorKind::is_retryable_by_default`]).
    retryable: Option<bool>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: Map::new(),
            internal: None,
            retryable: None,
        }
    }

    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// Overrides the kind's default retryability (for example, an internal failure a worker
    /// should run again, or an unavailable backend a caller must not retry blindly).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// Attaches a detail for the log only (replacing any earlier one).
    pub fn with_internal(mut self, detail: impl Into<String>) -> Self {
        self.internal = Some(detail.into());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorKind::NotFound, format!("{what} not found"))
    }

    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::AlreadyExists, message)
    }

    /// The request is fine but the state of a resource it depends on refuses it (paused,
    /// misconfigured, not yet acknowledged, ...).
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::PermissionDenied, message)
    }

    pub fn deleting(what: &str) -> Self {
        Self::new(ErrorKind::Deleting, format!("{what} is being deleted"))
    }

    pub fn precondition_failed() -> Self {
        Self::new(
            ErrorKind::PreconditionFailed,
            "the If-Match etag does not match the current resource",
        )
    }

    /// The change needs an `If-Match` etag (read the resource, then send its etag).
    pub fn precondition_required(what: &str) -> Self {
        Self::new(
            ErrorKind::PreconditionRequired,
            format!(
                "{what} needs an If-Match header with the etag of the version you read; \
                 read the resource and send its etag (or `*` to override)"
            ),
        )
    }

    /// A transient failure of a backend (retryable); `detail` goes to the log only.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(
            ErrorKind::Unavailable,
            "the service is temporarily unavailable; retry",
        )
        .with_internal(detail)
    }

    /// An unexpected failure (not retryable by default); `detail` goes to the log only.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, "internal error").with_internal(detail)
    }

    /// Whether running the operation again soon may succeed: the explicit override of
    /// [`Error::with_retryable`], else the kind's default.
    pub fn is_retryable(&self) -> bool {
        self.retryable
            .unwrap_or_else(|| self.kind.is_retryable_by_default())
    }

    /// The detail for the log only, when there is one.
    pub fn internal_detail(&self) -> Option<&str> {
        self.internal.as_deref()
    }

    /// What to log about this error: the internal detail, else the message.
    pub fn log_detail(&self) -> &str {
        self.internal.as_deref().unwrap_or(&self.message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// An exhaustive match: adding a kind without listing it here fails to compile, and the
    /// count below pins that `ALL` holds each one.
    fn ordinal(kind: ErrorKind) -> usize {
        use ErrorKind as K;
        match kind {
            K::InvalidArgument => 0,
            K::InvalidIndexMetadata => 1,
            K::UnsupportedFormatVersion => 2,
            K::IdempotencyKeyNotAllowed => 3,
            K::Unauthenticated => 4,
            K::PermissionDenied => 5,
            K::NotFound => 6,
            K::NamespaceNotFound => 7,
            K::IndexNotFound => 8,
            K::AlreadyExists => 9,
            K::CommitConflict => 10,
            K::IndexUuidMismatch => 11,
            K::HasDependents => 12,
            K::ManagedByOverlay => 13,
            K::MappingConflict => 14,
            K::IdempotencyKeyReused => 15,
            K::Deleting => 16,
            K::Conflict => 17,
            K::AuthorityNotEnabled => 18,
            K::FailedPrecondition => 19,
            K::PreconditionFailed => 20,
            K::PreconditionRequired => 21,
            K::PayloadTooLarge => 22,
            K::UriTooLong => 23,
            K::HeadersTooLarge => 24,
            K::UnsupportedMediaType => 25,
            K::MethodNotAllowed => 26,
            K::Unavailable => 27,
            K::Internal => 28,
        }
    }

    #[test]
    fn all_holds_every_kind_once() {
        assert_eq!(ErrorKind::ALL.len(), 29);
        let ordinals: HashSet<usize> = ErrorKind::ALL.iter().map(|k| ordinal(*k)).collect();
        assert_eq!(ordinals, (0..29).collect::<HashSet<_>>());
        assert!(ErrorKind::ALL.contains(&ErrorKind::UriTooLong));
        assert!(ErrorKind::ALL.contains(&ErrorKind::HeadersTooLarge));
    }

    #[test]
    fn every_name_round_trips_and_is_unique() {
        let mut names = HashSet::new();
        for kind in ErrorKind::ALL {
            let name = kind.as_str();
            assert_eq!(ErrorKind::from_name(name), Some(*kind), "{name}");
            assert_eq!(kind.to_string(), name);
            assert!(
                name.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                "{name}"
            );
            assert!(names.insert(name), "duplicate name {name}");
        }
        assert_eq!(
            ErrorKind::from_name("URI_TOO_LONG"),
            Some(ErrorKind::UriTooLong)
        );
        assert_eq!(
            ErrorKind::from_name("HEADERS_TOO_LARGE"),
            Some(ErrorKind::HeadersTooLarge)
        );
        assert_eq!(ErrorKind::from_name("invalid_argument"), None);
        assert_eq!(ErrorKind::from_name("NOPE"), None);
    }

    #[test]
    fn only_unavailable_is_retryable_by_default() {
        for kind in ErrorKind::ALL {
            let expected = *kind == ErrorKind::Unavailable;
            assert_eq!(kind.is_retryable_by_default(), expected, "{kind}");
            assert_eq!(Error::new(*kind, "m").is_retryable(), expected, "{kind}");
        }
        assert!(Error::unavailable("backend down").is_retryable());
        assert!(!Error::internal("bug").is_retryable());
    }

    #[test]
    fn retryable_override_wins_over_the_kind() {
        assert!(Error::internal("x").with_retryable(true).is_retryable());
        assert!(!Error::unavailable("x").with_retryable(false).is_retryable());
        assert!(
            Error::new(ErrorKind::Conflict, "c")
                .with_retryable(true)
                .is_retryable()
        );
        // The default follows the kind, also when the kind is changed afterwards.
        let mut e = Error::new(ErrorKind::NotFound, "gone");
        e.kind = ErrorKind::Unavailable;
        assert!(e.is_retryable());
    }

    #[test]
    fn server_side_kinds_are_unavailable_and_internal() {
        let server: Vec<ErrorKind> = ErrorKind::ALL
            .iter()
            .copied()
            .filter(|k| k.is_server_side())
            .collect();
        assert_eq!(server, vec![ErrorKind::Unavailable, ErrorKind::Internal]);
    }

    #[test]
    fn details_accumulate_and_replace() {
        let e = Error::new(ErrorKind::ManagedByOverlay, "managed")
            .with_detail("overlay_id", "ov-1")
            .with_detail("retryable", false)
            .with_detail("overlay_id", "ov-2");
        assert_eq!(e.details.len(), 2);
        assert_eq!(e.details["overlay_id"], Value::from("ov-2"));
        assert_eq!(e.details["retryable"], Value::Bool(false));
        assert_eq!(e.internal_detail(), None);
        assert_eq!(e.log_detail(), "managed");
    }

    #[test]
    fn constructors_match_the_api_contract() {
        let cases = [
            (Error::invalid("bad"), ErrorKind::InvalidArgument, "bad"),
            (
                Error::not_found("overlay"),
                ErrorKind::NotFound,
                "overlay not found",
            ),
            (
                Error::already_exists("taken"),
                ErrorKind::AlreadyExists,
                "taken",
            ),
            (
                Error::failed_precondition("paused"),
                ErrorKind::FailedPrecondition,
                "paused",
            ),
            (
                Error::permission_denied("operator permission required"),
                ErrorKind::PermissionDenied,
                "operator permission required",
            ),
            (
                Error::deleting("the account"),
                ErrorKind::Deleting,
                "the account is being deleted",
            ),
            (
                Error::precondition_failed(),
                ErrorKind::PreconditionFailed,
                "the If-Match etag does not match the current resource",
            ),
            (
                Error::precondition_required("changing `uri`"),
                ErrorKind::PreconditionRequired,
                "changing `uri` needs an If-Match header with the etag of the version you read; \
                 read the resource and send its etag (or `*` to override)",
            ),
        ];
        for (e, kind, message) in cases {
            assert_eq!(e.kind, kind);
            assert_eq!(e.message, message);
            assert!(e.details.is_empty());
            assert_eq!(e.internal_detail(), None);
        }
    }

    #[test]
    fn server_side_constructors_keep_the_detail_for_the_log() {
        let u = Error::unavailable("dynamo throttled");
        assert_eq!(u.kind, ErrorKind::Unavailable);
        assert_eq!(u.message, "the service is temporarily unavailable; retry");
        assert_eq!(u.internal_detail(), Some("dynamo throttled"));
        assert_eq!(u.log_detail(), "dynamo throttled");
        assert!(!u.to_string().contains("dynamo"));

        let i = Error::internal("corrupt item");
        assert_eq!(i.kind, ErrorKind::Internal);
        assert_eq!(i.message, "internal error");
        assert_eq!(i.internal_detail(), Some("corrupt item"));
        assert_eq!(i.to_string(), "INTERNAL: internal error");
    }

    #[test]
    fn display_is_kind_then_message() {
        let e = Error::new(ErrorKind::CommitConflict, "stale base");
        assert_eq!(e.to_string(), "COMMIT_CONFLICT: stale base");
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert_eq!(boxed.to_string(), "COMMIT_CONFLICT: stale base");
    }
}
