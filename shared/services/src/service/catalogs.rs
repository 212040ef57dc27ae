//! Catalogs: account-unique display names (a name-index item per name), renames that keep
//! the id, and deletes refused while the catalog holds anything or an overlay targets it.

use std::collections::BTreeMap;

use flotilla_domain::keys;
use flotilla_domain::model::{CatalogRecord, NameIndexRecord, etag_for};
use flotilla_domain::names::validate_display_name;
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Transaction};
use serde::Deserialize;
use serde_json::Value;

use super::events::{Operation, record_account};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create_with};
use super::{
    GuardedOutcome, MAX_ATTEMPTS, Versioned, account_guards, backoff, check_if_match,
    guarded_delete, to_body,
};
use super::{OnConflict, delete_items, strong_scan};
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;

pub const MAX_DESCRIPTION_BYTES: usize = 4096;
pub const MAX_PROPERTIES: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateCatalog {
    pub display_name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchCatalog {
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub description: Option<Option<String>>,
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
}

/// Deserializes a PATCH field that may be cleared: absent is `None` (unchanged, through
/// `#[serde(default)]`), `null` is `Some(None)` (clear), a value is `Some(Some(v))`. Serde
/// alone reads `null` into an `Option<Option<T>>` as `None`, which made clearing impossible.
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

pub fn validate_properties(props: &BTreeMap<String, String>) -> Result<()> {
    if props.len() > MAX_PROPERTIES {
        return Err(Error::invalid(format!(
            "at most {MAX_PROPERTIES} properties"
        )));
    }
    for (k, v) in props {
        if k.is_empty() || k.len() > 255 || k.chars().any(char::is_control) {
            return Err(Error::invalid(
                "property keys must be 1 to 255 bytes without control characters",
            ));
        }
        if v.len() > 16 * 1024 {
            return Err(Error::invalid(format!(
                "property {k:?} is longer than 16 KiB"
            )));
        }
    }
    Ok(())
}

fn validate_description(d: &Option<String>) -> Result<()> {
    if d.as_ref().is_some_and(|d| d.len() > MAX_DESCRIPTION_BYTES) {
        return Err(Error::invalid(format!(
            "description is longer than {MAX_DESCRIPTION_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Reads a catalog by id with a strong read.
pub async fn load(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> Result<Versioned<CatalogRecord>> {
    super::records::catalog(store, account, id).await
}

/// [`load`] on items already read.
pub fn load_from(
    reads: &super::Reads,
    account: &str,
    id: &str,
) -> Result<Versioned<CatalogRecord>> {
    flotilla_domain::names::validate_resource_id(id).map_err(|_| Error::not_found("catalog"))?;
    reads
        .read::<CatalogRecord>(keys::catalog(account, id))?
        .ok_or_else(|| Error::not_found("catalog"))
}

/// Strong reads of the catalog `id` of `account` and of `more`, in one round trip;
/// [`load_from`] then answers the catalog as [`load`] would. A malformed id is `404` before
/// anything is read.
pub async fn fetch_with(
    store: &dyn Metastore,
    account: &str,
    id: &str,
    mut more: Vec<flotilla_metastore::Key>,
) -> Result<super::Reads> {
    flotilla_domain::names::validate_resource_id(id).map_err(|_| Error::not_found("catalog"))?;
    more.push(keys::catalog(account, id));
    super::fetch(store, &more).await
}

/// The event of a catalog's creation or deletion (in the account's log: the catalog's own
/// log goes with it).
fn catalog_event(verb: &str, rec: &CatalogRecord) -> Operation {
    Operation::of_resource(verb, "catalog", Some(&rec.id), Some(&rec.display_name))
}

pub async fn create(
    state: &AppState,
    account: &str,
    req: CreateCatalog,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_display_name(&req.display_name)?;
    validate_description(&req.description)?;
    validate_properties(&req.properties)?;
    let store = state.store.as_ref();
    let mut reads = super::account_guard_keys(account).to_vec();
    reads.push(keys::catalog_name(account, &req.display_name));
    run_create_with(state, idem, &reads, |id, got| {
        let req = &req;
        async move {
            if let Some(err) = super::account_guard_error_from(&got, account) {
                return Err(err);
            }
            let name_key = keys::catalog_name(account, &req.display_name);
            let existing = got.read::<NameIndexRecord>(name_key.clone())?;
            let now = state.clock.now_rfc3339();
            let rec = CatalogRecord {
                id: id.clone(),
                account_id: account.to_owned(),
                display_name: req.display_name.clone(),
                description: req.description.clone(),
                properties: req.properties.clone(),
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            let mut ops = account_guards(account);
            ops.push(Op::create(keys::catalog(account, &id), to_body(&rec)?));
            match existing {
                None => ops.push(Op::create(
                    name_key,
                    to_body(&NameIndexRecord { id: id.clone() })?,
                )),
                Some(idx) => {
                    let old = load(store, account, &idx.value.id).await?;
                    match on_conflict {
                        OnConflict::Error => {
                            return Err(Error::already_exists(format!(
                                "a catalog named {:?} already exists",
                                req.display_name
                            )));
                        }
                        OnConflict::ReturnExisting => {
                            return Ok(Plan::Respond(RecordedResponse::ok(old.value.to_api())));
                        }
                        OnConflict::Replace => {
                            // Retire the old identity: only an empty catalog no overlay targets
                            // can be retired, proved under its delete guard.
                            retire_for_replace(state, account, &old).await?;
                            ops.push(Op::replace(
                                name_key,
                                idx.version,
                                to_body(&NameIndexRecord { id: id.clone() })?,
                            ));
                            ops.push(Op::delete_at(
                                keys::catalog(account, &old.value.id),
                                old.version,
                            ));
                            ops.push(Op::delete(keys::directory_generation(&old.value.id)));
                            ops.push(Op::delete(keys::catalog_guard(&old.value.id)));
                            // The retired identity's grants go with it.
                            ops.extend(
                                state
                                    .grant_cascade(
                                        account,
                                        &crate::acl::Securable::catalog(&old.value.id),
                                    )
                                    .await?,
                            );
                            record_account(
                                state,
                                &mut ops,
                                account,
                                catalog_event("deleted", &old.value),
                            )?;
                        }
                    }
                }
            }
            record_account(state, &mut ops, account, catalog_event("created", &rec))?;
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: keys::catalog(account, &id),
            })
        }
    })
    .await
}

/// Proves the catalog replaced by `on_conflict=replace` is empty and untargeted, leaving a
/// live guard in place so that no child can be created before the replacing transaction
/// deletes it.
async fn retire_for_replace(
    state: &AppState,
    account: &str,
    old: &Versioned<CatalogRecord>,
) -> Result<()> {
    let store = state.store.as_ref();
    let now = state.clock.now_ms();
    let guard = keys::catalog_guard(&old.value.id);
    let gs = super::guard_state(store, guard.clone(), now, state.config.guard_lease_ms).await?;
    if matches!(gs, super::GuardState::Live) {
        return Err(Error::deleting("the catalog being replaced"));
    }
    let condition = match gs {
        super::GuardState::Abandoned { version } => Condition::Version(version),
        _ => Condition::Absent,
    };
    let body = to_body(&super::GuardRecord {
        installed_ms: now,
        owner: flotilla_domain::names::new_id(),
        durable: false,
    })?;
    store
        .transact(
            Transaction::new()
                .with(Op::Put {
                    key: guard,
                    body,
                    expires_at: None,
                    condition: Some(condition),
                })
                .with(Op::check(
                    keys::catalog(account, &old.value.id),
                    Condition::Version(old.version),
                )),
        )
        .await?;
    if let Some(refusal) = dependents(store, account, &old.value.id).await? {
        let _ = store
            .transact(Transaction::new().with(Op::delete(keys::catalog_guard(&old.value.id))))
            .await;
        return Err(refusal);
    }
    // The guard stays until the replacing transaction commits; the purge below removes it.
    Ok(())
}

/// Why a catalog cannot be deleted, read with strong reads.
async fn dependents(
    store: &dyn Metastore,
    account: &str,
    catalog_id: &str,
) -> Result<Option<Error>> {
    let overlays = store
        .count(
            &keys::account_pk(account),
            &keys::catalog_dependency_prefix(catalog_id),
            Consistency::Strong,
        )
        .await?;
    let pk = keys::catalog_pk(catalog_id);
    let namespaces = store
        .count(&pk, keys::NAMESPACE_PREFIX, Consistency::Strong)
        .await?;
    let relations = store
        .count(&pk, keys::RELATION_PREFIX, Consistency::Strong)
        .await?;
    if overlays + namespaces + relations == 0 {
        return Ok(None);
    }
    Ok(Some(
        Error::new(
            ErrorKind::HasDependents,
            "the catalog is referenced by overlays or is not empty",
        )
        .with_detail("overlays", overlays)
        .with_detail("namespaces", namespaces)
        .with_detail("relations", relations),
    ))
}

pub async fn get(state: &AppState, account: &str, id: &str) -> Result<Value> {
    Ok(load(state.store.as_ref(), account, id)
        .await?
        .value
        .to_api())
}

/// The catalogs the caller may see (a page holds `page_size` of them: an invisible catalog
/// takes no place in it).
pub async fn list(
    state: &AppState,
    access: &crate::acl::Access,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let (items, next) = super::list_page(
        state.store.as_ref(),
        &keys::account_pk(&access.account),
        keys::CATALOG_PREFIX,
        "catalogs",
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            let rec: CatalogRecord = super::decode(item)?;
            Ok(access
                .visible(&crate::acl::Securable::catalog(&rec.id))
                .then(|| rec.to_api()))
        },
    )
    .await?;
    Ok(super::page_body(items, next))
}

pub async fn patch(
    state: &AppState,
    account: &str,
    id: &str,
    req: PatchCatalog,
    if_match: Option<&str>,
) -> Result<Value> {
    if let Some(n) = &req.display_name {
        validate_display_name(n)?;
    }
    if let Some(d) = &req.description {
        validate_description(d)?;
    }
    if let Some(p) = &req.properties {
        validate_properties(p)?;
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load(store, account, id).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let mut next = cur.value.clone();
        if let Some(n) = &req.display_name {
            next.display_name = n.clone();
        }
        if let Some(d) = &req.description {
            next.description = d.clone();
        }
        if let Some(p) = &req.properties {
            next.properties = p.clone();
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::catalog(account, id),
            cur.version,
            to_body(&next)?,
        ));
        let fields = [
            ("display_name", next.display_name != cur.value.display_name),
            ("description", next.description != cur.value.description),
            ("properties", next.properties != cur.value.properties),
        ];
        record_account(
            state,
            &mut tx.ops,
            account,
            Operation::resource_update("catalog", id, &next.display_name, (false, false), &fields),
        )?;
        let name = super::NameChange {
            key: keys::catalog_name,
            what: "a catalog",
            old: &cur.value.display_name,
            new: &next.display_name,
        };
        if super::commit_renamable(store, tx, account, id, name, attempt).await? {
            return Ok(next.to_api());
        }
    }
    Err(Error::unavailable("catalog update did not converge"))
}

pub async fn delete(
    state: &AppState,
    account: &str,
    id: &str,
    if_match: Option<&str>,
) -> Result<()> {
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load(store, account, id).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let name_key = keys::catalog_name(account, &cur.value.display_name);
        let mut final_ops = vec![
            Op::delete(name_key),
            Op::delete(keys::directory_generation(id)),
        ];
        // The grants naming it go with it.
        final_ops.extend(
            state
                .grant_cascade(account, &crate::acl::Securable::catalog(id))
                .await?,
        );
        record_account(
            state,
            &mut final_ops,
            account,
            catalog_event("deleted", &cur.value),
        )?;
        // Captured state objects in the warehouse: their sweep is recorded with the deletion.
        #[cfg(feature = "index-catalogs")]
        final_ops.extend(super::captured::sweep_op(state, &cur.value).await?);
        let outcome = guarded_delete(
            state,
            keys::catalog_guard(id),
            keys::catalog(account, id),
            cur.version,
            "the catalog",
            || dependents(store, account, id),
            final_ops,
        )
        .await?;
        match outcome {
            GuardedOutcome::Deleted => {
                purge_catalog_partition(store, id).await?;
                // Best effort here: a sweep that fails stays recorded, and the next catalog
                // deletion on the host takes it up again.
                #[cfg(feature = "index-catalogs")]
                {
                    if let Err(e) = super::captured::sweep(state, id).await {
                        tracing::warn!(catalog_id = id, error = %e, "capture sweep failed; kept for the next pass");
                    }
                    super::captured::sweep_pending(state).await;
                }
                return Ok(());
            }
            GuardedOutcome::Retry => backoff(attempt).await,
        }
    }
    Err(Error::unavailable("catalog delete did not converge"))
}

/// Deletes every item of a catalog's partition (used once the catalog record is gone, by
/// catalog delete and account cleanup). Idempotent.
pub async fn purge_catalog_partition(store: &dyn Metastore, catalog_id: &str) -> Result<()> {
    let items = strong_scan(store, &keys::catalog_pk(catalog_id), "").await?;
    delete_items(store, items.into_iter().map(|i| i.key).collect()).await
}
