//! One watch of a member kind whose readers each keep their own view of it: the member's
//! Services, EndpointSlices, MultiClusterServices and ServiceImports are each read by two or
//! three jobs, each of which keeps a different part of them (all namespaces or the fleet
//! system namespace only; a small projection or the whole object). A watch costs at least its
//! 8 KiB line buffer and its stream state per member: one per kind, not one per reader.
//!
//! Unlike [`super::feed::Feed`] (one store every subscriber reads), a tap keeps no store of
//! its own: it hands each event to every reader ([`Tap::view`]), which keeps what it needs of
//! it in a store of its own type and reacts to what it touched. The watch's first list and
//! failures are told to each reader's [`WatchHealth`], as one of its job's own views: a
//! missing CRD fails every job that reads the kind, and a job recovers once all its views
//! have. A tap nobody reads does not watch ([`Tap::run`]).

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::views::{View, WatchHealth, shared_watch, view_watch};

/// What one reader does with each event of the watch.
type Reader<K> = Box<dyn FnMut(&Event<K>) + Send>;
/// What one reader's job's health hears of the watch.
type Inspector<K> = Box<dyn FnMut(&Result<Event<K>, watcher::Error>) + Send>;
/// How many objects one reader's view holds.
type Size = Box<dyn Fn() -> usize + Send + Sync>;

/// The watch before it runs: each job takes its view ([`Tap::view`]), then it runs
/// ([`Tap::run`]).
pub struct Tap<K: kube::Resource<DynamicType = ()> + 'static> {
    api: Api<K>,
    readers: Vec<Reader<K>>,
    inspectors: Vec<Inspector<K>>,
    /// The readers' view sizes: the watch holds [`super::views::MAX_OBJECTS_PER_VIEW`] to
    /// the largest.
    sizes: Arc<Mutex<Vec<Size>>>,
}

/// What a reader keeps of the objects of a tap: `keep` says which are its, `reduce` makes its
/// projection of one.
pub struct Keep<K, V> {
    pub keep: Box<dyn Fn(&K) -> bool + Send>,
    pub reduce: fn(K) -> V,
}

impl<K, V> Keep<K, V> {
    /// Keeps the objects `keep` says are the reader's, reduced by `reduce`.
    pub fn new(keep: impl Fn(&K) -> bool + Send + 'static, reduce: fn(K) -> V) -> Self {
        Self {
            keep: Box::new(keep),
            reduce,
        }
    }
}

impl<K> Tap<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// The watch of `api` (every object of it).
    pub fn over(api: Api<K>) -> Self {
        Self {
            api,
            readers: Vec::new(),
            inspectors: Vec::new(),
            sizes: Arc::default(),
        }
    }

    /// A reader: the objects `keep` keeps, reduced, in a store of its own; `touched` hears of
    /// each event as the store takes it (an object that leaves what `keep` keeps is told as
    /// deleted; a list's objects are told as they come, before the store has the list whole
    /// at its end, as a reflector tells them). The watch's first list and failures are told
    /// to `health` as its `view`: the watch is one of the reading job's views.
    pub(crate) fn view<V>(
        &mut self,
        (health, view): (&Arc<WatchHealth>, View),
        keep: Keep<K, V>,
        mut touched: impl FnMut(&Event<V>) + Send + 'static,
    ) -> Store<V>
    where
        V: Lookup + Clone + Send + Sync + 'static,
        V::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.inspectors.push(Box::new(health.inspector(view)));
        let mut writer = reflector::store::Writer::<V>::default();
        let store = writer.as_reader();
        let mine = store.clone();
        self.readers.push(Box::new(move |event: &Event<K>| {
            let Some(event) = reduced(event, &keep, &mine) else {
                return;
            };
            writer.apply_watcher_event(&event);
            touched(&event);
        }));
        let size = store.clone();
        self.sizes.lock().push(Box::new(move || size.len()));
        store
    }

    /// A reader that keeps nothing: `seen` hears of every event as it comes (what a job
    /// looks at without keeping it, beside its [`Tap::view`], whose health tells of the watch).
    pub fn also(&mut self, seen: impl FnMut(&Event<K>) + Send + 'static) {
        self.readers.push(Box::new(seen));
    }

    /// Runs the watch until `shutdown` resolves; at once when no job reads it (nothing is
    /// watched).
    pub fn run(self, shutdown: impl Future<Output = ()> + Send) -> impl Future<Output = ()> + Send {
        let Self {
            api,
            mut readers,
            mut inspectors,
            sizes,
        } = self;
        let idle = readers.is_empty();
        let size = move || sizes.lock().iter().map(|s| s()).max().unwrap_or(0);
        let watch = view_watch(api, watcher::Config::default(), size).for_each(move |event| {
            for inspect in &mut inspectors {
                inspect(&event);
            }
            if let Ok(event) = event {
                for reader in &mut readers {
                    reader(&event);
                }
            }
            futures::future::ready(())
        });
        shared_watch(idle, watch, shutdown)
    }
}

/// The event as a reader keeps it: its objects that `keep` keeps, reduced; one it does not keep
/// deleted if `store` has it (it left the reader's selection), else nothing.
fn reduced<K, V>(event: &Event<K>, keep: &Keep<K, V>, store: &Store<V>) -> Option<Event<V>>
where
    K: kube::Resource + Clone,
    V: Lookup + Clone + 'static,
    V::DynamicType: Default + Eq + Hash + Clone,
{
    let ours = |o: &K| (keep.keep)(o);
    let held = |o: &K| {
        let key = ObjectRef::<V>::new_with(&o.name_any(), V::DynamicType::default())
            .within(&ResourceExt::namespace(o).unwrap_or_default());
        store.get(&key).is_some()
    };
    let reduce = |o: &K| (keep.reduce)(o.clone());
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(o) if ours(o) => Event::InitApply(reduce(o)),
        Event::InitApply(_) => return None,
        Event::Apply(o) if ours(o) => Event::Apply(reduce(o)),
        Event::Apply(o) | Event::Delete(o) if ours(o) || held(o) => Event::Delete(reduce(o)),
        Event::Apply(_) | Event::Delete(_) => return None,
    })
}

/// Keeps every object of a kind as it comes, without its managed fields (read by nobody).
pub fn whole<K: kube::Resource>(mut o: K) -> K {
    o.meta_mut().managed_fields = None;
    o
}

/// Keeps every object.
pub fn every<K>(_: &K) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn service(ns: &str, name: &str, labelled: bool) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some(ns.into());
        if labelled {
            s.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
        }
        s
    }

    fn labelled(s: &Service) -> bool {
        s.labels().contains_key("l")
    }

    #[test]
    fn a_reader_keeps_its_own_and_hears_of_one_leaving_it_as_deleted() {
        let keep = Keep::new(labelled, whole::<Service>);
        let (store, mut writer) = reflector::store::<Service>();
        let mut apply = |e: &Event<Service>| {
            let e = reduced(e, &keep, &store);
            if let Some(e) = &e {
                writer.apply_watcher_event(e);
            }
            e.map(|e| match e {
                Event::Apply(_) => "apply",
                Event::Delete(_) => "delete",
                Event::InitApply(_) => "init-apply",
                Event::Init | Event::InitDone => "init",
            })
        };
        assert_eq!(apply(&Event::Apply(service("a", "x", false))), None);
        assert_eq!(apply(&Event::Delete(service("a", "x", false))), None);
        assert_eq!(
            apply(&Event::InitApply(service("a", "x", false))),
            None,
            "a list keeps only its own"
        );
        assert_eq!(apply(&Event::Apply(service("a", "y", true))), Some("apply"));
        assert_eq!(
            apply(&Event::Apply(service("a", "y", false))),
            Some("delete"),
            "left the reader's selection"
        );
        assert_eq!(store.state().len(), 0);
        assert_eq!(apply(&Event::Apply(service("a", "y", false))), None);
    }
}
