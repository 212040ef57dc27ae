//! The audit trail (`service::audit`, `GET {A}/audit`): an admin sees who changed what (the
//! change events with their principal and request id) and who was refused (recorded by the
//! HTTP layer, by route pattern); others are refused; a flood of refusals leaves a bounded
//! number of records; paging sees every record once; records expire after 90 days.

mod support;

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_core::clock::ManualClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::{Consistency, DynMetastore, Query, SharedStore, query_all};
use flotilla_services::service::audit::{HORIZON_MS, MAX_REFUSALS_PER_MINUTE, SUMMARY_EVERY};
use serde_json::{Value, json};
use support::{ACME, BETA, Harness, OPERATOR};

const A: &str = "/v1/accounts/acme";
const ANA: &str = "audit-ana-token-001";
const BOB: &str = "audit-bob-token-001";

struct Env {
    h: Harness,
    clock: ManualClock,
    store: DynMetastore,
    _dir: tempfile::TempDir,
}

/// Account `acme` with catalog `lake`; ana is an account admin through a grant, bob is a
/// named principal without grants. The clock stands still unless a test moves it.
async fn env_over(wrap: impl FnOnce(DynMetastore) -> DynMetastore) -> (Env, String) {
    let mut tokens = support::tokens();
    tokens.add_named(ANA, vec!["acme".into()], "ana", vec!["admins".into()]);
    tokens.add_named(BOB, vec!["acme".into()], "bob", vec![]);
    let (store, dir) = support::redb_store();
    let store = wrap(store);
    let clock = ManualClock::new(1_800_000_000_000);
    let state = AppState::new(
        store.clone(),
        Arc::new(clock.clone()),
        Arc::new(tokens),
        Config::default(),
    );
    let h = Harness::over(state);
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let c = h.catalog("acme", ACME, "lake").await;
    h.group_grant(
        "acme",
        ACME,
        "admins",
        "ACCOUNT_ADMIN",
        json!({"type": "ACCOUNT"}),
    )
    .await;
    (
        Env {
            h,
            clock,
            store,
            _dir: dir,
        },
        c,
    )
}

async fn env() -> (Env, String) {
    env_over(|s| s).await
}

fn subject(e: &Env, token: &str) -> String {
    e.h.state.authenticate(token).unwrap().subject
}

fn request_id(r: &support::Resp) -> String {
    r.headers["x-flotilla-request-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// Every audit record `token` may read under `query`, paging by `page_size` until an empty
/// page; answers them and the last token.
async fn audit_all(e: &Env, token: &str, query: &str, page_size: usize) -> (Vec<Value>, String) {
    let mut out = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let mut url = format!("{A}/audit?page_size={page_size}{query}");
        if let Some(t) = &next {
            url.push_str(&format!("&page_token={t}"));
        }
        let r = e.h.get(&url, token).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let items = r.body["items"].as_array().unwrap().clone();
        let t = r.body["next_page_token"].as_str().unwrap().to_owned();
        if items.is_empty() {
            return (out, t);
        }
        out.extend(items);
        next = Some(t);
    }
}

async fn stored_audit(store: &dyn flotilla_metastore::Metastore) -> Vec<Value> {
    query_all(
        store,
        Query::new(
            keys::account_pk("acme"),
            keys::AUDIT_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap()
    .iter()
    .map(|i| i.json::<Value>().unwrap())
    .collect()
}

#[tokio::test]
async fn an_admin_sees_a_commit_by_another_principal_with_its_principal_and_request_id() {
    let (e, c) = env().await;
    let r =
        e.h.post(
            &format!("{A}/catalogs/{c}/namespaces"),
            ANA,
            json!({"path": ["sales"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let rid = request_id(&r);
    let (items, _) = audit_all(&e, ACME, "", 100).await;
    let mutations: Vec<&Value> = items.iter().filter(|i| i["kind"] == "mutation").collect();
    // The namespace, and the setup's role, membership and grant (the account's log): all in
    // one millisecond of the stopped clock, where the catalog's log comes first.
    let actions: Vec<&str> = mutations
        .iter()
        .map(|m| m["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "create-namespace",
            "x-flotilla-catalog-created",
            "x-flotilla-role-created",
            "x-flotilla-role-member-added",
            "x-flotilla-grant-created",
        ],
        "{items:?}"
    );
    assert_eq!(
        mutations[4]["securable"]["resource"]["type"], "grant",
        "{:?}",
        mutations[4]
    );
    assert!(mutations[4]["securable"]["catalog_id"].is_null());
    let m = mutations[0];
    assert_eq!(m["principal"], subject(&e, ANA));
    assert_eq!(m["request_id"], rid);
    assert_eq!(m["action"], "create-namespace");
    assert_eq!(
        m["securable"],
        json!({"catalog_id": c, "namespace": ["sales"], "name": null, "resource": null})
    );
    // The principal filter selects by who did it.
    let (mine, _) = audit_all(&e, ANA, &format!("&principal={}", subject(&e, BOB)), 100).await;
    assert!(mine.is_empty(), "{mine:?}");
    let (anas, _) = audit_all(&e, ANA, &format!("&principal={}", subject(&e, ANA)), 100).await;
    assert_eq!(anas.len(), 1, "{anas:?}");
}

#[tokio::test]
async fn a_non_admin_is_refused_and_the_refusal_is_audited_by_route_pattern() {
    let (e, c) = env().await;
    let r = e.h.get(&format!("{A}/audit"), BOB).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert_eq!(r.code(), "PERMISSION_DENIED");
    let refused = request_id(&r);
    // Refused elsewhere: unauthenticated, and a principal of another account.
    let anon =
        e.h.call(Method::GET, &format!("{A}/catalogs"), None, None, &[])
            .await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED);
    let other = e.h.get(&format!("{A}/catalogs/{c}"), BETA).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    // Not listed before the horizon, then listed.
    let (items, _) = audit_all(&e, ACME, "", 100).await;
    assert!(items.iter().all(|i| i["kind"] != "refusal"), "{items:?}");
    e.clock.advance_ms(HORIZON_MS + 1);
    let (items, _) = audit_all(&e, ANA, "", 100).await;
    let refusals: Vec<&Value> = items.iter().filter(|i| i["kind"] == "refusal").collect();
    assert_eq!(refusals.len(), 3, "{items:?}");
    let bob = refusals
        .iter()
        .find(|i| i["request_id"] == refused.as_str())
        .expect("bob's refusal");
    assert_eq!(bob["principal"], subject(&e, BOB));
    assert_eq!(bob["method"], "GET");
    assert_eq!(bob["route"], "/v1/accounts/{account_id}/audit");
    assert_eq!(bob["status"], 403);
    let anon = refusals
        .iter()
        .find(|i| i["request_id"] == request_id(&anon).as_str())
        .unwrap();
    assert_eq!(anon["principal"], "anonymous");
    assert_eq!(anon["status"], 401);
    assert_eq!(anon["route"], "/v1/accounts/{account_id}/catalogs");
    let other = refusals
        .iter()
        .find(|i| i["request_id"] == request_id(&other).as_str())
        .unwrap();
    assert_eq!(
        other["route"], "/v1/accounts/{account_id}/catalogs/{catalog_id}",
        "the pattern, never the raw path"
    );
    assert_eq!(other["principal"], subject(&e, BETA));
    // A refusal naming an account that does not exist is not recorded anywhere.
    let r = e.h.get("/v1/accounts/nosuch/catalogs", BOB).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let items = query_all(
        e.store.as_ref(),
        Query::new(
            keys::account_pk("nosuch"),
            keys::AUDIT_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap();
    assert!(items.is_empty());
}

#[tokio::test]
async fn a_flood_of_refusals_in_a_minute_leaves_the_bound_and_one_summary() {
    let (e, _c) = env().await;
    for _ in 0..1000 {
        let r = e.h.get(&format!("{A}/audit"), BOB).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let stored = stored_audit(e.store.as_ref()).await;
    assert_eq!(stored.len() as u64, MAX_REFUSALS_PER_MINUTE + 1);
    let summaries: Vec<&Value> = stored
        .iter()
        .filter(|r| r.get("suppressed").is_some())
        .collect();
    assert_eq!(summaries.len(), 1);
    // The summary is written every SUMMARY_EVERY suppressed refusals: its count lags the
    // truth by less than that, and the flood cost at most one write per SUMMARY_EVERY.
    let suppressed = summaries[0]["suppressed"].as_u64().unwrap();
    let truth = 1000 - MAX_REFUSALS_PER_MINUTE;
    assert!(
        suppressed <= truth && truth - suppressed < SUMMARY_EVERY,
        "summary says {suppressed} of {truth}"
    );
    // The next minute records again, and the listing shows both minutes' records.
    e.clock.advance_ms(60_000);
    let r = e.h.get(&format!("{A}/audit"), BOB).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        stored_audit(e.store.as_ref()).await.len() as u64,
        MAX_REFUSALS_PER_MINUTE + 2
    );
    e.clock.advance_ms(HORIZON_MS + 1);
    let (items, _) = audit_all(&e, ACME, "", 1000).await;
    let items: Vec<&Value> = items.iter().filter(|i| i["kind"] != "mutation").collect();
    assert_eq!(items.len() as u64, MAX_REFUSALS_PER_MINUTE + 2);
    assert_eq!(
        items
            .iter()
            .filter(|i| i["kind"] == "refusal-summary")
            .count(),
        1
    );
}

#[tokio::test]
async fn paging_with_a_small_page_sees_every_record_exactly_once() {
    let (e, c) = env().await;
    let pond = e.h.catalog("acme", ACME, "pond").await;
    for i in 0..7 {
        for cat in [&c, &pond] {
            e.h.namespace("acme", ANA, cat, &[&format!("n{i}")]).await;
        }
        let r = e.h.get(&format!("{A}/audit"), BOB).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        e.clock.advance_ms(1_000);
    }
    e.clock.advance_ms(HORIZON_MS + 1);
    let (all, _) = audit_all(&e, ACME, "", 1000).await;
    // 14 namespaces, 7 refusals, the two catalogs' creation and the setup's role, membership
    // and grant.
    assert_eq!(all.iter().filter(|i| i["kind"] == "refusal").count(), 7);
    assert_eq!(all.iter().filter(|i| i["kind"] == "mutation").count(), 19);
    let (paged, token) = audit_all(&e, ACME, "", 2).await;
    let ids: Vec<&str> = paged.iter().map(|i| i["id"].as_str().unwrap()).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no duplicate");
    let every: HashSet<&str> = all.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(unique, every, "no gap");
    // Resuming after the end sees only what came later, once.
    e.h.namespace("acme", ANA, &c, &["late"]).await;
    let r = e.h.get(&format!("{A}/audit"), BOB).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    e.clock.advance_ms(HORIZON_MS + 1);
    let mut later = Vec::new();
    let mut t = token;
    loop {
        let r =
            e.h.get(&format!("{A}/audit?page_size=1&page_token={t}"), ACME)
                .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let items = r.body["items"].as_array().unwrap().clone();
        t = r.body["next_page_token"].as_str().unwrap().to_owned();
        if items.is_empty() {
            break;
        }
        later.extend(items);
    }
    let kinds: Vec<&str> = later.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["mutation", "refusal"], "{later:?}");
    // A token of another filter is refused.
    let r =
        e.h.get(&format!("{A}/audit?principal=x&page_token={t}"), ACME)
            .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn refusal_records_past_90_days_are_gone() {
    let (e, _c) = env().await;
    for _ in 0..3 {
        let r = e.h.get(&format!("{A}/audit"), BOB).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let stored = stored_audit(e.store.as_ref()).await;
    assert_eq!(stored.len(), 3);
    // Each carries the DynamoDB TTL of the retention.
    let item = query_all(
        e.store.as_ref(),
        Query::new(
            keys::account_pk("acme"),
            keys::AUDIT_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap()
    .remove(0);
    assert_eq!(
        item.expires_at,
        Some(1_800_000_000 + 90 * 24 * 3600),
        "TTL at 90 days"
    );
    e.clock.advance_ms(89 * 24 * 3600 * 1000);
    let r = e.h.get(&format!("{A}/audit"), BOB).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    e.clock.advance_ms(HORIZON_MS + 1);
    let (items, _) = audit_all(&e, ACME, "", 100).await;
    // Three refusals and the setup's four account changes, all at the start, and one more
    // refusal.
    assert_eq!(items.len(), 8, "within the retention: kept");
    e.clock.advance_ms(2 * 24 * 3600 * 1000);
    let (items, _) = audit_all(&e, ACME, "", 100).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        stored_audit(e.store.as_ref()).await.len(),
        1,
        "the expired records are swept"
    );
}

#[tokio::test]
async fn a_failing_audit_write_does_not_change_the_answer() {
    let faults = Arc::new(std::sync::OnceLock::<
        Arc<FaultInjectingMetastore<SharedStore>>,
    >::new());
    let f = faults.clone();
    let (e, _c) = env_over(move |s| {
        let store = Arc::new(FaultInjectingMetastore::new(SharedStore(s)));
        let _ = f.set(store.clone());
        store
    })
    .await;
    let faults = faults.get().unwrap();
    let before = e.h.get(&format!("{A}/audit"), BOB).await;
    faults.fail_when(Fault::FailBeforeApply, 1, |tx| {
        tx.ops
            .iter()
            .any(|op| op.key().sk.starts_with(keys::AUDIT_PREFIX))
    });
    let after = e.h.get(&format!("{A}/audit"), BOB).await;
    assert_eq!(faults.injected(), 1, "the audit write failed");
    assert_eq!(after.status, before.status);
    assert_eq!(after.body, before.body);
    assert_eq!(stored_audit(e.store.as_ref()).await.len(), 1);
}
