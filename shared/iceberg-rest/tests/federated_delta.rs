//! Capture of Delta tables end to end (`docs/capture.md`, "Delta tables"): a Unity Catalog
//! fixture whose tables are real Delta logs (JSON commits, a Parquet checkpoint) over real
//! Parquet files on the local file system, and a Delta Sharing fixture whose table query
//! lists real Parquet files behind presigned fixture URLs. Overlays materialize them; capture
//! records the version, schema, files and statistics; a corrupt file makes a table
//! invisible, the override restores visibility, a repaired file and a revalidation clear
//! the errors; an unchanged version writes nothing and reads no file; an unsupported
//! protocol feature is reported with its reason; the Iceberg endpoint answers `404
//! NOT_SERVED` for Delta tables.

use std::sync::Arc;

use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::reconcile::capture::{self, CaptureOptions, CaptureSummary};
use flotilla_core::state::AppState;
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::Consistency;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_testkit::delta_files::{DeltaTable, schema_string};
use flotilla_testkit::delta_sharing_fixture::{
    DEFAULT_RECIPIENT_TOKEN, DeltaSharingFixture, SharingFile, SharingTable,
};
use flotilla_testkit::unity_fixture::{
    DEFAULT_BEARER_TOKEN, UnityColumn, UnityFixture, UnityTable,
};
use serde_json::{Value, json};

const OPERATOR: &str = "delta-operator-token";
const ACME: &str = "delta-acme-token-0001";

struct Env {
    state: AppState,
    endpoint: String,
    http: reqwest::Client,
    lake: String,
    prefix: String,
    /// The host's in-process reconcile queue (describing with `revalidate=true` enqueues
    /// capture jobs on it); the test drains it by running the worker on every delivery.
    work: tokio::sync::Mutex<flotilla_runtime::local::LocalQueue>,
    _dir: tempfile::TempDir,
}

impl Env {
    /// Runs the worker on every message waiting in the queue, in order (the worker of
    /// `flotilla serve` would); answers how many ran.
    async fn drain(&self) -> usize {
        let ran = self
            .work
            .lock()
            .await
            .drain(&self.state, &AdapterConnector)
            .await;
        for (_, result, outcome) in &ran {
            assert_eq!(
                *result,
                flotilla_runtime::queue::DeliveryResult::Done,
                "{outcome:?}"
            );
        }
        ran.len()
    }

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

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// An integration and an overlay of `include` into the lake catalog, reconciled once.
    async fn overlay(&self, integration: Value, include: Value) -> (String, String) {
        let (s, v) = self
            .call(
                reqwest::Method::POST,
                "/v1/accounts/acme/integrations",
                Some(integration),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let integration = v["id"].as_str().unwrap().to_owned();
        let (s, v) = self
            .call(
                reqwest::Method::POST,
                "/v1/accounts/acme/overlays",
                Some(json!({"display_name": "imp", "integration_id": integration,
                    "catalog_id": self.lake, "include_namespaces": include})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let overlay = v["id"].as_str().unwrap().to_owned();
        self.reconcile(&overlay).await;
        (integration, overlay)
    }

    /// The run alone (the route would queue the capture job too; these tests run capture
    /// themselves).
    async fn reconcile(&self, overlay: &str) {
        flotilla_core::reconcile::reconcile(
            &self.state,
            &AdapterConnector,
            "acme",
            overlay,
            &flotilla_core::reconcile::RunOptions::default(),
        )
        .await
        .unwrap();
    }

    async fn capture(&self, overlay: &str, revalidate: bool) -> CaptureSummary {
        capture::capture(
            &self.state,
            &AdapterConnector,
            "acme",
            overlay,
            &CaptureOptions {
                revalidate,
                ..CaptureOptions::default()
            },
        )
        .await
        .unwrap()
    }

    /// A capture through a counting metastore: its summary and (transactions, items written).
    async fn counted_capture(&self, overlay: &str) -> (CaptureSummary, (u64, u64)) {
        let counting =
            CountingMetastore::new(flotilla_metastore::SharedStore(self.state.store.clone()));
        let counters = counting.counters();
        let mut counted = self.state.clone();
        counted.store = Arc::new(counting);
        let s = capture::capture(
            &counted,
            &AdapterConnector,
            "acme",
            overlay,
            &CaptureOptions::default(),
        )
        .await
        .unwrap();
        let snap = counters.snapshot();
        (s, (snap.transact, snap.items_written))
    }

    fn validation(&self, ns: &str, table: &str) -> String {
        format!(
            "/v1/accounts/acme/catalogs/{}/namespaces/{ns}/tables/{table}/validation",
            self.lake
        )
    }

    fn visibility(&self, ns: &str, table: &str) -> String {
        format!(
            "/v1/accounts/acme/catalogs/{}/namespaces/{ns}/tables/{table}/visibility",
            self.lake
        )
    }

    /// The captured state object of a table.
    async fn captured(&self, ns: &[&str], table: &str) -> capture::record::CapturedTable {
        let rel = flotilla_core::service::relations::load(
            self.state.store.as_ref(),
            &self.lake,
            &flotilla_domain::names::NamespacePath::new(
                ns.iter().map(|s| (*s).to_owned()).collect(),
            )
            .unwrap(),
            table,
        )
        .await
        .unwrap()
        .unwrap();
        let p = capture::service::pointer(
            self.state.store.as_ref(),
            &self.lake,
            &rel.value.id,
            Consistency::Strong,
        )
        .await
        .unwrap()
        .unwrap();
        let files = capture::storage::CatalogFiles::open(
            &self.state,
            &flotilla_core::service::catalogs::load(self.state.store.as_ref(), "acme", &self.lake)
                .await
                .unwrap()
                .value,
        )
        .unwrap();
        use object_store::ObjectStoreExt;
        let got = files
            .store
            .get(&object_store::path::Path::parse(p.value.object.as_deref().unwrap()).unwrap())
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice(&got).unwrap()
    }
}

async fn setup() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        serde_json::to_vec(&json!({"tokens": [{"token": ACME, "accounts": ["acme"]}]})).unwrap(),
    )
    .unwrap();
    let opts = flotilla_runtime::local::LocalOptions {
        data_dir: dir.path().join("data"),
        // The fixture upstreams listen on loopback; their tables lie on file:// paths.
        allow_insecure_upstreams: true,
        bootstrap_token: Some(OPERATOR.to_owned()),
        tokens_file: Some(tokens),
        warehouse_root: None,
        // The fixture upstreams' table files lie in temporary directories.
        upstream_files_root: Some(flotilla_testkit::upstream_files_root()),
    };
    let stack = flotilla_runtime::local::build(&opts).expect("local stack");
    let root = opts.warehouse_root().canonicalize().unwrap();
    let work = stack.work;
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
    let r = http
        .post(format!("{endpoint}/v1/accounts"))
        .bearer_auth(OPERATOR)
        .json(&json!({"id": "acme"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut env = Env {
        state,
        endpoint,
        http,
        lake: String::new(),
        prefix: String::new(),
        work: tokio::sync::Mutex::new(work),
        _dir: dir,
    };
    let (s, v) = env
        .call(
            reqwest::Method::POST,
            "/v1/accounts/acme/catalogs",
            Some(json!({"display_name": "lake"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    env.lake = v["id"].as_str().unwrap().to_owned();
    let (_, cfg) = env.get("/iceberg/v1/config?warehouse=acme/lake").await;
    env.prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    env
}

fn columns() -> Vec<UnityColumn> {
    vec![
        UnityColumn::primitive("id", "long", false),
        UnityColumn::primitive("name", "string", true),
    ]
}

/// Makes a Parquet file end without its magic (the footer becomes unreadable); answers the
/// original bytes.
fn corrupt(path: &std::path::Path) -> Vec<u8> {
    let original = std::fs::read(path).unwrap();
    let mut bad = original.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(b"XXXX");
    std::fs::write(path, bad).unwrap();
    original
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unity_delta_tables_are_captured_from_their_log_validated_and_not_served_as_iceberg() {
    let env = setup().await;
    let data = tempfile::tempdir().unwrap();
    // orders: commit 0 (two files of 10 rows), 1 (five rows), a checkpoint at 1, commit 2
    // (three rows), commit 3 removing the first file: live 10 + 5 + 3 rows in three files.
    let mut orders = DeltaTable::create(&data.path().join("orders"), 2, 10);
    orders.append(5);
    orders.checkpoint();
    orders.append(3);
    orders.remove_first();
    // mapped: a reader feature capture does not implement (column mapping by name).
    let mut mapped = DeltaTable::create(&data.path().join("mapped"), 1, 4);
    mapped.set_protocol(
        json!({"minReaderVersion": 3, "minWriterVersion": 7,
            "readerFeatures": ["columnMapping"], "writerFeatures": ["columnMapping"]}),
        json!({"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "2"}),
    );
    let uc = UnityFixture::start().await;
    uc.add_catalog("main");
    uc.add_schema("main", "sales");
    for (name, t) in [("orders", &orders), ("mapped", &mapped)] {
        uc.add_table(
            "main",
            "sales",
            UnityTable::delta(name, &t.location()).with_columns(columns()),
        );
    }
    let (integration, overlay) = env
        .overlay(
            json!({"display_name": "uc", "type": "UNITY", "uri": uc.endpoint(),
                "properties": {"unity.catalog": "main"},
                "authentication": {"type": "BEARER"},
                "credentials": {"token": DEFAULT_BEARER_TOKEN}}),
            json!([["sales"]]),
        )
        .await;
    let validation = env.validation("sales", "orders");
    let (_, v) = env.get(&validation).await;
    assert_eq!(v["state"], "NOT_CAPTURED", "{v}");

    let s = env.capture(&overlay, false).await;
    assert_eq!(
        (
            s.captured,
            s.invalid,
            s.not_readable,
            s.files,
            s.files_validated
        ),
        (2, 0, 1, 3, 3),
        "{s:?}"
    );
    let (_, v) = env.get(&validation).await;
    assert_eq!(v["state"], "VALID", "{v}");
    assert_eq!(v["visible"], true);
    assert_eq!(
        (v["files"].clone(), v["records"].clone()),
        (json!(3), json!(18))
    );
    assert_eq!(v["snapshot_id"], 3, "the Delta version");
    assert_eq!(
        v["metadata_location"],
        json!(format!(
            "{}/_delta_log/00000000000000000003.json",
            orders.location()
        ))
    );
    let t = env.captured(&["sales"], "orders").await;
    assert_eq!(t.format, "DELTA");
    assert_eq!(t.schema["fields"][0]["name"], "id");
    assert_eq!(t.partition_spec, json!({"partition_columns": []}));
    assert_eq!(t.metadata["protocol"]["minReaderVersion"], 1);
    let mut records: Vec<u64> = t.files.iter().map(|f| f.record_count).collect();
    records.sort_unstable();
    assert_eq!(records, [3, 5, 10]);
    let f = t.files.iter().find(|f| f.record_count == 5).unwrap();
    assert!(f.path.starts_with(&orders.location()), "{}", f.path);
    assert_eq!(f.format, "PARQUET");
    assert_eq!(
        f.stats.lower_bounds.values().next().map(String::as_str),
        Some("3000"),
        "{:?}",
        f.stats
    );
    assert_eq!(f.stats.null_value_counts.len(), 2, "{:?}", f.stats);

    // The unsupported feature is reported, with its reason.
    let (_, v) = env.get(&env.validation("sales", "mapped")).await;
    assert_eq!(v["state"], "NOT_READABLE", "{v}");
    assert_eq!(v["visible"], false);
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("not capturable") && reason.contains("columnMapping"),
        "{v}"
    );

    // The Iceberg endpoint serves Iceberg tables only: a Delta overlay table is NOT_SERVED.
    let load = format!("/iceberg/v1/{}/namespaces/sales/tables/orders", env.prefix);
    let (s, v) = env.get(&load).await;
    assert_eq!(s, 404, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("NOT_SERVED") && msg.contains("DELTA"), "{v}");
    assert_eq!(v["error"]["type"], "NoSuchTableException", "{v}");
    let (_, v) = env
        .get(&format!(
            "/iceberg/v1/{}/namespaces/sales/tables",
            env.prefix
        ))
        .await;
    assert_eq!(v["identifiers"], json!([]), "{v}");

    // Unchanged versions: no write, and no data file read (a corrupt file goes unnoticed).
    let live = orders.file_path(&orders.files[0]);
    let original = corrupt(&live);
    let (s, writes) = env.counted_capture(&overlay).await;
    assert_eq!((s.captured, s.unchanged), (0, 2), "{s:?}");
    assert_eq!(writes, (0, 0));

    // Revalidation reads it: one error, the table becomes invisible.
    let s = env.capture(&overlay, true).await;
    assert_eq!((s.invalid, s.file_errors), (1, 1), "{s:?}");
    let (_, v) = env.get(&validation).await;
    assert_eq!(
        (v["state"].clone(), v["visible"].clone()),
        (json!("INVALID"), json!(false))
    );
    let bad_path = v["validation_errors"][0]["file_path"].as_str().unwrap();
    assert!(bad_path.ends_with(&orders.files[0].path), "{v}");
    let (_, v) = env
        .get(&format!(
            "/v1/accounts/acme/catalogs/{}/validation-errors",
            env.lake
        ))
        .await;
    assert_eq!(v["items"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["items"][0]["format"], "DELTA");
    assert_eq!(v["items"][0]["display_path"], "sales.orders");

    // The override makes it visible; the error stays listed.
    let (s, v) = env
        .call(
            reqwest::Method::PUT,
            &env.visibility("sales", "orders"),
            Some(json!({"override": true})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["visible"], true, "{v}");
    assert_eq!(v["validation_errors"].as_array().unwrap().len(), 1);

    // The repaired file and a revalidation (describing the integration) clear the errors.
    std::fs::write(&live, original).unwrap();
    env.call(
        reqwest::Method::PUT,
        &env.visibility("sales", "orders"),
        Some(json!({"override": false})),
    )
    .await;
    let (s, v) = env
        .get(&format!(
            "/v1/accounts/acme/integrations/{integration}?revalidate=true"
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    // One revalidation job per active overlay, run by the worker.
    assert_eq!(v["revalidation"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(env.drain().await, 1);
    let (_, v) = env.get(&validation).await;
    assert_eq!(v["state"], "VALID", "{v}");
    assert_eq!(v["validation_errors"], json!([]));

    // A new commit upstream is captured by the next job; the other table stays unchanged.
    orders.append(7);
    let s = env.capture(&overlay, false).await;
    assert_eq!((s.captured, s.unchanged), (1, 1), "{s:?}");
    let (_, v) = env.get(&validation).await;
    assert_eq!(
        (v["snapshot_id"].clone(), v["records"].clone()),
        (json!(4), json!(25))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_sharing_tables_are_captured_from_the_table_query_and_validated_by_range_reads() {
    let env = setup().await;
    let data = tempfile::tempdir().unwrap();
    // Real Parquet files (a Delta table's), shared through presigned fixture URLs.
    let t = DeltaTable::create(&data.path().join("orders"), 2, 6);
    let shared: Vec<SharingFile> = t
        .files
        .iter()
        .map(|f| SharingFile::at(&t.file_path(f), 6))
        .collect();
    let ds = DeltaSharingFixture::start().await;
    let mut table = SharingTable::new("orders", "s3://shared-bucket/orders")
        .with_schema_string(&schema_string())
        .with_files(shared.clone());
    table.partition_columns = Vec::new();
    ds.add_table("sales", "retail", table);
    let (_, overlay) = env
        .overlay(
            json!({"display_name": "ds", "type": "DELTA_SHARING", "uri": ds.base_url(),
                "authentication": {"type": "BEARER"},
                "credentials": {"token": DEFAULT_RECIPIENT_TOKEN}}),
            json!([["sales", "retail"]]),
        )
        .await;
    let s = env.capture(&overlay, false).await;
    assert_eq!(
        (s.captured, s.invalid, s.not_readable, s.files_validated),
        (1, 0, 0, 2),
        "{s:?}"
    );
    let validation = env.validation("sales%1Fretail", "orders");
    let (_, v) = env.get(&validation).await;
    assert_eq!(v["state"], "VALID", "{v}");
    assert_eq!(
        (v["snapshot_id"].clone(), v["records"].clone()),
        (json!(3), json!(12))
    );
    let captured = env.captured(&["sales", "retail"], "orders").await;
    assert_eq!(captured.format, "DELTA");
    for f in &captured.files {
        assert!(
            !f.path.contains("sig="),
            "no presigned signature is stored: {}",
            f.path
        );
        assert!(f.path.contains("/_files/"), "{}", f.path);
    }
    // Footers were read with ranged requests, without the recipient token.
    let reads = ds.requests();
    let file_reads: Vec<_> = reads
        .iter()
        .filter(|r| r.path.contains("/_files/"))
        .collect();
    assert!(!file_reads.is_empty());
    for r in &file_reads {
        assert!(
            r.headers
                .get("range")
                .is_some_and(|v| v.starts_with("bytes=")),
            "{r:?}"
        );
        assert!(!r.headers.contains_key("authorization"), "{r:?}");
        assert_eq!(r.status, Some(206), "{r:?}");
    }

    // Unchanged (the relation states the captured version): no upstream request, no write.
    let before = ds.requests().len();
    let (s, writes) = env.counted_capture(&overlay).await;
    assert_eq!((s.captured, s.unchanged), (0, 1), "{s:?}");
    assert_eq!(writes, (0, 0));
    assert_eq!(ds.requests().len(), before, "no upstream request");

    // A corrupt shared file: one error, invisible; repaired: valid again.
    let path = t.file_path(&t.files[1]);
    let original = corrupt(&path);
    let s = env.capture(&overlay, true).await;
    assert_eq!((s.invalid, s.file_errors), (1, 1), "{s:?}");
    let (_, v) = env.get(&validation).await;
    assert_eq!(
        (v["state"].clone(), v["visible"].clone()),
        (json!("INVALID"), json!(false))
    );
    assert!(
        v["validation_errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("footer"),
        "{v}"
    );
    std::fs::write(&path, original).unwrap();
    let s = env.capture(&overlay, true).await;
    assert_eq!((s.captured, s.invalid), (1, 0), "{s:?}");

    // A record count the listing misstates is one error too.
    let mut wrong = shared.clone();
    wrong[0].stats = Some(json!({"numRecords": 99}).to_string());
    ds.set_table_files("sales", "retail", "orders", wrong, 4);
    env.reconcile(&overlay).await;
    let s = env.capture(&overlay, false).await;
    assert_eq!((s.captured, s.file_errors), (1, 1), "{s:?}");
    let (_, v) = env.get(&validation).await;
    assert_eq!(v["snapshot_id"], 4, "{v}");
    let msg = v["validation_errors"][0]["message"].as_str().unwrap();
    assert!(msg.contains("6 rows") && msg.contains("99"), "{v}");

    // A new version with a third file is captured after the reconciliation that sees it.
    let mut more = shared.clone();
    more.push(SharingFile::at(&t.file_path(&t.files[0]), 6));
    more[2].id = "third".into();
    ds.set_table_files("sales", "retail", "orders", more, 5);
    env.reconcile(&overlay).await;
    let s = env.capture(&overlay, false).await;
    assert_eq!((s.captured, s.file_errors, s.files), (1, 0, 3), "{s:?}");
    let (_, v) = env.get(&validation).await;
    assert_eq!(
        (v["state"].clone(), v["records"].clone()),
        (json!("VALID"), json!(18))
    );

    // Not served by the Iceberg endpoint.
    let (s, v) = env
        .get(&format!(
            "/iceberg/v1/{}/namespaces/sales%1Fretail/tables/orders",
            env.prefix
        ))
        .await;
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("NOT_SERVED"),
        "{v}"
    );
}

/// A raw HTTP listener that counts the connections it accepts and answers each with
/// `answer`: a target capture must never reach shows zero.
async fn counting_listener(
    bind: &str,
    answer: String,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = sock.write_all(answer.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, hits)
}

/// A hostile sharing server (`docs/reliability.md`, "Capture honours the address policy"):
/// its table query lists presigned URLs at addresses no reader may contact (the unspecified
/// address, the metadata service), or at a loopback host that redirects there. Capture never
/// connects to them, even with insecure upstreams allowed, and records each file as an
/// error of the table (permanent: a retry would be refused the same way), never a transient
/// failure retried forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_sharing_presigned_urls_at_forbidden_addresses_are_never_contacted() {
    let env = setup().await;
    let data = tempfile::tempdir().unwrap();
    let t = DeltaTable::create(&data.path().join("orders"), 2, 6);
    let shared: Vec<SharingFile> = t
        .files
        .iter()
        .map(|f| SharingFile::at(&t.file_path(f), 6))
        .collect();
    let ds = DeltaSharingFixture::start().await;
    let mut table = SharingTable::new("orders", "s3://shared-bucket/orders")
        .with_schema_string(&schema_string())
        .with_files(shared);
    table.partition_columns = Vec::new();
    ds.add_table("sales", "retail", table);
    let (forbidden, forbidden_hits) = counting_listener(
        "0.0.0.0:0",
        "HTTP/1.1 206 Partial Content\r\nContent-Length: 4\r\nConnection: close\r\n\r\nPAR1"
            .to_owned(),
    )
    .await;
    let unspecified = format!("http://0.0.0.0:{}", forbidden.port());
    let (redirector, redirector_hits) = counting_listener(
        "127.0.0.1:0",
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {unspecified}/latest/meta-data/\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    ds.set_file_url_origin(Some(&unspecified));
    let (_, overlay) = env
        .overlay(
            json!({"display_name": "ds", "type": "DELTA_SHARING", "uri": ds.base_url(),
                "authentication": {"type": "BEARER"},
                "credentials": {"token": DEFAULT_RECIPIENT_TOKEN}}),
            json!([["sales", "retail"]]),
        )
        .await;
    let validation = env.validation("sales%1Fretail", "orders");
    for origin in [
        unspecified.clone(),
        "http://169.254.169.254".to_owned(),
        "http://[fd00:ec2::254]".to_owned(),
        format!("http://{redirector}"),
    ] {
        ds.set_file_url_origin(Some(&origin));
        let s = env.capture(&overlay, true).await;
        assert!(
            s.failed.is_empty(),
            "{origin}: not a transient failure: {s:?}"
        );
        assert_eq!((s.invalid, s.file_errors), (1, 2), "{origin}: {s:?}");
        let (_, v) = env.get(&validation).await;
        assert_eq!(
            (v["state"].clone(), v["visible"].clone()),
            (json!("INVALID"), json!(false)),
            "{origin}: {v}"
        );
        for e in v["validation_errors"].as_array().unwrap() {
            let m = e["message"].as_str().unwrap();
            assert!(m.contains("refused by address policy"), "{origin}: {m}");
            // The presigned URL is a bearer secret: never in a recorded error.
            assert!(!m.contains("sig="), "{origin}: {m}");
        }
    }
    assert_eq!(
        forbidden_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "capture connected to 0.0.0.0"
    );
    // The allowed (insecure mode, loopback) redirector was asked once per file, never
    // again: the refused hop is not retried.
    assert_eq!(redirector_hits.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Uploads every file below `root` to `s3://{bucket}/{prefix}/...` on moto.
async fn upload(s3: &dyn object_store::ObjectStore, root: &std::path::Path, prefix: &str) {
    use object_store::ObjectStoreExt;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_owned();
            let key = object_store::path::Path::parse(format!("{prefix}/{rel}")).unwrap();
            s3.put(&key, std::fs::read(&p).unwrap().into())
                .await
                .unwrap();
        }
    }
}

/// A Unity Delta table on (moto) S3 is read with the temporary credentials Unity vends for
/// it (moto does not check keys; the point is the path: vending, scoping, the integration's
/// S3 endpoint), captured and validated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unity_delta_tables_on_s3_are_read_with_the_credentials_unity_vends() {
    let moto = std::env::var("FLOTILLA_MOTO_ENDPOINT")
        .expect("FLOTILLA_MOTO_ENDPOINT is not set: this test needs moto S3 (scripts/test.sh)");
    let bucket = "flotilla-delta-capture";
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().as_u16() == 409);
    let tenant = format!("t-{}", uuid::Uuid::new_v4().simple());
    let data = tempfile::tempdir().unwrap();
    let mut orders = DeltaTable::create(&data.path().join("orders"), 2, 4);
    orders.append(2);
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .with_endpoint(&moto)
        .with_allow_http(true)
        .build()
        .unwrap();
    let prefix = format!("{tenant}/orders");
    upload(&s3, &orders.root, &prefix).await;
    let location = format!("s3://{bucket}/{prefix}");

    let env = setup().await;
    let uc = UnityFixture::start().await;
    uc.add_catalog("main");
    uc.add_schema("main", "sales");
    uc.add_table(
        "main",
        "sales",
        UnityTable::delta("orders", &location).with_columns(columns()),
    );
    let (_, overlay) = env
        .overlay(
            json!({"display_name": "uc", "type": "UNITY", "uri": uc.endpoint(),
                "properties": {"unity.catalog": "main", "s3.endpoint": moto},
                "authentication": {"type": "BEARER"},
                "credentials": {"token": DEFAULT_BEARER_TOKEN}}),
            json!([["sales"]]),
        )
        .await;
    let s = env.capture(&overlay, false).await;
    assert_eq!(
        (s.captured, s.invalid, s.not_readable, s.files),
        (1, 0, 0, 3),
        "{s:?}"
    );
    let vended = uc.vended();
    assert!(!vended.is_empty(), "credentials were vended for the table");
    assert_eq!(vended[0].operation, "READ");
    assert_eq!(vended[0].url, location);
    let (_, v) = env.get(&env.validation("sales", "orders")).await;
    assert_eq!(
        (v["state"].clone(), v["records"].clone()),
        (json!("VALID"), json!(10))
    );
    assert_eq!(
        v["metadata_location"],
        json!(format!("{location}/_delta_log/00000000000000000001.json"))
    );

    // Unchanged: no write; a corrupt object on S3 is noticed only by a revalidation.
    use object_store::ObjectStoreExt;
    let key =
        object_store::path::Path::parse(format!("{prefix}/{}", orders.files[0].path)).unwrap();
    let original = s3.get(&key).await.unwrap().bytes().await.unwrap();
    let mut bad = original.to_vec();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(b"XXXX");
    s3.put(&key, bad.into()).await.unwrap();
    let (s, writes) = env.counted_capture(&overlay).await;
    assert_eq!((s.captured, s.unchanged, writes), (0, 1, (0, 0)), "{s:?}");
    let s = env.capture(&overlay, true).await;
    assert_eq!((s.invalid, s.file_errors), (1, 1), "{s:?}");
    s3.put(&key, original.into()).await.unwrap();
    let s = env.capture(&overlay, true).await;
    assert_eq!((s.captured, s.invalid), (1, 0), "{s:?}");
}
