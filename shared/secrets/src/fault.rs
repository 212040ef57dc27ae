//! A credential store decorator that fails on purpose, so that publication protocols can be
//! tested at every crash point: before the secret is stored, and after it is stored while
//! the caller is told the outcome is unknown.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::{CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError};

/// Which operation a fault targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreOp {
    Put,
    Get,
    Delete,
    List,
    ListAccount,
}

/// What the injected failure does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Nothing reaches the inner store; the caller sees a retryable error (a definite failure).
    FailBefore,
    /// Nothing reaches the inner store, but the caller is told the outcome is unknown (a
    /// timeout before the request arrived).
    UnknownNotApplied,
    /// The inner store applies the operation; the caller is told the outcome is unknown (a
    /// timeout after the request committed).
    UnknownApplied,
}

/// Fails the `nth` (1-based) call of `op`, counted from when the decorator was built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub op: StoreOp,
    pub nth: u64,
    pub kind: FaultKind,
}

impl Fault {
    pub fn new(op: StoreOp, nth: u64, kind: FaultKind) -> Self {
        Self { op, nth, kind }
    }
}

#[derive(Default)]
struct State {
    calls: HashMap<StoreOp, u64>,
    faults: Vec<Fault>,
}

/// Wraps a store and fails chosen calls. Calls without a matching fault pass through.
pub struct FaultInjectingCredentialStore<S> {
    inner: S,
    state: Mutex<State>,
}

impl<S: CredentialStore> FaultInjectingCredentialStore<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    pub fn with_fault(self, fault: Fault) -> Self {
        self.inject(fault);
        self
    }

    /// Adds a fault; it fires once, on the `nth` call of its operation.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Removes every pending fault.
    pub fn clear(&self) {
        self.lock().faults.clear();
    }

    /// How many calls of `op` were made (faulted ones included).
    pub fn calls(&self, op: StoreOp) -> u64 {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a test assertion elsewhere;
        // the counters stay meaningful, so recover the guard.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts the call and takes the fault planned for it, if any.
    fn next_fault(&self, op: StoreOp) -> Option<FaultKind> {
        let mut state = self.lock();
        let n = {
            let c = state.calls.entry(op).or_insert(0);
            *c += 1;
            *c
        };
        let index = state.faults.iter().position(|f| f.op == op && f.nth == n)?;
        Some(state.faults.remove(index).kind)
    }

    async fn run<T, F>(&self, op: StoreOp, call: F) -> Result<T, SecretStoreError>
    where
        F: std::future::Future<Output = Result<T, SecretStoreError>> + Send,
    {
        match self.next_fault(op) {
            None => call.await,
            Some(FaultKind::FailBefore) => Err(SecretStoreError::Retryable {
                message: format!("injected failure before {op:?}"),
            }),
            Some(FaultKind::UnknownNotApplied) => Err(SecretStoreError::OutcomeUnknown {
                message: format!("injected outcome-unknown before {op:?} was applied"),
            }),
            Some(FaultKind::UnknownApplied) => {
                // The effect happens; the answer is lost.
                let _ = call.await;
                Err(SecretStoreError::OutcomeUnknown {
                    message: format!("injected outcome-unknown after {op:?} was applied"),
                })
            }
        }
    }
}

#[async_trait]
impl<S: CredentialStore> CredentialStore for FaultInjectingCredentialStore<S> {
    async fn put_if_absent(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        self.run(StoreOp::Put, self.inner.put_if_absent(reference, secret))
            .await
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        self.run(StoreOp::Get, self.inner.get(reference)).await
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), SecretStoreError> {
        self.run(StoreOp::Delete, self.inner.delete(reference))
            .await
    }

    async fn list(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        self.run(StoreOp::List, self.inner.list(account_id, integration_id))
            .await
    }

    async fn list_account(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        self.run(StoreOp::ListAccount, self.inner.list_account(account_id))
            .await
    }
}
