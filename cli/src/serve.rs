//! `flotilla serve`: the same router as the Lambda API, on redb, with graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use flotilla_runtime::local::{LocalOptions, build};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where the metastore and local secrets live.
    #[arg(long, default_value = "flotilla-data")]
    pub data_dir: PathBuf,
    /// Allow loopback, private-range and plain-http upstream catalogs (local testing only).
    #[arg(long)]
    pub allow_insecure_upstreams: bool,
    /// Directory below which `file://` index warehouses may lie (created 0700 when missing);
    /// default `DATA_DIR/warehouses`. No other local path can be used as a warehouse.
    #[arg(long, env = "FLOTILLA_WAREHOUSE_ROOT", value_name = "DIR")]
    pub warehouse_root: Option<PathBuf>,
    /// The only directory below which capture reads `file://` locations an upstream names
    /// (local testing with file-based upstreams); unset: such locations are never read, even
    /// with --allow-insecure-upstreams.
    #[arg(long, env = "FLOTILLA_UPSTREAM_FILES_ROOT", value_name = "DIR")]
    pub upstream_files_root: Option<PathBuf>,
    /// Log JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,
}

pub async fn run(args: ServeArgs) -> ExitCode {
    flotilla_runtime::telemetry::init(args.log_json);
    let opts = LocalOptions {
        data_dir: args.data_dir.clone(),
        allow_insecure_upstreams: args.allow_insecure_upstreams,
        bootstrap_token: std::env::var("FLOTILLA_BOOTSTRAP_TOKEN")
            .ok()
            .filter(|t| !t.is_empty()),
        tokens_file: std::env::var_os("FLOTILLA_TOKENS_FILE").map(PathBuf::from),
        warehouse_root: args.warehouse_root.clone(),
        upstream_files_root: args.upstream_files_root.clone(),
    };
    let stack = match build(&opts) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = &stack.generated_token_file {
        tracing::warn!(path = %path.display(), "no token configured: an operator token was written to this file");
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, listen = %args.listen, "cannot bind");
            return ExitCode::from(1);
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let app =
        flotilla_iceberg_rest::router(stack.state.clone(), iceberg_config(&opts.warehouse_root()));
    // The same scheduler and reconciler as the Lambdas, in-process (stopped on drop).
    let _reconcile = flotilla_runtime::local::spawn_reconcile(&stack.state, stack.work);
    // Webhook sinks of the accounts' change events (stopped on drop).
    let _sinks = match flotilla_runtime::local::spawn_event_sinks(&stack.state) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return ExitCode::from(1);
        }
    };
    tracing::info!(address = %addr, data_dir = %args.data_dir.display(), "flotilla serve ready on http://{addr}");
    // Hyper's own parse-error answers (400/414/431) get the API's error shape.
    let listener = flotilla_core::http::wire::JsonErrorListener(listener);
    // The connection's peer is the source address the token routes' limiter counts by.
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<flotilla_core::http::wire::Peer>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await;
    match served {
        Ok(()) => {
            tracing::info!("flotilla serve stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "server failed");
            ExitCode::from(1)
        }
    }
}

/// Iceberg tables of catalogs without a `warehouse` property live below the warehouse root
/// (one directory per account, the account's tenant prefix), the only local path the
/// warehouse stores admit.
fn iceberg_config(warehouse_root: &std::path::Path) -> flotilla_iceberg_rest::IcebergConfig {
    let root =
        std::fs::canonicalize(warehouse_root).unwrap_or_else(|_| warehouse_root.to_path_buf());
    flotilla_iceberg_rest::IcebergConfig {
        local_warehouse_root: Some(root),
        vending: flotilla_iceberg_rest::vending::from_env(),
        ..Default::default()
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
