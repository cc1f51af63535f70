//! One watch of a hub kind for the whole replica, its objects routed by namespace to the
//! members' jobs. Each member's jobs once listed and watched their own hub namespace: five
//! kinds, five LISTs and five watches per member, all in the replica's hub budget, so an
//! orphan taken over after a replica died waited for its turn (~6.6 s for 173 orphans), and
//! the hub carried five watches per member. Here a replica watches each kind once
//! (`Api::all`), keeps the (projected) objects of every member of the registry, owned here or
//! not, one store per hub namespace, and a member's job subscribes to its namespace
//! ([`HubTap::subscribe`]): the store, filled already, and its events, as a watch of that
//! namespace alone would give them (`Init`, the objects, `InitDone`, then each change). A
//! takeover reads nothing from the hub.
//!
//! What a per-namespace watch meant to its job holds: the job's view is listed when the
//! replica's watch has listed; its failures (a kind not served: "is its CRD installed?") reach
//! every reader of every namespace until the watch lists again; a namespace holds at most
//! [`MAX_OBJECTS_PER_VIEW`]. Objects of a namespace of no member are not kept. A namespace
//! the registry learns of after the first list is filled by one LIST of it ([`HubTap::know`]).
//! The kind is watched only if a job that runs reads it ([`HubTap::new`]'s `read`).

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use futures::stream::BoxStream;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{Lookup, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::views::{MAX_OBJECTS_PER_VIEW, hub_watch, over_cap};

/// A namespace's events, as a watch of it alone would give them.
pub type Followed<V> = BoxStream<'static, watcher::Result<Event<V>>>;

/// How long one replica watch lasts before it is re-established: one request per kind per 30
/// minutes, not kube's 295 s (our client has no read timeout; h2 pings find a dead connection).
const HUB_WATCH_TIMEOUT_S: u32 = 1800;

/// How long the watch waits for the registry's first complete list of members before it lists
/// anyway (a namespace learnt later is then filled by a LIST of its own).
const WAIT_FOR_MEMBERS: Duration = Duration::from_secs(30);

/// The replica's watch of one hub kind `K`, each object kept as `V`. Cloned freely: one watch.
pub struct HubTap<K, V: Lookup + Clone + 'static>
where
    V::DynamicType: Eq + Hash + Clone,
{
    inner: Arc<Inner<K, V>>,
}

impl<K, V: Lookup + Clone + 'static> Clone for HubTap<K, V>
where
    V::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K, V: Lookup + Clone + 'static>
where
    V::DynamicType: Eq + Hash + Clone,
{
    hub: kube::Client,
    reduce: fn(K) -> V,
    /// Whether a job that runs reads the kind: else nothing is watched.
    read: bool,
    routes: Mutex<Routes<V>>,
    /// Set once the registry has said which namespaces are its members' (all sources read).
    members_known: tokio::sync::watch::Sender<bool>,
}

impl<K, V> HubTap<K, V>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    K: Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    V: Lookup + Clone + Send + Sync + 'static,
    V::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// The watch of every `K` of `hub`, each object kept as `reduce` makes it; `read`: a job
    /// that runs reads it (else [`HubTap::run`] watches nothing).
    pub fn new(hub: &kube::Client, reduce: fn(K) -> V, read: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                hub: hub.clone(),
                reduce,
                read,
                routes: Mutex::new(Routes::default()),
                members_known: tokio::sync::watch::channel(false).0,
            }),
        }
    }

    /// The registry's members' hub namespaces: each kept from now on (one learnt after the
    /// watch listed is filled by a LIST of its own); with `complete` (every source of members
    /// read), the others are dropped, but for one a job still reads.
    pub fn members(&self, namespaces: &[String], complete: bool) {
        let fills: Vec<String> = {
            let mut routes = self.inner.routes.lock();
            if complete {
                routes.keep_only(&namespaces.iter().map(String::as_str).collect());
            }
            namespaces
                .iter()
                .filter(|ns| routes.know(ns))
                .cloned()
                .collect()
        };
        for ns in fills {
            self.fill(ns);
        }
        if complete {
            self.inner.members_known.send_replace(true);
        }
    }

    /// Keeps `namespace`'s objects from now on (a member's): see [`HubTap::members`].
    pub fn know(&self, namespace: &str) {
        if self.inner.routes.lock().know(namespace) {
            self.fill(namespace.to_string());
        }
    }

    /// A job's view of `namespace`: the store the tap keeps of it (the view's events change
    /// it before the job hears of them) and the events, from a list of what it holds now.
    pub fn subscribe(&self, namespace: &str) -> (Store<V>, Followed<V>) {
        let (store, events, fill) = self.inner.routes.lock().subscribe(namespace);
        if fill {
            self.fill(namespace.to_string());
        }
        (store, events.boxed())
    }

    /// Runs the watch until `shutdown` resolves; at once when no job reads the kind.
    pub fn run(self, shutdown: impl Future<Output = ()> + Send) -> impl Future<Output = ()> + Send {
        let inner = self.inner.clone();
        let watch = async move {
            // The members' namespaces first: a list before them would drop their objects and
            // each would cost a LIST of its own.
            let mut known = inner.members_known.subscribe();
            let _ = tokio::time::timeout(WAIT_FOR_MEMBERS, known.wait_for(|k| *k)).await;
            let api: Api<K> = Api::all(inner.hub.clone());
            let config = watcher::Config::default().timeout(HUB_WATCH_TIMEOUT_S);
            let reduce = inner.reduce;
            hub_watch(api, config)
                .for_each(|event| {
                    let mut routes = inner.routes.lock();
                    match event {
                        Ok(event) => routes.take(event, reduce),
                        Err(e) => {
                            tracing::warn!(kind = %K::plural(&()), error = %e, "hub watch failed; retrying with backoff");
                            routes.failed(&e);
                        }
                    }
                    futures::future::ready(())
                })
                .await;
        };
        super::views::shared_watch(!self.inner.read, watch, shutdown)
    }

    /// Fills `namespace`, learnt after the watch listed, by one LIST of it (retried until it
    /// answers, unless the namespace no longer needs it).
    fn fill(&self, namespace: String) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let api: Api<K> = Api::namespaced(inner.hub.clone(), &namespace);
            let mut pause = Duration::from_millis(250);
            loop {
                let listed = api.list(&ListParams::default()).await;
                let objects = listed.map(|list| list.items.into_iter().map(inner.reduce));
                let again =
                    (inner.routes.lock()).filled(&namespace, objects.map(Iterator::collect));
                if !again {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        });
    }
}

/// A reader's end of a namespace's events.
type Reader<V> = mpsc::UnboundedSender<watcher::Result<Event<V>>>;

/// Where the watch's objects go: one store per known namespace, and its readers. Pure (no
/// I/O): the tap's watch and fills feed it under one lock, so a subscriber's snapshot and the
/// events after it never miss or repeat one.
pub(crate) struct Routes<V: Lookup + Clone + 'static>
where
    V::DynamicType: Eq + Hash + Clone,
{
    namespaces: HashMap<String, Namespace<V>>,
    /// While a list is under way: the objects of namespaces not known yet (one learnt before
    /// the list ends takes its own), dropped at its end.
    listing: Option<HashMap<String, Vec<V>>>,
    /// The watch has listed once: a namespace learnt after is filled by a LIST of its own.
    listed_once: bool,
    /// The watch's failure since its last event: told to a new reader too.
    failing: Option<Replayed>,
}

struct Namespace<V: Lookup + Clone + 'static>
where
    V::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<V>,
    /// Its objects are all there: by the watch's list, or its own fill.
    listed: bool,
    /// While its own fill is under way: the names a watch event touched since (the fill's
    /// answer, older than them, does not overwrite them).
    filling: Option<HashSet<String>>,
    /// Objects in the list under way.
    counted: usize,
    readers: Vec<Reader<V>>,
}

impl<V> Default for Routes<V>
where
    V: Lookup + Clone + 'static,
    V::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Self {
            namespaces: HashMap::new(),
            listing: None,
            listed_once: false,
            failing: None,
        }
    }
}

impl<V> Routes<V>
where
    V: Lookup + Clone + 'static,
    V::DynamicType: Default + Eq + Hash + Clone,
{
    /// Keeps `ns` from now on; `true`: it needs a fill of its own.
    pub(crate) fn know(&mut self, ns: &str) -> bool {
        if self.namespaces.contains_key(ns) {
            return false;
        }
        let mut space = Namespace {
            writer: Writer::default(),
            listed: false,
            filling: None,
            counted: 0,
            readers: Vec::new(),
        };
        let fill = match self.listing.as_mut() {
            Some(listing) => {
                space.writer.apply_watcher_event(&Event::Init);
                for o in listing.remove(ns).unwrap_or_default() {
                    space.counted += 1;
                    space.writer.apply_watcher_event(&Event::InitApply(o));
                }
                false
            }
            None => self.listed_once,
        };
        if fill {
            space.filling = Some(HashSet::new());
        }
        self.namespaces.insert(ns.to_string(), space);
        fill
    }

    /// Drops the namespaces not in `wanted`, but for those a job still reads.
    pub(crate) fn keep_only(&mut self, wanted: &HashSet<&str>) {
        self.namespaces.retain(|ns, space| {
            space.readers.retain(|r| !r.is_closed());
            wanted.contains(ns.as_str()) || !space.readers.is_empty()
        });
    }

    /// A new reader of `ns`: the store, its events (a list of what is held, if listed), and
    /// whether `ns` needs a fill of its own.
    pub(crate) fn subscribe(
        &mut self,
        ns: &str,
    ) -> (
        Store<V>,
        mpsc::UnboundedReceiver<watcher::Result<Event<V>>>,
        bool,
    ) {
        let fill = self.know(ns);
        let failing = self.failing.clone();
        let (tx, rx) = mpsc::unbounded();
        let Some(space) = self.namespaces.get_mut(ns) else {
            // `know` just made it.
            return (Writer::default().as_reader(), rx, fill);
        };
        if space.listed {
            let _ = tx.unbounded_send(Ok(Event::Init));
            for o in space.writer.as_reader().state() {
                let _ = tx.unbounded_send(Ok(Event::InitApply(o.as_ref().clone())));
            }
            let _ = tx.unbounded_send(Ok(Event::InitDone));
        }
        if let Some(failing) = failing {
            let _ = tx.unbounded_send(Err(failing.error()));
        }
        space.readers.push(tx);
        (space.writer.as_reader(), rx, fill)
    }

    /// One event of the watch, its object reduced by `reduce` if its namespace is kept.
    pub(crate) fn take<K: kube::Resource>(&mut self, event: Event<K>, reduce: fn(K) -> V) {
        self.failing = None;
        match event {
            Event::Init => {
                self.listing = Some(HashMap::new());
                for space in self.namespaces.values_mut() {
                    // The list covers a fill under way.
                    space.filling = None;
                    space.counted = 0;
                    space.apply(Event::Init);
                }
            }
            Event::InitApply(o) => {
                let ns = o.meta().namespace.clone().unwrap_or_default();
                match self.namespaces.get_mut(&ns) {
                    Some(space) => {
                        space.counted += 1;
                        if space.counted <= MAX_OBJECTS_PER_VIEW {
                            space.apply(Event::InitApply(reduce(o)));
                        }
                    }
                    None => {
                        if let Some(listing) = self.listing.as_mut() {
                            listing.entry(ns).or_default().push(reduce(o));
                        }
                    }
                }
            }
            Event::InitDone => {
                self.listing = None;
                self.listed_once = true;
                for space in self.namespaces.values_mut() {
                    space.listed = true;
                    space.apply(Event::InitDone);
                    if space.counted > MAX_OBJECTS_PER_VIEW {
                        space.tell(|| Err(over_cap(kind_of::<V>())));
                    }
                }
            }
            Event::Apply(o) | Event::Delete(o) if !self.kept(&o) => {}
            Event::Apply(o) => self.changed(Event::Apply(reduce(o))),
            Event::Delete(o) => self.changed(Event::Delete(reduce(o))),
        }
    }

    fn kept<K: kube::Resource>(&self, o: &K) -> bool {
        let ns = o.meta().namespace.as_deref().unwrap_or_default();
        self.namespaces.contains_key(ns)
    }

    /// An object of a kept namespace applied or deleted.
    fn changed(&mut self, event: Event<V>) {
        let (Event::Apply(o) | Event::Delete(o)) = &event else {
            return;
        };
        let ns = o.namespace().unwrap_or_default();
        let Some(space) = self.namespaces.get_mut(ns.as_ref()) else {
            return;
        };
        if let Some(touched) = space.filling.as_mut() {
            touched.insert(o.name().unwrap_or_default().into_owned());
        }
        let store = space.writer.as_reader();
        let new = matches!(event, Event::Apply(_))
            && store.len() >= MAX_OBJECTS_PER_VIEW
            && store.get(&o.to_object_ref(Default::default())).is_none();
        if new {
            space.tell(|| Err(over_cap(kind_of::<V>())));
            return;
        }
        space.apply(event);
    }

    /// The watch failed: every reader of every namespace hears of it, as it would have of its
    /// own watch, until the watch lists or delivers again.
    pub(crate) fn failed(&mut self, error: &watcher::Error) {
        let replayed = Replayed::of(error);
        for space in self.namespaces.values_mut() {
            space.tell(|| Err(replayed.error()));
        }
        self.failing = Some(replayed);
    }

    /// The answer of `ns`'s own fill: its objects (but for those a watch event touched since
    /// it was asked), and its readers hear of a list; `true`: it failed and is still needed.
    pub(crate) fn filled(&mut self, ns: &str, answer: Result<Vec<V>, kube::Error>) -> bool {
        let Some(space) = self.namespaces.get_mut(ns) else {
            return false;
        };
        let Some(touched) = space.filling.as_ref() else {
            return false;
        };
        let objects = match answer {
            Ok(objects) => objects,
            Err(e) => {
                let replayed = Replayed::of(&watcher::Error::InitialListFailed(e));
                space.tell(|| Err(replayed.error()));
                return true;
            }
        };
        let untouched: Vec<V> = objects
            .into_iter()
            .filter(|o| !touched.contains(o.name().unwrap_or_default().as_ref()))
            .take(MAX_OBJECTS_PER_VIEW)
            .collect();
        let held = space.writer.as_reader().state();
        space.writer.apply_watcher_event(&Event::Init);
        for o in held.iter().map(|o| o.as_ref().clone()).chain(untouched) {
            space.writer.apply_watcher_event(&Event::InitApply(o));
        }
        space.writer.apply_watcher_event(&Event::InitDone);
        space.filling = None;
        space.listed = true;
        let all = space.writer.as_reader().state();
        space.tell(|| Ok(Event::Init));
        for o in &all {
            space.tell(|| Ok(Event::InitApply(o.as_ref().clone())));
        }
        space.tell(|| Ok(Event::InitDone));
        false
    }
}

impl<V> Namespace<V>
where
    V: Lookup + Clone + 'static,
    V::DynamicType: Default + Eq + Hash + Clone,
{
    /// The store takes `event`, then the readers hear of it.
    fn apply(&mut self, event: Event<V>) {
        self.writer.apply_watcher_event(&event);
        let mut event = Some(event);
        let last = self.readers.len().saturating_sub(1);
        let mut i = 0;
        self.tell(|| {
            // The last reader takes the event itself: one clone fewer.
            let e = match i == last {
                true => event.take(),
                false => event.clone(),
            };
            i += 1;
            Ok(e.unwrap_or(Event::InitDone))
        });
    }

    /// Each reader hears of what `make` makes; one gone is dropped.
    fn tell(&mut self, mut make: impl FnMut() -> watcher::Result<Event<V>>) {
        self.readers.retain(|r| r.unbounded_send(make()).is_ok());
    }
}

/// The kept type's name, as a view over its cap tells it.
fn kind_of<V>() -> &'static str {
    std::any::type_name::<V>()
        .rsplit("::")
        .next()
        .unwrap_or_default()
}

/// A watch failure as each reader hears of it again (kube's errors are not `Clone`): the API's
/// answer, whole (a 404 still says the kind is not served), or the error's text.
#[derive(Clone)]
struct Replayed {
    status: Option<Box<kube::core::Status>>,
    text: String,
}

/// A failure of the replica's hub watch, as its text.
#[derive(Debug, thiserror::Error)]
#[error("hub watch: {0}")]
struct HubWatchFailed(String);

impl Replayed {
    fn of(error: &watcher::Error) -> Self {
        let status = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => Some(s.clone()),
            _ => None,
        };
        Self {
            status,
            text: error.to_string(),
        }
    }

    fn error(&self) -> watcher::Error {
        match &self.status {
            Some(status) => watcher::Error::InitialListFailed(kube::Error::Api(status.clone())),
            None => watcher::Error::WatchFailed(kube::Error::Service(Box::new(HubWatchFailed(
                self.text.clone(),
            )))),
        }
    }
}

#[cfg(test)]
mod tests;
