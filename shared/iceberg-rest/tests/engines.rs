//! Real engines against the endpoint: pyiceberg, DuckDB, ClickHouse (chdb), Sail, Daft and
//! Polars (pinned in `scripts/test.sh`, run from `FLOTILLA_ENGINES_PYTHON`) drive the router
//! `flotilla serve` runs, on redb, over loopback HTTP. The scripts live in `tests/engines/`;
//! each exits non-zero on a failed check. The engine matrix of `docs/iceberg-rest.md` names
//! the test behind each cell.
//!
//! The S3 test puts the warehouse on moto S3 and vends credentials through moto's STS; the
//! engines run with every `AWS_*` variable removed, so the vended keys are all they have
//! (ClickHouse, which cannot use them yet, is given static moto keys in its script).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use flotilla_iceberg_rest::IcebergConfig;
use flotilla_iceberg_rest::vending::{StsVending, Vending};
use serde_json::{Value, json};

const OPERATOR: &str = "engines-operator-token";
const ACME: &str = "engines-acme-token-0001";
const OTHER: &str = "engines-other-token-0002";
const ROLE: &str = "arn:aws:iam::123456789012:role/flotilla-iceberg-vending";

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

/// Where the catalog keeps its tables: the host's local warehouse root, or moto S3 with
/// STS vending.
struct S3 {
    moto: String,
    warehouse: String,
}

async fn serve() -> Served {
    serve_with(None).await
}

async fn serve_with(s3: Option<&S3>) -> Served {
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
    let root = opts.warehouse_root().canonicalize().unwrap();
    let (state, vending) = match s3 {
        None => (stack.state, None),
        Some(s3) => {
            // The host writes metadata with its own identity (the suite's moto keys); engines
            // get only what STS vends for one table.
            let policy =
                flotilla_parqdb::warehouse::WarehousePolicy::with_file_root(&root).unwrap();
            let stores = flotilla_parqdb::store::DefaultWarehouseStores::new()
                .with_s3_endpoint(s3.moto.clone())
                .with_policy(policy);
            let vending: Arc<dyn Vending> =
                Arc::new(StsVending::new(ROLE, 3600, Some(s3.moto.clone())).expect("vending"));
            (
                stack.state.with_index_stores(Arc::new(stores)),
                Some(vending),
            )
        }
    };
    let app = flotilla_iceberg_rest::router(
        state,
        IcebergConfig {
            local_warehouse_root: Some(root),
            vending,
            ..Default::default()
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
    let mut catalog = json!({"display_name": "lake"});
    if let Some(s3) = s3 {
        catalog["properties"] = json!({"warehouse": s3.warehouse});
    }
    let r = post("/v1/accounts/acme/catalogs", ACME, catalog)
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    Served {
        endpoint,
        _dir: dir,
    }
}

async fn run_script(served: &Served, script: &str) {
    run_script_with(served, script, &[]).await
}

async fn run_script_with(served: &Served, script: &str, extra: &[(&str, &str)]) {
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
    // No static key, no ambient AWS configuration: an engine reaches storage only with what
    // the catalog vends (or, on a file:// warehouse, needs nothing).
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in extra {
        cmd.env(k, v);
    }
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

/// The table features engines use, one server, the scripts in order (each reads what the
/// ones before wrote): pyiceberg on every format version, partitioned, sorted and evolved
/// tables, add_files, deletes, overwrites, inspect tables, branches and tags, register-table,
/// two writers; DuckDB reading those and writing merge-on-read deletes, v1 and v3 tables;
/// Daft and Polars reading and writing through pyiceberg's catalog; Sail's Spark SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_features_across_engines_on_a_local_warehouse() {
    let served = serve().await;
    run_script(&served, "pyiceberg_features.py").await;
    run_script(&served, "duckdb_features.py").await;
    run_script(&served, "dataframes_flow.py").await;
    run_script(&served, "sail_flow.py").await;
}

/// The engines with the warehouse on moto S3: pyiceberg creates, appends and reads back,
/// DuckDB reads and inserts, each with only the credentials vended through moto's STS; then
/// ClickHouse reads, inserts, deletes and evolves (static keys), Daft and Polars read and
/// Daft appends with the vended credentials, and Sail's refusal of them is pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_on_moto_s3_with_vended_credentials() {
    let moto = std::env::var("FLOTILLA_MOTO_ENDPOINT").expect(
        "FLOTILLA_MOTO_ENDPOINT is not set: the S3 engine test needs moto (scripts/test.sh)",
    );
    // Vending must reach moto's STS, never AWS.
    let sts = std::env::var("AWS_ENDPOINT_URL_STS")
        .expect("AWS_ENDPOINT_URL_STS is not set: vending in tests must reach moto's STS");
    assert!(
        sts.starts_with("http://127.0.0.1"),
        "STS endpoint {sts} is not local"
    );
    let bucket = "flotilla-iceberg-engines";
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success() || r.status().as_u16() == 409,
        "create bucket: {}",
        r.status()
    );
    let s3 = S3 {
        warehouse: format!("s3://{bucket}/acme-{}/lake", uuid::Uuid::new_v4().simple()),
        moto,
    };
    let served = serve_with(Some(&s3)).await;
    let env = [
        ("FLOTILLA_S3_WAREHOUSE", s3.warehouse.as_str()),
        ("FLOTILLA_S3_ENDPOINT", s3.moto.as_str()),
    ];
    run_script_with(&served, "s3_vended_flow.py", &env).await;
    run_script_with(&served, "s3_clickhouse_daft_polars.py", &env).await;
}
