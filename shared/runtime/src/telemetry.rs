//! Logging, metrics flushing and trace context of the hosts.
//!
//! On Lambda ([`init`] with `json`): one flat JSON object per log line
//! ([`flotilla_telemetry::logs`]), and after every invocation the catalogue metrics that
//! changed are written to stdout as CloudWatch embedded-metric lines ([`LambdaTelemetry`]).
//! Each invocation runs in an `invocation` span (function, request id, trace id) and in the
//! trace context of its X-Ray header, so every log line of it carries those fields and a
//! message it enqueues carries the header on. Locally: compact text, and the same metrics on
//! `/v1/admin/metrics`.

use std::future::Future;
use std::io::Write as _;
#[cfg(any(test, feature = "testing"))]
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_services::AppState;
use flotilla_services::state::MetricSource;
use flotilla_telemetry::emf::EmfFlusher;
use flotilla_telemetry::trace::{self, TraceContext};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Installs the global subscriber once. `RUST_LOG` overrides the default `info` level.
pub fn init(json: bool) {
    let filter = flotilla_telemetry::logs::filter_from_env();
    // A second initialisation (tests, embedded use) is harmless: keep the first.
    if json {
        let subscriber = flotilla_telemetry::logs::json_subscriber(filter, std::io::stdout);
        let _ = tracing::subscriber::set_global_default(subscriber);
    } else {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_target(false)
            .compact()
            .finish()
            .with(filter);
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
}

/// What the Lambda runtime says about one invocation.
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    pub request_id: String,
    /// The X-Ray trace header (`Root=...;Parent=...;Sampled=...`) of active tracing.
    pub trace_header: Option<String>,
}

impl Invocation {
    pub fn new(request_id: impl Into<String>, trace_header: Option<String>) -> Self {
        Self {
            request_id: request_id.into(),
            trace_header,
        }
    }
}

/// Where EMF lines go.
#[derive(Clone)]
enum Sink {
    Stdout,
    #[cfg(any(test, feature = "testing"))]
    Capture(Arc<Mutex<Vec<String>>>),
}

/// The EMF lines a capturing [`LambdaTelemetry`] wrote (tests; feature `testing`).
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Default)]
pub struct CapturedLines(Arc<Mutex<Vec<String>>>);

#[cfg(any(test, feature = "testing"))]
impl CapturedLines {
    /// The lines written so far, emptied.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The per-process telemetry of one Lambda function.
pub struct LambdaTelemetry {
    flusher: EmfFlusher,
    sources: Vec<MetricSource>,
    sink: Sink,
}

impl LambdaTelemetry {
    /// Metrics of `state` for `function`, under the stage of `FLOTILLA_STAGE`, to stdout.
    pub fn new(state: &AppState, function: &str) -> Self {
        let stage = std::env::var("FLOTILLA_STAGE").unwrap_or_else(|_| "dev".into());
        Self {
            flusher: EmfFlusher::new(&stage, function),
            sources: state.metric_sources.clone(),
            sink: Sink::Stdout,
        }
    }

    /// The same, writing into memory (the tests of each function's EMF output).
    #[cfg(any(test, feature = "testing"))]
    pub fn capturing(state: &AppState, function: &str, stage: &str) -> (Self, CapturedLines) {
        let lines = CapturedLines::default();
        let me = Self {
            flusher: EmfFlusher::new(stage, function),
            sources: state.metric_sources.clone(),
            sink: Sink::Capture(lines.0.clone()),
        };
        (me, lines)
    }

    pub fn function(&self) -> &'static str {
        self.flusher.function()
    }

    /// Writes the EMF lines of everything that changed since the previous flush.
    pub fn flush(&self) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let sources: Vec<&dyn flotilla_telemetry::Source> =
            self.sources.iter().map(|s| s.as_ref()).collect();
        let lines = self.flusher.lines(&sources, now_ms);
        if lines.is_empty() {
            return;
        }
        match &self.sink {
            Sink::Stdout => {
                // One write per line under the stdout lock: never interleaved with a log line.
                let mut out = std::io::stdout().lock();
                for line in lines {
                    let _ = out.write_all(format!("{line}\n").as_bytes());
                }
                let _ = out.flush();
            }
            #[cfg(any(test, feature = "testing"))]
            Sink::Capture(buf) => buf
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(lines),
        }
    }

    /// Runs one invocation: inside its span and trace context, then flushes the metrics.
    pub async fn invocation<F: Future>(&self, meta: Invocation, work: F) -> F::Output {
        let ctx = TraceContext::from_header(meta.trace_header.as_deref());
        let span = tracing::info_span!(
            "invocation",
            function = self.function(),
            request_id = %meta.request_id,
            trace_id = ctx.trace_id().unwrap_or(""),
        );
        let out = trace::scope(ctx, work.instrument(span)).await;
        self.flush();
        out
    }
}

/// Runs the handling of one queue record in its own span and trace context: the record's
/// `AWSTraceHeader` when it has one (set by the SQS queue's sender), else the
/// invocation's.
pub async fn in_record<F: Future>(
    message_id: &str,
    trace_header: Option<&str>,
    work: F,
) -> F::Output {
    let ctx = match TraceContext::from_header(trace_header) {
        c if c.header().is_some() => c,
        _ => TraceContext::from_header(trace::current_header().as_deref()),
    };
    let span = tracing::info_span!(
        "message",
        message_id = %message_id,
        trace_id = ctx.trace_id().unwrap_or(""),
    );
    trace::scope(ctx, work.instrument(span)).await
}

/// The state a function's telemetry test runs on: a fresh redb store in `dir` whose requests
/// are counted (a metric source, as `aws::build_state` counts DynamoDB's), the system clock
/// and `authenticator`.
#[cfg(any(test, feature = "testing"))]
pub fn counted_test_state(
    dir: &std::path::Path,
    authenticator: Arc<dyn flotilla_services::auth::Authenticator>,
) -> AppState {
    let store = flotilla_metastore::metrics::CountingMetastore::new(
        flotilla_metastore::redb_store::RedbMetastore::open(dir.join("m.redb"))
            .unwrap_or_else(|e| panic!("a redb store in {}: {e}", dir.display())),
    );
    let counters = store.counters();
    AppState::new(
        Arc::new(store),
        Arc::new(flotilla_base::clock::SystemClock),
        authenticator,
        flotilla_services::Config::default(),
    )
    .with_metric_source(counters)
}
