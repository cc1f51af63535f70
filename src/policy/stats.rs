//! The counters of a client stack: every attempt by verb, resource and status, the time spent
//! waiting for tokens and slots, and the retries.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{RequestKind, is_write_verb};

/// Requests of one (verb, resource, code).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestCount {
    pub verb: &'static str,
    pub resource: String,
    /// HTTP status, or `None` when no response arrived (transport error, timeout).
    pub code: Option<u16>,
    pub count: u64,
}

impl RequestCount {
    /// Whether the request changed state.
    pub fn is_write(&self) -> bool {
        is_write_verb(self.verb)
    }
}

/// `(verb, resource, status code)`.
type RequestKey = (&'static str, String, Option<u16>);

/// The counters of one stack, read by `/metrics` and by tests. Cheap to update from many tasks.
#[derive(Debug, Default)]
pub struct ClientStats {
    requests: Mutex<BTreeMap<RequestKey, u64>>,
    wait_micros: AtomicU64,
    pub(super) retries: AtomicU64,
}

impl ClientStats {
    pub(super) fn record(&self, kind: &RequestKind, code: Option<u16>) {
        let mut map = self.requests.lock();
        *map.entry((kind.verb, kind.resource.clone(), code))
            .or_default() += 1;
    }

    pub(super) fn add_wait(&self, waited: Duration) {
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.wait_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Attempts sent again by the retry layer (each is also counted as a request).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Every counter, sorted.
    pub fn snapshot(&self) -> Vec<RequestCount> {
        let map = self.requests.lock();
        map.iter()
            .map(|((verb, resource, code), count)| RequestCount {
                verb,
                resource: resource.clone(),
                code: *code,
                count: *count,
            })
            .collect()
    }

    /// Total requests matching `pred`.
    pub fn count_where(&self, pred: impl Fn(&RequestCount) -> bool) -> u64 {
        self.snapshot()
            .iter()
            .filter(|c| pred(c))
            .map(|c| c.count)
            .sum()
    }

    /// Every attempt sent.
    pub fn requests(&self) -> u64 {
        self.count_where(|_| true)
    }

    /// 429 answers.
    pub fn throttled(&self) -> u64 {
        self.count_where(|c| c.code == Some(429))
    }

    /// Requests that change state (create, update, patch, delete), Events not counted.
    pub fn writes_excluding_events(&self) -> u64 {
        self.count_where(|c| c.is_write() && c.resource != "events")
    }

    /// Time spent waiting for a token or a slot.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.wait_micros.load(Ordering::Relaxed))
    }
}
