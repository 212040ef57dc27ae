//! Integrations: sweep.

use super::*;

/// What `sweep-credentials` did.
#[derive(Debug, Default, serde::Serialize)]
pub struct SweepReport {
    pub records_examined: u64,
    pub generations_deleted: u64,
    pub records_cleared: u64,
    pub orphans_deleted: u64,
}

/// Reclaims retained credential generations of one account (`flotilla admin
/// sweep-credentials`, `POST /v1/admin/sweep-credentials`).
///
/// For each generation record older than `min_age_ms` it first *claims* the record by
/// bumping its version: the operation that prepared it publishes only while the record is at
/// the version it created, so after the claim that generation can never be published. Only
/// then does it read the integration, strongly, and delete the secret unless the integration
/// references it. Secrets no record explains are deleted unless referenced: every in-flight
/// operation writes its record before its secret, so an unrecorded generation is never one
/// that is about to be published.
pub async fn sweep(state: &AppState, account: &str, min_age_ms: i64) -> Result<SweepReport> {
    let store = state.store.as_ref();
    let mut report = SweepReport::default();
    let now = state.clock.now_ms();
    let records = strong_scan(
        store,
        &keys::account_pk(account),
        keys::CREDENTIAL_GENERATION_PREFIX,
    )
    .await?;
    for item in records {
        report.records_examined += 1;
        let rec: CredentialGenerationRecord = item.json()?;
        if now.saturating_sub(rec.created_ms) < min_age_ms {
            continue;
        }
        let claimed = CredentialGenerationRecord {
            state: "sweeping".into(),
            ..rec.clone()
        };
        match store
            .transact(Transaction::new().with(Op::replace(
                item.key.clone(),
                item.version,
                to_body(&claimed)?,
            )))
            .await
        {
            Ok(()) => {}
            // Published, discarded or claimed meanwhile: nothing to do here.
            Err(e) if crate::service::is_condition_failure(&e) => continue,
            Err(e) => return Err(e.into()),
        }
        if !referenced(state, account, &rec.integration_id, rec.generation).await? {
            state
                .credentials
                .delete(&secret_ref(account, &rec.integration_id, rec.generation)?)
                .await
                .map_err(Error::from)?;
            report.generations_deleted += 1;
        }
        store
            .transact(Transaction::new().with(Op::delete_at(item.key.clone(), item.version + 1)))
            .await
            .ok();
        report.records_cleared += 1;
    }
    for r in state
        .credentials
        .list_account(account)
        .await
        .map_err(Error::from)?
    {
        let recorded = store
            .get(
                &keys::credential_generation(account, &r.integration_id, r.credential_generation),
                Consistency::Strong,
            )
            .await?
            .is_some();
        if recorded {
            continue;
        }
        if !referenced(state, account, &r.integration_id, r.credential_generation).await? {
            state.credentials.delete(&r).await.map_err(Error::from)?;
            report.orphans_deleted += 1;
        }
    }
    Ok(report)
}

/// Whether the generation `generation` of `owner` is published (strong reads): an
/// integration's when its record references it, an event sink's (`service::event_sinks` keeps
/// each sink's signing secret under the owner `evsink-{id}`) while that sink names it.
async fn referenced(state: &AppState, account: &str, owner: &str, generation: u64) -> Result<bool> {
    let store = state.store.as_ref();
    if let Some(sink_id) = owner.strip_prefix(keys::EVENT_SINK_SECRET_PREFIX) {
        #[derive(serde::Deserialize)]
        struct SinkSecret {
            #[serde(default = "first")]
            secret_generation: u64,
        }
        fn first() -> u64 {
            1
        }
        let sink = read::<SinkSecret>(
            store,
            keys::event_sink(account, sink_id),
            Consistency::Strong,
        )
        .await?;
        return Ok(sink.is_some_and(|s| s.value.secret_generation == generation));
    }
    let current = read::<IntegrationRecord>(
        store,
        keys::integration(account, owner),
        Consistency::Strong,
    )
    .await?;
    Ok(current.is_some_and(|c| {
        c.value.credentials_configured && c.value.credential_generation == generation
    }))
}
