//! The EndpointSliceImport job's four views and what each triggers: the imports of the
//! member's hub namespace (themselves), the member's MultiClusterServices (the imports of the
//! Service each imports), the fleet system namespace's Services (the imports of the
//! MultiClusterServices whose derived Service it is) and the slices this job imported there
//! (their import: a slice edited or deleted by someone is put back).

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use super::decide::{CONTROLLER_ID, DERIVED_SERVICE_LABEL, MANAGED_BY_LABEL};
use crate::api::{EndpointSliceImport, MultiClusterService};
use crate::controller::pace::Pace;
use crate::controller::views::{View, WatchHealth, view_watch};

const IMPORTS: View = View::hub(0, "EndpointSliceImports");
const MULTI_CLUSTER_SERVICES: View = View::member(1, "MultiClusterServices");
const SERVICES: View = View::member(2, "derived Services");
const SLICES: View = View::member(3, "imported EndpointSlices");

/// The watches whose first lists the job waits for.
pub(super) const WATCHED: [View; 4] = [IMPORTS, MULTI_CLUSTER_SERVICES, SERVICES, SLICES];

/// How long one watch of the hub's imports lasts before it is re-established (as the
/// EndpointSlice job's hub watch: a quiet fleet's hub requests grow with members).
const HUB_WATCH_TIMEOUT_S: u32 = 1800;

pub(super) struct Views {
    pub(super) imports: Store<EndpointSliceImport>,
    pub(super) multi_cluster_services: Store<MultiClusterService>,
    pub(super) services: Store<Service>,
    pub(super) slices: Store<EndpointSlice>,
}

/// Where the views watch.
pub(super) struct Scope<'a> {
    pub(super) member: &'a kube::Client,
    pub(super) hub: &'a Api<EndpointSliceImport>,
    pub(super) hub_namespace: &'a str,
    pub(super) fleet_namespace: &'a str,
}

impl Views {
    pub(super) fn watch(
        scope: &Scope<'_>,
        health: &Arc<WatchHealth>,
        pace: &Arc<Pace<EndpointSliceImport>>,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (imports, import_events) = view_of(
            scope.hub.clone(),
            watcher::Config::default().timeout(HUB_WATCH_TIMEOUT_S),
            health,
            IMPORTS,
            |_| {},
        );
        let (multi_cluster_services, mcs_events) = view_of(
            Api::<MultiClusterService>::all(scope.member.clone()),
            watcher::Config::default(),
            health,
            MULTI_CLUSTER_SERVICES,
            |m| m.status = None,
        );
        let (services, service_events) = view_of(
            Api::<Service>::namespaced(scope.member.clone(), scope.fleet_namespace),
            watcher::Config::default(),
            health,
            SERVICES,
            // Only its name and whether it is being deleted are read.
            |s| {
                s.spec = None;
                s.status = None;
                s.metadata.annotations = None;
                s.metadata.labels = None;
            },
        );
        let (slices, slice_events) = view_of(
            Api::<EndpointSlice>::namespaced(scope.member.clone(), scope.fleet_namespace),
            watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={CONTROLLER_ID}")),
            health,
            SLICES,
            |_| {},
        );
        let hub_ns = scope.hub_namespace.to_string();
        let by_import = {
            let hub_ns = hub_ns.clone();
            import_events.map(move |i| ObjectRef::new(&i.name_any()).within(&hub_ns))
        };
        let by_mcs = {
            let imports = imports.clone();
            mcs_events.flat_map(move |m| {
                let ns = m.namespace().unwrap_or_default();
                futures::stream::iter(importing(&imports, &ns, &m.spec.service_import.name))
            })
        };
        let by_service = {
            let (imports, mcs) = (imports.clone(), multi_cluster_services.clone());
            service_events
                .flat_map(move |s| futures::stream::iter(deriving(&imports, &mcs, &s.name_any())))
        };
        let by_slice = slice_events.map(move |s| ObjectRef::new(&s.name_any()).within(&hub_ns));
        let triggers = pace.clone().take_from(futures::stream::select_all([
            by_import.boxed(),
            by_mcs.boxed(),
            by_service.boxed(),
            by_slice.boxed(),
        ]));
        let views = Self {
            imports,
            multi_cluster_services,
            services,
            slices,
        };
        (views, triggers)
    }
}

/// One view: its store (objects without managed fields, and without what `strip` drops) and
/// the objects its watch touched (applied or deleted).
fn view_of<K>(
    api: Api<K>,
    config: watcher::Config,
    health: &Arc<WatchHealth>,
    view: View,
    strip: fn(&mut K),
) -> (Store<K>, BoxStream<'static, K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync,
    K: 'static,
{
    let (store, writer) = reflector::store::<K>();
    let size = {
        let store = store.clone();
        move || store.len()
    };
    let events = reflector::reflector(
        writer,
        view_watch(api, config, size).map_ok(move |event| {
            event.modify(|o| {
                o.meta_mut().managed_fields = None;
                strip(o);
            })
        }),
    )
    .inspect(health.inspector(view))
    .touched_objects()
    .filter_map(|o| futures::future::ready(o.ok()))
    .boxed();
    (store, events)
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
