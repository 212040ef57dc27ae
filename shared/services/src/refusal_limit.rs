//! The per-host bound on refusal audit records (`service::audit`): how many refusals of one
//! account and principal a host records each minute before it only counts them. Kept apart
//! from the audit service so that the application state can hold the counter without
//! depending on the service that reads it.

use std::collections::HashMap;
use std::sync::Mutex;

/// Refusal records one host writes per account, principal and minute; beyond it, one
/// summary record per account, principal and minute counts the rest.
pub const MAX_REFUSALS_PER_MINUTE: u64 = 60;

/// (account, principal) pairs a host counts per minute. A refusal beyond them is not
/// recorded (only logged): the counter's memory is bounded whatever the flood.
pub const MAX_TRACKED_PER_MINUTE: usize = 10_000;

/// Past [`MAX_REFUSALS_PER_MINUTE`], the minute's summary is written for the first
/// suppressed refusal and then every this many (its count lags the truth by less than this).
pub const SUMMARY_EVERY: u64 = 16;

/// What a host does with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Write its own record.
    Record,
    /// Replace the minute's summary with this many suppressed refusals.
    Summary(u64),
    /// Too many principals this minute: log only.
    Drop,
}

/// Refusals per account, principal and minute, counted by this host (on AWS: per Lambda
/// instance). Only the current minute is kept.
#[derive(Default)]
pub struct RefusalCounter {
    inner: Mutex<Minute>,
}

/// The minute being counted and the refusals per (account, principal) in it.
type Minute = (i64, HashMap<(String, String), u64>);

impl RefusalCounter {
    /// Counts one refusal at `now_ms` and says what to write.
    pub fn note(&self, account: &str, principal: &str, now_ms: i64) -> Verdict {
        let minute = now_ms.div_euclid(60_000);
        let Ok(mut guard) = self.inner.lock() else {
            return Verdict::Drop;
        };
        let (current, counts) = &mut *guard;
        if minute > *current {
            *current = minute;
            counts.clear();
        }
        let key = (account.to_owned(), principal.to_owned());
        if !counts.contains_key(&key) && counts.len() >= MAX_TRACKED_PER_MINUTE {
            return Verdict::Drop;
        }
        let n = counts.entry(key).or_insert(0);
        *n += 1;
        if *n <= MAX_REFUSALS_PER_MINUTE {
            Verdict::Record
        } else {
            Verdict::Summary(*n - MAX_REFUSALS_PER_MINUTE)
        }
    }
}
