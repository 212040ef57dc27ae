//! A log of the requests a fixture upstream server answered, shared by every fixture
//! (Iceberg REST, Unity Catalog, Delta Sharing).
//!
//! Tests assert on evidence ("the provider sent `pageToken=...`", "exactly one token request
//! was made"), not on what the client claims it did. The log never holds a secret: credential
//! headers are recorded as their scheme plus `***`, and form bodies are recorded as field
//! names only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// One request as the fixture saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Upper-case HTTP method, e.g. `GET`.
    pub method: String,
    /// Percent-encoded path as received, e.g. `/v1/wh/namespaces/a%1Fb/tables`.
    pub path: String,
    /// Raw query string (without `?`), if any.
    pub raw_query: Option<String>,
    /// Decoded query parameters; a repeated key keeps its last value.
    pub query: BTreeMap<String, String>,
    /// Lower-case header names to values, secret-bearing values redacted to `scheme ***`.
    pub headers: BTreeMap<String, String>,
    /// The status the fixture answered, once known (`None` while the request is in flight).
    pub status: Option<u16>,
}

impl RecordedRequest {
    /// Builds a record from request parts, redacting secret-bearing headers.
    pub fn from_parts(method: &str, uri: &http::Uri, headers: &http::HeaderMap) -> Self {
        let raw_query = uri.query().map(str::to_owned);
        let query = raw_query
            .as_deref()
            .map(parse_query)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut recorded = BTreeMap::new();
        for (name, value) in headers {
            let name = name.as_str().to_ascii_lowercase();
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            let value = if is_secret_header(&name) {
                redact_header_value(&value)
            } else {
                value
            };
            recorded.insert(name, value);
        }
        Self {
            method: method.to_ascii_uppercase(),
            path: uri.path().to_owned(),
            raw_query,
            query,
            headers: recorded,
            status: None,
        }
    }

    /// The value of a header (lower-case name), redacted if it bears a secret.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The value of a decoded query parameter.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

/// Whether a header carries credential material and must not be recorded verbatim.
pub fn is_secret_header(lower_name: &str) -> bool {
    const EXACT: &[&str] = &[
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
    ];
    const PARTS: &[&str] = &[
        "token",
        "secret",
        "password",
        "credential",
        "api-key",
        "apikey",
    ];
    EXACT.contains(&lower_name) || PARTS.iter().any(|p| lower_name.contains(p))
}

/// Keeps the scheme word (`Bearer`, `AWS4-HMAC-SHA256`) so tests can assert which scheme was
/// used, and drops everything after it.
fn redact_header_value(value: &str) -> String {
    match value.split_once(' ') {
        Some((scheme, _)) if !scheme.is_empty() => format!("{scheme} ***"),
        _ => "***".to_owned(),
    }
}

/// Decodes an `application/x-www-form-urlencoded` string (query or form body).
pub fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Percent-decodes a form component (`+` is a space); invalid escapes are kept literally.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => match (hex_val(bytes[i + 1]), hex_val(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A shared, append-only log of answered requests. Cloning shares the log.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    inner: Arc<Mutex<Vec<RecordedRequest>>>,
}

impl RequestLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        // A panicking test thread must not hide the evidence from the others.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a record and returns its index (for [`RequestLog::set_status`]).
    pub fn record(&self, request: RecordedRequest) -> usize {
        let mut log = self.lock();
        log.push(request);
        log.len() - 1
    }

    /// Sets the answered status of the record at `index`.
    pub fn set_status(&self, index: usize, status: u16) {
        if let Some(r) = self.lock().get_mut(index) {
            r.status = Some(status);
        }
    }

    /// A snapshot of every record so far, in arrival order.
    pub fn entries(&self) -> Vec<RecordedRequest> {
        self.lock().clone()
    }

    /// Records matching a predicate.
    pub fn filter(&self, pred: impl Fn(&RecordedRequest) -> bool) -> Vec<RecordedRequest> {
        self.lock().iter().filter(|r| pred(r)).cloned().collect()
    }

    /// How many records have this method and a path ending with `path_suffix`.
    pub fn count(&self, method: &str, path_suffix: &str) -> usize {
        self.lock()
            .iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.path.ends_with(path_suffix))
            .count()
    }

    /// Total number of records.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every record (between phases of one test).
    pub fn clear(&self) {
        self.lock().clear();
    }
}

/// Axum middleware recording every request on arrival and its status on answer. Install with
/// `axum::middleware::from_fn_with_state(log.clone(), record_requests)`.
pub async fn record_requests(State(log): State<RequestLog>, req: Request, next: Next) -> Response {
    let record = RecordedRequest::from_parts(req.method().as_str(), req.uri(), req.headers());
    let index = log.record(record);
    let response = next.run(req).await;
    log.set_status(index, response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_credentials_but_keeps_scheme() {
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", "Bearer abc.def".parse().unwrap());
        headers.insert("x-amz-security-token", "sess".parse().unwrap());
        headers.insert(
            "x-iceberg-access-delegation",
            "vended-credentials".parse().unwrap(),
        );
        let uri: http::Uri = "/v1/ns?pageToken=a%20b&pageSize=1".parse().unwrap();
        let r = RecordedRequest::from_parts("get", &uri, &headers);
        assert_eq!(r.header("Authorization"), Some("Bearer ***"));
        assert_eq!(r.header("x-amz-security-token"), Some("***"));
        assert_eq!(
            r.header("x-iceberg-access-delegation"),
            Some("vended-credentials")
        );
        assert_eq!(r.query_param("pageToken"), Some("a b"));
        assert_eq!(r.method, "GET");
    }

    #[test]
    fn percent_decode_handles_unit_separator_and_bad_escapes() {
        assert_eq!(percent_decode("a%1Fb"), "a\u{1f}b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
