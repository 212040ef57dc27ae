//! Routes of CatalogIntegration and CatalogOverlay.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post, put};
use serde::Deserialize;

use super::extract::{
    Action, Auth, CreateParams, IdempotencyKey, IfMatch, JsonBody, P, Q, Scope, Securable,
    account_idempotency,
};
use super::{no_content, ok, recorded};
use crate::error::HttpResult;
use flotilla_base::error::Error;
use flotilla_services::acl::Privilege;
use flotilla_services::service::{integrations, overlays, page_size};
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/accounts/{account_id}/integrations",
            post(create_integration).get(list_integrations),
        )
        .route(
            "/v1/accounts/{account_id}/integrations/{integration_id}",
            get(get_integration)
                .patch(patch_integration)
                .delete(delete_integration),
        )
        .route(
            "/v1/accounts/{account_id}/integrations/{integration_id}/authentication",
            put(rotate_authentication),
        )
        .route("/v1/admin/sweep-credentials", post(sweep_credentials))
        .route(
            "/v1/accounts/{account_id}/overlays",
            post(create_overlay).get(list_overlays),
        )
        .route(
            "/v1/accounts/{account_id}/overlays/{overlay_id}",
            get(get_overlay).patch(patch_overlay).delete(delete_overlay),
        )
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    integration_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    #[serde(default)]
    cascade: bool,
}

async fn create_integration(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<integrations::CreateIntegration>,
) -> HttpResult<Response> {
    access.authorize(
        Action::Create(Privilege::IntegrationCreate),
        &Securable::Account,
    )?;
    let a = access.account.clone();
    let fingerprint = integrations::fingerprint_body(&body.canonical);
    let idem = account_idempotency(&a, k, params.on_conflict, "integrations", &fingerprint)?;
    Ok(recorded(
        integrations::create(&state, &a, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_integrations(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<ListQuery>,
) -> HttpResult<Response> {
    if l.integration_id.is_some() {
        return Err(Error::invalid("integration_id filters overlay listings only").into());
    }
    Ok(ok(integrations::list(
        &state,
        &access,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_integration(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<super::capture_routes::CaptureQuery>,
) -> HttpResult<Response> {
    let this = Securable::integration(&id);
    access.authorize(Action::Describe, &this)?;
    if q.revalidate {
        access.authorize(Action::Manage, &this)?;
    }
    let a = &access.account;
    let mut v = integrations::get(&state, a, &id).await?;
    if q.revalidate {
        // Describing may request revalidation: one job per active overlay of the
        // integration, queued for the workers, validates its tables' captured files again.
        v["revalidation"] =
            flotilla_reconcile::capture::service::enqueue_revalidation(&state, a, &id).await?;
    }
    Ok(ok(v))
}

async fn patch_integration(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
    body: JsonBody<integrations::PatchIntegration>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::integration(&id))?;
    Ok(ok(integrations::patch(
        &state,
        &access.account,
        &id,
        body.value,
        m.as_deref(),
    )
    .await?))
}

async fn rotate_authentication(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
    body: JsonBody<integrations::RotateAuthentication>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::integration(&id))?;
    Ok(ok(integrations::rotate(
        &state,
        &access.account,
        &id,
        body.value,
        m.as_deref(),
    )
    .await?))
}

async fn delete_integration(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<DeleteQuery>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    access.authorize(Action::Drop, &Securable::integration(&id))?;
    integrations::delete(&state, &access.account, &id, q.cascade, m.as_deref()).await?;
    Ok(no_content())
}

/// Body of `POST /v1/admin/sweep-credentials`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepRequest {
    account_id: String,
    /// Generations recorded more recently than this are left alone: they may belong to an
    /// operation still in progress. Defaults to one hour.
    #[serde(default = "default_sweep_age")]
    min_age_secs: u64,
}

fn default_sweep_age() -> u64 {
    3600
}

/// Operator only: reclaims retained credential generations of one account (the CLI's
/// `flotilla admin sweep-credentials`). Answers what it did.
async fn sweep_credentials(
    State(state): State<AppState>,
    Auth(p): Auth,
    body: JsonBody<SweepRequest>,
) -> HttpResult<Response> {
    p.require_operator()?;
    let req = body.value;
    flotilla_domain::names::validate_account_id(&req.account_id).map_err(Error::from)?;
    let min_age_ms = i64::try_from(req.min_age_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let report = integrations::sweep(&state, &req.account_id, min_age_ms).await?;
    Ok(ok(
        serde_json::to_value(report).map_err(|e| Error::internal(e.to_string()))?
    ))
}

async fn create_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<overlays::CreateOverlay>,
) -> HttpResult<Response> {
    // An overlay uses its integration and writes into its catalog.
    access.authorize(
        Action::Use,
        &Securable::integration(&body.value.integration_id),
    )?;
    access.authorize(Action::Write, &Securable::catalog(&body.value.catalog_id))?;
    let a = access.account.clone();
    let idem = account_idempotency(&a, k, params.on_conflict, "overlays", &body.canonical)?;
    Ok(recorded(
        overlays::create(&state, &a, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_overlays(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<ListQuery>,
) -> HttpResult<Response> {
    Ok(ok(overlays::list(
        &state,
        &access,
        l.integration_id.as_deref(),
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::overlay(&id))?;
    Ok(ok(overlays::get(&state, &access.account, &id).await?))
}

async fn patch_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
    body: JsonBody<overlays::PatchOverlay>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::overlay(&id))?;
    Ok(ok(overlays::patch(
        &state,
        &access.account,
        &id,
        body.value,
        m.as_deref(),
    )
    .await?))
}

async fn delete_overlay(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    access.authorize(Action::Drop, &Securable::overlay(&id))?;
    overlays::delete(&state, &access.account, &id, m.as_deref()).await?;
    Ok(no_content())
}
