//! The plan of a run: the desired inventory's types (what the preflight answers and
//! publication consumes) and the per-relation decision (create, update, move, replace
//! identity, unchanged).
//!
//! The decision is a pure function of what is stored at the destination slot (and, for a
//! provider-stable identity, at the slot the identity was last published to), so a
//! publication that loses a race simply re-reads those slots and decides again.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use flotilla_catalog_access::spi::TableMetadata;
use flotilla_domain::model::{
    IntegrationRecord, ManagedBy, NamespaceRecord, OverlayRecord, RelationKind, RelationRecord,
    ViewDefinition,
};
use flotilla_domain::names::NamespacePath;
use serde_json::Value;

use super::Conflict;
use super::target::{CONTENT_FINGERPRINT_PREFIX, Slot, Stored, UNTRUSTED_ETAG_PREFIX};

/// The table property holding a Delta Sharing table's version: what stands for the metadata
/// location of a shared table (capture planning and run planning compare it).
pub const SHARING_VERSION_PROPERTY: &str = "delta-sharing.table-version";

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
    format!("{CONTENT_FINGERPRINT_PREFIX}{}", content_hash(m))
}

/// The content fingerprint of a table whose upstream ETag proved no validator (never sent
/// upstream, and kept whatever tags later answers carry).
pub fn untrusted_fingerprint(m: &TableMetadata) -> String {
    format!("{UNTRUSTED_ETAG_PREFIX}{}", content_hash(m))
}

fn content_hash(m: &TableMetadata) -> String {
    use sha2::{Digest, Sha256};
    let v = serde_json::json!([
        m.format.as_str(),
        m.schema,
        m.location,
        m.metadata_location,
        m.properties,
        m.stable_id
    ]);
    hex::encode(&Sha256::digest(v.to_string().as_bytes())[..16])
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

/// The upstream version of a table as its record states it: the metadata location and, for
/// a Delta Sharing table, the shared version.
fn upstream_version(r: &RelationRecord) -> (Option<&String>, Option<&String>) {
    (
        r.metadata_location.as_ref(),
        r.properties.get(SHARING_VERSION_PROPERTY),
    )
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
        upstream_changed_at: None,
    }
}

/// The record `d` should be, keeping identity and timestamps of `base` when given.
pub(crate) fn build(
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
            let mut m = managed_by(d, ctx, fingerprint.clone());
            // First seen now, unless the base already states this upstream version.
            m.upstream_changed_at = match base {
                Some(b) if upstream_version(b) == upstream_version(&rec) => b
                    .managed_by
                    .as_ref()
                    .and_then(|m| m.upstream_changed_at.clone()),
                _ => Some(ctx.now.clone()),
            };
            rec.managed_by = Some(m);
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
