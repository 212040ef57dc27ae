//! Overlay metadata reconciliation (`docs/reconciliation.md`), against the Iceberg REST
//! fixture through the real catalog-access adapter. Failure outcomes, bounds and mid-run
//! fences are in `reconcile_outcomes.rs`.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;
use support::both_backends;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_core::reconcile::work::{
    MessageOutcome, ReconcileMessage, due_overlays, handle_message,
};
use flotilla_core::reconcile::{AdapterConnector, ReconcileError};
use flotilla_domain::model::RelationKind;
use flotilla_metastore::fault::crash_points;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Page, Query, Transaction,
};
use flotilla_testkit::iceberg_fixture::{IcebergFault, IcebergFaultRule};
use overlay_env::*;
use serde_json::json;
use support::*;
use tower::ServiceExt;

both_backends!(redb: (Kind::Redb), dynamo: (Kind::Dynamo);
    first_run_materializes_namespaces_tables_and_views_with_provenance,
    no_op_rerun_writes_only_the_status_item_and_loads_conditionally,
    rename_with_stable_ids_keeps_the_flotilla_identity,
    collisions_with_local_relations_and_other_overlays_fail_the_whole_run,
    a_directly_managed_table_in_a_materialized_namespace_is_left_alone,
    an_overlay_patch_mid_run_fails_the_remaining_publications,
);

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

async fn first_run_materializes_namespaces_tables_and_views_with_provenance(kind: Kind) {
    let env = Env::on(kind, sample_fixture().await, json!([])).await;
    let s = env.run().await.expect("run");
    assert_eq!(
        (s.namespaces.created, s.tables.created, s.views.created),
        (3, 3, 1),
        "{s:?}"
    );
    assert!(s.conflicts.is_empty() && s.skipped.is_empty(), "{s:?}");
    assert_eq!(
        env.rel_names().await,
        names(&[
            "hr.people",
            "sales.eu.orders",
            "sales.eu_orders",
            "sales.orders"
        ])
    );
    assert_eq!(
        env.ns_paths().await,
        vec![names(&["hr"]), names(&["sales"]), names(&["sales", "eu"])]
    );
    for n in env.namespaces().await {
        assert!(n.created_by_overlay, "{:?}", n.path);
    }
    for c in env.claims().await {
        assert!(c.created_namespace && c.overlay_id == env.overlay, "{c:?}");
    }
    let t = env.rel(&["sales"], "orders").await.expect("table");
    assert_eq!(t.kind, RelationKind::Table);
    assert_eq!(t.format.as_deref(), Some("ICEBERG"));
    assert_eq!(t.location, env.fx.table_location(&["sales"], "orders"));
    assert_eq!(
        t.metadata_location,
        env.fx.table_metadata_location(&["sales"], "orders")
    );
    let m = t.managed_by.expect("provenance");
    assert_eq!(
        (m.integration_id.as_str(), m.overlay_id.as_str()),
        (env.integration.as_str(), env.overlay.as_str())
    );
    assert!(m.stable, "the Iceberg table-uuid is a stable identity");
    assert!(
        m.upstream_fingerprint.is_some_and(|f| f.contains("-v1")),
        "the ETag is kept for conditional loads"
    );
    let v = env.rel(&["sales"], "eu_orders").await.expect("view");
    assert_eq!(v.kind, RelationKind::View);
    assert_eq!(v.definitions[0].sql, "SELECT * FROM sales.eu.orders");
    assert!(
        env.dirgen().await.is_some(),
        "relation creates replace the directory generation"
    );
    // The API shows provenance and the overlay keeps the summary.
    let r = env
        .h
        .get(
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables/orders",
                env.catalog
            ),
            ACME,
        )
        .await;
    assert_eq!(
        r.body["managed_by"]["overlay_id"],
        env.overlay.as_str(),
        "{:?}",
        r.body
    );
    let r = env.h.get(&ovl_path(&env.overlay), ACME).await;
    assert_eq!(
        r.body["last_reconcile"]["tables"]["created"], 3,
        "{:?}",
        r.body
    );
    env.assert_consistent().await;
}

async fn no_op_rerun_writes_only_the_status_item_and_loads_conditionally(kind: Kind) {
    let env = Env::on(kind, sample_fixture().await, json!([])).await;
    env.run().await.expect("first run");
    let gen_before = env.dirgen().await;
    let before = env.store.snapshot();
    env.fx.log().clear();
    let s = env.run().await.expect("second run");
    let after = env.store.snapshot();
    assert!(!s.wrote_catalog(), "{s:?}");
    assert_eq!(
        (
            s.namespaces.unchanged,
            s.tables.unchanged,
            s.views.unchanged
        ),
        (3, 3, 1)
    );
    assert_eq!(
        after.transact - before.transact,
        1,
        "one transaction: the status item"
    );
    assert_eq!(
        after.items_written - before.items_written,
        1,
        "one item written: the status item"
    );
    assert_eq!(env.dirgen().await, gen_before, "no directory change");
    let loads = env.fx.log().filter(|r| r.path.contains("/tables/"));
    assert_eq!(loads.len(), 3, "one conditional load per table");
    assert!(
        loads
            .iter()
            .all(|r| r.status == Some(304) && r.header("if-none-match").is_some()),
        "{loads:?}"
    );
}

#[tokio::test]
async fn upstream_add_change_and_delete_converge() {
    let env = Env::new(sample_fixture().await, json!([])).await;
    env.run().await.expect("first run");
    let id_before = env.rel(&["hr"], "people").await.expect("people").id;
    env.fx.add_namespace(&["ops"]);
    env.fx.add_table(&["ops"], "jobs");
    let mut schema = serde_json::to_value(env.rel(&["hr"], "people").await.expect("people").schema)
        .expect("schema");
    schema["schema-id"] = json!(1);
    schema["fields"]
        .as_array_mut()
        .expect("fields")
        .push(json!({"id": 3, "name": "email", "required": false, "type": "string"}));
    assert!(
        env.fx
            .update_table_schema(&["hr"], "people", schema.clone())
    );
    assert!(env.fx.remove_table(&["sales", "eu"], "orders"));
    let gen_before = env.dirgen().await;
    let s = env.run().await.expect("second run");
    assert_eq!(
        (
            s.tables.created,
            s.tables.updated,
            s.tables.retired,
            s.tables.unchanged
        ),
        (1, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.namespaces.created, 1);
    let people = env.rel(&["hr"], "people").await.expect("people");
    assert_eq!(people.id, id_before, "an update keeps the identity");
    assert_eq!(people.schema["fields"].as_array().map(Vec::len), Some(3));
    assert_ne!(
        env.dirgen().await,
        gen_before,
        "schema change and create/delete signal the directory"
    );
    assert!(env.rel(&["sales", "eu"], "orders").await.is_none());
    // The now-empty overlay-created namespace stays while the walk still sees it upstream.
    assert!(env.ns_paths().await.contains(&names(&["sales", "eu"])));
    // Deleting the namespace upstream releases the claim and prunes the container.
    assert!(env.fx.remove_namespace(&["sales", "eu"]));
    let s = env.run().await.expect("third run");
    assert_eq!(s.namespaces.retired, 1, "{s:?}");
    assert!(!env.ns_paths().await.contains(&names(&["sales", "eu"])));
    assert!(
        !env.claim_paths(&env.overlay)
            .await
            .contains(&names(&["sales", "eu"]))
    );
    env.assert_consistent().await;
}

async fn rename_with_stable_ids_keeps_the_flotilla_identity(kind: Kind) {
    let env = Env::on(kind, sample_fixture().await, json!([])).await;
    env.run().await.expect("first run");
    let old = env.rel(&["sales"], "orders").await.expect("orders");
    assert!(env.fx.rename_table(&["sales"], "orders", "orders_v2"));
    let s = env.run().await.expect("second run");
    assert_eq!(
        (s.tables.updated, s.tables.created, s.tables.retired),
        (1, 0, 0),
        "a move: {s:?}"
    );
    assert!(env.rel(&["sales"], "orders").await.is_none());
    let moved = env.rel(&["sales"], "orders_v2").await.expect("moved");
    assert_eq!(
        moved.id, old.id,
        "provider-stable ids keep the Flotilla id across a rename"
    );
    assert_eq!(moved.managed_by.expect("m").upstream_name, "orders_v2");
    env.assert_consistent().await;
}

#[tokio::test]
async fn rename_without_stable_ids_is_delete_plus_create() {
    let env = Env::new(sample_fixture().await, json!([])).await;
    let unstable = TwistConnector(Twist {
        no_stable_ids: true,
        ..Twist::default()
    });
    env.run_with(&unstable).await.expect("first run");
    let old = env.rel(&["sales"], "orders").await.expect("orders");
    assert!(!old.managed_by.as_ref().expect("m").stable);
    assert_eq!(
        old.managed_by.as_ref().expect("m").external_id,
        r#"["sales","orders"]"#
    );
    assert!(env.fx.rename_table(&["sales"], "orders", "orders_v2"));
    let s = env.run_with(&unstable).await.expect("second run");
    assert_eq!((s.tables.created, s.tables.retired), (1, 1), "{s:?}");
    let new = env.rel(&["sales"], "orders_v2").await.expect("created");
    assert_ne!(new.id, old.id);
    assert!(env.rel(&["sales"], "orders").await.is_none());
    env.assert_consistent().await;
}

#[tokio::test]
async fn a_failed_branch_fails_the_run_and_nothing_is_published_or_retired() {
    let env = Env::new(sample_fixture().await, json!([])).await;
    env.run().await.expect("first run");
    let first = env.last_run().await;
    assert_eq!(first["outcome"], "SUCCEEDED", "{first}");
    assert!(env.fx.remove_table(&["hr"], "people"));
    assert!(env.fx.remove_table(&["sales"], "orders"));
    env.fx.add_table(&["sales"], "fresh");
    env.fx
        .add_fault(IcebergFaultRule::always(IcebergFault::Status(503)).on_path("/namespaces/hr/"));
    let before = env.catalog_items().await;
    let err = env.run().await.expect_err("a failed branch fails the run");
    assert!(
        matches!(err, ReconcileError::Upstream { .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert_eq!(
        env.catalog_items().await,
        before,
        "nothing published (sales.fresh) and nothing retired (sales.orders)"
    );
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "FAILED", "{run}");
    assert_eq!(run["error"]["code"], "UPSTREAM_UNAVAILABLE");
    assert_eq!(run["error"]["stage"], "DISCOVERY");
    assert_eq!(run["error"]["retryable"], true);
    assert_eq!(run["error"]["object"], json!(["hr"]));
    assert!(
        run["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("503")),
        "the cause names the upstream status: {run}"
    );
    assert_eq!(run["consecutive_failures"], 1);
    assert_eq!(run["last_success_time"], first["finished_at"]);
    // The RPC answers 503 without detail; the cause is in the overlay.
    let r = env
        .h
        .post(
            &format!("{}/reconcile", ovl_path(&env.overlay)),
            ACME,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);
    assert_eq!(env.last_run().await["consecutive_failures"], 2);
    env.fx.clear_faults();
    let s = env.run().await.expect("healthy run");
    assert_eq!((s.tables.retired, s.tables.created), (2, 1), "{s:?}");
    assert!(env.rel(&["hr"], "people").await.is_none());
    let run = env.last_run().await;
    assert_eq!(
        (
            run["outcome"].as_str(),
            run["consecutive_failures"].as_u64()
        ),
        (Some("SUCCEEDED"), Some(0)),
        "{run}"
    );
    assert!(run["error"].is_null());
    env.assert_consistent().await;
}

async fn collisions_with_local_relations_and_other_overlays_fail_the_whole_run(kind: Kind) {
    let env = Env::on(kind, sample_fixture().await, json!([])).await;
    // A directly managed table at a destination path, in a directly created namespace.
    env.h
        .namespace("acme", ACME, &env.catalog, &["sales"])
        .await;
    let r = env
        .h
        .post(
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables",
                env.catalog
            ),
            ACME,
            table_body("orders"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let local_id = r.body["id"].as_str().expect("id").to_owned();
    // Another overlay already materialized `hr`.
    let other = create_overlay(
        &env.h,
        "hr-import",
        &env.integration,
        &env.catalog,
        json!([["hr"]]),
    )
    .await;
    env.run_overlay(&other).await.expect("other overlay");
    let before = env.catalog_items().await;
    let err = env.run().await.expect_err("conflicts fail the run");
    let ReconcileError::Conflicts(list) = &err else {
        panic!("{err:?}");
    };
    assert!(!err.is_retryable());
    let got: Vec<(Vec<String>, &str, serde_json::Value)> = list
        .iter()
        .map(|c| {
            (
                c.path.clone(),
                c.kind,
                serde_json::to_value(&c.holder).expect("holder"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                names(&["hr", "people"]),
                "TABLE",
                json!({"type": "OVERLAY", "overlay_id": other, "kind": "TABLE"})
            ),
            (
                names(&["sales", "orders"]),
                "TABLE",
                json!({"type": "LOCAL", "kind": "TABLE"})
            ),
        ]
    );
    assert_eq!(
        env.catalog_items().await,
        before,
        "a conflicting run publishes nothing: no claim, no namespace, no relation"
    );
    let local = env.rel(&["sales"], "orders").await.expect("local");
    assert_eq!(local.id, local_id, "a local relation is never overwritten");
    assert!(local.managed_by.is_none());
    assert!(env.claim_paths(&env.overlay).await.is_empty());
    // The RPC answers 409 MAPPING_CONFLICT listing every conflict; the overlay records it.
    let r = env
        .h
        .post(
            &format!("{}/reconcile", ovl_path(&env.overlay)),
            ACME,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "MAPPING_CONFLICT"),
        "{:?}",
        r.body
    );
    let conflicts = r.body["error"]["details"]["conflicts"]
        .as_array()
        .expect("conflicts");
    assert_eq!(conflicts.len(), 2, "{:?}", r.body);
    assert!(
        conflicts.iter().all(|c| c["path"].is_array()
            && c["kind"] == "TABLE"
            && c["holder"]["type"].is_string())
    );
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "FAILED");
    assert_eq!(run["error"]["code"], "MAPPING_CONFLICT");
    assert_eq!(run["error"]["stage"], "PREFLIGHT");
    assert_eq!(run["error"]["retryable"], false);
    assert_eq!(run["conflicts_total"], 2);
    assert_eq!(run["consecutive_failures"], 2);
    assert!(run["last_success_time"].is_null());
    assert_eq!(env.catalog_items().await, before);
    // Removing the local table and the other overlay's selection lets the run converge.
    let r = env
        .h
        .delete(
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables/orders",
                env.catalog
            ),
            ACME,
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = env.h.delete(&ovl_path(&other), ACME).await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let s = env.run().await.expect("converges");
    assert_eq!(s.tables.created, 3, "{s:?}");
    // The pre-existing namespace was used, not created.
    let claims = env.claims().await;
    let sales = claims
        .iter()
        .find(|c| c.overlay_id == env.overlay && c.path.segments() == ["sales"])
        .expect("claim");
    assert!(!sales.created_namespace);
    env.assert_consistent().await;
}

#[tokio::test]
async fn a_name_that_is_both_a_table_and_a_view_upstream_is_a_conflict() {
    let fx = sample_fixture().await;
    fx.add_table(&["hr"], "both");
    fx.add_view(&["hr"], "both", "SELECT 1", &["hr"]);
    let env = Env::new(fx, json!([])).await;
    let err = env.run().await.expect_err("a conflict fails the run");
    let ReconcileError::Conflicts(list) = err else {
        panic!("{err:?}");
    };
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].path, names(&["hr", "both"]));
    assert!(list[0].reason.contains("both as a table and as a view"));
    assert_eq!(
        serde_json::to_value(&list[0].holder).expect("holder"),
        json!({"type": "UPSTREAM"})
    );
    assert!(env.relations().await.is_empty(), "nothing is published");
    assert!(env.namespaces().await.is_empty());
}

#[tokio::test]
async fn shared_stable_identities_and_wrong_objects_are_conflicts() {
    let fx = sample_fixture().await;
    fx.add_table(&["hr"], "payroll");
    let env = Env::new(fx, json!([])).await;
    let twist = Twist {
        shared_id: [
            ("people".to_owned(), "dup".to_owned()),
            ("payroll".to_owned(), "dup".to_owned()),
        ]
        .into(),
        answers_for_other: vec!["orders".to_owned()],
        ..Twist::default()
    };
    let err = env
        .run_with(&TwistConnector(twist))
        .await
        .expect_err("conflicts fail the run");
    let ReconcileError::Conflicts(list) = err else {
        panic!("{err:?}");
    };
    let mut paths: Vec<Vec<String>> = list.iter().map(|c| c.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            names(&["hr", "payroll"]),
            names(&["hr", "people"]),
            names(&["sales", "eu", "orders"]),
            names(&["sales", "orders"])
        ],
        "{list:?}"
    );
    assert!(
        list.iter()
            .any(|c| c.reason.contains("same stable identity"))
    );
    assert!(list.iter().any(|c| c.reason.contains("answered for")));
    assert!(
        env.relations().await.is_empty(),
        "a run with conflicts publishes nothing"
    );
}

async fn a_directly_managed_table_in_a_materialized_namespace_is_left_alone(kind: Kind) {
    let env = Env::on(kind, sample_fixture().await, json!([["sales"]])).await;
    env.run().await.expect("first run");
    let r = env
        .h
        .post(
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables",
                env.catalog
            ),
            ACME,
            table_body("local_t"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let s = env.run().await.expect("rerun");
    assert!(!s.wrote_catalog(), "{s:?}");
    // The whole upstream branch disappears: the overlay's relations go, the local one and the
    // namespace holding it stay.
    assert!(env.fx.remove_namespace(&["sales"]));
    let s = env.run().await.expect("run after upstream delete");
    assert_eq!((s.tables.retired, s.views.retired), (2, 1), "{s:?}");
    assert_eq!(env.rel_names().await, names(&["sales.local_t"]));
    assert!(
        env.ns_paths().await.contains(&names(&["sales"])),
        "a namespace holding local content is never pruned"
    );
    assert!(env.claims().await.is_empty(), "every claim is released");
    env.assert_consistent().await;
}

#[tokio::test]
async fn managed_relations_refuse_direct_patch_and_delete() {
    let env = Env::new(sample_fixture().await, json!([])).await;
    env.run().await.expect("run");
    let t = format!(
        "/v1/accounts/acme/catalogs/{}/namespaces/sales/tables/orders",
        env.catalog
    );
    let r = env
        .h
        .patch(&t, ACME, json!({"properties": {"a": "b"}}), None)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "MANAGED_BY_OVERLAY"),
        "{:?}",
        r.body
    );
    let r = env.h.delete(&t, ACME).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "MANAGED_BY_OVERLAY"),
        "{:?}",
        r.body
    );
    let v = format!(
        "/v1/accounts/acme/catalogs/{}/namespaces/sales/views/eu_orders",
        env.catalog
    );
    let r = env.h.delete(&v, ACME).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "MANAGED_BY_OVERLAY"),
        "{:?}",
        r.body
    );
    assert!(env.rel(&["sales"], "orders").await.is_some());
}

/// Builds the second-run scenario of the crash test: creates, an update, a stable move, a
/// retirement and a claim release with a namespace prune.
async fn crash_scenario() -> Env {
    let fx = sample_fixture().await;
    fx.add_namespace(&["tmp"]);
    fx.add_table(&["tmp"], "scratch");
    let env = Env::new(fx, json!([])).await;
    env.run().await.expect("first run");
    env.fx.add_namespace(&["ops"]);
    env.fx.add_table(&["ops"], "jobs");
    env.fx
        .add_view(&["ops"], "v_jobs", "SELECT * FROM ops.jobs", &["ops"]);
    assert!(env.fx.rename_table(&["sales"], "orders", "orders_v2"));
    assert!(env.fx.remove_table(&["hr"], "people"));
    assert!(env.fx.remove_namespace(&["tmp"]));
    let mut schema =
        serde_json::to_value(env.rel(&["sales", "eu"], "orders").await.expect("t").schema)
            .expect("s");
    schema["fields"]
        .as_array_mut()
        .expect("fields")
        .push(json!({"id": 9, "name": "x", "required": false, "type": "int"}));
    assert!(
        env.fx
            .update_table_schema(&["sales", "eu"], "orders", schema)
    );
    env
}

#[tokio::test]
async fn crash_at_every_publication_step_then_rerun_converges() {
    // Reference: the second run without faults.
    let reference = crash_scenario().await;
    let start = reference.faults().transacts();
    let s = reference.run().await.expect("reference run");
    let steps = reference.faults().transacts() - start;
    assert!(
        steps >= 6,
        "the scenario publishes in several transactions ({steps}): {s:?}"
    );
    let want_rels = reference.rel_names().await;
    let want_ns = reference.ns_paths().await;
    let want_claims = reference.claim_paths(&reference.overlay).await;
    assert!(reference.rel(&["sales"], "orders_v2").await.is_some());
    for point in crash_points(steps) {
        let env = crash_scenario().await;
        let orders_id = env.rel(&["sales"], "orders").await.expect("orders").id;
        let base = env.faults().transacts();
        env.faults()
            .fail_transact(base + point.transact, point.fault);
        let first = env.run().await;
        let second = env.run().await;
        assert!(
            second.is_ok(),
            "{point}: rerun failed: {second:?} (first: {first:?})"
        );
        assert_eq!(env.rel_names().await, want_rels, "{point}");
        assert_eq!(env.ns_paths().await, want_ns, "{point}");
        assert_eq!(
            env.claim_paths(&env.overlay).await,
            want_claims,
            "{point}: no orphan or missing claim"
        );
        let moved = env.rel(&["sales"], "orders_v2").await.expect("moved");
        assert_eq!(
            moved.id, orders_id,
            "{point}: the stable identity survives the crash"
        );
        env.assert_consistent().await;
        let third = env.run().await.expect("third run");
        assert!(!third.wrote_catalog(), "{point}: converged: {third:?}");
    }
}

/// On redb, and on DynamoDB through the single-threaded moto, for the reason given in
/// `durability.rs`: the threaded moto does not isolate concurrent transactions from each
/// other, so both runs' put-if-absent creates of one table could succeed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_runs_of_one_overlay_converge_redb() {
    two_concurrent_runs_of_one_overlay_converge(Kind::Redb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_runs_of_one_overlay_converge_dynamo() {
    two_concurrent_runs_of_one_overlay_converge(Kind::DynamoSerial).await;
}

async fn two_concurrent_runs_of_one_overlay_converge(kind: Kind) {
    let fx = sample_fixture().await;
    for i in 0..30 {
        fx.add_table(&["sales"], &format!("t{i:02}"));
    }
    let env = Env::on(kind, fx, json!([])).await;
    let (a, b) = tokio::join!(env.run(), env.run());
    let a = a.expect("run a");
    let b = b.expect("run b");
    assert_eq!(
        a.tables.created + b.tables.created,
        33,
        "each table created exactly once: {a:?} {b:?}"
    );
    assert_eq!(env.relations().await.len(), 34);
    env.assert_consistent().await;
    let c = env.run().await.expect("run c");
    assert!(!c.wrote_catalog(), "{c:?}");
}

/// A store that runs a hook just before the n-th transaction it sees after arming.
struct HookStore {
    inner: Arc<Store>,
    seen: AtomicUsize,
    at: AtomicUsize,
    hook: tokio::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

#[async_trait]
impl Metastore for HookStore {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.inner.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.inner.query(q).await
    }
    async fn count(&self, pk: &str, prefix: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.inner.count(pk, prefix, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.at.load(Ordering::SeqCst)
            && let Some(hook) = self.hook.lock().await.take()
        {
            hook.await;
        }
        self.inner.transact(tx).await
    }
}

async fn an_overlay_patch_mid_run_fails_the_remaining_publications(kind: Kind) {
    let fx = sample_fixture().await;
    let env = Env::on(kind, fx, json!([])).await;
    // The run's state writes through a store that PATCHes the overlay (through the API, on
    // the undecorated router) just before the run's third transaction.
    let hooked = Arc::new(HookStore {
        inner: env.store.clone(),
        seen: AtomicUsize::new(0),
        at: AtomicUsize::new(3),
        hook: tokio::sync::Mutex::new(None),
    });
    let router = env.h.router.clone();
    let path = ovl_path(&env.overlay);
    let etag = env.h.get(&path, ACME).await.etag();
    *hooked.hook.lock().await = Some(Box::pin(async move {
        let req = Request::builder()
            .method(Method::PATCH)
            .uri(path)
            .header("authorization", format!("Bearer {ACME}"))
            .header("if-match", etag)
            .header("content-type", "application/json")
            // A selection change needs an etag precondition; `*` accepts any version.
            .header("if-match", "*")
            .body(Body::from(
                json!({"exclude_namespaces": [["tmp"]]}).to_string(),
            ))
            .expect("request");
        let resp = router.oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::OK);
    }));
    let mut state = env.h.state.clone();
    state.store = hooked.clone();
    let r = flotilla_core::reconcile::reconcile(
        &state,
        &AdapterConnector,
        "acme",
        &env.overlay,
        &Default::default(),
    )
    .await;
    assert!(matches!(r, Err(ReconcileError::FenceLost)), "{r:?}");
    assert!(r.as_ref().err().is_some_and(ReconcileError::is_retryable));
    // Two publications (namespace claims) committed before the PATCH; nothing after it.
    assert_eq!(env.claims().await.len(), 2);
    assert!(
        env.relations().await.is_empty(),
        "no publication after the fence moved"
    );
    let run = env.last_run().await;
    assert_eq!(
        (run["outcome"].as_str(), run["error"]["code"].as_str()),
        (Some("FAILED"), Some("FENCE_LOST")),
        "a fenced-out run records its outcome: {run}"
    );
    assert_eq!(run["error"]["stage"], "PUBLICATION");
    assert_eq!(run["observed_generation"], 1);
    // A new run observes the new generation and converges.
    let s = env.run().await.expect("new run");
    assert_eq!(s.observed_generation, 2);
    assert_eq!(env.relations().await.len(), 4);
    env.assert_consistent().await;
}

#[tokio::test]
async fn rpc_answers_the_summary_and_refuses_paused_overlays_and_integrations() {
    let env = Env::new(sample_fixture().await, json!([["hr"]])).await;
    let path = format!("{}/reconcile", ovl_path(&env.overlay));
    let r = env.h.post(&path, ACME, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["tables"]["created"], 1);
    assert_eq!(r.body["namespaces"]["created"], 1);
    assert!(
        r.body["duration_ms"].is_u64()
            && r.body["conflicts"].is_array()
            && r.body["skipped"].is_array()
    );
    let g = env.h.get(&ovl_path(&env.overlay), ACME).await;
    assert_eq!(
        g.body["last_reconcile"]["tables"]["created"], 1,
        "{:?}",
        g.body
    );
    let r = env.h.post(&path, BETA, json!({})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = env
        .h
        .patch(&ovl_path(&env.overlay), ACME, json!({"paused": true}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = env.h.post(&path, ACME, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "{:?}",
        r.body
    );
    env.h
        .patch(
            &ovl_path(&env.overlay),
            ACME,
            json!({"paused": false}),
            None,
        )
        .await;
    let ip = format!("/v1/accounts/acme/integrations/{}", env.integration);
    let r = env.h.patch(&ip, ACME, json!({"paused": true}), None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = env.h.post(&path, ACME, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "{:?}",
        r.body
    );
    let r = env
        .h
        .post(
            &format!("{}/reconcile", ovl_path("nosuchoverlay")),
            ACME,
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn scheduler_enqueues_active_overlays_whose_interval_elapsed() {
    let env = Env::new(sample_fixture().await, json!([["hr"]])).await;
    let paused = create_overlay(
        &env.h,
        "paused",
        &env.integration,
        &env.catalog,
        json!([["sales"]]),
    )
    .await;
    env.h
        .patch(&ovl_path(&paused), ACME, json!({"paused": true}), None)
        .await;
    let now = env.h.state.clock.now_ms();
    let due = due_overlays(env.dyn_store(), now).await.expect("scan");
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].overlay_id, env.overlay);
    assert_eq!(due[0].observed_generation, 1);
    env.run().await.expect("run");
    assert!(
        due_overlays(env.dyn_store(), now + 1000)
            .await
            .expect("scan")
            .is_empty(),
        "ran just now"
    );
    let later = now + 3601 * 1000;
    assert_eq!(
        due_overlays(env.dyn_store(), later)
            .await
            .expect("scan")
            .len(),
        1,
        "interval elapsed"
    );
    let ip = format!("/v1/accounts/acme/integrations/{}", env.integration);
    env.h.patch(&ip, ACME, json!({"paused": true}), None).await;
    assert!(
        due_overlays(env.dyn_store(), later)
            .await
            .expect("scan")
            .is_empty(),
        "a paused integration stops all work"
    );
}

#[tokio::test]
async fn worker_acks_superseded_and_gone_messages_and_reconciles_current_ones() {
    let env = Env::new(sample_fixture().await, json!([["hr"]])).await;
    let msg = |g: u64| ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: g,
    };
    let out = handle_message(&env.h.state, &AdapterConnector, &msg(7)).await;
    assert!(
        matches!(out, MessageOutcome::Superseded { current: 1 }),
        "{out:?}"
    );
    assert!(
        env.relations().await.is_empty(),
        "a stale message does nothing"
    );
    let out = handle_message(&env.h.state, &AdapterConnector, &msg(1)).await;
    assert!(matches!(out, MessageOutcome::Reconciled(_)), "{out:?}");
    assert!(!out.redeliver());
    // Duplicate delivery of the same message: a no-op run.
    let out = handle_message(&env.h.state, &AdapterConnector, &msg(1)).await;
    match out {
        MessageOutcome::Reconciled(s) => assert!(!s.wrote_catalog()),
        other => panic!("{other:?}"),
    }
    let gone = ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: "0000gone".into(),
        observed_generation: 1,
    };
    assert!(matches!(
        handle_message(&env.h.state, &AdapterConnector, &gone).await,
        MessageOutcome::Gone
    ));
    // Upstream down: a retryable failure the queue must redeliver.
    env.fx
        .add_fault(IcebergFaultRule::always(IcebergFault::Status(503)));
    let out = handle_message(&env.h.state, &AdapterConnector, &msg(1)).await;
    assert!(out.redeliver(), "{out:?}");
    assert_eq!(out.label(), "retry");
    // Authentication refused: permanent, recorded and acknowledged (not redelivered).
    env.fx.clear_faults();
    env.fx
        .add_fault(IcebergFaultRule::always(IcebergFault::Unauthorized));
    let out = handle_message(&env.h.state, &AdapterConnector, &msg(1)).await;
    assert!(
        matches!(
            out,
            MessageOutcome::Failed {
                retryable: false,
                code: "UPSTREAM_AUTHENTICATION",
                ..
            }
        ),
        "{out:?}"
    );
    assert!(!out.redeliver());
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "UPSTREAM_AUTHENTICATION", "{run}");
    assert_eq!(run["error"]["retryable"], false);
    env.fx.clear_faults();
    assert!(ReconcileMessage::parse("{\"account_id\":\"acme\"}").is_err());
    assert!(ReconcileMessage::parse("not json").is_err());
    assert_eq!(
        ReconcileMessage::parse(&msg(3).to_body()).expect("round trip"),
        msg(3)
    );
}

#[tokio::test]
async fn the_sample_sqs_event_parses_into_messages() {
    let raw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/reconciler/batch.json"
    ))
    .expect("sample");
    let v: serde_json::Value = serde_json::from_str(&raw).expect("json");
    let records = v["Records"].as_array().expect("records");
    assert_eq!(records.len(), 3);
    for r in records {
        let m = ReconcileMessage::parse(r["body"].as_str().expect("body")).expect("message");
        assert!(m.observed_generation > 0);
    }
}
