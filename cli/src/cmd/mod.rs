//! One module per noun; each has a clap `Subcommand` enum and a `run`.

pub mod account;
pub mod admin;
pub mod catalog;
pub mod directory;
pub mod index;
pub mod integration;
pub mod namespace;
pub mod overlay;
pub mod relation;

use serde_json::{Value, json};

use crate::client::Api;
use crate::output::Printer;

/// What a command runs with.
pub struct Ctx {
    pub api: Api,
    pub out: Printer,
}

/// The JSON document a delete prints.
/// The etag to send with a change that requires a precondition: the one given (`--etag` /
/// `--if-match`), or else the current one, read now from the resource at `segments`. A
/// change made meanwhile by someone else then fails with `412` (exit 3) instead of being
/// overwritten.
pub async fn etag_or_current(
    api: &Api,
    given: Option<&str>,
    segments: Vec<String>,
) -> crate::error::CliResult<Option<String>> {
    if let Some(e) = given {
        return Ok(Some(e.to_owned()));
    }
    let current = api.send(crate::client::Req::get(segments)).await?;
    Ok(current.body["etag"].as_str().map(str::to_owned))
}

pub fn deleted(kind: &str, key: &str, value: Value) -> Value {
    json!({"deleted": true, "kind": kind, key: value})
}
