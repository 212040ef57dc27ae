//! Reading an Iceberg table's current snapshot from the upstream's storage: the metadata
//! file, the snapshot's manifest list and its manifests, parsed with the `iceberg` crate
//! once [`avro::check_container`] has walked each Avro object within its bounds.

use std::collections::HashSet;

use iceberg::spec::{
    DataContentType, FormatVersion, Manifest, ManifestContentType, ManifestList, TableMetadata,
    Type,
};
use object_store::ObjectStoreExt;
use serde_json::{Value, json};

use super::avro::{self, InflateBudget, Refusal};
use super::record::{CapturedFile, FileStats};
use super::storage::{StorageError, UpstreamFiles};

/// The largest metadata file, manifest list or manifest capture reads.
pub const MAX_METADATA_BYTES: u64 = 64 * 1024 * 1024;
/// The most distinct manifests one snapshot's manifest list may name.
pub const MAX_MANIFESTS_PER_SNAPSHOT: usize = 10_000;
/// The error code of an upstream object refused for its size: it inflates further, or
/// holds more entries or manifests, than capture reads.
pub const TOO_LARGE: &str = "UPSTREAM_OBJECT_TOO_LARGE";

/// Why reading a table failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A transient storage failure (retry).
    #[error("reading {location} failed: {message}")]
    Unavailable { location: String, message: String },
    /// The upstream's files are not what their metadata says (permanent until they change).
    #[error("{location}: {message}")]
    Corrupt { location: String, message: String },
    /// The object inflates further, or holds more entries, than capture reads
    /// ([`TOO_LARGE`]; permanent until it changes).
    #[error("{TOO_LARGE}: {location}: {message}")]
    TooLarge { location: String, message: String },
}

impl ReadError {
    /// The stable code of a refusal for size, when it is one.
    pub fn code(&self) -> Option<&'static str> {
        matches!(self, ReadError::TooLarge { .. }).then_some(TOO_LARGE)
    }
}

/// Reads the Avro object (manifest list or manifest) at `location` and walks it within its
/// bounds, spending the job's inflate `budget` (`docs/reliability.md`, "Decompression and
/// entry counts are bounded").
pub async fn read_avro(
    files: &UpstreamFiles,
    location: &str,
    budget: &InflateBudget,
) -> Result<Vec<u8>, ReadError> {
    let bytes = read_object(files, location).await?;
    match avro::check_container(&bytes, budget) {
        Ok(_) => Ok(bytes),
        Err(Refusal::TooLarge(message)) => Err(ReadError::TooLarge {
            location: location.to_owned(),
            message,
        }),
        Err(Refusal::Corrupt(message)) => Err(ReadError::Corrupt {
            location: location.to_owned(),
            message,
        }),
    }
}

pub async fn read_object(files: &UpstreamFiles, location: &str) -> Result<Vec<u8>, ReadError> {
    let at = files.locate(location)?;
    let got = at
        .store
        .get(&at.path)
        .await
        .map_err(|e| get_error(location, e))?;
    if got.meta.size > MAX_METADATA_BYTES {
        return Err(ReadError::Corrupt {
            location: location.to_owned(),
            message: format!("larger than {MAX_METADATA_BYTES} bytes"),
        });
    }
    let bytes = got.bytes().await.map_err(|e| ReadError::Unavailable {
        location: location.to_owned(),
        message: crate::status::bound_text(&e.to_string()),
    })?;
    Ok(bytes.to_vec())
}

/// How a failed read of `location` is reported: a refusal by the address policy is the
/// table's storage not being readable (permanent), a missing object is corrupt metadata,
/// anything else is transient.
fn get_error(location: &str, e: object_store::Error) -> ReadError {
    if let Some(refused) = super::storage::refused(&e) {
        return ReadError::Storage(refused);
    }
    match e {
        object_store::Error::NotFound { .. } => ReadError::Corrupt {
            location: location.to_owned(),
            message: "the object does not exist".into(),
        },
        other => ReadError::Unavailable {
            location: location.to_owned(),
            message: crate::status::bound_text(&other.to_string()),
        },
    }
}

/// The current snapshot of a table as capture records it.
pub struct SnapshotFiles {
    pub metadata: TableMetadata,
    pub raw: Value,
    pub files: Vec<CapturedFile>,
    pub delete_files: u64,
}

/// Reads the metadata at `metadata_location` and every live data file of its current
/// snapshot, at most `max_files` of them. Each manifest the list names is read once, however
/// often it is named; a list naming more than [`MAX_MANIFESTS_PER_SNAPSHOT`] distinct
/// manifests is refused.
pub async fn read_snapshot(
    files: &UpstreamFiles,
    metadata_location: &str,
    max_files: usize,
    budget: &InflateBudget,
) -> Result<SnapshotFiles, ReadError> {
    let corrupt = |location: &str, message: String| ReadError::Corrupt {
        location: location.to_owned(),
        message,
    };
    let bytes = read_object(files, metadata_location).await?;
    let raw: Value = serde_json::from_slice(&bytes)
        .map_err(|e| corrupt(metadata_location, format!("not JSON: {e}")))?;
    let metadata: TableMetadata = serde_json::from_value(raw.clone()).map_err(|e| {
        corrupt(
            metadata_location,
            format!("not Iceberg table metadata: {e}"),
        )
    })?;
    let mut out = SnapshotFiles {
        metadata,
        raw,
        files: Vec::new(),
        delete_files: 0,
    };
    let Some(snapshot) = out.metadata.current_snapshot().cloned() else {
        return Ok(out);
    };
    let version: FormatVersion = out.metadata.format_version();
    let list_location = snapshot.manifest_list().to_owned();
    let bytes = read_avro(files, &list_location, budget).await?;
    let list = ManifestList::parse_with_version(&bytes, version)
        .map_err(|e| corrupt(&list_location, format!("unreadable manifest list: {e}")))?;
    drop(bytes);
    let mut seen: HashSet<&str> = HashSet::new();
    let manifests: Vec<_> = list
        .entries()
        .iter()
        .filter(|mf| seen.insert(mf.manifest_path.as_str()))
        .collect();
    if manifests.len() > MAX_MANIFESTS_PER_SNAPSHOT {
        return Err(ReadError::TooLarge {
            location: list_location,
            message: format!(
                "the manifest list names {} distinct manifests; at most \
                 {MAX_MANIFESTS_PER_SNAPSHOT} are read",
                manifests.len()
            ),
        });
    }
    let schema = out.metadata.current_schema().clone();
    for mf in manifests {
        let bytes = read_avro(files, &mf.manifest_path, budget).await?;
        let manifest = Manifest::parse_avro(&bytes)
            .map_err(|e| corrupt(&mf.manifest_path, format!("unreadable manifest: {e}")))?;
        let part_type = manifest
            .metadata()
            .partition_spec()
            .partition_type(&schema)
            .ok();
        for entry in manifest.entries() {
            if !entry.is_alive() {
                continue;
            }
            if mf.content == ManifestContentType::Deletes
                || entry.content_type() != DataContentType::Data
            {
                out.delete_files += 1;
                continue;
            }
            if out.files.len() >= max_files {
                return Err(corrupt(
                    metadata_location,
                    format!("the snapshot has more than {max_files} data files"),
                ));
            }
            let f = entry.data_file();
            let partition = f
                .partition()
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let ty = part_type
                        .as_ref()
                        .and_then(|t| t.fields().get(i))
                        .map(|fld| fld.field_type.as_ref().clone());
                    match (v, ty) {
                        (None, _) => Value::Null,
                        (Some(l), Some(t @ Type::Primitive(_))) => l
                            .clone()
                            .try_into_json(&t)
                            .unwrap_or_else(|_| json!(format!("{l:?}"))),
                        (Some(l), _) => json!(format!("{l:?}")),
                    }
                })
                .collect();
            let stats = FileStats {
                column_sizes: f.column_sizes().iter().map(|(k, v)| (*k, *v)).collect(),
                value_counts: f.value_counts().iter().map(|(k, v)| (*k, *v)).collect(),
                null_value_counts: f
                    .null_value_counts()
                    .iter()
                    .map(|(k, v)| (*k, *v))
                    .collect(),
                nan_value_counts: f.nan_value_counts().iter().map(|(k, v)| (*k, *v)).collect(),
                lower_bounds: f
                    .lower_bounds()
                    .iter()
                    .map(|(k, v)| (*k, v.to_string()))
                    .collect(),
                upper_bounds: f
                    .upper_bounds()
                    .iter()
                    .map(|(k, v)| (*k, v.to_string()))
                    .collect(),
            };
            out.files.push(CapturedFile {
                path: f.file_path().to_owned(),
                format: format!("{:?}", f.file_format()).to_ascii_uppercase(),
                size: f.file_size_in_bytes(),
                record_count: f.record_count(),
                partition,
                stats,
            });
        }
    }
    Ok(out)
}
