//! Display names to ids, by listing the resource type ("Initial CLI name
//! resolution"): no generic resolver exists in the API, and the CLI does not ask for one.
//!
//! Rules, in order: an argument equal to an item's `id` is that item (ids are immutable, so a
//! script holding an id is never redirected by a later rename); otherwise exactly one item
//! whose `display_name` equals the argument (exact code points); none is `NOT_FOUND`, several
//! is `AMBIGUOUS` with the candidate ids listed, so the user can pass one of them.

use serde_json::Value;

use crate::client::Api;
use crate::error::{CliError, CliResult};

/// The resource kinds the CLI resolves by display name.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Catalog,
    Integration,
    Overlay,
}

impl Kind {
    fn route(self) -> &'static str {
        match self {
            Kind::Catalog => "catalogs",
            Kind::Integration => "integrations",
            Kind::Overlay => "overlays",
        }
    }
    fn noun(self) -> &'static str {
        match self {
            Kind::Catalog => "catalog",
            Kind::Integration => "integration",
            Kind::Overlay => "overlay",
        }
    }
}

/// Picks the item `arg` designates among `items`.
pub fn pick<'a>(kind_noun: &str, arg: &str, items: &'a [Value]) -> CliResult<&'a Value> {
    if let Some(by_id) = items
        .iter()
        .find(|i| i.get("id").and_then(Value::as_str) == Some(arg))
    {
        return Ok(by_id);
    }
    let named: Vec<&Value> = items
        .iter()
        .filter(|i| i.get("display_name").and_then(Value::as_str) == Some(arg))
        .collect();
    match named.as_slice() {
        [one] => Ok(one),
        [] => Err(CliError::Resolve {
            code: "NOT_FOUND",
            message: format!(
                "no {kind_noun} has the id or name {:?}",
                crate::sanitize::clean(arg)
            ),
        }),
        many => {
            let ids: Vec<String> = many
                .iter()
                .map(|i| crate::output::scalar(i.get("id").unwrap_or(&Value::Null)))
                .collect();
            Err(CliError::Resolve {
                code: "AMBIGUOUS",
                message: format!(
                    "{} {kind_noun}s are named {:?}; pass one of their ids: {}",
                    many.len(),
                    crate::sanitize::clean(arg),
                    ids.join(", ")
                ),
            })
        }
    }
}

/// Resolves a name or id to the full item.
pub async fn resolve(api: &Api, kind: Kind, arg: &str) -> CliResult<Value> {
    if arg.is_empty() {
        return Err(CliError::usage(format!("an empty {} name", kind.noun())));
    }
    let items = api.list_all(api.acct(&[kind.route()])?, Vec::new()).await?;
    pick(kind.noun(), arg, &items).cloned()
}

/// Resolves a name or id to the id.
pub async fn id(api: &Api, kind: Kind, arg: &str) -> CliResult<String> {
    let item = resolve(api, kind, arg).await?;
    item.get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            CliError::Transport(format!("the server listed a {} without an id", kind.noun()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_win_then_unique_names() {
        let items = vec![
            json!({"id": "i1", "display_name": "i2"}),
            json!({"id": "i2", "display_name": "prod"}),
            json!({"id": "i3", "display_name": "dup"}),
            json!({"id": "i4", "display_name": "dup"}),
        ];
        assert_eq!(pick("x", "i2", &items).unwrap()["id"], "i2");
        assert_eq!(pick("x", "prod", &items).unwrap()["id"], "i2");
        let e = pick("integration", "dup", &items).unwrap_err().to_string();
        assert!(
            e.starts_with("AMBIGUOUS: 2 integrations") && e.contains("i3, i4"),
            "{e}"
        );
        let e = pick("integration", "nope", &items).unwrap_err().to_string();
        assert!(e.starts_with("NOT_FOUND: "), "{e}");
        // Names compare as exact code points: NFC and NFD differ.
        let items = vec![json!({"id": "a", "display_name": "caf\u{e9}"})];
        assert!(pick("x", "cafe\u{301}", &items).is_err());
    }
}
