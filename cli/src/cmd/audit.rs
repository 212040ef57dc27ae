//! `flotilla audit [--principal P] [--from T] [--to T]`: the account's audit trail (account
//! admins): every mutation and every refused request.

use serde_json::{Value, json};

use super::Ctx;
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::output::{Column, col, text};

/// Arguments of `flotilla audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only what this principal did or was refused (its subject as the audit shows it, or
    /// `anonymous`).
    #[arg(long)]
    pub principal: Option<String>,
    /// From this time (RFC 3339, or milliseconds since the epoch), inclusive; the server
    /// refuses any other form.
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Up to this time (RFC 3339, or milliseconds since the epoch), inclusive.
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    #[command(flatten)]
    pub paging: Paging,
}

const COLUMNS: &[Column] = &[
    col("TIME_MS", |v| text(v, "timestamp_ms")),
    col("KIND", |v| text(v, "kind")),
    col("PRINCIPAL", |v| text(v, "principal")),
    col("WHAT", what),
    col("REQUEST", |v| text(v, "request_id")),
];

/// A mutation's action and securable; a refusal's status, method and route.
fn what(v: &Value) -> String {
    if v["kind"] == "mutation" {
        let s = &v["securable"];
        let mut object: Vec<String> = s["namespace"]
            .as_array()
            .map(|ns| ns.iter().map(crate::output::scalar).collect())
            .unwrap_or_default();
        if let Some(name) = s["name"].as_str() {
            object.push(name.to_owned());
        }
        format!(
            "{} {}/{}",
            text(v, "action"),
            text(s, "catalog_id"),
            crate::output::scalar(&json!(object.join(".")))
        )
    } else {
        let mut s = format!(
            "{} {} {}",
            text(v, "status"),
            text(v, "method"),
            text(v, "route")
        );
        if let Some(n) = v.get("suppressed") {
            s.push_str(&format!(" (+{} more)", crate::output::scalar(n)));
        }
        s
    }
}

pub async fn run(ctx: &Ctx, args: AuditArgs) -> CliResult<()> {
    let api = &ctx.api;
    let mut token = args.paging.page_token.clone();
    let mut items = Vec::new();
    // The audit always answers a token (a caught-up reader polls again with it): `--all`
    // follows pages until one comes back empty.
    loop {
        let req = Req::get(api.acct(&["audit"])?)
            .query_opt("principal", args.principal.clone())
            .query_opt("from", args.from.clone())
            .query_opt("to", args.to.clone())
            .query_opt("page_size", args.paging.page_size.map(|n| n.to_string()))
            .query_opt("page_token", token.clone());
        let body = api.send(req).await?.body;
        let page = body["items"].as_array().cloned().ok_or_else(|| {
            CliError::Transport("the server answered a list without `items`".to_owned())
        })?;
        let next = body["next_page_token"].as_str().map(str::to_owned);
        let empty = page.is_empty();
        items.extend(page);
        if !args.paging.all || empty || next.is_none() {
            ctx.out
                .list(&json!({"items": items, "next_page_token": next}), COLUMNS);
            return Ok(());
        }
        token = next;
    }
}
