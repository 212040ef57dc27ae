//! The outcome of every run, kept in the overlay's status item (`OVLSTATUS#{id}`) and shown
//! as the overlay's `last_reconcile`: whether it succeeded, why it failed (a code, a
//! bounded secret-free cause, the stage and the upstream object), the conflicts, how many
//! runs failed in a row and when the last one succeeded.

use flotilla_domain::keys;
use flotilla_domain::model::OverlayStatus;
use flotilla_metastore::{Condition, Consistency, MetastoreError, Op, OpOutcome, Transaction};
use serde::Serialize;

use super::{ReconcileError, ReconcileSummary};
use flotilla_base::error::Error;
use flotilla_base::store::{MAX_ATTEMPTS, backoff, to_body};
use flotilla_services::state::AppState;

/// Conflicts kept in the stored record (the RPC's `409` lists them all).
pub const MAX_STATUS_CONFLICTS: usize = 100;
/// Longest cause kept or answered, in characters.
pub const MAX_CAUSE_CHARS: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// Where in the publication order a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Stage {
    /// Establishing the fence and connecting to the upstream: nothing published.
    Connect,
    /// Reading the target catalog and walking the upstream: nothing published.
    Discovery,
    /// Conflict, size and budget checks over the complete inventory: nothing published.
    Preflight,
    /// Publishing desired resources: some may be visible, nothing retired.
    Publication,
    /// Retiring stale resources: everything desired was published.
    Retirement,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Connect => "CONNECT",
            Stage::Discovery => "DISCOVERY",
            Stage::Preflight => "PREFLIGHT",
            Stage::Publication => "PUBLICATION",
            Stage::Retirement => "RETIREMENT",
        }
    }

    /// Whether a failure in this stage leaves the catalog exactly as it was.
    pub fn publishes_nothing(self) -> bool {
        matches!(self, Stage::Connect | Stage::Discovery | Stage::Preflight)
    }
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunError {
    pub code: &'static str,
    /// Bounded and secret-free.
    pub message: String,
    /// Whether the queue redelivers the run (otherwise the next schedule or a change of the
    /// overlay or its integration runs it again).
    pub retryable: bool,
    pub stage: Stage,
    /// The upstream namespace or relation the failure is about.
    pub object: Option<Vec<String>>,
}

impl RunError {
    pub fn new(e: &ReconcileError, stage: Stage) -> Self {
        Self {
            code: e.code(),
            message: e.cause(),
            retryable: e.is_retryable(),
            stage,
            object: e.object().map(<[String]>::to_vec),
        }
    }
}

/// `text` cut to [`MAX_CAUSE_CHARS`] characters, control characters replaced.
pub fn bound_text(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_CAUSE_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > MAX_CAUSE_CHARS {
        out.push('…');
    }
    out
}

/// Records `summary` (completing its failure count and last success time from the stored
/// status) unless a run that started later already recorded its outcome. The write asserts
/// that the overlay exists and is not being deleted, so a run finishing after an overlay
/// delete leaves no orphan status item ([`ReconcileError::FenceLost`] then).
pub async fn record(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    summary: &mut ReconcileSummary,
    started_ms: i64,
) -> Result<(), ReconcileError> {
    let store = state.store.as_ref();
    let status_key = keys::overlay_status(account, overlay_id);
    let mut written: Option<Vec<u8>> = None;
    for attempt in 0..MAX_ATTEMPTS {
        let current = match store.get(&status_key, Consistency::Strong).await {
            Ok(c) => c,
            Err(e) if e.is_retryable() => {
                backoff(attempt).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if let (Some(item), Some(mine)) = (&current, &written)
            && item.body == *mine
        {
            // An earlier attempt with an unknown outcome did apply.
            return Ok(());
        }
        let (prev, version) = match &current {
            Some(item) => (item.json::<OverlayStatus>()?, Some(item.version)),
            None => (OverlayStatus::default(), None),
        };
        if prev.last_started_ms.is_some_and(|p| p > started_ms) {
            return Ok(());
        }
        match summary.outcome {
            Outcome::Succeeded => {
                summary.consecutive_failures = 0;
                summary.last_success_time = Some(summary.finished_at.clone());
            }
            Outcome::Failed => {
                summary.consecutive_failures = prev.consecutive_failures.saturating_add(1);
                summary.last_success_time = prev.last_success_time.clone();
            }
        }
        let status = OverlayStatus {
            last_reconcile: Some(summary.to_json()),
            last_started_ms: Some(started_ms),
            consecutive_failures: summary.consecutive_failures,
            last_success_time: summary.last_success_time.clone(),
            last_success_started_ms: match summary.outcome {
                Outcome::Succeeded => Some(started_ms),
                Outcome::Failed => prev.last_success_started_ms,
            },
            failing_since: match summary.outcome {
                Outcome::Succeeded => None,
                Outcome::Failed => prev
                    .failing_since
                    .clone()
                    .filter(|_| prev.consecutive_failures > 0)
                    .or_else(|| Some(summary.started_at.clone())),
            },
            confirmed: match summary.outcome {
                // The run confirmed every table it kept, after it started.
                Outcome::Succeeded => prev
                    .confirmed
                    .into_iter()
                    .filter(|(_, at)| *at > started_ms)
                    .collect(),
                Outcome::Failed => prev.confirmed,
            },
        };
        let body = to_body(&status)?;
        written = Some(body.clone());
        // Not applied: another run recorded meanwhile; read it and decide again.
        if write(state, account, overlay_id, version, body, attempt).await? {
            return Ok(());
        }
    }
    Err(Error::unavailable("status write did not converge").into())
}

/// Writes the overlay's status item `body` at `version` (`None`: creates it), asserting that
/// the overlay exists and is not being deleted (no orphan status item). `Ok(false)` when it
/// was not applied and the caller reads again and retries (the item moved, or a transient
/// failure, after a backoff); [`ReconcileError::FenceLost`] when the overlay is gone or
/// being deleted.
async fn write(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    version: Option<u64>,
    body: Vec<u8>,
    attempt: usize,
) -> Result<bool, ReconcileError> {
    let status_key = keys::overlay_status(account, overlay_id);
    let put = match version {
        Some(v) => Op::replace(status_key, v, body),
        None => Op::create(status_key, body),
    };
    let tx = Transaction::new()
        .with(put)
        .with(Op::check(
            keys::overlay(account, overlay_id),
            Condition::Exists,
        ))
        .with(Op::check(
            keys::overlay_fence(account, overlay_id),
            Condition::Absent,
        ));
    match state.store.transact(tx).await {
        Ok(()) => Ok(true),
        Err(MetastoreError::ConditionFailed { reasons }) => {
            if reasons.iter().skip(1).any(|r| !matches!(r, OpOutcome::Ok)) {
                return Err(ReconcileError::FenceLost);
            }
            Ok(false)
        }
        Err(e) if e.is_retryable() || e.is_outcome_unknown() => {
            backoff(attempt).await;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Targeted confirmations an overlay's status keeps, at most (the oldest are dropped: their
/// tables fall back to the last successful run's start, an earlier `checked_at`).
pub const MAX_CONFIRMATIONS: usize = 1000;

/// Records that a targeted refresh confirmed the upstream state of `relation_ids` at `at_ms`
/// (their `upstream.checked_at`), in the overlay's status item: one write per refresh,
/// asserting, like [`record`], that the overlay exists and is not being deleted.
pub async fn confirm(
    state: &AppState,
    account: &str,
    overlay_id: &str,
    relation_ids: &[String],
    at_ms: i64,
) -> Result<(), ReconcileError> {
    if relation_ids.is_empty() {
        return Ok(());
    }
    let store = state.store.as_ref();
    let status_key = keys::overlay_status(account, overlay_id);
    for attempt in 0..MAX_ATTEMPTS {
        let current = store.get(&status_key, Consistency::Strong).await?;
        let (mut status, version) = match &current {
            Some(item) => (item.json::<OverlayStatus>()?, Some(item.version)),
            None => (OverlayStatus::default(), None),
        };
        let floor = status.last_success_started_ms.unwrap_or(i64::MIN);
        for id in relation_ids {
            status.confirmed.insert(id.clone(), at_ms);
        }
        status.confirmed.retain(|_, at| *at > floor);
        while status.confirmed.len() > MAX_CONFIRMATIONS {
            let Some(oldest) = status
                .confirmed
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            status.confirmed.remove(&oldest);
        }
        let body = to_body(&status)?;
        if write(state, account, overlay_id, version, body, attempt).await? {
            return Ok(());
        }
    }
    Err(Error::unavailable("status write did not converge").into())
}
