//! `POST {A}/overlays/{id}/reconcile[?wait_for_capture=true]`: synchronous,
//! generation-fenced reconciliation of one overlay; answers the run's summary (which the
//! overlay also keeps as `last_reconcile`) and the capture it queued (`capture`), waited for
//! within a bound when asked (`flotilla_reconcile::freshness`); `GET {A}/overlays/{id}/status`:
//! the overlay's health and freshness; `POST {A}/overlays/{id}/notify`: a targeted refresh of
//! named upstream tables and namespaces.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};

use serde::Deserialize;

use super::extract::{Action, JsonBody, P, Q, Scope, Securable};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
use flotilla_reconcile::{AdapterConnector, RunOptions, freshness, reconcile};
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/accounts/{account_id}/overlays/{overlay_id}/reconcile",
            post(reconcile_overlay),
        )
        .route(
            "/v1/accounts/{account_id}/overlays/{overlay_id}/status",
            get(overlay_status),
        )
        .route(
            "/v1/accounts/{account_id}/overlays/{overlay_id}/notify",
            post(notify_overlay),
        )
}

/// Refreshes only the upstream tables and namespaces named, then queues the capture of what
/// changed; `202` with what it published and the capture it queued.
async fn notify_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    body: JsonBody<freshness::Notify>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::overlay(&id))?;
    let answer = freshness::notify(&state, &AdapterConnector, &access.account, &id, &body.value)
        .await
        .map_err(Error::from)?;
    Ok(super::json_response(
        axum::http::StatusCode::ACCEPTED,
        answer,
    ))
}

/// The overlay's health, failures, tables by state and staleness; readable by whoever may
/// read the overlay.
async fn overlay_status(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::overlay(&id))?;
    Ok(ok(
        freshness::overlay_status(&state, &access.account, &id).await?
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReconcileQuery {
    /// Answer only once the capture of what the run changed completed (bounded).
    #[serde(default)]
    pub wait_for_capture: bool,
}

async fn reconcile_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<ReconcileQuery>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::overlay(&id))?;
    let a = &access.account;
    let summary = reconcile(&state, &AdapterConnector, a, &id, &RunOptions::default())
        .await
        .map_err(Error::from)?;
    // The run is recorded; a capture that cannot be queued is a retryable failure of the
    // request (its retry is a no-op run that plans and queues again).
    let capture = freshness::capture_after_run(&state, a, &id, &summary, q.wait_for_capture)
        .await
        .map_err(|e| {
            Error::from(e).with_detail(
                "capture",
                "the run succeeded (see last_reconcile) but its capture job was not queued; retry",
            )
        })?;
    let mut answer = summary.to_json();
    answer["capture"] = capture;
    Ok(ok(answer))
}
