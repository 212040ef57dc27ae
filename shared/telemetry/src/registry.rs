//! Where values live. A [`Source`] yields [`Sample`]s of catalogue metrics; the Prometheus
//! page and the EMF flusher read every source of a process the same way.
//!
//! The process-wide [`Registry`] ([`global`]) holds what has no natural owner (upstream
//! calls, reconcile outcomes, API requests, latencies). Components with counters of their own
//! (the metastore decorator, the directory replica) implement [`Source`] over them.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use crate::catalog::{Kind, MetricDef, OTHER};

/// One value of one series.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Counter(u64),
    Gauge(i64),
    /// Count and sum since start; `recent` are observations not yet flushed as EMF.
    Timing {
        count: u64,
        sum_ms: f64,
        recent: Vec<f64>,
    },
}

/// One series of a catalogue metric: label values in the order of `def.labels`.
#[derive(Clone, Debug)]
pub struct Sample {
    pub def: &'static MetricDef,
    pub labels: Vec<&'static str>,
    pub value: Value,
}

/// Anything that holds metric values.
pub trait Source: Send + Sync {
    /// The families this source owns; a counter family with only closed labels is shown at
    /// zero for every value the source has not counted yet.
    fn families(&self) -> Vec<&'static MetricDef>;
    /// Appends the current samples. With `drain`, timing observations are handed over (and
    /// forgotten): only the EMF flusher drains.
    fn collect(&self, out: &mut Vec<Sample>, drain: bool);
}

type SeriesKey = (&'static str, Vec<&'static str>);

struct Cell {
    def: &'static MetricDef,
    value: Value,
}

/// Observations kept per timing series between two EMF flushes (beyond this, counted in
/// count and sum but not sent as individual values).
pub const MAX_PENDING_OBSERVATIONS: usize = 1000;

/// A set of series. Cheap enough for per-request use: one short lock per record.
#[derive(Default)]
pub struct Registry {
    series: Mutex<BTreeMap<SeriesKey, Cell>>,
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();
static KEEP_OBSERVATIONS: AtomicBool = AtomicBool::new(false);

/// The process-wide registry.
pub fn global() -> &'static Registry {
    GLOBAL.get_or_init(Registry::default)
}

/// Keep individual timing observations for an EMF flusher (set when one is created; a host
/// without one only keeps count and sum).
pub fn keep_observations(on: bool) {
    KEEP_OBSERVATIONS.store(on, Ordering::Relaxed);
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<SeriesKey, Cell>> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, def: &'static MetricDef, labels: &[&'static str], f: impl FnOnce(&mut Value)) {
        let Some(labels) = def.normalize(labels) else {
            tracing::debug!(
                metric = def.name,
                "metric recorded with the wrong label count"
            );
            return;
        };
        let mut map = self.lock();
        let cell = map.entry((def.name, labels)).or_insert_with(|| Cell {
            def,
            value: match def.kind {
                Kind::Counter => Value::Counter(0),
                Kind::Gauge => Value::Gauge(0),
                Kind::Timing => Value::Timing {
                    count: 0,
                    sum_ms: 0.0,
                    recent: Vec::new(),
                },
            },
        });
        f(&mut cell.value);
    }

    pub fn add(&self, def: &'static MetricDef, labels: &[&'static str], n: u64) {
        self.update(def, labels, |v| {
            if let Value::Counter(c) = v {
                *c = c.saturating_add(n);
            }
        });
    }

    pub fn set(&self, def: &'static MetricDef, labels: &[&'static str], level: i64) {
        self.update(def, labels, |v| {
            if let Value::Gauge(g) = v {
                *g = level;
            }
        });
    }

    pub fn observe_ms(&self, def: &'static MetricDef, labels: &[&'static str], ms: f64) {
        let ms = if ms.is_finite() { ms.max(0.0) } else { 0.0 };
        let keep = KEEP_OBSERVATIONS.load(Ordering::Relaxed);
        self.update(def, labels, |v| {
            if let Value::Timing {
                count,
                sum_ms,
                recent,
            } = v
            {
                *count += 1;
                *sum_ms += ms;
                if keep && recent.len() < MAX_PENDING_OBSERVATIONS {
                    recent.push(ms);
                }
            }
        });
    }

    /// The current value of one series (tests, benches).
    pub fn value(&self, def: &'static MetricDef, labels: &[&'static str]) -> Option<Value> {
        let labels = def.normalize(labels)?;
        self.lock()
            .get(&(def.name, labels))
            .map(|c| c.value.clone())
    }

    /// The counter value of one series, 0 when never counted.
    pub fn counter(&self, def: &'static MetricDef, labels: &[&'static str]) -> u64 {
        match self.value(def, labels) {
            Some(Value::Counter(n)) => n,
            _ => 0,
        }
    }
}

impl Source for Registry {
    fn families(&self) -> Vec<&'static MetricDef> {
        crate::catalog::ALL
            .iter()
            .copied()
            .filter(|d| !INSTANCE_FAMILIES.contains(&d.name))
            .collect()
    }

    fn collect(&self, out: &mut Vec<Sample>, drain: bool) {
        let mut map = self.lock();
        for ((_, labels), cell) in map.iter_mut() {
            let value = match &mut cell.value {
                Value::Timing {
                    count,
                    sum_ms,
                    recent,
                } => Value::Timing {
                    count: *count,
                    sum_ms: *sum_ms,
                    recent: if drain {
                        std::mem::take(recent)
                    } else {
                        Vec::new()
                    },
                },
                other => other.clone(),
            };
            out.push(Sample {
                def: cell.def,
                labels: labels.clone(),
                value,
            });
        }
    }
}

/// The process-wide registry as a [`Source`] (for a state's list of sources).
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl Source for Global {
    fn families(&self) -> Vec<&'static MetricDef> {
        global().families()
    }
    fn collect(&self, out: &mut Vec<Sample>, drain: bool) {
        global().collect(out, drain);
    }
}

/// One family of the process-wide registry (a component rendering only its own family).
#[derive(Clone, Copy, Debug)]
pub struct Only(pub &'static MetricDef);

impl Source for Only {
    fn families(&self) -> Vec<&'static MetricDef> {
        vec![self.0]
    }
    fn collect(&self, out: &mut Vec<Sample>, drain: bool) {
        let mut all = Vec::new();
        // Never drains: the EMF flusher reads the whole registry through `Global`.
        let _ = drain;
        global().collect(&mut all, false);
        out.extend(all.into_iter().filter(|s| s.def.name == self.0.name));
    }
}

/// Families counted by a state's own components (the metastore decorator and the directory
/// replica); every other family, including any added later, lives in the process-wide
/// registry.
const INSTANCE_FAMILIES: &[&str] = &[
    "flotilla_metastore_requests_total",
    "flotilla_metastore_errors_total",
    "flotilla_metastore_items_read_total",
    "flotilla_metastore_items_written_total",
    "flotilla_directory_refresh_total",
    "flotilla_directory_stale_catalogs",
];

impl MetricDef {
    /// Adds one to a counter of the process-wide registry.
    pub fn inc(&'static self, labels: &[&'static str]) {
        global().add(self, labels, 1);
    }

    pub fn add(&'static self, labels: &[&'static str], n: u64) {
        global().add(self, labels, n);
    }

    pub fn set(&'static self, labels: &[&'static str], level: i64) {
        global().set(self, labels, level);
    }

    pub fn observe_ms(&'static self, labels: &[&'static str], ms: f64) {
        global().observe_ms(self, labels, ms);
    }

    pub fn observe(&'static self, labels: &[&'static str], elapsed: std::time::Duration) {
        global().observe_ms(self, labels, elapsed.as_secs_f64() * 1000.0);
    }
}

/// Distinct route labels kept; any further template is recorded as `other`.
pub const MAX_ROUTES: usize = 256;

/// A route template as a `&'static str` label value, from a bounded set: the router's
/// templates are finite, and a bound keeps a bug (a concrete path passed by mistake) from
/// growing the label set without limit. Only a template-shaped value is accepted: it must
/// not contain characters a concrete identifier would bring in unencoded (`%`, `?`, `=`).
pub fn intern_route(route: &str) -> &'static str {
    static ROUTES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    if route.is_empty()
        || route.len() > 200
        || route.contains(['%', '?', '=', '"', '\\'])
        || route.chars().any(char::is_control)
    {
        return OTHER;
    }
    let mut set = ROUTES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = set.get(route) {
        return known;
    }
    if set.len() >= MAX_ROUTES {
        return OTHER;
    }
    let leaked: &'static str = Box::leak(route.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The status class label of an HTTP status.
pub fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{API_REQUESTS, RECONCILE_RUNS, UPSTREAM_LATENCY};

    #[test]
    fn values_outside_a_closed_set_become_other() {
        let r = Registry::default();
        r.add(&RECONCILE_RUNS, &["reconciled"], 2);
        r.add(&RECONCILE_RUNS, &["acme-account-42"], 1);
        assert_eq!(r.counter(&RECONCILE_RUNS, &["reconciled"]), 2);
        assert_eq!(r.counter(&RECONCILE_RUNS, &[OTHER]), 1);
        // A wrong label count is dropped, not recorded under a made-up series.
        r.add(&RECONCILE_RUNS, &["reconciled", "x"], 5);
        assert_eq!(r.counter(&RECONCILE_RUNS, &["reconciled"]), 2);
    }

    #[test]
    fn routes_are_bounded_and_template_shaped() {
        assert_eq!(
            intern_route("GET /v1/accounts/{account_id}"),
            "GET /v1/accounts/{account_id}"
        );
        assert_eq!(intern_route("GET /v1/x?token=abc"), OTHER);
        assert_eq!(intern_route("GET /v1/a%2Fb"), OTHER);
        assert_eq!(intern_route(""), OTHER);
        let r = Registry::default();
        r.add(&API_REQUESTS, &[intern_route("GET /v1/health"), "2xx"], 1);
        assert_eq!(r.counter(&API_REQUESTS, &["GET /v1/health", "2xx"]), 1);
    }

    #[test]
    fn drained_observations_are_handed_over_once() {
        keep_observations(true);
        let r = Registry::default();
        r.observe_ms(&UPSTREAM_LATENCY, &["unity"], 12.5);
        r.observe_ms(&UPSTREAM_LATENCY, &["unity"], f64::NAN);
        let mut out = Vec::new();
        r.collect(&mut out, true);
        assert_eq!(
            out[0].value,
            Value::Timing {
                count: 2,
                sum_ms: 12.5,
                recent: vec![12.5, 0.0]
            }
        );
        out.clear();
        r.collect(&mut out, true);
        assert_eq!(
            out[0].value,
            Value::Timing {
                count: 2,
                sum_ms: 12.5,
                recent: vec![]
            }
        );
    }
}
