#![forbid(unsafe_code)]
//! The reconciler Lambda's handler: one SQS batch of reconcile messages.
//!
//! Each record is handled on its own ([`handle_message`]): a message for an overlay that is
//! gone, paused or at another generation is acknowledged without a run (superseded work);
//! a reconciliation that fails, and a body that is not a reconcile message, is reported as a
//! batch item failure, so SQS makes it visible again and, after the queue's
//! `maxReceiveCount`, moves it to the dead-letter queue. Nothing here panics on input.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use flotilla_core::AppState;
use flotilla_core::reconcile::Connector;
use flotilla_core::reconcile::work::{ReconcileMessage, handle_message};

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
        let parsed = record.body.as_deref().map(ReconcileMessage::parse);
        let message = match parsed {
            Some(Ok(m)) => m,
            Some(Err(reason)) => {
                tracing::warn!(message_id = %id, reason = %reason, "poison reconcile message");
                response.add_failure(id);
                continue;
            }
            None => {
                tracing::warn!(message_id = %id, "reconcile message without a body");
                response.add_failure(id);
                continue;
            }
        };
        let outcome = handle_message(state, connector, &message).await;
        if outcome.redeliver() {
            response.add_failure(id);
        }
    }
    response
}
