//! Runs an exporter's reconciles: each name its [`Pace`] hands is looked up in the view and
//! reconciled, never two of one name at a time, and comes back after the delay its reconcile
//! (or, when it failed, the error policy) asks for. How many run at once is the pace's limit:
//! it hands no more names than that until some come back.
//!
//! kube-runtime's `Controller` did this with tables of its own beside the pace (a scheduler, a
//! delay queue's timer wheel, the runner's slots, a reschedule channel): ~17 KiB per member
//! that a quiet member kept for good. Here a quiet member holds no name and no timer, and the
//! pace is the one queue of names.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Future, Stream, StreamExt};
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use tokio::time::Instant;

use super::pace::Pace;

/// What a reconcile asks for next: to run again after a delay (to recheck, or to retry), or
/// nothing until a watch triggers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action(Option<Duration>);

impl Action {
    /// Reconcile again after `delay`, unless a trigger runs it sooner.
    pub const fn requeue(delay: Duration) -> Self {
        Self(Some(delay))
    }

    /// Nothing until a watch triggers it.
    pub const fn await_change() -> Self {
        Self(None)
    }
}

/// What [`run`] works from: the names handed, the view they are looked up in, and the
/// reconcile's shared context.
pub(crate) struct Runner<K: Lookup + 'static, C>
where
    K::DynamicType: Hash + Eq,
{
    pub(crate) pace: Arc<Pace<K>>,
    pub(crate) store: Store<K>,
    /// The view's dynamic type (for the names of [`Runner::reconcile_all_on`]).
    pub(crate) dyntype: K::DynamicType,
    pub(crate) ctx: Arc<C>,
}

impl<K, C> Runner<K, C>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Send + Sync,
    C: Send + Sync + 'static,
{
    /// Reconciles what `keys` hands (the pace's stream, or one built on it) until `shutdown`
    /// resolves; the reconciles running then finish first. Each item of `reconcile_all`
    /// triggers every name in the view (leadership gained). Never ends otherwise.
    pub(crate) async fn run<E, F>(
        self,
        keys: impl Stream<Item = ObjectRef<K>> + Send,
        reconcile_all: impl Stream<Item = ()> + Send,
        shutdown: impl Future<Output = ()> + Send,
        mut reconcile: impl FnMut(Arc<K>, Arc<C>) -> F + Send,
        error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action + Send + Sync,
    ) where
        F: Future<Output = Result<Action, E>> + Send,
    {
        let Self {
            pace,
            store,
            dyntype,
            ctx,
        } = self;
        let mut keys = std::pin::pin!(keys.fuse());
        let mut reconcile_all = std::pin::pin!(reconcile_all.fuse());
        let mut shutdown = std::pin::pin!(futures::FutureExt::fuse(shutdown));
        let mut listed = std::pin::pin!(futures::FutureExt::fuse(listed(store.clone())));
        let mut ready = false;
        let mut running = FuturesUnordered::new();
        let mut timers = FuturesUnordered::new();
        let mut book = Book::<K>::default();
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown, if !stopping => stopping = true,
                () = &mut listed, if !ready => ready = true,
                Some((key, action)) = running.next(), if !running.is_empty() => {
                    if let Some(at) = book.finished(&key, action, Instant::now()) {
                        timers.push(Box::pin(timer(key.clone(), at)));
                    }
                    book.returned(&pace, key);
                }
                Some((key, at)) = timers.next(), if !stopping && !timers.is_empty() => {
                    if book.due(&key, at) {
                        pace.trigger(key);
                    }
                    book.shrink();
                }
                Some(()) = reconcile_all.next(), if !stopping => {
                    pace.trigger_all(store.state().iter().map(|o| o.to_object_ref(dyntype.clone())));
                }
                Some(key) = keys.next(), if ready && !stopping => {
                    let Some(object) = book.handed(&store, &pace, &key) else {
                        continue;
                    };
                    let work = reconcile(object.clone(), ctx.clone());
                    let ctx = ctx.clone();
                    let policy = &error_policy;
                    running.push(async move {
                        let action = match work.await {
                            Ok(action) => action,
                            Err(error) => policy(object, &error, ctx),
                        };
                        (key, action)
                    });
                }
                // Only when the names have ended and nothing runs or waits: until told to stop.
                else => {
                    (&mut shutdown).await;
                    stopping = true;
                }
            }
            if stopping && running.is_empty() {
                return;
            }
        }
    }
}

impl<K, C> Runner<K, C>
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Default + Send + Sync,
    C: Send + Sync + 'static,
{
    /// A runner of the names `pace` hands, looked up in `store`.
    pub(crate) fn over(pace: &Arc<Pace<K>>, store: Store<K>, ctx: Arc<C>) -> Self {
        Self {
            pace: pace.clone(),
            store,
            dyntype: K::DynamicType::default(),
            ctx,
        }
    }

    /// A job's runner as the jobs start it: reconciles the names its pace hands, each in the
    /// scratch arena ([`crate::memory`]), and every name in the view once more each time this
    /// replica gains `claim` (from the warm views; gains count from now), until `shutdown`
    /// ([`Runner::run`]).
    pub(crate) fn paced<E, F>(
        self,
        claim: crate::ownership::Claim,
        shutdown: impl Future<Output = ()> + Send,
        reconcile: impl Fn(Arc<K>, Arc<C>) -> F + Send,
        error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action + Send + Sync,
    ) -> impl Future<Output = ()>
    where
        F: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let keys = self.pace.clone().stream();
        let leadership = leadership_gained(&claim);
        let reconcile = move |object, ctx| crate::memory::scratch_future(reconcile(object, ctx));
        self.run(keys, leadership, shutdown, reconcile, error_policy)
    }
}

/// Runs `reconciles` until they are over, with `beside` (the triggers of the views, a
/// sweeper): these have no end of their own and stop with the reconciles.
pub(crate) async fn beside(reconciles: impl Future<Output = ()>, beside: impl Future<Output = ()>) {
    tokio::select! {
        () = reconciles => {}
        () = beside => {}
    }
}

/// Yields `()` each time `claim` is gained.
pub(crate) fn leadership_gained(
    claim: &crate::ownership::Claim,
) -> impl futures::Stream<Item = ()> + Send + 'static + use<> {
    futures::StreamExt::inspect(claim.gained(), |()| {
        tracing::info!("leadership acquired: reconciling every object");
    })
}

/// Resolves once `view` has its first list: names wait in the pace until then, since one looked
/// up before would be missing, not gone (as kube's runner held its tasks). A view whose writer
/// went never lists: its watch ended with the member, and shutdown follows.
async fn listed<K: Lookup + Clone + 'static>(view: Store<K>)
where
    K::DynamicType: Hash + Eq + Clone,
{
    if view.wait_until_ready().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves at `at` with `key`: the requeue of `key` set for then.
async fn timer<K: Lookup>(key: ObjectRef<K>, at: Instant) -> (ObjectRef<K>, Instant) {
    tokio::time::sleep_until(at).await;
    (key, at)
}

/// Which names are running, which were handed again meanwhile, and when each requeued name
/// is due. Each set gives its room back once empty.
struct Book<K: Lookup> {
    busy: HashSet<ObjectRef<K>>,
    /// Handed while running: run once more after.
    again: HashSet<ObjectRef<K>>,
    due: HashMap<ObjectRef<K>, Instant>,
}

impl<K: Lookup> Default for Book<K>
where
    K::DynamicType: Hash + Eq,
{
    fn default() -> Self {
        Self {
            busy: HashSet::new(),
            again: HashSet::new(),
            due: HashMap::new(),
        }
    }
}

impl<K: Lookup> Book<K>
where
    K::DynamicType: Hash + Eq + Clone,
{
    /// `key` was handed: whether to run it now (not while it runs already). Either way, the
    /// run supersedes a requeue it had waiting, as kube's scheduler keeps the earliest.
    fn start(&mut self, key: &ObjectRef<K>) -> bool {
        self.due.remove(key);
        if self.busy.contains(key) {
            self.again.insert(key.clone());
            return false;
        }
        self.busy.insert(key.clone());
        true
    }

    /// `key` was handed: the object to reconcile now, if it is in the view and does not run
    /// already. One gone from the view has nothing to reconcile (its deletion was handled
    /// where the watch saw it) and nothing due.
    fn handed(&mut self, store: &Store<K>, pace: &Pace<K>, key: &ObjectRef<K>) -> Option<Arc<K>>
    where
        K: Clone + 'static,
        K::DynamicType: Send + Sync,
    {
        let Some(object) = store.get(key) else {
            self.due.remove(key);
            if !self.busy.contains(key) {
                pace.done(key);
            }
            return None;
        };
        self.start(key).then_some(object)
    }

    /// `key`'s run is over (its timer, if any, set): the pace may hand it again, and does at
    /// once when it was handed meanwhile.
    fn returned(&mut self, pace: &Pace<K>, key: ObjectRef<K>)
    where
        K: 'static,
        K::DynamicType: Send + Sync,
    {
        pace.done(&key);
        if self.again.remove(&key) {
            pace.trigger(key);
        }
        self.shrink();
    }

    /// `key`'s run ended with `action`: the instant of the timer to set, if it asks for one
    /// sooner than one already set.
    fn finished(&mut self, key: &ObjectRef<K>, action: Action, now: Instant) -> Option<Instant> {
        self.busy.remove(key);
        let at = now + action.0?;
        match self.due.get(key) {
            Some(earlier) if *earlier <= at => None,
            _ => {
                self.due.insert(key.clone(), at);
                Some(at)
            }
        }
    }

    /// A timer set for `at` fired: whether `key` is still due then (a run since, or a sooner
    /// timer, made it stale).
    fn due(&mut self, key: &ObjectRef<K>, at: Instant) -> bool {
        if self.due.get(key) == Some(&at) {
            self.due.remove(key);
            true
        } else {
            false
        }
    }

    fn shrink(&mut self) {
        if self.busy.is_empty() {
            self.busy = HashSet::new();
        }
        if self.again.is_empty() {
            self.again = HashSet::new();
        }
        if self.due.is_empty() {
            self.due = HashMap::new();
        }
    }
}

#[cfg(test)]
mod tests;
