//! A Delta Sharing fixture server, built from the Delta Sharing protocol (delta-io
//! `PROTOCOL.md`), for testing the catalog-access Delta Sharing provider against evidence.
//!
//! Routes, under a configurable prefix (default [`DEFAULT_PREFIX`]; unitycatalog-rs uses
//! `/api/v1/delta-sharing`): `GET /shares`, `/shares/{s}`, `/shares/{s}/schemas`,
//! `/shares/{s}/schemas/{sc}/tables`, `/shares/{s}/all-tables` (all paginated with
//! `maxResults` / `pageToken` / `nextPageToken`), `GET .../tables/{t}/version` (answer in the
//! `Delta-Table-Version` header), `GET .../tables/{t}/metadata` (NDJSON `protocol` and
//! `metaData` lines), `POST .../tables/{t}/temporary-table-credentials` (the
//! directory-based access addition to the protocol) and `POST .../tables/{t}/query` (the
//! table's live files, each with a presigned URL this server answers, ranges included). Authentication is the recipient's bearer
//! token only; share, schema and table names match case-insensitively as the protocol says.
//!
//! Tables carry `accessModes` (`["url"]`, `["dir"]`, both, or absent: the protocol reads
//! absent as url only, and the reference server never sends the field). Switches reproduce
//! what real servers do (see `docs/catalog-access.md`, "Real-server behaviours"): the
//! `metaData` line before `protocol`, empty lists as `{}`, an empty-string `nextPageToken` on
//! the last page, a credentials endpoint that answers 404, a flat (unwrapped) credentials
//! body, `expirationTime` as a decimal string, table entries with `share_id`, a
//! listing that repeats an entry, a listing under a missing share or schema answered
//! `200 {}`, a table still listed after it was dropped (404 on load), and column-mapped
//! schemas. Faults and held "slow"
//! responses use the same [`FaultRule`] / [`Fault`] as the Unity fixture.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::fixture::conditions::{Conditions, apply_conditions};
use crate::fixture::faults::take_fault;
use crate::fixture::gate::HoldGate;
use crate::fixture::lock;
use crate::fixture::paging::{NameTokens, ZeroLen, page_after, page_len};
use crate::fixture::recorder::{
    RecordedRequest, RequestLog, parse_query, percent_decode, record_requests,
};
pub use crate::unity_fixture::{Fault, FaultRule};

/// Default route prefix.
pub const DEFAULT_PREFIX: &str = "/delta-sharing";
/// The recipient bearer token accepted by default.
pub const DEFAULT_RECIPIENT_TOKEN: &str = "recipient-token-0001";

/// How the `temporary-table-credentials` endpoint behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialsEndpoint {
    /// Answer `{"credentials": {"location", "awsTempCredentials", "expirationTime"}}`.
    Wrapped,
    /// Answer `{"awsTempCredentials", "expirationTime"}` without the wrapper object.
    Flat,
    /// No such route: 404, as unitycatalog-rs answers.
    NotFound,
}

/// A shared table as the fixture serves it.
#[derive(Clone, Debug, PartialEq)]
pub struct SharingTable {
    pub name: String,
    /// Optional stable table id (`id` in listings and `metaData.id`-independent).
    pub id: Option<String>,
    /// Table root, listed as `location` when present.
    pub location: Option<String>,
    /// `accessModes`; `None` omits the field.
    pub access_modes: Option<Vec<String>>,
    /// `metaData.schemaString`: a Spark `StructType` serialized as JSON.
    pub schema_string: String,
    pub partition_columns: Vec<String>,
    /// `metaData.format.provider`.
    pub format_provider: String,
    /// Answered in `Delta-Table-Version`.
    pub version: i64,
    /// `metaData.id` (the Delta table's metadata id).
    pub metadata_id: String,
    pub configuration: BTreeMap<String, String>,
    pub description: Option<String>,
    /// The live data files the table query lists (each served at a presigned fixture URL).
    pub files: Vec<SharingFile>,
}

/// One data file of a shared table: its bytes live on the local file system and are served
/// through a presigned fixture URL (`{prefix}/_files/{id}?sig=...`, no bearer token, ranged
/// reads answered `206`).
#[derive(Clone, Debug, PartialEq)]
pub struct SharingFile {
    pub id: String,
    pub path: std::path::PathBuf,
    /// The size the listing states (the file's own size unless a test says otherwise).
    pub size: u64,
    /// The `stats` JSON string.
    pub stats: Option<String>,
    pub partition_values: BTreeMap<String, Option<String>>,
}

impl SharingFile {
    /// A file at `path` whose stats state `records` rows.
    pub fn at(path: &std::path::Path, records: u64) -> Self {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            path: path.to_owned(),
            size,
            stats: Some(json!({"numRecords": records, "nullCount": {"id": 0}}).to_string()),
            partition_values: BTreeMap::new(),
        }
    }
}

impl SharingTable {
    /// A table at `location` with an id, no `accessModes` (like the reference server), and a
    /// schema covering primitives, a decimal, an array, a map and a nested struct.
    pub fn new(name: &str, location: &str) -> Self {
        Self {
            name: name.to_owned(),
            id: Some(uuid::Uuid::new_v4().to_string()),
            location: Some(location.to_owned()),
            access_modes: None,
            schema_string: sample_schema_string(),
            partition_columns: vec!["day".to_owned()],
            format_provider: "parquet".to_owned(),
            version: 3,
            metadata_id: uuid::Uuid::new_v4().to_string(),
            configuration: BTreeMap::new(),
            description: None,
            files: Vec::new(),
        }
    }

    /// Sets the live files the table query lists.
    pub fn with_files(mut self, files: Vec<SharingFile>) -> Self {
        self.files = files;
        self
    }

    /// Sets `accessModes` (e.g. `&["url"]`, `&["dir"]`, `&["url", "dir"]`).
    pub fn with_access_modes(mut self, modes: &[&str]) -> Self {
        self.access_modes = Some(modes.iter().map(|m| (*m).to_owned()).collect());
        self
    }

    /// Omits `accessModes`.
    pub fn without_access_modes(mut self) -> Self {
        self.access_modes = None;
        self
    }

    /// Omits the table `id`.
    pub fn without_id(mut self) -> Self {
        self.id = None;
        self
    }

    /// Gives every schema field that has no Delta column-mapping id one (above the highest
    /// id in the schema and `delta.columnMapping.maxColumnId`, depth-first), with a physical
    /// name, and records `delta.columnMapping.mode = id` and the new `maxColumnId`, as Delta
    /// does when column mapping is on. Fields that have an id keep it, so a schema edited
    /// between calls keeps its old ids.
    pub fn with_column_mapping(mut self) -> Self {
        fn max_id(v: &Value, max: &mut i64) {
            match v {
                Value::Object(o) => {
                    for (k, x) in o {
                        if k == "delta.columnMapping.id" {
                            *max = (*max).max(x.as_i64().unwrap_or(0));
                        }
                        max_id(x, max);
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| max_id(x, max)),
                _ => {}
            }
        }
        fn assign(v: &mut Value, next: &mut i64) {
            match v {
                Value::Object(o) => {
                    if o.contains_key("name") && o.contains_key("type") {
                        let md = o.entry("metadata").or_insert_with(|| json!({}));
                        if let Some(md) = md.as_object_mut()
                            && !md.contains_key("delta.columnMapping.id")
                        {
                            *next += 1;
                            md.insert("delta.columnMapping.id".into(), json!(*next));
                            md.insert(
                                "delta.columnMapping.physicalName".into(),
                                json!(format!("col-{next}")),
                            );
                        }
                    }
                    for (_, x) in o.iter_mut() {
                        assign(x, next);
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(|x| assign(x, next)),
                _ => {}
            }
        }
        let Ok(mut schema) = serde_json::from_str::<Value>(&self.schema_string) else {
            return self;
        };
        let mut next = self
            .configuration
            .get("delta.columnMapping.maxColumnId")
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        max_id(&schema, &mut next);
        assign(&mut schema, &mut next);
        self.schema_string = schema.to_string();
        self.configuration
            .insert("delta.columnMapping.mode".into(), "id".into());
        self.configuration
            .insert("delta.columnMapping.maxColumnId".into(), next.to_string());
        self
    }

    /// Replaces `schemaString`.
    pub fn with_schema_string(mut self, schema: &str) -> Self {
        self.schema_string = schema.to_owned();
        self
    }

    fn offers_dir(&self) -> bool {
        self.access_modes
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == "dir"))
    }

    fn to_json(&self, share: &str, share_id: Option<&str>, schema: &str, snake: bool) -> Value {
        let mut v = json!({"name": self.name, "schema": schema, "share": share});
        if let Some(obj) = v.as_object_mut() {
            if let Some(id) = share_id {
                let key = if snake { "share_id" } else { "shareId" };
                obj.insert(key.into(), json!(id));
            }
            if let Some(id) = &self.id {
                obj.insert("id".into(), json!(id));
            }
            if let Some(l) = &self.location {
                obj.insert("location".into(), json!(l));
            }
            if let Some(m) = &self.access_modes {
                obj.insert("accessModes".into(), json!(m));
            }
        }
        v
    }
}

/// The Spark schema of [`SharingTable::new`].
pub fn sample_schema_string() -> String {
    json!({
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": false, "metadata": {}},
            {"name": "name", "type": "string", "nullable": true, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": true, "metadata": {}},
            {"name": "amount", "type": "decimal(10,2)", "nullable": true, "metadata": {}},
            {"name": "day", "type": "date", "nullable": true, "metadata": {}},
            {"name": "tags", "type": {"type": "array", "elementType": "string",
                "containsNull": true}, "nullable": true, "metadata": {}},
            {"name": "attrs", "type": {"type": "map", "keyType": "string",
                "valueType": "integer", "valueContainsNull": false}, "nullable": true,
                "metadata": {}},
            {"name": "address", "type": {"type": "struct", "fields": [
                {"name": "city", "type": "string", "nullable": true, "metadata": {}},
                {"name": "zip", "type": "integer", "nullable": false, "metadata": {}}
            ]}, "nullable": true, "metadata": {}}
        ]
    })
    .to_string()
}

/// A set of temporary credentials the fixture vended, kept so tests can check that none of
/// it leaks into errors, logs or `Debug` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharingVendedRecord {
    pub share: String,
    pub schema: String,
    pub table: String,
    pub location: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expiration_time_ms: i64,
}

#[derive(Clone, Debug, Default)]
struct ShareEntry {
    id: Option<String>,
    schemas: BTreeMap<String, BTreeMap<String, SharingTable>>,
}

#[derive(Debug)]
struct Settings {
    recipient_tokens: Vec<String>,
    metadata_first: bool,
    empty_list_as_object: bool,
    empty_token_on_last_page: bool,
    credentials: CredentialsEndpoint,
    credential_lifetime_ms: i64,
    expiration_as_string: bool,
    snake_case_share_id: bool,
    duplicate_listings: bool,
    missing_parent_as_empty: bool,
    gone_on_load: Vec<(String, String, String)>,
    max_page_size: usize,
    faults: Vec<FaultRule>,
    file_url_origin: Option<String>,
}

struct Inner {
    prefix: String,
    shares: Mutex<BTreeMap<String, ShareEntry>>,
    settings: Mutex<Settings>,
    vended: Mutex<Vec<SharingVendedRecord>>,
    credential_requests: Mutex<Vec<Value>>,
    log: RequestLog,
    vend_counter: AtomicU64,
    hold: HoldGate,
    conditions: Conditions,
}

/// Finds a map key case-insensitively (the protocol's names are case-insensitive).
fn find_key<'a, V>(map: &'a BTreeMap<String, V>, name: &str) -> Option<&'a String> {
    map.keys().find(|k| k.eq_ignore_ascii_case(name))
}

/// A running Delta Sharing fixture server on `127.0.0.1`, stopped on drop.
pub struct DeltaSharingFixture {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DeltaSharingFixture {
    fn drop(&mut self) {
        self.inner.hold.release();
        self.task.abort();
    }
}

impl DeltaSharingFixture {
    /// Starts an empty fixture under [`DEFAULT_PREFIX`].
    pub async fn start() -> Self {
        Self::start_with_prefix(DEFAULT_PREFIX).await
    }

    /// Starts an empty fixture whose routes live under `prefix` (e.g.
    /// `/api/v1/delta-sharing`; `""` for none).
    ///
    /// # Panics
    /// When no loopback port can be bound: the test cannot run at all.
    pub async fn start_with_prefix(prefix: &str) -> Self {
        Self::start_with_conditions(prefix, Conditions::new()).await
    }

    /// Starts an empty fixture under `prefix` applying `conditions` (latency...) from its
    /// first request; the caller keeps a clone to change them later.
    ///
    /// # Panics
    /// When no loopback port can be bound: the test cannot run at all.
    pub async fn start_with_conditions(prefix: &str, conditions: Conditions) -> Self {
        let inner = Arc::new(Inner {
            prefix: prefix.trim_end_matches('/').to_owned(),
            shares: Mutex::new(BTreeMap::new()),
            settings: Mutex::new(Settings {
                recipient_tokens: vec![DEFAULT_RECIPIENT_TOKEN.to_owned()],
                metadata_first: false,
                empty_list_as_object: false,
                empty_token_on_last_page: false,
                credentials: CredentialsEndpoint::Wrapped,
                credential_lifetime_ms: 3_600_000,
                expiration_as_string: false,
                snake_case_share_id: false,
                duplicate_listings: false,
                missing_parent_as_empty: false,
                gone_on_load: Vec::new(),
                max_page_size: 500,
                faults: Vec::new(),
                file_url_origin: None,
            }),
            vended: Mutex::new(Vec::new()),
            credential_requests: Mutex::new(Vec::new()),
            log: RequestLog::default(),
            vend_counter: AtomicU64::new(0),
            hold: HoldGate::default(),
            conditions,
        });
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the Delta Sharing fixture");
        #[allow(clippy::expect_used)]
        let addr = listener.local_addr().expect("fixture listener address");
        let app = Router::new()
            .fallback(handle)
            .with_state(inner.clone())
            .layer(axum::middleware::from_fn_with_state(
                inner.conditions.clone(),
                apply_conditions,
            ))
            .layer(axum::middleware::from_fn_with_state(
                inner.log.clone(),
                record_requests,
            ));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, inner, task }
    }

    /// Starts a fixture with share `sales`, schema `retail` and table `orders` offering
    /// `["url", "dir"]`.
    pub async fn start_with_sample() -> Self {
        let f = Self::start().await;
        f.add_table(
            "sales",
            "retail",
            SharingTable::new("orders", "s3://bucket/sales/retail/orders")
                .with_access_modes(&["url", "dir"]),
        );
        f
    }

    /// The sharing server endpoint a profile file would name: `http://127.0.0.1:PORT{prefix}`.
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, self.inner.prefix)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    // ---- data -------------------------------------------------------------------------

    /// Adds an empty share with an id (no-op if present).
    pub fn add_share(&self, share: &str) {
        lock(&self.inner.shares)
            .entry(share.to_owned())
            .or_insert_with(|| ShareEntry {
                id: Some(uuid::Uuid::new_v4().to_string()),
                schemas: BTreeMap::new(),
            });
    }

    /// Removes a share. Returns whether it existed.
    pub fn remove_share(&self, share: &str) -> bool {
        lock(&self.inner.shares).remove(share).is_some()
    }

    /// Adds an empty schema, creating the share if needed.
    pub fn add_schema(&self, share: &str, schema: &str) {
        self.add_share(share);
        if let Some(s) = lock(&self.inner.shares).get_mut(share) {
            s.schemas.entry(schema.to_owned()).or_default();
        }
    }

    /// Renames a schema keeping its tables. Returns whether it existed.
    pub fn rename_schema(&self, share: &str, from: &str, to: &str) -> bool {
        let mut shares = lock(&self.inner.shares);
        let Some(s) = shares.get_mut(share) else {
            return false;
        };
        match s.schemas.remove(from) {
            Some(t) => {
                s.schemas.insert(to.to_owned(), t);
                true
            }
            None => false,
        }
    }

    /// Removes a schema. Returns whether it existed.
    pub fn remove_schema(&self, share: &str, schema: &str) -> bool {
        lock(&self.inner.shares)
            .get_mut(share)
            .is_some_and(|s| s.schemas.remove(schema).is_some())
    }

    /// Adds (or replaces) a table, creating share and schema if needed.
    pub fn add_table(&self, share: &str, schema: &str, table: SharingTable) {
        self.add_schema(share, schema);
        if let Some(t) = lock(&self.inner.shares)
            .get_mut(share)
            .and_then(|s| s.schemas.get_mut(schema))
        {
            t.insert(table.name.clone(), table);
        }
    }

    /// Renames a table keeping its id. Returns whether it existed.
    pub fn rename_table(&self, share: &str, schema: &str, from: &str, to: &str) -> bool {
        let mut shares = lock(&self.inner.shares);
        let Some(t) = shares
            .get_mut(share)
            .and_then(|s| s.schemas.get_mut(schema))
        else {
            return false;
        };
        match t.remove(from) {
            Some(mut table) => {
                table.name = to.to_owned();
                t.insert(to.to_owned(), table);
                true
            }
            None => false,
        }
    }

    /// Removes a table. Returns whether it existed.
    pub fn remove_table(&self, share: &str, schema: &str, name: &str) -> bool {
        lock(&self.inner.shares)
            .get_mut(share)
            .and_then(|s| s.schemas.get_mut(schema))
            .is_some_and(|t| t.remove(name).is_some())
    }

    /// Bumps a table's version (answered by the version and metadata endpoints).
    pub fn set_table_version(&self, share: &str, schema: &str, name: &str, version: i64) {
        if let Some(t) = lock(&self.inner.shares)
            .get_mut(share)
            .and_then(|s| s.schemas.get_mut(schema))
            .and_then(|t| t.get_mut(name))
        {
            t.version = version;
        }
    }

    /// Replaces a table's live files and sets its version (a new Delta commit upstream).
    pub fn set_table_files(
        &self,
        share: &str,
        schema: &str,
        name: &str,
        files: Vec<SharingFile>,
        version: i64,
    ) {
        if let Some(t) = lock(&self.inner.shares)
            .get_mut(share)
            .and_then(|s| s.schemas.get_mut(schema))
            .and_then(|t| t.get_mut(name))
        {
            t.files = files;
            t.version = version;
        }
    }

    // ---- quirks and settings ----------------------------------------------------------

    /// Send the `metaData` line before the `protocol` line (unitycatalog-rs does).
    pub fn set_metadata_first(&self, on: bool) {
        lock(&self.inner.settings).metadata_first = on;
    }

    /// Answer an empty list as `{}` (no `items`).
    pub fn set_empty_list_as_object(&self, on: bool) {
        lock(&self.inner.settings).empty_list_as_object = on;
    }

    /// Send `"nextPageToken": ""` on the last page instead of omitting it.
    pub fn set_empty_token_on_last_page(&self, on: bool) {
        lock(&self.inner.settings).empty_token_on_last_page = on;
    }

    /// How the credentials endpoint behaves.
    pub fn set_credentials_endpoint(&self, mode: CredentialsEndpoint) {
        lock(&self.inner.settings).credentials = mode;
    }

    /// Lifetime of vended credentials relative to now, in ms (negative: already expired).
    pub fn set_credential_lifetime_ms(&self, ms: i64) {
        lock(&self.inner.settings).credential_lifetime_ms = ms;
    }

    /// Answer `expirationTime` of vended credentials as a decimal string.
    pub fn set_expiration_as_string(&self, on: bool) {
        lock(&self.inner.settings).expiration_as_string = on;
    }

    /// Table entries carry `share_id` instead of `shareId` (the server seen doing this also
    /// sent no table `id`: combine with [`SharingTable::without_id`]).
    pub fn set_snake_case_share_id(&self, on: bool) {
        lock(&self.inner.settings).snake_case_share_id = on;
    }

    /// Repeat the first entry of every non-empty listing page.
    pub fn set_duplicate_listings(&self, on: bool) {
        lock(&self.inner.settings).duplicate_listings = on;
    }

    /// Answer a listing under a missing share or schema with `200 {}` instead of 404.
    pub fn set_missing_parent_as_empty(&self, on: bool) {
        lock(&self.inner.settings).missing_parent_as_empty = on;
    }

    /// Drops a table from lookups while listings still name it: its version, metadata and
    /// credentials answer 404, as for a dropped table a share still lists.
    pub fn drop_but_keep_listed(&self, share: &str, schema: &str, name: &str) {
        lock(&self.inner.settings).gone_on_load.push((
            share.to_owned(),
            schema.to_owned(),
            name.to_owned(),
        ));
    }

    /// The server's page length cap (`maxResults` is min'd with it).
    pub fn set_max_page_size(&self, n: usize) {
        lock(&self.inner.settings).max_page_size = n.max(1);
    }

    /// The origin (`scheme://host[:port]`) the presigned file URLs of table queries name
    /// instead of this server: a hostile server's URLs pointing at an address a reader must
    /// never contact. `None`: this server.
    pub fn set_file_url_origin(&self, origin: Option<&str>) {
        lock(&self.inner.settings).file_url_origin = origin.map(str::to_owned);
    }

    /// Replaces the accepted recipient tokens.
    pub fn set_recipient_tokens(&self, tokens: &[&str]) {
        lock(&self.inner.settings).recipient_tokens =
            tokens.iter().map(|t| (*t).to_owned()).collect();
    }

    // ---- faults -----------------------------------------------------------------------

    /// Adds a fault rule; rules are consulted in insertion order.
    pub fn inject(&self, rule: FaultRule) {
        lock(&self.inner.settings).faults.push(rule);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        lock(&self.inner.settings).faults.clear();
    }

    /// Releases every request currently held by [`Fault::Hold`].
    pub fn release_held(&self) {
        self.inner.hold.release();
    }

    /// How many requests are being held right now.
    pub fn held_now(&self) -> usize {
        self.inner.hold.held_now()
    }

    // ---- evidence ---------------------------------------------------------------------

    /// Every request answered so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.log.entries()
    }

    /// Requests whose path ends with `suffix`.
    pub fn requests_to(&self, suffix: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with(suffix))
            .collect()
    }

    /// The request log.
    pub fn log(&self) -> RequestLog {
        self.inner.log.clone()
    }

    /// The network conditions (latency...) applied to every request.
    pub fn conditions(&self) -> &Conditions {
        &self.inner.conditions
    }

    /// The JSON bodies of every credentials request (`Null` for an empty body).
    pub fn credential_requests(&self) -> Vec<Value> {
        lock(&self.inner.credential_requests).clone()
    }

    /// Every credential set vended so far.
    pub fn vended(&self) -> Vec<SharingVendedRecord> {
        lock(&self.inner.vended).clone()
    }
}

// ---- request handling ---------------------------------------------------------------------

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"errorCode": code, "message": message})),
    )
        .into_response()
}

fn ok_json(v: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        v.to_string(),
    )
        .into_response()
}

fn bearer_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let rest = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))?;
    Some(rest.trim().to_owned())
}

fn param<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let inner = &inner;
    let path = uri.path().to_owned();
    let query = parse_query(uri.query().unwrap_or(""));

    let fault = take_fault(&mut lock(&inner.settings).faults, &method, &path);
    match fault {
        Some(Fault::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, "INJECTED_FAULT", "injected fault");
        }
        Some(Fault::MalformedJson) => {
            let body = if path.ends_with("/metadata") {
                "{\"protocol\":{\"minReaderVersion\":1}}\n{\"metaData\":{\"id\":\"trunc"
            } else {
                "{\"items\": [{\"name\": \"trunc"
            };
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
        Some(Fault::Oversized(n)) => {
            return ok_json(json!({"items": [], "padding": "x".repeat(n)}));
        }
        Some(Fault::Unauthorized) => {
            return error(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", "injected 401");
        }
        Some(Fault::Hold) => inner.hold.wait().await,
        None => {}
    }

    let Some(route) = path.strip_prefix(inner.prefix.as_str()) else {
        return error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "no such route",
        );
    };
    // Presigned file URLs carry their own signature, not the recipient token.
    if let Some(id) = route.strip_prefix("/_files/") {
        return serve_file(inner, id, &query, &headers);
    }
    let authorized =
        bearer_of(&headers).is_some_and(|t| lock(&inner.settings).recipient_tokens.contains(&t));
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "missing or invalid token",
        );
    }

    let segments: Vec<String> = route
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method, segs.as_slice()) {
        (Method::GET, ["shares"]) => list_shares(inner, &query),
        (Method::GET, ["shares", share]) => get_share(inner, share),
        (Method::GET, ["shares", share, "schemas"]) => list_schemas(inner, share, &query),
        (Method::GET, ["shares", share, "schemas", schema, "tables"]) => {
            list_tables(inner, share, Some(schema), &query)
        }
        (Method::GET, ["shares", share, "all-tables"]) => list_tables(inner, share, None, &query),
        (
            Method::GET,
            [
                "shares",
                share,
                "schemas",
                schema,
                "tables",
                table,
                "version",
            ],
        ) => version(inner, share, schema, table),
        (
            Method::GET,
            [
                "shares",
                share,
                "schemas",
                schema,
                "tables",
                table,
                "metadata",
            ],
        ) => metadata(inner, share, schema, table),
        (
            Method::POST,
            [
                "shares",
                share,
                "schemas",
                schema,
                "tables",
                table,
                "temporary-table-credentials",
            ],
        ) => credentials(inner, share, schema, table, &body),
        (Method::POST, ["shares", share, "schemas", schema, "tables", table, "query"]) => {
            query_files(inner, share, schema, table, &headers)
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "no such route",
        ),
    }
}

/// Delta Sharing page tokens name the last item returned.
const TOKENS: NameTokens = NameTokens { prefix: "ds1." };

/// Parses `maxResults` / `pageToken` into (page length, resume-after key).
fn page_params(
    inner: &Inner,
    query: &[(String, String)],
) -> Result<(usize, Option<String>), Box<Response>> {
    let cap = lock(&inner.settings).max_page_size;
    let bad = |message: String| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            &message,
        ))
    };
    let len = page_len(
        "maxResults",
        param(query, "maxResults"),
        cap,
        ZeroLen::Empty,
    )
    .map_err(bad)?;
    let after = TOKENS
        .resume_after("pageToken", param(query, "pageToken"))
        .map_err(bad)?;
    Ok((len, after))
}

/// One page of `(sort key, item)` pairs sorted by key, resuming after `after`. With `len` 0
/// the protocol allows no items and a token: answer a token to the same position.
fn page(
    items: Vec<(String, Value)>,
    len: usize,
    after: Option<&str>,
) -> (Vec<Value>, Option<String>) {
    let (taken, next) = page_after(TOKENS, items, len, after);
    (taken.into_iter().map(|(_, v)| v).collect(), next)
}

fn list_answer(inner: &Inner, mut items: Vec<Value>, next: Option<String>) -> Response {
    let (empty_as_object, empty_token, duplicate) = {
        let s = lock(&inner.settings);
        (
            s.empty_list_as_object,
            s.empty_token_on_last_page,
            s.duplicate_listings,
        )
    };
    if duplicate && let Some(first) = items.first().cloned() {
        items.push(first);
    }
    let mut obj = serde_json::Map::new();
    if !(items.is_empty() && empty_as_object) {
        obj.insert("items".into(), Value::Array(items));
    }
    match next {
        Some(n) => {
            obj.insert("nextPageToken".into(), json!(n));
        }
        None if empty_token => {
            obj.insert("nextPageToken".into(), json!(""));
        }
        None => {}
    }
    ok_json(Value::Object(obj))
}

fn share_json(name: &str, s: &ShareEntry) -> Value {
    let mut v = json!({"name": name});
    if let (Some(obj), Some(id)) = (v.as_object_mut(), &s.id) {
        obj.insert("id".into(), json!(id));
    }
    v
}

fn list_shares(inner: &Inner, query: &[(String, String)]) -> Response {
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let items: Vec<(String, Value)> = lock(&inner.shares)
        .iter()
        .map(|(n, s)| (n.clone(), share_json(n, s)))
        .collect();
    let (items, next) = page(items, len, after.as_deref());
    list_answer(inner, items, next)
}

fn get_share(inner: &Inner, share: &str) -> Response {
    let shares = lock(&inner.shares);
    match find_key(&shares, share).and_then(|k| shares.get(k).map(|s| (k, s))) {
        Some((k, s)) => ok_json(json!({"share": share_json(k, s)})),
        None => error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "share not found",
        ),
    }
}

fn list_schemas(inner: &Inner, share: &str, query: &[(String, String)]) -> Response {
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let items: Vec<(String, Value)> = {
        let shares = lock(&inner.shares);
        let Some(key) = find_key(&shares, share) else {
            if lock(&inner.settings).missing_parent_as_empty {
                return ok_json(json!({}));
            }
            return error(
                StatusCode::NOT_FOUND,
                "RESOURCE_DOES_NOT_EXIST",
                "share not found",
            );
        };
        let Some(entry) = shares.get(key) else {
            return error(
                StatusCode::NOT_FOUND,
                "RESOURCE_DOES_NOT_EXIST",
                "share not found",
            );
        };
        entry
            .schemas
            .keys()
            .map(|n| (n.clone(), json!({"name": n, "share": key})))
            .collect()
    };
    let (items, next) = page(items, len, after.as_deref());
    list_answer(inner, items, next)
}

fn list_tables(
    inner: &Inner,
    share: &str,
    schema: Option<&str>,
    query: &[(String, String)],
) -> Response {
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let (snake, missing_as_empty) = {
        let s = lock(&inner.settings);
        (s.snake_case_share_id, s.missing_parent_as_empty)
    };
    let items: Vec<(String, Value)> = {
        let shares = lock(&inner.shares);
        let Some((share_key, entry)) =
            find_key(&shares, share).and_then(|k| shares.get(k).map(|e| (k, e)))
        else {
            if missing_as_empty {
                return ok_json(json!({}));
            }
            return error(
                StatusCode::NOT_FOUND,
                "RESOURCE_DOES_NOT_EXIST",
                "share not found",
            );
        };
        let mut out = Vec::new();
        for (schema_name, tables) in &entry.schemas {
            if schema.is_some_and(|want| !schema_name.eq_ignore_ascii_case(want)) {
                continue;
            }
            for (table_name, t) in tables {
                // A unit separator keeps (schema, table) keys ordered and unambiguous.
                out.push((
                    format!("{schema_name}\u{1f}{table_name}"),
                    t.to_json(share_key, entry.id.as_deref(), schema_name, snake),
                ));
            }
        }
        if schema.is_some_and(|want| find_key(&entry.schemas, want).is_none()) {
            if missing_as_empty {
                return ok_json(json!({}));
            }
            return error(
                StatusCode::NOT_FOUND,
                "RESOURCE_DOES_NOT_EXIST",
                "schema not found",
            );
        }
        out
    };
    let (items, next) = page(items, len, after.as_deref());
    list_answer(inner, items, next)
}

fn find_table(inner: &Inner, share: &str, schema: &str, table: &str) -> Option<SharingTable> {
    let gone = lock(&inner.settings).gone_on_load.iter().any(|(s, sc, t)| {
        s.eq_ignore_ascii_case(share)
            && sc.eq_ignore_ascii_case(schema)
            && t.eq_ignore_ascii_case(table)
    });
    if gone {
        return None;
    }
    let shares = lock(&inner.shares);
    let s = shares.get(find_key(&shares, share)?)?;
    let t = s.schemas.get(find_key(&s.schemas, schema)?)?;
    t.get(find_key(t, table)?).cloned()
}

fn version(inner: &Inner, share: &str, schema: &str, table: &str) -> Response {
    match find_table(inner, share, schema, table) {
        Some(t) => (
            StatusCode::OK,
            [("delta-table-version", t.version.to_string())],
            "",
        )
            .into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "table not found",
        ),
    }
}

fn metadata(inner: &Inner, share: &str, schema: &str, table: &str) -> Response {
    let Some(t) = find_table(inner, share, schema, table) else {
        return error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "table not found",
        );
    };
    let protocol = json!({"protocol": {"minReaderVersion": 1}}).to_string();
    let mut meta = json!({
        "id": t.metadata_id,
        "format": {"provider": t.format_provider},
        "schemaString": t.schema_string,
        "partitionColumns": t.partition_columns,
        "configuration": t.configuration,
    });
    if let (Some(obj), Some(d)) = (meta.as_object_mut(), &t.description) {
        obj.insert("description".into(), json!(d));
    }
    let meta = json!({"metaData": meta}).to_string();
    let body = if lock(&inner.settings).metadata_first {
        format!("{meta}\n{protocol}\n")
    } else {
        format!("{protocol}\n{meta}\n")
    };
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE.as_str(),
                "application/x-ndjson; charset=utf-8".to_owned(),
            ),
            ("delta-table-version", t.version.to_string()),
        ],
        body,
    )
        .into_response()
}

/// The signature a presigned fixture URL carries for a file id.
fn signature(id: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(format!("fixture-presign/{id}").as_bytes())[..12])
}

/// `POST .../query`: the table's `protocol`, `metaData` and one `file` line per live file,
/// each with a presigned URL on this server.
fn query_files(
    inner: &Inner,
    share: &str,
    schema: &str,
    table: &str,
    headers: &HeaderMap,
) -> Response {
    let Some(t) = find_table(inner, share, schema, table) else {
        return error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "table not found",
        );
    };
    let origin = lock(&inner.settings)
        .file_url_origin
        .clone()
        .unwrap_or_else(|| {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            format!("http://{host}")
        });
    let mut body = String::new();
    body.push_str(&json!({"protocol": {"minReaderVersion": 1}}).to_string());
    body.push('\n');
    body.push_str(
        &json!({"metaData": {
            "id": t.metadata_id,
            "format": {"provider": t.format_provider},
            "schemaString": t.schema_string,
            "partitionColumns": t.partition_columns,
            "configuration": t.configuration,
            "version": t.version,
        }})
        .to_string(),
    );
    body.push('\n');
    for f in &t.files {
        let mut file = json!({
            "url": format!("{origin}{}/_files/{}?sig={}", inner.prefix, f.id, signature(&f.id)),
            "id": f.id,
            "partitionValues": f.partition_values,
            "size": f.size,
        });
        if let (Some(obj), Some(stats)) = (file.as_object_mut(), &f.stats) {
            obj.insert("stats".into(), json!(stats));
        }
        body.push_str(&json!({"file": file}).to_string());
        body.push('\n');
    }
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE.as_str(),
                "application/x-ndjson; charset=utf-8".to_owned(),
            ),
            ("delta-table-version", t.version.to_string()),
        ],
        body,
    )
        .into_response()
}

/// `GET {prefix}/_files/{id}?sig=...`: a presigned file read, whole or ranged (`Range:
/// bytes=a-b`, answered `206`).
fn serve_file(
    inner: &Inner,
    id: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
) -> Response {
    if param(query, "sig") != Some(signature(id).as_str()) {
        return (StatusCode::FORBIDDEN, "bad signature").into_response();
    }
    let path = {
        let shares = lock(&inner.shares);
        shares
            .values()
            .flat_map(|s| s.schemas.values())
            .flat_map(|t| t.values())
            .flat_map(|t| t.files.iter())
            .find(|f| f.id == id)
            .map(|f| f.path.clone())
    };
    let Some(bytes) = path.and_then(|p| std::fs::read(p).ok()) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let len = bytes.len() as u64;
    let range = headers
        .get(header::RANGE)
        .and_then(|r| r.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
    match range {
        None => (StatusCode::OK, bytes).into_response(),
        Some((a, _)) if a >= len => (StatusCode::RANGE_NOT_SATISFIABLE, "").into_response(),
        Some((a, b)) => {
            let end = b.min(len - 1);
            let start = usize::try_from(a).unwrap_or(usize::MAX);
            let stop = usize::try_from(end).unwrap_or(usize::MAX);
            (
                StatusCode::PARTIAL_CONTENT,
                [(header::CONTENT_RANGE, format!("bytes {a}-{end}/{len}"))],
                bytes[start..=stop].to_vec(),
            )
                .into_response()
        }
    }
}

fn random_secret(prefix: &str, len: usize) -> String {
    use rand::Rng as _;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{tail}")
}

fn now_ms() -> i64 {
    let nanos = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

fn credentials(inner: &Inner, share: &str, schema: &str, table: &str, body: &[u8]) -> Response {
    let (mode, lifetime) = {
        let s = lock(&inner.settings);
        (s.credentials, s.credential_lifetime_ms)
    };
    if mode == CredentialsEndpoint::NotFound {
        return error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "no such route",
        );
    }
    let request: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_PARAMETER_VALUE",
                    "body not JSON",
                );
            }
        }
    };
    lock(&inner.credential_requests).push(request.clone());
    let Some(t) = find_table(inner, share, schema, table) else {
        return error(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            "table not found",
        );
    };
    if !t.offers_dir() {
        return error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "table is not shared with directory access",
        );
    }
    let root = t.location.clone().unwrap_or_default();
    let location = match request.get("location").and_then(Value::as_str) {
        Some(l) if !l.starts_with(&root) => {
            return error(
                StatusCode::BAD_REQUEST,
                "INVALID_PARAMETER_VALUE",
                "foreign location",
            );
        }
        Some(l) => l.to_owned(),
        None => root,
    };
    let n = inner.vend_counter.fetch_add(1, Ordering::SeqCst) + 1;
    let record = SharingVendedRecord {
        share: share.to_owned(),
        schema: schema.to_owned(),
        table: table.to_owned(),
        location: location.clone(),
        access_key_id: format!("ASIADSFIXTURE{n:07}"),
        secret_access_key: random_secret("dssecret", 32),
        session_token: random_secret("dssession", 48),
        expiration_time_ms: now_ms().saturating_add(lifetime),
    };
    lock(&inner.vended).push(record.clone());
    let expiration = if lock(&inner.settings).expiration_as_string {
        json!(record.expiration_time_ms.to_string())
    } else {
        json!(record.expiration_time_ms)
    };
    let aws = json!({
        "accessKeyId": record.access_key_id,
        "secretAccessKey": record.secret_access_key,
        "sessionToken": record.session_token,
    });
    match mode {
        CredentialsEndpoint::Flat => ok_json(json!({
            "awsTempCredentials": aws,
            "expirationTime": expiration,
        })),
        _ => ok_json(json!({"credentials": {
            "location": location,
            "awsTempCredentials": aws,
            "expirationTime": expiration,
        }})),
    }
}
