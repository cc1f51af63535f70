//! A restart of the process writes nothing for converged MultiClusterServices (imported, with
//! a load balancer, and pending).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_writes_nothing() {
    let (fleet, member) = one_member().await;
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
    assert_eq!(requests(&member, "services", "DELETE").await, 0.0);
    running.shutdown().await;
}
