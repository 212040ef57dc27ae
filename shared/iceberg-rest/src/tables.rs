//! Table routes. A table is a `/v1` relation of format `ICEBERG` whose metadata location
//! points at a metadata file in the catalog's warehouse.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::NamespacePath;
use flotilla_services::acl::{Action, Securable};
use flotilla_services::service::OnConflict;
use flotilla_services::service::relations::{self, CreateTable, PatchRelation};
use flotilla_services::state::AppState;
use iceberg::spec::{FormatVersion, Schema, SortOrder, TableMetadata, UnboundPartitionSpec};
use iceberg::{TableRequirement, TableUpdate};
use object_store::ObjectStoreExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::catalog::{Caller, Ctx, IcebergConfig, PageParams, ns_from_parts, ns_from_segment};
use crate::commit::{self, ICEBERG, TableChange};
use crate::error::{IcebergError, IcebergResult, Missing};
use crate::metadata;
use crate::namespaces::{body, schema_body};
use crate::vending;

fn api(e: flotilla_base::error::Error) -> IcebergError {
    IcebergError::from_api(e, Missing::Table)
}

async fn ctx(
    state: &AppState,
    config: &Arc<IcebergConfig>,
    caller: Caller,
    prefix: &str,
) -> IcebergResult<Ctx> {
    Ctx::resolve(state, config, caller.0, prefix).await
}

/// The load result of a table, with vended credentials when asked for and available.
pub async fn load_result(
    ctx: &Ctx,
    headers: &HeaderMap,
    metadata_location: Option<&str>,
    metadata: &TableMetadata,
    access: vending::Access,
) -> IcebergResult<Value> {
    let vended = if vending::wants_vended(headers) {
        vend(ctx, metadata.location(), access, false).await?
    } else {
        None
    };
    let (config, creds) =
        vending::render(&client_config(ctx, metadata.location()), vended.as_ref());
    let mut v = json!({
        "metadata": metadata::to_value(metadata)?,
        "config": config,
    });
    if let Some(l) = metadata_location {
        v["metadata-location"] = json!(l);
    }
    if vended.is_some() {
        v["storage-credentials"] = creds;
    }
    Ok(v)
}

/// Non-secret storage client settings (an S3-compatible endpoint) for an `s3://` location.
pub fn client_config(ctx: &Ctx, location: &str) -> std::collections::BTreeMap<String, String> {
    match &ctx.config.vending {
        Some(v) if location.starts_with("s3://") => v.client_config(),
        _ => Default::default(),
    }
}

/// What credentials for a relation may do: read-only for an overlay-managed relation (read-
/// only here) and for a caller without `WRITE` on it (a reader's engine gets credentials
/// that cannot write a byte).
pub fn access_of(ctx: &Ctx, rec: &flotilla_domain::model::RelationRecord) -> vending::Access {
    let table = Securable::table(ctx.catalog_id(), &rec.namespace, &rec.name);
    if rec.managed_by.is_some() || !ctx.allows(Action::Write, &table) {
        vending::Access::ReadOnly
    } else {
        vending::Access::ReadWrite
    }
}

async fn vend(
    ctx: &Ctx,
    location: &str,
    access: vending::Access,
    fresh: bool,
) -> IcebergResult<Option<vending::Vended>> {
    if !location.starts_with("s3://") {
        return Ok(None);
    }
    match &ctx.config.vending {
        Some(v) => v.vend(location, access, fresh).await,
        None => Ok(None),
    }
}

#[derive(Debug, Deserialize)]
pub struct IdentParams {
    #[serde(rename = "purgeRequested", default)]
    pub purge_requested: Option<String>,
    #[serde(default)]
    pub snapshots: Option<String>,
}

// ---- list ----------------------------------------------------------------------------

/// Page tokens of listings served from the directory replica: the last name of the page.
const DIRECTORY_TOKEN: &str = "dir1.";

pub async fn list_tables(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns)): Path<(String, String)>,
    Query(q): Query<PageParams>,
) -> IcebergResult<Response> {
    let path = ns_from_segment(&ns)?;
    let size = q.size()?;
    let token = q.token();
    let from_directory = token.is_some_and(|t| t.starts_with(DIRECTORY_TOKEN));
    if from_directory || token.is_none() {
        let (access, catalog_id) =
            crate::catalog::access_for_prefix(&state, caller.0.clone(), &prefix).await?;
        let ns = Securable::namespace(catalog_id, &path);
        if !access.allows(Action::Describe, &ns) {
            // The endpoint's own answer for a namespace it cannot show.
            let ctx = ctx(&state, &config, caller, &prefix).await?;
            return Err(ctx
                .authorize(Action::Describe, &ns)
                .err()
                .unwrap_or_else(|| IcebergError::internal("a refused listing was allowed")));
        }
        if let Some(v) = list_from_directory(
            &state,
            &access,
            catalog_id,
            &path,
            size,
            token,
            from_directory,
        )
        .await?
        {
            return Ok(Json(v).into_response());
        }
    }
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    ctx.authorize(
        Action::Describe,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let page = relations::list(
        &state,
        &ctx.access,
        ctx.catalog_id(),
        &path,
        RelationKind::Table,
        size,
        token,
    )
    .await
    .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
    let items: Vec<Value> = page["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|t| t["format"].as_str() == Some(ICEBERG))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    // Overlay tables not query-visible (file errors, not captured, not readable) are absent.
    let identifiers: Vec<Value> = crate::federated::filter_listing(&ctx, items)
        .await?
        .iter()
        .map(|t| json!({"namespace": t["namespace"], "name": t["name"]}))
        .collect();
    Ok(
        Json(json!({"identifiers": identifiers, "next-page-token": page["next_page_token"]}))
            .into_response(),
    )
}

/// A table listing from the directory replica (`docs/directory.md`), when the deployment is
/// finalized: a warm, unchanged directory answers after one round trip (the catalog and the
/// generation), whatever the number of tables. `None`: not finalized, or the replica is
/// stale, so the caller lists from the metastore. A page token of this path is always
/// answered here (from the last-good snapshot if need be), so paging never mixes sources.
async fn list_from_directory(
    state: &AppState,
    access: &flotilla_services::acl::Access,
    catalog_id: &str,
    path: &NamespacePath,
    size: usize,
    token: Option<&str>,
    continuing: bool,
) -> IcebergResult<Option<Value>> {
    if !continuing
        && !state.directory.authority_seen()
        && !flotilla_directory::authority_enabled(state.store.as_ref())
            .await
            .map_err(IcebergError::unavailable)?
    {
        return Ok(None);
    }
    let view = flotilla_services::service::directory::get_view(state, &access.account, catalog_id)
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?;
    let fresh =
        !view.health.stale && view.health.mode == flotilla_directory::ReplicaMode::Authoritative;
    if !continuing && !fresh {
        return Ok(None);
    }
    let segments = path.segments();
    if !continuing
        && view.snapshot.entries.iter().any(|e| {
            e.managed && e.kind == RelationKind::Table && e.namespace.as_slice() == segments
        })
    {
        // Overlay tables are listed by their capture's visibility, which the metastore path
        // decides: such a namespace is not listed from the replica.
        return Ok(None);
    }
    let after = token.and_then(|t| t.strip_prefix(DIRECTORY_TOKEN));
    let mut in_namespace = false;
    let mut names: Vec<&str> = Vec::new();
    let mut more = false;
    // Entries are ordered by namespace, then name.
    for e in &view.snapshot.entries {
        if e.namespace.as_slice() != segments {
            continue;
        }
        in_namespace = true;
        if e.kind != RelationKind::Table || e.format.as_deref() != Some(ICEBERG) {
            continue;
        }
        if e.managed {
            // Only reached when paging on from a first page served here, and the namespace
            // gained overlay tables since: their visibility is not known here, so they are
            // not listed.
            continue;
        }
        let name = e.name.as_str();
        if after.is_some_and(|a| name <= a) {
            continue;
        }
        // Only what the caller may read, so a page holds `size` of those.
        if !access.allows(Action::Read, &Securable::table(catalog_id, path, name)) {
            continue;
        }
        if names.len() == size {
            more = true;
            break;
        }
        names.push(name);
    }
    if !in_namespace {
        // Nothing of this namespace in the directory: it may still exist, empty.
        flotilla_services::service::namespaces::require(state.store.as_ref(), catalog_id, path)
            .await
            .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
    }
    let next = match (more, names.last()) {
        (true, Some(last)) => json!(format!("{DIRECTORY_TOKEN}{last}")),
        _ => Value::Null,
    };
    let identifiers: Vec<Value> = names
        .iter()
        .map(|n| json!({"namespace": segments, "name": n}))
        .collect();
    Ok(Some(
        json!({"identifiers": identifiers, "next-page-token": next}),
    ))
}

// ---- create ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateTableRequest {
    name: String,
    #[serde(default)]
    location: Option<String>,
    schema: Schema,
    #[serde(default)]
    partition_spec: Option<UnboundPartitionSpec>,
    #[serde(default)]
    write_order: Option<SortOrder>,
    #[serde(default)]
    stage_create: bool,
    #[serde(default)]
    properties: HashMap<String, String>,
}

pub async fn create_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Write,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let req: CreateTableRequest = schema_body(&bytes)?;
    flotilla_domain::names::validate_segment("table name", &req.name)
        .map_err(|e| IcebergError::bad_request(e.0))?;
    // The namespace must exist and the name be free before anything is written.
    flotilla_services::service::namespaces::require(state.store.as_ref(), ctx.catalog_id(), &path)
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
    if relations::load(state.store.as_ref(), ctx.catalog_id(), &path, &req.name)
        .await
        .map_err(api)?
        .is_some()
    {
        return Err(IcebergError::already_exists(format!(
            "{path}.{} already exists",
            req.name
        )));
    }
    let location = commit::table_location(&ctx, &path, &req.name, req.location.as_deref())?;
    let mut properties = req.properties;
    let version = metadata::take_format_version(&mut properties)?.unwrap_or(FormatVersion::V2);
    let metadata = metadata::new_table(metadata::NewTable {
        schema: req.schema,
        spec: req.partition_spec.unwrap_or_default(),
        order: req.write_order.unwrap_or_else(SortOrder::unsorted_order),
        location,
        version,
        properties,
    })?;
    if req.stage_create {
        // Nothing is published: the engine commits the table with `assert-create`.
        let v = load_result(&ctx, &headers, None, &metadata, vending::Access::ReadWrite).await?;
        return Ok(Json(v).into_response());
    }
    let store = ctx.store()?;
    let location = commit::write_metadata(
        &ctx,
        store.as_ref(),
        None,
        &metadata,
        &format!("table {path}.{}", req.name),
    )
    .await?;
    let created = relations::create_table(
        &state,
        &ctx.account,
        ctx.catalog_id(),
        &path,
        CreateTable {
            name: req.name.clone(),
            schema: commit::schema_json(&metadata)?,
            format: ICEBERG.to_owned(),
            metadata_location: Some(location.clone()),
            location: Some(metadata.location().to_owned()),
            properties: Default::default(),
            register: false,
        },
        OnConflict::Error,
        None,
    )
    .await;
    if let Err(e) = created {
        if let Ok(p) = ctx.object_path(&location) {
            let _ = store.delete(&p).await;
        }
        return Err(api(e));
    }
    let v = load_result(
        &ctx,
        &headers,
        Some(&location),
        &metadata,
        vending::Access::ReadWrite,
    )
    .await?;
    Ok(Json(v).into_response())
}

// ---- load / exists / credentials ------------------------------------------------------

pub async fn load_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    Query(q): Query<IdentParams>,
    headers: HeaderMap,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    if let Some(s) = q.snapshots.as_deref()
        && s != "all"
        && s != "refs"
    {
        return Err(IcebergError::bad_request("snapshots must be all or refs"));
    }
    ctx.authorize(
        Action::Read,
        &Securable::table(ctx.catalog_id(), &path, &table),
    )?;
    let (rec, loc) = commit::require_table(&ctx, &path, &table).await?;
    if crate::federated::is_federated(&ctx, &rec.value) {
        return crate::federated::load(&ctx, &headers, &rec.value).await;
    }
    // Read, parsed and answered under a share of the load budget (`budget.rs`).
    let (permit, bytes) =
        commit::read_for_load(&ctx, &loc, &format!("table {path}.{table}")).await?;
    let metadata = commit::parse_metadata(&loc, &bytes)?;
    drop(bytes);
    let v = load_result(
        &ctx,
        &headers,
        Some(&loc),
        &metadata,
        access_of(&ctx, &rec.value),
    )
    .await?;
    drop(metadata);
    crate::budget::json_response(v, permit)
}

pub async fn table_exists(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Read,
        &Securable::table(ctx.catalog_id(), &path, &table),
    )?;
    let (rec, _) = commit::require_table(&ctx, &path, &table).await?;
    if crate::federated::is_federated(&ctx, &rec.value) {
        crate::federated::visible_pointer(&ctx, &rec.value).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn load_credentials(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns, table)): Path<(String, String, String)>,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Read,
        &Securable::table(ctx.catalog_id(), &path, &table),
    )?;
    let (rec, loc) = commit::require_table(&ctx, &path, &table).await?;
    if crate::federated::is_federated(&ctx, &rec.value) {
        let v = crate::federated::credentials(&ctx, &rec.value).await?;
        return Ok(Json(v).into_response());
    }
    let location = match rec.value.location.clone() {
        Some(l) => l,
        None => commit::read_metadata(&ctx, &loc)
            .await?
            .location()
            .to_owned(),
    };
    // Renewal: always fresh credentials, never the cached ones being replaced.
    let vended = vend(&ctx, &location, access_of(&ctx, &rec.value), true).await?;
    let (_, creds) = vending::render(&client_config(&ctx, &location), vended.as_ref());
    Ok(Json(json!({"storage-credentials": creds})).into_response())
}

// ---- commit ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct TableIdentifier {
    namespace: Vec<String>,
    name: String,
}

#[derive(Deserialize)]
struct CommitTableRequest {
    #[serde(default)]
    identifier: Option<TableIdentifier>,
    #[serde(default)]
    requirements: Vec<TableRequirement>,
    #[serde(default)]
    updates: Vec<TableUpdate>,
}

pub async fn commit_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Write,
        &Securable::table(ctx.catalog_id(), &path, &table),
    )?;
    let req: CommitTableRequest = schema_body(&bytes)?;
    if let Some(id) = &req.identifier
        && (id.name != table || id.namespace != path.segments())
    {
        return Err(IcebergError::bad_request(
            "the identifier in the body does not match the table in the path",
        ));
    }
    let mut done = commit::commit(
        &ctx,
        vec![TableChange {
            namespace: path,
            name: table,
            requirements: req.requirements,
            updates: req.updates,
        }],
    )
    .await?;
    let c = done.remove(0);
    Ok(
        Json(json!({"metadata-location": c.metadata_location, "metadata": metadata::to_value(&c.metadata)?}))
            .into_response(),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CommitTransactionRequest {
    table_changes: Vec<CommitTableRequest>,
}

pub async fn commit_transaction(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path(prefix): Path<String>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let req: CommitTransactionRequest = schema_body(&bytes)?;
    let mut changes = Vec::with_capacity(req.table_changes.len());
    for c in req.table_changes {
        let id = c.identifier.ok_or_else(|| {
            IcebergError::bad_request("every table change of a transaction needs an identifier")
        })?;
        let namespace = ns_from_parts(id.namespace)?;
        // Every table of the transaction, before anything is written.
        ctx.authorize(
            Action::Write,
            &Securable::table(ctx.catalog_id(), &namespace, &id.name),
        )?;
        changes.push(TableChange {
            namespace,
            name: id.name,
            requirements: c.requirements,
            updates: c.updates,
        });
    }
    commit::commit(&ctx, changes).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- drop / rename / register ---------------------------------------------------------

fn truthy(v: Option<&str>) -> bool {
    v.is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

pub async fn drop_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns, table)): Path<(String, String, String)>,
    Query(q): Query<IdentParams>,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Drop,
        &Securable::table(ctx.catalog_id(), &path, &table),
    )?;
    let rec = commit::load_record(&ctx, &path, &table)
        .await?
        .ok_or_else(|| {
            IcebergError::no_such(Missing::Table, format!("table {path}.{table} not found"))
        })?;
    if rec.value.managed_by.is_some() {
        return Err(api(relations::managed_error(&rec.value)));
    }
    relations::delete(
        &state,
        &ctx.account,
        ctx.catalog_id(),
        &path,
        &table,
        RelationKind::Table,
        None,
    )
    .await
    .map_err(api)?;
    if truthy(q.purge_requested.as_deref())
        && let Some(location) = &rec.value.location
        && let Err(e) = commit::purge(&ctx, location).await
    {
        // The table is gone from the catalog; leftover files are only storage.
        tracing::warn!(error = %e, "purge after drop did not finish");
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct RenameRequest {
    source: TableIdentifier,
    destination: TableIdentifier,
}

pub async fn rename_relation(
    state: &AppState,
    ctx: &Ctx,
    bytes: &axum::body::Bytes,
    kind: RelationKind,
) -> IcebergResult<Response> {
    let missing = if kind == RelationKind::Table {
        Missing::Table
    } else {
        Missing::View
    };
    let req: RenameRequest = body(bytes)?;
    let from = ns_from_parts(req.source.namespace)?;
    let to = ns_from_parts(req.destination.namespace)?;
    // A rename drops the source and creates the destination.
    ctx.authorize(
        Action::Drop,
        &Securable::relation(ctx.catalog_id(), &from, &req.source.name, kind),
    )?;
    ctx.authorize(Action::Write, &Securable::namespace(ctx.catalog_id(), &to))?;
    // The destination namespace must exist (404 NoSuchNamespaceException otherwise).
    flotilla_services::service::namespaces::require(state.store.as_ref(), ctx.catalog_id(), &to)
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
    relations::patch(
        state,
        &ctx.account,
        ctx.catalog_id(),
        &from,
        &req.source.name,
        kind,
        PatchRelation {
            name: Some(req.destination.name),
            namespace: Some(to.segments().to_vec()),
            ..Default::default()
        },
        None,
    )
    .await
    .map_err(|e| IcebergError::from_api(e, missing))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn rename_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path(prefix): Path<String>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    rename_relation(&state, &ctx, &bytes, RelationKind::Table).await
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RegisterRequest {
    name: String,
    metadata_location: String,
    #[serde(default)]
    overwrite: bool,
}

pub async fn register_table(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    caller: Caller,
    Path((prefix, ns)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = ctx(&state, &config, caller, &prefix).await?;
    let path: NamespacePath = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Write,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let req: RegisterRequest = body(&bytes)?;
    flotilla_domain::names::validate_segment("table name", &req.name)
        .map_err(|e| IcebergError::bad_request(e.0))?;
    let metadata = commit::read_metadata(&ctx, &req.metadata_location).await?;
    if !ctx.owns_location(metadata.location()) {
        return Err(IcebergError::bad_request(format!(
            "the table location {} is outside the catalog's warehouse",
            metadata.location()
        )));
    }
    if let Some(existing) = commit::load_record(&ctx, &path, &req.name).await?
        && existing.value.managed_by.is_some()
    {
        return Err(api(relations::managed_error(&existing.value)));
    }
    relations::create_table(
        &state,
        &ctx.account,
        ctx.catalog_id(),
        &path,
        CreateTable {
            name: req.name,
            schema: commit::schema_json(&metadata)?,
            format: ICEBERG.to_owned(),
            metadata_location: Some(req.metadata_location.clone()),
            location: Some(metadata.location().to_owned()),
            properties: Default::default(),
            register: true,
        },
        if req.overwrite {
            OnConflict::Replace
        } else {
            OnConflict::Error
        },
        None,
    )
    .await
    .map_err(api)?;
    let v = load_result(
        &ctx,
        &headers,
        Some(&req.metadata_location),
        &metadata,
        vending::Access::ReadWrite,
    )
    .await?;
    Ok(Json(v).into_response())
}
