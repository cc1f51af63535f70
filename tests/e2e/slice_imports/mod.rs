//! Issue #44: the hub's EndpointSliceImports reach the member as EndpointSlices of its fleet
//! system namespace without any member agent, exactly as fleet-networking's member
//! EndpointSliceImport controller writes them; against real apiservers.
//!
//! The tests write the hub's side (EndpointSliceImports, as fleet-networking's hub
//! EndpointSliceExport controller distributes them) and the MultiClusterService job's side
//! (the derived-service label on the MultiClusterService, the derived Service), and run only
//! `--controllers endpointsliceimport`. Writes are counted server-side, from each
//! apiserver's `apiserver_request_total`.

mod faults;
mod reference;
mod restarts;

use crate::support;

use std::time::Duration;

use fleetnet_hub::api::{EndpointSliceImport, MultiClusterService};
use fleetnet_hub::app::Running;
use fleetnet_hub::fleet::Controllers;
use fleetnet_hub::slice_imports::decide::{
    CLEANUP_FINALIZER, CONTROLLER_ID, DERIVED_SERVICE_LABEL, LAST_OBSERVED_GENERATION_ANNOTATION,
};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const M: &str = "m1";
/// The user namespace of the imported Service and its MultiClusterService.
const NS: &str = "work";
const FLEET_NS: &str = "fleet-system";
const SVC: &str = "app";
const DERIVED: &str = "work-app-1d2ef";
const IMPORT: &str = "m2-work-app-endpoint-slice-1a2bc";
const MCS: &str = "app";
const HISTOGRAM: &str = "fleet_networking_endpointslice_export_import_duration_milliseconds";

async fn start(fleet: &Fleet) -> Running {
    let only = Controllers::parse("endpointsliceimport").expect("a known job");
    start_jobs(fleet, M, only).await
}

fn imports(hub: &kube::Client, hub_ns: &str) -> Api<EndpointSliceImport> {
    Api::namespaced(hub.clone(), hub_ns)
}

fn imported(member: &kube::Client) -> Api<EndpointSlice> {
    Api::namespaced(member.clone(), FLEET_NS)
}

/// The reference's `ipv4EndpointSliceImport`: two endpoints, ports http/80 and tcp/81,
/// exported by `m2` one second ago, generation 1.
fn import_of(hub_ns: &str, name: &str, finalized: bool) -> EndpointSliceImport {
    let since = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let finalizers: Vec<&str> = if finalized {
        vec![CLEANUP_FINALIZER]
    } else {
        vec![]
    };
    serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "EndpointSliceImport",
        "metadata": {"name": name, "namespace": hub_ns, "finalizers": finalizers},
        "spec": {
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["1.2.3.4"]}, {"addresses": ["2.3.4.5"]}],
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "appProtocol": "www"},
                {"name": "tcp", "protocol": "TCP", "port": 81, "appProtocol": "example.com/custom"}
            ],
            "endpointSliceReference": {
                "clusterId": "m2", "kind": "EndpointSlice", "namespace": NS,
                "name": "app-endpointslice", "resourceVersion": "0", "generation": 1,
                "uid": "00000000-0000-0000-0000-000000000000",
                "namespacedName": format!("{NS}/app-endpointslice"),
                "exportedSince": since.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            },
            "ownerServiceReference": {"namespace": NS, "name": SVC, "namespacedName": format!("{NS}/{SVC}")}
        }
    }))
    .expect("an EndpointSliceImport")
}

async fn create_import(hub: &kube::Client, hub_ns: &str, import: &EndpointSliceImport) {
    imports(hub, hub_ns)
        .create(&PostParams::default(), import)
        .await
        .expect("create EndpointSliceImport");
}

/// A MultiClusterService importing `SVC`, labelled with its derived Service as the MCS
/// controller labels it (`None`: not yet).
async fn create_mcs(member: &kube::Client, derived: Option<&str>) {
    let labels = derived.map(|d| json!({ DERIVED_SERVICE_LABEL: d }));
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": MCS, "namespace": NS, "labels": labels},
        "spec": {"serviceImport": {"name": SVC}}
    }))
    .expect("a MultiClusterService");
    Api::<MultiClusterService>::namespaced(member.clone(), NS)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MultiClusterService");
}

async fn label_mcs(member: &kube::Client, derived: &str) {
    Api::<MultiClusterService>::namespaced(member.clone(), NS)
        .patch(
            MCS,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {DERIVED_SERVICE_LABEL: derived}}})),
        )
        .await
        .expect("label MultiClusterService");
}

/// The derived Service in the fleet system namespace, as the MCS controller makes it;
/// `finalizer`: held back from deletion.
async fn create_derived(member: &kube::Client, finalizer: Option<&str>) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": DERIVED, "namespace": FLEET_NS, "finalizers": finalizer.into_iter().collect::<Vec<_>>()},
        "spec": {"ports": [
            {"name": "http", "protocol": "TCP", "appProtocol": "www", "port": 80},
            {"name": "tcp", "protocol": "TCP", "appProtocol": "example.com/custom", "port": 81}
        ]}
    }))
    .expect("a Service");
    Api::<Service>::namespaced(member.clone(), FLEET_NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create derived Service");
}

/// The reference's `importedIPv4EndpointSlice`, as an agent left it.
fn agent_slice(name: &str) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": FLEET_NS, "labels": {
            "kubernetes.io/service-name": DERIVED,
            "endpointslice.kubernetes.io/managed-by": CONTROLLER_ID
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["1.2.3.4"]}, {"addresses": ["2.3.4.5"]}],
        "ports": [
            {"name": "http", "protocol": "TCP", "port": 80, "appProtocol": "www"},
            {"name": "tcp", "protocol": "TCP", "port": 81, "appProtocol": "example.com/custom"}
        ]
    }))
    .expect("an EndpointSlice")
}

/// The addresses of the imported slice `name`, one list per endpoint; `None`: no slice.
async fn addresses(member: &kube::Client, name: &str) -> Option<Vec<Vec<String>>> {
    let slice = imported(member).get_opt(name).await.expect("get slice")?;
    Some(
        slice
            .endpoints
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.addresses)
            .collect(),
    )
}

/// Nothing imported into the fleet system namespace, for a while.
async fn nothing_imported_for(member: &kube::Client, how_long: Duration) {
    let deadline = tokio::time::Instant::now() + how_long;
    while tokio::time::Instant::now() < deadline {
        let all = imported(member)
            .list(&Default::default())
            .await
            .expect("list");
        assert!(all.items.is_empty(), "imported: {:?}", all.items);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// The reference's `endpointSliceImportIsProcessedActual`: exactly the cleanup finalizer,
/// and the last observed generation annotated.
async fn processed(hub: &kube::Client, hub_ns: &str, name: &str) -> Option<()> {
    let import = imports(hub, hub_ns).get_opt(name).await.ok()??;
    let finalizers = import.metadata.finalizers.clone().unwrap_or_default();
    let generation = import.spec.endpoint_slice_reference.generation.to_string();
    let annotated = import
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LAST_OBSERVED_GENERATION_ANNOTATION));
    (finalizers == [CLEANUP_FINALIZER] && annotated == Some(&generation)).then_some(())
}

async fn delete_import(hub: &kube::Client, hub_ns: &str, name: &str) {
    imports(hub, hub_ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete EndpointSliceImport");
}

/// Requests an apiserver counted for `resource` with `verb`, any response code.
async fn requests(client: &kube::Client, resource: &str, verb: &str) -> f64 {
    apiserver_requests(client, resource, verb).await
}

/// Imported-slice writes in the member plus import writes in the hub.
async fn import_writes(member: &kube::Client, hub: &kube::Client) -> f64 {
    let mut total = 0.0;
    for verb in ["POST", "PUT", "PATCH", "DELETE"] {
        total += requests(member, "endpointslices", verb).await;
        total += requests(hub, "endpointsliceimports", verb).await;
    }
    total
}

/// Data points of the histogram for `first` imports into `M`.
fn observed(running: &Running, first: bool) -> f64 {
    let text = running.metrics.encode_prometheus();
    let first = format!("is_first_import=\"{first}\"");
    sum(
        &text,
        &format!("{HISTOGRAM}_count"),
        &[
            "origin_cluster_id=\"m2\"",
            "destination_cluster_id=\"m1\"",
            &first,
        ],
    )
}
