//! Resolving a request to a catalog: the caller (same principals as `/v1`), the `prefix`
//! (`<account>.<catalog id>`), the catalog's warehouse and its object store. Also `config`,
//! the one route outside any prefix besides the OAuth2 token exchange (`oauth.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use flotilla_base::error::ErrorKind;
use flotilla_domain::keys;
use flotilla_domain::model::{CatalogRecord, NameIndexRecord};
use flotilla_domain::names::NamespacePath;
use flotilla_http::extract::Auth;
use flotilla_metastore::Consistency;
use flotilla_parqdb::location::Warehouse;
use flotilla_services::acl::{Access, Action, Securable};
use flotilla_services::auth::Principal;
use flotilla_services::service::{catalogs, read};
use flotilla_services::state::AppState;
use object_store::ObjectStore;
use serde::Deserialize;
use serde_json::json;

use crate::error::{IcebergError, IcebergResult, Missing};
use crate::vending::Vending;

/// Host settings of the endpoint.
#[derive(Clone, Default)]
pub struct IcebergConfig {
    /// `flotilla serve`: where catalogs without a `warehouse` property keep their tables
    /// (`file://<root>/<account>/<catalog id>/`). `None` on AWS, where a catalog needs the
    /// property.
    pub local_warehouse_root: Option<PathBuf>,
    /// Temporary storage credentials for `s3://` warehouses (STS `AssumeRole`), when the
    /// deployment configured a role.
    pub vending: Option<Arc<dyn Vending>>,
    /// Warehouse tenant-prefix claims this process has confirmed (`(account, prefix)`): a
    /// claim is only ever released with its account, so a confirmed one is not read again.
    pub confirmed_claims: Arc<std::sync::Mutex<std::collections::HashSet<(String, String)>>>,
    /// Who answers the OAuth2 token route (`oauth.rs`): the host itself by default.
    pub token_exchange: crate::oauth::TokenExchange,
    /// The memory all metadata loads of the process hold at once (`budget.rs`): default
    /// [`crate::budget::DEFAULT_LOAD_BUDGET_BYTES`], waits bounded by the read deadline.
    pub load_budget: crate::budget::LoadBudget,
}

impl std::fmt::Debug for IcebergConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergConfig")
            .field("local_warehouse_root", &self.local_warehouse_root)
            .field("vending", &self.vending.is_some())
            .field("token_exchange", &self.token_exchange)
            .field("load_budget", &self.load_budget.bytes())
            .finish()
    }
}

/// The caller, answered in the Iceberg error shape when missing.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = IcebergError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Auth::from_request_parts(parts, state)
            .await
            .map(|Auth(p)| Caller(p))
            .map_err(|_| IcebergError::unauthenticated())
    }
}

/// A catalog the caller may use, with its warehouse.
pub struct Ctx {
    pub state: AppState,
    pub config: Arc<IcebergConfig>,
    /// The caller and what its grants allow in the catalog's account.
    pub access: Access,
    pub account: String,
    pub catalog: CatalogRecord,
    pub warehouse: Warehouse,
}

impl Ctx {
    /// Resolves `<account>.<catalog id>` for `principal`. Another account's principal, and
    /// one that may not see the catalog, is refused before anything of the catalog is read.
    pub async fn resolve(
        state: &AppState,
        config: &Arc<IcebergConfig>,
        principal: Principal,
        prefix: &str,
    ) -> IcebergResult<Ctx> {
        let (access, catalog_id) = access_for_prefix(state, principal, prefix).await?;
        let account = access.account.clone();
        let account = account.as_str();
        let catalog = catalogs::load(state.store.as_ref(), account, catalog_id)
            .await
            .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?
            .value;
        let warehouse = resolve_warehouse(config, &catalog)?;
        if catalog.properties.contains_key("warehouse") {
            claim_warehouse(state, config, account, &warehouse).await?;
        }
        Ok(Ctx {
            state: state.clone(),
            config: config.clone(),
            access,
            account: account.to_owned(),
            catalog,
            warehouse,
        })
    }

    /// The one decision ([`Access::authorize`]) in this endpoint's answers: `403
    /// ForbiddenException` when the caller may see the object, else exactly what this
    /// endpoint answers when it does not exist (a missing namespace above a table answers
    /// as a missing namespace, as for a table that does not exist).
    pub fn authorize(&self, action: Action, on: &Securable) -> IcebergResult<()> {
        if self.access.allows(action, on) {
            return Ok(());
        }
        if self.access.visible(on) {
            return Err(IcebergError::from_api(
                self.access.refusal(action, on),
                Missing::Catalog,
            ));
        }
        Err(self.absent(on))
    }

    /// Whether `action` on `on` is allowed (listing filters, credential scope).
    pub fn allows(&self, action: Action, on: &Securable) -> bool {
        self.access.allows(action, on)
    }

    /// The not-found answer of this endpoint for `on`, at the highest level the caller may
    /// not see.
    fn absent(&self, on: &Securable) -> IcebergError {
        let ns = |p: &[String]| NamespacePath::new(p.to_vec()).ok();
        match on {
            Securable::Table { path, name, .. } | Securable::View { path, name, .. } => {
                let parent = Securable::Namespace {
                    catalog_id: self.catalog.id.clone(),
                    path: path.clone(),
                };
                if !self.access.visible(&parent) {
                    return self.absent(&parent);
                }
                let shown = ns(path).map(|p| p.to_string()).unwrap_or_default();
                match on {
                    Securable::View { .. } => IcebergError::no_such(
                        Missing::View,
                        format!("view {shown}.{name} not found"),
                    ),
                    _ => IcebergError::no_such(
                        Missing::Table,
                        format!("table {shown}.{name} not found"),
                    ),
                }
            }
            Securable::Namespace { path, .. } => match ns(path) {
                Some(p) => {
                    IcebergError::no_such(Missing::Namespace, format!("namespace {p} not found"))
                }
                None => IcebergError::no_such(Missing::Namespace, "namespace not found"),
            },
            other => IcebergError::from_api(other.absent(), Missing::Catalog),
        }
    }

    pub fn catalog_id(&self) -> &str {
        &self.catalog.id
    }

    pub fn prefix(&self) -> String {
        prefix_of(&self.account, &self.catalog.id)
    }

    /// The object store rooted at the catalog's warehouse.
    pub fn store(&self) -> IcebergResult<Arc<dyn ObjectStore>> {
        self.state
            .index_stores
            .open(&self.warehouse)
            .map_err(IcebergError::unavailable)
    }

    /// The warehouse-relative object path of `location`, refusing anything outside the
    /// catalog's warehouse: the endpoint never reads or writes elsewhere.
    pub fn object_path(&self, location: &str) -> IcebergResult<object_store::path::Path> {
        let rel = self
            .warehouse
            .relative_of(location)
            .map_err(|e| IcebergError::bad_request(e.0))?;
        object_store::path::Path::parse(&rel)
            .map_err(|e| IcebergError::bad_request(format!("invalid location: {e}")))
    }

    /// Whether `location` (a directory) lies inside the catalog's warehouse.
    pub fn owns_location(&self, location: &str) -> bool {
        let dir = location.trim_end_matches('/');
        dir.len() > self.warehouse.as_str().len()
            && dir.starts_with(self.warehouse.as_str())
            && !dir.contains("/../")
            && !dir.ends_with("/..")
    }
}

/// The caller's access in the account of `<account>.<catalog id>`, refused (as an unknown
/// prefix) unless it may see the catalog; nothing of the catalog is read.
pub async fn access_for_prefix<'a>(
    state: &AppState,
    principal: Principal,
    prefix: &'a str,
) -> IcebergResult<(Access, &'a str)> {
    let (account, catalog_id) = authorize_prefix(&principal, prefix)?;
    let scope = principal
        .authorize_account(account)
        .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?;
    let access = Access::resolve(state.store.as_ref(), &state.acl, scope)
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?;
    access
        .authorize(Action::Describe, &Securable::catalog(catalog_id))
        .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?;
    Ok((access, catalog_id))
}

/// Splits `<account>.<catalog id>` and checks the principal may act in that account,
/// before anything of the catalog is read.
pub fn authorize_prefix<'a>(
    principal: &Principal,
    prefix: &'a str,
) -> IcebergResult<(&'a str, &'a str)> {
    let (account, catalog_id) = prefix
        .split_once('.')
        .ok_or_else(|| IcebergError::no_such(Missing::Catalog, "unknown catalog prefix"))?;
    principal
        .authorize_account(account)
        .map_err(|e| match e.kind {
            ErrorKind::NotFound => {
                IcebergError::no_such(Missing::Catalog, "unknown catalog prefix")
            }
            _ => IcebergError::from_api(e, Missing::Catalog),
        })?;
    Ok((account, catalog_id))
}

pub fn prefix_of(account: &str, catalog_id: &str) -> String {
    format!("{account}.{catalog_id}")
}

/// The one rule that decides where a catalog's Iceberg tables live: the catalog's
/// `warehouse` property, else (on `flotilla serve`) a directory of the host's data dir per
/// account and catalog. Deployment rules on which warehouses a tenant may name belong here.
pub fn resolve_warehouse(
    config: &IcebergConfig,
    catalog: &CatalogRecord,
) -> IcebergResult<Warehouse> {
    let root = config
        .local_warehouse_root
        .as_ref()
        .map(|r| r.to_string_lossy().into_owned());
    let Some(uri) = catalog.warehouse_uri(root.as_deref()) else {
        return Err(IcebergError::bad_request(
            "this catalog has no \"warehouse\" property; set one (s3://bucket/prefix) to use the Iceberg endpoint",
        ));
    };
    Warehouse::parse(&uri).map_err(|e| {
        IcebergError::bad_request(format!("the catalog's warehouse is not usable: {}", e.0))
    })
}

/// Binds the tenant prefix of a catalog's own `warehouse` property to the catalog's
/// account, the same claim ParqDB index catalogs make (`flotilla_parqdb::warehouse`): the
/// first account to use a prefix holds it, and the endpoint refuses (`403`) to serve any other
/// account's catalog whose warehouse lies in it, so two accounts never share table files
/// or credentials. The claim is made on the catalog's first use through this endpoint (the
/// only door that writes to that warehouse), with an absence condition, so of two accounts
/// racing for one prefix exactly one wins. Host-assigned warehouses (no property) are per
/// account and catalog already and claim nothing.
pub async fn claim_warehouse(
    state: &AppState,
    config: &IcebergConfig,
    account: &str,
    warehouse: &Warehouse,
) -> IcebergResult<()> {
    use flotilla_parqdb::error::IndexCatalogError as E;
    let policy = state.index_stores.policy();
    let prefix = policy
        .tenant_prefix(warehouse)
        .map_err(|e| IcebergError::bad_request(format!("the catalog's warehouse: {}", e.0)))?;
    let confirmed = (account.to_owned(), prefix);
    if config
        .confirmed_claims
        .lock()
        .is_ok_and(|c| c.contains(&confirmed))
    {
        return Ok(());
    }
    let map = |e: E| match e {
        E::WarehouseNotAllowed { message } => IcebergError::forbidden(message),
        E::InvalidArgument { message } => IcebergError::bad_request(message),
        other => IcebergError::unavailable(other),
    };
    let store = state.store.as_ref();
    let mut done = false;
    for _ in 0..2 {
        let ops = flotilla_parqdb::warehouse::claim_ops(store, policy, account, warehouse)
            .await
            .map_err(map)?;
        let mut tx = flotilla_metastore::Transaction::new();
        for op in ops {
            tx.push(op);
        }
        match store.transact(tx).await {
            Ok(()) => {
                done = true;
                break;
            }
            // Another account (or a concurrent request of ours) wrote the claim: re-read.
            Err(flotilla_metastore::MetastoreError::ConditionFailed { .. }) => continue,
            Err(e) => return Err(IcebergError::unavailable(e)),
        }
    }
    if !done {
        // Two lost races: whoever holds it now decides.
        if let Some(e) =
            flotilla_parqdb::warehouse::claimed_by_other(store, policy, account, warehouse)
                .await
                .map_err(map)?
        {
            return Err(map(e));
        }
    }
    if let Ok(mut c) = config.confirmed_claims.lock() {
        c.insert(confirmed);
    }
    Ok(())
}

// ---- paging ---------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
pub struct PageParams {
    #[serde(rename = "pageToken", default)]
    pub page_token: Option<String>,
    #[serde(rename = "pageSize", default)]
    pub page_size: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
}

impl PageParams {
    pub fn size(&self) -> IcebergResult<usize> {
        let requested =
            match self.page_size.as_deref() {
                None | Some("") => None,
                Some(s) => Some(s.parse::<usize>().map_err(|_| {
                    IcebergError::bad_request("pageSize must be a positive integer")
                })?),
            };
        flotilla_services::service::page_size(requested)
            .map_err(|e| IcebergError::from_api(e, Missing::Catalog))
    }

    pub fn token(&self) -> Option<&str> {
        self.page_token.as_deref().filter(|t| !t.is_empty())
    }
}

pub fn ns_from_segment(segment: &str) -> IcebergResult<NamespacePath> {
    NamespacePath::from_url_segment(segment).map_err(|e| IcebergError::bad_request(e.0))
}

pub fn ns_from_parts(parts: Vec<String>) -> IcebergResult<NamespacePath> {
    NamespacePath::new(parts).map_err(|e| IcebergError::bad_request(e.0))
}

// ---- config ---------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
pub struct ConfigParams {
    #[serde(default)]
    pub warehouse: Option<String>,
}

/// `GET /iceberg/v1/config?warehouse=<account>/<catalog name or id>`.
pub async fn get_config(
    State(state): State<AppState>,
    Extension(config): Extension<Arc<IcebergConfig>>,
    Caller(p): Caller,
    Query(q): Query<ConfigParams>,
) -> IcebergResult<Response> {
    let w = q.warehouse.filter(|w| !w.is_empty()).ok_or_else(|| {
        IcebergError::bad_request("give warehouse=<account>/<catalog name> in the config request")
    })?;
    let unknown = || IcebergError::no_such(Missing::Catalog, format!("no warehouse {w:?}"));
    let (account, name) = w.split_once('/').ok_or_else(unknown)?;
    let scope = p.authorize_account(account).map_err(|e| match e.kind {
        ErrorKind::NotFound => unknown(),
        _ => IcebergError::from_api(e, Missing::Catalog),
    })?;
    let access = Access::resolve(state.store.as_ref(), &state.acl, scope)
        .await
        .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?;
    let store = state.store.as_ref();
    // A catalog id, else a display name.
    let by_id = catalogs::load(store, account, name).await.ok();
    let catalog = match by_id {
        Some(c) => c.value,
        None => {
            let idx = read::<NameIndexRecord>(
                store,
                keys::catalog_name(account, name),
                Consistency::Strong,
            )
            .await
            .map_err(|e| IcebergError::from_api(e, Missing::Catalog))?
            .ok_or_else(unknown)?;
            catalogs::load(store, account, &idx.value.id)
                .await
                .map_err(|_| unknown())?
                .value
        }
    };
    // A catalog the caller may not see is an unknown warehouse, by id or by name alike.
    if !access.allows(Action::Describe, &Securable::catalog(&catalog.id)) {
        return Err(unknown());
    }
    // A catalog whose warehouse is unusable is reported now rather than at the first write.
    let wh = resolve_warehouse(&config, &catalog)?;
    if catalog.properties.contains_key("warehouse") {
        claim_warehouse(&state, &config, account, &wh).await?;
    }
    let mut overrides = BTreeMap::new();
    // An S3-compatible endpoint (moto, MinIO) is an override, as real catalogs answer it.
    if wh.as_str().starts_with("s3://")
        && let Some(v) = &config.vending
    {
        overrides.extend(v.client_config());
    }
    overrides.insert("prefix".to_owned(), prefix_of(account, &catalog.id));
    Ok(Json(json!({
        "defaults": {"warehouse": wh.as_str().trim_end_matches('/')},
        "overrides": overrides,
        "endpoints": crate::ENDPOINTS,
    }))
    .into_response())
}

// ---- OAuth2 token exchange ------------------------------------------------------------
