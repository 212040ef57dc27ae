//! Namespace routes: the `/v1` namespace service in the Iceberg shapes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use flotilla_http::extract::parse_json;
use flotilla_services::acl::{Action, Securable};
use flotilla_services::service::OnConflict;
use flotilla_services::service::namespaces::{self, CreateNamespace, PatchNamespace};
use flotilla_services::state::AppState;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::catalog::{Caller, Ctx, IcebergConfig, PageParams, ns_from_parts, ns_from_segment};
use crate::error::{IcebergError, IcebergResult, Missing};

fn api(e: flotilla_base::error::Error) -> IcebergError {
    IcebergError::from_api(e, Missing::Namespace)
}

/// Parses a JSON request body, answering the Iceberg error shape.
pub fn body<T: serde::de::DeserializeOwned>(bytes: &axum::body::Bytes) -> IcebergResult<T> {
    if bytes.len() > flotilla_http::extract::MAX_BODY_BYTES {
        return Err(IcebergError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BadRequestException",
            "request body exceeds 1 MiB",
        ));
    }
    parse_json::<T>(bytes)
        .map(|b| b.value)
        .map_err(|e| IcebergError::bad_request(e.message))
}

/// A body that may carry schemas: parsed, then refused if the crate dropped a default value
/// it could not read (`metadata::check_literals`; only bodies that mention one pay for it).
pub fn schema_body<T: serde::de::DeserializeOwned>(bytes: &axum::body::Bytes) -> IcebergResult<T> {
    let req = body(bytes)?;
    if bytes.windows(8).any(|w| w == b"-default") {
        crate::metadata::check_literals(&body::<serde_json::Value>(bytes)?)?;
    }
    Ok(req)
}

fn strings(props: &Value) -> BTreeMap<String, String> {
    props
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

pub async fn list_namespaces(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path(prefix): Path<String>,
    Query(q): Query<PageParams>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let parent = match q.parent.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(ns_from_segment(s)?),
        None => None,
    };
    ctx.authorize(
        Action::Describe,
        &Securable::container(ctx.catalog_id(), parent.as_ref()),
    )?;
    let page = namespaces::list(
        &state,
        &ctx.access,
        ctx.catalog_id(),
        parent.as_ref(),
        q.size()?,
        q.token(),
    )
    .await
    .map_err(api)?;
    let items: Vec<Value> = page["items"]
        .as_array()
        .map(|a| a.iter().map(|n| n["path"].clone()).collect())
        .unwrap_or_default();
    Ok(
        Json(json!({"namespaces": items, "next-page-token": page["next_page_token"]}))
            .into_response(),
    )
}

#[derive(Deserialize)]
struct CreateNamespaceRequest {
    namespace: Vec<String>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

pub async fn create_namespace(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path(prefix): Path<String>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let req: CreateNamespaceRequest = body(&bytes)?;
    let path = ns_from_parts(req.namespace)?;
    ctx.authorize(
        Action::Write,
        &Securable::container(ctx.catalog_id(), path.parent().as_ref()),
    )?;
    let created = namespaces::create(
        &state,
        &ctx.account,
        ctx.catalog_id(),
        CreateNamespace {
            path: path.segments().to_vec(),
            properties: req.properties,
        },
        OnConflict::Error,
        None,
    )
    .await
    .map_err(api)?;
    Ok(Json(json!({
        "namespace": created.body["path"],
        "properties": created.body["properties"],
    }))
    .into_response())
}

pub async fn load_namespace(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Describe,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let v = namespaces::get(&state, &ctx.account, ctx.catalog_id(), &path)
        .await
        .map_err(api)?;
    Ok(Json(json!({"namespace": v["path"], "properties": v["properties"]})).into_response())
}

pub async fn namespace_exists(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Describe,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    namespaces::get(&state, &ctx.account, ctx.catalog_id(), &path)
        .await
        .map_err(api)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn drop_namespace(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(Action::Drop, &Securable::namespace(ctx.catalog_id(), &path))?;
    namespaces::delete(&state, &ctx.account, ctx.catalog_id(), &path, None)
        .await
        .map_err(api)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Deserialize)]
struct UpdateProperties {
    #[serde(default)]
    removals: Vec<String>,
    #[serde(default)]
    updates: BTreeMap<String, String>,
}

pub async fn update_properties(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path((prefix, ns)): Path<(String, String)>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let path = ns_from_segment(&ns)?;
    ctx.authorize(
        Action::Manage,
        &Securable::namespace(ctx.catalog_id(), &path),
    )?;
    let req: UpdateProperties = body(&bytes)?;
    let removals: BTreeSet<&String> = req.removals.iter().collect();
    if let Some(k) = req.updates.keys().find(|k| removals.contains(k)) {
        return Err(IcebergError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "UnprocessableEntityException",
            format!("property {k:?} is both updated and removed"),
        ));
    }
    // Read-modify-write guarded by the etag: a concurrent change is retried from a fresh
    // read, never overwritten.
    for _ in 0..flotilla_services::service::MAX_ATTEMPTS {
        let cur = namespaces::get(&state, &ctx.account, ctx.catalog_id(), &path)
            .await
            .map_err(api)?;
        let mut props = strings(&cur["properties"]);
        let mut removed = Vec::new();
        let mut missing = Vec::new();
        for k in &req.removals {
            if props.remove(k).is_some() {
                removed.push(k.clone());
            } else {
                missing.push(k.clone());
            }
        }
        let updated: Vec<String> = req.updates.keys().cloned().collect();
        props.extend(req.updates.clone());
        let etag = cur["etag"].as_str().unwrap_or_default().to_owned();
        match namespaces::patch(
            &state,
            &ctx.account,
            ctx.catalog_id(),
            &path,
            PatchNamespace {
                properties: Some(props),
            },
            Some(&etag),
        )
        .await
        {
            Ok(_) => {
                return Ok(Json(json!({
                    "updated": updated,
                    "removed": removed,
                    "missing": missing,
                }))
                .into_response());
            }
            Err(e) if e.kind == flotilla_base::error::ErrorKind::PreconditionFailed => continue,
            Err(e) => return Err(api(e)),
        }
    }
    Err(IcebergError::commit_failed(
        "namespace properties changed concurrently; retry",
    ))
}
