//! Every sample under `events/api/` driven through the real Lambda path: `lambda_http`'s
//! conversion of the API Gateway HTTP API v2 payload into a request, then [`handler::app`]
//! on a redb-backed state, with the principal taken from the sample's JWT claims. A sample
//! that drifts from the router, the claims adapter or the request conversion fails here.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_runtime::apigw::{self, call};
use flotilla_runtime::aws::ClaimsOnly;
use http::StatusCode;
use serde_json::Value;

use crate::handler;
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_runtime::telemetry::LambdaTelemetry;
use lambda_http::Context;

/// The samples in the order a first session would send them, with the status each must get.
/// A sample missing from this list (or listed but missing) fails the test.
const EXPECTED: &[(&str, u16)] = &[
    ("health.json", 200),
    ("create-account.json", 201),
    ("create-catalog.json", 201),
    ("list-catalogs.json", 200),
];

fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/api")
}

fn read_sample(name: &str) -> String {
    apigw::read_sample(&sample_dir(), name)
}

fn state() -> (AppState, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbMetastore::open(dir.path().join("meta.redb")).expect("redb");
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config::default(),
    );
    (state, dir)
}

/// What `lambda_http::run` does with one invocation payload, then one router call.
async fn invoke(state: &AppState, payload: &str) -> (StatusCode, Value) {
    let (telemetry, _lines) = LambdaTelemetry::capturing(state, "api", "test");
    call(
        handler::app(state.clone(), Arc::new(telemetry)),
        payload,
        None,
    )
    .await
}

#[test]
fn every_api_sample_has_an_expected_outcome() {
    apigw::assert_samples_listed(&sample_dir(), EXPECTED);
}

#[tokio::test]
async fn samples_drive_the_router_through_the_lambda_request_conversion() {
    let (state, _dir) = state();
    for (name, want) in EXPECTED {
        let (status, body) = invoke(&state, &read_sample(name)).await;
        assert_eq!(status.as_u16(), *want, "{name}: {body}");
        match *name {
            "create-account.json" => assert_eq!(body["id"], "acme", "{body}"),
            "create-catalog.json" => assert_eq!(body["display_name"], "lakehouse", "{body}"),
            "list-catalogs.json" => {
                let names: Vec<&str> = body["items"]
                    .as_array()
                    .unwrap_or_else(|| panic!("items: {body}"))
                    .iter()
                    .filter_map(|c| c["display_name"].as_str())
                    .collect();
                assert_eq!(names, ["lakehouse"], "{body}");
            }
            _ => {}
        }
    }
    // The sample carries an Idempotency-Key: a retry answers the same catalog, not a second.
    let (first_status, first) = invoke(&state, &read_sample("create-catalog.json")).await;
    assert!(first_status.is_success(), "{first_status}: {first}");
    let (_, listed) = invoke(&state, &read_sample("list-catalogs.json")).await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

#[tokio::test]
async fn the_principal_comes_only_from_the_authorizer_claims() {
    let (state, _dir) = state();
    // Without the authorizer block the bearer header alone is not enough (ClaimsOnly).
    let mut event: Value =
        serde_json::from_str(&read_sample("create-account.json")).expect("sample");
    let authorizer = event["requestContext"]
        .as_object_mut()
        .expect("requestContext")
        .remove("authorizer");
    assert!(authorizer.is_some());
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // An account-scoped principal (the create-catalog sample's claims) is not an operator.
    let mut event: Value =
        serde_json::from_str(&read_sample("create-account.json")).expect("sample");
    event["requestContext"]["authorizer"]["jwt"]["claims"] = serde_json::json!({
        "sub": "svc-acme-etl", "flotilla:accounts": "acme"
    });
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // And it cannot reach another account's catalogs.
    invoke(&state, &read_sample("create-account.json")).await;
    let mut event: Value =
        serde_json::from_str(&read_sample("list-catalogs.json")).expect("sample");
    event["requestContext"]["authorizer"]["jwt"]["claims"]["flotilla:accounts"] = "globex".into();
    let (status, body) = invoke(&state, &event.to_string()).await;
    assert!(
        status == StatusCode::FORBIDDEN || status == StatusCode::NOT_FOUND,
        "{status}: {body}"
    );
}

/// The EMF lines the api writes for the samples, through the same app `main` runs: every
/// line matches the catalogue (names, units, dimension sets), dimensions are only stage,
/// function and labels, and no account id, principal, request id or trace id is a dimension.
#[tokio::test]
async fn samples_write_emf_lines_with_catalogue_names_and_safe_dimensions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        CountingMetastore::new(RedbMetastore::open(dir.path().join("m.redb")).expect("redb"));
    let counters = store.counters();
    let state = AppState::new(
        Arc::new(store),
        Arc::new(SystemClock),
        Arc::new(ClaimsOnly),
        Config::default(),
    )
    .with_metric_source(counters);
    let (telemetry, lines) = LambdaTelemetry::capturing(&state, "api", "test");
    let app = handler::app(state.clone(), Arc::new(telemetry));
    let trace = "Root=1-6650e0a1-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1";
    let mut per_invocation = Vec::new();
    for (i, (name, want)) in EXPECTED.iter().enumerate() {
        let mut ctx = Context::default();
        ctx.request_id = format!("req-{i}-5f0c");
        ctx.xray_trace_id = Some(trace.into());
        let (status, body) = call(app.clone(), &read_sample(name), Some(ctx)).await;
        assert_eq!(status.as_u16(), *want, "{name}: {body}");
        per_invocation.push(lines.take());
    }
    // Every invocation flushed its own lines.
    assert!(
        per_invocation.iter().all(|l| !l.is_empty()),
        "{per_invocation:?}"
    );
    let forbidden = [
        "acme",
        "svc-acme",
        "operator",
        "req-",
        "6650e0a1",
        "Bearer",
        "lakehouse",
    ];
    let mut seen = Vec::new();
    for line in per_invocation.concat() {
        let doc = flotilla_telemetry::emf::check_line(&line, &forbidden)
            .unwrap_or_else(|e| panic!("{e}\n{line}"));
        assert_eq!(doc["Stage"], "test");
        assert_eq!(doc["Function"], "api");
        seen.push(doc);
    }
    let has = |metric: &str, dim: &str, value: &str| {
        seen.iter()
            .any(|d| d.get(metric).is_some() && (dim.is_empty() || d[dim] == value))
    };
    assert!(has("ApiRequests", "Route", "POST /v1/accounts"), "{seen:?}");
    assert!(has("ApiRequests", "Route", "GET /v1/health"), "{seen:?}");
    assert!(has("ApiRequests", "StatusClass", "2xx"), "{seen:?}");
    assert!(has("ApiLatency", "", ""), "{seen:?}");
    assert!(
        has("MetastoreRequests", "Operation", "transact"),
        "{seen:?}"
    );
    assert!(has("MetastoreItemsWritten", "", ""), "{seen:?}");
    let latency = seen
        .iter()
        .find(|d| d.get("ApiLatency").is_some())
        .expect("latency");
    assert_eq!(
        latency["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
        "Milliseconds"
    );
}
