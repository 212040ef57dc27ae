//! Directory refresh benchmark (not a test): for T stable tables on the embedded
//! (redb) metastore, the cost of one replica refresh in legacy mode (every refresh scans)
//! versus authoritative mode (one strong point read while nothing changed), and the cost of
//! the refresh that follows one DDL. Costs are counted by `CountingMetastore`, the same
//! counters `/v1/admin/metrics` exposes.
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example directory_bench [-- T...]`
//! (default T = 10 1000 10000). Prints a table and writes `bench-results/directory.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::directory::{self, DirectoryCache, RefreshOutcome};
use flotilla_core::service::{OnConflict, accounts};
use flotilla_core::service::{catalogs, namespaces, relations};
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::metrics::{CountingMetastore, MetastoreCounters, MetricsSnapshot};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Key, Metastore, Op, Transaction};
use serde_json::{Value, json};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Per-refresh figures of one mode.
struct Mode {
    samples: Vec<Duration>,
    requests: u64,
    gets: u64,
    queries: u64,
    items_read: u64,
}

impl Mode {
    fn new() -> Self {
        Self {
            samples: Vec::new(),
            requests: 0,
            gets: 0,
            queries: 0,
            items_read: 0,
        }
    }

    fn add(&mut self, took: Duration, before: MetricsSnapshot, after: MetricsSnapshot) {
        self.samples.push(took);
        self.requests += after.requests() - before.requests();
        self.gets += after.get - before.get;
        self.queries += after.query - before.query;
        self.items_read += after.items_read - before.items_read;
    }

    fn pct_us(&self, p: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort();
        if s.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
        s[rank.clamp(1, s.len()) - 1].as_secs_f64() * 1e6
    }

    fn per(&self, total: u64) -> f64 {
        total as f64 / self.samples.len().max(1) as f64
    }

    fn json(&self) -> Value {
        json!({
            "samples": self.samples.len(),
            "requests_per_refresh": self.per(self.requests),
            "point_reads_per_refresh": self.per(self.gets),
            "query_pages_per_refresh": self.per(self.queries),
            "items_read_per_refresh": self.per(self.items_read),
            "latency_us": {"p50": self.pct_us(50.0), "p99": self.pct_us(99.0)},
        })
    }
}

struct Bench {
    state: AppState,
    counters: Arc<MetastoreCounters>,
    catalog: String,
    _dir: tempfile::TempDir,
}

const ACCOUNT: &str = "bench";

fn ns() -> BenchResult<NamespacePath> {
    Ok(NamespacePath::new(vec!["sales".into()])?)
}

fn schema() -> Value {
    json!({"type": "struct", "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "customer", "required": false, "type": "string"},
        {"id": 3, "name": "amount", "required": false, "type": "decimal(18,2)"},
        {"id": 4, "name": "ts", "required": false, "type": "timestamptz"}
    ]})
}

async fn setup(tables: usize) -> BenchResult<Bench> {
    let dir = tempfile::tempdir()?;
    let counting = CountingMetastore::new(RedbMetastore::open(dir.path().join("meta.redb"))?);
    let counters = counting.counters();
    let state = AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    );
    let api = |e: flotilla_core::error::Error| e.to_string();
    accounts::create(
        &state,
        serde_json::from_value(json!({"id": ACCOUNT}))?,
        OnConflict::Error,
        None,
    )
    .await
    .map_err(api)?;
    let cat = catalogs::create(
        &state,
        ACCOUNT,
        serde_json::from_value(json!({"display_name": "main"}))?,
        OnConflict::Error,
        None,
    )
    .await
    .map_err(api)?;
    let catalog = cat.body["id"].as_str().ok_or("catalog id")?.to_owned();
    namespaces::create(
        &state,
        ACCOUNT,
        &catalog,
        serde_json::from_value(json!({"path": ["sales"]}))?,
        OnConflict::Error,
        None,
    )
    .await
    .map_err(api)?;

    // Stable tables, written in batches of 99 creates plus one generation bump: the state
    // T creates through the API would leave, without T API round trips.
    let ns = ns()?;
    let now = state.clock.now_rfc3339();
    let mut i = 0;
    while i < tables {
        let mut tx = Transaction::new();
        for _ in 0..99 {
            if i == tables {
                break;
            }
            let name = format!("table_{i:06}");
            let body = json!({
                "id": format!("bench{i:06}"), "catalog_id": catalog, "kind": "TABLE", "namespace": ["sales"],
                "name": name, "schema": schema(), "format": "ICEBERG",
                "metadata_location": format!("s3://bench/{name}/metadata/00001.json"),
                "properties": {}, "revision": 1, "create_time": now, "update_time": now,
            });
            let flotilla_metastore::Key { pk, sk } = keys::relation(&catalog, &ns, &name);
            tx.push(Op::create(Key::new(pk, sk), serde_json::to_vec(&body)?));
            i += 1;
        }
        tx.push(directory::directory_bump(&catalog).map_err(api)?);
        state.store.transact(tx).await?;
    }
    Ok(Bench {
        state,
        counters,
        catalog,
        _dir: dir,
    })
}

async fn timed_refresh(
    b: &Bench,
    cache: &DirectoryCache,
    mode: &mut Mode,
    expect: RefreshOutcome,
) -> BenchResult<()> {
    let before = b.counters.snapshot();
    let start = Instant::now();
    let outcome = cache
        .refresh(b.state.store.as_ref(), b.state.clock.as_ref(), &b.catalog)
        .await?;
    let took = start.elapsed();
    let after = b.counters.snapshot();
    if outcome != expect {
        return Err(format!("expected {expect:?}, got {outcome:?}").into());
    }
    mode.add(took, before, after);
    Ok(())
}

async fn run(tables: usize) -> BenchResult<Value> {
    let b = setup(tables).await?;
    let store: &dyn Metastore = b.state.store.as_ref();
    let (legacy_n, steady_n, ddl_n) = match tables {
        0..=100 => (500, 2000, 200),
        101..=2000 => (100, 2000, 50),
        _ => (30, 2000, 20),
    };

    // Legacy: no authority marker; every refresh scans.
    let mut legacy = Mode::new();
    let cache = DirectoryCache::new();
    cache
        .refresh(store, b.state.clock.as_ref(), &b.catalog)
        .await?; // warm-up
    for _ in 0..legacy_n {
        timed_refresh(&b, &cache, &mut legacy, RefreshOutcome::Reloaded).await?;
    }

    directory::finalize(&b.state, true, true)
        .await
        .map_err(|e| e.to_string())?;

    // Authoritative, warm, nothing changed: one strong point read.
    let mut steady = Mode::new();
    let cache = DirectoryCache::new();
    let mut cold = Mode::new();
    timed_refresh(&b, &cache, &mut cold, RefreshOutcome::Reloaded).await?;
    for _ in 0..steady_n {
        timed_refresh(&b, &cache, &mut steady, RefreshOutcome::Unchanged).await?;
    }

    // One DDL, then the refresh that follows it. The DDLs alternate between creating and
    // deleting one extra table (both signal), so the directory stays at T or T + 1 entries.
    let mut after_ddl = Mode::new();
    let ns = ns()?;
    for i in 0..ddl_n {
        if i % 2 == 0 {
            let req = serde_json::from_value(
                json!({"name": "ddl_extra", "schema": schema(), "format": "ICEBERG"}),
            )?;
            relations::create_table(
                &b.state,
                ACCOUNT,
                &b.catalog,
                &ns,
                req,
                OnConflict::Error,
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        } else {
            relations::delete(
                &b.state,
                ACCOUNT,
                &b.catalog,
                &ns,
                "ddl_extra",
                RelationKind::Table,
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        timed_refresh(&b, &cache, &mut after_ddl, RefreshOutcome::Reloaded).await?;
    }

    Ok(json!({
        "tables": tables,
        "legacy": legacy.json(),
        "authoritative_steady": steady.json(),
        "authoritative_cold": cold.json(),
        "authoritative_after_one_ddl": after_ddl.json(),
    }))
}

fn row(name: &str, v: &Value) -> String {
    format!(
        "  {name:<28} {:>9.1} {:>9.1} {:>11.1} {:>11.1} {:>8}",
        v["requests_per_refresh"].as_f64().unwrap_or(0.0),
        v["items_read_per_refresh"].as_f64().unwrap_or(0.0),
        v["latency_us"]["p50"].as_f64().unwrap_or(0.0),
        v["latency_us"]["p99"].as_f64().unwrap_or(0.0),
        v["samples"].as_u64().unwrap_or(0),
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> BenchResult<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if args.is_empty() {
        vec![10, 1_000, 10_000]
    } else {
        args
    };
    let mut results = Vec::new();
    println!("directory refresh on redb (per refresh)");
    println!(
        "  {:<28} {:>9} {:>9} {:>11} {:>11} {:>8}",
        "mode", "requests", "items", "p50 us", "p99 us", "samples"
    );
    for t in sizes {
        let r = run(t).await?;
        println!("T = {t}");
        for mode in [
            "legacy",
            "authoritative_steady",
            "authoritative_cold",
            "authoritative_after_one_ddl",
        ] {
            println!("{}", row(mode, &r[mode]));
        }
        results.push(r);
    }
    let out = json!({
        "benchmark": "directory_refresh",
        "backend": "redb (file in a temp directory)",
        "command": "cargo run --profile bench-fast -p flotilla-core --example directory_bench",
        "results": results,
    });
    std::fs::create_dir_all("bench-results")?;
    std::fs::write(
        "bench-results/directory.json",
        serde_json::to_string_pretty(&out)? + "\n",
    )?;
    println!("wrote bench-results/directory.json");
    Ok(())
}
