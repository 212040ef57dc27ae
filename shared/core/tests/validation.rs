//! Integration validation and upstream discovery ("Vended storage
//! credentials", "Follow-on API evolution") through the real router, against the fixture
//! upstreams of `flotilla-testkit` and S3 on moto.

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::{Method, StatusCode};
use flotilla_catalog_access::http::{HttpClient, HttpPolicy};
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogClientFactory,
    CatalogClientProvider, CatalogConnectionConfig, CatalogProtocol, ConnectOptions,
    LoadTableOutcome, Page, ResolvedCatalogCredentials, Result as CaResult, TableIdent,
    UpstreamNamespace, VendedCredentials, ViewMetadata,
};
use flotilla_secrets::local::{LocalEncryptedStore, SecretKey};
use flotilla_testkit::delta_sharing_fixture::{self, DeltaSharingFixture, SharingTable};
use flotilla_testkit::iceberg_fixture::{
    self, FixtureAuth, IcebergFault, IcebergFaultRule, IcebergFixture, VendingMode,
};
use flotilla_testkit::unity_fixture::{self, UnityFixture, UnityTable};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde_json::{Value, json};
use support::{ACME, Harness, Resp, ns};

const A: &str = "/v1/accounts/acme";

/// The router over redb with a local encrypted credential store and insecure upstreams
/// allowed (the fixtures listen on loopback over plain http), optionally with a decorated
/// provider factory.
struct Env {
    h: Harness,
    _secrets: tempfile::TempDir,
}

impl Env {
    async fn new() -> Self {
        Self::with_factory(None).await
    }

    async fn with_factory(factory: Option<CatalogClientFactory>) -> Self {
        let mut h = Harness::redb();
        let secrets = tempfile::tempdir().expect("tempdir");
        let store =
            LocalEncryptedStore::with_key(secrets.path().join("secrets"), &SecretKey::generate())
                .expect("local credential store");
        let mut state = h.state.clone().with_credentials(Arc::new(store));
        state.config.allow_insecure_upstreams = true;
        if let Some(f) = factory {
            state = state.with_catalog_access(Arc::new(f));
        }
        h.router = flotilla_core::router(state.clone());
        h.state = state;
        h.account("acme").await;
        Self {
            h,
            _secrets: secrets,
        }
    }

    async fn integration(&self, name: &str, body: Value) -> String {
        let mut body = body;
        body["display_name"] = json!(name);
        let r = self.h.post(&format!("{A}/integrations"), ACME, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        r.body["id"].as_str().expect("id").to_owned()
    }

    async fn validate(&self, id: &str) -> Resp {
        self.validate_query(id, "").await
    }

    async fn validate_query(&self, id: &str, query: &str) -> Resp {
        let r = self
            .h
            .call(
                Method::POST,
                &format!("{A}/integrations/{id}/validate{query}"),
                Some(ACME),
                None,
                &[],
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r
    }

    async fn get(&self, path: &str) -> Resp {
        self.h.get(path, ACME).await
    }
}

fn check<'a>(r: &'a Resp, kind: &str) -> &'a Value {
    r.body["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} check in {:?}", r.body))
}

fn assert_check(r: &Resp, kind: &str, status: &str, issue: Option<&str>) {
    let c = check(r, kind);
    assert_eq!(c["status"], status, "{kind}: {:?}", r.body);
    assert_eq!(c["issue"].as_str(), issue, "{kind}: {:?}", r.body);
    assert!(
        c["summary"]
            .as_str()
            .is_some_and(|s| !s.is_empty() && s.chars().count() <= 401),
        "{:?}",
        c
    );
}

fn assert_all_passed(r: &Resp) {
    for kind in [
        "CATALOG_CONNECTION",
        "CATALOG_AUTHENTICATION",
        "DISCOVERY",
        "CREDENTIAL_VENDING",
        "STORAGE_ACCESS",
    ] {
        assert_check(r, kind, "PASSED", None);
    }
    assert_eq!(r.body["valid"], true, "{:?}", r.body);
    assert_eq!(r.body["checks"].as_array().map(Vec::len), Some(5));
}

fn assert_absent(r: &Resp, secrets: &[&str]) {
    let text = r.body.to_string();
    for s in secrets {
        assert!(!s.is_empty());
        assert!(
            !text.contains(s),
            "a credential leaked into the response: {text}"
        );
    }
}

fn iceberg_oauth(f: &IcebergFixture, secret: &str) -> Value {
    json!({
        "type": "ICEBERG_REST",
        "uri": f.uri(),
        "authentication": {"type": "OAUTH_CLIENT_CREDENTIALS", "token_uri": f.token_url(),
                           "client_id": iceberg_fixture::DEFAULT_CLIENT_ID},
        "credentials": {"client_secret": secret},
    })
}

async fn oauth_fixture() -> IcebergFixture {
    let f = IcebergFixture::start_with_sample().await;
    f.set_auth(FixtureAuth::OAuth);
    f
}

/// Every credential string the Iceberg fixture vends (keys, secrets, session tokens).
fn iceberg_vended_material() -> Vec<&'static str> {
    vec![
        iceberg_fixture::CONFIG_VENDED_KEY,
        iceberg_fixture::WIDE_VENDED_KEY,
        "AKIA-TABLE",
        "secret-AKIA",
        "session-",
    ]
}

// ---- moto ------------------------------------------------------------------------------

fn moto() -> String {
    flotilla_testkit::moto::endpoint()
}

/// Creates a bucket on moto and writes `objects` into it with the emulator's own test keys.
async fn bucket_with(objects: &[&str]) -> String {
    let endpoint = moto();
    let bucket = flotilla_testkit::moto::unique_name("val");
    let http = HttpClient::new(HttpPolicy::local()).expect("http client");
    let url = url::Url::parse(&format!("{endpoint}/{bucket}")).expect("bucket url");
    let r = http
        .request(Method::PUT, url)
        .send()
        .await
        .expect("create bucket");
    assert!(r.status().is_success(), "create bucket: {}", r.status());
    let s3 = AmazonS3Builder::new()
        .with_bucket_name(&bucket)
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region(flotilla_testkit::moto::TEST_REGION)
        .with_access_key_id(flotilla_testkit::moto::TEST_ACCESS_KEY_ID)
        .with_secret_access_key(flotilla_testkit::moto::TEST_SECRET_ACCESS_KEY)
        .build()
        .expect("s3 client");
    for key in objects {
        s3.put(&ObjectPath::from(*key), PutPayload::from(b"{}".to_vec()))
            .await
            .expect("put object");
    }
    bucket
}

async fn unity_on_moto(bucket: &str) -> UnityFixture {
    let f = UnityFixture::start().await;
    f.add_catalog("main");
    f.add_schema("main", "default");
    f.add_table(
        "main",
        "default",
        UnityTable::delta("orders", &format!("s3://{bucket}/main/orders")),
    );
    f
}

fn unity_bearer(f: &UnityFixture, token: &str) -> Value {
    json!({
        "type": "UNITY",
        "uri": f.endpoint(),
        "properties": {"s3.endpoint": moto()},
        "authentication": {"type": "BEARER"},
        "credentials": {"token": token},
    })
}

fn unity_vended_material(f: &UnityFixture) -> Vec<String> {
    f.vended()
        .into_iter()
        .flat_map(|v| [v.access_key_id, v.secret_access_key, v.session_token])
        .collect()
}

// ---- validation: Iceberg REST ----------------------------------------------------------

#[tokio::test]
async fn iceberg_oauth_with_local_metadata_passes_every_check() {
    let f = oauth_fixture().await;
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate(&id).await;
    assert_all_passed(&r);
    assert!(f.vend_count() > 0, "vending was exercised");
    let mut secrets = iceberg_vended_material();
    secrets.push(iceberg_fixture::DEFAULT_CLIENT_SECRET);
    assert_absent(&r, &secrets);
}

#[tokio::test]
async fn a_wrong_client_secret_fails_authentication_only() {
    let f = oauth_fixture().await;
    let env = Env::new().await;
    let id = env
        .integration("ice", iceberg_oauth(&f, "not-the-secret-canary"))
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CATALOG_CONNECTION", "PASSED", None);
    assert_check(
        &r,
        "CATALOG_AUTHENTICATION",
        "FAILED",
        Some("AUTHENTICATION_FAILED"),
    );
    for kind in ["DISCOVERY", "CREDENTIAL_VENDING", "STORAGE_ACCESS"] {
        assert_check(&r, kind, "NOT_RUN", None);
    }
    assert_absent(&r, &["not-the-secret-canary"]);
    // Rotating to the right secret publishes a new generation, which the next validation reads.
    let rot = env
        .h
        .call(
            Method::PUT,
            &format!("{A}/integrations/{id}/authentication"),
            Some(ACME),
            Some(json!({"credentials": {"client_secret": iceberg_fixture::DEFAULT_CLIENT_SECRET}})),
            &[],
        )
        .await;
    assert_eq!(rot.status, StatusCode::OK, "{:?}", rot.body);
    assert_all_passed(&env.validate(&id).await);
}

#[tokio::test]
async fn a_non_conforming_endpoint_fails_the_connection_and_a_failing_listing_fails_discovery() {
    let f = oauth_fixture().await;
    f.add_fault(IcebergFaultRule::always(IcebergFault::MalformedJson).on_path("/v1/config"));
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate(&id).await;
    assert_check(
        &r,
        "CATALOG_CONNECTION",
        "FAILED",
        Some("CONNECTION_FAILED"),
    );
    assert_check(&r, "CATALOG_AUTHENTICATION", "NOT_RUN", None);
    f.clear_faults();
    f.add_fault(IcebergFaultRule::always(IcebergFault::Status(500)).on_path("/tables"));
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CATALOG_AUTHENTICATION", "PASSED", None);
    assert_check(&r, "DISCOVERY", "FAILED", Some("DISCOVERY_FAILED"));
    assert_check(&r, "CREDENTIAL_VENDING", "NOT_RUN", None);
}

#[tokio::test]
async fn an_unreachable_catalog_fails_the_connection_check() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let env = Env::new().await;
    let id = env
        .integration(
            "gone",
            json!({"type": "ICEBERG_REST", "uri": format!("http://127.0.0.1:{port}"),
                   "authentication": {"type": "BEARER"}, "credentials": {"token": "tok-canary-123"}}),
        )
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(
        &r,
        "CATALOG_CONNECTION",
        "FAILED",
        Some("CONNECTION_FAILED"),
    );
    assert_check(&r, "CATALOG_AUTHENTICATION", "NOT_RUN", None);
    assert_absent(&r, &["tok-canary-123"]);
}

#[tokio::test]
async fn expired_vended_credentials_fail_vending_with_credential_expired() {
    let f = oauth_fixture().await;
    let past = time::OffsetDateTime::now_utc().unix_timestamp() * 1000 - 60_000;
    f.set_vended_expiry_ms(Some(past));
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CATALOG_AUTHENTICATION", "PASSED", None);
    assert_check(&r, "DISCOVERY", "PASSED", None);
    assert_check(
        &r,
        "CREDENTIAL_VENDING",
        "FAILED",
        Some("CREDENTIAL_EXPIRED"),
    );
    assert_check(&r, "STORAGE_ACCESS", "NOT_RUN", None);
    assert_absent(&r, &iceberg_vended_material());
}

#[tokio::test]
async fn a_catalog_without_vending_is_never_valid() {
    let f = oauth_fixture().await;
    f.set_vending(VendingMode::Nothing);
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(
        &r,
        "CREDENTIAL_VENDING",
        "FAILED",
        Some("VENDING_UNSUPPORTED"),
    );
    assert_check(&r, "STORAGE_ACCESS", "NOT_RUN", None);
}

#[tokio::test]
async fn a_missing_metadata_object_fails_storage_access() {
    let f = oauth_fixture().await;
    let location = f
        .table_metadata_location(&["hr"], "people")
        .expect("metadata location");
    let file = url::Url::parse(&location)
        .expect("url")
        .to_file_path()
        .expect("file path");
    std::fs::remove_file(file).expect("remove metadata file");
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate_query(&id, "?namespace=hr&table=people").await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CREDENTIAL_VENDING", "PASSED", None);
    assert_check(
        &r,
        "STORAGE_ACCESS",
        "FAILED",
        Some("STORAGE_ACCESS_FAILED"),
    );
    // Another table of the same catalog still validates.
    let r = env
        .validate_query(
            &id,
            &format!("?namespace={}&table=orders", ns(&["sales", "eu"])),
        )
        .await;
    assert_all_passed(&r);
}

#[tokio::test]
async fn a_catalog_without_tables_reports_no_tables() {
    let f = IcebergFixture::start().await;
    f.add_namespace(&["empty"]);
    f.add_namespace(&["empty", "deeper"]);
    let env = Env::new().await;
    let id = env
        .integration(
            "ice",
            json!({"type": "ICEBERG_REST", "uri": f.uri(), "authentication": {"type": "BEARER"},
                   "credentials": {"token": "any"}}),
        )
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CATALOG_AUTHENTICATION", "PASSED", None);
    assert_check(&r, "DISCOVERY", "FAILED", Some("NO_TABLES"));
    assert_check(&r, "CREDENTIAL_VENDING", "NOT_RUN", None);
}

// AWS authentication (assume-role, access keys, ambient) is proven in `tests/aws_auth.rs`.

/// A provider decorator that narrows every vended prefix below the table location, so the
/// metadata object is outside the credential's scope.
struct NarrowingProvider;

struct NarrowingClient(Box<dyn CatalogClient>);

impl CatalogClientProvider for NarrowingProvider {
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
        Ok(Box::new(NarrowingClient(IcebergRestProvider.connect(
            config,
            auth,
            credentials,
            options,
        )?)))
    }
}

#[async_trait]
impl CatalogClient for NarrowingClient {
    fn protocol(&self) -> CatalogProtocol {
        self.0.protocol()
    }
    async fn capabilities(&self) -> CaResult<CatalogCapabilities> {
        self.0.capabilities().await
    }
    async fn check_connection(&self) -> CaResult<()> {
        self.0.check_connection().await
    }
    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> CaResult<Page<UpstreamNamespace>> {
        self.0.list_namespaces(parent, page_token, page_size).await
    }
    async fn list_tables(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        self.0.list_tables(namespace, page_token, page_size).await
    }
    async fn list_views(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        self.0.list_views(namespace, page_token, page_size).await
    }
    async fn load_table(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
        if_none_match: Option<&str>,
    ) -> CaResult<LoadTableOutcome> {
        self.0.load_table(namespace, name, if_none_match).await
    }
    async fn load_view(&self, namespace: &UpstreamNamespace, name: &str) -> CaResult<ViewMetadata> {
        self.0.load_view(namespace, name).await
    }
    async fn vend_storage_credentials(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> CaResult<VendedCredentials> {
        let mut v = self.0.vend_storage_credentials(namespace, name).await?;
        v.prefix = v
            .prefix
            .map(|p| format!("{}/data", p.trim_end_matches('/')));
        Ok(v)
    }
}

#[tokio::test]
async fn credentials_scoped_away_from_the_metadata_fail_with_scope_invalid() {
    let f = oauth_fixture().await;
    let mut factory = CatalogClientFactory::new();
    factory
        .register(Arc::new(NarrowingProvider))
        .expect("register");
    let env = Env::with_factory(Some(factory)).await;
    let id = env
        .integration(
            "ice",
            iceberg_oauth(&f, iceberg_fixture::DEFAULT_CLIENT_SECRET),
        )
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "DISCOVERY", "PASSED", None);
    assert_check(
        &r,
        "CREDENTIAL_VENDING",
        "FAILED",
        Some("CREDENTIAL_SCOPE_INVALID"),
    );
    assert_check(&r, "STORAGE_ACCESS", "NOT_RUN", None);
    assert_absent(&r, &iceberg_vended_material());
}

// ---- validation: Unity and Delta Sharing on S3 (moto) ---------------------------------

#[tokio::test]
async fn unity_on_s3_passes_with_vended_credentials_and_no_views() {
    let bucket = bucket_with(&["main/orders/_delta_log/00000000000000000000.json"]).await;
    let f = unity_on_moto(&bucket).await;
    let env = Env::new().await;
    let id = env
        .integration("uc", unity_bearer(&f, unity_fixture::DEFAULT_BEARER_TOKEN))
        .await;
    let r = env.validate(&id).await;
    assert_all_passed(&r);
    let mut secrets = unity_vended_material(&f);
    assert!(!secrets.is_empty(), "the fixture vended credentials");
    secrets.push(unity_fixture::DEFAULT_BEARER_TOKEN.to_owned());
    assert_absent(&r, &secrets.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn unity_storage_without_the_delta_log_or_bucket_fails_storage_access() {
    // The bucket exists, the table's log does not.
    let bucket = bucket_with(&["main/other/_delta_log/00000000000000000000.json"]).await;
    let f = unity_on_moto(&bucket).await;
    let env = Env::new().await;
    let id = env
        .integration("uc", unity_bearer(&f, unity_fixture::DEFAULT_BEARER_TOKEN))
        .await;
    let r = env.validate(&id).await;
    assert_eq!(r.body["valid"], false);
    assert_check(&r, "CREDENTIAL_VENDING", "PASSED", None);
    assert_check(
        &r,
        "STORAGE_ACCESS",
        "FAILED",
        Some("STORAGE_ACCESS_FAILED"),
    );
    // No such bucket at all.
    let g = unity_on_moto(&flotilla_testkit::moto::unique_name("nobucket")).await;
    let id = env
        .integration("uc2", unity_bearer(&g, unity_fixture::DEFAULT_BEARER_TOKEN))
        .await;
    let r = env.validate(&id).await;
    assert_check(
        &r,
        "STORAGE_ACCESS",
        "FAILED",
        Some("STORAGE_ACCESS_FAILED"),
    );
    let secrets = unity_vended_material(&g);
    assert_absent(&r, &secrets.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_s3_endpoint_at_the_metadata_address_is_refused() {
    let bucket = bucket_with(&["main/orders/_delta_log/00000000000000000000.json"]).await;
    let f = unity_on_moto(&bucket).await;
    let env = Env::new().await;
    let mut body = unity_bearer(&f, unity_fixture::DEFAULT_BEARER_TOKEN);
    body["properties"]["s3.endpoint"] = json!("http://169.254.169.254");
    let id = env.integration("uc", body).await;
    let r = env.validate(&id).await;
    assert_check(&r, "CREDENTIAL_VENDING", "PASSED", None);
    assert_check(
        &r,
        "STORAGE_ACCESS",
        "FAILED",
        Some("STORAGE_ACCESS_FAILED"),
    );
    let summary = check(&r, "STORAGE_ACCESS")["summary"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(summary.contains("refused"), "{summary}");
}

#[tokio::test]
async fn unity_expired_credentials_and_bad_token_are_separate_issues() {
    let bucket = bucket_with(&["main/orders/_delta_log/00000000000000000000.json"]).await;
    let f = unity_on_moto(&bucket).await;
    f.set_credential_lifetime_ms(-60_000);
    let env = Env::new().await;
    let id = env
        .integration("uc", unity_bearer(&f, unity_fixture::DEFAULT_BEARER_TOKEN))
        .await;
    let r = env.validate(&id).await;
    assert_check(
        &r,
        "CREDENTIAL_VENDING",
        "FAILED",
        Some("CREDENTIAL_EXPIRED"),
    );
    assert_check(&r, "STORAGE_ACCESS", "NOT_RUN", None);
    let id = env
        .integration("uc-bad", unity_bearer(&f, "wrong-token-canary"))
        .await;
    let r = env.validate(&id).await;
    assert_check(&r, "CATALOG_CONNECTION", "PASSED", None);
    assert_check(
        &r,
        "CATALOG_AUTHENTICATION",
        "FAILED",
        Some("AUTHENTICATION_FAILED"),
    );
    assert_absent(&r, &["wrong-token-canary"]);
}

#[tokio::test]
async fn delta_sharing_on_s3_passes_and_a_bad_recipient_token_fails() {
    let bucket = bucket_with(&["share/t/_delta_log/00000000000000000003.json"]).await;
    let f = DeltaSharingFixture::start().await;
    f.add_share("s");
    f.add_schema("s", "sc");
    f.add_table(
        "s",
        "sc",
        SharingTable::new("t", &format!("s3://{bucket}/share/t")).with_access_modes(&["dir"]),
    );
    let env = Env::new().await;
    let body = |token: &str| {
        json!({"type": "DELTA_SHARING", "uri": f.base_url(), "properties": {"s3.endpoint": moto()},
               "authentication": {"type": "BEARER"}, "credentials": {"token": token}})
    };
    let id = env
        .integration("ds", body(delta_sharing_fixture::DEFAULT_RECIPIENT_TOKEN))
        .await;
    let r = env.validate(&id).await;
    assert_all_passed(&r);
    let vended: Vec<String> = f
        .vended()
        .into_iter()
        .flat_map(|v| [v.access_key_id, v.secret_access_key, v.session_token])
        .collect();
    assert!(!vended.is_empty());
    assert_absent(&r, &vended.iter().map(String::as_str).collect::<Vec<_>>());
    let id = env
        .integration("ds-bad", body("recipient-canary-0000"))
        .await;
    let r = env.validate(&id).await;
    assert_check(
        &r,
        "CATALOG_AUTHENTICATION",
        "FAILED",
        Some("AUTHENTICATION_FAILED"),
    );
}

// ---- upstream listings -----------------------------------------------------------------

/// Follows `next_page_token` from `first`, answering every item and every page's length.
async fn collect(env: &Env, first: &str) -> (Vec<Value>, Vec<usize>) {
    let mut items = Vec::new();
    let mut sizes = Vec::new();
    let mut path = first.to_owned();
    for _ in 0..100 {
        let r = env.get(&path).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        let page = r.body["items"].as_array().cloned().unwrap_or_default();
        sizes.push(page.len());
        items.extend(page);
        match r.body["next_page_token"].as_str() {
            Some(t) => path = format!("{first}&page_token={}", support::urlencode(t)),
            None => return (items, sizes),
        }
    }
    panic!("listing did not end");
}

async fn bearer_iceberg(env: &Env, f: &IcebergFixture) -> String {
    f.set_auth(FixtureAuth::Bearer);
    env.integration(
        "ice",
        json!({"type": "ICEBERG_REST", "uri": f.uri(), "authentication": {"type": "BEARER"},
               "credentials": {"token": iceberg_fixture::DEFAULT_BEARER_TOKEN}}),
    )
    .await
}

#[tokio::test]
async fn namespaces_page_through_the_upstream_and_its_children() {
    let f = IcebergFixture::start_with_sample().await;
    for n in ["a1", "a2", "a3", "a4", "a5"] {
        f.add_namespace(&[n]);
    }
    let env = Env::new().await;
    let id = bearer_iceberg(&env, &f).await;
    let (items, sizes) = collect(
        &env,
        &format!("{A}/integrations/{id}/upstream/namespaces?page_size=2"),
    )
    .await;
    let paths: Vec<Value> = items.iter().map(|i| i["path"].clone()).collect();
    assert_eq!(
        paths,
        vec![
            json!(["a1"]),
            json!(["a2"]),
            json!(["a3"]),
            json!(["a4"]),
            json!(["a5"]),
            json!(["hr"]),
            json!(["sales"])
        ]
    );
    assert!(
        sizes.iter().all(|s| *s <= 2) && sizes.len() >= 4,
        "{sizes:?}"
    );
    let (children, _) = collect(
        &env,
        &format!("{A}/integrations/{id}/upstream/namespaces?parent=sales&page_size=1"),
    )
    .await;
    assert_eq!(
        children,
        vec![
            json!({"path": ["sales", "eu"]}),
            json!({"path": ["sales", "us"]})
        ]
    );
    let r = env
        .get(&format!(
            "{A}/integrations/{id}/upstream/namespaces?parent=nope"
        ))
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
}

#[tokio::test]
async fn objects_list_tables_then_views_across_pages_even_when_the_upstream_ignores_page_size() {
    let f = IcebergFixture::start_with_sample().await;
    f.add_table(&["sales"], "returns");
    f.add_table(&["sales"], "refunds");
    f.add_view(&["sales"], "v2", "SELECT 1", &["sales"]);
    let env = Env::new().await;
    let id = bearer_iceberg(&env, &f).await;
    let expected = vec![
        json!({"namespace": ["sales"], "name": "orders", "kind": "TABLE"}),
        json!({"namespace": ["sales"], "name": "refunds", "kind": "TABLE"}),
        json!({"namespace": ["sales"], "name": "returns", "kind": "TABLE"}),
        json!({"namespace": ["sales"], "name": "eu_orders", "kind": "VIEW"}),
        json!({"namespace": ["sales"], "name": "v2", "kind": "VIEW"}),
    ];
    let sort = |mut v: Vec<Value>| {
        v.sort_by_key(|i| (i["kind"].to_string(), i["name"].to_string()));
        v
    };
    for ignore in [false, true] {
        f.set_ignore_page_size(ignore);
        let (items, sizes) = collect(
            &env,
            &format!("{A}/integrations/{id}/upstream/objects?namespace=sales&page_size=2"),
        )
        .await;
        assert_eq!(sort(items), expected, "ignore_page_size={ignore}");
        assert!(sizes.iter().all(|s| *s <= 2), "{sizes:?}");
    }
    let (views, _) = collect(
        &env,
        &format!("{A}/integrations/{id}/upstream/objects?namespace=sales&kinds=view&page_size=1"),
    )
    .await;
    assert_eq!(views.len(), 2);
    assert!(views.iter().all(|v| v["kind"] == "VIEW"));
    let (tables, _) = collect(
        &env,
        &format!(
            "{A}/integrations/{id}/upstream/objects?namespace={}&kinds=table",
            ns(&["sales", "eu"])
        ),
    )
    .await;
    assert_eq!(
        tables,
        vec![json!({"namespace": ["sales", "eu"], "name": "orders", "kind": "TABLE"})]
    );
    let r = env
        .get(&format!("{A}/integrations/{id}/upstream/objects"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = env
        .get(&format!(
            "{A}/integrations/{id}/upstream/objects?namespace=sales&kinds=index"
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_view_less_provider_lists_tables_and_no_views() {
    let f = UnityFixture::start_with_sample().await;
    let env = Env::new().await;
    let id = env
        .integration(
            "uc",
            json!({"type": "UNITY", "uri": f.endpoint(), "authentication": {"type": "BEARER"},
                   "credentials": {"token": unity_fixture::DEFAULT_BEARER_TOKEN}}),
        )
        .await;
    let (items, _) = collect(
        &env,
        &format!(
            "{A}/integrations/{id}/upstream/objects?namespace={}",
            ns(&["main", "default"])
        ),
    )
    .await;
    assert_eq!(
        items,
        vec![json!({"namespace": ["main", "default"], "name": "orders", "kind": "TABLE"})]
    );
    let (views, _) = collect(
        &env,
        &format!(
            "{A}/integrations/{id}/upstream/objects?namespace={}&kinds=view",
            ns(&["main", "default"])
        ),
    )
    .await;
    assert!(views.is_empty());
    let (top, _) = collect(
        &env,
        &format!("{A}/integrations/{id}/upstream/namespaces?page_size=5"),
    )
    .await;
    assert_eq!(top, vec![json!({"path": ["main"]})]);
}

#[tokio::test]
async fn page_tokens_are_bound_to_the_credential_generation_and_the_filter() {
    let f = IcebergFixture::start_with_sample().await;
    let env = Env::new().await;
    let id = bearer_iceberg(&env, &f).await;
    let base = format!("{A}/integrations/{id}/upstream");
    let r = env.get(&format!("{base}/namespaces?page_size=1")).await;
    let token = r.body["next_page_token"]
        .as_str()
        .expect("a second page")
        .to_owned();
    let t = support::urlencode(&token);
    // The same filter accepts it.
    let r = env
        .get(&format!("{base}/namespaces?page_size=1&page_token={t}"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    // Another filter, or another listing, does not.
    let r = env
        .get(&format!(
            "{base}/namespaces?parent=sales&page_size=1&page_token={t}"
        ))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    let r = env
        .get(&format!(
            "{base}/objects?namespace=sales&page_size=1&page_token={t}"
        ))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    // Objects tokens are bound to their namespace and kinds.
    let r = env
        .get(&format!("{base}/objects?namespace=sales&page_size=1"))
        .await;
    let ot = support::urlencode(r.body["next_page_token"].as_str().expect("more objects"));
    let r = env
        .get(&format!(
            "{base}/objects?namespace=sales&kinds=table&page_size=1&page_token={ot}"
        ))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    let r = env
        .get(&format!(
            "{base}/objects?namespace=hr&page_size=1&page_token={ot}"
        ))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    // A forged token is refused too.
    let r = env
        .get(&format!("{base}/namespaces?page_token=bm90LWEtdG9rZW4"))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    // Rotation publishes a new credential generation: the old token is dead.
    let rot = env
        .h
        .call(
            Method::PUT,
            &format!("{A}/integrations/{id}/authentication"),
            Some(ACME),
            Some(json!({"credentials": {"token": iceberg_fixture::DEFAULT_BEARER_TOKEN}})),
            &[],
        )
        .await;
    assert_eq!(rot.status, StatusCode::OK, "{:?}", rot.body);
    let r = env
        .get(&format!("{base}/namespaces?page_size=1&page_token={t}"))
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );
    // A fresh listing under the new generation works.
    let r = env.get(&format!("{base}/namespaces?page_size=1")).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

#[tokio::test]
async fn listings_and_validation_are_account_scoped() {
    let f = IcebergFixture::start_with_sample().await;
    let env = Env::new().await;
    let id = bearer_iceberg(&env, &f).await;
    let r = env
        .h
        .get(
            &format!("{A}/integrations/{id}/upstream/namespaces"),
            support::BETA,
        )
        .await;
    assert!(
        matches!(r.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{:?}",
        r.status
    );
    let r = env
        .h
        .call(
            Method::POST,
            &format!("{A}/integrations/{id}/validate"),
            Some(support::BETA),
            None,
            &[],
        )
        .await;
    assert!(
        matches!(r.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{:?}",
        r.status
    );
    let r = env
        .h
        .call(
            Method::POST,
            &format!("{A}/integrations/nope/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}
