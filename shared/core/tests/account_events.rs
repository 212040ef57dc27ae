//! Account-level change events (`service::events`, the account's log under `ACCT#{a}`):
//! integration, overlay, role, membership, grant and service principal changes each write
//! one `x-flotilla-…` event in the transaction that makes the change (at every crash point,
//! no change without its event and no event without its change), a receipt replay writes
//! none, the account-wide listing merges them with the catalogs' events without a
//! `catalog_id`, and a reader sees only the account events about what it may see.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_core::auth::TokenSigner;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_metastore::fault::crash_points;
use flotilla_metastore::{Consistency, Metastore, Query, query_all};
use serde_json::{Value, json};
use support::{ACME, Harness, OPERATOR};
// What `overlay_env` takes from the crate root.
#[allow(unused_imports)]
use support::{Creds, dynamo_serial_store, dynamo_store, items};

const A: &str = "/v1/accounts/acme";
const ANA: &str = "acct-events-ana-01";

/// Every event item of account `acme`'s log in the store, pending or sealed.
async fn stored_account_events(store: &dyn Metastore) -> Vec<Value> {
    let mut out = Vec::new();
    for prefix in [keys::EVENT_PENDING_PREFIX, keys::EVENT_LOG_PREFIX] {
        let items = query_all(
            store,
            Query::new(keys::account_pk("acme"), prefix, Consistency::Strong),
        )
        .await
        .unwrap();
        out.extend(items.iter().map(|i| i.json::<Value>().unwrap()));
    }
    out
}

/// Every event of the account-wide listing `token` may read (with `query`), paging by 5.
async fn feed(h: &Harness, token: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let mut url = format!("{A}/events?page_size=5{query}");
        if let Some(t) = &next {
            url.push_str(&format!("&page_token={t}"));
        }
        let r = h.get(&url, token).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let items = r.body["items"].as_array().unwrap().clone();
        if items.is_empty() {
            return out;
        }
        out.extend(items);
        next = Some(r.body["next_page_token"].as_str().unwrap().to_owned());
    }
}

/// The account events (no `catalog_id`) among `events`.
fn account_only(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["operation"].get("catalog_id").is_none())
        .collect()
}

fn types<'a>(events: &[&'a Value]) -> Vec<&'a str> {
    events
        .iter()
        .map(|e| e["operation"]["type"].as_str().unwrap())
        .collect()
}

fn ok(r: support::Resp) -> support::Resp {
    assert!(r.status.is_success(), "{:?}", r.body);
    r
}

#[tokio::test]
async fn integration_overlay_role_member_and_grant_changes_write_one_account_event_each() {
    let env = overlay_env::Env::new(overlay_env::fixture().await, json!([])).await;
    let h = &env.h;
    let (i, o) = (env.integration.as_str(), env.overlay.as_str());
    // A role created twice under one idempotency key: one event.
    for _ in 0..2 {
        ok(h.call(
            Method::POST,
            &format!("{A}/roles"),
            Some(ACME),
            Some(json!({"name": "ops"})),
            &[("idempotency-key", "role-ops-1")],
        )
        .await);
    }
    ok(h.call(
        Method::PUT,
        &format!("{A}/roles/ops/members/group:ops"),
        Some(ACME),
        None,
        &[],
    )
    .await);
    let grant = ok(h
        .post(
            &format!("{A}/grants"),
            ACME,
            json!({"role": "ops", "privilege": "USE",
                "securable": {"type": "INTEGRATION", "integration_id": i}}),
        )
        .await);
    let grant_id = grant.body["id"].as_str().unwrap().to_owned();
    let integration = format!("{A}/integrations/{i}");
    ok(h.patch(&integration, ACME, json!({"paused": true}), None)
        .await);
    ok(h.patch(&integration, ACME, json!({"paused": false}), None)
        .await);
    ok(h.call(
        Method::PUT,
        &format!("{integration}/authentication"),
        Some(ACME),
        Some(json!({"credentials": {"token": overlay_env::UPSTREAM_TOKEN}})),
        &[],
    )
    .await);
    ok(h.patch(
        &overlay_env::ovl_path(o),
        ACME,
        json!({"refresh_interval_secs": 600}),
        None,
    )
    .await);
    ok(h.call(
        Method::DELETE,
        &format!("{A}/roles/ops/members/group:ops"),
        Some(ACME),
        None,
        &[],
    )
    .await);
    ok(h.delete(&format!("{A}/grants/{grant_id}"), ACME).await);
    ok(h.delete(&format!("{A}/roles/ops"), ACME).await);
    ok(h.delete(&overlay_env::ovl_path(o), ACME).await);
    ok(h.delete(&integration, ACME).await);
    // A refused change writes nothing.
    let r = h.delete(&integration, ACME).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    let events = feed(h, ACME, "").await;
    let account = account_only(&events);
    assert_eq!(
        types(&account),
        [
            "x-flotilla-catalog-created",
            "x-flotilla-integration-created",
            "x-flotilla-overlay-created",
            "x-flotilla-role-created",
            "x-flotilla-role-member-added",
            "x-flotilla-grant-created",
            "x-flotilla-integration-paused",
            "x-flotilla-integration-resumed",
            "x-flotilla-integration-credentials-rotated",
            "x-flotilla-overlay-updated",
            "x-flotilla-role-member-removed",
            "x-flotilla-grant-deleted",
            "x-flotilla-role-deleted",
            "x-flotilla-overlay-deleted",
            "x-flotilla-integration-deleted",
        ]
    );
    // The account's own log: dense sequences in commit order.
    let sequences: Vec<u64> = account
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=15).collect::<Vec<_>>());
    let created = account[1];
    assert_eq!(
        created["operation"]["resource"],
        json!({"type": "integration", "id": i, "name": "upstream"})
    );
    assert_eq!(created["actor"]["type"], "PRINCIPAL");
    assert!(created["operation"].get("namespace").is_none());
    assert_eq!(
        account[5]["operation"]["details"]["securable"],
        json!({"type": "INTEGRATION", "integration_id": i})
    );
    assert_eq!(account[4]["operation"]["details"]["member"], "group:ops");
    assert_eq!(
        account[9]["operation"]["details"]["changed"],
        json!(["refresh_interval_secs"])
    );
    // Nothing secret in any event.
    for e in &account {
        assert!(!e.to_string().contains(overlay_env::UPSTREAM_TOKEN), "{e}");
    }
    // A filter by object type.
    let only = feed(h, ACME, "&object_types=overlay").await;
    assert_eq!(
        types(&only.iter().collect::<Vec<_>>()),
        [
            "x-flotilla-overlay-created",
            "x-flotilla-overlay-updated",
            "x-flotilla-overlay-deleted",
        ]
    );
    let r = h
        .get(&format!("{A}/events?object_types=spaceship"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Resuming after the end sees only what came later, once.
    let r = h.get(&format!("{A}/events?page_size=100"), ACME).await;
    let t = r.body["next_page_token"].as_str().unwrap().to_owned();
    ok(h.post(&format!("{A}/roles"), ACME, json!({"name": "late"}))
        .await);
    let r = h
        .get(&format!("{A}/events?page_size=100&page_token={t}"), ACME)
        .await;
    let later = r.body["items"].as_array().unwrap();
    assert_eq!(
        types(&later.iter().collect::<Vec<_>>()),
        ["x-flotilla-role-created"]
    );
}

#[tokio::test]
async fn service_principal_changes_write_events_without_the_secret() {
    let (store, _dir) = support::redb_store();
    let state = AppState::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(support::tokens()),
        Config::default(),
    )
    .with_token_signer(Arc::new(TokenSigner::new([7; 32])));
    let h = Harness::over(state);
    h.account("acme").await;
    let r = ok(h
        .post(&format!("{A}/principals"), ACME, json!({"name": "etl"}))
        .await);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let first = r.body["client_secret"].as_str().unwrap().to_owned();
    let r = ok(h
        .post(&format!("{A}/principals/{id}/rotate"), ACME, json!({}))
        .await);
    let second = r.body["client_secret"].as_str().unwrap().to_owned();
    ok(h.delete(&format!("{A}/principals/{id}"), ACME).await);
    let events = feed(&h, ACME, "").await;
    let account = account_only(&events);
    assert_eq!(
        types(&account),
        [
            "x-flotilla-principal-created",
            "x-flotilla-principal-secret-rotated",
            "x-flotilla-principal-deleted",
        ]
    );
    assert_eq!(
        account[0]["operation"]["resource"],
        json!({"type": "principal", "id": id, "name": "etl"})
    );
    for e in stored_account_events(store.as_ref()).await {
        let text = e.to_string();
        assert!(!text.contains(&first) && !text.contains(&second), "{text}");
        assert!(!text.contains("secret_hash"), "{text}");
    }
}

#[tokio::test]
async fn a_reader_sees_only_the_account_events_about_what_it_may_see() {
    let env = overlay_env::Env::new(overlay_env::fixture().await, json!([])).await;
    let mut tokens = support::tokens();
    tokens.add_named(ANA, vec!["acme".into()], "ana", vec!["analysts".into()]);
    // The environment's host, with ana among its callers.
    let host = Harness::over(AppState {
        auth: Arc::new(tokens),
        ..env.h.state.clone()
    });
    let h = &host;
    // Ana may use the integration: she sees its events, not the overlay's, not the role's,
    // and not the grant (she may not manage the integration).
    h.group_grant(
        "acme",
        ACME,
        "analysts",
        "USE",
        json!({"type": "INTEGRATION", "integration_id": env.integration}),
    )
    .await;
    ok(h.patch(
        &format!("{A}/integrations/{}", env.integration),
        ACME,
        json!({"display_name": "renamed"}),
        None,
    )
    .await);
    let all = feed(h, ACME, "").await;
    assert_eq!(account_only(&all).len(), 7, "{all:?}");
    let seen = feed(h, ANA, "").await;
    assert_eq!(
        types(&account_only(&seen)),
        [
            "x-flotilla-integration-created",
            "x-flotilla-integration-updated"
        ]
    );
    // With MANAGE on the integration she also sees the grants on it.
    ok(h.post(
        &format!("{A}/grants"),
        ACME,
        json!({"role": "analysts", "privilege": "MANAGE",
            "securable": {"type": "INTEGRATION", "integration_id": env.integration}}),
    )
    .await);
    let seen = feed(h, ANA, "").await;
    assert_eq!(
        types(&account_only(&seen)),
        [
            "x-flotilla-integration-created",
            "x-flotilla-grant-created",
            "x-flotilla-integration-updated",
            "x-flotilla-grant-created",
        ]
    );
}

/// One account change under crash-point test: its setup (not faulted), the change, whether
/// it applied (read on the store), and its event type.
#[derive(Clone, Copy, Debug)]
enum Change {
    CreateRole,
    AddMember,
    CreateGrant,
    DeleteRole,
    PauseIntegration,
    UpdateOverlay,
    DeleteOverlay,
    UpdateCatalog,
}

impl Change {
    fn event_type(self) -> &'static str {
        match self {
            Change::CreateRole => "x-flotilla-role-created",
            Change::AddMember => "x-flotilla-role-member-added",
            Change::CreateGrant => "x-flotilla-grant-created",
            Change::DeleteRole => "x-flotilla-role-deleted",
            Change::PauseIntegration => "x-flotilla-integration-paused",
            Change::UpdateOverlay => "x-flotilla-overlay-updated",
            Change::DeleteOverlay => "x-flotilla-overlay-deleted",
            Change::UpdateCatalog => "x-flotilla-catalog-updated",
        }
    }

    async fn setup(self, env: &overlay_env::Env) {
        if matches!(
            self,
            Change::AddMember | Change::CreateGrant | Change::DeleteRole
        ) {
            ok(env
                .h
                .post(&format!("{A}/roles"), ACME, json!({"name": "ops"}))
                .await);
        }
    }

    async fn run(self, env: &overlay_env::Env) {
        let h = &env.h;
        let _ = match self {
            Change::CreateRole => {
                h.post(&format!("{A}/roles"), ACME, json!({"name": "ops"}))
                    .await
            }
            Change::AddMember => {
                h.call(
                    Method::PUT,
                    &format!("{A}/roles/ops/members/group:ops"),
                    Some(ACME),
                    None,
                    &[],
                )
                .await
            }
            Change::CreateGrant => {
                h.post(
                    &format!("{A}/grants"),
                    ACME,
                    json!({"role": "ops", "privilege": "USE",
                        "securable": {"type": "INTEGRATION", "integration_id": env.integration}}),
                )
                .await
            }
            Change::DeleteRole => h.delete(&format!("{A}/roles/ops"), ACME).await,
            Change::PauseIntegration => {
                h.patch(
                    &format!("{A}/integrations/{}", env.integration),
                    ACME,
                    json!({"paused": true}),
                    None,
                )
                .await
            }
            Change::UpdateOverlay => {
                h.patch(
                    &overlay_env::ovl_path(&env.overlay),
                    ACME,
                    json!({"refresh_interval_secs": 900}),
                    None,
                )
                .await
            }
            Change::DeleteOverlay => h.delete(&overlay_env::ovl_path(&env.overlay), ACME).await,
            Change::UpdateCatalog => {
                h.patch(
                    &format!("{A}/catalogs/{}", env.catalog),
                    ACME,
                    json!({"description": "changed"}),
                    None,
                )
                .await
            }
        };
    }

    async fn applied(self, env: &overlay_env::Env) -> bool {
        let store = env.dyn_store();
        let get = |k| async move { store.get(&k, Consistency::Strong).await.unwrap() };
        let acl = || async {
            query_all(
                store,
                Query::new(
                    keys::account_pk("acme"),
                    keys::ACL_PREFIX,
                    Consistency::Strong,
                ),
            )
            .await
            .unwrap()
        };
        match self {
            Change::CreateRole => get(keys::role("acme", "ops")).await.is_some(),
            Change::AddMember => get(keys::role_member("acme", "ops", "group:ops"))
                .await
                .is_some(),
            Change::CreateGrant => acl()
                .await
                .iter()
                .any(|i| i.key.sk.starts_with(keys::GRANT_PREFIX)),
            Change::DeleteRole => get(keys::role("acme", "ops")).await.is_none(),
            Change::PauseIntegration => get(keys::integration("acme", &env.integration))
                .await
                .is_some_and(|i| i.json::<Value>().unwrap()["paused"] == true),
            Change::UpdateOverlay => get(keys::overlay("acme", &env.overlay))
                .await
                .is_some_and(|i| i.json::<Value>().unwrap()["refresh_interval_secs"] == 900),
            Change::DeleteOverlay => get(keys::overlay("acme", &env.overlay)).await.is_none(),
            Change::UpdateCatalog => get(keys::catalog("acme", &env.catalog))
                .await
                .is_some_and(|i| i.json::<Value>().unwrap()["description"] == "changed"),
        }
    }
}

async fn of_type(env: &overlay_env::Env, kind: &str) -> usize {
    stored_account_events(env.dyn_store())
        .await
        .iter()
        .filter(|e| e["operation"]["type"] == kind)
        .count()
}

#[tokio::test]
async fn at_every_crash_point_an_account_change_has_its_event_exactly_when_it_applied() {
    for change in [
        Change::CreateRole,
        Change::AddMember,
        Change::CreateGrant,
        Change::DeleteRole,
        Change::PauseIntegration,
        Change::UpdateOverlay,
        Change::DeleteOverlay,
        Change::UpdateCatalog,
    ] {
        // How many transactions the change runs when nothing fails.
        let env = overlay_env::Env::new(overlay_env::fixture().await, json!([])).await;
        change.setup(&env).await;
        let base = env.faults().transacts();
        change.run(&env).await;
        assert!(change.applied(&env).await, "{change:?} applies");
        assert_eq!(of_type(&env, change.event_type()).await, 1, "{change:?}");
        let transacts = env.faults().transacts() - base;
        assert!(transacts > 0, "{change:?}");
        for point in crash_points(transacts) {
            let env = overlay_env::Env::new(overlay_env::fixture().await, json!([])).await;
            change.setup(&env).await;
            let base = env.faults().transacts();
            env.faults()
                .fail_transact(base + point.transact, point.fault);
            change.run(&env).await;
            let applied = change.applied(&env).await;
            let recorded = of_type(&env, change.event_type()).await;
            assert_eq!(
                recorded,
                usize::from(applied),
                "{change:?} at {point}: applied {applied}, {recorded} events"
            );
        }
    }
}

#[tokio::test]
async fn catalog_changes_are_account_events_seen_by_admins_and_not_by_another_account() {
    let h = Harness::redb();
    h.account("acme").await;
    ok(h.post(&format!("{A}/roles"), ACME, json!({"name": "ops"}))
        .await);
    // A catalog's life: created, updated, deleted (its own log goes with it; these stay).
    let c = h.catalog("acme", ACME, "pond").await;
    let catalog = format!("{A}/catalogs/{c}");
    ok(
        h.patch(&catalog, ACME, json!({"description": "fish"}), None)
            .await,
    );
    ok(h.delete(&catalog, ACME).await);
    let mine = feed(&h, ACME, "").await;
    let account = account_only(&mine);
    assert_eq!(
        types(&account),
        [
            "x-flotilla-role-created",
            "x-flotilla-catalog-created",
            "x-flotilla-catalog-updated",
            "x-flotilla-catalog-deleted",
        ]
    );
    assert_eq!(
        account[2]["operation"]["resource"],
        json!({"type": "catalog", "id": c, "name": "pond"})
    );
    assert_eq!(
        account[2]["operation"]["details"]["changed"],
        json!(["description"])
    );
    let operator = feed(&h, OPERATOR, "").await;
    assert_eq!(operator.len(), 4);
    let r = h.get(&format!("{A}/events"), support::BETA).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
