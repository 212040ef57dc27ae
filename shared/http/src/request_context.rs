//! Every request runs as one request of the change-event context
//! (`flotilla_services::service::events::scope`): the events its changes write carry its
//! request id and its principal (recorded by the authenticating extractor). The id is
//! answered in `X-Flotilla-Request-Id`, so a client can find its own changes in the feed.
//!
//! It is also where a refused request of an account (`401`, `403` on a route under
//! `/v1/accounts/{account_id}`) is audited (`service::audit::record_refusal`), whichever
//! extractor or check refused it: after the answer is built, by its matched route pattern.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use flotilla_services::service::{audit, events};
use flotilla_services::state::AppState;

pub const REQUEST_ID_HEADER: &str = "x-flotilla-request-id";

const ACCOUNT_ROUTE: &str = "/v1/accounts/{account_id}";

pub async fn scope(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let id = flotilla_domain::names::new_id();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .filter(|r| r == ACCOUNT_ROUTE || r.starts_with(&format!("{ACCOUNT_ROUTE}/")));
    // The account is the path segment the route's `{account_id}` matched.
    let account = route
        .as_ref()
        .and_then(|_| req.uri().path().split('/').nth(3).map(str::to_owned));
    let method = req.method().clone();
    let (mut response, principal) = events::scope_observed(id.clone(), next.run(req)).await;
    let status = response.status();
    if let (Some(route), Some(account)) = (&route, &account)
        && matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
    {
        audit::record_refusal(
            &state,
            audit::RefusedRequest {
                account,
                principal: principal.as_deref(),
                method: method.as_str(),
                route,
                status: status.as_u16(),
                request_id: &id,
            },
        )
        .await;
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    response
}
