//! The scheduler's tick lease (`docs/reconciliation.md`, "Scheduling"; `docs/reliability.md`):
//! two overlapping ticks never both enqueue the same due work, a crashed tick's lease is
//! taken over once it expires on the injected clock, and a failed tick releases it.

#[path = "support/overlay_env.rs"]
mod overlay_env;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use flotilla_core::Config;
use flotilla_core::reconcile::schedule::{TICK_LEASE_MS, tick};
use flotilla_domain::keys;
use flotilla_metastore::fault::Fault;
use flotilla_metastore::{
    Consistency, Item, Key, Metastore, MetastoreError, Op, Page, Query, Transaction,
};
use overlay_env::*;
use serde_json::json;
use support::*;
use tokio::sync::Notify;

async fn env_on(kind: Kind) -> Env {
    let config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    let env = Env::with(kind, sample_fixture().await, json!([["hr"]]), config, true).await;
    // A second integration, so a tick has two due entries.
    let catalog = env.h.catalog("acme", ACME, "extra").await;
    let integration = create_integration(&env.h, &env.fx.uri(), "up2").await;
    create_overlay(&env.h, "ovl2", &integration, &catalog, json!([["hr"]])).await;
    env
}

fn now(env: &Env) -> i64 {
    env.h.state.clock.now_ms()
}

async fn lease_item(env: &Env) -> Option<Item> {
    env.dyn_store()
        .get(&keys::tick_lease(), Consistency::Strong)
        .await
        .expect("read the lease")
}

/// A store whose first query waits until the test releases it: a tick held mid-way, after
/// it took the lease and while it reads the due index.
struct HeldStore {
    inner: Arc<Store>,
    armed: AtomicBool,
    entered: Notify,
    release: Notify,
}

#[async_trait]
impl Metastore for HeldStore {
    async fn get(&self, key: &Key, c: Consistency) -> Result<Option<Item>, MetastoreError> {
        self.inner.get(key, c).await
    }
    async fn batch_get(&self, keys: &[Key], c: Consistency) -> Result<Vec<Item>, MetastoreError> {
        self.inner.batch_get(keys, c).await
    }
    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.query(query).await
    }
    async fn count(&self, pk: &str, sk: &str, c: Consistency) -> Result<u64, MetastoreError> {
        self.inner.count(pk, sk, c).await
    }
    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        self.inner.transact(tx).await
    }
}

both_backends!(redb: (Kind::Redb), dynamo: (Kind::Dynamo);
    overlapping_ticks_enqueue_the_due_work_once,
    a_crashed_ticks_lease_is_taken_over_once_it_expires,
);

async fn overlapping_ticks_enqueue_the_due_work_once(kind: Kind) {
    let env = env_on(kind).await;
    let held = Arc::new(HeldStore {
        inner: env.store.clone(),
        armed: AtomicBool::new(true),
        entered: Notify::new(),
        release: Notify::new(),
    });
    let at = now(&env);
    let first = tokio::spawn({
        let held = held.clone();
        async move { tick(held.as_ref(), at, 500).await }
    });
    held.entered.notified().await;
    assert!(
        lease_item(&env).await.is_some(),
        "the first tick holds the lease"
    );
    // A second delivery of the same schedule, while the first tick runs.
    let second = tick(env.dyn_store(), at, 500).await.expect("second tick");
    assert!(second.held_elsewhere, "{second:?}");
    assert!(second.messages.is_empty(), "{:?}", second.messages);
    held.release.notify_one();
    let first = first.await.expect("join").expect("first tick");
    assert!(!first.held_elsewhere);
    assert_eq!(first.messages.len(), 2, "{:?}", first.messages);
    assert!(lease_item(&env).await.is_none(), "released at the end");
    // The next tick runs (no plan job ran, so the same work is still due).
    let next = tick(env.dyn_store(), at, 500).await.expect("next tick");
    assert!(!next.held_elsewhere);
    assert_eq!(next.messages.len(), 2);
}

async fn a_crashed_ticks_lease_is_taken_over_once_it_expires(kind: Kind) {
    let env = env_on(kind).await;
    let clock = env.h.clock.clone().expect("manual clock");
    // A tick that crashed holding the lease.
    let body = serde_json::to_vec(&json!({ "expires_ms": now(&env) + TICK_LEASE_MS })).unwrap();
    env.dyn_store()
        .transact(Transaction::new().with(Op::create(keys::tick_lease(), body)))
        .await
        .expect("plant a lease");
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert!(t.held_elsewhere && t.messages.is_empty(), "{t:?}");
    clock.advance_ms(TICK_LEASE_MS - 1);
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert!(t.held_elsewhere, "not expired yet: {t:?}");
    clock.advance_ms(1);
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert!(!t.held_elsewhere, "taken over at its expiry");
    assert_eq!(t.messages.len(), 2, "{:?}", t.messages);
    assert!(lease_item(&env).await.is_none());
}

/// A tick that fails (the store refuses a read of the index) releases the lease, so the next
/// tick does not wait for its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_tick_releases_the_lease() {
    let env = env_on(Kind::Redb).await;
    let calls = env.faults().calls();
    // The tick's calls: the lease create (1), the cursor read (2), the first index query (3).
    env.faults().fail_call(calls + 3, Fault::FailBeforeApply);
    let err = tick(env.dyn_store(), now(&env), 500).await;
    assert!(err.is_err(), "{err:?}");
    assert!(env.faults().injected() > 0, "the fault was hit");
    assert!(
        lease_item(&env).await.is_none(),
        "released after the failure"
    );
    let t = tick(env.dyn_store(), now(&env), 500).await.expect("tick");
    assert!(!t.held_elsewhere);
    assert_eq!(t.messages.len(), 2);
}
