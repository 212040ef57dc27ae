//! Scheduler state and the due-time index (`docs/reconciliation.md`, "Scheduling").
//!
//! Each integration with overlays has one scheduler state item (`SCHED#{integration}`): the
//! demand of its overlays (refresh interval, pause), the plan generation, and the due time of
//! the one index entry (`DUE#{shard}` / `{due_ms}#{account}#{integration}`) that makes it
//! visible to the scheduler's tick. Every mutation that changes demand or invalidates
//! scheduled work (overlay create, patch, pause, resume, replace and delete; integration URI,
//! properties, credentials and pause) carries [`update_ops`] in its own transaction, so the
//! state, the index and the resource never disagree: the state is replaced at the version the
//! mutation read (a concurrent mutation makes the transaction fail and the caller retry), the
//! old entry is deleted and the new one put.

use flotilla_domain::keys;
use flotilla_domain::model::{OverlayDemand, SchedulerState};
use flotilla_metastore::{Consistency, Metastore, Op};

use super::{Versioned, read, to_body};
use crate::error::Result;

/// What a mutation does to its integration's schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// Bump the plan generation: scheduled work of the older plan is stale.
    pub bump: bool,
    /// The change needs a run as soon as possible (new or changed demand, new connection).
    pub run_now: bool,
}

/// Reads an integration's scheduler state (strongly: the mutation asserts its version).
pub async fn load(
    store: &dyn Metastore,
    account: &str,
    integration_id: &str,
) -> Result<Option<Versioned<SchedulerState>>> {
    read::<SchedulerState>(
        store,
        keys::scheduler_state(account, integration_id),
        Consistency::Strong,
    )
    .await
}

/// The due time `state` should be indexed at after a change, given the due time it had.
pub fn next_due(
    state: &SchedulerState,
    previous: Option<i64>,
    run_now: bool,
    now_ms: i64,
) -> Option<i64> {
    let interval_ms = i64::try_from(state.effective_interval_secs()?)
        .unwrap_or(i64::MAX / 1000)
        .saturating_mul(1000);
    let by_interval = state
        .last_completed_ms
        .map_or(now_ms, |c| c.saturating_add(interval_ms));
    Some(match (run_now, previous) {
        (true, Some(p)) => p.min(now_ms),
        (true, None) => now_ms,
        (false, Some(p)) => p.min(by_interval),
        (false, None) => by_interval,
    })
}

/// The ops that move an integration's due entry from `from` to `to`.
pub fn move_entry_ops(
    account: &str,
    integration_id: &str,
    from: Option<i64>,
    to: Option<i64>,
) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    if from == to {
        return Ok(ops);
    }
    if let Some(f) = from {
        ops.push(Op::delete(keys::due_entry(account, integration_id, f)));
    }
    if let Some(t) = to {
        ops.push(Op::put(
            keys::due_entry(account, integration_id, t),
            to_body(&serde_json::json!({}))?,
        ));
    }
    Ok(ops)
}

/// The ops that write `next` over `current` (created when absent) and move the due entry.
pub fn write_ops(
    account: &str,
    integration_id: &str,
    current: Option<&Versioned<SchedulerState>>,
    next: &SchedulerState,
) -> Result<Vec<Op>> {
    let key = keys::scheduler_state(account, integration_id);
    let body = to_body(next)?;
    let mut ops = vec![match current {
        Some(c) => Op::replace(key, c.version, body),
        None => Op::create(key, body),
    }];
    let from = current.and_then(|c| c.value.due_ms);
    ops.extend(move_entry_ops(account, integration_id, from, next.due_ms)?);
    Ok(ops)
}

/// Reads the integration's scheduler state, applies `edit` (which answers the change's
/// [`Effect`]) and answers the ops to add to the mutation's transaction.
pub async fn update_ops(
    store: &dyn Metastore,
    account: &str,
    integration_id: &str,
    now_ms: i64,
    edit: impl FnOnce(&mut SchedulerState) -> Effect,
) -> Result<Vec<Op>> {
    let current = load(store, account, integration_id).await?;
    let mut next = current
        .as_ref()
        .map(|c| c.value.clone())
        .unwrap_or_else(|| SchedulerState {
            integration_id: integration_id.to_owned(),
            ..SchedulerState::default()
        });
    let effect = edit(&mut next);
    if current.is_none() && next.demand.is_empty() {
        // Nothing demanded and nothing stored: no state to keep.
        return Ok(Vec::new());
    }
    if effect.bump {
        next.plan_generation += 1;
    }
    let previous = current.as_ref().and_then(|c| c.value.due_ms);
    next.due_ms = next_due(&next, previous, effect.run_now, now_ms);
    if current.as_ref().is_some_and(|c| c.value == next) {
        return Ok(Vec::new());
    }
    write_ops(account, integration_id, current.as_ref(), &next)
}

/// The demand entry of an overlay.
pub fn demand(interval_secs: u64, paused: bool) -> OverlayDemand {
    OverlayDemand {
        interval_secs,
        paused,
    }
}
