//! The Prometheus text exposition of catalogue metrics (`/v1/admin/metrics`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::catalog::{ALL, Kind, MetricDef};
use crate::registry::{Sample, Source, Value};

/// Renders every family the sources own, in catalogue order. A counter family whose labels
/// are all closed shows every value (0 until counted), so a scrape tells "no traffic" from
/// "not wired".
pub fn render(sources: &[&dyn Source]) -> String {
    let mut samples = Vec::new();
    let mut owned: Vec<&'static MetricDef> = Vec::new();
    for s in sources {
        s.collect(&mut samples, false);
        owned.extend(s.families());
    }
    let mut by_family: BTreeMap<&str, BTreeMap<Vec<&'static str>, Value>> = BTreeMap::new();
    for Sample { def, labels, value } in samples {
        let series = by_family.entry(def.name).or_default();
        match (series.get_mut(&labels), value) {
            (Some(Value::Counter(a)), Value::Counter(b)) => *a = a.saturating_add(b),
            (Some(_), _) => {}
            (None, v) => {
                series.insert(labels, v);
            }
        }
    }
    let mut out = String::new();
    for def in ALL {
        let present = by_family.remove(def.name);
        if present.is_none() && !owned.iter().any(|d| d.name == def.name) {
            continue;
        }
        let mut series = present.unwrap_or_default();
        if def.kind == Kind::Counter && def.labels.iter().all(|l| l.is_closed()) {
            for combo in combinations(def) {
                series.entry(combo).or_insert(Value::Counter(0));
            }
        }
        render_family(&mut out, def, &series);
    }
    out
}

fn combinations(def: &MetricDef) -> Vec<Vec<&'static str>> {
    let mut combos = vec![Vec::new()];
    for label in def.labels {
        combos = combos
            .into_iter()
            .flat_map(|prefix| {
                label.values.iter().map(move |v| {
                    let mut c = prefix.clone();
                    c.push(*v);
                    c
                })
            })
            .collect();
    }
    combos
}

fn label_text(def: &MetricDef, values: &[&str]) -> String {
    if values.is_empty() {
        return String::new();
    }
    let pairs: Vec<String> = def
        .labels
        .iter()
        .zip(values)
        .map(|(l, v)| format!("{}=\"{}\"", l.key, escape(v)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_family(out: &mut String, def: &MetricDef, series: &BTreeMap<Vec<&'static str>, Value>) {
    let ty = match def.kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Timing => "summary",
    };
    let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
    let _ = writeln!(out, "# TYPE {} {ty}", def.name);
    // Closed values in catalogue order read better than alphabetical.
    let mut ordered: Vec<_> = series.iter().collect();
    ordered.sort_by_key(|(labels, _)| position(def, labels));
    for (labels, value) in ordered {
        let l = label_text(def, labels);
        match value {
            Value::Counter(n) => {
                let _ = writeln!(out, "{}{l} {n}", def.name);
            }
            Value::Gauge(g) => {
                let _ = writeln!(out, "{}{l} {}", def.name, (*g).max(0));
            }
            Value::Timing { count, sum_ms, .. } => {
                let _ = writeln!(out, "{}_count{l} {count}", def.name);
                let _ = writeln!(out, "{}_sum{l} {sum_ms}", def.name);
            }
        }
    }
}

fn position(def: &MetricDef, labels: &[&'static str]) -> Vec<(usize, &'static str)> {
    def.labels
        .iter()
        .zip(labels)
        .map(|(l, v)| {
            (
                l.values.iter().position(|x| x == v).unwrap_or(usize::MAX),
                *v,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{API_LATENCY, RECONCILE_RUNS};
    use crate::registry::Registry;

    #[test]
    fn closed_families_show_every_value_and_timings_count_and_sum() {
        let r = Registry::default();
        r.add(&RECONCILE_RUNS, &["failed"], 3);
        r.observe_ms(&API_LATENCY, &["GET /v1/health"], 4.0);
        let text = render(&[&r]);
        for line in [
            "# TYPE flotilla_reconcile_runs_total counter",
            "flotilla_reconcile_runs_total{outcome=\"failed\"} 3",
            "flotilla_reconcile_runs_total{outcome=\"reconciled\"} 0",
            "# TYPE flotilla_api_request_duration_ms summary",
            "flotilla_api_request_duration_ms_count{route=\"GET /v1/health\"} 1",
            "flotilla_api_request_duration_ms_sum{route=\"GET /v1/health\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
        // Families another source owns are not shown by this one.
        assert!(
            !text.contains("flotilla_metastore_requests_total"),
            "{text}"
        );
    }
}
