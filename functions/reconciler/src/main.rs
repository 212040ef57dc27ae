#![forbid(unsafe_code)]
#![recursion_limit = "256"]
//! The reconciler Lambda: SQS batches of reconcile messages (partial batch failures), with
//! the queue workers' handler (`flotilla_runtime::worker`) running every message kind. The
//! capture job that follows a reconciliation is queued for the capture function, never run
//! here.

use flotilla_reconcile::AdapterConnector;
use flotilla_runtime::queue::ReconcileQueue;
use flotilla_runtime::worker::{CaptureRun, Worker, every_kind};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (settings, state) = flotilla_runtime::aws::start().await?;
    // The follow-up legs of checkpointed runs go back to the reconcile queue.
    let queue = flotilla_runtime::aws::queue(&settings).await;
    let worker = Worker {
        state: &state,
        connector: &AdapterConnector,
        queue: queue.as_ref().map(|q| q as &dyn ReconcileQueue),
        capture: CaptureRun::Queue,
        dispatch: every_kind,
    };
    flotilla_runtime::worker::run("reconciler", worker).await
}
