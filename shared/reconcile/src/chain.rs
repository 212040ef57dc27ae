//! Checkpointed runs: a reconciliation longer than one invocation continues in follow-up
//! queue messages (`docs/reconciliation.md`, "Checkpointed runs").
//!
//! A queued run (a plan job, or one overlay's message) discovers its namespaces in batches
//! (of one namespace, doubling up to [`NAMESPACES_PER_BATCH`]). When every batch fits in the first half of the time budget,
//! the run is exactly a single run: the complete inventory goes through preflight,
//! publication and retirement at once. Otherwise the run becomes a **chain** of legs:
//!
//! - leg 1 records the upstream namespace list of the walk and publishes what it discovered;
//! - every leg then publishes batch after batch (each batch all or nothing: a batch cut by
//!   the budget is dropped and done again by the next leg) until its budget is spent,
//!   records the retirement candidates it found (this overlay's relations absent upstream in
//!   the namespaces it completed, with the item version it saw) and writes the checkpoint,
//!   then answers the follow-up message naming the chain and the next leg;
//! - the leg that completes the namespace list retires: the candidates still at the version
//!   seen, this overlay's relations outside the namespaces of the list, the claims no longer
//!   needed; then it records the status and deletes the checkpoint.
//!
//! The checkpoint is a small head item (`CKPT#{subject}`) and chunked blobs below it (the
//! namespace list, written once, and one blob per leg with the members' progress and that
//! leg's candidates), so what a leg writes grows with the changes it found, not with the
//! table count. Every leg asserts the head's version when it advances it, so two deliveries
//! of one leg cannot both advance the chain, and every leg compares the overlay and
//! integration item versions (and the plan generation) with those the chain started under:
//! any change stops the chain.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use flotilla_base::error::{Error, Result as ApiResult};
use flotilla_base::store::{read, to_body};
use flotilla_catalog_access::spi::CatalogClient;
use flotilla_domain::keys;
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::NamespacePath;
use flotilla_domain::selection::Selection;
use flotilla_metastore::{Consistency, MetastoreError, Op, Query, Transaction, query_all};
use flotilla_services::service::schedule as sched;
use flotilla_services::state::AppState;
use serde::{Deserialize, Serialize};

use super::discover::{self, Discovered, Dropped, Walk};
pub use super::message::CheckpointRef;
use super::share::{SharedHints, share};
use super::target::{Slot, TargetState};
use super::{
    Connector, KindCounts, ObservedRecords, ReconcileError, ReconcileSummary, RunOptions, Stage,
    bounds, finish, materialize, new_summary, observe, plan, preflight, publish, selection_of,
};

/// Namespaces whose content one batch discovers (and, in a chain, publishes) at once.
pub const NAMESPACES_PER_BATCH: usize = 64;
/// Characters of a checkpoint blob per chunk item (far below the 400 KB item limit).
const CHUNK_CHARS: usize = 64 * 1024;
/// The leg keeps `1 / CLOSING_SHARE` of its budget for its closing work.
const CLOSING_SHARE: i64 = 10;

/// Chunks written per transaction.
const CHUNKS_PER_TX: usize = 8;

/// The head of a chain (`CKPT#{subject}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Head {
    run: String,
    /// The plan generation (plan jobs) or overlay generation the chain runs under.
    generation: u64,
    /// The next leg to run.
    leg: u32,
    /// Index in the namespace list of the first namespace not completed.
    next: usize,
    namespaces: usize,
    ns_chunks: u32,
    started_ms: i64,
    stable_ids: bool,
    views: bool,
    dropped_namespaces: u64,
    /// One blob per completed leg (tag, chunks); the last one holds the members' progress.
    legs: Vec<(String, u32)>,
}

/// One overlay's progress in a chain.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct MemberState {
    overlay_id: String,
    overlay_version: u64,
    integration_version: u64,
    /// Finished early (a permanent failure already recorded in its status).
    done: bool,
    namespaces: KindCounts,
    tables: KindCounts,
    views: KindCounts,
    dropped: Dropped,
}

/// A relation a leg observed absent upstream in a namespace it completed.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Candidate {
    /// Member index.
    m: u32,
    /// Index in the namespace list.
    ns: u32,
    name: String,
    /// The item version seen: retired only if still at it.
    v: u64,
    view: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LegBlob {
    members: Vec<MemberState>,
    candidates: Vec<Candidate>,
    /// Namespaces of the list the upstream no longer had (indices).
    vanished: Vec<u32>,
}

/// A chain as a leg reads it.
pub(crate) struct Chain {
    head: Head,
    version: u64,
    members: Vec<MemberState>,
    namespaces: Vec<NamespacePath>,
    candidates: Vec<Candidate>,
    vanished: BTreeSet<u32>,
}

impl Chain {
    /// The chain's id.
    pub(crate) fn run(&self) -> &str {
        &self.head.run
    }
}

/// What a chain runs for: a plan job (`INT#{integration}`) or one overlay (`OVL#{overlay}`).
pub(crate) struct Subject<'a> {
    pub account: &'a str,
    pub key: String,
    pub generation: u64,
    /// A plan job's integration: its plan generation must still be `generation` before
    /// anything is published.
    pub plan: Option<&'a str>,
}

/// What the checkpoint says about a message.
pub(crate) enum Located {
    /// No chain: run a fresh one.
    Fresh,
    /// Run the chain's next leg.
    Run(Box<Chain>),
    /// The message's leg is done (a redelivery, or the follow-up was never sent): send the
    /// follow-up for the chain's next leg again.
    Resend(CheckpointRef),
    /// The chain the message names is gone or was replaced.
    Stale,
}

fn chunk_prefix(subject: &str, tag: &str) -> String {
    format!("{}{tag}#", keys::checkpoint_chunks_prefix(subject))
}

/// Writes `value` as chunk items below the head; answers the chunk count.
async fn write_blob<T: Serialize>(
    state: &AppState,
    subj: &Subject<'_>,
    tag: &str,
    value: &T,
) -> ApiResult<u32> {
    let text = serde_json::to_string(value).map_err(|e| Error::internal(format!("encode: {e}")))?;
    let mut parts: Vec<&str> = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(CHUNK_CHARS);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (a, b) = rest.split_at(cut);
        parts.push(a);
        rest = b;
    }
    let mut ops = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        ops.push(Op::put(
            keys::checkpoint_chunk(subj.account, &subj.key, tag, n),
            to_body(&serde_json::json!({ "part": part }))?,
        ));
    }
    for group in ops.chunks(CHUNKS_PER_TX) {
        state
            .store
            .transact(Transaction {
                ops: group.to_vec(),
            })
            .await?;
    }
    Ok(u32::try_from(parts.len()).unwrap_or(u32::MAX))
}

async fn read_blob<T: for<'de> Deserialize<'de> + Default>(
    state: &AppState,
    subj: &Subject<'_>,
    tag: &str,
    chunks: u32,
) -> ApiResult<T> {
    if chunks == 0 {
        return Ok(T::default());
    }
    let items = query_all(
        state.store.as_ref(),
        Query::new(
            keys::account_pk(subj.account),
            chunk_prefix(&subj.key, tag),
            Consistency::Strong,
        ),
    )
    .await?;
    if items.len() != chunks as usize {
        return Err(Error::internal(format!(
            "checkpoint blob {tag} has {} of its {chunks} chunks",
            items.len()
        )));
    }
    let mut text = String::new();
    for item in items {
        let v: serde_json::Value = item.json()?;
        text.push_str(v["part"].as_str().unwrap_or_default());
    }
    serde_json::from_str(&text).map_err(|e| Error::internal(format!("checkpoint {tag}: {e}")))
}

/// Deletes the chain `run` of the subject: its chunks, then its head (when still it).
pub(crate) async fn delete_chain(state: &AppState, subj: &Subject<'_>, run: &str) -> ApiResult<()> {
    let store = state.store.as_ref();
    let head_key = keys::checkpoint_head(subj.account, &subj.key);
    let items = query_all(
        store,
        Query::new(
            keys::account_pk(subj.account),
            chunk_prefix(&subj.key, run),
            Consistency::Strong,
        ),
    )
    .await?;
    let ops: Vec<Op> = items.into_iter().map(|i| Op::delete(i.key)).collect();
    for group in ops.chunks(25) {
        store
            .transact(Transaction {
                ops: group.to_vec(),
            })
            .await?;
    }
    if let Some(h) = read::<Head>(store, head_key.clone(), Consistency::Strong).await?
        && h.value.run == run
    {
        match store
            .transact(Transaction::new().with(Op::delete_at(head_key, h.version)))
            .await
        {
            Ok(()) | Err(MetastoreError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads the subject's chain and decides what `msg` (the checkpoint a message names, `None`
/// for a message that starts a run) does with it.
pub(crate) async fn locate(
    state: &AppState,
    subj: &Subject<'_>,
    msg: Option<&CheckpointRef>,
) -> ApiResult<Located> {
    let store = state.store.as_ref();
    let head_key = keys::checkpoint_head(subj.account, &subj.key);
    let Some(h) = read::<Head>(store, head_key, Consistency::Strong).await? else {
        return Ok(match msg {
            None => Located::Fresh,
            Some(_) => Located::Stale,
        });
    };
    let head = h.value;
    if head.generation != subj.generation {
        // A chain of an older configuration: it stops here.
        if head.generation < subj.generation {
            delete_chain(state, subj, &head.run).await?;
        }
        return Ok(match msg {
            None if head.generation < subj.generation => Located::Fresh,
            _ => Located::Stale,
        });
    }
    let current = CheckpointRef {
        run: head.run.clone(),
        leg: head.leg,
    };
    match msg {
        // A run of this configuration is already in a chain: continue it.
        None => return Ok(Located::Resend(current)),
        Some(m) if m.run != head.run || m.leg > head.leg => return Ok(Located::Stale),
        Some(m) if m.leg < head.leg => return Ok(Located::Resend(current)),
        Some(_) => {}
    }
    let namespaces: Vec<Vec<String>> =
        read_blob(state, subj, &format!("{}#NS", head.run), head.ns_chunks).await?;
    let namespaces = namespaces
        .into_iter()
        .map(NamespacePath::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::internal(format!("checkpoint namespace list: {e}")))?;
    let mut members = Vec::new();
    let mut candidates = Vec::new();
    let mut vanished = BTreeSet::new();
    for (tag, chunks) in &head.legs {
        let blob: LegBlob = read_blob(state, subj, tag, *chunks).await?;
        members = blob.members;
        candidates.extend(blob.candidates);
        vanished.extend(blob.vanished);
    }
    Ok(Located::Run(Box::new(Chain {
        head,
        version: h.version,
        members,
        namespaces,
        candidates,
        vanished,
    })))
}

/// What one leg came to.
#[derive(Default)]
pub(crate) struct LegOutcome {
    /// Overlays whose run ended in this leg (their status is recorded).
    pub results: Vec<(String, Result<ReconcileSummary, ReconcileError>)>,
    /// The chain continues in this leg.
    pub next: Option<CheckpointRef>,
    /// Discovery passes started (one per leg).
    pub discoveries: usize,
    /// Another delivery advanced the chain first: this one publishes nothing more.
    pub lost: bool,
}

/// One overlay during a leg.
struct Member {
    index: usize,
    observed: ObservedRecords,
    selection: Selection,
    fence: publish::Fence,
    target: TargetState,
    summary: ReconcileSummary,
    /// Set when the overlay's run ended in this leg.
    result: Option<Result<(), (Stage, ReconcileError)>>,
}

fn instant_at(state: &AppState, started_ms: i64) -> Instant {
    let ago = state.clock.now_ms().saturating_sub(started_ms).max(0);
    Instant::now()
        .checked_sub(Duration::from_millis(u64::try_from(ago).unwrap_or(0)))
        .unwrap_or_else(Instant::now)
}

/// An overlay whose run ended in this leg: its summary and result, to be recorded.
type Ended = (
    String,
    ReconcileSummary,
    Result<(), (Stage, ReconcileError)>,
);

fn ended(m: Member) -> Ended {
    let result = m.result.unwrap_or(Ok(()));
    (m.observed.overlay.id, m.summary, result)
}

/// Records every ended run's outcome in its overlay's status.
async fn finish_all(
    state: &AppState,
    subj: &Subject<'_>,
    runs: Vec<Ended>,
    started_ms: i64,
    out: &mut LegOutcome,
) {
    for (id, summary, result) in runs {
        let r = finish(
            state,
            subj.account,
            &id,
            summary,
            instant_at(state, started_ms),
            started_ms,
            result,
        )
        .await;
        out.results.push((id, r));
    }
}

async fn plan_current(state: &AppState, subj: &Subject<'_>) -> Result<(), ReconcileError> {
    let Some(integration) = subj.plan else {
        return Ok(());
    };
    match sched::load(state.store.as_ref(), subj.account, integration).await {
        Ok(Some(s)) if s.value.plan_generation == subj.generation => Ok(()),
        Ok(_) => Err(ReconcileError::FenceLost),
        Err(e) => Err(ReconcileError::Api(e)),
    }
}

/// Concatenates batches of one walk into one inventory.
fn merge(parts: Vec<Discovered>) -> Discovered {
    let mut out = Discovered::default();
    for p in parts {
        out.stable_ids = p.stable_ids;
        out.namespaces.extend(p.namespaces);
        out.namespace_properties.extend(p.namespace_properties);
        out.tables.extend(p.tables);
        out.views.extend(p.views);
        out.both.extend(p.both);
        out.invalid.extend(p.invalid);
        out.vanished.extend(p.vanished);
        out.dropped.namespaces += p.dropped.namespaces;
        out.dropped.tables += p.dropped.tables;
        out.dropped.views += p.dropped.views;
    }
    out
}

fn is_deadline(e: &ReconcileError) -> bool {
    matches!(
        e,
        ReconcileError::Exceeded(bounds::Exceeded::Deadline { .. })
    )
}

/// Prepares the members of a leg: selection, fence and target of each observed overlay.
async fn prepare(
    state: &AppState,
    subj: &Subject<'_>,
    observed: Vec<(usize, ObservedRecords)>,
    started_ms: i64,
    done: &mut Vec<Ended>,
) -> Vec<Member> {
    let mut out = Vec::new();
    for (index, o) in observed {
        let summary = new_summary(&o, started_ms);
        let prepared = async {
            let selection = selection_of(&o.overlay)?;
            let fence = publish::Fence::establish(state, subj.account, &o)
                .await
                .map_err(|e| (Stage::Connect, e))?;
            let target = TargetState::load(state.store.as_ref(), &o.overlay)
                .await
                .map_err(|e| (Stage::Discovery, ReconcileError::Api(e)))?;
            Ok::<_, (Stage, ReconcileError)>((selection, fence, target))
        }
        .await;
        match prepared {
            Ok((selection, fence, target)) => out.push(Member {
                index,
                observed: o,
                selection,
                fence,
                target,
                summary,
                result: None,
            }),
            Err(e) => done.push((o.overlay.id, summary, Err(e))),
        }
    }
    out
}

/// Publishes one part of a chain for one member; answers the retirement candidates.
async fn publish_part(
    state: &AppState,
    m: &mut Member,
    part: &Discovered,
    processed: &[NamespacePath],
    opts: &RunOptions,
) -> Result<Vec<(Slot, u64, RelationKind)>, (Stage, ReconcileError)> {
    let at = |stage: Stage| move |e: ReconcileError| (stage, e);
    let mine = share(part, &m.selection);
    let overlay = &m.observed.overlay;
    m.summary.dropped.namespaces += mine.dropped.namespaces;
    m.summary.dropped.tables += mine.dropped.tables;
    m.summary.dropped.views += mine.dropped.views;
    let desired = preflight::preflight(&mine, &m.target, overlay);
    if !desired.conflicts.is_empty() {
        let mut list = desired.conflicts;
        list.sort_by(|a, b| a.path.cmp(&b.path));
        return Err((Stage::Preflight, ReconcileError::Conflicts(list)));
    }
    let ctx = plan::Ctx {
        overlay,
        integration: &m.observed.integration,
        now: state.clock.now_rfc3339(),
    };
    preflight::check_storable(&desired, &mine, &ctx).map_err(at(Stage::Preflight))?;
    let publisher = publish::Publisher::new(
        state,
        overlay,
        &m.observed.integration,
        m.fence.clone(),
        opts,
    );
    publisher
        .publish_namespaces(&desired, &mine, &m.target, &mut m.summary)
        .await
        .map_err(at(Stage::Publication))?;
    let failed = publisher
        .publish_relations(&desired, &m.target, &mut m.summary)
        .await
        .map_err(at(Stage::Publication))?;
    if failed > 0 {
        return Err((Stage::Publication, ReconcileError::Incomplete { failed }));
    }
    let wanted = desired.slots();
    let moved = publisher
        .moved
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let processed: HashSet<&NamespacePath> = processed
        .iter()
        .filter(|n| m.selection.selects(n))
        .collect();
    Ok(m.target
        .ours(&overlay.id)
        .filter(|(slot, _)| {
            processed.contains(&slot.0)
                && !wanted.contains(*slot)
                && !desired.conflict_slots.contains(*slot)
                && !moved.contains(*slot)
        })
        .map(|(slot, r)| (slot.clone(), r.version, r.value.kind))
        .collect())
}

/// The final step of a chain for one member: retirement after the complete namespace list.
async fn retire_member(
    state: &AppState,
    m: &mut Member,
    listed: Vec<(Slot, u64, RelationKind)>,
    selected: &BTreeSet<NamespacePath>,
    opts: &RunOptions,
) -> Result<(), (Stage, ReconcileError)> {
    let overlay = &m.observed.overlay;
    let publisher = publish::Publisher::new(
        state,
        overlay,
        &m.observed.integration,
        m.fence.clone(),
        opts,
    );
    let mut seen: HashSet<Slot> = listed.iter().map(|(s, _, _)| s.clone()).collect();
    let mut all = listed;
    for (slot, r) in m.target.ours(&overlay.id) {
        if !selected.contains(&slot.0) && seen.insert(slot.clone()) {
            all.push((slot.clone(), r.version, r.value.kind));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    publisher
        .retire_listed(&all, &mut m.summary)
        .await
        .map_err(|e| (Stage::Retirement, e))?;
    let mut needed = BTreeSet::new();
    for ns in selected {
        let mut p = Some(ns.clone());
        while let Some(cur) = p {
            p = cur.parent();
            needed.insert(cur);
        }
    }
    publisher
        .release_claims(&needed, &m.target, &mut m.summary)
        .await
        .map_err(|e| (Stage::Retirement, e))
}

/// Runs one leg: a fresh run (`chain` is `None`, `observed` its overlays) or the next leg
/// of `chain` (the chain's live members are observed again and must be unchanged).
pub(crate) async fn run_leg(
    state: &AppState,
    connector: &dyn Connector,
    subj: &Subject<'_>,
    observed: Vec<ObservedRecords>,
    chain: Option<Box<Chain>>,
    opts: &RunOptions,
) -> LegOutcome {
    let mut out = LegOutcome::default();
    let leg_started_ms = state.clock.now_ms();
    let started_ms = chain.as_ref().map_or(leg_started_ms, |c| c.head.started_ms);
    let mut done: Vec<Ended> = Vec::new();

    // The members: fresh ones, or the chain's, observed again and compared.
    let observed: Vec<(usize, ObservedRecords)> = match &chain {
        None => observed.into_iter().enumerate().collect(),
        Some(c) => {
            let mut again = Vec::new();
            let mut stopped = false;
            for (i, ms) in c.members.iter().enumerate().filter(|(_, m)| !m.done) {
                match observe(state, subj.account, &ms.overlay_id).await {
                    Ok(o)
                        if o.overlay_version == ms.overlay_version
                            && o.integration_version == ms.integration_version =>
                    {
                        again.push((i, o));
                    }
                    Ok(o) => {
                        stopped = true;
                        again.push((i, o));
                    }
                    Err(_) => stopped = true,
                }
            }
            if stopped || plan_current(state, subj).await.is_err() {
                // A change between two legs: the chain stops, nothing more is published;
                // the next schedule starts afresh.
                tracing::info!(subject = %subj.key, "a checkpointed run's fence changed; the chain stops");
                if let Err(e) = delete_chain(state, subj, &c.head.run).await {
                    tracing::warn!(error = %e, "the stopped chain's checkpoint was not deleted");
                }
                let runs = again
                    .into_iter()
                    .map(|(_, o)| {
                        let summary = new_summary(&o, started_ms);
                        let lost = Err((Stage::Connect, ReconcileError::FenceLost));
                        (o.overlay.id, summary, lost)
                    })
                    .collect();
                finish_all(state, subj, runs, started_ms, &mut out).await;
                return out;
            }
            again
        }
    };
    let mut members = prepare(state, subj, observed, started_ms, &mut done).await;
    if let Some(c) = &chain {
        for m in &mut members {
            let ms = &c.members[m.index];
            m.summary.namespaces = ms.namespaces;
            m.summary.tables = ms.tables;
            m.summary.views = ms.views;
            m.summary.dropped = ms.dropped;
        }
    }
    if members.is_empty() {
        finish_all(state, subj, done, started_ms, &mut out).await;
        return out;
    }
    let integration = members[0].observed.integration.clone();
    let client = match connector.connect(state, &integration).await {
        Ok(c) => c,
        Err(e) => {
            for m in members {
                done.push((
                    m.observed.overlay.id,
                    m.summary,
                    Err((Stage::Connect, e.clone())),
                ));
            }
            finish_all(state, subj, done, started_ms, &mut out).await;
            return out;
        }
    };
    let mut limits = state.config.reconcile.clone();
    if let Some(d) = opts.deadline_ms {
        limits.run_budget_ms = limits
            .run_budget_ms
            .min(d.saturating_sub(leg_started_ms))
            .max(1);
    }
    // The leg's closing work (publishing the batch in hand, the checkpoint, the statuses)
    // runs after its discovery stops: a tenth of the budget is kept for it, so the leg ends
    // within the budget rather than after it.
    limits.run_budget_ms = limits
        .run_budget_ms
        .saturating_sub(limits.run_budget_ms / CLOSING_SHARE)
        .max(1);
    let budget = bounds::Budget::new(state.clock.clone(), leg_started_ms, limits);
    out.discoveries += 1;
    let result = match chain {
        None => fresh(state, subj, client.as_ref(), &mut members, &budget, opts).await,
        Some(c) => {
            continued(
                state,
                subj,
                client.as_ref(),
                &mut members,
                *c,
                &budget,
                opts,
            )
            .await
        }
    };
    match result {
        Ok(LegEnd::Finished) => {}
        Ok(LegEnd::Next(next)) => {
            // Members that ended early have their status; the others continue.
            out.next = Some(next);
            members.retain(|m| m.result.is_some());
        }
        Ok(LegEnd::Lost) => {
            out.lost = true;
            members.retain(|m| m.result.is_some());
        }
        Err(e) => {
            for m in &mut members {
                if m.result.is_none() {
                    m.result = Some(Err(e.clone()));
                }
            }
        }
    }
    done.extend(members.into_iter().map(ended));
    finish_all(state, subj, done, started_ms, &mut out).await;
    out
}

/// The size of a leg's next batch: one namespace first, then double, but no more than the
/// time left is expected to fit at the pace of the batches so far (a batch cut by the budget
/// is done again by the next leg, so a good guess saves upstream requests).
struct Pace {
    size: usize,
    max: usize,
    /// Milliseconds per namespace of the batches so far (discovery and publication).
    per_namespace_ms: Option<f64>,
}

impl Pace {
    fn new(opts: &RunOptions) -> Self {
        Self {
            size: 1,
            max: opts.namespaces_per_batch.max(1),
            per_namespace_ms: None,
        }
    }

    /// The next batch's size with `left_ms` of budget left; `None` when nothing more is
    /// expected to fit (only once the leg made progress).
    fn next_size(&mut self, left_ms: i64, progressed: bool) -> Option<usize> {
        let size = self.size;
        self.size = (self.size * 2).min(self.max);
        if !progressed {
            return Some(size);
        }
        if left_ms <= 0 {
            return None;
        }
        match self.per_namespace_ms {
            Some(p) if p > 0.0 => {
                // Aim at 90% of what is left.
                let fit = (left_ms as f64 * 0.9 / p) as usize;
                if fit == 0 { None } else { Some(size.min(fit)) }
            }
            _ => Some(size),
        }
    }

    fn record(&mut self, namespaces: usize, ms: i64) {
        if namespaces > 0 {
            let p = ms.max(0) as f64 / namespaces as f64;
            self.per_namespace_ms = Some(match self.per_namespace_ms {
                // Follow the latest batches more than the first ones.
                Some(old) => (old + p * 3.0) / 4.0,
                None => p,
            });
        }
    }
}

enum LegEnd {
    /// Every member's run ended (results set, or success).
    Finished,
    /// The checkpoint was written: continue with this follow-up.
    Next(CheckpointRef),
    /// Another delivery advanced the chain first.
    Lost,
}

/// The hints of a batch: conditional loads and namespace properties over all live members.
fn hints(members: &[Member]) -> SharedHints<'_> {
    SharedHints {
        members: members
            .iter()
            .filter(|m| m.result.is_none())
            .map(|m| (&m.selection, &m.target, m.observed.overlay.id.as_str()))
            .collect(),
    }
}

/// Leg 1: batches are discovered without publishing while the first half of the budget
/// lasts; when the whole walk fits, this is a single run.
async fn fresh(
    state: &AppState,
    subj: &Subject<'_>,
    client: &dyn CatalogClient,
    members: &mut [Member],
    budget: &bounds::Budget,
    opts: &RunOptions,
) -> Result<LegEnd, (Stage, ReconcileError)> {
    let started_ms = state.clock.now_ms();
    let half = budget.limits().run_budget_ms / 2;
    let scope: Vec<Selection> = members.iter().map(|m| m.selection.clone()).collect();
    let walked = discover::walk(client, &scope, opts, budget)
        .await
        .map_err(|e| (Stage::Discovery, e))?;
    let mut parts = Vec::new();
    let mut next = 0;
    let mut pace = Pace::new(opts);
    while next < walked.namespaces.len() {
        let left = half.saturating_sub(state.clock.now_ms().saturating_sub(started_ms));
        let Some(size) = pace.next_size(left, next > 0) else {
            break;
        };
        let end = (next + size).min(walked.namespaces.len());
        let batch_started = state.clock.now_ms();
        let h = hints(members);
        match discover::contents(
            client,
            &walked,
            &walked.namespaces[next..end],
            &h,
            opts,
            budget,
            false,
        )
        .await
        {
            Ok(d) => parts.push(d),
            Err(e) if is_deadline(&e) && next > 0 => break,
            Err(e) => return Err((Stage::Discovery, e)),
        }
        pace.record(
            end - next,
            state.clock.now_ms().saturating_sub(batch_started),
        );
        next = end;
    }
    let mut found = merge(parts);
    found.invalid = walked.invalid.clone();
    if next == walked.namespaces.len() {
        // The whole walk fitted: a single run.
        found.dropped.namespaces += walked.dropped_namespaces;
        found.stable_ids = walked.stable_ids;
        budget
            .check_time()
            .map_err(|e| (Stage::Discovery, ReconcileError::Exceeded(e)))?;
        for m in members.iter_mut() {
            if let Err(e) = plan_current(state, subj).await {
                m.result = Some(Err((Stage::Publication, e)));
                continue;
            }
            let mine = share(&found, &m.selection);
            let r = materialize(
                state,
                &m.observed,
                m.fence.clone(),
                &m.target,
                &mine,
                budget,
                opts,
                &mut m.summary,
            )
            .await;
            m.result = Some(r);
        }
        return Ok(LegEnd::Finished);
    }
    // A chain: publish what was discovered, then continue batch by batch.
    let run = flotilla_domain::names::new_id();
    let head = Head {
        run: run.clone(),
        generation: subj.generation,
        leg: 1,
        next: 0,
        namespaces: walked.namespaces.len(),
        ns_chunks: 0,
        started_ms,
        stable_ids: walked.stable_ids,
        views: walked.views,
        dropped_namespaces: walked.dropped_namespaces,
        legs: Vec::new(),
    };
    // The chain's members are the overlays that got this far (indices into its state).
    for (i, m) in members.iter_mut().enumerate() {
        m.index = i;
    }
    let states: Vec<MemberState> = members
        .iter()
        .map(|m| MemberState {
            overlay_id: m.observed.overlay.id.clone(),
            overlay_version: m.observed.overlay_version,
            integration_version: m.observed.integration_version,
            done: false,
            namespaces: KindCounts::default(),
            tables: KindCounts::default(),
            views: KindCounts::default(),
            dropped: Dropped {
                namespaces: walked.dropped_namespaces,
                ..Dropped::default()
            },
        })
        .collect();
    for m in members.iter_mut() {
        m.summary.dropped.namespaces += walked.dropped_namespaces;
    }
    let chain = Chain {
        head,
        version: 0,
        members: states,
        namespaces: walked.namespaces.clone(),
        candidates: Vec::new(),
        vanished: BTreeSet::new(),
    };
    let first = Some((found, next));
    advance(
        state, subj, client, members, chain, &walked, first, budget, opts,
    )
    .await
}

/// A later leg of `chain`.
async fn continued(
    state: &AppState,
    subj: &Subject<'_>,
    client: &dyn CatalogClient,
    members: &mut [Member],
    chain: Chain,
    budget: &bounds::Budget,
    opts: &RunOptions,
) -> Result<LegEnd, (Stage, ReconcileError)> {
    let walked = Walk {
        namespaces: chain.namespaces.clone(),
        invalid: Vec::new(),
        dropped_namespaces: chain.head.dropped_namespaces,
        stable_ids: chain.head.stable_ids,
        views: chain.head.views,
    };
    advance(
        state, subj, client, members, chain, &walked, None, budget, opts,
    )
    .await
}

/// Publishes `first` (leg 1's discovered part, ending at namespace index `first.1`), then
/// batch after batch while the budget lasts; retires at the end of the list, else writes
/// the checkpoint.
#[allow(clippy::too_many_arguments)]
async fn advance(
    state: &AppState,
    subj: &Subject<'_>,
    client: &dyn CatalogClient,
    members: &mut [Member],
    mut chain: Chain,
    walked: &Walk,
    first: Option<(Discovered, usize)>,
    budget: &bounds::Budget,
    opts: &RunOptions,
) -> Result<LegEnd, (Stage, ReconcileError)> {
    let index: HashMap<NamespacePath, u32> = chain
        .namespaces
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), u32::try_from(i).unwrap_or(u32::MAX)))
        .collect();
    let mut new_candidates: Vec<Candidate> = Vec::new();
    let mut new_vanished: Vec<u32> = Vec::new();
    let mut next = chain.head.next;
    let mut progressed = false;
    let mut pace = Pace::new(opts);
    let mut pending = first;
    loop {
        let batch_started = state.clock.now_ms();
        let first_part = pending.is_some();
        let (part, end) = match pending.take() {
            Some(p) => p,
            None => {
                if next >= chain.namespaces.len() {
                    break;
                }
                let left = i64::try_from(budget.remaining().as_millis()).unwrap_or(i64::MAX);
                let Some(size) = pace.next_size(left, progressed) else {
                    break;
                };
                let end = (next + size).min(chain.namespaces.len());
                let h = hints(members);
                match discover::contents(
                    client,
                    walked,
                    &chain.namespaces[next..end],
                    &h,
                    opts,
                    budget,
                    true,
                )
                .await
                {
                    Ok(d) => (d, end),
                    // The budget is spent: this batch is done again by the next leg.
                    Err(e) if is_deadline(&e) && progressed => break,
                    Err(e) => return Err((Stage::Discovery, e)),
                }
            }
        };
        let processed = &chain.namespaces[next..end];
        plan_current(state, subj)
            .await
            .map_err(|e| (Stage::Publication, e))?;
        for v in &part.vanished {
            if let Some(i) = index.get(v) {
                new_vanished.push(*i);
            }
        }
        for m in members.iter_mut().filter(|m| m.result.is_none()) {
            match publish_part(state, m, &part, processed, opts).await {
                Ok(list) => {
                    let mi = u32::try_from(m.index).unwrap_or(u32::MAX);
                    new_candidates.extend(list.into_iter().map(|(slot, v, kind)| Candidate {
                        m: mi,
                        ns: index.get(&slot.0).copied().unwrap_or(u32::MAX),
                        name: slot.1,
                        v,
                        view: kind == RelationKind::View,
                    }));
                }
                // A permanent failure ends this overlay's run (recorded); a transient one
                // fails the leg, which its redelivery runs again from the checkpoint.
                Err(e) if !e.1.is_retryable() => m.result = Some(Err(e)),
                Err(e) => return Err(e),
            }
        }
        if !first_part {
            // (leg 1's first part was discovered earlier: its pace is not this one's)
            pace.record(
                end - next,
                state.clock.now_ms().saturating_sub(batch_started),
            );
        }
        progressed = true;
        next = end;
    }
    let complete = next >= chain.namespaces.len();
    let live = members.iter().any(|m| m.result.is_none());
    if complete || !live {
        if live {
            let mut vanished = chain.vanished.clone();
            vanished.extend(new_vanished.iter().copied());
            let all: Vec<Candidate> = chain
                .candidates
                .iter()
                .cloned()
                .chain(new_candidates.iter().cloned())
                .collect();
            for m in members.iter_mut().filter(|m| m.result.is_none()) {
                let selected: BTreeSet<NamespacePath> = chain
                    .namespaces
                    .iter()
                    .enumerate()
                    .filter(|(i, n)| {
                        m.selection.selects(n)
                            && !vanished.contains(&u32::try_from(*i).unwrap_or(u32::MAX))
                    })
                    .map(|(_, n)| n.clone())
                    .collect();
                let mi = u32::try_from(m.index).unwrap_or(u32::MAX);
                let listed: Vec<(Slot, u64, RelationKind)> = all
                    .iter()
                    .filter(|c| c.m == mi)
                    .filter_map(|c| {
                        let ns = chain.namespaces.get(c.ns as usize)?;
                        let kind = if c.view {
                            RelationKind::View
                        } else {
                            RelationKind::Table
                        };
                        Some(((ns.clone(), c.name.clone()), c.v, kind))
                    })
                    .collect();
                let r = retire_member(state, m, listed, &selected, opts).await;
                m.result = Some(r);
            }
        }
        if chain.version > 0
            && let Err(e) = delete_chain(state, subj, &chain.head.run).await
        {
            tracing::warn!(error = %e, "the finished chain's checkpoint was not deleted");
        }
        return Ok(LegEnd::Finished);
    }
    // Checkpoint: the members' progress and this leg's candidates, then the head.
    let store = state.store.as_ref();
    let api = |e: Error| (Stage::Publication, ReconcileError::Api(e));
    if chain.version == 0 {
        let list: Vec<&[String]> = chain.namespaces.iter().map(|n| n.segments()).collect();
        chain.head.ns_chunks = write_blob(state, subj, &format!("{}#NS", chain.head.run), &list)
            .await
            .map_err(api)?;
    }
    for m in members.iter() {
        let ms = &mut chain.members[m.index];
        ms.namespaces = m.summary.namespaces;
        ms.tables = m.summary.tables;
        ms.views = m.summary.views;
        ms.dropped = m.summary.dropped;
        ms.done = m.result.is_some();
    }
    let tag = format!(
        "{}#L{:05}#{}",
        chain.head.run,
        chain.head.leg,
        &flotilla_domain::names::new_id()[20..]
    );
    let blob = LegBlob {
        members: chain.members.clone(),
        candidates: new_candidates,
        vanished: new_vanished,
    };
    let chunks = write_blob(state, subj, &tag, &blob).await.map_err(api)?;
    chain.head.legs.push((tag, chunks));
    chain.head.next = next;
    chain.head.leg += 1;
    let head_key = keys::checkpoint_head(subj.account, &subj.key);
    let body = to_body(&chain.head).map_err(api)?;
    let op = if chain.version == 0 {
        Op::create(head_key, body)
    } else {
        Op::replace(head_key, chain.version, body)
    };
    match store.transact(Transaction::new().with(op)).await {
        Ok(()) => Ok(LegEnd::Next(CheckpointRef {
            run: chain.head.run.clone(),
            leg: chain.head.leg,
        })),
        Err(MetastoreError::ConditionFailed { .. }) => Ok(LegEnd::Lost),
        Err(e) => Err(api(e.into())),
    }
}
