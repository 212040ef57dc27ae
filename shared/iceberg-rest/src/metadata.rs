//! Table metadata as engines sent it, where the `iceberg` crate would answer something else.
//! Every correction the endpoint makes to the crate's building and serialization of table
//! metadata lives here, each pinned by a test below that fails when a crate upgrade changes
//! the behaviour it works around (`docs/iceberg-rest.md`, "What an upgrade of the iceberg
//! crate must keep"):
//!
//! - **format version at create**: the crate refuses the reserved property `format-version`
//!   in a new table's properties; engines choose the table version with it. It is taken out
//!   and honoured (1, 2 or 3), an unknown version is `400` naming it.
//! - **field ids at create**: `TableMetadataBuilder::new` renumbers every field
//!   (`ReassignFieldIds`, top-level fields first), so nested ids the client assigned (map
//!   keys and values, list elements, struct fields) come back different. The client's ids
//!   are kept; ids are unique by the crate's own parsing, and may not be negative or fall in
//!   the range reserved for metadata columns.
//! - **order**: the crate keeps snapshots, schemas, partition specs and sort orders (and a
//!   view's versions) in hash maps, so each serialization lists them in another order.
//!   Snapshots are written in commit order, the others by id.
//! - **float literals**: the crate widens a `float` default to `f64` when it writes it, so
//!   `22.27` comes back `22.270000457763672`. Float literals are written as the shortest
//!   decimal that reads back as the same `f32`, which is what the client wrote.
//! - **sequence numbers in version 1**: a v1 table has none, yet some engines (DuckDB) add
//!   snapshots to one with a sequence number, which the crate refuses ("Last sequence
//!   number must be 0 in v1"). The number is dropped, as v1 metadata has no place for it.
//! - **literals the crate cannot hold**: its parsing silently drops a default it cannot
//!   read (a `timestamp_ns` or `timestamptz_ns` value, a `timestamptz` not written in UTC,
//!   a value of the wrong type), so the table would lose it. A request carrying one is
//!   `400` naming the field ([`check_literals`]); every default that is accepted comes back
//!   as the client wrote it in the spec's JSON form.

use std::collections::HashMap;

use iceberg::TableUpdate;
use iceberg::spec::{
    FormatVersion, NestedFieldRef, Schema, SortOrder, TableMetadata, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};
use serde_json::{Number, Value};

use crate::error::{IcebergError, IcebergResult};

/// The property that chooses a new table's format version (reserved: never stored).
pub const FORMAT_VERSION: &str = "format-version";

/// Field ids from this one up are reserved for metadata columns (`_file`, `_pos`, row
/// lineage, ...): the spec keeps the last 200 ids below `i32::MAX`.
pub const FIRST_RESERVED_FIELD_ID: i32 = i32::MAX - 200;

/// The format version a create asks for with the `format-version` property (removed from
/// `properties`), or `None` when it names none.
pub fn take_format_version(
    properties: &mut HashMap<String, String>,
) -> IcebergResult<Option<FormatVersion>> {
    let Some(v) = properties.remove(FORMAT_VERSION) else {
        return Ok(None);
    };
    match v.trim() {
        "1" => Ok(Some(FormatVersion::V1)),
        "2" => Ok(Some(FormatVersion::V2)),
        "3" => Ok(Some(FormatVersion::V3)),
        _ => Err(IcebergError::bad_request(format!(
            "unsupported format-version {v:?}: the supported table versions are 1, 2 and 3"
        ))),
    }
}

/// What a new table is made of.
pub struct NewTable {
    pub schema: Schema,
    pub spec: UnboundPartitionSpec,
    pub order: SortOrder,
    pub location: String,
    pub version: FormatVersion,
    pub properties: HashMap<String, String>,
}

/// The first metadata of a new table, with the field ids the client assigned. The crate
/// builds it (its checks, table uuid, spec and order ids, properties); where it renumbered
/// fields, the client's schema and ids are put back and the result is parsed again, so the
/// crate's own validation of the final metadata still runs.
pub fn new_table(t: NewTable) -> IcebergResult<TableMetadata> {
    check_field_ids(t.schema.as_struct().fields())?;
    let invalid = |e: iceberg::Error| {
        IcebergError::bad_request(format!("invalid table metadata: {}", e.message()))
    };
    let client = t.schema.clone();
    let built = TableMetadataBuilder::new(
        t.schema,
        t.spec,
        t.order,
        t.location,
        t.version,
        t.properties,
    )
    .and_then(|b| b.build())
    .map_err(invalid)?
    .metadata;
    let mut fresh_to_client = HashMap::new();
    pair_ids(
        built.current_schema().as_struct().fields(),
        client.as_struct().fields(),
        &mut fresh_to_client,
    );
    if fresh_to_client.iter().all(|(f, c)| f == c) {
        return Ok(built);
    }
    let client = client
        .into_builder()
        .with_schema_id(built.current_schema_id())
        .build()
        .map_err(invalid)?;
    let schema = serde_json::to_value(&client).map_err(IcebergError::internal)?;
    let mut v = serde_json::to_value(&built).map_err(IcebergError::internal)?;
    v["schemas"] = Value::Array(vec![schema.clone()]);
    if v.get("schema").is_some() {
        v["schema"] = schema;
    }
    v["last-column-id"] = Value::from(client.highest_field_id());
    let remap = |fields: &mut Value| {
        for f in fields.as_array_mut().into_iter().flatten() {
            if let Some(id) = f["source-id"].as_i64().and_then(|i| i32::try_from(i).ok())
                && let Some(c) = fresh_to_client.get(&id)
            {
                f["source-id"] = Value::from(*c);
            }
        }
    };
    for spec in v["partition-specs"].as_array_mut().into_iter().flatten() {
        remap(&mut spec["fields"]);
    }
    if v.get("partition-spec").is_some() {
        remap(&mut v["partition-spec"]);
    }
    for order in v["sort-orders"].as_array_mut().into_iter().flatten() {
        remap(&mut order["fields"]);
    }
    serde_json::from_value(v)
        .map_err(|e| IcebergError::bad_request(format!("invalid table metadata: {e}")))
}

/// Refuses ids the spec does not allow a column (the crate's parsing already refused
/// duplicates).
fn check_field_ids(fields: &[NestedFieldRef]) -> IcebergResult<()> {
    for f in fields {
        check_id(f.id, &f.name)?;
        check_nested(&f.field_type, &f.name)?;
    }
    Ok(())
}

fn check_nested(t: &Type, name: &str) -> IcebergResult<()> {
    match t {
        Type::Primitive(_) => Ok(()),
        Type::Struct(s) => check_field_ids(s.fields()),
        Type::List(l) => {
            check_id(l.element_field.id, &format!("{name}.element"))?;
            check_nested(&l.element_field.field_type, name)
        }
        Type::Map(m) => {
            check_id(m.key_field.id, &format!("{name}.key"))?;
            check_id(m.value_field.id, &format!("{name}.value"))?;
            check_nested(&m.key_field.field_type, name)?;
            check_nested(&m.value_field.field_type, name)
        }
    }
}

fn check_id(id: i32, name: &str) -> IcebergResult<()> {
    if (0..FIRST_RESERVED_FIELD_ID).contains(&id) {
        return Ok(());
    }
    Err(IcebergError::bad_request(format!(
        "field id {id} of {name} is not valid: field ids are 0..{FIRST_RESERVED_FIELD_ID} \
         (ids from {FIRST_RESERVED_FIELD_ID} up are reserved for metadata columns)"
    )))
}

/// Pairs the ids of two schemas of the same shape (the crate's renumbered copy and the
/// client's), field by field.
fn pair_ids(fresh: &[NestedFieldRef], client: &[NestedFieldRef], out: &mut HashMap<i32, i32>) {
    for (f, c) in fresh.iter().zip(client) {
        out.insert(f.id, c.id);
        pair_types(&f.field_type, &c.field_type, out);
    }
}

fn pair_types(fresh: &Type, client: &Type, out: &mut HashMap<i32, i32>) {
    match (fresh, client) {
        (Type::Struct(f), Type::Struct(c)) => pair_ids(f.fields(), c.fields(), out),
        (Type::List(f), Type::List(c)) => {
            pair_ids(
                std::slice::from_ref(&f.element_field),
                std::slice::from_ref(&c.element_field),
                out,
            );
        }
        (Type::Map(f), Type::Map(c)) => {
            pair_ids(
                &[f.key_field.clone(), f.value_field.clone()],
                &[c.key_field.clone(), c.value_field.clone()],
                out,
            );
        }
        _ => {}
    }
}

// ---- updates -----------------------------------------------------------------------------

/// The updates of a commit with the sequence number of every snapshot added while the table
/// is at version 1 set to 0 (v1 snapshots have none). `base` is the table's version, `None`
/// for a table this commit creates (version 2 unless an update names another).
pub fn without_v1_sequence_numbers(
    base: Option<FormatVersion>,
    updates: Vec<TableUpdate>,
) -> IcebergResult<Vec<TableUpdate>> {
    let mut version = base.unwrap_or_else(|| {
        updates
            .iter()
            .find_map(|u| match u {
                TableUpdate::UpgradeFormatVersion { format_version } => Some(*format_version),
                _ => None,
            })
            .unwrap_or(FormatVersion::V2)
    });
    updates
        .into_iter()
        .map(|u| match u {
            TableUpdate::UpgradeFormatVersion { format_version } => {
                version = version.max(format_version);
                Ok(u)
            }
            TableUpdate::AddSnapshot { ref snapshot }
                if version == FormatVersion::V1 && snapshot.sequence_number() != 0 =>
            {
                let mut v = serde_json::to_value(&u).map_err(IcebergError::internal)?;
                v["snapshot"]["sequence-number"] = Value::from(0);
                serde_json::from_value(v).map_err(|e| {
                    IcebergError::bad_request(format!("invalid add-snapshot update: {e}"))
                })
            }
            u => Ok(u),
        })
        .collect()
}

// ---- literals in requests ---------------------------------------------------------------

/// Refuses a request body with a default value the crate would drop: every schema in it
/// (any object of type `struct`: a create's schema, an `add-schema` update, nested struct
/// types) is checked field by field. Run on the raw body, before the crate parses it.
pub fn check_literals(body: &Value) -> IcebergResult<()> {
    match body {
        Value::Object(o) => {
            if o.get("type").and_then(Value::as_str) == Some("struct")
                && let Some(fields) = o.get("fields").and_then(Value::as_array)
            {
                for f in fields {
                    check_field_literals(f)?;
                }
            }
            o.values().try_for_each(check_literals)
        }
        Value::Array(a) => a.iter().try_for_each(check_literals),
        _ => Ok(()),
    }
}

fn check_field_literals(field: &Value) -> IcebergResult<()> {
    for key in ["initial-default", "write-default"] {
        let Some(raw) = field.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        // A type the crate cannot read fails its own parsing with its own message.
        let Ok(t) = serde_json::from_value::<Type>(field["type"].clone()) else {
            continue;
        };
        let name = field["name"].as_str().unwrap_or("?");
        match iceberg::spec::Literal::try_from_json(raw.clone(), &t) {
            Ok(Some(_)) => {}
            Ok(None) => {}
            Err(e) => {
                return Err(IcebergError::bad_request(format!(
                    "the {key} {raw} of field {name} (type {t}) cannot be stored: {}{}",
                    e.message(),
                    literal_hint(&t)
                )));
            }
        }
    }
    Ok(())
}

fn literal_hint(t: &Type) -> &'static str {
    match t {
        Type::Primitive(iceberg::spec::PrimitiveType::Timestamptz) => {
            " (write timestamptz literals in UTC, ending in +00:00)"
        }
        Type::Primitive(
            iceberg::spec::PrimitiveType::TimestampNs | iceberg::spec::PrimitiveType::TimestamptzNs,
        ) => " (defaults of nanosecond timestamp types are not supported yet)",
        _ => "",
    }
}

// ---- serialization ----------------------------------------------------------------------

/// The JSON of `metadata` as engines and the metadata files get it: snapshots in commit
/// order, schemas, specs and orders by id, float literals as written.
pub fn to_value(metadata: &TableMetadata) -> IcebergResult<Value> {
    let mut v = serde_json::to_value(metadata).map_err(IcebergError::internal)?;
    if let Some(snapshots) = v.get_mut("snapshots").and_then(Value::as_array_mut) {
        commit_order(snapshots);
    }
    by_id_and_narrowed(
        &mut v,
        &[
            ("schemas", "schema-id"),
            ("partition-specs", "spec-id"),
            ("sort-orders", "order-id"),
            ("statistics", "snapshot-id"),
            ("partition-statistics", "snapshot-id"),
        ],
    );
    if let Some(s) = v.get_mut("schema") {
        narrow_schema(s);
    }
    Ok(v)
}

/// The JSON of a view's metadata, the same way: versions and schemas by id (the crate keeps
/// both in hash maps), float literals as written.
pub fn view_to_value(metadata: &iceberg::spec::ViewMetadata) -> IcebergResult<Value> {
    let mut v = serde_json::to_value(metadata).map_err(IcebergError::internal)?;
    by_id_and_narrowed(
        &mut v,
        &[("versions", "version-id"), ("schemas", "schema-id")],
    );
    Ok(v)
}

/// Sorts each named list of `v` by its id field and writes the float literals of its
/// `schemas` as the client wrote them.
fn by_id_and_narrowed(v: &mut Value, lists: &[(&str, &str)]) {
    for (list, id) in lists {
        if let Some(items) = v.get_mut(*list).and_then(Value::as_array_mut) {
            items.sort_by_key(|i| i[*id].as_i64());
        }
    }
    for s in v
        .get_mut("schemas")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        narrow_schema(s);
    }
}

/// The bytes of a metadata file.
pub fn to_vec(metadata: &TableMetadata) -> IcebergResult<Vec<u8>> {
    serde_json::to_vec(&to_value(metadata)?).map_err(IcebergError::internal)
}

/// The JSON of one schema, float literals as written.
pub fn schema_value(schema: &Schema) -> IcebergResult<Value> {
    let mut v = serde_json::to_value(schema).map_err(IcebergError::internal)?;
    narrow_schema(&mut v);
    Ok(v)
}

/// Snapshots in the order they were committed: by sequence number (strictly increasing per
/// commit from format version 2 on), then, for version 1 snapshots that have none, by
/// timestamp; a parent always before its child, the id last (a total order, so every
/// serialization is the same).
fn commit_order(snapshots: &mut [Value]) {
    let parent: HashMap<i64, i64> = snapshots
        .iter()
        .filter_map(|s| {
            Some((
                s["snapshot-id"].as_i64()?,
                s["parent-snapshot-id"].as_i64()?,
            ))
        })
        .collect();
    let mut depth: HashMap<i64, usize> = HashMap::new();
    for s in snapshots.iter() {
        let Some(id) = s["snapshot-id"].as_i64() else {
            continue;
        };
        // Walk up to an ancestor of known depth (or the root), then fill in the way down.
        let mut path = vec![id];
        let mut cur = id;
        let mut base = 0;
        while let Some(p) = parent.get(&cur) {
            if let Some(d) = depth.get(p) {
                base = d + 1;
                break;
            }
            if path.len() > snapshots.len() {
                break; // a cycle in hostile metadata: stop rather than loop
            }
            path.push(*p);
            cur = *p;
        }
        for (i, id) in path.iter().rev().enumerate() {
            depth.entry(*id).or_insert(base + i);
        }
    }
    snapshots.sort_by_cached_key(|s| {
        let id = s["snapshot-id"].as_i64().unwrap_or_default();
        (
            s["sequence-number"].as_i64().unwrap_or_default(),
            s["timestamp-ms"].as_i64().unwrap_or_default(),
            depth.get(&id).copied().unwrap_or_default(),
            id,
        )
    });
}

/// Rewrites the float literals of a schema's fields (`initial-default`, `write-default`,
/// also inside struct, list and map values) as the shortest decimal of their `f32`.
fn narrow_schema(schema: &mut Value) {
    narrow_fields(schema);
}

fn narrow_fields(struct_type: &mut Value) {
    for f in struct_type
        .get_mut("fields")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let Some(obj) = f.as_object_mut() else {
            continue;
        };
        let t = obj.get("type").cloned().unwrap_or(Value::Null);
        for key in ["initial-default", "write-default"] {
            if let Some(d) = obj.get_mut(key) {
                narrow_literal(&t, d);
            }
        }
        if let Some(t) = obj.get_mut("type") {
            narrow_nested(t);
        }
    }
}

fn narrow_nested(t: &mut Value) {
    match t["type"].as_str() {
        Some("struct") => narrow_fields(t),
        Some("list") => {
            if let Some(e) = t.get_mut("element") {
                narrow_nested(e);
            }
        }
        Some("map") => {
            for k in ["key", "value"] {
                if let Some(e) = t.get_mut(k) {
                    narrow_nested(e);
                }
            }
        }
        _ => {}
    }
}

/// One literal of type `t`, in the spec's JSON single-value form.
fn narrow_literal(t: &Value, v: &mut Value) {
    if t.as_str() == Some("float") {
        if let Some(n) = v.as_f64() {
            // `n` came from an `f32`, so the cast back is exact; its shortest decimal is
            // what the client wrote (or the closest `f32` to it).
            if let Some(n) = format!("{}", n as f32)
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
            {
                *v = Value::Number(n);
            }
        }
        return;
    }
    match (t["type"].as_str(), v) {
        (Some("struct"), Value::Object(values)) => {
            for f in t["fields"].as_array().into_iter().flatten() {
                if let Some(id) = f["id"].as_i64()
                    && let Some(x) = values.get_mut(&id.to_string())
                {
                    narrow_literal(&f["type"], x);
                }
            }
        }
        (Some("list"), Value::Array(items)) => {
            for x in items {
                narrow_literal(&t["element"], x);
            }
        }
        (Some("map"), Value::Object(kv)) => {
            for (part, ty) in [("keys", &t["key"]), ("values", &t["value"])] {
                for x in kv
                    .get_mut(part)
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    narrow_literal(ty, x);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NullOrder, PrimitiveType, SortDirection, SortField, Transform};
    use serde_json::json;

    use super::*;

    /// A map of structs, a list and a float column with defaults; ids as a client (level
    /// by level would be 1, 5, 6, 2, 3, 4, 7) numbers them depth first.
    fn client_schema() -> Schema {
        serde_json::from_value(json!({"type": "struct", "schema-id": 7, "fields": [
            {"id": 1, "name": "m", "required": false, "type": {"type": "map",
                "key-id": 2, "key": "string", "value-id": 3, "value-required": false,
                "value": {"type": "struct", "fields": [
                    {"id": 4, "name": "a", "required": false, "type": "int"}]}}},
            {"id": 5, "name": "l", "required": false, "type": {"type": "list",
                "element-id": 6, "element": "long", "element-required": false}},
            {"id": 7, "name": "x", "required": false, "type": "float",
                "initial-default": 22.27, "write-default": 22.27},
        ]}))
        .unwrap()
    }

    fn spec_on_x() -> UnboundPartitionSpec {
        UnboundPartitionSpec::builder()
            .add_partition_field(7, "x_part", Transform::Identity)
            .unwrap()
            .build()
    }

    fn order_on_x() -> SortOrder {
        SortOrder::builder()
            .with_order_id(1)
            .with_sort_field(SortField {
                source_id: 7,
                transform: Transform::Identity,
                direction: SortDirection::Descending,
                null_order: NullOrder::Last,
            })
            .build_unbound()
            .unwrap()
    }

    fn ids(schema: &Schema) -> Vec<(String, i32)> {
        let mut v: Vec<(String, i32)> = schema
            .field_id_to_name_map()
            .iter()
            .map(|(id, n)| (n.clone(), *id))
            .collect();
        v.sort();
        v
    }

    fn table(version: FormatVersion) -> TableMetadata {
        new_table(NewTable {
            schema: client_schema(),
            spec: spec_on_x(),
            order: order_on_x(),
            location: "file:///w/t".into(),
            version,
            properties: HashMap::from([("owner".into(), "me".into())]),
        })
        .unwrap()
    }

    /// Pins the crate: `TableMetadataBuilder::new` renumbers nested field ids. When this
    /// fails, the crate keeps client ids itself and `new_table`'s patch can go.
    #[test]
    fn the_crate_renumbers_client_field_ids() {
        let built = TableMetadataBuilder::new(
            client_schema(),
            spec_on_x(),
            order_on_x(),
            "file:///w/t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        assert_ne!(ids(built.current_schema()), ids(&client_schema()));
    }

    #[test]
    fn new_tables_keep_the_client_field_ids_in_every_version() {
        for version in [FormatVersion::V1, FormatVersion::V2, FormatVersion::V3] {
            let m = table(version);
            assert_eq!(m.format_version(), version);
            assert_eq!(ids(m.current_schema()), ids(&client_schema()), "{version}");
            assert_eq!(m.current_schema_id(), 0);
            assert_eq!(m.last_column_id(), 7);
            let spec = m.default_partition_spec();
            assert_eq!(spec.fields()[0].source_id, 7, "{version}");
            assert_eq!(spec.fields()[0].field_id, 1000);
            let order = m.default_sort_order();
            assert_eq!(order.fields[0].source_id, 7, "{version}");
            assert_eq!(m.properties().get("owner").map(String::as_str), Some("me"));
            // The metadata file reads back the same.
            let back: TableMetadata = serde_json::from_slice(&to_vec(&m).unwrap()).unwrap();
            assert_eq!(ids(back.current_schema()), ids(&client_schema()));
            if version == FormatVersion::V1 {
                let v = to_value(&m).unwrap();
                assert_eq!(v["schema"]["fields"][2]["id"], 7);
                assert_eq!(v["partition-spec"][0]["source-id"], 7);
            }
        }
    }

    #[test]
    fn invalid_field_ids_are_refused_naming_the_field() {
        for id in [-1, FIRST_RESERVED_FIELD_ID, i32::MAX - 1] {
            let schema: Schema = serde_json::from_value(json!({"type": "struct", "fields": [
                {"id": 1, "name": "m", "required": false, "type": {"type": "map",
                    "key-id": id, "key": "string", "value-id": 3, "value": "int",
                    "value-required": false}}]}))
            .unwrap();
            let e = new_table(NewTable {
                schema,
                spec: UnboundPartitionSpec::default(),
                order: SortOrder::unsorted_order(),
                location: "file:///w/t".into(),
                version: FormatVersion::V2,
                properties: HashMap::new(),
            })
            .err()
            .unwrap();
            assert!(
                e.message.contains(&format!("field id {id} of m.key")),
                "{}",
                e.message
            );
        }
    }

    /// Pins the crate: a reserved property in a new table's properties is refused.
    #[test]
    fn the_crate_refuses_format_version_in_properties_and_the_endpoint_takes_it() {
        let refused = TableMetadataBuilder::new(
            client_schema(),
            UnboundPartitionSpec::default(),
            SortOrder::unsorted_order(),
            "file:///w/t".into(),
            FormatVersion::V2,
            HashMap::from([(FORMAT_VERSION.into(), "1".into())]),
        );
        assert!(refused.is_err());
        for (v, want) in [
            ("1", FormatVersion::V1),
            ("2", FormatVersion::V2),
            ("3", FormatVersion::V3),
        ] {
            let mut p =
                HashMap::from([(FORMAT_VERSION.into(), v.into()), ("k".into(), "v".into())]);
            assert_eq!(take_format_version(&mut p).unwrap(), Some(want));
            assert_eq!(p.len(), 1);
        }
        let mut p = HashMap::from([(FORMAT_VERSION.into(), "4".into())]);
        let e = take_format_version(&mut p).err().unwrap();
        assert!(e.message.contains("\"4\""), "{}", e.message);
        assert_eq!(take_format_version(&mut HashMap::new()).unwrap(), None);
    }

    /// Pins the crate: it widens float literals. `to_value` writes them as sent.
    #[test]
    fn float_literals_round_trip_as_written() {
        let widened = serde_json::to_value(client_schema()).unwrap();
        assert_ne!(widened["fields"][2]["write-default"], json!(22.27));
        let v = schema_value(&client_schema()).unwrap();
        assert_eq!(v["fields"][2]["write-default"], json!(22.27));
        assert_eq!(v["fields"][2]["initial-default"], json!(22.27));
        let m = to_value(&table(FormatVersion::V3)).unwrap();
        assert_eq!(m["schemas"][0]["fields"][2]["write-default"], json!(22.27));
        // Inside a struct default too, and other float values.
        let nested: Schema = serde_json::from_value(json!({"type": "struct", "fields": [
            {"id": 1, "name": "s", "required": false, "type": {"type": "struct", "fields": [
                {"id": 2, "name": "f", "required": false, "type": "float",
                 "write-default": 0.1}]}},
            {"id": 3, "name": "g", "required": false, "type": "float", "write-default": 3.4e38},
            {"id": 4, "name": "h", "required": false, "type": "float", "write-default": -1.5e-7},
        ]}))
        .unwrap();
        let v = schema_value(&nested).unwrap();
        assert_eq!(
            v["fields"][0]["type"]["fields"][0]["write-default"],
            json!(0.1)
        );
        assert_eq!(v["fields"][1]["write-default"], json!(3.4e38));
        assert_eq!(v["fields"][2]["write-default"], json!(-1.5e-7));
    }

    /// Literals of every other primitive type, in the spec's JSON form, come back unchanged.
    /// (Other spellings come back in that form: upper-case hex and uuids in lower case, a
    /// decimal at its scale, fractional seconds in groups of three digits.)
    #[test]
    fn other_literals_round_trip_as_written() {
        let cases = [
            ("boolean", json!(true)),
            ("int", json!(-7)),
            ("long", json!(9007199254740993_i64)),
            ("double", json!(22.27)),
            ("decimal(9,2)", json!("123.40")),
            ("date", json!("2017-11-16")),
            ("time", json!("22:31:08.123456")),
            ("timestamp", json!("2017-11-16T22:31:08.000001")),
            ("timestamptz", json!("2017-11-16T22:31:08.000001+00:00")),
            ("string", json!("Oslo")),
            ("uuid", json!("f79c3e09-677c-4bbd-a479-3f349cb785e7")),
            ("fixed[2]", json!("0aff")),
            ("binary", json!("0aff")),
        ];
        for (t, lit) in cases {
            let schema: Schema = serde_json::from_value(json!({"type": "struct", "fields": [
                {"id": 1, "name": "c", "required": false, "type": t, "write-default": lit}]}))
            .unwrap();
            let v = schema_value(&schema).unwrap();
            assert_eq!(v["fields"][0]["write-default"], lit, "{t}");
        }
        let _ = PrimitiveType::Float;
    }

    /// Pins the crate: it drops defaults it cannot parse. Requests carrying one are refused.
    #[test]
    fn defaults_the_crate_would_drop_are_refused() {
        let cases = [
            (
                "timestamp_ns",
                json!("2017-11-16T22:31:08.000000001"),
                "nanosecond",
            ),
            (
                "timestamptz_ns",
                json!("2017-11-16T22:31:08.000000001+00:00"),
                "nanosecond",
            ),
            ("timestamptz", json!("2017-11-16T14:31:08-08:00"), "UTC"),
            ("int", json!("seven"), "field c"),
            ("fixed[2]", json!("0aff00"), "field c"),
        ];
        for (t, lit, says) in cases {
            let field = json!({"id": 1, "name": "c", "required": false, "type": t,
                "write-default": lit});
            let schema: Schema =
                serde_json::from_value(json!({"type": "struct", "fields": [field.clone()]}))
                    .unwrap();
            assert!(
                schema_value(&schema).unwrap()["fields"][0]
                    .get("write-default")
                    .is_none(),
                "{t}"
            );
            let body = json!({"updates": [{"action": "add-schema", "schema":
                {"type": "struct", "fields": [{"id": 2, "name": "s", "required": false,
                    "type": {"type": "struct", "fields": [field]}}]}}]});
            let e = check_literals(&body).err().unwrap_or_else(|| panic!("{t}"));
            assert!(e.message.contains(says), "{t}: {}", e.message);
        }
        check_literals(&json!({"schema": serde_json::to_value(client_schema()).unwrap()})).unwrap();
    }

    /// Pins the crate: it refuses a v1 snapshot with a sequence number; the endpoint drops
    /// the number (and keeps it from version 2 on, also after an upgrade in the commit).
    #[test]
    fn version_one_snapshots_lose_their_sequence_number() {
        let base = table(FormatVersion::V1);
        let t0 = base.last_updated_ms();
        let add = |id: i64, seq: i64| -> TableUpdate {
            serde_json::from_value(json!({"action": "add-snapshot",
                "snapshot": snapshot(id, None, seq, t0 + id)}))
            .unwrap()
        };
        let refused = add(1, 1)
            .apply(TableMetadataBuilder::new_from_metadata(base.clone(), None))
            .and_then(|b| b.build());
        assert!(refused.is_err());
        let fixed = without_v1_sequence_numbers(Some(FormatVersion::V1), vec![add(1, 1)]).unwrap();
        let m = fixed[0]
            .clone()
            .apply(TableMetadataBuilder::new_from_metadata(base, None))
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        assert_eq!(m.snapshots().next().unwrap().sequence_number(), 0);
        let upgraded = without_v1_sequence_numbers(
            Some(FormatVersion::V1),
            vec![
                add(1, 1),
                TableUpdate::UpgradeFormatVersion {
                    format_version: FormatVersion::V2,
                },
                add(2, 2),
            ],
        )
        .unwrap();
        let seqs: Vec<i64> = upgraded
            .iter()
            .filter_map(|u| match u {
                TableUpdate::AddSnapshot { snapshot } => Some(snapshot.sequence_number()),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, vec![0, 2]);
    }

    fn snapshot(id: i64, parent: Option<i64>, seq: i64, ts: i64) -> Value {
        let mut s = json!({"snapshot-id": id, "sequence-number": seq, "timestamp-ms": ts,
            "manifest-list": format!("file:///w/t/snap-{id}.avro"),
            "summary": {"operation": "append"}, "schema-id": 0});
        if let Some(p) = parent {
            s["parent-snapshot-id"] = json!(p);
        }
        s
    }

    /// Pins the crate: its serialization does not keep commit order (a hash map). The
    /// endpoint's does, every time.
    #[test]
    fn snapshots_serialize_in_commit_order() {
        let base = table(FormatVersion::V2);
        let t0 = base.last_updated_ms();
        let mut b = TableMetadataBuilder::new_from_metadata(base, None);
        // Ids in no particular order; commit order is the loop's.
        let ids: Vec<i64> = (0..24).map(|i| (i * 7919 + 13) % 1000 + 1).collect();
        let mut parent = None;
        for (i, id) in ids.iter().enumerate() {
            let add: iceberg::TableUpdate = serde_json::from_value(json!({
                "action": "add-snapshot",
                "snapshot": snapshot(*id, parent, i as i64 + 1, t0 + i as i64),
            }))
            .unwrap();
            b = add.apply(b).unwrap();
            parent = Some(*id);
        }
        let m = b.build().unwrap().metadata;
        let order = |v: &Value| -> Vec<i64> {
            v["snapshots"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["snapshot-id"].as_i64().unwrap())
                .collect()
        };
        assert_ne!(order(&serde_json::to_value(&m).unwrap()), ids);
        assert_eq!(order(&to_value(&m).unwrap()), ids);
        let back: TableMetadata = serde_json::from_slice(&to_vec(&m).unwrap()).unwrap();
        assert_eq!(order(&to_value(&back).unwrap()), ids);
    }

    /// Version 1 snapshots have no sequence number: by time, a parent before its child
    /// when two share a millisecond.
    #[test]
    fn version_one_snapshots_order_by_time_then_ancestry() {
        let mut s = vec![
            snapshot(30, Some(20), 0, 5),
            snapshot(20, Some(10), 0, 5),
            snapshot(40, Some(30), 0, 6),
            snapshot(10, None, 0, 5),
        ];
        commit_order(&mut s);
        let got: Vec<i64> = s
            .iter()
            .map(|s| s["snapshot-id"].as_i64().unwrap())
            .collect();
        assert_eq!(got, vec![10, 20, 30, 40]);
        // A cycle (hostile metadata) still ends.
        let mut s = vec![snapshot(1, Some(2), 0, 1), snapshot(2, Some(1), 0, 1)];
        commit_order(&mut s);
        assert_eq!(s.len(), 2);
    }
}
