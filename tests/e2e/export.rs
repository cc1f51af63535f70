//! The ServiceExport reconciler of one member, on real apiservers (hub + member): every
//! behaviour of the reference controller, write counts included.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fleetnet_hub::api::{
    CLEANUP_FINALIZER, CONDITION_CONFLICT, CONDITION_VALID, WEIGHT_ANNOTATION,
};
use fleetnet_hub::export::{LookupError, PublicIp, PublicIpLookup};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use support::*;

const M: &str = "member-1";

async fn fleet() -> Fleet {
    Fleet::builder()
        .members([M])
        .start()
        .await
        .expect("fleet starts")
}

/// The reasons of the Events about ServiceExports in `ns`; the apiserver's own Events (its
/// ClusterIP repair loop can report a Service it has not seen allocated yet) are not ours.
async fn warning_reasons(member: &kube::Client, ns: &str) -> Vec<String> {
    Api::<Event>::namespaced(member.clone(), ns)
        .list(&ListParams::default().fields("involvedObject.kind=ServiceExport"))
        .await
        .expect("list events")
        .items
        .into_iter()
        .map(|e| e.reason.unwrap_or_default())
        .collect()
}

/// Sets shop/cart's weight annotation (`null` removes it).
async fn set_weight(member: &kube::Client, weight: serde_json::Value) {
    let annotations = serde_json::json!({ WEIGHT_ANNOTATION: weight });
    exports(member, "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .expect("patch shop/cart's weight");
}

/// An exporter that stops (member removed, SIGTERM) first creates the Events its reconciles
/// queued, within a bound, rather than dropping them: a converged export never emits them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_queued_when_the_exporter_stops_are_still_created() {
    let fleet = fleet().await;
    let member = fleet.member(M).client().await.expect("member client");
    let hub = fleet.hub().client().await.expect("hub client");
    namespace(&member, "queue").await;
    // Events at 2/s: the exports are written long before their Events.
    let slow_events = fleetnet_hub::client::Limits {
        qps: 2.0,
        burst: 1,
        ..Default::default()
    };
    let options = ExporterOptions {
        events_limits: Some(slow_events),
        ..Default::default()
    };
    let exporter = start_exporter(&fleet, M, options).await;
    let names = ["a", "b", "c"];
    for name in names {
        create_service(&member, &service("queue", name, 80)).await;
        create_export(&member, "queue", name, &[]).await;
    }
    for name in names {
        let ise = format!("queue-{name}");
        wait_ise(&hub, &fleet.hub_namespace(M), &ise, |_| true).await;
    }
    // Only the two Events every export gets: under load an export can be seen before its
    // Service, and then says `ServiceNotFound` first (a correct Event, not the one counted).
    let counted = async || {
        let mut reasons = warning_reasons(&member, "queue").await;
        reasons.retain(|r| r == "ValidServiceExport" || r == "PendingExportConflictResolution");
        reasons
    };
    let queued_at_stop = 2 * names.len() - counted().await.len();
    exporter.stop().await;
    let reasons = counted().await;
    assert_eq!(
        reasons.len(),
        2 * names.len(),
        "Valid and Pending for each export; {queued_at_stop} were still queued at stop: {reasons:?}"
    );
    assert!(
        queued_at_stop > 0,
        "nothing was queued at stop: the test proves nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_lifecycle_with_write_counts() {
    let fleet = fleet().await;
    let member = fleet.member(M).client().await.expect("member client");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(M);
    namespace(&member, "shop").await;
    let exporter = start_exporter(&fleet, M, ExporterOptions::default()).await;

    // 1. A Service without a ServiceExport: nothing happens.
    let svc = create_service(&member, &service("shop", "cart", 80)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(exporter.writes(), 0, "no ServiceExport, no writes");
    assert!(
        ises(&hub, &hub_ns)
            .get_opt("shop-cart")
            .await
            .expect("get")
            .is_none()
    );

    // 6+7+8. Export: finalizer + annotations, Valid + Conflict pending, ISE — at most 3 writes.
    create_export(&member, "shop", "cart", &[]).await;
    let ise = wait_ise(&hub, &hub_ns, "shop-cart", |_| true).await;
    let se = wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_CONFLICT,
        "Unknown",
        "ServicePendingConflictResolution",
    )
    .await;
    let fresh_export_writes = settled_writes(&exporter, Duration::from_secs(2)).await;
    assert!(
        fresh_export_writes <= 3,
        "fresh export cost {fresh_export_writes} writes: {:?} / {:?}",
        exporter.member_stats.snapshot(),
        exporter.hub_stats.snapshot()
    );
    let (status, reason, message) = condition(&se, CONDITION_VALID).expect("Valid");
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        (
            "True",
            "ServiceIsValid",
            "service shop/cart is valid for export"
        )
    );
    assert!(
        se.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == CLEANUP_FINALIZER)
    );
    let annotations = se.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("networking.fleet.azure.com/last-seen-resource-version"),
        svc.metadata.resource_version.as_ref()
    );
    let stamp: jiff::Timestamp = annotations["networking.fleet.azure.com/last-seen-timestamp"]
        .parse()
        .expect("RFC 3339");
    let r = &ise.spec.service_reference;
    assert_eq!(
        (
            r.cluster_id.as_str(),
            r.kind.as_str(),
            r.api_version.as_deref()
        ),
        (M, "Service", Some("v1"))
    );
    assert_eq!(r.namespaced_name, "shop/cart");
    assert_eq!(Some(&r.uid), svc.metadata.uid.as_ref());
    assert_eq!(r.exported_since.as_ref().map(|t| t.0), Some(stamp));
    assert_eq!(ise.spec.ports.len(), 1);
    assert_eq!(ise.spec.ports[0].port, 80);
    assert_eq!(ise.spec.ports[0].protocol.as_deref(), Some("TCP"));
    let raw: serde_json::Value = hub
        .request(http::Request::get(format!("/apis/networking.fleet.azure.com/v1alpha1/namespaces/{hub_ns}/internalserviceexports/shop-cart")).body(vec![]).expect("request"))
        .await
        .expect("raw ISE");
    assert!(
        raw["spec"].get("weight").is_none(),
        "no Traffic Manager fields when the feature is off"
    );
    // Events are created after the export's writes (a reconcile never waits for them).
    eventually(
        "the ValidServiceExport and PendingExportConflictResolution events",
        || async {
            let reasons = warning_reasons(&member, "shop").await;
            (reasons.iter().any(|r| r == "ValidServiceExport")
                && reasons
                    .iter()
                    .any(|r| r == "PendingExportConflictResolution"))
            .then_some(())
        },
    )
    .await;

    // Idempotent: a Service change that alters nothing exported costs no write.
    let before = exporter.writes();
    Api::<Service>::namespaced(member.clone(), "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("touch service");
    assert_eq!(
        settled_writes(&exporter, Duration::from_secs(2)).await,
        before,
        "unchanged export must cost 0 writes"
    );

    // A port change updates the ISE.
    Api::<Service>::namespaced(member.clone(), "shop")
        .patch(
            "cart",
            &PatchParams::default(),
            &Patch::Merge(
                &serde_json::json!({"spec": {"ports": [{"name": "http", "port": 8080}]}}),
            ),
        )
        .await
        .expect("change port");
    wait_ise(&hub, &hub_ns, "shop-cart", |i| {
        i.spec.ports.first().is_some_and(|p| p.port == 8080)
    })
    .await;

    // 10. The hub's conflict verdict is copied back, with the ServiceExport's generation.
    let verdict = serde_json::json!({"status": {"conditions": [{
        "type": "Conflict", "status": "False", "reason": "NoConflictFound",
        "message": "service shop/cart is exported without conflict",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 42
    }]}});
    ises(&hub, &hub_ns)
        .patch_status(
            "shop-cart",
            &PatchParams::default(),
            &Patch::Merge(&verdict),
        )
        .await
        .expect("hub verdict");
    let se = wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_CONFLICT,
        "False",
        "NoConflictFound",
    )
    .await;
    let conflict = se
        .conditions()
        .iter()
        .find(|c| c.type_ == CONDITION_CONFLICT)
        .expect("conflict")
        .clone();
    assert_eq!(conflict.observed_generation, se.metadata.generation);
    let before = settled_writes(&exporter, Duration::from_secs(1)).await;
    // Re-delivering the same verdict costs nothing.
    ises(&hub, &hub_ns)
        .patch_status(
            "shop-cart",
            &PatchParams::default(),
            &Patch::Merge(&verdict),
        )
        .await
        .expect("same verdict");
    assert_eq!(
        settled_writes(&exporter, Duration::from_secs(2)).await,
        before
    );

    // 5. Invalid weight: the export stays, Valid=False with the parse error.
    set_weight(&member, serde_json::json!("lots")).await;
    let se = wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_VALID,
        "False",
        "ServiceExportInvalidWeightAnnotation",
    )
    .await;
    assert!(condition(&se, CONDITION_VALID).is_some_and(|(_, _, m)| m.contains("lots")));
    assert!(
        ises(&hub, &hub_ns)
            .get_opt("shop-cart")
            .await
            .expect("get")
            .is_some(),
        "export kept"
    );
    // Weight 0: unexported, still valid.
    set_weight(&member, serde_json::json!("0")).await;
    let se = wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_VALID,
        "True",
        "ServiceIsValid",
    )
    .await;
    assert!(
        condition(&se, CONDITION_VALID)
            .is_some_and(|(_, _, m)| m == "exported service shop/cart with 0 weight"),
        "{:?}",
        condition(&se, CONDITION_VALID)
    );
    wait_ise_gone(&hub, &hub_ns, "shop-cart").await;
    // Weight back: exported afresh and Conflict re-armed.
    set_weight(&member, serde_json::json!(null)).await;
    wait_ise(&hub, &hub_ns, "shop-cart", |_| true).await;
    wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_CONFLICT,
        "Unknown",
        "ServicePendingConflictResolution",
    )
    .await;

    // 8. Service re-created with a new UID: unexported and exported afresh.
    let api = Api::<Service>::namespaced(member.clone(), "shop");
    api.delete("cart", &DeleteParams::default())
        .await
        .expect("delete service");
    wait_condition(
        &member,
        "shop",
        "cart",
        CONDITION_VALID,
        "False",
        "ServiceNotFound",
    )
    .await;
    wait_ise_gone(&hub, &hub_ns, "shop-cart").await;
    eventually("the ServiceNotFound event", || async {
        let reasons = warning_reasons(&member, "shop").await;
        reasons.iter().any(|r| r == "ServiceNotFound").then_some(())
    })
    .await;
    let recreated = create_service(&member, &service("shop", "cart", 80)).await;
    let ise = wait_ise(&hub, &hub_ns, "shop-cart", |i| {
        Some(&i.spec.service_reference.uid) == recreated.metadata.uid.as_ref()
    })
    .await;
    assert_eq!(ise.spec.service_reference.namespaced_name, "shop/cart");

    // 4. Ineligible (headless) Service.
    create_service(&member, &{
        let mut s = service("shop", "headless", 80);
        s.spec.as_mut().expect("spec").cluster_ip = Some("None".into());
        s
    })
    .await;
    create_export(&member, "shop", "headless", &[]).await;
    let se = wait_condition(
        &member,
        "shop",
        "headless",
        CONDITION_VALID,
        "False",
        "ServiceIneligible",
    )
    .await;
    assert!(
        condition(&se, CONDITION_VALID)
            .is_some_and(|(_, _, m)| m == "service shop/headless is not eligible for export")
    );
    assert!(
        ises(&hub, &hub_ns)
            .get_opt("shop-headless")
            .await
            .expect("get")
            .is_none()
    );

    // 2. Deleting the ServiceExport unexports and then lets it go.
    exports(&member, "shop")
        .delete("cart", &DeleteParams::default())
        .await
        .expect("delete export");
    wait_ise_gone(&hub, &hub_ns, "shop-cart").await;
    wait_gone(&exports(&member, "shop"), "cart").await;
    exporter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_export_before_service_and_name_collisions() {
    let fleet = fleet().await;
    let member = fleet.member(M).client().await.expect("member client");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(M);
    for ns in ["a", "a-b"] {
        namespace(&member, ns).await;
    }
    let exporter = start_exporter(&fleet, M, ExporterOptions::default()).await;

    // 3. ServiceExport first: not found, then exported once the Service appears.
    create_export(&member, "a", "b-c", &[]).await;
    let se = wait_condition(
        &member,
        "a",
        "b-c",
        CONDITION_VALID,
        "False",
        "ServiceNotFound",
    )
    .await;
    assert!(
        condition(&se, CONDITION_VALID).is_some_and(|(_, _, m)| m == "service a/b-c is not found")
    );
    assert!(
        se.metadata.finalizers.is_none(),
        "nothing exported, no finalizer"
    );
    create_service(&member, &service("a", "b-c", 80)).await;
    wait_ise(&hub, &hub_ns, "a-b-c", |i| {
        i.spec.service_reference.namespaced_name == "a/b-c"
    })
    .await;

    // `a-b/c` maps to the same hub name: reported on the second export, never overwritten.
    create_service(&member, &service("a-b", "c", 81)).await;
    create_export(&member, "a-b", "c", &[]).await;
    let se = wait_condition(
        &member,
        "a-b",
        "c",
        CONDITION_VALID,
        "False",
        "ServiceExportNameCollision",
    )
    .await;
    assert!(condition(&se, CONDITION_VALID).is_some_and(|(_, _, m)| m.contains("a/b-c")));
    let before = settled_writes(&exporter, Duration::from_secs(2)).await;
    let ise = ises(&hub, &hub_ns).get("a-b-c").await.expect("ISE");
    assert_eq!(
        ise.spec.service_reference.namespaced_name, "a/b-c",
        "the first export is untouched"
    );
    assert_eq!(ise.spec.ports[0].port, 80);
    // No flapping: nothing more is written while both exist.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(exporter.writes(), before);

    // Deleting the colliding export leaves the other one's ISE alone.
    exports(&member, "a-b")
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&exports(&member, "a-b"), "c").await;
    assert!(
        ises(&hub, &hub_ns)
            .get_opt("a-b-c")
            .await
            .expect("get")
            .is_some()
    );
    exporter.stop().await;
}

/// A stand-in for the Azure lookup (the real client is tested against a local ARM server).
struct FixedPublicIps {
    calls: AtomicU64,
    dns: bool,
}

#[async_trait::async_trait]
impl PublicIpLookup for FixedPublicIps {
    async fn find_by_address(
        &self,
        resource_group: &str,
        ip: &str,
    ) -> Result<Option<PublicIp>, LookupError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok((ip == "20.1.2.3").then(|| PublicIp {
            id: format!("/subscriptions/s/resourceGroups/{resource_group}/providers/Microsoft.Network/publicIPAddresses/pip-web"),
            dns_label_configured: self.dns,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_manager_fields_follow_the_load_balancer() {
    let fleet = fleet().await;
    let member = fleet.member(M).client().await.expect("member client");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(M);
    namespace(&member, "web").await;
    let lookup = Arc::new(FixedPublicIps {
        calls: AtomicU64::new(0),
        dns: true,
    });
    let exporter = start_exporter(
        &fleet,
        M,
        ExporterOptions {
            traffic_manager: true,
            public_ips: Some(lookup.clone()),
            allowed_resource_groups: vec!["rg-lb".into()],
            ..Default::default()
        },
    )
    .await;

    let mut svc = service("web", "front", 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    svc.metadata.annotations = Some(
        [(
            "service.beta.kubernetes.io/azure-load-balancer-resource-group".to_string(),
            " rg-lb ".to_string(),
        )]
        .into(),
    );
    create_service(&member, &svc).await;
    create_export(&member, "web", "front", &[(WEIGHT_ANNOTATION, "25")]).await;
    // No ingress yet: exported with weight and type, no public IP.
    let ise = wait_ise(&hub, &hub_ns, "web-front", |_| true).await;
    assert_eq!(ise.spec.weight, Some(25));
    assert_eq!(ise.spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(ise.spec.public_ip_resource_id, None);

    // The LB gets its address: the public IP is looked up in the annotated resource group.
    Api::<Service>::namespaced(member.clone(), "web")
        .patch_status(
            "front",
            &PatchParams::default(),
            &Patch::Merge(
                &serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": "20.1.2.3"}]}}}),
            ),
        )
        .await
        .expect("LB status");
    let ise = wait_ise(&hub, &hub_ns, "web-front", |i| {
        i.spec.public_ip_resource_id.is_some()
    })
    .await;
    assert!(
        ise.spec
            .public_ip_resource_id
            .as_deref()
            .is_some_and(|id| id.contains("/resourceGroups/rg-lb/"))
    );
    assert_eq!(ise.spec.is_dns_label_configured, Some(true));
    assert!(lookup.calls.load(Ordering::Relaxed) >= 1);

    // Turned internal: the public IP fields are cleared (the reference leaves them stale).
    Api::<Service>::namespaced(member.clone(), "web")
        .patch("front", &PatchParams::default(), &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {"service.beta.kubernetes.io/azure-load-balancer-internal": "true"}}})))
        .await
        .expect("internal");
    let ise = wait_ise(&hub, &hub_ns, "web-front", |i| {
        i.spec.is_internal_load_balancer == Some(true)
    })
    .await;
    assert_eq!(ise.spec.public_ip_resource_id, None);
    assert_eq!(ise.spec.is_dns_label_configured, None);
    exporter.stop().await;
}
