//! Time as a dependency: the one clock of Flotilla. Leases, expiries, timestamps, token
//! refresh and index garbage collection all read it, so tests drive a [`ManualClock`]
//! instead of sleeping.
//!
//! The clock counts whole milliseconds since the Unix epoch; every other view (seconds,
//! RFC 3339, [`SystemTime`]) is derived from that count, so all views of one reading agree.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Whole seconds since the Unix epoch (rounded down).
    fn now_secs(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// The current time as an RFC 3339 string (UTC, millisecond precision).
    fn now_rfc3339(&self) -> String {
        rfc3339_from_ms(self.now_ms())
    }

    /// The current time as a [`SystemTime`] (see [`system_time`]).
    fn now(&self) -> SystemTime {
        system_time(self.now_ms())
    }
}

/// Milliseconds since the epoch as a `SystemTime` (negative values clamp to the epoch).
pub fn system_time(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// RFC 3339 rendering of epoch milliseconds (UTC); a time outside the representable range
/// renders as the epoch.
pub fn rfc3339_from_ms(ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Epoch milliseconds of an RFC 3339 time (`None` when it is not one).
pub fn ms_from_rfc3339(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let now = OffsetDateTime::now_utc();
        i64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
    }
}

/// A clock tests move by hand. Clones share one time, so a test keeps a clone and moves the
/// clock the code under test holds.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(start_ms)))
    }

    /// A manual clock starting at the system clock's current reading.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now_ms())
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the clock forward by `by` (whole milliseconds).
    pub fn advance(&self, by: Duration) {
        self.advance_ms(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    pub fn set_ms(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_of_one_reading_agree() {
        let c = ManualClock::new(1_700_000_000_123);
        assert_eq!(c.now_secs(), 1_700_000_000);
        assert_eq!(c.now_rfc3339(), "2023-11-14T22:13:20.123Z");
        assert_eq!(
            c.now(),
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
        c.advance(Duration::from_secs(2));
        c.advance_ms(-1);
        assert_eq!(c.now_ms(), 1_700_000_002_122);
        let shared = c.clone();
        shared.set_ms(-1_500);
        assert_eq!(c.now_secs(), -2);
        assert_eq!(c.now(), SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn out_of_range_renders_the_epoch() {
        assert_eq!(rfc3339_from_ms(i64::MAX), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_from_ms(0), "1970-01-01T00:00:00Z");
    }
}
