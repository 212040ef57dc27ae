//! Change-events benchmark (not a test): create-table and commit throughput and latency with
//! events on and off, through the real router on the embedded (redb) metastore, eight
//! concurrent writers. A commit is the pointer swap of a table commit (`PATCH` of the
//! metadata location: one conditional replace, plus the event when events are on), spread
//! over 100 tables. Also counts the items each operation writes, which is what DynamoDB
//! charges for (a transactional write of an item up to 1 KB costs 2 write units).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example events_bench [-- CREATES COMMITS [GROUP]]`
//! (GROUP: the redb store's group-commit bound, default 64; 1 commits each transaction alone).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction,
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "bench-operator-token";
const TOKEN: &str = "bench-acme-token-01";
const WRITERS: usize = 8;
const TABLES: usize = 100;

/// Counts the items transactions write (puts and deletes; checks write nothing).
struct WriteCounter<M> {
    inner: M,
    written: AtomicU64,
}

#[async_trait]
impl<M: Metastore> Metastore for WriteCounter<M> {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.inner.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.inner.query(q).await
    }
    async fn count(&self, pk: &str, sk: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.inner.count(pk, sk, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let writes = tx
            .ops
            .iter()
            .filter(|op| !matches!(op, Op::Check { .. }))
            .count() as u64;
        let out = self.inner.transact(tx).await;
        if out.is_ok() {
            self.written.fetch_add(writes, Ordering::Relaxed);
        }
        out
    }
}

async fn call(
    router: &axum::Router,
    method: &str,
    uri: &str,
    token: &str,
    body: Value,
) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let _ = resp.into_body().collect().await.expect("body");
    status
}

struct Run {
    ops: usize,
    wall: Duration,
    samples: Vec<Duration>,
    items_per_op: f64,
}

impl Run {
    fn pct(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort();
        let i = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[i].as_secs_f64() * 1e3
    }
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64()
    }
}

/// Runs `per_writer` operations on each of eight writers; `op(writer, i)` answers the
/// request (method, uri, body).
async fn measure<F>(
    router: &axum::Router,
    counter: &Arc<WriteCounter<RedbMetastore>>,
    per_writer: usize,
    op: F,
) -> Run
where
    F: Fn(usize, usize) -> (&'static str, String, Value) + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let before = counter.written.load(Ordering::Relaxed);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (router, op) = (router.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(per_writer);
            for i in 0..per_writer {
                let (method, uri, body) = op(w, i);
                let t = Instant::now();
                let s = call(&router, method, &uri, TOKEN, body).await;
                assert!(s.is_success(), "{method} {uri}: {s}");
                samples.push(t.elapsed());
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.expect("writer"));
    }
    let wall = start.elapsed();
    let ops = samples.len();
    let written = counter.written.load(Ordering::Relaxed) - before;
    Run {
        ops,
        wall,
        samples,
        items_per_op: written as f64 / ops as f64,
    }
}

async fn run(events: bool, group: usize, creates: usize, commits: usize) -> (Run, Run) {
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = Arc::new(WriteCounter {
        inner: RedbMetastore::open(dir.path().join("meta.redb"))
            .expect("redb")
            .with_max_group(group),
        written: AtomicU64::new(0),
    });
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    tokens.add(TOKEN, false, vec!["acme".into()]);
    let state = AppState::new(
        counter.clone(),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config {
            events,
            ..Config::default()
        },
    );
    let router = flotilla_core::router(state);
    let a = "/v1/accounts/acme";
    assert_eq!(
        call(
            &router,
            "POST",
            "/v1/accounts",
            OPERATOR,
            json!({"id": "acme"})
        )
        .await,
        StatusCode::CREATED
    );
    let req = Request::builder()
        .method("POST")
        .uri(format!("{a}/catalogs"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(json!({"display_name": "lake"}).to_string()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("infallible");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let catalog: Value = serde_json::from_slice(&bytes).expect("catalog");
    let c = catalog["id"].as_str().expect("id").to_owned();
    assert_eq!(
        call(
            &router,
            "POST",
            &format!("{a}/catalogs/{c}/namespaces"),
            TOKEN,
            json!({"path": ["bench"]})
        )
        .await,
        StatusCode::CREATED
    );
    let tables = format!("{a}/catalogs/{c}/namespaces/bench/tables");
    let schema = json!({"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]});
    let create = {
        let (tables, schema) = (tables.clone(), schema.clone());
        measure(&router, &counter, creates / WRITERS, move |w, i| {
            let body = json!({"name": format!("c{w}_{i}"), "schema": schema, "format": "ICEBERG"});
            ("POST", tables.clone(), body)
        })
        .await
    };
    for t in 0..TABLES {
        let body = json!({"name": format!("t{t}"), "schema": schema, "format": "ICEBERG",
            "metadata_location": format!("s3://bench/t{t}/m0.json")});
        assert_eq!(
            call(&router, "POST", &tables, TOKEN, body).await,
            StatusCode::CREATED
        );
    }
    // Writer w commits to tables w, w + 8, ...: eight writers across 100 tables, never the
    // same table at once (a commit conflict would measure the retry, not the event).
    let commit = measure(&router, &counter, commits / WRITERS, move |w, i| {
        let mine: Vec<usize> = (0..TABLES).filter(|t| t % WRITERS == w).collect();
        let t = mine[i % mine.len()];
        let body = json!({"metadata_location": format!("s3://bench/t{t}/m{}.json", i + 1)});
        ("PATCH", format!("{tables}/t{t}"), body)
    })
    .await;
    (create, commit)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let creates = args.first().copied().unwrap_or(2000);
    let commits = args.get(1).copied().unwrap_or(8000);
    let group = args.get(2).copied().unwrap_or(64);
    println!("redb group commit: at most {group} transactions per commit");
    // Alternate off/on twice so that a warming disk does not favour one side.
    let mut results: Vec<(bool, Run, Run)> = Vec::new();
    for events in [false, true, false, true] {
        let (create, commit) = run(events, group, creates, commits).await;
        results.push((events, create, commit));
    }
    println!(
        "{:<8} {:<7} {:>7} {:>10} {:>8} {:>8} {:>11}",
        "op", "events", "ops", "ops/s", "p50 ms", "p99 ms", "items/op"
    );
    let mut best = std::collections::BTreeMap::new();
    for (events, create, commit) in &results {
        for (name, r) in [("create", create), ("commit", commit)] {
            let on = if *events { "on" } else { "off" };
            println!(
                "{:<8} {:<7} {:>7} {:>10.0} {:>8.2} {:>8.2} {:>11.2}",
                name,
                on,
                r.ops,
                r.ops_per_sec(),
                r.pct(0.50),
                r.pct(0.99),
                r.items_per_op
            );
            let e = best.entry((name, *events)).or_insert(0.0f64);
            *e = e.max(r.ops_per_sec());
        }
    }
    for name in ["create", "commit"] {
        let (off, on) = (best[&(name, false)], best[&(name, true)]);
        println!(
            "{name}: events on keep {:.0}% of the throughput with events off (best of two runs each)",
            100.0 * on / off
        );
    }
}
