//! Receipt-in-batch idempotency ("Durability contract").
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
//!
//! A create that ends in a *final* client error (the state it read refused it: `404`,
//! `409 ALREADY_EXISTS`, `HAS_DEPENDENTS`, ...) turns its pending receipt into a *failed*
//! receipt recording that answer, so a replay answers the same error rather than trying again
//! against a state that may have changed meanwhile. Answers that say "try again" are not
//! recorded (`503`, `409 DELETING`, commit conflicts): a replay re-runs the create.
//!
//! One implementation serves both kinds of create: [`run_create`] for creates that build
//! their own operations, and [`reserve`] / [`success_op`] / [`settle_failure`] for creates
//! whose transaction is assembled elsewhere (the index catalog service). The receipt is read
//! in the same round trip as the create's own reads ([`run_create_with`]).

use std::future::Future;

use flotilla_metastore::{Condition, Consistency, Item, Key, Op, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{MAX_ATTEMPTS, Reads, backoff, fetch};
use crate::error::{Error, ErrorKind, Result};
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
    /// The create answered a final client error, recorded in `response`.
    Failed,
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
    flotilla_domain::keys::client_key_hash(k)
}

/// Checks an `Idempotency-Key` header value.
pub fn validate_client_key(k: &str) -> Result<()> {
    if k.is_empty() || k.len() > 255 || !k.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(Error::invalid(
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
    /// [`Plan::Publish`] of a response holding a secret shown once (a service principal's
    /// client secret): the receipt records `replay`, the response without the secret, so the
    /// secret never reaches the metastore and a replay answers without it.
    PublishOnce {
        ops: Vec<Op>,
        response: RecordedResponse,
        replay: RecordedResponse,
        probe: Key,
    },
    /// Answer without writing (e.g. `on_conflict=return_existing`).
    Respond(RecordedResponse),
}

// ---- the receipt protocol ---------------------------------------------------------------

/// What the receipt says about a request, as read.
enum Found {
    /// No live receipt: reserve one, overwriting the expired one at this version if any.
    Free { expired_version: Option<u64> },
    /// The key already answered this same request: the recorded answer, success or failure.
    Answered(Result<RecordedResponse>),
    /// A pending receipt of this same request: continue it with its reserved id.
    Pending { version: u64, reserved_id: String },
}

/// Classifies the receipt item read for `req` at `now` (epoch seconds).
fn examine(req: &IdempotencyRequest, item: Option<Item>, now: i64) -> Result<Found> {
    let expired_version = item.as_ref().map(|i| i.version);
    let Some(item) = item.filter(|i| i.expires_at.is_none_or(|t| t > now)) else {
        return Ok(Found::Free { expired_version });
    };
    let r: Receipt = item.json()?;
    if r.fingerprint != req.fingerprint {
        return Err(Error::new(
            ErrorKind::IdempotencyKeyReused,
            "this Idempotency-Key was used with a different request",
        ));
    }
    Ok(match (r.state, r.response) {
        (ReceiptState::Succeeded, Some(resp)) => Found::Answered(Ok(resp)),
        (ReceiptState::Failed, Some(resp)) => Found::Answered(Err(replayed_error(&resp))),
        _ => Found::Pending {
            version: item.version,
            reserved_id: r.reserved_id,
        },
    })
}

/// Writes a pending receipt reserving `reserved_id`. `Ok(Some(version))` when reserved,
/// `Ok(None)` when the attempt must start over (a lost race, a retryable failure, or an
/// unknown outcome that the next read of the receipt settles).
async fn reserve_pending(
    state: &AppState,
    req: &IdempotencyRequest,
    expired_version: Option<u64>,
    reserved_id: &str,
    attempt: usize,
) -> Result<Option<u64>> {
    let now = state.clock.now_secs();
    let receipt = Receipt {
        state: ReceiptState::Pending,
        fingerprint: req.fingerprint.clone(),
        reserved_id: reserved_id.to_owned(),
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
    match state.store.transact(Transaction::new().with(op)).await {
        Ok(()) => Ok(Some(expired_version.map_or(1, |v| v + 1))),
        Err(e) if super::is_condition_failure(&e) || e.is_retryable() => {
            backoff(attempt).await;
            Ok(None)
        }
        Err(e) if e.is_outcome_unknown() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The operation that turns the pending receipt at `version` into the final receipt of
/// `state` recording `response`. Conditioned on the pending version, so it fails (and fails
/// its transaction) when another request with the key moved the receipt meanwhile.
fn settle_op(
    app: &AppState,
    req: &IdempotencyRequest,
    version: u64,
    reserved_id: &str,
    state: ReceiptState,
    response: &RecordedResponse,
) -> Result<Op> {
    let receipt = Receipt {
        state,
        fingerprint: req.fingerprint.clone(),
        reserved_id: reserved_id.to_owned(),
        created_ms: app.clock.now_ms(),
        response: Some(response.clone()),
    };
    Ok(Op::Put {
        key: req.receipt_key.clone(),
        body: super::to_body(&receipt)?,
        expires_at: Some(app.clock.now_secs() + app.config.idempotency_ttl_secs),
        condition: Some(Condition::Version(version)),
    })
}

/// Whether an error is the request's final answer, recorded for replays. Client errors are,
/// except those that ask the caller to try again later or that concern the key itself.
fn is_final(e: &Error) -> bool {
    !e.kind.is_server_side()
        && !matches!(
            e.kind,
            ErrorKind::Deleting
                | ErrorKind::IdempotencyKeyReused
                | ErrorKind::CommitConflict
                | ErrorKind::Conflict
                | ErrorKind::PreconditionFailed
                | ErrorKind::Unauthenticated
                | ErrorKind::PermissionDenied
        )
}

/// The response a final error answered, for its receipt: the status and body of the one HTTP
/// table (`flotilla-http-status`), so a replay answers what the first request did.
fn recorded_error(e: &Error) -> RecordedResponse {
    let (status, body) = flotilla_http_status::to_parts(e);
    RecordedResponse {
        status: status.as_u16(),
        body,
    }
}

/// The error a failed receipt recorded, answered again with the same status and body.
fn replayed_error(resp: &RecordedResponse) -> Error {
    let err = &resp.body["error"];
    let code = err["code"].as_str().and_then(ErrorKind::from_name);
    match code {
        Some(code) => {
            let mut e = Error::new(code, err["message"].as_str().unwrap_or_default());
            if let Some(details) = err["details"].as_object() {
                e.details = details.clone();
            }
            e
        }
        None => Error::internal("a failed idempotency receipt records an unknown code"),
    }
}

/// What [`settle_failure`] decided.
pub enum Settled {
    /// The receipt now records this answer (or already did): answer it.
    Answer(Result<RecordedResponse>),
    /// Another request with the key moved the receipt: read it again.
    Moved,
}

/// After a create under the pending receipt at `version` failed with `error`: the receipt
/// decides first (a concurrent request with the key may have succeeded, which then answers);
/// otherwise a final error is recorded in the receipt, and the error answered.
pub async fn settle_failure(
    state: &AppState,
    req: &IdempotencyRequest,
    version: u64,
    reserved_id: &str,
    error: Error,
) -> Result<Settled> {
    let item = state
        .store
        .get(&req.receipt_key, Consistency::Strong)
        .await?;
    match item {
        Some(item) if item.version == version => {}
        // Gone (expired and reclaimed) or moved on: the next read decides.
        _ => return Ok(Settled::Moved),
    }
    if !is_final(&error) {
        return Ok(Settled::Answer(Err(error)));
    }
    let op = settle_op(
        state,
        req,
        version,
        reserved_id,
        ReceiptState::Failed,
        &recorded_error(&error),
    )?;
    match state.store.transact(Transaction::new().with(op)).await {
        Ok(()) => Ok(Settled::Answer(Err(error))),
        Err(e) if super::is_condition_failure(&e) => Ok(Settled::Moved),
        // Not recorded this time: the error is still this attempt's answer, and a replay
        // re-runs the create against the pending receipt.
        Err(_) => Ok(Settled::Answer(Err(error))),
    }
}

/// Runs a create under the receipt protocol. `build(id)` reads current state with strong
/// reads and returns the plan for creating the resource with identity `id`; it is called
/// again after every lost race, so it must re-derive everything it decides.
pub async fn run_create<F, Fut>(
    state: &AppState,
    idem: Option<IdempotencyRequest>,
    mut build: F,
) -> Result<RecordedResponse>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<Plan>>,
{
    run_create_with(state, idem, &[], |id, _| build(id)).await
}

/// [`run_create`] whose build decides from `reads`, fetched with strong reads in the same
/// round trip as the receipt. On the happy path a create then costs one read round trip and
/// one transaction (plus the reservation when it carries an `Idempotency-Key`).
pub async fn run_create_with<F, Fut>(
    state: &AppState,
    idem: Option<IdempotencyRequest>,
    reads: &[Key],
    mut build: F,
) -> Result<RecordedResponse>
where
    F: FnMut(String, Reads) -> Fut,
    Fut: Future<Output = Result<Plan>>,
{
    let store = state.store.as_ref();
    let mut fresh_id = flotilla_domain::names::new_id();
    let mut keys = reads.to_vec();
    if let Some(req) = &idem {
        keys.push(req.receipt_key.clone());
    }
    for attempt in 0..MAX_ATTEMPTS {
        // 1. One round trip: the build's reads and the receipt.
        let mut got = fetch(store, &keys).await?;
        // 2. The receipt: replay, resume, or reserve.
        let receipt_version = match &idem {
            None => None,
            Some(req) => {
                let item = got.take(&req.receipt_key);
                match examine(req, item, state.clock.now_secs())? {
                    Found::Answered(answer) => return answer,
                    Found::Pending {
                        version,
                        reserved_id,
                    } => {
                        fresh_id = reserved_id;
                        Some(version)
                    }
                    Found::Free { expired_version } => {
                        match reserve_pending(state, req, expired_version, &fresh_id, attempt)
                            .await?
                        {
                            Some(version) => Some(version),
                            None => continue,
                        }
                    }
                }
            }
        };

        // 3. Decide and publish.
        let plan = match build(fresh_id.clone(), got).await {
            Ok(plan) => plan,
            Err(e) => {
                // A concurrent request with this key may have published between our receipt
                // read and `build`'s reads (then `build` sees "our" resource as a conflict):
                // the receipt, not the resource state, decides the answer.
                let (Some(req), Some(version)) = (&idem, receipt_version) else {
                    return Err(e);
                };
                match settle_failure(state, req, version, &fresh_id, e).await? {
                    Settled::Answer(answer) => return answer,
                    Settled::Moved => continue,
                }
            }
        };
        let (mut ops, response, replay, probe) = match plan {
            Plan::Respond(resp) => (Vec::new(), resp, None, None),
            Plan::Publish {
                ops,
                response,
                probe,
            } => (ops, response, None, Some(probe)),
            Plan::PublishOnce {
                ops,
                response,
                replay,
                probe,
            } => (ops, response, Some(replay), Some(probe)),
        };
        let receipt_index = ops.len();
        if let (Some(req), Some(v)) = (&idem, receipt_version) {
            let recorded = replay.as_ref().unwrap_or(&response);
            ops.push(success_op(state, req, v, &fresh_id, recorded)?);
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
                return Err(Error::unavailable(e.to_string()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable(
        "create did not converge after repeated conflicts",
    ))
}

async fn committed_with_id(state: &AppState, probe: &Key, id: &str) -> Result<bool> {
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
    flotilla_domain::keys::account_receipt(account, client_key)
}

/// A receipt key for operator-scoped creates.
pub fn system_receipt_key(client_key: &str) -> Key {
    flotilla_domain::keys::system_receipt(client_key)
}

// ---- receipts for protocols that build their own transaction ----------------------------

/// A pending receipt held by a create whose transaction is built elsewhere (the ParqDB index
/// catalog service, which takes extra operations through its `TransactionGuard`).
pub struct Reservation {
    /// The pending receipt's version: [`success_op`] and [`settle_failure`] are conditioned
    /// on it.
    pub version: u64,
    /// The identity reserved by the receipt.
    pub reserved_id: String,
}

/// Step 1 of the receipt protocol on its own: `Ok(Ok(_))` is the pending receipt to publish
/// [`success_op`] for; `Ok(Err(response))` replays a recorded success; `Err` is a recorded
/// failure replayed, or a key reused with a different request. The receipt is the same item [`run_create`] uses, so a key
/// reused across routes is `IDEMPOTENCY_KEY_REUSED` whichever protocol wrote it first.
pub async fn reserve(
    state: &AppState,
    req: &IdempotencyRequest,
) -> Result<Result<Reservation, RecordedResponse>> {
    let store = state.store.as_ref();
    let reserved_id = flotilla_domain::names::new_id();
    for attempt in 0..MAX_ATTEMPTS {
        let item = store.get(&req.receipt_key, Consistency::Strong).await?;
        match examine(req, item, state.clock.now_secs())? {
            Found::Answered(answer) => return answer.map(Err),
            Found::Pending {
                version,
                reserved_id,
            } => {
                return Ok(Ok(Reservation {
                    version,
                    reserved_id,
                }));
            }
            Found::Free { expired_version } => {
                if let Some(version) =
                    reserve_pending(state, req, expired_version, &reserved_id, attempt).await?
                {
                    return Ok(Ok(Reservation {
                        version,
                        reserved_id,
                    }));
                }
            }
        }
    }
    Err(Error::unavailable(
        "idempotency receipt reservation did not converge",
    ))
}

/// Step 2: the operation that turns the pending receipt into the success receipt recording
/// `response`. It must be part of the transaction that publishes the resource; it fails that
/// transaction if another request with the key moved the receipt meanwhile.
pub fn success_op(
    state: &AppState,
    req: &IdempotencyRequest,
    version: u64,
    reserved_id: &str,
    response: &RecordedResponse,
) -> Result<Op> {
    settle_op(
        state,
        req,
        version,
        reserved_id,
        ReceiptState::Succeeded,
        response,
    )
}
