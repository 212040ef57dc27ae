//! ParqDB index catalogs through the HTTP API (docs/api.md "index-catalogs"), on both
//! metastore backends, with the fixtures of `shared/parqdb/fixtures/v1` written into a
//! temporary `file://` warehouse.

mod support;
use support::both_backends;

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use flotilla_core::clock::Clock;
use flotilla_core::service::index_catalogs::gc;
use flotilla_metastore::{Consistency, Key, Op, Transaction};
use flotilla_parqdb::IndexCatalogError;
use flotilla_parqdb::location::Warehouse;
use flotilla_parqdb::store::WarehouseStores;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{Value, json};
use support::*;

both_backends!(
    redb: ({
        let (store, dir) = redb_store();
        Harness::with_store(store, Some(dir), true)
    }),
    dynamo: (Harness::with_store(dynamo_store().await, None, true));
    fixture_trace_replays_through_http,
    index_catalogs_and_namespaces,
    rename_list_and_drop,
    every_invalid_fixture_fails_with_its_code,
    each_error_code_answers_its_status,
    concurrent_commits_on_one_base_exactly_one_wins,
    cross_account_access_is_denied,
    mutations_assert_the_account_fence,
    account_delete_removes_index_catalogs,
    storage_failures_answer_503_with_an_error_id_only,
    idempotent_creates_replay_and_detect_reuse,
    gc_follows_the_application_clock,
    index_changes_write_events_in_the_account_log,
);

// ---- helpers --------------------------------------------------------------------------

fn fixtures() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../parqdb/fixtures/v1"
    ));
    assert!(
        dir.is_dir(),
        "ParqDB fixtures not found at {}",
        dir.display()
    );
    dir
}

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(rel)).unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

fn fixture_json(rel: &str) -> Value {
    serde_json::from_slice(&fixture(rel)).expect("fixture JSON")
}

/// A temporary `file://` warehouse.
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

    /// Writes `bytes` at `rel` and answers its absolute location.
    fn put(&self, rel: &str, bytes: &[u8]) -> String {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write");
        format!("{}{rel}", self.uri)
    }

    fn exists(&self, rel: &str) -> bool {
        self.dir.path().join(rel).exists()
    }
}

fn ixc(account: &str) -> String {
    format!("/v1/accounts/{account}/index-catalogs")
}

fn nsp(account: &str, catalog: &str, path: &[&str]) -> String {
    format!(
        "{}/{}/namespaces/{}",
        ixc(account),
        urlencode(catalog),
        ns(path)
    )
}

fn indexes(account: &str, catalog: &str, path: &[&str]) -> String {
    format!("{}/indexes", nsp(account, catalog, path))
}

fn index(account: &str, catalog: &str, path: &[&str], name: &str) -> String {
    format!("{}/{}", indexes(account, catalog, path), urlencode(name))
}

fn parquet() -> Value {
    json!({"type": "PARQUET", "uri": "s3://lake/docs/"})
}

async fn create_catalog(h: &Harness, account: &str, name: &str, wh: &Wh) -> Resp {
    h.post(
        &ixc(account),
        ACME,
        json!({"name": name, "warehouse": wh.uri}),
    )
    .await
}

async fn create_ns(h: &Harness, account: &str, catalog: &str, path: &[&str]) {
    let r = h
        .post(
            &format!("{}/{}/namespaces", ixc(account), urlencode(catalog)),
            ACME,
            json!({"path": path}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

async fn register(h: &Harness, ns_path: &[&str], name: &str, location: &str) -> Resp {
    h.post(
        &indexes("acme", "lake", ns_path),
        ACME,
        json!({"name": name, "metadata_location": location, "source": parquet()}),
    )
    .await
}

async fn commit(h: &Harness, ns_path: &[&str], name: &str, base: &str, new: &str) -> Resp {
    h.post(
        &format!("{}/commit", index("acme", "lake", ns_path, name)),
        ACME,
        json!({"source": parquet(), "base": base, "new": new}),
    )
    .await
}

/// Account `acme` with index catalog `lake` on a fresh warehouse and namespace `analytics`.
async fn setup(h: &Harness) -> Wh {
    h.account("acme").await;
    let wh = Wh::new();
    let r = create_catalog(h, "acme", "lake", &wh).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    create_ns(h, "acme", "lake", &["analytics"]).await;
    wh
}

fn assert_error(r: &Resp, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(r.code(), code, "{:?}", r.body);
}

// ---- cases ----------------------------------------------------------------------------

/// `catalog.json`: the exact operation trace of the fixtures, every expectation through HTTP.
async fn fixture_trace_replays_through_http(h: Harness) {
    let wh = setup(&h).await;
    let trace = fixture_json("catalog.json");
    let fixture_root = "s3://flotilla-parqdb/v1/";
    let mut locations = std::collections::HashMap::new();
    for role in ["base", "next"] {
        let original = trace["locations"][role].as_str().expect("location");
        let rel = original
            .strip_prefix(fixture_root)
            .expect("inside the fixture warehouse");
        let file = trace["metadata"][role].as_str().expect("metadata");
        locations.insert(role.to_owned(), wh.put(rel, &fixture(file)));
    }
    let id = &trace["identifier"];
    let namespace: Vec<&str> = id["namespace"]
        .as_array()
        .expect("namespace")
        .iter()
        .map(|s| s.as_str().expect("segment"))
        .collect();
    let name = id["name"].as_str().expect("name");
    assert_eq!(namespace, ["analytics"], "setup created this namespace");
    for (step, op) in trace["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .enumerate()
    {
        let expect = op["expect"].as_str().expect("expect");
        let loc = |field: &str| locations[op[field].as_str().expect(field)].clone();
        let r = match op["operation"].as_str().expect("operation") {
            "load" => h.get(&index("acme", "lake", &namespace, name), ACME).await,
            "register" => register(&h, &namespace, name, &loc("location")).await,
            "commit" => {
                commit(
                    &h,
                    &namespace,
                    name,
                    &loc("base-location"),
                    &loc("new-location"),
                )
                .await
            }
            "drop" => {
                h.delete(&index("acme", "lake", &namespace, name), ACME)
                    .await
            }
            other => panic!("unknown trace operation {other}"),
        };
        if expect == "OK" {
            assert!(r.status.is_success(), "step {step}: {:?}", r.body);
            if let Some(role) = op["expect-location"].as_str() {
                assert_eq!(
                    r.body["metadata_location"],
                    json!(locations[role]),
                    "step {step}"
                );
                assert_eq!(
                    r.body["identifier"],
                    json!({"namespace": namespace, "name": name})
                );
                assert_eq!(r.body["source"], parquet());
            }
        } else {
            assert_eq!(r.code(), expect, "step {step}: {:?}", r.body);
        }
    }
}

async fn index_catalogs_and_namespaces(h: Harness) {
    let wh = setup(&h).await;
    // Create answers the representation with its ETag; a second create of the name is 409.
    let r = create_catalog(&h, "acme", "vectors", &wh).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["name"], "vectors");
    assert_eq!(r.body["warehouse"], json!(wh.uri));
    assert!(!r.etag().is_empty());
    assert_error(
        &create_catalog(&h, "acme", "vectors", &wh).await,
        StatusCode::CONFLICT,
        "ALREADY_EXISTS",
    );
    let r = h.get(&format!("{}/vectors", ixc("acme")), ACME).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["warehouse"], json!(wh.uri));
    // Look-alike catalog names are distinct.
    for lookalike in ["caf\u{e9}", "cafe\u{301}", "\u{430}lpha", "alpha"] {
        let r = create_catalog(&h, "acme", lookalike, &wh).await;
        assert_eq!(r.status, StatusCode::CREATED, "{lookalike}: {:?}", r.body);
    }

    // Pagination over 6 catalogs, 4 per page; tokens are bound to their listing.
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut url = format!("{}?page_size=4", ixc("acme"));
        if let Some(t) = &token {
            url.push_str(&format!("&page_token={}", urlencode(t)));
        }
        let r = h.get(&url, ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        pages += 1;
        for item in r.body["items"].as_array().expect("items") {
            names.push(item["name"].as_str().expect("name").to_owned());
        }
        match r.body["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names.len(), 6, "{names:?}");
    assert_eq!(pages, 2);
    assert_eq!(sorted.len(), 6, "no duplicates across pages");
    let first = h.get(&format!("{}?page_size=1", ixc("acme")), ACME).await;
    let foreign = first.body["next_page_token"]
        .as_str()
        .expect("token")
        .to_owned();
    let r = h
        .get(
            &format!(
                "{}/lake/namespaces?page_token={}",
                ixc("acme"),
                urlencode(&foreign)
            ),
            ACME,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h
        .get(&format!("{}?page_token=garbage", ixc("acme")), ACME)
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h
        .get(&format!("{}?page_size=1001", ixc("acme")), ACME)
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");

    // Namespaces: a child needs its parent; multi-level paths travel as one %1F segment.
    let r = h
        .post(
            &format!("{}/lake/namespaces", ixc("acme")),
            ACME,
            json!({"path": ["x", "y"]}),
        )
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
    create_ns(&h, "acme", "lake", &["analytics", "eu"]).await;
    let r = h
        .post(
            &format!("{}/lake/namespaces", ixc("acme")),
            ACME,
            json!({"path": ["analytics"]}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "ALREADY_EXISTS");
    let r = h
        .get(&format!("{}/lake/namespaces", ixc("acme")), ACME)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let paths: Vec<Value> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["path"].clone())
        .collect();
    assert_eq!(
        paths,
        vec![json!(["analytics"]), json!(["analytics", "eu"])]
    );
    let loc = wh.put("eu/m.json", &fixture("valid/metadata.json"));
    assert_eq!(
        register(&h, &["analytics", "eu"], "docs", &loc)
            .await
            .status,
        StatusCode::CREATED
    );
    // Only an empty namespace is dropped.
    let r = h.delete(&nsp("acme", "lake", &["analytics"]), ACME).await;
    assert_error(&r, StatusCode::CONFLICT, "HAS_DEPENDENTS");
    let r = h
        .delete(&nsp("acme", "lake", &["analytics", "eu"]), ACME)
        .await;
    assert_error(&r, StatusCode::CONFLICT, "HAS_DEPENDENTS");
    let r = h
        .delete(&index("acme", "lake", &["analytics", "eu"], "docs"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = h
        .delete(&nsp("acme", "lake", &["analytics", "eu"]), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = h.delete(&nsp("acme", "lake", &["analytics"]), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = h.delete(&nsp("acme", "lake", &["analytics"]), ACME).await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
    // Drop never deletes files.
    assert!(wh.exists("eu/m.json"));
}

async fn rename_list_and_drop(h: Harness) {
    let wh = setup(&h).await;
    create_ns(&h, "acme", "lake", &["archive"]).await;
    let loc = wh.put("docs/v1.json", &fixture("valid/metadata.json"));
    let other = wh.put("lvq4/v1.json", &fixture("valid/lvq4/metadata.json"));
    // NFC and NFD index names are two identifiers.
    for name in ["caf\u{e9}", "cafe\u{301}", "docs"] {
        let r = register(&h, &["analytics"], name, &loc).await;
        assert_eq!(r.status, StatusCode::CREATED, "{name}: {:?}", r.body);
    }
    assert_eq!(
        register(&h, &["analytics"], "lvq4", &other).await.status,
        StatusCode::CREATED
    );
    let list = |path: &'static [&'static str]| {
        let h = &h;
        async move {
            let r = h.get(&indexes("acme", "lake", path), ACME).await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
            r.body["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| i["name"].as_str().expect("name").to_owned())
                .collect::<Vec<_>>()
        }
    };
    let mut listed = list(&["analytics"]).await;
    listed.sort();
    assert_eq!(listed, ["cafe\u{301}", "caf\u{e9}", "docs", "lvq4"]);
    // Paging through identifiers.
    let r = h
        .get(
            &format!("{}?page_size=3", indexes("acme", "lake", &["analytics"])),
            ACME,
        )
        .await;
    assert_eq!(r.body["items"].as_array().expect("items").len(), 3);
    let t = r.body["next_page_token"].as_str().expect("token");
    let r = h
        .get(
            &format!(
                "{}?page_size=3&page_token={}",
                indexes("acme", "lake", &["analytics"]),
                urlencode(t)
            ),
            ACME,
        )
        .await;
    assert_eq!(
        r.body["items"].as_array().expect("items").len(),
        1,
        "{:?}",
        r.body
    );
    // A token of one namespace's listing is foreign in another's.
    let r = h
        .get(
            &format!(
                "{}?page_token={}",
                indexes("acme", "lake", &["archive"]),
                urlencode(t)
            ),
            ACME,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");

    // Rename across namespaces.
    let rename = |src: (&[&str], &str), dst: (&[&str], &str)| {
        let h = &h;
        let url = format!("{}/lake/rename", ixc("acme"));
        let body = json!({"source": {"namespace": src.0, "name": src.1}, "destination": {"namespace": dst.0, "name": dst.1}});
        async move { h.post(&url, ACME, body).await }
    };
    let r = rename((&["analytics"], "docs"), (&["archive"], "docs-2025")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert_error(
        &h.get(&index("acme", "lake", &["analytics"], "docs"), ACME)
            .await,
        StatusCode::NOT_FOUND,
        "INDEX_NOT_FOUND",
    );
    let r = h
        .get(&index("acme", "lake", &["archive"], "docs-2025"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["metadata_location"], json!(loc));
    assert_eq!(
        r.body["identifier"],
        json!({"namespace": ["archive"], "name": "docs-2025"})
    );
    assert_eq!(list(&["archive"]).await, ["docs-2025"]);
    // Source must exist, destination must not, destination namespace must exist.
    let r = rename((&["analytics"], "docs"), (&["archive"], "x")).await;
    assert_error(&r, StatusCode::NOT_FOUND, "INDEX_NOT_FOUND");
    let r = rename((&["analytics"], "lvq4"), (&["archive"], "docs-2025")).await;
    assert_error(&r, StatusCode::CONFLICT, "ALREADY_EXISTS");
    let r = rename((&["analytics"], "lvq4"), (&["nowhere"], "x")).await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
    // The namespace counts moved with the rename: archive holds one index, analytics three.
    let r = h.delete(&nsp("acme", "lake", &["archive"]), ACME).await;
    assert_error(&r, StatusCode::CONFLICT, "HAS_DEPENDENTS");
    let r = h
        .delete(&index("acme", "lake", &["archive"], "docs-2025"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = h
        .delete(&index("acme", "lake", &["archive"], "docs-2025"), ACME)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "INDEX_NOT_FOUND");
    let r = h.delete(&nsp("acme", "lake", &["archive"]), ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    let r = h.get(&indexes("acme", "lake", &["archive"]), ACME).await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
}

/// Every file of `invalid/manifest.json` is refused by register with its code and a rule.
async fn every_invalid_fixture_fails_with_its_code(h: Harness) {
    let wh = setup(&h).await;
    let manifest = fixture_json("invalid/manifest.json");
    let entries = manifest.as_array().expect("manifest");
    let on_disk = std::fs::read_dir(fixtures().join("invalid"))
        .expect("invalid dir")
        .filter(|e| {
            e.as_ref()
                .map(|e| e.file_name() != "manifest.json")
                .unwrap_or(true)
        })
        .count();
    assert_eq!(
        entries.len(),
        on_disk,
        "every invalid fixture is in the manifest"
    );
    for (i, entry) in entries.iter().enumerate() {
        let file = entry["file"].as_str().expect("file");
        let loc = wh.put(
            &format!("invalid/{file}"),
            &fixture(&format!("invalid/{file}")),
        );
        let r = register(&h, &["analytics"], &format!("bad-{i}"), &loc).await;
        if entry["code"] == "UNSUPPORTED_FORMAT_VERSION" {
            assert_error(&r, StatusCode::BAD_REQUEST, "UNSUPPORTED_FORMAT_VERSION");
        } else {
            assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
            let rule = r.body["error"]["details"]["rule"]
                .as_str()
                .expect("rule detail");
            assert!(
                r.body["error"]["message"]
                    .as_str()
                    .expect("message")
                    .starts_with(rule),
                "{:?}",
                r.body
            );
        }
    }
    // Nothing was registered.
    let r = h.get(&indexes("acme", "lake", &["analytics"]), ACME).await;
    assert_eq!(r.body["items"], json!([]));
    // Every valid fixture registers.
    for (i, file) in [
        "valid/metadata.json",
        "valid/lvq4/metadata.json",
        "valid/lvq8/metadata.json",
        "valid/composite-key/metadata.json",
        "valid/other-family/metadata.json",
        "valid/max-integers/metadata.json",
    ]
    .iter()
    .enumerate()
    {
        let loc = wh.put(&format!("ok/{i}.json"), &fixture(file));
        let r = register(&h, &["analytics"], &format!("ok-{i}"), &loc).await;
        assert_eq!(r.status, StatusCode::CREATED, "{file}: {:?}", r.body);
    }
}

async fn each_error_code_answers_its_status(h: Harness) {
    let wh = setup(&h).await;
    let base = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    let next = wh.put("m/v2.json", &fixture("valid/metadata-next.json"));
    let mut foreign = fixture_json("valid/metadata-next.json");
    foreign["index-uuid"] = json!("11111111-2222-4333-8444-555555555555");
    let foreign = wh.put(
        "m/foreign.json",
        &serde_json::to_vec(&foreign).expect("encode"),
    );

    // 400 INVALID_ARGUMENT: warehouse syntax, names, unknown fields, source binding.
    let r = h
        .post(
            &ixc("acme"),
            ACME,
            json!({"name": "w", "warehouse": "s3://b/p"}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h
        .post(
            &ixc("acme"),
            ACME,
            json!({"name": "a\u{202e}b", "warehouse": wh.uri}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h
        .post(
            &ixc("acme"),
            ACME,
            json!({"name": "w", "warehouse": wh.uri, "x": 1}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    let r = h
        .post(
            &indexes("acme", "lake", &["analytics"]),
            ACME,
            json!({"name": "d", "metadata_location": base, "source": {"type": "PARQUET", "uri": "not a uri"}}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    // 415 and 400 for a body that is not JSON.
    let r = h
        .call(
            Method::POST,
            &ixc("acme"),
            Some(ACME),
            None,
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // 400 IDEMPOTENCY_KEY_NOT_ALLOWED: rename (and commit, below) are conditional already.
    let r = h
        .call(
            Method::POST,
            &format!("{}/lake/rename", ixc("acme")),
            Some(ACME),
            Some(json!({"source": {"namespace": ["analytics"], "name": "d"},
                        "destination": {"namespace": ["analytics"], "name": "e"}})),
            &[("idempotency-key", "k-2")],
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "IDEMPOTENCY_KEY_NOT_ALLOWED");
    let r = h
        .post(
            &format!("{}?on_conflict=replace", ixc("acme")),
            ACME,
            json!({"name": "k", "warehouse": wh.uri}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");
    // 400 INVALID_INDEX_METADATA: outside the warehouse, missing file.
    for outside in [
        "s3://elsewhere/m/v1.json".to_owned(),
        format!("{}../x/v1.json", wh.uri),
        format!("{}m/", wh.uri),
        format!("{}m/missing.json", wh.uri),
    ] {
        let r = register(&h, &["analytics"], "d", &outside).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
        assert_eq!(
            r.body["error"]["details"]["rule"], "metadata-location",
            "{outside}: {:?}",
            r.body
        );
    }
    // 404 NOT_FOUND / NAMESPACE_NOT_FOUND / INDEX_NOT_FOUND.
    let r = h
        .get(&index("acme", "nope", &["analytics"], "d"), ACME)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "NOT_FOUND");
    let r = register(&h, &["nope"], "d", &base).await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
    let r = h.get(&indexes("acme", "lake", &["nope"]), ACME).await;
    assert_error(&r, StatusCode::NOT_FOUND, "NAMESPACE_NOT_FOUND");
    let r = h
        .get(&index("acme", "lake", &["analytics"], "d"), ACME)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "INDEX_NOT_FOUND");
    let r = commit(&h, &["analytics"], "d", &base, &next).await;
    assert_error(&r, StatusCode::NOT_FOUND, "INDEX_NOT_FOUND");
    // 409 ALREADY_EXISTS, INDEX_UUID_MISMATCH, COMMIT_CONFLICT.
    assert_eq!(
        register(&h, &["analytics"], "d", &base).await.status,
        StatusCode::CREATED
    );
    let r = register(&h, &["analytics"], "d", &next).await;
    assert_error(&r, StatusCode::CONFLICT, "ALREADY_EXISTS");
    let r = commit(&h, &["analytics"], "d", &base, &foreign).await;
    assert_error(&r, StatusCode::CONFLICT, "INDEX_UUID_MISMATCH");
    let r = commit(&h, &["analytics"], "d", &next, &base).await;
    assert_error(&r, StatusCode::CONFLICT, "COMMIT_CONFLICT");
    // Conflict is decided before validation: a stale base with a broken new file is 409.
    let broken = wh.put("m/broken.json", b"{");
    let r = commit(&h, &["analytics"], "d", &next, &broken).await;
    assert_error(&r, StatusCode::CONFLICT, "COMMIT_CONFLICT");
    let r = commit(&h, &["analytics"], "d", &base, &broken).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
    let r = commit(&h, &["analytics"], "d", &base, &base).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
    let r = h
        .call(
            Method::POST,
            &format!("{}/commit", index("acme", "lake", &["analytics"], "d")),
            Some(ACME),
            Some(json!({"source": parquet(), "base": base, "new": next})),
            &[("idempotency-key", "k-3")],
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "IDEMPOTENCY_KEY_NOT_ALLOWED");
    // The refused requests changed nothing; the commit then succeeds and publishes the source.
    let r = h
        .get(&index("acme", "lake", &["analytics"], "d"), ACME)
        .await;
    assert_eq!(r.body["metadata_location"], json!(base));
    let iceberg = json!({"type": "ICEBERG", "catalog": "glue", "namespace": ["crm"], "name": "docs",
                         "table_uuid": "7b1f6c2e-1d4a-4c55-9a1e-3b2c1d0e9f8a", "snapshot_id": 7});
    let r = h
        .post(
            &format!("{}/commit", index("acme", "lake", &["analytics"], "d")),
            ACME,
            json!({"source": iceberg, "base": base, "new": next}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .get(&index("acme", "lake", &["analytics"], "d"), ACME)
        .await;
    assert_eq!(r.body["metadata_location"], json!(next));
    assert_eq!(r.body["source"], iceberg);
    // 409 HAS_DEPENDENTS.
    let r = h.delete(&nsp("acme", "lake", &["analytics"]), ACME).await;
    assert_error(&r, StatusCode::CONFLICT, "HAS_DEPENDENTS");
    // 401 without a token.
    let r = h.call(Method::GET, &ixc("acme"), None, None, &[]).await;
    assert_error(&r, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED");
}

/// Twelve commits race on one base through HTTP: exactly one answers 200, the others 409.
async fn concurrent_commits_on_one_base_exactly_one_wins(h: Harness) {
    let wh = setup(&h).await;
    let base = wh.put("race/v1.json", &fixture("valid/metadata.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &base).await.status,
        StatusCode::CREATED
    );
    let h = Arc::new(h);
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let new = wh.put(
                &format!("race/v2-{i}.json"),
                &fixture("valid/metadata-next.json"),
            );
            let (h, base) = (h.clone(), base.clone());
            tokio::spawn(async move {
                let r = commit(&h, &["analytics"], "docs", &base, &new).await;
                (r.status, r.code().to_owned(), new)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        let (status, code, new) = t.await.expect("task");
        match status {
            StatusCode::OK => winners.push(new),
            StatusCode::CONFLICT => assert_eq!(code, "COMMIT_CONFLICT"),
            other => panic!("unexpected {other} {code}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one commit wins");
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_eq!(r.body["metadata_location"], json!(winners[0]));
}

async fn cross_account_access_is_denied(h: Harness) {
    let wh = setup(&h).await;
    h.account("beta").await;
    let loc = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &loc).await.status,
        StatusCode::CREATED
    );
    let body = json!({"name": "docs2", "metadata_location": loc, "source": parquet()});
    let calls: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, ixc("acme"), None),
        (
            Method::POST,
            ixc("acme"),
            Some(json!({"name": "x", "warehouse": wh.uri})),
        ),
        (Method::GET, format!("{}/lake", ixc("acme")), None),
        (
            Method::GET,
            format!("{}/lake/namespaces", ixc("acme")),
            None,
        ),
        (Method::DELETE, nsp("acme", "lake", &["analytics"]), None),
        (Method::GET, indexes("acme", "lake", &["analytics"]), None),
        (
            Method::POST,
            indexes("acme", "lake", &["analytics"]),
            Some(body),
        ),
        (
            Method::GET,
            index("acme", "lake", &["analytics"], "docs"),
            None,
        ),
        (
            Method::DELETE,
            index("acme", "lake", &["analytics"], "docs"),
            None,
        ),
        (
            Method::POST,
            format!("{}/commit", index("acme", "lake", &["analytics"], "docs")),
            Some(json!({"source": parquet(), "base": loc, "new": loc})),
        ),
        (
            Method::POST,
            format!("{}/lake/rename", ixc("acme")),
            Some(
                json!({"source": {"namespace": ["analytics"], "name": "docs"},
                        "destination": {"namespace": ["analytics"], "name": "x"}}),
            ),
        ),
    ];
    for (method, path, body) in calls {
        let r = h.call(method.clone(), &path, Some(BETA), body, &[]).await;
        assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
        assert!(
            !r.body.to_string().contains("docs\""),
            "{method} {path} leaked {:?}",
            r.body
        );
    }
    // Acme's warehouse (or anything inside it) is not beta's: refused without a write.
    for uri in [wh.uri.clone(), format!("{}m/", wh.uri)] {
        let r = h
            .post(
                &ixc("beta"),
                BETA,
                json!({"name": "lake", "warehouse": uri}),
            )
            .await;
        assert_error(&r, StatusCode::FORBIDDEN, "PERMISSION_DENIED");
    }
    // Beta's own index catalogs are a separate namespace of names.
    let beta_wh = Wh::new();
    let r = h
        .post(
            &ixc("beta"),
            BETA,
            json!({"name": "lake", "warehouse": beta_wh.uri}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = h.get(&ixc("beta"), BETA).await;
    assert_eq!(r.body["items"].as_array().expect("items").len(), 1);
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

/// Every mutation asserts the account guards in its own transaction: with the deletion fence
/// present the write is refused (`409 DELETING`) and nothing is written; for an account that
/// does not exist it is `404`.
async fn mutations_assert_the_account_fence(h: Harness) {
    let wh = setup(&h).await;
    let loc = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    let next = wh.put("m/v2.json", &fixture("valid/metadata-next.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &loc).await.status,
        StatusCode::CREATED
    );
    let flotilla_metastore::Key { pk, sk } = flotilla_domain::keys::account_fence("acme");
    let fence = Key::new(pk, sk);
    h.state
        .store
        .transact(Transaction::new().with(Op::put(fence.clone(), b"{\"started_ms\":1}".to_vec())))
        .await
        .expect("install fence");
    let before = items(h.state.store.as_ref(), "IXC#acme#lake", "")
        .await
        .len();
    let r = create_catalog(&h, "acme", "other", &wh).await;
    assert_error(&r, StatusCode::CONFLICT, "DELETING");
    let r = h
        .post(
            &format!("{}/lake/namespaces", ixc("acme")),
            ACME,
            json!({"path": ["n2"]}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "DELETING");
    assert_error(
        &register(&h, &["analytics"], "docs2", &loc).await,
        StatusCode::CONFLICT,
        "DELETING",
    );
    assert_error(
        &commit(&h, &["analytics"], "docs", &loc, &next).await,
        StatusCode::CONFLICT,
        "DELETING",
    );
    let r = h
        .post(
            &format!("{}/lake/rename", ixc("acme")),
            ACME,
            json!({"source": {"namespace": ["analytics"], "name": "docs"},
                   "destination": {"namespace": ["analytics"], "name": "x"}}),
        )
        .await;
    assert_error(&r, StatusCode::CONFLICT, "DELETING");
    let r = h
        .delete(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_error(&r, StatusCode::CONFLICT, "DELETING");
    assert_eq!(
        items(h.state.store.as_ref(), "IXC#acme#lake", "")
            .await
            .len(),
        before,
        "nothing written"
    );
    assert!(
        h.state
            .store
            .get(&Key::new("ACCT#acme", "IXC#other"), Consistency::Strong)
            .await
            .expect("get")
            .is_none()
    );
    // Without an account at all: 404 (on a warehouse no account holds).
    let unclaimed = Wh::new();
    let r = h
        .post(
            &ixc("ghost"),
            OPERATOR,
            json!({"name": "lake", "warehouse": unclaimed.uri}),
        )
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "NOT_FOUND");
}

async fn account_delete_removes_index_catalogs(h: Harness) {
    let wh = setup(&h).await;
    let base = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    let next = wh.put("m/v2.json", &fixture("valid/metadata-next.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &base).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        commit(&h, &["analytics"], "docs", &base, &next)
            .await
            .status,
        StatusCode::OK
    );
    create_ns(&h, "acme", "lake", &["analytics", "eu"]).await;
    assert_eq!(
        create_catalog(&h, "acme", "second", &wh).await.status,
        StatusCode::CREATED
    );
    let store = h.state.store.as_ref();
    assert!(
        !items(store, "IXC#acme#lake", "UNREACH#").await.is_empty(),
        "commit recorded the lost base"
    );
    assert_eq!(items(store, "IXWH", &wh.uri).await.len(), 2);

    let r = h.delete("/v1/accounts/acme", OPERATOR).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    assert!(
        items(store, "IXC#acme#lake", "").await.is_empty(),
        "catalog partition removed"
    );
    assert!(items(store, "IXC#acme#second", "").await.is_empty());
    assert!(
        items(store, "ACCT#acme", "").await.is_empty(),
        "account partition removed"
    );
    assert!(
        items(store, "IXWH", &wh.uri).await.is_empty(),
        "warehouse registrations removed"
    );
    // Files are the customer's: never deleted.
    assert!(wh.exists("m/v1.json") && wh.exists("m/v2.json"));

    // A new account under the same id starts empty.
    h.account("acme").await;
    let r = h.get(&ixc("acme"), ACME).await;
    assert_eq!(r.body["items"], json!([]));
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "NOT_FOUND");
    assert_eq!(
        create_catalog(&h, "acme", "lake", &wh).await.status,
        StatusCode::CREATED
    );
}

/// A warehouse store that always fails: storage failures are `503 UNAVAILABLE` whose body
/// carries only an `error_id` (the detail goes to the log).
struct BrokenStores;

impl WarehouseStores for BrokenStores {
    fn open(&self, _warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>, IndexCatalogError> {
        Err(IndexCatalogError::Unavailable {
            message: "secret-detail: bucket unreachable".into(),
        })
    }
}

async fn storage_failures_answer_503_with_an_error_id_only(mut h: Harness) {
    let wh = setup(&h).await;
    let loc = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    h.router = flotilla_core::router(h.state.clone().with_index_stores(Arc::new(BrokenStores)));
    let r = register(&h, &["analytics"], "docs", &loc).await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE");
    let details = r.body["error"]["details"].as_object().expect("details");
    assert_eq!(details.keys().collect::<Vec<_>>(), ["error_id"]);
    assert!(
        !r.body.to_string().contains("secret-detail"),
        "{:?}",
        r.body
    );
    assert!(r.headers.get("retry-after").is_some());
    // Nothing was published.
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "INDEX_NOT_FOUND");
}

/// Loss of reachability is stamped with the application clock, so garbage collection (the
/// operator's `flotilla index gc`) follows it: the replaced base is kept within the retention
/// and proposed after it; the current file never is.
async fn gc_follows_the_application_clock(h: Harness) {
    let wh = setup(&h).await;
    let base = wh.put("g/v1.json", &fixture("valid/metadata.json"));
    let next = wh.put("g/v2.json", &fixture("valid/metadata-next.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &base).await.status,
        StatusCode::CREATED
    );
    let clock = h.clock.clone().expect("manual clock");
    assert_eq!(
        commit(&h, &["analytics"], "docs", &base, &next)
            .await
            .status,
        StatusCode::OK
    );
    let service = flotilla_core::service::index_catalogs::service(&h.state);
    let week = 7 * 24 * 3600 * 1000;
    let now = clock.now_ms();
    let plan = gc::plan(&service, "acme", "lake", week, now + week - 1)
        .await
        .expect("plan");
    assert!(
        plan.delete.iter().all(|c| c.location != base),
        "base kept within the retention"
    );
    let plan = gc::plan(&service, "acme", "lake", week, now + week)
        .await
        .expect("plan");
    let planned: Vec<&str> = plan.delete.iter().map(|c| c.location.as_str()).collect();
    assert!(planned.contains(&base.as_str()), "{planned:?}");
    assert!(!planned.contains(&next.as_str()));
    let report = gc::apply(&service, "acme", "lake", &plan)
        .await
        .expect("apply");
    assert!(report.deleted.contains(&base));
    assert!(!wh.exists("g/v1.json") && wh.exists("g/v2.json"));
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_eq!(r.body["metadata_location"], json!(next));
}

/// Every index catalog change writes one event in the account's log (docs/events.md), in
/// the change's own transaction: create, namespace create and drop, register, commit,
/// rename and drop; a refused commit writes none.
async fn index_changes_write_events_in_the_account_log(h: Harness) {
    let wh = setup(&h).await;
    let base = wh.put("e/v1.json", &fixture("valid/metadata.json"));
    let next = wh.put("e/v2.json", &fixture("valid/metadata-next.json"));
    assert_eq!(
        register(&h, &["analytics"], "docs", &base).await.status,
        StatusCode::CREATED
    );
    let r = commit(&h, &["analytics"], "docs", &base, &next).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = commit(&h, &["analytics"], "docs", &base, &next).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "a stale base: {:?}", r.body);
    let r = h
        .post(
            &format!("{}/lake/rename", ixc("acme")),
            ACME,
            json!({"source": {"namespace": ["analytics"], "name": "docs"},
                "destination": {"namespace": ["analytics"], "name": "docs2"}}),
        )
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = h
        .delete(&index("acme", "lake", &["analytics"], "docs2"), ACME)
        .await;
    assert!(r.status.is_success(), "{:?}", r.body);
    create_ns(&h, "acme", "lake", &["tmp"]).await;
    let r = h.delete(&nsp("acme", "lake", &["tmp"]), ACME).await;
    assert!(r.status.is_success(), "{:?}", r.body);
    let r = h.get("/v1/accounts/acme/events?page_size=100", ACME).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let items = r.body["items"].as_array().unwrap();
    let types: Vec<&str> = items
        .iter()
        .map(|e| e["operation"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "x-flotilla-index-catalog-created",
            "x-flotilla-index-namespace-created",
            "x-flotilla-index-registered",
            "x-flotilla-index-committed",
            "x-flotilla-index-renamed",
            "x-flotilla-index-dropped",
            "x-flotilla-index-namespace-created",
            "x-flotilla-index-namespace-dropped",
        ],
        "{items:?}"
    );
    let committed = &items[3]["operation"];
    assert_eq!(
        committed["resource"],
        json!({"type": "index-catalog", "name": "lake"})
    );
    assert_eq!(committed["namespace"], json!(["analytics"]));
    assert_eq!(committed["name"], "docs");
    assert_eq!(committed["metadata_location"], json!(next));
    assert_eq!(
        items[4]["operation"]["destination"],
        json!({"namespace": ["analytics"], "name": "docs2"})
    );
    let r = h
        .get(
            "/v1/accounts/acme/events?object_types=index&page_size=100",
            ACME,
        )
        .await;
    assert_eq!(r.body["items"].as_array().unwrap().len(), 4, "{:?}", r.body);
}

/// Creates a bucket in moto with one unsigned `PUT /{bucket}` (moto accepts it; the core
/// crate has no HTTP client among its test dependencies).
async fn create_moto_bucket(endpoint: &str, bucket: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut conn = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to moto");
    let request = format!(
        "PUT /{bucket} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.expect("read");
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "create bucket {bucket}: {answer}"
    );
}

/// The production path for `s3://` warehouses: `DefaultWarehouseStores` with the emulator
/// endpoint override (what `FLOTILLA_S3_ENDPOINT` configures in the hosts), through HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_warehouse_through_http() {
    use flotilla_parqdb::store::DefaultWarehouseStores;
    let endpoint = flotilla_testkit::moto::endpoint();
    let bucket = flotilla_testkit::moto::unique_name("ixc");
    create_moto_bucket(&endpoint, &bucket).await;
    let (store, dir) = redb_store();
    let mut h = Harness::with_store(store, Some(dir), true);
    let stores = Arc::new(DefaultWarehouseStores::new().with_s3_endpoint(endpoint));
    h.state = h.state.clone().with_index_stores(stores.clone());
    h.router = flotilla_core::router(h.state.clone());
    h.account("acme").await;
    let warehouse = format!("s3://{bucket}/wh/");
    let objects = stores
        .open(&Warehouse::parse(&warehouse).expect("warehouse"))
        .expect("open");
    for (rel, file) in [
        ("m/v1.json", "valid/metadata.json"),
        ("m/v2.json", "valid/metadata-next.json"),
    ] {
        let path = object_store::path::Path::parse(rel).expect("path");
        objects
            .put(&path, fixture(file).into())
            .await
            .expect("upload");
    }
    let (base, next) = (
        format!("{warehouse}m/v1.json"),
        format!("{warehouse}m/v2.json"),
    );
    let r = h
        .post(
            &ixc("acme"),
            ACME,
            json!({"name": "lake", "warehouse": warehouse}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    create_ns(&h, "acme", "lake", &["analytics"]).await;
    let r = register(&h, &["analytics"], "docs", &base).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = register(
        &h,
        &["analytics"],
        "missing",
        &format!("{warehouse}m/none.json"),
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_INDEX_METADATA");
    let r = commit(&h, &["analytics"], "docs", &base, &next).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let r = h
        .get(&index("acme", "lake", &["analytics"], "docs"), ACME)
        .await;
    assert_eq!(r.body["metadata_location"], json!(next));
    let clock = h.clock.clone().expect("manual clock");
    let service = flotilla_core::service::index_catalogs::service(&h.state);
    let week = 7 * 24 * 3600 * 1000;
    // The objects were written just now (real time), the app clock may be elsewhere: judge at
    // a week past the later of the two.
    let now = clock.now_ms().max(real_now_ms()) + week;
    let plan = gc::plan(&service, "acme", "lake", week, now)
        .await
        .expect("plan");
    let planned: Vec<&str> = plan.delete.iter().map(|c| c.location.as_str()).collect();
    assert_eq!(
        planned,
        [base.as_str()],
        "only the replaced base is collected"
    );
}

fn real_now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(now.as_millis()).expect("millis fit")
}

async fn post_with_key(h: &Harness, path: &str, body: Value, key: &str) -> Resp {
    h.call(
        Method::POST,
        path,
        Some(ACME),
        Some(body),
        &[("idempotency-key", key)],
    )
    .await
}

/// Creates carrying an `Idempotency-Key` (index catalog, namespace, register): a replay
/// answers the first response without a second effect, also when eight replays race; the
/// key with another request (or on another route) is `409 IDEMPOTENCY_KEY_REUSED`.
async fn idempotent_creates_replay_and_detect_reuse(h: Harness) {
    let wh = setup(&h).await;
    let catalog = json!({"name": "vectors", "warehouse": wh.uri});
    let first = post_with_key(&h, &ixc("acme"), catalog.clone(), "ik-catalog").await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    h.clock.as_ref().expect("manual clock").advance_ms(5_000);
    let again = post_with_key(&h, &ixc("acme"), catalog.clone(), "ik-catalog").await;
    assert_eq!(again.status, StatusCode::CREATED, "{:?}", again.body);
    assert_eq!(
        again.body, first.body,
        "the replay answers the recorded response"
    );
    let fresh = h.get(&format!("{}/vectors", ixc("acme")), ACME).await;
    assert_eq!(
        fresh.body, first.body,
        "the recorded response is what was created"
    );
    let r = post_with_key(
        &h,
        &ixc("acme"),
        json!({"name": "other", "warehouse": wh.uri}),
        "ik-catalog",
    )
    .await;
    assert_error(&r, StatusCode::CONFLICT, "IDEMPOTENCY_KEY_REUSED");
    assert_error(
        &create_catalog(&h, "acme", "vectors", &wh).await,
        StatusCode::CONFLICT,
        "ALREADY_EXISTS",
    );
    let r = h
        .call(
            Method::POST,
            &format!("{}?on_conflict=replace", ixc("acme")),
            Some(ACME),
            Some(catalog),
            &[("idempotency-key", "ik-replace")],
        )
        .await;
    // Replace mode does not exist for index catalogs (with or without a key).
    assert_error(&r, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT");

    let ns_url = format!("{}/lake/namespaces", ixc("acme"));
    let first = post_with_key(&h, &ns_url, json!({"path": ["analytics", "eu"]}), "ik-ns").await;
    assert_eq!(first.status, StatusCode::CREATED, "{:?}", first.body);
    let again = post_with_key(&h, &ns_url, json!({"path": ["analytics", "eu"]}), "ik-ns").await;
    assert_eq!(
        (again.status, &again.body),
        (StatusCode::CREATED, &first.body)
    );

    // Eight identical registers with one key race: one effect, eight identical answers.
    let loc = wh.put("m/v1.json", &fixture("valid/metadata.json"));
    let body = json!({"name": "docs", "metadata_location": loc, "source": parquet()});
    let h = Arc::new(h);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (h, body) = (h.clone(), body.clone());
            tokio::spawn(async move {
                let r = post_with_key(
                    &h,
                    &indexes("acme", "lake", &["analytics", "eu"]),
                    body,
                    "ik-register",
                )
                .await;
                (r.status, r.body)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task"));
    }
    for (status, body) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "{body:?}");
        assert_eq!(body, &answers[0].1);
    }
    assert_eq!(answers[0].1["metadata_location"], json!(loc));
    let r = h
        .get(&indexes("acme", "lake", &["analytics", "eu"]), ACME)
        .await;
    assert_eq!(r.body["items"].as_array().expect("items").len(), 1);
    // The namespace counted one index: after one drop it is empty and can go.
    let r = h
        .delete(&index("acme", "lake", &["analytics", "eu"], "docs"), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = h
        .delete(&nsp("acme", "lake", &["analytics", "eu"]), ACME)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{:?}", r.body);
    // The register key on another route (or namespace) is a different request.
    let r = post_with_key(
        &h,
        &indexes("acme", "lake", &["analytics"]),
        body.clone(),
        "ik-register",
    )
    .await;
    assert_error(&r, StatusCode::CONFLICT, "IDEMPOTENCY_KEY_REUSED");
    let r = post_with_key(&h, &indexes("acme", "lake", &["analytics"]), body, "ik-ns").await;
    assert_error(&r, StatusCode::CONFLICT, "IDEMPOTENCY_KEY_REUSED");
    let r = h.get(&indexes("acme", "lake", &["analytics"]), ACME).await;
    assert_eq!(r.body["items"], json!([]), "no effect from refused keys");
}
