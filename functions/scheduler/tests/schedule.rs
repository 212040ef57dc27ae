//! The scheduler handler on the sample EventBridge event, with the in-process queue.

use std::sync::Arc;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_fn_scheduler::handle_schedule;
use flotilla_runtime::queue::ChannelQueue;

#[tokio::test]
async fn sample_schedule_event_runs_a_scheduler_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("m.redb"))
        .expect("redb");
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    );
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/scheduler/scheduled.json"
    ))
    .expect("sample");
    let event: EventBridgeEvent = serde_json::from_str(&raw).expect("sample event parses");
    let (queue, mut rx) = ChannelQueue::new();
    let out = handle_schedule(&state, &queue, event).await.expect("pass");
    assert_eq!(out["enqueued"], 0, "an empty deployment has nothing due");
    assert!(rx.try_recv().is_err());
    // The credential sweep ran too (nothing to visit).
    assert_eq!(out["sweep"]["accounts_visited"], 0, "{out}");
}

/// A queue that records what it was sent and the trace header in force when it was.
#[derive(Default)]
struct Recording(std::sync::Mutex<Vec<(usize, Option<String>)>>);

#[async_trait::async_trait]
impl flotilla_runtime::queue::ReconcileQueue for Recording {
    async fn send(
        &self,
        msgs: &[flotilla_core::reconcile::schedule::WorkMessage],
    ) -> Result<(), flotilla_runtime::queue::QueueError> {
        self.0
            .lock()
            .expect("lock")
            .push((msgs.len(), flotilla_telemetry::trace::current_header()));
        Ok(())
    }
}

/// Through `invoke` as `main` runs it: the queue sees the invocation's trace header (the one
/// `SqsQueue` sends as `AWSTraceHeader`), and the EMF lines match the catalogue without the
/// sample's account id or event id as a dimension.
#[tokio::test]
async fn the_scheduler_passes_its_trace_header_to_the_queue_and_writes_emf_lines() {
    use flotilla_core::service::{OnConflict, accounts};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = flotilla_metastore::metrics::CountingMetastore::new(
        flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("m.redb"))
            .expect("redb"),
    );
    let counters = store.counters();
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    )
    .with_metric_source(counters);
    accounts::create(
        &state,
        serde_json::from_value(serde_json::json!({"id": "acme"})).expect("req"),
        OnConflict::Error,
        None,
    )
    .await
    .expect("account");
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/scheduler/scheduled.json"
    ))
    .expect("sample");
    let event: EventBridgeEvent = serde_json::from_str(&raw).expect("sample event parses");
    let (telemetry, lines) =
        flotilla_runtime::telemetry::LambdaTelemetry::capturing(&state, "scheduler", "dev");
    let header = "Root=1-6650e0a1-cccccccccccccccccccccccc;Parent=3333333333333333;Sampled=1";
    let meta = flotilla_runtime::telemetry::Invocation::new("sched-req-1", Some(header.into()));
    let queue = Recording::default();
    let out = flotilla_fn_scheduler::invoke(&state, &queue, &telemetry, meta, event)
        .await
        .expect("pass");
    assert_eq!(out["enqueued"], 0);
    assert_eq!(
        *queue.0.lock().expect("lock"),
        [(0, Some(header.to_owned()))]
    );
    let emitted = lines.take();
    assert!(!emitted.is_empty(), "the pass read the metastore");
    let forbidden = ["acme", "123456789012", "89d1a02d", "sched-req", "6650e0a1"];
    for l in &emitted {
        let d = flotilla_telemetry::emf::check_line(l, &forbidden)
            .unwrap_or_else(|e| panic!("{e}\n{l}"));
        assert_eq!(d["Function"], "scheduler");
    }
    assert!(emitted.iter().any(|l| l.contains("\"MetastoreRequests\"")));
}
