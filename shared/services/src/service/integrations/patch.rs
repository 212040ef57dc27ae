//! Integrations: update and rotation.

use super::*;

pub async fn patch(
    state: &AppState,
    account: &str,
    id: &str,
    req: PatchIntegration,
    if_match: Option<&str>,
) -> Result<Value> {
    if req.kind.is_some() {
        return Err(Error::invalid(
            "type is immutable; create with on_conflict=replace to change it",
        ));
    }
    if req.authentication.is_some() || req.credentials.is_some() {
        return Err(Error::invalid(
            "authentication and credentials change through PUT .../authentication",
        ));
    }
    if let Some(n) = &req.display_name {
        validate_display_name(n)?;
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load_for_update(store, account, id, if_match).await?;
        let mut next = cur.value.clone();
        if let Some(n) = &req.display_name {
            next.display_name = n.clone();
        }
        if let Some(u) = &req.uri {
            next.uri = u.clone();
        }
        if let Some(p) = &req.properties {
            next.properties = p.clone();
        }
        if let Some(p) = req.paused {
            next.paused = p;
        }
        if req.uri.is_some() || req.properties.is_some() {
            validate_connection(state, &next.uri, &next.properties)?;
            validate_signing(&next.authentication, &next.properties)?;
            if next.uri != cur.value.uri || next.properties != cur.value.properties {
                crate::service::require_if_match(
                    if_match,
                    "changing an integration's uri or properties",
                )?;
            }
        }
        let fences_work = next.uri != cur.value.uri
            || next.properties != cur.value.properties
            || next.paused != cur.value.paused;
        if fences_work {
            next.generation += 1;
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::integration(account, id),
            cur.version,
            to_body(&next)?,
        ));
        // The plan: a new connection or a resume needs a run; a pause stops all new work.
        let reconnects = next.uri != cur.value.uri || next.properties != cur.value.properties;
        let resumed = cur.value.paused && !next.paused;
        let paused = next.paused;
        tx.ops.extend(
            crate::service::schedule::update_ops(store, account, id, state.clock.now_ms(), |s| {
                s.integration_paused = paused;
                crate::service::schedule::Effect {
                    bump: fences_work,
                    run_now: !paused && (reconnects || resumed),
                }
            })
            .await?,
        );
        let fields = [
            ("display_name", next.display_name != cur.value.display_name),
            ("uri", next.uri != cur.value.uri),
            ("properties", next.properties != cur.value.properties),
            ("paused", next.paused != cur.value.paused),
        ];
        record_account(
            state,
            &mut tx.ops,
            account,
            Operation::resource_update(
                "integration",
                id,
                &next.display_name,
                (cur.value.paused, next.paused),
                &fields,
            ),
        )?;
        let name = crate::service::NameChange {
            key: keys::integration_name,
            what: "an integration",
            old: &cur.value.display_name,
            new: &next.display_name,
        };
        if crate::service::commit_renamable(store, tx, account, id, name, attempt).await? {
            return Ok(next.to_api());
        }
    }
    Err(Error::unavailable("integration update did not converge"))
}

/// The integration as it stands, for an update: its etag must match `if_match` and it must
/// not be being deleted (its fence absent).
async fn load_for_update(
    store: &dyn Metastore,
    account: &str,
    id: &str,
    if_match: Option<&str>,
) -> Result<Versioned<IntegrationRecord>> {
    let cur = load(store, account, id).await?;
    check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
    let fence = keys::integration_fence(account, id);
    crate::service::refuse_if_fenced(store, &fence, "the integration").await?;
    Ok(cur)
}

/// `PUT .../authentication`: new authentication configuration and/or credentials, published
/// as a new credential generation (see the module documentation for the protocol).
pub async fn rotate(
    state: &AppState,
    account: &str,
    id: &str,
    req: RotateAuthentication,
    if_match: Option<&str>,
) -> Result<Value> {
    if req.authentication.is_none() && req.credentials.is_none() {
        return Err(Error::invalid("give authentication, credentials, or both"));
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load_for_update(store, account, id, if_match).await?;
        let auth = req
            .authentication
            .clone()
            .unwrap_or_else(|| cur.value.authentication.clone());
        validate_auth_for_type(state, cur.value.kind, &auth)?;
        validate_signing(&auth, &cur.value.properties)?;
        let secret = validate_credentials(&auth, &req.credentials)?;
        let new_generation = match &secret {
            Some(s) => Some(
                prepare_generation(state, account, id, cur.value.credential_generation + 1, s)
                    .await?,
            ),
            None => None,
        };
        let old_generation = cur.value.credential_generation;
        let mut next = cur.value.clone();
        next.authentication = auth;
        next.credential_generation = new_generation.unwrap_or(0);
        next.credentials_configured = new_generation.is_some();
        next.generation += 1;
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::integration(account, id),
            cur.version,
            to_body(&next)?,
        ));
        if let Some(g) = new_generation {
            tx.push(publish_record_op(account, id, g));
        }
        // New credentials fence the older plan and need a run.
        let paused = next.paused;
        tx.ops.extend(
            crate::service::schedule::update_ops(store, account, id, state.clock.now_ms(), |_| {
                crate::service::schedule::Effect {
                    bump: true,
                    run_now: !paused,
                }
            })
            .await?,
        );
        if old_generation > 0 {
            tx.ops
                .extend(retiring_ops(state, account, id, &[old_generation])?);
        }
        record_account(
            state,
            &mut tx.ops,
            account,
            Operation::of_resource(
                "credentials-rotated",
                "integration",
                Some(id),
                Some(&next.display_name),
            )
            .with_details(
                serde_json::json!({ "credential_generation": next.credential_generation }),
            ),
        )?;
        match store.transact(tx).await {
            Ok(()) => {
                if let (Some(g), Some(s)) = (new_generation, &secret) {
                    verify_published_secret(state, account, id, g, s).await;
                }
                retire_generation(state, account, id, old_generation).await;
                return Ok(next.to_api());
            }
            // The CAS may have published the new generation: keep it (the sweep decides).
            Err(e) if e.is_outcome_unknown() => return Err(e.into()),
            Err(e) if crate::service::is_condition_failure(&e) || e.is_retryable() => {
                if let Some(g) = new_generation {
                    discard_prepared(state, account, id, g).await;
                }
                backoff(attempt).await;
            }
            Err(e) => {
                if let Some(g) = new_generation {
                    discard_prepared(state, account, id, g).await;
                }
                return Err(e.into());
            }
        }
    }
    Err(Error::unavailable("rotation did not converge"))
}
