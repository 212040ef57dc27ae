//! The rate limiter of the OAuth2 token routes (`POST /v1/oauth/tokens` and
//! `POST /iceberg/v1/oauth/tokens`, `flotilla_http::oauth`): failed exchanges are counted in
//! fixed windows under three keys, and a request any of its keys is over is refused with
//! `429` before its secret is checked.
//!
//! - **client and source** (a client id from one address): the tightest bucket, so one
//!   address guessing one client's secret is stopped first;
//! - **source** (one address, any client id): an address spraying many client ids;
//! - **client** (one client id, any address): looser, so a guesser spread over many
//!   addresses is bounded too, while one address alone (held by its own two buckets) cannot
//!   fill it and lock the real client out.
//!
//! Only failures count. Each attempt reserves one failure in its buckets before the secret
//! is checked (so a concurrent burst cannot pass the check all at once), and a successful
//! exchange gives the reservation back and clears its client-and-source bucket: a client
//! that knows its secret is never slowed while its buckets are under their limits.
//!
//! Client ids are kept as keyed hashes (a client id of any length costs a fixed few bytes),
//! and the map holds at most [`TokenLimits::max_keys`] buckets: a new bucket past that
//! evicts the one whose window started first (expired windows are always the oldest), so
//! random client ids cannot exhaust memory. The buckets live in the process: on `flotilla
//! serve` the limits are per process, on AWS per Lambda instance (each warm instance counts
//! on its own).

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::Mutex;

/// The address a request came from, as the host established it, in the request's
/// extensions (which clients cannot set): the Lambda adapter inserts the address API Gateway
/// saw (`requestContext.http.sourceIp`). `flotilla serve` needs none: the connection's peer
/// is the source there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceAddr(pub IpAddr);

/// The limits of the token routes.
#[derive(Clone, Debug)]
pub struct TokenLimits {
    /// The window failures are counted in.
    pub window_ms: i64,
    /// Failures of one client id from one address per window.
    pub per_client_and_source: u32,
    /// Failures from one address per window, whatever the client id.
    pub per_source: u32,
    /// Failures of one client id per window, whatever the address.
    pub per_client: u32,
    /// Buckets kept at most (about 80 bytes each).
    pub max_keys: usize,
}

impl Default for TokenLimits {
    fn default() -> Self {
        Self {
            window_ms: 60_000,
            per_client_and_source: 10,
            per_source: 30,
            per_client: 100,
            max_keys: 65_536,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    ClientAndSource(u64, Option<IpAddr>),
    Source(Option<IpAddr>),
    Client(u64),
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    window_start_ms: i64,
    failures: u32,
    /// Orders buckets by window start in [`Buckets::by_start`].
    seq: u64,
}

#[derive(Debug, Default)]
struct Buckets {
    map: HashMap<Key, Bucket>,
    /// (window start, seq) of every bucket: the first is the one to evict.
    by_start: BTreeMap<(i64, u64), Key>,
    next_seq: u64,
}

/// The token routes' failure counters (one per process: [`crate::state::AppState`] holds it).
#[derive(Debug)]
pub struct TokenLimiter {
    limits: TokenLimits,
    hasher: RandomState,
    buckets: Mutex<Buckets>,
}

impl Default for TokenLimiter {
    fn default() -> Self {
        Self::new(TokenLimits::default())
    }
}

/// An admitted attempt: settle it with [`TokenLimiter::succeeded`] or
/// [`TokenLimiter::failed`] once the exchange answered.
#[derive(Debug)]
#[must_use]
pub struct Attempt {
    keys: Vec<(Key, i64)>,
}

impl TokenLimiter {
    pub fn new(limits: TokenLimits) -> Self {
        Self {
            limits,
            hasher: RandomState::new(),
            buckets: Mutex::new(Buckets::default()),
        }
    }

    pub fn limits(&self) -> &TokenLimits {
        &self.limits
    }

    /// Buckets held now (for the bound's test).
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        // A panic while holding the lock leaves counters, not broken invariants.
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keys(&self, client_id: Option<&str>, source: Option<IpAddr>) -> Vec<(Key, u32)> {
        let mut keys = vec![(Key::Source(source), self.limits.per_source)];
        if let Some(id) = client_id.filter(|id| !id.is_empty()) {
            let h = self.hasher.hash_one(id);
            keys.push((
                Key::ClientAndSource(h, source),
                self.limits.per_client_and_source,
            ));
            keys.push((Key::Client(h), self.limits.per_client));
        }
        keys
    }

    /// Admits an attempt of `client_id` from `source` (`None`: the host does not know the
    /// address, and all such attempts share one source bucket), reserving one failure in
    /// each of its buckets; or refuses it with the whole seconds until its fullest bucket's
    /// window ends (at least 1).
    pub fn admit(
        &self,
        client_id: Option<&str>,
        source: Option<IpAddr>,
        now_ms: i64,
    ) -> Result<Attempt, u64> {
        let keys = self.keys(client_id, source);
        let window = self.limits.window_ms.max(1);
        let mut b = self.lock();
        let mut retry_after_ms: Option<i64> = None;
        for (key, limit) in &keys {
            if let Some(bucket) = b.map.get(key) {
                let ends = bucket.window_start_ms.saturating_add(window);
                if now_ms < ends && bucket.failures >= *limit {
                    let wait = ends - now_ms;
                    retry_after_ms = Some(retry_after_ms.map_or(wait, |w| w.max(wait)));
                }
            }
        }
        if let Some(ms) = retry_after_ms {
            let secs = u64::try_from(ms.saturating_add(999) / 1000)
                .unwrap_or(1)
                .max(1);
            return Err(secs);
        }
        let mut reserved = Vec::with_capacity(keys.len());
        for (key, _) in keys {
            let start = b.reserve(key, now_ms, window, self.limits.max_keys);
            reserved.push((key, start));
        }
        Ok(Attempt { keys: reserved })
    }

    /// The exchange failed: the reservation stays counted.
    pub fn failed(&self, attempt: Attempt) {
        drop(attempt);
    }

    /// The exchange succeeded: the reservation is given back and the client-and-source
    /// bucket is cleared.
    pub fn succeeded(&self, attempt: Attempt) {
        self.give_back(attempt, true);
    }

    /// The exchange could not be judged (the service or the identity provider failed): the
    /// reservation is given back.
    pub fn released(&self, attempt: Attempt) {
        self.give_back(attempt, false);
    }

    fn give_back(&self, attempt: Attempt, clear_pair: bool) {
        let mut b = self.lock();
        for (key, start) in attempt.keys {
            if clear_pair && matches!(key, Key::ClientAndSource(..)) {
                b.remove(&key);
                continue;
            }
            if let Some(bucket) = b.map.get_mut(&key)
                && bucket.window_start_ms == start
            {
                bucket.failures = bucket.failures.saturating_sub(1);
            }
        }
    }
}

impl Buckets {
    /// Counts one failure under `key` (a new window when its last one ended), evicting the
    /// oldest bucket when a new one would pass `max_keys`. Answers the window's start.
    fn reserve(&mut self, key: Key, now_ms: i64, window: i64, max_keys: usize) -> i64 {
        if let Some(bucket) = self.map.get(&key).copied() {
            if now_ms < bucket.window_start_ms.saturating_add(window) {
                let bucket = self.map.get_mut(&key).expect("present");
                bucket.failures = bucket.failures.saturating_add(1);
                return bucket.window_start_ms;
            }
            self.remove(&key);
        }
        while self.map.len() >= max_keys.max(1) {
            let Some((_, oldest)) = self.by_start.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.map.insert(
            key,
            Bucket {
                window_start_ms: now_ms,
                failures: 1,
                seq,
            },
        );
        self.by_start.insert((now_ms, seq), key);
        now_ms
    }

    fn remove(&mut self, key: &Key) {
        if let Some(bucket) = self.map.remove(key) {
            self.by_start.remove(&(bucket.window_start_ms, bucket.seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn failures_past_the_limit_are_refused_until_the_window_ends() {
        let l = TokenLimiter::default();
        for _ in 0..10 {
            let a = l.admit(Some("c"), ip("10.0.0.1"), 1_000).unwrap();
            l.failed(a);
        }
        assert_eq!(l.admit(Some("c"), ip("10.0.0.1"), 1_000).unwrap_err(), 60);
        assert_eq!(l.admit(Some("c"), ip("10.0.0.1"), 30_500).unwrap_err(), 31);
        // Another address, same client: admitted (the client bucket is looser).
        l.succeeded(l.admit(Some("c"), ip("10.0.0.2"), 1_000).unwrap());
        // The window ends: admitted again.
        l.failed(l.admit(Some("c"), ip("10.0.0.1"), 61_000).unwrap());
    }

    #[test]
    fn successes_are_given_back() {
        let l = TokenLimiter::default();
        for _ in 0..1_000 {
            l.succeeded(l.admit(Some("c"), ip("10.0.0.1"), 1_000).unwrap());
        }
    }

    #[test]
    fn the_map_stays_bounded() {
        // 100,000 random client ids from one address whose own bucket never trips: the map
        // stays at its bound, evicting the oldest buckets.
        let l = TokenLimiter::new(TokenLimits {
            per_source: u32::MAX,
            ..TokenLimits::default()
        });
        let max = l.limits().max_keys;
        for i in 0..100_000 {
            let id = format!("random-{i}");
            l.failed(l.admit(Some(&id), ip("10.0.0.1"), i).unwrap());
            assert!(l.len() <= max);
        }
        assert_eq!(l.len(), max);
        assert_eq!(l.lock().by_start.len(), max);
    }
}
