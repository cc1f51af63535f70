//! The EndpointSlice exporter's three views, each a projection of what decisions read: the
//! member's EndpointSlices that belong to a Service (the API's label selector keeps the rest
//! out), its ServiceExports (identity and the Valid/Conflict verdicts), and the
//! EndpointSliceExports in the member's hub namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use super::decide::SERVICE_NAME_LABEL;
use crate::api::{
    CONDITION_CONFLICT, CONDITION_VALID, EndpointSliceExport, LAST_SEEN_GENERATION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport, ServiceExportStatus, ServiceExportVersion,
    UNIQUE_NAME_ANNOTATION,
};
use crate::export::{View, WatchHealth, objects_only, project_meta, watch_backoff};

/// The watches whose first lists the exporter waits for.
pub(super) const WATCHED: [View; 3] = [
    View::ServiceExports,
    View::EndpointSlices,
    View::EndpointSliceExports,
];

/// Slices to look at that the view does not have; beyond this many waiting, a name is dropped
/// (counted in the log) and found again by the next sweep.
pub(super) const ABSENT_QUEUE: usize = 4096;

pub(super) struct Views {
    pub(super) slices: Store<EndpointSlice>,
    pub(super) exports: Store<ServiceExport>,
    pub(super) hub: Store<EndpointSliceExport>,
}

/// A slice the view no longer has, or an export whose slice it does not know: `(ns, name)`.
pub(super) type Absent = (String, String);

impl Views {
    pub(super) fn watch(
        member: &str,
        client: &kube::Client,
        hub: &Api<EndpointSliceExport>,
        version: ServiceExportVersion,
        health: &Arc<WatchHealth>,
        absent: mpsc::Sender<Absent>,
    ) -> (Self, Controller<EndpointSlice>) {
        let (slices, slices_writer) = reflector::store::<EndpointSlice>();
        let (hub_view, hub_writer) = reflector::store::<EndpointSliceExport>();
        let exports_writer = reflector::store::Writer::<ServiceExport>::new(version);
        let exports = exports_writer.as_reader();
        let queue = Queue {
            member: member.to_string(),
            tx: absent,
        };
        let left = queue.clone();
        let slice_events = watcher::watcher(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default().labels(SERVICE_NAME_LABEL),
        )
        .backoff(watch_backoff())
        .modify(project_slice)
        .reflect(slices_writer)
        .inspect(health.inspector(View::EndpointSlices))
        .inspect(move |event| {
            // Deleted, or no longer a Service's (out of the selector): looked at live.
            if let Ok(watcher::Event::Delete(s)) = event {
                left.push(s.namespace().unwrap_or_default(), s.name_any());
            }
        })
        .applied_objects()
        .filter_map(objects_only)
        .boxed();
        let export_events = watcher::watcher(
            Api::<ServiceExport>::all_with(client.clone(), &version),
            watcher::Config::default(),
        )
        .backoff(watch_backoff())
        .modify(project_export)
        .reflect(exports_writer)
        .inspect(health.inspector(View::ServiceExports))
        .touched_objects()
        .filter_map(objects_only)
        .boxed();
        let known = slices.clone();
        let hub_events = watcher::watcher(hub.clone(), watcher::Config::default())
            .backoff(watch_backoff())
            .modify(|e: &mut EndpointSliceExport| project_meta(&mut e.metadata, &[]))
            .reflect(hub_writer)
            .inspect(health.inspector(View::EndpointSliceExports))
            .inspect(move |event| {
                if let Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) = event {
                    let (ns, name) = referred(e);
                    if known.get(&ObjectRef::new(&name).within(&ns)).is_none() {
                        queue.push(ns, name);
                    }
                }
            })
            .touched_objects()
            .filter_map(objects_only)
            .boxed();
        let by_service = slices.clone();
        let controller = Controller::for_stream(slice_events, slices.clone())
            .watches_stream(export_events, move |se: ServiceExport| {
                slices_of(&by_service, &se)
            })
            .watches_stream(hub_events, |e: EndpointSliceExport| {
                let (ns, name) = referred(&e);
                Some(ObjectRef::new(&name).within(&ns))
            });
        let views = Self {
            slices,
            exports,
            hub: hub_view,
        };
        (views, controller)
    }
}

#[derive(Clone)]
struct Queue {
    member: String,
    tx: mpsc::Sender<Absent>,
}

impl Queue {
    fn push(&self, ns: String, name: String) {
        if let Err(mpsc::error::TrySendError::Full((ns, name))) = self.tx.try_send((ns, name)) {
            tracing::debug!(member = %self.member, slice = %format!("{ns}/{name}"), "absent-slice queue full; the next sweep finds it");
        }
    }
}

/// The slice an export refers to: `(namespace, name)`.
pub(super) fn referred(e: &EndpointSliceExport) -> (String, String) {
    let r = &e.spec.endpoint_slice_reference;
    (r.namespace.clone(), r.name.clone())
}

/// The slices of the ServiceExport's Service.
fn slices_of(slices: &Store<EndpointSlice>, se: &ServiceExport) -> Vec<ObjectRef<EndpointSlice>> {
    let ns = se.namespace().unwrap_or_default();
    let service = se.name_any();
    slices
        .state()
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                == Some(&service)
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// The annotations decisions read on a slice.
const SLICE_ANNOTATIONS: [&str; 3] = [
    UNIQUE_NAME_ANNOTATION,
    LAST_SEEN_GENERATION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION,
];

/// A slice as decisions read it: identity, versions, the Service label, the unique-name
/// annotations, address type, ports, and per endpoint its addresses and readiness.
pub(super) fn project_slice(slice: &mut EndpointSlice) {
    let service = slice
        .metadata
        .labels
        .take()
        .and_then(|mut l| l.remove_entry(SERVICE_NAME_LABEL));
    project_meta(&mut slice.metadata, &SLICE_ANNOTATIONS);
    slice.metadata.labels = service.map(|(k, v)| BTreeMap::from([(k, v)]));
    for e in slice.endpoints.iter_mut().flatten() {
        *e = Endpoint {
            addresses: std::mem::take(&mut e.addresses),
            conditions: e.conditions.take().map(|c| EndpointConditions {
                ready: c.ready,
                ..Default::default()
            }),
            ..Default::default()
        };
    }
}

/// A ServiceExport as eligibility reads it: identity, deletion, and the status of its Valid
/// and Conflict conditions (no reasons or messages).
fn project_export(se: &mut ServiceExport) {
    project_meta(&mut se.metadata, &[]);
    se.metadata.finalizers = None;
    se.status = se.status.take().map(|status| ServiceExportStatus {
        conditions: status
            .conditions
            .into_iter()
            .filter(|c| c.type_ == CONDITION_VALID || c.type_ == CONDITION_CONFLICT)
            .map(|mut c| {
                c.reason = String::new();
                c.message = String::new();
                c
            })
            .collect(),
    });
}
