//! `/v1/admin/metrics` (docs/api.md "Metrics"): the six counter families appear from the first
//! scrape (at 0), upstream requests made through the API are counted under their protocol,
//! no label value is an identifier, a name, a secret or a generation, and only an operator
//! may read the endpoint.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_catalog_access::CatalogProtocol;
use flotilla_catalog_access::http::upstream_requests;
use flotilla_core::auth::StaticTokens;
use flotilla_core::clock::SystemClock;
use flotilla_core::{AppState, Config};
use flotilla_metastore::metrics::CountingMetastore;
use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_testkit::iceberg_fixture::{FixtureAuth, IcebergFixture};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "operator-token-metrics";
const ACME: &str = "acme-token-metrics";
const UPSTREAM_TOKEN: &str = "upstream-bearer-canary-7f3a";

/// The router assembled as the hosts assemble it: counted metastore, the metastore counters
/// as one more renderer, a local credential store.
fn app(dir: &std::path::Path) -> Router {
    let redb = RedbMetastore::open(dir.join("meta.redb")).expect("open redb");
    let counting = CountingMetastore::new(redb);
    let counters = counting.counters();
    let mut tokens = StaticTokens::new();
    tokens.add(OPERATOR, true, vec![]);
    tokens.add(ACME, false, vec!["acme".into()]);
    let creds = flotilla_secrets::local::LocalEncryptedStore::with_key(
        dir.join("secrets"),
        &flotilla_secrets::local::SecretKey::generate(),
    )
    .expect("credential store");
    let config = Config {
        allow_insecure_upstreams: true,
        ..Config::default()
    };
    let state = AppState::new(
        Arc::new(counting),
        Arc::new(SystemClock),
        Arc::new(tokens),
        config,
    )
    .with_metrics(Arc::new(move || counters.render_prometheus()))
    .with_credentials(Arc::new(creds));
    flotilla_core::router(state)
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, String) {
    let mut b = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let req = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// One sample line of the exposition: family, labels, value (timing sums are fractional).
type Sample = (String, Vec<(String, String)>, f64);

/// Every sample line of the exposition.
fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("numeric sample: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closed label set");
                let labels = inner
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("label k=v");
                        (k.to_owned(), v.trim_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
        };
        out.push((name, labels, value));
    }
    out
}

fn value(text: &str, family: &str, label: Option<(&str, &str)>) -> Option<u64> {
    samples(text).into_iter().find_map(|(n, l, v)| {
        let matches = n == family
            && match label {
                None => l.is_empty(),
                Some((k, val)) => l == vec![(k.to_owned(), val.to_owned())],
            };
        matches.then_some(v as u64)
    })
}

/// The label values the contract allows: enumerations, nothing caller-controlled.
const ALLOWED_LABELS: &[(&str, &[&str])] = &[
    ("op", &["get", "batch_get", "query", "count", "transact"]),
    ("protocol", &["iceberg_rest", "unity", "delta_sharing"]),
    (
        "outcome",
        &[
            "unchanged",
            "reloaded",
            "failed",
            "succeeded",
            "failed_retryable",
            "failed_permanent",
        ],
    ),
];

/// Whether `k=v` is a value the metric catalogue allows: a closed label's value (or `other`),
/// or for the API route a method and a route template (`GET /v1/accounts/{account_id}`),
/// checked against the router's concrete identifiers by the canary loop below.
fn catalogue_allows(family: &str, k: &str, v: &str) -> bool {
    let base = family.trim_end_matches("_count").trim_end_matches("_sum");
    let Some(def) = flotilla_telemetry::catalog::ALL
        .iter()
        .find(|d| d.name == base || d.name == family)
    else {
        return false;
    };
    let Some(label) = def.labels.iter().find(|l| l.key == k) else {
        return false;
    };
    if label.is_closed() {
        return v == flotilla_telemetry::catalog::OTHER || label.values.contains(&v);
    }
    v == "unmatched"
        || v.split_once(' ').is_some_and(|(method, path)| {
            method.chars().all(|c| c.is_ascii_uppercase()) && path.starts_with('/')
        })
}

fn assert_contract(text: &str) {
    for (family, key, values) in [
        (
            "flotilla_metastore_requests_total",
            Some("op"),
            ALLOWED_LABELS[0].1,
        ),
        (
            "flotilla_upstream_requests_total",
            Some("protocol"),
            ALLOWED_LABELS[1].1,
        ),
        (
            "flotilla_directory_refresh_total",
            Some("outcome"),
            &["unchanged", "reloaded", "failed"][..],
        ),
        (
            "flotilla_reconcile_run_outcomes_total",
            Some("outcome"),
            &flotilla_core::reconcile::metrics::OUTCOMES[..],
        ),
        ("flotilla_metastore_items_read_total", None, &[][..]),
        ("flotilla_metastore_items_written_total", None, &[][..]),
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} counter")),
            "{family} has no TYPE line:\n{text}"
        );
        match key {
            None => assert!(
                value(text, family, None).is_some(),
                "{family} missing:\n{text}"
            ),
            Some(k) => {
                for v in values {
                    assert!(
                        value(text, family, Some((k, v))).is_some(),
                        "{family}{{{k}={v}}} missing:\n{text}"
                    );
                }
            }
        }
    }
    for (name, labels, _) in samples(text) {
        for (k, v) in labels {
            assert!(
                catalogue_allows(&name, &k, &v),
                "{name}{{{k}={v}}} is not a catalogue label value"
            );
        }
    }
}

#[tokio::test]
async fn metrics_show_every_family_and_count_upstream_requests_without_identifying_labels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let app = app(dir.path());

    // Only an operator reads metrics.
    assert_eq!(
        call(&app, Method::GET, "/v1/admin/metrics", None, None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&app, Method::GET, "/v1/admin/metrics", Some(ACME), None)
            .await
            .0,
        StatusCode::FORBIDDEN
    );

    // The first scrape, before any traffic: every family and label value, at 0 or more.
    let (status, first) = call(&app, Method::GET, "/v1/admin/metrics", Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_contract(&first);

    // Traffic with recognisable identifiers, names and a secret.
    let fx = IcebergFixture::start().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[UPSTREAM_TOKEN]);
    fx.add_namespace(&["sales"]);
    let (s, _) = call(
        &app,
        Method::POST,
        "/v1/accounts",
        Some(OPERATOR),
        Some(json!({"id": "acme"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, cat) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/catalogs",
        Some(ACME),
        Some(json!({"display_name": "catalog-name-canary"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{cat}");
    let catalog_id = serde_json::from_str::<Value>(&cat).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (s, dir_body) = call(
        &app,
        Method::GET,
        &format!("/v1/accounts/acme/catalogs/{catalog_id}/directory"),
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{dir_body}");
    let (s, integ) = call(
        &app,
        Method::POST,
        "/v1/accounts/acme/integrations",
        Some(ACME),
        Some(json!({
            "display_name": "integration-name-canary",
            "type": "ICEBERG_REST",
            "uri": fx.uri(),
            "properties": {"warehouse": "demo"},
            "authentication": {"type": "BEARER"},
            "credentials": {"token": UPSTREAM_TOKEN},
        })),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{integ}");
    let integ: Value = serde_json::from_str(&integ).expect("json");
    let integration_id = integ["id"].as_str().expect("id").to_owned();

    let before = upstream_requests().get(CatalogProtocol::IcebergRest);
    let sent_before = fx.log().entries().len() as u64;
    let (s, listing) = call(
        &app,
        Method::GET,
        &format!("/v1/accounts/acme/integrations/{integration_id}/upstream/namespaces"),
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{listing}");
    let sent = fx.log().entries().len() as u64 - sent_before;
    assert!(sent >= 1, "the listing reached the fixture");

    let (status, after) = call(&app, Method::GET, "/v1/admin/metrics", Some(OPERATOR), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_contract(&after);
    let shown = value(
        &after,
        "flotilla_upstream_requests_total",
        Some(("protocol", "iceberg_rest")),
    )
    .expect("sample");
    assert!(
        shown >= before + sent,
        "upstream requests {shown} < {before} + {sent}"
    );
    assert!(
        value(
            &after,
            "flotilla_directory_refresh_total",
            Some(("outcome", "reloaded"))
        )
        .expect("sample")
            >= 1
    );
    let written = value(&after, "flotilla_metastore_items_written_total", None).expect("sample");
    assert!(
        written > value(&first, "flotilla_metastore_items_written_total", None).expect("sample")
    );
    assert!(
        value(
            &after,
            "flotilla_metastore_requests_total",
            Some(("op", "transact"))
        )
        .expect("sample")
            >= 3
    );

    for canary in [
        "acme",
        catalog_id.as_str(),
        integration_id.as_str(),
        "catalog-name-canary",
        "integration-name-canary",
        UPSTREAM_TOKEN,
        "generation",
    ] {
        assert!(
            !after.contains(canary),
            "metrics expose {canary:?}:\n{after}"
        );
    }
}
