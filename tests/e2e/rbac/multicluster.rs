//! The MultiClusterService job's workload, on member-1: an MCS (finalizer and import label, its
//! ServiceImport created, `Valid=Unknown`), its import given clusters by the hub's verdict (the
//! ServiceImport jobs carry it: the derived Service created in the fleet system namespace, the
//! load balancer status), the verdict's ports changed (the derived Service patched), the
//! verdict's clusters gone (live reads, the derived Service deleted), the MCS deleted (the import
//! deleted, an Event, the finalizer removed).

use fleetnet_hub::api::{MultiClusterService, ServiceImport};

use super::imports::{set_verdict, verdict, wait_internal, wait_internal_gone};
use super::*;

/// Waits until the member's fleet system namespace has the derived Service `name` and it
/// satisfies `holds`.
pub(super) async fn wait_derived(
    member: &kube::Client,
    name: &str,
    holds: impl Fn(&Service) -> bool,
) {
    let api: Api<Service> = Api::namespaced(member.clone(), SYSTEM);
    let (api, holds) = (&api, &holds);
    eventually(&format!("derived Service {SYSTEM}/{name}"), || async move {
        api.get_opt(name)
            .await
            .ok()
            .flatten()
            .filter(|s| holds(s))
            .map(drop)
    })
    .await
}

fn ports(svc: &Service) -> Vec<i32> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports.into_iter().flatten().map(|p| p.port).collect()
}

/// Creates the MultiClusterService `shop/<name>` importing `name`.
pub(super) async fn create_mcs(member: &kube::Client, name: &str) {
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"serviceImport": {"name": name}}
    }))
    .expect("a MultiClusterService");
    Api::<MultiClusterService>::namespaced(member.clone(), "shop")
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create MultiClusterService");
}

/// Every path of the MultiClusterService job, on member-1's `shop/front`.
pub(super) async fn walk(w: &Walk) {
    let (hub, m1, ns1) = (&w.hub, &w.m1, w.ns1.as_str());
    let mcses: Api<MultiClusterService> = Api::namespaced(m1.clone(), "shop");
    create_mcs(m1, "front").await;
    // Its import, made by the job and carried to the hub by the ServiceImport job.
    wait_internal(hub, ns1, "shop-front", |_| true).await;
    eventually("shop/front Valid=Unknown", || {
        let api = mcses.clone();
        async move {
            let mcs = api.get_opt("front").await.ok().flatten()?;
            let valid = mcs.conditions().iter().find(|c| c.type_ == "Valid")?;
            (valid.status == "Unknown").then_some(())
        }
    })
    .await;

    // The hub's verdict gives the import clusters: the derived Service is created.
    set_verdict(hub, ns1, "shop-front", &verdict(&["member-2"], 80)).await;
    wait_derived(m1, "shop-front", |s| ports(s) == [80]).await;
    eventually("shop/front Valid=True", || {
        let api = mcses.clone();
        async move {
            let mcs = api.get_opt("front").await.ok().flatten()?;
            let valid = mcs.conditions().iter().find(|c| c.type_ == "Valid")?;
            (valid.status == "True").then_some(())
        }
    })
    .await;

    // The verdict's ports change: the derived Service is patched.
    set_verdict(hub, ns1, "shop-front", &verdict(&["member-2"], 8080)).await;
    wait_derived(m1, "shop-front", |s| ports(s) == [8080]).await;

    // The verdict lists no cluster any more: read live (the MCS, its import, the derived
    // Service), then the derived Service deleted and its label removed.
    set_verdict(hub, ns1, "shop-front", &verdict(&[], 8080)).await;
    let derived: Api<Service> = Api::namespaced(m1.clone(), SYSTEM);
    eventually("derived Service shop-front withdrawn", || {
        let derived = derived.clone();
        async move { matches!(derived.get_opt("shop-front").await, Ok(None)).then_some(()) }
    })
    .await;

    // The MCS deleted: the import deleted, an Event, then the finalizer removed (and the
    // import's copy goes with the import).
    mcses
        .delete("front", &DeleteParams::default())
        .await
        .expect("delete MultiClusterService");
    let imports: Api<ServiceImport> = Api::namespaced(m1.clone(), "shop");
    eventually("shop/front, its import and derived Service gone", || {
        let (mcses, derived, imports) = (mcses.clone(), derived.clone(), imports.clone());
        async move {
            let gone = matches!(mcses.get_opt("front").await, Ok(None))
                && matches!(derived.get_opt("shop-front").await, Ok(None))
                && matches!(imports.get_opt("front").await, Ok(None));
            gone.then_some(())
        }
    })
    .await;
    wait_internal_gone(hub, ns1, "shop-front").await;
}
