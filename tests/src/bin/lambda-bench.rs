#![forbid(unsafe_code)]
//! Cold-start figures of the eight Lambda functions: the size of each release binary
//! (stripped by the workspace release profile) and its init time, measured as the time from
//! process start to the function's first `GET /2018-06-01/runtime/invocation/next` against a
//! minimal Lambda runtime API emulator served here. That request is the runtime telling
//! Lambda "ready for the first invocation", so everything before it (telemetry set-up,
//! reading the environment, building the AWS clients and the app state) is init.
//!
//! Usage (after building the eight release binaries into their own target directory, one
//! `cargo build --release -p flotilla-fn-<name>` each so that no function compiles the
//! features another one selects; `docs/performance.md` gives the commands):
//!
//! ```text
//! cargo run -p flotilla-testkit --bin lambda-bench -- [--bin-dir DIR] [--runs N] [--out FILE]
//!     [--functions api,query,...]
//! ```
//!
//! `--bin-dir` defaults to `$FLOTILLA_RELEASE_TARGET_DIR/release` (the release builds' own
//! target directory, so the bench itself can be built in the development one), else
//! `$CARGO_TARGET_DIR/release` (or `target/release`); `--runs` defaults to 20,
//! `--out` to `bench-results/lambda.json`. No network is used: the AWS SDK clients are built
//! at init but send nothing before the first invocation.

use std::io::{BufRead as _, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

const FUNCTIONS: [&str; 8] = [
    "api",
    "iceberg",
    "reconciler",
    "capture",
    "scheduler",
    "finalize",
    "query",
    "events",
];
const SIZE_TARGET_MB: f64 = 15.0;
const INIT_TARGET_MS: f64 = 50.0;
/// A function that has not asked for an invocation by then is reported as failed.
const INIT_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{function}: {reason}")]
    Init { function: String, reason: String },
}

struct Args {
    bin_dir: PathBuf,
    runs: usize,
    out: PathBuf,
    functions: Vec<String>,
}

fn parse_args() -> Result<Args, BenchError> {
    let default_dir = std::env::var_os("FLOTILLA_RELEASE_TARGET_DIR")
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("release");
    let mut args = Args {
        bin_dir: default_dir,
        runs: 20,
        out: PathBuf::from("bench-results/lambda.json"),
        functions: FUNCTIONS.iter().map(|f| (*f).to_owned()).collect(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--bin-dir" => args.bin_dir = PathBuf::from(value()?),
            "--out" => args.out = PathBuf::from(value()?),
            "--functions" => {
                let list = value()?;
                args.functions = list.split(',').map(str::to_owned).collect();
                if let Some(bad) = args
                    .functions
                    .iter()
                    .find(|f| !FUNCTIONS.contains(&f.as_str()))
                {
                    return Err(BenchError::Usage(format!("unknown function {bad}")));
                }
            }
            "--runs" => {
                args.runs = value()?
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| BenchError::Usage("--runs needs a positive number".into()))?
            }
            other => return Err(BenchError::Usage(format!("unknown argument {other}"))),
        }
    }
    Ok(args)
}

/// The runtime API emulator: every connection's first request line is reported with the
/// instant it arrived; the connection is then held open (the invocation never comes), so
/// the function waits quietly until it is killed.
fn serve_runtime_api(listener: TcpListener, tx: mpsc::Sender<(Instant, String)>) {
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Ok(reader_stream) = stream.try_clone() else {
                continue;
            };
            let mut line = String::new();
            if BufReader::new(reader_stream).read_line(&mut line).is_ok() {
                let arrived = Instant::now();
                if tx.send((arrived, line.trim().to_owned())).is_err() {
                    return;
                }
            }
            held.push(stream);
            // Only the newest connection matters; the others belong to killed processes.
            if held.len() > 4 {
                held.remove(0);
            }
        }
    });
}

/// One cold start: spawn the binary, wait for its first `next` request, kill it.
fn init_once(
    binary: &Path,
    function: &str,
    runtime_api: &str,
    rx: &mpsc::Receiver<(Instant, String)>,
) -> Result<f64, BenchError> {
    let err = |reason: String| BenchError::Init {
        function: function.to_owned(),
        reason,
    };
    // Drain leftovers of an earlier run.
    while rx.try_recv().is_ok() {}
    let started = Instant::now();
    let mut child = Command::new(binary)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
        // What Lambda sets for a provided.al2023 function (lambda_runtime reads these).
        .env(
            "AWS_LAMBDA_FUNCTION_NAME",
            format!("flotilla-bench-{function}"),
        )
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/flotilla/bench/{function}"),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("AWS_SESSION_TOKEN", "bench")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        // The template's environment.
        .env("FLOTILLA_TABLE", "flotilla-bench")
        .env("FLOTILLA_STAGE", "bench")
        .env("FLOTILLA_SECRET_PREFIX", "flotilla/bench")
        .env(
            "FLOTILLA_RECONCILE_QUEUE_URL",
            "https://sqs.us-east-1.amazonaws.com/123456789012/flotilla-bench-reconcile",
        )
        .env("FLOTILLA_EVENT_BUS_NAME", "flotilla-bench-events")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("cannot start {}: {e}", binary.display())))?;
    let outcome = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok((arrived, line)) if line.contains("/2018-06-01/runtime/invocation/next") => {
                break Ok(arrived.duration_since(started).as_secs_f64() * 1000.0);
            }
            Ok((_, line)) => break Err(err(format!("unexpected first request {line:?}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(status)) = child.try_wait() {
                    break Err(err(format!("exited during init: {status}")));
                }
                if started.elapsed() > INIT_DEADLINE {
                    break Err(err(format!("no invocation/next within {INIT_DEADLINE:?}")));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(err("runtime API emulator stopped".into()));
            }
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() -> Result<(), BenchError> {
    let args = parse_args()?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| BenchError::Io {
        path: "127.0.0.1:0".into(),
        source,
    })?;
    let runtime_api = listener
        .local_addr()
        .map_err(|source| BenchError::Io {
            path: "127.0.0.1:0".into(),
            source,
        })?
        .to_string();
    let (tx, rx) = mpsc::channel();
    serve_runtime_api(listener, tx);

    let mut rows = Vec::new();
    let mut all_met = true;
    println!(
        "{:<11} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "function", "size MB", "init p50", "init p90", "init min", "init max"
    );
    for function in &args.functions {
        let function = function.as_str();
        let binary = args.bin_dir.join(function);
        let bytes = std::fs::metadata(&binary)
            .map_err(|source| BenchError::Io {
                path: binary.clone(),
                source,
            })?
            .len();
        // One unmeasured start so the binary is in the page cache, as on a warm Lambda host
        // the sandbox image is; the figure is the process's own init.
        init_once(&binary, function, &runtime_api, &rx)?;
        let mut samples = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            samples.push(init_once(&binary, function, &runtime_api, &rx)?);
        }
        samples.sort_by(f64::total_cmp);
        let mb = bytes as f64 / (1024.0 * 1024.0);
        let p50 = percentile(&samples, 50.0);
        let p90 = percentile(&samples, 90.0);
        let (min, max) = (samples[0], samples[samples.len() - 1]);
        let met = mb < SIZE_TARGET_MB && p50 < INIT_TARGET_MS;
        all_met &= met;
        println!("{function:<11} {mb:>10.2} {p50:>9.2} {p90:>9.2} {min:>9.2} {max:>9.2}");
        rows.push(json!({
            "function": function,
            "binary_bytes": bytes,
            "binary_mib": (mb * 100.0).round() / 100.0,
            "init_ms": {"p50": p50, "p90": p90, "min": min, "max": max},
            "runs": args.runs,
            "meets_targets": met,
        }));
    }
    let doc = json!({
        "benchmark": "lambda_cold_start",
        "command": "cargo run -p flotilla-testkit --bin lambda-bench",
        "bin_dir": args.bin_dir.display().to_string(),
        "method": "binary size on disk (release profile, strip = true, host target); init = process spawn to the first GET /2018-06-01/runtime/invocation/next on a local runtime API emulator, after one unmeasured start",
        "host_target": std::env::consts::ARCH,
        "targets": {"binary_mib_below": SIZE_TARGET_MB, "init_ms_p50_below": INIT_TARGET_MS},
        "all_targets_met": all_met,
        "results": rows,
    });
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    std::fs::write(&args.out, text).map_err(|source| BenchError::Io {
        path: args.out.clone(),
        source,
    })?;
    println!("wrote {}", args.out.display());
    Ok(())
}
