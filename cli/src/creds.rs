//! Write-only credential input.
//!
//! Secrets reach the CLI only through stdin, a file or an environment variable, never as a
//! command-line argument, which would land in shell history and in every process listing.
//! The input is `key=value` lines (`client_secret=...`); blank lines and `#` comments are
//! skipped. Errors name a line number or a key, never a value, and [`Secret`] has no
//! `Display` and a redacting `Debug`, so a secret cannot be printed by accident.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use serde_json::Value;

use crate::error::{CliError, CliResult};

/// Longest credential input read, so a wrong file cannot exhaust memory.
const MAX_INPUT_BYTES: u64 = 64 * 1024;

/// A secret value: serialized only into the request body.
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the credentials come from (at most one of the three).
#[derive(Debug, Clone, Default, clap::Args)]
#[group(multiple = false)]
pub struct CredentialSource {
    /// Read credentials as `key=value` lines from stdin.
    #[arg(long)]
    pub cred_stdin: bool,
    /// Read credentials as `key=value` lines from this file.
    #[arg(long, value_name = "FILE")]
    pub cred_file: Option<PathBuf>,
    /// Read credentials as `key=value` lines from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub cred_env: Option<String>,
}

impl CredentialSource {
    pub fn given(&self) -> bool {
        self.cred_stdin || self.cred_file.is_some() || self.cred_env.is_some()
    }

    /// Reads and parses the credentials, or `None` when no source was given.
    pub fn read(&self) -> CliResult<Option<BTreeMap<String, Secret>>> {
        let raw = if self.cred_stdin {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!("reading credentials as key=value lines from stdin; end with Ctrl-D");
            }
            let mut s = String::new();
            stdin
                .lock()
                .take(MAX_INPUT_BYTES + 1)
                .read_to_string(&mut s)
                .map_err(|e| {
                    CliError::local(format!("cannot read credentials from stdin: {}", e.kind()))
                })?;
            s
        } else if let Some(path) = &self.cred_file {
            warn_if_shared(path);
            let f = std::fs::File::open(path).map_err(|e| {
                CliError::local(format!(
                    "cannot read credential file {}: {}",
                    path.display(),
                    e.kind()
                ))
            })?;
            let mut s = String::new();
            f.take(MAX_INPUT_BYTES + 1)
                .read_to_string(&mut s)
                .map_err(|e| {
                    CliError::local(format!(
                        "cannot read credential file {}: {}",
                        path.display(),
                        e.kind()
                    ))
                })?;
            s
        } else if let Some(var) = &self.cred_env {
            match std::env::var(var) {
                Ok(s) => s,
                Err(std::env::VarError::NotPresent) => {
                    return Err(CliError::usage(format!(
                        "environment variable {var} is not set"
                    )));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(CliError::local(format!(
                        "environment variable {var} is not UTF-8"
                    )));
                }
            }
        } else {
            return Ok(None);
        };
        if raw.len() as u64 > MAX_INPUT_BYTES {
            return Err(CliError::local(format!(
                "credential input is longer than {MAX_INPUT_BYTES} bytes"
            )));
        }
        parse(&raw).map(Some)
    }
}

#[cfg(unix)]
fn warn_if_shared(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        eprintln!(
            "warning: credential file {} is readable by other users (chmod 600 it)",
            path.display()
        );
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &std::path::Path) {}

/// Parses `key=value` lines. Values are kept verbatim after the first `=` (only a trailing
/// `\r` is dropped), since secrets may legitimately contain spaces or `=`.
pub fn parse(raw: &str) -> CliResult<BTreeMap<String, Secret>> {
    let mut out = BTreeMap::new();
    for (i, line) in raw.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(CliError::usage(format!(
                "credential input line {} is not key=value",
                i + 1
            )));
        };
        let k = k.trim();
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(CliError::usage(format!(
                "credential input line {} has an invalid key (letters, digits, _ and - only)",
                i + 1
            )));
        }
        if v.is_empty() {
            return Err(CliError::usage(format!("credential {k} is empty")));
        }
        if out.insert(k.to_owned(), Secret(v.to_owned())).is_some() {
            return Err(CliError::usage(format!("credential {k} is given twice")));
        }
    }
    if out.is_empty() {
        return Err(CliError::usage(
            "the credential input holds no key=value line",
        ));
    }
    Ok(out)
}

/// The write-only `credentials` object of a request body.
pub fn to_json(creds: &BTreeMap<String, Secret>) -> Value {
    Value::Object(
        creds
            .iter()
            .map(|(k, s)| (k.clone(), Value::String(s.0.clone())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_values_stay_verbatim() {
        let c = parse("# comment\n\nclient_secret=a b=c\r\n token = x\n").unwrap();
        assert_eq!(
            to_json(&c),
            serde_json::json!({"client_secret": "a b=c", "token": " x"})
        );
    }

    #[test]
    fn errors_never_quote_values() {
        for bad in [
            "no-equals-SECRETVALUE",
            "=SECRETVALUE",
            "bad key=SECRETVALUE",
            "a=SECRETVALUE\na=SECRETVALUE",
            "",
            "k=",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(!e.contains("SECRETVALUE"), "{e}");
        }
    }

    #[test]
    fn debug_redacts() {
        let c = parse("token=SECRETVALUE").unwrap();
        assert!(!format!("{c:?}").contains("SECRETVALUE"));
    }
}
