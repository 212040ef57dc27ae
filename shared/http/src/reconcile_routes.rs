//! `POST {A}/overlays/{id}/reconcile`: synchronous, generation-fenced reconciliation of one
//! overlay; answers the run's summary (which the overlay also keeps as `last_reconcile`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;

use super::extract::{Action, P, Scope, Securable};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
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
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::overlay(&id))?;
    let a = &access.account;
    let summary = reconcile(&state, &AdapterConnector, a, &id, &RunOptions::default())
        .await
        .map_err(Error::from)?;
    Ok(ok(summary.to_json()))
}
