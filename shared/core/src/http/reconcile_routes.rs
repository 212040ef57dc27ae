//! `POST {A}/overlays/{id}/reconcile`: synchronous, generation-fenced reconciliation of one
//! overlay; answers the run's summary (which the overlay also keeps as `last_reconcile`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;

use super::extract::{AccountScope, P};
use super::ok;
use crate::error::ApiResult;
use crate::reconcile::{AdapterConnector, RunOptions, reconcile};
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route(
        "/v1/accounts/{account_id}/overlays/{overlay_id}/reconcile",
        post(reconcile_overlay),
    )
}

async fn reconcile_overlay(
    State(state): State<AppState>,
    AccountScope { account: a, .. }: AccountScope,
    P((_, id)): P<(String, String)>,
) -> ApiResult<Response> {
    let summary = reconcile(&state, &AdapterConnector, &a, &id, &RunOptions::default()).await?;
    Ok(ok(summary.to_json()))
}
