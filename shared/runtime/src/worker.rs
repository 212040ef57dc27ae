//! The queue workers' Lambda handler: one SQS batch of work messages. The reconciler
//! function runs it on the reconcile queue with every message kind ([`every_kind`]), the
//! capture function on the capture queue with capture jobs only ([`capture_only`]). Besides
//! the kinds they run, they differ in where the capture job that follows a reconciliation
//! runs ([`CaptureRun`]: the reconciler queues it, since it does not link the capture
//! runner).
//!
//! Each record is handled on its own (the worker's [`Dispatch`], all records sharing the
//! invocation's budget): a plan message or a message for an overlay that is gone, paused or
//! at another generation is acknowledged without a run (superseded work); a run that fails
//! for a retryable reason ([`MessageOutcome::redeliver`]: the error kind decides,
//! `UNAVAILABLE` is retried, `INTERNAL` and client errors are not), and a body that is not a
//! work message, is reported as a batch item failure, so SQS makes it visible again and,
//! after the queue's `maxReceiveCount`, moves it to the dead-letter queue. A permanent
//! failure is recorded in the overlay's status and acknowledged. This handler decides
//! nothing itself. Nothing here panics on input.
//!
//! Each record runs in a `message` span (message id, trace id) and in the trace context of
//! its `AWSTraceHeader` attribute; [`invoke`] wraps a batch in the invocation span and
//! flushes the metrics as EMF lines afterwards.

use std::future::Future;
use std::pin::Pin;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
pub use flotilla_reconcile::CaptureRun;
use flotilla_reconcile::schedule::{WorkMessage, handle_work_with};
use flotilla_reconcile::work::{MessageOutcome, handle_capture_by};
use flotilla_reconcile::{Connector, RunOptions};

use crate::queue::ReconcileQueue;
use crate::telemetry::{Invocation, LambdaTelemetry, in_record};
use flotilla_services::AppState;
use flotilla_telemetry::catalog::{RECONCILE_FAILURES, RECONCILE_RUNS};

/// What a worker function runs with.
#[derive(Clone, Copy)]
pub struct Worker<'a> {
    pub state: &'a AppState,
    pub connector: &'a dyn Connector,
    /// Takes the follow-up legs of checkpointed runs. Without it a run's follow-up cannot be
    /// sent: its record is delivered again, and the leg's redelivery sends it once a queue
    /// is there.
    pub queue: Option<&'a dyn ReconcileQueue>,
    /// Where the capture job that follows a reconciliation runs.
    pub capture: CaptureRun,
    /// What runs a parsed message: [`every_kind`] (the reconciler) or [`capture_only`] (the
    /// capture function). A function pointer chosen by `main`, so a binary links only the
    /// message kinds it runs.
    pub dispatch: Dispatch,
}

/// Runs one parsed message with the run's tunables.
pub type Dispatch = for<'a> fn(
    &'a AppState,
    &'a dyn Connector,
    &'a WorkMessage,
    &'a RunOptions,
) -> Pin<Box<dyn Future<Output = MessageOutcome> + Send + 'a>>;

/// Every message kind: plan jobs, overlay reconciliations and their follow-up legs, capture
/// jobs.
pub fn every_kind<'a>(
    state: &'a AppState,
    connector: &'a dyn Connector,
    m: &'a WorkMessage,
    opts: &'a RunOptions,
) -> Pin<Box<dyn Future<Output = MessageOutcome> + Send + 'a>> {
    Box::pin(handle_work_with(state, connector, m, opts))
}

/// Capture jobs only: the capture function's queue carries nothing else. Any other kind is
/// refused as a retryable failure, so a misrouted message ends in the capture queue's
/// dead-letter queue (to be moved to the reconcile queue) rather than being lost.
pub fn capture_only<'a>(
    state: &'a AppState,
    connector: &'a dyn Connector,
    m: &'a WorkMessage,
    opts: &'a RunOptions,
) -> Pin<Box<dyn Future<Output = MessageOutcome> + Send + 'a>> {
    Box::pin(async move {
        match m {
            WorkMessage::Capture(c) => {
                handle_capture_by(state, connector, c, opts.deadline_ms).await
            }
            _ => MessageOutcome::Failed {
                retryable: true,
                code: "UNSUPPORTED",
                reason: "this function runs capture jobs only; send reconcile and plan \
                         messages to the reconcile queue"
                    .into(),
                kind: "internal",
            },
        }
    })
}

impl<'a> Worker<'a> {
    /// A worker without a follow-up queue, running capture where the build's default puts it.
    pub fn new(state: &'a AppState, connector: &'a dyn Connector) -> Self {
        Self {
            state,
            connector,
            queue: None,
            capture: CaptureRun::default(),
            dispatch: every_kind,
        }
    }
}

/// A worker function's `main` after its settings and state: serves SQS batches through
/// `worker` until the Lambda runtime stops, each as one invocation of `function`'s
/// telemetry.
pub async fn run(function: &'static str, worker: Worker<'_>) -> Result<(), lambda_runtime::Error> {
    let telemetry = LambdaTelemetry::new(worker.state, function);
    let telemetry = &telemetry;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| async move {
            let meta = Invocation::new(event.context.request_id, event.context.xray_trace_id);
            Ok::<_, lambda_runtime::Error>(invoke(worker, telemetry, meta, event.payload).await)
        },
    ))
    .await
}

/// One invocation as `main` runs it: the batch, then the EMF flush.
pub async fn invoke(
    worker: Worker<'_>,
    telemetry: &LambdaTelemetry,
    meta: Invocation,
    event: SqsEvent,
) -> SqsBatchResponse {
    telemetry
        .invocation(meta, handle_batch_with(worker, event))
        .await
}

/// Handles one batch with [`Worker::new`]; answers the records SQS must deliver again.
pub async fn handle_batch(
    state: &AppState,
    connector: &dyn Connector,
    event: SqsEvent,
) -> SqsBatchResponse {
    handle_batch_with(Worker::new(state, connector), event).await
}

/// Handles one batch, sending the follow-up legs of checkpointed runs to the worker's queue
/// before the record is acknowledged. A follow-up the queue refuses makes the record a batch
/// item failure: its redelivery finds the leg done and sends the follow-up again.
pub async fn handle_batch_with(worker: Worker<'_>, event: SqsEvent) -> SqsBatchResponse {
    let Worker {
        state,
        connector,
        queue,
        capture,
        dispatch,
    } = worker;
    let mut response = SqsBatchResponse::default();
    // One invocation's budget is shared by the batch: every run ends by this deadline, and a
    // record that would start with less than a quarter of the budget left is delivered again
    // instead (a checkpointed leg may have spent most of it).
    let budget_ms = state.config.reconcile.run_budget_ms;
    let deadline_ms = state.clock.now_ms().saturating_add(budget_ms);
    let opts = RunOptions {
        deadline_ms: Some(deadline_ms),
        capture,
        ..RunOptions::default()
    };
    for record in event.records {
        let Some(id) = record.message_id.clone().filter(|i| !i.is_empty()) else {
            tracing::error!(
                "SQS record without a message id; it cannot be reported and is dropped"
            );
            continue;
        };
        if deadline_ms.saturating_sub(state.clock.now_ms()) < budget_ms / 4 {
            tracing::info!(message_id = %id, "the invocation's budget is spent; the record is delivered again");
            response.add_failure(id);
            continue;
        }
        let trace_header = record.attributes.get("AWSTraceHeader").cloned();
        let redeliver = in_record(&id, trace_header.as_deref(), async {
            let parsed = record.body.as_deref().map(WorkMessage::parse);
            let message = match parsed {
                Some(Ok(m)) => m,
                Some(Err(reason)) => {
                    tracing::warn!(reason = %reason, "poison reconcile message");
                    count_poison();
                    return true;
                }
                None => {
                    tracing::warn!("reconcile message without a body");
                    count_poison();
                    return true;
                }
            };
            let outcome = dispatch(state, connector, &message, &opts).await;
            tracing::info!(outcome = outcome.label(), "reconcile message handled");
            if let MessageOutcome::Continued { next } = &outcome {
                let sent = match queue {
                    Some(q) => q.send(std::slice::from_ref(next.as_ref())).await.is_ok(),
                    None => false,
                };
                if !sent {
                    tracing::warn!("the follow-up leg was not sent; the record is redelivered");
                }
                return !sent;
            }
            outcome.redeliver()
        })
        .await;
        if redeliver {
            response.add_failure(id);
        }
    }
    response
}

fn count_poison() {
    RECONCILE_RUNS.inc(&["poison"]);
    RECONCILE_FAILURES.inc(&["poison"]);
}
