//! Change events: `GET {A}/events` (`flotilla_services::service::events`), the audit
//! trail built on them: `GET {A}/audit` (`flotilla_services::service::audit`), and the
//! webhook sinks that push them: `{A}/event-sinks` (`flotilla_services::service::event_sinks`;
//! the routes exist on every host, and a host that does not deliver sinks refuses to create
//! one with `409 FAILED_PRECONDITION`).

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use super::extract::{IdempotencyKey, JsonBody, P, Q, Scope, account_idempotency};
use super::{no_content, ok, recorded};
use crate::error::HttpResult;
use flotilla_services::service::OnConflict;
use flotilla_services::service::audit::{self, AuditQuery};
use flotilla_services::service::event_sinks;
use flotilla_services::service::events::{self, Filter};
use flotilla_services::service::page_size;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/accounts/{account_id}/events", get(list_events))
        .route("/v1/accounts/{account_id}/audit", get(list_audit))
        .route(
            "/v1/accounts/{account_id}/event-sinks",
            post(create_sink).get(list_sinks),
        )
        .route(
            "/v1/accounts/{account_id}/event-sinks/{sink_id}",
            get(get_sink).delete(delete_sink),
        )
}

async fn create_sink(
    State(state): State<AppState>,
    Scope(access): Scope,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<event_sinks::CreateSink>,
) -> HttpResult<Response> {
    let fingerprint = event_sinks::fingerprint_body(&body.canonical);
    let idem = account_idempotency(
        &access.account,
        k,
        OnConflict::Error,
        "event-sinks",
        &fingerprint,
    )?;
    Ok(recorded(
        event_sinks::create(&state, &access, body.value, idem).await?,
    ))
}

async fn list_sinks(State(state): State<AppState>, Scope(access): Scope) -> HttpResult<Response> {
    Ok(ok(event_sinks::list(&state, &access).await?))
}

async fn get_sink(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    Ok(ok(event_sinks::get(&state, &access, &id).await?))
}

async fn delete_sink(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    event_sinks::delete(&state, &access, &id).await?;
    Ok(no_content())
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
