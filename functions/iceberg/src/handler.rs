//! The iceberg function's app: the Iceberg REST router behind the API Gateway adapter
//! ([`flotilla_runtime::apigw`], the same as the api function's).

use std::sync::Arc;

use axum::Router;
use flotilla_runtime::apigw::behind_api_gateway;
use flotilla_runtime::telemetry::LambdaTelemetry;
use flotilla_services::AppState;

/// The Iceberg REST router with the claims adapter in front, inside the per-invocation
/// telemetry.
///
/// API Gateway routes `POST /iceberg/v1/oauth/tokens` without the JWT authorizer (an engine
/// calls it before it holds a token), so `token_exchange` relays it to the identity
/// provider; every other route arrives with verified claims.
pub fn app(
    state: AppState,
    telemetry: Arc<LambdaTelemetry>,
    token_exchange: flotilla_iceberg_rest::TokenExchange,
) -> Router {
    let iceberg = flotilla_iceberg_rest::IcebergConfig {
        local_warehouse_root: None,
        vending: flotilla_iceberg_rest::vending::from_env(),
        token_exchange,
        ..Default::default()
    };
    behind_api_gateway(
        flotilla_iceberg_rest::iceberg_router(state, iceberg),
        telemetry,
    )
}
