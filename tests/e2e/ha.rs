//! High availability on real apiservers: a lease holder whose renew hangs (the hub apiserver
//! paused with SIGSTOP) stops writing before its lease could be taken, by the clock alone, and
//! writes again only once it holds the lease again; liveness follows the fleet runtime.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use fleetnet_hub::api::CLEANUP_FINALIZER;
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::config::{Config, LeaderElection};
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::Fleet;
use support::*;

/// The app's lease timing (client-go's defaults).
const LEASE_DURATION: Duration = Duration::from_secs(15);

fn config(fleet: &Fleet, dir: &Path, identity: &str) -> Config {
    config_builder(fleet, dir)
        .member_sync_timeout(Duration::from_secs(60))
        .rescan_interval(Duration::from_secs(5))
        .instance(identity)
        .leader_election(Some(LeaderElection {
            namespace: "default".into(),
            name: "fleetnet-hub".into(),
            identity: identity.into(),
            shard_members: false,
            shards: fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
        }))
        .build()
        .expect("a valid configuration")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_renew_hangs_stops_writing_before_its_lease_can_expire() {
    init_test_logs();
    let fleet = Fleet::builder()
        .members(["m1"])
        .start()
        .await
        .expect("fleet starts");
    let member = fleet.member("m1").client().await.expect("member client");
    namespace(&member, "shop").await;
    let running = app::start(
        config(&fleet, &fleet.member_kubeconfig_dir(), "replica-a"),
        Extensions::default(),
    )
    .await
    .expect("starts");
    eventually("leading", || async {
        running.claim.may_write().then_some(())
    })
    .await;
    eventually("m1 ready", || async {
        running
            .state
            .member("m1")
            .filter(|m| m.phase == Phase::Ready)
            .map(|_| ())
    })
    .await;
    assert_eq!(http_get(running.health_address, "/healthz").await.0, 200);

    // The hub stops answering: every renew hangs.
    let hub_pid = fleet.hub().pid().expect("hub runs");
    signal(hub_pid, "-STOP");
    let paused = Instant::now();
    let lost = eventually("leadership given up", || async {
        (!running.claim.may_write()).then(|| paused.elapsed())
    })
    .await;
    // Held at most until the last renew's start + the 10 s renew deadline: always before the
    // 15 s after which another replica may take the lease.
    assert!(
        lost < LEASE_DURATION,
        "still leading {lost:?} after the hub stopped answering"
    );

    // The member answers, but nothing is written to it while the lease is not held.
    create_service(&member, &service("shop", "cart", 80)).await;
    create_export(&member, "shop", "cart", &[]).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let se = exports(&member, "shop").get("cart").await.expect("get");
    assert!(
        !se.has_cleanup_finalizer() && se.status.is_none(),
        "a replica without its lease wrote to the member: {:?}",
        se.metadata.finalizers
    );

    signal(hub_pid, "-CONT");
    eventually("leading again", || async {
        running.claim.may_write().then_some(())
    })
    .await;
    let regained = paused.elapsed();
    let se = wait_condition(&member, "shop", "cart", "Valid", "True", "ServiceIsValid").await;
    assert!(
        se.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == CLEANUP_FINALIZER)
    );
    println!(
        "ha: leadership given up {lost:?} after the hub paused (lease {LEASE_DURATION:?}); regained {regained:?} after the pause began"
    );

    // Liveness follows the runtime: after shutdown the runtime is gone.
    let state = running.state.clone();
    running.shutdown().await;
    assert!(!state.runtime_alive());
}
