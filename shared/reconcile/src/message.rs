//! The queue's messages and what handling one came to: an overlay's reconcile message, a
//! capture job, a scheduled plan, the follow-up leg of a checkpointed run, and the outcome the
//! hosts ack or redeliver by. Below every stage that sends or handles them (`work`, `chain`,
//! `schedule`, `capture`), so none of those depends on another for its message types.

use serde::{Deserialize, Serialize};

use super::{ReconcileError, ReconcileSummary};

/// The body of one reconcile queue message (`events/reconciler/batch.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileMessage {
    pub account_id: String,
    pub overlay_id: String,
    pub observed_generation: u64,
}

impl ReconcileMessage {
    /// Parses a message body; anything else is a poison message.
    pub fn parse(body: &str) -> Result<Self, String> {
        let m: Self =
            serde_json::from_str(body).map_err(|e| format!("malformed reconcile message: {e}"))?;
        flotilla_domain::names::validate_account_id(&m.account_id)
            .map_err(|e| format!("malformed account_id: {e}"))?;
        flotilla_domain::names::validate_resource_id(&m.overlay_id)
            .map_err(|e| format!("malformed overlay_id: {e}"))?;
        Ok(m)
    }

    pub fn to_body(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The capture job that follows this reconciliation, at the same generation.
    pub fn capture_job(&self) -> CaptureMessage {
        CaptureMessage {
            account_id: self.account_id.clone(),
            overlay_id: self.overlay_id.clone(),
            observed_generation: self.observed_generation,
            revalidate: false,
        }
    }
}

/// The body of one capture message (`events/capture/batch.json`): run one overlay's
/// capture job (`docs/capture.md`) at the overlay generation the sender observed, validating
/// every table again when `revalidate` is set. The API enqueues it (`POST
/// .../overlays/{id}/capture`, describing an integration with `?revalidate=true`); the workers
/// run it. Its `kind` is always `"capture"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureMessage {
    pub account_id: String,
    pub overlay_id: String,
    pub observed_generation: u64,
    pub revalidate: bool,
}

/// The wire form of [`CaptureMessage`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureWire {
    kind: String,
    account_id: String,
    overlay_id: String,
    observed_generation: u64,
    revalidate: bool,
}

impl CaptureMessage {
    /// The `kind` of a capture message body.
    pub const KIND: &'static str = "capture";

    /// Parses a message body; anything else is a poison message.
    pub fn parse(body: &str) -> Result<Self, String> {
        let w: CaptureWire =
            serde_json::from_str(body).map_err(|e| format!("malformed capture message: {e}"))?;
        if w.kind != Self::KIND {
            return Err(format!(
                "malformed capture message: unknown kind {:?} (expected \"capture\")",
                w.kind
            ));
        }
        flotilla_domain::names::validate_account_id(&w.account_id)
            .map_err(|e| format!("malformed account_id: {e}"))?;
        flotilla_domain::names::validate_resource_id(&w.overlay_id)
            .map_err(|e| format!("malformed overlay_id: {e}"))?;
        Ok(Self {
            account_id: w.account_id,
            overlay_id: w.overlay_id,
            observed_generation: w.observed_generation,
            revalidate: w.revalidate,
        })
    }

    pub fn to_body(&self) -> String {
        serde_json::to_string(&CaptureWire {
            kind: Self::KIND.to_owned(),
            account_id: self.account_id.clone(),
            overlay_id: self.overlay_id.clone(),
            observed_generation: self.observed_generation,
            revalidate: self.revalidate,
        })
        .unwrap_or_default()
    }

    /// The overlay message this job is fenced like: same overlay, same generation.
    pub fn fence(&self) -> ReconcileMessage {
        ReconcileMessage {
            account_id: self.account_id.clone(),
            overlay_id: self.overlay_id.clone(),
            observed_generation: self.observed_generation,
        }
    }

    /// The message as JSON (what the API reports it queued).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.to_body()).unwrap_or_default()
    }
}

/// What handling one message came to.
#[derive(Debug)]
pub enum MessageOutcome {
    Reconciled(Box<ReconcileSummary>),
    /// A scheduled plan job ran: this many overlays published their share (none failed).
    Planned {
        reconciled: usize,
    },
    /// A capture message's job ran: tables captured and unchanged (none failed for a
    /// transient reason).
    Captured {
        captured: u64,
        unchanged: u64,
    },
    /// Another delivery of the same plan holds the integration's lease.
    Duplicate,
    /// The run is checkpointed and continues in this follow-up message, which the host
    /// sends before acknowledging (`docs/reconciliation.md`, "Checkpointed runs").
    Continued {
        next: Box<WorkMessage>,
    },
    /// The overlay is at another generation than the message observed.
    Superseded {
        current: u64,
    },
    /// The overlay (or its account) no longer exists.
    Gone,
    /// The overlay or its integration is paused.
    Paused,
    /// The run failed. A retryable failure is delivered again (and dead-lettered
    /// eventually); a permanent one is recorded and acknowledged.
    Failed {
        retryable: bool,
        code: &'static str,
        reason: String,
        /// The `reason` label of `flotilla_reconcile_failures_total`.
        kind: &'static str,
    },
}

impl MessageOutcome {
    /// The outcome of a run that failed with `e`, retried by the error's kind.
    pub fn failed(e: &ReconcileError) -> Self {
        MessageOutcome::Failed {
            retryable: e.is_retryable(),
            code: e.code(),
            reason: e.cause(),
            kind: failure_kind(e),
        }
    }

    /// The outcome of a message whose records could not be read (retried by the kind: a
    /// throttled or unreachable store is, a corrupt record is not).
    pub fn unreadable(e: flotilla_base::error::Error) -> Self {
        MessageOutcome::Failed {
            retryable: e.is_retryable(),
            code: e.kind.as_str(),
            reason: e.to_string(),
            kind: failure_kind(&ReconcileError::Api(e)),
        }
    }

    /// A capture job that left `failed` tables uncaptured, some for a transient reason.
    pub fn capture_incomplete(failed: usize) -> Self {
        MessageOutcome::Failed {
            retryable: true,
            code: "CAPTURE_INCOMPLETE",
            reason: format!("{failed} tables were not captured"),
            kind: "incomplete",
        }
    }

    /// Whether the message must be reported as a batch item failure.
    pub fn redeliver(&self) -> bool {
        matches!(
            self,
            MessageOutcome::Failed {
                retryable: true,
                ..
            }
        )
    }

    pub fn label(&self) -> &'static str {
        match self {
            MessageOutcome::Reconciled(_)
            | MessageOutcome::Planned { .. }
            | MessageOutcome::Captured { .. } => "reconciled",
            MessageOutcome::Duplicate => "superseded",
            MessageOutcome::Continued { .. } => "continued",
            MessageOutcome::Superseded { .. } => "superseded",
            MessageOutcome::Gone => "gone",
            MessageOutcome::Paused => "paused",
            MessageOutcome::Failed {
                retryable: true, ..
            } => "retry",
            MessageOutcome::Failed {
                retryable: false, ..
            } => "failed",
        }
    }
}

/// What a follow-up message names: the chain and the leg it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRef {
    pub run: String,
    pub leg: u32,
}

/// A scheduled reconciliation of one integration's effective plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMessage {
    pub account_id: String,
    pub integration_id: String,
    pub plan_generation: u64,
}

/// A queue message: a scheduled plan, one overlay (a direct request), one overlay's capture
/// job (enqueued by the API), or the follow-up leg of a plan's or an overlay's checkpointed
/// run (`docs/reconciliation.md`, "Checkpointed runs").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkMessage {
    Overlay(ReconcileMessage),
    Plan(PlanMessage),
    /// The plan or overlay message the chain started from, and the chain and leg to run.
    Leg(Box<WorkMessage>, CheckpointRef),
    Capture(CaptureMessage),
}

impl From<CaptureMessage> for WorkMessage {
    fn from(m: CaptureMessage) -> Self {
        WorkMessage::Capture(m)
    }
}

impl From<ReconcileMessage> for WorkMessage {
    fn from(m: ReconcileMessage) -> Self {
        WorkMessage::Overlay(m)
    }
}

impl From<PlanMessage> for WorkMessage {
    fn from(m: PlanMessage) -> Self {
        WorkMessage::Plan(m)
    }
}

impl WorkMessage {
    /// Parses a body: a capture message has a `kind`, a plan message names an
    /// `integration_id`, an overlay message an `overlay_id`; anything else is a poison
    /// message.
    pub fn parse(body: &str) -> Result<Self, String> {
        let mut v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("malformed reconcile message: {e}"))?;
        if v.get("kind").is_some() {
            return CaptureMessage::parse(body).map(WorkMessage::Capture);
        }
        if let Some(ck) = v.as_object_mut().and_then(|o| o.remove("checkpoint")) {
            let ck: CheckpointRef =
                serde_json::from_value(ck).map_err(|e| format!("malformed checkpoint: {e}"))?;
            flotilla_domain::names::validate_resource_id(&ck.run)
                .map_err(|e| format!("malformed checkpoint run: {e}"))?;
            let base = Self::parse(&v.to_string())?;
            return Ok(WorkMessage::Leg(Box::new(base), ck));
        }
        if v.get("integration_id").is_none() {
            return ReconcileMessage::parse(body).map(WorkMessage::Overlay);
        }
        let m: PlanMessage =
            serde_json::from_value(v).map_err(|e| format!("malformed plan message: {e}"))?;
        flotilla_domain::names::validate_account_id(&m.account_id)
            .map_err(|e| format!("malformed account_id: {e}"))?;
        flotilla_domain::names::validate_resource_id(&m.integration_id)
            .map_err(|e| format!("malformed integration_id: {e}"))?;
        Ok(WorkMessage::Plan(m))
    }

    pub fn to_body(&self) -> String {
        match self {
            WorkMessage::Overlay(m) => m.to_body(),
            WorkMessage::Plan(m) => serde_json::to_string(m).unwrap_or_default(),
            WorkMessage::Leg(base, ck) => {
                let mut v: serde_json::Value =
                    serde_json::from_str(&base.to_body()).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert(
                        "checkpoint".into(),
                        serde_json::to_value(ck).unwrap_or_default(),
                    );
                }
                v.to_string()
            }
            WorkMessage::Capture(m) => m.to_body(),
        }
    }

    /// The follow-up of this message for the chain leg `ck`.
    pub fn leg(&self, ck: CheckpointRef) -> WorkMessage {
        let base = match self {
            WorkMessage::Leg(base, _) => base.as_ref().clone(),
            other => other.clone(),
        };
        WorkMessage::Leg(Box::new(base), ck)
    }

    /// What identifies a queued message (a second one with the same identity is a duplicate).
    pub fn ident(&self) -> (String, String, u64) {
        match self {
            WorkMessage::Overlay(m) => (
                m.account_id.clone(),
                format!("OVL#{}", m.overlay_id),
                m.observed_generation,
            ),
            WorkMessage::Plan(m) => (
                m.account_id.clone(),
                format!("INT#{}", m.integration_id),
                m.plan_generation,
            ),
            WorkMessage::Leg(base, ck) => {
                let (a, s, g) = base.ident();
                (a, format!("{s}#LEG#{}#{}", ck.run, ck.leg), g)
            }
            WorkMessage::Capture(m) => (
                m.account_id.clone(),
                format!(
                    "{}#{}",
                    if m.revalidate {
                        "REVALIDATE"
                    } else {
                        "CAPTURE"
                    },
                    m.overlay_id
                ),
                m.observed_generation,
            ),
        }
    }
}

/// The `reason` label of a failed run.
pub(crate) fn failure_kind(e: &ReconcileError) -> &'static str {
    match e {
        ReconcileError::Upstream { .. } | ReconcileError::Unstorable { .. } => "upstream",
        ReconcileError::UpstreamChanged { .. } => "incomplete",
        ReconcileError::Conflicts(_) => "conflict",
        ReconcileError::Exceeded(_) => "limit",
        ReconcileError::FenceLost => "fence_lost",
        ReconcileError::Incomplete { .. } => "incomplete",
        ReconcileError::Deleting(_) => "deleting",
        ReconcileError::Api(e) if e.kind == flotilla_base::error::ErrorKind::Unavailable => {
            "metastore"
        }
        _ => "internal",
    }
}
