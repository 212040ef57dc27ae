//! What can go wrong in a command, and the exit code each kind maps to.
//!
//! Exit codes are part of the CLI's contract (docs/cli.md): 0 ok, 1 error, 2 usage,
//! 3 conflict or precondition (HTTP 409 / 412 / 428), so scripts can retry on 3 with a fresh etag.

use std::process::ExitCode;

use serde_json::Value;

/// An error answered by the API, in its documented `{"error": {...}}` shape.
#[derive(Debug, Clone)]
pub struct ApiFailure {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub details: Value,
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Wrong or missing input that clap could not catch (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The server refused the request.
    #[error("{}", api_line(.0))]
    Api(ApiFailure),
    /// The server could not be reached or answered something that is not the API.
    #[error("{0}")]
    Transport(String),
    /// A name that resolves to nothing or to more than one resource.
    #[error("{code}: {message}")]
    Resolve { code: &'static str, message: String },
    /// Local configuration or files (config file, schema file, credential file).
    #[error("{0}")]
    Local(String),
    /// The command ran but its result is a failure (e.g. `integration validate` found problems).
    #[error("{0}")]
    Failed(String),
}

fn api_line(f: &ApiFailure) -> String {
    let mut line = format!("{}: {}", f.code, f.message);
    if let Some(id) = f.details.get("error_id").and_then(Value::as_str) {
        line.push_str(&format!(" (error_id {id})"));
    }
    line
}

impl CliError {
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::Usage(msg.into())
    }

    pub fn local(msg: impl Into<String>) -> Self {
        Self::Local(msg.into())
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Usage(_) => ExitCode::from(2),
            Self::Api(f) if matches!(f.status, 409 | 412 | 428) => ExitCode::from(3),
            _ => ExitCode::from(1),
        }
    }

    /// The one line printed on stderr, `error: CODE: message` for API errors.
    pub fn render(&self) -> String {
        format!("error: {self}")
    }
}

pub type CliResult<T> = Result<T, CliError>;
