//! Delta Sharing provider.
//!
//! Speaks the Delta Sharing REST protocol (delta-io `PROTOCOL.md`) as a recipient: the
//! integration URI is the sharing server endpoint of the recipient's profile (prefix
//! included, e.g. `https://host/delta-sharing` or unitycatalog-rs's
//! `http://host/api/v1/delta-sharing`) and the only authentication is the recipient bearer
//! token, because the protocol defines no other scheme.
//!
//! # Namespace model
//!
//! Shares and schemas form a two-level namespace `[share, schema]`; tables live in schemas.
//! `list_namespaces(None)` lists shares as one-level paths, `list_namespaces([share])` lists
//! that share's schemas, and a schema has no child namespaces.
//!
//! # Table metadata
//!
//! `GET .../metadata` answers NDJSON with a `protocol` and a `metaData` line. Lines are
//! identified by their key, never by position: unitycatalog-rs sends `metaData` first. The
//! schema comes from `metaData.schemaString` (a Spark `StructType` as JSON) and is converted
//! to an Iceberg-style schema. The table `id` from the listing (qualified by the share id
//! when the server sends one) is the stable identity; without it the identity is unstable.
//! Conditional loads use the table version (`Delta-Table-Version`) as the entity tag.
//!
//! # Credential vending
//!
//! Delta Sharing access modes: a table listing `accessModes` with `dir` is asked
//! for credentials (`POST .../temporary-table-credentials`); a table offering only `url`
//! access is refused by name, because presigned per-file URLs cannot be represented as
//! storage credentials; a table stating no access modes is asked anyway (the reference server
//! implements the endpoint but never sends the field) unless the connection property
//! [`STRICT_ACCESS_MODES`] is `true`, which restores the protocol's reading of an absent field
//! as url-only. A server without the endpoint (404) reports vending unsupported.
//!
//! Delta Sharing has no views: capabilities say so and the view calls answer `Unsupported`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use url::Url;

use crate::error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
use crate::field_ids;
use crate::http::{HttpClient, HttpResponse, RetryMode, classify_status};
use crate::spi::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogClientProvider,
    CatalogConnectionConfig, CatalogProtocol, Clock, ConnectOptions, LoadTableOutcome,
    NamespacePath, Page, ResolvedCatalogCredentials, SecretString, StorageCredential, TableFormat,
    TableIdent, TableMetadata, VendedCredentials, is_secret_key,
};

/// Connection property: `true` reads a table without `accessModes` as url-only (the
/// protocol's reading) and refuses to vend for it without asking. Default `false`.
pub const STRICT_ACCESS_MODES: &str = "delta.sharing.strict-access-modes";

/// Most pages followed when looking a table up through its schema's listing.
const MAX_LOOKUP_PAGES: usize = 1000;

/// Cached vended credentials are renewed when they expire within this margin.
pub(crate) const RENEW_MARGIN: Duration = Duration::from_secs(300);

/// The Delta Sharing [`CatalogClientProvider`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaSharingProvider;

impl CatalogClientProvider for DeltaSharingProvider {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::DeltaSharing
    }

    fn connect(
        &self,
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Box<dyn CatalogClient>> {
        Ok(Box::new(DeltaSharingClient::connect(
            config,
            auth,
            credentials,
            options,
        )?))
    }
}

/// What a table listing says about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TableEntry {
    name: String,
    id: Option<String>,
    share_id: Option<String>,
    location: Option<String>,
    /// `None` when the server stated no access modes.
    access_modes: Option<Vec<String>>,
}

/// A connected Delta Sharing client.
pub struct DeltaSharingClient {
    base: Url,
    http: HttpClient,
    token: SecretString,
    strict_access_modes: bool,
    extra_headers: Vec<(String, String)>,
    clock: Arc<dyn Clock>,
    tables: Mutex<HashMap<TableIdent, TableEntry>>,
    vended: VendCache,
}

impl fmt::Debug for DeltaSharingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaSharingClient")
            .field("base", &self.base.as_str())
            .field("strict_access_modes", &self.strict_access_modes)
            .finish_non_exhaustive()
    }
}

impl DeltaSharingClient {
    /// Validates the configuration and builds a client; no I/O.
    pub fn connect(
        config: &CatalogConnectionConfig,
        auth: &CatalogAuthentication,
        credentials: ResolvedCatalogCredentials,
        options: &ConnectOptions,
    ) -> Result<Self> {
        let base = config.validate()?;
        let token = match (auth, credentials) {
            (CatalogAuthentication::Bearer, ResolvedCatalogCredentials::Token(t)) => {
                if t.is_empty() {
                    return Err(CatalogAccessError::config(
                        "Delta Sharing bearer authentication needs a non-empty recipient token",
                    ));
                }
                t
            }
            (CatalogAuthentication::Bearer, other) => {
                return Err(CatalogAccessError::config(format!(
                    "Delta Sharing bearer authentication needs a TOKEN credential, got {}",
                    other.kind_name()
                )));
            }
            (other, _) => {
                return Err(CatalogAccessError::unsupported(format!(
                    "Delta Sharing accepts only bearer authentication (the recipient token); \
                     {} is not defined by the sharing protocol",
                    other.scheme_name()
                )));
            }
        };
        let strict_access_modes = match config.property(STRICT_ACCESS_MODES) {
            None => false,
            Some(v) if v.trim().eq_ignore_ascii_case("true") => true,
            Some(v) if v.trim().eq_ignore_ascii_case("false") => false,
            Some(_) => {
                return Err(CatalogAccessError::config(format!(
                    "property `{STRICT_ACCESS_MODES}` must be `true` or `false`"
                )));
            }
        };
        let extra_headers = config
            .extra_headers()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok(Self {
            base,
            http: HttpClient::new(options.http.clone())?
                .for_protocol(CatalogProtocol::DeltaSharing),
            token,
            strict_access_modes,
            extra_headers,
            clock: options.clock.clone(),
            tables: Mutex::new(HashMap::new()),
            vended: VendCache::default(),
        })
    }

    fn url(&self, segments: &[&str]) -> Result<Url> {
        let mut url = self.base.clone();
        url.set_query(None);
        {
            let mut path = url.path_segments_mut().map_err(|()| {
                CatalogAccessError::config("the Delta Sharing endpoint cannot take a path")
            })?;
            path.pop_if_empty();
            path.extend(segments);
        }
        Ok(url)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<HttpResponse> {
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(self.token.expose());
        for (k, v) in &self.extra_headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(b) = body {
            req = req
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/json; charset=utf-8",
                )
                .body(b.to_string());
        }
        let req = req.build().map_err(|e| {
            CatalogAccessError::config(format!("cannot build request: {}", e.without_url()))
        })?;
        // Every Delta Sharing call is a read, the credentials POST included (it creates
        // nothing upstream), so all of them may be retried.
        self.http.execute(req, RetryMode::IdempotentRead).await
    }

    async fn list_page(
        &self,
        segments: &[&str],
        page_token: Option<&str>,
        page_size: Option<u32>,
        what: &str,
    ) -> Result<(Vec<Value>, Option<String>)> {
        let mut url = self.url(segments)?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(n) = page_size {
                q.append_pair("maxResults", &n.min(i32::MAX as u32).to_string());
            }
            if let Some(t) = page_token {
                q.append_pair("pageToken", t);
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let resp = self.send(reqwest::Method::GET, url, None).await?;
        if resp.status != 200 {
            return Err(classify_status(&resp, what));
        }
        let v = resp.json_value()?;
        let items = list_field(&v, "items")?;
        let next = next_token(&v, "nextPageToken", page_token)?;
        Ok((items, next))
    }

    fn cache_entries(&self, namespace: &NamespacePath, entries: &[TableEntry]) {
        let mut cache = lock(&self.tables);
        let mut seen = std::collections::HashSet::new();
        for e in entries {
            // A page that lists a table twice: the first entry stands.
            if seen.insert(e.name.as_str()) {
                cache.insert(
                    TableIdent::new(namespace.clone(), e.name.clone()),
                    e.clone(),
                );
            }
        }
    }

    /// The listing entry for a table: cached from an earlier listing, else found by paging
    /// through its schema's listing (names match case-insensitively, as in the protocol).
    async fn table_entry(&self, share: &str, schema: &str, name: &str) -> Result<TableEntry> {
        let namespace = NamespacePath::new([share, schema]);
        let ident = TableIdent::new(namespace.clone(), name);
        if let Some(e) = lock(&self.tables).get(&ident) {
            return Ok(e.clone());
        }
        let mut token: Option<String> = None;
        for _ in 0..MAX_LOOKUP_PAGES {
            let (items, next) = self
                .list_page(
                    &["shares", share, "schemas", schema, "tables"],
                    token.as_deref(),
                    None,
                    "list tables",
                )
                .await?;
            let entries = parse_table_entries(&items)?;
            self.cache_entries(&namespace, &entries);
            if let Some(e) = entries.iter().find(|e| e.name.eq_ignore_ascii_case(name)) {
                return Ok(e.clone());
            }
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
            "table `{name}` is not listed in share `{share}` schema `{schema}`"
        ))))
    }

    /// Fails with `NotFound` unless the share exists. Some servers answer a listing under a
    /// missing share or schema with an empty `200`; a missing parent is not an empty one.
    async fn require_share(&self, share: &str) -> Result<()> {
        let resp = self
            .send(reqwest::Method::GET, self.url(&["shares", share])?, None)
            .await?;
        match resp.status {
            200 => Ok(()),
            404 => Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
                "share `{share}` does not exist upstream"
            )))),
            _ => Err(classify_status(&resp, "get share")),
        }
    }

    /// Fails with `NotFound` unless the share lists the schema (the protocol has no schema
    /// lookup; names match case-insensitively).
    async fn require_schema(&self, share: &str, schema: &str) -> Result<()> {
        let mut token: Option<String> = None;
        for _ in 0..MAX_LOOKUP_PAGES {
            let (items, next) = self
                .list_page(
                    &["shares", share, "schemas"],
                    token.as_deref(),
                    None,
                    "list schemas",
                )
                .await?;
            let listed = items.iter().any(|it| {
                it.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.eq_ignore_ascii_case(schema))
            });
            if listed {
                return Ok(());
            }
            if items.is_empty() && next.is_none() && token.is_none() {
                // An empty schema listing may itself hide a missing share.
                self.require_share(share).await?;
            }
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
            "schema `{schema}` does not exist in share `{share}` upstream"
        ))))
    }

    async fn table_version(&self, share: &str, schema: &str, name: &str) -> Result<i64> {
        let url = self.url(&[
            "shares", share, "schemas", schema, "tables", name, "version",
        ])?;
        let resp = self.send(reqwest::Method::GET, url, None).await?;
        if resp.status != 200 {
            return Err(classify_status(&resp, "query table version"));
        }
        version_header(&resp)?.ok_or_else(|| {
            CatalogAccessError::protocol(
                "delta-table-version",
                "the version answer carries no Delta-Table-Version header",
            )
        })
    }

    async fn request_credentials(
        &self,
        share: &str,
        schema: &str,
        name: &str,
        entry: &TableEntry,
    ) -> Result<VendedCredentials> {
        let url = self.url(&[
            "shares",
            share,
            "schemas",
            schema,
            "tables",
            name,
            "temporary-table-credentials",
        ])?;
        // No `location`: the server answers for the table's main location.
        let resp = self
            .send(reqwest::Method::POST, url, Some(&json!({})))
            .await?;
        match resp.status {
            200 => {}
            404 => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    format!(
                        "the sharing server has no temporary-table-credentials endpoint for \
                         table `{name}` (HTTP 404); it offers no directory access"
                    ),
                ));
            }
            403 => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    format!(
                        "the sharing server refused directory access to table `{name}` \
                         (HTTP 403)"
                    ),
                ));
            }
            _ => return Err(classify_status(&resp, "temporary table credentials")),
        }
        let v = resp.json_value()?;
        let creds = parse_sharing_credentials(&v, entry.location.as_deref())?;
        check_fresh_and_scoped(&creds, self.clock.now(), entry.location.as_deref())?;
        Ok(creds)
    }
}

fn split_schema_ns(namespace: &NamespacePath) -> Result<(&str, &str)> {
    match namespace.levels() {
        [share, schema] => Ok((share.as_str(), schema.as_str())),
        _ => Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
            "Delta Sharing namespaces are [share, schema]; `{namespace}` has {} level(s)",
            namespace.levels().len()
        )))),
    }
}

#[async_trait]
impl CatalogClient for DeltaSharingClient {
    fn protocol(&self) -> CatalogProtocol {
        CatalogProtocol::DeltaSharing
    }

    async fn capabilities(&self) -> Result<CatalogCapabilities> {
        Ok(CatalogCapabilities {
            list_namespaces: true,
            list_tables: true,
            list_views: false,
            load_views: false,
            vend_storage_credentials: true,
            stable_ids: true,
        })
    }

    async fn check_connection(&self) -> Result<()> {
        self.list_page(&["shares"], None, Some(1), "list shares")
            .await
            .map(|_| ())
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespacePath>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<NamespacePath>> {
        let levels = parent.map(NamespacePath::levels).unwrap_or_default();
        match levels {
            [] => {
                let (items, next) = self
                    .list_page(&["shares"], page_token, page_size, "list shares")
                    .await?;
                let items = items
                    .iter()
                    .enumerate()
                    .map(|(i, it)| {
                        required_str(it, "name", &format!("items[{i}].name"))
                            .map(|n| NamespacePath::new([n]))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Page {
                    items: dedup(items),
                    next_page_token: next,
                })
            }
            [share] => {
                let (items, next) = self
                    .list_page(
                        &["shares", share, "schemas"],
                        page_token,
                        page_size,
                        "list schemas",
                    )
                    .await?;
                let items = items
                    .iter()
                    .enumerate()
                    .map(|(i, it)| {
                        required_str(it, "name", &format!("items[{i}].name"))
                            .map(|n| NamespacePath::new([share.as_str(), n]))
                    })
                    .collect::<Result<Vec<_>>>()?;
                if items.is_empty() && next.is_none() && page_token.is_none() {
                    self.require_share(share).await?;
                }
                Ok(Page {
                    items: dedup(items),
                    next_page_token: next,
                })
            }
            [_, _] => Ok(Page {
                items: Vec::new(),
                next_page_token: None,
            }),
            _ => Err(CatalogAccessError::NotFound(BoundedText::ours(
                "Delta Sharing namespaces have at most two levels [share, schema]",
            ))),
        }
    }

    async fn list_tables(
        &self,
        namespace: &NamespacePath,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<TableIdent>> {
        if let [share] = namespace.levels() {
            // A share holds schemas, not tables: an existing one lists no tables.
            self.require_share(share).await?;
            return Ok(Page {
                items: Vec::new(),
                next_page_token: None,
            });
        }
        let (share, schema) = split_schema_ns(namespace)?;
        let (items, next) = self
            .list_page(
                &["shares", share, "schemas", schema, "tables"],
                page_token,
                page_size,
                "list tables",
            )
            .await?;
        let entries = parse_table_entries(&items)?;
        if entries.is_empty() && next.is_none() && page_token.is_none() {
            self.require_schema(share, schema).await?;
        }
        self.cache_entries(namespace, &entries);
        Ok(Page {
            items: dedup(
                entries
                    .into_iter()
                    .map(|e| TableIdent::new(namespace.clone(), e.name))
                    .collect(),
            ),
            next_page_token: next,
        })
    }

    async fn load_table(
        &self,
        namespace: &NamespacePath,
        name: &str,
        if_none_match: Option<&str>,
    ) -> Result<LoadTableOutcome> {
        let (share, schema) = split_schema_ns(namespace)?;
        if let Some(tag) = if_none_match {
            let version = self.table_version(share, schema, name).await?;
            if etag_of(version) == tag {
                return Ok(LoadTableOutcome::NotModified);
            }
        }
        let entry = self.table_entry(share, schema, name).await?;
        let url = self.url(&[
            "shares", share, "schemas", schema, "tables", name, "metadata",
        ])?;
        let resp = self.send(reqwest::Method::GET, url, None).await?;
        if resp.status != 200 {
            return Err(classify_status(&resp, "query table metadata"));
        }
        let version = version_header(&resp)?;
        let parsed = parse_metadata_ndjson(&resp.body)?;
        let schema_json = parse_schema_string(&parsed.schema_string)?;
        let mut properties: BTreeMap<String, String> = parsed
            .configuration
            .into_iter()
            .filter(|(k, _)| !is_secret_key(k))
            .collect();
        properties.insert("delta.format.provider".into(), parsed.format_provider);
        if let Some(v) = parsed.min_reader_version {
            properties.insert("delta.minReaderVersion".into(), v.to_string());
        }
        if !parsed.partition_columns.is_empty() {
            properties.insert(
                "delta.partitionColumns".into(),
                parsed.partition_columns.join(","),
            );
        }
        if let Some(d) = parsed.description {
            properties.insert("comment".into(), d);
        }
        if let Some(v) = version {
            properties.insert("delta-sharing.table-version".into(), v.to_string());
        }
        let stable_id = entry.id.as_ref().map(|id| match &entry.share_id {
            // Table ids are unique only within a share; qualify them by the share's id.
            Some(share_id) => format!("{share_id}/{id}"),
            None => format!("{share}/{id}"),
        });
        Ok(LoadTableOutcome::Loaded {
            metadata: Box::new(TableMetadata {
                identifier: TableIdent::new(namespace.clone(), entry.name.clone()),
                format: TableFormat::Delta,
                schema: schema_json,
                location: entry.location.clone(),
                metadata_location: None,
                stable_id,
                properties,
            }),
            etag: version.map(etag_of),
        })
    }

    async fn vend_storage_credentials(
        &self,
        namespace: &NamespacePath,
        name: &str,
    ) -> Result<VendedCredentials> {
        let (share, schema) = split_schema_ns(namespace)?;
        let ident = TableIdent::new(namespace.clone(), name);
        if let Some(c) = self.vended.fresh(&ident, self.clock.now()) {
            return Ok(c);
        }
        let entry = self.table_entry(share, schema, name).await?;
        match &entry.access_modes {
            Some(modes) if modes.iter().any(|m| m.eq_ignore_ascii_case("dir")) => {}
            Some(modes) => {
                let stated = if modes.is_empty() {
                    "none".to_owned()
                } else {
                    modes.join(", ")
                };
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    format!(
                        "table `{name}` offers only url access (accessModes: {stated}): \
                         presigned per-file URLs cannot be represented as storage \
                         credentials; the provider must share it with directory (dir) access"
                    ),
                ));
            }
            None if self.strict_access_modes => {
                return Err(CatalogAccessError::vending(
                    VendingErrorKind::Unsupported,
                    format!(
                        "table `{name}` states no access modes, which \
                         {STRICT_ACCESS_MODES}=true reads as url access only"
                    ),
                ));
            }
            None => {}
        }
        let creds = self
            .request_credentials(share, schema, name, &entry)
            .await?;
        self.vended.store(ident, creds.clone());
        Ok(creds)
    }
}

// ---------------------------------------------------------------------------------------
// Shared helpers (also used by the Unity provider)
// ---------------------------------------------------------------------------------------

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps are caches: a panic elsewhere leaves them usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Process-local cache of vended credentials per table, renewed near expiry. Holds no
/// credential longer than its stated expiry (minus [`RENEW_MARGIN`]).
#[derive(Default)]
pub(crate) struct VendCache {
    entries: Mutex<HashMap<TableIdent, VendedCredentials>>,
}

impl VendCache {
    /// Cached credentials that do not expire within the renewal margin. Credentials without
    /// a stated expiry are not reused: nothing says how long they stay valid.
    pub(crate) fn fresh(&self, ident: &TableIdent, now: SystemTime) -> Option<VendedCredentials> {
        let mut entries = lock(&self.entries);
        match entries.get(ident) {
            Some(c) if c.expires_at.is_some() && !c.expires_within(now, RENEW_MARGIN) => {
                Some(c.clone())
            }
            Some(_) => {
                entries.remove(ident);
                None
            }
            None => None,
        }
    }

    pub(crate) fn store(&self, ident: TableIdent, creds: VendedCredentials) {
        lock(&self.entries).insert(ident, creds);
    }
}

/// A list field that may be missing or `null` (treated as empty, as real servers answer
/// `{}` for an empty list) but must otherwise be an array.
pub(crate) fn list_field(v: &Value, field: &str) -> Result<Vec<Value>> {
    if !v.is_object() {
        return Err(CatalogAccessError::protocol(
            "<body>",
            "expected a JSON object",
        ));
    }
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a.clone()),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected an array")),
    }
}

/// Drops repeated entries of one listing page, keeping the first in place (a real server
/// listed one schema twice).
pub(crate) fn dedup<T: std::hash::Hash + Eq + Clone>(items: Vec<T>) -> Vec<T> {
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// A next-page token: missing, `null` and `""` all mean "last page". A token equal to the
/// one just sent would make a caller loop forever and is refused.
pub(crate) fn next_token(v: &Value, field: &str, sent: Option<&str>) -> Result<Option<String>> {
    let token = match v.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(CatalogAccessError::protocol(field, "expected a string")),
    };
    if token.is_some() && token.as_deref() == sent {
        return Err(CatalogAccessError::protocol(
            field,
            "the server answered the page token it was given; refusing to loop",
        ));
    }
    Ok(token)
}

pub(crate) fn required_str<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a str> {
    match v.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(CatalogAccessError::protocol(path, "is empty")),
        Some(_) => Err(CatalogAccessError::protocol(path, "expected a string")),
        None => Err(CatalogAccessError::protocol(path, "is missing")),
    }
}

pub(crate) fn optional_str(v: &Value, key: &str, path: &str) -> Result<Option<String>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(CatalogAccessError::protocol(path, "expected a string")),
    }
}

/// Epoch milliseconds to a time; negative or absurd values are a protocol error. A string
/// of decimal digits is read as the number it spells: proto3 JSON renders int64 fields as
/// strings, and unitycatalog-rs sends `expiration_time` that way.
pub(crate) fn epoch_ms(v: &Value, path: &str) -> Result<Option<SystemTime>> {
    let ms = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .ok_or_else(|| {
                CatalogAccessError::protocol(path, "expected non-negative epoch milliseconds")
            })?,
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s
            .parse::<u64>()
            .map_err(|_| CatalogAccessError::protocol(path, "epoch milliseconds overflow"))?,
        _ => {
            return Err(CatalogAccessError::protocol(
                path,
                "expected epoch milliseconds",
            ));
        }
    };
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .map(Some)
        .ok_or_else(|| CatalogAccessError::protocol(path, "epoch milliseconds overflow"))
}

/// Reads one secret part of a vended credential; a missing or empty part makes the set
/// incomplete. The error names the field, never the value.
pub(crate) fn secret_part(obj: &Value, key: &str, path: &str) -> Result<SecretString> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(SecretString::new(s.clone())),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(CatalogAccessError::vending(
            VendingErrorKind::Incomplete,
            format!("vended credentials lack `{path}`"),
        )),
        Some(_) => Err(CatalogAccessError::vending(
            VendingErrorKind::Incomplete,
            format!("vended credential `{path}` is not a string"),
        )),
    }
}

/// Refuses credentials that are already expired or do not cover the table root.
pub(crate) fn check_fresh_and_scoped(
    creds: &VendedCredentials,
    now: SystemTime,
    table_location: Option<&str>,
) -> Result<()> {
    if creds.expires_within(now, Duration::ZERO) {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Expired,
            "the catalog vended credentials that are already expired",
        ));
    }
    if let Some(loc) = table_location
        && !creds.covers(loc)
    {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Scope,
            format!(
                "the vended credentials are scoped to `{}`, which does not cover the table \
                 location `{loc}`",
                creds.prefix.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Delta Sharing parsing
// ---------------------------------------------------------------------------------------

fn etag_of(version: i64) -> String {
    format!("v{version}")
}

fn version_header(resp: &HttpResponse) -> Result<Option<i64>> {
    match resp.header("delta-table-version") {
        None => Ok(None),
        Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| {
            CatalogAccessError::protocol("delta-table-version", "not an integer version")
        }),
    }
}

fn parse_table_entries(items: &[Value]) -> Result<Vec<TableEntry>> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let p = |k: &str| format!("items[{i}].{k}");
            let access_modes = match it.get("accessModes") {
                None | Some(Value::Null) => None,
                Some(Value::Array(a)) => Some(
                    a.iter()
                        .map(|m| {
                            m.as_str().map(str::to_owned).ok_or_else(|| {
                                CatalogAccessError::protocol(p("accessModes"), "expected strings")
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                ),
                Some(_) => {
                    return Err(CatalogAccessError::protocol(
                        p("accessModes"),
                        "expected an array",
                    ));
                }
            };
            Ok(TableEntry {
                name: required_str(it, "name", &p("name"))?.to_owned(),
                id: optional_str(it, "id", &p("id"))?,
                // `share_id` (snake case) is what some servers send instead.
                share_id: match optional_str(it, "shareId", &p("shareId"))? {
                    Some(id) => Some(id),
                    None => optional_str(it, "share_id", &p("share_id"))?,
                },
                location: optional_str(it, "location", &p("location"))?,
                access_modes,
            })
        })
        .collect()
}

/// What the metadata NDJSON says.
#[derive(Debug)]
struct ParsedMetadata {
    min_reader_version: Option<i64>,
    schema_string: String,
    format_provider: String,
    partition_columns: Vec<String>,
    configuration: BTreeMap<String, String>,
    description: Option<String>,
}

/// Parses the metadata NDJSON by key: each line is one object whose single wrapper key
/// says what it is. Order is irrelevant; unknown wrapper keys are ignored.
fn parse_metadata_ndjson(body: &[u8]) -> Result<ParsedMetadata> {
    let text = std::str::from_utf8(body)
        .map_err(|_| CatalogAccessError::protocol("<body>", "metadata answer is not UTF-8"))?;
    let mut protocol: Option<Value> = None;
    let mut meta: Option<Value> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            CatalogAccessError::protocol(
                "<body>",
                format!(
                    "metadata line {} is not JSON (column {})",
                    n + 1,
                    e.column()
                ),
            )
        })?;
        let Value::Object(obj) = v else {
            return Err(CatalogAccessError::protocol(
                "<body>",
                format!("metadata line {} is not a JSON object", n + 1),
            ));
        };
        for (key, value) in obj {
            match key.as_str() {
                "protocol" if protocol.is_none() => protocol = Some(value),
                "metaData" if meta.is_none() => meta = Some(value),
                "protocol" | "metaData" => {
                    return Err(CatalogAccessError::protocol(
                        key,
                        "appears more than once in the metadata answer",
                    ));
                }
                _ => {}
            }
        }
    }
    let meta = meta.ok_or_else(|| CatalogAccessError::protocol("metaData", "no metaData line"))?;
    let min_reader_version = match &protocol {
        Some(p) => match p.get("minReaderVersion") {
            Some(Value::Number(n)) => n.as_i64(),
            None | Some(Value::Null) => None,
            Some(_) => {
                return Err(CatalogAccessError::protocol(
                    "protocol.minReaderVersion",
                    "expected an integer",
                ));
            }
        },
        None => None,
    };
    let schema_string = required_str(&meta, "schemaString", "metaData.schemaString")?.to_owned();
    let format_provider = match meta.get("format") {
        None | Some(Value::Null) => "parquet".to_owned(),
        Some(f) => required_str(f, "provider", "metaData.format.provider")?.to_owned(),
    };
    let partition_columns = match meta.get("partitionColumns") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|c| {
                c.as_str().map(str::to_owned).ok_or_else(|| {
                    CatalogAccessError::protocol("metaData.partitionColumns", "expected strings")
                })
            })
            .collect::<Result<Vec<_>>>()?,
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "metaData.partitionColumns",
                "expected an array",
            ));
        }
    };
    let configuration = match meta.get("configuration") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect(),
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "metaData.configuration",
                "expected an object",
            ));
        }
    };
    Ok(ParsedMetadata {
        min_reader_version,
        schema_string,
        format_provider,
        partition_columns,
        configuration,
        description: optional_str(&meta, "description", "metaData.description")?,
    })
}

fn parse_schema_string(schema_string: &str) -> Result<Value> {
    let v: Value = serde_json::from_str(schema_string).map_err(|e| {
        CatalogAccessError::protocol(
            "metaData.schemaString",
            format!("not JSON (column {})", e.column()),
        )
    })?;
    spark_struct_to_iceberg(&v, "metaData.schemaString")
}

/// Parses a credentials answer: the directory-access shape wraps the credential in
/// `credentials` (with its `location`); some servers answer the unwrapped object. Both are
/// read; `expirationTime` is looked for inside and outside the wrapper.
fn parse_sharing_credentials(v: &Value, table_location: Option<&str>) -> Result<VendedCredentials> {
    if !v.is_object() {
        return Err(CatalogAccessError::protocol(
            "<body>",
            "expected a JSON object",
        ));
    }
    let (inner, path) = match v.get("credentials") {
        Some(c @ Value::Object(_)) => (c, "credentials."),
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                "credentials",
                "expected an object",
            ));
        }
        None => (v, ""),
    };
    let credential = if let Some(aws) = inner.get("awsTempCredentials").filter(|a| !a.is_null()) {
        let p = |k: &str| format!("{path}awsTempCredentials.{k}");
        StorageCredential::S3 {
            access_key_id: secret_part(aws, "accessKeyId", &p("accessKeyId"))?,
            secret_access_key: secret_part(aws, "secretAccessKey", &p("secretAccessKey"))?,
            session_token: Some(secret_part(aws, "sessionToken", &p("sessionToken"))?),
        }
    } else if let Some(az) = inner.get("azureUserDelegationSas").filter(|a| !a.is_null()) {
        StorageCredential::AzureSas {
            sas_token: secret_part(
                az,
                "sasToken",
                &format!("{path}azureUserDelegationSas.sasToken"),
            )?,
        }
    } else if let Some(gcp) = inner.get("gcpOauthToken").filter(|a| !a.is_null()) {
        StorageCredential::GcsOauthToken {
            token: secret_part(
                gcp,
                "oauthToken",
                &format!("{path}gcpOauthToken.oauthToken"),
            )?,
        }
    } else {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Incomplete,
            "the credentials answer carries no awsTempCredentials, azureUserDelegationSas or \
             gcpOauthToken",
        ));
    };
    let expiry = match inner
        .get("expirationTime")
        .or_else(|| v.get("expirationTime"))
    {
        Some(e) => epoch_ms(e, &format!("{path}expirationTime"))?,
        None => None,
    };
    let prefix = optional_str(inner, "location", &format!("{path}location"))?
        .or_else(|| table_location.map(str::to_owned));
    Ok(VendedCredentials {
        prefix,
        credential,
        expires_at: expiry,
        settings: BTreeMap::new(),
    })
}

// ---------------------------------------------------------------------------------------
// Spark schema -> Iceberg-style schema
// ---------------------------------------------------------------------------------------

/// Field-metadata key of a Delta column-mapping id.
const MAPPING_ID: &str = "delta.columnMapping.id";
/// Field-metadata key of a Delta column's physical name (the prefix of its nested-id keys).
const PHYSICAL_NAME: &str = "delta.columnMapping.physicalName";
/// Field-metadata keys holding the ids of a column's list elements and map keys/values,
/// keyed `<physical name>.element`, `<physical name>.key`, `<physical name>.value`, ...
const NESTED_IDS: &[&str] = &["delta.columnMapping.nested.ids", "parquet.field.nested.ids"];

/// Field ids while converting: ids fixed by Delta column mapping are used as they are and
/// remembered (the schema lists them under [`field_ids::UPSTREAM_FIELD_IDS`]); every other
/// id is fresh, above the highest fixed one, in Iceberg's breadth-first order.
struct Ids {
    next: i64,
    pinned: Vec<i64>,
}

impl Ids {
    /// Starts above every column-mapping id that `v` mentions.
    fn for_schema<'a>(values: impl IntoIterator<Item = &'a Value>) -> Self {
        fn max_pin(v: &Value, max: &mut i64) {
            match v {
                Value::Object(o) => {
                    for (k, x) in o {
                        if k == MAPPING_ID {
                            *max = (*max).max(x.as_i64().unwrap_or(0));
                        } else if NESTED_IDS.contains(&k.as_str()) {
                            for id in x.as_object().into_iter().flat_map(|m| m.values()) {
                                *max = (*max).max(id.as_i64().unwrap_or(0));
                            }
                        }
                        max_pin(x, max);
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| max_pin(x, max)),
                _ => {}
            }
        }
        let mut next = 0;
        for v in values {
            max_pin(v, &mut next);
        }
        Self {
            next,
            pinned: Vec::new(),
        }
    }

    fn fresh(&mut self) -> i64 {
        self.next += 1;
        self.next
    }

    /// The id fixed upstream (`raw`, found at `path`), or a fresh one when there is none.
    fn fixed_or_fresh(&mut self, raw: Option<&Value>, path: &str) -> Result<i64> {
        match raw {
            None | Some(Value::Null) => Ok(self.fresh()),
            Some(v) => match v.as_i64() {
                Some(id) if id >= 1 => {
                    if self.pinned.contains(&id) {
                        return Err(CatalogAccessError::protocol(
                            path,
                            format!("column mapping id {id} is given to two fields"),
                        ));
                    }
                    self.pinned.push(id);
                    Ok(id)
                }
                _ => Err(CatalogAccessError::protocol(
                    path,
                    "expected a positive integer field id",
                )),
            },
        }
    }

    /// The converted root struct, listing the upstream-fixed ids.
    fn schema(mut self, fields: Vec<Value>) -> Value {
        self.pinned.sort_unstable();
        json!({
            "type": "struct",
            "schema-id": 0,
            "fields": fields,
            field_ids::UPSTREAM_FIELD_IDS: self.pinned,
        })
    }
}

/// Where the nested ids of a column's collection members are looked up: the column's
/// nested-id map and the key of the member being converted.
#[derive(Clone, Copy)]
struct NestedIds<'a> {
    ids: Option<&'a Map<String, Value>>,
    field_path: &'a str,
}

/// Converts a Spark `StructType` JSON (`{"type":"struct","fields":[...]}`) to an
/// Iceberg-style schema `{"type":"struct","schema-id":0,"fields":[...]}`. Field ids are
/// Delta column-mapping ids where the table has them; the others are assigned fresh,
/// breadth-first per struct as Iceberg does (a struct's fields first, then their nested
/// types). The root lists the column-mapping ids under
/// [`field_ids::UPSTREAM_FIELD_IDS`], so that [`field_ids::stabilize`] can keep the fresh
/// ones stable across loads. `path` names the source field in errors.
pub(crate) fn spark_struct_to_iceberg(v: &Value, path: &str) -> Result<Value> {
    let Value::Object(obj) = v else {
        return Err(CatalogAccessError::protocol(
            path,
            "expected a struct type object",
        ));
    };
    if obj.get("type").and_then(Value::as_str) != Some("struct") {
        return Err(CatalogAccessError::protocol(
            path,
            "expected \"type\": \"struct\"",
        ));
    }
    let mut ids = Ids::for_schema([v]);
    let fields = convert_struct_fields(obj, &mut ids, path)?;
    Ok(ids.schema(fields))
}

/// Converts a list of Spark `StructField`s (e.g. Unity columns) into an Iceberg-style
/// schema, assigning ids the same way as [`spark_struct_to_iceberg`].
pub(crate) fn spark_fields_to_iceberg(fields: &[(Value, String)]) -> Result<Value> {
    let mut ids = Ids::for_schema(fields.iter().map(|(f, _)| f));
    let mut assigned = Vec::with_capacity(fields.len());
    for (field, path) in fields {
        assigned.push(ids.fixed_or_fresh(mapping_id(field), &format!("{path}.metadata"))?);
    }
    let mut out = Vec::with_capacity(fields.len());
    for ((field, path), id) in fields.iter().zip(assigned) {
        out.push(convert_field(field, id, &mut ids, path)?);
    }
    Ok(ids.schema(out))
}

fn mapping_id(field: &Value) -> Option<&Value> {
    field.get("metadata").and_then(|m| m.get(MAPPING_ID))
}

fn convert_struct_fields(
    obj: &Map<String, Value>,
    ids: &mut Ids,
    path: &str,
) -> Result<Vec<Value>> {
    let fields = match obj.get("fields") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => {
            return Err(CatalogAccessError::protocol(
                format!("{path}.fields"),
                "is missing",
            ));
        }
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                format!("{path}.fields"),
                "expected an array",
            ));
        }
    };
    let assigned = fields
        .iter()
        .enumerate()
        .map(|(i, f)| ids.fixed_or_fresh(mapping_id(f), &format!("{path}.fields[{i}].metadata")))
        .collect::<Result<Vec<i64>>>()?;
    fields
        .iter()
        .zip(assigned)
        .enumerate()
        .map(|(i, (f, id))| convert_field(f, id, ids, &format!("{path}.fields[{i}]")))
        .collect()
}

fn convert_field(field: &Value, id: i64, ids: &mut Ids, path: &str) -> Result<Value> {
    let name = required_str(field, "name", &format!("{path}.name"))?;
    let ty = field
        .get("type")
        .ok_or_else(|| CatalogAccessError::protocol(format!("{path}.type"), "is missing"))?;
    let nullable = match field.get("nullable") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                format!("{path}.nullable"),
                "expected a boolean",
            ));
        }
    };
    let metadata = field.get("metadata");
    let nested = NestedIds {
        ids: metadata.and_then(|m| {
            NESTED_IDS
                .iter()
                .find_map(|k| m.get(*k).and_then(Value::as_object))
        }),
        field_path: metadata
            .and_then(|m| m.get(PHYSICAL_NAME))
            .and_then(Value::as_str)
            .unwrap_or(name),
    };
    let ty = convert_type(ty, ids, nested, "", &format!("{path}.type"))?;
    let mut out = json!({"id": id, "name": name, "required": !nullable, "type": ty});
    if let (Some(obj), Some(doc)) = (
        out.as_object_mut(),
        metadata
            .and_then(|m| m.get("comment"))
            .and_then(Value::as_str),
    ) {
        obj.insert("doc".into(), json!(doc));
    }
    Ok(out)
}

/// Converts a type. `member` is the path of this type below its column for nested-id
/// lookups (`""` for the column's own type, `.element`, `.value.key`, ...).
fn convert_type(
    ty: &Value,
    ids: &mut Ids,
    nested: NestedIds<'_>,
    member: &str,
    path: &str,
) -> Result<Value> {
    let member_id = |ids: &mut Ids, suffix: &str| -> Result<(i64, String)> {
        let key = format!("{member}.{suffix}");
        let raw = nested
            .ids
            .and_then(|m| m.get(&format!("{}{key}", nested.field_path)));
        let id = ids.fixed_or_fresh(raw, &format!("{path}.nested-ids"))?;
        Ok((id, key))
    };
    match ty {
        Value::String(s) => convert_primitive(s, path).map(Value::String),
        Value::Object(obj) => match obj.get("type").and_then(Value::as_str) {
            Some("struct") => {
                let fields = convert_struct_fields(obj, ids, path)?;
                Ok(json!({"type": "struct", "fields": fields}))
            }
            Some("array") => {
                let (element_id, element_key) = member_id(ids, "element")?;
                let element = obj.get("elementType").ok_or_else(|| {
                    CatalogAccessError::protocol(format!("{path}.elementType"), "is missing")
                })?;
                let contains_null = obj
                    .get("containsNull")
                    .and_then(Value::as_bool)
                    .unwrap_or(true);
                let element = convert_type(
                    element,
                    ids,
                    nested,
                    &element_key,
                    &format!("{path}.elementType"),
                )?;
                Ok(json!({
                    "type": "list",
                    "element-id": element_id,
                    "element": element,
                    "element-required": !contains_null,
                }))
            }
            Some("map") => {
                let (key_id, key_key) = member_id(ids, "key")?;
                let (value_id, value_key) = member_id(ids, "value")?;
                let key = obj.get("keyType").ok_or_else(|| {
                    CatalogAccessError::protocol(format!("{path}.keyType"), "is missing")
                })?;
                let value = obj.get("valueType").ok_or_else(|| {
                    CatalogAccessError::protocol(format!("{path}.valueType"), "is missing")
                })?;
                let value_contains_null = obj
                    .get("valueContainsNull")
                    .and_then(Value::as_bool)
                    .unwrap_or(true);
                let key = convert_type(key, ids, nested, &key_key, &format!("{path}.keyType"))?;
                let value =
                    convert_type(value, ids, nested, &value_key, &format!("{path}.valueType"))?;
                Ok(json!({
                    "type": "map",
                    "key-id": key_id,
                    "key": key,
                    "value-id": value_id,
                    "value": value,
                    "value-required": !value_contains_null,
                }))
            }
            Some("udt") => match obj.get("sqlType") {
                Some(sql) => convert_type(sql, ids, nested, member, &format!("{path}.sqlType")),
                None => Err(CatalogAccessError::protocol(
                    path,
                    "user-defined type without sqlType",
                )),
            },
            _ => Err(CatalogAccessError::protocol(path, "unknown complex type")),
        },
        _ => Err(CatalogAccessError::protocol(
            path,
            "expected a type name or a type object",
        )),
    }
}

/// Spark primitive type names to Iceberg primitive type names. Spark `timestamp` is an
/// instant (UTC-adjusted), hence Iceberg `timestamptz`; `timestamp_ntz` is `timestamp`.
pub(crate) fn convert_primitive(spark: &str, path: &str) -> Result<String> {
    let s = spark.trim().to_ascii_lowercase();
    let mapped = match s.as_str() {
        "boolean" => "boolean",
        "byte" | "tinyint" | "short" | "smallint" | "integer" | "int" => "int",
        "long" | "bigint" => "long",
        "float" | "real" => "float",
        "double" => "double",
        "date" => "date",
        "timestamp" | "timestamp_ltz" => "timestamptz",
        "timestamp_ntz" => "timestamp",
        "string" => "string",
        "binary" => "binary",
        "variant" => "variant",
        "decimal" => return Ok("decimal(10, 0)".to_owned()),
        other => {
            if let Some(inner) = other
                .strip_prefix("decimal(")
                .and_then(|r| r.strip_suffix(')'))
            {
                let mut parts = inner.split(',').map(|p| p.trim().parse::<u32>());
                return match (parts.next(), parts.next(), parts.next()) {
                    (Some(Ok(p)), Some(Ok(sc)), None) if (1..=38).contains(&p) && sc <= p => {
                        Ok(format!("decimal({p}, {sc})"))
                    }
                    _ => Err(CatalogAccessError::protocol(path, "malformed decimal type")),
                };
            }
            if other.starts_with("char(") || other.starts_with("varchar(") {
                return Ok("string".to_owned());
            }
            return Err(CatalogAccessError::Protocol {
                field: path.to_owned(),
                detail: BoundedText::ours(&format!(
                    "type `{}` has no Iceberg equivalent",
                    other.chars().take(64).collect::<String>()
                )),
            });
        }
    };
    Ok(mapped.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lines_are_read_by_key_in_any_order() {
        let schema = r#"{"type":"struct","fields":[{"name":"a","type":"long","nullable":false,"metadata":{}}]}"#;
        let meta = json!({"metaData": {"id": "m", "format": {"provider": "parquet"},
            "schemaString": schema, "partitionColumns": []}})
        .to_string();
        let proto = json!({"protocol": {"minReaderVersion": 1}}).to_string();
        for body in [format!("{proto}\n{meta}\n"), format!("{meta}\n{proto}")] {
            let p = parse_metadata_ndjson(body.as_bytes()).unwrap();
            assert_eq!(p.min_reader_version, Some(1));
            assert_eq!(p.schema_string, schema);
        }
        let only_proto = format!("{proto}\n");
        assert!(matches!(
            parse_metadata_ndjson(only_proto.as_bytes()),
            Err(CatalogAccessError::Protocol { field, .. }) if field == "metaData"
        ));
    }

    #[test]
    fn spark_schema_converts_with_breadth_first_ids() {
        let spark = json!({"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": false, "metadata": {"comment": "pk"}},
            {"name": "tags", "type": {"type": "array", "elementType": "string",
                "containsNull": false}, "nullable": true, "metadata": {}},
            {"name": "m", "type": {"type": "map", "keyType": "string",
                "valueType": "decimal(10,2)", "valueContainsNull": true}, "nullable": true,
                "metadata": {}},
            {"name": "s", "type": {"type": "struct", "fields": [
                {"name": "x", "type": "timestamp", "nullable": true, "metadata": {}}]},
                "nullable": true, "metadata": {}}
        ]});
        let ice = spark_struct_to_iceberg(&spark, "schema").unwrap();
        assert_eq!(
            ice,
            json!({"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long", "doc": "pk"},
                {"id": 2, "name": "tags", "required": false, "type": {"type": "list",
                    "element-id": 5, "element": "string", "element-required": true}},
                {"id": 3, "name": "m", "required": false, "type": {"type": "map",
                    "key-id": 6, "key": "string", "value-id": 7, "value": "decimal(10, 2)",
                    "value-required": false}},
                {"id": 4, "name": "s", "required": false, "type": {"type": "struct",
                    "fields": [{"id": 8, "name": "x", "required": false,
                        "type": "timestamptz"}]}}
            ], "upstream-field-ids": []})
        );
    }

    #[test]
    fn column_mapping_ids_are_used_and_listed_as_upstream_ids() {
        let md = |id: i64, phys: &str| json!({"delta.columnMapping.id": id, "delta.columnMapping.physicalName": phys});
        let spark = json!({"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": false, "metadata": md(1, "col-a")},
            {"name": "tags", "type": {"type": "array", "elementType": "string",
                "containsNull": true}, "nullable": true, "metadata": {
                    "delta.columnMapping.id": 4, "delta.columnMapping.physicalName": "col-t",
                    "delta.columnMapping.nested.ids": {"col-t.element": 9}}},
            {"name": "m", "type": {"type": "map", "keyType": "string",
                "valueType": {"type": "struct", "fields": [
                    {"name": "x", "type": "integer", "nullable": true, "metadata": md(6, "col-x")}
                ]}}, "nullable": true, "metadata": md(5, "col-m")}
        ]});
        let ice = spark_struct_to_iceberg(&spark, "schema").unwrap();
        assert_eq!(
            ice,
            json!({"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 4, "name": "tags", "required": false, "type": {"type": "list",
                    "element-id": 9, "element": "string", "element-required": false}},
                {"id": 5, "name": "m", "required": false, "type": {"type": "map",
                    "key-id": 10, "key": "string", "value-id": 11, "value-required": false,
                    "value": {"type": "struct", "fields": [
                        {"id": 6, "name": "x", "required": false, "type": "int"}]}}}
            ], "upstream-field-ids": [1, 4, 5, 6, 9]})
        );
        let twice = json!({"type": "struct", "fields": [
            {"name": "a", "type": "long", "metadata": md(1, "p1")},
            {"name": "b", "type": "long", "metadata": md(1, "p2")}]});
        match spark_struct_to_iceberg(&twice, "s") {
            Err(CatalogAccessError::Protocol { field, .. }) => {
                assert_eq!(field, "s.fields[1].metadata")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unknown_spark_types_are_refused_naming_the_field() {
        let spark = json!({"type": "struct", "fields": [
            {"name": "i", "type": "interval day to second", "nullable": true}]});
        match spark_struct_to_iceberg(&spark, "s") {
            Err(CatalogAccessError::Protocol { field, .. }) => {
                assert_eq!(field, "s.fields[0].type")
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn epoch_ms_reads_numbers_and_decimal_strings_only() {
        let at = |ms: u64| Some(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(
            epoch_ms(&json!(1_796_104_180_044_u64), "e").unwrap(),
            at(1_796_104_180_044)
        );
        assert_eq!(
            epoch_ms(&json!("1796104180044"), "e").unwrap(),
            at(1_796_104_180_044)
        );
        assert_eq!(epoch_ms(&Value::Null, "e").unwrap(), None);
        for bad in [
            json!(""),
            json!(" 1"),
            json!("-1"),
            json!("1.5"),
            json!("12ab"),
            json!("99999999999999999999999"),
            json!(true),
            json!(-3),
            json!({"ms": 1}),
        ] {
            match epoch_ms(&bad, "expiration_time") {
                Err(CatalogAccessError::Protocol { field, .. }) => {
                    assert_eq!(field, "expiration_time", "{bad}")
                }
                other => panic!("{bad}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn next_token_treats_empty_and_missing_as_last_page_and_refuses_loops() {
        assert_eq!(next_token(&json!({}), "t", None).unwrap(), None);
        assert_eq!(next_token(&json!({"t": ""}), "t", None).unwrap(), None);
        assert_eq!(
            next_token(&json!({"t": "a"}), "t", None).unwrap(),
            Some("a".into())
        );
        assert!(next_token(&json!({"t": "a"}), "t", Some("a")).is_err());
    }
}
