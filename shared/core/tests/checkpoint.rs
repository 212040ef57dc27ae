//! Checkpointed runs (`docs/reconciliation.md`, "Checkpointed runs"): a queued run longer than
//! its time budget continues in follow-up legs and converges to the catalog a single run
//! would publish; retirement waits for the complete discovery; a change between two legs
//! stops the chain; a crash at every checkpoint and every transaction of a leg converges; a
//! leg delivered twice is harmless.
//!
//! Time is the harness's manual clock: every table listing costs one second of it, the
//! budget is three seconds, and a batch holds two namespaces, so a run over seven namespaces
//! takes several legs.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::collections::{BTreeSet, VecDeque};

use async_trait::async_trait;
use flotilla_catalog_access::spi::{
    CatalogCapabilities, CatalogClient, CatalogProtocol, LoadTableOutcome, Page,
    Result as CaResult, TableIdent, UpstreamNamespace, VendedCredentials, ViewMetadata,
};
use flotilla_core::clock::ManualClock;
use flotilla_core::reconcile::schedule::{WorkMessage, handle_work_with, tick};
use flotilla_core::reconcile::work::{MessageOutcome, ReconcileMessage};
use flotilla_core::reconcile::{AdapterConnector, Connector, Limits, ReconcileError, RunOptions};
use flotilla_core::{AppState, Config};
use flotilla_domain::keys;
use flotilla_domain::model::IntegrationRecord;
use flotilla_metastore::fault::Fault;
use overlay_env::*;
use serde_json::json;
use support::*;

const NAMESPACES: usize = 7;
const BUDGET_MS: i64 = 3_000;
const STEP_MS: i64 = 1_000;

fn opts() -> RunOptions {
    RunOptions {
        namespaces_per_batch: 2,
        ..RunOptions::default()
    }
}

/// A client that takes `step_ms` of the manual clock for every table listing.
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

struct SlowConnector(ManualClock);

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
            step_ms: STEP_MS,
        }))
    }
}

fn ns(n: usize) -> String {
    format!("ns{n:02}")
}

/// `NAMESPACES` namespaces of two tables each; one overlay over everything.
async fn fresh_env() -> Env {
    let fx = fixture().await;
    for n in 0..NAMESPACES {
        fx.add_namespace(&[&ns(n)]);
        fx.add_table(&[&ns(n)], "t0");
        fx.add_table(&[&ns(n)], "t1");
    }
    let config = Config {
        allow_insecure_upstreams: true,
        reconcile: Limits {
            run_budget_ms: BUDGET_MS,
            ..Limits::default()
        },
        ..Config::default()
    };
    Env::with(Kind::Redb, fx, json!([]), config, true).await
}

fn clock(env: &Env) -> ManualClock {
    env.h.clock.as_ref().expect("manual clock").clone()
}

/// The plan message the next tick sends for the environment's integration.
async fn plan(env: &Env) -> WorkMessage {
    let now = env.h.state.clock.now_ms();
    let t = tick(env.dyn_store(), now, 500).await.expect("tick");
    assert_eq!(t.messages.len(), 1, "{:?}", t.messages);
    WorkMessage::Plan(t.messages[0].clone())
}

async fn overlay_message(env: &Env) -> WorkMessage {
    let r = env.h.get(&ovl_path(&env.overlay), ACME).await;
    WorkMessage::Overlay(ReconcileMessage {
        account_id: "acme".into(),
        overlay_id: env.overlay.clone(),
        observed_generation: r.body["generation"].as_u64().expect("generation"),
    })
}

async fn deliver(env: &Env, m: &WorkMessage) -> MessageOutcome {
    handle_work_with(&env.h.state, &SlowConnector(clock(env)), m, &opts()).await
}

fn follow_up(o: &MessageOutcome) -> Option<WorkMessage> {
    match o {
        MessageOutcome::Continued { next } => Some(next.as_ref().clone()),
        _ => None,
    }
}

/// Delivers `first` and what follows, as the queue would: a follow-up is queued, a failure
/// the queue redelivers is delivered again. Answers every outcome.
async fn drive(env: &Env, first: WorkMessage) -> Vec<MessageOutcome> {
    let mut queue = VecDeque::from([first]);
    let mut out = Vec::new();
    while let Some(m) = queue.pop_front() {
        assert!(out.len() < 60, "the chain does not end: {out:?}");
        let o = deliver(env, &m).await;
        if let Some(next) = follow_up(&o) {
            queue.push_back(next);
        } else if o.redeliver() {
            queue.push_back(m);
        }
        out.push(o);
    }
    out
}

fn legs(outcomes: &[MessageOutcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, MessageOutcome::Continued { .. }))
        .count()
}

async fn checkpoint_items(env: &Env) -> usize {
    items(
        env.dyn_store(),
        &keys::account_pk("acme"),
        keys::CHECKPOINT_PREFIX,
    )
    .await
    .len()
}

/// What a converged catalog holds: relation names, namespace paths, this overlay's claims.
async fn shape(env: &Env) -> (Vec<String>, Vec<Vec<String>>, Vec<Vec<String>>) {
    (
        env.rel_names().await,
        env.ns_paths().await,
        env.claim_paths(&env.overlay).await,
    )
}

fn expected_names(namespaces: &[usize], skip: &[(usize, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for n in namespaces {
        for t in ["t0", "t1"] {
            if !skip.contains(&(*n, t)) {
                out.push(format!("{}.{t}", ns(*n)));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_run_over_its_budget_continues_in_legs_and_retires_after_the_complete_discovery() {
    let env = fresh_env().await;
    let outcomes = drive(&env, plan(&env).await).await;
    assert!(legs(&outcomes) >= 2, "{outcomes:?}");
    assert!(
        matches!(
            outcomes.last(),
            Some(MessageOutcome::Planned { reconciled: 1 })
        ),
        "{outcomes:?}"
    );
    let all: Vec<usize> = (0..NAMESPACES).collect();
    assert_eq!(env.rel_names().await, expected_names(&all, &[]));
    env.assert_consistent().await;
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "SUCCEEDED", "{run}");
    assert_eq!(run["tables"]["created"], 2 * NAMESPACES as u64, "{run}");
    assert_eq!(
        checkpoint_items(&env).await,
        0,
        "the finished chain leaves nothing"
    );

    // Upstream drops: a table of the first batch, and the last namespace.
    assert!(env.fx.remove_table(&[&ns(0)], "t0"));
    assert!(env.fx.remove_table(&[&ns(NAMESPACES - 1)], "t0"));
    assert!(env.fx.remove_table(&[&ns(NAMESPACES - 1)], "t1"));
    assert!(env.fx.remove_namespace(&[&ns(NAMESPACES - 1)]));
    clock(&env).advance_ms(3_600_000 + 1);
    let first = deliver(&env, &plan(&env).await).await;
    let next = follow_up(&first).expect("a chain");
    // Leg 1 completed the first namespace and saw its table gone: retirement waits.
    assert!(env.rel(&[&ns(0)], "t0").await.is_some());
    assert!(checkpoint_items(&env).await > 0);
    let rest = drive(&env, next).await;
    assert!(
        matches!(rest.last(), Some(MessageOutcome::Planned { reconciled: 1 })),
        "{rest:?}"
    );
    let kept: Vec<usize> = (0..NAMESPACES - 1).collect();
    assert_eq!(env.rel_names().await, expected_names(&kept, &[(0, "t0")]));
    assert!(
        !env.ns_paths().await.contains(&vec![ns(NAMESPACES - 1)]),
        "the vanished namespace the overlay created is pruned"
    );
    env.assert_consistent().await;
    let run = env.last_run().await;
    assert_eq!(run["outcome"], "SUCCEEDED", "{run}");
    assert_eq!(run["tables"]["retired"], 3, "{run}");
    assert_eq!(checkpoint_items(&env).await, 0);

    // A no-op rerun writes the status and the checkpoint items only.
    clock(&env).advance_ms(3_600_000 + 1);
    let before = env.catalog_items().await;
    let rerun = drive(&env, plan(&env).await).await;
    assert!(legs(&rerun) >= 2, "{rerun:?}");
    assert_eq!(env.catalog_items().await, before);
}

#[tokio::test]
async fn an_overlay_message_runs_the_same_chain() {
    let env = fresh_env().await;
    let outcomes = drive(&env, overlay_message(&env).await).await;
    assert!(legs(&outcomes) >= 2, "{outcomes:?}");
    assert!(
        matches!(outcomes.last(), Some(MessageOutcome::Reconciled(_))),
        "{outcomes:?}"
    );
    let all: Vec<usize> = (0..NAMESPACES).collect();
    assert_eq!(env.rel_names().await, expected_names(&all, &[]));
    assert_eq!(checkpoint_items(&env).await, 0);
    env.assert_consistent().await;
}

/// The changes that must stop a chain between two legs.
#[derive(Clone, Copy, Debug)]
enum Change {
    Selection,
    Rename,
    PauseOverlay,
    PauseIntegration,
    IntegrationUri,
    DeleteOverlay,
}

async fn apply(env: &Env, change: Change) {
    let ip = format!("/v1/accounts/acme/integrations/{}", env.integration);
    let op = ovl_path(&env.overlay);
    let r = match change {
        Change::Selection => {
            let sel = json!({"include_namespaces": [[ns(0)], [ns(1)], [ns(2)]]});
            env.h.patch(&op, ACME, sel, Some("*")).await
        }
        Change::Rename => {
            env.h
                .patch(&op, ACME, json!({"display_name": "renamed"}), None)
                .await
        }
        Change::PauseOverlay => env.h.patch(&op, ACME, json!({"paused": true}), None).await,
        Change::PauseIntegration => env.h.patch(&ip, ACME, json!({"paused": true}), None).await,
        Change::IntegrationUri => {
            let uri = format!("{}/", env.fx.uri().trim_end_matches('/'));
            let uri = if uri == env.fx.uri() {
                env.fx.uri().trim_end_matches('/').to_owned()
            } else {
                uri
            };
            env.h.patch(&ip, ACME, json!({"uri": uri}), Some("*")).await
        }
        Change::DeleteOverlay => env.h.delete(&op, ACME).await,
    };
    assert!(r.status.is_success(), "{change:?}: {:?}", r.body);
}

#[tokio::test]
async fn a_change_between_two_legs_stops_the_chain() {
    for change in [
        Change::Selection,
        Change::Rename,
        Change::PauseOverlay,
        Change::PauseIntegration,
        Change::IntegrationUri,
        Change::DeleteOverlay,
    ] {
        let env = fresh_env().await;
        let first = deliver(&env, &plan(&env).await).await;
        let next = follow_up(&first).unwrap_or_else(|| panic!("{change:?}: {first:?}"));
        let published = env.catalog_items().await;
        apply(&env, change).await;
        let after_change = env.catalog_items().await;
        let o = deliver(&env, &next).await;
        assert!(follow_up(&o).is_none(), "{change:?}: {o:?}");
        assert_eq!(
            env.catalog_items().await,
            after_change,
            "{change:?}: the next leg publishes nothing"
        );
        // A redelivery of the stopped leg does nothing either.
        let again = deliver(&env, &next).await;
        assert!(follow_up(&again).is_none(), "{change:?}: {again:?}");
        assert!(!published.is_empty());
        match change {
            Change::PauseOverlay | Change::PauseIntegration | Change::DeleteOverlay => {
                let now = env.h.state.clock.now_ms();
                let t = tick(env.dyn_store(), now, 500).await.expect("tick");
                for m in t.messages {
                    let out = drive(&env, WorkMessage::Plan(m)).await;
                    assert_eq!(legs(&out), 0, "{change:?}: no demand, no run: {out:?}");
                }
            }
            _ => {
                // The next schedule starts afresh and converges to the new configuration.
                clock(&env).advance_ms(5 * 60_000 + 1);
                let out = drive(&env, plan(&env).await).await;
                assert!(
                    matches!(out.last(), Some(MessageOutcome::Planned { reconciled: 1 })),
                    "{change:?}: {out:?}"
                );
                let wanted: Vec<usize> = match change {
                    Change::Selection => vec![0, 1, 2],
                    _ => (0..NAMESPACES).collect(),
                };
                assert_eq!(
                    env.rel_names().await,
                    expected_names(&wanted, &[]),
                    "{change:?}"
                );
                assert_eq!(checkpoint_items(&env).await, 0, "{change:?}");
                env.assert_consistent().await;
            }
        }
    }
}

/// The reference: what an uninterrupted chain publishes.
async fn reference() -> (Vec<String>, Vec<Vec<String>>, Vec<Vec<String>>) {
    let env = fresh_env().await;
    drive(&env, plan(&env).await).await;
    shape(&env).await
}

#[tokio::test]
async fn a_crash_at_every_checkpoint_converges() {
    let want = reference().await;
    // After the checkpoint was written, before the follow-up was sent: the message is
    // redelivered, finds its leg done and sends the follow-up again.
    let env = fresh_env().await;
    let m = plan(&env).await;
    let first = deliver(&env, &m).await;
    assert!(follow_up(&first).is_some());
    let out = drive(&env, m.clone()).await;
    assert!(
        matches!(out.first(), Some(MessageOutcome::Continued { .. })),
        "{out:?}"
    );
    assert_eq!(shape(&env).await, want);
    assert_eq!(checkpoint_items(&env).await, 0);

    // After the follow-up was sent, before the leg was acknowledged: both the follow-up and
    // the redelivered leg arrive.
    let env = fresh_env().await;
    let m = plan(&env).await;
    let first = deliver(&env, &m).await;
    let next = follow_up(&first).expect("a chain");
    drive(&env, next).await;
    drive(&env, m).await;
    assert_eq!(shape(&env).await, want);
    assert_eq!(checkpoint_items(&env).await, 0);
    env.assert_consistent().await;
}

#[tokio::test]
async fn a_crash_at_every_transaction_of_a_leg_converges() {
    let want = reference().await;
    // Which transactions leg 2 makes.
    let env = fresh_env().await;
    let m = plan(&env).await;
    let next = follow_up(&deliver(&env, &m).await).expect("a chain");
    let from = env.faults().transacts();
    deliver(&env, &next).await;
    let to = env.faults().transacts();
    assert!(to > from + 2, "leg 2 made {} transactions", to - from);
    for n in from + 1..=to {
        for fault in [Fault::FailBeforeApply, Fault::ApplyThenUnknown] {
            let env = fresh_env().await;
            let m = plan(&env).await;
            let next = follow_up(&deliver(&env, &m).await).expect("a chain");
            assert_eq!(env.faults().transacts(), from, "deterministic setup");
            env.faults().fail_transact(n, fault);
            drive(&env, next).await;
            // The message that started the chain may also come again.
            drive(&env, m).await;
            assert_eq!(
                shape(&env).await,
                want,
                "crash at transaction {n} ({fault:?})"
            );
            assert_eq!(checkpoint_items(&env).await, 0, "{n} {fault:?}");
            let run = env.last_run().await;
            assert_eq!(run["outcome"], "SUCCEEDED", "{n} {fault:?}: {run}");
            env.assert_consistent().await;
        }
    }
}

#[tokio::test]
async fn a_leg_delivered_twice_is_harmless() {
    let want = reference().await;
    let env = fresh_env().await;
    let next = follow_up(&deliver(&env, &plan(&env).await).await).expect("a chain");
    // Two deliveries of leg 2 at once: one advances the chain, the other publishes the same
    // objects (idempotent) and loses the checkpoint, or finds the leg done.
    let (a, b) = tokio::join!(deliver(&env, &next), deliver(&env, &next));
    let mut queue: Vec<WorkMessage> = [&a, &b].into_iter().filter_map(follow_up).collect();
    assert!(!queue.is_empty(), "{a:?} {b:?}");
    for m in queue.drain(..) {
        drive(&env, m).await;
    }
    // And once more after the chain finished: nothing happens.
    let late = deliver(&env, &next).await;
    assert!(follow_up(&late).is_none(), "{late:?}");
    assert_eq!(shape(&env).await, want);
    assert_eq!(checkpoint_items(&env).await, 0);
    let names: BTreeSet<String> = env.rel_names().await.into_iter().collect();
    assert_eq!(names.len(), 2 * NAMESPACES);
    env.assert_consistent().await;
}

#[tokio::test]
async fn a_follow_up_message_names_its_chain_and_round_trips() {
    let env = fresh_env().await;
    let m = plan(&env).await;
    let next = follow_up(&deliver(&env, &m).await).expect("a chain");
    let body = next.to_body();
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(v["checkpoint"]["run"].is_string(), "{body}");
    assert_eq!(v["checkpoint"]["leg"], 2, "{body}");
    assert_eq!(v["integration_id"], env.integration.as_str(), "{body}");
    assert_eq!(WorkMessage::parse(&body).expect("parse"), next);
    // A follow-up's checkpoint refuses unknown fields like every message body.
    let mut bad = v.clone();
    bad["checkpoint"]["extra"] = json!(1);
    assert!(WorkMessage::parse(&bad.to_string()).is_err());
}
