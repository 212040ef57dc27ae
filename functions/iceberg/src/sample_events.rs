//! Every sample under `events/iceberg/` driven through the real Lambda path: `lambda_http`'s
//! conversion of the API Gateway HTTP API v2 payload into a request, then [`handler::app`]
//! on a redb-backed state, with the principal taken from the sample's JWT claims.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use flotilla_core::auth::Principal;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_iceberg_rest::TokenExchange;
use flotilla_iceberg_rest::oauth::Relay;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_runtime::apigw::{self, call};
use flotilla_runtime::aws::ClaimsOnly;
use flotilla_runtime::telemetry::LambdaTelemetry;
use http::{Method, StatusCode};
use http_body_util::BodyExt as _;
use lambda_http::Context;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::handler;

/// The samples with the status each must get. A sample missing from this list (or listed
/// but missing) fails the test.
/// Without a configured identity provider the public token route says what to do instead.
const EXPECTED: &[(&str, u16)] = &[("config.json", 200), ("oauth-tokens.json", 400)];

fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/iceberg")
}

fn read_sample(name: &str) -> String {
    apigw::read_sample(&sample_dir(), name)
}

fn sample(name: &str) -> Value {
    serde_json::from_str(&read_sample(name)).expect("sample JSON")
}

async fn body_json(response: axum::response::Response) -> Value {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("JSON response: {e}"))
    }
}

/// A redb-backed state holding account `acme` and its catalog `lakehouse` (with an S3
/// warehouse), seeded through the `/v1` router the api function serves.
async fn state() -> (AppState, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("redb");
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config::default(),
    );
    let v1 = flotilla_core::router(state.clone());
    let seed = |uri: &str, body: Value| {
        let mut req = http::Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        req.extensions_mut().insert(Principal::operator("seed"));
        v1.clone().oneshot(req)
    };
    let r = seed("/v1/accounts", json!({"id": "acme"}))
        .await
        .expect("infallible");
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = seed(
        "/v1/accounts/acme/catalogs",
        json!({"display_name": "lakehouse", "properties": {"warehouse": "s3://acme-lake/lakehouse"}}),
    )
    .await
    .expect("infallible");
    assert_eq!(r.status(), StatusCode::CREATED);
    let catalog = body_json(r).await;
    let id = catalog["id"].as_str().expect("catalog id").to_owned();
    (state, id, dir)
}

async fn invoke(state: &AppState, payload: &str) -> (StatusCode, Value) {
    let (telemetry, _lines) = LambdaTelemetry::capturing(state, "iceberg", "test");
    call(
        handler::app(
            state.clone(),
            Arc::new(telemetry),
            TokenExchange::Unconfigured,
        ),
        payload,
        None,
    )
    .await
}

#[test]
fn every_iceberg_sample_has_an_expected_outcome() {
    apigw::assert_samples_listed(&sample_dir(), EXPECTED);
}

#[tokio::test]
async fn the_config_sample_answers_through_the_lambda_request_conversion() {
    let (state, id, _dir) = state().await;
    for (name, want) in EXPECTED {
        let (status, body) = invoke(&state, &read_sample(name)).await;
        assert_eq!(status.as_u16(), *want, "{name}: {body}");
    }
    let (_, config) = invoke(&state, &read_sample("config.json")).await;
    assert_eq!(
        config["overrides"]["prefix"],
        format!("acme.{id}"),
        "{config}"
    );
    let endpoints: Vec<&str> = config["endpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("endpoints: {config}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(endpoints, flotilla_iceberg_rest::ENDPOINTS, "{config}");
}

#[tokio::test]
async fn the_principal_comes_only_from_the_authorizer_claims() {
    let (state, _id, _dir) = state().await;
    // Without the authorizer block the bearer header alone is not enough (ClaimsOnly).
    let mut event = sample("config.json");
    let authorizer = event["requestContext"]
        .as_object_mut()
        .expect("requestContext")
        .remove("authorizer");
    assert!(authorizer.is_some());
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // Another account's principal cannot resolve acme's warehouse.
    let mut event = sample("config.json");
    event["requestContext"]["authorizer"]["jwt"]["claims"]["flotilla:accounts"] = "globex".into();
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "{status}: {body}"
    );
}

/// The function serves the Iceberg endpoint only: the `/v1` routes are the api function's.
#[tokio::test]
async fn the_v1_routes_are_not_served_here() {
    let (state, _id, _dir) = state().await;
    let mut event = sample("config.json");
    event["rawPath"] = "/v1/accounts/acme/catalogs".into();
    event["rawQueryString"] = "".into();
    event["queryStringParameters"] = json!({});
    event["requestContext"]["http"]["path"] = "/v1/accounts/acme/catalogs".into();
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

/// The EMF lines of one invocation carry `Function=iceberg` and no tenant or request data.
#[tokio::test]
async fn the_sample_writes_emf_lines_with_safe_dimensions() {
    let (state, _id, _dir) = state().await;
    let (telemetry, lines) = LambdaTelemetry::capturing(&state, "iceberg", "test");
    let app = handler::app(
        state.clone(),
        Arc::new(telemetry),
        TokenExchange::Unconfigured,
    );
    let mut ctx = Context::default();
    ctx.request_id = "req-0-5f0c".into();
    let (status, body) = call(app, &read_sample("config.json"), Some(ctx)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let lines = lines.take();
    assert!(!lines.is_empty());
    let forbidden = ["acme", "svc-acme", "req-", "Bearer", "lakehouse"];
    let mut seen = Vec::new();
    for line in lines {
        let doc = flotilla_telemetry::emf::check_line(&line, &forbidden)
            .unwrap_or_else(|e| panic!("{e}\n{line}"));
        assert_eq!(doc["Function"], "iceberg");
        seen.push(doc);
    }
    assert!(
        seen.iter()
            .any(|d| d.get("ApiRequests").is_some() && d["Route"] == "GET /iceberg/v1/config"),
        "{seen:?}"
    );
}

/// A fixture identity provider's token endpoint on a loopback port: it issues a token to
/// `engine-client:s3cret` (HTTP Basic) and records each Authorization header it received.
async fn identity_provider() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let token = axum::routing::post(move |headers: http::HeaderMap| {
        let seen = recorded.clone();
        async move {
            let auth = headers
                .get(http::header::AUTHORIZATION)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            seen.lock().expect("lock").push(auth.clone());
            if auth == "Basic ZW5naW5lLWNsaWVudDpzM2NyZXQ=" {
                (
                    StatusCode::OK,
                    axum::Json(
                        json!({"access_token": "jwt-from-the-provider", "token_type": "Bearer", "expires_in": 3600}),
                    ),
                )
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"error": "invalid_client"})),
                )
            }
        }
    });
    let app = axum::Router::new().route("/oauth2/token", token);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (format!("http://{addr}/oauth2/token"), seen)
}

/// The token route is public on API Gateway: the sample carries no authorizer block, and
/// the function relays the engine's client credentials to the identity provider, whose
/// token (a JWT the authorizer accepts) the engine then sends on every other route.
#[tokio::test]
async fn the_public_token_route_relays_client_credentials_to_the_identity_provider() {
    let (state, _id, _dir) = state().await;
    let (url, seen) = identity_provider().await;
    let (telemetry, _lines) = LambdaTelemetry::capturing(&state, "iceberg", "test");
    let app = handler::app(
        state.clone(),
        Arc::new(telemetry),
        TokenExchange::Relay(Relay::new(&url).expect("relay")),
    );
    let event = sample("oauth-tokens.json");
    assert!(event["requestContext"].get("authorizer").is_none());
    let (status, body) = call(app.clone(), &event.to_string(), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["access_token"], "jwt-from-the-provider");
    assert_eq!(
        *seen.lock().expect("lock"),
        vec!["Basic ZW5naW5lLWNsaWVudDpzM2NyZXQ=".to_owned()]
    );

    // A wrong secret is the provider's refusal, relayed; nothing else is granted.
    let mut event = sample("oauth-tokens.json");
    event["headers"]["authorization"] = "Basic ZW5naW5lLWNsaWVudDp3cm9uZw==".into();
    let (status, body) = call(app, &event.to_string(), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "invalid_client");
}
