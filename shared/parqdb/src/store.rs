//! Access to warehouse objects through `object_store`.
//!
//! The catalog reads metadata documents (register, commit, garbage collection) and lists and
//! deletes objects (garbage collection) under one warehouse. Stores are rooted at the
//! warehouse, so every path here is warehouse-relative.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use crate::error::{IndexCatalogError, Result};
use crate::location::{Warehouse, WarehouseKind};
use crate::metadata::{MAX_METADATA_BYTES, Rule};

/// Opens an object store rooted at a warehouse. A seam so that the host decides credentials
/// and endpoints once, and tests can inject faults.
pub trait WarehouseStores: Send + Sync + 'static {
    fn open(&self, warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>>;
}

/// `file://` through [`LocalFileSystem`]; `s3://` through [`AmazonS3Builder::from_env`] with an
/// optional endpoint override (moto, MinIO). Stores are cached per warehouse.
#[derive(Debug, Default)]
pub struct DefaultWarehouseStores {
    s3_endpoint: Option<String>,
    cache: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl DefaultWarehouseStores {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends S3 requests to `endpoint` (path-style, plain http allowed) instead of AWS.
    pub fn with_s3_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.s3_endpoint = Some(endpoint.into());
        self
    }

    fn build(&self, warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>> {
        match warehouse.kind() {
            WarehouseKind::File { root } => {
                let prefix = Path::parse(root).map_err(|e| IndexCatalogError::Internal {
                    message: format!("warehouse root is not a valid object path: {e}"),
                })?;
                Ok(Arc::new(PrefixStore::new(LocalFileSystem::new(), prefix)))
            }
            WarehouseKind::S3 { bucket, prefix } => {
                // Bounded retries and timeouts: a catalog request must not hang for minutes
                // on an unreachable bucket.
                let retry = RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(20),
                    ..Default::default()
                };
                let options = ClientOptions::new()
                    .with_timeout(Duration::from_secs(30))
                    .with_connect_timeout(Duration::from_secs(5));
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .with_client_options(options);
                if let Some(endpoint) = &self.s3_endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(true)
                        .with_virtual_hosted_style_request(false);
                }
                let s3 = builder
                    .build()
                    .map_err(|e| IndexCatalogError::Unavailable {
                        message: format!("cannot open the warehouse bucket: {e}"),
                    })?;
                let prefix = Path::parse(prefix).map_err(|e| IndexCatalogError::Internal {
                    message: format!("warehouse prefix is not a valid object path: {e}"),
                })?;
                Ok(Arc::new(PrefixStore::new(s3, prefix)))
            }
        }
    }
}

impl WarehouseStores for DefaultWarehouseStores {
    fn open(&self, warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>> {
        let mut cache = self.cache.lock().map_err(|_| IndexCatalogError::Internal {
            message: "warehouse store cache poisoned".into(),
        })?;
        if let Some(store) = cache.get(warehouse.as_str()) {
            return Ok(store.clone());
        }
        let store = self.build(warehouse)?;
        cache.insert(warehouse.as_str().to_owned(), store.clone());
        Ok(store)
    }
}

/// Why a metadata file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    NotFound,
    Catalog(IndexCatalogError),
}

/// Reads one object of at most [`MAX_METADATA_BYTES`], refusing larger ones before and while
/// streaming (the size in the listing may not be trusted).
pub(crate) async fn read_capped(
    store: &dyn ObjectStore,
    relative: &str,
) -> Result<Vec<u8>, ReadError> {
    let path = Path::parse(relative).map_err(|e| {
        ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::MetadataLocation,
            message: format!("metadata location is not a valid object path: {e}"),
        })
    })?;
    let too_large = || {
        ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::Size,
            message: format!("metadata file is larger than {MAX_METADATA_BYTES} bytes"),
        })
    };
    let result = match store.get_opts(&path, Default::default()).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Err(ReadError::NotFound),
        Err(e) => return Err(ReadError::Catalog(unavailable(e))),
    };
    if result.meta.size > MAX_METADATA_BYTES as u64 {
        return Err(too_large());
    }
    let mut out = Vec::new();
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Catalog(unavailable(e)))?;
        if out.len() + chunk.len() > MAX_METADATA_BYTES {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

pub(crate) fn unavailable(e: object_store::Error) -> IndexCatalogError {
    IndexCatalogError::Unavailable {
        message: format!("warehouse storage failure: {e}"),
    }
}
