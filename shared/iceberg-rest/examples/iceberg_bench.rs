//! Iceberg REST endpoint benchmark (not a test): the same operations through `/iceberg` and
//! through `/v1`, side by side in one run, on the router `flotilla serve` runs over a redb
//! file: load a table (p50/p99), commits contended on one table, commits spread over 100
//! tables, listing 10,000 tables (from the metastore, and after finalize from the directory
//! replica).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-iceberg-rest --example iceberg_bench [-- N]`
//! Prints a table and writes `bench-results/iceberg.json`.
//!
//! `-- list` runs only the listing matrix instead: 1,000 and 10,000 tables, the default
//! page and `pageSize=1000`, through `/iceberg` and `/v1`, with metastore queries and items
//! read per full listing (`bench-results/iceberg-list.json`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "bench-operator-token";
const WRITERS: usize = 8;

struct Stats {
    name: String,
    samples: Vec<Duration>,
    wall: Duration,
    conflicts: usize,
}

impl Stats {
    fn pct(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort();
        let i = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[i].as_secs_f64() * 1e3
    }
    fn ops(&self) -> f64 {
        self.samples.len() as f64 / self.wall.as_secs_f64()
    }
    fn json(&self) -> Value {
        json!({"op": self.name, "count": self.samples.len(), "ops_per_sec": self.ops(),
               "p50_ms": self.pct(0.50), "p99_ms": self.pct(0.99), "conflicts_409": self.conflicts})
    }
}

async fn call(
    router: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let b = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"));
    let req = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .expect("request"),
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

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "v", "required": false, "type": "string"},
    ]})
}

async fn timed_loop<F, Fut>(name: &str, n: usize, mut f: F) -> Stats
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = StatusCode>,
{
    let mut samples = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let s = f(i).await;
        assert!(s.is_success(), "{name}: {s}");
        samples.push(t.elapsed());
    }
    Stats {
        name: name.into(),
        samples,
        wall: start.elapsed(),
        conflicts: 0,
    }
}

/// `WRITERS` concurrent writers, `per_writer` commits each; `target(w, i)` picks the request.
async fn concurrent(
    name: &str,
    router: &axum::Router,
    per_writer: usize,
    target: impl Fn(usize, usize) -> (String, String, Value) + Send + Sync + 'static,
) -> Stats {
    let target = Arc::new(target);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let router = router.clone();
        let target = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut conflicts = 0;
            for i in 0..per_writer {
                let (method, uri, body) = target(w, i);
                let t = Instant::now();
                loop {
                    let (s, v) = call(&router, &method, &uri, Some(body.clone())).await;
                    if s.is_success() {
                        break;
                    }
                    assert!(
                        s == StatusCode::CONFLICT || s == StatusCode::SERVICE_UNAVAILABLE,
                        "{s} {v}"
                    );
                    conflicts += 1;
                }
                samples.push(t.elapsed());
            }
            (samples, conflicts)
        }));
    }
    let mut samples = Vec::new();
    let mut conflicts = 0;
    for t in tasks {
        let (s, c) = t.await.expect("writer");
        samples.extend(s);
        conflicts += c;
    }
    Stats {
        name: name.into(),
        samples,
        wall: start.elapsed(),
        conflicts,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let arg = std::env::args().nth(1);
    let listing_only = arg.as_deref() == Some("list");
    let n: usize = arg.and_then(|a| a.parse().ok()).unwrap_or(500);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(CountingMetastore::new(
        RedbMetastore::open(dir.path().join("meta.redb")).expect("redb"),
    ));
    let mut tokens = StaticTokens::new();
    tokens.add(TOKEN, true, vec![]);
    let state = AppState::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    // The host's warehouse root: the only local path the warehouse stores admit (as on
    // `flotilla serve`).
    let root = dir
        .path()
        .canonicalize()
        .expect("tempdir")
        .join("warehouse");
    let policy =
        flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).expect("warehouse root");
    let state = state
        .with_index_stores(flotilla_core::service::index_catalogs::local_warehouse_stores(policy));
    let router = flotilla_iceberg_rest::router(
        state,
        IcebergConfig {
            local_warehouse_root: Some(root),
            vending: None,
            ..Default::default()
        },
    );
    call(
        &router,
        "POST",
        "/v1/accounts",
        Some(json!({"id": "bench"})),
    )
    .await;
    let (_, cat) = call(
        &router,
        "POST",
        "/v1/accounts/bench/catalogs",
        Some(json!({"display_name": "lake"})),
    )
    .await;
    let cid = cat["id"].as_str().expect("catalog id").to_owned();
    let prefix = format!("bench.{cid}");
    let ice = format!("/iceberg/v1/{prefix}");
    let v1 = format!("/v1/accounts/bench/catalogs/{cid}");
    if listing_only {
        listing_matrix(&router, &store, &ice, &v1).await;
        return;
    }
    for ns in ["db", "wide", "many"] {
        call(
            &router,
            "POST",
            &format!("{ice}/namespaces"),
            Some(json!({"namespace": [ns]})),
        )
        .await;
    }
    // One table; 100 tables.
    let (s, t) = call(
        &router,
        "POST",
        &format!("{ice}/namespaces/db/tables"),
        Some(json!({"name": "hot", "schema": schema()})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let metadata_location = t["metadata-location"]
        .as_str()
        .expect("location")
        .to_owned();
    for i in 0..100 {
        let (s, _) = call(
            &router,
            "POST",
            &format!("{ice}/namespaces/wide/tables"),
            Some(json!({"name": format!("t{i}"), "schema": schema()})),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
    }
    let mut results = Vec::new();

    results.push(
        timed_loop("iceberg loadTable", n, |_| {
            let r = router.clone();
            let u = format!("{ice}/namespaces/db/tables/hot");
            async move { call(&r, "GET", &u, None).await.0 }
        })
        .await,
    );
    results.push(
        timed_loop("/v1 GET table", n, |_| {
            let r = router.clone();
            let u = format!("{v1}/namespaces/db/tables/hot");
            async move { call(&r, "GET", &u, None).await.0 }
        })
        .await,
    );

    let per = (n / WRITERS).max(1);
    let ice2 = ice.clone();
    results.push(concurrent("iceberg commit, 8 writers on 1 table", &router, per, move |w, i| {
        ("POST".into(), format!("{ice2}/namespaces/db/tables/hot"),
         json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {format!("w{w}"): i.to_string()}}]}))
    }).await);
    let v12 = v1.clone();
    results.push(
        concurrent(
            "/v1 PATCH, 8 writers on 1 table",
            &router,
            per,
            move |w, i| {
                (
                    "PATCH".into(),
                    format!("{v12}/namespaces/db/tables/hot"),
                    json!({"properties": {format!("w{w}"): i.to_string()}}),
                )
            },
        )
        .await,
    );
    let ice3 = ice.clone();
    results.push(concurrent("iceberg commit, 8 writers over 100 tables", &router, per, move |w, i| {
        ("POST".into(), format!("{ice3}/namespaces/wide/tables/t{}", (w * 31 + i * 7) % 100),
         json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": i.to_string()}}]}))
    }).await);
    let v13 = v1.clone();
    results.push(
        concurrent(
            "/v1 PATCH, 8 writers over 100 tables",
            &router,
            per,
            move |w, i| {
                (
                    "PATCH".into(),
                    format!("{v13}/namespaces/wide/tables/t{}", (w * 31 + i * 7) % 100),
                    json!({"properties": {"k": i.to_string()}}),
                )
            },
        )
        .await,
    );

    // 10,000 tables registered through /v1 (listing reads no metadata file).
    for i in 0..10_000 {
        let (s, v) = call(&router, "POST", &format!("{v1}/namespaces/many/tables"), Some(json!({
            "name": format!("t{i:05}"), "schema": schema(), "format": "ICEBERG", "metadata_location": metadata_location,
        }))).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    let list = |base: String, iceberg: bool| {
        let router = router.clone();
        async move {
            let mut token: Option<String> = None;
            let mut count = 0;
            loop {
                let uri = match (&token, iceberg) {
                    (None, true) => format!("{base}?pageSize=1000"),
                    (Some(t), true) => format!("{base}?pageSize=1000&pageToken={t}"),
                    (None, false) => format!("{base}?page_size=1000"),
                    (Some(t), false) => format!("{base}?page_size=1000&page_token={t}"),
                };
                let (s, v) = call(&router, "GET", &uri, None).await;
                assert!(s.is_success());
                let (items, next) = if iceberg {
                    (
                        v["identifiers"].as_array().map_or(0, Vec::len),
                        v["next-page-token"].as_str().map(str::to_owned),
                    )
                } else {
                    (
                        v["items"].as_array().map_or(0, Vec::len),
                        v["next_page_token"].as_str().map(str::to_owned),
                    )
                };
                count += items;
                match next {
                    Some(t) => token = Some(t),
                    None => break,
                }
            }
            assert_eq!(count, 10_000);
            StatusCode::OK
        }
    };
    let listing_runs = 5;
    results.push(
        timed_loop(
            "iceberg list 10,000 tables (all pages)",
            listing_runs,
            |_| list(format!("{ice}/namespaces/many/tables"), true),
        )
        .await,
    );
    results.push(
        timed_loop("/v1 list 10,000 tables (all pages)", listing_runs, |_| {
            list(format!("{v1}/namespaces/many/tables"), false)
        })
        .await,
    );

    // Finalized: the endpoint lists from the directory replica. The first listing loads it
    // (one scan); the timed ones find the generation unchanged.
    let (s, v) = call(
        &router,
        "POST",
        "/v1/admin/catalog-finalize",
        Some(json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true})),
    )
    .await;
    assert!(s.is_success(), "{v}");
    list(format!("{ice}/namespaces/many/tables"), true).await;
    results.push(
        timed_loop(
            "iceberg list 10,000 tables, directory replica",
            listing_runs,
            |_| list(format!("{ice}/namespaces/many/tables"), true),
        )
        .await,
    );

    println!(
        "{:<46} {:>7} {:>10} {:>10} {:>10} {:>6}",
        "operation", "count", "ops/s", "p50 ms", "p99 ms", "409s"
    );
    for r in &results {
        println!(
            "{:<46} {:>7} {:>10.1} {:>10.2} {:>10.2} {:>6}",
            r.name,
            r.samples.len(),
            r.ops(),
            r.pct(0.5),
            r.pct(0.99),
            r.conflicts
        );
    }
    let out = json!({"n": n, "writers": WRITERS, "results": results.iter().map(Stats::json).collect::<Vec<_>>()});
    std::fs::create_dir_all("bench-results").expect("bench-results");
    std::fs::write(
        "bench-results/iceberg.json",
        serde_json::to_vec_pretty(&out).expect("json"),
    )
    .expect("write");
}

/// Every page of one listing; the number of items.
async fn list_all(router: &axum::Router, base: &str, iceberg: bool, page: Option<usize>) -> usize {
    let mut token: Option<String> = None;
    let mut count = 0;
    loop {
        let mut params: Vec<String> = Vec::new();
        if let Some(p) = page {
            params.push(format!(
                "{}={p}",
                if iceberg { "pageSize" } else { "page_size" }
            ));
        }
        if let Some(t) = &token {
            params.push(format!(
                "{}={t}",
                if iceberg { "pageToken" } else { "page_token" }
            ));
        }
        let uri = format!("{base}?{}", params.join("&"));
        let (s, v) = call(router, "GET", &uri, None).await;
        assert!(s.is_success(), "{uri}: {s} {v}");
        let (items, next) = if iceberg {
            ("identifiers", "next-page-token")
        } else {
            ("items", "next_page_token")
        };
        count += v[items].as_array().map_or(0, Vec::len);
        match v[next].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => return count,
        }
    }
}

/// The listing figures of `docs/performance.md`: full listings of 1,000 and 10,000 tables
/// from the metastore (not finalized), default page and pages of 1,000, both doors.
async fn listing_matrix(
    router: &axum::Router,
    store: &CountingMetastore<RedbMetastore>,
    ice: &str,
    v1: &str,
) {
    let mut rows = Vec::new();
    for tables in [1_000usize, 10_000] {
        let ns = format!("n{tables}");
        call(
            router,
            "POST",
            &format!("{ice}/namespaces"),
            Some(json!({"namespace": [ns]})),
        )
        .await;
        let (s, t) = call(
            router,
            "POST",
            &format!("{ice}/namespaces/{ns}/tables"),
            Some(json!({"name": "t00000", "schema": schema()})),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        for i in 1..tables {
            let (s, v) = call(
                router,
                "POST",
                &format!("{v1}/namespaces/{ns}/tables"),
                Some(json!({
                    "name": format!("t{i:05}"), "schema": schema(), "format": "ICEBERG",
                    "metadata_location": t["metadata-location"],
                })),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED, "{v}");
        }
        let runs = if tables == 1_000 { 40 } else { 8 };
        for page in [None, Some(1000)] {
            for iceberg in [true, false] {
                let base = if iceberg {
                    format!("{ice}/namespaces/{ns}/tables")
                } else {
                    format!("{v1}/namespaces/{ns}/tables")
                };
                // One untimed listing for the counts (and to warm the caches).
                let before = store.snapshot();
                assert_eq!(list_all(router, &base, iceberg, page).await, tables);
                let after = store.snapshot();
                let name = format!(
                    "{} list {tables} tables, {}",
                    if iceberg { "iceberg" } else { "/v1" },
                    match page {
                        None => "default page (100)".to_owned(),
                        Some(p) => format!("pageSize={p}"),
                    }
                );
                let stats = timed_loop(&name, runs, |_| async {
                    assert_eq!(list_all(router, &base, iceberg, page).await, tables);
                    StatusCode::OK
                })
                .await;
                rows.push((
                    stats,
                    after.query - before.query,
                    after.items_read - before.items_read,
                ));
            }
        }
    }
    println!(
        "{:<52} {:>5} {:>9} {:>9} {:>8} {:>11}",
        "full listing", "runs", "p50 ms", "p99 ms", "queries", "items read"
    );
    for (r, q, items) in &rows {
        println!(
            "{:<52} {:>5} {:>9.2} {:>9.2} {:>8} {:>11}",
            r.name,
            r.samples.len(),
            r.pct(0.5),
            r.pct(0.99),
            q,
            items
        );
    }
    let out: Vec<Value> = rows
        .iter()
        .map(|(r, q, items)| {
            let mut v = r.json();
            v["queries_per_listing"] = json!(q);
            v["items_read_per_listing"] = json!(items);
            v
        })
        .collect();
    std::fs::create_dir_all("bench-results").expect("bench-results");
    std::fs::write(
        "bench-results/iceberg-list.json",
        serde_json::to_vec_pretty(&json!({"results": out})).expect("json"),
    )
    .expect("write");
}
