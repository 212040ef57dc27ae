#![forbid(unsafe_code)]
//! The scheduler Lambda's handler: on each EventBridge schedule event, one reconcile message
//! per active overlay whose refresh interval elapsed, across all accounts, then one bounded
//! pass of the credential sweep (orphaned credential generations are reclaimed without an
//! operator; `docs/integrations.md`, "Sweep").
//! The messages carry the invocation's trace header (`AWSTraceHeader`), so the reconciler
//! continues the trace.

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_runtime::queue::{QueueError, ReconcileQueue, schedule_once};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use flotilla_services::AppState;
use serde_json::{Value, json};

/// One invocation as `main` runs it: the schedule pass, then the EMF flush.
pub async fn invoke(
    state: &AppState,
    queue: &dyn ReconcileQueue,
    telemetry: &LambdaTelemetry,
    meta: Invocation,
    event: EventBridgeEvent,
) -> Result<Value, QueueError> {
    telemetry
        .invocation(meta, handle_schedule(state, queue, event))
        .await
}

/// Handles one schedule event; answers `{"enqueued": n, "sweep": {...}}`. A queue failure
/// fails the invocation (EventBridge retries it; the next schedule also catches up); a sweep
/// failure is logged and left to the next pass.
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
    let sweep = match flotilla_runtime::queue::sweep_once(state).await {
        Some(report) => json!(report),
        None => Value::Null,
    };
    Ok(json!({"enqueued": enqueued, "sweep": sweep}))
}
