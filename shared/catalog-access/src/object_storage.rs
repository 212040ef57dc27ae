//! Object-store connections under the upstream address policy.
//!
//! Capture reads an upstream's table files from the storage the upstream names: the
//! `s3.endpoint` its credential vending states, the bucket in a table location, the host a
//! storage answer redirects to. All of that is upstream input, exactly like an integration
//! URI, so the object store must not open its own connections: [`PolicyConnector`] hands
//! `object_store` a client built by the same code as every catalog call
//! ([`crate::http`]): names resolved through the [`PolicyResolver`](crate::http::PolicyResolver)
//! and refused after resolution, every redirect hop re-checked, plain http only in insecure
//! mode, system proxies ignored.
//!
//! [`check_endpoint`] is the up-front half: an endpoint whose scheme or literal address the
//! policy refuses is reported before any store is built. A refusal at request time (a name
//! that resolves to a refused address, a redirect to one) travels through the object
//! store's error chain as an [`AddressRefused`], which [`refusal`] finds; it is never retried
//! (it is a property of the upstream's configuration, not an outage).

use std::time::Duration;

use http_body_util::BodyExt;
use object_store::client::{
    ClientConfigKey, ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind,
    HttpRequest, HttpResponse, HttpResponseBody, HttpService,
};
use url::Url;

use crate::http::{
    AddressPolicy, AddressRefused, HttpPolicy, Redirects, Timeouts, find_refusal, policy_client,
};

/// Checks an object-store endpoint (an upstream-stated `s3.endpoint`) against the policy
/// before anything connects to it: a URL, `https` (plain `http` only when insecure), and,
/// for a literal-IP host, an allowed address. Named hosts are checked when resolved.
pub fn check_endpoint(policy: &HttpPolicy, endpoint: &str) -> Result<Url, AddressRefused> {
    let url = Url::parse(endpoint.trim())
        .map_err(|_| AddressRefused::new("the endpoint is not a URL".to_owned()))?;
    policy.address.check_url(&url)?;
    Ok(url)
}

/// Why [`check_endpoint_resolved`] refused an endpoint.
#[derive(Debug)]
pub enum EndpointRefused {
    /// The policy refuses its scheme, its literal address, or an address its name resolves to.
    Policy(AddressRefused),
    /// Its name does not resolve now.
    Unresolved(String),
}

/// [`check_endpoint`], then, for a named host, every address it resolves to now, through the
/// policy's resolver (its static hosts included): an early, precise answer for callers that
/// hand the endpoint on or report on it. The store's connector checks again at every
/// connection and redirect, which closes the rebinding window this check alone would leave.
pub async fn check_endpoint_resolved(
    policy: &HttpPolicy,
    endpoint: &str,
) -> Result<Url, EndpointRefused> {
    let url = check_endpoint(policy, endpoint).map_err(EndpointRefused::Policy)?;
    if let Some(url::Host::Domain(host)) = url.host() {
        crate::http::PolicyResolver::new(policy.address, policy.static_hosts.clone())
            .resolve_host(host)
            .await
            .map_err(|e| match e.downcast_ref::<AddressRefused>() {
                Some(r) => EndpointRefused::Policy(r.clone()),
                None => EndpointRefused::Unresolved(e.to_string()),
            })?;
    }
    Ok(url)
}

/// Whether `region` can be an S3 region name: the default endpoint's host name is built from
/// it (`s3.<region>.amazonaws.com`), so one carrying anything but letters, digits and `-`
/// (a user part, a path, a dot) would move the host elsewhere.
pub fn is_region_name(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 64
        && region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The policy refusal that made an object-store operation fail, if that is what it was.
pub fn refusal(e: &object_store::Error) -> Option<&AddressRefused> {
    find_refusal(e)
}

/// An [`HttpConnector`] whose clients connect only where `policy` allows. Timeouts the
/// store's [`ClientOptions`] state (`timeout`, `connect_timeout`) win over the policy's.
#[derive(Debug, Clone)]
pub struct PolicyConnector {
    policy: HttpPolicy,
}

impl PolicyConnector {
    /// A connector enforcing `policy`.
    pub fn new(policy: HttpPolicy) -> Self {
        Self { policy }
    }
}

fn option_duration(options: &ClientOptions, key: ClientConfigKey) -> Option<Duration> {
    options
        .get_config_value(&key)
        .and_then(|v| humantime::parse_duration(&v).ok())
}

impl HttpConnector for PolicyConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let defaults = Timeouts::of(&self.policy);
        let timeouts = Timeouts {
            connect: option_duration(options, ClientConfigKey::ConnectTimeout)
                .unwrap_or(defaults.connect),
            request: option_duration(options, ClientConfigKey::Timeout).unwrap_or(defaults.request),
        };
        let client = policy_client(&self.policy, Redirects::Follow, timeouts).map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }
        })?;
        Ok(HttpClient::new(PolicyService {
            client,
            address: self.policy.address,
        }))
    }
}

/// The object store's transport: a policy client. Every request's own URL is checked too
/// (scheme and literal-IP host): the store builds URLs from upstream-named buckets and
/// endpoints, and a literal address never passes through the resolver.
#[derive(Debug)]
struct PolicyService {
    client: reqwest::Client,
    address: AddressPolicy,
}

#[async_trait::async_trait]
impl HttpService for PolicyService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let url = Url::parse(&parts.uri.to_string())
            .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        self.address
            .check_url(&url)
            .map_err(|refused| HttpError::new(HttpErrorKind::Unknown, refused))?;
        let mut request = reqwest::Request::new(parts.method, url);
        *request.headers_mut() = parts.headers;
        *request.body_mut() = Some(match body.as_bytes() {
            Some(b) => reqwest::Body::from(b.clone()),
            None => reqwest::Body::wrap(body),
        });
        let response = self.client.execute(request).await.map_err(http_error)?;
        let response: http::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        let body = HttpResponseBody::new(body.map_err(http_error));
        Ok(HttpResponse::from_parts(parts, body))
    }
}

/// Classifies a transport error the way the object store's retry loop reads it: a refusal
/// by the policy is `Unknown` (never retried) and keeps the [`AddressRefused`] in the chain.
fn http_error(e: reqwest::Error) -> HttpError {
    if let Some(refused) = find_refusal(&e) {
        return HttpError::new(HttpErrorKind::Unknown, refused.clone());
    }
    let kind = if e.is_timeout() {
        HttpErrorKind::Timeout
    } else if e.is_connect() {
        HttpErrorKind::Connect
    } else if e.is_decode() {
        HttpErrorKind::Decode
    } else if e.is_body() || interrupted(&e) {
        HttpErrorKind::Interrupted
    } else {
        HttpErrorKind::Unknown
    };
    HttpError::new(kind, e.without_url())
}

/// Whether the connection broke mid-exchange (reset, aborted, closed early).
fn interrupted(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = e.source();
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        cur = err.source();
    }
    false
}
