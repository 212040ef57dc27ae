//! Integration-owned scheduling (`docs/reconciliation.md`, "Scheduling"): the due-time
//! index and its tick (reads proven by the metastore's counters), the effective plan and
//! pause semantics, shared discovery, plan-generation fences, leases and the backfill.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use async_trait::async_trait;
use axum::http::StatusCode;
use flotilla_catalog_access::spi::CatalogClient;
use flotilla_core::Config;
use flotilla_core::reconcile::schedule::{
    LEASE_MS, PlanMessage, RETRY_MS, backfill, handle_plan, lease, tick,
};
use flotilla_core::reconcile::work::MessageOutcome;
use flotilla_core::reconcile::{AdapterConnector, Connector, ReconcileError};
use flotilla_core::service::schedule as sched;
use flotilla_domain::keys;
use flotilla_domain::model::{IntegrationRecord, SchedulerState};
use flotilla_metastore::{Consistency, Op, Query, Transaction, query_all};
use overlay_env::*;
use serde_json::json;
use support::*;

async fn env_on(kind: Kind, include: serde_json::Value) -> Env {
    let config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    Env::with(kind, sample_fixture().await, include, config, true).await
}

fn clock(env: &Env) -> &flotilla_core::clock::ManualClock {
    env.h.clock.as_ref().expect("manual clock")
}

fn now(env: &Env) -> i64 {
    env.h.state.clock.now_ms()
}

async fn state_of(env: &Env, integration: &str) -> Option<SchedulerState> {
    sched::load(env.dyn_store(), "acme", integration)
        .await
        .expect("state")
        .map(|s| s.value)
}

/// Every entry of the due-time index.
async fn index(env: &Env) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    for shard in 0..keys::DUE_SHARDS {
        for item in query_all(
            env.dyn_store(),
            Query::new(keys::due_pk(shard), "", Consistency::Strong),
        )
        .await
        .expect("index")
        {
            out.push(keys::parse_due_sk(&item.key.sk).expect("due key"));
        }
    }
    out.sort();
    out
}

async fn run_all(env: &Env, msgs: &[PlanMessage]) {
    for m in msgs {
        let out = handle_plan(&env.h.state, &AdapterConnector, m).await;
        assert!(!out.redeliver(), "{out:?}");
    }
}

/// An integration with one overlay (over `hr`) in its own catalog.
async fn another(env: &Env, i: usize) -> (String, String) {
    let catalog = env.h.catalog("acme", ACME, &format!("extra{i}")).await;
    let integration = create_integration(&env.h, &env.fx.uri(), &format!("up{i}")).await;
    let overlay = create_overlay(
        &env.h,
        &format!("ovl{i}"),
        &integration,
        &catalog,
        json!([["hr"]]),
    )
    .await;
    (integration, overlay)
}

both_backends!(redb: (Kind::Redb), dynamo: (Kind::Dynamo);
    the_tick_reads_only_what_is_due,
    pausing_removes_demand_and_a_paused_integration_gets_no_upstream_work,
);

async fn the_tick_reads_only_what_is_due(kind: Kind) {
    let env = env_on(kind, json!([["hr"]])).await;
    let mut overlays = vec![(env.integration.clone(), env.overlay.clone())];
    for i in 0..4 {
        overlays.push(another(&env, i).await);
    }
    // Every new overlay is due now: one entry per integration, created with it.
    assert_eq!(index(&env).await.len(), 5);
    let before = env.store.snapshot();
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let after = env.store.snapshot();
    assert_eq!(t.messages.len(), 5);
    // Reads: the index queries of each shard (doubling pages), the cursor, and one state
    // read per due entry.
    let queries = after.query - before.query;
    assert!(
        (u64::from(keys::DUE_SHARDS)..=u64::from(keys::DUE_SHARDS) + 2 * 5).contains(&queries),
        "{queries}"
    );
    assert_eq!(after.get - before.get, 1 + 5);
    assert_eq!(after.batch_get - before.batch_get, 0);
    run_all(&env, &t.messages).await;
    // Nothing is due until the interval elapses: the tick reads no state at all.
    let before = env.store.snapshot();
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let after = env.store.snapshot();
    assert!(t.messages.is_empty(), "{:?}", t.messages);
    assert_eq!(after.get - before.get, 1, "only the cursor");
    assert_eq!(after.query - before.query, u64::from(keys::DUE_SHARDS));
    assert!(
        after.items_read - before.items_read <= 5 + 1,
        "at most one entry past now per shard, and the cursor"
    );
    // A selection change makes its one integration due now.
    let (int1, ovl1) = &overlays[1];
    let etag = env.h.get(&ovl_path(ovl1), ACME).await.body["etag"]
        .as_str()
        .expect("etag")
        .to_owned();
    let r = env
        .h
        .patch(
            &ovl_path(ovl1),
            ACME,
            json!({"include_namespaces": [["sales"]]}),
            Some(&etag),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let before = env.store.snapshot();
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let after = env.store.snapshot();
    assert_eq!(t.messages.len(), 1);
    assert_eq!(&t.messages[0].integration_id, int1);
    assert_eq!(after.get - before.get, 1 + 1);
    run_all(&env, &t.messages).await;
    // After the interval, all five are due again.
    clock(&env).advance_ms(3600 * 1000 + 1);
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t.messages.len(), 5);
}

async fn pausing_removes_demand_and_a_paused_integration_gets_no_upstream_work(kind: Kind) {
    let env = env_on(kind, json!([["hr"]])).await;
    let c2 = env.h.catalog("acme", ACME, "second").await;
    let o2 = create_overlay(&env.h, "second", &env.integration, &c2, json!([["sales"]])).await;
    let r = env
        .h
        .patch(&ovl_path(&o2), ACME, json!({"paused": true}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let s = state_of(&env, &env.integration).await.expect("state");
    assert_eq!(s.demand.len(), 2);
    assert!(s.demand[&o2].paused);
    assert_eq!(s.active_overlays().count(), 1);
    // The plan runs the active overlay only.
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t.messages.len(), 1);
    run_all(&env, &t.messages).await;
    assert_eq!(env.relations().await.len(), 1, "hr.people");
    let r = env.h.get(&ovl_path(&o2), ACME).await;
    assert!(r.body["last_reconcile"].is_null(), "{:?}", r.body);
    // Pausing the last active overlay removes the integration from the index.
    env.h
        .patch(&ovl_path(&env.overlay), ACME, json!({"paused": true}), None)
        .await;
    assert!(index(&env).await.is_empty());
    assert_eq!(state_of(&env, &env.integration).await.unwrap().due_ms, None);
    // Resuming makes it due now.
    env.h
        .patch(
            &ovl_path(&env.overlay),
            ACME,
            json!({"paused": false}),
            None,
        )
        .await;
    assert_eq!(index(&env).await.len(), 1);
    let due = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(due.messages.len(), 1);
    // A paused integration: out of the index, its messages do no upstream work, and its
    // listings and validation are refused before anything connects.
    let ip = format!("/v1/accounts/acme/integrations/{}", env.integration);
    let r = env.h.patch(&ip, ACME, json!({"paused": true}), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(index(&env).await.is_empty());
    env.fx.log().clear();
    let stale = handle_plan(&env.h.state, &AdapterConnector, &due.messages[0]).await;
    assert!(
        matches!(stale, MessageOutcome::Superseded { .. }),
        "{stale:?}"
    );
    let current = PlanMessage {
        plan_generation: state_of(&env, &env.integration)
            .await
            .unwrap()
            .plan_generation,
        ..due.messages[0].clone()
    };
    let out = handle_plan(&env.h.state, &AdapterConnector, &current).await;
    assert!(matches!(out, MessageOutcome::Paused), "{out:?}");
    let r = env.h.post(&format!("{ip}/validate"), ACME, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "{:?}",
        r.body
    );
    let r = env.h.get(&format!("{ip}/upstream/namespaces"), ACME).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "{:?}",
        r.body
    );
    assert!(env.fx.log().is_empty(), "{:?}", env.fx.log().entries());
    assert!(
        tick(env.dyn_store(), now(&env), 500)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    // Resuming the integration makes it due now.
    env.h.patch(&ip, ACME, json!({"paused": false}), None).await;
    assert_eq!(
        tick(env.dyn_store(), now(&env), 500)
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlays_sharing_an_integration_share_one_discovery_pass() {
    let env = env_on(Kind::Redb, json!([])).await;
    let mut overlays = vec![(env.overlay.clone(), env.catalog.clone())];
    for i in 0..2 {
        let c = env.h.catalog("acme", ACME, &format!("copy{i}")).await;
        let o = create_overlay(&env.h, &format!("copy{i}"), &env.integration, &c, json!([])).await;
        overlays.push((o, c));
    }
    // One overlay at a time: each walks the upstream on its own.
    env.fx.log().clear();
    for (o, _) in &overlays {
        env.run_overlay(o).await.expect("run");
    }
    let unshared = env.fx.log().len();
    // The plan: one walk, three publications, each overlay's own status.
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t.messages.len(), 1);
    env.fx.log().clear();
    let out = handle_plan(&env.h.state, &AdapterConnector, &t.messages[0]).await;
    assert!(
        matches!(out, MessageOutcome::Planned { reconciled: 3 }),
        "{out:?}"
    );
    let shared = env.fx.log().len();
    // The adapter keeps the connection (`/v1/config`) across runs: one request of the
    // unshared runs is not repeated per overlay.
    assert_eq!(shared * 3 + 1, unshared, "one discovery instead of three");
    for (o, c) in &overlays {
        let r = env.h.get(&ovl_path(o), ACME).await;
        assert_eq!(
            r.body["last_reconcile"]["outcome"], "SUCCEEDED",
            "{:?}",
            r.body
        );
        let items = query_all(
            env.dyn_store(),
            Query::new(
                keys::catalog_pk(c),
                keys::RELATION_PREFIX,
                Consistency::Strong,
            ),
        )
        .await
        .expect("relations");
        assert_eq!(items.len(), 4, "{c}");
    }
    // The share of a narrower overlay is exactly what its own walk finds.
    let c = env.h.catalog("acme", ACME, "narrow").await;
    create_overlay(&env.h, "narrow", &env.integration, &c, json!([["hr"]])).await;
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let out = handle_plan(&env.h.state, &AdapterConnector, &t.messages[0]).await;
    assert!(
        matches!(out, MessageOutcome::Planned { reconciled: 4 }),
        "{out:?}"
    );
    let items = query_all(
        env.dyn_store(),
        Query::new(
            keys::catalog_pk(&c),
            keys::RELATION_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .expect("relations");
    assert_eq!(items.len(), 1, "hr.people only");
}

/// A connector that pauses another overlay of the integration while the job connects: the
/// plan generation moves between discovery and publication.
struct PausesOnConnect {
    overlay: String,
}

#[async_trait]
impl Connector for PausesOnConnect {
    async fn connect(
        &self,
        state: &flotilla_core::AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        let req = serde_json::from_value(json!({"paused": true})).expect("patch");
        flotilla_core::service::overlays::patch(state, "acme", &self.overlay, req, None)
            .await
            .expect("pause");
        AdapterConnector.connect(state, integration).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plan_change_during_a_job_stops_its_publications() {
    let env = env_on(Kind::Redb, json!([["hr"]])).await;
    let c2 = env.h.catalog("acme", ACME, "second").await;
    let o2 = create_overlay(&env.h, "second", &env.integration, &c2, json!([["sales"]])).await;
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let out = handle_plan(
        &env.h.state,
        &PausesOnConnect {
            overlay: o2.clone(),
        },
        &t.messages[0],
    )
    .await;
    assert!(out.redeliver(), "{out:?}");
    assert!(
        env.relations().await.is_empty(),
        "nothing of the older plan"
    );
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "FENCE_LOST", "{run}");
    // The new plan (one active overlay) is due now and runs.
    let t2 = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t2.messages.len(), 1);
    assert!(t2.messages[0].plan_generation > t.messages[0].plan_generation);
    let out = handle_plan(&env.h.state, &AdapterConnector, &t2.messages[0]).await;
    assert!(
        matches!(out, MessageOutcome::Planned { reconciled: 1 }),
        "{out:?}"
    );
    assert_eq!(env.relations().await.len(), 1);
    // The older message, delivered again, is superseded.
    let out = handle_plan(&env.h.state, &AdapterConnector, &t.messages[0]).await;
    assert!(matches!(out, MessageOutcome::Superseded { .. }), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leased_job_is_not_run_twice_and_a_crashed_one_is_taken_again_after_its_lease() {
    let env = env_on(Kind::Redb, json!([["hr"]])).await;
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    let m = t.messages[0].clone();
    // A job leases the integration and crashes before it settles.
    lease(env.dyn_store(), &m, now(&env)).await.expect("lease");
    assert_eq!(state_of(&env, &env.integration).await.unwrap().attempts, 1);
    let out = handle_plan(&env.h.state, &AdapterConnector, &m).await;
    assert!(matches!(out, MessageOutcome::Duplicate), "{out:?}");
    assert!(env.relations().await.is_empty());
    assert!(
        tick(env.dyn_store(), now(&env), 500)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    // Once the lease expires the tick takes it again, and the job runs.
    clock(&env).advance_ms(LEASE_MS);
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t.messages, vec![m.clone()]);
    let out = handle_plan(&env.h.state, &AdapterConnector, &m).await;
    assert!(
        matches!(out, MessageOutcome::Planned { reconciled: 1 }),
        "{out:?}"
    );
    let s = state_of(&env, &env.integration).await.unwrap();
    assert_eq!((s.attempts, s.lease_until_ms), (0, None));
    assert_eq!(
        s.due_ms,
        Some(now(&env) + 3600 * 1000),
        "completion + interval"
    );
    // A transient upstream failure: due again after the retry delay, not the interval.
    clock(&env).advance_ms(3600 * 1000);
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
        ));
    let out = handle_plan(&env.h.state, &AdapterConnector, &t.messages[0]).await;
    assert!(out.redeliver(), "{out:?}");
    env.fx.clear_faults();
    let s = state_of(&env, &env.integration).await.unwrap();
    assert_eq!(s.due_ms, Some(now(&env) + RETRY_MS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tick_takes_at_most_its_bound_and_the_next_resumes() {
    let env = env_on(Kind::Redb, json!([["hr"]])).await;
    for i in 0..3 {
        another(&env, i).await;
    }
    // Nothing leases them here, so they stay due: each tick takes one, starts at the shard
    // after the one the previous tick stopped in, and resumes a shard after the last entry
    // taken from it. Every due integration is taken within (shards with entries + due)
    // ticks.
    let mut seen = std::collections::BTreeSet::new();
    let shards: std::collections::BTreeSet<u32> = index(&env)
        .await
        .iter()
        .map(|(_, a, i)| keys::due_shard(a, i))
        .collect();
    for round in 0..(shards.len() + 4) {
        let t = tick(env.dyn_store(), now(&env), 1).await.expect("tick");
        assert_eq!(t.messages.len(), 1, "round {round}");
        seen.insert(t.messages[0].integration_id.clone());
    }
    assert_eq!(seen.len(), 4, "every due integration within the bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn integrations_that_predate_the_index_are_backfilled() {
    let env = env_on(Kind::Redb, json!([["hr"]])).await;
    // As before the index existed: no scheduler state, no entry.
    let s = sched::load(env.dyn_store(), "acme", &env.integration)
        .await
        .unwrap()
        .expect("state");
    let mut tx =
        Transaction::new().with(Op::delete(keys::scheduler_state("acme", &env.integration)));
    tx.push(Op::delete(keys::due_entry(
        "acme",
        &env.integration,
        s.value.due_ms.expect("due"),
    )));
    env.dyn_store().transact(tx).await.expect("strip");
    assert!(
        tick(env.dyn_store(), now(&env), 500)
            .await
            .unwrap()
            .messages
            .is_empty()
    );
    assert_eq!(
        backfill(env.dyn_store(), now(&env), 16)
            .await
            .expect("backfill"),
        1
    );
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert_eq!(t.messages.len(), 1);
    run_all(&env, &t.messages).await;
    assert_eq!(env.relations().await.len(), 1);
    // Done: from now on one point read per pass.
    let before = env.store.snapshot();
    assert_eq!(
        backfill(env.dyn_store(), now(&env), 16)
            .await
            .expect("backfill"),
        0
    );
    let after = env.store.snapshot();
    assert_eq!(after.requests() - before.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_overlays_and_their_integration_leaves_no_schedule_behind() {
    let env = env_on(Kind::Redb, json!([["hr"]])).await;
    assert_eq!(index(&env).await.len(), 1);
    let r = env.h.delete(&ovl_path(&env.overlay), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let s = state_of(&env, &env.integration).await.expect("state");
    assert!(s.demand.is_empty() && s.due_ms.is_none(), "{s:?}");
    assert!(index(&env).await.is_empty());
    let r = env
        .h
        .delete(
            &format!("/v1/accounts/acme/integrations/{}", env.integration),
            ACME,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    assert!(state_of(&env, &env.integration).await.is_none());
}
