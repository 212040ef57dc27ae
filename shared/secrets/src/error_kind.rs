//! Credential store failures as service errors, classified here, once: a transient failure or
//! a write of unknown outcome is `UNAVAILABLE` (retryable); anything else (a missing or
//! corrupt secret, a bad reference, a backend failure) is `INTERNAL`. Both keep the store's
//! message for the log only; no variant carries secret bytes. A caller for which a missing
//! secret means something else (an integration whose credentials were lost) classifies
//! [`SecretStoreError::NotFound`] itself.

use flotilla_error::Error;

use crate::SecretStoreError;

impl From<SecretStoreError> for Error {
    fn from(e: SecretStoreError) -> Self {
        if e.is_retryable() || e.is_outcome_unknown() {
            Error::unavailable(e.to_string())
        } else {
            Error::internal(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_error::ErrorKind;

    use super::*;
    use crate::SecretRef;

    fn reference() -> SecretRef {
        SecretRef::new("acct", "integration", 3).unwrap()
    }

    #[test]
    fn every_variant_maps_to_its_kind_with_the_detail_logged() {
        let cases = [
            (SecretStoreError::NotFound(reference()), ErrorKind::Internal),
            (
                SecretStoreError::Retryable {
                    message: "throttled".into(),
                },
                ErrorKind::Unavailable,
            ),
            (
                SecretStoreError::OutcomeUnknown {
                    message: "timeout".into(),
                },
                ErrorKind::Unavailable,
            ),
            (
                SecretStoreError::Corrupt {
                    reference: reference(),
                    reason: "tag mismatch".into(),
                },
                ErrorKind::Internal,
            ),
            (
                SecretStoreError::InvalidRef("bad".into()),
                ErrorKind::Internal,
            ),
            (
                SecretStoreError::InvalidSecret("not json".into()),
                ErrorKind::Internal,
            ),
            (
                SecretStoreError::Backend("access denied".into()),
                ErrorKind::Internal,
            ),
        ];
        for (e, kind) in cases {
            let text = e.to_string();
            let mapped = Error::from(e);
            assert_eq!(mapped.kind, kind, "{text}");
            let message = match kind {
                ErrorKind::Unavailable => "the service is temporarily unavailable; retry",
                _ => "internal error",
            };
            assert_eq!(mapped.message, message, "{text}");
            assert_eq!(mapped.internal_detail(), Some(text.as_str()));
            assert!(mapped.details.is_empty());
            assert_eq!(mapped.is_retryable(), kind == ErrorKind::Unavailable);
        }
    }
}
