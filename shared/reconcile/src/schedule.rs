//! Integration-owned scheduling (`docs/reconciliation.md`, "Scheduling").
//!
//! - The **tick** ([`tick`]) reads only the due part of the sharded due-time index: per
//!   shard, the entries whose due time is at most now, in due order, at most `max_due` per
//!   tick (it resumes after the last one it took on the next tick). Each due entry costs one
//!   strong point read of the integration's scheduler state; a tick writes nothing but stale
//!   or idle entries' removal and its resume cursor. It answers one [`PlanMessage`] per due
//!   integration.
//! - The **plan job** ([`handle_plan`]) leases the integration in its scheduler state (the
//!   due entry moves to the lease's expiry, so a crashed job is taken again), computes the
//!   effective plan from the demand (active overlays; none when the integration is paused),
//!   connects once, discovers the union of the active overlays' selections once, and has
//!   every overlay publish its own share under its own fence, recording its own status.
//!   Completion moves the due entry to completion + the shortest requested interval.
//! - A tick runs under the **tick lease** (`SYSTEM/TICKLEASE`, [`TICK_LEASE_MS`]): a
//!   conditional create taken at its start and deleted (with the cursor write) at its end.
//!   A tick that finds it held, and not expired on the injected clock, returns without work
//!   ([`TickReport::held_elsewhere`]): EventBridge may deliver a schedule twice and
//!   `flotilla serve`'s loop may overlap a slow tick, and neither may enqueue the same due
//!   work twice. A crashed tick's lease is taken over once it expires.
//! - The **backfill** ([`backfill`]) gives integrations that predate the index their
//!   scheduler state, a bounded number of accounts per tick, until it has visited them all.
//!
//! Fencing: a message carries the plan generation it was enqueued under; the job refuses a
//! message of an older generation, re-reads it before each overlay's publication, and every
//! publication transaction asserts the overlay's and the integration's item versions, which
//! move in the same transactions that bump the plan generation.

use std::collections::BTreeMap;

use flotilla_base::error::Result;
use flotilla_base::store::{MAX_ATTEMPTS, Versioned, backoff, read, to_body};
use flotilla_domain::keys;
use flotilla_domain::model::{IntegrationRecord, OverlayRecord, SchedulerState};
use flotilla_metastore::{
    Condition, Consistency, Metastore, MetastoreError, Op, PageToken, Query, Transaction, query_all,
};
use flotilla_services::service::schedule as sched;
use flotilla_services::state::AppState;
use serde::{Deserialize, Serialize};

use super::chain::{self, Located, Subject};
pub use super::message::{CheckpointRef, PlanMessage, WorkMessage};
use super::message::{MessageOutcome, ReconcileMessage};
use super::{Connector, ObservedRecords, ReconcileError, RunOptions, observe};

/// How long a plan job holds its integration before a tick may take it again.
pub const LEASE_MS: i64 = 15 * 60_000;
/// When a job that failed for a transient reason is due again (the queue usually redelivers
/// it before then).
pub const RETRY_MS: i64 = 5 * 60_000;
/// How long a tick holds the tick lease: longer than a tick may run (the scheduler
/// function's 60 s timeout), shorter than the schedule's period (5 minutes), so a crashed
/// tick delays at most the ticks inside the lease.
pub const TICK_LEASE_MS: i64 = 2 * 60_000;
/// Due integrations one tick takes at most; the rest wait for the next tick.
pub const MAX_DUE_PER_TICK: usize = 500;
/// Accounts the backfill visits per tick.
pub const BACKFILL_ACCOUNTS: usize = 16;
/// Due entries read per index query.
const INDEX_PAGE: usize = 100;

/// What one tick did.
#[derive(Debug, Default, Serialize)]
pub struct TickReport {
    /// One message per due integration.
    #[serde(skip)]
    pub messages: Vec<PlanMessage>,
    /// Entries whose scheduler state had moved on or was gone (removed).
    pub stale: usize,
    /// Entries of integrations with no demand left (removed).
    pub idle: usize,
    /// Whether the tick stopped at `max_due` with more due entries left.
    pub more: bool,
    /// Another tick holds the tick lease: this one did nothing.
    pub held_elsewhere: bool,
}

/// The tick lease's body.
#[derive(Debug, Serialize, Deserialize)]
struct TickLease {
    expires_ms: i64,
}

/// Takes the tick lease: answers the version it holds, or `None` when another tick holds
/// it. The usual case (the last tick released it) costs one conditional create and no read.
async fn take_tick_lease(store: &dyn Metastore, now_ms: i64) -> Result<Option<u64>> {
    let key = keys::tick_lease();
    let body = to_body(&TickLease {
        expires_ms: now_ms.saturating_add(TICK_LEASE_MS),
    })?;
    match store
        .transact(Transaction::new().with(Op::create(key.clone(), body.clone())))
        .await
    {
        Ok(()) => return Ok(Some(1)),
        Err(MetastoreError::ConditionFailed { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // Held, or left behind by a tick that crashed: taken over only once expired.
    let Some(held) = read::<TickLease>(store, key.clone(), Consistency::Strong).await? else {
        return Ok(None);
    };
    if held.value.expires_ms > now_ms {
        return Ok(None);
    }
    match store
        .transact(Transaction::new().with(Op::replace(key, held.version, body)))
        .await
    {
        Ok(()) => Ok(Some(held.version + 1)),
        Err(MetastoreError::ConditionFailed { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Where the next tick resumes: the shard it starts with and, per shard, the page token
/// after the last entry a tick took when it stopped at its bound.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TickCursor {
    next_shard: u32,
    #[serde(default)]
    after: BTreeMap<u32, String>,
}

/// One tick: the due integrations, at most `max_due` of them; nothing when another tick
/// holds the tick lease.
pub async fn tick(store: &dyn Metastore, now_ms: i64, max_due: usize) -> Result<TickReport> {
    let Some(version) = take_tick_lease(store, now_ms).await? else {
        return Ok(TickReport {
            held_elsewhere: true,
            ..TickReport::default()
        });
    };
    let release = Op::delete_at(keys::tick_lease(), version);
    match tick_leased(store, now_ms, max_due).await {
        Ok((report, cursor)) => {
            let mut tx = Transaction::new().with(release);
            if let Some(put) = cursor {
                tx.push(put);
            }
            match store.transact(tx).await {
                Ok(()) => {}
                // The lease expired and another tick took it: its cursor wins; the messages
                // found here are still due (a plan job's lease absorbs a duplicate).
                Err(MetastoreError::ConditionFailed { .. }) => {
                    tracing::warn!("the tick outlived its lease; its cursor is dropped");
                }
                Err(e) => return Err(e.into()),
            }
            Ok(report)
        }
        Err(e) => {
            // Released so the next tick need not wait for the expiry; if this fails too
            // the lease expires.
            let _ = store.transact(Transaction::new().with(release)).await;
            Err(e)
        }
    }
}

/// The tick's work under the lease: the report, and the cursor write if it moved.
async fn tick_leased(
    store: &dyn Metastore,
    now_ms: i64,
    max_due: usize,
) -> Result<(TickReport, Option<Op>)> {
    let cursor_key = keys::due_tick_cursor();
    let stored = read::<TickCursor>(store, cursor_key.clone(), Consistency::Eventual).await?;
    let before = stored.as_ref().map(|c| c.value.clone()).unwrap_or_default();
    let mut cursor = before.clone();
    let mut report = TickReport::default();
    let mut left = max_due;
    let first = cursor.next_shard % keys::DUE_SHARDS;
    for i in 0..keys::DUE_SHARDS {
        let shard = (first + i) % keys::DUE_SHARDS;
        if left == 0 {
            report.more = true;
            cursor.next_shard = shard;
            break;
        }
        let mut after = cursor.after.remove(&shard);
        // Pages start at one entry and double while every entry is due, so a shard with
        // nothing due costs one item, and one with `d` due entries at most about `2d`.
        let mut size = 1;
        loop {
            let q = Query::new(keys::due_pk(shard), "", Consistency::Eventual)
                .limit(size.min(left).max(1))
                .after(after.clone().map(PageToken));
            size = (size * 2).min(INDEX_PAGE);
            let page = store.query(&q).await?;
            let mut boundary = false;
            // A page never holds more entries than are left to take, so when the bound is
            // reached it is reached at the page's end and the page's token resumes after it.
            for item in &page.items {
                let Some((due, account, integration)) = keys::parse_due_sk(&item.key.sk) else {
                    continue;
                };
                if due > now_ms {
                    boundary = true;
                    break;
                }
                visit(store, &mut report, due, &account, &integration).await?;
                left = left.saturating_sub(1);
            }
            after = page.next.as_ref().map(|t| t.0.clone());
            if boundary || after.is_none() {
                after = None;
                break;
            }
            if left == 0 {
                report.more = true;
                break;
            }
        }
        if let Some(a) = after {
            cursor.after.insert(shard, a);
        }
        if i + 1 == keys::DUE_SHARDS {
            cursor.next_shard = (first + 1) % keys::DUE_SHARDS;
        }
    }
    let write = if cursor == before {
        None
    } else {
        Some(Op::put(cursor_key, to_body(&cursor)?))
    };
    Ok((report, write))
}

/// One due entry: a message, or the entry's removal when it is stale or idle.
async fn visit(
    store: &dyn Metastore,
    report: &mut TickReport,
    due: i64,
    account: &str,
    integration: &str,
) -> Result<()> {
    let entry = keys::due_entry(account, integration, due);
    let state = sched::load(store, account, integration).await?;
    let remove = |check: Option<Op>| {
        let mut tx = Transaction::new();
        if let Some(c) = check {
            tx.push(c);
        }
        tx.with(Op::delete(entry.clone()))
    };
    let state_key = keys::scheduler_state(account, integration);
    let outcome = match state {
        None => {
            report.stale += 1;
            store
                .transact(remove(Some(Op::check(state_key, Condition::Absent))))
                .await
        }
        Some(s) if s.value.due_ms != Some(due) => {
            report.stale += 1;
            store
                .transact(remove(Some(Op::check(
                    state_key,
                    Condition::Version(s.version),
                ))))
                .await
        }
        Some(s) if s.value.effective_interval_secs().is_none() => {
            report.idle += 1;
            let mut next = s.value.clone();
            next.due_ms = None;
            let tx = Transaction {
                ops: sched::write_ops(account, integration, Some(&s), &next)?,
            };
            store.transact(tx).await
        }
        Some(s) => {
            report.messages.push(PlanMessage {
                account_id: account.to_owned(),
                integration_id: integration.to_owned(),
                plan_generation: s.value.plan_generation,
            });
            Ok(())
        }
    };
    match outcome {
        // A mutation moved the state meanwhile: the next tick sees what it did.
        Err(MetastoreError::ConditionFailed { .. }) => Ok(()),
        other => other.map_err(Into::into),
    }
}

/// Where the backfill resumes.
#[derive(Debug, Default, Serialize, Deserialize)]
struct BackfillCursor {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    done: bool,
}

/// One bounded pass of the migration backfill: for up to `max_accounts` accounts (after the
/// last one the previous pass visited), every integration whose overlays have no scheduler
/// state, or whose state lacks some of its overlays' demand, gets it (due now when it had
/// none). Once it has gone through every account it records that it is done and costs one
/// point read per tick from then on. Answers the integrations it indexed.
pub async fn backfill(store: &dyn Metastore, now_ms: i64, max_accounts: usize) -> Result<usize> {
    let key = keys::due_backfill_cursor();
    let stored = read::<BackfillCursor>(store, key.clone(), Consistency::Eventual).await?;
    let cursor = stored.map(|c| c.value).unwrap_or_default();
    if cursor.done || max_accounts == 0 {
        return Ok(0);
    }
    let q = Query::new(
        keys::SYSTEM_PK,
        keys::ACCOUNT_LISTING_PREFIX,
        Consistency::Eventual,
    )
    .limit(max_accounts)
    .after(cursor.after.clone().map(PageToken));
    let page = store.query(&q).await?;
    let mut indexed = 0;
    let mut last = cursor.after.clone();
    for item in &page.items {
        last = Some(item.key.sk.clone());
        let Some(account) = item.key.sk.strip_prefix(keys::ACCOUNT_LISTING_PREFIX) else {
            continue;
        };
        indexed += backfill_account(store, account, now_ms).await?;
    }
    let next = BackfillCursor {
        done: page.next.is_none(),
        after: if page.next.is_none() { None } else { last },
    };
    store
        .transact(Transaction::new().with(Op::put(key, to_body(&next)?)))
        .await?;
    Ok(indexed)
}

async fn backfill_account(store: &dyn Metastore, account: &str, now_ms: i64) -> Result<usize> {
    let pk = keys::account_pk(account);
    let mut by_integration: BTreeMap<String, Vec<OverlayRecord>> = BTreeMap::new();
    for item in query_all(
        store,
        Query::new(pk.clone(), keys::OVERLAY_PREFIX, Consistency::Strong),
    )
    .await?
    {
        let o: OverlayRecord = item.json()?;
        by_integration
            .entry(o.integration_id.clone())
            .or_default()
            .push(o);
    }
    let mut indexed = 0;
    for (integration, overlays) in by_integration {
        let Some(int) = read::<IntegrationRecord>(
            store,
            keys::integration(account, &integration),
            Consistency::Strong,
        )
        .await?
        else {
            continue;
        };
        let current = sched::load(store, account, &integration).await?;
        let mut next = current
            .as_ref()
            .map(|c| c.value.clone())
            .unwrap_or_else(|| SchedulerState {
                integration_id: integration.clone(),
                plan_generation: 1,
                ..SchedulerState::default()
            });
        let mut added = false;
        for o in &overlays {
            if !next.demand.contains_key(&o.id) {
                next.demand.insert(
                    o.id.clone(),
                    sched::demand(o.refresh_interval_secs, o.paused),
                );
                added = true;
            }
        }
        if !added {
            continue;
        }
        next.integration_paused = int.value.paused;
        let previous = current.as_ref().and_then(|c| c.value.due_ms);
        next.due_ms = sched::next_due(&next, previous, true, now_ms);
        let mut tx = Transaction {
            ops: sched::write_ops(account, &integration, current.as_ref(), &next)?,
        };
        tx.push(Op::check(
            keys::integration(account, &integration),
            Condition::Version(int.version),
        ));
        match store.transact(tx).await {
            Ok(()) => indexed += 1,
            // A mutation wrote the state meanwhile; a later pass never needs to redo it,
            // since every mutation after the upgrade maintains the state itself. The
            // overlays it did not know about are added by the job that runs the plan.
            Err(MetastoreError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(indexed)
}

/// How a job leaves its integration's schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settle {
    /// Done (succeeded, or failed for a reason a retry does not fix): due again after the
    /// effective interval.
    Complete,
    /// Failed for a transient reason: due again after [`RETRY_MS`].
    Retry,
}

async fn settle(
    store: &dyn Metastore,
    m: &PlanMessage,
    now_ms: i64,
    how: Settle,
    gone: &[String],
) -> Result<()> {
    update_state(store, m, |cur| {
        let mut next = cur.clone();
        for g in gone {
            next.demand.remove(g);
        }
        next.lease_until_ms = None;
        let by = match how {
            Settle::Complete => {
                next.attempts = 0;
                next.last_completed_ms = Some(now_ms);
                next.effective_interval_secs().map(|i| {
                    now_ms.saturating_add(i64::try_from(i).unwrap_or(i64::MAX / 1000) * 1000)
                })
            }
            Settle::Retry => next
                .effective_interval_secs()
                .map(|_| now_ms.saturating_add(RETRY_MS)),
        };
        next.due_ms = match (by, cur.due_ms) {
            (None, _) => None,
            // A change since the job started set its own due time (often now): keep the
            // earlier one.
            (Some(b), Some(d)) if cur.plan_generation != m.plan_generation => Some(b.min(d)),
            (Some(b), _) => Some(b),
        };
        Some(next)
    })
    .await
}

/// Clears the lease a stopped chain of `m`'s (older) plan generation held.
async fn release(store: &dyn Metastore, m: &PlanMessage) -> Result<()> {
    update_state(store, m, |cur| {
        cur.lease_until_ms.is_some().then(|| SchedulerState {
            lease_until_ms: None,
            ..cur.clone()
        })
    })
    .await
}

/// Rewrites the integration's scheduler state (and its due entry) from its current value,
/// retrying lost races: `change` answers the new state, or `None` when nothing is to change.
/// Absent state (the integration is gone) changes nothing.
async fn update_state(
    store: &dyn Metastore,
    m: &PlanMessage,
    change: impl Fn(&SchedulerState) -> Option<SchedulerState>,
) -> Result<()> {
    for attempt in 0..MAX_ATTEMPTS {
        let Some(cur) = sched::load(store, &m.account_id, &m.integration_id).await? else {
            return Ok(());
        };
        let Some(next) = change(&cur.value) else {
            return Ok(());
        };
        let tx = Transaction {
            ops: sched::write_ops(&m.account_id, &m.integration_id, Some(&cur), &next)?,
        };
        match store.transact(tx).await {
            Ok(()) => return Ok(()),
            Err(MetastoreError::ConditionFailed { .. }) => backoff(attempt).await,
            Err(e) if e.is_retryable() || e.is_outcome_unknown() => backoff(attempt).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(flotilla_base::error::Error::unavailable(
        "scheduler state update did not converge",
    ))
}

/// Takes the lease for `m`'s job: answers the leased state, or why the message is not run.
pub async fn lease(
    store: &dyn Metastore,
    m: &PlanMessage,
    now_ms: i64,
) -> Result<Versioned<SchedulerState>, MessageOutcome> {
    lease_with(store, m, now_ms, false).await
}

/// [`lease`]; a leg of a checkpointed run (`continuing`) renews the lease its chain holds.
async fn lease_with(
    store: &dyn Metastore,
    m: &PlanMessage,
    now_ms: i64,
    continuing: bool,
) -> Result<Versioned<SchedulerState>, MessageOutcome> {
    let failed = |e: flotilla_base::error::Error| MessageOutcome::Failed {
        retryable: true,
        code: e.kind.as_str(),
        reason: e.to_string(),
        kind: "metastore",
    };
    for attempt in 0..MAX_ATTEMPTS {
        let cur = match sched::load(store, &m.account_id, &m.integration_id).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(MessageOutcome::Gone),
            Err(e) => return Err(failed(e)),
        };
        if cur.value.plan_generation != m.plan_generation {
            return Err(MessageOutcome::Superseded {
                current: cur.value.plan_generation,
            });
        }
        if !continuing && cur.value.lease_until_ms.is_some_and(|l| l > now_ms) {
            return Err(MessageOutcome::Duplicate);
        }
        let mut next = cur.value.clone();
        next.lease_until_ms = Some(now_ms.saturating_add(LEASE_MS));
        next.attempts = next.attempts.saturating_add(1);
        next.last_enqueued_ms = Some(now_ms);
        if next.due_ms.is_some() || next.effective_interval_secs().is_some() {
            next.due_ms = next.lease_until_ms;
        }
        let ops = match sched::write_ops(&m.account_id, &m.integration_id, Some(&cur), &next) {
            Ok(o) => o,
            Err(e) => return Err(failed(e)),
        };
        match store.transact(Transaction { ops }).await {
            Ok(()) => {
                return Ok(Versioned {
                    value: next,
                    version: cur.version + 1,
                });
            }
            Err(MetastoreError::ConditionFailed { .. }) => backoff(attempt).await,
            Err(e) if e.is_retryable() || e.is_outcome_unknown() => backoff(attempt).await,
            Err(e) => return Err(failed(e.into())),
        }
    }
    Err(failed(flotilla_base::error::Error::unavailable(
        "the scheduler lease did not converge",
    )))
}

/// What a plan job did, overlay by overlay.
#[derive(Debug, Default)]
pub struct PlanReport {
    /// Overlays that published their share (successful runs).
    pub reconciled: usize,
    /// Runs that failed, with whether a retry may succeed.
    pub failures: Vec<(String, ReconcileError)>,
    /// Discovery passes (0 or 1: one per job, however many overlays share it).
    pub discoveries: usize,
    /// The run continues in this leg of a checkpointed chain (the overlays that finished
    /// early are in `reconciled` and `failures`).
    pub next: Option<CheckpointRef>,
}

/// Runs one scheduled plan job (see the module documentation).
pub async fn handle_plan(
    state: &AppState,
    connector: &dyn Connector,
    m: &PlanMessage,
) -> MessageOutcome {
    let span =
        tracing::info_span!("plan", account_id = %m.account_id, integration_id = %m.integration_id);
    let _enter = span.enter();
    plan_outcome(
        m,
        run_plan(state, connector, m, &RunOptions::default()).await,
    )
}

fn handle_plan_with<'a>(
    state: &'a AppState,
    connector: &'a dyn Connector,
    m: &'a PlanMessage,
    ck: Option<&'a CheckpointRef>,
    opts: &'a RunOptions,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = MessageOutcome> + Send + 'a>> {
    Box::pin(async move {
        let span = tracing::info_span!("plan", account_id = %m.account_id,
            integration_id = %m.integration_id, leg = ck.map_or(1, |c| c.leg));
        let _enter = span.enter();
        plan_outcome(m, run_plan_leg(state, connector, m, ck, opts).await)
    })
}

fn plan_outcome(m: &PlanMessage, r: Result<PlanReport, MessageOutcome>) -> MessageOutcome {
    match r {
        Ok(PlanReport { next: Some(ck), .. }) => MessageOutcome::Continued {
            next: Box::new(WorkMessage::Plan(m.clone()).leg(ck)),
        },
        Ok(report) => report_outcome(report),
        Err(outcome) => outcome,
    }
}

fn report_outcome(report: PlanReport) -> MessageOutcome {
    let retry = report.failures.iter().find(|(_, e)| e.is_retryable());
    let any = retry.or(report.failures.first());
    match any {
        None => MessageOutcome::Planned {
            reconciled: report.reconciled,
        },
        Some((overlay, e)) => MessageOutcome::Failed {
            retryable: retry.is_some(),
            code: e.code(),
            reason: format!("overlay {overlay}: {}", e.cause()),
            kind: super::message::failure_kind(e),
        },
    }
}

/// The plan job, answering what each overlay did; a message that is not run answers its
/// outcome as the error.
pub async fn run_plan(
    state: &AppState,
    connector: &dyn Connector,
    m: &PlanMessage,
    opts: &RunOptions,
) -> Result<PlanReport, MessageOutcome> {
    run_plan_leg(state, connector, m, None, opts).await
}

/// [`run_plan`] for the message that starts a run (`ck` is `None`) or a follow-up leg.
pub async fn run_plan_leg(
    state: &AppState,
    connector: &dyn Connector,
    m: &PlanMessage,
    ck: Option<&CheckpointRef>,
    opts: &RunOptions,
) -> Result<PlanReport, MessageOutcome> {
    let store = state.store.as_ref();
    let now = state.clock.now_ms();
    let metastore = |e: flotilla_base::error::Error| MessageOutcome::Failed {
        retryable: true,
        code: e.kind.as_str(),
        reason: e.to_string(),
        kind: "metastore",
    };
    // A paused or missing integration starts no upstream work.
    let integration = read::<IntegrationRecord>(
        store,
        keys::integration(&m.account_id, &m.integration_id),
        Consistency::Strong,
    )
    .await
    .map_err(metastore)?;
    let subj = Subject {
        account: &m.account_id,
        key: format!("INT#{}", m.integration_id),
        generation: m.plan_generation,
        plan: Some(&m.integration_id),
    };
    let located = chain::locate(state, &subj, ck).await.map_err(metastore)?;
    let resend = |r: CheckpointRef| PlanReport {
        next: Some(r),
        ..PlanReport::default()
    };
    let chain = match located {
        Located::Stale => return Err(MessageOutcome::Duplicate),
        Located::Resend(r) => return Ok(resend(r)),
        Located::Fresh => None,
        Located::Run(c) => Some(c),
    };
    let leased = match lease_with(store, m, now, chain.is_some()).await {
        Ok(l) => l,
        Err(MessageOutcome::Superseded { current }) if chain.is_some() => {
            // The plan changed between two legs: the chain stops and gives its lease back,
            // so the new plan's message starts afresh without waiting for the lease.
            if let Some(c) = &chain {
                chain::delete_chain(state, &subj, c.run())
                    .await
                    .map_err(metastore)?;
            }
            release(store, m).await.map_err(metastore)?;
            return Err(MessageOutcome::Superseded { current });
        }
        Err(e) => return Err(e),
    };
    if integration.is_none_or(|i| i.value.paused) {
        settle(store, m, now, Settle::Complete, &[])
            .await
            .map_err(metastore)?;
        return Err(MessageOutcome::Paused);
    }
    let mut report = PlanReport::default();
    let mut gone = Vec::new();
    let mut observed: Vec<ObservedRecords> = Vec::new();
    if chain.is_none() {
        let ids: Vec<String> = leased
            .value
            .active_overlays()
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            match observe(state, &m.account_id, &id).await {
                Ok(o) if o.overlay.integration_id == m.integration_id => observed.push(o),
                Ok(_) | Err(ReconcileError::NotFound) => gone.push(id),
                // Paused or being deleted since the state was read: no demand.
                Err(ReconcileError::Paused(_) | ReconcileError::Deleting(_)) => {}
                Err(e) => report.failures.push((id, e)),
            }
        }
        if observed.is_empty() {
            let how = if report.failures.iter().any(|(_, e)| e.is_retryable()) {
                Settle::Retry
            } else {
                Settle::Complete
            };
            settle(store, m, state.clock.now_ms(), how, &gone)
                .await
                .map_err(metastore)?;
            return Ok(report);
        }
    }
    let leg: std::pin::Pin<Box<dyn std::future::Future<Output = chain::LegOutcome> + Send + '_>> =
        Box::pin(chain::run_leg(
            state, connector, &subj, observed, chain, opts,
        ));
    let out = leg.await;
    report.discoveries += out.discoveries;
    let mut reconciled = Vec::new();
    for (id, r) in out.results {
        match r {
            Ok(summary) => {
                report.reconciled += 1;
                reconciled.push(ReconcileMessage {
                    account_id: m.account_id.clone(),
                    overlay_id: id,
                    observed_generation: summary.observed_generation,
                });
            }
            Err(e) => report.failures.push((id, e)),
        }
    }
    if out.lost {
        return Err(MessageOutcome::Duplicate);
    }
    // Each reconciled overlay's capture job goes to the capture workers: a plan covers many
    // overlays, so their captures run as jobs of their own rather than in this leg. A job
    // that cannot be queued makes the plan retry (its redelivery is a no-op reconciliation
    // that queues again). A host without a queue (tests of the plan alone) queues none.
    if let Some(work) = state.work.as_deref() {
        for rm in &reconciled {
            if let Err(e) = super::work::queue_capture_job(state, work, rm).await
                && e.is_retryable()
            {
                report.failures.push((rm.overlay_id.clone(), e));
            }
        }
    }
    if out.next.is_some() {
        // The chain continues: the lease stays (each leg renews it).
        report.next = out.next;
        return Ok(report);
    }
    let how = if report.failures.iter().any(|(_, e)| e.is_retryable()) {
        Settle::Retry
    } else {
        Settle::Complete
    };
    settle(store, m, state.clock.now_ms(), how, &gone)
        .await
        .map_err(metastore)?;
    Ok(report)
}

/// Handles any queue message (a plan, one overlay, a capture job or a follow-up leg),
/// counting the outcome.
pub async fn handle_work(
    state: &AppState,
    connector: &dyn Connector,
    m: &WorkMessage,
) -> MessageOutcome {
    handle_work_with(state, connector, m, &RunOptions::default()).await
}

/// [`handle_work`] with the run's tunables (tests and benchmarks choose the batch size).
pub async fn handle_work_with(
    state: &AppState,
    connector: &dyn Connector,
    m: &WorkMessage,
    opts: &RunOptions,
) -> MessageOutcome {
    let (base, ck) = match m {
        WorkMessage::Leg(base, ck) => (base.as_ref(), Some(ck)),
        other => (other, None),
    };
    match base {
        WorkMessage::Overlay(m) => {
            super::work::handle_message_leg(state, connector, m, ck, opts).await
        }
        WorkMessage::Capture(m) => {
            super::work::handle_capture_by(state, connector, m, opts.deadline_ms).await
        }
        // Boxed and erased: the job's future is deep, and hosts nest it in their own.
        WorkMessage::Plan(m) => count_plan(handle_plan_with(state, connector, m, ck, opts).await),
        WorkMessage::Leg(..) => MessageOutcome::Failed {
            retryable: false,
            code: "INVALID_ARGUMENT",
            reason: "a follow-up message names another follow-up".into(),
            kind: "internal",
        },
    }
}

fn count_plan(outcome: MessageOutcome) -> MessageOutcome {
    use flotilla_telemetry::catalog::{RECONCILE_FAILURES, RECONCILE_RUNS};
    RECONCILE_RUNS.inc(&[outcome.label()]);
    if let MessageOutcome::Failed { kind, .. } = &outcome {
        RECONCILE_FAILURES.inc(&[kind]);
    }
    outcome
}
