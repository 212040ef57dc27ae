//! Federated reads end to end (`docs/capture.md`): an Iceberg REST fixture upstream serves a
//! table whose metadata, manifests and Parquet files pyiceberg wrote to moto S3, and vends
//! temporary credentials a moto STS issued for it. An overlay materializes it into a catalog;
//! the queued reconciliation captures it; pyiceberg and DuckDB attached to Flotilla read the
//! upstream's rows with nothing but what the endpoint answers. Then: an upstream append is
//! read after the next capture; a corrupted data file makes the table invisible (absent from
//! listings, `404` with its validation state, one listed error); the override makes it visible
//! again; the repaired file clears the errors. An unchanged table's capture writes nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::reconcile::capture::{self, CaptureOptions};
use flotilla_core::reconcile::schedule::WorkMessage;
use flotilla_core::reconcile::work::{
    CaptureMessage, MessageOutcome, ReconcileMessage, handle_capture, handle_message,
    handle_message_leg,
};
use flotilla_core::state::AppState;
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_iceberg_rest::vending::{StsVending, Vending};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::{Consistency, Query};
use flotilla_testkit::iceberg_fixture::{EtagMode, IcebergFixture};
use serde_json::{Value, json};

const OPERATOR: &str = "federated-operator-token";
const ACME: &str = "federated-acme-token-0001";
const ROLE: &str = "arn:aws:iam::123456789012:role/flotilla-iceberg-vending";

fn python() -> PathBuf {
    PathBuf::from(std::env::var("FLOTILLA_ENGINES_PYTHON").expect(
        "FLOTILLA_ENGINES_PYTHON must name a Python with pyiceberg and duckdb (scripts/test.sh sets it)",
    ))
}

struct Env {
    state: AppState,
    endpoint: String,
    http: reqwest::Client,
    moto: String,
    /// The host's in-process reconcile queue (the routes enqueue capture jobs on it); the
    /// test drains it by running the worker on every delivery.
    queue: flotilla_runtime::queue::ChannelQueue,
    work: tokio::sync::Mutex<flotilla_runtime::local::LocalQueue>,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.endpoint))
            .bearer_auth(ACME);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn script(&self, script: &str, warehouse: &str, args: &[&str]) {
        let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/engines");
        let mut cmd = Command::new(python());
        cmd.arg(scripts.join(script))
            .args(args)
            .current_dir(&scripts)
            .env("FLOTILLA_ICEBERG_URI", format!("{}/iceberg", self.endpoint))
            .env("FLOTILLA_TOKEN", ACME)
            .env("FLOTILLA_OTHER_TOKEN", ACME)
            .env("FLOTILLA_WAREHOUSE", warehouse)
            .env("PYTHONDONTWRITEBYTECODE", "1");
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap()
            .expect("run python");
        assert!(
            out.status.success(),
            "{script} failed\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs the worker on every message waiting in the queue (the worker of `flotilla serve`
    /// would), in order; answers each message and what handling it came to.
    async fn drain(&self) -> Vec<(WorkMessage, MessageOutcome)> {
        let ran = self
            .work
            .lock()
            .await
            .drain(&self.state, &AdapterConnector)
            .await;
        ran.into_iter()
            .map(|(message, result, outcome)| {
                assert_eq!(
                    result,
                    flotilla_runtime::queue::DeliveryResult::Done,
                    "{outcome:?}"
                );
                (message, outcome)
            })
            .collect()
    }

    /// One queued reconciliation (and the capture it carries).
    async fn run_queue(&self, overlay: &str) {
        let (_, ov) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/accounts/acme/overlays/{overlay}"),
                None,
            )
            .await;
        let m = ReconcileMessage {
            account_id: "acme".into(),
            overlay_id: overlay.into(),
            observed_generation: ov["generation"].as_u64().unwrap(),
        };
        let outcome = handle_message(&self.state, &AdapterConnector, &m).await;
        assert!(
            matches!(outcome, MessageOutcome::Reconciled(_)),
            "{outcome:?}"
        );
    }
}

async fn setup(moto: &str, bucket: &str, tenant: &str) -> Env {
    setup_with(Some((moto, bucket, tenant)), true).await
}

/// The host: on moto S3 (`s3`: endpoint, bucket, tenant prefix) with STS vending for its
/// native catalogs `source` and `lake`, or on the host's `file://` warehouse (`lake` only).
async fn setup_with(s3: Option<(&str, &str, &str)>, allow_insecure: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        serde_json::to_vec(&json!({"tokens": [{"token": ACME, "accounts": ["acme"]}]})).unwrap(),
    )
    .unwrap();
    let opts = flotilla_runtime::local::LocalOptions {
        data_dir: dir.path().join("data"),
        // The fixture upstream listens on loopback.
        allow_insecure_upstreams: allow_insecure,
        bootstrap_token: Some(OPERATOR.to_owned()),
        tokens_file: Some(tokens),
        warehouse_root: None,
        // The fixture upstreams' table files lie in temporary directories.
        upstream_files_root: Some(flotilla_testkit::upstream_files_root()),
    };
    let stack = flotilla_runtime::local::build(&opts).expect("local stack");
    let work = stack.work;
    let root = opts.warehouse_root().canonicalize().unwrap();
    let (state, vending, moto) = match s3 {
        Some((moto, _, _)) => {
            let policy =
                flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
            let stores = flotilla_parqdb::store::DefaultWarehouseStores::new()
                .with_s3_endpoint(moto.to_owned())
                .with_policy(policy);
            let vending: Arc<dyn Vending> =
                Arc::new(StsVending::new(ROLE, 3600, Some(moto.to_owned())).expect("vending"));
            (
                stack.state.with_index_stores(Arc::new(stores)),
                Some(vending),
                moto.to_owned(),
            )
        }
        None => (stack.state, None, String::new()),
    };
    let app = flotilla_iceberg_rest::router(
        state.clone(),
        IcebergConfig {
            local_warehouse_root: Some(root),
            vending,
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let env = Env {
        state,
        endpoint: format!("http://{addr}"),
        http: reqwest::Client::new(),
        moto,
        queue: work.queue.clone(),
        work: tokio::sync::Mutex::new(work),
        _dir: dir,
    };
    let r = env
        .http
        .post(format!("{}/v1/accounts", env.endpoint))
        .bearer_auth(OPERATOR)
        .json(&json!({"id": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for name in ["source", "lake"] {
        let mut body = json!({"display_name": name});
        match s3 {
            Some((_, bucket, tenant)) => {
                body["properties"] = json!({"warehouse": format!("s3://{bucket}/{tenant}/{name}")});
            }
            None if name == "source" => continue,
            None => {}
        }
        let (s, v) = env
            .call(
                reqwest::Method::POST,
                "/v1/accounts/acme/catalogs",
                Some(body),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    env
}

/// The source table's current metadata location, metadata and the load's vended storage
/// configuration (moto STS keys scoped to the table, and the S3 endpoint).
async fn source_table(env: &Env) -> (String, Value, BTreeMap<String, String>) {
    let (_, cfg) = env
        .call(
            reqwest::Method::GET,
            "/iceberg/v1/config?warehouse=acme/source",
            None,
        )
        .await;
    let prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    let r = env
        .http
        .get(format!(
            "{}/iceberg/v1/{prefix}/namespaces/sales/tables/orders",
            env.endpoint
        ))
        .bearer_auth(ACME)
        .header("X-Iceberg-Access-Delegation", "vended-credentials")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let config = v["config"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    (
        v["metadata-location"].as_str().unwrap().to_owned(),
        v["metadata"].clone(),
        config,
    )
}

/// The S3 key of the first data file of the table's current capture.
fn s3_key(path: &str, bucket: &str) -> String {
    path.strip_prefix(&format!("s3://{bucket}/"))
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_read_overlay_tables_captured_from_an_iceberg_rest_upstream() {
    let moto = std::env::var("FLOTILLA_MOTO_ENDPOINT").expect(
        "FLOTILLA_MOTO_ENDPOINT is not set: the federated test needs moto (scripts/test.sh)",
    );
    let sts = std::env::var("AWS_ENDPOINT_URL_STS")
        .expect("AWS_ENDPOINT_URL_STS is not set: vending in tests must reach moto's STS");
    assert!(
        sts.starts_with("http://127.0.0.1"),
        "STS endpoint {sts} is not local"
    );
    let bucket = "flotilla-federated";
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().as_u16() == 409);
    let tenant = format!("acme-{}", uuid::Uuid::new_v4().simple());
    let env = setup(&moto, bucket, &tenant).await;

    // The upstream's data: real Parquet files written by pyiceberg to moto S3.
    env.script("federated_source.py", "acme/source", &["create"])
        .await;
    let (location, metadata, vended) = source_table(&env).await;
    assert!(vended.contains_key("s3.session-token"), "{vended:?}");
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.register_table(&["sales"], "orders", &location, metadata);
    upstream.set_vended_static(vended);

    let (integration, overlay, lake, _) = overlay_of(&env, &upstream).await;
    let validation =
        format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables/orders/validation");

    // Before any capture the materialized table is not query-visible.
    let (_, cfg) = env
        .call(
            reqwest::Method::GET,
            "/iceberg/v1/config?warehouse=acme/lake",
            None,
        )
        .await;
    let lake_prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    let load = format!("/iceberg/v1/{lake_prefix}/namespaces/sales/tables/orders");
    let list = format!("/iceberg/v1/{lake_prefix}/namespaces/sales/tables");
    env.call(
        reqwest::Method::POST,
        &format!("/v1/accounts/acme/overlays/{overlay}/reconcile"),
        None,
    )
    .await;
    let (s, v) = env.call(reqwest::Method::GET, &load, None).await;
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("NOT_CAPTURED"),
        "{v}"
    );
    let (_, v) = env.call(reqwest::Method::GET, &list, None).await;
    assert_eq!(v["identifiers"], json!([]), "{v}");

    // The reconcile queued the capture of what it published; the worker runs it, and the
    // engines read the upstream's rows.
    let ran = env.drain().await;
    assert!(
        matches!(
            ran.as_slice(),
            [(
                WorkMessage::Capture(_),
                MessageOutcome::Captured { captured: 1, .. }
            )]
        ),
        "{ran:?}"
    );
    let (s, v) = env.call(reqwest::Method::GET, &validation, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["state"], "VALID", "{v}");
    assert_eq!(v["visible"], true);
    assert_eq!(v["records"], 3);
    assert_eq!(v["metadata_location"], json!(location));
    env.script("federated_read.py", "acme/lake", &["1,2,3"])
        .await;
    // The load serves the upstream's own metadata location and the upstream's vended keys.
    let r = env
        .http
        .get(format!("{}{load}", env.endpoint))
        .bearer_auth(ACME)
        .header("X-Iceberg-Access-Delegation", "vended-credentials")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["metadata-location"], json!(location));
    assert!(
        v["storage-credentials"][0]["config"]["s3.session-token"].is_string(),
        "{v}"
    );

    // Unchanged: a capture costs reads only.
    let counting = CountingMetastore::new(flotilla_metastore::SharedStore(env.state.store.clone()));
    let counters = counting.counters();
    let mut counted = env.state.clone();
    counted.store = Arc::new(counting);
    let before = upstream.log().len();
    let s = capture::capture(
        &counted,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.unchanged), (0, 1), "{s:?}");
    let snap = counters.snapshot();
    assert_eq!(snap.transact, 0, "{snap:?}");
    assert_eq!(snap.items_written, 0, "{snap:?}");
    assert_eq!(upstream.log().len(), before, "no upstream request");

    // An upstream append is read after the next capture.
    env.script("federated_source.py", "acme/source", &["append"])
        .await;
    let (location2, metadata2, _) = source_table(&env).await;
    assert_ne!(location2, location);
    upstream.register_table(&["sales"], "orders", &location2, metadata2);
    env.run_queue(&overlay).await;
    let (_, v) = env.call(reqwest::Method::GET, &validation, None).await;
    assert_eq!(v["records"], 5, "{v}");
    env.script("federated_read.py", "acme/lake", &["1,2,3,4,5"])
        .await;

    // A corrupted data file: revalidation makes the table invisible, with one error.
    let object = {
        let p = capture::service::pointer(
            env.state.store.as_ref(),
            &lake,
            &flotilla_core::service::relations::load(
                env.state.store.as_ref(),
                &lake,
                &flotilla_domain::names::NamespacePath::new(vec!["sales".into()]).unwrap(),
                "orders",
            )
            .await
            .unwrap()
            .unwrap()
            .value
            .id,
            Consistency::Strong,
        )
        .await
        .unwrap()
        .unwrap();
        p.value
    };
    assert_eq!(object.files, 2);
    let files = env.call(reqwest::Method::GET, &validation, None).await.1;
    assert_eq!(files["files"], 2);
    let data_file = {
        // The first data file of the captured state.
        let store = capture::storage::CatalogFiles::open(
            &env.state,
            &flotilla_core::service::catalogs::load(env.state.store.as_ref(), "acme", &lake)
                .await
                .unwrap()
                .value,
        )
        .unwrap();
        use object_store::ObjectStoreExt;
        let got = store
            .store
            .get(&object_store::path::Path::parse(object.object.as_deref().unwrap()).unwrap())
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let t: capture::record::CapturedTable = serde_json::from_slice(&got).unwrap();
        t.files[0].path.clone()
    };
    // The suite's own moto keys reach the bucket directly (as a writer of the upstream would).
    use object_store::ObjectStoreExt;
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .with_endpoint(&env.moto)
        .with_allow_http(true)
        .build()
        .unwrap();
    let key = object_store::path::Path::parse(s3_key(&data_file, bucket)).unwrap();
    let original = s3.get(&key).await.unwrap().bytes().await.unwrap();
    assert!(original.len() > 12);
    let mut bad = original.to_vec();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(b"XXXX"); // no longer ends with the PAR1 magic
    s3.put(&key, bad.into()).await.unwrap();
    let revalidate = CaptureOptions {
        revalidate: true,
        ..CaptureOptions::default()
    };
    let s = capture::capture(&env.state, &AdapterConnector, "acme", &overlay, &revalidate)
        .await
        .unwrap();
    assert_eq!((s.captured, s.invalid, s.file_errors), (1, 1, 1), "{s:?}");
    let (_, v) = env.call(reqwest::Method::GET, &validation, None).await;
    assert_eq!(v["state"], "INVALID", "{v}");
    assert_eq!(v["visible"], false);
    // The capture that made the table invisible wrote its event, by the overlay.
    let captures = capture_events(&catalog_events(&env, &lake).await, &overlay);
    let kinds: Vec<&str> = captures.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["x-flotilla-capture-visible", "x-flotilla-capture-invalid"]
    );
    assert_eq!(
        v["validation_errors"][0]["file_path"],
        json!(data_file),
        "{v}"
    );
    let (s, v) = env.call(reqwest::Method::GET, &load, None).await;
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("INVALID"),
        "{v}"
    );
    let (_, v) = env.call(reqwest::Method::GET, &list, None).await;
    assert_eq!(v["identifiers"], json!([]), "{v}");
    let (s, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/validation-errors"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["items"][0]["display_path"], "sales.orders");
    assert_eq!(v["items"][0]["format"], "ICEBERG");

    // The override makes it visible; the error stays listed.
    let visibility =
        format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables/orders/visibility");
    let (s, v) = env
        .call(
            reqwest::Method::PUT,
            &visibility,
            Some(json!({"override": true})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["visible"], true, "{v}");
    let (s, v) = env.call(reqwest::Method::GET, &load, None).await;
    assert_eq!(s, 200, "{v}");
    let (_, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/validation-errors"),
            None,
        )
        .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");

    // The repaired file: the next validation retires the errors.
    s3.put(&key, original.into()).await.unwrap();
    env.call(
        reqwest::Method::PUT,
        &visibility,
        Some(json!({"override": false})),
    )
    .await;
    // Describing the integration with `revalidate=true` requests the revalidation.
    let (s, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/integrations/{integration}?revalidate=true"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    // It queued exactly one well-formed revalidation job (one active overlay), which the
    // worker runs: the table is captured again.
    let (_, ov) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/overlays/{overlay}"),
            None,
        )
        .await;
    let expected = CaptureMessage {
        account_id: "acme".into(),
        overlay_id: overlay.clone(),
        observed_generation: ov["generation"].as_u64().unwrap(),
        revalidate: true,
    };
    assert_eq!(
        v["revalidation"],
        json!([{"overlay_id": overlay, "queued": expected.to_json()}]),
        "{v}"
    );
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].0, WorkMessage::Capture(expected));
    assert!(
        matches!(ran[0].1, MessageOutcome::Captured { captured: 1, .. }),
        "{:?}",
        ran[0].1
    );
    let (_, v) = env.call(reqwest::Method::GET, &validation, None).await;
    assert_eq!(v["state"], "VALID", "{v}");
    assert_eq!(v["validation_errors"], json!([]));
    let captures = capture_events(&catalog_events(&env, &lake).await, &overlay);
    let kinds: Vec<&str> = captures.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "x-flotilla-capture-visible",
            "x-flotilla-capture-invalid",
            "x-flotilla-capture-visible"
        ]
    );
    let (_, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/validation-errors"),
            None,
        )
        .await;
    assert_eq!(v["items"], json!([]), "{v}");
    env.script("federated_read.py", "acme/lake", &["1,2,3,4,5"])
        .await;
}

/// The events of catalog `catalog` (up to 1,000).
async fn catalog_events(env: &Env, catalog: &str) -> Vec<Value> {
    let (s, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/events?catalog_id={catalog}&page_size=1000"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["items"].as_array().unwrap().clone()
}

/// The capture events among `events` in sequence order: type and table, each checked to be
/// by `overlay`.
fn capture_events(events: &[Value], overlay: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| {
            e["operation"]["type"]
                .as_str()
                .unwrap()
                .starts_with("x-flotilla-capture-")
        })
        .map(|e| {
            assert_eq!(e["actor"], json!({"type": "OVERLAY", "id": overlay}), "{e}");
            (
                e["operation"]["type"].as_str().unwrap().to_owned(),
                e["operation"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The lake catalog's id and Iceberg prefix, and a new integration and overlay of `sales`.
async fn overlay_of(env: &Env, upstream: &IcebergFixture) -> (String, String, String, String) {
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/integrations",
            Some(
                json!({"display_name": "up", "type": "ICEBERG_REST", "uri": upstream.uri(),
                "authentication": {"type": "BEARER"}, "credentials": {"token": "upstream-token"}}),
            ),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let integration = v["id"].as_str().unwrap().to_owned();
    let (_, cats) = env
        .call(reqwest::Method::GET, "/v1/accounts/acme/catalogs", None)
        .await;
    let lake = cats["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["display_name"] == "lake")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/overlays",
            Some(json!({"display_name": "imp", "integration_id": integration,
                "catalog_id": lake, "include_namespaces": [["sales"]]})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let overlay = v["id"].as_str().unwrap().to_owned();
    let (_, cfg) = env
        .call(
            reqwest::Method::GET,
            "/iceberg/v1/config?warehouse=acme/lake",
            None,
        )
        .await;
    let prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    (integration, overlay, lake, prefix)
}

async fn pointer_count(env: &Env, catalog: &str) -> usize {
    flotilla_metastore::query_all(
        env.state.store.as_ref(),
        Query::new(
            flotilla_domain::keys::catalog_pk(catalog),
            flotilla_domain::keys::CAPTURE_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap()
    .len()
}

/// A job planned before a change of the integration publishes nothing after it; an unchanged
/// table's capture writes nothing and asks the upstream nothing; an upstream whose warehouse
/// is a local `file://` path is read only with `--allow-insecure-upstreams`, and otherwise
/// reported as not readable, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_is_fenced_costs_nothing_unchanged_and_reads_file_warehouses_only_when_allowed() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    let fixture_location = upstream
        .table_metadata_location(&["sales"], "orders")
        .unwrap();
    let (integration, overlay, lake, prefix) = overlay_of(&env, &upstream).await;
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &format!("/v1/accounts/acme/overlays/{overlay}/reconcile"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");

    // Planned, then the integration changes: the job publishes nothing.
    let plan = capture::plan(&env.state, "acme", &overlay, &CaptureOptions::default())
        .await
        .unwrap();
    assert_eq!(plan.tables.len(), 1);
    let (s, v) = env
        .call(
            reqwest::Method::PATCH,
            &format!("/v1/accounts/acme/integrations/{integration}"),
            Some(json!({"display_name": "up-renamed"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let client = flotilla_core::access::connect(&env.state, &plan.observed.integration)
        .await
        .unwrap();
    let r = capture::execute(
        &env.state,
        &plan,
        Some(client.as_ref()),
        &CaptureOptions::default(),
    )
    .await;
    assert!(
        matches!(r, Err(flotilla_core::reconcile::ReconcileError::FenceLost)),
        "{:?}",
        r.map(|s| s.captured)
    );
    assert_eq!(pointer_count(&env, &lake).await, 0, "nothing published");

    // A current job captures it (a table without snapshots: no files, valid).
    let s = capture::capture(
        &env.state,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.invalid, s.not_readable), (1, 0, 0), "{s:?}");
    let load = format!("/iceberg/v1/{prefix}/namespaces/sales/tables/orders");
    let (st, v) = env.call(reqwest::Method::GET, &load, None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["metadata-location"],
        json!(fixture_location),
        "the upstream's own location"
    );
    assert_eq!(
        v["metadata"]["location"].as_str().unwrap(),
        upstream.table_location(&["sales"], "orders").unwrap()
    );
    let (_, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/iceberg/v1/{prefix}/namespaces/sales/tables"),
            None,
        )
        .await;
    assert_eq!(
        v["identifiers"],
        json!([{"namespace": ["sales"], "name": "orders"}]),
        "{v}"
    );

    // Unchanged: reads only, no upstream request.
    let counting = CountingMetastore::new(flotilla_metastore::SharedStore(env.state.store.clone()));
    let counters = counting.counters();
    let mut counted = env.state.clone();
    counted.store = Arc::new(counting);
    let before = upstream.log().len();
    let s = capture::capture(
        &counted,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((s.captured, s.unchanged), (0, 1), "{s:?}");
    let snap = counters.snapshot();
    assert_eq!((snap.transact, snap.items_written), (0, 0), "{snap:?}");
    assert_eq!(upstream.log().len(), before, "no upstream request");

    // Without --allow-insecure-upstreams the same table is not readable, with the reason.
    let mut strict = env.state.clone();
    strict.config.allow_insecure_upstreams = false;
    let s = capture::capture(
        &strict,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions {
            revalidate: true,
            ..CaptureOptions::default()
        },
    )
    .await;
    // The loopback upstream itself is refused without the flag: nothing changes.
    assert!(
        s.is_err() || s.as_ref().is_ok_and(|s| s.captured <= 1),
        "{:?}",
        s.map(|s| s.captured)
    );
    let app = flotilla_iceberg_rest::router(
        strict.clone(),
        IcebergConfig {
            local_warehouse_root: Some(
                env._dir
                    .path()
                    .join("data/warehouses")
                    .canonicalize()
                    .unwrap(),
            ),
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let r = env
        .http
        .get(format!("http://{addr}{load}"))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    let m = msg.to_lowercase();
    assert!(
        (m.contains("not readable") || m.contains("not_readable"))
            && m.contains("--allow-insecure-upstreams"),
        "{v}"
    );
}

/// The overlay's generation as the API describes it.
async fn generation(env: &Env, overlay: &str) -> u64 {
    let (_, ov) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/overlays/{overlay}"),
            None,
        )
        .await;
    ov["generation"].as_u64().unwrap()
}

/// The capture pointer of a table, read strongly.
async fn pointer(env: &Env, catalog: &str, ns: &[&str], name: &str) -> Option<Value> {
    let ns =
        flotilla_domain::names::NamespacePath::new(ns.iter().map(|s| (*s).to_owned()).collect())
            .unwrap();
    let rel = env
        .state
        .store
        .get(
            &flotilla_domain::keys::relation(catalog, &ns, name),
            Consistency::Strong,
        )
        .await
        .unwrap()?;
    let rel: Value = rel.json().unwrap();
    let p = env
        .state
        .store
        .get(
            &flotilla_domain::keys::capture_pointer(catalog, rel["id"].as_str().unwrap()),
            Consistency::Strong,
        )
        .await
        .unwrap()?;
    Some(p.json().unwrap())
}

/// `POST .../capture` checks the overlay and queues exactly one well-formed job, which the
/// worker runs; a job whose overlay moved to another generation or is paused does nothing
/// (no write); a host without a queue refuses clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capture_route_queues_one_fenced_job_for_the_worker() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    let (integration, overlay, lake, _) = overlay_of(&env, &upstream).await;
    let capture = format!("/v1/accounts/acme/overlays/{overlay}/capture");
    // The run alone (the library call, not the route, which would queue the capture job
    // itself: `a_reconcile_captures_what_changed_behind_*`).
    flotilla_core::reconcile::reconcile(
        &env.state,
        &AdapterConnector,
        "acme",
        &overlay,
        &flotilla_core::reconcile::RunOptions::default(),
    )
    .await
    .unwrap();
    assert!(env.drain().await.is_empty(), "the run alone queues nothing");

    // Queued, not run: nothing is captured until the worker runs the one message.
    let (s, v) = env.call(reqwest::Method::POST, &capture, None).await;
    assert_eq!(s, 202, "{v}");
    let expected = CaptureMessage {
        account_id: "acme".into(),
        overlay_id: overlay.clone(),
        observed_generation: generation(&env, &overlay).await,
        revalidate: false,
    };
    assert_eq!(v, json!({"queued": expected.to_json()}));
    assert_eq!(pointer_count(&env, &lake).await, 0);
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(ran[0].0, WorkMessage::Capture(expected.clone()));
    assert_eq!(
        WorkMessage::parse(&ran[0].0.to_body()),
        Ok(ran[0].0.clone()),
        "well-formed on the wire"
    );
    assert!(
        matches!(
            ran[0].1,
            MessageOutcome::Captured {
                captured: 1,
                unchanged: 0
            }
        ),
        "{:?}",
        ran[0].1
    );
    let first = pointer(&env, &lake, &["sales"], "orders").await.unwrap();
    assert_eq!(first["validation_generation"], 1);

    // Queued at one generation, then the overlay is paused (a new generation): the worker
    // acknowledges the revalidation without running it.
    let (s, _) = env
        .call(
            reqwest::Method::POST,
            &format!("{capture}?revalidate=true"),
            None,
        )
        .await;
    assert_eq!(s, 202);
    let (s, v) = env
        .call(
            reqwest::Method::PATCH,
            &format!("/v1/accounts/acme/overlays/{overlay}"),
            Some(json!({"paused": true})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert!(
        matches!(ran[0].1, MessageOutcome::Superseded { .. }),
        "{:?}",
        ran[0].1
    );
    assert_eq!(
        pointer(&env, &lake, &["sales"], "orders").await.unwrap(),
        first
    );

    // Paused: the route refuses; a message at the paused generation does nothing at all.
    let (s, v) = env.call(reqwest::Method::POST, &capture, None).await;
    assert_eq!(s, 409, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("paused"),
        "{v}"
    );
    assert!(env.drain().await.is_empty());
    let counting = CountingMetastore::new(flotilla_metastore::SharedStore(env.state.store.clone()));
    let counters = counting.counters();
    let mut counted = env.state.clone();
    counted.store = Arc::new(counting);
    let before = upstream.log().len();
    let paused = CaptureMessage {
        observed_generation: generation(&env, &overlay).await,
        revalidate: true,
        ..expected.clone()
    };
    let out = handle_capture(&counted, &AdapterConnector, &paused).await;
    assert!(matches!(out, MessageOutcome::Paused), "{out:?}");
    let stale = CaptureMessage {
        observed_generation: 1,
        ..paused.clone()
    };
    let out = handle_capture(&counted, &AdapterConnector, &stale).await;
    assert!(matches!(out, MessageOutcome::Superseded { .. }), "{out:?}");
    let gone = CaptureMessage {
        overlay_id: "ovl-none".into(),
        ..paused.clone()
    };
    let out = handle_capture(&counted, &AdapterConnector, &gone).await;
    assert!(matches!(out, MessageOutcome::Gone), "{out:?}");
    let snap = counters.snapshot();
    assert_eq!((snap.transact, snap.items_written), (0, 0), "{snap:?}");
    assert_eq!(upstream.log().len(), before, "no upstream request");

    // Unknown overlay: 404, nothing queued.
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/overlays/ovl-none/capture",
            None,
        )
        .await;
    assert_eq!(s, 404, "{v}");
    assert!(env.drain().await.is_empty());

    // A host without a reconcile queue says so (and never panics).
    env.call(
        reqwest::Method::PATCH,
        &format!("/v1/accounts/acme/overlays/{overlay}"),
        Some(json!({"paused": false})),
    )
    .await;
    let mut no_queue = env.state.clone();
    no_queue.work = None;
    let app = flotilla_iceberg_rest::router(no_queue, IcebergConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    for (method, path) in [
        (reqwest::Method::POST, capture.clone()),
        (
            reqwest::Method::GET,
            format!("/v1/accounts/acme/integrations/{integration}?revalidate=true"),
        ),
    ] {
        let r = env
            .http
            .request(method, format!("http://{addr}{path}"))
            .bearer_auth(ACME)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409, "{path}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no reconcile queue"),
            "{v}"
        );
    }
    assert!(env.drain().await.is_empty());
}

/// A table reported not readable is tried again by the next capture even though its
/// metadata location did not change (what made it unreadable may have); a readable,
/// unchanged table still costs nothing.
/// A host that queues capture (the reconciler function, `CaptureRun::Queue`) reconciles
/// without capturing, then queues exactly one capture job at the message's generation when
/// some table needs it, and none when every table's capture is current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_that_queues_capture_sends_one_job_and_none_when_current() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    let m = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: overlay.clone(),
        observed_generation: generation(&env, &overlay).await,
    };
    let queued = flotilla_core::reconcile::RunOptions {
        capture: flotilla_core::reconcile::CaptureRun::Queue,
        ..Default::default()
    };
    let reconcile = || handle_message_leg(&env.state, &AdapterConnector, &m, None, &queued);

    let outcome = reconcile().await;
    assert!(
        matches!(outcome, MessageOutcome::Reconciled(_)),
        "{outcome:?}"
    );
    assert_eq!(
        pointer_count(&env, &lake).await,
        0,
        "reconciled, not captured"
    );
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(
        ran[0].0,
        WorkMessage::Capture(CaptureMessage {
            account_id: "acme".into(),
            overlay_id: overlay.clone(),
            observed_generation: m.observed_generation,
            revalidate: false,
        })
    );
    assert!(
        matches!(ran[0].1, MessageOutcome::Captured { captured: 1, .. }),
        "{:?}",
        ran[0].1
    );
    assert_eq!(pointer_count(&env, &lake).await, 1);

    // Nothing changed upstream: the capture is current, and no job is queued.
    let outcome = reconcile().await;
    assert!(
        matches!(outcome, MessageOutcome::Reconciled(_)),
        "{outcome:?}"
    );
    assert!(
        env.drain().await.is_empty(),
        "nothing to capture, nothing queued"
    );

    // The table is retired upstream: its pointer is an orphan, and a job retires it.
    assert!(upstream.remove_table(&["sales"], "orders"));
    let outcome = reconcile().await;
    assert!(
        matches!(outcome, MessageOutcome::Reconciled(_)),
        "{outcome:?}"
    );
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert!(matches!(ran[0].0, WorkMessage::Capture(_)), "{ran:?}");
    assert_eq!(
        pointer_count(&env, &lake).await,
        0,
        "the orphan pointer is retired"
    );
}

/// The scheduled path: a plan message reconciles every overlay of its integration, then
/// queues each one's capture job (a plan covers many overlays, so their captures run as jobs
/// of their own), and the worker runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_plan_queues_the_capture_of_the_overlays_it_reconciled() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    let due = flotilla_runtime::queue::schedule_once(&env.state, &env.queue)
        .await
        .expect("schedule");
    assert_eq!(due, 1);
    let ran = env.drain().await;
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert!(matches!(ran[0].0, WorkMessage::Plan(_)), "{ran:?}");
    assert!(
        matches!(ran[0].1, MessageOutcome::Planned { reconciled: 1 }),
        "{:?}",
        ran[0].1
    );
    assert_eq!(
        ran[1].0,
        WorkMessage::Capture(CaptureMessage {
            account_id: "acme".into(),
            overlay_id: overlay.clone(),
            observed_generation: generation(&env, &overlay).await,
            revalidate: false,
        })
    );
    assert!(
        matches!(ran[1].1, MessageOutcome::Captured { captured: 1, .. }),
        "{:?}",
        ran[1].1
    );
    assert_eq!(pointer_count(&env, &lake).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_not_readable_is_tried_again_by_the_next_capture() {
    let env = setup_with(None, true).await;
    let upstream = with_unreadable_table().await;
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    env.run_queue(&overlay).await;
    let p = pointer(&env, &lake, &["sales"], "remote").await.unwrap();
    assert_eq!(p["validation"], "NOT_READABLE", "{p}");
    assert_eq!(p["validation_generation"], 1);
    assert_eq!(
        pointer(&env, &lake, &["sales"], "orders").await.unwrap()["validation"],
        "VALID"
    );

    let plan = capture::plan(&env.state, "acme", &overlay, &CaptureOptions::default())
        .await
        .unwrap();
    let planned: Vec<&str> = plan
        .tables
        .iter()
        .map(|t| t.relation.value.name.as_str())
        .collect();
    assert_eq!(
        planned,
        ["remote"],
        "only the unreadable table is tried again"
    );
    assert_eq!(plan.unchanged, 1);
    let (s, _) = env
        .call(
            reqwest::Method::POST,
            &format!("/v1/accounts/acme/overlays/{overlay}/capture"),
            None,
        )
        .await;
    assert_eq!(s, 202);
    let ran = env.drain().await;
    assert!(
        matches!(
            ran[..],
            [(
                _,
                MessageOutcome::Captured {
                    captured: 1,
                    unchanged: 1
                }
            )]
        ),
        "{ran:?}"
    );
    let again = pointer(&env, &lake, &["sales"], "remote").await.unwrap();
    assert_eq!(again["validation"], "NOT_READABLE", "{again}");
    assert_eq!(again["validation_generation"], 2, "tried again");
    assert_eq!(again["metadata_location"], p["metadata_location"]);
}

/// A hostile Iceberg REST upstream (`docs/reliability.md`, "Capture honours the address
/// policy"): its credential vending names an `s3.endpoint` no reader may contact. The
/// endpoint check refuses it before a store is built, so capture sends nothing there (a
/// listener on `0.0.0.0` counts zero connections), even with insecure upstreams allowed,
/// and records the table as not readable through Flotilla, naming the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vended_s3_endpoint_at_a_forbidden_address_is_never_contacted() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = setup_with(None, true).await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(sock);
        }
    });
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.register_table(
        &["sales"],
        "remote",
        "s3://upstream-bucket/wh/sales/remote/metadata/00000-a.metadata.json",
        remote_metadata(),
    );
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    for endpoint in [
        format!("http://0.0.0.0:{port}"),
        "http://169.254.169.254".to_owned(),
        "http://[fd00:ec2::254]".to_owned(),
    ] {
        upstream.set_vended_static(BTreeMap::from([
            (
                "s3.access-key-id".to_owned(),
                "AKIAHOSTILEUPSTREAM1".to_owned(),
            ),
            (
                "s3.secret-access-key".to_owned(),
                "hostile-secret".to_owned(),
            ),
            ("s3.region".to_owned(), "us-east-1".to_owned()),
            ("s3.endpoint".to_owned(), endpoint.clone()),
        ]));
        env.run_queue(&overlay).await;
        let s = capture::capture(
            &env.state,
            &AdapterConnector,
            "acme",
            &overlay,
            &CaptureOptions {
                revalidate: true,
                ..CaptureOptions::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(s.not_readable, 1, "{endpoint}: {s:?}");
        assert!(s.failed.is_empty(), "{endpoint}: not transient: {s:?}");
        let p = pointer(&env, &lake, &["sales"], "remote").await.unwrap();
        assert_eq!(p["validation"], "NOT_READABLE", "{endpoint}: {p}");
        assert!(
            p.to_string().contains("refused by address policy"),
            "{endpoint}: {p}"
        );
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "capture connected to 0.0.0.0"
    );
}

/// An upstream with `sales.orders` (readable) and `sales.remote`, whose metadata lies in
/// object storage the upstream vends no usable credentials for (it signs requests remotely,
/// which the endpoint does not hand out): captured `NOT_READABLE`.
async fn with_unreadable_table() -> IcebergFixture {
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    upstream.set_vending(flotilla_testkit::iceberg_fixture::VendingMode::RemoteSigning);
    upstream.register_table(
        &["sales"],
        "remote",
        "s3://upstream-bucket/wh/sales/remote/metadata/00000-a.metadata.json",
        remote_metadata(),
    );
    upstream
}

fn remote_metadata() -> Value {
    json!({
        "format-version": 2,
        "table-uuid": "5a7b1c9e-0000-4000-8000-0000000000aa",
        "location": "s3://upstream-bucket/wh/sales/remote",
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

/// Files below the catalog's `_flotilla/capture/` directory of the host's warehouse.
fn captured_files(env: &Env, catalog: &str) -> Vec<PathBuf> {
    let dir = env
        ._dir
        .path()
        .join("data/warehouses/acme")
        .join(catalog)
        .join("_flotilla/capture");
    let mut out = Vec::new();
    let mut pending = vec![dir];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                pending.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

async fn catalog_items(env: &Env, catalog: &str, prefix: &str) -> usize {
    flotilla_metastore::query_all(
        env.state.store.as_ref(),
        Query::new(
            flotilla_domain::keys::catalog_pk(catalog),
            prefix,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap()
    .len()
}

/// Retiring an overlay table removes its pointer, its error records and its captured
/// object; deleting the catalog removes what is left (pointers of a deleted overlay, their
/// objects in the warehouse) and its sweep record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retiring_a_table_or_deleting_its_catalog_deletes_its_captured_state() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    upstream.add_table(&["sales"], "refunds");
    // A table whose metadata file cannot be interpreted: one validation error against it.
    let broken = upstream.warehouse_dir().join("broken.metadata.json");
    std::fs::write(&broken, b"not a metadata document").unwrap();
    let mut doc = remote_metadata();
    doc["location"] = json!(upstream.warehouse_location());
    upstream.register_table(
        &["sales"],
        "broken",
        &format!("file://{}", broken.display()),
        doc,
    );
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    env.run_queue(&overlay).await;
    assert_eq!(pointer_count(&env, &lake).await, 3);
    assert_eq!(
        pointer(&env, &lake, &["sales"], "broken").await.unwrap()["validation"],
        "INVALID"
    );
    assert_eq!(catalog_items(&env, &lake, "VALERR#").await, 1);
    assert_eq!(captured_files(&env, &lake).len(), 2, "orders and refunds");

    // The upstream drops two tables: the next queued run retires them and their capture.
    upstream.remove_table(&["sales"], "broken");
    upstream.remove_table(&["sales"], "refunds");
    env.run_queue(&overlay).await;
    assert_eq!(pointer_count(&env, &lake).await, 1);
    assert_eq!(catalog_items(&env, &lake, "VALERR#").await, 0);
    assert_eq!(captured_files(&env, &lake).len(), 1, "orders only");

    // The overlay goes (its relations with it; the pointer stays, as does the object), then
    // the catalog: everything capture left is deleted.
    let (s, v) = env
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/accounts/acme/overlays/{overlay}"),
            None,
        )
        .await;
    assert!(s == 204 || s == 202 || s == 200, "{s} {v}");
    let (s, v) = env
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/accounts/acme/catalogs/{lake}"),
            None,
        )
        .await;
    assert_eq!(s, 204, "{v}");
    assert_eq!(pointer_count(&env, &lake).await, 0);
    assert_eq!(catalog_items(&env, &lake, "").await, 0);
    assert_eq!(captured_files(&env, &lake), Vec::<PathBuf>::new());
    let sweeps = flotilla_metastore::query_all(
        env.state.store.as_ref(),
        Query::new(
            flotilla_domain::keys::SYSTEM_PK,
            flotilla_domain::keys::CAPTURE_SWEEP_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap();
    assert!(sweeps.is_empty(), "the sweep completed");
}

/// A hostile Iceberg REST upstream (`docs/reliability.md`, "Capture honours the address
/// policy") whose table was captured through a good storage endpoint, then vends an
/// `s3.endpoint` at a forbidden address when engines load it: the endpoint never hands that
/// endpoint (nor the credentials meant for it) to an engine. A load asking for vended
/// credentials, and a credentials renewal, answer `404` not readable naming the policy;
/// a load that asks for none is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vended_s3_endpoint_at_a_forbidden_address_is_never_handed_to_engines() {
    let moto = std::env::var("FLOTILLA_MOTO_ENDPOINT").expect(
        "FLOTILLA_MOTO_ENDPOINT is not set: the federated test needs moto (scripts/test.sh)",
    );
    let bucket = "flotilla-vended-endpoint";
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().as_u16() == 409);
    let root = format!("wh-{}/sales/remote", uuid::Uuid::new_v4().simple());
    let mut metadata = remote_metadata();
    metadata["location"] = json!(format!("s3://{bucket}/{root}"));
    let key = format!("{root}/metadata/00000-a.metadata.json");
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}/{key}"))
        .body(serde_json::to_vec(&metadata).unwrap())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{r:?}");

    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.register_table(
        &["sales"],
        "remote",
        &format!("s3://{bucket}/{key}"),
        metadata,
    );
    // Credentials that expire within the client's renewal margin: every load asks the
    // upstream again, so a changed vending is what the next load sees.
    let expiring = (std::time::SystemTime::now() + std::time::Duration::from_secs(120))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let vend = |endpoint: &str| {
        BTreeMap::from([
            ("s3.session-token".to_owned(), "hostile-session".to_owned()),
            (
                "s3.session-token-expires-at-ms".to_owned(),
                expiring.clone(),
            ),
            (
                "s3.access-key-id".to_owned(),
                "AKIAHOSTILEUPSTREAM1".to_owned(),
            ),
            (
                "s3.secret-access-key".to_owned(),
                "hostile-secret".to_owned(),
            ),
            ("s3.region".to_owned(), "us-east-1".to_owned()),
            ("s3.endpoint".to_owned(), endpoint.to_owned()),
        ])
    };
    upstream.set_vended_static(vend(&moto));
    let (_, overlay, lake, prefix) = overlay_of(&env, &upstream).await;
    env.run_queue(&overlay).await;
    let p = pointer(&env, &lake, &["sales"], "remote").await.unwrap();
    assert_eq!(p["validation"], "VALID", "{p}");

    let load = format!("/iceberg/v1/{prefix}/namespaces/sales/tables/remote");
    let get = |path: String, vended: bool| {
        let mut r = env
            .http
            .get(format!("{}{path}", env.endpoint))
            .bearer_auth(ACME);
        if vended {
            r = r.header("X-Iceberg-Access-Delegation", "vended-credentials");
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // A good endpoint (loopback, allowed with insecure upstreams) is handed on.
    let (s, body) = get(load.clone(), true).await;
    assert_eq!(s, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["storage-credentials"][0]["config"]["s3.endpoint"],
        json!(moto),
        "{v}"
    );

    for endpoint in [
        "http://0.0.0.0:9000",
        "http://169.254.169.254",
        "http://[fd00:ec2::254]",
        "http://[::]:9000",
    ] {
        upstream.set_vended_static(vend(endpoint));
        for path in [load.clone(), format!("{load}/credentials")] {
            let (s, body) = get(path.clone(), true).await;
            assert_eq!(s, 404, "{endpoint} {path}: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["error"]["type"], "NoSuchTableException", "{v}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("refused by address policy"),
                "{endpoint}: {message}"
            );
            for secret in [endpoint, "hostile-secret", "AKIAHOSTILEUPSTREAM1"] {
                assert!(!body.contains(secret), "{endpoint}: {secret} in {body}");
            }
        }
        // Without vended credentials nothing of the upstream's vending is needed.
        let (s, body) = get(load.clone(), false).await;
        assert_eq!(s, 200, "{endpoint}: {body}");
        assert!(!body.contains("hostile-secret"), "{body}");
    }
}

/// Insecure mode never turns capture into a local file reader (`docs/reliability.md`,
/// "Capture is not a local file reader"): an upstream whose tables' metadata locations name
/// `/etc/passwd` and `/proc/self/environ` (outside the host's upstream files root) gets them
/// recorded as not readable, naming the reason, with nothing of the files captured; its
/// ordinary table below the root is captured as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_outside_the_upstream_files_root_are_never_read() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_table(&["sales"], "orders");
    for (i, (name, location)) in [
        ("passwd", "file:///etc/passwd"),
        ("environ", "file:///proc/self/environ"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut metadata = remote_metadata();
        metadata["table-uuid"] = json!(format!("5a7b1c9e-0000-4000-8000-00000000010{i}"));
        metadata["location"] = json!(format!("file:///etc/flotilla-{name}"));
        upstream.register_table(&["sales"], name, location, metadata);
    }
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    env.run_queue(&overlay).await;
    for name in ["passwd", "environ"] {
        let p = pointer(&env, &lake, &["sales"], name).await.unwrap();
        assert_eq!(p["validation"], "NOT_READABLE", "{name}: {p}");
        let text = p.to_string();
        assert!(!text.contains("root:x:0"), "{name}: {p}");
    }
    assert_eq!(
        pointer(&env, &lake, &["sales"], "orders").await.unwrap()["validation"],
        "VALID"
    );
}

/// Issue 37's engine proof: a pyiceberg commit through `/iceberg` writes exactly one
/// `update-table` event with the new metadata location (checked by the script on both
/// doors); an overlay of this host's own catalog, whose reconciliation publishes the three
/// tables pyiceberg created, writes three `create-table` events with the overlay as actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pyiceberg_commit_and_a_reconciliation_write_their_events() {
    let env = setup_with(None, true).await;
    env.script("pyiceberg_events.py", "acme/lake", &[]).await;
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/catalogs",
            Some(json!({"display_name": "mirror"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let mirror = v["id"].as_str().unwrap().to_owned();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/integrations",
            Some(json!({"display_name": "self", "type": "ICEBERG_REST",
                "uri": format!("{}/iceberg", env.endpoint),
                "properties": {"warehouse": "acme/lake"},
                "authentication": {"type": "BEARER"}, "credentials": {"token": ACME}})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let integration = v["id"].as_str().unwrap().to_owned();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/overlays",
            Some(
                json!({"display_name": "mirror-ev", "integration_id": integration,
                "catalog_id": mirror, "include_namespaces": [["ev"]]}),
            ),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let overlay = v["id"].as_str().unwrap().to_owned();
    env.run_queue(&overlay).await;
    let events = catalog_events(&env, &mirror).await;
    let mut created: Vec<&str> = events
        .iter()
        .filter(|e| e["operation"]["type"] == "create-table")
        .map(|e| {
            assert_eq!(e["actor"], json!({"type": "OVERLAY", "id": overlay}), "{e}");
            e["operation"]["name"].as_str().unwrap()
        })
        .collect();
    created.sort();
    assert_eq!(created, ["t1", "t2", "t3"], "{events:?}");
    // The capture the reconciliation carried made each table visible: one capture event
    // each, by the overlay; a second run changes nothing and writes no event.
    let mut captures = capture_events(&events, &overlay);
    captures.sort();
    let visible: Vec<(String, String)> = ["t1", "t2", "t3"]
        .iter()
        .map(|t| ("x-flotilla-capture-visible".to_owned(), (*t).to_owned()))
        .collect();
    assert_eq!(captures, visible, "{events:?}");
    env.run_queue(&overlay).await;
    let again = catalog_events(&env, &mirror).await;
    assert_eq!(again.len(), events.len(), "{again:?}");
}

/// The upstream table `sales.orders` at `version` (a real Iceberg table below the host's
/// upstream files root: `version` files of three rows in one snapshot, id `1000 + version`),
/// registered with the fixture.
async fn publish_upstream_version(upstream: &IcebergFixture, root: &std::path::Path, version: u64) {
    let w = flotilla_testkit::iceberg_files::write_table(
        root,
        "5b1e1c8e-3f38-4a43-9f7c-6b0d2c1f7a10",
        version,
        usize::try_from(version).unwrap(),
        3,
    )
    .await;
    upstream.register_table(&["sales"], "orders", &w.metadata_location, w.metadata);
}

/// The snapshot the federated `loadTable` of `sales.orders` serves.
async fn served_snapshot(env: &Env, prefix: &str) -> Value {
    let (s, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/iceberg/v1/{prefix}/namespaces/sales/tables/orders"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["metadata"]["current-snapshot-id"].clone()
}

/// Every synchronous reconcile that observes a changed upstream version leads to the capture
/// of what changed, whatever the upstream's `ETag` says: materialized, captured and served
/// (snapshot 1001); appended upstream; `POST .../reconcile` queues the capture, and the
/// federated `loadTable` serves the new snapshot once the worker ran it. A rerun with nothing
/// changed queues nothing. An `ETag` answered in full to itself is dropped for the content
/// fingerprint, so the next load is unconditional.
async fn a_reconcile_makes_an_upstream_append_visible(mode: EtagMode) {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.set_etag_mode(mode);
    upstream.add_namespace(&["sales"]);
    let dir = tempfile::tempdir_in(flotilla_testkit::upstream_files_root()).unwrap();
    let root = dir.path().join("orders");
    publish_upstream_version(&upstream, &root, 1).await;
    let (_, overlay, _, prefix) = overlay_of(&env, &upstream).await;
    let reconcile = format!("/v1/accounts/acme/overlays/{overlay}/reconcile");

    let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["capture"], json!({"state": "QUEUED", "tables": 1}), "{v}");
    let ran = env.drain().await;
    assert!(
        matches!(
            ran.as_slice(),
            [(
                WorkMessage::Capture(_),
                MessageOutcome::Captured { captured: 1, .. }
            )]
        ),
        "{ran:?}"
    );
    assert_eq!(served_snapshot(&env, &prefix).await, json!(1001));

    publish_upstream_version(&upstream, &root, 2).await;
    upstream.log().clear();
    let lags = || match flotilla_telemetry::global()
        .value(&flotilla_telemetry::catalog::CAPTURE_VISIBLE_LAG, &[])
    {
        Some(flotilla_telemetry::Value::Timing { count, .. }) => count,
        _ => 0,
    };
    let lags_before = lags();
    let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["tables"]["updated"], json!(1), "{v}");
    assert_eq!(v["capture"], json!({"state": "QUEUED", "tables": 1}), "{v}");
    let loads = upstream
        .log()
        .count("GET", "/namespaces/sales/tables/orders");
    assert_eq!(loads, 1);
    let ran = env.drain().await;
    assert!(
        matches!(
            ran.as_slice(),
            [(
                WorkMessage::Capture(_),
                MessageOutcome::Captured { captured: 1, .. }
            )]
        ),
        "{ran:?}"
    );
    assert_eq!(
        served_snapshot(&env, &prefix).await,
        json!(1002),
        "the federated loadTable serves the appended snapshot"
    );
    assert!(
        lags() > lags_before,
        "the version's visible lag is measured"
    );

    // Nothing changed since: nothing is queued, and the load is conditional only where the
    // upstream's tag is a validator.
    upstream.log().clear();
    let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["capture"], json!({"state": "NONE", "tables": 0}), "{v}");
    assert_eq!(v["tables"]["unchanged"], json!(1), "{v}");
    assert!(env.drain().await.is_empty());
    let sent: Vec<Option<String>> = upstream
        .log()
        .filter(|r| r.method == "GET" && r.path.ends_with("/namespaces/sales/tables/orders"))
        .iter()
        .map(|r| r.header("if-none-match").map(str::to_owned))
        .collect();
    match mode {
        EtagMode::Strong | EtagMode::Weak => {
            assert!(sent.len() == 1 && sent[0].is_some(), "{sent:?}");
            assert_eq!(
                upstream.log().with_status(304).len(),
                1,
                "answered not modified"
            );
        }
        EtagMode::None | EtagMode::Constant => assert_eq!(sent, vec![None], "unconditional"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_captures_what_changed_behind_an_upstream_without_etag() {
    a_reconcile_makes_an_upstream_append_visible(EtagMode::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_captures_what_changed_behind_a_weak_etag() {
    a_reconcile_makes_an_upstream_append_visible(EtagMode::Weak).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_captures_what_changed_behind_an_etag_that_does_not_change() {
    a_reconcile_makes_an_upstream_append_visible(EtagMode::Constant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_captures_what_changed_behind_a_strong_etag() {
    a_reconcile_makes_an_upstream_append_visible(EtagMode::Strong).await;
}

/// `?wait_for_capture=true` answers once the capture of what the run changed completed (the
/// worker runs the job while the request waits), and `PENDING` naming the table when the
/// bound passes first; the job still runs afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_capture_answers_once_what_the_run_changed_is_captured() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.set_etag_mode(EtagMode::None);
    upstream.add_namespace(&["sales"]);
    let dir = tempfile::tempdir_in(flotilla_testkit::upstream_files_root()).unwrap();
    let root = dir.path().join("orders");
    publish_upstream_version(&upstream, &root, 1).await;
    let (_, overlay, _, prefix) = overlay_of(&env, &upstream).await;
    let reconcile = format!("/v1/accounts/acme/overlays/{overlay}/reconcile?wait_for_capture=true");

    // The request waits; the worker takes the job it queued and runs it.
    let worker = async {
        let mut w = env.work.lock().await;
        let d = w.deliveries.recv().await.expect("the capture job");
        let message = d.message.clone();
        let (_, outcome) = flotilla_runtime::queue::handle_delivery_outcome(
            &env.state,
            &AdapterConnector,
            &w.queue,
            d,
            &flotilla_runtime::queue::WorkerOptions::default(),
        )
        .await;
        (message, outcome)
    };
    let ((s, v), (message, outcome)) =
        tokio::join!(env.call(reqwest::Method::POST, &reconcile, None), worker);
    assert_eq!(s, 200, "{v}");
    assert!(matches!(message, WorkMessage::Capture(_)), "{message:?}");
    assert!(
        matches!(outcome, MessageOutcome::Captured { captured: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(v["capture"]["state"], json!("CAPTURED"), "{v}");
    assert_eq!(v["capture"]["tables"], json!(1), "{v}");
    assert_eq!(served_snapshot(&env, &prefix).await, json!(1001));

    // No worker: the bound passes first and the answer says what is pending.
    publish_upstream_version(&upstream, &root, 2).await;
    let mut short = env.state.clone();
    short.config.capture_wait_ms = 50;
    let summary = flotilla_core::reconcile::reconcile(
        &short,
        &AdapterConnector,
        "acme",
        &overlay,
        &flotilla_core::reconcile::RunOptions::default(),
    )
    .await
    .unwrap();
    let capture = flotilla_core::reconcile::freshness::capture_after_run(
        &short, "acme", &overlay, &summary, true,
    )
    .await
    .unwrap();
    assert_eq!(capture["state"], json!("PENDING"), "{capture}");
    assert_eq!(
        capture["pending"],
        json!([{"namespace": ["sales"], "name": "orders"}]),
        "{capture}"
    );
    assert!(
        capture["message"].as_str().unwrap().contains("50 ms"),
        "{capture}"
    );
    assert_eq!(served_snapshot(&env, &prefix).await, json!(1001));
    // The job was queued all the same: the worker captures it.
    let ran = env.drain().await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(served_snapshot(&env, &prefix).await, json!(1002));
}

/// The overlay status and the tables' `upstream` times: tables by state (pending before
/// capture, then visible or not readable), a stuck table listed with its error, since when
/// and how many captures failed, staleness percentiles; failed runs in a row make the overlay
/// `DEGRADED`, then `FAILING`; a pause makes it `PAUSED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overlay_status_shows_stuck_tables_failed_runs_and_staleness() {
    let env = setup_with(None, true).await;
    let upstream = with_unreadable_table().await;
    let (_, overlay, lake, _) = overlay_of(&env, &upstream).await;
    let status_path = format!("/v1/accounts/acme/overlays/{overlay}/status");
    let status = || env.call(reqwest::Method::GET, &status_path, None);
    let (s, v) = status().await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["state"], json!("HEALTHY"), "{v}");
    assert_eq!(v["last_reconcile"], Value::Null, "{v}");
    assert_eq!(v["tables"]["total"], json!(0), "{v}");
    assert_eq!(v["staleness_ms"]["max"], Value::Null, "{v}");

    let reconcile = format!("/v1/accounts/acme/overlays/{overlay}/reconcile");
    let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["capture"], json!({"state": "QUEUED", "tables": 2}), "{v}");
    let (_, v) = status().await;
    assert_eq!(
        v["tables"],
        json!({"total": 2, "visible": 0, "pending": 2, "invalid": 0, "not_readable": 0}),
        "{v}"
    );
    assert_eq!(v["last_reconcile"]["outcome"], json!("SUCCEEDED"), "{v}");
    assert!(v["staleness_ms"]["max"].is_i64(), "{v}");
    env.drain().await;
    // The stuck table is tried again by a second capture: two failed attempts.
    let (s, _) = env
        .call(
            reqwest::Method::POST,
            &format!("/v1/accounts/acme/overlays/{overlay}/capture"),
            None,
        )
        .await;
    assert_eq!(s, 202);
    env.drain().await;
    let first = pointer(&env, &lake, &["sales"], "remote").await.unwrap();
    let (_, v) = status().await;
    assert_eq!(v["state"], json!("DEGRADED"), "{v}");
    assert_eq!(
        v["tables"],
        json!({"total": 2, "visible": 1, "pending": 0, "invalid": 0, "not_readable": 1}),
        "{v}"
    );
    assert_eq!(v["failures_total"], json!(1), "{v}");
    let f = &v["failures"][0];
    assert_eq!(f["object"], json!(["sales", "remote"]), "{v}");
    assert_eq!(f["kind"], json!("TABLE"), "{v}");
    assert_eq!(f["code"], json!("NOT_READABLE"), "{v}");
    assert_eq!(f["attempts"], json!(2), "{v}");
    assert_eq!(f["since"], first["failing_since"], "{v}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("storage credentials"),
        "{v}"
    );
    for k in ["p50", "p99", "max"] {
        assert!(v["staleness_ms"][k].as_i64().is_some_and(|n| n >= 0), "{v}");
    }

    // `/v1` shows each overlay table's upstream times.
    let table = |name: &str| {
        let path = format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables/{name}");
        let env = &env;
        async move { env.call(reqwest::Method::GET, &path, None).await }
    };
    let (s, orders) = table("orders").await;
    assert_eq!(s, 200, "{orders}");
    let up = &orders["upstream"];
    assert_eq!(
        up["changed_at"], orders["managed_by"]["upstream_changed_at"],
        "{orders}"
    );
    assert!(
        up["checked_at"].is_string() && up["visible_at"].is_string(),
        "{orders}"
    );
    let (_, remote) = table("remote").await;
    assert_eq!(remote["upstream"]["visible_at"], Value::Null, "{remote}");
    let (_, listed) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables"),
            None,
        )
        .await;
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{listed}");
    assert!(
        items
            .iter()
            .all(|t| t["upstream"]["checked_at"].is_string()),
        "{listed}"
    );

    // Failed runs in a row: DEGRADED while transient, FAILING from the third.
    upstream.add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
        flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
    ));
    for (n, expected) in [(1, "DEGRADED"), (2, "DEGRADED"), (3, "FAILING")] {
        let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
        assert_eq!(s, 503, "{v}");
        let (_, v) = status().await;
        assert_eq!(v["state"], json!(expected), "run {n}: {v}");
        let f = &v["failures"][0];
        assert_eq!(f["kind"], json!("RUN"), "{v}");
        assert_eq!(f["code"], json!("UPSTREAM_UNAVAILABLE"), "{v}");
        assert_eq!(f["attempts"], json!(n), "{v}");
        assert_eq!(v["failures_total"], json!(2), "{v}");
    }
    upstream.clear_faults();
    let (s, _) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200);
    let (_, v) = status().await;
    assert_eq!(
        v["state"],
        json!("DEGRADED"),
        "the stuck table remains: {v}"
    );
    let (s, v) = env
        .call(
            reqwest::Method::PATCH,
            &format!("/v1/accounts/acme/overlays/{overlay}"),
            Some(json!({"paused": true})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, v) = status().await;
    assert_eq!(v["state"], json!("PAUSED"), "{v}");
}

/// `POST .../notify` refreshes only what it names: the fixture's request log shows one load
/// of the named table (no namespace walk, no other table), the change is published and its
/// capture queued and run; the table is confirmed (`checked_at`). A name outside the
/// selection is `400` before any upstream request, as is a request over the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_refreshes_only_the_named_tables() {
    let env = setup_with(None, true).await;
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["sales"]);
    upstream.add_namespace(&["hr"]);
    upstream.add_table(&["sales"], "orders");
    upstream.add_table(&["sales"], "items");
    let (_, overlay, lake, prefix) = overlay_of(&env, &upstream).await;
    let reconcile = format!("/v1/accounts/acme/overlays/{overlay}/reconcile");
    let (s, v) = env.call(reqwest::Method::POST, &reconcile, None).await;
    assert_eq!(s, 200, "{v}");
    env.drain().await;
    let before = pointer(&env, &lake, &["sales"], "orders").await.unwrap();

    assert!(upstream.update_table_schema(
        &["sales"],
        "orders",
        json!({"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "id", "required": false, "type": "long"},
            {"id": 2, "name": "note", "required": false, "type": "string"}]}),
    ));
    let changed = upstream
        .table_metadata_location(&["sales"], "orders")
        .unwrap();
    assert!(upstream.update_table_schema(
        &["sales"],
        "items",
        json!({"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "sku", "required": false, "type": "string"}]}),
    ));
    upstream.log().clear();
    let notify = format!("/v1/accounts/acme/overlays/{overlay}/notify");
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &notify,
            Some(json!({"tables": [{"namespace": ["sales"], "name": "orders"}]})),
        )
        .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["tables"]["updated"], json!(1), "{v}");
    assert_eq!(v["capture"], json!({"state": "QUEUED", "tables": 1}), "{v}");
    let touched: Vec<String> = upstream
        .log()
        .filter(|r| r.path.contains("/namespaces"))
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        touched.len() == 1 && touched[0].ends_with("/namespaces/sales/tables/orders"),
        "only the named table is loaded: {touched:?}"
    );
    let ran = env.drain().await;
    assert!(
        matches!(
            ran.as_slice(),
            [(
                WorkMessage::Capture(_),
                MessageOutcome::Captured { captured: 1, .. }
            )]
        ),
        "{ran:?}"
    );
    let after = pointer(&env, &lake, &["sales"], "orders").await.unwrap();
    assert_eq!(after["metadata_location"], json!(changed));
    assert_ne!(after["metadata_location"], before["metadata_location"]);
    let (_, v) = env
        .call(
            reqwest::Method::GET,
            &format!("/iceberg/v1/{prefix}/namespaces/sales/tables/orders"),
            None,
        )
        .await;
    assert_eq!(v["metadata-location"], json!(changed), "served: {v}");
    // The unnamed table keeps its stored (now stale) version.
    let (_, items) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables/items"),
            None,
        )
        .await;
    assert_ne!(
        items["metadata_location"],
        json!(
            upstream
                .table_metadata_location(&["sales"], "items")
                .unwrap()
        ),
        "{items}"
    );
    // A namespace named: listed and loaded, the unchanged table confirmed.
    upstream.log().clear();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &notify,
            Some(json!({"namespaces": [["sales"]]})),
        )
        .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["tables"]["updated"], json!(1), "items: {v}");
    assert_eq!(v["tables"]["unchanged"], json!(1), "orders: {v}");
    assert_eq!(
        upstream.log().count("GET", "/namespaces"),
        0,
        "no walk of the namespace tree"
    );
    let (_, orders) = env
        .call(
            reqwest::Method::GET,
            &format!("/v1/accounts/acme/catalogs/{lake}/namespaces/sales/tables/orders"),
            None,
        )
        .await;
    let checked = orders["upstream"]["checked_at"].as_str().unwrap();
    let changed_at = orders["upstream"]["changed_at"].as_str().unwrap();
    assert!(
        flotilla_domain::clock::ms_from_rfc3339(checked)
            > flotilla_domain::clock::ms_from_rfc3339(changed_at),
        "confirmed after it changed: {orders}"
    );
    env.drain().await;

    // Outside the selection, or over the bound: refused before any upstream request.
    upstream.log().clear();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &notify,
            Some(json!({"namespaces": [["hr"]], "tables": [{"namespace": ["sales"], "name": "orders"}]})),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["details"]["outside"], json!([["hr"]]), "{v}");
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"namespace": ["sales"], "name": format!("t{i}")}))
        .collect();
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &notify,
            Some(json!({"tables": many})),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = env
        .call(reqwest::Method::POST, &notify, Some(json!({})))
        .await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            &notify,
            Some(json!({"tables": [{"namespace": ["sales"], "name": "orders", "extra": 1}]})),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(upstream.log().is_empty(), "{:?}", upstream.log().entries());
}
