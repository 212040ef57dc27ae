//! What the endpoint's in-process tests share: one router call with a JSON body and answer,
//! and the three callers every test environment knows (an operator, account `acme` and
//! account `other`).

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header, request};
use flotilla_core::auth::StaticTokens;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// Sends `req` (with `body` as JSON, if any) through `app`: the status and the answer,
/// `null` when empty and a JSON string when not JSON.
pub async fn send(app: &Router, req: request::Builder, body: Option<Value>) -> (StatusCode, Value) {
    let req = match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&b).unwrap()))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, v)
}

/// Bearer tokens for an operator, a member of `acme` and a member of `other`.
pub fn tokens(operator: &str, acme: &str, other: &str) -> StaticTokens {
    let mut tokens = StaticTokens::new();
    tokens.add(operator, true, vec![]);
    tokens.add(acme, false, vec!["acme".into()]);
    tokens.add(other, false, vec!["other".into()]);
    tokens
}
