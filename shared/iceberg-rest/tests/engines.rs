//! Real engines against the endpoint: pyiceberg and DuckDB (pinned in `scripts/test.sh`,
//! run from `FLOTILLA_ENGINES_PYTHON`) drive the router `flotilla serve` runs, on redb, over
//! loopback HTTP. The scripts live in `tests/engines/`; each exits non-zero on a failed check.

use std::path::PathBuf;
use std::process::Command;

use flotilla_iceberg_rest::IcebergConfig;
use serde_json::{Value, json};

const OPERATOR: &str = "engines-operator-token";
const ACME: &str = "engines-acme-token-0001";
const OTHER: &str = "engines-other-token-0002";

fn python() -> PathBuf {
    let p = std::env::var("FLOTILLA_ENGINES_PYTHON").expect(
        "FLOTILLA_ENGINES_PYTHON must name a Python with pyiceberg and duckdb (scripts/test.sh sets it)",
    );
    PathBuf::from(p)
}

struct Served {
    endpoint: String,
    _dir: tempfile::TempDir,
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        serde_json::to_vec(&json!({"tokens": [
            {"token": ACME, "accounts": ["acme"]},
            {"token": OTHER, "accounts": ["other"]},
        ]}))
        .unwrap(),
    )
    .unwrap();
    let data = dir.path().join("data");
    let opts = flotilla_runtime::local::LocalOptions {
        data_dir: data.clone(),
        allow_insecure_upstreams: false,
        bootstrap_token: Some(OPERATOR.to_owned()),
        tokens_file: Some(tokens),
        warehouse_root: None,
    };
    let stack = flotilla_runtime::local::build(&opts).expect("local stack");
    let app = flotilla_iceberg_rest::router(
        stack.state,
        IcebergConfig {
            local_warehouse_root: Some(opts.warehouse_root().canonicalize().unwrap()),
            vending: None,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let endpoint = format!("http://{addr}");
    let http = reqwest::Client::new();
    let post = |path: &str, token: &str, body: Value| {
        http.post(format!("{endpoint}{path}"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    for a in ["acme", "other"] {
        let r = post("/v1/accounts", OPERATOR, json!({"id": a}))
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let r = post(
        "/v1/accounts/acme/catalogs",
        ACME,
        json!({"display_name": "lake"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    Served {
        endpoint,
        _dir: dir,
    }
}

async fn run_script(served: &Served, script: &str) {
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/engines");
    let mut cmd = Command::new(python());
    cmd.arg(scripts.join(script))
        .current_dir(&scripts)
        .env(
            "FLOTILLA_ICEBERG_URI",
            format!("{}/iceberg", served.endpoint),
        )
        .env("FLOTILLA_TOKEN", ACME)
        .env("FLOTILLA_OTHER_TOKEN", OTHER)
        .env("FLOTILLA_WAREHOUSE", "acme/lake")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    // The server runs on this test's runtime: wait for the script off its threads.
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    eprint!("{stdout}");
}

/// One server, the scripts in order: pyiceberg writes what DuckDB and the isolation check read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_duckdb_and_isolation() {
    let served = serve().await;
    run_script(&served, "pyiceberg_flow.py").await;
    run_script(&served, "duckdb_flow.py").await;
    run_script(&served, "cross_account.py").await;
}
