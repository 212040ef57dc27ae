//! Unity Catalog and Delta Sharing upstreams (fixture servers in their real-server modes)
//! through the real providers: overlay reconciliation retires a table still listed but gone
//! on load and keeps converted Delta schemas' field ids across reloads; the upstream listing
//! API reports a missing parent answered `200 {}` as NAMESPACE_NOT_FOUND and lists repeated
//! entries once.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_catalog_access::delta_sharing::DeltaSharingProvider;
use flotilla_catalog_access::http::{HttpPolicy, RetryPolicy};
use flotilla_catalog_access::spi::{
    CatalogAuthentication, CatalogClient, CatalogClientProvider, CatalogConnectionConfig,
    ConnectOptions, ResolvedCatalogCredentials,
};
use flotilla_catalog_access::unity::UnityProvider;
use flotilla_core::AppState;
use flotilla_core::reconcile::{Connector, ReconcileError, ReconcileSummary};
use flotilla_domain::model::IntegrationRecord;
use flotilla_testkit::delta_sharing_fixture::{
    DEFAULT_RECIPIENT_TOKEN, DeltaSharingFixture, SharingTable, sample_schema_string,
};
use flotilla_testkit::unity_fixture::{
    DEFAULT_BEARER_TOKEN, UnityColumn, UnityFixture, UnityTable,
};
use overlay_env::*;
use serde_json::{Value, json};
use support::*;

fn options() -> ConnectOptions {
    ConnectOptions::with_http(HttpPolicy {
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..HttpPolicy::local()
    })
}

/// Connects every run to one fixture, whatever the integration record says (the overlay
/// environment's integration is an Iceberg REST one; the protocol under test is this one).
enum FixtureConnector {
    Unity(String),
    Sharing(String),
}

#[async_trait]
impl Connector for FixtureConnector {
    async fn connect(
        &self,
        _state: &AppState,
        _integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        let (provider, uri, token): (&dyn CatalogClientProvider, &str, &str) = match self {
            Self::Unity(uri) => (&UnityProvider, uri, DEFAULT_BEARER_TOKEN),
            Self::Sharing(uri) => (&DeltaSharingProvider, uri, DEFAULT_RECIPIENT_TOKEN),
        };
        provider
            .connect(
                &CatalogConnectionConfig::new(uri),
                &CatalogAuthentication::Bearer,
                ResolvedCatalogCredentials::Token(token.into()),
                &options(),
            )
            .map_err(|error| ReconcileError::Upstream {
                path: Vec::new(),
                what: "connect",
                error,
            })
    }
}

async fn env() -> Env {
    Env::new(fixture().await, json!([])).await
}

async fn run(env: &Env, c: &FixtureConnector) -> ReconcileSummary {
    let s = env.run_with(c).await.expect("run");
    assert!(s.skipped.is_empty(), "nothing is skipped: {s:?}");
    assert!(s.conflicts.is_empty(), "{s:?}");
    s
}

/// `dotted.path -> id` for every field of a stored schema (`[]` for a list element, `{k}` /
/// `{v}` for map keys and values).
fn field_ids(schema: &Value) -> BTreeMap<String, i64> {
    fn walk(ty: &Value, prefix: &str, out: &mut BTreeMap<String, i64>) {
        let mut member = |name: String, id: Option<&Value>, ty: Option<&Value>| {
            if let (Some(id), Some(ty)) = (id.and_then(Value::as_i64), ty) {
                out.insert(name.clone(), id);
                walk(ty, &name, out);
            }
        };
        match ty["type"].as_str() {
            Some("struct") => {
                for f in ty["fields"].as_array().into_iter().flatten() {
                    let name = format!("{prefix}{}", f["name"].as_str().unwrap_or("?"));
                    member(name + ".", f.get("id"), f.get("type"));
                }
            }
            Some("list") => member(
                format!("{prefix}[]."),
                ty.get("element-id"),
                ty.get("element"),
            ),
            Some("map") => {
                member(format!("{prefix}{{k}}."), ty.get("key-id"), ty.get("key"));
                member(
                    format!("{prefix}{{v}}."),
                    ty.get("value-id"),
                    ty.get("value"),
                );
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    walk(schema, "", &mut out);
    out.into_iter()
        .map(|(k, v)| (k.trim_end_matches('.').to_owned(), v))
        .collect()
}

/// Every id that `before` gave a path still present in `after` is unchanged, and no id of
/// `after` was ever given to another path.
fn assert_stable(history: &[BTreeMap<String, i64>], after: &BTreeMap<String, i64>) {
    let ids: Vec<i64> = after.values().copied().collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "ids are unique: {after:?}");
    for before in history {
        for (path, id) in after {
            if let Some(old) = before.get(path) {
                assert_eq!(old, id, "{path} keeps its id: {before:?} -> {after:?}");
            }
            for (old_path, old_id) in before {
                if old_id == id {
                    assert_eq!(
                        old_path, path,
                        "id {id} is not reused: {before:?} -> {after:?}"
                    );
                }
            }
        }
    }
}

fn person() -> UnityColumn {
    UnityColumn::nested(
        "addr",
        "STRUCT",
        "struct<city:string,zip:int>",
        json!({"type": "struct", "fields": [
            {"name": "city", "type": "string", "nullable": true, "metadata": {}},
            {"name": "zip", "type": "integer", "nullable": true, "metadata": {}}]}),
    )
}

#[tokio::test]
async fn unity_table_listed_but_gone_on_load_is_retired_and_the_namespace_not_skipped() {
    let env = env().await;
    let f = UnityFixture::start_with_sample().await;
    f.add_table(
        "main",
        "default",
        UnityTable::delta("events", "s3://bucket/main/events"),
    );
    let c = FixtureConnector::Unity(f.endpoint());
    let s = run(&env, &c).await;
    assert_eq!(s.tables.created, 2, "{s:?}");
    assert!(env.rel(&["main", "default"], "events").await.is_some());

    f.drop_but_keep_listed("main", "default", "events");
    let s = run(&env, &c).await;
    assert_eq!((s.tables.retired, s.tables.unchanged), (1, 1), "{s:?}");
    assert!(env.rel(&["main", "default"], "events").await.is_none());
    assert!(env.rel(&["main", "default"], "orders").await.is_some());
    env.assert_consistent().await;
}

#[tokio::test]
async fn delta_sharing_table_listed_but_gone_on_load_is_retired() {
    let env = env().await;
    let f = DeltaSharingFixture::start_with_sample().await;
    f.add_table(
        "sales",
        "retail",
        SharingTable::new("returns", "s3://bucket/sales/retail/returns"),
    );
    let c = FixtureConnector::Sharing(f.base_url());
    let s = run(&env, &c).await;
    assert_eq!(s.tables.created, 2, "{s:?}");
    f.drop_but_keep_listed("sales", "retail", "returns");
    let s = run(&env, &c).await;
    assert_eq!(s.tables.retired, 1, "{s:?}");
    assert!(env.rel(&["sales", "retail"], "returns").await.is_none());
    assert!(env.rel(&["sales", "retail"], "orders").await.is_some());
    env.assert_consistent().await;
}

#[tokio::test]
async fn unity_field_ids_survive_add_drop_reorder_and_nest_across_reloads() {
    let env = env().await;
    let f = UnityFixture::start().await;
    let table = |columns: Vec<UnityColumn>| {
        let mut t = UnityTable::delta("people", "s3://bucket/main/people").with_columns(columns);
        t.table_id = "people-id".into();
        t
    };
    let id = || UnityColumn::primitive("id", "long", false);
    let c = FixtureConnector::Unity(f.endpoint());
    let mut history = Vec::new();
    let load = async |columns: Vec<UnityColumn>| {
        f.add_table("main", "default", table(columns));
        let s = run(&env, &c).await;
        let rel = env
            .rel(&["main", "default"], "people")
            .await
            .expect("people");
        (s, rel.schema)
    };

    let (_, v1) = load(vec![id(), person()]).await;
    let ids1 = field_ids(&v1);
    assert_eq!(ids1.len(), 4, "{ids1:?}");
    assert_eq!(v1["last-column-id"], 4);
    history.push(ids1);

    // Add a top-level column before the struct: the conversion would renumber the nested
    // fields; the stored ids do not move and the new column gets the next unused id.
    let (s, v2) = load(vec![
        id(),
        UnityColumn::primitive("b", "string", true),
        person(),
    ])
    .await;
    assert_eq!(s.tables.updated, 1, "{s:?}");
    let ids2 = field_ids(&v2);
    assert_eq!(ids2["b"], 5, "{ids2:?}");
    assert_stable(&history, &ids2);
    history.push(ids2);

    // A no-op reload changes nothing.
    let (s, again) = load(vec![
        id(),
        UnityColumn::primitive("b", "string", true),
        person(),
    ])
    .await;
    assert_eq!((s.tables.unchanged, s.tables.updated), (1, 0), "{s:?}");
    assert_eq!(again, v2);

    // Drop `b` (the highest id) and add `c`: 5 stays spent.
    let (_, v3) = load(vec![
        id(),
        person(),
        UnityColumn::primitive("c", "int", true),
    ])
    .await;
    let ids3 = field_ids(&v3);
    assert_eq!(ids3["c"], 6, "{ids3:?}");
    assert!(!ids3.contains_key("b"));
    assert_stable(&history, &ids3);
    history.push(ids3);

    // Reorder.
    let (_, v4) = load(vec![
        UnityColumn::primitive("c", "int", true),
        person(),
        id(),
    ])
    .await;
    let ids4 = field_ids(&v4);
    assert_eq!(v4["fields"][0]["name"], "c");
    assert_stable(&history, &ids4);
    history.push(ids4);

    // Nest: a field inside the struct, and a list of structs.
    let addr = UnityColumn::nested(
        "addr",
        "STRUCT",
        "struct<street:string,city:string,zip:int>",
        json!({"type": "struct", "fields": [
            {"name": "street", "type": "string", "nullable": true, "metadata": {}},
            {"name": "city", "type": "string", "nullable": true, "metadata": {}},
            {"name": "zip", "type": "integer", "nullable": true, "metadata": {}}]}),
    );
    let visits = UnityColumn::nested(
        "visits",
        "ARRAY",
        "array<struct<at:timestamp>>",
        json!({"type": "array", "containsNull": true, "elementType": {"type": "struct",
            "fields": [{"name": "at", "type": "timestamp", "nullable": true, "metadata": {}}]}}),
    );
    let (_, v5) = load(vec![
        visits,
        UnityColumn::primitive("c", "int", true),
        addr,
        id(),
    ])
    .await;
    let ids5 = field_ids(&v5);
    assert_stable(&history, &ids5);
    assert_eq!(
        (
            ids5["visits"],
            ids5["visits.[]"],
            ids5["visits.[].at"],
            ids5["addr.street"]
        ),
        (7, 8, 9, 10),
        "new fields take ids above every id ever assigned, in Iceberg's order: {ids5:?}"
    );
    assert_eq!(v5["last-column-id"], 10);
    assert!(v5.get("upstream-field-ids").is_none());
    env.assert_consistent().await;
}

#[tokio::test]
async fn delta_sharing_field_ids_survive_a_column_added_before_a_struct() {
    let env = env().await;
    let f = DeltaSharingFixture::start().await;
    let table = |schema: &str| {
        let mut t = SharingTable::new("orders", "s3://bucket/sales/retail/orders")
            .with_schema_string(schema);
        t.id = Some("orders-id".into());
        t
    };
    let sample = sample_schema_string();
    f.add_table("sales", "retail", table(&sample));
    let c = FixtureConnector::Sharing(f.base_url());
    run(&env, &c).await;
    let before = field_ids(
        &env.rel(&["sales", "retail"], "orders")
            .await
            .expect("orders")
            .schema,
    );
    assert_eq!((before["address"], before["address.zip"]), (8, 13));

    let mut spark: Value = serde_json::from_str(&sample).expect("sample schema");
    spark["fields"].as_array_mut().expect("fields").insert(
        1,
        json!({"name": "extra", "type": "string", "nullable": true, "metadata": {}}),
    );
    let mut changed = table(&spark.to_string());
    changed.version = 4;
    f.add_table("sales", "retail", changed);
    let s = run(&env, &c).await;
    assert_eq!(s.tables.updated, 1, "{s:?}");
    let after = field_ids(
        &env.rel(&["sales", "retail"], "orders")
            .await
            .expect("orders")
            .schema,
    );
    assert_stable(&[before], &after);
    assert_eq!(after["extra"], 14, "{after:?}");
}

async fn create(env: &Env, body: Value) -> String {
    let r = env
        .h
        .post("/v1/accounts/acme/integrations", ACME, body)
        .await;
    assert_eq!(r.status, axum::http::StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn listing_api_reports_missing_parents_and_drops_repeated_entries() {
    let env = env().await;
    let uc = UnityFixture::start_with_sample().await;
    uc.add_schema("main", "sales");
    uc.set_missing_parent_as_empty(true);
    uc.set_duplicate_listings(true);
    let ds = DeltaSharingFixture::start_with_sample().await;
    ds.set_missing_parent_as_empty(true);
    ds.set_duplicate_listings(true);
    let unity = create(
        &env,
        json!({"display_name": "uc", "type": "UNITY", "uri": uc.endpoint(),
            "authentication": {"type": "BEARER"},
            "credentials": {"token": DEFAULT_BEARER_TOKEN}}),
    )
    .await;
    let sharing = create(
        &env,
        json!({"display_name": "ds", "type": "DELTA_SHARING", "uri": ds.base_url(),
            "authentication": {"type": "BEARER"},
            "credentials": {"token": DEFAULT_RECIPIENT_TOKEN}}),
    )
    .await;
    let base = |id: &str| format!("/v1/accounts/acme/integrations/{id}/upstream");
    for (id, missing) in [
        (&unity, ns(&["main", "gone"])),
        (&unity, ns(&["nocatalog"])),
        (&sharing, ns(&["sales", "gone"])),
        (&sharing, ns(&["noshare"])),
    ] {
        let r = env
            .h
            .get(&format!("{}/objects?namespace={missing}", base(id)), ACME)
            .await;
        assert_eq!(r.code(), "NAMESPACE_NOT_FOUND", "{missing}: {:?}", r.body);
    }
    let r = env
        .h
        .get(
            &format!("{}/namespaces?parent=noshare", base(&sharing)),
            ACME,
        )
        .await;
    assert_eq!(r.code(), "NAMESPACE_NOT_FOUND", "{:?}", r.body);

    let r = env
        .h
        .get(&format!("{}/namespaces?parent=main", base(&unity)), ACME)
        .await;
    assert_eq!(
        r.body["items"],
        json!([{"path": ["main", "default"]}, {"path": ["main", "sales"]}]),
        "{:?}",
        r.body
    );
    let r = env
        .h
        .get(&format!("{}/namespaces", base(&sharing)), ACME)
        .await;
    assert_eq!(
        r.body["items"],
        json!([{"path": ["sales"]}]),
        "{:?}",
        r.body
    );
    let r = env
        .h
        .get(
            &format!(
                "{}/objects?namespace={}",
                base(&sharing),
                ns(&["sales", "retail"])
            ),
            ACME,
        )
        .await;
    assert_eq!(
        r.body["items"],
        json!([{"namespace": ["sales", "retail"], "name": "orders", "kind": "TABLE"}]),
        "{:?}",
        r.body
    );
}
