//! What the EndpointSlice exporter keeps of each object: projections, deserialized from the
//! API's answers (watch events, live reads, write responses) and reduced at once, so a cached
//! slice holds its addresses and readiness but none of an Endpoint's other fields, and a cached
//! export holds what the decision compares plus a digest of its spec.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

use crate::api::{
    CONDITION_CONFLICT, CONDITION_VALID, EndpointPort, EndpointSliceExport,
    EndpointSliceExportSpec, LAST_SEEN_GENERATION_ANNOTATION, LAST_SEEN_TIMESTAMP_ANNOTATION,
    ServiceExport, ServiceExportVersion, UNIQUE_NAME_ANNOTATION, find_condition,
};
use crate::controller::projection::{ObjectId, keyed_by_name};

pub use crate::api::SERVICE_NAME_LABEL;

/// An EndpointSlice as decisions read it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "EndpointSlice")]
pub struct SliceView {
    /// Identity, versions and deletion only.
    pub metadata: ObjectMeta,
    pub address_type: String,
    pub endpoints: Vec<SliceEndpoint>,
    pub ports: Vec<EndpointPort>,
    /// The `kubernetes.io/service-name` label.
    pub service: Option<String>,
    /// The fleet-unique-name annotation.
    pub unique_name: Option<String>,
    /// The `last-seen-generation` annotation, as written ([`super::last_seen`]).
    pub last_seen_generation: Option<String>,
    /// The `last-seen-timestamp` annotation, as written.
    pub last_seen_timestamp: Option<String>,
}

/// One endpoint: its addresses and whether it is ready (`None`: unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceEndpoint {
    pub addresses: Vec<String>,
    pub ready: Option<bool>,
}

impl From<EndpointSlice> for SliceView {
    fn from(slice: EndpointSlice) -> Self {
        let mut metadata = slice.metadata;
        let service = metadata
            .labels
            .take()
            .and_then(|mut l| l.remove(SERVICE_NAME_LABEL));
        let mut annotations = metadata.annotations.take().unwrap_or_default();
        let unique_name = annotations.remove(UNIQUE_NAME_ANNOTATION);
        let last_seen_generation = annotations.remove(LAST_SEEN_GENERATION_ANNOTATION);
        let last_seen_timestamp = annotations.remove(LAST_SEEN_TIMESTAMP_ANNOTATION);
        Self {
            metadata: identity(metadata),
            address_type: slice.address_type,
            endpoints: slice
                .endpoints
                .into_iter()
                .flatten()
                .map(|e| SliceEndpoint {
                    addresses: e.addresses,
                    ready: e.conditions.and_then(|c| c.ready),
                })
                .collect(),
            ports: slice
                .ports
                .into_iter()
                .flatten()
                .map(|p| EndpointPort {
                    app_protocol: p.app_protocol,
                    name: p.name,
                    port: p.port,
                    protocol: p.protocol,
                })
                .collect(),
            service,
            unique_name,
            last_seen_generation,
            last_seen_timestamp,
        }
    }
}

/// An EndpointSliceExport as decisions read it: its identity, the slice it refers to and a
/// digest of its spec (see [`digest`]). No `ObjectMeta` (360 bytes, most of them empty): it is
/// read as an `EndpointSliceExport` and reduced at once ([`From`]), and kept in a reflector
/// store by its name ([`crate::controller::projection::keyed_by_name`]), which is all a store needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExportView {
    pub id: ObjectId,
    /// It has a deletion timestamp.
    pub deleting: bool,
    pub slice_namespace: String,
    pub slice_name: String,
    pub slice_uid: String,
    pub generation: i64,
    pub exported_since: Option<Time>,
    pub digest: u64,
    /// Who wrote it last: the agent still writing it is another writer.
    pub writers: crate::controller::writers::Writers,
}

impl From<EndpointSliceExport> for ExportView {
    fn from(e: EndpointSliceExport) -> Self {
        let digest = digest(&e.spec);
        let r = e.spec.endpoint_slice_reference;
        let mut meta = e.metadata;
        Self {
            writers: crate::controller::writers::Writers::of_ours(&meta),
            id: ObjectId::take(&mut meta),
            deleting: meta.deletion_timestamp.is_some(),
            slice_namespace: r.namespace,
            slice_name: r.name,
            slice_uid: r.uid,
            generation: r.generation,
            exported_since: r.exported_since,
            digest,
        }
    }
}

keyed_by_name!(ExportView, "EndpointSliceExport", "endpointsliceexports");

/// A ServiceExport as eligibility reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "ServiceExport")]
pub struct ExportVerdict {
    pub metadata: ObjectMeta,
    /// `Valid=True`, `Conflict=False` and not being deleted.
    pub valid_without_conflict: bool,
}

impl From<ServiceExport> for ExportVerdict {
    fn from(se: ServiceExport) -> Self {
        Self {
            valid_without_conflict: export_is_valid_without_conflict(&se),
            metadata: identity(se.metadata),
        }
    }
}

/// Name, namespace, UID, resourceVersion, generation and deletion: what keys, versions and
/// decisions need of any object here.
fn identity(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        deletion_timestamp: meta.deletion_timestamp,
        ..Default::default()
    }
}

/// A digest of what an export says, the slice's kind and API version aside (the reference's
/// are empty, its client leaving TypeMeta empty; an export an earlier version wrote with them is
/// not rewritten for that alone). Stable within a process, which is all it is compared in.
pub fn digest(spec: &EndpointSliceExportSpec) -> u64 {
    let mut spec = spec.clone();
    spec.endpoint_slice_reference.kind = String::new();
    spec.endpoint_slice_reference.api_version = None;
    let mut h = std::hash::DefaultHasher::new();
    serde_json::to_vec(&spec).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Declares the Kubernetes resource a projection is read from.
macro_rules! resource {
    ($ty:ty, $dt:ty, $scope:ty, $group:literal, $kind:literal, $plural:literal, |$v:ident| $version:expr) => {
        impl kube::Resource for $ty {
            type DynamicType = $dt;
            type Scope = $scope;

            fn kind(_: &$dt) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &$dt) -> Cow<'_, str> {
                $group.into()
            }
            fn version($v: &$dt) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &$dt) -> Cow<'_, str> {
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

resource!(
    SliceView,
    (),
    NamespaceResourceScope,
    "discovery.k8s.io",
    "EndpointSlice",
    "endpointslices",
    |_v| "v1"
);
resource!(
    ExportVerdict,
    ServiceExportVersion,
    kube::core::DynamicResourceScope,
    "networking.fleet.azure.com",
    "ServiceExport",
    "serviceexports",
    |v| v.as_str()
);

/// `Valid=True`, `Conflict=False` and not being deleted.
pub fn export_is_valid_without_conflict(export: &ServiceExport) -> bool {
    let conditions = export.conditions();
    let status = |t: &str| find_condition(conditions, t).map(|c| c.status.as_str());
    export.metadata.deletion_timestamp.is_none()
        && status(CONDITION_VALID) == Some("True")
        && status(CONDITION_CONFLICT) == Some("False")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_exports::ServiceExportView;
    use kube::runtime::reflector::{Lookup, ObjectRef};

    #[test]
    fn a_slice_keeps_addresses_readiness_ports_label_and_annotations_only() {
        let raw: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "generation": 2,
                "labels": {SERVICE_NAME_LABEL: "web", "other": "x"},
                "annotations": {UNIQUE_NAME_ANNOTATION: "n-1", LAST_SEEN_GENERATION_ANNOTATION: "2",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kcm"}]},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false},
                "nodeName": "n1", "targetRef": {"kind": "Pod", "name": "p"}}],
            "ports": [{"name": "http", "port": 80}]
        }))
        .expect("a slice");
        let v = SliceView::from(raw);
        assert_eq!(v.service.as_deref(), Some("web"));
        assert_eq!(v.unique_name.as_deref(), Some("n-1"));
        assert_eq!(v.last_seen_generation.as_deref(), Some("2"));
        assert_eq!(v.last_seen_timestamp, None);
        assert_eq!(
            v.endpoints,
            [SliceEndpoint {
                addresses: vec!["10.0.0.1".into()],
                ready: Some(false)
            }]
        );
        assert_eq!(v.ports[0].port, Some(80));
        assert!(v.metadata.labels.is_none() && v.metadata.annotations.is_none());
        assert!(v.metadata.managed_fields.is_none());
        assert_eq!(v.metadata.generation, Some(2));
    }

    #[test]
    fn an_export_keeps_its_identity_deletion_and_reference() {
        let raw: EndpointSliceExport = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m-ns-s-abcde", "namespace": "fleet-member-m", "uid": "u",
                "resourceVersion": "9", "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"x": "y"}, "managedFields": [{"manager": "m"}]},
            "spec": {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                "endpointSliceReference": {"clusterId": "m", "kind": "EndpointSlice",
                    "namespace": "ns", "name": "s", "namespacedName": "ns/s", "uid": "su", "resourceVersion": "3",
                    "generation": 2, "exportedSince": "2026-01-01T00:00:00Z"},
                "ownerServiceReference": {"namespace": "ns", "name": "svc", "namespacedName": "ns/svc"}}
        }))
        .expect("an export");
        let d = digest(&raw.spec);
        let v = ExportView::from(raw);
        assert_eq!(
            (v.id.name.as_str(), v.id.namespace.as_str()),
            ("m-ns-s-abcde", "fleet-member-m")
        );
        assert_eq!(
            (v.id.uid.as_deref(), v.id.resource_version.as_deref()),
            (Some("u"), Some("9"))
        );
        assert!(v.deleting);
        assert_eq!(
            (v.slice_namespace.as_str(), v.slice_name.as_str()),
            ("ns", "s")
        );
        assert_eq!((v.slice_uid.as_str(), v.generation), ("su", 2));
        assert!(v.exported_since.is_some());
        assert_eq!(v.digest, d);
        let key = v.to_object_ref(());
        assert_eq!(key, ObjectRef::new("m-ns-s-abcde").within("fleet-member-m"));
    }

    #[test]
    fn the_verdict_read_from_the_shared_export_view_is_the_exports_own() {
        let condition = |kind: &str, status: &str| {
            serde_json::json!({"type": kind, "status": status, "reason": "r", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        let cases = [
            (
                vec![condition("Valid", "True"), condition("Conflict", "False")],
                false,
                true,
            ),
            (
                vec![condition("Valid", "True"), condition("Conflict", "False")],
                true,
                false,
            ),
            (
                vec![condition("Valid", "True"), condition("Conflict", "True")],
                false,
                false,
            ),
            (
                vec![condition("Valid", "False"), condition("Conflict", "False")],
                false,
                false,
            ),
            (vec![condition("Valid", "True")], false, false),
            (vec![], false, false),
        ];
        for (conditions, deleting, verdict) in cases {
            let mut meta = serde_json::json!({"name": "web", "namespace": "ns", "uid": "u",
                "resourceVersion": "9", "annotations": {"a": "b"},
                "finalizers": ["networking.fleet.azure.com/serviceexport-cleanup"]});
            if deleting {
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            let se: ServiceExport = serde_json::from_value(
                serde_json::json!({"metadata": meta, "status": {"conditions": conditions}}),
            )
            .expect("a ServiceExport");
            let own = ExportVerdict::from(se.clone());
            let viewed = ExportVerdict::from(ServiceExportView::from(se).to_export());
            assert_eq!(
                own.valid_without_conflict, verdict,
                "{conditions:?} {deleting}"
            );
            assert_eq!(
                viewed.valid_without_conflict, verdict,
                "{conditions:?} {deleting}"
            );
        }
    }

    #[test]
    fn the_digest_ignores_only_how_the_kind_is_spelled() {
        let mut spec = EndpointSliceExportSpec::default();
        spec.endpoint_slice_reference.kind = "EndpointSlice".into();
        let d = digest(&spec);
        let mut agent = spec.clone();
        agent.endpoint_slice_reference.kind = String::new();
        assert_eq!(digest(&agent), d);
        let mut moved = spec.clone();
        moved.endpoint_slice_reference.resource_version = "8".into();
        assert_ne!(digest(&moved), d);
    }
}
