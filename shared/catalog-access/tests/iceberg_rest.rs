//! The Iceberg REST provider against the Iceberg REST fixture server: every assertion is on
//! what the fixture saw (its request log and counters) or on typed errors.

// The contract suite's adapters; this file uses only the shared helpers.
#[allow(dead_code)]
mod support;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy};
use flotilla_catalog_access::iceberg_rest::{IcebergRestClient, IcebergRestProvider};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogClient, CatalogClientFactory,
    CatalogClientProvider, CatalogConnectionConfig, CatalogProtocol, Clock, ConnectOptions,
    LoadTableOutcome, ResolvedCatalogCredentials, StorageCredential, TableFormat,
    UpstreamNamespace, VendingErrorKind,
};
use flotilla_domain::clock::ManualClock;
use flotilla_testkit::iceberg_fixture::{
    CONFIG_VENDED_KEY, DEFAULT_BEARER_TOKEN, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET,
    DEFAULT_SIGV4_ACCESS_KEY, DEFAULT_SIGV4_SECRET, FixtureAuth, IcebergFault, IcebergFaultRule,
    IcebergFixture, VendingMode, table_key,
};
use support::{ns, policy};

/// A manual clock starting now, shared with the client under test.
fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::starting_now())
}

fn options(clock: Arc<ManualClock>) -> ConnectOptions {
    ConnectOptions {
        http: policy(),
        clock,
    }
}

fn connect_with(
    fx: &IcebergFixture,
    auth: CatalogAuthentication,
    creds: ResolvedCatalogCredentials,
    opts: &ConnectOptions,
) -> Box<dyn CatalogClient> {
    let config = CatalogConnectionConfig::new(fx.uri()).with_property("warehouse", "demo");
    IcebergRestProvider
        .connect(&config, &auth, creds, opts)
        .expect("connect")
}

fn connect(fx: &IcebergFixture) -> Box<dyn CatalogClient> {
    connect_with(
        fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("unused".into()),
        &options(manual_clock()),
    )
}

fn oauth(fx: &IcebergFixture) -> CatalogAuthentication {
    CatalogAuthentication::OauthClientCredentials {
        token_uri: fx.token_url(),
        client_id: DEFAULT_CLIENT_ID.to_owned(),
        scopes: vec!["catalog".to_owned(), "read".to_owned()],
    }
}

fn secret() -> ResolvedCatalogCredentials {
    ResolvedCatalogCredentials::ClientSecret(DEFAULT_CLIENT_SECRET.into())
}

async fn all_namespaces(
    c: &dyn CatalogClient,
    parent: Option<&UpstreamNamespace>,
    size: Option<u32>,
) -> Vec<UpstreamNamespace> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = c
            .list_namespaces(parent, token.as_deref(), size)
            .await
            .unwrap();
        out.extend(page.items);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
}

// ------------------------------------------------------------------------- config, listing

#[tokio::test]
async fn config_prefix_from_defaults_or_overrides_builds_paths() {
    for in_defaults in [true, false] {
        let fx = IcebergFixture::start_with_sample().await;
        fx.set_warehouse("demo");
        fx.set_prefix("lk-7", in_defaults);
        let c = connect(&fx);
        let top = all_namespaces(c.as_ref(), None, None).await;
        assert_eq!(top, vec![ns(&["hr"]), ns(&["sales"])]);
        let config = fx.log().filter(|r| r.path == "/v1/config");
        assert_eq!(config.len(), 1);
        assert_eq!(config[0].query_param("warehouse"), Some("demo"));
        assert_eq!(fx.log().count("GET", "/v1/lk-7/namespaces"), 1);
    }
}

#[tokio::test]
async fn unknown_warehouse_is_not_found() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_warehouse("other");
    let err = connect(&fx)
        .list_namespaces(None, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogAccessError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn nested_namespaces_use_parent_with_unit_separator() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.add_namespace(&["sales", "eu", "de"]);
    let c = connect(&fx);
    let children = all_namespaces(c.as_ref(), Some(&ns(&["sales"])), None).await;
    assert_eq!(children, vec![ns(&["sales", "eu"]), ns(&["sales", "us"])]);
    let grandchildren = all_namespaces(c.as_ref(), Some(&ns(&["sales", "eu"])), None).await;
    assert_eq!(grandchildren, vec![ns(&["sales", "eu", "de"])]);
    let sent = fx
        .log()
        .filter(|r| r.query_param("parent") == Some("sales\u{1f}eu"));
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0]
            .raw_query
            .as_deref()
            .unwrap()
            .contains("parent=sales%1Feu")
    );
    let tables = c
        .list_tables(&ns(&["sales", "eu"]), None, None)
        .await
        .unwrap();
    assert_eq!(tables.items.len(), 1);
    assert_eq!(
        fx.log().count("GET", "/v1/wh/namespaces/sales%1Feu/tables"),
        1
    );
}

#[tokio::test]
async fn advertised_namespace_separator_is_used() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_namespace_separator(Some("%2E"));
    let c = connect(&fx);
    let t = c
        .list_tables(&ns(&["sales", "eu"]), None, None)
        .await
        .unwrap();
    assert_eq!(t.items[0].name, "orders");
    assert_eq!(
        fx.log().count("GET", "/v1/wh/namespaces/sales.eu/tables"),
        1
    );
}

#[tokio::test]
async fn pagination_with_page_size_one_walks_every_page() {
    let fx = IcebergFixture::start_with_sample().await;
    for n in ["a", "b", "c"] {
        fx.add_namespace(&[n]);
    }
    let c = connect(&fx);
    let all = all_namespaces(c.as_ref(), None, Some(1)).await;
    assert_eq!(all.len(), 5);
    let lists = fx.log().filter(|r| r.path == "/v1/wh/namespaces");
    assert_eq!(lists.len(), 5, "one request per item with pageSize=1");
    // The first request asks a paginating server to paginate with an empty pageToken.
    assert_eq!(lists[0].query_param("pageToken"), Some(""));
    assert!(lists.iter().all(|r| r.query_param("pageSize") == Some("1")));
    assert_eq!(lists[1].query_param("pageToken"), Some("off-1"));
}

#[tokio::test]
async fn server_ignoring_page_size_answers_one_page_without_token() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_ignore_page_size(true);
    for n in ["a", "b", "c"] {
        fx.add_table(&["hr"], n);
    }
    let c = connect(&fx);
    let page = c.list_tables(&ns(&["hr"]), None, Some(1)).await.unwrap();
    assert_eq!(page.items.len(), 4);
    assert_eq!(page.next_page_token, None);
    assert_eq!(fx.log().count("GET", "/tables"), 1);
}

#[tokio::test]
async fn views_are_listed_and_loaded_with_current_version() {
    let fx = IcebergFixture::start_with_sample().await;
    let uuid = fx.add_view_with_dialects(
        &["hr"],
        "v",
        &[("spark", "SELECT 1 AS id"), ("trino", "SELECT 1 id")],
        &["hr"],
    );
    let c = connect(&fx);
    let views = c.list_views(&ns(&["hr"]), None, None).await.unwrap();
    assert_eq!(views.items.len(), 1);
    let v = c.load_view(&ns(&["hr"]), "v").await.unwrap();
    assert_eq!(v.stable_id.as_deref(), Some(uuid.as_str()));
    assert_eq!(v.definitions.len(), 2);
    assert_eq!(v.definitions[1].dialect, "trino");
    assert_eq!(v.default_namespace, Some(ns(&["hr"])));
    // Version 2 uses schema 1 (two fields); version 1's schema has one.
    assert_eq!(v.schema["schema-id"], 1);
    assert_eq!(v.schema["fields"].as_array().unwrap().len(), 2);
    assert_eq!(
        v.properties.get("comment").map(String::as_str),
        Some("fixture view")
    );
}

#[tokio::test]
async fn views_are_unsupported_without_advertised_endpoints() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_endpoints(None);
    let c = connect(&fx);
    let caps = c.capabilities().await.unwrap();
    assert!(caps.list_namespaces && caps.list_tables && !caps.list_views && !caps.load_views);
    let err = c.list_views(&ns(&["sales"]), None, None).await.unwrap_err();
    assert!(matches!(err, CatalogAccessError::Unsupported(_)), "{err:?}");
    assert_eq!(
        fx.log().count("GET", "/views"),
        0,
        "no request for an unadvertised endpoint"
    );
}

#[tokio::test]
async fn load_table_maps_metadata_and_honours_etag() {
    let fx = IcebergFixture::start_with_sample().await;
    let uuid = fx.add_table(&["hr"], "payroll");
    let c = connect(&fx);
    let LoadTableOutcome::Loaded { metadata, etag } =
        c.load_table(&ns(&["hr"]), "payroll", None).await.unwrap()
    else {
        panic!("expected metadata");
    };
    assert_eq!(metadata.format, TableFormat::Iceberg);
    assert_eq!(metadata.stable_id.as_deref(), Some(uuid.as_str()));
    assert_eq!(metadata.location, fx.table_location(&["hr"], "payroll"));
    let ml = metadata.metadata_location.clone().unwrap();
    assert_eq!(
        Some(ml.clone()),
        fx.table_metadata_location(&["hr"], "payroll")
    );
    let on_disk = std::fs::read_to_string(ml.trim_start_matches("file://")).unwrap();
    assert!(on_disk.contains(&uuid));
    assert_eq!(metadata.schema["fields"][0]["name"], "id");
    assert_eq!(
        metadata.properties.get("owner").map(String::as_str),
        Some("fixture")
    );
    let etag = etag.expect("etag");
    let again = c
        .load_table(&ns(&["hr"]), "payroll", Some(&etag))
        .await
        .unwrap();
    assert_eq!(again, LoadTableOutcome::NotModified);
    let sent = fx
        .log()
        .filter(|r| r.header("if-none-match") == Some(etag.as_str()));
    assert_eq!(sent.len(), 1);
    fx.update_table_schema(
        &["hr"],
        "payroll",
        serde_json::json!({"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 3, "name": "salary", "required": false, "type": "double"}]}),
    );
    let LoadTableOutcome::Loaded { metadata, etag: e2 } = c
        .load_table(&ns(&["hr"]), "payroll", Some(&etag))
        .await
        .unwrap()
    else {
        panic!("a changed table must load");
    };
    assert_ne!(e2.as_deref(), Some(etag.as_str()));
    assert_eq!(metadata.schema["fields"][1]["name"], "salary");
}

#[tokio::test]
async fn check_connection_lists_namespaces() {
    let fx = IcebergFixture::start_with_sample().await;
    connect(&fx).check_connection().await.unwrap();
    assert_eq!(fx.log().count("GET", "/v1/wh/namespaces"), 1);
}

// ------------------------------------------------------------------------- authentication

#[tokio::test]
async fn oauth_token_is_fetched_once_and_reused_with_scopes() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    let c = connect_with(&fx, oauth(&fx), secret(), &options(manual_clock()));
    for _ in 0..3 {
        c.list_namespaces(None, None, None).await.unwrap();
    }
    assert_eq!(fx.token_requests(), 1);
    assert_eq!(fx.scopes_seen(), vec!["catalog read".to_owned()]);
    let token_req = &fx.log().filter(|r| r.path == "/oauth/token")[0];
    assert_eq!(token_req.method, "POST");
    let api = fx.log().filter(|r| r.path.starts_with("/v1/"));
    assert!(
        api.iter()
            .all(|r| r.header("authorization") == Some("Bearer ***"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_refresh_at_a_time_under_concurrency() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    fx.set_token_lifetime_secs(Some(3600));
    let clock = manual_clock();
    let c: Arc<dyn CatalogClient> = Arc::from(connect_with(
        &fx,
        oauth(&fx),
        secret(),
        &options(clock.clone()),
    ));
    // Warm up: config fetched, first token issued. Then make the token due for refresh, so
    // every concurrent call wants a new one at once.
    c.capabilities().await.unwrap();
    assert_eq!(fx.token_requests(), 1);
    clock.advance(Duration::from_secs(3590));
    fx.add_fault(IcebergFaultRule::once(IcebergFault::Hold).on_path("/oauth/token"));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.list_tables(&ns(&["hr"]), None, None).await })
        })
        .collect();
    while fx.held_count() == 0 {
        tokio::task::yield_now().await;
    }
    // Give every task time to reach the token lock while the first refresh is held.
    for _ in 0..500 {
        tokio::task::yield_now().await;
    }
    fx.release_held();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        fx.token_requests(),
        2,
        "concurrent callers share one refresh"
    );
}

#[tokio::test]
async fn bad_client_secret_is_an_authentication_error_without_the_secret() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    let c = connect_with(
        &fx,
        oauth(&fx),
        ResolvedCatalogCredentials::ClientSecret("wrong-secret-value".into()),
        &options(manual_clock()),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(err, CatalogAccessError::Authentication { .. }),
        "{err:?}"
    );
    assert!(!err.to_string().contains("wrong-secret-value"));
    assert!(!format!("{err:?}").contains("wrong-secret-value"));
}

#[tokio::test]
async fn bearer_token_is_sent_and_a_wrong_one_refused() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::Bearer);
    let good = connect_with(
        &fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token(DEFAULT_BEARER_TOKEN.into()),
        &options(manual_clock()),
    );
    good.list_namespaces(None, None, None).await.unwrap();
    let bad = connect_with(
        &fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("nope".into()),
        &options(manual_clock()),
    );
    let err = bad.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            CatalogAccessError::Authentication {
                status: Some(401),
                ..
            }
        ),
        "{err:?}"
    );
}

fn sigv4_auth() -> CatalogAuthentication {
    CatalogAuthentication::AwsSigV4 {
        region: "eu-west-1".to_owned(),
        signing_name: "execute-api".to_owned(),
    }
}

#[tokio::test]
async fn sigv4_signatures_verify_independently_on_every_call() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::SigV4 {
        region: "eu-west-1".to_owned(),
        service: "execute-api".to_owned(),
    });
    let c = connect_with(
        &fx,
        sigv4_auth(),
        ResolvedCatalogCredentials::AwsAccessKeys {
            access_key_id: DEFAULT_SIGV4_ACCESS_KEY.into(),
            secret_access_key: DEFAULT_SIGV4_SECRET.into(),
            session_token: None,
        },
        &options(manual_clock()),
    );
    // Nested namespace (0x1F in the path and the query) and paging exercise canonicalisation.
    all_namespaces(c.as_ref(), Some(&ns(&["sales"])), Some(1)).await;
    c.load_table(&ns(&["sales", "eu"]), "orders", None)
        .await
        .unwrap();
    let calls = fx.log().filter(|r| r.path.starts_with("/v1/")).len();
    assert_eq!(fx.sigv4_verified(), calls);
    assert!(calls >= 4);
    let wrong = connect_with(
        &fx,
        sigv4_auth(),
        ResolvedCatalogCredentials::AwsAccessKeys {
            access_key_id: DEFAULT_SIGV4_ACCESS_KEY.into(),
            secret_access_key: "not-the-secret".into(),
            session_token: None,
        },
        &options(manual_clock()),
    );
    let err = wrong.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            CatalogAccessError::Authentication {
                status: Some(403),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn unwired_and_mismatched_authentication_fail_explicitly() {
    let config = CatalogConnectionConfig::new("http://127.0.0.1:1");
    let opts = ConnectOptions::with_http(policy());
    let role = CatalogAuthentication::AwsAssumeRole {
        role_arn: "arn:aws:iam::1:role/r".to_owned(),
        external_id: None,
        region: "us-east-1".to_owned(),
    };
    let r = IcebergRestProvider.connect(&config, &role, ResolvedCatalogCredentials::None, &opts);
    assert!(matches!(r, Err(CatalogAccessError::Unsupported(_))));
    let r = IcebergRestProvider.connect(
        &config,
        &CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::ClientSecret("x".into()),
        &opts,
    );
    assert!(matches!(r, Err(CatalogAccessError::Config(_))));
}

#[test]
fn factory_connects_registered_iceberg_provider_only() {
    let mut f = CatalogClientFactory::new();
    f.register(Arc::new(IcebergRestProvider)).unwrap();
    assert!(f.register(Arc::new(IcebergRestProvider)).is_err());
    let config = CatalogConnectionConfig::new("http://127.0.0.1:1");
    let opts = ConnectOptions::with_http(policy());
    assert!(
        f.connect(
            CatalogProtocol::IcebergRest,
            &config,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &opts
        )
        .is_ok()
    );
    let bad = CatalogConnectionConfig::new("http://127.0.0.1:1").with_property("token", "x");
    assert!(matches!(
        f.connect(
            CatalogProtocol::IcebergRest,
            &bad,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &opts
        ),
        Err(CatalogAccessError::Config(_))
    ));
}

// ------------------------------------------------------------------------- vending

fn s3_key(c: &flotilla_catalog_access::VendedCredentials) -> String {
    match &c.credential {
        StorageCredential::S3 { access_key_id, .. } => access_key_id.expose().to_owned(),
        other => panic!("unexpected {other:?}"),
    }
}

fn s3_session(c: &flotilla_catalog_access::VendedCredentials) -> String {
    match &c.credential {
        StorageCredential::S3 { session_token, .. } => {
            session_token.as_ref().unwrap().expose().to_owned()
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn vending_kind(err: CatalogAccessError) -> VendingErrorKind {
    match err {
        CatalogAccessError::CredentialVending { kind, .. } => kind,
        other => panic!("expected a vending error, got {other:?}"),
    }
}

#[tokio::test]
async fn vending_prefers_longest_storage_credential_prefix() {
    let fx = IcebergFixture::start_with_sample().await;
    let c = connect(&fx);
    let v = c
        .vend_storage_credentials(&ns(&["sales", "eu"]), "orders")
        .await
        .unwrap();
    let location = fx.table_location(&["sales", "eu"], "orders").unwrap();
    assert_eq!(s3_key(&v), table_key(&location));
    assert_eq!(v.prefix.as_deref(), Some(location.as_str()));
    assert!(v.expires_at.is_some());
    assert_eq!(
        v.settings.get("s3.path-style-access").map(String::as_str),
        Some("true")
    );
    assert!(
        !v.settings
            .keys()
            .any(|k| k.contains("secret") || k.contains("session"))
    );
    let delegated = fx
        .log()
        .filter(|r| r.header("x-iceberg-access-delegation") == Some("vended-credentials"));
    assert_eq!(delegated.len(), 1);
    // Never printed.
    let dbg = format!("{v:?}");
    assert!(
        !dbg.contains("secret-") && !dbg.contains("session-"),
        "{dbg}"
    );
}

#[tokio::test]
async fn vending_uses_config_without_storage_credentials() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_vending(VendingMode::ConfigOnly);
    let v = connect(&fx)
        .vend_storage_credentials(&ns(&["hr"]), "people")
        .await
        .unwrap();
    assert_eq!(s3_key(&v), CONFIG_VENDED_KEY);
}

#[tokio::test]
async fn vending_refuses_incomplete_expired_remote_signing_and_nothing() {
    let fx = IcebergFixture::start_with_sample().await;
    let c = connect(&fx);
    let t = (ns(&["hr"]), "people");
    fx.set_vending(VendingMode::Incomplete);
    let e = c.vend_storage_credentials(&t.0, t.1).await.unwrap_err();
    assert_eq!(vending_kind(e), VendingErrorKind::Incomplete);
    fx.set_vending(VendingMode::ConfigAndStorageCredentials);
    fx.set_vended_expiry_ms(Some(1_000));
    let e = c.vend_storage_credentials(&t.0, t.1).await.unwrap_err();
    assert_eq!(vending_kind(e), VendingErrorKind::Expired);
    fx.set_vending(VendingMode::RemoteSigning);
    let e = c.vend_storage_credentials(&t.0, t.1).await.unwrap_err();
    assert!(e.to_string().contains("remote signing"), "{e}");
    assert_eq!(vending_kind(e), VendingErrorKind::Unsupported);
    fx.set_vending(VendingMode::Nothing);
    let e = c.vend_storage_credentials(&t.0, t.1).await.unwrap_err();
    assert_eq!(vending_kind(e), VendingErrorKind::Unsupported);
}

#[tokio::test]
async fn renewal_asks_the_credentials_endpoint_and_keeps_the_prefix_selection() {
    // Caching and renewal near expiry are the contract suite's; this is how Iceberg renews.
    let fx = IcebergFixture::start_with_sample().await;
    let clock = manual_clock();
    let expires = clock.now() + Duration::from_secs(600);
    let ms = expires.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    fx.set_vended_expiry_ms(Some(ms));
    let c = connect_with(
        &fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("t".into()),
        &options(clock.clone()),
    );
    let t = (ns(&["hr"]), "people");
    let first = c.vend_storage_credentials(&t.0, t.1).await.unwrap();
    fx.set_vended_expiry_ms(Some(ms + 3_600_000));
    clock.advance(Duration::from_secs(360));
    let renewed = c.vend_storage_credentials(&t.0, t.1).await.unwrap();
    assert_ne!(s3_session(&first), s3_session(&renewed));
    assert_eq!(fx.vend_count(), 2);
    assert_eq!(fx.log().count("GET", "/tables/people/credentials"), 1);
    assert_eq!(
        s3_key(&renewed),
        s3_key(&first),
        "same prefix selection on renewal"
    );
}

#[tokio::test]
async fn renewal_without_credentials_endpoint_reloads_the_table() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_endpoints(Some(&[
        "GET /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    ]));
    let clock = manual_clock();
    let ms = (clock.now() + Duration::from_secs(100))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    fx.set_vended_expiry_ms(Some(ms));
    let c = connect_with(
        &fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("t".into()),
        &options(clock.clone()),
    );
    let t = (ns(&["hr"]), "people");
    c.vend_storage_credentials(&t.0, t.1).await.unwrap();
    c.vend_storage_credentials(&t.0, t.1).await.unwrap();
    assert_eq!(
        fx.vend_count(),
        2,
        "within the renewal margin: renewed every time"
    );
    assert_eq!(fx.log().count("GET", "/credentials"), 0);
    assert_eq!(fx.log().count("GET", "/tables/people"), 2);
}

// ------------------------------------------------------------------------- faults

#[tokio::test]
async fn token_request_is_not_retried() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    fx.add_fault(IcebergFaultRule::always(IcebergFault::Status(503)).on_path("/oauth/token"));
    let c = connect_with(&fx, oauth(&fx), secret(), &options(manual_clock()));
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(err, CatalogAccessError::Retryable { .. }),
        "{err:?}"
    );
    assert_eq!(fx.log().count("POST", "/oauth/token"), 1);
}

#[tokio::test]
async fn oversized_bodies_are_cut_with_and_without_content_length() {
    for fault in [
        IcebergFault::Oversized(64 * 1024),
        IcebergFault::OversizedChunked(64 * 1024),
    ] {
        let fx = IcebergFixture::start_with_sample().await;
        let opts = ConnectOptions {
            http: HttpPolicy {
                max_response_bytes: 16 * 1024,
                ..policy()
            },
            clock: manual_clock(),
        };
        let c = connect_with(
            &fx,
            CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &opts,
        );
        c.capabilities().await.unwrap();
        fx.add_fault(IcebergFaultRule::once(fault.clone()).on_path("/namespaces"));
        let err = c.list_namespaces(None, None, None).await.unwrap_err();
        match &err {
            CatalogAccessError::Protocol { field, detail } => {
                assert_eq!(field, "<body>");
                assert!(detail.as_str().contains("16384"), "{detail}");
            }
            other => panic!("{fault:?}: unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn slow_upstream_times_out_as_retryable_and_succeeds_when_released() {
    let fx = IcebergFixture::start_with_sample().await;
    let opts = ConnectOptions {
        http: HttpPolicy {
            request_timeout: Duration::from_millis(300),
            retry: RetryPolicy::none(),
            ..policy()
        },
        clock: manual_clock(),
    };
    let c = connect_with(
        &fx,
        CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::Token("t".into()),
        &opts,
    );
    c.capabilities().await.unwrap();
    fx.add_fault(IcebergFaultRule::once(IcebergFault::Hold).on_path("/namespaces"));
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Retryable { status: None, detail } if detail.as_str().contains("timed out")),
        "{err:?}"
    );
    fx.release_held();
    // A held response released in time is simply slow, not failed.
    let patient = connect(&fx);
    patient.capabilities().await.unwrap();
    fx.add_fault(IcebergFaultRule::once(IcebergFault::Hold).on_path("/tables"));
    let fut = tokio::spawn(async move { patient.list_tables(&ns(&["hr"]), None, None).await });
    while fx.held_count() == 0 {
        tokio::task::yield_now().await;
    }
    fx.release_held();
    assert_eq!(fut.await.unwrap().unwrap().items.len(), 1);
}

#[tokio::test]
async fn non_conforming_answers_are_refused_by_field_name() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_camel_case_metadata_location(true);
    fx.set_namespaces_as_objects(true);
    let c = connect(&fx);
    let err = c
        .load_table(&ns(&["hr"]), "people", None)
        .await
        .unwrap_err();
    match err {
        CatalogAccessError::Protocol { field, detail } => {
            assert_eq!(field, "metadata-location");
            assert!(detail.as_str().contains("metadataLocation"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    match err {
        CatalogAccessError::Protocol { field, .. } => assert_eq!(field, "namespaces[0]"),
        other => panic!("unexpected {other:?}"),
    }
}

// ------------------------------------------------------------------------- address policy

#[tokio::test]
async fn redirect_to_metadata_address_is_refused() {
    let fx = IcebergFixture::start_with_sample().await;
    let c = connect(&fx);
    c.capabilities().await.unwrap();
    fx.add_fault(
        IcebergFaultRule::always(IcebergFault::Redirect(
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ))
        .on_path("/namespaces"),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    match &err {
        CatalogAccessError::Config(t) => {
            assert!(t.as_str().contains("refused by address policy"), "{t}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        fx.log().count("GET", "/v1/wh/namespaces"),
        1,
        "refused: not retried"
    );
}

#[tokio::test]
async fn redirect_to_allowed_address_is_followed_and_rechecked() {
    let fx = IcebergFixture::start_with_sample().await;
    let c = connect(&fx);
    c.capabilities().await.unwrap();
    fx.add_fault(
        IcebergFaultRule::once(IcebergFault::Redirect(format!(
            "{}/v1/wh/namespaces?parent=sales",
            fx.uri()
        )))
        .on_path("/namespaces"),
    );
    let page = c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(page.items.len(), 2);
}

#[tokio::test]
async fn strict_policy_refuses_loopback_before_sending() {
    let fx = IcebergFixture::start_with_sample().await;
    let opts = ConnectOptions {
        http: HttpPolicy {
            static_hosts: [("catalog.test".to_owned(), vec![fx.addr().ip()])].into(),
            ..HttpPolicy::default()
        },
        clock: manual_clock(),
    };
    for uri in [
        format!("https://{}", fx.addr()),
        format!("https://catalog.test:{}", fx.addr().port()),
        fx.uri(),
    ] {
        let config = CatalogConnectionConfig::new(uri.clone());
        let c = IcebergRestProvider
            .connect(
                &config,
                &CatalogAuthentication::Bearer,
                ResolvedCatalogCredentials::Token("t".into()),
                &opts,
            )
            .unwrap();
        let err = c.list_namespaces(None, None, None).await.unwrap_err();
        assert!(
            matches!(&err, CatalogAccessError::Config(t) if t.as_str().contains("refused by address policy")),
            "{uri}: {err:?}"
        );
    }
    assert!(fx.log().is_empty(), "nothing reached the fixture");
}

#[tokio::test]
async fn local_policy_still_refuses_names_resolving_to_metadata() {
    let opts = ConnectOptions {
        http: HttpPolicy {
            static_hosts: [(
                "metadata.test".to_owned(),
                vec!["169.254.169.254".parse().unwrap()],
            )]
            .into(),
            ..policy()
        },
        clock: manual_clock(),
    };
    let config = CatalogConnectionConfig::new("http://metadata.test/catalog");
    let c = IcebergRestProvider
        .connect(
            &config,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &opts,
        )
        .unwrap();
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Config(t) if t.as_str().contains("not allowed")),
        "{err:?}"
    );
}

#[tokio::test]
async fn client_debug_output_holds_no_secret() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::OAuth);
    let config = CatalogConnectionConfig::new(fx.uri());
    let c =
        IcebergRestClient::new(&config, &oauth(&fx), secret(), &options(manual_clock())).unwrap();
    c.list_namespaces(None, None, None).await.unwrap();
    let v = c
        .vend_storage_credentials(&ns(&["hr"]), "people")
        .await
        .unwrap();
    // The client now holds the client secret, a token and vended keys.
    let dbg = format!("{c:?}");
    assert!(!dbg.contains(DEFAULT_CLIENT_SECRET), "{dbg}");
    assert!(!dbg.contains("fixture-token-"), "{dbg}");
    assert!(!dbg.contains(&format!("secret-{}", s3_key(&v))), "{dbg}");
    assert!(!dbg.contains(&s3_session(&v)), "{dbg}");
}

#[tokio::test]
async fn redirect_chains_stop_after_five_hops() {
    let fx = IcebergFixture::start_with_sample().await;
    let c = connect(&fx);
    c.capabilities().await.unwrap();
    fx.add_fault(
        IcebergFaultRule::always(IcebergFault::Redirect(format!(
            "{}/v1/wh/namespaces",
            fx.uri()
        )))
        .on_path("/namespaces"),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Config(t) if t.as_str().contains("more than 5 redirects")),
        "{err:?}"
    );
    assert_eq!(
        fx.log().count("GET", "/v1/wh/namespaces"),
        6,
        "first request + 5 hops"
    );
}

#[tokio::test]
async fn sigv4_with_session_token_signs_the_token_header() {
    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::SigV4 {
        region: "eu-west-1".to_owned(),
        service: "execute-api".to_owned(),
    });
    // The verifier holds temporary keys to their own session token.
    fx.add_sigv4_key(
        "ASIATEMPORARY",
        DEFAULT_SIGV4_SECRET,
        Some("temporary-session"),
    );
    let c = connect_with(
        &fx,
        sigv4_auth(),
        ResolvedCatalogCredentials::AwsAccessKeys {
            access_key_id: "ASIATEMPORARY".into(),
            secret_access_key: DEFAULT_SIGV4_SECRET.into(),
            session_token: Some("temporary-session".into()),
        },
        &options(manual_clock()),
    );
    c.list_tables(&ns(&["sales", "eu"]), None, Some(5))
        .await
        .unwrap();
    let calls = fx.log().filter(|r| r.path.starts_with("/v1/"));
    assert_eq!(fx.sigv4_verified(), calls.len());
    // Recorded redacted: the log proves the header was sent without holding its value.
    assert!(
        calls
            .iter()
            .all(|r| r.header("x-amz-security-token") == Some("***"))
    );
}

#[tokio::test]
async fn closed_port_is_a_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let config = CatalogConnectionConfig::new(format!("http://{addr}"));
    let c = IcebergRestProvider
        .connect(
            &config,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &options(manual_clock()),
        )
        .unwrap();
    let err = c.check_connection().await.unwrap_err();
    assert!(matches!(err, CatalogAccessError::Connection(_)), "{err:?}");
    assert!(err.is_retryable());
}
