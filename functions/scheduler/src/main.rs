#![forbid(unsafe_code)]
//! The scheduler Lambda: EventBridge schedule -> one SQS message per due overlay.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_runtime::queue::{SqsQueue, sqs_client};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (settings, state) = flotilla_runtime::aws::start().await?;
    let url = settings
        .reconcile_queue_url
        .clone()
        .ok_or("FLOTILLA_RECONCILE_QUEUE_URL is required")?;
    let telemetry = LambdaTelemetry::new(&state, "scheduler");
    let queue = SqsQueue::new(sqs_client(settings.endpoint.as_deref()).await, url);
    let (state, queue, telemetry) = (&state, &queue, &telemetry);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent>| async move {
            let meta = Invocation::new(event.context.request_id, event.context.xray_trace_id);
            flotilla_fn_scheduler::invoke(state, queue, telemetry, meta, event.payload)
                .await
                .map_err(Error::from)
        },
    ))
    .await
}
