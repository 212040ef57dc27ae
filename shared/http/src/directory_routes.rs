//! Directory routes: the query-replica read of a catalog's directory and the
//! operator's catalog-finalize. Merged into the one router by `routes.rs`.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};

use super::extract::{Action, Auth, JsonBody, P, Scope, Securable};
use super::ok;
use crate::error::HttpResult;
use flotilla_base::error::Error;
use flotilla_directory::FinalizeRequest;
use flotilla_services::service::directory;
use flotilla_services::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/accounts/{account_id}/catalogs/{catalog_id}/directory",
            get(get_directory),
        )
        .route("/v1/admin/catalog-finalize", post(catalog_finalize))
}

/// `GET {A}/catalogs/{catalog_id}/directory`: served from the replica, refreshed first.
async fn get_directory(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::catalog(&c))?;
    Ok(ok(directory::get(&state, &access, &c).await?))
}

/// `POST /v1/admin/catalog-finalize`: operator only; refuses without both acknowledgements.
async fn catalog_finalize(
    State(state): State<AppState>,
    Auth(p): Auth,
    body: JsonBody<FinalizeRequest>,
) -> HttpResult<Response> {
    p.require_operator()?;
    let req = body.value;
    let status = directory::finalize(
        &state,
        req.acknowledge_writer_rollout,
        req.acknowledge_quiescent_writes,
    )
    .await?;
    Ok(ok(
        serde_json::to_value(status).map_err(|e| Error::internal(format!("encode: {e}")))?
    ))
}
