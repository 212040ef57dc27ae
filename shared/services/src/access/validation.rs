//! `POST {A}/integrations/{id}/validate` ("Vended storage credentials"): the two
//! credential boundaries tested independently.
//!
//! 1. `CATALOG_CONNECTION` / `CATALOG_AUTHENTICATION`: a namespace listing with the
//!    integration's own authentication (an authentication refusal proves the endpoint
//!    answered, so connection passes and authentication fails).
//! 2. `DISCOVERY`: namespaces are walked breadth-first (bounded) until a table is found, or
//!    the table named by the caller is loaded. A provider that advertises views also lists
//!    them once. No table is `NO_TABLES`: without one, vending cannot be exercised.
//! 3. `CREDENTIAL_VENDING`: the provider's non-mutating vending call for that table; expiry
//!    and a prefix that does not cover the object about to be read are separate issues.
//! 4. `STORAGE_ACCESS`: a `HEAD` of the table's metadata object (Iceberg) or a listing of its
//!    `_delta_log/` (Delta) through `object_store`, signed with the VENDED credentials only:
//!    the S3 client is built from a static credential provider, never from the environment,
//!    the instance profile or the catalog credentials. `file://` locations are read from the
//!    local file system only when the upstream itself is on loopback in local mode.
//!
//! `valid` is true only when all five checks passed: a skipped or unverifiable vending or
//! storage step is never success. Summaries are our own bounded text plus the SPI's
//! `BoundedText` messages (which withhold credential-bearing upstream text); storage errors
//! are reduced to their kind because S3 error bodies echo the access key id.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use flotilla_catalog_access::{
    CatalogAccessError, CatalogCapabilities, CatalogClient, LoadTableOutcome, StorageCredential,
    TableFormat, TableMetadata, UpstreamNamespace, VendedCredentials, VendingErrorKind,
};
use flotilla_domain::model::{AuthConfig, IntegrationRecord};
use object_store::aws::{AmazonS3Builder, AwsCredential};
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig, StaticCredentialProvider,
};
use serde::Serialize;
use url::Url;

use super::{AccessError, connect, protocol_of};
use crate::error::{Error, Result};
use crate::state::AppState;

/// Namespaces visited at most while looking for a table to validate with.
pub const MAX_DISCOVERY_NAMESPACES: usize = 64;
/// Upstream listing calls at most during discovery (pages included).
pub const MAX_DISCOVERY_CALLS: usize = 64;
/// Longest summary (characters).
pub const MAX_SUMMARY_CHARS: usize = 400;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckType {
    CatalogConnection,
    CatalogAuthentication,
    Discovery,
    CredentialVending,
    StorageAccess,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckStatus {
    Passed,
    Failed,
    NotRun,
}

/// Why a check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Issue {
    ConnectionFailed,
    AuthenticationFailed,
    /// AWS refused the integration's AWS identity: STS refused `AssumeRole` (access denied,
    /// wrong external id), or the catalog refused the SigV4 signature (bad keys, expired
    /// session). The summary carries STS's or the upstream's bounded, secret-free message.
    AwsAuthenticationFailed,
    DiscoveryFailed,
    DiscoveryUnsupported,
    NoTables,
    VendingFailed,
    VendingUnsupported,
    CredentialExpired,
    CredentialScopeInvalid,
    StorageAccessFailed,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    #[serde(rename = "type")]
    pub kind: CheckType,
    pub status: CheckStatus,
    pub issue: Option<Issue>,
    pub summary: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ValidationReport {
    pub valid: bool,
    pub checks: Vec<Check>,
}

/// A table the caller asks validation to use instead of the first one discovered.
#[derive(Clone, Debug)]
pub struct TableChoice {
    pub namespace: UpstreamNamespace,
    pub name: String,
}

fn bounded(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == MAX_SUMMARY_CHARS {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

struct Checks(Vec<Check>);

impl Checks {
    fn new() -> Self {
        let all = [
            CheckType::CatalogConnection,
            CheckType::CatalogAuthentication,
            CheckType::Discovery,
            CheckType::CredentialVending,
            CheckType::StorageAccess,
        ];
        Self(
            all.into_iter()
                .map(|kind| Check {
                    kind,
                    status: CheckStatus::NotRun,
                    issue: None,
                    summary: "not run: an earlier check failed".into(),
                })
                .collect(),
        )
    }

    fn set(&mut self, kind: CheckType, status: CheckStatus, issue: Option<Issue>, summary: &str) {
        if let Some(c) = self.0.iter_mut().find(|c| c.kind == kind) {
            c.status = status;
            c.issue = issue;
            c.summary = bounded(summary);
        }
    }

    fn pass(&mut self, kind: CheckType, summary: &str) {
        self.set(kind, CheckStatus::Passed, None, summary);
    }

    fn fail(&mut self, kind: CheckType, issue: Issue, summary: &str) {
        self.set(kind, CheckStatus::Failed, Some(issue), summary);
    }

    fn not_run(&mut self, kind: CheckType, summary: &str) {
        self.set(kind, CheckStatus::NotRun, None, summary);
    }

    fn report(self) -> ValidationReport {
        let valid = self.0.iter().all(|c| c.status == CheckStatus::Passed);
        flotilla_telemetry::catalog::VALIDATION_RUNS.inc(&[if valid {
            "valid"
        } else {
            "invalid"
        }]);
        ValidationReport {
            valid,
            checks: self.0,
        }
    }
}

/// Runs the five checks against integration `id`. Upstream failures are results, not
/// errors; the call itself fails only for our own problems (unknown integration, credential
/// store unavailable).
pub async fn validate(
    state: &AppState,
    account: &str,
    id: &str,
    table: Option<TableChoice>,
) -> Result<ValidationReport> {
    let record = crate::service::integrations::load(state.store.as_ref(), account, id)
        .await?
        .value;
    super::refuse_paused(&record)?;
    let mut checks = Checks::new();
    let client = match connect(state, &record).await {
        Ok(c) => c,
        Err(e) => {
            record_connect_failure(&mut checks, e)?;
            return Ok(checks.report());
        }
    };
    let protocol = protocol_of(record.kind);
    match client.check_connection().await {
        Ok(()) => {
            checks.pass(
                CheckType::CatalogConnection,
                &format!("the {protocol} catalog endpoint answered"),
            );
            checks.pass(
                CheckType::CatalogAuthentication,
                &format!(
                    "the catalog accepted {} authentication",
                    record.authentication.type_name()
                ),
            );
        }
        Err(e @ CatalogAccessError::Authentication { .. }) => {
            let aws = matches!(
                record.authentication,
                AuthConfig::AwsAssumeRole { .. }
                    | AuthConfig::AwsAccessKeys { .. }
                    | AuthConfig::AwsSigv4 { .. }
            );
            if flotilla_catalog_access::sigv4::is_sts_refusal(&e) {
                // STS refused before the catalog was asked: its endpoint is not proven.
                checks.not_run(
                    CheckType::CatalogConnection,
                    "not run: AWS refused the integration's AWS identity",
                );
            } else {
                checks.pass(
                    CheckType::CatalogConnection,
                    &format!("the {protocol} catalog endpoint answered"),
                );
            }
            let issue = if aws {
                Issue::AwsAuthenticationFailed
            } else {
                Issue::AuthenticationFailed
            };
            checks.fail(CheckType::CatalogAuthentication, issue, &e.to_string());
            return Ok(checks.report());
        }
        Err(e) => {
            let summary = match &e {
                CatalogAccessError::Connection(_)
                | CatalogAccessError::Retryable { .. }
                | CatalogAccessError::Throttled { .. }
                | CatalogAccessError::Config(_) => e.to_string(),
                _ => format!("the endpoint did not answer as a {protocol} catalog: {e}"),
            };
            checks.fail(
                CheckType::CatalogConnection,
                Issue::ConnectionFailed,
                &summary,
            );
            checks.not_run(
                CheckType::CatalogAuthentication,
                "not run: the catalog endpoint could not be used",
            );
            return Ok(checks.report());
        }
    }
    let capabilities = match client.capabilities().await {
        Ok(c) => c,
        Err(e) => {
            checks.fail(CheckType::Discovery, Issue::DiscoveryFailed, &e.to_string());
            return Ok(checks.report());
        }
    };
    let Some(metadata) = discover(client.as_ref(), &capabilities, table, &mut checks).await else {
        return Ok(checks.report());
    };
    let Some((vended, target)) = vend(
        state,
        client.as_ref(),
        &capabilities,
        &metadata,
        &mut checks,
    )
    .await
    else {
        return Ok(checks.report());
    };
    check_storage(state, &record, &vended, &target, &mut checks).await;
    Ok(checks.report())
}

fn record_connect_failure(checks: &mut Checks, e: AccessError) -> Result<()> {
    match e {
        AccessError::Unsupported(m) | AccessError::Credentials(m) => {
            checks.not_run(
                CheckType::CatalogConnection,
                "not run: the integration's authentication cannot be used",
            );
            checks.fail(
                CheckType::CatalogAuthentication,
                Issue::AuthenticationFailed,
                &m,
            );
        }
        AccessError::Store(flotilla_secrets::SecretStoreError::NotFound(_)) => {
            checks.not_run(
                CheckType::CatalogConnection,
                "not run: the integration's credentials are missing",
            );
            checks.fail(
                CheckType::CatalogAuthentication,
                Issue::AuthenticationFailed,
                "the integration's credentials are missing from the credential store; rotate them",
            );
        }
        e @ AccessError::Store(_) => return Err(Error::from(e)),
        AccessError::Catalog(c @ CatalogAccessError::Unsupported(_)) => {
            checks.not_run(
                CheckType::CatalogConnection,
                "not run: the integration's authentication cannot be used",
            );
            checks.fail(
                CheckType::CatalogAuthentication,
                Issue::AuthenticationFailed,
                &c.to_string(),
            );
        }
        AccessError::Catalog(c) => {
            checks.fail(
                CheckType::CatalogConnection,
                Issue::ConnectionFailed,
                &c.to_string(),
            );
            checks.not_run(
                CheckType::CatalogAuthentication,
                "not run: the connection configuration is invalid",
            );
        }
    }
    Ok(())
}

fn discovery_issue(e: &CatalogAccessError) -> Issue {
    match e {
        CatalogAccessError::Unsupported(_) => Issue::DiscoveryUnsupported,
        _ => Issue::DiscoveryFailed,
    }
}

/// Finds (or loads the requested) table. `None` when discovery failed (recorded).
async fn discover(
    client: &dyn CatalogClient,
    capabilities: &CatalogCapabilities,
    table: Option<TableChoice>,
    checks: &mut Checks,
) -> Option<TableMetadata> {
    if !capabilities.list_namespaces || !capabilities.list_tables {
        checks.fail(
            CheckType::Discovery,
            Issue::DiscoveryUnsupported,
            "the provider cannot list namespaces and tables of this catalog",
        );
        return None;
    }
    let mut calls = 0usize;
    let mut visited = 0usize;
    let mut found: Option<(UpstreamNamespace, String)> = None;
    if let Some(t) = table {
        // The caller named the table: discovery still has to list, once.
        if let Err(e) = client.list_namespaces(None, None, Some(1)).await {
            checks.fail(
                CheckType::Discovery,
                discovery_issue(&e),
                &format!("listing namespaces failed: {e}"),
            );
            return None;
        }
        found = Some((t.namespace, t.name));
    } else {
        let mut queue: VecDeque<Option<UpstreamNamespace>> = VecDeque::from([None]);
        'walk: while let Some(parent) = queue.pop_front() {
            if let Some(ns) = &parent {
                visited += 1;
                calls += 1;
                match client.list_tables(ns, None, Some(1)).await {
                    Ok(page) => {
                        if let Some(t) = page.items.into_iter().next() {
                            found = Some((t.namespace, t.name));
                            break 'walk;
                        }
                    }
                    // Levels that hold no tables (a Unity catalog, a share) answer NotFound.
                    Err(CatalogAccessError::NotFound(_)) => {}
                    Err(e) => {
                        checks.fail(
                            CheckType::Discovery,
                            discovery_issue(&e),
                            &format!("listing tables failed: {e}"),
                        );
                        return None;
                    }
                }
            }
            let mut token: Option<String> = None;
            loop {
                if visited >= MAX_DISCOVERY_NAMESPACES || calls >= MAX_DISCOVERY_CALLS {
                    break 'walk;
                }
                calls += 1;
                match client
                    .list_namespaces(parent.as_ref(), token.as_deref(), Some(100))
                    .await
                {
                    Ok(page) => {
                        queue.extend(page.items.into_iter().map(Some));
                        token = page.next_page_token;
                    }
                    Err(e) => {
                        checks.fail(
                            CheckType::Discovery,
                            discovery_issue(&e),
                            &format!("listing namespaces failed: {e}"),
                        );
                        return None;
                    }
                }
                if token.is_none() {
                    break;
                }
            }
        }
    }
    // A provider that advertises views must be able to list them ("Catalog
    // access boundary"); one page in the table's namespace proves it.
    if let (true, Some((ns, _))) = (capabilities.list_views, &found)
        && let Err(e) = client.list_views(ns, None, Some(1)).await
    {
        checks.fail(
            CheckType::Discovery,
            discovery_issue(&e),
            &format!("listing views failed: {e}"),
        );
        return None;
    }
    let Some((namespace, name)) = found else {
        checks.fail(
            CheckType::Discovery,
            Issue::NoTables,
            &format!(
                "no table found in the {visited} namespace(s) searched; vending and storage access need a table \
                 (name one with ?namespace=&table=)"
            ),
        );
        return None;
    };
    match client.load_table(&namespace, &name, None).await {
        Ok(LoadTableOutcome::Loaded { metadata, .. }) => {
            checks.pass(
                CheckType::Discovery,
                &format!(
                    "listed namespaces and tables; loaded table {} ({})",
                    metadata.identifier,
                    metadata.format.as_str()
                ),
            );
            Some(*metadata)
        }
        Ok(LoadTableOutcome::NotModified) => {
            checks.fail(
                CheckType::Discovery,
                Issue::DiscoveryFailed,
                "the catalog answered an unconditional load as not modified",
            );
            None
        }
        Err(e) => {
            checks.fail(
                CheckType::Discovery,
                discovery_issue(&e),
                &format!("loading table {namespace}.{name} failed: {e}"),
            );
            None
        }
    }
}

/// What the storage check reads.
#[derive(Clone, Debug)]
pub enum StorageTarget {
    /// One object, read with `HEAD` (an Iceberg metadata file).
    Object(String),
    /// A prefix whose listing must contain an object (a Delta `_delta_log/`).
    Prefix(String),
}

impl StorageTarget {
    fn location(&self) -> &str {
        match self {
            StorageTarget::Object(l) | StorageTarget::Prefix(l) => l,
        }
    }
}

/// The object that proves read access to the table: its metadata file when the catalog
/// names one, else the Delta log, else the table location itself.
pub fn storage_target(metadata: &TableMetadata) -> Option<StorageTarget> {
    if let Some(m) = metadata
        .metadata_location
        .as_deref()
        .filter(|m| !m.is_empty())
    {
        return Some(StorageTarget::Object(m.to_owned()));
    }
    let location = metadata
        .location
        .as_deref()
        .filter(|l| !l.is_empty())?
        .trim_end_matches('/');
    Some(match metadata.format {
        TableFormat::Delta => StorageTarget::Prefix(format!("{location}/_delta_log/")),
        _ => StorageTarget::Prefix(format!("{location}/")),
    })
}

fn vending_issue(e: &CatalogAccessError) -> Issue {
    match e {
        CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Unsupported,
            ..
        }
        | CatalogAccessError::Unsupported(_) => Issue::VendingUnsupported,
        CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Expired,
            ..
        } => Issue::CredentialExpired,
        CatalogAccessError::CredentialVending {
            kind: VendingErrorKind::Scope,
            ..
        } => Issue::CredentialScopeInvalid,
        _ => Issue::VendingFailed,
    }
}

async fn vend(
    state: &AppState,
    client: &dyn CatalogClient,
    capabilities: &CatalogCapabilities,
    metadata: &TableMetadata,
    checks: &mut Checks,
) -> Option<(VendedCredentials, StorageTarget)> {
    if !capabilities.vend_storage_credentials {
        checks.fail(
            CheckType::CredentialVending,
            Issue::VendingUnsupported,
            "the catalog does not vend storage credentials; credential vending is required",
        );
        return None;
    }
    let ident = &metadata.identifier;
    let vended = match client
        .vend_storage_credentials(&ident.namespace, &ident.name)
        .await
    {
        Ok(v) => v,
        Err(e) => {
            checks.fail(
                CheckType::CredentialVending,
                vending_issue(&e),
                &e.to_string(),
            );
            return None;
        }
    };
    let now = state.clock.now();
    if vended.expires_within(now, Duration::ZERO) {
        checks.fail(
            CheckType::CredentialVending,
            Issue::CredentialExpired,
            "the catalog vended storage credentials that have already expired",
        );
        return None;
    }
    let Some(target) = storage_target(metadata) else {
        checks.pass(
            CheckType::CredentialVending,
            "the catalog vended storage credentials",
        );
        checks.fail(
            CheckType::StorageAccess,
            Issue::StorageAccessFailed,
            "the table has neither a metadata location nor a location; storage access cannot be verified",
        );
        return None;
    };
    if !vended.covers(target.location()) {
        checks.fail(
            CheckType::CredentialVending,
            Issue::CredentialScopeInvalid,
            "the vended credentials are scoped to a prefix that does not cover the table's metadata",
        );
        return None;
    }
    let lifetime = vended
        .expires_at
        .and_then(|at| at.duration_since(now).ok())
        .map(|d| format!(", valid for about {} more minute(s)", d.as_secs() / 60))
        .unwrap_or_default();
    checks.pass(
        CheckType::CredentialVending,
        &format!(
            "the catalog vended {} storage credentials covering the table{lifetime}",
            vended.credential.kind_name()
        ),
    );
    Some((vended, target))
}

/// The first of `keys` present in `map`.
fn first_setting<'a>(
    map: &'a std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| map.get(*k))
        .map(String::as_str)
        .filter(|v| !v.trim().is_empty())
}

/// True when the integration's catalog is on this machine (local mode against a loopback
/// upstream): only then may `file://` locations be read from the local file system.
fn upstream_is_local(state: &AppState, record: &IntegrationRecord) -> bool {
    if !state.config.allow_insecure_upstreams {
        return false;
    }
    let Ok(url) = Url::parse(&record.uri) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Applies the upstream address policy to an S3 endpoint (it comes from integration
/// properties or from the catalog's answer, both untrusted): scheme and literal addresses,
/// then every address the name resolves to now
/// (`flotilla_catalog_access::object_storage::check_endpoint_resolved`).
async fn check_endpoint(state: &AppState, endpoint: &str) -> Result<(), String> {
    use flotilla_catalog_access::object_storage::{EndpointRefused, check_endpoint_resolved};
    match check_endpoint_resolved(&super::http_policy(state), endpoint).await {
        Ok(_) => Ok(()),
        Err(EndpointRefused::Policy(e)) => {
            Err(format!("the S3 endpoint was refused: {}", e.reason()))
        }
        Err(EndpointRefused::Unresolved(_)) => {
            Err("the S3 endpoint host does not resolve".to_owned())
        }
    }
}

fn storage_error_summary(e: &object_store::Error, what: &str) -> String {
    // Never the error text: S3 error bodies echo the access key id and string-to-sign. A
    // refusal by the address policy is ours, and says no more than the name it refused.
    if let Some(r) = flotilla_catalog_access::object_storage::refusal(e) {
        return format!("reading {what}: the storage endpoint was {r}");
    }
    match e {
        object_store::Error::NotFound { .. } => format!("{what} does not exist in storage"),
        object_store::Error::PermissionDenied { .. } => {
            format!("storage refused the vended credentials for {what} (permission denied)")
        }
        object_store::Error::Unauthenticated { .. } => {
            format!("storage did not accept the vended credentials for {what} (unauthenticated)")
        }
        _ => format!("reading {what} with the vended credentials failed"),
    }
}

async fn check_storage(
    state: &AppState,
    record: &IntegrationRecord,
    vended: &VendedCredentials,
    target: &StorageTarget,
    checks: &mut Checks,
) {
    let what = match target {
        StorageTarget::Object(_) => "the table metadata object",
        StorageTarget::Prefix(_) => "the table's log or data prefix",
    };
    let url = match Url::parse(target.location()) {
        Ok(u) => u,
        Err(_) => {
            checks.fail(
                CheckType::StorageAccess,
                Issue::StorageAccessFailed,
                "the table location is not a URL",
            );
            return;
        }
    };
    let outcome = match url.scheme() {
        "s3" | "s3a" => read_s3(state, record, vended, &url, target).await,
        "file" if upstream_is_local(state, record) => read_local(&url, target).await,
        "file" => Err(Ok(
            "file:// locations are readable only in local mode against a local catalog".to_owned(),
        )),
        other => Err(Ok(format!(
            "verifying {other}:// storage is not supported by this deployment"
        ))),
    };
    match outcome {
        Ok(()) => checks.pass(
            CheckType::StorageAccess,
            &match url.scheme() {
                "file" => format!("read {what} from the local file system (local catalog)"),
                _ => format!("read {what} with the vended credentials"),
            },
        ),
        Err(Ok(summary)) => checks.fail(
            CheckType::StorageAccess,
            Issue::StorageAccessFailed,
            &summary,
        ),
        Err(Err(e)) => checks.fail(
            CheckType::StorageAccess,
            Issue::StorageAccessFailed,
            &storage_error_summary(&e, what),
        ),
    }
}

/// `Err(Ok(summary))` is our own refusal, `Err(Err(e))` a storage error.
type ReadOutcome = Result<(), Result<String, object_store::Error>>;

async fn probe(store: &dyn ObjectStore, target: &StorageTarget, path: ObjectPath) -> ReadOutcome {
    match target {
        StorageTarget::Object(_) => store.head(&path).await.map(|_| ()).map_err(Err),
        StorageTarget::Prefix(_) => {
            use futures::StreamExt;
            let mut listing = store.list(Some(&path));
            match listing.next().await {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(Err(e)),
                None => Err(Ok(
                    "the table's log or data prefix is empty in storage".to_owned()
                )),
            }
        }
    }
}

async fn read_s3(
    state: &AppState,
    record: &IntegrationRecord,
    vended: &VendedCredentials,
    url: &Url,
    target: &StorageTarget,
) -> ReadOutcome {
    let StorageCredential::S3 {
        access_key_id,
        secret_access_key,
        session_token,
    } = &vended.credential
    else {
        return Err(Ok(format!(
            "the catalog vended {} credentials for an s3:// location",
            vended.credential.kind_name()
        )));
    };
    let Some(bucket) = url.host_str().filter(|b| !b.is_empty()) else {
        return Err(Ok("the s3:// location names no bucket".to_owned()));
    };
    let key = url.path().trim_start_matches('/');
    let path = match ObjectPath::parse(key) {
        Ok(p) => p,
        Err(_) => return Err(Ok("the s3:// location is not a valid object key".to_owned())),
    };
    // The operator's endpoint wins over the catalog's, as the operator's URI does.
    let endpoint = first_setting(&record.properties, &["s3.endpoint"])
        .or_else(|| first_setting(&vended.settings, &["s3.endpoint"]));
    let region = first_setting(&record.properties, &["s3.region", "client.region"])
        .or_else(|| first_setting(&vended.settings, &["s3.region", "client.region"]))
        .unwrap_or("us-east-1");
    // The region becomes part of the default endpoint's host name.
    if !flotilla_catalog_access::object_storage::is_region_name(region) {
        return Err(Ok("the S3 region is not a region name".to_owned()));
    }
    let credential = AwsCredential {
        key_id: access_key_id.expose().to_owned(),
        secret_key: secret_access_key.expose().to_owned(),
        token: session_token.as_ref().map(|t| t.expose().to_owned()),
    };
    let retry = RetryConfig {
        max_retries: 1,
        retry_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let options = ClientOptions::new()
        .with_timeout(Duration::from_secs(15))
        .with_connect_timeout(Duration::from_secs(5));
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(region)
        .with_credentials(Arc::new(StaticCredentialProvider::new(credential)))
        .with_retry(retry)
        .with_client_options(options)
        // Every connection under the address policy, checked after DNS resolution and on
        // redirects (the endpoint check below alone would be defeated by DNS rebinding).
        .with_http_connector(
            flotilla_catalog_access::object_storage::PolicyConnector::new(super::http_policy(
                state,
            )),
        );
    if let Some(endpoint) = endpoint {
        if let Err(summary) = check_endpoint(state, endpoint).await {
            return Err(Ok(summary));
        }
        let path_style = first_setting(&vended.settings, &["s3.path-style-access"])
            .is_none_or(|v| !v.eq_ignore_ascii_case("false"));
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(state.config.allow_insecure_upstreams)
            .with_virtual_hosted_style_request(!path_style);
    }
    let store = match builder.build() {
        Ok(s) => s,
        Err(_) => {
            return Err(Ok(
                "cannot configure an S3 client for the vended credentials".to_owned(),
            ));
        }
    };
    probe(&store, target, path).await
}

async fn read_local(url: &Url, target: &StorageTarget) -> ReadOutcome {
    let Ok(file) = url.to_file_path() else {
        return Err(Ok("the file:// location is not a local path".to_owned()));
    };
    let store = object_store::local::LocalFileSystem::new();
    let path = match ObjectPath::from_absolute_path(&file) {
        Ok(p) => p,
        Err(_) => {
            return Err(Ok(
                "the file:// location is not a valid local path".to_owned()
            ));
        }
    };
    probe(&store, target, path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(
        format: TableFormat,
        location: Option<&str>,
        metadata_location: Option<&str>,
    ) -> TableMetadata {
        TableMetadata {
            identifier: flotilla_catalog_access::TableIdent::new(
                UpstreamNamespace::new(["a"]),
                "t",
            ),
            format,
            schema: serde_json::json!({}),
            location: location.map(str::to_owned),
            metadata_location: metadata_location.map(str::to_owned),
            stable_id: None,
            properties: Default::default(),
        }
    }

    #[test]
    fn the_storage_target_is_the_metadata_file_else_the_delta_log() {
        let m = meta(
            TableFormat::Iceberg,
            Some("s3://b/t"),
            Some("s3://b/t/metadata/v1.json"),
        );
        assert!(
            matches!(storage_target(&m), Some(StorageTarget::Object(l)) if l == "s3://b/t/metadata/v1.json")
        );
        let d = meta(TableFormat::Delta, Some("s3://b/t/"), None);
        assert!(
            matches!(storage_target(&d), Some(StorageTarget::Prefix(l)) if l == "s3://b/t/_delta_log/")
        );
        assert!(storage_target(&meta(TableFormat::Delta, None, None)).is_none());
    }

    #[test]
    fn only_all_passed_is_valid() {
        let mut c = Checks::new();
        assert!(!Checks::new().report().valid);
        for k in [
            CheckType::CatalogConnection,
            CheckType::CatalogAuthentication,
            CheckType::Discovery,
            CheckType::CredentialVending,
        ] {
            c.pass(k, "ok");
        }
        assert!(!c.report().valid, "storage not run must not be valid");
    }

    #[test]
    fn summaries_are_bounded() {
        assert_eq!(
            bounded(&"x".repeat(5000)).chars().count(),
            MAX_SUMMARY_CHARS + 1
        );
    }
}
