//! The index catalog's typed errors as service errors, classified here, once. Exhaustive on
//! purpose: a new [`IndexCatalogError`] variant must be given a kind here. Server-side kinds
//! keep their message for the log only ([`Error::unavailable`], [`Error::internal`]).
//!
//! The crate reports a failed account guard as `NOT_FOUND` (it cannot tell the fence from a
//! missing catalog); telling `DELETING` or a missing account apart needs reads of the account
//! and belongs to the service that owns the account (`explain` in the index catalog service).

use flotilla_error::{Error, ErrorKind};

use crate::IndexCatalogError;

impl From<IndexCatalogError> for Error {
    fn from(e: IndexCatalogError) -> Self {
        use IndexCatalogError as E;
        match e {
            E::NamespaceNotFound { message } => Error::new(ErrorKind::NamespaceNotFound, message),
            E::IndexNotFound { message } => Error::new(ErrorKind::IndexNotFound, message),
            E::AlreadyExists { message } => Error::already_exists(message),
            E::InvalidIndexMetadata { rule, message } => Error::new(
                ErrorKind::InvalidIndexMetadata,
                format!("{rule}: {message}"),
            )
            .with_detail("rule", rule.as_str()),
            E::UnsupportedFormatVersion { message } => {
                Error::new(ErrorKind::UnsupportedFormatVersion, message)
            }
            E::IndexUuidMismatch { message } => Error::new(ErrorKind::IndexUuidMismatch, message),
            E::CommitConflict { message } => Error::new(ErrorKind::CommitConflict, message),
            E::NotFound { message } => Error::new(ErrorKind::NotFound, message),
            E::HasDependents { message } => Error::new(ErrorKind::HasDependents, message),
            E::InvalidArgument { message } => Error::invalid(message),
            E::WarehouseNotAllowed { message } => Error::permission_denied(message),
            E::Unavailable { message } => Error::unavailable(message),
            E::Internal { message } => Error::internal(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::Rule;

    fn m() -> String {
        "the message".to_owned()
    }

    #[test]
    fn every_client_variant_keeps_its_message_under_its_kind() {
        use IndexCatalogError as E;
        let cases = [
            (
                E::NamespaceNotFound { message: m() },
                ErrorKind::NamespaceNotFound,
            ),
            (E::IndexNotFound { message: m() }, ErrorKind::IndexNotFound),
            (E::AlreadyExists { message: m() }, ErrorKind::AlreadyExists),
            (
                E::UnsupportedFormatVersion { message: m() },
                ErrorKind::UnsupportedFormatVersion,
            ),
            (
                E::IndexUuidMismatch { message: m() },
                ErrorKind::IndexUuidMismatch,
            ),
            (
                E::CommitConflict { message: m() },
                ErrorKind::CommitConflict,
            ),
            (E::NotFound { message: m() }, ErrorKind::NotFound),
            (E::HasDependents { message: m() }, ErrorKind::HasDependents),
            (
                E::InvalidArgument { message: m() },
                ErrorKind::InvalidArgument,
            ),
            (
                E::WarehouseNotAllowed { message: m() },
                ErrorKind::PermissionDenied,
            ),
        ];
        for (e, kind) in cases {
            // The crate's own code name and the service error's kind agree.
            assert_eq!(e.code(), kind.as_str());
            let mapped = Error::from(e);
            assert_eq!(mapped.kind, kind);
            assert_eq!(mapped.message, "the message");
            assert!(mapped.details.is_empty());
            assert_eq!(mapped.internal_detail(), None);
            assert!(!mapped.is_retryable());
        }
    }

    #[test]
    fn invalid_metadata_names_its_rule_in_message_and_details() {
        let e = IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::SnapshotLog,
            message: "entries out of order".into(),
        };
        assert_eq!(e.code(), "INVALID_INDEX_METADATA");
        let mapped = Error::from(e);
        assert_eq!(mapped.kind, ErrorKind::InvalidIndexMetadata);
        assert_eq!(mapped.message, "snapshot-log: entries out of order");
        assert_eq!(mapped.details.len(), 1);
        assert_eq!(mapped.details["rule"], Value::from("snapshot-log"));
    }

    #[test]
    fn server_side_variants_log_their_message_only() {
        let u = Error::from(IndexCatalogError::Unavailable {
            message: "throttled".into(),
        });
        assert_eq!(u.kind, ErrorKind::Unavailable);
        assert_eq!(u.message, "the service is temporarily unavailable; retry");
        assert_eq!(u.internal_detail(), Some("throttled"));
        assert!(u.is_retryable());

        let i = Error::from(IndexCatalogError::Internal {
            message: "corrupt record".into(),
        });
        assert_eq!(i.kind, ErrorKind::Internal);
        assert_eq!(i.message, "internal error");
        assert_eq!(i.internal_detail(), Some("corrupt record"));
        assert!(!i.is_retryable());
    }
}
