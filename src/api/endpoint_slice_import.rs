//! `EndpointSliceImport`: an exported EndpointSlice as fleet-networking's hub controllers
//! distribute it to an importing member, in the member's namespace `fleet-member-<member>`. Its
//! spec is an EndpointSliceExport's; it has no status.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::endpoint_slice_export::EndpointSliceExportSpec;

object! {
    /// EndpointSliceImport is the hub's copy of an exported EndpointSlice for one importing
    /// member.
    pub struct EndpointSliceImport {
        pub spec: EndpointSliceExportSpec,
    }
    kind "EndpointSliceImport", plural "endpointsliceimports", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}
