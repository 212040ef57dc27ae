//! `flotilla event-sink create|list|show|delete`: webhook sinks of the account's change
//! events, delivered by `flotilla serve` (account admins). The signing secret is
//! write-only: read as a `secret=...` line from stdin, a file or an environment variable,
//! sent once in the body, never printed (the server never answers it either).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::{Ctx, deleted};
use crate::client::Req;
use crate::creds::{self, CredentialSource};
use crate::error::{CliError, CliResult};
use crate::output::{Column, col, text};

#[derive(Debug, Subcommand)]
pub enum EventSinkCmd {
    /// Create a sink: every change event of the account is POSTed to URL, signed with the
    /// secret (`X-Flotilla-Signature: sha256=<hex HMAC-SHA256 of the body>`).
    Create {
        url: String,
        /// Only these event types (comma-separated, e.g. `update-table,drop-table`).
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
        /// Where the signing secret comes from: a `secret=...` line.
        #[command(flatten)]
        secret: CredentialSource,
        /// Makes a retried create safe: a replay answers the first response.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// List the account's sinks with their delivery state.
    List,
    /// Show a sink: what it delivered up to, and its failures.
    Show { sink: String },
    /// Delete a sink (its backlog is not delivered).
    Delete { sink: String },
}

const COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("STATE", |v| text(v, "state")),
    col("DELIVERED", |v| text(v, "delivered_count")),
    col("FAILURES", |v| text(v, "consecutive_failures")),
    col("URL", |v| text(v, "url")),
];

pub async fn run(ctx: &Ctx, cmd: EventSinkCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        EventSinkCmd::Create {
            url,
            types,
            secret,
            idempotency_key,
        } => {
            if !secret.given() {
                return Err(CliError::usage(
                    "the signing secret is required: pass one of --cred-stdin, --cred-file, \
                     --cred-env with a `secret=...` line",
                ));
            }
            let mut body = json!({"url": url, "types": types});
            // Read last: every usage error above is reported before stdin is consumed.
            let input = secret.read()?.unwrap_or_default();
            let fields = creds::to_json(&input);
            match fields.as_object() {
                Some(m) if m.len() == 1 && m.contains_key("secret") => {
                    body["secret"] = m["secret"].clone();
                }
                _ => {
                    return Err(CliError::usage(
                        "the secret input must hold exactly one `secret=...` line",
                    ));
                }
            }
            let req = Req::new(Method::POST, api.acct(&["event-sinks"])?)
                .body(body)
                .idempotency_key(idempotency_key.as_deref());
            ctx.out.object(&api.send(req).await?.body);
        }
        EventSinkCmd::List => {
            let v = api.send(Req::get(api.acct(&["event-sinks"])?)).await?.body;
            ctx.out.list(&v, COLUMNS);
        }
        EventSinkCmd::Show { sink } => {
            let v = api
                .send(Req::get(api.acct(&["event-sinks", &sink])?))
                .await?
                .body;
            ctx.out.object(&v);
        }
        EventSinkCmd::Delete { sink } => {
            api.send(Req::new(Method::DELETE, api.acct(&["event-sinks", &sink])?))
                .await?;
            ctx.out.done(
                &deleted("event-sink", "id", Value::String(sink.clone())),
                &format!("event sink {sink} deleted"),
            );
        }
    }
    Ok(())
}
