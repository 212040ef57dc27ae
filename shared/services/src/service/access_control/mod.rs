//! The resources of access control (`docs/access-control.md`): service principals
//! (`principals`), roles and their members (`roles`), grants and the explain route
//! (`grants`).
//!
//! Every write here follows one protocol: read the account's view
//! (`state.acl.current`, one strong point read when nothing changed), decide from it, and
//! commit the change together with the replacement of the grants generation at the version
//! the decision was made on, so concurrent access-control writes of an account serialize and
//! every host sees the change on its next request. Creates also carry the idempotency receipt
//! and the account guards (the account exists and is not being deleted).

pub mod grants;
pub mod principals;
pub mod roles;

use std::sync::Arc;

use flotilla_metastore::{Op, Transaction};
use serde_json::Value;

use super::events::{Operation, record_account};
use super::{MAX_ATTEMPTS, backoff, is_condition_failure};
use crate::acl::AclView;
use crate::error::{Error, Result};
use crate::state::AppState;

/// Roles per account.
pub const MAX_ROLES: usize = 500;
/// Grants per account.
pub const MAX_GRANTS: usize = 5000;
/// Grants per role: a role's deletion removes them with it in one transaction.
pub const MAX_GRANTS_PER_ROLE: usize = 40;
/// Members per role (a group counts as one): removed with the role in one transaction.
pub const MAX_MEMBERS_PER_ROLE: usize = 50;
/// Roles one member belongs to: a service principal's deletion removes its memberships in
/// one transaction.
pub const MAX_ROLES_PER_MEMBER: usize = 50;
/// Grants naming one securable: removed with it in its deletion's transaction.
pub const MAX_GRANTS_PER_SECURABLE: usize = 32;
/// Service principals per account.
pub const MAX_SERVICE_PRINCIPALS: usize = 500;

/// What one attempt of an access-control write decided from the view.
pub(crate) enum Step<T> {
    /// Commit these operations (the generation bump is added) and answer `T`.
    Commit(Vec<Op>, T),
    /// Nothing to write (the state already is what was asked): answer `T`.
    Done(T),
}

/// What a delete answers when its object is not in the view: done after an attempt whose
/// outcome was unknown (that attempt removed it), else `absent`.
pub(crate) fn gone(after_unknown: bool, absent: Error) -> Result<Step<()>> {
    if after_unknown {
        Ok(Step::Done(()))
    } else {
        Err(absent)
    }
}

/// Runs an access-control write: `decide(view, after_unknown)` reads the current view and
/// answers the operations; they commit with the generation bump at the view's version, or the
/// attempt starts over from a fresh view. `after_unknown` is set once an earlier attempt's
/// outcome was unknown, so `decide` may treat "already done" as success.
pub(crate) async fn write<T>(
    state: &AppState,
    account: &str,
    mut decide: impl FnMut(&Arc<AclView>, bool) -> Result<Step<T>>,
) -> Result<T> {
    let store = state.store.as_ref();
    let mut after_unknown = false;
    for attempt in 0..MAX_ATTEMPTS {
        let view = state.acl.current(store, account).await?;
        let (mut ops, answer) = match decide(&view, after_unknown)? {
            Step::Done(answer) => return Ok(answer),
            Step::Commit(ops, answer) => (ops, answer),
        };
        ops.push(view.generation().bump_op(account)?);
        match store.transact(Transaction { ops }).await {
            Ok(()) => return Ok(answer),
            Err(e) if is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            Err(e) if e.is_outcome_unknown() => after_unknown = true,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable(
        "the account's access control changed concurrently; retry",
    ))
}

/// One page of `items` (already in listing order, each with its sort key) after `token`.
pub(crate) fn page(
    scope: &str,
    items: Vec<(String, Value)>,
    size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let after = match token {
        Some(t) => Some(super::decode_page_token(scope, "", t)?),
        None => None,
    };
    let mut rest = items
        .into_iter()
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k > a))
        .peekable();
    let mut out = Vec::new();
    let mut last = None;
    while out.len() < size {
        match rest.next() {
            Some((k, v)) => {
                last = Some(k);
                out.push(v);
            }
            None => break,
        }
    }
    let next = match (rest.peek(), last) {
        (Some(_), Some(k)) => Some(super::encode_page_token(scope, &k)),
        _ => None,
    };
    Ok(super::page_body(out, next))
}
