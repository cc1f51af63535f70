//! The EndpointSliceImport job's workload, on member-1: a MultiClusterService `shop/back`
//! whose import the hub gives clusters (its derived Service `shop-back`), an EndpointSliceImport
//! of `shop/back` in member-1's hub namespace (the finalizer and the generation annotation
//! patched, the slice created in the fleet system namespace), its endpoints changed (the slice
//! updated), the import deleted (read live, the slice deleted, the finalizer removed). The
//! MultiClusterService stays: the leave (`membership`) deletes it.

use fleetnet_hub::api::EndpointSliceImport;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::imports::{set_verdict, verdict, wait_internal};
use super::multicluster::{create_mcs, wait_derived};
use super::*;

/// The EndpointSliceImport `name` of `shop/back`, exported by member-2 a second ago, with
/// `addresses`.
fn import_of(hub_ns: &str, name: &str, addresses: &[&str]) -> EndpointSliceImport {
    let since = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a]}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "EndpointSliceImport",
        "metadata": {"name": name, "namespace": hub_ns},
        "spec": {
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
            "endpointSliceReference": {
                "clusterId": "member-2", "kind": "EndpointSlice", "namespace": "shop",
                "name": "back-1", "resourceVersion": "1", "generation": 1,
                "uid": "00000000-0000-0000-0000-0000000000b1",
                "namespacedName": "shop/back-1",
                "exportedSince": since.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
            },
            "ownerServiceReference": {"namespace": "shop", "name": "back", "namespacedName": "shop/back"}
        }
    }))
    .expect("an EndpointSliceImport")
}

/// Waits until the fleet system namespace's EndpointSlice `name` satisfies `holds` (`None`:
/// until it is gone).
async fn wait_slice(
    member: &kube::Client,
    name: &str,
    what: &str,
    holds: Option<&dyn Fn(&EndpointSlice) -> bool>,
) {
    let api: Api<EndpointSlice> = Api::namespaced(member.clone(), SYSTEM);
    let api = &api;
    eventually(&format!("{SYSTEM}/{name}: {what}"), || async move {
        match (api.get_opt(name).await.ok()?, holds) {
            (None, None) => Some(()),
            (Some(s), Some(holds)) => holds(&s).then_some(()),
            _ => None,
        }
    })
    .await
}

/// Every path of the EndpointSliceImport job, on member-1.
pub(super) async fn walk(w: &Walk) {
    let (hub, m1, ns1) = (&w.hub, &w.m1, w.ns1.as_str());
    create_mcs(m1, "back").await;
    wait_internal(hub, ns1, "shop-back", |_| true).await;
    set_verdict(hub, ns1, "shop-back", &verdict(&["member-2"], 80)).await;
    wait_derived(m1, "shop-back", |_| true).await;

    let imports: Api<EndpointSliceImport> = Api::namespaced(hub.clone(), ns1);
    imports
        .create(
            &PostParams::default(),
            &import_of(ns1, "back-slice", &["10.1.0.1"]),
        )
        .await
        .expect("create EndpointSliceImport");
    let count = |n: usize| move |s: &EndpointSlice| s.endpoints.as_ref().map_or(0, Vec::len) == n;
    wait_slice(m1, "back-slice", "imported", Some(&count(1))).await;

    // The exported slice changed: the import's endpoints change, the slice is updated.
    let two =
        json!({"spec": {"endpoints": [{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2"]}]}});
    imports
        .patch("back-slice", &PatchParams::default(), &Patch::Merge(&two))
        .await
        .expect("change the import's endpoints");
    wait_slice(m1, "back-slice", "two endpoints", Some(&count(2))).await;

    // Withdrawn on the hub: read live, the slice deleted, then the finalizer removed.
    imports
        .delete("back-slice", &DeleteParams::default())
        .await
        .expect("delete EndpointSliceImport");
    wait_slice(m1, "back-slice", "gone", None).await;
    let imports = &imports;
    eventually("EndpointSliceImport back-slice gone", || async move {
        matches!(imports.get_opt("back-slice").await, Ok(None)).then_some(())
    })
    .await;
}
