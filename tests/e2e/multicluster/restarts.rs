//! A restart of the process writes nothing for converged MultiClusterServices (imported, with
//! a load balancer, and pending).

use super::*;
use fleetnet_hub::multicluster::decide::{DERIVED_SERVICE_LABEL, SERVICE_IMPORT_LABEL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing() {
    let (fleet, member) = one_member().await;
    let deletes = requests(&member, "services", "DELETE").await;
    let running = start(&fleet).await;

    create_mcs(&member, MCS, SVC, &[]).await;
    create_mcs(&member, "pending", "unknown-svc", &[]).await;
    eventually("the import", || owners(&member, SVC)).await;
    set_verdict(&member, SVC, &["member1"], &[("http", 80)]).await;
    wait_valid(&member, MCS, "True", "FoundServiceImport").await;
    wait_valid(&member, "pending", "Unknown", "UnknownServiceImport").await;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}});
    derived_services(&member)
        .patch_status(DERIVED, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("service status");
    wait_mcs(&member, MCS, "the load balancer copied", |m| {
        m.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .is_some_and(|i| !i.is_empty())
    })
    .await;
    let before = settled_writes(&member, Duration::from_secs(2)).await;
    running.shutdown().await;

    let running = start(&fleet).await;
    let after = settled_writes(&member, Duration::from_secs(3)).await;
    assert_eq!(after - before, 0.0, "a restart wrote to the member");
    assert_eq!(requests(&member, "services", "DELETE").await - deletes, 0.0);
    running.shutdown().await;
}

/// Migration from the agent: a MultiClusterService, its import and its derived Service as the
/// agent's `mcs-controller-manager` left them are taken over without a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_agent_made_are_adopted_without_a_write() {
    let (fleet, member) = one_member().await;
    let mcs: MultiClusterService = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
        "metadata": {"name": MCS, "namespace": NS,
            "finalizers": ["networking.fleet.azure.com/service-resources-cleanup"],
            "labels": {SERVICE_IMPORT_LABEL: SVC, DERIVED_SERVICE_LABEL: DERIVED}},
        "spec": {"serviceImport": {"name": SVC}}
    }))
    .expect("a MultiClusterService");
    let mcs = mcses(&member)
        .create(&PostParams::default(), &mcs)
        .await
        .expect("create");
    let import: ServiceImport = serde_json::from_value(json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "ServiceImport",
        "metadata": {"name": SVC, "namespace": NS, "ownerReferences": [{
            "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
            "name": MCS, "uid": mcs.metadata.uid, "controller": true, "blockOwnerDeletion": true
        }]}
    }))
    .expect("an import");
    imports(&member)
        .create(&PostParams::default(), &import)
        .await
        .expect("create import");
    set_verdict(&member, SVC, &["member1"], &[("http", 80)]).await;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": DERIVED, "namespace": SYSTEM, "labels": {
            "networking.fleet.azure.com/multi-cluster-service-name": MCS,
            "networking.fleet.azure.com/multi-cluster-service-namespace": NS}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    }))
    .expect("a Service");
    create_service(&member, &service).await;
    let lb = json!({"ingress": [{"ip": "10.0.0.7"}]});
    let service = derived_services(&member)
        .patch_status(
            DERIVED,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"loadBalancer": lb}})),
        )
        .await
        .expect("service status");
    // As the agent copies it (with what the API server defaulted, `ipMode`).
    let lb = service.status.and_then(|s| s.load_balancer);
    let status = json!({"status": {"loadBalancer": lb, "conditions": [{
        "type": "Valid", "status": "True", "reason": "FoundServiceImport",
        "message": "found valid service import", "observedGeneration": 1,
        "lastTransitionTime": "2026-12-05T00:00:00Z"}]}});
    mcses(&member)
        .patch_status(MCS, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("mcs status");
    settled_writes(&member, Duration::from_secs(1)).await;
    let before = writes_by(&member).await;

    let running = start(&fleet).await;
    settled_writes(&member, Duration::from_secs(3)).await;
    assert_eq!(
        writes_by(&member).await,
        before,
        "taking over wrote to the member"
    );
    assert!(events(&member, MCS, "FoundValidService").await.is_empty());
    running.shutdown().await;
}
