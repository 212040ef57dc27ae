//! Hostile callers (issue 13): a cross-account matrix over every route, a secret canary
//! across responses, logs, metastore items and errors, SSRF attempts on integration URIs,
//! oversized and deeply nested bodies, and hostile names.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use flotilla_catalog_access::iceberg_rest::IcebergRestProvider;
use flotilla_catalog_access::{
    CatalogAuthentication, CatalogClient, CatalogClientFactory, CatalogClientProvider,
    CatalogConnectionConfig, CatalogProtocol, ConnectOptions, ResolvedCatalogCredentials,
    Result as CaResult,
};
use flotilla_core::Config;
use flotilla_testkit::iceberg_fixture::{
    FixtureAuth, IcebergFault, IcebergFaultRule, IcebergFixture,
};
use serde_json::{Value, json};
use support::{ACME, BETA, Creds, Harness, OPERATOR, Resp, SpyMetastore, ns, table_body};

// ---- the route table ------------------------------------------------------------------

/// Every route template of the router, as written in `shared/http/src/*.rs`.
fn route_templates() -> BTreeSet<String> {
    let sources = [
        include_str!("../../http/src/routes.rs"),
        include_str!("../../http/src/directory_routes.rs"),
        include_str!("../../http/src/index_routes.rs"),
        include_str!("../../http/src/integration_routes.rs"),
        include_str!("../../http/src/reconcile_routes.rs"),
        include_str!("../../http/src/upstream_routes.rs"),
    ];
    let mut out = BTreeSet::new();
    for src in sources {
        let base = src
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("const BASE: &str = \"")
                    .and_then(|r| r.strip_suffix("\";"))
            })
            .unwrap_or("");
        let nest = if src.contains(".nest(\"/v1/accounts/{account_id}\", account_routes)") {
            "/v1/accounts/{account_id}"
        } else {
            ""
        };
        for (i, _) in src.match_indices(".route(") {
            let rest = &src[i + ".route(".len()..];
            let rest = rest.trim_start();
            let path = if let Some(r) = rest.strip_prefix('"') {
                r.split('"').next().unwrap_or("").to_owned()
            } else if rest.starts_with("BASE") {
                base.to_owned()
            } else if let Some(r) = rest.strip_prefix("&format!(\"{BASE}") {
                format!(
                    "{base}{}",
                    r.split('"')
                        .next()
                        .unwrap_or("")
                        .replace("{{", "{")
                        .replace("}}", "}")
                )
            } else {
                panic!("unparsed route: {}", &rest[..rest.len().min(60)]);
            };
            let full = if path.starts_with("/v1/") {
                path
            } else {
                format!("{nest}{path}")
            };
            out.insert(full);
        }
    }
    out
}

/// Methods served per template (the matrix tries every one of them).
fn methods_of(template: &str) -> Vec<Method> {
    let t = template;
    let m = |v: &[Method]| v.to_vec();
    if t == "/v1/health" || t == "/v1/admin/metrics" {
        return m(&[Method::GET]);
    }
    if t.ends_with("/reconcile")
        || t.ends_with("/validate")
        || t.ends_with("/commit")
        || t.ends_with("/rename")
        || t.starts_with("/v1/admin/")
    {
        return m(&[Method::POST]);
    }
    if t.ends_with("/authentication") {
        return m(&[Method::PUT]);
    }
    if t.ends_with("/directory") || t.contains("/upstream/") {
        return m(&[Method::GET]);
    }
    let last = t.rsplit('/').next().unwrap_or("");
    if last.starts_with('{') {
        m(&[Method::GET, Method::PATCH, Method::DELETE])
    } else {
        m(&[Method::GET, Method::POST])
    }
}

/// A well-formed body for a write, so that the request reaches authorization.
fn body_for(t: &str, method: &Method, v: &Victim) -> Option<Value> {
    let last = t.rsplit('/').next().unwrap_or("");
    let item = last.starts_with('{');
    let b = match (method.clone(), last) {
        (Method::GET, _) | (Method::DELETE, _) => return None,
        (Method::PATCH, _)
            if t.contains("/catalogs/{catalog_id}") && !t.contains("/namespaces") =>
        {
            json!({"description": "x"})
        }
        (Method::PATCH, _)
            if t.ends_with("/tables/{name}")
                || t.ends_with("/views/{name}")
                || t.ends_with("/namespaces/{ns}") =>
        {
            json!({"properties": {}})
        }
        (Method::PATCH, _) if t.contains("/integrations/") => json!({"properties": {}}),
        (Method::PATCH, _) if t.contains("/overlays/") => json!({"display_name": "o2"}),
        (Method::PUT, _) => json!({"credentials": {"token": "t"}}),
        (Method::POST, "accounts") => json!({"id": "zz"}),
        (Method::POST, "catalogs") => json!({"display_name": "x"}),
        (Method::POST, "namespaces") => json!({"path": ["x"]}),
        (Method::POST, "tables") => table_body("x"),
        (Method::POST, "views") => {
            json!({"name": "v", "schema": support::schema(), "definitions": [{"dialect": "spark", "sql": "SELECT 1"}]})
        }
        (Method::POST, "integrations") => support::integration_body("x", "t"),
        (Method::POST, "overlays") => {
            json!({"display_name": "o", "integration_id": v.integration, "catalog_id": v.catalog})
        }
        (Method::POST, "index-catalogs") => {
            json!({"name": "x", "warehouse": "file:///tmp/flotilla-adversarial"})
        }
        (Method::POST, "catalog-finalize") => {
            json!({"acknowledge_writer_rollout": true, "acknowledge_quiescent_writes": true})
        }
        (Method::POST, "sweep-credentials") => json!({"account_id": "beta"}),
        (Method::POST, _) if !item => json!({}),
        _ => json!({}),
    };
    Some(b)
}

struct Victim {
    catalog: String,
    integration: String,
    overlay: String,
    secrets: Vec<String>,
}

/// Account `beta` with one of everything, named so that a leak is recognisable.
async fn victim(h: &Harness) -> Victim {
    let b = "/v1/accounts/beta";
    let cat = h
        .post(
            &format!("{b}/catalogs"),
            BETA,
            json!({"display_name": "beta-private-catalog"}),
        )
        .await;
    assert_eq!(cat.status, StatusCode::CREATED, "{:?}", cat.body);
    let catalog = cat.body["id"].as_str().unwrap_or_default().to_owned();
    let r = h
        .post(
            &format!("{b}/catalogs/{catalog}/namespaces"),
            BETA,
            json!({"path": ["beta-private-ns"]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let r = h
        .post(
            &format!("{b}/catalogs/{catalog}/namespaces/beta-private-ns/tables"),
            BETA,
            table_body("beta-private-table"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let integration = h
        .integration("beta", BETA, "beta-private-integration")
        .await;
    let overlay = h
        .overlay("beta", BETA, "beta-private-overlay", &integration, &catalog)
        .await;
    Victim {
        secrets: vec![
            catalog.clone(),
            integration.clone(),
            overlay.clone(),
            "beta-private".into(),
            "tok-beta-private-integration".into(),
        ],
        catalog,
        integration,
        overlay,
    }
}

fn fill(template: &str, v: &Victim) -> String {
    template
        .replace("{account_id}", "beta")
        .replace("{catalog_id}", &v.catalog)
        .replace("{ns}", "beta-private-ns")
        .replace("{name}", "beta-private-table")
        .replace("{integration_id}", &v.integration)
        .replace("{overlay_id}", &v.overlay)
        .replace("{index}", "beta-private-index")
}

#[tokio::test]
async fn cross_account_matrix_covers_every_route_and_leaks_nothing() {
    let creds = Creds::new();
    let h = Harness::redb().with_credentials(creds.dyn_store());
    h.account("acme").await;
    h.account("beta").await;
    let v = victim(&h).await;
    let templates = route_templates();
    assert!(
        templates.len() >= 30,
        "the route table parsed to {templates:?}"
    );
    let mut tried = 0;
    let mut served = BTreeSet::new();
    for t in &templates {
        if t == "/v1/health" {
            continue;
        }
        for method in methods_of(t) {
            let path = fill(t, &v);
            let body = body_for(t, &method, &v);
            let r = h.call(method.clone(), &path, Some(ACME), body, &[]).await;
            if r.status == StatusCode::METHOD_NOT_ALLOWED {
                // The template does not serve this method (the guess in `methods_of`); the
                // check below insists that every template served at least one.
                continue;
            }
            served.insert(t.clone());
            tried += 1;
            // Index-catalog mutations take bodies this matrix does not build; a body refused
            // before authorization (400) still must not name anything of B's.
            let lenient = t.contains("/indexes") || t.ends_with("/rename");
            assert!(
                r.status == StatusCode::FORBIDDEN
                    || r.status == StatusCode::NOT_FOUND
                    || (lenient && r.status == StatusCode::BAD_REQUEST),
                "{method} {t}: account A on account B's resource answered {} {:?}",
                r.status,
                r.body
            );
            let text = r.body.to_string();
            for s in &v.secrets {
                assert!(
                    !text.contains(s.as_str()),
                    "{method} {t}: the answer names {s}: {text}"
                );
            }
        }
    }
    assert!(tried >= 50, "only {tried} route/method pairs tried");
    let missed: Vec<&String> = templates
        .iter()
        .filter(|t| *t != "/v1/health" && !served.contains(*t))
        .collect();
    assert!(
        missed.is_empty(),
        "no method of these routes was tried: {missed:?}"
    );
    // Nothing changed in B.
    let r = h
        .get(&format!("/v1/accounts/beta/catalogs/{}", v.catalog), BETA)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = h
        .get(&format!("/v1/accounts/beta/overlays/{}", v.overlay), BETA)
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[test]
fn the_route_table_parser_sees_the_routes_it_should() {
    let t = route_templates();
    for expected in [
        "/v1/accounts",
        "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}",
        "/v1/accounts/{account_id}/integrations/{integration_id}/authentication",
        "/v1/accounts/{account_id}/overlays/{overlay_id}/reconcile",
        "/v1/accounts/{account_id}/index-catalogs",
        "/v1/admin/catalog-finalize",
    ] {
        assert!(t.contains(expected), "{expected} missing from {t:?}");
    }
}

// ---- secret canary ----------------------------------------------------------------------

/// A `tracing` writer into a shared buffer, so a test can read every log line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

const CANARY: &str = "CANARY-4b1d-secret-value";
const CANARY2: &str = "CANARY-9e7f-rotated-value";

#[tokio::test]
async fn secret_canary_never_appears_in_responses_logs_items_or_errors() {
    // The Lambda log format (flat JSON with every span field), at the most verbose level.
    let logs = Captured::default();
    let subscriber = flotilla_telemetry::logs::json_subscriber(
        flotilla_telemetry::logs::filter("trace").expect("filter"),
        logs.clone(),
    );
    let _guard = tracing::subscriber::set_default(subscriber);
    // And the metrics as a Lambda would flush them (CloudWatch EMF lines).
    let emf = flotilla_telemetry::emf::EmfFlusher::new("canary", "api");

    let fx = IcebergFixture::start_with_sample().await;
    fx.set_auth(FixtureAuth::Bearer);
    fx.set_bearer_tokens(&[CANARY, CANARY2]);
    let (redb, _dir) = support::redb_store();
    let spy = Arc::new(SpyMetastore {
        inner: redb,
        writes: Mutex::new(Vec::new()),
    });
    let creds = Creds::new();
    let h = Harness::with_store(spy.clone(), None, false)
        .with_credentials(creds.dyn_store())
        .with_config(Config {
            allow_insecure_upstreams: true,
            ..Config::default()
        });
    h.account("acme").await;
    let a = "/v1/accounts/acme";
    let mut answers: Vec<Resp> = Vec::new();
    let body = json!({
        "display_name": "canary", "type": "ICEBERG_REST", "uri": fx.uri(),
        "authentication": {"type": "BEARER"}, "credentials": {"token": CANARY},
    });
    let created = h
        .call(
            Method::POST,
            &format!("{a}/integrations"),
            Some(ACME),
            Some(body.clone()),
            &[("idempotency-key", "canary-1")],
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let id = created.body["id"].as_str().unwrap_or_default().to_owned();
    answers.push(created);
    // A replay with other credential bytes answers the first response.
    let mut replay = body.clone();
    replay["credentials"]["token"] = json!(CANARY2);
    answers.push(
        h.call(
            Method::POST,
            &format!("{a}/integrations"),
            Some(ACME),
            Some(replay),
            &[("idempotency-key", "canary-1")],
        )
        .await,
    );
    answers.push(
        h.post(&format!("{a}/integrations/{id}/validate"), ACME, json!({}))
            .await,
    );
    answers.push(
        h.call(
            Method::POST,
            &format!("{a}/integrations/{id}/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await,
    );
    let rotated = h
        .call(
            Method::PUT,
            &format!("{a}/integrations/{id}/authentication"),
            Some(ACME),
            Some(json!({"credentials": {"token": CANARY2}})),
            &[],
        )
        .await;
    assert_eq!(rotated.status, StatusCode::OK, "{:?}", rotated.body);
    answers.push(rotated);
    answers.push(
        h.call(
            Method::POST,
            &format!("{a}/integrations/{id}/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await,
    );
    answers.push(h.get(&format!("{a}/integrations/{id}"), ACME).await);
    answers.push(h.get(&format!("{a}/integrations"), ACME).await);
    answers.push(
        h.get(&format!("{a}/integrations/{id}/upstream/namespaces"), ACME)
            .await,
    );
    // Errors that could echo a value: the canary in the wrong place and of the wrong type.
    for bad in [
        json!({"display_name": "x", "type": CANARY, "uri": fx.uri(), "authentication": {"type": "BEARER"}, "credentials": {"token": CANARY}}),
        json!({"display_name": "x", "type": "ICEBERG_REST", "uri": fx.uri(), "authentication": {"type": CANARY}, "credentials": {"token": CANARY}}),
        json!({"display_name": "x", "type": "ICEBERG_REST", "uri": fx.uri(), "authentication": {"type": "BEARER"}, "credentials": {"token": CANARY, "client_secret": CANARY}}),
        json!({"display_name": "x", "type": "ICEBERG_REST", "uri": fx.uri(), "authentication": {"type": "BEARER"}, "credentials": CANARY}),
        json!({"display_name": "x", "type": "ICEBERG_REST", "uri": fx.uri(), "properties": {"token": CANARY}, "authentication": {"type": "BEARER"}, "credentials": {"token": CANARY}}),
        json!({"display_name": "x", "type": "ICEBERG_REST", "uri": format!("https://user:{CANARY}@example.com/"), "authentication": {"type": "BEARER"}, "credentials": {"token": CANARY}}),
    ] {
        let r = h.post(&format!("{a}/integrations"), ACME, bad).await;
        assert!(r.status.is_client_error(), "{:?}", r.body);
        answers.push(r);
    }
    let r = h
        .call(
            Method::PUT,
            &format!("{a}/integrations/{id}/authentication"),
            Some(ACME),
            Some(json!({"credentials": {"token": 7, "x": CANARY}})),
            &[],
        )
        .await;
    answers.push(r);
    // The upstream refuses the credentials: its error must not carry them either.
    fx.set_bearer_tokens(&["someone-else"]);
    answers.push(
        h.call(
            Method::POST,
            &format!("{a}/integrations/{id}/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await,
    );

    for r in &answers {
        let text = format!("{:?} {}", r.headers, r.body);
        for c in [CANARY, CANARY2] {
            assert!(!text.contains(c), "a response carries the secret: {text}");
        }
    }
    for (key, body) in spy.writes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let text = String::from_utf8_lossy(body);
        for c in [CANARY, CANARY2] {
            assert!(
                !text.contains(c) && !format!("{key:?}").contains(c),
                "metastore item {key:?} carries the secret"
            );
        }
    }
    let logged =
        String::from_utf8_lossy(&logs.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    assert!(
        logged.contains("request"),
        "the capture saw the request spans: {}",
        &logged[..logged.len().min(400)]
    );
    for c in [CANARY, CANARY2] {
        assert!(!logged.contains(c), "a log line carries the secret");
    }
    // Every log line is one JSON object; the request lines carry their route template.
    for line in logged.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
    assert!(
        logged.contains("\"route\":\"/v1/accounts/{account_id}/integrations\""),
        "request lines carry the route"
    );
    // The EMF lines of everything this test did: catalogue-shaped, no secret anywhere, no
    // account or integration id as a dimension. The Prometheus page neither.
    let lines = emf.lines(&h.state.metric_source_refs(), 0);
    for metric in ["ApiRequests", "ValidationRuns", "UpstreamResponses"] {
        assert!(
            lines.iter().any(|l| l.contains(&format!("\"{metric}\""))),
            "{metric}: {lines:?}"
        );
    }
    for line in &lines {
        flotilla_telemetry::emf::check_line(line, &[CANARY, CANARY2, "acme", &id])
            .unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let page = h.state.render_metrics();
    for c in [CANARY, CANARY2] {
        assert!(!page.contains(c), "the metrics page carries the secret");
    }
    // The secret did reach the only place it belongs.
    let g = creds.generations("acme", &id).await;
    let newest = g.iter().max().copied().unwrap_or(0);
    let fields = creds.fields("acme", &id, newest).await.unwrap_or_default();
    assert_eq!(fields.get("token").and_then(Value::as_str), Some(CANARY2));
}

// ---- SSRF -----------------------------------------------------------------------------

/// The Iceberg REST provider with fixed DNS answers (the catalog-access static-hosts seam):
/// the address policy still applies to them.
struct StaticHosts {
    hosts: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
}

impl CatalogClientProvider for StaticHosts {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::IcebergRest
    }
    fn connect(
        &self,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> CaResult<Box<dyn CatalogClient>> {
        let mut options = options.clone();
        options.http.static_hosts = self.hosts.clone();
        IcebergRestProvider.connect(config, auth, credentials, &options)
    }
}

fn ssrf_harness(insecure: bool, hosts: &[(&str, &str)]) -> (Harness, Creds) {
    let creds = Creds::new();
    let mut factory = CatalogClientFactory::new();
    let static_hosts = hosts
        .iter()
        .map(|(n, ip)| {
            (
                (*n).to_owned(),
                vec![ip.parse().unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]))],
            )
        })
        .collect();
    if let Err(e) = factory.register(Arc::new(StaticHosts {
        hosts: static_hosts,
    })) {
        panic!("register: {e}");
    }
    let mut h = Harness::redb()
        .with_credentials(creds.dyn_store())
        .with_config(Config {
            allow_insecure_upstreams: insecure,
            ..Config::default()
        });
    h.state = h.state.clone().with_catalog_access(Arc::new(factory));
    h.router = flotilla_core::router(h.state.clone());
    (h, creds)
}

fn integration_at(uri: &str) -> Value {
    json!({"display_name": "ssrf", "type": "ICEBERG_REST", "uri": uri,
           "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}})
}

fn connection_failed(r: &Resp) -> bool {
    r.status == StatusCode::OK
        && r.body["valid"] == false
        && r.body["checks"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "CATALOG_CONNECTION" && c["status"] == "FAILED")
        })
}

#[tokio::test]
async fn metadata_and_link_local_uris_are_refused_in_every_mode() {
    for insecure in [false, true] {
        let (h, _c) = ssrf_harness(insecure, &[]);
        h.account("acme").await;
        for uri in [
            "https://169.254.169.254/latest/meta-data/",
            "http://169.254.169.254/",
            "https://169.254.10.10/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://[::ffff:169.254.169.254]/",
            "https://metadata.google.internal/",
        ] {
            let r = h
                .post("/v1/accounts/acme/integrations", ACME, integration_at(uri))
                .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "insecure={insecure} {uri}: {:?}",
                r.body
            );
        }
    }
}

#[tokio::test]
async fn a_name_that_resolves_to_a_private_address_is_never_contacted() {
    let fx = IcebergFixture::start_with_sample().await;
    let port = fx.addr().port();
    // Strict mode: the name passes the create-time check (it is a name), the resolver maps it
    // to the fixture's loopback address, and the connect-time policy refuses it.
    let (h, _c) = ssrf_harness(
        false,
        &[
            ("catalog.internal.test", "127.0.0.1"),
            ("meta.internal.test", "169.254.169.254"),
        ],
    );
    h.account("acme").await;
    for host in ["catalog.internal.test", "meta.internal.test"] {
        let r = h.post("/v1/accounts/acme/integrations", ACME, json!({"display_name": host, "type": "ICEBERG_REST", "uri": format!("https://{host}:{port}/"), "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}})).await;
        assert_eq!(r.status, StatusCode::CREATED, "{host}: {:?}", r.body);
        let id = r.body["id"].as_str().unwrap_or_default().to_owned();
        let v = h
            .call(
                Method::POST,
                &format!("/v1/accounts/acme/integrations/{id}/validate"),
                Some(ACME),
                None,
                &[],
            )
            .await;
        assert!(connection_failed(&v), "{host}: {:?}", v.body);
        let l = h
            .get(
                &format!("/v1/accounts/acme/integrations/{id}/upstream/namespaces"),
                ACME,
            )
            .await;
        assert!(
            l.status.is_client_error() || l.status.is_server_error(),
            "{host}: {:?}",
            l.body
        );
    }
    // `localhost` in strict mode is refused at create.
    let r = h
        .post(
            "/v1/accounts/acme/integrations",
            ACME,
            integration_at(&format!("https://localhost:{port}/")),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    assert!(
        fx.log().entries().is_empty(),
        "the fixture was contacted: {:?}",
        fx.log().entries().len()
    );
    // Local mode may reach loopback, never the metadata address behind a name.
    let (h, _c) = ssrf_harness(true, &[("meta.internal.test", "169.254.169.254")]);
    h.account("acme").await;
    let r = h
        .post(
            "/v1/accounts/acme/integrations",
            ACME,
            integration_at("http://meta.internal.test/"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let id = r.body["id"].as_str().unwrap_or_default().to_owned();
    let v = h
        .call(
            Method::POST,
            &format!("/v1/accounts/acme/integrations/{id}/validate"),
            Some(ACME),
            None,
            &[],
        )
        .await;
    assert!(connection_failed(&v), "{:?}", v.body);
}

#[tokio::test]
async fn redirects_to_metadata_or_link_local_addresses_are_not_followed() {
    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://169.254.1.1/",
    ] {
        let fx = IcebergFixture::start_with_sample().await;
        let (h, _c) = ssrf_harness(true, &[]);
        h.account("acme").await;
        let r = h
            .post(
                "/v1/accounts/acme/integrations",
                ACME,
                integration_at(&fx.uri()),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
        let id = r.body["id"].as_str().unwrap_or_default().to_owned();
        fx.add_fault(IcebergFaultRule::always(IcebergFault::Redirect(
            target.to_owned(),
        )));
        let v = h
            .call(
                Method::POST,
                &format!("/v1/accounts/acme/integrations/{id}/validate"),
                Some(ACME),
                None,
                &[],
            )
            .await;
        assert_eq!(v.status, StatusCode::OK, "{:?}", v.body);
        assert_eq!(v.body["valid"], false, "{target}: {:?}", v.body);
        let l = h
            .get(
                &format!("/v1/accounts/acme/integrations/{id}/upstream/namespaces"),
                ACME,
            )
            .await;
        assert!(!l.status.is_success(), "{target}: {:?}", l.body);
        // Only the fixture saw requests; each answered the redirect and nothing followed it
        // (a followed redirect to a refused address would have needed a connection there).
        let entries = fx.log().entries();
        assert!(!entries.is_empty(), "the fixture saw the first hop");
        let text = v.body.to_string() + &l.body.to_string();
        assert!(!text.contains("meta-data"), "{text}");
    }
}

// ---- bodies and names ---------------------------------------------------------------------

async fn raw(h: &Harness, method: Method, path: &str, body: Vec<u8>) -> Resp {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {ACME}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_else(|e| panic!("request: {e}"));
    h.send(req).await
}

#[tokio::test]
async fn oversized_and_deeply_nested_bodies_are_refused_without_harm() {
    let h = Harness::redb();
    h.account("acme").await;
    let path = "/v1/accounts/acme/catalogs";
    let mut big = br#"{"display_name": "x", "description": ""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 1024 * 1024));
    big.extend_from_slice(br#""}"#);
    let r = raw(&h, Method::POST, path, big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{:?}", r.body);
    assert_eq!(r.code(), "PAYLOAD_TOO_LARGE");
    for depth in [65usize, 1_000, 200_000] {
        let mut deep = Vec::new();
        deep.extend(std::iter::repeat_n(b'[', depth));
        deep.extend(std::iter::repeat_n(b']', depth));
        let r = raw(&h, Method::POST, path, deep).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "depth {depth}: {:?}",
            r.body
        );
        let mut obj = br#"{"display_name": "x", "properties": "#.to_vec();
        obj.extend(std::iter::repeat_n(&b"{\"a\":"[..], depth).flatten());
        obj.extend_from_slice(b"1");
        obj.extend(std::iter::repeat_n(b'}', depth + 1));
        let r = raw(&h, Method::PATCH, "/v1/accounts/acme/catalogs/x", obj).await;
        assert!(
            r.status == StatusCode::BAD_REQUEST || r.status == StatusCode::PAYLOAD_TOO_LARGE,
            "depth {depth}: {:?}",
            r.body
        );
    }
    let r = h
        .post(path, ACME, json!({"display_name": "x", "unknown_field": 1}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h.get(path, ACME).await;
    assert_eq!(r.body["items"], json!([]), "nothing was created");
}

#[tokio::test]
async fn hostile_names_are_refused_and_unicode_forms_stay_distinct() {
    let h = Harness::redb();
    h.account("acme").await;
    let a = "/v1/accounts/acme";
    for bad in [
        "a\u{7}b",
        "tab\there",
        "new\nline",
        "\u{202E}evil",
        "rtl\u{200F}mark",
        "",
        &"x".repeat(10_000),
    ] {
        let r = h
            .post(&format!("{a}/catalogs"), ACME, json!({"display_name": bad}))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}: {:?}", r.body);
    }
    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    let c1 = h.catalog("acme", ACME, nfc).await;
    let c2 = h.catalog("acme", ACME, nfd).await;
    assert_ne!(c1, c2, "NFC and NFD are different names");
    let names: Vec<String> = h.get(&format!("{a}/catalogs"), ACME).await.body["items"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|i| i["display_name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        names.contains(&nfc.to_owned()) && names.contains(&nfd.to_owned()),
        "{names:?}"
    );
    // Namespace segments: the same rules, and NFC/NFD paths are distinct.
    h.namespace("acme", ACME, &c1, &[nfc]).await;
    h.namespace("acme", ACME, &c1, &[nfd]).await;
    for bad in [
        vec!["a\u{1F}b"],
        vec!["\u{202E}x"],
        vec!["ctl\u{1}"],
        vec![""],
        vec![&*"s".repeat(10_000)],
    ] {
        let r = h
            .post(
                &format!("{a}/catalogs/{c1}/namespaces"),
                ACME,
                json!({"path": bad}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}: {:?}", r.body);
    }
    // In URLs too: a control character or an overlong segment in the path is 400.
    for seg in ["a%07b", "%E2%80%AEx", &"s".repeat(5_000)] {
        let r = h
            .get(&format!("{a}/catalogs/{c1}/namespaces/{seg}"), ACME)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{seg}: {:?}", r.body);
    }
    let r = h
        .get(
            &format!("{a}/catalogs/{c1}/namespaces/{}", ns(&[nfd])),
            ACME,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["path"], json!([nfd]));
    // Operator-only routes refuse account principals.
    let r = h.get("/v1/accounts", ACME).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = h.get("/v1/admin/metrics", ACME).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = h.get("/v1/accounts", OPERATOR).await;
    assert_eq!(r.status, StatusCode::OK);
}
