//! `flotilla index gc`: garbage collection of one ParqDB index catalog's warehouse.
//!
//! An operator maintenance job, so it runs against the metastore directly rather than through
//! the API (it needs no token and no running server):
//! - embedded (`flotilla serve`'s data): `--data-dir DIR` opens `DIR/metastore.redb`. redb
//!   holds an exclusive lock, so stop `flotilla serve` on that directory first;
//! - AWS: `--table NAME` (`FLOTILLA_TABLE`) and, for emulators, `--endpoint URL`
//!   (`FLOTILLA_AWS_ENDPOINT`). S3 warehouses use the default AWS credential chain and
//!   `FLOTILLA_S3_ENDPOINT` when set, like the server.
//!
//! Without `--apply` it only prints the plan (what would be deleted, and how much is kept
//! because it is reachable or recent). With `--apply` it re-plans at the same instant and
//! deletes only objects that are still eligible. The rules (reachability, retention measured
//! from the latest loss of reachability or the object's own write, fail instead of guessing)
//! are `flotilla-parqdb`'s `gc` module; see docs/parqdb.md.
//!
//! Output: one JSON document on stdout. Exit codes: 0 ok, 1 error, 2 usage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use flotilla_core::clock::{Clock, SystemClock};
use flotilla_core::service::index_catalogs::{self, gc};
use flotilla_metastore::DynMetastore;
use serde_json::json;

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Account that owns the index catalog.
    #[arg(long, env = "FLOTILLA_ACCOUNT")]
    pub account: String,
    /// Index catalog name.
    #[arg(long)]
    pub catalog: String,
    /// How long an unreachable object is kept, e.g. 7d, 36h, 90m, 3600s.
    #[arg(long, value_parser = parse_retention)]
    pub retention: i64,
    /// Delete what the plan lists (default: only print the plan).
    #[arg(long)]
    pub apply: bool,
    /// Data directory of the embedded stack (`flotilla serve --data-dir`).
    #[arg(long, conflicts_with = "table", required_unless_present = "table")]
    pub data_dir: Option<PathBuf>,
    /// DynamoDB table of an AWS deployment.
    #[arg(long, env = "FLOTILLA_TABLE")]
    pub table: Option<String>,
    /// Endpoint of a DynamoDB-compatible emulator (with --table).
    #[arg(long, env = "FLOTILLA_AWS_ENDPOINT", requires = "table")]
    pub endpoint: Option<String>,
}

/// Parses `<digits><d|h|m|s>` into milliseconds.
pub fn parse_retention(s: &str) -> Result<i64, String> {
    let bad = || format!("invalid retention {s:?}: use a number with d, h, m or s, e.g. 7d");
    let unit = s.chars().last().ok_or_else(bad)?;
    let factor: i64 = match unit {
        'd' => 24 * 3600 * 1000,
        'h' => 3600 * 1000,
        'm' => 60 * 1000,
        's' => 1000,
        _ => return Err(bad()),
    };
    let digits = &s[..s.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: i64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(factor).ok_or_else(bad)
}

async fn open_store(args: &GcArgs) -> Result<DynMetastore, String> {
    match (&args.data_dir, &args.table) {
        (Some(dir), None) => {
            let path = dir.join("metastore.redb");
            if !path.is_file() {
                return Err(format!("no metastore at {}", path.display()));
            }
            let store =
                flotilla_metastore::redb_store::RedbMetastore::open(&path).map_err(|e| {
                    format!(
                        "cannot open {} (is `flotilla serve` running on it?): {e}",
                        path.display()
                    )
                })?;
            Ok(Arc::new(store))
        }
        (None, Some(table)) => {
            let client = flotilla_metastore::dynamo::connect(args.endpoint.as_deref()).await;
            Ok(Arc::new(flotilla_metastore::dynamo::DynamoMetastore::new(
                client,
                table.clone(),
            )))
        }
        _ => Err("give exactly one of --data-dir and --table".into()),
    }
}

async fn collect(args: &GcArgs) -> Result<serde_json::Value, String> {
    let store = open_store(args).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now_ms();
    let service = index_catalogs::open(store, index_catalogs::warehouse_stores_from_env(), clock);
    let plan = gc::plan(&service, &args.account, &args.catalog, args.retention, now)
        .await
        .map_err(|e| format!("{}: {e}", e.code()))?;
    let mut out = json!({"plan": plan, "applied": false});
    if args.apply {
        let report = gc::apply(&service, &args.account, &args.catalog, &plan)
            .await
            .map_err(|e| format!("{}: {e}", e.code()))?;
        out["applied"] = json!(true);
        out["report"] = json!(report);
    }
    Ok(out)
}

/// Runs the collection and prints the plan (and the report with `--apply`).
pub async fn run(args: GcArgs) -> ExitCode {
    flotilla_runtime::telemetry::init(false);
    match collect(&args).await {
        Ok(doc) => {
            match serde_json::to_string_pretty(&doc) {
                Ok(text) => println!("{text}"),
                Err(e) => {
                    eprintln!("error: cannot encode the result: {e}");
                    return ExitCode::from(1);
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_retention;

    #[test]
    fn retention_takes_one_unit_suffix() {
        assert_eq!(parse_retention("7d"), Ok(7 * 24 * 3600 * 1000));
        assert_eq!(parse_retention("36h"), Ok(36 * 3600 * 1000));
        assert_eq!(parse_retention("90m"), Ok(90 * 60 * 1000));
        assert_eq!(parse_retention("0s"), Ok(0));
        for bad in [
            "",
            "7",
            "d",
            "-1d",
            "7w",
            "1.5d",
            "99999999999999999999d",
            " 7d",
        ] {
            assert!(parse_retention(bad).is_err(), "{bad}");
        }
    }
}
