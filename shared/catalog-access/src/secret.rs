//! Secret strings: below the SPI and the SigV4 signer, which both hold them (the SPI
//! re-exports the type).

use std::fmt;

/// A secret string: `Debug` and `Display` print `***`, no `Serialize`. Zeroizing on drop
/// is not attempted (the process is short-lived and the value passes through HTTP stacks).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value; call only where it is put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is empty (an incomplete credential).
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for SecretString {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for SecretString {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}
