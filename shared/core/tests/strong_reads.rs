//! Dependency checks and cascades read strongly: on a store whose eventually consistent reads
//! lag (`StaleReadsMetastore`, frozen before the dependents are created), each of them still
//! sees what committed just before it, so nothing is deleted from under a dependent and no
//! cascade leaves an item behind. The first test proves the decorator does serve stale
//! eventual reads, so the others could fail.

mod support;

use std::sync::Arc;

use axum::http::StatusCode;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::stale::StaleReadsMetastore;
use serde_json::json;
use support::*;

struct Lagging {
    h: Harness,
    store: Arc<StaleReadsMetastore<RedbMetastore>>,
    _creds: Creds,
}

fn lagging() -> Lagging {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(StaleReadsMetastore::new(
        RedbMetastore::open(dir.path().join("meta.redb")).expect("open redb"),
    ));
    let creds = Creds::new();
    let h =
        Harness::with_store(store.clone(), Some(dir), false).with_credentials(creds.dyn_store());
    Lagging {
        h,
        store,
        _creds: creds,
    }
}

const A: &str = "/v1/accounts/acme";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decorator_serves_stale_eventual_reads() {
    let l = lagging();
    let h = &l.h;
    h.account("acme").await;
    let c = h.catalog("acme", ACME, "lake").await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    l.store.freeze();
    let tables = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    assert_eq!(
        h.post(&tables, ACME, table_body("orders")).await.status,
        StatusCode::CREATED
    );
    // A listing is eventually consistent: it may lag, and here it does.
    let listed = h.get(&tables, ACME).await;
    assert_eq!(listed.body["items"], json!([]), "{:?}", listed.body);
    assert!(l.store.stale_answers() > 0);
    // A point GET is strong.
    assert_eq!(
        h.get(&format!("{tables}/orders"), ACME).await.status,
        StatusCode::OK
    );
    l.store.thaw();
    assert_eq!(
        h.get(&tables, ACME).await.body["items"][0]["name"],
        "orders"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependency_checks_see_dependents_created_after_the_lag_began() {
    let l = lagging();
    let h = &l.h;
    h.account("acme").await;
    let c = h.catalog("acme", ACME, "lake").await;
    let i = h.integration("acme", ACME, "prod").await;
    let empty = h.catalog("acme", ACME, "empty").await;
    l.store.freeze();

    // A namespace with a table: the namespace delete must see the table.
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let tables = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    assert_eq!(
        h.post(&tables, ACME, table_body("orders")).await.status,
        StatusCode::CREATED
    );
    let r = h
        .delete(&format!("{A}/catalogs/{c}/namespaces/sales"), ACME)
        .await;
    assert_eq!(r.code(), "HAS_DEPENDENTS", "{:?}", r.body);
    // A catalog with a namespace: the catalog delete must see it.
    let r = h.delete(&format!("{A}/catalogs/{c}"), ACME).await;
    assert_eq!(r.code(), "HAS_DEPENDENTS", "{:?}", r.body);
    // An integration and a catalog an overlay depends on.
    let o = h.overlay("acme", ACME, "mirror", &i, &empty).await;
    let r = h.delete(&format!("{A}/integrations/{i}"), ACME).await;
    assert_eq!(r.code(), "HAS_DEPENDENTS", "{:?}", r.body);
    let r = h.delete(&format!("{A}/catalogs/{empty}"), ACME).await;
    assert_eq!(r.code(), "HAS_DEPENDENTS", "{:?}", r.body);
    // The cascade must find the overlay created after the lag began.
    let r = h
        .delete(&format!("{A}/integrations/{i}?cascade=true"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(
        h.get(&format!("{A}/overlays/{o}"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
    assert!(
        items(l.store.as_ref(), "ACCT#acme", "INTDEP#")
            .await
            .is_empty()
    );
    assert!(
        items(l.store.as_ref(), "ACCT#acme", "CATDEP#")
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_cascade_removes_what_was_created_after_the_lag_began() {
    let l = lagging();
    let h = &l.h;
    h.account("acme").await;
    l.store.freeze();
    let c = h.catalog("acme", ACME, "lake").await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let tables = format!("{A}/catalogs/{c}/namespaces/sales/tables");
    assert_eq!(
        h.post(&tables, ACME, table_body("orders")).await.status,
        StatusCode::CREATED
    );
    let r = h.delete(A, OPERATOR).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert!(
        items(l.store.as_ref(), "ACCT#acme", "").await.is_empty(),
        "the account partition is empty"
    );
    assert!(
        items(l.store.as_ref(), &format!("CAT#{c}"), "")
            .await
            .is_empty(),
        "the catalog partition is empty"
    );
}
