//! Typed catalog-access errors.
//!
//! Every error is safe to log and to return to an API caller: upstream text is bounded to
//! [`MAX_UPSTREAM_TEXT`] characters and withheld entirely when it looks like it may carry a
//! credential. Callers classify on the variant (validation reports authentication, vending,
//! expiry and scope failures as separate entries), never on the message.

use std::fmt;

/// Longest upstream text (in characters) an error or log line may carry.
pub const MAX_UPSTREAM_TEXT: usize = 256;

/// Upstream or user text that has been bounded and scrubbed. Construct with
/// [`BoundedText::new`]; there is no way to build one from an unbounded string.
#[derive(Clone, PartialEq, Eq)]
pub struct BoundedText(String);

impl BoundedText {
    /// Bounds `text` to [`MAX_UPSTREAM_TEXT`] characters, replaces control characters, and
    /// withholds it completely when it mentions credential material: an upstream that echoes a
    /// token or a vended key in an error body must not get it into our logs.
    pub fn new(text: &str) -> Self {
        if looks_secret_bearing(text) {
            return Self("[upstream text withheld: it may contain credentials]".to_owned());
        }
        Self::ours(text)
    }

    /// Bounds text *we* wrote (messages naming a property or field) without the credential
    /// scrub: naming `s3.secret-access-key` as missing is useful and holds no secret. Never
    /// pass upstream text or any value here.
    pub fn ours(text: &str) -> Self {
        let mut out = String::new();
        for (count, c) in text.chars().enumerate() {
            if count == MAX_UPSTREAM_TEXT {
                out.push('…');
                break;
            }
            out.push(if c.is_control() { ' ' } else { c });
        }
        Self(out)
    }

    /// The bounded text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoundedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BoundedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<&str> for BoundedText {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for BoundedText {
    fn from(s: String) -> Self {
        Self::new(&s)
    }
}

/// Whether free text mentions credential material (a key name or an auth scheme). Used to
/// withhold upstream text rather than try to cut the secret out of it.
fn looks_secret_bearing(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    const MARKERS: &[&str] = &[
        "secret",
        "session-token",
        "session_token",
        "sessiontoken",
        "access-key",
        "access_key",
        "accesskey",
        "password",
        "bearer ",
        "access_token",
        "refresh_token",
        "aws4-hmac-sha256",
        "x-amz-signature",
        "x-amz-credential",
        "sig=",
    ];
    MARKERS.iter().any(|m| lower.contains(m))
}

/// Why a vending attempt failed. Validation reports these as distinct issue codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendingErrorKind {
    /// The upstream (or the table) offers no usable vended credentials: nothing vended,
    /// remote signing only, url-only Delta Sharing access, or no vending endpoint.
    Unsupported,
    /// A credential set is missing a required part (a key without its secret, ...).
    Incomplete,
    /// The vended credentials are already expired (or expire within the safety margin).
    Expired,
    /// The vended credentials do not cover the table's storage location.
    Scope,
}

impl fmt::Display for VendingErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unsupported => "unsupported",
            Self::Incomplete => "incomplete",
            Self::Expired => "expired",
            Self::Scope => "scope",
        })
    }
}

/// A catalog-access failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CatalogAccessError {
    /// The connection configuration or authentication setup is invalid (caught before any
    /// I/O): a secret in a property, a forbidden URI, an unsupported combination.
    #[error("invalid catalog configuration: {0}")]
    Config(BoundedText),
    /// The upstream could not be reached: DNS, connect, TLS, refused address.
    #[error("cannot reach the catalog: {0}")]
    Connection(BoundedText),
    /// The upstream refused our credentials (401/403) or the token endpoint refused them.
    #[error("catalog authentication failed{}: {detail}", status_suffix(*status))]
    Authentication {
        /// HTTP status, when the refusal came as one.
        status: Option<u16>,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
    /// The namespace, table or view does not exist upstream.
    #[error("not found upstream: {0}")]
    NotFound(BoundedText),
    /// The provider or upstream does not offer this capability; never a silent fallback.
    #[error("unsupported: {0}")]
    Unsupported(BoundedText),
    /// Transient: 5xx, 429, timeout. Safe to retry later (all catalog reads are idempotent).
    #[error("upstream temporarily failed{}: {detail}", status_suffix(*status))]
    Retryable {
        /// HTTP status, when there was one (none for timeouts).
        status: Option<u16>,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
    /// The upstream throttled us (429, or 503 with `Retry-After`) and said when to come back;
    /// the bounded retries are spent, or the stated wait is longer than a call may wait.
    /// Retryable: the queue redelivers the work (no sooner than `retry_after`, where the
    /// host can delay a redelivery).
    #[error(
        "upstream throttled the request (HTTP {status}; retry after {}s): {detail}",
        retry_after.as_secs()
    )]
    Throttled {
        /// 429 or 503.
        status: u16,
        /// The wait the upstream asked for (its `Retry-After`).
        retry_after: std::time::Duration,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
    /// The upstream answered something that does not conform to its protocol. `field` names
    /// the offending field (or `<body>` / a header name) so an operator can see what differed.
    #[error("upstream protocol violation at `{field}`: {detail}")]
    Protocol {
        /// The offending field, header, or `<body>`.
        field: String,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
    /// Vended storage credentials could not be obtained or are unusable.
    #[error("credential vending failed ({kind}): {detail}")]
    CredentialVending {
        /// Why: unsupported, incomplete, expired, scope.
        kind: VendingErrorKind,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
    /// A status the endpoint does not define; reported, never guessed at.
    #[error("unexpected upstream answer HTTP {status}: {detail}")]
    UnexpectedStatus {
        /// HTTP status.
        status: u16,
        /// Bounded, secret-free explanation.
        detail: BoundedText,
    },
}

fn status_suffix(status: Option<u16>) -> String {
    status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
}

impl CatalogAccessError {
    /// [`CatalogAccessError::Config`] with our own message (see [`BoundedText::ours`]).
    pub fn config(detail: impl AsRef<str>) -> Self {
        Self::Config(BoundedText::ours(detail.as_ref()))
    }

    /// [`CatalogAccessError::Unsupported`] with our own message (see [`BoundedText::ours`]).
    pub fn unsupported(detail: impl AsRef<str>) -> Self {
        Self::Unsupported(BoundedText::ours(detail.as_ref()))
    }

    /// [`CatalogAccessError::Protocol`]; `detail` is scrubbed as upstream text.
    pub fn protocol(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        let mut field = field.into();
        if field.chars().count() > 128 {
            field = field.chars().take(128).collect();
        }
        Self::Protocol {
            field,
            detail: BoundedText::new(detail.as_ref()),
        }
    }

    /// [`CatalogAccessError::CredentialVending`] with our own message naming what is wrong
    /// (see [`BoundedText::ours`]): never put a credential value or upstream text in it.
    pub fn vending(kind: VendingErrorKind, detail: impl AsRef<str>) -> Self {
        Self::CredentialVending {
            kind,
            detail: BoundedText::ours(detail.as_ref()),
        }
    }

    /// Whether retrying the same read later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Retryable { .. } | Self::Throttled { .. } | Self::Connection(_)
        )
    }

    /// The wait the upstream asked for before the next attempt, when it said.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Throttled { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Result alias for catalog access.
pub type Result<T, E = CatalogAccessError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_text_truncates_long_text() {
        let long = "x".repeat(10_000);
        let b = BoundedText::new(&long);
        assert_eq!(b.as_str().chars().count(), MAX_UPSTREAM_TEXT + 1);
    }

    #[test]
    fn bounded_text_withholds_credential_text() {
        let b = BoundedText::new(r#"{"s3.secret-access-key":"AKIA..."}"#);
        assert!(!b.as_str().contains("AKIA"));
        let b = BoundedText::new("Authorization: Bearer abc");
        assert!(!b.as_str().contains("abc"));
    }

    #[test]
    fn bounded_text_replaces_control_characters() {
        assert_eq!(BoundedText::new("a\nb\u{1b}c").as_str(), "a b c");
    }
}
