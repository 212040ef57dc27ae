//! The configurable bounds of a reconciliation run. They live here, below both the
//! services (whose `Config` carries them) and the reconciler (which enforces them, see
//! `flotilla_reconcile::bounds`), so neither crate depends on the other for them.

/// Configurable bounds of a reconciliation run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Items one upstream listing (all its pages) may answer.
    pub listing_items: usize,
    /// Bytes of names one upstream listing may answer.
    pub listing_bytes: usize,
    /// Items (namespaces, tables, views, loaded definitions) one run may gather.
    pub run_items: usize,
    /// Bytes (names, loaded schemas and properties) one run may gather.
    pub run_bytes: usize,
    /// Time from the start of a run to the end of its preflight.
    pub run_budget_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            listing_items: 100_000,
            listing_bytes: 16 * 1024 * 1024,
            run_items: 250_000,
            run_bytes: 128 * 1024 * 1024,
            run_budget_ms: 300_000,
        }
    }
}

/// Environment variables that override the defaults (`flotilla serve` and the Lambdas).
pub const ENV_LISTING_ITEMS: &str = "FLOTILLA_RECONCILE_MAX_LISTING_ITEMS";
pub const ENV_LISTING_BYTES: &str = "FLOTILLA_RECONCILE_MAX_LISTING_BYTES";
pub const ENV_RUN_ITEMS: &str = "FLOTILLA_RECONCILE_MAX_RUN_ITEMS";
pub const ENV_RUN_BYTES: &str = "FLOTILLA_RECONCILE_MAX_RUN_BYTES";
pub const ENV_BUDGET_SECS: &str = "FLOTILLA_RECONCILE_BUDGET_SECS";

impl Limits {
    /// The defaults, overridden by the process environment.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The defaults, overridden by `lookup`. A value that is not a positive integer is
    /// ignored with a warning (the default stays).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut out = Self::default();
        let read = |name: &str| -> Option<u64> {
            let raw = lookup(name)?;
            match raw.trim().parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    tracing::warn!(
                        setting = name,
                        "ignoring a reconcile bound that is not a positive integer"
                    );
                    None
                }
            }
        };
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = read(ENV_LISTING_ITEMS) {
            out.listing_items = size(n);
        }
        if let Some(n) = read(ENV_LISTING_BYTES) {
            out.listing_bytes = size(n);
        }
        if let Some(n) = read(ENV_RUN_ITEMS) {
            out.run_items = size(n);
        }
        if let Some(n) = read(ENV_RUN_BYTES) {
            out.run_bytes = size(n);
        }
        if let Some(n) = read(ENV_BUDGET_SECS) {
            out.run_budget_ms = i64::try_from(n.saturating_mul(1000)).unwrap_or(i64::MAX);
        }
        out
    }
}
