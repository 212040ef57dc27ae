//! Accounts and the account deletion fence ("Account deletion fence").
//!
//! Delete installs a durable fence in the same transaction that removes the account record,
//! then cleans up every descendant, and removes the fence last. Every create in the account
//! asserts the fence's absence (see [`super::account_guards`]), so nothing can be created
//! behind the cleanup. A delete that finds the record gone but the fence present resumes the
//! cleanup instead of reporting success.

use std::sync::Arc;

use flotilla_domain::keys;
use flotilla_domain::model::AccountRecord;
use flotilla_domain::names::{validate_account_id, validate_display_name};
use flotilla_metastore::{Condition, Consistency, Item, Op, Query, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create};
use super::{MAX_ATTEMPTS, OnConflict, backoff, check_if_match, delete_items, read, to_body};
use crate::error::{Error, Result};
use crate::service::catalogs::purge_catalog_partition;
use crate::state::{AccountCleanup, AppState};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateAccount {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
}

#[derive(Serialize)]
struct FenceRecord {
    started_ms: i64,
}

pub async fn create(
    state: &AppState,
    req: CreateAccount,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    if on_conflict == OnConflict::Replace {
        return Err(Error::invalid(
            "accounts cannot be replaced: the id is the identity",
        ));
    }
    if let Some(id) = &req.id {
        validate_account_id(id)?;
    }
    if let Some(n) = &req.display_name {
        validate_display_name(n)?;
    }
    let store = state.store.as_ref();
    run_create(state, idem, |reserved| {
        let req = &req;
        async move {
            // Caller-chosen ids are the identity; otherwise the reserved id is.
            let id = req.id.clone().unwrap_or(reserved);
            if store
                .get(&keys::account_fence(&id), Consistency::Strong)
                .await?
                .is_some()
            {
                return Err(Error::deleting("an account with this id"));
            }
            if let Some(existing) =
                read::<AccountRecord>(store, keys::account(&id), Consistency::Strong).await?
            {
                return match on_conflict {
                    OnConflict::ReturnExisting => {
                        Ok(Plan::Respond(RecordedResponse::ok(existing.value.to_api())))
                    }
                    _ => Err(Error::already_exists(format!(
                        "account {id:?} already exists"
                    ))),
                };
            }
            let now = state.clock.now_rfc3339();
            let rec = AccountRecord {
                id: id.clone(),
                display_name: req.display_name.clone(),
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            let body = to_body(&rec)?;
            let ops = vec![
                Op::create(keys::account(&id), body.clone()),
                Op::create(keys::account_listing(&id), body),
                Op::check(keys::account_fence(&id), Condition::Absent),
            ];
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: keys::account(&id),
            })
        }
    })
    .await
}

pub async fn get(state: &AppState, id: &str) -> Result<Value> {
    validate_account_id(id)?;
    match read::<AccountRecord>(state.store.as_ref(), keys::account(id), Consistency::Strong)
        .await?
    {
        Some(v) => Ok(v.value.to_api()),
        None => Err(Error::not_found("account")),
    }
}

pub async fn list(state: &AppState, page_size: usize, token: Option<&str>) -> Result<Value> {
    super::list_records(
        state.store.as_ref(),
        keys::SYSTEM_PK,
        keys::ACCOUNT_LISTING_PREFIX,
        "accounts",
        page_size,
        token,
        AccountRecord::to_api,
    )
    .await
}

/// Deletes an account: fence + record removal in one transaction, then resumable cleanup.
pub async fn delete(
    state: &AppState,
    id: &str,
    if_match: Option<&str>,
    cleanups: &[Arc<dyn AccountCleanup>],
) -> Result<()> {
    validate_account_id(id)?;
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let fence = store
            .get(&keys::account_fence(id), Consistency::Strong)
            .await?;
        let account = read::<AccountRecord>(store, keys::account(id), Consistency::Strong).await?;
        match (account, fence) {
            (None, None) => return Err(Error::not_found("account")),
            // A previous delete committed and then stopped part-way: resume.
            (None, Some(_)) => break,
            (Some(acct), fence) => {
                check_if_match(
                    if_match,
                    &flotilla_domain::model::etag_for(&acct.value.id, acct.value.revision),
                )?;
                let mut tx = Transaction::new();
                if fence.is_none() {
                    tx.push(Op::create(
                        keys::account_fence(id),
                        to_body(&FenceRecord {
                            started_ms: state.clock.now_ms(),
                        })?,
                    ));
                }
                tx.push(Op::delete_at(keys::account(id), acct.version));
                match store.transact(tx).await {
                    Ok(()) => break,
                    Err(e) if super::is_condition_failure(&e) || e.is_retryable() => {
                        backoff(attempt).await;
                        continue;
                    }
                    // Unknown: the next read tells whether the record is gone.
                    Err(e) if e.is_outcome_unknown() => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    if store
        .get(&keys::account(id), Consistency::Strong)
        .await?
        .is_some()
    {
        return Err(Error::unavailable("account delete did not converge"));
    }
    cleanup(state, id, cleanups).await
}

/// Removes every descendant of a fenced account, then the listing entry and the fence.
/// Idempotent: a retry after any failure continues where it stopped.
async fn cleanup(state: &AppState, id: &str, cleanups: &[Arc<dyn AccountCleanup>]) -> Result<()> {
    let store = state.store.as_ref();
    let pk = keys::account_pk(id);
    let fence_sk = keys::account_fence(id).sk;
    loop {
        let page = store
            .query(&Query::new(pk.clone(), "", Consistency::Strong).limit(100))
            .await?;
        let victims: Vec<Item> = page
            .items
            .into_iter()
            .filter(|i| i.key.sk != fence_sk)
            .collect();
        if victims.is_empty() {
            break;
        }
        for item in &victims {
            if let Some(catalog_id) = item.key.sk.strip_prefix(keys::CATALOG_PREFIX) {
                // The account is fenced: its catalogs go, captured state objects with them.
                #[cfg(feature = "index-catalogs")]
                if let Some(op) = super::captured::sweep_op(state, &item.json()?).await? {
                    store.transact(Transaction::new().with(op)).await?;
                }
                purge_catalog_partition(store, catalog_id).await?;
                #[cfg(feature = "index-catalogs")]
                super::captured::sweep(state, catalog_id).await?;
            }
            if let Some(integration_id) = item.key.sk.strip_prefix(keys::INTEGRATION_PREFIX) {
                crate::service::integrations::purge_credentials(state, id, integration_id).await?;
            }
            // Index catalogs live in partitions of their own, which only their record names.
            // Hosts without the feature serve no account delete (only the api function does).
            #[cfg(feature = "index-catalogs")]
            super::index_catalogs::cleanup_account_item(store, id, item).await?;
            for c in cleanups {
                c.cleanup_item(id, item).await?;
            }
        }
        delete_items(store, victims.iter().map(|i| i.key.clone()).collect()).await?;
    }
    // Credentials whose integration record an earlier attempt already removed.
    let orphans = state
        .credentials
        .list_account(id)
        .await
        .map_err(|e| Error::unavailable(e.to_string()))?;
    for r in orphans {
        state
            .credentials
            .delete(&r)
            .await
            .map_err(|e| Error::unavailable(e.to_string()))?;
    }
    let tx = Transaction::new()
        .with(Op::delete(keys::account_listing(id)))
        .with(Op::delete(keys::account_fence(id)));
    store.transact(tx).await?;
    Ok(())
}

/// Whether an account exists and is not being deleted (strong reads).
pub async fn require_live_account(state: &AppState, id: &str) -> Result<()> {
    if let Some(err) = super::account_guard_error(state.store.as_ref(), id).await? {
        return Err(err);
    }
    Ok(())
}
