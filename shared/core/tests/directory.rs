//! Directory generations, the query replica and catalog-finalize.
//!
//! The race cases interleave real DDL (through the services) with a replica's refresh by a
//! store decorator that runs the DDL at a chosen point of the refresh: between two pages of
//! the scan, before the scan's first page, or right after the first generation read.

mod support;
use support::both_backends;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::http::StatusCode;
use flotilla_core::AppState;
use flotilla_core::directory::{self, DirectoryCache, RefreshError, RefreshOutcome, ReplicaMode};
use flotilla_core::service::OnConflict;
use flotilla_core::service::relations::{self, CreateTable, PatchRelation};
use flotilla_domain::keys;
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::{
    Consistency, DynMetastore, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use support::*;

both_backends!(
    ddl_between_scan_pages_never_publishes_a_mixed_directory,
    ddl_after_the_first_generation_read_is_not_missed,
    finalize_requires_both_acknowledgements_and_is_idempotent,
    directory_route_serves_entries_and_health,
);

// ---- fixtures -----------------------------------------------------------------------------

const ACCOUNT: &str = "acme";

fn path(p: &[&str]) -> NamespacePath {
    NamespacePath::new(p.iter().map(|s| s.to_string()).collect()).expect("namespace")
}

/// An account, a catalog, namespace `sales` and the given tables (through the API).
async fn catalog_with_tables(h: &Harness, tables: &[&str]) -> String {
    h.account(ACCOUNT).await;
    let cat = h.catalog(ACCOUNT, ACME, "main").await;
    h.namespace(ACCOUNT, ACME, &cat, &["sales"]).await;
    for t in tables {
        create_table(&h.state, &cat, t).await;
    }
    cat
}

async fn create_table(state: &AppState, cat: &str, name: &str) {
    let req: CreateTable = serde_json::from_value(table_body(name)).expect("create body");
    relations::create_table(
        state,
        ACCOUNT,
        cat,
        &path(&["sales"]),
        req,
        OnConflict::Error,
        None,
    )
    .await
    .expect("create table");
}

async fn rename_table(state: &AppState, cat: &str, from: &str, to: &str) {
    let req = PatchRelation {
        name: Some(to.into()),
        ..PatchRelation::default()
    };
    relations::patch(
        state,
        ACCOUNT,
        cat,
        &path(&["sales"]),
        from,
        RelationKind::Table,
        req,
        None,
    )
    .await
    .expect("rename table");
}

fn names(cache_entries: &[directory::DirectoryEntry]) -> BTreeSet<String> {
    cache_entries.iter().map(|e| e.name.clone()).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

async fn served_names(cache: &DirectoryCache, cat: &str) -> BTreeSet<String> {
    let view = cache.view(cat, 0).await.expect("a published snapshot");
    names(&view.snapshot.entries)
}

/// The raw generation item body of a catalog (None when absent).
async fn generation(store: &dyn Metastore, cat: &str) -> Option<Vec<u8>> {
    let k = Key::new(
        keys::directory_generation(cat).pk,
        keys::directory_generation(cat).sk,
    );
    store
        .get(&k, Consistency::Strong)
        .await
        .expect("read generation")
        .map(|i| i.body)
}

/// The generation's opaque value as text (what a leak would show).
async fn generation_value(store: &dyn Metastore, cat: &str) -> String {
    let body = generation(store, cat).await.expect("a generation");
    let v: Value = serde_json::from_slice(&body).expect("generation json");
    v["value"].as_str().expect("value").to_owned()
}

async fn finalize(state: &AppState) {
    directory::finalize(state, true, true)
        .await
        .expect("finalize");
}

// ---- the racing decorator -------------------------------------------------------------------

type Ddl = Arc<dyn Fn(usize) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where in a refresh the decorator runs its DDL.
#[derive(Clone, Copy, PartialEq, Eq)]
enum When {
    /// Before the first page of a relation scan is read.
    FirstScanPage,
    /// Before the second page of a relation scan is read.
    SecondScanPage,
    /// Right after a generation point read returned.
    AfterGenerationRead,
}

/// Runs `ddl` (on the undecorated store) at `when`, at most `budget` times, and counts scans.
struct RacingStore {
    inner: DynMetastore,
    when: When,
    ddl: Ddl,
    budget: AtomicUsize,
    fired: AtomicUsize,
    scans: AtomicUsize,
}

impl RacingStore {
    fn new(inner: DynMetastore, when: When, budget: usize, ddl: Ddl) -> Self {
        Self {
            inner,
            when,
            ddl,
            budget: AtomicUsize::new(budget),
            fired: AtomicUsize::new(0),
            scans: AtomicUsize::new(0),
        }
    }

    async fn fire(&self) {
        let took = self
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
            .is_ok();
        if took {
            let n = self.fired.fetch_add(1, Ordering::SeqCst);
            (self.ddl)(n).await;
        }
    }

    fn disarm(&self) {
        self.budget.store(0, Ordering::SeqCst);
    }
}

#[async_trait]
impl Metastore for RacingStore {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        let out = self.inner.get(key, consistency).await;
        if self.when == When::AfterGenerationRead && key.sk == "DIRGEN" {
            self.fire().await;
        }
        out
    }
    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, consistency).await
    }
    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        if query.sk_prefix == keys::RELATION_PREFIX {
            let first = query.start_after.is_none();
            if first {
                self.scans.fetch_add(1, Ordering::SeqCst);
            }
            match self.when {
                When::FirstScanPage if first => self.fire().await,
                When::SecondScanPage if !first => self.fire().await,
                _ => {}
            }
        }
        self.inner.query(query).await
    }
    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        self.inner.count(pk, sk_prefix, consistency).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.inner.transact(tx).await
    }
}

// ---- races ----------------------------------------------------------------------------------

/// Renaming the last table to a name that sorts first, between two pages of a scan, makes a
/// naive scan miss the table under both names; the replica discards that candidate.
async fn ddl_between_scan_pages_never_publishes_a_mixed_directory(h: Harness) {
    let before = ["t0", "t1", "t2", "t3", "t4", "t5"];
    let cat = catalog_with_tables(&h, &before).await;
    finalize(&h.state).await;
    let after = ["a0", "t0", "t1", "t2", "t3", "t4"];

    let rename: Ddl = {
        let (state, cat) = (h.state.clone(), cat.clone());
        Arc::new(move |_| {
            let (state, cat) = (state.clone(), cat.clone());
            Box::pin(async move { rename_table(&state, &cat, "t5", "a0").await })
        })
    };

    // Control: the interleaving really produces a mixed scan when nothing validates it.
    let control = RacingStore::new(
        Arc::clone(&h.state.store),
        When::SecondScanPage,
        1,
        rename.clone(),
    );
    let q = Query::new(
        keys::catalog_pk(&cat),
        keys::RELATION_PREFIX,
        Consistency::Strong,
    )
    .limit(2);
    let naive: BTreeSet<String> = flotilla_metastore::query_all(&control, q)
        .await
        .expect("naive scan")
        .iter()
        .filter_map(|i| keys::parse_relation_sk(&i.key.sk).map(|(_, n)| n))
        .collect();
    assert_ne!(
        naive,
        set(&before),
        "control scan should not see the old state"
    );
    assert_ne!(
        naive,
        set(&after),
        "control scan should not see the new state"
    );
    rename_table(&h.state, &cat, "a0", "t5").await; // back to `before`

    let racing = RacingStore::new(Arc::clone(&h.state.store), When::SecondScanPage, 1, rename);
    let cache = DirectoryCache::new().with_page_size(2);
    let outcome = cache
        .refresh(&racing, h.state.clock.as_ref(), &cat)
        .await
        .expect("refresh");
    assert_eq!(outcome, RefreshOutcome::Reloaded);
    assert_eq!(
        racing.fired.load(Ordering::SeqCst),
        1,
        "the DDL ran during the scan"
    );
    assert_eq!(
        racing.scans.load(Ordering::SeqCst),
        2,
        "the mixed candidate was discarded and rescanned"
    );
    assert_eq!(served_names(&cache, &cat).await, set(&after));
    // And the published basis is the post-DDL generation: nothing more to load.
    let outcome = cache
        .refresh(&racing, h.state.clock.as_ref(), &cat)
        .await
        .expect("refresh");
    assert_eq!(outcome, RefreshOutcome::Unchanged);
}

/// DDL between the first generation read and the scan: the scan sees the new table but the
/// generation it started from is old, so the candidate is rescanned under the new one.
async fn ddl_after_the_first_generation_read_is_not_missed(h: Harness) {
    let cat = catalog_with_tables(&h, &["t0"]).await;
    finalize(&h.state).await;
    let create: Ddl = {
        let (state, cat) = (h.state.clone(), cat.clone());
        Arc::new(move |_| {
            let (state, cat) = (state.clone(), cat.clone());
            Box::pin(async move { create_table(&state, &cat, "raced").await })
        })
    };
    let racing = RacingStore::new(
        Arc::clone(&h.state.store),
        When::AfterGenerationRead,
        1,
        create,
    );
    let cache = DirectoryCache::new();
    let clock = h.state.clock.as_ref();
    assert_eq!(
        cache.refresh(&racing, clock, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    assert_eq!(racing.scans.load(Ordering::SeqCst), 2);
    assert_eq!(served_names(&cache, &cat).await, set(&["raced", "t0"]));
    assert_eq!(
        cache.refresh(&racing, clock, &cat).await.expect("refresh"),
        RefreshOutcome::Unchanged
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_moving_generations_fail_and_serve_last_good_with_growing_age() {
    let (store, dir) = redb_store();
    let h = Harness::with_store(store, Some(dir), true);
    let clock = h.clock.clone().expect("manual clock");
    let cat = catalog_with_tables(&h, &["t0", "t1"]).await;
    finalize(&h.state).await;

    let storm: Ddl = {
        let (state, cat) = (h.state.clone(), cat.clone());
        Arc::new(move |n| {
            let (state, cat) = (state.clone(), cat.clone());
            Box::pin(async move { create_table(&state, &cat, &format!("storm{n}")).await })
        })
    };
    let racing = RacingStore::new(Arc::clone(&h.state.store), When::FirstScanPage, 0, storm);
    let cache = DirectoryCache::new();
    let c = h.state.clock.as_ref();
    assert_eq!(
        cache.refresh(&racing, c, &cat).await.expect("warm"),
        RefreshOutcome::Reloaded
    );
    let last_good = set(&["t0", "t1"]);

    // A DDL moves the generation; then every scan races another DDL.
    create_table(&h.state, &cat, "t2").await;
    racing.budget.store(usize::MAX, Ordering::SeqCst);
    clock.advance_ms(1_000);
    let err = cache
        .refresh(&racing, c, &cat)
        .await
        .expect_err("a moving generation exhausts the retries");
    assert!(
        matches!(err, RefreshError::GenerationMoving { attempts: 4 }),
        "{err}"
    );
    assert_eq!(
        racing.scans.load(Ordering::SeqCst),
        1 + 4,
        "a first scan and exactly three retries before giving up"
    );
    let v1 = cache
        .view(&cat, clock_now(&h))
        .await
        .expect("last-good still served");
    assert_eq!(
        names(&v1.snapshot.entries),
        last_good,
        "never a candidate, only the last-good snapshot"
    );
    assert!(v1.health.stale);
    assert_eq!(v1.health.last_error, Some("GENERATION_MOVING"));
    assert_eq!(v1.health.consecutive_failures, 1);
    assert_eq!(v1.health.age_ms, 1_000);

    // `read` answers the same last-good snapshot, older, when the refresh fails again.
    clock.advance_ms(4_000);
    let v2 = cache
        .read(&racing, c, &cat)
        .await
        .expect("read serves last-good");
    assert_eq!(names(&v2.snapshot.entries), last_good);
    assert!(
        Arc::ptr_eq(&v1.snapshot, &v2.snapshot),
        "the snapshot is immutable and reused"
    );
    assert!(v2.health.stale && v2.health.age_ms == 5_000 && v2.health.consecutive_failures == 2);
    assert!(
        cache
            .render_prometheus()
            .lines()
            .any(|l| l == "flotilla_directory_refresh_total{outcome=\"failed\"} 2")
    );
    assert!(
        cache
            .render_prometheus()
            .lines()
            .any(|l| l == "flotilla_directory_stale_catalogs 1")
    );

    // Once the storm stops, the next refresh reloads everything and is healthy again.
    racing.disarm();
    let fired = racing.fired.load(Ordering::SeqCst);
    let v3 = cache.read(&racing, c, &cat).await.expect("recovers");
    assert!(!v3.health.stale && v3.health.age_ms == 0 && v3.health.last_error.is_none());
    let mut expected = set(&["t0", "t1", "t2"]);
    expected.extend((0..fired).map(|n| format!("storm{n}")));
    assert_eq!(names(&v3.snapshot.entries), expected);
    assert!(
        cache
            .render_prometheus()
            .lines()
            .any(|l| l == "flotilla_directory_stale_catalogs 0")
    );
}

fn clock_now(h: &Harness) -> i64 {
    h.state.clock.now_ms()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_replica_that_cannot_load_answers_the_error() {
    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &["t0"]).await;
    finalize(&h.state).await;
    let storm: Ddl = {
        let (state, cat) = (h.state.clone(), cat.clone());
        Arc::new(move |n| {
            let (state, cat) = (state.clone(), cat.clone());
            Box::pin(async move { create_table(&state, &cat, &format!("storm{n}")).await })
        })
    };
    let racing = RacingStore::new(
        Arc::clone(&h.state.store),
        When::FirstScanPage,
        usize::MAX,
        storm,
    );
    let cache = DirectoryCache::new();
    let err = cache
        .read(&racing, h.state.clock.as_ref(), &cat)
        .await
        .expect_err("nothing to serve");
    assert!(matches!(err, RefreshError::GenerationMoving { .. }));
    assert!(cache.view(&cat, 0).await.is_none());
}

// ---- legacy writers and finalize --------------------------------------------------------------

/// A writer from before the rollout: puts a relation item without replacing the generation.
async fn legacy_write(store: &dyn Metastore, cat: &str, name: &str) {
    let body = json!({
        "id": format!("legacy-{name}"), "catalog_id": cat, "kind": "TABLE", "namespace": ["sales"],
        "name": name, "schema": schema(), "format": "ICEBERG", "properties": {}, "revision": 1,
        "create_time": "2026-01-01T00:00:00Z", "update_time": "2026-01-01T00:00:00Z",
    });
    let flotilla_metastore::Key { pk, sk } = keys::relation(cat, &path(&["sales"]), name);
    let op = Op::create(Key::new(pk, sk), serde_json::to_vec(&body).expect("json"));
    store
        .transact(Transaction::new().with(op))
        .await
        .expect("legacy write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_writer_is_visible_only_before_finalize() {
    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &["t1"]).await;
    let (store, c) = (h.state.store.as_ref(), h.state.clock.as_ref());
    let cache = DirectoryCache::new();

    // Before authority every refresh scans, so legacy writes appear.
    assert_eq!(
        cache.refresh(store, c, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    legacy_write(store, &cat, "legacy_before_1").await;
    assert_eq!(
        cache.refresh(store, c, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    assert_eq!(
        served_names(&cache, &cat).await,
        set(&["legacy_before_1", "t1"])
    );
    assert_eq!(
        cache.view(&cat, 0).await.map(|v| v.health.mode),
        Some(ReplicaMode::LegacyScan)
    );

    // A legacy write after the last legacy-mode refresh but before finalize is still seen:
    // the first authoritative refresh scans instead of trusting a legacy-mode snapshot.
    legacy_write(store, &cat, "legacy_before_2").await;
    finalize(&h.state).await;
    assert_eq!(
        cache.refresh(store, c, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    assert_eq!(
        served_names(&cache, &cat).await,
        set(&["legacy_before_1", "legacy_before_2", "t1"])
    );
    assert_eq!(
        cache.view(&cat, 0).await.map(|v| v.health.mode),
        Some(ReplicaMode::Authoritative)
    );

    // After finalize a legacy write is invisible to a warmed replica (the directory contract:
    // an old writer after finalization violates the acknowledged deployment boundary)...
    legacy_write(store, &cat, "legacy_after").await;
    assert_eq!(
        cache.refresh(store, c, &cat).await.expect("refresh"),
        RefreshOutcome::Unchanged
    );
    assert!(!served_names(&cache, &cat).await.contains("legacy_after"));
    // ...but a cold replica's full scan sees it,
    let cold = DirectoryCache::new();
    cold.refresh(store, c, &cat).await.expect("cold refresh");
    assert!(served_names(&cold, &cat).await.contains("legacy_after"));
    // ...and so does the warmed one as soon as a real DDL moves the generation.
    create_table(&h.state, &cat, "t2").await;
    assert_eq!(
        cache.refresh(store, c, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    assert_eq!(
        served_names(&cache, &cat).await,
        set(&[
            "legacy_after",
            "legacy_before_1",
            "legacy_before_2",
            "t1",
            "t2"
        ])
    );
}

async fn finalize_requires_both_acknowledgements_and_is_idempotent(h: Harness) {
    let url = "/v1/admin/catalog-finalize";
    let marker = keys::directory_authority();
    let r = h
        .post(
            url,
            ACME,
            json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "operator only");
    for (body, missing) in [
        (
            json!({}),
            json!(["acknowledge_writer_rollout", "acknowledge_quiescent_writes"]),
        ),
        (
            json!({"acknowledge_writer_rollout": true}),
            json!(["acknowledge_quiescent_writes"]),
        ),
        (
            json!({"acknowledge_writer_rollout": false, "acknowledge_quiescent_writes": true}),
            json!(["acknowledge_writer_rollout"]),
        ),
    ] {
        let r = h.post(url, OPERATOR, body).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
        assert_eq!(r.code(), "FAILED_PRECONDITION");
        assert_eq!(
            r.body["error"]["details"]["missing_acknowledgements"],
            missing
        );
        assert!(
            h.state
                .store
                .get(&marker, Consistency::Strong)
                .await
                .expect("read")
                .is_none(),
            "refusal writes nothing"
        );
    }
    let r = h
        .post(
            url,
            OPERATOR,
            json!({"acknowledge_writer_rollout": true, "bogus": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    let both = json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true});
    let first = h.post(url, OPERATOR, both.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.body["authority"], "ENABLED");
    assert!(first.body["enabled_at"].is_string());
    let stored = h
        .state
        .store
        .get(&marker, Consistency::Strong)
        .await
        .expect("read")
        .expect("marker written");
    let second = h.post(url, OPERATOR, both).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.body, first.body, "idempotent: the same answer");
    let again = h
        .state
        .store
        .get(&marker, Consistency::Strong)
        .await
        .expect("read")
        .expect("marker kept");
    assert_eq!(
        again.version, stored.version,
        "a second finalize writes nothing"
    );
    // A refused call after enabling does not revert anything either.
    let r = h.post(url, OPERATOR, json!({})).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert!(
        h.state
            .store
            .get(&marker, Consistency::Strong)
            .await
            .expect("read")
            .is_some()
    );
}

// ---- which writes signal ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signalling_operations_move_the_generation_and_others_do_not() {
    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &[]).await;
    h.namespace(ACCOUNT, ACME, &cat, &["other"]).await;
    let store = h.state.store.as_ref();
    let base = format!("/v1/accounts/{ACCOUNT}/catalogs/{cat}/namespaces");
    let sales = format!("{base}/sales");
    assert!(
        generation(store, &cat).await.is_none(),
        "no directory change yet"
    );

    let mut last = generation(store, &cat).await;
    // (description, request) pairs that must move the generation.
    let view = json!({"name": "v", "schema": schema(), "definitions": [{"dialect": "spark", "sql": "select 1"}]});
    let mut schema2 = schema();
    schema2["fields"]
        .as_array_mut()
        .expect("fields")
        .push(json!({"id": 3, "name": "extra", "required": false, "type": "int"}));
    let signalling: Vec<(&str, axum::http::Method, String, Option<Value>)> = vec![
        (
            "create table",
            axum::http::Method::POST,
            format!("{sales}/tables"),
            Some(table_body("t")),
        ),
        (
            "create view",
            axum::http::Method::POST,
            format!("{sales}/views"),
            Some(view),
        ),
        (
            "rename",
            axum::http::Method::PATCH,
            format!("{sales}/tables/t"),
            Some(json!({"name": "t2"})),
        ),
        (
            "move",
            axum::http::Method::PATCH,
            format!("{sales}/tables/t2"),
            Some(json!({"namespace": ["other"]})),
        ),
        (
            "schema change",
            axum::http::Method::PATCH,
            format!("{base}/other/tables/t2"),
            Some(json!({"schema": schema2})),
        ),
        (
            "format change",
            axum::http::Method::PATCH,
            format!("{base}/other/tables/t2"),
            Some(json!({"format": "DELTA"})),
        ),
        (
            "view definitions",
            axum::http::Method::PATCH,
            format!("{sales}/views/v"),
            Some(json!({"definitions": [{"dialect": "spark", "sql": "select 2"}]})),
        ),
        (
            "delete view",
            axum::http::Method::DELETE,
            format!("{sales}/views/v"),
            None,
        ),
    ];
    for (what, method, url, body) in signalling {
        let r = h.call(method, &url, Some(ACME), body, &[]).await;
        assert!(r.status.is_success(), "{what}: {:?}", r.body);
        let now = generation(store, &cat).await;
        assert!(
            now.is_some() && now != last,
            "{what} must move the generation"
        );
        last = now;
    }

    let t2 = format!("{base}/other/tables/t2");
    let quiet: Vec<(&str, Value)> = vec![
        ("properties", json!({"properties": {"owner": "data-eng"}})),
        (
            "metadata location",
            json!({"metadata_location": "s3://bucket/t2/metadata/00002.json"}),
        ),
        ("location", json!({"location": "s3://bucket/t2"})),
        (
            "same schema",
            json!({"schema": h.get(&t2, ACME).await.body["schema"].clone()}),
        ),
    ];
    for (what, body) in quiet {
        let r = h.patch(&t2, ACME, body, None).await;
        assert_eq!(r.status, StatusCode::OK, "{what}: {:?}", r.body);
        assert_eq!(
            generation(store, &cat).await,
            last,
            "{what} must not move the generation"
        );
    }

    // Refused writes change nothing: name collision, stale If-Match, bad input.
    let r = h
        .post(&format!("{base}/other/tables"), ACME, table_body("t2"))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let r = h
        .patch(&t2, ACME, json!({"name": "t3"}), Some("\"stale-etag\""))
        .await;
    assert_eq!(r.status, StatusCode::PRECONDITION_FAILED);
    let r = h
        .patch(&t2, ACME, json!({"schema": {"type": "nope"}}), None)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        generation(store, &cat).await,
        last,
        "refused writes must not move the generation"
    );

    let r = h.delete(&t2, ACME).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_ne!(
        generation(store, &cat).await,
        last,
        "delete must move the generation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_condition_changes_neither_the_relation_nor_the_generation() {
    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &["t"]).await;
    let store = h.state.store.as_ref();
    let gen_before = generation(store, &cat).await;
    let flotilla_metastore::Key { pk, sk } = keys::relation(&cat, &path(&["sales"]), "t");
    let slot = Key::new(pk, sk);
    let rel_before = store
        .get(&slot, Consistency::Strong)
        .await
        .expect("read")
        .expect("table");
    // The writer's transaction shape: the conditional mutation plus the bump.
    let tx = Transaction::new()
        .with(Op::create(slot.clone(), b"{}".to_vec()))
        .with(directory::directory_bump(&cat).expect("bump"));
    let err = store.transact(tx).await.expect_err("the slot is taken");
    assert!(matches!(err, MetastoreError::ConditionFailed { .. }));
    assert_eq!(generation(store, &cat).await, gen_before);
    assert_eq!(
        store.get(&slot, Consistency::Strong).await.expect("read"),
        Some(rel_before)
    );
}

// ---- cost ------------------------------------------------------------------------------------

/// Records every read with its consistency.
struct Recording {
    inner: DynMetastore,
    log: Mutex<Vec<String>>,
}

#[async_trait]
impl Metastore for Recording {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        self.log
            .lock()
            .expect("log")
            .push(format!("get {} {consistency:?}", key.sk));
        self.inner.get(key, consistency).await
    }
    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        self.log
            .lock()
            .expect("log")
            .push(format!("batch_get {consistency:?}"));
        self.inner.batch_get(keys, consistency).await
    }
    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        self.log
            .lock()
            .expect("log")
            .push(format!("query {} {:?}", query.sk_prefix, query.consistency));
        self.inner.query(query).await
    }
    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        self.log
            .lock()
            .expect("log")
            .push(format!("count {consistency:?}"));
        self.inner.count(pk, sk_prefix, consistency).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.log.lock().expect("log").push("transact".into());
        self.inner.transact(tx).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_authoritative_refresh_is_exactly_one_strong_point_read() {
    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &["a", "b", "c"]).await;
    let recording = Recording {
        inner: Arc::clone(&h.state.store),
        log: Mutex::new(Vec::new()),
    };
    let counting = CountingMetastore::new(recording);
    let cache = DirectoryCache::new();
    let c = h.state.clock.as_ref();

    // Legacy mode: marker read, generation read, scan, generation read, on every refresh.
    for _ in 0..2 {
        let before = counting.snapshot();
        assert_eq!(
            cache.refresh(&counting, c, &cat).await.expect("refresh"),
            RefreshOutcome::Reloaded
        );
        let d = counting.snapshot();
        assert_eq!((d.get - before.get, d.query - before.query), (3, 1));
        assert_eq!(
            d.items_read - before.items_read,
            3 + 2,
            "three tables and two generation reads"
        );
    }
    finalize(&h.state).await;
    cache
        .refresh(&counting, c, &cat)
        .await
        .expect("first authoritative refresh");
    for _ in 0..5 {
        counting.inner().log.lock().expect("log").clear();
        let before = counting.snapshot();
        assert_eq!(
            cache.refresh(&counting, c, &cat).await.expect("refresh"),
            RefreshOutcome::Unchanged
        );
        let d = counting.snapshot();
        assert_eq!(
            d.requests() - before.requests(),
            1,
            "one request per steady refresh"
        );
        assert_eq!(d.get - before.get, 1);
        assert_eq!(d.items_read - before.items_read, 1);
        assert_eq!(
            *counting.inner().log.lock().expect("log"),
            vec!["get DIRGEN Strong".to_owned()]
        );
    }
    // One DDL: the point read, one scan and the closing generation read.
    create_table(&h.state, &cat, "d").await;
    let before = counting.snapshot();
    assert_eq!(
        cache.refresh(&counting, c, &cat).await.expect("refresh"),
        RefreshOutcome::Reloaded
    );
    let d = counting.snapshot();
    assert_eq!(
        (
            d.get - before.get,
            d.query - before.query,
            d.items_read - before.items_read
        ),
        (2, 1, 4 + 2)
    );
}

// ---- the route and what never leaks -------------------------------------------------------------

async fn directory_route_serves_entries_and_health(h: Harness) {
    let cat = catalog_with_tables(&h, &["orders"]).await;
    h.account("beta").await;
    let url = format!("/v1/accounts/{ACCOUNT}/catalogs/{cat}/directory");
    let r = h.get(&url, ACME).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["catalog_id"], cat.as_str());
    let entries = r.body["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["name"], "orders");
    assert_eq!(entries[0]["namespace"], json!(["sales"]));
    assert_eq!(entries[0]["kind"], "TABLE");
    assert_eq!(entries[0]["format"], "ICEBERG");
    assert_eq!(entries[0]["schema"], schema());
    assert!(entries[0]["id"].is_string());
    assert_eq!(r.body["health"]["mode"], "LEGACY_SCAN");
    assert_eq!(r.body["health"]["stale"], false);
    assert!(r.body["health"]["age_ms"].is_i64());

    h.post(
        "/v1/admin/catalog-finalize",
        OPERATOR,
        json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true}),
    )
    .await;
    let r = h.get(&url, ACME).await;
    assert_eq!(r.body["health"]["mode"], "AUTHORITATIVE");

    // Authorization and existence.
    assert_eq!(h.get(&url, BETA).await.status, StatusCode::FORBIDDEN);
    let r = h
        .get(&format!("/v1/accounts/beta/catalogs/{cat}/directory"), BETA)
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "another account's catalog id is not found"
    );
    let r = h
        .get(
            &format!("/v1/accounts/{ACCOUNT}/catalogs/nosuchcatalog/directory"),
            ACME,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.code(), "NOT_FOUND");
    let r = h.get(&url, "not-a-token").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Metrics count refreshes by outcome.
    let r = h.get("/v1/admin/metrics", OPERATOR).await;
    let text = r.body.as_str().expect("text");
    assert!(
        text.lines()
            .any(|l| l == "flotilla_directory_refresh_total{outcome=\"reloaded\"} 2"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "flotilla_directory_refresh_total{outcome=\"failed\"} 0"),
        "{text}"
    );
    let r = h.get(&url, ACME).await;
    assert_eq!(r.status, StatusCode::OK);
    let text = h
        .get("/v1/admin/metrics", OPERATOR)
        .await
        .body
        .as_str()
        .expect("text")
        .to_owned();
    assert!(
        text.lines()
            .any(|l| l == "flotilla_directory_refresh_total{outcome=\"unchanged\"} 1"),
        "{text}"
    );
}

/// A `MakeWriter` that appends everything to one buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Every refresh path runs under a TRACE-level subscriber, through the API and the cache,
/// including a failing one (whose error is logged and answered); no generation value seen
/// along the way appears in the logs, the responses or the metrics text.
#[tokio::test(flavor = "current_thread")]
async fn generation_never_appears_in_logs_responses_or_metrics() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let h = Harness::redb();
    let cat = catalog_with_tables(&h, &["t0"]).await;
    let store = h.state.store.as_ref();
    let url = format!("/v1/accounts/{ACCOUNT}/catalogs/{cat}/directory");
    let mut seen = vec![generation_value(store, &cat).await];
    let mut bodies = Vec::new();
    bodies.push(h.get(&url, ACME).await.body.to_string());
    bodies.push(
        h.post(
            "/v1/admin/catalog-finalize",
            OPERATOR,
            json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true}),
        )
        .await
        .body
        .to_string(),
    );
    for i in 0..3 {
        let r = h
            .post(
                &format!("/v1/accounts/{ACCOUNT}/catalogs/{cat}/namespaces/sales/tables"),
                ACME,
                table_body(&format!("x{i}")),
            )
            .await;
        bodies.push(r.body.to_string());
        seen.push(generation_value(store, &cat).await);
        bodies.push(h.get(&url, ACME).await.body.to_string());
        bodies.push(h.get(&url, ACME).await.body.to_string());
    }
    // A failing refresh: its warning and error are logged, its health answered.
    let storm: Ddl = {
        let (state, cat) = (h.state.clone(), cat.clone());
        Arc::new(move |n| {
            let (state, cat) = (state.clone(), cat.clone());
            Box::pin(async move { create_table(&state, &cat, &format!("storm{n}")).await })
        })
    };
    create_table(&h.state, &cat, "moved").await;
    seen.push(generation_value(store, &cat).await);
    let racing = RacingStore::new(
        Arc::clone(&h.state.store),
        When::FirstScanPage,
        directory::MAX_SCAN_ATTEMPTS,
        storm,
    );
    let err = h
        .state
        .directory
        .refresh(&racing, h.state.clock.as_ref(), &cat)
        .await
        .expect_err("storm");
    seen.push(generation_value(store, &cat).await);
    bodies.push(format!("{err} {err:?}"));
    bodies.push(h.get(&url, ACME).await.body.to_string());
    let view = h.state.directory.view(&cat, 0).await.expect("view");
    bodies.push(format!("{view:?} {:?}", h.state.directory));
    let metrics = h
        .get("/v1/admin/metrics", OPERATOR)
        .await
        .body
        .as_str()
        .expect("text")
        .to_owned();

    let logs = String::from_utf8(logs.0.lock().expect("buffer").clone()).expect("utf8 logs");
    assert!(
        logs.contains("directory refresh failed"),
        "the failure was logged: {logs}"
    );
    assert!(
        logs.contains("directory authority enabled"),
        "finalize was logged"
    );
    assert!(seen.len() >= 6);
    for g in &seen {
        assert_eq!(g.len(), 32, "a generation value");
        assert!(
            !logs.contains(g.as_str()),
            "a generation leaked into the logs"
        );
        assert!(
            !metrics.contains(g.as_str()),
            "a generation leaked into the metrics"
        );
        for b in &bodies {
            assert!(!b.contains(g.as_str()), "a generation leaked into {b}");
        }
    }
}
