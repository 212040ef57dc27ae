//! Run outcomes and bounds of overlay reconciliation (`docs/reconciliation.md`, "Failure
//! semantics" and "Bounds"): listings keep direct children only, materialized namespaces
//! carry the upstream's properties, a hostile upstream's endless listing and an object too
//! large to store fail the run cleanly and permanently, a run over its time budget fails
//! before publishing, every run is counted by outcome, and a configuration change, delete or
//! delete attempt in the middle of a run stops its publications at every step.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_catalog_access::spi::{
    CatalogCapabilities, CatalogClient, CatalogProtocol, LoadTableOutcome, Page,
    Result as CaResult, TableIdent, UpstreamNamespace, VendedCredentials, ViewMetadata,
};
use flotilla_core::clock::ManualClock;
use flotilla_core::reconcile::{
    AdapterConnector, Connector, Limits, ReconcileError, RunOptions, reconcile,
};
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_domain::model::IntegrationRecord;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, Page as MPage, Query, Transaction,
};
use overlay_env::*;
use serde_json::{Value, json};
use support::*;
use tower::ServiceExt;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn config(limits: Limits) -> Config {
    Config {
        allow_insecure_upstreams: true,
        reconcile: limits,
        ..Config::default()
    }
}

// ---- listings keep direct children -------------------------------------------------------

#[tokio::test]
async fn listings_answering_every_depth_keep_direct_children_and_count_the_rest() {
    let fx = sample_fixture().await;
    fx.add_namespace(&["sales", "eu", "tmp"]);
    fx.set_list_all_depths(true);
    let env = Env::new(fx, json!([])).await;
    let s = env.run().await.expect("run");
    assert_eq!(
        env.ns_paths().await,
        vec![
            names(&["hr"]),
            names(&["sales"]),
            names(&["sales", "eu"]),
            names(&["sales", "eu", "tmp"])
        ],
        "each namespace once, at its own depth"
    );
    // The root answered sales.eu and sales.eu.tmp, `sales` answered sales.eu.tmp.
    assert_eq!(s.dropped.namespaces, 3, "{s:?}");
    assert_eq!(s.tables.created, 3);
    assert_eq!(env.last_run().await["dropped"]["namespaces"], 3);
    // The read-only listing drops them too and says how many.
    let path = format!(
        "/v1/accounts/acme/integrations/{}/upstream/namespaces",
        env.integration
    );
    let r = env.h.get(&path, ACME).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let paths: Vec<Value> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["path"].clone())
        .collect();
    assert_eq!(paths, vec![json!(["hr"]), json!(["sales"])]);
    assert_eq!(r.body["dropped"], 2, "{:?}", r.body);
    let r = env.h.get(&format!("{path}?parent=sales"), ACME).await;
    assert_eq!(
        r.body["items"],
        json!([{"path": ["sales", "eu"]}]),
        "{:?}",
        r.body
    );
    assert_eq!(r.body["dropped"], 1);
}

/// A client whose table listings also name tables of another namespace.
struct Stray(Box<dyn CatalogClient>);

#[async_trait]
impl CatalogClient for Stray {
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
        p: Option<&UpstreamNamespace>,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<UpstreamNamespace>> {
        self.0.list_namespaces(p, t, n).await
    }
    async fn list_tables(
        &self,
        ns: &UpstreamNamespace,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        let mut page = self.0.list_tables(ns, t, n).await?;
        page.items.push(TableIdent::new(
            UpstreamNamespace::new(["elsewhere"]),
            "intruder",
        ));
        Ok(page)
    }
    async fn list_views(
        &self,
        ns: &UpstreamNamespace,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        self.0.list_views(ns, t, n).await
    }
    async fn load_table(
        &self,
        ns: &UpstreamNamespace,
        name: &str,
        inm: Option<&str>,
    ) -> CaResult<LoadTableOutcome> {
        self.0.load_table(ns, name, inm).await
    }
    async fn load_view(&self, ns: &UpstreamNamespace, name: &str) -> CaResult<ViewMetadata> {
        self.0.load_view(ns, name).await
    }
    async fn load_namespace_properties(
        &self,
        ns: &UpstreamNamespace,
    ) -> CaResult<BTreeMap<String, String>> {
        self.0.load_namespace_properties(ns).await
    }
    async fn vend_storage_credentials(
        &self,
        ns: &UpstreamNamespace,
        name: &str,
    ) -> CaResult<VendedCredentials> {
        self.0.vend_storage_credentials(ns, name).await
    }
}

struct StrayConnector;

#[async_trait]
impl Connector for StrayConnector {
    async fn connect(
        &self,
        state: &AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        Ok(Box::new(Stray(
            AdapterConnector.connect(state, integration).await?,
        )))
    }
}

#[tokio::test]
async fn table_listings_naming_other_namespaces_are_dropped_and_counted() {
    let env = Env::new(sample_fixture().await, json!([])).await;
    let s = env.run_with(&StrayConnector).await.expect("run");
    assert_eq!(
        s.dropped.tables, 3,
        "one stray per selected namespace: {s:?}"
    );
    assert_eq!(s.tables.created, 3);
    assert!(
        !env.rel_names().await.iter().any(|n| n.contains("intruder")),
        "nothing of another namespace is published"
    );
}

// ---- namespace properties ----------------------------------------------------------------

#[tokio::test]
async fn materialized_namespaces_carry_upstream_properties_and_local_ones_keep_theirs() {
    let fx = sample_fixture().await;
    fx.set_namespace_properties(&["hr"], &[("owner", "people-team"), ("comment", "HR data")]);
    fx.set_namespace_properties(&["sales"], &[("owner", "upstream-sales")]);
    let env = Env::new(fx, json!([])).await;
    // `sales` exists locally with its own properties before the first run.
    let r = env
        .h
        .post(
            &format!("/v1/accounts/acme/catalogs/{}/namespaces", env.catalog),
            ACME,
            json!({"path": ["sales"], "properties": {"owner": "local"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    env.run().await.expect("run");
    let props = |path: Vec<String>| {
        let env = &env;
        async move {
            env.namespaces()
                .await
                .into_iter()
                .find(|n| n.path.segments() == path.as_slice())
                .expect("namespace")
                .properties
        }
    };
    assert_eq!(
        props(names(&["hr"])).await,
        BTreeMap::from([
            ("comment".to_owned(), "HR data".to_owned()),
            ("owner".to_owned(), "people-team".to_owned())
        ])
    );
    assert_eq!(
        props(names(&["sales"])).await,
        BTreeMap::from([("owner".to_owned(), "local".to_owned())]),
        "a pre-existing namespace keeps its own properties"
    );
    // An upstream change follows on the next run; a no-change run writes nothing.
    env.fx
        .set_namespace_properties(&["hr"], &[("owner", "hr-platform")]);
    let s = env.run().await.expect("second run");
    assert_eq!(s.namespaces.updated, 1, "{s:?}");
    assert_eq!(
        props(names(&["hr"])).await,
        BTreeMap::from([("owner".to_owned(), "hr-platform".to_owned())])
    );
    let s = env.run().await.expect("third run");
    assert!(!s.wrote_catalog(), "{s:?}");
}

// ---- bounds ------------------------------------------------------------------------------

/// Attack: an upstream answering every namespace page with 1,000 fresh names and a fresh
/// page token. The run stops at the listing bound, publishes nothing, records a permanent
/// cause, and the queue acknowledges it.
#[tokio::test]
async fn an_endless_upstream_listing_fails_the_run_at_its_bound() {
    let fx = sample_fixture().await;
    let env = Env::with(
        Kind::Redb,
        fx,
        json!([]),
        config(Limits {
            listing_items: 20_000,
            ..Limits::default()
        }),
        false,
    )
    .await;
    env.fx.set_endless_namespace_pages(Some(1000));
    env.fx.log().clear();
    let before = env.catalog_items().await;
    let r = env
        .h
        .post(
            &format!("{}/reconcile", ovl_path(&env.overlay)),
            ACME,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "{:?}",
        r.body
    );
    assert_eq!(
        r.body["error"]["details"]["reason"], "UPSTREAM_LIMIT_EXCEEDED",
        "{:?}",
        r.body
    );
    let pages = env
        .fx
        .log()
        .filter(|q| q.path.ends_with("/namespaces"))
        .len();
    assert!(
        (20..=22).contains(&pages),
        "the listing stopped at its bound ({pages} pages)"
    );
    assert_eq!(env.catalog_items().await, before, "nothing published");
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "UPSTREAM_LIMIT_EXCEEDED", "{run}");
    assert_eq!(run["error"]["retryable"], false);
    assert_eq!(run["error"]["stage"], "DISCOVERY");
    assert!(
        run["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("20000")),
        "{run}"
    );
    // The queue records and acknowledges it (the next schedule runs it again).
    let msg = flotilla_core::reconcile::work::ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    };
    let out =
        flotilla_core::reconcile::work::handle_message(&env.h.state, &AdapterConnector, &msg).await;
    assert!(!out.redeliver(), "{out:?}");
    assert_eq!(env.last_run().await["consecutive_failures"], 2);
}

#[tokio::test]
async fn the_run_item_bound_counts_every_listing() {
    let fx = sample_fixture().await;
    for i in 0..20 {
        fx.add_table(&["hr"], &format!("t{i:02}"));
    }
    let env = Env::with(
        Kind::Redb,
        fx,
        json!([]),
        config(Limits {
            run_items: 15,
            ..Limits::default()
        }),
        false,
    )
    .await;
    let err = env.run().await.expect_err("over the run bound");
    assert!(
        matches!(err, ReconcileError::Exceeded(_)) && !err.is_retryable(),
        "{err:?}"
    );
    assert!(env.relations().await.is_empty() && env.namespaces().await.is_empty());
}

/// Attack: an upstream table of 20,000 columns, whose definition is over the metastore's
/// item limit. Preflight names it; the run fails permanently, upstream-caused, not as a
/// request error, and publishes nothing.
#[tokio::test]
async fn an_upstream_object_too_large_to_store_fails_preflight_naming_it() {
    let fx = sample_fixture().await;
    let fields: Vec<Value> = (1..=20_000)
        .map(|i| json!({"id": i, "name": format!("column_{i:05}"), "required": false, "type": "string"}))
        .collect();
    fx.add_table_with_schema(
        &["hr"],
        "wide",
        json!({"type": "struct", "schema-id": 0, "fields": fields}),
    );
    let env = Env::new(fx, json!([])).await;
    let before = env.catalog_items().await;
    let r = env
        .h
        .post(
            &format!("{}/reconcile", ovl_path(&env.overlay)),
            ACME,
            json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "never a 400 about the request: {:?}",
        r.body
    );
    let d = &r.body["error"]["details"];
    assert_eq!(d["reason"], "UPSTREAM_OBJECT_TOO_LARGE", "{:?}", r.body);
    assert_eq!(d["object"], json!(["hr", "wide"]));
    assert_eq!(d["retryable"], false);
    assert_eq!(env.catalog_items().await, before, "nothing published");
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "UPSTREAM_OBJECT_TOO_LARGE", "{run}");
    assert_eq!(run["error"]["stage"], "PREFLIGHT");
    assert_eq!(run["error"]["object"], json!(["hr", "wide"]));
    // Dropping the table upstream lets the next run converge.
    assert!(env.fx.remove_table(&["hr"], "wide"));
    env.run().await.expect("converges");
    assert_eq!(env.relations().await.len(), 4);
}

/// A client that takes (on the manual clock) `step_ms` for every table listing.
struct Slow {
    inner: Box<dyn CatalogClient>,
    clock: ManualClock,
    step_ms: i64,
}

#[async_trait]
impl CatalogClient for Slow {
    fn protocol(&self) -> CatalogProtocol {
        self.inner.protocol()
    }
    async fn capabilities(&self) -> CaResult<CatalogCapabilities> {
        self.inner.capabilities().await
    }
    async fn check_connection(&self) -> CaResult<()> {
        self.inner.check_connection().await
    }
    async fn list_namespaces(
        &self,
        p: Option<&UpstreamNamespace>,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<UpstreamNamespace>> {
        self.inner.list_namespaces(p, t, n).await
    }
    async fn list_tables(
        &self,
        ns: &UpstreamNamespace,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        self.clock.advance_ms(self.step_ms);
        self.inner.list_tables(ns, t, n).await
    }
    async fn list_views(
        &self,
        ns: &UpstreamNamespace,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
        self.inner.list_views(ns, t, n).await
    }
    async fn load_table(
        &self,
        ns: &UpstreamNamespace,
        name: &str,
        inm: Option<&str>,
    ) -> CaResult<LoadTableOutcome> {
        self.inner.load_table(ns, name, inm).await
    }
    async fn load_view(&self, ns: &UpstreamNamespace, name: &str) -> CaResult<ViewMetadata> {
        self.inner.load_view(ns, name).await
    }
    async fn vend_storage_credentials(
        &self,
        ns: &UpstreamNamespace,
        name: &str,
    ) -> CaResult<VendedCredentials> {
        self.inner.vend_storage_credentials(ns, name).await
    }
}

struct SlowConnector(ManualClock, i64);

#[async_trait]
impl Connector for SlowConnector {
    async fn connect(
        &self,
        state: &AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        Ok(Box::new(Slow {
            inner: AdapterConnector.connect(state, integration).await?,
            clock: self.0.clone(),
            step_ms: self.1,
        }))
    }
}

#[tokio::test]
async fn a_run_over_its_time_budget_fails_before_publishing() {
    let fx = sample_fixture().await;
    for i in 0..8 {
        fx.add_namespace(&[&format!("slow{i}")]);
    }
    let env = Env::with(
        Kind::Redb,
        fx,
        json!([]),
        config(Limits {
            run_budget_ms: 60_000,
            ..Limits::default()
        }),
        true,
    )
    .await;
    let clock = env.h.clock.clone().expect("manual clock");
    // 11 selected namespaces at 10 s per table listing: over a 60 s budget.
    let before = env.catalog_items().await;
    let err = env
        .run_with(&SlowConnector(clock.clone(), 10_000))
        .await
        .expect_err("over budget");
    assert!(
        matches!(err, ReconcileError::Exceeded(_)) && !err.is_retryable(),
        "{err:?}"
    );
    assert_eq!(
        env.catalog_items().await,
        before,
        "nothing partial published"
    );
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "DEADLINE_EXCEEDED", "{run}");
    assert_eq!(run["error"]["stage"], "DISCOVERY");
    // Within budget (1 s per listing) the same run completes.
    env.run_with(&SlowConnector(clock, 1_000))
        .await
        .expect("within budget");
    assert_eq!(env.relations().await.len(), 4);
}

// ---- metrics -----------------------------------------------------------------------------

#[tokio::test]
async fn runs_are_counted_by_outcome() {
    use flotilla_core::reconcile::metrics::runs;
    let env = Env::new(sample_fixture().await, json!([])).await;
    let (ok, retry, perm) = (
        runs("succeeded"),
        runs("failed_retryable"),
        runs("failed_permanent"),
    );
    env.run().await.expect("run");
    env.fx
        .add_fault(flotilla_testkit::iceberg_fixture::IcebergFaultRule::always(
            flotilla_testkit::iceberg_fixture::IcebergFault::Status(503),
        ));
    env.run().await.expect_err("upstream down");
    env.fx.clear_faults();
    env.fx.add_table(&["hr"], "both");
    env.fx.add_view(&["hr"], "both", "SELECT 1", &["hr"]);
    env.run().await.expect_err("conflict");
    assert_eq!(runs("succeeded") - ok, 1);
    assert_eq!(runs("failed_retryable") - retry, 1);
    assert_eq!(runs("failed_permanent") - perm, 1);
    let text = flotilla_telemetry::prometheus::render(&[&flotilla_telemetry::Global]);
    assert!(text.contains("flotilla_reconcile_run_outcomes_total{outcome=\"failed_permanent\"}"));
}

// ---- fences at every publication step ----------------------------------------------------

/// A store that runs a hook just before the n-th transaction it sees.
struct HookStore {
    inner: Arc<Store>,
    seen: AtomicUsize,
    at: usize,
    hook: tokio::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

#[async_trait]
impl Metastore for HookStore {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.inner.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, c).await
    }
    async fn query(&self, q: &Query) -> Result<MPage, MetastoreError> {
        self.inner.query(q).await
    }
    async fn count(&self, pk: &str, prefix: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.inner.count(pk, prefix, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.at
            && let Some(hook) = self.hook.lock().await.take()
        {
            hook.await;
        }
        self.inner.transact(tx).await
    }
}

/// What happens in the middle of the run.
#[derive(Clone, Copy, Debug)]
enum Change {
    IntegrationUri,
    IntegrationCredentials,
    IntegrationDelete,
    CatalogDeleteAttempt,
    AccountDelete,
}

async fn send_full(
    router: &axum::Router,
    method: Method,
    path: String,
    token: &str,
    body: Value,
    if_match: Option<&str>,
) -> (u16, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json");
    if let Some(etag) = if_match {
        req = req.header("if-match", etag);
    }
    let body = if body.is_null() {
        Body::empty()
    } else {
        Body::from(body.to_string())
    };
    let resp = router
        .clone()
        .oneshot(req.body(body).expect("request"))
        .await
        .expect("infallible");
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn send(
    router: &axum::Router,
    method: Method,
    path: String,
    token: &str,
    body: Value,
) -> u16 {
    send_full(router, method, path, token, body, None).await.0
}

async fn apply(change: Change, env_router: axum::Router, store: Arc<Store>, ids: (String, String)) {
    let (integration, catalog) = ids;
    let ip = format!("/v1/accounts/acme/integrations/{integration}");
    let status = match change {
        Change::IntegrationUri => {
            let (_, current) =
                send_full(&env_router, Method::GET, ip.clone(), ACME, Value::Null, None).await;
            let etag = current["etag"].as_str().map(str::to_owned);
            send_full(
                &env_router,
                Method::PATCH,
                ip,
                ACME,
                json!({"uri": "http://127.0.0.1:9/other"}),
                etag.as_deref(),
            )
            .await
            .0
        }
        Change::IntegrationCredentials => {
            send(
                &env_router,
                Method::PUT,
                format!("{ip}/authentication"),
                ACME,
                json!({"authentication": {"type": "BEARER"}, "credentials": {"token": "rotated-token-1"}}),
            )
            .await
        }
        Change::IntegrationDelete => {
            send(&env_router, Method::DELETE, format!("{ip}?cascade=true"), ACME, Value::Null).await
        }
        Change::CatalogDeleteAttempt => {
            // A delete proving the catalog empty holds its guard; the run must not publish
            // beneath it.
            let guard = serde_json::to_vec(&json!({
                "installed_ms": i64::MAX / 2,
                "owner": "a-concurrent-delete",
            }))
            .expect("guard");
            let flotilla_metastore::Key { pk, sk } = keys::catalog_guard(&catalog);
            store
                .transact(Transaction::new().with(Op::create(Key::new(pk, sk), guard)))
                .await
                .expect("install guard");
            200
        }
        Change::AccountDelete => {
            send(&env_router, Method::DELETE, "/v1/accounts/acme".into(), OPERATOR, Value::Null).await
        }
    };
    assert!((200..300).contains(&status), "{change:?} answered {status}");
}

/// Runs the first reconciliation with `change` applied just before its `at`-th transaction;
/// answers the run's result, the catalog as the change left it and the catalog afterwards.
async fn run_with_change(
    change: Change,
    at: usize,
) -> (
    Result<(), ReconcileError>,
    Vec<(String, Vec<u8>)>,
    Vec<(String, Vec<u8>)>,
) {
    let env = Env::new(sample_fixture().await, json!([])).await;
    let hooked = Arc::new(HookStore {
        inner: env.store.clone(),
        seen: AtomicUsize::new(0),
        at,
        hook: tokio::sync::Mutex::new(None),
    });
    let snapshot: Arc<tokio::sync::Mutex<Option<Rows>>> = Arc::new(tokio::sync::Mutex::new(None));
    let (router, store, snap) = (env.h.router.clone(), env.store.clone(), snapshot.clone());
    let ids = (env.integration.clone(), env.catalog.clone());
    let pk = keys::catalog_pk(&env.catalog);
    *hooked.hook.lock().await = Some(Box::pin(async move {
        apply(change, router, store.clone(), ids).await;
        let items = support::items(store.as_ref(), &pk, "").await;
        *snap.lock().await = Some(catalog_rows(items));
    }));
    let mut state = env.h.state.clone();
    state.store = hooked.clone();
    let r = reconcile(
        &state,
        &AdapterConnector,
        "acme",
        &env.overlay,
        &RunOptions::default(),
    )
    .await
    .map(|_| ());
    let after =
        catalog_rows(support::items(env.dyn_store(), &keys::catalog_pk(&env.catalog), "").await);
    let before = snapshot
        .lock()
        .await
        .clone()
        .unwrap_or_else(|| panic!("{change:?}: the run ended before transaction {at}"));
    (r, before, after)
}

/// A catalog's namespaces, relations and claims: key and body.
type Rows = Vec<(String, Vec<u8>)>;

fn catalog_rows(items: Vec<Item>) -> Rows {
    items
        .into_iter()
        .filter(|i| {
            i.key.sk.starts_with(keys::RELATION_PREFIX)
                || i.key.sk.starts_with(keys::NAMESPACE_PREFIX)
                || i.key.sk.starts_with(keys::CLAIM_PREFIX)
        })
        .map(|i| (i.key.sk.clone(), i.body.clone()))
        .collect()
}

async fn publication_steps() -> usize {
    let env = Env::new(sample_fixture().await, json!([])).await;
    let start = env.faults().transacts();
    env.run().await.expect("reference run");
    // Every transaction but the last (the status item) publishes.
    env.faults().transacts() - start - 1
}

async fn fenced_at_every_step(change: Change) {
    let steps = publication_steps().await;
    assert!(steps >= 4, "{steps}");
    for at in 1..=steps {
        let (r, before, after) = run_with_change(change, at).await;
        let err = r.expect_err(&format!(
            "{change:?} at step {at}: the run must not succeed"
        ));
        assert!(
            matches!(err, ReconcileError::FenceLost | ReconcileError::Deleting(_)),
            "{change:?} at step {at}: {err:?}"
        );
        assert!(
            before == after,
            "{change:?} at step {at}: the older run published after the change"
        );
    }
}

#[tokio::test]
async fn an_integration_uri_change_mid_run_fences_every_later_publication() {
    fenced_at_every_step(Change::IntegrationUri).await;
}

#[tokio::test]
async fn a_credential_rotation_mid_run_fences_every_later_publication() {
    fenced_at_every_step(Change::IntegrationCredentials).await;
}

#[tokio::test]
async fn an_integration_delete_mid_run_fences_every_later_publication() {
    fenced_at_every_step(Change::IntegrationDelete).await;
}

#[tokio::test]
async fn a_target_catalog_delete_attempt_mid_run_fences_every_later_publication() {
    fenced_at_every_step(Change::CatalogDeleteAttempt).await;
}

#[tokio::test]
async fn an_account_delete_mid_run_fences_every_later_publication() {
    fenced_at_every_step(Change::AccountDelete).await;
}

// ---- retry decisions come from the error kind --------------------------------------------

/// A connector that fails every connection with one service error.
struct FailingConnector(flotilla_core::error::Error);

#[async_trait]
impl Connector for FailingConnector {
    async fn connect(
        &self,
        _state: &AppState,
        _integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        Err(ReconcileError::Api(self.0.clone()))
    }
}

fn current_message(env: &Env) -> flotilla_core::reconcile::work::ReconcileMessage {
    flotilla_core::reconcile::work::ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: 1,
    }
}

/// An `INTERNAL` failure is not retried by the queue: the run is recorded as failed (code
/// `INTERNAL`, not retryable) and the message acknowledged. An `UNAVAILABLE` one is
/// redelivered, and an explicit retryable override on an internal error wins.
#[tokio::test]
async fn the_worker_retries_by_error_kind_internal_is_acknowledged_unavailable_redelivered() {
    use flotilla_core::error::Error;
    use flotilla_core::reconcile::work::{MessageOutcome, handle_message};
    let env = Env::new(sample_fixture().await, json!([])).await;
    let msg = current_message(&env);

    let out = handle_message(
        &env.h.state,
        &FailingConnector(Error::internal("injected bug")),
        &msg,
    )
    .await;
    assert!(
        matches!(
            out,
            MessageOutcome::Failed {
                retryable: false,
                code: "INTERNAL",
                kind: "internal",
                ..
            }
        ),
        "{out:?}"
    );
    assert!(!out.redeliver(), "an internal failure is acknowledged");
    assert_eq!(out.label(), "failed");
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "FAILED", "{run}");
    assert_eq!(run["error"]["code"], "INTERNAL", "{run}");
    assert_eq!(run["error"]["retryable"], false, "{run}");
    assert_eq!(run["error"]["stage"], "CONNECT", "{run}");
    assert_eq!(run["consecutive_failures"], 1);
    assert!(
        !run.to_string().contains("injected bug"),
        "the internal detail stays in the log: {run}"
    );

    let out = handle_message(
        &env.h.state,
        &FailingConnector(Error::unavailable("injected outage")),
        &msg,
    )
    .await;
    assert!(
        matches!(
            out,
            MessageOutcome::Failed {
                retryable: true,
                code: "UNAVAILABLE",
                kind: "metastore",
                ..
            }
        ),
        "{out:?}"
    );
    assert!(out.redeliver(), "an unavailable failure is redelivered");
    assert_eq!(out.label(), "retry");
    let run = env.last_run().await;
    assert_eq!(run["error"]["code"], "UNAVAILABLE", "{run}");
    assert_eq!(run["error"]["retryable"], true, "{run}");
    assert_eq!(run["consecutive_failures"], 2);

    // The error's own override wins over its kind, both ways.
    let out = handle_message(
        &env.h.state,
        &FailingConnector(Error::internal("x").with_retryable(true)),
        &msg,
    )
    .await;
    assert!(out.redeliver(), "{out:?}");
    let out = handle_message(
        &env.h.state,
        &FailingConnector(Error::unavailable("x").with_retryable(false)),
        &msg,
    )
    .await;
    assert!(!out.redeliver(), "{out:?}");
    assert_eq!(env.last_run().await["error"]["retryable"], false);
    assert_eq!(env.catalog_items().await, vec![], "nothing was published");

    // Healthy again: the same message runs.
    let out = handle_message(&env.h.state, &AdapterConnector, &msg).await;
    assert!(matches!(out, MessageOutcome::Reconciled(_)), "{out:?}");
}

/// An upstream that keeps throttling (429 with a `Retry-After` longer than a call waits out)
/// fails the run as `UPSTREAM_UNAVAILABLE`, retryable: the worker reports the message for
/// redelivery and records no permanent failure; the hint reaches the status's cause. Once
/// the upstream stops throttling, the same message runs. (The provider contract suite shows
/// all three providers answer the same `Throttled` error.)
#[tokio::test]
async fn a_throttled_upstream_fails_the_run_retryably_and_the_message_is_redelivered() {
    use flotilla_core::reconcile::work::{MessageOutcome, handle_message};
    use flotilla_testkit::fixture::conditions::{RetryAfter, Throttle};
    let env = Env::new(sample_fixture().await, json!([])).await;
    let msg = current_message(&env);
    env.fx.conditions().throttle(
        Throttle::next(usize::MAX)
            .retry_after(RetryAfter::Seconds(120))
            .on_path("/namespaces"),
    );
    let out = handle_message(&env.h.state, &AdapterConnector, &msg).await;
    assert!(
        matches!(
            out,
            MessageOutcome::Failed {
                retryable: true,
                code: "UPSTREAM_UNAVAILABLE",
                kind: "upstream",
                ..
            }
        ),
        "{out:?}"
    );
    assert!(out.redeliver(), "a throttled run is redelivered");
    assert_eq!(out.label(), "retry");
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "FAILED", "{run}");
    assert_eq!(run["error"]["code"], "UPSTREAM_UNAVAILABLE", "{run}");
    assert_eq!(run["error"]["retryable"], true, "{run}");
    assert!(
        run["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("retry after 120s")),
        "{run}"
    );
    // The 120 s wait was not waited out: one throttled answer, no resend.
    let throttled = env.fx.log().with_status(429);
    assert_eq!(throttled.len(), 1, "{throttled:?}");
    assert_eq!(throttled[0].retry_after.as_deref(), Some("120"));
    assert_eq!(env.catalog_items().await, vec![], "nothing was published");

    env.fx.conditions().clear_throttles();
    let out = handle_message(&env.h.state, &AdapterConnector, &msg).await;
    assert!(matches!(out, MessageOutcome::Reconciled(_)), "{out:?}");
}

/// A corrupt overlay record makes the worker's generation check fail `INTERNAL`: the message
/// is acknowledged, not redelivered until the dead-letter queue.
#[tokio::test]
async fn a_corrupt_overlay_record_is_an_internal_failure_and_acknowledged() {
    use flotilla_core::reconcile::work::{MessageOutcome, handle_message};
    let env = Env::new(sample_fixture().await, json!([])).await;
    env.dyn_store()
        .transact(Transaction::new().with(Op::put(
            keys::overlay("acme", &env.overlay),
            b"{not json".to_vec(),
        )))
        .await
        .expect("corrupt the overlay");
    let out = handle_message(&env.h.state, &AdapterConnector, &current_message(&env)).await;
    assert!(
        matches!(
            out,
            MessageOutcome::Failed {
                retryable: false,
                code: "INTERNAL",
                kind: "internal",
                ..
            }
        ),
        "{out:?}"
    );
    assert!(!out.redeliver());
}
