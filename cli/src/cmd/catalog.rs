//! `flotilla catalog`: catalogs, addressed by display name or id.

use std::collections::BTreeMap;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt, parse_kv, props_map};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::output::{Column, col, props, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Subcommand)]
pub enum CatalogCmd {
    /// Create a catalog.
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// A property (repeatable).
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv)]
        props: Vec<(String, String)>,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show a catalog.
    Get { catalog: String },
    /// List catalogs.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Rename a catalog or change its description or properties.
    Update {
        catalog: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        #[arg(long, conflicts_with = "clear_description")]
        description: Option<String>,
        #[arg(long)]
        clear_description: bool,
        /// Replaces the whole property map (repeatable).
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv, conflicts_with = "clear_props")]
        props: Vec<(String, String)>,
        /// Removes every property.
        #[arg(long)]
        clear_props: bool,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete an empty catalog that no overlay targets.
    Delete {
        catalog: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

pub const COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("NAME", |v| text(v, "display_name")),
    col("DESCRIPTION", |v| text(v, "description")),
    col("PROPERTIES", |v| props(v, "properties")),
];

pub async fn run(ctx: &Ctx, cmd: CatalogCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        CatalogCmd::Create {
            name,
            description,
            props,
            create,
        } => {
            let mut body = json!({"display_name": name, "properties": props_map(&props)?});
            if let Some(d) = description {
                body["description"] = Value::String(d);
            }
            let req = create.apply(Req::new(Method::POST, api.acct(&["catalogs"])?).body(body));
            ctx.out.object(&api.send(req).await?.body);
        }
        CatalogCmd::Get { catalog } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            ctx.out.object(
                &api.send(Req::get(api.acct(&["catalogs", &id])?))
                    .await?
                    .body,
            );
        }
        CatalogCmd::List { paging } => {
            let v = api
                .list(Req::get(api.acct(&["catalogs"])?), &paging)
                .await?;
            ctx.out.list(&v, COLUMNS);
        }
        CatalogCmd::Update {
            catalog,
            name,
            description,
            clear_description,
            props,
            clear_props,
            etag,
        } => {
            let mut body = Map::new();
            if let Some(n) = name {
                body.insert("display_name".into(), Value::String(n));
            }
            if let Some(d) = description {
                body.insert("description".into(), Value::String(d));
            } else if clear_description {
                body.insert("description".into(), Value::Null);
            }
            if !props.is_empty() {
                body.insert("properties".into(), json!(props_map(&props)?));
            } else if clear_props {
                body.insert(
                    "properties".into(),
                    json!(BTreeMap::<String, String>::new()),
                );
            }
            if body.is_empty() {
                return Err(CliError::usage(
                    "nothing to update: pass --name, --description or --props",
                ));
            }
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::new(Method::PATCH, api.acct(&["catalogs", &id])?)
                .body(Value::Object(body))
                .if_match(etag.etag.as_deref());
            ctx.out.object(&api.send(req).await?.body);
        }
        CatalogCmd::Delete { catalog, etag } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::new(Method::DELETE, api.acct(&["catalogs", &id])?)
                .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("catalog", "id", json!(id)),
                &format!("catalog {id} deleted"),
            );
        }
    }
    Ok(())
}
