//! The export jobs' workload (serviceexport, endpointslice, endpointsliceexport): export, a
//! Service change, the hub's conflict verdict copied back, an EndpointSlice exported, updated and
//! withdrawn, a weight annotation (0: unexport; removed: export again, a repeated Event created
//! anew), the Service deleted (NotFound: live reads, ISE deleted), a ServiceExport deleted
//! (unexport, finalizer removed), a dangling ISE removed; and `--cleanup-on-remove` with a
//! member's kubeconfig removed.

use super::*;

/// Every path of the export jobs but the member's removal, on member-1 and member-2.
pub(super) async fn walk(w: &Walk) {
    let (hub, m1, m2) = (&w.hub, &w.m1, &w.m2);
    let (ns1, ns2) = (&w.ns1, &w.ns2);
    namespace(m1, "shop").await;
    namespace(m2, "web").await;

    // Export: member-1 shop/cart and shop/pay, member-2 web/app.
    for (client, ns, name) in [
        (m1, "shop", "cart"),
        (m1, "shop", "pay"),
        (m2, "web", "app"),
    ] {
        create_service(client, &service(ns, name, 80)).await;
        create_export(client, ns, name, &[]).await;
    }
    wait_ise(hub, ns1, "shop-cart", |_| true).await;
    wait_ise(hub, ns1, "shop-pay", |_| true).await;
    wait_ise(hub, ns2, "web-app", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // A Service change: the ISE's spec is patched.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"ports": [{"name": "http", "port": 8080}]}})),
        )
        .await
        .expect("change port");
    wait_ise(hub, ns1, "shop-cart", |i| {
        i.spec.ports.first().is_some_and(|p| p.port == 8080)
    })
    .await;

    // The hub's verdict (as fleet-networking's hub controller writes it) is copied back.
    ises(hub, ns1)
        .patch_status(
            "shop-cart",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": [{
                "type": "Conflict", "status": "False", "reason": "NoConflictFound",
                "message": "service shop/cart is exported without conflict",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
            }]}})),
        )
        .await
        .expect("hub verdict");
    wait_condition(m1, "shop", "cart", "Conflict", "False", "NoConflictFound").await;

    // An EndpointSlice of the exported Service: exported, updated, then withdrawn when it is no
    // longer the Service's (live reads of the slice and its export before the withdrawal).
    let cart_slices = slices(m1, "shop");
    cart_slices
        .create(
            &PostParams::default(),
            &endpoint_slice("shop", "cart-1", "cart", &["10.0.0.1"]),
        )
        .await
        .expect("create slice");
    wait_slice_export(hub, ns1, "shop", "cart-1", |_| true).await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}}
            ]})),
        )
        .await
        .expect("add an endpoint");
    wait_slice_export(hub, ns1, "shop", "cart-1", |e| e.spec.endpoints.len() == 2).await;
    cart_slices
        .patch(
            "cart-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"kubernetes.io/service-name": null}}})),
        )
        .await
        .expect("unlabel");
    wait_slice_unexported(hub, ns1, "shop", "cart-1").await;
    eventually("cart-1's unique name removed", || {
        let api = cart_slices.clone();
        async move {
            let s = api.get("cart-1").await.ok()?;
            unique_name_of(&s).is_none().then_some(())
        }
    })
    .await;

    // Weight 0 unexports; removing the annotation exports again (the same Events again: the
    // recorder patches their series).
    let weight = |w: Value| json!({"metadata": {"annotations": {WEIGHT_ANNOTATION: w}}});
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(json!("0"))),
        )
        .await
        .expect("weight 0");
    wait_ise_gone(hub, ns1, "shop-cart").await;
    exports(m1, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&weight(Value::Null)),
        )
        .await
        .expect("weight removed");
    wait_ise(hub, ns1, "shop-cart", |_| true).await;
    wait_condition(m1, "shop", "cart", "Valid", "True", "ServiceIsValid").await;

    // The Service deleted: NotFound, the ISE goes.
    Api::<Service>::namespaced(m1.clone(), "shop")
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_condition(m1, "shop", "cart", "Valid", "False", "ServiceNotFound").await;
    wait_ise_gone(hub, ns1, "shop-cart").await;

    // A ServiceExport deleted: unexport, then the finalizer goes and so does the export.
    exports(m1, "shop")
        .delete("pay", &DeleteParams::default())
        .await
        .expect("delete export");
    wait_ise_gone(hub, ns1, "shop-pay").await;
    eventually("shop/pay gone", || {
        let api = exports(m1, "shop");
        async move {
            api.get_opt("pay")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        }
    })
    .await;

    // A dangling ISE (member-1's, no ServiceExport behind it) is removed.
    let ghost: InternalServiceExport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "InternalServiceExport",
        "metadata": {"name": "shop-ghost", "namespace": ns1},
        "spec": {
            "ports": [{"port": 80, "protocol": "TCP"}],
            "serviceReference": {
                "clusterId": "member-1", "kind": "Service", "namespace": "shop", "name": "ghost",
                "resourceVersion": "1", "generation": 1, "uid": "00000000-0000-0000-0000-00000000beef",
                "namespacedName": "shop/ghost"
            }
        }
    }))
    .expect("ISE");
    ises(hub, ns1)
        .create(&PostParams::default(), &ghost)
        .await
        .expect("create dangling ISE");
    wait_ise_gone(hub, ns1, "shop-ghost").await;
}

/// `--cleanup-on-remove`: member-2's kubeconfig (`kubeconfig`) removed; its ISE goes, its
/// finalizer too.
pub(super) async fn remove_member(w: &Walk, kubeconfig: &Path) {
    std::fs::remove_file(kubeconfig).expect("remove member-2");
    wait_ise_gone(&w.hub, &w.ns2, "web-app").await;
    eventually("web/app finalizer removed", || {
        let api = exports(&w.m2, "web");
        async move {
            let se = api.get_opt("app").await.ok().flatten()?;
            se.metadata
                .finalizers
                .unwrap_or_default()
                .is_empty()
                .then_some(())
        }
    })
    .await;
}
