//! Routes of access control (`docs/access-control.md`): service principals, roles and their
//! members, grants, the explain route (`GET {A}/privileges`), `GET /v1/whoami` and the token
//! route (`POST /v1/oauth/tokens`, in `oauth.rs`).
//!
//! Principals, roles and memberships are the account admin's; grants and revokes are the
//! admin's or, on a securable it manages, a `MANAGE` holder's (the service decides, through
//! the same [`Access`]).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::json;

use super::extract::{
    Access, Action, Auth, CreateParams, IdempotencyKey, IfMatch, JsonBody, P, Q, Scope, Securable,
    account_idempotency,
};
use super::{json_response, no_content, ok, recorded};
use crate::error::HttpResult;
use flotilla_services::acl::SecurableType;
use flotilla_services::service::access_control::{grants, principals, roles};
use flotilla_services::service::page_size;
use flotilla_services::state::AppState;

const A: &str = "/v1/accounts/{account_id}";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/oauth/tokens", post(super::oauth::oauth_tokens))
        .route("/v1/whoami", get(whoami))
        .route(
            &format!("{A}/principals"),
            post(create_principal).get(list_principals),
        )
        .route(
            &format!("{A}/principals/{{principal_id}}"),
            get(get_principal).delete(delete_principal),
        )
        .route(
            &format!("{A}/principals/{{principal_id}}/rotate"),
            post(rotate_principal),
        )
        .route(&format!("{A}/roles"), post(create_role).get(list_roles))
        .route(
            &format!("{A}/roles/{{role}}"),
            get(get_role).delete(delete_role),
        )
        .route(
            &format!("{A}/roles/{{role}}/members/{{member}}"),
            put(add_member).delete(remove_member),
        )
        .route(&format!("{A}/grants"), post(create_grant).get(list_grants))
        .route(
            &format!("{A}/grants/{{grant_id}}"),
            get(get_grant).delete(delete_grant),
        )
        .route(&format!("{A}/privileges"), get(privileges))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    page_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantQuery {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    securable_type: Option<String>,
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    page_token: Option<String>,
}

fn admin(access: &Access) -> HttpResult<()> {
    Ok(access.authorize(Action::Administer, &Securable::Account)?)
}

/// `GET /v1/whoami`: the caller as the server sees it (no secret, no token).
async fn whoami(Auth(p): Auth) -> HttpResult<Response> {
    let identity = p.identity.as_ref();
    Ok(ok(json!({
        "subject": p.subject,
        "operator": p.operator,
        "accounts": p.accounts,
        "principal": identity.map(|i| i.name.clone()),
        "groups": identity.map(|i| i.groups.clone()).unwrap_or_default(),
        "service_principal": identity.and_then(|i| i.service.as_ref()).map(|s| s.id.clone()),
    })))
}

// ---- service principals ---------------------------------------------------------------

async fn create_principal(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<principals::CreatePrincipal>,
) -> HttpResult<Response> {
    admin(&access)?;
    let a = &access.account;
    let idem = account_idempotency(a, k, params.on_conflict, "principals", &body.canonical)?;
    Ok(recorded(
        principals::create(&state, a, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_principals(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<Page>,
) -> HttpResult<Response> {
    admin(&access)?;
    Ok(ok(principals::list(
        &state,
        &access.account,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_principal(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    admin(&access)?;
    Ok(ok(principals::get(&state, &access.account, &id).await?))
}

async fn rotate_principal(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    admin(&access)?;
    Ok(ok(principals::rotate(
        &state,
        &access.account,
        &id,
        m.as_deref(),
    )
    .await?))
}

async fn delete_principal(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    admin(&access)?;
    principals::delete(&state, &access.account, &id, m.as_deref()).await?;
    Ok(no_content())
}

// ---- roles ----------------------------------------------------------------------------

async fn create_role(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<roles::CreateRole>,
) -> HttpResult<Response> {
    admin(&access)?;
    let a = &access.account;
    let idem = account_idempotency(a, k, params.on_conflict, "roles", &body.canonical)?;
    Ok(recorded(
        roles::create(&state, a, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_roles(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<Page>,
) -> HttpResult<Response> {
    admin(&access)?;
    Ok(ok(roles::list(
        &state,
        &access.account,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_role(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, role)): P<(String, String)>,
) -> HttpResult<Response> {
    admin(&access)?;
    Ok(ok(roles::get(&state, &access.account, &role).await?))
}

async fn delete_role(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, role)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    admin(&access)?;
    roles::delete(&state, &access.account, &role, m.as_deref()).await?;
    Ok(no_content())
}

/// `PUT`: `201` when added, `200` when it already was a member.
async fn add_member(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, role, member)): P<(String, String, String)>,
) -> HttpResult<Response> {
    admin(&access)?;
    let added = roles::add_member(&state, &access.account, &role, &member).await?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(
        status,
        json!({"role": role, "member": member}),
    ))
}

async fn remove_member(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, role, member)): P<(String, String, String)>,
) -> HttpResult<Response> {
    admin(&access)?;
    roles::remove_member(&state, &access.account, &role, &member).await?;
    Ok(no_content())
}

// ---- grants ---------------------------------------------------------------------------

async fn create_grant(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<grants::CreateGrant>,
) -> HttpResult<Response> {
    let idem = account_idempotency(
        &access.account,
        k,
        params.on_conflict,
        "grants",
        &body.canonical,
    )?;
    Ok(recorded(
        grants::create(&state, &access, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_grants(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(q): Q<GrantQuery>,
) -> HttpResult<Response> {
    let kind = match q.securable_type.as_deref() {
        None | Some("") => None,
        Some(t) => Some(SecurableType::parse(t)?),
    };
    Ok(ok(grants::list(
        &state,
        &access,
        q.role.as_deref().filter(|r| !r.is_empty()),
        kind,
        page_size(q.page_size)?,
        q.page_token.as_deref(),
    )
    .await?))
}

async fn get_grant(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    Ok(ok(grants::get(&state, &access, &id).await?))
}

async fn delete_grant(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    grants::delete(&state, &access, &id, m.as_deref()).await?;
    Ok(no_content())
}

/// `GET {A}/privileges?securable_type=&catalog_id=&path=&name=&integration_id=&overlay_id=`.
async fn privileges(Scope(access): Scope, Q(q): Q<grants::SecurableQuery>) -> HttpResult<Response> {
    let securable = q.securable()?;
    Ok(ok(grants::explain(&access, &securable)?))
}
