//! An overlay reconciliation environment: the real router and services over redb (wrapped by
//! the fault injector and the counting decorator), a local credential store, and an Iceberg
//! REST fixture upstream reached through the real catalog-access adapter.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use axum::http::StatusCode;
use flotilla_catalog_access::spi::{
    CatalogCapabilities, CatalogClient, CatalogProtocol, LoadTableOutcome, Page,
    Result as CaResult, TableIdent, UpstreamNamespace, VendedCredentials, ViewMetadata,
};
use flotilla_core::Config;
use flotilla_core::reconcile::{
    AdapterConnector, Connector, ReconcileError, ReconcileSummary, RunOptions, reconcile,
};
use flotilla_domain::keys;
use flotilla_domain::model::{ClaimRecord, IntegrationRecord, NamespaceRecord, RelationRecord};
use flotilla_metastore::fault::FaultInjectingMetastore;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, Key, Metastore};
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use serde_json::{Value, json};

use super::{ACME, Creds, Harness};

pub const UPSTREAM_TOKEN: &str = "tok-upstream-fixture";

pub type Store = CountingMetastore<FaultInjectingMetastore<flotilla_metastore::SharedStore>>;

/// Which metastore backend an environment runs on.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Redb,
    Dynamo,
    /// DynamoDB on the single-threaded moto (same-key races).
    DynamoSerial,
}

pub struct Env {
    pub h: Harness,
    pub store: Arc<Store>,
    pub fx: IcebergFixture,
    pub creds: Creds,
    pub catalog: String,
    pub integration: String,
    pub overlay: String,
    _dir: tempfile::TempDir,
}

pub fn ovl_path(id: &str) -> String {
    format!("/v1/accounts/acme/overlays/{id}")
}

/// The fixture answers only bearer-authenticated requests with [`UPSTREAM_TOKEN`].
pub async fn fixture() -> IcebergFixture {
    let fx = IcebergFixture::start().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM_TOKEN]);
    fx
}

/// Namespaces `sales`, `sales.eu`, `hr`; tables `sales.orders`, `sales.eu.orders`,
/// `hr.people`; view `sales.eu_orders`.
pub async fn sample_fixture() -> IcebergFixture {
    let fx = fixture().await;
    fx.add_namespace(&["sales"]);
    fx.add_namespace(&["sales", "eu"]);
    fx.add_namespace(&["hr"]);
    fx.add_table(&["sales"], "orders");
    fx.add_table(&["sales", "eu"], "orders");
    fx.add_table(&["hr"], "people");
    fx.add_view(
        &["sales"],
        "eu_orders",
        "SELECT * FROM sales.eu.orders",
        &["sales"],
    );
    fx
}

impl Env {
    /// Account `acme`, catalog `analytics`, an integration on `fx`, and an overlay with the
    /// given include paths.
    pub async fn new(fx: IcebergFixture, include: Value) -> Self {
        Self::on(Kind::Redb, fx, include).await
    }

    /// The same environment on another metastore backend (DynamoDB needs moto).
    pub async fn on(kind: Kind, fx: IcebergFixture, include: Value) -> Self {
        let config = Config {
            allow_insecure_upstreams: true,
            ..Config::default()
        };
        Self::with(kind, fx, include, config, false).await
    }

    /// An environment with its own configuration, optionally on a manual clock
    /// (`h.clock`).
    pub async fn with(
        kind: Kind,
        fx: IcebergFixture,
        include: Value,
        config: Config,
        manual_clock: bool,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend: flotilla_metastore::DynMetastore = match kind {
            Kind::Redb => {
                Arc::new(RedbMetastore::open(dir.path().join("meta.redb")).expect("open redb"))
            }
            Kind::Dynamo => super::dynamo_store().await,
            Kind::DynamoSerial => super::dynamo_serial_store().await,
        };
        let store = Arc::new(CountingMetastore::new(FaultInjectingMetastore::new(
            flotilla_metastore::SharedStore(backend),
        )));
        let creds = Creds::new();
        let h = Harness::with_store(store.clone(), None, manual_clock)
            .with_credentials(creds.dyn_store())
            .with_config(config);
        h.account("acme").await;
        let catalog = h.catalog("acme", ACME, "analytics").await;
        let integration = create_integration(&h, &fx.uri(), "upstream").await;
        let overlay = create_overlay(&h, "crm-import", &integration, &catalog, include).await;
        Self {
            h,
            store,
            fx,
            creds,
            catalog,
            integration,
            overlay,
            _dir: dir,
        }
    }

    /// The overlay's `last_reconcile` as `GET` answers it.
    pub async fn last_run(&self) -> Value {
        let r = self.h.get(&ovl_path(&self.overlay), ACME).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        r.body["last_reconcile"].clone()
    }

    /// Every namespace, relation and claim of the target catalog, for before/after equality.
    pub async fn catalog_items(&self) -> Vec<(String, Vec<u8>)> {
        super::items(self.dyn_store(), &keys::catalog_pk(&self.catalog), "")
            .await
            .into_iter()
            .filter(|i| {
                i.key.sk.starts_with(keys::RELATION_PREFIX)
                    || i.key.sk.starts_with(keys::NAMESPACE_PREFIX)
                    || i.key.sk.starts_with(keys::CLAIM_PREFIX)
            })
            .map(|i| (i.key.sk.clone(), i.body.clone()))
            .collect()
    }

    pub fn faults(&self) -> &FaultInjectingMetastore<flotilla_metastore::SharedStore> {
        self.store.inner()
    }

    pub fn dyn_store(&self) -> &dyn Metastore {
        self.store.as_ref()
    }

    pub async fn run(&self) -> Result<ReconcileSummary, ReconcileError> {
        self.run_overlay(&self.overlay).await
    }

    pub async fn run_overlay(&self, overlay: &str) -> Result<ReconcileSummary, ReconcileError> {
        reconcile(
            &self.h.state,
            &AdapterConnector,
            "acme",
            overlay,
            &RunOptions::default(),
        )
        .await
    }

    pub async fn run_with(
        &self,
        connector: &dyn Connector,
    ) -> Result<ReconcileSummary, ReconcileError> {
        reconcile(
            &self.h.state,
            connector,
            "acme",
            &self.overlay,
            &RunOptions::default(),
        )
        .await
    }

    pub async fn scan<T: serde::de::DeserializeOwned>(&self, prefix: &str) -> Vec<T> {
        super::items(self.dyn_store(), &keys::catalog_pk(&self.catalog), prefix)
            .await
            .iter()
            .map(|i| i.json().expect("decode"))
            .collect()
    }

    pub async fn relations(&self) -> Vec<RelationRecord> {
        self.scan(keys::RELATION_PREFIX).await
    }

    pub async fn rel(&self, ns: &[&str], name: &str) -> Option<RelationRecord> {
        self.relations()
            .await
            .into_iter()
            .find(|r| r.namespace.segments() == ns && r.name == name)
    }

    pub async fn namespaces(&self) -> Vec<NamespaceRecord> {
        self.scan(keys::NAMESPACE_PREFIX).await
    }

    pub async fn claims(&self) -> Vec<ClaimRecord> {
        self.scan(keys::CLAIM_PREFIX).await
    }

    pub async fn ns_paths(&self) -> Vec<Vec<String>> {
        let mut v: Vec<Vec<String>> = self
            .namespaces()
            .await
            .into_iter()
            .map(|n| n.path.segments().to_vec())
            .collect();
        v.sort();
        v
    }

    pub async fn claim_paths(&self, overlay: &str) -> Vec<Vec<String>> {
        let mut v: Vec<Vec<String>> = self
            .claims()
            .await
            .into_iter()
            .filter(|c| c.overlay_id == overlay)
            .map(|c| c.path.segments().to_vec())
            .collect();
        v.sort();
        v
    }

    /// `namespace.name` of every relation, sorted.
    pub async fn rel_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .relations()
            .await
            .iter()
            .map(|r| format!("{}.{}", r.namespace.segments().join("."), r.name))
            .collect();
        v.sort();
        v
    }

    pub async fn dirgen(&self) -> Option<Vec<u8>> {
        let flotilla_metastore::Key { pk, sk } = keys::directory_generation(&self.catalog);
        self.store
            .get(&Key::new(pk, sk), Consistency::Strong)
            .await
            .expect("get")
            .map(|i| i.body)
    }

    /// Invariants that hold after every completed run, crash or not: no identity published
    /// twice, every relation and claim sits in an existing namespace, every namespace this
    /// overlay created is still claimed or still in use, no claim without its namespace.
    pub async fn assert_consistent(&self) {
        let rels = self.relations().await;
        let nss = self.ns_paths().await;
        let mut seen: HashMap<(String, String), String> = HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for r in &rels {
            assert!(
                ids.insert(r.id.clone()),
                "relation id {} appears twice",
                r.id
            );
            assert!(
                nss.contains(&r.namespace.segments().to_vec()),
                "relation {} has no namespace",
                r.name
            );
            if let Some(m) = &r.managed_by {
                let prev = seen.insert(
                    (m.overlay_id.clone(), m.external_id.clone()),
                    r.name.clone(),
                );
                assert!(
                    prev.is_none(),
                    "external identity {} published twice",
                    m.external_id
                );
            }
        }
        for c in self.claims().await {
            assert!(
                nss.contains(&c.path.segments().to_vec()),
                "orphan claim on {:?}",
                c.path
            );
        }
        let claimed: Vec<Vec<String>> = self
            .claims()
            .await
            .iter()
            .map(|c| c.path.segments().to_vec())
            .collect();
        for n in self.namespaces().await {
            if n.created_by_overlay {
                let p = n.path.segments().to_vec();
                let in_use = claimed.contains(&p)
                    || nss.iter().any(|o| o.len() > p.len() && o.starts_with(&p))
                    || rels.iter().any(|r| r.namespace.segments() == p.as_slice());
                assert!(
                    in_use,
                    "overlay-created namespace {p:?} left unclaimed and empty"
                );
            }
        }
    }
}

pub async fn create_integration(h: &Harness, uri: &str, name: &str) -> String {
    let r = h
        .post(
            "/v1/accounts/acme/integrations",
            ACME,
            json!({
                "display_name": name,
                "type": "ICEBERG_REST",
                "uri": uri,
                "authentication": {"type": "BEARER"},
                "credentials": {"token": UPSTREAM_TOKEN},
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().expect("id").to_owned()
}

pub async fn create_overlay(
    h: &Harness,
    name: &str,
    integration: &str,
    catalog: &str,
    include: Value,
) -> String {
    let r = h
        .post(
            "/v1/accounts/acme/overlays",
            ACME,
            json!({"display_name": name, "integration_id": integration, "catalog_id": catalog, "include_namespaces": include}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    r.body["id"].as_str().expect("id").to_owned()
}

/// How a [`Twisted`] client misbehaves.
#[derive(Clone, Debug, Default)]
pub struct Twist {
    /// Advertise no stable ids.
    pub no_stable_ids: bool,
    /// Tables (by name) whose loads all report this one stable id.
    pub shared_id: BTreeMap<String, String>,
    /// Tables (by name) whose loads answer for another object.
    pub answers_for_other: Vec<String>,
}

/// A catalog client decorator that misbehaves as its [`Twist`] says.
pub struct Twisted {
    pub inner: Box<dyn CatalogClient>,
    pub twist: Twist,
}

#[async_trait]
impl CatalogClient for Twisted {
    fn protocol(&self) -> CatalogProtocol {
        self.inner.protocol()
    }
    async fn capabilities(&self) -> CaResult<CatalogCapabilities> {
        let mut c = self.inner.capabilities().await?;
        if self.twist.no_stable_ids {
            c.stable_ids = false;
        }
        Ok(c)
    }
    async fn check_connection(&self) -> CaResult<()> {
        self.inner.check_connection().await
    }
    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<UpstreamNamespace>> {
        self.inner.list_namespaces(parent, t, n).await
    }
    async fn list_tables(
        &self,
        ns: &UpstreamNamespace,
        t: Option<&str>,
        n: Option<u32>,
    ) -> CaResult<Page<TableIdent>> {
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
        let mut out = self.inner.load_table(ns, name, inm).await?;
        if let LoadTableOutcome::Loaded { metadata, .. } = &mut out {
            if let Some(id) = self.twist.shared_id.get(name) {
                metadata.stable_id = Some(id.clone());
            }
            if self.twist.answers_for_other.iter().any(|n| n == name) {
                metadata.identifier = TableIdent::new(ns.clone(), format!("{name}_other"));
            }
        }
        Ok(out)
    }
    async fn load_view(&self, ns: &UpstreamNamespace, name: &str) -> CaResult<ViewMetadata> {
        self.inner.load_view(ns, name).await
    }
    async fn load_namespace_properties(
        &self,
        ns: &UpstreamNamespace,
    ) -> CaResult<BTreeMap<String, String>> {
        self.inner.load_namespace_properties(ns).await
    }
    async fn vend_storage_credentials(
        &self,
        ns: &UpstreamNamespace,
        name: &str,
    ) -> CaResult<VendedCredentials> {
        self.inner.vend_storage_credentials(ns, name).await
    }
}

pub struct TwistConnector(pub Twist);

#[async_trait]
impl Connector for TwistConnector {
    async fn connect(
        &self,
        state: &flotilla_core::AppState,
        integration: &IntegrationRecord,
    ) -> Result<Box<dyn CatalogClient>, ReconcileError> {
        let inner = AdapterConnector.connect(state, integration).await?;
        Ok(Box::new(Twisted {
            inner,
            twist: self.0.clone(),
        }))
    }
}
