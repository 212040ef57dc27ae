//! What the events function writes for the sample stream batch (`events/events/stream.json`)
//! plus a record it cannot read, through [`flotilla_fn_events::invoke`] as `main` runs it:
//! EMF lines that match the metric catalogue with no account, catalog, event or request id
//! as a dimension, and JSON log lines that carry the function and the request id and never
//! the event's body.

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_fn_events::{Entry, EntryError, Publisher, StreamEvent};
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use serde_json::{Value, json};

/// Accepts every entry.
struct Bus;

#[async_trait]
impl Publisher for Bus {
    async fn put(&self, entries: &[Entry]) -> Result<Vec<Option<EntryError>>, String> {
        Ok(vec![None; entries.len()])
    }
}

#[tokio::test]
async fn the_sample_batch_writes_catalogue_emf_lines_and_logs_without_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = flotilla_runtime::telemetry::counted_test_state(
        dir.path(),
        Arc::new(flotilla_core::auth::StaticTokens::new()),
    );
    let (telemetry, lines) = LambdaTelemetry::capturing(&state, "events", "prod-eu");
    let logs = flotilla_telemetry::logs::CapturedLogs::default();
    let subscriber = flotilla_telemetry::logs::json_subscriber(
        flotilla_telemetry::logs::filter("info").expect("filter"),
        logs.clone(),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let mut sample: Value =
        serde_json::from_str(include_str!("../../../events/events/stream.json")).expect("sample");
    let records = sample["Records"].as_array_mut().expect("records");
    records.push(
        json!({"eventName": "INSERT", "dynamodb": {"SequenceNumber": "9", "secret": "t0ken"}}),
    );
    let event: StreamEvent = serde_json::from_value(sample).expect("stream event");
    let meta = Invocation::new("lambda-req-7c41", None);
    let response =
        flotilla_fn_events::invoke(state.store.as_ref(), &Bus, &telemetry, meta, event).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");

    // ---- EMF
    let forbidden = [
        "acme",
        "0192f5a0",
        "lambda-req",
        "t0ken",
        "123456789012",
        "orders",
    ];
    let docs: Vec<Value> = lines
        .take()
        .iter()
        .map(|l| {
            flotilla_telemetry::emf::check_line(l, &forbidden)
                .unwrap_or_else(|e| panic!("{e}\n{l}"))
        })
        .collect();
    assert!(!docs.is_empty());
    for d in &docs {
        assert_eq!(
            (d["Stage"].as_str(), d["Function"].as_str()),
            (Some("prod-eu"), Some("events"))
        );
    }
    let value = |outcome: &str| {
        docs.iter()
            .filter(|d| d["Outcome"] == outcome)
            .filter_map(|d| d["EventPushRecords"].as_u64())
            .sum::<u64>()
    };
    // Other tests of this binary may count too (the registry is process-wide): at least.
    assert!(value("published") >= 1, "{docs:?}");
    assert!(value("sealed") >= 1, "{docs:?}");
    assert!(value("malformed") >= 1, "{docs:?}");
    let pushed = docs
        .iter()
        .find(|d| d.get("EventPushRecords").is_some())
        .expect("push line");
    assert_eq!(
        pushed["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["Stage", "Function", "Outcome"], ["Stage", "Outcome"]])
    );

    // ---- logs
    let text = logs.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "skipping a stream record that cannot be handled"),
        "{text}"
    );
    for l in &lines {
        assert_eq!(l["function"], "events", "{l}");
        assert_eq!(l["request_id"], "lambda-req-7c41", "{l}");
        // Neither the malformed record's content nor an event's body is logged.
        assert!(!l.to_string().contains("t0ken"), "{l}");
        assert!(!l.to_string().contains("metadata.json"), "{l}");
    }
}
