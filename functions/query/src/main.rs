#![forbid(unsafe_code)]
//! The query-replica Lambda: answers a catalog's table-name/schema directory from
//! a [`flotilla_directory::DirectoryCache`] that lives in the state built once at cold
//! start, so a warm container refreshes with one strong point read while nothing changed.
//!
//! Event: `{"account_id": "acme", "catalog_id": "..."}` (`events/query/directory.json`).
//! Answers the body of `GET /v1/accounts/{A}/catalogs/{id}/directory`:
//! `{"catalog_id", "entries": [...], "health": {...}}`; a missing catalog fails the
//! invocation with `NOT_FOUND`.

mod handler;

use lambda_runtime::{LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (_, state) = flotilla_runtime::aws::start().await?;
    let telemetry = flotilla_runtime::telemetry::LambdaTelemetry::new(&state, "query");
    let (state, telemetry) = (&state, &telemetry);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<handler::QueryEvent>| async move {
            let meta = flotilla_runtime::telemetry::Invocation::new(
                event.context.request_id,
                event.context.xray_trace_id,
            );
            handler::invoke(state, telemetry, meta, event.payload).await
        },
    ))
    .await
}
