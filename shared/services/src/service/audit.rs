//! The audit trail of an account (`GET {A}/audit`): who changed what, and who was refused.
//!
//! Mutations are not stored twice: they are the change events ([`super::events`]), read
//! through the same account-wide merge as `GET {A}/events`, so the audit inherits their
//! guarantees and their limits (at most [`events::MAX_MERGED_CATALOGS`] catalogs, the
//! events' retention). Refused requests (`401`, `403`) are recorded by the HTTP layer through
//! [`record_refusal`]: one plain put after the answer is built, in no transaction, whose
//! failure is logged and never changes the answer. A flood cannot fill the store: a host
//! writes at most [`MAX_REFUSALS_PER_MINUTE`] records per account, principal and minute, and
//! beyond that replaces one summary record carrying the count.
use flotilla_domain::keys;
use flotilla_metastore::{Consistency, Metastore, Op, PageToken, Query, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::events::{self, Event, Filter, Positions, Window};
use super::{decode, to_body};
use crate::acl::{Access, Action, Securable};
use crate::error::{Error, Result};
pub use crate::refusal_limit::{
    MAX_REFUSALS_PER_MINUTE, MAX_TRACKED_PER_MINUTE, RefusalCounter, SUMMARY_EVERY, Verdict,
};
use crate::state::AppState;

/// How long refusal records are kept: 90 days (DynamoDB TTL, and a read-time filter and sweep
/// on every backend).
pub const RETENTION_SECS: i64 = super::events::AUDIT_RETENTION_SECS;
/// Refusal records younger than this are not listed yet: a record is written right after
/// its answer, so one written a little late (a slow host) is not passed over by a reader
/// that already read a later one.
pub const HORIZON_MS: i64 = 5_000;
/// Refusal records one read examines at most.
pub const MAX_SCAN_PER_READ: usize = 1000;
/// Expired refusal records one read removes at most.
pub const MAX_SWEEP_PER_READ: usize = 100;
/// Reading rounds one page runs at most while a filter leaves it short.
const MAX_ROUNDS: usize = 4;

const ANONYMOUS: &str = "anonymous";

// ---- recording refusals -----------------------------------------------------------------

/// A refused request of an account, as the HTTP layer saw it.
#[derive(Clone, Debug)]
pub struct RefusedRequest<'a> {
    pub account: &'a str,
    /// The authenticated principal; `None` for an unauthenticated request.
    pub principal: Option<&'a str>,
    pub method: &'a str,
    /// The matched route pattern (never the raw path).
    pub route: &'a str,
    pub status: u16,
    pub request_id: &'a str,
}

/// A stored refusal record, or (with `suppressed`) the summary of a minute's refusals beyond
/// the bound.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Refusal {
    pub timestamp_ms: i64,
    pub principal: String,
    pub method: String,
    pub route: String,
    pub status: u16,
    pub request_id: String,
    /// Summary only: refusals of the principal in this minute that were not recorded one by
    /// one (the last one's method, route, status and request id are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<u64>,
}

/// Records a refused request of an account: one put, in no transaction, after the answer is
/// built. Never fails: a failing write is logged, and the answer stays what it was. A refusal
/// of an account that does not exist is not recorded (a guessed account id fills nothing).
pub async fn record_refusal(state: &AppState, r: RefusedRequest<'_>) {
    if let Err(e) = try_record(state, &r).await {
        tracing::warn!(error = %e, account = r.account, route = r.route, "audit: refusal not recorded");
    }
}

async fn try_record(state: &AppState, r: &RefusedRequest<'_>) -> Result<()> {
    let principal = r.principal.unwrap_or(ANONYMOUS);
    let store = state.store.as_ref();
    if flotilla_domain::names::validate_account_id(r.account).is_err()
        || store
            .get(&keys::account(r.account), Consistency::Eventual)
            .await?
            .is_none()
    {
        return Ok(());
    }
    let now = state.clock.now_ms();
    let verdict = state.refusals.note(r.account, principal, now);
    if verdict == Verdict::Drop {
        tracing::warn!(
            account = r.account,
            principal,
            "audit: too many principals refused this minute; refusal not recorded"
        );
        return Ok(());
    }
    let (key, timestamp_ms, suppressed) = match verdict {
        // Past the bound the summary is rewritten for the first suppressed refusal and then
        // every SUMMARY_EVERY-th, so a flood costs a write per SUMMARY_EVERY refusals.
        Verdict::Summary(n) if n != 1 && n % SUMMARY_EVERY != 0 => return Ok(()),
        Verdict::Summary(n) => {
            let end = now.div_euclid(60_000) * 60_000 + 59_999;
            (keys::audit_summary(r.account, end, principal), end, Some(n))
        }
        _ => (keys::audit_refusal(r.account, now, r.request_id), now, None),
    };
    let record = Refusal {
        timestamp_ms,
        principal: principal.to_owned(),
        method: r.method.to_owned(),
        route: r.route.to_owned(),
        status: r.status,
        request_id: r.request_id.to_owned(),
        suppressed,
    };
    let expires = timestamp_ms.div_euclid(1000) + RETENTION_SECS;
    flotilla_metastore::put_one(
        store,
        Op::put(key, to_body(&record)?).with_expiry(Some(expires)),
    )
    .await?;
    Ok(())
}

// ---- listing ----------------------------------------------------------------------------

/// What an audit reader asks for.
#[derive(Clone, Debug, Default)]
pub struct AuditQuery {
    pub principal: Option<String>,
    /// Inclusive bounds, in milliseconds since the epoch.
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

impl AuditQuery {
    fn wants(&self, principal: &str, timestamp_ms: i64) -> bool {
        self.principal.as_ref().is_none_or(|p| p == principal)
            && self.from_ms.is_none_or(|f| timestamp_ms >= f)
            && self.to_ms.is_none_or(|t| timestamp_ms <= t)
    }

    fn scope(&self, account: &str) -> String {
        format!(
            "audit#{account}#{}#{:?}#{:?}",
            self.principal.as_deref().unwrap_or(""),
            self.from_ms,
            self.to_ms
        )
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Token {
    /// Event positions per catalog.
    #[serde(default)]
    e: Positions,
    /// The last refusal sort key examined.
    #[serde(default)]
    r: Option<String>,
}

fn mutation_item(e: &Event) -> Value {
    let op = &e.operation;
    json!({
        "kind": "mutation",
        "id": e.event_id,
        "timestamp_ms": e.timestamp_ms,
        "principal": e.actor.id,
        "actor_type": e.actor.kind,
        "action": op.kind,
        "securable": {
            "catalog_id": op.catalog_id,
            "namespace": op.namespace,
            "name": op.name,
            "resource": op.resource,
        },
        "request_id": e.request_id,
    })
}

fn refusal_item(sk: &str, r: &Refusal) -> Value {
    let mut v = json!({
        "kind": if r.suppressed.is_some() { "refusal-summary" } else { "refusal" },
        "id": sk.strip_prefix(keys::AUDIT_PREFIX).unwrap_or(sk),
        "timestamp_ms": r.timestamp_ms,
        "principal": r.principal,
        "method": r.method,
        "route": r.route,
        "status": r.status,
        "request_id": r.request_id,
    });
    if let Some(n) = r.suppressed {
        v["suppressed"] = json!(n);
    }
    v
}

/// The refusals a round read: each with its sort key, and the last sort key examined.
struct RefusalRun {
    records: Vec<(String, Refusal)>,
    scanned_to: Option<String>,
    taken: usize,
}

/// Reads up to `want` refusal records after `after` that the query wants, stopping at the
/// horizon. Records past the retention are skipped (and collected in `expired`).
async fn read_refusals(
    store: &dyn Metastore,
    account: &str,
    q: &AuditQuery,
    after: Option<&str>,
    want: usize,
    now_ms: i64,
) -> Result<RefusalRun> {
    let cutoff = now_ms - RETENTION_SECS * 1000;
    let horizon = now_ms - HORIZON_MS;
    let start = match (after, q.from_ms) {
        (Some(a), _) => Some(a.to_owned()),
        (None, Some(f)) => Some(keys::audit_start(f)),
        (None, None) => None,
    };
    let mut run = RefusalRun {
        records: Vec::new(),
        scanned_to: after.map(str::to_owned),
        taken: 0,
    };
    let mut token = start.as_deref().map(PageToken::after_sort_key);
    let mut scanned = 0;
    'pages: loop {
        let limit = (MAX_SCAN_PER_READ - scanned).min(flotilla_metastore::MAX_PAGE_SIZE);
        let page = store
            .query(
                &Query::new(
                    keys::account_pk(account),
                    keys::AUDIT_PREFIX,
                    Consistency::Strong,
                )
                .limit(limit)
                .after(token),
            )
            .await?;
        for item in &page.items {
            let Some(ts) = keys::parse_audit_sk(&item.key.sk) else {
                continue;
            };
            if ts > horizon || q.to_ms.is_some_and(|t| ts > t) {
                break 'pages;
            }
            scanned += 1;
            run.scanned_to = Some(item.key.sk.clone());
            if ts >= cutoff {
                let r: Refusal = decode(item)?;
                if q.wants(&r.principal, r.timestamp_ms) {
                    run.records.push((item.key.sk.clone(), r));
                }
            }
            if run.records.len() >= want || scanned >= MAX_SCAN_PER_READ {
                break 'pages;
            }
        }
        match page.next {
            Some(next) if !page.items.is_empty() => token = Some(next),
            _ => break,
        }
    }
    Ok(run)
}

/// Removes up to [`MAX_SWEEP_PER_READ`] refusal records past the retention, oldest first
/// (DynamoDB's TTL does the same, later; redb has no TTL). Best effort: a failed sweep is
/// retried by the next read.
async fn sweep(store: &dyn Metastore, account: &str, now_ms: i64) {
    let cutoff = now_ms - RETENTION_SECS * 1000;
    let Ok(page) = store
        .query(
            &Query::new(
                keys::account_pk(account),
                keys::AUDIT_PREFIX,
                Consistency::Eventual,
            )
            .limit(MAX_SWEEP_PER_READ),
        )
        .await
    else {
        return;
    };
    let ops: Vec<Op> = page
        .items
        .iter()
        .take_while(|i| keys::parse_audit_sk(&i.key.sk).is_some_and(|ts| ts < cutoff))
        .map(|i| Op::delete_at(i.key.clone(), i.version))
        .collect();
    if !ops.is_empty()
        && let Err(e) = store.transact(Transaction { ops }).await
    {
        tracing::debug!(error = %e, account, "audit: sweep deferred");
    }
}

/// `GET {A}/audit`: one page of the account's audit trail as `{items, next_page_token}`,
/// for account admins only. Each page merges the mutations (change events, each catalog in
/// its sequence order) and the refusals (in time order) by time; the token holds a position
/// in each, so resuming sees every later record exactly once.
pub async fn list(
    state: &AppState,
    access: &Access,
    q: &AuditQuery,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    // Account admins only, by the one authorization rule.
    access.authorize(Action::Administer, &Securable::Account)?;
    if let (Some(f), Some(t)) = (q.from_ms, q.to_ms)
        && f > t
    {
        return Err(Error::invalid("from is after to"));
    }
    let account = access.account.as_str();
    let scope = q.scope(account);
    let mut pos: Token = match token {
        Some(t) => {
            let raw = super::decode_page_token(&scope, "", t)?;
            serde_json::from_str(&raw).map_err(|_| Error::invalid("malformed page_token"))?
        }
        None => Token::default(),
    };
    let now = state.clock.now_ms();
    sweep(state.store.as_ref(), account, now).await;
    let filter = Filter {
        after_timestamp_ms: q.from_ms.map(|f| f - 1),
        ..Filter::default()
    };
    let mut items = Vec::with_capacity(page_size);
    for _ in 0..MAX_ROUNDS {
        let want = page_size - items.len();
        let before = (pos.e.clone(), pos.r.clone());
        let mut heads =
            events::read_account(state, access, &filter, want, &mut pos.e, Window::Audit).await?;
        for h in &mut heads {
            h.retain(|e| q.wants(&e.actor.id, e.timestamp_ms));
        }
        let mut run = read_refusals(
            state.store.as_ref(),
            account,
            q,
            pos.r.as_deref(),
            want,
            now,
        )
        .await?;
        while items.len() < page_size {
            let event_ts = events::peek_merged(&heads).map(|e| e.timestamp_ms);
            let refusal_ts = run.records.get(run.taken).map(|(_, r)| r.timestamp_ms);
            match (event_ts, refusal_ts) {
                (Some(e), Some(r)) if r < e => {
                    let (sk, rec) = &run.records[run.taken];
                    items.push(refusal_item(sk, rec));
                    run.taken += 1;
                }
                (Some(_), _) => {
                    items.extend(events::take_next(&mut heads).map(|e| mutation_item(&e)))
                }
                (None, Some(_)) => {
                    let (sk, rec) = &run.records[run.taken];
                    items.push(refusal_item(sk, rec));
                    run.taken += 1;
                }
                (None, None) => break,
            }
        }
        events::resume_positions(&heads, &mut pos.e);
        pos.r = if run.taken == run.records.len() {
            run.scanned_to
        } else if run.taken > 0 {
            Some(run.records[run.taken - 1].0.clone())
        } else {
            pos.r
        };
        if items.len() >= page_size || (pos.e == before.0 && pos.r == before.1) {
            break;
        }
    }
    let raw = serde_json::to_string(&pos).map_err(|e| Error::internal(e.to_string()))?;
    Ok(json!({
        "items": items,
        "next_page_token": super::encode_page_token(&scope, &raw),
    }))
}

/// Parses a time bound: milliseconds since the epoch, or an RFC 3339 timestamp.
pub fn parse_time(name: &str, value: &str) -> Result<i64> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc3339)
        .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
        .map_err(|_| {
            Error::invalid(format!(
                "{name} must be milliseconds since the epoch or an RFC 3339 time"
            ))
        })
}
