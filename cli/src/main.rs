#![forbid(unsafe_code)]
//! `flotilla`: the local stack (`serve`), administration, and the noun-verb resource commands
//! (an HTTP client of the API). See docs/cli.md.
//!
//! Exit codes: 0 ok, 1 error, 2 usage, 3 conflict or precondition (HTTP 409 / 412).

mod args;
mod client;
mod cmd;
mod config;
mod creds;
mod error;
mod index_gc;
mod nspath;
mod output;
mod resolve;
mod sanitize;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

use cmd::Ctx;
use cmd::account::AccountCmd;
use cmd::admin::AdminCmd;
use cmd::catalog::CatalogCmd;
use cmd::directory::DirectoryCmd;
use cmd::index::IndexCmd;
use cmd::integration::IntegrationCmd;
use cmd::namespace::NamespaceCmd;
use cmd::overlay::OverlayCmd;
use cmd::relation::{TableCmd, ViewCmd};
use error::{CliError, CliResult};
use output::{Format, Printer};

#[derive(Parser)]
#[command(
    name = "flotilla",
    version,
    about = "Flotilla: a control plane for lakehouse catalogs"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Connection and output settings; flags beat environment variables, which beat the profile.
/// The token has no flag on purpose (it would show in process listings): use FLOTILLA_TOKEN,
/// --token-file, or the profile's token_file / token_env.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// Config file (TOML, or JSON when it ends in .json).
    #[arg(long, global = true, env = "FLOTILLA_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Profile of the config file.
    #[arg(long, global = true, env = "FLOTILLA_PROFILE")]
    profile: Option<String>,
    /// API endpoint, e.g. http://127.0.0.1:8080.
    #[arg(long, global = true, env = "FLOTILLA_ENDPOINT", value_name = "URL")]
    endpoint: Option<String>,
    /// File holding the bearer token.
    #[arg(long, global = true, env = "FLOTILLA_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Account to act in.
    #[arg(long, global = true, env = "FLOTILLA_ACCOUNT")]
    account: Option<String>,
    /// Output format.
    #[arg(
        long,
        short = 'o',
        global = true,
        env = "FLOTILLA_OUTPUT",
        value_enum,
        default_value = "table"
    )]
    output: Format,
    /// Print each request's method, URL and status on stderr (never bodies or credentials).
    #[arg(long, short = 'v', global = true)]
    verbose: bool,
    /// Request timeout in seconds.
    #[arg(long, global = true, default_value_t = 300, value_name = "SECS")]
    timeout: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Accounts (operator).
    #[command(subcommand)]
    Account(AccountCmd),
    /// Catalogs.
    #[command(subcommand)]
    Catalog(CatalogCmd),
    /// Namespaces of a catalog.
    #[command(subcommand)]
    Namespace(NamespaceCmd),
    /// Tables.
    #[command(subcommand)]
    Table(TableCmd),
    /// Views.
    #[command(subcommand)]
    View(ViewCmd),
    /// Catalog integrations: connections to upstream catalogs.
    #[command(subcommand)]
    Integration(IntegrationCmd),
    /// Catalog overlays: upstream namespaces bound into a catalog.
    #[command(subcommand)]
    Overlay(OverlayCmd),
    /// ParqDB index catalogs.
    #[command(subcommand)]
    Index(IndexCmd),
    /// The query-replica table directory of a catalog.
    #[command(subcommand)]
    Directory(DirectoryCmd),
    /// Service principals (OAuth2 client credentials).
    #[command(subcommand)]
    Principal(cmd::access::PrincipalCmd),
    /// Roles and their members.
    #[command(subcommand)]
    Role(cmd::access::RoleCmd),
    /// Grants of privileges on securables to roles.
    #[command(subcommand)]
    Grant(cmd::access::GrantCmd),
    /// Who the configured token authenticates as, and its roles in the account.
    Whoami,
    /// The account's audit trail: every mutation and every refused request (account admins).
    Audit(cmd::audit::AuditArgs),
    /// Webhook sinks of the account's change events, delivered by `flotilla serve` (account
    /// admins).
    #[command(subcommand)]
    EventSink(cmd::event_sink::EventSinkCmd),
    /// Operator commands.
    #[command(subcommand)]
    Admin(AdminCmd),
    /// Check that the API answers (no token needed).
    Health,
    /// Run the local stack: the HTTP API, workers and scheduler on an embedded metastore.
    Serve(serve::ServeArgs),
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => return serve::run(args).await,
        Command::Index(IndexCmd::Gc(args)) => return index_gc::run(args).await,
        Command::Admin(AdminCmd::CreateTable { table, endpoint }) => {
            cmd::admin::create_table(&table, endpoint.as_deref()).await
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "flotilla",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        command => run(cli.global, command).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.render());
            e.exit_code()
        }
    }
}

async fn run(global: Global, command: Command) -> CliResult<()> {
    let overrides = config::Overrides {
        config: global.config,
        profile: global.profile,
        endpoint: global.endpoint,
        token: std::env::var("FLOTILLA_TOKEN").ok(),
        token_file: global.token_file,
        account: global.account,
    };
    let settings = config::resolve(&overrides)?;
    let api = client::Api::new(
        &settings,
        global.verbose,
        Duration::from_secs(global.timeout.max(1)),
    )?;
    let ctx = Ctx {
        api,
        out: Printer {
            format: global.output,
        },
    };
    match command {
        Command::Account(c) => cmd::account::run(&ctx, c).await,
        Command::Catalog(c) => cmd::catalog::run(&ctx, c).await,
        Command::Namespace(c) => cmd::namespace::run(&ctx, c).await,
        Command::Table(c) => cmd::relation::run_table(&ctx, c).await,
        Command::View(c) => cmd::relation::run_view(&ctx, c).await,
        Command::Integration(c) => cmd::integration::run(&ctx, c).await,
        Command::Overlay(c) => cmd::overlay::run(&ctx, c).await,
        Command::Index(c) => cmd::index::run(&ctx, c).await,
        Command::Directory(c) => cmd::directory::run(&ctx, c).await,
        Command::Admin(c) => cmd::admin::run(&ctx, c).await,
        Command::Principal(c) => cmd::access::run_principal(&ctx, c).await,
        Command::Role(c) => cmd::access::run_role(&ctx, c).await,
        Command::Grant(c) => cmd::access::run_grant(&ctx, c).await,
        Command::Whoami => cmd::access::whoami(&ctx).await,
        Command::Audit(args) => cmd::audit::run(&ctx, args).await,
        Command::EventSink(c) => cmd::event_sink::run(&ctx, c).await,
        Command::Health => {
            let a = ctx
                .api
                .send(client::Req::get(vec!["v1".into(), "health".into()]))
                .await?;
            ctx.out.object(&a.body);
            Ok(())
        }
        Command::Serve(_) | Command::Completions { .. } => {
            Err(CliError::usage("this command does not use the API client"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }
}
