//! The EndpointSlice exporter's two views, each of a projection (`model`): the member's
//! EndpointSlices that belong to a Service (the API's label selector keeps the rest out) and the
//! EndpointSliceExports in the member's hub namespace; its ServiceExports are the watch the
//! jobs share ([`crate::service_exports`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::decide::Halves;
use super::model::{ExportView, SERVICE_NAME_LABEL, SliceView};
use crate::api::EndpointSliceExport;
use crate::controller::pace::Pace;
use crate::controller::projection::project;
use crate::controller::queue::Lossy;
use crate::controller::views::{View, WatchHealth, view_watch};
use crate::service_exports::{ExportRef, Subscription};

/// The member's EndpointSlices that belong to a Service.
const ENDPOINT_SLICES: View = View::member(3, "EndpointSlices");
/// The EndpointSliceExports of the member's hub namespace.
const ENDPOINT_SLICE_EXPORTS: View = View::hub(4, "EndpointSliceExports");

/// The member's EndpointSlices of no Service: none is kept; those with a unique name (exported
/// once, as the reference's controller, which watches every slice, would withdraw them) are
/// looked at live.
const UNLABELLED_SLICES: View = View::member(5, "EndpointSlices of no Service");

/// The watches whose first lists the job waits for, with the EndpointSlice controller's half
/// (`export`) or without. (The ServiceExports are the shared watch's.)
pub(super) fn watched(export: bool) -> &'static [View] {
    const BOTH: [View; 3] = [ENDPOINT_SLICES, ENDPOINT_SLICE_EXPORTS, UNLABELLED_SLICES];
    if export { &BOTH } else { &BOTH[..2] }
}

/// How long one watch of the hub's exports lasts before it is re-established. kube's default
/// (295 s, for clients with a read timeout; ours has none, and h2 pings find a dead connection)
/// would make every member's hub watch a request every 5 minutes: 3.4 hub requests/s at 1,000
/// members in a quiet fleet, against 0.6 at 30 minutes.
const HUB_WATCH_TIMEOUT_S: u32 = 1800;

/// Slices to look at that the view does not have; beyond this many waiting, a name is dropped
/// (counted in the log) and found again by the next sweep.
pub(super) const ABSENT_QUEUE: usize = 4096;

pub(super) struct Views {
    pub(super) slices: Store<SliceView>,
    pub(super) hub: Store<ExportView>,
}

/// A slice the view no longer has, or an export whose slice it does not know: `(ns, name)`.
pub(super) type Absent = (String, String);

impl Views {
    pub(super) fn watch(
        client: &kube::Client,
        hub: &Api<EndpointSliceExport>,
        exports: &Subscription,
        health: &Arc<WatchHealth>,
        queue: Lossy<Absent>,
        pace: &Arc<Pace<SliceView>>,
        halves: Halves,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (slices, slices_writer) = reflector::store::<SliceView>();
        let left = queue.clone();
        let slice_events = view_watch(
            Api::<SliceView>::all(client.clone()),
            watcher::Config::default().labels(SERVICE_NAME_LABEL),
            {
                let slices = slices.clone();
                move || slices.len()
            },
        )
        .reflect(slices_writer)
        .inspect(health.inspector(ENDPOINT_SLICES))
        .inspect(move |event| {
            // Deleted, or no longer a Service's (out of the selector): looked at live.
            if let Ok(watcher::Event::Delete(s)) = event {
                left.push((s.namespace().unwrap_or_default(), s.name_any()));
            }
        })
        .applied_objects()
        .filter_map(|s| futures::future::ready(s.ok().map(|s| key_of(&s))))
        .boxed();
        let by_service = slices.clone();
        let export_events = exports
            .pace
            .clone()
            .stream()
            .flat_map(move |se| futures::stream::iter(slices_of(&by_service, &se)))
            .boxed();
        let unlabelled = if halves.export {
            unlabelled_events(client, health, queue.clone())
        } else {
            futures::stream::empty().boxed()
        };
        let (hub_view, hub_events) = hub_events(hub, health, slices.clone(), queue, halves.cleanup);
        // Every trigger waits in the pace, which hands the runner no more slices than it
        // reconciles at once ([`Pace`]).
        let triggers = pace.clone().take_from(futures::stream::select_all([
            slice_events,
            export_events,
            hub_events,
            unlabelled,
        ]));
        let views = Self {
            slices,
            hub: hub_view,
        };
        (views, triggers)
    }
}

/// The view of the member's EndpointSliceExports and the slices their changes trigger; with
/// `cleanup`, an export whose slice `known` does not have (gone, or of no Service) goes to
/// `queue`, to be looked at live.
fn hub_events(
    hub: &Api<EndpointSliceExport>,
    health: &Arc<WatchHealth>,
    known: Store<SliceView>,
    queue: Lossy<Absent>,
    cleanup: bool,
) -> (
    Store<ExportView>,
    futures::stream::BoxStream<'static, ObjectRef<SliceView>>,
) {
    let (hub_view, hub_writer) = reflector::store::<ExportView>();
    let events = reflector::reflector(
        hub_writer,
        view_watch(
            hub.clone(),
            watcher::Config::default().timeout(HUB_WATCH_TIMEOUT_S),
            {
                let hub_view = hub_view.clone();
                move || hub_view.len()
            },
        )
        .map_ok(project::<EndpointSliceExport, ExportView>),
    )
    .inspect(health.inspector(ENDPOINT_SLICE_EXPORTS))
    .inspect(move |event| {
        if let Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) = event
            && cleanup
        {
            let (ns, name) = referred(e);
            if known.get(&ObjectRef::new(&name).within(&ns)).is_none() {
                queue.push((ns, name));
            }
        }
    })
    .touched_objects()
    .filter_map(|e| futures::future::ready(e.ok().map(|e| referred_slice(&e))))
    .boxed();
    (hub_view, events)
}

/// The watch of the slices of no Service: each one with a unique name goes to `queue`, to be
/// looked at live; it yields nothing itself.
fn unlabelled_events(
    client: &kube::Client,
    health: &Arc<WatchHealth>,
    queue: Lossy<Absent>,
) -> futures::stream::BoxStream<'static, ObjectRef<SliceView>> {
    view_watch(
        Api::<SliceView>::all(client.clone()),
        watcher::Config::default().labels(&format!("!{SERVICE_NAME_LABEL}")),
        || 0,
    )
    .inspect(health.inspector(UNLABELLED_SLICES))
    .filter_map(move |event| {
        if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event
            && s.unique_name.is_some()
        {
            queue.push((s.namespace().unwrap_or_default(), s.name_any()));
        }
        futures::future::ready(None)
    })
    .boxed()
}

/// The slice an export refers to: `(namespace, name)`.
pub(super) fn referred(e: &ExportView) -> (String, String) {
    (e.slice_namespace.clone(), e.slice_name.clone())
}

fn referred_slice(e: &ExportView) -> ObjectRef<SliceView> {
    ObjectRef::new(&e.slice_name).within(&e.slice_namespace)
}

/// A slice's name as the pace keeps it: without its version and UID.
fn key_of(s: &SliceView) -> ObjectRef<SliceView> {
    ObjectRef::new(&s.name_any()).within(&s.namespace().unwrap_or_default())
}

/// The slices of the ServiceExport's Service.
fn slices_of(slices: &Store<SliceView>, se: &ExportRef) -> Vec<ObjectRef<SliceView>> {
    slices
        .state()
        .iter()
        .filter(|s| s.metadata.namespace == se.namespace)
        .filter(|s| s.service.as_ref() == Some(&se.name))
        .map(|s| key_of(s))
        .collect()
}
