//! `flotilla directory get CATALOG`: the query-replica read of a catalog's table directory.

use clap::Subcommand;

use super::Ctx;
use crate::client::Req;
use crate::error::CliResult;
use crate::output::{Column, Format, col, path, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Subcommand)]
pub enum DirectoryCmd {
    /// Show the table-name/schema directory of a catalog.
    Get { catalog: String },
}

const COLUMNS: &[Column] = &[
    col("NAMESPACE", |v| path(v, "namespace")),
    col("NAME", |v| text(v, "name")),
    col("KIND", |v| text(v, "kind")),
    col("ID", |v| text(v, "id")),
];

pub async fn run(ctx: &Ctx, cmd: DirectoryCmd) -> CliResult<()> {
    let DirectoryCmd::Get { catalog } = cmd;
    let id = resolve::id(&ctx.api, Kind::Catalog, &catalog).await?;
    let v = ctx
        .api
        .send(Req::get(ctx.api.acct(&["catalogs", &id, "directory"])?))
        .await?
        .body;
    match ctx.out.format {
        Format::Json => ctx.out.json(&v),
        Format::Table => {
            // The entries are the interesting part; other top-level fields show as key/values.
            let entries = ["entries", "items", "tables"]
                .iter()
                .find_map(|k| v.get(*k).filter(|x| x.is_array()).map(|x| (*k, x)));
            match entries {
                Some((key, list)) => {
                    let mut rest = v.clone();
                    if let Some(o) = rest.as_object_mut() {
                        o.remove(key);
                    }
                    if rest.as_object().is_some_and(|o| !o.is_empty()) {
                        ctx.out.object(&rest);
                    }
                    ctx.out.list(&serde_json::json!({"items": list}), COLUMNS);
                }
                None => ctx.out.object(&v),
            }
        }
    }
    Ok(())
}
