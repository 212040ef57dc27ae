//! PATCH semantics of nullable fields, as documented in `openapi.yaml`: an absent field is
//! left unchanged, an explicit `null` clears it. (Found by schemathesis: `{"description":
//! null}` used to be read as "absent", so a description could never be cleared.)

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-patch";

fn app() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("meta.redb"))
        .expect("redb");
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    (flotilla_core::router(state), dir)
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let b = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {OPERATOR}"));
    let req = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn absent_leaves_and_null_clears_a_catalog_description() {
    let (app, _dir) = app();
    assert_eq!(
        call(
            &app,
            Method::POST,
            "/v1/accounts",
            Some(json!({"id": "acme"}))
        )
        .await
        .0,
        StatusCode::CREATED
    );
    let (s, cat) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(json!({"display_name": "analytics", "description": "kept"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{cat}");
    let path = format!(
        "/v1/accounts/acme/catalogs/{}",
        cat["id"].as_str().expect("id")
    );

    let (s, after) = call(
        &app,
        Method::PATCH,
        &path,
        Some(json!({"properties": {"k": "v"}})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{after}");
    assert_eq!(after["description"], "kept", "an absent field is unchanged");

    let (s, after) = call(
        &app,
        Method::PATCH,
        &path,
        Some(json!({"description": null})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{after}");
    assert_eq!(
        after["description"],
        Value::Null,
        "null clears the description"
    );
    assert_eq!(after["properties"], json!({"k": "v"}));
}

#[tokio::test]
async fn null_clears_table_locations_and_a_view_default_namespace() {
    let (app, _dir) = app();
    call(
        &app,
        Method::POST,
        "/v1/accounts",
        Some(json!({"id": "acme"})),
    )
    .await;
    let (_, cat) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(json!({"display_name": "c"})),
    )
    .await;
    let base = format!(
        "/v1/accounts/acme/catalogs/{}",
        cat["id"].as_str().expect("id")
    );
    let (s, _) = call(
        &app,
        Method::POST,
        &format!("{base}/namespaces"),
        Some(json!({"path": ["sales"]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let schema = json!({"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]});

    let (s, t) = call(
        &app,
        Method::POST,
        &format!("{base}/namespaces/sales/tables"),
        Some(
            json!({"name": "orders", "schema": schema, "format": "ICEBERG",
                    "metadata_location": "s3://b/m.json", "location": "s3://b/orders"}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{t}");
    let table = format!("{base}/namespaces/sales/tables/orders");
    let (s, t) = call(
        &app,
        Method::PATCH,
        &table,
        Some(json!({"properties": {"a": "b"}})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["metadata_location"], "s3://b/m.json");
    assert_eq!(t["location"], "s3://b/orders");
    let (s, t) = call(
        &app,
        Method::PATCH,
        &table,
        Some(json!({"metadata_location": null, "location": null})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["metadata_location"], Value::Null);
    assert_eq!(t["location"], Value::Null);

    let (s, v) = call(
        &app,
        Method::POST,
        &format!("{base}/namespaces/sales/views"),
        Some(json!({"name": "recent", "schema": schema, "definitions": [{"dialect": "spark", "sql": "SELECT 1"}],
                    "default_namespace": ["sales"]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let view = format!("{base}/namespaces/sales/views/recent");
    let (s, v) = call(
        &app,
        Method::PATCH,
        &view,
        Some(json!({"default_namespace": null})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["default_namespace"], Value::Null);
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_refused() {
    let (app, _dir) = app();
    call(
        &app,
        Method::POST,
        "/v1/accounts",
        Some(json!({"id": "acme"})),
    )
    .await;
    let (_, cat) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(json!({"display_name": "c"})),
    )
    .await;
    let path = format!(
        "/v1/accounts/acme/catalogs/{}",
        cat["id"].as_str().expect("id")
    );
    // Serde reads a struct from an array of its fields; the API takes objects only.
    for body in [
        json!([null, null, null]),
        json!(["renamed"]),
        json!(null),
        json!(7),
    ] {
        let (s, e) = call(&app, Method::PATCH, &path, Some(body.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body} -> {e}");
        assert_eq!(e["error"]["code"], "INVALID_ARGUMENT");
    }
    let (s, e) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(json!(["array-name"])),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    let (_, after) = call(&app, Method::GET, &path, None).await;
    assert_eq!(after["display_name"], "c");
}
