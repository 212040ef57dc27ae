//! Resource services: the protocols behind the HTTP routes. Handlers parse and authorize;
//! services read and write the metastore.

pub mod access_control;
pub mod accounts;
pub mod audit;
#[cfg(feature = "index-catalogs")]
pub mod captured;
pub mod catalogs;
pub mod directory;
#[cfg(feature = "upstream")]
pub mod event_sinks;
pub mod events;
pub mod idempotency;
#[cfg(feature = "index-catalogs")]
pub mod index_catalogs;
pub mod integrations;
pub mod namespaces;
pub mod overlays;
pub mod records;
pub mod relations;
pub mod schedule;

use flotilla_metastore::{Condition, Consistency, Item, Key, Metastore, Op};
use serde::Deserialize;

use crate::error::{Error, Result};

/// The low-level helpers every protocol shares (retry, codecs, page tokens, partition scans
/// and deletes), re-exported so `service::backoff`, `service::decode_page_token` and the rest
/// keep their paths.
pub use flotilla_base::store::*;

/// How a create treats an existing resource of the same name (`?on_conflict=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    #[default]
    Error,
    Replace,
    ReturnExisting,
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
pub async fn account_guard_error(store: &dyn Metastore, account: &str) -> Result<Option<Error>> {
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
) -> Result<GuardState> {
    let item = store.get(&parts, Consistency::Strong).await?;
    guard_state_of(item.as_ref(), now_ms, lease_ms)
}

/// The state of a guard from its item as read (absent when `None`).
pub fn guard_state_of(item: Option<&Item>, now_ms: i64, lease_ms: i64) -> Result<GuardState> {
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
pub fn require_if_match(if_match: Option<&str>, what: &str) -> Result<()> {
    match if_match {
        Some(v) if !v.trim().is_empty() => Ok(()),
        _ => Err(Error::precondition_required(what)),
    }
}

/// Checks an `If-Match` header against the resource's current etag.
pub fn check_if_match(if_match: Option<&str>, current_etag: &str) -> Result<()> {
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
) -> Result<GuardedOutcome>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Error>>>,
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
pub fn rename_ops(old: Key, new: Key, id: &str) -> Result<[Op; 2]> {
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
) -> Result<Option<Error>> {
    Ok(store
        .get(&new, Consistency::Strong)
        .await?
        .map(|_| Error::already_exists(format!("{what} named {name:?} already exists"))))
}

/// `DELETING` for `what` when its deletion fence is present (strong read): an update does
/// not race the delete that has begun.
pub async fn refuse_if_fenced(store: &dyn Metastore, fence: &Key, what: &str) -> Result<()> {
    match store.get(fence, Consistency::Strong).await? {
        Some(_) => Err(Error::deleting(what)),
        None => Ok(()),
    }
}

/// The name index of a resource being replaced: how its display-name keys are built, the
/// resource's noun with its article ("a catalog") and its old and new display names.
pub struct NameChange<'a> {
    pub key: fn(&str, &str) -> Key,
    pub what: &'a str,
    pub old: &'a str,
    pub new: &'a str,
}

/// Commits `tx` (a resource's version-conditioned replacement), moving its display-name index
/// entry in the same transaction when the name changed. `Ok(true)`: committed; `Ok(false)`:
/// the attempt lost a race or met a transient failure and has backed off, so the caller
/// retries; `ALREADY_EXISTS` when the new name is held by another resource.
pub async fn commit_renamable(
    store: &dyn Metastore,
    mut tx: Transaction,
    account: &str,
    id: &str,
    name: NameChange<'_>,
    attempt: usize,
) -> Result<bool> {
    let renamed = name.new != name.old;
    let new_key = (name.key)(account, name.new);
    if renamed {
        let old_key = (name.key)(account, name.old);
        for op in rename_ops(old_key, new_key.clone(), id)? {
            tx.push(op);
        }
    }
    match store.transact(tx).await {
        Ok(()) => Ok(true),
        Err(e) if is_condition_failure(&e) => {
            if renamed && let Some(taken) = name_taken(store, new_key, name.what, name.new).await? {
                return Err(taken);
            }
            backoff(attempt).await;
            Ok(false)
        }
        Err(e) if e.is_retryable() => {
            backoff(attempt).await;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}
