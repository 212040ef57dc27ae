//! Catalog-access failures of an API operation (an upstream listing, a reconciliation) as
//! service errors, classified here, once. The messages are bounded and withhold
//! credential-bearing upstream text ([`crate::BoundedText`]), so they may be shown; transient
//! failures are `UNAVAILABLE` (retryable) and keep the detail in the log only. Everything the
//! caller can fix by changing the integration is `FAILED_PRECONDITION`.

use flotilla_error::{Error, ErrorKind};

use crate::CatalogAccessError;

/// The detail of an `UNAVAILABLE` error naming the upstream's `Retry-After`, in whole
/// seconds (see [`CatalogAccessError::Throttled`]).
pub const RETRY_AFTER_DETAIL: &str = "retry_after_secs";

impl From<&CatalogAccessError> for Error {
    fn from(e: &CatalogAccessError) -> Self {
        match e {
            CatalogAccessError::Connection(_) | CatalogAccessError::Retryable { .. } => {
                Error::unavailable(format!("upstream catalog: {e}"))
            }
            // The hint travels with the error (whole seconds, rounded up) so a host that can
            // delay a redelivery waits at least that long.
            CatalogAccessError::Throttled { retry_after, .. } => {
                Error::unavailable(format!("upstream catalog: {e}")).with_detail(
                    RETRY_AFTER_DETAIL,
                    retry_after
                        .as_millis()
                        .div_ceil(1000)
                        .min(u128::from(u32::MAX)) as u64,
                )
            }
            CatalogAccessError::NotFound(_) => {
                Error::new(ErrorKind::NotFound, format!("upstream catalog: {e}"))
            }
            CatalogAccessError::Authentication { .. } => Error::failed_precondition(format!(
                "the upstream catalog refused the integration's authentication: {e}"
            )),
            CatalogAccessError::Config(_)
            | CatalogAccessError::Unsupported(_)
            | CatalogAccessError::Protocol { .. }
            | CatalogAccessError::CredentialVending { .. }
            | CatalogAccessError::UnexpectedStatus { .. } => {
                Error::failed_precondition(format!("upstream catalog: {e}"))
            }
        }
    }
}

impl From<CatalogAccessError> for Error {
    fn from(e: CatalogAccessError) -> Self {
        Error::from(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BoundedText, VendingErrorKind};

    fn text() -> BoundedText {
        BoundedText::ours("detail")
    }

    #[test]
    fn transient_failures_are_unavailable_with_the_detail_logged() {
        for e in [
            CatalogAccessError::Connection(text()),
            CatalogAccessError::Retryable {
                status: Some(503),
                detail: text(),
            },
            CatalogAccessError::Retryable {
                status: None,
                detail: text(),
            },
        ] {
            assert!(e.is_retryable());
            let logged = format!("upstream catalog: {e}");
            let mapped = Error::from(&e);
            assert_eq!(mapped.kind, ErrorKind::Unavailable);
            assert_eq!(
                mapped.message,
                "the service is temporarily unavailable; retry"
            );
            assert_eq!(mapped.internal_detail(), Some(logged.as_str()));
            assert!(mapped.is_retryable());
            assert!(mapped.details.is_empty());
        }
    }

    #[test]
    fn throttling_is_unavailable_and_carries_the_retry_after_hint() {
        let e = CatalogAccessError::Throttled {
            status: 429,
            retry_after: std::time::Duration::from_millis(7_200),
            detail: text(),
        };
        assert!(e.is_retryable());
        assert_eq!(
            e.retry_after(),
            Some(std::time::Duration::from_millis(7_200))
        );
        let mapped = Error::from(&e);
        assert_eq!(mapped.kind, ErrorKind::Unavailable);
        assert!(mapped.is_retryable());
        assert_eq!(mapped.details[RETRY_AFTER_DETAIL], 8);
        assert_eq!(
            mapped.internal_detail(),
            Some(format!("upstream catalog: {e}").as_str())
        );
    }

    #[test]
    fn not_found_upstream_is_not_found() {
        let e = CatalogAccessError::NotFound(BoundedText::ours("namespace `a`"));
        let mapped = Error::from(e);
        assert_eq!(mapped.kind, ErrorKind::NotFound);
        assert_eq!(
            mapped.message,
            "upstream catalog: not found upstream: namespace `a`"
        );
        assert_eq!(mapped.internal_detail(), None);
        assert!(!mapped.is_retryable());
    }

    #[test]
    fn refused_authentication_is_a_failed_precondition() {
        let e = CatalogAccessError::Authentication {
            status: Some(401),
            detail: text(),
        };
        let shown = e.to_string();
        let mapped = Error::from(e);
        assert_eq!(mapped.kind, ErrorKind::FailedPrecondition);
        assert_eq!(
            mapped.message,
            format!("the upstream catalog refused the integration's authentication: {shown}")
        );
        assert!(!mapped.is_retryable());
    }

    #[test]
    fn integration_problems_are_failed_preconditions_showing_the_bounded_text() {
        for e in [
            CatalogAccessError::config("`uri` must be https"),
            CatalogAccessError::unsupported("views"),
            CatalogAccessError::protocol("metadata-location", "missing"),
            CatalogAccessError::vending(VendingErrorKind::Scope, "outside the table"),
            CatalogAccessError::UnexpectedStatus {
                status: 418,
                detail: text(),
            },
        ] {
            let shown = format!("upstream catalog: {e}");
            let mapped = Error::from(&e);
            assert_eq!(mapped.kind, ErrorKind::FailedPrecondition, "{shown}");
            assert_eq!(mapped.message, shown);
            assert!(mapped.details.is_empty());
            assert_eq!(mapped.internal_detail(), None);
            assert!(!mapped.is_retryable());
        }
    }

    #[test]
    fn owned_and_borrowed_conversions_agree() {
        let e = CatalogAccessError::Retryable {
            status: Some(429),
            detail: text(),
        };
        assert_eq!(Error::from(&e), Error::from(e.clone()));
    }
}
