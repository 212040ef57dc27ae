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
        self.headers.get("etag").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
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
    let store = flotilla_metastore::redb_store::RedbMetastore::open(dir.path().join("meta.redb")).expect("open redb");
    (Arc::new(store), dir)
}

pub async fn dynamo_store() -> DynMetastore {
    let endpoint = flotilla_testkit::moto::endpoint();
    let table = flotilla_testkit::moto::unique_name("api");
    let client = flotilla_metastore::dynamo::connect(Some(&endpoint)).await;
    flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, &table).await.expect("create table");
    Arc::new(flotilla_metastore::dynamo::DynamoMetastore::new(client, table))
}

impl Harness {
    pub fn with_store(store: DynMetastore, dir: Option<tempfile::TempDir>, manual_clock: bool) -> Self {
        let (clock, manual): (Arc<dyn Clock>, Option<ManualClock>) = if manual_clock {
            let c = ManualClock::new(1_800_000_000_000);
            (Arc::new(c.clone()), Some(c))
        } else {
            (Arc::new(SystemClock), None)
        };
        let state = AppState::new(store, clock, Arc::new(tokens()), Config::default());
        Self { router: flotilla_core::router(state.clone()), state, clock: manual, _dir: dir }
    }

    pub fn redb() -> Self {
        let (store, dir) = redb_store();
        Self::with_store(store, Some(dir), false)
    }

    pub async fn dynamo() -> Self {
        Self::with_store(dynamo_store().await, None, false)
    }

    pub async fn call(&self, method: Method, path: &str, token: Option<&str>, body: Option<Value>, headers: &[(&str, &str)]) -> Resp {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = match body {
            Some(v) => b.header("content-type", "application/json").body(Body::from(v.to_string())),
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
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Resp { status, headers, body }
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None, &[]).await
    }
    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body), &[]).await
    }
    pub async fn patch(&self, path: &str, token: &str, body: Value, if_match: Option<&str>) -> Resp {
        let h: Vec<(&str, &str)> = if_match.map(|m| vec![("if-match", m)]).unwrap_or_default();
        self.call(Method::PATCH, path, Some(token), Some(body), &h).await
    }
    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.call(Method::DELETE, path, Some(token), None, &[]).await
    }

    /// Creates account `id` as the operator.
    pub async fn account(&self, id: &str) {
        let r = self.post("/v1/accounts", OPERATOR, serde_json::json!({"id": id})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    }

    /// Creates a catalog and answers its id.
    pub async fn catalog(&self, account: &str, token: &str, name: &str) -> String {
        let r = self.post(&format!("/v1/accounts/{account}/catalogs"), token, serde_json::json!({"display_name": name})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    pub async fn namespace(&self, account: &str, token: &str, catalog: &str, path: &[&str]) {
        let r = self
            .post(&format!("/v1/accounts/{account}/catalogs/{catalog}/namespaces"), token, serde_json::json!({"path": path}))
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
    path.iter().map(|s| urlencode(s)).collect::<Vec<_>>().join("%1F")
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
