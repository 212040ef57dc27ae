//! The SQS path on moto: the scheduler enqueues through SQS, this crate's handler consumes
//! batches the way the Lambda event source mapping delivers them (delete on success, make
//! visible again on a reported failure), and the queue's redrive policy moves a poison
//! message to the dead-letter queue after `maxReceiveCount` receives.

use std::collections::HashSet;
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::QueueAttributeName;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_catalog_access::spi::CatalogClient;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::reconcile::work::ReconcileMessage;
use flotilla_core::reconcile::{AdapterConnector, Connector, ReconcileError};
use flotilla_core::{AppState, Config};
use flotilla_domain::model::IntegrationRecord;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, Query, query_all};
use flotilla_runtime::queue::{SqsQueue, schedule_once};
use flotilla_runtime::worker::{CaptureRun, Worker, capture_only, handle_batch, handle_batch_with};
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use flotilla_testkit::moto;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-0001";
const ACME: &str = "acme-token-0001";
const UPSTREAM: &str = "upstream-token-0001";

struct Env {
    state: AppState,
    fx: IcebergFixture,
    catalog: String,
    overlay: String,
    _dir: tempfile::TempDir,
}

async fn call(state: &AppState, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = flotilla_core::router(state.clone())
        .oneshot(req)
        .await
        .expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("redb");
    let key = flotilla_secrets::local::SecretKey::generate();
    let creds =
        flotilla_secrets::local::LocalEncryptedStore::with_key(dir.path().join("secrets"), &key)
            .expect("secrets");
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    tokens.add(ACME, false, vec!["acme".into()]);
    let config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(tokens),
        config,
    )
    .with_credentials(Arc::new(creds));
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM]);
    let (s, b) = call(&state, "/v1/accounts", OPERATOR, json!({"id": "acme"})).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (s, b) = call(
        &state,
        "/v1/accounts/acme/catalogs",
        ACME,
        json!({"display_name": "analytics"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let catalog = b["id"].as_str().expect("id").to_owned();
    let (s, b) = call(
        &state,
        "/v1/accounts/acme/integrations",
        ACME,
        json!({"display_name": "up", "type": "ICEBERG_REST", "uri": fx.uri(),
               "authentication": {"type": "BEARER"}, "credentials": {"token": UPSTREAM}}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let integration = b["id"].as_str().expect("id").to_owned();
    let (s, b) = call(
        &state,
        "/v1/accounts/acme/overlays",
        ACME,
        json!({"display_name": "import", "integration_id": integration, "catalog_id": catalog}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let overlay = b["id"].as_str().expect("id").to_owned();
    Env {
        state,
        fx,
        catalog,
        overlay,
        _dir: dir,
    }
}

fn sqs() -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .endpoint_url(moto::endpoint())
        .region(aws_sdk_sqs::config::Region::new(moto::TEST_REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            moto::TEST_ACCESS_KEY_ID,
            moto::TEST_SECRET_ACCESS_KEY,
            None,
            None,
            "moto",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// A queue with a dead-letter queue after `max_receives`; answers (queue url, dlq url).
async fn queues(client: &aws_sdk_sqs::Client, max_receives: u32) -> (String, String) {
    let dlq = client
        .create_queue()
        .queue_name(moto::unique_name("reconcile-dlq"))
        .send()
        .await
        .expect("dlq");
    let dlq_url = dlq.queue_url().expect("dlq url").to_owned();
    let attrs = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("dlq attributes");
    let arn = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .expect("arn")
        .clone();
    let redrive = json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receives.to_string()})
        .to_string();
    let q = client
        .create_queue()
        .queue_name(moto::unique_name("reconcile"))
        .attributes(QueueAttributeName::RedrivePolicy, redrive)
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .send()
        .await
        .expect("queue");
    (q.queue_url().expect("url").to_owned(), dlq_url)
}

async fn send_raw(client: &aws_sdk_sqs::Client, url: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("send");
}

/// One poll as the Lambda event source mapping does it: receive, invoke the handler, delete
/// what succeeded, make the reported failures visible again at once (instead of waiting out
/// the visibility timeout). Answers how many records the batch held.
async fn poll_once(env: &Env, client: &aws_sdk_sqs::Client, url: &str) -> usize {
    poll_with(Worker::new(&env.state, &AdapterConnector), client, url).await
}

/// [`poll_once`] through a given worker.
async fn poll_with(worker: Worker<'_>, client: &aws_sdk_sqs::Client, url: &str) -> usize {
    let got = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive");
    let msgs = got.messages().to_vec();
    if msgs.is_empty() {
        return 0;
    }
    let mut event = SqsEvent::default();
    for m in &msgs {
        let mut r = SqsMessage::default();
        r.message_id = m.message_id().map(str::to_owned);
        r.receipt_handle = m.receipt_handle().map(str::to_owned);
        r.body = m.body().map(str::to_owned);
        event.records.push(r);
    }
    let response = handle_batch_with(worker, event).await;
    let failed: HashSet<&str> = failed_ids(&response).into_iter().collect();
    for m in &msgs {
        let handle = m.receipt_handle().expect("receipt handle");
        if failed.contains(m.message_id().unwrap_or_default()) {
            client
                .change_message_visibility()
                .queue_url(url)
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await
                .expect("nack");
        } else {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(handle)
                .send()
                .await
                .expect("ack");
        }
    }
    msgs.len()
}

async fn relation_count(env: &Env) -> usize {
    let q = Query::new(
        flotilla_domain::keys::catalog_pk(&env.catalog),
        flotilla_domain::keys::RELATION_PREFIX,
        Consistency::Strong,
    );
    query_all(env.state.store.as_ref(), q)
        .await
        .expect("scan")
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_duplicate_delivery_stale_generation_and_poison_message_to_dlq() {
    let env = env().await;
    let client = sqs();
    let (url, dlq) = queues(&client, 2).await;
    // The scheduler enqueues the one due overlay through SQS.
    let n = schedule_once(&env.state, &SqsQueue::new(client.clone(), url.clone()))
        .await
        .expect("schedule");
    assert_eq!(n, 1);
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    // A duplicate delivery, a message for a superseded generation, and a poison message.
    send_raw(&client, &url, &current.to_body()).await;
    let stale = ReconcileMessage {
        observed_generation: 0,
        ..current.clone()
    };
    send_raw(&client, &url, &stale.to_body()).await;
    send_raw(&client, &url, "{\"account_id\": \"acme\", \"overlay\": 42}").await;
    let mut rounds = 0;
    let mut empty = 0;
    while empty < 2 && rounds < 20 {
        rounds += 1;
        if poll_once(&env, &client, &url).await == 0 {
            empty += 1;
        }
    }
    assert_eq!(
        relation_count(&env).await,
        4,
        "materialized once despite the duplicate"
    );
    let dead = client
        .receive_message()
        .queue_url(&dlq)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("dlq receive");
    let bodies: Vec<&str> = dead.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(
        bodies,
        vec!["{\"account_id\": \"acme\", \"overlay\": 42}"],
        "only the poison message is dead-lettered"
    );
    let left = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .expect("receive");
    assert!(
        left.messages().is_empty(),
        "every other message was acknowledged"
    );
    // The overlay kept the last summary, and the scheduler does not enqueue it again now.
    let n = schedule_once(&env.state, &SqsQueue::new(client.clone(), url.clone()))
        .await
        .expect("schedule");
    assert_eq!(n, 0, "interval not elapsed since the run");
}

/// The reconciler function links no capture runner: after a reconciliation it plans the
/// capture job from stored state and sends it to the capture queue, never to the reconcile
/// queue; the capture function consumes it there. A reconciliation whose capture is current
/// queues nothing, and one whose capture job cannot be queued is delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_queues_capture_jobs_on_the_capture_queue() {
    let env = env().await;
    let client = sqs();
    let (url, _) = queues(&client, 3).await;
    let (capture_url, _) = queues(&client, 3).await;
    let routed =
        SqsQueue::new(client.clone(), url.clone()).with_capture_queue(Some(capture_url.clone()));
    let state = env.state.clone().with_work_sender(Arc::new(routed));
    let reconciler = Worker {
        capture: CaptureRun::Queue,
        ..Worker::new(&state, &AdapterConnector)
    };
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };

    // Without a queue for the job, the reconciled message is delivered again.
    let mut no_queue = env.state.clone();
    no_queue.work = None;
    let without = Worker {
        capture: CaptureRun::Queue,
        ..Worker::new(&no_queue, &AdapterConnector)
    };
    let r = handle_batch_with(without, batch_of("m-no-queue", &current)).await;
    let failed = failed_ids(&r);
    assert_eq!(failed, ["m-no-queue"]);
    assert_eq!(
        relation_count(&env).await,
        4,
        "the reconciliation itself ran"
    );

    // With the deployment's queues: acknowledged, and the job is on the capture queue only.
    send_raw(&client, &url, &current.to_body()).await;
    assert_eq!(poll_with(reconciler, &client, &url).await, 1);
    assert!(bodies(&client, &url).await.is_empty(), "acknowledged");
    let queued = bodies(&client, &capture_url).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    let job = flotilla_core::reconcile::schedule::WorkMessage::parse(&queued[0])
        .expect("capture message");
    assert_eq!(
        job,
        flotilla_core::reconcile::schedule::WorkMessage::Capture(
            flotilla_core::reconcile::work::CaptureMessage {
                account_id: "acme".into(),
                overlay_id: env.overlay.clone(),
                observed_generation: 1,
                revalidate: false,
            }
        )
    );
    // The capture function runs it and acknowledges it.
    send_raw(&client, &capture_url, &queued[0]).await;
    let capture = Worker {
        capture: CaptureRun::Inline,
        dispatch: capture_only,
        ..Worker::new(&env.state, &AdapterConnector)
    };
    assert_eq!(poll_with(capture, &client, &capture_url).await, 1);
    assert!(
        bodies(&client, &capture_url).await.is_empty(),
        "acknowledged"
    );
    // It runs nothing else: a reconcile message there is delivered again (and so ends in
    // the capture queue's dead-letter queue), never acknowledged unrun.
    let r = handle_batch_with(capture, batch_of("m-misrouted", &current)).await;
    let failed = failed_ids(&r);
    assert_eq!(failed, ["m-misrouted"]);
}

#[tokio::test]
async fn handler_reports_malformed_and_failing_records_and_acks_the_rest() {
    let env = env().await;
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/reconciler/batch.json"
    ))
    .expect("sample");
    let mut event: SqsEvent = serde_json::from_str(&raw).expect("sample event parses");
    // The sample's overlays do not exist here: acknowledged as gone.
    let r = handle_batch(&env.state, &AdapterConnector, event.clone()).await;
    assert!(r.batch_item_failures.is_empty(), "{r:?}");
    // A body that is not a reconcile message, a missing body, and a failing run are failures.
    event.records[0].body = Some("[1, 2".into());
    event.records[1].body = None;
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    event.records[2].body = Some(current.to_body());
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
        ));
    let r = handle_batch(&env.state, &AdapterConnector, event.clone()).await;
    let ids = failed_ids(&r);
    assert_eq!(ids.len(), 3, "{ids:?}");
    env.fx.clear_faults();
    let r = handle_batch(&env.state, &AdapterConnector, event).await;
    assert_eq!(
        r.batch_item_failures.len(),
        2,
        "the run now succeeds; the two bad bodies still fail"
    );
    assert_eq!(relation_count(&env).await, 4);
}

/// A connector that fails every connection with one service error.
struct FailingConnector(flotilla_core::error::Error);

#[async_trait::async_trait]
impl Connector for FailingConnector {
    async fn connect(
        &self,
        _state: &AppState,
        _integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        Err(ReconcileError::Api(self.0.clone()))
    }
}

/// One SQS record carrying `m`.
/// The message ids a batch response reports as failed, in order.
fn failed_ids(r: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<&str> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

fn batch_of(id: &str, m: &ReconcileMessage) -> SqsEvent {
    let mut r = SqsMessage::default();
    r.message_id = Some(id.to_owned());
    r.body = Some(m.to_body());
    let mut event = SqsEvent::default();
    event.records.push(r);
    event
}

/// The retry decision is the error kind's: an `INTERNAL` failure is recorded in the
/// overlay's status and acknowledged (no batch item failure, so SQS deletes it), an
/// `UNAVAILABLE` one is a batch item failure (SQS delivers it again).
#[tokio::test]
async fn handler_acknowledges_internal_failures_and_redelivers_unavailable_ones() {
    use flotilla_core::error::Error;
    let env = env().await;
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    let internal = FailingConnector(Error::internal("injected bug"));
    let r = handle_batch(&env.state, &internal, batch_of("m-internal", &current)).await;
    assert!(
        r.batch_item_failures.is_empty(),
        "an internal failure is acknowledged: {r:?}"
    );
    let run = last_run(&env).await;
    assert_eq!(run["outcome"], "FAILED", "{run}");
    assert_eq!(run["error"]["code"], "INTERNAL", "{run}");
    assert_eq!(run["error"]["retryable"], false, "{run}");
    assert_eq!(run["consecutive_failures"], 1, "{run}");

    let unavailable = FailingConnector(Error::unavailable("injected outage"));
    let r = handle_batch(
        &env.state,
        &unavailable,
        batch_of("m-unavailable", &current),
    )
    .await;
    let ids = failed_ids(&r);
    assert_eq!(ids, vec!["m-unavailable"], "redelivered");
    let run = last_run(&env).await;
    assert_eq!(run["error"]["code"], "UNAVAILABLE", "{run}");
    assert_eq!(run["error"]["retryable"], true, "{run}");
    assert_eq!(run["consecutive_failures"], 2, "{run}");

    // An explicit retryable flag on the error wins over its kind.
    let forced = FailingConnector(Error::internal("x").with_retryable(true));
    let r = handle_batch(&env.state, &forced, batch_of("m-forced", &current)).await;
    assert_eq!(r.batch_item_failures.len(), 1, "{r:?}");
    assert_eq!(
        relation_count(&env).await,
        0,
        "a failed run publishes nothing"
    );
}

#[tokio::test]
async fn local_worker_redelivers_failures_and_dead_letters_after_max_receives() {
    use flotilla_runtime::queue::{ChannelQueue, DeliveryResult, WorkerOptions, handle_delivery};
    let env = env().await;
    let (queue, mut rx) = ChannelQueue::new();
    let opts = WorkerOptions {
        max_receives: 2,
        retry_delay: std::time::Duration::ZERO,
        ..WorkerOptions::default()
    };
    // The scheduler pass queues the due overlay once, however often it runs.
    assert_eq!(schedule_once(&env.state, &queue).await.expect("pass"), 1);
    assert_eq!(schedule_once(&env.state, &queue).await.expect("pass"), 1);
    let d = rx.recv().await.expect("delivery");
    assert!(
        rx.try_recv().is_err(),
        "an already queued message is not queued twice"
    );
    // Upstream down: redelivered once, then dead-lettered.
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
        ));
    assert_eq!(
        handle_delivery(&env.state, &AdapterConnector, &queue, d, &opts).await,
        DeliveryResult::Redelivering
    );
    let d = rx.recv().await.expect("redelivery");
    assert_eq!(d.receives, 1);
    assert_eq!(
        handle_delivery(&env.state, &AdapterConnector, &queue, d, &opts).await,
        DeliveryResult::DeadLettered
    );
    // Healthy again. The failed run is recorded, so the scheduler waits for the next
    // interval (or a change) rather than enqueueing it at once; a message sent now runs.
    env.fx.clear_faults();
    assert_eq!(
        schedule_once(&env.state, &queue).await.expect("pass"),
        0,
        "a recorded failure is not due again before its interval"
    );
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    flotilla_runtime::queue::ReconcileQueue::send(&queue, &[current.into()])
        .await
        .expect("send");
    let d = rx.recv().await.expect("delivery");
    assert_eq!(
        handle_delivery(&env.state, &AdapterConnector, &queue, d, &opts).await,
        DeliveryResult::Done
    );
    assert_eq!(relation_count(&env).await, 4);
    assert_eq!(
        schedule_once(&env.state, &queue).await.expect("pass"),
        0,
        "ran just now"
    );
}

/// Captures the body of every request the SQS client transmits.
#[derive(Debug, Default, Clone)]
struct SentBodies(Arc<std::sync::Mutex<Vec<String>>>);

impl aws_sdk_sqs::config::Intercept for SentBodies {
    fn name(&self) -> &'static str {
        "sent-bodies"
    }
    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        if let Some(b) = ctx.request().body().bytes() {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(String::from_utf8_lossy(b).into_owned());
        }
        Ok(())
    }
}

/// Trace propagation through SQS: a scheduler pass inside a trace context sends each message
/// with that header as its `AWSTraceHeader` system attribute, which the reconciler's event
/// source mapping delivers as the record attribute `AWSTraceHeader`. The evidence is the
/// `SendMessageBatch` request itself: moto accepts the attribute on a batch but does not
/// store it (its batch path drops system attributes), so a receive from moto cannot show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_messages_carry_the_trace_header_to_sqs() {
    use flotilla_telemetry::trace::{TraceContext, scope};
    let env = env().await;
    let sent = SentBodies::default();
    let client = aws_sdk_sqs::Client::from_conf(
        sqs()
            .config()
            .to_builder()
            .interceptor(sent.clone())
            .build(),
    );
    let (url, _dlq) = queues(&client, 3).await;
    sent.0.lock().expect("lock").clear();
    let header = "Root=1-6650e0a1-dddddddddddddddddddddddd;Parent=4444444444444444;Sampled=1";
    let queue = SqsQueue::new(client.clone(), url.clone());
    let n = scope(
        TraceContext::from_header(Some(header)),
        schedule_once(&env.state, &queue),
    )
    .await
    .expect("pass");
    assert_eq!(n, 1);
    let bodies = sent.0.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let request: Value = serde_json::from_str(&bodies[0]).expect("JSON protocol body");
    let entries = request["Entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0]["MessageSystemAttributes"]["AWSTraceHeader"],
        json!({"DataType": "String", "StringValue": header})
    );
    // The message is on the queue (moto accepted the request).
    let got = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .expect("receive");
    assert_eq!(got.messages().len(), 1);

    // Without a trace context nothing is invented.
    sent.0.lock().expect("lock").clear();
    let (url2, _) = queues(&client, 3).await;
    sent.0.lock().expect("lock").clear();
    schedule_once(&env.state, &SqsQueue::new(client.clone(), url2))
        .await
        .expect("pass");
    let bodies = sent.0.lock().expect("lock").clone();
    assert!(!bodies[0].contains("AWSTraceHeader"), "{bodies:?}");
}

async fn last_run(env: &Env) -> Value {
    let req = Request::builder()
        .uri(format!("/v1/accounts/acme/overlays/{}", env.overlay))
        .header("authorization", format!("Bearer {ACME}"))
        .body(Body::empty())
        .expect("request");
    let resp = flotilla_core::router(env.state.clone())
        .oneshot(req)
        .await
        .expect("infallible");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let v: Value = serde_json::from_slice(&bytes).expect("json");
    v["last_reconcile"].clone()
}

/// Polls until the queue answers empty twice (or 20 rounds).
async fn drain(env: &Env, client: &aws_sdk_sqs::Client, url: &str) {
    let (mut rounds, mut empty) = (0, 0);
    while empty < 2 && rounds < 20 {
        rounds += 1;
        if poll_once(env, client, url).await == 0 {
            empty += 1;
        }
    }
}

/// Receives up to ten bodies waiting in a queue (they stay invisible for its timeout).
async fn bodies(client: &aws_sdk_sqs::Client, dlq: &str) -> Vec<String> {
    let dead = client
        .receive_message()
        .queue_url(dlq)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("dlq receive");
    dead.messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_permanent_failures_are_recorded_and_acknowledged_transient_ones_reach_the_dlq() {
    let env = env().await;
    let client = sqs();
    let (url, dlq) = queues(&client, 2).await;
    let current = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    // Authentication refused: permanent. Recorded, acknowledged, never dead-lettered.
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Unauthorized,
        ));
    send_raw(&client, &url, &current.to_body()).await;
    drain(&env, &client, &url).await;
    assert!(bodies(&client, &dlq).await.is_empty(), "not dead-lettered");
    let run = last_run(&env).await;
    assert_eq!(run["outcome"], "FAILED", "{run}");
    assert_eq!(run["error"]["code"], "UPSTREAM_AUTHENTICATION");
    assert_eq!(run["error"]["retryable"], false);
    assert_eq!(
        run["consecutive_failures"], 1,
        "handled once, not redelivered"
    );
    // Upstream unavailable: transient. Redelivered until maxReceiveCount, then the DLQ.
    env.fx.clear_faults();
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
        ));
    send_raw(&client, &url, &current.to_body()).await;
    drain(&env, &client, &url).await;
    assert_eq!(bodies(&client, &dlq).await, vec![current.to_body()]);
    let run = last_run(&env).await;
    assert_eq!(run["error"]["code"], "UPSTREAM_UNAVAILABLE", "{run}");
    assert_eq!(
        run["consecutive_failures"], 3,
        "two deliveries of the transient failure"
    );
    assert_eq!(
        relation_count(&env).await,
        0,
        "a failed run publishes nothing"
    );
}
