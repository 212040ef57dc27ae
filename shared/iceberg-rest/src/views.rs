//! View routes. An Iceberg view is a `/v1` view relation (schema, SQL per dialect, default
//! namespace) whose metadata location points at a view metadata file in the warehouse; the
//! file is built and updated with the `iceberg` crate's view metadata builder.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use flotilla_domain::keys;
use flotilla_domain::model::{RelationKind, RelationRecord, ViewDefinition};
use flotilla_domain::names::{NamespacePath, new_id};
use flotilla_metastore::{Op, Transaction};
use flotilla_services::service::events::{self, Operation};
use flotilla_services::service::namespaces::child_guards;
use flotilla_services::service::relations::{self, directory_bump};
use flotilla_services::service::{MAX_ATTEMPTS, Versioned, backoff, is_condition_failure, to_body};
use flotilla_services::state::AppState;
use iceberg::ViewUpdate;
use iceberg::spec::{
    Schema, ViewFormatVersion, ViewMetadata, ViewMetadataBuilder, ViewRepresentation, ViewVersion,
};
use object_store::ObjectStoreExt;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::catalog::{Caller, Ctx, IcebergConfig, PageParams, ns_from_segment};
use crate::error::{IcebergError, IcebergResult, Missing};
use crate::namespaces::schema_body;
use flotilla_services::acl::{Action, Securable};

fn api(e: flotilla_base::error::Error) -> IcebergError {
    IcebergError::from_api(e, Missing::View)
}

fn view_securable(ctx: &Ctx, ns: &NamespacePath, name: &str) -> Securable {
    Securable::relation(ctx.catalog_id(), ns, name, RelationKind::View)
}

pub async fn list_views(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
    Query(q): Query<PageParams>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Describe,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let page = relations::list(
        &state,
        &ctx.access,
        ctx.catalog_id(),
        &path,
        RelationKind::View,
        q.size()?,
        q.token(),
    )
    .await
    .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
    let identifiers: Vec<Value> = page["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| json!({"namespace": t["namespace"], "name": t["name"]}))
                .collect()
        })
        .unwrap_or_default();
    Ok(
        Json(json!({"identifiers": identifiers, "next-page-token": page["next_page_token"]}))
            .into_response(),
    )
}

async fn load_view_record(
    ctx: &Ctx,
    ns: &NamespacePath,
    name: &str,
) -> IcebergResult<Versioned<RelationRecord>> {
    let rec = relations::load(ctx.state.store.as_ref(), ctx.catalog_id(), ns, name)
        .await
        .map_err(api)?;
    match rec {
        Some(r) if r.value.kind == RelationKind::View => Ok(r),
        _ => {
            flotilla_services::service::namespaces::require(
                ctx.state.store.as_ref(),
                ctx.catalog_id(),
                ns,
            )
            .await
            .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?;
            Err(IcebergError::no_such(
                Missing::View,
                format!("view {ns}.{name} not found"),
            ))
        }
    }
}

async fn read_view_metadata(ctx: &Ctx, location: &str) -> IcebergResult<ViewMetadata> {
    let bytes = crate::commit::read_metadata_file(ctx, location).await?;
    parse_view_metadata(location, &bytes)
}

fn parse_view_metadata(location: &str, bytes: &[u8]) -> IcebergResult<ViewMetadata> {
    serde_json::from_slice(bytes).map_err(|e| {
        IcebergError::bad_request(format!(
            "{location} is not valid Iceberg view metadata: {e}"
        ))
    })
}

/// Writes the next metadata file of view `what` (`view db.v`); a document larger than
/// [`crate::commit::MAX_WRITTEN_METADATA_BYTES`] is refused before anything is written.
async fn write_view_metadata(
    ctx: &Ctx,
    previous: Option<&str>,
    metadata: &ViewMetadata,
    what: &str,
) -> IcebergResult<String> {
    if !ctx.owns_location(metadata.location()) {
        return Err(IcebergError::bad_request(format!(
            "view location {} is outside the catalog's warehouse",
            metadata.location()
        )));
    }
    let version = previous
        .and_then(|p| p.rsplit('/').next())
        .and_then(|f| f.split_once('-'))
        .and_then(|(n, _)| n.parse::<u64>().ok())
        .map_or(0, |v| v + 1);
    let location = format!(
        "{}/metadata/{version:05}-{}.metadata.json",
        metadata.location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let path = ctx.object_path(&location)?;
    let bytes = serde_json::to_vec(&crate::metadata::view_to_value(metadata)?)
        .map_err(IcebergError::internal)?;
    crate::commit::check_written_size(what, bytes.len())?;
    ctx.store()?
        .put(&path, Bytes::from(bytes).into())
        .await
        .map_err(IcebergError::unavailable)?;
    Ok(location)
}

/// The relation fields a view's current version determines.
fn view_fields(
    metadata: &ViewMetadata,
) -> IcebergResult<(Value, Vec<ViewDefinition>, Vec<String>)> {
    let schema = crate::metadata::schema_value(metadata.current_schema())?;
    let version = metadata.current_version();
    let definitions = version
        .representations()
        .iter()
        .map(|r| match r {
            ViewRepresentation::Sql(s) => ViewDefinition {
                dialect: s.dialect.clone(),
                sql: s.sql.clone(),
            },
        })
        .collect();
    let ns = version.default_namespace().clone().inner();
    Ok((schema, definitions, ns))
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateViewRequest {
    name: String,
    #[serde(default)]
    location: Option<String>,
    schema: Schema,
    view_version: ViewVersion,
    #[serde(default)]
    properties: HashMap<String, String>,
}

pub async fn create_view(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Write,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let req: CreateViewRequest = schema_body(&bytes)?;
    flotilla_domain::names::validate_segment("view name", &req.name)
        .map_err(|e| IcebergError::bad_request(e.0))?;
    let location = crate::commit::table_location(&ctx, &path, &req.name, req.location.as_deref())?;
    let metadata = ViewMetadataBuilder::new(
        location,
        req.schema,
        req.view_version,
        ViewFormatVersion::V1,
        req.properties,
    )
    .and_then(|b| b.build())
    .map_err(|e| IcebergError::bad_request(format!("invalid view: {}", e.message())))?
    .metadata;
    let (schema, definitions, default_ns) = view_fields(&metadata)?;
    if definitions.is_empty() {
        return Err(IcebergError::bad_request(
            "a view needs at least one SQL representation",
        ));
    }
    let store = state.store.as_ref();
    if relations::load(store, ctx.catalog_id(), &path, &req.name)
        .await
        .map_err(api)?
        .is_some()
    {
        return Err(IcebergError::already_exists(format!(
            "{path}.{} already exists",
            req.name
        )));
    }
    let metadata_location =
        write_view_metadata(&ctx, None, &metadata, &format!("view {path}.{}", req.name)).await?;
    let now = state.clock.now_rfc3339();
    let rec = RelationRecord {
        id: new_id(),
        catalog_id: ctx.catalog_id().to_owned(),
        kind: RelationKind::View,
        namespace: path.clone(),
        name: req.name.clone(),
        schema,
        format: None,
        metadata_location: Some(metadata_location.clone()),
        location: Some(metadata.location().to_owned()),
        definitions,
        default_namespace: (!default_ns.is_empty()).then_some(default_ns),
        properties: Default::default(),
        managed_by: None,
        revision: 1,
        create_time: now.clone(),
        update_time: now,
    };
    let mut tx = Transaction::new();
    for op in child_guards(&state, &ctx.account, ctx.catalog_id(), Some(&path))
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Namespace))?
    {
        tx.push(op);
    }
    tx.push(Op::create(
        keys::relation(ctx.catalog_id(), &path, &req.name),
        to_body(&rec).map_err(api)?,
    ));
    tx.push(directory_bump(ctx.catalog_id()).map_err(api)?);
    events::record(
        &state,
        &ctx.account,
        &mut tx,
        Operation::relation("create-view", ctx.catalog_id(), &path, &req.name)
            .with_metadata_location(Some(&metadata_location)),
    )
    .map_err(api)?;
    match store.transact(tx).await {
        Ok(()) => {}
        Err(e) if is_condition_failure(&e) => {
            return Err(IcebergError::already_exists(format!(
                "{path}.{} already exists",
                req.name
            )));
        }
        Err(e) => return Err(api(e.into())),
    }
    Ok(Json(load_view_result(Some(&metadata_location), &metadata)?).into_response())
}

/// The view's Iceberg metadata, with the relation record as the truth, so that one view has
/// two doors: a view created through `/v1` (no metadata file) is described from its record
/// (schema, SQL per dialect, default namespace; its uuid is its id), and a view whose
/// definitions `/v1` changed after the endpoint wrote its file gets the record's definition
/// as a new current version on top of the file's history. The location is `None` when no
/// file describes the answer yet (the next replace writes one).
async fn current_view(
    ctx: &Ctx,
    rec: &RelationRecord,
) -> IcebergResult<(Option<String>, ViewMetadata)> {
    current_view_from(ctx, rec, None).await
}

/// [`current_view`], with the bytes of its metadata file when the caller read them already.
async fn current_view_from(
    ctx: &Ctx,
    rec: &RelationRecord,
    read: Option<Vec<u8>>,
) -> IcebergResult<(Option<String>, ViewMetadata)> {
    let from_file = match &rec.metadata_location {
        Some(loc) => {
            let m = match read {
                Some(bytes) => parse_view_metadata(loc, &bytes)?,
                None => read_view_metadata(ctx, loc).await?,
            };
            let (_, definitions, default_ns) = view_fields(&m)?;
            let same = json!(definitions) == json!(rec.definitions)
                && default_ns == rec.default_namespace.clone().unwrap_or_default();
            if same {
                return Ok((Some(loc.clone()), m));
            }
            Some(m)
        }
        None => None,
    };
    let unusable = |why: String| {
        IcebergError::bad_request(format!(
            "view {}.{} cannot be described as an Iceberg view: {why}",
            rec.namespace, rec.name
        ))
    };
    if rec.definitions.is_empty() {
        return Err(unusable("it has no SQL definition".into()));
    }
    let schema: Schema = serde_json::from_value(rec.schema.clone())
        .map_err(|e| unusable(format!("its schema is not an Iceberg schema ({e})")))?;
    let timestamp_ms = time::OffsetDateTime::parse(
        &rec.update_time,
        &time::format_description::well_known::Rfc3339,
    )
    .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
    .unwrap_or(0);
    let version: ViewVersion = serde_json::from_value(json!({
        "version-id": 1,
        "schema-id": schema.schema_id(),
        "timestamp-ms": timestamp_ms,
        "summary": {"engine-name": "flotilla"},
        "representations": rec.definitions.iter().map(|d| json!({
            "type": "sql", "sql": d.sql, "dialect": d.dialect,
        })).collect::<Vec<_>>(),
        "default-namespace": rec.default_namespace.clone().unwrap_or_default(),
    }))
    .map_err(|e| unusable(e.to_string()))?;
    let built = match from_file {
        Some(base) => {
            let attempt = |allow_dropping_dialects: bool| {
                let mut b = ViewMetadataBuilder::new_from_metadata(base.clone());
                if allow_dropping_dialects {
                    // `/v1` replaced the definitions outright (other dialects than the file's):
                    // the record decides, as the property that permits it records.
                    b = b.set_properties(HashMap::from([(
                        "replace.drop-dialect.allowed".to_owned(),
                        "true".to_owned(),
                    )]))?;
                }
                b.set_current_version(version.clone(), schema.clone())?
                    .build()
            };
            attempt(false).or_else(|_| attempt(true))
        }
        None => {
            let location = match &rec.location {
                Some(l) => l.clone(),
                None => crate::commit::table_location(ctx, &rec.namespace, &rec.name, None)?,
            };
            let uuid = uuid::Uuid::parse_str(&rec.id).unwrap_or_else(|_| uuid::Uuid::new_v4());
            ViewMetadataBuilder::new(
                location,
                schema,
                version,
                ViewFormatVersion::V1,
                HashMap::new(),
            )
            .map(|b| b.assign_uuid(uuid))
            .and_then(|b| b.build())
        }
    };
    let metadata = built
        .map_err(|e| unusable(e.message().to_owned()))?
        .metadata;
    Ok((None, metadata))
}

fn load_view_result(location: Option<&str>, metadata: &ViewMetadata) -> IcebergResult<Value> {
    let mut v = json!({"metadata": crate::metadata::view_to_value(metadata)?, "config": {}});
    if let Some(l) = location {
        v["metadata-location"] = json!(l);
    }
    Ok(v)
}

pub async fn load_view(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns, view)): Path<(String, String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(Action::Read, &view_securable(&ctx, &path, &view))?;
    let rec = load_view_record(&ctx, &path, &view).await?;
    // Read, parsed and answered under a share of the load budget (`budget.rs`).
    let what = format!("view {path}.{view}");
    let (permit, read) = match &rec.value.metadata_location {
        Some(loc) => {
            let (p, bytes) = crate::commit::read_for_load(&ctx, loc, &what).await?;
            (p, Some(bytes))
        }
        None => (config.load_budget.acquire(0, &what).await?, None),
    };
    let (loc, metadata) = current_view_from(&ctx, &rec.value, read).await?;
    let v = load_view_result(loc.as_deref(), &metadata)?;
    drop(metadata);
    crate::budget::json_response(v, permit)
}

pub async fn view_exists(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns, view)): Path<(String, String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(Action::Read, &view_securable(&ctx, &path, &view))?;
    load_view_record(&ctx, &path, &view).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum ViewRequirement {
    AssertViewUuid { uuid: uuid::Uuid },
}

#[derive(Deserialize)]
struct CommitViewRequest {
    #[serde(default)]
    requirements: Vec<ViewRequirement>,
    #[serde(default)]
    updates: Vec<ViewUpdate>,
}

fn apply_view_update(
    b: ViewMetadataBuilder,
    u: ViewUpdate,
) -> iceberg::Result<ViewMetadataBuilder> {
    Ok(match u {
        ViewUpdate::AssignUuid { uuid } => b.assign_uuid(uuid),
        ViewUpdate::UpgradeFormatVersion { format_version } => {
            b.upgrade_format_version(format_version)?
        }
        ViewUpdate::AddSchema { schema, .. } => b.add_schema(schema),
        ViewUpdate::SetLocation { location } => b.set_location(location),
        ViewUpdate::SetProperties { updates } => b.set_properties(updates)?,
        ViewUpdate::RemoveProperties { removals } => b.remove_properties(&removals),
        ViewUpdate::AddViewVersion { view_version } => b.add_version(view_version)?,
        ViewUpdate::SetCurrentViewVersion { view_version_id } => {
            b.set_current_version_id(view_version_id)?
        }
    })
}

/// `POST .../views/{view}`: replaces the view's definition (requirements, then updates),
/// publishing the new metadata location with a conditional write.
pub async fn replace_view(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns, view)): Path<(String, String, String)>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(Action::Write, &view_securable(&ctx, &path, &view))?;
    let req: CommitViewRequest = schema_body(&bytes)?;
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let rec = load_view_record(&ctx, &path, &view).await?;
        if rec.value.managed_by.is_some() {
            return Err(api(relations::managed_error(&rec.value)));
        }
        let (loc, base) = current_view(&ctx, &rec.value).await?;
        let loc = loc.or_else(|| rec.value.metadata_location.clone());
        for r in &req.requirements {
            let ViewRequirement::AssertViewUuid { uuid } = r;
            if *uuid != base.uuid() {
                return Err(IcebergError::commit_failed(format!(
                    "requirement failed: view uuid is {}, not {uuid}",
                    base.uuid()
                )));
            }
        }
        let mut b = ViewMetadataBuilder::new_from_metadata(base);
        for u in req.updates.clone() {
            b = apply_view_update(b, u).map_err(|e| {
                IcebergError::bad_request(format!("cannot apply update: {}", e.message()))
            })?;
        }
        let metadata = b
            .build()
            .map_err(|e| IcebergError::bad_request(format!("invalid view: {}", e.message())))?
            .metadata;
        let new_loc = write_view_metadata(
            &ctx,
            loc.as_deref(),
            &metadata,
            &format!("view {path}.{view}"),
        )
        .await?;
        let (schema, definitions, default_ns) = view_fields(&metadata)?;
        let mut next = rec.value.clone();
        next.schema = schema;
        next.definitions = definitions;
        next.default_namespace = (!default_ns.is_empty()).then_some(default_ns);
        next.metadata_location = Some(new_loc.clone());
        next.location = Some(metadata.location().to_owned());
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new()
            .with(Op::replace(
                keys::relation(ctx.catalog_id(), &path, &view),
                rec.version,
                to_body(&next).map_err(api)?,
            ))
            .with(directory_bump(ctx.catalog_id()).map_err(api)?);
        events::record_commit(
            &state,
            &ctx.account,
            &mut tx,
            Operation::relation("replace-view", ctx.catalog_id(), &path, &view)
                .with_metadata_location(Some(&new_loc)),
            next.revision,
        )
        .map_err(api)?;
        match store.transact(tx).await {
            Ok(()) => {
                return Ok(Json(load_view_result(Some(&new_loc), &metadata)?).into_response());
            }
            Err(e) if is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            Err(e) if e.is_outcome_unknown() => {
                return Err(IcebergError::commit_state_unknown(e));
            }
            Err(e) => return Err(api(e.into())),
        }
    }
    Err(IcebergError::commit_failed(
        "the view changed concurrently; retry",
    ))
}

pub async fn drop_view(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns, view)): Path<(String, String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(Action::Drop, &view_securable(&ctx, &path, &view))?;
    load_view_record(&ctx, &path, &view).await?;
    relations::delete(
        &state,
        &ctx.account,
        ctx.catalog_id(),
        &path,
        &view,
        RelationKind::View,
        None,
    )
    .await
    .map_err(api)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn rename_view(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path(prefix): Path<String>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    crate::tables::rename_relation(&state, &ctx, &bytes, RelationKind::View).await
}
