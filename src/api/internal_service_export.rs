//! `InternalServiceExport` (ISE): what a member's export looks like in the hub, in the member's
//! namespace `fleet-member-<member>`. fleet-networking's hub controllers consume it.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

object! {
    /// InternalServiceExport is a data transport type that member clusters in the fleet use to
    /// upload the spec of an exported Service to the hub cluster.
    pub struct InternalServiceExport {
        pub spec: InternalServiceExportSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<InternalServiceExportStatus>,
    }
    kind "InternalServiceExport", plural "internalserviceexports", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}

/// InternalServiceExportSpec specifies the spec of an exported Service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InternalServiceExportSpec {
    /// A list of ports exposed by the exported Service. Always serialized (`[]`, never null).
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,
    /// The reference to the source Service.
    pub service_reference: ExportedObjectReference,
    /// Type is the type of the Service in each cluster.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// IsInternalLoadBalancer determines if the Service is an internal load balancer type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_internal_load_balancer: Option<bool>,
    /// PublicIPResourceID is the Azure Resource URI of public IP. This is only applicable for
    /// Load Balancer type Services.
    #[serde(
        default,
        rename = "publicIPResourceID",
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ip_resource_id: Option<String>,
    /// IsDNSLabelConfigured determines if the Service has a DNS label configured, as needed when
    /// its public IP address is an Azure Traffic Manager endpoint.
    #[serde(
        default,
        rename = "isDNSLabelConfigured",
        skip_serializing_if = "Option::is_none"
    )]
    pub is_dns_label_configured: Option<bool>,
    /// Weight is the weight of the ServiceExport. If unspecified, weight defaults to 1. The value
    /// is from the serviceExport "networking.fleet.azure.com/weight" annotation, in [0, 1000].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// ServicePort represents the port on which the service is exposed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The name of this port within the service. This must be a DNS_LABEL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The IP protocol for this port. Supports "TCP", "UDP", and "SCTP". Default is TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::crd::protocol_schema")]
    pub protocol: Option<String>,
    /// The application protocol for this port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port that will be exposed by this service.
    #[schemars(extend("minimum" = 1, "maximum" = 65535))]
    pub port: i32,
    /// The port to access on the pods targeted by the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::crd::int_or_string_schema")]
    pub target_port: Option<IntOrString>,
}

/// ExportedObjectReference helps to identify an exported object in a member cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ExportedObjectReference {
    /// The ID of the cluster where the object is exported.
    pub cluster_id: String,
    /// The kind of the referred object.
    pub kind: String,
    /// The namespace of the referred object.
    pub namespace: String,
    /// The name of the referred object.
    pub name: String,
    /// The resource version of the referred object.
    pub resource_version: String,
    /// The generation of the referred object.
    pub generation: i64,
    /// The UID of the referred object.
    pub uid: String,
    /// The namespaced name of the referred object, exactly `<namespace>/<name>`.
    pub namespaced_name: String,
    /// The API version of the referred object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The timestamp from a local clock when the generation of the object is exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::crd::date_time_schema")]
    pub exported_since: Option<Time>,
}

/// InternalServiceExportStatus contains the current status of an InternalServiceExport.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InternalServiceExportStatus {
    /// Conditions set by the hub, e.g. `Conflict` from export conflict resolution.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::crd::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl InternalServiceExport {
    /// The hub's conditions on this export.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ports_serialize_as_empty_list() {
        let v = serde_json::to_value(InternalServiceExportSpec::default()).expect("serializes");
        assert_eq!(v["ports"], serde_json::json!([]));
        assert!(v.get("weight").is_none());
        assert!(v.get("publicIPResourceID").is_none());
    }

    #[test]
    fn reads_fleet_networking_field_names() {
        let spec: InternalServiceExportSpec = serde_json::from_value(serde_json::json!({
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": "http"}],
            "serviceReference": {
                "clusterId": "m1", "kind": "Service", "namespace": "ns", "name": "svc",
                "resourceVersion": "7", "generation": 1, "uid": "u", "namespacedName": "ns/svc",
                "exportedSince": "2026-01-02T03:04:05Z"
            },
            "type": "LoadBalancer", "isInternalLoadBalancer": false,
            "publicIPResourceID": "/subscriptions/s/x", "isDNSLabelConfigured": true, "weight": 5
        }))
        .expect("deserializes");
        assert_eq!(
            spec.ports[0].target_port,
            Some(IntOrString::String("http".into()))
        );
        assert_eq!(
            spec.public_ip_resource_id.as_deref(),
            Some("/subscriptions/s/x")
        );
        assert_eq!(spec.is_dns_label_configured, Some(true));
        assert_eq!(spec.weight, Some(5));
        assert_eq!(spec.service_reference.namespaced_name, "ns/svc");
    }
}
