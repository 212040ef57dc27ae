//! The memory of metadata loads: one process-wide budget of bytes that every load of a
//! metadata document (`loadTable`, `loadView`, a federated `loadTable`) holds a share of from
//! before it reads the file until its answer has been sent. Loads beyond the budget wait for
//! earlier ones to finish (within [`LoadBudget::wait`]) instead of allocating, so many
//! concurrent loads of a large table cost the budget, not the table's size times the number
//! of clients (`docs/reliability.md`, "Legal operations cannot exhaust memory").
//!
//! A load is charged [`MEMORY_PER_METADATA_BYTE`] times the size of its metadata file (the
//! file's bytes, the parsed metadata, its JSON value and the answer's bytes are alive at
//! once), at least [`SMALL_LOAD_BYTES`] of file, at most the whole budget (so a document
//! larger than the budget still loads, alone).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{IcebergError, IcebergResult};

/// Default of the budget: bytes of memory all metadata loads of the process hold at once.
pub const DEFAULT_LOAD_BUDGET_BYTES: usize = 256 * 1024 * 1024;

/// Default of [`LoadBudget::wait`]: the warehouse stores' read deadline.
pub const DEFAULT_LOAD_WAIT: Duration = flotilla_parqdb::store::DEFAULT_READ_DEADLINE;

/// Memory a load holds per byte of its metadata file: the file's bytes, the parsed metadata,
/// its JSON value and the serialized answer (measured peak: about 6 for a table whose
/// metadata is mostly properties or snapshots; rounded up).
pub const MEMORY_PER_METADATA_BYTE: usize = 8;

/// The file size a load is charged for before its size is known: most metadata files are
/// smaller, and are read within this charge in one request; a larger file is read again
/// under a charge for its size.
pub const SMALL_LOAD_BYTES: usize = 256 * 1024;

/// The budget is counted in units of this many bytes (a semaphore counts in `u32`).
const UNIT: usize = 1024;

/// Chunks the answer is sent in, so that the permit is held until the last one is taken.
const CHUNK: usize = 64 * 1024;

/// The process-wide byte budget of metadata loads. Clones share it.
#[derive(Clone, Debug)]
pub struct LoadBudget {
    permits: Arc<Semaphore>,
    units: u32,
    wait: Duration,
}

impl Default for LoadBudget {
    fn default() -> Self {
        Self::new(DEFAULT_LOAD_BUDGET_BYTES)
    }
}

impl LoadBudget {
    /// A budget of `bytes` (at least one unit), waits bounded by [`DEFAULT_LOAD_WAIT`].
    pub fn new(bytes: usize) -> Self {
        let units = u32::try_from(bytes.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .max(1);
        Self {
            permits: Arc::new(Semaphore::new(units as usize)),
            units,
            wait: DEFAULT_LOAD_WAIT,
        }
    }

    /// How long a load waits for its share before it is answered `503`.
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.units as usize * UNIT
    }

    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The bytes a load of a metadata file of `file_bytes` is charged.
    pub fn charge_of(&self, file_bytes: u64) -> usize {
        let file = usize::try_from(file_bytes).unwrap_or(usize::MAX);
        file.max(SMALL_LOAD_BYTES)
            .saturating_mul(MEMORY_PER_METADATA_BYTE)
            .min(self.bytes())
    }

    /// A share for loading a metadata file of `file_bytes` (`what` names it in the refusal),
    /// waiting within [`Self::wait`] for loads that hold the budget to finish.
    pub async fn acquire(&self, file_bytes: u64, what: &str) -> IcebergResult<LoadPermit> {
        let charge = self.charge_of(file_bytes);
        let units = u32::try_from(charge.div_ceil(UNIT))
            .unwrap_or(self.units)
            .clamp(1, self.units);
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_many_owned(units)).await
        {
            Ok(Ok(p)) => Ok(LoadPermit { _permit: p }),
            Ok(Err(_)) => Err(IcebergError::internal("the load budget is closed")),
            Err(_) => Err(IcebergError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
                format!(
                    "loading {what} waited {}s for memory: the server is loading {} bytes of \
                     metadata at once (its load budget); retry",
                    self.wait.as_secs(),
                    self.bytes()
                ),
            )),
        }
    }

    /// Bytes of the budget not held by any load (for tests and metrics).
    pub fn available(&self) -> usize {
        self.permits.available_permits() * UNIT
    }
}

/// A load's share of the budget, released when dropped.
#[derive(Debug)]
pub struct LoadPermit {
    _permit: OwnedSemaphorePermit,
}

/// The JSON answer of a load, serialized under `permit`: `value` is dropped once serialized,
/// and the permit is held until the answer's last chunk has been taken by the transport.
pub fn json_response(value: serde_json::Value, permit: LoadPermit) -> IcebergResult<Response> {
    let bytes = serde_json::to_vec(&value).map_err(IcebergError::internal)?;
    drop(value);
    let len = bytes.len();
    let body = axum::body::Body::from_stream(Held {
        bytes: Bytes::from(bytes),
        permit: Some(permit),
    });
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(resp)
}

/// An answer's bytes in chunks, holding the load's permit until the last one is taken.
struct Held {
    bytes: Bytes,
    permit: Option<LoadPermit>,
}

impl futures::Stream for Held {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.bytes.is_empty() {
            self.permit = None;
            return Poll::Ready(None);
        }
        let n = self.bytes.len().min(CHUNK);
        Poll::Ready(Some(Ok(self.bytes.split_to(n))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_clamped_to_the_budget_and_at_least_a_small_load() {
        let b = LoadBudget::new(256 * 1024 * 1024);
        assert_eq!(b.charge_of(10), SMALL_LOAD_BYTES * MEMORY_PER_METADATA_BYTE);
        assert_eq!(
            b.charge_of(12 * 1024 * 1024),
            12 * 1024 * 1024 * MEMORY_PER_METADATA_BYTE
        );
        assert_eq!(b.charge_of(60 * 1024 * 1024), b.bytes());
        assert_eq!(b.charge_of(u64::MAX), b.bytes());
        assert_eq!(LoadBudget::new(0).bytes(), UNIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_load_beyond_the_budget_waits_then_is_refused_at_the_deadline() {
        let b = LoadBudget::new(16 * 1024 * 1024).with_wait(Duration::from_secs(30));
        let first = b.acquire(2 * 1024 * 1024, "t").await.unwrap();
        assert_eq!(b.available(), 0);
        let e = b.acquire(1, "db.t").await.unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("db.t"), "{}", e.message);
        drop(first);
        assert_eq!(b.available(), b.bytes());
        let _again = b.acquire(1, "t").await.unwrap();
    }

    #[tokio::test]
    async fn the_permit_is_held_until_the_last_chunk_is_taken() {
        use http_body_util::BodyExt;
        let b = LoadBudget::new(64 * 1024 * 1024);
        let p = b.acquire(1, "t").await.unwrap();
        let big = serde_json::json!({"k": "x".repeat(3 * CHUNK)});
        let resp = json_response(big, p).unwrap();
        assert_eq!(
            resp.headers()[header::CONTENT_LENGTH],
            (3 * CHUNK + 8).to_string()
        );
        let mut body = resp.into_body();
        let mut got = 0;
        while let Some(f) = body.frame().await {
            assert!(b.available() < b.bytes(), "released before the last chunk");
            got += f.unwrap().into_data().unwrap().len();
            if got == 3 * CHUNK + 8 {
                break;
            }
        }
        assert!(body.frame().await.is_none());
        assert_eq!(b.available(), b.bytes());
    }
}
