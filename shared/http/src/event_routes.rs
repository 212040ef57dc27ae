//! Change events: `GET {A}/events` (`flotilla_services::service::events`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::extract::{Q, Scope};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
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
    let catalog_id = q
        .catalog_id
        .ok_or_else(|| Error::invalid("catalog_id is required"))?;
    let filter = Filter {
        types: events::parse_types(q.types.as_deref()),
        ..Filter::default()
    };
    Ok(ok(events::list(
        &state,
        &access,
        &catalog_id,
        &filter,
        page_size(q.page_size)?,
        q.page_token.as_deref(),
    )
    .await?))
}
