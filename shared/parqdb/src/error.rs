//! The catalog's typed errors. Codes are the ParqDB catalog names plus the API's generic ones; the
//! HTTP layer maps them to statuses in one place.

use flotilla_metastore::MetastoreError;

use crate::metadata::{MetadataError, Rule};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexCatalogError {
    /// A required namespace does not exist.
    #[error("{message}")]
    NamespaceNotFound { message: String },
    /// The index identifier does not exist.
    #[error("{message}")]
    IndexNotFound { message: String },
    /// A register or rename destination (or an index catalog / namespace name) exists.
    #[error("{message}")]
    AlreadyExists { message: String },
    /// The metadata document, or its location, breaks a rule of the ParqDB format.
    #[error("{rule}: {message}")]
    InvalidIndexMetadata { rule: Rule, message: String },
    #[error("{message}")]
    UnsupportedFormatVersion { message: String },
    /// The committed document belongs to another index.
    #[error("{message}")]
    IndexUuidMismatch { message: String },
    /// The supplied base location is no longer current: reload and reapply.
    #[error("{message}")]
    CommitConflict { message: String },
    /// The index catalog does not exist.
    #[error("{message}")]
    NotFound { message: String },
    /// A namespace still holds indexes or child namespaces.
    #[error("{message}")]
    HasDependents { message: String },
    /// The request is malformed (names, URIs, page tokens, source bindings).
    #[error("{message}")]
    InvalidArgument { message: String },
    /// The warehouse lies in a prefix another account holds (see [`crate::warehouse`]).
    #[error("{message}")]
    WarehouseNotAllowed { message: String },
    /// A retryable metastore or storage failure, including a write whose outcome is unknown:
    /// the caller reloads before deciding anything that depends on it.
    #[error("{message}")]
    Unavailable { message: String },
    /// A permanent backend failure or a corrupt stored record; not the caller's fault.
    #[error("{message}")]
    Internal { message: String },
}

impl IndexCatalogError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NamespaceNotFound { .. } => "NAMESPACE_NOT_FOUND",
            Self::IndexNotFound { .. } => "INDEX_NOT_FOUND",
            Self::AlreadyExists { .. } => "ALREADY_EXISTS",
            Self::InvalidIndexMetadata { .. } => "INVALID_INDEX_METADATA",
            Self::UnsupportedFormatVersion { .. } => "UNSUPPORTED_FORMAT_VERSION",
            Self::IndexUuidMismatch { .. } => "INDEX_UUID_MISMATCH",
            Self::CommitConflict { .. } => "COMMIT_CONFLICT",
            Self::NotFound { .. } => "NOT_FOUND",
            Self::HasDependents { .. } => "HAS_DEPENDENTS",
            Self::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Self::WarehouseNotAllowed { .. } => "PERMISSION_DENIED",
            Self::Unavailable { .. } => "UNAVAILABLE",
            Self::Internal { .. } => "INTERNAL",
        }
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
        }
    }
}

impl From<MetadataError> for IndexCatalogError {
    fn from(e: MetadataError) -> Self {
        match e {
            MetadataError::InvalidIndexMetadata { rule, message } => {
                Self::InvalidIndexMetadata { rule, message }
            }
            e @ MetadataError::UnsupportedFormatVersion { .. } => Self::UnsupportedFormatVersion {
                message: e.to_string(),
            },
            e @ MetadataError::IndexUuidMismatch { .. } => Self::IndexUuidMismatch {
                message: e.to_string(),
            },
        }
    }
}

impl From<MetastoreError> for IndexCatalogError {
    /// Condition failures are classified by each operation (they mean different things per
    /// operation); whatever reaches this conversion is a backend failure.
    fn from(e: MetastoreError) -> Self {
        match e {
            MetastoreError::Retryable { .. } => Self::Unavailable {
                message: e.to_string(),
            },
            MetastoreError::OutcomeUnknown { .. } => Self::Unavailable {
                message: format!("{e}; reload before retrying, the change may have been applied"),
            },
            MetastoreError::ItemTooLarge { .. } | MetastoreError::KeyTooLong { .. } => {
                Self::InvalidArgument {
                    message: e.to_string(),
                }
            }
            other => Self::Internal {
                message: other.to_string(),
            },
        }
    }
}

pub type Result<T, E = IndexCatalogError> = std::result::Result<T, E>;
