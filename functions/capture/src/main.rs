#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! The capture Lambda: SQS batches of capture messages (partial batch failures), with the
//! queue workers' handler (`flotilla_runtime::worker`) running capture jobs only. The
//! reconciler and the api's capture and revalidation routes queue the jobs; this function
//! links the capture runner so that the reconciler need not, and none of the reconciliation
//! pipeline. It sends nothing: a capture job has no follow-up message.

use aws_lambda_events::event::sqs::SqsEvent;
use flotilla_reconcile::AdapterConnector;
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use flotilla_runtime::worker::{CaptureRun, Worker, capture_only};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let telemetry = LambdaTelemetry::new(&state, "capture");
    let worker = Worker {
        state: &state,
        connector: &AdapterConnector,
        queue: None,
        capture: CaptureRun::Inline,
        dispatch: capture_only,
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
