//! Reconciliation benchmark (not a test): one overlay materializing N tables in M namespaces
//! from the Iceberg REST fixture (in-process, loopback HTTP, bearer authentication) into a
//! catalog on the embedded redb metastore, through the real catalog-access adapter. Measures
//! the first run and a no-op rerun: wall time, upstream requests (the fixture's request log),
//! metastore requests, items read and written (`CountingMetastore`, the counters of
//! `/v1/admin/metrics`), and the process's peak RSS (`VmHWM`).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example reconcile_bench [-- TABLES NAMESPACES]`
//! (default 10000 100). Prints a table and writes `bench-results/reconcile.json`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::reconcile::{AdapterConnector, ReconcileSummary, RunOptions, reconcile};
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TOKEN: &str = "bench-token-0001";
const UPSTREAM: &str = "bench-upstream-token";

async fn post(state: &AppState, path: &str, body: Value) -> BenchResult<Value> {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))?;
    let resp = flotilla_core::router(state.clone()).oneshot(req).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let v: Value = serde_json::from_slice(&bytes)?;
    if !status.is_success() {
        return Err(format!("{path}: {status} {v}").into());
    }
    Ok(v)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

struct RunFigures {
    label: &'static str,
    wall_ms: u128,
    upstream_requests: usize,
    upstream_not_modified: usize,
    metastore: MetricsSnapshot,
    peak_rss_kib: u64,
    summary: ReconcileSummary,
}

fn delta(a: MetricsSnapshot, b: MetricsSnapshot) -> MetricsSnapshot {
    MetricsSnapshot {
        get: b.get - a.get,
        batch_get: b.batch_get - a.batch_get,
        query: b.query - a.query,
        count: b.count - a.count,
        transact: b.transact - a.transact,
        errors: b.errors - a.errors,
        items_read: b.items_read - a.items_read,
        items_written: b.items_written - a.items_written,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> BenchResult<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let tables = args.first().copied().unwrap_or(10_000);
    let namespaces = args.get(1).copied().unwrap_or(100).max(1);

    let fx = IcebergFixture::start().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM]);
    for n in 0..namespaces {
        let ns = format!("ns{n:03}");
        fx.add_namespace(&[&ns]);
    }
    for t in 0..tables {
        let ns = format!("ns{:03}", t % namespaces);
        fx.add_table(&[&ns], &format!("t{t:05}"));
    }

    let dir = tempfile::tempdir()?;
    let counting = Arc::new(CountingMetastore::new(RedbMetastore::open(
        dir.path().join("meta.redb"),
    )?));
    let key = flotilla_secrets::local::SecretKey::generate();
    let creds =
        flotilla_secrets::local::LocalEncryptedStore::with_key(dir.path().join("secrets"), &key)?;
    let mut tokens = StaticTokens::new();
    tokens.add(TOKEN, true, vec![]);
    let config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    let state = AppState::new(
        counting.clone(),
        Arc::new(SystemClock),
        Arc::new(tokens),
        config,
    )
    .with_credentials(Arc::new(creds));
    post(&state, "/v1/accounts", json!({"id": "bench"})).await?;
    let cat = post(
        &state,
        "/v1/accounts/bench/catalogs",
        json!({"display_name": "analytics"}),
    )
    .await?;
    let catalog = cat["id"].as_str().ok_or("catalog id")?.to_owned();
    let int = post(
        &state,
        "/v1/accounts/bench/integrations",
        json!({"display_name": "up", "type": "ICEBERG_REST", "uri": fx.uri(),
               "authentication": {"type": "BEARER"}, "credentials": {"token": UPSTREAM}}),
    )
    .await?;
    let integration = int["id"].as_str().ok_or("integration id")?.to_owned();
    let ovl = post(
        &state,
        "/v1/accounts/bench/overlays",
        json!({"display_name": "import", "integration_id": integration, "catalog_id": catalog}),
    )
    .await?;
    let overlay = ovl["id"].as_str().ok_or("overlay id")?.to_owned();

    // The fixture's 10,000 tables of metadata live in this process too: report the peak
    // before the first run so the reconciler's own share can be read off.
    let baseline_rss_kib = peak_rss_kib();
    let mut runs = Vec::new();
    for label in ["first run", "no-op rerun"] {
        fx.log().clear();
        let before = counting.snapshot();
        let start = Instant::now();
        let summary = reconcile(
            &state,
            &AdapterConnector,
            "bench",
            &overlay,
            &RunOptions::default(),
        )
        .await?;
        let wall_ms = start.elapsed().as_millis();
        let after = counting.snapshot();
        let log = fx.log().entries();
        runs.push(RunFigures {
            label,
            wall_ms,
            upstream_requests: log.len(),
            upstream_not_modified: log.iter().filter(|r| r.status == Some(304)).count(),
            metastore: delta(before, after),
            peak_rss_kib: peak_rss_kib(),
            summary,
        });
    }

    println!(
        "reconcile: {tables} tables in {namespaces} namespaces (Iceberg REST fixture -> redb)"
    );
    println!(
        "| run | wall | upstream requests (304) | metastore requests | transactions | items read | items written | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut out = Vec::new();
    for r in &runs {
        println!(
            "| {} | {:.2} s | {} ({}) | {} | {} | {} | {} | {} MiB |",
            r.label,
            r.wall_ms as f64 / 1000.0,
            r.upstream_requests,
            r.upstream_not_modified,
            r.metastore.requests(),
            r.metastore.transact,
            r.metastore.items_read,
            r.metastore.items_written,
            r.peak_rss_kib / 1024
        );
        out.push(json!({
            "run": r.label,
            "wall_ms": r.wall_ms,
            "upstream_requests": r.upstream_requests,
            "upstream_not_modified": r.upstream_not_modified,
            "metastore": {
                "requests": r.metastore.requests(),
                "get": r.metastore.get,
                "query": r.metastore.query,
                "count": r.metastore.count,
                "transact": r.metastore.transact,
                "items_read": r.metastore.items_read,
                "items_written": r.metastore.items_written,
            },
            "peak_rss_kib": r.peak_rss_kib,
            "summary": r.summary.to_json(),
        }));
    }
    let doc = json!({"tables": tables, "namespaces": namespaces, "baseline_peak_rss_kib": baseline_rss_kib, "runs": out});
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results");
    std::fs::create_dir_all(&path)?;
    std::fs::write(
        path.join("reconcile.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    println!("wrote bench-results/reconcile.json");
    Ok(())
}
