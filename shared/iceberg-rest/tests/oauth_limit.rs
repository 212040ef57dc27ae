//! The token routes under a guessing attack (issue 35, item 10): a burst of wrong secrets
//! from one address is answered `429` with `Retry-After` once over the limit, on both doors
//! (one limiter), while the real client with its secret from another address is not slowed;
//! a client-supplied `X-Forwarded-For` does not make the attacker a new source; the window's
//! end (the injected clock, no sleeps) lets the attacker's address try again.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::auth::{StaticTokens, TokenSigner};
use flotilla_core::clock::ManualClock;
use flotilla_core::http::wire::Peer;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_services::token_limit::TokenLimits;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-for-limit-tests";
const ATTACKER: &str = "203.0.113.7:40000";
const CLIENT_HOST: &str = "198.51.100.20:50000";

struct Reply {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Value,
}

async fn send(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply {
        status,
        retry_after,
        body,
    }
}

/// A token request from `peer` (the connection's address, as `flotilla serve` records it).
fn token_request(door: &str, peer: &str, form: &str, forwarded_for: Option<&str>) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(format!("{door}/v1/oauth/tokens"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(ip) = forwarded_for {
        req = req.header("x-forwarded-for", ip);
    }
    let mut req = req.body(Body::from(form.to_owned())).unwrap();
    let addr: SocketAddr = peer.parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(Peer(addr)));
    req
}

fn json_request(method: Method, uri: &str, body: Value) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The router on an in-memory store with a manual clock, and a service principal's client
/// id and secret.
async fn env(limits: TokenLimits) -> (Router, ManualClock, AppState, String, String) {
    let clock = ManualClock::new(1_700_000_000_000);
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    let state = AppState::new(
        Arc::new(RedbMetastore::in_memory().unwrap()),
        Arc::new(clock.clone()),
        Arc::new(tokens),
        Config::default(),
    )
    .with_token_signer(Arc::new(TokenSigner::random()))
    .with_token_limits(limits);
    let app = flotilla_iceberg_rest::router(state.clone(), IcebergConfig::default());
    let r = send(
        &app,
        json_request(Method::POST, "/v1/accounts", json!({"id": "acme"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let r = send(
        &app,
        json_request(
            Method::POST,
            "/v1/accounts/acme/principals",
            json!({"name": "ci"}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["client_id"].as_str().unwrap().to_owned();
    let secret = r.body["client_secret"].as_str().unwrap().to_owned();
    (app, clock, state, id, secret)
}

fn form(id: &str, secret: &str) -> String {
    format!("grant_type=client_credentials&client_id={id}&client_secret={secret}")
}

#[tokio::test]
async fn a_burst_of_wrong_secrets_is_refused_with_retry_after_and_the_real_client_still_gets_tokens()
 {
    let (app, clock, state, id, secret) = env(TokenLimits::default()).await;
    let limit = state.token_limiter.limits().per_client_and_source;
    let wrong = form(&id, "wrong-secret-guess");
    // Up to the limit, each guess is judged (and refused) on its merits; alternating the
    // doors and forging X-Forwarded-For changes nothing.
    for i in 0..limit {
        let door = if i % 2 == 0 { "" } else { "/iceberg" };
        let forged = format!("10.9.8.{i}");
        let r = send(&app, token_request(door, ATTACKER, &wrong, Some(&forged))).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "guess {i}: {}", r.body);
        assert_eq!(r.body["error"], "invalid_client");
    }
    // Past it, both doors answer 429 before looking at the secret, in the OAuth2 shape.
    for door in ["", "/iceberg"] {
        let r = send(
            &app,
            token_request(door, ATTACKER, &wrong, Some("10.1.1.1")),
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{door}: {}",
            r.body
        );
        let wait = r.retry_after.expect("Retry-After");
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
        assert_eq!(r.body["error"], "slow_down");
        assert!(r.body["error_description"].is_string());
        // Even the right secret from the attacker's address waits.
        let r = send(
            &app,
            token_request(door, ATTACKER, &form(&id, &secret), None),
        )
        .await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    }
    // The real client from its own address: tokens on both doors, as often as it asks.
    for i in 0..50 {
        let door = if i % 2 == 0 { "" } else { "/iceberg" };
        let r = send(
            &app,
            token_request(door, CLIENT_HOST, &form(&id, &secret), None),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{door}: {}", r.body);
        assert!(r.body["access_token"].is_string());
        assert!(r.retry_after.is_none());
    }
    // Retry-After counts down with the clock; at the window's end the address may try again.
    clock.advance_ms(30_000);
    let r = send(&app, token_request("", ATTACKER, &wrong, None)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.retry_after.unwrap() <= 30);
    clock.advance_ms(30_000);
    let r = send(&app, token_request("", ATTACKER, &wrong, None)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let r = send(&app, token_request("", ATTACKER, &form(&id, &secret), None)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test]
async fn one_address_spraying_client_ids_is_stopped_and_cannot_lock_a_client_out() {
    let (app, _clock, state, id, secret) = env(TokenLimits::default()).await;
    let limits = state.token_limiter.limits().clone();
    // Random client ids from one address: the address's own bucket stops it.
    let mut refused = 0;
    for i in 0..(limits.per_source * 2) {
        let r = send(
            &app,
            token_request("", ATTACKER, &form(&format!("acme.guess{i}"), "x"), None),
        )
        .await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        } else {
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
        }
    }
    assert_eq!(refused, limits.per_source);
    // Guessing the real client's secret from one address fills at most its pair bucket,
    // which is below the client's own bucket: the client is not locked out elsewhere.
    assert!(limits.per_client_and_source < limits.per_client);
    for _ in 0..(limits.per_client * 2) {
        let _ = send(
            &app,
            token_request("", "203.0.113.8:1", &form(&id, "nope"), None),
        )
        .await;
    }
    let r = send(
        &app,
        token_request("", CLIENT_HOST, &form(&id, &secret), None),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// Through the routes, with a small map (the limiter's own test drives 100,000 client ids
/// into the default one, `token_limit::tests::the_map_stays_bounded`).
#[tokio::test]
async fn the_limiter_holds_a_bounded_number_of_keys_under_random_client_ids() {
    let max = 200;
    let (app, _clock, state, _id, _secret) = env(TokenLimits {
        max_keys: max,
        ..TokenLimits::default()
    })
    .await;
    // Distinct client ids, each from its own address (so no source bucket trips).
    for i in 0u32..600 {
        let [a, b, c, d] = (0x0a00_0000 + i).to_be_bytes();
        let peer = format!("{a}.{b}.{c}.{d}:9");
        let r = send(
            &app,
            token_request("", &peer, &form(&format!("acme.r{i}"), "x"), None),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(state.token_limiter.len() <= max);
    }
    assert!(state.token_limiter.len() > max / 2, "the map is in use");
}

/// A request to `uri` with `token` (none: unauthenticated).
fn bearer_request(
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    match body {
        Some(b) => req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(b.to_string()))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    }
}

#[tokio::test]
async fn refusals_on_iceberg_routes_and_token_route_429s_are_audited_in_the_account() {
    let (app, clock, state, id, secret) = env(TokenLimits::default()).await;
    let r = send(
        &app,
        json_request(
            Method::POST,
            "/v1/accounts/acme/catalogs",
            json!({"display_name": "lake", "properties": {"warehouse": "s3://bucket/acme/lake"}}),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let c = r.body["id"].as_str().unwrap().to_owned();
    // The service principal may read the catalog, not write to it.
    for (uri, body) in [
        ("/v1/accounts/acme/roles", json!({"name": "readers"})),
        (
            "/v1/accounts/acme/grants",
            json!({"role": "readers", "privilege": "READ",
                "securable": {"type": "CATALOG", "catalog_id": c}}),
        ),
    ] {
        let r = send(&app, json_request(Method::POST, uri, body)).await;
        assert!(r.status.is_success(), "{uri}: {}", r.body);
    }
    let r = send(
        &app,
        json_request(
            Method::PUT,
            "/v1/accounts/acme/roles/readers/members/ci",
            json!({}),
        ),
    )
    .await;
    assert!(r.status.is_success(), "{}", r.body);
    let r = send(
        &app,
        token_request("", CLIENT_HOST, &form(&id, &secret), None),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let token = r.body["access_token"].as_str().unwrap().to_owned();
    // Refused on the Iceberg routes: unauthenticated (a prefixed route and config), and a
    // write the principal may not make.
    let prefixed = format!("/iceberg/v1/acme.{c}/namespaces");
    let r = send(&app, bearer_request(Method::GET, &prefixed, None, None)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let r = send(
        &app,
        bearer_request(
            Method::GET,
            "/iceberg/v1/config?warehouse=acme/lake",
            None,
            None,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let r = send(
        &app,
        bearer_request(
            Method::POST,
            &prefixed,
            Some(&token),
            Some(json!({"namespace": ["sales"]})),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    // A prefix of an account that does not exist records nothing.
    let r = send(
        &app,
        bearer_request(Method::GET, "/iceberg/v1/nosuch.x/namespaces", None, None),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // A guessing burst: its 429s are audited (its 401s are the limiter's business).
    let limit = state.token_limiter.limits().per_client_and_source;
    let wrong = form(&id, "wrong-secret-guess");
    for _ in 0..limit {
        let r = send(&app, token_request("", ATTACKER, &wrong, None)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    for door in ["", "/iceberg"] {
        let r = send(&app, token_request(door, ATTACKER, &wrong, None)).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    }
    clock.advance_ms(flotilla_services::service::audit::HORIZON_MS + 1);
    let r = send(
        &app,
        bearer_request(
            Method::GET,
            "/v1/accounts/acme/audit?page_size=100",
            Some(OPERATOR),
            None,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // One millisecond (the clock stands still): the records' order is their request ids'.
    let mut refusals: Vec<(String, u64, String)> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "refusal")
        .map(|i| {
            (
                i["route"].as_str().unwrap().to_owned(),
                i["status"].as_u64().unwrap(),
                i["principal"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    refusals.sort();
    let mut expected = vec![
        (
            "/iceberg/v1/{prefix}/namespaces".to_owned(),
            401,
            "anonymous".to_owned(),
        ),
        ("/iceberg/v1/config".to_owned(), 401, "anonymous".to_owned()),
        (
            "/iceberg/v1/{prefix}/namespaces".to_owned(),
            403,
            "service:ci".to_owned(),
        ),
        ("/v1/oauth/tokens".to_owned(), 429, id.clone()),
        ("/iceberg/v1/oauth/tokens".to_owned(), 429, id.clone()),
    ];
    expected.sort();
    assert_eq!(refusals, expected, "{}", r.body);
}
