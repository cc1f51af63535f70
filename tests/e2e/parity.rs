//! Parity with fleet-networking where users and fleet's tooling look, on real apiservers: the
//! hub's verdict copied to the ServiceExport with fleet-networking's events (once per change,
//! never on a restart) and its export-duration histogram; the sandbox's hub namespaces.

use crate::support;
use crate::support::otlp;

use std::sync::Arc;
use std::time::Duration;

use fleetnet_hub::api::InternalServiceExport;
use fleetnet_hub::metrics::Metrics;
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use support::*;

const M: &str = "east";
const DURATION_COUNT: &str =
    r#"fleet_networking_service_export_duration_milliseconds_count{origin_cluster_id="east"}"#;

/// Events of `reason` in `ns`: (type, message, how many times the recorder says it happened).
async fn events(member: &kube::Client, ns: &str, reason: &str) -> Vec<(String, String, i32)> {
    Api::<Event>::namespaced(member.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let times = e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1);
            (
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
                times,
            )
        })
        .collect()
}

/// What fleet-networking's hub controller writes on an ISE once it has resolved conflicts.
async fn write_verdict(hub: &kube::Client, ns: &str, name: &str, conflict: bool) {
    let (status, reason, message) = if conflict {
        (
            "True",
            "ConflictFound",
            "service shop/cart is in conflict with other exported services",
        )
    } else {
        (
            "False",
            "NoConflictFound",
            "service shop/cart is exported without conflict",
        )
    };
    let body = serde_json::json!({"status": {"conditions": [{
        "type": "Conflict",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 0,
        "lastTransitionTime": "2026-12-03T00:00:00Z",
    }]}});
    ises(hub, ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .expect("write the verdict");
}

fn duration_count(metrics: &Metrics) -> f64 {
    sample(&metrics.encode_prometheus(), DURATION_COUNT).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_verdicts_are_copied_with_fleet_networking_events_and_export_duration() {
    let fleet = Fleet::builder()
        .members([M])
        .start()
        .await
        .expect("fleet starts");
    let member = fleet.member(M).client().await.expect("member client");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(M);
    namespace(&member, "shop").await;
    create_service(&member, &service("shop", "cart", 80)).await;
    create_export(&member, "shop", "cart", &[]).await;

    let metrics = Arc::new(Metrics::new());
    let exporter = otlp::start_observed(&fleet, M, metrics.clone()).await;
    wait_ise(&hub, &hub_ns, "shop-cart", |_| true).await;
    assert_eq!(duration_count(&metrics), 0.0, "no verdict yet");

    write_verdict(&hub, &hub_ns, "shop-cart", false).await;
    wait_condition(
        &member,
        "shop",
        "cart",
        "Conflict",
        "False",
        "NoConflictFound",
    )
    .await;
    let normal = eventually("the no-conflict event", || async {
        let e = events(&member, "shop", "NoServiceExportConflictFound").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        normal,
        vec![(
            "Normal".to_string(),
            "Service cart is exported without conflict".to_string(),
            1
        )]
    );
    eventually("the export duration observed", || async {
        (duration_count(&metrics) == 1.0).then_some(())
    })
    .await;

    write_verdict(&hub, &hub_ns, "shop-cart", true).await;
    wait_condition(&member, "shop", "cart", "Conflict", "True", "ConflictFound").await;
    let warning = eventually("the conflict event", || async {
        let e = events(&member, "shop", "ServiceExportConflictFound").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        warning,
        vec![(
            "Warning".to_string(),
            "Service cart is in conflict with other exported services".to_string(),
            1
        )]
    );
    eventually("the second verdict observed", || async {
        (duration_count(&metrics) == 2.0).then_some(())
    })
    .await;
    let text = metrics.encode_prometheus();
    let buckets: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("fleet_networking_service_export_duration_milliseconds_bucket"))
        .collect();
    assert_eq!(buckets.len(), 7, "6 buckets and +Inf: {buckets:?}");
    for le in ["1000", "2500", "5000", "10000", "25000", "50000", "+Inf"] {
        assert!(
            buckets.iter().any(|b| b.contains(&format!("le=\"{le}\""))),
            "bucket {le} in {buckets:?}"
        );
    }
    exporter.stop().await;

    // A restart reflects nothing anew: no event, no second observation of the same verdict.
    let restarted_metrics = Arc::new(Metrics::new());
    let restarted = otlp::start_observed(&fleet, M, restarted_metrics.clone()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        events(&member, "shop", "ServiceExportConflictFound").await,
        warning,
        "no event on a restart"
    );
    assert_eq!(
        events(&member, "shop", "NoServiceExportConflictFound").await,
        normal
    );
    assert_eq!(duration_count(&restarted_metrics), 0.0);
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_creates_exported_namespaces_on_the_hub() {
    let fleet = Fleet::builder()
        .members([M])
        .start()
        .await
        .expect("fleet starts");
    let hub = fleet.hub().client().await.expect("hub client");
    let mut ise = InternalServiceExport {
        api_version: Some(format!("{}/v1alpha1", fleetnet_hub::api::GROUP)),
        kind: Some("InternalServiceExport".into()),
        ..Default::default()
    };
    ise.metadata.name = Some("demo-x-hello".into());
    ise.spec.service_reference.cluster_id = M.into();
    ise.spec.service_reference.kind = "Service".into();
    ise.spec.service_reference.namespace = "demo-x".into();
    ise.spec.service_reference.name = "hello".into();
    ise.spec.service_reference.namespaced_name = "demo-x/hello".into();
    ise.spec.service_reference.resource_version = "1".into();
    ise.spec.service_reference.uid = "u".into();
    ises(&hub, &fleet.hub_namespace(M))
        .create(&PostParams::default(), &ise)
        .await
        .expect("create ISE");
    let mirror = tokio::spawn(fleetnet_hub::sandbox::mirror_export_namespaces(hub.clone()));
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    eventually("namespace demo-x on the hub", || async {
        namespaces.get_opt("demo-x").await.ok().flatten()
    })
    .await;
    mirror.abort();
}
