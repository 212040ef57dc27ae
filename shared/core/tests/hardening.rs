//! Attacks of a hostile tenant and a hostile upstream (issue 24), each reproduced through the
//! API: warehouses outside the host's root or inside another account's prefix, symlinks and
//! FIFOs in a warehouse, collection outside the catalog's prefix, oversized selections,
//! duplicate JSON keys, invisible characters, token endpoints and policy refusals.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::{
    CatalogAuthentication, CatalogClient, CatalogClientFactory, CatalogClientProvider,
    CatalogConnectionConfig, CatalogProtocol, ConnectOptions, ResolvedCatalogCredentials,
    Result as CaResult,
};
use flotilla_core::Config;
use flotilla_core::service::index_catalogs::{gc, service};
use flotilla_metastore::{Key, Op, Transaction};
use flotilla_testkit::iceberg_fixture::IcebergFixture;
use serde_json::{Value, json};
use support::{ACME, BETA, Creds, Harness, OPERATOR, Resp};

fn ixc(account: &str) -> String {
    format!("/v1/accounts/{account}/index-catalogs")
}

/// A warehouse directory below the test hosts' root (the system temporary directory).
struct Wh {
    dir: tempfile::TempDir,
    uri: String,
}

impl Wh {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let uri = format!("file://{}/", dir.path().display());
        Self { dir, uri }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

async fn create_catalog(h: &Harness, account: &str, token: &str, name: &str, uri: &str) -> Resp {
    h.post(
        &ixc(account),
        token,
        json!({"name": name, "warehouse": uri}),
    )
    .await
}

async fn register(h: &Harness, catalog: &str, name: &str, location: &str) -> Resp {
    h.post(
        &format!("{}/{catalog}/namespaces/analytics/indexes", ixc("acme")),
        ACME,
        json!({"name": name, "metadata_location": location,
               "source": {"type": "PARQUET", "uri": "s3://lake/docs/"}}),
    )
    .await
}

async fn namespace(h: &Harness, catalog: &str) {
    let r = h
        .post(
            &format!("{}/{catalog}/namespaces", ixc("acme")),
            ACME,
            json!({"path": ["analytics"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

fn assert_error(r: &Resp, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(r.code(), code, "{:?}", r.body);
}

// ---- warehouses ---------------------------------------------------------------------------

#[tokio::test]
async fn warehouses_outside_the_root_or_at_a_bucket_root_are_refused() {
    let h = Harness::redb();
    h.account("acme").await;
    let root = std::fs::canonicalize(std::env::temp_dir()).expect("temp dir");
    for uri in [
        "file:///etc/".to_owned(),
        "file:///proc/self/".to_owned(),
        "file:///root/".to_owned(),
        format!("file://{}/", root.display()),
        "s3://some-bucket/".to_owned(),
    ] {
        let r = create_catalog(&h, "acme", ACME, "w", &uri).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    }
    // Nothing was written: the warehouse was refused before the transaction.
    let r = h.get(&ixc("acme"), ACME).await;
    assert_eq!(r.body["items"], json!([]));
}

#[tokio::test]
async fn another_accounts_warehouse_prefix_is_refused() {
    let h = Harness::redb();
    h.account("acme").await;
    h.account("beta").await;
    let wh = Wh::new();
    let r = create_catalog(&h, "acme", ACME, "lake", &format!("{}a/", wh.uri)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // The same warehouse, a parent, a child and a sibling in the same tenant prefix.
    for uri in [
        format!("{}a/", wh.uri),
        wh.uri.clone(),
        format!("{}a/b/", wh.uri),
        format!("{}c/", wh.uri),
    ] {
        let r = create_catalog(&h, "beta", BETA, "lake", &uri).await;
        assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
        assert!(!r.body.to_string().contains("acme"), "{:?}", r.body);
    }
    // The owner may nest and reuse inside its own prefix.
    let r = create_catalog(&h, "acme", ACME, "nested", &format!("{}a/b/", wh.uri)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    // Deleting the account releases the prefix.
    let r = h.delete("/v1/accounts/acme", OPERATOR).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = create_catalog(&h, "beta", BETA, "lake", &wh.uri).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

/// On `flotilla serve`, a catalog without a warehouse lives in `{root}{account}/{catalog id}/`
/// (`flotilla_iceberg_rest::catalog::resolve_warehouse`): every first directory below the root
/// spelt like an account id is that account's home, reserved for it from the start. Another
/// account's index catalog there would claim it, register and read the victim's metadata and
/// collect its files (`shared/iceberg-rest/tests/storage_takeover.rs` runs the whole takeover
/// against the Iceberg endpoint's own files).
#[tokio::test]
async fn another_accounts_home_directory_is_never_claimed() {
    let h = Harness::redb();
    h.account("acme").await;
    h.account("beta").await;
    let root = std::fs::canonicalize(std::env::temp_dir()).expect("temp dir");
    let root = format!("file://{}/", root.display());
    let catalog_id = "0192d4e5f6a7b8c9d0e1f2a3b4c5d6e7";
    // The victim's home, a catalog directory inside it, the same home in another case (a
    // case-insensitive filesystem would alias it), and the home of an account that does not
    // exist yet: all refused before anything is claimed.
    for uri in [
        format!("{root}acme/"),
        format!("{root}acme/{catalog_id}/"),
        format!("{root}acme/{catalog_id}/analytics/"),
        format!("{root}ACME/"),
        format!("{root}future-account/"),
    ] {
        let r = create_catalog(&h, "beta", BETA, "squat", &uri).await;
        assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("reserved as the home of account")),
            "{uri}: {:?}",
            r.body
        );
    }
    // The parent of every home is the root itself: never a warehouse.
    let r = create_catalog(&h, "beta", BETA, "squat", &root).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h.get(&ixc("beta"), BETA).await;
    assert_eq!(r.body["items"], json!([]), "{:?}", r.body);
    // Nothing was claimed: the victim uses its home, inside and out of its catalogs.
    let r = create_catalog(&h, "acme", ACME, "own", &format!("{root}acme/lake/")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);

    // A squat stored before homes were reserved (an upgrade): refused on every use, so it
    // can neither register nor read the victim's metadata, nor collect its files.
    let squat = json!({"name": "squat", "warehouse": format!("{root}acme/"), "create_ms": 0});
    h.state
        .store
        .transact(Transaction::new().with(Op::put(
            Key::new("ACCT#beta", "IXC#squat"),
            serde_json::to_vec(&squat).expect("json"),
        )))
        .await
        .expect("put");
    let r = h
        .post(
            &format!("{}/squat/namespaces", ixc("beta")),
            BETA,
            json!({"path": ["analytics"]}),
        )
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
    let r = h
        .post(
            &format!("{}/squat/namespaces/analytics/indexes", ixc("beta")),
            BETA,
            json!({"name": "stolen",
                   "metadata_location": format!("{root}acme/{catalog_id}/t/metadata/00000.metadata.json"),
                   "source": {"type": "PARQUET", "uri": "s3://lake/docs/"}}),
        )
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
    let svc = service(&h.state);
    let err = gc::plan(&svc, "beta", "squat", 0, 4_000_000_000_000)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), "PERMISSION_DENIED", "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_of_one_prefix_by_two_accounts_admit_one() {
    let h = Arc::new(Harness::redb());
    h.account("acme").await;
    h.account("beta").await;
    for round in 0..8 {
        let wh = Wh::new();
        let (a, b) = (format!("{}x/", wh.uri), format!("{}y/", wh.uri));
        let (ha, hb) = (h.clone(), h.clone());
        let name = format!("c{round}");
        let (n1, n2) = (name.clone(), name.clone());
        let ta = tokio::spawn(async move { create_catalog(&ha, "acme", ACME, &n1, &a).await });
        let tb = tokio::spawn(async move { create_catalog(&hb, "beta", BETA, &n2, &b).await });
        let (ra, rb) = (ta.await.expect("a"), tb.await.expect("b"));
        let created = [&ra, &rb]
            .iter()
            .filter(|r| r.status == StatusCode::CREATED)
            .count();
        assert_eq!(created, 1, "round {round}: {:?} / {:?}", ra.body, rb.body);
        for r in [&ra, &rb] {
            if r.status != StatusCode::CREATED {
                assert_error(r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
            }
        }
    }
}

#[tokio::test]
async fn a_symlink_out_of_the_warehouse_reads_as_missing() {
    let h = Harness::redb();
    h.account("acme").await;
    let wh = Wh::new();
    let r = create_catalog(&h, "acme", ACME, "lake", &wh.uri).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    namespace(&h, "lake").await;
    std::os::unix::fs::symlink("/etc/passwd", wh.path("passwd.json")).expect("symlink");
    std::os::unix::fs::symlink("/etc", wh.path("etc")).expect("symlink");
    let missing = register(&h, "lake", "m", &format!("{}none.json", wh.uri)).await;
    assert_error(&missing, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
    for rel in ["passwd.json", "etc/passwd", "etc/hostname"] {
        let r = register(&h, "lake", "x", &format!("{}{rel}", wh.uri)).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
        // Indistinguishable from a missing file, and nothing of the target's content.
        assert_eq!(
            r.body["error"]["message"], missing.body["error"]["message"],
            "{rel}"
        );
        assert!(!r.body.to_string().contains("root"), "{:?}", r.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_are_refused_without_blocking_and_the_metastore_keeps_answering() {
    let h = Arc::new(Harness::redb());
    h.account("acme").await;
    let wh = Wh::new();
    let r = create_catalog(&h, "acme", ACME, "lake", &wh.uri).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    namespace(&h, "lake").await;
    let fifo = wh.path("fifo.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let location = format!("{}fifo.json", wh.uri);
    // Before the fix each register parked a blocking thread in open() for ever; the
    // deadline turns that hang into a failure instead of a stuck test.
    let attack = async {
        let mut tasks = Vec::new();
        for i in 0..64 {
            let (h, location) = (h.clone(), location.clone());
            tasks.push(tokio::spawn(async move {
                register(&h, "lake", &format!("f{i}"), &location).await
            }));
        }
        // Another tenant's metastore call meanwhile.
        let r = h.get("/v1/accounts/acme", ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        for t in tasks {
            let r = t.await.expect("task");
            assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
            assert!(r.body.to_string().contains("regular file"), "{:?}", r.body);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), attack)
        .await
        .expect("FIFO registers must not block");
}

#[tokio::test]
async fn gc_never_plans_outside_the_catalogs_prefix() {
    let h = Harness::redb();
    h.account("acme").await;
    let wh = Wh::new();
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("victim.txt"), b"keep me").expect("write");
    std::os::unix::fs::symlink(outside.path(), wh.path("link")).expect("symlink");
    std::fs::write(wh.path("orphan.bin"), b"x").expect("write");
    let r = create_catalog(&h, "acme", ACME, "lake", &wh.uri).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let svc = service(&h.state);
    let far_future = 4_000_000_000_000;
    let plan = gc::plan(&svc, "acme", "lake", 0, far_future)
        .await
        .expect("plan");
    let planned: Vec<&str> = plan.delete.iter().map(|c| c.location.as_str()).collect();
    assert_eq!(planned, [format!("{}orphan.bin", wh.uri)]);
    assert_eq!(plan.kept_outside, 1, "{plan:?}");
    let report = gc::apply(&svc, "acme", "lake", &plan).await.expect("apply");
    assert_eq!(report.deleted.len(), 1);
    assert!(outside.path().join("victim.txt").exists());

    // A catalog stored with a warehouse the host does not admit (written before the rules
    // existed) is neither collected nor read.
    let legacy = json!({"name": "legacy", "warehouse": "file:///etc/", "create_ms": 0});
    h.state
        .store
        .transact(Transaction::new().with(Op::put(
            Key::new("ACCT#acme", "IXC#legacy"),
            serde_json::to_vec(&legacy).expect("json"),
        )))
        .await
        .expect("put");
    let err = gc::plan(&svc, "acme", "legacy", 0, far_future)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), "INVALID_ARGUMENT", "{err}");
    let r = h
        .post(
            &format!("{}/legacy/namespaces", ixc("acme")),
            ACME,
            json!({"path": ["analytics"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = register(&h, "legacy", "p", "file:///etc/passwd").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
}

// ---- request bodies and names ---------------------------------------------------------------

#[tokio::test]
async fn oversized_selections_are_refused_before_any_work() {
    let h = Harness::redb();
    h.account("acme").await;
    let include: Vec<Value> = (0..50_000).map(|i| json!([format!("n{i}")])).collect();
    let r = h
        .post(
            "/v1/accounts/acme/overlays",
            ACME,
            json!({"display_name": "o", "integration_id": "i1", "catalog_id": "c1",
                   "include_namespaces": include}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let message = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 1000"), "{message}");
}

#[tokio::test]
async fn duplicate_json_keys_are_refused() {
    let h = Harness::redb();
    h.account("acme").await;
    let body = r#"{"display_name": "d", "type": "ICEBERG_REST", "uri": "https://catalog.example.com/api",
        "authentication": {"type": "BEARER"},
        "credentials": {"token": "first-secret", "token": "second-secret"}}"#;
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/accounts/acme/integrations")
        .header("authorization", format!("Bearer {ACME}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    let r = h.send(req).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let text = r.body.to_string();
    assert!(text.contains("duplicate key"), "{text}");
    assert!(!text.contains("first-secret") && !text.contains("second-secret"));
    let r = h.get("/v1/accounts/acme/integrations", ACME).await;
    assert_eq!(r.body["items"], json!([]));
}

#[tokio::test]
async fn invisible_characters_are_refused_in_names() {
    let h = Harness::redb();
    h.account("acme").await;
    for name in [
        "lake\u{200B}",
        "\u{FEFF}lake",
        "la\u{2060}ke",
        "lake\u{200D}",
    ] {
        let r = h
            .post(
                "/v1/accounts/acme/catalogs",
                ACME,
                json!({"display_name": name}),
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    }
}

#[tokio::test]
async fn authentication_types_follow_one_case_rule() {
    let creds = Creds::new();
    let h = Harness::redb().with_credentials(creds.dyn_store());
    h.account("acme").await;
    for (i, spelling) in ["bearer", "BEARER", "Bearer"].into_iter().enumerate() {
        let r = h
            .post(
                "/v1/accounts/acme/integrations",
                ACME,
                json!({"display_name": format!("i{i}"), "type": "ICEBERG_REST",
                       "uri": "https://catalog.example.com/api",
                       "authentication": {"type": spelling}, "credentials": {"token": "t"}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{spelling}: {:?}", r.body);
        assert_eq!(r.body["authentication"]["type"], "BEARER");
    }
}

// ---- upstream address policy ------------------------------------------------------------------

#[tokio::test]
async fn token_uris_are_checked_against_the_address_policy_at_create() {
    for insecure in [false, true] {
        let h = Harness::redb().with_config(Config {
            allow_insecure_upstreams: insecure,
            ..Config::default()
        });
        h.account("acme").await;
        for token_uri in [
            "https://169.254.169.254/token",
            "https://[::169.254.169.254]/token",
            "https://[::ffff:169.254.169.254]/token",
            "https://metadata.google.internal/token",
        ] {
            let r = h
                .post(
                    "/v1/accounts/acme/integrations",
                    ACME,
                    json!({"display_name": "o", "type": "ICEBERG_REST",
                           "uri": "https://catalog.example.com/api",
                           "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "c",
                                              "token_uri": token_uri},
                           "credentials": {"client_secret": "s"}}),
                )
                .await;
            assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
            let message = r.body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("token_uri"), "{message}");
        }
    }
    let strict = Harness::redb();
    strict.account("acme").await;
    let r = strict
        .post(
            "/v1/accounts/acme/integrations",
            ACME,
            json!({"display_name": "o", "type": "ICEBERG_REST",
                   "uri": "https://catalog.example.com/api",
                   "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "client_id": "c",
                                      "token_uri": "https://[::127.0.0.1]/token"},
                   "credentials": {"client_secret": "s"}}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
}

/// The Iceberg REST provider with fixed DNS answers (the address policy still applies).
struct StaticHosts(std::collections::BTreeMap<String, Vec<std::net::IpAddr>>);

impl CatalogClientProvider for StaticHosts {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::IcebergRest
    }
    fn connect(
        &self,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> CaResult<Box<dyn CatalogClient>> {
        let mut options = options.clone();
        options.http.static_hosts = self.0.clone();
        IcebergRestProvider.connect(config, auth, credentials, &options)
    }
}

#[tokio::test]
async fn policy_refusals_are_permanent_and_do_not_name_the_address() {
    let fx = IcebergFixture::start_with_sample().await;
    let port = fx.addr().port();
    let mut factory = CatalogClientFactory::new();
    factory
        .register(Arc::new(StaticHosts(
            [(
                "catalog.internal.test".to_owned(),
                vec!["127.0.0.1".parse().expect("ip")],
            )]
            .into(),
        )))
        .expect("register");
    let creds = Creds::new();
    let mut h = Harness::redb().with_credentials(creds.dyn_store());
    h.state = h.state.clone().with_catalog_access(Arc::new(factory));
    h.router = flotilla_core::router(h.state.clone());
    h.account("acme").await;
    let r = h
        .post(
            "/v1/accounts/acme/integrations",
            ACME,
            json!({"display_name": "internal", "type": "ICEBERG_REST",
                   "uri": format!("https://catalog.internal.test:{port}/"),
                   "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().expect("id").to_owned();
    let r = h
        .get(
            &format!("/v1/accounts/acme/integrations/{id}/upstream/namespaces"),
            ACME,
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "FAILED_PRECONDITION");
    assert!(r.headers.get("retry-after").is_none());
    let text = r.body.to_string();
    assert!(text.contains("not allowed"), "{text}");
    assert!(
        !text.contains("127.0.0.1") && !text.contains("loopback"),
        "{text}"
    );
    let v = h
        .call(
            axum::http::Method::POST,
            &format!("/v1/accounts/acme/integrations/{id}/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await;
    let text = v.body.to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains("loopback"),
        "{text}"
    );
    assert!(fx.log().is_empty(), "nothing reached the upstream");
}

// ---- transport-level refusals -----------------------------------------------------------------

/// Sends raw bytes to a `flotilla serve`-style server and answers (status line, body).
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    sock.write_all(request).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), sock.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[tokio::test]
async fn transport_refusals_carry_the_error_shape() {
    let h = Harness::redb();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = h.router.clone();
    tokio::spawn(async move {
        let _ = axum::serve(
            flotilla_core::http::wire::JsonErrorListener(listener),
            router,
        )
        .await;
    });
    let many_headers: String = (0..120).map(|i| format!("x-h{i}: v\r\n")).collect();
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        // Hyper's own answers, rewritten.
        (b"GARBAGE\r\n\r\n".to_vec(), "400", "INVALID_ARGUMENT"),
        (
            format!("GET /v1/health HTTP/1.1\r\nhost: x\r\n{many_headers}\r\n").into_bytes(),
            "431",
            "HEADERS_TOO_LARGE",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000)).into_bytes(),
            "414",
            "URI_TOO_LONG",
        ),
        // The router's own limits, below hyper's.
        (
            format!(
                "GET /v1/health?{} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
                "a".repeat(9_000)
            )
            .into_bytes(),
            "414",
            "URI_TOO_LONG",
        ),
        (
            format!(
                "GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{}\r\n",
                (0..70)
                    .map(|i| format!("x-h{i}: v\r\n"))
                    .collect::<String>()
            )
            .into_bytes(),
            "431",
            "HEADERS_TOO_LARGE",
        ),
    ];
    for (request, status, code) in cases {
        let (line, body) = raw(addr, &request).await;
        assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{line}: {e}: {body:?}"));
        assert_eq!(v["error"]["code"], code, "{body}");
    }
    let (line, body) = raw(
        addr,
        b"GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    assert!(body.contains("ok"), "{body}");
}
