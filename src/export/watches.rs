//! The ServiceExport job's views: the member's Services and the ISEs of its hub namespace,
//! beside the ServiceExports of the watch it shares with the other jobs; what they trigger.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};

use super::decide::ise_name;
use super::projections::{IseView, ServiceView};
use crate::api::ServiceExportVersion;
use crate::controller::hub_tap::Followed;
use crate::controller::queue::Lossy;
use crate::controller::tap::{Keep, Tap, every};
use crate::controller::views::{View, WatchHealth};
use crate::service_exports::{ExportRef, ServiceExportView, Subscription};

/// The member's Services.
pub(super) const SERVICES: View = View::member(1, "Services");
/// The ISEs of the member's hub namespace.
pub(super) const INTERNAL_SERVICE_EXPORTS: View = View::hub(2, "InternalServiceExports");

/// The three views (reflector stores).
pub(super) struct Views {
    pub(super) services: Store<ServiceView>,
    pub(super) ises: Store<IseView>,
    pub(super) exports: Store<ServiceExportView>,
}

impl Views {
    /// Watches the member's Services and its hub namespace, and returns the names of the feed's
    /// ServiceExports to reconcile as the pace hands them, with the future that feeds the pace
    /// what they and the feed trigger; every ISE seen (listed or changed),
    /// and the ISE name of every deleted ServiceExport, is sent to `dangling` to be checked for
    /// a missing export (when its queue is full, the name is left to the next periodic sweep).
    pub(super) fn watch(
        member: &mut Tap<Service>,
        hub: (Store<IseView>, Followed<IseView>),
        exports: &Subscription,
        health: &Arc<WatchHealth>,
        dangling: Lossy<String>,
    ) -> (
        Self,
        BoxStream<'static, ObjectRef<ServiceExportView>>,
        BoxFuture<'static, ()>,
    ) {
        let services = watch_services(member, exports, health);
        let (ises, ise_events) = watch_ises(hub, exports, health, dangling.clone());
        // Every trigger waits in the feed's pace, which hands the controller no more names
        // than it reconciles at once.
        let triggers = exports.pace.clone().take_from(ise_events);
        let known = exports.store.clone();
        let handed = exports
            .pace
            .clone()
            .stream()
            .inspect(move |key| {
                // A deleted export's ISE is checked too: one written in a race with the
                // deletion would otherwise wait for the next ISE event. The feed tells of a
                // change once the store has it: absent is deleted.
                if known.get(key).is_none() {
                    let ns = key.namespace.as_deref().unwrap_or_default();
                    dangling.push(ise_name(ns, &key.name));
                }
            })
            .boxed();
        let views = Self {
            services,
            ises,
            exports: exports.store.clone(),
        };
        (views, handed, triggers)
    }
}

/// The job's view of the member's Services (of the member's shared watch); each change
/// triggers the export of the same namespace/name.
fn watch_services(
    member: &mut Tap<Service>,
    exports: &Subscription,
    health: &Arc<WatchHealth>,
) -> Store<ServiceView> {
    let (version, pace) = (exports.dyntype, exports.pace.clone());
    let project = Keep::new(every, ServiceView::from);
    member.view((health, SERVICES), project, move |event| {
        if let Event::Apply(svc) | Event::InitApply(svc) | Event::Delete(svc) = event {
            pace.trigger(ObjectRef::new_with(&svc.id.name, version).within(&svc.id.namespace));
        }
    })
}

/// The view of the ISEs of the member's hub namespace (its part of the replica's watch), and the exports each change touches;
/// every ISE seen (listed or changed) is sent to `dangling`.
fn watch_ises(
    (ises, followed): (Store<IseView>, Followed<IseView>),
    exports: &Subscription,
    health: &Arc<WatchHealth>,
    dangling: Lossy<String>,
) -> (Store<IseView>, BoxStream<'static, ExportRef>) {
    let version = exports.dyntype;
    let loser_index = exports.store.clone();
    let events = followed
        .inspect(health.inspector(INTERNAL_SERVICE_EXPORTS))
        .inspect(move |event| {
            if let Ok(watcher::Event::Apply(ise) | watcher::Event::InitApply(ise)) = event {
                dangling.push(ise.id.name.clone());
            }
        })
        .touched_objects()
        .filter_map(|ise| futures::future::ready(ise.ok()))
        .flat_map(move |ise: IseView| {
            // The export it carries, and any other export of the same hub name (the loser of
            // a name collision takes over when the winner's ISE goes).
            let owner = ise
                .spec
                .service_reference
                .namespaced_name
                .split_once('/')
                .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns));
            let mut refs = exports_sharing_hub_name(&loser_index, version, &ise.id.name);
            refs.extend(owner);
            refs.dedup();
            futures::stream::iter(refs)
        })
        .boxed();
    (ises, events)
}

/// The ServiceExports whose hub name (`<namespace>-<name>`) is `hub_name`: every split at a
/// '-' that names an export in the view.
fn exports_sharing_hub_name(
    exports: &Store<ServiceExportView>,
    version: ServiceExportVersion,
    hub_name: &str,
) -> Vec<ObjectRef<ServiceExportView>> {
    hub_name
        .match_indices('-')
        .map(|(i, _)| (&hub_name[..i], &hub_name[i + 1..]))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
        .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns))
        .filter(|key| exports.get(key).is_some())
        .collect()
}
