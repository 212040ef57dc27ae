//! Counts every API request by route template and status class, with its latency
//! (`flotilla_api_requests_total`, `flotilla_api_request_duration_ms`). The label is the
//! matched template (`GET /v1/accounts/{account_id}`), never the concrete path; a request
//! that matched no route is `unmatched`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use flotilla_telemetry::catalog::{API_LATENCY, API_REQUESTS};
use flotilla_telemetry::{intern_route, status_class};

pub async fn record(req: Request, next: Next) -> Response {
    let route = match req.extensions().get::<MatchedPath>() {
        Some(p) => intern_route(&format!("{} {}", req.method(), p.as_str())),
        None => "unmatched",
    };
    let started = Instant::now();
    let response = next.run(req).await;
    API_REQUESTS.inc(&[route, status_class(response.status().as_u16())]);
    API_LATENCY.observe(&[route], started.elapsed());
    response
}
