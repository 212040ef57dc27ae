//! The Lambda-side adapter: turns API Gateway JWT authorizer claims into a [`Principal`]
//! before the shared router sees the request. Claims are trusted only because API Gateway
//! verified the token; see `docs/deploy.md` for the claim names.

use std::collections::HashMap;

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use flotilla_core::AppState;
use flotilla_core::auth::Principal;
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;

/// The router (with the Iceberg REST endpoint) with the claims adapter in front.
pub fn app(state: AppState) -> Router {
    let iceberg = flotilla_iceberg_rest::IcebergConfig {
        local_warehouse_root: None,
        vending: flotilla_iceberg_rest::vending::from_env(),
    };
    flotilla_iceberg_rest::router(state, iceberg).layer(middleware::from_fn(principal_from_claims))
}

async fn principal_from_claims(mut req: Request, next: Next) -> Response {
    // Never trust a principal that arrived some other way.
    req.extensions_mut().remove::<Principal>();
    let claims = jwt_claims(&req);
    if let Some(p) = claims.as_ref().and_then(Principal::from_claims) {
        req.extensions_mut().insert(p);
    }
    next.run(req).await
}

fn jwt_claims(req: &Request) -> Option<HashMap<String, String>> {
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => {
            let jwt = ctx.authorizer.as_ref()?.jwt.as_ref()?;
            Some(jwt.claims.clone())
        }
        _ => None,
    }
}
