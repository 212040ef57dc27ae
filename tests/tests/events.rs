//! Every sample in `events/` parses as the event type its function receives, so a sample
//! that drifts from the code (or from what AWS sends) fails here.
//!
//! These are the shape checks (what AWS sends, what the template routes). The samples also
//! drive the real handlers: `functions/api/src/sample_events.rs` (lambda_http conversion into
//! the router), `functions/iceberg/src/sample_events.rs`, `functions/reconciler/tests/sqs.rs`, `functions/scheduler/tests/schedule.rs`,
//! and the handler tests of `functions/finalize`, `functions/query` and `functions/events`;
//! `tests/tests/lambda_e2e.rs` invokes them through `cargo lambda`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use aws_lambda_events::apigw::{ApiGatewayRequestAuthorizer, ApiGatewayV2httpRequest};
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use lambda_http::RequestExt as _;
use lambda_http::request::RequestContext;
use serde::Deserialize;

/// Body of one reconcile queue message: which overlay, at which overlay generation the
/// scheduler or API observed it (the reconciler drops messages older than the overlay).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReconcileMessage {
    account_id: String,
    overlay_id: String,
    observed_generation: u64,
}

/// Body of one capture message (`kind: "capture"`): one overlay's capture job, queued by the
/// API at the overlay generation it observed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct CaptureMessage {
    kind: String,
    account_id: String,
    overlay_id: String,
    observed_generation: u64,
    revalidate: bool,
}

/// Input of the query function: which catalog's directory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryInput {
    account_id: String,
    catalog_id: String,
}

/// Input of the finalize function (same body as `POST /v1/admin/catalog-finalize`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalizeInput {
    acknowledge_writer_rollout: bool,
    acknowledge_quiescent_writes: bool,
}

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("events")
}

fn samples(function: &str) -> Vec<(PathBuf, String)> {
    let dir = events_dir().join(function);
    let mut out: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect();
    out.sort();
    assert!(
        !out.is_empty(),
        "no samples for {function} in {}",
        dir.display()
    );
    out
}

fn jwt_claims(event: &ApiGatewayV2httpRequest) -> Option<&HashMap<String, String>> {
    let authorizer: &ApiGatewayRequestAuthorizer = event.request_context.authorizer.as_ref()?;
    authorizer.jwt.as_ref().map(|jwt| &jwt.claims)
}

#[test]
fn every_sample_belongs_to_a_function() {
    let known = [
        "api",
        "iceberg",
        "reconciler",
        "capture",
        "scheduler",
        "finalize",
        "query",
        "events",
    ];
    for entry in std::fs::read_dir(events_dir()).expect("events/") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            path.is_dir() && known.contains(&name.as_str()),
            "unexpected {}",
            path.display()
        );
    }
}

#[test]
fn api_samples_are_http_api_v2_requests_for_the_template_routes() {
    let mut paths = Vec::new();
    for (path, text) in samples("api") {
        let file = path.display();
        let event: ApiGatewayV2httpRequest = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: not an HTTP API v2 event: {e}"));
        assert_eq!(
            event.version.as_deref(),
            Some("2.0"),
            "{file}: payload format version"
        );
        let raw_path = event.raw_path.clone().unwrap_or_default();
        assert!(raw_path.starts_with("/v1/"), "{file}: path {raw_path}");
        assert_eq!(
            event.request_context.http.path.as_deref(),
            Some(raw_path.as_str()),
            "{file}"
        );
        // The routes infra/template.yaml declares: the public health check and the proxy.
        match event.route_key.as_deref() {
            Some("GET /v1/health") => {
                assert_eq!(raw_path, "/v1/health", "{file}");
                assert!(
                    jwt_claims(&event).is_none(),
                    "{file}: health has no authorizer"
                );
            }
            Some("ANY /{proxy+}") => {
                assert_eq!(
                    event.path_parameters.get("proxy").map(String::as_str),
                    Some(&raw_path[1..]),
                    "{file}"
                );
                let claims =
                    jwt_claims(&event).unwrap_or_else(|| panic!("{file}: JWT claims missing"));
                assert!(
                    claims.get("sub").is_some_and(|s| !s.is_empty()),
                    "{file}: sub names the principal"
                );
                let operator = claims.get("flotilla:operator").is_some_and(|v| v == "true");
                let accounts = claims
                    .get("flotilla:accounts")
                    .is_some_and(|v| !v.trim().is_empty());
                assert!(
                    operator || accounts,
                    "{file}: principal has neither operator nor account scope"
                );
            }
            other => panic!("{file}: route key {other:?} is not declared in infra/template.yaml"),
        }
        if let Some(body) = &event.body {
            assert!(
                !event.is_base64_encoded,
                "{file}: JSON bodies are sent as text"
            );
            assert_eq!(
                event
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok()),
                Some("application/json")
            );
            let value: serde_json::Value =
                serde_json::from_str(body).unwrap_or_else(|e| panic!("{file}: body: {e}"));
            assert!(value.is_object(), "{file}: body is a JSON object");
        }

        // What the api function actually receives: lambda_http's request conversion.
        let request = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: lambda_http: {e}"));
        assert_eq!(request.uri().path(), raw_path, "{file}");
        assert_eq!(
            request.method().as_str(),
            event.request_context.http.method.as_str(),
            "{file}"
        );
        assert!(
            matches!(
                request.request_context_ref(),
                Some(RequestContext::ApiGatewayV2(_))
            ),
            "{file}"
        );
        paths.push(format!("{} {}", request.method(), raw_path));
    }
    paths.sort();
    assert_eq!(
        paths,
        [
            "GET /v1/accounts/acme/catalogs",
            "GET /v1/health",
            "POST /v1/accounts",
            "POST /v1/accounts/acme/catalogs",
        ]
    );
}

/// The Iceberg REST function's samples: HTTP API v2 requests on the Iceberg routes the
/// template points at that function (`GET /iceberg/v1/config`, `ANY /iceberg/v1/{proxy+}`),
/// behind the JWT authorizer, and the public `POST /iceberg/v1/oauth/tokens` (no claims: the
/// engine is asking for its token).
#[test]
fn iceberg_samples_are_http_api_v2_requests_for_the_iceberg_routes() {
    let mut paths = Vec::new();
    for (path, text) in samples("iceberg") {
        let file = path.display();
        let event: ApiGatewayV2httpRequest = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: not an HTTP API v2 event: {e}"));
        assert_eq!(event.version.as_deref(), Some("2.0"), "{file}");
        let raw_path = event.raw_path.clone().unwrap_or_default();
        assert!(
            raw_path.starts_with("/iceberg/v1/"),
            "{file}: path {raw_path}"
        );
        let public = event.route_key.as_deref() == Some("POST /iceberg/v1/oauth/tokens");
        match event.route_key.as_deref() {
            Some("GET /iceberg/v1/config") => assert_eq!(raw_path, "/iceberg/v1/config", "{file}"),
            Some("POST /iceberg/v1/oauth/tokens") => {
                assert_eq!(raw_path, "/iceberg/v1/oauth/tokens", "{file}");
                assert!(
                    jwt_claims(&event).is_none(),
                    "{file}: a public route has no claims"
                );
            }
            Some(key) if key.ends_with(" /iceberg/v1/{proxy+}") => assert_eq!(
                event.path_parameters.get("proxy").map(String::as_str),
                raw_path.strip_prefix("/iceberg/v1/"),
                "{file}"
            ),
            other => panic!("{file}: route key {other:?} is not an Iceberg route"),
        }
        if !public {
            let claims = jwt_claims(&event).unwrap_or_else(|| panic!("{file}: JWT claims missing"));
            assert!(
                claims.get("sub").is_some_and(|s| !s.is_empty()),
                "{file}: sub names the principal"
            );
        }
        let request = lambda_http::request::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: lambda_http: {e}"));
        assert_eq!(request.uri().path(), raw_path, "{file}");
        paths.push(format!("{} {}", request.method(), raw_path));
    }
    assert_eq!(
        paths,
        ["GET /iceberg/v1/config", "POST /iceberg/v1/oauth/tokens"]
    );
}

#[test]
fn worker_samples_are_sqs_batches_of_work_messages() {
    let reconciler = samples("reconciler");
    let capture = samples("capture");
    assert!(!capture.is_empty(), "events/capture/ holds a sample batch");
    for (path, text) in reconciler.into_iter().chain(capture) {
        let file = path.display();
        let event: SqsEvent =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: not an SQS event: {e}"));
        assert!(
            event.records.len() > 1,
            "{file}: a batch, so partial failures can be exercised"
        );
        let mut ids = std::collections::HashSet::new();
        for record in &event.records {
            let id = record
                .message_id
                .clone()
                .unwrap_or_else(|| panic!("{file}: messageId missing"));
            assert!(
                ids.insert(id),
                "{file}: message ids must be unique (batch item failures name them)"
            );
            assert_eq!(record.event_source.as_deref(), Some("aws:sqs"), "{file}");
            let body = record
                .body
                .as_deref()
                .unwrap_or_else(|| panic!("{file}: body missing"));
            let (account_id, overlay_id) = if body.contains("\"kind\"") {
                let m: CaptureMessage = serde_json::from_str(body)
                    .unwrap_or_else(|e| panic!("{file}: capture message: {e}"));
                assert_eq!(m.kind, "capture", "{file}");
                (m.account_id, m.overlay_id)
            } else {
                let m: ReconcileMessage = serde_json::from_str(body)
                    .unwrap_or_else(|e| panic!("{file}: reconcile message: {e}"));
                (m.account_id, m.overlay_id)
            };
            assert!(!account_id.is_empty() && !overlay_id.is_empty(), "{file}");
        }
    }
}

#[test]
fn scheduler_samples_are_eventbridge_scheduled_events() {
    for (path, text) in samples("scheduler") {
        let file = path.display();
        let event: EventBridgeEvent<serde_json::Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: not an EventBridge event: {e}"));
        assert_eq!(event.detail_type, "Scheduled Event", "{file}");
        assert_eq!(event.source, "aws.events", "{file}");
        assert!(
            event.resources.as_ref().is_some_and(|r| !r.is_empty()),
            "{file}: the rule ARN"
        );
    }
}

#[test]
fn finalize_samples_are_finalize_inputs() {
    for (path, text) in samples("finalize") {
        let file = path.display();
        let input: FinalizeInput =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: finalize input: {e}"));
        assert!(
            input.acknowledge_writer_rollout && input.acknowledge_quiescent_writes,
            "{file}"
        );
    }
}

#[test]
fn query_samples_name_a_catalog_directory() {
    for (path, text) in samples("query") {
        let file = path.display();
        let input: QueryInput =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: query input: {e}"));
        assert!(
            !input.account_id.is_empty() && !input.catalog_id.is_empty(),
            "{file}"
        );
    }
}

#[test]
fn events_samples_are_stream_batches_of_event_item_inserts() {
    use aws_lambda_events::dynamodb::{Event, StreamViewType};
    for (path, text) in samples("events") {
        let file = path.display();
        let event: Event = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{file}: not a DynamoDB stream event: {e}"));
        assert!(!event.records.is_empty(), "{file}");
        for record in &event.records {
            // What the mapping's FilterCriteria (infra/template.yaml) admits: the inserts of
            // pending events and log entries, from a stream of new images.
            assert_eq!(record.event_name, "INSERT", "{file}");
            assert_eq!(
                record.event_source.as_deref(),
                Some("aws:dynamodb"),
                "{file}"
            );
            let change = &record.change;
            assert_eq!(
                change.stream_view_type,
                Some(StreamViewType::NewImage),
                "{file}"
            );
            assert!(
                change
                    .sequence_number
                    .as_deref()
                    .is_some_and(|s| !s.is_empty()),
                "{file}"
            );
            let keys = serde_json::to_value(&change.keys).expect("keys");
            let image = serde_json::to_value(&change.new_image).expect("image");
            let sk = keys["sk"]["S"].as_str().unwrap_or_default();
            assert!(
                sk.starts_with("EVQ#") || sk.starts_with("EVT#"),
                "{file}: {sk}"
            );
            assert!(
                keys["pk"]["S"]
                    .as_str()
                    .is_some_and(|pk| pk.starts_with("CAT#")),
                "{file}"
            );
            assert_eq!(image["pk"], keys["pk"], "{file}");
            assert_eq!(image["sk"], keys["sk"], "{file}");
            assert!(image["v"]["N"].is_string(), "{file}: the item version");
            assert!(image["b"]["B"].is_string(), "{file}: the item body");
        }
    }
}
