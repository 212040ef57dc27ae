//! Trace-context propagation across the functions.
//!
//! Lambda active tracing gives each invocation an X-Ray trace header
//! (`Root=1-...;Parent=...;Sampled=1`). The invocation wrapper runs the handler inside
//! [`scope`]; code that hands work to another function (the scheduler's SQS messages) reads
//! [`current_header`] and sends it as the `AWSTraceHeader` message system attribute, and the
//! reconciler runs each record in the scope of the header it arrived with. Log lines carry
//! the trace id, so one search finds a request's or a message's lines in every function.

use std::future::Future;

tokio::task_local! {
    static CONTEXT: TraceContext;
}

/// The trace header of the work in progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceContext {
    header: Option<String>,
}

/// The longest header accepted (an X-Ray header is about 100 bytes).
const MAX_HEADER: usize = 256;

impl TraceContext {
    /// A context from an incoming header; a malformed or oversized one is ignored (it is
    /// caller input on the HTTP path).
    pub fn from_header(header: Option<&str>) -> Self {
        let header = header
            .map(str::trim)
            .filter(|h| valid_header(h))
            .map(str::to_owned);
        Self { header }
    }

    pub fn header(&self) -> Option<&str> {
        self.header.as_deref()
    }

    /// The `Root=` trace id of the header (`1-5759e988-bd862e3fe1be46a994272793`).
    pub fn trace_id(&self) -> Option<&str> {
        let h = self.header.as_deref()?;
        h.split(';')
            .find_map(|part| part.trim().strip_prefix("Root="))
            .filter(|id| !id.is_empty())
    }
}

fn valid_header(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= MAX_HEADER
        && h.contains("Root=")
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '=' | ';' | '-' | '_' | '.'))
}

/// Runs `f` with `ctx` as the current trace context.
pub async fn scope<F: Future>(ctx: TraceContext, f: F) -> F::Output {
    CONTEXT.scope(ctx, f).await
}

/// The header of the current context, if any.
pub fn current_header() -> Option<String> {
    CONTEXT.try_with(|c| c.header.clone()).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn parses_the_root_and_refuses_junk() {
        let c = TraceContext::from_header(Some(H));
        assert_eq!(c.trace_id(), Some("1-5759e988-bd862e3fe1be46a994272793"));
        for bad in [
            "",
            "Sampled=1",
            "Root=1-a b",
            &"Root=x".repeat(100),
            "Root=1\nInjected",
        ] {
            assert_eq!(
                TraceContext::from_header(Some(bad)),
                TraceContext::default(),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn the_header_is_visible_inside_the_scope_only() {
        assert_eq!(current_header(), None);
        let inner = scope(TraceContext::from_header(Some(H)), async {
            current_header()
        })
        .await;
        assert_eq!(inner.as_deref(), Some(H));
        assert_eq!(current_header(), None);
    }
}
