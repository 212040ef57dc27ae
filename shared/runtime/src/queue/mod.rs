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

/// The in-process queue of `flotilla serve`. A message still waiting in the queue (same
/// overlay and generation) is not queued twice, so a scheduler tick that comes round while a
/// long run is still waiting does not pile up duplicates. One that a worker has taken no
/// longer counts: the same message sent while it runs is queued (it may carry work the
/// running one planned too early to see).
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

    /// A worker took `d`: it no longer counts as waiting, so the same message sent from now
    /// on is queued again.
    pub fn taken(&self, d: &Delivery) {
        self.queued().remove(&ident(&d.message));
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
    /// Messages handled at once, over all accounts (`FLOTILLA_WORKERS`).
    pub concurrency: usize,
    /// Messages of one account handled at once (`FLOTILLA_WORKERS_PER_ACCOUNT`). Below
    /// `concurrency`, one account's backlog (a slow capture, a large reconciliation) leaves
    /// the other slots to the other accounts.
    pub per_account: usize,
}

/// Default [`WorkerOptions::concurrency`].
pub const DEFAULT_WORKERS: usize = 4;
/// Default [`WorkerOptions::per_account`]: one, so an account's messages also keep their
/// queue order.
pub const DEFAULT_WORKERS_PER_ACCOUNT: usize = 1;

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            max_receives: 5,
            retry_delay: Duration::from_secs(30),
            concurrency: DEFAULT_WORKERS,
            per_account: DEFAULT_WORKERS_PER_ACCOUNT,
        }
    }
}

impl WorkerOptions {
    /// The defaults, with `FLOTILLA_WORKERS` and `FLOTILLA_WORKERS_PER_ACCOUNT` when set to
    /// positive integers (`flotilla serve`).
    pub fn from_env() -> Self {
        let positive = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|n| *n > 0)
        };
        let mut opts = Self::default();
        if let Some(n) = positive("FLOTILLA_WORKERS") {
            opts.concurrency = n;
        }
        if let Some(n) = positive("FLOTILLA_WORKERS_PER_ACCOUNT") {
            opts.per_account = n;
        }
        opts
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
    // Taken: no longer waiting, so the same message sent while this one runs (a capture job
    // queued by a run that changed more, while the previous job of the overlay is capturing)
    // is queued again rather than dropped as a duplicate of one that already planned.
    queue.taken(&d);
    let outcome = handle_work(state, connector, &d.message).await;
    if outcome.redeliver() && d.receives < opts.max_receives {
        if !queue.queued().insert(ident(&d.message)) {
            // An identical message was queued while this one ran: it is the redelivery.
            return (DeliveryResult::Redelivering, outcome);
        }
        let q = queue.clone();
        let delay = opts.retry_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = q.redeliver(d);
        });
        return (DeliveryResult::Redelivering, outcome);
    }
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

/// Consumes the in-process queue until every sender is gone and the last message is handled,
/// [`WorkerOptions::concurrency`] messages at a time and fairly between accounts
/// ([`run_fair`]).
pub async fn run_channel_worker(
    state: AppState,
    connector: DynConnector,
    queue: ChannelQueue,
    rx: mpsc::UnboundedReceiver<Delivery>,
    opts: WorkerOptions,
) {
    let handler_opts = opts.clone();
    run_fair(rx, &opts, move |d| {
        let (state, connector, queue, opts) = (
            state.clone(),
            connector.clone(),
            queue.clone(),
            handler_opts.clone(),
        );
        async move {
            handle_delivery(&state, connector.as_ref(), &queue, d, &opts).await;
        }
    })
    .await;
}

/// The in-process worker's dispatcher. Deliveries wait in one FIFO per account; free slots
/// (at most `opts.concurrency` handlers run at once) go round-robin to the accounts that
/// have a message waiting and fewer than `opts.per_account` running. So an account with a
/// long backlog, or one message that takes minutes, holds at most its own slots: another
/// account's message starts as soon as a slot is free, not after the backlog. Returns when
/// the channel is closed and every handler has finished.
pub async fn run_fair<H, F>(
    mut rx: mpsc::UnboundedReceiver<Delivery>,
    opts: &WorkerOptions,
    handle: H,
) where
    H: Fn(Delivery) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    use std::collections::{HashMap, VecDeque};
    let concurrency = opts.concurrency.max(1);
    let per_account = opts.per_account.max(1);
    // Messages waiting, per account; the accounts in the order they get the next free slot.
    let mut waiting: HashMap<String, VecDeque<Delivery>> = HashMap::new();
    let mut turn: VecDeque<String> = VecDeque::new();
    let mut running: HashMap<String, usize> = HashMap::new();
    let mut tasks: tokio::task::JoinSet<String> = tokio::task::JoinSet::new();
    let mut open = true;
    loop {
        // Take in everything already queued, so the slots below are given out over all of it.
        while open {
            match rx.try_recv() {
                Ok(d) => admit(&mut waiting, &mut turn, d),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        // Fill the free slots, one account at a time in turn.
        let mut skipped = 0;
        while tasks.len() < concurrency && skipped < turn.len() {
            let Some(account) = turn.pop_front() else {
                break;
            };
            let busy = running.get(&account).copied().unwrap_or(0);
            if busy >= per_account {
                turn.push_back(account);
                skipped += 1;
                continue;
            }
            skipped = 0;
            let queue = waiting.get_mut(&account);
            let Some(d) = queue.and_then(VecDeque::pop_front) else {
                waiting.remove(&account);
                continue;
            };
            *running.entry(account.clone()).or_default() += 1;
            if waiting.get(&account).is_some_and(|q| !q.is_empty()) {
                turn.push_back(account.clone());
            } else {
                waiting.remove(&account);
            }
            let work = handle(d);
            tasks.spawn(async move {
                // The handler runs in a task of its own, so a panic in it still frees the
                // account's slot here.
                if let Err(e) = tokio::spawn(work).await {
                    tracing::error!(error = %e, "a queue message handler failed");
                }
                account
            });
        }
        if !open && tasks.is_empty() && turn.is_empty() {
            return;
        }
        tokio::select! {
            d = rx.recv(), if open => match d {
                Some(d) => admit(&mut waiting, &mut turn, d),
                None => open = false,
            },
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                let Ok(account) = done else {
                    continue;
                };
                if let Some(n) = running.get_mut(&account) {
                    *n -= 1;
                    if *n == 0 {
                        running.remove(&account);
                    }
                }
            }
        }
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

/// Queues a delivery behind its account's others; an account with nothing waiting before
/// takes its turn at the back.
fn admit(
    waiting: &mut std::collections::HashMap<String, std::collections::VecDeque<Delivery>>,
    turn: &mut std::collections::VecDeque<String>,
    d: Delivery,
) {
    let account = d.message.ident().0;
    let queue = waiting.entry(account.clone()).or_default();
    if queue.is_empty() && !turn.contains(&account) {
        turn.push_back(account);
    }
    queue.push_back(d);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flotilla_reconcile::message::CaptureMessage;
    use tokio::sync::Notify;

    use super::*;

    fn delivery(account: &str, overlay: &str) -> Delivery {
        Delivery {
            message: WorkMessage::Capture(CaptureMessage {
                account_id: account.into(),
                overlay_id: overlay.into(),
                observed_generation: 1,
                revalidate: false,
            }),
            receives: 0,
        }
    }

    fn name(d: &Delivery) -> String {
        let (account, subject, _) = d.message.ident();
        format!("{account}/{subject}")
    }

    fn opts(concurrency: usize, per_account: usize) -> WorkerOptions {
        WorkerOptions {
            concurrency,
            per_account,
            ..WorkerOptions::default()
        }
    }

    /// Runs the dispatcher over `deliveries` with a handler that records each message's name
    /// when it finishes; a message named in `stuck` waits for the returned notifier.
    fn spawn_worker(
        deliveries: Vec<Delivery>,
        opts: WorkerOptions,
        stuck: &'static str,
    ) -> (
        Arc<Notify>,
        mpsc::UnboundedReceiver<String>,
        tokio::task::JoinHandle<()>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        for d in deliveries {
            tx.send(d).unwrap();
        }
        drop(tx);
        let release = Arc::new(Notify::new());
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let r = release.clone();
        let worker = tokio::spawn(async move {
            run_fair(rx, &opts, move |d| {
                let (r, done) = (r.clone(), done_tx.clone());
                async move {
                    let n = name(&d);
                    if n.ends_with(stuck) {
                        r.notified().await;
                    }
                    let _ = done.send(n);
                }
            })
            .await;
        });
        (release, done_rx, worker)
    }

    /// The attack: one account's capture that does not return (a trickling object), with a
    /// backlog of twenty more behind it, and another account's one-message job. The other
    /// account's message is handled while the stuck one still holds its slot; the stuck
    /// account's backlog then runs in its queue order. (The clock is paused: if the other
    /// account waited behind the stuck message, the runtime would go idle and the guard's
    /// hour would pass at once, failing the test instead of hanging it.)
    #[tokio::test(start_paused = true)]
    async fn a_stuck_account_does_not_hold_up_another() {
        let mut deliveries: Vec<_> = (0..21)
            .map(|i| delivery("a", &format!("o{i:02}")))
            .collect();
        deliveries.push(delivery("b", "x"));
        let (release, mut done, worker) = spawn_worker(deliveries, opts(2, 1), "CAPTURE#o00");
        let first = tokio::time::timeout(Duration::from_secs(3600), done.recv())
            .await
            .expect("another account's message waited behind a stuck one");
        assert_eq!(first.as_deref(), Some("b/CAPTURE#x"));
        release.notify_one();
        worker.await.unwrap();
        let mut rest = Vec::new();
        while let Ok(n) = done.try_recv() {
            rest.push(n);
        }
        let want: Vec<_> = (0..21).map(|i| format!("a/CAPTURE#o{i:02}")).collect();
        assert_eq!(rest, want, "one account's messages keep their order");
    }

    /// Free slots go round-robin: with one slot, two accounts' backlogs alternate instead of
    /// the first account's whole backlog running before the second's first message.
    #[tokio::test(start_paused = true)]
    async fn slots_go_round_robin_between_accounts() {
        let mut deliveries: Vec<_> = (0..3).map(|i| delivery("a", &format!("{i}"))).collect();
        deliveries.extend((0..3).map(|i| delivery("b", &format!("{i}"))));
        let (_release, mut done, worker) = spawn_worker(deliveries, opts(1, 1), "never");
        worker.await.unwrap();
        let mut order = Vec::new();
        while let Ok(n) = done.try_recv() {
            order.push(n);
        }
        assert_eq!(
            order,
            [
                "a/CAPTURE#0",
                "b/CAPTURE#0",
                "a/CAPTURE#1",
                "b/CAPTURE#1",
                "a/CAPTURE#2",
                "b/CAPTURE#2"
            ]
        );
    }

    /// No account runs more than `per_account` messages at once, nor the worker more than
    /// `concurrency`, whatever the backlog.
    #[tokio::test(start_paused = true)]
    async fn concurrency_is_bounded_per_account_and_in_all() {
        let (tx, rx) = mpsc::unbounded_channel();
        for i in 0..40 {
            tx.send(delivery(["a", "b", "c"][i % 3], &format!("{i}")))
                .unwrap();
        }
        drop(tx);
        let running: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let peak_account = Arc::new(AtomicUsize::new(0));
        let peak_total = Arc::new(AtomicUsize::new(0));
        let total = Arc::new(AtomicUsize::new(0));
        let (r, pa, pt, t) = (
            running.clone(),
            peak_account.clone(),
            peak_total.clone(),
            total.clone(),
        );
        run_fair(rx, &opts(5, 2), move |d| {
            let (r, pa, pt, t) = (r.clone(), pa.clone(), pt.clone(), t.clone());
            async move {
                let account = d.message.ident().0;
                {
                    let mut map = r.lock().unwrap();
                    let n = map.entry(account.clone()).or_default();
                    *n += 1;
                    pa.fetch_max(*n, Ordering::SeqCst);
                }
                pt.fetch_max(t.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                // Yield a few times so that handlers overlap.
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
                t.fetch_sub(1, Ordering::SeqCst);
                *r.lock().unwrap().get_mut(&account).unwrap() -= 1;
            }
        })
        .await;
        assert_eq!(peak_account.load(Ordering::SeqCst), 2);
        assert!(peak_total.load(Ordering::SeqCst) <= 5);
        assert!(
            peak_total.load(Ordering::SeqCst) > 2,
            "the accounts ran side by side"
        );
    }

    /// A handler that panics frees its slot: the account's next message still runs.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_frees_its_slot() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(delivery("a", "boom")).unwrap();
        tx.send(delivery("a", "next")).unwrap();
        drop(tx);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        run_fair(rx, &opts(1, 1), move |d| {
            let s = s.clone();
            async move {
                let n = name(&d);
                if n.ends_with("boom") {
                    panic!("handler failure");
                }
                s.lock().unwrap().push(n);
            }
        })
        .await;
        assert_eq!(*seen.lock().unwrap(), ["a/CAPTURE#next"]);
    }
}

#[cfg(test)]
mod waiting_tests {
    use super::*;

    /// A message still waiting is not queued twice; once a worker took it, the same message
    /// is queued again (a capture job sent while the overlay's previous one runs).
    #[tokio::test]
    async fn a_message_taken_by_a_worker_no_longer_blocks_its_twin() {
        let (queue, mut rx) = ChannelQueue::new();
        let m: WorkMessage = flotilla_reconcile::work::CaptureMessage {
            account_id: "acme".into(),
            overlay_id: "o1".into(),
            observed_generation: 1,
            revalidate: false,
        }
        .into();
        queue.send(std::slice::from_ref(&m)).await.unwrap();
        queue.send(std::slice::from_ref(&m)).await.unwrap();
        let d = rx.recv().await.unwrap();
        assert!(rx.try_recv().is_err(), "waiting: not queued twice");
        queue.taken(&d);
        queue.send(std::slice::from_ref(&m)).await.unwrap();
        assert_eq!(rx.try_recv().unwrap().message, m, "taken: queued again");
    }
}
