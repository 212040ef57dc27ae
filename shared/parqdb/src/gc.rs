//! Garbage collection of warehouse objects that lost catalog reachability.
//!
//! Reachability is decided by catalog mappings only: an object is *reachable* when
//! a current mapping names it as its metadata file, or when a retained snapshot of such a
//! metadata file references it (index relations; for IVF also the centroid metadata). A
//! relation with a trailing `/` references every object below it.
//!
//! When a published metadata location stops being current (a commit replaces it, a drop
//! removes it) the catalog records the instant in an `UNREACH#` item, in the same transaction.
//! An unreachable object becomes a deletion candidate only when the retention period has
//! elapsed since the *latest* of: its last modification, and the loss of reachability of any
//! recorded metadata that references it. An object never published is judged by its last
//! modification alone, so files of an in-progress register or commit (newer than the
//! retention) are kept.
//!
//! Every catalog whose warehouse contains, or is contained in, the collected warehouse takes
//! part (found through the `IXWH` registrations), because warehouse-relative references of
//! one catalog may name objects below the other's root. Whenever reachability cannot be
//! established for sure (a current metadata file cannot be read, or a recently unreachable
//! one is missing), the plan fails instead of guessing.

use std::collections::{BTreeMap, BTreeSet};

use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde::{Deserialize, Serialize};

use crate::catalog::{
    IndexCatalogService, MappingRecord, UnreachableRecord, WarehouseRecord, decode,
};
use crate::error::{IndexCatalogError, Result};
use crate::keys;
use crate::location::Warehouse;
use crate::metadata::IndexMetadata;
use crate::store::{ReadError, unavailable};

/// One object the plan would delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcCandidate {
    /// Absolute URI of the object.
    pub location: String,
    pub last_modified_ms: i64,
    /// When the latest recorded metadata referencing it lost reachability, if any did.
    pub lost_reachability_ms: Option<i64>,
}

/// What a collection would do, and why the rest is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcPlan {
    pub warehouse: String,
    pub now_ms: i64,
    pub retention_ms: i64,
    pub delete: Vec<GcCandidate>,
    /// Objects referenced by a current mapping.
    pub kept_reachable: usize,
    /// Unreachable (or never published) objects still inside the retention period.
    pub kept_recent: usize,
    /// Listed objects never collected because they are not plainly inside the warehouse
    /// (reached through a symlink, or a malformed location).
    #[serde(default)]
    pub kept_outside: usize,
}

/// The outcome of [`apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    pub deleted: Vec<String>,
    /// Planned objects no longer eligible when re-checked just before deletion.
    pub skipped: Vec<String>,
}

/// References of one set of metadata documents, as absolute URIs.
#[derive(Default)]
struct References {
    files: BTreeMap<String, Option<i64>>,
    directories: BTreeMap<String, Option<i64>>,
}

impl References {
    fn add(&mut self, uri: String, time: Option<i64>) {
        let map = if uri.ends_with('/') {
            &mut self.directories
        } else {
            &mut self.files
        };
        let slot = map.entry(uri).or_insert(time);
        *slot = (*slot).max(time);
    }

    fn add_metadata(
        &mut self,
        warehouse: &Warehouse,
        location: &str,
        doc: Option<&IndexMetadata>,
        time: Option<i64>,
    ) {
        self.add(location.to_owned(), time);
        if let Some(doc) = doc {
            for relative in doc.referenced_locations() {
                self.add(warehouse.resolve(relative), time);
            }
        }
    }

    /// Whether `uri` is referenced, and the latest time attached to a reference.
    fn lookup(&self, uri: &str) -> (bool, Option<i64>) {
        let mut found = false;
        let mut time = None;
        if let Some(t) = self.files.get(uri) {
            found = true;
            time = time.max(*t);
        }
        for (dir, t) in &self.directories {
            if uri.starts_with(dir.as_str()) {
                found = true;
                time = time.max(*t);
            }
        }
        (found, time)
    }
}

/// Every catalog registration whose warehouse overlaps `warehouse`: the same, nested below
/// it, or an ancestor of it.
async fn overlapping(
    service: &IndexCatalogService,
    warehouse: &Warehouse,
) -> Result<Vec<WarehouseRecord>> {
    let store = service.store.as_ref();
    let mut prefixes = vec![warehouse.as_str().to_owned()];
    // Ancestors: every proper prefix of the URI that ends with '/', beyond "scheme://".
    let uri = warehouse.as_str();
    let start = uri.find("://").map_or(0, |i| i + 3);
    for (i, c) in uri.char_indices().skip_while(|(i, _)| *i < start) {
        if c == '/' && i + 1 < uri.len() {
            prefixes.push(keys::warehouse_registration_prefix(&uri[..=i]));
        }
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        let query = flotilla_metastore::Query::new(
            keys::WAREHOUSE_PARTITION,
            prefix,
            flotilla_metastore::Consistency::Strong,
        );
        for item in flotilla_metastore::query_all(store, query).await? {
            out.push(decode::<WarehouseRecord>(&item)?);
        }
    }
    Ok(out)
}

async fn read_doc(
    service: &IndexCatalogService,
    warehouse: &Warehouse,
    location: &str,
) -> Result<Option<IndexMetadata>> {
    let relative = warehouse
        .relative_of(location)
        .map_err(|e| IndexCatalogError::Internal {
            message: format!("a published location is outside its warehouse: {e}"),
        })?;
    match service.stores.read(warehouse, &relative).await {
        Ok(bytes) => Ok(Some(crate::metadata::validate_bytes(&bytes)?)),
        Err(ReadError::NotFound) => Ok(None),
        Err(ReadError::Catalog(e)) => Err(e),
    }
}

/// Lists the objects of the index catalog's warehouse that a collection at `now_ms` with
/// `retention_ms` would delete. Reads only; deletes nothing.
pub async fn plan(
    service: &IndexCatalogService,
    account: &str,
    catalog: &str,
    retention_ms: i64,
    now_ms: i64,
) -> Result<GcPlan> {
    if retention_ms < 0 {
        return Err(IndexCatalogError::invalid_argument(
            "retention must not be negative",
        ));
    }
    let (_, warehouse, _) = service.catalog_record(account, catalog).await?;
    // A warehouse this host does not admit (stored before the rules existed) is not
    // collected at all.
    service
        .stores
        .policy()
        .admit(&warehouse)
        .map_err(|e| IndexCatalogError::invalid_argument(format!("warehouse: {e}")))?;
    let mut reachable = References::default();
    let mut lost = References::default();
    for registration in overlapping(service, &warehouse).await? {
        let other =
            Warehouse::parse(&registration.warehouse).map_err(|e| IndexCatalogError::Internal {
                message: format!("stored warehouse is invalid: {e}"),
            })?;
        let pk = keys::catalog_partition(&registration.account, &registration.name);
        let store = service.store.as_ref();
        let consistency = flotilla_metastore::Consistency::Strong;
        // Unreachability records first: a commit racing with this plan then shows up either
        // as the new current mapping or as a record, never as neither.
        let records = flotilla_metastore::query_all(
            store,
            flotilla_metastore::Query::new(pk.clone(), keys::UNREACHABLE_PREFIX, consistency),
        )
        .await?;
        let mappings = flotilla_metastore::query_all(
            store,
            flotilla_metastore::Query::new(pk, keys::MAPPING_PREFIX, consistency),
        )
        .await?;
        for item in mappings {
            let mapping: MappingRecord = decode(&item)?;
            let Some(doc) = read_doc(service, &other, &mapping.metadata_location).await? else {
                return Err(IndexCatalogError::Unavailable {
                    message: "a current metadata file is missing; refusing to collect".into(),
                });
            };
            reachable.add_metadata(&other, &mapping.metadata_location, Some(&doc), None);
        }
        for item in records {
            let record: UnreachableRecord = decode(&item)?;
            let doc = match read_doc(service, &other, &record.location).await {
                Ok(doc) => doc,
                Err(IndexCatalogError::InvalidIndexMetadata { .. })
                | Err(IndexCatalogError::UnsupportedFormatVersion { .. }) => None,
                Err(e) => return Err(e),
            };
            if doc.is_none() && now_ms.saturating_sub(record.lost_at_ms) < retention_ms {
                return Err(IndexCatalogError::Unavailable {
                    message: "a recently unreachable metadata file cannot be read; its references are unknown".into(),
                });
            }
            lost.add_metadata(
                &other,
                &record.location,
                doc.as_ref(),
                Some(record.lost_at_ms),
            );
        }
    }

    let objects = service.stores.open(&warehouse)?;
    let listed: Vec<object_store::ObjectMeta> = objects
        .list(None)
        .try_collect()
        .await
        .map_err(unavailable)?;
    let mut plan = GcPlan {
        warehouse: warehouse.as_str().to_owned(),
        now_ms,
        retention_ms,
        delete: Vec::new(),
        kept_reachable: 0,
        kept_recent: 0,
        kept_outside: 0,
    };
    for meta in listed {
        let relative = meta.location.as_ref();
        // Never outside the catalog's own prefix: a listed object must be a well-formed
        // location inside the warehouse, reached without a link leading elsewhere.
        let uri = warehouse.resolve(relative);
        if warehouse.relative_of(&uri).is_err() || !service.stores.confined(&warehouse, relative) {
            plan.kept_outside += 1;
            continue;
        }
        if reachable.lookup(&uri).0 {
            plan.kept_reachable += 1;
            continue;
        }
        let modified = meta.last_modified.timestamp_millis();
        let (_, lost_at) = lost.lookup(&uri);
        let protected_since = lost_at.map_or(modified, |t| t.max(modified));
        if now_ms.saturating_sub(protected_since) < retention_ms {
            plan.kept_recent += 1;
            continue;
        }
        plan.delete.push(GcCandidate {
            location: uri,
            last_modified_ms: modified,
            lost_reachability_ms: lost_at,
        });
    }
    plan.delete.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(plan)
}

/// Deletes what `planned` lists, after re-planning at the same instant: an object that became
/// reachable again (re-registered) since the plan is skipped. Reachability records of deleted
/// metadata files are removed afterwards.
pub async fn apply(
    service: &IndexCatalogService,
    account: &str,
    catalog: &str,
    planned: &GcPlan,
) -> Result<GcReport> {
    let fresh = plan(
        service,
        account,
        catalog,
        planned.retention_ms,
        planned.now_ms,
    )
    .await?;
    let eligible: BTreeSet<&str> = fresh.delete.iter().map(|c| c.location.as_str()).collect();
    let (_, warehouse, _) = service.catalog_record(account, catalog).await?;
    let objects = service.stores.open(&warehouse)?;
    let mut report = GcReport::default();
    for candidate in &planned.delete {
        if !eligible.contains(candidate.location.as_str()) {
            report.skipped.push(candidate.location.clone());
            continue;
        }
        let relative = warehouse
            .relative_of(&candidate.location)
            .unwrap_or_default();
        let path = Path::parse(&relative).map_err(|e| IndexCatalogError::Internal {
            message: e.to_string(),
        })?;
        match objects.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(unavailable(e)),
        }
        // The record of a collected metadata file is obsolete; delete it only at the version
        // read, so a newer loss of reachability recorded meanwhile survives.
        let key = keys::unreachable(account, catalog, &candidate.location);
        if let Some(item) = service
            .store
            .get(&key, flotilla_metastore::Consistency::Strong)
            .await?
        {
            let _ = flotilla_metastore::put_one(
                service.store.as_ref(),
                flotilla_metastore::Op::delete_at(key, item.version),
            )
            .await;
        }
        report.deleted.push(candidate.location.clone());
    }
    Ok(report)
}
