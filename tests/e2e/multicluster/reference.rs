//! fleet-networking's integration specs of `pkg/controllers/multiclusterservice`, one test
//! each, with the Events and the exact condition messages they leave implicit.

use super::*;
use fleetnet_hub::multicluster::decide::{MESSAGE_FOUND, MESSAGE_UNKNOWN};
use k8s_openapi::api::core::v1::ServicePort;
use kube::api::DeleteParams;

/// "Should create service import and derived service": the import made (owned), `Unknown`
/// while it has no clusters and no derived Service; the hub's verdict → the derived Service
/// and `Valid=True`; its load balancer copied; the import renamed → the derived Service and
/// the old import deleted, `Unknown` again; deleted → everything gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_create_service_import_and_derived_service() {
    let (fleet, member) = one_member().await;
    let conflicts_before = conflicts(&member).await;
    let running = start(&fleet).await;

    create_mcs(&member, MCS, SVC, &[]).await;
    wait_mcs(&member, MCS, "import label", |m| {
        labels_of(m).0 == Some(SVC)
    })
    .await;
    let mcs = wait_valid(&member, MCS, "Unknown", "UnknownServiceImport").await;
    assert_eq!(mcs.conditions().len(), 1);
    assert_eq!(
        valid(&mcs),
        Some((
            "Unknown".into(),
            "UnknownServiceImport".into(),
            MESSAGE_UNKNOWN.into(),
            Some(1)
        ))
    );
    assert_eq!(labels_of(&mcs).1, None, "no derived-service label");
    assert_eq!(
        mcs.metadata.finalizers.as_deref(),
        Some(&["networking.fleet.azure.com/service-resources-cleanup".to_string()][..])
    );
    let owned = eventually("the import, owned", || owners(&member, SVC)).await;
    assert_eq!(owned, ours());
    let uid = imports(&member)
        .get(SVC)
        .await
        .expect("import")
        .metadata
        .owner_references
        .unwrap_or_default()[0]
        .uid
        .clone();
    assert_eq!(Some(uid), mcs.metadata.uid);
    // Consistently no derived Service while the import has no clusters.
    for _ in 0..12 {
        let list = derived_services(&member)
            .list(&Default::default())
            .await
            .expect("list");
        assert!(list.items.is_empty(), "no derived Service yet");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wait_event(
        &member,
        MCS,
        "SuccessfulUpdateStatus",
        "Importing my-svc service and updated my-mcs status",
    )
    .await;

    set_verdict(
        &member,
        SVC,
        &["member1", "member2"],
        &[("http", 8080), ("https", 8843)],
    )
    .await;
    let mcs = wait_valid(&member, MCS, "True", "FoundServiceImport").await;
    assert_eq!(valid(&mcs).map(|v| v.2), Some(MESSAGE_FOUND.to_string()));
    assert_eq!(mcs.conditions().len(), 1);
    assert_eq!(labels_of(&mcs).1, Some(DERIVED));
    let svc = derived_services(&member)
        .get(DERIVED)
        .await
        .expect("the derived Service");
    let spec = svc.spec.clone().expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    let ports: Vec<(Option<String>, i32, Option<String>)> = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p: ServicePort| (p.name, p.port, p.protocol))
        .collect();
    assert_eq!(
        ports,
        [
            (Some("http".into()), 8080, Some("TCP".into())),
            (Some("https".into()), 8843, Some("TCP".into()))
        ]
    );
    let labels = svc.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels["networking.fleet.azure.com/multi-cluster-service-name"],
        MCS
    );
    assert_eq!(
        labels["networking.fleet.azure.com/multi-cluster-service-namespace"],
        NS
    );
    assert!(svc.metadata.annotations.unwrap_or_default().is_empty());
    wait_event(
        &member,
        MCS,
        "FoundValidService",
        "Found valid service my-svc and importing",
    )
    .await;
    wait_event(
        &member,
        MCS,
        "SuccessfulUpdateStatus",
        "Imported my-svc service and updated my-mcs status",
    )
    .await;

    // The load balancer's address, as the cloud provider writes it.
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}});
    derived_services(&member)
        .patch_status(DERIVED, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("service status");
    wait_mcs(&member, MCS, "the load balancer copied", |m| {
        let lb = m.status.as_ref().and_then(|s| s.load_balancer.clone());
        let ips: Vec<_> = lb
            .and_then(|lb| lb.ingress)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| i.ip)
            .collect();
        ips == ["10.0.0.1"]
    })
    .await;

    // The import renamed to one unknown to the hub.
    mcses(&member)
        .patch(
            MCS,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"serviceImport": {"name": "my-new-svc"}}})),
        )
        .await
        .expect("rename the import");
    wait_absent(&derived_services(&member), DERIVED).await;
    wait_absent(&imports(&member), SVC).await;
    eventually("the new import", || owners(&member, "my-new-svc")).await;
    let mcs = wait_valid(&member, MCS, "Unknown", "UnknownServiceImport").await;
    assert_eq!(mcs.conditions().len(), 1);
    let mcs = wait_mcs(&member, MCS, "derived label gone", |m| {
        labels_of(m) == (Some("my-new-svc"), None)
    })
    .await;
    let lb = mcs
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    assert!(lb.is_empty(), "the load balancer is reset: {lb:?}");

    mcses(&member)
        .delete(MCS, &DeleteParams::default())
        .await
        .expect("delete");
    wait_absent(&mcses(&member), MCS).await;
    assert!(
        imports(&member)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    assert!(
        derived_services(&member)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    wait_event(
        &member,
        MCS,
        "UnimportedService",
        "Unimported service my-ns/my-new-svc",
    )
    .await;
    // Our own writes are read back before the views show them: no write found its view stale.
    let conflicts = conflicts(&member).await - conflicts_before;
    assert!(
        conflicts == 0.0,
        "{conflicts} writes refused for a stale view"
    );
    running.shutdown().await;
}

/// Writes of the job's kinds the member's apiserver refused with 409, so far.
async fn conflicts(member: &kube::Client) -> f64 {
    let text = apiserver_metrics(member).await;
    ["multiclusterservices", "serviceimports", "services"]
        .iter()
        .map(|r| {
            sum(
                &text,
                "apiserver_request_total",
                &[&format!("resource=\"{r}\""), "code=\"409\""],
            )
        })
        .sum()
}

/// "ServiceImport has been owned by other MultiClusterService": left alone, `Unknown`, no
/// derived Service; once it is deleted, the import is made ours (within the 5 s retry). Then
/// the internal load balancer annotation reaches the derived Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_import_owned_by_another_mcs() {
    let (fleet, member) = one_member().await;
    let running = start(&fleet).await;

    let foreign: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "ServiceImport",
        "metadata": {"name": SVC, "namespace": NS, "ownerReferences": [{
            "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
            "name": "another-mcs", "uid": "12345", "controller": true, "blockOwnerDeletion": false
        }]}
    }))
    .expect("an import");
    imports(&member)
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create import");
    create_mcs(
        &member,
        MCS,
        SVC,
        &[(
            "networking.fleet.azure.com/azure-load-balancer-internal",
            "true",
        )],
    )
    .await;

    wait_mcs(&member, MCS, "import label", |m| {
        labels_of(m).0 == Some(SVC)
    })
    .await;
    let mcs = wait_valid(&member, MCS, "Unknown", "UnknownServiceImport").await;
    assert_eq!(labels_of(&mcs).1, None);
    let status = mcs.status.clone().expect("status");
    assert_eq!(status.conditions.len(), 1);
    assert!(
        status
            .load_balancer
            .and_then(|lb| lb.ingress)
            .unwrap_or_default()
            .is_empty()
    );
    let theirs = vec![(
        "MultiClusterService".into(),
        "another-mcs".into(),
        Some(true),
        Some(false),
    )];
    assert_eq!(owners(&member, SVC).await, Some(theirs));

    imports(&member)
        .delete(SVC, &DeleteParams::default())
        .await
        .expect("delete import");
    within(
        Duration::from_secs(20),
        "the import recreated, ours",
        || async { (owners(&member, SVC).await? == ours()).then_some(()) },
    )
    .await;
    assert!(
        derived_services(&member)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );

    set_verdict(&member, SVC, &["member1"], &[("http", 80)]).await;
    wait_valid(&member, MCS, "True", "FoundServiceImport").await;
    let svc = derived_services(&member)
        .get(DERIVED)
        .await
        .expect("the derived Service");
    let annotations = svc.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("service.beta.kubernetes.io/azure-load-balancer-internal")
            .map(String::as_str),
        Some("true")
    );

    mcses(&member)
        .delete(MCS, &DeleteParams::default())
        .await
        .expect("delete");
    wait_absent(&mcses(&member), MCS).await;
    wait_absent(&derived_services(&member), DERIVED).await;
    running.shutdown().await;
}
