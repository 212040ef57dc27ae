//! The reconcile queue on AWS: SQS (feature `sqs`, compiled only into the functions that send
//! reconcile messages).

use async_trait::async_trait;
use flotilla_reconcile::schedule::WorkMessage;

use super::{QueueError, ReconcileQueue};

/// SQS: `SendMessageBatch` in groups of ten (the API's limit), each message carrying the
/// sender's trace header as its `AWSTraceHeader` system attribute. Capture messages go to
/// the capture queue when one is named (the capture function consumes it), every other
/// message to the reconcile queue.
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    capture_url: Option<String>,
}

impl SqsQueue {
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
            capture_url: None,
        }
    }

    /// Sends capture messages to `url` instead of the reconcile queue.
    pub fn with_capture_queue(mut self, url: Option<String>) -> Self {
        self.capture_url = url;
        self
    }

    /// The queue a message belongs on.
    pub fn url_for(&self, m: &WorkMessage) -> &str {
        match (m, &self.capture_url) {
            (WorkMessage::Capture(_), Some(url)) => url,
            _ => &self.url,
        }
    }
}

#[async_trait]
impl ReconcileQueue for SqsQueue {
    async fn send(&self, msgs: &[WorkMessage]) -> Result<(), QueueError> {
        let mut by_queue: Vec<(&str, Vec<WorkMessage>)> = Vec::new();
        for m in msgs {
            let url = self.url_for(m);
            match by_queue.iter_mut().find(|(u, _)| *u == url) {
                Some((_, group)) => group.push(m.clone()),
                None => by_queue.push((url, vec![m.clone()])),
            }
        }
        let mut failed = 0;
        for (url, group) in &by_queue {
            failed += self.send_to(url, group).await?;
        }
        if failed > 0 {
            return Err(QueueError::Partial {
                failed,
                total: msgs.len(),
            });
        }
        Ok(())
    }
}

impl SqsQueue {
    /// Sends `msgs` to one queue; answers how many it refused.
    async fn send_to(&self, url: &str, msgs: &[WorkMessage]) -> Result<usize, QueueError> {
        let mut failed = 0;
        let trace = trace_attribute()?;
        for group in msgs.chunks(10) {
            let mut entries = Vec::with_capacity(group.len());
            for (i, m) in group.iter().enumerate() {
                let mut e = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(m.to_body());
                if let Some(t) = &trace {
                    e = e.message_system_attributes(
                        aws_sdk_sqs::types::MessageSystemAttributeNameForSends::AwsTraceHeader,
                        t.clone(),
                    );
                }
                entries.push(
                    e.build()
                        .map_err(|e| QueueError::Unavailable(e.to_string()))?,
                );
            }
            let out = self
                .client
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    QueueError::Unavailable(aws_sdk_sqs::error::DisplayErrorContext(&e).to_string())
                })?;
            failed += out.failed().len();
        }
        Ok(failed)
    }
}

#[async_trait]
impl flotilla_services::state::WorkSender for SqsQueue {
    async fn send_bodies(&self, bodies: &[String]) -> flotilla_base::error::Result<()> {
        super::send_bodies(self, bodies).await
    }
}

/// The `AWSTraceHeader` system attribute of the current trace context, if there is one.
fn trace_attribute() -> Result<Option<aws_sdk_sqs::types::MessageSystemAttributeValue>, QueueError>
{
    let Some(header) = flotilla_telemetry::trace::current_header() else {
        return Ok(None);
    };
    aws_sdk_sqs::types::MessageSystemAttributeValue::builder()
        .data_type("String")
        .string_value(header)
        .build()
        .map(Some)
        .map_err(|e| QueueError::Unavailable(e.to_string()))
}

/// An SQS client from the ambient AWS configuration, sent to `endpoint` when given (an
/// emulator in tests and `cargo lambda watch`).
pub async fn sqs_client(endpoint: Option<&str>) -> aws_sdk_sqs::Client {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(e) = endpoint {
        loader = loader.endpoint_url(e);
    }
    aws_sdk_sqs::Client::new(&loader.load().await)
}
