//! Access control beyond the route matrix (`shared/iceberg-rest/tests/access_matrix.rs`):
//! revocation on the next request on every host and its cost in store reads, invisible
//! objects answering exactly as absent ones, listings filled with visible items only, grants
//! following their securables (cascades, renames, the race with a delete), bad input, and
//! service principals' secrets and tokens.

mod support;

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_core::auth::{StaticTokens, TokenSigner};
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::{Consistency, DynMetastore, Metastore, Query, Transaction, query_all};
use serde_json::{Value, json};
use support::{Harness, Resp, ns, table_body};

const OPERATOR: &str = "acl-operator-token";
/// `acme`'s token naming no principal: ACCOUNT_ADMIN, as before access control.
const ADMIN: &str = "acl-admin-token-01";
const ANA: &str = "acl-ana-token-0001";
const BOB: &str = "acl-bob-token-0001";

fn tokens() -> StaticTokens {
    let mut t = StaticTokens::new();
    t.add(OPERATOR, true, vec![]);
    t.add(ADMIN, false, vec!["acme".into()]);
    t.add_named(ANA, vec!["acme".into()], "ana", vec!["analysts".into()]);
    t.add_named(BOB, vec!["acme".into()], "bob", vec![]);
    t
}

fn host(store: DynMetastore) -> Harness {
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(tokens()),
        Config::default(),
    )
    .with_token_signer(Arc::new(TokenSigner::new([9; 32])));
    Harness::over(state)
}

const A: &str = "/v1/accounts/acme";

/// Account `acme`, catalog `lake` with namespaces `sales`, `finance` and table
/// `sales.orders`; role `analysts` (member `group:analysts`). Answers the catalog id.
async fn fixture(h: &Harness) -> String {
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let c = h.catalog("acme", ADMIN, "lake").await;
    for n in ["sales", "finance"] {
        h.namespace("acme", ADMIN, &c, &[n]).await;
    }
    let r = h
        .post(
            &format!("{A}/catalogs/{c}/namespaces/sales/tables"),
            ADMIN,
            table_body("orders"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    ok(
        h.post(&format!("{A}/roles"), ADMIN, json!({"name": "analysts"}))
            .await,
    );
    ok(h.call(
        Method::PUT,
        &format!("{A}/roles/analysts/members/group:analysts"),
        Some(ADMIN),
        None,
        &[],
    )
    .await);
    c
}

fn ok(r: Resp) -> Resp {
    assert!(r.status.is_success(), "{} {:?}", r.status, r.body);
    r
}

async fn grant(h: &Harness, role: &str, privilege: &str, securable: Value) -> String {
    let r = ok(h
        .post(
            &format!("{A}/grants"),
            ADMIN,
            json!({"role": role, "privilege": privilege, "securable": securable}),
        )
        .await);
    r.body["id"].as_str().unwrap().to_owned()
}

fn ns_securable(c: &str, path: &[&str]) -> Value {
    json!({"type": "NAMESPACE", "catalog_id": c, "path": path})
}

fn redb() -> (DynMetastore, tempfile::TempDir) {
    support::redb_store()
}

#[tokio::test]
async fn a_revoke_is_in_force_on_the_next_request_on_every_host_for_one_point_read() {
    let dir = tempfile::tempdir().unwrap();
    let redb =
        flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("m.redb")).unwrap();
    let counting = Arc::new(CountingMetastore::new(redb));
    let counters = counting.counters();
    // Two hosts on one store: host 1 changes grants, host 2 serves the analyst.
    let h1 = host(counting.clone());
    let h2 = host(counting.clone());
    let c = fixture(&h1).await;
    let orders = format!("{A}/catalogs/{c}/namespaces/sales/tables/orders");
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::NOT_FOUND);
    let g = grant(&h1, "analysts", "READ", ns_securable(&c, &["sales"])).await;
    // Host 2 sees the grant on its next request (its cached view was validated and reloaded).
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::OK);
    // Warm and unchanged: the named principal costs one strong point read more than the
    // same request by a token naming no principal.
    let reads = |r: &flotilla_metastore::metrics::MetricsSnapshot,
                 s: &flotilla_metastore::metrics::MetricsSnapshot| {
        (s.get - r.get, s.requests() - r.requests())
    };
    let before = counters.snapshot();
    assert_eq!(h2.get(&orders, ADMIN).await.status, StatusCode::OK);
    let mid = counters.snapshot();
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::OK);
    let after = counters.snapshot();
    let (off_gets, off_requests) = reads(&before, &mid);
    let (on_gets, on_requests) = reads(&mid, &after);
    assert_eq!((on_gets - off_gets, on_requests - off_requests), (1, 1));
    // The revoke on host 1 refuses host 2's very next request.
    let r = h1.delete(&format!("{A}/grants/{g}"), ADMIN).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::NOT_FOUND);
    // Removing the analyst from the role does the same.
    grant(&h1, "analysts", "READ", ns_securable(&c, &["sales"])).await;
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::OK);
    let r = h1
        .delete(&format!("{A}/roles/analysts/members/group:analysts"), ADMIN)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(h2.get(&orders, ANA).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn what_a_principal_may_not_see_answers_exactly_as_if_absent() {
    let (store, _dir) = redb();
    let h = host(store);
    let c = fixture(&h).await;
    grant(&h, "analysts", "READ", ns_securable(&c, &["sales"])).await;
    // (existing but invisible, absent): the same status and body.
    let pairs = [
        (
            format!("{A}/catalogs/{c}/namespaces/finance"),
            format!("{A}/catalogs/{c}/namespaces/nosuch"),
        ),
        (
            format!("{A}/catalogs/{c}/namespaces/finance/tables"),
            format!("{A}/catalogs/{c}/namespaces/nosuch/tables"),
        ),
    ];
    for (hidden, absent) in &pairs {
        let (x, y) = (h.get(hidden, ANA).await, h.get(absent, ANA).await);
        assert_eq!(x.status, StatusCode::NOT_FOUND, "{hidden}: {:?}", x.body);
        let strip = |v: &Value, n: &str| v.to_string().replace(n, "N");
        assert_eq!(
            strip(&x.body, "finance"),
            strip(&y.body, "nosuch"),
            "{hidden} vs {absent}"
        );
    }
    // A whole catalog the principal cannot see: as a catalog that does not exist.
    let other = h.catalog("acme", ADMIN, "hidden").await;
    let x = h
        .get(
            &format!("{A}/catalogs/{other}/namespaces/sales/tables/orders"),
            ANA,
        )
        .await;
    let y = h
        .get(
            &format!("{A}/catalogs/nosuchcatalog/namespaces/sales/tables/orders"),
            ANA,
        )
        .await;
    assert_eq!((x.status, &x.body), (y.status, &y.body));
    assert_eq!(x.body["error"]["message"], "catalog not found");
    // A visible object it may not change: 403 naming what is needed.
    let r = h
        .delete(
            &format!("{A}/catalogs/{c}/namespaces/sales/tables/orders"),
            ANA,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    assert!(
        r.body["error"]["details"]["required"]
            .as_str()
            .unwrap()
            .contains("WRITE")
    );
    // Nothing changed.
    assert_eq!(
        h.get(
            &format!("{A}/catalogs/{c}/namespaces/sales/tables/orders"),
            ADMIN
        )
        .await
        .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn listings_hold_only_visible_items_and_pages_count_only_them() {
    let (store, _dir) = redb();
    let h = host(store);
    let c = fixture(&h).await;
    for n in ["a1", "a2", "a3", "b1", "b2"] {
        h.namespace("acme", ADMIN, &c, &[n]).await;
    }
    for n in ["a1", "b1", "b2"] {
        grant(&h, "analysts", "READ", ns_securable(&c, &[n])).await;
    }
    let mut seen = Vec::new();
    let mut url = format!("{A}/catalogs/{c}/namespaces?page_size=2");
    let mut sizes = Vec::new();
    loop {
        let r = ok(h.get(&url, ANA).await);
        let items = r.body["items"].as_array().unwrap();
        sizes.push(items.len());
        seen.extend(
            items
                .iter()
                .map(|i| i["path"][0].as_str().unwrap().to_owned()),
        );
        match r.body["next_page_token"].as_str() {
            Some(t) => url = format!("{A}/catalogs/{c}/namespaces?page_size=2&page_token={t}"),
            None => break,
        }
    }
    assert_eq!(seen, ["a1", "b1", "b2"]);
    assert_eq!(sizes, [2, 1], "full pages of visible items");
    // The catalog listing shows the one catalog it can see.
    h.catalog("acme", ADMIN, "hidden").await;
    let r = ok(h.get(&format!("{A}/catalogs"), ANA).await);
    let names: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["display_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lake"]);
}

async fn grant_ids(store: &dyn Metastore) -> Vec<Value> {
    query_all(
        store,
        Query::new(
            keys::account_pk("acme"),
            keys::GRANT_PREFIX,
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
async fn grants_follow_their_securables_renames_and_deletes() {
    let (store, _dir) = redb();
    let h = host(store.clone());
    let c = fixture(&h).await;
    let t = |path: &[&str], name: &str| json!({"type": "TABLE", "catalog_id": c, "path": path, "name": name});
    grant(&h, "analysts", "READ", t(&["sales"], "orders")).await;
    // A rename moves the grant with the table.
    let r = h
        .patch(
            &format!("{A}/catalogs/{c}/namespaces/sales/tables/orders"),
            ADMIN,
            json!({"name": "orders2", "namespace": ["finance"]}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let grants = grant_ids(store.as_ref()).await;
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0]["securable"], t(&["finance"], "orders2"));
    assert_eq!(
        h.get(
            &format!("{A}/catalogs/{c}/namespaces/finance/tables/orders2"),
            ANA
        )
        .await
        .status,
        StatusCode::OK
    );
    // A drop removes it.
    let r = h
        .delete(
            &format!("{A}/catalogs/{c}/namespaces/finance/tables/orders2"),
            ADMIN,
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(grant_ids(store.as_ref()).await.is_empty());
    // A table created again under the old name is not readable through a stale grant.
    ok(h.post(
        &format!("{A}/catalogs/{c}/namespaces/finance/tables"),
        ADMIN,
        table_body("orders2"),
    )
    .await);
    assert_eq!(
        h.get(
            &format!("{A}/catalogs/{c}/namespaces/finance/tables/orders2"),
            ANA
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    // Namespace and catalog deletes remove the grants naming them.
    h.namespace("acme", ADMIN, &c, &["empty"]).await;
    grant(&h, "analysts", "READ", ns_securable(&c, &["empty"])).await;
    let r = h
        .delete(&format!("{A}/catalogs/{c}/namespaces/empty"), ADMIN)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert!(grant_ids(store.as_ref()).await.is_empty());
    let bare = h.catalog("acme", ADMIN, "bare").await;
    grant(
        &h,
        "analysts",
        "MANAGE",
        json!({"type": "CATALOG", "catalog_id": bare}),
    )
    .await;
    assert_eq!(
        h.delete(&format!("{A}/catalogs/{bare}"), ADMIN)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert!(grant_ids(store.as_ref()).await.is_empty());
    // A role's deletion takes its grants and members with it.
    grant(
        &h,
        "analysts",
        "READ",
        json!({"type": "CATALOG", "catalog_id": c}),
    )
    .await;
    assert_eq!(
        h.delete(&format!("{A}/roles/analysts"), ADMIN).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(grant_ids(store.as_ref()).await.is_empty());
    let members = query_all(
        store.as_ref(),
        Query::new(
            keys::account_pk("acme"),
            keys::ROLE_MEMBER_PREFIX,
            Consistency::Strong,
        ),
    )
    .await
    .unwrap();
    assert!(members.is_empty());
}

/// A grant created after a delete read the account's grants fails the delete's transaction
/// (the generation moved), so the delete retries and removes it too.
#[tokio::test]
async fn a_grant_created_during_a_delete_fails_the_delete_transaction() {
    let (store, _dir) = redb();
    let h = host(store.clone());
    let c = fixture(&h).await;
    let securable = flotilla_core::acl::Securable::catalog(&c);
    // The delete's cascade, decided now...
    let ops = flotilla_core::acl::cascade_ops(store.as_ref(), &h.state.acl, "acme", &securable)
        .await
        .unwrap();
    // ... then a grant naming the catalog commits ...
    grant(
        &h,
        "analysts",
        "READ",
        json!({"type": "CATALOG", "catalog_id": c}),
    )
    .await;
    // ... and the delete's transaction (with its cascade) cannot commit.
    let mut tx = Transaction::new().with(flotilla_metastore::Op::check(
        keys::catalog("acme", &c),
        flotilla_metastore::Condition::Exists,
    ));
    for op in ops {
        tx.push(op);
    }
    let e = store.transact(tx).await.expect_err("the generation moved");
    assert!(flotilla_core::service::is_condition_failure(&e), "{e}");
}

#[tokio::test]
async fn bad_grants_are_refused_and_change_nothing() {
    let (store, _dir) = redb();
    let h = host(store.clone());
    let c = fixture(&h).await;
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "beta"}))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let beta_catalog = h.catalog("beta", OPERATOR, "theirs").await;
    let cases: Vec<(&str, Value, StatusCode)> = vec![
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "OWN", "securable": {"type": "ACCOUNT"}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "USE", "securable": {"type": "CATALOG", "catalog_id": c}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "ACCOUNT_ADMIN", "securable": {"type": "CATALOG", "catalog_id": c}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "READ", "securable": {"type": "CATALOG", "catalog_id": beta_catalog}}),
            StatusCode::NOT_FOUND,
        ),
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "READ", "securable": {"type": "NAMESPACE", "catalog_id": c, "path": ["nosuch"]}}),
            StatusCode::NOT_FOUND,
        ),
        (
            ADMIN,
            json!({"role": "nosuchrole", "privilege": "READ", "securable": {"type": "CATALOG", "catalog_id": c}}),
            StatusCode::NOT_FOUND,
        ),
        (
            ADMIN,
            json!({"role": "analysts", "privilege": "READ", "securable": {"type": "SCHEMA", "catalog_id": c}}),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (token, body, status) in cases {
        let r = h.post(&format!("{A}/grants"), token, body.clone()).await;
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
    }
    // A MANAGE holder may grant on what it manages, but not an account privilege and not to a
    // role it belongs to (self-escalation); nor on what it does not manage.
    grant(&h, "analysts", "MANAGE", ns_securable(&c, &["sales"])).await;
    ok(
        h.post(&format!("{A}/roles"), ADMIN, json!({"name": "others"}))
            .await,
    );
    let by_ana = |body: Value| {
        let h = &h;
        async move { h.post(&format!("{A}/grants"), ANA, body).await }
    };
    let r = by_ana(json!({"role": "analysts", "privilege": "WRITE", "securable": ns_securable(&c, &["sales"])})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = by_ana(
        json!({"role": "others", "privilege": "ACCOUNT_ADMIN", "securable": {"type": "ACCOUNT"}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{:?}", r.body);
    let r = by_ana(
        json!({"role": "others", "privilege": "READ", "securable": ns_securable(&c, &["finance"])}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
    let before = grant_ids(store.as_ref()).await.len();
    let r = by_ana(
        json!({"role": "others", "privilege": "READ", "securable": ns_securable(&c, &["sales"])}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(grant_ids(store.as_ref()).await.len(), before + 1);
    // Principals and roles are the admin's.
    let r = h
        .post(&format!("{A}/roles"), ANA, json!({"name": "mine"}))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A duplicate names the grant it duplicates.
    let r = h.post(&format!("{A}/grants"), ADMIN, json!({"role": "others", "privilege": "READ", "securable": ns_securable(&c, &["sales"])})).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(r.body["error"]["details"]["grant_id"].is_string());
}

#[tokio::test]
async fn service_principal_secrets_are_shown_once_hashed_and_rotated_atomically() {
    let (store, _dir) = redb();
    let h = host(store.clone());
    let c = fixture(&h).await;
    let r = h
        .call(
            Method::POST,
            &format!("{A}/principals"),
            Some(ADMIN),
            Some(json!({"name": "etl"})),
            &[("idempotency-key", "k1")],
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let (id, client_id) = (
        r.body["id"].as_str().unwrap().to_owned(),
        r.body["client_id"].as_str().unwrap().to_owned(),
    );
    let secret = r.body["client_secret"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 40);
    // A replay answers the recorded response without the secret.
    let replay = h
        .call(
            Method::POST,
            &format!("{A}/principals"),
            Some(ADMIN),
            Some(json!({"name": "etl"})),
            &[("idempotency-key", "k1")],
        )
        .await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.body["id"], json!(id));
    assert!(replay.body["client_secret"].is_null());
    // Never in a read, never in the store.
    let got = ok(h.get(&format!("{A}/principals/{id}"), ADMIN).await);
    assert!(got.body.get("client_secret").is_none() && !got.body.to_string().contains(&secret));
    for pk in [keys::account_pk("acme"), keys::SYSTEM_PK.to_owned()] {
        for item in query_all(store.as_ref(), Query::new(pk, "", Consistency::Strong))
            .await
            .unwrap()
        {
            assert!(
                !String::from_utf8_lossy(&item.body).contains(&secret),
                "the secret is stored in {:?}",
                item.key
            );
        }
    }
    // The exchange: form or HTTP Basic.
    let exchange = |id: &str, secret: &str| {
        let body = format!("grant_type=client_credentials&client_id={id}&client_secret={secret}");
        let req = axum::http::Request::builder()
            .method("POST")
            .uri("/v1/oauth/tokens")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .unwrap();
        h.send(req)
    };
    let r = exchange(&client_id, &secret).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.body["expires_in"].as_i64().unwrap() <= 3600);
    let token = r.body["access_token"].as_str().unwrap().to_owned();
    let wrong = exchange(&client_id, "not-the-secret").await;
    let unknown = exchange("acme.0000", &secret).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!((wrong.status, &wrong.body), (unknown.status, &unknown.body));
    // The token names the principal; its grants decide.
    let me = ok(h.get("/v1/whoami", &token).await);
    assert_eq!(me.body["principal"], "etl");
    let orders = format!("{A}/catalogs/{c}/namespaces/sales/tables/orders");
    assert_eq!(h.get(&orders, &token).await.status, StatusCode::NOT_FOUND);
    ok(h.call(
        Method::PUT,
        &format!("{A}/roles/analysts/members/etl"),
        Some(ADMIN),
        None,
        &[],
    )
    .await);
    grant(&h, "analysts", "READ", ns_securable(&c, &["sales"])).await;
    assert_eq!(h.get(&orders, &token).await.status, StatusCode::OK);
    // Rotation: the old secret and the token issued from it stop working at once.
    let rotated = ok(h
        .post(&format!("{A}/principals/{id}/rotate"), ADMIN, json!({}))
        .await);
    let new_secret = rotated.body["client_secret"].as_str().unwrap().to_owned();
    assert_eq!(
        h.get(&orders, &token).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        exchange(&client_id, &secret).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = exchange(&client_id, &new_secret).await;
    let token2 = r.body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(h.get(&orders, &token2).await.status, StatusCode::OK);
    // Deletion: its memberships go and its tokens stop working.
    assert_eq!(
        h.delete(&format!("{A}/principals/{id}"), ADMIN)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.get(&orders, &token2).await.status,
        StatusCode::UNAUTHORIZED
    );
    let role = ok(h.get(&format!("{A}/roles/analysts"), ADMIN).await);
    assert_eq!(role.body["members"], json!(["group:analysts"]));
}

#[tokio::test]
async fn the_explain_route_names_the_grants_privileges_come_from() {
    let (store, _dir) = redb();
    let h = host(store);
    let c = fixture(&h).await;
    let g = grant(&h, "analysts", "WRITE", ns_securable(&c, &["sales"])).await;
    let r = ok(h
        .get(
            &format!(
                "{A}/privileges?securable_type=TABLE&catalog_id={c}&path={}&name=orders",
                ns(&["sales"])
            ),
            ANA,
        )
        .await);
    assert_eq!(r.body["principal"], "ana");
    assert_eq!(r.body["roles"], json!(["analysts"]));
    let privileges: Vec<(&str, &str)> = r.body["privileges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["privilege"].as_str().unwrap(),
                p["grant"]["id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(privileges, [("READ", g.as_str()), ("WRITE", g.as_str())]);
    // Where it sees nothing: as absent.
    let r = h
        .get(
            &format!("{A}/privileges?securable_type=NAMESPACE&catalog_id={c}&path=finance"),
            ANA,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A token naming no principal holds everything, as before.
    let r = ok(h.get(&format!("{A}/privileges"), ADMIN).await);
    assert_eq!(r.body["account_admin"], true);
    let r = h
        .get(
            &format!("{A}/privileges?securable_type=TABLE&catalog_id={c}"),
            ANA,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    let _ = BOB;
}
