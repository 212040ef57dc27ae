//! Test support: an in-process `flotilla serve` stack, a recording stub API for routes that
//! are still being built, and a runner for the compiled `flotilla` binary.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub const TOKEN: &str = "cli-test-operator-token";

/// A server bound to 127.0.0.1:0, served from a task of the test's runtime.
pub struct Server {
    pub endpoint: String,
    /// Keeps the data directory (and a scratch area for config files) alive.
    pub dir: tempfile::TempDir,
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

impl Server {
    /// The real router on redb, built the way `flotilla serve` builds it.
    pub async fn local() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = flotilla_runtime::local::LocalOptions {
            data_dir: dir.path().join("data"),
            allow_insecure_upstreams: true,
            bootstrap_token: Some(TOKEN.to_owned()),
            tokens_file: None,
            warehouse_root: None,
            upstream_files_root: None,
        };
        let stack = flotilla_runtime::local::build(&opts).expect("local stack");
        let endpoint = serve(flotilla_core::router(stack.state)).await;
        Self { endpoint, dir }
    }

    /// A runner with endpoint, token and account in the environment.
    pub fn cli(&self, account: &str) -> Cli {
        Cli::new(&self.endpoint, self.dir.path())
            .env("FLOTILLA_TOKEN", TOKEN)
            .env("FLOTILLA_ACCOUNT", account)
    }
}

/// One request as the stub saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Percent-encoded, as sent.
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub type Responder = dyn Fn(&Recorded) -> (u16, Value) + Send + Sync;

/// A stub API: records every request and answers what the responder says.
pub struct Stub {
    pub endpoint: String,
    pub log: Arc<Mutex<Vec<Recorded>>>,
    pub dir: tempfile::TempDir,
}

impl Stub {
    pub async fn start(
        responder: impl Fn(&Recorded) -> (u16, Value) + Send + Sync + 'static,
    ) -> Self {
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let responder: Arc<Responder> = Arc::new(responder);
        let (l, r) = (log.clone(), responder.clone());
        let app = Router::new().fallback(move |req: Request| {
            let (l, r) = (l.clone(), r.clone());
            async move { handle(req, l, r).await }
        });
        let endpoint = serve(app).await;
        Self {
            endpoint,
            log,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn cli(&self) -> Cli {
        Cli::new(&self.endpoint, self.dir.path())
            .env("FLOTILLA_TOKEN", TOKEN)
            .env("FLOTILLA_ACCOUNT", "acme")
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().expect("log").clone()
    }

    /// The requests other than GETs (the ones name resolution makes are GETs).
    pub fn writes(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }
}

async fn handle(
    req: Request,
    log: Arc<Mutex<Vec<Recorded>>>,
    responder: Arc<Responder>,
) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let rec = Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        },
    };
    log.lock().expect("log").push(rec.clone());
    let (status, value) = responder(&rec);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if value.is_null() {
        return (status, Body::empty()).into_response();
    }
    (
        status,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The API's error body.
pub fn api_error(code: &str, message: &str) -> Value {
    serde_json::json!({"error": {"code": code, "message": message, "details": {}}})
}

/// A run of the compiled binary.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The child's argv as the kernel reported it while the child was running.
    pub argv: Option<String>,
}

impl Out {
    /// Parses stdout as exactly one JSON document (serde refuses trailing documents).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
    pub fn fails(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Builder for one `flotilla` invocation with a clean environment.
#[derive(Clone)]
pub struct Cli {
    envs: Vec<(String, String)>,
    home: PathBuf,
    stdin: Option<String>,
}

impl Cli {
    pub fn new(endpoint: &str, scratch: &Path) -> Self {
        let home = scratch.join("home");
        std::fs::create_dir_all(&home).expect("home");
        Self {
            envs: vec![("FLOTILLA_ENDPOINT".into(), endpoint.into())],
            home,
            stdin: None,
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.retain(|(key, _)| key != k);
        self.envs.push((k.into(), v.into()));
        self
    }

    pub fn without_env(mut self, k: &str) -> Self {
        self.envs.retain(|(key, _)| key != k);
        self
    }

    pub fn stdin(mut self, s: &str) -> Self {
        self.stdin = Some(s.to_owned());
        self
    }

    /// Runs the binary on a blocking thread, so the in-process server keeps serving.
    pub async fn run(&self, args: &[&str]) -> Out {
        let me = self.clone();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        tokio::task::spawn_blocking(move || me.run_blocking(&args))
            .await
            .expect("join")
    }

    fn run_blocking(&self, args: &[String]) -> Out {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        cmd.args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn flotilla");
        // `spawn` returns once the child's exec has begun (close-on-exec fired), but the kernel
        // fills in the new argv a moment later; a child reading stdin cannot finish before
        // stdin is closed below, so polling until the argv appears reads the running binary's.
        let argv = if self.stdin.is_some() {
            read_cmdline(child.id())
        } else {
            None
        };
        if let Some(mut stdin) = child.stdin.take()
            && let Some(s) = &self.stdin
        {
            let _ = stdin.write_all(s.as_bytes());
        }
        let out = child.wait_with_output().expect("wait");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            argv,
        }
    }
}

/// Polls `/proc/PID/cmdline` until the exec'd argv shows (bounded: 10 s).
fn read_cmdline(pid: u32) -> Option<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        if !bytes.is_empty() {
            return Some(String::from_utf8_lossy(&bytes).replace('\0', " "));
        }
        std::thread::yield_now();
    }
    None
}

/// Writes a file under `dir` and answers its path.
pub fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write");
    p.to_string_lossy().into_owned()
}

pub fn schema_json() -> &'static str {
    r#"{"type": "struct", "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]}"#
}
