#![forbid(unsafe_code)]
//! The reconciler Lambda: SQS batches of reconcile messages (partial batch failures).

use aws_lambda_events::event::sqs::SqsEvent;
use flotilla_core::reconcile::AdapterConnector;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    flotilla_runtime::telemetry::init(true);
    let settings = flotilla_runtime::aws::AwsSettings::from_env()?;
    let state = flotilla_runtime::aws::build_state(&settings).await;
    let state = &state;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, Error>(
            flotilla_fn_reconciler::handle_batch(state, &AdapterConnector, event.payload).await,
        )
    }))
    .await
}
