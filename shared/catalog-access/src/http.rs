//! HTTP hardening shared by every provider.
//!
//! Integration URIs are user input, so every upstream call is untrusted (docs/architecture.md
//! "Upstream calls are untrusted"):
//!
//! - [`AddressPolicy`] is enforced at *connect* time on the *resolved* addresses (a custom
//!   DNS resolver that resolves, then filters), on literal-IP hosts before sending, and on
//!   every redirect hop (scheme and host re-checked, at most [`HttpPolicy::max_redirects`]).
//!   Checking the URI once at configuration time would be defeated by DNS rebinding and by
//!   redirects to the metadata service.
//! - Connect and total timeouts; response bodies are streamed and cut at
//!   [`HttpPolicy::max_response_bytes`] (a `Protocol` error, never an allocation bomb).
//! - Upstream text in errors and logs is bounded ([`crate::error::BoundedText`]).
//! - Idempotent reads are retried with jittered exponential backoff, a bounded number of
//!   times.
//! - Throttling is honoured ([`HttpPolicy::max_retry_after`]): a `429`, or a `503` with
//!   `Retry-After` (seconds or an HTTP-date), is retried after the stated wait, or after the
//!   jittered backoff when none is stated. A stated wait longer than the cap is not waited
//!   out: the call fails at once with [`CatalogAccessError::Throttled`] carrying the hint, as
//!   it does when the attempts are spent, so the queue redelivers the work later. Those two
//!   answers say the request was refused before it was processed, so even a request sent
//!   once (the OAuth token POST: it only mints a token) is resent after them; nothing else
//!   resends it (a 5xx or a timeout leaves its outcome unknown). Waits go through the
//!   policy's [`Waiter`], so tests advance a manual clock instead of sleeping.
//! - Only idempotent reads follow redirects. A request sent once (the OAuth token POST,
//!   which carries the client secret) never does: a `307`/`308` would re-send its body,
//!   secret included, to whatever host the upstream names.
//! - A refusal by the policy is permanent ([`CatalogAccessError::Config`], never retried):
//!   the configured URI, or where it leads, is not allowed. Its message never names the
//!   address a name resolved to (that would make the policy an internal-DNS oracle). In strict
//!   mode a name that does not resolve is refused the same way.
//! - System proxies are ignored: a proxy would resolve names itself and bypass the policy.

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use flotilla_domain::clock::{Clock, ManualClock, SystemClock};
use futures::future::BoxFuture;
use rand::Rng;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::HeaderMap;
use url::{Host, Url};

use flotilla_telemetry::catalog;
use tracing::Instrument as _;

use crate::error::{BoundedText, CatalogAccessError, Result};
use crate::protocol::CatalogProtocol;

/// Which upstream addresses may be contacted.
///
/// Always refused, whatever the mode: unspecified (`0.0.0.0`, `::`), broadcast, multicast,
/// link-local (`169.254.0.0/16`, `fe80::/10`) and cloud metadata addresses
/// (`169.254.169.254`, `fd00:ec2::254`, `100.100.100.200`), including IPv4 addresses
/// embedded in IPv6 (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`).
///
/// Allowed only with `allow_insecure` (local mode, `flotilla serve`, tests): loopback,
/// private ranges (RFC 1918, CGNAT `100.64.0.0/10`, unique-local `fc00::/7`, benchmarking
/// and reserved ranges) and plain `http`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressPolicy {
    /// Permit loopback, private ranges and plain http.
    pub allow_insecure: bool,
}

/// An address or URL refused by [`AddressPolicy`]. Travels through reqwest's error chain
/// from the resolver and redirect policy so the caller can report it precisely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressRefused(String);

impl AddressRefused {
    /// A refusal for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }

    /// Why it was refused.
    pub fn reason(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused by address policy: {}", self.0)
    }
}

impl StdError for AddressRefused {}

const METADATA_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// How an address is classified by the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddressClass {
    Public,
    /// Loopback or private: allowed only when insecure.
    NonPublic(&'static str),
    /// Never allowed.
    Forbidden(&'static str),
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let o = ip.octets();
    if METADATA_V4.contains(&ip) {
        AddressClass::Forbidden("cloud metadata address")
    } else if ip.is_unspecified() || o[0] == 0 {
        AddressClass::Forbidden("unspecified address")
    } else if ip.is_broadcast() {
        AddressClass::Forbidden("broadcast address")
    } else if ip.is_multicast() {
        AddressClass::Forbidden("multicast address")
    } else if ip.is_link_local() {
        AddressClass::Forbidden("link-local address")
    } else if o[0] >= 240 {
        AddressClass::Forbidden("reserved address")
    } else if ip.is_loopback() {
        AddressClass::NonPublic("loopback address")
    } else if ip.is_private() {
        AddressClass::NonPublic("private address")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        AddressClass::NonPublic("shared (CGNAT) address")
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        AddressClass::NonPublic("benchmarking address")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        AddressClass::NonPublic("IETF protocol assignment address")
    } else {
        AddressClass::Public
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let seg = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    // IPv4-compatible (deprecated `::a.b.c.d`, RFC 4291 2.5.5.1): some stacks still route it
    // to the embedded IPv4 address. `::` and `::1` are classified below as themselves.
    if seg[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback() {
        let o = ip.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    // NAT64 well-known prefix embeds an IPv4 address in the last 32 bits.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let o = ip.octets();
        return classify_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if ip == METADATA_V6 {
        AddressClass::Forbidden("cloud metadata address")
    } else if ip.is_unspecified() {
        AddressClass::Forbidden("unspecified address")
    } else if ip.is_multicast() {
        AddressClass::Forbidden("multicast address")
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        AddressClass::Forbidden("link-local address")
    } else if ip.is_loopback() {
        AddressClass::NonPublic("loopback address")
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        AddressClass::NonPublic("unique-local address")
    } else if (seg[0] & 0xffc0) == 0xfec0 {
        AddressClass::NonPublic("site-local address")
    } else {
        AddressClass::Public
    }
}

impl AddressPolicy {
    /// Production policy: public https only.
    pub fn strict() -> Self {
        Self {
            allow_insecure: false,
        }
    }

    /// Local-mode policy: loopback, private ranges and plain http allowed; link-local and
    /// metadata addresses still refused.
    pub fn insecure() -> Self {
        Self {
            allow_insecure: true,
        }
    }

    /// Checks one resolved or literal address.
    pub fn check_ip(&self, ip: IpAddr) -> std::result::Result<(), AddressRefused> {
        let class = match ip {
            IpAddr::V4(v4) => classify_v4(v4),
            IpAddr::V6(v6) => classify_v6(v6),
        };
        match class {
            AddressClass::Public => Ok(()),
            AddressClass::NonPublic(_) if self.allow_insecure => Ok(()),
            AddressClass::NonPublic(what) => Err(AddressRefused(format!(
                "{ip} is a {what}; only allowed in local (insecure) mode"
            ))),
            AddressClass::Forbidden(what) => {
                Err(AddressRefused(format!("{ip} is a {what}; never contacted")))
            }
        }
    }

    /// Checks a URL's scheme and, for a literal-IP host, the address. Named hosts are
    /// checked when resolved (see [`PolicyResolver`]).
    pub fn check_url(&self, url: &Url) -> std::result::Result<(), AddressRefused> {
        match url.scheme() {
            "https" => {}
            "http" if self.allow_insecure => {}
            "http" => {
                return Err(AddressRefused(
                    "plain http is only allowed in local (insecure) mode".to_owned(),
                ));
            }
            other => return Err(AddressRefused(format!("scheme `{other}` is not http(s)"))),
        }
        match url.host() {
            Some(Host::Ipv4(v4)) => self.check_ip(IpAddr::V4(v4)),
            Some(Host::Ipv6(v6)) => self.check_ip(IpAddr::V6(v6)),
            Some(Host::Domain(d)) if !d.is_empty() => Ok(()),
            _ => Err(AddressRefused("URL has no host".to_owned())),
        }
    }
}

/// Retry policy for idempotent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first (1 = no retry).
    pub max_attempts: u32,
    /// Backoff base; attempt `n` waits a random time in `[d/2, d]`, `d = base * 2^(n-1)`.
    pub base_delay: Duration,
    /// Cap on one backoff wait (and on an honoured `Retry-After`).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(3),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The jittered wait before attempt `attempt + 1` (`attempt` starts at 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let ceiling = exp.min(self.max_delay);
        let floor = ceiling / 2;
        if ceiling <= floor {
            return ceiling;
        }
        rand::rng().random_range(floor..=ceiling)
    }
}

/// Waits between attempts, and what time it is (for `Retry-After` HTTP-dates).
pub trait Sleep: Send + Sync + fmt::Debug {
    /// Waits `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()>;
}

/// Sleeps on the tokio timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleep;

impl Sleep for TokioSleep {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A sleeper for tests: returns at once, moving a [`ManualClock`] forward by the wait and
/// recording it, so "retried after the stated 7 s" is checked without waiting 7 s.
#[derive(Debug, Clone)]
pub struct AdvancingSleep {
    clock: ManualClock,
    waits: Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl AdvancingSleep {
    /// A sleeper advancing `clock`.
    pub fn new(clock: ManualClock) -> Self {
        Self {
            clock,
            waits: Arc::default(),
        }
    }

    /// Every wait asked for so far, in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Sleep for AdvancingSleep {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(d);
        self.clock.advance(d);
        Box::pin(std::future::ready(()))
    }
}

/// How a client waits between attempts, and the clock an HTTP-date `Retry-After` is read
/// against. Two waiters are equal when they share their sleeper and clock.
#[derive(Clone)]
pub struct Waiter {
    sleep: Arc<dyn Sleep>,
    clock: Arc<dyn Clock>,
}

impl Waiter {
    /// A waiter with this sleeper and clock.
    pub fn new(sleep: Arc<dyn Sleep>, clock: Arc<dyn Clock>) -> Self {
        Self { sleep, clock }
    }

    /// The test waiter: waits advance `clock` (see [`AdvancingSleep`]), which is also the
    /// clock dates are read against. Answers the sleeper, to read the waits back.
    pub fn advancing(clock: &ManualClock) -> (Self, AdvancingSleep) {
        let sleep = AdvancingSleep::new(clock.clone());
        (
            Self::new(Arc::new(sleep.clone()), Arc::new(clock.clone())),
            sleep,
        )
    }

    /// Waits `d`.
    pub async fn sleep(&self, d: Duration) {
        self.sleep.sleep(d).await;
    }

    /// The current time.
    pub fn now(&self) -> std::time::SystemTime {
        self.clock.now()
    }
}

impl Default for Waiter {
    fn default() -> Self {
        Self::new(Arc::new(TokioSleep), Arc::new(SystemClock))
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("sleep", &self.sleep)
            .field("clock", &self.clock)
            .finish()
    }
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.sleep, &other.sleep) && Arc::ptr_eq(&self.clock, &other.clock)
    }
}

impl Eq for Waiter {}

/// The longest `Retry-After` a call waits out by default.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// The longest retry-after hint an error carries (an upstream asking for more is asked
/// again after this long).
pub const MAX_RETRY_AFTER_HINT: Duration = Duration::from_secs(3600);

/// The hardening applied to every upstream call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Which addresses may be contacted.
    pub address: AddressPolicy,
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Total time for one attempt, body included.
    pub request_timeout: Duration,
    /// Largest response body accepted; larger bodies are a `Protocol` error.
    pub max_response_bytes: usize,
    /// Redirect hops followed (each re-checked).
    pub max_redirects: usize,
    /// Retries for idempotent reads (and, after throttling, for requests sent once).
    pub retry: RetryPolicy,
    /// The longest `Retry-After` of a throttled answer (429, 503) a call waits out; a
    /// longer one fails the call at once with [`CatalogAccessError::Throttled`].
    pub max_retry_after: Duration,
    /// How the client waits between attempts (tests inject a manual clock).
    pub waiter: Waiter,
    /// Names resolved to fixed addresses before asking the system resolver. The address
    /// policy still applies to them: this is a test seam for DNS answers (e.g. a name that
    /// resolves to the metadata address), not a bypass.
    pub static_hosts: BTreeMap<String, Vec<IpAddr>>,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self {
            address: AddressPolicy::strict(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_response_bytes: 16 * 1024 * 1024,
            max_redirects: 5,
            retry: RetryPolicy::default(),
            max_retry_after: MAX_RETRY_AFTER,
            waiter: Waiter::default(),
            static_hosts: BTreeMap::new(),
        }
    }
}

impl HttpPolicy {
    /// Local-mode defaults: insecure addresses allowed.
    pub fn local() -> Self {
        Self {
            address: AddressPolicy::insecure(),
            ..Self::default()
        }
    }
}

/// A resolver that resolves, then drops every address the policy refuses; when nothing is
/// left the connection fails with [`AddressRefused`]. Because hyper connects only to the
/// addresses returned here, DNS rebinding between a check and the connect is impossible.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    policy: AddressPolicy,
    static_hosts: Arc<BTreeMap<String, Vec<IpAddr>>>,
}

impl PolicyResolver {
    /// A resolver enforcing `policy`, answering `static_hosts` names without DNS.
    pub fn new(policy: AddressPolicy, static_hosts: BTreeMap<String, Vec<IpAddr>>) -> Self {
        Self {
            policy,
            static_hosts: Arc::new(static_hosts),
        }
    }

    /// Resolves `host` and filters by policy.
    pub async fn resolve_host(
        &self,
        host: &str,
    ) -> std::result::Result<Vec<SocketAddr>, Box<dyn StdError + Send + Sync>> {
        let key = host.to_ascii_lowercase();
        let candidates: Vec<SocketAddr> = match self.static_hosts.get(&key) {
            Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, 0)).collect(),
            None => match tokio::net::lookup_host((host, 0)).await {
                Ok(addrs) => addrs.collect(),
                // Strict mode: a production upstream is a public name; one that does not
                // resolve is a configuration error, not an outage to retry.
                Err(_) if !self.policy.allow_insecure => {
                    let host: String = host.chars().take(128).collect();
                    return Err(Box::new(AddressRefused(format!(
                        "host `{host}` cannot be resolved"
                    ))));
                }
                Err(e) => return Err(Box::new(e)),
            },
        };
        filter_addrs(self.policy, host, candidates).map_err(|e| Box::new(e) as _)
    }
}

/// Keeps the allowed addresses; refuses when none is left.
fn filter_addrs(
    policy: AddressPolicy,
    host: &str,
    candidates: Vec<SocketAddr>,
) -> std::result::Result<Vec<SocketAddr>, AddressRefused> {
    let mut first_refusal = None;
    let mut allowed = Vec::new();
    for addr in candidates {
        match policy.check_ip(addr.ip()) {
            Ok(()) => allowed.push(addr),
            Err(e) => {
                first_refusal.get_or_insert(e);
            }
        }
    }
    if allowed.is_empty() {
        // Never the address nor its class: what an internal name resolves to is not the
        // caller's business (an internal-DNS oracle otherwise).
        let host: String = host.chars().take(128).collect();
        return Err(match first_refusal {
            Some(_) => AddressRefused(format!(
                "host `{host}` resolves to an address that is not allowed"
            )),
            None => AddressRefused(format!("host `{host}` resolves to no address")),
        });
    }
    Ok(allowed)
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.resolve_host(&host).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Whether a failed request may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    /// An idempotent read (GET/HEAD): retried on 5xx, 429, timeouts and connect errors.
    IdempotentRead,
    /// Sent once (e.g. the OAuth token POST): resent only after a throttled answer (429, or
    /// 503 with `Retry-After`), which says the request was not processed.
    Once,
}

/// A fully read, size-capped response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body, at most [`HttpPolicy::max_response_bytes`].
    pub body: Bytes,
    /// The wait a throttled answer (429, or 503) asked for in its `Retry-After`, read
    /// against the policy's clock (an HTTP-date in the past is zero).
    pub retry_after: Option<Duration>,
}

impl HttpResponse {
    /// A header value as text, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Ok` for a `200` answer; any other status classified (see [`classify_status`]) as the
    /// failure of `action`.
    pub fn ensure_ok(&self, action: &str) -> Result<()> {
        if self.status == 200 {
            Ok(())
        } else {
            Err(classify_status(self, action))
        }
    }

    /// The JSON body of a `200` answer: [`HttpResponse::ensure_ok`], then
    /// [`HttpResponse::json_value`].
    pub fn ok_json(&self, action: &str) -> Result<serde_json::Value> {
        self.ensure_ok(action)?;
        self.json_value()
    }

    /// Parses the body as JSON; malformed JSON is a `Protocol` error on `<body>`.
    pub fn json_value(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).map_err(|e| {
            CatalogAccessError::protocol(
                "<body>",
                format!(
                    "malformed JSON (HTTP {}): {} at line {} column {}",
                    self.status,
                    classify_serde(&e),
                    e.line(),
                    e.column()
                ),
            )
        })
    }

    /// The upstream's error message, bounded: Iceberg `{"error":{"message"}}`, Unity /
    /// Databricks `{"error_code","message"}`, or the raw text.
    pub fn upstream_message(&self) -> BoundedText {
        upstream_message(&self.body)
    }
}

fn classify_serde(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "read error",
        Category::Syntax => "syntax error",
        Category::Data => "unexpected data",
        Category::Eof => "truncated document",
    }
}

/// Extracts a bounded error message from an upstream error body.
pub fn upstream_message(body: &[u8]) -> BoundedText {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let msg = v
            .pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error_description"))
            .or_else(|| v.get("error"))
            .and_then(serde_json::Value::as_str);
        if let Some(m) = msg {
            return BoundedText::new(m);
        }
    }
    let cut = &body[..body.len().min(1024)];
    BoundedText::new(&String::from_utf8_lossy(cut))
}

/// Maps a non-success status to a typed error, the default for every endpoint: providers
/// handle endpoint-specific statuses (304, 204, ...) before calling this.
pub fn classify_status(response: &HttpResponse, what: &str) -> CatalogAccessError {
    let detail = BoundedText::new(&format!("{what}: {}", response.upstream_message()));
    match response.status {
        401 | 403 | 419 => CatalogAccessError::Authentication {
            status: Some(response.status),
            detail,
        },
        404 => CatalogAccessError::NotFound(detail),
        429 | 503 if response.retry_after.is_some() => CatalogAccessError::Throttled {
            status: response.status,
            retry_after: response
                .retry_after
                .unwrap_or_default()
                .min(MAX_RETRY_AFTER_HINT),
            detail,
        },
        408 | 429 | 500..=599 => CatalogAccessError::Retryable {
            status: Some(response.status),
            detail,
        },
        status => CatalogAccessError::UnexpectedStatus { status, detail },
    }
}

fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// Upstream HTTP requests sent, per catalog protocol, for the whole process
/// (`flotilla_upstream_requests_total` on `/v1/admin/metrics`).
///
/// Process-wide on purpose: clients are built per integration and per call, while the
/// metric answers "what did reconciliations and validations cost upstream" for the host.
/// Every attempt that reaches the network counts (retries included); a request refused by
/// the address policy before sending does not. The only label is the protocol, never an
/// integration id or a URI.
///
/// The family is defined in `flotilla_telemetry::catalog` (with the per-status
/// `flotilla_upstream_responses_total` and the latency timing recorded next to it), so it
/// also reaches CloudWatch from the Lambda functions.
#[derive(Debug, Default)]
pub struct UpstreamRequestCounters;

static UPSTREAM_REQUESTS: UpstreamRequestCounters = UpstreamRequestCounters;

/// The process-wide upstream request counters.
pub fn upstream_requests() -> &'static UpstreamRequestCounters {
    &UPSTREAM_REQUESTS
}

/// The `protocol` label (and CloudWatch `IntegrationType`) of a protocol.
pub fn protocol_label(protocol: CatalogProtocol) -> &'static str {
    match protocol {
        CatalogProtocol::IcebergRest => "iceberg_rest",
        CatalogProtocol::Unity => "unity",
        CatalogProtocol::DeltaSharing => "delta_sharing",
    }
}

impl UpstreamRequestCounters {
    /// Counts one request sent to an upstream of `protocol`.
    pub fn record(&self, protocol: CatalogProtocol) {
        catalog::UPSTREAM_REQUESTS.inc(&[protocol_label(protocol)]);
    }

    /// Requests sent so far to upstreams of `protocol`.
    pub fn get(&self, protocol: CatalogProtocol) -> u64 {
        flotilla_telemetry::global()
            .counter(&catalog::UPSTREAM_REQUESTS, &[protocol_label(protocol)])
    }

    /// Prometheus text for the counter family; every protocol appears, even at 0, so a
    /// scrape can tell "no traffic" from "not wired".
    pub fn render_prometheus(&self) -> String {
        flotilla_telemetry::prometheus::render(&[&flotilla_telemetry::Only(
            &catalog::UPSTREAM_REQUESTS,
        )])
    }
}

/// Whether an answer is throttling: 429, or 503 with a `Retry-After`.
fn is_throttled(status: u16, headers: &HeaderMap) -> bool {
    status == 429 || (status == 503 && headers.contains_key(reqwest::header::RETRY_AFTER))
}

/// Records the end of one attempt: its status class (`error` without an HTTP status) and
/// latency, under the protocol's labels.
fn record_attempt(protocol: CatalogProtocol, status: Option<u16>, started: std::time::Instant) {
    let label = protocol_label(protocol);
    let class = status.map_or("error", flotilla_telemetry::status_class);
    catalog::UPSTREAM_RESPONSES.inc(&[label, class]);
    catalog::UPSTREAM_LATENCY.observe(&[label], started.elapsed());
}

/// Whether a [`policy_client`] follows redirects (each hop re-checked by the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redirects {
    Follow,
    Refuse,
}

/// The timeouts of a [`policy_client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub request: Duration,
}

impl Timeouts {
    pub(crate) fn of(policy: &HttpPolicy) -> Self {
        Self {
            connect: policy.connect_timeout,
            request: policy.request_timeout,
        }
    }
}

/// A reqwest client under `policy`: the [`PolicyResolver`] (every named host checked after
/// resolution), literal hosts and schemes checked on every redirect hop, plain http only
/// when insecure, no system proxy. Every connection to an upstream (catalog calls, object
/// storage, presigned URLs) is made by a client built here.
pub(crate) fn policy_client(
    policy: &HttpPolicy,
    redirects: Redirects,
    timeouts: Timeouts,
) -> Result<reqwest::Client> {
    let address = policy.address;
    let max_redirects = policy.max_redirects;
    let redirect = match redirects {
        Redirects::Refuse => reqwest::redirect::Policy::none(),
        Redirects::Follow => reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(AddressRefused(format!(
                    "more than {max_redirects} redirects"
                )));
            }
            match address.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        }),
    };
    reqwest::Client::builder()
        .no_proxy()
        .redirect(redirect)
        .connect_timeout(timeouts.connect)
        .timeout(timeouts.request)
        .https_only(!policy.address.allow_insecure)
        .dns_resolver(PolicyResolver::new(
            policy.address,
            policy.static_hosts.clone(),
        ))
        .user_agent(concat!(
            "flotilla-catalog-access/",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
        .map_err(|e| {
            CatalogAccessError::config(format!("cannot build HTTP client: {}", error_chain(&e)))
        })
}

/// The hardened HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    /// The same client without redirects, for requests sent once ([`RetryMode::Once`]).
    no_redirect: reqwest::Client,
    policy: Arc<HttpPolicy>,
    /// The protocol whose counter every sent request advances (none for ad-hoc clients).
    protocol: Option<CatalogProtocol>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("policy", &self.policy)
            .finish()
    }
}

impl HttpClient {
    /// Builds a client enforcing `policy`.
    pub fn new(policy: HttpPolicy) -> Result<Self> {
        let client = policy_client(&policy, Redirects::Follow, Timeouts::of(&policy))?;
        let no_redirect = policy_client(&policy, Redirects::Refuse, Timeouts::of(&policy))?;
        Ok(Self {
            client,
            no_redirect,
            policy: Arc::new(policy),
            protocol: None,
        })
    }

    /// Counts every request this client sends under `protocol` in
    /// [`upstream_requests`]. Providers set it on the client they build in `connect`.
    pub fn for_protocol(mut self, protocol: CatalogProtocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The policy in force.
    pub fn policy(&self) -> &HttpPolicy {
        &self.policy
    }

    /// Starts a request on the hardened client.
    pub fn request(&self, method: reqwest::Method, url: Url) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }

    /// Sends a request under the policy: checks the URL, retries idempotent reads, caps the
    /// body. Statuses are returned as-is (use [`classify_status`]) except that a retryable
    /// status still present after the last attempt is returned too, for the caller to map.
    pub async fn execute(
        &self,
        request: reqwest::Request,
        mode: RetryMode,
    ) -> Result<HttpResponse> {
        // One span per upstream call (retries inside it); no URL, host or credential.
        let span = tracing::info_span!(
            "upstream",
            protocol = self.protocol.map_or("none", protocol_label),
            method = %request.method(),
            status = tracing::field::Empty,
        );
        let result = self
            .execute_attempts(request, mode)
            .instrument(span.clone())
            .await;
        if let Ok(r) = &result {
            span.record("status", r.status);
        }
        result
    }

    async fn execute_attempts(
        &self,
        request: reqwest::Request,
        mode: RetryMode,
    ) -> Result<HttpResponse> {
        self.policy
            .address
            .check_url(request.url())
            .map_err(|e| CatalogAccessError::Config(BoundedText::new(&e.to_string())))?;
        let client = match mode {
            RetryMode::IdempotentRead => &self.client,
            RetryMode::Once => &self.no_redirect,
        };
        // A request sent once may still be resent after throttling (see the module docs).
        let max_attempts = self.policy.retry.max_attempts.max(1);
        let waiter = &self.policy.waiter;
        let method = request.method().clone();
        let path = request.url().path().to_owned();
        let mut pending = Some(request);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let Some(current) = pending.take() else {
                return Err(CatalogAccessError::Connection(BoundedText::new(
                    "request could not be retried",
                )));
            };
            let last = attempt >= max_attempts;
            if !last {
                pending = current.try_clone();
            }
            // Only a throttled answer resends a request sent once.
            let resend_on_failure = mode == RetryMode::IdempotentRead;
            if let Some(protocol) = self.protocol {
                UPSTREAM_REQUESTS.record(protocol);
            }
            let started = std::time::Instant::now();
            let sent = client.execute(current).await;
            if let Some(protocol) = self.protocol {
                let status = sent.as_ref().ok().map(|r| r.status().as_u16());
                record_attempt(protocol, status, started);
            }
            let outcome = match sent {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    if mode == RetryMode::Once && resp.status().is_redirection() {
                        // Not followed, and not handed to the caller as an answer either.
                        return Err(CatalogAccessError::Config(BoundedText::ours(&format!(
                            "the endpoint answered a redirect (HTTP {status}); requests that carry credentials in their body never follow redirects"
                        ))));
                    }
                    if is_throttled(status, resp.headers()) {
                        if let Some(protocol) = self.protocol {
                            catalog::UPSTREAM_THROTTLED.inc(&[protocol_label(protocol)]);
                        }
                        let stated = retry_after(resp.headers(), waiter.now());
                        let too_long = stated.is_some_and(|s| s > self.policy.max_retry_after);
                        if !last && pending.is_some() && !too_long {
                            let wait = stated.unwrap_or_else(|| self.policy.retry.backoff(attempt));
                            tracing::debug!(%method, path = %bounded(&path), status, attempt, wait_ms = wait.as_millis() as u64, "upstream throttled; retrying after its Retry-After");
                            waiter.sleep(wait).await;
                            continue;
                        }
                        tracing::debug!(%method, path = %bounded(&path), status, attempt, "upstream throttled; giving up for now");
                        return self.read_body(resp, stated).await;
                    }
                    if resend_on_failure
                        && !last
                        && pending.is_some()
                        && is_retryable_status(status)
                    {
                        let wait = retry_after(resp.headers(), waiter.now())
                            .map(|d| d.min(self.policy.retry.max_delay))
                            .unwrap_or_else(|| self.policy.retry.backoff(attempt));
                        tracing::debug!(%method, path = %bounded(&path), status, attempt, "retrying upstream read");
                        waiter.sleep(wait).await;
                        continue;
                    }
                    self.read_body(resp, None).await
                }
                Err(e) => Err(map_reqwest_error(e)),
            };
            match outcome {
                Err(e) if resend_on_failure && !last && pending.is_some() && transient(&e) => {
                    tracing::debug!(%method, path = %bounded(&path), attempt, error = %e, "retrying upstream read");
                    waiter.sleep(self.policy.retry.backoff(attempt)).await;
                }
                other => {
                    if let Ok(r) = &other {
                        tracing::debug!(%method, path = %bounded(&path), status = r.status, attempt, "upstream answered");
                    }
                    return other;
                }
            }
        }
    }

    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        retry_after: Option<Duration>,
    ) -> Result<HttpResponse> {
        let max = self.policy.max_response_bytes;
        let status = resp.status().as_u16();
        let too_big = || {
            CatalogAccessError::protocol(
                "<body>",
                format!("response body exceeds the {max}-byte limit"),
            )
        };
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_big());
        }
        let headers = resp.headers().clone();
        let mut body = BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(map_reqwest_error)? {
            if body.len() + chunk.len() > max {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse {
            status,
            headers,
            body: body.freeze(),
            retry_after,
        })
    }
}

fn bounded(s: &str) -> BoundedText {
    BoundedText::new(s)
}

/// Transient transport failures worth retrying (a refused address never is: it is a
/// `Config` error).
fn transient(e: &CatalogAccessError) -> bool {
    matches!(
        e,
        CatalogAccessError::Retryable { .. } | CatalogAccessError::Connection(_)
    )
}

/// The wait a `Retry-After` header states: delay-seconds, or an HTTP-date read against
/// `now` (a date in the past is no wait). `None` when absent or unreadable.
fn retry_after(headers: &HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    let raw = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = raw.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(raw).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Renders an error and its sources on one line (reqwest hides the cause in `source()`).
fn error_chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// The [`AddressRefused`] anywhere in an error's source chain: how a caller whose client
/// wraps the transport error (an object store) tells a refusal by the policy from an outage.
pub fn find_refusal<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a AddressRefused> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<AddressRefused>() {
            return Some(r);
        }
        cur = err.source();
    }
    None
}

fn map_reqwest_error(e: reqwest::Error) -> CatalogAccessError {
    let e = e.without_url();
    if let Some(refusal) = find_refusal(&e) {
        return CatalogAccessError::Config(BoundedText::new(&refusal.to_string()));
    }
    let text = error_chain(&e);
    if e.is_timeout() {
        CatalogAccessError::Retryable {
            status: None,
            detail: BoundedText::new(&format!("timed out: {text}")),
        }
    } else if e.is_redirect() {
        CatalogAccessError::Connection(BoundedText::new(&format!("redirect refused: {text}")))
    } else if e.is_body() || e.is_decode() {
        CatalogAccessError::Retryable {
            status: None,
            detail: BoundedText::new(&format!("response interrupted: {text}")),
        }
    } else {
        CatalogAccessError::Connection(BoundedText::new(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_refused_even_when_insecure() {
        for mode in [AddressPolicy::strict(), AddressPolicy::insecure()] {
            for bad in [
                "169.254.169.254",
                "169.254.1.1",
                "100.100.100.200",
                "fd00:ec2::254",
                "fe80::1",
                "0.0.0.0",
                "::",
                "224.0.0.1",
                "ff02::1",
                "255.255.255.255",
                "::ffff:169.254.169.254",
                "64:ff9b::a9fe:a9fe",
                "::169.254.169.254",
                "::a9fe:a9fe",
                "::100.100.100.200",
            ] {
                assert!(mode.check_ip(ip(bad)).is_err(), "{bad} allowed in {mode:?}");
            }
        }
    }

    #[test]
    fn private_ranges_need_insecure_mode() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd12::1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::10.0.0.1",
        ] {
            assert!(
                AddressPolicy::strict().check_ip(ip(private)).is_err(),
                "{private}"
            );
            assert!(
                AddressPolicy::insecure().check_ip(ip(private)).is_ok(),
                "{private}"
            );
        }
        assert!(AddressPolicy::strict().check_ip(ip("8.8.8.8")).is_ok());
        assert!(
            AddressPolicy::strict()
                .check_ip(ip("2606:4700::1111"))
                .is_ok()
        );
    }

    #[test]
    fn urls_are_checked_for_scheme_and_literal_hosts() {
        let strict = AddressPolicy::strict();
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(strict.check_url(&u("http://example.com/")).is_err());
        assert!(strict.check_url(&u("https://example.com/")).is_ok());
        assert!(strict.check_url(&u("https://169.254.169.254/")).is_err());
        assert!(strict.check_url(&u("https://[fd00:ec2::254]/")).is_err());
        assert!(strict.check_url(&u("https://10.0.0.1/")).is_err());
        let insecure = AddressPolicy::insecure();
        assert!(insecure.check_url(&u("http://127.0.0.1:8181/")).is_ok());
        assert!(insecure.check_url(&u("http://169.254.169.254/")).is_err());
        assert!(insecure.check_url(&u("file:///etc/passwd")).is_err());
    }

    #[tokio::test]
    async fn resolver_filters_names_resolving_to_forbidden_addresses() {
        let hosts = BTreeMap::from([
            ("metadata.evil.test".to_owned(), vec![ip("169.254.169.254")]),
            ("private.evil.test".to_owned(), vec![ip("10.0.0.7")]),
            (
                "mixed.test".to_owned(),
                vec![ip("10.0.0.7"), ip("93.184.216.34")],
            ),
        ]);
        let strict = PolicyResolver::new(AddressPolicy::strict(), hosts.clone());
        // Refused without naming the address or its class (no internal-DNS oracle).
        for (host, ip) in [
            ("metadata.evil.test", "169.254.169.254"),
            ("private.evil.test", "10.0.0.7"),
        ] {
            let e = strict.resolve_host(host).await.unwrap_err().to_string();
            assert!(e.contains("not allowed"), "{e}");
            let e = e.replace(host, "<host>");
            for leak in [ip, "metadata", "private", "loopback", "link-local"] {
                assert!(!e.contains(leak), "{host}: {e}");
            }
        }
        // Strict mode: a name that does not resolve is a permanent refusal.
        let e = strict
            .resolve_host("no-such-host.invalid")
            .await
            .unwrap_err();
        assert!(e.downcast_ref::<AddressRefused>().is_some(), "{e}");
        let mixed = strict.resolve_host("mixed.test").await.unwrap();
        assert_eq!(mixed, vec![SocketAddr::new(ip("93.184.216.34"), 0)]);
        // `localhost` resolves (through the system resolver) to loopback only.
        assert!(strict.resolve_host("localhost").await.is_err());
        let insecure = PolicyResolver::new(AddressPolicy::insecure(), hosts);
        assert!(insecure.resolve_host("private.evil.test").await.is_ok());
        assert!(insecure.resolve_host("metadata.evil.test").await.is_err());
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert("retry-after", v.parse().unwrap());
            m
        };
        assert_eq!(retry_after(&h("7"), now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&h(" 0 "), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&h("Sun, 06 Nov 1994 08:50:37 GMT"), now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            retry_after(&h("Sun, 06 Nov 1994 08:00:00 GMT"), now),
            Some(Duration::ZERO),
            "a date in the past is no wait"
        );
        assert_eq!(retry_after(&h("soon"), now), None);
        assert_eq!(retry_after(&h("-3"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
        assert!(is_throttled(429, &HeaderMap::new()));
        assert!(!is_throttled(503, &HeaderMap::new()));
        assert!(is_throttled(503, &h("1")));
        assert!(!is_throttled(500, &h("1")));
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let r = RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(300),
        };
        for attempt in 1..10 {
            let d = r.backoff(attempt);
            assert!(d <= Duration::from_millis(300), "{d:?}");
        }
        let first = r.backoff(1);
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
    }
}
