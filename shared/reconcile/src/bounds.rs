//! The bounds of one run: how much an upstream may make a run gather, and for how long.
//!
//! An upstream decides how many names a listing answers and whether it ever ends, so every
//! listing and every run is metered: items and bytes per listing, items and bytes per run,
//! and a run-level time budget read from the service clock (injectable in tests). Hitting a
//! bound fails the run before anything is published; what was gathered is dropped with the
//! run's discovery state. The defaults and the environment variables that change them are
//! listed in `docs/reliability.md` ("Bounds").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flotilla_catalog_access::spi::{TableIdent, UpstreamNamespace};

use flotilla_base::clock::Clock;

pub use flotilla_base::limits::{
    ENV_BUDGET_SECS, ENV_LISTING_BYTES, ENV_LISTING_ITEMS, ENV_RUN_BYTES, ENV_RUN_ITEMS, Limits,
};

/// Which bound a run hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exceeded {
    ListingItems { limit: usize },
    ListingBytes { limit: usize },
    RunItems { limit: usize },
    RunBytes { limit: usize },
    Deadline { budget_ms: i64 },
}

impl Exceeded {
    /// The error code recorded in the overlay's status.
    pub fn code(&self) -> &'static str {
        match self {
            Exceeded::Deadline { .. } => "DEADLINE_EXCEEDED",
            _ => "UPSTREAM_LIMIT_EXCEEDED",
        }
    }

    /// The environment variable that sets the bound.
    pub fn setting(&self) -> &'static str {
        match self {
            Exceeded::ListingItems { .. } => ENV_LISTING_ITEMS,
            Exceeded::ListingBytes { .. } => ENV_LISTING_BYTES,
            Exceeded::RunItems { .. } => ENV_RUN_ITEMS,
            Exceeded::RunBytes { .. } => ENV_RUN_BYTES,
            Exceeded::Deadline { .. } => ENV_BUDGET_SECS,
        }
    }
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exceeded::ListingItems { limit } => {
                write!(f, "an upstream listing answered more than {limit} items")
            }
            Exceeded::ListingBytes { limit } => {
                write!(f, "an upstream listing answered more than {limit} bytes")
            }
            Exceeded::RunItems { limit } => {
                write!(f, "the run gathered more than {limit} upstream items")
            }
            Exceeded::RunBytes { limit } => {
                write!(
                    f,
                    "the run gathered more than {limit} bytes of upstream metadata"
                )
            }
            Exceeded::Deadline { budget_ms } => write!(
                f,
                "discovery and preflight did not finish within the run budget of {} s",
                budget_ms / 1000
            ),
        }
    }
}

/// The meters of one run, shared by its concurrent upstream requests.
pub struct Budget {
    clock: Arc<dyn Clock>,
    deadline_ms: i64,
    limits: Limits,
    items: AtomicUsize,
    bytes: AtomicUsize,
}

impl Budget {
    pub fn new(clock: Arc<dyn Clock>, started_ms: i64, limits: Limits) -> Self {
        Self {
            clock,
            deadline_ms: started_ms.saturating_add(limits.run_budget_ms),
            limits,
            items: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Fails once the run's time budget is spent.
    pub fn check_time(&self) -> Result<(), Exceeded> {
        if self.clock.now_ms() >= self.deadline_ms {
            return Err(Exceeded::Deadline {
                budget_ms: self.limits.run_budget_ms,
            });
        }
        Ok(())
    }

    /// What is left of the time budget (a bound on each upstream request).
    pub fn remaining(&self) -> Duration {
        let ms = self.deadline_ms.saturating_sub(self.clock.now_ms()).max(0);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    /// Adds to the run's totals.
    pub fn charge(&self, items: usize, bytes: usize) -> Result<(), Exceeded> {
        let total_items = self.items.fetch_add(items, Ordering::Relaxed) + items;
        if total_items > self.limits.run_items {
            return Err(Exceeded::RunItems {
                limit: self.limits.run_items,
            });
        }
        let total_bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total_bytes > self.limits.run_bytes {
            return Err(Exceeded::RunBytes {
                limit: self.limits.run_bytes,
            });
        }
        Ok(())
    }

    /// A meter for one listing (all its pages).
    pub fn listing(&self) -> ListingMeter<'_> {
        ListingMeter {
            budget: self,
            items: 0,
            bytes: 0,
        }
    }
}

/// Counts one listing against its own bounds and the run's.
pub struct ListingMeter<'a> {
    budget: &'a Budget,
    items: usize,
    bytes: usize,
}

impl ListingMeter<'_> {
    pub fn add(&mut self, items: usize, bytes: usize) -> Result<(), Exceeded> {
        self.items += items;
        self.bytes += bytes;
        let l = &self.budget.limits;
        if self.items > l.listing_items {
            return Err(Exceeded::ListingItems {
                limit: l.listing_items,
            });
        }
        if self.bytes > l.listing_bytes {
            return Err(Exceeded::ListingBytes {
                limit: l.listing_bytes,
            });
        }
        self.budget.charge(items, bytes)
    }
}

/// The bytes an upstream answer costs to hold (names plus a fixed per-item overhead).
pub trait Weight {
    fn weight(&self) -> usize;
}

const ITEM_OVERHEAD: usize = 32;

impl Weight for UpstreamNamespace {
    fn weight(&self) -> usize {
        ITEM_OVERHEAD
            + self
                .levels()
                .iter()
                .map(|l| l.len() + ITEM_OVERHEAD)
                .sum::<usize>()
    }
}

impl Weight for TableIdent {
    fn weight(&self) -> usize {
        self.namespace.weight() + self.name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_base::clock::ManualClock;

    #[test]
    fn environment_overrides_and_bad_values_keep_defaults() {
        let l = Limits::from_lookup(|k| match k {
            ENV_LISTING_ITEMS => Some("10".into()),
            ENV_BUDGET_SECS => Some("7".into()),
            ENV_RUN_BYTES => Some("lots".into()),
            ENV_RUN_ITEMS => Some("0".into()),
            _ => None,
        });
        assert_eq!(l.listing_items, 10);
        assert_eq!(l.run_budget_ms, 7000);
        assert_eq!(l.run_bytes, Limits::default().run_bytes);
        assert_eq!(l.run_items, Limits::default().run_items);
    }

    #[test]
    fn listing_and_run_bounds_and_the_deadline_trip() {
        let clock = Arc::new(ManualClock::new(1_000));
        let limits = Limits {
            listing_items: 5,
            listing_bytes: 1000,
            run_items: 8,
            run_bytes: 10_000,
            run_budget_ms: 50,
        };
        let b = Budget::new(clock.clone(), 1_000, limits);
        let mut one = b.listing();
        assert!(one.add(5, 10).is_ok());
        assert_eq!(one.add(1, 1), Err(Exceeded::ListingItems { limit: 5 }));
        let mut two = b.listing();
        assert!(two.add(1, 10).is_ok());
        assert_eq!(two.add(3, 10), Err(Exceeded::RunItems { limit: 8 }));
        let mut three = b.listing();
        assert_eq!(
            three.add(0, 1001),
            Err(Exceeded::ListingBytes { limit: 1000 })
        );
        assert!(b.check_time().is_ok());
        clock.advance_ms(50);
        assert_eq!(b.check_time(), Err(Exceeded::Deadline { budget_ms: 50 }));
        assert_eq!(b.remaining(), Duration::ZERO);
    }
}
