//! Races and crash points of the durability primitives ("Durability contract").

mod support;
use support::both_backends;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_metastore::fault::{CrashPoint, FaultInjectingMetastore, crash_points};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, DynMetastore, Metastore};
use serde_json::json;
use support::*;

fn faulty() -> (
    Arc<FaultInjectingMetastore<RedbMetastore>>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let redb = RedbMetastore::open(dir.path().join("m.redb")).unwrap();
    (Arc::new(FaultInjectingMetastore::new(redb)), dir)
}

fn harness_on(store: &Arc<FaultInjectingMetastore<RedbMetastore>>, manual_clock: bool) -> Harness {
    let dyn_store: DynMetastore = store.clone();
    Harness::with_store(dyn_store, None, manual_clock)
}

async fn idem_create(h: &Harness, key: &str, name: &str) -> Resp {
    h.call(
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(ACME),
        Some(json!({"display_name": name})),
        &[("idempotency-key", key)],
    )
    .await
}

async fn catalog_ids(store: &dyn Metastore) -> Vec<String> {
    let items = flotilla_metastore::query_all(
        store,
        flotilla_metastore::Query::new("ACCT#acme", "CAT#", Consistency::Strong),
    )
    .await
    .unwrap();
    items
        .iter()
        .map(|i| i.key.sk.trim_start_matches("CAT#").to_owned())
        .collect()
}

both_backends!(
    table_create_racing_namespace_delete_leaves_no_orphan,
    account_create_racing_delete_leaves_nothing_behind,
    catalog_create_racing_account_delete_leaves_no_orphan,
);

/// On redb, and on DynamoDB through the single-threaded moto: the threaded moto serves
/// concurrent TransactWriteItems without isolating them from each other (two put-if-absent
/// calls racing on one key can both succeed there), so a 50-way race on it would test the
/// emulator, not the protocol. The single-threaded one answers one request at a time, which
/// isolates transactions as DynamoDB does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_creates_with_one_key_make_one_resource_redb() {
    fifty_concurrent_creates_with_one_key_make_one_resource(Harness::redb()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_creates_with_one_key_make_one_resource_dynamo() {
    fifty_concurrent_creates_with_one_key_make_one_resource(Harness::dynamo_serial().await).await;
}

async fn fifty_concurrent_creates_with_one_key_make_one_resource(h: Harness) {
    h.account("acme").await;
    let h = Arc::new(h);
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            idem_create(&h, "one-key", "analytics").await
        }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        bodies.push(r.body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "answers differ");
    assert_eq!(
        catalog_ids(h.state.store.as_ref()).await,
        vec![bodies[0]["id"].as_str().unwrap().to_owned()]
    );
}

async fn table_create_racing_namespace_delete_leaves_no_orphan(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    let h = Arc::new(h);
    for round in 0..12 {
        let ns_name = format!("n{round}");
        h.namespace("acme", ACME, &cat, &[&ns_name]).await;
        let base = format!("/v1/accounts/acme/catalogs/{cat}/namespaces/{ns_name}");
        let (h1, h2, b1, b2) = (h.clone(), h.clone(), base.clone(), base.clone());
        let create = tokio::spawn(async move {
            h1.post(&format!("{b1}/tables"), ACME, table_body("t"))
                .await
        });
        let delete = tokio::spawn(async move { h2.delete(&b2, ACME).await });
        let (c, d) = (create.await.unwrap(), delete.await.unwrap());
        assert!(
            matches!(
                c.status,
                StatusCode::CREATED | StatusCode::NOT_FOUND | StatusCode::CONFLICT
            ),
            "create: {:?}",
            c.body
        );
        assert!(
            matches!(d.status, StatusCode::NO_CONTENT | StatusCode::CONFLICT),
            "delete: {:?}",
            d.body
        );
        let ns_exists = h.get(&base, ACME).await.status == StatusCode::OK;
        let relations = h
            .state
            .store
            .count(
                &format!("CAT#{cat}"),
                &format!("REL#{ns_name}\u{1e}"),
                Consistency::Strong,
            )
            .await
            .unwrap();
        if !ns_exists {
            assert_eq!(
                relations, 0,
                "round {round}: a table outlived its namespace"
            );
        }
        assert!(
            !(c.status == StatusCode::CREATED && d.status == StatusCode::NO_CONTENT),
            "both won in round {round}"
        );
    }
}

async fn account_create_racing_delete_leaves_nothing_behind(h: Harness) {
    let h = Arc::new(h);
    for round in 0..10 {
        let id = format!("race-{round}");
        if round % 2 == 0 {
            h.account(&id).await;
        }
        let (h1, h2, i1, i2) = (h.clone(), h.clone(), id.clone(), id.clone());
        let create =
            tokio::spawn(async move { h1.post("/v1/accounts", OPERATOR, json!({"id": i1})).await });
        let delete =
            tokio::spawn(async move { h2.delete(&format!("/v1/accounts/{i2}"), OPERATOR).await });
        let (_c, _d) = (create.await.unwrap(), delete.await.unwrap());
        // Finish any cleanup a lost race left (the delete is resumable).
        let _ = h.delete(&format!("/v1/accounts/{id}"), OPERATOR).await;
        let store = h.state.store.as_ref();
        let items = store
            .count(&format!("ACCT#{id}"), "", Consistency::Strong)
            .await
            .unwrap();
        let listing = store
            .get(
                &flotilla_metastore::Key::new("SYSTEM", format!("ACCOUNT#{id}")),
                Consistency::Strong,
            )
            .await
            .unwrap();
        assert_eq!(items, 0, "round {round}: account partition not empty");
        assert!(
            listing.is_none(),
            "round {round}: listing entry left behind"
        );
    }
}

async fn catalog_create_racing_account_delete_leaves_no_orphan(h: Harness) {
    let h = Arc::new(h);
    for round in 0..8 {
        let id = format!("acct-{round}");
        h.account(&id).await;
        let (h1, h2, i1, i2) = (h.clone(), h.clone(), id.clone(), id.clone());
        let create = tokio::spawn(async move {
            h1.post(
                &format!("/v1/accounts/{i1}/catalogs"),
                OPERATOR,
                json!({"display_name": "c"}),
            )
            .await
        });
        let delete =
            tokio::spawn(async move { h2.delete(&format!("/v1/accounts/{i2}"), OPERATOR).await });
        let (c, d) = (create.await.unwrap(), delete.await.unwrap());
        assert_eq!(d.status, StatusCode::NO_CONTENT, "{:?}", d.body);
        let store = h.state.store.as_ref();
        assert_eq!(
            store
                .count(&format!("ACCT#{id}"), "", Consistency::Strong)
                .await
                .unwrap(),
            0,
            "round {round}"
        );
        if c.status == StatusCode::CREATED {
            let cat = c.body["id"].as_str().unwrap();
            assert_eq!(
                store
                    .count(&format!("CAT#{cat}"), "", Consistency::Strong)
                    .await
                    .unwrap(),
                0
            );
        }
    }
}

/// Every crash point of an idempotent create converges on retry: one resource, and the
/// receipt answers with that resource.
#[tokio::test]
async fn every_crash_point_of_an_idempotent_create_converges() {
    // Count the transactions of a clean run.
    let (store, _d) = faulty();
    let h = harness_on(&store, false);
    h.account("acme").await;
    let before = store.transacts();
    assert_eq!(
        idem_create(&h, "k", "analytics").await.status,
        StatusCode::CREATED
    );
    let n = store.transacts() - before;
    assert!(n >= 2, "reserve + publish expected, saw {n}");
    for point in crash_points(n) {
        let (store, _d) = faulty();
        let h = harness_on(&store, false);
        h.account("acme").await;
        let offset = store.transacts();
        store.fail_transact(offset + point.transact, point.fault);
        let first = idem_create(&h, "k", "analytics").await;
        store.clear();
        let retry = idem_create(&h, "k", "analytics").await;
        assert_eq!(
            retry.status,
            StatusCode::CREATED,
            "{point}: {:?}",
            retry.body
        );
        let ids = catalog_ids(store.as_ref()).await;
        assert_eq!(ids.len(), 1, "{point}: {ids:?}");
        assert_eq!(retry.body["id"].as_str(), Some(ids[0].as_str()), "{point}");
        if first.status == StatusCode::CREATED {
            assert_eq!(first.body, retry.body, "{point}");
        }
        // A third replay answers identically.
        assert_eq!(
            idem_create(&h, "k", "analytics").await.body,
            retry.body,
            "{point}"
        );
    }
}

/// A crash anywhere in account delete is resumed by the next delete, and nothing remains.
#[tokio::test]
async fn every_crash_point_of_account_delete_resumes() {
    async fn populate(h: &Harness) {
        h.account("acme").await;
        let cat = h.catalog("acme", ACME, "c").await;
        h.namespace("acme", ACME, &cat, &["a"]).await;
        h.post(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a/tables"),
            ACME,
            table_body("t"),
        )
        .await;
        h.catalog("acme", ACME, "d").await;
    }
    let (store, _d) = faulty();
    let h = harness_on(&store, false);
    populate(&h).await;
    let before = store.transacts();
    assert_eq!(
        h.delete("/v1/accounts/acme", OPERATOR).await.status,
        StatusCode::NO_CONTENT
    );
    let n = store.transacts() - before;
    for point in crash_points(n) {
        let (store, _d) = faulty();
        let h = harness_on(&store, false);
        populate(&h).await;
        let offset = store.transacts();
        store.fail_transact(offset + point.transact, point.fault);
        let _ = h.delete("/v1/accounts/acme", OPERATOR).await;
        // Creates are refused while the delete is incomplete.
        let r = h
            .post(
                "/v1/accounts/acme/catalogs",
                ACME,
                json!({"display_name": "late"}),
            )
            .await;
        assert_ne!(r.status, StatusCode::CREATED, "{point}");
        store.clear();
        let retry = h.delete("/v1/accounts/acme", OPERATOR).await;
        assert!(
            matches!(retry.status, StatusCode::NO_CONTENT | StatusCode::NOT_FOUND),
            "{point}: {:?}",
            retry.body
        );
        let all = flotilla_metastore::query_all(
            store.as_ref(),
            flotilla_metastore::Query::new("ACCT#acme", "", Consistency::Strong),
        )
        .await
        .unwrap();
        assert!(all.is_empty(), "{point}: left {all:?}");
        assert_eq!(
            h.get("/v1/accounts/acme", OPERATOR).await.status,
            StatusCode::NOT_FOUND,
            "{point}"
        );
    }
}

/// A crashed namespace delete leaves a guard; creates answer DELETING until its lease runs
/// out, then the next writer clears it: the crash never blocks the namespace for good.
#[tokio::test]
async fn abandoned_delete_guard_expires() {
    let (store, _d) = faulty();
    let h = harness_on(&store, true);
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    h.namespace("acme", ACME, &cat, &["a"]).await;
    // Crash the delete after installing the guard: its final transaction is lost.
    let offset = store.transacts();
    store.fail_transact(
        offset + 2,
        CrashPoint {
            transact: 0,
            fault: flotilla_metastore::fault::Fault::FailBeforeApply,
        }
        .fault,
    );
    store.fail_transact(
        offset + 3,
        flotilla_metastore::fault::Fault::FailBeforeApply,
    );
    let _ = h
        .delete(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a"),
            ACME,
        )
        .await;
    store.clear();
    let guard = store
        .get(
            &flotilla_metastore::Key::new(format!("CAT#{cat}"), "NSGUARD#a"),
            Consistency::Strong,
        )
        .await
        .unwrap();
    if guard.is_some() {
        let base = format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a/tables");
        let r = h.post(&base, ACME, table_body("t")).await;
        assert_eq!(r.code(), "DELETING");
        h.clock.as_ref().unwrap().advance_ms(60_000);
        let r = h.post(&base, ACME, table_body("t")).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    // Either way the namespace is usable and consistent.
    assert_eq!(
        h.get(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a"),
            ACME
        )
        .await
        .status,
        StatusCode::OK
    );
}
