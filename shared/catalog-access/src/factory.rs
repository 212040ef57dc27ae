//! The provider registry: [`CatalogClientFactory`] picks the registered
//! [`CatalogClientProvider`] for a protocol. It sits above the providers and the SPI, so the
//! contract in [`crate::spi`] names no provider and no provider names another.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::delta_sharing::DeltaSharingProvider;
use crate::error::{CatalogAccessError, Result};
use crate::iceberg_rest::IcebergRestProvider;
use crate::spi::{
    CatalogAuthentication, CatalogClient, CatalogClientProvider, CatalogConnectionConfig,
    CatalogProtocol, ConnectOptions, ResolvedCatalogCredentials,
};
use crate::unity::UnityProvider;

/// Looks providers up by protocol. A missing provider is an explicit `Unsupported` error
/// and registering a second provider for a protocol is refused: there is no fallback and no
/// silent replacement.
#[derive(Default, Clone)]
pub struct CatalogClientFactory {
    providers: HashMap<CatalogProtocol, Arc<dyn CatalogClientProvider>>,
}

impl fmt::Debug for CatalogClientFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut protocols: Vec<_> = self.providers.keys().map(|p| p.as_str()).collect();
        protocols.sort_unstable();
        f.debug_struct("CatalogClientFactory")
            .field("protocols", &protocols)
            .finish()
    }
}

impl CatalogClientFactory {
    /// A factory with no providers.
    pub fn new() -> Self {
        Self::default()
    }

    /// A factory with the built-in providers: Iceberg REST, Unity Catalog, Delta Sharing.
    pub fn with_builtin_providers() -> Self {
        let builtins: [Arc<dyn CatalogClientProvider>; 3] = [
            Arc::new(IcebergRestProvider),
            Arc::new(UnityProvider),
            Arc::new(DeltaSharingProvider),
        ];
        let providers = builtins.into_iter().map(|p| (p.protocol(), p)).collect();
        Self { providers }
    }

    /// Registers a provider; a second provider for the same protocol is a `Config` error.
    pub fn register(&mut self, provider: Arc<dyn CatalogClientProvider>) -> Result<()> {
        let protocol = provider.protocol();
        if self.providers.contains_key(&protocol) {
            return Err(CatalogAccessError::config(format!(
                "a provider for {protocol} is already registered"
            )));
        }
        self.providers.insert(protocol, provider);
        Ok(())
    }

    /// Whether a provider is registered for `protocol`.
    pub fn supports(&self, protocol: CatalogProtocol) -> bool {
        self.providers.contains_key(&protocol)
    }

    /// Validates `config` and connects through the provider registered for `protocol`.
    pub fn connect(
        &self,
        protocol: CatalogProtocol,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Box<dyn CatalogClient>> {
        let provider = self.providers.get(&protocol).ok_or_else(|| {
            CatalogAccessError::unsupported(format!(
                "no catalog provider registered for {protocol}"
            ))
        })?;
        config.validate()?;
        provider.connect(config, auth, credentials, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dummy(CatalogProtocol);
    impl CatalogClientProvider for Dummy {
        fn protocol(&self) -> CatalogProtocol {
            self.0
        }
        fn connect(
            &self,
            _: &CatalogConnectionConfig,
            _: &CatalogAuthentication,
            _: ResolvedCatalogCredentials,
            _: &ConnectOptions,
        ) -> Result<Box<dyn CatalogClient>> {
            Err(CatalogAccessError::unsupported("dummy"))
        }
    }

    #[test]
    fn builtin_factory_serves_every_protocol_and_refuses_duplicates() {
        let mut f = CatalogClientFactory::with_builtin_providers();
        for p in [
            CatalogProtocol::IcebergRest,
            CatalogProtocol::Unity,
            CatalogProtocol::DeltaSharing,
        ] {
            assert!(f.supports(p), "{p}");
        }
        assert!(f.register(Arc::new(Dummy(CatalogProtocol::Unity))).is_err());
    }

    #[test]
    fn factory_refuses_duplicate_and_missing_providers() {
        let mut f = CatalogClientFactory::new();
        f.register(Arc::new(Dummy(CatalogProtocol::Unity))).unwrap();
        assert!(matches!(
            f.register(Arc::new(Dummy(CatalogProtocol::Unity))),
            Err(CatalogAccessError::Config(_))
        ));
        let cfg = CatalogConnectionConfig::new("https://h/");
        let missing = f.connect(
            CatalogProtocol::DeltaSharing,
            &cfg,
            &CatalogAuthentication::Bearer,
            ResolvedCatalogCredentials::None,
            &ConnectOptions::default(),
        );
        match missing {
            Err(CatalogAccessError::Unsupported(t)) => {
                assert!(t.as_str().contains("DELTA_SHARING"))
            }
            Err(other) => panic!("unexpected {other:?}"),
            Ok(_) => panic!("connected without a provider"),
        }
    }
}
