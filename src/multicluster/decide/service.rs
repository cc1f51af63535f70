//! The derived Service as the reference's mutate function makes it, compared as the API server
//! stores it.

use k8s_openapi::api::core::v1::{Service, ServicePort as KubeServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    INTERNAL_LB_ANNOTATION, MCS_NAME_LABEL, MCS_NAMESPACE_LABEL, SERVICE_INTERNAL_LB_ANNOTATION,
    ServiceChange, namespace_of,
};
use crate::api::{MultiClusterService, ServicePort};

/// The derived Service's labels, annotations, type and ports as the reference's mutate sets
/// them over `existing`; `None` when `existing` already is so (as the API server keeps it:
/// defaulted target ports and protocols, allocated node ports).
pub(super) fn service_change(
    mcs: &MultiClusterService,
    ports: &[ServicePort],
    existing: Option<&Service>,
    name: &str,
) -> Option<ServiceChange> {
    let mut labels = existing
        .and_then(|s| s.metadata.labels.clone())
        .unwrap_or_default();
    let mcs_name = mcs.metadata.name.clone().unwrap_or_default();
    labels.insert(MCS_NAME_LABEL.into(), mcs_name);
    labels.insert(MCS_NAMESPACE_LABEL.into(), namespace_of(mcs).into());
    let mut annotations = existing
        .and_then(|s| s.metadata.annotations.clone())
        .unwrap_or_default();
    if wants_internal_lb(mcs) {
        annotations.insert(SERVICE_INTERNAL_LB_ANNOTATION.into(), "true".into());
    }
    let spec = existing.and_then(|s| s.spec.as_ref());
    let have = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
    let want: Vec<KubeServicePort> = ports.iter().map(|p| kube_port(p, have)).collect();
    if let Some(existing) = existing {
        let converged = spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
            && existing.metadata.labels.as_ref() == Some(&labels)
            && existing.metadata.annotations.clone().unwrap_or_default() == annotations
            && same_ports(&want, have);
        if converged {
            return None;
        }
    }
    Some(ServiceChange {
        name: name.into(),
        resource_version: existing.and_then(|s| s.metadata.resource_version.clone()),
        labels,
        annotations,
        ports: want,
    })
}

/// fleet-networking's `ToServicePort`, keeping the node port the API server allocated to the
/// port of that name (as it would itself on an update that leaves it out).
fn kube_port(port: &ServicePort, have: &[KubeServicePort]) -> KubeServicePort {
    let node_port = have
        .iter()
        .find(|h| h.name.as_deref().unwrap_or_default() == port.name.as_deref().unwrap_or_default())
        .and_then(|h| h.node_port);
    KubeServicePort {
        name: port.name.clone(),
        protocol: port.protocol.clone(),
        app_protocol: port.app_protocol.clone(),
        port: port.port,
        target_port: port.target_port.clone(),
        node_port,
    }
}

/// Equal as the API server stores them: an unset protocol is TCP, an unset target port is the
/// port; node ports are the server's.
fn same_ports(want: &[KubeServicePort], have: &[KubeServicePort]) -> bool {
    let target = |p: &KubeServicePort| match &p.target_port {
        None => IntOrString::Int(p.port),
        Some(IntOrString::Int(0)) => IntOrString::Int(p.port),
        Some(IntOrString::String(s)) if s.is_empty() => IntOrString::Int(p.port),
        Some(t) => t.clone(),
    };
    let same = |w: &KubeServicePort, h: &KubeServicePort| {
        w.name.as_deref().unwrap_or_default() == h.name.as_deref().unwrap_or_default()
            && w.protocol.as_deref().unwrap_or("TCP") == h.protocol.as_deref().unwrap_or("TCP")
            && w.app_protocol == h.app_protocol
            && w.port == h.port
            && target(w) == target(h)
    };
    want.len() == have.len() && want.iter().zip(have).all(|(w, h)| same(w, h))
}

/// Go's `strconv.ParseBool` on the annotation: only a true value asks for it.
fn wants_internal_lb(mcs: &MultiClusterService) -> bool {
    let value = mcs
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INTERNAL_LB_ANNOTATION));
    matches!(
        value.map(String::as_str),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}
