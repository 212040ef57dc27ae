//! The log format of the Lambda functions: one flat JSON object per line, with the fields of
//! every enclosing span (request id, function, trace id, route or message id) next to the
//! event's own, so CloudWatch Logs Insights can filter on them directly.

use std::fmt;

use serde_json::{Map, Value as Json};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;

/// Formats events as flat JSON objects (span fields are stored as JSON by [`JsonFields`]).
pub struct FlatJson;

struct Fields<'a>(&'a mut Map<String, Json>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Json::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Json::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Json::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Json::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Json::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Json::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut obj = Map::new();
        obj.insert(
            "level".into(),
            Json::from(event.metadata().level().as_str()),
        );
        if let Some(scope) = ctx.event_scope() {
            let mut innermost = None;
            for span in scope.from_root() {
                innermost = Some(span.name());
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && let Ok(Json::Object(m)) = serde_json::from_str::<Json>(fields.as_str())
                {
                    obj.extend(m);
                }
            }
            if let Some(name) = innermost {
                obj.insert("span".into(), Json::from(name));
            }
        }
        event.record(&mut Fields(&mut obj));
        writeln!(writer, "{}", Json::Object(obj))
    }
}

/// The log filter of a process: `RUST_LOG` as a list of `target=level` directives with an
/// optional bare default level (`info`, `warn,flotilla_reconcile=debug`), else `info`. A
/// value that does not parse is ignored (the default applies). Span-field directives are not
/// supported: a target filter needs no regular-expression engine, which keeps it out of the
/// Lambda binaries.
pub fn filter_from_env() -> Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| filter(&v))
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO))
}

/// Parses one filter (the syntax of [`filter_from_env`]); `None` when it does not parse.
pub fn filter(directives: &str) -> Option<Targets> {
    directives.trim().parse().ok()
}

/// A subscriber writing flat JSON lines to `writer`, filtered by `filter`.
pub fn json_subscriber<W>(filter: Targets, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    // The builder's own level filter stays open: `filter` decides.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(writer)
        .with_ansi(false)
        .fmt_fields(JsonFields::new())
        .event_format(FlatJson)
        .finish()
        .with(filter)
}

/// Log lines written into memory: the writer of [`json_subscriber`] in the tests of the
/// log format and of each function's log lines.
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Default)]
pub struct CapturedLogs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

#[cfg(any(test, feature = "testing"))]
impl CapturedLogs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(any(test, feature = "testing"))]
impl std::io::Write for CapturedLogs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(any(test, feature = "testing"))]
impl<'a> MakeWriter<'a> for CapturedLogs {
    type Writer = CapturedLogs;
    fn make_writer(&'a self) -> CapturedLogs {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_keeps_what_its_directives_name_and_refuses_what_does_not_parse() {
        let buf = CapturedLogs::default();
        let sub = json_subscriber(filter("warn,kept=debug").expect("parses"), buf.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "dropped", "below the default");
            tracing::warn!(target: "dropped", "at the default");
            tracing::debug!(target: "kept", "named");
            tracing::trace!(target: "kept", "below its level");
        });
        let out = buf.text();
        let messages: Vec<String> = out
            .lines()
            .map(|l| serde_json::from_str::<Json>(l).unwrap()["message"].to_string())
            .collect();
        assert_eq!(messages, ["\"at the default\"", "\"named\""], "{out}");
        assert!(filter("info,[span{field=1}]=debug").is_none());
        assert!(filter("kept=loud").is_none());
    }

    #[test]
    fn span_fields_are_flattened_into_each_line() {
        let buf = CapturedLogs::default();
        let sub = json_subscriber(filter("info").unwrap(), buf.clone());
        tracing::subscriber::with_default(sub, || {
            let outer = tracing::info_span!("invocation", request_id = "r-1", function = "api");
            let _o = outer.enter();
            let inner = tracing::info_span!("message", message_id = "m-9");
            let _i = inner.enter();
            tracing::info!(count = 3, "done");
        });
        let text = buf.text();
        let line: Json = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(line["request_id"], "r-1");
        assert_eq!(line["function"], "api");
        assert_eq!(line["message_id"], "m-9");
        assert_eq!(line["message"], "done");
        assert_eq!(line["count"], 3);
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["span"], "message");
    }
}
