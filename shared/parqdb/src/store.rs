//! Access to warehouse objects through `object_store`.
//!
//! The catalog reads metadata documents (register, commit, garbage collection) and lists and
//! deletes objects (garbage collection) under one warehouse. Stores are rooted at the
//! warehouse, so every path here is warehouse-relative.
//!
//! Reads are hardened ([`DefaultWarehouseStores`]):
//! - a warehouse the host's [`WarehousePolicy`] does not admit is never opened;
//! - every read has a deadline ([`WarehouseIoLimits::read_deadline`]);
//! - local (`file://`) reads open without blocking and without following a final symlink,
//!   accept only regular files, refuse a path whose canonical form differs from its literal
//!   form (no symlink anywhere below the root; reported like a missing file, so that nothing
//!   outside can be probed), and run on the blocking pool under a semaphore of
//!   [`WarehouseIoLimits::max_concurrent_file_io`] permits held until the blocking call
//!   returns, so warehouse I/O can never take every blocking thread from the metastore.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig};

use crate::error::{IndexCatalogError, Result};
use crate::location::{Warehouse, WarehouseKind};
use crate::metadata::{MAX_METADATA_BYTES, Rule};
use crate::warehouse::WarehousePolicy;

static S3_ONLY: WarehousePolicy = WarehousePolicy::S3_ONLY;

/// Time allowed for one metadata read (default of [`WarehouseIoLimits::read_deadline`]).
pub const DEFAULT_READ_DEADLINE: Duration = Duration::from_secs(30);
/// Concurrent local warehouse operations (default of
/// [`WarehouseIoLimits::max_concurrent_file_io`]); tokio's blocking pool has 512 threads.
pub const DEFAULT_MAX_CONCURRENT_FILE_IO: usize = 16;

/// Opens an object store rooted at a warehouse. A seam so that the host decides credentials,
/// endpoints and location rules once, and tests can inject faults.
pub trait WarehouseStores: Send + Sync + 'static {
    fn open(&self, warehouse: &Warehouse) -> Result<Arc<dyn ObjectStore>>;

    /// The host's location rules, checked before a warehouse is accepted. Default: `s3://`
    /// warehouses only.
    fn policy(&self) -> &WarehousePolicy {
        &S3_ONLY
    }

    /// Reads one object of at most [`MAX_METADATA_BYTES`] (see [`Self::read_at_most`]).
    fn read<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, ReadError>> {
        self.read_at_most(warehouse, relative, MAX_METADATA_BYTES)
    }

    /// Reads one object of at most `max` bytes, refusing a larger one before and while
    /// reading. Default: through [`Self::open`], within [`DEFAULT_READ_DEADLINE`].
    fn read_at_most<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, ReadError>> {
        Box::pin(async move {
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            with_deadline(
                DEFAULT_READ_DEADLINE,
                read_capped(store.as_ref(), relative, max),
            )
            .await
        })
    }

    /// The size in bytes of one object, read as [`Self::read_at_most`] would reach it (a
    /// local path that is not a regular file reached without a symlink reads as missing or
    /// refused, never blocks). Default: through [`Self::open`], within
    /// [`DEFAULT_READ_DEADLINE`].
    fn size<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
    ) -> BoxFuture<'a, Result<u64, ReadError>> {
        Box::pin(async move {
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            with_deadline(DEFAULT_READ_DEADLINE, head_size(store.as_ref(), relative)).await
        })
    }

    /// Deletes every object below the directory `relative` (a table root). Default: every
    /// object the store lists there. Local warehouses never follow a symlink: a link is
    /// removed, never what it points to, and nothing is removed when the directory is reached
    /// through a symlinked parent.
    fn purge<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
    ) -> BoxFuture<'a, Result<(), ReadError>> {
        Box::pin(async move {
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            purge_listed(store.as_ref(), relative).await
        })
    }

    /// Whether a listed object may be collected: it is reached without leaving the warehouse.
    /// Default: yes (object stores have no links).
    fn confined(&self, _warehouse: &Warehouse, _relative: &str) -> bool {
        true
    }
}

/// Bounds of warehouse I/O on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarehouseIoLimits {
    /// Local (`file://`) operations running at once; further reads wait (within their
    /// deadline) for a permit.
    pub max_concurrent_file_io: usize,
    /// Time allowed for one metadata read, waiting for a permit included.
    pub read_deadline: Duration,
}

impl Default for WarehouseIoLimits {
    fn default() -> Self {
        Self {
            max_concurrent_file_io: DEFAULT_MAX_CONCURRENT_FILE_IO,
            read_deadline: DEFAULT_READ_DEADLINE,
        }
    }
}

/// `file://` through [`LocalFileSystem`] (reads through a hardened local path); `s3://`
/// through [`AmazonS3Builder::from_env`] with an optional endpoint override (moto, MinIO).
/// Stores are cached per warehouse. Without [`Self::with_policy`] only `s3://` warehouses are
/// admitted.
#[derive(Debug)]
pub struct DefaultWarehouseStores {
    s3_endpoint: Option<String>,
    policy: WarehousePolicy,
    limits: WarehouseIoLimits,
    permits: Arc<tokio::sync::Semaphore>,
    cache: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

impl Default for DefaultWarehouseStores {
    fn default() -> Self {
        let limits = WarehouseIoLimits::default();
        Self {
            s3_endpoint: None,
            policy: WarehousePolicy::S3_ONLY,
            limits,
            permits: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_file_io)),
            cache: Mutex::new(HashMap::new()),
        }
    }
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

    /// The host's location rules (a `file://` root on `flotilla serve`).
    pub fn with_policy(mut self, policy: WarehousePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The bounds of warehouse I/O.
    pub fn with_limits(mut self, limits: WarehouseIoLimits) -> Self {
        let permits = limits.max_concurrent_file_io.max(1);
        self.limits = limits;
        self.permits = Arc::new(tokio::sync::Semaphore::new(permits));
        self
    }

    fn admit(&self, warehouse: &Warehouse) -> Result<()> {
        self.policy
            .admit(warehouse)
            .map_err(|e| IndexCatalogError::invalid_argument(format!("warehouse: {e}")))
    }

    /// A local operation on the bounded pool: the permit travels into the blocking call and
    /// is released only when that call returns, even if the caller gave up at its deadline.
    async fn local<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ReadError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let deadline = tokio::time::Instant::now() + self.limits.read_deadline;
        let timed_out = || {
            ReadError::Catalog(IndexCatalogError::Unavailable {
                message: "reading the warehouse timed out".into(),
            })
        };
        let permit = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| {
                ReadError::Catalog(IndexCatalogError::Internal {
                    message: "warehouse I/O pool closed".into(),
                })
            })?;
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(ReadError::Catalog(IndexCatalogError::Internal {
                message: format!("warehouse read task failed: {join}"),
            })),
            Err(_) => Err(timed_out()),
        }
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
        self.admit(warehouse)?;
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

    fn policy(&self) -> &WarehousePolicy {
        &self.policy
    }

    fn read_at_most<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, ReadError>> {
        Box::pin(async move {
            self.admit(warehouse).map_err(ReadError::Catalog)?;
            if let Some(dir) = self.policy.local_dir(warehouse) {
                let path = dir.join(relative);
                return self.local(move || read_regular_file(&path, max)).await;
            }
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            with_deadline(
                self.limits.read_deadline,
                read_capped(store.as_ref(), relative, max),
            )
            .await
        })
    }

    fn size<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
    ) -> BoxFuture<'a, Result<u64, ReadError>> {
        Box::pin(async move {
            self.admit(warehouse).map_err(ReadError::Catalog)?;
            if let Some(dir) = self.policy.local_dir(warehouse) {
                let path = dir.join(relative);
                return self.local(move || regular_file_size(&path)).await;
            }
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            with_deadline(
                self.limits.read_deadline,
                head_size(store.as_ref(), relative),
            )
            .await
        })
    }

    fn purge<'a>(
        &'a self,
        warehouse: &'a Warehouse,
        relative: &'a str,
    ) -> BoxFuture<'a, Result<(), ReadError>> {
        Box::pin(async move {
            self.admit(warehouse).map_err(ReadError::Catalog)?;
            if let Some(dir) = self.policy.local_dir(warehouse) {
                let relative = relative.trim_matches('/').to_owned();
                return self.local(move || purge_local(&dir, &relative)).await;
            }
            let store = self.open(warehouse).map_err(ReadError::Catalog)?;
            purge_listed(store.as_ref(), relative).await
        })
    }

    fn confined(&self, warehouse: &Warehouse, relative: &str) -> bool {
        match self.policy.local_dir(warehouse) {
            Some(dir) => literal_is_canonical(&dir.join(relative)),
            None => self.policy.admit(warehouse).is_ok(),
        }
    }
}

/// Whether `path` exists and names itself: no component below the root is a symlink (and
/// no `.`/`..` survives), so the path cannot lead outside its warehouse.
fn literal_is_canonical(path: &FsPath) -> bool {
    std::fs::canonicalize(path).is_ok_and(|c| c == path)
}

/// Why [`open_regular_file`] refused a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalOpenError {
    /// Missing, or reached through a symlink (indistinguishable, so no oracle on the target).
    NotFound,
    /// A FIFO, a device, a socket or a directory.
    NotRegular,
    /// Any other failure to open or inspect it.
    Unreadable,
}

/// Opens a local regular file without ever blocking in `open` and without following a
/// symlink anywhere on its path: the one hardened local reader of index catalogs, the
/// Iceberg endpoint and capture's local upstream files. `path` must be absolute.
pub fn open_regular_file(path: &FsPath) -> Result<(std::fs::File, u64), LocalOpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    if !literal_is_canonical(path) {
        return Err(LocalOpenError::NotFound);
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LocalOpenError::NotFound),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(LocalOpenError::NotFound),
        Err(_) => return Err(LocalOpenError::Unreadable),
    };
    let meta = file.metadata().map_err(|_| LocalOpenError::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(LocalOpenError::NotRegular);
    }
    Ok((file, meta.len()))
}

/// Whether `path` is a real directory reached without a symlink (for listing it).
pub fn is_canonical_dir(path: &FsPath) -> bool {
    literal_is_canonical(path)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir())
}

/// Reads a local regular file of at most `max` bytes without ever blocking in `open`: a FIFO
/// or device is refused after a non-blocking open, a symlink is not followed, and a path that
/// leads elsewhere through a symlinked directory reads as missing (no oracle on what lies
/// outside the warehouse).
fn read_regular_file(path: &FsPath, max: usize) -> Result<Vec<u8>, ReadError> {
    let unreadable = || {
        ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::MetadataLocation,
            message: "the metadata file cannot be read".into(),
        })
    };
    let (mut file, len) = match open_regular_file(path) {
        Ok(opened) => opened,
        Err(LocalOpenError::NotFound) => return Err(ReadError::NotFound),
        Err(LocalOpenError::Unreadable) => return Err(unreadable()),
        Err(LocalOpenError::NotRegular) => {
            return Err(ReadError::Catalog(
                IndexCatalogError::InvalidIndexMetadata {
                    rule: Rule::MetadataLocation,
                    message: "the metadata location does not name a regular file".into(),
                },
            ));
        }
    };
    let too_large = || {
        ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::Size,
            message: format!("metadata file is larger than {max} bytes"),
        })
    };
    if len > max as u64 {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(len as usize);
    (&mut file)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| unreadable())?;
    if out.len() > max {
        return Err(too_large());
    }
    Ok(out)
}

/// The size of a local regular file reached without a symlink; anything else reads as
/// missing (a symlink anywhere) or is refused (a FIFO, a device, a directory). Only `lstat`:
/// nothing is opened.
fn regular_file_size(path: &FsPath) -> Result<u64, ReadError> {
    if !literal_is_canonical(path) {
        return Err(ReadError::NotFound);
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::NotFound),
        Err(_) => {
            return Err(ReadError::Catalog(
                IndexCatalogError::InvalidIndexMetadata {
                    rule: Rule::MetadataLocation,
                    message: "the metadata file cannot be read".into(),
                },
            ));
        }
    };
    if !meta.file_type().is_file() {
        return Err(ReadError::Catalog(
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::MetadataLocation,
                message: "the metadata location does not name a regular file".into(),
            },
        ));
    }
    Ok(meta.len())
}

/// Removes everything below `dir/relative` without following a symlink: a link (to a file
/// or a directory) is unlinked, its target stays. A table root reached through a symlinked
/// parent is left alone (its literal path leads outside what it names), and a table root
/// that is itself a link loses only the link.
fn purge_local(dir: &FsPath, relative: &str) -> Result<(), ReadError> {
    let failed = |e: std::io::Error| {
        ReadError::Catalog(IndexCatalogError::Unavailable {
            message: format!("purging the table directory failed: {e}"),
        })
    };
    if relative.is_empty()
        || relative
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(ReadError::Catalog(IndexCatalogError::InvalidArgument {
            message: "a purge names a directory below the warehouse".into(),
        }));
    }
    let root = dir.join(relative);
    let Some(parent) = root.parent() else {
        return Ok(());
    };
    if !literal_is_canonical(parent) {
        return Ok(());
    }
    let meta = match std::fs::symlink_metadata(&root) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(failed(e)),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(&root).map_err(failed);
    }
    remove_tree_no_follow(&root).map_err(failed)
}

/// Depth-first removal of a real directory; symlinks and other non-directories are unlinked.
fn remove_tree_no_follow(path: &FsPath) -> std::io::Result<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let p = entry.path();
        // `DirEntry::file_type` does not follow symlinks.
        if entry.file_type()?.is_dir() {
            remove_tree_no_follow(&p)?;
        } else {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes every object a store lists below `relative`.
async fn purge_listed(store: &dyn ObjectStore, relative: &str) -> Result<(), ReadError> {
    let dir = Path::parse(relative.trim_matches('/')).map_err(|e| {
        ReadError::Catalog(IndexCatalogError::InvalidArgument {
            message: format!("the table location is not a valid object path: {e}"),
        })
    })?;
    let mut listing = store.list(Some(&dir));
    while let Some(item) = listing.next().await {
        let item = item.map_err(|e| ReadError::Catalog(unavailable(e)))?;
        match store.delete(&item.location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(ReadError::Catalog(unavailable(e))),
        }
    }
    Ok(())
}

/// The size of one object from its metadata (`HEAD`).
async fn head_size(store: &dyn ObjectStore, relative: &str) -> Result<u64, ReadError> {
    let path = Path::parse(relative).map_err(|e| {
        ReadError::Catalog(IndexCatalogError::InvalidIndexMetadata {
            rule: Rule::MetadataLocation,
            message: format!("metadata location is not a valid object path: {e}"),
        })
    })?;
    match store.head(&path).await {
        Ok(meta) => Ok(meta.size),
        Err(object_store::Error::NotFound { .. }) => Err(ReadError::NotFound),
        Err(e) => Err(ReadError::Catalog(unavailable(e))),
    }
}

async fn with_deadline<T>(
    deadline: Duration,
    read: impl std::future::Future<Output = Result<T, ReadError>>,
) -> Result<T, ReadError> {
    tokio::time::timeout(deadline, read)
        .await
        .unwrap_or_else(|_| {
            Err(ReadError::Catalog(IndexCatalogError::Unavailable {
                message: "reading the warehouse timed out".into(),
            }))
        })
}

/// Why a metadata file could not be read.
#[derive(Debug)]
pub enum ReadError {
    NotFound,
    Catalog(IndexCatalogError),
}

/// Reads one object of at most `max` bytes, refusing larger ones before and while streaming
/// (the size in the listing may not be trusted).
pub(crate) async fn read_capped(
    store: &dyn ObjectStore,
    relative: &str,
    max: usize,
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
            message: format!("metadata file is larger than {max} bytes"),
        })
    };
    let result = match store.get_opts(&path, Default::default()).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Err(ReadError::NotFound),
        Err(e) => return Err(ReadError::Catalog(unavailable(e))),
    };
    if result.meta.size > max as u64 {
        return Err(too_large());
    }
    let mut out = Vec::new();
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Catalog(unavailable(e)))?;
        if out.len() + chunk.len() > max {
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
