//! The index catalog service: index catalogs, namespaces and the index operations
//! `load`, `register`, `commit`, `drop`, `rename` and `list` over the metastore.
//!
//! Every mutation is one metastore transaction whose conditions carry the invariant:
//! - `register`: the mapping is created only if absent; the namespace item is replaced at the
//!   version that was read (its index count grows), so a concurrent namespace drop cannot
//!   leave a mapping in a dropped namespace.
//! - `commit`: the mapping is replaced only at the version whose location equals `base`: of
//!   concurrent commits on one base exactly one transaction applies, the others fail their
//!   condition and report `COMMIT_CONFLICT` after a re-read.
//! - `drop` / `rename`: the mapping is deleted at the version read, and the namespace counts
//!   move in the same transaction.
//!
//! Order of checks (kept stable, documented in docs/parqdb.md): request shape
//! (`INVALID_ARGUMENT`) → index catalog exists (`NOT_FOUND`) → namespace / identifier state
//! (`NAMESPACE_NOT_FOUND`, `INDEX_NOT_FOUND`, `ALREADY_EXISTS`, `COMMIT_CONFLICT`) → metadata
//! location inside the warehouse → read and validate the metadata file(s)
//! (`INVALID_INDEX_METADATA`, `UNSUPPORTED_FORMAT_VERSION`, `INDEX_UUID_MISMATCH`) → the
//! conditional transaction. A request doomed by catalog state never reads warehouse objects.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use flotilla_metastore::{
    Condition, Consistency, DynMetastore, Item, Key, MAX_PAGE_SIZE, MetastoreError, Op, OpOutcome,
    Query, Transaction,
};
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, rfc3339_from_ms as rfc3339};
use crate::error::{IndexCatalogError, Result};
use crate::keys;
use crate::location::Warehouse;
use crate::metadata::{IndexMetadata, Rule, validate_bytes, validate_successor};
use crate::store::{ReadError, WarehouseStores};
use crate::types::*;
use crate::warehouse;

/// How often a mutation re-reads and retries after losing a race on an item it does not
/// decide on (a namespace count). Losing on the decisive item ends the loop with a typed error.
const MAX_ATTEMPTS: usize = 16;
const DEFAULT_PAGE_SIZE: usize = 100;
/// The largest page a caller may ask for; one below the metastore's page, whose last item
/// tells whether another page follows.
const MAX_LIST_PAGE_SIZE: usize = MAX_PAGE_SIZE - 1;

/// Extra conditions the host adds to every mutating transaction of an account, for example
/// the absence of the account deletion fence, so an index cannot be published into an account
/// being deleted. A failed guard condition is reported as `NOT_FOUND`.
pub trait TransactionGuard: Send + Sync + 'static {
    fn conditions(&self, account: &str) -> Vec<Op>;

    /// Operations recording `change` in the same transaction (a change event: created items
    /// with keys of their own, which never fail a condition). None by default.
    fn record(&self, _account: &str, _change: &IndexChange<'_>) -> Vec<Op> {
        Vec::new()
    }
}

/// A mutation of an index catalog, as the guard sees it ([`TransactionGuard::record`]).
#[derive(Debug, Clone, Copy)]
pub enum IndexChange<'a> {
    CatalogCreated {
        catalog: &'a str,
        warehouse: &'a str,
    },
    NamespaceCreated {
        catalog: &'a str,
        path: &'a [String],
    },
    NamespaceDropped {
        catalog: &'a str,
        path: &'a [String],
    },
    Registered {
        catalog: &'a str,
        index: &'a IndexIdentifier,
        metadata_location: &'a str,
    },
    Committed {
        catalog: &'a str,
        index: &'a IndexIdentifier,
        metadata_location: &'a str,
    },
    Renamed {
        catalog: &'a str,
        index: &'a IndexIdentifier,
        destination: &'a IndexIdentifier,
    },
    Dropped {
        catalog: &'a str,
        index: &'a IndexIdentifier,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CatalogRecord {
    pub name: String,
    pub warehouse: String,
    pub create_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NamespaceRecord {
    pub path: Vec<String>,
    /// Index mappings directly in this namespace.
    pub indexes: u64,
    /// Direct child namespaces.
    pub children: u64,
    pub create_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MappingRecord {
    pub namespace: Vec<String>,
    pub name: String,
    pub metadata_location: String,
    pub source: SourceBinding,
    pub update_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UnreachableRecord {
    pub location: String,
    pub lost_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WarehouseRecord {
    pub warehouse: String,
    pub account: String,
    pub name: String,
}

fn body<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| IndexCatalogError::Internal {
        message: format!("cannot encode record: {e}"),
    })
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(item: &Item) -> Result<T> {
    item.json().map_err(|e| IndexCatalogError::Internal {
        message: e.to_string(),
    })
}

/// The result of one conditional transaction.
enum Applied {
    Yes,
    /// An own condition failed: re-read and decide again.
    Conflict,
    /// The write may or may not have been applied.
    Unknown(IndexCatalogError),
}

/// The index catalog service. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct IndexCatalogService {
    pub(crate) store: DynMetastore,
    pub(crate) stores: Arc<dyn WarehouseStores>,
    pub(crate) clock: Arc<dyn Clock>,
    guard: Option<Arc<dyn TransactionGuard>>,
}

impl IndexCatalogService {
    pub fn new(
        store: DynMetastore,
        stores: Arc<dyn WarehouseStores>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            stores,
            clock,
            guard: None,
        }
    }

    pub fn with_guard(mut self, guard: Arc<dyn TransactionGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    // -----------------------------------------------------------------------------------
    // Plumbing.

    /// Runs `ops`, the guard's record of `change` and its conditions as one transaction.
    async fn transact(
        &self,
        account: &str,
        mut ops: Vec<Op>,
        change: IndexChange<'_>,
    ) -> Result<Applied> {
        if let Some(guard) = &self.guard {
            ops.extend(guard.record(account, &change));
        }
        let own = ops.len();
        let mut tx = Transaction { ops };
        if let Some(guard) = &self.guard {
            tx.ops.extend(guard.conditions(account));
        }
        match self.store.transact(tx).await {
            Ok(()) => Ok(Applied::Yes),
            Err(e @ MetastoreError::ConditionFailed { .. }) => {
                let guard_failed = match &e {
                    MetastoreError::ConditionFailed { reasons } => reasons
                        .iter()
                        .skip(own)
                        .any(|r| matches!(r, OpOutcome::Failed(_))),
                    _ => false,
                };
                if guard_failed {
                    return Err(IndexCatalogError::NotFound {
                        message: "the account does not exist or is being deleted".into(),
                    });
                }
                Ok(Applied::Conflict)
            }
            Err(e) if e.is_outcome_unknown() => Ok(Applied::Unknown(e.into())),
            Err(e) => Err(e.into()),
        }
    }

    async fn get(&self, key: &Key) -> Result<Option<Item>> {
        Ok(self.store.get(key, Consistency::Strong).await?)
    }

    pub(crate) async fn catalog_record(
        &self,
        account: &str,
        name: &str,
    ) -> Result<(CatalogRecord, Warehouse, u64)> {
        check_account(account)?;
        check_name("an index catalog name", name)?;
        let Some(item) = self.get(&keys::index_catalog(account, name)).await? else {
            return Err(IndexCatalogError::NotFound {
                message: format!("index catalog {name:?} does not exist"),
            });
        };
        let record: CatalogRecord = decode(&item)?;
        let warehouse =
            Warehouse::parse(&record.warehouse).map_err(|e| IndexCatalogError::Internal {
                message: format!("stored warehouse is invalid: {e}"),
            })?;
        // A catalog stored before homes were reserved may lie in another account's home:
        // it is refused on every use (its account's deletion removes it).
        self.stores
            .policy()
            .check_home(account, &warehouse)
            .map_err(|e| IndexCatalogError::WarehouseNotAllowed {
                message: format!("warehouse: {e}"),
            })?;
        Ok((record, warehouse, item.version))
    }

    async fn namespace_record(
        &self,
        account: &str,
        catalog: &str,
        path: &[String],
    ) -> Result<Option<(NamespaceRecord, u64)>> {
        match self.get(&keys::namespace(account, catalog, path)).await? {
            None => Ok(None),
            Some(item) => Ok(Some((decode(&item)?, item.version))),
        }
    }

    async fn mapping_record(
        &self,
        account: &str,
        catalog: &str,
        id: &IndexIdentifier,
    ) -> Result<Option<(MappingRecord, u64)>> {
        match self
            .get(&keys::mapping(account, catalog, &id.namespace, &id.name))
            .await?
        {
            None => Ok(None),
            Some(item) => Ok(Some((decode(&item)?, item.version))),
        }
    }

    /// Reads and validates the metadata document at an absolute location of `warehouse`.
    async fn read_metadata(
        &self,
        warehouse: &Warehouse,
        location: &str,
        what: &str,
    ) -> Result<IndexMetadata> {
        let relative = warehouse.relative_of(location).map_err(|e| {
            IndexCatalogError::InvalidIndexMetadata {
                rule: Rule::MetadataLocation,
                message: e.0,
            }
        })?;
        let bytes = match self.stores.read(warehouse, &relative).await {
            Ok(bytes) => bytes,
            Err(ReadError::NotFound) => {
                return Err(IndexCatalogError::InvalidIndexMetadata {
                    rule: Rule::MetadataLocation,
                    message: format!("no {what} metadata file exists at the given location"),
                });
            }
            Err(ReadError::Catalog(e)) => return Err(e),
        };
        Ok(validate_bytes(&bytes)?)
    }

    fn check_location(what: &str, location: &str) -> Result<()> {
        if location.is_empty() {
            return Err(IndexCatalogError::invalid_argument(format!(
                "{what} must not be empty"
            )));
        }
        if location.len() > MAX_LOCATION_BYTES {
            return Err(IndexCatalogError::invalid_argument(format!(
                "{what} is longer than {MAX_LOCATION_BYTES} bytes"
            )));
        }
        Ok(())
    }

    fn contention() -> IndexCatalogError {
        IndexCatalogError::Unavailable {
            message: "too much concurrent change; retry".into(),
        }
    }

    fn page_limit(page: &PageRequest) -> Result<usize> {
        match page.page_size {
            None => Ok(DEFAULT_PAGE_SIZE),
            Some(n) if (1..=MAX_LIST_PAGE_SIZE).contains(&n) => Ok(n),
            Some(_) => Err(IndexCatalogError::invalid_argument(format!(
                "page_size must be 1..={MAX_LIST_PAGE_SIZE}"
            ))),
        }
    }

    /// One page of a prefix query. Tokens are the last sort key, base64url-encoded, and must
    /// belong to the same prefix: a foreign token is `INVALID_ARGUMENT`, not a silent restart.
    async fn page(
        &self,
        pk: String,
        prefix: String,
        page: &PageRequest,
    ) -> Result<(Vec<Item>, Option<String>)> {
        let limit = Self::page_limit(page)?;
        let after = match &page.page_token {
            None => None,
            Some(token) => {
                let raw = URL_SAFE_NO_PAD
                    .decode(token)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .filter(|sk| sk.starts_with(&prefix))
                    .ok_or_else(|| {
                        IndexCatalogError::invalid_argument("malformed or foreign page_token")
                    })?;
                Some(flotilla_metastore::PageToken::after_sort_key(&raw))
            }
        };
        // One item more than the page: its presence says another page follows, so a page
        // that ends the listing carries no token (no empty page after it) and no second
        // query is needed to find out.
        let query = Query::new(pk, prefix, Consistency::Strong)
            .limit(limit + 1)
            .after(after);
        let mut page = self.store.query(&query).await?;
        let more = page.items.len() > limit;
        page.items.truncate(limit);
        // Our token is the last sort key returned (not the store's token), so that it can be
        // checked against the prefix of the listing it came from. A store page cut short
        // (DynamoDB's 1 MB) also continues.
        let next = match (more || page.next.is_some(), page.items.last()) {
            (true, Some(last)) => Some(URL_SAFE_NO_PAD.encode(last.key.sk.as_bytes())),
            _ => None,
        };
        Ok((page.items, next))
    }

    // -----------------------------------------------------------------------------------
    // Index catalogs.

    /// Creates an index catalog: a runtime name and exactly one warehouse.
    pub async fn create_index_catalog(
        &self,
        account: &str,
        req: &CreateIndexCatalogRequest,
    ) -> Result<IndexCatalog> {
        check_account(account)?;
        check_name("an index catalog name", &req.name)?;
        if req.warehouse.len() > MAX_WAREHOUSE_BYTES {
            return Err(IndexCatalogError::invalid_argument(format!(
                "warehouse is longer than {MAX_WAREHOUSE_BYTES} bytes"
            )));
        }
        let warehouse = Warehouse::parse(&req.warehouse)
            .map_err(|e| IndexCatalogError::invalid_argument(format!("warehouse: {e}")))?;
        // The host's location rules, before anything is read (docs/parqdb.md "Warehouses").
        self.stores
            .policy()
            .admit(&warehouse)
            .map_err(|e| IndexCatalogError::invalid_argument(format!("warehouse: {e}")))?;
        let now = self.clock.now_ms();
        let record = CatalogRecord {
            name: req.name.clone(),
            warehouse: warehouse.as_str().to_owned(),
            create_ms: now,
        };
        let registration = WarehouseRecord {
            warehouse: record.warehouse.clone(),
            account: account.to_owned(),
            name: req.name.clone(),
        };
        let catalog_key = keys::index_catalog(account, &req.name);
        for _ in 0..MAX_ATTEMPTS {
            // The warehouse's tenant prefix is bound to this account in the same transaction
            // (a concurrent claim by another account makes one of the two fail).
            let mut ops = warehouse::claim_ops(
                self.store.as_ref(),
                self.stores.policy(),
                account,
                &warehouse,
            )
            .await?;
            ops.push(Op::create(catalog_key.clone(), body(&record)?));
            ops.push(Op::put(
                keys::warehouse_registration(&record.warehouse, account, &req.name),
                body(&registration)?,
            ));
            let change = IndexChange::CatalogCreated {
                catalog: &req.name,
                warehouse: &record.warehouse,
            };
            match self.transact(account, ops, change).await? {
                Applied::Yes => return Ok(catalog_view(&record, 1)),
                Applied::Conflict => {
                    if self.get(&catalog_key).await?.is_some() {
                        return Err(IndexCatalogError::AlreadyExists {
                            message: format!("index catalog {:?} already exists", req.name),
                        });
                    }
                    if let Some(e) = warehouse::claimed_by_other(
                        self.store.as_ref(),
                        self.stores.policy(),
                        account,
                        &warehouse,
                    )
                    .await?
                    {
                        return Err(e);
                    }
                }
                Applied::Unknown(e) => return Err(e),
            }
        }
        Err(Self::contention())
    }

    pub async fn get_index_catalog(&self, account: &str, name: &str) -> Result<IndexCatalog> {
        let (record, _, version) = self.catalog_record(account, name).await?;
        Ok(catalog_view(&record, version))
    }

    pub async fn list_index_catalogs(
        &self,
        account: &str,
        page: &PageRequest,
    ) -> Result<ListResponse<IndexCatalog>> {
        check_account(account)?;
        let (items, next) = self
            .page(
                keys::account_partition(account),
                keys::INDEX_CATALOG_PREFIX.to_owned(),
                page,
            )
            .await?;
        let items = items
            .iter()
            .map(|item| decode::<CatalogRecord>(item).map(|r| catalog_view(&r, item.version)))
            .collect::<Result<_>>()?;
        Ok(ListResponse {
            items,
            next_page_token: next,
        })
    }

    // -----------------------------------------------------------------------------------
    // Namespaces: explicit; a child needs its parent; only an empty namespace is dropped.

    pub async fn create_namespace(
        &self,
        account: &str,
        catalog: &str,
        req: &CreateNamespaceRequest,
    ) -> Result<Namespace> {
        check_namespace(&req.path)?;
        self.catalog_record(account, catalog).await?;
        let now = self.clock.now_ms();
        let record = NamespaceRecord {
            path: req.path.clone(),
            indexes: 0,
            children: 0,
            create_ms: now,
        };
        let key = keys::namespace(account, catalog, &req.path);
        for _ in 0..MAX_ATTEMPTS {
            if self.get(&key).await?.is_some() {
                return Err(already_exists_ns(&req.path));
            }
            let mut ops = vec![Op::create(key.clone(), body(&record)?)];
            let parent_path = req.path.split_last().map_or(&[][..], |(_, parent)| parent);
            if !parent_path.is_empty() {
                let Some((mut parent, version)) =
                    self.namespace_record(account, catalog, parent_path).await?
                else {
                    return Err(IndexCatalogError::NamespaceNotFound {
                        message: format!("parent namespace {parent_path:?} does not exist"),
                    });
                };
                parent.children += 1;
                ops.push(Op::replace(
                    keys::namespace(account, catalog, parent_path),
                    version,
                    body(&parent)?,
                ));
            } else {
                ops.push(Op::check(
                    keys::index_catalog(account, catalog),
                    Condition::Exists,
                ));
            }
            match self
                .transact(
                    account,
                    ops,
                    IndexChange::NamespaceCreated {
                        catalog,
                        path: &req.path,
                    },
                )
                .await?
            {
                Applied::Yes => {
                    return Ok(Namespace {
                        path: req.path.clone(),
                        create_time: rfc3339(now),
                    });
                }
                Applied::Conflict => continue,
                Applied::Unknown(e) => return Err(e),
            }
        }
        Err(Self::contention())
    }

    pub async fn list_namespaces(
        &self,
        account: &str,
        catalog: &str,
        page: &PageRequest,
    ) -> Result<ListResponse<Namespace>> {
        self.catalog_record(account, catalog).await?;
        let (items, next) = self
            .page(
                keys::catalog_partition(account, catalog),
                keys::NAMESPACE_PREFIX.to_owned(),
                page,
            )
            .await?;
        let items = items
            .iter()
            .map(|item| {
                decode::<NamespaceRecord>(item).map(|r| Namespace {
                    path: r.path,
                    create_time: rfc3339(r.create_ms),
                })
            })
            .collect::<Result<_>>()?;
        Ok(ListResponse {
            items,
            next_page_token: next,
        })
    }

    /// Drops a namespace that holds no index and no child namespace (`HAS_DEPENDENTS`
    /// otherwise). The delete is conditional on the version read, and every register or
    /// child create bumps that version, so emptiness cannot change between check and delete.
    pub async fn drop_namespace(
        &self,
        account: &str,
        catalog: &str,
        path: &[String],
    ) -> Result<()> {
        check_namespace(path)?;
        self.catalog_record(account, catalog).await?;
        for _ in 0..MAX_ATTEMPTS {
            let Some((record, version)) = self.namespace_record(account, catalog, path).await?
            else {
                return Err(namespace_not_found(path));
            };
            if record.indexes > 0 || record.children > 0 {
                return Err(IndexCatalogError::HasDependents {
                    message: format!("namespace {path:?} still holds indexes or namespaces"),
                });
            }
            let mut ops = vec![Op::delete_at(
                keys::namespace(account, catalog, path),
                version,
            )];
            if let Some((_, parent_path)) = path.split_last().filter(|(_, p)| !p.is_empty())
                && let Some((mut parent, pv)) =
                    self.namespace_record(account, catalog, parent_path).await?
            {
                parent.children = parent.children.saturating_sub(1);
                ops.push(Op::replace(
                    keys::namespace(account, catalog, parent_path),
                    pv,
                    body(&parent)?,
                ));
            }
            match self
                .transact(
                    account,
                    ops,
                    IndexChange::NamespaceDropped { catalog, path },
                )
                .await?
            {
                Applied::Yes => return Ok(()),
                Applied::Conflict => continue,
                Applied::Unknown(e) => return Err(e),
            }
        }
        Err(Self::contention())
    }

    // -----------------------------------------------------------------------------------
    // Index operations.

    /// The current metadata location and source binding, or `INDEX_NOT_FOUND`. A strongly
    /// consistent point read: a load after a successful commit sees the commit.
    pub async fn load(
        &self,
        account: &str,
        catalog: &str,
        id: &IndexIdentifier,
    ) -> Result<IndexEntry> {
        check_identifier(id)?;
        self.catalog_record(account, catalog).await?;
        match self.mapping_record(account, catalog, id).await? {
            Some((record, _)) => Ok(entry(record)),
            None => Err(index_not_found(id)),
        }
    }

    /// Publishes a source-bound mapping for an absent identifier.
    pub async fn register(
        &self,
        account: &str,
        catalog: &str,
        namespace: &[String],
        req: &RegisterIndexRequest,
    ) -> Result<IndexEntry> {
        let id = IndexIdentifier {
            namespace: namespace.to_vec(),
            name: req.name.clone(),
        };
        check_identifier(&id)?;
        req.source.check()?;
        Self::check_location("metadata_location", &req.metadata_location)?;
        let (_, warehouse, _) = self.catalog_record(account, catalog).await?;
        let mapping_key = keys::mapping(account, catalog, namespace, &req.name);
        let mut validated = false;
        for _ in 0..MAX_ATTEMPTS {
            let Some((mut ns, ns_version)) =
                self.namespace_record(account, catalog, namespace).await?
            else {
                return Err(namespace_not_found(namespace));
            };
            if self.get(&mapping_key).await?.is_some() {
                return Err(already_exists_index(&id));
            }
            if !validated {
                self.read_metadata(&warehouse, &req.metadata_location, "")
                    .await?;
                validated = true;
            }
            let record = MappingRecord {
                namespace: namespace.to_vec(),
                name: req.name.clone(),
                metadata_location: req.metadata_location.clone(),
                source: req.source.clone(),
                update_ms: self.clock.now_ms(),
            };
            ns.indexes += 1;
            let ops = vec![
                Op::create(mapping_key.clone(), body(&record)?),
                Op::replace(
                    keys::namespace(account, catalog, namespace),
                    ns_version,
                    body(&ns)?,
                ),
                // Published again: no longer a garbage collection candidate.
                Op::delete(keys::unreachable(account, catalog, &req.metadata_location)),
            ];
            match self
                .transact(
                    account,
                    ops,
                    IndexChange::Registered {
                        catalog,
                        index: &id,
                        metadata_location: &req.metadata_location,
                    },
                )
                .await?
            {
                Applied::Yes => return Ok(entry(record)),
                Applied::Conflict => continue,
                Applied::Unknown(e) => {
                    return self
                        .resolve_unknown(account, catalog, &id, &record, e)
                        .await;
                }
            }
        }
        Err(Self::contention())
    }

    /// Replaces the current metadata location with `new` only if it is `base`, publishing the
    /// source binding with it. `base` loses catalog reachability at this instant.
    pub async fn commit(
        &self,
        account: &str,
        catalog: &str,
        id: &IndexIdentifier,
        req: &CommitIndexRequest,
    ) -> Result<IndexEntry> {
        check_identifier(id)?;
        req.source.check()?;
        Self::check_location("base", &req.base)?;
        Self::check_location("new", &req.new)?;
        let (_, warehouse, _) = self.catalog_record(account, catalog).await?;
        let mapping_key = keys::mapping(account, catalog, &id.namespace, &id.name);
        let mut validated = false;
        for _ in 0..MAX_ATTEMPTS {
            let Some((current, version)) = self.mapping_record(account, catalog, id).await? else {
                return Err(index_not_found(id));
            };
            if current.metadata_location != req.base {
                return Err(IndexCatalogError::CommitConflict {
                    message: "the base metadata location is no longer current; reload and reapply"
                        .into(),
                });
            }
            if req.new == req.base {
                return Err(IndexCatalogError::InvalidIndexMetadata {
                    rule: Rule::MetadataLocation,
                    message: "the new metadata location must differ from the base".into(),
                });
            }
            if !validated {
                let new = self.read_metadata(&warehouse, &req.new, "new").await?;
                let base = self.read_metadata(&warehouse, &req.base, "base").await?;
                validate_successor(&base, &new)?;
                validated = true;
            }
            let now = self.clock.now_ms();
            let record = MappingRecord {
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                metadata_location: req.new.clone(),
                source: req.source.clone(),
                update_ms: now,
            };
            let lost = UnreachableRecord {
                location: req.base.clone(),
                lost_at_ms: now,
            };
            let ops = vec![
                Op::replace(mapping_key.clone(), version, body(&record)?),
                Op::put(keys::unreachable(account, catalog, &req.base), body(&lost)?),
                Op::delete(keys::unreachable(account, catalog, &req.new)),
            ];
            match self
                .transact(
                    account,
                    ops,
                    IndexChange::Committed {
                        catalog,
                        index: id,
                        metadata_location: &req.new,
                    },
                )
                .await?
            {
                Applied::Yes => return Ok(entry(record)),
                // Lost the race on the mapping: the re-read above decides (usually a conflict).
                Applied::Conflict => continue,
                Applied::Unknown(e) => {
                    return self.resolve_unknown(account, catalog, id, &record, e).await;
                }
            }
        }
        Err(Self::contention())
    }

    /// After a write whose outcome is unknown, a strongly consistent re-read tells whether the
    /// mapping now publishes exactly what we wrote; if so the operation succeeded, otherwise
    /// the caller gets the retryable error (a retry then reports the true state, e.g.
    /// `COMMIT_CONFLICT` when the write did land but was since replaced).
    async fn resolve_unknown(
        &self,
        account: &str,
        catalog: &str,
        id: &IndexIdentifier,
        written: &MappingRecord,
        error: IndexCatalogError,
    ) -> Result<IndexEntry> {
        match self.mapping_record(account, catalog, id).await {
            Ok(Some((now, _)))
                if now.metadata_location == written.metadata_location
                    && now.source == written.source =>
            {
                Ok(entry(now))
            }
            _ => Err(error),
        }
    }

    /// Removes the mapping. Metadata and data stay; the location loses reachability now.
    pub async fn drop(&self, account: &str, catalog: &str, id: &IndexIdentifier) -> Result<()> {
        check_identifier(id)?;
        self.catalog_record(account, catalog).await?;
        for _ in 0..MAX_ATTEMPTS {
            let Some((current, version)) = self.mapping_record(account, catalog, id).await? else {
                return Err(index_not_found(id));
            };
            let Some((mut ns, ns_version)) = self
                .namespace_record(account, catalog, &id.namespace)
                .await?
            else {
                return Err(IndexCatalogError::Internal {
                    message: "a mapping exists in a missing namespace".into(),
                });
            };
            ns.indexes = ns.indexes.saturating_sub(1);
            let lost = UnreachableRecord {
                location: current.metadata_location.clone(),
                lost_at_ms: self.clock.now_ms(),
            };
            let ops = vec![
                Op::delete_at(
                    keys::mapping(account, catalog, &id.namespace, &id.name),
                    version,
                ),
                Op::replace(
                    keys::namespace(account, catalog, &id.namespace),
                    ns_version,
                    body(&ns)?,
                ),
                Op::put(
                    keys::unreachable(account, catalog, &current.metadata_location),
                    body(&lost)?,
                ),
            ];
            match self
                .transact(account, ops, IndexChange::Dropped { catalog, index: id })
                .await?
            {
                Applied::Yes => return Ok(()),
                Applied::Conflict => continue,
                Applied::Unknown(e) => return Err(e),
            }
        }
        Err(Self::contention())
    }

    /// Moves a mapping (across namespaces too) if the source exists and the destination does
    /// not. Metadata, index-uuid and data are untouched; reachability does not change.
    pub async fn rename(
        &self,
        account: &str,
        catalog: &str,
        req: &RenameIndexRequest,
    ) -> Result<()> {
        check_identifier(&req.source)?;
        check_identifier(&req.destination)?;
        self.catalog_record(account, catalog).await?;
        let (src, dst) = (&req.source, &req.destination);
        for _ in 0..MAX_ATTEMPTS {
            let Some((mut record, version)) = self.mapping_record(account, catalog, src).await?
            else {
                return Err(index_not_found(src));
            };
            let Some((mut dst_ns, dst_ns_version)) = self
                .namespace_record(account, catalog, &dst.namespace)
                .await?
            else {
                return Err(namespace_not_found(&dst.namespace));
            };
            if self.mapping_record(account, catalog, dst).await?.is_some() {
                return Err(already_exists_index(dst));
            }
            record.namespace = dst.namespace.clone();
            record.name = dst.name.clone();
            record.update_ms = self.clock.now_ms();
            let mut ops = vec![
                Op::delete_at(
                    keys::mapping(account, catalog, &src.namespace, &src.name),
                    version,
                ),
                Op::create(
                    keys::mapping(account, catalog, &dst.namespace, &dst.name),
                    body(&record)?,
                ),
            ];
            if src.namespace != dst.namespace {
                let Some((mut src_ns, src_ns_version)) = self
                    .namespace_record(account, catalog, &src.namespace)
                    .await?
                else {
                    return Err(IndexCatalogError::Internal {
                        message: "a mapping exists in a missing namespace".into(),
                    });
                };
                src_ns.indexes = src_ns.indexes.saturating_sub(1);
                dst_ns.indexes += 1;
                ops.push(Op::replace(
                    keys::namespace(account, catalog, &src.namespace),
                    src_ns_version,
                    body(&src_ns)?,
                ));
                ops.push(Op::replace(
                    keys::namespace(account, catalog, &dst.namespace),
                    dst_ns_version,
                    body(&dst_ns)?,
                ));
            }
            match self
                .transact(
                    account,
                    ops,
                    IndexChange::Renamed {
                        catalog,
                        index: src,
                        destination: dst,
                    },
                )
                .await?
            {
                Applied::Yes => return Ok(()),
                Applied::Conflict => continue,
                Applied::Unknown(e) => return Err(e),
            }
        }
        Err(Self::contention())
    }

    /// Identifiers in one namespace (not its children), or `NAMESPACE_NOT_FOUND`.
    pub async fn list(
        &self,
        account: &str,
        catalog: &str,
        namespace: &[String],
        page: &PageRequest,
    ) -> Result<ListResponse<IndexIdentifier>> {
        check_namespace(namespace)?;
        self.catalog_record(account, catalog).await?;
        if self
            .namespace_record(account, catalog, namespace)
            .await?
            .is_none()
        {
            return Err(namespace_not_found(namespace));
        }
        let (items, next) = self
            .page(
                keys::catalog_partition(account, catalog),
                keys::mapping_prefix(namespace),
                page,
            )
            .await?;
        let items = items
            .iter()
            .map(|item| {
                decode::<MappingRecord>(item).map(|r| IndexIdentifier {
                    namespace: r.namespace,
                    name: r.name,
                })
            })
            .collect::<Result<_>>()?;
        Ok(ListResponse {
            items,
            next_page_token: next,
        })
    }
}

fn catalog_view(record: &CatalogRecord, version: u64) -> IndexCatalog {
    IndexCatalog {
        name: record.name.clone(),
        warehouse: record.warehouse.clone(),
        create_time: rfc3339(record.create_ms),
        etag: format!("\"{version}\""),
    }
}

fn entry(record: MappingRecord) -> IndexEntry {
    IndexEntry {
        identifier: IndexIdentifier {
            namespace: record.namespace,
            name: record.name,
        },
        metadata_location: record.metadata_location,
        source: record.source,
    }
}

fn index_not_found(id: &IndexIdentifier) -> IndexCatalogError {
    IndexCatalogError::IndexNotFound {
        message: format!(
            "index {:?} in namespace {:?} does not exist",
            id.name, id.namespace
        ),
    }
}

fn namespace_not_found(path: &[String]) -> IndexCatalogError {
    IndexCatalogError::NamespaceNotFound {
        message: format!("namespace {path:?} does not exist"),
    }
}

fn already_exists_index(id: &IndexIdentifier) -> IndexCatalogError {
    IndexCatalogError::AlreadyExists {
        message: format!(
            "index {:?} in namespace {:?} already exists",
            id.name, id.namespace
        ),
    }
}

fn already_exists_ns(path: &[String]) -> IndexCatalogError {
    IndexCatalogError::AlreadyExists {
        message: format!("namespace {path:?} already exists"),
    }
}
