//! Local upstream files (`file://` locations an upstream names), read only below the root
//! the operator configures (`flotilla serve --upstream-files-root`) and only through the
//! hardened reader of index catalogs (`flotilla_parqdb::store::open_regular_file`): regular
//! files reached without a symlink, opened without blocking, each operation within a
//! deadline. Nothing is written, copied or deleted.

use std::ops::Range;
use std::path::{Component, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use flotilla_parqdb::store::{LocalOpenError, is_canonical_dir, open_regular_file};

/// Time allowed for one local operation (open, read of a range, listing).
pub const LOCAL_READ_DEADLINE: Duration = Duration::from_secs(30);
/// Local operations of one capture running at once.
pub const MAX_CONCURRENT_LOCAL_READS: usize = 16;
/// The largest whole-object read; larger ones are refused before any byte is read (ranged
/// reads, such as footers, may address larger files).
pub const MAX_WHOLE_READ: u64 = 64 * 1024 * 1024;

const STORE: &str = "upstream-files";

/// Whether `path` (absolute, as an upstream named it) lies strictly below `root` with no
/// `..`, `.` or other non-normal component.
pub fn below_root(root: &std::path::Path, path: &std::path::Path) -> bool {
    path.is_absolute()
        && path.starts_with(root)
        && path != root
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The read-only store of local upstream files below one root.
#[derive(Debug)]
pub struct RootedLocalFiles {
    root: PathBuf,
    permits: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Display for RootedLocalFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootedLocalFiles({})", self.root.display())
    }
}

fn generic(message: impl Into<String>) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: message.into().into(),
    }
}

fn not_found(path: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: path.to_string(),
        source: "no such regular file below the upstream files root".into(),
    }
}

fn read_only() -> object_store::Error {
    object_store::Error::NotSupported {
        source: "local upstream files are read only".into(),
    }
}

impl RootedLocalFiles {
    /// `root` must be canonical (symlink-free); see `UpstreamFiles::with_local_root`.
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_LOCAL_READS)),
        }
    }

    /// The local path of an object path (absolute paths as object paths), refused unless it
    /// lies below the root.
    fn local(&self, location: &Path) -> Result<PathBuf, object_store::Error> {
        let path = PathBuf::from(format!("/{location}"));
        if below_root(&self.root, &path) {
            Ok(path)
        } else {
            Err(not_found(location))
        }
    }

    /// Runs `work` on the blocking pool within [`LOCAL_READ_DEADLINE`] (permit wait
    /// included); the permit is held until the call returns.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, object_store::Error> + Send + 'static,
    ) -> Result<T, object_store::Error> {
        let deadline = tokio::time::Instant::now() + LOCAL_READ_DEADLINE;
        let timed_out = || generic("reading a local upstream file timed out");
        let permit = tokio::time::timeout_at(deadline, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| timed_out())?
            .map_err(|_| generic("local read pool closed"))?;
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(generic(format!("local read task failed: {join}"))),
            Err(_) => Err(timed_out()),
        }
    }
}

fn meta(location: Path, size: u64) -> ObjectMeta {
    ObjectMeta {
        location,
        last_modified: Default::default(),
        size,
        e_tag: None,
        version: None,
    }
}

#[async_trait]
impl ObjectStore for RootedLocalFiles {
    async fn put_opts(
        &self,
        _: &Path,
        _: PutPayload,
        _: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(read_only())
    }

    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(read_only())
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let path = self.local(location)?;
        let at = location.clone();
        let head = options.head;
        let range = options.range.clone();
        let (size, range, bytes) = self
            .blocking(move || {
                use std::io::{Read, Seek, SeekFrom};
                let (mut file, size) = match open_regular_file(&path) {
                    Ok(opened) => opened,
                    // Every refusal is permanent (the object is not there for capture):
                    // missing, a symlink on the way, a FIFO, a device, a directory.
                    Err(LocalOpenError::NotFound) => return Err(not_found(&at)),
                    Err(LocalOpenError::NotRegular | LocalOpenError::Unreadable) => {
                        return Err(object_store::Error::NotFound {
                            path: at.to_string(),
                            source: "not a readable regular file".into(),
                        });
                    }
                };
                let range: Range<u64> = match &range {
                    Some(r) => r
                        .as_range(size)
                        .map_err(|e| generic(format!("{at}: {e}")))?,
                    None => 0..size,
                };
                if head || (options.range.is_none() && size > MAX_WHOLE_READ) {
                    // The caller sees the size and refuses; nothing is read.
                    return Ok((size, range, None));
                }
                file.seek(SeekFrom::Start(range.start))
                    .map_err(|e| generic(format!("{at}: {e}")))?;
                let len = range.end - range.start;
                let mut out = Vec::with_capacity(len.min(MAX_WHOLE_READ) as usize);
                file.take(len)
                    .read_to_end(&mut out)
                    .map_err(|e| generic(format!("{at}: {e}")))?;
                Ok((size, range, Some(Bytes::from(out))))
            })
            .await?;
        let payload = match bytes {
            Some(b) => futures::stream::once(async move { Ok(b) }).boxed(),
            None => futures::stream::once(async move {
                Err(generic(format!(
                    "not read: larger than {MAX_WHOLE_READ} bytes, or a head request"
                )))
            })
            .boxed(),
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta: meta(location.clone(), size),
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations.map(|_| Err(read_only())).boxed()
    }

    /// The regular files directly in the directory `prefix` (a Delta log), reached without
    /// a symlink; links and anything else in it are skipped.
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let Some(prefix) = prefix.cloned() else {
            return futures::stream::once(async { Err(generic("listing needs a directory")) })
                .boxed();
        };
        let dir = match self.local(&prefix) {
            Ok(d) => d,
            Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
        };
        let permits = self.permits.clone();
        let root = self.root.clone();
        let listed = async move {
            let store = RootedLocalFiles { root, permits };
            store
                .blocking(move || {
                    if !is_canonical_dir(&dir) {
                        return Err(not_found(&prefix));
                    }
                    let mut out = Vec::new();
                    let entries =
                        std::fs::read_dir(&dir).map_err(|e| generic(format!("{prefix}: {e}")))?;
                    for entry in entries {
                        let entry = entry.map_err(|e| generic(format!("{prefix}: {e}")))?;
                        // `DirEntry::file_type` does not follow symlinks.
                        let Ok(kind) = entry.file_type() else {
                            continue;
                        };
                        if !kind.is_file() {
                            continue;
                        }
                        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                            continue;
                        };
                        let Ok(m) = entry.metadata() else {
                            continue;
                        };
                        out.push(meta(prefix.clone().join(name), m.len()));
                    }
                    Ok(out)
                })
                .await
        };
        futures::stream::once(listed)
            .flat_map(|r| match r {
                Ok(items) => futures::stream::iter(items.into_iter().map(Ok)).boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(object_store::Error::NotSupported {
            source: "local upstream files are listed one directory at a time".into(),
        })
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(read_only())
    }
}
