//! Route table and handlers. Handlers parse, authorize and call a service; nothing else.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use flotilla_domain::model::RelationKind;
use flotilla_domain::names::{NamespacePath, validate_account_id};
use serde_json::json;
use tower_http::trace::TraceLayer;

use super::extract::{
    Access, Action, Auth, CreateParams, IdempotencyKey, IfMatch, JsonBody, ListParams,
    MAX_BODY_BYTES, P, Q, Scope, Securable, account_idempotency, idempotency,
};
use super::{no_content, ok, recorded};
use crate::error::HttpResult;
use flotilla_base::error::{Error, Result};
use flotilla_services::acl::Privilege;
use flotilla_services::service::idempotency::system_receipt_key;
use flotilla_services::service::{accounts, catalogs, namespaces, page_size, relations};
use flotilla_services::state::AppState;

/// The whole API.
pub fn router(state: AppState) -> Router {
    router_with(state, Router::new())
}

/// The whole API plus `extra` routes served by crates built on this one (the Iceberg REST
/// endpoint); they share the state, the body limit and the request tracing.
pub fn router_with(state: AppState, extra: Router<AppState>) -> Router {
    let account_routes = Router::new()
        .route("/catalogs", post(create_catalog).get(list_catalogs))
        .route(
            "/catalogs/{catalog_id}",
            get(get_catalog).patch(patch_catalog).delete(delete_catalog),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces",
            post(create_namespace).get(list_namespaces),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces/{ns}",
            get(get_namespace)
                .patch(patch_namespace)
                .delete(delete_namespace),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces/{ns}/tables",
            post(create_table).get(list_tables),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}",
            get(get_table).patch(patch_table).delete(delete_table),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces/{ns}/views",
            post(create_view).get(list_views),
        )
        .route(
            "/catalogs/{catalog_id}/namespaces/{ns}/views/{name}",
            get(get_view).patch(patch_view).delete(delete_view),
        );
    let api = Router::new()
        // The operator web console (static assets; it calls the routes below).
        .merge(flotilla_console::routes())
        .route("/v1/health", get(health))
        .route("/v1/admin/metrics", get(metrics))
        .route("/v1/accounts", post(create_account).get(list_accounts))
        .route(
            "/v1/accounts/{account_id}",
            get(get_account).delete(delete_account),
        )
        .nest("/v1/accounts/{account_id}", account_routes)
        .merge(super::access_routes::routes())
        .merge(super::capture_routes::routes())
        .merge(super::directory_routes::routes())
        .merge(super::event_routes::routes())
        .merge(super::index_routes::routes())
        .merge(super::integration_routes::routes())
        .merge(super::openapi_routes::routes())
        .merge(super::reconcile_routes::routes())
        .merge(super::upstream_routes::routes())
        .merge(extra);
    layered(state, api)
}

/// `routes` with the fallbacks, the body limit, the request limits, the request metrics and
/// the request tracing every route of the API runs under: what a host serving only some
/// routes (the Iceberg REST function) wraps them in.
pub fn layered(state: AppState, routes: Router<AppState>) -> Router {
    super::with_fallbacks(routes)
        // Our extractor enforces the limit with the API's error shape; this is a backstop.
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES + 1))
        .layer(axum::middleware::from_fn(super::wire::request_limits))
        .layer(axum::middleware::from_fn(super::metrics_layer::record))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::request_context::scope,
        ))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
                let route = req
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default();
                tracing::info_span!("request", method = %req.method(), route = %route, principal = tracing::field::Empty)
            }),
        )
        .with_state(state)
}

async fn health() -> Response {
    ok(json!({"status": "ok"}))
}

async fn metrics(State(state): State<AppState>, Auth(p): Auth) -> HttpResult<Response> {
    p.require_operator()?;
    let text = state.render_metrics();
    let mut resp = (StatusCode::OK, text).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(resp)
}

// ---- helpers --------------------------------------------------------------------------

fn ns_path(segment: &str) -> Result<NamespacePath> {
    Ok(NamespacePath::from_url_segment(segment)?)
}

fn route_key(parts: &[&str]) -> String {
    parts.join("/")
}

// ---- accounts -------------------------------------------------------------------------

async fn create_account(
    State(state): State<AppState>,
    Auth(p): Auth,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<accounts::CreateAccount>,
) -> HttpResult<Response> {
    p.require_operator()?;
    let idem = idempotency(
        k,
        params.on_conflict,
        system_receipt_key,
        "accounts",
        &body.canonical,
    )?;
    Ok(recorded(
        accounts::create(&state, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_accounts(
    State(state): State<AppState>,
    Auth(p): Auth,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    p.require_operator()?;
    Ok(ok(accounts::list(
        &state,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_account(State(state): State<AppState>, Scope(access): Scope) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::Account)?;
    Ok(ok(accounts::get(&state, &access.account).await?))
}

async fn delete_account(
    State(state): State<AppState>,
    Auth(p): Auth,
    P(a): P<String>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    p.require_operator()?;
    validate_account_id(&a).map_err(Error::from)?;
    accounts::delete(&state, &a, m.as_deref(), &state.account_cleanups).await?;
    Ok(no_content())
}

// ---- catalogs -------------------------------------------------------------------------

async fn create_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<catalogs::CreateCatalog>,
) -> HttpResult<Response> {
    access.authorize(
        Action::Create(Privilege::CatalogCreate),
        &Securable::Account,
    )?;
    let a = &access.account;
    let idem = account_idempotency(a, k, params.on_conflict, "catalogs", &body.canonical)?;
    Ok(recorded(
        catalogs::create(&state, a, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_catalogs(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    if l.parent.is_some() {
        return Err(Error::invalid("parent applies to namespace listings only").into());
    }
    Ok(ok(catalogs::list(
        &state,
        &access,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::catalog(&c))?;
    Ok(ok(catalogs::get(&state, &access.account, &c).await?))
}

async fn patch_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    IfMatch(m): IfMatch,
    body: JsonBody<catalogs::PatchCatalog>,
) -> HttpResult<Response> {
    access.authorize(Action::Manage, &Securable::catalog(&c))?;
    Ok(ok(catalogs::patch(
        &state,
        &access.account,
        &c,
        body.value,
        m.as_deref(),
    )
    .await?))
}

async fn delete_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    access.authorize(Action::Drop, &Securable::catalog(&c))?;
    catalogs::delete(&state, &access.account, &c, m.as_deref()).await?;
    Ok(no_content())
}

// ---- namespaces -----------------------------------------------------------------------

async fn create_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<namespaces::CreateNamespace>,
) -> HttpResult<Response> {
    let path = NamespacePath::new(body.value.path.clone()).map_err(Error::from)?;
    access.authorize(
        Action::Write,
        &Securable::container(&c, path.parent().as_ref()),
    )?;
    let a = &access.account;
    let route = route_key(&["namespaces", &c]);
    let idem = account_idempotency(a, k, params.on_conflict, &route, &body.canonical)?;
    Ok(recorded(
        namespaces::create(&state, a, &c, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_namespaces(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    let parent = match l.parent.as_deref() {
        Some(s) if !s.is_empty() => Some(ns_path(s)?),
        _ => None,
    };
    access.authorize(Action::Describe, &Securable::container(&c, parent.as_ref()))?;
    Ok(ok(namespaces::list(
        &state,
        &access,
        &c,
        parent.as_ref(),
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?))
}

async fn get_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Describe, &Securable::namespace(&c, &path))?;
    Ok(ok(
        namespaces::get(&state, &access.account, &c, &path).await?
    ))
}

async fn patch_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    IfMatch(m): IfMatch,
    body: JsonBody<namespaces::PatchNamespace>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Manage, &Securable::namespace(&c, &path))?;
    Ok(ok(namespaces::patch(
        &state,
        &access.account,
        &c,
        &path,
        body.value,
        m.as_deref(),
    )
    .await?))
}

async fn delete_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Drop, &Securable::namespace(&c, &path))?;
    namespaces::delete(&state, &access.account, &c, &path, m.as_deref()).await?;
    Ok(no_content())
}

// ---- tables and views -----------------------------------------------------------------

async fn create_table(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<relations::CreateTable>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Write, &Securable::namespace(&c, &path))?;
    let a = &access.account;
    let route = route_key(&["tables", &c, &ns]);
    let idem = account_idempotency(a, k, params.on_conflict, &route, &body.canonical)?;
    Ok(recorded(
        relations::create_table(&state, a, &c, &path, body.value, params.on_conflict, idem).await?,
    ))
}

async fn create_view(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<relations::CreateView>,
) -> HttpResult<Response> {
    let path = ns_path(&ns)?;
    access.authorize(Action::Write, &Securable::namespace(&c, &path))?;
    let a = &access.account;
    let route = route_key(&["views", &c, &ns]);
    let idem = account_idempotency(a, k, params.on_conflict, &route, &body.canonical)?;
    Ok(recorded(
        relations::create_view(&state, a, &c, &path, body.value, params.on_conflict, idem).await?,
    ))
}

async fn list_relations(
    state: AppState,
    access: Access,
    c: String,
    ns: String,
    l: ListParams,
    kind: RelationKind,
) -> HttpResult<Response> {
    if l.parent.is_some() {
        return Err(Error::invalid("parent applies to namespace listings only").into());
    }
    let path = ns_path(&ns)?;
    access.authorize(Action::Describe, &Securable::namespace(&c, &path))?;
    let mut page = relations::list(
        &state,
        &access,
        &c,
        &path,
        kind,
        page_size(l.page_size)?,
        l.page_token.as_deref(),
    )
    .await?;
    if kind == RelationKind::Table
        && let Some(items) = page["items"].as_array_mut()
    {
        flotilla_reconcile::freshness::annotate(&state, &access.account, &c, items).await?;
    }
    Ok(ok(page))
}

async fn list_tables(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    list_relations(state, access, c, ns, l, RelationKind::Table).await
}

async fn list_views(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    list_relations(state, access, c, ns, l, RelationKind::View).await
}

type RelPath = P<(String, String, String, String)>;

async fn get_relation(
    state: AppState,
    access: Access,
    path: (String, String, String, String),
    kind: RelationKind,
) -> HttpResult<Response> {
    let (_, c, ns, name) = path;
    let ns = ns_path(&ns)?;
    access.authorize(Action::Read, &Securable::relation(&c, &ns, &name, kind))?;
    let mut rel = relations::get(&state, &access.account, &c, &ns, &name, kind).await?;
    flotilla_reconcile::freshness::annotate(
        &state,
        &access.account,
        &c,
        std::slice::from_mut(&mut rel),
    )
    .await?;
    Ok(ok(rel))
}

async fn get_table(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
) -> HttpResult<Response> {
    get_relation(state, access, path, RelationKind::Table).await
}

async fn get_view(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
) -> HttpResult<Response> {
    get_relation(state, access, path, RelationKind::View).await
}

async fn patch_relation(
    state: AppState,
    access: Access,
    path: (String, String, String, String),
    if_match: Option<String>,
    body: relations::PatchRelation,
    kind: RelationKind,
) -> HttpResult<Response> {
    let (_, c, ns, name) = path;
    let ns = ns_path(&ns)?;
    let this = Securable::relation(&c, &ns, &name, kind);
    access.authorize(Action::Write, &this)?;
    // A rename or move drops it here and creates it there.
    if body.name.as_ref().is_some_and(|n| n != &name)
        || body.namespace.as_ref().is_some_and(|p| p != ns.segments())
    {
        access.authorize(Action::Drop, &this)?;
        let dest = match &body.namespace {
            Some(p) => NamespacePath::new(p.clone()).map_err(Error::from)?,
            None => ns.clone(),
        };
        access.authorize(Action::Write, &Securable::namespace(&c, &dest))?;
    }
    Ok(ok(relations::patch(
        &state,
        &access.account,
        &c,
        &ns,
        &name,
        kind,
        body,
        if_match.as_deref(),
    )
    .await?))
}

async fn patch_table(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
    IfMatch(m): IfMatch,
    body: JsonBody<relations::PatchRelation>,
) -> HttpResult<Response> {
    patch_relation(state, access, path, m, body.value, RelationKind::Table).await
}

async fn patch_view(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
    IfMatch(m): IfMatch,
    body: JsonBody<relations::PatchRelation>,
) -> HttpResult<Response> {
    patch_relation(state, access, path, m, body.value, RelationKind::View).await
}

async fn delete_relation(
    state: AppState,
    access: Access,
    path: (String, String, String, String),
    if_match: Option<String>,
    kind: RelationKind,
) -> HttpResult<Response> {
    let (_, c, ns, name) = path;
    let ns = ns_path(&ns)?;
    access.authorize(Action::Drop, &Securable::relation(&c, &ns, &name, kind))?;
    relations::delete(
        &state,
        &access.account,
        &c,
        &ns,
        &name,
        kind,
        if_match.as_deref(),
    )
    .await?;
    Ok(no_content())
}

async fn delete_table(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    delete_relation(state, access, path, m, RelationKind::Table).await
}

async fn delete_view(
    State(state): State<AppState>,
    Scope(access): Scope,
    P(path): RelPath,
    IfMatch(m): IfMatch,
) -> HttpResult<Response> {
    delete_relation(state, access, path, m, RelationKind::View).await
}
