//! `flotilla account`: accounts (operator commands, except `get` of one's own account).

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::output::{Column, col, text};

#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create an account (operator).
    Create {
        /// Caller-chosen id (`[a-z0-9-]{1,63}`); generated when omitted.
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        display_name: Option<String>,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show an account (default: the configured account).
    Get { id: Option<String> },
    /// List accounts (operator).
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Delete an account and everything in it (operator); a retry resumes a partial cleanup.
    Delete {
        id: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

const COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("DISPLAY NAME", |v| text(v, "display_name")),
    col("CREATED", |v| text(v, "create_time")),
];

fn segs(rest: &[&str]) -> Vec<String> {
    let mut v = vec!["v1".to_owned(), "accounts".to_owned()];
    v.extend(rest.iter().map(|s| (*s).to_owned()));
    v
}

pub async fn run(ctx: &Ctx, cmd: AccountCmd) -> CliResult<()> {
    match cmd {
        AccountCmd::Create {
            id,
            display_name,
            create,
        } => {
            let mut body = Map::new();
            if let Some(id) = id {
                body.insert("id".into(), Value::String(id));
            }
            if let Some(n) = display_name {
                body.insert("display_name".into(), Value::String(n));
            }
            let req =
                create.apply(Req::new(reqwest::Method::POST, segs(&[])).body(Value::Object(body)));
            let a = ctx.api.send(req).await?;
            ctx.out.object(&a.body);
        }
        AccountCmd::Get { id } => {
            let id = match id {
                Some(id) => id,
                None => ctx
                    .api
                    .account()
                    .map_err(|_| CliError::usage("name an account or configure one"))?
                    .to_owned(),
            };
            ctx.out
                .object(&ctx.api.send(Req::get(segs(&[&id]))).await?.body);
        }
        AccountCmd::List { paging } => {
            let v = ctx.api.list(Req::get(segs(&[])), &paging).await?;
            ctx.out.list(&v, COLUMNS);
        }
        AccountCmd::Delete { id, etag } => {
            let req =
                Req::new(reqwest::Method::DELETE, segs(&[&id])).if_match(etag.etag.as_deref());
            ctx.api.send(req).await?;
            ctx.out.done(
                &deleted("account", "id", json!(id)),
                &format!("account {id} deleted"),
            );
        }
    }
    Ok(())
}
