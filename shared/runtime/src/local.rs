//! The embedded default behind `flotilla serve`: redb metastore under the data directory,
//! bearer tokens from the environment or a tokens file, no AWS account needed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_base::clock::SystemClock;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_services::auth::StaticTokens;
use flotilla_services::{AppState, Config};

/// Settings of the local stack.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    pub data_dir: PathBuf,
    pub allow_insecure_upstreams: bool,
    /// `FLOTILLA_BOOTSTRAP_TOKEN`: an operator token.
    pub bootstrap_token: Option<String>,
    /// `FLOTILLA_TOKENS_FILE`: `{"tokens": [{"token", "operator", "accounts"}]}`.
    pub tokens_file: Option<PathBuf>,
    /// `--warehouse-root` / `FLOTILLA_WAREHOUSE_ROOT`: the directory below which `file://`
    /// index warehouses may lie; `DATA_DIR/warehouses` when unset.
    pub warehouse_root: Option<PathBuf>,
    /// `--upstream-files-root` / `FLOTILLA_UPSTREAM_FILES_ROOT`: the only directory below
    /// which capture reads `file://` locations an upstream names; unset: never.
    pub upstream_files_root: Option<PathBuf>,
}

impl LocalOptions {
    /// Options for `data_dir` with every other setting at its default.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            allow_insecure_upstreams: false,
            bootstrap_token: None,
            tokens_file: None,
            warehouse_root: None,
            upstream_files_root: None,
        }
    }

    /// The `file://` warehouse root in force.
    pub fn warehouse_root(&self) -> PathBuf {
        self.warehouse_root
            .clone()
            .unwrap_or_else(|| self.data_dir.join("warehouses"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("cannot prepare data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the metastore: {0}")]
    Metastore(String),
    #[error("{0}")]
    Tokens(String),
    #[error("cannot open the local credential store: {0}")]
    Secrets(String),
    #[error("cannot use the upstream files root {path}: {source}")]
    UpstreamFilesRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot prepare the warehouse root {path}: {source}")]
    WarehouseRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the event sink deliverer: {0}")]
    EventSinks(String),
}

/// What `flotilla serve` runs on.
pub struct LocalStack {
    pub state: AppState,
    /// Where a generated operator token was written, when none was configured.
    pub generated_token_file: Option<PathBuf>,
    /// The in-process reconcile queue: the state's work sender (the routes that enqueue
    /// capture jobs send to it) and its deliveries, consumed by [`spawn_reconcile`]'s worker
    /// (or drained by a test).
    pub work: LocalQueue,
}

/// The in-process reconcile queue of a local stack.
pub struct LocalQueue {
    pub queue: crate::queue::ChannelQueue,
    pub deliveries: tokio::sync::mpsc::UnboundedReceiver<crate::queue::Delivery>,
}

impl LocalQueue {
    /// Runs the worker on every delivery waiting now, in order, and on those that handling
    /// them queues (capture jobs, follow-up legs), as `flotilla serve`'s worker would; answers
    /// each message with what the worker did and what handling it came to. For a test that
    /// steps the queue by hand instead of spawning the worker.
    pub async fn drain(
        &mut self,
        state: &AppState,
        connector: &dyn flotilla_reconcile::Connector,
    ) -> Vec<(
        flotilla_reconcile::schedule::WorkMessage,
        crate::queue::DeliveryResult,
        flotilla_reconcile::work::MessageOutcome,
    )> {
        let mut out = Vec::new();
        while let Ok(d) = self.deliveries.try_recv() {
            let message = d.message.clone();
            let (result, outcome) = crate::queue::handle_delivery_outcome(
                state,
                connector,
                &self.queue,
                d,
                &crate::queue::WorkerOptions::default(),
            )
            .await;
            out.push((message, result, outcome));
        }
        out
    }
}

pub fn build(opts: &LocalOptions) -> Result<LocalStack, LocalError> {
    create_private_dir(&opts.data_dir)?;
    let metastore_path = opts.data_dir.join("metastore.redb");
    let redb =
        RedbMetastore::open(&metastore_path).map_err(|e| LocalError::Metastore(e.to_string()))?;
    // redb creates its file with the process umask; the metastore holds every account's
    // configuration, so only the owner may read it.
    make_private(&metastore_path, 0o600)?;
    let warehouse_root = opts.warehouse_root();
    let warehouse_policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(
        &warehouse_root,
    )
    .map_err(|source| LocalError::WarehouseRoot {
        path: warehouse_root.clone(),
        source,
    })?;
    let counting = CountingMetastore::new(redb);
    let counters = counting.counters();

    let mut tokens = StaticTokens::new();
    if let Some(t) = &opts.bootstrap_token {
        if t.len() < 8 {
            return Err(LocalError::Tokens(
                "FLOTILLA_BOOTSTRAP_TOKEN needs at least 8 characters".into(),
            ));
        }
        tokens.add(t, true, Vec::new());
    }
    if let Some(f) = &opts.tokens_file {
        tokens.load_file(f).map_err(LocalError::Tokens)?;
    }
    let generated_token_file = if tokens.is_empty() {
        let (token, path) = generated_operator_token(&opts.data_dir)?;
        tokens.add(&token, true, Vec::new());
        Some(path)
    } else {
        None
    };

    // Integration credentials: sealed files under the data directory, keyed by
    // `FLOTILLA_SECRET_KEY` or a 0600 key file created on first use.
    let (credentials, _key_source) =
        flotilla_secrets::local::LocalEncryptedStore::open(&opts.data_dir.join("secrets"))
            .map_err(|e| LocalError::Secrets(e.to_string()))?;

    let upstream_files_root =
        match &opts.upstream_files_root {
            Some(dir) => Some(std::fs::canonicalize(dir).map_err(|source| {
                LocalError::UpstreamFilesRoot {
                    path: dir.clone(),
                    source,
                }
            })?),
            None => None,
        };
    let config = Config {
        allow_insecure_upstreams: opts.allow_insecure_upstreams,
        upstream_files_root,
        reconcile: flotilla_base::limits::Limits::from_env(),
        // The host runs the event sink deliverer (`spawn_event_sinks`).
        event_sinks: true,
        ..Config::default()
    };
    let state = AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(tokens),
        config,
    )
    .with_metric_source(counters)
    // `file://` index warehouses below the warehouse root; `s3://` ones too, sent to
    // `FLOTILLA_S3_ENDPOINT` if set.
    .with_index_stores(
        flotilla_services::service::index_catalogs::local_warehouse_stores(warehouse_policy),
    )
    .with_credentials(Arc::new(credentials))
    // Service principals' access tokens, signed under a key kept in the data directory so
    // that tokens survive a restart.
    .with_token_signer(Arc::new(token_signer(&opts.data_dir)?));
    let (queue, deliveries) = crate::queue::ChannelQueue::new();
    let state = state.with_work_sender(Arc::new(queue.clone()));
    Ok(LocalStack {
        state,
        generated_token_file,
        work: LocalQueue { queue, deliveries },
    })
}

/// With no token configured, an operator token is generated once and kept in
/// `DATA_DIR/operator-token` (mode 0600), so a first `flotilla serve` is usable at once. The
/// token itself is never logged.
fn generated_operator_token(data_dir: &Path) -> Result<(String, PathBuf), LocalError> {
    let path = data_dir.join("operator-token");
    let token = kept_secret(
        &path,
        |t| t.len() >= 8,
        || format!("flo_{}", flotilla_domain::names::new_id()) + &flotilla_domain::names::new_id(),
    )?;
    Ok((token, path))
}

/// The key service principals' access tokens are signed with: 32 random bytes in
/// `DATA_DIR/token-signing-key` (mode 0600), created on first start. Removing the file ends
/// every issued token at the next start (clients then exchange their credentials again).
fn token_signer(data_dir: &Path) -> Result<flotilla_services::auth::TokenSigner, LocalError> {
    use flotilla_services::auth::TokenSigner;
    let path = data_dir.join("token-signing-key");
    let key = kept_secret(
        &path,
        |k| TokenSigner::from_hex(k).is_some(),
        TokenSigner::new_key_hex,
    )?;
    TokenSigner::from_hex(&key).ok_or_else(|| LocalError::Tokens("token signing key".into()))
}

/// A secret the host keeps in a file of its data directory (mode 0600): the file's trimmed
/// text when `valid`, else `fresh()` written there first.
fn kept_secret(
    path: &Path,
    valid: impl Fn(&str) -> bool,
    fresh: impl FnOnce() -> String,
) -> Result<String, LocalError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| LocalError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(existing) = std::fs::read_to_string(path) {
        let t = existing.trim();
        if valid(t) {
            make_private(path, 0o600)?;
            return Ok(t.to_owned());
        }
    }
    let secret = fresh();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(secret.as_bytes()).map_err(io)?;
    make_private(path, 0o600)?;
    Ok(secret)
}

/// Creates the data directory (mode 0700) when missing. An existing directory keeps its mode
/// (it may be one the operator chose and shares on purpose); the files in it are 0600.
fn create_private_dir(dir: &Path) -> Result<(), LocalError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| LocalError::DataDir {
            path: dir.to_path_buf(),
            source,
        })
}

/// Narrows a file of the data directory to `mode` (never widens it).
fn make_private(path: &Path, mode: u32) -> Result<(), LocalError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| LocalError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    let current = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(current & mode))
            .map_err(io)?;
    }
    Ok(())
}

/// The reconcile scheduler loop and worker of `flotilla serve`, on the in-process queue.
/// Dropping it stops both.
pub struct ReconcileTasks {
    scheduler: tokio::task::JoinHandle<()>,
    worker: tokio::task::JoinHandle<()>,
}

impl Drop for ReconcileTasks {
    fn drop(&mut self) {
        self.scheduler.abort();
        self.worker.abort();
    }
}

/// Starts the same scheduler and reconciler the Lambdas run, in-process, on the stack's
/// queue: a pass every `FLOTILLA_SCHEDULE_SECS` seconds (default 60) enqueues due overlays,
/// and the worker runs them and the jobs the routes enqueue, a few at a time and fairly
/// between accounts (`WorkerOptions::from_env`).
pub fn spawn_reconcile(state: &AppState, work: LocalQueue) -> ReconcileTasks {
    use crate::queue::{WorkerOptions, run_channel_worker, run_scheduler_loop};
    let every = std::env::var("FLOTILLA_SCHEDULE_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(60);
    let LocalQueue {
        queue,
        deliveries: rx,
    } = work;
    let connector: flotilla_reconcile::DynConnector =
        Arc::new(flotilla_reconcile::AdapterConnector);
    let worker = tokio::spawn(run_channel_worker(
        state.clone(),
        connector,
        queue.clone(),
        rx,
        WorkerOptions::from_env(),
    ));
    let scheduler = tokio::spawn(run_scheduler_loop(
        state.clone(),
        Arc::new(queue),
        std::time::Duration::from_secs(every),
    ));
    ReconcileTasks { scheduler, worker }
}

/// The event sink deliverer, stopped on drop.
pub struct EventSinkTask(tokio::task::JoinHandle<()>);

impl Drop for EventSinkTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts delivering event sinks (`flotilla_services::service::event_sinks`): a pass every
/// `FLOTILLA_EVENT_SINK_TICK_MS` milliseconds (default 1000) over every due sink, each POST
/// through the upstream client under the host's address policy.
pub fn spawn_event_sinks(state: &AppState) -> Result<EventSinkTask, LocalError> {
    use flotilla_services::service::event_sinks::{Deliverer, HttpTransport};
    let every = std::env::var("FLOTILLA_EVENT_SINK_TICK_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .unwrap_or(1000);
    let transport = HttpTransport::new(state).map_err(|e| LocalError::EventSinks(e.to_string()))?;
    let deliverer = Deliverer::new(state.clone(), Arc::new(transport));
    Ok(EventSinkTask(tokio::spawn(
        deliverer.run(std::time::Duration::from_millis(every)),
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn data_directory_files_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let stack = build(&LocalOptions::new(&data)).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("metastore.redb")), 0o600);
        let token = stack.generated_token_file.unwrap();
        assert_eq!(mode(&token), 0o600);
        assert_eq!(mode(&data.join("warehouses")), 0o700);
        // Everything in the data directory (credential store and its key included) is
        // private to the owner.
        let mut pending = vec![data.clone()];
        let mut seen = 0;
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                seen += 1;
                let m = mode(&path);
                assert_eq!(m & 0o077, 0, "{} has mode {m:o}", path.display());
                if path.is_dir() {
                    pending.push(path);
                }
            }
        }
        assert!(seen >= 4, "metastore, token, secrets, warehouses");
        drop(stack.state);
        // A file widened by hand is narrowed again at the next start.
        std::fs::set_permissions(
            data.join("metastore.redb"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let _again = build(&LocalOptions::new(&data)).unwrap();
        assert_eq!(mode(&data.join("metastore.redb")), 0o600);
    }
}
