#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! The capture Lambda: SQS batches of capture messages (partial batch failures), with the
//! queue workers' handler (`flotilla_runtime::worker`) running capture jobs only. The
//! reconciler and the api's capture and revalidation routes queue the jobs; this function
//! links the capture runner so that the reconciler need not, and none of the reconciliation
//! pipeline. It sends nothing: a capture job has no follow-up message.

use flotilla_reconcile::AdapterConnector;
use flotilla_runtime::worker::{CaptureRun, Worker, capture_only};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (_, state) = flotilla_runtime::aws::start().await?;
    let worker = Worker {
        state: &state,
        connector: &AdapterConnector,
        queue: None,
        capture: CaptureRun::Inline,
        dispatch: capture_only,
    };
    flotilla_runtime::worker::run("capture", worker).await
}
