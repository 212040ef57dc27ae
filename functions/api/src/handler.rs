//! The api function's app: the shared router behind the API Gateway adapter
//! ([`flotilla_runtime::apigw`]: the principal from the JWT authorizer's claims, one
//! invocation of telemetry per request).

use std::sync::Arc;

use axum::Router;
use flotilla_runtime::apigw::behind_api_gateway;
use flotilla_runtime::telemetry::LambdaTelemetry;
use flotilla_services::AppState;

/// The router with the claims adapter in front, inside the per-invocation telemetry. The
/// Iceberg REST endpoint is the `iceberg` function's (`functions/iceberg`).
pub fn app(state: AppState, telemetry: Arc<LambdaTelemetry>) -> Router {
    behind_api_gateway(flotilla_http::router(state), telemetry)
}
