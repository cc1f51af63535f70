//! [`AzureStats`]: the process-wide counters of the Azure client (cache, LISTs, both request
//! stacks) and their snapshots. Plain counters, written by the cache and the stacks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::policy::ClientStats;

/// Process-wide counters of the Azure client, shared by every member. Monotonic.
#[derive(Debug, Default)]
pub struct AzureStats {
    pub(crate) list_calls: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) groups_evicted: AtomicU64,
    pub(crate) truncated_lists: AtomicU64,
    /// The ARM stack.
    pub(super) arm: Arc<ClientStats>,
    /// The token stack (credential requests to Entra ID / IMDS).
    pub(super) token: Arc<ClientStats>,
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
    /// ARM requests re-sent after 429 / 408 / 5xx / timeout / transport error.
    pub retries: u64,
    /// 429 responses received from ARM.
    pub throttled: u64,
    /// Total time ARM requests waited for the shared rate limiter (token and slot).
    pub limiter_wait: Duration,
    /// The token stack's counters.
    pub token: TokenStatsSnapshot,
    /// Resource groups dropped from the cache: unused for a TTL, or the least recently used
    /// when `max_cached_groups` were kept.
    pub groups_evicted: u64,
    /// LISTs cut at `max_public_ips_per_group`.
    pub truncated_lists: u64,
}

/// A copy of the token stack's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenStatsSnapshot {
    /// HTTP requests sent to the token endpoint (Entra ID or IMDS), every retry included.
    pub requests: u64,
    /// Token requests re-sent after 429 / 408 / 5xx / timeout / transport error.
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
            limiter_wait: self.arm.waited(),
            token: TokenStatsSnapshot {
                requests: self.token.requests(),
                retries: self.token.retries(),
                throttled: self.token.throttled(),
            },
            groups_evicted: get(&self.groups_evicted),
            truncated_lists: get(&self.truncated_lists),
        }
    }
}
