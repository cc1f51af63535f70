//! At scale: hundreds of members stay put and coordination stays constant; control traffic
//! never waits behind a backlog of writes.

use super::*;

/// The export jobs alone.
const EXPORT_JOBS: &str = "serviceexport,endpointslice,endpointsliceexport";

/// 300 member names on one member API server (each name its own kubeconfig and hub namespace,
/// as 300 clusters would be) over 3 replicas: every member owned by exactly one; then a quiet
/// minute in which no shard changes hands and the hub, counting for itself, serves the Lease
/// traffic of the three within a bound that does not depend on the member count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_members_stay_put_and_coordination_stays_constant() {
    // 300 names on one member apiserver and one hub on 2 cores: the export jobs, whose sharding
    // this measures; every job at 1,000 members is the benchmark's (`--fleet-size`).
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    const NAMES: usize = 300;
    const QUIET: Duration = Duration::from_secs(60);
    let (fleet, hub) = quiet_fleet(["m1"]).await;
    let dir = fleet.scratch_dir().join("fleet-of-300");
    std::fs::create_dir_all(&dir).expect("kubeconfig dir");
    let kubeconfig =
        std::fs::read(fleet.member_kubeconfig_dir().join("m1.yaml")).expect("m1 kubeconfig");
    let names: Vec<String> = (0..NAMES).map(|i| format!("f{i:03}")).collect();
    for name in &names {
        std::fs::write(dir.join(format!("{name}.yaml")), &kubeconfig).expect("kubeconfig");
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(name))
            .await
            .expect("hub namespace");
    }
    let access = Access {
        kubeconfig_dir: dir,
        ..Access::admin(&fleet)
    };
    let replicas: Vec<Replica> = ["replica-a", "replica-b", "replica-c"]
        .iter()
        .map(|name| replica(name, &access, &["--controllers", EXPORT_JOBS]))
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let members: Vec<&str> = names.iter().map(String::as_str).collect();
    let started = Instant::now();
    let before = settled(&hub, &all, &members).await;
    let engaged = started.elapsed();

    let transitions = shard_transitions(&hub).await;
    let leases = ["resource=\"leases\""];
    let (lease_requests, requests) = (
        hub_requests(&hub, &leases).await,
        hub_requests(&hub, &[]).await,
    );
    let quiet = Instant::now();
    tokio::time::sleep(QUIET).await;
    let secs = quiet.elapsed().as_secs_f64();
    let lease_rate = (hub_requests(&hub, &leases).await - lease_requests) / secs;
    let hub_rate = (hub_requests(&hub, &[]).await - requests) / secs;
    let after = ownership(&hub, &all, &members).await;
    let per_replica: Vec<usize> = all
        .iter()
        .map(|r| before.values().filter(|o| **o == r.name).count())
        .collect();
    println!(
        "sharding: {NAMES} members on 3 replicas ({per_replica:?}) engaged in {engaged:?}; quiet {secs:.0} s: hub {hub_rate:.1} requests/s, {lease_rate:.1} of them Leases; {} shard hand-offs",
        shard_transitions(&hub).await - transitions
    );
    assert_eq!(
        after.as_ref(),
        Some(&before),
        "members changed owner while nothing changed"
    );
    assert_eq!(
        shard_transitions(&hub).await,
        transitions,
        "shards changed hands while nothing changed"
    );
    // 3 × (list + announcement) + one renewal per shard (17), every 2 s: 11.5/s, whatever the
    // number of members.
    assert!(
        lease_rate <= 13.0,
        "{lease_rate:.1} Lease requests/s for 3 replicas"
    );
}

/// Two replicas on a hub budget of 1 request/s, one of them with a backlog of ISE creates: the
/// hub stays reachable for both (reads go before writes); when the other is killed (SIGKILL), its
/// members are synced on the survivor within seconds of the takeover despite the backlog, and
/// a new export of one of them reaches the hub within the lease duration + a few tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_traffic_never_waits_behind_a_backlog_of_writes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    init_test_logs();
    const BACKLOG: usize = 30;
    let (fleet, hub) = quiet_fleet(MEMBERS).await;
    let admin = Access::admin(&fleet);
    // The export path's sharding under a 1/s hub budget: the import side's hub lists (three more
    // per member) would wait in the same line; their cost is the benchmark's (`--fleet-size`).
    let budget = [
        "--hub-api-qps",
        "1",
        "--hub-api-burst",
        "1",
        "--controllers",
        EXPORT_JOBS,
    ];
    let a = replica("replica-a", &admin, &budget);
    let mut b = replica("replica-b", &admin, &budget);
    let owners = settled(&hub, &[&a, &b], &MEMBERS).await;
    let of = |r: &Replica| owned_by(&owners, r, &MEMBERS);
    let (busy, orphans) = (of(&a)[0], of(&b));
    // The backlog: BACKLOG ISE creates for one of a's members, at 1/s.
    let client = fleet.member(busy).client().await.expect("member");
    namespace(&client, "shop").await;
    for i in 0..BACKLOG {
        create_service(&client, &service("shop", &format!("bulk-{i}"), 80)).await;
        create_export(&client, "shop", &format!("bulk-{i}"), &[]).await;
    }
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member");
        namespace(&client, "shop").await;
        create_service(&client, &service("shop", "after", 80)).await;
    }
    b.kill();
    let killed = Instant::now();
    let mut unreachable = 0;
    let took_over = loop {
        if a.hub_reachable().await != Some(true) {
            unreachable += 1;
        }
        let holders = holders(&hub, &MEMBERS).await;
        if orphans
            .iter()
            .all(|m| holders.get(*m).is_some_and(|h| a.is(h)))
        {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "no takeover");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let synced = loop {
        if a.hub_reachable().await != Some(true) {
            unreachable += 1;
        }
        let engaged = a.engaged().await;
        if orphans.iter().all(|m| engaged.contains(*m)) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(90),
            "orphans not synced"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for m in &orphans {
        let client = fleet.member(m).client().await.expect("member");
        create_export(&client, "shop", "after", &[]).await;
    }
    for m in &orphans {
        wait_ise(&hub, &fleet.hub_namespace(m), "shop-after", |_| true).await;
    }
    let exported = killed.elapsed();
    let backlog_left = BACKLOG
        - ises(&hub, &fleet.hub_namespace(busy))
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len();
    println!(
        "sharding (hub budget 1/s, {BACKLOG} creates queued): {} orphans owned after {took_over:?}, synced after {synced:?}, new exports in the hub after {exported:?} with {backlog_left} creates still queued; hub unreachable in {unreachable} probes",
        orphans.len()
    );
    assert_eq!(
        unreachable, 0,
        "the hub was reported unreachable behind our own queue"
    );
    assert!(
        synced < took_over + Duration::from_secs(10),
        "handed-over members synced {:?} after the takeover",
        synced - took_over
    );
    assert!(
        exported < LEASE_DURATION + Duration::from_secs(15),
        "new exports of the orphans took {exported:?}"
    );
}
