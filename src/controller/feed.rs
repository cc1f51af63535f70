//! One watch of a member, shared by several jobs: each reconciles what the watch touches, or
//! what it maps that to. One watch and one store per member instead of one of each per job
//! (the member's ServiceExports: at 250 exports, ~150 KiB per member).
//!
//! Not kube's shared reflector (`reflect_shared`): it hands its subscribers applied objects
//! only, and a job may have to hear of deletions to withdraw. Each subscriber here gets the
//! names the watch touched (applied or deleted) in a [`Pace`] of its own: never more than one
//! entry per object, and nothing the watch waits for.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use super::observer::ReconcileObserver;
use super::pace::Pace;
use super::views::{Synced, View, WatchHealth, shared_watch, view_watch};

/// The watch before it runs: subscribe each job ([`Feed::subscribe`]), then run it
/// ([`Feed::run`]).
pub struct Feed<K: kube::Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    dyntype: K::DynamicType,
    events: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    store: Store<K>,
    synced: Synced,
    subscribers: Vec<Arc<Pace<K>>>,
}

/// What one job gets of the feed: the store, its first list, and the touched names.
pub struct Subscription<K: kube::Resource + 'static>
where
    K::DynamicType: Hash + Eq,
{
    pub(crate) store: Store<K>,
    pub(crate) dyntype: K::DynamicType,
    /// Resolves once the watch has listed.
    pub(crate) synced: Synced,
    /// Where the names the watch touched wait to be handed to the job's runner.
    pub(crate) pace: Arc<Pace<K>>,
}

impl<K> Feed<K>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Hash + Eq + Clone + Send + Sync + Unpin,
{
    /// The watch of `api` (every object of its kind, of type `dyntype`) for `member`, as its
    /// `view`; its failures and first list are reported to `observer` as job `job`'s. Its
    /// readiness handle counts the objects the view holds ([`Synced::objects`]).
    pub fn over(
        api: Api<K>,
        dyntype: K::DynamicType,
        (view, job): (View, &'static str),
        member: &str,
        observer: Arc<dyn ReconcileObserver>,
    ) -> Self {
        let writer = reflector::store::Writer::<K>::new(dyntype.clone());
        let store = writer.as_reader();
        let health = Arc::new(WatchHealth::new(member, job, observer));
        let size = {
            let store = store.clone();
            move || store.len()
        };
        let events = view_watch(api, watcher::Config::default(), size)
            .reflect(writer)
            .inspect(health.inspector(view))
            .boxed();
        let counted = {
            let store = store.clone();
            Arc::new(move || store.state().len())
        };
        let synced = health.synced(Some(counted), &[view]);
        Self {
            dyntype,
            events,
            store,
            synced,
            subscribers: Vec::new(),
        }
    }

    /// A new subscriber: it hears of everything the watch touches from its first list on,
    /// handed `limit` names at a time ([`Pace`]; 0: all at once).
    pub fn subscribe(&mut self, limit: u16) -> Subscription<K> {
        let pace = Arc::new(Pace::new(limit));
        self.subscribers.push(pace.clone());
        Subscription {
            store: self.store.clone(),
            dyntype: self.dyntype.clone(),
            synced: self.synced.clone(),
            pace,
        }
    }

    /// Runs the watch until `shutdown` resolves; at once when no job subscribed (nothing is
    /// watched). The store has a change before any subscriber hears of it: a list's names are
    /// told when the list is complete, since the store takes a list in whole, at its end.
    pub fn run(self, shutdown: impl Future<Output = ()> + Send) -> impl Future<Output = ()> + Send {
        let Self {
            dyntype,
            events,
            subscribers,
            ..
        } = self;
        let idle = subscribers.is_empty();
        let mut listing = Vec::new();
        // The name alone: a version and UID in each key would be two more strings per name
        // waiting, read by nobody.
        let key = move |o: &K| {
            ObjectRef::new_with(&o.name_any(), dyntype.clone())
                .within(&o.namespace().unwrap_or_default())
        };
        let watch = events.for_each(move |event| {
            let touched = match &event {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => vec![key(o)],
                Ok(watcher::Event::InitApply(o)) => {
                    listing.push(key(o));
                    vec![]
                }
                Ok(watcher::Event::InitDone) => std::mem::take(&mut listing),
                Ok(watcher::Event::Init) | Err(_) => vec![],
            };
            for subscriber in &subscribers {
                subscriber.trigger_all(touched.iter().cloned());
            }
            futures::future::ready(())
        });
        shared_watch(idle, watch, shutdown)
    }
}
