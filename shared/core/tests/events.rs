//! Change events (`service::events`): every `/v1` change writes its event in its own
//! transaction (at every crash point, no change without its event and no event without its
//! change), a receipt replay writes none, a consumer paging while eight writers commit sees
//! every event once in sequence order (redb and DynamoDB), a reader sees only the events of
//! objects it may read, and retention removes old events.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{Method, StatusCode};
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_metastore::fault::{FaultInjectingMetastore, crash_points};
use flotilla_metastore::{Consistency, DynMetastore, Query, SharedStore, query_all};
use serde_json::{Value, json};
use support::{ACME, Harness, OPERATOR, table_body};
// What `overlay_env` takes from the crate root.
#[allow(unused_imports)]
use support::{Creds, dynamo_serial_store, dynamo_store, items};

const A: &str = "/v1/accounts/acme";

async fn account_and_catalog(h: &Harness) -> String {
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    h.catalog("acme", ACME, "lake").await
}

/// Every event of catalog `c` the token may read, paging until an empty page.
async fn all_events(h: &Harness, c: &str, token: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut url = format!("{A}/events?catalog_id={c}&page_size=7");
    loop {
        let r = h.get(&url, token).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let items = r.body["items"].as_array().unwrap().clone();
        let t = r.body["next_page_token"].as_str().unwrap().to_owned();
        if items.is_empty() {
            return out;
        }
        out.extend(items);
        url = format!("{A}/events?catalog_id={c}&page_size=7&page_token={t}");
    }
}

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["operation"]["type"].as_str().unwrap())
        .collect()
}

/// Every event item of the catalog in the store, pending or sealed.
async fn stored_events(store: &dyn flotilla_metastore::Metastore, c: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for prefix in [keys::EVENT_PENDING_PREFIX, keys::EVENT_LOG_PREFIX] {
        let items = query_all(
            store,
            Query::new(keys::catalog_pk(c), prefix, Consistency::Strong),
        )
        .await
        .unwrap();
        out.extend(items.iter().map(|i| i.json::<Value>().unwrap()));
    }
    out
}

#[tokio::test]
async fn every_v1_change_writes_one_event_in_commit_order() {
    let h = Harness::redb();
    let c = account_and_catalog(&h).await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let tables = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    let created = h.post(&tables, ACME, table_body("orders")).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let request_id = created.headers["x-flotilla-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let r = h
        .patch(
            &format!("{tables}/orders"),
            ACME,
            json!({"metadata_location": "s3://b/t/m2.json"}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .patch(
            &format!("{tables}/orders"),
            ACME,
            json!({"name": "orders2"}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let views = format!("{A}/catalogs/{c}/namespaces/sales/views");
    let view = json!({"name": "v", "schema": support::schema(),
        "definitions": [{"sql": "select 1", "dialect": "spark"}]});
    assert_eq!(h.post(&views, ACME, view).await.status, StatusCode::CREATED);
    let r = h
        .patch(
            &format!("{views}/v"),
            ACME,
            json!({"properties": {"k": "v"}}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(
        h.delete(&format!("{views}/v"), ACME)
            .await
            .status
            .is_success()
    );
    assert!(
        h.delete(&format!("{tables}/orders2"), ACME)
            .await
            .status
            .is_success()
    );
    let ns = format!("{A}/catalogs/{c}/namespaces/sales");
    let r = h
        .patch(&ns, ACME, json!({"properties": {"owner": "x"}}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(h.delete(&ns, ACME).await.status.is_success());
    // A refused change writes nothing.
    let r = h.post(&tables, ACME, table_body("late")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let events = all_events(&h, &c, ACME).await;
    assert_eq!(
        types(&events),
        [
            "create-namespace",
            "create-table",
            "update-table",
            "rename-table",
            "create-view",
            "replace-view",
            "drop-view",
            "drop-table",
            "update-namespace-properties",
            "drop-namespace",
        ]
    );
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=10).collect::<Vec<_>>());
    let create = &events[1];
    assert_eq!(create["request_id"], request_id.as_str());
    assert_eq!(create["actor"]["type"], "PRINCIPAL");
    assert_eq!(create["operation"]["catalog_id"], c.as_str());
    assert_eq!(create["operation"]["namespace"], json!(["sales"]));
    assert_eq!(create["operation"]["name"], "orders");
    assert_eq!(
        events[2]["operation"]["metadata_location"],
        "s3://b/t/m2.json"
    );
    assert_eq!(
        events[3]["operation"]["destination"],
        json!({"namespace": ["sales"], "name": "orders2"})
    );
    let ids: HashSet<&str> = events
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), events.len());

    // A filter by type; bad input is refused.
    let r = h
        .get(
            &format!("{A}/events?catalog_id={c}&types=drop-table,drop-view"),
            ACME,
        )
        .await;
    assert_eq!(
        types(r.body["items"].as_array().unwrap()),
        ["drop-view", "drop-table"]
    );
    for bad in [
        format!("{A}/events?types=eat-table"),
        format!("{A}/events?page_token=forged"),
        format!("{A}/events?catalog_id={c}&types=eat-table"),
        format!("{A}/events?catalog_id={c}&page_token=forged"),
        format!("{A}/events?catalog_id={c}&page_size=0"),
    ] {
        let r = h.get(&bad, ACME).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.body);
    }
    let r = h.get(&format!("{A}/events?catalog_id=nope"), ACME).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_receipt_replay_writes_no_second_event() {
    let h = Harness::redb();
    let c = account_and_catalog(&h).await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let url = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    for _ in 0..3 {
        let r = h
            .call(
                Method::POST,
                &url,
                Some(ACME),
                Some(table_body("orders")),
                &[("idempotency-key", "create-orders-1")],
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
    let events = all_events(&h, &c, ACME).await;
    assert_eq!(types(&events), ["create-namespace", "create-table"]);
}

/// One change under test: what it does, and whether it applied (read on the store).
#[derive(Clone, Copy, Debug)]
enum Change {
    CreateTable,
    UpdateTable,
    RenameTable,
    DropTable,
    CreateNamespace,
    UpdateNamespace,
    DropNamespace,
}

impl Change {
    fn event_type(self) -> &'static str {
        match self {
            Change::CreateTable => "create-table",
            Change::UpdateTable => "update-table",
            Change::RenameTable => "rename-table",
            Change::DropTable => "drop-table",
            Change::CreateNamespace => "create-namespace",
            Change::UpdateNamespace => "update-namespace-properties",
            Change::DropNamespace => "drop-namespace",
        }
    }

    async fn run(self, h: &Harness, c: &str) {
        let t = format!("{A}/catalogs/{c}/namespaces/sales/tables");
        let _ = match self {
            Change::CreateTable => h.post(&t, ACME, table_body("new")).await,
            Change::UpdateTable => {
                h.patch(
                    &format!("{t}/orders"),
                    ACME,
                    json!({"properties": {"k": "v"}}),
                    None,
                )
                .await
            }
            Change::RenameTable => {
                h.patch(&format!("{t}/orders"), ACME, json!({"name": "o2"}), None)
                    .await
            }
            Change::DropTable => h.delete(&format!("{t}/orders"), ACME).await,
            Change::CreateNamespace => {
                h.post(
                    &format!("{A}/catalogs/{c}/namespaces"),
                    ACME,
                    json!({"path": ["fresh"]}),
                )
                .await
            }
            Change::UpdateNamespace => {
                h.patch(
                    &format!("{A}/catalogs/{c}/namespaces/empty"),
                    ACME,
                    json!({"properties": {"k": "v"}}),
                    None,
                )
                .await
            }
            Change::DropNamespace => {
                h.delete(&format!("{A}/catalogs/{c}/namespaces/empty"), ACME)
                    .await
            }
        };
    }

    async fn applied(self, store: &dyn flotilla_metastore::Metastore, c: &str) -> bool {
        let ns = |p: &str| flotilla_domain::names::NamespacePath::new(vec![p.into()]).unwrap();
        let get = |k| async move { store.get(&k, Consistency::Strong).await.unwrap() };
        match self {
            Change::CreateTable => get(keys::relation(c, &ns("sales"), "new")).await.is_some(),
            Change::UpdateTable => get(keys::relation(c, &ns("sales"), "orders"))
                .await
                .is_some_and(|i| i.version > 1),
            Change::RenameTable => get(keys::relation(c, &ns("sales"), "o2")).await.is_some(),
            Change::DropTable => get(keys::relation(c, &ns("sales"), "orders"))
                .await
                .is_none(),
            Change::CreateNamespace => get(keys::namespace(c, &ns("fresh"))).await.is_some(),
            Change::UpdateNamespace => get(keys::namespace(c, &ns("empty")))
                .await
                .is_some_and(|i| i.version > 1),
            Change::DropNamespace => get(keys::namespace(c, &ns("empty"))).await.is_none(),
        }
    }
}

/// A fresh store with account, catalog, namespaces `sales` (table `orders`) and `empty`,
/// and a host over it that injects `point` (or nothing) into the change's transactions.
struct CrashEnv {
    host: Harness,
    faulty: Arc<FaultInjectingMetastore<SharedStore>>,
    inner: DynMetastore,
    catalog: String,
    _dir: tempfile::TempDir,
}

async fn crash_env(point: Option<flotilla_metastore::fault::CrashPoint>) -> CrashEnv {
    let (inner, dir) = support::redb_store();
    let setup = Harness::with_store(inner.clone(), None, false);
    let catalog = account_and_catalog(&setup).await;
    setup.namespace("acme", ACME, &catalog, &["sales"]).await;
    setup.namespace("acme", ACME, &catalog, &["empty"]).await;
    let r = setup
        .post(
            &format!("{A}/catalogs/{catalog}/namespaces/sales/tables"),
            ACME,
            table_body("orders"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let wrapped = SharedStore(inner.clone());
    let faulty = Arc::new(match point {
        Some(p) => FaultInjectingMetastore::crashing_at(wrapped, p),
        None => FaultInjectingMetastore::new(wrapped),
    });
    CrashEnv {
        host: Harness::with_store(faulty.clone(), None, false),
        faulty,
        inner,
        catalog,
        _dir: dir,
    }
}

#[tokio::test]
async fn at_every_crash_point_no_change_without_its_event_and_no_event_without_its_change() {
    for change in [
        Change::CreateTable,
        Change::UpdateTable,
        Change::RenameTable,
        Change::DropTable,
        Change::CreateNamespace,
        Change::UpdateNamespace,
        Change::DropNamespace,
    ] {
        let env = crash_env(None).await;
        change.run(&env.host, &env.catalog).await;
        let transacts = env.faulty.transacts();
        assert!(transacts > 0, "{change:?}");
        for point in crash_points(transacts) {
            let env = crash_env(Some(point)).await;
            let (inner, c) = (env.inner.as_ref(), env.catalog.as_str());
            let of_type = || async {
                stored_events(inner, c)
                    .await
                    .iter()
                    .filter(|e| e["operation"]["type"] == change.event_type())
                    .count()
            };
            let before = of_type().await;
            change.run(&env.host, c).await;
            let applied = change.applied(inner, c).await;
            let recorded = of_type().await - before;
            assert_eq!(
                recorded,
                usize::from(applied),
                "{change:?} at {point}: applied {applied}, {recorded} events"
            );
        }
    }
}

/// Eight writers each update their own namespace `per_writer` times while two consumers
/// page with their tokens; each sees every event once, in sequence order, no gap.
async fn consumer_sees_no_gap_and_no_duplicate(h: Harness, per_writer: usize) {
    let h = Arc::new(h);
    let c = account_and_catalog(&h).await;
    for w in 0..8 {
        h.namespace("acme", ACME, &c, &[&format!("w{w}")]).await;
    }
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (h, c) = (h.clone(), c.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let r = h
                    .patch(
                        &format!("{A}/catalogs/{c}/namespaces/w{w}"),
                        ACME,
                        json!({"properties": {"i": i.to_string()}}),
                        None,
                    )
                    .await;
                assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            }
        }));
    }
    let expected = 8 + 8 * per_writer;
    // Two consumers, so that their seals race each other too.
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (h, c, done) = (h.clone(), c.clone(), done.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut token: Option<String> = None;
                // Bounded, so that a lost event fails the test instead of hanging it.
                for _ in 0..100_000 {
                    let finished = done.load(Ordering::SeqCst);
                    let url = match &token {
                        Some(t) => {
                            format!("{A}/events?catalog_id={c}&page_size=50&page_token={t}")
                        }
                        None => format!("{A}/events?catalog_id={c}&page_size=50"),
                    };
                    let r = h.get(&url, ACME).await;
                    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
                    let items = r.body["items"].as_array().unwrap().clone();
                    token = Some(r.body["next_page_token"].as_str().unwrap().to_owned());
                    // Caught up: every writer finished before this page, it is empty, and
                    // everything was read (a page may stop short before an entry a
                    // concurrent seal is still committing; the next one has it).
                    if items.is_empty() && finished && seen.len() >= expected {
                        return seen;
                    }
                    if items.is_empty() {
                        tokio::task::yield_now().await;
                    }
                    seen.extend(items);
                }
                panic!(
                    "the consumer never caught up: {} of {expected} events",
                    seen.len()
                );
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let mut views = Vec::new();
    for c in consumers {
        views.push(c.await.unwrap());
    }
    assert_eq!(views[0], views[1], "both consumers read the same log");
    let seen = views.remove(0);
    let sequences: Vec<u64> = seen
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(
        sequences,
        (1..=expected as u64).collect::<Vec<_>>(),
        "every event once, in sequence order, no gap"
    );
    let ids: HashSet<&str> = seen
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), expected);
    // Each writer's own changes are in its commit order.
    for w in 0..8 {
        let name = format!("w{w}");
        let updates = seen
            .iter()
            .filter(|e| {
                e["operation"]["namespace"][0] == name.as_str()
                    && e["operation"]["type"] == "update-namespace-properties"
            })
            .count();
        assert_eq!(updates, per_writer);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_paging_while_eight_writers_commit_sees_no_gap_and_no_duplicate_redb() {
    consumer_sees_no_gap_and_no_duplicate(Harness::redb(), 1250).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_paging_while_eight_writers_commit_sees_no_gap_and_no_duplicate_dynamodb() {
    // The single-threaded moto: the threaded server races on concurrent transactions of one
    // table (its own `dictionary changed size during iteration`, answered as a 500), which
    // DynamoDB does not; the writers then see 503 after their retries.
    consumer_sees_no_gap_and_no_duplicate(Harness::dynamo_serial().await, 25).await;
}

const ANA: &str = "events-ana-token-01";

#[tokio::test]
async fn a_reader_sees_only_events_about_objects_it_may_read() {
    let mut tokens = support::tokens();
    tokens.add_named(ANA, vec!["acme".into()], "ana", vec!["analysts".into()]);
    let (store, _dir) = support::redb_store();
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let h = Harness::over(state);
    let c = account_and_catalog(&h).await;
    for n in ["sales", "finance"] {
        h.namespace("acme", ACME, &c, &[n]).await;
        let r = h
            .post(
                &format!("{A}/catalogs/{c}/namespaces/{n}/tables"),
                ACME,
                table_body("t"),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    // A move out of what ana may read reveals its destination: she does not see it.
    let r = h
        .patch(
            &format!("{A}/catalogs/{c}/namespaces/sales/tables/t"),
            ACME,
            json!({"namespace": ["finance"], "name": "moved"}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    h.group_grant(
        "acme",
        ACME,
        "analysts",
        "READ",
        json!({"type": "NAMESPACE", "catalog_id": c, "path": ["sales"]}),
    )
    .await;
    let everything = all_events(&h, &c, ACME).await;
    assert_eq!(everything.len(), 5);
    let seen = all_events(&h, &c, ANA).await;
    let described: Vec<(String, String)> = seen
        .iter()
        .map(|e| {
            (
                e["operation"]["type"].as_str().unwrap().to_owned(),
                e["operation"]["namespace"][0].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            ("create-namespace".to_owned(), "sales".to_owned()),
            ("create-table".to_owned(), "sales".to_owned()),
        ]
    );
    // A principal of another account is refused the catalog's feed.
    let r = h
        .get(&format!("{A}/events?catalog_id={c}"), support::BETA)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn events_leave_the_feed_after_7_days_and_the_store_after_the_audits_90() {
    let (store, dir) = support::redb_store();
    let h = Harness::with_store(store.clone(), Some(dir), true);
    let clock = h.clock.clone().unwrap();
    let c = account_and_catalog(&h).await;
    h.namespace("acme", ACME, &c, &["old"]).await;
    assert_eq!(all_events(&h, &c, ACME).await.len(), 1);
    // Pending and sealed, an event is kept for the longer retention (the audit's).
    let item = query_all(
        store.as_ref(),
        Query::new(
            keys::catalog_pk(&c),
            keys::EVENT_LOG_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap();
    assert_eq!(item.len(), 1);
    h.namespace("acme", ACME, &c, &["pending"]).await;
    let pending = query_all(
        store.as_ref(),
        Query::new(
            keys::catalog_pk(&c),
            keys::EVENT_PENDING_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        pending[0].expires_at,
        Some(1_800_000_000 + 90 * 24 * 3600),
        "a pending event's TTL is the audit's retention"
    );
    clock.advance_ms(8 * 24 * 3600 * 1000);
    h.namespace("acme", ACME, &c, &["new"]).await;
    let events = all_events(&h, &c, ACME).await;
    assert_eq!(events.len(), 1, "the feed answers 7 days: {events:?}");
    assert_eq!(events[0]["operation"]["namespace"], json!(["new"]));
    assert_eq!(events[0]["sequence"], 3);
    assert_eq!(
        stored_events(store.as_ref(), &c).await.len(),
        3,
        "kept for the audit"
    );
    let r = h.get(&format!("{A}/audit?page_size=100"), ACME).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // The three namespaces and the catalog's creation.
    assert_eq!(r.body["items"].as_array().unwrap().len(), 4, "{:?}", r.body);
    // Past 90 days the first two are swept.
    clock.advance_ms(83 * 24 * 3600 * 1000);
    assert!(all_events(&h, &c, ACME).await.is_empty());
    let stored = stored_events(store.as_ref(), &c).await;
    assert_eq!(stored.len(), 1, "the expired events are swept: {stored:?}");
    let r = h.get(&format!("{A}/audit?page_size=100"), ACME).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1, "{:?}", r.body);
}

#[tokio::test]
async fn a_fresh_reader_starts_at_the_feeds_window_not_at_the_audits() {
    let (store, dir) = support::redb_store();
    let h = Harness::with_store(store.clone(), Some(dir), true);
    let c = account_and_catalog(&h).await;
    // 1,500 entries from 30 days ago (more than one read examines), then one new event.
    let old = 1_800_000_000_000 - 30 * 24 * 3600 * 1000;
    let pk = keys::catalog_pk(&c);
    let mut ops = Vec::new();
    for seq in 1..=1500u64 {
        let event = json!({"event_id": format!("old{seq}"), "sequence": seq,
            "timestamp_ms": old + seq as i64, "request_id": "r",
            "actor": {"type": "SYSTEM", "id": "flotilla"},
            "operation": {"type": "create-namespace", "catalog_id": c,
                "namespace": [format!("old{seq}")]}});
        ops.push(flotilla_metastore::Op::create(
            keys::log_event(&pk, seq),
            serde_json::to_vec(&event).unwrap(),
        ));
    }
    ops.push(flotilla_metastore::Op::create(
        keys::log_head(&pk),
        serde_json::to_vec(&json!({"next": 1501, "first": 1})).unwrap(),
    ));
    for chunk in ops.chunks(100) {
        store
            .transact(flotilla_metastore::Transaction {
                ops: chunk.to_vec(),
            })
            .await
            .unwrap();
    }
    h.namespace("acme", ACME, &c, &["new"]).await;
    let r = h
        .get(&format!("{A}/events?catalog_id={c}&page_size=10"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(types(items), ["create-namespace"], "{items:?}");
    assert_eq!(items[0]["sequence"], 1501);
    // The audit, with its 90 days, still reads them all.
    let r = h.get(&format!("{A}/audit?page_size=1000"), ACME).await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 1000);
}

#[tokio::test]
async fn two_commits_of_one_table_sealed_together_keep_their_order_when_clocks_disagree() {
    let (store, dir) = support::redb_store();
    let h = Harness::with_store(store, Some(dir), true);
    let clock = h.clock.clone().unwrap();
    let c = account_and_catalog(&h).await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let tables = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    let r = h.post(&tables, ACME, table_body("orders")).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let before = all_events(&h, &c, ACME).await.len();
    // The second commit's writer runs 10 s behind the first's; both are sealed in one batch.
    for (location, shift) in [("s3://b/t/m2.json", 0), ("s3://b/t/m3.json", -10_000)] {
        clock.advance_ms(shift);
        let r = h
            .patch(
                &format!("{tables}/orders"),
                ACME,
                json!({"metadata_location": location}),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    }
    let events = all_events(&h, &c, ACME).await;
    let commits: Vec<&str> = events[before..]
        .iter()
        .filter(|e| e["operation"]["type"] == "update-table")
        .map(|e| e["operation"]["metadata_location"].as_str().unwrap())
        .collect();
    assert_eq!(commits, ["s3://b/t/m2.json", "s3://b/t/m3.json"]);
}

#[tokio::test]
async fn events_off_writes_none() {
    let (store, _dir) = support::redb_store();
    let state = AppState::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(support::tokens()),
        Config {
            events: false,
            ..Config::default()
        },
    );
    let h = Harness::over(state);
    let c = account_and_catalog(&h).await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    assert!(stored_events(store.as_ref(), &c).await.is_empty());
}

#[tokio::test]
async fn without_a_catalog_the_listing_merges_the_catalogs_each_in_its_order() {
    let mut tokens = support::tokens();
    tokens.add_named(ANA, vec!["acme".into()], "ana", vec!["analysts".into()]);
    let (store, _dir) = support::redb_store();
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let h = Harness::over(state);
    let lake = account_and_catalog(&h).await;
    let pond = h.catalog("acme", ACME, "pond").await;
    for i in 0..5 {
        for c in [&lake, &pond] {
            h.namespace("acme", ACME, c, &[&format!("n{i}")]).await;
        }
    }
    let page = |token: Option<String>, who: &'static str| {
        let h = &h;
        async move {
            let url = match token {
                Some(t) => format!("{A}/events?page_size=3&page_token={t}"),
                None => format!("{A}/events?page_size=3"),
            };
            let r = h.get(&url, who).await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            (
                r.body["items"].as_array().unwrap().clone(),
                r.body["next_page_token"].as_str().unwrap().to_owned(),
            )
        }
    };
    let mut seen = Vec::new();
    let mut token = None;
    loop {
        let (items, t) = page(token, ACME).await;
        token = Some(t);
        if items.is_empty() {
            break;
        }
        seen.extend(items);
    }
    // The ten namespaces, and the two catalogs' creation in the account's log.
    assert_eq!(seen.len(), 12);
    let created: Vec<&Value> = seen
        .iter()
        .filter(|e| e["operation"]["type"] == "x-flotilla-catalog-created")
        .collect();
    assert_eq!(created.len(), 2, "{seen:?}");
    for c in [&lake, &pond] {
        let sequences: Vec<u64> = seen
            .iter()
            .filter(|e| e["operation"]["catalog_id"] == c.as_str())
            .map(|e| e["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(sequences, [1, 2, 3, 4, 5], "catalog {c} in its own order");
    }
    // Resuming after the end sees only what came later.
    h.namespace("acme", ACME, &pond, &["late"]).await;
    let (items, _) = page(token, ACME).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["operation"]["namespace"], json!(["late"]));
    // A reader that can see one catalog reads only its events.
    let r = h
        .post(&format!("{A}/roles"), ACME, json!({"name": "analysts"}))
        .await;
    assert!(r.status.is_success());
    h.call(
        Method::PUT,
        &format!("{A}/roles/analysts/members/group:analysts"),
        Some(ACME),
        None,
        &[],
    )
    .await;
    let r = h
        .post(
            &format!("{A}/grants"),
            ACME,
            json!({"role": "analysts", "privilege": "READ",
                "securable": {"type": "CATALOG", "catalog_id": lake}}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let (items, _) = page(None, ANA).await;
    assert!(!items.is_empty());
    // Its events, and its own creation from the account's log.
    assert!(
        items
            .iter()
            .all(|e| e["operation"]["catalog_id"] == lake.as_str()
                || e["operation"]["resource"]["id"] == lake.as_str()),
        "{items:?}"
    );
}

#[tokio::test]
async fn an_overlay_publication_and_retirement_write_events_with_the_overlay_as_actor() {
    let env = overlay_env::Env::new(overlay_env::sample_fixture().await, json!([])).await;
    env.run().await.expect("reconcile");
    let events = all_events(&env.h, &env.catalog, ACME).await;
    let relations: Vec<&Value> = events
        .iter()
        .filter(|e| e["operation"]["name"].is_string())
        .collect();
    let mut published: Vec<(String, String)> = relations
        .iter()
        .map(|e| {
            assert_eq!(
                e["actor"],
                json!({"type": "OVERLAY", "id": env.overlay}),
                "{e}"
            );
            (
                e["operation"]["type"].as_str().unwrap().to_owned(),
                e["operation"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    published.sort();
    assert_eq!(
        published,
        [
            ("create-table".to_owned(), "orders".to_owned()),
            ("create-table".to_owned(), "orders".to_owned()),
            ("create-table".to_owned(), "people".to_owned()),
            ("create-view".to_owned(), "eu_orders".to_owned()),
        ]
    );
    // A run that changes nothing writes nothing; a table gone upstream is retired.
    env.run().await.expect("reconcile");
    assert!(env.fx.remove_table(&["hr"], "people"));
    env.run().await.expect("reconcile");
    let later: Vec<Value> = all_events(&env.h, &env.catalog, ACME)
        .await
        .into_iter()
        .skip(events.len())
        .collect();
    assert_eq!(types(&later), ["drop-table"], "{later:?}");
    assert_eq!(later[0]["operation"]["name"], "people");
    assert_eq!(later[0]["actor"]["type"], "OVERLAY");
}
