//! CatalogIntegration ("Catalog integration", "Authentication and credentials",
//! "Durability contract", "Lifecycle and garbage collection").
//!
//! Credential publication, for create and rotation alike:
//! 1. a `CREDGEN` record for the new generation is *created* (put-if-absent) first: whoever
//!    creates it owns that generation, and no secret can exist without a durable trace the
//!    sweep can find;
//! 2. the secret is reserved with put-if-absent under `(account, integration, generation)`;
//! 3. the resource CAS publishes the generation and deletes the `CREDGEN` record at the
//!    version its owner created, in the same transaction (a rotation also records a `retiring`
//!    record for the old generation there);
//! 4. only then is the old generation deleted (and its record with it).
//!
//! A definite failure of step 3 deletes the prepared secret and its record; an
//! outcome-unknown failure keeps both, because the CAS may have published them. The sweep
//! (`flotilla admin sweep-credentials`) claims a record by bumping its version before it
//! decides, so a generation it reclaims can never be published afterwards, and it never
//! deletes the generation a published integration references.

use std::collections::BTreeMap;

use flotilla_catalog_access::http::AddressPolicy;
use flotilla_catalog_access::spi::{CatalogConnectionConfig, is_secret_key};
use flotilla_domain::keys;
use flotilla_domain::model::{
    AuthConfig, CredentialGenerationRecord, IntegrationRecord, IntegrationType, NameIndexRecord,
    etag_for,
};
use flotilla_domain::names::{validate_display_name, validate_resource_id};
use flotilla_metastore::{Condition, Consistency, Metastore, Op, Transaction};
use flotilla_secrets::{PutOutcome, SecretBytes, SecretRef, SecretStoreError};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::accounts::{OnConflict, delete_items, strong_scan};
use super::idempotency::{IdempotencyRequest, Plan, RecordedResponse, run_create};
use super::{
    GuardRecord, GuardState, GuardedOutcome, MAX_ATTEMPTS, Versioned, account_guard_error,
    account_guards, backoff, check_if_match, guard_state, guarded_delete, read, to_body,
};
use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;

/// Write-only credential fields accepted on create and rotation.
pub const CREDENTIAL_FIELDS: &[&str] = &[
    "client_secret",
    "token",
    "secret_access_key",
    "session_token",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIntegration {
    pub display_name: String,
    #[serde(rename = "type")]
    pub kind: IntegrationType,
    pub uri: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    pub authentication: AuthConfig,
    /// Write-only; never stored in the metastore or echoed. Taken as any JSON value so that
    /// a malformed one is refused by [`validate_credentials`], whose messages name fields only
    /// (serde's type errors quote the offending value, which here is a secret).
    #[serde(default)]
    pub credentials: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatchIntegration {
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub uri: Option<String>,
    #[serde(default)]
    pub properties: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub paused: Option<bool>,
    /// Present only to give a precise error: the type is immutable.
    #[serde(default, rename = "type")]
    pub kind: Option<Value>,
    /// Present only to give a precise error: use `PUT .../authentication`.
    #[serde(default)]
    pub authentication: Option<Value>,
    #[serde(default)]
    pub credentials: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateAuthentication {
    #[serde(default)]
    pub authentication: Option<AuthConfig>,
    /// Write-only (see [`CreateIntegration::credentials`]).
    #[serde(default)]
    pub credentials: Option<Value>,
}

/// The canonical request body with the secret bytes removed, for idempotency fingerprints
/// ("Secret bytes are not part of the request fingerprint").
pub fn fingerprint_body(canonical: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(canonical) {
        Ok(Value::Object(mut m)) => {
            match m.get_mut("credentials") {
                Some(Value::Object(c)) => {
                    for v in c.values_mut() {
                        *v = Value::Null;
                    }
                }
                Some(other) => *other = Value::Null,
                None => {}
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        }
        _ => canonical.to_vec(),
    }
}

// ---- validation ------------------------------------------------------------------------

fn validate_auth_for_type(
    state: &AppState,
    kind: IntegrationType,
    auth: &AuthConfig,
) -> ApiResult<()> {
    let ok = match kind {
        IntegrationType::IcebergRest => true,
        IntegrationType::Unity => matches!(
            auth,
            AuthConfig::OauthClientCredentials { .. } | AuthConfig::Bearer {}
        ),
        IntegrationType::DeltaSharing => matches!(auth, AuthConfig::Bearer {}),
    };
    if !ok {
        let rule = match kind {
            IntegrationType::Unity => {
                "UNITY integrations accept only OAUTH_CLIENT_CREDENTIALS or BEARER authentication"
            }
            _ => {
                "DELTA_SHARING integrations accept only BEARER authentication (the recipient token)"
            }
        };
        return Err(ApiError::invalid(rule));
    }
    let nonempty = |what: &str, v: &str| {
        if v.trim().is_empty() || v.len() > 2048 || v.chars().any(char::is_control) {
            Err(ApiError::invalid(format!(
                "authentication.{what} must be a non-empty string"
            )))
        } else {
            Ok(())
        }
    };
    match auth {
        AuthConfig::OauthClientCredentials {
            token_uri,
            client_id,
            scopes,
        } => {
            nonempty("client_id", client_id)?;
            if let Some(u) = token_uri {
                let url = url::Url::parse(u).map_err(|_| {
                    ApiError::invalid("authentication.token_uri must be an absolute URL")
                })?;
                if !matches!(url.scheme(), "http" | "https")
                    || url.host_str().is_none()
                    || !url.username().is_empty()
                    || url.password().is_some()
                    || url.fragment().is_some()
                {
                    return Err(ApiError::invalid(
                        "authentication.token_uri must be an http(s) URL without user-info or fragment",
                    ));
                }
                // The token endpoint receives the client secret: the same address policy as
                // the catalog URI, checked now rather than first at connect.
                check_upstream_url(state, "authentication.token_uri", &url)?;
            }
            for s in scopes {
                nonempty("scopes[]", s)?;
            }
        }
        AuthConfig::Bearer {} => {}
        AuthConfig::AwsAssumeRole { role_arn, .. } => {
            if !role_arn.starts_with("arn:") || !role_arn.contains(":role/") {
                return Err(ApiError::invalid(
                    "authentication.role_arn must be an IAM role ARN",
                ));
            }
        }
        AuthConfig::AwsAccessKeys { access_key_id, .. } => {
            nonempty("access_key_id", access_key_id)?
        }
        AuthConfig::AwsSigv4 {
            region,
            signing_name,
            credential_source,
            access_key_id,
        } => {
            nonempty("region", region)?;
            nonempty("signing_name", signing_name)?;
            match credential_source.as_str() {
                "STATIC" => {
                    if access_key_id.as_deref().is_none_or(|k| k.trim().is_empty()) {
                        return Err(ApiError::invalid(
                            "AWS_SIGV4 with credential_source STATIC needs authentication.access_key_id",
                        ));
                    }
                }
                "AMBIENT" => {}
                _ => {
                    return Err(ApiError::invalid(
                        "authentication.credential_source must be STATIC or AMBIENT",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// AWS signing parameters (`rest.signing-name`, `rest.signing-region`) against the
/// authentication: well-formed, not contradicting it, a region somewhere for AWS types, none
/// for other types; assume-role fields within STS's limits.
fn validate_signing(auth: &AuthConfig, properties: &BTreeMap<String, String>) -> ApiResult<()> {
    crate::access::aws_signing(auth, properties)
        .map(|_| ())
        .map_err(ApiError::invalid)
}

/// Which credential fields an authentication type needs and accepts.
fn credential_rules(auth: &AuthConfig) -> (&'static [&'static str], &'static [&'static str]) {
    match auth {
        AuthConfig::OauthClientCredentials { .. } => (&["client_secret"], &["client_secret"]),
        AuthConfig::Bearer {} => (&["token"], &["token"]),
        AuthConfig::AwsAssumeRole { .. } => (&[], &[]),
        AuthConfig::AwsAccessKeys { .. } => (
            &["secret_access_key"],
            &["secret_access_key", "session_token"],
        ),
        AuthConfig::AwsSigv4 {
            credential_source, ..
        } if credential_source == "STATIC" => (
            &["secret_access_key"],
            &["secret_access_key", "session_token"],
        ),
        AuthConfig::AwsSigv4 { .. } => (&[], &[]),
    }
}

/// Checks the write-only credentials against the authentication type. Messages name fields,
/// never values.
fn validate_credentials(
    auth: &AuthConfig,
    creds: &Option<Value>,
) -> ApiResult<Option<SecretBytes>> {
    let (required, allowed) = credential_rules(auth);
    let empty = Map::new();
    let c = match creds {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ApiError::invalid(
                "credentials must be an object of credential fields",
            ));
        }
    };
    for (k, v) in c {
        if !CREDENTIAL_FIELDS.contains(&k.as_str()) {
            return Err(ApiError::invalid(format!(
                "credentials.{k} is not a credential field"
            )));
        }
        if !allowed.contains(&k.as_str()) {
            return Err(ApiError::invalid(format!(
                "credentials.{k} does not apply to {} authentication",
                auth.type_name()
            )));
        }
        match v {
            Value::String(s) if !s.is_empty() && s.len() <= 16 * 1024 => {}
            _ => {
                return Err(ApiError::invalid(format!(
                    "credentials.{k} must be a non-empty string"
                )));
            }
        }
    }
    for r in required {
        if !c.contains_key(*r) {
            return Err(ApiError::invalid(format!(
                "{} authentication needs credentials.{r}",
                auth.type_name()
            )));
        }
    }
    if c.is_empty() {
        return Ok(None);
    }
    SecretBytes::from_fields(c)
        .map(Some)
        .map_err(|_| ApiError::invalid("credentials cannot be stored"))
}

const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// URI and properties: structure, no secrets, and the address policy for literal hosts.
pub fn validate_connection(
    state: &AppState,
    uri: &str,
    properties: &BTreeMap<String, String>,
) -> ApiResult<()> {
    if uri.len() > 2048 {
        return Err(ApiError::invalid("uri is longer than 2048 bytes"));
    }
    super::catalogs::validate_properties(properties)?;
    for k in properties.keys() {
        if is_secret_key(k) {
            return Err(ApiError::invalid(format!(
                "property {k:?} looks secret-bearing; supply secrets as credentials, never as properties"
            )));
        }
    }
    let config = CatalogConnectionConfig {
        uri: uri.to_owned(),
        properties: properties.clone(),
    };
    let url = config
        .validate()
        .map_err(|e| ApiError::invalid(format!("invalid connection: {e}")))?;
    check_upstream_url(state, "uri", &url)
}

/// The create-time address policy for a URL the service will contact (the catalog URI, the
/// OAuth token endpoint): scheme, literal addresses (IPv4-mapped and -compatible IPv6
/// included) and well-known metadata and loopback names. Names are checked again on every
/// resolution at connect time.
fn check_upstream_url(state: &AppState, what: &str, url: &url::Url) -> ApiResult<()> {
    let policy = if state.config.allow_insecure_upstreams {
        AddressPolicy::insecure()
    } else {
        AddressPolicy::strict()
    };
    policy
        .check_url(url)
        .map_err(|e| ApiError::invalid(format!("{what} refused: {}", e.reason())))?;
    if let Some(host) = url.host_str() {
        let h = host.trim_end_matches('.').to_ascii_lowercase();
        if METADATA_HOSTS.contains(&h.as_str()) {
            return Err(ApiError::invalid(format!(
                "{what} refused: cloud metadata endpoints are never contacted"
            )));
        }
        if !state.config.allow_insecure_upstreams && (h == "localhost" || h.ends_with(".localhost"))
        {
            return Err(ApiError::invalid(format!(
                "{what} refused: loopback hosts are only allowed with --allow-insecure-upstreams"
            )));
        }
    }
    Ok(())
}

// ---- reads -----------------------------------------------------------------------------

pub async fn load(
    store: &dyn Metastore,
    account: &str,
    id: &str,
) -> ApiResult<Versioned<IntegrationRecord>> {
    validate_resource_id(id).map_err(|_| ApiError::not_found("integration"))?;
    read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
        .await?
        .ok_or_else(|| ApiError::not_found("integration"))
}

pub async fn get(state: &AppState, account: &str, id: &str) -> ApiResult<Value> {
    Ok(load(state.store.as_ref(), account, id)
        .await?
        .value
        .to_api())
}

pub async fn list(
    state: &AppState,
    account: &str,
    page_size: usize,
    token: Option<&str>,
) -> ApiResult<Value> {
    let (items, next) = super::list_page(
        state.store.as_ref(),
        &keys::account_pk(account),
        keys::INTEGRATION_PREFIX,
        "integrations",
        Consistency::Eventual,
        page_size,
        token,
        |item| Ok(Some(super::decode::<IntegrationRecord>(item)?.to_api())),
    )
    .await?;
    Ok(super::page_body(items, next))
}

// ---- credential generations ------------------------------------------------------------

fn secret_ref(account: &str, integration: &str, generation: u64) -> ApiResult<SecretRef> {
    SecretRef::new(account, integration, generation).map_err(|e| ApiError::internal(e.to_string()))
}

fn secret_error(e: SecretStoreError) -> ApiError {
    if e.is_retryable() || e.is_outcome_unknown() {
        ApiError::unavailable(e.to_string())
    } else {
        ApiError::internal(e.to_string())
    }
}

/// How many generation numbers one prepare tries. A taken number makes the next attempt jump
/// past every generation a record or stored secret holds ([`next_candidate`]), so leftovers
/// awaiting the sweep cost one attempt in all; only concurrent writers can use up the rest.
const GENERATION_ATTEMPTS: u32 = 64;

/// The version of a generation record created from absence. The operation that created it
/// owns it: publication asserts the record at exactly this version, so a sweep that claims
/// the record (bumping its version) makes that publication fail definitely.
const RECORD_VERSION: u64 = 1;

fn record_key(account: &str, integration: &str, generation: u64) -> flotilla_metastore::Key {
    keys::credential_generation(account, integration, generation)
}

/// The op a publishing transaction carries for the generation it publishes: the record must
/// still be the one this operation created (not claimed by a sweep), and it goes.
fn publish_record_op(account: &str, integration: &str, generation: u64) -> Op {
    Op::delete_at(record_key(account, integration, generation), RECORD_VERSION)
}

/// Steps 1 and 2: create the durable record (put-if-absent: whoever creates it owns the
/// generation), then reserve the secret with put-if-absent. Answers the generation reserved.
async fn prepare_generation(
    state: &AppState,
    account: &str,
    integration: &str,
    first: u64,
    secret: &SecretBytes,
) -> ApiResult<u64> {
    let store = state.store.as_ref();
    let mut generation = first;
    for attempt in 0..GENERATION_ATTEMPTS {
        if attempt > 0 {
            generation = next_candidate(state, account, integration, generation).await;
        }
        let rec = CredentialGenerationRecord {
            integration_id: integration.to_owned(),
            generation,
            state: "prepared".into(),
            created_ms: state.clock.now_ms(),
        };
        let create = Transaction::new().with(Op::create(
            record_key(account, integration, generation),
            to_body(&rec)?,
        ));
        match store.transact(create).await {
            Ok(()) => {}
            // Another writer, or a leftover awaiting the sweep, holds this generation.
            Err(e) if super::is_condition_failure(&e) => continue,
            // Perhaps ours, perhaps not: never guess; the sweep reclaims it if it is ours.
            Err(e) if e.is_outcome_unknown() => continue,
            Err(e) => return Err(e.into()),
        }
        let r = secret_ref(account, integration, generation)?;
        match state.credentials.put_if_absent(&r, secret).await {
            Ok(PutOutcome::Created) => return Ok(generation),
            // A stray secret without a record (e.g. a sweep stopped half-way). Bytes this
            // operation did not write are never published; the record we hold lets the sweep
            // reclaim the stray.
            Ok(PutOutcome::AlreadyExists { .. }) => continue,
            Err(e) => {
                if !e.is_outcome_unknown() {
                    // Definitely nothing stored: release the record.
                    let _ = store
                        .transact(Transaction::new().with(Op::delete_at(
                            record_key(account, integration, generation),
                            RECORD_VERSION,
                        )))
                        .await;
                }
                return Err(secret_error(e));
            }
        }
    }
    Err(ApiError::unavailable(
        "no free credential generation after repeated concurrent rotations; retry",
    ))
}

/// The next generation to try after `taken` was taken: past every generation a record or a
/// stored secret of the integration holds (best effort: a failed listing only skips one).
async fn next_candidate(state: &AppState, account: &str, integration: &str, taken: u64) -> u64 {
    let mut next = taken.saturating_add(1);
    if let Ok(items) = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        &keys::credential_generations_prefix(integration),
    )
    .await
    {
        for item in items {
            if let Ok(rec) = item.json::<CredentialGenerationRecord>() {
                next = next.max(rec.generation.saturating_add(1));
            }
        }
    }
    if let Ok(stored) = state.credentials.list(account, integration).await {
        for g in stored {
            next = next.max(g.saturating_add(1));
        }
    }
    next
}

/// Whether this operation still owns the record of `generation` (no sweep claimed it).
async fn still_owned(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
) -> ApiResult<bool> {
    Ok(state
        .store
        .get(
            &record_key(account, integration, generation),
            Consistency::Strong,
        )
        .await?
        .is_some_and(|i| i.version == RECORD_VERSION))
}

/// After a definite publication failure: the prepared secret goes, then its record. Safe
/// because nobody else can publish a generation whose record this operation holds; if a
/// sweep claimed the record meanwhile, the sweep finishes the job.
async fn discard_prepared(state: &AppState, account: &str, integration: &str, generation: u64) {
    if let Ok(r) = secret_ref(account, integration, generation)
        && state.credentials.delete(&r).await.is_ok()
    {
        let _ = state
            .store
            .transact(Transaction::new().with(Op::delete_at(
                record_key(account, integration, generation),
                RECORD_VERSION,
            )))
            .await;
    }
}

/// After publication: a last check that the referenced generation is there (the protocol
/// guarantees it; this restores the invariant should anything outside the protocol have
/// removed it). Best effort: the publication already succeeded.
async fn verify_published_secret(
    state: &AppState,
    account: &str,
    integration: &str,
    generation: u64,
    secret: &SecretBytes,
) {
    let Ok(r) = secret_ref(account, integration, generation) else {
        return;
    };
    if let Ok(None) = state.credentials.get(&r).await {
        tracing::warn!(
            account,
            integration,
            generation,
            "published credential generation was missing; restoring it"
        );
        let _ = state.credentials.put_if_absent(&r, secret).await;
    }
}

/// Step 4: delete a superseded generation and its `retiring` record. Best effort: what is
/// left behind stays recorded for the sweep.
async fn retire_generation(state: &AppState, account: &str, integration: &str, generation: u64) {
    if generation == 0 {
        return;
    }
    if let Ok(r) = secret_ref(account, integration, generation)
        && state.credentials.delete(&r).await.is_ok()
    {
        let _ = state
            .store
            .transact(Transaction::new().with(Op::delete(record_key(
                account,
                integration,
                generation,
            ))))
            .await;
    }
}

/// A `retiring` record for each stored generation of `integration` (for replace).
fn retiring_ops(
    state: &AppState,
    account: &str,
    integration: &str,
    generations: &[u64],
) -> ApiResult<Vec<Op>> {
    generations
        .iter()
        .map(|g| {
            let rec = CredentialGenerationRecord {
                integration_id: integration.to_owned(),
                generation: *g,
                state: "retiring".into(),
                created_ms: state.clock.now_ms(),
            };
            Ok(Op::put(
                record_key(account, integration, *g),
                to_body(&rec)?,
            ))
        })
        .collect()
}

// ---- create ----------------------------------------------------------------------------

/// Installs (or finds, on a re-run of the same create) the transient delete guard of the
/// integration a `replace` retires, then proves no overlay depends on it. Overlay creates
/// assert that guard's absence, so none can attach between the count and the replacing
/// transaction (which deletes the guard). Answers the guard's version.
async fn guard_for_replace(
    state: &AppState,
    account: &str,
    old: &Versioned<IntegrationRecord>,
    owner: &str,
) -> ApiResult<u64> {
    let store = state.store.as_ref();
    let guard = keys::integration_fence(account, &old.value.id);
    let now = state.clock.now_ms();
    let existing = store.get(&guard, Consistency::Strong).await?;
    let mut installed = None;
    let condition = match &existing {
        None => Condition::Absent,
        Some(item) => {
            let g: GuardRecord = item.json()?;
            if g.owner == owner && !g.durable {
                installed = Some(item.version);
                Condition::Version(item.version)
            } else if !g.durable && now.saturating_sub(g.installed_ms) > state.config.guard_lease_ms
            {
                Condition::Version(item.version)
            } else {
                return Err(ApiError::deleting("the integration being replaced"));
            }
        }
    };
    let version = match installed {
        Some(v) => v,
        None => {
            let next = match condition {
                Condition::Version(v) => v + 1,
                _ => 1,
            };
            let body = to_body(&GuardRecord {
                installed_ms: now,
                owner: owner.to_owned(),
                durable: false,
            })?;
            let tx = Transaction::new()
                .with(Op::Put {
                    key: guard.clone(),
                    body,
                    expires_at: None,
                    condition: Some(condition),
                })
                .with(Op::check(
                    keys::integration(account, &old.value.id),
                    Condition::Version(old.version),
                ));
            match store.transact(tx).await {
                Ok(()) => next,
                Err(e) if super::is_condition_failure(&e) => {
                    return Err(ApiError::new(
                        Code::CommitConflict,
                        "the integration being replaced changed; retry",
                    ));
                }
                Err(e) if e.is_outcome_unknown() => {
                    match store.get(&guard, Consistency::Strong).await? {
                        Some(item) if item.json::<GuardRecord>()?.owner == owner => item.version,
                        _ => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let deps = store
        .count(
            &keys::account_pk(account),
            &keys::integration_dependency_prefix(&old.value.id),
            Consistency::Strong,
        )
        .await?;
    if deps > 0 {
        let _ = store
            .transact(Transaction::new().with(Op::delete_at(guard, version)))
            .await;
        return Err(ApiError::new(
            Code::HasDependents,
            "overlays depend on the integration being replaced; replacement must not retarget them",
        )
        .with_detail("overlays", deps));
    }
    Ok(version)
}

pub async fn create(
    state: &AppState,
    account: &str,
    req: CreateIntegration,
    on_conflict: OnConflict,
    idem: Option<IdempotencyRequest>,
) -> ApiResult<RecordedResponse> {
    validate_display_name(&req.display_name)?;
    validate_auth_for_type(state, req.kind, &req.authentication)?;
    validate_connection(state, &req.uri, &req.properties)?;
    validate_signing(&req.authentication, &req.properties)?;
    let secret = validate_credentials(&req.authentication, &req.credentials)?;
    let store = state.store.as_ref();
    // The generation this request prepared (integration id, generation), reused when
    // `run_create` re-runs the plan for the same id, and the replace guard it installed.
    let prepared = std::sync::Mutex::new(None::<(String, u64)>);
    let replace_guard = std::sync::Mutex::new(None::<(String, u64)>);
    let lock = |m: &std::sync::Mutex<Option<(String, u64)>>| {
        m.lock().unwrap_or_else(|p| p.into_inner()).clone()
    };
    let result = run_create(state, idem, |id| {
        let (req, secret, prepared, replace_guard) = (&req, &secret, &prepared, &replace_guard);
        async move {
            if let Some(err) = account_guard_error(store, account).await? {
                return Err(err);
            }
            let name_key = keys::integration_name(account, &req.display_name);
            let existing =
                read::<NameIndexRecord>(store, name_key.clone(), Consistency::Strong).await?;
            let mut ops = account_guards(account);
            let mut replaced: Option<Versioned<IntegrationRecord>> = None;
            if let Some(idx) = existing {
                let old = load(store, account, &idx.value.id).await?;
                match on_conflict {
                    OnConflict::Error => {
                        return Err(ApiError::already_exists(format!(
                            "an integration named {:?} already exists",
                            req.display_name
                        )));
                    }
                    OnConflict::ReturnExisting => {
                        return Ok(Plan::Respond(RecordedResponse::ok(old.value.to_api())));
                    }
                    OnConflict::Replace => {
                        let guard_version = guard_for_replace(state, account, &old, &id).await?;
                        *replace_guard.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((old.value.id.clone(), guard_version));
                        ops.push(Op::delete_at(
                            keys::integration_fence(account, &old.value.id),
                            guard_version,
                        ));
                        ops.push(Op::delete_at(
                            keys::integration(account, &old.value.id),
                            old.version,
                        ));
                        ops.push(Op::replace(
                            name_key.clone(),
                            idx.version,
                            to_body(&NameIndexRecord { id: id.clone() })?,
                        ));
                        replaced = Some(old);
                    }
                }
            }
            if replaced.is_none() {
                ops.push(Op::create(
                    name_key,
                    to_body(&NameIndexRecord { id: id.clone() })?,
                ));
            }
            let mut generation = 0;
            if let Some(secret) = secret {
                let reuse = match lock(prepared) {
                    Some((pid, g)) if pid == id && still_owned(state, account, &id, g).await? => {
                        Some(g)
                    }
                    Some((pid, g)) => {
                        discard_unpublished(state, account, &pid, g).await;
                        None
                    }
                    None => None,
                };
                generation = match reuse {
                    Some(g) => g,
                    None => {
                        *prepared.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        let g = prepare_generation(state, account, &id, 1, secret).await?;
                        *prepared.lock().unwrap_or_else(|p| p.into_inner()) = Some((id.clone(), g));
                        g
                    }
                };
                ops.push(publish_record_op(account, &id, generation));
            }
            if let Some(old) = &replaced {
                // Every generation of the replaced identity is retired after publication.
                let gens = state
                    .credentials
                    .list(account, &old.value.id)
                    .await
                    .map_err(secret_error)?;
                ops.extend(retiring_ops(state, account, &old.value.id, &gens)?);
            }
            let now = state.clock.now_rfc3339();
            let rec = IntegrationRecord {
                id: id.clone(),
                account_id: account.to_owned(),
                display_name: req.display_name.clone(),
                kind: req.kind,
                uri: req.uri.clone(),
                properties: req.properties.clone(),
                authentication: req.authentication.clone(),
                credentials_configured: generation > 0,
                credential_generation: generation,
                generation: 1,
                paused: false,
                revision: 1,
                create_time: now.clone(),
                update_time: now,
            };
            ops.push(Op::create(keys::integration(account, &id), to_body(&rec)?));
            Ok(Plan::Publish {
                ops,
                response: RecordedResponse::created(rec.to_api()),
                probe: keys::integration(account, &id),
            })
        }
    })
    .await;
    if let Some((pid, g)) = lock(&prepared) {
        let published = result.as_ref().is_ok_and(|resp| {
            resp.body.get("id").and_then(Value::as_str) == Some(pid.as_str())
                && resp
                    .body
                    .get("credential_generation")
                    .and_then(Value::as_u64)
                    == Some(g)
        });
        match (&result, &secret) {
            (Ok(_), Some(secret)) if published => {
                verify_published_secret(state, account, &pid, g, secret).await
            }
            // The outcome may be unknown: the CAS may have published it. Keep it; the sweep
            // decides later with the published record in hand.
            (Err(e), _) if e.code == Code::Unavailable => {}
            _ => discard_unpublished(state, account, &pid, g).await,
        }
    }
    if let (Err(_), Some((old, version))) = (&result, lock(&replace_guard)) {
        // A replace that did not commit releases its guard (one that did deleted it).
        let _ = store
            .transact(Transaction::new().with(Op::delete_at(
                keys::integration_fence(account, &old),
                version,
            )))
            .await;
    }
    if let Ok(resp) = &result {
        // A replace retires the old identity's credentials after publication.
        if resp.status == 201 && on_conflict == OnConflict::Replace {
            sweep_retiring(state, account).await;
        }
    }
    result
}

/// Discards a prepared generation unless a published integration references it.
async fn discard_unpublished(state: &AppState, account: &str, id: &str, generation: u64) {
    let published = read::<IntegrationRecord>(
        state.store.as_ref(),
        keys::integration(account, id),
        Consistency::Strong,
    )
    .await
    .ok()
    .flatten()
    .is_some_and(|r| r.value.credential_generation == generation);
    if !published {
        discard_prepared(state, account, id, generation).await;
    }
}

/// Finishes `retiring` records (best effort; the sweep does the same later).
async fn sweep_retiring(state: &AppState, account: &str) {
    let Ok(items) = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        keys::CREDENTIAL_GENERATION_PREFIX,
    )
    .await
    else {
        return;
    };
    for item in items {
        if let Ok(rec) = item.json::<CredentialGenerationRecord>()
            && rec.state == "retiring"
        {
            retire_generation(state, account, &rec.integration_id, rec.generation).await;
        }
    }
}

// ---- update and rotation ---------------------------------------------------------------

pub async fn patch(
    state: &AppState,
    account: &str,
    id: &str,
    req: PatchIntegration,
    if_match: Option<&str>,
) -> ApiResult<Value> {
    if req.kind.is_some() {
        return Err(ApiError::invalid(
            "type is immutable; create with on_conflict=replace to change it",
        ));
    }
    if req.authentication.is_some() || req.credentials.is_some() {
        return Err(ApiError::invalid(
            "authentication and credentials change through PUT .../authentication",
        ));
    }
    if let Some(n) = &req.display_name {
        validate_display_name(n)?;
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load(store, account, id).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        if store
            .get(&keys::integration_fence(account, id), Consistency::Strong)
            .await?
            .is_some()
        {
            return Err(ApiError::deleting("the integration"));
        }
        let mut next = cur.value.clone();
        if let Some(n) = &req.display_name {
            next.display_name = n.clone();
        }
        if let Some(u) = &req.uri {
            next.uri = u.clone();
        }
        if let Some(p) = &req.properties {
            next.properties = p.clone();
        }
        if let Some(p) = req.paused {
            next.paused = p;
        }
        if req.uri.is_some() || req.properties.is_some() {
            validate_connection(state, &next.uri, &next.properties)?;
            validate_signing(&next.authentication, &next.properties)?;
            if next.uri != cur.value.uri || next.properties != cur.value.properties {
                super::require_if_match(if_match, "changing an integration's uri or properties")?;
            }
        }
        let fences_work = next.uri != cur.value.uri
            || next.properties != cur.value.properties
            || next.paused != cur.value.paused;
        if fences_work {
            next.generation += 1;
        }
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::integration(account, id),
            cur.version,
            to_body(&next)?,
        ));
        let renamed = next.display_name != cur.value.display_name;
        let new_name = keys::integration_name(account, &next.display_name);
        if renamed {
            let old_name = keys::integration_name(account, &cur.value.display_name);
            for op in super::rename_ops(old_name, new_name.clone(), id)? {
                tx.push(op);
            }
        }
        match store.transact(tx).await {
            Ok(()) => return Ok(next.to_api()),
            Err(e) if super::is_condition_failure(&e) => {
                if renamed
                    && let Some(taken) =
                        super::name_taken(store, new_name, "an integration", &next.display_name)
                            .await?
                {
                    return Err(taken);
                }
                backoff(attempt).await;
            }
            Err(e) if e.is_retryable() => backoff(attempt).await,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::unavailable("integration update did not converge"))
}

/// `PUT .../authentication`: new authentication configuration and/or credentials, published
/// as a new credential generation (see the module documentation for the protocol).
pub async fn rotate(
    state: &AppState,
    account: &str,
    id: &str,
    req: RotateAuthentication,
    if_match: Option<&str>,
) -> ApiResult<Value> {
    if req.authentication.is_none() && req.credentials.is_none() {
        return Err(ApiError::invalid(
            "give authentication, credentials, or both",
        ));
    }
    let store = state.store.as_ref();
    for attempt in 0..MAX_ATTEMPTS {
        let cur = load(store, account, id).await?;
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        if store
            .get(&keys::integration_fence(account, id), Consistency::Strong)
            .await?
            .is_some()
        {
            return Err(ApiError::deleting("the integration"));
        }
        let auth = req
            .authentication
            .clone()
            .unwrap_or_else(|| cur.value.authentication.clone());
        validate_auth_for_type(state, cur.value.kind, &auth)?;
        validate_signing(&auth, &cur.value.properties)?;
        let secret = validate_credentials(&auth, &req.credentials)?;
        let new_generation = match &secret {
            Some(s) => Some(
                prepare_generation(state, account, id, cur.value.credential_generation + 1, s)
                    .await?,
            ),
            None => None,
        };
        let old_generation = cur.value.credential_generation;
        let mut next = cur.value.clone();
        next.authentication = auth;
        next.credential_generation = new_generation.unwrap_or(0);
        next.credentials_configured = new_generation.is_some();
        next.generation += 1;
        next.revision += 1;
        next.update_time = state.clock.now_rfc3339();
        let mut tx = Transaction::new().with(Op::replace(
            keys::integration(account, id),
            cur.version,
            to_body(&next)?,
        ));
        if let Some(g) = new_generation {
            tx.push(publish_record_op(account, id, g));
        }
        if old_generation > 0 {
            tx.ops
                .extend(retiring_ops(state, account, id, &[old_generation])?);
        }
        match store.transact(tx).await {
            Ok(()) => {
                if let (Some(g), Some(s)) = (new_generation, &secret) {
                    verify_published_secret(state, account, id, g, s).await;
                }
                retire_generation(state, account, id, old_generation).await;
                return Ok(next.to_api());
            }
            // The CAS may have published the new generation: keep it (the sweep decides).
            Err(e) if e.is_outcome_unknown() => return Err(e.into()),
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => {
                if let Some(g) = new_generation {
                    discard_prepared(state, account, id, g).await;
                }
                backoff(attempt).await;
            }
            Err(e) => {
                if let Some(g) = new_generation {
                    discard_prepared(state, account, id, g).await;
                }
                return Err(e.into());
            }
        }
    }
    Err(ApiError::unavailable("rotation did not converge"))
}

// ---- delete ----------------------------------------------------------------------------

/// Deletes every credential generation of an integration and their records (idempotent).
pub async fn purge_credentials(state: &AppState, account: &str, id: &str) -> ApiResult<()> {
    // Every delete path ends here: the integration's upstream session goes first.
    state.sessions.forget(account, id);
    for g in state
        .credentials
        .list(account, id)
        .await
        .map_err(secret_error)?
    {
        state
            .credentials
            .delete(&secret_ref(account, id, g)?)
            .await
            .map_err(secret_error)?;
    }
    let records = strong_scan(
        state.store.as_ref(),
        &keys::account_pk(account),
        &keys::credential_generations_prefix(id),
    )
    .await?;
    delete_items(
        state.store.as_ref(),
        records.into_iter().map(|i| i.key).collect(),
    )
    .await
}

/// Whether credentials or generation records of a (deleted) integration remain.
async fn has_leftovers(state: &AppState, account: &str, id: &str) -> ApiResult<bool> {
    if !state
        .credentials
        .list(account, id)
        .await
        .map_err(secret_error)?
        .is_empty()
    {
        return Ok(true);
    }
    Ok(state
        .store
        .count(
            &keys::account_pk(account),
            &keys::credential_generations_prefix(id),
            Consistency::Strong,
        )
        .await?
        > 0)
}

/// Hook for overlay deletion during a cascade (the overlay module registers itself).
pub type OverlayDeleter =
    fn(&AppState, &str, &str) -> futures::future::BoxFuture<'static, ApiResult<()>>;

pub async fn delete(
    state: &AppState,
    account: &str,
    id: &str,
    cascade: bool,
    if_match: Option<&str>,
) -> ApiResult<()> {
    let store = state.store.as_ref();
    if cascade {
        return cascade_delete(state, account, id, if_match).await;
    }
    for attempt in 0..MAX_ATTEMPTS {
        let cur = match load(store, account, id).await {
            Ok(c) => c,
            Err(e) if e.code == Code::NotFound => {
                // A delete that removed the record and stopped before its credentials were
                // gone: finish the cleanup instead of answering 404.
                if validate_resource_id(id).is_ok() && has_leftovers(state, account, id).await? {
                    purge_credentials(state, account, id).await?;
                    return Ok(());
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let outcome = guarded_delete(
            state,
            keys::integration_fence(account, id),
            keys::integration(account, id),
            cur.version,
            "the integration",
            || async {
                let deps = store
                    .count(
                        &keys::account_pk(account),
                        &keys::integration_dependency_prefix(id),
                        Consistency::Strong,
                    )
                    .await?;
                Ok((deps > 0).then(|| {
                    ApiError::new(
                        Code::HasDependents,
                        "overlays use this integration; delete them or use ?cascade=true",
                    )
                    .with_detail("overlays", deps)
                }))
            },
            vec![Op::delete(keys::integration_name(
                account,
                &cur.value.display_name,
            ))],
        )
        .await?;
        match outcome {
            GuardedOutcome::Deleted => return purge_credentials(state, account, id).await,
            GuardedOutcome::Retry => backoff(attempt).await,
        }
    }
    Err(ApiError::unavailable("integration delete did not converge"))
}

/// Cascade: a durable integration fence (no new overlay can attach and reconciliation stops
/// publishing), each dependent overlay deleted with its contributions, then the integration
/// and its credentials. A retry after any failure resumes under the same fence.
async fn cascade_delete(
    state: &AppState,
    account: &str,
    id: &str,
    if_match: Option<&str>,
) -> ApiResult<()> {
    let store = state.store.as_ref();
    let fence_key = keys::integration_fence(account, id);
    let existing_fence = store.get(&fence_key, Consistency::Strong).await?;
    let durable = existing_fence
        .as_ref()
        .and_then(|i| i.json::<GuardRecord>().ok())
        .is_some_and(|g| g.durable);
    let cur =
        match read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
            .await?
        {
            Some(c) => c,
            None if durable => {
                // The record is gone: finish credential cleanup and drop the fence.
                purge_credentials(state, account, id).await?;
                store
                    .transact(Transaction::new().with(Op::delete(fence_key)))
                    .await?;
                return Ok(());
            }
            None => return Err(ApiError::not_found("integration")),
        };
    if !durable {
        check_if_match(if_match, &etag_for(&cur.value.id, cur.value.revision))?;
        let now = state.clock.now_ms();
        let gs = guard_state(store, fence_key.clone(), now, state.config.guard_lease_ms).await?;
        let condition = match gs {
            GuardState::Absent => Condition::Absent,
            GuardState::Abandoned { version } => Condition::Version(version),
            GuardState::Live => return Err(ApiError::deleting("the integration")),
        };
        let body = to_body(&GuardRecord {
            installed_ms: now,
            owner: flotilla_domain::names::new_id(),
            durable: true,
        })?;
        match store
            .transact(Transaction::new().with(Op::Put {
                key: fence_key.clone(),
                body,
                expires_at: None,
                condition: Some(condition),
            }))
            .await
        {
            Ok(()) => {}
            // Another delete got its fence in first (found by the deterministic simulation:
            // this used to answer 500). A durable fence is a cascade in progress: continue
            // under it, as overlay delete does; a transient guard is a plain delete: DELETING.
            Err(e) if super::is_condition_failure(&e) => {
                let theirs = store
                    .get(&fence_key, Consistency::Strong)
                    .await?
                    .and_then(|i| i.json::<GuardRecord>().ok());
                if !theirs.is_some_and(|g| g.durable) {
                    return Err(ApiError::deleting("the integration"));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let deps = strong_scan(
        store,
        &keys::account_pk(account),
        &keys::integration_dependency_prefix(id),
    )
    .await?;
    for dep in deps {
        let overlay_id = dep.key.sk.rsplit('#').next().unwrap_or_default().to_owned();
        super::overlays::delete_for_cascade(state, account, &overlay_id).await?;
    }
    // The record may still change under the fence (a rotation or patch that read it before
    // the fence went in): a lost race re-reads and tries again instead of failing the
    // cascade with an internal error (found by the deterministic simulation).
    let mut removed = false;
    for attempt in 0..MAX_ATTEMPTS {
        let Some(cur) =
            read::<IntegrationRecord>(store, keys::integration(account, id), Consistency::Strong)
                .await?
        else {
            removed = true;
            break;
        };
        let tx = Transaction::new()
            .with(Op::delete_at(keys::integration(account, id), cur.version))
            .with(Op::delete(keys::integration_name(
                account,
                &cur.value.display_name,
            )));
        match store.transact(tx).await {
            Ok(()) => {
                removed = true;
                break;
            }
            Err(e) if super::is_condition_failure(&e) || e.is_retryable() => backoff(attempt).await,
            // Unknown: the next read tells whether the record is gone.
            Err(e) if e.is_outcome_unknown() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !removed {
        return Err(ApiError::unavailable("integration delete did not converge"));
    }
    purge_credentials(state, account, id).await?;
    store
        .transact(Transaction::new().with(Op::delete(fence_key)))
        .await?;
    Ok(())
}

// ---- sweep -----------------------------------------------------------------------------

/// What `sweep-credentials` did.
#[derive(Debug, Default, serde::Serialize)]
pub struct SweepReport {
    pub records_examined: u64,
    pub generations_deleted: u64,
    pub records_cleared: u64,
    pub orphans_deleted: u64,
}

/// Reclaims retained credential generations of one account (`flotilla admin
/// sweep-credentials`, `POST /v1/admin/sweep-credentials`).
///
/// For each generation record older than `min_age_ms` it first *claims* the record by
/// bumping its version: the operation that prepared it publishes only while the record is at
/// the version it created, so after the claim that generation can never be published. Only
/// then does it read the integration, strongly, and delete the secret unless the integration
/// references it. Secrets no record explains are deleted unless referenced: every in-flight
/// operation writes its record before its secret, so an unrecorded generation is never one
/// that is about to be published.
pub async fn sweep(state: &AppState, account: &str, min_age_ms: i64) -> ApiResult<SweepReport> {
    let store = state.store.as_ref();
    let mut report = SweepReport::default();
    let now = state.clock.now_ms();
    let referenced = |rec: Option<&Versioned<IntegrationRecord>>, generation: u64| {
        rec.is_some_and(|c| {
            c.value.credentials_configured && c.value.credential_generation == generation
        })
    };
    let records = strong_scan(
        store,
        &keys::account_pk(account),
        keys::CREDENTIAL_GENERATION_PREFIX,
    )
    .await?;
    for item in records {
        report.records_examined += 1;
        let rec: CredentialGenerationRecord = item.json()?;
        if now.saturating_sub(rec.created_ms) < min_age_ms {
            continue;
        }
        let claimed = CredentialGenerationRecord {
            state: "sweeping".into(),
            ..rec.clone()
        };
        match store
            .transact(Transaction::new().with(Op::replace(
                item.key.clone(),
                item.version,
                to_body(&claimed)?,
            )))
            .await
        {
            Ok(()) => {}
            // Published, discarded or claimed meanwhile: nothing to do here.
            Err(e) if super::is_condition_failure(&e) => continue,
            Err(e) => return Err(e.into()),
        }
        let current = read::<IntegrationRecord>(
            store,
            keys::integration(account, &rec.integration_id),
            Consistency::Strong,
        )
        .await?;
        if !referenced(current.as_ref(), rec.generation) {
            state
                .credentials
                .delete(&secret_ref(account, &rec.integration_id, rec.generation)?)
                .await
                .map_err(secret_error)?;
            report.generations_deleted += 1;
        }
        store
            .transact(Transaction::new().with(Op::delete_at(item.key.clone(), item.version + 1)))
            .await
            .ok();
        report.records_cleared += 1;
    }
    for r in state
        .credentials
        .list_account(account)
        .await
        .map_err(secret_error)?
    {
        let recorded = store
            .get(
                &record_key(account, &r.integration_id, r.credential_generation),
                Consistency::Strong,
            )
            .await?
            .is_some();
        if recorded {
            continue;
        }
        let current = read::<IntegrationRecord>(
            store,
            keys::integration(account, &r.integration_id),
            Consistency::Strong,
        )
        .await?;
        if !referenced(current.as_ref(), r.credential_generation) {
            state.credentials.delete(&r).await.map_err(secret_error)?;
            report.orphans_deleted += 1;
        }
    }
    Ok(report)
}

// ---- scheduled sweep -------------------------------------------------------------------

/// Accounts one scheduled sweep pass visits at most; the next pass resumes after them.
pub const SCHEDULED_SWEEP_ACCOUNTS: usize = 16;
/// Generations younger than this are left to the operation that may still own them.
pub const SCHEDULED_SWEEP_MIN_AGE_MS: i64 = 3_600_000;

/// What one scheduled sweep pass did.
#[derive(Debug, Default, serde::Serialize)]
pub struct ScheduledSweep {
    /// Accounts with integrations or generation records that were swept.
    pub accounts_swept: u64,
    /// Accounts the pass looked at (swept or skipped for holding none).
    pub accounts_visited: u64,
    pub generations_deleted: u64,
    pub orphans_deleted: u64,
    /// Accounts whose sweep failed (logged; the next round visits them again).
    pub failures: u64,
}

/// One bounded pass of the credential sweep the scheduler runs, no operator needed: resumes
/// after the account where the previous pass stopped (a cursor in the metastore), visits at
/// most `max_accounts` accounts in key order (wrapping around at the end), sweeps each that
/// holds integrations or generation records with [`sweep`] at
/// [`SCHEDULED_SWEEP_MIN_AGE_MS`], and saves where it stopped. Every account is visited
/// again within `ceil(accounts / max_accounts)` passes.
pub async fn sweep_scheduled(state: &AppState, max_accounts: usize) -> ApiResult<ScheduledSweep> {
    let store = state.store.as_ref();
    let cursor_key = keys::credential_sweep_cursor();
    let cursor: Option<String> = store
        .get(&cursor_key, Consistency::Eventual)
        .await?
        .and_then(|i| i.json::<String>().ok());
    let accounts: Vec<String> = flotilla_metastore::query_all(
        store,
        flotilla_metastore::Query::new(
            keys::SYSTEM_PK,
            keys::ACCOUNT_LISTING_PREFIX,
            Consistency::Eventual,
        ),
    )
    .await?
    .into_iter()
    .filter_map(|i| {
        i.key
            .sk
            .strip_prefix(keys::ACCOUNT_LISTING_PREFIX)
            .map(str::to_owned)
    })
    .collect();
    let mut report = ScheduledSweep::default();
    if accounts.is_empty() || max_accounts == 0 {
        return Ok(report);
    }
    let start = cursor
        .as_deref()
        .map_or(0, |c| accounts.partition_point(|a| a.as_str() <= c));
    let mut last = None;
    for i in 0..max_accounts.min(accounts.len()) {
        let account = &accounts[(start + i) % accounts.len()];
        report.accounts_visited += 1;
        last = Some(account.clone());
        let pk = keys::account_pk(account);
        let holds = store
            .count(&pk, keys::INTEGRATION_PREFIX, Consistency::Eventual)
            .await?
            > 0
            || store
                .count(
                    &pk,
                    keys::CREDENTIAL_GENERATION_PREFIX,
                    Consistency::Eventual,
                )
                .await?
                > 0;
        if !holds {
            continue;
        }
        match sweep(state, account, SCHEDULED_SWEEP_MIN_AGE_MS).await {
            Ok(r) => {
                report.accounts_swept += 1;
                report.generations_deleted += r.generations_deleted;
                report.orphans_deleted += r.orphans_deleted;
            }
            Err(e) => {
                report.failures += 1;
                tracing::warn!(account = %account, error = %e, "scheduled credential sweep failed");
            }
        }
    }
    if let Some(last) = last {
        store
            .transact(Transaction::new().with(Op::put(cursor_key, to_body(&last)?)))
            .await?;
    }
    Ok(report)
}
