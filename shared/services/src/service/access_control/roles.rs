//! Roles and their members. A role is named in grants and memberships, so its name is its
//! key; deleting it removes its members and its grants in the same transaction.

use flotilla_domain::keys;
use flotilla_domain::model::etag_for;
use flotilla_metastore::Op;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    MAX_GRANTS_PER_ROLE, MAX_MEMBERS_PER_ROLE, MAX_ROLES, MAX_ROLES_PER_MEMBER, Operation, Step,
    record_account, write,
};
use crate::acl::AclView;
use crate::acl::model::{Member, MemberRecord, RoleRecord, validate_role_name};
use crate::error::{Error, Result};
use crate::service::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create_with};
use crate::service::{OnConflict, account_guard_error_from, account_guard_keys, account_guards};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRole {
    pub name: String,
}

fn role_api(view: &AclView, role: &RoleRecord) -> Value {
    let mut v = role.to_api();
    v["members"] = json!(
        view.members
            .get(&role.name)
            .map(|m| m.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    );
    v
}

fn not_found() -> Error {
    Error::not_found("role")
}

pub async fn create(
    state: &AppState,
    account: &str,
    req: CreateRole,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_role_name(&req.name)?;
    if on_conflict == OnConflict::Replace {
        return Err(Error::invalid(
            "roles cannot be replaced: delete the role (and its grants) first",
        ));
    }
    let reads = account_guard_keys(account).to_vec();
    run_create_with(state, idem, &reads, |id, got| {
        let req = &req;
        async move {
            if let Some(e) = account_guard_error_from(&got, account) {
                return Err(e);
            }
            let view = state.acl.current(state.store.as_ref(), account).await?;
            if let Some(existing) = view.roles.get(&req.name) {
                return match on_conflict {
                    OnConflict::ReturnExisting => Ok(Plan::Respond(RecordedResponse::ok(
                        role_api(&view, existing),
                    ))),
                    _ => Err(Error::already_exists(format!(
                        "a role named {:?} already exists",
                        req.name
                    ))),
                };
            }
            if view.roles.len() >= MAX_ROLES {
                return Err(Error::invalid(format!(
                    "an account holds at most {MAX_ROLES} roles"
                )));
            }
            let now = state.clock.now_rfc3339();
            let rec = RoleRecord {
                id,
                name: req.name.clone(),
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            let mut ops = account_guards(account);
            let key = keys::role(account, &rec.name);
            ops.push(Op::create(key.clone(), crate::service::to_body(&rec)?));
            ops.push(view.generation().bump_op(account)?);
            record_account(
                state,
                &mut ops,
                account,
                Operation::of_resource("created", "role", Some(&rec.id), Some(&rec.name)),
            )?;
            let mut body = rec.to_api();
            body["members"] = json!([]);
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(body),
                probe: key,
            })
        }
    })
    .await
}

pub async fn get(state: &AppState, account: &str, name: &str) -> Result<Value> {
    let view = state.acl.current(state.store.as_ref(), account).await?;
    let role = view.roles.get(name).ok_or_else(not_found)?;
    Ok(role_api(&view, role))
}

pub async fn list(
    state: &AppState,
    account: &str,
    size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let view = state.acl.current(state.store.as_ref(), account).await?;
    let items = view
        .roles
        .values()
        .map(|r| (r.name.clone(), role_api(&view, r)))
        .collect();
    super::page(&format!("roles|{account}"), items, size, token)
}

/// Deletes a role with its members and grants (one transaction with the generation bump).
pub async fn delete(
    state: &AppState,
    account: &str,
    name: &str,
    if_match: Option<&str>,
) -> Result<()> {
    write(state, account, |view, after_unknown| {
        let Some(role) = view.roles.get(name) else {
            return super::gone(after_unknown, not_found());
        };
        crate::service::check_if_match(if_match, &etag_for(&role.id, role.revision))?;
        let mut ops = vec![Op::delete(keys::role(account, name))];
        let members: Vec<&String> = view.members.get(name).into_iter().flatten().collect();
        for m in &members {
            ops.push(Op::delete(keys::role_member(account, name, m)));
        }
        let grants: Vec<&str> = view
            .grants
            .values()
            .filter(|g| g.role == name)
            .map(|g| g.id.as_str())
            .collect();
        for g in &grants {
            ops.push(Op::delete(keys::grant(account, g)));
        }
        record_account(
            state,
            &mut ops,
            account,
            Operation::of_resource("deleted", "role", Some(&role.id), Some(name))
                .with_details(json!({ "members_removed": members, "grants_removed": grants })),
        )?;
        Ok(Step::Commit(ops, ()))
    })
    .await
}

/// `PUT .../roles/{name}/members/{member}`: `true` when the member was added, `false` when
/// it already was one.
pub async fn add_member(state: &AppState, account: &str, role: &str, member: &str) -> Result<bool> {
    let member = Member::parse(member)?.as_string();
    write(state, account, |view, after_unknown| {
        if !view.roles.contains_key(role) {
            return Err(not_found());
        }
        let members = view.members.get(role);
        if members.is_some_and(|m| m.contains(&member)) {
            return Ok(Step::Done(after_unknown));
        }
        if members.map_or(0, |m| m.len()) >= MAX_MEMBERS_PER_ROLE {
            return Err(Error::invalid(format!(
                "a role has at most {MAX_MEMBERS_PER_ROLE} members (name a group to add more)"
            )));
        }
        if view
            .members
            .values()
            .filter(|m| m.contains(&member))
            .count()
            >= MAX_ROLES_PER_MEMBER
        {
            return Err(Error::invalid(format!(
                "a principal or group belongs to at most {MAX_ROLES_PER_MEMBER} roles"
            )));
        }
        let rec = MemberRecord {
            role: role.to_owned(),
            member: member.clone(),
            create_time: state.clock.now_rfc3339(),
        };
        let mut ops = account_guards(account);
        ops.push(Op::check(
            keys::role(account, role),
            flotilla_metastore::Condition::Exists,
        ));
        ops.push(Op::create(
            keys::role_member(account, role, &member),
            crate::service::to_body(&rec)?,
        ));
        record_account(
            state,
            &mut ops,
            account,
            member_event("added", role, &member),
        )?;
        Ok(Step::Commit(ops, true))
    })
    .await
}

pub async fn remove_member(
    state: &AppState,
    account: &str,
    role: &str,
    member: &str,
) -> Result<()> {
    let member = Member::parse(member)?.as_string();
    write(state, account, |view, after_unknown| {
        if !view.roles.contains_key(role) {
            return Err(not_found());
        }
        if !view.members.get(role).is_some_and(|m| m.contains(&member)) {
            return super::gone(after_unknown, Error::not_found("member"));
        }
        let mut ops = vec![Op::delete(keys::role_member(account, role, &member))];
        record_account(
            state,
            &mut ops,
            account,
            member_event("removed", role, &member),
        )?;
        Ok(Step::Commit(ops, ()))
    })
    .await
}

/// The event of a membership change: about the role, naming the member.
fn member_event(verb: &str, role: &str, member: &str) -> Operation {
    Operation::account(
        &format!("x-flotilla-role-member-{verb}"),
        Some(crate::service::events::Resource::new(
            "role",
            None,
            Some(role),
        )),
    )
    .with_details(json!({ "member": member }))
}

/// The memberships naming `member`, for a principal's deletion.
pub(crate) fn membership_deletes(view: &AclView, account: &str, member: &str) -> Vec<Op> {
    view.members
        .iter()
        .filter(|(_, m)| m.contains(member))
        .map(|(r, _)| Op::delete(keys::role_member(account, r, member)))
        .collect()
}

/// Refuses a grant to `role` beyond the per-role bound.
pub(crate) fn check_grant_room(view: &AclView, role: &str) -> Result<()> {
    if view.grants.values().filter(|g| g.role == role).count() >= MAX_GRANTS_PER_ROLE {
        return Err(Error::invalid(format!(
            "a role holds at most {MAX_GRANTS_PER_ROLE} grants"
        )));
    }
    Ok(())
}
