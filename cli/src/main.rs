#![forbid(unsafe_code)]
//! `flotilla`: the local stack (`serve`), administration, and (growing) resource commands.

mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "flotilla", version, about = "Flotilla: a control plane for lakehouse catalogs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the local stack: the HTTP API, workers and scheduler on an embedded metastore.
    Serve(serve::ServeArgs),
    /// Operator commands.
    #[command(subcommand)]
    Admin(AdminCommand),
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create the DynamoDB table (for emulators and manual set-ups; SAM creates it on AWS).
    CreateTable {
        /// Table name.
        #[arg(long, env = "FLOTILLA_TABLE")]
        table: String,
        /// Endpoint of a DynamoDB-compatible emulator (e.g. moto server).
        #[arg(long, env = "FLOTILLA_AWS_ENDPOINT")]
        endpoint: Option<String>,
    },
}

/// Exit codes: 0 ok, 1 error, 2 usage (clap), 3 conflict or precondition.
#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Admin(AdminCommand::CreateTable { table, endpoint }) => {
            flotilla_runtime::telemetry::init(false);
            let client = flotilla_metastore::dynamo::connect(endpoint.as_deref()).await;
            match flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, &table).await {
                Ok(()) => {
                    println!("table {table} is ready");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

