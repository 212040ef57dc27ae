//! Resource services: the protocols behind the HTTP routes. Handlers parse and authorize;
//! services read and write the metastore.

pub mod accounts;
pub mod catalogs;
pub mod directory;
pub mod idempotency;
pub mod index_catalogs;
pub mod integrations;
pub mod namespaces;
pub mod overlays;
pub mod relations;
pub mod schedule;

use flotilla_metastore::{Condition, Consistency, Item, Key, Metastore, Op};

use crate::error::{ApiResult, Error, ErrorKind};

/// The low-level helpers every protocol shares (retry, codecs, page tokens), re-exported so
/// `service::key`, `service::backoff` and the rest keep their paths.
pub use flotilla_base::store::*;

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
pub async fn account_guard_error(store: &dyn Metastore, account: &str) -> ApiResult<Option<Error>> {
    let reads = fetch(store, &account_guard_keys(account)).await?;
    Ok(account_guard_error_from(&reads, account))
}

/// [`account_guard_error`] on items already read: a fence answers `DELETING` before a
/// missing account answers `NOT_FOUND`.
pub fn account_guard_error_from(reads: &Reads, account: &str) -> Option<Error> {
    let [fence, record] = account_guard_keys(account);
    if reads.item(&fence).is_some() {
        return Some(Error::deleting("the account"));
    }
    if reads.item(&record).is_none() {
        return Some(Error::not_found("account"));
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
        _ => Err(Error::precondition_required(what)),
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
                Err(Error::precondition_failed())
            }
        }
    }
}

/// Maps a failed guard on a parent to the error a caller should see.
pub fn not_found(what: &str) -> Error {
    Error::new(ErrorKind::NotFound, format!("{what} not found"))
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
    Fut: std::future::Future<Output = ApiResult<Option<Error>>>,
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
        GuardState::Live => return Err(Error::deleting(what)),
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
) -> ApiResult<Option<Error>> {
    Ok(store
        .get(&new, Consistency::Strong)
        .await?
        .map(|_| Error::already_exists(format!("{what} named {name:?} already exists"))))
}
