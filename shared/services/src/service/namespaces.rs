//! Namespaces: multi-level paths inside a catalog. A child (namespace or relation) is created
//! only while its parent exists and no delete guard is live on the parent or the catalog, all
//! asserted in the child's own transaction.

use std::collections::BTreeMap;

use flotilla_domain::keys;
use flotilla_domain::model::{NamespaceRecord, etag_for};
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Transaction};
use serde::Deserialize;
use serde_json::Value;

use super::OnConflict;
use super::catalogs::{self, validate_properties};
use super::events::{self, Operation};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create_with};
use super::{
    GuardState, GuardedOutcome, MAX_ATTEMPTS, Versioned, account_guards, backoff, check_if_match,
    guard_op, guard_state_of, guarded_delete, read, to_body,
};
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateNamespace {
    pub path: Vec<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchNamespace {
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
}

pub async fn load(
    store: &dyn Metastore,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Option<Versioned<NamespaceRecord>>> {
    read::<NamespaceRecord>(
        store,
        keys::namespace(catalog_id, path),
        Consistency::Strong,
    )
    .await
}

pub async fn require(
    store: &dyn Metastore,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Versioned<NamespaceRecord>> {
    load(store, catalog_id, path)
        .await?
        .ok_or_else(|| Error::not_found(&format!("namespace {path}")))
}

/// The keys [`child_guards_from`] decides from, for one round trip: the account and its
/// fence, the catalog and its delete guard, the parent namespace and its delete guard. A
/// malformed catalog id reads nothing of the catalog (it answers `404` in its turn).
pub fn child_guard_keys(
    account: &str,
    catalog_id: &str,
    parent: Option<&NamespacePath>,
) -> Vec<flotilla_metastore::Key> {
    let mut keys = super::account_guard_keys(account).to_vec();
    if flotilla_domain::names::validate_resource_id(catalog_id).is_ok() {
        keys.push(keys::catalog(account, catalog_id));
        keys.push(keys::catalog_guard(catalog_id));
        if let Some(parent) = parent {
            keys.push(keys::namespace(catalog_id, parent));
            keys.push(keys::namespace_guard(catalog_id, parent));
        }
    }
    keys
}

/// [`require`] on items already read.
pub fn require_from(
    reads: &super::Reads,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Versioned<NamespaceRecord>> {
    reads
        .read::<NamespaceRecord>(keys::namespace(catalog_id, path))?
        .ok_or_else(|| Error::not_found(&format!("namespace {path}")))
}

/// The conditions a child of `parent` (or of the catalog root, when `None`) asserts: the
/// account is live, the catalog exists and is not being deleted, the parent namespace exists
/// and is not being deleted. Abandoned guards are removed by the same transaction.
pub async fn child_guards(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    parent: Option<&NamespacePath>,
) -> Result<Vec<Op>> {
    let reads = super::fetch(
        state.store.as_ref(),
        &child_guard_keys(account, catalog_id, parent),
    )
    .await?;
    child_guards_from(state, &reads, account, catalog_id, parent)
}

/// [`child_guards`] on items already read (they must include [`child_guard_keys`]). The
/// answers come in the order the checks were always made: account, catalog, catalog guard,
/// parent, parent guard.
pub fn child_guards_from(
    state: &AppState,
    reads: &super::Reads,
    account: &str,
    catalog_id: &str,
    parent: Option<&NamespacePath>,
) -> Result<Vec<Op>> {
    if let Some(err) = super::account_guard_error_from(reads, account) {
        return Err(err);
    }
    catalogs::load_from(reads, account, catalog_id)?;
    let now = state.clock.now_ms();
    let lease = state.config.guard_lease_ms;
    let mut ops = account_guards(account);
    ops.push(Op::check(
        keys::catalog(account, catalog_id),
        Condition::Exists,
    ));
    let cg = guard_state_of(reads.item(&keys::catalog_guard(catalog_id)), now, lease)?;
    ops.push(
        guard_op(keys::catalog_guard(catalog_id), &cg)
            .ok_or_else(|| Error::deleting("the catalog"))?,
    );
    if let Some(parent) = parent {
        require_from(reads, catalog_id, parent)?;
        ops.push(Op::check(
            keys::namespace(catalog_id, parent),
            Condition::Exists,
        ));
        let ng = guard_state_of(
            reads.item(&keys::namespace_guard(catalog_id, parent)),
            now,
            lease,
        )?;
        if matches!(ng, GuardState::Live) {
            return Err(Error::deleting(&format!("namespace {parent}")));
        }
        if let Some(op) = guard_op(keys::namespace_guard(catalog_id, parent), &ng) {
            ops.push(op);
        }
    }
    Ok(ops)
}

pub async fn create(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    req: CreateNamespace,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    let path = NamespacePath::new(req.path.clone())?;
    validate_properties(&req.properties)?;
    let store = state.store.as_ref();
    let parent = path.parent();
    let mut reads = child_guard_keys(account, catalog_id, parent.as_ref());
    if flotilla_domain::names::validate_resource_id(catalog_id).is_ok() {
        reads.push(keys::namespace(catalog_id, &path));
    }
    run_create_with(state, idem, &reads, |id, got| {
        let (path, req, parent) = (&path, &req, &parent);
        async move {
            let mut ops = child_guards_from(state, &got, account, catalog_id, parent.as_ref())?;
            let existing = got.read::<NamespaceRecord>(keys::namespace(catalog_id, path))?;
            let now = state.clock.now_rfc3339();
            let rec = NamespaceRecord {
                id: id.clone(),
                catalog_id: catalog_id.to_owned(),
                path: path.clone(),
                properties: req.properties.clone(),
                created_by_overlay: false,
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            let ns_key = keys::namespace(catalog_id, path);
            match existing {
                None => ops.push(Op::create(ns_key.clone(), to_body(&rec)?)),
                Some(old) => match on_conflict {
                    OnConflict::Error => {
                        return Err(Error::already_exists(format!(
                            "namespace {path} already exists"
                        )));
                    }
                    OnConflict::ReturnExisting => {
                        return Ok(Plan::Respond(RecordedResponse::ok(old.value.to_api())));
                    }
                    OnConflict::Replace => {
                        if let Some(refusal) = dependents(store, catalog_id, path).await? {
                            return Err(refusal);
                        }
                        ops.push(Op::replace(ns_key.clone(), old.version, to_body(&rec)?));
                    }
                },
            }
            events::record_into(
                state,
                account,
                &mut ops,
                Operation::namespace("create-namespace", catalog_id, path),
            )?;
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: ns_key,
            })
        }
    })
    .await
}

/// What still holds a namespace: child namespaces, relations and overlay claims.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dependents {
    pub children: u64,
    pub relations: u64,
    pub claims: u64,
}

impl Dependents {
    /// Nothing holds the namespace: it may be deleted.
    pub fn is_empty(&self) -> bool {
        self.children + self.relations + self.claims == 0
    }
}

/// Counts what holds a namespace (strong reads). The one emptiness rule of namespaces, used
/// by the namespace delete and by the overlay prune.
pub(crate) async fn count_dependents(
    store: &dyn Metastore,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Dependents> {
    let pk = keys::catalog_pk(catalog_id);
    let children = store
        .count(
            &pk,
            &keys::namespace_children_prefix(Some(path)),
            Consistency::Strong,
        )
        .await?;
    let relations = store
        .count(&pk, &keys::relations_in_prefix(path), Consistency::Strong)
        .await?;
    let claims = store
        .count(
            &pk,
            &keys::namespace_claims_prefix(path),
            Consistency::Strong,
        )
        .await?;
    Ok(Dependents {
        children,
        relations,
        claims,
    })
}

/// Why a namespace cannot be deleted: children, relations or overlay claims (strong reads).
async fn dependents(
    store: &dyn Metastore,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Option<Error>> {
    let deps = count_dependents(store, catalog_id, path).await?;
    if deps.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        Error::new(
            ErrorKind::HasDependents,
            format!("namespace {path} is not empty or is claimed by an overlay"),
        )
        .with_detail("namespaces", deps.children)
        .with_detail("relations", deps.relations)
        .with_detail("overlay_claims", deps.claims),
    ))
}

pub async fn get(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    path: &NamespacePath,
) -> Result<Value> {
    // One round trip: the catalog (which must belong to the account) and the namespace.
    let reads = catalogs::fetch_with(
        state.store.as_ref(),
        account,
        catalog_id,
        vec![keys::namespace(catalog_id, path)],
    )
    .await?;
    catalogs::load_from(&reads, account, catalog_id)?;
    Ok(require_from(&reads, catalog_id, path)?.value.to_api())
}

/// The namespaces below `parent` the caller may see.
pub async fn list(
    state: &AppState,
    access: &crate::acl::Access,
    catalog_id: &str,
    parent: Option<&NamespacePath>,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let account = access.account.as_str();
    let store = state.store.as_ref();
    // One round trip for the catalog and the parent, then the page.
    let wanted = parent
        .map(|p| vec![keys::namespace(catalog_id, p)])
        .unwrap_or_default();
    let reads = catalogs::fetch_with(store, account, catalog_id, wanted).await?;
    catalogs::load_from(&reads, account, catalog_id)?;
    if let Some(p) = parent {
        require_from(&reads, catalog_id, p)?;
    }
    // A reader of the whole container sees every child: no check per item.
    let all = access.allows(
        crate::acl::Action::Read,
        &crate::acl::Securable::container(catalog_id, parent),
    );
    let (items, next) = super::list_page(
        store,
        &keys::catalog_pk(catalog_id),
        &keys::namespace_children_prefix(parent),
        "namespaces",
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            let rec: NamespaceRecord = super::decode(item)?;
            let visible =
                all || access.visible(&crate::acl::Securable::namespace(catalog_id, &rec.path));
            Ok(visible.then(|| rec.to_api()))
        },
    )
    .await?;
    Ok(super::page_body(items, next))
}

pub async fn patch(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    path: &NamespacePath,
    req: PatchNamespace,
    if_match: Option<&str>,
) -> Result<Value> {
    if let Some(p) = &req.properties {
        validate_properties(p)?;
    }
    let store = state.store.as_ref();
    catalogs::load(store, account, catalog_id).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let cur = require(store, catalog_id, path).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let mut next = cur.value.clone();
        if let Some(p) = &req.properties {
            next.properties = p.clone();
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::namespace(catalog_id, path),
            cur.version,
            to_body(&next)?,
        ));
        events::record(
            state,
            account,
            &mut tx,
            Operation::namespace("update-namespace-properties", catalog_id, path),
        )?;
        match store.transact(tx).await {
            Ok(()) => return Ok(next.to_api()),
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable("namespace update did not converge"))
}

pub async fn delete(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    path: &NamespacePath,
    if_match: Option<&str>,
) -> Result<()> {
    let store = state.store.as_ref();
    catalogs::load(store, account, catalog_id).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let cur = require(store, catalog_id, path).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        // The grants naming it go with it (a grant created meanwhile fails the final
        // transaction, which then retries).
        let mut final_ops = state
            .grant_cascade(account, &crate::acl::Securable::namespace(catalog_id, path))
            .await?;
        events::record_into(
            state,
            account,
            &mut final_ops,
            Operation::namespace("drop-namespace", catalog_id, path),
        )?;
        let outcome = guarded_delete(
            state,
            keys::namespace_guard(catalog_id, path),
            keys::namespace(catalog_id, path),
            cur.version,
            &format!("namespace {path}"),
            || dependents(store, catalog_id, path),
            final_ops,
        )
        .await?;
        match outcome {
            GuardedOutcome::Deleted => return Ok(()),
            GuardedOutcome::Retry => backoff(attempt).await,
        }
    }
    Err(Error::unavailable("namespace delete did not converge"))
}
