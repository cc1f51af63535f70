//! The MultiClusterService job's views: the member's MultiClusterServices, its ServiceImports
//! and the derived Services of the fleet system namespace, each the job's view of the member's
//! shared watch of the kind ([`crate::member_watches`]); what each change triggers (the
//! reference's `For`, `Owns` and its Service map function).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::decide::{KIND, MCS_NAME_LABEL, MCS_NAMESPACE_LABEL};
use crate::api::{GROUP, MultiClusterService, ServiceImport};
use crate::controller::pace::Pace;
use crate::controller::tap::{Keep, Tap, every, whole};
use crate::controller::views::{View, WatchHealth};

/// The member's MultiClusterServices.
const MULTI_CLUSTER_SERVICES: View = View::member(0, "MultiClusterServices");
/// The member's ServiceImports.
const SERVICE_IMPORTS: View = View::member(1, "ServiceImports");
/// The derived Services in the member's fleet system namespace.
const DERIVED_SERVICES: View = View::member(2, "DerivedServices");

/// The watches whose first lists the job waits for.
pub(super) const WATCHED: [View; 3] = [MULTI_CLUSTER_SERVICES, SERVICE_IMPORTS, DERIVED_SERVICES];

type Key = ObjectRef<MultiClusterService>;

/// The member's watches the job reads: each its own view of the member's shared watch.
pub(super) struct Taps<'a> {
    pub(super) mcs: &'a mut Tap<MultiClusterService>,
    pub(super) imports: &'a mut Tap<ServiceImport>,
    pub(super) services: &'a mut Tap<Service>,
}

pub(super) struct Views {
    pub(super) mcs: Store<MultiClusterService>,
    pub(super) imports: Store<ServiceImport>,
    pub(super) services: Store<Service>,
}

impl Views {
    /// Takes the three views of the shared watches; each change hands the pace the
    /// MultiClusterServices it touches.
    pub(super) fn watch(
        taps: Taps<'_>,
        fleet_system_namespace: &str,
        health: &Arc<WatchHealth>,
        pace: &Arc<Pace<MultiClusterService>>,
    ) -> Self {
        let to = pace.clone();
        let of_mcs = (health, MULTI_CLUSTER_SERVICES);
        let mcs = taps.mcs.view(of_mcs, Keep::new(every, whole), move |e| {
            if let Event::Apply(m) | Event::InitApply(m) = e {
                to.trigger(key(&m.namespace().unwrap_or_default(), &m.name_any()));
            }
        });
        let to = pace.clone();
        let of_imports = (health, SERVICE_IMPORTS);
        let imports = taps
            .imports
            .view(of_imports, Keep::new(every, whole), move |e| {
                if let Some(key) = touched(e).and_then(controller_of) {
                    to.trigger(key);
                }
            });
        let services = watch_services(taps.services, fleet_system_namespace, health, pace);
        Self {
            mcs,
            imports,
            services,
        }
    }
}

fn key(namespace: &str, name: &str) -> Key {
    ObjectRef::new(name).within(namespace)
}

/// The object an event touched (applied or deleted).
fn touched<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) => Some(o),
        Event::Init | Event::InitDone => None,
    }
}

/// The fleet system namespace's Services carrying both MCS labels; each change triggers the
/// MultiClusterService they name.
fn watch_services(
    tap: &mut Tap<Service>,
    namespace: &str,
    health: &Arc<WatchHealth>,
    pace: &Arc<Pace<MultiClusterService>>,
) -> Store<Service> {
    let namespace = namespace.to_string();
    let derived = move |s: &Service| {
        let labels = s.labels();
        s.metadata.namespace.as_deref() == Some(&namespace)
            && labels.contains_key(MCS_NAME_LABEL)
            && labels.contains_key(MCS_NAMESPACE_LABEL)
    };
    let pace = pace.clone();
    tap.view(
        (health, DERIVED_SERVICES),
        Keep::new(derived, whole),
        move |e| {
            if let Some(key) = touched(e).and_then(served_by) {
                pace.trigger(key);
            }
        },
    )
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
