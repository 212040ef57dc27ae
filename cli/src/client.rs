//! The HTTP side: one client, path building with proper escaping, the API's error shape, and
//! pagination.
//!
//! `--verbose` shows the method, the URL and the status of each request, never a request
//! body: integration bodies carry write-only credentials, and the safest rule is the one with
//! no exception.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use url::Url;

use crate::config::Settings;
use crate::error::{ApiFailure, CliError, CliResult};

/// Page size used when listing everything for name resolution. Not the documented maximum
/// of 1000: the server currently answers 500 to `page_size=1000` (it asks its store for one
/// more item than the page to detect the end, and the store refuses 1001).
const RESOLVE_PAGE_SIZE: u32 = 500;

/// Longest server text quoted back in an error when the body is not the API's error shape.
const MAX_QUOTED_BODY: usize = 300;

pub struct Api {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
    account: Option<String>,
    verbose: bool,
}

/// A successful answer: the JSON body (`Null` when empty); representations carry their etag
/// in the body.
#[derive(Debug)]
pub struct Answer {
    pub body: Value,
}

/// One request, built by the commands.
pub struct Req {
    pub method: Method,
    pub segments: Vec<String>,
    pub query: Vec<(String, String)>,
    pub body: Option<Value>,
    pub if_match: Option<String>,
    pub idempotency_key: Option<String>,
}

impl Req {
    pub fn new(method: Method, segments: Vec<String>) -> Self {
        Self {
            method,
            segments,
            query: Vec::new(),
            body: None,
            if_match: None,
            idempotency_key: None,
        }
    }
    pub fn get(segments: Vec<String>) -> Self {
        Self::new(Method::GET, segments)
    }
    pub fn body(mut self, v: Value) -> Self {
        self.body = Some(v);
        self
    }
    pub fn query(mut self, k: &str, v: impl Into<String>) -> Self {
        self.query.push((k.to_owned(), v.into()));
        self
    }
    pub fn query_opt(self, k: &str, v: Option<impl Into<String>>) -> Self {
        match v {
            Some(v) => self.query(k, v),
            None => self,
        }
    }
    pub fn if_match(mut self, etag: Option<&str>) -> Self {
        self.if_match = etag.map(normalize_etag);
        self
    }
    pub fn idempotency_key(mut self, k: Option<&str>) -> Self {
        self.idempotency_key = k.map(str::to_owned);
        self
    }
}

/// The API's etags are quoted strings (`"abc"`); an etag pasted without its quotes still works.
pub fn normalize_etag(e: &str) -> String {
    let e = e.trim();
    if e.starts_with('"') || e.starts_with("W/") || e == "*" {
        e.to_owned()
    } else {
        format!("\"{e}\"")
    }
}

impl Api {
    pub fn new(settings: &Settings, verbose: bool, timeout: Duration) -> CliResult<Self> {
        let mut base = Url::parse(&settings.endpoint).map_err(|e| {
            CliError::usage(format!(
                "endpoint {:?} is not a URL: {e}",
                settings.endpoint
            ))
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(CliError::usage(format!(
                "endpoint {:?} must be an http(s) URL",
                settings.endpoint
            )));
        }
        // A trailing slash would otherwise produce `//v1` once segments are pushed.
        if let Ok(mut segs) = base.path_segments_mut() {
            segs.pop_if_empty();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(timeout)
            .user_agent(concat!("flotilla-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::Transport(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            token: settings.token.clone(),
            account: settings.account.clone(),
            verbose,
        })
    }

    /// The account every account-scoped command acts in.
    pub fn account(&self) -> CliResult<&str> {
        self.account.as_deref().ok_or_else(|| {
            CliError::usage(
                "no account: pass --account, set FLOTILLA_ACCOUNT, or set `account` in the profile",
            )
        })
    }

    /// `["v1", "accounts", A, ...rest]`.
    pub fn acct(&self, rest: &[&str]) -> CliResult<Vec<String>> {
        let mut v = vec![
            "v1".to_owned(),
            "accounts".to_owned(),
            self.account()?.to_owned(),
        ];
        v.extend(rest.iter().map(|s| (*s).to_owned()));
        Ok(v)
    }

    pub fn url(&self, segments: &[String], query: &[(String, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut p) = url.path_segments_mut() {
            p.extend(segments.iter().map(String::as_str));
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        url
    }

    pub async fn send(&self, req: Req) -> CliResult<Answer> {
        let url = self.url(&req.segments, &req.query);
        let mut rb = self.http.request(req.method.clone(), url.clone());
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        if let Some(m) = &req.if_match {
            rb = rb.header("if-match", m);
        }
        if let Some(k) = &req.idempotency_key {
            rb = rb.header("idempotency-key", k);
        }
        if let Some(b) = &req.body {
            rb = rb.json(b);
        }
        let started = Instant::now();
        if self.verbose {
            eprintln!("> {} {}", req.method, url);
        }
        let resp = rb.send().await.map_err(|e| {
            CliError::Transport(format!("cannot reach {}: {}", self.base, error_chain(&e)))
        })?;
        let status = resp.status();
        if self.verbose {
            eprintln!("< {} ({} ms)", status, started.elapsed().as_millis());
        }
        let bytes = resp.bytes().await.map_err(|e| {
            CliError::Transport(format!("reading the answer of {url}: {}", error_chain(&e)))
        })?;
        if status.is_success() {
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).map_err(|_| {
                    CliError::Transport(format!(
                        "{url} answered {status} with a body that is not JSON"
                    ))
                })?
            };
            return Ok(Answer { body });
        }
        Err(failure(status, &bytes))
    }

    /// GET of a list route: one page, or every page with `all`.
    pub async fn list(&self, req: Req, page: &Paging) -> CliResult<Value> {
        let mut items = Vec::new();
        let mut token = page.page_token.clone();
        loop {
            let mut r = Req {
                segments: req.segments.clone(),
                query: req.query.clone(),
                ..Req::get(Vec::new())
            };
            if let Some(n) = page.page_size {
                r = r.query("page_size", n.to_string());
            }
            if let Some(t) = &token {
                r = r.query("page_token", t.clone());
            }
            let answer = self.send(r).await?;
            let page_items = answer
                .body
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| {
                    CliError::Transport("the server answered a list without `items`".to_owned())
                })?;
            items.extend(page_items);
            let next = answer
                .body
                .get("next_page_token")
                .and_then(Value::as_str)
                .map(str::to_owned);
            match next {
                Some(t) if page.all => {
                    if token.as_deref() == Some(t.as_str()) {
                        return Err(CliError::Transport(
                            "the server repeated a page token".to_owned(),
                        ));
                    }
                    token = Some(t);
                }
                other => {
                    return Ok(serde_json::json!({"items": items, "next_page_token": other}));
                }
            }
        }
    }

    /// Every item of a list route (for name resolution).
    pub async fn list_all(
        &self,
        segments: Vec<String>,
        query: Vec<(String, String)>,
    ) -> CliResult<Vec<Value>> {
        let req = Req {
            query,
            ..Req::get(segments)
        };
        let v = self
            .list(
                req,
                &Paging {
                    page_size: Some(RESOLVE_PAGE_SIZE),
                    page_token: None,
                    all: true,
                },
            )
            .await?;
        Ok(v.get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }
}

/// `--page-size`, `--page-token`, `--all`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Paging {
    /// Items per page (the server's default is 100, at most 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub page_size: Option<u32>,
    /// Continue a listing from this token (printed after a partial listing).
    #[arg(long, conflicts_with = "all")]
    pub page_token: Option<String>,
    /// Follow every page.
    #[arg(long)]
    pub all: bool,
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Reads the API's error shape; anything else becomes a bounded, control-free quote.
pub fn failure(status: StatusCode, bytes: &[u8]) -> CliError {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes)
        && let Some(e) = v.get("error")
    {
        let code = e
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("UNKNOWN")
            .to_owned();
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        return CliError::Api(ApiFailure {
            status: status.as_u16(),
            code: crate::sanitize::clean(&code),
            message: crate::sanitize::clean(&message),
            details: e.get("details").cloned().unwrap_or(Value::Null),
        });
    }
    let text: String = String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_QUOTED_BODY)
        .collect();
    CliError::Api(ApiFailure {
        status: status.as_u16(),
        code: format!("HTTP_{}", status.as_u16()),
        message: if text.trim().is_empty() {
            status.canonical_reason().unwrap_or("no reason").to_owned()
        } else {
            crate::sanitize::clean(text.trim())
        },
        details: Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(endpoint: &str) -> Api {
        let s = Settings {
            endpoint: endpoint.into(),
            token: None,
            account: Some("acme".into()),
        };
        Api::new(&s, false, Duration::from_secs(5)).unwrap()
    }

    #[test]
    fn segments_are_escaped() {
        let a = api("http://h:1/base/");
        let segs = a
            .acct(&["catalogs", "c1", "namespaces", "a.b\u{1f}c/d"])
            .unwrap();
        let url = a.url(&segs, &[("parent".into(), "x\u{1f}y".into())]);
        assert_eq!(
            url.as_str(),
            "http://h:1/base/v1/accounts/acme/catalogs/c1/namespaces/a.b%1Fc%2Fd?parent=x%1Fy"
        );
    }

    #[test]
    fn etags_get_their_quotes() {
        assert_eq!(normalize_etag("abc"), "\"abc\"");
        assert_eq!(normalize_etag("\"abc\""), "\"abc\"");
        assert_eq!(normalize_etag("W/\"abc\""), "W/\"abc\"");
    }

    #[test]
    fn error_bodies_are_read_or_quoted() {
        let e = failure(
            StatusCode::CONFLICT,
            br#"{"error":{"code":"ALREADY_EXISTS","message":"taken","details":{}}}"#,
        );
        assert_eq!(e.render(), "error: ALREADY_EXISTS: taken");
        assert_eq!(e.exit_code(), std::process::ExitCode::from(3));
        let e = failure(StatusCode::BAD_GATEWAY, b"<html>\x1b[31mbad</html>");
        assert!(
            e.render().starts_with("error: HTTP_502: "),
            "{}",
            e.render()
        );
        assert!(!e.render().contains('\x1b'));
        let e = failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"error":{"code":"INTERNAL","message":"oops","details":{"error_id":"e1"}}}"#,
        );
        assert_eq!(e.render(), "error: INTERNAL: oops (error_id e1)");
    }
}
