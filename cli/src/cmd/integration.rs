//! `flotilla integration`: connections to upstream catalogs. Credentials are
//! write-only: read from stdin, a file or an environment variable, sent once in the
//! `credentials` object of the body, never printed.

use clap::{Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt, kv_map, parse_kv, props_map};
use crate::client::{Paging, Req};
use crate::creds::{self, CredentialSource};
use crate::error::{CliError, CliResult};
use crate::nspath::{self, NsPath};
use crate::output::{Column, col, path, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IntegrationType {
    #[value(alias = "iceberg_rest")]
    IcebergRest,
    Unity,
    #[value(alias = "delta_sharing")]
    DeltaSharing,
}

impl IntegrationType {
    fn api(self) -> &'static str {
        match self {
            Self::IcebergRest => "ICEBERG_REST",
            Self::Unity => "UNITY",
            Self::DeltaSharing => "DELTA_SHARING",
        }
    }
}

/// An authentication type, in its canonical spelling. Parsed by the server's own rule
/// ([`flotilla_domain::model::canonical_auth_type`]: ASCII case-insensitive, `-` and `_`
/// interchangeable), so the CLI accepts exactly what the API accepts.
#[derive(Debug, Clone, Copy)]
pub struct AuthType(&'static str);

impl AuthType {
    fn api(self) -> &'static str {
        self.0
    }
}

fn parse_auth_type(s: &str) -> Result<AuthType, String> {
    flotilla_domain::model::canonical_auth_type(s)
        .map(AuthType)
        .ok_or_else(|| {
            format!(
                "unknown authentication type; one of {}",
                flotilla_domain::model::AUTH_TYPE_NAMES.join(", ")
            )
        })
}

/// Typed authentication input: the type and its non-secret settings.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthArgs {
    /// Authentication type.
    #[arg(long, value_parser = parse_auth_type, value_name = "TYPE")]
    pub auth_type: AuthType,
    /// A non-secret authentication setting, e.g. `client_id=...`, `token_uri=...`, `scopes=a,b`,
    /// `role_arn=...`, `region=...` (repeatable). Secrets go through --cred-*.
    #[arg(long = "auth", value_name = "K=V", value_parser = parse_kv)]
    pub auth: Vec<(String, String)>,
}

impl AuthArgs {
    fn json(&self) -> CliResult<Value> {
        let mut m = kv_map(&self.auth, "authentication setting")?;
        // List-valued settings: `scopes=a,b` (or a JSON array) becomes an array.
        if let Some(Value::String(s)) = m.get("scopes").cloned() {
            let list: Vec<Value> = if s.trim_start().starts_with('[') {
                serde_json::from_str(&s)
                    .map_err(|_| CliError::usage("--auth scopes=[...] is not a JSON array"))?
            } else {
                s.split([',', ' '])
                    .filter(|x| !x.is_empty())
                    .map(|x| Value::String(x.to_owned()))
                    .collect()
            };
            m.insert("scopes".into(), Value::Array(list));
        }
        if m.contains_key("type") {
            return Err(CliError::usage("use --auth-type, not --auth type=..."));
        }
        m.insert(
            "type".into(),
            Value::String(self.auth_type.api().to_owned()),
        );
        Ok(Value::Object(m))
    }
}

#[derive(Debug, Subcommand)]
pub enum IntegrationCmd {
    /// Create an integration.
    Create {
        name: String,
        #[arg(value_enum, ignore_case = true, value_name = "TYPE")]
        integration_type: IntegrationType,
        uri: String,
        #[command(flatten)]
        auth: AuthArgs,
        /// An integration property, e.g. `warehouse=...` (repeatable).
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv)]
        props: Vec<(String, String)>,
        #[command(flatten)]
        cred: CredentialSource,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// Show an integration (never its secrets).
    Get { integration: String },
    /// List integrations.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Rename an integration or change its URI or properties.
    Update {
        integration: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        uri: Option<String>,
        /// Replaces the whole property map (repeatable).
        #[arg(long = "props", value_name = "K=V", value_parser = parse_kv, conflicts_with = "clear_props")]
        props: Vec<(String, String)>,
        #[arg(long)]
        clear_props: bool,
        /// Stop scheduled work (overlay reconciliation) that uses this integration.
        #[arg(long, conflicts_with = "resume")]
        pause: bool,
        /// Resume scheduled work.
        #[arg(long)]
        resume: bool,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Rotate: new authentication settings and/or new credentials.
    UpdateAuth {
        integration: String,
        /// New authentication type (with its --auth settings); omit to keep the current one.
        #[arg(long, value_parser = parse_auth_type, value_name = "TYPE")]
        auth_type: Option<AuthType>,
        #[arg(long = "auth", value_name = "K=V", value_parser = parse_kv, requires = "auth_type")]
        auth: Vec<(String, String)>,
        #[command(flatten)]
        cred: CredentialSource,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete an integration; `--cascade` also deletes the overlays that use it.
    Delete {
        integration: String,
        #[arg(long)]
        cascade: bool,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Check connection, authentication, discovery, credential vending and storage access.
    /// Exits 1 when a check failed.
    Validate { integration: String },
    /// Browse the upstream catalog's namespaces.
    Namespaces {
        integration: String,
        #[arg(long, value_parser = nspath::parse_arg)]
        parent: Option<NsPath>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Browse the upstream catalog's tables and views in one namespace.
    Objects {
        integration: String,
        #[arg(long, value_parser = nspath::parse_arg)]
        namespace: NsPath,
        /// Comma-separated kinds: table, view.
        #[arg(long, value_delimiter = ',', value_enum)]
        kinds: Vec<ObjectKind>,
        #[command(flatten)]
        paging: Paging,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ObjectKind {
    Table,
    View,
}

const COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("NAME", |v| text(v, "display_name")),
    col("TYPE", |v| text(v, "type")),
    col("URI", |v| text(v, "uri")),
    col("AUTH", |v| {
        v.get("authentication")
            .map(|a| text(a, "type"))
            .unwrap_or_default()
    }),
    col("CREDENTIALS", |v| text(v, "credentials_configured")),
    col("GENERATION", |v| text(v, "generation")),
];

const CHECK_COLUMNS: &[Column] = &[
    col("CHECK", |v| text(v, "type")),
    col("STATUS", |v| text(v, "status")),
    col("ISSUE", |v| text(v, "issue")),
    col("SUMMARY", |v| text(v, "summary")),
];

const UPSTREAM_NS_COLUMNS: &[Column] = &[col("PATH", |v| path(v, "path"))];

const OBJECT_COLUMNS: &[Column] = &[
    col("NAMESPACE", |v| path(v, "namespace")),
    col("NAME", |v| text(v, "name")),
    col("KIND", |v| text(v, "kind")),
];

pub async fn run(ctx: &Ctx, cmd: IntegrationCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        IntegrationCmd::Create {
            name,
            integration_type,
            uri,
            auth,
            props,
            cred,
            create,
        } => {
            let mut body = json!({
                "display_name": name,
                "type": integration_type.api(),
                "uri": uri,
                "properties": props_map(&props)?,
                "authentication": auth.json()?,
            });
            // Read last: every usage error above is reported before stdin is consumed.
            if let Some(c) = cred.read()? {
                body["credentials"] = creds::to_json(&c);
            }
            let req = create.apply(Req::new(Method::POST, api.acct(&["integrations"])?).body(body));
            ctx.out.object(&api.send(req).await?.body);
        }
        IntegrationCmd::Get { integration } => {
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            ctx.out.object(
                &api.send(Req::get(api.acct(&["integrations", &id])?))
                    .await?
                    .body,
            );
        }
        IntegrationCmd::List { paging } => {
            let v = api
                .list(Req::get(api.acct(&["integrations"])?), &paging)
                .await?;
            ctx.out.list(&v, COLUMNS);
        }
        IntegrationCmd::Update {
            integration,
            name,
            uri,
            props,
            clear_props,
            pause,
            resume,
            etag,
        } => {
            let mut body = Map::new();
            if let Some(n) = name {
                body.insert("display_name".into(), Value::String(n));
            }
            if let Some(u) = uri {
                body.insert("uri".into(), Value::String(u));
            }
            if !props.is_empty() {
                body.insert("properties".into(), json!(props_map(&props)?));
            } else if clear_props {
                body.insert("properties".into(), json!({}));
            }
            super::set_paused(&mut body, pause, resume);
            if body.is_empty() {
                return Err(CliError::usage(
                    "nothing to update: pass --name, --uri or --props (rotate with update-auth)",
                ));
            }
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            let path = api.acct(&["integrations", &id])?;
            super::patch_guarded(ctx, path, body, etag.etag, &["uri", "properties"]).await?;
        }
        IntegrationCmd::UpdateAuth {
            integration,
            auth_type,
            auth,
            cred,
            etag,
        } => {
            if auth_type.is_none() && !cred.given() {
                return Err(CliError::usage(
                    "pass --auth-type and/or one of --cred-stdin, --cred-file, --cred-env",
                ));
            }
            let mut body = Map::new();
            if let Some(t) = auth_type {
                body.insert(
                    "authentication".into(),
                    AuthArgs { auth_type: t, auth }.json()?,
                );
            }
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            if let Some(c) = cred.read()? {
                body.insert("credentials".into(), creds::to_json(&c));
            }
            let req = Req::new(
                Method::PUT,
                api.acct(&["integrations", &id, "authentication"])?,
            )
            .body(Value::Object(body))
            .if_match(etag.etag.as_deref());
            ctx.out.object(&api.send(req).await?.body);
        }
        IntegrationCmd::Delete {
            integration,
            cascade,
            etag,
        } => {
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            let mut req = Req::new(Method::DELETE, api.acct(&["integrations", &id])?)
                .if_match(etag.etag.as_deref());
            if cascade {
                req = req.query("cascade", "true");
            }
            api.send(req).await?;
            let mut doc = deleted("integration", "id", json!(id));
            doc["cascade"] = json!(cascade);
            ctx.out.done(&doc, &format!("integration {id} deleted"));
        }
        IntegrationCmd::Validate { integration } => {
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            let v = api
                .send(
                    Req::new(Method::POST, api.acct(&["integrations", &id, "validate"])?)
                        .body(json!({})),
                )
                .await?
                .body;
            match ctx.out.format {
                crate::output::Format::Json => ctx.out.json(&v),
                crate::output::Format::Table => {
                    let checks = json!({"items": v.get("checks").cloned().unwrap_or(json!([]))});
                    ctx.out.list(&checks, CHECK_COLUMNS);
                }
            }
            if v.get("valid").and_then(Value::as_bool) != Some(true) {
                return Err(CliError::Failed(
                    "validation failed: see the checks above".to_owned(),
                ));
            }
        }
        IntegrationCmd::Namespaces {
            integration,
            parent,
            paging,
        } => {
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            let req = Req::get(api.acct(&["integrations", &id, "upstream", "namespaces"])?)
                .query_opt("parent", parent.as_ref().map(NsPath::segment));
            ctx.out
                .list(&api.list(req, &paging).await?, UPSTREAM_NS_COLUMNS);
        }
        IntegrationCmd::Objects {
            integration,
            namespace,
            kinds,
            paging,
        } => {
            let id = resolve::id(api, Kind::Integration, &integration).await?;
            let kinds: Vec<&str> = kinds
                .iter()
                .map(|k| match k {
                    ObjectKind::Table => "table",
                    ObjectKind::View => "view",
                })
                .collect();
            let req = Req::get(api.acct(&["integrations", &id, "upstream", "objects"])?)
                .query("namespace", namespace.segment())
                .query_opt("kinds", (!kinds.is_empty()).then(|| kinds.join(",")));
            ctx.out.list(&api.list(req, &paging).await?, OBJECT_COLUMNS);
        }
    }
    Ok(())
}
