//! Retirement, the last stage of a run and only after every desired resource was
//! published: this overlay's relations the complete walk observed absent, then claims no
//! longer needed, then overlay-created namespaces left empty and unclaimed. Every delete
//! carries the run's fence, like publication.

use flotilla_domain::model::{ClaimRecord, RelationRecord};

use flotilla_domain::keys;
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Consistency, Op};

use super::plan::Desired;
use super::publish::{Commit, Publisher, counts_for, slot_key};
use super::target::{Slot, Stored, TargetState};
use super::{ReconcileError, ReconcileSummary};
use flotilla_base::error::Error;
use flotilla_base::store::{MAX_ATTEMPTS, backoff};
use flotilla_services::service::relations::directory_bump;

/// The most operations a retirement batch may use with its grants' deletions (the rest of
/// the transaction's 100 is the publication fence).
const MAX_RETIRE_OPS: usize = 90;

impl Publisher<'_> {
    /// Commits a batch retiring the relations at `slots` with the deletion of their grants;
    /// a batch that would outgrow one transaction with them answers `Reread`, so the caller
    /// retires its relations one by one.
    async fn commit_with_grants(
        &self,
        mut ops: Vec<Op>,
        slots: &[&Slot],
    ) -> Result<Commit, ReconcileError> {
        let grants = self.grant_ops(slots).await?;
        if grants.len() + ops.len() > MAX_RETIRE_OPS {
            return Ok(Commit::Reread);
        }
        ops.extend(grants);
        self.commit(ops).await
    }

    /// The operations that delete the grants naming the relations at `slots` (a retired
    /// relation takes its grants with it), with the account's grants generation check.
    async fn grant_ops(&self, slots: &[&Slot]) -> Result<Vec<Op>, ReconcileError> {
        use flotilla_domain::model::RelationKind;
        use flotilla_services::acl::Securable;
        let cat = &self.overlay.catalog_id;
        let securables: Vec<Securable> = slots
            .iter()
            .flat_map(|(ns, name)| {
                [RelationKind::Table, RelationKind::View]
                    .map(|k| Securable::relation(cat, ns, name, k))
            })
            .collect();
        Ok(flotilla_services::acl::cascade_ops_all(
            self.state.store.as_ref(),
            &self.state.acl,
            &self.overlay.account_id,
            &securables,
        )
        .await?)
    }

    /// Retires what the complete walk observed absent, after everything desired was
    /// published: this overlay's relations not in the inventory, then claims no longer needed (deepest first), pruning the
    /// overlay-created namespaces they leave empty and unclaimed.
    pub async fn retire(
        &self,
        desired: &Desired,
        target: &TargetState,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let wanted = desired.slots();
        let moved_from = self
            .moved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let cat = &self.overlay.catalog_id;
        let mut stale: Vec<(&Slot, &Stored<RelationRecord>)> = target
            .ours(&self.overlay.id)
            .filter(|(slot, _)| {
                !wanted.contains(*slot)
                    && !moved_from.contains(*slot)
                    && !desired.conflict_slots.contains(*slot)
            })
            .collect();
        stale.sort_by(|a, b| a.0.cmp(b.0));
        for batch in stale.chunks(self.per_tx) {
            let mut ops: Vec<Op> = batch
                .iter()
                .map(|(slot, r)| Op::delete_at(slot_key(cat, slot), r.version))
                .collect();
            for (slot, r) in batch {
                ops.extend(self.event_ops("drop", r.value.kind, slot, None, None)?);
            }
            ops.push(directory_bump(cat)?);
            let slots: Vec<&Slot> = batch.iter().map(|(slot, _)| *slot).collect();
            match self.commit_with_grants(ops, &slots).await? {
                Commit::Applied => {
                    for (_, r) in batch {
                        counts_for(summary, r.value.kind).retired += 1;
                    }
                }
                Commit::Reread => {
                    for (slot, _) in batch {
                        self.retire_one(slot, summary).await?;
                    }
                }
            }
        }
        self.release_claims(&desired.namespaces, target, summary)
            .await
    }

    /// Releases this overlay's claims on namespaces outside `needed` (deepest first) and
    /// prunes the overlay-created namespaces they leave empty and unclaimed.
    pub(crate) async fn release_claims(
        &self,
        needed: &std::collections::BTreeSet<NamespacePath>,
        target: &TargetState,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let cat = &self.overlay.catalog_id;
        let needed = |p: &NamespacePath| needed.contains(p);
        let mut release: Vec<(&NamespacePath, &Stored<ClaimRecord>)> =
            target.claims.iter().filter(|(p, _)| !needed(p)).collect();
        release.sort_by(|a, b| b.0.depth().cmp(&a.0.depth()).then(a.0.cmp(b.0)));
        let mut prune: Vec<NamespacePath> = Vec::new();
        for (path, claim) in release {
            let ck = keys::namespace_claim(cat, path, &self.overlay.id);
            match self
                .commit(vec![Op::delete_at(ck.clone(), claim.version)])
                .await?
            {
                Commit::Applied => summary.namespaces.retired += 1,
                Commit::Reread => {
                    if let Some(item) = self.state.store.get(&ck, Consistency::Strong).await?
                        && let Commit::Applied =
                            self.commit(vec![Op::delete_at(ck, item.version)]).await?
                    {
                        summary.namespaces.retired += 1;
                    }
                }
            }
            prune.push(path.clone());
        }
        // Overlay-created namespaces nobody claims any more (including ones a crashed run
        // released but did not prune), deepest first. Pruning re-proves emptiness under the
        // namespace's delete guard, so it never removes anything in use.
        for (path, ns) in &target.namespaces {
            if ns.value.created_by_overlay
                && !target.claimed_by_anyone.contains(path)
                && !needed(path)
            {
                prune.push(path.clone());
            }
        }
        prune.sort_by(|a, b| b.depth().cmp(&a.depth()).then(a.cmp(b)));
        prune.dedup();
        for path in prune {
            flotilla_services::service::overlays::prune_namespace(
                self.state,
                &self.overlay.account_id,
                cat,
                &path,
            )
            .await?;
        }
        Ok(())
    }

    /// Retires relations a checkpointed chain observed absent: each only when it is still at
    /// the version the chain saw (a relation changed since was seen present by someone and
    /// stays for the next run to decide).
    pub(crate) async fn retire_listed(
        &self,
        listed: &[(Slot, u64, flotilla_domain::model::RelationKind)],
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        let cat = &self.overlay.catalog_id;
        for batch in listed.chunks(self.per_tx) {
            let mut ops: Vec<Op> = batch
                .iter()
                .map(|(slot, v, _)| Op::delete_at(slot_key(cat, slot), *v))
                .collect();
            for (slot, _, kind) in batch {
                ops.extend(self.event_ops("drop", *kind, slot, None, None)?);
            }
            ops.push(directory_bump(cat)?);
            let slots: Vec<&Slot> = batch.iter().map(|(slot, _, _)| slot).collect();
            match self.commit_with_grants(ops, &slots).await? {
                Commit::Applied => {
                    for (_, _, kind) in batch {
                        counts_for(summary, *kind).retired += 1;
                    }
                }
                Commit::Reread => {
                    for (slot, v, kind) in batch {
                        let mut ops =
                            vec![Op::delete_at(slot_key(cat, slot), *v), directory_bump(cat)?];
                        ops.extend(self.event_ops("drop", *kind, slot, None, None)?);
                        ops.extend(self.grant_ops(&[slot]).await?);
                        if let Commit::Applied = self.commit(ops).await? {
                            counts_for(summary, *kind).retired += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn retire_one(
        &self,
        slot: &Slot,
        summary: &mut ReconcileSummary,
    ) -> Result<(), ReconcileError> {
        for attempt in 0..MAX_ATTEMPTS {
            let Some(cur) = self.read_slot(slot).await? else {
                return Ok(());
            };
            if cur
                .value
                .managed_by
                .as_ref()
                .is_none_or(|m| m.overlay_id != self.overlay.id)
            {
                return Ok(());
            }
            let mut ops = vec![
                Op::delete_at(slot_key(&self.overlay.catalog_id, slot), cur.version),
                directory_bump(&self.overlay.catalog_id)?,
            ];
            ops.extend(self.event_ops("drop", cur.value.kind, slot, None, None)?);
            ops.extend(self.grant_ops(&[slot]).await?);
            match self.commit(ops).await? {
                Commit::Applied => {
                    counts_for(summary, cur.value.kind).retired += 1;
                    return Ok(());
                }
                Commit::Reread => backoff(attempt).await,
            }
        }
        Err(Error::unavailable("retirement did not converge").into())
    }
}
