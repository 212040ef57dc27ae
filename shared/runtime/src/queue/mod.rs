//! The reconcile queue: the seam between the scheduler (which decides which overlays are
//! due) and the reconciler workers (which run them).
//!
//! On AWS it is SQS (`SqsQueue`, feature `sqs`): the scheduler Lambda sends one message per due overlay,
//! the reconciler Lambda consumes batches and reports partial batch failures, and the queue's
//! redrive policy moves a message that keeps failing to the dead-letter queue. Under
//! `flotilla serve` it is an in-process channel ([`ChannelQueue`]) with the same contract: a
//! failed message is redelivered (after a delay) until a receive limit, then dropped with an
//! error log line standing in for the dead-letter queue.
//!
//! Trace context: `SqsQueue` sends the current trace header
//! ([`flotilla_telemetry::trace::current_header`]) as each message's `AWSTraceHeader` system
//! attribute, and the reconciler continues that trace for the record.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flotilla_reconcile::schedule::{WorkMessage, handle_work};
use flotilla_reconcile::work::MessageOutcome;
use flotilla_reconcile::{Connector, DynConnector};
use flotilla_services::AppState;
use tokio::sync::mpsc;

#[cfg(feature = "sqs")]
mod sqs;
#[cfg(feature = "sqs")]
pub use sqs::{SqsQueue, sqs_client};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue refused some messages (the scheduler's next tick sends them again).
    #[error("{failed} of {total} messages were not accepted by the queue")]
    Partial { failed: usize, total: usize },
    #[error("queue unavailable: {0}")]
    Unavailable(String),
}

/// Where reconcile messages go.
#[async_trait]
pub trait ReconcileQueue: Send + Sync {
    async fn send(&self, msgs: &[WorkMessage]) -> Result<(), QueueError>;
}

/// Parses bodies handed to a [`WorkSender`] (the API's side of the queue): a body that is no
/// work message is refused before anything is sent.
fn parse_bodies(bodies: &[String]) -> flotilla_base::error::Result<Vec<WorkMessage>> {
    bodies
        .iter()
        .map(|b| {
            WorkMessage::parse(b).map_err(|e| {
                flotilla_base::error::Error::internal(format!("refusing to enqueue: {e}"))
            })
        })
        .collect()
}

/// Sends work the API enqueues (`flotilla_services::state::WorkSender`) through a reconcile
/// queue: the in-process queue under `flotilla serve`, SQS for the api function.
pub(crate) async fn send_bodies(
    queue: &dyn ReconcileQueue,
    bodies: &[String],
) -> flotilla_base::error::Result<()> {
    let msgs = parse_bodies(bodies)?;
    queue
        .send(&msgs)
        .await
        .map_err(|e| flotilla_base::error::Error::unavailable(e.to_string()))
}

#[async_trait]
impl flotilla_services::state::WorkSender for ChannelQueue {
    async fn send_bodies(&self, bodies: &[String]) -> flotilla_base::error::Result<()> {
        send_bodies(self, bodies).await
    }
}

/// One in-process delivery: the message and how often it was received.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub message: WorkMessage,
    pub receives: u32,
}

/// The in-process queue of `flotilla serve`. Messages already queued (same overlay and
/// generation) are not queued twice, so a scheduler tick that comes round while a long run
/// is still waiting does not pile up duplicates.
#[derive(Clone)]
pub struct ChannelQueue {
    tx: mpsc::UnboundedSender<Delivery>,
    queued: Arc<Mutex<HashSet<(String, String, u64)>>>,
}

fn ident(m: &WorkMessage) -> (String, String, u64) {
    m.ident()
}

impl ChannelQueue {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Delivery>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                queued: Arc::new(Mutex::new(HashSet::new())),
            },
            rx,
        )
    }

    fn queued(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String, u64)>> {
        self.queued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn redeliver(&self, d: Delivery) -> Result<(), QueueError> {
        self.tx
            .send(d)
            .map_err(|_| QueueError::Unavailable("the local worker stopped".into()))
    }
}

#[async_trait]
impl ReconcileQueue for ChannelQueue {
    async fn send(&self, msgs: &[WorkMessage]) -> Result<(), QueueError> {
        for m in msgs {
            if !self.queued().insert(ident(m)) {
                continue;
            }
            self.redeliver(Delivery {
                message: m.clone(),
                receives: 0,
            })?;
        }
        Ok(())
    }
}

/// Settings of the in-process worker.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Receives before a failing message is given up (SQS `maxReceiveCount`).
    pub max_receives: u32,
    /// Delay before a failed message is delivered again (SQS visibility timeout).
    pub retry_delay: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            max_receives: 5,
            retry_delay: Duration::from_secs(30),
        }
    }
}

/// What the in-process worker did with one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryResult {
    /// Handled (reconciled, or acknowledged as superseded, gone or paused).
    Done,
    /// Failed; delivered again after the retry delay.
    Redelivering,
    /// Failed on its last allowed receive; dropped (the local dead-letter queue is the log).
    DeadLettered,
}

/// Handles one delivery of the in-process queue with the SQS contract: a reported failure is
/// delivered again after `retry_delay` until `max_receives`, then dead-lettered.
pub async fn handle_delivery(
    state: &AppState,
    connector: &dyn Connector,
    queue: &ChannelQueue,
    d: Delivery,
    opts: &WorkerOptions,
) -> DeliveryResult {
    handle_delivery_outcome(state, connector, queue, d, opts)
        .await
        .0
}

/// [`handle_delivery`], also answering what handling the message came to (tests that drain
/// the queue assert it).
pub async fn handle_delivery_outcome(
    state: &AppState,
    connector: &dyn Connector,
    queue: &ChannelQueue,
    mut d: Delivery,
    opts: &WorkerOptions,
) -> (DeliveryResult, MessageOutcome) {
    d.receives += 1;
    let outcome = handle_work(state, connector, &d.message).await;
    if outcome.redeliver() && d.receives < opts.max_receives {
        let q = queue.clone();
        let delay = opts.retry_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = q.redeliver(d);
        });
        return (DeliveryResult::Redelivering, outcome);
    }
    queue.queued().remove(&ident(&d.message));
    if let flotilla_reconcile::work::MessageOutcome::Continued { next } = &outcome
        && let Err(e) = queue.send(std::slice::from_ref(next.as_ref())).await
    {
        // The checkpoint stays: the next schedule's message resumes the chain.
        tracing::error!(error = %e, "the follow-up leg of a checkpointed run was not queued");
    }
    if outcome.redeliver() {
        let (account_id, subject, _) = d.message.ident();
        tracing::error!(
            account_id = %account_id,
            subject = %subject,
            receives = d.receives,
            "reconcile message dead-lettered after repeated failures"
        );
        return (DeliveryResult::DeadLettered, outcome);
    }
    (DeliveryResult::Done, outcome)
}

/// Consumes the in-process queue until every sender is gone.
pub async fn run_channel_worker(
    state: AppState,
    connector: DynConnector,
    queue: ChannelQueue,
    mut rx: mpsc::UnboundedReceiver<Delivery>,
    opts: WorkerOptions,
) {
    while let Some(d) = rx.recv().await {
        handle_delivery(&state, connector.as_ref(), &queue, d, &opts).await;
    }
}

/// One scheduler pass: a bounded step of the due-index backfill (integrations that predate
/// the index), then one tick of the due-time index (`flotilla_reconcile::schedule::tick`):
/// every due integration becomes one plan message. Answers how many were sent.
pub async fn schedule_once(
    state: &AppState,
    queue: &dyn ReconcileQueue,
) -> Result<usize, QueueError> {
    use flotilla_reconcile::schedule::{BACKFILL_ACCOUNTS, MAX_DUE_PER_TICK, backfill, tick};
    let store = state.store.as_ref();
    let now = state.clock.now_ms();
    if let Err(e) = backfill(store, now, BACKFILL_ACCOUNTS).await {
        tracing::warn!(error = %e, "due-index backfill pass failed");
    }
    let report = tick(store, now, MAX_DUE_PER_TICK)
        .await
        .map_err(|e| QueueError::Unavailable(e.to_string()))?;
    if report.held_elsewhere {
        tracing::info!("another scheduler tick holds the tick lease; this one enqueued nothing");
    }
    if report.more {
        tracing::info!("more integrations are due than one tick takes; the next tick continues");
    }
    let due: Vec<WorkMessage> = report.messages.into_iter().map(WorkMessage::from).collect();
    queue.send(&due).await?;
    flotilla_telemetry::catalog::RECONCILE_ENQUEUED.add(&[], due.len() as u64);
    Ok(due.len())
}

/// One bounded credential-sweep pass (the scheduler runs it after every scheduling pass);
/// answers its report, or `None` after logging a failure.
pub async fn sweep_once(
    state: &AppState,
) -> Option<flotilla_services::service::integrations::ScheduledSweep> {
    use flotilla_services::service::integrations::{SCHEDULED_SWEEP_ACCOUNTS, sweep_scheduled};
    match sweep_scheduled(state, SCHEDULED_SWEEP_ACCOUNTS).await {
        Ok(report) => {
            if report.generations_deleted + report.orphans_deleted > 0 || report.failures > 0 {
                tracing::info!(
                    accounts = report.accounts_swept,
                    generations_deleted = report.generations_deleted,
                    orphans_deleted = report.orphans_deleted,
                    failures = report.failures,
                    "scheduled credential sweep"
                );
            }
            Some(report)
        }
        Err(e) => {
            tracing::warn!(error = %e, "scheduled credential sweep failed");
            None
        }
    }
}

/// The scheduler loop of `flotilla serve` (EventBridge's role on AWS).
pub async fn run_scheduler_loop(state: AppState, queue: Arc<dyn ReconcileQueue>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match schedule_once(&state, queue.as_ref()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(enqueued = n, "scheduled overlay reconciliations"),
            Err(e) => tracing::warn!(error = %e, "scheduler pass failed"),
        }
        sweep_once(&state).await;
    }
}
