//! Profiles: where the API is, which token to send and which account to act in.
//!
//! The config file (`$FLOTILLA_CONFIG`, else `$XDG_CONFIG_HOME/flotilla/config.toml`, else
//! `~/.config/flotilla/config.toml`; a `.json` file is read as JSON) holds named profiles. A
//! profile names where the token comes from (`token_file` or `token_env`) rather than the token
//! itself, so the file can be shared or committed without leaking anything. Flags beat
//! environment variables, which beat the profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{CliError, CliResult};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The profile used when neither `--profile` nor `FLOTILLA_PROFILE` names one.
    #[serde(default)]
    pub default_profile: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub endpoint: Option<String>,
    /// A file holding the bearer token (e.g. the `operator-token` of `flotilla serve`).
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the bearer token.
    pub token_env: Option<String>,
    pub account: Option<String>,
}

/// What the command line and environment say, before the profile fills the gaps.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub profile: Option<String>,
    pub endpoint: Option<String>,
    /// `FLOTILLA_TOKEN`: never a flag, so the token stays out of the process arguments.
    pub token: Option<String>,
    pub token_file: Option<PathBuf>,
    pub account: Option<String>,
}

/// The settings a command runs with.
#[derive(Clone)]
pub struct Settings {
    pub endpoint: String,
    pub token: Option<String>,
    pub account: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("account", &self.account)
            .finish()
    }
}

pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:8080";

pub fn default_config_path() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("flotilla").join("config.toml"));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(".config/flotilla/config.toml"))
}

fn expand_home(p: &Path) -> PathBuf {
    if let Ok(rest) = p.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    p.to_path_buf()
}

pub fn parse_config(text: &str, path: &Path) -> CliResult<ConfigFile> {
    let is_json = path.extension().is_some_and(|e| e == "json");
    // Parser messages can quote the offending text, which could be a pasted token: report a
    // line number and the message with every double-quoted value redacted, never the source.
    if is_json {
        serde_json::from_str(text).map_err(|e| {
            CliError::local(format!(
                "config file {} (line {}): {}",
                path.display(),
                e.line(),
                redact_quoted(&e.to_string())
            ))
        })
    } else {
        toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
            CliError::local(format!(
                "config file {}{at}: {}",
                path.display(),
                redact_quoted(e.message().trim())
            ))
        })
    }
}

fn redact_quoted(msg: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in msg.chars() {
        if c == '"' {
            if !inside {
                out.push_str("\"…\"");
            }
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out
}

fn load_file(o: &Overrides) -> CliResult<ConfigFile> {
    let (path, explicit) = match &o.config {
        Some(p) => (expand_home(p), true),
        None => match default_config_path() {
            Some(p) => (p, false),
            None => return Ok(ConfigFile::default()),
        },
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_config(&text, &path),
        // The default location is optional; a file named on purpose must exist.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            Ok(ConfigFile::default())
        }
        Err(e) => Err(CliError::local(format!(
            "cannot read config file {}: {e}",
            path.display()
        ))),
    }
}

fn read_token_file(path: &Path) -> CliResult<String> {
    let path = expand_home(path);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::local(format!("cannot read token file {}: {e}", path.display())))?;
    let t = text.trim().to_owned();
    if t.is_empty() {
        return Err(CliError::local(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    Ok(t)
}

/// Merges flags and environment over the selected profile.
pub fn resolve(o: &Overrides) -> CliResult<Settings> {
    let file = load_file(o)?;
    let profile = match o.profile.as_ref().or(file.default_profile.as_ref()) {
        Some(name) => match file.profiles.get(name) {
            Some(p) => p.clone(),
            None => {
                return Err(CliError::usage(format!(
                    "no profile named {name:?} in the config file"
                )));
            }
        },
        None => file.profiles.get("default").cloned().unwrap_or_default(),
    };
    let endpoint = o
        .endpoint
        .clone()
        .or(profile.endpoint.clone())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    let token = if let Some(t) = o.token.clone().filter(|t| !t.is_empty()) {
        Some(t)
    } else if let Some(f) = &o.token_file {
        Some(read_token_file(f)?)
    } else if let Some(var) = &profile.token_env {
        match std::env::var(var) {
            Ok(t) if !t.is_empty() => Some(t),
            _ => {
                return Err(CliError::usage(format!(
                    "the profile reads its token from ${var}, which is not set"
                )));
            }
        }
    } else if let Some(f) = &profile.token_file {
        Some(read_token_file(f)?)
    } else {
        None
    };
    let account = o
        .account
        .clone()
        .filter(|a| !a.is_empty())
        .or(profile.account.clone());
    Ok(Settings {
        endpoint,
        token,
        account,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_profiles_parse_alike() {
        let toml_text = r#"
default_profile = "local"
[profiles.local]
endpoint = "http://127.0.0.1:8080"
token_file = "~/flotilla-data/operator-token"
account = "acme"
[profiles.prod]
endpoint = "https://api.example.com"
token_env = "PROD_TOKEN"
"#;
        let t = parse_config(toml_text, Path::new("c.toml")).unwrap();
        assert_eq!(t.default_profile.as_deref(), Some("local"));
        assert_eq!(t.profiles["prod"].token_env.as_deref(), Some("PROD_TOKEN"));
        let json_text = r#"{"profiles": {"local": {"endpoint": "http://x", "account": "acme"}}}"#;
        let j = parse_config(json_text, Path::new("c.json")).unwrap();
        assert_eq!(j.profiles["local"].account.as_deref(), Some("acme"));
    }

    #[test]
    fn an_inline_token_is_not_a_profile_field() {
        let text = "[profiles.p]\ntoken = \"abc\"\n";
        let json = r#"{"profiles": {"p": "abc"}}"#;
        let e = parse_config(json, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("abc"), "{e}");
        let e = parse_config(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("abc"), "{e}");
    }

    #[test]
    fn flags_beat_the_profile() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config.toml");
        let tok = dir.path().join("tok");
        std::fs::write(&tok, "file-token\n").unwrap();
        std::fs::write(
            &cfg,
            format!("default_profile = \"p\"\n[profiles.p]\nendpoint = \"http://profile\"\naccount = \"a1\"\ntoken_file = {:?}\n", tok),
        )
        .unwrap();
        let base = Overrides {
            config: Some(cfg.clone()),
            ..Overrides::default()
        };
        let s = resolve(&base).unwrap();
        assert_eq!(
            (
                s.endpoint.as_str(),
                s.token.as_deref(),
                s.account.as_deref()
            ),
            ("http://profile", Some("file-token"), Some("a1"))
        );
        let o = Overrides {
            endpoint: Some("http://flag".into()),
            token: Some("env-token".into()),
            account: Some("a2".into()),
            ..base.clone()
        };
        let s = resolve(&o).unwrap();
        assert_eq!(
            (
                s.endpoint.as_str(),
                s.token.as_deref(),
                s.account.as_deref()
            ),
            ("http://flag", Some("env-token"), Some("a2"))
        );
        let missing = Overrides {
            profile: Some("nope".into()),
            ..base
        };
        assert!(matches!(resolve(&missing), Err(CliError::Usage(_))));
    }
}
