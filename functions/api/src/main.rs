#![forbid(unsafe_code)]
//! The HTTP API Lambda: API Gateway (HTTP API, payload 2.0) -> the shared axum router.

mod handler;
#[cfg(test)]
mod sample_events;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let (_, state) = flotilla_runtime::aws::start().await?;
    let telemetry = flotilla_runtime::telemetry::LambdaTelemetry::new(&state, "api");
    lambda_http::run(handler::app(state, std::sync::Arc::new(telemetry))).await
}
