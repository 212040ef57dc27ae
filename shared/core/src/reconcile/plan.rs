//! The target catalog as a run found it, the collision preflight, and the per-relation
//! decision (create, update, move, replace identity, unchanged).
//!
//! The decision is a pure function of what is stored at the destination slot (and, for a
//! provider-stable identity, at the slot the identity was last published to), so a
//! publication that loses a race simply re-reads those slots and decides again.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use flotilla_catalog_access::spi::TableMetadata;
use flotilla_domain::keys;
use flotilla_domain::model::{
    ClaimRecord, IntegrationRecord, ManagedBy, NamespaceRecord, OverlayRecord, RelationKind,
    RelationRecord, ViewDefinition,
};
use flotilla_domain::names::{NamespacePath, validate_segment};
use flotilla_metastore::{Consistency, Metastore, Query, query_all};
use serde_json::Value;

use super::discovery::{Discovered, TableLoad};
use super::{Conflict, Holder, ReconcileError};
use crate::error::ApiResult;

/// A stored record and its item version.
#[derive(Clone, Debug)]
pub struct Stored<T> {
    pub value: T,
    pub version: u64,
}

/// A relation's destination: namespace and name.
pub type Slot = (NamespacePath, String);

/// Fingerprints that are ours (content hashes) rather than upstream ETags are never sent as
/// `If-None-Match`.
const CONTENT_FINGERPRINT_PREFIX: &str = "sha256:";

/// What the target catalog holds, read strongly at the start of a run.
#[derive(Debug, Default)]
pub struct TargetState {
    pub relations: HashMap<Slot, Stored<RelationRecord>>,
    pub namespaces: HashMap<NamespacePath, Stored<NamespaceRecord>>,
    /// This overlay's claims.
    pub claims: HashMap<NamespacePath, Stored<ClaimRecord>>,
    /// Paths any overlay claims.
    pub claimed_by_anyone: HashSet<NamespacePath>,
    /// External identity -> slot, for relations this overlay manages.
    pub ours_by_ext: HashMap<String, Slot>,
}

impl TargetState {
    pub async fn load(store: &dyn Metastore, overlay: &OverlayRecord) -> ApiResult<Self> {
        let pk = keys::catalog_pk(&overlay.catalog_id);
        let scan = |prefix: &'static str| {
            query_all(store, Query::new(pk.clone(), prefix, Consistency::Strong))
        };
        let mut out = TargetState::default();
        for item in scan(keys::RELATION_PREFIX).await? {
            let rec: RelationRecord = item.json()?;
            let slot = (rec.namespace.clone(), rec.name.clone());
            if let Some(m) = rec
                .managed_by
                .as_ref()
                .filter(|m| m.overlay_id == overlay.id)
            {
                out.ours_by_ext
                    .entry(m.external_id.clone())
                    .or_insert_with(|| slot.clone());
            }
            out.relations.insert(
                slot,
                Stored {
                    value: rec,
                    version: item.version,
                },
            );
        }
        for item in scan(keys::NAMESPACE_PREFIX).await? {
            let rec: NamespaceRecord = item.json()?;
            out.namespaces.insert(
                rec.path.clone(),
                Stored {
                    value: rec,
                    version: item.version,
                },
            );
        }
        for item in scan(keys::CLAIM_PREFIX).await? {
            let rec: ClaimRecord = item.json()?;
            out.claimed_by_anyone.insert(rec.path.clone());
            if rec.overlay_id == overlay.id {
                out.claims.insert(
                    rec.path.clone(),
                    Stored {
                        value: rec,
                        version: item.version,
                    },
                );
            }
        }
        Ok(out)
    }

    /// The upstream ETag stored on this overlay's table at `(ns, name)`, if any.
    pub fn conditional_etag(
        &self,
        ns: &NamespacePath,
        name: &str,
        overlay_id: &str,
    ) -> Option<&str> {
        let rec = &self.relations.get(&(ns.clone(), name.to_owned()))?.value;
        let m = rec
            .managed_by
            .as_ref()
            .filter(|m| m.overlay_id == overlay_id && rec.kind == RelationKind::Table)?;
        m.upstream_fingerprint
            .as_deref()
            .filter(|f| !f.starts_with(CONTENT_FINGERPRINT_PREFIX))
    }

    /// This overlay's relations.
    pub fn ours<'a>(
        &'a self,
        overlay_id: &'a str,
    ) -> impl Iterator<Item = (&'a Slot, &'a Stored<RelationRecord>)> + 'a {
        self.relations.iter().filter(move |(_, r)| {
            r.value
                .managed_by
                .as_ref()
                .is_some_and(|m| m.overlay_id == overlay_id)
        })
    }
}

/// The normalized full upstream path: the explicitly unstable identity of an object whose
/// provider has no stable id. JSON keeps segment boundaries (`["a.b"]` is not `["a","b"]`).
pub fn path_identity(ns: &NamespacePath, name: &str) -> String {
    let mut v: Vec<&str> = ns.segments().iter().map(String::as_str).collect();
    v.push(name);
    serde_json::to_string(&v).unwrap_or_default()
}

/// The upstream content a desired relation is built from.
#[derive(Debug, Clone)]
pub enum Content {
    /// The upstream answered "not modified": the stored definition stands.
    NotModified,
    Table {
        metadata: Box<TableMetadata>,
        fingerprint: Option<String>,
    },
    View(Box<flotilla_catalog_access::spi::ViewMetadata>),
}

/// One relation the complete inventory wants published.
#[derive(Debug, Clone)]
pub struct DesiredRelation {
    pub namespace: NamespacePath,
    pub name: String,
    pub kind: RelationKind,
    pub external_id: String,
    pub stable: bool,
    pub content: Content,
}

impl DesiredRelation {
    pub fn slot(&self) -> Slot {
        (self.namespace.clone(), self.name.clone())
    }
}

/// The preflight's answer: what to publish and what not to touch.
#[derive(Debug, Default)]
pub struct Desired {
    /// Namespaces to claim: every selected namespace and its ancestors.
    pub namespaces: BTreeSet<NamespacePath>,
    pub relations: Vec<DesiredRelation>,
    pub conflicts: Vec<Conflict>,
    /// Destination slots in conflict: neither published nor retired.
    pub conflict_slots: HashSet<Slot>,
}

impl Desired {
    pub fn slots(&self) -> HashSet<Slot> {
        self.relations.iter().map(DesiredRelation::slot).collect()
    }
}

fn full_path(ns: &NamespacePath, name: &str) -> Vec<String> {
    let mut p = ns.segments().to_vec();
    p.push(name.to_owned());
    p
}

fn kind_code(k: RelationKind) -> &'static str {
    match k {
        RelationKind::Table => "TABLE",
        RelationKind::View => "VIEW",
    }
}

fn kind_word(k: RelationKind) -> &'static str {
    match k {
        RelationKind::Table => "table",
        RelationKind::View => "view",
    }
}

/// Collision preflight over the complete inventory, before anything is published.
pub fn preflight(found: &Discovered, target: &TargetState, overlay: &OverlayRecord) -> Desired {
    let mut out = Desired::default();
    for ns in &found.namespaces {
        let mut p = Some(ns.clone());
        while let Some(cur) = p {
            p = cur.parent();
            out.namespaces.insert(cur);
        }
    }
    out.conflicts.extend(found.invalid.iter().cloned());
    let conflict = |out: &mut Desired,
                    ns: &NamespacePath,
                    name: &str,
                    kind: RelationKind,
                    holder: Holder,
                    reason: String| {
        if out.conflict_slots.insert((ns.clone(), name.to_owned())) {
            out.conflicts.push(Conflict::new(
                full_path(ns, name),
                kind_code(kind),
                holder,
                reason,
            ));
        }
    };
    for (ns, name) in &found.both {
        conflict(
            &mut out,
            ns,
            name,
            RelationKind::Table,
            Holder::Upstream,
            "the upstream lists this name both as a table and as a view".into(),
        );
    }
    let mut candidates: Vec<DesiredRelation> = Vec::new();
    for t in &found.tables {
        if let Err(e) = validate_segment("table name", &t.name) {
            conflict(
                &mut out,
                &t.namespace,
                &t.name,
                RelationKind::Table,
                Holder::Upstream,
                format!("upstream name cannot be held: {e}"),
            );
            continue;
        }
        let (external_id, stable, content) = match &t.load {
            TableLoad::NotModified => {
                let stored = target.relations.get(&(t.namespace.clone(), t.name.clone()));
                match stored.and_then(|s| s.value.managed_by.as_ref()) {
                    Some(m) => (m.external_id.clone(), m.stable, Content::NotModified),
                    None => continue,
                }
            }
            TableLoad::Loaded { metadata, etag } => {
                if metadata.identifier.namespace.0 != t.namespace.segments()
                    || metadata.identifier.name != t.name
                {
                    conflict(
                        &mut out,
                        &t.namespace,
                        &t.name,
                        RelationKind::Table,
                        Holder::Upstream,
                        format!(
                            "the provider answered for {} when asked for this table",
                            metadata.identifier
                        ),
                    );
                    continue;
                }
                let (ext, stable) = match metadata.stable_id.as_ref().filter(|_| found.stable_ids) {
                    Some(id) => (id.clone(), true),
                    None => (path_identity(&t.namespace, &t.name), false),
                };
                let fingerprint = etag.clone().or_else(|| Some(content_fingerprint(metadata)));
                (
                    ext,
                    stable,
                    Content::Table {
                        metadata: metadata.clone(),
                        fingerprint,
                    },
                )
            }
        };
        candidates.push(DesiredRelation {
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            kind: RelationKind::Table,
            external_id,
            stable,
            content,
        });
    }
    for v in &found.views {
        if let Err(e) = validate_segment("view name", &v.name) {
            conflict(
                &mut out,
                &v.namespace,
                &v.name,
                RelationKind::View,
                Holder::Upstream,
                format!("upstream name cannot be held: {e}"),
            );
            continue;
        }
        let m = &v.metadata;
        if m.identifier.namespace.0 != v.namespace.segments() || m.identifier.name != v.name {
            conflict(
                &mut out,
                &v.namespace,
                &v.name,
                RelationKind::View,
                Holder::Upstream,
                format!(
                    "the provider answered for {} when asked for this view",
                    m.identifier
                ),
            );
            continue;
        }
        let (external_id, stable) = match m.stable_id.as_ref().filter(|_| found.stable_ids) {
            Some(id) => (id.clone(), true),
            None => (path_identity(&v.namespace, &v.name), false),
        };
        candidates.push(DesiredRelation {
            namespace: v.namespace.clone(),
            name: v.name.clone(),
            kind: RelationKind::View,
            external_id,
            stable,
            content: Content::View(Box::new(m.clone())),
        });
    }
    // Two upstream objects claiming one stable identity: neither can be trusted.
    let mut by_ext: HashMap<&str, usize> = HashMap::new();
    for c in candidates.iter().filter(|c| c.stable) {
        *by_ext.entry(c.external_id.as_str()).or_default() += 1;
    }
    let dup: HashSet<String> = by_ext
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(e, _)| e.to_owned())
        .collect();
    for c in candidates {
        if c.stable && dup.contains(&c.external_id) {
            conflict(
                &mut out,
                &c.namespace,
                &c.name,
                c.kind,
                Holder::Upstream,
                "two upstream objects report the same stable identity".into(),
            );
            continue;
        }
        if let Some(held) = target.relations.get(&c.slot()) {
            match &held.value.managed_by {
                None => {
                    let why = format!(
                        "the destination holds a directly managed {}",
                        kind_word(held.value.kind)
                    );
                    let holder = Holder::Local {
                        kind: kind_code(held.value.kind),
                    };
                    conflict(&mut out, &c.namespace, &c.name, c.kind, holder, why);
                    continue;
                }
                Some(m) if m.overlay_id != overlay.id => {
                    let why = format!(
                        "the destination {} is managed by overlay {}",
                        kind_word(held.value.kind),
                        m.overlay_id
                    );
                    let holder = Holder::Overlay {
                        overlay_id: m.overlay_id.clone(),
                        kind: kind_code(held.value.kind),
                    };
                    conflict(&mut out, &c.namespace, &c.name, c.kind, holder, why);
                    continue;
                }
                Some(_) => {}
            }
        }
        out.relations.push(c);
    }
    out
}

/// Room left in an item estimate for what differs between the preflight's record and the
/// published one (revision digits, timestamps, a replaced id).
const ITEM_SLACK_BYTES: usize = 512;

/// Whether every record the run would write fits the metastore's item limit: a relation or
/// namespace the upstream made too large (a schema of tens of thousands of columns) fails
/// the run as a permanent, upstream-caused error naming the object, before anything is
/// published.
pub fn check_storable(
    desired: &Desired,
    found: &Discovered,
    ctx: &Ctx<'_>,
) -> Result<(), ReconcileError> {
    let limit = flotilla_metastore::MAX_ITEM_BYTES;
    let cat = &ctx.overlay.catalog_id;
    for d in &desired.relations {
        let Some(record) = build(d, None, ctx) else {
            continue;
        };
        let body = crate::service::to_body(&record)?;
        let key = keys::relation(cat, &d.namespace, &d.name);
        let size = flotilla_metastore::item_size(&key, &body) + ITEM_SLACK_BYTES;
        if size > limit {
            return Err(ReconcileError::Unstorable {
                path: full_path(&d.namespace, &d.name),
                kind: kind_code(d.kind),
                size,
                limit,
            });
        }
    }
    for (ns, props) in &found.namespace_properties {
        let record = namespace_record(cat, ns, props.clone(), &ctx.now);
        let body = crate::service::to_body(&record)?;
        let key = keys::namespace(cat, ns);
        let size = flotilla_metastore::item_size(&key, &body) + ITEM_SLACK_BYTES;
        if size > limit {
            return Err(ReconcileError::Unstorable {
                path: ns.segments().to_vec(),
                kind: "NAMESPACE",
                size,
                limit,
            });
        }
    }
    Ok(())
}

/// A namespace the overlay creates, carrying the upstream namespace's properties.
pub fn namespace_record(
    catalog_id: &str,
    path: &NamespacePath,
    properties: BTreeMap<String, String>,
    now: &str,
) -> NamespaceRecord {
    NamespaceRecord {
        id: flotilla_domain::names::new_id(),
        catalog_id: catalog_id.to_owned(),
        path: path.clone(),
        properties,
        created_by_overlay: true,
        revision: 1,
        create_time: now.to_owned(),
        update_time: now.to_owned(),
    }
}

/// A fingerprint of a table's content for upstreams that send no ETag (never sent upstream).
pub fn content_fingerprint(m: &TableMetadata) -> String {
    use sha2::{Digest, Sha256};
    let v = serde_json::json!([
        m.format.as_str(),
        m.schema,
        m.location,
        m.metadata_location,
        m.properties,
        m.stable_id
    ]);
    format!(
        "{CONTENT_FINGERPRINT_PREFIX}{}",
        hex::encode(&Sha256::digest(v.to_string().as_bytes())[..16])
    )
}

/// What publishing one desired relation takes.
#[derive(Debug, Clone)]
pub enum Action {
    Unchanged,
    Create {
        record: RelationRecord,
    },
    Update {
        version: u64,
        record: RelationRecord,
        signals: bool,
    },
    /// A provider-stable identity seen at a new path: delete the old slot and create the new
    /// one with the same Flotilla id, in one transaction. When the new slot held another
    /// identity of this overlay (`replaced`: its version and kind), that one is retired by the
    /// same transaction.
    Move {
        from: Slot,
        from_version: u64,
        record: RelationRecord,
        replaced: Option<(u64, RelationKind)>,
    },
    /// The slot holds this overlay's relation of another identity (an upstream drop and
    /// re-create, or an unstable rename onto a used name): that one is retired and the new
    /// one created in its place.
    ReplaceIdentity {
        version: u64,
        record: RelationRecord,
        old_kind: RelationKind,
    },
    /// Cannot be decided now (the slot was taken by someone else, or the stored definition a
    /// "not modified" answer relied on vanished); retried by the next run.
    Blocked(String),
}

impl Action {
    pub fn signals(&self) -> bool {
        match self {
            Action::Unchanged | Action::Blocked(_) => false,
            Action::Update { signals, .. } => *signals,
            _ => true,
        }
    }
}

/// Publication context every built record needs.
pub struct Ctx<'a> {
    pub overlay: &'a OverlayRecord,
    pub integration: &'a IntegrationRecord,
    pub now: String,
}

fn managed_by(d: &DesiredRelation, ctx: &Ctx<'_>, fingerprint: Option<String>) -> ManagedBy {
    ManagedBy {
        integration_id: ctx.integration.id.clone(),
        overlay_id: ctx.overlay.id.clone(),
        external_id: d.external_id.clone(),
        stable: d.stable,
        upstream_namespace: d.namespace.segments().to_vec(),
        upstream_name: d.name.clone(),
        upstream_fingerprint: fingerprint,
    }
}

/// The record `d` should be, keeping identity and timestamps of `base` when given.
fn build(
    d: &DesiredRelation,
    base: Option<&RelationRecord>,
    ctx: &Ctx<'_>,
) -> Option<RelationRecord> {
    let mut rec = RelationRecord {
        id: base
            .map(|b| b.id.clone())
            .unwrap_or_else(flotilla_domain::names::new_id),
        catalog_id: ctx.overlay.catalog_id.clone(),
        kind: d.kind,
        namespace: d.namespace.clone(),
        name: d.name.clone(),
        schema: Value::Null,
        format: None,
        metadata_location: None,
        location: None,
        definitions: Vec::new(),
        default_namespace: None,
        properties: BTreeMap::new(),
        managed_by: None,
        revision: base.map_or(1, |b| b.revision),
        create_time: base.map_or_else(|| ctx.now.clone(), |b| b.create_time.clone()),
        update_time: base.map_or_else(|| ctx.now.clone(), |b| b.update_time.clone()),
    };
    match &d.content {
        Content::NotModified => return None,
        Content::Table {
            metadata,
            fingerprint,
        } => {
            // Converted (Delta) schemas keep the field ids stored before; others pass as is.
            rec.schema = flotilla_catalog_access::field_ids::stabilize(
                base.map(|b| &b.schema),
                &metadata.schema,
            );
            rec.format = Some(metadata.format.as_str().to_owned());
            rec.location = metadata.location.clone();
            rec.metadata_location = metadata.metadata_location.clone();
            rec.properties = metadata.properties.clone();
            rec.managed_by = Some(managed_by(d, ctx, fingerprint.clone()));
        }
        Content::View(m) => {
            rec.schema = m.schema.clone();
            rec.definitions = m
                .definitions
                .iter()
                .map(|x| ViewDefinition {
                    dialect: x.dialect.clone(),
                    sql: x.sql.clone(),
                })
                .collect();
            rec.default_namespace = m.default_namespace.as_ref().map(|p| p.0.clone());
            rec.properties = m.properties.clone();
            rec.managed_by = Some(managed_by(d, ctx, None));
        }
    }
    Some(rec)
}

fn same_content(a: &RelationRecord, b: &RelationRecord) -> bool {
    a.kind == b.kind
        && a.schema == b.schema
        && a.format == b.format
        && a.metadata_location == b.metadata_location
        && a.location == b.location
        && a.definitions == b.definitions
        && a.default_namespace == b.default_namespace
        && a.properties == b.properties
        && a.managed_by == b.managed_by
}

/// Decides what publishing `d` takes, given the destination slot and (for a stable identity)
/// where this overlay last published that identity. `vacated` tells whether a prior slot is
/// no longer wanted by the inventory, which is what makes it a move rather than a copy.
pub fn decide(
    d: &DesiredRelation,
    slot: Option<&Stored<RelationRecord>>,
    prior: Option<(&Slot, &Stored<RelationRecord>)>,
    vacated: bool,
    ctx: &Ctx<'_>,
) -> Action {
    let ours = |r: &RelationRecord| {
        r.managed_by
            .as_ref()
            .is_some_and(|m| m.overlay_id == ctx.overlay.id)
    };
    match slot {
        Some(s) if !ours(&s.value) => {
            Action::Blocked("the destination is held by another writer".into())
        }
        Some(s)
            if s.value
                .managed_by
                .as_ref()
                .is_some_and(|m| m.external_id == d.external_id)
                && s.value.kind == d.kind =>
        {
            let Some(mut next) = build(d, Some(&s.value), ctx) else {
                return Action::Unchanged;
            };
            if same_content(&next, &s.value) {
                return Action::Unchanged;
            }
            let signals = next.schema != s.value.schema
                || next.format != s.value.format
                || next.definitions != s.value.definitions
                || next.default_namespace != s.value.default_namespace;
            next.revision += 1;
            next.update_time = ctx.now.clone();
            Action::Update {
                version: s.version,
                record: next,
                signals,
            }
        }
        Some(s) => {
            let moved_base = prior.filter(|(from, p)| {
                vacated && d.stable && p.value.kind == d.kind && **from != d.slot()
            });
            let mut record = match build(d, moved_base.map(|(_, p)| &p.value), ctx) {
                Some(r) => r,
                None => {
                    return Action::Blocked(
                        "the stored definition changed; the next run reloads it".into(),
                    );
                }
            };
            record.create_time =
                moved_base.map_or_else(|| ctx.now.clone(), |(_, p)| p.value.create_time.clone());
            record.update_time = ctx.now.clone();
            if let Some((from, p)) = moved_base {
                // The identity moves onto a slot whose old occupant is retired.
                record.revision = p.value.revision + 1;
                return Action::Move {
                    from: from.clone(),
                    from_version: p.version,
                    record,
                    replaced: Some((s.version, s.value.kind)),
                };
            }
            Action::ReplaceIdentity {
                version: s.version,
                record,
                old_kind: s.value.kind,
            }
        }
        None => {
            if let Some((from, p)) = prior.filter(|(from, p)| {
                vacated && d.stable && p.value.kind == d.kind && **from != d.slot()
            }) {
                let Some(mut record) = build(d, Some(&p.value), ctx) else {
                    return Action::Blocked(
                        "the stored definition moved; the next run reloads it".into(),
                    );
                };
                record.revision = p.value.revision + 1;
                record.update_time = ctx.now.clone();
                return Action::Move {
                    from: from.clone(),
                    from_version: p.version,
                    record,
                    replaced: None,
                };
            }
            match build(d, None, ctx) {
                Some(record) => Action::Create { record },
                None => Action::Blocked(
                    "the stored definition vanished; the next run reloads it".into(),
                ),
            }
        }
    }
}
