//! Iceberg REST catalog provider, from the Apache Iceberg REST catalog OpenAPI spec.
//!
//! - `GET /v1/config?warehouse=` is fetched once, lazily; the effective configuration is
//!   defaults, then the integration's connection properties, then overrides (spec order).
//!   `prefix` may arrive in `defaults` (Lakekeeper) or `overrides`. `overrides.uri` is
//!   deliberately ignored: the integration URI is the one the operator configured and the
//!   address policy was asked about, and a catalog must not be able to retarget us.
//! - Advertised `endpoints` gate views and the credentials endpoint; without the field the
//!   spec's default set (no views) applies.
//! - Listings send `pageToken=` (empty) on the first page when a page size is requested,
//!   which is how the spec asks a paginating server to paginate; servers that ignore it and
//!   send no `next-page-token` are legal.
//! - Answers are read as JSON values and checked field by field, so a non-conforming server
//!   (`metadataLocation`, namespaces as objects) is refused with the field named.
//! - OAuth2 tokens are cached, refreshed before expiry by one task at a time (a tokio mutex
//!   held across the token request), and refreshed once more on a 401/419.
//! - Vended credentials are requested with `X-Iceberg-Access-Delegation:
//!   vended-credentials`, cached per table in process memory, and renewed near expiry.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, OnceCell};
use url::Url;

use crate::error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
use crate::http::{HttpClient, HttpResponse, RetryMode, classify_status};
use crate::sigv4::{AwsCredentialSource, AwsCredentials, SigV4Signer, StaticAwsCredentials};
use crate::spi::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogClientProvider,
    CatalogConnectionConfig, CatalogProtocol, Clock, ConnectOptions, LoadTableOutcome,
    NamespacePath, Page, ResolvedCatalogCredentials, SecretString, StorageCredential, TableFormat,
    TableIdent, TableMetadata, VendedCredentials, ViewDefinition, ViewMetadata, is_secret_key,
    location_has_prefix,
};

/// Refresh an OAuth token this long before it expires (capped at half its lifetime).
pub const TOKEN_REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Renew cached vended credentials this long before they expire.
pub const CREDENTIAL_RENEW_MARGIN: Duration = Duration::from_secs(300);
/// Header asking for delegated storage access.
pub const ACCESS_DELEGATION_HEADER: &str = "x-iceberg-access-delegation";

const EP_LIST_NAMESPACES: &str = "GET /v1/{prefix}/namespaces";
const EP_LOAD_NAMESPACE: &str = "GET /v1/{prefix}/namespaces/{namespace}";
const EP_LIST_TABLES: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables";
const EP_LOAD_TABLE: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}";
const EP_LIST_VIEWS: &str = "GET /v1/{prefix}/namespaces/{namespace}/views";
const EP_LOAD_VIEW: &str = "GET /v1/{prefix}/namespaces/{namespace}/views/{view}";
const EP_CREDENTIALS: &str = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials";

/// The endpoints a server supports when it does not send `endpoints` (spec, `/v1/config`),
/// restricted to the reads this provider makes.
const DEFAULT_ENDPOINTS: &[&str] = &[EP_LIST_NAMESPACES, EP_LIST_TABLES, EP_LOAD_TABLE];

/// Provider for [`CatalogProtocol::IcebergRest`].
#[derive(Debug, Clone, Copy, Default)]
pub struct IcebergRestProvider;

impl CatalogClientProvider for IcebergRestProvider {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::IcebergRest
    }

    fn connect(
        &self,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Box<dyn CatalogClient>> {
        Ok(Box::new(IcebergRestClient::new(
            config,
            auth,
            credentials,
            options,
        )?))
    }
}

/// The effective catalog configuration from `GET /v1/config`.
#[derive(Debug, Clone)]
struct CatalogSettings {
    prefix: Option<String>,
    separator: String,
    endpoints: HashSet<String>,
}

impl CatalogSettings {
    fn supports(&self, endpoint: &str) -> bool {
        self.endpoints.contains(endpoint)
    }
}

#[derive(Debug, Clone)]
struct CachedToken {
    value: SecretString,
    refresh_at: Option<SystemTime>,
}

#[derive(Debug)]
struct OAuthState {
    token_uri: Url,
    client_id: String,
    client_secret: SecretString,
    scopes: Vec<String>,
    /// Held across the token request: one refresh at a time, the others wait and reuse it.
    token: Mutex<Option<CachedToken>>,
}

#[derive(Debug)]
enum AuthScheme {
    OAuth(Box<OAuthState>),
    Bearer(SecretString),
    SigV4(SigV4Signer),
}

#[derive(Debug, Clone)]
struct CachedVend {
    location: Option<String>,
    credentials: VendedCredentials,
}

/// An Iceberg REST catalog client.
#[derive(Debug)]
pub struct IcebergRestClient {
    base: Url,
    warehouse: Option<String>,
    client_properties: BTreeMap<String, String>,
    extra_headers: HeaderMap,
    http: HttpClient,
    auth: AuthScheme,
    clock: Arc<dyn Clock>,
    settings: OnceCell<CatalogSettings>,
    vended: Mutex<HashMap<TableIdent, CachedVend>>,
}

impl IcebergRestClient {
    /// Validates configuration and authentication and builds a client (no I/O).
    pub fn new(
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Self> {
        let mut base = config.validate()?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        let auth = build_auth(auth, credentials)?;
        let mut extra_headers = HeaderMap::new();
        for (name, value) in config.extra_headers() {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| CatalogAccessError::config("invalid header property name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| CatalogAccessError::config("invalid header property value"))?;
            extra_headers.insert(name, value);
        }
        let client_properties = config
            .properties
            .iter()
            .filter(|(k, _)| !k.starts_with("header."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Self {
            base,
            warehouse: config.property("warehouse").map(str::to_owned),
            client_properties,
            extra_headers,
            http: HttpClient::new(options.http.clone())?.for_protocol(CatalogProtocol::IcebergRest),
            auth,
            clock: options.clock.clone(),
            settings: OnceCell::new(),
            vended: Mutex::new(HashMap::new()),
        })
    }

    // ------------------------------------------------------------------ transport

    fn url(&self, segments: &[&str]) -> Result<Url> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|_| CatalogAccessError::config("catalog URI cannot be a base"))?;
            path.pop_if_empty();
            for s in segments {
                path.push(s);
            }
        }
        Ok(url)
    }

    async fn catalog_url(&self, tail: &[&str]) -> Result<Url> {
        let settings = self.settings().await?;
        let mut segments: Vec<&str> = vec!["v1"];
        if let Some(prefix) = &settings.prefix {
            segments.extend(prefix.split('/').filter(|s| !s.is_empty()));
        }
        segments.extend_from_slice(tail);
        self.url(&segments)
    }

    /// Sends an authenticated GET; on 401/419 with OAuth, refreshes the token once and
    /// retries once (another task may already have refreshed it). With SigV4 keys from a
    /// renewable source (an assumed role, the ambient chain), a 401/403 renews the keys once
    /// and retries once; static keys are not retried.
    async fn get(&self, url: Url, headers: &[(&'static str, String)]) -> Result<HttpResponse> {
        let mut retried_auth = false;
        loop {
            let mut builder = self
                .http
                .request(Method::GET, url.clone())
                .header(reqwest::header::ACCEPT, "application/json")
                .headers(self.extra_headers.clone());
            for (k, v) in headers {
                builder = builder.header(*k, v.as_str());
            }
            let used_token = match &self.auth {
                AuthScheme::OAuth(o) => {
                    let t = self.oauth_token(o, None).await?;
                    builder = builder.bearer_auth(t.expose());
                    Some(t)
                }
                AuthScheme::Bearer(t) => {
                    builder = builder.bearer_auth(t.expose());
                    None
                }
                AuthScheme::SigV4(_) => None,
            };
            let mut request = builder.build().map_err(|e| {
                CatalogAccessError::config(format!("cannot build request: {}", e.without_url()))
            })?;
            let mut used_keys: Option<AwsCredentials> = None;
            if let AuthScheme::SigV4(signer) = &self.auth {
                used_keys = Some(signer.sign(&mut request, self.clock.now()).await?);
            }
            let response = self
                .http
                .execute(request, RetryMode::IdempotentRead)
                .await?;
            if matches!(response.status, 401 | 419)
                && !retried_auth
                && let (AuthScheme::OAuth(o), Some(stale)) = (&self.auth, used_token)
            {
                retried_auth = true;
                self.oauth_token(o, Some(&stale)).await?;
                continue;
            }
            if matches!(response.status, 401 | 403)
                && !retried_auth
                && let (AuthScheme::SigV4(signer), Some(keys)) = (&self.auth, used_keys)
                && signer.source().invalidate(&keys).await
            {
                retried_auth = true;
                continue;
            }
            return Ok(response);
        }
    }

    /// The current token, fetching a new one when there is none, it is due for refresh, or
    /// it equals `stale` (the upstream just refused it).
    async fn oauth_token(
        &self,
        oauth: &OAuthState,
        stale: Option<&SecretString>,
    ) -> Result<SecretString> {
        let mut guard = oauth.token.lock().await;
        let now = self.clock.now();
        if let Some(current) = guard.as_ref() {
            let due = current.refresh_at.is_some_and(|at| now >= at);
            let refused = stale.is_some_and(|s| s == &current.value);
            if !due && !refused {
                return Ok(current.value.clone());
            }
        }
        let fresh = self.fetch_token(oauth, now).await?;
        let value = fresh.value.clone();
        *guard = Some(fresh);
        Ok(value)
    }

    async fn fetch_token(&self, oauth: &OAuthState, now: SystemTime) -> Result<CachedToken> {
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", "client_credentials"),
            ("client_id", oauth.client_id.as_str()),
            ("client_secret", oauth.client_secret.expose()),
        ];
        let scope = oauth.scopes.join(" ");
        if !scope.is_empty() {
            form.push(("scope", scope.as_str()));
        }
        let request = self
            .http
            .request(Method::POST, oauth.token_uri.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form)
            .build()
            .map_err(|_| CatalogAccessError::config("cannot build the token request"))?;
        let response = self.http.execute(request, RetryMode::Once).await?;
        match response.status {
            200 => {}
            400 | 401 | 403 => {
                // OAuth error bodies name the error (`invalid_client`); the description is
                // upstream text and goes through the scrubber.
                return Err(CatalogAccessError::Authentication {
                    status: Some(response.status),
                    detail: BoundedText::new(&format!(
                        "token endpoint refused the client credentials: {}",
                        response.upstream_message()
                    )),
                });
            }
            _ => return Err(classify_status(&response, "token endpoint")),
        }
        let body = response.json_value()?;
        let obj = as_object(&body, "<token response>")?;
        let token = match obj.get("access_token") {
            Some(Value::String(s)) if !s.is_empty() => SecretString::new(s.clone()),
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "access_token",
                    "expected a non-empty string",
                ));
            }
            None => {
                return Err(CatalogAccessError::protocol("access_token", "missing"));
            }
        };
        match obj.get("token_type") {
            Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
            Some(Value::String(t)) if t.eq_ignore_ascii_case("N_A") => {}
            Some(Value::String(_)) => {
                return Err(CatalogAccessError::protocol(
                    "token_type",
                    "only bearer tokens are supported",
                ));
            }
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "token_type",
                    "expected a string",
                ));
            }
            None => return Err(CatalogAccessError::protocol("token_type", "missing")),
        }
        let refresh_at = match obj.get("expires_in") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let secs = n.as_u64().ok_or_else(|| {
                    CatalogAccessError::protocol("expires_in", "expected a non-negative integer")
                })?;
                let lifetime = Duration::from_secs(secs);
                let margin = TOKEN_REFRESH_MARGIN.min(lifetime / 2);
                Some(now + lifetime - margin)
            }
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "expires_in",
                    "expected an integer number of seconds",
                ));
            }
        };
        Ok(CachedToken {
            value: token,
            refresh_at,
        })
    }

    // ------------------------------------------------------------------ config

    async fn settings(&self) -> Result<&CatalogSettings> {
        self.settings.get_or_try_init(|| self.load_settings()).await
    }

    async fn load_settings(&self) -> Result<CatalogSettings> {
        let mut url = self.url(&["v1", "config"])?;
        if let Some(w) = &self.warehouse {
            url.query_pairs_mut().append_pair("warehouse", w);
        }
        let response = self.get(url, &[]).await?;
        if response.status != 200 {
            return Err(classify_status(&response, "GET /v1/config"));
        }
        let body = response.json_value()?;
        let obj = as_object(&body, "<config>")?;
        let defaults = string_map(obj.get("defaults"), "defaults")?;
        let overrides = string_map(obj.get("overrides"), "overrides")?;
        let mut merged = defaults;
        merged.extend(self.client_properties.clone());
        merged.extend(overrides);
        let endpoints = match obj.get("endpoints") {
            None | Some(Value::Null) => DEFAULT_ENDPOINTS.iter().map(|s| (*s).to_owned()).collect(),
            Some(Value::Array(items)) => {
                let mut set = HashSet::new();
                for (i, item) in items.iter().enumerate() {
                    let s = item.as_str().ok_or_else(|| {
                        CatalogAccessError::protocol(format!("endpoints[{i}]"), "expected a string")
                    })?;
                    set.insert(s.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                set
            }
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "endpoints",
                    "expected an array",
                ));
            }
        };
        let separator = match merged.get("namespace-separator") {
            None => "\u{1f}".to_owned(),
            Some(s) => {
                let decoded = percent_decode(s);
                if decoded.is_empty() {
                    return Err(CatalogAccessError::protocol(
                        "namespace-separator",
                        "empty separator",
                    ));
                }
                decoded
            }
        };
        let prefix = merged
            .get("prefix")
            .map(|p| p.trim_matches('/').to_owned())
            .filter(|p| !p.is_empty());
        Ok(CatalogSettings {
            prefix,
            separator,
            endpoints,
        })
    }

    async fn require(&self, endpoint: &str, what: &str) -> Result<()> {
        if self.settings().await?.supports(endpoint) {
            Ok(())
        } else {
            Err(CatalogAccessError::unsupported(format!(
                "the catalog does not advertise `{endpoint}` ({what})"
            )))
        }
    }

    async fn encode_namespace(&self, ns: &NamespacePath) -> Result<String> {
        let sep = &self.settings().await?.separator;
        if ns.is_empty() {
            return Err(CatalogAccessError::config(
                "namespace must have at least one level",
            ));
        }
        for level in ns.levels() {
            if level.is_empty() || level.contains(sep.as_str()) || level.contains('\u{1f}') {
                return Err(CatalogAccessError::config(
                    "namespace level is empty or contains the namespace separator",
                ));
            }
        }
        Ok(ns.levels().join(sep))
    }

    // ------------------------------------------------------------------ tables

    async fn load_table_raw(
        &self,
        namespace: &NamespacePath,
        name: &str,
        if_none_match: Option<&str>,
        delegate: bool,
    ) -> Result<HttpResponse> {
        let ns = self.encode_namespace(namespace).await?;
        let url = self
            .catalog_url(&["namespaces", &ns, "tables", name])
            .await?;
        let mut headers = Vec::new();
        if let Some(etag) = if_none_match {
            headers.push(("if-none-match", etag.to_owned()));
        }
        if delegate {
            headers.push((ACCESS_DELEGATION_HEADER, "vended-credentials".to_owned()));
        }
        let response = self.get(url, &headers).await?;
        match response.status {
            200 => Ok(response),
            304 if if_none_match.is_some() => Ok(response),
            _ => Err(classify_status(
                &response,
                &format!("load table {}", TableIdent::new(namespace.clone(), name)),
            )),
        }
    }

    async fn vend_fresh(
        &self,
        namespace: &NamespacePath,
        name: &str,
        previous: Option<&CachedVend>,
    ) -> Result<CachedVend> {
        let now = self.clock.now();
        if let Some(prev) = previous
            && self.settings().await?.supports(EP_CREDENTIALS)
        {
            let ns = self.encode_namespace(namespace).await?;
            let url = self
                .catalog_url(&["namespaces", &ns, "tables", name, "credentials"])
                .await?;
            let response = self.get(url, &[]).await?;
            if response.status != 200 {
                return Err(classify_status(&response, "load credentials"));
            }
            let body = response.json_value()?;
            let obj = as_object(&body, "<credentials>")?;
            let entries =
                match obj.get("storage-credentials") {
                    Some(v) => parse_storage_credentials(v)?,
                    None => {
                        return Err(reject_variant(obj, "storage-credentials").unwrap_or_else(
                            || CatalogAccessError::protocol("storage-credentials", "missing"),
                        ));
                    }
                };
            // An empty answer renews nothing: reload the table instead (same protocol,
            // same catalog authentication; not a fallback to other credentials).
            if !entries.is_empty() {
                let credentials = select_vended_credentials(
                    prev.location.as_deref(),
                    &entries,
                    &BTreeMap::new(),
                    false,
                    now,
                )?;
                return Ok(CachedVend {
                    location: prev.location.clone(),
                    credentials,
                });
            }
        }
        let response = self.load_table_raw(namespace, name, None, true).await?;
        let body = response.json_value()?;
        let result = as_object(&body, "<load table result>")?;
        let metadata = match result.get("metadata") {
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "metadata",
                    "expected an object",
                ));
            }
            None => return Err(CatalogAccessError::protocol("metadata", "missing")),
        };
        let location = opt_str(metadata, "location", "metadata.location")?.map(str::to_owned);
        let config = string_map(result.get("config"), "config")?;
        let entries = match get_field(result, "storage-credentials", "storage-credentials")? {
            Some(v) => parse_storage_credentials(v)?,
            None => Vec::new(),
        };
        let remote_signing = result
            .get("remote-signing-config")
            .is_some_and(|v| !v.is_null());
        let credentials =
            select_vended_credentials(location.as_deref(), &entries, &config, remote_signing, now)?;
        Ok(CachedVend {
            location,
            credentials,
        })
    }
}

fn build_auth(
    auth: &CatalogAuthentication,
    credentials: ResolvedCatalogCredentials,
) -> Result<AuthScheme> {
    match (auth, credentials) {
        (
            CatalogAuthentication::OauthClientCredentials {
                token_uri,
                client_id,
                scopes,
            },
            ResolvedCatalogCredentials::ClientSecret(secret),
        ) => {
            let token_uri = Url::parse(token_uri)
                .map_err(|_| CatalogAccessError::config("OAuth token_uri is not a URL"))?;
            if !token_uri.username().is_empty()
                || token_uri.password().is_some()
                || token_uri.fragment().is_some()
                || token_uri.query_pairs().any(|(k, _)| is_secret_key(&k))
            {
                return Err(CatalogAccessError::config(
                    "OAuth token_uri must not carry user-info, a fragment or secret parameters",
                ));
            }
            if client_id.trim().is_empty() || secret.is_empty() {
                return Err(CatalogAccessError::config(
                    "OAuth client credentials need a client id and a client secret",
                ));
            }
            Ok(AuthScheme::OAuth(Box::new(OAuthState {
                token_uri,
                client_id: client_id.clone(),
                client_secret: secret,
                scopes: scopes.clone(),
                token: Mutex::new(None),
            })))
        }
        (CatalogAuthentication::Bearer, ResolvedCatalogCredentials::Token(token)) => {
            if token.is_empty() {
                return Err(CatalogAccessError::config("bearer token is empty"));
            }
            Ok(AuthScheme::Bearer(token))
        }
        (
            CatalogAuthentication::AwsSigV4 {
                region,
                signing_name,
            },
            creds @ (ResolvedCatalogCredentials::AwsAccessKeys { .. }
            | ResolvedCatalogCredentials::AwsSource(_)),
        ) => {
            if region.trim().is_empty() || signing_name.trim().is_empty() {
                return Err(CatalogAccessError::config(
                    "SigV4 needs a region and a signing name",
                ));
            }
            let source: Arc<dyn AwsCredentialSource> = match creds {
                ResolvedCatalogCredentials::AwsAccessKeys {
                    access_key_id,
                    secret_access_key,
                    session_token,
                } => Arc::new(StaticAwsCredentials::new(
                    access_key_id,
                    secret_access_key,
                    session_token,
                )?),
                ResolvedCatalogCredentials::AwsSource(handle) => handle.0,
                _ => unreachable!("matched above"),
            };
            Ok(AuthScheme::SigV4(SigV4Signer::with_source(
                region.clone(),
                signing_name.clone(),
                source,
            )))
        }
        (
            CatalogAuthentication::AwsAssumeRole { .. }
            | CatalogAuthentication::AwsAccessKeys { .. },
            _,
        ) => Err(CatalogAccessError::unsupported(format!(
            "{} authentication is not wired for Iceberg REST; use AWS_SIGV4 with access keys",
            auth.scheme_name()
        ))),
        (auth, creds) => Err(CatalogAccessError::config(format!(
            "{} authentication needs different credentials than {}",
            auth.scheme_name(),
            creds.kind_name()
        ))),
    }
}

#[async_trait]
impl CatalogClient for IcebergRestClient {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::IcebergRest
    }

    async fn capabilities(&self) -> Result<CatalogCapabilities> {
        let s = self.settings().await?;
        Ok(CatalogCapabilities {
            list_namespaces: s.supports(EP_LIST_NAMESPACES),
            list_tables: s.supports(EP_LIST_TABLES),
            list_views: s.supports(EP_LIST_VIEWS),
            load_views: s.supports(EP_LOAD_VIEW),
            vend_storage_credentials: s.supports(EP_LOAD_TABLE),
            stable_ids: true,
        })
    }

    async fn check_connection(&self) -> Result<()> {
        self.list_namespaces(None, None, Some(1)).await.map(|_| ())
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespacePath>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<NamespacePath>> {
        self.require(EP_LIST_NAMESPACES, "list namespaces").await?;
        let mut url = self.catalog_url(&["namespaces"]).await?;
        let parent_encoded = match parent.filter(|p| !p.is_empty()) {
            Some(p) => Some(self.encode_namespace(p).await?),
            None => None,
        };
        {
            let mut q = url.query_pairs_mut();
            if let Some(p) = &parent_encoded {
                q.append_pair("parent", p);
            }
            append_paging(&mut q, page_token, page_size);
        }
        let response = self.get(url, &[]).await?;
        if response.status != 200 {
            return Err(classify_status(&response, "list namespaces"));
        }
        let body = response.json_value()?;
        let obj = as_object(&body, "<list namespaces>")?;
        let next = next_page_token(obj, page_token)?;
        let items = match get_field(obj, "namespaces", "namespaces")? {
            None => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "namespaces",
                    "expected an array",
                ));
            }
        };
        // Entries other than direct children (some servers answer every depth, or paths
        // outside the parent) are passed on as answered: the callers keep the direct children
        // and count the rest.
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let field = format!("namespaces[{i}]");
            out.push(parse_namespace(item, &field)?);
        }
        Ok(Page {
            items: out,
            next_page_token: next,
        })
    }

    async fn load_namespace_properties(
        &self,
        namespace: &NamespacePath,
    ) -> Result<BTreeMap<String, String>> {
        self.require(EP_LOAD_NAMESPACE, "load namespace").await?;
        let ns = self.encode_namespace(namespace).await?;
        let url = self.catalog_url(&["namespaces", &ns]).await?;
        let response = self.get(url, &[]).await?;
        if response.status != 200 {
            return Err(classify_status(
                &response,
                &format!("load namespace {namespace}"),
            ));
        }
        let body = response.json_value()?;
        let obj = as_object(&body, "<load namespace>")?;
        filtered_properties(get_field(obj, "properties", "properties")?, "properties")
    }

    async fn list_tables(
        &self,
        namespace: &NamespacePath,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        self.require(EP_LIST_TABLES, "list tables").await?;
        self.list_relations(namespace, "tables", page_token, page_size)
            .await
    }

    async fn list_views(
        &self,
        namespace: &NamespacePath,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        self.require(EP_LIST_VIEWS, "list views").await?;
        self.list_relations(namespace, "views", page_token, page_size)
            .await
    }

    async fn load_table(
        &self,
        namespace: &NamespacePath,
        name: &str,
        if_none_match: Option<&str>,
    ) -> Result<LoadTableOutcome> {
        self.require(EP_LOAD_TABLE, "load table").await?;
        let response = self
            .load_table_raw(namespace, name, if_none_match, false)
            .await?;
        if response.status == 304 {
            return Ok(LoadTableOutcome::NotModified);
        }
        let etag = response.header("etag").map(str::to_owned);
        let body = response.json_value()?;
        let metadata = parse_load_table(&body, TableIdent::new(namespace.clone(), name))?;
        Ok(LoadTableOutcome::Loaded {
            metadata: Box::new(metadata),
            etag,
        })
    }

    async fn load_view(&self, namespace: &NamespacePath, name: &str) -> Result<ViewMetadata> {
        self.require(EP_LOAD_VIEW, "load view").await?;
        let ns = self.encode_namespace(namespace).await?;
        let url = self
            .catalog_url(&["namespaces", &ns, "views", name])
            .await?;
        let response = self.get(url, &[]).await?;
        if response.status != 200 {
            return Err(classify_status(
                &response,
                &format!("load view {}", TableIdent::new(namespace.clone(), name)),
            ));
        }
        let body = response.json_value()?;
        parse_load_view(&body, TableIdent::new(namespace.clone(), name))
    }

    async fn vend_storage_credentials(
        &self,
        namespace: &NamespacePath,
        name: &str,
    ) -> Result<VendedCredentials> {
        self.require(EP_LOAD_TABLE, "load table").await?;
        let key = TableIdent::new(namespace.clone(), name);
        // Held across the upstream call so concurrent callers renew once.
        let mut cache = self.vended.lock().await;
        let now = self.clock.now();
        let previous = cache.get(&key).cloned();
        if let Some(c) = &previous
            && !c.credentials.expires_within(now, CREDENTIAL_RENEW_MARGIN)
        {
            return Ok(c.credentials.clone());
        }
        let fresh = match self.vend_fresh(namespace, name, previous.as_ref()).await {
            Ok(f) => f,
            Err(e) => {
                cache.remove(&key);
                return Err(e);
            }
        };
        let credentials = fresh.credentials.clone();
        cache.insert(key, fresh);
        Ok(credentials)
    }
}

impl IcebergRestClient {
    async fn list_relations(
        &self,
        namespace: &NamespacePath,
        kind: &str,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        let ns = self.encode_namespace(namespace).await?;
        let mut url = self.catalog_url(&["namespaces", &ns, kind]).await?;
        append_paging(&mut url.query_pairs_mut(), page_token, page_size);
        let response = self.get(url, &[]).await?;
        if response.status != 200 {
            return Err(classify_status(
                &response,
                &format!("list {kind} in {namespace}"),
            ));
        }
        let body = response.json_value()?;
        let obj = as_object(&body, &format!("<list {kind}>"))?;
        let next = next_page_token(obj, page_token)?;
        let items = match get_field(obj, "identifiers", "identifiers")? {
            None => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "identifiers",
                    "expected an array",
                ));
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let field = format!("identifiers[{i}]");
            let ident = as_object(item, &field)?;
            let ns = match ident.get("namespace") {
                Some(v) => parse_namespace(v, &format!("{field}.namespace"))?,
                None => {
                    return Err(CatalogAccessError::protocol(
                        format!("{field}.namespace"),
                        "missing",
                    ));
                }
            };
            let name = match ident.get("name") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => {
                    return Err(CatalogAccessError::protocol(
                        format!("{field}.name"),
                        "expected a non-empty string",
                    ));
                }
            };
            if &ns != namespace {
                return Err(CatalogAccessError::protocol(
                    format!("{field}.namespace"),
                    "identifier is not in the requested namespace",
                ));
            }
            out.push(TableIdent::new(ns, name));
        }
        Ok(Page {
            items: out,
            next_page_token: next,
        })
    }
}

// ---------------------------------------------------------------------- parsing helpers

fn append_paging(
    q: &mut url::form_urlencoded::Serializer<'_, url::UrlQuery<'_>>,
    page_token: Option<&str>,
    page_size: Option<u32>,
) {
    match (page_token, page_size) {
        (Some(t), _) => {
            q.append_pair("pageToken", t);
        }
        // An empty pageToken asks a paginating server to paginate (spec, PageToken).
        (None, Some(_)) => {
            q.append_pair("pageToken", "");
        }
        (None, None) => {}
    }
    if let Some(size) = page_size {
        q.append_pair("pageSize", &size.max(1).to_string());
    }
}

fn next_page_token(obj: &Map<String, Value>, sent: Option<&str>) -> Result<Option<String>> {
    match get_field(obj, "next-page-token", "next-page-token")? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => {
            if sent == Some(s.as_str()) {
                return Err(CatalogAccessError::protocol(
                    "next-page-token",
                    "the server returned the page token it was sent (the listing would not end)",
                ));
            }
            Ok(Some(s.clone()))
        }
        Some(_) => Err(CatalogAccessError::protocol(
            "next-page-token",
            "expected a string or null",
        )),
    }
}

fn as_object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| CatalogAccessError::protocol(field, "expected a JSON object"))
}

/// Non-spec spellings of a kebab-case field (`metadataLocation`, `metadata_location`).
fn variants(key: &str) -> [String; 2] {
    let mut camel = String::new();
    let mut upper = false;
    for c in key.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            camel.extend(c.to_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    [camel, key.replace('-', "_")]
}

fn reject_variant(obj: &Map<String, Value>, key: &str) -> Option<CatalogAccessError> {
    variants(key)
        .into_iter()
        .filter(|v| v != key)
        .find(|v| obj.contains_key(v))
        .map(|v| {
            CatalogAccessError::protocol(
                key,
                format!("the server sent `{v}`; the Iceberg REST spec names this field `{key}`"),
            )
        })
}

/// A field by its spec name; a non-spec spelling of it (with the spec name absent) is a
/// protocol error naming both.
fn get_field<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<Option<&'a Value>> {
    if let Some(v) = obj.get(key) {
        return Ok(Some(v));
    }
    match reject_variant(obj, key) {
        Some(CatalogAccessError::Protocol { detail, .. }) => Err(CatalogAccessError::Protocol {
            field: field.to_owned(),
            detail,
        }),
        Some(other) => Err(other),
        None => Ok(None),
    }
}

fn opt_str<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<Option<&'a str>> {
    match get_field(obj, key, field)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected a string")),
    }
}

fn req_str<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a str> {
    opt_str(obj, key, field)?.ok_or_else(|| CatalogAccessError::protocol(field, "missing"))
}

fn req_i64(obj: &Map<String, Value>, key: &str, field: &str) -> Result<i64> {
    match get_field(obj, key, field)? {
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| CatalogAccessError::protocol(field, "expected an integer")),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected an integer")),
        None => Err(CatalogAccessError::protocol(field, "missing")),
    }
}

fn string_map(v: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(CatalogAccessError::protocol(
                    format!("{field}.{k}"),
                    "expected a string value",
                )),
            })
            .collect(),
        Some(_) => Err(CatalogAccessError::protocol(
            field,
            "expected an object of strings",
        )),
    }
}

fn parse_namespace(v: &Value, field: &str) -> Result<NamespacePath> {
    match v {
        Value::Array(levels) => {
            let mut out = Vec::with_capacity(levels.len());
            for level in levels {
                match level {
                    Value::String(s) if !s.is_empty() => out.push(s.clone()),
                    _ => {
                        return Err(CatalogAccessError::protocol(
                            field,
                            "namespace levels must be non-empty strings",
                        ));
                    }
                }
            }
            if out.is_empty() {
                return Err(CatalogAccessError::protocol(field, "empty namespace"));
            }
            Ok(NamespacePath(out))
        }
        Value::Object(_) => Err(CatalogAccessError::protocol(
            field,
            "the server sent an object; the Iceberg REST spec defines a namespace as an array \
             of strings",
        )),
        _ => Err(CatalogAccessError::protocol(
            field,
            "expected an array of strings",
        )),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn filtered_properties(v: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>> {
    Ok(string_map(v, field)?
        .into_iter()
        .filter(|(k, _)| !is_secret_key(k))
        .collect())
}

fn check_schema(schema: &Value, field: &str) -> Result<Value> {
    let obj = as_object(schema, field)?;
    if obj.get("type").and_then(Value::as_str) != Some("struct") {
        return Err(CatalogAccessError::protocol(
            format!("{field}.type"),
            "expected \"struct\"",
        ));
    }
    if !obj.get("fields").is_some_and(Value::is_array) {
        return Err(CatalogAccessError::protocol(
            format!("{field}.fields"),
            "expected an array",
        ));
    }
    Ok(schema.clone())
}

/// Picks the schema with `schema-id == id` from `schemas`.
fn schema_by_id(meta: &Map<String, Value>, id: i64, field: &str) -> Result<Value> {
    let schemas = match get_field(meta, "schemas", &format!("{field}.schemas"))? {
        Some(Value::Array(s)) => s,
        _ => {
            return Err(CatalogAccessError::protocol(
                format!("{field}.schemas"),
                "expected an array",
            ));
        }
    };
    for (i, s) in schemas.iter().enumerate() {
        if s.get("schema-id").and_then(Value::as_i64) == Some(id) {
            return check_schema(s, &format!("{field}.schemas[{i}]"));
        }
    }
    Err(CatalogAccessError::protocol(
        format!("{field}.schemas"),
        format!("no schema with schema-id {id}"),
    ))
}

/// Parses a `LoadTableResult` into provider-neutral metadata.
pub fn parse_load_table(body: &Value, identifier: TableIdent) -> Result<TableMetadata> {
    let result = as_object(body, "<load table result>")?;
    let metadata_location = opt_str(result, "metadata-location", "metadata-location")?;
    let meta = match result.get("metadata") {
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "metadata",
                "expected an object",
            ));
        }
        None => return Err(CatalogAccessError::protocol("metadata", "missing")),
    };
    let format_version = req_i64(meta, "format-version", "metadata.format-version")?;
    if !(1..=3).contains(&format_version) {
        return Err(CatalogAccessError::protocol(
            "metadata.format-version",
            format!("unsupported format version {format_version}"),
        ));
    }
    let uuid = req_str(meta, "table-uuid", "metadata.table-uuid")?;
    let location = opt_str(meta, "location", "metadata.location")?;
    let schema = match get_field(meta, "current-schema-id", "metadata.current-schema-id")? {
        Some(Value::Number(n)) => {
            let id = n.as_i64().ok_or_else(|| {
                CatalogAccessError::protocol("metadata.current-schema-id", "expected an integer")
            })?;
            schema_by_id(meta, id, "metadata")?
        }
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "metadata.current-schema-id",
                "expected an integer",
            ));
        }
        // Format v1 metadata may carry the single `schema` instead.
        None => match meta.get("schema") {
            Some(s) => check_schema(s, "metadata.schema")?,
            None => {
                return Err(CatalogAccessError::protocol(
                    "metadata.current-schema-id",
                    "missing (and no v1 `schema`)",
                ));
            }
        },
    };
    Ok(TableMetadata {
        identifier,
        format: TableFormat::Iceberg,
        schema,
        location: location.map(str::to_owned),
        metadata_location: metadata_location.map(str::to_owned),
        stable_id: Some(uuid.to_owned()),
        properties: filtered_properties(meta.get("properties"), "metadata.properties")?,
    })
}

/// Parses a `LoadViewResult` into provider-neutral view metadata.
pub fn parse_load_view(body: &Value, identifier: TableIdent) -> Result<ViewMetadata> {
    let result = as_object(body, "<load view result>")?;
    req_str(result, "metadata-location", "metadata-location")?;
    let meta = match result.get("metadata") {
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "metadata",
                "expected an object",
            ));
        }
        None => return Err(CatalogAccessError::protocol("metadata", "missing")),
    };
    let uuid = req_str(meta, "view-uuid", "metadata.view-uuid")?;
    let current = req_i64(meta, "current-version-id", "metadata.current-version-id")?;
    let versions = match get_field(meta, "versions", "metadata.versions")? {
        Some(Value::Array(v)) => v,
        _ => {
            return Err(CatalogAccessError::protocol(
                "metadata.versions",
                "expected an array",
            ));
        }
    };
    let mut found = None;
    for (i, v) in versions.iter().enumerate() {
        let field = format!("metadata.versions[{i}]");
        let obj = as_object(v, &field)?;
        if req_i64(obj, "version-id", &format!("{field}.version-id"))? == current {
            found = Some((field, obj));
            break;
        }
    }
    let (field, version) = found.ok_or_else(|| {
        CatalogAccessError::protocol(
            "metadata.current-version-id",
            format!("no version with version-id {current}"),
        )
    })?;
    let schema_id = req_i64(version, "schema-id", &format!("{field}.schema-id"))?;
    let schema = schema_by_id(meta, schema_id, "metadata")?;
    let default_namespace = match get_field(
        version,
        "default-namespace",
        &format!("{field}.default-namespace"),
    )? {
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(v) => Some(parse_namespace(v, &format!("{field}.default-namespace"))?),
        None => {
            return Err(CatalogAccessError::protocol(
                format!("{field}.default-namespace"),
                "missing",
            ));
        }
    };
    let reps = match get_field(
        version,
        "representations",
        &format!("{field}.representations"),
    )? {
        Some(Value::Array(r)) => r,
        _ => {
            return Err(CatalogAccessError::protocol(
                format!("{field}.representations"),
                "expected an array",
            ));
        }
    };
    let mut definitions = Vec::new();
    for (i, r) in reps.iter().enumerate() {
        let rf = format!("{field}.representations[{i}]");
        let obj = as_object(r, &rf)?;
        // The spec defines only `sql`; other representation types are not ours to read.
        if req_str(obj, "type", &format!("{rf}.type"))? != "sql" {
            continue;
        }
        definitions.push(ViewDefinition {
            dialect: req_str(obj, "dialect", &format!("{rf}.dialect"))?.to_owned(),
            sql: req_str(obj, "sql", &format!("{rf}.sql"))?.to_owned(),
        });
    }
    Ok(ViewMetadata {
        identifier,
        schema,
        definitions,
        default_namespace,
        properties: filtered_properties(meta.get("properties"), "metadata.properties")?,
        stable_id: Some(uuid.to_owned()),
    })
}

fn parse_storage_credentials(v: &Value) -> Result<Vec<(String, BTreeMap<String, String>)>> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => {
            return Err(CatalogAccessError::protocol(
                "storage-credentials",
                "expected an array",
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("storage-credentials[{i}]");
        let obj = as_object(item, &field)?;
        let prefix = req_str(obj, "prefix", &format!("{field}.prefix"))?.to_owned();
        let config = match obj.get("config") {
            Some(c) => string_map(Some(c), &format!("{field}.config"))?,
            None => {
                return Err(CatalogAccessError::protocol(
                    format!("{field}.config"),
                    "missing",
                ));
            }
        };
        out.push((prefix, config));
    }
    Ok(out)
}

const REMOTE_SIGNING_KEYS: &[&str] = &[
    "s3.signer.uri",
    "s3.signer.endpoint",
    "signer.uri",
    "signer.endpoint",
];

fn parse_expiry_ms(config: &BTreeMap<String, String>, key: &str) -> Result<Option<SystemTime>> {
    match config.get(key) {
        None => Ok(None),
        Some(v) => {
            let ms: u64 = v
                .trim()
                .parse()
                .map_err(|_| CatalogAccessError::protocol(key, "expected epoch milliseconds"))?;
            Ok(Some(UNIX_EPOCH + Duration::from_millis(ms)))
        }
    }
}

fn non_empty(config: &BTreeMap<String, String>, key: &str) -> Option<SecretString> {
    config
        .get(key)
        .filter(|v| !v.trim().is_empty())
        .map(|v| SecretString::new(v.clone()))
}

/// Reads one storage credential out of a config map; `Ok(None)` when it holds none.
fn credential_from_config(
    config: &BTreeMap<String, String>,
) -> Result<Option<(StorageCredential, Option<SystemTime>)>> {
    let key = non_empty(config, "s3.access-key-id");
    let secret = non_empty(config, "s3.secret-access-key");
    let session = non_empty(config, "s3.session-token");
    let s3_expiry = parse_expiry_ms(config, "s3.session-token-expires-at-ms")?;
    if key.is_some() || secret.is_some() || session.is_some() {
        let Some(access_key_id) = key else {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials lack s3.access-key-id",
            ));
        };
        let Some(secret_access_key) = secret else {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials lack s3.secret-access-key",
            ));
        };
        if s3_expiry.is_some() && session.is_none() {
            return Err(CatalogAccessError::vending(
                VendingErrorKind::Incomplete,
                "vended S3 credentials state an expiry but lack s3.session-token",
            ));
        }
        return Ok(Some((
            StorageCredential::S3 {
                access_key_id,
                secret_access_key,
                session_token: session,
            },
            s3_expiry,
        )));
    }
    if let Some(token) = non_empty(config, "gcs.oauth2.token") {
        let expiry = parse_expiry_ms(config, "gcs.oauth2.token-expires-at")?;
        return Ok(Some((StorageCredential::GcsOauthToken { token }, expiry)));
    }
    if let Some((k, v)) = config
        .iter()
        .find(|(k, v)| k.starts_with("adls.sas-token.") && !v.trim().is_empty())
    {
        let account = &k["adls.sas-token.".len()..];
        let expiry = parse_expiry_ms(config, &format!("adls.sas-token-expires-at-ms.{account}"))?;
        return Ok(Some((
            StorageCredential::AzureSas {
                sas_token: SecretString::new(v.clone()),
            },
            expiry,
        )));
    }
    Ok(None)
}

fn settings_from(config: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    config
        .iter()
        .filter(|(k, _)| !is_secret_key(k) && !k.contains("expires-at"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Chooses the vended credential for a table at `location` (spec, `LoadTableResult`):
/// `storage-credentials` first, by longest prefix covering the location, then `config`.
/// Remote signing without keys is "vending unsupported"; incomplete or already expired
/// credentials are refused.
pub fn select_vended_credentials(
    location: Option<&str>,
    storage_credentials: &[(String, BTreeMap<String, String>)],
    config: &BTreeMap<String, String>,
    remote_signing_config: bool,
    now: SystemTime,
) -> Result<VendedCredentials> {
    let (prefix, chosen) = if storage_credentials.is_empty() {
        (None, config)
    } else {
        let best = match location {
            Some(loc) => storage_credentials
                .iter()
                .filter(|(p, _)| location_has_prefix(loc, p))
                .max_by_key(|(p, _)| p.trim_end_matches('/').len()),
            None if storage_credentials.len() == 1 => storage_credentials.first(),
            None => None,
        };
        match best {
            Some((p, c)) => (Some(p.clone()), c),
            None => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Scope,
                    "no vended storage credential covers the table location",
                ));
            }
        }
    };
    let Some((credential, expires_at)) = credential_from_config(chosen)? else {
        let remote = remote_signing_config
            || config
                .get("s3.remote-signing-enabled")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || REMOTE_SIGNING_KEYS.iter().any(|k| config.contains_key(*k));
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Unsupported,
            if remote {
                "the catalog offers remote signing only; it vended no storage credentials"
            } else {
                "the catalog vended no storage credentials for this table"
            },
        ));
    };
    if expires_at.is_some_and(|at| at <= now) {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Expired,
            "the catalog vended storage credentials that have already expired",
        ));
    }
    let mut settings = settings_from(config);
    settings.extend(settings_from(chosen));
    let credentials = VendedCredentials {
        prefix,
        credential,
        expires_at,
        settings,
    };
    if let Some(loc) = location
        && !credentials.covers(loc)
    {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Scope,
            "vended storage credentials do not cover the table location",
        ));
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn s3(key: &str) -> BTreeMap<String, String> {
        map(&[
            ("s3.access-key-id", key),
            ("s3.secret-access-key", "secret"),
            ("s3.session-token", "tok"),
        ])
    }

    fn key_of(c: &VendedCredentials) -> String {
        match &c.credential {
            StorageCredential::S3 { access_key_id, .. } => access_key_id.expose().to_owned(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn storage_credentials_win_by_longest_prefix() {
        let entries = vec![
            ("s3://b/".to_owned(), s3("short")),
            ("s3://b/wh/ns/t".to_owned(), s3("long")),
            ("s3://b/wh".to_owned(), s3("mid")),
            ("s3://b/wh/ns/t2".to_owned(), s3("other")),
        ];
        let c = select_vended_credentials(
            Some("s3://b/wh/ns/t"),
            &entries,
            &s3("config"),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "long");
        assert_eq!(c.prefix.as_deref(), Some("s3://b/wh/ns/t"));
        let c = select_vended_credentials(
            Some("s3://b/wh/other"),
            &entries,
            &BTreeMap::new(),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "mid");
    }

    #[test]
    fn config_is_used_when_no_storage_credentials() {
        let c = select_vended_credentials(
            Some("s3://b/t"),
            &[],
            &s3("config"),
            false,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(key_of(&c), "config");
    }

    #[test]
    fn incomplete_expired_scope_and_remote_signing_are_refused() {
        let now = SystemTime::now();
        let kind = |r: Result<VendedCredentials>| match r {
            Err(CatalogAccessError::CredentialVending { kind, .. }) => kind,
            other => panic!("expected vending error, got {other:?}"),
        };
        let no_secret = map(&[("s3.access-key-id", "k")]);
        assert_eq!(
            kind(select_vended_credentials(None, &[], &no_secret, false, now)),
            VendingErrorKind::Incomplete
        );
        let no_session = map(&[
            ("s3.access-key-id", "k"),
            ("s3.secret-access-key", "s"),
            ("s3.session-token-expires-at-ms", "99999999999999"),
        ]);
        assert_eq!(
            kind(select_vended_credentials(
                None,
                &[],
                &no_session,
                false,
                now
            )),
            VendingErrorKind::Incomplete
        );
        let mut expired = s3("k");
        expired.insert("s3.session-token-expires-at-ms".into(), "1000".into());
        assert_eq!(
            kind(select_vended_credentials(None, &[], &expired, false, now)),
            VendingErrorKind::Expired
        );
        let remote = map(&[("s3.signer.uri", "https://signer"), ("s3.endpoint", "x")]);
        let e = select_vended_credentials(None, &[], &remote, false, now).unwrap_err();
        assert!(e.to_string().contains("remote signing"), "{e}");
        let entries = vec![("s3://other/".to_owned(), s3("k"))];
        assert_eq!(
            kind(select_vended_credentials(
                Some("s3://b/t"),
                &entries,
                &BTreeMap::new(),
                false,
                now
            )),
            VendingErrorKind::Scope
        );
        assert_eq!(
            kind(select_vended_credentials(
                None,
                &[],
                &BTreeMap::new(),
                false,
                now
            )),
            VendingErrorKind::Unsupported
        );
    }

    #[test]
    fn non_conforming_field_names_are_named() {
        let body = serde_json::json!({
            "metadataLocation": "s3://x/m.json",
            "metadata": {"format-version": 2, "table-uuid": "u", "current-schema-id": 0,
                         "schemas": [{"type": "struct", "schema-id": 0, "fields": []}]}
        });
        let e =
            parse_load_table(&body, TableIdent::new(NamespacePath::new(["a"]), "t")).unwrap_err();
        match e {
            CatalogAccessError::Protocol { field, detail } => {
                assert_eq!(field, "metadata-location");
                assert!(detail.as_str().contains("metadataLocation"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let e =
            parse_namespace(&serde_json::json!({"namespace": "sub"}), "namespaces[0]").unwrap_err();
        assert!(
            matches!(e, CatalogAccessError::Protocol { ref field, .. } if field == "namespaces[0]")
        );
    }

    #[test]
    fn separator_is_url_decoded() {
        assert_eq!(percent_decode("%1F"), "\u{1f}");
        assert_eq!(percent_decode("%2E"), ".");
        assert_eq!(percent_decode("."), ".");
    }
}
