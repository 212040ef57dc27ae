//! What both capture benchmarks measure once their upstream and overlay are set up: a first
//! capture of every table, an unchanged capture counted on the metastore and the upstream,
//! and a revalidation of every footer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_core::reconcile::AdapterConnector;
use flotilla_core::reconcile::capture::{self, CaptureOptions, CaptureSummary};
use flotilla_core::state::AppState;
use flotilla_metastore::metrics::{CountingMetastore, MetricsSnapshot};

pub struct Phases {
    tables: usize,
    files: usize,
    first: CaptureSummary,
    first_time: Duration,
    again_time: Duration,
    counted: MetricsSnapshot,
    upstream_requests: usize,
    re: CaptureSummary,
    re_time: Duration,
}

async fn timed(state: &AppState, overlay: &str, revalidate: bool) -> (CaptureSummary, Duration) {
    let opts = CaptureOptions {
        revalidate,
        ..CaptureOptions::default()
    };
    let t = Instant::now();
    let s = capture::capture(state, &AdapterConnector, "acme", overlay, &opts)
        .await
        .expect("capture");
    (s, t.elapsed())
}

/// Runs the three phases over `overlay` (of account `acme`, `tables` tables of `files` files
/// each); `upstream_requests` answers how many requests the upstream has answered so far.
pub async fn run(
    state: &AppState,
    overlay: &str,
    tables: usize,
    files: usize,
    upstream_requests: impl Fn() -> usize,
) -> Phases {
    let (first, first_time) = timed(state, overlay, false).await;
    assert_eq!(first.captured as usize, tables, "{first:?}");
    assert_eq!(first.file_errors, 0);

    // Nothing changed.
    let counting = CountingMetastore::new(flotilla_metastore::SharedStore(state.store.clone()));
    let counters = counting.counters();
    let mut counted = state.clone();
    counted.store = Arc::new(counting);
    let before = upstream_requests();
    let (again, again_time) = timed(&counted, overlay, false).await;
    let upstream_requests = upstream_requests() - before;
    assert_eq!(again.unchanged as usize, tables);

    // Revalidation of every table (every footer read again; no metadata change).
    let (re, re_time) = timed(state, overlay, true).await;
    Phases {
        tables,
        files,
        first,
        first_time,
        again_time,
        counted: counters.snapshot(),
        upstream_requests,
        re,
        re_time,
    }
}

impl Phases {
    /// The report's lines after its heading.
    pub fn report(&self) -> String {
        let snap = &self.counted;
        format!(
            "first capture: {:.2} s, {:.1} ms/table, {} files recorded, {} footers validated, {:.0} files/s\n\
             unchanged capture: {:.1} ms total; metastore: {} requests ({} get, {} query, {} transact), {} items read, {} items written; upstream requests: {}\n\
             revalidation (every footer again): {:.2} s, {:.0} files/s, {} captured\n",
            self.first_time.as_secs_f64(),
            self.first_time.as_secs_f64() * 1000.0 / self.tables as f64,
            self.first.files,
            self.first.files_validated,
            (self.tables * self.files) as f64 / self.first_time.as_secs_f64(),
            self.again_time.as_secs_f64() * 1000.0,
            snap.requests(),
            snap.get,
            snap.query,
            snap.transact,
            snap.items_read,
            snap.items_written,
            self.upstream_requests,
            self.re_time.as_secs_f64(),
            self.re.files_validated as f64 / self.re_time.as_secs_f64(),
            self.re.captured,
        )
    }
}
