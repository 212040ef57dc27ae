//! One module per noun; each has a clap `Subcommand` enum and a `run`.

pub mod access;
pub mod account;
pub mod admin;
pub mod audit;
pub mod catalog;
pub mod directory;
pub mod event_sink;
pub mod index;
pub mod integration;
pub mod namespace;
pub mod overlay;
pub mod relation;

use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::client::{Api, Req};
use crate::error::CliResult;
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

/// `--pause` / `--resume` as the `paused` field of a PATCH body (neither: left unchanged).
pub fn set_paused(body: &mut Map<String, Value>, pause: bool, resume: bool) {
    if pause || resume {
        body.insert("paused".into(), json!(pause));
    }
}

/// PATCHes `body` to the resource at `path` and prints the answer. A body that changes one of
/// `guarded` (fields whose new value replaces the stored one wholesale) always carries a
/// precondition: the etag given, or else the current one ([`etag_or_current`]); other
/// changes carry only the etag given.
pub async fn patch_guarded(
    ctx: &Ctx,
    path: Vec<String>,
    body: Map<String, Value>,
    given: Option<String>,
    guarded: &[&str],
) -> CliResult<()> {
    let etag = if guarded.iter().any(|k| body.contains_key(*k)) {
        etag_or_current(&ctx.api, given.as_deref(), path.clone()).await?
    } else {
        given
    };
    let req = Req::new(Method::PATCH, path)
        .body(Value::Object(body))
        .if_match(etag.as_deref());
    ctx.out.object(&ctx.api.send(req).await?.body);
    Ok(())
}

pub fn deleted(kind: &str, key: &str, value: Value) -> Value {
    json!({"deleted": true, "kind": kind, key: value})
}
