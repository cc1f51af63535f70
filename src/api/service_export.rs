//! `ServiceExport`: declares in a member that a Service of the same namespace/name is exported.
//! It has no spec. Members serve it as v1alpha1 and/or v1beta1 (same schema, no conversion), so
//! the version is the resource's dynamic type, chosen per member at runtime.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::GROUP;

/// Which served version of ServiceExport a member is read and written through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ServiceExportVersion {
    V1Alpha1,
    /// The storage version of current fleet-networking releases, preferred when served.
    #[default]
    V1Beta1,
}

impl ServiceExportVersion {
    /// `v1alpha1` or `v1beta1`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1Alpha1 => "v1alpha1",
            Self::V1Beta1 => "v1beta1",
        }
    }

    /// The preferred version among those a member serves: v1beta1, else v1alpha1.
    pub fn prefer<'a>(served: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let served: Vec<&str> = served.into_iter().collect();
        [Self::V1Beta1, Self::V1Alpha1]
            .into_iter()
            .find(|v| served.contains(&v.as_str()))
    }

    /// The ServiceExport version a cluster serves, preferring v1beta1 (API discovery).
    pub async fn discover(client: &kube::Client) -> Result<Self, String> {
        let group = kube::discovery::group(client, GROUP).await.map_err(|e| {
            format!("API group {GROUP} not served (is the ServiceExport CRD installed?): {e}")
        })?;
        let served: Vec<String> = group
            .versions()
            .filter(|v| {
                group
                    .versioned_resources(v)
                    .iter()
                    .any(|(r, _)| r.kind == "ServiceExport")
            })
            .map(str::to_string)
            .collect();
        Self::prefer(served.iter().map(String::as_str)).ok_or_else(|| {
            format!("ServiceExport is not served in v1beta1 or v1alpha1 (served: {served:?})")
        })
    }
}

object! {
    /// ServiceExport declares that the Service with the same namespace and name should be
    /// exported to the fleet. Annotation `networking.fleet.azure.com/weight` (integer in
    /// [0, 1000], default 1) sets its share of the traffic of the ServiceImport; 0 means no
    /// traffic.
    pub struct ServiceExport {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<ServiceExportStatus>,
    }
    kind "ServiceExport", plural "serviceexports", scope kube::core::DynamicResourceScope,
    // Dynamic because the served version is only known per member, at runtime.
    version |v: ServiceExportVersion| v.as_str()
}

/// ServiceExportStatus contains the current status of an export.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// Conditions of the export: `Valid` and `Conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::crd::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl ServiceExport {
    /// A new ServiceExport for the Service `namespace/name`, typed for `version`.
    pub fn new(namespace: &str, name: &str, version: ServiceExportVersion) -> Self {
        Self {
            api_version: Some(format!("{GROUP}/{}", version.as_str())),
            kind: Some("ServiceExport".into()),
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            status: None,
        }
    }

    /// Whether the export holds the cleanup finalizer (it may have been exported).
    pub fn has_cleanup_finalizer(&self) -> bool {
        self.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == super::CLEANUP_FINALIZER)
    }

    /// A merge patch that drops the cleanup finalizer and keeps any others; with
    /// `resource_version` it fails (409) if the object changed since it was read.
    pub fn finalizer_removal_patch(&self, resource_version: Option<&str>) -> serde_json::Value {
        let rest: Vec<&String> = self
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != super::CLEANUP_FINALIZER)
            .collect();
        serde_json::json!({"metadata": {"resourceVersion": resource_version, "finalizers": rest}})
    }

    /// The export's conditions (empty when it has no status yet).
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_v1beta1_then_v1alpha1() {
        assert_eq!(
            ServiceExportVersion::prefer(["v1alpha1", "v1beta1"]),
            Some(ServiceExportVersion::V1Beta1)
        );
        assert_eq!(
            ServiceExportVersion::prefer(["v1alpha1"]),
            Some(ServiceExportVersion::V1Alpha1)
        );
        assert_eq!(ServiceExportVersion::prefer(["v2"]), None);
    }

    #[test]
    fn empty_status_serializes_without_conditions() {
        let se = ServiceExport::default();
        let v = serde_json::to_value(&se).expect("serializes");
        assert!(v.get("status").is_none());
    }
}
