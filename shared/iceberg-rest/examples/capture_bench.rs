//! Capture figures for `docs/performance.md` ("Capture"): an Iceberg REST fixture upstream
//! with N tables of F Parquet files each (real files on the local file system), one overlay,
//! then the first capture of every table, a capture with nothing changed (metastore
//! requests, writes and upstream requests), and footer validation alone.
//!
//! ```sh
//! cargo run -p flotilla-iceberg-rest --example capture_bench -- [TABLES] [FILES] [OUT]
//! ```
//!
//! Defaults: 1,000 tables x 10 files of 100 rows. `OUT`: a file the figures are written to
//! (also printed).

use std::time::Instant;

use flotilla_testkit::iceberg_files::write_table;
use flotilla_testkit::iceberg_fixture::IcebergFixture;
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

    // The upstream: real tables.
    let upstream = IcebergFixture::start().await;
    upstream.add_namespace(&["bench"]);
    let t0 = Instant::now();
    for i in 0..tables {
        let name = format!("t{i:05}");
        let w = write_table(
            &dir.path().join("upstream").join(&name),
            &uuid::Uuid::new_v4().to_string(),
            1,
            files,
            rows,
        )
        .await;
        upstream.register_table(&["bench"], &name, &w.metadata_location, w.metadata);
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
        json!({"display_name": "up", "type": "ICEBERG_REST", "uri": upstream.uri(),
            "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}}),
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
        "capture bench: {tables} tables x {files} Parquet files of {rows} rows (local files; written in {:.1} s)\n{}",
        written.as_secs_f64(),
        phases.report(),
    );
    print!("{report}");
    if let Some(path) = out {
        std::fs::write(path, &report).expect("write the report");
    }
}
