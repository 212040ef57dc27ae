#![forbid(unsafe_code)]
//! The events Lambda's handler: the push path of change events on AWS
//! (`docs/events.md`, "Push").
//!
//! A DynamoDB stream on the metastore table delivers item changes, filtered by the event
//! source mapping to the inserts of event items. Two kinds matter:
//!
//! - a **pending** event (`EVQ#…`): a change committed with its event. On AWS nobody may be
//!   reading the log, so the push path seals it: the log the partition holds
//!   ([`events::Log::of_partition`]: a catalog's `CAT#…` or an
//!   account's `ACCT#…`) is sealed exactly as a reader seals it, one
//!   conditional transaction per batch of pending events;
//! - a **log entry** (`EVT#…`): an event that got its sequence. It is put on the event bus
//!   with `Source` `flotilla`, `DetailType` the operation type and `Detail` the event as
//!   `GET {A}/events` answers it (with its sequence and account id), at most 10 entries and
//!   256 KB per `PutEvents` call.
//!
//! Failures redeliver: a seal or put that fails (the SDK call, or an entry EventBridge
//! refused) ends the batch there, and the answer names that record in `batchItemFailures`:
//! a stream checkpoints at the first failed record, so it and every later record of the
//! shard are delivered again, in order, and an event put before the failure may be put
//! again. Such a duplicate carries the same `event_id`. Removes, modifies and items that are
//! not events are ignored; a record that cannot be read is logged (boundedly), counted and
//! skipped, so it never blocks its shard. Nothing here panics on input.

use std::collections::BTreeMap;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flotilla_domain::keys;
use flotilla_metastore::Metastore;
use flotilla_services::service::events::{self, Event, Log, Sealed};
use flotilla_telemetry::catalog::EVENT_PUSH_RECORDS;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `Source` of every event Flotilla puts on the bus.
pub const SOURCE: &str = "flotilla";
/// Entries of one `PutEvents` call (EventBridge's limit).
pub const MAX_ENTRIES_PER_PUT: usize = 10;
/// Bytes of one `PutEvents` call, as EventBridge counts them (its limit: 256 KB).
pub const MAX_BYTES_PER_PUT: usize = 256 * 1024;
/// Seal transactions one pending record may run (each moves up to 49 events) before its
/// record is delivered again to go on: 1,568 events per log and invocation.
pub const MAX_SEALS_PER_RECORD: usize = 32;
/// Malformed records logged per invocation; the rest are only counted.
const MAX_MALFORMED_LOGGED: usize = 5;
/// Characters of a reason or key quoted in a log line.
const MAX_LOGGED_CHARS: usize = 200;

// ---- the stream event ---------------------------------------------------------------------

/// A DynamoDB stream batch as the event source mapping invokes the function. Each record is
/// kept as raw JSON and read on its own ([`read_record`]), so one record that cannot be read
/// is skipped instead of failing the whole batch.
#[derive(Debug, Default, Deserialize)]
pub struct StreamEvent {
    #[serde(rename = "Records", default)]
    pub records: Vec<Value>,
}

/// The partial batch response (`FunctionResponseTypes: [ReportBatchItemFailures]`).
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StreamBatchResponse {
    pub batch_item_failures: Vec<BatchItemFailure>,
}

/// One record to deliver again, by its stream sequence number.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BatchItemFailure {
    pub item_identifier: String,
}

#[derive(Deserialize)]
struct RawRecord {
    #[serde(rename = "eventName")]
    event_name: String,
    dynamodb: RawChange,
}

#[derive(Deserialize)]
struct RawChange {
    #[serde(rename = "Keys")]
    keys: RawKeys,
    #[serde(rename = "NewImage", default)]
    new_image: Option<RawImage>,
    #[serde(rename = "SequenceNumber")]
    sequence_number: String,
}

#[derive(Deserialize)]
struct RawKeys {
    pk: RawString,
    sk: RawString,
}

#[derive(Deserialize)]
struct RawString {
    #[serde(rename = "S")]
    s: String,
}

/// The metastore's item attributes the push path reads: the body (`b`, binary, which the
/// stream carries base64-encoded).
#[derive(Deserialize)]
struct RawImage {
    b: Option<RawBinary>,
}

#[derive(Deserialize)]
struct RawBinary {
    #[serde(rename = "B")]
    b: String,
}

/// What one stream record asks for.
#[derive(Debug)]
enum Action {
    /// A pending event was written: seal the log it belongs to.
    Seal(Log),
    /// An event got its sequence: put it on the bus.
    Publish(Box<Entry>),
    /// Not the insert of an event item.
    Ignore,
}

/// One well-formed record: its stream sequence number (what a failure names) and its action.
#[derive(Debug)]
struct Record {
    sequence_number: String,
    action: Action,
}

/// Reads one stream record; `Err` names why it cannot be handled.
fn read_record(raw: &Value) -> Result<Record, String> {
    let rec =
        RawRecord::deserialize(raw).map_err(|e| format!("not a DynamoDB stream record: {e}"))?;
    let sequence_number = rec.dynamodb.sequence_number;
    if sequence_number.is_empty() {
        return Err("the record has an empty SequenceNumber".into());
    }
    let (pk, sk) = (rec.dynamodb.keys.pk.s, rec.dynamodb.keys.sk.s);
    let is_pending = sk.starts_with(keys::EVENT_PENDING_PREFIX);
    let is_entry = sk.starts_with(keys::EVENT_LOG_PREFIX);
    if rec.event_name != "INSERT" || !(is_pending || is_entry) {
        return Ok(Record {
            sequence_number,
            action: Action::Ignore,
        });
    }
    let log = Log::of_partition(&pk)
        .ok_or_else(|| format!("an event item in partition {pk:?}, which holds no event log"))?;
    if is_pending {
        return Ok(Record {
            sequence_number,
            action: Action::Seal(log),
        });
    }
    let sequence = keys::parse_event_log_sk(&sk)
        .ok_or_else(|| format!("log entry sort key {sk:?} names no sequence"))?;
    let body = rec
        .dynamodb
        .new_image
        .and_then(|i| i.b)
        .ok_or("the log entry has no new image with a body (the stream must be NEW_IMAGE)")?;
    let bytes = STANDARD
        .decode(body.b.as_bytes())
        .map_err(|e| format!("the body is not base64: {e}"))?;
    let event: Event =
        serde_json::from_slice(&bytes).map_err(|e| format!("the body is not an event: {e}"))?;
    if event.sequence != sequence {
        return Err(format!(
            "the entry at sequence {sequence} holds an event of sequence {}",
            event.sequence
        ));
    }
    let entry = Entry::of(event).map_err(|e| format!("the event cannot be put: {e}"))?;
    Ok(Record {
        sequence_number,
        action: Action::Publish(Box::new(entry)),
    })
}

// ---- the bus ------------------------------------------------------------------------------

/// One event as it goes on the bus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The event's own id (the same on every delivery of it).
    pub event_id: String,
    /// The operation type (`update-table`, ...).
    pub detail_type: String,
    /// The event as `GET {A}/events` answers it, with its account id (events written
    /// before events carried it have none).
    pub detail: String,
    /// When the change was made (the envelope's `time`).
    pub timestamp_ms: i64,
}

impl Entry {
    /// The bus entry of an event; `Err` when it is larger than one `PutEvents` call may be.
    pub fn of(event: Event) -> Result<Self, String> {
        let detail = serde_json::to_string(&event).map_err(|e| e.to_string())?;
        let entry = Entry {
            event_id: event.event_id,
            detail_type: event.operation.kind,
            detail,
            timestamp_ms: event.timestamp_ms,
        };
        if entry.size() > MAX_BYTES_PER_PUT {
            return Err(format!(
                "{} bytes, over EventBridge's {MAX_BYTES_PER_PUT}",
                entry.size()
            ));
        }
        Ok(entry)
    }

    /// The entry's size as EventBridge counts it against a call's 256 KB: the time (14
    /// bytes), the source, the detail type and the detail.
    pub fn size(&self) -> usize {
        14 + SOURCE.len() + self.detail_type.len() + self.detail.len()
    }
}

/// Why an entry was not put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryError {
    pub code: String,
    pub message: String,
}

/// The event bus: the narrow seam between the handler and EventBridge.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Puts `entries` (at most [`MAX_ENTRIES_PER_PUT`], at most [`MAX_BYTES_PER_PUT`]) in
    /// one call; answers per entry, in order, `None` when it was accepted. `Err` when the
    /// call itself failed (nothing is known to have been put).
    async fn put(&self, entries: &[Entry]) -> Result<Vec<Option<EntryError>>, String>;
}

/// The EventBridge bus `bus` (a name or ARN).
pub struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    bus: String,
}

impl EventBridgePublisher {
    pub fn new(client: aws_sdk_eventbridge::Client, bus: impl Into<String>) -> Self {
        Self {
            client,
            bus: bus.into(),
        }
    }
}

/// An EventBridge client (sent to `endpoint` when set: an emulator).
pub async fn eventbridge_client(endpoint: Option<&str>) -> aws_sdk_eventbridge::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(e) = endpoint {
        loader = loader.endpoint_url(e);
    }
    aws_sdk_eventbridge::Client::new(&loader.load().await)
}

#[async_trait]
impl Publisher for EventBridgePublisher {
    async fn put(&self, entries: &[Entry]) -> Result<Vec<Option<EntryError>>, String> {
        use aws_sdk_eventbridge::primitives::DateTime;
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;
        let mut call = self.client.put_events();
        for e in entries {
            call = call.entries(
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus)
                    .source(SOURCE)
                    .detail_type(&e.detail_type)
                    .detail(&e.detail)
                    // The change's time, so every delivery of the event has the same envelope
                    // time (EventBridge's envelope `id` is its own, new on every put).
                    .time(DateTime::from_millis(e.timestamp_ms))
                    .build(),
            );
        }
        let out = call.send().await.map_err(|e| {
            use aws_sdk_eventbridge::error::ProvideErrorMetadata as _;
            format!(
                "PutEvents failed: {}",
                e.code().or(e.message()).unwrap_or("no error code")
            )
        })?;
        let results = out.entries();
        if results.len() != entries.len() {
            return Err(format!(
                "PutEvents answered {} results for {} entries",
                results.len(),
                entries.len()
            ));
        }
        Ok(results
            .iter()
            .map(|r| {
                r.error_code().map(|code| EntryError {
                    code: code.to_owned(),
                    message: r.error_message().unwrap_or_default().to_owned(),
                })
            })
            .collect())
    }
}

// ---- the batch ----------------------------------------------------------------------------

/// Handles one stream batch: seals the logs of the pending events, puts the log entries on
/// the bus in stream order, and answers the first record to deliver again (if any).
pub async fn handle_batch(
    store: &dyn Metastore,
    publisher: &dyn Publisher,
    event: StreamEvent,
) -> StreamBatchResponse {
    let mut records: Vec<Option<Record>> = Vec::with_capacity(event.records.len());
    let mut malformed = 0;
    for raw in &event.records {
        match read_record(raw) {
            Ok(r) => records.push(Some(r)),
            Err(reason) => {
                malformed += 1;
                if malformed <= MAX_MALFORMED_LOGGED {
                    let sequence_number = raw
                        .pointer("/dynamodb/SequenceNumber")
                        .and_then(|s| s.as_str())
                        .unwrap_or_default();
                    tracing::warn!(
                        sequence_number = %bounded(sequence_number),
                        reason = %bounded(&reason),
                        "skipping a stream record that cannot be handled"
                    );
                }
                EVENT_PUSH_RECORDS.inc(&["malformed"]);
                records.push(None);
            }
        }
    }
    if malformed > MAX_MALFORMED_LOGGED {
        tracing::warn!(
            malformed,
            "more malformed stream records were skipped than logged"
        );
    }

    // Where the batch stops: the first record whose work failed. It and every later record
    // are delivered again, so nothing after it is put now (that keeps each log's order).
    let mut failed_at = records.len();

    // Seal each log once, for the first of its pending records: one seal moves every event
    // pending in the log, those of the later records too.
    let mut logs: BTreeMap<&Log, usize> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        if let Some(Record {
            action: Action::Seal(log),
            ..
        }) = r
        {
            logs.entry(log).or_insert(i);
        }
    }
    let mut by_position: Vec<(usize, &Log)> = logs.into_iter().map(|(l, i)| (i, l)).collect();
    by_position.sort();
    for (i, log) in by_position {
        match events::seal_log(store, log, MAX_SEALS_PER_RECORD).await {
            Ok(Sealed::Drained) => {}
            Ok(Sealed::More) => {
                tracing::info!(log = ?log, "the log has more pending events; the record is delivered again");
                failed_at = failed_at.min(i);
            }
            Err(e) => {
                tracing::warn!(log = ?log, error = %e, "sealing the event log failed; the record is delivered again");
                failed_at = failed_at.min(i);
            }
        }
    }

    // Put the log entries before the stop, in stream order, in calls within the limits.
    let mut chunk: Vec<(usize, &Entry)> = Vec::new();
    let mut chunk_bytes = 0;
    let mut published = 0;
    let mut put_failed = false;
    for (i, r) in records.iter().enumerate().take(failed_at) {
        let Some(Record {
            action: Action::Publish(entry),
            ..
        }) = r
        else {
            continue;
        };
        if chunk.len() == MAX_ENTRIES_PER_PUT || chunk_bytes + entry.size() > MAX_BYTES_PER_PUT {
            let (put, failed) = put_chunk(publisher, &chunk).await;
            published += put;
            chunk.clear();
            chunk_bytes = 0;
            if let Some(at) = failed {
                failed_at = at;
                put_failed = true;
                break;
            }
        }
        chunk_bytes += entry.size();
        chunk.push((i, entry));
    }
    if !put_failed && !chunk.is_empty() {
        let (put, failed) = put_chunk(publisher, &chunk).await;
        published += put;
        if let Some(at) = failed {
            failed_at = failed_at.min(at);
        }
    }
    EVENT_PUSH_RECORDS.add(&["published"], published as u64);

    let mut response = StreamBatchResponse::default();
    for (i, r) in records.iter().enumerate() {
        let Some(r) = r else { continue };
        let outcome = match (&r.action, i < failed_at) {
            (Action::Ignore, _) => "ignored",
            (Action::Seal(_), true) => "sealed",
            (Action::Publish(_), true) => continue,
            (_, false) => "failed",
        };
        EVENT_PUSH_RECORDS.inc(&[outcome]);
    }
    if let Some(Some(r)) = records.get(failed_at) {
        response.batch_item_failures.push(BatchItemFailure {
            item_identifier: r.sequence_number.clone(),
        });
    }
    tracing::info!(
        records = records.len(),
        published,
        malformed,
        redeliver_from = response
            .batch_item_failures
            .first()
            .map(|f| f.item_identifier.as_str())
            .unwrap_or(""),
        "stream batch handled"
    );
    response
}

/// Puts one chunk; answers how many entries were put before the first that was not, and
/// the position of that entry's record.
async fn put_chunk(publisher: &dyn Publisher, chunk: &[(usize, &Entry)]) -> (usize, Option<usize>) {
    let entries: Vec<Entry> = chunk.iter().map(|(_, e)| (*e).clone()).collect();
    let results = match publisher.put(&entries).await {
        Ok(results) => results,
        Err(e) => {
            tracing::warn!(error = %bounded(&e), "putting events on the bus failed; the records are delivered again");
            return (0, Some(chunk[0].0));
        }
    };
    for (k, (at, entry)) in chunk.iter().enumerate() {
        match results.get(k) {
            Some(None) => {}
            Some(Some(err)) => {
                tracing::warn!(
                    event_id = %entry.event_id,
                    code = %bounded(&err.code),
                    message = %bounded(&err.message),
                    "the bus refused an event; its record is delivered again"
                );
                return (k, Some(*at));
            }
            None => {
                tracing::warn!("the bus answered fewer results than entries; delivering again");
                return (k, Some(*at));
            }
        }
    }
    (chunk.len(), None)
}

fn bounded(s: &str) -> String {
    s.chars().take(MAX_LOGGED_CHARS).collect()
}

/// One invocation as `main` runs it: the batch in the invocation span, then the EMF flush.
pub async fn invoke(
    store: &dyn Metastore,
    publisher: &dyn Publisher,
    telemetry: &flotilla_runtime::telemetry::LambdaTelemetry,
    meta: flotilla_runtime::telemetry::Invocation,
    event: StreamEvent,
) -> StreamBatchResponse {
    telemetry
        .invocation(meta, handle_batch(store, publisher, event))
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
    use flotilla_metastore::redb_store::RedbMetastore;
    use flotilla_metastore::{Op, Transaction};
    use serde_json::json;

    use super::*;

    const CATALOG: &str = "0192f5a0-0000-7000-8000-00000000c001";

    fn store() -> (RedbMetastore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("redb");
        (store, dir)
    }

    /// Records every call; fails the `fail_call`-th (1-based) as a whole.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<Vec<Entry>>>,
        fail_call: usize,
    }

    impl Recorder {
        fn calls(&self) -> Vec<Vec<Entry>> {
            self.calls.lock().expect("lock").clone()
        }
    }

    #[async_trait]
    impl Publisher for Recorder {
        async fn put(&self, entries: &[Entry]) -> Result<Vec<Option<EntryError>>, String> {
            let mut calls = self.calls.lock().expect("lock");
            calls.push(entries.to_vec());
            if calls.len() == self.fail_call {
                return Err("PutEvents failed: ThrottlingException".into());
            }
            Ok(vec![None; entries.len()])
        }
    }

    fn event(catalog: &str, sequence: u64, location_len: usize) -> Value {
        json!({
            "event_id": format!("event-{catalog}-{sequence}"),
            "account_id": "acme",
            "sequence": sequence,
            "timestamp_ms": 1_800_000_000_000_i64 + sequence as i64,
            "request_id": "request-1",
            "actor": {"type": "PRINCIPAL", "id": "ana"},
            "operation": {"type": "update-table", "catalog_id": catalog, "namespace": ["sales"],
                          "name": "orders", "metadata_location": "s".repeat(location_len)},
        })
    }

    fn record(name: &str, pk: &str, sk: &str, body: Option<&Value>, seq: u64) -> Value {
        let mut image = json!({"pk": {"S": pk}, "sk": {"S": sk}, "v": {"N": "1"}});
        if let Some(b) = body {
            image["b"] = json!({"B": STANDARD.encode(b.to_string())});
        }
        json!({
            "eventID": format!("id-{seq}"),
            "eventName": name,
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}, "NewImage": image,
                         "SequenceNumber": seq.to_string(), "SizeBytes": 100,
                         "StreamViewType": "NEW_IMAGE"},
        })
    }

    fn entry_record(catalog: &str, sequence: u64, location_len: usize) -> Value {
        let e = event(catalog, sequence, location_len);
        record(
            "INSERT",
            &keys::catalog_pk(catalog),
            &keys::log_event(&keys::catalog_pk(catalog), sequence).sk,
            Some(&e),
            1000 + sequence,
        )
    }

    fn batch(records: Vec<Value>) -> StreamEvent {
        StreamEvent { records }
    }

    fn failure(seq: u64) -> StreamBatchResponse {
        StreamBatchResponse {
            batch_item_failures: vec![BatchItemFailure {
                item_identifier: seq.to_string(),
            }],
        }
    }

    #[tokio::test]
    async fn the_sample_event_seals_its_catalog_and_puts_its_log_entry() {
        let (store, _dir) = store();
        // The pending event the sample's first record announces, as a writer left it.
        let sample: Value =
            serde_json::from_str(include_str!("../../../events/events/stream.json"))
                .expect("sample");
        let pending_b64 = sample["Records"][0]["dynamodb"]["NewImage"]["b"]["B"]
            .as_str()
            .expect("pending body");
        let pending = STANDARD.decode(pending_b64).expect("base64");
        let pending_sk = sample["Records"][0]["dynamodb"]["Keys"]["sk"]["S"]
            .as_str()
            .expect("sk");
        let mut tx = Transaction::new();
        tx.push(Op::create(
            keys::Key::new(keys::catalog_pk(CATALOG), pending_sk),
            pending,
        ));
        store.transact(tx).await.expect("write pending");

        let bus = Recorder::default();
        let event: StreamEvent = serde_json::from_value(sample.clone()).expect("stream event");
        let response = handle_batch(&store, &bus, event).await;
        assert_eq!(response, StreamBatchResponse::default());

        // Sealed: the pending item is the log's first entry.
        let sealed = store
            .get(
                &keys::log_event(&keys::catalog_pk(CATALOG), 1),
                flotilla_metastore::Consistency::Strong,
            )
            .await
            .expect("read")
            .expect("the log's first entry");
        let sealed: Value = sealed.json().expect("json");
        assert_eq!(sealed["sequence"], 1);
        assert_eq!(sealed["operation"]["type"], "create-namespace");
        let left = store
            .query(&flotilla_metastore::Query::new(
                keys::catalog_pk(CATALOG),
                keys::EVENT_PENDING_PREFIX,
                flotilla_metastore::Consistency::Strong,
            ))
            .await
            .expect("query");
        assert!(left.items.is_empty(), "nothing left pending");

        // Put: the sample's log entry, as the API answers it.
        let calls = bus.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].len(), 1);
        let entry = &calls[0][0];
        let body = STANDARD
            .decode(
                sample["Records"][1]["dynamodb"]["NewImage"]["b"]["B"]
                    .as_str()
                    .expect("entry body"),
            )
            .expect("base64");
        let stored: Value = serde_json::from_slice(&body).expect("event");
        assert_eq!(entry.detail_type, "update-table");
        assert_eq!(entry.event_id, stored["event_id"].as_str().expect("id"));
        assert_eq!(entry.timestamp_ms, 1_800_000_000_000);
        let detail: Value = serde_json::from_str(&entry.detail).expect("detail");
        assert_eq!(detail, stored);
        assert_eq!(detail["account_id"], "acme");
        assert_eq!(detail["sequence"], 7);
    }

    #[tokio::test]
    async fn malformed_records_are_skipped_and_the_others_handled() {
        let (store, _dir) = store();
        let bus = Recorder::default();
        let pk = keys::catalog_pk(CATALOG);
        let sk = keys::log_event(&pk, 3).sk;
        let mut not_base64 = record("INSERT", &pk, &sk, None, 2);
        not_base64["dynamodb"]["NewImage"]["b"] = json!({"B": "!!not base64!!"});
        let records = vec![
            json!({"not": "a stream record"}),
            json!("a string"),
            not_base64,
            record("INSERT", &pk, &sk, Some(&json!({"event_id": "x"})), 3),
            // The body says sequence 4, the key 3.
            record("INSERT", &pk, &sk, Some(&event(CATALOG, 4, 1)), 4),
            // A log entry outside any log's partition.
            record("INSERT", "SYSTEM", &sk, Some(&event(CATALOG, 3, 1)), 5),
            // A log entry without its image.
            {
                let mut r = entry_record(CATALOG, 3, 1);
                r["dynamodb"]
                    .as_object_mut()
                    .expect("object")
                    .remove("NewImage");
                r
            },
            // Larger than one PutEvents call may be.
            entry_record(CATALOG, 3, MAX_BYTES_PER_PUT),
            entry_record(CATALOG, 3, 10),
        ];
        let response = handle_batch(&store, &bus, batch(records)).await;
        assert_eq!(
            response,
            StreamBatchResponse::default(),
            "no record blocks the shard"
        );
        let calls = bus.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].len(), 1);
        assert_eq!(calls[0][0].event_id, format!("event-{CATALOG}-3"));
    }

    #[tokio::test]
    async fn removes_modifies_and_other_items_are_ignored() {
        let (store, _dir) = store();
        let bus = Recorder::default();
        let pk = keys::catalog_pk(CATALOG);
        let e = event(CATALOG, 1, 1);
        let records = vec![
            record("REMOVE", &pk, &keys::log_event(&pk, 1).sk, Some(&e), 1),
            record("MODIFY", &pk, &keys::log_event(&pk, 1).sk, Some(&e), 2),
            record(
                "REMOVE",
                &pk,
                &keys::log_event_pending(&pk, 1, "x").sk,
                None,
                3,
            ),
            record("MODIFY", &pk, &keys::log_head(&pk).sk, None, 4),
            record("INSERT", &pk, "REL#sales\u{1E}orders", Some(&e), 5),
        ];
        let response = handle_batch(&store, &bus, batch(records)).await;
        assert_eq!(response, StreamBatchResponse::default());
        assert!(bus.calls().is_empty());
    }

    #[tokio::test]
    async fn calls_hold_at_most_ten_entries_and_256_kb_in_stream_order() {
        let (store, _dir) = store();
        let bus = Recorder::default();
        let records = (1..=25).map(|s| entry_record(CATALOG, s, 10)).collect();
        let response = handle_batch(&store, &bus, batch(records)).await;
        assert_eq!(response, StreamBatchResponse::default());
        let sizes: Vec<usize> = bus.calls().iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        let order: Vec<String> = bus
            .calls()
            .concat()
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        let want: Vec<String> = (1..=25).map(|s| format!("event-{CATALOG}-{s}")).collect();
        assert_eq!(order, want);

        let bus = Recorder::default();
        let records = (1..=3)
            .map(|s| entry_record(CATALOG, s, 100 * 1024))
            .collect();
        handle_batch(&store, &bus, batch(records)).await;
        let calls = bus.calls();
        let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 1], "two 100 KB entries per call");
        for call in calls {
            assert!(call.iter().map(Entry::size).sum::<usize>() <= MAX_BYTES_PER_PUT);
        }
    }

    #[tokio::test]
    async fn a_failed_call_names_the_first_record_of_its_call_and_puts_nothing_after_it() {
        let (store, _dir) = store();
        let bus = Recorder {
            fail_call: 2,
            ..Recorder::default()
        };
        let records = (1..=25).map(|s| entry_record(CATALOG, s, 10)).collect();
        let response = handle_batch(&store, &bus, batch(records)).await;
        // The second call held sequences 11 to 20: the stream goes on from the 11th record.
        assert_eq!(response, failure(1011));
        assert_eq!(bus.calls().len(), 2, "the third call is not made");
    }

    #[tokio::test]
    async fn a_failed_seal_names_its_record_and_nothing_after_it_is_put() {
        let (inner, _dir) = store();
        let store = FaultInjectingMetastore::new(inner);
        // The seal's first read (the log head) fails.
        store.fail_call(1, Fault::FailBeforeApply);
        let bus = Recorder::default();
        let other = "0192f5a0-0000-7000-8000-00000000c002";
        let records = vec![
            entry_record(CATALOG, 1, 10),
            record(
                "INSERT",
                &keys::catalog_pk(other),
                &keys::log_event_pending(&keys::catalog_pk(other), 5, "p").sk,
                None,
                7,
            ),
            entry_record(CATALOG, 2, 10),
        ];
        let response = handle_batch(&store, &bus, batch(records)).await;
        assert_eq!(response, failure(7));
        let calls = bus.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].len(), 1, "only the entry before the failed seal");
        assert_eq!(calls[0][0].event_id, format!("event-{CATALOG}-1"));
    }

    #[test]
    fn the_response_is_the_partial_batch_response_shape() {
        assert_eq!(
            serde_json::to_value(failure(42)).expect("json"),
            json!({"batchItemFailures": [{"itemIdentifier": "42"}]})
        );
    }
}
