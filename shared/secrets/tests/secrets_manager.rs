//! Secrets Manager specifics: error classification, naming, and foreign values.

mod common;

use common::{client, endpoint};
use flotilla_secrets::aws::SecretsManagerStore;
use flotilla_secrets::contract::{canary, secret, unique_account};
use flotilla_secrets::{CredentialStore, SecretRef, SecretStoreError};

fn prefix() -> String {
    common::unique_prefix("sm")
}

#[tokio::test]
async fn an_unreachable_endpoint_is_outcome_unknown_for_writes_and_retryable_for_reads() {
    // Port 9 (discard) on loopback: nothing listens, so every dispatch fails.
    let store = SecretsManagerStore::new(client("http://127.0.0.1:9"), "flotilla/test").unwrap();
    let canary = canary();
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let put = store
        .put_if_absent(&reference, &secret(&canary))
        .await
        .unwrap_err();
    assert!(put.is_outcome_unknown(), "{put:?}");
    let get = store.get(&reference).await.unwrap_err();
    assert!(get.is_retryable(), "{get:?}");
    let delete = store.delete(&reference).await.unwrap_err();
    assert!(delete.is_outcome_unknown(), "{delete:?}");
    assert!(
        store
            .list("acct", "int-1")
            .await
            .unwrap_err()
            .is_retryable()
    );
    assert!(!format!("{put} {put:?}").contains(&canary));
}

#[tokio::test]
async fn secrets_are_named_prefix_account_integration_generation() {
    let prefix = prefix();
    let sm = client(&endpoint());
    let store = SecretsManagerStore::new(sm.clone(), format!("{prefix}/")).unwrap();
    let reference = SecretRef::new(unique_account(), "int-1", 42).unwrap();
    let name = store.secret_name(&reference);
    assert_eq!(name, format!("{prefix}/{}/int-1/42", reference.account_id));
    store
        .put_if_absent(&reference, &secret("named"))
        .await
        .unwrap();
    let value = sm.get_secret_value().secret_id(&name).send().await.unwrap();
    assert_eq!(value.secret_string(), Some(r#"{"client_secret":"named"}"#));
}

#[tokio::test]
async fn a_foreign_non_json_value_is_corrupt_not_returned() {
    let prefix = prefix();
    let sm = client(&endpoint());
    let store = SecretsManagerStore::new(sm.clone(), prefix).unwrap();
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let canary = canary();
    sm.create_secret()
        .name(store.secret_name(&reference))
        .secret_string(&canary)
        .send()
        .await
        .unwrap();
    let err = store.get(&reference).await.unwrap_err();
    assert!(matches!(err, SecretStoreError::Corrupt { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains(&canary));
    // Listing ignores names that are not canonical generations.
    sm.create_secret()
        .name(format!(
            "{}/{}/int-1/007",
            store.prefix(),
            reference.account_id
        ))
        .secret_string("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        store.list(&reference.account_id, "int-1").await.unwrap(),
        vec![1]
    );
}

#[test]
fn prefixes_are_validated() {
    let sm = client("http://127.0.0.1:9");
    for bad in ["", "/", "a//b", "a b", "flotilla/*"] {
        assert!(
            SecretsManagerStore::new(sm.clone(), bad).is_err(),
            "{bad:?}"
        );
    }
    assert_eq!(
        SecretsManagerStore::new(sm, "flotilla/dev/")
            .unwrap()
            .prefix(),
        "flotilla/dev"
    );
}
