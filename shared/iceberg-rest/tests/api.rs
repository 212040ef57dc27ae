//! The Iceberg REST endpoint in process: config and tokens, namespaces, tables, commits
//! (requirements, stale bases, unknown outcomes, multi-table atomicity, directory
//! generations), one table through two doors, views, isolation and overlay refusal.

mod support;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_domain::keys;
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, Metastore, Op, Transaction};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "iceberg-operator-token";
const ACME: &str = "iceberg-acme-token";
const OTHER: &str = "iceberg-other-token";

struct Env {
    app: Router,
    store: Arc<FaultInjectingMetastore<RedbMetastore>>,
    _dir: tempfile::TempDir,
    prefix: String,
    catalog_id: String,
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    support::send(app, req, body).await
}

async fn setup() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FaultInjectingMetastore::new(
        RedbMetastore::in_memory().unwrap(),
    ));
    let tokens = support::tokens(OPERATOR, ACME, OTHER);
    let state = AppState::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    // The host's warehouse root: the only local path the warehouse stores admit.
    let root = dir.path().canonicalize().unwrap().join("warehouse");
    std::fs::create_dir_all(&root).unwrap();
    let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
    let state = state
        .with_index_stores(flotilla_core::service::index_catalogs::local_warehouse_stores(policy));
    let app = flotilla_iceberg_rest::router(
        state,
        IcebergConfig {
            local_warehouse_root: Some(root),
            vending: None,
            ..Default::default()
        },
    );
    for a in ["acme", "other"] {
        let (s, _) = call(
            &app,
            Method::POST,
            "/v1/accounts",
            Some(OPERATOR),
            Some(json!({"id": a})),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (s, cat) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(ACME),
        Some(json!({"display_name": "lake"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{cat}");
    let (s, cfg) = call(
        &app,
        Method::GET,
        "/iceberg/v1/config?warehouse=acme/lake",
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{cfg}");
    let prefix = cfg["overrides"]["prefix"].as_str().unwrap().to_owned();
    Env {
        app,
        store,
        _dir: dir,
        prefix,
        catalog_id: cat["id"].as_str().unwrap().to_owned(),
    }
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "v", "required": false, "type": "string"},
    ]})
}

impl Env {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.app, method, path, Some(ACME), body).await
    }

    fn url(&self, rest: &str) -> String {
        format!("/iceberg/v1/{}/{rest}", self.prefix)
    }

    async fn namespace(&self, name: &str) {
        let (s, v) = self
            .call(
                Method::POST,
                &self.url("namespaces"),
                Some(json!({"namespace": [name]})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }

    async fn table(&self, ns: &str, name: &str) -> Value {
        let (s, v) = self
            .call(
                Method::POST,
                &self.url(&format!("namespaces/{ns}/tables")),
                Some(json!({"name": name, "schema": schema(), "properties": {"owner": "test"}})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    async fn generation(&self) -> Option<Vec<u8>> {
        let k = keys::directory_generation(&self.catalog_id);
        self.store
            .get(&k, Consistency::Strong)
            .await
            .unwrap()
            .map(|i| i.body)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn snapshot(id: i64, parent: Option<i64>, seq: i64) -> Value {
    let mut s = json!({
        "snapshot-id": id,
        "sequence-number": seq,
        "timestamp-ms": now_ms() + id,
        "manifest-list": format!("file:///nowhere/snap-{id}.avro"),
        "summary": {"operation": "append"},
        "schema-id": 0,
    });
    if let Some(p) = parent {
        s["parent-snapshot-id"] = json!(p);
    }
    s
}

fn append(id: i64, base: Option<i64>, seq: i64) -> Value {
    json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": base}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot(id, base, seq)},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id},
        ],
    })
}

#[tokio::test]
async fn config_lists_exactly_the_served_routes_and_resolves_warehouses() {
    let env = setup().await;
    let (s, cfg) = call(
        &env.app,
        Method::GET,
        "/iceberg/v1/config?warehouse=acme/lake",
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let listed: Vec<&str> = cfg["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(listed, flotilla_iceberg_rest::ENDPOINTS);
    // The catalog id works in place of its name.
    let by_id = format!("/iceberg/v1/config?warehouse=acme/{}", env.catalog_id);
    let (s, cfg2) = call(&env.app, Method::GET, &by_id, Some(ACME), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(cfg2["overrides"]["prefix"], cfg["overrides"]["prefix"]);
    // Every advertised route is routed (nothing listed answers "no such route").
    env.namespace("probe").await;
    env.table("probe", "t").await;
    for e in flotilla_iceberg_rest::ENDPOINTS {
        let (verb, path) = e.split_once(' ').unwrap();
        let path = path
            .replace("/v1/{prefix}", &format!("/iceberg/v1/{}", env.prefix))
            .replace("{namespace}", "probe")
            .replace("{table}", "t")
            .replace("{view}", "nope");
        let method = Method::from_bytes(verb.as_bytes()).unwrap();
        let body = (method == Method::POST).then(|| json!({}));
        let (s, v) = env.call(method, &path, body).await;
        assert_ne!(s, StatusCode::METHOD_NOT_ALLOWED, "{e}: {v}");
        if s == StatusCode::NOT_FOUND && verb != "HEAD" {
            assert!(
                v["error"]["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("NoSuch")),
                "{e}: {v}"
            );
        }
    }
    // Unknown warehouse, missing warehouse, foreign account, no token.
    let (s, v) = call(
        &env.app,
        Method::GET,
        "/iceberg/v1/config?warehouse=acme/none",
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert!(v["error"]["type"].is_string() && v["error"]["code"] == 404);
    let (s, _) = call(
        &env.app,
        Method::GET,
        "/iceberg/v1/config",
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, v) = call(
        &env.app,
        Method::GET,
        "/iceberg/v1/config?warehouse=acme/lake",
        Some(OTHER),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = call(
        &env.app,
        Method::GET,
        "/iceberg/v1/config?warehouse=acme/lake",
        None,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"]["type"], "NotAuthorizedException");
}

async fn form(app: &Router, body: &str, basic: Option<&str>) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/iceberg/v1/oauth/tokens")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(b) = basic {
        use base64::Engine;
        let enc = base64::engine::general_purpose::STANDARD.encode(b);
        req = req.header(header::AUTHORIZATION, format!("Basic {enc}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn oauth_client_credentials_exchange() {
    let env = setup().await;
    let (s, v) = form(&env.app, &format!("grant_type=client_credentials&client_id=x&client_secret={ACME}&scope=PRINCIPAL_ROLE%3AALL"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["token_type"], "bearer");
    let token = v["access_token"].as_str().unwrap();
    let (s, _) = call(
        &env.app,
        Method::GET,
        &env.url("namespaces"),
        Some(token),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // HTTP Basic, as DuckDB sends it.
    let (s, _) = form(
        &env.app,
        "grant_type=client_credentials",
        Some(&format!("anyone:{ACME}")),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // A wrong secret is refused and never echoed.
    let (s, v) = form(
        &env.app,
        "grant_type=client_credentials&client_id=x&client_secret=wrong-secret-123",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(v["error"], "invalid_client");
    assert!(!v.to_string().contains("wrong-secret-123"));
    let (s, v) = form(&env.app, "grant_type=password&client_secret=x", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "unsupported_grant_type");
}

#[tokio::test]
async fn namespaces_round_trip() {
    let env = setup().await;
    env.namespace("a").await;
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces"),
            Some(json!({"namespace": ["a", "b"], "properties": {"k": "1"}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces"),
            Some(json!({"namespace": ["a"]})),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error"]["type"], "AlreadyExistsException");
    let (_, v) = env.call(Method::GET, &env.url("namespaces"), None).await;
    assert_eq!(v["namespaces"], json!([["a"]]));
    let (_, v) = env
        .call(Method::GET, &env.url("namespaces?parent=a"), None)
        .await;
    assert_eq!(v["namespaces"], json!([["a", "b"]]));
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/a%1Fb"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["properties"], json!({"k": "1"}));
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/a%1Fb"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/zzz"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/a%1Fb/properties"),
            Some(json!({"updates": {"x": "y"}, "removals": ["k", "missing"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"updated": ["x"], "removed": ["k"], "missing": ["missing"]})
    );
    let (_, v) = env
        .call(Method::GET, &env.url("namespaces/a%1Fb"), None)
        .await;
    assert_eq!(v["properties"], json!({"x": "y"}));
    // Paging.
    for i in 0..3 {
        env.namespace(&format!("p{i}")).await;
    }
    let (_, v) = env
        .call(Method::GET, &env.url("namespaces?pageSize=2"), None)
        .await;
    assert_eq!(v["namespaces"].as_array().unwrap().len(), 2);
    let token = v["next-page-token"].as_str().unwrap().to_owned();
    let (_, v2) = env
        .call(
            Method::GET,
            &env.url(&format!("namespaces?pageSize=2&pageToken={token}")),
            None,
        )
        .await;
    assert_eq!(v2["namespaces"].as_array().unwrap().len(), 2);
    // A non-empty namespace is not dropped.
    let (s, v) = env
        .call(Method::DELETE, &env.url("namespaces/a"), None)
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["type"], "NamespaceNotEmptyException");
    let (s, _) = env
        .call(Method::DELETE, &env.url("namespaces/a%1Fb"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/a%1Fb"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["type"], "NoSuchNamespaceException");
}

#[tokio::test]
async fn one_table_two_doors_and_directory_generations() {
    let env = setup().await;
    env.namespace("db").await;
    let created = env.table("db", "events").await;
    let loc = created["metadata-location"].as_str().unwrap().to_owned();
    assert!(
        loc.starts_with("file:///") && loc.ends_with(".metadata.json"),
        "{loc}"
    );
    assert_eq!(created["metadata"]["properties"]["owner"], "test");
    // The same table through /v1.
    let v1 = format!(
        "/v1/accounts/acme/catalogs/{}/namespaces/db/tables/events",
        env.catalog_id
    );
    let (s, t) = env.call(Method::GET, &v1, None).await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert_eq!(t["format"], "ICEBERG");
    assert_eq!(t["metadata_location"], loc.as_str());
    assert_eq!(t["schema"]["fields"][1]["name"], "v");
    let (_, listed) = env
        .call(Method::GET, &env.url("namespaces/db/tables"), None)
        .await;
    assert_eq!(
        listed["identifiers"],
        json!([{"namespace": ["db"], "name": "events"}])
    );

    // A data-only commit leaves the directory generation alone.
    let gen0 = env.generation().await;
    let (s, c) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/events"),
            Some(append(10, None, 1)),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(env.generation().await, gen0);
    let loc1 = c["metadata-location"].as_str().unwrap().to_owned();
    assert_ne!(loc1, loc);
    assert!(loc1.contains("/metadata/00001-"), "{loc1}");
    let (_, t) = env.call(Method::GET, &v1, None).await;
    assert_eq!(t["metadata_location"], loc1.as_str());
    let (_, l) = env
        .call(Method::GET, &env.url("namespaces/db/tables/events"), None)
        .await;
    assert_eq!(l["metadata"]["current-snapshot-id"], 10);
    assert_eq!(
        l["metadata"]["metadata-log"][0]["metadata-file"],
        loc.as_str()
    );

    // A schema change moves it, and /v1 shows the new schema.
    let evolve = json!({
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 2, "name": "v", "required": false, "type": "string"},
                {"id": 3, "name": "extra", "required": false, "type": "int"},
            ]}},
            {"action": "set-current-schema", "schema-id": -1},
        ],
    });
    let (s, c) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/events"),
            Some(evolve.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_ne!(env.generation().await, gen0);
    let (_, t) = env.call(Method::GET, &v1, None).await;
    assert_eq!(t["schema"]["fields"][2]["name"], "extra");
    // The same requirement is now stale.
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/events"),
            Some(evolve),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(v["error"]["type"], "CommitFailedException");

    // A table created through /v1 with a metadata location loads here.
    let (s, v) = env
        .call(
            Method::POST,
            &format!("/v1/accounts/acme/catalogs/{}/namespaces/db/tables", env.catalog_id),
            Some(json!({"name": "registered", "schema": schema(), "format": "ICEBERG", "metadata_location": loc})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, l) = env
        .call(
            Method::GET,
            &env.url("namespaces/db/tables/registered"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{l}");
    assert_eq!(l["metadata-location"], loc.as_str());
    // ... but a metadata location outside the warehouse is refused, not read.
    let (s, _) = env
        .call(
            Method::POST,
            &format!("/v1/accounts/acme/catalogs/{}/namespaces/db/tables", env.catalog_id),
            Some(json!({"name": "outside", "schema": schema(), "format": "ICEBERG", "metadata_location": "file:///etc/passwd"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/db/tables/outside"), None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(!v.to_string().contains("root:"));

    // Rename, exists, drop with purge.
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("tables/rename"),
            Some(json!({
                "source": {"namespace": ["db"], "name": "events"},
                "destination": {"namespace": ["db"], "name": "events2"},
            })),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/events"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/events2"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let table_dir = created["metadata"]["location"]
        .as_str()
        .unwrap()
        .strip_prefix("file://")
        .unwrap()
        .to_owned();
    assert!(std::path::Path::new(&table_dir).join("metadata").exists());
    let (s, _) = env
        .call(
            Method::DELETE,
            &env.url("namespaces/db/tables/events2?purgeRequested=true"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(
        !std::path::Path::new(&table_dir)
            .join("metadata")
            .join(loc.rsplit('/').next().unwrap())
            .exists()
    );
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/db/tables/events2"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["type"], "NoSuchTableException");
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/nope/tables/x"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["type"], "NoSuchNamespaceException");
}

#[tokio::test]
async fn stale_base_is_commit_failed_and_changes_nothing() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "t").await;
    let url = env.url("namespaces/db/tables/t");
    let (s, first) = env.call(Method::POST, &url, Some(append(1, None, 1))).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    // A second writer on the same (empty) base loses.
    let (s, v) = env.call(Method::POST, &url, Some(append(2, None, 1))).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["type"], "CommitFailedException");
    let (_, l) = env.call(Method::GET, &url, None).await;
    assert_eq!(l["metadata-location"], first["metadata-location"]);
    assert_eq!(l["metadata"]["current-snapshot-id"], 1);
    // Retrying on the new base lands.
    let (s, v) = env
        .call(Method::POST, &url, Some(append(2, Some(1), 2)))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // Bad updates are 400 and change nothing.
    let (s, v) = env
        .call(Method::POST, &url, Some(json!({"requirements": [], "updates": [{"action": "set-current-schema", "schema-id": 42}]})))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = env
        .call(
            Method::POST,
            &url,
            Some(json!({"updates": [{"action": "no-such-action"}]})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["type"], "BadRequestException");
    let (_, l) = env.call(Method::GET, &url, None).await;
    assert_eq!(l["metadata"]["current-snapshot-id"], 2);
}

#[tokio::test]
async fn unknown_store_outcome_is_reported_not_guessed() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "t").await;
    let url = env.url("namespaces/db/tables/t");
    // The write landed but the answer was lost: the pointer shows it, so the commit succeeds.
    env.store.fail_when(Fault::ApplyThenUnknown, 1, |_| true);
    let (s, v) = env.call(Method::POST, &url, Some(append(1, None, 1))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, l) = env.call(Method::GET, &url, None).await;
    assert_eq!(l["metadata"]["current-snapshot-id"], 1);
    // It did not land: the state is unknown to the server, and it says so with a 5xx.
    env.store.fail_when(Fault::UnknownNotApplied, 1, |_| true);
    let (s, v) = env
        .call(Method::POST, &url, Some(append(2, Some(1), 2)))
        .await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
    assert_eq!(v["error"]["type"], "CommitStateUnknownException");
    assert!(!v.to_string().contains("injected"));
    // A retryable failure is retried inside the request.
    env.store.fail_when(Fault::FailBeforeApply, 1, |_| true);
    let (s, v) = env
        .call(Method::POST, &url, Some(append(3, Some(1), 2)))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn multi_table_transaction_is_all_or_nothing() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "a").await;
    env.table("db", "b").await;
    let with_id = |name: &str, body: Value| {
        let mut b = body;
        b["identifier"] = json!({"namespace": ["db"], "name": name});
        b
    };
    let tx = json!({"table-changes": [with_id("a", append(1, None, 1)), with_id("b", append(2, None, 1))]});
    let (s, v) = env
        .call(Method::POST, &env.url("transactions/commit"), Some(tx))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    // One stale member fails the whole transaction.
    let tx = json!({"table-changes": [with_id("a", append(3, Some(1), 2)), with_id("b", append(4, None, 1))]});
    let (s, v) = env
        .call(Method::POST, &env.url("transactions/commit"), Some(tx))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (_, a) = env
        .call(Method::GET, &env.url("namespaces/db/tables/a"), None)
        .await;
    let (_, b) = env
        .call(Method::GET, &env.url("namespaces/db/tables/b"), None)
        .await;
    assert_eq!(a["metadata"]["current-snapshot-id"], 1);
    assert_eq!(b["metadata"]["current-snapshot-id"], 2);
    // A lost store write fails it too, atomically.
    env.store.fail_when(Fault::FailBeforeApply, 8, |_| true);
    let tx = json!({"table-changes": [with_id("a", append(3, Some(1), 2)), with_id("b", append(4, Some(2), 2))]});
    let (s, _) = env
        .call(Method::POST, &env.url("transactions/commit"), Some(tx))
        .await;
    assert!(s == StatusCode::CONFLICT || s.is_server_error(), "{s}");
    env.store.clear();
    let (_, a) = env
        .call(Method::GET, &env.url("namespaces/db/tables/a"), None)
        .await;
    let (_, b) = env
        .call(Method::GET, &env.url("namespaces/db/tables/b"), None)
        .await;
    assert_eq!(a["metadata"]["current-snapshot-id"], 1);
    assert_eq!(b["metadata"]["current-snapshot-id"], 2);
}

#[tokio::test]
async fn staged_create_commits_with_assert_create() {
    let env = setup().await;
    env.namespace("db").await;
    let (s, staged) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(json!({"name": "s", "schema": schema(), "stage-create": true})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{staged}");
    assert!(staged.get("metadata-location").is_none());
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/s"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let m = &staged["metadata"];
    let commit = json!({
        "requirements": [{"type": "assert-create"}],
        "updates": [
            {"action": "assign-uuid", "uuid": m["table-uuid"]},
            {"action": "upgrade-format-version", "format-version": 2},
            {"action": "add-schema", "schema": m["schemas"][0]},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "set-location", "location": m["location"]},
            {"action": "set-properties", "updates": {"k": "v"}},
        ],
    });
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/s"),
            Some(commit.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["table-uuid"], m["table-uuid"]);
    assert_eq!(v["metadata"]["properties"]["k"], "v");
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/s"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/s"),
            Some(commit),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
}

#[tokio::test]
async fn other_accounts_see_nothing_and_overlays_are_read_only() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "t").await;
    let url = env.url("namespaces/db/tables/t");
    for (m, p, b) in [
        (Method::GET, env.url("namespaces"), None),
        (Method::GET, env.url("namespaces/db/tables"), None),
        (Method::GET, url.clone(), None),
        (Method::POST, url.clone(), Some(append(1, None, 1))),
        (Method::DELETE, url.clone(), None),
    ] {
        let (s, v) = call(&env.app, m.clone(), &p, Some(OTHER), b).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{m} {p}: {v}");
        assert!(!v.to_string().contains("\"t\""), "{v}");
    }
    let (s, _) = call(&env.app, Method::GET, &url, None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Mark the table overlay-managed, as materialization does.
    let k = keys::relation(
        &env.catalog_id,
        &flotilla_domain::names::NamespacePath::new(vec!["db".into()]).unwrap(),
        "t",
    );
    let key = k;
    let item = env
        .store
        .get(&key, Consistency::Strong)
        .await
        .unwrap()
        .unwrap();
    let mut rec: Value = serde_json::from_slice(&item.body).unwrap();
    rec["managed_by"] = json!({
        "integration_id": "int1", "overlay_id": "ov-42", "external_id": "x", "stable": true,
        "upstream_namespace": ["u"], "upstream_name": "t",
    });
    env.store
        .transact(Transaction::new().with(Op::replace(
            key,
            item.version,
            serde_json::to_vec(&rec).unwrap(),
        )))
        .await
        .unwrap();
    let (s, _) = env.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = env.call(Method::POST, &url, Some(append(1, None, 1))).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["error"]["type"], "ForbiddenException");
    assert!(v["error"]["message"].as_str().unwrap().contains("ov-42"));
    let (s, v) = env.call(Method::DELETE, &url, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("ov-42"));
}

#[tokio::test]
async fn views_round_trip() {
    let env = setup().await;
    env.namespace("db").await;
    let version = |id: i64, sql: &str| {
        json!({
            "version-id": id, "schema-id": 0, "timestamp-ms": 1_700_000_000_000i64,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
            "default-namespace": ["db"],
        })
    };
    let (s, v) = env
        .call(Method::POST, &env.url("namespaces/db/views"), Some(json!({
            "name": "v", "schema": schema(), "view-version": version(1, "SELECT 1"), "properties": {},
        })))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let uuid = v["metadata"]["view-uuid"].clone();
    let v1 = format!(
        "/v1/accounts/acme/catalogs/{}/namespaces/db/views/v",
        env.catalog_id
    );
    let (s, rec) = env.call(Method::GET, &v1, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(rec["definitions"][0]["sql"], "SELECT 1");
    let (_, l) = env
        .call(Method::GET, &env.url("namespaces/db/views"), None)
        .await;
    assert_eq!(
        l["identifiers"],
        json!([{"namespace": ["db"], "name": "v"}])
    );
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/views/v"),
            Some(json!({
                "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
                "updates": [
                    {"action": "add-view-version", "view-version": version(2, "SELECT 2")},
                    {"action": "set-current-view-version", "view-version-id": -1},
                ],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, rec) = env.call(Method::GET, &v1, None).await;
    assert_eq!(rec["definitions"][0]["sql"], "SELECT 2");
    let (s, v) = env
        .call(Method::POST, &env.url("namespaces/db/views/v"), Some(json!({
            "requirements": [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
            "updates": [],
        })))
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, _) = env
        .call(
            Method::POST,
            &env.url("views/rename"),
            Some(json!({
                "source": {"namespace": ["db"], "name": "v"},
                "destination": {"namespace": ["db"], "name": "w"},
            })),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, l) = env
        .call(Method::GET, &env.url("namespaces/db/views/w"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(l["metadata"]["current-version-id"], 2);
    // A view is not a table.
    let (s, _) = env
        .call(Method::GET, &env.url("namespaces/db/tables/w"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = env
        .call(Method::DELETE, &env.url("namespaces/db/views/w"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = env
        .call(Method::HEAD, &env.url("namespaces/db/views/w"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
}

// ---- conformance: what engines send comes back as they sent it -------------------------

/// `format-version` at create chooses the table version (1, 2, 3; also for a staged create
/// committed with `assert-create`) and is not stored as a property; an unknown version is
/// `400` naming it, and creates nothing.
#[tokio::test]
async fn create_honours_format_version_and_names_an_unknown_one() {
    let env = setup().await;
    env.namespace("db").await;
    for v in [1, 2, 3] {
        let (s, t) = env
            .call(
                Method::POST,
                &env.url("namespaces/db/tables"),
                Some(json!({"name": format!("v{v}"), "schema": schema(),
                    "properties": {"format-version": v.to_string(), "owner": "x"}})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["metadata"]["format-version"], v);
        assert_eq!(t["metadata"]["properties"], json!({"owner": "x"}));
        let (s, l) = env
            .call(
                Method::GET,
                &env.url(&format!("namespaces/db/tables/v{v}")),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{l}");
        assert_eq!(l["metadata"]["format-version"], v);
    }
    let (s, e) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(json!({"name": "v4", "schema": schema(), "properties": {"format-version": "4"}})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("format-version") && msg.contains("\"4\""),
        "{msg}"
    );
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/v4"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Staged, as pyiceberg's create_table_transaction and Spark's CTAS do.
    let (s, staged) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(
                json!({"name": "staged", "schema": schema(), "stage-create": true,
                "properties": {"format-version": "1"}}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{staged}");
    let m = &staged["metadata"];
    assert_eq!(m["format-version"], 1);
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/staged"),
            Some(
                json!({"requirements": [{"type": "assert-create"}], "updates": [
                    {"action": "assign-uuid", "uuid": m["table-uuid"]},
                    {"action": "upgrade-format-version", "format-version": 1},
                    {"action": "add-schema", "schema": m["schemas"][0]},
                    {"action": "set-current-schema", "schema-id": -1},
                    {"action": "set-location", "location": m["location"]},
                ]}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["format-version"], 1);
}

/// A schema whose ids the client assigned depth first (map key 2, value 3, struct field
/// 4, ...) keeps them: in the create answer, on load, through `/v1`, in the partition spec
/// and sort order, and through a staged create. Ids the spec does not allow, and one id on
/// two fields, are `400` and create nothing.
#[tokio::test]
async fn create_keeps_the_field_ids_the_client_assigned() {
    let env = setup().await;
    env.namespace("db").await;
    let nested = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "m", "required": false, "type": {"type": "map",
            "key-id": 2, "key": "string", "value-id": 3, "value-required": false,
            "value": {"type": "struct", "fields": [
                {"id": 4, "name": "a", "required": false, "type": "int"}]}}},
        {"id": 5, "name": "l", "required": false, "type": {"type": "list",
            "element-id": 6, "element": "long", "element-required": false}},
        {"id": 7, "name": "k", "required": true, "type": "long"},
    ]});
    let ids = |schema: &Value| -> Value {
        let f = &schema["fields"];
        json!([
            f[0]["id"],
            f[0]["type"]["key-id"],
            f[0]["type"]["value-id"],
            f[0]["type"]["value"]["fields"][0]["id"],
            f[1]["id"],
            f[1]["type"]["element-id"],
            f[2]["id"]
        ])
    };
    let want = json!([1, 2, 3, 4, 5, 6, 7]);
    let (s, t) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(json!({"name": "n", "schema": nested,
                "partition-spec": {"spec-id": 0, "fields": [
                    {"source-id": 7, "field-id": 1000, "name": "k_b", "transform": "bucket[4]"}]},
                "write-order": {"order-id": 1, "fields": [
                    {"source-id": 7, "transform": "identity", "direction": "asc",
                     "null-order": "nulls-first"}]}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let m = &t["metadata"];
    assert_eq!(ids(&m["schemas"][0]), want, "{m}");
    assert_eq!(m["last-column-id"], 7);
    assert_eq!(m["partition-specs"][0]["fields"][0]["source-id"], 7);
    assert_eq!(m["sort-orders"][0]["fields"][0]["source-id"], 7, "{m}");
    let (_, l) = env
        .call(Method::GET, &env.url("namespaces/db/tables/n"), None)
        .await;
    assert_eq!(ids(&l["metadata"]["schemas"][0]), want);
    let (s, r) = env
        .call(
            Method::GET,
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/db/tables/n",
                env.catalog_id
            ),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(ids(&r["schema"]), want);

    // A staged create committed with its schema keeps the ids as well, and one schema.
    let (_, staged) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(json!({"name": "s", "schema": nested, "stage-create": true})),
        )
        .await;
    let sm = &staged["metadata"];
    assert_eq!(ids(&sm["schemas"][0]), want);
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/s"),
            Some(
                json!({"requirements": [{"type": "assert-create"}], "updates": [
                    {"action": "assign-uuid", "uuid": sm["table-uuid"]},
                    {"action": "add-schema", "schema": nested},
                    {"action": "set-current-schema", "schema-id": -1},
                    {"action": "set-location", "location": sm["location"]},
                ]}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["schemas"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(ids(&v["metadata"]["schemas"][0]), want);

    // An id the spec does not allow, and two fields with one id: refused, never renumbered.
    let mut bad = nested.clone();
    bad["fields"][0]["type"]["key-id"] = json!(-2);
    let mut dup = nested.clone();
    dup["fields"][1]["type"]["element-id"] = json!(4);
    for (name, schema, want) in [
        ("bad", bad, "field id -2 of m.key"),
        ("dup", dup, "duplicate 'field.id' 4"),
    ] {
        let (s, e) = env
            .call(
                Method::POST,
                &env.url("namespaces/db/tables"),
                Some(json!({"name": name, "schema": schema})),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{msg}");
    }
    for name in ["bad", "dup"] {
        let (s, _) = env
            .call(
                Method::HEAD,
                &env.url(&format!("namespaces/db/tables/{name}")),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{name}");
    }
}

/// The object behind a `file://` metadata location.
fn metadata_file(location: &Value) -> Value {
    let path = location.as_str().unwrap().strip_prefix("file://").unwrap();
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Snapshots come back in commit order in every commit answer, every load and the file on
/// disk (not in the order of the crate's hash map).
#[tokio::test]
async fn snapshots_keep_commit_order_in_answers_loads_and_files() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "t").await;
    let order = |m: &Value| -> Vec<i64> {
        m["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["snapshot-id"].as_i64().unwrap())
            .collect()
    };
    // Ids in no particular order: commit order is the loop's.
    let ids: Vec<i64> = (0..16).map(|i| (i * 7919 + 13) % 1000 + 1).collect();
    let mut base = None;
    for (i, id) in ids.iter().enumerate() {
        let (s, v) = env
            .call(
                Method::POST,
                &env.url("namespaces/db/tables/t"),
                Some(append(*id, base, i as i64 + 1)),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(order(&v["metadata"]), ids[..=i], "commit answer {i}");
        assert_eq!(
            order(&metadata_file(&v["metadata-location"])),
            ids[..=i],
            "file {i}"
        );
        base = Some(*id);
    }
    for _ in 0..3 {
        let (_, l) = env
            .call(Method::GET, &env.url("namespaces/db/tables/t"), None)
            .await;
        assert_eq!(order(&l["metadata"]), ids);
    }
}

/// A float default comes back as written (`22.27`, not `22.270000457763672`) through
/// `add-schema` (on a table upgraded to version 3, so nothing but the literal is new), in
/// the commit answer, on load, in the file and through `/v1`, and at create; a default the
/// catalog cannot store is `400` and changes nothing.
#[tokio::test]
async fn float_defaults_round_trip_as_written() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "t").await;
    let evolved = json!({"type": "struct", "schema-id": 1, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "v", "required": false, "type": "string"},
        {"id": 3, "name": "f", "required": false, "type": "float",
         "initial-default": 22.27, "write-default": 22.27},
        {"id": 4, "name": "g", "required": false, "type": "float",
         "initial-default": 0.1, "write-default": 1.3},
    ]});
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/t"),
            Some(json!({"requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
                "updates": [{"action": "upgrade-format-version", "format-version": 3},
                            {"action": "add-schema", "schema": evolved},
                            {"action": "set-current-schema", "schema-id": -1}]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // The schema found by id, not by position: this test is about the literals.
    let check = |m: &Value| {
        let schemas = m["schemas"].as_array().unwrap();
        let s = schemas.iter().find(|s| s["schema-id"] == 1).unwrap();
        let f = &s["fields"];
        assert_eq!((&f[2]["id"], &f[3]["id"]), (&json!(3), &json!(4)), "{m}");
        assert_eq!(f[2]["initial-default"], json!(22.27), "{m}");
        assert_eq!(f[2]["write-default"], json!(22.27), "{m}");
        assert_eq!(f[3]["initial-default"], json!(0.1), "{m}");
        assert_eq!(f[3]["write-default"], json!(1.3), "{m}");
    };
    check(&v["metadata"]);
    check(&metadata_file(&v["metadata-location"]));
    let (_, l) = env
        .call(Method::GET, &env.url("namespaces/db/tables/t"), None)
        .await;
    check(&l["metadata"]);
    let (_, r) = env
        .call(
            Method::GET,
            &format!(
                "/v1/accounts/acme/catalogs/{}/namespaces/db/tables/t",
                env.catalog_id
            ),
            None,
        )
        .await;
    assert_eq!(
        r["schema"]["fields"][2]["write-default"],
        json!(22.27),
        "{r}"
    );
    assert_eq!(r["schema"]["fields"][3]["write-default"], json!(1.3), "{r}");

    // At create, on a version 3 table.
    let (s, c) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables"),
            Some(json!({"name": "c", "schema": evolved, "properties": {"format-version": "3"}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    let f = &c["metadata"]["schemas"][0]["fields"];
    assert_eq!(f[2]["write-default"], json!(22.27), "{c}");
    assert_eq!(f[3]["initial-default"], json!(0.1), "{c}");

    // A nanosecond timestamp default would be dropped by the crate: refused, nothing moves.
    let mut ns = evolved.clone();
    ns["schema-id"] = json!(2);
    ns["fields"].as_array_mut().unwrap().push(
        json!({"id": 5, "name": "ts", "required": false, "type": "timestamp_ns",
            "write-default": "2017-11-16T22:31:08.000000001"}),
    );
    let (s, e) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/t"),
            Some(json!({"updates": [{"action": "add-schema", "schema": ns},
                                    {"action": "set-current-schema", "schema-id": -1}]})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("field ts"),
        "{e}"
    );
    let (_, after) = env
        .call(Method::GET, &env.url("namespaces/db/tables/t"), None)
        .await;
    assert_eq!(after["metadata-location"], l["metadata-location"]);
}

/// Views too: versions in id order in every answer and file, a float default of the view's
/// schema as written.
#[tokio::test]
async fn views_keep_version_order_and_float_defaults() {
    let env = setup().await;
    env.namespace("db").await;
    let version = |id: i64| {
        json!({
            "version-id": id, "schema-id": 0, "timestamp-ms": 1_700_000_000_000i64 + id,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": format!("SELECT {id}"), "dialect": "spark"}],
            "default-namespace": ["db"],
        })
    };
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "f", "required": false, "type": "float", "write-default": 22.27}]});
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/views"),
            Some(json!({
                "name": "v", "schema": schema, "view-version": version(1), "properties": {},
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut last = v;
    for id in 2..=12 {
        let (s, v) = env
            .call(
                Method::POST,
                &env.url("namespaces/db/views/v"),
                Some(json!({"updates": [
                    {"action": "add-view-version", "view-version": version(id)},
                    {"action": "set-current-view-version", "view-version-id": -1},
                ]})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        last = v;
    }
    let ids = |m: &Value| -> Vec<i64> {
        m["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version-id"].as_i64().unwrap())
            .collect()
    };
    // The crate keeps the last 10 versions (`version.history.num-entries`).
    let want: Vec<i64> = (3..=12).collect();
    assert_eq!(ids(&last["metadata"]), want);
    assert_eq!(ids(&metadata_file(&last["metadata-location"])), want);
    let (_, l) = env
        .call(Method::GET, &env.url("namespaces/db/views/v"), None)
        .await;
    assert_eq!(ids(&l["metadata"]), want);
    assert_eq!(
        l["metadata"]["schemas"][0]["fields"][0]["write-default"],
        json!(22.27)
    );
}

/// Every event of the catalog through `POST /events`, resuming with the continuation token.
async fn iceberg_events(env: &Env, filter: Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut body = filter;
    body["page-size"] = json!(2);
    loop {
        let (s, v) = env
            .call(Method::POST, &env.url("events"), Some(body.clone()))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let events = v["events"].as_array().unwrap();
        if events.is_empty() {
            return out;
        }
        out.extend(events.iter().cloned());
        body["continuation-token"] = v["continuation-token"].clone();
    }
}

fn operation_types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["operation"]["operation-type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn iceberg_changes_write_events_and_a_transaction_one_per_table_with_one_request_id() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "a").await;
    env.table("db", "b").await;
    let with_id = |name: &str, body: Value| {
        let mut b = body;
        b["identifier"] = json!({"namespace": ["db"], "name": name});
        b
    };
    let tx = json!({"table-changes": [with_id("a", append(1, None, 1)), with_id("b", append(2, None, 1))]});
    let (s, v) = env
        .call(Method::POST, &env.url("transactions/commit"), Some(tx))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    // A refused commit (stale base) writes no event.
    let (s, _) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/tables/a"),
            Some(append(3, Some(9), 2)),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("tables/rename"),
            Some(json!({"source": {"namespace": ["db"], "name": "b"},
                "destination": {"namespace": ["db"], "name": "b2"}})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, _) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/properties"),
            Some(json!({"updates": {"k": "v"}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = env
        .call(Method::DELETE, &env.url("namespaces/db/tables/b2"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    let events = iceberg_events(&env, json!({})).await;
    assert_eq!(
        operation_types(&events),
        [
            "create-namespace",
            "create-table",
            "create-table",
            "update-table",
            "update-table",
            "rename-table",
            "update-namespace-properties",
            "drop-table",
        ]
    );
    let (_, a) = env
        .call(Method::GET, &env.url("namespaces/db/tables/a"), None)
        .await;
    let (first, second) = (&events[3], &events[4]);
    assert_eq!(first["request-id"], second["request-id"]);
    assert_ne!(first["request-id"], events[2]["request-id"]);
    assert_eq!(
        first["operation"]["identifier"],
        json!({"namespace": ["db"], "name": "a"})
    );
    assert_eq!(
        first["operation"]["metadata-location"],
        a["metadata-location"]
    );
    assert_eq!(
        first["operation"]["updates"],
        json!([{"action": "add-snapshot", "snapshot-id": 1},
            {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 1}])
    );
    assert_eq!(
        events[5]["operation"]["destination"],
        json!({"namespace": ["db"], "name": "b2"})
    );
    assert_eq!(events[0]["operation"]["namespace"], json!(["db"]));
    assert_eq!(events[0]["actor"]["type"], "PRINCIPAL");

    // Filters: operation types, objects by name, object types, time.
    let drops = iceberg_events(&env, json!({"operation-types": ["drop-table"]})).await;
    assert_eq!(operation_types(&drops), ["drop-table"]);
    let of_a = iceberg_events(&env, json!({"catalog-objects-by-name": [["db", "a"]]})).await;
    assert_eq!(operation_types(&of_a), ["create-table", "update-table"]);
    let namespaces = iceberg_events(&env, json!({"object-types": ["namespace"]})).await;
    assert_eq!(
        operation_types(&namespaces),
        ["create-namespace", "update-namespace-properties"]
    );
    let last = events[7]["timestamp-ms"].as_i64().unwrap();
    assert!(
        iceberg_events(&env, json!({"after-timestamp-ms": last}))
            .await
            .is_empty()
    );
    for bad in [
        json!({"operation-types": ["eat-table"]}),
        json!({"object-types": ["index"]}),
        json!({"continuation-token": "forged"}),
        json!({"page-size": 0}),
        json!({"surprise": true}),
    ] {
        let (s, v) = env
            .call(Method::POST, &env.url("events"), Some(bad.clone()))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!(v["error"]["type"], "BadRequestException", "{v}");
    }
}

/// Events of the catalog in the store (pending or sealed), without sealing anything.
async fn stored_events(env: &Env) -> Vec<Value> {
    let mut out = Vec::new();
    for prefix in [keys::EVENT_PENDING_PREFIX, keys::EVENT_LOG_PREFIX] {
        let items = flotilla_metastore::query_all(
            env.store.as_ref(),
            flotilla_metastore::Query::new(
                keys::catalog_pk(&env.catalog_id),
                prefix,
                Consistency::Strong,
            ),
        )
        .await
        .unwrap();
        out.extend(items.iter().map(|i| i.json::<Value>().unwrap()));
    }
    out
}

async fn update_events(env: &Env) -> usize {
    stored_events(env)
        .await
        .into_iter()
        .filter(|e| e["operation"]["type"] == "update-table")
        .count()
}

#[tokio::test]
async fn a_commit_at_every_store_fault_has_its_event_exactly_when_it_landed() {
    let env = setup().await;
    env.namespace("db").await;
    env.table("db", "a").await;
    env.table("db", "b").await;
    let mut base: Option<i64> = None;
    let mut seq = 1;
    for (i, fault) in [
        Fault::FailBeforeApply,
        Fault::Conflict,
        Fault::UnknownNotApplied,
        Fault::ApplyThenUnknown,
    ]
    .into_iter()
    .enumerate()
    {
        let id = 10 + i as i64;
        let before = update_events(&env).await;
        let injected = env.store.injected();
        env.store.fail_when(fault, 1, |_| true);
        let tx = json!({"table-changes": [
            {"identifier": {"namespace": ["db"], "name": "a"}, "requirements": append(id, base, seq)["requirements"], "updates": append(id, base, seq)["updates"]},
            {"identifier": {"namespace": ["db"], "name": "b"}, "requirements": append(id, base, seq)["requirements"], "updates": append(id, base, seq)["updates"]},
        ]});
        let (s, v) = env
            .call(Method::POST, &env.url("transactions/commit"), Some(tx))
            .await;
        env.store.clear();
        assert_eq!(env.store.injected(), injected + 1, "{fault:?} fired");
        let (_, a) = env
            .call(Method::GET, &env.url("namespaces/db/tables/a"), None)
            .await;
        let landed = a["metadata"]["current-snapshot-id"] == id;
        let written = update_events(&env).await - before;
        assert_eq!(
            written,
            if landed { 2 } else { 0 },
            "{fault:?}: answered {s} {v}, landed {landed}, {written} update events"
        );
        if landed {
            base = Some(id);
            seq += 1;
        }
    }
}

#[tokio::test]
async fn iceberg_registers_and_views_write_their_events() {
    let env = setup().await;
    env.namespace("db").await;
    let t = env.table("db", "t").await;
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/register"),
            Some(json!({"name": "again", "metadata-location": t["metadata-location"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let version = |id: i64, sql: &str| {
        json!({
            "version-id": id, "schema-id": 0, "timestamp-ms": 1_700_000_000_000i64,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
            "default-namespace": ["db"],
        })
    };
    let (s, v) = env
        .call(Method::POST, &env.url("namespaces/db/views"), Some(json!({
            "name": "v", "schema": schema(), "view-version": version(1, "SELECT 1"), "properties": {},
        })))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let uuid = v["metadata"]["view-uuid"].clone();
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/views/v"),
            Some(json!({
                "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
                "updates": [
                    {"action": "add-view-version", "view-version": version(2, "SELECT 2")},
                    {"action": "set-current-view-version", "view-version-id": -1},
                ],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let replaced_at = v["metadata-location"].clone();
    let (s, _) = env
        .call(
            Method::POST,
            &env.url("views/rename"),
            Some(json!({"source": {"namespace": ["db"], "name": "v"},
                "destination": {"namespace": ["db"], "name": "w"}})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = env
        .call(Method::DELETE, &env.url("namespaces/db/views/w"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = env
        .call(Method::DELETE, &env.url("namespaces/db/tables/again"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let events = iceberg_events(&env, json!({})).await;
    assert_eq!(
        operation_types(&events),
        [
            "create-namespace",
            "create-table",
            "register-table",
            "create-view",
            "replace-view",
            "rename-view",
            "drop-view",
            "drop-table",
        ]
    );
    assert_eq!(
        events[2]["operation"]["metadata-location"],
        t["metadata-location"]
    );
    assert_eq!(events[4]["operation"]["metadata-location"], replaced_at);
    let views = iceberg_events(&env, json!({"object-types": ["view"]})).await;
    assert_eq!(views.len(), 4);
}
