//! `POST .../overlays?on_conflict=replace` is atomic (docs/api.md): the name moves to the new
//! overlay in the transaction that creates it and fences the old one, so the name is never
//! absent, a replace that fails leaves the old overlay as it was, and a cleanup interrupted
//! after the swap is resumed by deleting the old overlay by id.

mod support;

use std::sync::Arc;

use axum::http::StatusCode;
use flotilla_domain::keys;
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Op, Transaction};
use serde_json::json;
use support::*;

const OVLS: &str = "/v1/accounts/acme/overlays";

struct Faulty {
    h: Harness,
    faults: Arc<FaultInjectingMetastore<RedbMetastore>>,
    _creds: Creds,
}

fn faulty() -> Faulty {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("open redb");
    let faults = Arc::new(FaultInjectingMetastore::new(store));
    let creds = Creds::new();
    let h =
        Harness::with_store(faults.clone(), Some(dir), false).with_credentials(creds.dyn_store());
    Faulty {
        h,
        faults,
        _creds: creds,
    }
}

fn writes(tx: &Transaction, key: &flotilla_metastore::Key) -> bool {
    tx.ops
        .iter()
        .any(|op| matches!(op, Op::Put { .. } | Op::Delete { .. }) && op.key() == key)
}

/// The overlay named `name` in the listing, by id.
async fn named(h: &Harness, name: &str) -> Vec<String> {
    let r = h.get(OVLS, ACME).await;
    r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|o| o["display_name"] == name)
        .map(|o| o["id"].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_swap_leaves_the_old_overlay_intact() {
    let f = faulty();
    let h = &f.h;
    h.account("acme").await;
    let i = h.integration("acme", ACME, "prod").await;
    let c = h.catalog("acme", ACME, "analytics").await;
    let old = h.overlay("acme", ACME, "mirror", &i, &c).await;
    let before = h.get(&format!("{OVLS}/{old}"), ACME).await.body;

    // Every attempt of the swap transaction fails before it applies.
    let fence = keys::overlay_fence("acme", &old);
    f.faults
        .fail_when(Fault::FailBeforeApply, usize::MAX, move |tx| {
            writes(tx, &fence)
        });
    let r = h
        .post(
            &format!("{OVLS}?on_conflict=replace"),
            ACME,
            json!({"display_name": "mirror", "integration_id": i, "catalog_id": c,
                   "include_namespaces": [["crm"]]}),
        )
        .await;
    assert_eq!(r.code(), "UNAVAILABLE", "{:?}", r.body);
    f.faults.clear();
    assert_eq!(h.get(&format!("{OVLS}/{old}"), ACME).await.body, before);
    assert_eq!(named(h, "mirror").await, vec![old.clone()]);
    assert!(
        h.state
            .store
            .get(
                &keys::overlay_fence("acme", &old),
                flotilla_metastore::Consistency::Strong
            )
            .await
            .expect("read")
            .is_none(),
        "the old overlay is not fenced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_interrupted_after_the_swap_resumes_by_deleting_the_old_id() {
    let f = faulty();
    let h = &f.h;
    h.account("acme").await;
    let i = h.integration("acme", ACME, "prod").await;
    let c = h.catalog("acme", ACME, "analytics").await;
    let old = h.overlay("acme", ACME, "mirror", &i, &c).await;

    // The swap commits; the old overlay's final removal fails.
    let record = keys::overlay("acme", &old);
    f.faults
        .fail_when(Fault::FailBeforeApply, 1, move |tx| writes(tx, &record));
    let r = h
        .post(
            &format!("{OVLS}?on_conflict=replace"),
            ACME,
            json!({"display_name": "mirror", "integration_id": i, "catalog_id": c}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let new = r.body["id"].as_str().expect("id").to_owned();
    assert_ne!(new, old);
    assert_eq!(f.faults.injected(), 1);
    // The name is the new overlay's; the old one is still listed under its id, fenced.
    let by_name = h.get(&format!("{OVLS}/{new}"), ACME).await;
    assert_eq!(by_name.body["display_name"], "mirror");
    let r = h
        .patch(
            &format!("{OVLS}/{old}"),
            ACME,
            json!({"paused": true}),
            None,
        )
        .await;
    assert_eq!(
        r.code(),
        "DELETING",
        "the old overlay is fenced: {:?}",
        r.body
    );
    // Deleting it by id resumes its retirement and leaves the new overlay alone.
    let r = h.delete(&format!("{OVLS}/{old}"), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_eq!(named(h, "mirror").await, vec![new.clone()]);
    assert_eq!(
        h.get(&format!("{OVLS}/{new}"), ACME).await.status,
        StatusCode::OK
    );
}
