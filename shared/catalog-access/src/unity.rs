//! Unity Catalog (OSS REST API) provider.
//!
//! The integration URI is either the server root (`https://host`) or the REST base
//! (`https://host/api/2.1/unity-catalog`); the base path is appended when missing. Unity
//! accepts only OAuth client credentials or bearer authentication; other schemes fail at
//! connect with `Unsupported`.
//!
//! # Namespace model
//!
//! Unity's three-level name `catalog.schema.table` maps to a two-level namespace
//! `[catalog, schema]` holding tables: `list_namespaces(None)` lists catalogs,
//! `list_namespaces([catalog])` lists its schemas, and a schema has no child namespaces.
//! Setting the connection property [`UNITY_CATALOG`] pins one catalog: namespaces are then
//! one level, `[schema]`, and no other catalog is reachable through the integration. Unity
//! names cannot contain `.` (it separates the levels of a full name), so such a level is
//! refused rather than guessed at.
//!
//! # Tables
//!
//! Table info maps to [`TableMetadata`]: columns (Spark `type_json`, else `type_name` with
//! precision and scale) become an Iceberg-style schema, `data_source_format` the format,
//! `storage_location` the location, and `table_id` the stable identity. Without `table_id`
//! (some backends omit it) the identity is unstable and credentials cannot be vended (Unity
//! vends by table id). Views (`VIEW`, `METRIC_VIEW`) are not listed as tables and cannot be
//! loaded as tables: this provider does not support Unity views yet and says so.
//!
//! # Credentials
//!
//! `POST /temporary-table-credentials {"table_id", "operation": "READ"}` vends short-lived
//! storage credentials, cached per table and renewed near their `expiration_time`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::{Value, json};
use url::Url;

use crate::common::{
    VendCache, check_fresh_and_scoped, convert_primitive, dedup, epoch_ms, list_field, names,
    next_token, optional_str, required_str, secret_part, spark_fields_to_iceberg,
};
use crate::error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
use crate::http::{HttpClient, HttpResponse, RetryMode, classify_status};
use crate::spi::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogConnectionConfig,
    CatalogProtocol, Clock, ConnectOptions, LoadTableOutcome, Page, ResolvedCatalogCredentials,
    SecretString, StorageCredential, TableFormat, TableIdent, TableMetadata, UpstreamNamespace,
    VendedCredentials, is_secret_key,
};

/// Connection property pinning the integration to one Unity catalog (one-level namespaces).
pub const UNITY_CATALOG: &str = "unity.catalog";

/// REST base path of the Unity Catalog OSS API.
pub const API_BASE_PATH: &str = "/api/2.1/unity-catalog";

/// The OpenAPI caps `max_results` at 1000 for catalogs and schemas, 50 for tables.
const MAX_LIST_RESULTS: u32 = 1000;
const MAX_TABLE_RESULTS: u32 = 50;

/// Table types that are views, not tables.
const VIEW_TYPES: &[&str] = &["VIEW", "METRIC_VIEW"];

/// An OAuth access token is refreshed this long before its stated expiry (or at half its
/// lifetime when that is shorter).
const TOKEN_REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// The Unity Catalog [`CatalogClientProvider`].
#[derive(Debug, Clone, Copy, Default)]
pub struct UnityProvider;

crate::spi::client_provider!(UnityProvider, CatalogProtocol::Unity, UnityClient::connect);

/// How the client authenticates to the catalog API.
enum Auth {
    Bearer(SecretString),
    OAuth(Box<OAuthClient>),
}

/// OAuth2 client-credentials token source: one token request at a time (the async mutex is
/// held across the request), refreshed before expiry and after a 401.
struct OAuthClient {
    token_uri: Url,
    client_id: String,
    client_secret: SecretString,
    scopes: Vec<String>,
    cached: tokio::sync::Mutex<Option<CachedToken>>,
}

struct CachedToken {
    token: SecretString,
    refresh_at: Option<SystemTime>,
}

impl OAuthClient {
    /// A current access token. `stale` is a token the catalog just refused: if it is still
    /// the cached one it is replaced; if another task already replaced it, the new one is
    /// used without a second token request.
    async fn token(
        &self,
        http: &HttpClient,
        clock: &dyn Clock,
        stale: Option<&SecretString>,
    ) -> Result<SecretString> {
        let mut cached = self.cached.lock().await;
        let now = clock.now();
        if let Some(c) = cached.as_ref() {
            let refused = stale.is_some_and(|s| *s == c.token);
            let due = c.refresh_at.is_some_and(|at| at <= now);
            if !refused && !due {
                return Ok(c.token.clone());
            }
        }
        let fresh = self.fetch(http, now).await?;
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(token)
    }

    async fn fetch(&self, http: &HttpClient, now: SystemTime) -> Result<CachedToken> {
        let mut form: Vec<(&str, String)> = vec![("grant_type", "client_credentials".into())];
        if !self.scopes.is_empty() {
            form.push(("scope", self.scopes.join(" ")));
        }
        // Client authentication with HTTP Basic, which RFC 6749 §2.3.1 requires every
        // authorization server to support (id and secret form-urlencoded first).
        let req = http
            .request(reqwest::Method::POST, self.token_uri.clone())
            .basic_auth(
                form_encode(&self.client_id),
                Some(form_encode(self.client_secret.expose())),
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .build()
            .map_err(|e| {
                CatalogAccessError::config(format!(
                    "cannot build token request: {}",
                    e.without_url()
                ))
            })?;
        let endpoint = endpoint_label(&self.token_uri);
        let resp = http
            .execute(req, RetryMode::Once)
            .await
            .map_err(|e| match e {
                CatalogAccessError::Connection(d) => CatalogAccessError::Connection(
                    BoundedText::ours(&format!("OAuth token endpoint {endpoint}: {d}")),
                ),
                CatalogAccessError::Retryable { status, detail } => CatalogAccessError::Retryable {
                    status,
                    detail: BoundedText::ours(&format!(
                        "OAuth token endpoint {endpoint}: {detail}"
                    )),
                },
                other => other,
            })?;
        if resp.status != 200 {
            return Err(token_status_error(&endpoint, &resp));
        }
        let v = resp
            .json_value()
            .map_err(|e| token_answer_error(&endpoint, e))?;
        let token = match v.get("access_token") {
            Some(Value::String(t)) if !t.is_empty() => SecretString::new(t.clone()),
            _ => {
                return Err(token_answer_error(
                    &endpoint,
                    CatalogAccessError::protocol("access_token", "is missing or empty"),
                ));
            }
        };
        if let Some(tt) = v.get("token_type").and_then(Value::as_str)
            && !tt.eq_ignore_ascii_case("bearer")
        {
            return Err(token_answer_error(
                &endpoint,
                CatalogAccessError::protocol(
                    "token_type",
                    "only bearer access tokens are supported",
                ),
            ));
        }
        let refresh_at = match v.get("expires_in") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let secs = n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64));
                secs.map(|s| {
                    let life = Duration::from_secs(s);
                    let early = life.saturating_sub(TOKEN_REFRESH_MARGIN).max(life / 2);
                    now + early
                })
            }
            Some(Value::String(s)) => s.trim().parse::<u64>().ok().map(|s| {
                let life = Duration::from_secs(s);
                now + life.saturating_sub(TOKEN_REFRESH_MARGIN).max(life / 2)
            }),
            Some(_) => {
                return Err(token_answer_error(
                    &endpoint,
                    CatalogAccessError::protocol("expires_in", "expected a number of seconds"),
                ));
            }
        };
        Ok(CachedToken { token, refresh_at })
    }
}

/// `scheme://host[:port]/path` of a URL: what an error may say about an endpoint (no user
/// information, no query).
fn endpoint_label(url: &Url) -> String {
    let mut label = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        label.push_str(&format!(":{port}"));
    }
    label.push_str(url.path());
    label
}

/// A token endpoint's refusal. Whatever the status, the integration cannot authenticate:
/// an authentication failure naming the endpoint and the status, except transient statuses
/// (408, 429, 5xx), which stay retryable.
fn token_status_error(endpoint: &str, resp: &HttpResponse) -> CatalogAccessError {
    let said = resp.upstream_message();
    let said = if said.as_str().trim().is_empty() {
        "no error message".to_owned()
    } else {
        format!("\"{said}\"")
    };
    let detail = BoundedText::ours(&format!(
        "OAuth token endpoint {endpoint} answered HTTP {} to the client-credentials request \
         ({said})",
        resp.status
    ));
    match resp.status {
        429 | 503 if resp.retry_after.is_some() => CatalogAccessError::Throttled {
            status: resp.status,
            retry_after: resp
                .retry_after
                .unwrap_or_default()
                .min(crate::http::MAX_RETRY_AFTER_HINT),
            detail,
        },
        408 | 429 | 500..=599 => CatalogAccessError::Retryable {
            status: Some(resp.status),
            detail,
        },
        status => CatalogAccessError::Authentication {
            status: Some(status),
            detail,
        },
    }
}

/// A token answer that cannot be used: an authentication failure (no token, no access)
/// naming the endpoint and the offending field.
fn token_answer_error(endpoint: &str, e: CatalogAccessError) -> CatalogAccessError {
    let what = match &e {
        CatalogAccessError::Protocol { field, detail } => format!("`{field}` {detail}"),
        other => other.to_string(),
    };
    CatalogAccessError::Authentication {
        status: None,
        detail: BoundedText::ours(&format!(
            "OAuth token endpoint {endpoint} answered unusably: {what}"
        )),
    }
}

/// `application/x-www-form-urlencoded` encoding of one component (for Basic credentials).
fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A connected Unity Catalog client.
pub struct UnityClient {
    base: Url,
    http: HttpClient,
    auth: Auth,
    pinned_catalog: Option<String>,
    extra_headers: Vec<(String, String)>,
    clock: Arc<dyn Clock>,
    vended: VendCache,
}

impl fmt::Debug for UnityClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::Bearer(_) => "BEARER",
            Auth::OAuth(_) => "OAUTH_CLIENT_CREDENTIALS",
        };
        f.debug_struct("UnityClient")
            .field("base", &self.base.as_str())
            .field("auth", &auth)
            .field("pinned_catalog", &self.pinned_catalog)
            .finish_non_exhaustive()
    }
}

/// The table info fields the provider uses.
struct TableInfo {
    name: String,
    table_type: Option<String>,
    format: Option<String>,
    location: Option<String>,
    table_id: Option<String>,
    schema: Value,
    properties: BTreeMap<String, String>,
}

impl UnityClient {
    /// Validates the configuration and authentication and builds a client; no I/O.
    pub fn connect(
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Self> {
        let mut base = config.base_url()?;
        let path = base.path().trim_end_matches('/').to_owned();
        if !path.ends_with(API_BASE_PATH) {
            base.set_path(&format!("{path}{API_BASE_PATH}"));
        }
        let auth = match (auth, credentials) {
            (CatalogAuthentication::Bearer, ResolvedCatalogCredentials::Token(t))
                if !t.is_empty() =>
            {
                Auth::Bearer(t)
            }
            (CatalogAuthentication::Bearer, _) => {
                return Err(CatalogAccessError::config(
                    "Unity bearer authentication needs a non-empty TOKEN credential",
                ));
            }
            (
                CatalogAuthentication::OauthClientCredentials {
                    token_uri,
                    client_id,
                    scopes,
                },
                ResolvedCatalogCredentials::ClientSecret(secret),
            ) if !secret.is_empty() => {
                let token_uri = Url::parse(token_uri.trim())
                    .map_err(|_| CatalogAccessError::config("OAuth token_uri is not a URL"))?;
                if !matches!(token_uri.scheme(), "http" | "https") {
                    return Err(CatalogAccessError::config(
                        "OAuth token_uri must be http or https",
                    ));
                }
                if client_id.trim().is_empty() {
                    return Err(CatalogAccessError::config("OAuth client_id is empty"));
                }
                Auth::OAuth(Box::new(OAuthClient {
                    token_uri,
                    client_id: client_id.clone(),
                    client_secret: secret,
                    scopes: scopes.clone(),
                    cached: tokio::sync::Mutex::new(None),
                }))
            }
            (CatalogAuthentication::OauthClientCredentials { .. }, _) => {
                return Err(CatalogAccessError::config(
                    "Unity OAuth client credentials need a non-empty CLIENT_SECRET credential",
                ));
            }
            (other, _) => {
                return Err(CatalogAccessError::unsupported(format!(
                    "Unity accepts only OAuth client credentials or bearer authentication, \
                     not {}",
                    other.scheme_name()
                )));
            }
        };
        let pinned_catalog = match config.property(UNITY_CATALOG).map(str::trim) {
            None => None,
            Some("") => {
                return Err(CatalogAccessError::config(format!(
                    "property `{UNITY_CATALOG}` is empty"
                )));
            }
            Some(c) if c.contains('.') => {
                return Err(CatalogAccessError::config(format!(
                    "property `{UNITY_CATALOG}` must be a single catalog name (no `.`)"
                )));
            }
            Some(c) => Some(c.to_owned()),
        };
        let extra_headers = config
            .extra_headers()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok(Self {
            base,
            http: HttpClient::new(options.http.clone())?.for_protocol(CatalogProtocol::Unity),
            auth,
            pinned_catalog,
            extra_headers,
            clock: options.clock.clone(),
            vended: VendCache::default(),
        })
    }

    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Url> {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().map_err(|()| {
                CatalogAccessError::config("the Unity endpoint cannot take a path")
            })?;
            path.pop_if_empty();
            path.extend(segments);
        }
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// Sends a request with the integration authentication. With OAuth, a 401 is answered
    /// once by refreshing the token and resending.
    async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<HttpResponse> {
        let mut refused: Option<SecretString> = None;
        loop {
            let token = match &self.auth {
                Auth::Bearer(t) => t.clone(),
                Auth::OAuth(o) => {
                    o.token(&self.http, self.clock.as_ref(), refused.as_ref())
                        .await?
                }
            };
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .bearer_auth(token.expose());
            for (k, v) in &self.extra_headers {
                req = req.header(k.as_str(), v.as_str());
            }
            if let Some(b) = body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.to_string());
            }
            let req = req.build().map_err(|e| {
                CatalogAccessError::config(format!("cannot build request: {}", e.without_url()))
            })?;
            // Every call this provider makes is a read (the credentials POST creates
            // nothing), so all are retried on transient failures.
            let resp = self.http.execute(req, RetryMode::IdempotentRead).await?;
            if resp.status == 401 && matches!(self.auth, Auth::OAuth(_)) && refused.is_none() {
                tracing::debug!("Unity answered 401; refreshing the OAuth token once");
                refused = Some(token);
                continue;
            }
            return Ok(resp);
        }
    }

    async fn get_ok(&self, url: Url, what: &str) -> Result<Value> {
        let resp = self.send(reqwest::Method::GET, url, None).await?;
        resp.ok_json(what)
    }

    /// `(catalog, schema)` of a table namespace under the namespace model.
    fn catalog_schema<'a>(
        &'a self,
        namespace: &'a UpstreamNamespace,
    ) -> Result<(&'a str, &'a str)> {
        let (catalog, schema) = match (&self.pinned_catalog, namespace.levels()) {
            (Some(c), [schema]) => (c.as_str(), schema.as_str()),
            (None, [catalog, schema]) => (catalog.as_str(), schema.as_str()),
            (pinned, levels) => {
                let want = if pinned.is_some() {
                    "[schema] (the catalog is pinned by unity.catalog)"
                } else {
                    "[catalog, schema]"
                };
                return Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
                    "Unity table namespaces are {want}; `{namespace}` has {} level(s)",
                    levels.len()
                ))));
            }
        };
        check_level(catalog)?;
        check_level(schema)?;
        Ok((catalog, schema))
    }

    fn to_namespace(&self, catalog: &str, schema: &str) -> UpstreamNamespace {
        match &self.pinned_catalog {
            Some(_) => UpstreamNamespace::new([schema]),
            None => UpstreamNamespace::new([catalog, schema]),
        }
    }

    async fn list_schemas(
        &self,
        catalog: &str,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<UpstreamNamespace>> {
        check_level(catalog)?;
        let mut query = vec![("catalog_name", catalog.to_owned())];
        push_paging(&mut query, page_token, page_size, MAX_LIST_RESULTS);
        let v = self
            .get_ok(self.url(&["schemas"], &query)?, "list schemas")
            .await?;
        let items = names(&list_field(&v, "schemas")?, "schemas", |n| {
            self.to_namespace(catalog, n)
        })?;
        let next_page_token = next_token(&v, "next_page_token", page_token)?;
        if items.is_empty() && next_page_token.is_none() && page_token.is_none() {
            self.require(&["catalogs", catalog], &format!("catalog `{catalog}`"))
                .await?;
        }
        Ok(Page {
            items: dedup(items),
            next_page_token,
        })
    }

    /// Checks that an object exists (`GET` answers 200), for listings that answer an empty
    /// list where the parent does not exist (some servers answer `200 {}`): a missing parent
    /// is reported as not found, not as empty.
    async fn require(&self, segments: &[&str], what: &str) -> Result<()> {
        let resp = self
            .send(reqwest::Method::GET, self.url(segments, &[])?, None)
            .await?;
        match resp.status {
            200 => Ok(()),
            404 => Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
                "{what} does not exist upstream"
            )))),
            _ => Err(classify_status(&resp, &format!("get {what}"))),
        }
    }

    async fn table_info(&self, catalog: &str, schema: &str, name: &str) -> Result<TableInfo> {
        check_level(name)?;
        let full_name = format!("{catalog}.{schema}.{name}");
        let v = self
            .get_ok(self.url(&["tables", &full_name], &[])?, "get table")
            .await?;
        parse_table_info(&v)
    }
}

fn check_level(level: &str) -> Result<()> {
    if level.is_empty() || level.contains('.') {
        return Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
            "`{level}` is not a Unity name (empty or containing `.`)"
        ))));
    }
    Ok(())
}

fn push_paging(
    query: &mut Vec<(&str, String)>,
    page_token: Option<&str>,
    page_size: Option<u32>,
    cap: u32,
) {
    if let Some(n) = page_size {
        query.push(("max_results", n.clamp(1, cap).to_string()));
    }
    if let Some(t) = page_token {
        query.push(("page_token", t.to_owned()));
    }
}

fn is_view(table_type: Option<&str>) -> bool {
    table_type.is_some_and(|t| VIEW_TYPES.iter().any(|v| t.eq_ignore_ascii_case(v)))
}

#[async_trait]
impl CatalogClient for UnityClient {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::Unity
    }

    async fn capabilities(&self) -> Result<CatalogCapabilities> {
        Ok(CatalogCapabilities::DELTA_TABLES)
    }

    async fn check_connection(&self) -> Result<()> {
        match &self.pinned_catalog {
            Some(c) => self.list_schemas(c, None, Some(1)).await.map(|_| ()),
            None => self.list_namespaces(None, None, Some(1)).await.map(|_| ()),
        }
    }

    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<UpstreamNamespace>> {
        let levels = parent.map(UpstreamNamespace::levels).unwrap_or_default();
        let empty = || Page {
            items: Vec::new(),
            next_page_token: None,
        };
        match (&self.pinned_catalog, levels) {
            (Some(c), []) => self.list_schemas(c, page_token, page_size).await,
            (Some(_), [_]) => Ok(empty()),
            (None, []) => {
                let mut query = Vec::new();
                push_paging(&mut query, page_token, page_size, MAX_LIST_RESULTS);
                let v = self
                    .get_ok(self.url(&["catalogs"], &query)?, "list catalogs")
                    .await?;
                let items = names(&list_field(&v, "catalogs")?, "catalogs", |n| {
                    UpstreamNamespace::new([n])
                })?;
                let items = dedup(items);
                Ok(Page {
                    items,
                    next_page_token: next_token(&v, "next_page_token", page_token)?,
                })
            }
            (None, [catalog]) => self.list_schemas(catalog, page_token, page_size).await,
            (None, [_, _]) => Ok(empty()),
            _ => Err(CatalogAccessError::NotFound(BoundedText::ours(
                "Unity namespaces are at most [catalog, schema] deep",
            ))),
        }
    }

    async fn list_tables(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        if let (None, [catalog]) = (&self.pinned_catalog, namespace.levels()) {
            // A catalog holds schemas, not tables: an existing one lists no tables.
            check_level(catalog)?;
            self.require(&["catalogs", catalog], &format!("catalog `{catalog}`"))
                .await?;
            return Ok(Page {
                items: Vec::new(),
                next_page_token: None,
            });
        }
        let (catalog, schema) = self.catalog_schema(namespace)?;
        let mut query = vec![
            ("catalog_name", catalog.to_owned()),
            ("schema_name", schema.to_owned()),
        ];
        push_paging(&mut query, page_token, page_size, MAX_TABLE_RESULTS);
        let v = self
            .get_ok(self.url(&["tables"], &query)?, "list tables")
            .await?;
        let listed = list_field(&v, "tables")?;
        let mut items = Vec::new();
        for (i, t) in listed.iter().enumerate() {
            let name = required_str(t, "name", &format!("tables[{i}].name"))?;
            let table_type = optional_str(t, "table_type", &format!("tables[{i}].table_type"))?;
            if is_view(table_type.as_deref()) {
                continue;
            }
            items.push(TableIdent::new(namespace.clone(), name));
        }
        let next_page_token = next_token(&v, "next_page_token", page_token)?;
        if listed.is_empty() && next_page_token.is_none() && page_token.is_none() {
            let full_name = format!("{catalog}.{schema}");
            self.require(&["schemas", &full_name], &format!("schema `{full_name}`"))
                .await?;
        }
        Ok(Page {
            items: dedup(items),
            next_page_token,
        })
    }

    async fn load_table(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
        _if_none_match: Option<&str>,
    ) -> Result<LoadTableOutcome> {
        // Unity sends no entity tag; every load is a full load.
        let (catalog, schema) = self.catalog_schema(namespace)?;
        let info = self.table_info(catalog, schema, name).await?;
        if is_view(info.table_type.as_deref()) {
            return Err(CatalogAccessError::unsupported(format!(
                "`{name}` is a Unity view; the Unity provider does not load views"
            )));
        }
        let format = info
            .format
            .as_deref()
            .map(TableFormat::parse)
            .ok_or_else(|| {
                CatalogAccessError::protocol(
                    "data_source_format",
                    "the table info states no data_source_format",
                )
            })?;
        Ok(LoadTableOutcome::Loaded {
            metadata: Box::new(TableMetadata {
                identifier: TableIdent::new(namespace.clone(), info.name),
                format,
                schema: info.schema,
                location: info.location,
                metadata_location: None,
                stable_id: info.table_id,
                properties: info.properties,
            }),
            etag: None,
        })
    }

    async fn vend_storage_credentials(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> Result<VendedCredentials> {
        let (catalog, schema) = self.catalog_schema(namespace)?;
        let ident = TableIdent::new(namespace.clone(), name);
        if let Some(c) = self.vended.fresh(&ident, self.clock.now()) {
            return Ok(c);
        }
        let info = self.table_info(catalog, schema, name).await?;
        let Some(table_id) = info.table_id.as_deref() else {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Unsupported,
                format!(
                    "table `{name}` has no table_id; Unity vends credentials by table id, so \
                     this backend cannot vend for it"
                ),
            ));
        };
        let url = self.url(&["temporary-table-credentials"], &[])?;
        let body = json!({"table_id": table_id, "operation": "READ"});
        let resp = self.send(reqwest::Method::POST, url, Some(&body)).await?;
        match resp.status {
            200 => {}
            401 => return Err(classify_status(&resp, "temporary table credentials")),
            403 => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    format!(
                        "the catalog refused to vend credentials for table `{name}` \
                         (HTTP 403); external access may not be enabled or granted"
                    ),
                ));
            }
            404 if !error_code_is(&resp, "DOES_NOT_EXIST") => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    "the catalog has no temporary-table-credentials endpoint (HTTP 404)",
                ));
            }
            _ => return Err(classify_status(&resp, "temporary table credentials")),
        }
        let v = resp.json_value()?;
        let creds = parse_unity_credentials(&v, info.location.as_deref())?;
        check_fresh_and_scoped(&creds, self.clock.now(), info.location.as_deref())?;
        self.vended.store(ident, creds.clone());
        Ok(creds)
    }
}

fn error_code_is(resp: &HttpResponse, suffix: &str) -> bool {
    serde_json::from_slice::<Value>(&resp.body)
        .ok()
        .and_then(|v| {
            v.get("error_code")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .is_some_and(|c| c.ends_with(suffix))
}

fn parse_table_info(v: &Value) -> Result<TableInfo> {
    if !v.is_object() {
        return Err(CatalogAccessError::protocol(
            "<body>",
            "expected a JSON object",
        ));
    }
    let name = required_str(v, "name", "name")?.to_owned();
    let table_type = optional_str(v, "table_type", "table_type")?;
    let format = optional_str(v, "data_source_format", "data_source_format")?;
    let location = optional_str(v, "storage_location", "storage_location")?;
    let table_id = optional_str(v, "table_id", "table_id")?;
    let columns = list_field(v, "columns")?;
    let schema = columns_to_schema(&columns)?;
    let partition_columns = partition_columns(&columns)?;
    let mut properties: BTreeMap<String, String> = match v.get("properties") {
        Some(Value::Object(m)) => m
            .iter()
            .filter(|(k, _)| !is_secret_key(k))
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect(),
        _ => BTreeMap::new(),
    };
    if let Some(t) = &table_type {
        properties.insert("unity.table-type".into(), t.clone());
    }
    // Recorded as the Delta Sharing provider records `metaData.partitionColumns`, so a table
    // materializes the same way through either protocol.
    if !partition_columns.is_empty() {
        properties.insert("delta.partitionColumns".into(), partition_columns.join(","));
    }
    if let Some(c) = optional_str(v, "comment", "comment")? {
        properties.insert("comment".into(), c);
    }
    Ok(TableInfo {
        name,
        table_type,
        format,
        location,
        table_id,
        schema,
        properties,
    })
}

/// Columns (ordered by `position` when present) to an Iceberg-style schema. Each column's
/// type comes from `type_json` (a Spark `StructField`, or a bare Spark type) when present;
/// otherwise from `type_name`, which only works for primitive types.
fn columns_to_schema(columns: &[Value]) -> Result<Value> {
    let mut indexed: Vec<(i64, usize, &Value)> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let pos = c
                .get("position")
                .and_then(Value::as_i64)
                .unwrap_or(i as i64);
            (pos, i, c)
        })
        .collect();
    indexed.sort_by_key(|(pos, i, _)| (*pos, *i));
    let mut fields = Vec::with_capacity(indexed.len());
    for (_, i, c) in indexed {
        let path = format!("columns[{i}]");
        let name = required_str(c, "name", &format!("{path}.name"))?;
        let nullable = c.get("nullable").and_then(Value::as_bool).unwrap_or(true);
        let (ty, metadata) = match optional_str(c, "type_json", &format!("{path}.type_json"))? {
            Some(tj) => {
                let parsed: Value = serde_json::from_str(&tj).map_err(|e| {
                    CatalogAccessError::protocol(
                        format!("{path}.type_json"),
                        format!("not JSON (column {})", e.column()),
                    )
                })?;
                match parsed {
                    // A StructField: take its type, and its metadata (column-mapping ids).
                    Value::Object(mut o) if o.contains_key("name") && o.contains_key("type") => {
                        let metadata = match o.remove("metadata") {
                            Some(m @ Value::Object(_)) => m,
                            _ => json!({}),
                        };
                        (o.remove("type").unwrap_or(Value::Null), metadata)
                    }
                    other => (other, json!({})),
                }
            }
            None => (Value::String(type_from_name(c, &path)?), json!({})),
        };
        let mut field =
            json!({"name": name, "type": ty, "nullable": nullable, "metadata": metadata});
        if let (Some(obj), Some(comment)) = (
            field.get_mut("metadata").and_then(Value::as_object_mut),
            c.get("comment").and_then(Value::as_str),
        ) {
            obj.insert("comment".into(), json!(comment));
        }
        fields.push((field, format!("{path}.type_json")));
    }
    spark_fields_to_iceberg(&fields)
}

/// The partition columns in partition order: the columns with a `partition_index`, ordered
/// by it. Indexes must be distinct non-negative integers.
fn partition_columns(columns: &[Value]) -> Result<Vec<String>> {
    let mut indexed: Vec<(u64, String)> = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        let path = format!("columns[{i}].partition_index");
        let index = match c.get("partition_index") {
            None | Some(Value::Null) => continue,
            Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
                CatalogAccessError::protocol(&path, "expected a non-negative integer")
            })?,
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    &path,
                    "expected a non-negative integer",
                ));
            }
        };
        if indexed.iter().any(|(x, _)| *x == index) {
            return Err(CatalogAccessError::protocol(
                &path,
                format!("partition index {index} is given to two columns"),
            ));
        }
        let name = required_str(c, "name", &format!("columns[{i}].name"))?;
        indexed.push((index, name.to_owned()));
    }
    indexed.sort();
    Ok(indexed.into_iter().map(|(_, n)| n).collect())
}

/// A Spark primitive type name from `type_name` (+ `type_precision` / `type_scale`).
fn type_from_name(c: &Value, path: &str) -> Result<String> {
    let type_name = required_str(c, "type_name", &format!("{path}.type_name"))?;
    let spark = match type_name.to_ascii_uppercase().as_str() {
        "BOOLEAN" => "boolean".to_owned(),
        "BYTE" | "SHORT" | "INT" => "integer".to_owned(),
        "LONG" => "long".to_owned(),
        "FLOAT" => "float".to_owned(),
        "DOUBLE" => "double".to_owned(),
        "DATE" => "date".to_owned(),
        "TIMESTAMP" => "timestamp".to_owned(),
        "TIMESTAMP_NTZ" => "timestamp_ntz".to_owned(),
        "STRING" | "CHAR" => "string".to_owned(),
        "BINARY" => "binary".to_owned(),
        "VARIANT" => "variant".to_owned(),
        "DECIMAL" => {
            let p = c.get("type_precision").and_then(Value::as_u64);
            let s = c.get("type_scale").and_then(Value::as_u64);
            match (p, s) {
                (Some(p), Some(s)) => format!("decimal({p},{s})"),
                (Some(p), None) => format!("decimal({p},0)"),
                _ => match c.get("type_text").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => "decimal".to_owned(),
                },
            }
        }
        _ => {
            return Err(CatalogAccessError::protocol(
                format!("{path}.type_json"),
                "a non-primitive column needs type_json",
            ));
        }
    };
    // Validate through the same mapping the Spark JSON path uses.
    convert_primitive(&spark, &format!("{path}.type_name"))?;
    Ok(spark)
}

fn parse_unity_credentials(v: &Value, table_location: Option<&str>) -> Result<VendedCredentials> {
    if !v.is_object() {
        return Err(CatalogAccessError::protocol(
            "<body>",
            "expected a JSON object",
        ));
    }
    let credential = if let Some(aws) = v.get("aws_temp_credentials").filter(|a| !a.is_null()) {
        StorageCredential::S3 {
            access_key_id: secret_part(aws, "access_key_id", "aws_temp_credentials.access_key_id")?,
            secret_access_key: secret_part(
                aws,
                "secret_access_key",
                "aws_temp_credentials.secret_access_key",
            )?,
            session_token: Some(secret_part(
                aws,
                "session_token",
                "aws_temp_credentials.session_token",
            )?),
        }
    } else if let Some(az) = v.get("azure_user_delegation_sas").filter(|a| !a.is_null()) {
        StorageCredential::AzureSas {
            sas_token: secret_part(az, "sas_token", "azure_user_delegation_sas.sas_token")?,
        }
    } else if let Some(gcp) = v.get("gcp_oauth_token").filter(|a| !a.is_null()) {
        StorageCredential::GcsOauthToken {
            token: secret_part(gcp, "oauth_token", "gcp_oauth_token.oauth_token")?,
        }
    } else {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Incomplete,
            "the credentials answer carries no aws_temp_credentials, \
             azure_user_delegation_sas or gcp_oauth_token",
        ));
    };
    let expires_at = match v.get("expiration_time") {
        Some(e) => epoch_ms(e, "expiration_time")?,
        None => None,
    };
    let prefix = optional_str(v, "url", "url")?.or_else(|| table_location.map(str::to_owned));
    Ok(VendedCredentials {
        prefix,
        credential,
        expires_at,
        settings: BTreeMap::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_prefer_type_json_and_fall_back_to_type_name() {
        let cols = vec![
            json!({"name": "b", "type_name": "DECIMAL", "type_precision": 12,
                "type_scale": 3, "position": 1, "nullable": true}),
            json!({"name": "a", "type_name": "LONG", "position": 0, "nullable": false,
                "type_json": "{\"name\":\"a\",\"type\":\"long\",\"nullable\":false,\"metadata\":{}}"}),
            json!({"name": "c", "type_name": "ARRAY", "position": 2,
                "type_json": "{\"name\":\"c\",\"type\":{\"type\":\"array\",\"elementType\":\"string\",\"containsNull\":true},\"nullable\":true,\"metadata\":{}}"}),
        ];
        let schema = columns_to_schema(&cols).unwrap();
        assert_eq!(
            schema,
            json!({"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "a", "required": true, "type": "long"},
                {"id": 2, "name": "b", "required": false, "type": "decimal(12, 3)"},
                {"id": 3, "name": "c", "required": false, "type": {"type": "list",
                    "element-id": 4, "element": "string", "element-required": false}}
            ], "upstream-field-ids": []})
        );
    }

    #[test]
    fn complex_column_without_type_json_is_refused_by_name() {
        let cols = vec![json!({"name": "s", "type_name": "STRUCT", "type_text": "struct<x:int>"})];
        match columns_to_schema(&cols) {
            Err(CatalogAccessError::Protocol { field, .. }) => {
                assert_eq!(field, "columns[0].type_json")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn credentials_without_session_token_are_incomplete_and_name_no_value() {
        let v = json!({"aws_temp_credentials": {"access_key_id": "ASIAXYZ",
            "secret_access_key": "very-secret-value"}, "expiration_time": 4_000_000_000_000_i64});
        match parse_unity_credentials(&v, None) {
            Err(
                e @ CatalogAccessError::CredentialVending {
                    kind: VendingErrorKind::Incomplete,
                    ..
                },
            ) => {
                let text = format!("{e} {e:?}");
                assert!(text.contains("session_token"), "{text}");
                assert!(
                    !text.contains("very-secret-value") && !text.contains("ASIAXYZ"),
                    "{text}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
