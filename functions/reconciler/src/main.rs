#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! The reconciler Lambda: SQS batches of reconcile messages (partial batch failures).

use aws_lambda_events::event::sqs::SqsEvent;
use flotilla_reconcile::AdapterConnector;
use flotilla_runtime::queue::{SqsQueue, sqs_client};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let telemetry = LambdaTelemetry::new(&state, "reconciler");
    // The follow-up legs of checkpointed runs go back to the reconcile queue.
    let queue = match settings.reconcile_queue_url.clone() {
        Some(url) => Some(SqsQueue::new(
            sqs_client(settings.endpoint.as_deref()).await,
            url,
        )),
        None => None,
    };
    let (state, telemetry, queue) = (&state, &telemetry, queue.as_ref());
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let meta = Invocation::new(event.context.request_id, event.context.xray_trace_id);
        Ok::<_, Error>(
            flotilla_fn_reconciler::invoke(
                state,
                &AdapterConnector,
                queue.map(|q| q as &dyn flotilla_runtime::queue::ReconcileQueue),
                telemetry,
                meta,
                event.payload,
            )
            .await,
        )
    }))
    .await
}
