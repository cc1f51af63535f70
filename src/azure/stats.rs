//! Counters for the observability work: plain atomics, read through [`AzureStats::snapshot`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Process-wide counters of the Azure client, shared by every member. Monotonic.
#[derive(Debug, Default)]
pub struct AzureStats {
    pub(crate) list_calls: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    /// The ARM transport stack.
    pub(crate) arm: Arc<TransportStats>,
    /// The token transport stack (credential requests to Entra ID / IMDS).
    pub(crate) token: Arc<TransportStats>,
}

/// What one transport stack counts; its layers hold an `Arc` of it.
#[derive(Debug, Default)]
pub(crate) struct TransportStats {
    /// Attempts sent (every page, every retry).
    requests: AtomicU64,
    /// 429 answers.
    throttled: AtomicU64,
    /// Attempts after the first.
    retries: AtomicU64,
    /// Time spent waiting for the stack's token bucket.
    limiter_wait_nanos: AtomicU64,
}

impl TransportStats {
    pub(crate) fn record_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_throttled(&self) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_limiter_wait(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.limiter_wait_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    pub(crate) fn limiter_wait(&self) -> Duration {
        Duration::from_nanos(self.limiter_wait_nanos.load(Ordering::Relaxed))
    }
}

/// A copy of the counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AzureStatsSnapshot {
    /// Public IP LIST operations started against ARM (one per cache refresh; all its pages and
    /// retries count once).
    pub list_calls: u64,
    /// HTTP requests sent to ARM (every page, every retry).
    pub arm_requests: u64,
    /// Lookups answered from the cache without waiting for ARM (found or known-absent).
    pub cache_hits: u64,
    /// Lookups that had to wait for a LIST (started one or joined the one in flight).
    pub cache_misses: u64,
    /// ARM requests re-sent after 429 / 5xx / timeout / transport error.
    pub retries: u64,
    /// 429 responses received from ARM.
    pub throttled: u64,
    /// Total time ARM requests waited for the shared rate limiter.
    pub limiter_wait: Duration,
    /// The token transport's counters.
    pub token: TokenStatsSnapshot,
}

/// A copy of the token transport's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenStatsSnapshot {
    /// HTTP requests sent to the token endpoint (Entra ID or IMDS), every retry included.
    pub requests: u64,
    /// Token requests re-sent after 429 / 5xx / timeout / transport error.
    pub retries: u64,
    /// 429 responses received from the token endpoint.
    pub throttled: u64,
}

impl AzureStats {
    /// The counters now.
    pub fn snapshot(&self) -> AzureStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AzureStatsSnapshot {
            list_calls: get(&self.list_calls),
            arm_requests: self.arm.requests(),
            cache_hits: get(&self.cache_hits),
            cache_misses: get(&self.cache_misses),
            retries: self.arm.retries(),
            throttled: self.arm.throttled(),
            limiter_wait: self.arm.limiter_wait(),
            token: self.token_snapshot(),
        }
    }

    /// The token transport's counters now.
    pub fn token_snapshot(&self) -> TokenStatsSnapshot {
        TokenStatsSnapshot {
            requests: self.token.requests(),
            retries: self.token.retries(),
            throttled: self.token.throttled(),
        }
    }

    pub(crate) fn incr(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
