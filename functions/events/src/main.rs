#![forbid(unsafe_code)]
//! The events Lambda: the metastore table's DynamoDB stream in, change events out on the
//! EventBridge bus `FLOTILLA_EVENT_BUS_NAME` (partial batch failures). The handler is
//! `flotilla_fn_events::handle_batch`.

use flotilla_fn_events::{EventBridgePublisher, StreamEvent, eventbridge_client};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let (settings, state) = flotilla_runtime::aws::start().await?;
    let bus = std::env::var("FLOTILLA_EVENT_BUS_NAME")
        .ok()
        .filter(|b| !b.is_empty())
        .ok_or("FLOTILLA_EVENT_BUS_NAME is required")?;
    let publisher =
        EventBridgePublisher::new(eventbridge_client(settings.endpoint.as_deref()).await, bus);
    let telemetry = LambdaTelemetry::new(&state, "events");
    let (store, publisher, telemetry) = (state.store.as_ref(), &publisher, &telemetry);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<StreamEvent>| async move {
            let meta = Invocation::new(event.context.request_id, event.context.xray_trace_id);
            Ok::<_, Error>(
                flotilla_fn_events::invoke(store, publisher, telemetry, meta, event.payload).await,
            )
        },
    ))
    .await
}
