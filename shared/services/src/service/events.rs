//! Change events: every change to a catalog's namespaces, tables and views writes one event
//! item in the same metastore transaction as the change (a transactional outbox), so there
//! is never a change without its event nor an event without its change.
//!
//! Ordering (see `docs/events.md`). Writers never share an item: each event is created
//! pending under its own key (`EVQ#{timestamp}#{event id}`) in the catalog partition, so
//! concurrent commits on different tables do not meet on a counter. Readers *seal*: one
//! transaction moves up to [`SEAL_BATCH`] pending events to the dense log (`EVT#{sequence}`)
//! while replacing the log head (the next sequence) at the version it read, and deletes each
//! pending item at the version it read. A log position is therefore assigned exactly once,
//! only to an event that has committed, and never before a position already handed out: a
//! reader resuming after sequence `n` sees every event sealed later exactly once, however
//! late its writer committed. Only sealers ever contend on the head: the readers and, on
//! AWS, the `events` function, which seals a log when the table's stream shows a pending
//! event of it ([`EventLog::of_partition`] names the log) and pushes each sealed entry to
//! EventBridge.

use std::future::Future;
use std::sync::{Arc, Mutex};

use flotilla_domain::keys;
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::{NamespacePath, new_id};
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Query, Transaction};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{MAX_ATTEMPTS, backoff, decode, is_condition_failure, to_body};
use crate::acl::{Access, Action, Securable};
use crate::error::{Error, Result};
use crate::state::AppState;

/// Pending events one seal moves: two operations each (delete pending, create in the log)
/// and the head, within one transaction's 100 operations.
pub const SEAL_BATCH: usize = 49;
/// Seal transactions one read runs at most before it answers from the log as sealed so far
/// (a backlog left over is sealed by the next read; nothing is skipped).
pub const MAX_SEALS_PER_READ: usize = 8;
/// Log items one read examines at most (events the reader may not see or does not want
/// included): the page then ends early, with a token after the last one examined.
pub const MAX_SCAN_PER_READ: usize = 1000;
/// Expired log entries one read removes at most (on both backends: log entries carry no TTL).
pub const MAX_SWEEP_PER_READ: usize = 100;
/// Update summaries kept per `update-table` event (the rest are counted in `truncated`).
pub const MAX_UPDATES_PER_EVENT: usize = 100;

/// The Iceberg event operation types Flotilla writes.
pub const OPERATION_TYPES: &[&str] = &[
    "create-table",
    "register-table",
    "update-table",
    "rename-table",
    "drop-table",
    "create-namespace",
    "update-namespace-properties",
    "drop-namespace",
    "create-view",
    "replace-view",
    "rename-view",
    "drop-view",
];

// ---- who is changing things -------------------------------------------------------------

tokio::task_local! {
    static CONTEXT: Arc<RequestContext>;
}

/// The request a change is made for: its id and, once authenticated, its principal. The
/// HTTP layer runs each request in [`scope`]; the authenticating extractor records the
/// principal ([`record_principal`]). Work outside any request (workers) is `SYSTEM`.
#[derive(Debug)]
pub struct RequestContext {
    request_id: String,
    principal: Mutex<Option<String>>,
}

/// Runs `f` as the request `request_id`.
pub async fn scope<F: Future>(request_id: String, f: F) -> F::Output {
    scope_observed(request_id, f).await.0
}

/// [`scope`], also answering the principal the request authenticated as, if it did (what
/// the audit of a refused request names).
pub async fn scope_observed<F: Future>(request_id: String, f: F) -> (F::Output, Option<String>) {
    let ctx = Arc::new(RequestContext {
        request_id,
        principal: Mutex::new(None),
    });
    let out = CONTEXT.scope(ctx.clone(), f).await;
    let principal = ctx.principal.lock().ok().and_then(|p| p.clone());
    (out, principal)
}

/// Names the principal of the current request (a no-op outside [`scope`]).
pub fn record_principal(subject: &str) {
    let _ = CONTEXT.try_with(|c| {
        if let Ok(mut p) = c.principal.lock() {
            *p = Some(subject.to_owned());
        }
    });
}

fn current() -> (String, Actor) {
    CONTEXT
        .try_with(|c| {
            let principal = c.principal.lock().ok().and_then(|p| p.clone());
            let actor = match principal {
                Some(id) => Actor {
                    kind: ActorKind::Principal,
                    id,
                },
                None => Actor::system(),
            };
            (c.request_id.clone(), actor)
        })
        .unwrap_or_else(|_| (new_id(), Actor::system()))
}

// ---- the event --------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActorKind {
    Principal,
    Overlay,
    System,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    #[serde(rename = "type")]
    pub kind: ActorKind,
    pub id: String,
}

impl Actor {
    /// An overlay publishing or retiring what it mirrors.
    pub fn overlay(id: &str) -> Self {
        Actor {
            kind: ActorKind::Overlay,
            id: id.to_owned(),
        }
    }

    fn system() -> Self {
        Actor {
            kind: ActorKind::System,
            id: "flotilla".into(),
        }
    }
}

/// A namespace and name (the destination of a rename).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectName {
    pub namespace: Vec<String>,
    pub name: String,
}

/// What changed. `namespace` is the object's namespace (a namespace event names the
/// namespace itself there); `name` is the table or view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    #[serde(rename = "type")]
    pub kind: String,
    pub catalog_id: String,
    pub namespace: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_location: Option<String>,
    /// The commit's update actions, summarized (`update-table`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updates: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<ObjectName>,
}

impl Operation {
    pub fn namespace(kind: &str, catalog_id: &str, path: &NamespacePath) -> Self {
        Operation {
            kind: kind.to_owned(),
            catalog_id: catalog_id.to_owned(),
            namespace: path.segments().to_vec(),
            name: None,
            metadata_location: None,
            updates: None,
            destination: None,
        }
    }

    pub fn relation(kind: &str, catalog_id: &str, ns: &NamespacePath, name: &str) -> Self {
        Operation {
            name: Some(name.to_owned()),
            ..Operation::namespace(kind, catalog_id, ns)
        }
    }

    pub fn with_metadata_location(mut self, location: Option<&str>) -> Self {
        self.metadata_location = location.map(str::to_owned);
        self
    }

    /// The object type the operation is about (`namespace`, `table`, `view`).
    pub fn object_type(&self) -> &'static str {
        if self.kind.ends_with("namespace") || self.kind.ends_with("namespace-properties") {
            "namespace"
        } else if self.kind.ends_with("view") {
            "view"
        } else {
            "table"
        }
    }
}

/// The operation type of a relation change.
pub fn relation_type(verb: &str, kind: RelationKind) -> String {
    match kind {
        RelationKind::Table => format!("{verb}-table"),
        RelationKind::View => format!("{verb}-view"),
    }
}

/// One change event as stored and answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: String,
    /// The account the change was made in. It travels with the event because the catalog
    /// partition does not name its account, and a consumer of the pushed events (the
    /// `events` function: EventBridge) reads nothing but the event. Absent on events written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The event's place in its catalog's log; 0 while pending.
    #[serde(default)]
    pub sequence: u64,
    pub timestamp_ms: i64,
    pub request_id: String,
    pub actor: Actor,
    pub operation: Operation,
}

/// Summarizes Iceberg update actions: each keeps its `action` and the ids that say what it
/// did (snapshot, schema, spec, sort order, ref), set-properties and remove-properties the
/// keys only. At most [`MAX_UPDATES_PER_EVENT`]; the rest are counted.
pub fn summarize_updates(updates: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for u in updates.iter().take(MAX_UPDATES_PER_EVENT) {
        let mut s = serde_json::Map::new();
        let action = u.get("action").cloned().unwrap_or(Value::Null);
        s.insert("action".into(), action);
        let pick = |s: &mut serde_json::Map<String, Value>, key: &str, v: Option<&Value>| {
            if let Some(v) = v.filter(|v| v.is_number() || v.is_string()) {
                s.insert(key.into(), v.clone());
            }
        };
        pick(&mut s, "snapshot-id", u.pointer("/snapshot/snapshot-id"));
        pick(&mut s, "snapshot-id", u.get("snapshot-id"));
        pick(&mut s, "schema-id", u.pointer("/schema/schema-id"));
        pick(&mut s, "schema-id", u.get("schema-id"));
        pick(&mut s, "spec-id", u.get("spec-id"));
        pick(&mut s, "sort-order-id", u.get("sort-order-id"));
        pick(&mut s, "ref-name", u.get("ref-name"));
        pick(&mut s, "format-version", u.get("format-version"));
        if let Some(Value::Object(m)) = u.get("updates") {
            s.insert("keys".into(), json!(m.keys().collect::<Vec<_>>()));
        }
        if let Some(Value::Array(r)) = u.get("removals") {
            s.insert("keys".into(), Value::Array(r.clone()));
        }
        out.push(Value::Object(s));
    }
    if updates.len() > MAX_UPDATES_PER_EVENT {
        out.push(json!({"truncated": updates.len() - MAX_UPDATES_PER_EVENT}));
    }
    out
}

// ---- writing ----------------------------------------------------------------------------

/// The operation that records `operation` of `account` in the transaction making the
/// change: one new pending item (created only if absent), expiring after the retention.
/// `None` when the host turned events off.
pub fn event_op(state: &AppState, account: &str, operation: Operation) -> Result<Option<Op>> {
    event_op_by(state, account, None, operation)
}

/// [`event_op`] for a change made by someone other than the request's principal (an
/// overlay's reconciliation): `actor` replaces the request's.
pub fn event_op_by(
    state: &AppState,
    account: &str,
    actor: Option<Actor>,
    operation: Operation,
) -> Result<Option<Op>> {
    if !state.config.events {
        return Ok(None);
    }
    let (request_id, request_actor) = current();
    let actor = actor.unwrap_or(request_actor);
    let now = state.clock.now_ms();
    let event = Event {
        event_id: new_id(),
        account_id: Some(account.to_owned()),
        sequence: 0,
        timestamp_ms: now,
        request_id,
        actor,
        operation,
    };
    let key = keys::event_pending(&event.operation.catalog_id, now, &event.event_id);
    let expires = now.div_euclid(1000) + state.config.event_retention_secs;
    Ok(Some(
        Op::create(key, to_body(&event)?).with_expiry(Some(expires)),
    ))
}

/// Pushes the event of `operation` of `account` onto `tx` (nothing when events are off).
pub fn record(
    state: &AppState,
    account: &str,
    tx: &mut Transaction,
    operation: Operation,
) -> Result<()> {
    if let Some(op) = event_op(state, account, operation)? {
        tx.push(op);
    }
    Ok(())
}

/// [`record`] for a list of operations being built.
pub fn record_into(
    state: &AppState,
    account: &str,
    ops: &mut Vec<Op>,
    operation: Operation,
) -> Result<()> {
    if let Some(op) = event_op(state, account, operation)? {
        ops.push(op);
    }
    Ok(())
}

// ---- sealing ----------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct Head {
    /// The next sequence a seal assigns.
    next: u64,
    /// The lowest sequence not swept: every log entry below it was removed as expired, so a
    /// reader knows a missing entry at or above it is one not visible *yet*.
    #[serde(default = "one")]
    first: u64,
}

fn one() -> u64 {
    1
}

async fn read_head(store: &dyn Metastore, catalog_id: &str) -> Result<Option<(Head, u64)>> {
    read_head_at(store, &keys::event_head(catalog_id)).await
}

async fn read_head_at(store: &dyn Metastore, head: &keys::Key) -> Result<Option<(Head, u64)>> {
    match store.get(head, Consistency::Strong).await? {
        Some(item) => Ok(Some((decode::<Head>(&item)?, item.version))),
        None => Ok(None),
    }
}

/// One event log: a partition whose pending events (`EVQ#…`) a seal moves into its dense
/// log (`EVT#…`) under its head. Every log keeps those sort keys in its own partition, so
/// what differs between kinds of log is only the partition and the builders of its keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventLog {
    /// A catalog's log, in the catalog partition (`CAT#{catalog_id}`).
    Catalog(String),
}

impl EventLog {
    /// The log whose pending items and entries live in partition `pk`; `None` for a partition
    /// that holds no event log. The one mapping from a partition to its log: the push path
    /// (a stream record names only its item's key) asks here which log to seal, so a new
    /// kind of log is one more arm here and in the key builders below.
    pub fn of_partition(pk: &str) -> Option<EventLog> {
        keys::parse_catalog_pk(pk).map(|c| EventLog::Catalog(c.to_owned()))
    }

    fn pk(&self) -> String {
        match self {
            EventLog::Catalog(c) => keys::catalog_pk(c),
        }
    }

    fn head(&self) -> keys::Key {
        match self {
            EventLog::Catalog(c) => keys::event_head(c),
        }
    }

    fn entry(&self, sequence: u64) -> keys::Key {
        match self {
            EventLog::Catalog(c) => keys::event_log(c, sequence),
        }
    }
}

/// Whether a seal left the log's pending events drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sealed {
    /// No pending event was left when the seal last looked.
    Drained,
    /// The round bound was reached with pending events left (a larger backlog, or writers
    /// still committing): the next seal goes on from there.
    More,
}

/// Moves the catalog's pending events into its log, oldest first, until none are pending
/// or [`MAX_SEALS_PER_READ`] seals committed (this reader's or concurrent readers'). Each
/// seal is conditional on the head and on every pending item it moves, so two sealers never
/// give one event two places nor one place two events: the loser re-reads and seals what is
/// left. A lost race is progress (the winner sealed), so concurrent readers never starve
/// one another.
pub async fn seal(store: &dyn Metastore, catalog_id: &str) -> Result<()> {
    seal_log(
        store,
        &EventLog::Catalog(catalog_id.to_owned()),
        MAX_SEALS_PER_READ,
    )
    .await
    .map(|_| ())
}

/// [`seal`] for any event log, committing at most `max_rounds` seals (this caller's or
/// concurrent ones'); answers whether the pending events were drained.
pub async fn seal_log(store: &dyn Metastore, log: &EventLog, max_rounds: usize) -> Result<Sealed> {
    let head_key = log.head();
    // Rounds: seals that committed, this caller's or a concurrent one's.
    let mut rounds = 0;
    let mut failures = 0;
    while rounds < max_rounds {
        let head = read_head_at(store, &head_key).await?;
        let pending = store
            .query(
                &Query::new(log.pk(), keys::EVENT_PENDING_PREFIX, Consistency::Strong)
                    .limit(SEAL_BATCH),
            )
            .await?;
        if pending.items.is_empty() {
            return Ok(Sealed::Drained);
        }
        let (next, first, head_condition) = match &head {
            Some((h, version)) => (h.next, h.first, Condition::Version(*version)),
            None => (1, 1, Condition::Absent),
        };
        let mut tx = Transaction::new();
        let mut seq = next;
        for item in &pending.items {
            let mut event: Event = decode(item)?;
            event.sequence = seq;
            tx.push(Op::delete_at(item.key.clone(), item.version));
            // No TTL in the log: readers remove expired entries themselves, moving the
            // head's `first` with them, so that no entry ever vanishes unannounced.
            tx.push(Op::create(log.entry(seq), to_body(&event)?));
            seq += 1;
        }
        tx.push(Op::Put {
            key: head_key.clone(),
            body: to_body(&Head { next: seq, first })?,
            expires_at: None,
            condition: Some(head_condition),
        });
        match store.transact(tx).await {
            Ok(()) => {
                rounds += 1;
                if pending.next.is_none() {
                    return Ok(Sealed::Drained);
                }
            }
            // A failed condition means another sealer sealed meanwhile (the head or a
            // pending item moved): progress all the same. Re-read and go on from there.
            Err(e) if is_condition_failure(&e) => rounds += 1,
            // The store was busy, or the seal may have applied: re-read, after a pause.
            Err(e) if e.is_retryable() || e.is_outcome_unknown() => {
                failures += 1;
                if failures >= MAX_ATTEMPTS {
                    return Err(Error::unavailable("sealing the event log did not converge"));
                }
                backoff(failures).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Sealed::More)
}

/// Removes expired events from the start of the log and moves the head's `first` past them,
/// in one transaction (a lost race with another reader's seal or sweep removes nothing).
async fn sweep(store: &dyn Metastore, catalog_id: &str, cutoff_ms: i64) -> Result<()> {
    let Some((head, version)) = read_head(store, catalog_id).await? else {
        return Ok(());
    };
    let page = store
        .query(
            &Query::new(
                keys::catalog_pk(catalog_id),
                keys::EVENT_LOG_PREFIX,
                Consistency::Strong,
            )
            .limit(MAX_SWEEP_PER_READ),
        )
        .await?;
    let mut ops = Vec::new();
    let mut first = head.first;
    for item in &page.items {
        let event: Event = decode(item)?;
        if event.timestamp_ms > cutoff_ms {
            break;
        }
        ops.push(Op::delete_at(item.key.clone(), item.version));
        first = first.max(event.sequence + 1);
    }
    if ops.is_empty() {
        return Ok(());
    }
    ops.push(Op::replace(
        keys::event_head(catalog_id),
        version,
        to_body(&Head {
            next: head.next,
            first,
        })?,
    ));
    match store.transact(Transaction { ops }).await {
        Ok(()) => Ok(()),
        Err(e) if is_condition_failure(&e) || e.is_retryable() || e.is_outcome_unknown() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

// ---- reading ----------------------------------------------------------------------------

/// Which events a reader wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Operation types; empty: all.
    pub types: Vec<String>,
    /// Only events after this time.
    pub after_timestamp_ms: Option<i64>,
    /// Object types (`namespace`, `table`, `view`); empty: all.
    pub object_types: Vec<String>,
    /// Objects by name: a namespace's levels, or a table's or view's namespace levels and
    /// name. An object matches the events about it and, for a namespace, about everything
    /// inside it (either end of a rename). Empty: all.
    pub objects: Vec<Vec<String>>,
}

impl Filter {
    /// Refuses unknown operation and object types.
    pub fn validate(&self) -> Result<()> {
        for t in &self.types {
            if !OPERATION_TYPES.contains(&t.as_str()) && !t.starts_with("x-flotilla-") {
                return Err(Error::invalid(format!("unknown event type {t:?}")));
            }
        }
        if self.objects.iter().any(Vec::is_empty) {
            return Err(Error::invalid("an object name needs at least one level"));
        }
        for t in &self.object_types {
            if !["namespace", "table", "view"].contains(&t.as_str()) {
                return Err(Error::invalid(format!(
                    "unknown object type {t:?} (namespace, table or view)"
                )));
            }
        }
        Ok(())
    }

    fn wants(&self, e: &Event) -> bool {
        let op = &e.operation;
        (self.types.is_empty() || self.types.contains(&op.kind))
            && self.after_timestamp_ms.is_none_or(|t| e.timestamp_ms > t)
            && (self.object_types.is_empty()
                || self.object_types.iter().any(|t| t == op.object_type()))
            && (self.objects.is_empty()
                || self.objects.iter().any(|o| {
                    let within = |ns: &[String], name: Option<&String>| {
                        let mut path = ns.to_vec();
                        path.extend(name.cloned());
                        path.starts_with(o)
                    };
                    within(&op.namespace, op.name.as_ref())
                        || op
                            .destination
                            .as_ref()
                            .is_some_and(|d| within(&d.namespace, Some(&d.name)))
                }))
    }
}

/// Whether the reader may read the object an event is about (both ends of a rename): no
/// event reveals an object the reader may not read.
fn readable(access: &Access, e: &Event) -> bool {
    let op = &e.operation;
    let Ok(ns) = NamespacePath::new(op.namespace.clone()) else {
        return false;
    };
    let kind = match op.object_type() {
        "namespace" => {
            return access.allows(Action::Read, &Securable::namespace(&op.catalog_id, &ns));
        }
        "view" => RelationKind::View,
        _ => RelationKind::Table,
    };
    let Some(name) = &op.name else {
        return false;
    };
    let source = Securable::relation(&op.catalog_id, &ns, name, kind);
    let destination = match &op.destination {
        None => true,
        Some(d) => NamespacePath::new(d.namespace.clone()).is_ok_and(|dns| {
            access.allows(
                Action::Read,
                &Securable::relation(&op.catalog_id, &dns, &d.name, kind),
            )
        }),
    };
    destination && access.allows(Action::Read, &source)
}

/// One page of a catalog's events after log position `after` (0: from the start).
pub struct EventPage {
    pub events: Vec<Event>,
    /// The position to resume from: the last log item examined (or `after` when none was).
    pub position: u64,
}

/// Reads the events of `catalog_id` after position `after` that the reader may read and
/// `filter` wants, up to `page_size`. Seals pending events first, so an event whose writer
/// committed before this read started is in the answer or after its position.
pub async fn read(
    state: &AppState,
    access: &Access,
    catalog_id: &str,
    filter: &Filter,
    after: u64,
    page_size: usize,
) -> Result<EventPage> {
    let store = state.store.as_ref();
    seal(store, catalog_id).await?;
    let cutoff_ms = state.clock.now_ms() - state.config.event_retention_secs * 1000;
    sweep(store, catalog_id, cutoff_ms).await?;
    let Some((head, _)) = read_head(store, catalog_id).await? else {
        return Ok(EventPage {
            events: Vec::new(),
            position: after,
        });
    };
    // Entries below `first` were swept: the page starts at the oldest one kept.
    let mut position = after.max(head.first.saturating_sub(1));
    let mut events = Vec::new();
    let mut scanned = 0;
    let pk = keys::catalog_pk(catalog_id);
    let mut token = (position > 0).then(|| {
        flotilla_metastore::PageToken::after_sort_key(&keys::event_log(catalog_id, position).sk)
    });
    'pages: loop {
        let want = (MAX_SCAN_PER_READ - scanned).min(flotilla_metastore::MAX_PAGE_SIZE);
        let page = store
            .query(
                &Query::new(pk.clone(), keys::EVENT_LOG_PREFIX, Consistency::Strong)
                    .limit(want)
                    .after(token),
            )
            .await?;
        for item in &page.items {
            let Some(seq) = keys::parse_event_log_sk(&item.key.sk) else {
                continue;
            };
            if seq <= position {
                continue;
            }
            // The log is dense: a missing entry is one a seal is committing right now (a
            // query may see part of a transaction). Stop before it; the next read has it.
            if seq != position + 1 {
                break 'pages;
            }
            scanned += 1;
            position = seq;
            let event: Event = decode(item)?;
            if event.timestamp_ms > cutoff_ms && filter.wants(&event) && readable(access, &event) {
                events.push(event);
            }
            if events.len() >= page_size || scanned >= MAX_SCAN_PER_READ {
                break 'pages;
            }
        }
        match page.next {
            Some(next) if !page.items.is_empty() => token = Some(next),
            _ => break,
        }
    }
    Ok(EventPage { events, position })
}

/// The API token of a log position (bound to the catalog's event log).
pub fn encode_position(catalog_id: &str, position: u64) -> String {
    super::encode_page_token(
        &token_scope(catalog_id),
        &keys::event_log(catalog_id, position).sk,
    )
}

/// The log position of an API token; `400` for a token of another listing or a forged one.
pub fn decode_position(catalog_id: &str, token: &str) -> Result<u64> {
    let sk = super::decode_page_token(&token_scope(catalog_id), keys::EVENT_LOG_PREFIX, token)?;
    keys::parse_event_log_sk(&sk).ok_or_else(|| Error::invalid("malformed page_token"))
}

fn token_scope(catalog_id: &str) -> String {
    format!("events#{catalog_id}")
}

/// `GET {A}/events`: one page of a catalog's events as `{items, next_page_token}`. The token
/// is always answered: it resumes right after the last event examined, so a consumer that
/// is caught up (an empty page) polls again with the same token.
pub async fn list(
    state: &AppState,
    access: &Access,
    catalog_id: &str,
    filter: &Filter,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    filter.validate()?;
    access.authorize(Action::Describe, &Securable::catalog(catalog_id))?;
    super::catalogs::load(state.store.as_ref(), &access.account, catalog_id).await?;
    let after = match token {
        Some(t) => decode_position(catalog_id, t)?,
        None => 0,
    };
    let page = read(state, access, catalog_id, filter, after, page_size).await?;
    Ok(json!({
        "items": page.events,
        "next_page_token": encode_position(catalog_id, page.position),
    }))
}

/// Parses a comma-separated `types` parameter.
pub fn parse_types(types: Option<&str>) -> Vec<String> {
    types
        .map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Most catalogs one listing without `catalog_id` merges: each costs a read of its log per
/// page. An account with more catalogs the reader can see names one.
pub const MAX_MERGED_CATALOGS: usize = 50;

/// `GET {A}/events` without `catalog_id`: the events of every catalog of the account the
/// reader can see, merged. Each catalog's events stay in its sequence order; across catalogs
/// the page takes the oldest head first (by time, then catalog id). The token holds one
/// position per catalog, so resuming sees every later event of each catalog exactly once.
pub async fn list_account(
    state: &AppState,
    access: &Access,
    filter: &Filter,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    filter.validate()?;
    let account = access.account.as_str();
    let scope = format!("events#account#{account}");
    let mut positions: Positions = match token {
        Some(t) => {
            let raw = super::decode_page_token(&scope, "", t)?;
            serde_json::from_str(&raw).map_err(|_| Error::invalid("malformed page_token"))?
        }
        None => Default::default(),
    };
    let mut heads = read_account(state, access, filter, page_size, &mut positions).await?;
    let items = take_merged(&mut heads, page_size, |_| true);
    resume_positions(&heads, &mut positions);
    let raw = serde_json::to_string(&positions).map_err(|e| Error::internal(e.to_string()))?;
    Ok(json!({
        "items": items,
        "next_page_token": super::encode_page_token(&scope, &raw),
    }))
}

/// The catalog records of an account (strong: a catalog just created is merged).
async fn account_catalogs(
    state: &AppState,
    account: &str,
) -> Result<Vec<flotilla_metastore::Item>> {
    Ok(flotilla_metastore::query_all(
        state.store.as_ref(),
        Query::new(
            keys::account_pk(account),
            keys::CATALOG_PREFIX,
            Consistency::Strong,
        ),
    )
    .await?)
}

/// One catalog's part of an account-wide read: its id, the events read after its position,
/// the log position it examined up to, and how many of the events a page took.
pub struct CatalogHead {
    pub catalog_id: String,
    events: Vec<Event>,
    scanned_to: u64,
    taken: usize,
}

/// Per-catalog positions of an account-wide reader, kept in its page token.
pub type Positions = std::collections::BTreeMap<String, u64>;

/// Reads, for every catalog of the account the reader can see (at most
/// [`MAX_MERGED_CATALOGS`]), up to `page_size` events after its position. Positions of
/// catalogs that are gone are dropped.
pub async fn read_account(
    state: &AppState,
    access: &Access,
    filter: &Filter,
    page_size: usize,
    positions: &mut Positions,
) -> Result<Vec<CatalogHead>> {
    let records = account_catalogs(state, &access.account).await?;
    account_heads(state, access, filter, page_size, &records, positions).await
}

async fn account_heads(
    state: &AppState,
    access: &Access,
    filter: &Filter,
    page_size: usize,
    records: &[flotilla_metastore::Item],
    positions: &mut Positions,
) -> Result<Vec<CatalogHead>> {
    let mut catalogs = Vec::new();
    for item in records {
        let rec: flotilla_domain::model::CatalogRecord = decode(item)?;
        if access.visible(&Securable::catalog(&rec.id)) {
            catalogs.push(rec.id);
        }
    }
    if catalogs.len() > MAX_MERGED_CATALOGS {
        return Err(Error::invalid(format!(
            "the account has more than {MAX_MERGED_CATALOGS} catalogs: name a catalog_id"
        )));
    }
    positions.retain(|c, _| catalogs.contains(c));
    let mut heads = Vec::with_capacity(catalogs.len());
    for c in catalogs {
        let after = positions.get(&c).copied().unwrap_or(0);
        let page = read(state, access, &c, filter, after, page_size).await?;
        heads.push(CatalogHead {
            catalog_id: c,
            events: page.events,
            scanned_to: page.position,
            taken: 0,
        });
    }
    Ok(heads)
}

impl CatalogHead {
    /// Keeps only the events `keep` accepts (before any is taken): a filter of the caller's
    /// own. The position still moves past those dropped.
    pub fn retain(&mut self, keep: impl FnMut(&Event) -> bool) {
        debug_assert_eq!(self.taken, 0);
        self.events.retain(keep);
    }
}

/// The oldest event not yet taken among the heads (by time, then catalog id).
pub fn peek_merged(heads: &[CatalogHead]) -> Option<&Event> {
    heads
        .iter()
        .filter(|h| h.taken < h.events.len())
        .min_by(|a, b| {
            let (ea, eb) = (&a.events[a.taken], &b.events[b.taken]);
            (ea.timestamp_ms, &a.catalog_id).cmp(&(eb.timestamp_ms, &b.catalog_id))
        })
        .map(|h| &h.events[h.taken])
}

/// Takes the oldest event among the heads ([`peek_merged`]).
pub fn take_next(heads: &mut [CatalogHead]) -> Option<Event> {
    let head = heads
        .iter_mut()
        .filter(|h| h.taken < h.events.len())
        .min_by(|a, b| {
            let (ea, eb) = (&a.events[a.taken], &b.events[b.taken]);
            (ea.timestamp_ms, &a.catalog_id).cmp(&(eb.timestamp_ms, &b.catalog_id))
        })?;
    head.taken += 1;
    Some(head.events[head.taken - 1].clone())
}

/// Takes the oldest events among the heads, up to `page_size`, while `more` accepts the next.
pub fn take_merged(
    heads: &mut [CatalogHead],
    page_size: usize,
    mut more: impl FnMut(&Event) -> bool,
) -> Vec<Event> {
    let mut items = Vec::with_capacity(page_size);
    while items.len() < page_size {
        match peek_merged(heads) {
            Some(e) if more(e) => {}
            _ => break,
        }
        items.extend(take_next(heads));
    }
    items
}

/// Moves each catalog's position past what the page took. A catalog whose events all made
/// the page resumes after everything it examined; one cut short resumes after its last event
/// on the page.
pub fn resume_positions(heads: &[CatalogHead], positions: &mut Positions) {
    for h in heads {
        let position = if h.taken == h.events.len() {
            h.scanned_to
        } else if h.taken > 0 {
            h.events[h.taken - 1].sequence
        } else {
            positions.get(&h.catalog_id).copied().unwrap_or(0)
        };
        positions.insert(h.catalog_id.clone(), position);
    }
}
