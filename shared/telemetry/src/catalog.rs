//! The metric catalogue: every metric Flotilla writes, defined once.
//!
//! The same definition is rendered two ways: as a Prometheus family on `/v1/admin/metrics`
//! ([`crate::prometheus`]) and as CloudWatch embedded-metric log lines on Lambda
//! ([`crate::emf`]). `infra/metrics.json` is this catalogue exported (a test keeps it equal),
//! and `scripts/check_template.py` refuses an alarm or dashboard widget on a metric,
//! dimension set or dimension value that is not in it. `docs/operations.md` explains each.
//!
//! Labels are low-cardinality by construction: a recorded label value is a `&'static str`
//! (code, not data), a value outside a label's closed set is recorded as `other`, and the one
//! open label (the API route template) is interned with a bound ([`crate::intern_route`]).
//! No account id, token, secret, integration id or generation can become a label.
//!
//! Adding a metric is one `pub static` line here plus its entry in [`ALL`]; record it with
//! `catalog::X.inc(&[...])`, `.add`, `.observe_ms` or `.set` from any crate.

/// How a metric's values combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic count; EMF lines carry the increase since the previous flush.
    Counter,
    /// A current level; EMF lines carry the value at flush time.
    Gauge,
    /// Observed durations; Prometheus shows count and sum, EMF lines the observations.
    Timing,
}

/// The CloudWatch unit of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

/// One label: its Prometheus name, its CloudWatch dimension name and its values.
#[derive(Debug)]
pub struct Label {
    pub key: &'static str,
    pub dimension: &'static str,
    /// The closed set of values; empty for the open (interned, bounded) route label.
    pub values: &'static [&'static str],
}

impl Label {
    pub const fn closed(
        key: &'static str,
        dimension: &'static str,
        values: &'static [&'static str],
    ) -> Self {
        Self {
            key,
            dimension,
            values,
        }
    }

    pub const fn open(key: &'static str, dimension: &'static str) -> Self {
        Self {
            key,
            dimension,
            values: &[],
        }
    }

    pub fn is_closed(&self) -> bool {
        !self.values.is_empty()
    }
}

/// One metric.
#[derive(Debug)]
pub struct MetricDef {
    /// Prometheus family name.
    pub name: &'static str,
    /// CloudWatch metric name (namespace [`NAMESPACE`]).
    pub cloudwatch: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub labels: &'static [Label],
    /// Dimension sets written beside the full one (`Stage`, `Function`, every label), so an
    /// alarm or graph can read a total across the labels it leaves out.
    pub rollups: &'static [&'static [&'static str]],
}

impl MetricDef {
    pub const fn counter(
        name: &'static str,
        cloudwatch: &'static str,
        help: &'static str,
        labels: &'static [Label],
    ) -> Self {
        Self {
            name,
            cloudwatch,
            help,
            kind: Kind::Counter,
            unit: Unit::Count,
            labels,
            rollups: &[],
        }
    }

    pub const fn gauge(
        name: &'static str,
        cloudwatch: &'static str,
        help: &'static str,
        labels: &'static [Label],
    ) -> Self {
        Self {
            kind: Kind::Gauge,
            ..Self::counter(name, cloudwatch, help, labels)
        }
    }

    pub const fn timing_ms(
        name: &'static str,
        cloudwatch: &'static str,
        help: &'static str,
        labels: &'static [Label],
    ) -> Self {
        Self {
            kind: Kind::Timing,
            unit: Unit::Milliseconds,
            ..Self::counter(name, cloudwatch, help, labels)
        }
    }

    pub const fn with_rollups(self, rollups: &'static [&'static [&'static str]]) -> Self {
        Self { rollups, ..self }
    }

    /// Every EMF dimension set of this metric: the full one first, then the rollups.
    pub fn dimension_sets(&self) -> Vec<Vec<&'static str>> {
        let mut full = vec![STAGE, FUNCTION];
        full.extend(self.labels.iter().map(|l| l.dimension));
        let mut sets = vec![full];
        sets.extend(self.rollups.iter().map(|r| r.to_vec()));
        sets
    }

    /// The recorded form of `values`: one per label, a value outside a closed set becomes
    /// [`OTHER`]. `None` when the count of values is wrong (a programming error, dropped).
    pub(crate) fn normalize(&self, values: &[&'static str]) -> Option<Vec<&'static str>> {
        if values.len() != self.labels.len() {
            return None;
        }
        Some(
            self.labels
                .iter()
                .zip(values)
                .map(|(label, v)| {
                    if !label.is_closed() || label.values.contains(v) {
                        *v
                    } else {
                        OTHER
                    }
                })
                .collect(),
        )
    }
}

/// The CloudWatch namespace of every custom metric.
pub const NAMESPACE: &str = "Flotilla";
/// The dimension every EMF line carries: the deployment stage (`FLOTILLA_STAGE`).
pub const STAGE: &str = "Stage";
/// The dimension every EMF line carries: the function (`api`, `reconciler`, ...).
pub const FUNCTION: &str = "Function";
/// The value recorded for a label value outside its closed set.
pub const OTHER: &str = "other";
/// The values of the `Function` dimension.
pub const FUNCTIONS: &[&str] = &[
    "api",
    "iceberg",
    "reconciler",
    "capture",
    "scheduler",
    "finalize",
    "query",
    "events",
];

// ---- labels ------------------------------------------------------------------------------

pub const OPERATION: Label = Label::closed(
    "op",
    "Operation",
    &["get", "batch_get", "query", "count", "transact"],
);
pub const METASTORE_FAILURE: Label = Label::closed(
    "kind",
    "Kind",
    &[
        "condition_failed",
        "retryable",
        "outcome_unknown",
        "refused",
        "corrupt",
        "backend",
    ],
);
pub const INTEGRATION_TYPE: Label = Label::closed(
    "protocol",
    "IntegrationType",
    &["iceberg_rest", "unity", "delta_sharing"],
);
/// `error`: no HTTP status (connect failure, timeout, refused address, oversized body).
pub const STATUS_CLASS: Label = Label::closed(
    "status_class",
    "StatusClass",
    &["2xx", "3xx", "4xx", "5xx", "error"],
);
pub const REFRESH_OUTCOME: Label =
    Label::closed("outcome", "Outcome", &["unchanged", "reloaded", "failed"]);
pub const RUN_OUTCOME: Label = Label::closed(
    "outcome",
    "Outcome",
    &[
        "reconciled",
        "continued",
        "superseded",
        "gone",
        "paused",
        "retry",
        "failed",
        "poison",
    ],
);
pub const RUN_RESULT: Label = Label::closed(
    "outcome",
    "Outcome",
    &["succeeded", "failed_retryable", "failed_permanent"],
);
pub const FAILURE_REASON: Label = Label::closed(
    "reason",
    "Reason",
    &[
        "upstream",
        "fence_lost",
        "incomplete",
        "conflict",
        "limit",
        "deleting",
        "metastore",
        "internal",
        "poison",
    ],
);
pub const VALIDATION_OUTCOME: Label = Label::closed("outcome", "Outcome", &["valid", "invalid"]);
/// What the events function did with one DynamoDB stream record.
pub const PUSH_OUTCOME: Label = Label::closed(
    "outcome",
    "Outcome",
    &["published", "sealed", "ignored", "malformed", "failed"],
);
/// The matched route template with its method (`GET /v1/accounts/{account_id}`), never the
/// concrete path.
pub const ROUTE: Label = Label::open("route", "Route");

// ---- metrics -----------------------------------------------------------------------------

pub static METASTORE_REQUESTS: MetricDef = MetricDef::counter(
    "flotilla_metastore_requests_total",
    "MetastoreRequests",
    "Metastore requests by operation.",
    &[OPERATION],
)
.with_rollups(&[&[STAGE, FUNCTION]]);
pub static METASTORE_ERRORS: MetricDef = MetricDef::counter(
    "flotilla_metastore_errors_total",
    "MetastoreErrors",
    "Metastore requests that returned an error.",
    &[],
);
pub static METASTORE_FAILURES: MetricDef = MetricDef::counter(
    "flotilla_metastore_failures_total",
    "MetastoreFailures",
    "Metastore errors by kind (condition_failed: a conditional write lost; retryable: throttled or transient).",
    &[METASTORE_FAILURE],
)
.with_rollups(&[&[STAGE, METASTORE_FAILURE.dimension]]);
pub static METASTORE_ITEMS_READ: MetricDef = MetricDef::counter(
    "flotilla_metastore_items_read_total",
    "MetastoreItemsRead",
    "Items returned by metastore reads.",
    &[],
);
pub static METASTORE_ITEMS_WRITTEN: MetricDef = MetricDef::counter(
    "flotilla_metastore_items_written_total",
    "MetastoreItemsWritten",
    "Items put or deleted by committed transactions.",
    &[],
);
pub static METASTORE_LATENCY: MetricDef = MetricDef::timing_ms(
    "flotilla_metastore_request_duration_ms",
    "MetastoreLatency",
    "Metastore request latency by operation, milliseconds.",
    &[OPERATION],
);
pub static UPSTREAM_REQUESTS: MetricDef = MetricDef::counter(
    "flotilla_upstream_requests_total",
    "UpstreamRequests",
    "Upstream catalog HTTP requests sent, by protocol.",
    &[INTEGRATION_TYPE],
)
.with_rollups(&[&[STAGE]]);
pub static UPSTREAM_RESPONSES: MetricDef = MetricDef::counter(
    "flotilla_upstream_responses_total",
    "UpstreamResponses",
    "Upstream catalog HTTP attempts by protocol and status class (error: no HTTP status).",
    &[INTEGRATION_TYPE, STATUS_CLASS],
)
.with_rollups(&[&[STAGE, STATUS_CLASS.dimension]]);
pub static UPSTREAM_THROTTLED: MetricDef = MetricDef::counter(
    "flotilla_upstream_throttled_total",
    "UpstreamThrottled",
    "Upstream catalog throttled answers (429, or 503 with Retry-After), by protocol.",
    &[INTEGRATION_TYPE],
)
.with_rollups(&[&[STAGE]]);
pub static UPSTREAM_LATENCY: MetricDef = MetricDef::timing_ms(
    "flotilla_upstream_request_duration_ms",
    "UpstreamLatency",
    "Upstream catalog HTTP attempt latency by protocol, milliseconds.",
    &[INTEGRATION_TYPE],
);
pub static DIRECTORY_REFRESHES: MetricDef = MetricDef::counter(
    "flotilla_directory_refresh_total",
    "DirectoryRefreshes",
    "Directory replica refreshes by outcome.",
    &[REFRESH_OUTCOME],
)
.with_rollups(&[&[STAGE, REFRESH_OUTCOME.dimension]]);
pub static DIRECTORY_STALE: MetricDef = MetricDef::gauge(
    "flotilla_directory_stale_catalogs",
    "DirectoryStaleCatalogs",
    "Catalog replicas serving a last-good snapshot after a failed refresh.",
    &[],
);
pub static RECONCILE_RUNS: MetricDef = MetricDef::counter(
    "flotilla_reconcile_runs_total",
    "ReconcileRuns",
    "Reconcile messages handled, by outcome.",
    &[RUN_OUTCOME],
)
.with_rollups(&[&[STAGE, RUN_OUTCOME.dimension]]);
pub static RECONCILE_RUN_OUTCOMES: MetricDef = MetricDef::counter(
    "flotilla_reconcile_run_outcomes_total",
    "ReconcileRunOutcomes",
    "Reconcile runs that started (API, queue worker, serve), by outcome and retryability.",
    &[RUN_RESULT],
)
.with_rollups(&[&[STAGE, RUN_RESULT.dimension]]);
pub static RECONCILE_FAILURES: MetricDef = MetricDef::counter(
    "flotilla_reconcile_failures_total",
    "ReconcileFailures",
    "Reconcile messages that failed (and will be delivered again), by reason.",
    &[FAILURE_REASON],
)
.with_rollups(&[&[STAGE, FAILURE_REASON.dimension]]);
pub static RECONCILE_DURATION: MetricDef = MetricDef::timing_ms(
    "flotilla_reconcile_duration_ms",
    "ReconcileDuration",
    "Duration of completed reconcile runs, milliseconds.",
    &[],
);
pub static CAPTURE_VISIBLE_LAG: MetricDef = MetricDef::timing_ms(
    "flotilla_capture_visible_lag_ms",
    "CaptureVisibleLag",
    "Time from Flotilla first seeing an overlay table's upstream version to that version \
     becoming query-visible, milliseconds.",
    &[],
);
pub static RECONCILE_ENQUEUED: MetricDef = MetricDef::counter(
    "flotilla_reconcile_enqueued_total",
    "ReconcileEnqueued",
    "Reconcile messages the scheduler enqueued.",
    &[],
);
pub static API_REQUESTS: MetricDef = MetricDef::counter(
    "flotilla_api_requests_total",
    "ApiRequests",
    "HTTP API requests by route template and status class.",
    &[ROUTE, STATUS_CLASS],
)
.with_rollups(&[&[STAGE, FUNCTION, STATUS_CLASS.dimension]]);
pub static API_LATENCY: MetricDef = MetricDef::timing_ms(
    "flotilla_api_request_duration_ms",
    "ApiLatency",
    "HTTP API request latency by route template, milliseconds.",
    &[ROUTE],
)
.with_rollups(&[&[STAGE, FUNCTION]]);

pub static VALIDATION_RUNS: MetricDef = MetricDef::counter(
    "flotilla_validation_runs_total",
    "ValidationRuns",
    "Integration validations that ran, by outcome (invalid: a check failed).",
    &[VALIDATION_OUTCOME],
);

pub static EVENT_PUSH_RECORDS: MetricDef = MetricDef::counter(
    "flotilla_event_push_records_total",
    "EventPushRecords",
    "DynamoDB stream records the events function handled, by outcome (published: put on the \
     event bus; sealed: a pending event whose log was sealed; malformed: skipped; failed: \
     delivered again).",
    &[PUSH_OUTCOME],
)
.with_rollups(&[&[STAGE, PUSH_OUTCOME.dimension]]);

// Extension points. Capture results, when they exist, get a counter here (like
// `VALIDATION_RUNS`) recorded where the result is known. An Iceberg REST endpoint mounted on the shared router is counted by
// `API_REQUESTS`/`API_LATENCY` under its route templates without any change; a metric of
// its own is one more line below and in `ALL`.

/// Every metric, in page order. `infra/metrics.json` is this list exported.
pub static ALL: &[&MetricDef] = &[
    &METASTORE_REQUESTS,
    &METASTORE_ERRORS,
    &METASTORE_FAILURES,
    &METASTORE_ITEMS_READ,
    &METASTORE_ITEMS_WRITTEN,
    &METASTORE_LATENCY,
    &UPSTREAM_REQUESTS,
    &UPSTREAM_RESPONSES,
    &UPSTREAM_THROTTLED,
    &UPSTREAM_LATENCY,
    &DIRECTORY_REFRESHES,
    &DIRECTORY_STALE,
    &RECONCILE_RUNS,
    &RECONCILE_RUN_OUTCOMES,
    &RECONCILE_FAILURES,
    &RECONCILE_DURATION,
    &CAPTURE_VISIBLE_LAG,
    &RECONCILE_ENQUEUED,
    &API_REQUESTS,
    &API_LATENCY,
    &VALIDATION_RUNS,
    &EVENT_PUSH_RECORDS,
];

/// The catalogue as JSON (`infra/metrics.json`): namespace, the fixed dimensions and
/// functions, and per metric its names, kind, unit, labels with their closed values, and
/// EMF dimension sets.
pub fn export_json() -> serde_json::Value {
    use serde_json::json;
    let metrics: Vec<_> = ALL
        .iter()
        .map(|m| {
            json!({
                "prometheus": m.name,
                "cloudwatch": m.cloudwatch,
                "kind": format!("{:?}", m.kind).to_lowercase(),
                "unit": m.unit.as_str(),
                "help": m.help,
                "labels": m.labels.iter().map(|l| json!({
                    "prometheus": l.key,
                    "dimension": l.dimension,
                    "values": if l.is_closed() {
                        let mut v = l.values.to_vec();
                        v.push(OTHER);
                        json!(v)
                    } else {
                        serde_json::Value::Null
                    },
                })).collect::<Vec<_>>(),
                "dimension_sets": m.dimension_sets(),
            })
        })
        .collect();
    json!({
        "namespace": NAMESPACE,
        "fixed_dimensions": {STAGE: null, FUNCTION: FUNCTIONS},
        "metrics": metrics,
    })
}
