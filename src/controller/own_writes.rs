//! Read-your-writes over the views: what this exporter wrote, until its view shows it.
//!
//! A view (watch cache) may lag our own writes. Deciding on the lagging view would repeat a
//! write (an ISE create answered 409, a status patch refused for its stale resourceVersion), so
//! a write is remembered with the resourceVersions it superseded, and while the view shows one
//! of those, the decision reads what the API answered to our write instead.
//!
//! A write is forgotten once the view shows anything else, and in any case 5 minutes after it
//! was made: a view that far behind relists, and an object deleted meanwhile (no reconcile to
//! read its entry again) must not keep its entry for good. Forgetting early costs at most one
//! refused write and a live read.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::streaks::shrink_when_sparse;

/// How long a write is remembered at most.
const FORGET_AFTER: Duration = Duration::from_secs(300);

/// Our writes by object, each with the versions it superseded (`None`: the view had no object).
pub(crate) struct OwnWrites<K, T> {
    writes: Mutex<HashMap<K, Write<T>>>,
}

struct Write<T> {
    superseded: Vec<Option<String>>,
    /// Boxed: the map keeps its largest capacity until it empties, in buckets of one write.
    after: Box<T>,
    at: Instant,
}

impl<K, T> Default for OwnWrites<K, T> {
    fn default() -> Self {
        Self {
            writes: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq, T: Clone> OwnWrites<K, T> {
    /// Our last write of `key` while the view shows `view_rv`, a version it superseded; `None`
    /// (and the write forgotten) once the view shows anything else, or if nothing was written.
    pub(crate) fn over(&self, key: &K, view_rv: Option<&str>) -> Option<T> {
        let mut writes = self.writes.lock();
        let write = writes.get(key)?;
        let fresh = write.at.elapsed() < FORGET_AFTER;
        if fresh && write.superseded.iter().any(|s| s.as_deref() == view_rv) {
            Some(T::clone(&write.after))
        } else {
            writes.remove(key);
            shrink_when_sparse(&mut writes);
            None
        }
    }

    /// Remembers `after`, written over the versions in `superseded`, and over those an earlier
    /// write of ours superseded (the view has not caught up with that one either).
    pub(crate) fn wrote(
        &self,
        key: K,
        superseded: impl IntoIterator<Item = Option<String>>,
        after: T,
    ) {
        let mut writes = self.writes.lock();
        let now = Instant::now();
        writes.retain(|_, w| now.duration_since(w.at) < FORGET_AFTER);
        let mut all = writes
            .remove(&key)
            .map(|w| w.superseded)
            .unwrap_or_default();
        all.extend(superseded);
        writes.insert(
            key,
            Write {
                superseded: all,
                after: Box::new(after),
                at: now,
            },
        );
    }

    pub(crate) fn forget(&self, key: &K) {
        let mut writes = self.writes.lock();
        if writes.remove(key).is_some() {
            shrink_when_sparse(&mut writes);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.writes.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rv(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn a_write_is_read_until_the_view_shows_a_version_it_did_not_supersede() {
        let own: OwnWrites<&str, &str> = OwnWrites::default();
        assert_eq!(own.over(&"a", Some("1")), None, "nothing written");
        // Two writes in one reconcile: 1 → 2 → 3.
        own.wrote("a", [rv("1"), rv("2")], "written at 3");
        assert_eq!(own.over(&"a", Some("1")), Some("written at 3"));
        assert_eq!(own.over(&"a", Some("2")), Some("written at 3"));
        // Written again on top of it while the view still lagged: 3 → 4.
        own.wrote("a", [rv("3")], "written at 4");
        assert_eq!(own.over(&"a", Some("1")), Some("written at 4"));
        // The view caught up (or someone else wrote): the view is read, the write forgotten.
        assert_eq!(own.over(&"a", Some("4")), None);
        assert_eq!(own.over(&"a", Some("1")), None, "forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_view_never_read_again_is_forgotten_after_five_minutes() {
        let own: OwnWrites<&str, Option<&str>> = OwnWrites::default();
        // An ISE deleted along with its export: no reconcile reads its entry again.
        own.wrote("deleted", [rv("7")], None);
        tokio::time::advance(Duration::from_secs(299)).await;
        own.wrote("other", [rv("1")], Some("x"));
        assert_eq!(own.len(), 2);
        assert_eq!(
            own.over(&"deleted", Some("7")),
            Some(None),
            "still remembered"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        own.wrote("third", [rv("1")], Some("y"));
        assert_eq!(own.len(), 2, "the write of 301 s ago is gone");
        assert_eq!(own.over(&"deleted", Some("7")), None);
    }

    #[test]
    fn a_create_is_read_while_the_view_has_no_object() {
        let own: OwnWrites<&str, Option<&str>> = OwnWrites::default();
        own.wrote("ise", [None], Some("created"));
        assert_eq!(own.over(&"ise", None), Some(Some("created")));
        own.forget(&"ise");
        assert_eq!(own.over(&"ise", None), None);
    }
}
