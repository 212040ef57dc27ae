//! `flotilla table` and `flotilla view`: relations of a namespace, addressed by catalog,
//! namespace path and name. Tables and views share one name slot per namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt, parse_dialect, parse_kv, props_map, read_json, read_text};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::nspath::{self, NsPath};
use crate::output::{Column, col, path, text};
use crate::resolve::{self, Kind};

/// The namespace a relation lives in: catalog (name or id) and namespace path.
#[derive(Debug, Clone, clap::Args)]
pub struct NamespaceRef {
    catalog: String,
    #[arg(value_parser = nspath::parse_arg)]
    namespace: NsPath,
}

/// One table or view: its namespace and its name.
#[derive(Debug, Clone, clap::Args)]
pub struct RelationRef {
    catalog: String,
    #[arg(value_parser = nspath::parse_arg)]
    namespace: NsPath,
    name: String,
}

impl RelationRef {
    fn namespace(&self) -> NamespaceRef {
        NamespaceRef {
            catalog: self.catalog.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TableCmd {
    /// Register a table.
    Create {
        #[command(flatten)]
        at: RelationRef,
        /// The schema as a JSON file (`-` reads stdin).
        #[arg(long, value_name = "FILE")]
        schema_file: PathBuf,
        /// Table format, e.g. ICEBERG, DELTA, PARQUET.
        #[arg(long)]
        format: String,
        #[arg(long)]
        metadata_location: Option<String>,
        #[arg(long)]
        location: Option<String>,
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv)]
        props: Vec<(String, String)>,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show a table.
    Get {
        #[command(flatten)]
        at: RelationRef,
    },
    /// List the tables of a namespace.
    List {
        #[command(flatten)]
        at: NamespaceRef,
        #[command(flatten)]
        paging: Paging,
    },
    /// Rename, move, or change a table (the id is kept).
    Update {
        #[command(flatten)]
        at: RelationRef,
        #[command(flatten)]
        common: UpdateCommon,
        #[arg(long, value_name = "FILE")]
        schema_file: Option<PathBuf>,
        #[arg(long)]
        format: Option<String>,
        #[arg(long)]
        metadata_location: Option<String>,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete a table.
    Delete {
        #[command(flatten)]
        at: RelationRef,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

#[derive(Debug, Subcommand)]
pub enum ViewCmd {
    /// Create a view with one or more SQL definitions.
    Create {
        #[command(flatten)]
        at: RelationRef,
        /// The schema as a JSON file (`-` reads stdin).
        #[arg(long, value_name = "FILE")]
        schema_file: PathBuf,
        #[command(flatten)]
        sql: SqlArgs,
        /// The namespace unqualified names in the SQL resolve against.
        #[arg(long, value_parser = nspath::parse_arg)]
        default_namespace: Option<NsPath>,
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv)]
        props: Vec<(String, String)>,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show a view.
    Get {
        #[command(flatten)]
        at: RelationRef,
    },
    /// List the views of a namespace.
    List {
        #[command(flatten)]
        at: NamespaceRef,
        #[command(flatten)]
        paging: Paging,
    },
    /// Rename, move, or change a view (the id is kept).
    Update {
        #[command(flatten)]
        at: RelationRef,
        #[command(flatten)]
        common: UpdateCommon,
        #[arg(long, value_name = "FILE")]
        schema_file: Option<PathBuf>,
        /// Replaces all definitions when given.
        #[command(flatten)]
        sql: SqlArgs,
        #[arg(long, value_parser = nspath::parse_arg)]
        default_namespace: Option<NsPath>,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete a view.
    Delete {
        #[command(flatten)]
        at: RelationRef,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

/// View definitions: `--sql spark="select ..."` or `--sql-file trino=view.sql` (repeatable).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SqlArgs {
    /// A definition inline: DIALECT=SQL (repeatable).
    #[arg(long, value_name = "DIALECT=SQL", value_parser = parse_dialect)]
    pub sql: Vec<(String, String)>,
    /// A definition from a file: DIALECT=FILE (repeatable).
    #[arg(long, value_name = "DIALECT=FILE", value_parser = parse_dialect)]
    pub sql_file: Vec<(String, String)>,
}

impl SqlArgs {
    fn definitions(&self) -> CliResult<Vec<Value>> {
        let mut defs: Vec<Value> = self
            .sql
            .iter()
            .map(|(d, s)| json!({"dialect": d, "sql": s}))
            .collect();
        for (d, f) in &self.sql_file {
            let sql = read_text(std::path::Path::new(f), "SQL file")?;
            defs.push(json!({"dialect": d, "sql": sql}));
        }
        Ok(defs)
    }
}

/// Rename, move and properties, shared by table and view updates.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UpdateCommon {
    /// New name.
    #[arg(long = "name", value_name = "NEW_NAME")]
    pub new_name: Option<String>,
    /// Move into this namespace of the same catalog.
    #[arg(long = "namespace", value_parser = nspath::parse_arg)]
    pub move_to: Option<NsPath>,
    /// Replaces the whole property map (repeatable).
    #[arg(long = "props", value_name = "K=V", value_parser = parse_kv, conflicts_with = "clear_props")]
    pub props: Vec<(String, String)>,
    #[arg(long)]
    pub clear_props: bool,
}

impl UpdateCommon {
    fn fill(&self, body: &mut Map<String, Value>) -> CliResult<()> {
        if let Some(n) = &self.new_name {
            body.insert("name".into(), Value::String(n.clone()));
        }
        if let Some(ns) = &self.move_to {
            body.insert("namespace".into(), ns.json());
        }
        if !self.props.is_empty() {
            body.insert("properties".into(), json!(props_map(&self.props)?));
        } else if self.clear_props {
            body.insert(
                "properties".into(),
                json!(BTreeMap::<String, String>::new()),
            );
        }
        Ok(())
    }
}

fn managed(v: &Value) -> String {
    match v.get("managed_by") {
        Some(m) if m.is_object() => format!("overlay {}", crate::output::text(m, "overlay_id")),
        _ => String::new(),
    }
}

const TABLE_COLUMNS: &[Column] = &[
    col("NAME", |v| text(v, "name")),
    col("NAMESPACE", |v| path(v, "namespace")),
    col("FORMAT", |v| text(v, "format")),
    col("METADATA LOCATION", |v| text(v, "metadata_location")),
    col("MANAGED BY", managed),
];

const VIEW_COLUMNS: &[Column] = &[
    col("NAME", |v| text(v, "name")),
    col("NAMESPACE", |v| path(v, "namespace")),
    col("DIALECTS", |v| {
        v.get("definitions")
            .and_then(Value::as_array)
            .map(|d| {
                d.iter()
                    .map(|x| text(x, "dialect"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    }),
    col("MANAGED BY", managed),
];

/// Which relation family a command addresses: its route below the namespace and its word in
/// messages.
#[derive(Clone, Copy)]
struct Family {
    route: &'static str,
    kind: &'static str,
    columns: &'static [Column],
}

const TABLES: Family = Family {
    route: "tables",
    kind: "table",
    columns: TABLE_COLUMNS,
};

const VIEWS: Family = Family {
    route: "views",
    kind: "view",
    columns: VIEW_COLUMNS,
};

impl Family {
    /// `.../catalogs/{id}/namespaces/{ns}/{route}`, the catalog resolved by name or id.
    async fn base(self, ctx: &Ctx, at: &NamespaceRef) -> CliResult<Vec<String>> {
        let id = resolve::id(&ctx.api, Kind::Catalog, &at.catalog).await?;
        ctx.api.acct(&[
            "catalogs",
            &id,
            "namespaces",
            &at.namespace.segment(),
            self.route,
        ])
    }

    async fn item(self, ctx: &Ctx, at: &RelationRef) -> CliResult<Vec<String>> {
        let mut s = self.base(ctx, &at.namespace()).await?;
        s.push(at.name.clone());
        Ok(s)
    }

    async fn create(
        self,
        ctx: &Ctx,
        at: &RelationRef,
        create: &CreateOpts,
        body: Value,
    ) -> CliResult<()> {
        let req =
            create.apply(Req::new(Method::POST, self.base(ctx, &at.namespace()).await?).body(body));
        ctx.out.object(&ctx.api.send(req).await?.body);
        Ok(())
    }

    async fn get(self, ctx: &Ctx, at: &RelationRef) -> CliResult<()> {
        let req = Req::get(self.item(ctx, at).await?);
        ctx.out.object(&ctx.api.send(req).await?.body);
        Ok(())
    }

    async fn list(self, ctx: &Ctx, at: &NamespaceRef, paging: &Paging) -> CliResult<()> {
        let req = Req::get(self.base(ctx, at).await?);
        ctx.out
            .list(&ctx.api.list(req, paging).await?, self.columns);
        Ok(())
    }

    /// PATCH with the fields given; refuses an update that changes nothing.
    async fn update(
        self,
        ctx: &Ctx,
        at: &RelationRef,
        body: Map<String, Value>,
        etag: &EtagOpt,
    ) -> CliResult<()> {
        if body.is_empty() {
            return Err(CliError::usage("nothing to update"));
        }
        let req = Req::new(Method::PATCH, self.item(ctx, at).await?)
            .body(Value::Object(body))
            .if_match(etag.etag.as_deref());
        ctx.out.object(&ctx.api.send(req).await?.body);
        Ok(())
    }

    async fn delete(self, ctx: &Ctx, at: &RelationRef, etag: &EtagOpt) -> CliResult<()> {
        let req =
            Req::new(Method::DELETE, self.item(ctx, at).await?).if_match(etag.etag.as_deref());
        ctx.api.send(req).await?;
        let (kind, name, ns) = (self.kind, &at.name, &at.namespace);
        let mut doc = deleted(kind, "name", json!(name));
        doc["namespace"] = ns.json();
        ctx.out
            .done(&doc, &format!("{kind} {name:?} in {ns} deleted"));
        Ok(())
    }
}

pub async fn run_table(ctx: &Ctx, cmd: TableCmd) -> CliResult<()> {
    match cmd {
        TableCmd::Create {
            at,
            schema_file,
            format,
            metadata_location,
            location,
            props,
            create,
        } => {
            let schema = read_json(&schema_file, "schema file")?;
            let mut body = json!({"name": at.name, "schema": schema, "format": format, "properties": props_map(&props)?});
            if let Some(m) = metadata_location {
                body["metadata_location"] = Value::String(m);
            }
            if let Some(l) = location {
                body["location"] = Value::String(l);
            }
            TABLES.create(ctx, &at, &create, body).await
        }
        TableCmd::Get { at } => TABLES.get(ctx, &at).await,
        TableCmd::List { at, paging } => TABLES.list(ctx, &at, &paging).await,
        TableCmd::Update {
            at,
            common,
            schema_file,
            format,
            metadata_location,
            etag,
        } => {
            let mut body = Map::new();
            common.fill(&mut body)?;
            if let Some(f) = schema_file {
                body.insert("schema".into(), read_json(&f, "schema file")?);
            }
            if let Some(f) = format {
                body.insert("format".into(), Value::String(f));
            }
            if let Some(m) = metadata_location {
                body.insert("metadata_location".into(), Value::String(m));
            }
            TABLES.update(ctx, &at, body, &etag).await
        }
        TableCmd::Delete { at, etag } => TABLES.delete(ctx, &at, &etag).await,
    }
}

pub async fn run_view(ctx: &Ctx, cmd: ViewCmd) -> CliResult<()> {
    match cmd {
        ViewCmd::Create {
            at,
            schema_file,
            sql,
            default_namespace,
            props,
            create,
        } => {
            let definitions = sql.definitions()?;
            if definitions.is_empty() {
                return Err(CliError::usage(
                    "a view needs at least one --sql or --sql-file definition",
                ));
            }
            let schema = read_json(&schema_file, "schema file")?;
            let mut body = json!({"name": at.name, "schema": schema, "definitions": definitions, "properties": props_map(&props)?});
            if let Some(d) = default_namespace {
                body["default_namespace"] = d.json();
            }
            VIEWS.create(ctx, &at, &create, body).await
        }
        ViewCmd::Get { at } => VIEWS.get(ctx, &at).await,
        ViewCmd::List { at, paging } => VIEWS.list(ctx, &at, &paging).await,
        ViewCmd::Update {
            at,
            common,
            schema_file,
            sql,
            default_namespace,
            etag,
        } => {
            let mut body = Map::new();
            common.fill(&mut body)?;
            if let Some(f) = schema_file {
                body.insert("schema".into(), read_json(&f, "schema file")?);
            }
            let definitions = sql.definitions()?;
            if !definitions.is_empty() {
                body.insert("definitions".into(), Value::Array(definitions));
            }
            if let Some(d) = default_namespace {
                body.insert("default_namespace".into(), d.json());
            }
            VIEWS.update(ctx, &at, body, &etag).await
        }
        ViewCmd::Delete { at, etag } => VIEWS.delete(ctx, &at, &etag).await,
    }
}
