//! `flotilla namespace`: namespaces of a catalog. Paths are written `a.b`; a segment holding a
//! dot is quoted (`"a.b".c`) or escaped (`a\.b.c`).

use std::collections::BTreeMap;

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt, parse_kv, props_map};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::nspath::{self, NsPath};
use crate::output::{Column, col, path, props, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Subcommand)]
pub enum NamespaceCmd {
    /// Create a namespace (its parent must exist).
    Create {
        catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv)]
        props: Vec<(String, String)>,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show a namespace.
    Get {
        catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
    },
    /// List the top-level namespaces, or the children of `--parent`.
    List {
        catalog: String,
        #[arg(long, value_parser = nspath::parse_arg)]
        parent: Option<NsPath>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Replace a namespace's properties.
    Update {
        catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
        /// The new property map (repeatable).
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv, required_unless_present = "clear_props")]
        props: Vec<(String, String)>,
        #[arg(long, conflicts_with = "props")]
        clear_props: bool,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete an empty namespace.
    Delete {
        catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

const COLUMNS: &[Column] = &[
    col("PATH", |v| path(v, "path")),
    col("PROPERTIES", |v| props(v, "properties")),
    col("ID", |v| text(v, "id")),
];

pub async fn run(ctx: &Ctx, cmd: NamespaceCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        NamespaceCmd::Create {
            catalog,
            path,
            props,
            create,
        } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let body = json!({"path": path.json(), "properties": props_map(&props)?});
            let req = create.apply(
                Req::new(Method::POST, api.acct(&["catalogs", &id, "namespaces"])?).body(body),
            );
            ctx.out.object(&api.send(req).await?.body);
        }
        NamespaceCmd::Get { catalog, path } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::get(api.acct(&["catalogs", &id, "namespaces", &path.segment()])?);
            ctx.out.object(&api.send(req).await?.body);
        }
        NamespaceCmd::List {
            catalog,
            parent,
            paging,
        } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::get(api.acct(&["catalogs", &id, "namespaces"])?)
                .query_opt("parent", parent.as_ref().map(NsPath::segment));
            ctx.out.list(&api.list(req, &paging).await?, COLUMNS);
        }
        NamespaceCmd::Update {
            catalog,
            path,
            props,
            clear_props,
            etag,
        } => {
            if props.is_empty() && !clear_props {
                return Err(CliError::usage("pass --props or --clear-props"));
            }
            let map = if clear_props {
                BTreeMap::new()
            } else {
                props_map(&props)?
            };
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::new(
                Method::PATCH,
                api.acct(&["catalogs", &id, "namespaces", &path.segment()])?,
            )
            .body(json!({"properties": map}))
            .if_match(etag.etag.as_deref());
            ctx.out.object(&api.send(req).await?.body);
        }
        NamespaceCmd::Delete {
            catalog,
            path,
            etag,
        } => {
            let id = resolve::id(api, Kind::Catalog, &catalog).await?;
            let req = Req::new(
                Method::DELETE,
                api.acct(&["catalogs", &id, "namespaces", &path.segment()])?,
            )
            .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("namespace", "path", path.json()),
                &format!("namespace {path} deleted"),
            );
        }
    }
    Ok(())
}
