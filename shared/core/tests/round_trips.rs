//! Metastore round trips per API call (docs/deploy.md, "Measured request units per call"),
//! the receipt rule that a keyed create replays its first answer, failures included, and the
//! `428` answered to changes that must carry an etag (docs/api.md).
//!
//! Round trips are counted by `RoundTripMetastore`: requests that started while no other was
//! in flight, i.e. the sequential requests of one call, its latency floor on DynamoDB. The
//! same trait serves both backends, so the counts hold for either.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{Method, StatusCode};
use flotilla_core::directory;
use flotilla_metastore::metrics::RoundTripMetastore;
use serde_json::json;
use support::*;

struct Measured {
    h: Harness,
    trips: Arc<AtomicU64>,
}

impl Measured {
    fn redb() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("meta.redb"))
                .expect("open redb");
        let timed = RoundTripMetastore::new(store);
        let trips = timed.trips();
        Self {
            h: Harness::with_store(Arc::new(timed), Some(dir), false),
            trips,
        }
    }

    /// Calls `method path` and answers its status and round trips.
    async fn trips(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, u64) {
        let before = self.trips.load(Ordering::SeqCst);
        let r = self.h.call(method, path, Some(ACME), body, headers).await;
        (r.status, self.trips.load(Ordering::SeqCst) - before)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_paths_meet_their_round_trip_targets() {
    let m = Measured::redb();
    m.h.account("acme").await;
    let catalogs = "/v1/accounts/acme/catalogs";
    let (s, n) = m
        .trips(
            Method::POST,
            catalogs,
            Some(json!({"display_name": "plain"})),
            &[],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 2), "catalog create");
    let (s, n) = m
        .trips(
            Method::POST,
            catalogs,
            Some(json!({"display_name": "keyed"})),
            &[("idempotency-key", "rt-catalog")],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 3), "keyed catalog create");
    let c = m.h.catalog("acme", ACME, "lake").await;
    let base = format!("{catalogs}/{c}");

    let (s, n) = m
        .trips(
            Method::POST,
            &format!("{base}/namespaces"),
            Some(json!({"path": ["sales"]})),
            &[],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 2), "namespace create");
    let (s, n) = m
        .trips(
            Method::POST,
            &format!("{base}/namespaces"),
            Some(json!({"path": ["sales", "eu"]})),
            &[],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 2), "nested namespace create");
    let tables = format!("{base}/namespaces/sales/tables");
    let (s, n) = m
        .trips(Method::POST, &tables, Some(table_body("orders")), &[])
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 2), "table create");
    let (s, n) = m
        .trips(
            Method::POST,
            &tables,
            Some(table_body("refunds")),
            &[("idempotency-key", "rt-table")],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 3), "keyed table create");
    let view = json!({"name": "v", "schema": schema(),
        "definitions": [{"dialect": "spark", "sql": "SELECT 1"}]});
    let (s, n) = m
        .trips(
            Method::POST,
            &format!("{base}/namespaces/sales/views"),
            Some(view),
            &[],
        )
        .await;
    assert_eq!((s, n), (StatusCode::CREATED, 2), "view create");

    for (what, path) in [
        ("catalog", base.clone()),
        ("namespace", format!("{base}/namespaces/sales")),
        ("table", format!("{tables}/orders")),
    ] {
        let (s, n) = m.trips(Method::GET, &path, None, &[]).await;
        assert_eq!((s, n), (StatusCode::OK, 1), "GET {what}");
    }

    directory::finalize(&m.h.state, true, true)
        .await
        .expect("finalize");
    let dir = format!("{base}/directory");
    let (s, _) = m.trips(Method::GET, &dir, None, &[]).await;
    assert_eq!(s, StatusCode::OK);
    let (s, n) = m.trips(Method::GET, &dir, None, &[]).await;
    assert_eq!((s, n), (StatusCode::OK, 1), "warm, unchanged directory");
}

// ---- replays answer the first answer, failures included ---------------------------------

support::both_backends!(
    a_final_failure_is_replayed_even_after_the_state_changed,
    a_retryable_refusal_is_not_recorded,
    selection_and_connection_changes_need_if_match,
);

async fn a_final_failure_is_replayed_even_after_the_state_changed(h: Harness) {
    h.account("acme").await;
    let c = h.catalog("acme", ACME, "lake").await;
    let tables = format!("/v1/accounts/acme/catalogs/{c}/namespaces/sales/tables");
    let key = [("idempotency-key", "replay-404")];
    let first = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("t")),
            &key,
        )
        .await;
    assert_eq!(first.status, StatusCode::NOT_FOUND, "{:?}", first.body);

    // The namespace appears; a replay still answers the first answer, and creates nothing.
    h.namespace("acme", ACME, &c, &["sales"]).await;
    let replay = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("t")),
            &key,
        )
        .await;
    assert_eq!(replay.status, first.status);
    assert_eq!(replay.body, first.body);
    let get = h.get(&format!("{tables}/t"), ACME).await;
    assert_eq!(
        get.status,
        StatusCode::NOT_FOUND,
        "the replay had no effect"
    );

    // The same key with another request is still a reuse.
    let other = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("u")),
            &key,
        )
        .await;
    assert_eq!(other.code(), "IDEMPOTENCY_KEY_REUSED");

    // A 409 is recorded the same way: the name was taken when the keyed create ran.
    let taken = [("idempotency-key", "replay-409")];
    h.call(
        Method::POST,
        &tables,
        Some(ACME),
        Some(table_body("x")),
        &[],
    )
    .await;
    let first = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("x")),
            &taken,
        )
        .await;
    assert_eq!(first.code(), "ALREADY_EXISTS");
    let del = h.delete(&format!("{tables}/x"), ACME).await;
    assert_eq!(del.status, StatusCode::NO_CONTENT);
    let replay = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("x")),
            &taken,
        )
        .await;
    assert_eq!((replay.status, &replay.body), (first.status, &first.body));
    assert_eq!(
        h.get(&format!("{tables}/x"), ACME).await.status,
        StatusCode::NOT_FOUND
    );
}

async fn a_retryable_refusal_is_not_recorded(h: Harness) {
    h.account("acme").await;
    let c = h.catalog("acme", ACME, "lake").await;
    h.namespace("acme", ACME, &c, &["sales"]).await;
    // A live delete guard on the namespace: the create answers DELETING, which asks the
    // caller to try again, so the receipt stays pending and the replay creates.
    let guard = flotilla_domain::keys::namespace_guard(
        &c,
        &flotilla_domain::names::NamespacePath::new(vec!["sales".into()]).expect("path"),
    );
    let body = serde_json::to_vec(&flotilla_core::service::GuardRecord {
        installed_ms: h.state.clock.now_ms(),
        owner: "test".into(),
        durable: false,
    })
    .expect("guard");
    h.state
        .store
        .transact(
            flotilla_metastore::Transaction::new()
                .with(flotilla_metastore::Op::put(guard.clone(), body)),
        )
        .await
        .expect("install guard");
    let tables = format!("/v1/accounts/acme/catalogs/{c}/namespaces/sales/tables");
    let key = [("idempotency-key", "retry-deleting")];
    let first = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("t")),
            &key,
        )
        .await;
    assert_eq!(first.code(), "DELETING", "{:?}", first.body);
    h.state
        .store
        .transact(
            flotilla_metastore::Transaction::new().with(flotilla_metastore::Op::delete(guard)),
        )
        .await
        .expect("remove guard");
    let replay = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("t")),
            &key,
        )
        .await;
    assert_eq!(replay.status, StatusCode::CREATED, "{:?}", replay.body);
    let again = h
        .call(
            Method::POST,
            &tables,
            Some(ACME),
            Some(table_body("t")),
            &key,
        )
        .await;
    assert_eq!((again.status, &again.body), (replay.status, &replay.body));
}

// ---- etag preconditions --------------------------------------------------------------------

async fn selection_and_connection_changes_need_if_match(h: Harness) {
    let h = h.with_credentials(Creds::new().dyn_store());
    h.account("acme").await;
    let c = h.catalog("acme", ACME, "lake").await;
    let i = h.integration("acme", ACME, "upstream").await;
    let o = h.overlay("acme", ACME, "mirror", &i, &c).await;
    let int_path = format!("/v1/accounts/acme/integrations/{i}");
    let ovl_path = format!("/v1/accounts/acme/overlays/{o}");

    for (path, body) in [
        (&int_path, json!({"uri": "https://other.example.com/api"})),
        (&int_path, json!({"properties": {"warehouse": "w2"}})),
        (&ovl_path, json!({"include_namespaces": [["hr"]]})),
        (&ovl_path, json!({"exclude_namespaces": [["hr", "tmp"]]})),
    ] {
        let before = h.get(path, ACME).await;
        let r = h.patch(path, ACME, body.clone(), None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::PRECONDITION_REQUIRED, "PRECONDITION_REQUIRED"),
            "{body}: {:?}",
            r.body
        );
        assert!(
            r.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("If-Match")),
            "{:?}",
            r.body
        );
        assert_eq!(h.get(path, ACME).await.body, before.body, "nothing changed");
        // With the etag read, the same change applies.
        let r = h
            .patch(path, ACME, body.clone(), Some(&before.etag()))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{body}: {:?}", r.body);
    }
    // Changes the design leaves unconditional still need no etag.
    let r = h
        .patch(&ovl_path, ACME, json!({"display_name": "mirror2"}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .patch(&int_path, ACME, json!({"display_name": "upstream2"}), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}
