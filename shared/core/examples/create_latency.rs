//! Create-table latency on the DynamoDB backend (moto), through the real router: the p50
//! and p90 of `POST .../tables` with and without an `Idempotency-Key`. Every metastore
//! request is a loopback HTTP round trip to moto, so the figure follows the number of
//! sequential requests a create makes (docs/performance.md, "Create latency on DynamoDB").
//!
//! Run with a moto server up (scripts/test.sh starts one, or
//! `moto_server -H 127.0.0.1 -p PORT`) and `FLOTILLA_MOTO_ENDPOINT` plus the test credentials
//! exported:
//! `cargo run -p flotilla-core --example create_latency [-- N [OUT.json]]`
//! (default 200 creates of each kind, `bench-results/create-latency.json`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::dynamo::{DynamoMetastore, connect};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "bench-operator-token";

async fn call(
    router: &axum::Router,
    uri: &str,
    body: Value,
    key: Option<&str>,
) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method("POST")
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json");
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    let req = b.body(Body::from(body.to_string())).expect("request");
    let resp = router.clone().oneshot(req).await.expect("router");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn pct(samples: &[Duration], p: f64) -> f64 {
    let mut s = samples.to_vec();
    s.sort();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s[i].as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let out = args
        .next()
        .unwrap_or_else(|| "bench-results/create-latency.json".into());
    let endpoint = std::env::var("FLOTILLA_MOTO_ENDPOINT")
        .expect("FLOTILLA_MOTO_ENDPOINT: start moto and export its URL");
    let client = connect(Some(&endpoint)).await;
    let table = format!("create-latency-{}", std::process::id());
    DynamoMetastore::create_table(&client, &table)
        .await
        .expect("create table");
    let mut tokens = StaticTokens::new();
    tokens.add(TOKEN, true, vec![]);
    let state = AppState::new(
        Arc::new(DynamoMetastore::new(client, table)),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let router = flotilla_core::router(state);

    let (s, _) = call(&router, "/v1/accounts", json!({"id": "bench"}), None).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, c) = call(
        &router,
        "/v1/accounts/bench/catalogs",
        json!({"display_name": "lake"}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let c = c["id"].as_str().expect("catalog id").to_owned();
    let (s, _) = call(
        &router,
        &format!("/v1/accounts/bench/catalogs/{c}/namespaces"),
        json!({"path": ["sales"]}),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let tables = format!("/v1/accounts/bench/catalogs/{c}/namespaces/sales/tables");
    let schema = json!({"type": "struct", "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "amount", "required": false, "type": "double"}]});

    let mut rows = Vec::new();
    for keyed in [false, true] {
        let mut samples = Vec::with_capacity(n);
        for i in 0..n {
            let name = format!("t{}_{i}", u8::from(keyed));
            let body = json!({"name": name, "format": "ICEBERG", "schema": schema});
            let key = keyed.then(|| format!("bench-{name}"));
            let start = Instant::now();
            let (s, b) = call(&router, &tables, body, key.as_deref()).await;
            samples.push(start.elapsed());
            assert_eq!(s, StatusCode::CREATED, "{b}");
        }
        let label = if keyed {
            "POST table (Idempotency-Key)"
        } else {
            "POST table"
        };
        let (p50, p90) = (pct(&samples, 0.5), pct(&samples, 0.9));
        println!("{label:<32} n {n:>4}  p50 {p50:>7.2} ms  p90 {p90:>7.2} ms");
        rows.push(json!({"call": label, "count": n, "p50_ms": p50, "p90_ms": p90}));
    }
    let doc = json!({
        "benchmark": "create_table_latency_dynamodb_moto",
        "command": "cargo run -p flotilla-core --example create_latency",
        "method": "sequential POSTs through the router on DynamoMetastore against moto on loopback",
        "results": rows,
    });
    if let Some(parent) = std::path::Path::new(&out)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).expect("output directory");
    }
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&doc).expect("json") + "\n",
    )
    .expect("write");
    println!("wrote {out}");
}
