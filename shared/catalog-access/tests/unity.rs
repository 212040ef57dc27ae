//! The Unity Catalog provider against the Unity fixture server (`flotilla-testkit`).
//!
//! Every assertion about what the provider sent is checked against the fixture's request
//! log, not against what the client reports.

// The contract suite's adapters; this file uses only the shared helpers.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy};
use flotilla_catalog_access::unity::{UNITY_CATALOG, UnityProvider};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogClient, CatalogClientProvider,
    CatalogConnectionConfig, ConnectOptions, LoadTableOutcome, ResolvedCatalogCredentials,
    StorageCredential, TableFormat, TableMetadata, VendingErrorKind,
};
use flotilla_testkit::unity_fixture::{
    DEFAULT_BEARER_TOKEN, DEFAULT_CLIENT_ID, DEFAULT_CLIENT_SECRET, Fault, FaultRule, UnityColumn,
    UnityFixture, UnityTable,
};
use serde_json::json;
use support::{ns, policy};

fn options() -> ConnectOptions {
    ConnectOptions::with_http(policy())
}

fn bearer(f: &UnityFixture) -> Box<dyn CatalogClient> {
    bearer_with(f, &[], options())
}

fn bearer_with(
    f: &UnityFixture,
    props: &[(&str, &str)],
    options: ConnectOptions,
) -> Box<dyn CatalogClient> {
    let mut cfg = CatalogConnectionConfig::new(f.endpoint());
    for (k, v) in props {
        cfg = cfg.with_property(*k, *v);
    }
    UnityProvider
        .connect(
            &cfg,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token(DEFAULT_BEARER_TOKEN.into()),
            &options,
        )
        .unwrap()
}

fn oauth(f: &UnityFixture, secret: &str, options: ConnectOptions) -> Box<dyn CatalogClient> {
    UnityProvider
        .connect(
            &CatalogConnectionConfig::new(f.base_url()),
            &CatalogAuthentication::OauthClientCredentials {
                token_uri: f.token_url(),
                client_id: DEFAULT_CLIENT_ID.into(),
                scopes: vec!["catalog.read".into()],
            },
            ResolvedCatalogCredentials::ClientSecret(secret.into()),
            &options,
        )
        .unwrap()
}

fn loaded(outcome: LoadTableOutcome) -> TableMetadata {
    match outcome {
        LoadTableOutcome::Loaded { metadata, .. } => *metadata,
        LoadTableOutcome::NotModified => panic!("expected a loaded table"),
    }
}

fn secret_free(text: &str, f: &UnityFixture) {
    for v in f.vended() {
        for s in [&v.access_key_id, &v.secret_access_key, &v.session_token] {
            assert!(
                !text.contains(s.as_str()),
                "vended secret leaked into: {text}"
            );
        }
    }
    assert!(
        !text.contains(DEFAULT_BEARER_TOKEN),
        "bearer token leaked: {text}"
    );
    assert!(
        !text.contains(DEFAULT_CLIENT_SECRET),
        "client secret leaked: {text}"
    );
}

// ---- discovery ----------------------------------------------------------------------------

#[tokio::test]
async fn catalogs_and_schemas_are_a_two_level_namespace() {
    let f = UnityFixture::start_with_sample().await;
    f.add_schema("main", "sales");
    f.add_catalog("other");
    let c = bearer(&f);

    c.check_connection().await.unwrap();
    let top = c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(top.items, vec![ns(&["main"]), ns(&["other"])]);
    assert_eq!(top.next_page_token, None);
    let schemas = c
        .list_namespaces(Some(&ns(&["main"])), None, None)
        .await
        .unwrap();
    assert_eq!(
        schemas.items,
        vec![ns(&["main", "default"]), ns(&["main", "sales"])]
    );
    let leaf = c
        .list_namespaces(Some(&ns(&["main", "default"])), None, None)
        .await
        .unwrap();
    assert!(leaf.items.is_empty());
    let tables = c
        .list_tables(&ns(&["main", "default"]), None, None)
        .await
        .unwrap();
    assert_eq!(tables.items.len(), 1);
    assert_eq!(tables.items[0].name, "orders");
    // A catalog holds schemas, not tables: it lists none (so discovery does not skip it),
    // and a missing catalog is not found.
    let none = c.list_tables(&ns(&["main"]), None, None).await.unwrap();
    assert!(none.items.is_empty() && none.next_page_token.is_none());
    assert!(matches!(
        c.list_tables(&ns(&["nocatalog"]), None, None).await,
        Err(CatalogAccessError::NotFound(_))
    ));

    let schema_req = &f.requests_to("/schemas")[0];
    assert_eq!(schema_req.query_param("catalog_name"), Some("main"));
    assert_eq!(schema_req.header("authorization"), Some("Bearer ***"));
    let caps = c.capabilities().await.unwrap();
    assert!(caps.list_namespaces && caps.list_tables && caps.vend_storage_credentials);
    assert!(!caps.list_views && !caps.load_views);
}

#[tokio::test]
async fn pinned_catalog_gives_one_level_namespaces() {
    let f = UnityFixture::start_with_sample().await;
    f.add_catalog("other");
    f.add_schema("other", "hidden");
    let c = bearer_with(&f, &[(UNITY_CATALOG, "main")], options());

    let top = c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(top.items, vec![ns(&["default"])]);
    let tables = c.list_tables(&ns(&["default"]), None, None).await.unwrap();
    assert_eq!(tables.items[0].namespace, ns(&["default"]));
    let t = loaded(
        c.load_table(&ns(&["default"]), "orders", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.identifier.namespace, ns(&["default"]));
    assert!(
        f.requests_to("/catalogs").is_empty(),
        "a pinned client never lists catalogs"
    );
    assert!(matches!(
        c.list_tables(&ns(&["main", "default"]), None, None).await,
        Err(CatalogAccessError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_page_size_hint_above_the_openapi_cap_is_clamped() {
    // Following page tokens is the contract suite's; the cap is Unity's.
    let f = UnityFixture::start().await;
    f.add_table("main", "s", UnityTable::delta("t0", "s3://b/t0"));
    let c = bearer(&f);
    // The OpenAPI caps table pages at 50: a larger hint is clamped, not sent as is.
    c.list_tables(&ns(&["main", "s"]), None, Some(500))
        .await
        .unwrap();
    assert_eq!(
        f.requests_to("/tables")[0].query_param("max_results"),
        Some("50")
    );
}

#[tokio::test]
async fn server_page_cap_smaller_than_the_hint_still_paginates() {
    let f = UnityFixture::start().await;
    for i in 0..3 {
        f.add_catalog(&format!("c{i}"));
    }
    f.set_max_page_size(1);
    let c = bearer(&f);
    let first = c.list_namespaces(None, None, Some(100)).await.unwrap();
    assert_eq!(first.items, vec![ns(&["c0"])]);
    let token = first.next_page_token.expect("more pages");
    let second = c
        .list_namespaces(None, Some(&token), Some(100))
        .await
        .unwrap();
    assert_eq!(second.items, vec![ns(&["c1"])]);
}

#[tokio::test]
async fn empty_lists_answered_as_bare_objects_are_empty_pages() {
    let f = UnityFixture::start().await;
    f.add_catalog("empty");
    f.add_schema("main", "nothing");
    f.set_empty_list_as_object(true);
    let c = bearer(&f);
    let schemas = c
        .list_namespaces(Some(&ns(&["empty"])), None, None)
        .await
        .unwrap();
    assert!(schemas.items.is_empty() && schemas.next_page_token.is_none());
    let tables = c
        .list_tables(&ns(&["main", "nothing"]), None, None)
        .await
        .unwrap();
    assert!(tables.items.is_empty() && tables.next_page_token.is_none());
    f.remove_catalog("empty");
    f.remove_catalog("main");
    let cats = c.list_namespaces(None, None, None).await.unwrap();
    assert!(cats.items.is_empty());
}

#[tokio::test]
async fn listing_survives_removal_between_pages() {
    let f = UnityFixture::start().await;
    for i in 0..4 {
        f.add_table(
            "main",
            "s",
            UnityTable::delta(&format!("t{i}"), &format!("s3://b/t{i}")),
        );
    }
    let c = bearer(&f);
    let first = c
        .list_tables(&ns(&["main", "s"]), None, Some(2))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert!(f.remove_table("main", "s", "t1"));
    assert!(f.remove_table("main", "s", "t2"));
    f.add_table("main", "s", UnityTable::delta("t9", "s3://b/t9"));
    let rest = c
        .list_tables(
            &ns(&["main", "s"]),
            first.next_page_token.as_deref(),
            Some(2),
        )
        .await
        .unwrap();
    let names: Vec<_> = rest.items.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["t3", "t9"]);
}

// ---- tables -------------------------------------------------------------------------------

#[tokio::test]
async fn table_info_maps_to_metadata() {
    let f = UnityFixture::start().await;
    let table = UnityTable::delta("orders", "s3://bucket/main/orders").with_columns(vec![
        UnityColumn::primitive("id", "long", false),
        UnityColumn::primitive("amount", "decimal(10,2)", true).without_type_json(),
        UnityColumn::nested(
            "tags",
            "ARRAY",
            "array<string>",
            json!({"type": "array", "elementType": "string", "containsNull": true}),
        ),
    ]);
    let id = f.add_table("main", "default", table);
    let c = bearer(&f);
    let t = loaded(
        c.load_table(&ns(&["main", "default"]), "orders", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.format, TableFormat::Delta);
    assert_eq!(t.location.as_deref(), Some("s3://bucket/main/orders"));
    assert_eq!(t.stable_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        t.properties.get("unity.table-type").map(String::as_str),
        Some("EXTERNAL")
    );
    assert_eq!(
        t.schema,
        json!({"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "amount", "required": false, "type": "decimal(10, 2)"},
            {"id": 3, "name": "tags", "required": false, "type": {"type": "list",
                "element-id": 4, "element": "string", "element-required": false}}
        ], "upstream-field-ids": []})
    );
    assert_eq!(f.requests_to("/tables/main.default.orders").len(), 1);
}

#[tokio::test]
async fn rename_keeps_the_stable_id_and_missing_table_id_is_unstable() {
    let f = UnityFixture::start_with_sample().await;
    let c = bearer(&f);
    let before = loaded(
        c.load_table(&ns(&["main", "default"]), "orders", None)
            .await
            .unwrap(),
    );
    assert!(f.rename_table("main", "default", "orders", "orders_v2"));
    let after = loaded(
        c.load_table(&ns(&["main", "default"]), "orders_v2", None)
            .await
            .unwrap(),
    );
    assert!(before.stable_id.is_some());
    assert_eq!(before.stable_id, after.stable_id);

    f.set_omit_table_id(true);
    let t = loaded(
        c.load_table(&ns(&["main", "default"]), "orders_v2", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.stable_id, None);
    match c
        .vend_storage_credentials(&ns(&["main", "default"]), "orders_v2")
        .await
    {
        Err(CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            detail,
        }) => {
            assert!(detail.as_str().contains("table_id"), "{detail}")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        f.credential_requests().is_empty(),
        "no vend request without a table id"
    );
}

#[tokio::test]
async fn views_are_not_tables_and_format_is_required() {
    let f = UnityFixture::start_with_sample().await;
    let mut view = UnityTable::delta("v", "s3://b/v")
        .with_table_type("VIEW")
        .with_format(None);
    view.view_definition = Some("select 1".into());
    f.add_table("main", "default", view);
    f.add_table(
        "main",
        "default",
        UnityTable::delta("noformat", "s3://b/nf").with_format(None),
    );
    let c = bearer(&f);
    let names: Vec<_> = c
        .list_tables(&ns(&["main", "default"]), None, None)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["noformat", "orders"]);
    assert!(matches!(
        c.load_table(&ns(&["main", "default"]), "v", None).await,
        Err(CatalogAccessError::Unsupported(_))
    ));
    assert!(matches!(
        c.list_views(&ns(&["main", "default"]), None, None).await,
        Err(CatalogAccessError::Unsupported(_))
    ));
    match c
        .load_table(&ns(&["main", "default"]), "noformat", None)
        .await
    {
        Err(CatalogAccessError::Protocol { field, .. }) => assert_eq!(field, "data_source_format"),
        other => panic!("unexpected {other:?}"),
    }
}

// ---- credential vending -------------------------------------------------------------------

#[tokio::test]
async fn vended_credentials_map_the_temporary_credentials_answer() {
    // Caching and renewal near expiry are the contract suite's.
    let f = UnityFixture::start_with_sample().await;
    let c = bearer(&f);
    let t = ns(&["main", "default"]);

    let creds = c.vend_storage_credentials(&t, "orders").await.unwrap();
    let vended = f.vended();
    assert_eq!(vended.len(), 1);
    match &creds.credential {
        StorageCredential::S3 {
            access_key_id,
            secret_access_key,
            session_token,
        } => {
            assert_eq!(access_key_id.expose(), vended[0].access_key_id);
            assert_eq!(secret_access_key.expose(), vended[0].secret_access_key);
            assert_eq!(
                session_token.as_ref().map(|s| s.expose()),
                Some(vended[0].session_token.as_str())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(creds.prefix.as_deref(), Some("s3://bucket/main/orders"));
    assert!(creds.expires_at.is_some());
    let body = &f.credential_requests()[0];
    assert_eq!(body["operation"], "READ");
    assert_eq!(body["table_id"].as_str(), Some(vended[0].table_id.as_str()));
    secret_free(&format!("{creds:?}"), &f);
}

#[tokio::test]
async fn vending_refusals_are_classified() {
    let f = UnityFixture::start_with_sample().await;
    let c = bearer(&f);
    let t = ns(&["main", "default"]);
    f.inject(FaultRule::once(Fault::Status(403)).on_path("/temporary-table-credentials"));
    assert!(matches!(
        c.vend_storage_credentials(&t, "orders").await,
        Err(CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            ..
        })
    ));
    f.inject(FaultRule::once(Fault::Status(404)).on_path("/temporary-table-credentials"));
    assert!(matches!(
        c.vend_storage_credentials(&t, "orders").await,
        Err(CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            ..
        })
    ));
    f.inject(FaultRule::once(Fault::MalformedJson).on_path("/temporary-table-credentials"));
    assert!(matches!(
        c.vend_storage_credentials(&t, "orders").await,
        Err(CatalogAccessError::Protocol { .. })
    ));
    // A clean attempt afterwards works: nothing broken was cached.
    c.vend_storage_credentials(&t, "orders").await.unwrap();
}

// ---- authentication -----------------------------------------------------------------------

#[tokio::test]
async fn concurrent_requests_share_one_token_request() {
    let f = UnityFixture::start_with_sample().await;
    let c = oauth(&f, DEFAULT_CLIENT_SECRET, options());
    let ns_main = ns(&["main", "default"]);
    let (a, b, d) = tokio::join!(
        c.list_namespaces(None, None, None),
        c.list_tables(&ns_main, None, None),
        c.load_table(&ns_main, "orders", None),
    );
    a.unwrap();
    b.unwrap();
    d.unwrap();
    assert_eq!(f.token_requests(), 1);
}

#[tokio::test]
async fn wrong_client_secret_is_an_authentication_error_without_the_secret() {
    let f = UnityFixture::start_with_sample().await;
    let c = oauth(&f, "not-the-secret-xyz", options());
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
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
    let text = format!("{err} {err:?}");
    assert!(!text.contains("not-the-secret-xyz"), "{text}");
    assert!(
        f.requests_to("/catalogs").is_empty(),
        "no catalog call without a token"
    );
}

#[tokio::test]
async fn bearer_401_is_an_authentication_error_and_not_retried() {
    let f = UnityFixture::start_with_sample().await;
    f.set_bearer_tokens(&["someone-else"]);
    let c = bearer(&f);
    let err = c.check_connection().await.unwrap_err();
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
    assert_eq!(f.requests().len(), 1);
    secret_free(&format!("{err} {err:?}"), &f);
}

fn connect_err(
    auth: &CatalogAuthentication,
    creds: ResolvedCatalogCredentials,
) -> CatalogAccessError {
    let cfg = CatalogConnectionConfig::new("http://127.0.0.1:1");
    match UnityProvider.connect(&cfg, auth, creds, &options()) {
        Ok(_) => panic!("connected with {}", auth.scheme_name()),
        Err(e) => e,
    }
}

#[tokio::test]
async fn only_oauth_and_bearer_are_accepted() {
    let sigv4 = CatalogAuthentication::AwsSigV4 {
        region: "us-east-1".into(),
        signing_name: "x".into(),
    };
    let err = connect_err(&sigv4, ResolvedCatalogCredentials::None);
    assert!(matches!(err, CatalogAccessError::Unsupported(_)), "{err:?}");
    let assume = CatalogAuthentication::AwsAssumeRole {
        role_arn: "arn:aws:iam::1:role/r".into(),
        external_id: None,
        region: "us-east-1".into(),
    };
    let err = connect_err(&assume, ResolvedCatalogCredentials::None);
    assert!(matches!(err, CatalogAccessError::Unsupported(_)), "{err:?}");
    let err = connect_err(
        &CatalogAuthentication::Bearer,
        ResolvedCatalogCredentials::ClientSecret("s".into()),
    );
    assert!(matches!(err, CatalogAccessError::Config(_)), "{err:?}");
}

// ---- faults -------------------------------------------------------------------------------

#[tokio::test]
async fn oversized_bodies_are_cut_off() {
    let f = UnityFixture::start_with_sample().await;
    f.inject(FaultRule::once(Fault::Oversized(200_000)));
    let c = bearer_with(
        &f,
        &[],
        ConnectOptions::with_http(HttpPolicy {
            max_response_bytes: 64 * 1024,
            ..policy()
        }),
    );
    match c.list_namespaces(None, None, None).await {
        Err(CatalogAccessError::Protocol { detail, .. }) => {
            assert!(detail.as_str().contains("limit"), "{detail}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn an_injected_401_is_an_authentication_error() {
    let f = UnityFixture::start_with_sample().await;
    f.inject(FaultRule::once(Fault::Unauthorized));
    let c = bearer(&f);
    assert!(matches!(
        c.list_namespaces(None, None, None).await,
        Err(CatalogAccessError::Authentication {
            status: Some(401),
            ..
        })
    ));
}

#[tokio::test]
async fn a_slow_upstream_times_out_as_retryable() {
    let f = UnityFixture::start_with_sample().await;
    f.inject(FaultRule::always(Fault::Hold).on_path("/catalogs"));
    let c = bearer_with(
        &f,
        &[],
        ConnectOptions::with_http(HttpPolicy {
            request_timeout: Duration::from_millis(300),
            retry: RetryPolicy::none(),
            ..policy()
        }),
    );
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(err, CatalogAccessError::Retryable { status: None, .. }),
        "{err:?}"
    );
    f.release_held();
    f.clear_faults();
    c.list_namespaces(None, None, None).await.unwrap();
}

#[tokio::test]
async fn held_answer_is_delivered_once_released() {
    let f = UnityFixture::start_with_sample().await;
    f.inject(FaultRule::once(Fault::Hold).on_path("/catalogs"));
    let c = bearer(&f);
    let call = c.list_namespaces(None, None, None);
    let release = async {
        while f.held_now() == 0 {
            tokio::task::yield_now().await;
        }
        f.release_held();
    };
    let (page, ()) = tokio::join!(call, release);
    assert_eq!(page.unwrap().items, vec![ns(&["main"])]);
}

// ---- real-server behaviours (docs/catalog-access.md, "Real-server behaviours") -------------

#[tokio::test]
async fn partition_index_is_recorded_as_delta_partition_columns() {
    let f = UnityFixture::start().await;
    let table = UnityTable::delta("events", "s3://bucket/main/events").with_columns(vec![
        UnityColumn::primitive("id", "long", false),
        UnityColumn::primitive("region", "string", true).with_partition_index(1),
        UnityColumn::primitive("day", "date", true).with_partition_index(0),
    ]);
    f.add_table("main", "default", table);
    let c = bearer(&f);
    let t = loaded(
        c.load_table(&ns(&["main", "default"]), "events", None)
            .await
            .unwrap(),
    );
    // The same property, in partition order, that the Delta Sharing path records.
    assert_eq!(
        t.properties
            .get("delta.partitionColumns")
            .map(String::as_str),
        Some("day,region")
    );
    let plain = UnityTable::delta("plain", "s3://bucket/main/plain");
    f.add_table("main", "default", plain);
    let t = loaded(
        c.load_table(&ns(&["main", "default"]), "plain", None)
            .await
            .unwrap(),
    );
    assert!(!t.properties.contains_key("delta.partitionColumns"));
    // Two columns claiming one partition index is refused by field.
    let broken = UnityTable::delta("broken", "s3://bucket/main/broken").with_columns(vec![
        UnityColumn::primitive("a", "long", true).with_partition_index(0),
        UnityColumn::primitive("b", "long", true).with_partition_index(0),
    ]);
    f.add_table("main", "default", broken);
    match c
        .load_table(&ns(&["main", "default"]), "broken", None)
        .await
    {
        Err(CatalogAccessError::Protocol { field, .. }) => {
            assert_eq!(field, "columns[1].partition_index")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn column_mapping_ids_in_type_json_are_the_field_ids() {
    let f = UnityFixture::start().await;
    let table = UnityTable::delta("mapped", "s3://bucket/main/mapped").with_columns(vec![
        UnityColumn::primitive("id", "long", false).with_column_mapping_id(7),
        UnityColumn::primitive("name", "string", true).with_column_mapping_id(3),
    ]);
    f.add_table("main", "default", table);
    let c = bearer(&f);
    let t = loaded(
        c.load_table(&ns(&["main", "default"]), "mapped", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.schema["fields"][0]["id"], 7);
    assert_eq!(t.schema["fields"][1]["id"], 3);
    assert_eq!(t.schema["upstream-field-ids"], json!([3, 7]));
}

#[tokio::test]
async fn token_endpoint_failures_are_authentication_errors_naming_the_endpoint() {
    let f = UnityFixture::start_with_sample().await;
    for status in [404_u16, 400, 405] {
        f.set_token_endpoint_status(Some(status));
        let c = oauth(&f, DEFAULT_CLIENT_SECRET, options());
        let err = c.list_namespaces(None, None, None).await.unwrap_err();
        match &err {
            CatalogAccessError::Authentication { status: s, .. } => {
                assert_eq!(*s, Some(status), "{err}")
            }
            other => panic!("HTTP {status}: unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("OAuth token endpoint"), "{text}");
        assert!(text.contains(&f.token_url()), "names the endpoint: {text}");
        assert!(text.contains(&format!("HTTP {status}")), "{text}");
        assert!(text.contains("no error message"), "{text}");
        assert!(!text.contains(DEFAULT_CLIENT_SECRET), "{text}");
    }
    // A transient failure of the token endpoint stays retryable, and says where it was.
    f.set_token_endpoint_status(Some(503));
    let c = oauth(&f, DEFAULT_CLIENT_SECRET, options());
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("OAuth token endpoint"), "{err}");
    f.set_token_endpoint_status(None);
    c.list_namespaces(None, None, None).await.unwrap();
    assert!(f.requests_to("/catalogs").len() == 1);
}
