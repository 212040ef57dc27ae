//! Field-by-field JSON accessors for the Unity and Delta Sharing answers: each names the
//! offending field in its protocol error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::{CatalogAccessError, Result, VendingErrorKind};
use crate::spi::SecretString;

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

/// The `name` of every object in a listing, each read as `{list}[i].name` (so an error names
/// the entry) and mapped by `to`.
pub(crate) fn names<T>(items: &[Value], list: &str, to: impl Fn(&str) -> T) -> Result<Vec<T>> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| required_str(it, "name", &format!("{list}[{i}].name")).map(&to))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
