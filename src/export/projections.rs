//! What the ServiceExport job's views keep of each object: projections read from the API's
//! objects and reduced at once, rebuilt as full objects for each decision (`to_service`,
//! `to_ise`), so a cached object holds only what decisions read. The ServiceExports are the
//! shared watch's ([`crate::service_exports`]).

use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::decide::{
    AZURE_DNS_LABEL_ANNOTATION, AZURE_LB_INTERNAL_ANNOTATION, AZURE_LB_RESOURCE_GROUP_ANNOTATION,
};
use crate::api::{InternalServiceExport, InternalServiceExportSpec, InternalServiceExportStatus};
use crate::controller::projection::{ObjectId, kept, keyed_by_name, rebuilt};
use crate::controller::writers::Writers;

/// The annotations decisions read on a Service.
const SERVICE_ANNOTATIONS: [&str; 3] = [
    AZURE_LB_INTERNAL_ANNOTATION,
    AZURE_LB_RESOURCE_GROUP_ANNOTATION,
    AZURE_DNS_LABEL_ANNOTATION,
];

/// A Service as the decisions read it: identity, versions and deletion, type, cluster IP,
/// ports, the first ingress IP and the Azure load-balancer annotations. No `ObjectMeta` or the
/// rest of the spec (a `Service` is 824 bytes before any of its strings, most of them empty):
/// read as a `Service`, reduced at once, and rebuilt as one for each decision
/// ([`ServiceView::to_service`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ServiceView {
    pub(crate) id: ObjectId,
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
        let mut meta = service.metadata;
        let spec = service.spec.unwrap_or_default();
        let ingress_ip = service
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|ingress| ingress.into_iter().next())
            .and_then(|first| first.ip);
        Self {
            id: ObjectId::take(&mut meta),
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
                generation: self.generation,
                deletion_timestamp: self.deletion_timestamp.clone(),
                annotations: rebuilt(&SERVICE_ANNOTATIONS, &self.annotations),
                ..self.id.meta()
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
pub struct IseView {
    pub(crate) id: ObjectId,
    deletion_timestamp: Option<Time>,
    pub(crate) spec: InternalServiceExportSpec,
    status: Option<InternalServiceExportStatus>,
    /// Who wrote it last: the agent still writing it is another writer.
    writers: Writers,
}

impl From<InternalServiceExport> for IseView {
    fn from(ise: InternalServiceExport) -> Self {
        let mut meta = ise.metadata;
        Self {
            writers: Writers::of_ours(&meta),
            id: ObjectId::take(&mut meta),
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
                deletion_timestamp: self.deletion_timestamp.clone(),
                managed_fields: self.writers.managed_fields(),
                ..self.id.meta()
            },
            spec: self.spec.clone(),
            status: self.status.clone(),
            ..Default::default()
        }
    }
}

keyed_by_name!(ServiceView, "Service", "", "v1", "services");
keyed_by_name!(IseView, "InternalServiceExport", "internalserviceexports");
