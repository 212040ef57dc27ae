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
pub fn deleted(kind: &str, key: &str, value: Value) -> Value {
    json!({"deleted": true, "kind": kind, key: value})
}
