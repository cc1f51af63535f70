//! The ServiceImport jobs' workload (serviceimport, internalserviceimport), on member-1: a
//! ServiceImport copied to the hub (finalizer, copy created), the hub's verdict written back
//! into its status (status update, the copy's version brought up to date), the copy's update
//! refused because another writer changed it (409: both read live), a dangling copy deleted
//! (after a live read of the member), the ServiceImport deleted (copy deleted, finalizer
//! removed).

use fleetnet_hub::api::{InternalServiceImport, ServiceImport};

use super::*;

/// The hub's verdict on an import, as fleet-networking's hub controller writes it.
pub(super) fn verdict(clusters: &[&str], port: i32) -> Value {
    let clusters: Vec<Value> = clusters.iter().map(|c| json!({"cluster": c})).collect();
    json!({"status": {
        "type": "ClusterSetIP",
        "clusters": clusters,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    }})
}

/// Writes `status` on the InternalServiceImport `name` of `hub_ns`, as the hub's controller.
pub(super) async fn set_verdict(hub: &kube::Client, hub_ns: &str, name: &str, status: &Value) {
    let api: Api<InternalServiceImport> = Api::namespaced(hub.clone(), hub_ns);
    let api = &api;
    eventually(
        &format!("{hub_ns}/{name}'s verdict written"),
        || async move {
            let patch = Patch::Merge(status);
            api.patch_status(name, &PatchParams::default(), &patch)
                .await
                .ok()
        },
    )
    .await;
}

/// Waits until the member has the ServiceImport `ns/name` and it satisfies `holds`.
async fn wait_import(
    member: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    holds: impl Fn(&ServiceImport) -> bool,
) -> ServiceImport {
    let api: Api<ServiceImport> = Api::namespaced(member.clone(), ns);
    let (api, holds) = (&api, &holds);
    eventually(&format!("{ns}/{name}: {what}"), || async move {
        api.get_opt(name).await.ok().flatten().filter(|s| holds(s))
    })
    .await
}

/// Waits until `hub_ns` has the InternalServiceImport `name` and it satisfies `holds`.
pub(super) async fn wait_internal(
    hub: &kube::Client,
    hub_ns: &str,
    name: &str,
    holds: impl Fn(&InternalServiceImport) -> bool,
) -> InternalServiceImport {
    let api: Api<InternalServiceImport> = Api::namespaced(hub.clone(), hub_ns);
    let (api, holds) = (&api, &holds);
    eventually(
        &format!("InternalServiceImport {hub_ns}/{name}"),
        || async move { api.get_opt(name).await.ok().flatten().filter(|i| holds(i)) },
    )
    .await
}

/// Waits until `hub_ns` has no InternalServiceImport `name`.
pub(super) async fn wait_internal_gone(hub: &kube::Client, hub_ns: &str, name: &str) {
    let api: Api<InternalServiceImport> = Api::namespaced(hub.clone(), hub_ns);
    let api = &api;
    eventually(
        &format!("InternalServiceImport {hub_ns}/{name} gone"),
        || async move { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
    )
    .await
}

/// Every path of the ServiceImport jobs, on member-1's `shop/cart`.
pub(super) async fn walk(w: &Walk) {
    let (hub, m1, ns1) = (&w.hub, &w.m1, w.ns1.as_str());
    let imports: Api<ServiceImport> = Api::namespaced(m1.clone(), "shop");
    let si: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "ServiceImport",
        "metadata": {"name": "cart", "namespace": "shop"}
    }))
    .expect("a ServiceImport");
    imports
        .create(&PostParams::default(), &si)
        .await
        .expect("create ServiceImport");
    wait_internal(hub, ns1, "shop-cart", |_| true).await;

    // The hub's verdict replaces the ServiceImport's status; the copy then names its version.
    let status = verdict(&["member-2"], 80);
    set_verdict(hub, ns1, "shop-cart", &status).await;
    let si = wait_import(m1, "shop", "cart", "the verdict", |si| {
        serde_json::to_value(&si.status).ok().as_ref() == Some(&status["status"])
    })
    .await;
    let rv = si.metadata.resource_version.unwrap_or_default();
    wait_internal(hub, ns1, "shop-cart", |i| {
        i.spec.service_import_reference.resource_version == rv
    })
    .await;

    refused_update_reads_live(w).await;

    // A copy in the member's hub namespace whose ServiceImport the member does not have: read
    // live in the member, then deleted.
    let lost: InternalServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceImport",
        "metadata": {"name": "shop-lost", "namespace": ns1},
        "spec": {"serviceImportReference": {
            "clusterId": "member-1", "kind": "ServiceImport", "namespace": "shop", "name": "lost",
            "resourceVersion": "1", "generation": 1, "uid": "00000000-0000-0000-0000-00000000f00d",
            "namespacedName": "shop/lost"
        }}
    }))
    .expect("InternalServiceImport");
    Api::<InternalServiceImport>::namespaced(hub.clone(), ns1)
        .create(&PostParams::default(), &lost)
        .await
        .expect("create dangling InternalServiceImport");
    wait_internal_gone(hub, ns1, "shop-lost").await;

    // The ServiceImport deleted: its copy goes, then the finalizer (and the ServiceImport).
    imports
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete ServiceImport");
    wait_internal_gone(hub, ns1, "shop-cart").await;
    eventually("shop/cart ServiceImport gone", || {
        let api = imports.clone();
        async move { matches!(api.get_opt("cart").await, Ok(None)).then_some(()) }
    })
    .await;
}

/// Whether the controller has read an InternalServiceImport live (`get`) on the hub.
fn read_copy_live(w: &Walk) -> bool {
    audit::read(&w.hub_log, &w.hub_user)
        .iter()
        .any(|r| r.verb == "get" && r.resource == "internalserviceimports")
}

/// The copy's update sent over a version the view has not shown yet is refused (409), and the
/// job reads the ServiceImport and its copy live: another writer (the test) changes the copy in
/// a burst around each change of the ServiceImport, until the hub's audit log shows the live
/// read (a race, so in rounds; each round converges before the next).
async fn refused_update_reads_live(w: &Walk) {
    let (hub, m1, ns1) = (&w.hub, &w.m1, w.ns1.as_str());
    let imports: Api<ServiceImport> = Api::namespaced(m1.clone(), "shop");
    let copies: Api<InternalServiceImport> = Api::namespaced(hub.clone(), ns1);
    for round in 0..40u64 {
        if read_copy_live(w) {
            eprintln!("a refused update read the copy live after {round} round(s)");
            return;
        }
        let burst = async {
            for i in 0..20 {
                let touch = json!({"metadata": {"annotations": {"rbac-test/touch": format!("{round}-{i}")}}});
                let _ = copies
                    .patch("shop-cart", &PatchParams::default(), &Patch::Merge(&touch))
                    .await;
            }
        };
        let change = async {
            tokio::time::sleep(Duration::from_millis(5 + round % 10)).await;
            let label = json!({"metadata": {"labels": {"rbac-test/round": round.to_string()}}});
            imports
                .patch("cart", &PatchParams::default(), &Patch::Merge(&label))
                .await
                .expect("label the ServiceImport")
        };
        let (_, si) = tokio::join!(burst, change);
        let rv = si.metadata.resource_version.unwrap_or_default();
        wait_internal(hub, ns1, "shop-cart", |i| {
            i.spec.service_import_reference.resource_version == rv
        })
        .await;
    }
    assert!(
        read_copy_live(w),
        "no live read of an InternalServiceImport after 40 rounds of refused updates"
    );
}
