//! The fault-injecting decorator does what protocol tests rely on.

use flotilla_secrets::contract::{canary, secret, unique_account};
use flotilla_secrets::fault::{Fault, FaultInjectingCredentialStore, FaultKind, StoreOp};
use flotilla_secrets::local::{LocalEncryptedStore, SecretKey};
use flotilla_secrets::{CredentialStore, PutOutcome, SecretRef, SecretStoreError};

fn faulty(dir: &tempfile::TempDir) -> FaultInjectingCredentialStore<LocalEncryptedStore> {
    FaultInjectingCredentialStore::new(
        LocalEncryptedStore::with_key(dir.path().join("secrets"), &SecretKey::generate()).unwrap(),
    )
}

#[tokio::test]
async fn fail_before_stores_nothing_and_is_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let store = faulty(&dir).with_fault(Fault::new(StoreOp::Put, 1, FaultKind::FailBefore));
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let err = store
        .put_if_absent(&reference, &secret("x"))
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert!(store.inner().get(&reference).await.unwrap().is_none());
    // The fault fires once; the retry goes through.
    assert_eq!(
        store.put_if_absent(&reference, &secret("x")).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(store.calls(StoreOp::Put), 2);
}

#[tokio::test]
async fn unknown_applied_stores_and_reports_outcome_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let store = faulty(&dir).with_fault(Fault::new(StoreOp::Put, 1, FaultKind::UnknownApplied));
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let err = store
        .put_if_absent(&reference, &secret("x"))
        .await
        .unwrap_err();
    assert!(err.is_outcome_unknown());
    assert!(store.inner().get(&reference).await.unwrap().is_some());
    assert_eq!(
        store.put_if_absent(&reference, &secret("x")).await.unwrap(),
        PutOutcome::AlreadyExists { identical: true }
    );
}

#[tokio::test]
async fn unknown_not_applied_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = faulty(&dir).with_fault(Fault::new(StoreOp::Put, 1, FaultKind::UnknownNotApplied));
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    assert!(
        store
            .put_if_absent(&reference, &secret("x"))
            .await
            .unwrap_err()
            .is_outcome_unknown()
    );
    assert!(store.get(&reference).await.unwrap().is_none());
}

#[tokio::test]
async fn faults_fire_on_the_nth_call_of_their_operation_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = faulty(&dir);
    store.inject(Fault::new(StoreOp::Delete, 2, FaultKind::UnknownApplied));
    let account = unique_account();
    let (a, b) = (
        SecretRef::new(&account, "int-1", 1).unwrap(),
        SecretRef::new(&account, "int-1", 2).unwrap(),
    );
    store.put_if_absent(&a, &secret("a")).await.unwrap();
    store.put_if_absent(&b, &secret("b")).await.unwrap();
    store.delete(&a).await.unwrap();
    assert!(store.delete(&b).await.unwrap_err().is_outcome_unknown());
    assert!(
        store.get(&b).await.unwrap().is_none(),
        "the delete was applied"
    );
    store.delete(&b).await.unwrap();
    assert_eq!(store.calls(StoreOp::Delete), 3);
    assert_eq!(store.calls(StoreOp::Get), 1);
}

#[tokio::test]
async fn injected_errors_never_carry_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let store = faulty(&dir);
    let canary = canary();
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let mut rendered = String::new();
    for (n, kind) in [
        FaultKind::FailBefore,
        FaultKind::UnknownNotApplied,
        FaultKind::UnknownApplied,
    ]
    .into_iter()
    .enumerate()
    {
        store.inject(Fault::new(StoreOp::Put, n as u64 + 1, kind));
        let err: SecretStoreError = store
            .put_if_absent(&reference, &secret(&canary))
            .await
            .unwrap_err();
        rendered.push_str(&format!("{err} {err:?} "));
    }
    assert!(!rendered.contains(&canary), "{rendered}");
}
