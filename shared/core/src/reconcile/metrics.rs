//! Runs counted by outcome (`flotilla_reconcile_runs_total` on `/v1/admin/metrics`).
//!
//! Process-wide, like the upstream request counters: the API, the queue worker and
//! `flotilla serve`'s in-process worker all count into it. The only label is the outcome,
//! never an account, an overlay or an error text.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::status::Outcome;

static SUCCEEDED: AtomicU64 = AtomicU64::new(0);
static FAILED_RETRYABLE: AtomicU64 = AtomicU64::new(0);
static FAILED_PERMANENT: AtomicU64 = AtomicU64::new(0);

/// The label values, in rendering order.
pub const OUTCOMES: [&str; 3] = ["succeeded", "failed_retryable", "failed_permanent"];

/// Counts one run that started (refusals before a run, such as a paused overlay, are not runs).
pub fn record_run(outcome: Outcome, retryable: bool) {
    let slot = match (outcome, retryable) {
        (Outcome::Succeeded, _) => &SUCCEEDED,
        (Outcome::Failed, true) => &FAILED_RETRYABLE,
        (Outcome::Failed, false) => &FAILED_PERMANENT,
    };
    slot.fetch_add(1, Ordering::Relaxed);
}

/// Runs so far with this outcome label.
pub fn runs(label: &str) -> u64 {
    match label {
        "succeeded" => SUCCEEDED.load(Ordering::Relaxed),
        "failed_retryable" => FAILED_RETRYABLE.load(Ordering::Relaxed),
        "failed_permanent" => FAILED_PERMANENT.load(Ordering::Relaxed),
        _ => 0,
    }
}

/// Prometheus text for the family; every outcome appears, even at 0.
pub fn render_prometheus() -> String {
    let mut out = String::from(
        "# HELP flotilla_reconcile_runs_total Overlay reconciliation runs, by outcome.\n\
         # TYPE flotilla_reconcile_runs_total counter\n",
    );
    for label in OUTCOMES {
        let _ = writeln!(
            out,
            "flotilla_reconcile_runs_total{{outcome=\"{label}\"}} {}",
            runs(label)
        );
    }
    out
}
