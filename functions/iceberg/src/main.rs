#![forbid(unsafe_code)]
//! The Iceberg REST Lambda: API Gateway (HTTP API, payload 2.0) on `/iceberg/v1` -> the
//! Iceberg REST router. A function of its own so that the api function links no Iceberg,
//! Arrow or Parquet code (`flotilla serve` serves both on one router).

mod handler;
#[cfg(test)]
mod sample_events;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let (_, state) = flotilla_runtime::aws::start().await?;
    let token_exchange = flotilla_iceberg_rest::TokenExchange::from_env()?;
    let telemetry = flotilla_runtime::telemetry::LambdaTelemetry::new(&state, "iceberg");
    lambda_http::run(handler::app(
        state,
        std::sync::Arc::new(telemetry),
        token_exchange,
    ))
    .await
}
