//! What the exporter's views keep of each object: projections read from the API's objects and
//! reduced at once, rebuilt as full objects for each decision (`to_service`, `to_ise`,
//! `to_export`), so a cached object holds only what decisions read.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::watcher;

use super::decide::{
    AZURE_DNS_LABEL_ANNOTATION, AZURE_LB_INTERNAL_ANNOTATION, AZURE_LB_RESOURCE_GROUP_ANNOTATION,
};
use crate::api::{
    InternalServiceExport, InternalServiceExportSpec, InternalServiceExportStatus,
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION, ServiceExport,
    ServiceExportStatus, ServiceExportVersion, WEIGHT_ANNOTATION,
};

/// The annotations decisions read on a ServiceExport and on a Service.
const EXPORT_ANNOTATIONS: [&str; 3] = [
    WEIGHT_ANNOTATION,
    LAST_SEEN_RESOURCE_VERSION_ANNOTATION,
    LAST_SEEN_TIMESTAMP_ANNOTATION,
];
const SERVICE_ANNOTATIONS: [&str; 3] = [
    AZURE_LB_INTERNAL_ANNOTATION,
    AZURE_LB_RESOURCE_GROUP_ANNOTATION,
    AZURE_DNS_LABEL_ANNOTATION,
];

/// The values of `keys` among an object's annotations, in that order: what a view keeps of
/// them (a `BTreeMap` of two entries is a 544-byte node; a `kubectl apply` annotation alone can
/// be larger than all the rest).
fn kept<const N: usize>(
    keys: [&str; N],
    annotations: Option<BTreeMap<String, String>>,
) -> [Option<String>; N] {
    let mut annotations = annotations.unwrap_or_default();
    keys.map(|k| annotations.remove(k))
}

/// The annotations a view kept ([`kept`]) as an object carries them; `None` when there are none.
fn rebuilt(keys: &[&str], values: &[Option<String>]) -> Option<BTreeMap<String, String>> {
    let annotations: BTreeMap<String, String> = keys
        .iter()
        .zip(values)
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect();
    Some(annotations).filter(|a| !a.is_empty())
}

/// A watch event whose object is reduced to what a view keeps of it (`B::from`).
pub(crate) fn project<A, B: From<A>>(event: watcher::Event<A>) -> watcher::Event<B> {
    use watcher::Event;
    match event {
        Event::Apply(a) => Event::Apply(a.into()),
        Event::Delete(a) => Event::Delete(a.into()),
        Event::Init => Event::Init,
        Event::InitApply(a) => Event::InitApply(a.into()),
        Event::InitDone => Event::InitDone,
    }
}

/// A Service as the decisions read it: identity, versions and deletion, type, cluster IP,
/// ports, the first ingress IP and the Azure load-balancer annotations. No `ObjectMeta` or the
/// rest of the spec (a `Service` is 824 bytes before any of its strings, most of them empty):
/// read as a `Service`, reduced at once, and rebuilt as one for each decision
/// ([`ServiceView::to_service`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServiceView {
    pub(crate) name: String,
    pub(crate) namespace: String,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    deletion_timestamp: Option<Time>,
    /// The values of [`SERVICE_ANNOTATIONS`], in that order.
    annotations: [Option<String>; SERVICE_ANNOTATIONS.len()],
    type_: Option<String>,
    cluster_ip: Option<String>,
    ports: Option<Vec<ServicePort>>,
    ingress_ip: Option<String>,
}

impl From<Service> for ServiceView {
    fn from(service: Service) -> Self {
        let meta = service.metadata;
        let spec = service.spec.unwrap_or_default();
        let ingress_ip = service
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|ingress| ingress.into_iter().next())
            .and_then(|first| first.ip);
        Self {
            name: meta.name.unwrap_or_default(),
            namespace: meta.namespace.unwrap_or_default(),
            uid: meta.uid,
            resource_version: meta.resource_version,
            generation: meta.generation,
            deletion_timestamp: meta.deletion_timestamp,
            annotations: kept(SERVICE_ANNOTATIONS, meta.annotations),
            type_: spec.type_,
            cluster_ip: spec.cluster_ip,
            ports: spec.ports,
            ingress_ip,
        }
    }
}

impl ServiceView {
    /// The Service as decisions read it: every field the view keeps, nothing else.
    pub(crate) fn to_service(&self) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: self.uid.clone(),
                resource_version: self.resource_version.clone(),
                generation: self.generation,
                deletion_timestamp: self.deletion_timestamp.clone(),
                annotations: rebuilt(&SERVICE_ANNOTATIONS, &self.annotations),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: self.type_.clone(),
                cluster_ip: self.cluster_ip.clone(),
                ports: self.ports.clone(),
                ..Default::default()
            }),
            status: self.ingress_ip.as_ref().map(|ip| ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some(ip.clone()),
                        ..Default::default()
                    }]),
                }),
                ..Default::default()
            }),
        }
    }
}

/// An ISE as the decisions read it: identity, versions and deletion, its spec and the hub's
/// conditions, without the rest of `ObjectMeta` (360 bytes, most of them empty); rebuilt as an
/// `InternalServiceExport` for each decision ([`IseView::to_ise`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct IseView {
    pub(crate) name: String,
    namespace: String,
    uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    pub(crate) spec: InternalServiceExportSpec,
    status: Option<InternalServiceExportStatus>,
}

impl From<InternalServiceExport> for IseView {
    fn from(ise: InternalServiceExport) -> Self {
        let meta = ise.metadata;
        Self {
            name: meta.name.unwrap_or_default(),
            namespace: meta.namespace.unwrap_or_default(),
            uid: meta.uid,
            resource_version: meta.resource_version,
            deletion_timestamp: meta.deletion_timestamp,
            spec: ise.spec,
            status: ise.status,
        }
    }
}

impl IseView {
    /// The ISE as decisions read it: every field the view keeps, nothing else.
    pub(crate) fn to_ise(&self) -> InternalServiceExport {
        InternalServiceExport {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: self.uid.clone(),
                resource_version: self.resource_version.clone(),
                deletion_timestamp: self.deletion_timestamp.clone(),
                ..Default::default()
            },
            spec: self.spec.clone(),
            status: self.status.clone(),
            ..Default::default()
        }
    }
}

/// A ServiceExport as the controller keeps it: its metadata without annotations, the three
/// annotations decisions read as fields of their own (a `BTreeMap` of two entries is a
/// 544-byte node), and its status. Read as a `ServiceExport` and reduced at once; rebuilt as
/// one for each reconcile ([`ServiceExportView::to_export`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(from = "ServiceExport")]
pub(crate) struct ServiceExportView {
    metadata: ObjectMeta,
    /// The values of [`EXPORT_ANNOTATIONS`], in that order.
    annotations: [Option<String>; EXPORT_ANNOTATIONS.len()],
    status: Option<ServiceExportStatus>,
}

impl From<ServiceExport> for ServiceExportView {
    fn from(se: ServiceExport) -> Self {
        let mut metadata = se.metadata;
        let annotations = metadata.annotations.take();
        metadata.managed_fields = None;
        metadata.labels = None;
        metadata.owner_references = None;
        Self {
            metadata,
            annotations: kept(EXPORT_ANNOTATIONS, annotations),
            status: se.status,
        }
    }
}

impl ServiceExportView {
    /// Its last decision found it not exportable (`Valid=False` for a reason other than the
    /// export quota: no Service, ineligible, too large...): it waits for no place in the hub.
    pub(crate) fn refused(&self) -> bool {
        let conditions = self.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
        crate::api::find_condition(conditions, crate::api::CONDITION_VALID).is_some_and(|c| {
            c.status == "False" && c.reason != super::decide::reason::QUOTA_EXCEEDED
        })
    }

    /// The ServiceExport as reconciles read it: every field the view keeps, nothing else.
    pub(crate) fn to_export(&self) -> ServiceExport {
        ServiceExport {
            metadata: ObjectMeta {
                annotations: rebuilt(&EXPORT_ANNOTATIONS, &self.annotations),
                ..self.metadata.clone()
            },
            status: self.status.clone(),
            ..Default::default()
        }
    }
}

impl kube::Resource for ServiceExportView {
    type DynamicType = ServiceExportVersion;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::kind(v)
    }
    fn group(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::group(v)
    }
    fn version(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::version(v)
    }
    fn plural(v: &ServiceExportVersion) -> Cow<'_, str> {
        ServiceExport::plural(v)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A projection kept in a reflector store keyed by its `name` and `namespace` fields only: a
/// version and UID in each key would be two more strings per object, read by nobody (an
/// `ObjectRef` compares nothing else).
macro_rules! keyed_by_name {
    ($ty:ty, $kind:literal, $group:expr, $version:literal, $plural:literal) => {
        impl kube::runtime::reflector::Lookup for $ty {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.name.as_str().into())
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.namespace.as_str().into())
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
        }
    };
}
pub(crate) use keyed_by_name;

keyed_by_name!(ServiceView, "Service", "", "v1", "services");
keyed_by_name!(
    IseView,
    "InternalServiceExport",
    crate::api::GROUP,
    "v1alpha1",
    "internalserviceexports"
);
