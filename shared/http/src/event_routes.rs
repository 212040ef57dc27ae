//! Change events: `GET {A}/events` (`flotilla_services::service::events`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::extract::{Q, Scope};
use super::ok;
use crate::error::HttpResult;
use flotilla_services::service::events::{self, Filter};
use flotilla_services::service::page_size;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/accounts/{account_id}/events", get(list_events))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventParams {
    catalog_id: Option<String>,
    types: Option<String>,
    page_size: Option<usize>,
    page_token: Option<String>,
}

async fn list_events(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(q): Q<EventParams>,
) -> HttpResult<Response> {
    let filter = Filter {
        types: events::parse_types(q.types.as_deref()),
        ..Filter::default()
    };
    let size = page_size(q.page_size)?;
    let token = q.page_token.as_deref();
    Ok(ok(match &q.catalog_id {
        Some(c) => events::list(&state, &access, c, &filter, size, token).await?,
        None => events::list_account(&state, &access, &filter, size, token).await?,
    }))
}
