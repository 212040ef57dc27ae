//! Routes of ParqDB index catalogs (docs/api.md "index-catalogs"). Merged into the one
//! router by `routes.rs`; the protocols live in `flotilla-parqdb`, reached through
//! [`flotilla_services::service::index_catalogs`].
//!
//! - Authorization is account-scoped like every `{A}` route.
//! - Namespaces in URL paths are one segment joined by `%1F`; names are checked with the
//!   same identifier rules as every other resource (exact code points, no control or
//!   bidirectional formatting characters).
//! - `Idempotency-Key` is accepted on the creates (index catalog, namespace, register): the
//!   success receipt is published in the crate's own transaction through its
//!   `TransactionGuard` hook ([`index_catalogs::create`]). It is refused
//!   (`400 IDEMPOTENCY_KEY_NOT_ALLOWED`) on commit and rename, which are conditional by
//!   themselves (compare-and-swap on `base`, absent destination): a retry that sees
//!   `COMMIT_CONFLICT` or `ALREADY_EXISTS` loads and compares; a write whose outcome is
//!   unknown is resolved by the service with a strongly consistent re-read. Drops need no key
//!   (a repeated drop is `404`).
//! - Page tokens of the crate are wrapped in the API's scoped tokens, so a token of one
//!   listing (another account, catalog or namespace) is `400` in every other.

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use flotilla_domain::names::{NamespacePath, validate_segment};
use flotilla_parqdb::catalog::IndexCatalogService;
use flotilla_parqdb::clock::rfc3339_from_ms as rfc3339;
use flotilla_parqdb::types::{
    CommitIndexRequest, CreateIndexCatalogRequest, CreateNamespaceRequest, IndexCatalog,
    IndexEntry, IndexIdentifier, Namespace, PageRequest, RegisterIndexRequest, RenameIndexRequest,
};
use serde::Serialize;
use serde_json::Value;

use super::extract::{
    Access, Action, CreateParams, IdempotencyKey, JsonBody, ListParams, P, Q, Scope, Securable,
    account_idempotency,
};
use super::{no_content, ok, recorded};
use crate::error::HttpResult;
use flotilla_base::error::{Error, ErrorKind, Result};
use flotilla_services::acl::Privilege;
use flotilla_services::service::OnConflict;
use flotilla_services::service::index_catalogs::{self, explain, service};
use flotilla_services::service::{decode_page_token, encode_page_token, page_body, page_size};
use flotilla_services::state::AppState;

const BASE: &str = "/v1/accounts/{account_id}/index-catalogs";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(BASE, post(create_catalog).get(list_catalogs))
        .route(&format!("{BASE}/{{name}}"), get(get_catalog))
        .route(
            &format!("{BASE}/{{name}}/namespaces"),
            post(create_namespace).get(list_namespaces),
        )
        .route(
            &format!("{BASE}/{{name}}/namespaces/{{ns}}"),
            axum::routing::delete(drop_namespace),
        )
        .route(
            &format!("{BASE}/{{name}}/namespaces/{{ns}}/indexes"),
            post(register).get(list_indexes),
        )
        .route(
            &format!("{BASE}/{{name}}/namespaces/{{ns}}/indexes/{{index}}"),
            get(load).delete(drop_index),
        )
        .route(
            &format!("{BASE}/{{name}}/namespaces/{{ns}}/indexes/{{index}}/commit"),
            post(commit),
        )
        .route(&format!("{BASE}/{{name}}/rename"), post(rename))
}

// ---- helpers --------------------------------------------------------------------------

/// Commit (a compare-and-swap on `base`) and rename are conditional by themselves; see the
/// module documentation.
fn refuse_idempotency_key(key: &Option<String>) -> Result<()> {
    match key {
        None => Ok(()),
        Some(_) => Err(Error::new(
            ErrorKind::IdempotencyKeyNotAllowed,
            "commit and rename are conditional by themselves (compare-and-swap on base, absent \
             destination): retry without an Idempotency-Key and load to compare",
        )),
    }
}

fn only_error_mode(params: &CreateParams) -> Result<()> {
    if params.on_conflict != OnConflict::Error {
        return Err(Error::invalid(
            "index catalog creates support on_conflict=error only",
        ));
    }
    Ok(())
}

fn name(what: &str, value: &str) -> Result<()> {
    Ok(validate_segment(what, value)?)
}

fn ns_path(segment: &str) -> Result<Vec<String>> {
    Ok(NamespacePath::from_url_segment(segment)?
        .segments()
        .to_vec())
}

fn check_namespace(path: &[String]) -> Result<()> {
    NamespacePath::new(path.to_vec())?;
    Ok(())
}

fn check_identifier(id: &IndexIdentifier) -> Result<()> {
    check_namespace(&id.namespace)?;
    name("index name", &id.name)
}

fn to_json<T: Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::internal(format!("encode: {e}")))
}

/// A listing's page request: the API's page size rules, and the crate's token unwrapped from
/// an API token bound to `scope`.
fn page_request(scope: &str, l: &ListParams) -> Result<PageRequest> {
    if l.parent.is_some() {
        return Err(Error::invalid(
            "parent does not apply to index catalog listings",
        ));
    }
    let page_token = match l.page_token.as_deref() {
        None => None,
        Some(t) => Some(decode_page_token(scope, "", t)?),
    };
    Ok(PageRequest {
        page_size: Some(page_size(l.page_size)?),
        page_token,
    })
}

/// `{"items": [...], "next_page_token": ...}` with the crate's token wrapped for `scope`.
fn page<T: Serialize>(scope: &str, items: &[T], next: Option<String>) -> HttpResult<Response> {
    let items = items.iter().map(to_json).collect::<Result<Vec<_>>>()?;
    Ok(ok(page_body(
        items,
        next.map(|t| encode_page_token(scope, &t)),
    )))
}

/// Runs one mutation in `account`, explaining a failed account guard (the crate reports it
/// as `NOT_FOUND`): `409 DELETING` while the account is being deleted, `404` without one.
async fn run<T>(
    state: &AppState,
    account: &str,
    f: impl AsyncFnOnce(&IndexCatalogService) -> Result<T, flotilla_parqdb::IndexCatalogError>,
) -> Result<T> {
    match f(&service(state)).await {
        Ok(v) => Ok(v),
        Err(e) => Err(explain(state, account, e).await),
    }
}

/// Runs one read. Reads carry no guard, so their `NOT_FOUND` is the crate's own (a missing
/// index catalog) and needs no explanation.
async fn read<T>(
    state: &AppState,
    f: impl AsyncFnOnce(&IndexCatalogService) -> Result<T, flotilla_parqdb::IndexCatalogError>,
) -> Result<T> {
    f(&service(state)).await.map_err(Error::from)
}

// ---- index catalogs -------------------------------------------------------------------

fn visible_index_catalog(access: &Access, c: &IndexCatalog) -> bool {
    access.visible(&Securable::index_catalog(&c.name))
}

async fn create_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<CreateIndexCatalogRequest>,
) -> HttpResult<Response> {
    access.authorize(
        Action::Create(Privilege::IndexCatalogCreate),
        &Securable::Account,
    )?;
    let a = access.account.clone();
    only_error_mode(&params)?;
    let idem = account_idempotency(&a, k, params.on_conflict, "index-catalogs", &body.canonical)?;
    let req = body.value;
    name("index catalog name", &req.name)?;
    let expected = |now| IndexCatalog {
        name: req.name.clone(),
        warehouse: req.warehouse.clone(),
        create_time: rfc3339(now),
        etag: "\"1\"".into(),
    };
    let created = index_catalogs::create(&state, &a, idem, expected, |s: IndexCatalogService| {
        let (a, req) = (a.clone(), req.clone());
        async move { s.create_index_catalog(&a, &req).await }
    });
    Ok(recorded(created.await?))
}

async fn list_catalogs(
    State(state): State<AppState>,
    Scope(access): Scope,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    let a = access.account.clone();
    let scope = format!("index-catalogs|{a}");
    let mut req = page_request(&scope, &l)?;
    let size = req.page_size.unwrap_or(1);
    // Only the index catalogs the caller may see, `size` of them: each further page asks for
    // exactly what is missing, so the listing stops on a page boundary of the crate's.
    let mut items = Vec::new();
    loop {
        let listed = read(&state, async |s| s.list_index_catalogs(&a, &req).await).await?;
        items.extend(
            listed
                .items
                .into_iter()
                .filter(|c| visible_index_catalog(&access, c)),
        );
        match listed.next_page_token {
            Some(t) if items.len() < size => {
                req.page_size = Some(size - items.len());
                req.page_token = Some(t);
            }
            next => return page(&scope, &items, next),
        }
    }
}

async fn get_catalog(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Describe, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    name("index catalog name", &c)?;
    let catalog = read(&state, async |s| s.get_index_catalog(&a, &c).await).await?;
    Ok(ok(to_json(&catalog)?))
}

// ---- namespaces -----------------------------------------------------------------------

async fn create_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    Q(params): Q<CreateParams>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<CreateNamespaceRequest>,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    only_error_mode(&params)?;
    name("index catalog name", &c)?;
    let route = format!("index-namespaces/{c}");
    let idem = account_idempotency(&a, k, params.on_conflict, &route, &body.canonical)?;
    let req = body.value;
    check_namespace(&req.path)?;
    let expected = |now| Namespace {
        path: req.path.clone(),
        create_time: rfc3339(now),
    };
    let created = index_catalogs::create(&state, &a, idem, expected, |s: IndexCatalogService| {
        let (a, c, req) = (a.clone(), c.clone(), req.clone());
        async move { s.create_namespace(&a, &c, &req).await }
    });
    Ok(recorded(created.await?))
}

async fn list_namespaces(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    access.authorize(Action::Read, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    name("index catalog name", &c)?;
    let scope = format!("index-namespaces|{a}|{c}");
    let req = page_request(&scope, &l)?;
    let listed = read(&state, async |s| s.list_namespaces(&a, &c, &req).await).await?;
    page(&scope, &listed.items, listed.next_page_token)
}

async fn drop_namespace(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    name("index catalog name", &c)?;
    let path = ns_path(&ns)?;
    run(&state, &a, async |s| s.drop_namespace(&a, &c, &path).await).await?;
    Ok(no_content())
}

// ---- indexes --------------------------------------------------------------------------

async fn register(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<RegisterIndexRequest>,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    name("index catalog name", &c)?;
    let namespace = ns_path(&ns)?;
    let route = format!("indexes/{c}/{ns}");
    let idem = account_idempotency(&a, k, OnConflict::Error, &route, &body.canonical)?;
    let req = body.value;
    name("index name", &req.name)?;
    let expected = |_| IndexEntry {
        identifier: IndexIdentifier {
            namespace: namespace.clone(),
            name: req.name.clone(),
        },
        metadata_location: req.metadata_location.clone(),
        source: req.source.clone(),
    };
    let created = index_catalogs::create(&state, &a, idem, expected, |s: IndexCatalogService| {
        let (a, c, namespace, req) = (a.clone(), c.clone(), namespace.clone(), req.clone());
        async move { s.register(&a, &c, &namespace, &req).await }
    });
    Ok(recorded(created.await?))
}

async fn list_indexes(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns)): P<(String, String, String)>,
    Q(l): Q<ListParams>,
) -> HttpResult<Response> {
    access.authorize(Action::Read, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    name("index catalog name", &c)?;
    let namespace = ns_path(&ns)?;
    let scope = format!("indexes|{a}|{c}|{ns}");
    let req = page_request(&scope, &l)?;
    let listed = read(&state, async |s| s.list(&a, &c, &namespace, &req).await).await?;
    page(&scope, &listed.items, listed.next_page_token)
}

type IndexPath = P<(String, String, String, String)>;

fn identifier(c: &str, ns: &str, index: &str) -> Result<IndexIdentifier> {
    name("index catalog name", c)?;
    let id = IndexIdentifier {
        namespace: ns_path(ns)?,
        name: index.to_owned(),
    };
    check_identifier(&id)?;
    Ok(id)
}

async fn load(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns, i)): IndexPath,
) -> HttpResult<Response> {
    access.authorize(Action::Read, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    let id = identifier(&c, &ns, &i)?;
    let entry = read(&state, async |s| s.load(&a, &c, &id).await).await?;
    Ok(ok(to_json(&entry)?))
}

async fn drop_index(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns, i)): IndexPath,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    let id = identifier(&c, &ns, &i)?;
    run(&state, &a, async |s| s.drop(&a, &c, &id).await).await?;
    Ok(no_content())
}

async fn commit(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c, ns, i)): IndexPath,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<CommitIndexRequest>,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    refuse_idempotency_key(&k)?;
    let id = identifier(&c, &ns, &i)?;
    let req = body.value;
    let entry = run(&state, &a, async |s| s.commit(&a, &c, &id, &req).await).await?;
    Ok(ok(to_json(&entry)?))
}

async fn rename(
    State(state): State<AppState>,
    Scope(access): Scope,
    P((_, c)): P<(String, String)>,
    IdempotencyKey(k): IdempotencyKey,
    body: JsonBody<RenameIndexRequest>,
) -> HttpResult<Response> {
    access.authorize(Action::Write, &Securable::index_catalog(&c))?;
    let a = access.account.clone();
    refuse_idempotency_key(&k)?;
    name("index catalog name", &c)?;
    let req = body.value;
    check_identifier(&req.source)?;
    check_identifier(&req.destination)?;
    run(&state, &a, async |s| s.rename(&a, &c, &req).await).await?;
    Ok(no_content())
}
