#![forbid(unsafe_code)]
//! The reconciler Lambda's handler: one SQS batch of reconcile messages.
//!
//! Each record is handled on its own ([`handle_work`]): a plan message or a message for an overlay that is
//! gone, paused or at another generation is acknowledged without a run (superseded work);
//! a reconciliation that fails for a retryable reason ([`MessageOutcome::redeliver`]: the
//! error kind decides, `UNAVAILABLE` is retried, `INTERNAL` and client errors are not), and
//! a body that is not a reconcile message, is reported as a batch item failure, so SQS makes
//! it visible again and, after the queue's `maxReceiveCount`, moves it to the dead-letter
//! queue. A permanent failure is recorded in the overlay's status and acknowledged. This
//! handler decides nothing itself. Nothing here panics on input.
//!
//! [`MessageOutcome::redeliver`]: flotilla_reconcile::work::MessageOutcome::redeliver
//!
//! Each record runs in a `message` span (message id, trace id) and in the trace context of
//! its `AWSTraceHeader` attribute; [`invoke`] wraps a batch in the invocation span and
//! flushes the metrics as EMF lines afterwards.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use flotilla_reconcile::Connector;
use flotilla_reconcile::schedule::{WorkMessage, handle_work};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry, in_record};
use flotilla_services::AppState;
use flotilla_telemetry::catalog::{RECONCILE_FAILURES, RECONCILE_RUNS};

/// One invocation as `main` runs it: the batch, then the EMF flush.
pub async fn invoke(
    state: &AppState,
    connector: &dyn Connector,
    telemetry: &LambdaTelemetry,
    meta: Invocation,
    event: SqsEvent,
) -> SqsBatchResponse {
    telemetry
        .invocation(meta, handle_batch(state, connector, event))
        .await
}

/// Handles one batch; answers the records SQS must deliver again.
pub async fn handle_batch(
    state: &AppState,
    connector: &dyn Connector,
    event: SqsEvent,
) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for record in event.records {
        let Some(id) = record.message_id.clone().filter(|i| !i.is_empty()) else {
            tracing::error!(
                "SQS record without a message id; it cannot be reported and is dropped"
            );
            continue;
        };
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
            let outcome = handle_work(state, connector, &message).await;
            tracing::info!(outcome = outcome.label(), "reconcile message handled");
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
