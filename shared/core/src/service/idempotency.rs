//! Receipt-in-batch idempotency (seed 004, "Durability contract").
//!
//! A create carrying an `Idempotency-Key`:
//! 1. reserves a *pending* receipt (put-if-absent) that fixes the request fingerprint and the
//!    resource id this key will create;
//! 2. publishes the resource and turns the receipt into an immutable *success* receipt (with
//!    the recorded response) in ONE transaction, conditioned on the pending receipt's version.
//!
//! A replay reads the receipt: a success answers the recorded response without a second
//! effect; a pending receipt with the same fingerprint is *resumed* with the reserved id, so
//! a crash between reservation and publication never blocks a later retry (Floecat's bug was
//! exactly a pending record that blocked retries for the key's lifetime). A different request
//! under the key is `409 IDEMPOTENCY_KEY_REUSED`. Receipts expire after the configured TTL;
//! an expired receipt is treated as absent and overwritten by version.

use std::future::Future;

use flotilla_metastore::{Condition, Consistency, Key, Op, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{MAX_ATTEMPTS, backoff, key};
use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;

/// The response a create answered, as recorded in its receipt.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecordedResponse {
    pub status: u16,
    pub body: Value,
}

impl RecordedResponse {
    pub fn created(body: Value) -> Self {
        Self { status: 201, body }
    }

    pub fn ok(body: Value) -> Self {
        Self { status: 200, body }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum ReceiptState {
    Pending,
    Succeeded,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Receipt {
    state: ReceiptState,
    fingerprint: String,
    reserved_id: String,
    created_ms: i64,
    #[serde(default)]
    response: Option<RecordedResponse>,
}

/// The idempotency part of a create request.
#[derive(Clone, Debug)]
pub struct IdempotencyRequest {
    pub receipt_key: Key,
    pub fingerprint: String,
}

impl IdempotencyRequest {
    /// `scope_parts` is the receipt key for the hashed client key; the fingerprint covers the
    /// method, the route and the request body *without secret bytes*.
    pub fn new(receipt_key: Key, fingerprint_material: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for part in fingerprint_material {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self {
            receipt_key,
            fingerprint: hex::encode(h.finalize()),
        }
    }
}

/// Hashes a client idempotency key for use in a storage key (bounded length, no separators).
pub fn hash_client_key(k: &str) -> String {
    hex::encode(Sha256::digest(k.as_bytes()))
}

/// Checks an `Idempotency-Key` header value.
pub fn validate_client_key(k: &str) -> ApiResult<()> {
    if k.is_empty() || k.len() > 255 || !k.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ApiError::invalid(
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        ));
    }
    Ok(())
}

/// What a create decided after reading current state.
pub enum Plan {
    /// Publish these operations atomically and answer `response`. `probe` is the resource's
    /// own key: after an outcome-unknown failure without an idempotency key, its presence
    /// with the reserved id proves the create committed.
    Publish {
        ops: Vec<Op>,
        response: RecordedResponse,
        probe: Key,
    },
    /// Answer without writing (e.g. `on_conflict=return_existing`).
    Respond(RecordedResponse),
}

/// Runs a create under the receipt protocol. `build(id)` reads current state with strong
/// reads and returns the plan for creating the resource with identity `id`; it is called
/// again after every lost race, so it must re-derive everything it decides.
pub async fn run_create<F, Fut>(
    state: &AppState,
    idem: Option<IdempotencyRequest>,
    mut build: F,
) -> ApiResult<RecordedResponse>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = ApiResult<Plan>>,
{
    let store = state.store.as_ref();
    let mut fresh_id = flotilla_domain::names::new_id();
    for attempt in 0..MAX_ATTEMPTS {
        // 1. The receipt: replay, resume, or reserve.
        let receipt_version = match &idem {
            None => None,
            Some(req) => {
                let now = state.clock.now_secs();
                let current = store.get(&req.receipt_key, Consistency::Strong).await?;
                let expired_version = current.as_ref().map(|i| i.version);
                let live = current.filter(|i| i.expires_at.is_none_or(|t| t > now));
                match live {
                    Some(item) => {
                        let r: Receipt = item.json()?;
                        if r.fingerprint != req.fingerprint {
                            return Err(ApiError::new(
                                Code::IdempotencyKeyReused,
                                "this Idempotency-Key was used with a different request",
                            ));
                        }
                        match (r.state, r.response) {
                            (ReceiptState::Succeeded, Some(resp)) => return Ok(resp),
                            _ => {
                                fresh_id = r.reserved_id;
                                Some(item.version)
                            }
                        }
                    }
                    None => {
                        let receipt = Receipt {
                            state: ReceiptState::Pending,
                            fingerprint: req.fingerprint.clone(),
                            reserved_id: fresh_id.clone(),
                            created_ms: state.clock.now_ms(),
                            response: None,
                        };
                        let condition = match expired_version {
                            Some(v) => Condition::Version(v),
                            None => Condition::Absent,
                        };
                        let op = Op::Put {
                            key: req.receipt_key.clone(),
                            body: super::to_body(&receipt)?,
                            expires_at: Some(now + state.config.idempotency_ttl_secs),
                            condition: Some(condition),
                        };
                        match store.transact(Transaction::new().with(op)).await {
                            Ok(()) => Some(expired_version.map_or(1, |v| v + 1)),
                            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => {
                                backoff(attempt).await;
                                continue;
                            }
                            // Unknown: re-read on the next attempt decides.
                            Err(e) if e.is_outcome_unknown() => continue,
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        };

        // 2. Decide and publish.
        let plan = match build(fresh_id.clone()).await {
            Ok(plan) => plan,
            Err(e) => {
                // A concurrent request with this key may have published between our receipt
                // read and `build`'s reads (then `build` sees "our" resource as a conflict):
                // the receipt, not the resource state, decides the answer.
                if let Some(req) = &idem
                    && let Some(resp) = succeeded(state, req).await?
                {
                    return Ok(resp);
                }
                return Err(e);
            }
        };
        let (mut ops, response, probe) = match plan {
            Plan::Respond(resp) => (Vec::new(), resp, None),
            Plan::Publish {
                ops,
                response,
                probe,
            } => (ops, response, Some(probe)),
        };
        let receipt_index = ops.len();
        if let (Some(req), Some(v)) = (&idem, receipt_version) {
            let receipt = Receipt {
                state: ReceiptState::Succeeded,
                fingerprint: req.fingerprint.clone(),
                reserved_id: fresh_id.clone(),
                created_ms: state.clock.now_ms(),
                response: Some(response.clone()),
            };
            ops.push(Op::Put {
                key: req.receipt_key.clone(),
                body: super::to_body(&receipt)?,
                expires_at: Some(state.clock.now_secs() + state.config.idempotency_ttl_secs),
                condition: Some(Condition::Version(v)),
            });
        }
        if ops.is_empty() {
            return Ok(response);
        }
        match store.transact(Transaction { ops }).await {
            Ok(()) => return Ok(response),
            Err(e) if super::is_condition_failure(&e) => {
                // Lost a race. If our receipt moved, another request with this key finished
                // (or reserved anew): the next attempt replays it. Otherwise state changed
                // under us and `build` will see why.
                if idem.is_some() && super::op_failed(&e, receipt_index) {
                    continue;
                }
                backoff(attempt).await;
                continue;
            }
            Err(e) if e.is_retryable() => {
                backoff(attempt).await;
                continue;
            }
            Err(e) if e.is_outcome_unknown() => {
                if idem.is_some() {
                    // The receipt tells on the next attempt whether we committed.
                    continue;
                }
                if let Some(probe) = probe
                    && committed_with_id(state, &probe, &fresh_id).await?
                {
                    return Ok(response);
                }
                return Err(ApiError::unavailable(e.to_string()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::unavailable(
        "create did not converge after repeated conflicts",
    ))
}

/// The recorded response, when the receipt has succeeded for this same request.
async fn succeeded(
    state: &AppState,
    req: &IdempotencyRequest,
) -> ApiResult<Option<RecordedResponse>> {
    let Some(item) = state
        .store
        .get(&req.receipt_key, Consistency::Strong)
        .await?
    else {
        return Ok(None);
    };
    let r: Receipt = item.json()?;
    Ok(match (r.state, r.response) {
        (ReceiptState::Succeeded, Some(resp)) if r.fingerprint == req.fingerprint => Some(resp),
        _ => None,
    })
}

async fn committed_with_id(state: &AppState, probe: &Key, id: &str) -> ApiResult<bool> {
    match state.store.get(probe, Consistency::Strong).await? {
        Some(item) => {
            let v: Value = item.json()?;
            Ok(v.get("id").and_then(Value::as_str) == Some(id))
        }
        None => Ok(false),
    }
}

/// A receipt key in an account partition.
pub fn account_receipt_key(account: &str, client_key: &str) -> Key {
    key(flotilla_domain::keys::account_idempotency(
        account,
        &hash_client_key(client_key),
    ))
}

/// A receipt key for operator-scoped creates.
pub fn system_receipt_key(client_key: &str) -> Key {
    key(flotilla_domain::keys::system_idempotency(&hash_client_key(
        client_key,
    )))
}

// ---- receipts for protocols that build their own transaction ----------------------------

/// What [`reserve`] found for a create whose transaction is built elsewhere (the ParqDB index
/// catalog service, which takes extra operations through its `TransactionGuard`).
pub enum Reservation {
    /// The key already recorded this same request: answer this without a second effect.
    Replay(RecordedResponse),
    /// A pending receipt at `version` (reserved now, or left by an earlier attempt with the
    /// same fingerprint): publish [`success_op`] for it in the resource's own transaction.
    Reserved { version: u64 },
}

/// Step 1 of the receipt protocol on its own: replay, resume or reserve. The receipt is the
/// same item [`run_create`] uses, so a key reused across routes is `IDEMPOTENCY_KEY_REUSED`
/// whichever protocol wrote it first.
pub async fn reserve(state: &AppState, req: &IdempotencyRequest) -> ApiResult<Reservation> {
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let now = state.clock.now_secs();
        let current = store.get(&req.receipt_key, Consistency::Strong).await?;
        let expired_version = current.as_ref().map(|i| i.version);
        if let Some(item) = current.filter(|i| i.expires_at.is_none_or(|t| t > now)) {
            let r: Receipt = item.json()?;
            if r.fingerprint != req.fingerprint {
                return Err(ApiError::new(
                    Code::IdempotencyKeyReused,
                    "this Idempotency-Key was used with a different request",
                ));
            }
            return Ok(match (r.state, r.response) {
                (ReceiptState::Succeeded, Some(resp)) => Reservation::Replay(resp),
                _ => Reservation::Reserved {
                    version: item.version,
                },
            });
        }
        let receipt = Receipt {
            state: ReceiptState::Pending,
            fingerprint: req.fingerprint.clone(),
            reserved_id: flotilla_domain::names::new_id(),
            created_ms: state.clock.now_ms(),
            response: None,
        };
        let condition = match expired_version {
            Some(v) => Condition::Version(v),
            None => Condition::Absent,
        };
        let op = Op::Put {
            key: req.receipt_key.clone(),
            body: super::to_body(&receipt)?,
            expires_at: Some(now + state.config.idempotency_ttl_secs),
            condition: Some(condition),
        };
        match store.transact(Transaction::new().with(op)).await {
            Ok(()) => {
                return Ok(Reservation::Reserved {
                    version: expired_version.map_or(1, |v| v + 1),
                });
            }
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            // Unknown: the re-read decides.
            Err(e) if e.is_outcome_unknown() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::unavailable(
        "idempotency receipt reservation did not converge",
    ))
}

/// Step 2: the operation that turns the pending receipt at `version` into the success receipt
/// recording `response`. It must be part of the transaction that publishes the resource; it
/// fails that transaction if another request with the key moved the receipt meanwhile.
pub fn success_op(
    state: &AppState,
    req: &IdempotencyRequest,
    version: u64,
    response: &RecordedResponse,
) -> ApiResult<Op> {
    let receipt = Receipt {
        state: ReceiptState::Succeeded,
        fingerprint: req.fingerprint.clone(),
        reserved_id: String::new(),
        created_ms: state.clock.now_ms(),
        response: Some(response.clone()),
    };
    Ok(Op::Put {
        key: req.receipt_key.clone(),
        body: super::to_body(&receipt)?,
        expires_at: Some(state.clock.now_secs() + state.config.idempotency_ttl_secs),
        condition: Some(Condition::Version(version)),
    })
}

/// After a failed publication: the recorded response when the receipt has meanwhile succeeded
/// for this same request (a concurrent request with the key won), which then decides.
pub async fn recorded_success(
    state: &AppState,
    req: &IdempotencyRequest,
) -> ApiResult<Option<RecordedResponse>> {
    succeeded(state, req).await
}
