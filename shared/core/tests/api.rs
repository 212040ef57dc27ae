//! The API contract, in-process through the real router, on both metastore backends.

mod support;
use support::both_backends;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::*;

both_backends!(
    health_needs_no_auth_and_everything_else_does,
    accounts_are_operator_only_and_take_caller_ids,
    catalog_crud_with_etags_and_if_match,
    catalog_names_are_unique_and_conflict_modes_work,
    idempotent_create_replays_and_detects_reuse,
    pagination_is_complete_and_tokens_are_bound,
    namespaces_nest_and_delete_only_when_empty,
    tables_and_views_share_a_name_slot,
    rename_and_move_keep_the_id,
    catalog_delete_refused_while_not_empty,
    account_delete_fences_and_cleans_up,
    cross_account_access_is_denied,
    bad_input_changes_nothing,
);

async fn health_needs_no_auth_and_everything_else_does(h: Harness) {
    let r = h.call(Method::GET, "/v1/health", None, None, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h.call(Method::GET, "/v1/accounts", None, None, &[]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.code(), "UNAUTHENTICATED");
    let r = h.get("/v1/accounts", "wrong-token-xyz").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = h.get("/v1/no/such/route", OPERATOR).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.code(), "NOT_FOUND");
    let r = h
        .call(Method::PUT, "/v1/accounts", Some(OPERATOR), None, &[])
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

async fn accounts_are_operator_only_and_take_caller_ids(h: Harness) {
    let r = h.post("/v1/accounts", ACME, json!({"id": "acme"})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    h.account("acme").await;
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "acme"}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.code(), "ALREADY_EXISTS");
    let r = h
        .post(
            "/v1/accounts?on_conflict=return_existing",
            OPERATOR,
            json!({"id": "acme"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["id"], "acme");
    let r = h
        .post("/v1/accounts", OPERATOR, json!({"id": "Bad_Id"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h.post("/v1/accounts", OPERATOR, json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let generated = r.body["id"].as_str().unwrap().to_owned();
    let r = h.get("/v1/accounts", OPERATOR).await;
    let ids: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"acme") && ids.contains(&generated.as_str()));
    let r = h.get("/v1/accounts/acme", ACME).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h.get("/v1/accounts", ACME).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

async fn catalog_crud_with_etags_and_if_match(h: Harness) {
    h.account("acme").await;
    let r = h
        .post(
            "/v1/accounts/acme/catalogs",
            ACME,
            json!({"display_name": "analytics", "properties": {"k": "v"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let etag1 = r.etag();
    assert_eq!(etag1, r.body["etag"].as_str().unwrap());
    let path = format!("/v1/accounts/acme/catalogs/{id}");
    let r = h.get(&path, ACME).await;
    assert_eq!(r.body["display_name"], "analytics");
    assert_eq!(r.etag(), etag1);
    let r = h
        .patch(&path, ACME, json!({"description": "d"}), Some(&etag1))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let etag2 = r.etag();
    assert_ne!(etag1, etag2);
    // A stale etag is 412 and changes nothing.
    let r = h
        .patch(&path, ACME, json!({"description": "stale"}), Some(&etag1))
        .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(r.code(), "PRECONDITION_FAILED");
    assert_eq!(h.get(&path, ACME).await.body["description"], "d");
    let r = h
        .call(
            Method::DELETE,
            &path,
            Some(ACME),
            None,
            &[("if-match", &etag1)],
        )
        .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    let r = h
        .call(
            Method::DELETE,
            &path,
            Some(ACME),
            None,
            &[("if-match", &etag2)],
        )
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(h.get(&path, ACME).await.status, StatusCode::NOT_FOUND);
}

async fn catalog_names_are_unique_and_conflict_modes_work(h: Harness) {
    h.account("acme").await;
    let first = h.catalog("acme", ACME, "analytics").await;
    let r = h
        .post(
            "/v1/accounts/acme/catalogs",
            ACME,
            json!({"display_name": "analytics"}),
        )
        .await;
    assert_eq!(r.code(), "ALREADY_EXISTS");
    let r = h
        .post(
            "/v1/accounts/acme/catalogs?on_conflict=return_existing",
            ACME,
            json!({"display_name": "analytics"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["id"], first.as_str());
    let r = h
        .post(
            "/v1/accounts/acme/catalogs?on_conflict=replace",
            ACME,
            json!({"display_name": "analytics"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let second = r.body["id"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    assert_eq!(
        h.get(&format!("/v1/accounts/acme/catalogs/{first}"), ACME)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Replace refuses a catalog that is not empty, and changes nothing.
    h.namespace("acme", ACME, &second, &["crm"]).await;
    let r = h
        .post(
            "/v1/accounts/acme/catalogs?on_conflict=replace",
            ACME,
            json!({"display_name": "analytics"}),
        )
        .await;
    assert_eq!(r.code(), "HAS_DEPENDENTS");
    assert_eq!(
        h.get(&format!("/v1/accounts/acme/catalogs/{second}"), ACME)
            .await
            .status,
        StatusCode::OK
    );
    // The guard of the refused replace is gone: namespaces can still be created.
    h.namespace("acme", ACME, &second, &["sales"]).await;
    // Replace with an idempotency key is refused.
    let r = h
        .call(
            Method::POST,
            "/v1/accounts/acme/catalogs?on_conflict=replace",
            Some(ACME),
            Some(json!({"display_name": "x"})),
            &[("idempotency-key", "k1")],
        )
        .await;
    assert_eq!(r.code(), "IDEMPOTENCY_KEY_NOT_ALLOWED");
    // Rename frees the old name and takes the new one.
    let r = h
        .patch(
            &format!("/v1/accounts/acme/catalogs/{second}"),
            ACME,
            json!({"display_name": "renamed"}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["id"], second.as_str());
    let again = h.catalog("acme", ACME, "analytics").await;
    let r = h
        .patch(
            &format!("/v1/accounts/acme/catalogs/{again}"),
            ACME,
            json!({"display_name": "renamed"}),
            None,
        )
        .await;
    assert_eq!(r.code(), "ALREADY_EXISTS");
}

async fn idempotent_create_replays_and_detects_reuse(h: Harness) {
    h.account("acme").await;
    let hdr = [("idempotency-key", "create-analytics-1")];
    let body = json!({"display_name": "analytics"});
    let a = h
        .call(
            Method::POST,
            "/v1/accounts/acme/catalogs",
            Some(ACME),
            Some(body.clone()),
            &hdr,
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    // Even after the catalog changed, the replay answers the recorded response.
    let id = a.body["id"].as_str().unwrap();
    h.patch(
        &format!("/v1/accounts/acme/catalogs/{id}"),
        ACME,
        json!({"description": "later"}),
        None,
    )
    .await;
    let b = h
        .call(
            Method::POST,
            "/v1/accounts/acme/catalogs",
            Some(ACME),
            Some(body.clone()),
            &hdr,
        )
        .await;
    assert_eq!(b.status, StatusCode::CREATED);
    assert_eq!(a.body, b.body);
    let c = h
        .call(
            Method::POST,
            "/v1/accounts/acme/catalogs",
            Some(ACME),
            Some(json!({"display_name": "other"})),
            &hdr,
        )
        .await;
    assert_eq!(c.status, StatusCode::CONFLICT);
    assert_eq!(c.code(), "IDEMPOTENCY_KEY_REUSED");
    let list = h.get("/v1/accounts/acme/catalogs", ACME).await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
}

async fn pagination_is_complete_and_tokens_are_bound(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    for i in 0..7 {
        h.namespace("acme", ACME, &cat, &[&format!("ns{i}")]).await;
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut path = format!("/v1/accounts/acme/catalogs/{cat}/namespaces?page_size=3");
        if let Some(t) = &token {
            path.push_str(&format!("&page_token={t}"));
        }
        let r = h.get(&path, ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        for i in r.body["items"].as_array().unwrap() {
            seen.push(i["path"][0].as_str().unwrap().to_owned());
        }
        match r.body["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 7);
    assert_eq!(seen.len(), 7);
    // A token from another listing is refused.
    let r = h
        .get(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces?page_size=3"),
            ACME,
        )
        .await;
    let t = r.body["next_page_token"].as_str().unwrap().to_owned();
    let r = h
        .get(&format!("/v1/accounts/acme/catalogs?page_token={t}"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h
        .get("/v1/accounts/acme/catalogs?page_token=garbage!!", ACME)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h.get("/v1/accounts/acme/catalogs?page_size=0", ACME).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h
        .get("/v1/accounts/acme/catalogs?page_size=1001", ACME)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // The documented maximum works (the store's own page limit is never exceeded).
    let r = h
        .get(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces?page_size=1000"),
            ACME,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["items"].as_array().unwrap().len(), 7);
    assert!(r.body["next_page_token"].is_null());
}

async fn namespaces_nest_and_delete_only_when_empty(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    let base = format!("/v1/accounts/acme/catalogs/{cat}/namespaces");
    // A child needs its parent.
    let r = h.post(&base, ACME, json!({"path": ["sales", "eu"]})).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    h.namespace("acme", ACME, &cat, &["sales"]).await;
    h.namespace("acme", ACME, &cat, &["sales", "eu"]).await;
    h.namespace("acme", ACME, &cat, &["sales", "eu.west"]).await;
    let r = h.get(&format!("{base}?parent=sales"), ACME).await;
    let children: Vec<Value> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].clone())
        .collect();
    assert_eq!(
        children,
        vec![json!(["sales", "eu"]), json!(["sales", "eu.west"])]
    );
    let r = h
        .get(&format!("{base}/{}", ns(&["sales", "eu.west"])), ACME)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["path"], json!(["sales", "eu.west"]));
    let r = h.delete(&format!("{base}/sales"), ACME).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.code(), "HAS_DEPENDENTS");
    // The refused delete left no guard behind.
    h.namespace("acme", ACME, &cat, &["sales", "us"]).await;
    for leaf in ["eu", "eu.west", "us"] {
        let r = h
            .delete(&format!("{base}/{}", ns(&["sales", leaf])), ACME)
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
    }
    assert_eq!(
        h.delete(&format!("{base}/sales"), ACME).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.get(&format!("{base}/sales"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
}

async fn tables_and_views_share_a_name_slot(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    h.namespace("acme", ACME, &cat, &["crm"]).await;
    let base = format!("/v1/accounts/acme/catalogs/{cat}/namespaces/crm");
    let r = h
        .post(&format!("{base}/tables"), ACME, table_body("orders"))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["format"], "ICEBERG");
    assert!(r.body["managed_by"].is_null());
    let view = json!({"name": "orders", "schema": schema(), "definitions": [{"dialect": "spark", "sql": "select 1"}]});
    let r = h.post(&format!("{base}/views"), ACME, view).await;
    assert_eq!(r.code(), "ALREADY_EXISTS");
    let view = json!({"name": "v1", "schema": schema(), "definitions": [{"dialect": "spark", "sql": "select 1"}], "default_namespace": ["crm"]});
    assert_eq!(
        h.post(&format!("{base}/views"), ACME, view).await.status,
        StatusCode::CREATED
    );
    let tables = h.get(&format!("{base}/tables"), ACME).await;
    assert_eq!(tables.body["items"].as_array().unwrap().len(), 1);
    let views = h.get(&format!("{base}/views"), ACME).await;
    assert_eq!(views.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        h.get(&format!("{base}/views/orders"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.get(&format!("{base}/tables/v1"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.delete(&format!("{base}/views/v1"), ACME).await.status,
        StatusCode::NO_CONTENT
    );
    // NFC and NFD spellings are different names.
    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    assert_eq!(
        h.post(&format!("{base}/tables"), ACME, table_body(nfc))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        h.post(&format!("{base}/tables"), ACME, table_body(nfd))
            .await
            .status,
        StatusCode::CREATED
    );
    let r = h
        .get(&format!("{base}/tables/{}", urlencode(nfd)), ACME)
        .await;
    assert_eq!(r.body["name"], nfd);
}

async fn rename_and_move_keep_the_id(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    h.namespace("acme", ACME, &cat, &["a"]).await;
    h.namespace("acme", ACME, &cat, &["b"]).await;
    let base = format!("/v1/accounts/acme/catalogs/{cat}/namespaces");
    let r = h
        .post(&format!("{base}/a/tables"), ACME, table_body("t"))
        .await;
    let id = r.body["id"].clone();
    let etag = r.etag();
    let r = h
        .patch(
            &format!("{base}/a/tables/t"),
            ACME,
            json!({"name": "t2", "namespace": ["b"]}),
            Some(&etag),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["id"], id);
    assert_eq!(
        h.get(&format!("{base}/a/tables/t"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
    let moved = h.get(&format!("{base}/b/tables/t2"), ACME).await;
    assert_eq!(moved.body["id"], id);
    // The etag taken before the move does not match the moved table.
    let r = h
        .patch(
            &format!("{base}/b/tables/t2"),
            ACME,
            json!({"properties": {"x": "1"}}),
            Some(&etag),
        )
        .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    // Moving into a missing namespace fails and changes nothing.
    let r = h
        .patch(
            &format!("{base}/b/tables/t2"),
            ACME,
            json!({"namespace": ["zzz"]}),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        h.get(&format!("{base}/b/tables/t2"), ACME).await.status,
        StatusCode::OK
    );
}

async fn catalog_delete_refused_while_not_empty(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    h.namespace("acme", ACME, &cat, &["a"]).await;
    let r = h
        .delete(&format!("/v1/accounts/acme/catalogs/{cat}"), ACME)
        .await;
    assert_eq!(r.code(), "HAS_DEPENDENTS");
    assert_eq!(r.body["error"]["details"]["namespaces"], 1);
    h.namespace("acme", ACME, &cat, &["b"]).await;
    assert_eq!(
        h.delete(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a"),
            ACME
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.delete(
            &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/b"),
            ACME
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.delete(&format!("/v1/accounts/acme/catalogs/{cat}"), ACME)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
}

async fn account_delete_fences_and_cleans_up(h: Harness) {
    h.account("acme").await;
    let cat = h.catalog("acme", ACME, "c").await;
    h.namespace("acme", ACME, &cat, &["a"]).await;
    h.post(
        &format!("/v1/accounts/acme/catalogs/{cat}/namespaces/a/tables"),
        ACME,
        table_body("t"),
    )
    .await;
    assert_eq!(
        h.delete("/v1/accounts/acme", ACME).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        h.delete("/v1/accounts/acme", OPERATOR).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.get("/v1/accounts/acme", OPERATOR).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        h.delete("/v1/accounts/acme", OPERATOR).await.status,
        StatusCode::NOT_FOUND
    );
    // Nothing is left in the account's or the catalog's partitions.
    let store = h.state.store.as_ref();
    for pk in ["ACCT#acme".to_string(), format!("CAT#{cat}")] {
        let n = store
            .count(&pk, "", flotilla_metastore::Consistency::Strong)
            .await
            .unwrap();
        assert_eq!(n, 0, "partition {pk} still holds {n} items");
    }
    // The id can be used again once cleanup completed.
    h.account("acme").await;
    assert_eq!(
        h.get("/v1/accounts/acme/catalogs", ACME).await.body["items"],
        json!([])
    );
}

async fn cross_account_access_is_denied(h: Harness) {
    h.account("acme").await;
    h.account("beta").await;
    let cat = h.catalog("acme", ACME, "secret-catalog").await;
    for path in [
        "/v1/accounts/acme".to_string(),
        "/v1/accounts/acme/catalogs".to_string(),
        format!("/v1/accounts/acme/catalogs/{cat}"),
        format!("/v1/accounts/acme/catalogs/{cat}/namespaces"),
    ] {
        let r = h.get(&path, BETA).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
        assert!(!r.body.to_string().contains("secret-catalog"));
    }
    let r = h
        .post(
            "/v1/accounts/acme/catalogs",
            BETA,
            json!({"display_name": "x"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Beta's own listing does not show acme's catalog under any id.
    let r = h
        .get(&format!("/v1/accounts/beta/catalogs/{cat}"), BETA)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

async fn bad_input_changes_nothing(h: Harness) {
    h.account("acme").await;
    let base = "/v1/accounts/acme/catalogs";
    let cases: Vec<(Value, &str)> = vec![
        (json!({"display_name": ""}), "empty name"),
        (json!({"display_name": "a\u{0007}b"}), "control char"),
        (json!({"display_name": "abc\u{202e}fdp"}), "bidi override"),
        (json!({"display_name": "x".repeat(256)}), "too long"),
        (json!({"display_name": "ok", "unknown": 1}), "unknown field"),
        (json!({"display_name": 5}), "wrong type"),
    ];
    for (body, why) in cases {
        let r = h.post(base, ACME, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{why}: {:?}", r.body);
        assert_eq!(r.code(), "INVALID_ARGUMENT", "{why}");
    }
    let r = h
        .call(
            Method::POST,
            base,
            Some(ACME),
            None,
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = json!({"display_name": "x", "description": "y".repeat(1024 * 1024 + 10)});
    let r = h.post(base, ACME, big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let req = axum::http::Request::builder()
        .method(Method::POST)
        .uri(base)
        .header("authorization", format!("Bearer {ACME}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(deep))
        .unwrap();
    assert_eq!(h.send(req).await.status, StatusCode::BAD_REQUEST);
    let r = h
        .post(
            base,
            ACME,
            json!({"display_name": "ok", "properties": {"k": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let cat = h.catalog("acme", ACME, "c").await;
    let r = h
        .post(
            &format!("{base}/{cat}/namespaces"),
            ACME,
            json!({"path": ["a", ""]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h
        .get(&format!("{base}/{cat}/namespaces/a%1F%1Fb"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    h.namespace("acme", ACME, &cat, &["n"]).await;
    let bad_schema = json!({"name": "t", "schema": {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int"}, {"id": 2, "name": "a", "type": "int"}]}, "format": "ICEBERG"});
    let r = h
        .post(
            &format!("{base}/{cat}/namespaces/n/tables"),
            ACME,
            bad_schema,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h
        .post(
            &format!("{base}/{cat}/namespaces/n/tables"),
            ACME,
            json!({"name": "t", "schema": schema(), "format": "NOPE"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Nothing was created by any of it.
    let list = h.get(base, ACME).await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
    let tables = h
        .get(&format!("{base}/{cat}/namespaces/n/tables"), ACME)
        .await;
    assert_eq!(tables.body["items"], json!([]));
}
