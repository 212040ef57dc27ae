//! End to end through the Lambda tooling: `cargo lambda watch` (the runtime emulator, which
//! builds and runs the real function binaries) and `cargo lambda invoke` with the samples in
//! `events/`, against the api, iceberg, reconciler, capture and finalize functions, then
//! query and scheduler.
//! The metastore is a DynamoDB table on moto created with `flotilla admin create-table`, and
//! the reconcile queue is an SQS queue on moto; the functions reach both through
//! `FLOTILLA_AWS_ENDPOINT`.
//!
//! Needs `FLOTILLA_MOTO_ENDPOINT` and `FLOTILLA_CARGO_LAMBDA` (the pinned `cargo-lambda` of
//! the test venv; `scripts/test.sh` exports both) and fails without them. Every wait has a
//! deadline, and the watch process group is stopped on every exit path (see [`Watch`]).

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use flotilla_testkit::moto;
use serde_json::Value;

/// A first invocation compiles the function binary (`cargo run` inside `cargo lambda watch`);
/// on a loaded two-core machine that takes minutes, so the bound is generous but finite.
const BUILD_DEADLINE: Duration = Duration::from_secs(20 * 60);
/// How long the emulator may take to listen after it was spawned.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// Poll interval of the bounded waits (readiness polling, not synchronization by sleeping).
const POLL: Duration = Duration::from_millis(100);

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

fn cargo_lambda() -> PathBuf {
    match std::env::var_os("FLOTILLA_CARGO_LAMBDA") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "FLOTILLA_CARGO_LAMBDA is not set: run the tests through scripts/test.sh (it installs \
             the pinned cargo-lambda into .venv and exports the path), or export it yourself"
        ),
    }
}

/// The test run's target directory, so the emulator's builds reuse what the run compiled
/// (the workspace's `./target` when the test command did not choose one).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The environment every process here runs with: moto credentials, no instance metadata,
/// no developer AWS configuration.
fn aws_env(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ACCESS_KEY_ID", moto::TEST_ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET_ACCESS_KEY)
        .env("AWS_REGION", moto::TEST_REGION)
        .env("AWS_DEFAULT_REGION", moto::TEST_REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("AWS_PROFILE")
        .env("CARGO_TARGET_DIR", target_dir())
}

/// Waits for `child` until `deadline`; kills it when the deadline passes or when `abort`
/// reports a reason to stop waiting (e.g. the emulator failed to build the function, after
/// which `cargo lambda invoke` would wait forever).
fn wait_until(
    child: &mut Child,
    deadline: Instant,
    what: &str,
    abort: &dyn Fn() -> Option<String>,
) -> ExitStatus {
    loop {
        let stop = match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() >= deadline => {
                Some("no result before the deadline".to_owned())
            }
            Ok(None) => abort(),
            Err(e) => Some(e.to_string()),
        };
        if let Some(reason) = stop {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: {reason}");
        }
        std::thread::sleep(POLL);
    }
}

/// Runs a command to completion within `budget`; answers (status, stdout, stderr).
fn run(
    cmd: &mut Command,
    budget: Duration,
    what: &str,
    logs: &Path,
) -> (ExitStatus, String, String) {
    run_or_abort(cmd, budget, what, logs, &|| None)
}

fn run_or_abort(
    cmd: &mut Command,
    budget: Duration,
    what: &str,
    logs: &Path,
    abort: &dyn Fn() -> Option<String>,
) -> (ExitStatus, String, String) {
    let out = logs.join(format!("{}.out", what.replace(' ', "_")));
    let err = logs.join(format!("{}.err", what.replace(' ', "_")));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).expect("stdout file"))
        .stderr(File::create(&err).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let status = wait_until(&mut child, Instant::now() + budget, what, abort);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (status, read(&out), read(&err))
}

/// `cargo lambda watch` in its own process group. Dropping it (test success, assertion
/// failure or panic) terminates the group: the emulator, its `cargo run` children and the
/// function processes.
struct Watch {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Watch {
    /// The emulator's output; cargo's (the build of each function) is on its stderr.
    fn log_text(&self) -> String {
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.push_str(&std::fs::read_to_string(self.log.with_extension("err")).unwrap_or_default());
        text
    }

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// How many function processes (`cargo run` of a function) have exited so far.
    fn exits(&self) -> usize {
        self.log_text().matches("command exited").count()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        for signal in ["-TERM", "-KILL"] {
            let _ = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(POLL);
            }
        }
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn start_watch(env: &[(&str, String)], logs: &Path) -> Watch {
    let port = free_port();
    let log = logs.join("watch.log");
    let mut cmd = Command::new(cargo_lambda());
    aws_env(&mut cmd)
        .current_dir(workspace_root())
        .args([
            "lambda",
            "watch",
            "--ignore-changes",
            "--invoke-address",
            "127.0.0.1",
        ])
        .args(["--invoke-port", &port.to_string()])
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(File::create(&log).expect("watch log"))
        .stderr(File::create(log.with_extension("err")).expect("watch err"))
        .process_group(0);
    let child = cmd.spawn().expect("start cargo lambda watch");
    let mut watch = Watch { child, port, log };
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return watch;
        }
        if let Ok(Some(status)) = watch.child.try_wait() {
            panic!(
                "cargo lambda watch exited ({status}) before listening:\n{}",
                watch.log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "cargo lambda watch did not listen on {port} within {READY_DEADLINE:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// One `cargo lambda invoke`: answers the function's JSON result, or the error text when the
/// invocation failed.
fn invoke(watch: &Watch, function: &str, data_file: &Path, logs: &Path) -> Result<Value, String> {
    let what = format!(
        "invoke {function} {}",
        data_file.file_stem().and_then(|s| s.to_str()).unwrap_or("")
    );
    let mut cmd = Command::new(cargo_lambda());
    aws_env(&mut cmd)
        .current_dir(workspace_root())
        .args([
            "lambda",
            "invoke",
            function,
            "--invoke-address",
            "127.0.0.1",
        ])
        .args([
            "--invoke-port",
            &watch.port.to_string(),
            "--output-format",
            "json",
        ])
        .arg("--data-file")
        .arg(data_file);
    // A function that fails to build, or exits, leaves the invoke waiting: stop at once.
    let exits_before = watch.exits();
    let abort = || {
        (watch.exits() > exits_before)
            .then(|| format!("the function process exited:\n{}", watch.log_tail()))
    };
    let (status, out, err) = run_or_abort(&mut cmd, BUILD_DEADLINE, &what, logs, &abort);
    if status.success() {
        serde_json::from_str(&out).map_err(|e| format!("{what}: not JSON ({e}): {out}"))
    } else {
        Err(format!("{what} failed ({status}): {out}{err}"))
    }
}

fn sample(path: &str) -> PathBuf {
    workspace_root().join("events").join(path)
}

async fn create_queue() -> String {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .endpoint_url(moto::endpoint())
        .region(aws_sdk_sqs::config::Region::new(moto::TEST_REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            moto::TEST_ACCESS_KEY_ID,
            moto::TEST_SECRET_ACCESS_KEY,
            None,
            None,
            "moto",
        ))
        .build();
    let out = aws_sdk_sqs::Client::from_conf(conf)
        .create_queue()
        .queue_name(moto::unique_name("flotilla-e2e-reconcile"))
        .send()
        .await
        .expect("create queue on moto");
    out.queue_url().expect("queue url").to_owned()
}

fn dynamodb() -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(moto::endpoint())
        .region(aws_sdk_dynamodb::config::Region::new(moto::TEST_REGION))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            moto::TEST_ACCESS_KEY_ID,
            moto::TEST_SECRET_ACCESS_KEY,
            None,
            None,
            "moto",
        ))
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// Whether the moto table holds the item `pk`/`sk` (what the functions really wrote).
async fn item_exists(table: &str, pk: &str, sk: &str) -> bool {
    use aws_sdk_dynamodb::types::AttributeValue;
    let out = dynamodb()
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item from moto table");
    out.item().is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn cargo_lambda_invokes_the_samples_against_moto() {
    let endpoint = moto::endpoint();
    let lambda = cargo_lambda();
    assert!(lambda.exists(), "{} does not exist", lambda.display());
    let logs = tempfile::tempdir().expect("tempdir");
    let logs = logs.path();

    // The metastore table, the way an operator creates it for an emulator.
    let table = moto::unique_name("flotilla-e2e");
    let mut cmd = Command::new("cargo");
    aws_env(&mut cmd)
        .current_dir(workspace_root())
        .args([
            "run",
            "--quiet",
            "-p",
            "flotilla-cli",
            "--bin",
            "flotilla",
            "--",
        ])
        .args([
            "admin",
            "create-table",
            "--table",
            &table,
            "--endpoint",
            &endpoint,
        ]);
    let (status, out, err) = run(&mut cmd, BUILD_DEADLINE, "create-table", logs);
    assert!(status.success(), "flotilla admin create-table: {out}{err}");
    let queue_url = create_queue().await;

    let watch = start_watch(
        &[
            ("FLOTILLA_TABLE", table.clone()),
            ("FLOTILLA_AWS_ENDPOINT", endpoint.clone()),
            ("FLOTILLA_RECONCILE_QUEUE_URL", queue_url),
            ("FLOTILLA_SECRET_PREFIX", moto::unique_name("flotilla/e2e")),
            ("FLOTILLA_STAGE", "e2e".into()),
        ],
        logs,
    );
    let call = |function: &str, file: &Path| {
        invoke(&watch, function, file, logs)
            .unwrap_or_else(|e| panic!("{e}\n---- cargo lambda watch ----\n{}", watch.log_tail()))
    };

    // api: HTTP API v2 payloads in, API Gateway proxy responses out.
    let expect = [
        ("health.json", 200),
        ("create-account.json", 201),
        ("create-catalog.json", 201),
        ("list-catalogs.json", 200),
    ];
    let mut last = Value::Null;
    for (file, status) in expect {
        let response = call("api", &sample(&format!("api/{file}")));
        assert_eq!(response["statusCode"], status, "{file}: {response}");
        last = response;
    }
    let listed: Value = serde_json::from_str(last["body"].as_str().expect("body")).expect("json");
    assert_eq!(listed["items"][0]["display_name"], "lakehouse", "{listed}");
    let written = dynamodb()
        .scan()
        .table_name(&table)
        .send()
        .await
        .expect("scan moto table");
    assert!(
        written.count() > 0,
        "the api wrote its items to the moto table"
    );

    // iceberg: the Iceberg REST function answers the config route for a catalog with an S3
    // warehouse (created through the api), the principal taken from the sample's claims.
    let mut create: Value = serde_json::from_str(
        &std::fs::read_to_string(sample("api/create-catalog.json")).expect("sample"),
    )
    .expect("json");
    create["body"] = serde_json::json!({
        "display_name": "icelake",
        "properties": {"warehouse": "s3://acme-lake/icelake"}
    })
    .to_string()
    .into();
    create["headers"]["idempotency-key"] = "6f1c2b7e-create-icelake".into();
    let create_file = logs.join("create-icelake.json");
    std::fs::write(&create_file, create.to_string()).expect("write");
    let created = call("api", &create_file);
    assert_eq!(created["statusCode"], 201, "{created}");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(sample("iceberg/config.json")).expect("sample"),
    )
    .expect("json");
    config["rawQueryString"] = "warehouse=acme/icelake".into();
    config["queryStringParameters"]["warehouse"] = "acme/icelake".into();
    let config_file = logs.join("iceberg-config.json");
    std::fs::write(&config_file, config.to_string()).expect("write");
    let response = call("iceberg", &config_file);
    assert_eq!(response["statusCode"], 200, "{response}");
    let body: Value = serde_json::from_str(response["body"].as_str().expect("body")).expect("json");
    assert!(
        body["overrides"]["prefix"]
            .as_str()
            .is_some_and(|p| p.starts_with("acme.")),
        "{body}"
    );

    // reconciler: the sample's overlays do not exist here, so every message is acknowledged;
    // a poison body is reported as a batch item failure by its message id.
    let response = call("reconciler", &sample("reconciler/batch.json"));
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([]),
        "{response}"
    );
    let mut batch: Value = serde_json::from_str(
        &std::fs::read_to_string(sample("reconciler/batch.json")).expect("sample"),
    )
    .expect("json");
    batch["Records"][1]["body"] = "not a reconcile message".into();
    let poisoned = logs.join("poisoned-batch.json");
    std::fs::write(&poisoned, batch.to_string()).expect("write");
    let response = call("reconciler", &poisoned);
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": batch["Records"][1]["messageId"]}]),
        "{response}"
    );

    // capture: the sample's overlays do not exist here either, so both capture jobs are
    // acknowledged.
    let response = call("capture", &sample("capture/batch.json"));
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([]),
        "{response}"
    );

    // finalize: refused without both acknowledgements (and nothing written), then enabled
    // once; a repeat answers the same record.
    let half = logs.join("half.json");
    std::fs::write(&half, r#"{"acknowledge_writer_rollout": true}"#).expect("write");
    let refused = invoke(&watch, "finalize", &half, logs).expect_err("refused");
    assert!(refused.contains("FAILED_PRECONDITION"), "{refused}");
    assert!(
        !item_exists(&table, "SYSTEM", "DIRECTORY_AUTHORITY").await,
        "a refusal writes nothing"
    );
    let first = call("finalize", &sample("finalize/acknowledged.json"));
    assert_eq!(first["authority"], "ENABLED", "{first}");
    let again = call("finalize", &sample("finalize/acknowledged.json"));
    assert_eq!(again, first);
    assert!(
        item_exists(&table, "SYSTEM", "DIRECTORY_AUTHORITY").await,
        "the authority marker is on moto"
    );

    // query: the sample's shape, aimed at the catalog the api created; authority is on now.
    let catalog = listed["items"][0]["id"].as_str().expect("catalog id");
    let mut event: Value = serde_json::from_str(
        &std::fs::read_to_string(sample("query/directory.json")).expect("sample"),
    )
    .expect("json");
    event["catalog_id"] = catalog.into();
    let query_event = logs.join("query.json");
    std::fs::write(&query_event, event.to_string()).expect("write");
    let directory = call("query", &query_event);
    assert_eq!(directory["catalog_id"], catalog, "{directory}");
    assert_eq!(directory["entries"], serde_json::json!([]), "{directory}");
    assert_eq!(directory["health"]["mode"], "AUTHORITATIVE", "{directory}");

    // scheduler: the EventBridge sample; nothing is due in this deployment, and the credential
    // sweep's bounded pass finds no orphaned generation in the one account.
    let scheduled = call("scheduler", &sample("scheduler/scheduled.json"));
    assert_eq!(scheduled["enqueued"], 0, "{scheduled}");
    assert_eq!(scheduled["sweep"]["failures"], 0, "{scheduled}");
    assert_eq!(scheduled["sweep"]["generations_deleted"], 0, "{scheduled}");
    assert_eq!(scheduled["sweep"]["orphans_deleted"], 0, "{scheduled}");
    drop(watch);
}
