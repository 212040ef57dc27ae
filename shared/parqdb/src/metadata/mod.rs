//! Strict validation of ParqDB index metadata (format version 1, IVF schema version 1).
//!
//! The catalog publishes a metadata location only after the document it names passes every
//! rule of the ParqDB format (`docs/parqdb.md`, "Metadata validation"): a reader that loads a published location must never be
//! handed a document another implementation would refuse. Validation therefore fails closed:
//! unknown fields, duplicate keys, wrong types and out-of-range integers are all errors.
//!
//! Entry points: [`validate_bytes`] (one document, never panics, suitable as a fuzz target)
//! and [`validate_successor`] (the commit rules between a base and a new document).

mod json;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use json::Json;

use crate::location::validate_relative;

/// The largest metadata document the catalog reads (16 MiB). Real documents are kilobytes;
/// the cap bounds memory for a hostile or mistaken location.
pub const MAX_METADATA_BYTES: usize = 16 * 1024 * 1024;

/// The only metadata format version this catalog understands.
pub const FORMAT_VERSION: i32 = 1;

/// The rule a document breaks. The kebab-case name leads every error message, so a caller can
/// tell which rule of the format was violated without parsing prose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The document exceeds [`MAX_METADATA_BYTES`].
    Size,
    /// Not UTF-8 JSON, or trailing content.
    Json,
    /// The same key twice in one object.
    DuplicateKey,
    UnknownField,
    MissingField,
    /// A value of the wrong JSON type.
    Type,
    /// An integer outside `int` (32-bit) or `long` (64-bit) range.
    IntRange,
    /// Not a lowercase, non-nil `8-4-4-4-12` UUID.
    Uuid,
    /// Snapshot ids: positive and unique.
    SnapshotId,
    /// Sequence numbers: positive, unique, not above `last-sequence-number`.
    SequenceNumber,
    /// A required string is empty.
    EmptyString,
    SourceKeyFields,
    IndexedRows,
    IndexSchemaVersion,
    SnapshotLog,
    CurrentSnapshotId,
    LastUpdatedMs,
    /// Logical identity differs between retained snapshots (or base and new).
    Identity,
    /// A warehouse-relative location breaks the location syntax.
    RelativeLocation,
    IvfSchemaVersion,
    IvfMetric,
    IvfParameters,
    IvfPositiveInteger,
    IvfPostingEncoding,
    IvfNlist,
    IvfNtotal,
    IvfRoles,
    /// A commit successor rule (see [`validate_successor`]).
    Successor,
    /// The absolute metadata location (outside the warehouse, unreadable, equal to the base).
    MetadataLocation,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Size => "size",
            Rule::Json => "json",
            Rule::DuplicateKey => "duplicate-key",
            Rule::UnknownField => "unknown-field",
            Rule::MissingField => "missing-field",
            Rule::Type => "type",
            Rule::IntRange => "int-range",
            Rule::Uuid => "uuid",
            Rule::SnapshotId => "snapshot-id",
            Rule::SequenceNumber => "sequence-number",
            Rule::EmptyString => "empty-string",
            Rule::SourceKeyFields => "source-key-fields",
            Rule::IndexedRows => "indexed-rows",
            Rule::IndexSchemaVersion => "index-schema-version",
            Rule::SnapshotLog => "snapshot-log",
            Rule::CurrentSnapshotId => "current-snapshot-id",
            Rule::LastUpdatedMs => "last-updated-ms",
            Rule::Identity => "identity",
            Rule::RelativeLocation => "relative-location",
            Rule::IvfSchemaVersion => "ivf-schema-version",
            Rule::IvfMetric => "ivf-metric",
            Rule::IvfParameters => "ivf-parameters",
            Rule::IvfPositiveInteger => "ivf-positive-integer",
            Rule::IvfPostingEncoding => "ivf-posting-encoding",
            Rule::IvfNlist => "ivf-nlist",
            Rule::IvfNtotal => "ivf-ntotal",
            Rule::IvfRoles => "ivf-roles",
            Rule::Successor => "successor",
            Rule::MetadataLocation => "metadata-location",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a metadata document (or a base/new pair) is refused. Each variant maps to one catalog
/// error code of the ParqDB catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// `INVALID_INDEX_METADATA`.
    #[error("{rule}: {message}")]
    InvalidIndexMetadata { rule: Rule, message: String },
    /// `UNSUPPORTED_FORMAT_VERSION`: checked before any other field, because a document of
    /// another version may legitimately have other fields.
    #[error(
        "format-version: {found} is not supported (this catalog reads format version {FORMAT_VERSION})"
    )]
    UnsupportedFormatVersion { found: i32 },
    /// `INDEX_UUID_MISMATCH`: the new document belongs to another index.
    #[error("index-uuid: new metadata belongs to index {new}, the base to index {base}")]
    IndexUuidMismatch { base: String, new: String },
}

impl MetadataError {
    /// The ParqDB catalog's error code.
    pub fn code(&self) -> &'static str {
        match self {
            MetadataError::InvalidIndexMetadata { .. } => "INVALID_INDEX_METADATA",
            MetadataError::UnsupportedFormatVersion { .. } => "UNSUPPORTED_FORMAT_VERSION",
            MetadataError::IndexUuidMismatch { .. } => "INDEX_UUID_MISMATCH",
        }
    }

    /// The violated rule of an `INVALID_INDEX_METADATA` error.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            MetadataError::InvalidIndexMetadata { rule, .. } => Some(*rule),
            _ => None,
        }
    }
}

pub(crate) fn invalid(rule: Rule, message: impl Into<String>) -> MetadataError {
    MetadataError::InvalidIndexMetadata {
        rule,
        message: message.into(),
    }
}

/// A validated index metadata document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMetadata {
    pub format_version: i32,
    pub index_uuid: String,
    pub last_updated_ms: i64,
    pub last_sequence_number: i64,
    pub current_snapshot_id: i64,
    pub snapshots: Vec<Snapshot>,
    pub snapshot_log: Vec<LogEntry>,
    pub properties: Option<BTreeMap<String, String>>,
}

/// One retained index snapshot. Maps are ordered because duplicate keys were refused while
/// parsing, so equality here is equality of the written objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub snapshot_id: i64,
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub summary: BTreeMap<String, String>,
    pub vector_field: String,
    pub source_key_fields: Vec<String>,
    pub indexed_rows: i64,
    pub index_family: String,
    pub index_schema_version: i32,
    pub metric: String,
    pub parameters: BTreeMap<String, String>,
    pub index_relations: BTreeMap<String, String>,
}

/// The fields that make two snapshots (or two documents) the same logical index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalIdentity<'a> {
    pub vector_field: &'a str,
    pub source_key_fields: &'a [String],
    pub index_family: &'a str,
    pub metric: &'a str,
}

impl Snapshot {
    pub fn identity(&self) -> LogicalIdentity<'_> {
        LogicalIdentity {
            vector_field: &self.vector_field,
            source_key_fields: &self.source_key_fields,
            index_family: &self.index_family,
            metric: &self.metric,
        }
    }

    /// Every warehouse-relative location this snapshot references: its index relations and,
    /// for IVF, the centroid metadata. Used by garbage collection.
    pub fn referenced_locations(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.index_relations.values().map(String::as_str).collect();
        if self.index_family == IVF_FAMILY
            && let Some(loc) = self.parameters.get("ivf_centroids_metadata_location")
        {
            out.push(loc);
        }
        out
    }
}

/// One `snapshot-log` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub timestamp_ms: i64,
    pub snapshot_id: i64,
}

impl IndexMetadata {
    pub fn current_snapshot(&self) -> Option<&Snapshot> {
        self.snapshots
            .iter()
            .find(|s| s.snapshot_id == self.current_snapshot_id)
    }

    /// Warehouse-relative locations referenced by any retained snapshot.
    pub fn referenced_locations(&self) -> BTreeSet<&str> {
        self.snapshots
            .iter()
            .flat_map(Snapshot::referenced_locations)
            .collect()
    }
}

/// Validates one metadata document given as raw bytes. Never panics on any input (a
/// `cargo fuzz` target can call it directly); the size cap is checked before parsing.
pub fn validate_bytes(bytes: &[u8]) -> Result<IndexMetadata, MetadataError> {
    if bytes.len() > MAX_METADATA_BYTES {
        return Err(invalid(
            Rule::Size,
            format!(
                "metadata is {} bytes; the limit is {MAX_METADATA_BYTES}",
                bytes.len()
            ),
        ));
    }
    let root = json::parse(bytes).map_err(|e| {
        if json::is_duplicate_key_error(&e) {
            invalid(Rule::DuplicateKey, e.to_string())
        } else {
            invalid(Rule::Json, format!("not a JSON document: {e}"))
        }
    })?;
    validate_document(&root)
}

// ---------------------------------------------------------------------------------------
// Typed access to the strict tree.

/// The members of one JSON object, already checked for unknown names.
struct Fields<'a> {
    path: String,
    members: &'a [(String, Json)],
}

impl<'a> Fields<'a> {
    /// `value` must be an object whose member names all appear in `allowed`.
    fn new(value: &'a Json, path: &str, allowed: &[&str]) -> Result<Self, MetadataError> {
        let Json::Object(members) = value else {
            return Err(type_error(path, "an object", value));
        };
        if let Some((name, _)) = members
            .iter()
            .find(|(name, _)| !allowed.contains(&name.as_str()))
        {
            let shown: String = name.chars().take(64).collect();
            return Err(invalid(
                Rule::UnknownField,
                format!("{path} has unknown field {shown:?}"),
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            members,
        })
    }

    fn get(&self, name: &str) -> Option<&'a Json> {
        self.members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn required(&self, name: &str) -> Result<(&'a Json, String), MetadataError> {
        let path = self.child(name);
        match self.get(name) {
            Some(v) => Ok((v, path)),
            None => Err(invalid(Rule::MissingField, format!("{path} is required"))),
        }
    }

    fn child(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    fn int(&self, name: &str) -> Result<i32, MetadataError> {
        let (v, path) = self.required(name)?;
        as_int(v, &path)
    }

    fn long(&self, name: &str) -> Result<i64, MetadataError> {
        let (v, path) = self.required(name)?;
        as_long(v, &path)
    }

    fn string(&self, name: &str) -> Result<String, MetadataError> {
        let (v, path) = self.required(name)?;
        as_string(v, &path)
    }

    fn non_empty_string(&self, name: &str) -> Result<String, MetadataError> {
        let s = self.string(name)?;
        if s.is_empty() {
            return Err(invalid(
                Rule::EmptyString,
                format!("{} must not be empty", self.child(name)),
            ));
        }
        Ok(s)
    }

    fn string_map(&self, name: &str) -> Result<BTreeMap<String, String>, MetadataError> {
        let (v, path) = self.required(name)?;
        as_string_map(v, &path)
    }

    fn array(&self, name: &str) -> Result<(&'a [Json], String), MetadataError> {
        let (v, path) = self.required(name)?;
        match v {
            Json::Array(items) => Ok((items, path)),
            other => Err(type_error(&path, "an array", other)),
        }
    }
}

fn type_error(path: &str, expected: &str, found: &Json) -> MetadataError {
    let path = if path.is_empty() {
        "the document"
    } else {
        path
    };
    invalid(
        Rule::Type,
        format!("{path} must be {expected}, found {}", found.type_name()),
    )
}

fn as_int(v: &Json, path: &str) -> Result<i32, MetadataError> {
    match v {
        Json::Int(i) => i32::try_from(*i).map_err(|_| {
            invalid(
                Rule::IntRange,
                format!("{path} is outside the 32-bit int range"),
            )
        }),
        Json::Float => Err(invalid(
            Rule::Type,
            format!("{path} must be a 32-bit integer, found a non-integer number"),
        )),
        other => Err(type_error(path, "an integer", other)),
    }
}

fn as_long(v: &Json, path: &str) -> Result<i64, MetadataError> {
    match v {
        Json::Int(i) => i64::try_from(*i).map_err(|_| {
            invalid(
                Rule::IntRange,
                format!("{path} is outside the 64-bit long range"),
            )
        }),
        Json::Float => Err(invalid(
            Rule::Type,
            format!("{path} must be a 64-bit integer, found a non-integer or out-of-range number"),
        )),
        other => Err(type_error(path, "an integer", other)),
    }
}

fn as_string(v: &Json, path: &str) -> Result<String, MetadataError> {
    match v {
        Json::String(s) => Ok(s.clone()),
        other => Err(type_error(path, "a string", other)),
    }
}

fn as_string_map(v: &Json, path: &str) -> Result<BTreeMap<String, String>, MetadataError> {
    let Json::Object(members) = v else {
        return Err(type_error(path, "an object of strings", v));
    };
    let mut out = BTreeMap::new();
    for (k, value) in members {
        let s = as_string(value, &format!("{path}.{k}"))?;
        out.insert(k.clone(), s);
    }
    Ok(out)
}

/// Lowercase `8-4-4-4-12` hexadecimal, not the nil UUID.
pub fn is_canonical_uuid(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    let shape_ok = bytes.iter().enumerate().all(|(i, b)| match i {
        8 | 13 | 18 | 23 => *b == b'-',
        _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
    });
    shape_ok && bytes.iter().any(|b| *b != b'-' && *b != b'0')
}

fn uuid_field(value: String, path: &str) -> Result<String, MetadataError> {
    if is_canonical_uuid(&value) {
        Ok(value)
    } else {
        Err(invalid(
            Rule::Uuid,
            format!("{path} must be a lowercase, non-nil 8-4-4-4-12 UUID"),
        ))
    }
}

// ---------------------------------------------------------------------------------------
// The document rules.

const ROOT_FIELDS: &[&str] = &[
    "format-version",
    "index-uuid",
    "last-updated-ms",
    "last-sequence-number",
    "current-snapshot-id",
    "snapshots",
    "snapshot-log",
    "properties",
];

const SNAPSHOT_FIELDS: &[&str] = &[
    "snapshot-id",
    "sequence-number",
    "timestamp-ms",
    "summary",
    "vector-field",
    "source-key-fields",
    "indexed-rows",
    "index-family",
    "index-schema-version",
    "metric",
    "parameters",
    "index-relations",
];

const LOG_FIELDS: &[&str] = &["timestamp-ms", "snapshot-id"];

fn validate_document(root: &Json) -> Result<IndexMetadata, MetadataError> {
    let Json::Object(members) = root else {
        return Err(type_error("", "an object", root));
    };
    // The version decides which rules apply, so it is read before anything else.
    let version = match members.iter().find(|(n, _)| n == "format-version") {
        None => return Err(invalid(Rule::MissingField, "format-version is required")),
        Some((_, v)) => as_int(v, "format-version")?,
    };
    if version != FORMAT_VERSION {
        return Err(MetadataError::UnsupportedFormatVersion { found: version });
    }
    let fields = Fields::new(root, "", ROOT_FIELDS)?;
    let index_uuid = uuid_field(fields.string("index-uuid")?, "index-uuid")?;
    let last_updated_ms = fields.long("last-updated-ms")?;
    let last_sequence_number = fields.long("last-sequence-number")?;
    let current_snapshot_id = fields.long("current-snapshot-id")?;

    let (items, path) = fields.array("snapshots")?;
    let mut snapshots = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        snapshots.push(parse_snapshot(item, &format!("{path}[{i}]"))?);
    }
    let (items, path) = fields.array("snapshot-log")?;
    let mut snapshot_log = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let entry = Fields::new(item, &format!("{path}[{i}]"), LOG_FIELDS)?;
        snapshot_log.push(LogEntry {
            timestamp_ms: entry.long("timestamp-ms")?,
            snapshot_id: entry.long("snapshot-id")?,
        });
    }
    let properties = match fields.get("properties") {
        None => None,
        Some(v) => Some(as_string_map(v, "properties")?),
    };

    let metadata = IndexMetadata {
        format_version: version,
        index_uuid,
        last_updated_ms,
        last_sequence_number,
        current_snapshot_id,
        snapshots,
        snapshot_log,
        properties,
    };
    check_invariants(&metadata)?;
    Ok(metadata)
}

fn parse_snapshot(value: &Json, path: &str) -> Result<Snapshot, MetadataError> {
    let f = Fields::new(value, path, SNAPSHOT_FIELDS)?;
    let snapshot_id = f.long("snapshot-id")?;
    if snapshot_id <= 0 {
        return Err(invalid(
            Rule::SnapshotId,
            format!("{path}.snapshot-id must be positive"),
        ));
    }
    let sequence_number = f.long("sequence-number")?;
    if sequence_number <= 0 {
        return Err(invalid(
            Rule::SequenceNumber,
            format!("{path}.sequence-number must be positive"),
        ));
    }
    let timestamp_ms = f.long("timestamp-ms")?;
    let summary = f.string_map("summary")?;
    let vector_field = f.non_empty_string("vector-field")?;

    let (items, keys_path) = f.array("source-key-fields")?;
    if items.is_empty() {
        return Err(invalid(
            Rule::SourceKeyFields,
            format!("{keys_path} must not be empty"),
        ));
    }
    let mut source_key_fields = Vec::with_capacity(items.len());
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let name = as_string(item, &format!("{keys_path}[{i}]"))?;
        if name.is_empty() {
            return Err(invalid(
                Rule::SourceKeyFields,
                format!("{keys_path}[{i}] must not be empty"),
            ));
        }
        if !seen.insert(name.clone()) {
            return Err(invalid(
                Rule::SourceKeyFields,
                format!("{keys_path} must not contain duplicates"),
            ));
        }
        source_key_fields.push(name);
    }

    let indexed_rows = f.long("indexed-rows")?;
    if indexed_rows <= 0 {
        return Err(invalid(
            Rule::IndexedRows,
            format!("{path}.indexed-rows must be positive"),
        ));
    }
    let index_family = f.non_empty_string("index-family")?;
    let index_schema_version = f.int("index-schema-version")?;
    if index_schema_version <= 0 {
        return Err(invalid(
            Rule::IndexSchemaVersion,
            format!("{path}.index-schema-version must be positive"),
        ));
    }
    let metric = f.non_empty_string("metric")?;
    let parameters = f.string_map("parameters")?;
    let index_relations = f.string_map("index-relations")?;
    for (role, location) in &index_relations {
        if role.is_empty() {
            return Err(invalid(
                Rule::EmptyString,
                format!("{path}.index-relations has an empty role name"),
            ));
        }
        validate_relative(location).map_err(|e| {
            invalid(
                Rule::RelativeLocation,
                format!("{path}.index-relations.{role}: {e}"),
            )
        })?;
    }
    let snapshot = Snapshot {
        snapshot_id,
        sequence_number,
        timestamp_ms,
        summary,
        vector_field,
        source_key_fields,
        indexed_rows,
        index_family,
        index_schema_version,
        metric,
        parameters,
        index_relations,
    };
    if snapshot.index_family == IVF_FAMILY {
        check_ivf(&snapshot, path)?;
    }
    Ok(snapshot)
}

fn check_invariants(m: &IndexMetadata) -> Result<(), MetadataError> {
    let mut ids = HashSet::new();
    let mut sequences = HashSet::new();
    for s in &m.snapshots {
        if !ids.insert(s.snapshot_id) {
            return Err(invalid(
                Rule::SnapshotId,
                format!(
                    "snapshot IDs must be unique within the index; {} appears twice",
                    s.snapshot_id
                ),
            ));
        }
        if !sequences.insert(s.sequence_number) {
            return Err(invalid(
                Rule::SequenceNumber,
                format!(
                    "sequence numbers must be unique; {} appears twice",
                    s.sequence_number
                ),
            ));
        }
        if s.sequence_number > m.last_sequence_number {
            return Err(invalid(
                Rule::SequenceNumber,
                format!(
                    "snapshot {} has sequence-number {} above last-sequence-number {}",
                    s.snapshot_id, s.sequence_number, m.last_sequence_number
                ),
            ));
        }
    }
    if let Some(first) = m.snapshots.first()
        && let Some(other) = m
            .snapshots
            .iter()
            .find(|s| s.identity() != first.identity())
    {
        return Err(invalid(
            Rule::Identity,
            format!(
                "vector-field, source-key-fields, index-family and metric must be equal across retained snapshots; snapshot {} differs from snapshot {}",
                other.snapshot_id, first.snapshot_id
            ),
        ));
    }
    let current = m
        .snapshots
        .iter()
        .filter(|s| s.snapshot_id == m.current_snapshot_id)
        .count();
    if current != 1 {
        return Err(invalid(
            Rule::CurrentSnapshotId,
            format!(
                "current-snapshot-id {} must identify one retained snapshot",
                m.current_snapshot_id
            ),
        ));
    }
    let mut previous: Option<i64> = None;
    for (i, entry) in m.snapshot_log.iter().enumerate() {
        if previous.is_some_and(|p| entry.timestamp_ms < p) {
            return Err(invalid(
                Rule::SnapshotLog,
                format!("snapshot-log[{i}]: timestamps must not decrease"),
            ));
        }
        previous = Some(entry.timestamp_ms);
        if !ids.contains(&entry.snapshot_id) {
            return Err(invalid(
                Rule::SnapshotLog,
                format!(
                    "snapshot-log[{i}] names snapshot {}, which is not retained",
                    entry.snapshot_id
                ),
            ));
        }
    }
    match m.snapshot_log.last() {
        Some(last) if last.snapshot_id == m.current_snapshot_id => {}
        _ => {
            return Err(invalid(
                Rule::SnapshotLog,
                "last entry must name current-snapshot-id",
            ));
        }
    }
    let newest = m
        .snapshots
        .iter()
        .map(|s| s.timestamp_ms)
        .chain(m.snapshot_log.iter().map(|e| e.timestamp_ms))
        .max();
    if newest.is_some_and(|t| m.last_updated_ms < t) {
        return Err(invalid(
            Rule::LastUpdatedMs,
            "last-updated-ms must not be earlier than any snapshot or snapshot-log timestamp",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// IVF family, schema version 1.

/// The only family with family rules here. Other families get the generic rules only (see
/// docs/parqdb.md): their roles and parameters are the publisher's to judge.
pub const IVF_FAMILY: &str = "ivf";

const IVF_PARAMETERS: &[&str] = &[
    "dimension",
    "nlist",
    "ntotal",
    "posting_encoding",
    "ivf_centroids_fingerprint",
    "ivf_centroids_uuid",
    "ivf_centroids_metadata_location",
];

const IVF_ROLES: &[&str] = &["ivf_centroids", "ivf_postings"];

/// A canonical base-10 positive integer: digits only, no sign, no leading zero.
fn canonical_positive(value: &str, max: i64, path: &str) -> Result<i64, MetadataError> {
    let canonical =
        !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) && !value.starts_with('0');
    if !canonical {
        return Err(invalid(
            Rule::IvfPositiveInteger,
            format!("{path} must be a positive integer in canonical base-10 representation"),
        ));
    }
    match value.parse::<i64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(invalid(
            Rule::IvfPositiveInteger,
            format!("{path} must be at most {max}"),
        )),
    }
}

fn check_ivf(s: &Snapshot, path: &str) -> Result<(), MetadataError> {
    if s.index_schema_version != 1 {
        return Err(invalid(
            Rule::IvfSchemaVersion,
            format!(
                "{path}: IVF index-schema-version {} is not supported (only 1)",
                s.index_schema_version
            ),
        ));
    }
    if s.metric != "l2_squared" && s.metric != "cosine" {
        return Err(invalid(
            Rule::IvfMetric,
            format!("{path}.metric must be l2_squared or cosine"),
        ));
    }
    let params = format!("{path}.parameters");
    if let Some(extra) = s
        .parameters
        .keys()
        .find(|k| !IVF_PARAMETERS.contains(&k.as_str()))
    {
        let shown: String = extra.chars().take(64).collect();
        return Err(invalid(
            Rule::IvfParameters,
            format!(
                "{shown:?} is not part of IVF schema version 1 ({params} has exactly seven parameters)"
            ),
        ));
    }
    for name in IVF_PARAMETERS {
        if !s.parameters.contains_key(*name) {
            return Err(invalid(
                Rule::IvfParameters,
                format!("{params}.{name} is required by IVF schema version 1"),
            ));
        }
    }
    let p = |name: &str| {
        s.parameters
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    };
    let int_max = i64::from(i32::MAX);
    canonical_positive(p("dimension"), int_max, &format!("{params}.dimension"))?;
    let nlist = canonical_positive(p("nlist"), int_max, &format!("{params}.nlist"))?;
    let ntotal = canonical_positive(p("ntotal"), i64::MAX, &format!("{params}.ntotal"))?;
    if !matches!(p("posting_encoding"), "source" | "lvq4" | "lvq8") {
        return Err(invalid(
            Rule::IvfPostingEncoding,
            format!("{params}.posting_encoding must be source, lvq4, or lvq8"),
        ));
    }
    uuid_field(
        p("ivf_centroids_fingerprint").to_owned(),
        &format!("{params}.ivf_centroids_fingerprint"),
    )?;
    uuid_field(
        p("ivf_centroids_uuid").to_owned(),
        &format!("{params}.ivf_centroids_uuid"),
    )?;
    validate_relative(p("ivf_centroids_metadata_location")).map_err(|e| {
        invalid(
            Rule::RelativeLocation,
            format!("{params}.ivf_centroids_metadata_location: {e}"),
        )
    })?;
    if nlist > ntotal {
        return Err(invalid(
            Rule::IvfNlist,
            format!("{params}: nlist {nlist} must not exceed ntotal {ntotal}"),
        ));
    }
    if s.indexed_rows != ntotal {
        return Err(invalid(
            Rule::IvfNtotal,
            format!(
                "{path}: indexed-rows {} must equal parameters.ntotal {ntotal}",
                s.indexed_rows
            ),
        ));
    }
    let roles: Vec<&str> = s.index_relations.keys().map(String::as_str).collect();
    if roles != IVF_ROLES {
        for role in IVF_ROLES {
            if !s.index_relations.contains_key(*role) {
                return Err(invalid(
                    Rule::IvfRoles,
                    format!(
                        "every IVF snapshot requires ivf_centroids and ivf_postings; {path} lacks {role}"
                    ),
                ));
            }
        }
        return Err(invalid(
            Rule::IvfRoles,
            format!(
                "IVF schema version 1 defines exactly two index relation roles (ivf_centroids, ivf_postings); {path} has others"
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Commit successor rules.

/// Checks that `new` may replace `base` in a commit (`docs/parqdb.md`, "Commit successor rules").
/// Both documents must already be valid on their own. The location rule (`base == new` is
/// refused) is the catalog's, because it concerns locations rather than documents.
pub fn validate_successor(base: &IndexMetadata, new: &IndexMetadata) -> Result<(), MetadataError> {
    if base.index_uuid != new.index_uuid {
        return Err(MetadataError::IndexUuidMismatch {
            base: base.index_uuid.clone(),
            new: new.index_uuid.clone(),
        });
    }
    if let (Some(b), Some(n)) = (base.snapshots.first(), new.snapshots.first())
        && b.identity() != n.identity()
    {
        return Err(invalid(
            Rule::Identity,
            "vector-field, source-key-fields, index-family and metric must not change on commit",
        ));
    }
    if new.last_updated_ms < base.last_updated_ms {
        return Err(invalid(
            Rule::Successor,
            "last-updated-ms must not decrease",
        ));
    }
    if new.last_sequence_number < base.last_sequence_number {
        return Err(invalid(
            Rule::Successor,
            "last-sequence-number must not decrease",
        ));
    }
    let mut added = Vec::new();
    for s in &new.snapshots {
        match base
            .snapshots
            .iter()
            .find(|b| b.snapshot_id == s.snapshot_id)
        {
            Some(b) if b != s => {
                return Err(invalid(
                    Rule::Successor,
                    format!(
                        "snapshot {} exists in the base: retained snapshots are unchanged and snapshot ids are never reused",
                        s.snapshot_id
                    ),
                ));
            }
            Some(_) => {}
            None => added.push(s),
        }
    }
    if added.len() > 1 {
        return Err(invalid(
            Rule::Successor,
            "a commit adds at most one snapshot",
        ));
    }
    let expected_sequence = base.last_sequence_number.checked_add(1);
    if let Some(s) = added.first()
        && Some(s.sequence_number) != expected_sequence
    {
        return Err(invalid(
            Rule::Successor,
            format!(
                "the added snapshot {} must have sequence-number {} (base last-sequence-number + 1)",
                s.snapshot_id,
                base.last_sequence_number.saturating_add(1)
            ),
        ));
    }
    let retained: HashSet<i64> = new.snapshots.iter().map(|s| s.snapshot_id).collect();
    let base_log: Vec<&LogEntry> = base
        .snapshot_log
        .iter()
        .filter(|e| retained.contains(&e.snapshot_id))
        .collect();
    let prefix_ok = base_log.len() <= new.snapshot_log.len()
        && base_log
            .iter()
            .zip(new.snapshot_log.iter())
            .all(|(b, n)| *b == n);
    if !prefix_ok {
        return Err(invalid(
            Rule::SnapshotLog,
            "the base snapshot-log, restricted to retained snapshots, must be a prefix of the new log",
        ));
    }
    let appended = &new.snapshot_log[base_log.len()..];
    if appended.len() > 1 {
        return Err(invalid(
            Rule::SnapshotLog,
            "a commit appends at most one snapshot-log entry",
        ));
    }
    if let (Some(entry), Some(s)) = (appended.first(), added.first())
        && entry.snapshot_id != s.snapshot_id
    {
        return Err(invalid(
            Rule::SnapshotLog,
            "the appended snapshot-log entry must name the added snapshot (a rollback adds no snapshot)",
        ));
    }
    Ok(())
}
