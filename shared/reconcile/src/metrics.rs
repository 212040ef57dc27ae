//! Runs counted by outcome (`flotilla_reconcile_run_outcomes_total` in the telemetry
//! catalogue: the metrics page and CloudWatch EMF).
//!
//! Process-wide: the API, the queue worker and `flotilla serve`'s in-process worker all
//! count into it. The only label is the outcome, never an account, an overlay or an error.

use flotilla_telemetry::catalog::RECONCILE_RUN_OUTCOMES;

use super::status::Outcome;

/// Counts one run that started (refusals before a run, such as a paused overlay, are not runs).
pub fn record_run(outcome: Outcome, retryable: bool) {
    let label = match (outcome, retryable) {
        (Outcome::Succeeded, _) => "succeeded",
        (Outcome::Failed, true) => "failed_retryable",
        (Outcome::Failed, false) => "failed_permanent",
    };
    RECONCILE_RUN_OUTCOMES.inc(&[label]);
}

/// The label values, in rendering order.
pub const OUTCOMES: [&str; 3] = ["succeeded", "failed_retryable", "failed_permanent"];

/// Runs so far with this outcome label (tests).
pub fn runs(label: &'static str) -> u64 {
    flotilla_telemetry::registry::global().counter(&RECONCILE_RUN_OUTCOMES, &[label])
}
