//! The API Gateway adapter of the HTTP functions (`api`, `iceberg`): turns the JWT
//! authorizer's claims into a [`Principal`] before the router sees the request. Claims are
//! trusted only because API Gateway verified the token; see `docs/deploy.md` for the claim
//! names.
//!
//! Each request is one invocation: it runs in the invocation span (request id, trace id)
//! and trace context, and the metrics that changed are flushed as EMF lines after it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use flotilla_services::auth::{ClaimRules, Principal};
use flotilla_services::token_limit::SourceAddr;
use lambda_http::RequestExt;
use lambda_http::request::RequestContext;

use crate::telemetry::{Invocation, LambdaTelemetry};

/// `router` with the claims adapter in front, inside the per-invocation telemetry.
pub fn behind_api_gateway(router: Router, telemetry: Arc<LambdaTelemetry>) -> Router {
    router
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
    // Never trust a principal (or a source) that arrived some other way.
    req.extensions_mut().remove::<Principal>();
    req.extensions_mut().remove::<SourceAddr>();
    if let Some(ip) = source_ip(&req) {
        req.extensions_mut().insert(SourceAddr(ip));
    }
    static RULES: std::sync::OnceLock<ClaimRules> = std::sync::OnceLock::new();
    let rules = RULES.get_or_init(ClaimRules::from_env);
    let claims = jwt_claims(&req);
    if let Some(p) = claims
        .as_ref()
        .and_then(|c| Principal::from_claims_with(c, rules))
    {
        req.extensions_mut().insert(p);
    }
    next.run(req).await
}

/// The address API Gateway saw the request come from (never `X-Forwarded-For`, which the
/// client writes).
fn source_ip(req: &Request) -> Option<std::net::IpAddr> {
    let ip = match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx.http.source_ip.as_deref()?,
        _ => return None,
    };
    ip.trim().parse().ok()
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

/// What `lambda_http::run` does with one invocation payload (an HTTP API v2 event), with the
/// Lambda context it would attach, then one call of `app`: the status and the JSON body
/// (`null` when empty). For the functions' sample-event tests.
#[cfg(feature = "testing")]
pub async fn call(
    app: Router,
    payload: &str,
    ctx: Option<lambda_http::Context>,
) -> (axum::http::StatusCode, serde_json::Value) {
    use tower::ServiceExt as _;

    let request = lambda_http::request::from_str(payload).expect("an HTTP API v2 payload");
    let mut request = request.map(|body| axum::body::Body::from(body.to_vec()));
    if let Some(ctx) = ctx {
        request.extensions_mut().insert(ctx);
    }
    let response = app.oneshot(request).await.expect("infallible router");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let body = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("JSON response: {e}"))
    };
    (status, body)
}

/// Fails unless the sample events under `dir` are exactly the ones `expected` lists (each
/// with the status it must get): a new sample is not left untested, a listed one not lost.
#[cfg(feature = "testing")]
pub fn assert_samples_listed(dir: &std::path::Path, expected: &[(&str, u16)]) {
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = expected.iter().map(|(n, _)| (*n).to_owned()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// One sample event under `dir`, as text.
#[cfg(feature = "testing")]
pub fn read_sample(dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(all(test, feature = "testing"))]
mod source_tests {
    use axum::Extension;
    use axum::routing::post;
    use serde_json::json;

    use super::*;

    /// The token routes' source is API Gateway's `sourceIp`, never the client's
    /// `X-Forwarded-For` (nor a `SourceAddr` from anywhere else).
    #[tokio::test]
    async fn the_source_is_api_gateways_source_ip_not_x_forwarded_for() {
        let router = Router::new().route(
            "/iceberg/v1/oauth/tokens",
            post(|source: Option<Extension<SourceAddr>>| async move {
                axum::Json(json!(source.map(|s| s.0.0.to_string())))
            }),
        );
        let app = router.layer(middleware::from_fn(principal_from_claims));
        let payload = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/iceberg/oauth-tokens.json"
        ))
        .unwrap();
        let mut event: serde_json::Value = serde_json::from_str(&payload).unwrap();
        event["headers"]["x-forwarded-for"] = json!("10.66.0.1, 192.0.2.99");
        event["requestContext"]["http"]["sourceIp"] = json!("198.51.100.7");
        let (status, body) = call(app.clone(), &event.to_string(), None).await;
        assert_eq!(status, 200);
        assert_eq!(body, json!("198.51.100.7"));
        // No source IP in the context: unknown, whatever the headers say.
        event["requestContext"]["http"]
            .as_object_mut()
            .unwrap()
            .remove("sourceIp");
        let (_, body) = call(app, &event.to_string(), None).await;
        assert_eq!(body, json!(null));
    }
}
