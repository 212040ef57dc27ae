//! Change events: `GET {A}/events` (`flotilla_services::service::events`), and the audit
//! trail built on them: `GET {A}/audit` (`flotilla_services::service::audit`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::extract::{Q, Scope};
use super::ok;
use crate::error::HttpResult;
use flotilla_services::service::audit::{self, AuditQuery};
use flotilla_services::service::events::{self, Filter};
use flotilla_services::service::page_size;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/accounts/{account_id}/events", get(list_events))
        .route("/v1/accounts/{account_id}/audit", get(list_audit))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventParams {
    catalog_id: Option<String>,
    types: Option<String>,
    object_types: Option<String>,
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
        object_types: events::parse_types(q.object_types.as_deref()),
        ..Filter::default()
    };
    let size = page_size(q.page_size)?;
    let token = q.page_token.as_deref();
    Ok(ok(match &q.catalog_id {
        Some(c) => events::list(&state, &access, c, &filter, size, token).await?,
        None => events::list_account(&state, &access, &filter, size, token).await?,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    principal: Option<String>,
    from: Option<String>,
    to: Option<String>,
    page_size: Option<usize>,
    page_token: Option<String>,
}

async fn list_audit(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(q): Q<AuditParams>,
) -> HttpResult<Response> {
    let query = AuditQuery {
        principal: q.principal.filter(|p| !p.is_empty()),
        from_ms: q
            .from
            .as_deref()
            .map(|v| audit::parse_time("from", v))
            .transpose()?,
        to_ms: q
            .to
            .as_deref()
            .map(|v| audit::parse_time("to", v))
            .transpose()?,
    };
    let size = page_size(q.page_size)?;
    let token = q.page_token.as_deref();
    Ok(ok(audit::list(&state, &access, &query, size, token).await?))
}
