//! The authorization matrix: every route of `/v1` (the served OpenAPI document) and of the
//! Iceberg endpoint (its `endpoints` list, config and token routes) answered for six
//! callers, from one table ([`rows`]), on redb and on DynamoDB (moto).
//!
//! The callers: an account admin (a named principal holding `ACCOUNT_ADMIN`), a reader
//! (`READ` on the catalog and the index catalog), a writer (`WRITE` on both), an
//! integration user (`INTEGRATION_CREATE`, `MANAGE` on one integration and its overlay),
//! another account's admin (a token of account `beta` naming no principal) and a named
//! principal with no grant. A cell says what the route answers that caller:
//! - `O`: authorized (whatever the route then answers: the requests are built so that an
//!   authorized one changes nothing, e.g. a stale `If-Match` or a duplicate name);
//! - `D`: `403` (`PERMISSION_DENIED`, Iceberg `ForbiddenException`);
//! - `H`: `404`, as if the object did not exist;
//! - `U`: `401`.
//!
//! `every_served_route_has_a_matrix_row` fails when a route is added to the document or the
//! Iceberg `endpoints` list without a row here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use flotilla_core::auth::{StaticTokens, TokenSigner};
use flotilla_core::clock::SystemClock;
use flotilla_core::state::{AppState, Config};
use flotilla_iceberg_rest::IcebergConfig;
use flotilla_metastore::DynMetastore;
use flotilla_testkit::iceberg_fixture::IcebergFixture;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const OPERATOR: &str = "matrix-operator-token";
const ADMIN: &str = "matrix-admin-token";
const READER: &str = "matrix-reader-token";
const WRITER: &str = "matrix-writer-token";
const INTEGRATOR: &str = "matrix-integrator-token";
const OTHER: &str = "matrix-other-admin-token";
const NOGRANT: &str = "matrix-nogrant-token";

/// The six callers, in the order of a row's cells.
const CALLERS: [(&str, &str); 6] = [
    ("account admin", ADMIN),
    ("reader", READER),
    ("writer", WRITER),
    ("integration user", INTEGRATOR),
    ("another account's admin", OTHER),
    ("no grant", NOGRANT),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum E {
    O,
    D,
    H,
    U,
}
use E::{D, H, O, U};

#[derive(Clone, Copy, Debug)]
enum Setup {
    None,
    /// Index namespace `tmp` exists (dropped by the row).
    IndexNamespace,
    /// Index `tmp` exists in namespace `n`.
    Index,
    /// Role `spare` has member `x`.
    Member,
    /// Iceberg table `tmp` exists in `ns1`.
    IcebergTable,
    /// Iceberg view `tmpv` exists in `ns1`.
    IcebergView,
}

struct Row {
    method: &'static str,
    /// The route as served: the OpenAPI path, or `/iceberg` + the Iceberg endpoint.
    route: &'static str,
    /// The request URI; `{c}`, `{i}`, `{o}`, `{g}`, `{p}` and `{x}` are the fixture's catalog,
    /// integration, overlay, grant, service principal and Iceberg prefix.
    uri: &'static str,
    body: Option<&'static str>,
    /// Sends `If-Match` with a stale etag (an authorized write then answers `412`).
    stale: bool,
    /// Form body (the token routes).
    form: bool,
    setup: Setup,
    expect: [E; 6],
}

const fn row(method: &'static str, route: &'static str, uri: &'static str, expect: [E; 6]) -> Row {
    Row {
        method,
        route,
        uri,
        body: None,
        stale: false,
        form: false,
        setup: Setup::None,
        expect,
    }
}

impl Row {
    const fn body(mut self, b: &'static str) -> Self {
        self.body = Some(b);
        self
    }
    const fn stale(mut self) -> Self {
        self.stale = true;
        self
    }
    const fn form(mut self, b: &'static str) -> Self {
        self.body = Some(b);
        self.form = true;
        self
    }
    const fn setup(mut self, s: Setup) -> Self {
        self.setup = s;
        self
    }
}

const A: &str = "/v1/accounts/{account_id}";

// Cells: admin, reader, writer, integration user, other account's admin, no grant.
const ALL_OK: [E; 6] = [O, O, O, O, O, O];
const OPERATOR_ONLY: [E; 6] = [D, D, D, D, D, D];
const IN_ACCOUNT: [E; 6] = [O, O, O, O, D, O];
const ADMIN_ONLY: [E; 6] = [O, D, D, D, D, D];
const CATALOG_SEE: [E; 6] = [O, O, O, H, D, H];
const CATALOG_WRITE: [E; 6] = [O, D, O, H, D, H];
const CATALOG_MANAGE: [E; 6] = [O, D, D, H, D, H];
const INTEGRATION_MANAGE: [E; 6] = [O, H, H, O, D, H];
const CREATE_INTEGRATION: [E; 6] = [O, D, D, O, D, D];

fn rows() -> Vec<Row> {
    let c = "/v1/accounts/acme/catalogs/{c}";
    let _ = c;
    vec![
        // ---- deployment and accounts
        row("GET", "/v1/health", "/v1/health", ALL_OK),
        row("GET", "/v1/openapi.json", "/v1/openapi.json", ALL_OK),
        row("GET", "/v1/whoami", "/v1/whoami", ALL_OK),
        row("POST", "/v1/oauth/tokens", "/v1/oauth/tokens", [U; 6])
            .form("grant_type=client_credentials&client_id=acme.nobody&client_secret=nope"),
        row("GET", "/v1/admin/metrics", "/v1/admin/metrics", OPERATOR_ONLY),
        row("POST", "/v1/admin/catalog-finalize", "/v1/admin/catalog-finalize", OPERATOR_ONLY).body("{}"),
        row("POST", "/v1/admin/sweep-credentials", "/v1/admin/sweep-credentials", OPERATOR_ONLY)
            .body(r#"{"account_id": "acme"}"#),
        row("POST", "/v1/accounts", "/v1/accounts", OPERATOR_ONLY).body(r#"{"id": "acme"}"#),
        row("GET", "/v1/accounts", "/v1/accounts", OPERATOR_ONLY),
        row("GET", A, "/v1/accounts/acme", IN_ACCOUNT),
        row("DELETE", A, "/v1/accounts/acme", OPERATOR_ONLY).stale(),
        // ---- catalogs, namespaces, tables, views
        row("POST", "/v1/accounts/{account_id}/catalogs", "/v1/accounts/acme/catalogs", ADMIN_ONLY)
            .body(r#"{"display_name": "lake"}"#),
        row("GET", "/v1/accounts/{account_id}/catalogs", "/v1/accounts/acme/catalogs", IN_ACCOUNT),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}", "/v1/accounts/acme/catalogs/{c}", CATALOG_SEE),
        row("PATCH", "/v1/accounts/{account_id}/catalogs/{catalog_id}", "/v1/accounts/acme/catalogs/{c}", CATALOG_MANAGE)
            .body(r#"{"description": "x"}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/catalogs/{catalog_id}", "/v1/accounts/acme/catalogs/{c}", CATALOG_MANAGE).stale(),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/directory", "/v1/accounts/acme/catalogs/{c}/directory", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/validation-errors", "/v1/accounts/acme/catalogs/{c}/validation-errors", CATALOG_SEE),
        row("POST", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces", "/v1/accounts/acme/catalogs/{c}/namespaces", CATALOG_WRITE)
            .body(r#"{"path": ["ns1"]}"#),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces", "/v1/accounts/acme/catalogs/{c}/namespaces", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1", CATALOG_SEE),
        row("PATCH", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1", CATALOG_MANAGE)
            .body(r#"{"properties": {}}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1", CATALOG_WRITE).stale(),
        row("POST", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables", CATALOG_WRITE)
            .body(r#"{"name": "t1", "schema": {"type": "struct", "fields": []}, "format": "ICEBERG"}"#),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables/t1", CATALOG_SEE),
        row("PATCH", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables/t1", CATALOG_WRITE)
            .body(r#"{"properties": {}}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables/t1", CATALOG_WRITE).stale(),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/validation", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables/t1/validation", CATALOG_SEE),
        row("PUT", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/tables/{name}/visibility", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables/t1/visibility", CATALOG_MANAGE)
            .body(r#"{"override": false}"#),
        row("POST", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/views", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/views", CATALOG_WRITE)
            .body(r#"{"name": "v1", "schema": {"type": "struct", "fields": []}, "definitions": [{"dialect": "spark", "sql": "SELECT 1"}]}"#),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/views", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/views", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/views/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/views/v1", CATALOG_SEE),
        row("PATCH", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/views/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/views/v1", CATALOG_WRITE)
            .body(r#"{"properties": {}}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/catalogs/{catalog_id}/namespaces/{ns}/views/{name}", "/v1/accounts/acme/catalogs/{c}/namespaces/ns1/views/v1", CATALOG_WRITE).stale(),
        // ---- integrations and overlays
        row("POST", "/v1/accounts/{account_id}/integrations", "/v1/accounts/acme/integrations", CREATE_INTEGRATION)
            .body(r#"{"display_name": "up", "type": "ICEBERG_REST", "uri": "{upstream}", "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}}"#),
        row("GET", "/v1/accounts/{account_id}/integrations", "/v1/accounts/acme/integrations", IN_ACCOUNT),
        row("GET", "/v1/accounts/{account_id}/integrations/{integration_id}", "/v1/accounts/acme/integrations/{i}", INTEGRATION_MANAGE),
        row("PATCH", "/v1/accounts/{account_id}/integrations/{integration_id}", "/v1/accounts/acme/integrations/{i}", INTEGRATION_MANAGE)
            .body(r#"{"display_name": "up"}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/integrations/{integration_id}", "/v1/accounts/acme/integrations/{i}", INTEGRATION_MANAGE).stale(),
        row("PUT", "/v1/accounts/{account_id}/integrations/{integration_id}/authentication", "/v1/accounts/acme/integrations/{i}/authentication", INTEGRATION_MANAGE)
            .body(r#"{"credentials": {"token": "t2"}}"#).stale(),
        row("POST", "/v1/accounts/{account_id}/integrations/{integration_id}/validate", "/v1/accounts/acme/integrations/{i}/validate", INTEGRATION_MANAGE),
        row("GET", "/v1/accounts/{account_id}/integrations/{integration_id}/upstream/namespaces", "/v1/accounts/acme/integrations/{i}/upstream/namespaces", INTEGRATION_MANAGE),
        row("GET", "/v1/accounts/{account_id}/integrations/{integration_id}/upstream/objects", "/v1/accounts/acme/integrations/{i}/upstream/objects?namespace=sales", INTEGRATION_MANAGE),
        // An overlay needs USE on its integration and WRITE on its catalog.
        row("POST", "/v1/accounts/{account_id}/overlays", "/v1/accounts/acme/overlays", [O, H, H, H, D, H])
            .body(r#"{"display_name": "imp", "integration_id": "{i}", "catalog_id": "{c}", "include_namespaces": [["sales"]]}"#),
        row("GET", "/v1/accounts/{account_id}/overlays", "/v1/accounts/acme/overlays", IN_ACCOUNT),
        row("GET", "/v1/accounts/{account_id}/overlays/{overlay_id}", "/v1/accounts/acme/overlays/{o}", INTEGRATION_MANAGE),
        row("PATCH", "/v1/accounts/{account_id}/overlays/{overlay_id}", "/v1/accounts/acme/overlays/{o}", INTEGRATION_MANAGE)
            .body(r#"{"paused": false}"#).stale(),
        row("DELETE", "/v1/accounts/{account_id}/overlays/{overlay_id}", "/v1/accounts/acme/overlays/{o}", INTEGRATION_MANAGE).stale(),
        row("POST", "/v1/accounts/{account_id}/overlays/{overlay_id}/reconcile", "/v1/accounts/acme/overlays/{o}/reconcile", INTEGRATION_MANAGE),
        row("POST", "/v1/accounts/{account_id}/overlays/{overlay_id}/capture", "/v1/accounts/acme/overlays/{o}/capture", INTEGRATION_MANAGE),
        // ---- index catalogs
        row("POST", "/v1/accounts/{account_id}/index-catalogs", "/v1/accounts/acme/index-catalogs", ADMIN_ONLY)
            .body(r#"{"name": "ix", "warehouse": "{ixwh}"}"#),
        row("GET", "/v1/accounts/{account_id}/index-catalogs", "/v1/accounts/acme/index-catalogs", IN_ACCOUNT),
        row("GET", "/v1/accounts/{account_id}/index-catalogs/{name}", "/v1/accounts/acme/index-catalogs/ix", CATALOG_SEE),
        row("POST", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces", "/v1/accounts/acme/index-catalogs/ix/namespaces", CATALOG_WRITE)
            .body(r#"{"path": ["n"]}"#),
        row("GET", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces", "/v1/accounts/acme/index-catalogs/ix/namespaces", CATALOG_SEE),
        row("DELETE", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}", "/v1/accounts/acme/index-catalogs/ix/namespaces/tmp", CATALOG_WRITE)
            .setup(Setup::IndexNamespace),
        row("POST", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}/indexes", "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes", CATALOG_WRITE)
            .body(r#"{"name": "idx1", "metadata_location": "{ixloc}", "source": {"type": "PARQUET", "uri": "s3://lake/docs/"}}"#),
        row("GET", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}/indexes", "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}/indexes/{index}", "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes/idx1", CATALOG_SEE),
        row("DELETE", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}/indexes/{index}", "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes/tmp", CATALOG_WRITE)
            .setup(Setup::Index),
        row("POST", "/v1/accounts/{account_id}/index-catalogs/{name}/namespaces/{ns}/indexes/{index}/commit", "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes/idx1/commit", CATALOG_WRITE)
            .body(r#"{"source": {"type": "PARQUET", "uri": "s3://lake/docs/"}, "base": "{ixloc2}", "new": "{ixloc2}"}"#),
        row("POST", "/v1/accounts/{account_id}/index-catalogs/{name}/rename", "/v1/accounts/acme/index-catalogs/ix/rename", CATALOG_WRITE)
            .body(r#"{"source": {"namespace": ["n"], "name": "idx1"}, "destination": {"namespace": ["n"], "name": "idx2"}}"#),
        // ---- access control
        row("POST", "/v1/accounts/{account_id}/principals", "/v1/accounts/acme/principals", ADMIN_ONLY)
            .body(r#"{"name": "svc"}"#),
        row("GET", "/v1/accounts/{account_id}/principals", "/v1/accounts/acme/principals", ADMIN_ONLY),
        row("GET", "/v1/accounts/{account_id}/principals/{principal_id}", "/v1/accounts/acme/principals/{p}", ADMIN_ONLY),
        row("DELETE", "/v1/accounts/{account_id}/principals/{principal_id}", "/v1/accounts/acme/principals/{p}", ADMIN_ONLY).stale(),
        row("POST", "/v1/accounts/{account_id}/principals/{principal_id}/rotate", "/v1/accounts/acme/principals/{p}/rotate", ADMIN_ONLY).stale(),
        row("POST", "/v1/accounts/{account_id}/roles", "/v1/accounts/acme/roles", ADMIN_ONLY).body(r#"{"name": "spare"}"#),
        row("GET", "/v1/accounts/{account_id}/roles", "/v1/accounts/acme/roles", ADMIN_ONLY),
        row("GET", "/v1/accounts/{account_id}/roles/{role}", "/v1/accounts/acme/roles/spare", ADMIN_ONLY),
        row("DELETE", "/v1/accounts/{account_id}/roles/{role}", "/v1/accounts/acme/roles/spare", ADMIN_ONLY).stale(),
        row("PUT", "/v1/accounts/{account_id}/roles/{role}/members/{member}", "/v1/accounts/acme/roles/spare/members/y", ADMIN_ONLY),
        row("DELETE", "/v1/accounts/{account_id}/roles/{role}/members/{member}", "/v1/accounts/acme/roles/spare/members/x", ADMIN_ONLY)
            .setup(Setup::Member),
        // Granting needs MANAGE on the securable: the reader and the writer see the catalog.
        row("POST", "/v1/accounts/{account_id}/grants", "/v1/accounts/acme/grants", CATALOG_MANAGE)
            .body(r#"{"role": "readers", "privilege": "READ", "securable": {"type": "CATALOG", "catalog_id": "{c}"}}"#),
        row("GET", "/v1/accounts/{account_id}/grants", "/v1/accounts/acme/grants", IN_ACCOUNT),
        row("GET", "/v1/accounts/{account_id}/grants/{grant_id}", "/v1/accounts/acme/grants/{g}", [O, H, H, H, D, H]),
        row("DELETE", "/v1/accounts/{account_id}/grants/{grant_id}", "/v1/accounts/acme/grants/{g}", [O, H, H, H, D, H]).stale(),
        row("GET", "/v1/accounts/{account_id}/privileges", "/v1/accounts/acme/privileges?securable_type=CATALOG&catalog_id={c}", CATALOG_SEE),
        // Events: the catalog's feed, filtered to what the reader may read.
        row("GET", "/v1/accounts/{account_id}/events", "/v1/accounts/acme/events?catalog_id={c}", CATALOG_SEE),
        row("GET", "/v1/accounts/{account_id}/audit", "/v1/accounts/acme/audit", ADMIN_ONLY),
        // Event sinks: account admins only. This host delivers none, so an admin's create is
        // answered 409, and no sink exists, so an admin's read or delete of one is 404; every
        // other caller is refused before the lookup.
        row("POST", "/v1/accounts/{account_id}/event-sinks", "/v1/accounts/acme/event-sinks", ADMIN_ONLY)
            .body(r#"{"url": "http://127.0.0.1:9/hook", "secret": "matrix-sink-secret-01"}"#),
        row("GET", "/v1/accounts/{account_id}/event-sinks", "/v1/accounts/acme/event-sinks", ADMIN_ONLY),
        row("GET", "/v1/accounts/{account_id}/event-sinks/{sink_id}", "/v1/accounts/acme/event-sinks/0190eeeeeeeeeeeeeeeeeeeeeeeeee01", [H, D, D, D, D, D]),
        row("DELETE", "/v1/accounts/{account_id}/event-sinks/{sink_id}", "/v1/accounts/acme/event-sinks/0190eeeeeeeeeeeeeeeeeeeeeeeeee01", [H, D, D, D, D, D]),
        // ---- the Iceberg endpoint
        row("GET", "/iceberg/v1/config", "/iceberg/v1/config?warehouse=acme/lake", CATALOG_SEE),
        row("POST", "/iceberg/v1/oauth/tokens", "/iceberg/v1/oauth/tokens", [U; 6])
            .form("grant_type=client_credentials&client_id=acme.nobody&client_secret=nope"),
        row("GET", "/iceberg/v1/{prefix}/namespaces", "/iceberg/v1/{x}/namespaces", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces", "/iceberg/v1/{x}/namespaces", CATALOG_WRITE)
            .body(r#"{"namespace": ["ns1"]}"#),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}", "/iceberg/v1/{x}/namespaces/ns1", CATALOG_SEE),
        row("HEAD", "/iceberg/v1/{prefix}/namespaces/{namespace}", "/iceberg/v1/{x}/namespaces/ns1", CATALOG_SEE),
        row("DELETE", "/iceberg/v1/{prefix}/namespaces/{namespace}", "/iceberg/v1/{x}/namespaces/ns1", CATALOG_WRITE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/properties", "/iceberg/v1/{x}/namespaces/ns1/properties", CATALOG_MANAGE)
            .body(r#"{"removals": [], "updates": {}}"#),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables", "/iceberg/v1/{x}/namespaces/ns1/tables", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables", "/iceberg/v1/{x}/namespaces/ns1/tables", CATALOG_WRITE)
            .body(r#"{"name": "t1", "schema": {"type": "struct", "schema-id": 0, "fields": []}}"#),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}", "/iceberg/v1/{x}/namespaces/ns1/tables/t1", CATALOG_SEE),
        row("HEAD", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}", "/iceberg/v1/{x}/namespaces/ns1/tables/t1", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}", "/iceberg/v1/{x}/namespaces/ns1/tables/t1", CATALOG_WRITE)
            .body(r#"{"requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}], "updates": []}"#),
        row("DELETE", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}", "/iceberg/v1/{x}/namespaces/ns1/tables/tmp", CATALOG_WRITE)
            .setup(Setup::IcebergTable),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials", "/iceberg/v1/{x}/namespaces/ns1/tables/t1/credentials", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/register", "/iceberg/v1/{x}/namespaces/ns1/register", CATALOG_WRITE)
            .body(r#"{"name": "t1", "metadata-location": "{meta}"}"#),
        row("POST", "/iceberg/v1/{prefix}/tables/rename", "/iceberg/v1/{x}/tables/rename", CATALOG_WRITE)
            .body(r#"{"source": {"namespace": ["ns1"], "name": "t1"}, "destination": {"namespace": ["ns1"], "name": "t2"}}"#),
        row("POST", "/iceberg/v1/{prefix}/transactions/commit", "/iceberg/v1/{x}/transactions/commit", CATALOG_WRITE)
            .body(r#"{"table-changes": [{"identifier": {"namespace": ["ns1"], "name": "t1"}, "requirements": [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}], "updates": []}]}"#),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/views", "/iceberg/v1/{x}/namespaces/ns1/views", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/views", "/iceberg/v1/{x}/namespaces/ns1/views", CATALOG_WRITE)
            .body(VIEW_BODY_V1),
        row("GET", "/iceberg/v1/{prefix}/namespaces/{namespace}/views/{view}", "/iceberg/v1/{x}/namespaces/ns1/views/v1", CATALOG_SEE),
        row("HEAD", "/iceberg/v1/{prefix}/namespaces/{namespace}/views/{view}", "/iceberg/v1/{x}/namespaces/ns1/views/v1", CATALOG_SEE),
        row("POST", "/iceberg/v1/{prefix}/namespaces/{namespace}/views/{view}", "/iceberg/v1/{x}/namespaces/ns1/views/v1", CATALOG_WRITE)
            .body(r#"{"requirements": [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}], "updates": []}"#),
        row("DELETE", "/iceberg/v1/{prefix}/namespaces/{namespace}/views/{view}", "/iceberg/v1/{x}/namespaces/ns1/views/tmpv", CATALOG_WRITE)
            .setup(Setup::IcebergView),
        row("POST", "/iceberg/v1/{prefix}/views/rename", "/iceberg/v1/{x}/views/rename", CATALOG_WRITE)
            .body(r#"{"source": {"namespace": ["ns1"], "name": "v1"}, "destination": {"namespace": ["ns1"], "name": "t2"}}"#),
        row("POST", "/iceberg/v1/{prefix}/events", "/iceberg/v1/{x}/events", CATALOG_SEE)
            .body(r#"{"page-size": 10}"#),
    ]
}

const VIEW_BODY_V1: &str = r#"{"name": "v1", "schema": {"type": "struct", "schema-id": 0, "fields": []}, "view-version": {"version-id": 1, "schema-id": 0, "timestamp-ms": 1700000000000, "summary": {"engine-name": "test"}, "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}], "default-namespace": ["ns1"]}, "properties": {}}"#;

// ---- the environment -------------------------------------------------------------------

struct Env {
    app: Router,
    state: AppState,
    vars: BTreeMap<&'static str, String>,
    _upstream: IcebergFixture,
    _dir: tempfile::TempDir,
}

struct NoQueue;

#[async_trait::async_trait]
impl flotilla_core::state::WorkSender for NoQueue {
    async fn send_bodies(&self, _bodies: &[String]) -> flotilla_core::error::Result<()> {
        Ok(())
    }
}

fn tokens() -> StaticTokens {
    let mut t = StaticTokens::new();
    t.add(OPERATOR, true, vec![]);
    let acme = || vec!["acme".to_owned()];
    t.add_named(ADMIN, acme(), "alice", vec![]);
    t.add_named(READER, acme(), "rita", vec![]);
    t.add_named(WRITER, acme(), "walt", vec!["writers-group".into()]);
    t.add_named(INTEGRATOR, acme(), "ivan", vec![]);
    t.add_named(NOGRANT, acme(), "nora", vec![]);
    t.add(OTHER, false, vec!["beta".into()]);
    t
}

async fn send(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<String>,
    form: bool,
    if_match: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(m) = if_match {
        req = req.header(header::IF_MATCH, m);
    }
    let req = match body {
        Some(b) => req
            .header(
                header::CONTENT_TYPE,
                if form {
                    "application/x-www-form-urlencoded"
                } else {
                    "application/json"
                },
            )
            .body(Body::from(b))
            .unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, v)
}

impl Env {
    async fn new(store: DynMetastore) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("warehouse");
        std::fs::create_dir_all(&root).unwrap();
        let policy = flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
        let (creds, _) =
            flotilla_secrets::local::LocalEncryptedStore::open(&dir.path().join("secrets"))
                .unwrap();
        let state = AppState::new(
            store,
            Arc::new(SystemClock),
            Arc::new(tokens()),
            Config {
                allow_insecure_upstreams: true,
                ..Config::default()
            },
        )
        .with_index_stores(flotilla_core::service::index_catalogs::local_warehouse_stores(policy))
        .with_credentials(Arc::new(creds))
        .with_token_signer(Arc::new(TokenSigner::random()))
        .with_work_sender(Arc::new(NoQueue))
        // The matrix sends more wrong secrets of one client than the token routes' limiter
        // admits from one address (tests/oauth_limit.rs tests the limiter itself).
        .with_token_limits(flotilla_services::token_limit::TokenLimits {
            per_client_and_source: 1_000,
            per_source: 1_000,
            per_client: 1_000,
            ..Default::default()
        });
        let app = flotilla_iceberg_rest::router(
            state.clone(),
            IcebergConfig {
                local_warehouse_root: Some(root.clone()),
                ..Default::default()
            },
        );
        let upstream = IcebergFixture::start_with_sample().await;
        let mut env = Env {
            app,
            state,
            vars: BTreeMap::new(),
            _upstream: upstream,
            _dir: dir,
        };
        env.vars.insert("upstream", env._upstream.uri());
        env.fixture(&root).await;
        env
    }

    fn fill(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (k, v) in &self.vars {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    }

    /// A call as the operator that must succeed.
    async fn op(&self, method: &str, uri: &str, body: Option<Value>) -> Value {
        let (s, v) = send(
            &self.app,
            method,
            &self.fill(uri),
            Some(OPERATOR),
            body.map(|b| self.fill(&b.to_string())),
            false,
            None,
        )
        .await;
        assert!(s.is_success(), "{method} {uri}: {s} {v}");
        v
    }

    async fn fixture(&mut self, root: &std::path::Path) {
        for a in ["acme", "beta"] {
            self.op("POST", "/v1/accounts", Some(json!({"id": a})))
                .await;
        }
        let c = self
            .op(
                "POST",
                "/v1/accounts/acme/catalogs",
                Some(json!({"display_name": "lake"})),
            )
            .await;
        self.vars.insert("c", c["id"].as_str().unwrap().to_owned());
        let cfg = self
            .op("GET", "/iceberg/v1/config?warehouse=acme/lake", None)
            .await;
        self.vars
            .insert("x", cfg["overrides"]["prefix"].as_str().unwrap().to_owned());
        self.op(
            "POST",
            "/iceberg/v1/{x}/namespaces",
            Some(json!({"namespace": ["ns1"]})),
        )
        .await;
        let t1 = self.iceberg_table("t1").await;
        self.vars
            .insert("meta", t1["metadata-location"].as_str().unwrap().to_owned());
        self.iceberg_table("t2").await;
        self.op(
            "POST",
            "/iceberg/v1/{x}/namespaces/ns1/views",
            Some(serde_json::from_str(VIEW_BODY_V1).unwrap()),
        )
        .await;
        let i = self
            .op(
                "POST",
                "/v1/accounts/acme/integrations",
                Some(
                    json!({"display_name": "up", "type": "ICEBERG_REST", "uri": "{upstream}",
                    "authentication": {"type": "BEARER"}, "credentials": {"token": "t"}}),
                ),
            )
            .await;
        self.vars.insert("i", i["id"].as_str().unwrap().to_owned());
        let o = self
            .op(
                "POST",
                "/v1/accounts/acme/overlays",
                Some(
                    json!({"display_name": "imp", "integration_id": "{i}", "catalog_id": "{c}",
                    "include_namespaces": [["sales"]]}),
                ),
            )
            .await;
        self.vars.insert("o", o["id"].as_str().unwrap().to_owned());
        // An index catalog with namespace `n` and indexes `idx1`, `idx2`.
        // In acme's own home: every other first directory spelt like an account id is
        // reserved for that account.
        let wh = root.join("acme").join("ix");
        std::fs::create_dir_all(&wh).unwrap();
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../parqdb/fixtures/v1");
        for (name, rel) in [
            ("ixloc", "valid/metadata.json"),
            ("ixloc2", "valid/lvq4/metadata.json"),
        ] {
            let to = wh.join(format!("{name}.json"));
            std::fs::copy(fixtures.join(rel), &to).unwrap();
            self.vars.insert(name, format!("file://{}", to.display()));
        }
        self.vars
            .insert("ixwh", format!("file://{}/", wh.display()));
        self.op(
            "POST",
            "/v1/accounts/acme/index-catalogs",
            Some(json!({"name": "ix", "warehouse": "{ixwh}"})),
        )
        .await;
        self.op(
            "POST",
            "/v1/accounts/acme/index-catalogs/ix/namespaces",
            Some(json!({"path": ["n"]})),
        )
        .await;
        for (name, loc) in [("idx1", "{ixloc}"), ("idx2", "{ixloc2}")] {
            self.op(
                "POST",
                "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes",
                Some(json!({"name": name, "metadata_location": loc, "source": {"type": "PARQUET", "uri": "s3://lake/docs/"}})),
            )
            .await;
        }
        // Roles, members and grants.
        for (role, members) in [
            ("admins", vec!["alice"]),
            ("readers", vec!["rita"]),
            ("writers", vec!["group:writers-group"]),
            ("integrators", vec!["ivan"]),
            ("spare", vec![]),
        ] {
            self.op(
                "POST",
                "/v1/accounts/acme/roles",
                Some(json!({"name": role})),
            )
            .await;
            for m in members {
                self.op(
                    "PUT",
                    &format!("/v1/accounts/acme/roles/{role}/members/{m}"),
                    None,
                )
                .await;
            }
        }
        let grant = |role: &str, privilege: &str, securable: Value| json!({"role": role, "privilege": privilege, "securable": securable});
        let catalog = json!({"type": "CATALOG", "catalog_id": "{c}"});
        let ix = json!({"type": "INDEX_CATALOG", "name": "ix"});
        let g = self
            .op(
                "POST",
                "/v1/accounts/acme/grants",
                Some(grant("readers", "READ", catalog.clone())),
            )
            .await;
        self.vars.insert("g", g["id"].as_str().unwrap().to_owned());
        for body in [
            grant("admins", "ACCOUNT_ADMIN", json!({"type": "ACCOUNT"})),
            grant("readers", "READ", ix.clone()),
            grant("writers", "WRITE", catalog.clone()),
            grant("writers", "WRITE", ix.clone()),
            grant(
                "integrators",
                "INTEGRATION_CREATE",
                json!({"type": "ACCOUNT"}),
            ),
            grant(
                "integrators",
                "MANAGE",
                json!({"type": "INTEGRATION", "integration_id": "{i}"}),
            ),
            grant(
                "integrators",
                "MANAGE",
                json!({"type": "OVERLAY", "overlay_id": "{o}"}),
            ),
        ] {
            self.op("POST", "/v1/accounts/acme/grants", Some(body))
                .await;
        }
        let p = self
            .op(
                "POST",
                "/v1/accounts/acme/principals",
                Some(json!({"name": "svc"})),
            )
            .await;
        self.vars.insert("p", p["id"].as_str().unwrap().to_owned());
    }

    async fn iceberg_table(&self, name: &str) -> Value {
        self.op(
            "POST",
            "/iceberg/v1/{x}/namespaces/ns1/tables",
            Some(
                json!({"name": name, "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"}]}}),
            ),
        )
        .await
    }

    async fn setup(&self, s: Setup) {
        let idx = |name: &str| json!({"name": name, "metadata_location": "{ixloc}", "source": {"type": "PARQUET", "uri": "s3://lake/docs/"}});
        match s {
            Setup::None => {}
            Setup::IndexNamespace => {
                let _ = self
                    .try_op(
                        "POST",
                        "/v1/accounts/acme/index-catalogs/ix/namespaces",
                        json!({"path": ["tmp"]}),
                    )
                    .await;
            }
            Setup::Index => {
                let _ = self
                    .try_op(
                        "POST",
                        "/v1/accounts/acme/index-catalogs/ix/namespaces/n/indexes",
                        idx("tmp"),
                    )
                    .await;
            }
            Setup::Member => {
                self.op("PUT", "/v1/accounts/acme/roles/spare/members/x", None)
                    .await;
            }
            Setup::IcebergTable => {
                let _ = self
                    .try_op("POST", "/iceberg/v1/{x}/namespaces/ns1/tables", json!({"name": "tmp", "schema": {"type": "struct", "schema-id": 0, "fields": []}}))
                    .await;
            }
            Setup::IcebergView => {
                let mut v: Value = serde_json::from_str(VIEW_BODY_V1).unwrap();
                v["name"] = json!("tmpv");
                let _ = self
                    .try_op("POST", "/iceberg/v1/{x}/namespaces/ns1/views", v)
                    .await;
            }
        }
    }

    /// An operator call that may find its object already there (a setup repeated).
    async fn try_op(&self, method: &str, uri: &str, body: Value) -> StatusCode {
        send(
            &self.app,
            method,
            &self.fill(uri),
            Some(OPERATOR),
            Some(self.fill(&body.to_string())),
            false,
            None,
        )
        .await
        .0
    }
}

fn judged(status: StatusCode) -> E {
    match status.as_u16() {
        401 => U,
        403 => D,
        404 => H,
        _ => O,
    }
}

async fn run_matrix(env: &Env) {
    let mut failures = Vec::new();
    for r in rows() {
        for (i, (who, token)) in CALLERS.iter().enumerate() {
            env.setup(r.setup).await;
            let uri = env.fill(r.uri);
            let body = r.body.map(|b| env.fill(b));
            let stale = r.stale.then_some("\"stale-etag\"");
            let (status, v) =
                send(&env.app, r.method, &uri, Some(token), body, r.form, stale).await;
            let got = judged(status);
            let want = r.expect[i];
            let shape_ok = match (got, r.route.starts_with("/iceberg"), r.method) {
                // HEAD answers carry no body.
                (_, _, "HEAD") => true,
                (D, true, _) => v["error"]["type"] == "ForbiddenException",
                (D, false, _) => v["error"]["code"] == "PERMISSION_DENIED",
                (H, false, _) => v["error"]["code"]
                    .as_str()
                    .is_some_and(|c| c.ends_with("NOT_FOUND")),
                _ => true,
            };
            if got != want || !shape_ok || status.is_server_error() {
                failures.push(format!(
                    "{} {} as {who}: expected {want:?}, got {status} {v}",
                    r.method, r.route
                ));
            }
        }
    }
    // Nothing the refused callers sent changed the fixture: the catalog still holds its
    // tables and the roles their grants.
    let (s, v) = send(
        &env.app,
        "GET",
        &env.fill("/v1/accounts/acme/catalogs/{c}/namespaces/ns1/tables"),
        Some(OPERATOR),
        None,
        false,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        failures.is_empty(),
        "{} cells differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = &env.state;
}

#[tokio::test]
async fn authorization_matrix_on_redb() {
    let store = Arc::new(flotilla_metastore::redb_store::RedbMetastore::in_memory().unwrap());
    let env = Env::new(store).await;
    run_matrix(&env).await;
}

#[tokio::test]
async fn authorization_matrix_on_dynamodb() {
    let endpoint = flotilla_testkit::moto::endpoint();
    let client = flotilla_metastore::dynamo::connect(Some(&endpoint)).await;
    let table = flotilla_testkit::moto::unique_name("acl");
    flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, &table)
        .await
        .unwrap();
    let store = Arc::new(flotilla_metastore::dynamo::DynamoMetastore::new(
        client, table,
    ));
    let env = Env::new(store).await;
    run_matrix(&env).await;
}

/// Every operation of the served OpenAPI document and every route of the Iceberg endpoint
/// (its `endpoints` list, the config and the token route) has exactly one row, and every row
/// names a served route.
#[tokio::test]
async fn every_served_route_has_a_matrix_row() {
    let store = Arc::new(flotilla_metastore::redb_store::RedbMetastore::in_memory().unwrap());
    let state = AppState::new(
        store,
        Arc::new(SystemClock),
        Arc::new(StaticTokens::new()),
        Config::default(),
    );
    let app = flotilla_iceberg_rest::router(state, IcebergConfig::default());
    let (s, doc) = send(&app, "GET", "/v1/openapi.json", None, None, false, None).await;
    assert_eq!(s, StatusCode::OK);
    let mut served = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "put", "post", "delete", "patch", "head"].contains(&method.as_str()) {
                served.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    for e in flotilla_iceberg_rest::ENDPOINTS {
        let (method, path) = e.split_once(' ').unwrap();
        served.insert((method.to_owned(), format!("/iceberg{path}")));
    }
    served.insert(("GET".into(), "/iceberg/v1/config".into()));
    served.insert(("POST".into(), "/iceberg/v1/oauth/tokens".into()));
    let mut covered = BTreeSet::new();
    for r in rows() {
        assert!(
            covered.insert((r.method.to_owned(), r.route.to_owned())),
            "two rows for {} {}",
            r.method,
            r.route
        );
    }
    let missing: Vec<_> = served.difference(&covered).collect();
    let unknown: Vec<_> = covered.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "routes without a row in the authorization matrix: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "rows naming no served route: {unknown:?}"
    );
}
