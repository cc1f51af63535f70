//! Kubernetes objects the tests create and read: Services, ServiceExports, ISEs.

use std::collections::BTreeMap;

use fleetnet_hub::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, ObjectMeta, PostParams};

/// A ClusterIP Service with one port.
pub fn service(ns: &str, name: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates a namespace in a cluster (idempotent).
pub async fn namespace(client: &kube::Client, ns: &str) {
    fleetnet_testenv::ensure_namespace(client, "test", ns)
        .await
        .expect("namespace");
}

pub async fn create_service(client: &kube::Client, svc: &Service) -> Service {
    let ns = svc.metadata.namespace.as_deref().expect("namespace");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await
        .expect("create service")
}

pub async fn create_export(
    client: &kube::Client,
    ns: &str,
    name: &str,
    annotations: &[(&str, &str)],
) -> ServiceExport {
    let mut se = ServiceExport::new(ns, name, ServiceExportVersion::V1Beta1);
    if !annotations.is_empty() {
        se.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
    }
    exports(client, ns)
        .create(&PostParams::default(), &se)
        .await
        .expect("create ServiceExport")
}

pub fn exports(client: &kube::Client, ns: &str) -> Api<ServiceExport> {
    Api::namespaced_with(client.clone(), ns, &ServiceExportVersion::V1Beta1)
}

pub fn ises(hub: &kube::Client, ns: &str) -> Api<InternalServiceExport> {
    Api::namespaced(hub.clone(), ns)
}

/// What the cloud provider does when the load balancer of Service `ns/name` is ready.
pub async fn assign_ingress(member: &kube::Client, ns: &str, name: &str, ip: &str) -> Service {
    Api::<Service>::namespaced(member.clone(), ns)
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}),
            ),
        )
        .await
        .expect("LB status")
}

/// The condition `type_` of a ServiceExport as (status, reason, message).
pub fn condition(se: &ServiceExport, type_: &str) -> Option<(String, String, String)> {
    se.conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A ClusterRole (no name: an identity's, see `ScopedIdentity`) allowing `verbs` on every
/// resource of every API group.
pub fn every_resource(verbs: &[&str]) -> ClusterRole {
    ClusterRole {
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["*".into()]),
            resources: Some(vec!["*".into()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}
