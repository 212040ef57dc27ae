#![forbid(unsafe_code)]
//! DynamoDB request units per API call, for the cost estimate in `docs/deploy.md`.
//!
//! Each representative call is an HTTP API v2 payload (built from `events/api/*.json`) sent
//! through `lambda_http`'s request conversion into the api function's own app
//! (`src/handler.rs`), on a redb metastore wrapped twice: [`CountingMetastore`] (the
//! counters of `/v1/admin/metrics`) and [`Meter`], which prices every metastore request the
//! way the DynamoDB backend issues it (`get` = GetItem, `batch_get` = BatchGetItem, `query` =
//! one Query page, `count` = Query with `Select=COUNT`, `transact` = TransactWriteItems) with
//! DynamoDB's rules:
//!
//! - strongly consistent reads: 1 RRU per 4 KB (GetItem per item, a Query page on the sum of
//!   its items), at least 1; eventually consistent: half;
//! - TransactWriteItems: 2 WRU per 1 KB of every item in it (the larger of the old and new
//!   item for an update, the existing item for a delete or condition check), at least 2.
//!
//! Item size follows DynamoDB's accounting of this table's attributes: `pk`, `sk`, `v`
//! (number), `b` (binary body) and `ttl` (number, when set). The metastore API is the same
//! for both backends, so the counts measured on redb are the requests the DynamoDB backend
//! would send.
//!
//! A third wrapper, [`RoundTripMetastore`], counts round trips: requests that started while
//! no other request was in flight, i.e. the sequential requests of the call (its latency
//! floor on DynamoDB).
//!
//! `cargo run -p flotilla-fn-api --example dynamodb_units [-- OUT.json]` (default
//! `bench-results/dynamodb-units.json`).

#[path = "../src/handler.rs"]
#[allow(dead_code)]
mod handler;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot, RoundTripMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction, query_all,
};
use flotilla_runtime::aws::ClaimsOnly;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

/// Priced units of the requests seen since the last [`Meter::take`].
#[derive(Clone, Copy, Debug, Default)]
struct Units {
    rru: f64,
    wru: f64,
    bytes_read: u64,
    bytes_written: u64,
}

/// Prices each request with DynamoDB's on-demand rules (see the module comment). Sizes of
/// items a write replaces or checks are looked up on the inner store without being counted.
struct Meter<M> {
    inner: M,
    units: Mutex<Units>,
}

fn number_size(n: i128) -> u64 {
    // DynamoDB: about one byte per two significant digits, plus one.
    let digits = n.unsigned_abs().to_string().len() as u64;
    digits.div_ceil(2) + 1
}

fn item_size(key: &Key, version: u64, body_len: usize, expires_at: Option<i64>) -> u64 {
    let mut size = 2 + key.pk.len() as u64 + 2 + key.sk.len() as u64;
    size += 1 + number_size(i128::from(version));
    size += 1 + body_len as u64;
    if let Some(t) = expires_at {
        size += 3 + number_size(i128::from(t));
    }
    size
}

fn stored_size(item: &Item) -> u64 {
    item_size(&item.key, item.version, item.body.len(), item.expires_at)
}

fn read_units(bytes: u64, consistency: Consistency) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    match consistency {
        Consistency::Strong => units,
        Consistency::Eventual => units / 2.0,
    }
}

impl<M: Metastore> Meter<M> {
    fn new(inner: M) -> Self {
        Self {
            inner,
            units: Mutex::new(Units::default()),
        }
    }

    fn add(&self, f: impl FnOnce(&mut Units)) {
        if let Ok(mut u) = self.units.lock() {
            f(&mut u);
        }
    }

    fn take(&self) -> Units {
        self.units
            .lock()
            .map(|mut u| std::mem::take(&mut *u))
            .unwrap_or_default()
    }

    async fn existing_size(&self, key: &Key) -> u64 {
        match self.inner.get(key, Consistency::Strong).await {
            Ok(Some(item)) => stored_size(&item),
            _ => 0,
        }
    }
}

#[async_trait]
impl<M: Metastore> Metastore for Meter<M> {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        let out = self.inner.get(key, consistency).await?;
        let bytes = out.as_ref().map(stored_size).unwrap_or(0);
        self.add(|u| {
            u.rru += read_units(bytes, consistency);
            u.bytes_read += bytes;
        });
        Ok(out)
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        let out = self.inner.batch_get(keys, consistency).await?;
        let sizes: Vec<u64> = out.iter().map(stored_size).collect();
        let missing = keys.len().saturating_sub(out.len());
        self.add(|u| {
            // Each key is priced like its own GetItem; absent keys still cost the minimum.
            for s in &sizes {
                u.rru += read_units(*s, consistency);
                u.bytes_read += s;
            }
            u.rru += missing as f64 * read_units(0, consistency);
        });
        Ok(out)
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        let page = self.inner.query(query).await?;
        let bytes: u64 = page.items.iter().map(stored_size).sum();
        self.add(|u| {
            u.rru += read_units(bytes, query.consistency);
            u.bytes_read += bytes;
        });
        Ok(page)
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        // Select=COUNT still reads (and is billed for) every matching item.
        let items = query_all(&self.inner, Query::new(pk, sk_prefix, Consistency::Strong)).await?;
        let bytes: u64 = items.iter().map(stored_size).sum();
        self.add(|u| u.rru += read_units(bytes, consistency));
        self.inner.count(pk, sk_prefix, consistency).await
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let mut wru = 0.0;
        let mut written = 0;
        for op in &tx.ops {
            let old = self.existing_size(op.key()).await;
            let size = match op {
                Op::Put {
                    key,
                    body,
                    expires_at,
                    ..
                } => {
                    let new = item_size(key, 2, body.len(), *expires_at);
                    written += new;
                    new.max(old)
                }
                Op::Delete { .. } | Op::Check { .. } => old,
            };
            wru += 2.0 * size.div_ceil(1024).max(1) as f64;
        }
        // A cancelled transaction is billed too.
        self.add(|u| {
            u.wru += wru;
            u.bytes_written += written;
        });
        self.inner.transact(tx).await
    }
}

/// The meter, shared by the state's store stack and the measuring loop.
struct Shared<M>(Arc<Meter<M>>);

#[async_trait]
impl<M: Metastore> Metastore for Shared<M> {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.0.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.0.batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.0.query(q).await
    }
    async fn count(&self, pk: &str, p: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.0.count(pk, p, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.0.transact(tx).await
    }
}

fn sample(name: &str) -> Value {
    let path = format!("{}/../../events/api/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An HTTP API v2 payload for `method path` with `body`, from the operator sample (or the
/// account-scoped one), so it carries the same headers and authorizer shape.
fn payload(operator: bool, method: &str, path: &str, body: Option<Value>) -> Value {
    let mut e = sample(if operator {
        "create-account.json"
    } else {
        "create-catalog.json"
    });
    e["rawPath"] = path.into();
    e["requestContext"]["http"]["path"] = path.into();
    e["requestContext"]["http"]["method"] = method.into();
    e["pathParameters"]["proxy"] = path.trim_start_matches('/').into();
    if let Some(h) = e["headers"].as_object_mut() {
        h.remove("idempotency-key");
    }
    match body {
        Some(b) => e["body"] = b.to_string().into(),
        None => {
            if let Some(o) = e.as_object_mut() {
                o.remove("body");
            }
        }
    }
    e
}

async fn call(state: &AppState, event: &Value) -> (u16, Value) {
    let request = lambda_http::request::from_str(&event.to_string()).expect("HTTP API v2 payload");
    let request = request.map(|b| Body::from(b.to_vec()));
    // The same app `main` runs; its EMF lines are captured and dropped here.
    let (telemetry, _lines) =
        flotilla_runtime::telemetry::LambdaTelemetry::capturing(state, "api", "bench");
    let response = handler::app(state.clone(), Arc::new(telemetry))
        .oneshot(request)
        .await
        .expect("router");
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench-results/dynamodb-units.json".into());
    let dir = tempfile::tempdir().expect("tempdir");
    // Counting outside, pricing inside: the meter's own size look-ups are not counted.
    let meter = Arc::new(Meter::new(
        RedbMetastore::open(dir.path().join("m.redb")).expect("redb"),
    ));
    let counting = CountingMetastore::new(Shared(meter.clone()));
    let counters = counting.counters();
    // Round trips: requests that started while no other was in flight (sequential requests).
    let timed = RoundTripMetastore::new(counting);
    let trips = timed.trips();
    let state = AppState::new(
        Arc::new(timed),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config::default(),
    );

    let mut rows = Vec::new();
    let mut measure = async |label: &str, event: Value, want: u16| -> Value {
        let before: MetricsSnapshot = counters.snapshot();
        let trips_before = trips.load(std::sync::atomic::Ordering::SeqCst);
        meter.take();
        let (status, body) = call(&state, &event).await;
        let after = counters.snapshot();
        let round_trips = trips.load(std::sync::atomic::Ordering::SeqCst) - trips_before;
        let units = meter.take();
        assert_eq!(status, want, "{label}: {body}");
        let row = json!({
            "call": label,
            "status": status,
            "requests": after.requests() - before.requests(),
            "round_trips": round_trips,
            "get": after.get - before.get,
            "batch_get": after.batch_get - before.batch_get,
            "query": after.query - before.query,
            "count": after.count - before.count,
            "transact": after.transact - before.transact,
            "items_read": after.items_read - before.items_read,
            "items_written": after.items_written - before.items_written,
            "bytes_read": units.bytes_read,
            "bytes_written": units.bytes_written,
            "rru": units.rru,
            "wru": units.wru,
        });
        println!(
            "{label:<48} req {:>2}  trips {:>2}  items r/w {:>3}/{:>2}  RRU {:>5.1}  WRU {:>5.1}",
            row["requests"],
            row["round_trips"],
            row["items_read"],
            row["items_written"],
            units.rru,
            units.wru
        );
        rows.push(row);
        body
    };

    let acme = "/v1/accounts/acme";
    measure("GET /v1/health", sample("health.json"), 200).await;
    measure("POST /v1/accounts", sample("create-account.json"), 201).await;
    let cat = measure(
        "POST {A}/catalogs (Idempotency-Key)",
        sample("create-catalog.json"),
        201,
    )
    .await;
    let c = cat["id"].as_str().expect("catalog id").to_owned();
    measure("GET {A}/catalogs", sample("list-catalogs.json"), 200).await;
    measure(
        "GET {A}/catalogs/{c}",
        payload(false, "GET", &format!("{acme}/catalogs/{c}"), None),
        200,
    )
    .await;
    measure(
        "POST {A}/catalogs/{c}/namespaces",
        payload(
            false,
            "POST",
            &format!("{acme}/catalogs/{c}/namespaces"),
            Some(json!({"path": ["sales"]})),
        ),
        201,
    )
    .await;
    let table = |name: &str| {
        json!({"name": name, "format": "ICEBERG", "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "amount", "required": false, "type": "double"}]}})
    };
    let tables = format!("{acme}/catalogs/{c}/namespaces/sales/tables");
    measure(
        "POST {A}/.../tables",
        payload(false, "POST", &tables, Some(table("orders"))),
        201,
    )
    .await;
    measure(
        "GET {A}/.../tables/{t}",
        payload(false, "GET", &format!("{tables}/orders"), None),
        200,
    )
    .await;
    measure(
        "GET {A}/.../tables",
        payload(false, "GET", &tables, None),
        200,
    )
    .await;
    let directory = format!("{acme}/catalogs/{c}/directory");
    measure(
        "GET {A}/catalogs/{c}/directory (legacy scan)",
        payload(false, "GET", &directory, None),
        200,
    )
    .await;
    measure(
        "POST /v1/admin/catalog-finalize",
        payload(
            true,
            "POST",
            "/v1/admin/catalog-finalize",
            Some(json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true})),
        ),
        200,
    )
    .await;
    measure(
        "GET {A}/catalogs/{c}/directory (first authoritative)",
        payload(false, "GET", &directory, None),
        200,
    )
    .await;
    measure(
        "GET {A}/catalogs/{c}/directory (warm, unchanged)",
        payload(false, "GET", &directory, None),
        200,
    )
    .await;
    measure(
        "POST {A}/.../tables (second table)",
        payload(false, "POST", &tables, Some(table("customers"))),
        201,
    )
    .await;
    measure(
        "GET {A}/catalogs/{c}/directory (after one DDL)",
        payload(false, "GET", &directory, None),
        200,
    )
    .await;
    let mut keyed = payload(false, "POST", &tables, Some(table("refunds")));
    keyed["headers"]["idempotency-key"] = "units-refunds-1".into();
    measure("POST {A}/.../tables (Idempotency-Key)", keyed.clone(), 201).await;
    measure("POST {A}/.../tables (Idempotency-Key, replay)", keyed, 201).await;
    let views = format!("{acme}/catalogs/{c}/namespaces/sales/views");
    let view = json!({"name": "big_orders", "schema": {"type": "struct", "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"}]},
        "definitions": [{"dialect": "spark", "sql": "SELECT id FROM orders WHERE amount > 100"}]});
    measure(
        "POST {A}/.../views",
        payload(false, "POST", &views, Some(view)),
        201,
    )
    .await;
    measure(
        "GET {A}/catalogs/{c}/namespaces/{ns}",
        payload(
            false,
            "GET",
            &format!("{acme}/catalogs/{c}/namespaces/sales"),
            None,
        ),
        200,
    )
    .await;

    let doc = json!({
        "benchmark": "dynamodb_units_per_call",
        "command": "cargo run -p flotilla-fn-api --example dynamodb_units",
        "method": "api function app (lambda_http conversion of HTTP API v2 payloads) on redb; every metastore request priced with DynamoDB on-demand rules (strong read 1 RRU/4 KB, eventual 0.5, TransactWriteItems 2 WRU/1 KB per item)",
        "results": rows,
    });
    if let Some(parent) = std::path::Path::new(&out_path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).expect("output directory");
    }
    std::fs::write(
        &out_path,
        serde_json::to_string_pretty(&doc).expect("json") + "\n",
    )
    .expect("write");
    println!("wrote {out_path}");
}
