//! Argument pieces shared by several commands.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};

use crate::client::Req;
use crate::error::{CliError, CliResult};

/// Parses `key=value` (clap value parser for `--props`, `--auth`).
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected key=value, got {s:?}")),
    }
}

/// Parses `dialect=value` for view definitions.
pub fn parse_dialect(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("expected dialect=value (e.g. spark=\"select 1\")".to_owned()),
    }
}

/// Builds a JSON string map, refusing the same key twice (a typo would otherwise drop a value).
pub fn kv_map(pairs: &[(String, String)], what: &str) -> CliResult<Map<String, Value>> {
    let mut m = Map::new();
    for (k, v) in pairs {
        if m.insert(k.clone(), Value::String(v.clone())).is_some() {
            return Err(CliError::usage(format!("{what} {k:?} is given twice")));
        }
    }
    Ok(m)
}

pub fn props_map(pairs: &[(String, String)]) -> CliResult<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for (k, v) in pairs {
        if m.insert(k.clone(), v.clone()).is_some() {
            return Err(CliError::usage(format!("property {k:?} is given twice")));
        }
    }
    Ok(m)
}

/// `--on-conflict` and `--idempotency-key` of every create.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CreateOpts {
    /// What a name collision does (the server's default is `error`).
    #[arg(long, value_enum)]
    pub on_conflict: Option<OnConflict>,
    /// Makes a retried create safe: a replay answers the first response.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OnConflict {
    Error,
    Replace,
    ReturnExisting,
}

impl CreateOpts {
    pub fn apply(&self, req: Req) -> Req {
        let req = req.idempotency_key(self.idempotency_key.as_deref());
        match self.on_conflict {
            None => req,
            Some(OnConflict::Error) => req.query("on_conflict", "error"),
            Some(OnConflict::Replace) => req.query("on_conflict", "replace"),
            Some(OnConflict::ReturnExisting) => req.query("on_conflict", "return_existing"),
        }
    }
}

/// `--etag` precondition of updates and deletes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtagOpt {
    /// Only act if the resource still has this etag (sent as If-Match); a stale etag exits 3.
    /// Changes that require a precondition (an integration's uri or properties, an overlay's
    /// namespace selection) send the etag read just before when none is given.
    #[arg(long, visible_alias = "if-match")]
    pub etag: Option<String>,
}

/// Reads a file (`-` is stdin) as text.
pub fn read_text(path: &Path, what: &str) -> CliResult<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::local(format!("cannot read {what} from stdin: {e}")))?;
        return Ok(s);
    }
    std::fs::read_to_string(path)
        .map_err(|e| CliError::local(format!("cannot read {what} {}: {e}", path.display())))
}

/// Reads a JSON document from a file (`-` is stdin).
pub fn read_json(path: &Path, what: &str) -> CliResult<Value> {
    let text = read_text(path, what)?;
    serde_json::from_str(&text)
        .map_err(|e| CliError::local(format!("{what} {} is not JSON: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_pairs() {
        assert_eq!(parse_kv("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(parse_kv("a=").unwrap(), ("a".into(), String::new()));
        assert!(parse_kv("=b").is_err());
        assert!(parse_kv("ab").is_err());
        assert!(
            kv_map(
                &[("a".into(), "1".into()), ("a".into(), "2".into())],
                "property"
            )
            .is_err()
        );
    }
}
