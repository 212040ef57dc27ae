//! Structured logging: JSON lines on Lambda (CloudWatch), compact text locally.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once. `RUST_LOG` overrides the default `info` level.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    // A second initialisation (tests, embedded use) is harmless: keep the first.
    let _ = if json {
        builder.json().flatten_event(true).without_time().try_init()
    } else {
        builder.compact().try_init()
    };
}
