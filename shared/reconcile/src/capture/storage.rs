//! Object storage of capture: the upstream's table files (read with the credentials the
//! upstream vends for the table, never the integration's own secret), and the catalog's own
//! storage, where captured state objects are written.

use std::sync::Arc;

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::object_storage::{self, PolicyConnector};
use flotilla_catalog_access::spi::{StorageCredential, VendedCredentials};
use flotilla_domain::model::CatalogRecord;
use flotilla_parqdb::location::Warehouse;
use object_store::ObjectStore;
use object_store::path::Path;
use url::Url;

use flotilla_services::state::AppState;

/// Where one object of an upstream table lies: the store that reaches it and its path there.
pub struct Located {
    pub store: Arc<dyn ObjectStore>,
    pub path: Path,
}

/// Why an upstream location cannot be read. `NotReadable` is a lasting property of the
/// table and its upstream (recorded, and answered by the query endpoint); `Invalid` is a
/// location Flotilla does not understand.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("not readable: {0}")]
    NotReadable(String),
    #[error("invalid location {location}: {reason}")]
    Invalid { location: String, reason: String },
}

/// Opens upstream storage for one table's locations: one store per bucket (S3 with the
/// vended keys) or, for `file://` warehouses, the local file system (only when the host
/// allows insecure upstreams).
///
/// Every connection an S3 store opens goes through the upstream address policy, as catalog
/// calls do (`docs/reliability.md`, "Capture honours the address policy"): the vended
/// endpoint is checked before the store is built, and the store's transport is a
/// [`PolicyConnector`] (names checked after resolution, redirects re-checked).
pub struct UpstreamFiles {
    vended: Option<VendedCredentials>,
    /// The host runs with `--allow-insecure-upstreams` (local files need it too).
    allow_local: bool,
    /// The canonical directory below which `file://` locations are read; `None`: every
    /// `file://` location is refused, whatever the insecure flag says.
    local_root: Option<std::path::PathBuf>,
    http: HttpPolicy,
    stores: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>,
}

impl UpstreamFiles {
    /// `allow_insecure`: the host runs with `--allow-insecure-upstreams` (loopback and
    /// private storage endpoints and plain http are then allowed; link-local and metadata
    /// addresses never are). Local `file://` locations need the flag and a root named by
    /// [`Self::with_local_root`].
    pub fn new(vended: Option<VendedCredentials>, allow_insecure: bool) -> Self {
        Self {
            vended,
            allow_local: allow_insecure,
            local_root: None,
            http: if allow_insecure {
                HttpPolicy::local()
            } else {
                HttpPolicy::default()
            },
            stores: Default::default(),
        }
    }

    /// The host's settings: the insecure flag and the operator's upstream files root
    /// (`flotilla serve --upstream-files-root`).
    pub fn for_host(vended: Option<VendedCredentials>, config: &flotilla_services::Config) -> Self {
        Self::new(vended, config.allow_insecure_upstreams)
            .with_local_root(config.upstream_files_root.clone())
    }

    /// Reads `file://` locations below `root` only (canonicalized here; a root that cannot
    /// be canonicalized allows nothing), through the hardened local reader
    /// ([`super::local_files::RootedLocalFiles`]).
    pub fn with_local_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        self.local_root = root.and_then(|r| std::fs::canonicalize(r).ok());
        self
    }

    /// The HTTP policy of the storage connections (tests: fixed DNS answers, see
    /// [`HttpPolicy::static_hosts`]).
    pub fn with_http_policy(mut self, policy: HttpPolicy) -> Self {
        self.http = policy;
        self
    }

    /// Whether reading `location` needs vended credentials (any remote scheme does).
    pub fn needs_credentials(location: &str) -> bool {
        !location.starts_with("file:")
    }

    pub fn locate(&self, location: &str) -> Result<Located, StorageError> {
        let invalid = |reason: &str| StorageError::Invalid {
            location: location.to_owned(),
            reason: reason.to_owned(),
        };
        let url = Url::parse(location).map_err(|e| invalid(&e.to_string()))?;
        match url.scheme() {
            "file" => {
                if !self.allow_local {
                    return Err(StorageError::NotReadable(
                        "the upstream names a local file:// path, which this server reads only \
                         when it runs with --allow-insecure-upstreams and --upstream-files-root"
                            .into(),
                    ));
                }
                let Some(root) = &self.local_root else {
                    return Err(StorageError::NotReadable(
                        "the upstream names a local file:// path, which this server never reads \
                         unless its operator configures a directory for upstream files \
                         (flotilla serve --upstream-files-root)"
                            .into(),
                    ));
                };
                let path = url
                    .to_file_path()
                    .map_err(|()| invalid("not an absolute file path"))?;
                if !super::local_files::below_root(root, &path) {
                    return Err(StorageError::NotReadable(format!(
                        "the upstream names a local file outside the directory this server \
                         reads upstream files from ({})",
                        crate::status::bound_text(location)
                    )));
                }
                let path = Path::from_absolute_path(&path).map_err(|e| invalid(&e.to_string()))?;
                let root = root.clone();
                let store = self.cached("file", || {
                    Ok(Arc::new(super::local_files::RootedLocalFiles::new(root)))
                })?;
                Ok(Located { store, path })
            }
            "s3" | "s3a" | "s3n" => {
                let bucket = url
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| invalid("no bucket"))?
                    .to_owned();
                let key = url.path().trim_start_matches('/');
                let path = Path::parse(percent_decode(key)).map_err(|e| invalid(&e.to_string()))?;
                let vended = self.vended.as_ref().ok_or_else(|| {
                    StorageError::NotReadable(
                        "the table's storage needs credentials and the upstream vends none for it"
                            .into(),
                    )
                })?;
                if !vended.covers(location) {
                    return Err(StorageError::NotReadable(format!(
                        "the credentials the upstream vends do not cover {location}"
                    )));
                }
                let store = self.cached(&format!("s3://{bucket}"), || {
                    s3_store(&bucket, vended, &self.http)
                })?;
                Ok(Located { store, path })
            }
            other => Err(StorageError::NotReadable(format!(
                "{other}:// storage is not supported by capture (only s3:// and, in local \
                 development, file://)"
            ))),
        }
    }

    fn cached(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<Arc<dyn ObjectStore>, StorageError>,
    ) -> Result<Arc<dyn ObjectStore>, StorageError> {
        let mut stores = self
            .stores
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = stores.get(key) {
            return Ok(s.clone());
        }
        let s = make()?;
        stores.insert(key.to_owned(), s.clone());
        Ok(s)
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("k={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

/// Why an object-store operation failed, when the address policy refused where it led (a
/// name resolving to a refused address, a redirect to one): the table's storage is then not
/// readable through Flotilla, which no retry changes.
pub fn refused(e: &object_store::Error) -> Option<StorageError> {
    object_storage::refusal(e)
        .map(|r| StorageError::NotReadable(format!("the upstream's storage was {r}")))
}

/// Retries of one object-store request of capture after its first attempt (each attempt is
/// bounded by the HTTP policy's `request_timeout`, body included: 30 s by default).
pub const MAX_OBJECT_RETRIES: usize = 2;
/// The time within which a request and its retries must finish.
pub const OBJECT_RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90);

fn s3_store(
    bucket: &str,
    v: &VendedCredentials,
    http: &HttpPolicy,
) -> Result<Arc<dyn ObjectStore>, StorageError> {
    let StorageCredential::S3 {
        access_key_id,
        secret_access_key,
        session_token,
    } = &v.credential
    else {
        return Err(StorageError::NotReadable(format!(
            "the upstream vends {} credentials for an s3:// location",
            v.credential.kind_name()
        )));
    };
    let s3 = v.s3_settings();
    let region = s3.region.as_deref().unwrap_or("us-east-1");
    // The region becomes part of the default endpoint's host name.
    if !object_storage::is_region_name(region) {
        return Err(StorageError::NotReadable(
            "the S3 region the upstream vends is not a region name".into(),
        ));
    }
    let mut b = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_access_key_id(access_key_id.expose())
        .with_secret_access_key(secret_access_key.expose())
        .with_region(region)
        .with_retry(object_store::RetryConfig {
            max_retries: MAX_OBJECT_RETRIES,
            retry_timeout: OBJECT_RETRY_TIMEOUT,
            ..Default::default()
        })
        // The policy's attempt bound (body included), not object_store's own default.
        .with_client_options(
            object_store::ClientOptions::new()
                .with_timeout(http.request_timeout)
                .with_connect_timeout(http.connect_timeout),
        )
        .with_http_connector(PolicyConnector::new(http.clone()));
    if let Some(t) = session_token {
        b = b.with_token(t.expose());
    }
    if let Some(endpoint) = s3.endpoint.as_deref() {
        let url = object_storage::check_endpoint(http, endpoint).map_err(|r| {
            StorageError::NotReadable(format!("the S3 endpoint the upstream vends was {r}"))
        })?;
        b = b
            .with_endpoint(endpoint.trim())
            .with_allow_http(url.scheme() == "http")
            .with_virtual_hosted_style_request(false);
    }
    b.build()
        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>)
        .map_err(|e| StorageError::NotReadable(format!("cannot open the S3 store: {e}")))
}

/// Where a catalog's captured state objects are written: the catalog's `warehouse` property
/// when set, else the host's warehouse root (`file://<root>/<account>/<catalog id>/`, as the
/// Iceberg endpoint assigns it), below the relative prefix [`CAPTURE_DIR`].
pub struct CatalogFiles {
    pub store: Arc<dyn ObjectStore>,
    pub warehouse: String,
}

/// The directory of captured state below a catalog's warehouse (swept when the catalog is
/// deleted).
pub use flotilla_services::service::captured::CAPTURE_DIR;

impl CatalogFiles {
    pub fn open(state: &AppState, catalog: &CatalogRecord) -> Result<Self, String> {
        let root = state.index_stores.policy().file_root();
        let Some(uri) = catalog.warehouse_uri(root) else {
            return Err(
                "the target catalog has no \"warehouse\" property to keep captured state in".into(),
            );
        };
        let warehouse = Warehouse::parse(&uri).map_err(|e| e.0)?;
        let store = state
            .index_stores
            .open(&warehouse)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            store,
            warehouse: uri,
        })
    }

    /// The warehouse-relative path of one captured state object.
    pub fn object_path(relation_id: &str, validation_id: &str) -> String {
        format!("{CAPTURE_DIR}/{relation_id}/{validation_id}.json")
    }
}
