//! Routes of integration validation and upstream discovery ("Vended storage
//! credentials", "Follow-on API evolution"). Handlers parse and authorize; the work is in
//! `flotilla_services::access`.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use super::extract::{Action, P, Q, Scope, Securable};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
use flotilla_services::access::upstream::{self, Kinds, parse_namespace};
use flotilla_services::access::validation::{self, TableChoice};
use flotilla_services::service::page_size;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/accounts/{account_id}/integrations/{integration_id}/validate",
            post(validate),
        )
        .route(
            "/v1/accounts/{account_id}/integrations/{integration_id}/upstream/namespaces",
            get(list_namespaces),
        )
        .route(
            "/v1/accounts/{account_id}/integrations/{integration_id}/upstream/objects",
            get(list_objects),
        )
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ValidateQuery {
    /// Validate with this table (`%1F`-joined namespace) instead of the first discovered.
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    table: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespacesQuery {
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    page_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectsQuery {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    kinds: Option<String>,
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    page_token: Option<String>,
}

async fn validate(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<ValidateQuery>,
) -> HttpResult<Response> {
    access.authorize(Action::Use, &Securable::integration(&id))?;
    let a = &access.account;
    let table = match (q.namespace.as_deref(), q.table) {
        (None, None) => None,
        (Some(ns), Some(name)) if !name.is_empty() => Some(TableChoice {
            namespace: parse_namespace(ns, "namespace")?,
            name,
        }),
        _ => return Err(Error::invalid("namespace and table are given together").into()),
    };
    let report = validation::validate(&state, a, &id, table).await?;
    Ok(ok(
        serde_json::to_value(report).map_err(|e| Error::internal(e.to_string()))?
    ))
}

async fn list_namespaces(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<NamespacesQuery>,
) -> HttpResult<Response> {
    access.authorize(Action::Use, &Securable::integration(&id))?;
    let a = &access.account;
    let parent = match q.parent.as_deref() {
        Some(s) if !s.is_empty() => Some(parse_namespace(s, "parent")?),
        _ => None,
    };
    let size = page_size(q.page_size)?;
    Ok(ok(upstream::list_namespaces(
        &state,
        a,
        &id,
        parent,
        size,
        q.page_token.as_deref(),
    )
    .await?))
}

async fn list_objects(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, id)): P<(String, String)>,
    Q(q): Q<ObjectsQuery>,
) -> HttpResult<Response> {
    access.authorize(Action::Use, &Securable::integration(&id))?;
    let a = &access.account;
    let namespace = match q.namespace.as_deref() {
        Some(s) if !s.is_empty() => parse_namespace(s, "namespace")?,
        _ => return Err(Error::invalid("namespace is required").into()),
    };
    let kinds = match q.kinds.as_deref() {
        None => Kinds::default(),
        Some(k) => Kinds::parse(k)?,
    };
    let size = page_size(q.page_size)?;
    Ok(ok(upstream::list_objects(
        &state,
        a,
        &id,
        namespace,
        kinds,
        size,
        q.page_token.as_deref(),
    )
    .await?))
}
