//! Issue #44: a member's ServiceImports reach the hub as InternalServiceImports, and the hub's
//! verdict comes back into their status, with no member agent; exactly as fleet-networking's
//! member `serviceimport` and `internalserviceimport` controllers do it, against real
//! apiservers. The hub's side (the verdict on an InternalServiceImport's status) is written by
//! the tests as fleet-networking's hub controller writes it. Writes are counted server-side,
//! from each apiserver's `apiserver_request_total`.

mod reference;
mod restarts;

use crate::support;

use std::time::Duration;

use fleetnet_hub::api::{
    ExportedObjectReference, InternalServiceImport, ServiceImport, ServiceImportStatus,
};
use fleetnet_hub::fleet::Controllers;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

const M: &str = "m1";
const NS: &str = "my-ns";
const FINALIZER: &str = "networking.fleet.azure.com/serviceimport-cleanup";

fn selected(names: &str) -> Controllers {
    Controllers::parse(names).expect("known jobs")
}

fn imports(member: &kube::Client, ns: &str) -> Api<ServiceImport> {
    Api::namespaced(member.clone(), ns)
}

fn internals(hub: &kube::Client, hub_ns: &str) -> Api<InternalServiceImport> {
    Api::namespaced(hub.clone(), hub_ns)
}

async fn create_import(member: &kube::Client, ns: &str, name: &str) -> ServiceImport {
    let si: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": ns},
    }))
    .expect("a ServiceImport");
    imports(member, ns)
        .create(&PostParams::default(), &si)
        .await
        .expect("create ServiceImport")
}

/// An InternalServiceImport `name` referring to `ns/si`, as the reference's specs create one
/// (only namespace, name and export time in its reference), with `status`.
async fn create_internal(
    hub: &kube::Client,
    hub_ns: &str,
    name: &str,
    (ns, si): (&str, &str),
    status: Option<Value>,
) {
    let isi: InternalServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceImport",
        "metadata": {"name": name, "namespace": hub_ns},
        "spec": {"serviceImportReference": {
            "clusterId": "", "kind": "", "namespace": ns, "name": si, "resourceVersion": "",
            "generation": 0, "uid": "", "namespacedName": "",
            "exportedSince": "2026-12-05T00:00:00Z"
        }},
    }))
    .expect("an InternalServiceImport");
    internals(hub, hub_ns)
        .create(&PostParams::default(), &isi)
        .await
        .expect("create InternalServiceImport");
    if let Some(status) = status {
        set_hub_status(hub, hub_ns, name, status).await;
    }
}

/// The hub's verdict, as fleet-networking's hub controller writes it: the whole status.
async fn set_hub_status(hub: &kube::Client, hub_ns: &str, name: &str, status: Value) {
    let api = internals(hub, hub_ns);
    let mut isi = api.get(name).await.expect("get InternalServiceImport");
    isi.status = Some(serde_json::from_value(status).expect("a status"));
    api.replace_status(name, &PostParams::default(), &isi)
        .await
        .expect("hub verdict");
}

/// A verdict as the hub writes it: the type, the exporting clusters and the ports.
fn verdict(type_: &str) -> Value {
    json!({
        "type": type_,
        "clusters": [{"cluster": "member1"}, {"cluster": "member2"}],
        "ports": [
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "https", "port": 8843, "protocol": "TCP"}
        ]
    })
}

/// The reference fleet-networking's spec expects on the copy of `si`: `FromMetaObjects` of
/// the ServiceImport as its typed client reads it (TypeMeta left empty).
fn expected_reference(si: &ServiceImport) -> ExportedObjectReference {
    let meta = &si.metadata;
    let (ns, name) = (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    );
    ExportedObjectReference {
        cluster_id: M.into(),
        kind: String::new(),
        namespaced_name: format!("{ns}/{name}"),
        namespace: ns,
        name,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        generation: meta.generation.unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        api_version: None,
        exported_since: meta.creation_timestamp.clone(),
    }
}

/// Waits until the ServiceImport carries the job's finalizer; returns it.
async fn wait_finalized(member: &kube::Client, ns: &str, name: &str) -> ServiceImport {
    let api = imports(member, ns);
    eventually(&format!("{ns}/{name} finalized"), || {
        let api = api.clone();
        async move {
            let si = api.get_opt(name).await.ok()??;
            let finalizers = si.metadata.finalizers.clone().unwrap_or_default();
            finalizers.iter().any(|f| f == FINALIZER).then_some(si)
        }
    })
    .await
}

/// Waits until the copy `name` refers to `expected`.
async fn wait_reference(
    hub: &kube::Client,
    hub_ns: &str,
    name: &str,
    expected: &ExportedObjectReference,
) {
    let api = internals(hub, hub_ns);
    eventually(&format!("{name} refers to {expected:?}"), || {
        let api = api.clone();
        async move {
            let isi = api.get_opt(name).await.ok()??;
            (isi.spec.service_import_reference == *expected).then_some(())
        }
    })
    .await;
}

/// Waits until the ServiceImport's status is `status` (as the hub wrote it).
async fn wait_status(member: &kube::Client, ns: &str, name: &str, status: &Value) {
    let want: ServiceImportStatus = serde_json::from_value(status.clone()).expect("a status");
    let api = imports(member, ns);
    eventually(&format!("{ns}/{name} status {status}"), || {
        let (api, want) = (api.clone(), want.clone());
        async move {
            let si = api.get_opt(name).await.ok()??;
            (si.status.unwrap_or_default() == want).then_some(())
        }
    })
    .await;
}

/// Waits until the hub namespace has no InternalServiceImport `name`.
async fn wait_no_internal(hub: &kube::Client, hub_ns: &str, name: &str) {
    let api = internals(hub, hub_ns);
    eventually(&format!("{hub_ns}/{name} deleted"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

/// Writes of ServiceImports in the member plus InternalServiceImports in the hub.
async fn import_writes(member: &kube::Client, hub: &kube::Client) -> f64 {
    let mut total = 0.0;
    for verb in ["POST", "PUT", "PATCH", "DELETE"] {
        let verb = format!("verb=\"{verb}\"");
        total +=
            support::replicas::hub_requests(member, &["resource=\"serviceimports\"", &verb]).await;
        total +=
            support::replicas::hub_requests(hub, &["resource=\"internalserviceimports\"", &verb])
                .await;
    }
    total
}

/// The import writes once they have not moved for `quiet`.
async fn settled_writes(member: &kube::Client, hub: &kube::Client, quiet: Duration) -> f64 {
    settled_count("import writes", quiet, || import_writes(member, hub)).await
}

async fn delete_import(member: &kube::Client, ns: &str, name: &str) {
    imports(member, ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete ServiceImport");
}
