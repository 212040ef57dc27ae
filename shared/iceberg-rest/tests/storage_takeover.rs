//! One account never claims another's storage (issue 35, item 3): on `flotilla serve` a
//! catalog without a `warehouse` property lives at `<root>/<account>/<catalog id>/`. Another
//! account naming that home (or a catalog directory inside it) as its own catalog's warehouse
//! would claim the prefix, register and read the victim's metadata, write into its table
//! directories and purge them, knowing only a catalog id. Every step of that takeover is
//! refused and the victim's files stay as they were.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::redb_store::RedbMetastore;
use serde_json::{Value, json};

const OPERATOR: &str = "takeover-operator-token";
const VICTIM: &str = "takeover-acme-token";
const ATTACKER: &str = "takeover-other-token";

async fn call(
    app: &Router,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    support::send(app, req, body).await
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
    ]})
}

/// Every file below `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// An attacker's catalog with `warehouse` as its property: its endpoint prefix.
async fn attacker_catalog(app: &Router, name: &str, warehouse: &str) -> String {
    let (s, cat) = call(
        app,
        ATTACKER,
        Method::POST,
        "/v1/accounts/other/catalogs",
        Some(json!({"display_name": name, "properties": {"warehouse": warehouse}})),
    )
    .await;
    // `/v1` does not know the endpoint's rules: the catalog exists, the endpoint refuses it.
    assert_eq!(s, StatusCode::CREATED, "{cat}");
    format!("other.{}", cat["id"].as_str().unwrap())
}

fn assert_forbidden(what: &str, s: StatusCode, v: &Value) {
    assert_eq!(s, StatusCode::FORBIDDEN, "{what}: {v}");
    assert_eq!(v["error"]["type"], "ForbiddenException", "{what}: {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("reserved as the home of account")),
        "{what}: {v}"
    );
}

#[tokio::test]
async fn another_account_cannot_take_over_a_host_assigned_warehouse() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("warehouse");
    std::fs::create_dir_all(&root).unwrap();
    let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
    let state = AppState::new(
        Arc::new(RedbMetastore::in_memory().unwrap()),
        Arc::new(SystemClock),
        Arc::new(support::tokens(OPERATOR, VICTIM, ATTACKER)),
        Config::default(),
    )
    .with_index_stores(flotilla_core::service::index_catalogs::local_warehouse_stores(policy));
    let config = IcebergConfig {
        local_warehouse_root: Some(root.clone()),
        ..Default::default()
    };
    let app = flotilla_iceberg_rest::router(state, config);
    for account in ["acme", "other"] {
        let (s, v) = call(
            &app,
            OPERATOR,
            Method::POST,
            "/v1/accounts",
            Some(json!({"id": account})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    // The victim: a catalog on host-assigned storage, a namespace and a table.
    let (s, cat) = call(
        &app,
        VICTIM,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(json!({"display_name": "lake"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{cat}");
    let catalog_id = cat["id"].as_str().unwrap().to_owned();
    let victim = format!("/iceberg/v1/acme.{catalog_id}");
    let (s, v) = call(
        &app,
        VICTIM,
        Method::POST,
        &format!("{victim}/namespaces"),
        Some(json!({"namespace": ["db"]})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, table) = call(
        &app,
        VICTIM,
        Method::POST,
        &format!("{victim}/namespaces/db/tables"),
        Some(json!({"name": "t", "schema": schema()})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{table}");
    let metadata_location = table["metadata-location"].as_str().unwrap().to_owned();
    let table_location = table["metadata"]["location"].as_str().unwrap().to_owned();
    let home = root.join("acme");
    assert!(
        metadata_location.starts_with(&format!("file://{}/{catalog_id}/", home.display())),
        "{metadata_location}"
    );
    let before = snapshot(&home);
    assert!(!before.is_empty());

    // The attacker knows the root layout and the catalog id. Its catalogs name the victim's
    // home, the victim's catalog directory inside it, and the home spelt in another case.
    let root_uri = format!("file://{}/", root.display());
    for (i, warehouse) in [
        format!("{root_uri}acme/"),
        format!("{root_uri}acme/{catalog_id}/"),
        format!("{root_uri}ACME/{catalog_id}/"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("squat-{i}");
        let prefix = attacker_catalog(&app, &name, &warehouse).await;
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::GET,
            &format!("/iceberg/v1/config?warehouse=other/{name}"),
            None,
        )
        .await;
        assert_forbidden(&format!("config of {warehouse}"), s, &v);
        let at = format!("/iceberg/v1/{prefix}");
        // Claim the namespace, register the victim's metadata, read it, write a table into
        // the victim's table directory, and purge: each refused.
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::POST,
            &format!("{at}/namespaces"),
            Some(json!({"namespace": ["db"]})),
        )
        .await;
        assert_forbidden(&format!("namespace in {warehouse}"), s, &v);
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::POST,
            &format!("{at}/namespaces/db/register"),
            Some(json!({"name": "stolen", "metadata-location": metadata_location})),
        )
        .await;
        assert_forbidden(&format!("register in {warehouse}"), s, &v);
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::GET,
            &format!("{at}/namespaces/db/tables/stolen"),
            None,
        )
        .await;
        assert_forbidden(&format!("load in {warehouse}"), s, &v);
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::POST,
            &format!("{at}/namespaces/db/tables"),
            Some(json!({"name": "w", "schema": schema(),
                        "location": format!("{table_location}/attacker")})),
        )
        .await;
        assert_forbidden(&format!("create in {warehouse}"), s, &v);
        let (s, v) = call(
            &app,
            ATTACKER,
            Method::DELETE,
            &format!("{at}/namespaces/db/tables/stolen?purgeRequested=true"),
            None,
        )
        .await;
        assert_forbidden(&format!("purge in {warehouse}"), s, &v);
    }
    // The home of an account that does not exist yet is reserved as well.
    let prefix = attacker_catalog(&app, "future", &format!("{root_uri}zed/")).await;
    let (s, v) = call(
        &app,
        ATTACKER,
        Method::GET,
        &format!("/iceberg/v1/{prefix}/namespaces"),
        None,
    )
    .await;
    assert_forbidden("the home of account zed", s, &v);
    // The parent of every home is the root: never a warehouse.
    let prefix = attacker_catalog(&app, "parent", &root_uri).await;
    let (s, v) = call(
        &app,
        ATTACKER,
        Method::GET,
        &format!("/iceberg/v1/{prefix}/namespaces"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");

    // The victim's files are as they were, and its table still loads.
    assert_eq!(snapshot(&home), before);
    let (s, v) = call(
        &app,
        VICTIM,
        Method::GET,
        &format!("{victim}/namespaces/db/tables/t"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata-location"], json!(metadata_location));
    // The attacker keeps a prefix of its own: not every explicit warehouse is refused.
    let prefix = attacker_catalog(&app, "own", &format!("{root_uri}other/lake/")).await;
    let (s, v) = call(
        &app,
        ATTACKER,
        Method::GET,
        &format!("/iceberg/v1/{prefix}/namespaces"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}
