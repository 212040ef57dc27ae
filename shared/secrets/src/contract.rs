//! The contract every [`CredentialStore`] backend must pass.
//!
//! Each case is a public async function named as the property it proves; the
//! [`credential_store_contract!`](crate::credential_store_contract) macro turns the whole list
//! into one `#[tokio::test]` per case for a backend. Cases use fresh random account ids, so
//! they can share one emulator.

use rand::RngCore as _;

use crate::{CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError};

/// A fresh account id, unique per call.
pub fn unique_account() -> String {
    let mut b = [0u8; 8];
    rand::rng().fill_bytes(&mut b);
    format!("acct-{}", hex::encode(b))
}

/// A unique secret string to search for in errors.
pub fn canary() -> String {
    let mut b = [0u8; 12];
    rand::rng().fill_bytes(&mut b);
    format!("canary-{}", hex::encode(b))
}

/// A payload shaped like OAuth client credentials.
pub fn secret(value: &str) -> SecretBytes {
    let mut fields = serde_json::Map::new();
    fields.insert(
        "client_secret".into(),
        serde_json::Value::String(value.to_owned()),
    );
    match SecretBytes::from_fields(&fields) {
        Ok(s) => s,
        Err(e) => panic!("contract payload must be valid: {e}"),
    }
}

fn r(account: &str, integration: &str, generation: u64) -> SecretRef {
    match SecretRef::new(account, integration, generation) {
        Ok(r) => r,
        Err(e) => panic!("contract refs must be valid: {e}"),
    }
}

fn ok<T>(what: &str, result: Result<T, SecretStoreError>) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

pub async fn put_then_get_round_trips(store: &dyn CredentialStore) {
    let reference = r(&unique_account(), "int-1", 1);
    let payload = secret("s3cr3t-round-trip");
    assert_eq!(
        ok("put", store.put_if_absent(&reference, &payload).await),
        PutOutcome::Created
    );
    let got = ok("get", store.get(&reference).await);
    assert_eq!(
        got.as_ref().map(SecretBytes::expose_bytes),
        Some(payload.expose_bytes())
    );
    let resolved = ok("resolve", store.resolve(&reference).await);
    assert!(resolved.ct_eq(&payload));
}

pub async fn get_of_absent_generation_is_none(store: &dyn CredentialStore) {
    let reference = r(&unique_account(), "int-1", 7);
    assert!(ok("get", store.get(&reference).await).is_none());
}

pub async fn resolve_of_absent_generation_is_not_found(store: &dyn CredentialStore) {
    let reference = r(&unique_account(), "int-1", 7);
    match store.resolve(&reference).await {
        Err(SecretStoreError::NotFound(missing)) => assert_eq!(missing, reference),
        other => panic!("expected NotFound, got {:?}", other.map(|_| "a secret")),
    }
}

pub async fn put_if_absent_twice_with_same_bytes_reports_identical_existing(
    store: &dyn CredentialStore,
) {
    let reference = r(&unique_account(), "int-1", 1);
    let payload = secret("same-bytes");
    assert_eq!(
        ok("first put", store.put_if_absent(&reference, &payload).await),
        PutOutcome::Created
    );
    assert_eq!(
        ok(
            "second put",
            store.put_if_absent(&reference, &payload.clone()).await
        ),
        PutOutcome::AlreadyExists { identical: true }
    );
}

pub async fn put_if_absent_with_different_bytes_keeps_the_original(store: &dyn CredentialStore) {
    let reference = r(&unique_account(), "int-1", 1);
    let original = secret("original-bytes");
    let intruder = secret("different-bytes");
    assert_eq!(
        ok(
            "first put",
            store.put_if_absent(&reference, &original).await
        ),
        PutOutcome::Created
    );
    assert_eq!(
        ok(
            "second put",
            store.put_if_absent(&reference, &intruder).await
        ),
        PutOutcome::AlreadyExists { identical: false }
    );
    let kept = ok("get", store.get(&reference).await);
    assert!(
        kept.is_some_and(|k| k.ct_eq(&original)),
        "the first generation's bytes must be kept"
    );
}

pub async fn generations_of_one_integration_are_independent(store: &dyn CredentialStore) {
    let account = unique_account();
    let (g1, g2) = (r(&account, "int-1", 1), r(&account, "int-1", 2));
    ok("put g1", store.put_if_absent(&g1, &secret("gen-one")).await);
    assert_eq!(
        ok("put g2", store.put_if_absent(&g2, &secret("gen-two")).await),
        PutOutcome::Created
    );
    ok("delete g1", store.delete(&g1).await);
    assert!(ok("get g1", store.get(&g1).await).is_none());
    assert!(ok("get g2", store.get(&g2).await).is_some_and(|s| s.ct_eq(&secret("gen-two"))));
}

pub async fn delete_is_idempotent(store: &dyn CredentialStore) {
    let reference = r(&unique_account(), "int-1", 3);
    ok("delete absent", store.delete(&reference).await);
    ok(
        "put",
        store.put_if_absent(&reference, &secret("to-delete")).await,
    );
    ok("delete", store.delete(&reference).await);
    ok("delete again", store.delete(&reference).await);
    assert!(ok("get", store.get(&reference).await).is_none());
}

pub async fn list_returns_exactly_the_generations_of_one_integration(store: &dyn CredentialStore) {
    let account = unique_account();
    let other_account = unique_account();
    for generation in [3, 1, 10] {
        ok(
            "put",
            store
                .put_if_absent(&r(&account, "int-1", generation), &secret("x"))
                .await,
        );
    }
    // Names that share a textual prefix with int-1 must not leak into its listing.
    ok(
        "put int-10",
        store
            .put_if_absent(&r(&account, "int-10", 2), &secret("y"))
            .await,
    );
    ok(
        "put other",
        store
            .put_if_absent(&r(&other_account, "int-1", 5), &secret("z"))
            .await,
    );
    assert_eq!(
        ok("list", store.list(&account, "int-1").await),
        vec![1, 3, 10]
    );
    assert_eq!(
        ok("list int-10", store.list(&account, "int-10").await),
        vec![2]
    );
    assert!(ok("list empty", store.list(&account, "int-none").await).is_empty());
    ok("delete", store.delete(&r(&account, "int-1", 3)).await);
    assert_eq!(
        ok("list after delete", store.list(&account, "int-1").await),
        vec![1, 10]
    );
}

pub async fn list_account_returns_every_generation_of_the_account(store: &dyn CredentialStore) {
    let account = unique_account();
    let other_account = unique_account();
    let a = r(&account, "int-a", 1);
    let b = r(&account, "int-b", 2);
    ok("put a", store.put_if_absent(&a, &secret("a")).await);
    ok("put b", store.put_if_absent(&b, &secret("b")).await);
    ok(
        "put other",
        store
            .put_if_absent(&r(&other_account, "int-a", 1), &secret("c"))
            .await,
    );
    assert_eq!(
        ok("list_account", store.list_account(&account).await),
        vec![a, b]
    );
    assert!(
        ok(
            "list_account empty",
            store.list_account(&unique_account()).await
        )
        .is_empty()
    );
}

pub async fn invalid_references_are_refused_before_storage(store: &dyn CredentialStore) {
    let bad = SecretRef {
        account_id: "../etc".into(),
        integration_id: "int-1".into(),
        credential_generation: 1,
    };
    assert!(matches!(
        store.put_if_absent(&bad, &secret("x")).await,
        Err(SecretStoreError::InvalidRef(_))
    ));
    assert!(matches!(
        store.get(&bad).await,
        Err(SecretStoreError::InvalidRef(_))
    ));
    assert!(matches!(
        store.delete(&bad).await,
        Err(SecretStoreError::InvalidRef(_))
    ));
    assert!(matches!(
        store.list("a/b", "int-1").await,
        Err(SecretStoreError::InvalidRef(_))
    ));
    assert!(matches!(
        store.list_account("").await,
        Err(SecretStoreError::InvalidRef(_))
    ));
}

/// The secret canary: a unique string stored as a secret never shows up in any error this
/// store returns for that reference, in `Display` or `Debug`.
pub async fn secret_canary_never_appears_in_errors(store: &dyn CredentialStore) {
    let account = unique_account();
    let canary = canary();
    let reference = r(&account, "int-1", 1);
    let payload = secret(&canary);
    ok("put", store.put_if_absent(&reference, &payload).await);
    let mut errors: Vec<SecretStoreError> = Vec::new();
    if let Err(e) = store.resolve(&r(&account, "int-1", 2)).await {
        errors.push(e);
    }
    let bad = SecretRef {
        account_id: account.clone(),
        integration_id: "bad/id".into(),
        credential_generation: 1,
    };
    if let Err(e) = store.put_if_absent(&bad, &payload).await {
        errors.push(e);
    }
    assert!(!errors.is_empty(), "the canary test must observe errors");
    let outcome = ok(
        "put again",
        store.put_if_absent(&reference, &secret("other")).await,
    );
    let got = ok("get", store.get(&reference).await);
    let rendered = format!(
        "{errors:?} {outcome:?} {got:?} {}",
        errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(!rendered.contains(&canary), "canary leaked: {rendered}");
}

/// Generates one `#[tokio::test]` per contract case. `$make` is an async expression yielding
/// `(store, guard)`; the guard (e.g. a temp dir) lives until the case ends.
#[macro_export]
macro_rules! credential_store_contract {
    ($make:expr) => {
        $crate::credential_store_contract!(
            $make;
            put_then_get_round_trips,
            get_of_absent_generation_is_none,
            resolve_of_absent_generation_is_not_found,
            put_if_absent_twice_with_same_bytes_reports_identical_existing,
            put_if_absent_with_different_bytes_keeps_the_original,
            generations_of_one_integration_are_independent,
            delete_is_idempotent,
            list_returns_exactly_the_generations_of_one_integration,
            list_account_returns_every_generation_of_the_account,
            invalid_references_are_refused_before_storage,
            secret_canary_never_appears_in_errors,
        );
    };
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (store, _guard) = $make.await;
                $crate::contract::$case(&store).await;
            }
        )*
    };
}
