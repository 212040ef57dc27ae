//! `POST {A}/overlays/{id}/reconcile`: synchronous, generation-fenced reconciliation of one
//! overlay; answers the run's summary (which the overlay also keeps as `last_reconcile`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;

use super::extract::{Auth, P};
use super::ok;
use flotilla_base::error::{ApiError, ApiResult};
use flotilla_reconcile::{AdapterConnector, RunOptions, reconcile};
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/v1/accounts/{account_id}/overlays/{overlay_id}/reconcile",
        post(reconcile_overlay),
    )
}

async fn reconcile_overlay(
    State(state): State<AppState>,
    Auth(p): Auth,
    P((a, id)): P<(String, String)>,
) -> ApiResult<Response> {
    flotilla_domain::names::validate_account_id(&a).map_err(|_| ApiError::not_found("account"))?;
    p.require_account(&a)?;
    let summary = reconcile(&state, &AdapterConnector, &a, &id, &RunOptions::default()).await?;
    Ok(ok(summary.to_json()))
}
