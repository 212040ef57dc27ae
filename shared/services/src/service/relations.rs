//! Tables and views ("relations"). Both share one name slot per namespace. Every create,
//! exact delete, rename/move and schema change replaces the catalog's directory generation in
//! the same transaction; metadata-location and property updates do not.
//! Relations materialized by an overlay refuse direct mutation (`MANAGED_BY_OVERLAY`).

use std::collections::BTreeMap;

use flotilla_domain::keys;
use flotilla_domain::model::{RelationKind, RelationRecord, ViewDefinition, etag_for};
use flotilla_domain::names::{NamespacePath, validate_segment};
use flotilla_metastore::{Consistency, Metastore, Op, Transaction};
use serde::Deserialize;
use serde_json::Value;

use super::OnConflict;
use super::catalogs::{self, validate_properties};
use super::events::{self, ObjectName, Operation, relation_type};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create_with};
use super::namespaces::{child_guard_keys, child_guards, child_guards_from};
use super::{MAX_ATTEMPTS, Versioned, backoff, check_if_match, read, to_body};
use crate::acl::Securable;
use crate::error::{Error, ErrorKind, Result};
use crate::state::AppState;

pub use flotilla_directory::{DirectoryGeneration, directory_bump};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTable {
    pub name: String,
    pub schema: Value,
    pub format: String,
    #[serde(default)]
    pub metadata_location: Option<String>,
    #[serde(default)]
    pub location: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Registers a table whose metadata exists already (the Iceberg register route): its
    /// event is `register-table`. Not part of the `/v1` body.
    #[serde(skip)]
    pub register: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateView {
    pub name: String,
    pub schema: Value,
    pub definitions: Vec<ViewDefinition>,
    #[serde(default)]
    pub default_namespace: Option<Vec<String>>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// PATCH of a table or view. `name` and `namespace` rename or move it (keeping its id).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchRelation {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<Vec<String>>,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default, deserialize_with = "catalogs::nullable")]
    pub metadata_location: Option<Option<String>>,
    #[serde(default, deserialize_with = "catalogs::nullable")]
    pub location: Option<Option<String>>,
    #[serde(default)]
    pub definitions: Option<Vec<ViewDefinition>>,
    #[serde(default, deserialize_with = "catalogs::nullable")]
    pub default_namespace: Option<Option<Vec<String>>>,
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
}

const FORMATS: &[&str] = &[
    "ICEBERG", "DELTA", "PARQUET", "HUDI", "CSV", "JSON", "ORC", "AVRO", "UNKNOWN",
];

pub fn validate_format(f: &str) -> Result<()> {
    if FORMATS.contains(&f) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "format must be one of {}",
            FORMATS.join(", ")
        )))
    }
}

/// An Iceberg-style struct schema: `{"type": "struct", "fields": [{"id", "name", "required",
/// "type"}, ...]}` with unique field names and ids at each level.
pub fn validate_schema(schema: &Value) -> Result<()> {
    fn check_struct(v: &Value, depth: usize) -> Result<(), String> {
        if depth > 32 {
            return Err("schema nests deeper than 32 levels".into());
        }
        let obj = v.as_object().ok_or("schema must be a JSON object")?;
        if obj.get("type").and_then(Value::as_str) != Some("struct") {
            return Err("schema type must be \"struct\"".into());
        }
        let fields = obj
            .get("fields")
            .and_then(Value::as_array)
            .ok_or("schema needs a \"fields\" array")?;
        let mut names = std::collections::HashSet::new();
        for f in fields {
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or("every field needs a string \"name\"")?;
            if name.is_empty() {
                return Err("field names must not be empty".into());
            }
            if !names.insert(name) {
                return Err(format!("duplicate field name {name:?}"));
            }
            f.get("id")
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("field {name:?} needs an integer \"id\""))?;
            match f.get("type") {
                Some(Value::String(_)) => {}
                Some(t @ Value::Object(_)) => check_nested(t, depth + 1)?,
                _ => return Err(format!("field {name:?} needs a \"type\"")),
            }
        }
        Ok(())
    }
    fn check_nested(t: &Value, depth: usize) -> Result<(), String> {
        match t.get("type").and_then(Value::as_str) {
            Some("struct") => check_struct(t, depth),
            Some("list") | Some("map") => Ok(()),
            _ => Err("nested types must be struct, list or map".into()),
        }
    }
    check_struct(schema, 0).map_err(|m| Error::invalid(format!("invalid schema: {m}")))
}

fn validate_definitions(defs: &[ViewDefinition]) -> Result<()> {
    if defs.is_empty() {
        return Err(Error::invalid("a view needs at least one definition"));
    }
    let mut dialects = std::collections::HashSet::new();
    for d in defs {
        validate_segment("dialect", &d.dialect)?;
        if d.sql.trim().is_empty() {
            return Err(Error::invalid("view SQL must not be empty"));
        }
        if d.sql.len() > 256 * 1024 {
            return Err(Error::invalid("view SQL is longer than 256 KiB"));
        }
        if !dialects.insert(d.dialect.to_ascii_lowercase()) {
            return Err(Error::invalid(format!(
                "dialect {:?} is given twice",
                d.dialect
            )));
        }
    }
    Ok(())
}

fn validate_location(what: &str, l: &Option<String>) -> Result<()> {
    if let Some(l) = l
        && (l.is_empty() || l.len() > 2048 || l.chars().any(char::is_control) || !l.contains("://"))
    {
        return Err(Error::invalid(format!("{what} must be an absolute URI")));
    }
    Ok(())
}

pub async fn load(
    store: &dyn Metastore,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
) -> Result<Option<Versioned<RelationRecord>>> {
    read::<RelationRecord>(
        store,
        keys::relation(catalog_id, ns, name),
        Consistency::Strong,
    )
    .await
}

async fn require(
    store: &dyn Metastore,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    kind: RelationKind,
) -> Result<Versioned<RelationRecord>> {
    match load(store, catalog_id, ns, name).await? {
        Some(v) if v.value.kind == kind => Ok(v),
        _ => Err(Error::not_found(match kind {
            RelationKind::Table => "table",
            RelationKind::View => "view",
        })),
    }
}

fn kind_word(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::Table => "table",
        RelationKind::View => "view",
    }
}

#[allow(clippy::too_many_arguments)]
async fn create_relation(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    template: RelationRecord,
    event_type: String,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    let slot = keys::relation(catalog_id, ns, &template.name);
    let mut reads = child_guard_keys(account, catalog_id, Some(ns));
    if flotilla_domain::names::validate_resource_id(catalog_id).is_ok() {
        reads.push(slot.clone());
    }
    run_create_with(state, idem, &reads, |id, got| {
        let (template, slot, event_type) = (&template, slot.clone(), &event_type);
        async move {
            let mut ops = child_guards_from(state, &got, account, catalog_id, Some(ns))?;
            let now = state.clock.now_rfc3339();
            let mut rec = template.clone();
            rec.id = id;
            rec.catalog_id = catalog_id.to_owned();
            rec.revision = 1;
            rec.create_time = now.clone();
            rec.update_time = now;
            match got.read::<RelationRecord>(keys::relation(catalog_id, ns, &template.name))? {
                None => ops.push(Op::create(slot.clone(), to_body(&rec)?)),
                Some(old) => {
                    let same_kind = old.value.kind == rec.kind;
                    match on_conflict {
                        OnConflict::ReturnExisting if same_kind => {
                            return Ok(Plan::Respond(RecordedResponse::ok(old.value.to_api())));
                        }
                        OnConflict::Replace if same_kind => {
                            if old.value.managed_by.is_some() {
                                return Err(managed_error(&old.value));
                            }
                            ops.push(Op::replace(slot.clone(), old.version, to_body(&rec)?));
                        }
                        _ => {
                            return Err(Error::already_exists(format!(
                                "a {} named {:?} already exists in namespace {ns}",
                                kind_word(old.value.kind),
                                template.name
                            )));
                        }
                    }
                }
            }
            ops.push(directory_bump(catalog_id)?);
            events::record_into(
                state,
                account,
                &mut ops,
                Operation::relation(event_type, catalog_id, ns, &rec.name)
                    .with_metadata_location(rec.metadata_location.as_deref()),
            )?;
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: slot,
            })
        }
    })
    .await
}

fn blank(
    kind: RelationKind,
    ns: &NamespacePath,
    name: String,
    schema: Value,
    properties: BTreeMap<String, String>,
) -> RelationRecord {
    RelationRecord {
        id: String::new(),
        catalog_id: String::new(),
        kind,
        namespace: ns.clone(),
        name,
        schema,
        format: None,
        metadata_location: None,
        location: None,
        definitions: Vec::new(),
        default_namespace: None,
        properties,
        managed_by: None,
        revision: 1,
        create_time: String::new(),
        update_time: String::new(),
    }
}

pub async fn create_table(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    req: CreateTable,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_segment("table name", &req.name)?;
    validate_schema(&req.schema)?;
    validate_format(&req.format)?;
    validate_location("metadata_location", &req.metadata_location)?;
    validate_location("location", &req.location)?;
    validate_properties(&req.properties)?;
    let mut rec = blank(
        RelationKind::Table,
        ns,
        req.name,
        req.schema,
        req.properties,
    );
    rec.format = Some(req.format);
    rec.metadata_location = req.metadata_location;
    rec.location = req.location;
    let verb = if req.register { "register" } else { "create" };
    let event_type = relation_type(verb, RelationKind::Table);
    create_relation(
        state,
        account,
        catalog_id,
        ns,
        rec,
        event_type,
        on_conflict,
        idem,
    )
    .await
}

pub async fn create_view(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    req: CreateView,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> Result<RecordedResponse> {
    validate_segment("view name", &req.name)?;
    validate_schema(&req.schema)?;
    validate_definitions(&req.definitions)?;
    validate_properties(&req.properties)?;
    let default_namespace = match req.default_namespace {
        Some(p) => Some(NamespacePath::new(p)?.segments().to_vec()),
        None => None,
    };
    let mut rec = blank(RelationKind::View, ns, req.name, req.schema, req.properties);
    rec.definitions = req.definitions;
    rec.default_namespace = default_namespace;
    let event_type = relation_type("create", RelationKind::View);
    create_relation(
        state,
        account,
        catalog_id,
        ns,
        rec,
        event_type,
        on_conflict,
        idem,
    )
    .await
}

pub async fn get(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    kind: RelationKind,
) -> Result<Value> {
    // One round trip: the catalog (which must belong to the account) and the slot.
    let reads = catalogs::fetch_with(
        state.store.as_ref(),
        account,
        catalog_id,
        vec![keys::relation(catalog_id, ns, name)],
    )
    .await?;
    catalogs::load_from(&reads, account, catalog_id)?;
    match reads.read::<RelationRecord>(keys::relation(catalog_id, ns, name))? {
        Some(v) if v.value.kind == kind => Ok(v.value.to_api()),
        _ => Err(Error::not_found(kind_word(kind))),
    }
}

/// The relations of `kind` in `ns` the caller may read.
pub async fn list(
    state: &AppState,
    access: &crate::acl::Access,
    catalog_id: &str,
    ns: &NamespacePath,
    kind: RelationKind,
    page_size: usize,
    token: Option<&str>,
) -> Result<Value> {
    let account = access.account.as_str();
    let store = state.store.as_ref();
    // One round trip for the catalog and the namespace, then the page.
    let reads = catalogs::fetch_with(
        store,
        account,
        catalog_id,
        vec![keys::namespace(catalog_id, ns)],
    )
    .await?;
    catalogs::load_from(&reads, account, catalog_id)?;
    super::namespaces::require_from(&reads, catalog_id, ns)?;
    // A reader of the whole namespace sees every relation in it: no check per item.
    let all = access.allows(
        crate::acl::Action::Read,
        &Securable::namespace(catalog_id, ns),
    );
    let (items, next) = super::list_page(
        store,
        &keys::catalog_pk(catalog_id),
        &keys::relations_in_prefix(ns),
        kind_word(kind),
        Consistency::Eventual,
        page_size,
        token,
        |item| {
            let rec: RelationRecord = super::decode(item)?;
            let visible = rec.kind == kind
                && (all || access.visible(&Securable::relation(catalog_id, ns, &rec.name, kind)));
            Ok(visible.then(|| rec.to_api()))
        },
    )
    .await?;
    Ok(super::page_body(items, next))
}

pub fn managed_error(rec: &RelationRecord) -> Error {
    let mut e = Error::new(
        ErrorKind::ManagedByOverlay,
        format!(
            "this {} is managed by an overlay; change it upstream or through the overlay",
            kind_word(rec.kind)
        ),
    );
    if let Some(m) = &rec.managed_by {
        e = e.with_detail("overlay_id", m.overlay_id.clone());
    }
    e
}

#[allow(clippy::too_many_arguments)]
pub async fn patch(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    kind: RelationKind,
    req: PatchRelation,
    if_match: Option<&str>,
) -> Result<Value> {
    // Field applicability and shape first: bad input changes nothing.
    if let Some(n) = &req.name {
        validate_segment("name", n)?;
    }
    let dest_ns = match &req.namespace {
        Some(p) => Some(NamespacePath::new(p.clone())?),
        None => None,
    };
    if let Some(s) = &req.schema {
        validate_schema(s)?;
    }
    if let Some(p) = &req.properties {
        validate_properties(p)?;
    }
    match kind {
        RelationKind::Table => {
            if req.definitions.is_some() || req.default_namespace.is_some() {
                return Err(Error::invalid(
                    "definitions and default_namespace apply to views only",
                ));
            }
            if let Some(f) = &req.format {
                validate_format(f)?;
            }
            if let Some(l) = &req.metadata_location {
                validate_location("metadata_location", l)?;
            }
            if let Some(l) = &req.location {
                validate_location("location", l)?;
            }
        }
        RelationKind::View => {
            if req.format.is_some() || req.metadata_location.is_some() || req.location.is_some() {
                return Err(Error::invalid(
                    "format, metadata_location and location apply to tables only",
                ));
            }
            if let Some(d) = &req.definitions {
                validate_definitions(d)?;
            }
        }
    }
    let store = state.store.as_ref();
    catalogs::load(store, account, catalog_id).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let cur = require(store, catalog_id, ns, name, kind).await?;
        if cur.value.managed_by.is_some() {
            return Err(managed_error(&cur.value));
        }
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let mut next = cur.value.clone();
        if let Some(n) = &req.name {
            next.name = n.clone();
        }
        if let Some(p) = &dest_ns {
            next.namespace = p.clone();
        }
        if let Some(s) = &req.schema {
            next.schema = s.clone();
        }
        if let Some(f) = &req.format {
            next.format = Some(f.clone());
        }
        if let Some(l) = &req.metadata_location {
            next.metadata_location = l.clone();
        }
        if let Some(l) = &req.location {
            next.location = l.clone();
        }
        if let Some(d) = &req.definitions {
            next.definitions = d.clone();
        }
        if let Some(d) = &req.default_namespace {
            next.default_namespace = match d {
                Some(p) => Some(NamespacePath::new(p.clone())?.segments().to_vec()),
                None => None,
            };
        }
        if let Some(p) = &req.properties {
            next.properties = p.clone();
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let moved = next.name != cur.value.name || next.namespace != cur.value.namespace;
        // Everything a directory entry holds signals; metadata location, location and
        // properties do not (they cannot change name resolution).
        let signals = moved
            || next.schema != cur.value.schema
            || next.format != cur.value.format
            || next.definitions != cur.value.definitions
            || next.default_namespace != cur.value.default_namespace;
        let old_slot = keys::relation(catalog_id, ns, name);
        let mut tx = Transaction::new();
        if moved {
            for op in child_guards(state, account, catalog_id, Some(&next.namespace)).await? {
                tx.push(op);
            }
            if load(store, catalog_id, &next.namespace, &next.name)
                .await?
                .is_some()
            {
                return Err(Error::already_exists(format!(
                    "{:?} already exists in namespace {}",
                    next.name, next.namespace
                )));
            }
            // The relation's grants move with it (they name it by path).
            for op in crate::acl::move_ops(
                store,
                &state.acl,
                account,
                &Securable::relation(catalog_id, ns, name, kind),
                &Securable::relation(catalog_id, &next.namespace, &next.name, kind),
            )
            .await?
            {
                tx.push(op);
            }
            tx.push(Op::delete_at(old_slot, cur.version));
            tx.push(Op::create(
                keys::relation(catalog_id, &next.namespace, &next.name),
                to_body(&next)?,
            ));
        } else {
            tx.push(Op::replace(old_slot, cur.version, to_body(&next)?));
        }
        if signals {
            tx.push(directory_bump(catalog_id)?);
        }
        if moved {
            let operation = Operation {
                destination: Some(ObjectName {
                    namespace: next.namespace.segments().to_vec(),
                    name: next.name.clone(),
                }),
                ..Operation::relation(&relation_type("rename", kind), catalog_id, ns, name)
            };
            events::record(state, account, &mut tx, operation)?;
        } else {
            let verb = match kind {
                RelationKind::Table => "update",
                RelationKind::View => "replace",
            };
            let operation = Operation::relation(&relation_type(verb, kind), catalog_id, ns, name)
                .with_metadata_location(next.metadata_location.as_deref());
            events::record_commit(state, account, &mut tx, operation, next.revision)?;
        }
        match store.transact(tx).await {
            Ok(()) => return Ok(next.to_api()),
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable("update did not converge"))
}

pub async fn delete(
    state: &AppState,
    account: &str,
    catalog_id: &str,
    ns: &NamespacePath,
    name: &str,
    kind: RelationKind,
    if_match: Option<&str>,
) -> Result<()> {
    let store = state.store.as_ref();
    catalogs::load(store, account, catalog_id).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let cur = require(store, catalog_id, ns, name, kind).await?;
        if cur.value.managed_by.is_some() {
            return Err(managed_error(&cur.value));
        }
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let mut tx = Transaction::new()
            .with(Op::delete_at(
                keys::relation(catalog_id, ns, name),
                cur.version,
            ))
            .with(directory_bump(catalog_id)?);
        // Its grants go with it (a grant created meanwhile fails this transaction).
        let securable = Securable::relation(catalog_id, ns, name, kind);
        for op in state.grant_cascade(account, &securable).await? {
            tx.push(op);
        }
        events::record(
            state,
            account,
            &mut tx,
            Operation::relation(&relation_type("drop", kind), catalog_id, ns, name),
        )?;
        match store.transact(tx).await {
            Ok(()) => return Ok(()),
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            Err(e) if e.is_outcome_unknown() => {
                if load(store, catalog_id, ns, name)
                    .await?
                    .is_none_or(|v| v.value.id != cur.value.id)
                {
                    return Ok(());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::unavailable("delete did not converge"))
}
