//! Access-control benchmark (not a test): the cost of the decision on `flotilla serve`'s
//! router (redb), side by side with authorization off.
//!
//! "Off" is a token naming no principal (`ACCOUNT_ADMIN` of its account, as before access
//! control: no read, no decision); "on" is a named principal whose roles' grants decide, in
//! an account holding 40 roles and 200 grants. Requests alternate between the two callers so
//! both see the same store and cache state. Besides latency, the metastore requests of each
//! request are counted: the named principal's extra cost must be one strong point read (the
//! account's grants generation).
//!
//! Run: `cargo run --profile bench-fast -p flotilla-core --example acl_bench [-- N]`
//! Prints a table and writes `bench-results/acl.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const ADMIN: &str = "bench-admin-token-1";
const READER: &str = "bench-reader-token-1";

async fn call(
    router: &axum::Router,
    token: &str,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {token}"));
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

fn pct(samples: &[Duration], p: f64) -> f64 {
    let mut s = samples.to_vec();
    s.sort();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s[i].as_secs_f64() * 1e6
}

struct Case {
    name: &'static str,
    off: Vec<Duration>,
    on: Vec<Duration>,
    reads_off: f64,
    reads_on: f64,
    point_reads_off: f64,
    point_reads_on: f64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let dir = tempfile::tempdir().expect("tempdir");
    let counting =
        CountingMetastore::new(RedbMetastore::open(dir.path().join("bench.redb")).expect("redb"));
    let counters = counting.counters();
    let mut tokens = StaticTokens::new();
    tokens.add(ADMIN, false, vec!["bench".into()]);
    tokens.add_named(READER, vec!["bench".into()], "reader", vec![]);
    let operator = "bench-operator-token";
    tokens.add(operator, true, vec![]);
    let state = AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let router = flotilla_core::router(state.clone());
    let (s, _) = call(
        &router,
        operator,
        "POST",
        "/v1/accounts",
        Some(json!({"id": "bench"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (_, cat) = call(
        &router,
        ADMIN,
        "POST",
        "/v1/accounts/bench/catalogs",
        Some(json!({"display_name": "c"})),
    )
    .await;
    let cat = cat["id"].as_str().expect("id").to_owned();
    let base = format!("/v1/accounts/bench/catalogs/{cat}/namespaces");
    let schema = json!({"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]});
    for ns in 0..20 {
        call(
            &router,
            ADMIN,
            "POST",
            &base,
            Some(json!({"path": [format!("ns{ns:02}")]})),
        )
        .await;
    }
    for t in 0..100 {
        let (s, v) = call(
            &router,
            ADMIN,
            "POST",
            &format!("{base}/ns00/tables"),
            Some(json!({"name": format!("t{t:03}"), "schema": schema, "format": "ICEBERG"})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    // 40 roles with 5 grants each (namespaces of the catalog), one of them the reader's.
    for r in 0..40 {
        let role = format!("role{r:02}");
        call(
            &router,
            ADMIN,
            "POST",
            "/v1/accounts/bench/roles",
            Some(json!({"name": role})),
        )
        .await;
        for g in 0..5 {
            let ns = format!("ns{:02}", (r + g) % 20);
            let (s, v) = call(
                &router,
                ADMIN,
                "POST",
                "/v1/accounts/bench/grants",
                Some(json!({"role": role, "privilege": "READ",
                    "securable": {"type": "NAMESPACE", "catalog_id": cat, "path": [ns]}})),
            )
            .await;
            assert_eq!(s, StatusCode::CREATED, "{v}");
        }
    }
    call(
        &router,
        ADMIN,
        "PUT",
        "/v1/accounts/bench/roles/role00/members/reader",
        None,
    )
    .await;

    let get = format!("{base}/ns00/tables/t042");
    let list = format!("{base}/ns00/tables?page_size=100");
    let mut cases = Vec::new();
    for (name, uri, rounds) in [
        ("get_table", get, n),
        ("list_tables_page_100", list, n / 10),
    ] {
        let mut case = Case {
            name,
            off: Vec::with_capacity(rounds),
            on: Vec::with_capacity(rounds),
            reads_off: 0.0,
            reads_on: 0.0,
            point_reads_off: 0.0,
            point_reads_on: 0.0,
        };
        // Warm both paths (the reader's first request loads the account's grants).
        for token in [ADMIN, READER] {
            let (s, v) = call(&router, token, "GET", &uri, None).await;
            assert_eq!(s, StatusCode::OK, "{v}");
        }
        for _ in 0..rounds {
            for (token, on) in [(ADMIN, false), (READER, true)] {
                let before = counters.snapshot();
                let t = Instant::now();
                let (s, _) = call(&router, token, "GET", &uri, None).await;
                let took = t.elapsed();
                let after = counters.snapshot();
                assert_eq!(s, StatusCode::OK);
                let reads = (after.requests() - before.requests()) as f64;
                let points = (after.get - before.get) as f64;
                if on {
                    case.on.push(took);
                    case.reads_on += reads;
                    case.point_reads_on += points;
                } else {
                    case.off.push(took);
                    case.reads_off += reads;
                    case.point_reads_off += points;
                }
            }
        }
        let r = rounds as f64;
        case.reads_off /= r;
        case.reads_on /= r;
        case.point_reads_off /= r;
        case.point_reads_on /= r;
        cases.push(case);
    }

    // The parts of the named principal's cost: the validation (the generation point read and
    // the cached view) and the decision on the view.
    let scope = flotilla_core::auth::Principal::for_accounts("bench", ["bench".to_owned()])
        .named("reader", Vec::<String>::new())
        .authorize_account("bench")
        .expect("scope");
    let mut validate = Vec::with_capacity(n);
    let mut decide = Vec::with_capacity(n);
    let table = flotilla_core::acl::Securable::Table {
        catalog_id: cat.clone(),
        path: vec!["ns00".into()],
        name: "t042".into(),
    };
    for _ in 0..n {
        let t = Instant::now();
        let access =
            flotilla_core::acl::Access::resolve(state.store.as_ref(), &state.acl, scope.clone())
                .await
                .expect("access");
        validate.push(t.elapsed());
        let t = Instant::now();
        access
            .authorize(flotilla_core::acl::Action::Read, &table)
            .expect("allowed");
        decide.push(t.elapsed());
    }
    println!(
        "parts (µs p50): resolve (point read + view + roles) {:.1}, authorize {:.2}",
        pct(&validate, 0.5),
        pct(&decide, 0.5)
    );
    println!(
        "{:<22} {:>7} {:>11} {:>10} {:>11} {:>10} {:>9} {:>13} {:>13}",
        "request (redb)",
        "count",
        "off p50 µs",
        "on p50 µs",
        "Δ p50 µs",
        "on p99 µs",
        "off p99",
        "store req off",
        "store req on"
    );
    let mut results = Vec::new();
    for c in &cases {
        let (off50, on50) = (pct(&c.off, 0.5), pct(&c.on, 0.5));
        println!(
            "{:<22} {:>7} {:>11.1} {:>10.1} {:>11.1} {:>10.1} {:>9.1} {:>13.2} {:>13.2}",
            c.name,
            c.on.len(),
            off50,
            on50,
            on50 - off50,
            pct(&c.on, 0.99),
            pct(&c.off, 0.99),
            c.reads_off,
            c.reads_on
        );
        results.push(json!({
            "request": c.name, "count": c.on.len(),
            "off_p50_us": off50, "on_p50_us": on50, "delta_p50_us": on50 - off50,
            "off_p99_us": pct(&c.off, 0.99), "on_p99_us": pct(&c.on, 0.99),
            "store_requests_off": c.reads_off, "store_requests_on": c.reads_on,
            "point_reads_off": c.point_reads_off, "point_reads_on": c.point_reads_on,
        }));
    }
    let out = json!({"backend": "redb", "roles": 40, "grants": 200, "results": results,
        "resolve_p50_us": pct(&validate, 0.5), "authorize_p50_us": pct(&decide, 0.5)});
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results");
    std::fs::create_dir_all(&path).expect("bench-results");
    std::fs::write(
        path.join("acl.json"),
        serde_json::to_vec_pretty(&out).expect("json"),
    )
    .expect("write");
    println!("wrote bench-results/acl.json");
}
