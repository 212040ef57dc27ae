//! Capture of Delta tables (`docs/capture.md`, "Delta tables"): Unity Catalog tables from
//! their Delta log (read through the credentials Unity vends for the table), Delta Sharing
//! tables from the sharing protocol's table query (presigned file URLs). Both record the
//! Delta version as the snapshot identity, the Delta schema and partition columns, the live
//! data files with their statistics, and validate every file's Parquet footer against the
//! Delta schema. Publication, fencing and visibility are the Iceberg capture's own.
//!
//! A table whose protocol needs a feature this capture does not implement (column mapping,
//! deletion vectors on live files, unknown reader features) is published `NOT_READABLE`
//! with that reason, never with a partial or wrong file list.

pub mod check;
pub mod log;

use std::collections::BTreeMap;

use flotilla_catalog_access::spi::{
    CatalogClient, CatalogProtocol, DeltaSharedFile, UpstreamNamespace,
};
use flotilla_domain::model::RelationRecord;
use futures::StreamExt;
use parquet::file::metadata::ParquetMetaData;
use serde_json::{Value, json};

use super::iceberg::ReadError;
use super::record::{CapturePointer, CapturedFile, CapturedTable, ValidationState};
use super::select::DELTA;
use super::storage::{CatalogFiles, StorageError, UpstreamFiles};
use super::validate::{self, FooterError};
use super::{Job, PlannedTable, Published, TableError, store_object};
use check::DeltaColumn;

/// One live file as capture validates it.
struct LiveFile {
    captured: CapturedFile,
    records_stated: bool,
    /// Where its bytes are: a storage location, or a shared file's presigned URL.
    source: Source,
}

enum Source {
    Stored(String),
    Shared(DeltaSharedFile),
}

/// The table at one version, as read from the upstream.
struct DeltaSnapshot {
    version: i64,
    metadata_location: String,
    location: String,
    protocol: Value,
    metadata: Value,
    files: Vec<LiveFile>,
}

/// What reading a table came to: its snapshot, the storage it was read from, its Delta
/// columns, partition columns and schema.
struct Read {
    snap: DeltaSnapshot,
    upstream: UpstreamFiles,
    columns: Vec<DeltaColumn>,
    partition_columns: Vec<String>,
    schema: Value,
}

/// One file's check: a validation error (if any) and the footer's row count (if read).
type FileCheck = Result<(Option<String>, Option<u64>), String>;

/// How reading a table ended short of a snapshot.
enum Short {
    /// At the captured version: nothing more to read, nothing to write.
    Unchanged,
    /// Not capturable or not readable through Flotilla (recorded with the reason, and the
    /// version and its metadata location when they are known).
    NotReadable(String, Option<(i64, String)>),
    /// The table's own log or listing cannot be interpreted: one error against it.
    Corrupt { location: String, message: String },
    /// Transient: retry.
    Failed(TableError),
}

impl From<ReadError> for Short {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Storage(StorageError::NotReadable(r)) => Short::NotReadable(r, None),
            ReadError::Storage(e @ StorageError::Invalid { .. }) => {
                Short::NotReadable(e.to_string(), None)
            }
            e @ ReadError::Unavailable { .. } => Short::Failed(TableError::Failed {
                retryable: true,
                reason: e.to_string(),
            }),
            ReadError::Corrupt { location, message } => Short::Corrupt { location, message },
            e @ ReadError::TooLarge { .. } => Short::Failed(TableError::Failed {
                retryable: false,
                reason: e.to_string(),
            }),
        }
    }
}

fn up_ns(levels: &[String]) -> UpstreamNamespace {
    UpstreamNamespace::new(levels.iter().cloned())
}

impl Job<'_> {
    /// Captures one Delta table (the Delta counterpart of the Iceberg table capture).
    pub(super) async fn delta_table(
        &self,
        client: &dyn CatalogClient,
        files: &CatalogFiles,
        table: &PlannedTable,
    ) -> Result<Published, TableError> {
        let rel = &table.relation.value;
        let Some(m) = rel.managed_by.as_ref() else {
            return Err(TableError::Failed {
                retryable: false,
                reason: "not an overlay table".into(),
            });
        };
        let previous = table.pointer.as_ref().map(|p| &p.value);
        let now = self.state.clock.now_rfc3339();
        let mut pointer = CapturePointer {
            relation_id: rel.id.clone(),
            overlay_id: m.overlay_id.clone(),
            integration_id: m.integration_id.clone(),
            namespace: rel.namespace.segments().to_vec(),
            name: rel.name.clone(),
            format: DELTA.into(),
            snapshot_id: None,
            metadata_location: rel.location.clone().unwrap_or_default(),
            object: None,
            files: 0,
            records: 0,
            bytes: 0,
            validation_generation: previous.map_or(0, |p| p.validation_generation) + 1,
            validation_id: flotilla_domain::names::new_id(),
            validation: ValidationState::Valid,
            errors: 0,
            reason: None,
            visibility_override: previous.is_some_and(|p| p.visibility_override),
            captured_at: now.clone(),
            overlay_generation: self.plan.observed.overlay.generation,
            integration_generation: self.plan.observed.integration.generation,
            visible_at: None,
            failing_since: None,
            failed_attempts: 0,
        };
        // The previous capture's version and metadata location, when they are what to
        // compare with (a table replaced at another location is not unchanged).
        let captured_version = previous
            .filter(|p| p.format == DELTA && !self.opts.revalidate)
            .and_then(|p| Some((p.snapshot_id?, p.metadata_location.clone())));
        let ns = up_ns(&m.upstream_namespace);
        let columns_ids = check::field_ids(&rel.schema);
        let read = match client.protocol() {
            CatalogProtocol::DeltaSharing => {
                self.read_shared(
                    client,
                    &ns,
                    &m.upstream_name,
                    captured_version,
                    &columns_ids,
                )
                .await
            }
            _ => {
                self.read_log(
                    client,
                    &ns,
                    &m.upstream_name,
                    rel,
                    captured_version,
                    &columns_ids,
                )
                .await
            }
        };
        let mut errors: Vec<(String, String)> = Vec::new();
        let mut validated = 0;
        match read {
            Err(Short::Unchanged) => {
                return Ok(Published {
                    unchanged: true,
                    state: previous.map_or(ValidationState::Valid, |p| p.validation),
                    files: 0,
                    validated: 0,
                    errors: 0,
                    reason: None,
                });
            }
            Err(Short::Failed(e)) => return Err(e),
            Err(Short::NotReadable(reason, version)) => {
                if let Some((v, location)) = version {
                    pointer.snapshot_id = Some(v);
                    pointer.metadata_location = location;
                }
                // Not readable again for the same reason at the same version: nothing to
                // publish (a revalidation publishes anyway).
                if !self.opts.revalidate
                    && let Some(p) = previous
                    && p.format == DELTA
                    && p.validation == ValidationState::NotReadable
                    && p.reason.as_deref() == Some(reason.as_str())
                    && p.snapshot_id == pointer.snapshot_id
                {
                    return Ok(Published {
                        unchanged: true,
                        state: ValidationState::NotReadable,
                        files: 0,
                        validated: 0,
                        errors: 0,
                        reason: None,
                    });
                }
                pointer.validation = ValidationState::NotReadable;
                pointer.reason = Some(reason);
            }
            Err(Short::Corrupt { location, message }) => errors.push((location, message)),
            Ok(Read {
                snap,
                upstream,
                columns,
                partition_columns,
                schema,
            }) => {
                // A shared table that states no version is marked once its query answered,
                // before its files are read (a stated version was marked before the query).
                self.begin_attempt(rel, &format!("delta-version:{}", snap.version))
                    .await?;
                let (mut file_errors, rows) = self
                    .validate_delta(client, &upstream, &columns, &partition_columns, &snap.files)
                    .await?;
                validated = snap.files.len() as u64;
                errors.append(&mut file_errors);
                pointer.snapshot_id = Some(snap.version);
                pointer.metadata_location = snap.metadata_location.clone();
                // A file whose stats state no record count is recorded with its footer's.
                let files_out: Vec<CapturedFile> = snap
                    .files
                    .into_iter()
                    .zip(rows)
                    .map(|(f, rows)| {
                        let mut c = f.captured;
                        if !f.records_stated {
                            c.record_count = rows.unwrap_or(0);
                        }
                        c
                    })
                    .collect();
                pointer.files = files_out.len() as u64;
                pointer.records = files_out.iter().map(|f| f.record_count).sum();
                pointer.bytes = files_out.iter().map(|f| f.size).sum();
                let object = CapturedTable {
                    catalog_id: self.catalog_id().to_owned(),
                    relation_id: rel.id.clone(),
                    namespace: pointer.namespace.clone(),
                    name: rel.name.clone(),
                    upstream_namespace: m.upstream_namespace.clone(),
                    upstream_name: m.upstream_name.clone(),
                    format: DELTA.into(),
                    snapshot_id: Some(snap.version),
                    metadata_location: snap.metadata_location,
                    location: snap.location,
                    schema,
                    partition_spec: json!({"partition_columns": partition_columns}),
                    files: files_out,
                    delete_files: 0,
                    metadata: json!({"protocol": snap.protocol, "metaData": snap.metadata}),
                    captured_at: now,
                };
                pointer.object =
                    Some(store_object(files, &rel.id, &pointer.validation_id, &object).await?);
            }
        }
        self.publish(table, files, pointer, errors, validated).await
    }

    /// Unity: the Delta log at the table's storage location, through the credentials the
    /// upstream vends for the table (none for a local `file://` location).
    async fn read_log(
        &self,
        client: &dyn CatalogClient,
        ns: &UpstreamNamespace,
        name: &str,
        rel: &RelationRecord,
        captured_version: Option<(i64, String)>,
        ids: &BTreeMap<String, i32>,
    ) -> Result<Read, Short> {
        let Some(location) = rel.location.clone() else {
            return Err(Short::NotReadable(
                "the upstream states no storage location for the table".into(),
                None,
            ));
        };
        let vended = if UpstreamFiles::needs_credentials(&location) {
            match client.vend_storage_credentials(ns, name).await {
                Ok(mut v) => {
                    // The integration's S3 endpoint and region win over what the upstream
                    // states (Unity states none), as in integration validation.
                    let props = &self.plan.observed.integration.properties;
                    for key in ["s3.endpoint", "s3.region"] {
                        if let Some(value) = props.get(key).filter(|s| !s.trim().is_empty()) {
                            v.settings.insert(key.to_owned(), value.trim().to_owned());
                        }
                    }
                    Some(v)
                }
                Err(e) if e.is_retryable() => {
                    return Err(Short::Failed(TableError::Failed {
                        retryable: true,
                        reason: format!("credential vending failed: {e}"),
                    }));
                }
                Err(e) => {
                    return Err(Short::NotReadable(
                        format!("the upstream vends no storage credentials for the table ({e})"),
                        None,
                    ));
                }
            }
        } else {
            None
        };
        let upstream = UpstreamFiles::for_host(vended, &self.state.config);
        let tip = log::tip(&upstream, &location).await?;
        if captured_version == Some((tip.version, log::commit_location(&location, tip.version))) {
            return Err(Short::Unchanged);
        }
        // The version is known now: the attempt is marked before the log is replayed.
        self.begin_attempt(rel, &log::commit_location(&location, tip.version))
            .await
            .map_err(Short::Failed)?;
        let snap = log::replay(&upstream, &location, &tip, self.opts.max_files).await?;
        let (columns, partition_columns, schema) = table_schema(&snap.metadata, &location)?;
        let at = Some((snap.version, log::commit_location(&location, snap.version)));
        if let Some(reason) = check::unsupported(&snap.protocol, &snap.metadata) {
            return Err(Short::NotReadable(format!("not capturable: {reason}"), at));
        }
        if let Some(f) = snap.files.iter().find(|f| f.deletion_vector) {
            return Err(Short::NotReadable(
                format!(
                    "not capturable: the live file {} carries a deletion vector (the Delta \
                     protocol feature deletionVectors is not supported on live files)",
                    f.path
                ),
                at,
            ));
        }
        let files = snap
            .files
            .into_iter()
            .map(|a| {
                let path = log::file_location(&location, &a.path);
                live_file(
                    path.clone(),
                    a.size,
                    a.stats.as_deref(),
                    &a.partition_values,
                    &partition_columns,
                    &columns,
                    ids,
                    Source::Stored(path),
                )
            })
            .collect();
        Ok(Read {
            snap: DeltaSnapshot {
                version: snap.version,
                metadata_location: log::commit_location(&location, snap.version),
                location,
                protocol: snap.protocol,
                metadata: snap.metadata,
                files,
            },
            upstream,
            columns,
            partition_columns,
            schema,
        })
    }

    /// Delta Sharing: the table query's file listing (presigned URLs, never stored).
    async fn read_shared(
        &self,
        client: &dyn CatalogClient,
        ns: &UpstreamNamespace,
        name: &str,
        captured_version: Option<(i64, String)>,
        ids: &BTreeMap<String, i32>,
    ) -> Result<Read, Short> {
        let listing = client.query_delta_files(ns, name).await.map_err(|e| {
            if e.is_retryable() {
                Short::Failed(TableError::Failed {
                    retryable: true,
                    reason: format!("the table query failed: {e}"),
                })
            } else {
                Short::NotReadable(
                    format!("the sharing server lists no files for it ({e})"),
                    None,
                )
            }
        })?;
        let token = format!(
            "delta-sharing:{}.{name}@{}",
            ns.levels().join("."),
            listing.version
        );
        if captured_version == Some((listing.version, token.clone())) {
            return Err(Short::Unchanged);
        }
        let (columns, partition_columns, schema) = table_schema(&listing.metadata, &token)?;
        let at = Some((listing.version, token.clone()));
        if let Some(reason) = check::unsupported(&listing.protocol, &listing.metadata) {
            return Err(Short::NotReadable(format!("not capturable: {reason}"), at));
        }
        if let Some(f) = listing.files.iter().find(|f| f.deletion_vector) {
            return Err(Short::NotReadable(
                format!(
                    "not capturable: the shared file {} carries a deletion vector",
                    f.id
                ),
                at,
            ));
        }
        if listing.files.len() > self.opts.max_files {
            return Err(Short::Corrupt {
                location: token,
                message: format!("the table has more than {} data files", self.opts.max_files),
            });
        }
        let files = listing
            .files
            .into_iter()
            .map(|f| {
                live_file(
                    f.display_path(),
                    f.size,
                    f.stats.as_deref(),
                    &f.partition_values,
                    &partition_columns,
                    &columns,
                    ids,
                    Source::Shared(f.clone()),
                )
            })
            .collect();
        Ok(Read {
            snap: DeltaSnapshot {
                version: listing.version,
                metadata_location: token.clone(),
                location: token,
                protocol: listing.protocol,
                metadata: listing.metadata,
                files,
            },
            upstream: UpstreamFiles::new(None, false),
            columns,
            partition_columns,
            schema,
        })
    }

    /// Reads and checks every file's footer, `file_concurrency` at a time.
    async fn validate_delta(
        &self,
        client: &dyn CatalogClient,
        upstream: &UpstreamFiles,
        columns: &[DeltaColumn],
        partition_columns: &[String],
        files: &[LiveFile],
    ) -> Result<(Vec<(String, String)>, Vec<Option<u64>>), TableError> {
        let checks: Vec<_> = files
            .iter()
            .map(|f| async move {
                let meta = match &f.source {
                    Source::Stored(location) => match upstream.locate(location) {
                        Ok(at) => {
                            validate::read_footer(at.store.as_ref(), &at.path, f.captured.size)
                                .await
                        }
                        Err(e) => Err(FooterError::Invalid(e.to_string())),
                    },
                    Source::Shared(file) => shared_footer(client, file, f.captured.size).await,
                };
                match meta {
                    Ok(meta) => Ok((
                        check::check(
                            &meta,
                            columns,
                            partition_columns,
                            &f.captured,
                            f.records_stated,
                        )
                        .err(),
                        rows(&meta),
                    )),
                    Err(FooterError::Invalid(m)) => Ok((Some(m), None)),
                    Err(FooterError::Transient(m)) => Err(m),
                }
            })
            .collect();
        let results: Vec<FileCheck> = futures::stream::iter(checks)
            .buffered(self.opts.file_concurrency.max(1))
            .collect()
            .await;
        let mut errors = Vec::new();
        let mut rows = Vec::with_capacity(files.len());
        for (f, r) in files.iter().zip(results) {
            match r {
                Ok((None, n)) => rows.push(n),
                Ok((Some(message), n)) => {
                    rows.push(n);
                    errors.push((f.captured.path.clone(), message));
                }
                Err(m) => {
                    return Err(TableError::Failed {
                        retryable: true,
                        reason: format!("reading {} failed: {m}", f.captured.path),
                    });
                }
            }
        }
        Ok((errors, rows))
    }
}

fn rows(meta: &ParquetMetaData) -> Option<u64> {
    u64::try_from(meta.file_metadata().num_rows()).ok()
}

/// The Delta schema and partition columns of a `metaData` action.
fn table_schema(
    metadata: &Value,
    location: &str,
) -> Result<(Vec<DeltaColumn>, Vec<String>, Value), Short> {
    let corrupt = |message: String| Short::Corrupt {
        location: location.to_owned(),
        message,
    };
    let schema_string = metadata
        .get("schemaString")
        .and_then(Value::as_str)
        .ok_or_else(|| corrupt("the Delta metaData has no schemaString".into()))?;
    let (schema, columns) = check::parse_schema(schema_string).map_err(corrupt)?;
    let partition_columns = metadata
        .get("partitionColumns")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok((columns, partition_columns, schema))
}

#[allow(clippy::too_many_arguments)]
fn live_file(
    path: String,
    size: u64,
    stats: Option<&str>,
    partition_values: &BTreeMap<String, Option<String>>,
    partition_columns: &[String],
    columns: &[DeltaColumn],
    ids: &BTreeMap<String, i32>,
    source: Source,
) -> LiveFile {
    let (records, stats) = check::parse_stats(stats, columns, ids);
    LiveFile {
        captured: CapturedFile {
            path,
            format: "PARQUET".into(),
            size,
            record_count: records.unwrap_or(0),
            partition: partition_columns
                .iter()
                .map(|c| match partition_values.get(c) {
                    Some(Some(v)) => json!(v),
                    _ => Value::Null,
                })
                .collect(),
            stats,
        },
        records_stated: records.is_some(),
        source,
    }
}

/// Reads the footer of a shared file through its presigned URL (ranged reads).
async fn shared_footer(
    client: &dyn CatalogClient,
    file: &DeltaSharedFile,
    size: u64,
) -> Result<ParquetMetaData, FooterError> {
    use FooterError::{Invalid, Transient};
    let fetch = |range: std::ops::Range<u64>| async move {
        client
            .read_shared_file_range(file, range)
            .await
            .map_err(|e| match e {
                flotilla_catalog_access::CatalogAccessError::NotFound(_) => {
                    Invalid("the file does not exist".into())
                }
                // The presigned URL (or where it redirects) is refused by the address
                // policy, or is not a URL: permanent, never retried.
                flotilla_catalog_access::CatalogAccessError::Config(t) => {
                    Invalid(format!("the shared file's URL cannot be read: {t}"))
                }
                other => Transient(crate::status::bound_text(&other.to_string())),
            })
    };
    super::validate::footer_from(size, "the listing", fetch).await
}
