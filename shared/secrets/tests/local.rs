//! Properties specific to the local encrypted store: integrity, binding to the reference,
//! key management and file permissions.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use flotilla_secrets::contract::{canary, secret, unique_account};
use flotilla_secrets::local::{KEY_FILE_NAME, KeySource, LocalEncryptedStore, SecretKey};
use flotilla_secrets::{CredentialStore, PutOutcome, SecretRef, SecretStoreError};

fn store(dir: &tempfile::TempDir) -> LocalEncryptedStore {
    LocalEncryptedStore::with_key(dir.path().join("secrets"), &SecretKey::generate())
        .expect("open store")
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[tokio::test]
async fn a_flipped_byte_anywhere_fails_authentication_without_leaking() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let canary = canary();
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    store
        .put_if_absent(&reference, &secret(&canary))
        .await
        .unwrap();
    let path = store.path_of(&reference);
    let original = std::fs::read(&path).unwrap();
    // Magic, nonce, ciphertext and tag each get a flipped byte.
    for index in [0, 8, 20, original.len() / 2, original.len() - 1] {
        let mut tampered = original.clone();
        tampered[index] ^= 0x01;
        std::fs::write(&path, &tampered).unwrap();
        let err = store
            .get(&reference)
            .await
            .expect_err("tampered file must not decrypt");
        assert!(
            matches!(err, SecretStoreError::Corrupt { .. }),
            "byte {index}: {err:?}"
        );
        assert!(!format!("{err} {err:?}").contains(&canary));
    }
    std::fs::write(&path, &original[..10]).unwrap();
    assert!(matches!(
        store.get(&reference).await,
        Err(SecretStoreError::Corrupt { .. })
    ));
    std::fs::write(&path, &original).unwrap();
    assert!(
        store
            .get(&reference)
            .await
            .unwrap()
            .is_some_and(|s| s.ct_eq(&secret(&canary)))
    );
}

#[tokio::test]
async fn a_file_moved_to_another_reference_fails_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let account = unique_account();
    let a = SecretRef::new(&account, "int-a", 1).unwrap();
    let b = SecretRef::new(&account, "int-b", 1).unwrap();
    let a2 = SecretRef::new(&account, "int-a", 2).unwrap();
    store.put_if_absent(&a, &secret("for-a")).await.unwrap();
    store.put_if_absent(&b, &secret("for-b")).await.unwrap();
    // Swap integration b's file for a's, and copy a's generation 1 to generation 2.
    std::fs::copy(store.path_of(&a), store.path_of(&b)).unwrap();
    std::fs::copy(store.path_of(&a), store.path_of(&a2)).unwrap();
    assert!(matches!(
        store.get(&b).await,
        Err(SecretStoreError::Corrupt { .. })
    ));
    assert!(matches!(
        store.get(&a2).await,
        Err(SecretStoreError::Corrupt { .. })
    ));
    assert!(store.get(&a).await.unwrap().is_some());
}

#[tokio::test]
async fn files_sealed_under_another_key_do_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("secrets");
    let first = LocalEncryptedStore::with_key(root.clone(), &SecretKey::generate()).unwrap();
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    first
        .put_if_absent(&reference, &secret("k1"))
        .await
        .unwrap();
    let second = LocalEncryptedStore::with_key(root, &SecretKey::generate()).unwrap();
    assert!(matches!(
        second.get(&reference).await,
        Err(SecretStoreError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn key_file_is_created_0600_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, source) = LocalEncryptedStore::open_with(dir.path(), None).unwrap();
    let key_path = dir.path().join(KEY_FILE_NAME);
    assert_eq!(source, KeySource::File(key_path.clone()));
    assert_eq!(mode(&key_path), 0o600);
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    store
        .put_if_absent(&reference, &secret("persisted"))
        .await
        .unwrap();
    assert_eq!(mode(&store.path_of(&reference)), 0o600);
    assert_eq!(mode(store.path_of(&reference).parent().unwrap()), 0o700);

    let (reopened, _) = LocalEncryptedStore::open_with(dir.path(), None).unwrap();
    assert!(
        reopened
            .get(&reference)
            .await
            .unwrap()
            .is_some_and(|s| s.ct_eq(&secret("persisted")))
    );
}

#[tokio::test]
async fn a_key_file_readable_by_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    LocalEncryptedStore::open_with(dir.path(), None).unwrap();
    let key_path = dir.path().join(KEY_FILE_NAME);
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = LocalEncryptedStore::open_with(dir.path(), None)
        .expect_err("0644 key file must be refused");
    assert!(err.to_string().contains("chmod 600"), "{err}");
}

#[tokio::test]
async fn an_env_key_is_used_and_no_key_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let key = SecretKey::generate();
    let (store, source) =
        LocalEncryptedStore::open_with(dir.path(), Some(&key.to_base64())).unwrap();
    assert_eq!(source, KeySource::Env);
    assert!(!dir.path().join(KEY_FILE_NAME).exists());
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    store
        .put_if_absent(&reference, &secret("env"))
        .await
        .unwrap();
    let same = LocalEncryptedStore::with_key(dir.path().join("secrets"), &key).unwrap();
    assert!(same.get(&reference).await.unwrap().is_some());
}

#[test]
fn bad_env_keys_are_refused_without_echoing_them() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["not*base64*canary", "c2hvcnQ="] {
        let err = LocalEncryptedStore::open_with(dir.path(), Some(bad)).expect_err("bad key");
        let text = format!("{err} {err:?}");
        assert!(!text.contains(bad) && !text.contains("canary"), "{text}");
    }
    assert_eq!(format!("{:?}", SecretKey::generate()), "SecretKey(***)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_of_one_generation_have_exactly_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store(&dir));
    let reference = SecretRef::new(unique_account(), "int-1", 1).unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (store, reference) = (store.clone(), reference.clone());
            tokio::spawn(async move {
                (
                    i,
                    store
                        .put_if_absent(&reference, &secret(&format!("writer-{i}")))
                        .await,
                )
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        match outcome.unwrap() {
            PutOutcome::Created => winners.push(i),
            PutOutcome::AlreadyExists { identical } => assert!(!identical),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let stored = store.get(&reference).await.unwrap().unwrap();
    assert!(stored.ct_eq(&secret(&format!("writer-{}", winners[0]))));
    // No staging files are left behind or listed.
    assert_eq!(
        store.list(&reference.account_id, "int-1").await.unwrap(),
        vec![1]
    );
    let leftovers = std::fs::read_dir(store.path_of(&reference).parent().unwrap())
        .unwrap()
        .count();
    assert_eq!(leftovers, 1);
}
