//! Delta schemas, file statistics and footer checks: the Delta side of validation.
//!
//! A Delta table's schema is the `schemaString` of its `metaData` action (a Spark
//! `StructType` as JSON). Data files are matched to it by top-level column name
//! (case-insensitively, as Delta resolves names; column mapping is not supported, so the
//! physical name is the logical one). Partition columns are not stored in Delta data files
//! and are not looked for.

use std::collections::BTreeMap;

use parquet::basic::Type as Physical;
use parquet::file::metadata::ParquetMetaData;
use parquet::schema::types::ColumnDescriptor;
use serde_json::Value;

use crate::capture::record::{CapturedFile, FileStats};

/// One top-level column of a Delta schema.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaColumn {
    pub name: String,
    /// A primitive type name (`long`, `decimal(10,2)`, ...) or a nested type object.
    pub ty: Value,
    pub nullable: bool,
}

/// Parses a `schemaString` into its top-level columns.
pub fn parse_schema(schema_string: &str) -> Result<(Value, Vec<DeltaColumn>), String> {
    let v: Value = serde_json::from_str(schema_string)
        .map_err(|e| format!("the Delta schemaString is not JSON: {e}"))?;
    let fields = v
        .get("fields")
        .and_then(Value::as_array)
        .ok_or("the Delta schemaString is not a struct with fields")?;
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a Delta schema field has no name")?;
        out.push(DeltaColumn {
            name: name.to_owned(),
            ty: f.get("type").cloned().unwrap_or(Value::Null),
            nullable: f.get("nullable").and_then(Value::as_bool).unwrap_or(true),
        });
    }
    Ok((v, out))
}

/// Field ids of top-level columns by name, from an Iceberg-style schema (the relation's).
pub fn field_ids(iceberg_schema: &Value) -> BTreeMap<String, i32> {
    iceberg_schema
        .get("fields")
        .and_then(Value::as_array)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| {
                    Some((
                        f.get("name")?.as_str()?.to_ascii_lowercase(),
                        i32::try_from(f.get("id")?.as_i64()?).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a Delta `stats` JSON string states: the record count and per-column statistics
/// (top-level scalar columns; keys are field ids from `ids`, else the column's position + 1).
pub fn parse_stats(
    stats: Option<&str>,
    columns: &[DeltaColumn],
    ids: &BTreeMap<String, i32>,
) -> (Option<u64>, FileStats) {
    let mut out = FileStats::default();
    let Some(v) = stats.and_then(|s| serde_json::from_str::<Value>(s).ok()) else {
        return (None, out);
    };
    let records = v.get("numRecords").and_then(Value::as_u64);
    let id_of = |name: &str| -> Option<i32> {
        ids.get(&name.to_ascii_lowercase()).copied().or_else(|| {
            columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(name))
                .and_then(|i| i32::try_from(i + 1).ok())
        })
    };
    let render = |x: &Value| match x {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => Some(x.to_string()),
        _ => None,
    };
    if let Some(m) = v.get("nullCount").and_then(Value::as_object) {
        for (k, x) in m {
            if let (Some(id), Some(n)) = (id_of(k), x.as_u64()) {
                out.null_value_counts.insert(id, n);
            }
        }
    }
    for (key, target) in [
        ("minValues", &mut out.lower_bounds),
        ("maxValues", &mut out.upper_bounds),
    ] {
        if let Some(m) = v.get(key).and_then(Value::as_object) {
            for (k, x) in m {
                if let (Some(id), Some(r)) = (id_of(k), render(x)) {
                    target.insert(id, r);
                }
            }
        }
    }
    (records, out)
}

/// Checks one file's footer against the Delta schema and (when stated) its record count.
/// Answers the first inconsistency found.
pub fn check(
    meta: &ParquetMetaData,
    columns: &[DeltaColumn],
    partition_columns: &[String],
    file: &CapturedFile,
    records_stated: bool,
) -> Result<(), String> {
    let rows = meta.file_metadata().num_rows();
    if records_stated && u64::try_from(rows).ok() != Some(file.record_count) {
        return Err(format!(
            "the footer holds {rows} rows; the Delta log states {}",
            file.record_count
        ));
    }
    let descr = meta.file_metadata().schema_descr();
    let root = descr.root_schema();
    for column in columns {
        if partition_columns
            .iter()
            .any(|p| p.eq_ignore_ascii_case(&column.name))
        {
            continue;
        }
        let Some(node) = root
            .get_fields()
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(&column.name))
        else {
            if !column.nullable {
                return Err(format!(
                    "non-nullable column {} is missing from the file",
                    column.name
                ));
            }
            continue;
        };
        let Some(ty) = column.ty.as_str() else {
            // Nested columns (struct, array, map): presence is checked, leaves are not.
            if node.is_primitive() {
                return Err(format!(
                    "column {} is nested in the Delta schema but a primitive in the file",
                    column.name
                ));
            }
            continue;
        };
        if !node.is_primitive() {
            return Err(format!(
                "column {} is {ty} in the Delta schema but a group in the file",
                column.name
            ));
        }
        let Some(col) = (0..descr.num_columns())
            .map(|i| descr.column(i))
            .find(|c| c.path().parts().len() == 1 && c.path().parts()[0] == node.name())
        else {
            continue;
        };
        compatible(ty, &col).map_err(|found| {
            format!(
                "column {} is {ty} in the Delta schema but {found} in the file",
                column.name
            )
        })?;
    }
    Ok(())
}

/// Whether a Parquet leaf column can hold values of a Delta primitive type. Answers what the
/// file has otherwise. Types this check does not know pass (presence only).
fn compatible(ty: &str, col: &ColumnDescriptor) -> Result<(), String> {
    let phys = col.physical_type();
    let ok = match ty {
        "boolean" => phys == Physical::BOOLEAN,
        "byte" | "short" | "integer" | "date" => phys == Physical::INT32,
        "long" => matches!(phys, Physical::INT64 | Physical::INT32),
        "float" => phys == Physical::FLOAT,
        "double" => matches!(phys, Physical::DOUBLE | Physical::FLOAT),
        "string" => phys == Physical::BYTE_ARRAY,
        "binary" => matches!(phys, Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY),
        "timestamp" | "timestamp_ntz" => matches!(phys, Physical::INT64 | Physical::INT96),
        t if t.starts_with("decimal") => matches!(
            phys,
            Physical::INT32
                | Physical::INT64
                | Physical::FIXED_LEN_BYTE_ARRAY
                | Physical::BYTE_ARRAY
        ),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(match col.logical_type_ref() {
            Some(l) => format!("{phys} ({l:?})"),
            None => phys.to_string(),
        })
    }
}

/// Why a table's protocol and metadata cannot be captured faithfully, if they cannot:
/// reader features this capture does not implement. Deletion vectors are accepted as a
/// feature only when no live file carries one (checked per file by the caller).
pub fn unsupported(protocol: &Value, metadata: &Value) -> Option<String> {
    let reader = protocol
        .get("minReaderVersion")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let mapping = metadata
        .get("configuration")
        .and_then(|c| c.get("delta.columnMapping.mode"))
        .and_then(Value::as_str)
        .unwrap_or("none");
    if let Some(provider) = metadata
        .get("format")
        .and_then(|f| f.get("provider"))
        .and_then(Value::as_str)
        && !provider.eq_ignore_ascii_case("parquet")
    {
        return Some(format!("data files in format {provider} (only parquet)"));
    }
    if mapping != "none" {
        return Some(format!(
            "the Delta protocol feature columnMapping (mode {mapping}) is not supported"
        ));
    }
    match reader {
        1 | 2 => None,
        3 => {
            const SUPPORTED: &[&str] = &[
                "columnMapping",
                "deletionVectors",
                "timestampNtz",
                "vacuumProtocolCheck",
            ];
            let features: Vec<&str> = protocol
                .get("readerFeatures")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let missing: Vec<&str> = features
                .into_iter()
                .filter(|f| !SUPPORTED.contains(f))
                .collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "the Delta reader feature(s) {} are not supported",
                    missing.join(", ")
                )
            })
        }
        v => Some(format!(
            "Delta reader version {v} is not supported (at most 3)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unsupported_features_are_named() {
        let md = json!({"format": {"provider": "parquet"}, "configuration": {}});
        assert_eq!(unsupported(&json!({"minReaderVersion": 1}), &md), None);
        let p =
            json!({"minReaderVersion": 3, "readerFeatures": ["deletionVectors", "v2Checkpoint"]});
        assert!(unsupported(&p, &md).unwrap().contains("v2Checkpoint"));
        let named = json!({"configuration": {"delta.columnMapping.mode": "name"}});
        assert!(
            unsupported(&json!({"minReaderVersion": 2}), &named)
                .unwrap()
                .contains("columnMapping")
        );
        assert!(unsupported(&json!({"minReaderVersion": 4}), &md).is_some());
    }

    #[test]
    fn stats_are_keyed_by_field_id() {
        let (_, cols) = parse_schema(
            &json!({"type": "struct", "fields": [
                {"name": "id", "type": "long", "nullable": false, "metadata": {}},
                {"name": "name", "type": "string", "nullable": true, "metadata": {}}]})
            .to_string(),
        )
        .unwrap();
        let ids = field_ids(&json!({"fields": [{"id": 7, "name": "id"}]}));
        let (n, s) = parse_stats(
            Some(
                r#"{"numRecords":3,"minValues":{"id":1,"name":"a"},"maxValues":{"id":3},"nullCount":{"id":0,"name":1}}"#,
            ),
            &cols,
            &ids,
        );
        assert_eq!(n, Some(3));
        assert_eq!(s.lower_bounds.get(&7).map(String::as_str), Some("1"));
        assert_eq!(s.lower_bounds.get(&2).map(String::as_str), Some("a"));
        assert_eq!(s.null_value_counts.get(&2), Some(&1));
        assert_eq!(parse_stats(None, &cols, &ids).0, None);
    }
}
