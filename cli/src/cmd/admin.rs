//! `flotilla admin`: operator operations. `create-table` talks to DynamoDB directly; the
//! others go through the API.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::Ctx;
use crate::client::Req;
use crate::error::{CliError, CliResult};

#[derive(Debug, Subcommand)]
pub enum AdminCmd {
    /// Create the DynamoDB table (for emulators and manual set-ups; SAM creates it on AWS).
    CreateTable {
        /// Table name.
        #[arg(long, env = "FLOTILLA_TABLE")]
        table: String,
        /// Endpoint of a DynamoDB-compatible emulator (e.g. moto server).
        #[arg(long, env = "FLOTILLA_AWS_ENDPOINT")]
        endpoint: Option<String>,
    },
    /// Finalize the catalog-directory rollout (same operation as the finalize function).
    /// Both acknowledgements are required.
    CatalogFinalize {
        /// Every writer runs a version that maintains directory generations.
        #[arg(long, required = true)]
        acknowledge_writer_rollout: bool,
        /// No writes are in flight from older writers.
        #[arg(long, required = true)]
        acknowledge_quiescent_writes: bool,
    },
    /// Delete stored credential versions of the account (`--account`) that no integration
    /// references any more.
    SweepCredentials {
        /// Leave generations younger than this alone (server default: 3600).
        #[arg(long, value_name = "SECS")]
        min_age: Option<u64>,
    },
}

/// `admin create-table`: needs no API endpoint.
pub async fn create_table(table: &str, endpoint: Option<&str>) -> CliResult<()> {
    flotilla_runtime::telemetry::init(false);
    let client = flotilla_metastore::dynamo::connect(endpoint).await;
    flotilla_metastore::dynamo::DynamoMetastore::create_table(&client, table)
        .await
        .map_err(|e| CliError::local(e.to_string()))?;
    println!("table {table} is ready");
    Ok(())
}

pub async fn run(ctx: &Ctx, cmd: AdminCmd) -> CliResult<()> {
    let api = &ctx.api;
    match cmd {
        AdminCmd::CreateTable { .. } => Err(CliError::usage(
            "create-table is dispatched before the API client",
        )),
        AdminCmd::CatalogFinalize {
            acknowledge_writer_rollout,
            acknowledge_quiescent_writes,
        } => {
            let body = json!({
                "acknowledge_writer_rollout": acknowledge_writer_rollout,
                "acknowledge_quiescent_writes": acknowledge_quiescent_writes,
            });
            let segs = vec![
                "v1".to_owned(),
                "admin".to_owned(),
                "catalog-finalize".to_owned(),
            ];
            let a = api.send(Req::new(Method::POST, segs).body(body)).await?;
            let doc = if a.body.is_null() {
                json!({"finalized": true})
            } else {
                a.body
            };
            ctx.out.object(&doc);
            Ok(())
        }
        AdminCmd::SweepCredentials { min_age } => {
            let segs = vec![
                "v1".to_owned(),
                "admin".to_owned(),
                "sweep-credentials".to_owned(),
            ];
            let mut body = json!({"account_id": api.account()?});
            if let Some(secs) = min_age {
                body["min_age_secs"] = json!(secs);
            }
            match api.send(Req::new(Method::POST, segs).body(body)).await {
                Ok(a) => {
                    let doc = if a.body.is_null() { json!({"swept": true}) } else { a.body };
                    ctx.out.object(&doc);
                    Ok(())
                }
                Err(CliError::Api(f)) if f.status == 404 || f.status == 405 => Err(CliError::Failed(
                    "NOT_AVAILABLE: this server does not offer credential sweeping yet (POST /v1/admin/sweep-credentials is not routed)".to_owned(),
                )),
                Err(e) => Err(e),
            }
        }
    }
}
