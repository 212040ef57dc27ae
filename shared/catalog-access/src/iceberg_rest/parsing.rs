//! Reading the catalog's JSON answers field by field: paging, namespaces, properties,
//! `LoadTableResult` and `LoadViewResult`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{CatalogAccessError, Result};
use crate::spi::{
    TableFormat, TableIdent, TableMetadata, UpstreamNamespace, ViewDefinition, ViewMetadata,
    is_secret_key,
};

pub(super) fn append_paging(
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

pub(super) fn next_page_token(
    obj: &Map<String, Value>,
    sent: Option<&str>,
) -> Result<Option<String>> {
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

pub(super) fn as_object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| CatalogAccessError::protocol(field, "expected a JSON object"))
}

/// Non-spec spellings of a kebab-case field (`metadataLocation`, `metadata_location`).
pub(super) fn variants(key: &str) -> [String; 2] {
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

pub(super) fn reject_variant(obj: &Map<String, Value>, key: &str) -> Option<CatalogAccessError> {
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

/// An array field by [`get_field`]: `None` when absent, a `Protocol` error naming `field`
/// when present but not an array.
pub(super) fn get_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a [Value]>> {
    match get_field(obj, key, field)? {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected an array")),
    }
}

/// A required array field: absent is a `Protocol` error naming `field` too.
pub(super) fn req_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a [Value]> {
    get_array(obj, key, field)?
        .ok_or_else(|| CatalogAccessError::protocol(field, "expected an array"))
}

/// A field by its spec name; a non-spec spelling of it (with the spec name absent) is a
/// protocol error naming both.
pub(super) fn get_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a Value>> {
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

pub(super) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<Option<&'a str>> {
    match get_field(obj, key, field)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected a string")),
    }
}

pub(super) fn req_str<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a str> {
    opt_str(obj, key, field)?.ok_or_else(|| CatalogAccessError::protocol(field, "missing"))
}

pub(super) fn req_i64(obj: &Map<String, Value>, key: &str, field: &str) -> Result<i64> {
    match get_field(obj, key, field)? {
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| CatalogAccessError::protocol(field, "expected an integer")),
        Some(_) => Err(CatalogAccessError::protocol(field, "expected an integer")),
        None => Err(CatalogAccessError::protocol(field, "missing")),
    }
}

pub(super) fn string_map(v: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>> {
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

pub(super) fn parse_namespace(v: &Value, field: &str) -> Result<UpstreamNamespace> {
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
            Ok(UpstreamNamespace(out))
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

pub(super) fn percent_decode(s: &str) -> String {
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

pub(super) fn filtered_properties(
    v: Option<&Value>,
    field: &str,
) -> Result<BTreeMap<String, String>> {
    Ok(string_map(v, field)?
        .into_iter()
        .filter(|(k, _)| !is_secret_key(k))
        .collect())
}

pub(super) fn check_schema(schema: &Value, field: &str) -> Result<Value> {
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
pub(super) fn schema_by_id(meta: &Map<String, Value>, id: i64, field: &str) -> Result<Value> {
    let schemas = req_array(meta, "schemas", &format!("{field}.schemas"))?;
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

/// The `metadata` object of a `LoadTableResult` or `LoadViewResult`.
pub(super) fn metadata_object(result: &Map<String, Value>) -> Result<&Map<String, Value>> {
    match result.get("metadata") {
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(CatalogAccessError::protocol(
            "metadata",
            "expected an object",
        )),
        None => Err(CatalogAccessError::protocol("metadata", "missing")),
    }
}

/// Parses a `LoadTableResult` into provider-neutral metadata.
pub fn parse_load_table(body: &Value, identifier: TableIdent) -> Result<TableMetadata> {
    let result = as_object(body, "<load table result>")?;
    let metadata_location = opt_str(result, "metadata-location", "metadata-location")?;
    let meta = metadata_object(result)?;
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
    let meta = metadata_object(result)?;
    let uuid = req_str(meta, "view-uuid", "metadata.view-uuid")?;
    let current = req_i64(meta, "current-version-id", "metadata.current-version-id")?;
    let versions = req_array(meta, "versions", "metadata.versions")?;
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
    let reps = req_array(
        version,
        "representations",
        &format!("{field}.representations"),
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_conforming_field_names_are_named() {
        let body = serde_json::json!({
            "metadataLocation": "s3://x/m.json",
            "metadata": {"format-version": 2, "table-uuid": "u", "current-schema-id": 0,
                         "schemas": [{"type": "struct", "schema-id": 0, "fields": []}]}
        });
        let e = parse_load_table(&body, TableIdent::new(UpstreamNamespace::new(["a"]), "t"))
            .unwrap_err();
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
