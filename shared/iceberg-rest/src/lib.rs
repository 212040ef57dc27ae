#![forbid(unsafe_code)]
//! The Iceberg REST catalog endpoint: every Flotilla catalog served to query engines
//! (pyiceberg, DuckDB, Spark, Trino) through their stock Iceberg REST clients, under
//! `/iceberg/v1`. See `docs/iceberg-rest.md`.
//!
//! The tables are the same relation records `/v1` serves: the metastore holds the pointer
//! (the metadata location) and the current schema; the Iceberg metadata files live in the
//! catalog's warehouse, written through `object_store`. A commit checks the spec's
//! requirements and applies its updates with the `iceberg` crate, writes the next metadata
//! file, then swaps the pointer with one conditional metastore transaction.

pub mod budget;
pub mod catalog;
pub mod commit;
pub mod error;
pub mod events;
pub mod federated;
pub mod metadata;
pub mod namespaces;
pub mod oauth;
pub mod tables;
pub mod vending;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use flotilla_services::state::AppState;

pub use budget::LoadBudget;
pub use catalog::IcebergConfig;
pub use error::{IcebergError, IcebergResult};
pub use oauth::TokenExchange;

/// Every route this endpoint serves, in the form `GET /v1/config` answers in `endpoints`.
/// Engines trust that list strictly, so it is the single source for both.
pub const ENDPOINTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/events",
];

/// The Iceberg routes, to merge into the one router (`flotilla_http::router_with`).
pub fn routes(config: IcebergConfig) -> Router<AppState> {
    // The token route reads only who answers it, so it depends on `oauth` alone.
    let exchange = Arc::new(config.token_exchange.clone());
    let config = Arc::new(config);
    let ns = "/iceberg/v1/{prefix}/namespaces";
    let r = Router::new()
        .route("/iceberg/v1/config", get(catalog::get_config))
        .route("/iceberg/v1/oauth/tokens", post(oauth::oauth_tokens))
        .route(
            ns,
            get(namespaces::list_namespaces).post(namespaces::create_namespace),
        )
        .route(
            &format!("{ns}/{{namespace}}"),
            get(namespaces::load_namespace)
                .head(namespaces::namespace_exists)
                .delete(namespaces::drop_namespace),
        )
        .route(
            &format!("{ns}/{{namespace}}/properties"),
            post(namespaces::update_properties),
        )
        .route(
            &format!("{ns}/{{namespace}}/tables"),
            get(tables::list_tables).post(tables::create_table),
        )
        .route(
            &format!("{ns}/{{namespace}}/tables/{{table}}"),
            get(tables::load_table)
                .head(tables::table_exists)
                .post(tables::commit_table)
                .delete(tables::drop_table),
        )
        .route(
            &format!("{ns}/{{namespace}}/tables/{{table}}/credentials"),
            get(tables::load_credentials),
        )
        .route(
            &format!("{ns}/{{namespace}}/register"),
            post(tables::register_table),
        )
        .route(
            "/iceberg/v1/{prefix}/tables/rename",
            post(tables::rename_table),
        )
        .route(
            "/iceberg/v1/{prefix}/transactions/commit",
            post(tables::commit_transaction),
        )
        .route(
            &format!("{ns}/{{namespace}}/views"),
            get(views::list_views).post(views::create_view),
        )
        .route(
            &format!("{ns}/{{namespace}}/views/{{view}}"),
            get(views::load_view)
                .head(views::view_exists)
                .post(views::replace_view)
                .delete(views::drop_view),
        )
        .route(
            "/iceberg/v1/{prefix}/views/rename",
            post(views::rename_view),
        )
        .route("/iceberg/v1/{prefix}/events", post(events::query_events));
    r.layer(axum::Extension(config))
        .layer(axum::Extension(exchange))
}

/// The whole API with the Iceberg endpoint: what both hosts serve.
pub fn router(state: AppState, config: IcebergConfig) -> axum::Router {
    flotilla_http::router_with(state, routes(config))
        .layer(axum::middleware::from_fn(error::iceberg_errors))
}

/// The Iceberg endpoint alone, under the API's layers (fallbacks, limits, metrics, tracing):
/// what the `iceberg` Lambda function serves, so that it links none of the `/v1` routes.
pub fn iceberg_router(state: AppState, config: IcebergConfig) -> axum::Router {
    flotilla_http::layered(state, routes(config))
        .layer(axum::middleware::from_fn(error::iceberg_errors))
}
