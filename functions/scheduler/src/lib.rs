#![forbid(unsafe_code)]
//! The scheduler Lambda's handler: on each EventBridge schedule event, one reconcile message
//! per active overlay whose refresh interval elapsed, across all accounts.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_core::AppState;
use flotilla_runtime::queue::{QueueError, ReconcileQueue, schedule_once};
use serde_json::{Value, json};

/// Handles one schedule event; answers `{"enqueued": n}`. A queue failure fails the
/// invocation (EventBridge retries it; the next schedule also catches up).
pub async fn handle_schedule(
    state: &AppState,
    queue: &dyn ReconcileQueue,
    event: EventBridgeEvent,
) -> Result<Value, QueueError> {
    let enqueued = schedule_once(state, queue).await?;
    tracing::info!(
        enqueued,
        event_id = event.id.as_deref().unwrap_or(""),
        "scheduled overlay reconciliations"
    );
    Ok(json!({"enqueued": enqueued}))
}
