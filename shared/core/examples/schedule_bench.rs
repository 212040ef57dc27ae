//! Scheduling benchmark (not a test; figures are counts, so the build profile does not change
//! them). Two parts:
//!
//! 1. **Tick cost**: 10,000 overlays over 100 integrations in one account on the embedded
//!    redb metastore (records written directly, as the services write them: overlay,
//!    integration, scheduler state with its demand, due entry), with 1% and then 100% of the
//!    overlays due (1 and 100 integrations). Metastore requests and items read by one tick
//!    of the due-time index, against the full scan it replaced (`work::due_overlays`).
//! 2. **Shared discovery**: 10 overlays selecting the same namespaces of one Iceberg REST
//!    fixture integration (10 namespaces x 10 tables), each into its own catalog: upstream
//!    requests of ten separate runs against one plan job.
//!
//! Run: `cargo run -p flotilla-core --example schedule_bench` (prints the tables and writes
//! `bench-results/schedule.json`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::{Clock, ManualClock};
use flotilla_core::reconcile::schedule::{MAX_DUE_PER_TICK, handle_plan, tick};
use flotilla_core::reconcile::work::{MessageOutcome, due_overlays};
use flotilla_core::reconcile::{AdapterConnector, RunOptions, reconcile};
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_domain::model::{
    AuthConfig, IntegrationRecord, IntegrationType, OverlayDemand, OverlayRecord, SchedulerState,
};
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Metastore, Op, Transaction};
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const TOKEN: &str = "bench-token-0001";
const UPSTREAM: &str = "bench-upstream-token";
const INTEGRATIONS: usize = 100;
const OVERLAYS_PER_INTEGRATION: usize = 100;
const START_MS: i64 = 1_800_000_000_000;

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

fn body<T: serde::Serialize>(v: &T) -> BenchResult<Vec<u8>> {
    Ok(serde_json::to_vec(v)?)
}

async fn flush(store: &dyn Metastore, ops: &mut Vec<Op>) -> BenchResult<()> {
    while !ops.is_empty() {
        let n = ops.len().min(100);
        let tx = Transaction {
            ops: ops.drain(..n).collect(),
        };
        store.transact(tx).await?;
    }
    Ok(())
}

/// Seeds the account: `due` integrations due at `START_MS`, the others an hour later.
async fn seed(store: &dyn Metastore, due: usize) -> BenchResult<()> {
    let account = "bench";
    let mut ops = vec![
        Op::put(
            keys::account_listing(account),
            body(&json!({"id": account}))?,
        ),
        // The backfill has nothing to do in this deployment.
        Op::put(
            keys::due_backfill_cursor(),
            body(&json!({"after": null, "done": true}))?,
        ),
    ];
    for i in 0..INTEGRATIONS {
        let int_id = format!("int{i:04}");
        let rec = IntegrationRecord {
            id: int_id.clone(),
            account_id: account.into(),
            display_name: int_id.clone(),
            kind: IntegrationType::IcebergRest,
            uri: "https://catalog.example.com/".into(),
            properties: Default::default(),
            authentication: AuthConfig::Bearer {},
            credentials_configured: true,
            credential_generation: 1,
            generation: 1,
            paused: false,
            revision: 1,
            create_time: String::new(),
            update_time: String::new(),
        };
        ops.push(Op::put(keys::integration(account, &int_id), body(&rec)?));
        let mut demand = BTreeMap::new();
        for o in 0..OVERLAYS_PER_INTEGRATION {
            let id = format!("ovl{i:04}x{o:04}");
            let rec = OverlayRecord {
                id: id.clone(),
                account_id: account.into(),
                display_name: id.clone(),
                integration_id: int_id.clone(),
                catalog_id: format!("cat{i:04}"),
                include_namespaces: vec![],
                exclude_namespaces: vec![],
                generation: 1,
                paused: false,
                refresh_interval_secs: 3600,
                revision: 1,
                create_time: String::new(),
                update_time: String::new(),
            };
            ops.push(Op::put(keys::overlay(account, &id), body(&rec)?));
            // The last run of the overlays that are not due started 30 minutes ago.
            if i >= due {
                ops.push(Op::put(
                    keys::overlay_status(account, &id),
                    body(&json!({"last_started_ms": START_MS - 1_800_000,
                                  "last_reconcile": {"observed_generation": 1,
                                                     "integration_generation": 1}}))?,
                ));
            }
            demand.insert(
                id,
                OverlayDemand {
                    interval_secs: 3600,
                    paused: false,
                },
            );
            if ops.len() >= 100 {
                flush(store, &mut ops).await?;
            }
        }
        let due_ms = if i < due {
            START_MS
        } else {
            START_MS + 1_800_000
        };
        let state = SchedulerState {
            integration_id: int_id.clone(),
            plan_generation: 1,
            demand,
            due_ms: Some(due_ms),
            ..SchedulerState::default()
        };
        ops.push(Op::put(
            keys::scheduler_state(account, &int_id),
            body(&state)?,
        ));
        ops.push(Op::put(
            keys::due_entry(account, &int_id, due_ms),
            body(&json!({}))?,
        ));
        flush(store, &mut ops).await?;
    }
    flush(store, &mut ops).await
}

struct TickFigures {
    label: String,
    due_overlays: usize,
    messages: usize,
    tick: MetricsSnapshot,
    full_scan_messages: usize,
    full_scan: MetricsSnapshot,
}

async fn tick_case(due: usize) -> BenchResult<TickFigures> {
    let dir = tempfile::tempdir()?;
    let store = CountingMetastore::new(RedbMetastore::open(dir.path().join("meta.redb"))?);
    seed(&store, due).await?;
    let before = store.snapshot();
    let t = tick(&store, START_MS, MAX_DUE_PER_TICK).await?;
    let after = store.snapshot();
    let full_before = store.snapshot();
    let legacy = due_overlays(&store, START_MS).await?;
    let full_after = store.snapshot();
    Ok(TickFigures {
        label: format!("{}% due", due * 100 / INTEGRATIONS),
        due_overlays: due * OVERLAYS_PER_INTEGRATION,
        messages: t.messages.len(),
        tick: delta(before, after),
        full_scan_messages: legacy.len(),
        full_scan: delta(full_before, full_after),
    })
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

struct SharingFigures {
    overlays: usize,
    tables: usize,
    unshared_requests: usize,
    shared_requests: usize,
    unshared_metastore: MetricsSnapshot,
    shared_metastore: MetricsSnapshot,
}

async fn sharing_case(overlays: usize) -> BenchResult<SharingFigures> {
    let (namespaces, per_ns) = (10, 10);
    let fx = IcebergFixture::start().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM]);
    for n in 0..namespaces {
        let ns = format!("ns{n:02}");
        fx.add_namespace(&[&ns]);
        for t in 0..per_ns {
            fx.add_table(&[&ns], &format!("t{t:02}"));
        }
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
    let clock = ManualClock::new(START_MS);
    let state = AppState::new(
        counting.clone(),
        Arc::new(clock.clone()),
        Arc::new(tokens),
        config,
    )
    .with_credentials(Arc::new(creds));
    post(&state, "/v1/accounts", json!({"id": "bench"})).await?;
    let int = post(
        &state,
        "/v1/accounts/bench/integrations",
        json!({"display_name": "up", "type": "ICEBERG_REST", "uri": fx.uri(),
               "authentication": {"type": "BEARER"}, "credentials": {"token": UPSTREAM}}),
    )
    .await?;
    let integration = int["id"].as_str().ok_or("integration id")?.to_owned();
    let mut ids = Vec::new();
    for i in 0..overlays {
        let cat = post(
            &state,
            "/v1/accounts/bench/catalogs",
            json!({"display_name": format!("copy{i}")}),
        )
        .await?;
        let catalog = cat["id"].as_str().ok_or("catalog id")?.to_owned();
        let ovl = post(
            &state,
            "/v1/accounts/bench/overlays",
            json!({"display_name": format!("import{i}"), "integration_id": integration,
                   "catalog_id": catalog}),
        )
        .await?;
        ids.push(ovl["id"].as_str().ok_or("overlay id")?.to_owned());
    }
    // First materialization (not measured), so both measured passes are steady no-op reruns.
    for id in &ids {
        reconcile(
            &state,
            &AdapterConnector,
            "bench",
            id,
            &RunOptions::default(),
        )
        .await?;
    }
    fx.log().clear();
    let before = counting.snapshot();
    for id in &ids {
        reconcile(
            &state,
            &AdapterConnector,
            "bench",
            id,
            &RunOptions::default(),
        )
        .await?;
    }
    let unshared_metastore = delta(before, counting.snapshot());
    let unshared_requests = fx.log().len();
    let t = tick(counting.as_ref(), clock.now_ms(), MAX_DUE_PER_TICK).await?;
    let message = t.messages.first().ok_or("the integration is due")?.clone();
    fx.log().clear();
    let before = counting.snapshot();
    let out = handle_plan(&state, &AdapterConnector, &message).await;
    let shared_metastore = delta(before, counting.snapshot());
    if !matches!(out, MessageOutcome::Planned { reconciled } if reconciled == overlays) {
        return Err(format!("the plan job did not reconcile every overlay: {out:?}").into());
    }
    Ok(SharingFigures {
        overlays,
        tables: namespaces * per_ns,
        unshared_requests,
        shared_requests: fx.log().len(),
        unshared_metastore,
        shared_metastore,
    })
}

fn snap(m: &MetricsSnapshot) -> Value {
    json!({"requests": m.requests(), "get": m.get, "batch_get": m.batch_get, "query": m.query,
           "transact": m.transact, "items_read": m.items_read, "items_written": m.items_written})
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> BenchResult<()> {
    let mut ticks = Vec::new();
    for due in [1, INTEGRATIONS] {
        ticks.push(tick_case(due).await?);
    }
    println!(
        "tick: {} overlays over {INTEGRATIONS} integrations (redb)",
        INTEGRATIONS * OVERLAYS_PER_INTEGRATION
    );
    println!(
        "| due | plan messages | tick requests (queries, gets, transactions) | tick items read | full scan requests | full scan items read |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut out_ticks = Vec::new();
    for t in &ticks {
        println!(
            "| {} ({} overlays) | {} | {} ({}, {}, {}) | {} | {} | {} |",
            t.label,
            t.due_overlays,
            t.messages,
            t.tick.requests(),
            t.tick.query,
            t.tick.get,
            t.tick.transact,
            t.tick.items_read,
            t.full_scan.requests(),
            t.full_scan.items_read
        );
        out_ticks.push(json!({"case": t.label, "due_overlays": t.due_overlays,
            "plan_messages": t.messages, "tick": snap(&t.tick),
            "full_scan_messages": t.full_scan_messages, "full_scan": snap(&t.full_scan)}));
    }
    let s = sharing_case(10).await?;
    println!(
        "shared discovery: {} overlays on one integration, {} tables each (no-op reruns)",
        s.overlays, s.tables
    );
    println!("| pass | upstream requests | metastore requests | items read | items written |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| {} separate runs | {} | {} | {} | {} |",
        s.overlays,
        s.unshared_requests,
        s.unshared_metastore.requests(),
        s.unshared_metastore.items_read,
        s.unshared_metastore.items_written
    );
    println!(
        "| one plan job | {} | {} | {} | {} |",
        s.shared_requests,
        s.shared_metastore.requests(),
        s.shared_metastore.items_read,
        s.shared_metastore.items_written
    );
    let out = json!({
        "ticks": out_ticks,
        "sharing": {"overlays": s.overlays, "tables": s.tables,
            "unshared_upstream_requests": s.unshared_requests,
            "shared_upstream_requests": s.shared_requests,
            "unshared_metastore": snap(&s.unshared_metastore),
            "shared_metastore": snap(&s.shared_metastore)},
    });
    std::fs::create_dir_all("bench-results")?;
    std::fs::write(
        "bench-results/schedule.json",
        serde_json::to_string_pretty(&out)?,
    )?;
    Ok(())
}
