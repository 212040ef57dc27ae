//! Resource services: the protocols behind the HTTP routes. Handlers parse and authorize;
//! services read and write the metastore.

pub mod accounts;
pub mod catalogs;
pub mod idempotency;
pub mod index_catalogs;
pub mod integrations;
pub mod namespaces;
pub mod overlays;
pub mod relations;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use flotilla_metastore::{
    Condition, Consistency, FailureReason, Item, Key, Metastore, MetastoreError, Op, PageToken,
    Query,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult, Code};

/// How many times a protocol re-reads and retries after losing a race or a retryable
/// backend failure before answering `503`/`409`.
pub const MAX_ATTEMPTS: usize = 8;

pub fn to_body<T: Serialize>(v: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| ApiError::internal(format!("encode: {e}")))
}

/// A decoded item and its storage version.
pub struct Versioned<T> {
    pub value: T,
    pub version: u64,
}

pub async fn read<T: DeserializeOwned>(
    store: &dyn Metastore,
    parts: Key,
    consistency: Consistency,
) -> ApiResult<Option<Versioned<T>>> {
    match store.get(&parts, consistency).await? {
        None => Ok(None),
        Some(item) => Ok(Some(Versioned {
            value: item.json()?,
            version: item.version,
        })),
    }
}

pub fn decode<T: DeserializeOwned>(item: &Item) -> ApiResult<T> {
    Ok(item.json()?)
}

/// Items read together in one round trip, looked up by key afterwards. A protocol that knows
/// its keys before reading (a create: the account, its fence, the parents, their delete
/// guards, the slot) fetches them with one [`fetch`] and decides from the result exactly as
/// it would from the same point reads one after another; every decision it publishes is
/// still asserted by a condition of its own transaction, so reading earlier proves nothing
/// less.
#[derive(Default)]
pub struct Reads {
    items: std::collections::HashMap<Key, Item>,
}

impl Reads {
    /// The item at `key`, when it was read and exists.
    pub fn item(&self, key: &Key) -> Option<&Item> {
        self.items.get(key)
    }

    /// Removes and answers the item at `key`.
    pub fn take(&mut self, key: &Key) -> Option<Item> {
        self.items.remove(key)
    }

    /// The decoded item at `parts`, like [`read`] on the store.
    pub fn read<T: DeserializeOwned>(&self, parts: Key) -> ApiResult<Option<Versioned<T>>> {
        match self.items.get(&parts) {
            None => Ok(None),
            Some(item) => Ok(Some(Versioned {
                value: item.json()?,
                version: item.version,
            })),
        }
    }
}

/// Strong point reads of `keys` in one round trip (`BatchGetItem` on DynamoDB, one read
/// transaction on redb). Duplicates are read once.
pub async fn fetch(store: &dyn Metastore, keys: &[Key]) -> ApiResult<Reads> {
    let mut reads = Reads::default();
    for chunk in keys.chunks(flotilla_metastore::MAX_BATCH_GET_KEYS) {
        for item in store.batch_get(chunk, Consistency::Strong).await? {
            reads.items.insert(item.key.clone(), item);
        }
    }
    Ok(reads)
}

/// Backoff before retry `attempt` (0-based): jittered, bounded.
pub async fn backoff(attempt: usize) {
    use rand::Rng;
    let base = 5u64 << attempt.min(6);
    let seeded = JITTER.with(|j| {
        j.borrow_mut()
            .as_mut()
            .map(|rng| rng.random_range(0..=base))
    });
    let jitter = seeded.unwrap_or_else(|| rand::rng().random_range(0..=base));
    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
}

thread_local! {
    /// Seeded jitter source of the calling thread, when a test installed one.
    static JITTER: std::cell::RefCell<Option<rand::rngs::StdRng>> = const { std::cell::RefCell::new(None) };
}

/// Makes retry jitter on the calling thread a function of `seed` (`None` restores OS
/// randomness). The deterministic simulation runs every request of a seed on one
/// current-thread runtime with a paused clock: jitter decides which of two racing requests
/// wakes first, so it must come from the seed for a failing seed to replay exactly.
pub fn seed_retry_jitter(seed: Option<u64>) {
    use rand::SeedableRng;
    JITTER.with(|j| *j.borrow_mut() = seed.map(rand::rngs::StdRng::seed_from_u64));
}

/// The guards every create in an account asserts in its own transaction: the account exists
/// and its deletion fence is absent, so a create racing an account delete either commits
/// before the fence (and cleanup sees it) or fails.
pub fn account_guards(account: &str) -> Vec<Op> {
    vec![
        Op::check(flotilla_domain::keys::account(account), Condition::Exists),
        Op::check(
            flotilla_domain::keys::account_fence(account),
            Condition::Absent,
        ),
    ]
}

/// The keys [`account_guard_error_from`] decides from: the fence and the account.
pub fn account_guard_keys(account: &str) -> [Key; 2] {
    [
        flotilla_domain::keys::account_fence(account),
        flotilla_domain::keys::account(account),
    ]
}

/// Explains a failed account guard, when it was one: reads the fence and the account (one
/// round trip).
pub async fn account_guard_error(
    store: &dyn Metastore,
    account: &str,
) -> ApiResult<Option<ApiError>> {
    let reads = fetch(store, &account_guard_keys(account)).await?;
    Ok(account_guard_error_from(&reads, account))
}

/// [`account_guard_error`] on items already read: a fence answers `DELETING` before a
/// missing account answers `NOT_FOUND`.
pub fn account_guard_error_from(reads: &Reads, account: &str) -> Option<ApiError> {
    let [fence, record] = account_guard_keys(account);
    if reads.item(&fence).is_some() {
        return Some(ApiError::deleting("the account"));
    }
    if reads.item(&record).is_none() {
        return Some(ApiError::not_found("account"));
    }
    None
}

/// A transient delete guard found by a writer: either live (answer `DELETING`) or abandoned
/// by a crashed deleter, in which case the writer removes it inside its own transaction.
pub enum GuardState {
    Absent,
    Live,
    Abandoned { version: u64 },
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct GuardRecord {
    pub installed_ms: i64,
    pub owner: String,
    /// A durable fence (cascade delete) never lapses; only its own protocol removes it.
    #[serde(default)]
    pub durable: bool,
}

pub async fn guard_state(
    store: &dyn Metastore,
    parts: Key,
    now_ms: i64,
    lease_ms: i64,
) -> ApiResult<GuardState> {
    let item = store.get(&parts, Consistency::Strong).await?;
    guard_state_of(item.as_ref(), now_ms, lease_ms)
}

/// The state of a guard from its item as read (absent when `None`).
pub fn guard_state_of(item: Option<&Item>, now_ms: i64, lease_ms: i64) -> ApiResult<GuardState> {
    match item {
        None => Ok(GuardState::Absent),
        Some(item) => {
            let rec: GuardRecord = item.json()?;
            if !rec.durable && now_ms.saturating_sub(rec.installed_ms) > lease_ms {
                Ok(GuardState::Abandoned {
                    version: item.version,
                })
            } else {
                Ok(GuardState::Live)
            }
        }
    }
}

/// The op a writer adds for a guard it observed: assert absence, or remove an abandoned one.
pub fn guard_op(parts: Key, state: &GuardState) -> Option<Op> {
    match state {
        GuardState::Absent => Some(Op::check(parts, Condition::Absent)),
        GuardState::Abandoned { version } => Some(Op::delete_at(parts, *version)),
        GuardState::Live => None,
    }
}

/// Changes that must name the version they were decided on (an integration's URI or
/// properties, an overlay's namespace selection): without `If-Match` they answer `428`
/// before anything is read, so a blind write cannot move what reconciliation publishes.
pub fn require_if_match(if_match: Option<&str>, what: &str) -> ApiResult<()> {
    match if_match {
        Some(v) if !v.trim().is_empty() => Ok(()),
        _ => Err(ApiError::precondition_required(what)),
    }
}

/// Checks an `If-Match` header against the resource's current etag.
pub fn check_if_match(if_match: Option<&str>, current_etag: &str) -> ApiResult<()> {
    match if_match {
        None => Ok(()),
        Some("*") => Ok(()),
        Some(given) => {
            let matches = given
                .split(',')
                .map(str::trim)
                .any(|t| t == current_etag || t.trim_start_matches("W/") == current_etag);
            if matches {
                Ok(())
            } else {
                Err(ApiError::precondition_failed())
            }
        }
    }
}

/// True when a transaction failed only because of conditions (lost a race): the caller
/// re-reads and decides again.
pub fn is_condition_failure(e: &MetastoreError) -> bool {
    matches!(e, MetastoreError::ConditionFailed { .. })
}

/// Whether operation `index` of a cancelled transaction failed.
pub fn op_failed(e: &MetastoreError, index: usize) -> bool {
    e.failure_at(index).is_some()
}

pub fn failure_is_exists(e: &MetastoreError, index: usize) -> bool {
    matches!(e.failure_at(index), Some(FailureReason::Exists { .. }))
}

// ---- pagination ------------------------------------------------------------------------

/// Default and maximum API page sizes (docs/api.md, "Pagination").
pub const DEFAULT_PAGE_SIZE: usize = 100;
pub const MAX_API_PAGE_SIZE: usize = 1000;

pub fn page_size(requested: Option<usize>) -> ApiResult<usize> {
    match requested {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(n) if (1..=MAX_API_PAGE_SIZE).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid(format!(
            "page_size must be between 1 and {MAX_API_PAGE_SIZE}"
        ))),
    }
}

/// API page tokens are bound to the listing they came from (`scope`): the partition, the
/// prefix and any filter. A token from another listing, or a forged one, is `400`.
pub fn encode_page_token(scope: &str, last_sk: &str) -> String {
    let body = serde_json::json!({"s": scope_tag(scope), "k": last_sk});
    URL_SAFE_NO_PAD.encode(body.to_string())
}

fn scope_tag(scope: &str) -> String {
    hex::encode(&Sha256::digest(scope.as_bytes())[..8])
}

pub fn decode_page_token(scope: &str, prefix: &str, token: &str) -> ApiResult<String> {
    let bad = || ApiError::invalid("malformed or foreign page_token");
    let raw = URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let s = v.get("s").and_then(Value::as_str).ok_or_else(bad)?;
    let k = v.get("k").and_then(Value::as_str).ok_or_else(bad)?;
    if s != scope_tag(scope) || !k.starts_with(prefix) {
        return Err(bad());
    }
    Ok(k.to_owned())
}

/// One API page of a prefix listing, keeping items `select` maps to `Some`.
#[allow(clippy::too_many_arguments)]
pub async fn list_page(
    store: &dyn Metastore,
    pk: &str,
    prefix: &str,
    scope: &str,
    consistency: Consistency,
    size: usize,
    token: Option<&str>,
    mut select: impl FnMut(&Item) -> ApiResult<Option<Value>>,
) -> ApiResult<(Vec<Value>, Option<String>)> {
    let scope = format!("{scope}|{pk}|{prefix}");
    let mut after = match token {
        Some(t) => Some(PageToken::after_sort_key(&decode_page_token(
            &scope, prefix, t,
        )?)),
        None => None,
    };
    let mut out = Vec::new();
    let mut last_sk: Option<String> = None;
    loop {
        let q = Query::new(pk, prefix, consistency)
            .limit((size + 1).min(flotilla_metastore::MAX_PAGE_SIZE))
            .after(after.clone());
        let page = store.query(&q).await?;
        let exhausted = page.next.is_none();
        for item in &page.items {
            if out.len() == size {
                // There is at least one more candidate: continue after the last one shown.
                let k = last_sk.clone().unwrap_or_else(|| item.key.sk.clone());
                return Ok((out, Some(encode_page_token(&scope, &k))));
            }
            last_sk = Some(item.key.sk.clone());
            if let Some(v) = select(item)? {
                out.push(v);
            }
        }
        if exhausted {
            return Ok((out, None));
        }
        after = page
            .items
            .last()
            .map(|i| PageToken::after_sort_key(&i.key.sk))
            .or(page.next);
    }
}

/// The standard `{"items": [...], "next_page_token": ...}` body.
pub fn page_body(items: Vec<Value>, next: Option<String>) -> Value {
    serde_json::json!({"items": items, "next_page_token": next})
}

/// Maps a failed guard on a parent to the error a caller should see.
pub fn not_found(what: &str) -> ApiError {
    ApiError::new(Code::NotFound, format!("{what} not found"))
}

/// Outcome of one attempt of [`guarded_delete`].
pub enum GuardedOutcome {
    Deleted,
    /// Lost a race; re-read and try again.
    Retry,
}

/// The emptiness-delete protocol shared by catalogs and namespaces.
///
/// A delete that requires emptiness cannot be one transaction (emptiness is a scan), so it
/// (1) installs a transient guard while asserting the target's version, which makes every
/// later child create fail its own guard check; (2) counts dependents with strong reads, which
/// therefore sees every child that committed before the guard; (3) deletes the target and the
/// guard in one transaction. If dependents exist the guard is removed and `refusal` answered.
/// A guard left by a crashed deleter is replaced once its lease has run out.
pub async fn guarded_delete<F, Fut>(
    state: &crate::state::AppState,
    guard: Key,
    target: Key,
    target_version: u64,
    what: &str,
    dependents: F,
    mut final_ops: Vec<Op>,
) -> ApiResult<GuardedOutcome>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ApiResult<Option<ApiError>>>,
{
    let store = state.store.as_ref();
    let now = state.clock.now_ms();
    let gstate = guard_state(store, guard.clone(), now, state.config.guard_lease_ms).await?;
    let owner = flotilla_domain::names::new_id();
    let body = to_body(&GuardRecord {
        installed_ms: now,
        owner: owner.clone(),
        durable: false,
    })?;
    let (condition, guard_version) = match gstate {
        GuardState::Live => return Err(ApiError::deleting(what)),
        GuardState::Absent => (Condition::Absent, 1),
        GuardState::Abandoned { version } => (Condition::Version(version), version + 1),
    };
    let install = Transaction::new()
        .with(Op::Put {
            key: guard.clone(),
            body,
            expires_at: None,
            condition: Some(condition),
        })
        .with(Op::check(
            target.clone(),
            Condition::Version(target_version),
        ));
    match store.transact(install).await {
        Ok(()) => {}
        Err(e) if is_condition_failure(&e) || e.is_retryable() => return Ok(GuardedOutcome::Retry),
        Err(e) if e.is_outcome_unknown() => {
            // Proceed only if the guard that is there is ours.
            let ours = match store.get(&guard, Consistency::Strong).await? {
                Some(item) => {
                    item.json::<GuardRecord>()?.owner == owner && item.version == guard_version
                }
                None => false,
            };
            if !ours {
                return Ok(GuardedOutcome::Retry);
            }
        }
        Err(e) => return Err(e.into()),
    }
    let remove_guard = || async {
        let _ = store
            .transact(Transaction::new().with(Op::delete_at(guard.clone(), guard_version)))
            .await;
    };
    match dependents().await {
        Ok(None) => {}
        Ok(Some(refusal)) => {
            remove_guard().await;
            return Err(refusal);
        }
        Err(e) => {
            remove_guard().await;
            return Err(e);
        }
    }
    final_ops.push(Op::delete_at(target.clone(), target_version));
    final_ops.push(Op::delete_at(guard.clone(), guard_version));
    match store.transact(Transaction { ops: final_ops }).await {
        Ok(()) => Ok(GuardedOutcome::Deleted),
        Err(e) if e.is_outcome_unknown() => {
            if store.get(&target, Consistency::Strong).await?.is_none() {
                return Ok(GuardedOutcome::Deleted);
            }
            remove_guard().await;
            Ok(GuardedOutcome::Retry)
        }
        Err(e) if is_condition_failure(&e) || e.is_retryable() => {
            remove_guard().await;
            Ok(GuardedOutcome::Retry)
        }
        Err(e) => Err(e.into()),
    }
}

use flotilla_metastore::Transaction;

// ---- display-name indexes ---------------------------------------------------------------

/// The operations that move resource `id` from one unique display name to another: the old
/// index entry goes and the new one is created only if absent. They ride in the same
/// transaction as the resource's own version-conditioned write, which is what makes the old
/// entry safe to delete unconditionally (it belongs to the resource being replaced).
pub fn rename_ops(old: Key, new: Key, id: &str) -> ApiResult<[Op; 2]> {
    Ok([
        Op::delete(old),
        Op::create(
            new,
            to_body(&flotilla_domain::model::NameIndexRecord { id: id.to_owned() })?,
        ),
    ])
}

/// After a rename transaction failed its conditions: `ALREADY_EXISTS` when the new name is
/// now held (strong read), `None` when the failure was something else (retry).
pub async fn name_taken(
    store: &dyn Metastore,
    new: Key,
    what: &str,
    name: &str,
) -> ApiResult<Option<ApiError>> {
    Ok(store
        .get(&new, Consistency::Strong)
        .await?
        .map(|_| ApiError::already_exists(format!("{what} named {name:?} already exists"))))
}
