//! Capture, validation and visibility of overlay tables (`docs/capture.md`): a table's
//! validation state, the catalog's current validation errors, the per-table visibility
//! override, and an on-demand capture of one overlay (queued for the reconcile workers).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;

use super::extract::{Action, JsonBody, P, Q, Scope, Securable};
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
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
) -> HttpResult<Response> {
    // The catalog's validation errors name its tables: a reader of the whole catalog.
    access.authorize(Action::Read, &Securable::catalog(&c))?;
    Ok(ok(service::list_errors(&state, &access.account, &c).await?))
}

async fn get_validation(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns, name)): P<(String, String, String, String)>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Read, &Securable::table(&c, &path, &name))?;
    Ok(ok(service::get_table(
        &state,
        &access.account,
        &c,
        &path,
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
    Scope(access): Scope,
    P((_, c, ns, name)): P<(String, String, String, String)>,
    body: JsonBody<VisibilityBody>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    let table = Securable::table(&c, &path, &name);
    if !access.allows(Action::Manage, &table) {
        // The overlay that manages the table may decide its visibility too.
        let managing =
            flotilla_services::service::relations::load(state.store.as_ref(), &c, &path, &name)
                .await
                .ok()
                .flatten()
                .and_then(|r| r.value.managed_by.map(|m| m.overlay_id));
        let by_overlay =
            managing.is_some_and(|o| access.allows(Action::Manage, &Securable::overlay(&o)));
        if !by_overlay {
            return Err(access.refusal(Action::Manage, &table).into());
        }
    }
    Ok(ok(service::set_override(
        &state,
        &access.account,
        &c,
        &path,
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
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<CaptureQuery>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::overlay(&id))?;
    let queued = service::enqueue_capture(&state, &access.account, &id, q.revalidate).await?;
    Ok(super::json_response(
        axum::http::StatusCode::ACCEPTED,
        queued,
    ))
}
