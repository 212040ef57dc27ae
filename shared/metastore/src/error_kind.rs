//! The metastore's failures as service errors ([`flotilla_error::Error`]), classified here,
//! once. Transient failures and writes of unknown outcome are `UNAVAILABLE` (retryable), limits
//! the caller's request hit are `INVALID_ARGUMENT`, and everything else (a failed condition
//! that reached this far, a corrupt item, a backend misconfiguration) is `INTERNAL`. Callers
//! that give a condition failure a meaning (a lost race, a taken name) classify it themselves
//! before this conversion.

use flotilla_error::Error;

use crate::MetastoreError;

impl From<MetastoreError> for Error {
    fn from(e: MetastoreError) -> Self {
        match &e {
            MetastoreError::Retryable { .. } | MetastoreError::OutcomeUnknown { .. } => {
                Error::unavailable(e.to_string())
            }
            MetastoreError::ItemTooLarge { .. } => {
                Error::invalid("the resource is too large to store (400 KB item limit)")
            }
            MetastoreError::TooManyOperations { .. } => {
                Error::invalid("the request touches too many items for one atomic change")
            }
            MetastoreError::KeyTooLong { .. } => Error::invalid("a name is too long to store"),
            MetastoreError::BadPageToken => Error::invalid("malformed page_token"),
            MetastoreError::ConditionFailed { .. }
            | MetastoreError::Invalid(_)
            | MetastoreError::Corrupt { .. }
            | MetastoreError::Backend(_) => Error::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_error::ErrorKind;

    use super::*;
    use crate::{FailureReason, Key, OpOutcome};

    fn key() -> Key {
        Key::new("ACCT#a", "OVL#o")
    }

    /// One case per variant: the kind, the caller-visible message and the log detail.
    fn cases() -> Vec<(MetastoreError, ErrorKind, &'static str, bool)> {
        let unavailable = "the service is temporarily unavailable; retry";
        vec![
            (
                MetastoreError::Retryable {
                    message: "throttled".into(),
                },
                ErrorKind::Unavailable,
                unavailable,
                true,
            ),
            (
                MetastoreError::OutcomeUnknown {
                    message: "timeout".into(),
                },
                ErrorKind::Unavailable,
                unavailable,
                true,
            ),
            (
                MetastoreError::ItemTooLarge {
                    key: key(),
                    size: 500_000,
                },
                ErrorKind::InvalidArgument,
                "the resource is too large to store (400 KB item limit)",
                false,
            ),
            (
                MetastoreError::TooManyOperations { count: 101 },
                ErrorKind::InvalidArgument,
                "the request touches too many items for one atomic change",
                false,
            ),
            (
                MetastoreError::KeyTooLong { key: key() },
                ErrorKind::InvalidArgument,
                "a name is too long to store",
                false,
            ),
            (
                MetastoreError::BadPageToken,
                ErrorKind::InvalidArgument,
                "malformed page_token",
                false,
            ),
            (
                MetastoreError::ConditionFailed {
                    reasons: vec![OpOutcome::Ok, OpOutcome::Failed(FailureReason::Missing)],
                },
                ErrorKind::Internal,
                "internal error",
                true,
            ),
            (
                MetastoreError::Invalid("empty transaction".into()),
                ErrorKind::Internal,
                "internal error",
                true,
            ),
            (
                MetastoreError::Corrupt {
                    key: key(),
                    message: "bad json".into(),
                },
                ErrorKind::Internal,
                "internal error",
                true,
            ),
            (
                MetastoreError::Backend("no such table".into()),
                ErrorKind::Internal,
                "internal error",
                true,
            ),
        ]
    }

    #[test]
    fn every_variant_maps_to_its_kind_and_message() {
        for (e, kind, message, logs_detail) in cases() {
            let text = e.to_string();
            let mapped = Error::from(e);
            assert_eq!(mapped.kind, kind, "{text}");
            assert_eq!(mapped.message, message, "{text}");
            assert!(mapped.details.is_empty(), "{text}");
            let expected_detail = logs_detail.then_some(text.as_str());
            assert_eq!(mapped.internal_detail(), expected_detail, "{text}");
        }
    }

    #[test]
    fn only_transient_failures_are_retryable() {
        for (e, kind, _, _) in cases() {
            let mapped = Error::from(e);
            assert_eq!(mapped.is_retryable(), kind == ErrorKind::Unavailable);
        }
    }
}
