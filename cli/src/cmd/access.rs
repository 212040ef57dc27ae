//! `flotilla principal`, `flotilla role`, `flotilla grant` and `flotilla whoami`: access
//! control (docs/access-control.md).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::{Ctx, deleted};
use crate::args::{CreateOpts, EtagOpt};
use crate::client::{Paging, Req};
use crate::error::{CliError, CliResult};
use crate::output::{Column, col, text};
use crate::resolve::{self, Kind};

#[derive(Debug, Subcommand)]
pub enum PrincipalCmd {
    /// Create a service principal; prints its client id and secret (the secret only now).
    Create {
        name: String,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// List service principals.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Show a service principal (never its secret).
    Get { id: String },
    /// Replace a service principal's secret; prints the new one. The old secret and every
    /// token issued from it stop working at once.
    Rotate {
        id: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Delete a service principal and its role memberships.
    Delete {
        id: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
}

#[derive(Debug, Subcommand)]
pub enum RoleCmd {
    /// Create a role.
    Create {
        name: String,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// List roles.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Show a role and its members.
    Get { name: String },
    /// Delete a role with its members and grants.
    Delete {
        name: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// Add a member: a principal name or `group:<name>`.
    AddMember { role: String, member: String },
    /// Remove a member.
    RemoveMember { role: String, member: String },
}

/// Which securable a grant command names.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecurableArgs {
    /// The account itself (for ACCOUNT_ADMIN and the *_CREATE privileges; the account is
    /// the one of `--account` / `FLOTILLA_ACCOUNT`).
    #[arg(long, conflicts_with_all = ["catalog", "integration", "overlay", "index_catalog"])]
    pub on_account: bool,
    /// A catalog (name or id); with --namespace a namespace, with --table or --view a relation.
    #[arg(long)]
    pub catalog: Option<String>,
    /// A namespace path (`a.b`) inside --catalog.
    #[arg(long, requires = "catalog")]
    pub namespace: Option<String>,
    /// A table inside --namespace.
    #[arg(long, requires = "namespace", conflicts_with = "view")]
    pub table: Option<String>,
    /// A view inside --namespace.
    #[arg(long, requires = "namespace")]
    pub view: Option<String>,
    /// An integration (name or id).
    #[arg(long)]
    pub integration: Option<String>,
    /// An overlay (name or id).
    #[arg(long)]
    pub overlay: Option<String>,
    /// An index catalog (name).
    #[arg(long)]
    pub index_catalog: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum GrantCmd {
    /// Grant a privilege on a securable to a role.
    Create {
        #[arg(long)]
        role: String,
        /// ACCOUNT_ADMIN, CATALOG_CREATE, INTEGRATION_CREATE, INDEX_CATALOG_CREATE, READ,
        /// WRITE, MANAGE or USE.
        #[arg(long)]
        privilege: String,
        #[command(flatten)]
        on: SecurableArgs,
        #[command(flatten)]
        create: CreateOpts,
    },
    /// List grants (an admin sees every grant; others those on what they manage).
    List {
        #[arg(long)]
        role: Option<String>,
        /// ACCOUNT, CATALOG, NAMESPACE, TABLE, VIEW, INTEGRATION, OVERLAY or INDEX_CATALOG.
        #[arg(long)]
        securable_type: Option<String>,
        #[command(flatten)]
        paging: Paging,
    },
    /// Revoke a grant (in force from the next request on every host).
    Revoke {
        id: String,
        #[command(flatten)]
        etag: EtagOpt,
    },
    /// What the caller may do on a securable, and the grants it comes from.
    Explain {
        #[command(flatten)]
        on: SecurableArgs,
    },
}

pub const PRINCIPAL_COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("NAME", |v| text(v, "name")),
    col("CLIENT_ID", |v| text(v, "client_id")),
    col("SECRET_GENERATION", |v| text(v, "secret_generation")),
];

pub const ROLE_COLUMNS: &[Column] = &[
    col("NAME", |v| text(v, "name")),
    col("MEMBERS", |v| {
        v["members"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    }),
];

pub const GRANT_COLUMNS: &[Column] = &[
    col("ID", |v| text(v, "id")),
    col("ROLE", |v| text(v, "role")),
    col("PRIVILEGE", |v| text(v, "privilege")),
    col("SECURABLE", |v| securable_text(&v["securable"])),
];

fn securable_text(s: &Value) -> String {
    let kind = s["type"].as_str().unwrap_or("?");
    let mut parts = vec![kind.to_owned()];
    for k in ["catalog_id", "integration_id", "overlay_id"] {
        if let Some(v) = s[k].as_str() {
            parts.push(v.to_owned());
        }
    }
    if let Some(p) = s["path"].as_array() {
        let segs: Vec<String> = p
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        parts.push(crate::nspath::display_json(&serde_json::json!(segs)));
    }
    if let Some(n) = s["name"].as_str() {
        parts.push(n.to_owned());
    }
    parts.join(" ")
}

impl SecurableArgs {
    /// The securable as the API's JSON, resolving names to ids.
    async fn to_json(&self, ctx: &Ctx) -> CliResult<Value> {
        let api = &ctx.api;
        if self.on_account {
            return Ok(json!({"type": "ACCOUNT"}));
        }
        if let Some(c) = &self.catalog {
            let id = resolve::id(api, Kind::Catalog, c).await?;
            let Some(ns) = &self.namespace else {
                return Ok(json!({"type": "CATALOG", "catalog_id": id}));
            };
            let path = crate::nspath::parse(ns).map_err(|e| CliError::usage(e.to_string()))?;
            return Ok(match (&self.table, &self.view) {
                (Some(t), _) => {
                    json!({"type": "TABLE", "catalog_id": id, "path": path, "name": t})
                }
                (_, Some(v)) => {
                    json!({"type": "VIEW", "catalog_id": id, "path": path, "name": v})
                }
                _ => json!({"type": "NAMESPACE", "catalog_id": id, "path": path}),
            });
        }
        if let Some(i) = &self.integration {
            let id = resolve::id(api, Kind::Integration, i).await?;
            return Ok(json!({"type": "INTEGRATION", "integration_id": id}));
        }
        if let Some(o) = &self.overlay {
            let id = resolve::id(api, Kind::Overlay, o).await?;
            return Ok(json!({"type": "OVERLAY", "overlay_id": id}));
        }
        if let Some(n) = &self.index_catalog {
            return Ok(json!({"type": "INDEX_CATALOG", "name": n}));
        }
        Err(CliError::usage(
            "name a securable: --on-account, --catalog [--namespace [--table|--view]], \
             --integration, --overlay or --index-catalog",
        ))
    }
}

pub async fn run_principal(ctx: &Ctx, cmd: PrincipalCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        PrincipalCmd::Create { name, create } => {
            let req = create.apply(
                Req::new(Method::POST, api.acct(&["principals"])?).body(json!({"name": name})),
            );
            ctx.out.object(&api.send(req).await?.body);
        }
        PrincipalCmd::List { paging } => {
            let v = api
                .list(Req::get(api.acct(&["principals"])?), &paging)
                .await?;
            ctx.out.list(&v, PRINCIPAL_COLUMNS);
        }
        PrincipalCmd::Get { id } => {
            ctx.out.object(
                &api.send(Req::get(api.acct(&["principals", &id])?))
                    .await?
                    .body,
            );
        }
        PrincipalCmd::Rotate { id, etag } => {
            let req = Req::new(Method::POST, api.acct(&["principals", &id, "rotate"])?)
                .if_match(etag.etag.as_deref());
            ctx.out.object(&api.send(req).await?.body);
        }
        PrincipalCmd::Delete { id, etag } => {
            let req = Req::new(Method::DELETE, api.acct(&["principals", &id])?)
                .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("principal", "id", json!(id)),
                &format!("principal {id} deleted"),
            );
        }
    }
    Ok(())
}

pub async fn run_role(ctx: &Ctx, cmd: RoleCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        RoleCmd::Create { name, create } => {
            let req = create
                .apply(Req::new(Method::POST, api.acct(&["roles"])?).body(json!({"name": name})));
            ctx.out.object(&api.send(req).await?.body);
        }
        RoleCmd::List { paging } => {
            let v = api.list(Req::get(api.acct(&["roles"])?), &paging).await?;
            ctx.out.list(&v, ROLE_COLUMNS);
        }
        RoleCmd::Get { name } => {
            ctx.out
                .object(&api.send(Req::get(api.acct(&["roles", &name])?)).await?.body);
        }
        RoleCmd::Delete { name, etag } => {
            let req = Req::new(Method::DELETE, api.acct(&["roles", &name])?)
                .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("role", "name", json!(name)),
                &format!("role {name} deleted"),
            );
        }
        RoleCmd::AddMember { role, member } => {
            let req = Req::new(
                Method::PUT,
                api.acct(&["roles", &role, "members", &member])?,
            );
            ctx.out.object(&api.send(req).await?.body);
        }
        RoleCmd::RemoveMember { role, member } => {
            let req = Req::new(
                Method::DELETE,
                api.acct(&["roles", &role, "members", &member])?,
            );
            api.send(req).await?;
            ctx.out.done(
                &json!({"removed": true, "role": role, "member": member}),
                &format!("{member} removed from role {role}"),
            );
        }
    }
    Ok(())
}

pub async fn run_grant(ctx: &Ctx, cmd: GrantCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        GrantCmd::Create {
            role,
            privilege,
            on,
            create,
        } => {
            let securable = on.to_json(ctx).await?;
            let body = json!({"role": role, "privilege": privilege.to_uppercase(), "securable": securable});
            let req = create.apply(Req::new(Method::POST, api.acct(&["grants"])?).body(body));
            ctx.out.object(&api.send(req).await?.body);
        }
        GrantCmd::List {
            role,
            securable_type,
            paging,
        } => {
            let req = Req::get(api.acct(&["grants"])?)
                .query_opt("role", role)
                .query_opt("securable_type", securable_type.map(|t| t.to_uppercase()));
            let v = api.list(req, &paging).await?;
            ctx.out.list(&v, GRANT_COLUMNS);
        }
        GrantCmd::Revoke { id, etag } => {
            let req = Req::new(Method::DELETE, api.acct(&["grants", &id])?)
                .if_match(etag.etag.as_deref());
            api.send(req).await?;
            ctx.out.done(
                &deleted("grant", "id", json!(id)),
                &format!("grant {id} revoked"),
            );
        }
        GrantCmd::Explain { on } => {
            let s = on.to_json(ctx).await?;
            ctx.out.object(&explain(ctx, &s).await?);
        }
    }
    Ok(())
}

/// `GET {A}/privileges` for the securable `s` (the API's JSON form).
async fn explain(ctx: &Ctx, s: &Value) -> CliResult<Value> {
    let api = &ctx.api;
    let mut req = Req::get(api.acct(&["privileges"])?);
    for k in ["catalog_id", "name", "integration_id", "overlay_id"] {
        req = req.query_opt(k, s[k].as_str().map(str::to_owned));
    }
    req = req.query_opt("securable_type", s["type"].as_str().map(str::to_owned));
    if let Some(p) = s["path"].as_array() {
        let segs: Vec<&str> = p.iter().filter_map(Value::as_str).collect();
        req = req.query("path", segs.join("\u{1F}"));
    }
    Ok(api.send(req).await?.body)
}

/// `flotilla whoami`: the caller as the server sees it, and, with an account configured,
/// its roles and whether it administers the account.
pub async fn whoami(ctx: &Ctx) -> CliResult<()> {
    let api = &ctx.api;
    let mut me = api
        .send(Req::get(vec!["v1".into(), "whoami".into()]))
        .await?
        .body;
    if let Ok(path) = api.acct(&["privileges"])
        && let Ok(a) = api.send(Req::get(path)).await
    {
        me["account_admin"] = a.body["account_admin"].clone();
        me["roles"] = a.body["roles"].clone();
    }
    ctx.out.object(&me);
    Ok(())
}
