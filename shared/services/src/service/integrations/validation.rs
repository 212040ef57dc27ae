//! Integrations: validation: the type, authentication and connection rules.

use super::*;

pub(super) fn validate_auth_for_type(
    state: &AppState,
    kind: IntegrationType,
    auth: &AuthConfig,
) -> Result<()> {
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
        return Err(Error::invalid(rule));
    }
    let nonempty = |what: &str, v: &str| {
        if v.trim().is_empty() || v.len() > 2048 || v.chars().any(char::is_control) {
            Err(Error::invalid(format!(
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
                    Error::invalid("authentication.token_uri must be an absolute URL")
                })?;
                if !matches!(url.scheme(), "http" | "https")
                    || url.host_str().is_none()
                    || !url.username().is_empty()
                    || url.password().is_some()
                    || url.fragment().is_some()
                {
                    return Err(Error::invalid(
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
                return Err(Error::invalid(
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
                        return Err(Error::invalid(
                            "AWS_SIGV4 with credential_source STATIC needs authentication.access_key_id",
                        ));
                    }
                }
                "AMBIENT" => {}
                _ => {
                    return Err(Error::invalid(
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
pub(super) fn validate_signing(
    auth: &AuthConfig,
    properties: &BTreeMap<String, String>,
) -> Result<()> {
    crate::signing::aws_signing(auth, properties)
        .map(|_| ())
        .map_err(Error::invalid)
}

/// Which credential fields an authentication type needs and accepts.
pub(super) fn credential_rules(
    auth: &AuthConfig,
) -> (&'static [&'static str], &'static [&'static str]) {
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
pub(super) fn validate_credentials(
    auth: &AuthConfig,
    creds: &Option<Value>,
) -> Result<Option<SecretBytes>> {
    let (required, allowed) = credential_rules(auth);
    let empty = Map::new();
    let c = match creds {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Error::invalid(
                "credentials must be an object of credential fields",
            ));
        }
    };
    for (k, v) in c {
        if !CREDENTIAL_FIELDS.contains(&k.as_str()) {
            return Err(Error::invalid(format!(
                "credentials.{k} is not a credential field"
            )));
        }
        if !allowed.contains(&k.as_str()) {
            return Err(Error::invalid(format!(
                "credentials.{k} does not apply to {} authentication",
                auth.type_name()
            )));
        }
        match v {
            Value::String(s) if !s.is_empty() && s.len() <= 16 * 1024 => {}
            _ => {
                return Err(Error::invalid(format!(
                    "credentials.{k} must be a non-empty string"
                )));
            }
        }
    }
    for r in required {
        if !c.contains_key(*r) {
            return Err(Error::invalid(format!(
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
        .map_err(|_| Error::invalid("credentials cannot be stored"))
}

pub(super) const METADATA_HOSTS: &[&str] = &[
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
) -> Result<()> {
    if uri.len() > 2048 {
        return Err(Error::invalid("uri is longer than 2048 bytes"));
    }
    crate::service::catalogs::validate_properties(properties)?;
    for k in properties.keys() {
        if is_secret_key(k) {
            return Err(Error::invalid(format!(
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
        .map_err(|e| Error::invalid(format!("invalid connection: {e}")))?;
    check_upstream_url(state, "uri", &url)
}

/// The create-time address policy for a URL the service will contact (the catalog URI, the
/// OAuth token endpoint): scheme, literal addresses (IPv4-mapped and -compatible IPv6
/// included) and well-known metadata and loopback names. Names are checked again on every
/// resolution at connect time.
pub(super) fn check_upstream_url(state: &AppState, what: &str, url: &url::Url) -> Result<()> {
    let policy = if state.config.allow_insecure_upstreams {
        AddressPolicy::insecure()
    } else {
        AddressPolicy::strict()
    };
    policy
        .check_url(url)
        .map_err(|e| Error::invalid(format!("{what} refused: {}", e.reason())))?;
    if let Some(host) = url.host_str() {
        let h = host.trim_end_matches('.').to_ascii_lowercase();
        if METADATA_HOSTS.contains(&h.as_str()) {
            return Err(Error::invalid(format!(
                "{what} refused: cloud metadata endpoints are never contacted"
            )));
        }
        if !state.config.allow_insecure_upstreams && (h == "localhost" || h.ends_with(".localhost"))
        {
            return Err(Error::invalid(format!(
                "{what} refused: loopback hosts are only allowed with --allow-insecure-upstreams"
            )));
        }
    }
    Ok(())
}
