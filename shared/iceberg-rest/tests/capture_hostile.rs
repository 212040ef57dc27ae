//! Capture against tables that never finish (`docs/reliability.md`, "Poison tables are
//! quarantined" and "Capture has time budgets").
//!
//! Poison tables: a table whose capture takes the process down (a decoder that allocates
//! without bound, an abort) must not be retried forever. The attack: a fault seam makes the
//! capture of one table never return once its attempt marker is durable, and the job's task
//! is aborted there (the process dying: nothing after that point runs); then capture runs
//! again on the same metastore, as the next scheduled refresh or the queue's redelivery
//! would.
//!
//! Time budgets: a job whose clock (injected) runs past its budget stops starting tables and
//! the next run resumes; a table whose upstream object never finishes (a storage endpoint
//! that accepts and never answers) fails at its budget (an injected timer the test fires once
//! the request is parked) while the other tables capture.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::reconcile::capture::attempt::{self, FaultHook, MAX_UNFINISHED_ATTEMPTS};
use flotilla_core::reconcile::capture::{self, CaptureOptions, CaptureSummary};
use flotilla_core::state::AppState;
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::Consistency;
use flotilla_testkit::iceberg_fixture::IcebergFixture;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const OPERATOR: &str = "poison-operator-token";
const ACME: &str = "poison-acme-token-00001";

struct Env {
    state: AppState,
    endpoint: String,
    http: reqwest::Client,
    work: tokio::sync::Mutex<flotilla_runtime::local::LocalQueue>,
    upstream: IcebergFixture,
    overlay: String,
    lake: String,
    prefix: String,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn call(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let r = self
            .http
            .request(method, format!("{}{path}", self.endpoint))
            .bearer_auth(ACME)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn reconcile(&self) {
        let (s, v) = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/accounts/acme/overlays/{}/reconcile", self.overlay),
            )
            .await;
        assert_eq!(s, 200, "{v}");
    }

    async fn relation_id(&self, name: &str) -> String {
        let ns = flotilla_domain::names::NamespacePath::new(vec!["sales".into()]).unwrap();
        let key = flotilla_domain::keys::relation(&self.lake, &ns, name);
        let v: Value = self
            .state
            .store
            .get(&key, Consistency::Strong)
            .await
            .unwrap()
            .unwrap()
            .json()
            .unwrap();
        v["id"].as_str().unwrap().to_owned()
    }

    async fn marker(&self, name: &str) -> Option<attempt::CaptureAttempt> {
        attempt::marker(
            self.state.store.as_ref(),
            &self.lake,
            &self.relation_id(name).await,
        )
        .await
        .unwrap()
        .map(|m| m.value)
    }

    async fn validation(&self, name: &str) -> Value {
        let (s, v) = self
            .call(
                reqwest::Method::GET,
                &format!(
                    "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables/{name}/validation",
                    self.lake
                ),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }

    async fn load_status(&self, name: &str) -> u16 {
        self.call(
            reqwest::Method::GET,
            &format!("/iceberg/v1/{}/namespaces/sales/tables/{name}", self.prefix),
        )
        .await
        .0
    }

    /// One capture job with the fault seam armed on `poison`: a capture of `poison` never
    /// returns once its marker is durable, and the job's task is aborted there. Answers
    /// whether the job reached `poison` (and was killed) or finished (and its summary).
    async fn run_with_poison(&self, opts: CaptureOptions) -> Result<CaptureSummary, Killed> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<String>>();
        let reads = Arc::new(AtomicUsize::new(0));
        let seen = reads.clone();
        let hook = FaultHook(Arc::new(move |path: &[String]| {
            let poison = path.last().is_some_and(|n| n == "poison");
            if poison {
                seen.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(path.to_vec());
            }
            Box::pin(async move {
                if poison {
                    std::future::pending::<()>().await;
                }
            })
        }));
        let state = self.state.clone();
        let overlay = self.overlay.clone();
        let opts = CaptureOptions {
            fault: Some(hook),
            ..opts
        };
        let mut job = tokio::spawn(async move {
            capture::capture(&state, &AdapterConnector, "acme", &overlay, &opts).await
        });
        tokio::select! {
            biased;
            Some(_) = rx.recv() => {
                // The process dies here: the task is dropped mid-table.
                job.abort();
                assert!(job.await.unwrap_err().is_cancelled());
                Err(Killed)
            }
            r = &mut job => Ok(r.unwrap().expect("capture")),
        }
    }
}

#[derive(Debug)]
struct Killed;

async fn setup() -> Env {
    setup_with(|upstream| {
        // Captured in key order: `orders` before the poison table, `zeta` after it.
        for t in ["orders", "poison", "zeta"] {
            upstream.add_table(&["sales"], t);
        }
    })
    .await
}

/// The host, and an upstream whose namespace `sales` `tables` fills.
async fn setup_with(tables: impl FnOnce(&IcebergFixture)) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        serde_json::to_vec(&json!({"tokens": [{"token": ACME, "accounts": ["acme"]}]})).unwrap(),
    )
    .unwrap();
    let opts = flotilla_runtime::local::LocalOptions {
        data_dir: dir.path().join("data"),
        // The fixture upstream listens on loopback and keeps its tables in file://.
        allow_insecure_upstreams: true,
        bootstrap_token: Some(OPERATOR.to_owned()),
        tokens_file: Some(tokens),
        warehouse_root: None,
        upstream_files_root: Some(flotilla_testkit::upstream_files_root()),
    };
    let stack = flotilla_runtime::local::build(&opts).expect("local stack");
    let root = opts.warehouse_root().canonicalize().unwrap();
    let state = stack.state;
    let app = flotilla_iceberg_rest::router(
        state.clone(),
        IcebergConfig {
            local_warehouse_root: Some(root),
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let http = reqwest::Client::new();
    let endpoint = format!("http://{addr}");
    let post = |path: &str, token: &str, body: Value| {
        http.post(format!("{endpoint}{path}"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let r = post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = post(
        "/v1/accounts/acme/catalogs",
        ACME,
        json!({"display_name": "lake"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let lake = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    tables(&upstream);
    let r = post(
        "/v1/accounts/acme/integrations",
        ACME,
        json!({"display_name": "up", "type": "ICEBERG_REST", "uri": upstream.uri(),
            "authentication": {"type": "BEARER"}, "credentials": {"token": "upstream-token"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let integration = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = post(
        "/v1/accounts/acme/overlays",
        ACME,
        json!({"display_name": "imp", "integration_id": integration,
            "catalog_id": lake, "include_namespaces": [["sales"]]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let overlay = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cfg: Value = http
        .get(format!("{endpoint}/iceberg/v1/config?warehouse=acme/lake"))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    let env = Env {
        state,
        endpoint,
        http,
        work: tokio::sync::Mutex::new(stack.work),
        upstream,
        overlay,
        lake,
        prefix,
        _dir: dir,
    };
    env.reconcile().await;
    env
}

/// Kills the job at the poison table `MAX_UNFINISHED_ATTEMPTS` times, then runs a job that
/// must finish without reading the poison table again: it is quarantined, the rest captured.
async fn quarantine(env: &Env) -> CaptureSummary {
    for attempt in 1..=MAX_UNFINISHED_ATTEMPTS {
        let r = env.run_with_poison(CaptureOptions::default()).await;
        assert!(r.is_err(), "attempt {attempt} reached the poison table");
        let m = env.marker("poison").await.expect("the attempt is marked");
        assert_eq!(m.attempts, attempt, "{m:?}");
        assert_eq!(env.validation("poison").await["state"], "NOT_CAPTURED");
    }
    env.run_with_poison(CaptureOptions::default())
        .await
        .expect("the poison table is not read a third time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_whose_capture_never_finishes_is_quarantined_and_a_new_version_lifts_it() {
    let env = setup().await;
    let s = quarantine(&env).await;
    assert_eq!((s.quarantined, s.captured), (1, 2), "{s:?}");
    assert!(!s.has_retryable_failure(), "not redelivered: {s:?}");
    let f = &s.failed[..];
    assert!(
        matches!(f, [t] if t.code == Some("CAPTURE_QUARANTINED") && !t.retryable
            && t.path == ["sales", "poison"]),
        "{s:?}"
    );
    // The other tables of the job: captured and visible.
    for t in ["orders", "zeta"] {
        let v = env.validation(t).await;
        assert_eq!(
            (v["state"].as_str(), v["visible"].as_bool()),
            (Some("VALID"), Some(true)),
            "{t}: {v}"
        );
        assert_eq!(env.load_status(t).await, 200, "{t}");
    }
    // The poison table: shown as quarantined, listed among the errors, never served.
    let v = env.validation("poison").await;
    assert_eq!(v["state"], "QUARANTINED", "{v}");
    assert_eq!(v["visible"], false, "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("CAPTURE_QUARANTINED"),
        "{v}"
    );
    assert_eq!(
        v["validation_errors"][0]["code"], "CAPTURE_QUARANTINED",
        "{v}"
    );
    let (st, errs) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{}/validation-errors", env.lake),
        )
        .await;
    assert_eq!(st, 200);
    let items = errs["items"].as_array().unwrap();
    assert!(
        matches!(&items[..], [e] if e["code"] == "CAPTURE_QUARANTINED" && e["name"] == "poison"),
        "{errs}"
    );
    assert_eq!(env.load_status("poison").await, 404);

    // Later jobs at the same upstream version do not touch it (planned as current).
    let s = env
        .run_with_poison(CaptureOptions::default())
        .await
        .expect("not read again");
    assert_eq!((s.captured, s.unchanged), (0, 3), "{s:?}");

    // A new upstream version lifts the quarantine: read again, captured, visible.
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": false, "type": "long"}]});
    assert!(
        env.upstream
            .update_table_schema(&["sales"], "poison", schema)
    );
    env.reconcile().await;
    let s = capture::capture(
        &env.state,
        &AdapterConnector,
        "acme",
        &env.overlay,
        &CaptureOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.quarantined), (1, 0), "{s:?}");
    let v = env.validation("poison").await;
    assert_eq!(
        (v["state"].as_str(), v["visible"].as_bool()),
        (Some("VALID"), Some(true)),
        "{v}"
    );
    assert_eq!(env.load_status("poison").await, 200);
    assert!(env.marker("poison").await.is_none(), "the attempt ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_revalidation_lifts_a_quarantine_for_a_bounded_number_of_attempts() {
    let env = setup().await;
    let s = quarantine(&env).await;
    assert_eq!(s.quarantined, 1, "{s:?}");
    let (st, v) = env
        .call(
            reqwest::Method::POST,
            &format!(
                "/v1/accounts/acme/overlays/{}/capture?revalidate=true",
                env.overlay
            ),
        )
        .await;
    assert_eq!(st, 202, "{v}");
    assert!(
        env.marker("poison").await.is_none(),
        "the request lifted it"
    );
    // Still poison: the lifted table costs at most MAX_UNFINISHED_ATTEMPTS more crashes,
    // then it is quarantined again.
    let revalidate = CaptureOptions {
        revalidate: true,
        ..CaptureOptions::default()
    };
    for _ in 0..MAX_UNFINISHED_ATTEMPTS {
        assert!(env.run_with_poison(revalidate.clone()).await.is_err());
    }
    let s = env
        .run_with_poison(revalidate.clone())
        .await
        .expect("quarantined again");
    // Still quarantined at the same version: the pointer stands, nothing is rewritten.
    assert_eq!((s.captured, s.unchanged, s.quarantined), (2, 1, 0), "{s:?}");
    assert_eq!(env.validation("poison").await["state"], "QUARANTINED");
    assert_eq!(
        env.marker("poison").await.map(|m| m.attempts),
        Some(MAX_UNFINISHED_ATTEMPTS)
    );
    // No longer poison (the fault gone): a revalidation captures it.
    let (st, _) = env
        .call(
            reqwest::Method::POST,
            &format!(
                "/v1/accounts/acme/overlays/{}/capture?revalidate=true",
                env.overlay
            ),
        )
        .await;
    assert_eq!(st, 202);
    let ran = env
        .work
        .lock()
        .await
        .drain(&env.state, &AdapterConnector)
        .await;
    assert!(!ran.is_empty());
    let v = env.validation("poison").await;
    assert_eq!(
        (v["state"].as_str(), v["visible"].as_bool()),
        (Some("VALID"), Some(true)),
        "{v}"
    );
}

/// A job whose service clock runs past its budget while it captures `orders` starts no
/// further table: `poison` and `zeta` are deferred (`CAPTURE_DEADLINE`, retryable, so the
/// message is delivered again), and the next run captures them without redoing `orders`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_time_budget_stops_and_the_next_run_resumes() {
    let mut env = setup().await;
    let clock = flotilla_core::clock::ManualClock::starting_now();
    env.state.clock = Arc::new(clock.clone());
    let moved = clock.clone();
    let budget = capture::JOB_BUDGET;
    // Capturing `orders` takes longer than the whole job may.
    let slow_orders = FaultHook(Arc::new(move |path: &[String]| {
        if path.last().is_some_and(|n| n == "orders") {
            moved.advance(budget + std::time::Duration::from_secs(1));
        }
        Box::pin(async {})
    }));
    let s = capture::capture(
        &env.state,
        &AdapterConnector,
        "acme",
        &env.overlay,
        &CaptureOptions {
            fault: Some(slow_orders),
            ..CaptureOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.deferred), (1, 2), "{s:?}");
    assert!(s.has_retryable_failure(), "delivered again: {s:?}");
    assert!(
        s.failed
            .iter()
            .all(|f| f.code == Some("CAPTURE_DEADLINE") && f.retryable),
        "{s:?}"
    );
    assert_eq!(env.validation("orders").await["state"], "VALID");
    for t in ["poison", "zeta"] {
        assert_eq!(env.validation(t).await["state"], "NOT_CAPTURED", "{t}");
        assert!(env.marker(t).await.is_none(), "{t}: never started");
    }
    // The next run resumes: the two left, `orders` current.
    let s = capture::capture(
        &env.state,
        &AdapterConnector,
        "acme",
        &env.overlay,
        &CaptureOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.unchanged, s.deferred), (2, 1, 0), "{s:?}");
    assert!(s.failed.is_empty(), "{s:?}");
    for t in ["orders", "poison", "zeta"] {
        assert_eq!(env.validation(t).await["state"], "VALID", "{t}");
    }
}

/// Inside a Lambda invocation the job's budget ends before the invocation's: a capture
/// message handled with 50 s of the invocation left gets a job budget of 30 s (the margin
/// keeps 20 s to record what it did), so a table that takes 31 s leaves the rest deferred
/// (`CAPTURE_DEADLINE`, delivered again) instead of the function being killed mid-job.
/// Without a host deadline the same run captures everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_inside_a_lambda_invocation_ends_before_the_invocation_does() {
    use flotilla_core::reconcile::work::{CAPTURE_DEADLINE_MARGIN_MS, capture_options};
    use flotilla_domain::clock::Clock as _;
    let mut env = setup().await;
    let clock = flotilla_core::clock::ManualClock::starting_now();
    env.state.clock = Arc::new(clock.clone());
    let message = flotilla_core::reconcile::message::CaptureMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 0,
        revalidate: false,
    };
    let slow_orders = |clock: flotilla_core::clock::ManualClock| {
        FaultHook(Arc::new(move |path: &[String]| {
            if path.last().is_some_and(|n| n == "orders") {
                clock.advance(std::time::Duration::from_secs(31));
            }
            Box::pin(async {})
        }))
    };
    let now = clock.now_ms();
    let mut opts = capture_options(
        &message,
        now,
        Some(now + CAPTURE_DEADLINE_MARGIN_MS + 30_000),
    );
    assert_eq!(opts.job_budget, std::time::Duration::from_secs(30));
    opts.expect_generation = None;
    opts.fault = Some(slow_orders(clock.clone()));
    let s = capture::capture(&env.state, &AdapterConnector, "acme", &env.overlay, &opts)
        .await
        .unwrap();
    assert_eq!((s.captured, s.deferred), (1, 2), "{s:?}");
    assert!(s.has_retryable_failure(), "delivered again: {s:?}");
    // An invocation with less than the margin left starts nothing.
    let now = clock.now_ms();
    let opts = capture_options(&message, now, Some(now + CAPTURE_DEADLINE_MARGIN_MS - 1));
    assert_eq!(opts.job_budget, std::time::Duration::ZERO);
    // No host deadline: the job's own budget (10 min), and the slow table is no reason to stop.
    let mut opts = capture_options(&message, clock.now_ms(), None);
    assert_eq!(opts.job_budget, capture::JOB_BUDGET);
    opts.expect_generation = None;
    opts.revalidate = true;
    opts.fault = Some(slow_orders(clock.clone()));
    let s = capture::capture(&env.state, &AdapterConnector, "acme", &env.overlay, &opts)
        .await
        .unwrap();
    assert_eq!(s.deferred, 0, "{s:?}");
    assert!(s.failed.is_empty(), "{s:?}");
}

/// A hostile upstream whose table metadata lies on a storage endpoint that accepts the
/// request and never answers: the table fails at its budget (`CAPTURE_DEADLINE`,
/// retryable, not quarantined: the process lived), the tables after it capture, and the
/// next run tries it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_whose_upstream_object_never_finishes_fails_at_its_budget() {
    // The storage endpoint: accepts, reads, never answers; tells the test a request is parked.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (parked_tx, mut parked) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            let _ = parked_tx.send(());
            held.push(sock);
        }
    });
    let env = setup_with(|upstream| {
        upstream.add_table(&["sales"], "orders");
        upstream.register_table(
            &["sales"],
            "slow",
            "s3://upstream-bucket/wh/sales/slow/metadata/00000-a.metadata.json",
            remote_metadata(),
        );
        upstream.add_table(&["sales"], "zeta");
        upstream.set_vended_static(std::collections::BTreeMap::from([
            (
                "s3.access-key-id".to_owned(),
                "AKIASLOWUPSTREAM0001".to_owned(),
            ),
            ("s3.secret-access-key".to_owned(), "slow-secret".to_owned()),
            ("s3.region".to_owned(), "us-east-1".to_owned()),
            ("s3.endpoint".to_owned(), format!("http://127.0.0.1:{port}")),
        ]));
    })
    .await;
    // The table budget's timer: each sleep ends when the test fires it.
    let pending: Arc<std::sync::Mutex<Vec<tokio::sync::oneshot::Sender<()>>>> = Arc::default();
    let armed = pending.clone();
    let timer = capture::Timer(Arc::new(move |_| {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        armed.lock().unwrap().push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }));
    let state = env.state.clone();
    let overlay = env.overlay.clone();
    let job = tokio::spawn(async move {
        capture::capture(
            &state,
            &AdapterConnector,
            "acme",
            &overlay,
            &CaptureOptions {
                timer,
                ..CaptureOptions::default()
            },
        )
        .await
    });
    // The read of `slow` is parked at the endpoint: its budget runs out now.
    parked.recv().await.unwrap();
    for t in pending.lock().unwrap().drain(..) {
        let _ = t.send(());
    }
    let s = tokio::time::timeout(GUARD, job)
        .await
        .expect("the job ends once the table's budget is spent")
        .unwrap()
        .unwrap();
    assert_eq!((s.captured, s.quarantined), (2, 0), "{s:?}");
    assert!(
        matches!(&s.failed[..], [f] if f.code == Some("CAPTURE_DEADLINE") && f.retryable
            && f.path == ["sales", "slow"]),
        "{s:?}"
    );
    assert!(s.has_retryable_failure());
    assert_eq!(env.validation("slow").await["state"], "NOT_CAPTURED");
    assert!(
        env.marker("slow").await.is_none(),
        "the attempt ended: no quarantine"
    );
    for t in ["orders", "zeta"] {
        assert_eq!(env.validation(t).await["state"], "VALID", "{t}");
    }
}

/// A guard against a job that parks forever on the code before the fix: far longer than any
/// capture here takes, and no part of the behaviour under test.
const GUARD: std::time::Duration = std::time::Duration::from_secs(20);

fn remote_metadata() -> Value {
    json!({
        "format-version": 2,
        "table-uuid": "5a7b1c9e-0000-4000-8000-0000000000bb",
        "location": "s3://upstream-bucket/wh/sales/slow",
        "last-sequence-number": 0,
        "last-updated-ms": 1_772_366_400_000_i64,
        "last-column-id": 1,
        "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "required": false, "type": "long"}]}],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "current-snapshot-id": -1,
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": []
    })
}
