//! Load run (not a test): the router `flotilla serve` serves, on a redb file, behind
//! `axum::serve` on 127.0.0.1:0, driven over loopback HTTP by N concurrent reqwest clients with
//! a fixed mix, a fixed count and a time bound. Afterwards it checks that nothing was lost
//! (every acknowledged create exists unless its delete was acknowledged) and that the only
//! errors were the documented conflicts (409 on a taken name, 412 on a stale If-Match).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example load [-- CLIENTS OPS_PER_CLIENT MAX_SECS]`
//! (defaults 16 clients x 400 operations, 120 s). Prints a table and writes
//! `bench-results/load.json`. Exits non-zero when a check fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::redb_store::RedbMetastore;
use serde_json::{Value, json};

const OPERATOR: &str = "load-operator-token";
const TOKEN: &str = "load-acme-token";
const SHARED_CATALOGS: usize = 4;

#[derive(Default)]
struct ClientLog {
    /// (op, latency, status)
    samples: Vec<(&'static str, Duration, u16)>,
    /// Acknowledged creates (catalog id) and acknowledged deletes.
    created: Vec<String>,
    deleted: Vec<String>,
    /// Unexpected answers: (op, status, body).
    unexpected: Vec<(String, u16, String)>,
}

struct Client {
    http: reqwest::Client,
    base: String,
    n: usize,
    log: ClientLog,
    /// This client's own catalogs: (id, etag, tables made).
    own: Vec<(String, String, usize)>,
    rng: u64,
}

impl Client {
    fn next(&mut self) -> u64 {
        // xorshift64*: a fixed, seeded mix per client.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    async fn call(
        &mut self,
        op: &'static str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, String)],
        expected: &[u16],
    ) -> Option<(u16, Value, Option<String>)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let started = Instant::now();
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                self.log.unexpected.push((op.into(), 0, e.to_string()));
                return None;
            }
        };
        let status = resp.status().as_u16();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let value: Value = resp.json().await.unwrap_or(Value::Null);
        self.log.samples.push((op, started.elapsed(), status));
        if !expected.contains(&status) {
            self.log
                .unexpected
                .push((format!("{op} {path}"), status, value.to_string()));
        }
        Some((status, value, etag))
    }

    async fn one(&mut self, i: usize, shared: &[String]) {
        let a = "/v1/accounts/acme";
        let roll = self.next() % 100;
        match roll {
            // Create with an idempotency key, then (sometimes) replay it.
            0..=24 => {
                let key = format!("load-{}-{i}", self.n);
                let body = json!({"display_name": format!("c{}-{i}", self.n)});
                let h = [("idempotency-key", key)];
                if let Some((201, v, etag)) = self
                    .call(
                        "create",
                        reqwest::Method::POST,
                        &format!("{a}/catalogs"),
                        Some(body.clone()),
                        &h,
                        &[201],
                    )
                    .await
                {
                    let id = v["id"].as_str().unwrap_or_default().to_owned();
                    self.log.created.push(id.clone());
                    self.own.push((id.clone(), etag.unwrap_or_default(), 0));
                    if self.next().is_multiple_of(4) {
                        let r = self
                            .call(
                                "replay",
                                reqwest::Method::POST,
                                &format!("{a}/catalogs"),
                                Some(body),
                                &h,
                                &[201],
                            )
                            .await;
                        if let Some((_, v2, _)) = r
                            && v2["id"] != json!(id)
                        {
                            self.log.unexpected.push((
                                "replay answered another id".into(),
                                201,
                                v2.to_string(),
                            ));
                        }
                    }
                }
            }
            // A name another client may hold: 201 or a documented 409.
            25..=29 => {
                let name = format!("contended-{}", self.next() % 8);
                if let Some((201, v, _)) = self
                    .call(
                        "create_contended",
                        reqwest::Method::POST,
                        &format!("{a}/catalogs"),
                        Some(json!({"display_name": name})),
                        &[],
                        &[201, 409],
                    )
                    .await
                {
                    self.log
                        .created
                        .push(v["id"].as_str().unwrap_or_default().to_owned());
                }
            }
            30..=49 => {
                let r = self.next() as usize;
                let id = match self.own.is_empty() {
                    true => shared[r % shared.len()].clone(),
                    false => self.own[r % self.own.len()].0.clone(),
                };
                self.call(
                    "get",
                    reqwest::Method::GET,
                    &format!("{a}/catalogs/{id}"),
                    None,
                    &[],
                    &[200],
                )
                .await;
            }
            50..=59 => {
                self.call(
                    "list",
                    reqwest::Method::GET,
                    &format!("{a}/catalogs?page_size=50"),
                    None,
                    &[],
                    &[200],
                )
                .await;
            }
            // If-Match patches on shared catalogs: 200 or a documented 412.
            60..=74 => {
                let id = shared[(self.next() as usize) % shared.len()].clone();
                let cur = self
                    .call(
                        "get",
                        reqwest::Method::GET,
                        &format!("{a}/catalogs/{id}"),
                        None,
                        &[],
                        &[200],
                    )
                    .await;
                if let Some((200, _, Some(etag))) = cur {
                    let d = format!("d{}", self.next() % 1000);
                    self.call(
                        "patch_if_match",
                        reqwest::Method::PATCH,
                        &format!("{a}/catalogs/{id}"),
                        Some(json!({"description": d})),
                        &[("if-match", etag)],
                        &[200, 412],
                    )
                    .await;
                }
            }
            // A table in one of this client's catalogs.
            75..=89 => {
                if self.own.is_empty() {
                    return;
                }
                let k = (self.next() as usize) % self.own.len();
                let (id, _, tables) = self.own[k].clone();
                if tables == 0 {
                    self.call(
                        "create_ns",
                        reqwest::Method::POST,
                        &format!("{a}/catalogs/{id}/namespaces"),
                        Some(json!({"path": ["ns"]})),
                        &[],
                        &[201],
                    )
                    .await;
                }
                let body = json!({"name": format!("t{tables}"), "format": "ICEBERG",
                    "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}});
                self.call(
                    "create_table",
                    reqwest::Method::POST,
                    &format!("{a}/catalogs/{id}/namespaces/ns/tables"),
                    Some(body),
                    &[],
                    &[201],
                )
                .await;
                self.own[k].2 = tables + 1;
            }
            // Delete an own empty catalog with its current etag.
            _ => {
                let Some(pos) = self.own.iter().position(|c| c.2 == 0) else {
                    return;
                };
                let (id, etag, _) = self.own.remove(pos);
                if let Some((204, _, _)) = self
                    .call(
                        "delete_if_match",
                        reqwest::Method::DELETE,
                        &format!("{a}/catalogs/{id}"),
                        None,
                        &[("if-match", etag)],
                        &[204],
                    )
                    .await
                {
                    self.log.deleted.push(id);
                }
            }
        }
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let clients = args.first().copied().unwrap_or(16);
    let per_client = args.get(1).copied().unwrap_or(400);
    let max_secs = args.get(2).copied().unwrap_or(120) as u64;

    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let store = match RedbMetastore::open(dir.path().join("meta.redb")) {
        Ok(s) => Arc::new(s),
        Err(e) => panic!("redb: {e}"),
    };
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    tokens.add(TOKEN, false, vec!["acme".into()]);
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("bind: {e}"),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => panic!("addr: {e}"),
    };
    let app = flotilla_core::router(state);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let base = format!("http://{addr}");
    let http = match reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
    {
        Ok(c) => c,
        Err(e) => panic!("client: {e}"),
    };
    let r = http
        .post(format!("{base}/v1/accounts"))
        .bearer_auth(OPERATOR)
        .json(&json!({"id": "acme"}))
        .send()
        .await;
    assert!(
        matches!(&r, Ok(r) if r.status().as_u16() == 201),
        "create account: {r:?}"
    );
    let mut shared = Vec::new();
    for k in 0..SHARED_CATALOGS {
        let r = http
            .post(format!("{base}/v1/accounts/acme/catalogs"))
            .bearer_auth(TOKEN)
            .json(&json!({"display_name": format!("shared-{k}")}))
            .send()
            .await;
        let v: Value = match r {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => panic!("shared catalog: {e}"),
        };
        shared.push(v["id"].as_str().unwrap_or_default().to_owned());
    }
    let shared = Arc::new(shared);

    let deadline = Instant::now() + Duration::from_secs(max_secs);
    let started = Instant::now();
    let mut handles = Vec::new();
    for n in 0..clients {
        let mut c = Client {
            http: http.clone(),
            base: base.clone(),
            n,
            log: ClientLog::default(),
            own: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15 ^ (n as u64 + 1),
        };
        let shared = shared.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..per_client {
                if Instant::now() > deadline {
                    break;
                }
                c.one(i, &shared).await;
            }
            c.log
        }));
    }
    let mut logs = Vec::new();
    for h in handles {
        match h.await {
            Ok(l) => logs.push(l),
            Err(e) => panic!("client task: {e}"),
        }
    }
    let wall = started.elapsed();

    // Nothing lost: every acknowledged create exists unless its delete was acknowledged.
    let deleted: std::collections::BTreeSet<&String> =
        logs.iter().flat_map(|l| l.deleted.iter()).collect();
    let mut lost = Vec::new();
    let mut verified = 0;
    for id in logs.iter().flat_map(|l| l.created.iter()) {
        let r = http
            .get(format!("{base}/v1/accounts/acme/catalogs/{id}"))
            .bearer_auth(TOKEN)
            .send()
            .await;
        let status = r.map(|r| r.status().as_u16()).unwrap_or(0);
        let want = if deleted.contains(id) { 404 } else { 200 };
        verified += 1;
        if status != want {
            lost.push(format!("{id}: {status}, expected {want}"));
        }
    }

    let mut by_op: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let mut all = Vec::new();
    for l in &logs {
        for (op, d, s) in &l.samples {
            by_op.entry(op).or_default().push(*d);
            *statuses.entry(*s).or_default() += 1;
            all.push(*d);
        }
    }
    all.sort();
    let unexpected: Vec<&(String, u16, String)> =
        logs.iter().flat_map(|l| l.unexpected.iter()).collect();
    let total = all.len();
    let throughput = total as f64 / wall.as_secs_f64();
    println!(
        "load: {clients} clients x {per_client} ops (bound {max_secs}s), loopback HTTP, redb file"
    );
    println!(
        "{total} requests in {:.2}s: {throughput:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
        wall.as_secs_f64(),
        pct(&all, 0.5),
        pct(&all, 0.99)
    );
    println!(
        "{:<18} {:>7} {:>9} {:>9}",
        "op", "count", "p50 ms", "p99 ms"
    );
    let mut ops_json = Vec::new();
    for (op, v) in &mut by_op {
        v.sort();
        println!(
            "{op:<18} {:>7} {:>9.2} {:>9.2}",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99)
        );
        ops_json.push(
            json!({"op": op, "count": v.len(), "p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99)}),
        );
    }
    println!(
        "statuses {statuses:?}; acknowledged creates verified: {verified}; lost: {}; unexpected answers: {}",
        lost.len(),
        unexpected.len()
    );
    for u in unexpected.iter().take(10) {
        println!("  unexpected: {u:?}");
    }
    for l in lost.iter().take(10) {
        println!("  lost: {l}");
    }
    let out = json!({
        "clients": clients, "ops_per_client": per_client, "time_bound_secs": max_secs,
        "requests": total, "wall_secs": wall.as_secs_f64(), "throughput_rps": throughput,
        "p50_ms": pct(&all, 0.5), "p99_ms": pct(&all, 0.99),
        "statuses": statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "acknowledged_creates_verified": verified, "lost": lost.len(), "unexpected": unexpected.len(),
        "ops": ops_json,
    });
    let _ = std::fs::create_dir_all("bench-results");
    if let Err(e) = std::fs::write("bench-results/load.json", format!("{:#}\n", out)) {
        eprintln!("writing bench-results/load.json: {e}");
    }
    if !lost.is_empty() || !unexpected.is_empty() {
        std::process::exit(1);
    }
}
