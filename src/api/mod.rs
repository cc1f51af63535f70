//! The fleet-networking API types fleetnet-hub reads and writes (group `networking.fleet.azure.com`),
//! wire-compatible with fleet-networking's CRDs, and the CRDs generated from them.

/// Declares an object of the group (or of `group`): the struct with `apiVersion`, `kind` and
/// `metadata` before the given fields, and its `kube::Resource` impl; `$dt` is the dynamic type
/// and `$version` the version, given that value as `$v`.
macro_rules! object {
    (
        $(#[$attr:meta])*
        pub struct $ty:ident { $($fields:tt)* }
        kind $kind:literal, plural $plural:literal, scope $scope:ty,
        version |$v:ident: $dt:ty| $version:expr
    ) => {
        object! {
            $(#[$attr])*
            pub struct $ty { $($fields)* }
            group super::GROUP, kind $kind, plural $plural, scope $scope,
            version |$v: $dt| $version
        }
    };
    (
        $(#[$attr:meta])*
        pub struct $ty:ident { $($fields:tt)* }
        group $group:expr, kind $kind:literal, plural $plural:literal, scope $scope:ty,
        version |$v:ident: $dt:ty| $version:expr
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $ty {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub api_version: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub kind: Option<String>,
            #[serde(default)]
            pub metadata: ObjectMeta,
            $($fields)*
        }

        impl kube::Resource for $ty {
            type DynamicType = $dt;
            type Scope = $scope;

            fn kind(_: &$dt) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &$dt) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version($v: &$dt) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &$dt) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

mod conditions;
mod crd;
mod endpoint_slice_export;
mod endpoint_slice_import;
mod internal_member_cluster;
mod internal_service_export;
mod multi_cluster_service;
mod service_export;
mod service_import;

pub use conditions::{
    CONDITION_CONFLICT, CONDITION_VALID, ConditionSpec, condition_matches, find_condition,
    set_condition,
};
pub use crd::{
    crd_files, crd_yaml, endpoint_slice_export_crd, internal_service_export_crd, service_export_crd,
};
pub use endpoint_slice_export::{
    ADDRESS_TYPE_IPV4, Endpoint as ExportedEndpoint, EndpointPort, EndpointSliceExport,
    EndpointSliceExportSpec, OwnerServiceReference,
};
pub use endpoint_slice_import::EndpointSliceImport;
pub use internal_member_cluster::{
    AGENT_JOINED, AgentStatus, AgentTypes, CLUSTER_STATE_JOIN, CLUSTER_STATE_LEAVE,
    FLEET_CLUSTER_GROUP, InternalMemberCluster, InternalMemberClusterSpec,
    InternalMemberClusterStatus, MULTI_CLUSTER_SERVICE_AGENT, SERVICE_EXPORT_IMPORT_AGENT,
};
pub use internal_service_export::{
    ExportedObjectReference, InternalServiceExport, InternalServiceExportSpec,
    InternalServiceExportStatus, ServicePort,
};
pub use multi_cluster_service::{
    MultiClusterService, MultiClusterServiceSpec, MultiClusterServiceStatus, ServiceImportRef,
};
pub use service_export::{ServiceExport, ServiceExportStatus, ServiceExportVersion};
pub use service_import::{
    ClusterStatus, InternalServiceImport, InternalServiceImportSpec, ServiceImport,
    ServiceImportStatus,
};

/// The API group of every fleet-networking type.
pub const GROUP: &str = "networking.fleet.azure.com";

/// Annotation on an exported member object (an EndpointSlice): its fleet-unique name, the name of
/// its export in the hub.
pub const UNIQUE_NAME_ANNOTATION: &str = "networking.fleet.azure.com/fleet-unique-name";
/// Annotation the member agents write on exported EndpointSlices for their metrics; removed
/// with the unique name when a slice is withdrawn.
pub const LAST_SEEN_GENERATION_ANNOTATION: &str = "networking.fleet.azure.com/last-seen-generation";

/// Finalizer that keeps a ServiceExport until its Service is unexported from the hub.
pub const CLEANUP_FINALIZER: &str = "networking.fleet.azure.com/svc-export-cleanup";
/// Annotation with the ServiceExport's weight in its ServiceImport, an integer in [0, 1000].
pub const WEIGHT_ANNOTATION: &str = "networking.fleet.azure.com/weight";
/// Annotation: the Service resourceVersion last seen when exporting (for the export-latency metric).
pub const LAST_SEEN_RESOURCE_VERSION_ANNOTATION: &str =
    "networking.fleet.azure.com/last-seen-resource-version";
/// Annotation: when that resourceVersion was first seen (RFC 3339).
pub const LAST_SEEN_TIMESTAMP_ANNOTATION: &str = "networking.fleet.azure.com/last-seen-timestamp";

/// Label on a MultiClusterService: its derived Service's name (the MultiClusterService job
/// writes it, the EndpointSliceImport job reads it).
pub const DERIVED_SERVICE_LABEL: &str = "networking.fleet.azure.com/derived-service";
/// Kubernetes' label that names the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Azure's annotation: whether a LoadBalancer Service is internal (case-sensitive "true").
pub const AZURE_LB_INTERNAL_ANNOTATION: &str =
    "service.beta.kubernetes.io/azure-load-balancer-internal";
