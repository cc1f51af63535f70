//! The EndpointSlice exporter's two views, each of a projection (`model`): the member's
//! EndpointSlices that belong to a Service (its view of the member's shared EndpointSlice
//! watch, [`crate::member_watches`]) and the EndpointSliceExports in the member's hub
//! namespace (its part of the replica's watch, [`crate::controller::hub_tap`]); its ServiceExports are the watch the jobs share ([`crate::service_exports`]).

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};

use super::decide::Halves;
use super::model::{ExportView, SERVICE_NAME_LABEL, SliceView};
use crate::api::UNIQUE_NAME_ANNOTATION;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::controller::hub_tap::Followed;
use crate::controller::pace::Pace;
use crate::controller::queue::Lossy;
use crate::controller::tap::{Keep, Tap};
use crate::controller::views::{View, WatchHealth};
use crate::service_exports::{ExportRef, Subscription};

/// The member's EndpointSlices (those of a Service kept).
const ENDPOINT_SLICES: View = View::member(3, "EndpointSlices");
/// The EndpointSliceExports of the member's hub namespace.
const ENDPOINT_SLICE_EXPORTS: View = View::hub(4, "EndpointSliceExports");

/// The watches whose first lists the job waits for. (The ServiceExports are the shared
/// watch's.)
pub(super) const WATCHED: [View; 2] = [ENDPOINT_SLICES, ENDPOINT_SLICE_EXPORTS];

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
    /// The job's view of the member's EndpointSlices (those of a Service are kept; those of
    /// none with a unique name, exported once, as the reference's controller, which watches
    /// every slice, would withdraw them, go to `queue` to be looked at live, with the
    /// EndpointSlice controller's half only), the hub's exports, and what they trigger.
    pub(super) fn watch(
        member: &mut Tap<EndpointSlice>,
        hub: (Store<ExportView>, Followed<ExportView>),
        exports: &Subscription,
        health: &Arc<WatchHealth>,
        (queue, pace): (Lossy<Absent>, &Arc<Pace<SliceView>>),
        halves: Halves,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (left, to, export) = (queue.clone(), pace.clone(), halves.export);
        let of_a_service = |s: &EndpointSlice| s.labels().contains_key(SERVICE_NAME_LABEL);
        let slices = member.view(
            (health, ENDPOINT_SLICES),
            Keep::new(of_a_service, SliceView::from),
            move |e| {
                match e {
                    Event::Apply(s) | Event::InitApply(s) => to.trigger(key_of(s)),
                    // Deleted, or no longer a Service's: looked at live.
                    Event::Delete(s) => {
                        left.push((s.namespace().unwrap_or_default(), s.name_any()))
                    }
                    Event::Init | Event::InitDone => {}
                }
            },
        );
        if export {
            let unlabelled = queue.clone();
            member.also(move |e| {
                if let Event::Apply(s) | Event::InitApply(s) = e
                    && !of_a_service(s)
                    && s.annotations().contains_key(UNIQUE_NAME_ANNOTATION)
                {
                    unlabelled.push((s.namespace().unwrap_or_default(), s.name_any()));
                }
            });
        }
        let by_service = slices.clone();
        let export_events = exports
            .pace
            .clone()
            .stream()
            .flat_map(move |se| futures::stream::iter(slices_of(&by_service, &se)))
            .boxed();
        let (hub_view, hub_events) = hub_events(hub, health, slices.clone(), queue, halves.cleanup);
        // Every trigger waits in the pace, which hands the runner no more slices than it
        // reconciles at once ([`Pace`]).
        let triggers = pace
            .clone()
            .take_from(futures::stream::select(export_events, hub_events));
        let views = Self {
            slices,
            hub: hub_view,
        };
        (views, triggers)
    }
}

/// The view of the member's EndpointSliceExports (the replica's hub watch's, of the member's
/// namespace) and the slices their changes trigger; with
/// `cleanup`, an export whose slice `known` does not have (gone, or of no Service) goes to
/// `queue`, to be looked at live.
fn hub_events(
    (hub_view, followed): (Store<ExportView>, Followed<ExportView>),
    health: &Arc<WatchHealth>,
    known: Store<SliceView>,
    queue: Lossy<Absent>,
    cleanup: bool,
) -> (
    Store<ExportView>,
    futures::stream::BoxStream<'static, ObjectRef<SliceView>>,
) {
    let events = followed
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
