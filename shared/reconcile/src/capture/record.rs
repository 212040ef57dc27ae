//! What capture stores: the captured state object (object storage), the capture pointer
//! (one small metastore item per table) and the validation-error records.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One data file of the captured snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapturedFile {
    pub path: String,
    /// `PARQUET`, `ORC`, `AVRO`, `PUFFIN`.
    pub format: String,
    pub size: u64,
    pub record_count: u64,
    /// Partition values in the order of the partition spec's fields (JSON), empty when
    /// unpartitioned.
    #[serde(default)]
    pub partition: Vec<Value>,
    /// Per-column statistics by field id, as the manifest gives them.
    #[serde(default)]
    pub stats: FileStats,
}

/// Column statistics of one file (keys are Iceberg field ids; bounds are rendered values).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FileStats {
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub column_sizes: std::collections::BTreeMap<i32, u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub value_counts: std::collections::BTreeMap<i32, u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub null_value_counts: std::collections::BTreeMap<i32, u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub nan_value_counts: std::collections::BTreeMap<i32, u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lower_bounds: std::collections::BTreeMap<i32, String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub upper_bounds: std::collections::BTreeMap<i32, String>,
}

/// The captured state of one table at one snapshot: an object in the catalog's storage.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CapturedTable {
    pub catalog_id: String,
    pub relation_id: String,
    pub namespace: Vec<String>,
    pub name: String,
    pub upstream_namespace: Vec<String>,
    pub upstream_name: String,
    pub format: String,
    /// `null` for a table without a snapshot.
    pub snapshot_id: Option<i64>,
    pub metadata_location: String,
    pub location: String,
    pub schema: Value,
    pub partition_spec: Value,
    pub files: Vec<CapturedFile>,
    /// Delete files of the snapshot (position or equality deletes): counted, not listed.
    #[serde(default)]
    pub delete_files: u64,
    /// The upstream's metadata document exactly as read (never rewritten).
    pub metadata: Value,
    pub captured_at: String,
}

/// The validation outcome a pointer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ValidationState {
    /// Every captured file passed.
    Valid,
    /// One or more files failed: one error record each.
    Invalid,
    /// The table's files cannot be read through Flotilla (`reason` says why).
    NotReadable,
    /// Capture of the table did not finish repeatedly at this upstream version (the process
    /// died): its files are not read again until the version changes or an operator asks
    /// for a revalidation (`capture::attempt`).
    Quarantined,
}

impl ValidationState {
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationState::Valid => "VALID",
            ValidationState::Invalid => "INVALID",
            ValidationState::NotReadable => "NOT_READABLE",
            ValidationState::Quarantined => "QUARANTINED",
        }
    }
}

/// The capture pointer of one table (`CAT#{c}` / `CAPTURE#{relation id}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapturePointer {
    pub relation_id: String,
    pub overlay_id: String,
    pub integration_id: String,
    pub namespace: Vec<String>,
    pub name: String,
    pub format: String,
    pub snapshot_id: Option<i64>,
    /// The upstream metadata location captured (the change detector with `snapshot_id`).
    pub metadata_location: String,
    /// The captured state object, relative to the catalog's warehouse (absent when not
    /// readable).
    pub object: Option<String>,
    pub files: u64,
    pub records: u64,
    pub bytes: u64,
    /// Increases by one with every published validation.
    pub validation_generation: u64,
    /// The unique id of the current validation: its error records carry it.
    pub validation_id: String,
    pub validation: ValidationState,
    pub errors: u64,
    /// Why the table is not readable (`NOT_READABLE`) or quarantined (`QUARANTINED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Query-visible despite current file errors (set through the API; capture keeps it).
    #[serde(default)]
    pub visibility_override: bool,
    pub captured_at: String,
    pub overlay_generation: u64,
    pub integration_generation: u64,
}

/// Whether engines may query a table, and why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Visibility {
    pub visible: bool,
    /// `VALID`, `INVALID`, `NOT_READABLE`, `QUARANTINED` or `NOT_CAPTURED`.
    pub state: &'static str,
    pub errors: u64,
    pub visibility_override: bool,
    pub reason: Option<String>,
}

impl Visibility {
    /// The visibility of a table with this pointer (`None`: never captured).
    pub fn of(pointer: Option<&CapturePointer>) -> Self {
        match pointer {
            None => Self {
                visible: false,
                state: "NOT_CAPTURED",
                errors: 0,
                visibility_override: false,
                reason: Some("the table has not been captured yet".into()),
            },
            Some(p) => Self {
                visible: match p.validation {
                    ValidationState::Valid => true,
                    ValidationState::Invalid => p.visibility_override,
                    ValidationState::NotReadable | ValidationState::Quarantined => false,
                },
                state: p.validation.as_str(),
                errors: p.errors,
                visibility_override: p.visibility_override,
                reason: match p.validation {
                    ValidationState::NotReadable | ValidationState::Quarantined => p.reason.clone(),
                    ValidationState::Invalid if !p.visibility_override => {
                        Some(format!("{} captured file(s) failed validation", p.errors))
                    }
                    _ => None,
                },
            },
        }
    }
}

/// One validation error: a captured file inconsistent with the table's metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationErrorRecord {
    pub catalog_id: String,
    pub relation_id: String,
    pub namespace: Vec<String>,
    pub name: String,
    /// `namespace.name` as displayed.
    pub display_path: String,
    pub format: String,
    pub file_path: String,
    pub message: String,
    /// The error's code when it is not a file's (`CAPTURE_QUARANTINED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub validation_id: String,
    pub validation_generation: u64,
}
