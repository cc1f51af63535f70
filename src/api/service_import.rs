//! `ServiceImport` (member, written by the MultiClusterService job) and `InternalServiceImport`
//! (hub, in the member's namespace `fleet-member-<member>`, written by the ServiceImport job):
//! a member's request to import a Service, and the hub's verdict (its status), which the
//! member's ServiceImport reflects.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::internal_service_export::{ExportedObjectReference, ServicePort};

object! {
    /// ServiceImport describes a Service imported from the clusters in a ClusterSet; it names
    /// the Service to import, and its status is the hub's verdict.
    pub struct ServiceImport {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<ServiceImportStatus>,
    }
    kind "ServiceImport", plural "serviceimports", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}

object! {
    /// InternalServiceImport is the hub's copy of a member's ServiceImport; fleet-networking's
    /// hub controllers write the verdict into its status.
    pub struct InternalServiceImport {
        pub spec: InternalServiceImportSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<ServiceImportStatus>,
    }
    kind "InternalServiceImport", plural "internalserviceimports", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}

/// InternalServiceImportSpec names the member's ServiceImport.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InternalServiceImportSpec {
    /// The member's ServiceImport.
    pub service_import_reference: ExportedObjectReference,
}

/// ServiceImportStatus: the Service as imported (ports, type, IPs) and the clusters exporting it.
/// Unset fields are omitted, as fleet-networking's Go types omit them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// The clusters exporting the Service (a list-map keyed by `cluster`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// At most one IP (of a ClusterSetIP import).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// Kept as sent (`clientIP.timeoutSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<serde_json::Value>,
    /// `ClusterSetIP` or `Headless`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// One cluster exporting the imported Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The cluster's ID (its member name).
    pub cluster: String,
}

impl ServiceImport {
    /// The clusters the hub says export the Service (none while it is being processed).
    pub fn clusters(&self) -> &[ClusterStatus] {
        self.status.as_ref().map_or(&[], |s| &s.clusters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_fleet_networking_field_names() {
        let status = serde_json::json!({
            "clusters": [{"cluster": "m1"}, {"cluster": "m2"}],
            "ips": ["10.0.0.1"],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 30}},
            "type": "ClusterSetIP"
        });
        let isi: InternalServiceImport = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.fleet.azure.com/v1alpha1",
            "kind": "InternalServiceImport",
            "metadata": {"name": "ns-svc", "namespace": "fleet-member-m1"},
            "spec": {"serviceImportReference": {
                "clusterId": "m1", "kind": "ServiceImport", "namespace": "ns", "name": "svc",
                "resourceVersion": "7", "generation": 1, "uid": "u", "namespacedName": "ns/svc"
            }},
            "status": status
        }))
        .expect("deserializes");
        let back = serde_json::to_value(isi.status.as_ref().expect("status")).expect("serializes");
        assert_eq!(back, status);
        assert_eq!(isi.spec.service_import_reference.namespaced_name, "ns/svc");
        let empty = serde_json::to_value(ServiceImportStatus::default()).expect("serializes");
        assert_eq!(empty, serde_json::json!({}));
    }
}
