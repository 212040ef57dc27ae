//! `flotilla index`: ParqDB index catalogs. Index catalogs are addressed by their
//! name, indexes by namespace path and name.

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, read_json};
use crate::client::{Api, Paging, Req};
use crate::error::{CliError, CliResult};
use crate::nspath::{self, NsPath};
use crate::output::{Column, col, path, text};

#[derive(Debug, Subcommand)]
pub enum IndexCmd {
    /// Create an index catalog with its warehouse (`s3://bucket/prefix/` or `file:///path/`).
    Create {
        name: String,
        #[arg(long)]
        warehouse: String,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// List index catalogs, or with INDEX_CATALOG and NAMESPACE the indexes of that namespace.
    List {
        index_catalog: Option<String>,
        #[arg(value_parser = nspath::parse_arg, requires = "index_catalog")]
        namespace: Option<NsPath>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Namespaces of an index catalog.
    #[command(subcommand)]
    Namespace(IndexNamespaceCmd),
    /// Register an existing index metadata file under a name.
    Register {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        namespace: NsPath,
        name: String,
        #[arg(long)]
        metadata_location: String,
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Load an index: its metadata location and source binding.
    Load {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        namespace: NsPath,
        name: String,
    },
    /// Drop an index from the catalog.
    Drop {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        namespace: NsPath,
        name: String,
    },
    /// Rename or move an index inside its catalog.
    Rename {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        from_namespace: NsPath,
        from_name: String,
        #[arg(value_parser = nspath::parse_arg)]
        to_namespace: NsPath,
        to_name: String,
    },
    /// Commit a new metadata location, compare-and-swap on --base.
    Commit {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        namespace: NsPath,
        name: String,
        /// The metadata location the new document was based on.
        #[arg(long)]
        base: String,
        /// The new metadata location.
        #[arg(long)]
        new: String,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Garbage-collect an index catalog's warehouse (operator maintenance; runs on the
    /// metastore directly, not through the API: see docs/parqdb.md).
    Gc(crate::index_gc::GcArgs),
}

#[derive(Debug, Subcommand)]
pub enum IndexNamespaceCmd {
    /// Create a namespace (its parent must exist).
    Create {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
    },
    /// List the namespaces of an index catalog.
    List {
        index_catalog: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Drop an empty namespace.
    Drop {
        index_catalog: String,
        #[arg(value_parser = nspath::parse_arg)]
        path: NsPath,
    },
}

/// The source table binding: a Parquet URI, or a full JSON binding.
#[derive(Debug, Clone, clap::Args)]
#[group(required = true, multiple = false)]
pub struct SourceArgs {
    /// Bind to a Parquet dataset by URI.
    #[arg(long, value_name = "URI")]
    pub source_parquet: Option<String>,
    /// The binding as JSON, e.g. `{"type":"ICEBERG","catalog":...,"snapshot_id":N}`.
    #[arg(long, value_name = "JSON")]
    pub source_json: Option<String>,
    /// The binding as a JSON file.
    #[arg(long, value_name = "FILE")]
    pub source_file: Option<PathBuf>,
}

impl SourceArgs {
    fn json(&self) -> CliResult<Value> {
        if let Some(uri) = &self.source_parquet {
            return Ok(json!({"type": "PARQUET", "uri": uri}));
        }
        if let Some(text) = &self.source_json {
            return serde_json::from_str(text)
                .map_err(|e| CliError::usage(format!("--source-json is not JSON: {e}")));
        }
        if let Some(f) = &self.source_file {
            return read_json(f, "source file");
        }
        Err(CliError::usage(
            "pass --source-parquet, --source-json or --source-file",
        ))
    }
}

const CATALOG_COLUMNS: &[Column] = &[
    col("NAME", |v| text(v, "name")),
    col("WAREHOUSE", |v| text(v, "warehouse")),
    col("CREATED", |v| text(v, "create_time")),
];

const NAMESPACE_COLUMNS: &[Column] = &[
    col("PATH", |v| path(v, "path")),
    col("CREATED", |v| text(v, "create_time")),
];

/// Index listings may answer identifiers or full entries; both carry a namespace and a name.
const INDEX_COLUMNS: &[Column] = &[
    col("NAMESPACE", |v| {
        path(v.get("identifier").unwrap_or(v), "namespace")
    }),
    col("NAME", |v| text(v.get("identifier").unwrap_or(v), "name")),
    col("METADATA LOCATION", |v| text(v, "metadata_location")),
];

fn ident(ns: &NsPath, name: &str) -> Value {
    json!({"namespace": ns.json(), "name": name})
}

/// `.../index-catalogs/{c}/namespaces/{ns}/indexes[/rest...]`.
fn indexes(api: &Api, catalog: &str, ns: &NsPath, rest: &[&str]) -> CliResult<Vec<String>> {
    let segment = ns.segment();
    let mut segs = vec!["index-catalogs", catalog, "namespaces", &segment, "indexes"];
    segs.extend_from_slice(rest);
    api.acct(&segs)
}

pub async fn run(ctx: &Ctx, cmd: IndexCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        IndexCmd::Create {
            name,
            warehouse,
            create,
        } => {
            let req = create.apply(
                Req::new(Method::POST, api.acct(&["index-catalogs"])?)
                    .body(json!({"name": name, "warehouse": warehouse})),
            );
            ctx.out.object(&api.send(req).await?.body);
        }
        IndexCmd::List {
            index_catalog: None,
            paging,
            ..
        } => {
            ctx.out.list(
                &api.list(Req::get(api.acct(&["index-catalogs"])?), &paging)
                    .await?,
                CATALOG_COLUMNS,
            );
        }
        IndexCmd::List {
            index_catalog: Some(c),
            namespace,
            paging,
        } => {
            let ns = namespace
                .ok_or_else(|| CliError::usage("name the namespace whose indexes to list"))?;
            let req = Req::get(indexes(api, &c, &ns, &[])?);
            ctx.out.list(&api.list(req, &paging).await?, INDEX_COLUMNS);
        }
        IndexCmd::Namespace(IndexNamespaceCmd::Create {
            index_catalog,
            path,
        }) => {
            let req = Req::new(
                Method::POST,
                api.acct(&["index-catalogs", &index_catalog, "namespaces"])?,
            )
            .body(json!({"path": path.json()}));
            ctx.out.object(&api.send(req).await?.body);
        }
        IndexCmd::Namespace(IndexNamespaceCmd::List {
            index_catalog,
            paging,
        }) => {
            let req = Req::get(api.acct(&["index-catalogs", &index_catalog, "namespaces"])?);
            ctx.out
                .list(&api.list(req, &paging).await?, NAMESPACE_COLUMNS);
        }
        IndexCmd::Namespace(IndexNamespaceCmd::Drop {
            index_catalog,
            path,
        }) => {
            let req = Req::new(
                Method::DELETE,
                api.acct(&[
                    "index-catalogs",
                    &index_catalog,
                    "namespaces",
                    &path.segment(),
                ])?,
            );
            api.send(req).await?;
            let mut doc = deleted("index namespace", "index_catalog", json!(index_catalog));
            doc["path"] = path.json();
            ctx.out.done(&doc, &format!("namespace {path} dropped"));
        }
        IndexCmd::Register {
            index_catalog,
            namespace,
            name,
            metadata_location,
            source,
            create,
        } => {
            let body = json!({"name": name, "metadata_location": metadata_location, "source": source.json()?});
            let req = create.apply(
                Req::new(Method::POST, indexes(api, &index_catalog, &namespace, &[])?).body(body),
            );
            ctx.out.object(&api.send(req).await?.body);
        }
        IndexCmd::Load {
            index_catalog,
            namespace,
            name,
        } => {
            let req = Req::get(indexes(api, &index_catalog, &namespace, &[&name])?);
            ctx.out.object(&api.send(req).await?.body);
        }
        IndexCmd::Drop {
            index_catalog,
            namespace,
            name,
        } => {
            let req = Req::new(
                Method::DELETE,
                indexes(api, &index_catalog, &namespace, &[&name])?,
            );
            api.send(req).await?;
            let mut doc = deleted("index", "name", json!(name));
            doc["namespace"] = namespace.json();
            ctx.out
                .done(&doc, &format!("index {name:?} in {namespace} dropped"));
        }
        IndexCmd::Rename {
            index_catalog,
            from_namespace,
            from_name,
            to_namespace,
            to_name,
        } => {
            let body = json!({"source": ident(&from_namespace, &from_name), "destination": ident(&to_namespace, &to_name)});
            let a = api
                .send(
                    Req::new(
                        Method::POST,
                        api.acct(&["index-catalogs", &index_catalog, "rename"])?,
                    )
                    .body(body.clone()),
                )
                .await?;
            let doc = if a.body.is_null() {
                json!({"renamed": true, "source": body["source"], "destination": body["destination"]})
            } else {
                a.body
            };
            ctx.out.done(&doc, &format!("index {from_name:?} in {from_namespace} renamed to {to_name:?} in {to_namespace}"));
        }
        IndexCmd::Commit {
            index_catalog,
            namespace,
            name,
            base,
            new,
            source,
        } => {
            let body = json!({"source": source.json()?, "base": base, "new": new});
            let req = Req::new(
                Method::POST,
                indexes(api, &index_catalog, &namespace, &[&name, "commit"])?,
            )
            .body(body);
            ctx.out.object(&api.send(req).await?.body);
        }
        IndexCmd::Gc(_) => {
            return Err(CliError::usage(
                "index gc is dispatched before the API client",
            ));
        }
    }
    Ok(())
}
