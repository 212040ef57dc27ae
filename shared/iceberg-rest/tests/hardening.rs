//! The Iceberg REST endpoint against hostile bytes and hostile paths: metadata locations that
//! are FIFOs or symlinks out of the warehouse, purges through symlinked directories,
//! oversized metadata and memory of concurrent loads, and the error shape of every refusal
//! on the `/iceberg` door.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::redb_store::RedbMetastore;
use serde_json::{Value, json};

const OPERATOR: &str = "hardening-operator-token";
const ACME: &str = "hardening-acme-token";
const OTHER: &str = "hardening-other-token";

/// A guard against a request that parks its task: far longer than any answer takes, and no
/// part of the behaviour under test.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

struct Env {
    app: Router,
    /// Outside the warehouse root: where the attacks' targets live.
    outside: PathBuf,
    _dir: tempfile::TempDir,
    prefix: String,
}

async fn setup() -> Env {
    setup_with(IcebergConfig::default()).await
}

async fn setup_with(mut config: IcebergConfig) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbMetastore::in_memory().unwrap());
    let tokens = support::tokens(OPERATOR, ACME, OTHER);
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(tokens),
        Config::default(),
    );
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("warehouse");
    let outside = base.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
    let state = state
        .with_index_stores(flotilla_core::service::index_catalogs::local_warehouse_stores(policy));
    config.local_warehouse_root = Some(root);
    let app = flotilla_iceberg_rest::router(state, config);
    let (s, _) = call(
        &app,
        Method::POST,
        "/v1/accounts",
        Some(OPERATOR),
        Some(json!({"id": "acme"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
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
    let env = Env {
        app,
        outside,
        _dir: dir,
        prefix,
    };
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces"),
            Some(json!({"namespace": ["db"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    env
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
    tokio::time::timeout(ANSWER_WITHIN, support::send(app, req, body))
        .await
        .expect("the endpoint answers without waiting on the file")
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
    ]})
}

impl Env {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.app, method, path, Some(ACME), body).await
    }

    fn url(&self, rest: &str) -> String {
        format!("/iceberg/v1/{}/{rest}", self.prefix)
    }

    /// Creates `db.<name>`: its load result.
    async fn table(&self, name: &str) -> Value {
        let (s, v) = self
            .call(
                Method::POST,
                &self.url("namespaces/db/tables"),
                Some(json!({"name": name, "schema": schema()})),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    }

    async fn register(&self, name: &str, location: &str) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            &self.url("namespaces/db/register"),
            Some(json!({"name": name, "metadata-location": location})),
        )
        .await
    }
}

/// The local directory of a table's root.
fn table_dir(loaded: &Value) -> PathBuf {
    PathBuf::from(
        loaded["metadata"]["location"]
            .as_str()
            .unwrap()
            .strip_prefix("file://")
            .unwrap(),
    )
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn assert_refused(s: StatusCode, v: &Value) {
    assert!(s.is_client_error(), "{s}: {v}");
    assert_eq!(v["error"]["code"], s.as_u16(), "{v}");
    assert!(v["error"]["type"].is_string(), "{v}");
}

// ---- the hardened reader (item 8) -----------------------------------------------------

#[tokio::test]
async fn a_fifo_as_metadata_file_is_refused_without_waiting() {
    let env = setup().await;
    let t = env.table("t").await;
    let fifo = table_dir(&t).join("metadata/00001-fifo.metadata.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (s, v) = env.register("evil", &file_url(&fifo)).await;
    assert_refused(s, &v);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("regular file"),
        "{v}"
    );
    // Nothing was registered, and the endpoint still answers.
    let (s, _) = env
        .call(Method::HEAD, &env.url("namespaces/db/tables/evil"), None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_symlinked_metadata_file_is_refused() {
    let env = setup().await;
    let t = env.table("t").await;
    let metadata = table_dir(&t).join("metadata");
    // A valid metadata document outside the warehouse, naming a location inside it: read
    // through a link it would register.
    let current = t["metadata-location"].as_str().unwrap();
    let doc = std::fs::read(current.strip_prefix("file://").unwrap()).unwrap();
    let outside_doc = env.outside.join("00001-stolen.metadata.json");
    std::fs::write(&outside_doc, &doc).unwrap();
    let link = metadata.join("00001-link.metadata.json");
    std::os::unix::fs::symlink(&outside_doc, &link).unwrap();
    let (s, v) = env.register("stolen", &file_url(&link)).await;
    assert_refused(s, &v);
    let passwd = metadata.join("00002-passwd.metadata.json");
    std::os::unix::fs::symlink("/etc/passwd", &passwd).unwrap();
    let (s, v) = env.register("passwd", &file_url(&passwd)).await;
    assert_refused(s, &v);
    assert!(!v.to_string().contains("root:"), "{v}");
    // A symlinked directory on the way is followed no more than a symlinked file.
    let linked_dir = table_dir(&t).join("elsewhere");
    std::os::unix::fs::symlink(&env.outside, &linked_dir).unwrap();
    let (s, v) = env
        .register(
            "through-dir",
            &file_url(&linked_dir.join("00001-stolen.metadata.json")),
        )
        .await;
    assert_refused(s, &v);
    for name in ["stolen", "passwd", "through-dir"] {
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

#[tokio::test]
async fn a_metadata_file_replaced_by_a_symlink_does_not_load() {
    let env = setup().await;
    let t = env.table("t").await;
    let current = PathBuf::from(
        t["metadata-location"]
            .as_str()
            .unwrap()
            .strip_prefix("file://")
            .unwrap(),
    );
    let outside_doc = env.outside.join("moved.metadata.json");
    std::fs::rename(&current, &outside_doc).unwrap();
    std::os::unix::fs::symlink(&outside_doc, &current).unwrap();
    let (s, v) = env
        .call(Method::GET, &env.url("namespaces/db/tables/t"), None)
        .await;
    assert_refused(s, &v);
}

#[tokio::test]
async fn a_table_directory_symlinked_outside_the_root_survives_a_purge() {
    let env = setup().await;
    // A link inside a table root: the link goes, its target stays.
    let t = env.table("t").await;
    let target = env.outside.join("linked-data");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("precious.parquet"), b"keep me").unwrap();
    let file_target = env.outside.join("precious-file");
    std::fs::write(&file_target, b"keep me too").unwrap();
    let root = table_dir(&t);
    std::os::unix::fs::symlink(&target, root.join("data")).unwrap();
    std::os::unix::fs::symlink(&file_target, root.join("metadata/linked-file")).unwrap();
    let (s, v) = env
        .call(
            Method::DELETE,
            &env.url("namespaces/db/tables/t?purgeRequested=true"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    assert!(target.join("precious.parquet").exists());
    assert!(file_target.exists());
    assert!(
        std::fs::symlink_metadata(&root).is_err(),
        "the table root is purged"
    );

    // A table root that became a link: only the link goes.
    let u = env.table("u").await;
    let root = table_dir(&u);
    let moved = env.outside.join("moved-table");
    std::fs::rename(&root, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &root).unwrap();
    let (s, v) = env
        .call(
            Method::DELETE,
            &env.url("namespaces/db/tables/u?purgeRequested=true"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    assert!(moved.join("metadata").read_dir().unwrap().next().is_some());
    assert!(
        std::fs::symlink_metadata(&root).is_err(),
        "the link is removed"
    );
}

// ---- the error shape of the door (item 9) ---------------------------------------------

/// Sends a raw request and returns the status, the headers and the body as JSON (`Null` if
/// the body is not JSON).
async fn raw(
    app: &Router,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    use tower::ServiceExt;
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {ACME}"));
    if let Some(t) = content_type {
        req = req.header(header::CONTENT_TYPE, t);
    }
    let resp = tokio::time::timeout(
        ANSWER_WITHIN,
        app.clone()
            .oneshot(req.body(axum::body::Body::from(body)).unwrap()),
    )
    .await
    .expect("the endpoint answers")
    .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The Iceberg error shape with exactly `status`, and a message.
fn assert_iceberg_error(status: StatusCode, got: StatusCode, v: &Value) {
    assert_eq!(got, status, "{v}");
    let e = &v["error"];
    assert_eq!(e["code"], status.as_u16(), "{v}");
    assert!(e["type"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

#[tokio::test]
async fn every_refusal_of_the_iceberg_door_has_the_iceberg_shape() {
    let env = setup().await;
    env.table("t").await;
    let app = &env.app;
    let json = Some("application/json");
    let tables = env.url("namespaces/db/tables");

    // 413: a body over the limit.
    let big = vec![b' '; flotilla_http::extract::MAX_BODY_BYTES + 2];
    let (s, _, v) = raw(app, Method::POST, &tables, json, big).await;
    assert_iceberg_error(StatusCode::PAYLOAD_TOO_LARGE, s, &v);

    // 404: an unknown route under the door, and one under a prefix.
    for path in ["/iceberg/v2/nothing", &env.url("no/such/route")] {
        let (s, _, v) = raw(app, Method::GET, path, None, vec![]).await;
        assert_iceberg_error(StatusCode::NOT_FOUND, s, &v);
        assert_eq!(v["error"]["type"], "NotFoundException", "{v}");
    }

    // 405: a known route with a method it does not serve; `Allow` is kept.
    let (s, h, v) = raw(app, Method::PUT, &tables, json, b"{}".to_vec()).await;
    assert_iceberg_error(StatusCode::METHOD_NOT_ALLOWED, s, &v);
    assert!(h.contains_key(header::ALLOW), "{h:?}");

    // 415: a body declared as anything but JSON.
    let (s, _, v) = raw(
        app,
        Method::POST,
        &tables,
        Some("text/plain"),
        b"{}".to_vec(),
    )
    .await;
    assert_iceberg_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, s, &v);

    // 400: malformed JSON, a body that is not an object.
    for body in [&b"{\"name\": "[..], b"[1, 2]", b"\xff\xfe"] {
        let (s, _, v) = raw(app, Method::POST, &tables, json, body.to_vec()).await;
        assert_iceberg_error(StatusCode::BAD_REQUEST, s, &v);
    }

    // axum's extractor rejections: a query parameter given twice, and a path segment
    // that is not valid percent-encoded UTF-8.
    let (s, _, v) = raw(
        app,
        Method::GET,
        &format!("{tables}?pageSize=1&pageSize=2"),
        None,
        vec![],
    )
    .await;
    assert_iceberg_error(StatusCode::BAD_REQUEST, s, &v);
    let (s, _, v) = raw(
        app,
        Method::GET,
        &env.url("namespaces/db/tables/%FF%FE"),
        None,
        vec![],
    )
    .await;
    assert_iceberg_error(StatusCode::BAD_REQUEST, s, &v);

    // The token route keeps OAuth's shape; `/v1` keeps the API's.
    let (s, _, v) = raw(
        app,
        Method::POST,
        "/iceberg/v1/oauth/tokens",
        Some("application/x-www-form-urlencoded"),
        b"grant_type=nonsense".to_vec(),
    )
    .await;
    assert!(s.is_client_error(), "{s}");
    assert!(v["error"].is_string(), "{v}");
    let (s, _, v) = raw(app, Method::GET, "/v1/no/such/route", None, vec![]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(v["error"]["code"], "NOT_FOUND", "{v}");
}

// ---- legal operations cannot exhaust memory (item 7) ------------------------------------

/// A property value just under the body limit: each commit grows the metadata by about 1 MB.
fn megabyte_property(i: usize) -> Value {
    json!({format!("p{i}"): "x".repeat(1_000_000)})
}

fn metadata_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("metadata")).unwrap().count()
}

/// The attack, shortened: commits of large properties grow one table's metadata. The
/// commit that would take it past 16 MiB is refused with a 400 naming the table, the size and
/// the limit; nothing is written and the table still loads the metadata of the last commit.
#[tokio::test]
async fn a_commit_past_the_metadata_limit_is_refused_and_changes_nothing() {
    let env = setup().await;
    let t = env.table("t").await;
    let dir = table_dir(&t);
    let url = env.url("namespaces/db/tables/t");
    let mut last = t["metadata-location"].as_str().unwrap().to_owned();
    let mut refused = None;
    for i in 0..24 {
        let files = metadata_files(&dir);
        let (s, v) = env
            .call(
                Method::POST,
                &url,
                Some(json!({"updates": [
                    {"action": "set-properties", "updates": megabyte_property(i)}]})),
            )
            .await;
        if s == StatusCode::OK {
            last = v["metadata-location"].as_str().unwrap().to_owned();
            continue;
        }
        assert_eq!(metadata_files(&dir), files, "a refused commit wrote a file");
        refused = Some((i, s, v));
        break;
    }
    let (i, s, v) = refused.expect("some commit is refused");
    // 16 MiB holds 16 properties of 1 MB and not 17.
    assert_eq!(i, 16, "{v}");
    assert_iceberg_error(StatusCode::BAD_REQUEST, s, &v);
    assert_eq!(v["error"]["type"], "BadRequestException");
    let message = v["error"]["message"].as_str().unwrap();
    for says in [
        "METADATA_TOO_LARGE",
        "table \"db\".t",
        &flotilla_iceberg_rest::commit::MAX_WRITTEN_METADATA_BYTES.to_string(),
    ] {
        assert!(message.contains(says), "{says}: {message}");
    }
    let (s, loaded) = env.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(loaded["metadata-location"], json!(last));
    assert!(loaded["metadata"]["properties"]["p15"].is_string());
    assert!(loaded["metadata"]["properties"].get("p16").is_none());
}

/// Views too: the replace that would take a view's metadata past the limit is refused and
/// the view keeps its last metadata file.
#[tokio::test]
async fn a_view_replace_past_the_metadata_limit_is_refused_and_changes_nothing() {
    let env = setup().await;
    let (s, v) = env
        .call(
            Method::POST,
            &env.url("namespaces/db/views"),
            Some(json!({
                "name": "v", "schema": schema(), "properties": {},
                "view-version": {
                    "version-id": 1, "schema-id": 0, "timestamp-ms": 1_700_000_000_000i64,
                    "summary": {"engine-name": "test"},
                    "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
                    "default-namespace": ["db"],
                },
            })),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let dir = table_dir(&v);
    let url = env.url("namespaces/db/views/v");
    let mut last = v["metadata-location"].as_str().unwrap().to_owned();
    let mut refused = None;
    for i in 0..24 {
        let files = metadata_files(&dir);
        let (s, v) = env
            .call(
                Method::POST,
                &url,
                Some(json!({"updates": [
                    {"action": "set-properties", "updates": megabyte_property(i)}]})),
            )
            .await;
        if s == StatusCode::OK {
            last = v["metadata-location"].as_str().unwrap().to_owned();
            continue;
        }
        assert_eq!(
            metadata_files(&dir),
            files,
            "a refused replace wrote a file"
        );
        refused = Some((i, s, v));
        break;
    }
    let (i, s, v) = refused.expect("some replace is refused");
    assert_eq!(i, 16, "{v}");
    assert_iceberg_error(StatusCode::BAD_REQUEST, s, &v);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("METADATA_TOO_LARGE"), "{message}");
    assert!(message.contains("view \"db\".v"), "{message}");
    let (s, loaded) = env.call(Method::GET, &url, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(loaded["metadata-location"], json!(last));
}

/// The variable that makes a `*_child` test do its work (it passes trivially otherwise).
const CHILD: &str = "FLOTILLA_TEST_CHILD";
/// The child's load budget in bytes (the default when unset).
const CHILD_BUDGET: &str = "FLOTILLA_TEST_LOAD_BUDGET";
/// Address space of the child: the loads of the test within the default budget fit; the
/// same loads all at once do not (about 48 times 12 MiB, several times over).
const CHILD_ADDRESS_SPACE: u64 = 1280 * 1024 * 1024;
/// Concurrent loads of the child.
const LOADS: usize = 48;

/// Runs `test` of this binary in a child process limited to `bytes` of address space; its
/// status and output.
fn run_child(test: &str, bytes: u64, budget: Option<usize>) -> (bool, String) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new("prlimit");
    cmd.arg(format!("--as={bytes}"))
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    if let Some(b) = budget {
        cmd.env(CHILD_BUDGET, b.to_string());
    }
    let out = cmd.output().expect("prlimit runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.success() && stdout.contains("1 passed"),
        format!(
            "{}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The second attack: many engines load one large table at once. Under an address
/// space limit the child serves them all, because the load budget admits only what fits and
/// the others wait; each load's answer is read slowly, a chunk at a time, so without the
/// budget every load's file, parsed metadata and answer would be alive at once.
#[test]
fn concurrent_loads_of_large_metadata_stay_within_the_load_budget() {
    let (ok, out) = run_child(
        "concurrent_loads_of_large_metadata_child",
        CHILD_ADDRESS_SPACE,
        None,
    );
    assert!(ok, "the child died under the address space limit: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_loads_of_large_metadata_child() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let budget = match std::env::var(CHILD_BUDGET) {
        Ok(b) => flotilla_iceberg_rest::LoadBudget::new(b.parse().unwrap()),
        Err(_) => flotilla_iceberg_rest::LoadBudget::default(),
    }
    // The test is about memory: loads wait as long as they must.
    .with_wait(Duration::from_secs(3600));
    let env = setup_with(IcebergConfig {
        load_budget: budget,
        ..Default::default()
    })
    .await;
    let t = env.table("t").await;
    // A 12 MiB metadata file (large properties), registered as `big`.
    let mut big = t["metadata"].clone();
    for i in 0..12 {
        big["properties"][format!("p{i}")] = json!("x".repeat(1024 * 1024));
    }
    let file = table_dir(&t).join("metadata/00001-big.metadata.json");
    std::fs::write(&file, serde_json::to_vec(&big).unwrap()).unwrap();
    drop(big);
    let (s, v) = env.register("big", &file_url(&file)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    drop(v);
    let url = env.url("namespaces/db/tables/big");
    let loads: Vec<_> = (0..LOADS)
        .map(|_| {
            let app = env.app.clone();
            let req = Request::builder()
                .uri(url.clone())
                .header(header::AUTHORIZATION, format!("Bearer {ACME}"))
                .body(axum::body::Body::empty())
                .unwrap();
            tokio::spawn(async move {
                let resp = app.oneshot(req).await.unwrap();
                assert_eq!(resp.status(), StatusCode::OK);
                let mut body = resp.into_body();
                let mut n = 0;
                // A slow reader: a chunk, then every other task's turn.
                while let Some(frame) = body.frame().await {
                    n += frame.unwrap().into_data().map(|d| d.len()).unwrap_or(0);
                    tokio::task::yield_now().await;
                }
                n
            })
        })
        .collect();
    for l in loads {
        assert!(l.await.unwrap() > 12 * 1024 * 1024);
    }
}
