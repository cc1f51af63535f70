//! Counters for the observability work: plain atomics, read through [`AzureStats::snapshot`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Process-wide counters of the Azure client, shared by every member. Monotonic.
#[derive(Debug, Default)]
pub struct AzureStats {
    pub(crate) list_calls: AtomicU64,
    pub(crate) arm_requests: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) limiter_wait_nanos: AtomicU64,
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
}

impl AzureStats {
    /// The counters now.
    pub fn snapshot(&self) -> AzureStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AzureStatsSnapshot {
            list_calls: get(&self.list_calls),
            arm_requests: get(&self.arm_requests),
            cache_hits: get(&self.cache_hits),
            cache_misses: get(&self.cache_misses),
            retries: get(&self.retries),
            throttled: get(&self.throttled),
            limiter_wait: Duration::from_nanos(get(&self.limiter_wait_nanos)),
        }
    }

    pub(crate) fn incr(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_limiter_wait(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.limiter_wait_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}
