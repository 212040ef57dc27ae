//! Integrations: delete and the cascade.

use super::*;

/// Deletes every credential generation of an integration and their records (idempotent).
pub async fn purge_credentials(state: &AppState, account: &str, id: &str) -> Result<()> {
    // Every delete path ends here: the integration's upstream session goes first.
    #[cfg(feature = "upstream")]
    state.sessions.forget(account, id);
    for g in state
        .credentials
        .list(account, id)
        .await
        .map_err(Error::from)?
    {
        state
            .credentials
            .delete(&secret_ref(account, id, g)?)
            .await
            .map_err(Error::from)?;
    }
    let records = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        &keys::credential_generations_prefix(id),
    )
    .await?;
    delete_items(
        state.store.as_ref(),
        records.into_iter().map(|i| i.key).collect(),
    )
    .await
}

/// Whether credentials or generation records of a (deleted) integration remain.
pub(super) async fn has_leftovers(state: &AppState, account: &str, id: &str) -> Result<bool> {
    if !state
        .credentials
        .list(account, id)
        .await
        .map_err(Error::from)?
        .is_empty()
    {
        return Ok(true);
    }
    Ok(state
        .store
        .count(
            &keys::account_pk(account),
            &keys::credential_generations_prefix(id),
            Consistency::Strong,
        )
        .await?
        > 0)
}

/// Hook for overlay deletion during a cascade (the overlay module registers itself).
pub type OverlayDeleter =
    fn(&AppState, &str, &str) -> futures::future::BoxFuture<'static, Result<()>>;

/// The event of an integration's deletion (also of the identity a replace retires).
pub(super) fn deleted_event(id: &str, display_name: &str) -> Operation {
    Operation::of_resource("deleted", "integration", Some(id), Some(display_name))
}

pub async fn delete(
    state: &AppState,
    account: &str,
    id: &str,
    cascade: bool,
    if_match: Option<&str>,
) -> Result<()> {
    let store = state.store.as_ref();
    if cascade {
        return cascade_delete(state, account, id, if_match).await;
    }
    for attempt in 0..MAX_ATTEMPTS {
        let cur = match load(store, account, id).await {
            Ok(c) => c,
            Err(e) if e.kind == ErrorKind::NotFound => {
                // A delete that removed the record and stopped before its credentials were
                // gone: finish the cleanup instead of answering 404.
                if validate_resource_id(id).is_ok() && has_leftovers(state, account, id).await? {
                    purge_credentials(state, account, id).await?;
                    return Ok(());
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        // The scheduler state (no demand is left once no overlay depends) and any entry.
        let mut extra = vec![Op::delete(keys::integration_name(
            account,
            &cur.value.display_name,
        ))];
        if let Some(sched) = crate::service::schedule::load(store, account, id).await? {
            extra.push(Op::delete(keys::scheduler_state(account, id)));
            if let Some(due) = sched.value.due_ms {
                extra.push(Op::delete(keys::due_entry(account, id, due)));
            }
        }
        // The grants naming it go with it.
        extra.extend(
            state
                .grant_cascade(account, &crate::acl::Securable::integration(id))
                .await?,
        );
        record_account(
            state,
            &mut extra,
            account,
            deleted_event(id, &cur.value.display_name),
        )?;
        let outcome = guarded_delete(
            state,
            keys::integration_fence(account, id),
            keys::integration(account, id),
            cur.version,
            "the integration",
            || async {
                let deps = store
                    .count(
                        &keys::account_pk(account),
                        &keys::integration_dependency_prefix(id),
                        Consistency::Strong,
                    )
                    .await?;
                Ok((deps > 0).then(|| {
                    Error::new(
                        ErrorKind::HasDependents,
                        "overlays use this integration; delete them or use ?cascade=true",
                    )
                    .with_detail("overlays", deps)
                }))
            },
            extra,
        )
        .await?;
        match outcome {
            GuardedOutcome::Deleted => return purge_credentials(state, account, id).await,
            GuardedOutcome::Retry => backoff(attempt).await,
        }
    }
    Err(Error::unavailable("integration delete did not converge"))
}

/// Cascade: a durable integration fence (no new overlay can attach and reconciliation stops
/// publishing), each dependent overlay deleted with its contributions, then the integration
/// and its credentials. A retry after any failure resumes under the same fence.
pub(super) async fn cascade_delete(
    state: &AppState,
    account: &str,
    id: &str,
    if_match: Option<&str>,
) -> Result<()> {
    let store = state.store.as_ref();
    let fence_key = keys::integration_fence(account, id);
    let existing_fence = store.get(&fence_key.clone(), Consistency::Strong).await?;
    let durable = existing_fence
        .as_ref()
        .and_then(|i| i.json::<GuardRecord>().ok())
        .is_some_and(|g| g.durable);
    let cur =
        match read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
            .await?
        {
            Some(c) => c,
            None if durable => {
                // The record is gone: finish credential cleanup and drop the fence.
                purge_credentials(state, account, id).await?;
                store
                    .transact(Transaction::new().with(Op::delete(fence_key)))
                    .await?;
                return Ok(());
            }
            None => return Err(Error::not_found("integration")),
        };
    if !durable {
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let now = state.clock.now_ms();
        let gs = guard_state(store, fence_key.clone(), now, state.config.guard_lease_ms).await?;
        let condition = match gs {
            GuardState::Absent => Condition::Absent,
            GuardState::Abandoned { version } => Condition::Version(version),
            GuardState::Live => return Err(Error::deleting("the integration")),
        };
        let body = to_body(&GuardRecord {
            installed_ms: now,
            owner: flotilla_domain::names::new_id(),
            durable: true,
        })?;
        match store
            .transact(Transaction::new().with(Op::Put {
                key: fence_key.clone(),
                body,
                expires_at: None,
                condition: Some(condition),
            }))
            .await
        {
            Ok(()) => {}
            // Another delete got its fence in first (found by the deterministic simulation:
            // this used to answer 500). A durable fence is a cascade in progress: continue
            // under it, as overlay delete does; a transient guard is a plain delete: DELETING.
            Err(e) if crate::service::is_condition_failure(&e) => {
                let theirs = store
                    .get(&fence_key.clone(), Consistency::Strong)
                    .await?
                    .and_then(|i| i.json::<GuardRecord>().ok());
                if !theirs.is_some_and(|g| g.durable) {
                    return Err(Error::deleting("the integration"));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let deps = strong_scan(
        store,
        &keys::account_pk(account),
        &keys::integration_dependency_prefix(id),
    )
    .await?;
    for dep in deps {
        let overlay_id = dep.key.sk.rsplit('#').next().unwrap_or_default().to_owned();
        crate::service::overlays::delete_for_cascade(state, account, &overlay_id).await?;
    }
    // The record may still change under the fence (a rotation or patch that read it before
    // the fence went in): a lost race re-reads and tries again instead of failing the
    // cascade with an internal error (found by the deterministic simulation).
    let mut removed = false;
    for attempt in 0..MAX_ATTEMPTS {
        let Some(cur) =
            read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
                .await?
        else {
            removed = true;
            break;
        };
        let mut tx = Transaction::new()
            .with(Op::delete_at(keys::integration(account, id), cur.version))
            .with(Op::delete(keys::integration_name(
                account,
                &cur.value.display_name,
            )));
        // The scheduler state and its due entry go with the record (every overlay, and so
        // every demand, is gone by now).
        if let Some(sched) = crate::service::schedule::load(store, account, id).await? {
            tx.push(Op::delete_at(
                keys::scheduler_state(account, id),
                sched.version,
            ));
            if let Some(due) = sched.value.due_ms {
                tx.push(Op::delete(keys::due_entry(account, id, due)));
            }
        }
        tx.ops.extend(
            state
                .grant_cascade(account, &crate::acl::Securable::integration(id))
                .await?,
        );
        record_account(
            state,
            &mut tx.ops,
            account,
            deleted_event(id, &cur.value.display_name),
        )?;
        match store.transact(tx).await {
            Ok(()) => {
                removed = true;
                break;
            }
            Err(e) if crate::service::is_condition_failure(&e) || e.is_retryable() => {
                backoff(attempt).await
            }
            // Unknown: the next read tells whether the record is gone.
            Err(e) if e.is_outcome_unknown() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !removed {
        return Err(Error::unavailable("integration delete did not converge"));
    }
    purge_credentials(state, account, id).await?;
    store
        .transact(Transaction::new().with(Op::delete(fence_key)))
        .await?;
    Ok(())
}
