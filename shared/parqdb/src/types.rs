//! Request and response shapes of the `index-catalogs` routes (docs/api.md), and the input
//! checks they share. Field names are snake_case; unknown fields are refused.

use serde::{Deserialize, Serialize};

use crate::error::{IndexCatalogError, Result};
use crate::keys::{NAME_SEPARATOR, NAMESPACE_SEPARATOR};
use crate::metadata::is_canonical_uuid;

/// Longest index catalog name, namespace segment or index name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest namespace depth.
pub const MAX_NAMESPACE_DEPTH: usize = 16;
/// Longest warehouse URI, in bytes (it is part of a sort key).
pub const MAX_WAREHOUSE_BYTES: usize = 512;
/// Longest metadata location, in bytes (it is part of a sort key).
pub const MAX_LOCATION_BYTES: usize = 900;
/// Longest Parquet source URI, in bytes.
pub const MAX_SOURCE_URI_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIndexCatalogRequest {
    pub name: String,
    pub warehouse: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexCatalog {
    pub name: String,
    pub warehouse: String,
    pub create_time: String,
    pub etag: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateNamespaceRequest {
    pub path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    pub path: Vec<String>,
    pub create_time: String,
}

/// An Iceberg-style identifier: an ordered namespace and a name, compared as exact code point
/// sequences (no normalisation, no case folding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexIdentifier {
    pub namespace: Vec<String>,
    pub name: String,
}

impl IndexIdentifier {
    pub fn new(namespace: &[&str], name: &str) -> Self {
        Self {
            namespace: namespace.iter().map(|s| (*s).to_owned()).collect(),
            name: name.to_owned(),
        }
    }
}

/// The source table an index is bound to, published with every register and commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE", deny_unknown_fields)]
pub enum SourceBinding {
    /// A Parquet dataset by URI.
    Parquet { uri: String },
    /// An Iceberg table of an external table catalog, pinned to a snapshot.
    Iceberg {
        catalog: String,
        namespace: Vec<String>,
        name: String,
        table_uuid: String,
        snapshot_id: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterIndexRequest {
    pub name: String,
    pub metadata_location: String,
    pub source: SourceBinding,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitIndexRequest {
    pub source: SourceBinding,
    /// The metadata location the new document was based on.
    pub base: String,
    /// The new metadata location.
    pub new: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameIndexRequest {
    pub source: IndexIdentifier,
    pub destination: IndexIdentifier,
}

/// What `load` answers (docs/api.md "Index catalog entries").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub identifier: IndexIdentifier,
    pub metadata_location: String,
    pub source: SourceBinding,
}

/// `page_size` (default 100, at most 1000) and an opaque `page_token`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    pub page_size: Option<usize>,
    pub page_token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse<T> {
    pub items: Vec<T>,
    pub next_page_token: Option<String>,
}

/// A name: non-empty, bounded, no control characters (which also excludes the key separators
/// U+001E and U+001F). Everything else is kept exactly as sent.
pub(crate) fn check_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(IndexCatalogError::invalid_argument(format!(
            "{kind} must not be empty"
        )));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(IndexCatalogError::invalid_argument(format!(
            "{kind} is longer than {MAX_NAME_BYTES} bytes"
        )));
    }
    if name
        .chars()
        .any(|c| c.is_control() || c == NAME_SEPARATOR || c == NAMESPACE_SEPARATOR)
    {
        return Err(IndexCatalogError::invalid_argument(format!(
            "{kind} must not contain control characters"
        )));
    }
    Ok(())
}

pub(crate) fn check_namespace(path: &[String]) -> Result<()> {
    if path.is_empty() {
        return Err(IndexCatalogError::invalid_argument(
            "a namespace has at least one segment",
        ));
    }
    if path.len() > MAX_NAMESPACE_DEPTH {
        return Err(IndexCatalogError::invalid_argument(format!(
            "a namespace has at most {MAX_NAMESPACE_DEPTH} segments"
        )));
    }
    path.iter()
        .try_for_each(|s| check_name("a namespace segment", s))
}

pub(crate) fn check_identifier(id: &IndexIdentifier) -> Result<()> {
    check_namespace(&id.namespace)?;
    check_name("an index name", &id.name)
}

/// Account ids are chosen by the platform; they must not forge the `#` partition separator.
pub(crate) fn check_account(account: &str) -> Result<()> {
    if account.is_empty()
        || account.len() > 128
        || account.contains('#')
        || account.chars().any(char::is_control)
    {
        return Err(IndexCatalogError::invalid_argument("invalid account id"));
    }
    Ok(())
}

impl SourceBinding {
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            SourceBinding::Parquet { uri } => {
                if uri.len() > MAX_SOURCE_URI_BYTES {
                    return Err(IndexCatalogError::invalid_argument(
                        "source.uri is too long",
                    ));
                }
                let parsed = url::Url::parse(uri).map_err(|_| {
                    IndexCatalogError::invalid_argument("source.uri must be an absolute URI")
                })?;
                if parsed.cannot_be_a_base() {
                    return Err(IndexCatalogError::invalid_argument(
                        "source.uri must be a hierarchical URI",
                    ));
                }
                Ok(())
            }
            SourceBinding::Iceberg {
                catalog,
                namespace,
                name,
                table_uuid,
                snapshot_id,
            } => {
                check_name("source.catalog", catalog)?;
                check_namespace(namespace)?;
                check_name("source.name", name)?;
                if !is_canonical_uuid(table_uuid) {
                    return Err(IndexCatalogError::invalid_argument(
                        "source.table_uuid must be a lowercase, non-nil UUID",
                    ));
                }
                if *snapshot_id < 0 {
                    return Err(IndexCatalogError::invalid_argument(
                        "source.snapshot_id must not be negative",
                    ));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_bindings_have_one_strict_shape() {
        let parquet: SourceBinding =
            serde_json::from_str(r#"{"type": "PARQUET", "uri": "s3://lake/docs/"}"#).unwrap();
        assert_eq!(
            parquet,
            SourceBinding::Parquet {
                uri: "s3://lake/docs/".into()
            }
        );
        let iceberg: SourceBinding = serde_json::from_str(
            r#"{"type": "ICEBERG", "catalog": "glue", "namespace": ["crm"], "name": "docs",
                "table_uuid": "7b1f6c2e-1d4a-4c55-9a1e-3b2c1d0e9f8a", "snapshot_id": 7}"#,
        )
        .unwrap();
        iceberg.check().unwrap();
        assert!(
            serde_json::from_str::<SourceBinding>(
                r#"{"type": "PARQUET", "uri": "s3://x/", "extra": 1}"#
            )
            .is_err()
        );
        assert!(
            serde_json::from_str::<SourceBinding>(r#"{"type": "parquet", "uri": "s3://x/"}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<RegisterIndexRequest>(r#"{"name": "a", "metadata_location": "s3://b/m.json", "source": {"type": "PARQUET", "uri": "s3://x/"}, "x": 1}"#).is_err());
        assert!(
            SourceBinding::Parquet {
                uri: "not a uri".into()
            }
            .check()
            .is_err()
        );
        let json = serde_json::to_value(&parquet).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"type": "PARQUET", "uri": "s3://lake/docs/"})
        );
    }

    #[test]
    fn names_keep_their_exact_code_points_but_refuse_separators() {
        check_name("n", "caf\u{e9}").unwrap();
        check_name("n", "cafe\u{301}").unwrap();
        assert!(check_name("n", "").is_err());
        assert!(check_name("n", "a\u{1f}b").is_err());
        assert!(check_name("n", "a\u{1e}b").is_err());
        assert!(check_name("n", &"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(check_account("a#b").is_err());
    }
}
