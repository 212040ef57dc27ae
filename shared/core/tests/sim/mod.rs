//! Deterministic simulation engine for `tests/simulation.rs`.
//!
//! One seed is one run: a fresh in-memory redb metastore behind
//! [`FaultInjectingMetastore`], an in-memory credential store behind
//! [`FaultInjectingCredentialStore`], an Iceberg REST fixture upstream, and the real router,
//! all on one current-thread tokio runtime whose clock is paused. A small PRNG (SplitMix64)
//! seeded from the seed decides every step: which client sends which request, which
//! idempotency key it carries, which transaction or credential-store call fails and how, how
//! the upstream changes, and how concurrent requests interleave. After every step the
//! invariants are checked by scanning the raw store (past the fault injector).
//!
//! Interleavings covered:
//! - *sequential* steps: one request at a time, each with a seeded fault plan and client
//!   retries (the same request and `Idempotency-Key` again after a `503`);
//! - *concurrent* steps: two or three requests from different clients polled together by
//!   `futures::future::join_all` on the single runtime thread. Every metastore call first
//!   yields a seeded number of times, then runs to completion while the thread waits for it
//!   (`futures::executor::block_on`), so the only points where requests interleave are the
//!   metastore calls and retry backoffs, and their order is a function of the seed alone.
//!   Retry jitter is seeded too (`service::seed_retry_jitter`) and the paused clock makes
//!   backoff sleeps instantaneous and ordered by deadline;
//! - *reconcile* steps run alone (their upstream HTTP traffic is real loopback I/O, which
//!   cannot be ordered by the seed); the clock runs in real time while they run. A run that
//!   failed (as its recorded outcome says) before publication left the target catalog's
//!   namespaces, relations and claims byte for byte as they were; one that failed while
//!   publishing retired nothing (no claim, namespace or relation identity of the overlay
//!   went away, except an identity replaced in place at its own path).
//!
//! Server-generated ids (UUIDv7) differ between runs, but nothing the simulation decides
//! depends on their bytes: resources are chosen by position in sorted scans, and v7 ids sort
//! in creation order, which the seed fixes.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request};
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::ManualClock;
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_domain::model::{
    CatalogRecord, IntegrationRecord, NameIndexRecord, NamespaceRecord, OverlayRecord,
    RelationRecord, etag_for,
};
use flotilla_metastore::fault::{Fault, FaultInjectingMetastore};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Page, Query, Transaction,
};
use flotilla_secrets::fault::{
    Fault as CredFault, FaultInjectingCredentialStore, FaultKind, StoreOp,
};
use flotilla_secrets::{CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError};
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

// ---- PRNG ---------------------------------------------------------------------------------

/// SplitMix64: tiny, fast, and good enough to pick operations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u32) -> bool {
        (self.next_u64() % 1000) < u64::from(permille)
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len()))
        }
    }
}

// ---- in-memory credential store -----------------------------------------------------------

/// A credential store in a map: put-if-absent semantics of the real backends, no I/O, no
/// await points (so it never reorders concurrent requests).
#[derive(Default)]
pub struct MemCreds {
    map: Mutex<BTreeMap<(String, String, u64), Vec<u8>>>,
}

impl MemCreds {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String, u64), Vec<u8>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn contains(&self, account: &str, integration: &str, generation: u64) -> bool {
        self.lock()
            .contains_key(&(account.to_owned(), integration.to_owned(), generation))
    }
    pub fn all(&self) -> Vec<(String, String, u64)> {
        self.lock().keys().cloned().collect()
    }
    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.lock().values().cloned().collect()
    }
}

fn rkey(r: &SecretRef) -> (String, String, u64) {
    (
        r.account_id.clone(),
        r.integration_id.clone(),
        r.credential_generation,
    )
}

#[async_trait]
impl CredentialStore for MemCreds {
    async fn put_if_absent(
        &self,
        r: &SecretRef,
        s: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        r.validate()?;
        let mut m = self.lock();
        match m.get(&rkey(r)) {
            Some(existing) => Ok(PutOutcome::AlreadyExists {
                identical: existing.as_slice() == s.expose_bytes(),
            }),
            None => {
                m.insert(rkey(r), s.expose_bytes().to_vec());
                Ok(PutOutcome::Created)
            }
        }
    }
    async fn get(&self, r: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        r.validate()?;
        match self.lock().get(&rkey(r)) {
            Some(b) => Ok(Some(SecretBytes::new(b.clone())?)),
            None => Ok(None),
        }
    }
    async fn delete(&self, r: &SecretRef) -> Result<(), SecretStoreError> {
        r.validate()?;
        self.lock().remove(&rkey(r));
        Ok(())
    }
    async fn list(&self, a: &str, i: &str) -> Result<Vec<u64>, SecretStoreError> {
        Ok(self
            .lock()
            .keys()
            .filter(|k| k.0 == a && k.1 == i)
            .map(|k| k.2)
            .collect())
    }
    async fn list_account(&self, a: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        Ok(self
            .lock()
            .keys()
            .filter(|k| k.0 == a)
            .map(|k| SecretRef {
                account_id: k.0.clone(),
                integration_id: k.1.clone(),
                credential_generation: k.2,
            })
            .collect())
    }
}

// ---- the seeded scheduler and fault plan --------------------------------------------------

/// What the store wrapper and the fault predicates consult. One RNG, drawn in call order.
pub struct Plan {
    rng: Rng,
    /// Faults fire only while a step runs (never during setup, checks or the final quiesce).
    pub enabled: bool,
    /// Per-mille chance that a transaction fails, split evenly over the four fault kinds.
    pub tx_permille: u32,
    /// Per-mille chance that a read fails (retryable).
    pub read_permille: u32,
    /// Concurrent step in progress: yield before every metastore call.
    pub concurrent: bool,
    last_draw: u64,
    pub injected: u64,
}

type SharedPlan = Arc<Mutex<Plan>>;

fn plan_lock(p: &SharedPlan) -> std::sync::MutexGuard<'_, Plan> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// The metastore the router sees: yields (seeded) before each call in concurrent steps, fails
/// reads per the plan, then runs the call to completion before any other request may run.
pub struct SimStore {
    pub faults: Arc<FaultInjectingMetastore<RedbMetastore>>,
    plan: SharedPlan,
}

impl SimStore {
    async fn before(&self, read: bool) {
        let (yields, fail_read) = {
            let mut p = plan_lock(&self.plan);
            let y = if p.concurrent { p.rng.below(4) } else { 0 };
            let rp = p.read_permille;
            let f = read && p.enabled && rp > 0 && p.rng.chance(rp);
            if f {
                p.injected += 1;
            }
            (y, f)
        };
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        if fail_read {
            self.faults
                .fail_call(self.faults.calls() + 1, Fault::FailBeforeApply);
        }
    }
}

/// Runs a metastore call to completion on the calling (runtime) thread. The call is exempt
/// from tokio's cooperative budget: with the budget spent, tokio would defer the wake-up of
/// the redb worker's answer until the task yields to the scheduler, which a thread blocked
/// here never does (a deadlock that depends on timing).
fn wait<T>(fut: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(tokio::task::unconstrained(fut))
}

#[async_trait]
impl Metastore for SimStore {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.before(true).await;
        wait(self.faults.get(key, c))
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.before(true).await;
        wait(self.faults.batch_get(keys, c))
    }
    async fn query(&self, q: &Query) -> Result<Page, MetastoreError> {
        self.before(true).await;
        wait(self.faults.query(q))
    }
    async fn count(&self, pk: &str, prefix: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.before(true).await;
        wait(self.faults.count(pk, prefix, c))
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.before(false).await;
        wait(self.faults.transact(tx))
    }
}

/// Installs the seeded transaction faults: one draw per transaction decides whether it fails
/// and how (`fail_when` rules are evaluated in order; the first one draws, the others reuse
/// the draw).
fn install_tx_faults(store: &FaultInjectingMetastore<RedbMetastore>, plan: &SharedPlan) {
    let kinds = [
        Fault::FailBeforeApply,
        Fault::ApplyThenUnknown,
        Fault::Conflict,
        Fault::UnknownNotApplied,
    ];
    for (i, fault) in kinds.into_iter().enumerate() {
        let plan = plan.clone();
        store.fail_when(fault, usize::MAX, move |_tx| {
            let mut p = plan_lock(&plan);
            if i == 0 {
                p.last_draw = if p.enabled && p.tx_permille > 0 {
                    p.rng.next_u64() % 4000
                } else {
                    u64::MAX
                };
            }
            let per_kind = u64::from(p.tx_permille);
            let lo = per_kind * i as u64;
            let hit = p.last_draw >= lo && p.last_draw < lo + per_kind;
            if hit {
                p.injected += 1;
            }
            hit
        });
    }
}

// ---- world --------------------------------------------------------------------------------

pub const OPERATOR: &str = "sim-operator";
/// Clients: (token, account). Two clients share `acme`, one works in `beta`.
pub const CLIENTS: [(&str, &str); 3] = [
    ("sim-acme-1", "acme"),
    ("sim-acme-2", "acme"),
    ("sim-beta", "beta"),
];
pub const ACCOUNTS: [&str; 2] = ["acme", "beta"];
/// A token of `acme` naming principal `rita`: what it may do comes from grants the admins
/// (`CLIENTS[0]`, `CLIENTS[1]`, tokens naming no principal) give role `readers`.
pub const READER: (&str, &str) = ("sim-acme-rita", "acme");
/// The client index of [`READER`] in a [`Req`].
pub const READER_CLIENT: usize = 3;

const CATALOG_NAMES: [&str; 3] = ["cat-a", "cat-b", "cat-c"];
const INTEGRATION_NAMES: [&str; 2] = ["int-a", "int-b"];
const OVERLAY_NAMES: [&str; 3] = ["ovl-a", "ovl-b", "ovl-c"];
const REL_NAMES: [&str; 3] = ["orders", "people", "t1"];
const UPSTREAM_TOKENS: [&str; 3] = ["up-tok-1", "up-tok-2", "up-tok-3"];

fn ns_pool() -> Vec<Vec<&'static str>> {
    vec![
        vec!["sales"],
        vec!["sales", "eu"],
        vec!["hr"],
        vec!["local"],
        vec!["local", "x"],
    ]
}

fn includes() -> Vec<Value> {
    vec![
        json!([]),
        json!([["sales"]]),
        json!([["hr"]]),
        json!([["sales", "eu"]]),
        json!([["sales"], ["hr"]]),
    ]
}

fn schema(variant: usize) -> Value {
    let mut fields = vec![json!({"id": 1, "name": "id", "required": true, "type": "long"})];
    if variant % 2 == 1 {
        fields.push(json!({"id": 2, "name": "extra", "required": false, "type": "string"}));
    }
    json!({"type": "struct", "fields": fields})
}

fn upstream_schema(variant: usize) -> Value {
    let mut s = schema(variant);
    s["schema-id"] = json!(variant);
    s
}

/// `%1F`-joined, percent-encoded namespace segment.
pub fn ns_seg(path: &[String]) -> String {
    path.iter()
        .map(|s| {
            let mut out = String::new();
            for b in s.bytes() {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    out.push(b as char);
                } else {
                    let _ = write!(out, "%{b:02X}");
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("%1F")
}

/// What a step may legitimately remove from the store.
#[derive(Clone, Debug)]
pub enum Target {
    None,
    Catalog(String),
    Namespace(String, Vec<String>),
    Relation(String, Vec<String>, String),
    Integration { id: String, cascade: bool },
    Overlay(String),
    Account(String),
    Reconcile,
}

/// One HTTP request of a step.
#[derive(Clone, Debug)]
pub struct Req {
    pub client: usize, // index into CLIENTS, or usize::MAX for the operator
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    pub headers: Vec<(String, String)>,
    pub target: Target,
    /// Create with an idempotency key: index into `World::keyed`.
    pub keyed: Option<usize>,
    /// A different request under a key that already answered 2xx: must be 409.
    pub reused_key: bool,
    /// A replay of an earlier keyed create: it answers the recorded response, whose resource
    /// may have been deleted since.
    pub replay: bool,
    pub label: String,
}

impl Req {
    fn token(&self) -> &'static str {
        if self.client == READER_CLIENT {
            return READER.0;
        }
        CLIENTS.get(self.client).map(|c| c.0).unwrap_or(OPERATOR)
    }
    fn account(&self) -> Option<&'static str> {
        if self.client == READER_CLIENT {
            return Some(READER.1);
        }
        CLIENTS.get(self.client).map(|c| c.1)
    }
}

/// One keyed create the simulation sent, for replays.
pub struct Keyed {
    pub account: String,
    pub req: Req,
    /// The first 2xx answer (status, body).
    pub first: Option<(u16, Value)>,
    /// The account was deleted since (its receipts went with it).
    pub void: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Res {
    pub kind: &'static str,
    pub account: String,
    pub catalog: String,
    pub managed: bool,
    pub overlay_created: bool,
}

#[derive(Clone, Debug, Default)]
pub struct AccountView {
    pub exists: bool,
    pub fenced: bool,
    pub catalogs: Vec<CatalogRecord>,
    pub integrations: Vec<IntegrationRecord>,
    pub overlays: Vec<OverlayRecord>,
}

#[derive(Clone, Debug, Default)]
pub struct CatalogView {
    pub account: String,
    pub namespaces: Vec<NamespaceRecord>,
    pub relations: Vec<RelationRecord>,
    /// Fingerprints of what the directory lists, and the generation item's body.
    pub listed: BTreeSet<String>,
    pub dirgen: Option<Vec<u8>>,
}

/// An account's access control as stored.
#[derive(Clone, Debug, Default)]
pub struct AclState {
    pub roles: BTreeSet<String>,
    /// (role, member)
    pub members: BTreeSet<(String, String)>,
    /// (grant id, role, privilege, securable)
    pub grants: Vec<(String, String, String, Value)>,
}

impl AclState {
    /// The grants of the roles `member` belongs to.
    fn grants_of(&self, member: &str) -> Vec<&(String, String, String, Value)> {
        self.grants
            .iter()
            .filter(|g| self.members.contains(&(g.1.clone(), member.to_owned())))
            .collect()
    }

    /// Whether the grants allow `rita`'s request (the simulation grants `READ` only, so no
    /// write is ever allowed): its own model of the rules, independent of the service's.
    fn allows_reader(&self, method: &Method, path: &str) -> bool {
        let grants = self.grants_of("rita");
        let under = |c: &str, ns: &[String], descendants: bool| {
            grants.iter().any(|g| {
                let s = &g.3;
                if s["catalog_id"].as_str() != Some(c) {
                    return false;
                }
                match s["type"].as_str() {
                    Some("CATALOG") => true,
                    Some("NAMESPACE") => {
                        let p: Vec<String> =
                            serde_json::from_value(s["path"].clone()).unwrap_or_default();
                        ns.starts_with(&p) || (descendants && p.starts_with(ns))
                    }
                    _ => false,
                }
            })
        };
        if *method != Method::GET {
            return false;
        }
        if path == "/v1/accounts/acme/catalogs" {
            // Listings are every member's (filtered to what it may see).
            return true;
        }
        let rest = path
            .strip_prefix("/v1/accounts/acme/catalogs/")
            .unwrap_or("");
        let parts: Vec<&str> = rest.split('/').collect();
        let ns = |seg: &str| -> Vec<String> { seg.split("%1F").map(str::to_owned).collect() };
        match parts.as_slice() {
            [c] => under(c, &[], true),
            [c, "namespaces", n] => under(c, &ns(n), true),
            [c, "namespaces", n, "tables", _] => under(c, &ns(n), false),
            _ => false,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub acl: BTreeMap<String, AclState>,
    pub accounts: BTreeMap<String, AccountView>,
    pub catalogs: BTreeMap<String, CatalogView>,
    pub ids: BTreeMap<String, Res>,
}

pub struct Failure {
    pub message: String,
}

pub struct World {
    pub router: Router,
    pub state: AppState,
    pub faults: Arc<FaultInjectingMetastore<RedbMetastore>>,
    pub creds: Arc<FaultInjectingCredentialStore<MemCreds>>,
    pub clock: ManualClock,
    pub fx: IcebergFixture,
    pub rng: Rng,
    pub plan: SharedPlan,
    pub log: Arc<Mutex<Vec<String>>>,
    pub keyed: Vec<Keyed>,
    pub known_catalogs: BTreeMap<String, String>, // id -> account
    pub ever_vanished: BTreeSet<String>,
    pub prev: Snapshot,
    pub step: usize,
    pub stats: Stats,
    key_counter: u64,
    /// Answers the last lone request took (1 unless it was retried).
    last_attempts: usize,
    /// The reader's successful requests of this step, checked against the grants before and
    /// after it.
    reader_successes: Vec<(Method, String, String)>,
}

/// What a reconcile step looked like before it ran.
struct RunWatch {
    account: String,
    overlay: String,
    catalog: String,
    status: Option<Vec<u8>>,
    rows: Vec<(String, Vec<u8>)>,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub steps: u64,
    pub requests: u64,
    pub concurrent_steps: u64,
    pub reconciles: u64,
    /// Reconcile steps whose one attempt failed and recorded its outcome (the failed-run
    /// invariant was checked).
    pub failed_runs: u64,
    pub faults: u64,
    pub statuses: BTreeMap<u16, u64>,
}

fn tokens() -> StaticTokens {
    let mut t = StaticTokens::new();
    t.add(OPERATOR, true, vec![]);
    for (tok, acct) in CLIENTS {
        t.add(tok, false, vec![acct.to_owned()]);
    }
    t.add_named(READER.0, vec![READER.1.to_owned()], "rita", vec![]);
    t
}

impl World {
    pub async fn new(seed: u64, log: Arc<Mutex<Vec<String>>>) -> Self {
        let mut rng = Rng::new(seed);
        let tx_permille = *rng.pick(&[0u32, 25, 50, 100]).unwrap_or(&0);
        let read_permille = *rng.pick(&[0u32, 5, 15]).unwrap_or(&0);
        let plan = Arc::new(Mutex::new(Plan {
            rng: Rng::new(seed.wrapping_mul(31).wrapping_add(7)),
            enabled: false,
            tx_permille,
            read_permille,
            concurrent: false,
            last_draw: 0,
            injected: 0,
        }));
        let redb = match RedbMetastore::in_memory() {
            Ok(r) => r,
            Err(e) => panic!("in-memory redb: {e}"),
        };
        let faults = Arc::new(FaultInjectingMetastore::new(redb));
        install_tx_faults(&faults, &plan);
        let store = Arc::new(SimStore {
            faults: faults.clone(),
            plan: plan.clone(),
        });
        let clock = ManualClock::new(1_800_000_000_000);
        let creds = Arc::new(FaultInjectingCredentialStore::new(MemCreds::default()));
        let config = Config {
            allow_insecure_upstreams: true,
            ..Config::default()
        };
        let state = AppState::new(store, Arc::new(clock.clone()), Arc::new(tokens()), config)
            .with_credentials(creds.clone());
        let router = flotilla_core::router(state.clone());
        let fx = IcebergFixture::start().await;
        fx.set_auth(FixtureAuth::Bearer);
        fx.set_bearer_tokens(&UPSTREAM_TOKENS);
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
        let w = Self {
            router,
            state,
            faults,
            creds,
            clock,
            fx,
            rng,
            plan,
            log,
            keyed: Vec::new(),
            known_catalogs: BTreeMap::new(),
            ever_vanished: BTreeSet::new(),
            prev: Snapshot::default(),
            step: 0,
            stats: Stats::default(),
            key_counter: 0,
            last_attempts: 0,
            reader_successes: Vec::new(),
        };
        w.note(format!(
            "seed {seed}: tx faults {tx_permille}/1000, read faults {read_permille}/1000"
        ));
        for a in ACCOUNTS {
            let r = w
                .send(&Req::operator(
                    Method::POST,
                    "/v1/accounts",
                    Some(json!({"id": a})),
                    Target::None,
                    "setup account",
                ))
                .await;
            assert_eq!(r.0, 201, "setup: create account {a}: {}", r.1);
        }
        // Start `acme` with a catalog, an integration on the fixture and an overlay, so that
        // reconciles, cascades and overlay races happen from the first steps.
        let base = "/v1/accounts/acme";
        let cat = w
            .send(&Req::client(
                0,
                Method::POST,
                format!("{base}/catalogs"),
                Some(json!({"display_name": "cat-a"})),
                Target::None,
                "setup".into(),
            ))
            .await;
        let int = w
            .send(&Req::client(
                0,
                Method::POST,
                format!("{base}/integrations"),
                Some(json!({"display_name": "int-a", "type": "ICEBERG_REST", "uri": w.fx.uri(), "authentication": {"type": "BEARER"}, "credentials": {"token": UPSTREAM_TOKENS[0]}})),
                Target::None,
                "setup".into(),
            ))
            .await;
        assert_eq!((cat.0, int.0), (201, 201), "setup: {} {}", cat.1, int.1);
        let ovl = json!({"display_name": "ovl-a", "integration_id": int.1["id"], "catalog_id": cat.1["id"], "include_namespaces": [["sales"]]});
        let o = w
            .send(&Req::client(
                0,
                Method::POST,
                format!("{base}/overlays"),
                Some(ovl),
                Target::None,
                "setup".into(),
            ))
            .await;
        assert_eq!(o.0, 201, "setup: {}", o.1);
        w
    }

    pub fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    fn set_faults(&self, on: bool) {
        plan_lock(&self.plan).enabled = on;
        if !on {
            self.creds.clear();
        }
    }

    /// Sends one request through the router; answers (status, body).
    pub async fn send(&self, req: &Req) -> (u16, Value) {
        let mut b = Request::builder().method(req.method.clone()).uri(&req.path);
        b = b.header("authorization", format!("Bearer {}", req.token()));
        for (k, v) in &req.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let request = match &req.body {
            Some(v) => b
                .header("content-type", "application/json")
                .body(Body::from(v.to_string())),
            None => b.body(Body::empty()),
        };
        let request = match request {
            Ok(r) => r,
            Err(e) => panic!("building {}: {e}", req.label),
        };
        let resp = match self.router.clone().oneshot(request).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
        let status = resp.status().as_u16();
        let bytes = match resp.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => panic!("body of {}: {e}", req.label),
        };
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, body)
    }

    /// A client's request with retries: the same request (same key) again after a `503`.
    async fn send_with_retries(&self, req: &Req) -> Vec<(u16, Value)> {
        let mut answers = Vec::new();
        for _ in 0..3 {
            let (status, body) = self.send(req).await;
            let retry = status == 503;
            answers.push((status, body));
            if !retry {
                break;
            }
        }
        answers
    }
}

impl Req {
    fn operator(
        method: Method,
        path: &str,
        body: Option<Value>,
        target: Target,
        label: &str,
    ) -> Self {
        Req {
            client: usize::MAX,
            method,
            path: path.to_owned(),
            body,
            headers: Vec::new(),
            target,
            keyed: None,
            reused_key: false,
            replay: false,
            label: label.to_owned(),
        }
    }
    fn client(
        client: usize,
        method: Method,
        path: String,
        body: Option<Value>,
        target: Target,
        label: String,
    ) -> Self {
        Req {
            client,
            method,
            path,
            body,
            headers: Vec::new(),
            target,
            keyed: None,
            reused_key: false,
            replay: false,
            label,
        }
    }
}

// ---- scanning and invariants --------------------------------------------------------------

async fn scan(store: &dyn Metastore, pk: &str) -> Vec<Item> {
    match flotilla_metastore::query_all(store, Query::new(pk, "", Consistency::Strong)).await {
        Ok(items) => items,
        Err(e) => panic!("scan {pk}: {e}"),
    }
}

fn decode<T: serde::de::DeserializeOwned>(item: &Item) -> Result<T, String> {
    item.json::<T>()
        .map_err(|e| format!("undecodable item {:?}: {e}", item.key))
}

fn listed_fingerprint(r: &RelationRecord) -> String {
    format!(
        "{:?}|{}|{}|{}",
        r.kind,
        r.namespace.segments().join("\u{1f}"),
        r.name,
        r.schema
    )
}

impl World {
    /// Scans the raw store and checks every invariant; answers the new snapshot.
    pub async fn check(&mut self, allowed: &[Target]) -> Result<Snapshot, String> {
        let raw: &dyn Metastore = self.faults.inner();
        let mut snap = Snapshot::default();
        let mut errors: Vec<String> = Vec::new();
        let mut receipts: Vec<(String, String)> = Vec::new(); // (account, recorded id)
        let mut fences_ovl: BTreeSet<String> = BTreeSet::new();

        for a in ACCOUNTS {
            let items = scan(raw, &keys::account_pk(a)).await;
            let mut view = AccountView::default();
            let mut acl = AclState::default();
            let mut cat_names: BTreeMap<String, String> = BTreeMap::new();
            let mut int_names: BTreeMap<String, String> = BTreeMap::new();
            let mut ovl_names: BTreeMap<String, String> = BTreeMap::new();
            let mut intdeps: BTreeSet<(String, String)> = BTreeSet::new();
            let mut catdeps: BTreeSet<(String, String)> = BTreeSet::new();
            for item in &items {
                let sk = item.key.sk.as_str();
                let r: Result<(), String> = (|| {
                    if sk == "ACCOUNT" {
                        view.exists = true;
                    } else if sk == "FENCE#DELETE" {
                        view.fenced = true;
                    } else if let Some(rest) = sk.strip_prefix("CATNAME#") {
                        cat_names.insert(rest.to_owned(), decode::<NameIndexRecord>(item)?.id);
                    } else if let Some(rest) = sk.strip_prefix("CATDEP#") {
                        let mut p = rest.splitn(2, '#');
                        catdeps.insert((
                            p.next().unwrap_or("").to_owned(),
                            p.next().unwrap_or("").to_owned(),
                        ));
                    } else if sk.starts_with("CAT#") {
                        view.catalogs.push(decode(item)?);
                    } else if let Some(rest) = sk.strip_prefix("INTNAME#") {
                        int_names.insert(rest.to_owned(), decode::<NameIndexRecord>(item)?.id);
                    } else if let Some(rest) = sk.strip_prefix("INTDEP#") {
                        let mut p = rest.splitn(2, '#');
                        intdeps.insert((
                            p.next().unwrap_or("").to_owned(),
                            p.next().unwrap_or("").to_owned(),
                        ));
                    } else if sk.starts_with("INT#") {
                        view.integrations.push(decode(item)?);
                    } else if let Some(rest) = sk.strip_prefix("OVLNAME#") {
                        ovl_names.insert(rest.to_owned(), decode::<NameIndexRecord>(item)?.id);
                    } else if let Some(rest) = sk.strip_prefix("OVLFENCE#") {
                        fences_ovl.insert(rest.to_owned());
                    } else if sk.starts_with("OVL#") {
                        view.overlays.push(decode(item)?);
                    } else if let Some(rest) = sk.strip_prefix("ACL#ROLE#") {
                        acl.roles.insert(rest.to_owned());
                    } else if let Some(rest) = sk.strip_prefix("ACL#MEMBER#") {
                        let (role, member) = rest.split_once('\u{1E}').unwrap_or((rest, ""));
                        acl.members.insert((role.to_owned(), member.to_owned()));
                    } else if sk.starts_with("ACL#GRANT#") {
                        let g: Value = decode(item)?;
                        acl.grants.push((
                            g["id"].as_str().unwrap_or("").to_owned(),
                            g["role"].as_str().unwrap_or("").to_owned(),
                            g["privilege"].as_str().unwrap_or("").to_owned(),
                            g["securable"].clone(),
                        ));
                    } else if sk.starts_with("IDEM#") {
                        let v: Value = decode(item)?;
                        if v["state"] == "succeeded"
                            && let Some(id) = v["response"]["body"]["id"].as_str()
                        {
                            receipts.push((a.to_owned(), id.to_owned()));
                        }
                    }
                    Ok(())
                })();
                if let Err(e) = r {
                    errors.push(e);
                }
            }
            // A keyed create sent to a deleted account reserves its pending receipt before it
            // learns the account is gone (the reservation asserts nothing about the account);
            // the receipt (pending, or failed once the create answered NOT_FOUND) expires by TTL.
            // Known and reported; everything else is an orphan.
            let leftovers: Vec<&Item> = items
                .iter()
                .filter(|i| {
                    !(i.key.sk.starts_with("IDEM#")
                        && i.json::<Value>()
                            .ok()
                            .is_some_and(|v| v["state"] == "pending" || v["state"] == "failed"))
                })
                .collect();
            if !view.exists && !view.fenced && !leftovers.is_empty() {
                errors.push(format!(
                    "account {a} is gone without a deletion fence but {} items remain (first {:?})",
                    leftovers.len(),
                    leftovers[0].key
                ));
            }
            for c in &view.catalogs {
                self.known_catalogs.insert(c.id.clone(), a.to_owned());
                snap.ids.insert(
                    c.id.clone(),
                    Res {
                        kind: "catalog",
                        account: a.into(),
                        ..Res::default()
                    },
                );
            }
            for i in &view.integrations {
                snap.ids.insert(
                    i.id.clone(),
                    Res {
                        kind: "integration",
                        account: a.into(),
                        ..Res::default()
                    },
                );
            }
            for o in &view.overlays {
                snap.ids.insert(
                    o.id.clone(),
                    Res {
                        kind: "overlay",
                        account: a.into(),
                        ..Res::default()
                    },
                );
            }
            if !view.fenced {
                // One resource per name, both ways.
                let check_names = |errors: &mut Vec<String>,
                                   what: &str,
                                   names: &BTreeMap<String, String>,
                                   recs: Vec<(String, String)>| {
                    let by_id: BTreeMap<&String, &String> =
                        recs.iter().map(|(id, n)| (id, n)).collect();
                    for (name, id) in names {
                        if by_id.get(id).map(|n| *n != name).unwrap_or(true) {
                            errors.push(format!("{a}: {what} name {name:?} points at {id}, which is absent or named otherwise"));
                        }
                    }
                    for (id, name) in &recs {
                        if names.get(name) != Some(id) {
                            errors.push(format!("{a}: {what} {id} named {name:?} has no name-index entry pointing at it"));
                        }
                    }
                };
                check_names(
                    &mut errors,
                    "catalog",
                    &cat_names,
                    view.catalogs
                        .iter()
                        .map(|c| (c.id.clone(), c.display_name.clone()))
                        .collect(),
                );
                check_names(
                    &mut errors,
                    "integration",
                    &int_names,
                    view.integrations
                        .iter()
                        .map(|c| (c.id.clone(), c.display_name.clone()))
                        .collect(),
                );
                check_names(
                    &mut errors,
                    "overlay",
                    &ovl_names,
                    view.overlays
                        .iter()
                        .map(|c| (c.id.clone(), c.display_name.clone()))
                        .collect(),
                );
                // Overlays' bindings and dependency records.
                let ints: BTreeSet<&str> =
                    view.integrations.iter().map(|i| i.id.as_str()).collect();
                let cats: BTreeSet<&str> = view.catalogs.iter().map(|c| c.id.as_str()).collect();
                let mut want_int = BTreeSet::new();
                let mut want_cat = BTreeSet::new();
                for o in &view.overlays {
                    if !ints.contains(o.integration_id.as_str()) {
                        errors.push(format!(
                            "{a}: overlay {} references missing integration {}",
                            o.id, o.integration_id
                        ));
                    }
                    if !cats.contains(o.catalog_id.as_str()) {
                        errors.push(format!(
                            "{a}: overlay {} references missing catalog {}",
                            o.id, o.catalog_id
                        ));
                    }
                    want_int.insert((o.integration_id.clone(), o.id.clone()));
                    want_cat.insert((o.catalog_id.clone(), o.id.clone()));
                }
                if want_int != intdeps {
                    errors.push(format!(
                        "{a}: INTDEP records {intdeps:?} do not match overlays {want_int:?}"
                    ));
                }
                if want_cat != catdeps {
                    errors.push(format!(
                        "{a}: CATDEP records {catdeps:?} do not match overlays {want_cat:?}"
                    ));
                }
                // Every published credential generation resolves.
                for i in &view.integrations {
                    if i.credentials_configured
                        && !self
                            .creds
                            .inner()
                            .contains(a, &i.id, i.credential_generation)
                    {
                        errors.push(format!(
                            "{a}: integration {} publishes credential generation {} that the credential store does not hold",
                            i.id, i.credential_generation
                        ));
                    }
                }
            }
            // Memberships and grants never outlive their role.
            for (role, member) in &acl.members {
                if !acl.roles.contains(role) {
                    errors.push(format!(
                        "{a}: member {member} of role {role}, which does not exist"
                    ));
                }
            }
            for g in &acl.grants {
                if !acl.roles.contains(&g.1) {
                    errors.push(format!(
                        "{a}: grant {} names role {}, which does not exist",
                        g.0, g.1
                    ));
                }
            }
            snap.acl.insert(a.to_owned(), acl);
            snap.accounts.insert(a.to_owned(), view);
        }

        // Catalog partitions: every catalog ever seen, live or not.
        let catalog_ids: Vec<(String, String)> = self
            .known_catalogs
            .iter()
            .map(|(c, a)| (c.clone(), a.clone()))
            .collect();
        for (c, a) in catalog_ids {
            let items = scan(raw, &keys::catalog_pk(&c)).await;
            let acct = snap.accounts.get(&a).cloned().unwrap_or_default();
            let live = acct.catalogs.iter().any(|x| x.id == c);
            let mut view = CatalogView {
                account: a.clone(),
                ..CatalogView::default()
            };
            let mut claims: Vec<(Vec<String>, String)> = Vec::new();
            for item in &items {
                let sk = item.key.sk.as_str();
                if sk.starts_with("NS#") {
                    match decode::<NamespaceRecord>(item) {
                        Ok(n) => view.namespaces.push(n),
                        Err(e) => errors.push(e),
                    }
                } else if sk.starts_with("REL#") {
                    match decode::<RelationRecord>(item) {
                        Ok(r) => view.relations.push(r),
                        Err(e) => errors.push(e),
                    }
                } else if sk.starts_with("CLAIM#") {
                    match decode::<flotilla_domain::model::ClaimRecord>(item) {
                        Ok(cl) => claims.push((cl.path.segments().to_vec(), cl.overlay_id)),
                        Err(e) => errors.push(e),
                    }
                } else if sk == "DIRGEN" {
                    view.dirgen = Some(item.body.clone());
                }
            }
            let paths: BTreeSet<Vec<String>> = view
                .namespaces
                .iter()
                .map(|n| n.path.segments().to_vec())
                .collect();
            let structural = !acct.fenced;
            if structural
                && !live
                && (!view.namespaces.is_empty() || !view.relations.is_empty() || !claims.is_empty())
            {
                errors.push(format!("catalog {c} is gone but its partition holds namespaces/relations/claims (orphans)"));
            }
            let overlays: BTreeSet<&str> = acct.overlays.iter().map(|o| o.id.as_str()).collect();
            if structural && live {
                for p in &paths {
                    if p.len() > 1 && !paths.contains(&p[..p.len() - 1]) {
                        errors.push(format!(
                            "catalog {c}: namespace {p:?} has no parent namespace"
                        ));
                    }
                }
                for r in &view.relations {
                    let ns = r.namespace.segments().to_vec();
                    if !paths.contains(&ns) {
                        errors.push(format!(
                            "catalog {c}: relation {}.{} has no namespace",
                            ns.join("."),
                            r.name
                        ));
                    }
                    if let Some(m) = &r.managed_by
                        && !overlays.contains(m.overlay_id.as_str())
                        && !fences_ovl.contains(&m.overlay_id)
                    {
                        errors.push(format!(
                            "catalog {c}: managed relation {}.{} belongs to overlay {} which is neither live nor being deleted",
                            ns.join("."),
                            r.name,
                            m.overlay_id
                        ));
                    }
                }
                for (p, o) in &claims {
                    if !paths.contains(p) {
                        errors.push(format!(
                            "catalog {c}: claim of {o} on missing namespace {p:?}"
                        ));
                    }
                    if !overlays.contains(o.as_str()) && !fences_ovl.contains(o) {
                        errors.push(format!("catalog {c}: claim on {p:?} by overlay {o} which is neither live nor being deleted"));
                    }
                }
            }
            for n in &view.namespaces {
                snap.ids.insert(
                    n.id.clone(),
                    Res {
                        kind: "namespace",
                        account: a.clone(),
                        catalog: c.clone(),
                        overlay_created: n.created_by_overlay,
                        ..Res::default()
                    },
                );
            }
            for r in &view.relations {
                snap.ids.insert(
                    r.id.clone(),
                    Res {
                        kind: "relation",
                        account: a.clone(),
                        catalog: c.clone(),
                        managed: r.managed_by.is_some(),
                        ..Res::default()
                    },
                );
            }
            view.listed = view.relations.iter().map(listed_fingerprint).collect();
            // The directory generation moved with every listed change.
            if let Some(before) = self.prev.catalogs.get(&c)
                && before.listed != view.listed
                && before.dirgen == view.dirgen
            {
                let added: Vec<&String> = view.listed.difference(&before.listed).collect();
                let removed: Vec<&String> = before.listed.difference(&view.listed).collect();
                errors.push(format!(
                    "catalog {c}: the directory listing changed (added {added:?}, removed {removed:?}) but DIRGEN did not move"
                ));
            }
            if !items.is_empty() || self.prev.catalogs.contains_key(&c) {
                snap.catalogs.insert(c.clone(), view);
            }
        }

        // No grant outlives its securable (accounts being deleted aside: their cleanup walks).
        for (a, acl) in &snap.acl {
            let Some(view) = snap.accounts.get(a) else {
                continue;
            };
            if view.fenced || !view.exists {
                continue;
            }
            for (id, _, _, s) in &acl.grants {
                let c = s["catalog_id"].as_str().unwrap_or("");
                let catalog_live = view.catalogs.iter().any(|x| x.id == c);
                let live = match s["type"].as_str() {
                    Some("CATALOG") => catalog_live,
                    Some("NAMESPACE") => {
                        let p: Vec<String> =
                            serde_json::from_value(s["path"].clone()).unwrap_or_default();
                        catalog_live
                            && snap.catalogs.get(c).is_some_and(|v| {
                                v.namespaces
                                    .iter()
                                    .any(|n| n.path.segments() == p.as_slice())
                            })
                    }
                    _ => true,
                };
                if !live {
                    errors.push(format!("{a}: grant {id} names {s}, which does not exist"));
                }
            }
        }
        // No request of the reader succeeded that the grants at its time did not allow.
        for (method, path, label) in std::mem::take(&mut self.reader_successes) {
            let before = self
                .prev
                .acl
                .get("acme")
                .is_some_and(|g| g.allows_reader(&method, &path));
            let after = snap
                .acl
                .get("acme")
                .is_some_and(|g| g.allows_reader(&method, &path));
            if !before && !after {
                errors.push(format!(
                    "{label}: the reader's {method} {path} succeeded, which no grant allowed"
                ));
            }
        }
        // Nothing vanished that this step was not allowed to remove.
        for (id, res) in &self.prev.ids {
            if snap.ids.contains_key(id) {
                continue;
            }
            let ok = allowed.iter().any(|t| match t {
                Target::Account(a) => &res.account == a,
                Target::Catalog(c) => id == c,
                Target::Namespace(c, _) => res.kind == "namespace" && &res.catalog == c,
                Target::Relation(c, _, _) => res.kind == "relation" && &res.catalog == c,
                Target::Integration { id: i, cascade } => {
                    id == i
                        || (*cascade
                            && (res.kind == "overlay" || res.managed || res.overlay_created))
                }
                Target::Overlay(o) => id == o || res.managed || res.overlay_created,
                Target::Reconcile => res.managed || res.overlay_created,
                Target::None => false,
            });
            if ok {
                self.ever_vanished.insert(id.clone());
            } else {
                errors.push(format!(
                    "{} {id} in {} vanished during a step that could not remove it",
                    res.kind, res.account
                ));
            }
        }
        // Receipts match resources.
        for (a, id) in &receipts {
            if !snap.ids.contains_key(id) && !self.ever_vanished.contains(id) {
                errors.push(format!("{a}: a succeeded receipt records {id}, which does not exist and was never deleted"));
            }
        }
        if errors.is_empty() {
            Ok(snap)
        } else {
            Err(errors.join("\n"))
        }
    }
}

/// The namespaces, relations and claims of a catalog partition, as stored.
async fn catalog_rows(raw: &dyn Metastore, catalog: &str) -> Vec<(String, Vec<u8>)> {
    scan(raw, &keys::catalog_pk(catalog))
        .await
        .into_iter()
        .filter(|i| {
            i.key.sk.starts_with("NS#")
                || i.key.sk.starts_with("REL#")
                || i.key.sk.starts_with("CLAIM#")
        })
        .map(|i| (i.key.sk.clone(), i.body))
        .collect()
}

// ---- operation generation -----------------------------------------------------------------

impl World {
    fn next_key(&mut self) -> String {
        self.key_counter += 1;
        format!("sim-key-{}", self.key_counter)
    }

    /// A create, with an idempotency key half of the time.
    fn create(&mut self, client: usize, path: String, body: Value, label: String) -> Req {
        let mut req = Req::client(client, Method::POST, path, Some(body), Target::None, label);
        if self.rng.chance(500) {
            let k = self.next_key();
            req.headers.push(("idempotency-key".into(), k.clone()));
            req.label = format!("{} [key {k}]", req.label);
            let account = CLIENTS[client].1.to_owned();
            self.keyed.push(Keyed {
                account,
                req: req.clone(),
                first: None,
                void: false,
            });
            req.keyed = Some(self.keyed.len() - 1);
        }
        req
    }

    fn if_match(&mut self, req: &mut Req, id: &str, revision: u64) {
        match self.rng.below(4) {
            0 => {}
            // A stale tag: another revision of the same resource.
            1 => req
                .headers
                .push(("if-match".into(), etag_for(id, revision + 1))),
            _ => req
                .headers
                .push(("if-match".into(), etag_for(id, revision))),
        }
    }

    /// Picks one request for `client` from the current state.
    pub fn gen_request(&mut self, client: usize) -> Req {
        let account = CLIENTS[client].1;
        let base = format!("/v1/accounts/{account}");
        let view = self.prev.accounts.get(account).cloned().unwrap_or_default();
        let stale: Vec<String> = self.ever_vanished.iter().cloned().collect();
        let pick_id = |rng: &mut Rng, live: Vec<String>| -> Option<String> {
            if rng.chance(100) && !stale.is_empty() {
                return rng.pick(&stale).cloned();
            }
            rng.pick(&live).cloned()
        };
        let catalogs: Vec<CatalogRecord> = view.catalogs.clone();
        let cat_views: Vec<(CatalogRecord, CatalogView)> = catalogs
            .iter()
            .filter_map(|c| {
                self.prev
                    .catalogs
                    .get(&c.id)
                    .map(|v| (c.clone(), v.clone()))
            })
            .collect();
        // Replay a keyed create of this account now and then.
        if self.rng.chance(80) {
            let candidates: Vec<usize> = (0..self.keyed.len())
                .filter(|i| self.keyed[*i].req.client == client && !self.keyed[*i].void)
                .collect();
            if let Some(&i) = self.rng.pick(&candidates) {
                let mut req = self.keyed[i].req.clone();
                if self.rng.chance(150) {
                    // Same key, different request.
                    if let Some(b) = req.body.as_mut() {
                        b["properties"] = json!({"variant": format!("{}", self.rng.below(1000))});
                    }
                    req.reused_key = true;
                    req.replay = true;
                    req.label = format!("{} (reused key, different body)", req.label);
                } else {
                    if let Some(b) = req.body.as_mut()
                        && b.get("credentials").is_some()
                    {
                        // Secret bytes are not part of the fingerprint: a replay with other
                        // credentials is the same request.
                        b["credentials"] = json!({"token": self.rng.pick(&UPSTREAM_TOKENS).copied().unwrap_or("x")});
                    }
                    req.label = format!("replay {}", req.label);
                    req.replay = true;
                }
                return req;
            }
        }
        let choice = self.rng.below(100);
        match choice {
            0..=11 => {
                let name = *self.rng.pick(&CATALOG_NAMES).unwrap_or(&"cat-a");
                let mut path = format!("{base}/catalogs");
                if self.rng.chance(100) {
                    path.push_str("?on_conflict=return_existing");
                }
                self.create(
                    client,
                    path,
                    json!({"display_name": name}),
                    format!("c{client} create catalog {name}"),
                )
            }
            12..=15 => match self.rng.pick(&catalogs).cloned() {
                Some(c) => {
                    let name = *self.rng.pick(&CATALOG_NAMES).unwrap_or(&"cat-a");
                    let mut r = Req::client(
                        client,
                        Method::PATCH,
                        format!("{base}/catalogs/{}", c.id),
                        Some(
                            json!({"display_name": name, "description": format!("d{}", self.rng.below(9))}),
                        ),
                        Target::None,
                        format!("c{client} patch catalog {} -> {name}", c.display_name),
                    );
                    self.if_match(&mut r, &c.id, c.revision);
                    r
                }
                None => self.gen_simple_get(client),
            },
            16..=19 => match pick_id(
                &mut self.rng,
                catalogs.iter().map(|c| c.id.clone()).collect(),
            ) {
                Some(id) => Req::client(
                    client,
                    Method::DELETE,
                    format!("{base}/catalogs/{id}"),
                    None,
                    Target::Catalog(id.clone()),
                    format!("c{client} delete catalog {id}"),
                ),
                None => self.gen_simple_get(client),
            },
            20..=29 => match self.rng.pick(&catalogs).cloned() {
                Some(c) => {
                    let pool = ns_pool();
                    let p = self.rng.pick(&pool).cloned().unwrap_or_default();
                    self.create(
                        client,
                        format!("{base}/catalogs/{}/namespaces", c.id),
                        json!({"path": p}),
                        format!(
                            "c{client} create namespace {} in {}",
                            p.join("."),
                            c.display_name
                        ),
                    )
                }
                None => self.gen_simple_get(client),
            },
            30..=33 => match self.rng.pick(&cat_views).cloned() {
                Some((c, v)) => match self.rng.pick(&v.namespaces).cloned() {
                    Some(n) => {
                        let segs = n.path.segments().to_vec();
                        Req::client(
                            client,
                            Method::DELETE,
                            format!("{base}/catalogs/{}/namespaces/{}", c.id, ns_seg(&segs)),
                            None,
                            Target::Namespace(c.id.clone(), segs.clone()),
                            format!(
                                "c{client} delete namespace {} in {}",
                                segs.join("."),
                                c.display_name
                            ),
                        )
                    }
                    None => self.gen_simple_get(client),
                },
                None => self.gen_simple_get(client),
            },
            34..=45 => match self.rng.pick(&cat_views).cloned() {
                Some((c, v)) => match self.rng.pick(&v.namespaces).cloned() {
                    Some(n) => {
                        let segs = n.path.segments().to_vec();
                        let name = *self.rng.pick(&REL_NAMES).unwrap_or(&"t1");
                        let view = self.rng.chance(250);
                        let (kind, body) = if view {
                            (
                                "views",
                                json!({"name": name, "schema": schema(self.rng.below(2)), "definitions": [{"dialect": "spark", "sql": "SELECT 1"}]}),
                            )
                        } else {
                            (
                                "tables",
                                json!({"name": name, "schema": schema(self.rng.below(2)), "format": "ICEBERG"}),
                            )
                        };
                        self.create(
                            client,
                            format!(
                                "{base}/catalogs/{}/namespaces/{}/{kind}",
                                c.id,
                                ns_seg(&segs)
                            ),
                            body,
                            format!(
                                "c{client} create {kind} {}.{name} in {}",
                                segs.join("."),
                                c.display_name
                            ),
                        )
                    }
                    None => self.gen_simple_get(client),
                },
                None => self.gen_simple_get(client),
            },
            46..=53 => match self.rng.pick(&cat_views).cloned() {
                Some((c, v)) => match self.rng.pick(&v.relations).cloned() {
                    Some(r) => {
                        let segs = r.namespace.segments().to_vec();
                        let kind = if r.kind == flotilla_domain::model::RelationKind::View {
                            "views"
                        } else {
                            "tables"
                        };
                        let url = format!(
                            "{base}/catalogs/{}/namespaces/{}/{kind}/{}",
                            c.id,
                            ns_seg(&segs),
                            r.name
                        );
                        if self.rng.chance(500) {
                            Req::client(
                                client,
                                Method::DELETE,
                                url,
                                None,
                                Target::Relation(c.id.clone(), segs.clone(), r.name.clone()),
                                format!(
                                    "c{client} delete {kind} {}.{} in {}",
                                    segs.join("."),
                                    r.name,
                                    c.display_name
                                ),
                            )
                        } else {
                            let body = match self.rng.below(3) {
                                0 => json!({"schema": schema(self.rng.below(2))}),
                                1 => json!({"name": *self.rng.pick(&REL_NAMES).unwrap_or(&"t1")}),
                                _ => json!({"properties": {"p": format!("{}", self.rng.below(9))}}),
                            };
                            let mut req = Req::client(
                                client,
                                Method::PATCH,
                                url,
                                Some(body.clone()),
                                Target::None,
                                format!(
                                    "c{client} patch {kind} {}.{} in {} {body}",
                                    segs.join("."),
                                    r.name,
                                    c.display_name
                                ),
                            );
                            self.if_match(&mut req, &r.id, r.revision);
                            req
                        }
                    }
                    None => self.gen_simple_get(client),
                },
                None => self.gen_simple_get(client),
            },
            54..=61 => {
                let name = *self.rng.pick(&INTEGRATION_NAMES).unwrap_or(&"int-a");
                let token = *self.rng.pick(&UPSTREAM_TOKENS).unwrap_or(&"up-tok-1");
                let body = json!({
                    "display_name": name, "type": "ICEBERG_REST", "uri": self.fx.uri(),
                    "authentication": {"type": "BEARER"}, "credentials": {"token": token},
                });
                self.create(
                    client,
                    format!("{base}/integrations"),
                    body,
                    format!("c{client} create integration {name}"),
                )
            }
            62..=65 => match self.rng.pick(&view.integrations).cloned() {
                Some(i) => {
                    let token = *self.rng.pick(&UPSTREAM_TOKENS).unwrap_or(&"up-tok-1");
                    let mut r = Req::client(
                        client,
                        Method::PUT,
                        format!("{base}/integrations/{}/authentication", i.id),
                        Some(json!({"credentials": {"token": token}})),
                        Target::None,
                        format!("c{client} rotate integration {}", i.display_name),
                    );
                    self.if_match(&mut r, &i.id, i.revision);
                    r
                }
                None => self.gen_simple_get(client),
            },
            66..=68 => match self.rng.pick(&view.integrations).cloned() {
                Some(i) => {
                    let body = if self.rng.chance(500) {
                        json!({"display_name": *self.rng.pick(&INTEGRATION_NAMES).unwrap_or(&"int-a")})
                    } else {
                        json!({"uri": self.fx.uri(), "properties": {"p": format!("{}", self.rng.below(9))}})
                    };
                    let mut r = Req::client(
                        client,
                        Method::PATCH,
                        format!("{base}/integrations/{}", i.id),
                        Some(body.clone()),
                        Target::None,
                        format!("c{client} patch integration {} {body}", i.display_name),
                    );
                    self.if_match(&mut r, &i.id, i.revision);
                    r
                }
                None => self.gen_simple_get(client),
            },
            69..=73 => match pick_id(
                &mut self.rng,
                view.integrations.iter().map(|i| i.id.clone()).collect(),
            ) {
                Some(id) => {
                    let cascade = self.rng.chance(600);
                    let q = if cascade { "?cascade=true" } else { "" };
                    Req::client(
                        client,
                        Method::DELETE,
                        format!("{base}/integrations/{id}{q}"),
                        None,
                        Target::Integration {
                            id: id.clone(),
                            cascade,
                        },
                        format!("c{client} delete integration {id}{q}"),
                    )
                }
                None => self.gen_simple_get(client),
            },
            74..=81 => {
                let i = self.rng.pick(&view.integrations).cloned();
                let c = self.rng.pick(&catalogs).cloned();
                match (i, c) {
                    (Some(i), Some(c)) => {
                        let name = *self.rng.pick(&OVERLAY_NAMES).unwrap_or(&"ovl-a");
                        let inc = self.rng.pick(&includes()).cloned().unwrap_or(json!([]));
                        self.create(
                            client,
                            format!("{base}/overlays"),
                            json!({"display_name": name, "integration_id": i.id, "catalog_id": c.id, "include_namespaces": inc}),
                            format!("c{client} create overlay {name} {} -> {} include {inc}", i.display_name, c.display_name),
                        )
                    }
                    _ => self.gen_simple_get(client),
                }
            }
            82..=84 => match self.rng.pick(&view.overlays).cloned() {
                Some(o) => {
                    let body = if self.rng.chance(500) {
                        json!({"include_namespaces": self.rng.pick(&includes()).cloned().unwrap_or(json!([]))})
                    } else {
                        json!({"display_name": *self.rng.pick(&OVERLAY_NAMES).unwrap_or(&"ovl-a")})
                    };
                    let mut r = Req::client(
                        client,
                        Method::PATCH,
                        format!("{base}/overlays/{}", o.id),
                        Some(body.clone()),
                        Target::None,
                        format!("c{client} patch overlay {} {body}", o.display_name),
                    );
                    self.if_match(&mut r, &o.id, o.revision);
                    r
                }
                None => self.gen_simple_get(client),
            },
            85..=89 => match pick_id(
                &mut self.rng,
                view.overlays.iter().map(|o| o.id.clone()).collect(),
            ) {
                Some(id) => Req::client(
                    client,
                    Method::DELETE,
                    format!("{base}/overlays/{id}"),
                    None,
                    Target::Overlay(id.clone()),
                    format!("c{client} delete overlay {id}"),
                ),
                None => self.gen_simple_get(client),
            },
            _ => self.gen_simple_get(client),
        }
    }

    fn gen_simple_get(&mut self, client: usize) -> Req {
        let account = CLIENTS[client].1;
        let what = *self
            .rng
            .pick(&["catalogs", "integrations", "overlays"])
            .unwrap_or(&"catalogs");
        Req::client(
            client,
            Method::GET,
            format!("/v1/accounts/{account}/{what}"),
            None,
            Target::None,
            format!("c{client} list {what}"),
        )
    }

    /// An admin of `acme` changes role `readers`: creates it, adds or removes `rita`, grants
    /// `READ` on a catalog or namespace, revokes a grant, or deletes the role.
    fn gen_acl_change(&mut self) -> Req {
        let client = self.rng.below(2);
        let base = "/v1/accounts/acme";
        let acl = self.prev.acl.get("acme").cloned().unwrap_or_default();
        let view = self.prev.accounts.get("acme").cloned().unwrap_or_default();
        let mk = |method, path: String, body, label: String| {
            Req::client(client, method, path, body, Target::None, label)
        };
        match self.rng.below(10) {
            0 => mk(
                Method::POST,
                format!("{base}/roles?on_conflict=return_existing"),
                Some(json!({"name": "readers"})),
                format!("c{client} create role readers"),
            ),
            1 | 2 => mk(
                Method::PUT,
                format!("{base}/roles/readers/members/rita"),
                None,
                format!("c{client} add rita to readers"),
            ),
            3 => mk(
                Method::DELETE,
                format!("{base}/roles/readers/members/rita"),
                None,
                format!("c{client} remove rita from readers"),
            ),
            4..=6 => {
                let catalog = self.rng.pick(&view.catalogs).cloned();
                let Some(c) = catalog else {
                    return self.gen_simple_get(client);
                };
                let namespaces = self
                    .prev
                    .catalogs
                    .get(&c.id)
                    .map(|v| v.namespaces.clone())
                    .unwrap_or_default();
                let securable = match self.rng.pick(&namespaces) {
                    Some(n) if self.rng.chance(600) => {
                        json!({"type": "NAMESPACE", "catalog_id": c.id, "path": n.path.segments()})
                    }
                    _ => json!({"type": "CATALOG", "catalog_id": c.id}),
                };
                mk(
                    Method::POST,
                    format!("{base}/grants?on_conflict=return_existing"),
                    Some(json!({"role": "readers", "privilege": "READ", "securable": securable})),
                    format!("c{client} grant readers READ on {securable}"),
                )
            }
            7 | 8 => match self.rng.pick(&acl.grants).cloned() {
                Some((id, ..)) => mk(
                    Method::DELETE,
                    format!("{base}/grants/{id}"),
                    None,
                    format!("c{client} revoke {id}"),
                ),
                None => self.gen_simple_get(client),
            },
            _ => mk(
                Method::DELETE,
                format!("{base}/roles/readers"),
                None,
                format!("c{client} delete role readers"),
            ),
        }
    }

    /// `rita` reads a catalog, a namespace or a table of `acme`, or tries to write one.
    fn gen_reader_request(&mut self) -> Req {
        let base = "/v1/accounts/acme/catalogs";
        let view = self.prev.accounts.get("acme").cloned().unwrap_or_default();
        let Some(c) = self.rng.pick(&view.catalogs).cloned() else {
            return Req::client(
                READER_CLIENT,
                Method::GET,
                base.to_owned(),
                None,
                Target::None,
                "reader list catalogs".into(),
            );
        };
        let cv = self.prev.catalogs.get(&c.id).cloned().unwrap_or_default();
        let ns = self
            .rng
            .pick(&cv.namespaces)
            .map(|n| ns_seg(n.path.segments()));
        let rel = self
            .rng
            .pick(&cv.relations)
            .map(|r| (ns_seg(r.namespace.segments()), r.name.clone()));
        let (method, path, body) = match (self.rng.below(6), ns, rel) {
            (0, _, _) => (Method::GET, format!("{base}/{}", c.id), None),
            (1 | 2, Some(n), _) => (Method::GET, format!("{base}/{}/namespaces/{n}", c.id), None),
            (3, _, Some((n, t))) => (
                Method::GET,
                format!("{base}/{}/namespaces/{n}/tables/{t}", c.id),
                None,
            ),
            (4, Some(n), _) => (
                Method::POST,
                format!("{base}/{}/namespaces/{n}/tables", c.id),
                Some(json!({"name": "by-reader", "schema": schema(0), "format": "ICEBERG"})),
            ),
            (_, _, Some((n, t))) => (
                Method::DELETE,
                format!("{base}/{}/namespaces/{n}/tables/{t}", c.id),
                None,
            ),
            _ => (Method::GET, format!("{base}/{}", c.id), None),
        };
        let label = format!("reader {method} {path}");
        Req::client(READER_CLIENT, method, path, body, Target::None, label)
    }

    fn gen_reconcile(&mut self) -> Option<Req> {
        let client = self.rng.below(CLIENTS.len());
        let account = CLIENTS[client].1;
        let view = self.prev.accounts.get(account)?;
        let o = self.rng.pick(&view.overlays)?.clone();
        Some(Req::client(
            client,
            Method::POST,
            format!("/v1/accounts/{account}/overlays/{}/reconcile", o.id),
            None,
            Target::Reconcile,
            format!("c{client} reconcile overlay {}", o.display_name),
        ))
    }

    fn mutate_upstream(&mut self) -> String {
        let pool = [vec!["sales"], vec!["sales", "eu"], vec!["hr"]];
        let ns = self.rng.pick(&pool).cloned().unwrap_or_default();
        let name = *self.rng.pick(&REL_NAMES).unwrap_or(&"orders");
        match self.rng.below(6) {
            0 | 1 => {
                self.fx
                    .add_table_with_schema(&ns, name, upstream_schema(self.rng.below(2)));
                format!("upstream: add table {}.{name}", ns.join("."))
            }
            2 => {
                let ok = self.fx.remove_table(&ns, name);
                format!("upstream: remove table {}.{name} ({ok})", ns.join("."))
            }
            3 => {
                let v = self.rng.below(4);
                let ok = self.fx.update_table_schema(&ns, name, upstream_schema(v));
                format!(
                    "upstream: schema of {}.{name} -> variant {v} ({ok})",
                    ns.join(".")
                )
            }
            4 => {
                self.fx.add_view(&ns, name, "SELECT 1", &["sales"]);
                format!("upstream: add view {}.{name}", ns.join("."))
            }
            _ => {
                let sub = *self.rng.pick(&["new", "tmp"]).unwrap_or(&"new");
                let mut p = ns.clone();
                p.push(sub);
                if self.rng.chance(500) {
                    self.fx.add_namespace(&p);
                    format!("upstream: add namespace {}", p.join("."))
                } else {
                    let ok = self.fx.remove_namespace(&p);
                    format!("upstream: remove namespace {} ({ok})", p.join("."))
                }
            }
        }
    }

    /// Plans credential-store faults for the next step.
    fn plan_credential_faults(&mut self) {
        let permille = plan_lock(&self.plan).tx_permille * 3;
        if permille == 0 || !self.rng.chance(permille) {
            return;
        }
        let op = *self
            .rng
            .pick(&[StoreOp::Put, StoreOp::Get, StoreOp::Delete])
            .unwrap_or(&StoreOp::Put);
        let kind = *self
            .rng
            .pick(&[
                FaultKind::FailBefore,
                FaultKind::UnknownNotApplied,
                FaultKind::UnknownApplied,
            ])
            .unwrap_or(&FaultKind::FailBefore);
        let nth = self.creds.calls(op) + 1 + self.rng.below(2) as u64;
        self.creds.inject(CredFault::new(op, nth, kind));
        self.note(format!(
            "  plan: credential store {op:?} call #{nth} -> {kind:?}"
        ));
    }
}

// ---- steps ---------------------------------------------------------------------------------

fn is_deleting(t: &Target) -> bool {
    !matches!(t, Target::None)
}

impl World {
    /// Checks one request's answers and updates what the simulation knows.
    fn absorb(&mut self, req: &Req, answers: &[(u16, Value)]) -> Result<(), String> {
        for (status, body) in answers {
            *self.stats.statuses.entry(*status).or_default() += 1;
            self.stats.requests += 1;
            if *status >= 500 && *status != 503 {
                return Err(format!("{}: answered {status} {body}", req.label));
            }
            if *status == 503
                && body["error"]["details"]
                    .as_object()
                    .is_some_and(|d| d.keys().any(|k| k != "error_id"))
            {
                return Err(format!(
                    "{}: a 503 carries more than an error_id: {body}",
                    req.label
                ));
            }
            if let Some(id) = body["id"].as_str()
                && req.method == Method::POST
                && body.get("display_name").is_some()
                && req.path.ends_with("/catalogs")
            {
                self.known_catalogs
                    .insert(id.to_owned(), req.account().unwrap_or("").to_owned());
            }
        }
        let Some((status, body)) = answers.last() else {
            return Ok(());
        };
        if req.client == READER_CLIENT && (200..300).contains(status) {
            self.reader_successes
                .push((req.method.clone(), req.path.clone(), req.label.clone()));
        }
        let line = format!("  -> {status} {}", short(body));
        self.note(line);
        if let Some(i) = req.keyed {
            let k = &mut self.keyed[i];
            if req.reused_key {
                if k.first.is_some() && !k.void && *status != 409 {
                    return Err(format!(
                        "{}: a different request under a used key answered {status} {body}, not 409",
                        req.label
                    ));
                }
            } else if (200..300).contains(status) {
                match &k.first {
                    None => k.first = Some((*status, body.clone())),
                    Some((s0, b0)) if !k.void => {
                        if (s0, b0) != (status, body) {
                            return Err(format!(
                                "{}: replay answered {status} {body}; the first answer was {s0} {b0}",
                                req.label
                            ));
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// One step: a lone request, a concurrent group, a reconcile, an upstream change, or a
    /// clock jump.
    pub async fn step(&mut self) -> Result<(), String> {
        self.step += 1;
        self.stats.steps += 1;
        let roll = self.rng.below(100);
        let mut allowed: Vec<Target> = Vec::new();
        let mut acked_creates: Vec<String> = Vec::new();
        if roll < 6 {
            let m = self.mutate_upstream();
            self.note(format!("#{} {m}", self.step));
        } else if roll < 8 {
            let ms = *self
                .rng
                .pick(&[1_000i64, 31_000, 3_600_000])
                .unwrap_or(&1000);
            self.clock.advance_ms(ms);
            self.note(format!("#{} clock +{ms} ms", self.step));
        } else if roll < 10 {
            // Account delete (operator) or re-create.
            let a = *self.rng.pick(&ACCOUNTS).unwrap_or(&"acme");
            let view = self.prev.accounts.get(a).cloned().unwrap_or_default();
            let req = if view.exists || view.fenced {
                if !self.rng.chance(400) {
                    return Ok(());
                }
                for k in self.keyed.iter_mut().filter(|k| k.account == a) {
                    k.void = true;
                }
                Req::operator(
                    Method::DELETE,
                    &format!("/v1/accounts/{a}"),
                    None,
                    Target::Account(a.to_owned()),
                    &format!("operator delete account {a}"),
                )
            } else {
                Req::operator(
                    Method::POST,
                    "/v1/accounts",
                    Some(json!({"id": a})),
                    Target::None,
                    &format!("operator create account {a}"),
                )
            };
            allowed.push(req.target.clone());
            self.run_lone(&req).await?;
        } else if roll < 20 {
            let Some(req) = self.gen_reconcile() else {
                return self.check_after(&allowed, &acked_creates).await;
            };
            self.stats.reconciles += 1;
            allowed.push(req.target.clone());
            // Real loopback I/O: the paused clock would jump to the next timer (an HTTP
            // timeout) whenever the thread waits for the fixture, so time runs for real while
            // the reconcile (alone) runs.
            let watch = self.watch_run(&req).await;
            tokio::time::resume();
            let r = self.run_lone(&req).await;
            tokio::time::pause();
            r?;
            if let Some(w) = watch {
                self.check_failed_run(w).await?;
            }
        } else if roll < 28 {
            // Access control: an admin changes roles and grants, or the reader tries its luck.
            let req = if self.rng.chance(500) {
                self.gen_acl_change()
            } else {
                self.gen_reader_request()
            };
            allowed.push(req.target.clone());
            self.run_lone(&req).await?;
        } else if roll < 40 {
            // Concurrent group: two or three clients at once.
            self.stats.concurrent_steps += 1;
            let n = 2 + self.rng.below(2);
            let mut clients: Vec<usize> = (0..CLIENTS.len()).collect();
            let mut reqs = Vec::new();
            for _ in 0..n {
                let c = clients.remove(self.rng.below(clients.len()));
                reqs.push(self.gen_request(c));
            }
            // Now and then the reader races an admin's grant or revoke.
            if self.rng.chance(300) {
                reqs.push(self.gen_acl_change());
                reqs.push(self.gen_reader_request());
            }
            self.plan_credential_faults();
            self.note(format!("#{} concurrently:", self.step));
            for r in &reqs {
                self.note(format!("  {}", r.label));
                allowed.push(r.target.clone());
            }
            plan_lock(&self.plan).concurrent = true;
            self.set_faults(true);
            let answers = {
                let this = &*self;
                futures::future::join_all(reqs.iter().map(|r| this.send_with_retries(r))).await
            };
            self.set_faults(false);
            plan_lock(&self.plan).concurrent = false;
            for (req, ans) in reqs.iter().zip(answers.iter()) {
                self.note(format!("  [{}]", req.label));
                self.absorb(req, ans)?;
            }
            if !allowed.iter().any(is_deleting) {
                for (req, ans) in reqs.iter().zip(answers.iter()) {
                    // Roles and grants are checked by their own invariants.
                    let acl = req.path.contains("/roles") || req.path.contains("/grants");
                    if let Some((201, b)) = ans.last()
                        && !req.replay
                        && !acl
                        && let Some(id) = b["id"].as_str()
                    {
                        acked_creates.push(format!("{id} ({})", req.label));
                    }
                }
            }
        } else {
            let client = self.rng.below(CLIENTS.len());
            let req = self.gen_request(client);
            allowed.push(req.target.clone());
            if let Some(id) = self.run_lone(&req).await? {
                acked_creates.push(format!("{id} ({})", req.label));
            }
        }
        self.check_after(&allowed, &acked_creates).await
    }

    /// Runs a request alone with seeded faults; answers the id of an acknowledged create.
    async fn run_lone(&mut self, req: &Req) -> Result<Option<String>, String> {
        self.plan_credential_faults();
        self.note(format!("#{} {}", self.step, req.label));
        self.set_faults(true);
        let answers = self.send_with_retries(req).await;
        self.set_faults(false);
        self.last_attempts = answers.len();
        for (s, _) in &answers[..answers.len().saturating_sub(1)] {
            self.note(format!("  (retried after {s})"));
        }
        self.absorb(req, &answers)?;
        match answers.last() {
            Some((201, b))
                if !is_deleting(&req.target) && !req.replay && b.get("etag").is_some() =>
            {
                Ok(b["id"].as_str().map(str::to_owned))
            }
            _ => Ok(None),
        }
    }

    /// The overlay's status item and its target catalog's namespaces, relations and claims
    /// before a reconcile step.
    async fn watch_run(&self, req: &Req) -> Option<RunWatch> {
        let account = req.account()?.to_owned();
        let overlay = req
            .path
            .strip_suffix("/reconcile")?
            .rsplit('/')
            .next()?
            .to_owned();
        let catalog = self
            .prev
            .accounts
            .get(&account)?
            .overlays
            .iter()
            .find(|o| o.id == overlay)?
            .catalog_id
            .clone();
        let raw: &dyn Metastore = self.faults.inner();
        let flotilla_metastore::Key { pk, sk } = keys::overlay_status(&account, &overlay);
        let status = raw
            .get(&Key::new(pk, sk), Consistency::Strong)
            .await
            .ok()
            .flatten()
            .map(|i| i.body);
        let rows = catalog_rows(raw, &catalog).await;
        Some(RunWatch {
            account,
            overlay,
            catalog,
            status,
            rows,
        })
    }

    /// Invariant: a failed run publishes nothing and retires nothing. Checked when the step
    /// was one attempt (a retried request may have published in an earlier attempt) and
    /// the run recorded its outcome.
    async fn check_failed_run(&mut self, w: RunWatch) -> Result<(), String> {
        if self.last_attempts != 1 {
            return Ok(());
        }
        let raw: &dyn Metastore = self.faults.inner();
        let flotilla_metastore::Key { pk, sk } = keys::overlay_status(&w.account, &w.overlay);
        let Some(after) = raw
            .get(&Key::new(pk, sk), Consistency::Strong)
            .await
            .ok()
            .flatten()
        else {
            return Ok(());
        };
        if w.status.as_deref() == Some(after.body.as_slice()) {
            return Ok(());
        }
        let status: Value = serde_json::from_slice(&after.body).unwrap_or(Value::Null);
        let run = &status["last_reconcile"];
        if run["outcome"] != "FAILED" {
            return Ok(());
        }
        let stage = run["error"]["stage"].as_str().unwrap_or("");
        self.stats.failed_runs += 1;
        let rows = catalog_rows(raw, &w.catalog).await;
        if matches!(stage, "CONNECT" | "DISCOVERY" | "PREFLIGHT") {
            if rows != w.rows {
                let before: BTreeSet<&String> = w.rows.iter().map(|r| &r.0).collect();
                let now: BTreeSet<&String> = rows.iter().map(|r| &r.0).collect();
                return Err(format!(
                    "overlay {}: a run that failed in {stage} ({}) changed its catalog: added {:?}, removed {:?}",
                    w.overlay,
                    run["error"]["code"],
                    now.difference(&before).collect::<Vec<_>>(),
                    before.difference(&now).collect::<Vec<_>>()
                ));
            }
        } else if stage == "PUBLICATION" {
            let now: BTreeMap<&String, &Vec<u8>> = rows.iter().map(|(k, v)| (k, v)).collect();
            for (k, body) in &w.rows {
                if now.contains_key(k) {
                    continue;
                }
                if k.starts_with("NS#") || k.starts_with("CLAIM#") {
                    return Err(format!(
                        "overlay {}: a run that failed while publishing removed {k}",
                        w.overlay
                    ));
                }
                // A relation slot that vanished: allowed only as a move of its identity.
                let Ok(rec) = serde_json::from_slice::<RelationRecord>(body) else {
                    continue;
                };
                if rec
                    .managed_by
                    .as_ref()
                    .is_some_and(|m| m.overlay_id == w.overlay)
                {
                    let moved = rows.iter().any(|(_, b)| {
                        serde_json::from_slice::<RelationRecord>(b).is_ok_and(|r| r.id == rec.id)
                    });
                    if !moved {
                        return Err(format!(
                            "overlay {}: a run that failed while publishing retired {}.{}",
                            w.overlay,
                            rec.namespace.segments().join("."),
                            rec.name
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    async fn check_after(&mut self, allowed: &[Target], acked: &[String]) -> Result<(), String> {
        let snap = self.check(allowed).await?;
        for a in acked {
            let id = a.split(' ').next().unwrap_or("");
            // Accounts have no id in `ids`; index catalogs are not simulated.
            if !snap.ids.contains_key(id) && !a.contains("create account") {
                return Err(format!("acknowledged create {a} is not in the store"));
            }
        }
        self.stats.faults = plan_lock(&self.plan).injected;
        self.prev = snap;
        Ok(())
    }

    /// Faults off; every interrupted delete is retried to completion; then the strict
    /// checks: no fence, guard or half-deleted account is left behind.
    pub async fn quiesce(&mut self) -> Result<(), String> {
        self.set_faults(false);
        self.clock.advance_ms(120_000); // past every guard lease
        self.note("quiesce: retry interrupted deletes without faults".into());
        for a in ACCOUNTS {
            let items = scan(self.faults.inner(), &keys::account_pk(a)).await;
            if items.iter().any(|i| i.key.sk == "FENCE#DELETE") {
                let req = Req::operator(
                    Method::DELETE,
                    &format!("/v1/accounts/{a}"),
                    None,
                    Target::Account(a.to_owned()),
                    "quiesce: account delete",
                );
                let ans = self.send(&req).await;
                self.note(format!("  account {a} delete -> {}", ans.0));
                if ans.0 != 204 {
                    return Err(format!(
                        "resuming the delete of account {a} answered {} {}",
                        ans.0, ans.1
                    ));
                }
                self.check_after(std::slice::from_ref(&req.target), &[])
                    .await?;
                continue;
            }
            for item in &items {
                let client = CLIENTS.iter().position(|c| c.1 == a).unwrap_or(0);
                let (path, target) = if let Some(id) = item.key.sk.strip_prefix("OVLFENCE#") {
                    (
                        format!("/v1/accounts/{a}/overlays/{id}"),
                        Target::Overlay(id.to_owned()),
                    )
                } else if let Some(id) = item.key.sk.strip_prefix("INTFENCE#") {
                    (
                        format!("/v1/accounts/{a}/integrations/{id}?cascade=true"),
                        Target::Integration {
                            id: id.to_owned(),
                            cascade: true,
                        },
                    )
                } else {
                    continue;
                };
                // An earlier resumption (a cascade) may have finished this one already.
                if matches!(
                    self.faults
                        .inner()
                        .get(&item.key, Consistency::Strong)
                        .await,
                    Ok(None)
                ) {
                    continue;
                }
                let req = Req::client(
                    client,
                    Method::DELETE,
                    path.clone(),
                    None,
                    target.clone(),
                    format!("quiesce: {path}"),
                );
                let ans = self.send(&req).await;
                self.note(format!("  {path} -> {}", ans.0));
                let durable = item
                    .json::<Value>()
                    .ok()
                    .is_some_and(|v| v["durable"] == true);
                if durable && ans.0 != 204 {
                    return Err(format!("resuming {path} answered {} {}", ans.0, ans.1));
                }
                self.check_after(&[target], &[]).await?;
            }
        }
        for a in ACCOUNTS {
            for item in scan(self.faults.inner(), &keys::account_pk(a)).await {
                let sk = &item.key.sk;
                let durable = item
                    .json::<Value>()
                    .ok()
                    .is_some_and(|v| v["durable"] == true);
                if sk == "FENCE#DELETE"
                    || sk.starts_with("OVLFENCE#")
                    || (sk.starts_with("INTFENCE#") && durable)
                {
                    return Err(format!(
                        "{a}: {sk} is still present after every delete was resumed"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 240 {
        format!("{}...", &s[..s.floor_char_boundary(240)])
    } else {
        s
    }
}

// ---- driver -------------------------------------------------------------------------------

/// Runs one seed to completion on its own paused current-thread runtime.
pub fn run_seed(seed: u64, steps: usize, log: Arc<Mutex<Vec<String>>>) -> Result<Stats, String> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Err(format!("runtime: {e}")),
    };
    flotilla_core::service::seed_retry_jitter(Some(seed));
    let out = rt.block_on(async {
        let mut w = World::new(seed, log).await;
        w.prev = w.check(&[]).await?;
        for _ in 0..steps {
            w.step().await?;
        }
        w.quiesce().await?;
        Ok(w.stats.clone())
    });
    flotilla_core::service::seed_retry_jitter(None);
    out
}
