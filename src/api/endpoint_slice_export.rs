//! `EndpointSliceExport` (ESE): one member EndpointSlice as the hub sees it, in the member's
//! namespace `fleet-member-<member>`. fleet-networking's hub EndpointSliceExport controller
//! copies it into EndpointSliceImports for every member that imports the Service.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ExportedObjectReference;

object! {
    /// EndpointSliceExport is a data transport type that member clusters in the fleet use to
    /// upload the spec of an EndpointSlice to the hub cluster.
    pub struct EndpointSliceExport {
        pub spec: EndpointSliceExportSpec,
    }
    kind "EndpointSliceExport", plural "endpointsliceexports", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}

/// The only address type fleet-networking exports.
pub const ADDRESS_TYPE_IPV4: &str = "IPv4";

/// EndpointSliceExportSpec specifies the spec of an exported EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSliceExportSpec {
    /// The type of addresses carried by this EndpointSliceExport. At this stage only IPv4
    /// addresses are supported.
    #[schemars(schema_with = "super::crd::address_type_schema")]
    pub address_type: String,
    /// A list of unique endpoints in the exported EndpointSlice. Always serialized (`[]` when
    /// no endpoint is ready).
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub endpoints: Vec<Endpoint>,
    /// The list of ports exported by each endpoint in this EndpointSliceExport.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<EndpointPort>,
    /// The reference to the source EndpointSlice.
    pub endpoint_slice_reference: ExportedObjectReference,
    /// The reference to the owner Service.
    pub owner_service_reference: OwnerServiceReference,
}

/// Endpoint includes all exported addresses from a logical backend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Endpoint {
    /// Addresses of the Endpoint, per the EndpointSliceExport's addressType.
    pub addresses: Vec<String>,
}

/// A port of the exported EndpointSlice (`discovery.k8s.io/v1` EndpointPort).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct EndpointPort {
    /// The application protocol for this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The name of this port, empty or a DNS_LABEL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port number of the endpoint; absent: ports are not restricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// The IP protocol for this port: UDP, TCP, or SCTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// OwnerServiceReference points to the Service that owns the exported EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerServiceReference {
    /// The namespace of the owner Service.
    pub namespace: String,
    /// The name of the owner Service.
    pub name: String,
    /// The namespaced name (key) of the owner Service, `<namespace>/<name>`.
    pub namespaced_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_fleet_networking_field_names() {
        let wire = serde_json::json!({
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"}],
            "endpointSliceReference": {
                "clusterId": "m1", "kind": "EndpointSlice", "namespace": "ns", "name": "s",
                "resourceVersion": "7", "generation": 2, "uid": "u", "namespacedName": "ns/s",
                "exportedSince": "2026-01-02T03:04:05Z"
            },
            "ownerServiceReference": {"namespace": "ns", "name": "svc", "namespacedName": "ns/svc"}
        });
        let spec: EndpointSliceExportSpec =
            serde_json::from_value(wire.clone()).expect("deserializes");
        assert_eq!(spec.ports[0].port, Some(80));
        assert_eq!(spec.owner_service_reference.namespaced_name, "ns/svc");
        assert_eq!(serde_json::to_value(&spec).expect("serializes"), wire);
    }

    #[test]
    fn no_ready_endpoint_is_an_empty_list_not_an_absent_field() {
        let v = serde_json::to_value(EndpointSliceExportSpec::default()).expect("serializes");
        assert_eq!(v["endpoints"], serde_json::json!([]));
        assert!(v.get("ports").is_none());
    }
}
