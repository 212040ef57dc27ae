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
use flotilla_iceberg_rest::vending::{Access, StsVending, Vending};
use serde_json::{Value, json};

const OPERATOR: &str = "engines-operator-token";
const ACME: &str = "engines-acme-token-0001";
const OTHER: &str = "engines-other-token-0002";
/// A tokens-file entry naming principal `rita` in `acme` (no grant until a test gives one).
const RITA: &str = "engines-rita-token-0003";
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
    serve_vending(s3, None).await
}

/// [`serve_with`], vending through `vending` instead of a plain [`StsVending`].
async fn serve_vending(s3: Option<&S3>, vending: Option<Arc<dyn Vending>>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        serde_json::to_vec(&json!({"tokens": [
            {"token": ACME, "accounts": ["acme"]},
            {"token": OTHER, "accounts": ["other"]},
            {"token": RITA, "accounts": ["acme"], "principal": "rita"},
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
        upstream_files_root: None,
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
            let vending: Arc<dyn Vending> = vending.unwrap_or_else(|| {
                Arc::new(StsVending::new(ROLE, 3600, Some(s3.moto.clone())).expect("vending"))
            });
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

/// Service principals' client credentials through both engines: the reader (`READ` on the
/// catalog) reads and is refused on append, the writer (`WRITE`) appends, and revoking the
/// reader's grant in the middle of its sessions refuses its next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_with_a_readers_and_a_writers_client_credentials() {
    let served = serve().await;
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: String, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{}{path}", served.endpoint))
            .bearer_auth(ACME);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let resp = r.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (_, cats) = call(
        reqwest::Method::GET,
        "/v1/accounts/acme/catalogs".into(),
        None,
    )
    .await;
    let lake = cats["items"][0]["id"].as_str().unwrap().to_owned();
    let mut env: Vec<(String, String)> = Vec::new();
    for (role, privilege) in [("readers", "READ"), ("writers", "WRITE")] {
        let (s, v) = call(
            reqwest::Method::POST,
            "/v1/accounts/acme/roles".into(),
            Some(json!({"name": role})),
        )
        .await;
        assert_eq!(s, 201, "{v}");
        let (s, g) = call(
            reqwest::Method::POST,
            "/v1/accounts/acme/grants".into(),
            Some(json!({"role": role, "privilege": privilege,
                "securable": {"type": "CATALOG", "catalog_id": lake}})),
        )
        .await;
        assert_eq!(s, 201, "{g}");
        let name = format!("{}-svc", &role[..role.len() - 1]);
        let (s, p) = call(
            reqwest::Method::POST,
            "/v1/accounts/acme/principals".into(),
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(s, 201, "{p}");
        let (s, v) = call(
            reqwest::Method::PUT,
            format!("/v1/accounts/acme/roles/{role}/members/{name}"),
            None,
        )
        .await;
        assert_eq!(s, 201, "{v}");
        let upper = role[..role.len() - 1].to_uppercase();
        env.push((
            format!("FLOTILLA_{upper}_ID"),
            p["client_id"].as_str().unwrap().to_owned(),
        ));
        env.push((
            format!("FLOTILLA_{upper}_SECRET"),
            p["client_secret"].as_str().unwrap().to_owned(),
        ));
        if role == "readers" {
            env.push((
                "FLOTILLA_READER_GRANT".into(),
                g["id"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let extra: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    run_script_with(&served, "access_control.py", &extra).await;
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

/// Vends through moto's STS and records the access each vend was asked for.
struct Recording {
    inner: StsVending,
    seen: std::sync::Mutex<Vec<Access>>,
}

#[async_trait::async_trait]
impl Vending for Recording {
    async fn vend(
        &self,
        location: &str,
        access: Access,
        fresh: bool,
    ) -> flotilla_iceberg_rest::IcebergResult<Option<flotilla_iceberg_rest::vending::Vended>> {
        self.seen.lock().unwrap().push(access);
        self.inner.vend(location, access, fresh).await
    }

    fn client_config(&self) -> std::collections::BTreeMap<String, String> {
        self.inner.client_config()
    }
}

/// On moto: a principal with `READ` on the catalog gets vended credentials whose STS session
/// policy holds no write action (read and list below the table only); the account's admin
/// token, for the same table, gets read-write ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_vended_credentials_cannot_write() {
    let moto =
        std::env::var("FLOTILLA_MOTO_ENDPOINT").expect("FLOTILLA_MOTO_ENDPOINT (scripts/test.sh)");
    let bucket = "flotilla-iceberg-engines";
    let r = reqwest::Client::new()
        .put(format!("{moto}/{bucket}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().as_u16() == 409);
    let s3 = S3 {
        warehouse: format!("s3://{bucket}/acl-{}/lake", uuid::Uuid::new_v4().simple()),
        moto: moto.clone(),
    };
    let recording = Arc::new(Recording {
        inner: StsVending::new(ROLE, 3600, Some(moto)).expect("vending"),
        seen: Default::default(),
    });
    let served = serve_vending(Some(&s3), Some(recording.clone() as Arc<dyn Vending>)).await;
    let http = reqwest::Client::new();
    let send = |method: reqwest::Method, path: String, token: &'static str, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{}{path}", served.endpoint))
            .bearer_auth(token)
            .header("X-Iceberg-Access-Delegation", "vended-credentials");
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let resp = r.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    use reqwest::Method as M;
    let (_, cats) = send(M::GET, "/v1/accounts/acme/catalogs".into(), ACME, None).await;
    let lake = cats["items"][0]["id"].as_str().unwrap().to_owned();
    let (s, v) = send(
        M::POST,
        "/v1/accounts/acme/roles".into(),
        ACME,
        Some(json!({"name": "readers"})),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    send(
        M::PUT,
        "/v1/accounts/acme/roles/readers/members/rita".into(),
        ACME,
        None,
    )
    .await;
    let (s, v) = send(
        M::POST,
        "/v1/accounts/acme/grants".into(),
        ACME,
        Some(json!({"role": "readers", "privilege": "READ", "securable": {"type": "CATALOG", "catalog_id": lake}})),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let (_, cfg) = send(
        M::GET,
        "/iceberg/v1/config?warehouse=acme/lake".into(),
        RITA,
        None,
    )
    .await;
    let prefix = cfg["overrides"]["prefix"]
        .as_str()
        .expect("the reader gets the config")
        .to_owned();
    let base = format!("/iceberg/v1/{prefix}/namespaces");
    let (s, v) = send(
        M::POST,
        base.clone(),
        ACME,
        Some(json!({"namespace": ["acl"]})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let schema = json!({"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]});
    let (s, v) = send(
        M::POST,
        format!("{base}/acl/tables"),
        ACME,
        Some(json!({"name": "t", "schema": schema})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let location = v["metadata"]["location"].as_str().unwrap().to_owned();
    let (bucket_name, key_prefix) = flotilla_iceberg_rest::vending::split_s3(&location).unwrap();

    recording.seen.lock().unwrap().clear();
    let (s, v) = send(M::GET, format!("{base}/acl/tables/t"), RITA, None).await;
    assert_eq!(s, 200, "{v}");
    let creds = &v["storage-credentials"][0]["config"];
    assert!(
        creds["s3.access-key-id"]
            .as_str()
            .is_some_and(|k| !k.is_empty()),
        "vended: {v}"
    );
    let (s, v) = send(
        M::GET,
        format!("{base}/acl/tables/t/credentials"),
        RITA,
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        *recording.seen.lock().unwrap(),
        [Access::ReadOnly, Access::ReadOnly]
    );
    // The session policy STS gets for those credentials: reads and listing, no write action.
    let policy =
        flotilla_iceberg_rest::vending::session_policy(bucket_name, &key_prefix, Access::ReadOnly);
    let actions: Vec<String> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|st| {
            st["Action"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
        })
        .collect();
    assert!(actions.contains(&"s3:GetObject".to_owned()));
    for a in &actions {
        assert!(
            a.starts_with("s3:Get") || a == "s3:ListBucket",
            "a write action in a reader's session policy: {a}"
        );
    }
    // The reader may not commit; the admin token's credentials for the same table write.
    let (s, v) = send(
        M::POST,
        format!("{base}/acl/tables/t"),
        RITA,
        Some(json!({"requirements": [], "updates": []})),
    )
    .await;
    assert_eq!(s, 403, "{v}");
    recording.seen.lock().unwrap().clear();
    let (s, _) = send(M::GET, format!("{base}/acl/tables/t"), ACME, None).await;
    assert_eq!(s, 200);
    assert_eq!(*recording.seen.lock().unwrap(), [Access::ReadWrite]);
}
