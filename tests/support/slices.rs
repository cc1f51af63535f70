//! EndpointSlices and their exports.

use kube::api::Api;

use super::*;

/// An IPv4 EndpointSlice `ns/name` of Service `service`: one ready endpoint per address, port 80.
pub fn endpoint_slice(
    ns: &str,
    name: &str,
    service: &str,
    addresses: &[&str],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": ns, "name": name,
            "labels": {"kubernetes.io/service-name": service}
        },
        "addressType": "IPv4",
        "endpoints": addresses.iter().map(|a| serde_json::json!({
            "addresses": [a], "conditions": {"ready": true}
        })).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .expect("an EndpointSlice")
}

pub fn slices(
    client: &kube::Client,
    ns: &str,
) -> Api<k8s_openapi::api::discovery::v1::EndpointSlice> {
    Api::namespaced(client.clone(), ns)
}

pub fn slice_exports(hub: &kube::Client, ns: &str) -> Api<fleetnet_hub::api::EndpointSliceExport> {
    Api::namespaced(hub.clone(), ns)
}

/// The exports in the hub namespace `hub_ns` that refer to the member slice `ns/name`.
pub async fn exports_of_slice(
    hub: &kube::Client,
    hub_ns: &str,
    ns: &str,
    name: &str,
) -> Vec<fleetnet_hub::api::EndpointSliceExport> {
    slice_exports(hub, hub_ns)
        .list(&Default::default())
        .await
        .expect("list EndpointSliceExports")
        .items
        .into_iter()
        .filter(|e| {
            let r = &e.spec.endpoint_slice_reference;
            r.namespace == ns && r.name == name
        })
        .collect()
}

/// Waits until exactly one export refers to the slice `ns/name` and it satisfies `pred`.
pub async fn wait_slice_export(
    hub: &kube::Client,
    hub_ns: &str,
    ns: &str,
    name: &str,
    pred: impl Fn(&fleetnet_hub::api::EndpointSliceExport) -> bool,
) -> fleetnet_hub::api::EndpointSliceExport {
    let pred = &pred;
    eventually(
        &format!("EndpointSliceExport of {ns}/{name}"),
        || async move {
            let mut found = exports_of_slice(hub, hub_ns, ns, name).await;
            (found.len() == 1 && pred(&found[0])).then(|| found.remove(0))
        },
    )
    .await
}

/// Waits until no export refers to the slice `ns/name`.
pub async fn wait_slice_unexported(hub: &kube::Client, hub_ns: &str, ns: &str, name: &str) {
    eventually(
        &format!("no EndpointSliceExport of {ns}/{name}"),
        || async move {
            exports_of_slice(hub, hub_ns, ns, name)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await
}

/// The addresses an export carries, sorted.
pub fn exported_addresses(e: &fleetnet_hub::api::EndpointSliceExport) -> Vec<String> {
    let mut a: Vec<String> = e
        .spec
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    a.sort();
    a
}

/// The slice's fleet-unique-name annotation.
pub fn unique_name_of(s: &k8s_openapi::api::discovery::v1::EndpointSlice) -> Option<String> {
    s.metadata
        .annotations
        .as_ref()?
        .get(fleetnet_hub::api::UNIQUE_NAME_ANNOTATION)
        .cloned()
}
