//! What the reconciler writes for the sample batch (`events/reconciler/batch.json`) plus a
//! poison record, through [`flotilla_runtime::worker::invoke`] as `main` runs it: EMF lines
//! that match the metric catalogue with no account, overlay, generation or message id as a
//! dimension, and JSON log lines that carry the function, the request id, the message id
//! and the trace id each record arrived with.

use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use serde_json::Value;

const RECORD_TRACE: &str =
    "Root=1-6650e0a1-aaaaaaaaaaaaaaaaaaaaaaaa;Parent=1111111111111111;Sampled=1";
const LAMBDA_TRACE: &str =
    "Root=1-6650e0a1-bbbbbbbbbbbbbbbbbbbbbbbb;Parent=2222222222222222;Sampled=1";

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

fn sample_batch() -> SqsEvent {
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/reconciler/batch.json"
    ))
    .expect("sample");
    let mut event: SqsEvent = serde_json::from_str(&raw).expect("sample batch parses");
    // The first record arrived with the scheduler's trace header.
    event.records[0]
        .attributes
        .insert("AWSTraceHeader".into(), RECORD_TRACE.into());
    let mut poison = SqsMessage::default();
    poison.message_id = Some("0f6a2c1e-0000-4000-8000-00000000dead".into());
    poison.body = Some("{\"account_id\": \"acme\", \"token\": \"t0ken\"}".into());
    event.records.push(poison);
    event
}

#[tokio::test]
async fn sample_batch_writes_catalogue_emf_lines_and_logs_with_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        CountingMetastore::new(RedbMetastore::open(dir.path().join("m.redb")).expect("redb"));
    let counters = store.counters();
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    )
    .with_metric_source(counters);
    let (telemetry, lines) = LambdaTelemetry::capturing(&state, "reconciler", "prod-eu");
    let logs = Logs::default();
    let subscriber = flotilla_telemetry::logs::json_subscriber(
        flotilla_telemetry::logs::filter("info").expect("filter"),
        logs.clone(),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let meta = Invocation::new("lambda-req-7c41", Some(LAMBDA_TRACE.into()));
    let response = flotilla_runtime::worker::invoke(
        flotilla_runtime::worker::Worker::new(&state, &AdapterConnector),
        &telemetry,
        meta,
        sample_batch(),
    )
    .await;
    // The three sample overlays do not exist here (acknowledged as gone); poison is retried.
    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["0f6a2c1e-0000-4000-8000-00000000dead"]);

    // ---- EMF
    let emitted = lines.take();
    assert!(!emitted.is_empty());
    let forbidden = [
        "acme",
        "globex",
        "ovl-",
        "0f6a2c1e",
        "lambda-req",
        "6650e0a1",
        "t0ken",
        "123456789012",
    ];
    let docs: Vec<Value> = emitted
        .iter()
        .map(|l| {
            flotilla_telemetry::emf::check_line(l, &forbidden)
                .unwrap_or_else(|e| panic!("{e}\n{l}"))
        })
        .collect();
    for d in &docs {
        assert_eq!(
            (d["Stage"].as_str(), d["Function"].as_str()),
            (Some("prod-eu"), Some("reconciler"))
        );
        // No dimension is a bare number (a generation would be).
        for (k, v) in d.as_object().expect("object") {
            if k != "_aws" && v.is_string() {
                assert!(
                    v.as_str().is_some_and(|s| s.parse::<u64>().is_err()),
                    "{k}={v}"
                );
            }
        }
    }
    let value = |metric: &str, dim: &str, val: &str| {
        docs.iter()
            .filter(|d| d[dim] == val)
            .filter_map(|d| d[metric].as_u64())
            .sum::<u64>()
    };
    // Other tests of this binary may count too (the registry is process-wide): at least.
    assert!(value("ReconcileRuns", "Outcome", "gone") >= 3, "{docs:?}");
    assert!(value("ReconcileRuns", "Outcome", "poison") >= 1, "{docs:?}");
    assert!(
        value("ReconcileFailures", "Reason", "poison") >= 1,
        "{docs:?}"
    );
    assert!(
        value("MetastoreRequests", "Operation", "get") >= 3,
        "{docs:?}"
    );
    let failures = docs
        .iter()
        .find(|d| d.get("ReconcileFailures").is_some())
        .expect("failures line");
    assert_eq!(
        failures["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["Stage", "Function", "Reason"], ["Stage", "Reason"]])
    );
    // Flushed once per invocation: nothing new is pending.
    telemetry.flush();
    assert!(lines.take().iter().all(|l| !l.contains("ReconcileRuns")));

    // ---- logs
    let text = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("utf8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["function"], "reconciler", "{l}");
        assert_eq!(l["request_id"], "lambda-req-7c41", "{l}");
        assert!(!l.to_string().contains("t0ken"), "{l}");
    }
    fn of<'a>(lines: &'a [Value], id: &str) -> Vec<&'a Value> {
        lines.iter().filter(|l| l["message_id"] == id).collect()
    }
    let first = of(&lines, "0f6a2c1e-0000-4000-8000-000000000001");
    assert!(!first.is_empty(), "{text}");
    assert!(
        first
            .iter()
            .all(|l| l["trace_id"] == "1-6650e0a1-aaaaaaaaaaaaaaaaaaaaaaaa"),
        "{text}"
    );
    // A record without a header continues the invocation's trace.
    let second = of(&lines, "0f6a2c1e-0000-4000-8000-000000000002");
    assert!(!second.is_empty(), "{text}");
    assert!(
        second
            .iter()
            .all(|l| l["trace_id"] == "1-6650e0a1-bbbbbbbbbbbbbbbbbbbbbbbb"),
        "{text}"
    );
    assert!(
        of(&lines, "0f6a2c1e-0000-4000-8000-00000000dead")
            .iter()
            .any(|l| l["message"] == "poison reconcile message"),
        "{text}"
    );
}
