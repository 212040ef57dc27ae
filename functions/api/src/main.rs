#![forbid(unsafe_code)]
//! The HTTP API Lambda: API Gateway (HTTP API, payload 2.0) -> the shared axum router.

mod handler;
#[cfg(test)]
mod sample_events;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let telemetry = flotilla_runtime::telemetry::LambdaTelemetry::new(&state, "api");
    lambda_http::run(handler::app(state, std::sync::Arc::new(telemetry))).await
}
