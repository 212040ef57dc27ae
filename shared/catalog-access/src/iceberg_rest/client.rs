//! The client: transport, the catalog configuration (`GET /v1/config`), and the
//! [`CatalogClient`] reads.

use super::auth::{AuthScheme, build_auth};
use super::parsing::{
    append_paging, as_object, filtered_properties, get_array, get_field, next_page_token,
    parse_load_table, parse_load_view, parse_namespace, percent_decode, string_map,
};
use super::vending::CachedVend;
use super::{
    ACCESS_DELEGATION_HEADER, CREDENTIAL_RENEW_MARGIN, DEFAULT_ENDPOINTS, EP_LIST_NAMESPACES,
    EP_LIST_TABLES, EP_LIST_VIEWS, EP_LOAD_NAMESPACE, EP_LOAD_TABLE, EP_LOAD_VIEW,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::{Mutex, OnceCell};
use url::Url;

use crate::error::{CatalogAccessError, Result};
use crate::http::{HttpClient, HttpResponse, classify_status};
use crate::spi::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogConnectionConfig,
    CatalogProtocol, Clock, ConnectOptions, LoadTableOutcome, Page, ResolvedCatalogCredentials,
    TableIdent, UpstreamNamespace, VendedCredentials, ViewMetadata,
};

/// The effective catalog configuration from `GET /v1/config`.
#[derive(Debug, Clone)]
pub(super) struct CatalogSettings {
    pub(super) prefix: Option<String>,
    pub(super) separator: String,
    pub(super) endpoints: HashSet<String>,
}

impl CatalogSettings {
    pub(super) fn supports(&self, endpoint: &str) -> bool {
        self.endpoints.contains(endpoint)
    }
}

/// An Iceberg REST catalog client.
#[derive(Debug)]
pub struct IcebergRestClient {
    pub(super) base: Url,
    pub(super) warehouse: Option<String>,
    pub(super) client_properties: BTreeMap<String, String>,
    pub(super) extra_headers: HeaderMap,
    pub(super) http: HttpClient,
    pub(super) auth: AuthScheme,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: OnceCell<CatalogSettings>,
    pub(super) vended: Mutex<HashMap<TableIdent, CachedVend>>,
}

impl IcebergRestClient {
    /// Validates configuration and authentication and builds a client (no I/O).
    pub fn new(
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Self> {
        let mut base = config.base_url()?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
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

    pub(super) fn url(&self, segments: &[&str]) -> Result<Url> {
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

    pub(super) async fn catalog_url(&self, tail: &[&str]) -> Result<Url> {
        let settings = self.settings().await?;
        let mut segments: Vec<&str> = vec!["v1"];
        if let Some(prefix) = &settings.prefix {
            segments.extend(prefix.split('/').filter(|s| !s.is_empty()));
        }
        segments.extend_from_slice(tail);
        self.url(&segments)
    }

    // ------------------------------------------------------------------ config

    pub(super) async fn settings(&self) -> Result<&CatalogSettings> {
        self.settings.get_or_try_init(|| self.load_settings()).await
    }

    pub(super) async fn load_settings(&self) -> Result<CatalogSettings> {
        let mut url = self.url(&["v1", "config"])?;
        if let Some(w) = &self.warehouse {
            url.query_pairs_mut().append_pair("warehouse", w);
        }
        let response = self.get(url, &[]).await?;
        let body = response.ok_json("GET /v1/config")?;
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

    pub(super) async fn require(&self, endpoint: &str, what: &str) -> Result<()> {
        if self.settings().await?.supports(endpoint) {
            Ok(())
        } else {
            Err(CatalogAccessError::unsupported(format!(
                "the catalog does not advertise `{endpoint}` ({what})"
            )))
        }
    }

    pub(super) async fn encode_namespace(&self, ns: &UpstreamNamespace) -> Result<String> {
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

    pub(super) async fn load_table_raw(
        &self,
        namespace: &UpstreamNamespace,
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
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<UpstreamNamespace>> {
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
        let body = response.ok_json("list namespaces")?;
        let obj = as_object(&body, "<list namespaces>")?;
        let next = next_page_token(obj, page_token)?;
        let items = get_array(obj, "namespaces", "namespaces")?.unwrap_or_default();
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
        namespace: &UpstreamNamespace,
    ) -> Result<BTreeMap<String, String>> {
        self.require(EP_LOAD_NAMESPACE, "load namespace").await?;
        let ns = self.encode_namespace(namespace).await?;
        let url = self.catalog_url(&["namespaces", &ns]).await?;
        let response = self.get(url, &[]).await?;
        let body = response.ok_json(&format!("load namespace {namespace}"))?;
        let obj = as_object(&body, "<load namespace>")?;
        filtered_properties(get_field(obj, "properties", "properties")?, "properties")
    }

    async fn list_tables(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        self.require(EP_LIST_TABLES, "list tables").await?;
        self.list_relations(namespace, "tables", page_token, page_size)
            .await
    }

    async fn list_views(
        &self,
        namespace: &UpstreamNamespace,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        self.require(EP_LIST_VIEWS, "list views").await?;
        self.list_relations(namespace, "views", page_token, page_size)
            .await
    }

    async fn load_table(
        &self,
        namespace: &UpstreamNamespace,
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

    async fn load_view(&self, namespace: &UpstreamNamespace, name: &str) -> Result<ViewMetadata> {
        self.require(EP_LOAD_VIEW, "load view").await?;
        let ns = self.encode_namespace(namespace).await?;
        let url = self
            .catalog_url(&["namespaces", &ns, "views", name])
            .await?;
        let response = self.get(url, &[]).await?;
        let body = response.ok_json(&format!(
            "load view {}",
            TableIdent::new(namespace.clone(), name)
        ))?;
        parse_load_view(&body, TableIdent::new(namespace.clone(), name))
    }

    async fn vend_storage_credentials(
        &self,
        namespace: &UpstreamNamespace,
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
        namespace: &UpstreamNamespace,
        kind: &str,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        let ns = self.encode_namespace(namespace).await?;
        let mut url = self.catalog_url(&["namespaces", &ns, kind]).await?;
        append_paging(&mut url.query_pairs_mut(), page_token, page_size);
        let response = self.get(url, &[]).await?;
        let body = response.ok_json(&format!("list {kind} in {namespace}"))?;
        let obj = as_object(&body, &format!("<list {kind}>"))?;
        let next = next_page_token(obj, page_token)?;
        let items = get_array(obj, "identifiers", "identifiers")?.unwrap_or_default();
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
