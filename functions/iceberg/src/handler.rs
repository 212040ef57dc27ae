//! The iceberg function's app: the Iceberg REST router behind the API Gateway adapter
//! ([`flotilla_runtime::apigw`], the same as the api function's).

use std::sync::Arc;

use axum::Router;
use flotilla_runtime::apigw::behind_api_gateway;
use flotilla_runtime::telemetry::LambdaTelemetry;
use flotilla_services::AppState;

/// The Iceberg REST router with the claims adapter in front, inside the per-invocation
/// telemetry.
pub fn app(state: AppState, telemetry: Arc<LambdaTelemetry>) -> Router {
    let iceberg = flotilla_iceberg_rest::IcebergConfig {
        local_warehouse_root: None,
        vending: flotilla_iceberg_rest::vending::from_env(),
        ..Default::default()
    };
    behind_api_gateway(
        flotilla_iceberg_rest::iceberg_router(state, iceberg),
        telemetry,
    )
}
