//! Spark (Delta) schema JSON -> the Iceberg-style schema of [`crate::spi::TableMetadata`],
//! shared by the Unity and Delta Sharing providers.

use serde_json::{Map, Value, json};

use super::json::required_str;
use crate::error::{BoundedText, CatalogAccessError, Result};
use crate::field_ids;

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
}
