//! Fault injection by decorator, for testing protocols at every crash point.
//!
//! A protocol that spans several transactions (prepare a secret, then commit the resource;
//! reserve a generation, then publish it) must be correct when any one of them fails, and in
//! particular when a transaction *applied but the caller was told the outcome is unknown*.
//! [`FaultInjectingMetastore`] wraps any store and, by a programmable plan, makes a chosen
//! call fail in one of the ways the real backends fail. The recipe for exhaustive tests:
//!
//! 1. run the protocol once on a wrapped store with no plan and read [`transacts`];
//! 2. for every [`CrashPoint`] of [`crash_points`]`(n)`, run it again on a fresh store wrapped
//!    by [`FaultInjectingMetastore::crashing_at`], then check the invariants (and that a retry
//!    or the reconciler converges).
//!
//! [`transacts`]: FaultInjectingMetastore::transacts

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::{Consistency, Item, Key, Metastore, MetastoreError, Page, Query, Transaction};

/// How an injected failure behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Refused before applying (throttled, transient error): nothing is written and the caller
    /// sees `Retryable`.
    FailBeforeApply,
    /// A transaction conflict: nothing is written and the caller sees `Retryable`.
    Conflict,
    /// The request never reached the store, but the caller cannot know: nothing is written and
    /// the caller sees `OutcomeUnknown`.
    UnknownNotApplied,
    /// The request applied, then the response was lost (timeout or 5xx after the commit): the
    /// write happened and the caller sees `OutcomeUnknown`.
    ApplyThenUnknown,
}

impl Fault {
    fn error(self) -> MetastoreError {
        match self {
            Fault::FailBeforeApply => MetastoreError::Retryable {
                message: "injected failure before apply".into(),
            },
            Fault::Conflict => MetastoreError::Retryable {
                message: "injected transaction conflict".into(),
            },
            Fault::UnknownNotApplied => MetastoreError::OutcomeUnknown {
                message: "injected unknown outcome (not applied)".into(),
            },
            Fault::ApplyThenUnknown => MetastoreError::OutcomeUnknown {
                message: "injected unknown outcome (applied)".into(),
            },
        }
    }
}

/// One place a protocol can be interrupted: its `transact`-th transaction (1-based) fails
/// with `fault`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CrashPoint {
    pub transact: usize,
    pub fault: Fault,
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "transaction #{} {:?}", self.transact, self.fault)
    }
}

/// Every crash point of a protocol that performs `transacts` transactions: each one failing
/// before it applies, and each one applying with its outcome reported unknown. (Conflicts and
/// unknown-not-applied leave the same state as failing before apply; test those where the
/// protocol's reaction differs.)
pub fn crash_points(transacts: usize) -> Vec<CrashPoint> {
    (1..=transacts)
        .flat_map(|transact| {
            [Fault::FailBeforeApply, Fault::ApplyThenUnknown]
                .map(|fault| CrashPoint { transact, fault })
        })
        .collect()
}

type Predicate = Arc<dyn Fn(&Transaction) -> bool + Send + Sync>;

enum Trigger {
    /// The n-th `transact` (1-based).
    Transact(usize),
    /// The n-th call of any method (1-based).
    Call(usize),
    /// Any `transact` the predicate accepts, while `remaining` lasts.
    When(Predicate),
}

struct Rule {
    trigger: Trigger,
    fault: Fault,
    remaining: usize,
}

#[derive(Default)]
struct State {
    rules: Mutex<Vec<Rule>>,
    calls: AtomicUsize,
    transacts: AtomicUsize,
    injected: AtomicUsize,
}

impl State {
    fn rules(&self) -> MutexGuard<'_, Vec<Rule>> {
        // A panic while holding the lock cannot leave the plan half-edited in a way that
        // matters to a test; keep using it.
        self.rules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the call and returns the fault planned for it, consuming the rule.
    fn next(&self, tx: Option<&Transaction>) -> Option<Fault> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let transact = tx.map(|_| self.transacts.fetch_add(1, Ordering::SeqCst) + 1);
        let mut rules = self.rules();
        let index = rules.iter().position(|rule| {
            rule.remaining > 0
                && match (&rule.trigger, transact, tx) {
                    (Trigger::Call(n), _, _) => *n == call,
                    (Trigger::Transact(n), Some(t), _) => *n == t,
                    (Trigger::When(predicate), _, Some(tx)) => predicate(tx),
                    _ => false,
                }
        })?;
        let rule = &mut rules[index];
        rule.remaining -= 1;
        let fault = rule.fault;
        if rule.remaining == 0 {
            rules.remove(index);
        }
        self.injected.fetch_add(1, Ordering::SeqCst);
        Some(fault)
    }
}

/// A metastore that fails chosen calls on purpose. Thread-safe; the plan can be changed while
/// the store is in use.
pub struct FaultInjectingMetastore<M> {
    inner: M,
    state: State,
}

impl<M> fmt::Debug for FaultInjectingMetastore<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultInjectingMetastore")
            .field("calls", &self.state.calls.load(Ordering::SeqCst))
            .field("transacts", &self.state.transacts.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl<M: Metastore> FaultInjectingMetastore<M> {
    /// Wraps `inner` with an empty plan: every call passes through, and is counted.
    pub fn new(inner: M) -> Self {
        Self {
            inner,
            state: State::default(),
        }
    }

    /// Wraps `inner` so that it fails at one crash point.
    pub fn crashing_at(inner: M, point: CrashPoint) -> Self {
        let store = Self::new(inner);
        store.fail_transact(point.transact, point.fault);
        store
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// The `nth` transaction (1-based, counted from creation) fails with `fault`.
    pub fn fail_transact(&self, nth: usize, fault: Fault) -> &Self {
        self.state.rules().push(Rule {
            trigger: Trigger::Transact(nth),
            fault,
            remaining: 1,
        });
        self
    }

    /// The `nth` call of any method (1-based) fails with `fault`. Reads have no effect to
    /// lose, so a read fails with the fault's error and returns nothing.
    pub fn fail_call(&self, nth: usize, fault: Fault) -> &Self {
        self.state.rules().push(Rule {
            trigger: Trigger::Call(nth),
            fault,
            remaining: 1,
        });
        self
    }

    /// The next `times` transactions that `predicate` accepts fail with `fault`.
    pub fn fail_when(
        &self,
        fault: Fault,
        times: usize,
        predicate: impl Fn(&Transaction) -> bool + Send + Sync + 'static,
    ) -> &Self {
        self.state.rules().push(Rule {
            trigger: Trigger::When(Arc::new(predicate)),
            fault,
            remaining: times,
        });
        self
    }

    /// Removes every planned fault that has not fired yet.
    pub fn clear(&self) {
        self.state.rules().clear();
    }

    /// Calls of any method so far.
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// `transact` calls so far, including failed ones: the number of crash points a protocol
    /// run has.
    pub fn transacts(&self) -> usize {
        self.state.transacts.load(Ordering::SeqCst)
    }

    /// Faults that have fired.
    pub fn injected(&self) -> usize {
        self.state.injected.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<M: Metastore> Metastore for FaultInjectingMetastore<M> {
    async fn get(
        &self,
        key: &Key,
        consistency: Consistency,
    ) -> Result<Option<Item>, MetastoreError> {
        match self.state.next(None) {
            Some(fault) => Err(fault.error()),
            None => self.inner.get(key, consistency).await,
        }
    }

    async fn batch_get(
        &self,
        keys: &[Key],
        consistency: Consistency,
    ) -> Result<Vec<Item>, MetastoreError> {
        match self.state.next(None) {
            Some(fault) => Err(fault.error()),
            None => self.inner.batch_get(keys, consistency).await,
        }
    }

    async fn query(&self, query: &Query) -> Result<Page, MetastoreError> {
        match self.state.next(None) {
            Some(fault) => Err(fault.error()),
            None => self.inner.query(query).await,
        }
    }

    async fn count(
        &self,
        pk: &str,
        sk_prefix: &str,
        consistency: Consistency,
    ) -> Result<u64, MetastoreError> {
        match self.state.next(None) {
            Some(fault) => Err(fault.error()),
            None => self.inner.count(pk, sk_prefix, consistency).await,
        }
    }

    async fn transact(&self, tx: Transaction) -> Result<(), MetastoreError> {
        match self.state.next(Some(&tx)) {
            None => self.inner.transact(tx).await,
            Some(Fault::ApplyThenUnknown) => {
                // Only a transaction that really committed may be reported as unknown-applied;
                // a refused one reports its real error.
                self.inner.transact(tx).await?;
                Err(Fault::ApplyThenUnknown.error())
            }
            Some(fault) => Err(fault.error()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;
    use crate::redb_store::RedbMetastore;

    const STRONG: Consistency = Consistency::Strong;

    fn store() -> FaultInjectingMetastore<RedbMetastore> {
        match RedbMetastore::in_memory() {
            Ok(s) => FaultInjectingMetastore::new(s),
            Err(e) => panic!("in-memory redb: {e}"),
        }
    }

    fn put(sk: &str) -> Transaction {
        Transaction::new().with(Op::put(Key::new("f", sk), sk.as_bytes().to_vec()))
    }

    async fn present(s: &dyn Metastore, sk: &str) -> bool {
        matches!(s.get(&Key::new("f", sk), STRONG).await, Ok(Some(_)))
    }

    #[tokio::test]
    async fn fail_before_apply_writes_nothing_and_is_retryable() {
        let s = store();
        s.fail_transact(2, Fault::FailBeforeApply);
        assert!(s.transact(put("a")).await.is_ok());
        let second = s.transact(put("b")).await;
        assert!(matches!(&second, Err(e) if e.is_retryable()), "{second:?}");
        assert!(s.transact(put("c")).await.is_ok(), "a fault fires once");
        assert!(!present(s.inner(), "b").await, "nothing written");
        assert!(present(s.inner(), "c").await);
        assert_eq!((s.transacts(), s.injected()), (3, 1));
    }

    #[tokio::test]
    async fn apply_then_unknown_writes_and_reports_unknown() {
        let s = store();
        s.fail_transact(1, Fault::ApplyThenUnknown);
        let got = s.transact(put("a")).await;
        assert!(matches!(&got, Err(e) if e.is_outcome_unknown()), "{got:?}");
        assert!(present(s.inner(), "a").await, "the write happened");
    }

    #[tokio::test]
    async fn apply_then_unknown_passes_through_a_real_condition_failure() {
        let s = store();
        assert!(s.transact(put("a")).await.is_ok());
        s.fail_transact(2, Fault::ApplyThenUnknown);
        let create = Transaction::new().with(Op::create(Key::new("f", "a"), vec![]));
        assert!(matches!(
            s.transact(create).await,
            Err(MetastoreError::ConditionFailed { .. })
        ));
    }

    #[tokio::test]
    async fn unknown_not_applied_writes_nothing() {
        let s = store();
        s.fail_transact(1, Fault::UnknownNotApplied);
        let got = s.transact(put("a")).await;
        assert!(matches!(&got, Err(e) if e.is_outcome_unknown()), "{got:?}");
        assert!(!present(s.inner(), "a").await);
    }

    #[tokio::test]
    async fn conflict_on_nth_call_counts_reads_too() {
        let s = store();
        s.fail_call(3, Fault::Conflict);
        assert!(s.get(&Key::new("f", "x"), STRONG).await.is_ok());
        assert!(s.transact(put("a")).await.is_ok());
        let third = s.count("f", "", STRONG).await;
        assert!(matches!(&third, Err(e) if e.is_retryable()), "{third:?}");
        assert!(s.count("f", "", STRONG).await.is_ok());
        assert_eq!((s.calls(), s.transacts()), (4, 1));
    }

    #[tokio::test]
    async fn predicate_selects_matching_transactions_a_bounded_number_of_times() {
        let s = store();
        s.fail_when(Fault::Conflict, 2, |tx| {
            tx.ops.iter().any(|op| op.key().sk.starts_with("hot"))
        });
        assert!(s.transact(put("cold")).await.is_ok());
        assert!(s.transact(put("hot1")).await.is_err());
        assert!(s.transact(put("hot2")).await.is_err());
        assert!(
            s.transact(put("hot3")).await.is_ok(),
            "the rule is spent after two"
        );
        assert_eq!(s.injected(), 2);
    }

    #[tokio::test]
    async fn faults_are_thread_safe_and_fire_exactly_once() {
        let s = Arc::new(store());
        s.fail_transact(5, Fault::FailBeforeApply);
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.transact(put(&format!("k{i:02}"))).await })
            })
            .collect();
        let mut failures = 0;
        for h in handles {
            if !matches!(h.await, Ok(Ok(()))) {
                failures += 1;
            }
        }
        assert_eq!((failures, s.transacts(), s.injected()), (1, 16, 1));
    }

    /// The recipe from the module docs on a toy two-step protocol: "reserve" then "publish".
    /// At every crash point the store holds either nothing, the reservation alone, or both;
    /// and re-running the (idempotent) protocol converges to both.
    #[tokio::test]
    async fn crash_point_recipe_covers_every_transaction() {
        async fn protocol(s: &dyn Metastore) -> Result<(), MetastoreError> {
            let reserve = Transaction::new().with(Op::put(Key::new("f", "reserved"), vec![]));
            s.transact(reserve).await?;
            let publish = Transaction::new().with(Op::put(Key::new("f", "published"), vec![]));
            s.transact(publish).await
        }

        let probe = store();
        assert!(protocol(&probe).await.is_ok());
        let points = crash_points(probe.transacts());
        assert_eq!(points.len(), 4, "two transactions, two faults each");

        for point in points {
            let s = match RedbMetastore::in_memory() {
                Ok(inner) => FaultInjectingMetastore::crashing_at(inner, point),
                Err(e) => panic!("{e}"),
            };
            assert!(protocol(&s).await.is_err(), "{point}: the fault surfaces");
            let reserved = present(s.inner(), "reserved").await;
            let published = present(s.inner(), "published").await;
            assert!(
                !published || reserved,
                "{point}: published without a reservation"
            );
            let expected_published = point.transact == 2 && point.fault == Fault::ApplyThenUnknown;
            assert_eq!(published, expected_published, "{point}");
            assert!(protocol(&s).await.is_ok(), "{point}: retry succeeds");
            assert!(present(s.inner(), "published").await, "{point}: converges");
        }
    }
}
