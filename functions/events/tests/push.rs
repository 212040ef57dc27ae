//! The push path on moto: real changes through the API on the DynamoDB metastore, the
//! table's stream read with the DynamoDB Streams API and fed to the handler as the event
//! source mapping would, and the events received from an EventBridge bus through a rule
//! that targets an SQS queue. Each event arrives once (or, after a failed put, again with
//! the same event id), with its source, detail type, account and sequence, in sequence order
//! per log (each catalog's, and the account's: its account-level events, such as a catalog
//! create, reach the bus too); the function seals the logs itself (nobody reads them here).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use axum::body::Body;
use axum::http::{Method, Request};
use base64::Engine as _;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_fn_events::{
    Entry, EntryError, EventBridgePublisher, Publisher, StreamBatchResponse, StreamEvent,
    handle_batch,
};
use flotilla_metastore::dynamo::DynamoMetastore;
use flotilla_metastore::{Consistency, Query, query_all};
use flotilla_services::service::events::{self, Event, Log};
use flotilla_testkit::moto;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-0001";
const ACME: &str = "acme-token-0001";

fn sdk_config() -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .endpoint_url(moto::endpoint())
        .region(aws_config::Region::new(moto::TEST_REGION))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new(
                moto::TEST_ACCESS_KEY_ID,
                moto::TEST_SECRET_ACCESS_KEY,
                None,
                None,
                "moto",
            ),
        ))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build()
}

/// The deployment in moto: the metastore table with its stream (NEW_IMAGE), an event bus
/// whose one rule sends every Flotilla event to an SQS queue, and the API over the table.
struct Env {
    state: AppState,
    router: axum::Router,
    streams: aws_sdk_dynamodbstreams::Client,
    /// Where each shard's reading goes on (the stream is read as the mapping reads it).
    iterators: std::sync::Mutex<Vec<String>>,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    bus: EventBridgePublisher,
}

impl Env {
    async fn new() -> Self {
        let config = sdk_config();
        let table = moto::unique_name("events");
        let dynamo = flotilla_metastore::dynamo::connect(Some(&moto::endpoint())).await;
        DynamoMetastore::create_table(&dynamo, &table)
            .await
            .expect("create table");
        let updated = dynamo
            .update_table()
            .table_name(&table)
            .stream_specification(
                aws_sdk_dynamodb::types::StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewImage)
                    .build()
                    .expect("stream specification"),
            )
            .send()
            .await
            .expect("enable the stream");
        let stream_arn = updated
            .table_description()
            .and_then(|t| t.latest_stream_arn())
            .expect("the table's stream")
            .to_owned();
        let streams = aws_sdk_dynamodbstreams::Client::new(&config);
        let described = streams
            .describe_stream()
            .stream_arn(&stream_arn)
            .send()
            .await
            .expect("describe stream");
        let mut iterators = Vec::new();
        for shard in described
            .stream_description()
            .map(|d| d.shards())
            .unwrap_or_default()
        {
            let it = streams
                .get_shard_iterator()
                .stream_arn(&stream_arn)
                .shard_id(shard.shard_id().expect("shard id"))
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("shard iterator");
            iterators.push(it.shard_iterator().expect("iterator").to_owned());
        }
        assert!(!iterators.is_empty(), "the stream has no shard");

        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue_url = sqs
            .create_queue()
            .queue_name(moto::unique_name("pushed"))
            .send()
            .await
            .expect("create queue")
            .queue_url()
            .expect("queue url")
            .to_owned();
        let queue_arn = sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue attributes")
            .attributes()
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
            .expect("queue arn")
            .clone();
        let eventbridge = aws_sdk_eventbridge::Client::new(&config);
        let bus = moto::unique_name("flotilla-events");
        eventbridge
            .create_event_bus()
            .name(&bus)
            .send()
            .await
            .expect("create bus");
        eventbridge
            .put_rule()
            .event_bus_name(&bus)
            .name("all-flotilla-events")
            .event_pattern(json!({"source": ["flotilla"]}).to_string())
            .send()
            .await
            .expect("put rule");
        let targets = eventbridge
            .put_targets()
            .event_bus_name(&bus)
            .rule("all-flotilla-events")
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("queue")
                    .arn(queue_arn)
                    .build()
                    .expect("target"),
            )
            .send()
            .await
            .expect("put targets");
        assert_eq!(targets.failed_entry_count(), 0);

        let mut tokens = StaticTokens::new();
        tokens.add(OPERATOR, true, vec![]);
        tokens.add(ACME, false, vec!["acme".into()]);
        let state = AppState::new(
            Arc::new(DynamoMetastore::new(dynamo, table)),
            Arc::new(SystemClock),
            Arc::new(tokens),
            Config::default(),
        );
        Env {
            router: flotilla_core::router(state.clone()),
            state,
            streams,
            iterators: std::sync::Mutex::new(iterators),
            sqs,
            queue_url,
            bus: EventBridgePublisher::new(eventbridge, bus),
        }
    }

    async fn call(&self, method: Method, path: &str, token: &str, body: Option<Value>) -> Value {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .expect("request");
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> Value {
        self.call(Method::POST, path, token, Some(body)).await
    }

    /// Account `acme` with two catalogs: `lake` (a namespace, two tables, one dropped) and
    /// `ops` (a namespace). Answers the catalog ids.
    async fn changes(&self) -> (String, String) {
        self.post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
            .await;
        let mut ids = Vec::new();
        for name in ["lake", "ops"] {
            let c = self
                .post(
                    "/v1/accounts/acme/catalogs",
                    ACME,
                    json!({"display_name": name}),
                )
                .await;
            ids.push(c["id"].as_str().expect("catalog id").to_owned());
        }
        let (lake, ops) = (ids[0].clone(), ids[1].clone());
        let base = format!("/v1/accounts/acme/catalogs/{lake}/namespaces");
        self.post(&base, ACME, json!({"path": ["sales"]})).await;
        for t in ["orders", "refunds"] {
            self.post(
                &format!("{base}/sales/tables"),
                ACME,
                json!({"name": t, "format": "ICEBERG", "schema": {"type": "struct", "fields": [
                    {"id": 1, "name": "id", "required": true, "type": "long"}]}}),
            )
            .await;
        }
        self.call(
            Method::DELETE,
            &format!("{base}/sales/tables/refunds"),
            ACME,
            None,
        )
        .await;
        self.post(
            &format!("/v1/accounts/acme/catalogs/{ops}/namespaces"),
            ACME,
            json!({"path": ["audit"]}),
        )
        .await;
        (lake, ops)
    }

    /// The stream records written since the last read, as the Lambda event carries them.
    async fn new_records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut iterators = self.iterators.lock().expect("lock").clone();
        for it in &mut iterators {
            loop {
                let page = self
                    .streams
                    .get_records()
                    .shard_iterator(it.as_str())
                    .send()
                    .await
                    .expect("get records");
                if let Some(next) = page.next_shard_iterator() {
                    *it = next.to_owned();
                }
                if page.records().is_empty() {
                    break;
                }
                out.extend(page.records().iter().map(lambda_record));
            }
        }
        *self.iterators.lock().expect("lock") = iterators;
        out
    }

    /// Runs the stream through the handler, `batch` records per invocation, until no record
    /// is left (each seal writes log entries, which are records of their own). Every
    /// redelivery the handler asks for is honoured: the next invocation starts at the
    /// record it named. Answers the responses that named one.
    async fn drain(&self, publisher: &dyn Publisher, batch: usize) -> Vec<StreamBatchResponse> {
        let mut failures = Vec::new();
        let mut queue: Vec<Value> = Vec::new();
        for _ in 0..100 {
            queue.extend(self.new_records().await);
            if queue.is_empty() {
                return failures;
            }
            let take = queue.len().min(batch);
            let records: Vec<Value> = queue.drain(..take).collect();
            let response = invoke(self.state.store.as_ref(), publisher, records.clone()).await;
            if let Some(failed) = response.batch_item_failures.first() {
                let at = records
                    .iter()
                    .position(|r| {
                        r["dynamodb"]["SequenceNumber"] == failed.item_identifier.as_str()
                    })
                    .expect("the failure names a record of the batch");
                let mut again: Vec<Value> = records[at..].to_vec();
                again.append(&mut queue);
                queue = again;
                failures.push(response);
            }
        }
        panic!("the stream did not drain in 100 invocations");
    }

    /// Every message the rule delivered to the queue, in the order received.
    async fn pushed(&self) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
                .expect("receive");
            let messages = got.messages();
            if messages.is_empty() {
                return out;
            }
            for m in messages {
                out.push(serde_json::from_str(m.body().expect("body")).expect("an event"));
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(m.receipt_handle().expect("receipt"))
                    .send()
                    .await
                    .expect("delete");
            }
        }
    }

    async fn pending(&self, log: &Log) -> usize {
        query_all(
            self.state.store.as_ref(),
            Query::new(
                log.partition(),
                keys::EVENT_PENDING_PREFIX,
                Consistency::Strong,
            ),
        )
        .await
        .expect("query")
        .len()
    }

    /// What `GET {A}/events` answers for a catalog (read last: a read seals too).
    async fn listed(&self, catalog: &str) -> Vec<Value> {
        self.listed_query(&format!("catalog_id={catalog}")).await
    }

    /// What `GET {A}/events?{query}` answers (read last: a read seals too).
    async fn listed_query(&self, query: &str) -> Vec<Value> {
        let page = self
            .call(
                Method::GET,
                &format!("/v1/accounts/acme/events?{query}&page_size=100"),
                ACME,
                None,
            )
            .await;
        page["items"].as_array().expect("items").clone()
    }
}

async fn invoke(
    store: &dyn flotilla_metastore::Metastore,
    publisher: &dyn Publisher,
    records: Vec<Value>,
) -> StreamBatchResponse {
    let event: StreamEvent =
        serde_json::from_value(json!({"Records": records})).expect("a stream event");
    handle_batch(store, publisher, event).await
}

/// A record of the DynamoDB Streams API as the Lambda event carries it.
fn lambda_record(r: &aws_sdk_dynamodbstreams::types::Record) -> Value {
    let change = r.dynamodb().expect("the change");
    let image = |m: Option<&HashMap<String, AttributeValue>>| {
        m.map(|m| Value::Object(m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect()))
    };
    let mut dynamodb = json!({
        "Keys": image(change.keys()),
        "SequenceNumber": change.sequence_number(),
        "SizeBytes": change.size_bytes(),
        "StreamViewType": change.stream_view_type().map(|t| t.as_str()),
    });
    if let Some(new) = image(change.new_image()) {
        dynamodb["NewImage"] = new;
    }
    json!({
        "eventID": r.event_id(),
        "eventName": r.event_name().map(|n| n.as_str()),
        "eventVersion": r.event_version(),
        "eventSource": r.event_source(),
        "awsRegion": r.aws_region(),
        "dynamodb": dynamodb,
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/flotilla/stream/x",
    })
}

fn attribute(v: &AttributeValue) -> Value {
    let b64 = |b: &aws_sdk_dynamodbstreams::primitives::Blob| {
        base64::engine::general_purpose::STANDARD.encode(b.as_ref())
    };
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::B(b) => json!({"B": b64(b)}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(b) => json!({"NULL": b}),
        AttributeValue::Ss(s) => json!({"SS": s}),
        AttributeValue::Ns(n) => json!({"NS": n}),
        AttributeValue::Bs(bs) => json!({"BS": bs.iter().map(b64).collect::<Vec<_>>()}),
        AttributeValue::L(l) => json!({"L": l.iter().map(attribute).collect::<Vec<_>>()}),
        AttributeValue::M(m) => {
            json!({"M": m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect::<serde_json::Map<_, _>>()})
        }
        other => panic!("unexpected attribute {other:?}"),
    }
}

/// The key of the account's log in [`by_log`].
fn account_log() -> String {
    Log::Account("acme".into()).position_key().to_owned()
}

/// The pushed events by log (a catalog's id, or [`account_log`]), in the order they arrived.
fn by_log(pushed: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in pushed {
        let event: Event = serde_json::from_value(e["detail"].clone()).expect("an event");
        out.entry(events::position_key(&event).to_owned())
            .or_default()
            .push(e);
    }
    out
}

fn catalog_log(catalog: &str) -> Log {
    Log::Catalog(catalog.to_owned())
}

#[tokio::test]
async fn every_change_reaches_the_bus_once_in_sequence_order_per_catalog_sealed_by_the_push() {
    let env = Env::new().await;
    let (lake, ops) = env.changes().await;
    let account = Log::Account("acme".into());
    // Nobody reads: the changes are pending until the function seals them (the catalog
    // creates in the account's log).
    assert_eq!(env.pending(&catalog_log(&lake)).await, 4);
    assert_eq!(env.pending(&catalog_log(&ops)).await, 1);
    assert_eq!(env.pending(&account).await, 2);

    let failures = env.drain(&env.bus, 7).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        env.pending(&catalog_log(&lake)).await,
        0,
        "the push path sealed the log"
    );
    assert_eq!(env.pending(&catalog_log(&ops)).await, 0);
    assert_eq!(env.pending(&account).await, 0, "the account's log too");

    let pushed = env.pushed().await;
    let ids: HashSet<&str> = pushed
        .iter()
        .map(|e| e["detail"]["event_id"].as_str().expect("event id"))
        .collect();
    assert_eq!(pushed.len(), 7, "{pushed:#?}");
    assert_eq!(ids.len(), 7, "each event once");
    for e in &pushed {
        assert_eq!(e["source"], "flotilla");
        assert_eq!(e["detail-type"], e["detail"]["operation"]["type"]);
        assert_eq!(e["detail"]["account_id"], "acme");
    }
    let catalogs = by_log(&pushed);
    // The account's log: the two catalog creates, in its own sequence order.
    let account_events = &catalogs[&account_log()];
    let created: Vec<(&Value, &Value, &Value)> = account_events
        .iter()
        .map(|e| {
            (
                &e["detail-type"],
                &e["detail"]["operation"]["resource"]["id"],
                &e["detail"]["sequence"],
            )
        })
        .collect();
    assert_eq!(
        created,
        [
            (
                &json!("x-flotilla-catalog-created"),
                &json!(lake),
                &json!(1)
            ),
            (&json!("x-flotilla-catalog-created"), &json!(ops), &json!(2)),
        ]
    );
    let lake_events = &catalogs[&lake];
    let types: Vec<&str> = lake_events
        .iter()
        .map(|e| e["detail-type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        [
            "create-namespace",
            "create-table",
            "create-table",
            "drop-table"
        ]
    );
    let sequences: Vec<u64> = lake_events
        .iter()
        .map(|e| e["detail"]["sequence"].as_u64().expect("sequence"))
        .collect();
    assert_eq!(sequences, [1, 2, 3, 4], "sequence order per catalog");
    assert_eq!(catalogs[&ops].len(), 1);
    assert_eq!(catalogs[&ops][0]["detail"]["sequence"], 1);

    // The detail is the event as the API answers it.
    for (c, pushed) in [(&lake, lake_events), (&ops, &catalogs[&ops])] {
        let listed = env.listed(c).await;
        let details: Vec<&Value> = pushed.iter().map(|e| &e["detail"]).collect();
        assert_eq!(details, listed.iter().collect::<Vec<_>>());
    }
    let listed = env.listed_query("types=x-flotilla-catalog-created").await;
    let details: Vec<&Value> = account_events.iter().map(|e| &e["detail"]).collect();
    assert_eq!(details, listed.iter().collect::<Vec<_>>());
    // A second pass over the stream finds nothing new to put.
    assert!(env.drain(&env.bus, 7).await.is_empty());
    assert!(env.pushed().await.is_empty());
}

/// The bus with faults: the `fail_call`-th call fails as a whole (nothing put), and the
/// entry of event `refuse` is refused once while the others of its call are put.
struct FaultyBus<'a> {
    bus: &'a EventBridgePublisher,
    calls: AtomicUsize,
    fail_call: usize,
    refuse: std::sync::Mutex<Option<String>>,
}

#[async_trait]
impl Publisher for FaultyBus<'_> {
    async fn put(&self, entries: &[Entry]) -> Result<Vec<Option<EntryError>>, String> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call == self.fail_call {
            return Err("PutEvents failed: InternalException".into());
        }
        let refuse = self.refuse.lock().expect("lock").clone();
        let mut results = vec![None; entries.len()];
        let mut put = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if refuse.as_deref() == Some(e.event_id.as_str()) {
                results[i] = Some(EntryError {
                    code: "InternalFailure".into(),
                    message: "refused by the test".into(),
                });
                *self.refuse.lock().expect("lock") = None;
            } else {
                put.push(e.clone());
            }
        }
        if !put.is_empty() {
            let answered = self.bus.put(&put).await?;
            assert!(answered.iter().all(Option::is_none), "{answered:?}");
        }
        Ok(results)
    }
}

#[tokio::test]
async fn a_failed_put_is_delivered_again_and_a_duplicate_carries_the_same_event_id() {
    let env = Env::new().await;
    let (lake, _ops) = env.changes().await;
    // Seal first (through the push, publishing nothing yet), so the log entries and their
    // ids are known before the faulty runs.
    let mut sealing = env.new_records().await;
    sealing.retain(|r| {
        r["dynamodb"]["Keys"]["sk"]["S"]
            .as_str()
            .is_some_and(|sk| sk.starts_with(keys::EVENT_PENDING_PREFIX))
    });
    let none = FaultyBus {
        bus: &env.bus,
        calls: AtomicUsize::new(0),
        fail_call: 1,
        refuse: std::sync::Mutex::new(None),
    };
    let response = invoke(env.state.store.as_ref(), &none, sealing).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(none.calls.load(Ordering::SeqCst), 0, "sealing puts nothing");
    let entries: Vec<Value> = env
        .new_records()
        .await
        .into_iter()
        .filter(|r| {
            r["eventName"] == "INSERT"
                && r["dynamodb"]["Keys"]["sk"]["S"]
                    .as_str()
                    .is_some_and(|sk| sk.starts_with(keys::EVENT_LOG_PREFIX))
        })
        .collect();
    assert_eq!(
        entries.len(),
        7,
        "five catalog events and two of the account"
    );

    // The whole call fails: the first entry's record is named, nothing is on the bus.
    let failing = FaultyBus {
        bus: &env.bus,
        calls: AtomicUsize::new(0),
        fail_call: 1,
        refuse: std::sync::Mutex::new(None),
    };
    let response = invoke(env.state.store.as_ref(), &failing, entries.clone()).await;
    assert_eq!(
        response.batch_item_failures.len(),
        1,
        "the first failed record only: {response:?}"
    );
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        entries[0]["dynamodb"]["SequenceNumber"]
            .as_str()
            .expect("seq")
    );
    assert!(env.pushed().await.is_empty(), "a failed call put nothing");

    // Redelivered, the second entry is refused once while the others of the call are put:
    // the answer names the second record; its redelivery puts it and the later ones again.
    let second_id = {
        let b64 = entries[1]["dynamodb"]["NewImage"]["b"]["B"]
            .as_str()
            .expect("body");
        let body = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64");
        serde_json::from_slice::<Value>(&body).expect("event")["event_id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let refusing = FaultyBus {
        bus: &env.bus,
        calls: AtomicUsize::new(0),
        fail_call: 0,
        refuse: std::sync::Mutex::new(Some(second_id.clone())),
    };
    let response = invoke(env.state.store.as_ref(), &refusing, entries.clone()).await;
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        entries[1]["dynamodb"]["SequenceNumber"]
            .as_str()
            .expect("seq")
    );
    let response = invoke(env.state.store.as_ref(), &refusing, entries[1..].to_vec()).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");

    let pushed = env.pushed().await;
    let mut seen: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in &pushed {
        seen.entry(e["detail"]["event_id"].as_str().expect("id").to_owned())
            .or_default()
            .push(e);
    }
    assert_eq!(seen.len(), 7, "every event arrived: {pushed:#?}");
    assert_eq!(
        seen[&second_id].len(),
        1,
        "the refused event once, on redelivery"
    );
    let duplicated: Vec<_> = seen.values().filter(|v| v.len() > 1).collect();
    assert_eq!(
        duplicated.len(),
        entries.len() - 2,
        "the entries after the refused one were put twice"
    );
    for copies in duplicated {
        assert_eq!(
            copies[0]["detail"], copies[1]["detail"],
            "a duplicate is the same event"
        );
        assert_eq!(copies[0]["time"], copies[1]["time"]);
    }
    // The first call put all but the refused entry; the redelivery all from it on.
    assert_eq!(pushed.len(), 2 * entries.len() - 2);
    let logs = by_log(&pushed);
    assert_eq!(logs[&account_log()][0]["detail"]["account_id"], "acme");
    let lake_ids: HashSet<&Value> = logs[&lake]
        .iter()
        .map(|e| &e["detail"]["event_id"])
        .collect();
    assert_eq!(lake_ids.len(), 4, "the lake's log whole");
}

#[tokio::test]
async fn events_a_reader_sealed_are_pushed_too_and_the_log_stays_one_log() {
    let env = Env::new().await;
    let (lake, ops) = env.changes().await;
    // A reader seals the lake's log first; the push then seals what came after.
    assert_eq!(env.listed(&lake).await.len(), 4);
    env.post(
        &format!("/v1/accounts/acme/catalogs/{lake}/namespaces"),
        ACME,
        json!({"path": ["marketing"]}),
    )
    .await;
    assert!(env.drain(&env.bus, 10).await.is_empty());
    assert_eq!(env.pending(&catalog_log(&lake)).await, 0);

    let pushed = env.pushed().await;
    let catalogs = by_log(&pushed);
    assert_eq!(catalogs[&account_log()].len(), 2);
    let sequences: Vec<u64> = catalogs[&lake]
        .iter()
        .map(|e| e["detail"]["sequence"].as_u64().expect("sequence"))
        .collect();
    assert_eq!(sequences, [1, 2, 3, 4, 5], "each once, in order, one log");
    assert_eq!(catalogs[&lake][4]["detail-type"], "create-namespace");
    assert_eq!(catalogs[&ops].len(), 1);
    let listed = env.listed(&lake).await;
    let details: Vec<&Value> = catalogs[&lake].iter().map(|e| &e["detail"]).collect();
    assert_eq!(details, listed.iter().collect::<Vec<_>>());
}
