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
    /// When the version this pointer records became query-visible (`None` while it is not
    /// visible): kept by later validations of the same version, so it is the time engines
    /// could first read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_at: Option<String>,
    /// Since when the table's captures have failed in a row (`INVALID`, `NOT_READABLE` or
    /// `QUARANTINED`; `None` when this one did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<String>,
    /// How many captures in a row failed, this one included (`0` when it did not).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_attempts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CapturePointer {
    /// Whether this capture is a failure of the table (a status lists it).
    pub fn failed(&self) -> bool {
        self.validation != ValidationState::Valid
    }

    /// Sets the times this pointer carries from `previous`, the pointer it is about to
    /// replace: [`visible_at`](Self::visible_at) (none when it is not visible, the previous
    /// one when that was visible at the same version, else `now`) and the failure streak
    /// ([`failing_since`](Self::failing_since), [`failed_attempts`](Self::failed_attempts)).
    pub fn settle_times(&mut self, previous: Option<&CapturePointer>, now: &str) {
        self.settle_failure(previous, now);
        self.settle_visible_at(previous, now);
    }

    fn settle_failure(&mut self, previous: Option<&CapturePointer>, now: &str) {
        let streak = previous.filter(|p| p.failed());
        (self.failing_since, self.failed_attempts) = if self.failed() {
            (
                streak
                    .and_then(|p| p.failing_since.clone())
                    .or_else(|| Some(now.to_owned())),
                streak.map_or(0, |p| p.failed_attempts) + 1,
            )
        } else {
            (None, 0)
        };
    }

    /// Sets [`visible_at`](Self::visible_at) alone (a visibility override changed).
    pub fn settle_visible_at(&mut self, previous: Option<&CapturePointer>, now: &str) {
        self.visible_at = if !Visibility::of(Some(self)).visible {
            None
        } else {
            previous
                .filter(|p| {
                    p.metadata_location == self.metadata_location
                        && p.snapshot_id == self.snapshot_id
                })
                .and_then(|p| p.visible_at.clone())
                .or_else(|| Some(now.to_owned()))
        };
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(location: &str, validation: ValidationState) -> CapturePointer {
        CapturePointer {
            relation_id: "r".into(),
            overlay_id: "o".into(),
            integration_id: "i".into(),
            namespace: vec!["sales".into()],
            name: "orders".into(),
            format: "ICEBERG".into(),
            snapshot_id: Some(1),
            metadata_location: location.into(),
            object: None,
            files: 0,
            records: 0,
            bytes: 0,
            validation_generation: 1,
            validation_id: "v".into(),
            validation,
            errors: u64::from(validation == ValidationState::Invalid),
            reason: None,
            visibility_override: false,
            captured_at: "t0".into(),
            overlay_generation: 1,
            integration_generation: 1,
            visible_at: None,
            failing_since: None,
            failed_attempts: 0,
        }
    }

    /// `visible_at` is when a version first became visible (kept by revalidations of it,
    /// reset by a new version, cleared while invisible); a failure streak counts attempts
    /// from its first failure.
    #[test]
    fn times_follow_versions_and_failure_streaks() {
        let mut first = pointer("m1", ValidationState::Valid);
        first.settle_times(None, "t1");
        assert_eq!(first.visible_at.as_deref(), Some("t1"));
        assert_eq!(
            (first.failing_since.as_deref(), first.failed_attempts),
            (None, 0)
        );

        let mut again = pointer("m1", ValidationState::Valid);
        again.settle_times(Some(&first), "t2");
        assert_eq!(again.visible_at.as_deref(), Some("t1"), "same version");

        let mut bad = pointer("m2", ValidationState::NotReadable);
        bad.settle_times(Some(&again), "t3");
        assert_eq!(bad.visible_at, None);
        assert_eq!(
            (bad.failing_since.as_deref(), bad.failed_attempts),
            (Some("t3"), 1)
        );
        let mut still = pointer("m2", ValidationState::NotReadable);
        still.settle_times(Some(&bad), "t4");
        assert_eq!(
            (still.failing_since.as_deref(), still.failed_attempts),
            (Some("t3"), 2)
        );

        let mut fixed = pointer("m2", ValidationState::Valid);
        fixed.settle_times(Some(&still), "t5");
        assert_eq!(fixed.visible_at.as_deref(), Some("t5"), "a new version");
        assert_eq!(fixed.failed_attempts, 0);

        // An override makes an invalid version visible from then on.
        let mut invalid = pointer("m3", ValidationState::Invalid);
        invalid.settle_times(Some(&fixed), "t6");
        assert_eq!(invalid.visible_at, None);
        let before = invalid.clone();
        invalid.visibility_override = true;
        invalid.settle_visible_at(Some(&before), "t7");
        assert_eq!(invalid.visible_at.as_deref(), Some("t7"));
        assert_eq!(
            invalid.failed_attempts, 1,
            "an override is no capture attempt"
        );
    }
}
