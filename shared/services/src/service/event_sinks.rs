//! Webhook sinks of an account's change events (`{A}/event-sinks`, delivered by `flotilla
//! serve`; on AWS events go to EventBridge instead, and creating a sink is refused there).
//!
//! A sink is one item (`ACCT#{a}` / `EVSINK#{id}`): its URL and types filter, the positions
//! it delivered up to (one per catalog, as the account-wide events listing keeps them), and
//! its delivery state. Its signing secret lives in the credential store, never in the
//! metastore, and is never answered nor logged. A `SYSTEM` index entry, written in the same
//! transaction, lets the deliverer list every sink with one query.
//!
//! Delivery ([`Deliverer::step`]) reads the account's events after the sink's positions
//! through the same merge as `GET {A}/events` ([`events::read_account`]), as an unrestricted
//! reader, POSTs each one in order, and advances the stored positions only after a `2xx`,
//! with a write conditional on the sink item's version. So a crash between the POST and the
//! write delivers the event again (at least once, same `X-Flotilla-Event-Id`), and two hosts
//! delivering the same sink never both advance it: the loser's write fails and it re-reads.
//! A failed POST is retried after a jittered exponential backoff; after
//! [`FAILING_AFTER`] consecutive failures the sink is marked `FAILING` (shown in `GET`) and
//! retried every [`MAX_BACKOFF_MS`] at most, keeping its backlog, which the events'
//! retention bounds. A success clears the failure.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_domain::keys;
use flotilla_domain::names::validate_resource_id;
use flotilla_metastore::{Consistency, Op, Query, Transaction, query_all};
use flotilla_secrets::{SecretBytes, SecretRef};
use hmac::{Hmac, Mac};
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;

use super::events::{self, Event, Filter, Positions};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create};
use super::{Versioned, account_guard_error, account_guards, read, to_body};
use crate::acl::{Access, Action, Securable};
use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::state::AppState;

/// Sinks one account may have.
pub const MAX_SINKS_PER_ACCOUNT: u64 = 10;
/// Secret length bounds, in bytes (printable ASCII).
pub const MIN_SECRET_LEN: usize = 16;
pub const MAX_SECRET_LEN: usize = 256;
/// Longest sink URL accepted.
pub const MAX_URL_LEN: usize = 2048;
/// Consecutive failed deliveries after which a sink is `FAILING`.
pub const FAILING_AFTER: u32 = 5;
/// Backoff after the first failure; doubles with each further one, up to [`MAX_BACKOFF_MS`].
pub const BASE_BACKOFF_MS: i64 = 1_000;
/// The capped retry interval of a failing sink.
pub const MAX_BACKOFF_MS: i64 = 5 * 60_000;
/// How long one delivery attempt may take, connection and answer included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Events one step reads per sink (and catalog) at most.
pub const BATCH: usize = 50;
/// The credential generation a create tries first for a sink's secret. A retried create (an
/// idempotent replay after a crash) may take a later one; the sink records which it published
/// (a sink's secret never rotates: a new secret is a new sink).
pub const FIRST_SECRET_GENERATION: u64 = 1;

/// The headers of a delivery.
pub const SIGNATURE_HEADER: &str = "X-Flotilla-Signature";
pub const EVENT_ID_HEADER: &str = "X-Flotilla-Event-Id";
pub const TIMESTAMP_HEADER: &str = "X-Flotilla-Timestamp";
pub const SINK_ID_HEADER: &str = "X-Flotilla-Sink-Id";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSink {
    pub url: String,
    /// Write-only. Taken as any JSON value so that a malformed one is refused with a message
    /// that never quotes it (serde's type errors quote the value).
    pub secret: Value,
    #[serde(default)]
    pub types: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SinkState {
    Active,
    Failing,
}

/// Why the last delivery failed: a code (`http_status`, `timeout`, `connection`,
/// `refused_by_policy`, `secret_unavailable`, `events_unreadable`), the sink's status if it
/// answered, a bounded message of ours (never the sink's body).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryError {
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub message: String,
    pub at_ms: i64,
}

/// The stored sink (no secret: that is in the credential store).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkRecord {
    pub id: String,
    pub account_id: String,
    pub url: String,
    #[serde(default)]
    pub types: Vec<String>,
    pub create_time: String,
    /// Per catalog, the log position delivered up to (events the types filter skips
    /// included).
    #[serde(default)]
    pub positions: Positions,
    /// Events delivered (acknowledged with a `2xx`).
    #[serde(default)]
    pub delivered_count: u64,
    #[serde(default)]
    pub last_delivered_event_id: Option<String>,
    #[serde(default)]
    pub last_delivered_ms: Option<i64>,
    pub state: SinkState,
    #[serde(default)]
    pub consecutive_failures: u32,
    #[serde(default)]
    pub failing_since_ms: Option<i64>,
    #[serde(default)]
    pub last_error: Option<DeliveryError>,
    /// No delivery is attempted before this time (the backoff after a failure).
    #[serde(default)]
    pub next_attempt_ms: i64,
    /// The credential generation holding the signing secret (owner `evsink-{id}`).
    #[serde(default = "first_generation")]
    pub secret_generation: u64,
}

fn first_generation() -> u64 {
    FIRST_SECRET_GENERATION
}

impl SinkRecord {
    /// The answer: everything but the secret, which is write-only.
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.id,
            "url": self.url,
            "types": self.types,
            "create_time": self.create_time,
            "delivered": self.positions,
            "delivered_count": self.delivered_count,
            "last_delivered_event_id": self.last_delivered_event_id,
            "last_delivered_ms": self.last_delivered_ms,
            "state": self.state,
            "consecutive_failures": self.consecutive_failures,
            "failing_since_ms": self.failing_since_ms,
            "last_error": self.last_error,
            "next_attempt_ms": self.next_attempt_ms,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct SinkCount {
    count: u64,
}

// ---- validation ---------------------------------------------------------------------------

/// The secret as stored: `{"secret": "..."}`. The messages name the bounds only.
fn validate_secret(secret: &Value) -> Result<SecretBytes> {
    let Value::String(s) = secret else {
        return Err(Error::invalid("secret must be a string"));
    };
    if s.len() < MIN_SECRET_LEN || s.len() > MAX_SECRET_LEN {
        return Err(Error::invalid(format!(
            "secret must be {MIN_SECRET_LEN} to {MAX_SECRET_LEN} bytes (got {})",
            s.len()
        )));
    }
    if !s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(Error::invalid("secret must be printable ASCII"));
    }
    let mut fields = serde_json::Map::new();
    fields.insert("secret".into(), Value::String(s.clone()));
    SecretBytes::from_fields(&fields).map_err(|_| Error::invalid("secret cannot be stored"))
}

/// The sink URL under the upstream address policy: scheme, literal address, and every
/// address its name resolves to now (the connection is checked again at every delivery).
async fn validate_url(state: &AppState, url: &str) -> Result<String> {
    use flotilla_catalog_access::object_storage::{EndpointRefused, check_endpoint_resolved};
    if url.len() > MAX_URL_LEN {
        return Err(Error::invalid(format!(
            "url must be at most {MAX_URL_LEN} bytes"
        )));
    }
    let parsed = match check_endpoint_resolved(&crate::access::http_policy(state), url).await {
        Ok(u) => u,
        Err(EndpointRefused::Policy(e)) => {
            return Err(Error::invalid(format!(
                "the sink url was refused: {}",
                e.reason()
            )));
        }
        Err(EndpointRefused::Unresolved(_)) => {
            return Err(Error::invalid("the sink url's host does not resolve"));
        }
    };
    // The URL is answered back: no credentials in it (the secret is the credential).
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::invalid(
            "the sink url must not carry credentials; the secret signs each delivery",
        ));
    }
    Ok(parsed.to_string())
}

fn validate_types(types: &[String]) -> Result<Vec<String>> {
    Filter {
        types: types.to_vec(),
        ..Filter::default()
    }
    .validate()?;
    let mut t = types.to_vec();
    t.sort();
    t.dedup();
    Ok(t)
}

/// The host refuses sinks it would never deliver.
fn require_delivery(state: &AppState) -> Result<()> {
    if state.config.event_sinks {
        Ok(())
    } else {
        Err(Error::failed_precondition(
            "this host does not deliver event sinks (only `flotilla serve` does; on AWS, events \
             go to the EventBridge bus)",
        ))
    }
}

/// The canonical request body with the secret removed, for idempotency fingerprints.
pub fn fingerprint_body(canonical: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(canonical) {
        Ok(Value::Object(mut m)) => {
            if let Some(s) = m.get_mut("secret") {
                *s = Value::Null;
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        }
        _ => canonical.to_vec(),
    }
}

fn secret_ref(account: &str, sink_id: &str, generation: u64) -> Result<SecretRef> {
    SecretRef::new(account, keys::event_sink_secret_owner(sink_id), generation)
        .map_err(|e| Error::internal(e.to_string()))
}

// ---- the resource -------------------------------------------------------------------------

/// `POST {A}/event-sinks`: validates, prepares the secret (a credential generation record,
/// then the secret, as integrations do), and publishes the sink, its index entry and the
/// account's sink count in one transaction that also consumes the generation record.
pub async fn create(
    state: &AppState,
    access: &Access,
    req: CreateSink,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    access.authorize(Action::Administer, &Securable::Account)?;
    require_delivery(state)?;
    let account = access.account.as_str();
    let secret = validate_secret(&req.secret)?;
    let types = validate_types(&req.types)?;
    let url = validate_url(state, &req.url).await?;
    let store = state.store.as_ref();
    // The (sink id, generation) this request prepared, reused when `run_create` re-runs the
    // plan for the same id.
    let prepared = std::sync::Mutex::new(None::<(String, u64)>);
    let result = run_create(state, idem, |id| {
        let (secret, types, url, prepared) = (&secret, &types, &url, &prepared);
        async move {
            if let Some(err) = account_guard_error(store, account).await? {
                return Err(err);
            }
            let count_key = keys::event_sink_count(account);
            let count = read::<SinkCount>(store, count_key.clone(), Consistency::Strong).await?;
            let n = count.as_ref().map_or(0, |c| c.value.count);
            if n >= MAX_SINKS_PER_ACCOUNT {
                return Err(Error::failed_precondition(format!(
                    "the account has {MAX_SINKS_PER_ACCOUNT} event sinks, the most it may have"
                )));
            }
            let owner = keys::event_sink_secret_owner(&id);
            let reuse = prepared.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let generation = match reuse {
                Some((pid, g)) if pid == id => g,
                _ => {
                    // A generation left by an attempt that crashed (a replay resumes its id)
                    // is skipped: only bytes this request wrote are published.
                    let g = super::integrations::prepare_secret(
                        state,
                        account,
                        &owner,
                        FIRST_SECRET_GENERATION,
                        secret,
                    )
                    .await?;
                    *prepared.lock().unwrap_or_else(|p| p.into_inner()) = Some((id.clone(), g));
                    g
                }
            };
            let now = state.clock.now_ms();
            let rec = SinkRecord {
                id: id.clone(),
                account_id: account.to_owned(),
                url: url.clone(),
                types: types.clone(),
                create_time: state.clock.now_rfc3339(),
                positions: Positions::new(),
                delivered_count: 0,
                last_delivered_event_id: None,
                last_delivered_ms: None,
                state: SinkState::Active,
                consecutive_failures: 0,
                failing_since_ms: None,
                last_error: None,
                next_attempt_ms: now,
                secret_generation: generation,
            };
            let mut ops = account_guards(account);
            ops.push(super::integrations::publish_secret_op(
                account, &owner, generation,
            ));
            let count_body = to_body(&SinkCount { count: n + 1 })?;
            ops.push(match &count {
                Some(c) => Op::replace(count_key, c.version, count_body),
                None => Op::create(count_key, count_body),
            });
            ops.push(Op::create(keys::event_sink(account, &id), to_body(&rec)?));
            ops.push(Op::create(
                keys::event_sink_index(account, &id),
                to_body(&json!({}))?,
            ));
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: keys::event_sink(account, &id),
            })
        }
    })
    .await;
    let pid = prepared.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some((pid, generation)) = pid {
        let published = result
            .as_ref()
            .is_ok_and(|r| r.body.get("id").and_then(Value::as_str) == Some(pid.as_str()));
        match &result {
            Ok(_) if published => {}
            // The outcome may be unknown: the transaction may have published it. The sweep
            // decides later with the published sink in hand.
            Err(e) if e.kind == crate::error::ErrorKind::Unavailable => {}
            _ => {
                super::integrations::discard_secret(
                    state,
                    account,
                    &keys::event_sink_secret_owner(&pid),
                    generation,
                )
                .await
            }
        }
    }
    result
}

async fn load(state: &AppState, account: &str, id: &str) -> Result<Versioned<SinkRecord>> {
    validate_resource_id(id).map_err(|_| Error::not_found("event sink"))?;
    read::<SinkRecord>(
        state.store.as_ref(),
        keys::event_sink(account, id),
        Consistency::Strong,
    )
    .await?
    .ok_or_else(|| Error::not_found("event sink"))
}

/// `GET {A}/event-sinks/{id}`.
pub async fn get(state: &AppState, access: &Access, id: &str) -> Result<Value> {
    access.authorize(Action::Administer, &Securable::Account)?;
    Ok(load(state, &access.account, id).await?.value.to_api())
}

/// `GET {A}/event-sinks`: every sink of the account (at most [`MAX_SINKS_PER_ACCOUNT`]).
pub async fn list(state: &AppState, access: &Access) -> Result<Value> {
    access.authorize(Action::Administer, &Securable::Account)?;
    let items = query_all(
        state.store.as_ref(),
        Query::new(
            keys::account_pk(&access.account),
            keys::EVENT_SINK_PREFIX,
            Consistency::Strong,
        ),
    )
    .await?;
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        out.push(item.json::<SinkRecord>()?.to_api());
    }
    Ok(json!({"items": out, "next_page_token": null}))
}

/// `DELETE {A}/event-sinks/{id}`: the sink, its index entry and its place in the count go in
/// one transaction (conditional on the versions read, so a delivery advancing it meanwhile
/// makes this retry); the secret goes after.
pub async fn delete(state: &AppState, access: &Access, id: &str) -> Result<()> {
    access.authorize(Action::Administer, &Securable::Account)?;
    let account = access.account.as_str();
    let store = state.store.as_ref();
    for attempt in 0..super::MAX_ATTEMPTS {
        let sink = load(state, account, id).await?;
        let count_key = keys::event_sink_count(account);
        let count = read::<SinkCount>(store, count_key.clone(), Consistency::Strong).await?;
        let mut tx = Transaction::new()
            .with(Op::delete_at(keys::event_sink(account, id), sink.version))
            .with(Op::delete(keys::event_sink_index(account, id)));
        if let Some(c) = count {
            tx.push(Op::replace(
                count_key,
                c.version,
                to_body(&SinkCount {
                    count: c.value.count.saturating_sub(1),
                })?,
            ));
        }
        match store.transact(tx).await {
            Ok(()) => {
                if let Ok(r) = secret_ref(account, id, sink.value.secret_generation) {
                    // Best effort: the credential sweep removes a secret no sink references.
                    if let Err(e) = state.credentials.delete(&r).await {
                        tracing::warn!(account, sink = id, error = %e, "event sink secret not deleted");
                    }
                }
                return Ok(());
            }
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => {
                super::backoff(attempt).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable(
        "the event sink kept changing while being deleted; retry",
    ))
}

// ---- signing ------------------------------------------------------------------------------

/// `sha256=<hex HMAC-SHA256 of body under secret>`: the `X-Flotilla-Signature` value.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC takes keys of any length; this cannot happen.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a delivery's signature in constant time (what a receiver does).
pub fn verify_signature(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

// ---- delivery -----------------------------------------------------------------------------

/// Why a POST did not deliver.
#[derive(Clone, Debug)]
pub struct PostFailure {
    pub code: &'static str,
    pub status: Option<u16>,
    pub message: String,
}

/// How a delivery reaches a sink: the hardened upstream client in production, anything in
/// tests. One attempt, bounded by [`ATTEMPT_TIMEOUT`]; answers the status.
#[async_trait]
pub trait SinkTransport: Send + Sync {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
    ) -> std::result::Result<u16, PostFailure>;
}

/// POSTs through the upstream client under the host's address policy (every connection's
/// resolved address checked, no redirect followed, no system proxy), one attempt each.
pub struct HttpTransport {
    client: flotilla_catalog_access::http::HttpClient,
}

impl HttpTransport {
    pub fn new(state: &AppState) -> Result<Self> {
        use flotilla_catalog_access::http::{HttpClient, RetryPolicy};
        let mut policy = crate::access::http_policy(state);
        policy.retry = RetryPolicy::none();
        policy.request_timeout = ATTEMPT_TIMEOUT;
        policy.connect_timeout = policy.connect_timeout.min(ATTEMPT_TIMEOUT);
        policy.max_response_bytes = 64 * 1024;
        let client = HttpClient::new(policy).map_err(|e| Error::internal(e.to_string()))?;
        Ok(Self { client })
    }
}

#[async_trait]
impl SinkTransport for HttpTransport {
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
    ) -> std::result::Result<u16, PostFailure> {
        use flotilla_catalog_access::CatalogAccessError as E;
        use flotilla_catalog_access::http::RetryMode;
        let fail = |code: &'static str, message: String| PostFailure {
            code,
            status: None,
            message,
        };
        let url = url::Url::parse(url).map_err(|_| fail("refused_by_policy", "bad url".into()))?;
        let mut req = self
            .client
            .request(reqwest::Method::POST, url)
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req
            .body(body)
            .build()
            .map_err(|_| fail("connection", "the request could not be built".into()))?;
        match self.client.execute(req, RetryMode::Once).await {
            Ok(r) => Ok(r.status),
            Err(E::Config(m)) => Err(fail("refused_by_policy", m.to_string())),
            Err(E::Retryable { status: None, .. }) => {
                Err(fail("timeout", "the sink did not answer in time".into()))
            }
            Err(e) => Err(fail("connection", e.to_string())),
        }
    }
}

/// What one step did (for tests and logs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepReport {
    pub sinks: usize,
    pub delivered: usize,
    pub failed: usize,
    /// Position writes that lost to another writer (another host, a delete).
    pub lost_races: usize,
}

/// Delivers every due sink of the deployment, step by step: the host calls [`Deliverer::step`]
/// in a loop ([`Deliverer::run`]); tests call it directly under a manual clock.
pub struct Deliverer {
    state: AppState,
    transport: Arc<dyn SinkTransport>,
}

impl Deliverer {
    pub fn new(state: AppState, transport: Arc<dyn SinkTransport>) -> Self {
        Self { state, transport }
    }

    /// Steps every `every` until the task is dropped.
    pub async fn run(self, every: Duration) {
        loop {
            match self.step().await {
                Ok(r) if r.delivered > 0 || r.failed > 0 => {
                    tracing::debug!(delivered = r.delivered, failed = r.failed, "event sinks")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "event sink delivery step failed"),
            }
            tokio::time::sleep(every).await;
        }
    }

    /// One pass over every sink: each due sink gets its pending events (up to [`BATCH`])
    /// delivered in order, stopping at its first failure.
    pub async fn step(&self) -> Result<StepReport> {
        let store = self.state.store.as_ref();
        let index = query_all(
            store,
            Query::new(
                keys::SYSTEM_PK,
                keys::EVENT_SINK_INDEX_PREFIX,
                Consistency::Strong,
            ),
        )
        .await?;
        let mut report = StepReport::default();
        for entry in index {
            let Some((account, sink_id)) = keys::parse_event_sink_index_sk(&entry.key.sk) else {
                continue;
            };
            let sink = read::<SinkRecord>(
                store,
                keys::event_sink(&account, &sink_id),
                Consistency::Strong,
            )
            .await?;
            let Some(sink) = sink else {
                // The sink went with its account (account delete removes the partition, not
                // this index entry): drop the entry, if it is still the one read.
                let _ = store
                    .transact(Transaction::new().with(Op::delete_at(entry.key, entry.version)))
                    .await;
                continue;
            };
            report.sinks += 1;
            if let Err(e) = self.deliver(sink, &mut report).await {
                tracing::warn!(account, sink = sink_id, error = %e, "event sink delivery failed");
            }
        }
        Ok(report)
    }

    async fn deliver(
        &self,
        mut sink: Versioned<SinkRecord>,
        report: &mut StepReport,
    ) -> Result<()> {
        let state = &self.state;
        let now = state.clock.now_ms();
        if sink.value.next_attempt_ms > now {
            return Ok(());
        }
        let account = sink.value.account_id.clone();
        let secret = match state
            .credentials
            .get(&secret_ref(
                &account,
                &sink.value.id,
                sink.value.secret_generation,
            )?)
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) | Err(_) => {
                report.failed += 1;
                let failure = PostFailure {
                    code: "secret_unavailable",
                    status: None,
                    message: "the sink's secret could not be read".into(),
                };
                self.record_failure(&mut sink, failure, report).await?;
                return Ok(());
            }
        };
        let key = secret_key(&secret)?;
        let access = Access::unrestricted(
            Principal {
                subject: format!("event-sink:{}", sink.value.id),
                operator: false,
                accounts: [account.clone()].into(),
                identity: None,
            },
            &account,
        );
        let filter = Filter {
            types: sink.value.types.clone(),
            ..Filter::default()
        };
        let mut positions = sink.value.positions.clone();
        let mut heads = match events::read_account(
            state,
            &access,
            &filter,
            BATCH,
            &mut positions,
            events::Window::Feed,
        )
        .await
        {
            Ok(heads) => heads,
            // Shown on the sink (e.g. an account past the merge's catalog bound), not only
            // logged: the sink is stuck until it is fixed.
            Err(e) => {
                report.failed += 1;
                let message = match e.kind {
                    crate::error::ErrorKind::InvalidArgument => e.message,
                    _ => "the account's events could not be read".to_owned(),
                };
                let failure = PostFailure {
                    code: "events_unreadable",
                    status: None,
                    message,
                };
                self.record_failure(&mut sink, failure, report).await?;
                return Ok(());
            }
        };
        let batch = events::take_merged(&mut heads, BATCH, |_| true);
        for event in &batch {
            match self.post(&sink.value, &key, event).await {
                Ok(()) => {
                    let mut next = sink.value.clone();
                    next.positions
                        .insert(events::position_key(event).to_owned(), event.sequence);
                    next.delivered_count += 1;
                    next.last_delivered_event_id = Some(event.event_id.clone());
                    next.last_delivered_ms = Some(state.clock.now_ms());
                    clear_failure(&mut next);
                    if !self.advance(&mut sink, next, report).await? {
                        return Ok(());
                    }
                    report.delivered += 1;
                }
                Err(f) => {
                    report.failed += 1;
                    self.record_failure(&mut sink, f, report).await?;
                    return Ok(());
                }
            }
        }
        // Every event read made it: move past what the filter skipped too (positions of
        // catalogs gone are dropped), so the next read does not examine them again.
        let mut settled = sink.value.positions.clone();
        settled.retain(|c, _| heads.iter().any(|h| h.log.position_key() == c));
        events::resume_positions(&heads, &mut settled);
        if settled != sink.value.positions {
            let mut next = sink.value.clone();
            next.positions = settled;
            self.advance(&mut sink, next, report).await?;
        }
        Ok(())
    }

    async fn post(
        &self,
        sink: &SinkRecord,
        key: &[u8],
        event: &Event,
    ) -> std::result::Result<(), PostFailure> {
        let body = serde_json::to_vec(event).map_err(|_| PostFailure {
            code: "encoding",
            status: None,
            message: "the event could not be encoded".into(),
        })?;
        let headers = [
            (SIGNATURE_HEADER, signature(key, &body)),
            (EVENT_ID_HEADER, event.event_id.clone()),
            (TIMESTAMP_HEADER, self.state.clock.now_ms().to_string()),
            (SINK_ID_HEADER, sink.id.clone()),
        ];
        match self.transport.post(&sink.url, &headers, body).await? {
            s if (200..300).contains(&s) => Ok(()),
            s => Err(PostFailure {
                code: "http_status",
                status: Some(s),
                message: format!("the sink answered HTTP {s}"),
            }),
        }
    }

    /// Replaces the sink at the version read with `next`. `false`: another writer (a host
    /// delivering the same sink, a delete) moved it first; this pass stops there.
    async fn advance(
        &self,
        sink: &mut Versioned<SinkRecord>,
        next: SinkRecord,
        report: &mut StepReport,
    ) -> Result<bool> {
        let key = keys::event_sink(&next.account_id, &next.id);
        let tx = Transaction::new().with(Op::replace(key, sink.version, to_body(&next)?));
        match self.state.store.transact(tx).await {
            Ok(()) => {
                sink.version += 1;
                sink.value = next;
                Ok(true)
            }
            Err(e) if super::is_condition_failure(&e) => {
                report.lost_races += 1;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn record_failure(
        &self,
        sink: &mut Versioned<SinkRecord>,
        f: PostFailure,
        report: &mut StepReport,
    ) -> Result<()> {
        let now = self.state.clock.now_ms();
        let mut next = sink.value.clone();
        next.consecutive_failures = next.consecutive_failures.saturating_add(1);
        next.next_attempt_ms = now + backoff_ms(next.consecutive_failures);
        if next.consecutive_failures >= FAILING_AFTER {
            next.state = SinkState::Failing;
            next.failing_since_ms.get_or_insert(now);
        }
        let message: String = f.message.chars().take(300).collect();
        tracing::info!(
            account = next.account_id,
            sink = next.id,
            code = f.code,
            status = f.status,
            failures = next.consecutive_failures,
            "event sink delivery failed"
        );
        next.last_error = Some(DeliveryError {
            code: f.code.to_owned(),
            status: f.status,
            message,
            at_ms: now,
        });
        self.advance(sink, next, report).await?;
        Ok(())
    }
}

fn clear_failure(s: &mut SinkRecord) {
    s.state = SinkState::Active;
    s.consecutive_failures = 0;
    s.failing_since_ms = None;
}

/// The wait after the `n`-th consecutive failure: a random time in `[d/2, d]`, `d =
/// BASE_BACKOFF_MS * 2^(n-1)`, capped at [`MAX_BACKOFF_MS`].
pub fn backoff_ms(n: u32) -> i64 {
    let d = BASE_BACKOFF_MS
        .saturating_mul(1i64 << n.saturating_sub(1).min(30))
        .min(MAX_BACKOFF_MS);
    rand::rng().random_range(d / 2..=d)
}

fn secret_key(secret: &SecretBytes) -> Result<Vec<u8>> {
    let fields = secret
        .fields()
        .map_err(|_| Error::internal("an event sink secret is unreadable"))?;
    match fields.get("secret") {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        _ => Err(Error::internal("an event sink secret is unreadable")),
    }
}
