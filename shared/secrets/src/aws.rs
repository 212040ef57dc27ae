//! The AWS Secrets Manager credential store.
//!
//! Each generation is its own secret named `{prefix}/{account}/{integration}/{generation}`
//! (e.g. `flotilla/prod/acct-1/int-9/3`), so IAM can confine a stage to `flotilla/{stage}/*`
//! and a generation, once created, is never updated in place: put-if-absent is
//! `CreateSecret`, which fails with `ResourceExistsException` when the name is taken.
//!
//! SDK errors are classified once, in [`classify`]: a throttle or a refused connection is
//! [`SecretStoreError::Retryable`]; a timeout, a 5xx or an unparseable response after a write
//! was sent is [`SecretStoreError::OutcomeUnknown`]. Service messages are redacted against
//! the payload and bounded before they enter an error.

use std::fmt;

use async_trait::async_trait;
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::http::HttpResponse;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::types::{Filter, FilterNameStringType};

use crate::{
    CredentialStore, PutOutcome, SecretBytes, SecretRef, SecretStoreError, bound_message,
    validate_id,
};

/// Secrets Manager's limit on secret names.
const MAX_NAME_LEN: usize = 512;

/// Credential generations as Secrets Manager secrets under a stage prefix.
#[derive(Clone)]
pub struct SecretsManagerStore {
    client: Client,
    prefix: String,
}

impl fmt::Debug for SecretsManagerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsManagerStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl SecretsManagerStore {
    /// `prefix` is one or more `/`-separated segments of `[A-Za-z0-9_+=.@-]`, e.g.
    /// `flotilla/dev` (`FLOTILLA_SECRET_PREFIX`); it must match the IAM resource pattern.
    pub fn new(client: Client, prefix: impl Into<String>) -> Result<Self, SecretStoreError> {
        let prefix = prefix.into();
        let prefix = prefix.trim_end_matches('/').to_owned();
        let valid_segment = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_+=.@-".contains(&b))
        };
        if prefix.is_empty() || !prefix.split('/').all(valid_segment) || prefix.len() > 128 {
            return Err(SecretStoreError::Backend(format!(
                "secret prefix {:?} must be '/'-separated segments of [A-Za-z0-9_+=.@-], at most 128 bytes",
                bound_message(&prefix)
            )));
        }
        Ok(Self { client, prefix })
    }

    /// A store using the ambient AWS configuration (the Lambda role).
    pub async fn from_env(prefix: impl Into<String>) -> Result<Self, SecretStoreError> {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::new(Client::new(&config), prefix)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The secret name of a generation.
    pub fn secret_name(&self, reference: &SecretRef) -> String {
        format!(
            "{}/{}/{}/{}",
            self.prefix,
            reference.account_id,
            reference.integration_id,
            reference.credential_generation
        )
    }

    fn checked_name(&self, reference: &SecretRef) -> Result<String, SecretStoreError> {
        reference.validate()?;
        let name = self.secret_name(reference);
        if name.len() > MAX_NAME_LEN {
            return Err(SecretStoreError::InvalidRef(format!(
                "secret name is {} bytes; the limit is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        Ok(name)
    }

    /// Lists secret names starting with `name_prefix` (a prefix match in Secrets Manager),
    /// following every page. Names are re-checked by the caller: the filter is a hint.
    async fn list_names(&self, name_prefix: &str) -> Result<Vec<String>, SecretStoreError> {
        let filter = Filter::builder()
            .key(FilterNameStringType::Name)
            .values(name_prefix)
            .build();
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .list_secrets()
                .filters(filter.clone())
                .max_results(100)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| classify(&e, Op::Read, None))?;
            names.extend(
                out.secret_list()
                    .iter()
                    .filter_map(|s| s.name().map(str::to_owned)),
            );
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => break,
            }
        }
        Ok(names)
    }
}

#[async_trait]
impl CredentialStore for SecretsManagerStore {
    async fn put_if_absent(
        &self,
        reference: &SecretRef,
        secret: &SecretBytes,
    ) -> Result<PutOutcome, SecretStoreError> {
        let name = self.checked_name(reference)?;
        let text = secret.expose_str()?;
        let created = self
            .client
            .create_secret()
            .name(&name)
            .secret_string(text)
            .description("Flotilla integration credential generation (immutable)")
            .send()
            .await;
        match created {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_exists_exception()) =>
            {
                // Taken: by an earlier attempt of this very put (retry after an uncertain
                // outcome) or by another writer. Never overwrite; report which.
                match self.get(reference).await? {
                    Some(existing) => Ok(PutOutcome::AlreadyExists {
                        identical: existing.ct_eq(secret),
                    }),
                    None => Err(SecretStoreError::Retryable {
                        message: format!(
                            "credential {reference} exists but could not be read back"
                        ),
                    }),
                }
            }
            Err(e) => Err(classify(&e, Op::Write, Some(secret))),
        }
    }

    async fn get(&self, reference: &SecretRef) -> Result<Option<SecretBytes>, SecretStoreError> {
        let name = self.checked_name(reference)?;
        let out = match self.client.get_secret_value().secret_id(&name).send().await {
            Ok(out) => out,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(classify(&e, Op::Read, None)),
        };
        let text = out
            .secret_string()
            .ok_or_else(|| SecretStoreError::Corrupt {
                reference: reference.clone(),
                reason: "secret has no string value".into(),
            })?;
        SecretBytes::new(text.as_bytes().to_vec())
            .map(Some)
            .map_err(|_| SecretStoreError::Corrupt {
                reference: reference.clone(),
                reason: "secret value is not a JSON object".into(),
            })
    }

    async fn delete(&self, reference: &SecretRef) -> Result<(), SecretStoreError> {
        let name = self.checked_name(reference)?;
        // No recovery window: a retired generation must not block a later CreateSecret of the
        // same name, and nothing may resolve it again.
        match self
            .client
            .delete_secret()
            .secret_id(&name)
            .force_delete_without_recovery(true)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(classify(&e, Op::Write, None)),
        }
    }

    async fn list(
        &self,
        account_id: &str,
        integration_id: &str,
    ) -> Result<Vec<u64>, SecretStoreError> {
        validate_id("account_id", account_id)?;
        validate_id("integration_id", integration_id)?;
        let prefix = format!("{}/{account_id}/{integration_id}/", self.prefix);
        let mut generations: Vec<u64> = self
            .list_names(&prefix)
            .await?
            .iter()
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter_map(parse_generation)
            .collect();
        generations.sort_unstable();
        generations.dedup();
        Ok(generations)
    }

    async fn list_account(&self, account_id: &str) -> Result<Vec<SecretRef>, SecretStoreError> {
        validate_id("account_id", account_id)?;
        let prefix = format!("{}/{account_id}/", self.prefix);
        let mut refs: Vec<SecretRef> = self
            .list_names(&prefix)
            .await?
            .iter()
            .filter_map(|name| name.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (integration, generation) = rest.split_once('/')?;
                validate_id("integration_id", integration).ok()?;
                Some(SecretRef {
                    account_id: account_id.to_owned(),
                    integration_id: integration.to_owned(),
                    credential_generation: parse_generation(generation)?,
                })
            })
            .collect();
        refs.sort();
        refs.dedup();
        Ok(refs)
    }
}

/// A canonical decimal generation (no sign, no leading zeros), so that two names never map
/// to one generation.
fn parse_generation(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|g| g.to_string() == text)
}

/// Whether the failed request could have changed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// Error codes that mean "refused before any effect, try again".
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ServiceUnavailable",
];

/// The one place SDK errors become [`SecretStoreError`]s. `secret` (when the request carried
/// one) is redacted from any service message.
pub fn classify<E>(
    err: &SdkError<E, HttpResponse>,
    op: Op,
    secret: Option<&SecretBytes>,
) -> SecretStoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let clean = |text: String| {
        let text = match secret {
            Some(s) => s.redact(&text),
            None => text,
        };
        bound_message(&text)
    };
    let maybe_applied = |message: String| match op {
        Op::Write => SecretStoreError::OutcomeUnknown { message },
        Op::Read => SecretStoreError::Retryable { message },
    };
    match err {
        SdkError::ConstructionFailure(_) => {
            SecretStoreError::Backend("secrets manager request could not be built".into())
        }
        SdkError::TimeoutError(_) => maybe_applied("secrets manager request timed out".into()),
        SdkError::DispatchFailure(d) => {
            let kind = if d.is_timeout() {
                "timeout"
            } else if d.is_io() {
                "i/o"
            } else if d.is_user() {
                "configuration"
            } else {
                "other"
            };
            if d.is_user() {
                SecretStoreError::Backend(format!("secrets manager dispatch failed ({kind})"))
            } else {
                maybe_applied(format!("secrets manager dispatch failed ({kind})"))
            }
        }
        SdkError::ResponseError(_) => {
            maybe_applied("secrets manager response could not be read".into())
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = err.code().unwrap_or("Unknown");
            let message = clean(format!(
                "{code} (HTTP {status}): {}",
                err.message().unwrap_or("")
            ));
            if RETRYABLE_CODES.contains(&code) || status == 429 {
                SecretStoreError::Retryable { message }
            } else if status >= 500 || code == "InternalServiceError" {
                maybe_applied(message)
            } else {
                SecretStoreError::Backend(message)
            }
        }
        _ => maybe_applied("secrets manager request failed".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_generation;

    #[test]
    fn generations_are_canonical_decimals() {
        assert_eq!(parse_generation("7"), Some(7));
        assert_eq!(parse_generation("0"), Some(0));
        assert_eq!(parse_generation("07"), None);
        assert_eq!(parse_generation("+7"), None);
        assert_eq!(parse_generation("7/x"), None);
        assert_eq!(parse_generation(""), None);
    }
}
