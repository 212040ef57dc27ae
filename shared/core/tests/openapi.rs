//! The served OpenAPI document (`GET /v1/openapi.json`) and the router agree, both ways:
//!
//! - every documented path and method is routed (it answers something other than the
//!   router's `404`/`405` fallbacks), and its documented security matches what the server
//!   does without a token;
//! - every route of the router (the table below) is documented, methods included; a method
//!   the table does not list on a routed path is `405`;
//! - the table covers the source: it has as many paths as `src/http/*.rs` has `.route(` calls,
//!   so a route added without updating the table (and therefore the document) fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

const A: &str = "/v1/accounts/{account_id}";

/// Every route the router serves: path template and methods.
fn router_routes() -> Vec<(String, &'static [&'static str])> {
    let account: &[(&str, &[&str])] = &[
        ("/catalogs", &["GET", "POST"]),
        ("/catalogs/{catalog_id}", &["DELETE", "GET", "PATCH"]),
        ("/catalogs/{catalog_id}/directory", &["GET"]),
        ("/catalogs/{catalog_id}/namespaces", &["GET", "POST"]),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}",
            &["DELETE", "GET", "PATCH"],
        ),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/tables",
            &["GET", "POST"],
        ),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}",
            &["DELETE", "GET", "PATCH"],
        ),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/views",
            &["GET", "POST"],
        ),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/views/{name}",
            &["DELETE", "GET", "PATCH"],
        ),
        ("/integrations", &["GET", "POST"]),
        (
            "/integrations/{integration_id}",
            &["DELETE", "GET", "PATCH"],
        ),
        ("/integrations/{integration_id}/authentication", &["PUT"]),
        ("/integrations/{integration_id}/validate", &["POST"]),
        (
            "/integrations/{integration_id}/upstream/namespaces",
            &["GET"],
        ),
        ("/integrations/{integration_id}/upstream/objects", &["GET"]),
        ("/overlays", &["GET", "POST"]),
        ("/overlays/{overlay_id}", &["DELETE", "GET", "PATCH"]),
        ("/overlays/{overlay_id}/reconcile", &["POST"]),
        ("/overlays/{overlay_id}/capture", &["POST"]),
        ("/catalogs/{catalog_id}/validation-errors", &["GET"]),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/validation",
            &["GET"],
        ),
        (
            "/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/visibility",
            &["PUT"],
        ),
        ("/index-catalogs", &["GET", "POST"]),
        ("/index-catalogs/{name}", &["GET"]),
        ("/index-catalogs/{name}/namespaces", &["GET", "POST"]),
        ("/index-catalogs/{name}/namespaces/{ns}", &["DELETE"]),
        (
            "/index-catalogs/{name}/namespaces/{ns}/indexes",
            &["GET", "POST"],
        ),
        (
            "/index-catalogs/{name}/namespaces/{ns}/indexes/{index}",
            &["DELETE", "GET"],
        ),
        (
            "/index-catalogs/{name}/namespaces/{ns}/indexes/{index}/commit",
            &["POST"],
        ),
        ("/index-catalogs/{name}/rename", &["POST"]),
        ("/principals", &["GET", "POST"]),
        ("/principals/{principal_id}", &["DELETE", "GET"]),
        ("/principals/{principal_id}/rotate", &["POST"]),
        ("/roles", &["GET", "POST"]),
        ("/roles/{role}", &["DELETE", "GET"]),
        ("/roles/{role}/members/{member}", &["DELETE", "PUT"]),
        ("/grants", &["GET", "POST"]),
        ("/grants/{grant_id}", &["DELETE", "GET"]),
        ("/privileges", &["GET"]),
        ("/events", &["GET"]),
        ("/audit", &["GET"]),
        ("/event-sinks", &["GET", "POST"]),
        ("/event-sinks/{sink_id}", &["DELETE", "GET"]),
    ];
    let top: &[(&str, &[&str])] = &[
        ("/v1/health", &["GET"]),
        ("/v1/openapi.json", &["GET"]),
        ("/v1/admin/metrics", &["GET"]),
        ("/v1/admin/catalog-finalize", &["POST"]),
        ("/v1/admin/sweep-credentials", &["POST"]),
        ("/v1/whoami", &["GET"]),
        ("/v1/oauth/tokens", &["POST"]),
        ("/v1/accounts", &["GET", "POST"]),
        (A, &["DELETE", "GET"]),
    ];
    top.iter()
        .map(|(p, m)| ((*p).to_owned(), *m))
        .chain(account.iter().map(|(p, m)| (format!("{A}{p}"), *m)))
        .collect()
}

/// The router with no token configured: every secured route answers `401` before touching
/// state, so probing needs no fixtures. The directory lives as long as the router is used.
fn app() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("meta.redb"))
        .expect("redb");
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    );
    (flotilla_core::router(state), dir)
}

async fn send(app: &Router, method: &str, uri: &str) -> (StatusCode, Value, Option<String>) {
    let req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("method"))
        .uri(uri)
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ctype,
    )
}

async fn document(app: &Router) -> Value {
    let (status, doc, ctype) = send(app, "GET", "/v1/openapi.json").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the document is served without a token"
    );
    assert_eq!(ctype.as_deref(), Some("application/json"));
    doc
}

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// (path, METHOD) -> operation, from the document.
fn operations(doc: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (key, op) in item.as_object().expect("path item") {
            if METHODS.contains(&key.as_str()) {
                out.insert((path.clone(), key.to_uppercase()), op.clone());
            }
        }
    }
    out
}

/// A concrete URI for a template; every parameter gets a well-formed value.
fn concrete(template: &str) -> String {
    template
        .replace("{account_id}", "acme")
        .replace("{catalog_id}", "c1")
        .replace("{integration_id}", "i1")
        .replace("{overlay_id}", "o1")
        .replace("{ns}", "sales%1Feu")
        .replace("{name}", "orders")
        .replace("{index}", "idx")
        .replace("{principal_id}", "p1")
        .replace("{role}", "readers")
        .replace("{member}", "etl")
        .replace("{grant_id}", "g1")
        .replace("{sink_id}", "s1")
}

#[tokio::test]
async fn the_document_is_openapi_3_0_3_with_unique_operation_ids_and_error_responses() {
    let (app, _dir) = app();
    let doc = document(&app).await;
    assert_eq!(doc["openapi"], "3.0.3");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let mut ids = BTreeSet::new();
    for ((path, method), op) in operations(&doc) {
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(ids.insert(id.to_owned()), "operationId {id} is used twice");
        let responses = op["responses"].as_object().expect("responses");
        assert!(
            responses.contains_key("default"),
            "{method} {path} documents no default error response"
        );
        assert!(
            responses.keys().any(|k| k.starts_with('2')),
            "{method} {path} documents no success"
        );
        let secured = op.get("security") != Some(&Value::Array(vec![]));
        if secured {
            assert!(
                responses.contains_key("401"),
                "{method} {path} does not document 401"
            );
        }
    }
}

#[tokio::test]
async fn the_router_routes_and_the_documented_operations_are_the_same_set() {
    let (app, _dir) = app();
    let doc = document(&app).await;
    let documented: BTreeSet<(String, String)> = operations(&doc).into_keys().collect();
    let routed: BTreeSet<(String, String)> = router_routes()
        .into_iter()
        .flat_map(|(p, ms)| ms.iter().map(move |m| (p.clone(), (*m).to_owned())))
        .collect();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.yaml: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented operations the router table lacks: {unrouted:?}"
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_its_security_is_what_the_server_does() {
    let (app, _dir) = app();
    let doc = document(&app).await;
    for ((path, method), op) in operations(&doc) {
        let uri = concrete(&path);
        let (status, body, _) = send(&app, &method, &uri).await;
        assert!(
            status != StatusCode::NOT_FOUND && status != StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path} is documented but the router answers {status}: {body}"
        );
        let public = op.get("security") == Some(&Value::Array(vec![]));
        if public && method == "POST" {
            // A public exchange (the token route) answers its own refusal, never `401
            // UNAUTHENTICATED` in the API's shape.
            assert_ne!(
                body["error"]["code"], "UNAUTHENTICATED",
                "{method} {path} is documented as public"
            );
        } else if public {
            assert_eq!(
                status,
                StatusCode::OK,
                "{method} {path} is documented as public"
            );
        } else {
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} answers {status} without a token"
            );
            assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
        }
    }
}

#[tokio::test]
async fn methods_the_table_does_not_list_are_405_on_every_routed_path() {
    let (app, _dir) = app();
    for (path, methods) in router_routes() {
        for m in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            if methods.contains(&m) {
                continue;
            }
            let (status, body, _) = send(&app, m, &concrete(&path)).await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{m} {path} is routed but neither in the table nor in openapi.yaml: {body}"
            );
            assert_eq!(body["error"]["code"], "METHOD_NOT_ALLOWED");
        }
    }
    let (status, body, _) = send(&app, "GET", "/v1/no-such-route").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "NOT_FOUND");
}

#[test]
fn the_route_table_has_one_path_per_route_call_in_the_source() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../http/src");
    let mut calls = 0;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("shared/http/src") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            // Unit tests of a module (its `#[cfg(test)]` tail) build probe routers of their own.
            let served = text.split("#[cfg(test)]").next().unwrap_or_default();
            let n = served.matches(".route(").count();
            calls += n;
            files.push(format!(
                "{}: {n}",
                path.file_name().and_then(|f| f.to_str()).unwrap_or("?")
            ));
        }
    }
    let paths: BTreeSet<String> = router_routes().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths.len(),
        calls,
        "shared/http/src has {calls} .route( calls ({files:?}) but the table has {} paths: a route was added or \
         removed without updating shared/core/tests/openapi.rs and shared/http/openapi/openapi.yaml",
        paths.len()
    );
}
