//! A Unity Catalog OSS fixture server (`/api/2.1/unity-catalog/...`), built from the Unity
//! Catalog OpenAPI, for testing the catalog-access Unity provider against evidence.
//!
//! It serves catalogs, schemas and tables with `max_results` / `page_token` pagination, table
//! info with columns, `POST /temporary-table-credentials`, static bearer tokens and an OAuth2
//! client-credentials token endpoint (`/oauth/token`, standing in for the external identity
//! provider a real deployment names as `token_uri`).
//!
//! Real servers differ from the OpenAPI in ways the provider must survive (see
//! `docs/catalog-access.md`, "Real-server behaviours"), so the fixture can switch them on: an
//! empty list answered as `{}` with the array field omitted, tables without `table_id`,
//! `expiration_time` as a decimal string, a listing that repeats an entry, a listing under a
//! missing catalog or schema answered `200 {}`, a table still listed after it was dropped
//! (404 on load), a token endpoint answering an error status with an empty body, and Delta
//! column-mapping ids in `type_json`. Faults (status codes, malformed JSON,
//! oversized bodies, forced 401s, held "slow" responses released by a [`tokio::sync::Notify`])
//! are injected per request with [`FaultRule`]. Every answered request is logged so tests
//! assert on what was actually sent. Catalogs, schemas and tables can be added, renamed and
//! removed while the server runs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::fixture::conditions::{Conditions, apply_conditions};
use crate::fixture::faults::{self, take_fault};
use crate::fixture::gate::HoldGate;
use crate::fixture::lock;
use crate::fixture::paging::{NameTokens, ZeroLen, page_after, page_len};
use crate::fixture::recorder::{
    RecordedRequest, RequestLog, parse_query, percent_decode, record_requests,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Path prefix of every Unity Catalog REST route.
pub const API_PREFIX: &str = "/api/2.1/unity-catalog";
/// Path of the fixture's OAuth2 token endpoint.
pub const TOKEN_PATH: &str = "/oauth/token";
/// The static bearer token accepted by default.
pub const DEFAULT_BEARER_TOKEN: &str = "unity-static-token";
/// The OAuth2 client id accepted by default.
pub const DEFAULT_CLIENT_ID: &str = "flotilla-client";
/// The OAuth2 client secret accepted by default.
pub const DEFAULT_CLIENT_SECRET: &str = "flotilla-client-secret";

/// What an injected fault does to a matching request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and a Unity-style error body.
    Status(u16),
    /// Answer 200 with a truncated, unparsable JSON body.
    MalformedJson,
    /// Answer 200 with a syntactically valid JSON body of (at least) this many bytes.
    Oversized(usize),
    /// Answer 401 whatever credentials were presented.
    Unauthorized,
    /// Hold the request until [`UnityFixture::release_held`], then answer normally: a "slow"
    /// upstream without wall-clock sleeps.
    Hold,
}

/// Which requests a fault applies to, and how many times (the fixtures' shared rule; the
/// Delta Sharing fixture uses it too).
pub type FaultRule = faults::FaultRule<Fault>;

/// One column of a fixture table, shaped like the OpenAPI `ColumnInfo`.
#[derive(Clone, Debug, PartialEq)]
pub struct UnityColumn {
    pub name: String,
    /// `ColumnTypeName` enum value, e.g. `LONG`, `DECIMAL`, `STRUCT`.
    pub type_name: String,
    /// SQL / catalogString text, e.g. `bigint`, `decimal(10,2)`.
    pub type_text: String,
    /// Spark `StructField` JSON; `None` omits the field, as some servers do.
    pub type_json: Option<String>,
    pub nullable: bool,
    pub type_precision: Option<i32>,
    pub type_scale: Option<i32>,
    pub comment: Option<String>,
    pub partition_index: Option<i32>,
}

impl UnityColumn {
    /// A column of a Spark primitive type (`long`, `string`, `decimal(10,2)`, ...), with the
    /// `type_name`, `type_text` and `type_json` a real server derives from it.
    pub fn primitive(name: &str, spark_type: &str, nullable: bool) -> Self {
        let (type_name, type_text, precision, scale) = spark_primitive_names(spark_type);
        let type_json =
            json!({"name": name, "type": spark_type, "nullable": nullable, "metadata": {}})
                .to_string();
        Self {
            name: name.to_owned(),
            type_name,
            type_text,
            type_json: Some(type_json),
            nullable,
            type_precision: precision,
            type_scale: scale,
            comment: None,
            partition_index: None,
        }
    }

    /// A column whose type is a nested Spark type given as JSON (struct, array, map).
    pub fn nested(name: &str, type_name: &str, type_text: &str, spark_type: Value) -> Self {
        let type_json =
            json!({"name": name, "type": spark_type, "nullable": true, "metadata": {}}).to_string();
        Self {
            name: name.to_owned(),
            type_name: type_name.to_owned(),
            type_text: type_text.to_owned(),
            type_json: Some(type_json),
            nullable: true,
            type_precision: None,
            type_scale: None,
            comment: None,
            partition_index: None,
        }
    }

    /// The same column with a `partition_index` (its place in the partitioning).
    pub fn with_partition_index(mut self, index: i32) -> Self {
        self.partition_index = Some(index);
        self
    }

    /// The same column with a Delta column-mapping id (and physical name) in the metadata of
    /// its `type_json`, as a table with column mapping has.
    pub fn with_column_mapping_id(mut self, id: i64) -> Self {
        if let Some(tj) = &self.type_json
            && let Ok(mut v) = serde_json::from_str::<Value>(tj)
        {
            if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                md.insert("delta.columnMapping.id".into(), json!(id));
                md.insert(
                    "delta.columnMapping.physicalName".into(),
                    json!(format!("col-{id}")),
                );
            }
            self.type_json = Some(v.to_string());
        }
        self
    }

    /// The same column without `type_json`, leaving only `type_name` / `type_text`.
    pub fn without_type_json(mut self) -> Self {
        self.type_json = None;
        self
    }

    fn to_json(&self, position: usize) -> Value {
        let mut v = json!({
            "name": self.name,
            "type_name": self.type_name,
            "type_text": self.type_text,
            "position": position,
            "nullable": self.nullable,
        });
        let obj = v.as_object_mut();
        if let Some(obj) = obj {
            if let Some(t) = &self.type_json {
                obj.insert("type_json".into(), json!(t));
            }
            if let Some(p) = self.type_precision {
                obj.insert("type_precision".into(), json!(p));
            }
            if let Some(s) = self.type_scale {
                obj.insert("type_scale".into(), json!(s));
            }
            if let Some(c) = &self.comment {
                obj.insert("comment".into(), json!(c));
            }
            if let Some(p) = self.partition_index {
                obj.insert("partition_index".into(), json!(p));
            }
        }
        v
    }
}

fn spark_primitive_names(spark: &str) -> (String, String, Option<i32>, Option<i32>) {
    if let Some(inner) = spark
        .strip_prefix("decimal(")
        .and_then(|s| s.strip_suffix(')'))
    {
        let mut parts = inner.split(',').map(|p| p.trim().parse::<i32>().ok());
        let p = parts.next().flatten();
        let s = parts.next().flatten();
        return ("DECIMAL".into(), spark.into(), p, s);
    }
    let (name, text) = match spark {
        "boolean" => ("BOOLEAN", "boolean"),
        "byte" => ("BYTE", "tinyint"),
        "short" => ("SHORT", "smallint"),
        "integer" => ("INT", "int"),
        "long" => ("LONG", "bigint"),
        "float" => ("FLOAT", "float"),
        "double" => ("DOUBLE", "double"),
        "date" => ("DATE", "date"),
        "timestamp" => ("TIMESTAMP", "timestamp"),
        "timestamp_ntz" => ("TIMESTAMP_NTZ", "timestamp_ntz"),
        "string" => ("STRING", "string"),
        "binary" => ("BINARY", "binary"),
        other => ("USER_DEFINED_TYPE", other),
    };
    (name.into(), text.into(), None, None)
}

/// A fixture table, shaped like the OpenAPI `TableInfo`.
#[derive(Clone, Debug, PartialEq)]
pub struct UnityTable {
    pub name: String,
    /// Stable id; kept across renames. Omitted from answers when the fixture's
    /// `omit_table_id` quirk is on.
    pub table_id: String,
    /// `TableType`, e.g. `EXTERNAL`, `MANAGED`, `VIEW`.
    pub table_type: String,
    /// `DataSourceFormat`, e.g. `DELTA`, `PARQUET`; `None` omits it.
    pub data_source_format: Option<String>,
    pub storage_location: Option<String>,
    pub columns: Vec<UnityColumn>,
    pub properties: BTreeMap<String, String>,
    pub comment: Option<String>,
    pub view_definition: Option<String>,
}

impl UnityTable {
    /// An external Delta table at `location` with four columns covering a required long, a
    /// string, a timestamp and a decimal.
    pub fn delta(name: &str, location: &str) -> Self {
        Self {
            name: name.to_owned(),
            table_id: uuid::Uuid::new_v4().to_string(),
            table_type: "EXTERNAL".into(),
            data_source_format: Some("DELTA".into()),
            storage_location: Some(location.to_owned()),
            columns: vec![
                UnityColumn::primitive("id", "long", false),
                UnityColumn::primitive("name", "string", true),
                UnityColumn::primitive("ts", "timestamp", true),
                UnityColumn::primitive("amount", "decimal(10,2)", true),
            ],
            properties: BTreeMap::new(),
            comment: None,
            view_definition: None,
        }
    }

    /// Replaces the columns.
    pub fn with_columns(mut self, columns: Vec<UnityColumn>) -> Self {
        self.columns = columns;
        self
    }

    /// Sets `data_source_format` (`None` omits it).
    pub fn with_format(mut self, format: Option<&str>) -> Self {
        self.data_source_format = format.map(str::to_owned);
        self
    }

    /// Sets `table_type`.
    pub fn with_table_type(mut self, table_type: &str) -> Self {
        self.table_type = table_type.to_owned();
        self
    }

    fn to_json(&self, catalog: &str, schema: &str, with_id: bool) -> Value {
        let mut v = json!({
            "name": self.name,
            "catalog_name": catalog,
            "schema_name": schema,
            "full_name": format!("{catalog}.{schema}.{}", self.name),
            "table_type": self.table_type,
            "columns": self.columns.iter().enumerate()
                .map(|(i, c)| c.to_json(i)).collect::<Vec<_>>(),
            "properties": self.properties,
            "created_at": 1_700_000_000_000_i64,
        });
        if let Some(obj) = v.as_object_mut() {
            if with_id {
                obj.insert("table_id".into(), json!(self.table_id));
            }
            if let Some(f) = &self.data_source_format {
                obj.insert("data_source_format".into(), json!(f));
            }
            if let Some(l) = &self.storage_location {
                obj.insert("storage_location".into(), json!(l));
            }
            if let Some(c) = &self.comment {
                obj.insert("comment".into(), json!(c));
            }
            if let Some(d) = &self.view_definition {
                obj.insert("view_definition".into(), json!(d));
            }
        }
        v
    }
}

/// A set of temporary credentials the fixture vended, kept so tests can check that none of
/// it leaks into errors, logs or `Debug` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendedRecord {
    pub table_id: String,
    pub operation: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expiration_time_ms: i64,
    pub url: String,
}

#[derive(Clone, Debug, Default)]
struct SchemaEntry {
    id: String,
    tables: BTreeMap<String, UnityTable>,
}

#[derive(Clone, Debug, Default)]
struct CatalogEntry {
    id: String,
    schemas: BTreeMap<String, SchemaEntry>,
}

#[derive(Debug)]
struct Settings {
    bearer_tokens: Vec<String>,
    client_id: String,
    client_secret: String,
    token_lifetime_secs: i64,
    credential_lifetime_ms: i64,
    empty_list_as_object: bool,
    omit_table_id: bool,
    expiration_as_string: bool,
    duplicate_listings: bool,
    missing_parent_as_empty: bool,
    token_endpoint_status: Option<u16>,
    gone_on_load: Vec<(String, String, String)>,
    max_page_size: usize,
    faults: Vec<FaultRule>,
}

struct Inner {
    catalogs: Mutex<BTreeMap<String, CatalogEntry>>,
    settings: Mutex<Settings>,
    issued_tokens: Mutex<Vec<(u64, String)>>,
    presented_ordinals: Mutex<Vec<Option<u64>>>,
    credential_requests: Mutex<Vec<Value>>,
    vended: Mutex<Vec<VendedRecord>>,
    log: RequestLog,
    token_counter: AtomicU64,
    vend_counter: AtomicU64,
    token_requests: AtomicUsize,
    hold: HoldGate,
    conditions: Conditions,
}

/// A running Unity Catalog fixture server on `127.0.0.1`, stopped on drop.
pub struct UnityFixture {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for UnityFixture {
    fn drop(&mut self) {
        self.release_held();
        self.task.abort();
    }
}

impl UnityFixture {
    /// Starts an empty fixture on an ephemeral loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound: the test cannot run at all.
    pub async fn start() -> Self {
        Self::start_with_conditions(Conditions::new()).await
    }

    /// Starts an empty fixture applying `conditions` (latency...) from its first request;
    /// the caller keeps a clone to change them later.
    ///
    /// # Panics
    /// When no loopback port can be bound: the test cannot run at all.
    pub async fn start_with_conditions(conditions: Conditions) -> Self {
        let inner = Arc::new(Inner {
            catalogs: Mutex::new(BTreeMap::new()),
            settings: Mutex::new(Settings {
                bearer_tokens: vec![DEFAULT_BEARER_TOKEN.to_owned()],
                client_id: DEFAULT_CLIENT_ID.to_owned(),
                client_secret: DEFAULT_CLIENT_SECRET.to_owned(),
                token_lifetime_secs: 3600,
                credential_lifetime_ms: 3_600_000,
                empty_list_as_object: false,
                omit_table_id: false,
                expiration_as_string: false,
                duplicate_listings: false,
                missing_parent_as_empty: false,
                token_endpoint_status: None,
                gone_on_load: Vec::new(),
                max_page_size: 1000,
                faults: Vec::new(),
            }),
            issued_tokens: Mutex::new(Vec::new()),
            presented_ordinals: Mutex::new(Vec::new()),
            credential_requests: Mutex::new(Vec::new()),
            vended: Mutex::new(Vec::new()),
            log: RequestLog::default(),
            token_counter: AtomicU64::new(0),
            vend_counter: AtomicU64::new(0),
            token_requests: AtomicUsize::new(0),
            hold: HoldGate::default(),
            conditions,
        });
        #[allow(clippy::expect_used)]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the Unity fixture");
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

    /// Starts a fixture holding one catalog `main` with schema `default` and a Delta table
    /// `orders`.
    pub async fn start_with_sample() -> Self {
        let f = Self::start().await;
        f.add_catalog("main");
        f.add_schema("main", "default");
        f.add_table(
            "main",
            "default",
            UnityTable::delta("orders", "s3://bucket/main/orders"),
        );
        f
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The Unity Catalog REST base URL, `http://127.0.0.1:PORT/api/2.1/unity-catalog`.
    pub fn base_url(&self) -> String {
        format!("http://{}{API_PREFIX}", self.addr)
    }

    /// The OAuth2 token endpoint URL.
    pub fn token_url(&self) -> String {
        format!("http://{}{TOKEN_PATH}", self.addr)
    }

    /// The bound socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    // ---- data -------------------------------------------------------------------------

    /// Adds an empty catalog (no-op if present).
    pub fn add_catalog(&self, name: &str) {
        lock(&self.inner.catalogs)
            .entry(name.to_owned())
            .or_insert_with(|| CatalogEntry {
                id: uuid::Uuid::new_v4().to_string(),
                schemas: BTreeMap::new(),
            });
    }

    /// Removes a catalog and everything in it. Returns whether it existed.
    pub fn remove_catalog(&self, name: &str) -> bool {
        lock(&self.inner.catalogs).remove(name).is_some()
    }

    /// Adds an empty schema, creating the catalog if needed (no-op if present).
    pub fn add_schema(&self, catalog: &str, schema: &str) {
        let mut cats = lock(&self.inner.catalogs);
        let cat = cats
            .entry(catalog.to_owned())
            .or_insert_with(|| CatalogEntry {
                id: uuid::Uuid::new_v4().to_string(),
                schemas: BTreeMap::new(),
            });
        cat.schemas
            .entry(schema.to_owned())
            .or_insert_with(|| SchemaEntry {
                id: uuid::Uuid::new_v4().to_string(),
                tables: BTreeMap::new(),
            });
    }

    /// Renames a schema, keeping its tables and ids. Returns whether it existed.
    pub fn rename_schema(&self, catalog: &str, from: &str, to: &str) -> bool {
        let mut cats = lock(&self.inner.catalogs);
        let Some(cat) = cats.get_mut(catalog) else {
            return false;
        };
        match cat.schemas.remove(from) {
            Some(s) => {
                cat.schemas.insert(to.to_owned(), s);
                true
            }
            None => false,
        }
    }

    /// Removes a schema and its tables. Returns whether it existed.
    pub fn remove_schema(&self, catalog: &str, schema: &str) -> bool {
        let mut cats = lock(&self.inner.catalogs);
        cats.get_mut(catalog)
            .is_some_and(|c| c.schemas.remove(schema).is_some())
    }

    /// Adds (or replaces) a table, creating catalog and schema if needed. Returns its id.
    pub fn add_table(&self, catalog: &str, schema: &str, table: UnityTable) -> String {
        self.add_schema(catalog, schema);
        let id = table.table_id.clone();
        let mut cats = lock(&self.inner.catalogs);
        if let Some(s) = cats
            .get_mut(catalog)
            .and_then(|c| c.schemas.get_mut(schema))
        {
            s.tables.insert(table.name.clone(), table);
        }
        id
    }

    /// Renames a table in place, keeping its `table_id`. Returns whether it existed.
    pub fn rename_table(&self, catalog: &str, schema: &str, from: &str, to: &str) -> bool {
        let mut cats = lock(&self.inner.catalogs);
        let Some(s) = cats
            .get_mut(catalog)
            .and_then(|c| c.schemas.get_mut(schema))
        else {
            return false;
        };
        match s.tables.remove(from) {
            Some(mut t) => {
                t.name = to.to_owned();
                s.tables.insert(to.to_owned(), t);
                true
            }
            None => false,
        }
    }

    /// Removes a table. Returns whether it existed.
    pub fn remove_table(&self, catalog: &str, schema: &str, name: &str) -> bool {
        let mut cats = lock(&self.inner.catalogs);
        cats.get_mut(catalog)
            .and_then(|c| c.schemas.get_mut(schema))
            .is_some_and(|s| s.tables.remove(name).is_some())
    }

    // ---- quirks and settings ----------------------------------------------------------

    /// Answer an empty list as `{}`, omitting the array field (unitycatalog-rs does).
    pub fn set_empty_list_as_object(&self, on: bool) {
        lock(&self.inner.settings).empty_list_as_object = on;
    }

    /// Omit `table_id` from table answers (backends without stable ids).
    pub fn set_omit_table_id(&self, on: bool) {
        lock(&self.inner.settings).omit_table_id = on;
    }

    /// Answer `expiration_time` of vended credentials as a decimal string (proto3 JSON renders
    /// int64 that way; unitycatalog-rs does).
    pub fn set_expiration_as_string(&self, on: bool) {
        lock(&self.inner.settings).expiration_as_string = on;
    }

    /// Repeat the first entry of every non-empty listing page (a real server listed one schema
    /// twice).
    pub fn set_duplicate_listings(&self, on: bool) {
        lock(&self.inner.settings).duplicate_listings = on;
    }

    /// Answer a listing of schemas under a missing catalog, or of tables under a missing
    /// schema, with `200 {}` instead of 404.
    pub fn set_missing_parent_as_empty(&self, on: bool) {
        lock(&self.inner.settings).missing_parent_as_empty = on;
    }

    /// Make the OAuth token endpoint answer `status` with an empty body (`None`: normal).
    pub fn set_token_endpoint_status(&self, status: Option<u16>) {
        lock(&self.inner.settings).token_endpoint_status = status;
    }

    /// Drops a table from lookups while listings still name it: loading it (and vending for
    /// it) answers 404, as for a dropped table a stale listing still shows.
    pub fn drop_but_keep_listed(&self, catalog: &str, schema: &str, name: &str) {
        lock(&self.inner.settings).gone_on_load.push((
            catalog.to_owned(),
            schema.to_owned(),
            name.to_owned(),
        ));
    }

    /// The server-configured page length cap (`max_results` is min'd with it).
    pub fn set_max_page_size(&self, n: usize) {
        lock(&self.inner.settings).max_page_size = n.max(1);
    }

    /// Replaces the accepted static bearer tokens.
    pub fn set_bearer_tokens(&self, tokens: &[&str]) {
        lock(&self.inner.settings).bearer_tokens = tokens.iter().map(|t| (*t).to_owned()).collect();
    }

    /// Sets the accepted OAuth2 client credentials.
    pub fn set_client_credentials(&self, client_id: &str, client_secret: &str) {
        let mut s = lock(&self.inner.settings);
        s.client_id = client_id.to_owned();
        s.client_secret = client_secret.to_owned();
    }

    /// `expires_in` of issued access tokens, in seconds.
    pub fn set_token_lifetime_secs(&self, secs: i64) {
        lock(&self.inner.settings).token_lifetime_secs = secs;
    }

    /// Lifetime of vended storage credentials relative to now, in ms (negative: already
    /// expired when vended).
    pub fn set_credential_lifetime_ms(&self, ms: i64) {
        lock(&self.inner.settings).credential_lifetime_ms = ms;
    }

    /// Invalidates every OAuth access token issued so far: the next request bearing one is
    /// answered 401, as an upstream whose token expired server-side would.
    pub fn expire_issued_tokens(&self) {
        lock(&self.inner.issued_tokens).clear();
    }

    /// How many token requests the OAuth endpoint answered (successful or not).
    pub fn token_requests(&self) -> usize {
        self.inner.token_requests.load(Ordering::SeqCst)
    }

    /// For every authorized catalog request, in order: the ordinal (1, 2, ...) of the issued
    /// OAuth token it bore, or `None` for a static bearer token. Evidence of token refresh that
    /// does not put tokens in the log.
    pub fn presented_token_ordinals(&self) -> Vec<Option<u64>> {
        lock(&self.inner.presented_ordinals).clone()
    }

    /// The JSON bodies of every `temporary-table-credentials` request, in order.
    pub fn credential_requests(&self) -> Vec<Value> {
        lock(&self.inner.credential_requests).clone()
    }

    /// The request log shared with other evidence helpers.
    pub fn log(&self) -> RequestLog {
        self.inner.log.clone()
    }

    /// The network conditions (latency...) applied to every request.
    pub fn conditions(&self) -> &Conditions {
        &self.inner.conditions
    }

    /// Every credential set vended so far.
    pub fn vended(&self) -> Vec<VendedRecord> {
        lock(&self.inner.vended).clone()
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
}

// ---- request handling ---------------------------------------------------------------------

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error_code": code, "message": message})),
    )
        .into_response()
}

fn ok_json(v: Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

fn bearer_of(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let rest = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))?;
    Some(rest.trim().to_owned())
}

fn parse_pairs(raw: &str) -> Vec<(String, String)> {
    parse_query(raw)
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
    let query = parse_pairs(uri.query().unwrap_or(""));
    let body_text = String::from_utf8_lossy(&body).into_owned();

    // The token endpoint is the identity provider, not the catalog: faults target it too
    // (so tests can fail token acquisition), but it has its own authentication.
    let fault = take_fault(&mut lock(&inner.settings).faults, &method, &path);
    match fault {
        Some(Fault::Status(code)) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, "INJECTED_FAULT", "injected fault");
        }
        Some(Fault::MalformedJson) => {
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                "{\"catalogs\": [{\"name\": \"trunc",
            )
                .into_response();
        }
        Some(Fault::Oversized(n)) => {
            let padding = "x".repeat(n);
            return ok_json(json!({"padding": padding}));
        }
        Some(Fault::Unauthorized) => {
            return error(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", "injected 401");
        }
        Some(Fault::Hold) => inner.hold.wait().await,
        None => {}
    }

    if path == TOKEN_PATH {
        return token_endpoint(inner, &method, &headers, &body_text);
    }

    let Some(route) = path.strip_prefix(API_PREFIX) else {
        return error(StatusCode::NOT_FOUND, "NOT_FOUND", "no such route");
    };

    // Authentication: a configured static bearer token or a live issued OAuth token.
    let presented = bearer_of(&headers).and_then(|t| {
        if lock(&inner.settings).bearer_tokens.contains(&t) {
            return Some(None);
        }
        lock(&inner.issued_tokens)
            .iter()
            .find(|(_, b)| *b == t)
            .map(|(n, _)| Some(*n))
    });
    let Some(ordinal) = presented else {
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "missing or invalid token",
        );
    };
    lock(&inner.presented_ordinals).push(ordinal);

    let segments: Vec<String> = route
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method.clone(), segs.as_slice()) {
        (Method::GET, ["catalogs"]) => list_catalogs(inner, &query),
        (Method::GET, ["catalogs", name]) => get_catalog(inner, name),
        (Method::GET, ["schemas"]) => list_schemas(inner, &query),
        (Method::GET, ["schemas", full]) => get_schema(inner, full),
        (Method::GET, ["tables"]) => list_tables(inner, &query),
        (Method::GET, ["tables", full]) => get_table(inner, full),
        (Method::POST, ["temporary-table-credentials"]) => vend(inner, &body_text),
        _ => error(StatusCode::NOT_FOUND, "NOT_FOUND", "no such route"),
    }
}

fn token_endpoint(inner: &Inner, method: &Method, headers: &HeaderMap, body: &str) -> Response {
    inner.token_requests.fetch_add(1, Ordering::SeqCst);
    if let Some(status) = lock(&inner.settings).token_endpoint_status {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, "").into_response();
    }
    if method != Method::POST {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            "POST only",
        );
    }
    let form = parse_pairs(body);
    if param(&form, "grant_type") != Some("client_credentials") {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "unsupported_grant_type"})),
        )
            .into_response();
    }
    // Client authentication: HTTP Basic (RFC 6749 §2.3.1 preferred) or form fields.
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok())
        .and_then(|s| {
            s.split_once(':')
                .map(|(i, p)| (percent_decode(i), percent_decode(p)))
        });
    let (id, secret) = match basic {
        Some(pair) => pair,
        None => (
            param(&form, "client_id").unwrap_or_default().to_owned(),
            param(&form, "client_secret").unwrap_or_default().to_owned(),
        ),
    };
    let lifetime = {
        let s = lock(&inner.settings);
        if id != s.client_id || secret != s.client_secret {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "invalid_client"})),
            )
                .into_response();
        }
        s.token_lifetime_secs
    };
    let n = inner.token_counter.fetch_add(1, Ordering::SeqCst) + 1;
    let token = format!("uc-access-{n}-{}", uuid::Uuid::new_v4().simple());
    lock(&inner.issued_tokens).push((n, token.clone()));
    let mut answer = json!({"access_token": token, "token_type": "Bearer", "expires_in": lifetime});
    if let (Some(obj), Some(scope)) = (answer.as_object_mut(), param(&form, "scope")) {
        obj.insert("scope".into(), json!(scope));
    }
    ok_json(answer)
}

/// Unity page tokens name the last item returned.
const TOKENS: NameTokens = NameTokens { prefix: "uc1." };

/// Parses `max_results` and `page_token` into (page length, resume-after name).
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
        "max_results",
        param(query, "max_results"),
        cap,
        ZeroLen::ServerCap,
    )
    .map_err(bad)?;
    let after = TOKENS
        .resume_after("page_token", param(query, "page_token"))
        .map_err(bad)?;
    Ok((len, after))
}

fn page<T: Clone>(
    items: &BTreeMap<String, T>,
    len: usize,
    after: Option<&str>,
) -> (Vec<(String, T)>, Option<String>) {
    page_after(
        TOKENS,
        items.iter().map(|(k, v)| (k.clone(), v.clone())),
        len,
        after,
    )
}

fn list_answer(
    inner: &Inner,
    field: &str,
    mut items: Vec<Value>,
    next: Option<String>,
) -> Response {
    let (empty_as_object, duplicate) = {
        let s = lock(&inner.settings);
        (s.empty_list_as_object, s.duplicate_listings)
    };
    if duplicate && let Some(first) = items.first().cloned() {
        items.push(first);
    }
    let mut obj = serde_json::Map::new();
    if !(items.is_empty() && empty_as_object) {
        obj.insert(field.to_owned(), Value::Array(items));
    }
    if let Some(n) = next {
        obj.insert("next_page_token".into(), json!(n));
    }
    ok_json(Value::Object(obj))
}

fn catalog_json(name: &str, c: &CatalogEntry) -> Value {
    json!({"name": name, "id": c.id, "owner": "fixture", "created_at": 1_700_000_000_000_i64})
}

fn schema_json(catalog: &str, name: &str, s: &SchemaEntry) -> Value {
    json!({
        "name": name,
        "catalog_name": catalog,
        "full_name": format!("{catalog}.{name}"),
        "schema_id": s.id,
        "created_at": 1_700_000_000_000_i64,
    })
}

fn list_catalogs(inner: &Inner, query: &[(String, String)]) -> Response {
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let (items, next) = page(&lock(&inner.catalogs), len, after.as_deref());
    let items = items.iter().map(|(n, c)| catalog_json(n, c)).collect();
    list_answer(inner, "catalogs", items, next)
}

fn get_catalog(inner: &Inner, name: &str) -> Response {
    match lock(&inner.catalogs).get(name) {
        Some(c) => ok_json(catalog_json(name, c)),
        None => error(
            StatusCode::NOT_FOUND,
            "CATALOG_DOES_NOT_EXIST",
            "catalog not found",
        ),
    }
}

fn list_schemas(inner: &Inner, query: &[(String, String)]) -> Response {
    let Some(catalog) = param(query, "catalog_name") else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "catalog_name required",
        );
    };
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let cats = lock(&inner.catalogs);
    let Some(cat) = cats.get(catalog) else {
        if lock(&inner.settings).missing_parent_as_empty {
            return ok_json(json!({}));
        }
        return error(
            StatusCode::NOT_FOUND,
            "CATALOG_DOES_NOT_EXIST",
            "catalog not found",
        );
    };
    let (items, next) = page(&cat.schemas, len, after.as_deref());
    drop(cats);
    let items = items
        .iter()
        .map(|(n, s)| schema_json(catalog, n, s))
        .collect();
    list_answer(inner, "schemas", items, next)
}

fn get_schema(inner: &Inner, full: &str) -> Response {
    let Some((catalog, schema)) = full.split_once('.') else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "bad full_name",
        );
    };
    match lock(&inner.catalogs)
        .get(catalog)
        .and_then(|c| c.schemas.get(schema))
    {
        Some(s) => ok_json(schema_json(catalog, schema, s)),
        None => error(
            StatusCode::NOT_FOUND,
            "SCHEMA_DOES_NOT_EXIST",
            "schema not found",
        ),
    }
}

fn list_tables(inner: &Inner, query: &[(String, String)]) -> Response {
    let (Some(catalog), Some(schema)) = (param(query, "catalog_name"), param(query, "schema_name"))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "catalog_name and schema_name required",
        );
    };
    let (len, after) = match page_params(inner, query) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let with_id = !lock(&inner.settings).omit_table_id;
    let cats = lock(&inner.catalogs);
    let Some(s) = cats.get(catalog).and_then(|c| c.schemas.get(schema)) else {
        if lock(&inner.settings).missing_parent_as_empty {
            return ok_json(json!({}));
        }
        return error(
            StatusCode::NOT_FOUND,
            "SCHEMA_DOES_NOT_EXIST",
            "schema not found",
        );
    };
    let (items, next) = page(&s.tables, len, after.as_deref());
    drop(cats);
    let items = items
        .iter()
        .map(|(_, t)| t.to_json(catalog, schema, with_id))
        .collect();
    list_answer(inner, "tables", items, next)
}

fn get_table(inner: &Inner, full: &str) -> Response {
    let mut parts = full.splitn(3, '.');
    let (Some(catalog), Some(schema), Some(name)) = (parts.next(), parts.next(), parts.next())
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "bad full_name",
        );
    };
    let (with_id, gone) = {
        let s = lock(&inner.settings);
        let gone = s
            .gone_on_load
            .iter()
            .any(|(c, sc, t)| (c.as_str(), sc.as_str(), t.as_str()) == (catalog, schema, name));
        (!s.omit_table_id, gone)
    };
    if gone {
        return error(
            StatusCode::NOT_FOUND,
            "TABLE_DOES_NOT_EXIST",
            "table not found",
        );
    }
    match lock(&inner.catalogs)
        .get(catalog)
        .and_then(|c| c.schemas.get(schema))
        .and_then(|s| s.tables.get(name))
    {
        Some(t) => ok_json(t.to_json(catalog, schema, with_id)),
        None => error(
            StatusCode::NOT_FOUND,
            "TABLE_DOES_NOT_EXIST",
            "table not found",
        ),
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

fn vend(inner: &Inner, body: &str) -> Response {
    let Ok(req) = serde_json::from_str::<Value>(body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "body is not JSON",
        );
    };
    lock(&inner.credential_requests).push(req.clone());
    let (Some(table_id), Some(operation)) = (
        req.get("table_id").and_then(Value::as_str),
        req.get("operation").and_then(Value::as_str),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "table_id and operation required",
        );
    };
    if !matches!(operation, "READ" | "READ_WRITE") {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMETER_VALUE",
            "bad operation",
        );
    }
    let location = {
        let cats = lock(&inner.catalogs);
        cats.values()
            .flat_map(|c| c.schemas.values())
            .flat_map(|s| s.tables.values())
            .find(|t| t.table_id == table_id)
            .map(|t| t.storage_location.clone().unwrap_or_default())
    };
    let Some(url) = location else {
        return error(
            StatusCode::NOT_FOUND,
            "TABLE_DOES_NOT_EXIST",
            "no table with that id",
        );
    };
    let lifetime = lock(&inner.settings).credential_lifetime_ms;
    let n = inner.vend_counter.fetch_add(1, Ordering::SeqCst) + 1;
    let record = VendedRecord {
        table_id: table_id.to_owned(),
        operation: operation.to_owned(),
        access_key_id: format!("ASIAUCFIXTURE{n:07}"),
        secret_access_key: random_secret("ucsecret", 32),
        session_token: random_secret("ucsession", 48),
        expiration_time_ms: now_ms().saturating_add(lifetime),
        url,
    };
    lock(&inner.vended).push(record.clone());
    let expiration = if lock(&inner.settings).expiration_as_string {
        json!(record.expiration_time_ms.to_string())
    } else {
        json!(record.expiration_time_ms)
    };
    ok_json(json!({
        "aws_temp_credentials": {
            "access_key_id": record.access_key_id,
            "secret_access_key": record.secret_access_key,
            "session_token": record.session_token,
        },
        "expiration_time": expiration,
        "url": record.url,
    }))
}
