//! Every request runs as one request of the change-event context
//! (`flotilla_services::service::events::scope`): the events its changes write carry its
//! request id and its principal (recorded by the authenticating extractor). The id is
//! answered in `X-Flotilla-Request-Id`, so a client can find its own changes in the feed.
//!
//! It is also where a refused request of an account is audited
//! (`service::audit::record_refusal`), whichever extractor or check refused it, after the
//! answer is built, by its matched route pattern:
//!
//! - `401`, `403` on a route under `/v1/accounts/{account_id}` (the account is the path's);
//! - `401`, `403` on an Iceberg route under `/iceberg/v1/{prefix}` (the account is the
//!   prefix's `<account>.<catalog id>` first part) and on `/iceberg/v1/config` (the
//!   `warehouse` parameter's `<account>/<catalog>` first part);
//! - `429` on a token route (the account is the refused client id's, which the limiter
//!   names in the answer's extensions: [`RefusedClient`]).
//!
//! A refusal naming an account that does not exist is not recorded (the audit checks).

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use flotilla_services::service::{audit, events};
use flotilla_services::state::AppState;

pub const REQUEST_ID_HEADER: &str = "x-flotilla-request-id";

const ACCOUNT_ROUTE: &str = "/v1/accounts/{account_id}";
const ICEBERG_PREFIX_ROUTE: &str = "/iceberg/v1/{prefix}/";
const ICEBERG_CONFIG_ROUTE: &str = "/iceberg/v1/config";

/// The client id a token route refused with `429`, in the answer's extensions, so that the
/// refusal is audited in the client's account.
#[derive(Clone, Debug)]
pub struct RefusedClient(pub String);

/// Where a refusal of this request would be audited: the route pattern, and the account
/// the request names (before it ran).
fn audited_account(route: &str, req: &Request) -> Option<String> {
    let path = req.uri().path();
    if route == ACCOUNT_ROUTE || route.starts_with(&format!("{ACCOUNT_ROUTE}/")) {
        return path.split('/').nth(3).map(str::to_owned);
    }
    if route.starts_with(ICEBERG_PREFIX_ROUTE) {
        let prefix = path.split('/').nth(3)?;
        return prefix.split_once('.').map(|(a, _)| a.to_owned());
    }
    if route == ICEBERG_CONFIG_ROUTE {
        let warehouse = req
            .uri()
            .query()?
            .split('&')
            .find_map(|kv| kv.strip_prefix("warehouse="))?;
        let account = warehouse.split(['/', '%']).next()?;
        return Some(account.to_owned());
    }
    None
}

/// The account and principal of a client id (`<account>.<id>`) a token route refused: the
/// principal is named by the client id when it is well-formed, else `anonymous`.
fn client_account(client_id: &str) -> Option<(String, Option<String>)> {
    let (account, id) = client_id.split_once('.')?;
    flotilla_domain::names::validate_account_id(account).ok()?;
    let principal = flotilla_domain::names::validate_resource_id(id)
        .is_ok()
        .then(|| client_id.to_owned());
    Some((account.to_owned(), principal))
}

pub async fn scope(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let id = flotilla_domain::names::new_id();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let account = route.as_deref().and_then(|r| audited_account(r, &req));
    let method = req.method().clone();
    let (mut response, principal) = events::scope_observed(id.clone(), next.run(req)).await;
    let status = response.status();
    let refused = match (&account, response.extensions().get::<RefusedClient>()) {
        (Some(account), _)
            if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) =>
        {
            Some((account.clone(), principal))
        }
        (_, Some(client)) if status == StatusCode::TOO_MANY_REQUESTS => client_account(&client.0),
        _ => None,
    };
    if let (Some(route), Some((account, principal))) = (&route, refused) {
        audit::record_refusal(
            &state,
            audit::RefusedRequest {
                account: &account,
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
