#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! The reconciler Lambda: SQS batches of reconcile messages (partial batch failures), with
//! the queue workers' handler (`flotilla_runtime::worker`). The capture job that follows a
//! reconciliation is queued for the capture function, never run here.

use aws_lambda_events::event::sqs::SqsEvent;
use flotilla_reconcile::AdapterConnector;
use flotilla_runtime::queue::ReconcileQueue;
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use flotilla_runtime::worker::{CaptureRun, Worker, every_kind};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let telemetry = LambdaTelemetry::new(&state, "reconciler");
    // The follow-up legs of checkpointed runs go back to the reconcile queue.
    let queue = flotilla_runtime::aws::queue(&settings).await;
    let worker = Worker {
        state: &state,
        connector: &AdapterConnector,
        queue: queue.as_ref().map(|q| q as &dyn ReconcileQueue),
        capture: CaptureRun::Queue,
        dispatch: every_kind,
    };
    let telemetry = &telemetry;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let meta = Invocation::new(event.context.request_id, event.context.xray_trace_id);
        Ok::<_, Error>(
            flotilla_runtime::worker::invoke(worker, telemetry, meta, event.payload).await,
        )
    }))
    .await
}
