//! The target catalog as a run found it: its relations, namespaces and claims, read
//! strongly before discovery (which uses the stored upstream ETags for conditional loads)
//! and then compared against by the plan, the preflight and publication.

use std::collections::{HashMap, HashSet};

use flotilla_domain::keys;
use flotilla_domain::model::{
    ClaimRecord, NamespaceRecord, OverlayRecord, RelationKind, RelationRecord,
};
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Consistency, Metastore, Query, query_all};

use flotilla_base::error::Result;

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
pub(crate) const CONTENT_FINGERPRINT_PREFIX: &str = "sha256:";

/// A content fingerprint of a table whose upstream ETag proved no validator (a full answer
/// carrying the tag that was sent): it stays a content fingerprint whatever tag later
/// answers carry, so the table is never loaded conditionally again (nor flips between the
/// two). Starts with [`CONTENT_FINGERPRINT_PREFIX`], so it is never sent either.
pub(crate) const UNTRUSTED_ETAG_PREFIX: &str = "sha256:untrusted-etag:";

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
    pub async fn load(store: &dyn Metastore, overlay: &OverlayRecord) -> Result<Self> {
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

    /// Whether this overlay's table at `(ns, name)` is stored with an untrusted-tag
    /// fingerprint ([`UNTRUSTED_ETAG_PREFIX`]).
    pub fn etag_untrusted(&self, ns: &NamespacePath, name: &str, overlay_id: &str) -> bool {
        self.relations
            .get(&(ns.clone(), name.to_owned()))
            .and_then(|r| r.value.managed_by.as_ref())
            .filter(|m| m.overlay_id == overlay_id)
            .and_then(|m| m.upstream_fingerprint.as_deref())
            .is_some_and(|f| f.starts_with(UNTRUSTED_ETAG_PREFIX))
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
