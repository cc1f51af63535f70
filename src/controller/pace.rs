//! What an exporter's runner is given to reconcile, no faster than it reconciles.
//!
//! kube-runtime's scheduler kept every name it was handed in three tables (its schedule, its
//! delay queue, and the names waiting for a free reconcile slot) that keep their size once
//! grown: a member's first list of 250 exports left ~200 KiB per controller behind, for the
//! process's life. Here the triggers of every watch wait in one set (one entry per name, given
//! back when it empties), and the runner ([`super::runner`]) is handed a name only while fewer
//! than `limit` handed names have not come out of it yet.

use std::collections::HashSet;
use std::hash::Hash;

use futures::Stream;
use kube::runtime::reflector::{Lookup, ObjectRef};
use parking_lot::Mutex;
use tokio::sync::Notify;

pub(crate) struct Pace<K: Lookup> {
    state: Mutex<State<K>>,
    changed: Notify,
    limit: usize,
}

struct State<K: Lookup> {
    /// Triggered, not handed yet.
    waiting: HashSet<ObjectRef<K>>,
    /// Handed, not out of the runner yet (at most `limit`; not kept without a limit).
    handed: HashSet<ObjectRef<K>>,
}

impl<K> Pace<K>
where
    K: Lookup + 'static,
    K::DynamicType: Hash + Eq + Clone + Send + Sync,
{
    /// Hands at most `limit` names at once (the runner's concurrency; 0: no limit).
    pub(crate) fn new(limit: u16) -> Self {
        Self {
            state: Mutex::new(State {
                waiting: HashSet::new(),
                handed: HashSet::new(),
            }),
            changed: Notify::new(),
            limit: if limit == 0 { usize::MAX } else { limit.into() },
        }
    }

    /// `key` is to be reconciled. Never waits.
    pub(crate) fn trigger(&self, key: ObjectRef<K>) {
        self.trigger_all(std::iter::once(key));
    }

    /// Each of `keys` is to be reconciled. Never waits.
    pub(crate) fn trigger_all(&self, keys: impl IntoIterator<Item = ObjectRef<K>>) {
        let mut state = self.state.lock();
        let before = state.waiting.len();
        state.waiting.extend(keys);
        if state.waiting.len() != before {
            // Kept as a permit when the stream is not waiting: no wake-up is lost.
            self.changed.notify_one();
        }
    }

    /// Triggers each name `triggers` yields, until it ends (the watches behind it never do).
    pub(crate) fn take_from(
        self: std::sync::Arc<Self>,
        triggers: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> futures::future::BoxFuture<'static, ()> {
        use futures::{FutureExt, StreamExt};
        triggers
            .for_each(move |key| {
                self.trigger(key);
                futures::future::ready(())
            })
            .boxed()
    }

    /// A reconcile of `key` came out of the runner (done, failed, or its object gone).
    pub(crate) fn done(&self, key: &ObjectRef<K>) {
        let mut state = self.state.lock();
        if state.handed.remove(key) {
            if state.handed.is_empty() {
                state.handed = HashSet::new();
            }
            self.changed.notify_one();
        }
    }

    /// The names to reconcile, each handed once per trigger at most; never ends.
    pub(crate) fn stream(
        self: std::sync::Arc<Self>,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static {
        futures::stream::unfold(self, |pace| async move {
            loop {
                if let Some(key) = pace.next() {
                    return Some((key, pace));
                }
                pace.changed.notified().await;
            }
        })
    }

    fn next(&self) -> Option<ObjectRef<K>> {
        let mut state = self.state.lock();
        let State { waiting, handed } = &mut *state;
        if handed.len() >= self.limit {
            return None;
        }
        // It may be a handed name again: the runner runs it once more after the running one;
        // it takes no new room.
        let key = waiting.iter().next()?.clone();
        waiting.remove(&key);
        if waiting.is_empty() {
            *waiting = HashSet::new();
        }
        if self.limit != usize::MAX {
            handed.insert(key.clone());
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;
    use std::time::Duration;

    fn key(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("ns")
    }

    async fn next_within(
        stream: &mut (impl Stream<Item = ObjectRef<ConfigMap>> + Unpin),
    ) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(50), stream.next())
            .await
            .ok()
            .flatten()
            .map(|k| k.name)
    }

    #[tokio::test]
    async fn hands_no_more_than_the_limit_until_one_comes_out() {
        let pace = Arc::new(Pace::<ConfigMap>::new(2));
        for name in ["a", "b", "c", "d"] {
            pace.trigger(key(name));
        }
        pace.trigger(key("a"));
        let mut stream = Box::pin(pace.clone().stream());
        let first = next_within(&mut stream).await.expect("one");
        let second = next_within(&mut stream).await.expect("two");
        assert_ne!(first, second);
        assert_eq!(next_within(&mut stream).await, None, "two are out at most");
        pace.done(&key(&first));
        let third = next_within(&mut stream).await.expect("room for one more");
        assert!(third != first && third != second);
        assert_eq!(next_within(&mut stream).await, None);
        // Done twice, or done for a name never handed: no room made up.
        pace.done(&key(&first));
        pace.done(&key("never"));
        assert_eq!(next_within(&mut stream).await, None);
        pace.done(&key(&second));
        pace.done(&key(&third));
        let mut rest = vec![next_within(&mut stream).await.expect("four")];
        rest.extend(next_within(&mut stream).await);
        let mut all = vec![first, second, third];
        all.extend(rest);
        all.sort();
        assert_eq!(all, ["a", "b", "c", "d"]);
        let state = pace.state.lock();
        assert_eq!(
            state.waiting.capacity(),
            0,
            "the emptied set gave its room back"
        );
    }

    #[tokio::test]
    async fn a_trigger_wakes_a_waiting_stream_and_no_limit_hands_everything() {
        let pace = Arc::new(Pace::<ConfigMap>::new(0));
        let mut stream = Box::pin(pace.clone().stream());
        let waiting = tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < 3 {
                got.push(stream.next().await.expect("never ends").name);
            }
            got.sort();
            got
        });
        tokio::task::yield_now().await;
        pace.clone()
            .take_from(futures::stream::iter(["x", "y", "z"].map(key)))
            .await;
        assert_eq!(waiting.await.unwrap(), ["x", "y", "z"]);
    }
}
