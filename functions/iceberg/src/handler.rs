//! The Lambda-side adapter: turns API Gateway JWT authorizer claims into a [`Principal`]
//! before the shared router sees the request. Claims are trusted only because API Gateway
//! verified the token; see `docs/deploy.md` for the claim names.
//!
//! Each request is one invocation: it runs in the invocation span (request id, trace id)
//! and trace context, and the metrics that changed are flushed as EMF lines after it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use flotilla_runtime::telemetry::{Invocation, LambdaTelemetry};
use flotilla_services::AppState;
use flotilla_services::auth::Principal;
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;

/// The Iceberg REST router with the claims adapter in front, inside the per-invocation
/// telemetry. The same adapter as the api function's (`functions/api/src/handler.rs`).
///
/// API Gateway routes `POST /iceberg/v1/oauth/tokens` without the JWT authorizer (an engine
/// calls it before it holds a token), so `token_exchange` relays it to the identity
/// provider; every other route arrives with verified claims.
pub fn app(
    state: AppState,
    telemetry: Arc<LambdaTelemetry>,
    token_exchange: flotilla_iceberg_rest::TokenExchange,
) -> Router {
    let iceberg = flotilla_iceberg_rest::IcebergConfig {
        local_warehouse_root: None,
        vending: flotilla_iceberg_rest::vending::from_env(),
        token_exchange,
        ..Default::default()
    };
    flotilla_iceberg_rest::iceberg_router(state, iceberg)
        .layer(middleware::from_fn(principal_from_claims))
        .layer(middleware::from_fn_with_state(telemetry, per_invocation))
}

async fn per_invocation(
    State(telemetry): State<Arc<LambdaTelemetry>>,
    req: Request,
    next: Next,
) -> Response {
    let ctx = req.lambda_context_ref();
    // Active tracing's header; else the one API Gateway put on the request (validated).
    let trace_header = ctx.and_then(|c| c.xray_trace_id.clone()).or_else(|| {
        req.headers()
            .get("x-amzn-trace-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let meta = Invocation::new(
        ctx.map(|c| c.request_id.clone()).unwrap_or_default(),
        trace_header,
    );
    telemetry.invocation(meta, next.run(req)).await
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
