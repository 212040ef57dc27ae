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

use async_trait::async_trait;
use serde_json::{Value, json};
use url::Url;

use crate::common::{
    VendCache, check_fresh_and_scoped, dedup, epoch_ms, list_field, lock, names, next_token,
    optional_str, required_str, secret_part, spark_struct_to_iceberg,
};
use crate::error::{BoundedText, CatalogAccessError, Result, VendingErrorKind};
use crate::http::{HttpClient, HttpResponse, RetryMode, classify_status};
use crate::spi::{
    CatalogAuthentication, CatalogCapabilities, CatalogClient, CatalogConnectionConfig,
    CatalogProtocol, Clock, ConnectOptions, DeltaFileListing, DeltaSharedFile, LoadTableOutcome,
    Page, ResolvedCatalogCredentials, SecretString, StorageCredential, TableFormat, TableIdent,
    TableMetadata, UpstreamNamespace, VendedCredentials, is_secret_key,
};

/// Connection property: `true` reads a table without `accessModes` as url-only (the
/// protocol's reading) and refuses to vend for it without asking. Default `false`.
pub const STRICT_ACCESS_MODES: &str = "delta.sharing.strict-access-modes";

/// Most pages followed when looking a table up through its schema's listing.
const MAX_LOOKUP_PAGES: usize = 1000;

/// The Delta Sharing [`CatalogClientProvider`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaSharingProvider;

crate::spi::client_provider!(
    DeltaSharingProvider,
    CatalogProtocol::DeltaSharing,
    DeltaSharingClient::connect
);

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
        let v = resp.ok_json(what)?;
        let items = list_field(&v, "items")?;
        let next = next_token(&v, "nextPageToken", page_token)?;
        Ok((items, next))
    }

    fn cache_entries(&self, namespace: &UpstreamNamespace, entries: &[TableEntry]) {
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
        let namespace = UpstreamNamespace::new([share, schema]);
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
        resp.ensure_ok("query table version")?;
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

fn split_schema_ns(namespace: &UpstreamNamespace) -> Result<(&str, &str)> {
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
        Ok(CatalogCapabilities::DELTA_TABLES)
    }

    async fn check_connection(&self) -> Result<()> {
        self.list_page(&["shares"], None, Some(1), "list shares")
            .await
            .map(|_| ())
    }

    async fn list_namespaces(
        &self,
        parent: Option<&UpstreamNamespace>,
        page_token: Option<&str>,
        page_size: Option<u32>,
    ) -> Result<Page<UpstreamNamespace>> {
        let levels = parent.map(UpstreamNamespace::levels).unwrap_or_default();
        match levels {
            [] => {
                let (items, next) = self
                    .list_page(&["shares"], page_token, page_size, "list shares")
                    .await?;
                let items = names(&items, "items", |n| UpstreamNamespace::new([n]))?;
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
                let items = names(&items, "items", |n| {
                    UpstreamNamespace::new([share.as_str(), n])
                })?;
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
        namespace: &UpstreamNamespace,
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
        namespace: &UpstreamNamespace,
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
        resp.ensure_ok("query table metadata")?;
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
        namespace: &UpstreamNamespace,
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

    async fn query_delta_files(
        &self,
        namespace: &UpstreamNamespace,
        name: &str,
    ) -> Result<DeltaFileListing> {
        let (share, schema) = split_schema_ns(namespace)?;
        let url = self.url(&["shares", share, "schemas", schema, "tables", name, "query"])?;
        // The default (parquet) response format: a server answers it only for tables a
        // reader without advanced Delta features can read, or refuses.
        let resp = self
            .send(reqwest::Method::POST, url, Some(&json!({})))
            .await?;
        match resp.status {
            200 => {}
            404 => {
                return Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
                    "table `{name}` is not shared in `{share}.{schema}`"
                ))));
            }
            _ => return Err(classify_status(&resp, "query table files")),
        }
        let version = version_header(&resp)?;
        parse_query_ndjson(&resp.body, version)
    }

    async fn read_shared_file_range(
        &self,
        file: &DeltaSharedFile,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes> {
        if range.start >= range.end {
            return Ok(bytes::Bytes::new());
        }
        let url = Url::parse(file.url.expose())
            .map_err(|_| CatalogAccessError::protocol("file.url", "not a URL"))?;
        // A presigned URL carries its own authorization: never the recipient token.
        let req = self
            .http
            .request(reqwest::Method::GET, url)
            .header(
                reqwest::header::RANGE,
                format!("bytes={}-{}", range.start, range.end - 1),
            )
            .build()
            .map_err(|e| {
                CatalogAccessError::config(format!("cannot build request: {}", e.without_url()))
            })?;
        let resp = self.http.execute(req, RetryMode::IdempotentRead).await?;
        let want = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
        match resp.status {
            206 => Ok(resp.body),
            // A server that ignores ranges answers the whole file.
            200 => {
                let start = usize::try_from(range.start).unwrap_or(usize::MAX);
                if start >= resp.body.len() {
                    return Ok(bytes::Bytes::new());
                }
                let end = start.saturating_add(want).min(resp.body.len());
                Ok(resp.body.slice(start..end))
            }
            416 => Ok(bytes::Bytes::new()),
            404 => Err(CatalogAccessError::NotFound(BoundedText::ours(&format!(
                "shared file {} does not exist",
                file.id
            )))),
            _ => Err(classify_status(&resp, "read shared file")),
        }
    }
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

/// Parses a table query answer (default response format): one `protocol` line, one
/// `metaData` line and one `file` line per live file, identified by key in any order. The
/// version is the `Delta-Table-Version` header, else the `metaData.version` field.
fn parse_query_ndjson(body: &[u8], version: Option<i64>) -> Result<DeltaFileListing> {
    let text = std::str::from_utf8(body)
        .map_err(|_| CatalogAccessError::protocol("<body>", "query answer is not UTF-8"))?;
    let mut protocol: Option<Value> = None;
    let mut meta: Option<Value> = None;
    let mut files = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            CatalogAccessError::protocol(
                "<body>",
                format!("query line {} is not JSON (column {})", n + 1, e.column()),
            )
        })?;
        let Value::Object(obj) = v else {
            return Err(CatalogAccessError::protocol(
                "<body>",
                format!("query line {} is not a JSON object", n + 1),
            ));
        };
        for (key, value) in obj {
            match key.as_str() {
                "protocol" => protocol = Some(value),
                "metaData" => meta = Some(value),
                "file" => files.push(parse_shared_file(&value, files.len())?),
                _ => {}
            }
        }
    }
    let protocol =
        protocol.ok_or_else(|| CatalogAccessError::protocol("protocol", "no protocol line"))?;
    let metadata =
        meta.ok_or_else(|| CatalogAccessError::protocol("metaData", "no metaData line"))?;
    let version = version
        .or_else(|| metadata.get("version").and_then(Value::as_i64))
        .ok_or_else(|| {
            CatalogAccessError::protocol(
                "delta-table-version",
                "the query answer states no table version",
            )
        })?;
    Ok(DeltaFileListing {
        version,
        protocol,
        metadata,
        files,
    })
}

fn parse_shared_file(v: &Value, i: usize) -> Result<DeltaSharedFile> {
    let p = |k: &str| format!("file[{i}].{k}");
    let url = required_str(v, "url", &p("url"))?.to_owned();
    let id = required_str(v, "id", &p("id"))?.to_owned();
    let size = v
        .get("size")
        .and_then(Value::as_u64)
        .ok_or_else(|| CatalogAccessError::protocol(p("size"), "expected a size in bytes"))?;
    let partition_values = match v.get("partitionValues") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, x)| (k.clone(), x.as_str().map(str::to_owned)))
            .collect(),
        Some(_) => {
            return Err(CatalogAccessError::protocol(
                p("partitionValues"),
                "expected an object",
            ));
        }
    };
    Ok(DeltaSharedFile {
        url: SecretString::new(url),
        id,
        size,
        stats: optional_str(v, "stats", &p("stats"))?,
        partition_values,
        deletion_vector: v.get("deletionVector").is_some_and(|d| !d.is_null()),
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
}
