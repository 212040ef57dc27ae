//! The AWS SigV4 signing rules of an integration: where and as what service its requests are
//! signed, from its authentication and the connection properties `rest.signing-region` and
//! `rest.signing-name`. Pure rules over the record's fields, used by integration validation
//! (`service::integrations`) at create and patch and by the `access` module at connect, so
//! neither depends on the other for them.

use flotilla_domain::model::AuthConfig;

/// Connection property naming the SigV4 signing service (`glue`, `s3tables`, `execute-api`).
pub const SIGNING_NAME_PROPERTY: &str = "rest.signing-name";
/// Connection property naming the SigV4 signing region.
pub const SIGNING_REGION_PROPERTY: &str = "rest.signing-region";
/// The signing name when neither the properties nor the authentication name one.
pub const DEFAULT_SIGNING_NAME: &str = "execute-api";

/// Where and as what service AWS requests are signed. Without a region the deployment's
/// own applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSigning {
    pub region: Option<String>,
    pub signing_name: String,
}

fn signing_token_ok(v: &str) -> bool {
    (2..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-')
}

/// The SigV4 signing parameters of an authentication with its connection properties:
/// `None` for non-AWS authentication (which must not carry signing properties). Properties
/// win; a property that contradicts an explicit authentication field is refused, as is a
/// malformed value. Also checks the assume-role fields STS constrains. Messages name properties and fields, never values.
pub fn aws_signing(
    auth: &AuthConfig,
    properties: &std::collections::BTreeMap<String, String>,
) -> Result<Option<AwsSigning>, String> {
    let prop_name = properties
        .get(SIGNING_NAME_PROPERTY)
        .map(|s| s.trim().to_owned());
    let prop_region = properties
        .get(SIGNING_REGION_PROPERTY)
        .map(|s| s.trim().to_owned());
    if let Some(n) = &prop_name
        && !signing_token_ok(n)
    {
        return Err(format!(
            "property {SIGNING_NAME_PROPERTY} must be an AWS service signing name such as glue, s3tables or execute-api"
        ));
    }
    if let Some(r) = &prop_region
        && !signing_token_ok(r)
    {
        return Err(format!(
            "property {SIGNING_REGION_PROPERTY} must be an AWS region such as us-east-1"
        ));
    }
    let (auth_region, auth_name): (Option<&str>, Option<&str>) = match auth {
        AuthConfig::OauthClientCredentials { .. } | AuthConfig::Bearer {} => {
            if prop_name.is_some() || prop_region.is_some() {
                return Err(format!(
                    "properties {SIGNING_NAME_PROPERTY} and {SIGNING_REGION_PROPERTY} apply to AWS authentication only"
                ));
            }
            return Ok(None);
        }
        AuthConfig::AwsAssumeRole {
            role_arn,
            external_id,
            session_name,
            duration_secs,
            region,
        } => {
            if !role_arn.starts_with("arn:") || !role_arn.contains(":role/") {
                return Err("authentication.role_arn must be an IAM role ARN".into());
            }
            let sts_chars = |v: &str, extra: &str| {
                v.chars().all(|c| {
                    c.is_ascii_alphanumeric() || "+=,.@-_".contains(c) || extra.contains(c)
                })
            };
            if let Some(e) = external_id
                && (!(2..=1224).contains(&e.len()) || !sts_chars(e, ":/"))
            {
                return Err("authentication.external_id must be 2 to 1224 characters of letters, digits and +=,.@:/-_".into());
            }
            if let Some(n) = session_name
                && (!(2..=64).contains(&n.len()) || !sts_chars(n, ""))
            {
                return Err("authentication.session_name must be 2 to 64 characters of letters, digits and +=,.@-_".into());
            }
            if let Some(d) = duration_secs
                && !(900..=43_200).contains(d)
            {
                return Err("authentication.duration_secs must be between 900 and 43200".into());
            }
            (region.as_deref(), None)
        }
        AuthConfig::AwsAccessKeys { region, .. } => (region.as_deref(), None),
        AuthConfig::AwsSigv4 {
            region,
            signing_name,
            ..
        } => (
            Some(region.as_str()),
            // The serde default is not an explicit choice.
            Some(signing_name.as_str()).filter(|n| *n != DEFAULT_SIGNING_NAME),
        ),
    };
    let auth_region = auth_region.map(str::trim).filter(|r| !r.is_empty());
    if let (Some(p), Some(a)) = (&prop_region, auth_region)
        && p != a
    {
        return Err(format!(
            "property {SIGNING_REGION_PROPERTY} contradicts authentication.region"
        ));
    }
    if let (Some(p), Some(a)) = (&prop_name, auth_name)
        && p != a
    {
        return Err(format!(
            "property {SIGNING_NAME_PROPERTY} contradicts authentication.signing_name"
        ));
    }
    let region = prop_region.or(auth_region.map(str::to_owned));
    let signing_name = prop_name
        .or(auth_name.map(str::to_owned))
        .unwrap_or_else(|| DEFAULT_SIGNING_NAME.to_owned());
    Ok(Some(AwsSigning {
        region,
        signing_name,
    }))
}
