//! `POST /v1/{prefix}/events`: the catalog's change events in the shapes of the Iceberg
//! events endpoint proposal (`flotilla_services::service::events` holds the log).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use flotilla_services::service::events::{self, Event, Filter};
use flotilla_services::state::AppState;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::catalog::{Caller, Ctx, IcebergConfig};
use crate::error::{IcebergError, IcebergResult, Missing};
use crate::namespaces::body;

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct EventsRequest {
    continuation_token: Option<String>,
    page_size: Option<usize>,
    after_timestamp_ms: Option<i64>,
    #[serde(default)]
    operation_types: Vec<String>,
    #[serde(default)]
    catalog_objects_by_name: Vec<Vec<String>>,
    #[serde(default)]
    object_types: Vec<String>,
}

pub async fn query_events(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Path(prefix): Path<String>,
    bytes: axum::body::Bytes,
) -> IcebergResult<Response> {
    let ctx = Ctx::resolve(&state, &config, p, &prefix).await?;
    let req: EventsRequest = if bytes.is_empty() {
        EventsRequest::default()
    } else {
        body(&bytes)?
    };
    let api = |e| IcebergError::from_api(e, Missing::Catalog);
    let filter = Filter {
        types: req.operation_types,
        after_timestamp_ms: req.after_timestamp_ms,
        object_types: req.object_types,
        objects: req.catalog_objects_by_name,
    };
    filter.validate_for_catalog().map_err(api)?;
    let page_size = flotilla_services::service::page_size(req.page_size).map_err(api)?;
    let after = match &req.continuation_token {
        Some(t) => events::decode_position(ctx.catalog_id(), t).map_err(api)?,
        None => 0,
    };
    let page = events::read(
        &state,
        &ctx.access,
        ctx.catalog_id(),
        &filter,
        after,
        page_size,
    )
    .await
    .map_err(api)?;
    let answer: Vec<Value> = page.events.iter().map(iceberg_event).collect();
    Ok(Json(json!({
        "events": answer,
        "continuation-token": events::encode_position(ctx.catalog_id(), page.position),
    }))
    .into_response())
}

/// One event in the proposal's shape: kebab-case, the operation's object as an
/// `identifier` (tables, views), a `namespace` (namespaces) or `source` and `destination`
/// (renames).
fn iceberg_event(e: &Event) -> Value {
    let op = &e.operation;
    let mut operation = serde_json::Map::new();
    operation.insert("operation-type".into(), json!(op.kind));
    match (&op.name, &op.destination) {
        (Some(name), Some(dest)) => {
            operation.insert(
                "source".into(),
                json!({"namespace": op.namespace, "name": name}),
            );
            operation.insert(
                "destination".into(),
                json!({"namespace": dest.namespace, "name": dest.name}),
            );
        }
        (Some(name), None) => {
            operation.insert(
                "identifier".into(),
                json!({"namespace": op.namespace, "name": name}),
            );
        }
        (None, _) => {
            operation.insert("namespace".into(), json!(op.namespace));
        }
    }
    if let Some(l) = &op.metadata_location {
        operation.insert("metadata-location".into(), json!(l));
    }
    if let Some(u) = &op.updates {
        operation.insert("updates".into(), json!(u));
    }
    if let Some(d) = &op.details {
        operation.insert("details".into(), d.clone());
    }
    json!({
        "event-id": e.event_id,
        "sequence": e.sequence,
        "request-id": e.request_id,
        "timestamp-ms": e.timestamp_ms,
        "actor": e.actor,
        "operation": operation,
    })
}
