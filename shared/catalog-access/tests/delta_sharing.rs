//! The Delta Sharing provider against the Delta Sharing fixture server (`flotilla-testkit`).
//!
//! What the provider sent is asserted from the fixture's request log and credential
//! request record, not from what the client reports.

// The contract suite's adapters; this file uses only the shared helpers.
#[allow(dead_code)]
mod support;

use std::time::Duration;

use flotilla_catalog_access::delta_sharing::{DeltaSharingProvider, STRICT_ACCESS_MODES};
use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy};
use flotilla_catalog_access::{
    CatalogAccessError, CatalogAuthentication, CatalogClient, CatalogClientProvider,
    CatalogConnectionConfig, ConnectOptions, LoadTableOutcome, ResolvedCatalogCredentials,
    StorageCredential, TableFormat, TableMetadata, UpstreamNamespace, VendingErrorKind,
};
use flotilla_testkit::delta_sharing_fixture::{
    CredentialsEndpoint, DEFAULT_RECIPIENT_TOKEN, DeltaSharingFixture, Fault, FaultRule,
    SharingTable,
};
use serde_json::json;
use support::{ns, policy};

fn client(f: &DeltaSharingFixture) -> Box<dyn CatalogClient> {
    client_with(f, &[], ConnectOptions::with_http(policy()))
}

fn strict(f: &DeltaSharingFixture) -> Box<dyn CatalogClient> {
    client_with(
        f,
        &[(STRICT_ACCESS_MODES, "true")],
        ConnectOptions::with_http(policy()),
    )
}

fn client_with(
    f: &DeltaSharingFixture,
    props: &[(&str, &str)],
    options: ConnectOptions,
) -> Box<dyn CatalogClient> {
    let mut cfg = CatalogConnectionConfig::new(f.base_url());
    for (k, v) in props {
        cfg = cfg.with_property(*k, *v);
    }
    DeltaSharingProvider
        .connect(
            &cfg,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token(DEFAULT_RECIPIENT_TOKEN.into()),
            &options,
        )
        .unwrap()
}

fn loaded(outcome: LoadTableOutcome) -> (TableMetadata, Option<String>) {
    match outcome {
        LoadTableOutcome::Loaded { metadata, etag } => (*metadata, etag),
        LoadTableOutcome::NotModified => panic!("expected a loaded table"),
    }
}

fn secret_free(text: &str, f: &DeltaSharingFixture) {
    for v in f.vended() {
        for s in [&v.access_key_id, &v.secret_access_key, &v.session_token] {
            assert!(
                !text.contains(s.as_str()),
                "vended secret leaked into: {text}"
            );
        }
    }
    assert!(
        !text.contains(DEFAULT_RECIPIENT_TOKEN),
        "recipient token leaked: {text}"
    );
}

fn sales() -> UpstreamNamespace {
    ns(&["sales", "retail"])
}

// ---- discovery ----------------------------------------------------------------------------

#[tokio::test]
async fn shares_and_schemas_are_a_two_level_namespace() {
    let f = DeltaSharingFixture::start_with_sample().await;
    f.add_schema("sales", "wholesale");
    f.add_share("empty_share");
    let c = client(&f);
    c.check_connection().await.unwrap();
    assert_eq!(
        f.requests_to("/shares")[0].query_param("maxResults"),
        Some("1")
    );
    let shares = c.list_namespaces(None, None, None).await.unwrap();
    assert_eq!(shares.items, vec![ns(&["empty_share"]), ns(&["sales"])]);
    let schemas = c
        .list_namespaces(Some(&ns(&["sales"])), None, None)
        .await
        .unwrap();
    assert_eq!(
        schemas.items,
        vec![ns(&["sales", "retail"]), ns(&["sales", "wholesale"])]
    );
    let leaf = c.list_namespaces(Some(&sales()), None, None).await.unwrap();
    assert!(leaf.items.is_empty());
    let tables = c.list_tables(&sales(), None, None).await.unwrap();
    assert_eq!(tables.items.len(), 1);
    assert_eq!(tables.items[0].name, "orders");
    // A share holds schemas, not tables: it lists none (so discovery does not skip it),
    // and a missing share is not found.
    let none = c.list_tables(&ns(&["sales"]), None, None).await.unwrap();
    assert!(none.items.is_empty() && none.next_page_token.is_none());
    assert!(matches!(
        c.list_tables(&ns(&["nope"]), None, None).await,
        Err(CatalogAccessError::NotFound(_))
    ));
    assert!(matches!(
        c.list_namespaces(Some(&ns(&["a", "b", "c"])), None, None)
            .await,
        Err(CatalogAccessError::NotFound(_))
    ));
    let first = &f.requests()[0];
    assert_eq!(first.header("authorization"), Some("Bearer ***"));
    assert!(first.path.starts_with("/delta-sharing/shares"));
}

#[tokio::test]
async fn empty_next_page_token_and_missing_items_end_the_listing() {
    let f = DeltaSharingFixture::start().await;
    f.add_schema("s", "empty");
    f.add_table("s", "full", SharingTable::new("t", "s3://b/t"));
    f.set_empty_list_as_object(true);
    f.set_empty_token_on_last_page(true);
    let c = client(&f);
    let empty = c
        .list_tables(&ns(&["s", "empty"]), None, None)
        .await
        .unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.next_page_token, None);
    let full = c
        .list_tables(&ns(&["s", "full"]), None, None)
        .await
        .unwrap();
    assert_eq!(full.items.len(), 1);
    assert_eq!(full.next_page_token, None, "\"\" means no more pages");
}

#[tokio::test]
async fn zero_max_results_pages_still_progress() {
    // The protocol allows a page with no items and a token; the caller keeps going.
    let f = DeltaSharingFixture::start().await;
    f.add_share("a");
    f.add_share("b");
    let c = client(&f);
    let page = c.list_namespaces(None, None, Some(0)).await.unwrap();
    assert!(page.items.is_empty());
    let token = page.next_page_token.expect("a token to continue");
    let rest = c.list_namespaces(None, Some(&token), None).await.unwrap();
    assert_eq!(rest.items, vec![ns(&["a"]), ns(&["b"])]);
}

#[tokio::test]
async fn names_resolve_case_insensitively_and_custom_prefix_works() {
    let f = DeltaSharingFixture::start_with_prefix("/api/v1/delta-sharing").await;
    f.add_table(
        "Sales",
        "Retail",
        SharingTable::new("Orders", "s3://b/o").with_access_modes(&["dir"]),
    );
    let c = client(&f);
    let (t, _) = loaded(
        c.load_table(&ns(&["sales", "retail"]), "orders", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.identifier.name, "Orders");
    assert!(
        f.requests()
            .iter()
            .all(|r| r.path.starts_with("/api/v1/delta-sharing/"))
    );
}

// ---- table metadata -----------------------------------------------------------------------

#[tokio::test]
async fn metadata_maps_schema_location_identity_and_version() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);
    let (t, etag) = loaded(c.load_table(&sales(), "orders", None).await.unwrap());
    assert_eq!(t.format, TableFormat::Delta);
    assert_eq!(
        t.location.as_deref(),
        Some("s3://bucket/sales/retail/orders")
    );
    let stable = t.stable_id.expect("a table id was listed");
    assert!(stable.contains('/'), "qualified by the share id: {stable}");
    assert_eq!(etag.as_deref(), Some("v3"));
    assert_eq!(
        t.properties
            .get("delta-sharing.table-version")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        t.properties
            .get("delta.partitionColumns")
            .map(String::as_str),
        Some("day")
    );
    assert_eq!(
        t.schema,
        json!({"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "name", "required": false, "type": "string"},
            {"id": 3, "name": "ts", "required": false, "type": "timestamptz"},
            {"id": 4, "name": "amount", "required": false, "type": "decimal(10, 2)"},
            {"id": 5, "name": "day", "required": false, "type": "date"},
            {"id": 6, "name": "tags", "required": false, "type": {"type": "list",
                "element-id": 9, "element": "string", "element-required": false}},
            {"id": 7, "name": "attrs", "required": false, "type": {"type": "map",
                "key-id": 10, "key": "string", "value-id": 11, "value": "int",
                "value-required": true}},
            {"id": 8, "name": "address", "required": false, "type": {"type": "struct",
                "fields": [
                    {"id": 12, "name": "city", "required": false, "type": "string"},
                    {"id": 13, "name": "zip", "required": true, "type": "int"}]}}
        ], "upstream-field-ids": []})
    );
}

#[tokio::test]
async fn metadata_line_order_does_not_matter() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);
    let (protocol_first, _) = loaded(c.load_table(&sales(), "orders", None).await.unwrap());
    f.set_metadata_first(true);
    let (metadata_first, _) = loaded(c.load_table(&sales(), "orders", None).await.unwrap());
    assert_eq!(protocol_first, metadata_first);
    assert_eq!(
        metadata_first
            .properties
            .get("delta.minReaderVersion")
            .map(String::as_str),
        Some("1")
    );
}

#[tokio::test]
async fn conditional_load_uses_the_table_version() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);
    let (_, etag) = loaded(c.load_table(&sales(), "orders", None).await.unwrap());
    let etag = etag.unwrap();
    let again = c.load_table(&sales(), "orders", Some(&etag)).await.unwrap();
    assert_eq!(again, LoadTableOutcome::NotModified);
    assert_eq!(f.requests_to("/version").len(), 1);
    assert_eq!(f.requests_to("/metadata").len(), 1, "no metadata re-read");
    f.set_table_version("sales", "retail", "orders", 4);
    let (_, newer) = loaded(c.load_table(&sales(), "orders", Some(&etag)).await.unwrap());
    assert_eq!(newer.as_deref(), Some("v4"));
}

#[tokio::test]
async fn tables_without_ids_have_no_stable_identity() {
    let f = DeltaSharingFixture::start().await;
    f.add_table("s", "sc", SharingTable::new("t", "s3://b/t").without_id());
    let c = client(&f);
    let (t, _) = loaded(c.load_table(&ns(&["s", "sc"]), "t", None).await.unwrap());
    assert_eq!(t.stable_id, None);
}

#[tokio::test]
async fn views_are_unsupported() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);
    let caps = c.capabilities().await.unwrap();
    assert!(!caps.list_views && !caps.load_views);
    assert!(caps.list_namespaces && caps.list_tables && caps.vend_storage_credentials);
    assert!(matches!(
        c.list_views(&sales(), None, None).await,
        Err(CatalogAccessError::Unsupported(_))
    ));
    assert!(matches!(
        c.load_view(&sales(), "orders").await,
        Err(CatalogAccessError::Unsupported(_))
    ));
}

// ---- credential vending: the access-mode matrix -------------------------------------------

/// What one cell of the matrix must do.
#[derive(Debug, PartialEq)]
enum Expect {
    /// Ask the server and get credentials.
    Vend,
    /// Refuse by name without calling the credentials endpoint.
    RefuseWithoutAsking,
}

#[tokio::test]
async fn access_mode_matrix() {
    let cases: [(&str, Option<&[&str]>, bool, Expect); 8] = [
        ("dir_only", Some(&["dir"]), false, Expect::Vend),
        ("dir_only", Some(&["dir"]), true, Expect::Vend),
        ("both", Some(&["url", "dir"]), false, Expect::Vend),
        ("both", Some(&["url", "dir"]), true, Expect::Vend),
        (
            "url_only",
            Some(&["url"]),
            false,
            Expect::RefuseWithoutAsking,
        ),
        (
            "url_only",
            Some(&["url"]),
            true,
            Expect::RefuseWithoutAsking,
        ),
        ("absent", None, false, Expect::Vend),
        ("absent", None, true, Expect::RefuseWithoutAsking),
    ];
    for (name, modes, strict_on, expect) in cases {
        let f = DeltaSharingFixture::start().await;
        let mut table = SharingTable::new(name, &format!("s3://b/{name}"));
        table = match modes {
            Some(m) => table.with_access_modes(m),
            None => table.without_access_modes(),
        };
        f.add_table("s", "sc", table);
        let c = if strict_on { strict(&f) } else { client(&f) };
        let result = c.vend_storage_credentials(&ns(&["s", "sc"]), name).await;
        let asked = f.credential_requests().len();
        match expect {
            Expect::Vend => {
                let creds = result.unwrap_or_else(|e| panic!("{name} strict={strict_on}: {e}"));
                assert_eq!(asked, 1, "{name} strict={strict_on}");
                assert_eq!(
                    creds.prefix.as_deref(),
                    Some(format!("s3://b/{name}").as_str())
                );
            }
            Expect::RefuseWithoutAsking => {
                match result {
                    Err(CatalogAccessError::CredentialVending {
                        kind: VendingErrorKind::Unsupported,
                        detail,
                    }) => {
                        assert!(detail.as_str().contains(name), "refused by name: {detail}");
                        assert!(detail.as_str().contains("url"), "{detail}");
                    }
                    other => panic!("{name} strict={strict_on}: unexpected {other:?}"),
                }
                assert_eq!(asked, 0, "{name} strict={strict_on} must not ask");
            }
        }
    }
}

#[tokio::test]
async fn vended_credentials_are_parsed() {
    // Caching and renewal near expiry are the contract suite's.
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);

    let creds = c
        .vend_storage_credentials(&sales(), "orders")
        .await
        .unwrap();
    let v = &f.vended()[0];
    match &creds.credential {
        StorageCredential::S3 {
            access_key_id,
            secret_access_key,
            session_token,
        } => {
            assert_eq!(access_key_id.expose(), v.access_key_id);
            assert_eq!(secret_access_key.expose(), v.secret_access_key);
            assert_eq!(
                session_token.as_ref().map(|s| s.expose()),
                Some(v.session_token.as_str())
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        creds.prefix.as_deref(),
        Some("s3://bucket/sales/retail/orders")
    );
    assert!(creds.expires_at.is_some());
    secret_free(&format!("{creds:?}"), &f);
}

#[tokio::test]
async fn flat_credentials_answer_is_accepted() {
    let f = DeltaSharingFixture::start_with_sample().await;
    f.set_credentials_endpoint(CredentialsEndpoint::Flat);
    let c = client(&f);
    let creds = c
        .vend_storage_credentials(&sales(), "orders")
        .await
        .unwrap();
    assert!(matches!(creds.credential, StorageCredential::S3 { .. }));
    assert!(creds.expires_at.is_some());
    assert_eq!(
        creds.prefix.as_deref(),
        Some("s3://bucket/sales/retail/orders")
    );
}

#[tokio::test]
async fn a_404_credentials_endpoint_means_vending_unsupported() {
    let f = DeltaSharingFixture::start().await;
    // The reference server: no accessModes, no credentials endpoint.
    f.add_table("s", "sc", SharingTable::new("t", "s3://b/t"));
    f.set_credentials_endpoint(CredentialsEndpoint::NotFound);
    let c = client(&f);
    match c.vend_storage_credentials(&ns(&["s", "sc"]), "t").await {
        Err(CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            detail,
        }) => assert!(detail.as_str().contains("404"), "{detail}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(f.requests_to("/temporary-table-credentials").len(), 1);
}

#[tokio::test]
async fn a_server_refusing_directory_access_is_unsupported() {
    let f = DeltaSharingFixture::start_with_sample().await;
    f.inject(FaultRule::once(Fault::Status(403)).on_path("/temporary-table-credentials"));
    let c = client(&f);
    assert!(matches!(
        c.vend_storage_credentials(&sales(), "orders").await,
        Err(CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            ..
        })
    ));
}

// ---- authentication and configuration -----------------------------------------------------

#[tokio::test]
async fn only_bearer_authentication_is_accepted() {
    let cfg = CatalogConnectionConfig::new("http://127.0.0.1:1/delta-sharing");
    let o = ConnectOptions::with_http(policy());
    let oauth = CatalogAuthentication::OauthClientCredentials {
        token_uri: "http://127.0.0.1:1/token".into(),
        client_id: "c".into(),
        scopes: vec![],
    };
    match DeltaSharingProvider.connect(
        &cfg,
        &oauth,
        ResolvedCatalogCredentials::ClientSecret("s".into()),
        &o,
    ) {
        Err(CatalogAccessError::Unsupported(t)) => assert!(t.as_str().contains("bearer")),
        Err(e) => panic!("unexpected {e:?}"),
        Ok(_) => panic!("OAuth accepted"),
    }
    let bad = cfg.clone().with_property(STRICT_ACCESS_MODES, "yes");
    assert!(matches!(
        DeltaSharingProvider.connect(
            &bad,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::Token("t".into()),
            &o,
        ),
        Err(CatalogAccessError::Config(_))
    ));
}

#[tokio::test]
async fn a_wrong_recipient_token_is_an_authentication_error() {
    let f = DeltaSharingFixture::start_with_sample().await;
    f.set_recipient_tokens(&["another-recipient"]);
    let c = client(&f);
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
    assert_eq!(f.requests().len(), 1, "a 401 is not retried");
    secret_free(&format!("{err} {err:?}"), &f);
}

// ---- faults -------------------------------------------------------------------------------

#[tokio::test]
async fn malformed_answers_are_protocol_errors() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client(&f);
    f.inject(FaultRule::once(Fault::MalformedJson).on_path("/schemas"));
    assert!(matches!(
        c.list_namespaces(Some(&ns(&["sales"])), None, None).await,
        Err(CatalogAccessError::Protocol { .. })
    ));
    f.inject(FaultRule::once(Fault::MalformedJson).on_path("/metadata"));
    match c.load_table(&sales(), "orders", None).await {
        Err(CatalogAccessError::Protocol { field, detail }) => {
            assert_eq!(field, "<body>");
            assert!(detail.as_str().contains("line 2"), "{detail}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_bad_schema_string_names_the_field() {
    let f = DeltaSharingFixture::start().await;
    f.add_table(
        "s",
        "sc",
        SharingTable::new("t", "s3://b/t").with_schema_string("{not json"),
    );
    let c = client(&f);
    match c.load_table(&ns(&["s", "sc"]), "t", None).await {
        Err(CatalogAccessError::Protocol { field, .. }) => {
            assert_eq!(field, "metaData.schemaString")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn oversized_and_unauthorized_and_slow_answers() {
    let f = DeltaSharingFixture::start_with_sample().await;
    let c = client_with(
        &f,
        &[],
        ConnectOptions::with_http(HttpPolicy {
            max_response_bytes: 32 * 1024,
            request_timeout: Duration::from_millis(300),
            retry: RetryPolicy::none(),
            ..policy()
        }),
    );
    f.inject(FaultRule::once(Fault::Oversized(100_000)));
    assert!(matches!(
        c.list_namespaces(None, None, None).await,
        Err(CatalogAccessError::Protocol { .. })
    ));
    f.inject(FaultRule::once(Fault::Unauthorized));
    assert!(matches!(
        c.list_namespaces(None, None, None).await,
        Err(CatalogAccessError::Authentication {
            status: Some(401),
            ..
        })
    ));
    f.inject(FaultRule::once(Fault::Hold));
    let err = c.list_namespaces(None, None, None).await.unwrap_err();
    assert!(
        matches!(err, CatalogAccessError::Retryable { status: None, .. }),
        "{err:?}"
    );
    f.release_held();
    c.list_namespaces(None, None, None).await.unwrap();
}

#[tokio::test]
async fn listing_survives_mutation_between_pages() {
    let f = DeltaSharingFixture::start().await;
    for s in ["a", "b", "c", "d"] {
        f.add_schema("share", s);
    }
    let c = client(&f);
    let first = c
        .list_namespaces(Some(&ns(&["share"])), None, Some(2))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert!(f.remove_schema("share", "b"));
    assert!(f.rename_schema("share", "c", "e"));
    let rest = c
        .list_namespaces(
            Some(&ns(&["share"])),
            first.next_page_token.as_deref(),
            Some(10),
        )
        .await
        .unwrap();
    assert_eq!(rest.items, vec![ns(&["share", "d"]), ns(&["share", "e"])]);
}

// ---- real-server behaviours (docs/catalog-access.md, "Real-server behaviours") -------------

#[tokio::test]
async fn share_id_in_snake_case_is_read_and_a_missing_id_is_tolerated() {
    let f = DeltaSharingFixture::start().await;
    f.add_table("s", "sc", SharingTable::new("with_id", "s3://b/with_id"));
    f.add_table(
        "s",
        "sc",
        SharingTable::new("no_id", "s3://b/no_id").without_id(),
    );
    f.set_snake_case_share_id(true);
    let c = client(&f);
    let (t, _) = loaded(
        c.load_table(&ns(&["s", "sc"]), "with_id", None)
            .await
            .unwrap(),
    );
    let stable = t.stable_id.expect("the table id is listed");
    assert!(
        !stable.starts_with("s/"),
        "qualified by the share id read from share_id, not by the share name: {stable}"
    );
    let (t, _) = loaded(
        c.load_table(&ns(&["s", "sc"]), "no_id", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.stable_id, None);
    assert_eq!(t.location.as_deref(), Some("s3://b/no_id"));
}

#[tokio::test]
async fn column_mapping_ids_are_the_field_ids() {
    let f = DeltaSharingFixture::start().await;
    let schema = json!({"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": false, "metadata": {}},
        {"name": "tags", "type": {"type": "array", "elementType": "string",
            "containsNull": true}, "nullable": true, "metadata": {}}
    ]});
    let table = SharingTable::new("mapped", "s3://b/mapped")
        .with_schema_string(&schema.to_string())
        .with_column_mapping();
    f.add_table("s", "sc", table.clone());
    let c = client(&f);
    let (t, _) = loaded(
        c.load_table(&ns(&["s", "sc"]), "mapped", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.schema["fields"][0]["id"], 1);
    assert_eq!(t.schema["fields"][1]["id"], 2);
    assert_eq!(
        t.schema["fields"][1]["type"]["element-id"], 3,
        "fresh, above the fixed ids"
    );
    assert_eq!(t.schema["upstream-field-ids"], json!([1, 2]));
    assert_eq!(
        t.properties
            .get("delta.columnMapping.mode")
            .map(String::as_str),
        Some("id")
    );
    // The first column is dropped and a new one added: Delta gives it a new id.
    let mut v: serde_json::Value = serde_json::from_str(&table.schema_string).unwrap();
    let fields = v["fields"].as_array_mut().unwrap();
    fields.remove(0);
    fields.push(json!({"name": "id", "type": "long", "nullable": true, "metadata": {}}));
    let table = table
        .with_schema_string(&v.to_string())
        .with_column_mapping();
    f.add_table("s", "sc", table);
    let (t, _) = loaded(
        c.load_table(&ns(&["s", "sc"]), "mapped", None)
            .await
            .unwrap(),
    );
    assert_eq!(t.schema["fields"][0]["id"], 2);
    assert_eq!(t.schema["fields"][1]["name"], "id");
    assert_eq!(t.schema["fields"][1]["id"], 3);
    assert_eq!(t.schema["upstream-field-ids"], json!([2, 3]));
}
