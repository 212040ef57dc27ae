//! CloudWatch embedded metric format (EMF): the catalogue metrics as JSON log lines that
//! CloudWatch Logs turns into metrics, written to stdout by each Lambda after every
//! invocation (see `docs/operations.md`).
//!
//! One line per distinct set of dimension values. Counters carry their increase since the
//! previous flush of this process (CloudWatch sums the lines), a gauge its current value, a
//! timing its individual observations (at most [`MAX_VALUES`] per line). Dimensions are
//! `Stage`, `Function` and the metric's labels, nothing else.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value as Json, json};

use crate::catalog::{FUNCTION, FUNCTIONS, MetricDef, NAMESPACE, OTHER, STAGE};
use crate::registry::{Sample, Source, Value, keep_observations};

/// Values of one metric in one EMF line (the format's limit).
pub const MAX_VALUES: usize = 100;

type SeriesKey = (&'static str, Vec<&'static str>);
type GroupKey = (Vec<Vec<&'static str>>, Vec<(&'static str, String)>, usize);

/// Turns the samples of a process into EMF lines, remembering what it already reported.
pub struct EmfFlusher {
    stage: String,
    function: &'static str,
    reported: Mutex<HashMap<SeriesKey, i64>>,
}

/// A stage name usable as a dimension value (the template restricts it the same way).
fn clean_stage(stage: &str) -> String {
    let ok = !stage.is_empty()
        && stage.len() <= 20
        && stage
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        stage.to_owned()
    } else {
        OTHER.to_owned()
    }
}

impl EmfFlusher {
    /// `function` is one of [`FUNCTIONS`] (anything else is reported as `other`). Creating a
    /// flusher makes the process keep timing observations for it.
    pub fn new(stage: &str, function: &str) -> Self {
        keep_observations(true);
        Self {
            stage: clean_stage(stage),
            function: FUNCTIONS
                .iter()
                .copied()
                .find(|f| *f == function)
                .unwrap_or(OTHER),
            reported: Mutex::new(HashMap::new()),
        }
    }

    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The EMF lines for everything that changed since the previous call.
    pub fn lines(&self, sources: &[&dyn Source], timestamp_ms: i64) -> Vec<String> {
        let mut samples = Vec::new();
        for s in sources {
            s.collect(&mut samples, true);
        }
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        let mut groups: BTreeMap<GroupKey, Vec<(&'static MetricDef, Json)>> = BTreeMap::new();
        for Sample { def, labels, value } in samples {
            let key = (def.name, labels.clone());
            let chunks: Vec<Json> = match value {
                Value::Counter(now) => {
                    let now = i64::try_from(now).unwrap_or(i64::MAX);
                    let before = reported.insert(key, now).unwrap_or(0);
                    // A counter that went down belongs to a new owner (a rebuilt store).
                    let delta = if now >= before { now - before } else { now };
                    if delta == 0 {
                        continue;
                    }
                    vec![json!(delta)]
                }
                Value::Gauge(level) => {
                    if reported.insert(key, level) == Some(level) {
                        continue;
                    }
                    vec![json!(level.max(0))]
                }
                Value::Timing { recent, .. } => recent
                    .chunks(MAX_VALUES)
                    .map(|c| if c.len() == 1 { json!(c[0]) } else { json!(c) })
                    .collect(),
            };
            let dims: Vec<(&'static str, String)> = def
                .labels
                .iter()
                .zip(&labels)
                .map(|(l, v)| (l.dimension, (*v).to_owned()))
                .collect();
            for (i, chunk) in chunks.into_iter().enumerate() {
                groups
                    .entry((def.dimension_sets(), dims.clone(), i))
                    .or_default()
                    .push((def, chunk));
            }
        }
        groups
            .into_iter()
            .map(|((sets, dims, _), metrics)| {
                self.document(timestamp_ms, &sets, &dims, &metrics)
                    .to_string()
            })
            .collect()
    }

    fn document(
        &self,
        timestamp_ms: i64,
        sets: &[Vec<&'static str>],
        dims: &[(&'static str, String)],
        metrics: &[(&'static MetricDef, Json)],
    ) -> Json {
        let mut doc = Map::new();
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": sets,
                    "Metrics": metrics.iter().map(|(d, _)| json!({
                        "Name": d.cloudwatch, "Unit": d.unit.as_str()
                    })).collect::<Vec<_>>(),
                }],
            }),
        );
        doc.insert(STAGE.into(), json!(self.stage));
        doc.insert(FUNCTION.into(), json!(self.function));
        for (name, value) in dims {
            doc.insert((*name).into(), json!(value));
        }
        for (def, value) in metrics {
            doc.insert(def.cloudwatch.into(), value.clone());
        }
        Json::Object(doc)
    }
}

/// Checks one EMF line against the catalogue: the `_aws` block (namespace, dimension sets,
/// metric names and units exactly as defined), the dimension values (a known function, closed
/// labels inside their sets) and that no dimension value contains any of `forbidden` (account
/// ids, tokens, generations, request ids of the test). Answers the parsed line. Used by the
/// tests of every function's output.
#[cfg(any(test, feature = "testing"))]
pub fn check_line(line: &str, forbidden: &[&str]) -> Result<Json, String> {
    use crate::catalog::ALL;
    let doc: Json = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}: {line}"))?;
    let obj = doc.as_object().ok_or("not an object")?;
    let directives = doc["_aws"]["CloudWatchMetrics"]
        .as_array()
        .filter(|d| d.len() == 1)
        .ok_or("one CloudWatchMetrics directive expected")?;
    let d = &directives[0];
    if d["Namespace"] != NAMESPACE {
        return Err(format!("namespace {}", d["Namespace"]));
    }
    if !doc["_aws"]["Timestamp"].is_i64() {
        return Err("Timestamp missing".into());
    }
    let mut dimension_names: Vec<&str> = Vec::new();
    let metrics = d["Metrics"].as_array().ok_or("Metrics missing")?;
    if metrics.is_empty() || metrics.len() > 100 {
        return Err(format!("{} metrics in one line", metrics.len()));
    }
    for m in metrics {
        let name = m["Name"].as_str().ok_or("metric without a name")?;
        let def = ALL
            .iter()
            .find(|x| x.cloudwatch == name)
            .ok_or_else(|| format!("{name} is not in the catalogue"))?;
        if m["Unit"] != def.unit.as_str() {
            return Err(format!("{name}: unit {}", m["Unit"]));
        }
        if d["Dimensions"] != json!(def.dimension_sets()) {
            return Err(format!("{name}: dimension sets {}", d["Dimensions"]));
        }
        let value = &doc[name];
        let numbers = match value {
            Json::Array(v) => v.len() <= MAX_VALUES && v.iter().all(Json::is_number),
            v => v.is_number(),
        };
        if !numbers {
            return Err(format!("{name}: value {value}"));
        }
        for l in def.labels {
            let v = doc[l.dimension]
                .as_str()
                .ok_or_else(|| format!("{name}: dimension {} missing", l.dimension))?;
            if l.is_closed() && v != OTHER && !l.values.contains(&v) {
                return Err(format!("{name}: {}={v} is outside its set", l.dimension));
            }
            dimension_names.push(l.dimension);
        }
    }
    let function = doc[FUNCTION].as_str().unwrap_or("");
    if !FUNCTIONS.contains(&function) {
        return Err(format!("Function={function}"));
    }
    dimension_names.extend([STAGE, FUNCTION]);
    for (key, value) in obj {
        let is_metric = metrics.iter().any(|m| m["Name"] == key.as_str());
        if key == "_aws" || is_metric {
            continue;
        }
        if !dimension_names.contains(&key.as_str()) {
            return Err(format!("unexpected member {key}"));
        }
        let text = value
            .as_str()
            .ok_or_else(|| format!("{key} is not a string"))?;
        if let Some(bad) = forbidden
            .iter()
            .find(|f| !f.is_empty() && text.contains(*f))
        {
            return Err(format!("{key}={text} contains forbidden value {bad}"));
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{DIRECTORY_STALE, RECONCILE_RUNS, UPSTREAM_LATENCY};
    use crate::registry::Registry;

    fn parse(lines: &[String]) -> Vec<Json> {
        lines
            .iter()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    }

    #[test]
    fn counters_report_increases_and_nothing_when_unchanged() {
        let r = Registry::default();
        let f = EmfFlusher::new("dev", "reconciler");
        r.add(&RECONCILE_RUNS, &["reconciled"], 2);
        let docs = parse(&f.lines(&[&r], 1));
        assert_eq!(docs.len(), 1);
        let d = &docs[0];
        assert_eq!(d["ReconcileRuns"], 2);
        assert_eq!(d["Outcome"], "reconciled");
        assert_eq!(d["Stage"], "dev");
        assert_eq!(d["Function"], "reconciler");
        assert_eq!(d["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Flotilla");
        assert_eq!(
            d["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Stage", "Function", "Outcome"], ["Stage", "Outcome"]])
        );
        assert!(f.lines(&[&r], 2).is_empty());
        assert!(check_line(&json!(d).to_string(), &["acme"]).is_ok());
        assert!(check_line(&json!(d).to_string(), &["reconciled"]).is_err());
        let mut tampered = d.clone();
        tampered["AccountId"] = json!("acme");
        assert!(check_line(&tampered.to_string(), &[]).is_err());
        r.add(&RECONCILE_RUNS, &["reconciled"], 1);
        assert_eq!(parse(&f.lines(&[&r], 3))[0]["ReconcileRuns"], 1);
    }

    #[test]
    fn timings_send_observations_in_bounded_lines_and_gauges_changes() {
        let r = Registry::default();
        let f = EmfFlusher::new("Not A Stage!", "nope");
        for i in 0..150 {
            r.observe_ms(&UPSTREAM_LATENCY, &["unity"], f64::from(i));
        }
        r.set(&DIRECTORY_STALE, &[], 2);
        let docs = parse(&f.lines(&[&r], 1));
        let lens: Vec<usize> = docs
            .iter()
            .filter_map(|d| d["UpstreamLatency"].as_array().map(Vec::len))
            .collect();
        assert_eq!(lens, [100, 50]);
        assert!(
            docs.iter()
                .all(|d| d["Stage"] == OTHER && d["Function"] == OTHER)
        );
        assert!(docs.iter().any(|d| d["DirectoryStaleCatalogs"] == 2));
        assert!(f.lines(&[&r], 2).is_empty());
    }
}
