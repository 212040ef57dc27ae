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
