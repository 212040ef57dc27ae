//! The collision preflight over the complete inventory, before anything is published:
//! mapping conflicts (destination paths held by a local relation or another overlay, a name
//! that is both a table and a view upstream, two upstream objects with one identity, a
//! provider answering for another object than asked) and records too large to be stored.

use std::collections::{HashMap, HashSet};

use flotilla_catalog_access::spi::TableIdent;
use flotilla_domain::keys;
use flotilla_domain::model::{OverlayRecord, RelationKind};
use flotilla_domain::names::{NamespacePath, validate_segment};

use super::discover::{Discovered, TableLoad};
use super::plan::{
    Content, Ctx, Desired, DesiredRelation, build, content_fingerprint, namespace_record,
    path_identity, untrusted_fingerprint,
};
use super::target::TargetState;
use super::{Conflict, Holder, ReconcileError};

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

/// Why an upstream answer cannot stand for the `what` (table or view) `ns`.`name` it was
/// asked for: the provider answered for another object. `None` when it is the one asked for.
fn answered_for_other(
    answered: &TableIdent,
    ns: &NamespacePath,
    name: &str,
    what: &str,
) -> Option<String> {
    (answered.namespace.0 != ns.segments() || answered.name != name)
        .then(|| format!("the provider answered for {answered} when asked for this {what}"))
}

/// The identity an upstream object is held under, and whether it is stable: the provider's
/// stable id when the provider has stable ids and gave one, else the object's path.
fn held_identity(
    stable_id: Option<&String>,
    found: &Discovered,
    ns: &NamespacePath,
    name: &str,
) -> (String, bool) {
    match stable_id.filter(|_| found.stable_ids) {
        Some(id) => (id.clone(), true),
        None => (path_identity(ns, name), false),
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
            TableLoad::Loaded {
                metadata,
                etag,
                etag_untrusted,
            } => {
                let answered = &metadata.identifier;
                if let Some(reason) = answered_for_other(answered, &t.namespace, &t.name, "table") {
                    let kind = RelationKind::Table;
                    conflict(
                        &mut out,
                        &t.namespace,
                        &t.name,
                        kind,
                        Holder::Upstream,
                        reason,
                    );
                    continue;
                }
                let (ext, stable) =
                    held_identity(metadata.stable_id.as_ref(), found, &t.namespace, &t.name);
                let fingerprint = if *etag_untrusted
                    || target.etag_untrusted(&t.namespace, &t.name, &overlay.id)
                {
                    Some(untrusted_fingerprint(metadata))
                } else {
                    etag.clone().or_else(|| Some(content_fingerprint(metadata)))
                };
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
        if let Some(reason) = answered_for_other(&m.identifier, &v.namespace, &v.name, "view") {
            let kind = RelationKind::View;
            conflict(
                &mut out,
                &v.namespace,
                &v.name,
                kind,
                Holder::Upstream,
                reason,
            );
            continue;
        }
        let (external_id, stable) =
            held_identity(m.stable_id.as_ref(), found, &v.namespace, &v.name);
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
        let body = flotilla_base::store::to_body(&record)?;
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
        let body = flotilla_base::store::to_body(&record)?;
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
