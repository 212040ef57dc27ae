#![forbid(unsafe_code)]
//! The one HTTP router, served by `functions/api` (through `lambda_http`) and by
//! `flotilla serve` (through `axum::serve`). No route exists in only one host.

mod access_routes;
mod capture_routes;
mod directory_routes;
pub mod error;
mod event_routes;
pub mod extract;
mod index_routes;
mod integration_routes;
mod metrics_layer;
pub mod oauth;
mod openapi_routes;
mod reconcile_routes;
mod request_context;
mod routes;
mod upstream_routes;
pub mod wire;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::HttpError;
use flotilla_base::error::{Error, ErrorKind};
use flotilla_services::service::idempotency::RecordedResponse;
use flotilla_services::state::AppState;

pub use routes::{layered, router, router_with};

/// A JSON answer with the resource's `ETag` header when it has one.
pub fn json_response(status: StatusCode, body: Value) -> Response {
    let etag = body
        .get("etag")
        .and_then(Value::as_str)
        .and_then(|e| HeaderValue::from_str(e).ok());
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(e) = etag {
        resp.headers_mut().insert(header::ETAG, e);
    }
    resp
}

pub fn recorded(r: RecordedResponse) -> Response {
    json_response(
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK),
        r.body,
    )
}

pub fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, body)
}

pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

pub async fn not_found_fallback() -> HttpError {
    Error::new(ErrorKind::NotFound, "no such route").into()
}

pub async fn method_not_allowed() -> HttpError {
    Error::new(
        ErrorKind::MethodNotAllowed,
        "method not allowed on this route",
    )
    .into()
}

/// Adds the standard fallbacks to a router.
pub fn with_fallbacks(r: Router<AppState>) -> Router<AppState> {
    r.fallback(not_found_fallback)
        .method_not_allowed_fallback(method_not_allowed)
}
