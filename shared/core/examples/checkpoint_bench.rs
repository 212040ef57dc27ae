//! Checkpointed-run benchmark (not a test): one overlay selecting TABLES tables in NAMESPACES
//! namespaces of an Iceberg REST fixture that answers every request after LATENCY_MS of
//! delay, reconciled by the scheduled plan job with a per-invocation budget of BUDGET_S
//! seconds, on the embedded redb metastore, through the real catalog-access adapter. The legs
//! of the chain are delivered one after the other, as the queue would (each leg is one
//! reconciler invocation). Measures the first run and a no-op rerun: legs, wall time (and the
//! longest leg), upstream requests (the fixture's request log), metastore requests, items
//! read and written (`CountingMetastore`), the items written by kind (status, checkpoint,
//! scheduler state, catalog), and the process's peak RSS (`VmHWM`, fixture included).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example checkpoint_bench
//! [-- TABLES NAMESPACES LATENCY_MS BUDGET_S]` (default 100000 1000 20 60). Prints a table and
//! writes `bench-results/checkpoint.json`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::reconcile::schedule::{PlanMessage, WorkMessage, handle_work_with};
use flotilla_core::reconcile::work::MessageOutcome;
use flotilla_core::reconcile::{AdapterConnector, RunOptions};
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction,
};
use flotilla_testkit::fixture::conditions::{Conditions, Latency};
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TOKEN: &str = "bench-token-0001";
const UPSTREAM: &str = "bench-upstream-token";

/// Counts the items each transaction writes, by the kind of key.
struct ByKind<M> {
    inner: M,
    written: Mutex<BTreeMap<&'static str, u64>>,
}

fn kind_of(key: &Key) -> &'static str {
    let sk = key.sk.as_str();
    if sk.starts_with("OVLSTATUS#") {
        "status"
    } else if sk.starts_with("CKPT#") {
        "checkpoint"
    } else if sk.starts_with("SCHED#") || key.pk.starts_with("DUE#") {
        "scheduler"
    } else if key.pk.starts_with("CAT#") {
        "catalog"
    } else {
        "other"
    }
}

#[async_trait]
impl<M: Metastore> Metastore for ByKind<M> {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.inner.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, c).await
    }
    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        self.inner.query(query).await
    }
    async fn count(&self, pk: &str, sk: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.inner.count(pk, sk, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let kinds: Vec<&'static str> = tx
            .ops
            .iter()
            .filter(|o| !matches!(o, Op::Check { .. }))
            .map(|o| kind_of(o.key()))
            .collect();
        self.inner.transact(tx).await?;
        let mut w = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for k in kinds {
            *w.entry(k).or_default() += 1;
        }
        Ok(())
    }
}

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
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let arg = |i: usize, d: u64| args.get(i).copied().unwrap_or(d);
    let tables = usize::try_from(arg(0, 100_000))?;
    let namespaces = usize::try_from(arg(1, 1_000))?.max(1);
    let latency_ms = arg(2, 20);
    let budget_s = arg(3, 60);

    let conditions = Conditions::with_latency(Latency::fixed(Duration::from_millis(latency_ms)));
    let fx = IcebergFixture::start_with_conditions(conditions).await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM]);
    for n in 0..namespaces {
        fx.add_namespace(&[&format!("ns{n:04}")]);
    }
    for t in 0..tables {
        let ns = format!("ns{:04}", t % namespaces);
        fx.add_table(&[&ns], &format!("t{t:06}"));
    }

    let dir = tempfile::tempdir()?;
    let by_kind = ByKind {
        inner: RedbMetastore::open(dir.path().join("meta.redb"))?,
        written: Mutex::new(BTreeMap::new()),
    };
    let counting = Arc::new(CountingMetastore::new(by_kind));
    let key = flotilla_secrets::local::SecretKey::generate();
    let creds =
        flotilla_secrets::local::LocalEncryptedStore::with_key(dir.path().join("secrets"), &key)?;
    let mut tokens = StaticTokens::new();
    tokens.add(TOKEN, true, vec![]);
    let mut config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    config.reconcile.run_budget_ms = i64::try_from(budget_s * 1000)?;
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
    post(
        &state,
        "/v1/accounts/bench/overlays",
        json!({"display_name": "import", "integration_id": integration, "catalog_id": catalog}),
    )
    .await?;

    let baseline_rss_kib = peak_rss_kib();
    let opts = RunOptions::default();
    let mut runs = Vec::new();
    for label in ["first run", "no-op rerun"] {
        // The plan message of the integration's current plan generation (what a tick sends).
        let sched =
            flotilla_core::service::schedule::load(counting.as_ref(), "bench", &integration)
                .await?
                .ok_or("scheduler state")?;
        let first = WorkMessage::Plan(PlanMessage {
            account_id: "bench".into(),
            integration_id: integration.clone(),
            plan_generation: sched.value.plan_generation,
        });
        fx.log().clear();
        counting
            .inner()
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        let before = counting.snapshot();
        let start = Instant::now();
        let mut queue = VecDeque::from([first]);
        let mut legs = Vec::new();
        let mut last = None;
        while let Some(m) = queue.pop_front() {
            let leg_start = Instant::now();
            let out = handle_work_with(&state, &AdapterConnector, &m, &opts).await;
            legs.push(leg_start.elapsed().as_millis());
            match out {
                MessageOutcome::Continued { next } => queue.push_back(*next),
                other => last = Some(other),
            }
        }
        let wall_ms = start.elapsed().as_millis();
        let after = counting.snapshot();
        let written = counting
            .inner()
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let log = fx.log().entries();
        let status = post_status(&state, &catalog).await;
        println!("{label}: {} legs, outcome {last:?}", legs.len());
        runs.push(json!({
            "run": label,
            "legs": legs.len(),
            "leg_wall_ms": legs,
            "wall_ms": wall_ms,
            "outcome": format!("{last:?}"),
            "upstream_requests": log.len(),
            "upstream_not_modified": log.iter().filter(|r| r.status == Some(304)).count(),
            "metastore": {
                "requests": delta(before, after).requests(),
                "get": delta(before, after).get,
                "batch_get": delta(before, after).batch_get,
                "query": delta(before, after).query,
                "transact": delta(before, after).transact,
                "items_read": delta(before, after).items_read,
                "items_written": delta(before, after).items_written,
                "written_by_kind": written,
            },
            "peak_rss_kib": peak_rss_kib(),
            "relations": status,
        }));
    }

    println!(
        "checkpointed reconcile: {tables} tables in {namespaces} namespaces, {latency_ms} ms \
         upstream latency, {budget_s} s budget per leg (Iceberg REST fixture -> redb)"
    );
    println!(
        "| run | legs | wall (longest leg) | upstream requests (304) | metastore requests | transactions | items read | items written (status, checkpoint, scheduler, catalog) | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &runs {
        let m = &r["metastore"];
        let w = &m["written_by_kind"];
        let longest = r["leg_wall_ms"]
            .as_array()
            .and_then(|a| a.iter().filter_map(Value::as_u64).max())
            .unwrap_or(0);
        println!(
            "| {} | {} | {:.1} s ({:.1} s) | {} ({}) | {} | {} | {} | {} ({}, {}, {}, {}) | {} MiB |",
            r["run"].as_str().unwrap_or(""),
            r["legs"],
            r["wall_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
            longest as f64 / 1000.0,
            r["upstream_requests"],
            r["upstream_not_modified"],
            m["requests"],
            m["transact"],
            m["items_read"],
            m["items_written"],
            w["status"].as_u64().unwrap_or(0),
            w["checkpoint"].as_u64().unwrap_or(0),
            w["scheduler"].as_u64().unwrap_or(0),
            w["catalog"].as_u64().unwrap_or(0),
            r["peak_rss_kib"].as_u64().unwrap_or(0) / 1024
        );
    }
    let doc = json!({
        "tables": tables, "namespaces": namespaces, "latency_ms": latency_ms,
        "budget_s": budget_s, "baseline_peak_rss_kib": baseline_rss_kib, "runs": runs,
    });
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results");
    std::fs::create_dir_all(&path)?;
    std::fs::write(
        path.join("checkpoint.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    println!("wrote bench-results/checkpoint.json");
    Ok(())
}

/// How many relations the catalog holds (a check that the chain converged).
async fn post_status(state: &AppState, catalog: &str) -> usize {
    flotilla_metastore::query_all(
        state.store.as_ref(),
        Query::new(
            flotilla_domain::keys::catalog_pk(catalog),
            flotilla_domain::keys::RELATION_PREFIX,
            Consistency::Eventual,
        ),
    )
    .await
    .map(|v| v.len())
    .unwrap_or(0)
}
