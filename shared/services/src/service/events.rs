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
//! event of it ([`Log::of_partition`] names the log) and pushes each sealed entry to
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

/// Flotilla's own event types (`x-flotilla-<resource>-<verb>`, the verbs in the past
/// tense): account-level changes, which go to the account's log, and capture results, which
/// go to the table's catalog log.
pub const ACCOUNT_TYPES: &[&str] = &[
    "x-flotilla-catalog-created",
    "x-flotilla-catalog-updated",
    "x-flotilla-catalog-deleted",
    "x-flotilla-integration-created",
    "x-flotilla-integration-updated",
    "x-flotilla-integration-paused",
    "x-flotilla-integration-resumed",
    "x-flotilla-integration-credentials-rotated",
    "x-flotilla-integration-deleted",
    "x-flotilla-overlay-created",
    "x-flotilla-overlay-updated",
    "x-flotilla-overlay-paused",
    "x-flotilla-overlay-resumed",
    "x-flotilla-overlay-deleted",
    "x-flotilla-principal-created",
    "x-flotilla-principal-secret-rotated",
    "x-flotilla-principal-deleted",
    "x-flotilla-role-created",
    "x-flotilla-role-deleted",
    "x-flotilla-role-member-added",
    "x-flotilla-role-member-removed",
    "x-flotilla-grant-created",
    "x-flotilla-grant-deleted",
    "x-flotilla-index-catalog-created",
    "x-flotilla-index-namespace-created",
    "x-flotilla-index-namespace-dropped",
    "x-flotilla-index-registered",
    "x-flotilla-index-committed",
    "x-flotilla-index-renamed",
    "x-flotilla-index-dropped",
];

/// Capture results that change what a table shows (catalog log, actor: the overlay).
pub const CAPTURE_TYPES: &[&str] = &[
    "x-flotilla-capture-visible",
    "x-flotilla-capture-invalid",
    "x-flotilla-capture-not-readable",
    "x-flotilla-capture-quarantined",
];

/// Object types of a catalog's log (what the Iceberg events endpoint answers about).
pub const CATALOG_OBJECT_TYPES: &[&str] = &["namespace", "table", "view"];

/// Object types a filter may name.
pub const OBJECT_TYPES: &[&str] = &[
    "catalog",
    "namespace",
    "table",
    "view",
    "integration",
    "overlay",
    "principal",
    "role",
    "grant",
    "index-catalog",
    "index",
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

/// An account-level object an event is about (an integration, an overlay, a principal, a
/// role, a grant, an index catalog): its type, and its id and/or name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Resource {
    pub fn new(kind: &str, id: Option<&str>, name: Option<&str>) -> Self {
        Resource {
            kind: kind.to_owned(),
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
        }
    }
}

/// What changed. A catalog's event names its `catalog_id`; `namespace` is the object's
/// namespace (a namespace event names the namespace itself there); `name` is the table or
/// view. An account-level event has no `catalog_id` and names its `resource` (an index
/// event names the index catalog there, and the index by `namespace` and `name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<Resource>,
    /// What else the change says, small: a grant's privilege and securable, a role's new
    /// member, a capture's validation state, which settings an update changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl Operation {
    pub fn namespace(kind: &str, catalog_id: &str, path: &NamespacePath) -> Self {
        Operation {
            catalog_id: Some(catalog_id.to_owned()),
            namespace: path.segments().to_vec(),
            ..Operation::account(kind, None)
        }
    }

    /// An account-level change of `resource` (an `x-flotilla-…` type, see [`ACCOUNT_TYPES`]).
    pub fn account(kind: &str, resource: Option<Resource>) -> Self {
        Operation {
            kind: kind.to_owned(),
            catalog_id: None,
            namespace: Vec::new(),
            name: None,
            metadata_location: None,
            updates: None,
            destination: None,
            resource,
            details: None,
        }
    }

    /// An account-level change (`x-flotilla-<resource>-<verb>`) of a resource of type
    /// `resource`, by id and/or name.
    pub fn of_resource(verb: &str, resource: &str, id: Option<&str>, name: Option<&str>) -> Self {
        Operation::account(
            &format!("x-flotilla-{resource}-{verb}"),
            Some(Resource::new(resource, id, name)),
        )
    }

    /// The update of a pausable resource (an integration, an overlay): `paused` or
    /// `resumed` when the update moved `paused` (`was` to `now`), else `updated`; `details`
    /// names the fields that changed (each with whether it did).
    pub fn resource_update(
        resource: &str,
        id: &str,
        name: &str,
        (was, now): (bool, bool),
        fields: &[(&str, bool)],
    ) -> Self {
        let verb = match (was, now) {
            (false, true) => "paused",
            (true, false) => "resumed",
            _ => "updated",
        };
        let changed: Vec<&str> = fields.iter().filter_map(|(f, c)| c.then_some(*f)).collect();
        Operation::of_resource(verb, resource, Some(id), Some(name))
            .with_details(json!({ "changed": changed }))
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
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

    /// The object type the operation is about: `namespace`, `table`, `view`, or an account
    /// resource's type (`integration`, `overlay`, `principal`, `role`, `grant`,
    /// `index-catalog`; `index` for an index of an index catalog). A capture event is about
    /// its table.
    pub fn object_type(&self) -> &str {
        if let Some(r) = &self.resource {
            return if r.kind == "index-catalog" && self.name.is_some() {
                "index"
            } else {
                r.kind.as_str()
            };
        }
        if self.kind.starts_with("x-flotilla-capture-") {
            "table"
        } else if self.kind.ends_with("namespace") || self.kind.ends_with("namespace-properties") {
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
    /// For a commit (`update-table`, `replace-view`): the revision of the object's record
    /// the commit wrote (a per-object counter). Two commits of one object sealed in the same batch are placed in
    /// this order, whatever their writers' clocks said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_version: Option<u64>,
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

// ---- logs -------------------------------------------------------------------------------

/// An event log: a catalog's (its namespaces, tables, views, capture results) or an
/// account's (its integrations, overlays, principals, roles, grants, index catalogs). Both
/// live in their own partition under the same sort keys, with the same pending/seal/log
/// protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Log {
    Catalog(String),
    Account(String),
}

/// The position key of the account log in a merged reader's token (catalog ids never hold
/// `@`).
const ACCOUNT_LOG_POSITION: &str = "@account";

impl Log {
    /// The log whose items live in partition `pk` (what a stream record of a pending or
    /// log item names): `CAT#{c}` is catalog `c`'s, `ACCT#{a}` account `a`'s. The one
    /// mapping from a partition to its log.
    pub fn of_partition(pk: &str) -> Option<Log> {
        if let Some(c) = keys::catalog_of_pk(pk) {
            Some(Log::Catalog(c.to_owned()))
        } else {
            keys::account_of_pk(pk).map(|a| Log::Account(a.to_owned()))
        }
    }

    /// The partition the log's items live in.
    pub fn partition(&self) -> String {
        match self {
            Log::Catalog(c) => keys::catalog_pk(c),
            Log::Account(a) => keys::account_pk(a),
        }
    }

    /// The key of this log in a merged reader's positions.
    pub fn position_key(&self) -> &str {
        match self {
            Log::Catalog(c) => c,
            Log::Account(_) => ACCOUNT_LOG_POSITION,
        }
    }
}

/// The key, in a merged reader's positions, of the log `event` was placed in: account-level
/// types are in the account's log, every other event in its catalog's.
pub fn position_key(event: &Event) -> &str {
    match &event.operation.catalog_id {
        Some(c) if !ACCOUNT_TYPES.contains(&event.operation.kind.as_str()) => c,
        _ => ACCOUNT_LOG_POSITION,
    }
}

/// How long the audit keeps what it lists: the mutations it reads from these logs, and its
/// refusal records (`audit::RETENTION_SECS`). Here, below the audit, because the logs'
/// physical retention follows it.
pub const AUDIT_RETENTION_SECS: i64 = 90 * 24 * 3600;

/// How long log entries and pending events are physically kept: the longer of the events'
/// retention and the audit's (the audit reads mutations from the same log).
pub fn kept_secs(state: &AppState) -> i64 {
    state.config.event_retention_secs.max(AUDIT_RETENTION_SECS)
}

/// The oldest event time a reader is answered: the events' retention for the feed, the
/// audit's for the audit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Feed,
    Audit,
}

impl Window {
    fn cutoff_ms(self, state: &AppState) -> i64 {
        let secs = match self {
            Window::Feed => state.config.event_retention_secs,
            Window::Audit => AUDIT_RETENTION_SECS,
        };
        state.clock.now_ms() - secs * 1000
    }
}

// ---- writing ----------------------------------------------------------------------------

/// The operation that records `operation` of `account` in the transaction making the
/// change: one new pending item (created only if absent) in the catalog's log, expiring
/// after the longest retention. `None` when the host turned events off.
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
    catalog_pending_op(state, account, actor, operation, None)
}

/// The pending item of `operation` in the log of the catalog it names.
fn catalog_pending_op(
    state: &AppState,
    account: &str,
    actor: Option<Actor>,
    operation: Operation,
    object_version: Option<u64>,
) -> Result<Option<Op>> {
    let Some(catalog_id) = operation.catalog_id.clone() else {
        return Err(Error::internal("a catalog event without its catalog"));
    };
    pending_op(
        state,
        account,
        &Log::Catalog(catalog_id),
        actor,
        operation,
        object_version,
    )
}

/// The pending item of `operation` of `account` in `log` (the event carries its account
/// whichever log it is placed in).
fn pending_op(
    state: &AppState,
    account: &str,
    log: &Log,
    actor: Option<Actor>,
    operation: Operation,
    object_version: Option<u64>,
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
        object_version,
    };
    let key = keys::log_event_pending(&log.partition(), now, &event.event_id);
    let expires = now.div_euclid(1000) + kept_secs(state);
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

/// The event of a commit (`update-table`, `replace-view`) that writes revision `revision`
/// of the object's record: placed after an earlier commit of the object sealed in the same
/// batch ([`Event::object_version`]). `actor` as in [`event_op_by`].
pub fn commit_op(
    state: &AppState,
    account: &str,
    actor: Option<Actor>,
    operation: Operation,
    revision: u64,
) -> Result<Option<Op>> {
    catalog_pending_op(state, account, actor, operation, Some(revision))
}

/// [`commit_op`] by the request's principal, pushed onto `tx`.
pub fn record_commit(
    state: &AppState,
    account: &str,
    tx: &mut Transaction,
    operation: Operation,
    revision: u64,
) -> Result<()> {
    if let Some(op) = commit_op(state, account, None, operation, revision)? {
        tx.push(op);
    }
    Ok(())
}

/// The operation recording an account-level change in the account's log (an
/// `x-flotilla-…` type naming its resource).
pub fn account_op(state: &AppState, account: &str, operation: Operation) -> Result<Option<Op>> {
    pending_op(
        state,
        account,
        &Log::Account(account.to_owned()),
        None,
        operation,
        None,
    )
}

/// [`account_op`] pushed onto a list of operations being built.
pub fn record_account(
    state: &AppState,
    ops: &mut Vec<Op>,
    account: &str,
    operation: Operation,
) -> Result<()> {
    ops.extend(account_op(state, account, operation)?);
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

async fn read_head(store: &dyn Metastore, log: &Log) -> Result<Option<(Head, u64)>> {
    match store
        .get(&keys::log_head(&log.partition()), Consistency::Strong)
        .await?
    {
        Some(item) => Ok(Some((decode::<Head>(&item)?, item.version))),
        None => Ok(None),
    }
}

/// The order a seal gives one batch of pending events (read oldest first: by write time,
/// then id): as read, except that the commits of one object (events carrying
/// [`Event::object_version`]) take the batch's places of that object's commits in version
/// order, so two commits of a table sealed together keep their commit order even when
/// their writers' clocks disagree.
fn batch_order(events: &mut [Event]) {
    type Object = (Option<String>, Vec<String>, Option<String>, String);
    let mut groups: std::collections::BTreeMap<Object, Vec<usize>> = Default::default();
    for (i, e) in events.iter().enumerate() {
        if e.object_version.is_some() {
            let op = &e.operation;
            let object = (
                op.catalog_id.clone(),
                op.namespace.clone(),
                op.name.clone(),
                op.object_type().to_owned(),
            );
            groups.entry(object).or_default().push(i);
        }
    }
    for places in groups.values().filter(|p| p.len() > 1) {
        let mut commits: Vec<Event> = places.iter().map(|&i| events[i].clone()).collect();
        commits.sort_by_key(|e| e.object_version);
        for (&i, e) in places.iter().zip(commits) {
            events[i] = e;
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

/// Moves the log's pending events into it, oldest first, until none are pending or
/// [`MAX_SEALS_PER_READ`] seals committed (this reader's or concurrent readers'). Each seal
/// is conditional on the head and on every pending item it moves, so two sealers never give
/// one event two places nor one place two events: the loser re-reads and seals what is
/// left. A lost race is progress (the winner sealed), so concurrent readers never starve
/// one another.
pub async fn seal(store: &dyn Metastore, log: &Log) -> Result<()> {
    seal_log(store, log, MAX_SEALS_PER_READ).await.map(|_| ())
}

/// [`seal`] committing at most `max_rounds` seals (this caller's or concurrent ones'):
/// answers whether the pending events were drained (the push path seals in bounded rounds
/// and asks for a redelivery while some are left).
pub async fn seal_log(store: &dyn Metastore, log: &Log, max_rounds: usize) -> Result<Sealed> {
    let pk = log.partition();
    let head_key = keys::log_head(&pk);
    // Rounds: seals that committed, this caller's or a concurrent one's.
    let mut rounds = 0;
    let mut failures = 0;
    while rounds < max_rounds {
        let head = read_head(store, log).await?;
        let pending = store
            .query(
                &Query::new(pk.clone(), keys::EVENT_PENDING_PREFIX, Consistency::Strong)
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
        let mut batch = Vec::with_capacity(pending.items.len());
        for item in &pending.items {
            batch.push(decode::<Event>(item)?);
            tx.push(Op::delete_at(item.key.clone(), item.version));
        }
        batch_order(&mut batch);
        let mut seq = next;
        for mut event in batch {
            event.sequence = seq;
            // No TTL in the log: readers remove expired entries themselves, moving the
            // head's `first` with them, so that no entry ever vanishes unannounced.
            tx.push(Op::create(keys::log_event(&pk, seq), to_body(&event)?));
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

/// Removes entries older than `cutoff_ms` (the longest retention) from the start of the
/// log and moves the head's `first` past them, in one transaction (a lost race with another
/// reader's seal or sweep removes nothing).
async fn sweep(store: &dyn Metastore, log: &Log, cutoff_ms: i64) -> Result<()> {
    let Some((head, version)) = read_head(store, log).await? else {
        return Ok(());
    };
    let pk = log.partition();
    let page = store
        .query(
            &Query::new(pk.clone(), keys::EVENT_LOG_PREFIX, Consistency::Strong)
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
        keys::log_head(&pk),
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
            if !OBJECT_TYPES.contains(&t.as_str()) {
                return Err(Error::invalid(format!(
                    "unknown object type {t:?} (one of {})",
                    OBJECT_TYPES.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// [`Filter::validate`] for a reader of one catalog's log through the Iceberg endpoint:
    /// object types are those of a catalog (namespace, table, view).
    pub fn validate_for_catalog(&self) -> Result<()> {
        if let Some(t) = self
            .object_types
            .iter()
            .find(|t| !CATALOG_OBJECT_TYPES.contains(&t.as_str()))
        {
            return Err(Error::invalid(format!(
                "unknown object type {t:?} (namespace, table or view)"
            )));
        }
        self.validate()
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

/// Whether the reader may see an event: no event reveals an object the reader may not
/// see. A catalog's event needs `READ` on the object it is about (both ends of a rename);
/// an account event needs `DESCRIBE` on its catalog, integration, overlay or index catalog, what
/// shows a grant for a grant's ([`Action::Manage`] on its securable), and account
/// administration for principals, roles and members.
fn readable(access: &Access, e: &Event) -> bool {
    let op = &e.operation;
    let Some(catalog_id) = &op.catalog_id else {
        let Some(r) = &op.resource else {
            return access.is_admin();
        };
        let id = r.id.clone().unwrap_or_default();
        let on = match r.kind.as_str() {
            "catalog" => Securable::Catalog { catalog_id: id },
            "integration" => Securable::Integration { integration_id: id },
            "overlay" => Securable::Overlay { overlay_id: id },
            "index-catalog" => Securable::IndexCatalog {
                name: r.name.clone().unwrap_or_default(),
            },
            // A grant is shown to whoever may see it: account admins, and those who may
            // manage its securable.
            "grant" => {
                return access.is_admin()
                    || op
                        .details
                        .as_ref()
                        .and_then(|d| d.get("securable"))
                        .and_then(|s| serde_json::from_value::<Securable>(s.clone()).ok())
                        .is_some_and(|s| access.allows(Action::Manage, &s));
            }
            _ => return access.allows(Action::Administer, &Securable::Account),
        };
        return access.allows(Action::Describe, &on);
    };
    let Ok(ns) = NamespacePath::new(op.namespace.clone()) else {
        return false;
    };
    let kind = match op.object_type() {
        "namespace" => {
            return access.allows(Action::Read, &Securable::namespace(catalog_id, &ns));
        }
        "view" => RelationKind::View,
        _ => RelationKind::Table,
    };
    let Some(name) = &op.name else {
        return false;
    };
    let source = Securable::relation(catalog_id, &ns, name, kind);
    let destination = match &op.destination {
        None => true,
        Some(d) => NamespacePath::new(d.namespace.clone()).is_ok_and(|dns| {
            access.allows(
                Action::Read,
                &Securable::relation(catalog_id, &dns, &d.name, kind),
            )
        }),
    };
    destination && access.allows(Action::Read, &source)
}

/// One page of a log's events after log position `after` (0: from the start).
pub struct EventPage {
    pub events: Vec<Event>,
    /// The position to resume from: the last log item examined (or `after` when none was).
    pub position: u64,
}

/// Reads the events of `catalog_id` after position `after` that the reader may read and
/// `filter` wants, up to `page_size`, within the events' retention. Seals pending events
/// first, so an event whose writer committed before this read started is in the answer or
/// after its position.
pub async fn read(
    state: &AppState,
    access: &Access,
    catalog_id: &str,
    filter: &Filter,
    after: u64,
    page_size: usize,
) -> Result<EventPage> {
    let log = Log::Catalog(catalog_id.to_owned());
    read_log(state, access, &log, filter, after, page_size, Window::Feed).await
}

/// Log entries written this long before the window's start may still hold events inside
/// it (a writer's clock, a commit that took long): the skip to a window's start keeps them.
const WINDOW_SLACK_MS: i64 = 3_600_000;

/// The entry of `log` at `seq`: its event, or `None` (swept, or not visible yet).
async fn entry(store: &dyn Metastore, pk: &str, seq: u64) -> Result<Option<Event>> {
    match store
        .get(&keys::log_event(pk, seq), Consistency::Strong)
        .await?
    {
        Some(item) => Ok(Some(decode(&item)?)),
        None => Ok(None),
    }
}

/// The position to start a read after `position` whose window starts at `cutoff_ms`: the
/// log keeps the audit's 90 days, so a feed reader starting at the log's start would page
/// through weeks of entries it is not answered. Binary search (entries are sealed roughly in
/// time order) for the last entry written more than [`WINDOW_SLACK_MS`] before the cutoff;
/// everything after it is examined as usual.
async fn skip_to_window(
    store: &dyn Metastore,
    pk: &str,
    position: u64,
    next: u64,
    cutoff_ms: i64,
) -> Result<u64> {
    let old = |e: &Option<Event>| {
        e.as_ref()
            .is_some_and(|e| e.timestamp_ms < cutoff_ms - WINDOW_SLACK_MS)
    };
    if next <= position + 1 || !old(&entry(store, pk, position + 1).await?) {
        return Ok(position);
    }
    // Invariant: the entry at `lo` is old; `hi` is past it (the end of the log, or an entry
    // not old).
    let (mut lo, mut hi) = (position + 1, next);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match entry(store, pk, mid).await? {
            e if old(&e) => lo = mid,
            Some(_) => hi = mid,
            // Not visible yet (a seal committing): nothing after it is examined either.
            None => hi = mid,
        }
    }
    Ok(lo)
}

/// Reads the events of `log` after position `after` that the reader may see and `filter`
/// wants, up to `page_size`, within `window`. Seals pending events first.
pub async fn read_log(
    state: &AppState,
    access: &Access,
    log: &Log,
    filter: &Filter,
    after: u64,
    page_size: usize,
    window: Window,
) -> Result<EventPage> {
    let store = state.store.as_ref();
    seal(store, log).await?;
    let kept_cutoff_ms = state.clock.now_ms() - kept_secs(state) * 1000;
    sweep(store, log, kept_cutoff_ms).await?;
    let cutoff_ms = window.cutoff_ms(state);
    let Some((head, _)) = read_head(store, log).await? else {
        return Ok(EventPage {
            events: Vec::new(),
            position: after,
        });
    };
    let pk = log.partition();
    // Entries below `first` were swept: the page starts at the oldest one kept, or later,
    // where the window starts.
    let mut position = after.max(head.first.saturating_sub(1));
    position = skip_to_window(store, &pk, position, head.next, cutoff_ms).await?;
    let mut events = Vec::new();
    let mut scanned = 0;
    let mut token = (position > 0)
        .then(|| flotilla_metastore::PageToken::after_sort_key(&keys::log_event(&pk, position).sk));
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
        &keys::log_event(&keys::catalog_pk(catalog_id), position).sk,
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
    super::records::catalog(state.store.as_ref(), &access.account, catalog_id).await?;
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
/// reader can see and of the account's own log, merged. Each log's events stay in its
/// sequence order; across logs the page takes the oldest head first (by time, then log).
/// The token holds one position per log, so resuming sees every later event of each log
/// exactly once.
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
    let mut heads = read_account(
        state,
        access,
        filter,
        page_size,
        &mut positions,
        Window::Feed,
    )
    .await?;
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

/// One log's part of an account-wide read: the log, the events read after its position,
/// the log position it examined up to, and how many of the events a page took.
pub struct LogHead {
    pub log: Log,
    events: Vec<Event>,
    scanned_to: u64,
    taken: usize,
}

/// Per-log positions of an account-wide reader, kept in its page token (by catalog id; the
/// account's log under `@account`).
pub type Positions = std::collections::BTreeMap<String, u64>;

/// Reads, for the account's log and every catalog of the account the reader can see (at
/// most [`MAX_MERGED_CATALOGS`]), up to `page_size` events after its position, within
/// `window`. Positions of catalogs that are gone are dropped.
pub async fn read_account(
    state: &AppState,
    access: &Access,
    filter: &Filter,
    page_size: usize,
    positions: &mut Positions,
    window: Window,
) -> Result<Vec<LogHead>> {
    let records = account_catalogs(state, &access.account).await?;
    let mut logs = Vec::new();
    for item in &records {
        let rec: flotilla_domain::model::CatalogRecord = decode(item)?;
        if access.visible(&Securable::catalog(&rec.id)) {
            logs.push(Log::Catalog(rec.id));
        }
    }
    if logs.len() > MAX_MERGED_CATALOGS {
        return Err(Error::invalid(format!(
            "the account has more than {MAX_MERGED_CATALOGS} catalogs: name a catalog_id"
        )));
    }
    logs.push(Log::Account(access.account.clone()));
    positions.retain(|k, _| logs.iter().any(|l| l.position_key() == k));
    let mut heads = Vec::with_capacity(logs.len());
    for log in logs {
        let after = positions.get(log.position_key()).copied().unwrap_or(0);
        let page = read_log(state, access, &log, filter, after, page_size, window).await?;
        heads.push(LogHead {
            log,
            events: page.events,
            scanned_to: page.position,
            taken: 0,
        });
    }
    Ok(heads)
}

impl LogHead {
    /// Keeps only the events `keep` accepts (before any is taken): a filter of the caller's
    /// own. The position still moves past those dropped.
    pub fn retain(&mut self, keep: impl FnMut(&Event) -> bool) {
        debug_assert_eq!(self.taken, 0);
        self.events.retain(keep);
    }
}

/// The head whose next event is the oldest not yet taken (by time, then log).
fn oldest(heads: &[LogHead]) -> Option<usize> {
    heads
        .iter()
        .enumerate()
        .filter(|(_, h)| h.taken < h.events.len())
        .min_by(|(_, a), (_, b)| {
            let (ea, eb) = (&a.events[a.taken], &b.events[b.taken]);
            (ea.timestamp_ms, &a.log).cmp(&(eb.timestamp_ms, &b.log))
        })
        .map(|(i, _)| i)
}

/// The oldest event not yet taken among the heads (by time, then log).
pub fn peek_merged(heads: &[LogHead]) -> Option<&Event> {
    oldest(heads).map(|i| &heads[i].events[heads[i].taken])
}

/// Takes the oldest event among the heads ([`peek_merged`]).
pub fn take_next(heads: &mut [LogHead]) -> Option<Event> {
    let head = &mut heads[oldest(heads)?];
    head.taken += 1;
    Some(head.events[head.taken - 1].clone())
}

/// Takes the oldest events among the heads, up to `page_size`, while `more` accepts the next.
pub fn take_merged(
    heads: &mut [LogHead],
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

/// Moves each log's position past what the page took. A log whose events all made the page
/// resumes after everything it examined; one cut short resumes after its last event on the
/// page.
pub fn resume_positions(heads: &[LogHead], positions: &mut Positions) {
    for h in heads {
        let key = h.log.position_key();
        let position = if h.taken == h.events.len() {
            h.scanned_to
        } else if h.taken > 0 {
            h.events[h.taken - 1].sequence
        } else {
            positions.get(key).copied().unwrap_or(0)
        };
        positions.insert(key.to_owned(), position);
    }
}
