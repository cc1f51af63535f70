//! `MultiClusterService` (member): a request to import a Service into the member behind a load
//! balancer; the job makes a ServiceImport of it and, once the hub has a verdict, a derived
//! Service in the fleet system namespace.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

object! {
    /// MultiClusterService imports the Service a ServiceImport names, behind a load balancer.
    pub struct MultiClusterService {
        pub spec: MultiClusterServiceSpec,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<MultiClusterServiceStatus>,
    }
    kind "MultiClusterService", plural "multiclusterservices", scope NamespaceResourceScope,
    version |_v: ()| "v1alpha1"
}

/// MultiClusterServiceSpec names the ServiceImport.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServiceSpec {
    pub service_import: ServiceImportRef,
}

/// The ServiceImport a MultiClusterService imports, in its own namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportRef {
    pub name: String,
}

/// MultiClusterServiceStatus: the derived Service's load balancer and the `Valid` condition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServiceStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

impl MultiClusterService {
    /// Its conditions.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fleet_networking_field_names() {
        let mcs: MultiClusterService = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "mcs", "namespace": "ns"},
            "spec": {"serviceImport": {"name": "svc"}},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}, "conditions": []}
        }))
        .expect("deserializes");
        assert_eq!(mcs.spec.service_import.name, "svc");
        let lb = mcs.status.and_then(|s| s.load_balancer).expect("lb");
        assert_eq!(
            lb.ingress.expect("ingress")[0].ip.as_deref(),
            Some("1.2.3.4")
        );
    }
}
