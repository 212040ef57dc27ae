//! Every request runs as one request of the change-event context
//! (`flotilla_services::service::events::scope`): the events its changes write carry its
//! request id and its principal (recorded by the authenticating extractor). The id is
//! answered in `X-Flotilla-Request-Id`, so a client can find its own changes in the feed.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use flotilla_services::service::events;

pub const REQUEST_ID_HEADER: &str = "x-flotilla-request-id";

pub async fn scope(req: Request, next: Next) -> Response {
    let id = flotilla_domain::names::new_id();
    let mut response = events::scope(id.clone(), next.run(req)).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    response
}
