//! Grants: a privilege on a securable, held by a role. A grant names an existing securable of
//! the account (asserted in its transaction) and is removed with it ([`crate::acl::cascade_ops`]
//! in every delete protocol), so no grant outlives its securable or its role.

use flotilla_domain::keys;
use flotilla_domain::model::{RelationRecord, etag_for};
use flotilla_domain::names::NamespacePath;
use flotilla_metastore::{Condition, Op};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{MAX_GRANTS, MAX_GRANTS_PER_SECURABLE, Operation, Step, record_account, write};
use crate::acl::model::{GrantRecord, Privilege, Securable, SecurableType, validate_role_name};
use crate::acl::{Access, Action};
use crate::error::{Error, Result};
use crate::service::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create_with};
use crate::service::{OnConflict, account_guard_error_from, account_guard_keys, account_guards};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateGrant {
    pub role: String,
    pub privilege: Privilege,
    pub securable: Securable,
}

fn not_found() -> Error {
    Error::not_found("grant")
}

/// Whether the caller may grant `privilege` on `securable` to `role`: an account admin may
/// grant anything; anyone else needs `MANAGE` on the securable, may not grant an account
/// privilege, and may not grant to a role it belongs to (no self-escalation).
fn may_grant(access: &Access, req: &CreateGrant) -> Result<()> {
    if access.is_admin() {
        return Ok(());
    }
    if req.privilege.is_account_level() {
        return Err(Error::permission_denied(
            "only an account admin may grant account privileges",
        ));
    }
    access.authorize(Action::Manage, &req.securable)?;
    if access.roles().contains(&req.role) {
        return Err(Error::permission_denied(
            "a principal may not grant to a role it belongs to",
        ));
    }
    Ok(())
}

/// The keys that prove `securable` exists in `account` (its record, and for catalog
/// objects the catalog in this account).
fn existence_keys(account: &str, securable: &Securable) -> Vec<flotilla_metastore::Key> {
    let mut out = Vec::new();
    if let Some(c) = securable.catalog_id() {
        out.push(keys::catalog(account, c));
    }
    if let Some(k) = securable.record_key(account)
        && !out.contains(&k)
    {
        out.push(k);
    }
    out
}

/// Whether the reads prove `securable` exists (a table slot holding a table, not a view).
fn exists(reads: &crate::service::Reads, account: &str, securable: &Securable) -> Result<bool> {
    for k in existence_keys(account, securable) {
        if reads.item(&k).is_none() {
            return Ok(false);
        }
    }
    let kind = match securable.kind() {
        SecurableType::Table => flotilla_domain::model::RelationKind::Table,
        SecurableType::View => flotilla_domain::model::RelationKind::View,
        _ => return Ok(true),
    };
    let Some(k) = securable.record_key(account) else {
        return Ok(false);
    };
    Ok(reads
        .read::<RelationRecord>(k)?
        .is_some_and(|r| r.value.kind == kind))
}

pub async fn create(
    state: &AppState,
    access: &Access,
    req: CreateGrant,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    let account = access.account.as_str();
    validate_role_name(&req.role)?;
    req.securable.validate()?;
    if !req.privilege.applies_to(req.securable.kind()) {
        return Err(Error::invalid(format!(
            "{} cannot be granted on a {:?} securable",
            req.privilege,
            req.securable.kind()
        ))
        .with_detail("privilege", req.privilege.name()));
    }
    if on_conflict == OnConflict::Replace {
        return Err(Error::invalid("grants cannot be replaced"));
    }
    may_grant(access, &req)?;
    let mut reads = account_guard_keys(account).to_vec();
    reads.extend(existence_keys(account, &req.securable));
    let granted_by = access.principal.subject.clone();
    run_create_with(state, idem, &reads, |id, got| {
        let (req, granted_by) = (&req, &granted_by);
        async move {
            if let Some(e) = account_guard_error_from(&got, account) {
                return Err(e);
            }
            if !exists(&got, account, &req.securable)? {
                return Err(req.securable.absent());
            }
            let view = state.acl.current(state.store.as_ref(), account).await?;
            if !view.roles.contains_key(&req.role) {
                return Err(Error::not_found("role"));
            }
            if let Some(existing) = view.grants.values().find(|g| {
                g.role == req.role && g.privilege == req.privilege && g.securable == req.securable
            }) {
                return match on_conflict {
                    OnConflict::ReturnExisting => {
                        Ok(Plan::Respond(RecordedResponse::ok(existing.to_api())))
                    }
                    _ => Err(Error::already_exists(
                        "the role already holds this privilege on this securable",
                    )
                    .with_detail("grant_id", existing.id.clone())),
                };
            }
            if view.grants.len() >= MAX_GRANTS {
                return Err(Error::invalid(format!(
                    "an account holds at most {MAX_GRANTS} grants"
                )));
            }
            if view.grants_within(&req.securable).len() >= MAX_GRANTS_PER_SECURABLE {
                return Err(Error::invalid(format!(
                    "at most {MAX_GRANTS_PER_SECURABLE} grants may name one securable and what \
                     is below it"
                )));
            }
            super::roles::check_grant_room(&view, &req.role)?;
            let rec = GrantRecord {
                id,
                role: req.role.clone(),
                privilege: req.privilege,
                securable: req.securable.clone(),
                revision: 1,
                create_time: state.clock.now_rfc3339(),
                granted_by: granted_by.clone(),
            };
            let key = keys::grant(account, &rec.id);
            let mut ops = account_guards(account);
            ops.push(Op::check(keys::role(account, &req.role), Condition::Exists));
            for k in existence_keys(account, &req.securable) {
                ops.push(Op::check(k, Condition::Exists));
            }
            ops.push(Op::create(key.clone(), crate::service::to_body(&rec)?));
            ops.push(view.generation().bump_op(account)?);
            record_account(state, &mut ops, account, grant_event("created", &rec))?;
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: key,
            })
        }
    })
    .await
}

/// The event of a grant's creation or revocation: its role, privilege and securable (the
/// event is shown to whoever may see the grant: [`may_see`]).
fn grant_event(verb: &str, g: &GrantRecord) -> Operation {
    Operation::of_resource(verb, "grant", Some(&g.id), None).with_details(json!({
        "role": g.role,
        "privilege": g.privilege,
        "securable": g.securable,
    }))
}

/// Whether the caller may see (and revoke) `grant`: account admins every grant, others the
/// grants on securables they manage.
fn may_see(access: &Access, grant: &GrantRecord) -> bool {
    access.is_admin() || access.allows(Action::Manage, &grant.securable)
}

pub async fn get(state: &AppState, access: &Access, id: &str) -> Result<Value> {
    let view = state
        .acl
        .current(state.store.as_ref(), &access.account)
        .await?;
    match view.grants.get(id) {
        Some(g) if may_see(access, g) => Ok(g.to_api()),
        _ => Err(not_found()),
    }
}

/// Revokes a grant: in force from the next request on every host.
pub async fn delete(
    state: &AppState,
    access: &Access,
    id: &str,
    if_match: Option<&str>,
) -> Result<()> {
    let account = access.account.as_str();
    write(state, account, |view, after_unknown| {
        let Some(g) = view.grants.get(id).filter(|g| may_see(access, g)) else {
            return super::gone(after_unknown, not_found());
        };
        crate::service::check_if_match(if_match, &etag_for(&g.id, g.revision))?;
        let mut ops = vec![Op::delete(keys::grant(account, id))];
        record_account(state, &mut ops, account, grant_event("deleted", g))?;
        Ok(Step::Commit(ops, ()))
    })
    .await
}

/// `GET {A}/grants?role=&securable_type=`: the grants the caller may see, by id.
pub async fn list(
    state: &AppState,
    access: &Access,
    role: Option<&str>,
    securable_type: Option<SecurableType>,
    size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let account = access.account.as_str();
    let view = state.acl.current(state.store.as_ref(), account).await?;
    let items = view
        .grants
        .values()
        .filter(|g| role.is_none_or(|r| g.role == r))
        .filter(|g| securable_type.is_none_or(|t| g.securable.kind() == t))
        .filter(|g| may_see(access, g))
        .map(|g| (g.id.clone(), g.to_api()))
        .collect();
    let scope = format!(
        "grants|{account}|{}|{:?}",
        role.unwrap_or_default(),
        securable_type
    );
    super::page(&scope, items, size, token)
}

/// The securable named by the explain route's query parameters.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurableQuery {
    #[serde(default)]
    pub securable_type: Option<String>,
    #[serde(default)]
    pub catalog_id: Option<String>,
    /// A namespace path, levels joined by U+001F (`%1F`) as in URL paths.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub integration_id: Option<String>,
    #[serde(default)]
    pub overlay_id: Option<String>,
}

impl SecurableQuery {
    pub fn securable(&self) -> Result<Securable> {
        // Every id given is checked, whether the securable type uses it or not.
        for (what, v) in [
            ("catalog_id", &self.catalog_id),
            ("integration_id", &self.integration_id),
            ("overlay_id", &self.overlay_id),
        ] {
            if let Some(v) = v
                && flotilla_domain::names::validate_resource_id(v).is_err()
            {
                return Err(Error::invalid(format!("{what} is malformed")));
            }
        }
        let kind = match self.securable_type.as_deref() {
            None | Some("") => SecurableType::Account,
            Some(t) => SecurableType::parse(t)?,
        };
        let need = |v: &Option<String>, what: &str| {
            v.clone().filter(|s| !s.is_empty()).ok_or_else(|| {
                Error::invalid(format!("{what} is required for securable_type {kind:?}"))
            })
        };
        let path = || -> Result<Vec<String>> {
            Ok(NamespacePath::from_url_segment(&need(&self.path, "path")?)?
                .segments()
                .to_vec())
        };
        let s = match kind {
            SecurableType::Account => Securable::Account,
            SecurableType::Catalog => Securable::Catalog {
                catalog_id: need(&self.catalog_id, "catalog_id")?,
            },
            SecurableType::Namespace => Securable::Namespace {
                catalog_id: need(&self.catalog_id, "catalog_id")?,
                path: path()?,
            },
            SecurableType::Table => Securable::Table {
                catalog_id: need(&self.catalog_id, "catalog_id")?,
                path: path()?,
                name: need(&self.name, "name")?,
            },
            SecurableType::View => Securable::View {
                catalog_id: need(&self.catalog_id, "catalog_id")?,
                path: path()?,
                name: need(&self.name, "name")?,
            },
            SecurableType::Integration => Securable::Integration {
                integration_id: need(&self.integration_id, "integration_id")?,
            },
            SecurableType::Overlay => Securable::Overlay {
                overlay_id: need(&self.overlay_id, "overlay_id")?,
            },
            SecurableType::IndexCatalog => Securable::IndexCatalog {
                name: need(&self.name, "name")?,
            },
        };
        s.validate()?;
        Ok(s)
    }
}

/// `GET {A}/privileges?...`: the caller's effective privileges on a securable it may see,
/// each with the grant it comes from.
pub fn explain(access: &Access, securable: &Securable) -> Result<Value> {
    access.authorize(Action::Describe, securable)?;
    Ok(access.explain(securable))
}
