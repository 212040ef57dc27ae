//! Scheduled reconciliation: which overlays are due (the scheduler), and what one queue
//! message does (the reconciler worker). Both hosts use these: the `scheduler` and
//! `reconciler` Lambdas on AWS (EventBridge -> SQS -> Lambda) and `flotilla serve` with an
//! in-process queue.
//!
//! A message names an overlay and the generation the scheduler observed. The worker acks
//! (does nothing for) a message whose overlay is gone, paused or at another generation: a
//! newer configuration has made it stale, and the scheduler enqueues the current one. A run
//! that fails for a transient reason is reported back so the queue redelivers it (and a
//! message that keeps failing reaches the dead-letter queue after the queue's
//! `maxReceiveCount`); a run that fails permanently (a mapping conflict, refused
//! authentication, a bound hit, an object too large) is recorded in the overlay's status and
//! acknowledged: the next schedule, or a change of the overlay or its integration, runs it
//! again.

use std::collections::{HashMap, HashSet};

use flotilla_domain::keys;
use flotilla_domain::model::{IntegrationRecord, OverlayRecord, OverlayStatus};
use flotilla_metastore::{Consistency, Metastore, Query, query_all};

use super::message::WorkMessage;
pub use super::message::{CaptureMessage, MessageOutcome, ReconcileMessage};
use super::{CaptureRun, Connector, ReconcileError, ReconcileSummary, RunOptions, observe};
use flotilla_base::error::Result;
use flotilla_services::state::AppState;

async fn current_generation(state: &AppState, m: &ReconcileMessage) -> Result<Option<u64>> {
    let rec = flotilla_base::store::read::<OverlayRecord>(
        state.store.as_ref(),
        keys::overlay(&m.account_id, &m.overlay_id),
        Consistency::Strong,
    )
    .await?;
    Ok(rec.map(|r| r.value.generation))
}

/// What a run that lost its fence comes to: the overlay is gone, or moved to another
/// generation (the message is stale), or it is still at the message's generation and the
/// run is tried again.
async fn fence_lost(state: &AppState, m: &ReconcileMessage) -> MessageOutcome {
    match current_generation(state, m).await {
        Ok(None) => MessageOutcome::Gone,
        Ok(Some(g)) if g != m.observed_generation => MessageOutcome::Superseded { current: g },
        _ => MessageOutcome::Failed {
            retryable: true,
            code: ReconcileError::FenceLost.code(),
            reason: ReconcileError::FenceLost.to_string(),
            kind: "fence_lost",
        },
    }
}

/// Handles one message: reconciles the overlay if the message is still current. Counts the
/// outcome (`flotilla_reconcile_runs_total`, `..._failures_total`, `..._duration_ms`).
pub async fn handle_message(
    state: &AppState,
    connector: &dyn Connector,
    m: &ReconcileMessage,
) -> MessageOutcome {
    handle_message_leg(state, connector, m, None, &RunOptions::default()).await
}

/// [`handle_message`] for the message that starts a run (`ck` is `None`) or one leg of its
/// checkpointed run.
pub async fn handle_message_leg(
    state: &AppState,
    connector: &dyn Connector,
    m: &ReconcileMessage,
    ck: Option<&crate::chain::CheckpointRef>,
    opts: &RunOptions,
) -> MessageOutcome {
    use flotilla_telemetry::catalog::{RECONCILE_DURATION, RECONCILE_FAILURES, RECONCILE_RUNS};
    let mut outcome = run_message(state, connector, m, ck, opts).await;
    if matches!(outcome, MessageOutcome::Reconciled(_))
        && let Some(failed) = after_reconcile(state, connector, m, opts.capture).await
    {
        outcome = failed;
    }
    RECONCILE_RUNS.inc(&[outcome.label()]);
    match &outcome {
        MessageOutcome::Failed { kind, .. } => RECONCILE_FAILURES.inc(&[kind]),
        MessageOutcome::Reconciled(s) => {
            RECONCILE_DURATION.observe_ms(&[], s.duration_ms as f64);
        }
        _ => {}
    }
    outcome
}

/// The capture job that follows a reconciliation, run where `how` says. `None` when it
/// completed, had nothing to do, was queued, or no longer applies; otherwise the outcome the
/// reconcile message reports (a transient failure is delivered again: the reconciliation is
/// then a no-op run, and the capture is tried again).
async fn after_reconcile(
    state: &AppState,
    connector: &dyn Connector,
    m: &ReconcileMessage,
    how: CaptureRun,
) -> Option<MessageOutcome> {
    match how {
        #[cfg(feature = "capture")]
        CaptureRun::Inline => crate::capture::after_reconcile(state, connector, m).await,
        // Without the runner there is nowhere to run it but the capture workers.
        #[cfg(not(feature = "capture"))]
        CaptureRun::Inline => {
            let _ = connector;
            queue_capture(state, m).await
        }
        CaptureRun::Queue => queue_capture(state, m).await,
    }
}

/// [`queue_capture_job`] for a reconcile message: a transient failure to plan or to send
/// (a host without a queue included) is delivered again; a permanent one is logged and
/// acknowledged (the reconciliation succeeded, and the next one plans again).
async fn queue_capture(state: &AppState, m: &ReconcileMessage) -> Option<MessageOutcome> {
    let Some(work) = state.work.as_deref() else {
        tracing::warn!("this host has no queue for capture jobs; the message is delivered again");
        return Some(MessageOutcome::Failed {
            retryable: true,
            code: "UNAVAILABLE",
            reason: "the capture job was not queued: this host has no queue for capture jobs"
                .into(),
            kind: "incomplete",
        });
    };
    match queue_capture_job(state, work, m).await {
        Ok(()) => None,
        Err(e) => e.is_retryable().then(|| MessageOutcome::failed(&e)),
    }
}

/// Plans the capture job of a reconciled overlay (`m` names the generation the
/// reconciliation published under) from stored state and, when it has work (a table to
/// capture, a pointer to retire), sends its capture message through `work`. `Ok` when it was
/// queued, had nothing to do, or no longer applies (the overlay moved on, is paused, gone or
/// being deleted: a newer message or none applies); failures are logged.
pub(crate) async fn queue_capture_job(
    state: &AppState,
    work: &dyn flotilla_services::state::WorkSender,
    m: &ReconcileMessage,
) -> Result<(), ReconcileError> {
    plan_and_queue_capture(state, work, m).await.map(|_| ())
}

/// [`queue_capture_job`], answering the plan it queued (`None` when it queued nothing: the
/// capture is current, or the work no longer applies).
pub(crate) async fn plan_and_queue_capture(
    state: &AppState,
    work: &dyn flotilla_services::state::WorkSender,
    m: &ReconcileMessage,
) -> Result<Option<crate::capture::CapturePlan>, ReconcileError> {
    use crate::capture::CaptureOptions;
    let opts = CaptureOptions {
        expect_generation: Some(m.observed_generation),
        ..CaptureOptions::default()
    };
    let plan = match crate::capture::plan(state, &m.account_id, &m.overlay_id, &opts).await {
        Ok(plan) => plan,
        Err(e) if e.no_longer_applies() => return Ok(None),
        Err(e) => {
            tracing::warn!(overlay_id = %m.overlay_id, code = e.code(), cause = %e.cause(), "capture could not be planned");
            return Err(e);
        }
    };
    if !plan.has_work() {
        tracing::info!(overlay_id = %m.overlay_id, unchanged = plan.unchanged, "capture is current");
        return Ok(None);
    }
    let message = WorkMessage::Capture(m.capture_job());
    match work.send_bodies(&[message.to_body()]).await {
        Ok(()) => {
            tracing::info!(
                overlay_id = %m.overlay_id,
                tables = plan.tables.len(),
                retire = plan.orphans.len(),
                "capture job queued"
            );
            Ok(Some(plan))
        }
        Err(e) => {
            tracing::warn!(overlay_id = %m.overlay_id, cause = %e, "the capture job was not queued");
            Err(ReconcileError::Api(e))
        }
    }
}

/// Handles one capture message: runs the overlay's capture job if the message is still
/// current. Fenced like a reconcile message: an overlay that is gone, paused or at another
/// generation is acknowledged without work, and the job itself refuses (and the message is
/// acknowledged) when the overlay moves on while it runs. A transient failure is delivered
/// again; a permanent one is logged and acknowledged. Counted like reconcile messages.
pub async fn handle_capture(
    state: &AppState,
    connector: &dyn Connector,
    m: &CaptureMessage,
) -> MessageOutcome {
    handle_capture_by(state, connector, m, None).await
}

/// How long before a host's deadline a capture job stops starting and cutting work, so that
/// it records what it did (pointers, markers, the deferred tables) while the host still runs.
pub const CAPTURE_DEADLINE_MARGIN_MS: i64 = 20_000;

/// The options of the capture job a message asks for, run by a host that must be done by
/// `deadline_ms` (on the service clock; a Lambda invocation's budget): the job's time budget
/// is cut to end [`CAPTURE_DEADLINE_MARGIN_MS`] before it, so the job stops there and the
/// next delivery resumes (`CAPTURE_DEADLINE`) instead of the host being killed mid-table.
#[cfg(feature = "capture")]
pub fn capture_options(
    m: &CaptureMessage,
    now_ms: i64,
    deadline_ms: Option<i64>,
) -> crate::capture::CaptureOptions {
    let mut opts = crate::capture::CaptureOptions {
        revalidate: m.revalidate,
        expect_generation: Some(m.observed_generation),
        ..crate::capture::CaptureOptions::default()
    };
    if let Some(deadline) = deadline_ms {
        let left = deadline
            .saturating_sub(now_ms)
            .saturating_sub(CAPTURE_DEADLINE_MARGIN_MS)
            .max(0);
        let left = std::time::Duration::from_millis(u64::try_from(left).unwrap_or(0));
        opts.job_budget = opts.job_budget.min(left);
    }
    opts
}

/// [`handle_capture`] on a host that must be done by `deadline_ms` ([`capture_options`]).
pub async fn handle_capture_by(
    state: &AppState,
    connector: &dyn Connector,
    m: &CaptureMessage,
    deadline_ms: Option<i64>,
) -> MessageOutcome {
    use flotilla_telemetry::catalog::{RECONCILE_FAILURES, RECONCILE_RUNS};
    let span =
        tracing::info_span!("capture", account_id = %m.account_id, overlay_id = %m.overlay_id);
    let _enter = span.enter();
    let outcome = match current_generation(state, &m.fence()).await {
        Ok(None) => MessageOutcome::Gone,
        Ok(Some(g)) if g != m.observed_generation => MessageOutcome::Superseded { current: g },
        Ok(Some(_)) => run_capture(state, connector, m, deadline_ms).await,
        Err(e) => MessageOutcome::unreadable(e),
    };
    match &outcome {
        MessageOutcome::Failed { reason, code, .. } => {
            tracing::warn!(outcome = outcome.label(), code, reason = %reason, "capture message failed")
        }
        other => tracing::info!(outcome = other.label(), "capture message handled"),
    }
    RECONCILE_RUNS.inc(&[outcome.label()]);
    if let MessageOutcome::Failed { kind, .. } = &outcome {
        RECONCILE_FAILURES.inc(&[kind]);
    }
    outcome
}

#[cfg(feature = "capture")]
async fn run_capture(
    state: &AppState,
    connector: &dyn Connector,
    m: &CaptureMessage,
    deadline_ms: Option<i64>,
) -> MessageOutcome {
    let opts = capture_options(m, state.clock.now_ms(), deadline_ms);
    match crate::capture::capture(state, connector, &m.account_id, &m.overlay_id, &opts).await {
        Ok(s) if s.has_retryable_failure() => MessageOutcome::capture_incomplete(s.failed.len()),
        Ok(s) => MessageOutcome::Captured {
            captured: s.captured,
            unchanged: s.unchanged,
        },
        Err(ReconcileError::NotFound | ReconcileError::Deleting(_)) => MessageOutcome::Gone,
        Err(ReconcileError::Paused(_)) => MessageOutcome::Paused,
        Err(ReconcileError::FenceLost) => fence_lost(state, &m.fence()).await,
        Err(e) => MessageOutcome::failed(&e),
    }
}

/// A host built without the capture runner cannot run the job: capture messages belong on
/// the capture queue (`FLOTILLA_CAPTURE_QUEUE_URL`). One that reaches such a host anyway (a
/// deployment that routes them elsewhere) is delivered again, and so kept until it reaches
/// the dead-letter queue, rather than acknowledged and lost.
#[cfg(not(feature = "capture"))]
async fn run_capture(
    _state: &AppState,
    _connector: &dyn Connector,
    _m: &CaptureMessage,
    _deadline_ms: Option<i64>,
) -> MessageOutcome {
    MessageOutcome::Failed {
        retryable: true,
        code: "UNSUPPORTED",
        reason: "this host does not run capture jobs; send them to the capture queue".into(),
        kind: "internal",
    }
}

async fn run_message(
    state: &AppState,
    connector: &dyn Connector,
    m: &ReconcileMessage,
    ck: Option<&crate::chain::CheckpointRef>,
    opts: &RunOptions,
) -> MessageOutcome {
    let span =
        tracing::info_span!("reconcile", account_id = %m.account_id, overlay_id = %m.overlay_id);
    let _enter = span.enter();
    match current_generation(state, m).await {
        Ok(None) => return MessageOutcome::Gone,
        Ok(Some(g)) if g != m.observed_generation => {
            return MessageOutcome::Superseded { current: g };
        }
        Ok(Some(_)) => {}
        Err(e) => {
            // The kind decides: a throttled or unreachable store is redelivered, a corrupt
            // record (`INTERNAL`) is not.
            return MessageOutcome::unreadable(e);
        }
    }
    let result = match run_chained(state, connector, m, ck, opts).await {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let outcome = match result {
        Ok(summary) => MessageOutcome::Reconciled(Box::new(summary)),
        Err(ReconcileError::NotFound) => MessageOutcome::Gone,
        Err(ReconcileError::Paused(_)) => MessageOutcome::Paused,
        Err(ReconcileError::FenceLost) => fence_lost(state, m).await,
        Err(e) => MessageOutcome::failed(&e),
    };
    match &outcome {
        MessageOutcome::Reconciled(s) => tracing::info!(
            outcome = outcome.label(),
            duration_ms = s.duration_ms,
            dropped_namespaces = s.dropped.namespaces,
            "reconciled"
        ),
        MessageOutcome::Failed { reason, code, .. } => {
            tracing::warn!(outcome = outcome.label(), code, reason = %reason, "reconcile failed")
        }
        other => tracing::info!(
            outcome = other.label(),
            "reconcile message acknowledged without a run"
        ),
    }
    outcome
}

/// One leg of the overlay's run: the whole run when it fits in one invocation, else one
/// leg of its checkpointed chain. A message that is not run answers its outcome as the error.
async fn run_chained(
    state: &AppState,
    connector: &dyn Connector,
    m: &ReconcileMessage,
    ck: Option<&crate::chain::CheckpointRef>,
    base: &RunOptions,
) -> Result<Result<ReconcileSummary, ReconcileError>, MessageOutcome> {
    use crate::chain::{Located, Subject, locate, run_leg};
    let subj = Subject {
        account: &m.account_id,
        key: format!("OVL#{}", m.overlay_id),
        generation: m.observed_generation,
        plan: None,
    };
    let metastore = MessageOutcome::unreadable;
    let chain = match locate(state, &subj, ck).await.map_err(metastore)? {
        Located::Stale => return Err(MessageOutcome::Duplicate),
        Located::Resend(r) => {
            return Err(MessageOutcome::Continued {
                next: Box::new(crate::message::WorkMessage::Overlay(m.clone()).leg(r)),
            });
        }
        Located::Fresh => None,
        Located::Run(c) => Some(c),
    };
    let observed = match chain {
        Some(_) => Vec::new(),
        None => {
            let o = match observe(state, &m.account_id, &m.overlay_id).await {
                Ok(o) => o,
                Err(e) => return Ok(Err(e)),
            };
            if o.overlay.generation != m.observed_generation {
                return Ok(Err(ReconcileError::FenceLost));
            }
            vec![o]
        }
    };
    let opts = RunOptions {
        expect_generation: Some(m.observed_generation),
        ..base.clone()
    };
    let leg: std::pin::Pin<
        Box<dyn std::future::Future<Output = crate::chain::LegOutcome> + Send + '_>,
    > = Box::pin(run_leg(state, connector, &subj, observed, chain, &opts));
    let out = leg.await;
    if out.lost {
        return Err(MessageOutcome::Duplicate);
    }
    if let Some(next) = out.next {
        return Err(MessageOutcome::Continued {
            next: Box::new(crate::message::WorkMessage::Overlay(m.clone()).leg(next)),
        });
    }
    match out.results.into_iter().next() {
        Some((_, r)) => Ok(r),
        // The chain stopped before its overlay was observed again (gone or being deleted).
        None => Ok(Err(ReconcileError::NotFound)),
    }
}

/// Every active overlay whose refresh interval has elapsed since its last run started, or
/// whose configuration (the overlay's or its integration's generation) changed since its last
/// run, across all accounts: one message each, at the overlay's current generation. Paused
/// overlays, overlays of paused or missing integrations, and overlays being deleted are not
/// due.
pub async fn due_overlays(store: &dyn Metastore, now_ms: i64) -> Result<Vec<ReconcileMessage>> {
    let accounts = query_all(
        store,
        Query::new(
            keys::SYSTEM_PK,
            keys::ACCOUNT_LISTING_PREFIX,
            Consistency::Eventual,
        ),
    )
    .await?;
    let mut out = Vec::new();
    for item in accounts {
        let Some(account) = item.key.sk.strip_prefix(keys::ACCOUNT_LISTING_PREFIX) else {
            continue;
        };
        out.extend(due_in_account(store, account, now_ms).await?);
    }
    Ok(out)
}

async fn due_in_account(
    store: &dyn Metastore,
    account: &str,
    now_ms: i64,
) -> Result<Vec<ReconcileMessage>> {
    let pk = keys::account_pk(account);
    let scan = |prefix: &'static str| {
        query_all(store, Query::new(pk.clone(), prefix, Consistency::Eventual))
    };
    let overlays = scan(keys::OVERLAY_PREFIX).await?;
    if overlays.is_empty() {
        return Ok(Vec::new());
    }
    let mut integrations: HashMap<String, IntegrationRecord> = HashMap::new();
    for item in scan(keys::INTEGRATION_PREFIX).await? {
        let rec: IntegrationRecord = item.json()?;
        integrations.insert(rec.id.clone(), rec);
    }
    let mut last: HashMap<String, OverlayStatus> = HashMap::new();
    for item in scan("OVLSTATUS#").await? {
        let Some(id) = item.key.sk.strip_prefix("OVLSTATUS#") else {
            continue;
        };
        last.insert(id.to_owned(), item.json()?);
    }
    let fenced: HashSet<String> = scan("OVLFENCE#")
        .await?
        .iter()
        .filter_map(|i| i.key.sk.strip_prefix("OVLFENCE#").map(str::to_owned))
        .collect();
    let mut out = Vec::new();
    for item in overlays {
        let o: OverlayRecord = item.json()?;
        if o.paused || fenced.contains(&o.id) {
            continue;
        }
        let Some(integration) = integrations.get(&o.integration_id).filter(|i| !i.paused) else {
            continue;
        };
        let interval_ms = i64::try_from(o.refresh_interval_secs)
            .unwrap_or(i64::MAX / 1000)
            .saturating_mul(1000);
        let due = match last.get(&o.id) {
            None => true,
            Some(st) => {
                let run = st.last_reconcile.as_ref();
                let seen = |field: &str| run.and_then(|r| r[field].as_u64());
                let changed = seen("observed_generation").is_some_and(|g| g != o.generation)
                    || seen("integration_generation").is_some_and(|g| g != integration.generation);
                changed
                    || st
                        .last_started_ms
                        .is_none_or(|ms| now_ms.saturating_sub(ms) >= interval_ms)
            }
        };
        if due {
            out.push(ReconcileMessage {
                account_id: account.to_owned(),
                overlay_id: o.id,
                observed_generation: o.generation,
            });
        }
    }
    Ok(out)
}
