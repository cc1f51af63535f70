//! The member's one ServiceExport watch, shared by both exporters: the ServiceExport exporter
//! reconciles what it touches, the EndpointSlice exporter the slices of the touched export's
//! Service. One watch and one store per member instead of one of each per exporter (at 250
//! exports, ~150 KiB per member).
//!
//! Not kube's shared reflector (`reflect_shared`): it hands its subscribers applied objects
//! only, and the slice exporter must hear of deletions to withdraw. Each subscriber here gets
//! the names the watch touched (applied or deleted) in a [`Pace`] of its own: never more than
//! one entry per export, and nothing the watch waits for.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::ReconcileObserver;
use super::pace::Pace;
use super::projections::ServiceExportView;
use super::views::{Synced, View, WatchHealth, view_watch};
use crate::api::ServiceExportVersion;

pub(crate) type ExportRef = ObjectRef<ServiceExportView>;

/// The watch before it runs: subscribe each exporter ([`ServiceExportFeed::subscribe`]), then
/// run it ([`ServiceExportFeed::run`]).
pub struct ServiceExportFeed {
    version: ServiceExportVersion,
    events: BoxStream<'static, Result<watcher::Event<ServiceExportView>, watcher::Error>>,
    store: Store<ServiceExportView>,
    synced: Synced,
    subscribers: Vec<Arc<Pace<ServiceExportView>>>,
}

/// What one exporter gets of the feed: the store, its first list, and the touched names.
pub struct Subscription {
    pub(crate) store: Store<ServiceExportView>,
    pub(crate) version: ServiceExportVersion,
    /// Resolves once the watch has listed.
    pub(crate) synced: Synced,
    /// Where the names the watch touched wait to be handed to the exporter's controller.
    pub(crate) pace: Arc<Pace<ServiceExportView>>,
}

impl ServiceExportFeed {
    /// The watch of `member`'s ServiceExports (of API `version`) through `client`; its
    /// failures and first list are reported to `observer`.
    pub fn watch(
        client: &kube::Client,
        version: ServiceExportVersion,
        member: &str,
        observer: Arc<dyn ReconcileObserver>,
    ) -> Self {
        let writer = reflector::store::Writer::<ServiceExportView>::new(version);
        let store = writer.as_reader();
        let health = Arc::new(WatchHealth::new(member, observer));
        let size = {
            let store = store.clone();
            move || store.len()
        };
        let events = view_watch(
            Api::<ServiceExportView>::all_with(client.clone(), &version),
            watcher::Config::default(),
            size,
        )
        .reflect(writer)
        .inspect(health.inspector(View::ServiceExports))
        .boxed();
        let synced = health.synced(Some(store.clone()), &[View::ServiceExports]);
        Self {
            version,
            events,
            store,
            synced,
            subscribers: Vec::new(),
        }
    }

    /// A new subscriber: it hears of everything the watch touches from its first list on,
    /// handed `limit` names at a time ([`Pace`]; 0: all at once).
    pub fn subscribe(&mut self, limit: u16) -> Subscription {
        let pace = Arc::new(Pace::new(limit));
        self.subscribers.push(pace.clone());
        Subscription {
            store: self.store.clone(),
            version: self.version,
            synced: self.synced.clone(),
            pace,
        }
    }

    /// Runs the watch until `shutdown` resolves. The store has a change before any subscriber
    /// hears of it: a list's names are told when the list is complete, since the store takes
    /// a list in whole, at its end.
    pub fn run(self, shutdown: impl Future<Output = ()> + Send) -> impl Future<Output = ()> + Send {
        let Self {
            version,
            events,
            subscribers,
            ..
        } = self;
        let mut listing = Vec::new();
        let key = move |se: &ServiceExportView| {
            ObjectRef::new_with(&se.name_any(), version).within(&se.namespace().unwrap_or_default())
        };
        let watch = events.for_each(move |event| {
            let touched = match &event {
                Ok(watcher::Event::Apply(se) | watcher::Event::Delete(se)) => vec![key(se)],
                Ok(watcher::Event::InitApply(se)) => {
                    listing.push(key(se));
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
        async move {
            tokio::select! {
                () = watch => {}
                () = shutdown => {}
            }
        }
    }
}
