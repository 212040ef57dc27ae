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

use std::time::Instant;

use flotilla_testkit::delta_files::DeltaTable;
use flotilla_testkit::unity_fixture::{
    DEFAULT_BEARER_TOKEN, UnityColumn, UnityFixture, UnityTable,
};
use serde_json::{Value, json};

const OPERATOR: &str = "bench-operator-token";

#[path = "support/capture_phases.rs"]
mod phases;

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
        // The fixture upstreams' table files lie in temporary directories.
        upstream_files_root: Some(flotilla_testkit::upstream_files_root()),
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

    let phases = phases::run(&state, &overlay, tables, files, || upstream.log().len()).await;

    let report = format!(
        "Delta capture bench: {tables} Unity Delta tables x {files} Parquet files of {rows} rows, one commit each (local files; written in {:.1} s)\n{}",
        written.as_secs_f64(),
        phases.report(),
    );
    print!("{report}");
    if let Some(path) = out {
        std::fs::write(path, &report).expect("write the report");
    }
}
