//! What a deployment adds around the endpoint: credential vending through STS on an S3
//! warehouse (moto), warehouse tenant-prefix claims, table listings from the directory
//! replica (counted metastore reads), and views through both doors (`/v1` and `/iceberg`).

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_iceberg_rest::vending::{StsVending, Vending};
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot};
use flotilla_metastore::redb_store::RedbMetastore;
use object_store::ObjectStoreExt;
use serde_json::{Value, json};

const OPERATOR: &str = "deploy-operator-token";
const ACME: &str = "deploy-acme-token";
const OTHER: &str = "deploy-other-token";
const ROLE: &str = "arn:aws:iam::123456789012:role/flotilla-iceberg-vending";
const VENDED: &str = "vended-credentials";

struct Env {
    app: Router,
    store: Arc<CountingMetastore<RedbMetastore>>,
    _dir: tempfile::TempDir,
}

struct Opts {
    s3_endpoint: Option<String>,
    vending: Option<Arc<dyn Vending>>,
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
    delegation: bool,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    if delegation {
        req = req.header("X-Iceberg-Access-Delegation", VENDED);
    }
    support::send(app, req, body).await
}

async fn setup(opts: Opts) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(CountingMetastore::new(RedbMetastore::in_memory().unwrap()));
    let tokens = support::tokens(OPERATOR, ACME, OTHER);
    let state = AppState::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let root = dir.path().canonicalize().unwrap().join("warehouse");
    std::fs::create_dir_all(&root).unwrap();
    let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
    let mut stores = flotilla_parqdb::store::DefaultWarehouseStores::new();
    if let Some(e) = &opts.s3_endpoint {
        stores = stores.with_s3_endpoint(e.clone());
    }
    let state = state.with_index_stores(Arc::new(stores.with_policy(policy)));
    let app = flotilla_iceberg_rest::router(
        state,
        IcebergConfig {
            local_warehouse_root: Some(root),
            vending: opts.vending,
            ..Default::default()
        },
    );
    for a in ["acme", "other"] {
        let (s, _) = call(
            &app,
            Method::POST,
            "/v1/accounts",
            OPERATOR,
            Some(json!({"id": a})),
            false,
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    Env {
        app,
        store,
        _dir: dir,
    }
}

impl Env {
    async fn as_(
        &self,
        token: &str,
        m: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        call(&self.app, m, path, token, body, false).await
    }

    async fn acme(&self, m: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.as_(ACME, m, path, body).await
    }

    async fn vended(&self, m: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.app, m, path, ACME, body, true).await
    }

    /// A catalog of `account` (with `warehouse` as its property, if given): its id and the
    /// endpoint prefix, or the config error.
    async fn catalog(
        &self,
        token: &str,
        account: &str,
        name: &str,
        warehouse: Option<&str>,
    ) -> (String, Result<String, (StatusCode, Value)>) {
        let mut body = json!({"display_name": name});
        if let Some(w) = warehouse {
            body["properties"] = json!({"warehouse": w});
        }
        let (s, cat) = self
            .as_(
                token,
                Method::POST,
                &format!("/v1/accounts/{account}/catalogs"),
                Some(body),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{cat}");
        let id = cat["id"].as_str().unwrap().to_owned();
        let (s, cfg) = self
            .as_(
                token,
                Method::GET,
                &format!("/iceberg/v1/config?warehouse={account}/{name}"),
                None,
            )
            .await;
        if s != StatusCode::OK {
            return (id, Err((s, cfg)));
        }
        (
            id,
            Ok(cfg["overrides"]["prefix"].as_str().unwrap().to_owned()),
        )
    }

    fn counts(&self) -> MetricsSnapshot {
        self.store.snapshot()
    }
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "v", "required": false, "type": "string"},
    ]})
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn url(prefix: &str, rest: &str) -> String {
    format!("/iceberg/v1/{prefix}/{rest}")
}

// ---- credential vending on S3 (moto STS) ------------------------------------------------

fn moto() -> String {
    let endpoint = std::env::var("FLOTILLA_MOTO_ENDPOINT")
        .expect("FLOTILLA_MOTO_ENDPOINT is not set: the vending tests need moto (scripts/test.sh)");
    let sts = std::env::var("AWS_ENDPOINT_URL_STS")
        .expect("AWS_ENDPOINT_URL_STS is not set: vending in tests must reach moto's STS");
    assert!(
        sts.starts_with("http://127.0.0.1"),
        "STS endpoint {sts} is not local"
    );
    endpoint
}

async fn bucket(moto: &str, name: &str) {
    let r = reqwest::Client::new()
        .put(format!("{moto}/{name}"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success() || r.status().as_u16() == 409,
        "create bucket: {}",
        r.status()
    );
}

/// An object store holding exactly what an engine holds: the vended keys and the endpoint.
fn engine_store(config: &Value, bucket: &str) -> Arc<dyn object_store::ObjectStore> {
    let s = |k: &str| {
        config[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} missing: {config}"))
            .to_owned()
    };
    Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(s("s3.region"))
            .with_endpoint(s("s3.endpoint"))
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_access_key_id(s("s3.access-key-id"))
            .with_secret_access_key(s("s3.secret-access-key"))
            .with_token(s("s3.session-token"))
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn s3_tables_vend_sts_credentials_scoped_to_the_table_and_renew_them() {
    let moto = moto();
    let b = "flotilla-iceberg-vending";
    bucket(&moto, b).await;
    let sts = Arc::new(StsVending::new(ROLE, 3600, Some(moto.clone())).unwrap());
    let env = setup(Opts {
        s3_endpoint: Some(moto.clone()),
        vending: Some(sts.clone()),
    })
    .await;
    let warehouse = format!("s3://{b}/acme-{}/lake", uuid::Uuid::new_v4().simple());
    let (_, prefix) = env.catalog(ACME, "acme", "lake", Some(&warehouse)).await;
    let prefix = prefix.unwrap();
    // The config answers the S3 endpoint as an override (no secret in it).
    let (_, cfg) = env
        .acme(Method::GET, "/iceberg/v1/config?warehouse=acme/lake", None)
        .await;
    assert_eq!(cfg["overrides"]["s3.endpoint"], moto);
    assert_eq!(cfg["overrides"]["s3.path-style-access"], "true");
    assert!(cfg["overrides"].get("s3.access-key-id").is_none(), "{cfg}");
    let (s, _) = env
        .acme(
            Method::POST,
            &url(&prefix, "namespaces"),
            Some(json!({"namespace": ["db"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);

    let (s, created) = env
        .vended(
            Method::POST,
            &url(&prefix, "namespaces/db/tables"),
            Some(json!({"name": "t", "schema": schema()})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{created}");
    let location = created["metadata"]["location"].as_str().unwrap().to_owned();
    assert!(location.starts_with(&format!("{warehouse}/")), "{location}");
    let creds = &created["storage-credentials"];
    assert_eq!(creds.as_array().unwrap().len(), 1, "{created}");
    assert_eq!(creds[0]["prefix"], format!("{location}/"));
    let config = &creds[0]["config"];
    let key_id = config["s3.access-key-id"].as_str().unwrap().to_owned();
    assert_ne!(
        key_id,
        std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default(),
        "a long-lived key was handed out"
    );
    assert!(
        config["s3.session-token"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert!(config["s3.session-token-expires-at-ms"].as_str().is_some());
    assert_eq!(config["s3.endpoint"], moto);
    assert_eq!(created["config"]["s3.access-key-id"], key_id.as_str());
    assert_eq!(sts.sts_calls(), 1);

    // The vended keys reach the table's files (moto accepts them; AWS would also apply the
    // session policy, limited to this prefix: unit-tested in vending.rs).
    let engine = engine_store(config, b);
    let rel = location.strip_prefix(&format!("s3://{b}/")).unwrap();
    let data = object_store::path::Path::from(format!("{rel}/data/part-0.parquet"));
    engine
        .put(&data, bytes::Bytes::from_static(b"rows").into())
        .await
        .unwrap();
    let got = engine.get(&data).await.unwrap().bytes().await.unwrap();
    assert_eq!(&got[..], b"rows");
    let metadata = created["metadata-location"].as_str().unwrap();
    let meta_rel = metadata.strip_prefix(&format!("s3://{b}/")).unwrap();
    engine
        .get(&object_store::path::Path::from(meta_rel))
        .await
        .expect("the engine reads the metadata file with the vended keys");

    // Reloads reuse the cached credentials (no STS call each time)...
    let (s, loaded) = env
        .vended(Method::GET, &url(&prefix, "namespaces/db/tables/t"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{loaded}");
    assert_eq!(
        loaded["storage-credentials"][0]["config"]["s3.access-key-id"],
        key_id.as_str()
    );
    assert_eq!(sts.sts_calls(), 1);
    // ...and the credentials route renews them.
    let (s, renewed) = env
        .acme(
            Method::GET,
            &url(&prefix, "namespaces/db/tables/t/credentials"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{renewed}");
    let fresh = &renewed["storage-credentials"][0];
    assert_eq!(fresh["prefix"], format!("{location}/"));
    assert_ne!(
        fresh["config"]["s3.access-key-id"],
        key_id.as_str(),
        "renewal answered the old keys"
    );
    assert_eq!(sts.sts_calls(), 2);
    engine_store(&fresh["config"], b)
        .get(&data)
        .await
        .expect("the renewed keys work");

    // Without the header: no credentials, only the endpoint settings.
    let (_, plain) = env
        .acme(Method::GET, &url(&prefix, "namespaces/db/tables/t"), None)
        .await;
    assert!(plain.get("storage-credentials").is_none(), "{plain}");
    assert!(plain["config"].get("s3.access-key-id").is_none(), "{plain}");
    assert_eq!(plain["config"]["s3.endpoint"], moto);

    // A local (file://) warehouse on the same host vends nothing.
    let (_, local) = env.catalog(ACME, "acme", "local", None).await;
    let local = local.unwrap();
    env.acme(
        Method::POST,
        &url(&local, "namespaces"),
        Some(json!({"namespace": ["db"]})),
    )
    .await;
    let (s, t) = env
        .vended(
            Method::POST,
            &url(&local, "namespaces/db/tables"),
            Some(json!({"name": "t", "schema": schema()})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    assert!(t.get("storage-credentials").is_none(), "{t}");
    assert_eq!(t["config"], json!({}));
    let (_, c) = env
        .acme(
            Method::GET,
            &url(&local, "namespaces/db/tables/t/credentials"),
            None,
        )
        .await;
    assert_eq!(c["storage-credentials"], json!([]));
    assert_eq!(sts.sts_calls(), 2);
}

// ---- warehouse tenant-prefix claims -----------------------------------------------------

#[tokio::test]
async fn two_accounts_cannot_claim_overlapping_warehouse_prefixes() {
    let env = setup(Opts {
        s3_endpoint: None,
        vending: None,
    })
    .await;
    let tenant = format!("s3://claims-bucket/t-{}", uuid::Uuid::new_v4().simple());
    let (_, a) = env
        .catalog(ACME, "acme", "lake", Some(&format!("{tenant}/lake")))
        .await;
    let a = a.expect("the first account claims the prefix");
    // acme may use the same tenant prefix again.
    let (_, a2) = env
        .catalog(
            ACME,
            "acme",
            "lake2",
            Some(&format!("{tenant}/other/deeper")),
        )
        .await;
    a2.expect("the same account reuses its prefix");
    // Another account's catalog in the same prefix (or the very same warehouse) is refused
    // on every route, before anything of it is served.
    for (i, w) in [
        format!("{tenant}/lake"),
        format!("{tenant}/mine"),
        format!("{tenant}/"),
    ]
    .iter()
    .enumerate()
    {
        let name = format!("steal{i}");
        let (id, r) = env.catalog(OTHER, "other", &name, Some(w)).await;
        let (s, e) = r.expect_err("an overlapping warehouse of another account");
        assert_eq!(s, StatusCode::FORBIDDEN, "{w}: {e}");
        assert_eq!(e["error"]["type"], "ForbiddenException");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("another account"),
            "{e}"
        );
        let (s, e) = env
            .as_(
                OTHER,
                Method::GET,
                &url(&format!("other.{id}"), "namespaces"),
                None,
            )
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    }
    // A prefix of its own is fine, and acme keeps working.
    let (_, own) = env
        .catalog(
            OTHER,
            "other",
            "own",
            Some(&format!(
                "s3://claims-bucket/o-{}/lake",
                uuid::Uuid::new_v4().simple()
            )),
        )
        .await;
    own.expect("a prefix of its own");
    let (s, _) = env.acme(Method::GET, &url(&a, "namespaces"), None).await;
    assert_eq!(s, StatusCode::OK);
    // A warehouse at the bucket root binds no tenant prefix: refused.
    let (_, root) = env
        .catalog(ACME, "acme", "root", Some("s3://claims-bucket"))
        .await;
    assert_eq!(root.unwrap_err().0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn racing_accounts_claim_one_prefix_exactly_once() {
    let env = setup(Opts {
        s3_endpoint: None,
        vending: None,
    })
    .await;
    let tenant = format!("s3://claims-bucket/race-{}", uuid::Uuid::new_v4().simple());
    // Both catalogs exist before either is used, then both are used at once.
    let mut prefixes = Vec::new();
    for (token, account) in [(ACME, "acme"), (OTHER, "other")] {
        let body = json!({"display_name": "lake", "properties": {"warehouse": format!("{tenant}/{account}")}});
        let (s, cat) = env
            .as_(
                token,
                Method::POST,
                &format!("/v1/accounts/{account}/catalogs"),
                Some(body),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{cat}");
        prefixes.push((token, format!("{account}.{}", cat["id"].as_str().unwrap())));
    }
    let (u1, u2) = (
        url(&prefixes[0].1, "namespaces"),
        url(&prefixes[1].1, "namespaces"),
    );
    let (r1, r2) = tokio::join!(
        env.as_(prefixes[0].0, Method::GET, &u1, None),
        env.as_(prefixes[1].0, Method::GET, &u2, None),
    );
    let mut statuses = [r1.0, r2.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::FORBIDDEN],
        "{r1:?} {r2:?}"
    );
}

// ---- listings from the directory replica ------------------------------------------------

#[tokio::test]
async fn listings_of_a_finalized_catalog_cost_one_round_trip_while_nothing_changes() {
    let env = setup(Opts {
        s3_endpoint: None,
        vending: None,
    })
    .await;
    let (_, prefix) = env.catalog(ACME, "acme", "lake", None).await;
    let prefix = prefix.unwrap();
    env.acme(
        Method::POST,
        &url(&prefix, "namespaces"),
        Some(json!({"namespace": ["db"]})),
    )
    .await;
    env.acme(
        Method::POST,
        &url(&prefix, "namespaces"),
        Some(json!({"namespace": ["empty"]})),
    )
    .await;
    for i in 0..25 {
        let (s, v) = env
            .acme(
                Method::POST,
                &url(&prefix, "namespaces/db/tables"),
                Some(json!({"name": format!("t{i:02}"), "schema": schema()})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let list = url(&prefix, "namespaces/db/tables");
    let names = |v: &Value| -> Vec<String> {
        v["identifiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_owned())
            .collect()
    };

    // Not finalized: listed from the metastore (a query per page).
    let before = env.counts();
    let (s, v) = env.acme(Method::GET, &list, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(names(&v).len(), 25);
    assert!(
        env.counts().query > before.query,
        "the metastore listing queries"
    );

    let (s, _) = env
        .as_(
            OPERATOR,
            Method::POST,
            "/v1/admin/catalog-finalize",
            Some(json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // The first listing after finalize loads the replica (a scan).
    let (s, v) = env.acme(Method::GET, &list, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(names(&v).len(), 25);

    // Warm and unchanged: each listing is one metastore round trip (the catalog and the
    // directory generation, read together) and no query, however many tables there are.
    let before = env.counts();
    for _ in 0..5 {
        let (s, v) = env.acme(Method::GET, &list, None).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            names(&v),
            (0..25).map(|i| format!("t{i:02}")).collect::<Vec<_>>()
        );
    }
    let after = env.counts();
    assert_eq!(
        after.query - before.query,
        0,
        "no scan while nothing changed"
    );
    assert_eq!(
        (after.get + after.batch_get) - (before.get + before.batch_get),
        5,
        "one point read per listing"
    );

    // Paging through the replica.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = match &token {
            Some(t) => format!("{list}?pageSize=10&pageToken={t}"),
            None => format!("{list}?pageSize=10"),
        };
        let (s, v) = env.acme(Method::GET, &page, None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        seen.extend(names(&v));
        match v["next-page-token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25);
    assert_eq!(seen.first().map(String::as_str), Some("t00"));
    assert_eq!(seen.last().map(String::as_str), Some("t24"));

    // A change moves the generation: the next listing shows it (one reload).
    let (s, _) = env
        .acme(
            Method::POST,
            &url(&prefix, "namespaces/db/tables"),
            Some(json!({"name": "zz", "schema": schema()})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, v) = env.acme(Method::GET, &list, None).await;
    assert!(names(&v).contains(&"zz".to_owned()), "{v}");
    let (s, _) = env
        .acme(
            Method::DELETE,
            &url(&prefix, "namespaces/db/tables/zz"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (_, v) = env.acme(Method::GET, &list, None).await;
    assert!(!names(&v).contains(&"zz".to_owned()), "{v}");

    // An empty namespace lists empty; a missing one is 404; another account sees nothing.
    let (s, v) = env
        .acme(Method::GET, &url(&prefix, "namespaces/empty/tables"), None)
        .await;
    assert_eq!((s, v["identifiers"].clone()), (StatusCode::OK, json!([])));
    let (s, v) = env
        .acme(Method::GET, &url(&prefix, "namespaces/nope/tables"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["error"]["type"], "NoSuchNamespaceException");
    let (s, _) = env.as_(OTHER, Method::GET, &list, None).await;
    assert!(
        s == StatusCode::FORBIDDEN || s == StatusCode::NOT_FOUND,
        "{s}"
    );
}

// ---- views through both doors -----------------------------------------------------------

#[tokio::test]
async fn views_created_through_v1_load_and_replace_through_the_endpoint_and_back() {
    let env = setup(Opts {
        s3_endpoint: None,
        vending: None,
    })
    .await;
    let (cat, prefix) = env.catalog(ACME, "acme", "lake", None).await;
    let prefix = prefix.unwrap();
    env.acme(
        Method::POST,
        &url(&prefix, "namespaces"),
        Some(json!({"namespace": ["db"]})),
    )
    .await;
    let v1 = format!("/v1/accounts/acme/catalogs/{cat}/namespaces/db/views");
    let (s, rec) = env
        .acme(
            Method::POST,
            &v1,
            Some(json!({
                "name": "recent",
                "schema": schema(),
                "definitions": [{"dialect": "spark", "sql": "SELECT id, v FROM db.t"}],
                "default_namespace": ["db"],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{rec}");
    let view = url(&prefix, "namespaces/db/views/recent");

    // Listed and loaded through the endpoint, described from the record.
    let (_, l) = env
        .acme(Method::GET, &url(&prefix, "namespaces/db/views"), None)
        .await;
    assert_eq!(
        l["identifiers"],
        json!([{"namespace": ["db"], "name": "recent"}])
    );
    let (s, loaded) = env.acme(Method::GET, &view, None).await;
    assert_eq!(s, StatusCode::OK, "{loaded}");
    let m = &loaded["metadata"];
    let uuid = uuid::Uuid::parse_str(rec["id"].as_str().unwrap())
        .unwrap()
        .to_string();
    assert_eq!(m["view-uuid"], uuid, "the view's id is its uuid");
    let current = |m: &Value| -> Value {
        let id = m["current-version-id"].clone();
        m["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["version-id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        current(m)["representations"][0]["sql"],
        "SELECT id, v FROM db.t"
    );
    assert_eq!(current(m)["default-namespace"], json!(["db"]));
    assert_eq!(m["schemas"][0]["fields"][1]["name"], "v");
    let (s, _) = env.acme(Method::HEAD, &view, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);

    // Replaced through the endpoint: the first metadata file is written, /v1 shows it.
    let (s, replaced) = env
        .acme(
            Method::POST,
            &view,
            Some(json!({
                "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
                "updates": [
                    {"action": "add-view-version", "view-version": {
                        "version-id": 2, "schema-id": 0, "timestamp-ms": now_ms(),
                        "summary": {"engine-name": "spark"},
                        "representations": [{"type": "sql", "sql": "SELECT id FROM db.t", "dialect": "spark"}],
                        "default-namespace": ["db"],
                    }},
                    {"action": "set-current-view-version", "view-version-id": -1},
                ],
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{replaced}");
    assert!(replaced["metadata-location"].as_str().is_some());
    let (_, rec) = env.acme(Method::GET, &format!("{v1}/recent"), None).await;
    assert_eq!(rec["definitions"][0]["sql"], "SELECT id FROM db.t");

    // Changed through /v1 again: the endpoint answers /v1's definition as the current
    // version, on top of the history the file holds.
    let (s, p) = env
        .acme(
            Method::PATCH,
            &format!("{v1}/recent"),
            Some(json!({"definitions": [{"dialect": "trino", "sql": "SELECT 42 AS id"}]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    let (s, loaded) = env.acme(Method::GET, &view, None).await;
    assert_eq!(s, StatusCode::OK, "{loaded}");
    let m = &loaded["metadata"];
    assert_eq!(
        current(m)["representations"],
        json!([{"type": "sql", "sql": "SELECT 42 AS id", "dialect": "trino"}])
    );
    assert_eq!(m["view-uuid"], uuid);
    assert!(m["versions"].as_array().unwrap().len() >= 3, "{m}");

    // Dropped through the endpoint: gone from /v1.
    let (s, _) = env.acme(Method::DELETE, &view, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = env.acme(Method::GET, &format!("{v1}/recent"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Every paged listing of both doors asks the store for one item more than its page: a full
/// page of 1,000 (the largest) costs one query, not a second one to learn that more follows,
/// and the last page carries no token.
#[tokio::test]
async fn a_full_page_of_a_thousand_costs_one_query_in_every_paged_listing() {
    let env = setup(Opts {
        s3_endpoint: None,
        vending: None,
    })
    .await;
    let (cid, prefix) = env.catalog(ACME, "acme", "lake", None).await;
    let prefix = prefix.unwrap();
    let v1 = format!("/v1/accounts/acme/catalogs/{cid}");
    let (s, v) = env
        .acme(
            Method::POST,
            &url(&prefix, "namespaces"),
            Some(json!({"namespace": ["many"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, t) = env
        .acme(
            Method::POST,
            &url(&prefix, "namespaces/many/tables"),
            Some(json!({"name": "t0000", "schema": schema()})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    // 1,001 tables and 1,001 namespaces (the root listing also holds `many`).
    for i in 1..=1000 {
        let (s, v) = env
            .acme(
                Method::POST,
                &format!("{v1}/namespaces/many/tables"),
                Some(
                    json!({"name": format!("t{i:04}"), "schema": schema(), "format": "ICEBERG",
                    "metadata_location": t["metadata-location"]}),
                ),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        let (s, v) = env
            .acme(
                Method::POST,
                &format!("{v1}/namespaces"),
                Some(json!({"path": [format!("n{i:04}")]})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    // (first page, next page) of each listing, with its page-size and token parameters.
    let listings = [
        (
            url(&prefix, "namespaces/many/tables?pageSize=1000"),
            "identifiers",
            "next-page-token",
            "pageToken",
        ),
        (
            url(&prefix, "namespaces?pageSize=1000"),
            "namespaces",
            "next-page-token",
            "pageToken",
        ),
        (
            format!("{v1}/namespaces/many/tables?page_size=1000"),
            "items",
            "next_page_token",
            "page_token",
        ),
        (
            format!("{v1}/namespaces?page_size=1000"),
            "items",
            "next_page_token",
            "page_token",
        ),
    ];
    for (first, items, next, param) in listings {
        let before = env.counts().query;
        let (s, v) = env.acme(Method::GET, &first, None).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v[items].as_array().unwrap().len(), 1000, "{first}");
        assert_eq!(
            env.counts().query - before,
            1,
            "one query for a full page: {first}"
        );
        let token = v[next]
            .as_str()
            .expect("a token: one more follows")
            .to_owned();
        let before = env.counts().query;
        let (s, v) = env
            .acme(Method::GET, &format!("{first}&{param}={token}"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v[items].as_array().unwrap().len(), 1, "{first}");
        assert!(v[next].is_null(), "the last page has no token: {first}");
        assert_eq!(env.counts().query - before, 1, "{first}");
    }
}
