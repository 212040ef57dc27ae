//! `GET /v1/openapi.json`: the API's OpenAPI 3.0.3 document, without authentication (it
//! describes the API, it holds no data).
//!
//! The source is `shared/http/openapi/openapi.yaml`; `scripts/openapi.py` converts it to the
//! JSON compiled in here, and `scripts/schemathesis.sh` refuses a stale copy. The test
//! `tests/openapi.rs` keeps the document and the router in step both ways.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use flotilla_services::state::AppState;

/// The served document (JSON text).
const OPENAPI_JSON: &str = include_str!("../openapi/openapi.json");

pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/openapi.json", get(openapi))
}

async fn openapi() -> Response {
    let mut resp = (StatusCode::OK, OPENAPI_JSON).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
