//! The MultiClusterService job's views: the member's MultiClusterServices, its ServiceImports
//! and the derived Services of the fleet system namespace; what each change triggers (the
//! reference's `For`, `Owns` and its Service map function).

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::decide::{KIND, MCS_NAME_LABEL, MCS_NAMESPACE_LABEL};
use crate::api::{GROUP, MultiClusterService, ServiceImport};
use crate::controller::pace::Pace;
use crate::controller::views::{View, WatchHealth, view_watch};

/// The member's MultiClusterServices.
const MULTI_CLUSTER_SERVICES: View = View::member(0, "MultiClusterServices");
/// The member's ServiceImports.
const SERVICE_IMPORTS: View = View::member(1, "ServiceImports");
/// The derived Services in the member's fleet system namespace.
const DERIVED_SERVICES: View = View::member(2, "DerivedServices");

/// The watches whose first lists the job waits for.
pub(super) const WATCHED: [View; 3] = [MULTI_CLUSTER_SERVICES, SERVICE_IMPORTS, DERIVED_SERVICES];

type Key = ObjectRef<MultiClusterService>;

pub(super) struct Views {
    pub(super) mcs: Store<MultiClusterService>,
    pub(super) imports: Store<ServiceImport>,
    pub(super) services: Store<Service>,
}

impl Views {
    /// Watches the three, and returns the future that hands the pace every MultiClusterService
    /// a change touches.
    pub(super) fn watch(
        client: &kube::Client,
        fleet_system_namespace: &str,
        health: &Arc<WatchHealth>,
        pace: &Arc<Pace<MultiClusterService>>,
    ) -> (Self, BoxFuture<'static, ()>) {
        let (mcs, mcs_writer) = reflector::store::<MultiClusterService>();
        let mcs_events = view_watch(
            Api::<MultiClusterService>::all(client.clone()),
            watcher::Config::default(),
            {
                let mcs = mcs.clone();
                move || mcs.len()
            },
        )
        .reflect(mcs_writer)
        .inspect(health.inspector(MULTI_CLUSTER_SERVICES))
        .applied_objects()
        .filter_map(|m| {
            futures::future::ready(
                m.ok()
                    .map(|m| key(&m.namespace().unwrap_or_default(), &m.name_any())),
            )
        })
        .boxed();
        let (imports, import_events) = watch_imports(client, health);
        let (services, service_events) = watch_services(client, fleet_system_namespace, health);
        let triggers = pace.clone().take_from(futures::stream::select_all([
            mcs_events,
            import_events,
            service_events,
        ]));
        let views = Self {
            mcs,
            imports,
            services,
        };
        (views, triggers)
    }
}

fn key(namespace: &str, name: &str) -> Key {
    ObjectRef::new(name).within(namespace)
}

/// The member's ServiceImports; each change triggers the MultiClusterService controlling it.
fn watch_imports(
    client: &kube::Client,
    health: &Arc<WatchHealth>,
) -> (Store<ServiceImport>, BoxStream<'static, Key>) {
    let (imports, writer) = reflector::store::<ServiceImport>();
    let events = view_watch(
        Api::<ServiceImport>::all(client.clone()),
        watcher::Config::default(),
        {
            let imports = imports.clone();
            move || imports.len()
        },
    )
    .reflect(writer)
    .inspect(health.inspector(SERVICE_IMPORTS))
    .touched_objects()
    .filter_map(|si| futures::future::ready(si.ok().and_then(|si| controller_of(&si))))
    .boxed();
    (imports, events)
}

/// The MultiClusterService controlling an import, as controller-runtime's `Owns` maps it.
fn controller_of(si: &ServiceImport) -> Option<Key> {
    let owner = si
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map(|(g, _)| g);
    (group == Some(GROUP) && owner.kind == KIND)
        .then(|| key(&si.namespace().unwrap_or_default(), &owner.name))
}

/// The fleet system namespace's Services carrying both MCS labels; each change triggers the
/// MultiClusterService they name.
fn watch_services(
    client: &kube::Client,
    namespace: &str,
    health: &Arc<WatchHealth>,
) -> (Store<Service>, BoxStream<'static, Key>) {
    let (services, writer) = reflector::store::<Service>();
    let selector = format!("{MCS_NAME_LABEL},{MCS_NAMESPACE_LABEL}");
    let events = view_watch(
        Api::<Service>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&selector),
        {
            let services = services.clone();
            move || services.len()
        },
    )
    .reflect(writer)
    .inspect(health.inspector(DERIVED_SERVICES))
    .touched_objects()
    .filter_map(|svc| futures::future::ready(svc.ok().and_then(|svc| served_by(&svc))))
    .boxed();
    (services, events)
}

/// The MultiClusterService a derived Service's labels name.
fn served_by(svc: &Service) -> Option<Key> {
    let labels = svc.labels();
    let name = labels.get(MCS_NAME_LABEL).filter(|n| !n.is_empty())?;
    let namespace = labels.get(MCS_NAMESPACE_LABEL).filter(|n| !n.is_empty())?;
    Some(key(namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn an_import_triggers_its_controlling_mcs_and_a_service_the_one_its_labels_name() {
        let mut si = ServiceImport::default();
        si.metadata.namespace = Some("ns".into());
        let owner = |kind: &str, controller| OwnerReference {
            api_version: "networking.fleet.azure.com/v1alpha1".into(),
            kind: kind.into(),
            name: "mcs".into(),
            controller: Some(controller),
            ..Default::default()
        };
        si.metadata.owner_references = Some(vec![owner("MultiClusterService", false)]);
        assert_eq!(controller_of(&si), None);
        si.metadata.owner_references = Some(vec![owner("Deployment", true)]);
        assert_eq!(controller_of(&si), None);
        si.metadata.owner_references = Some(vec![owner("MultiClusterService", true)]);
        assert_eq!(controller_of(&si), Some(key("ns", "mcs")));

        let mut svc = Service::default();
        svc.metadata.labels = Some([(MCS_NAME_LABEL.to_string(), "mcs".to_string())].into());
        assert_eq!(served_by(&svc), None);
        svc.labels_mut()
            .insert(MCS_NAMESPACE_LABEL.into(), "ns".into());
        assert_eq!(served_by(&svc), Some(key("ns", "mcs")));
    }
}
