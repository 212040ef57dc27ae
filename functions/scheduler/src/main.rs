#![forbid(unsafe_code)]
//! The scheduler Lambda: EventBridge schedule -> one SQS message per due overlay.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_runtime::queue::{SqsQueue, sqs_client};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let url = settings
        .reconcile_queue_url
        .clone()
        .ok_or("FLOTILLA_RECONCILE_QUEUE_URL is required")?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let queue = SqsQueue::new(sqs_client(settings.endpoint.as_deref()).await, url);
    let (state, queue) = (&state, &queue);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent>| async move {
            flotilla_fn_scheduler::handle_schedule(state, queue, event.payload)
                .await
                .map_err(Error::from)
        },
    ))
    .await
}
