//! Table commits: the spec's requirements are checked and its updates applied with the
//! `iceberg` crate, the next metadata file is written to the warehouse, and the pointer (the
//! relation record's metadata location) is swapped in ONE conditional metastore transaction
//! for every table of the commit. A changed current schema also replaces the catalog's
//! directory generation in that transaction; a data-only commit does not.

use std::collections::BTreeMap;

use bytes::Bytes;
use flotilla_domain::keys;
use flotilla_domain::model::{RelationKind, RelationRecord};
use flotilla_domain::names::{NamespacePath, new_id};
use flotilla_metastore::{Op, Transaction};
use flotilla_parqdb::error::IndexCatalogError;
use flotilla_parqdb::metadata::Rule;
use flotilla_parqdb::store::ReadError;
use flotilla_services::service::events::{self, Operation};
use flotilla_services::service::namespaces::child_guards;
use flotilla_services::service::relations::{self, directory_bump};
use flotilla_services::service::{MAX_ATTEMPTS, Versioned, backoff, is_condition_failure, to_body};
use iceberg::spec::{
    FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec,
};
use iceberg::{TableRequirement, TableUpdate};
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;

use crate::budget::{LoadPermit, SMALL_LOAD_BYTES};
use crate::catalog::Ctx;
use crate::error::{IcebergError, IcebergResult, Missing};

/// Largest metadata file read back (a guard against a runaway file).
pub const MAX_METADATA_BYTES: usize = 64 * 1024 * 1024;
/// Largest metadata document (table or view) a commit, create or replace writes: one that
/// would be larger is refused and nothing is written (`docs/reliability.md`, "Legal
/// operations cannot exhaust memory"). Files already larger (up to [`MAX_METADATA_BYTES`])
/// still load, under the load budget.
pub const MAX_WRITTEN_METADATA_BYTES: usize = 16 * 1024 * 1024;
/// Tables per multi-table commit: one metastore transaction holds them all.
pub const MAX_TABLES_PER_COMMIT: usize = 24;

pub const ICEBERG: &str = "ICEBERG";

/// One table's part of a commit.
pub struct TableChange {
    pub namespace: NamespacePath,
    pub name: String,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}

/// A published table state.
pub struct Committed {
    pub metadata_location: String,
    pub metadata: TableMetadata,
}

fn api(e: flotilla_base::error::Error) -> IcebergError {
    IcebergError::from_api(e, Missing::Table)
}

/// The relation of an Iceberg table, if there is one under that name.
pub async fn load_record(
    ctx: &Ctx,
    ns: &NamespacePath,
    name: &str,
) -> IcebergResult<Option<Versioned<RelationRecord>>> {
    let rec = relations::load(ctx.state.store.as_ref(), ctx.catalog_id(), ns, name)
        .await
        .map_err(api)?;
    Ok(rec.filter(|r| r.value.kind == RelationKind::Table))
}

/// The relation and its current metadata location, or `404` for a missing table, a view, a
/// table of another format or one with no metadata yet.
pub async fn require_table(
    ctx: &Ctx,
    ns: &NamespacePath,
    name: &str,
) -> IcebergResult<(Versioned<RelationRecord>, String)> {
    let missing = || IcebergError::no_such(Missing::Table, format!("table {ns}.{name} not found"));
    let rec = match load_record(ctx, ns, name).await? {
        Some(r) => r,
        None => {
            // Distinguish a missing namespace, as engines expect.
            flotilla_services::service::namespaces::require(
                ctx.state.store.as_ref(),
                ctx.catalog_id(),
                ns,
            )
            .await
            .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
            return Err(missing());
        }
    };
    if rec.value.format.as_deref() != Some(ICEBERG) {
        // An overlay's Delta table is captured and validated like an Iceberg one, but this
        // endpoint serves Iceberg metadata only and Flotilla does not convert Delta logs:
        // such a table is NOT_SERVED here (docs/capture.md, "Delta tables").
        if rec.value.managed_by.is_some() {
            return Err(IcebergError::no_such(
                Missing::Table,
                format!(
                    "{ns}.{name} is a {} table of an overlay: NOT_SERVED, the Iceberg REST \
                     endpoint serves Iceberg tables only (its capture and validation state: \
                     GET /v1/accounts/{}/catalogs/{}/namespaces/{}/tables/{name}/validation)",
                    rec.value.format.as_deref().unwrap_or("non-Iceberg"),
                    ctx.account,
                    ctx.catalog_id(),
                    ns.segments().join("%1F"),
                ),
            ));
        }
        return Err(IcebergError::no_such(
            Missing::Table,
            format!("{ns}.{name} is not an Iceberg table"),
        ));
    }
    let loc = rec.value.metadata_location.clone().ok_or_else(|| {
        IcebergError::no_such(
            Missing::Table,
            format!("table {ns}.{name} has no Iceberg metadata location"),
        )
    })?;
    Ok((rec, loc))
}

/// Reads and parses a metadata file of the catalog's warehouse.
pub async fn read_metadata(ctx: &Ctx, location: &str) -> IcebergResult<TableMetadata> {
    let bytes = read_metadata_file(ctx, location).await?;
    parse_metadata(location, &bytes)
}

/// Parses the bytes of a table metadata file.
pub fn parse_metadata(location: &str, bytes: &[u8]) -> IcebergResult<TableMetadata> {
    serde_json::from_slice::<TableMetadata>(bytes).map_err(|e| {
        IcebergError::bad_request(format!(
            "{location} is not valid Iceberg table metadata: {e}"
        ))
    })
}

/// The bytes of a metadata file read for a load, with the load's share of the process's load
/// budget (`budget.rs`), which the caller holds until its answer is sent. The file is first
/// read under the charge of a small file; a larger one is read again under a charge for its
/// size, so that no load allocates for a large file before the budget admits it.
pub async fn read_for_load(
    ctx: &Ctx,
    location: &str,
    what: &str,
) -> IcebergResult<(LoadPermit, Vec<u8>)> {
    let budget = &ctx.config.load_budget;
    let path = ctx.object_path(location)?;
    let stores = &ctx.state.index_stores;
    let small = budget.acquire(0, what).await?;
    match stores
        .read_at_most(&ctx.warehouse, path.as_ref(), SMALL_LOAD_BYTES)
        .await
    {
        Ok(bytes) => return Ok((small, bytes)),
        Err(ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::Size,
            ..
        })) => {}
        Err(e) => return Err(read_error(location, e)),
    }
    drop(small);
    let size = stores
        .size(&ctx.warehouse, path.as_ref())
        .await
        .map_err(|e| read_error(location, e))?;
    if size > MAX_METADATA_BYTES as u64 {
        return Err(IcebergError::bad_request(format!(
            "metadata file {location}: metadata file is larger than {MAX_METADATA_BYTES} bytes"
        )));
    }
    let permit = budget.acquire(size, what).await?;
    let bytes = read_metadata_file(ctx, location).await?;
    Ok((permit, bytes))
}

/// The bytes of a metadata file (table or view) of the catalog's warehouse, through the
/// warehouse stores' hardened reader: within a deadline, at most [`MAX_METADATA_BYTES`], and
/// on a `file://` warehouse only a regular file reached without a symlink (a FIFO, a device or
/// a directory is refused without blocking; a symlinked file or directory reads as missing).
pub async fn read_metadata_file(ctx: &Ctx, location: &str) -> IcebergResult<Vec<u8>> {
    let path = ctx.object_path(location)?;
    ctx.state
        .index_stores
        .read_at_most(&ctx.warehouse, path.as_ref(), MAX_METADATA_BYTES)
        .await
        .map_err(|e| read_error(location, e))
}

/// The answer for a metadata file that could not be read.
pub fn read_error(location: &str, e: ReadError) -> IcebergError {
    match e {
        ReadError::NotFound => IcebergError::new(
            axum::http::StatusCode::NOT_FOUND,
            "NotFoundException",
            format!("metadata file {location} does not exist"),
        ),
        ReadError::Catalog(IndexCatalogError::Unavailable { message }) => {
            IcebergError::unavailable(message)
        }
        ReadError::Catalog(IndexCatalogError::Internal { message }) => {
            IcebergError::internal(message)
        }
        ReadError::Catalog(
            IndexCatalogError::InvalidIndexMetadata { message, .. }
            | IndexCatalogError::InvalidArgument { message }
            | IndexCatalogError::WarehouseNotAllowed { message },
        ) => IcebergError::bad_request(format!("metadata file {location}: {message}")),
        ReadError::Catalog(other) => {
            IcebergError::bad_request(format!("metadata file {location} cannot be read: {other}"))
        }
    }
}

/// The version number of a metadata file named `NNNNN-<uuid>.metadata.json`.
fn version_of(location: &str) -> Option<u64> {
    let file = location.rsplit('/').next()?;
    let (n, rest) = file.split_once('-')?;
    rest.ends_with(".metadata.json")
        .then(|| n.parse::<u64>().ok())
        .flatten()
}

/// Refuses a metadata document of `len` bytes for `what` (`table db.t`) larger than
/// [`MAX_WRITTEN_METADATA_BYTES`].
pub fn check_written_size(what: &str, len: usize) -> IcebergResult<()> {
    if len <= MAX_WRITTEN_METADATA_BYTES {
        return Ok(());
    }
    Err(IcebergError::bad_request(format!(
        "METADATA_TOO_LARGE: the new metadata of {what} would be {len} bytes, more than the \
         limit of {MAX_WRITTEN_METADATA_BYTES} bytes (16 MiB); nothing was written. Keep large \
         values out of properties, or expire snapshots and remove old schemas first"
    )))
}

/// Writes `metadata` as the next metadata file of its table (`what`, as `table db.t`);
/// returns its location. A document larger than [`MAX_WRITTEN_METADATA_BYTES`] is refused
/// before anything is written.
pub async fn write_metadata(
    ctx: &Ctx,
    store: &dyn ObjectStore,
    previous: Option<&str>,
    metadata: &TableMetadata,
    what: &str,
) -> IcebergResult<String> {
    let version = previous.and_then(version_of).map_or(0, |v| v + 1);
    let root = metadata.location().trim_end_matches('/');
    let location = format!(
        "{root}/metadata/{version:05}-{}.metadata.json",
        uuid::Uuid::new_v4()
    );
    let path = ctx.object_path(&location)?;
    let bytes = crate::metadata::to_vec(metadata)?;
    check_written_size(what, bytes.len())?;
    store
        .put(&path, Bytes::from(bytes).into())
        .await
        .map_err(IcebergError::unavailable)?;
    Ok(location)
}

/// Best-effort removal of metadata files a failed commit wrote (never of a file a commit
/// with an unknown outcome may have published).
async fn discard(ctx: &Ctx, store: &dyn ObjectStore, locations: &[String]) {
    for l in locations {
        if let Ok(p) = ctx.object_path(l)
            && let Err(e) = store.delete(&p).await
        {
            tracing::warn!(error = %e, "could not remove an unpublished metadata file");
        }
    }
}

pub fn schema_json(metadata: &TableMetadata) -> IcebergResult<Value> {
    crate::metadata::schema_value(metadata.current_schema())
}

/// The default root of a new table: inside the warehouse, named by a fresh id so that a
/// dropped and re-created name never shares files with its predecessor.
pub fn default_location(ctx: &Ctx, ns: &NamespacePath, name: &str) -> String {
    let safe = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    let ns_part = ns
        .segments()
        .iter()
        .map(|s| safe(s))
        .collect::<Vec<_>>()
        .join("/");
    format!(
        "{}{ns_part}/{}-{}",
        ctx.warehouse.as_str(),
        safe(name),
        uuid::Uuid::now_v7().simple()
    )
}

/// A new table's location: the requested one when it lies inside the catalog's warehouse,
/// else the default.
pub fn table_location(
    ctx: &Ctx,
    ns: &NamespacePath,
    name: &str,
    requested: Option<&str>,
) -> IcebergResult<String> {
    match requested {
        Some(l) => {
            let l = l.trim_end_matches('/');
            if !ctx.owns_location(l) {
                return Err(IcebergError::bad_request(format!(
                    "table location {l} is outside the catalog's warehouse {}",
                    ctx.warehouse.as_str()
                )));
            }
            ctx.object_path(&format!("{l}/x"))?;
            Ok(l.to_owned())
        }
        None => Ok(default_location(ctx, ns, name)),
    }
}

/// The first metadata of a table created by a commit (`assert-create`, after a staged
/// create): the schema, spec, order, location and format version are taken from the
/// updates, which are then all applied on top.
fn created_from_updates(
    ctx: &Ctx,
    ns: &NamespacePath,
    name: &str,
    updates: &[TableUpdate],
) -> IcebergResult<TableMetadataBuilder> {
    let mut schema: Option<Schema> = None;
    let mut spec: Option<UnboundPartitionSpec> = None;
    let mut order: Option<SortOrder> = None;
    let mut location: Option<String> = None;
    let mut version = FormatVersion::V2;
    for u in updates {
        match u {
            TableUpdate::AddSchema { schema: s } if schema.is_none() => schema = Some(s.clone()),
            TableUpdate::AddSpec { spec: s } if spec.is_none() => spec = Some(s.clone()),
            TableUpdate::AddSortOrder { sort_order } if order.is_none() => {
                order = Some(sort_order.clone())
            }
            TableUpdate::SetLocation { location: l } => location = Some(l.clone()),
            TableUpdate::UpgradeFormatVersion { format_version } => version = *format_version,
            _ => {}
        }
    }
    let schema = schema
        .ok_or_else(|| IcebergError::bad_request("creating a table needs an add-schema update"))?;
    let location = table_location(ctx, ns, name, location.as_deref())?;
    let first = crate::metadata::new_table(crate::metadata::NewTable {
        schema,
        spec: spec.unwrap_or_default(),
        order: order.unwrap_or_else(SortOrder::unsorted_order),
        location,
        version,
        properties: Default::default(),
    })?;
    Ok(TableMetadataBuilder::new_from_metadata(first, None))
}

fn apply(
    mut builder: TableMetadataBuilder,
    updates: Vec<TableUpdate>,
) -> IcebergResult<TableMetadata> {
    for u in updates {
        builder = u.apply(builder).map_err(|e| {
            IcebergError::bad_request(format!("cannot apply update: {}", e.message()))
        })?;
    }
    builder
        .build()
        .map(|r| r.metadata)
        .map_err(|e| IcebergError::bad_request(format!("invalid table metadata: {}", e.message())))
}

/// The relation record of `metadata`, published at `metadata_location`.
pub fn next_record(
    base: Option<&RelationRecord>,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    metadata: &TableMetadata,
    metadata_location: &str,
    now: &str,
) -> IcebergResult<RelationRecord> {
    let schema = schema_json(metadata)?;
    Ok(match base {
        Some(b) => {
            let mut r = b.clone();
            r.schema = schema;
            r.metadata_location = Some(metadata_location.to_owned());
            r.location = Some(metadata.location().to_owned());
            r.revision += 1;
            r.update_time = now.to_owned();
            r
        }
        None => RelationRecord {
            id: new_id(),
            catalog_id: catalog_id.to_owned(),
            kind: RelationKind::Table,
            namespace: ns.clone(),
            name: name.to_owned(),
            schema,
            format: Some(ICEBERG.to_owned()),
            metadata_location: Some(metadata_location.to_owned()),
            location: Some(metadata.location().to_owned()),
            definitions: Vec::new(),
            default_namespace: None,
            properties: BTreeMap::new(),
            managed_by: None,
            revision: 1,
            create_time: now.to_owned(),
            update_time: now.to_owned(),
        },
    })
}

fn overlay_refusal(rec: &RelationRecord) -> IcebergError {
    let overlay = rec
        .managed_by
        .as_ref()
        .map(|m| m.overlay_id.as_str())
        .unwrap_or("unknown");
    IcebergError::forbidden(format!(
        "table {}.{} is managed by overlay {overlay}; it is read-only here (change it upstream or through the overlay)",
        rec.namespace, rec.name
    ))
}

/// Commits every change atomically: all tables move or none does.
pub async fn commit(ctx: &Ctx, changes: Vec<TableChange>) -> IcebergResult<Vec<Committed>> {
    if changes.is_empty() {
        return Err(IcebergError::bad_request(
            "a commit needs at least one table change",
        ));
    }
    if changes.len() > MAX_TABLES_PER_COMMIT {
        return Err(IcebergError::bad_request(format!(
            "a transaction commits at most {MAX_TABLES_PER_COMMIT} tables"
        )));
    }
    for (i, a) in changes.iter().enumerate() {
        if changes[..i]
            .iter()
            .any(|b| b.namespace == a.namespace && b.name == a.name)
        {
            return Err(IcebergError::bad_request(format!(
                "table {}.{} appears twice in one transaction",
                a.namespace, a.name
            )));
        }
    }
    let store = ctx.store()?;
    let meta = ctx.state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let mut tx = Transaction::new();
        let mut written: Vec<String> = Vec::new();
        let mut out = Vec::new();
        let mut schema_moved = false;
        let now = ctx.state.clock.now_rfc3339();
        let prepared: IcebergResult<()> = async {
            for change in &changes {
                let (ns, name) = (&change.namespace, change.name.as_str());
                let cur = load_record(ctx, ns, name).await?;
                let creating = change
                    .requirements
                    .iter()
                    .any(|r| matches!(r, TableRequirement::NotExist));
                let (base_rec, base_meta, base_loc) = match &cur {
                    Some(rec) => {
                        if rec.value.managed_by.is_some() {
                            return Err(overlay_refusal(&rec.value));
                        }
                        if creating {
                            return Err(IcebergError::commit_failed(format!(
                                "requirement failed: table {ns}.{name} already exists"
                            )));
                        }
                        let (_, loc) = require_table(ctx, ns, name).await?;
                        let m = read_metadata(ctx, &loc).await?;
                        (Some(rec), Some(m), Some(loc))
                    }
                    None if creating => (None, None, None),
                    None => {
                        return Err(require_table(ctx, ns, name).await.err().unwrap_or_else(
                            || {
                                IcebergError::no_such(
                                    Missing::Table,
                                    format!("table {ns}.{name} not found"),
                                )
                            },
                        ));
                    }
                };
                for r in &change.requirements {
                    r.check(base_meta.as_ref()).map_err(|e| {
                        IcebergError::commit_failed(format!("requirement failed: {}", e.message()))
                    })?;
                }
                let updates = crate::metadata::without_v1_sequence_numbers(
                    base_meta.as_ref().map(TableMetadata::format_version),
                    change.updates.clone(),
                )?;
                let builder = match base_meta {
                    Some(m) => TableMetadataBuilder::new_from_metadata(m, base_loc.clone()),
                    None => created_from_updates(ctx, ns, name, &change.updates)?,
                };
                let metadata = apply(builder, updates)?;
                // Every file of the table stays inside the catalog's warehouse.
                if !ctx.owns_location(metadata.location()) {
                    return Err(IcebergError::bad_request(format!(
                        "table location {} is outside the catalog's warehouse",
                        metadata.location()
                    )));
                }
                let location = write_metadata(
                    ctx,
                    store.as_ref(),
                    base_loc.as_deref(),
                    &metadata,
                    &format!("table {ns}.{name}"),
                )
                .await?;
                written.push(location.clone());
                let rec = next_record(
                    base_rec.map(|r| &r.value),
                    ctx.catalog_id(),
                    ns,
                    name,
                    &metadata,
                    &location,
                    &now,
                )?;
                let slot = keys::relation(ctx.catalog_id(), ns, name);
                match base_rec {
                    Some(b) => {
                        if b.value.schema != rec.schema {
                            schema_moved = true;
                        }
                        tx.push(Op::replace(slot, b.version, to_body(&rec).map_err(api)?));
                    }
                    None => {
                        for op in child_guards(&ctx.state, &ctx.account, ctx.catalog_id(), Some(ns))
                            .await
                            .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?
                        {
                            tx.push(op);
                        }
                        tx.push(Op::create(slot, to_body(&rec).map_err(api)?));
                        schema_moved = true;
                    }
                }
                // One event per table, in the transaction that publishes it.
                let updates = serde_json::to_value(&change.updates)
                    .ok()
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default();
                let kind = if creating {
                    "create-table"
                } else {
                    "update-table"
                };
                events::record_commit(
                    &ctx.state,
                    &ctx.account,
                    &mut tx,
                    Operation {
                        updates: Some(events::summarize_updates(&updates)),
                        ..Operation::relation(kind, ctx.catalog_id(), ns, name)
                            .with_metadata_location(Some(&location))
                    },
                    rec.revision,
                )
                .map_err(api)?;
                out.push(Committed {
                    metadata_location: location,
                    metadata,
                });
            }
            Ok(())
        }
        .await;
        if let Err(e) = prepared {
            discard(ctx, store.as_ref(), &written).await;
            return Err(e);
        }
        if schema_moved {
            tx.push(directory_bump(ctx.catalog_id()).map_err(api)?);
        }
        match meta.transact(tx).await {
            Ok(()) => return Ok(out),
            Err(e) if is_condition_failure(&e) || e.is_retryable() => {
                // Lost a race (or a throttle): nothing was published. Re-read and re-check
                // the requirements against the new state.
                discard(ctx, store.as_ref(), &written).await;
                backoff(attempt).await;
            }
            Err(e) if e.is_outcome_unknown() => {
                // The transaction may or may not have landed: find out from the pointers.
                let mut landed = 0;
                for (change, c) in changes.iter().zip(&out) {
                    if let Ok(Some(r)) = load_record(ctx, &change.namespace, &change.name).await
                        && r.value.metadata_location.as_deref()
                            == Some(c.metadata_location.as_str())
                    {
                        landed += 1;
                    }
                }
                if landed == out.len() {
                    return Ok(out);
                }
                return Err(IcebergError::commit_state_unknown(e));
            }
            Err(e) => {
                discard(ctx, store.as_ref(), &written).await;
                return Err(api(e.into()));
            }
        }
    }
    Err(IcebergError::commit_failed(
        "the table changed concurrently on every attempt; reload and retry",
    ))
}

/// Deletes every object under a table root inside the warehouse (drop with purge). On a
/// `file://` warehouse no symlink is followed: a linked file or directory loses its link,
/// never its target (`WarehouseStores::purge`).
pub async fn purge(ctx: &Ctx, location: &str) -> IcebergResult<()> {
    if !ctx.owns_location(location) {
        tracing::warn!("purge skipped: the table location is outside the catalog's warehouse");
        return Ok(());
    }
    let rel = ctx.object_path(&format!("{}/x", location.trim_end_matches('/')))?;
    let dir: object_store::path::Path = rel.parts().take(rel.parts().count() - 1).collect();
    ctx.state
        .index_stores
        .purge(&ctx.warehouse, dir.as_ref())
        .await
        .map_err(|e| read_error(location, e))
}
