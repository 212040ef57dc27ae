//! The index catalog over the real metastore backends (redb in process; DynamoDB on moto).
//! Warehouses are local directories; an `s3://` warehouse is either mapped to a directory
//! (trace replay with the fixture's exact locations) or served by moto S3.

use std::path::{Path, PathBuf};
use std::sync::Arc;

mod fixture_sets;

use flotilla_metastore::DynMetastore;
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_parqdb::clock::{Clock, ManualClock};
use flotilla_parqdb::error::IndexCatalogError;
use flotilla_parqdb::location::Warehouse;
use flotilla_parqdb::metadata::Rule;
use flotilla_parqdb::store::{DefaultWarehouseStores, WarehouseStores};
use flotilla_parqdb::types::*;
use flotilla_parqdb::{IndexCatalogService, gc};
use object_store::local::LocalFileSystem;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;

const ACCOUNT: &str = "acme";
const CATALOG: &str = "vectors";
const WAREHOUSE: &str = "s3://flotilla-parqdb/v1/";
const DAY_MS: i64 = 86_400_000;

fn fixture(rel: &str) -> Vec<u8> {
    fixture_sets::read(&fixture_sets::own(), rel)
}

/// Serves every warehouse from one local directory (the warehouse root), whatever its URI:
/// lets the trace use the fixture's exact `s3://` locations without network.
struct DirectoryStores(PathBuf);

impl WarehouseStores for DirectoryStores {
    fn open(&self, _warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>, IndexCatalogError> {
        Ok(Arc::new(LocalFileSystem::new_with_prefix(&self.0).unwrap()))
    }
}

struct Env {
    svc: IndexCatalogService,
    clock: Arc<ManualClock>,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Env {
    /// Writes `bytes` at a warehouse-relative path and returns its absolute location.
    fn put(&self, rel: &str, bytes: &[u8]) -> String {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        format!("{WAREHOUSE}{rel}")
    }

    fn exists(&self, rel: &str) -> bool {
        self.root.join(rel).exists()
    }
}

type Backend = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = DynMetastore>>>;

fn redb() -> std::pin::Pin<Box<dyn std::future::Future<Output = DynMetastore>>> {
    Box::pin(async { Arc::new(RedbMetastore::in_memory().unwrap()) as DynMetastore })
}

fn dynamo() -> std::pin::Pin<Box<dyn std::future::Future<Output = DynMetastore>>> {
    Box::pin(async {
        let endpoint = std::env::var("FLOTILLA_MOTO_ENDPOINT").expect(
            "FLOTILLA_MOTO_ENDPOINT is not set: DynamoDB-backed index catalog tests need moto (scripts set it)",
        );
        let client = flotilla_metastore::dynamo::connect(Some(&endpoint)).await;
        let table = format!("parqdb-{}", uuid::Uuid::new_v4());
        flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, &table)
            .await
            .unwrap();
        Arc::new(flotilla_metastore::dynamo::DynamoMetastore::new(
            client, table,
        )) as DynMetastore
    })
}

async fn env_with(store: DynMetastore) -> Env {
    env_with_warehouse(store, WAREHOUSE).await
}

async fn env_with_warehouse(store: DynMetastore, warehouse: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("wh");
    std::fs::create_dir_all(&root).unwrap();
    let clock = Arc::new(ManualClock::new(real_now()));
    let svc = IndexCatalogService::new(
        store,
        Arc::new(DirectoryStores(root.clone())),
        clock.clone(),
    );
    svc.create_index_catalog(
        ACCOUNT,
        &CreateIndexCatalogRequest {
            name: CATALOG.into(),
            warehouse: warehouse.into(),
        },
    )
    .await
    .unwrap();
    Env {
        svc,
        clock,
        root,
        _dir: dir,
    }
}

fn real_now() -> i64 {
    flotilla_parqdb::clock::SystemClock.now_ms()
}

fn ns(path: &[&str]) -> Vec<String> {
    path.iter().map(|s| (*s).to_owned()).collect()
}

fn parquet(uri: &str) -> SourceBinding {
    SourceBinding::Parquet { uri: uri.into() }
}

async fn create_ns(env: &Env, path: &[&str]) {
    env.svc
        .create_namespace(ACCOUNT, CATALOG, &CreateNamespaceRequest { path: ns(path) })
        .await
        .unwrap();
}

async fn register(
    env: &Env,
    path: &[&str],
    name: &str,
    location: &str,
) -> Result<IndexEntry, IndexCatalogError> {
    let req = RegisterIndexRequest {
        name: name.into(),
        metadata_location: location.into(),
        source: parquet("s3://lake/documents/"),
    };
    env.svc.register(ACCOUNT, CATALOG, &ns(path), &req).await
}

fn code<T: std::fmt::Debug>(r: &Result<T, IndexCatalogError>) -> &'static str {
    match r {
        Ok(_) => "OK",
        Err(e) => e.code(),
    }
}

// ---------------------------------------------------------------------------------------
// The cases, each run on every backend.

async fn catalog_trace_replays_exactly(store: DynMetastore) {
    let dir = fixture_sets::own();
    let env = env_with(store).await;
    for (rel, bytes) in trace_files(&dir, WAREHOUSE) {
        env.put(&rel, &bytes);
    }
    replay_trace(&env.svc, &dir).await;
}

/// The warehouse a trace's locations lie in: everything up to the last path segment's
/// parent (`s3://bucket/v1/name/metadata.json` -> `s3://bucket/v1/`).
fn trace_warehouse(dir: &Path) -> String {
    let trace: Value = serde_json::from_slice(&fixture_sets::read(dir, "catalog.json")).unwrap();
    let loc = trace["locations"]["base"].as_str().unwrap();
    let mut parts: Vec<&str> = loc.split('/').collect();
    parts.truncate(parts.len() - 2);
    format!("{}/", parts.join("/"))
}

/// The documents the trace expects at its locations, as (warehouse-relative path, bytes).
fn trace_files(dir: &Path, warehouse: &str) -> Vec<(String, Vec<u8>)> {
    let trace: Value = serde_json::from_slice(&fixture_sets::read(dir, "catalog.json")).unwrap();
    let mut out = Vec::new();
    for (k, loc) in trace["locations"].as_object().unwrap() {
        let rel = loc
            .as_str()
            .unwrap()
            .strip_prefix(warehouse)
            .expect("trace locations lie in the warehouse");
        out.push((
            rel.to_owned(),
            fixture_sets::read(dir, trace["metadata"][k].as_str().unwrap()),
        ));
    }
    out
}

/// Replays `dir/catalog.json` through `svc`, whose catalog `CATALOG` has a warehouse holding
/// [`trace_files`].
async fn replay_trace(svc: &IndexCatalogService, dir: &Path) {
    let trace: Value = serde_json::from_slice(&fixture_sets::read(dir, "catalog.json")).unwrap();
    let id: IndexIdentifier = serde_json::from_value(trace["identifier"].clone()).unwrap();
    let location = |k: &Value| {
        trace["locations"][k.as_str().unwrap()]
            .as_str()
            .unwrap()
            .to_owned()
    };
    svc.create_namespace(
        ACCOUNT,
        CATALOG,
        &CreateNamespaceRequest {
            path: id.namespace.clone(),
        },
    )
    .await
    .unwrap();
    let source = parquet("s3://lake/documents/");
    let ops = trace["operations"].as_array().unwrap();
    assert!(!ops.is_empty());
    for (i, op) in ops.iter().enumerate() {
        let expect = op["expect"].as_str().unwrap();
        let got = match op["operation"].as_str().unwrap() {
            "load" => {
                let r = svc.load(ACCOUNT, CATALOG, &id).await;
                if let (Ok(entry), Some(k)) = (&r, op.get("expect-location")) {
                    assert_eq!(entry.metadata_location, location(k), "step {i}");
                    assert_eq!(entry.identifier, id);
                    assert_eq!(entry.source, source);
                }
                code(&r)
            }
            "register" => {
                assert_eq!(
                    op["metadata"], op["location"],
                    "step {i}: trace pairs documents with locations"
                );
                let req = RegisterIndexRequest {
                    name: id.name.clone(),
                    metadata_location: location(&op["location"]),
                    source: source.clone(),
                };
                code(&svc.register(ACCOUNT, CATALOG, &id.namespace, &req).await)
            }
            "commit" => {
                assert_eq!(op["base-metadata"], op["base-location"], "step {i}");
                assert_eq!(op["new-metadata"], op["new-location"], "step {i}");
                let req = CommitIndexRequest {
                    source: source.clone(),
                    base: location(&op["base-location"]),
                    new: location(&op["new-location"]),
                };
                code(&svc.commit(ACCOUNT, CATALOG, &id, &req).await)
            }
            "drop" => code(&svc.drop(ACCOUNT, CATALOG, &id).await),
            other => panic!("step {i}: unknown trace operation {other}"),
        };
        assert_eq!(got, expect, "step {i}: {op}");
    }
}

async fn lookalike_identifiers_are_distinct(store: DynMetastore) {
    let env = env_with(store).await;
    let a = env.put("a/metadata.json", &fixture("valid/metadata.json"));
    let b = env.put("b/metadata.json", &fixture("valid/lvq4/metadata.json"));
    let c = env.put("c/metadata.json", &fixture("valid/lvq8/metadata.json"));
    let latin = "analytics";
    let cyrillic = "\u{0430}nalytics"; // Cyrillic small a
    create_ns(&env, &[latin]).await;
    let r = env
        .svc
        .list(ACCOUNT, CATALOG, &ns(&[cyrillic]), &PageRequest::default())
        .await;
    assert_eq!(code(&r), "NAMESPACE_NOT_FOUND");
    create_ns(&env, &[cyrillic]).await;
    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    register(&env, &[latin], nfc, &a).await.unwrap();
    register(&env, &[latin], nfd, &b).await.unwrap();
    register(&env, &[cyrillic], nfc, &c).await.unwrap();
    let load = |path: &'static str, name: &'static str| {
        let svc = env.svc.clone();
        async move {
            svc.load(ACCOUNT, CATALOG, &IndexIdentifier::new(&[path], name))
                .await
                .unwrap()
                .metadata_location
        }
    };
    assert_eq!(load("analytics", "caf\u{e9}").await, a);
    assert_eq!(load("analytics", "cafe\u{301}").await, b);
    assert_eq!(load("\u{0430}nalytics", "caf\u{e9}").await, c);
    let listed = env
        .svc
        .list(ACCOUNT, CATALOG, &ns(&[latin]), &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    let r = env
        .svc
        .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&[cyrillic], nfd))
        .await;
    assert_eq!(code(&r), "INDEX_NOT_FOUND");
    // Index catalog names too.
    let cyr_catalog = "v\u{0435}ctors"; // Cyrillic e
    env.svc
        .create_index_catalog(
            ACCOUNT,
            &CreateIndexCatalogRequest {
                name: cyr_catalog.into(),
                warehouse: WAREHOUSE.into(),
            },
        )
        .await
        .unwrap();
    let r = env
        .svc
        .load(ACCOUNT, cyr_catalog, &IndexIdentifier::new(&[latin], nfc))
        .await;
    assert_eq!(code(&r), "INDEX_NOT_FOUND");
}

async fn locations_outside_the_warehouse_are_refused(store: DynMetastore) {
    let env = env_with(store).await;
    create_ns(&env, &["ns"]).await;
    // A real, valid file whose location is spelled outside the warehouse.
    env.put("m/metadata.json", &fixture("valid/metadata.json"));
    for outside in [
        "s3://flotilla-parqdb/v2/m/metadata.json",
        "s3://flotilla-parqdb/v1x/m/metadata.json",
        "s3://other-bucket/v1/m/metadata.json",
        "s3://flotilla-parqdb/v1/../v1/m/metadata.json",
        "s3://flotilla-parqdb/v1/m//metadata.json",
        "s3://flotilla-parqdb/v1/m/",
        "file:///tmp/m/metadata.json",
        "m/metadata.json",
    ] {
        let e = register(&env, &["ns"], "idx", outside).await.unwrap_err();
        assert_eq!(e.code(), "INVALID_INDEX_METADATA", "{outside}: {e}");
        assert!(
            matches!(
                e,
                IndexCatalogError::InvalidIndexMetadata {
                    rule: Rule::MetadataLocation,
                    ..
                }
            ),
            "{outside}: {e}"
        );
    }
    let r = env
        .svc
        .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&["ns"], "idx"))
        .await;
    assert_eq!(code(&r), "INDEX_NOT_FOUND");
    // Missing file inside the warehouse.
    let e = register(&env, &["ns"], "idx", &format!("{WAREHOUSE}m/absent.json"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::MetadataLocation,
                ..
            }
        ),
        "{e}"
    );
    register(&env, &["ns"], "idx", &format!("{WAREHOUSE}m/metadata.json"))
        .await
        .unwrap();
    // A commit to a location outside the warehouse is refused as well.
    let req = CommitIndexRequest {
        source: parquet("s3://lake/documents/"),
        base: format!("{WAREHOUSE}m/metadata.json"),
        new: "s3://other-bucket/v1/next.json".into(),
    };
    let e = env
        .svc
        .commit(
            ACCOUNT,
            CATALOG,
            &IndexIdentifier::new(&["ns"], "idx"),
            &req,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::MetadataLocation,
                ..
            }
        ),
        "{e}"
    );
}

async fn concurrent_commits_on_one_base_exactly_one_wins(store: DynMetastore) {
    let env = env_with(store).await;
    create_ns(&env, &["ns"]).await;
    let base = env.put("m/v1.json", &fixture("valid/metadata.json"));
    register(&env, &["ns"], "idx", &base).await.unwrap();
    let id = IndexIdentifier::new(&["ns"], "idx");
    let mut tasks = Vec::new();
    for i in 0..20 {
        let new = env.put(
            &format!("m/v2-{i}.json"),
            &fixture("valid/metadata-next.json"),
        );
        let svc = env.svc.clone();
        let (id, base) = (id.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let req = CommitIndexRequest {
                source: parquet(&format!("s3://lake/documents-{i}/")),
                base,
                new: new.clone(),
            };
            (new, svc.commit(ACCOUNT, CATALOG, &id, &req).await)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (new, result) = task.await.unwrap();
        match result {
            Ok(entry) => winners.push((new, entry)),
            Err(e) => assert_eq!(e.code(), "COMMIT_CONFLICT", "{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit on a base wins");
    let (new, entry) = &winners[0];
    let loaded = env.svc.load(ACCOUNT, CATALOG, &id).await.unwrap();
    assert_eq!(&loaded.metadata_location, new);
    assert_eq!(
        &loaded, entry,
        "the winner's source binding is published with it"
    );
}

async fn invalid_metadata_is_refused_with_its_code(store: DynMetastore) {
    let env = env_with(store).await;
    create_ns(&env, &["ns"]).await;
    let manifest: Value = serde_json::from_slice(&fixture("invalid/manifest.json")).unwrap();
    for entry in manifest.as_array().unwrap() {
        let file = entry["file"].as_str().unwrap();
        let loc = env.put(&format!("bad/{file}"), &fixture(&format!("invalid/{file}")));
        let e = register(&env, &["ns"], "idx", &loc).await.unwrap_err();
        let expected = entry["code"].as_str().unwrap();
        assert_eq!(e.code(), expected, "{file}: {e}");
    }
    // Duplicate keys are caught through the catalog too.
    let text = String::from_utf8(fixture("valid/metadata.json")).unwrap();
    let dup = text.replacen(
        "\"format-version\": 1,",
        "\"format-version\": 1, \"format-version\": 1,",
        1,
    );
    let loc = env.put("bad/dup.json", dup.as_bytes());
    let e = register(&env, &["ns"], "idx", &loc).await.unwrap_err();
    assert!(
        matches!(
            e,
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::DuplicateKey,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        code(
            &env.svc
                .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&["ns"], "idx"))
                .await
        ),
        "INDEX_NOT_FOUND"
    );
}

async fn commit_rules_and_order_of_checks(store: DynMetastore) {
    let env = env_with(store).await;
    let id = IndexIdentifier::new(&["ns"], "idx");
    let base = env.put("m/v1.json", &fixture("valid/metadata.json"));
    let next = env.put("m/v2.json", &fixture("valid/metadata-next.json"));
    let other = env.put("m/other.json", &fixture("valid/lvq4/metadata.json"));
    let bad = env.put(
        "m/bad.json",
        &fixture("invalid/unknown-root-field.metadata.json"),
    );
    let absent = format!("{WAREHOUSE}m/absent.json");
    // Namespace first.
    assert_eq!(
        code(&register(&env, &["ns"], "idx", &bad).await),
        "NAMESPACE_NOT_FOUND"
    );
    create_ns(&env, &["ns"]).await;
    register(&env, &["ns"], "idx", &base).await.unwrap();
    // Existence before reading the file: an invalid or absent file still says ALREADY_EXISTS.
    assert_eq!(
        code(&register(&env, &["ns"], "idx", &bad).await),
        "ALREADY_EXISTS"
    );
    assert_eq!(
        code(&register(&env, &["ns"], "idx", &absent).await),
        "ALREADY_EXISTS"
    );
    let commit = |base: &str, new: &str| {
        let svc = env.svc.clone();
        let id = id.clone();
        let req = CommitIndexRequest {
            source: parquet("s3://lake/documents/"),
            base: base.into(),
            new: new.into(),
        };
        async move { svc.commit(ACCOUNT, CATALOG, &id, &req).await }
    };
    // Conflict before reading the file.
    assert_eq!(code(&commit(&next, &absent).await), "COMMIT_CONFLICT");
    assert_eq!(code(&commit(&absent, &bad).await), "COMMIT_CONFLICT");
    // base == new.
    let e = commit(&base, &base).await.unwrap_err();
    assert!(
        matches!(
            e,
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::MetadataLocation,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(code(&commit(&base, &other).await), "INDEX_UUID_MISMATCH");
    assert_eq!(code(&commit(&base, &bad).await), "INVALID_INDEX_METADATA");
    assert_eq!(
        code(&commit(&base, &absent).await),
        "INVALID_INDEX_METADATA"
    );
    let missing = IndexIdentifier::new(&["ns"], "missing");
    let req = CommitIndexRequest {
        source: parquet("s3://lake/d/"),
        base: base.clone(),
        new: next.clone(),
    };
    assert_eq!(
        code(&env.svc.commit(ACCOUNT, CATALOG, &missing, &req).await),
        "INDEX_NOT_FOUND"
    );
    // Nothing above changed the mapping.
    assert_eq!(
        env.svc
            .load(ACCOUNT, CATALOG, &id)
            .await
            .unwrap()
            .metadata_location,
        base
    );
    // An Iceberg source binding is published with a commit.
    let iceberg = SourceBinding::Iceberg {
        catalog: "glue".into(),
        namespace: ns(&["crm"]),
        name: "documents".into(),
        table_uuid: "7b1f6c2e-1d4a-4c55-9a1e-3b2c1d0e9f8a".into(),
        snapshot_id: 42,
    };
    let req = CommitIndexRequest {
        source: iceberg.clone(),
        base: base.clone(),
        new: next.clone(),
    };
    let entry = env.svc.commit(ACCOUNT, CATALOG, &id, &req).await.unwrap();
    assert_eq!(entry.source, iceberg);
    assert_eq!(env.svc.load(ACCOUNT, CATALOG, &id).await.unwrap(), entry);
    // Going back to the old document breaks the successor rules.
    assert_eq!(code(&commit(&next, &base).await), "INVALID_INDEX_METADATA");
    // Unknown catalog and bad arguments.
    let r = env.svc.load(ACCOUNT, "nope", &id).await;
    assert_eq!(code(&r), "NOT_FOUND");
    let r = env
        .svc
        .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&["ns"], ""))
        .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT");
    let r = env
        .svc
        .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&["a\u{1f}b"], "x"))
        .await;
    assert_eq!(code(&r), "INVALID_ARGUMENT");
}

async fn rename_drop_and_namespaces(store: DynMetastore) {
    let env = env_with(store).await;
    let loc = env.put("m/v1.json", &fixture("valid/metadata.json"));
    create_ns(&env, &["a"]).await;
    let r = env
        .svc
        .create_namespace(
            ACCOUNT,
            CATALOG,
            &CreateNamespaceRequest {
                path: ns(&["b", "c"]),
            },
        )
        .await;
    assert_eq!(code(&r), "NAMESPACE_NOT_FOUND", "a child needs its parent");
    create_ns(&env, &["b"]).await;
    create_ns(&env, &["b", "c"]).await;
    let r = env
        .svc
        .create_namespace(
            ACCOUNT,
            CATALOG,
            &CreateNamespaceRequest { path: ns(&["b"]) },
        )
        .await;
    assert_eq!(code(&r), "ALREADY_EXISTS");
    register(&env, &["a"], "x", &loc).await.unwrap();
    register(&env, &["b", "c"], "y", &loc).await.unwrap();
    let src = IndexIdentifier::new(&["a"], "x");
    let rename = |s: IndexIdentifier, d: IndexIdentifier| {
        let svc = env.svc.clone();
        async move {
            svc.rename(
                ACCOUNT,
                CATALOG,
                &RenameIndexRequest {
                    source: s,
                    destination: d,
                },
            )
            .await
        }
    };
    assert_eq!(
        code(
            &rename(
                IndexIdentifier::new(&["a"], "nope"),
                IndexIdentifier::new(&["b"], "z")
            )
            .await
        ),
        "INDEX_NOT_FOUND"
    );
    assert_eq!(
        code(&rename(src.clone(), IndexIdentifier::new(&["b", "c"], "y")).await),
        "ALREADY_EXISTS"
    );
    assert_eq!(
        code(&rename(src.clone(), IndexIdentifier::new(&["zz"], "y")).await),
        "NAMESPACE_NOT_FOUND"
    );
    assert_eq!(
        code(&env.svc.drop_namespace(ACCOUNT, CATALOG, &ns(&["a"])).await),
        "HAS_DEPENDENTS"
    );
    rename(src.clone(), IndexIdentifier::new(&["b"], "x2"))
        .await
        .unwrap();
    assert_eq!(
        code(&env.svc.load(ACCOUNT, CATALOG, &src).await),
        "INDEX_NOT_FOUND"
    );
    let moved = env
        .svc
        .load(ACCOUNT, CATALOG, &IndexIdentifier::new(&["b"], "x2"))
        .await
        .unwrap();
    assert_eq!(moved.metadata_location, loc);
    // Renames within one namespace.
    rename(
        IndexIdentifier::new(&["b"], "x2"),
        IndexIdentifier::new(&["b"], "x3"),
    )
    .await
    .unwrap();
    env.svc
        .drop_namespace(ACCOUNT, CATALOG, &ns(&["a"]))
        .await
        .unwrap();
    assert_eq!(
        code(&env.svc.drop_namespace(ACCOUNT, CATALOG, &ns(&["a"])).await),
        "NAMESPACE_NOT_FOUND"
    );
    assert_eq!(
        code(&env.svc.drop_namespace(ACCOUNT, CATALOG, &ns(&["b"])).await),
        "HAS_DEPENDENTS"
    );
    env.svc
        .drop(ACCOUNT, CATALOG, &IndexIdentifier::new(&["b", "c"], "y"))
        .await
        .unwrap();
    assert_eq!(
        code(
            &env.svc
                .drop(ACCOUNT, CATALOG, &IndexIdentifier::new(&["b", "c"], "y"))
                .await
        ),
        "INDEX_NOT_FOUND"
    );
    env.svc
        .drop_namespace(ACCOUNT, CATALOG, &ns(&["b", "c"]))
        .await
        .unwrap();
    assert_eq!(
        code(&env.svc.drop_namespace(ACCOUNT, CATALOG, &ns(&["b"])).await),
        "HAS_DEPENDENTS"
    );
    env.svc
        .drop(ACCOUNT, CATALOG, &IndexIdentifier::new(&["b"], "x3"))
        .await
        .unwrap();
    env.svc
        .drop_namespace(ACCOUNT, CATALOG, &ns(&["b"]))
        .await
        .unwrap();
    // drop never deletes files.
    assert!(env.exists("m/v1.json"));
    let listed = env
        .svc
        .list_namespaces(ACCOUNT, CATALOG, &PageRequest::default())
        .await
        .unwrap();
    assert!(listed.items.is_empty());
}

async fn listing_pages_through_identifiers(store: DynMetastore) {
    let env = env_with(store).await;
    let loc = env.put("m/v1.json", &fixture("valid/metadata.json"));
    create_ns(&env, &["a"]).await;
    create_ns(&env, &["a", "b"]).await;
    for name in ["i1", "i2", "i3"] {
        register(&env, &["a"], name, &loc).await.unwrap();
    }
    register(&env, &["a", "b"], "child", &loc).await.unwrap();
    let mut names = Vec::new();
    let mut page = PageRequest {
        page_size: Some(2),
        page_token: None,
    };
    loop {
        let r = env
            .svc
            .list(ACCOUNT, CATALOG, &ns(&["a"]), &page)
            .await
            .unwrap();
        assert!(r.items.len() <= 2);
        names.extend(r.items.into_iter().map(|i| i.name));
        match r.next_page_token {
            Some(t) => page.page_token = Some(t),
            None => break,
        }
    }
    assert_eq!(
        names,
        ["i1", "i2", "i3"],
        "a namespace lists its own indexes only"
    );
    let bad = PageRequest {
        page_size: Some(2),
        page_token: Some("Zm9yZWlnbg".into()),
    };
    assert_eq!(
        code(&env.svc.list(ACCOUNT, CATALOG, &ns(&["a"]), &bad).await),
        "INVALID_ARGUMENT"
    );
    let zero = PageRequest {
        page_size: Some(0),
        page_token: None,
    };
    assert_eq!(
        code(&env.svc.list(ACCOUNT, CATALOG, &ns(&["a"]), &zero).await),
        "INVALID_ARGUMENT"
    );
    let catalogs = env
        .svc
        .list_index_catalogs(ACCOUNT, &PageRequest::default())
        .await
        .unwrap();
    assert_eq!(catalogs.items.len(), 1);
    assert_eq!(catalogs.items[0].warehouse, WAREHOUSE);
    let r = env
        .svc
        .create_index_catalog(
            ACCOUNT,
            &CreateIndexCatalogRequest {
                name: CATALOG.into(),
                warehouse: WAREHOUSE.into(),
            },
        )
        .await;
    assert_eq!(code(&r), "ALREADY_EXISTS");
    for bad in [
        "s3://b/no-slash",
        "gs://bucket/p/",
        "file:///tmp/x",
        "s3://flotilla-parqdb/v1/../",
    ] {
        let r = env
            .svc
            .create_index_catalog(
                ACCOUNT,
                &CreateIndexCatalogRequest {
                    name: "other".into(),
                    warehouse: bad.into(),
                },
            )
            .await;
        assert_eq!(code(&r), "INVALID_ARGUMENT", "{bad}");
    }
}

async fn gc_collects_only_unreachable_objects_after_retention(store: DynMetastore) {
    let env = env_with(store).await;
    let retention = 7 * DAY_MS;
    create_ns(&env, &["ns"]).await;
    let id = IndexIdentifier::new(&["ns"], "idx");
    let v1 = env.put("m/v1.json", &fixture("valid/metadata.json"));
    let v2 = env.put("m/v2.json", &fixture("valid/metadata-next.json"));
    env.put("centroids/ivf_centroids.parquet", b"c");
    env.put("postings/part-0.parquet", b"p");
    env.put("centroids/ivf-centroids.metadata.json", b"{}");
    env.put("orphan/failed-commit.json", b"x");
    let t0 = env.clock.now_ms();
    register(&env, &["ns"], "idx", &v1).await.unwrap();
    env.clock.set_ms(t0 + DAY_MS);
    let req = CommitIndexRequest {
        source: parquet("s3://lake/d/"),
        base: v1.clone(),
        new: v2.clone(),
    };
    env.svc.commit(ACCOUNT, CATALOG, &id, &req).await.unwrap();
    let lost_v1 = t0 + DAY_MS;

    let to_delete = |plan: &gc::GcPlan| {
        plan.delete
            .iter()
            .map(|c| c.location.clone())
            .collect::<Vec<_>>()
    };
    let orphan = format!("{WAREHOUSE}orphan/failed-commit.json");
    // Files written just now that no mapping references may belong to an operation in
    // progress: kept.
    let plan = gc::plan(&env.svc, ACCOUNT, CATALOG, retention, t0 + 60_000)
        .await
        .unwrap();
    assert!(plan.delete.is_empty(), "{plan:?}");
    assert_eq!(
        plan.kept_recent, 2,
        "v1's loss is recent, the orphan is new: {plan:?}"
    );
    // One day before v1's retention ends: v1's file is 8 days old, but its retention runs
    // from the loss of reachability; only the never-published orphan (8 days old) goes.
    let plan = gc::plan(
        &env.svc,
        ACCOUNT,
        CATALOG,
        retention,
        lost_v1 + retention - 1,
    )
    .await
    .unwrap();
    assert_eq!(to_delete(&plan), std::slice::from_ref(&orphan), "{plan:?}");
    assert_eq!(
        plan.kept_reachable, 4,
        "v2 and the three objects its snapshots reference"
    );
    // After the retention: v1 and the never-published orphan (older than the retention).
    let plan = gc::plan(&env.svc, ACCOUNT, CATALOG, retention, lost_v1 + retention)
        .await
        .unwrap();
    assert_eq!(to_delete(&plan), [format!("{WAREHOUSE}m/v1.json"), orphan]);
    assert_eq!(plan.delete[0].lost_reachability_ms, Some(lost_v1));
    let report = gc::apply(&env.svc, ACCOUNT, CATALOG, &plan).await.unwrap();
    assert_eq!(report.deleted.len(), 2);
    assert!(!env.exists("m/v1.json") && !env.exists("orphan/failed-commit.json"));
    assert!(env.exists("m/v2.json") && env.exists("postings/part-0.parquet"));

    // Drop: everything loses reachability at the drop, not at file creation.
    let t_drop = lost_v1 + retention + DAY_MS;
    env.clock.set_ms(t_drop);
    env.svc.drop(ACCOUNT, CATALOG, &id).await.unwrap();
    let plan = gc::plan(
        &env.svc,
        ACCOUNT,
        CATALOG,
        retention,
        t_drop + retention - 1,
    )
    .await
    .unwrap();
    assert!(plan.delete.is_empty(), "{plan:?}");
    let plan = gc::plan(&env.svc, ACCOUNT, CATALOG, retention, t_drop + retention)
        .await
        .unwrap();
    assert_eq!(plan.delete.len(), 4, "{plan:?}");

    // Re-registering v2 before apply makes it reachable again: apply re-checks and skips.
    register(&env, &["ns"], "again", &v2).await.unwrap();
    let report = gc::apply(&env.svc, ACCOUNT, CATALOG, &plan).await.unwrap();
    assert!(report.deleted.is_empty(), "{report:?}");
    assert_eq!(report.skipped.len(), 4);
    assert!(env.exists("m/v2.json"));
}

/// Fault injection needs a concrete store; the protocol under test is backend-independent.
#[tokio::test]
async fn unknown_commit_outcome_is_resolved_by_rereading() {
    let faulty = Arc::new(FaultInjectingMetastore::new(
        RedbMetastore::in_memory().unwrap(),
    ));
    let env = env_with(faulty.clone() as DynMetastore).await;
    create_ns(&env, &["ns"]).await;
    let v1 = env.put("m/v1.json", &fixture("valid/metadata.json"));
    let v2 = env.put("m/v2.json", &fixture("valid/metadata-next.json"));
    register(&env, &["ns"], "idx", &v1).await.unwrap();
    let id = IndexIdentifier::new(&["ns"], "idx");
    let req = CommitIndexRequest {
        source: parquet("s3://lake/d/"),
        base: v1.clone(),
        new: v2.clone(),
    };
    // Not applied, outcome unknown: retryable, and the mapping is unchanged.
    faulty.fail_transact(faulty.transacts() + 1, Fault::UnknownNotApplied);
    let e = env
        .svc
        .commit(ACCOUNT, CATALOG, &id, &req)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "UNAVAILABLE");
    assert_eq!(
        env.svc
            .load(ACCOUNT, CATALOG, &id)
            .await
            .unwrap()
            .metadata_location,
        v1
    );
    // Applied, outcome unknown: the re-read shows our write, so the commit succeeded.
    faulty.fail_transact(faulty.transacts() + 1, Fault::ApplyThenUnknown);
    let entry = env.svc.commit(ACCOUNT, CATALOG, &id, &req).await.unwrap();
    assert_eq!(entry.metadata_location, v2);
    // A plain retry now reports the truth.
    assert_eq!(
        code(&env.svc.commit(ACCOUNT, CATALOG, &id, &req).await),
        "COMMIT_CONFLICT"
    );
}

macro_rules! on_backends {
    ($($case:ident),* $(,)?) => {
        mod redb_backend {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() { super::$case((redb as Backend)().await).await; })*
        }
        mod dynamo_backend {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() { super::$case((dynamo as Backend)().await).await; })*
        }
    };
}

on_backends!(
    catalog_trace_replays_exactly,
    lookalike_identifiers_are_distinct,
    locations_outside_the_warehouse_are_refused,
    concurrent_commits_on_one_base_exactly_one_wins,
    invalid_metadata_is_refused_with_its_code,
    commit_rules_and_order_of_checks,
    rename_drop_and_namespaces,
    listing_pages_through_identifiers,
    gc_collects_only_unreachable_objects_after_retention,
);

/// The trace once more against moto S3 with `DefaultWarehouseStores`, the production path
/// for `s3://` warehouses (endpoint override), on the exact fixture locations.
#[tokio::test]
async fn catalog_trace_replays_on_s3() {
    let endpoint = std::env::var("FLOTILLA_MOTO_ENDPOINT")
        .expect("FLOTILLA_MOTO_ENDPOINT is not set: the S3 trace test needs moto (scripts set it)");
    let http = reqwest::Client::new();
    // Creating an existing bucket in moto is harmless; the objects written are identical.
    let r = http
        .put(format!("{endpoint}/flotilla-parqdb"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success() || r.status().as_u16() == 409,
        "create bucket: {}",
        r.status()
    );
    let stores = Arc::new(DefaultWarehouseStores::new().with_s3_endpoint(endpoint.clone()));
    let store: DynMetastore = Arc::new(RedbMetastore::in_memory().unwrap());
    let svc = IndexCatalogService::new(
        store,
        stores.clone(),
        Arc::new(ManualClock::new(real_now())),
    );
    svc.create_index_catalog(
        ACCOUNT,
        &CreateIndexCatalogRequest {
            name: CATALOG.into(),
            warehouse: WAREHOUSE.into(),
        },
    )
    .await
    .unwrap();
    // Upload through the same (signed) object store the catalog reads with.
    let objects = stores.open(&Warehouse::parse(WAREHOUSE).unwrap()).unwrap();
    let dir = fixture_sets::own();
    for (rel, bytes) in trace_files(&dir, WAREHOUSE) {
        let path = object_store::path::Path::parse(&rel).unwrap();
        objects
            .put(&path, bytes.into())
            .await
            .unwrap_or_else(|e| panic!("upload {rel}: {e}"));
    }
    replay_trace(&svc, &dir).await;
}

/// The external conformance trace (only when `FLOTILLA_PARQDB_CONFORMANCE_DIR` names one), on
/// the warehouse its locations lie in.
#[tokio::test]
async fn conformance_trace_replays_exactly() {
    let Some(dir) = fixture_sets::conformance() else {
        return;
    };
    let warehouse = trace_warehouse(&dir);
    let env = env_with_warehouse(Arc::new(RedbMetastore::in_memory().unwrap()), &warehouse).await;
    for (rel, bytes) in trace_files(&dir, &warehouse) {
        let path = env.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    replay_trace(&env.svc, &dir).await;
}
