//! The credential store contract, run against both backends.

mod common;

mod local {
    use flotilla_secrets::local::{LocalEncryptedStore, SecretKey};

    async fn make() -> (LocalEncryptedStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            LocalEncryptedStore::with_key(dir.path().join("secrets"), &SecretKey::generate())
                .expect("open store");
        (store, dir)
    }

    flotilla_secrets::credential_store_contract!(make());
}

mod secrets_manager {
    use flotilla_secrets::aws::SecretsManagerStore;

    use crate::common;

    async fn make() -> (SecretsManagerStore, ()) {
        let client = common::client(&common::endpoint());
        (
            SecretsManagerStore::new(client, common::unique_prefix("contract"))
                .expect("valid prefix"),
            (),
        )
    }

    flotilla_secrets::credential_store_contract!(make());
}
