//! The credential store of a host that has none it can use.

use async_trait::async_trait;

use crate::{CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError};

/// A credential store that holds no credentials. Writes and reads always fail, so an
/// integration with credentials cannot be created by accident without durable storage. The
/// two cases differ only in what the listings answer, which is what account delete and the
/// credential sweep decide from:
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoCredentialStore {
    /// The host configured no credential store: nothing can ever have been stored, so the
    /// listings truthfully answer empty (account delete and the sweep have nothing to find).
    NotConfigured,
    /// A store was meant to be used but cannot be (e.g. an invalid secret prefix): secrets
    /// may exist in it, so the listings fail as well, and account delete and the sweep stop
    /// instead of skipping credentials they cannot see.
    Unusable,
}

impl NoCredentialStore {
    fn refusal(&self) -> SecretStoreError {
        SecretStoreError::Backend(
            match self {
                Self::NotConfigured => "no credential store is configured",
                Self::Unusable => "the credential store is not configured",
            }
            .into(),
        )
    }

    fn listing<T>(&self) -> Result<Vec<T>, SecretStoreError> {
        match self {
            Self::NotConfigured => Ok(Vec::new()),
            Self::Unusable => Err(self.refusal()),
        }
    }
}

#[async_trait]
impl CredentialStore for NoCredentialStore {
    async fn put_if_absent(
        &self,
        _reference: &SecretRef,
        _secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        Err(self.refusal())
    }

    async fn get(&self, _reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        Err(self.refusal())
    }

    async fn delete(&self, _reference: &SecretRef) -> Result<(), SecretStoreError> {
        Err(self.refusal())
    }

    async fn list(
        &self,
        _account_id: &str,
        _integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        self.listing()
    }

    async fn list_account(&self, _account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        self.listing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_store_that_cannot_hold_anything_lists_empty() {
        let r = SecretRef::new("acct", "int", 1).unwrap();
        let s = SecretBytes::new(br#"{"token":"t"}"#.to_vec()).unwrap();
        for store in [
            NoCredentialStore::NotConfigured,
            NoCredentialStore::Unusable,
        ] {
            assert!(matches!(
                store.put_if_absent(&r, &s).await,
                Err(SecretStoreError::Backend(_))
            ));
            assert!(matches!(
                store.get(&r).await,
                Err(SecretStoreError::Backend(_))
            ));
            assert!(matches!(
                store.delete(&r).await,
                Err(SecretStoreError::Backend(_))
            ));
        }
        let none = NoCredentialStore::NotConfigured;
        assert_eq!(none.list("acct", "int").await.unwrap(), Vec::<u64>::new());
        assert!(none.list_account("acct").await.unwrap().is_empty());
        let unusable = NoCredentialStore::Unusable;
        assert!(matches!(
            unusable.list("acct", "int").await,
            Err(SecretStoreError::Backend(_))
        ));
        assert!(matches!(
            unusable.list_account("acct").await,
            Err(SecretStoreError::Backend(_))
        ));
    }
}
