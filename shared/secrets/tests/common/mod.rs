//! The moto endpoint for Secrets Manager tests.
//!
//! Mirrors `flotilla_testkit::moto` (same variable, same failure) without depending on the
//! testkit crate, whose fixture servers are much heavier to build than this crate's tests.

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};

/// The emulator's base URL. Panics when `FLOTILLA_MOTO_ENDPOINT` is unset: a test that needs
/// the emulator must not pass without it.
pub fn endpoint() -> String {
    match std::env::var("FLOTILLA_MOTO_ENDPOINT") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "FLOTILLA_MOTO_ENDPOINT is not set: run the tests through scripts/test.sh, \
             which starts moto server, or export it yourself"
        ),
    }
}

/// A client for `endpoint` with the static test credentials and SDK retries disabled, so
/// each test sees the first failure.
pub fn client(endpoint: &str) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "moto"))
        .endpoint_url(endpoint)
        .retry_config(RetryConfig::disabled())
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

/// A secret prefix unique to this call, so cases never see each other's secrets.
pub fn unique_prefix(label: &str) -> String {
    format!(
        "flotilla/{label}-{}",
        flotilla_secrets::contract::unique_account()
    )
}
