//! Fenced publication (retirement, its last step, is [`super::retire`]).
//!
//! Every transaction a run commits starts with the [`Fence`] operations, so a run whose
//! observed state changed (overlay PATCH, integration URI or credential change, pause, a
//! deletion fence or a catalog delete guard) cannot publish anything afterwards: the first
//! transaction that notices fails its fence and the run stops with
//! [`ReconcileError::FenceLost`]. Relations are published in small batches (one namespace per
//! transaction, with that namespace's existence and the absence of its delete guard asserted
//! alongside); a batch that loses a race on a relation slot is replayed item by item from
//! fresh reads, which is how two concurrent runs of one overlay converge.

use std::collections::{BTreeMap, HashSet};

use flotilla_domain::keys;
use flotilla_domain::model::{
    ClaimRecord, IntegrationRecord, NamespaceRecord, OverlayRecord, RelationKind, RelationRecord,
};
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Condition, Consistency, Key, MetastoreError, Op, OpOutcome, Transaction};

use super::discover::Discovered;
use super::plan::{Action, Ctx, Desired, DesiredRelation, decide};
use super::target::{Slot, Stored, TargetState};
use super::{KindCounts, ObservedRecords, ReconcileError, ReconcileSummary, RunOptions};
use flotilla_base::error::Error;
use flotilla_services::service::events;
use flotilla_services::service::relations::directory_bump;
use flotilla_services::service::{GuardState, MAX_ATTEMPTS, backoff, guard_state, to_body};
use flotilla_services::state::AppState;

/// The conditions every publication transaction of one run asserts, first in the
/// transaction so a failure among them is recognised by index.
#[derive(Clone, Debug)]
pub struct Fence {
    ops: Vec<Op>,
}

impl Fence {
    /// Builds the fence from what the run observed. A catalog delete guard left by a crashed
    /// deleter is cleared first (as every writer in the catalog does); a live one stops the run.
    pub async fn establish(
        state: &AppState,
        account: &str,
        observed: &ObservedRecords,
    ) -> Result<Self, ReconcileError> {
        let store = state.store.as_ref();
        let o = &observed.overlay;
        let guard = keys::catalog_guard(&o.catalog_id);
        match guard_state(
            store,
            guard.clone(),
            state.clock.now_ms(),
            state.config.guard_lease_ms,
        )
        .await?
        {
            GuardState::Absent => {}
            GuardState::Live => return Err(ReconcileError::Deleting("the target catalog".into())),
            GuardState::Abandoned { version } => {
                match store
                    .transact(Transaction::new().with(Op::delete_at(guard.clone(), version)))
                    .await
                {
                    Ok(()) | Err(MetastoreError::ConditionFailed { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let ops = vec![
            Op::check(
                keys::overlay(account, &o.id),
                Condition::Version(observed.overlay_version),
            ),
            Op::check(
                keys::integration(account, &o.integration_id),
                Condition::Version(observed.integration_version),
            ),
            Op::check(keys::account(account), Condition::Exists),
            Op::check(keys::account_fence(account), Condition::Absent),
            Op::check(
                keys::integration_fence(account, &o.integration_id),
                Condition::Absent,
            ),
            Op::check(keys::overlay_fence(account, &o.id), Condition::Absent),
            Op::check(keys::catalog(account, &o.catalog_id), Condition::Exists),
            Op::check(guard, Condition::Absent),
        ];
        Ok(Self { ops })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// The fence's operations, in the order every fenced transaction starts with them.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The result of committing one fenced transaction.
pub(crate) enum Commit {
    Applied,
    /// A non-fence condition failed, or the outcome is unknown: re-read and decide again.
    Reread,
}

pub struct Publisher<'a> {
    pub(crate) state: &'a AppState,
    pub(crate) overlay: &'a OverlayRecord,
    integration: &'a IntegrationRecord,
    fence: Fence,
    pub(crate) per_tx: usize,
    /// Slots a stable identity moved away from in this run (already deleted).
    pub(crate) moved: std::sync::Mutex<HashSet<Slot>>,
}

pub(crate) fn slot_key(catalog_id: &str, slot: &Slot) -> Key {
    keys::relation(catalog_id, &slot.0, &slot.1)
}

pub(crate) fn counts_for(summary: &mut ReconcileSummary, kind: RelationKind) -> &mut KindCounts {
    match kind {
        RelationKind::Table => &mut summary.tables,
        RelationKind::View => &mut summary.views,
    }
}

fn tally(summary: &mut ReconcileSummary, kind: RelationKind, action: &Action) {
    match action {
        Action::Unchanged => counts_for(summary, kind).unchanged += 1,
        Action::Create { .. } => counts_for(summary, kind).created += 1,
        Action::Update { .. } => counts_for(summary, kind).updated += 1,
        Action::Move { replaced, .. } => {
            counts_for(summary, kind).updated += 1;
            if let Some((_, old)) = replaced {
                counts_for(summary, *old).retired += 1;
            }
        }
        Action::ReplaceIdentity { old_kind, .. } => {
            counts_for(summary, kind).created += 1;
            counts_for(summary, *old_kind).retired += 1;
        }
        Action::Blocked(_) => {}
    }
}

impl<'a> Publisher<'a> {
    pub fn new(
        state: &'a AppState,
        overlay: &'a OverlayRecord,
        integration: &'a IntegrationRecord,
        fence: Fence,
        opts: &RunOptions,
    ) -> Self {
        Self {
            state,
            overlay,
            integration,
            fence,
            per_tx: opts.relations_per_transaction.clamp(1, 40),
            moved: std::sync::Mutex::new(HashSet::new()),
        }
    }

    fn applied(&self, summary: &mut ReconcileSummary, kind: RelationKind, action: &Action) {
        if let Action::Move { from, .. } = action {
            self.moved
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(from.clone());
        }
        tally(summary, kind, action);
    }

    fn ctx(&self) -> Ctx<'a> {
        Ctx {
            overlay: self.overlay,
            integration: self.integration,
            now: self.state.clock.now_rfc3339(),
        }
    }

    pub(crate) async fn commit(&self, ops: Vec<Op>) -> Result<Commit, ReconcileError> {
        let mut tx = Transaction {
            ops: self.fence.ops.clone(),
        };
        tx.ops.extend(ops);
        for attempt in 0..MAX_ATTEMPTS {
            match self.state.store.transact(tx.clone()).await {
                Ok(()) => return Ok(Commit::Applied),
                Err(MetastoreError::ConditionFailed { reasons }) => {
                    if reasons
                        .iter()
                        .take(self.fence.len())
                        .any(|r| !matches!(r, OpOutcome::Ok))
                    {
                        tracing::info!(overlay_id = %self.overlay.id, "reconciliation lost its fence");
                        return Err(ReconcileError::FenceLost);
                    }
                    return Ok(Commit::Reread);
                }
                Err(e) if e.is_outcome_unknown() => return Ok(Commit::Reread),
                Err(e) if e.is_retryable() => backoff(attempt).await,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::unavailable("reconciliation transaction did not converge").into())
    }

    /// The ops asserting that children may be created in `ns` (it exists and no delete is
    /// proving it empty). A guard left by a crashed deleter is removed by the same transaction.
    async fn namespace_ops(&self, ns: &NamespacePath) -> Result<Vec<Op>, ReconcileError> {
        let cat = &self.overlay.catalog_id;
        let g = keys::namespace_guard(cat, ns);
        let gop = match guard_state(
            self.state.store.as_ref(),
            g.clone(),
            self.state.clock.now_ms(),
            self.state.config.guard_lease_ms,
        )
        .await?
        {
            GuardState::Absent => Op::check(g, Condition::Absent),
            GuardState::Abandoned { version } => Op::delete_at(g, version),
            GuardState::Live => return Err(ReconcileError::Deleting(format!("namespace {ns}"))),
        };
        Ok(vec![
            Op::check(keys::namespace(cat, ns), Condition::Exists),
            gop,
        ])
    }

    // ---- namespaces ---------------------------------------------------------------------

    /// Claims every desired namespace, creating it (marked as overlay-created, with a claim
    /// saying so, in one transaction) where it does not exist. Parents first.
    pub async fn publish_namespaces(
        &self,
        desired: &Desired,
        found: &Discovered,
        target: &TargetState,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let mut paths: Vec<&NamespacePath> = desired.namespaces.iter().collect();
        paths.sort_by(|a, b| a.depth().cmp(&b.depth()).then(a.cmp(b)));
        for path in paths {
            let props = found.namespace_properties.get(path);
            let stored = target.namespaces.get(path);
            let claim = target.claims.get(path);
            if let (Some(n), Some(c)) = (stored, claim) {
                // A namespace this overlay created follows the upstream's properties.
                match props {
                    Some(p)
                        if c.value.created_namespace
                            && n.value.created_by_overlay
                            && n.value.properties != *p =>
                    {
                        self.refresh_namespace(n, p, summary).await?;
                    }
                    _ => summary.namespaces.unchanged += 1,
                }
                continue;
            }
            self.claim_namespace(
                path,
                stored.map(|s| s.version),
                claim.map(|c| c.version),
                props,
                summary,
            )
            .await?;
        }
        Ok(())
    }

    /// Replaces an overlay-created namespace's properties with the upstream's.
    async fn refresh_namespace(
        &self,
        stored: &Stored<NamespaceRecord>,
        properties: &BTreeMap<String, String>,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let mut rec = stored.value.clone();
        rec.properties = properties.clone();
        rec.revision += 1;
        rec.update_time = self.state.clock.now_rfc3339();
        let ns_key = keys::namespace(&self.overlay.catalog_id, &rec.path);
        match self
            .commit(vec![Op::replace(ns_key, stored.version, to_body(&rec)?)])
            .await?
        {
            Commit::Applied => summary.namespaces.updated += 1,
            // Changed under the run (a PATCH, another run): the next run compares again.
            Commit::Reread => summary.namespaces.unchanged += 1,
        }
        Ok(())
    }

    async fn claim_namespace(
        &self,
        path: &NamespacePath,
        mut ns: Option<u64>,
        mut claim: Option<u64>,
        properties: Option<&BTreeMap<String, String>>,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let store = self.state.store.as_ref();
        let cat = &self.overlay.catalog_id;
        let ns_key = keys::namespace(cat, path);
        let claim_key = keys::namespace_claim(cat, path, &self.overlay.id);
        for attempt in 0..MAX_ATTEMPTS {
            if ns.is_some() && claim.is_some() {
                summary.namespaces.unchanged += 1;
                return Ok(());
            }
            let now = self.state.clock.now_rfc3339();
            let mut ops = Vec::new();
            let created = ns.is_none();
            let claim_body = to_body(&ClaimRecord {
                overlay_id: self.overlay.id.clone(),
                path: path.clone(),
                created_namespace: created,
            })?;
            match ns {
                None => {
                    if let Some(parent) = path.parent() {
                        ops.extend(self.namespace_ops(&parent).await?);
                    }
                    let rec = super::plan::namespace_record(
                        cat,
                        path,
                        properties.cloned().unwrap_or_default(),
                        &now,
                    );
                    ops.push(Op::create(ns_key.clone(), to_body(&rec)?));
                }
                Some(_) => {
                    // Claiming under a live delete guard could slip beneath the emptiness proof.
                    let g = keys::namespace_guard(cat, path);
                    match guard_state(
                        store,
                        g.clone(),
                        self.state.clock.now_ms(),
                        self.state.config.guard_lease_ms,
                    )
                    .await?
                    {
                        GuardState::Absent => ops.push(Op::check(g, Condition::Absent)),
                        GuardState::Abandoned { version } => ops.push(Op::delete_at(g, version)),
                        GuardState::Live => {
                            return Err(ReconcileError::Deleting(format!("namespace {path}")));
                        }
                    }
                    ops.push(Op::check(ns_key.clone(), Condition::Exists));
                }
            }
            ops.push(match claim {
                None => Op::create(claim_key.clone(), claim_body),
                Some(v) => Op::replace(claim_key.clone(), v, claim_body),
            });
            match self.commit(ops).await? {
                Commit::Applied => {
                    if created {
                        summary.namespaces.created += 1;
                    } else {
                        summary.namespaces.updated += 1;
                    }
                    return Ok(());
                }
                Commit::Reread => {
                    ns = store
                        .get(&ns_key, Consistency::Strong)
                        .await?
                        .map(|i| i.version);
                    claim = store
                        .get(&claim_key, Consistency::Strong)
                        .await?
                        .map(|i| i.version);
                    if attempt > 0 {
                        backoff(attempt).await;
                    }
                }
            }
        }
        Err(Error::unavailable(format!("claiming namespace {path} did not converge")).into())
    }

    // ---- relations ----------------------------------------------------------------------

    /// The change event of a publication or retirement by this overlay (nothing when the host
    /// turned events off), to ride in the same transaction.
    pub(crate) fn event_ops(
        &self,
        verb: &str,
        kind: RelationKind,
        slot: &Slot,
        record: Option<&RelationRecord>,
        destination: Option<&Slot>,
    ) -> Result<Vec<Op>, ReconcileError> {
        let operation = events::Operation {
            destination: destination.map(|(ns, name)| events::ObjectName {
                namespace: ns.segments().to_vec(),
                name: name.clone(),
            }),
            ..events::Operation::relation(
                &events::relation_type(verb, kind),
                &self.overlay.catalog_id,
                &slot.0,
                &slot.1,
            )
            .with_metadata_location(record.and_then(|r| r.metadata_location.as_deref()))
        };
        let account = &self.overlay.account_id;
        let actor = Some(events::Actor::overlay(&self.overlay.id));
        let op = match record {
            // A commit of the object: ordered by its record's revision within a seal batch.
            Some(r) if verb == "update" || verb == "replace" => {
                events::commit_op(self.state, account, actor, operation, r.revision)?
            }
            _ => events::event_op_by(self.state, account, actor, operation)?,
        };
        Ok(op.into_iter().collect())
    }

    fn action_ops(&self, action: &Action, dest: &Slot) -> Result<Vec<Op>, ReconcileError> {
        let mut ops = self.write_ops(action, dest)?;
        let update = |kind| match kind {
            RelationKind::Table => "update",
            RelationKind::View => "replace",
        };
        match action {
            Action::Unchanged | Action::Blocked(_) => {}
            Action::Create { record } => {
                ops.extend(self.event_ops("create", record.kind, dest, Some(record), None)?);
            }
            Action::Update { record, .. } => {
                let verb = update(record.kind);
                ops.extend(self.event_ops(verb, record.kind, dest, Some(record), None)?);
            }
            Action::ReplaceIdentity {
                record, old_kind, ..
            } => {
                ops.extend(self.event_ops("drop", *old_kind, dest, None, None)?);
                ops.extend(self.event_ops("create", record.kind, dest, Some(record), None)?);
            }
            Action::Move {
                from,
                record,
                replaced,
                ..
            } => {
                if let Some((_, old_kind)) = replaced {
                    ops.extend(self.event_ops("drop", *old_kind, dest, None, None)?);
                }
                ops.extend(self.event_ops(
                    "rename",
                    record.kind,
                    from,
                    Some(record),
                    Some(dest),
                )?);
            }
        }
        Ok(ops)
    }

    fn write_ops(&self, action: &Action, dest: &Slot) -> Result<Vec<Op>, ReconcileError> {
        let cat = &self.overlay.catalog_id;
        let dk = slot_key(cat, dest);
        Ok(match action {
            Action::Unchanged | Action::Blocked(_) => Vec::new(),
            Action::Create { record } => vec![Op::create(dk, to_body(record)?)],
            Action::Update {
                version, record, ..
            } => vec![Op::replace(dk, *version, to_body(record)?)],
            Action::ReplaceIdentity {
                version, record, ..
            } => vec![Op::replace(dk, *version, to_body(record)?)],
            Action::Move {
                from,
                from_version,
                record,
                replaced,
            } => {
                let put = match replaced {
                    Some((v, _)) => Op::replace(dk, *v, to_body(record)?),
                    None => Op::create(dk, to_body(record)?),
                };
                vec![Op::delete_at(slot_key(cat, from), *from_version), put]
            }
        })
    }

    /// Publishes every desired relation; answers how many could not be published.
    pub async fn publish_relations(
        &self,
        desired: &Desired,
        target: &TargetState,
        summary: &mut ReconcileSummary,
    ) -> Result<usize, ReconcileError> {
        let ctx = self.ctx();
        let wanted = desired.slots();
        let vacated =
            |from: &Slot| !wanted.contains(from) && !desired.conflict_slots.contains(from);
        let mut planned: Vec<(&DesiredRelation, Action)> =
            Vec::with_capacity(desired.relations.len());
        for d in &desired.relations {
            let slot = target.relations.get(&d.slot());
            let prior = target
                .ours_by_ext
                .get(&d.external_id)
                .and_then(|s| target.relations.get(s).map(|r| (s, r)));
            let action = decide(d, slot, prior, prior.is_some_and(|(s, _)| vacated(s)), &ctx);
            planned.push((d, action));
        }
        // Moves first, so an identity leaves its old slot before anything is created there.
        planned.sort_by_key(|(d, a)| {
            (
                !matches!(a, Action::Move { .. }),
                d.namespace.clone(),
                d.name.clone(),
            )
        });
        let mut failed = 0usize;
        let mut by_ns: Vec<(NamespacePath, Vec<(&DesiredRelation, Action)>)> = Vec::new();
        for (d, a) in planned {
            if let Action::Unchanged = a {
                tally(summary, d.kind, &a);
                continue;
            }
            match by_ns.last_mut() {
                Some((ns, items)) if *ns == d.namespace => items.push((d, a)),
                _ => by_ns.push((d.namespace.clone(), vec![(d, a)])),
            }
        }
        for (ns, items) in by_ns {
            let ns_ops = match self.namespace_ops(&ns).await {
                Ok(ops) => ops,
                Err(ReconcileError::Deleting(_)) => {
                    failed += items.len();
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut chunk: Vec<(&DesiredRelation, Action)> = Vec::new();
            let mut keys_in_chunk: HashSet<Key> = HashSet::new();
            let mut pending = items.into_iter().peekable();
            while pending.peek().is_some() || !chunk.is_empty() {
                let mut flush = false;
                if let Some((d, a)) = pending.peek() {
                    let ops = self.action_ops(a, &d.slot())?;
                    if chunk.len() >= self.per_tx
                        || ops.iter().any(|o| keys_in_chunk.contains(o.key()))
                    {
                        flush = true;
                    } else {
                        keys_in_chunk.extend(ops.iter().map(|o| o.key().clone()));
                        if let Some(item) = pending.next() {
                            chunk.push(item);
                        }
                    }
                } else {
                    flush = true;
                }
                if flush {
                    failed += self
                        .commit_chunk(std::mem::take(&mut chunk), &ns_ops, &ctx, desired, summary)
                        .await?;
                    keys_in_chunk.clear();
                }
            }
        }
        Ok(failed)
    }

    async fn commit_chunk(
        &self,
        chunk: Vec<(&DesiredRelation, Action)>,
        ns_ops: &[Op],
        ctx: &Ctx<'_>,
        desired: &Desired,
        summary: &mut ReconcileSummary,
    ) -> Result<usize, ReconcileError> {
        if chunk.is_empty() {
            return Ok(0);
        }
        let mut ops: Vec<Op> = ns_ops.to_vec();
        let mut blocked = 0;
        for (d, a) in &chunk {
            if let Action::Blocked(why) = a {
                tracing::warn!(overlay_id = %self.overlay.id, reason = %why, "relation not published");
                blocked += 1;
                continue;
            }
            ops.extend(self.action_ops(a, &d.slot())?);
        }
        if chunk.iter().any(|(_, a)| a.signals()) {
            ops.push(directory_bump(&self.overlay.catalog_id)?);
        }
        // A move carries its grants along, one relation per transaction (moves are rare).
        let moves = chunk.iter().any(|(_, a)| matches!(a, Action::Move { .. }));
        if ops.len() <= ns_ops.len() {
            return Ok(blocked);
        }
        if !moves {
            match self.commit(ops).await? {
                Commit::Applied => {
                    for (d, a) in &chunk {
                        self.applied(summary, d.kind, a);
                    }
                    return Ok(blocked);
                }
                Commit::Reread => {}
            }
        }
        // The batch lost a race somewhere, or moves an identity: publish each relation alone
        // from fresh reads.
        let mut failed = 0;
        for (d, _) in chunk {
            if !self.publish_one(d, ns_ops, ctx, desired, summary).await? {
                failed += 1;
            }
        }
        Ok(failed)
    }

    pub(crate) async fn read_slot(
        &self,
        slot: &Slot,
    ) -> Result<Option<Stored<RelationRecord>>, ReconcileError> {
        let item = self
            .state
            .store
            .get(
                &slot_key(&self.overlay.catalog_id, slot),
                Consistency::Strong,
            )
            .await?;
        Ok(match item {
            Some(i) => Some(Stored {
                value: i.json()?,
                version: i.version,
            }),
            None => None,
        })
    }

    /// Publishes one relation from fresh reads, retrying lost races. Answers whether it
    /// converged.
    async fn publish_one(
        &self,
        d: &DesiredRelation,
        ns_ops: &[Op],
        ctx: &Ctx<'_>,
        desired: &Desired,
        summary: &mut ReconcileSummary,
    ) -> Result<bool, ReconcileError> {
        let wanted = desired.slots();
        for attempt in 0..MAX_ATTEMPTS {
            let slot = self.read_slot(&d.slot()).await?;
            // Where this identity was last published, when it is stable: found by the
            // upstream path recorded on it (the slot it was published to).
            let prior = match (&slot, d.stable) {
                (Some(s), _)
                    if s.value
                        .managed_by
                        .as_ref()
                        .is_some_and(|m| m.external_id == d.external_id) =>
                {
                    None
                }
                (_, true) => self.find_prior(d).await?,
                _ => None,
            };
            let vacated = prior
                .as_ref()
                .is_some_and(|(s, _)| !wanted.contains(s) && !desired.conflict_slots.contains(s));
            let action = decide(
                d,
                slot.as_ref(),
                prior.as_ref().map(|(s, r)| (s, r)),
                vacated,
                ctx,
            );
            match &action {
                Action::Unchanged => {
                    tally(summary, d.kind, &action);
                    return Ok(true);
                }
                Action::Blocked(why) => {
                    tracing::warn!(overlay_id = %self.overlay.id, reason = %why, "relation not published");
                    return Ok(false);
                }
                _ => {}
            }
            let mut ops = ns_ops.to_vec();
            ops.extend(self.action_ops(&action, &d.slot())?);
            if action.signals() {
                ops.push(directory_bump(&self.overlay.catalog_id)?);
            }
            if let Action::Move { from, .. } = &action {
                // The grants naming the relation move with its identity.
                use flotilla_services::acl::Securable;
                let cat = &self.overlay.catalog_id;
                let to = d.slot();
                ops.extend(
                    flotilla_services::acl::move_ops(
                        self.state.store.as_ref(),
                        &self.state.acl,
                        &self.overlay.account_id,
                        &Securable::relation(cat, &from.0, &from.1, d.kind),
                        &Securable::relation(cat, &to.0, &to.1, d.kind),
                    )
                    .await?,
                );
            }
            match self.commit(ops).await? {
                Commit::Applied => {
                    self.applied(summary, d.kind, &action);
                    return Ok(true);
                }
                Commit::Reread => backoff(attempt).await,
            }
        }
        Ok(false)
    }

    /// The slot this overlay last published a stable identity to, by a strong scan of the
    /// catalog's relations (only on the slow path after a lost race).
    async fn find_prior(
        &self,
        d: &DesiredRelation,
    ) -> Result<Option<(Slot, Stored<RelationRecord>)>, ReconcileError> {
        let items = flotilla_services::service::strong_scan(
            self.state.store.as_ref(),
            &keys::catalog_pk(&self.overlay.catalog_id),
            keys::RELATION_PREFIX,
        )
        .await?;
        for item in items {
            let rec: RelationRecord = item.json()?;
            if rec
                .managed_by
                .as_ref()
                .is_some_and(|m| m.overlay_id == self.overlay.id && m.external_id == d.external_id)
            {
                let slot = (rec.namespace.clone(), rec.name.clone());
                return Ok(Some((
                    slot,
                    Stored {
                        value: rec,
                        version: item.version,
                    },
                )));
            }
        }
        Ok(None)
    }
}
