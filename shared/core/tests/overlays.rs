//! CatalogOverlay ("Resource and ownership model", "Catalog overlay", "Namespace
//! selection", overlay rows of "Lifecycle and garbage collection"): selection through the
//! API, bindings and dependencies, contribution-scoped delete, races and crash points.
//!
//! Materialized content (managed relations, claims, overlay-created namespaces) is written
//! straight into the metastore here: reconciliation is tested on its own.

mod support;
use support::both_backends;

use std::sync::Arc;

use axum::http::StatusCode;
use flotilla_domain::model::OverlayRecord;
use flotilla_metastore::fault::{FaultInjectingMetastore, crash_points};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{DynMetastore, Metastore};
use serde_json::{Value, json};
use support::*;

const OVLS: &str = "/v1/accounts/acme/overlays";

both_backends!(redb: (Harness::redb(), 40), dynamo: (Harness::dynamo().await, 8);
    selection_is_normalized_through_the_api,
    selection_patch_advances_generation_and_bindings_are_immutable,
    display_names_are_unique_and_reserve_no_catalog_name,
    renames_keep_bindings_and_listing_filters_by_integration,
    catalog_referenced_by_an_overlay_cannot_be_deleted_even_empty,
    create_verifies_both_bindings,
    overlay_delete_removes_only_its_contributions,
    replace_retires_previous_contributions_and_makes_a_new_identity,
    overlay_create_racing_integration_delete_never_orphans,
    overlay_create_racing_catalog_delete_never_orphans,
    overlay_create_racing_integration_replace_never_orphans,
);

fn ovl(id: &str) -> String {
    format!("{OVLS}/{id}")
}

struct Setup {
    h: Harness,
    _creds: Creds,
    integration: String,
    catalog: String,
}

async fn setup(h: Harness) -> Setup {
    let creds = Creds::new();
    let h = h.with_credentials(creds.dyn_store());
    h.account("acme").await;
    let integration = h.integration("acme", ACME, "prod").await;
    let catalog = h.catalog("acme", ACME, "analytics").await;
    Setup {
        h,
        _creds: creds,
        integration,
        catalog,
    }
}

fn body(name: &str, integration: &str, catalog: &str, include: Value, exclude: Value) -> Value {
    json!({"display_name": name, "integration_id": integration, "catalog_id": catalog,
           "include_namespaces": include, "exclude_namespaces": exclude})
}

async fn selection_is_normalized_through_the_api(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let cases = [
        // Subsumed includes collapse, duplicates go, order is canonical.
        (
            json!([["crm"], ["crm", "eu"], ["sales", "eu"], ["crm"]]),
            json!([]),
            json!([["crm"], ["sales", "eu"]]),
            json!([]),
        ),
        // An exclude outside every include is dropped; one inside is kept, subsumed ones collapse.
        (
            json!([["crm"]]),
            json!([["crm", "tmp"], ["crm", "tmp", "x"], ["hr"]]),
            json!([["crm"]]),
            json!([["crm", "tmp"]]),
        ),
        // Empty include selects everything: every exclude is meaningful.
        (
            json!([]),
            json!([["tmp"], ["a", "b"]]),
            json!([]),
            json!([["a", "b"], ["tmp"]]),
        ),
        // Segment boundaries are not flattened, and case matters.
        (
            json!([["a.b"], ["a", "b"], ["CRM"], ["crm"]]),
            json!([]),
            json!([["CRM"], ["a", "b"], ["a.b"], ["crm"]]),
            json!([]),
        ),
        // Exclude wins: an include inside an exclude selects nothing and goes.
        (
            json!([["crm"], ["hr", "x"]]),
            json!([["hr"]]),
            json!([["crm"]]),
            json!([]),
        ),
    ];
    for (n, (inc, exc, want_inc, want_exc)) in cases.into_iter().enumerate() {
        let r = h
            .post(
                OVLS,
                ACME,
                body(&format!("o{n}"), i, c, inc.clone(), exc.clone()),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{inc} {exc}: {:?}", r.body);
        assert_eq!(r.body["include_namespaces"], want_inc, "{inc} {exc}");
        assert_eq!(r.body["exclude_namespaces"], want_exc, "{inc} {exc}");
        assert_eq!(r.body["generation"], 1);
        assert_eq!(
            h.get(&ovl(r.body["id"].as_str().unwrap()), ACME).await.body["include_namespaces"],
            want_inc
        );
    }
    for bad in [
        json!([[]]),
        json!([[""]]),
        json!([["a\u{1f}b"]]),
        json!([["ok", "bad\u{0}"]]),
        json!("crm"),
    ] {
        let r = h
            .post(OVLS, ACME, body("bad", i, c, bad.clone(), json!([])))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {:?}", r.body);
    }
}

async fn selection_patch_advances_generation_and_bindings_are_immutable(
    h: Harness,
    _rounds: usize,
) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let r = h
        .post(OVLS, ACME, body("o", i, c, json!([["crm"]]), json!([])))
        .await;
    let id = r.body["id"].as_str().unwrap().to_owned();
    let etag = r.etag();
    let r = h
        .patch(
            &ovl(&id),
            ACME,
            json!({"include_namespaces": [["hr"]]}),
            Some("\"stale\""),
        )
        .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    let r = h.patch(&ovl(&id), ACME, json!({"include_namespaces": [["hr"], ["hr", "x"]], "exclude_namespaces": [["hr", "tmp"]]}), Some(&etag)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["include_namespaces"], json!([["hr"]]));
    assert_eq!(r.body["exclude_namespaces"], json!([["hr", "tmp"]]));
    assert_eq!(r.body["generation"], 2);
    // Only exclude: include kept; the normalization still applies to the pair.
    let r = h
        .patch(
            &ovl(&id),
            ACME,
            json!({"exclude_namespaces": [["elsewhere"]]}),
            Some(&r.etag()),
        )
        .await;
    assert_eq!(r.body["include_namespaces"], json!([["hr"]]));
    assert_eq!(r.body["exclude_namespaces"], json!([]));
    assert_eq!(r.body["generation"], 3);
    // A rename fences nothing.
    let r = h
        .patch(&ovl(&id), ACME, json!({"display_name": "o2"}), None)
        .await;
    assert_eq!(r.body["generation"], 3);
    let before = h.get(&ovl(&id), ACME).await.body;
    let other_cat = h.catalog("acme", ACME, "other").await;
    let other_int = h.integration("acme", ACME, "other").await;
    for patch in [
        json!({"catalog_id": other_cat}),
        json!({"integration_id": other_int}),
        json!({"integration_id": i}),
    ] {
        let r = h.patch(&ovl(&id), ACME, patch.clone(), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{patch}");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("immutable")
        );
    }
    let r = h
        .patch(&ovl(&id), ACME, json!({"include_namespaces": [[""]]}), None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(h.get(&ovl(&id), ACME).await.body, before);
}

async fn display_names_are_unique_and_reserve_no_catalog_name(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    // An overlay may share its name with its catalog and its integration.
    let a = h.overlay("acme", ACME, "analytics", i, c).await;
    let b = h.overlay("acme", ACME, "prod", i, c).await;
    let r = h
        .post(OVLS, ACME, body("analytics", i, c, json!([]), json!([])))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "ALREADY_EXISTS")
    );
    let r = h
        .post(
            &format!("{OVLS}?on_conflict=return_existing"),
            ACME,
            body("analytics", i, c, json!([["x"]]), json!([])),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["id"], a.as_str());
    // A catalog can still take an overlay's name (overlays reserve no catalog names).
    h.catalog("acme", ACME, "prod").await;
    let r = h
        .patch(&ovl(&b), ACME, json!({"display_name": "analytics"}), None)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "ALREADY_EXISTS")
    );
    let r = h
        .patch(&ovl(&a), ACME, json!({"display_name": "renamed"}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h
        .patch(&ovl(&b), ACME, json!({"display_name": "analytics"}), None)
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the old name is free: {:?}",
        r.body
    );
}

async fn renames_keep_bindings_and_listing_filters_by_integration(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let j = h.integration("acme", ACME, "finance").await;
    let o1 = h.overlay("acme", ACME, "crm-import", i, c).await;
    let o2 = h.overlay("acme", ACME, "finance-import", &j, c).await;
    let o3 = h.overlay("acme", ACME, "crm-import-2", i, c).await;
    assert_eq!(
        h.patch(
            &format!("/v1/accounts/acme/integrations/{i}"),
            ACME,
            json!({"display_name": "prod-glue"}),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        h.patch(
            &format!("/v1/accounts/acme/catalogs/{c}"),
            ACME,
            json!({"display_name": "lake"}),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_eq!(
        h.patch(&ovl(&o1), ACME, json!({"display_name": "crm"}), None)
            .await
            .status,
        StatusCode::OK
    );
    let r = h.get(&ovl(&o1), ACME).await;
    assert_eq!(
        (
            r.body["integration_id"].as_str(),
            r.body["catalog_id"].as_str()
        ),
        (Some(i.as_str()), Some(c.as_str()))
    );
    assert_eq!(
        h.get(&format!("/v1/accounts/acme/catalogs/{c}"), ACME)
            .await
            .body["display_name"],
        "lake",
        "renaming an overlay renames no catalog"
    );
    let ids = |r: &Resp| {
        let mut v: Vec<String> = r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    let mut want = vec![o1.clone(), o3.clone()];
    want.sort();
    assert_eq!(
        ids(&h.get(&format!("{OVLS}?integration_id={i}"), ACME).await),
        want
    );
    assert_eq!(
        ids(&h.get(&format!("{OVLS}?integration_id={j}"), ACME).await),
        vec![o2.clone()]
    );
    assert_eq!(ids(&h.get(OVLS, ACME).await).len(), 3);
    assert!(
        ids(&h
            .get(&format!("{OVLS}?integration_id=nosuchintegration"), ACME)
            .await)
        .is_empty()
    );
    // Paged listing under the filter is complete.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let url = match &token {
            Some(t) => format!("{OVLS}?integration_id={i}&page_size=1&page_token={t}"),
            None => format!("{OVLS}?integration_id={i}&page_size=1"),
        };
        let r = h.get(&url, ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        seen.extend(ids(&r));
        match r.body["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, want);
}

async fn catalog_referenced_by_an_overlay_cannot_be_deleted_even_empty(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let o = h.overlay("acme", ACME, "o", i, c).await;
    let r = h
        .delete(&format!("/v1/accounts/acme/catalogs/{c}"), ACME)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "HAS_DEPENDENTS"),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["overlays"], 1);
    // Catalog replace is refused too.
    let r = h
        .post(
            "/v1/accounts/acme/catalogs?on_conflict=replace",
            ACME,
            json!({"display_name": "analytics"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(
        h.delete(&ovl(&o), ACME).await.status,
        StatusCode::NO_CONTENT
    );
    let r = h
        .delete(&format!("/v1/accounts/acme/catalogs/{c}"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
}

async fn create_verifies_both_bindings(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    h.account("beta").await;
    let foreign_cat = h.catalog("beta", BETA, "theirs").await;
    for (integration, catalog) in [
        ("nosuchintegration", c.as_str()),
        (i.as_str(), "nosuchcatalog"),
        (i.as_str(), foreign_cat.as_str()),
        ("bad id!", c.as_str()),
    ] {
        let r = h
            .post(
                OVLS,
                ACME,
                body("o", integration, catalog, json!([]), json!([])),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{integration} {catalog}: {:?}",
            r.body
        );
    }
    // Another account's overlay route is out of scope.
    let r = h
        .post(
            "/v1/accounts/beta/overlays",
            ACME,
            body("o", i, c, json!([]), json!([])),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        items(h.state.store.as_ref(), "ACCT#acme", "OVL")
            .await
            .is_empty()
    );
}

/// The catalog of the ownership example in docs/integrations.md: two overlays from two integrations, a
/// shared namespace, an overlay-created namespace chain, and directly managed content.
async fn materialized(s: &Setup) -> (String, String, String) {
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let j = h.integration("acme", ACME, "finance-unity").await;
    let a = h.overlay("acme", ACME, "crm-import", i, c).await;
    let b = h.overlay("acme", ACME, "finance-import", &j, c).await;
    let st = h.state.store.as_ref();
    // ["crm"] created by A; B shares it.
    put_namespace(st, c, &["crm"], true).await;
    put_claim(st, c, &["crm"], &a, true).await;
    put_claim(st, c, &["crm"], &b, false).await;
    put_managed_table(st, c, &["crm"], "accounts", i, &a).await;
    put_managed_table(st, c, &["crm"], "ledger", &j, &b).await;
    // ["deep", "er", "est"] created by A, only the leaf claimed.
    put_namespace(st, c, &["deep"], true).await;
    put_namespace(st, c, &["deep", "er"], true).await;
    put_namespace(st, c, &["deep", "er", "est"], true).await;
    put_claim(st, c, &["deep", "er", "est"], &a, true).await;
    put_managed_table(st, c, &["deep", "er", "est"], "t", i, &a).await;
    // A pre-existing, directly managed namespace A materialized into.
    h.namespace("acme", ACME, c, &["shared"]).await;
    put_claim(st, c, &["shared"], &a, false).await;
    put_managed_table(st, c, &["shared"], "from_a", i, &a).await;
    let r = h
        .post(
            &format!("/v1/accounts/acme/catalogs/{c}/namespaces/shared/tables"),
            ACME,
            table_body("local_one"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // An empty directly managed namespace and a local table elsewhere.
    h.namespace("acme", ACME, c, &["local"]).await;
    let r = h
        .post(
            &format!("/v1/accounts/acme/catalogs/{c}/namespaces/local/tables"),
            ACME,
            table_body("mine"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    h.namespace("acme", ACME, c, &["empty"]).await;
    (j, a, b)
}

async fn assert_only_a_retired(st: &dyn Metastore, c: &str, a: &str, b: &str) {
    assert!(!has_relation(st, c, &["crm"], "accounts").await);
    assert!(!has_relation(st, c, &["deep", "er", "est"], "t").await);
    assert!(!has_relation(st, c, &["shared"], "from_a").await);
    for p in [&["crm"][..], &["deep", "er", "est"], &["shared"]] {
        assert!(!has_claim(st, c, p, a).await, "{p:?}");
    }
    assert!(
        !has_namespace(st, c, &["deep", "er", "est"]).await,
        "overlay-created, empty, unclaimed"
    );
    assert!(
        !has_namespace(st, c, &["deep", "er"]).await,
        "its overlay-created parent too"
    );
    assert!(!has_namespace(st, c, &["deep"]).await);
    // B's contributions and the shared namespace it claims.
    assert!(has_namespace(st, c, &["crm"]).await, "B still claims it");
    assert!(has_claim(st, c, &["crm"], b).await);
    assert!(has_relation(st, c, &["crm"], "ledger").await);
    // Directly managed content.
    assert!(
        has_namespace(st, c, &["shared"]).await,
        "pre-existing: never pruned"
    );
    assert!(has_relation(st, c, &["shared"], "local_one").await);
    assert!(has_namespace(st, c, &["local"]).await);
    assert!(has_relation(st, c, &["local"], "mine").await);
    assert!(
        has_namespace(st, c, &["empty"]).await,
        "empty but directly managed"
    );
}

async fn overlay_delete_removes_only_its_contributions(h: Harness, _rounds: usize) {
    let s = setup(h).await;
    let (a_int, a, b) = {
        let (j, a, b) = materialized(&s).await;
        (j, a, b)
    };
    let _ = a_int;
    let (h, c) = (&s.h, &s.catalog);
    let r = h.delete(&ovl(&a), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(h.get(&ovl(&a), ACME).await.status, StatusCode::NOT_FOUND);
    assert_eq!(h.delete(&ovl(&a), ACME).await.status, StatusCode::NOT_FOUND);
    let st = h.state.store.as_ref();
    assert_only_a_retired(st, c, &a, &b).await;
    assert_eq!(
        h.get(&format!("/v1/accounts/acme/catalogs/{c}"), ACME)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(h.get(&ovl(&b), ACME).await.status, StatusCode::OK);
    let left = items(st, "ACCT#acme", "").await;
    assert!(left.iter().all(|i| !i.key.sk.contains(&a)), "{left:?}");
    // Deleting B now releases ["crm"]: overlay-created, so it goes.
    assert_eq!(
        h.delete(&ovl(&b), ACME).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(!has_namespace(st, c, &["crm"]).await);
    assert!(items(st, &format!("CAT#{c}"), "CLAIM#").await.is_empty());
    assert!(has_relation(st, c, &["local"], "mine").await);
}

async fn replace_retires_previous_contributions_and_makes_a_new_identity(
    h: Harness,
    _rounds: usize,
) {
    let s = setup(h).await;
    let (_j, a, b) = materialized(&s).await;
    let (h, i, c) = (&s.h, &s.integration, &s.catalog);
    let other_cat = h.catalog("acme", ACME, "other").await;
    // A replace that cannot succeed (missing catalog) destroys nothing.
    let r = h
        .post(
            &format!("{OVLS}?on_conflict=replace"),
            ACME,
            body("crm-import", i, "nosuchcatalog", json!([]), json!([])),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(h.get(&ovl(&a), ACME).await.status, StatusCode::OK);
    assert!(has_relation(h.state.store.as_ref(), c, &["crm"], "accounts").await);
    // Rebinding to another catalog is a replace: new identity, old contributions retired.
    let r = h
        .post(
            &format!("{OVLS}?on_conflict=replace"),
            ACME,
            body("crm-import", i, &other_cat, json!([["crm"]]), json!([])),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let new = r.body["id"].as_str().unwrap().to_owned();
    assert_ne!(new, a);
    assert_eq!(r.body["catalog_id"], other_cat.as_str());
    assert_eq!(r.body["generation"], 1);
    assert_eq!(h.get(&ovl(&a), ACME).await.status, StatusCode::NOT_FOUND);
    assert_only_a_retired(h.state.store.as_ref(), c, &a, &b).await;
    // The old catalog is no longer referenced by it; the new one is.
    let r = h
        .delete(&format!("/v1/accounts/acme/catalogs/{other_cat}"), ACME)
        .await;
    assert_eq!(r.code(), "HAS_DEPENDENTS");
    let r = h.get(&format!("{OVLS}?integration_id={i}"), ACME).await;
    let listed: Vec<&str> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![new.as_str()]);
    // replace with an idempotency key is refused.
    let r = h
        .call(
            axum::http::Method::POST,
            &format!("{OVLS}?on_conflict=replace"),
            Some(ACME),
            Some(body("crm-import", i, c, json!([]), json!([]))),
            &[("idempotency-key", "k")],
        )
        .await;
    assert_eq!(r.code(), "IDEMPOTENCY_KEY_NOT_ALLOWED");
}

/// No overlay is bound to a missing integration or catalog, and every dependency record
/// belongs to an existing overlay.
async fn assert_no_orphans(st: &dyn Metastore, at: &str) {
    let overlays: Vec<OverlayRecord> = items(st, "ACCT#acme", "OVL#")
        .await
        .iter()
        .map(|i| i.json().unwrap())
        .collect();
    for o in &overlays {
        let int = items(st, "ACCT#acme", &format!("INT#{}", o.integration_id)).await;
        assert!(
            !int.is_empty(),
            "{at}: overlay {} bound to a missing integration",
            o.id
        );
        let cat = items(st, "ACCT#acme", &format!("CAT#{}", o.catalog_id)).await;
        assert!(
            !cat.is_empty(),
            "{at}: overlay {} bound to a missing catalog",
            o.id
        );
    }
    for prefix in ["INTDEP#", "CATDEP#"] {
        for d in items(st, "ACCT#acme", prefix).await {
            let oid = d.key.sk.rsplit('#').next().unwrap();
            assert!(
                overlays.iter().any(|o| o.id == oid),
                "{at}: dangling {}",
                d.key.sk
            );
        }
    }
}

async fn overlay_create_racing_integration_delete_never_orphans(h: Harness, rounds: usize) {
    let s = setup(h).await;
    let h = Arc::new(s.h);
    let c = s.catalog.clone();
    let mut created = 0;
    for round in 0..rounds {
        let i = h.integration("acme", ACME, &format!("i{round}")).await;
        let cascade = round % 2 == 1;
        let (h1, h2, i1, i2, c1) = (h.clone(), h.clone(), i.clone(), i.clone(), c.clone());
        let create = tokio::spawn(async move {
            h1.post(
                OVLS,
                ACME,
                body(&format!("o{round}"), &i1, &c1, json!([]), json!([])),
            )
            .await
        });
        let delete = tokio::spawn(async move {
            let q = if cascade { "?cascade=true" } else { "" };
            h2.delete(&format!("/v1/accounts/acme/integrations/{i2}{q}"), ACME)
                .await
        });
        let (cr, dr) = (create.await.unwrap(), delete.await.unwrap());
        assert!(
            matches!(
                cr.status,
                StatusCode::CREATED | StatusCode::BAD_REQUEST | StatusCode::CONFLICT
            ),
            "{:?}",
            cr.body
        );
        assert!(
            matches!(dr.status, StatusCode::NO_CONTENT | StatusCode::CONFLICT),
            "{:?}",
            dr.body
        );
        if cr.status == StatusCode::CREATED {
            created += 1;
            if !cascade {
                assert_ne!(
                    dr.status,
                    StatusCode::NO_CONTENT,
                    "round {round}: a plain delete succeeded beneath an overlay"
                );
            }
        }
        assert_no_orphans(h.state.store.as_ref(), &format!("round {round}")).await;
    }
    let _ = created;
}

async fn overlay_create_racing_catalog_delete_never_orphans(h: Harness, rounds: usize) {
    let s = setup(h).await;
    let h = Arc::new(s.h);
    let i = s.integration.clone();
    for round in 0..rounds {
        let c = h.catalog("acme", ACME, &format!("c{round}")).await;
        let (h1, h2, i1, c1, c2) = (h.clone(), h.clone(), i.clone(), c.clone(), c.clone());
        let create = tokio::spawn(async move {
            h1.post(
                OVLS,
                ACME,
                body(&format!("o{round}"), &i1, &c1, json!([]), json!([])),
            )
            .await
        });
        let delete = tokio::spawn(async move {
            h2.delete(&format!("/v1/accounts/acme/catalogs/{c2}"), ACME)
                .await
        });
        let (cr, dr) = (create.await.unwrap(), delete.await.unwrap());
        assert!(
            matches!(
                cr.status,
                StatusCode::CREATED | StatusCode::BAD_REQUEST | StatusCode::CONFLICT
            ),
            "{:?}",
            cr.body
        );
        assert!(
            matches!(dr.status, StatusCode::NO_CONTENT | StatusCode::CONFLICT),
            "{:?}",
            dr.body
        );
        assert!(
            !(cr.status == StatusCode::CREATED && dr.status == StatusCode::NO_CONTENT),
            "round {round}: both won"
        );
        assert_no_orphans(h.state.store.as_ref(), &format!("round {round}")).await;
    }
}

async fn overlay_create_racing_integration_replace_never_orphans(h: Harness, rounds: usize) {
    let s = setup(h).await;
    let h = Arc::new(s.h);
    let c = s.catalog.clone();
    for round in 0..rounds {
        let name = format!("rep{round}");
        let i = h.integration("acme", ACME, &name).await;
        let (h1, h2, i1, c1) = (h.clone(), h.clone(), i.clone(), c.clone());
        let create = tokio::spawn(async move {
            h1.post(
                OVLS,
                ACME,
                body(&format!("o{round}"), &i1, &c1, json!([]), json!([])),
            )
            .await
        });
        let replace = tokio::spawn(async move {
            let mut b = integration_body(&name, "replacement");
            b["type"] = json!("UNITY");
            h2.post(
                "/v1/accounts/acme/integrations?on_conflict=replace",
                ACME,
                b,
            )
            .await
        });
        let (cr, rr) = (create.await.unwrap(), replace.await.unwrap());
        assert!(
            matches!(
                cr.status,
                StatusCode::CREATED | StatusCode::BAD_REQUEST | StatusCode::CONFLICT
            ),
            "{:?}",
            cr.body
        );
        assert!(
            matches!(rr.status, StatusCode::CREATED | StatusCode::CONFLICT),
            "{:?}",
            rr.body
        );
        assert!(
            !(cr.status == StatusCode::CREATED && rr.status == StatusCode::CREATED),
            "round {round}: both won"
        );
        assert_no_orphans(h.state.store.as_ref(), &format!("round {round}")).await;
    }
}

// ---- crash points of overlay delete (redb) ----------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlay_delete_converges_at_every_crash_point() {
    async fn fresh() -> (
        Setup,
        Arc<FaultInjectingMetastore<RedbMetastore>>,
        tempfile::TempDir,
        String,
        String,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FaultInjectingMetastore::new(
            RedbMetastore::open(dir.path().join("m.redb")).unwrap(),
        ));
        let dyn_store: DynMetastore = store.clone();
        let s = setup(Harness::with_store(dyn_store, None, true)).await;
        let (_j, a, b) = materialized(&s).await;
        (s, store, dir, a, b)
    }
    let (probe, store, _d, a, _) = fresh().await;
    let before = store.transacts();
    assert_eq!(
        probe.h.delete(&ovl(&a), ACME).await.status,
        StatusCode::NO_CONTENT
    );
    let n = store.transacts() - before;
    for point in crash_points(n) {
        let at = point.to_string();
        let (s, store, _d, a, b) = fresh().await;
        store.fail_transact(store.transacts() + point.transact, point.fault);
        let first = s.h.delete(&ovl(&a), ACME).await;
        store.clear();
        let fenced = !items(store.inner(), "ACCT#acme", &format!("OVLFENCE#{a}"))
            .await
            .is_empty();
        if first.status != StatusCode::NO_CONTENT && fenced {
            // Fenced: updates are refused until the delete finishes.
            let r =
                s.h.patch(
                    &ovl(&a),
                    ACME,
                    json!({"include_namespaces": [["late"]]}),
                    None,
                )
                .await;
            assert_eq!(r.code(), "DELETING", "{at}: {:?}", r.body);
        }
        s.h.clock.as_ref().unwrap().advance_ms(60_000);
        let retry = s.h.delete(&ovl(&a), ACME).await;
        assert!(
            matches!(retry.status, StatusCode::NO_CONTENT | StatusCode::NOT_FOUND),
            "{at}: {:?}",
            retry.body
        );
        let st = store.inner();
        assert_only_a_retired(st, &s.catalog, &a, &b).await;
        let left: Vec<_> = items(st, "ACCT#acme", "")
            .await
            .into_iter()
            .filter(|i| i.key.sk.contains(&a))
            .collect();
        assert!(left.is_empty(), "{at}: {left:?}");
        assert_no_orphans(st, &at).await;
    }
}
