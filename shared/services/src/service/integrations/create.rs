//! Integrations: create.

use super::*;

/// Installs (or finds, on a re-run of the same create) the transient delete guard of the
/// integration a `replace` retires, then proves no overlay depends on it. Overlay creates
/// assert that guard's absence, so none can attach between the count and the replacing
/// transaction (which deletes the guard). Answers the guard's version.
pub(super) async fn guard_for_replace(
    state: &AppState,
    account: &str,
    old: &Versioned<IntegrationRecord>,
    owner: &str,
) -> Result<u64> {
    let store = state.store.as_ref();
    let guard = keys::integration_fence(account, &old.value.id);
    let now = state.clock.now_ms();
    let existing = store.get(&guard.clone(), Consistency::Strong).await?;
    let mut installed = None;
    let condition = match &existing {
        None => Condition::Absent,
        Some(item) => {
            let g: GuardRecord = item.json()?;
            if g.owner == owner && !g.durable {
                installed = Some(item.version);
                Condition::Version(item.version)
            } else if !g.durable && now.saturating_sub(g.installed_ms) > state.config.guard_lease_ms
            {
                Condition::Version(item.version)
            } else {
                return Err(Error::deleting("the integration being replaced"));
            }
        }
    };
    let version = match installed {
        Some(v) => v,
        None => {
            let next = match condition {
                Condition::Version(v) => v + 1,
                _ => 1,
            };
            let body = to_body(&GuardRecord {
                installed_ms: now,
                owner: owner.to_owned(),
                durable: false,
            })?;
            let tx = Transaction::new()
                .with(Op::Put {
                    key: guard.clone(),
                    body,
                    expires_at: None,
                    condition: Some(condition),
                })
                .with(Op::check(
                    keys::integration(account, &old.value.id),
                    Condition::Version(old.version),
                ));
            match store.transact(tx).await {
                Ok(()) => next,
                Err(e) if crate::service::is_condition_failure(&e) => {
                    return Err(Error::new(
                        ErrorKind::CommitConflict,
                        "the integration being replaced changed; retry",
                    ));
                }
                Err(e) if e.is_outcome_unknown() => {
                    match store.get(&guard.clone(), Consistency::Strong).await? {
                        Some(item) if item.json::<GuardRecord>()?.owner == owner => item.version,
                        _ => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let deps = store
        .count(
            &keys::account_pk(account),
            &keys::integration_dependency_prefix(&old.value.id),
            Consistency::Strong,
        )
        .await?;
    if deps > 0 {
        let _ = store
            .transact(Transaction::new().with(Op::delete_at(guard, version)))
            .await;
        return Err(Error::new(
            ErrorKind::HasDependents,
            "overlays depend on the integration being replaced; replacement must not retarget them",
        )
        .with_detail("overlays", deps));
    }
    Ok(version)
}

pub async fn create(
    state: &AppState,
    account: &str,
    req: CreateIntegration,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_display_name(&req.display_name)?;
    validate_auth_for_type(state, req.kind, &req.authentication)?;
    validate_connection(state, &req.uri, &req.properties)?;
    validate_signing(&req.authentication, &req.properties)?;
    let secret = validate_credentials(&req.authentication, &req.credentials)?;
    let store = state.store.as_ref();
    // The generation this request prepared (integration id, generation), reused when
    // `run_create` re-runs the plan for the same id, and the replace guard it installed.
    let prepared = std::sync::Mutex::new(None::<(String, u64)>);
    let replace_guard = std::sync::Mutex::new(None::<(String, u64)>);
    let lock = |m: &std::sync::Mutex<Option<(String, u64)>>| {
        m.lock().unwrap_or_else(|p| p.into_inner()).clone()
    };
    let result = run_create(state, idem, |id| {
        let (req, secret, prepared, replace_guard) = (&req, &secret, &prepared, &replace_guard);
        async move {
            if let Some(err) = account_guard_error(store, account).await? {
                return Err(err);
            }
            let name_key = keys::integration_name(account, &req.display_name);
            let existing =
                read::<NameIndexRecord>(store, name_key.clone(), Consistency::Strong).await?;
            let mut ops = account_guards(account);
            let mut replaced: Option<Versioned<IntegrationRecord>> = None;
            if let Some(idx) = existing {
                let old = load(store, account, &idx.value.id).await?;
                match on_conflict {
                    OnConflict::Error => {
                        return Err(Error::already_exists(format!(
                            "an integration named {:?} already exists",
                            req.display_name
                        )));
                    }
                    OnConflict::ReturnExisting => {
                        return Ok(Plan::Respond(RecordedResponse::ok(old.value.to_api())));
                    }
                    OnConflict::Replace => {
                        let guard_version = guard_for_replace(state, account, &old, &id).await?;
                        *replace_guard.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((old.value.id.clone(), guard_version));
                        ops.push(Op::delete_at(
                            keys::integration_fence(account, &old.value.id),
                            guard_version,
                        ));
                        ops.push(Op::delete_at(
                            keys::integration(account, &old.value.id),
                            old.version,
                        ));
                        // The retired identity's grants go with it.
                        ops.extend(
                            state
                                .grant_cascade(
                                    account,
                                    &crate::acl::Securable::integration(&old.value.id),
                                )
                                .await?,
                        );
                        ops.push(Op::replace(
                            name_key.clone(),
                            idx.version,
                            to_body(&NameIndexRecord { id: id.clone() })?,
                        ));
                        replaced = Some(old);
                    }
                }
            }
            if replaced.is_none() {
                ops.push(Op::create(
                    name_key,
                    to_body(&NameIndexRecord { id: id.clone() })?,
                ));
            }
            let mut generation = 0;
            if let Some(secret) = secret {
                let reuse = match lock(prepared) {
                    Some((pid, g)) if pid == id && still_owned(state, account, &id, g).await? => {
                        Some(g)
                    }
                    Some((pid, g)) => {
                        discard_unpublished(state, account, &pid, g).await;
                        None
                    }
                    None => None,
                };
                generation = match reuse {
                    Some(g) => g,
                    None => {
                        *prepared.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        let g = prepare_generation(state, account, &id, 1, secret).await?;
                        *prepared.lock().unwrap_or_else(|p| p.into_inner()) = Some((id.clone(), g));
                        g
                    }
                };
                ops.push(publish_record_op(account, &id, generation));
            }
            if let Some(old) = &replaced {
                // Every generation of the replaced identity is retired after publication.
                let gens = state
                    .credentials
                    .list(account, &old.value.id)
                    .await
                    .map_err(Error::from)?;
                ops.extend(retiring_ops(state, account, &old.value.id, &gens)?);
            }
            let now = state.clock.now_rfc3339();
            let rec = IntegrationRecord {
                id: id.clone(),
                account_id: account.to_owned(),
                display_name: req.display_name.clone(),
                kind: req.kind,
                uri: req.uri.clone(),
                properties: req.properties.clone(),
                authentication: req.authentication.clone(),
                credentials_configured: generation > 0,
                credential_generation: generation,
                generation: 1,
                paused: false,
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            ops.push(Op::create(keys::integration(account, &id), to_body(&rec)?));
            if let Some(old) = &replaced {
                record_account(
                    state,
                    &mut ops,
                    account,
                    deleted_event(&old.value.id, &old.value.display_name),
                )?;
            }
            record_account(
                state,
                &mut ops,
                account,
                Operation::of_resource(
                    "created",
                    "integration",
                    Some(&id),
                    Some(&rec.display_name),
                )
                .with_details(serde_json::json!({ "type": rec.kind })),
            )?;
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: keys::integration(account, &id),
            })
        }
    })
    .await;
    if let Some((pid, g)) = lock(&prepared) {
        let published = result.as_ref().is_ok_and(|resp| {
            resp.body.get("id").and_then(Value::as_str) == Some(pid.as_str())
                && resp
                    .body
                    .get("credential_generation")
                    .and_then(Value::as_u64)
                    == Some(g)
        });
        match (&result, &secret) {
            (Ok(_), Some(secret)) if published => {
                verify_published_secret(state, account, &pid, g, secret).await
            }
            // The outcome may be unknown: the CAS may have published it. Keep it; the sweep
            // decides later with the published record in hand.
            (Err(e), _) if e.kind == ErrorKind::Unavailable => {}
            _ => discard_unpublished(state, account, &pid, g).await,
        }
    }
    if let (Err(_), Some((old, version))) = (&result, lock(&replace_guard)) {
        // A replace that did not commit releases its guard (one that did deleted it).
        let _ = store
            .transact(Transaction::new().with(Op::delete_at(
                keys::integration_fence(account, &old),
                version,
            )))
            .await;
    }
    if let Ok(resp) = &result {
        // A replace retires the old identity's credentials after publication.
        if resp.status == 201 && on_conflict == OnConflict::Replace {
            sweep_retiring(state, account).await;
        }
    }
    result
}

/// Discards a prepared generation unless a published integration references it.
pub(super) async fn discard_unpublished(
    state: &AppState,
    account: &str,
    id: &str,
    generation: u64,
) {
    let published = read::<IntegrationRecord>(
        state.store.as_ref(),
        keys::integration(account, id),
        Consistency::Strong,
    )
    .await
    .ok()
    .flatten()
    .is_some_and(|r| r.value.credential_generation == generation);
    if !published {
        discard_prepared(state, account, id, generation).await;
    }
}

/// Finishes `retiring` records (best effort; the sweep does the same later).
pub(super) async fn sweep_retiring(state: &AppState, account: &str) {
    let Ok(items) = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        keys::CREDENTIAL_GENERATION_PREFIX,
    )
    .await
    else {
        return;
    };
    for item in items {
        if let Ok(rec) = item.json::<CredentialGenerationRecord>()
            && rec.state == "retiring"
        {
            retire_generation(state, account, &rec.integration_id, rec.generation).await;
        }
    }
}
