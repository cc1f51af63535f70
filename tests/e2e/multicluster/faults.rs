//! What the reference leaves to its environment: a member without the fleet system namespace.

use super::*;

/// The derived Service cannot be created until the namespace exists: the MultiClusterService
/// keeps its derived-service label and `Valid=Unknown`, is retried with backoff, and is
/// imported once the namespace is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_fleet_system_namespace_delays_the_derived_service() {
    let fleet = Fleet::builder().members([M]).start().await.expect("fleet");
    let member = fleet.member(M).client().await.expect("member client");
    namespace(&member, NS).await;
    let running = start(&fleet).await;

    create_mcs(&member, MCS, SVC, &[]).await;
    eventually("the import", || owners(&member, SVC)).await;
    set_verdict(&member, SVC, &["member1"], &[("http", 80)]).await;
    wait_mcs(&member, MCS, "derived label", |m| {
        labels_of(m).1 == Some(DERIVED)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mcs = mcses(&member).get(MCS).await.expect("mcs");
    assert_eq!(valid(&mcs).map(|v| v.0), Some("Unknown".to_string()));

    namespace(&member, SYSTEM).await;
    wait_valid(&member, MCS, "True", "FoundServiceImport").await;
    derived_services(&member)
        .get(DERIVED)
        .await
        .expect("the derived Service");
    running.shutdown().await;
}
