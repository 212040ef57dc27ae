#![forbid(unsafe_code)]
//! The catalog-finalize Lambda: enables directory authority once the operator
//! acknowledges a complete writer rollout and quiescent write admission.
//!
//! Event: `{"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true}`
//! (`events/finalize/acknowledged.json`). Answers `{"authority": "ENABLED", "enabled_at": ...}`
//! on the first and every later call; without both acknowledgements the invocation fails
//! with `FAILED_PRECONDITION` and writes nothing.

mod handler;

use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (_, state) = flotilla_runtime::aws::start().await?;
    let telemetry = flotilla_runtime::telemetry::LambdaTelemetry::new(&state, "finalize");
    let (state, telemetry) = (&state, &telemetry);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<handler::FinalizeEvent>| async move {
            let meta = flotilla_runtime::telemetry::Invocation::new(
                event.context.request_id,
                event.context.xray_trace_id,
            );
            handler::invoke(state, telemetry, meta, event.payload).await
        },
    ))
    .await
}
