//! Delta capture figures for `docs/performance.md` ("Capture of Delta tables"): a Unity
//! Catalog fixture upstream with N Delta tables of F Parquet files each (real Delta logs and
//! files on the local file system), one overlay, then the first capture of every table
//! (log replay and footer validation), a capture with nothing changed (one `_last_checkpoint`
//! read and one log listing per table; metastore requests, writes, upstream requests), and a
//! revalidation.
//!
//! ```sh
//! cargo run -p flotilla-iceberg-rest --example delta_capture_bench -- [TABLES] [FILES] [OUT]
//! ```
//!
//! Defaults: 1,000 tables x 10 files of 100 rows, each table ten commits (one file each).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::reconcile::capture::{self, CaptureOptions};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::{
    Consistency, DynMetastore, Item, Key, Metastore, MetastoreError, Page, Query, Transaction,
};
use flotilla_testkit::delta_files::DeltaTable;
use flotilla_testkit::unity_fixture::{
    DEFAULT_BEARER_TOKEN, UnityColumn, UnityFixture, UnityTable,
};
use serde_json::{Value, json};

const OPERATOR: &str = "bench-operator-token";

struct Shared(DynMetastore);

#[async_trait]
impl Metastore for Shared {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.0.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.0.batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.0.query(q).await
    }
    async fn count(&self, pk: &str, sk: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.0.count(pk, sk, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.0.transact(tx).await
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tables: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let files: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10);
    let out = args.get(3).cloned();
    let rows = 100;
    let dir = tempfile::tempdir().expect("tempdir");

    // The upstream: real Delta tables, one commit per file.
    let upstream = UnityFixture::start().await;
    upstream.add_catalog("main");
    upstream.add_schema("main", "bench");
    let t0 = Instant::now();
    for i in 0..tables {
        let name = format!("t{i:05}");
        let mut t = DeltaTable::create(&dir.path().join("upstream").join(&name), 1, rows);
        for _ in 1..files {
            t.append(rows);
        }
        upstream.add_table(
            "main",
            "bench",
            UnityTable::delta(&name, &t.location()).with_columns(vec![
                UnityColumn::primitive("id", "long", false),
                UnityColumn::primitive("name", "string", true),
            ]),
        );
    }
    let written = t0.elapsed();

    // The host.
    let opts = flotilla_runtime::local::LocalOptions {
        data_dir: dir.path().join("data"),
        allow_insecure_upstreams: true,
        bootstrap_token: Some(OPERATOR.to_owned()),
        tokens_file: None,
        warehouse_root: None,
    };
    let state = flotilla_runtime::local::build(&opts).expect("stack").state;
    let app = flotilla_core::router(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http
                .post(format!("http://{addr}{path}"))
                .bearer_auth(OPERATOR)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            assert!(status.is_success(), "{path}: {status} {v}");
            v
        }
    };
    post("/v1/accounts".into(), json!({"id": "acme"})).await;
    let cat = post(
        "/v1/accounts/acme/catalogs".into(),
        json!({"display_name": "lake"}),
    )
    .await;
    let integration = post(
        "/v1/accounts/acme/integrations".into(),
        json!({"display_name": "up", "type": "UNITY", "uri": upstream.endpoint(),
            "properties": {"unity.catalog": "main"},
            "authentication": {"type": "BEARER"},
            "credentials": {"token": DEFAULT_BEARER_TOKEN}}),
    )
    .await;
    let overlay = post(
        "/v1/accounts/acme/overlays".into(),
        json!({"display_name": "imp", "integration_id": integration["id"],
            "catalog_id": cat["id"], "include_namespaces": [["bench"]]}),
    )
    .await;
    let overlay = overlay["id"].as_str().unwrap().to_owned();
    post(
        format!("/v1/accounts/acme/overlays/{overlay}/reconcile"),
        json!({}),
    )
    .await;

    // First capture of every table.
    let t = Instant::now();
    let first = capture::capture(
        &state,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions::default(),
    )
    .await
    .expect("capture");
    let first_time = t.elapsed();
    assert_eq!(first.captured as usize, tables, "{first:?}");
    assert_eq!(first.file_errors, 0);

    // Nothing changed.
    let counting = CountingMetastore::new(Shared(state.store.clone()));
    let counters = counting.counters();
    let mut counted = state.clone();
    counted.store = Arc::new(counting);
    let before = upstream.log().len();
    let t = Instant::now();
    let again = capture::capture(
        &counted,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions::default(),
    )
    .await
    .expect("capture");
    let again_time = t.elapsed();
    let upstream_requests = upstream.log().len() - before;
    let snap = counters.snapshot();
    assert_eq!(again.unchanged as usize, tables);

    // Revalidation of every table (every footer read again; no metadata change).
    let t = Instant::now();
    let re = capture::capture(
        &state,
        &AdapterConnector,
        "acme",
        &overlay,
        &CaptureOptions {
            revalidate: true,
            ..CaptureOptions::default()
        },
    )
    .await
    .expect("revalidate");
    let re_time = t.elapsed();

    let total_files = tables * files;
    let report = format!(
        "Delta capture bench: {tables} Unity Delta tables x {files} Parquet files of {rows} rows, one commit each (local files; written in {:.1} s)\n\
         first capture: {:.2} s, {:.1} ms/table, {} files recorded, {} footers validated, {:.0} files/s\n\
         unchanged capture: {:.1} ms total; metastore: {} requests ({} get, {} query, {} transact), {} items read, {} items written; upstream requests: {}\n\
         revalidation (every footer again): {:.2} s, {:.0} files/s, {} captured\n",
        written.as_secs_f64(),
        first_time.as_secs_f64(),
        first_time.as_secs_f64() * 1000.0 / tables as f64,
        first.files,
        first.files_validated,
        total_files as f64 / first_time.as_secs_f64(),
        again_time.as_secs_f64() * 1000.0,
        snap.requests(),
        snap.get,
        snap.query,
        snap.transact,
        snap.items_read,
        snap.items_written,
        upstream_requests,
        re_time.as_secs_f64(),
        re.files_validated as f64 / re_time.as_secs_f64(),
        re.captured,
    );
    print!("{report}");
    if let Some(path) = out {
        std::fs::write(path, &report).expect("write the report");
    }
}
