#![forbid(unsafe_code)]
//! The credential store: where integration secrets live, and the only place they live.
//!
//! The integration design's durability contract requires every
//! credential version to be an *immutable generation* reserved with an atomic put-if-absent
//! before the resource compare-and-swap that publishes it, retired only after a newer
//! generation is published, and deliberately retained when publication is
//! acknowledgement-uncertain. This crate provides the primitive those protocols are built
//! on: a store keyed by [`SecretRef`] (`account`, `integration`, `credential_generation`) whose
//! writes never overwrite an existing generation.
//!
//! Backends, each behind a feature of its own so a host compiles only the one it runs:
//! `aws::SecretsManagerStore` (AWS Secrets Manager, feature `secrets-manager`) and
//! `local::LocalEncryptedStore` (files sealed with ChaCha20-Poly1305, for `flotilla serve`,
//! feature `local`).
//! Test doubles, compiled only with the `testing` feature (dev-dependencies enable it):
//! `fault::FaultInjectingCredentialStore` and `contract`, the one suite both backends must
//! pass.
//!
//! Secret bytes cross exactly one boundary: they enter through [`SecretBytes`], are stored,
//! and are read back by the catalog-access adapter. [`SecretBytes`] never prints its content
//! and does not implement `Serialize`; no error of this crate carries secret bytes.

#[cfg(feature = "secrets-manager")]
pub mod aws;
#[cfg(any(test, feature = "testing"))]
pub mod contract;
#[cfg(any(test, feature = "testing"))]
pub mod fault;
#[cfg(feature = "local")]
pub mod local;
mod none;
pub use none::NoCredentialStore;

mod error_kind;

use std::fmt;

use async_trait::async_trait;

/// The longest account or integration id a [`SecretRef`] accepts.
pub const MAX_ID_LEN: usize = 128;
/// The largest secret payload accepted (Secrets Manager's `SecretString` limit is 64 KiB).
pub const MAX_SECRET_BYTES: usize = 64 * 1024;
/// Longest backend message kept in an error, so an upstream cannot flood logs.
#[cfg_attr(not(feature = "secrets-manager"), allow(dead_code))]
const MAX_ERROR_MESSAGE: usize = 300;

/// Names one immutable credential generation of one integration.
///
/// Ids are restricted to `[A-Za-z0-9_-]` so that the derived Secrets Manager name and the
/// local file path are unambiguous and cannot traverse directories.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretRef {
    pub account_id: String,
    pub integration_id: String,
    pub credential_generation: u64,
}

impl SecretRef {
    /// A validated reference.
    pub fn new(
        account_id: impl Into<String>,
        integration_id: impl Into<String>,
        credential_generation: u64,
    ) -> Result<Self, SecretStoreError> {
        let r = Self {
            account_id: account_id.into(),
            integration_id: integration_id.into(),
            credential_generation,
        };
        r.validate()?;
        Ok(r)
    }

    /// Checks the id alphabet. Every backend calls this before touching storage, because the
    /// fields are public and may have been built without [`SecretRef::new`].
    pub fn validate(&self) -> Result<(), SecretStoreError> {
        validate_id("account_id", &self.account_id)?;
        validate_id("integration_id", &self.integration_id)
    }
}

impl fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.account_id, self.integration_id, self.credential_generation
        )
    }
}

/// Validates an account or integration id (`[A-Za-z0-9_-]{1,128}`).
pub fn validate_id(what: &str, id: &str) -> Result<(), SecretStoreError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        // The id is not secret, but it is caller input: bound what we echo.
        Err(SecretStoreError::InvalidRef(format!(
            "{what} must match [A-Za-z0-9_-]{{1,{MAX_ID_LEN}}} (got {} bytes)",
            id.len()
        )))
    }
}

/// A secret payload: a JSON object of credential fields (e.g. `{"client_secret": "..."}`).
///
/// It prints as `***` under both `Debug` and `Display`, does not implement `Serialize`, and
/// zeroes its buffer on drop (best effort: copies made by callers are theirs to manage).
/// Equality is constant-time in the payload length.
#[derive(Clone)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps a payload after checking that it is a JSON object within [`MAX_SECRET_BYTES`].
    /// The error never describes the content.
    pub fn new(bytes: Vec<u8>) -> Result<Self, SecretStoreError> {
        if bytes.len() > MAX_SECRET_BYTES {
            return Err(SecretStoreError::InvalidSecret(format!(
                "payload is {} bytes; the limit is {MAX_SECRET_BYTES}",
                bytes.len()
            )));
        }
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(_)) => Ok(Self(bytes)),
            // serde_json's message may quote the input, so only its position is kept.
            Ok(_) => Err(SecretStoreError::InvalidSecret(
                "payload is not a JSON object".into(),
            )),
            Err(e) => Err(SecretStoreError::InvalidSecret(format!(
                "payload is not JSON (line {}, column {})",
                e.line(),
                e.column()
            ))),
        }
    }

    /// Builds a payload from credential fields.
    pub fn from_fields(
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, SecretStoreError> {
        let bytes = serde_json::to_vec(fields)
            .map_err(|_| SecretStoreError::InvalidSecret("fields cannot be encoded".into()))?;
        Self::new(bytes)
    }

    /// The credential fields. Only the catalog-access adapter should call this.
    pub fn fields(&self) -> Result<serde_json::Map<String, serde_json::Value>, SecretStoreError> {
        match serde_json::from_slice(&self.0) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            _ => Err(SecretStoreError::InvalidSecret(
                "payload is not a JSON object".into(),
            )),
        }
    }

    /// The raw payload. Named so that every use is easy to find in review.
    pub fn expose_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The payload as UTF-8 (always valid: [`SecretBytes::new`] only accepts JSON).
    pub fn expose_str(&self) -> Result<&str, SecretStoreError> {
        std::str::from_utf8(&self.0)
            .map_err(|_| SecretStoreError::InvalidSecret("payload is not UTF-8".into()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Constant-time comparison, so comparing a stored generation with a retry's payload does
    /// not leak how much of it matched.
    pub fn ct_eq(&self, other: &SecretBytes) -> bool {
        if self.0.len() != other.0.len() {
            return false;
        }
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Replaces every occurrence of this secret's text (and of each string field of at least
    /// four characters) in `message` with `***`. Backends run foreign error text through this
    /// before it becomes part of an error.
    #[cfg_attr(not(feature = "secrets-manager"), allow(dead_code))]
    pub(crate) fn redact(&self, message: &str) -> String {
        let mut out = message.to_owned();
        if let Ok(text) = std::str::from_utf8(&self.0)
            && !text.is_empty()
        {
            out = out.replace(text, "***");
        }
        if let Ok(fields) = self.fields() {
            for value in fields.values() {
                collect_strings(value, &mut |s| {
                    if s.chars().count() >= 4 {
                        out = out.replace(s, "***");
                    }
                });
            }
        }
        out
    }
}

#[cfg_attr(not(feature = "secrets-manager"), allow(dead_code))]
fn collect_strings(value: &serde_json::Value, f: &mut impl FnMut(&str)) {
    match value {
        serde_json::Value::String(s) => f(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_strings(v, f)),
        serde_json::Value::Object(map) => map.values().for_each(|v| collect_strings(v, f)),
        _ => {}
    }
}

impl PartialEq for SecretBytes {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other)
    }
}

impl Eq for SecretBytes {}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for SecretBytes {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

/// The result of [`CredentialStore::put_if_absent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// This call reserved the generation with the given bytes.
    Created,
    /// The generation was already reserved; nothing was written. `identical` says whether the
    /// stored bytes equal the ones offered: `true` is what a retry after an
    /// acknowledgement-uncertain put sees, `false` means another writer owns the generation and
    /// the caller must not publish it as carrying its own credentials.
    AlreadyExists { identical: bool },
}

/// Typed errors of the credential store. Retryability and "outcome unknown" are data, so
/// publication protocols decide whether to keep a prepared secret without parsing messages.
/// No variant ever carries secret bytes.
#[derive(Debug, thiserror::Error)]
pub enum SecretStoreError {
    /// A secret that must exist does not (see [`CredentialStore::resolve`]).
    #[error("credential {0} not found")]
    NotFound(SecretRef),
    /// Refused before any effect (throttling, connection refused, transient failure). Safe
    /// to retry as is.
    #[error("retryable credential store failure: {message}")]
    Retryable { message: String },
    /// The request may or may not have been applied (timeout or 5xx after sending). A
    /// prepared secret must be kept: the resource CAS may have published it.
    #[error("credential store outcome unknown: {message}")]
    OutcomeUnknown { message: String },
    /// A stored secret failed its integrity check or could not be decoded: tampered,
    /// truncated, sealed under another key, or moved from another reference.
    #[error("credential {reference} is corrupt: {reason}")]
    Corrupt {
        reference: SecretRef,
        reason: String,
    },
    #[error("invalid secret reference: {0}")]
    InvalidRef(String),
    #[error("invalid secret payload: {0}")]
    InvalidSecret(String),
    /// A permanent failure (configuration, permissions, key material, I/O).
    #[error("credential store backend failure: {0}")]
    Backend(String),
}

impl SecretStoreError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, SecretStoreError::Retryable { .. })
    }

    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, SecretStoreError::OutcomeUnknown { .. })
    }
}

/// Bounds foreign text that goes into an error.
#[cfg_attr(not(feature = "secrets-manager"), allow(dead_code))]
pub(crate) fn bound_message(message: &str) -> String {
    if message.len() <= MAX_ERROR_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_ERROR_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// Where credential generations are kept.
///
/// Contract (proved for every backend by the `contract` suite, feature `testing`):
/// - `put_if_absent` never overwrites: once a generation holds bytes, those bytes are what
///   `get` returns until `delete`, whatever later puts offer;
/// - `delete` is idempotent; `get` after `delete` is `None`;
/// - `list` returns every generation of an integration whose put has returned, for the orphan
///   sweep (on Secrets Manager the listing is eventually consistent: a sweep may miss a
///   generation created moments ago, which makes it skip, never delete, that generation).
#[async_trait]
pub trait CredentialStore: Send + Sync + 'static {
    /// Reserves an immutable generation. An existing generation is left untouched.
    async fn put_if_absent(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError>;

    /// Reads a generation.
    async fn get(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError>;

    /// Removes a generation; removing an absent one succeeds.
    async fn delete(&self, reference: &SecretRef) -> Result<(), SecretStoreError>;

    /// The stored generations of one integration, ascending.
    async fn list(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError>;

    /// Every stored generation of an account, sorted: account deletion and the sweep use it
    /// to find credentials whose integration record is already gone.
    async fn list_account(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError>;

    /// Reads a generation that a published resource references: absence is an error.
    async fn resolve(&self, reference: &SecretRef) -> Result<SecretBytes, SecretStoreError> {
        self.get(reference)
            .await?
            .ok_or_else(|| SecretStoreError::NotFound(reference.clone()))
    }
}

#[async_trait]
impl<T: CredentialStore + ?Sized> CredentialStore for std::sync::Arc<T> {
    async fn put_if_absent(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        (**self).put_if_absent(reference, secret).await
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        (**self).get(reference).await
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), SecretStoreError> {
        (**self).delete(reference).await
    }

    async fn list(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        (**self).list(account_id, integration_id).await
    }

    async fn list_account(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        (**self).list_account(account_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_bytes_never_prints_content() {
        let s = SecretBytes::new(br#"{"token":"canary-abc"}"#.to_vec()).unwrap();
        assert_eq!(format!("{s:?}"), "***");
        assert_eq!(format!("{s}"), "***");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(***)");
    }

    #[test]
    fn secret_bytes_rejects_non_objects_without_echoing_them() {
        for bad in [
            &b"\"canary-str\""[..],
            b"[\"canary-arr\"]",
            b"canary-raw",
            b"{\"canary-open",
        ] {
            let err = SecretBytes::new(bad.to_vec()).unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(!text.contains("canary"), "{text}");
        }
    }

    #[test]
    fn redact_removes_whole_payload_and_field_values() {
        let s = SecretBytes::new(br#"{"a":"sekrit-value","n":{"b":"deep-one"}}"#.to_vec()).unwrap();
        let msg =
            "bad sekrit-value and deep-one in {\"a\":\"sekrit-value\",\"n\":{\"b\":\"deep-one\"}}";
        let out = s.redact(msg);
        assert!(
            !out.contains("sekrit-value") && !out.contains("deep-one"),
            "{out}"
        );
    }

    #[test]
    fn refs_reject_path_characters() {
        for bad in ["", "a/b", "..", "a.b", "a\0b", &"x".repeat(MAX_ID_LEN + 1)] {
            assert!(SecretRef::new(bad, "i", 1).is_err(), "{bad:?}");
            assert!(SecretRef::new("a", bad, 1).is_err(), "{bad:?}");
        }
        assert!(SecretRef::new("acct-1", "int_2", u64::MAX).is_ok());
    }

    #[test]
    fn ct_eq_compares_content() {
        let a = SecretBytes::new(br#"{"k":"v1"}"#.to_vec()).unwrap();
        let b = SecretBytes::new(br#"{"k":"v2"}"#.to_vec()).unwrap();
        assert!(a.ct_eq(&a.clone()));
        assert!(!a.ct_eq(&b));
    }
}
