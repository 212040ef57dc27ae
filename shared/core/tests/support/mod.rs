//! In-process API harness: the real router over a real metastore backend.

#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::{Clock, ManualClock, SystemClock};
use flotilla_core::{AppState, Config};
use flotilla_metastore::DynMetastore;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

pub const OPERATOR: &str = "operator-token-0001";
pub const ACME: &str = "acme-token-0001";
pub const BETA: &str = "beta-token-0001";

pub struct Harness {
    pub router: Router,
    pub state: AppState,
    pub clock: Option<ManualClock>,
    _dir: Option<tempfile::TempDir>,
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
    pub fn etag(&self) -> String {
        self.headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    }
}

pub fn tokens() -> StaticTokens {
    let mut t = StaticTokens::new();
    t.add(OPERATOR, true, vec![]);
    t.add(ACME, false, vec!["acme".into()]);
    t.add(BETA, false, vec!["beta".into()]);
    t
}

pub fn redb_store() -> (DynMetastore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("meta.redb"))
        .expect("open redb");
    (Arc::new(store), dir)
}

pub async fn dynamo_store() -> DynMetastore {
    dynamo_store_at(&flotilla_testkit::moto::endpoint()).await
}

/// DynamoDB on the single-threaded moto, for same-key races (see `moto::serial_endpoint`).
pub async fn dynamo_serial_store() -> DynMetastore {
    dynamo_store_at(&flotilla_testkit::moto::serial_endpoint()).await
}

async fn dynamo_store_at(endpoint: &str) -> DynMetastore {
    let endpoint = endpoint.to_owned();
    let table = flotilla_testkit::moto::unique_name("api");
    let client = flotilla_metastore::dynamo::connect(Some(&endpoint)).await;
    flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, &table)
        .await
        .expect("create table");
    Arc::new(flotilla_metastore::dynamo::DynamoMetastore::new(
        client, table,
    ))
}

/// The warehouse stores of the test hosts: `file://` warehouses below the system temporary
/// directory (where `tempfile` creates them), as `flotilla serve` admits them below its root.
pub fn test_warehouse_stores() -> Arc<dyn flotilla_parqdb::store::WarehouseStores> {
    let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&std::env::temp_dir())
        .expect("temporary directory as warehouse root");
    flotilla_core::service::index_catalogs::local_warehouse_stores(policy)
}

impl Harness {
    /// A harness over a state built elsewhere (its own tokens and settings).
    pub fn over(state: AppState) -> Self {
        Self {
            router: flotilla_core::router(state.clone()),
            state,
            clock: None,
            _dir: None,
        }
    }

    pub fn with_store(
        store: DynMetastore,
        dir: Option<tempfile::TempDir>,
        manual_clock: bool,
    ) -> Self {
        let (clock, manual): (Arc<dyn Clock>, Option<ManualClock>) = if manual_clock {
            let c = ManualClock::new(1_800_000_000_000);
            (Arc::new(c.clone()), Some(c))
        } else {
            (Arc::new(SystemClock), None)
        };
        let state = AppState::new(store, clock, Arc::new(tokens()), Config::default())
            .with_index_stores(test_warehouse_stores());
        Self {
            router: flotilla_core::router(state.clone()),
            state,
            clock: manual,
            _dir: dir,
        }
    }

    pub fn redb() -> Self {
        let (store, dir) = redb_store();
        Self::with_store(store, Some(dir), false)
    }

    pub async fn dynamo() -> Self {
        Self::with_store(dynamo_store().await, None, false)
    }

    pub async fn dynamo_serial() -> Self {
        Self::with_store(dynamo_serial_store().await, None, false)
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = match body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        }
        .expect("request");
        self.send(req).await
    }

    pub async fn send(&self, req: Request<Body>) -> Resp {
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None, &[]).await
    }
    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body), &[])
            .await
    }
    pub async fn patch(
        &self,
        path: &str,
        token: &str,
        body: Value,
        if_match: Option<&str>,
    ) -> Resp {
        let h: Vec<(&str, &str)> = if_match.map(|m| vec![("if-match", m)]).unwrap_or_default();
        self.call(Method::PATCH, path, Some(token), Some(body), &h)
            .await
    }
    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.call(Method::DELETE, path, Some(token), None, &[])
            .await
    }

    /// Creates account `id` as the operator.
    pub async fn account(&self, id: &str) {
        let r = self
            .post("/v1/accounts", OPERATOR, serde_json::json!({"id": id}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    /// Creates a catalog and answers its id.
    pub async fn catalog(&self, account: &str, token: &str, name: &str) -> String {
        let r = self
            .post(
                &format!("/v1/accounts/{account}/catalogs"),
                token,
                serde_json::json!({"display_name": name}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    /// Role `role` with member `group:{role}`, granted `privilege` on `securable`; answers
    /// the grant's id.
    pub async fn group_grant(
        &self,
        account: &str,
        token: &str,
        role: &str,
        privilege: &str,
        securable: Value,
    ) -> String {
        let a = format!("/v1/accounts/{account}");
        let r = self
            .post(
                &format!("{a}/roles"),
                token,
                serde_json::json!({"name": role}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        let member = format!("{a}/roles/{role}/members/group:{role}");
        let r = self
            .call(axum::http::Method::PUT, &member, Some(token), None, &[])
            .await;
        assert!(r.status.is_success(), "{:?}", r.body);
        let r = self
            .post(
                &format!("{a}/grants"),
                token,
                serde_json::json!({"role": role, "privilege": privilege, "securable": securable}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    pub async fn namespace(&self, account: &str, token: &str, catalog: &str, path: &[&str]) {
        let r = self
            .post(
                &format!("/v1/accounts/{account}/catalogs/{catalog}/namespaces"),
                token,
                serde_json::json!({"path": path}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }
}

pub fn schema() -> Value {
    serde_json::json!({"type": "struct", "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "name", "required": false, "type": "string"}
    ]})
}

pub fn table_body(name: &str) -> Value {
    serde_json::json!({"name": name, "schema": schema(), "format": "ICEBERG"})
}

/// `%1F`-joins a namespace path for a URL.
pub fn ns(path: &[&str]) -> String {
    path.iter()
        .map(|s| urlencode(s))
        .collect::<Vec<_>>()
        .join("%1F")
}

pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---- integrations and overlays ----------------------------------------------

/// The local encrypted credential store behind a fault injector (no faults planned until a
/// test injects one).
pub type FaultyCreds = flotilla_secrets::fault::FaultInjectingCredentialStore<
    flotilla_secrets::local::LocalEncryptedStore,
>;

/// A credential store in its own tempdir, as `flotilla serve` builds one.
pub struct Creds {
    pub store: Arc<FaultyCreds>,
    _dir: tempfile::TempDir,
}

impl Creds {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = flotilla_secrets::local::SecretKey::generate();
        let local = flotilla_secrets::local::LocalEncryptedStore::with_key(
            dir.path().join("secrets"),
            &key,
        )
        .expect("local store");
        Self {
            store: Arc::new(flotilla_secrets::fault::FaultInjectingCredentialStore::new(
                local,
            )),
            _dir: dir,
        }
    }

    pub fn dyn_store(&self) -> Arc<dyn flotilla_secrets::CredentialStore> {
        self.store.clone()
    }

    /// The stored fields of one generation, read past the fault injector.
    pub async fn fields(
        &self,
        account: &str,
        integration: &str,
        generation: u64,
    ) -> Option<serde_json::Map<String, Value>> {
        use flotilla_secrets::CredentialStore;
        let r = flotilla_secrets::SecretRef::new(account, integration, generation).expect("ref");
        self.store
            .inner()
            .get(&r)
            .await
            .expect("get")
            .map(|s| s.fields().expect("fields"))
    }

    pub async fn generations(&self, account: &str, integration: &str) -> Vec<u64> {
        use flotilla_secrets::CredentialStore;
        self.store
            .inner()
            .list(account, integration)
            .await
            .expect("list")
    }

    pub async fn all(&self, account: &str) -> Vec<flotilla_secrets::SecretRef> {
        use flotilla_secrets::CredentialStore;
        self.store
            .inner()
            .list_account(account)
            .await
            .expect("list_account")
    }
}

impl Default for Creds {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// The same harness with a credential store (integrations with secrets need one).
    pub fn with_credentials(mut self, store: Arc<dyn flotilla_secrets::CredentialStore>) -> Self {
        self.state = self.state.clone().with_credentials(store);
        self.router = flotilla_core::router(self.state.clone());
        self
    }

    /// The same harness with another configuration.
    pub fn with_config(mut self, config: Config) -> Self {
        self.state.config = config;
        self.router = flotilla_core::router(self.state.clone());
        self
    }

    /// Creates an ICEBERG_REST integration with bearer credentials and answers its id.
    pub async fn integration(&self, account: &str, token: &str, name: &str) -> String {
        let r = self
            .post(
                &format!("/v1/accounts/{account}/integrations"),
                token,
                integration_body(name, &format!("tok-{name}")),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    /// Creates an overlay and answers its id.
    pub async fn overlay(
        &self,
        account: &str,
        token: &str,
        name: &str,
        integration: &str,
        catalog: &str,
    ) -> String {
        let r = self
            .post(
                &format!("/v1/accounts/{account}/overlays"),
                token,
                serde_json::json!({"display_name": name, "integration_id": integration, "catalog_id": catalog}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }
}

/// An ICEBERG_REST integration with bearer authentication and `token` as its secret.
pub fn integration_body(name: &str, token: &str) -> Value {
    serde_json::json!({
        "display_name": name,
        "type": "ICEBERG_REST",
        "uri": "https://catalog.example.com/api",
        "properties": {"warehouse": "wh"},
        "authentication": {"type": "BEARER"},
        "credentials": {"token": token},
    })
}

fn ns_path(path: &[&str]) -> flotilla_domain::names::NamespacePath {
    flotilla_domain::names::NamespacePath::new(path.iter().map(|s| s.to_string()).collect())
        .expect("path")
}

async fn put_item(
    store: &dyn flotilla_metastore::Metastore,
    key: flotilla_metastore::Key,
    body: Value,
) {
    let tx = flotilla_metastore::Transaction::new().with(flotilla_metastore::Op::put(
        key,
        serde_json::to_vec(&body).expect("json"),
    ));
    store.transact(tx).await.expect("put");
}

/// Writes a namespace straight into the metastore, as overlay materialization would.
pub async fn put_namespace(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    path: &[&str],
    created_by_overlay: bool,
) {
    let rec = flotilla_domain::model::NamespaceRecord {
        id: flotilla_domain::names::new_id(),
        catalog_id: catalog.to_owned(),
        path: ns_path(path),
        properties: Default::default(),
        created_by_overlay,
        revision: 1,
        create_time: "2027-01-15T08:00:00Z".into(),
        update_time: "2027-01-15T08:00:00Z".into(),
    };
    let parts = flotilla_domain::keys::namespace(catalog, &rec.path);
    put_item(store, parts, serde_json::to_value(&rec).expect("json")).await;
}

/// Writes a relation managed by `overlay` (a materialized table).
pub async fn put_managed_table(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    ns: &[&str],
    name: &str,
    integration: &str,
    overlay: &str,
) {
    let rec = flotilla_domain::model::RelationRecord {
        id: flotilla_domain::names::new_id(),
        catalog_id: catalog.to_owned(),
        kind: flotilla_domain::model::RelationKind::Table,
        namespace: ns_path(ns),
        name: name.to_owned(),
        schema: schema(),
        format: Some("ICEBERG".into()),
        metadata_location: Some(format!("s3://up/{name}/metadata/v1.json")),
        location: Some(format!("s3://up/{name}")),
        definitions: Vec::new(),
        default_namespace: None,
        properties: Default::default(),
        managed_by: Some(flotilla_domain::model::ManagedBy {
            integration_id: integration.to_owned(),
            overlay_id: overlay.to_owned(),
            external_id: format!("{}.{name}", ns.join(".")),
            stable: false,
            upstream_namespace: ns.iter().map(|s| s.to_string()).collect(),
            upstream_name: name.to_owned(),
            upstream_fingerprint: None,
        }),
        revision: 1,
        create_time: "2027-01-15T08:00:00Z".into(),
        update_time: "2027-01-15T08:00:00Z".into(),
    };
    let parts = flotilla_domain::keys::relation(catalog, &rec.namespace, name);
    put_item(store, parts, serde_json::to_value(&rec).expect("json")).await;
}

/// Writes `overlay`'s namespace claim on `path`.
pub async fn put_claim(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    path: &[&str],
    overlay: &str,
    created_namespace: bool,
) {
    let rec = flotilla_domain::model::ClaimRecord {
        overlay_id: overlay.to_owned(),
        path: ns_path(path),
        created_namespace,
    };
    let parts = flotilla_domain::keys::namespace_claim(catalog, &rec.path, overlay);
    put_item(store, parts, serde_json::to_value(&rec).expect("json")).await;
}

pub async fn has_namespace(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    path: &[&str],
) -> bool {
    let flotilla_metastore::Key { pk, sk } =
        flotilla_domain::keys::namespace(catalog, &ns_path(path));
    store
        .get(
            &flotilla_metastore::Key::new(pk, sk),
            flotilla_metastore::Consistency::Strong,
        )
        .await
        .expect("get")
        .is_some()
}

pub async fn has_relation(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    ns: &[&str],
    name: &str,
) -> bool {
    let flotilla_metastore::Key { pk, sk } =
        flotilla_domain::keys::relation(catalog, &ns_path(ns), name);
    store
        .get(
            &flotilla_metastore::Key::new(pk, sk),
            flotilla_metastore::Consistency::Strong,
        )
        .await
        .expect("get")
        .is_some()
}

pub async fn has_claim(
    store: &dyn flotilla_metastore::Metastore,
    catalog: &str,
    path: &[&str],
    overlay: &str,
) -> bool {
    let flotilla_metastore::Key { pk, sk } =
        flotilla_domain::keys::namespace_claim(catalog, &ns_path(path), overlay);
    store
        .get(
            &flotilla_metastore::Key::new(pk, sk),
            flotilla_metastore::Consistency::Strong,
        )
        .await
        .expect("get")
        .is_some()
}

/// Every item of a partition whose sort key starts with `prefix` (strong read).
pub async fn items(
    store: &dyn flotilla_metastore::Metastore,
    pk: &str,
    prefix: &str,
) -> Vec<flotilla_metastore::Item> {
    flotilla_metastore::query_all(
        store,
        flotilla_metastore::Query::new(pk, prefix, flotilla_metastore::Consistency::Strong),
    )
    .await
    .expect("query")
}

/// A metastore that remembers every body a transaction wrote (for the secret canary: a
/// secret must never be written to the metastore, even transiently).
pub struct SpyMetastore {
    pub inner: DynMetastore,
    pub writes: std::sync::Mutex<Vec<(flotilla_metastore::Key, Vec<u8>)>>,
}

#[async_trait::async_trait]
impl flotilla_metastore::Metastore for SpyMetastore {
    async fn get(
        &self,
        key: &flotilla_metastore::Key,
        consistency: flotilla_metastore::Consistency,
    ) -> Result<Option<flotilla_metastore::Item>, flotilla_metastore::MetastoreError> {
        self.inner.get(key, consistency).await
    }
    async fn batch_get(
        &self,
        keys: &[flotilla_metastore::Key],
        consistency: flotilla_metastore::Consistency,
    ) -> Result<Vec<flotilla_metastore::Item>, flotilla_metastore::MetastoreError> {
        self.inner.batch_get(keys, consistency).await
    }
    async fn query(
        &self,
        query: &flotilla_metastore::Query,
    ) -> Result<flotilla_metastore::Page, flotilla_metastore::MetastoreError> {
        self.inner.query(query).await
    }
    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: flotilla_metastore::Consistency,
    ) -> Result<u64, flotilla_metastore::MetastoreError> {
        self.inner.count(pk, sk_prefix, consistency).await
    }
    async fn transact(
        &self,
        tx: flotilla_metastore::Transaction,
    ) -> Result<(), flotilla_metastore::MetastoreError> {
        {
            let mut w = self.writes.lock().unwrap_or_else(|p| p.into_inner());
            for op in &tx.ops {
                if let flotilla_metastore::Op::Put { key, body, .. } = op {
                    w.push((key.clone(), body.clone()));
                }
            }
        }
        self.inner.transact(tx).await
    }
}

/// Runs each case against redb and against DynamoDB on moto. The default hands each case a
/// fresh [`Harness`]; `redb: (args), dynamo: (args);` passes other arguments instead.
#[allow(unused_macros)]
macro_rules! both_backends {
    (redb: $r:tt, dynamo: $d:tt; $($name:ident),* $(,)?) => {
        mod redb {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() { super::$name $r.await; })*
        }
        mod dynamo {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() { super::$name $d.await; })*
        }
    };
    ($($name:ident),* $(,)?) => {
        both_backends!(redb: (Harness::redb()), dynamo: (Harness::dynamo().await); $($name),*);
    };
}
#[allow(unused_imports)]
pub(crate) use both_backends;
