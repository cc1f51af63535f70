//! Consecutive failures (or rechecks) per object, for backoff. An object that goes away gets no
//! reconcile that would clear its count, so counts left untouched for an hour are dropped (the
//! longest backoff is 5 minutes) and a map that emptied gives its memory back.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A count not bumped for this long belongs to an object that went away.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// How often the forgotten are looked for (on a bump).
const PRUNE_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct Streaks<K> {
    inner: Mutex<Inner<K>>,
}

struct Inner<K> {
    counts: HashMap<K, (u32, Instant)>,
    pruned: Instant,
}

impl<K> Default for Streaks<K> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                counts: HashMap::new(),
                pruned: Instant::now(),
            }),
        }
    }
}

impl<K: Hash + Eq> Streaks<K> {
    /// Counts one more for `key` and returns its count.
    pub(crate) fn bump(&self, key: K) -> u32 {
        let mut inner = self.inner.lock();
        let now = Instant::now();
        if now.duration_since(inner.pruned) >= PRUNE_EVERY {
            inner.pruned = now;
            inner
                .counts
                .retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
            shrink_when_sparse(&mut inner.counts);
        }
        let (n, at) = inner.counts.entry(key).or_insert((0, now));
        *n = n.saturating_add(1);
        *at = now;
        *n
    }

    /// The streak of `key` is over.
    pub(crate) fn clear(&self, key: &K) {
        let mut inner = self.inner.lock();
        if inner.counts.remove(key).is_some() {
            shrink_when_sparse(&mut inner.counts);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().counts.len()
    }
}

/// Gives back a map's memory once it is mostly empty: a `HashMap` keeps the capacity of its
/// largest moment (a cold start of thousands of objects) for good otherwise.
pub(crate) fn shrink_when_sparse<K: Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 32 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_run_until_cleared_and_are_forgotten_an_hour_after_their_last_bump() {
        let streaks: Streaks<&str> = Streaks::default();
        assert_eq!(streaks.bump("a"), 1);
        assert_eq!(streaks.bump("a"), 2);
        streaks.clear(&"a");
        assert_eq!(streaks.bump("a"), 1, "a new streak");
        assert_eq!(streaks.bump("gone"), 1);
        tokio::time::advance(Duration::from_secs(1800)).await;
        streaks.bump("a");
        tokio::time::advance(Duration::from_secs(1801)).await;
        assert_eq!(streaks.bump("b"), 1);
        assert_eq!(
            streaks.len(),
            2,
            "`gone` (bumped 3,601 s ago) forgotten, `a` kept"
        );
        assert_eq!(streaks.bump("a"), 3);
    }

    #[test]
    fn a_map_that_emptied_gives_its_capacity_back() {
        let mut map: HashMap<u32, [u8; 512]> = (0..2500).map(|i| (i, [0; 512])).collect();
        let full = map.capacity();
        for i in 0..2490 {
            map.remove(&i);
            shrink_when_sparse(&mut map);
        }
        assert!(map.capacity() <= 64, "{} of {full}", map.capacity());
        assert_eq!(map.len(), 10);
    }
}
