//! Capture, validation and visibility of overlay tables (`docs/capture.md`): a table's
//! validation state, the catalog's current validation errors, the per-table visibility
//! override, and an on-demand capture of one overlay (queued for the reconcile workers).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;

use super::extract::{AccountScope, JsonBody, P, Q, Scope};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
use flotilla_domain::names::NamespacePath;
use flotilla_reconcile::capture::service;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/accounts/{account_id}/catalogs/{catalog_id}/validation-errors",
            get(list_errors),
        )
        .route(
            "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/validation",
            get(get_validation),
        )
        .route(
            "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/visibility",
            put(put_visibility),
        )
        .route(
            "/v1/accounts/{account_id}/overlays/{overlay_id}/capture",
            post(capture_overlay),
        )
}

fn ns_path(segment: &str) -> Result<NamespacePath, Error> {
    Ok(NamespacePath::from_url_segment(segment)?)
}

async fn list_errors(
    State(state): State<AppState>,
    Scope(AccountScope { account: a, .. }): Scope,
    P((_, c)): P<(String, String)>,
) -> HttpResult<Response> {
    Ok(ok(service::list_errors(&state, &a, &c).await?))
}

async fn get_validation(
    State(state): State<AppState>,
    Scope(AccountScope { account: a, .. }): Scope,
    P((_, c, ns, name)): P<(String, String, String, String)>,
) -> HttpResult<Response> {
    Ok(ok(service::get_table(
        &state,
        &a,
        &c,
        &ns_path(&ns)?,
        &name,
    )
    .await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VisibilityBody {
    /// Query-visible despite current file errors.
    #[serde(rename = "override")]
    visible: bool,
}

async fn put_visibility(
    State(state): State<AppState>,
    Scope(AccountScope { account: a, .. }): Scope,
    P((_, c, ns, name)): P<(String, String, String, String)>,
    body: JsonBody<VisibilityBody>,
) -> HttpResult<Response> {
    Ok(ok(service::set_override(
        &state,
        &a,
        &c,
        &ns_path(&ns)?,
        &name,
        body.value.visible,
    )
    .await?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaptureQuery {
    #[serde(default)]
    pub revalidate: bool,
}

/// Queues the overlay's capture job (the workers run it) and answers `202` with the message.
async fn capture_overlay(
    State(state): State<AppState>,
    Scope(AccountScope { account: a, .. }): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<CaptureQuery>,
) -> HttpResult<Response> {
    let queued = service::enqueue_capture(&state, &a, &id, q.revalidate).await?;
    Ok(super::json_response(
        axum::http::StatusCode::ACCEPTED,
        queued,
    ))
}
