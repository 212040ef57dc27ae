//! Temporary storage credentials for engines (`X-Iceberg-Access-Delegation:
//! vended-credentials`). A deployment plugs in a [`Vending`] for its `s3://` warehouses; a
//! `file://` warehouse needs none and is answered without credentials.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::error::IcebergResult;

/// Short-lived credentials scoped to one table location.
#[derive(Clone)]
pub struct Vended {
    /// The location prefix the credentials are limited to.
    pub prefix: String,
    /// Engine configuration keys (`s3.access-key-id`, `s3.secret-access-key`,
    /// `s3.session-token`, ...). Never logged.
    pub config: BTreeMap<String, String>,
}

impl std::fmt::Debug for Vended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vended")
            .field("prefix", &self.prefix)
            .field("config", &"<redacted>")
            .finish()
    }
}

#[async_trait::async_trait]
pub trait Vending: Send + Sync + 'static {
    /// Credentials for `location` (an `s3://` table root), or `None` when this vendor does
    /// not serve that location.
    async fn vend(&self, location: &str) -> IcebergResult<Option<Vended>>;
}

/// Whether the client asked for vended credentials.
pub fn wants_vended(headers: &HeaderMap) -> bool {
    headers
        .get_all("x-iceberg-access-delegation")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case("vended-credentials"))
}

/// The `config` and `storage-credentials` members of a load result.
pub fn render(vended: Option<&Vended>) -> (Value, Value) {
    match vended {
        None => (json!({}), json!([])),
        Some(v) => (
            json!(v.config),
            json!([{"prefix": v.prefix, "config": v.config}]),
        ),
    }
}

/// The vendor a host configured through the environment, if any.
pub fn from_env() -> Option<std::sync::Arc<dyn Vending>> {
    None
}
