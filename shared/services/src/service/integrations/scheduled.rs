//! Integrations: scheduled sweep.

use super::*;

/// Accounts one scheduled sweep pass visits at most; the next pass resumes after them.
pub const SCHEDULED_SWEEP_ACCOUNTS: usize = 16;
/// Generations younger than this are left to the operation that may still own them.
pub const SCHEDULED_SWEEP_MIN_AGE_MS: i64 = 3_600_000;
/// Where the scheduled sweep resumes: the last account a pass visited.
pub(super) const SWEEP_CURSOR_SK: &str = "SWEEPCURSOR";

/// What one scheduled sweep pass did.
#[derive(Debug, Default, serde::Serialize)]
pub struct ScheduledSweep {
    /// Accounts with integrations or generation records that were swept.
    pub accounts_swept: u64,
    /// Accounts the pass looked at (swept or skipped for holding none).
    pub accounts_visited: u64,
    pub generations_deleted: u64,
    pub orphans_deleted: u64,
    /// Accounts whose sweep failed (logged; the next round visits them again).
    pub failures: u64,
}

/// One bounded pass of the credential sweep the scheduler runs, no operator needed: resumes
/// after the account where the previous pass stopped (a cursor in the metastore), visits at
/// most `max_accounts` accounts in key order (wrapping around at the end), sweeps each that
/// holds integrations or generation records with [`sweep`] at
/// [`SCHEDULED_SWEEP_MIN_AGE_MS`], and saves where it stopped. Every account is visited
/// again within `ceil(accounts / max_accounts)` passes.
pub async fn sweep_scheduled(state: &AppState, max_accounts: usize) -> Result<ScheduledSweep> {
    let store = state.store.as_ref();
    let cursor_key = flotilla_metastore::Key::new(keys::SYSTEM_PK, SWEEP_CURSOR_SK);
    let cursor: Option<String> = store
        .get(&cursor_key, Consistency::Eventual)
        .await?
        .and_then(|i| i.json::<String>().ok());
    let accounts: Vec<String> = flotilla_metastore::query_all(
        store,
        flotilla_metastore::Query::new(
            keys::SYSTEM_PK,
            keys::ACCOUNT_LISTING_PREFIX,
            Consistency::Eventual,
        ),
    )
    .await?
    .into_iter()
    .filter_map(|i| {
        i.key
            .sk
            .strip_prefix(keys::ACCOUNT_LISTING_PREFIX)
            .map(str::to_owned)
    })
    .collect();
    let mut report = ScheduledSweep::default();
    if accounts.is_empty() || max_accounts == 0 {
        return Ok(report);
    }
    let start = cursor
        .as_deref()
        .map_or(0, |c| accounts.partition_point(|a| a.as_str() <= c));
    let mut last = None;
    for i in 0..max_accounts.min(accounts.len()) {
        let account = &accounts[(start + i) % accounts.len()];
        report.accounts_visited += 1;
        last = Some(account.clone());
        let pk = keys::account_pk(account);
        let holds = store
            .count(&pk, keys::INTEGRATION_PREFIX, Consistency::Eventual)
            .await?
            > 0
            || store
                .count(
                    &pk,
                    keys::CREDENTIAL_GENERATION_PREFIX,
                    Consistency::Eventual,
                )
                .await?
                > 0;
        if !holds {
            continue;
        }
        match sweep(state, account, SCHEDULED_SWEEP_MIN_AGE_MS).await {
            Ok(r) => {
                report.accounts_swept += 1;
                report.generations_deleted += r.generations_deleted;
                report.orphans_deleted += r.orphans_deleted;
            }
            Err(e) => {
                report.failures += 1;
                tracing::warn!(account = %account, error = %e, "scheduled credential sweep failed");
            }
        }
    }
    if let Some(last) = last {
        store
            .transact(Transaction::new().with(Op::put(cursor_key, to_body(&last)?)))
            .await?;
    }
    Ok(report)
}
