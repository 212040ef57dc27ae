//! The finalize handler, separate from `main` so tests call it on a local state.

use flotilla_base::error::Error;
use flotilla_directory::{AuthorityStatus, FinalizeRequest};
use flotilla_services::AppState;
use flotilla_services::service::directory;

/// The invocation payload: the same body as `POST /v1/admin/catalog-finalize`.
pub type FinalizeEvent = FinalizeRequest;

/// A failed invocation. Its text is the API error code and message; for a server-side
/// failure only the generic message (the detail is logged under an `error_id`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandlerError(Error);

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        // Logs a 5xx detail under its error id; a refusal is the caller's to read.
        let _ = flotilla_http_status::to_parts(&e);
        HandlerError(e)
    }
}

impl HandlerError {
    pub fn api(&self) -> &Error {
        &self.0
    }
}

/// The Lambda error names the API code (`FAILED_PRECONDITION`, `UNAVAILABLE`, ...), so an
/// operator's CLI or console shows why finalize refused.
impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(e: HandlerError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: e.0.kind.as_str().to_owned(),
            error_message: e.0.message.clone(),
        }
    }
}

/// One invocation as `main` runs it: [`handle`] in the invocation span, then the EMF flush.
pub async fn invoke(
    state: &AppState,
    telemetry: &flotilla_runtime::telemetry::LambdaTelemetry,
    meta: flotilla_runtime::telemetry::Invocation,
    event: FinalizeEvent,
) -> Result<AuthorityStatus, HandlerError> {
    telemetry.invocation(meta, handle(state, event)).await
}

pub async fn handle(
    state: &AppState,
    event: FinalizeEvent,
) -> Result<AuthorityStatus, HandlerError> {
    Ok(directory::finalize(
        state,
        event.acknowledge_writer_rollout,
        event.acknowledge_quiescent_writes,
    )
    .await?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_base::clock::SystemClock;
    use flotilla_base::error::ErrorKind;
    use flotilla_metastore::redb_store::RedbMetastore;
    use flotilla_runtime::aws::ClaimsOnly;
    use flotilla_services::{AppState, Config};

    use super::*;

    fn state() -> (AppState, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("redb");
        let state = AppState::new(
            Arc::new(store),
            Arc::new(SystemClock),
            Arc::new(ClaimsOnly),
            Config::default(),
        );
        (state, dir)
    }

    fn event(json: &str) -> FinalizeEvent {
        serde_json::from_str(json).expect("event")
    }

    #[tokio::test]
    async fn refuses_without_both_acknowledgements_and_writes_nothing() {
        let (state, _dir) = state();
        for e in [
            "{}",
            r#"{"acknowledge_writer_rollout": true}"#,
            r#"{"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": false}"#,
        ] {
            let err = handle(&state, event(e)).await.expect_err("refused");
            assert_eq!(err.api().kind, ErrorKind::FailedPrecondition);
            assert!(err.to_string().starts_with("FAILED_PRECONDITION"), "{err}");
        }
        assert!(
            !flotilla_directory::authority_enabled(state.store.as_ref())
                .await
                .expect("read")
        );
    }

    #[tokio::test]
    async fn the_sample_event_enables_authority_once_and_repeats_the_answer() {
        let (state, _dir) = state();
        let sample = include_str!("../../../events/finalize/acknowledged.json");
        let first = handle(&state, event(sample)).await.expect("finalize");
        assert_eq!(first.authority, "ENABLED");
        assert!(
            flotilla_directory::authority_enabled(state.store.as_ref())
                .await
                .expect("read")
        );
        let second = handle(&state, event(sample)).await.expect("again");
        assert_eq!(second, first);
        let body = serde_json::to_value(&second).expect("json");
        assert_eq!(
            body.as_object().map(|o| o.len()),
            Some(2),
            "only authority and enabled_at: {body}"
        );
    }

    #[test]
    fn unknown_event_fields_are_refused() {
        assert!(
            serde_json::from_str::<FinalizeEvent>(r#"{"acknowledge_everything": true}"#).is_err()
        );
    }
}
