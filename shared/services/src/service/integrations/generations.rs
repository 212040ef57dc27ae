//! Integrations: credential generations.

use super::*;

/// How many generation numbers one prepare tries. A taken number makes the next attempt jump
/// past every generation a record or stored secret holds ([`next_candidate`]), so leftovers
/// awaiting the sweep cost one attempt in all; only concurrent writers can use up the rest.
pub(super) const GENERATION_ATTEMPTS: u32 = 64;

/// The version of a generation record created from absence. The operation that created it
/// owns it: publication asserts the record at exactly this version, so a sweep that claims
/// the record (bumping its version) makes that publication fail definitely.
pub(super) const RECORD_VERSION: u64 = 1;

/// The op a publishing transaction carries for the generation it publishes: the record must
/// still be the one this operation created (not claimed by a sweep), and it goes.
pub(crate) fn publish_record_op(account: &str, integration: &str, generation: u64) -> Op {
    Op::delete_at(
        keys::credential_generation(account, integration, generation),
        RECORD_VERSION,
    )
}

/// Steps 1 and 2: create the durable record (put-if-absent: whoever creates it owns the
/// generation), then reserve the secret with put-if-absent. Answers the generation reserved.
pub(crate) async fn prepare_generation(
    state: &AppState,
    account: &str,
    integration: &str,
    first: u64,
    secret: &SecretBytes,
) -> Result<u64> {
    let store = state.store.as_ref();
    let mut generation = first;
    for attempt in 0..GENERATION_ATTEMPTS {
        if attempt > 0 {
            generation = next_candidate(state, account, integration, generation).await;
        }
        let rec = CredentialGenerationRecord {
            integration_id: integration.to_owned(),
            generation,
            state: "prepared".into(),
            created_ms: state.clock.now_ms(),
        };
        let create = Transaction::new().with(Op::create(
            keys::credential_generation(account, integration, generation),
            to_body(&rec)?,
        ));
        match store.transact(create).await {
            Ok(()) => {}
            // Another writer, or a leftover awaiting the sweep, holds this generation.
            Err(e) if crate::service::is_condition_failure(&e) => continue,
            // Perhaps ours, perhaps not: never guess; the sweep reclaims it if it is ours.
            Err(e) if e.is_outcome_unknown() => continue,
            Err(e) => return Err(e.into()),
        }
        let r = secret_ref(account, integration, generation)?;
        match state.credentials.put_if_absent(&r, secret).await {
            Ok(PutOutcome::Created) => return Ok(generation),
            // A stray secret without a record (e.g. a sweep stopped half-way). Bytes this
            // operation did not write are never published; the record we hold lets the sweep
            // reclaim the stray.
            Ok(PutOutcome::AlreadyExists { .. }) => continue,
            Err(e) => {
                if !e.is_outcome_unknown() {
                    // Definitely nothing stored: release the record.
                    let _ = store
                        .transact(Transaction::new().with(Op::delete_at(
                            keys::credential_generation(account, integration, generation),
                            RECORD_VERSION,
                        )))
                        .await;
                }
                return Err(Error::from(e));
            }
        }
    }
    Err(Error::unavailable(
        "no free credential generation after repeated concurrent rotations; retry",
    ))
}

/// The next generation to try after `taken` was taken: past every generation a record or a
/// stored secret of the integration holds (best effort: a failed listing only skips one).
pub(super) async fn next_candidate(
    state: &AppState,
    account: &str,
    integration: &str,
    taken: u64,
) -> u64 {
    let mut next = taken.saturating_add(1);
    if let Ok(items) = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        &keys::credential_generations_prefix(integration),
    )
    .await
    {
        for item in items {
            if let Ok(rec) = item.json::<CredentialGenerationRecord>() {
                next = next.max(rec.generation.saturating_add(1));
            }
        }
    }
    if let Ok(stored) = state.credentials.list(account, integration).await {
        for g in stored {
            next = next.max(g.saturating_add(1));
        }
    }
    next
}

/// Whether this operation still owns the record of `generation` (no sweep claimed it).
pub(super) async fn still_owned(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
) -> Result<bool> {
    Ok(state
        .store
        .get(
            &keys::credential_generation(account, integration, generation),
            Consistency::Strong,
        )
        .await?
        .is_some_and(|i| i.version == RECORD_VERSION))
}

/// After a definite publication failure: the prepared secret goes, then its record. Safe
/// because nobody else can publish a generation whose record this operation holds; if a
/// sweep claimed the record meanwhile, the sweep finishes the job.
pub(crate) async fn discard_prepared(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
) {
    if let Ok(r) = secret_ref(account, integration, generation)
        && state.credentials.delete(&r).await.is_ok()
    {
        let _ = state
            .store
            .transact(Transaction::new().with(Op::delete_at(
                keys::credential_generation(account, integration, generation),
                RECORD_VERSION,
            )))
            .await;
    }
}

/// After publication: a last check that the referenced generation is there (the protocol
/// guarantees it; this restores the invariant should anything outside the protocol have
/// removed it). Best effort: the publication already succeeded.
pub(super) async fn verify_published_secret(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
    secret: &SecretBytes,
) {
    let Ok(r) = secret_ref(account, integration, generation) else {
        return;
    };
    if let Ok(None) = state.credentials.get(&r).await {
        tracing::warn!(
            account,
            integration,
            generation,
            "published credential generation was missing; restoring it"
        );
        let _ = state.credentials.put_if_absent(&r, secret).await;
    }
}

/// Step 4: delete a superseded generation and its `retiring` record. Best effort: what is
/// left behind stays recorded for the sweep.
pub(super) async fn retire_generation(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
) {
    if generation == 0 {
        return;
    }
    if let Ok(r) = secret_ref(account, integration, generation)
        && state.credentials.delete(&r).await.is_ok()
    {
        let _ = state
            .store
            .transact(
                Transaction::new().with(Op::delete(keys::credential_generation(
                    account,
                    integration,
                    generation,
                ))),
            )
            .await;
    }
}

/// A `retiring` record for each stored generation of `integration` (for replace).
pub(super) fn retiring_ops(
    state: &AppState,
    account: &str,
    integration: &str,
    generations: &[u64],
) -> Result<Vec<Op>> {
    generations
        .iter()
        .map(|g| {
            let rec = CredentialGenerationRecord {
                integration_id: integration.to_owned(),
                generation: *g,
                state: "retiring".into(),
                created_ms: state.clock.now_ms(),
            };
            Ok(Op::put(
                keys::credential_generation(account, integration, *g),
                to_body(&rec)?,
            ))
        })
        .collect()
}
