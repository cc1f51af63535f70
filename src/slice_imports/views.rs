//! The EndpointSliceImport job's four views and what each triggers: the imports of the
//! member's hub namespace (themselves), the member's MultiClusterServices (the imports of the
//! Service each imports), the fleet system namespace's Services (the imports of the
//! MultiClusterServices whose derived Service it is) and the slices this job imported there
//! (their import: a slice edited or deleted by someone is put back). The member's three are
//! the job's views of the member's shared watches ([`crate::member_watches`]).

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::decide::{CONTROLLER_ID, DERIVED_SERVICE_LABEL, MANAGED_BY_LABEL};
use crate::api::{EndpointSliceImport, MultiClusterService};
use crate::controller::hub_tap::Followed;
use crate::controller::pace::Pace;

use crate::controller::tap::{Keep, Tap, every};
use crate::controller::views::{View, WatchHealth};

const IMPORTS: View = View::hub(0, "EndpointSliceImports");
const MULTI_CLUSTER_SERVICES: View = View::member(1, "MultiClusterServices");
const SERVICES: View = View::member(2, "derived Services");
const SLICES: View = View::member(3, "imported EndpointSlices");

/// The watches whose first lists the job waits for.
pub(super) const WATCHED: [View; 4] = [IMPORTS, MULTI_CLUSTER_SERVICES, SERVICES, SLICES];

pub(super) struct Views {
    pub(super) imports: Store<EndpointSliceImport>,
    pub(super) multi_cluster_services: Store<MultiClusterService>,
    pub(super) services: Store<Service>,
    pub(super) slices: Store<EndpointSlice>,
}

/// The imports of the member's hub namespace: the store and events of the replica's watch.
pub(super) type Imported = (Store<EndpointSliceImport>, Followed<EndpointSliceImport>);

/// Where the views watch.
pub(super) struct Scope<'a> {
    pub(super) hub_namespace: &'a str,
    pub(super) fleet_namespace: &'a str,
}

/// The member's shared watches the job reads.
pub(super) struct Taps<'a> {
    pub(super) mcs: &'a mut Tap<MultiClusterService>,
    pub(super) services: &'a mut Tap<Service>,
    pub(super) slices: &'a mut Tap<EndpointSlice>,
}

impl Views {
    /// The views: the imports are the job's part of the replica's watch of the hub (`hub`:
    /// the store and events of the member's namespace), the rest its views of the member's.
    pub(super) fn watch(
        (scope, hub): (&Scope<'_>, Imported),
        taps: Taps<'_>,
        health: &Arc<WatchHealth>,
        pace: &Arc<Pace<EndpointSliceImport>>,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (imports, followed) = hub;
        let import_events = followed
            .inspect(health.inspector(IMPORTS))
            .touched_objects()
            .filter_map(|o| futures::future::ready(o.ok()));
        let hub_ns = scope.hub_namespace.to_string();
        let multi_cluster_services = {
            let (imports, pace) = (imports.clone(), pace.clone());
            taps.mcs.view(
                (health, MULTI_CLUSTER_SERVICES),
                Keep::new(every, without_status),
                move |e| {
                    if let Some(m) = touched(e) {
                        let ns = m.namespace().unwrap_or_default();
                        pace.trigger_all(importing(&imports, &ns, &m.spec.service_import.name));
                    }
                },
            )
        };
        let fleet = scope.fleet_namespace.to_string();
        let in_fleet = move |meta: &ObjectMeta| meta.namespace.as_ref() == Some(&fleet);
        let services = {
            let (imports, mcs, pace) = (
                imports.clone(),
                multi_cluster_services.clone(),
                pace.clone(),
            );
            let in_fleet = in_fleet.clone();
            taps.services.view(
                (health, SERVICES),
                Keep::new(move |s: &Service| in_fleet(&s.metadata), named),
                move |e| {
                    if let Some(s) = touched(e) {
                        pace.trigger_all(deriving(&imports, &mcs, &s.name_any()));
                    }
                },
            )
        };
        let slices = {
            let (pace, hub_ns) = (pace.clone(), hub_ns.clone());
            let ours = move |s: &EndpointSlice| {
                in_fleet(&s.metadata)
                    && s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(CONTROLLER_ID)
            };
            taps.slices.view(
                (health, SLICES),
                Keep::new(ours, crate::controller::tap::whole),
                move |e| {
                    if let Some(s) = touched(e) {
                        pace.trigger(ObjectRef::new(&s.name_any()).within(&hub_ns));
                    }
                },
            )
        };
        let by_import = import_events.map(move |i| ObjectRef::new(&i.name_any()).within(&hub_ns));
        let triggers = pace.clone().take_from(by_import);
        let views = Self {
            imports,
            multi_cluster_services,
            services,
            slices,
        };
        (views, triggers)
    }
}

/// The object an event touched (applied or deleted).
fn touched<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => Some(o),
        Event::Init | Event::InitDone => None,
    }
}

/// A MultiClusterService as the job keeps it: its status is read by nobody here.
fn without_status(mut m: MultiClusterService) -> MultiClusterService {
    m.metadata.managed_fields = None;
    m.status = None;
    m
}

/// A Service as the job keeps it: only its name and whether it is being deleted are read.
fn named(mut s: Service) -> Service {
    s.spec = None;
    s.status = None;
    s.metadata.managed_fields = None;
    s.metadata.annotations = None;
    s.metadata.labels = None;
    s
}

/// The imports of the Service `ns/service`.
fn importing(
    imports: &Store<EndpointSliceImport>,
    ns: &str,
    service: &str,
) -> Vec<ObjectRef<EndpointSliceImport>> {
    imports
        .state()
        .iter()
        .filter(|i| {
            let owner = &i.spec.owner_service_reference;
            owner.namespace == ns && owner.name == service
        })
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}

/// The imports of every MultiClusterService whose derived Service is `service`.
fn deriving(
    imports: &Store<EndpointSliceImport>,
    mcs: &Store<MultiClusterService>,
    service: &str,
) -> Vec<ObjectRef<EndpointSliceImport>> {
    mcs.state()
        .iter()
        .filter(|m| m.labels().get(DERIVED_SERVICE_LABEL).map(String::as_str) == Some(service))
        .flat_map(|m| {
            let ns = m.namespace().unwrap_or_default();
            importing(imports, &ns, &m.spec.service_import.name)
        })
        .collect()
}
