//! API benchmark (not a test): latency percentiles and throughput of create / get / list
//! through the real router on the embedded (redb) metastore.
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example api_bench [-- N]`
//! Prints a table and writes `bench-results/api.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::redb_store::RedbMetastore;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "bench-operator-token";

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn pct(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort();
        let i = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[i].as_secs_f64() * 1e6
    }
    fn ops(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64()
    }
    fn json(&self) -> Value {
        json!({"op": self.name, "count": self.samples.len(), "ops_per_sec": self.ops(),
               "p50_us": self.pct(0.50), "p99_us": self.pct(0.99)})
    }
}

async fn call(
    router: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"));
    let req = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            b.body(Body::from(v.to_string())).expect("request")
        }
        None => b.body(Body::empty()).expect("request"),
    };
    let resp = router.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn measure<F, Fut>(name: &'static str, n: usize, mut f: F) -> Stats
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        f(i).await;
        samples.push(t.elapsed());
    }
    Stats {
        name,
        samples,
        wall: start.elapsed(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbMetastore::open(dir.path().join("bench.redb")).expect("redb");
    let mut tokens = StaticTokens::new();
    tokens.add(TOKEN, true, vec![]);
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let router = flotilla_core::router(state);
    let (s, _) = call(
        &router,
        "POST",
        "/v1/accounts",
        Some(json!({"id": "bench"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (_, cat) = call(
        &router,
        "POST",
        "/v1/accounts/bench/catalogs",
        Some(json!({"display_name": "c"})),
    )
    .await;
    let cat = cat["id"].as_str().expect("id").to_owned();
    call(
        &router,
        "POST",
        &format!("/v1/accounts/bench/catalogs/{cat}/namespaces"),
        Some(json!({"path": ["ns"]})),
    )
    .await;
    let schema = json!({"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]});
    let base = format!("/v1/accounts/bench/catalogs/{cat}/namespaces/ns/tables");

    let create = measure("create_table", n, |i| {
        let (router, base, schema) = (&router, &base, &schema);
        async move {
            let (s, _) = call(
                router,
                "POST",
                base,
                Some(json!({"name": format!("t{i:06}"), "schema": schema, "format": "ICEBERG"})),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED);
        }
    })
    .await;
    let get = measure("get_table", n, |i| {
        let (router, base) = (&router, &base);
        async move {
            let (s, _) = call(router, "GET", &format!("{base}/t{:06}", i % n), None).await;
            assert_eq!(s, StatusCode::OK);
        }
    })
    .await;
    let list = measure("list_tables_page_100", n / 10, |_| {
        let (router, base) = (&router, &base);
        async move {
            let (s, v) = call(router, "GET", &format!("{base}?page_size=100"), None).await;
            assert_eq!(s, StatusCode::OK);
            assert_eq!(v["items"].as_array().map(Vec::len), Some(100));
        }
    })
    .await;
    let idem = measure("create_catalog_idempotent", n / 4, |i| {
        let router = &router;
        async move {
            let req = Request::builder()
                .method("POST")
                .uri("/v1/accounts/bench/catalogs")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .header("idempotency-key", format!("k{i}"))
                .body(Body::from(
                    json!({"display_name": format!("c{i}")}).to_string(),
                ))
                .expect("request");
            let resp = router.clone().oneshot(req).await.expect("infallible");
            assert_eq!(resp.status(), StatusCode::CREATED);
        }
    })
    .await;

    let all = [create, get, list, idem];
    println!(
        "{:<28} {:>8} {:>12} {:>10} {:>10}",
        "operation (redb, in-process)", "count", "ops/s", "p50 µs", "p99 µs"
    );
    for s in &all {
        println!(
            "{:<28} {:>8} {:>12.0} {:>10.0} {:>10.0}",
            s.name,
            s.samples.len(),
            s.ops(),
            s.pct(0.5),
            s.pct(0.99)
        );
    }
    let out = json!({"backend": "redb", "sequential_client": true, "results": all.iter().map(Stats::json).collect::<Vec<_>>()});
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results");
    std::fs::create_dir_all(&path).expect("bench-results");
    std::fs::write(
        path.join("api.json"),
        serde_json::to_string_pretty(&out).expect("json"),
    )
    .expect("write");
    println!("wrote bench-results/api.json");
}
