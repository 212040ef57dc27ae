#![forbid(unsafe_code)]
//! The reconciler Lambda's handler: one SQS batch of reconcile messages.
//!
//! Each record is handled on its own ([`handle_work_with`], all records sharing the invocation's budget): a plan message or a message for an overlay that is
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
use flotilla_reconcile::RunOptions;
use flotilla_reconcile::schedule::{WorkMessage, handle_work_with};
use flotilla_reconcile::work::MessageOutcome;
use flotilla_runtime::queue::ReconcileQueue;
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry, in_record};
use flotilla_services::AppState;
use flotilla_telemetry::catalog::{RECONCILE_FAILURES, RECONCILE_RUNS};

/// One invocation as `main` runs it: the batch, then the EMF flush. `queue` takes the
/// follow-up legs of checkpointed runs.
pub async fn invoke(
    state: &AppState,
    connector: &dyn Connector,
    queue: Option<&dyn ReconcileQueue>,
    telemetry: &LambdaTelemetry,
    meta: Invocation,
    event: SqsEvent,
) -> SqsBatchResponse {
    telemetry
        .invocation(meta, handle_batch_with(state, connector, queue, event))
        .await
}

/// Handles one batch; answers the records SQS must deliver again. Without a queue, a
/// checkpointed run's follow-up cannot be sent: its record is delivered again, and the leg's
/// redelivery sends it once a queue is there (see [`handle_batch_with`]).
pub async fn handle_batch(
    state: &AppState,
    connector: &dyn Connector,
    event: SqsEvent,
) -> SqsBatchResponse {
    handle_batch_with(state, connector, None, event).await
}

/// [`handle_batch`], sending the follow-up legs of checkpointed runs to `queue` before the
/// record is acknowledged. A follow-up the queue refuses makes the record a batch item
/// failure: its redelivery finds the leg done and sends the follow-up again.
pub async fn handle_batch_with(
    state: &AppState,
    connector: &dyn Connector,
    queue: Option<&dyn ReconcileQueue>,
    event: SqsEvent,
) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    // One invocation's budget is shared by the batch: every run ends by this deadline, and a
    // record that would start with less than a quarter of the budget left is delivered again
    // instead (a checkpointed leg may have spent most of it).
    let budget_ms = state.config.reconcile.run_budget_ms;
    let deadline_ms = state.clock.now_ms().saturating_add(budget_ms);
    let opts = RunOptions {
        deadline_ms: Some(deadline_ms),
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
            let outcome = handle_work_with(state, connector, &message, &opts).await;
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
