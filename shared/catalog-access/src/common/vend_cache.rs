//! The process-local cache of vended storage credentials and the checks every vended
//! credential passes (fresh, covering the table root), shared by the Unity and Delta
//! Sharing providers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::error::{CatalogAccessError, Result, VendingErrorKind};
use crate::spi::{TableIdent, VendedCredentials};

/// Cached vended credentials are renewed this long before they expire.
pub(crate) const RENEW_MARGIN: Duration = Duration::from_secs(300);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded maps are caches: a panic elsewhere leaves them usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Process-local cache of vended credentials per table, renewed near expiry. Holds no
/// credential longer than its stated expiry (minus [`RENEW_MARGIN`]).
#[derive(Default)]
pub(crate) struct VendCache {
    entries: Mutex<HashMap<TableIdent, VendedCredentials>>,
}

impl VendCache {
    /// Cached credentials that do not expire within the renewal margin. Credentials without
    /// a stated expiry are not reused: nothing says how long they stay valid.
    pub(crate) fn fresh(&self, ident: &TableIdent, now: SystemTime) -> Option<VendedCredentials> {
        let mut entries = lock(&self.entries);
        match entries.get(ident) {
            Some(c) if c.expires_at.is_some() && !c.expires_within(now, RENEW_MARGIN) => {
                Some(c.clone())
            }
            Some(_) => {
                entries.remove(ident);
                None
            }
            None => None,
        }
    }

    pub(crate) fn store(&self, ident: TableIdent, creds: VendedCredentials) {
        lock(&self.entries).insert(ident, creds);
    }
}

/// Refuses credentials that are already expired or do not cover the table root.
pub(crate) fn check_fresh_and_scoped(
    creds: &VendedCredentials,
    now: SystemTime,
    table_location: Option<&str>,
) -> Result<()> {
    if creds.expires_within(now, Duration::ZERO) {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Expired,
            "the catalog vended credentials that are already expired",
        ));
    }
    if let Some(loc) = table_location
        && !creds.covers(loc)
    {
        return Err(CatalogAccessError::vending(
            VendingErrorKind::Scope,
            format!(
                "the vended credentials are scoped to `{}`, which does not cover the table \
                 location `{loc}`",
                creds.prefix.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}
