//! The OAuth2 token route where an authorizer, not Flotilla, verifies tokens (the `iceberg`
//! Lambda function behind API Gateway): the exchange is relayed to the identity provider's
//! token endpoint, here a fixture that records what it was sent.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::oauth::Relay;
use flotilla_iceberg_rest::{IcebergConfig, TokenExchange};
use flotilla_metastore::redb_store::RedbMetastore;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// The identity provider's app client the fixture accepts (the secret needs form encoding).
const CLIENT_ID: &str = "engine-client";
const CLIENT_SECRET: &str = "s3cr:et&more";
const ISSUED: &str = "eyJhbGciOiJSUzI1NiJ9.issued-by-the-provider";

/// One request the fixture provider received: the Authorization header and the form.
type Received = (Option<String>, String);

/// What the fixture provider received.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Received>>>);

impl Seen {
    fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// How the fixture provider answers.
#[derive(Clone, Copy)]
enum Provider {
    /// Client-credentials per RFC 6749: HTTP Basic with form-encoded id and secret.
    Oauth,
    /// A broken provider: HTML and 500.
    Broken,
}

async fn token_endpoint(
    State((seen, mode)): State<(Seen, Provider)>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let auth = headers
        .get(header::AUTHORIZATION)
        .map(|h| h.to_str().unwrap().to_owned());
    seen.0.lock().unwrap().push((auth.clone(), body.clone()));
    if let Provider::Broken = mode {
        return (StatusCode::INTERNAL_SERVER_ERROR, "<html>oops</html>").into_response();
    }
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("engine-client:s3cr%3Aet%26more")
    );
    if auth.as_deref() != Some(expected.as_str()) || !body.contains("grant_type=client_credentials")
    {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    axum::Json(json!({"access_token": ISSUED, "token_type": "Bearer", "expires_in": 3600}))
        .into_response()
}

/// A fixture provider on a loopback port; the URL of its token endpoint.
async fn provider(mode: Provider) -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/oauth2/token", axum::routing::post(token_endpoint))
        .with_state((seen.clone(), mode));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/oauth2/token"), seen)
}

/// The endpoint alone (as the Lambda function serves it) with the given exchange.
fn app(exchange: TokenExchange) -> Router {
    let state = AppState::new(
        Arc::new(RedbMetastore::in_memory().unwrap()),
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    );
    flotilla_iceberg_rest::iceberg_router(
        state,
        IcebergConfig {
            token_exchange: exchange,
            ..Default::default()
        },
    )
}

async fn exchange(app: &Router, form: &str, basic: Option<&str>) -> (StatusCode, HeaderMap, Value) {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/iceberg/v1/oauth/tokens")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(b) = basic {
        let enc = base64::engine::general_purpose::STANDARD.encode(b);
        req = req.header(header::AUTHORIZATION, format!("Basic {enc}"));
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(form.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

fn secret_in_form() -> String {
    let secret: String = url::form_urlencoded::byte_serialize(CLIENT_SECRET.as_bytes()).collect();
    format!(
        "grant_type=client_credentials&client_id={CLIENT_ID}&client_secret={secret}&scope=catalog"
    )
}

#[tokio::test]
async fn the_exchange_is_relayed_to_the_identity_provider() {
    let (url, seen) = provider(Provider::Oauth).await;
    let app = app(TokenExchange::Relay(Relay::new(&url).unwrap()));

    // client_secret_post from the engine becomes client_secret_basic towards the provider.
    let (status, headers, body) = exchange(&app, &secret_in_form(), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["access_token"], ISSUED);
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    let sent = seen.take();
    assert_eq!(sent.len(), 1);
    let (auth, form) = &sent[0];
    assert!(auth.as_deref().unwrap().starts_with("Basic "), "{auth:?}");
    assert!(form.contains("grant_type=client_credentials"), "{form}");
    assert!(form.contains("scope=catalog"), "{form}");
    assert!(
        !form.contains("client_secret"),
        "the secret travels only in the header: {form}"
    );

    // HTTP Basic from the engine (as DuckDB sends it) is relayed the same way.
    let id_and_secret = format!(
        "{CLIENT_ID}:{}",
        url::form_urlencoded::byte_serialize(CLIENT_SECRET.as_bytes()).collect::<String>()
    );
    let (status, _, body) =
        exchange(&app, "grant_type=client_credentials", Some(&id_and_secret)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["access_token"], ISSUED);
    assert_eq!(seen.take().len(), 1);
}

#[tokio::test]
async fn the_providers_refusal_is_relayed_and_the_secret_never_echoed() {
    let (url, seen) = provider(Provider::Oauth).await;
    let app = app(TokenExchange::Relay(Relay::new(&url).unwrap()));
    let (status, _, body) = exchange(
        &app,
        "grant_type=client_credentials&client_id=engine-client&client_secret=wrong-secret-123",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "invalid_client");
    assert!(!body.to_string().contains("wrong-secret-123"));
    assert_eq!(seen.take().len(), 1);

    // Without a client id there is nothing to ask the provider: refused before any request.
    let (status, _, body) =
        exchange(&app, "grant_type=client_credentials&client_secret=x", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "invalid_client");
    // Other grants never reach the provider either.
    let (status, _, body) = exchange(
        &app,
        "grant_type=password&client_id=a&client_secret=b",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "unsupported_grant_type");
    assert!(seen.take().is_empty());
}

#[tokio::test]
async fn a_broken_or_absent_provider_is_a_gateway_error_not_a_token() {
    let (url, seen) = provider(Provider::Broken).await;
    let app = app(TokenExchange::Relay(Relay::new(&url).unwrap()));
    let (status, _, body) = exchange(&app, &secret_in_form(), None).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["error"], "server_error");
    assert_eq!(seen.take().len(), 1);

    // A port nobody listens on: the engine is told to retry.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
    drop(listener);
    let app = self::app(TokenExchange::Relay(Relay::new(&dead).unwrap()));
    let (status, _, body) = exchange(&app, &secret_in_form(), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "temporarily_unavailable");
    assert!(!body.to_string().contains(CLIENT_SECRET));
}

#[tokio::test]
async fn without_a_configured_provider_engines_are_told_to_send_a_bearer_token() {
    let app = app(TokenExchange::Unconfigured);
    let (status, _, body) = exchange(&app, &secret_in_form(), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_request");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("bearer token"),
        "{body}"
    );
}

#[test]
fn the_relay_only_talks_https_or_loopback_and_never_embeds_credentials() {
    assert!(Relay::new("https://auth.example.com/oauth2/token").is_ok());
    assert!(Relay::new("http://127.0.0.1:9/oauth2/token").is_ok());
    assert!(Relay::new("http://localhost:9/oauth2/token").is_ok());
    let plain = Relay::new("http://auth.example.com/oauth2/token").unwrap_err();
    assert!(plain.contains("https://"), "{plain}");
    let creds = Relay::new("https://user:pw@auth.example.com/token").unwrap_err();
    assert!(creds.contains("credentials"), "{creds}");
    assert!(Relay::new("not a url").is_err());
}
