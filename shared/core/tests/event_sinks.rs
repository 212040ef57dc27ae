//! Webhook sinks of change events (`service::event_sinks`, `{A}/event-sinks`): a receiving
//! HTTP server on 127.0.0.1 records every delivery. Events arrive in order, signed, with
//! their ids; a receiver that fails gets every event in order once it recovers (duplicates
//! only of the same event id); a crash between the POST and the position write delivers
//! again; repeated failures mark the sink `FAILING` until a success; two deliverers never
//! both advance a sink; URLs follow the upstream address policy; the secret is never
//! answered; only admins manage sinks. The deliverer is driven step by step under a manual
//! clock: nothing sleeps.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::http::{HeaderMap, Method, StatusCode};
use flotilla_core::clock::{Clock, ManualClock};
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::{DynMetastore, Op, SharedStore};
use flotilla_services::service::event_sinks::{
    self, Deliverer, FAILING_AFTER, HttpTransport, MAX_BACKOFF_MS, MAX_SINKS_PER_ACCOUNT,
    PostFailure, SinkTransport,
};
use flotilla_services::service::events;
use serde_json::{Value, json};
use support::{ACME, Creds, Harness, OPERATOR};

const A: &str = "/v1/accounts/acme";
const SECRET: &str = "s3cr3t-signing-key-0001";
const BOB: &str = "sinks-bob-token-001";

/// One delivery as the receiver saw it.
#[derive(Clone, Debug)]
struct Delivery {
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Delivery {
    fn event(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().unwrap()
    }
}

/// A receiver on 127.0.0.1: records every request and answers `500` to the first
/// `fail_next` of them, `200` afterwards (or `status` while it is set).
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<Delivery>>>,
    fail_next: Arc<AtomicUsize>,
    status: Arc<Mutex<Option<u16>>>,
}

impl Receiver {
    async fn start() -> (Self, String) {
        let r = Receiver::default();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let r = r.clone();
                move |headers: HeaderMap, body: axum::body::Bytes| {
                    let r = r.clone();
                    async move {
                        r.seen.lock().unwrap().push(Delivery {
                            headers,
                            body: body.to_vec(),
                        });
                        let fail = r
                            .fail_next
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        let status = match *r.status.lock().unwrap() {
                            Some(s) => s,
                            None if fail => 500,
                            None => 200,
                        };
                        StatusCode::from_u16(status).unwrap()
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (r, format!("http://{addr}/hook"))
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.seen.lock().unwrap().clone()
    }

    fn ids(&self) -> Vec<String> {
        self.deliveries()
            .iter()
            .map(|d| d.header("x-flotilla-event-id").to_owned())
            .collect()
    }
}

struct Env {
    h: Harness,
    clock: ManualClock,
    faults: Arc<FaultInjectingMetastore<SharedStore>>,
    creds: Creds,
    _dir: tempfile::TempDir,
}

/// Account `acme` (its unnamed token is an admin; bob is a named principal without grants)
/// on a host that delivers sinks, in local mode (loopback receivers allowed) unless `strict`.
async fn env_with(strict: bool, delivers: bool) -> Env {
    let mut tokens = support::tokens();
    tokens.add_named(BOB, vec!["acme".into()], "bob", vec![]);
    let (store, dir) = support::redb_store();
    let faults = Arc::new(FaultInjectingMetastore::new(SharedStore(store)));
    let clock = ManualClock::new(1_800_000_000_000);
    let creds = Creds::new();
    let config = Config {
        allow_insecure_upstreams: !strict,
        event_sinks: delivers,
        ..Config::default()
    };
    let state = AppState::new(
        faults.clone() as DynMetastore,
        Arc::new(clock.clone()),
        Arc::new(tokens),
        config,
    )
    .with_credentials(creds.dyn_store());
    let h = Harness::over(state);
    h.account("acme").await;
    Env {
        h,
        clock,
        faults,
        creds,
        _dir: dir,
    }
}

async fn env() -> Env {
    env_with(false, true).await
}

/// [`env`] with a sink to a fresh receiver and `n` changes in catalog `lake`: the receiver,
/// the sink id and the ids of the events, in order.
async fn with_changes(n: usize) -> (Env, Receiver, String, Vec<String>) {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let id = e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned();
    e.changes("lake", n).await;
    let expected = ids_of(&e.events().await);
    (e, rx, id, expected)
}

impl Env {
    fn deliverer(&self) -> Deliverer {
        let transport = HttpTransport::new(&self.h.state).unwrap();
        Deliverer::new(self.h.state.clone(), Arc::new(transport))
    }

    /// `POST /v1/admin/sweep-credentials` for acme, reclaiming at any age.
    async fn sweep(&self) {
        let r = self
            .h
            .post(
                "/v1/admin/sweep-credentials",
                OPERATOR,
                json!({"account_id": "acme", "min_age_secs": 0}),
            )
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
    }

    /// [`Env::create`] with an `Idempotency-Key`.
    async fn create_with_key(&self, body: Value, key: &str) -> support::Resp {
        self.h
            .call(
                Method::POST,
                &format!("{A}/event-sinks"),
                Some(ACME),
                Some(body),
                &[("idempotency-key", key)],
            )
            .await
    }

    /// `POST {A}/event-sinks` as the admin, answered as is.
    async fn create(&self, body: Value) -> support::Resp {
        self.h.post(&format!("{A}/event-sinks"), ACME, body).await
    }

    async fn sink(&self, url: &str, types: &[&str]) -> Value {
        let r = self
            .create(json!({"url": url, "secret": SECRET, "types": types}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body
    }

    async fn show(&self, id: &str) -> Value {
        let r = self.h.get(&format!("{A}/event-sinks/{id}"), ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body
    }

    /// Makes `n` namespaces in a new catalog (one event each) and answers the catalog id.
    async fn changes(&self, catalog: &str, n: usize) -> String {
        let c = self.h.catalog("acme", ACME, catalog).await;
        for i in 0..n {
            self.h
                .namespace("acme", ACME, &c, &[&format!("ns{i}")])
                .await;
        }
        c
    }

    /// The events `GET {A}/events` answers, in the merged order.
    async fn events(&self) -> Vec<Value> {
        let r = self
            .h
            .get(&format!("{A}/events?page_size=1000"), ACME)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body["items"].as_array().unwrap().clone()
    }

    /// Steps the deliverer, moving the clock past any backoff, until `done` or `max` steps.
    async fn drive(&self, d: &Deliverer, max: usize, done: impl Fn() -> bool) {
        for _ in 0..max {
            if done() {
                return;
            }
            d.step().await.unwrap();
            self.clock.advance_ms(MAX_BACKOFF_MS);
        }
    }
}

fn ids_of(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Removes consecutive repeats (an at-least-once redelivery of the same event).
fn dedup(ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in ids {
        if out.last() != Some(id) {
            out.push(id.clone());
        }
    }
    out
}

/// The delivery's signature is the body's HMAC under the sink's secret.
fn assert_signed(d: &Delivery) {
    assert!(event_sinks::verify_signature(
        SECRET.as_bytes(),
        &d.body,
        d.header("x-flotilla-signature")
    ));
}

fn assert_no_secret(v: &Value) {
    assert!(
        !v.to_string().contains(SECRET),
        "the secret was answered: {v}"
    );
}

#[tokio::test]
async fn events_arrive_in_order_signed_with_their_ids_and_the_sink_shows_its_position() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let sink = e.sink(&url, &[]).await;
    assert_no_secret(&sink);
    let id = sink["id"].as_str().unwrap();
    let c1 = e.changes("lake", 3).await;
    let c2 = e.changes("pond", 2).await;
    let expected = e.events().await;
    // Five namespace creates in the catalogs' logs, two catalog creates in the account's.
    assert_eq!(expected.len(), 7);

    let report = e.deliverer().step().await.unwrap();
    assert_eq!(report.delivered, 7, "{report:?}");
    let got = rx.deliveries();
    assert_eq!(rx.ids(), ids_of(&expected), "in the events' merged order");
    for (d, want) in got.iter().zip(&expected) {
        // The body is the event as `GET {A}/events` answers it.
        assert_eq!(&d.event(), want);
        assert_eq!(d.header("x-flotilla-event-id"), want["event_id"]);
        assert_eq!(d.header("x-flotilla-sink-id"), id);
        assert_eq!(d.header("content-type"), "application/json");
        let sig = d.header("x-flotilla-signature");
        assert!(event_sinks::verify_signature(
            SECRET.as_bytes(),
            &d.body,
            sig
        ));
        assert!(!event_sinks::verify_signature(
            b"another-secret-000",
            &d.body,
            sig
        ));
        assert!(d.header("x-flotilla-timestamp").parse::<i64>().is_ok());
    }
    // Per catalog, sequences increase.
    for c in [&c1, &c2] {
        let seqs: Vec<u64> = got
            .iter()
            .map(Delivery::event)
            .filter(|ev| ev["operation"]["catalog_id"] == json!(c))
            .map(|ev| ev["sequence"].as_u64().unwrap())
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }
    let shown = e.show(id).await;
    assert_eq!(shown["delivered_count"], 7);
    assert_eq!(shown["delivered"][&c1], 3);
    assert_eq!(shown["delivered"][&c2], 2);
    let account_log = events::Log::Account("acme".into());
    assert_eq!(shown["delivered"][account_log.position_key()], 2);
    assert_eq!(shown["state"], "ACTIVE");
    assert_eq!(shown["last_delivered_event_id"], expected[6]["event_id"]);
    assert_no_secret(&shown);
    let listed = e.h.get(&format!("{A}/event-sinks"), ACME).await;
    assert_eq!(listed.body["items"].as_array().unwrap().len(), 1);
    assert_no_secret(&listed.body);

    // Caught up: the next step sends nothing; a new change is sent alone.
    e.deliverer().step().await.unwrap();
    assert_eq!(rx.deliveries().len(), 7);
    e.h.namespace("acme", ACME, &c1, &["later"]).await;
    e.deliverer().step().await.unwrap();
    assert_eq!(rx.deliveries().len(), 8);
    assert_eq!(
        rx.deliveries()[7].event()["operation"]["namespace"],
        json!(["later"])
    );
}

#[tokio::test]
async fn the_types_filter_sends_only_those_types_and_moves_past_the_rest() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let id = e.sink(&url, &["drop-namespace"]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = e.changes("lake", 2).await;
    let r =
        e.h.delete(&format!("{A}/catalogs/{c}/namespaces/ns1"), ACME)
            .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    e.deliverer().step().await.unwrap();
    let got = rx.deliveries();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event()["operation"]["type"], "drop-namespace");
    // The position is past the creates the filter skipped.
    assert_eq!(e.show(&id).await["delivered"][&c], 3);
    let bad = e
        .create(json!({"url": url, "secret": SECRET, "types": ["no-such-type"]}))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{:?}", bad.body);
}

#[tokio::test]
async fn a_receiver_failing_then_recovering_gets_every_event_in_order() {
    let (e, rx, _, expected) = with_changes(4).await;
    rx.fail_next.store(3, Ordering::SeqCst);
    let d = e.deliverer();
    // A failed delivery waits out its backoff: a step before it sends nothing.
    d.step().await.unwrap();
    assert_eq!(rx.deliveries().len(), 1);
    d.step().await.unwrap();
    assert_eq!(rx.deliveries().len(), 1, "retried before its backoff");
    e.drive(&d, 20, || rx.ids().len() >= expected.len() + 3)
        .await;
    let ids = rx.ids();
    // The first event was tried four times, then every event once, in order.
    assert_eq!(ids.len(), expected.len() + 3, "{ids:?}");
    assert_eq!(&ids[..4], &vec![expected[0].clone(); 4][..]);
    assert_eq!(dedup(&ids), expected);
}

#[tokio::test]
async fn a_crash_between_the_post_and_the_position_write_delivers_again() {
    let (e, rx, id, expected) = with_changes(3).await;
    // The write that records the second delivery fails (nothing written).
    let sink_key = keys::event_sink("acme", &id);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    e.faults.fail_when(Fault::FailBeforeApply, 1, move |tx| {
        let writes_sink = tx
            .ops
            .iter()
            .any(|op| matches!(op, Op::Put { .. }) && op.key() == &sink_key);
        writes_sink && counter.fetch_add(1, Ordering::SeqCst) == 1
    });
    let d = e.deliverer();
    d.step().await.unwrap();
    assert_eq!(rx.ids(), expected[..2].to_vec());
    assert_eq!(e.show(&id).await["delivered_count"], 1);
    d.step().await.unwrap();
    let ids = rx.ids();
    assert_eq!(
        ids,
        [&expected[..2], &expected[1..]].concat(),
        "the second event again, with the same id"
    );
    assert_eq!(e.show(&id).await["delivered_count"], expected.len());
}

#[tokio::test]
async fn repeated_failures_mark_the_sink_failing_until_a_success_clears_it() {
    let (e, rx, id, expected) = with_changes(2).await;
    *rx.status.lock().unwrap() = Some(503);
    let d = e.deliverer();
    let started = e.clock.now_ms();
    for n in 1..=FAILING_AFTER {
        d.step().await.unwrap();
        let s = e.show(&id).await;
        assert_eq!(s["consecutive_failures"], n);
        assert_eq!(
            s["state"],
            if n < FAILING_AFTER {
                "ACTIVE"
            } else {
                "FAILING"
            },
            "{s}"
        );
        e.clock.advance_ms(MAX_BACKOFF_MS);
    }
    let s = e.show(&id).await;
    assert_eq!(s["last_error"]["code"], "http_status");
    assert_eq!(s["last_error"]["status"], 503);
    assert!(s["failing_since_ms"].as_i64().unwrap() >= started);
    assert_eq!(s["delivered_count"], 0);
    // The backlog is kept, and the retry interval is capped.
    let wait = s["next_attempt_ms"].as_i64().unwrap() - s["last_error"]["at_ms"].as_i64().unwrap();
    assert!(wait <= MAX_BACKOFF_MS, "{wait}");
    *rx.status.lock().unwrap() = None;
    d.step().await.unwrap();
    let s = e.show(&id).await;
    assert_eq!(s["state"], "ACTIVE", "{s}");
    assert_eq!(s["consecutive_failures"], 0);
    assert_eq!(s["failing_since_ms"], Value::Null);
    assert_eq!(s["delivered_count"], expected.len());
    assert_eq!(dedup(&rx.ids()), expected);
}

/// Host A's POST runs host B's whole step before answering: B delivers and advances the
/// sink, so A's write, conditional on the version it read, fails and A stops there.
struct Racing {
    inner: HttpTransport,
    other: Mutex<Option<Deliverer>>,
}

#[async_trait]
impl SinkTransport for Racing {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
    ) -> Result<u16, PostFailure> {
        let other = self.other.lock().unwrap().take();
        if let Some(b) = other {
            b.step().await.unwrap();
        }
        self.inner.post(url, headers, body).await
    }
}

#[tokio::test]
async fn two_deliverers_never_both_advance_a_sink() {
    let (e, rx, id, expected) = with_changes(3).await;
    let a = Deliverer::new(
        e.h.state.clone(),
        Arc::new(Racing {
            inner: HttpTransport::new(&e.h.state).unwrap(),
            other: Mutex::new(Some(e.deliverer())),
        }),
    );
    let report = a.step().await.unwrap();
    assert_eq!(report.lost_races, 1, "{report:?}");
    assert_eq!(report.delivered, 0);
    // B sent all (the catalog create and three namespace creates); A sent the first again (at least once, same id) and did not move
    // the position back.
    assert_eq!(
        rx.ids(),
        [expected.clone(), vec![expected[0].clone()]].concat()
    );
    let s = e.show(&id).await;
    assert_eq!(s["delivered_count"], expected.len());
    assert_eq!(s["last_delivered_event_id"], expected[expected.len() - 1]);
}

#[tokio::test]
async fn urls_the_address_policy_refuses_answer_400_and_create_nothing() {
    let strict = env_with(true, true).await;
    let local = env_with(false, true).await;
    let cases = [
        (&strict, "http://127.0.0.1:9/hook"),
        (&strict, "https://10.1.2.3/hook"),
        (&strict, "https://192.168.0.1/hook"),
        (&strict, "https://[::1]/hook"),
        (&local, "https://169.254.169.254/latest/meta-data"),
        (&local, "http://169.254.169.254/"),
        (&local, "https://[fd00:ec2::254]/"),
        (&local, "http://0.0.0.0:80/"),
        (&local, "file:///etc/passwd"),
        (&local, "https://user:pass@example.com/hook"),
        (&local, "not a url"),
    ];
    for (e, url) in cases {
        let r = e.create(json!({"url": url, "secret": SECRET})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{url}: {:?}", r.body);
        assert_no_secret(&r.body);
    }
    for e in [&strict, &local] {
        let listed = e.h.get(&format!("{A}/event-sinks"), ACME).await;
        assert_eq!(listed.body["items"], json!([]));
        assert!(e.creds.all("acme").await.is_empty(), "a secret was kept");
    }
}

#[tokio::test]
async fn bad_secrets_are_refused_without_being_echoed() {
    let e = env().await;
    let (_rx, url) = Receiver::start().await;
    for secret in [
        json!("short"),
        json!(12345678901234567890u64),
        json!(null),
        json!(format!("{SECRET}\n")),
    ] {
        let r = e.create(json!({"url": url, "secret": secret})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{secret}: {:?}", r.body);
        assert!(!r.body.to_string().contains("short"), "{:?}", r.body);
        assert_no_secret(&r.body);
    }
    let long = "x".repeat(event_sinks::MAX_SECRET_LEN + 1);
    let r = e.create(json!({"url": url, "secret": long})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(e.creds.all("acme").await.is_empty());
}

#[tokio::test]
async fn only_admins_manage_sinks() {
    let e = env().await;
    let (_rx, url) = Receiver::start().await;
    let id = e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned();
    let body = json!({"url": url, "secret": SECRET});
    for (method, path, body) in [
        (Method::POST, format!("{A}/event-sinks"), Some(body)),
        (Method::GET, format!("{A}/event-sinks"), None),
        (Method::GET, format!("{A}/event-sinks/{id}"), None),
        (Method::DELETE, format!("{A}/event-sinks/{id}"), None),
    ] {
        let r = e.h.call(method.clone(), &path, Some(BOB), body, &[]).await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {:?}",
            r.body
        );
    }
    let listed = e.h.get(&format!("{A}/event-sinks"), ACME).await;
    assert_eq!(listed.body["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_host_without_delivery_refuses_to_create_a_sink() {
    let e = env_with(false, false).await;
    let (_rx, url) = Receiver::start().await;
    let r = e.create(json!({"url": url, "secret": SECRET})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "FAILED_PRECONDITION");
    assert!(e.creds.all("acme").await.is_empty());
}

#[tokio::test]
async fn an_account_has_a_bounded_number_of_sinks_and_delete_frees_a_place() {
    let e = env().await;
    let (_rx, url) = Receiver::start().await;
    let mut ids = Vec::new();
    for _ in 0..MAX_SINKS_PER_ACCOUNT {
        ids.push(e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned());
    }
    let over = e.create(json!({"url": url, "secret": SECRET})).await;
    assert_eq!(over.status, StatusCode::CONFLICT, "{:?}", over.body);
    assert_eq!(e.creds.all("acme").await.len(), ids.len());
    let r =
        e.h.delete(&format!("{A}/event-sinks/{}", ids[0]), ACME)
            .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        e.h.get(&format!("{A}/event-sinks/{}", ids[0]), ACME)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        e.creds.all("acme").await.len(),
        ids.len() - 1,
        "its secret went"
    );
    e.sink(&url, &[]).await;
}

#[tokio::test]
async fn a_deleted_sink_gets_nothing_more() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let id = e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned();
    let c = e.changes("lake", 1).await;
    e.deliverer().step().await.unwrap();
    // The catalog's create (the account's log) and its namespace's.
    assert_eq!(rx.deliveries().len(), 2);
    let r = e.h.delete(&format!("{A}/event-sinks/{id}"), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    e.h.namespace("acme", ACME, &c, &["more"]).await;
    let report = e.deliverer().step().await.unwrap();
    assert_eq!(report.sinks, 0);
    assert_eq!(rx.deliveries().len(), 2);
}

#[tokio::test]
async fn an_idempotent_create_answers_the_same_sink_and_stores_one_secret() {
    let e = env().await;
    let (_rx, url) = Receiver::start().await;
    let body = json!({"url": url, "secret": SECRET});
    let send = || e.create_with_key(body.clone(), "sink-create-1");
    let first = send().await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    let again = send().await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.body["id"], first.body["id"]);
    assert_no_secret(&again.body);
    let listed = e.h.get(&format!("{A}/event-sinks"), ACME).await;
    assert_eq!(listed.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(e.creds.all("acme").await.len(), 1);
}

#[tokio::test]
async fn the_credential_sweep_keeps_a_sinks_secret_and_reclaims_an_orphan() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let id = e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned();
    // An orphan: a sink secret whose sink is gone (a crash before publication).
    let orphan =
        flotilla_secrets::SecretRef::new("acme", keys::event_sink_secret_owner("gone"), 1).unwrap();
    {
        use flotilla_secrets::CredentialStore;
        let bytes =
            flotilla_secrets::SecretBytes::new(br#"{"secret": "orphan-orphan-orphan"}"#.to_vec())
                .unwrap();
        e.creds
            .store
            .inner()
            .put_if_absent(&orphan, &bytes)
            .await
            .unwrap();
    }
    e.sweep().await;
    let left = e.creds.all("acme").await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].integration_id, keys::event_sink_secret_owner(&id));
    // Still signs deliveries.
    e.changes("lake", 1).await;
    e.deliverer().step().await.unwrap();
    assert_signed(&rx.deliveries()[0]);
}

#[tokio::test]
async fn a_sink_that_cannot_read_its_events_shows_why() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    let id = e.sink(&url, &[]).await["id"].as_str().unwrap().to_owned();
    // One catalog more than the account-wide merge reads.
    for i in 0..=flotilla_services::service::events::MAX_MERGED_CATALOGS {
        e.h.catalog("acme", ACME, &format!("c{i}")).await;
    }
    e.deliverer().step().await.unwrap();
    let s = e.show(&id).await;
    assert_eq!(s["last_error"]["code"], "events_unreadable", "{s}");
    assert!(
        s["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("catalogs"),
        "{s}"
    );
    assert_eq!(s["consecutive_failures"], 1);
    assert!(rx.deliveries().is_empty());
}

#[tokio::test]
async fn an_account_delete_takes_its_sinks_and_their_secrets() {
    let (e, rx, _, _) = with_changes(1).await;
    let r = e.h.delete("/v1/accounts/acme", OPERATOR).await;
    assert!(r.status.is_success(), "{:?}", r.body);
    assert!(
        e.creds.all("acme").await.is_empty(),
        "the sink's secret went"
    );
    // The deployment-wide index entry outlived the partition; the deliverer drops it.
    let index = || async {
        flotilla_metastore::query_all(
            &*e.faults,
            flotilla_metastore::Query::new(
                keys::SYSTEM_PK,
                keys::EVENT_SINK_INDEX_PREFIX,
                flotilla_metastore::Consistency::Strong,
            ),
        )
        .await
        .unwrap()
        .len()
    };
    assert_eq!(index().await, 1);
    let report = e.deliverer().step().await.unwrap();
    assert_eq!(report.sinks, 0);
    assert_eq!(index().await, 0);
    assert!(rx.deliveries().is_empty());
}

#[tokio::test]
async fn a_create_retried_after_its_publication_failed_publishes_a_fresh_secret_generation() {
    let e = env().await;
    let (rx, url) = Receiver::start().await;
    // Every publication attempt of the first request fails before applying: it gives up
    // (`503`) with its secret prepared as generation 1, which it keeps (it cannot know).
    e.faults.fail_when(
        Fault::FailBeforeApply,
        flotilla_services::service::MAX_ATTEMPTS,
        |tx| {
            tx.ops.iter().any(|op| {
                op.key().pk == keys::account_pk("acme")
                    && op.key().sk.starts_with(keys::EVENT_SINK_PREFIX)
            })
        },
    );
    let send = || e.create_with_key(json!({"url": url, "secret": SECRET}), "sink-retry-1");
    let first = send().await;
    assert_eq!(
        first.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        first.body
    );
    assert_eq!(e.creds.all("acme").await.len(), 1);
    // The retry resumes the same sink id and publishes a generation of its own.
    let again = send().await;
    assert_eq!(again.status, StatusCode::CREATED, "{:?}", again.body);
    let owner = keys::event_sink_secret_owner(again.body["id"].as_str().unwrap());
    let gens: Vec<u64> = e.creds.generations("acme", &owner).await;
    assert_eq!(gens, vec![1, 2]);
    // The sweep reclaims the abandoned generation and keeps the published one.
    e.sweep().await;
    assert_eq!(e.creds.generations("acme", &owner).await, vec![2]);
    e.changes("lake", 1).await;
    e.deliverer().step().await.unwrap();
    assert_signed(&rx.deliveries()[0]);
}
