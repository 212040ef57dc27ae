#![forbid(unsafe_code)]
//! The bottom of Flotilla's service stack: the service clock, the service error (re-exported), the low-level
//! store helpers every protocol shares (retry and backoff, condition failures, key and body
//! codecs, page tokens) and the reconcile bounds the configuration carries. Everything above
//! (directory, services, reconcile, http) depends on this crate; it depends on none of them.

pub mod clock;
pub mod error;
pub mod limits;
pub mod store;

use std::sync::Arc;

/// Renders one block of Prometheus text for `/v1/admin/metrics`.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;
