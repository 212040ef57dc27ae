//! A strict JSON tree for metadata validation.
//!
//! `serde_json::Value` keeps the last of two equal keys, so a document such as
//! `{"index-uuid": A, "index-uuid": B}` would validate as if only `B` were written while
//! another reader may act on `A`. This tree is built by our own map visitor, which refuses a
//! repeated key in any object while parsing, and it keeps integers and floats apart so that
//! `1.0` is never accepted where an `int` or `long` is required.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON value with object members in document order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// Any integer literal that fits `i64` or `u64`.
    Int(i128),
    /// A number written with a fraction or exponent, or an integer too large for 64 bits.
    Float,
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The JSON type name used in error messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Int(_) => "integer",
            Json::Float => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

/// The longest prefix of a duplicated key echoed back in an error.
const MAX_ECHOED_KEY_CHARS: usize = 64;

/// Parses one complete JSON document, refusing duplicate keys and trailing content.
/// Nesting depth is bounded by `serde_json`'s recursion limit, so hostile input cannot
/// exhaust the stack.
pub(crate) fn parse(bytes: &[u8]) -> Result<Json, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Json::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Whether a parse error came from the duplicate-key check rather than the JSON syntax.
pub(crate) fn is_duplicate_key_error(e: &serde_json::Error) -> bool {
    e.is_data() && e.to_string().starts_with(DUPLICATE_KEY_PREFIX)
}

const DUPLICATE_KEY_PREFIX: &str = "duplicate key ";

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(i128::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Int(i128::from(v)))
    }

    fn visit_f64<E: de::Error>(self, _v: f64) -> Result<Json, E> {
        Ok(Json::Float)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members: Vec<(String, Json)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let shown: String = key.chars().take(MAX_ECHOED_KEY_CHARS).collect();
                return Err(de::Error::custom(format!(
                    "{DUPLICATE_KEY_PREFIX}{shown:?}"
                )));
            }
            let value = map.next_value::<Json>()?;
            members.push((key, value));
        }
        Ok(Json::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let e = parse(br#"{"a": {"b": 1, "b": 2}}"#).unwrap_err();
        assert!(is_duplicate_key_error(&e), "{e}");
        let e = parse(br#"[{"x": 1}, {"y": 1, "y": 1}]"#).unwrap_err();
        assert!(is_duplicate_key_error(&e), "{e}");
    }

    #[test]
    fn integers_and_floats_stay_apart() {
        assert_eq!(parse(b"1").unwrap(), Json::Int(1));
        assert_eq!(
            parse(b"-9223372036854775808").unwrap(),
            Json::Int(i128::from(i64::MIN))
        );
        assert_eq!(parse(b"1.0").unwrap(), Json::Float);
        assert_eq!(parse(b"1e3").unwrap(), Json::Float);
        assert_eq!(
            parse(b"123456789012345678901234567890").unwrap(),
            Json::Float
        );
    }

    #[test]
    fn trailing_content_and_deep_nesting_are_errors_not_panics() {
        assert!(parse(b"{} {}").is_err());
        let deep = "[".repeat(100_000);
        assert!(parse(deep.as_bytes()).is_err());
    }
}
